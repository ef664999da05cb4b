/* ops_optim.c — queued foreach and fused optimizer ops: the full checks run
 * on the calling thread, then every list of descriptors (and the per-tensor
 * scalars) is copied into one heap block that the command owns (the queue
 * frees it once the command has run). One enqueue per call, whatever the
 * list length. Entry i of every list is checked against entry i of the
 * others: an update in place (out[i] == a[i]) is elementwise. */
#include <stdlib.h>

#include "graph/node.h"
#include "internal.h"

/* Copies n descriptors (NULL list: nothing) into the block at *cur. */
static const vt_tensor *copy_list(char **cur, const vt_tensor *src, int64_t n) {
    if (!src) return NULL;
    vt_tensor *dst = (vt_tensor *)*cur;
    memcpy(dst, src, (size_t)n * sizeof *dst);
    *cur += (size_t)n * sizeof *dst;
    return dst;
}

typedef struct owned_cmd {
    union {
        vt_foreach_args fe;
        vt_fused_adam_args adam;
        vt_fused_sgd_args sgd;
    } u;
} owned_cmd;

static vt_status foreach_kernel(void *p) { return vt_foreach(&((owned_cmd *)p)->u.fe); }
static vt_status adam_kernel(void *p) { return vt_fused_adam(&((owned_cmd *)p)->u.adam); }
static vt_status sgd_kernel(void *p) { return vt_fused_sgd(&((owned_cmd *)p)->u.sgd); }

/* The uses of per-parameter lists (in the command's block). */
typedef struct use_list {
    vt_use *u;
    int n;
} use_list;

static void add_list(use_list *l, const vt_tensor *list, int64_t n, unsigned flags) {
    if (!list) return;
    for (int64_t i = 0; i < n; i++) l->u[l->n++] = (vt_use){(vt_tensor *)&list[i], flags, (int32_t)(i + 1)};
}

static void add_one(use_list *l, const vt_tensor *t, unsigned flags) {
    if (t) l->u[l->n++] = (vt_use){(vt_tensor *)t, flags, 0};
}

/* Check the uses, then enqueue; the command owns block from here. */
static vt_status enqueue_owned(int dev, const char *name, vt_kernel_fn fn, owned_cmd *c, void *block, use_list *l) {
    vt_prepared p;
    vt_status s = vt_uses_prepare(dev, name, l->u, l->n, &p);
    free(l->u);
    if (s != VT_OK) {
        free(block);
        return s;
    }
    p.payload = block;
    return vt_enqueue_prepared(dev, name, fn, c, sizeof *c, &p, VT_ENQ_AUTO);
}

static vt_status new_uses(use_list *l, int64_t count, const char *name, void *block) {
    l->n = 0;
    l->u = malloc(sizeof(vt_use) * (size_t)(count ? count : 1));
    if (l->u) return VT_OK;
    free(block);
    return vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: out of host memory for the command", name);
}

static void *alloc_block(size_t bytes, const char *name) {
    void *b = malloc(bytes ? bytes : 1);
    if (!b) vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: out of host memory for the command", name);
    return b;
}

vt_status vt_op_foreach(int dev, const char *name, const vt_foreach_args *x) {
    if (!name) name = "vt_op_foreach";
    vt_status s = vt_check_device(dev);
    if (s != VT_OK) return s;
    if ((s = vt_foreach_check(x)) != VT_OK) return vt_error_prefix(s, name);
    if (x->n == 0) return VT_OK;
    /* DeferAndFuse records an elementwise foreach op tensor by tensor, so an
     * optimizer step's chain of foreach ops fuses per parameter. */
    if (vt_get_eager_mode() == VT_EAGER_DEFER_AND_FUSE && vt_foreach_fusable(x) && !vt_on_queue_worker()) {
        for (int64_t i = 0; i < x->n && s == VT_OK; i++) {
            vt_node nd;
            vt_foreach_item_node(&nd, name, x, i);
            s = vt_node_submit(dev, &nd);
        }
        return s;
    }
    int64_t n = x->n;
    int lists = !!x->out + !!x->a + !!x->b + !!x->c + !!x->scalar_tensor;
    size_t bytes = (size_t)n * lists * sizeof(vt_tensor) + (x->scalars ? (size_t)n * sizeof(double) : 0);
    owned_cmd c;
    memset(&c, 0, sizeof c);
    void *block = alloc_block(bytes, name);
    if (!block) return VT_ERR_OUT_OF_MEMORY;
    char *cur = block;
    c.u.fe = *x;
    c.u.fe.out = copy_list(&cur, x->out, n);
    c.u.fe.a = copy_list(&cur, x->a, n);
    c.u.fe.b = copy_list(&cur, x->b, n);
    c.u.fe.c = copy_list(&cur, x->c, n);
    c.u.fe.scalar_tensor = copy_list(&cur, x->scalar_tensor, 1);
    if (x->scalars) {
        memcpy(cur, x->scalars, (size_t)n * sizeof(double));
        c.u.fe.scalars = (const double *)cur;
    }
    use_list l;
    if ((s = new_uses(&l, n * 4 + 1, name, block)) != VT_OK) return s;
    add_list(&l, c.u.fe.out, n, VT_USE_WRITE);
    add_list(&l, c.u.fe.a, n, VT_USE_READ | VT_USE_ALIAS_OK);
    add_list(&l, c.u.fe.b, n, VT_USE_READ | VT_USE_ALIAS_OK);
    add_list(&l, c.u.fe.c, n, VT_USE_READ | VT_USE_ALIAS_OK);
    add_one(&l, c.u.fe.scalar_tensor, VT_USE_READ | VT_USE_STAGE);
    return enqueue_owned(dev, name, foreach_kernel, &c, block, &l);
}

