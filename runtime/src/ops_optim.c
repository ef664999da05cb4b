/* ops_optim.c — queued foreach and fused optimizer ops: the full checks run
 * on the calling thread, then every list of descriptors (and the per-tensor
 * scalars) is copied into one heap block that the command owns and frees
 * once the kernel has run. One enqueue per call, whatever the list length. */
#include <stdlib.h>

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
    void *block;
    union {
        vt_foreach_args fe;
        vt_fused_adam_args adam;
        vt_fused_sgd_args sgd;
    } u;
} owned_cmd;

static vt_status foreach_kernel(void *p) {
    owned_cmd *c = p;
    vt_status s = vt_foreach(&c->u.fe);
    free(c->block);
    return s;
}
static vt_status adam_kernel(void *p) {
    owned_cmd *c = p;
    vt_status s = vt_fused_adam(&c->u.adam);
    free(c->block);
    return s;
}
static vt_status sgd_kernel(void *p) {
    owned_cmd *c = p;
    vt_status s = vt_fused_sgd(&c->u.sgd);
    free(c->block);
    return s;
}

static vt_status enqueue_owned(int dev, const char *name, vt_kernel_fn fn, owned_cmd *c) {
    vt_status s = vt_enqueue(dev, name, fn, c, sizeof *c);
    /* Strict: the command owns the block from here. A failed enqueue never
     * ran the kernel, so the block is still ours to free. */
    if (s != VT_OK && vt_get_eager_mode() != VT_EAGER_DEBUG) free(c->block);
    return s;
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
    int64_t n = x->n;
    int lists = !!x->out + !!x->a + !!x->b + !!x->c + !!x->scalar_tensor;
    size_t bytes = (size_t)n * lists * sizeof(vt_tensor) + (x->scalars ? (size_t)n * sizeof(double) : 0);
    owned_cmd c;
    memset(&c, 0, sizeof c);
    if (!(c.block = alloc_block(bytes, name))) return VT_ERR_OUT_OF_MEMORY;
    char *cur = c.block;
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
    return enqueue_owned(dev, name, foreach_kernel, &c);
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
    if (!(c.block = alloc_block(bytes, name))) return VT_ERR_OUT_OF_MEMORY;
    char *cur = c.block;
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
    return enqueue_owned(dev, name, adam_kernel, &c);
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
    if (!(c.block = alloc_block(bytes, name))) return VT_ERR_OUT_OF_MEMORY;
    char *cur = c.block;
    c.u.sgd = *x;
    c.u.sgd.params = copy_list(&cur, x->params, n);
    c.u.sgd.grads = copy_list(&cur, x->grads, n);
    c.u.sgd.momentum_buffers = x->momentum != 0 ? copy_list(&cur, x->momentum_buffers, n) : NULL;
    c.u.sgd.lr_tensor = copy_list(&cur, x->lr_tensor, 1);
    c.u.sgd.grad_scale = copy_list(&cur, x->grad_scale, 1);
    c.u.sgd.found_inf = copy_list(&cur, x->found_inf, 1);
    return enqueue_owned(dev, name, sgd_kernel, &c);
}