vt_status vt_op_fused_adam(int dev, const char *name, const vt_fused_adam_args *x) {
    if (!name) name = "vt_op_fused_adam";
    vt_status s = vt_check_device(dev);
    if (s != VT_OK) return s;
    if ((s = vt_fused_adam_check(x)) != VT_OK) return vt_error_prefix(s, name);
    if (x->n == 0) return VT_OK;
    int64_t n = x->n;
    size_t bytes = ((size_t)n * 6 + 3) * sizeof(vt_tensor);
    owned_cmd c;
    memset(&c, 0, sizeof c);
    void *block = alloc_block(bytes, name);
    if (!block) return VT_ERR_OUT_OF_MEMORY;
    char *cur = block;
    c.u.adam = *x;
    c.u.adam.params = copy_list(&cur, x->params, n);
    c.u.adam.grads = copy_list(&cur, x->grads, n);
    c.u.adam.exp_avgs = copy_list(&cur, x->exp_avgs, n);
    c.u.adam.exp_avg_sqs = copy_list(&cur, x->exp_avg_sqs, n);
    c.u.adam.max_exp_avg_sqs = x->amsgrad ? copy_list(&cur, x->max_exp_avg_sqs, n) : NULL;
    c.u.adam.steps = copy_list(&cur, x->steps, n);
    c.u.adam.lr_tensor = copy_list(&cur, x->lr_tensor, 1);
    c.u.adam.grad_scale = copy_list(&cur, x->grad_scale, 1);
    c.u.adam.found_inf = copy_list(&cur, x->found_inf, 1);
    /* params and the moments are updated in place; grads too when a grad
     * scale unscales them */
    const unsigned rw = VT_USE_READ | VT_USE_WRITE, in = VT_USE_READ | VT_USE_STAGE;
    use_list l;
    if ((s = new_uses(&l, n * 6 + 3, name, block)) != VT_OK) return s;
    add_list(&l, c.u.adam.params, n, rw);
    add_list(&l, c.u.adam.grads, n, x->grad_scale ? rw : VT_USE_READ);
    add_list(&l, c.u.adam.exp_avgs, n, rw);
    add_list(&l, c.u.adam.exp_avg_sqs, n, rw);
    add_list(&l, c.u.adam.max_exp_avg_sqs, n, rw);
    add_list(&l, c.u.adam.steps, n, VT_USE_READ);
    add_one(&l, c.u.adam.lr_tensor, in);
    add_one(&l, c.u.adam.grad_scale, in);
    add_one(&l, c.u.adam.found_inf, in);
    return enqueue_owned(dev, name, adam_kernel, &c, block, &l);
}

vt_status vt_op_fused_sgd(int dev, const char *name, const vt_fused_sgd_args *x) {
    if (!name) name = "vt_op_fused_sgd";
    vt_status s = vt_check_device(dev);
    if (s != VT_OK) return s;
    if ((s = vt_fused_sgd_check(x)) != VT_OK) return vt_error_prefix(s, name);
    if (x->n == 0) return VT_OK;
    int64_t n = x->n;
    size_t bytes = ((size_t)n * 3 + 3) * sizeof(vt_tensor);
    owned_cmd c;
    memset(&c, 0, sizeof c);
    void *block = alloc_block(bytes, name);
    if (!block) return VT_ERR_OUT_OF_MEMORY;
    char *cur = block;
    c.u.sgd = *x;
    c.u.sgd.params = copy_list(&cur, x->params, n);
    c.u.sgd.grads = copy_list(&cur, x->grads, n);
    c.u.sgd.momentum_buffers = x->momentum != 0 ? copy_list(&cur, x->momentum_buffers, n) : NULL;
    c.u.sgd.lr_tensor = copy_list(&cur, x->lr_tensor, 1);
    c.u.sgd.grad_scale = copy_list(&cur, x->grad_scale, 1);
    c.u.sgd.found_inf = copy_list(&cur, x->found_inf, 1);
    const unsigned rw = VT_USE_READ | VT_USE_WRITE, in = VT_USE_READ | VT_USE_STAGE;
    use_list l;
    if ((s = new_uses(&l, n * 3 + 3, name, block)) != VT_OK) return s;
    add_list(&l, c.u.sgd.params, n, rw);
    add_list(&l, c.u.sgd.grads, n, x->grad_scale ? rw : VT_USE_READ);
    add_list(&l, c.u.sgd.momentum_buffers, n, rw);
    add_one(&l, c.u.sgd.lr_tensor, in);
    add_one(&l, c.u.sgd.grad_scale, in);
    add_one(&l, c.u.sgd.found_inf, in);
    return enqueue_owned(dev, name, sgd_kernel, &c, block, &l);
}
