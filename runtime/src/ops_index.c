/* ops_index.c — queued indexing ops. Most are nodes (VT_NODE_INDEX,
 * kernels/index/index_node.c checks and runs them): shape and dtype errors
 * fail at the op, bad index values are found by the kernel on the queue
 * (reported at the next synchronisation). Advanced indexing, whose list of
 * up to VT_MAX_DIMS index tensors is longer than a node holds, is still a
 * command with the same checks. */
#include <stdlib.h>

#include "graph/node.h"
#include "kernels/index/index.h"

static vt_status pre(int dev, const char *name) {
    (void)name;
    return vt_check_device(dev);
}

/* A node of op on out with iparams ip[0..nip) (the dim first), the inputs
 * ins[0..nin) (NULL: absent) and the host value, submitted. */
static vt_status submit_p(int dev, const char *name, vt_index_op op, const vt_tensor *out, const int64_t *ip, int nip,
                          const vt_tensor *const *ins, int nin, vt_scalar value) {
    vt_status s = pre(dev, name);
    if (s != VT_OK) return s;
    if (!out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: NULL tensor", name);
    vt_node n;
    vt_node_init(&n, VT_NODE_INDEX, op, name);
    vt_node_add_out(&n, out);
    for (int i = 0; i < nip; i++) n.iparams[i] = ip[i];
    n.alpha = value;
    for (int k = 0; k < nin; k++) vt_node_add_optional(&n, ins[k]);
    return vt_node_submit(dev, &n);
}

static vt_status submit(int dev, const char *name, vt_index_op op, const vt_tensor *out, int64_t dim,
                        const vt_tensor *const *ins, int nin, vt_scalar value) {
    return submit_p(dev, name, op, out, &dim, 1, ins, nin, value);
}

static const vt_scalar none = {0};

/* ------------------------------------------------------------ along one dim */

vt_status vt_op_index_select(int dev, const char *name, const vt_tensor *out, const vt_tensor *in, int dim,
                             const vt_tensor *index) {
    const vt_tensor *ins[2] = {in, index};
    return submit(dev, name, VT_INDEX_OP_SELECT, out, dim, ins, 2, none);
}

vt_status vt_op_gather(int dev, const char *name, const vt_tensor *out, const vt_tensor *in, int dim,
                       const vt_tensor *index) {
    const vt_tensor *ins[2] = {in, index};
    return submit(dev, name, VT_INDEX_OP_GATHER, out, dim, ins, 2, none);
}

vt_status vt_op_scatter(int dev, const char *name, const vt_tensor *out, int dim, const vt_tensor *index,
                        const vt_tensor *src, const vt_tensor *value_t, vt_scalar value, vt_scatter_reduce op,
                        int include_self) {
    const int64_t ip[3] = {dim, op, include_self};
    const vt_tensor *ins[3] = {index, src, value_t};
    return submit_p(dev, name, VT_INDEX_OP_SCATTER, out, ip, 3, ins, 3, value);
}

vt_status vt_op_index_add(int dev, const char *name, const vt_tensor *out, int dim, const vt_tensor *index,
                          const vt_tensor *src, vt_scalar alpha) {
    const vt_tensor *ins[2] = {index, src};
    return submit(dev, name, VT_INDEX_OP_ADD, out, dim, ins, 2, alpha);
}

vt_status vt_op_index_copy(int dev, const char *name, const vt_tensor *out, int dim, const vt_tensor *index,
                           const vt_tensor *src) {
    const vt_tensor *ins[2] = {index, src};
    return submit(dev, name, VT_INDEX_OP_COPY, out, dim, ins, 2, none);
}

vt_status vt_op_index_fill(int dev, const char *name, const vt_tensor *out, int dim, const vt_tensor *index,
                           const vt_tensor *value_t, vt_scalar value) {
    const vt_tensor *ins[2] = {index, value_t};
    return submit(dev, name, VT_INDEX_OP_FILL, out, dim, ins, 2, value);
}

vt_status vt_op_take(int dev, const char *name, const vt_tensor *out, const vt_tensor *in, const vt_tensor *index) {
    if (!out || !in || !index) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "take(): NULL tensor");
    const vt_tensor *ins[2] = {in, index};
    return submit(dev, name, VT_INDEX_OP_TAKE, out, 0, ins, 2, none);
}

/* ------------------------------------------------------------ advanced indexing */

/* The index list lives on the heap (16 descriptors exceed VT_MAX_ARGS),
 * owned by the command. */
typedef struct adv_list {
    int n;
    unsigned present;
    vt_tensor t[VT_MAX_DIMS];
} adv_list;

typedef struct adv_cmd {
    int put, accumulate;
    adv_list *list;
    vt_tensor out, in;
} adv_cmd;

static vt_status adv_kernel(void *p) {
    const adv_cmd *c = p;
    const vt_tensor *ptrs[VT_MAX_DIMS];
    for (int i = 0; i < c->list->n; i++) ptrs[i] = (c->list->present >> i) & 1 ? &c->list->t[i] : NULL;
    return c->put ? vt_index_put(&c->out, c->list->n, ptrs, &c->in, c->accumulate)
                  : vt_index(&c->out, &c->in, c->list->n, ptrs);
}

static vt_status adv_enqueue(int dev, const char *name, int put, int accumulate, const vt_tensor *out,
                             const vt_tensor *in, int n, const vt_tensor *const *indices) {
    vt_status s = pre(dev, name);
    if (s != VT_OK) return s;
    const vt_tensor *self = put ? out : in, *other = put ? in : out;
    int32_t rnd;
    int64_t rsz[VT_MAX_DIMS];
    if ((s = vt_index_shape(self, n, indices, &rnd, rsz)) != VT_OK) return s;
    if (!other) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: NULL tensor", name);
    /* CPU's order: the values' shape, then their dtype */
    if (put) {
        vt_tensor v;
        if ((s = vt_broadcast_to(other, rnd, rsz, &v)) != VT_OK) return ix_values_mismatch(other, rnd, rsz, s);
    } else if (other->ndim != rnd || memcmp(other->sizes, rsz, sizeof(int64_t) * (size_t)rnd)) {
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "index(): out must have the result's shape");
    }
    if (other->dtype != self->dtype)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "Index put requires the source and destination dtypes match, "
                                                     "got %s for the destination and %s for the source.",
                            vt_dtype_name(self->dtype), vt_dtype_name(other->dtype));
    adv_cmd c;
    memset(&c, 0, sizeof c);
    c.list = calloc(1, sizeof *c.list);
    if (!c.list) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: no host memory for the index list", name);
    c.list->n = n;
    for (int i = 0; i < n; i++)
        if (indices[i]) c.list->present |= 1u << i, c.list->t[i] = *indices[i];
    c.put = put, c.accumulate = accumulate;
    c.out = *out;
    c.in = *in;
    /* index_put_ updates out in place (repeated elements allowed, as CPU
     * allows with a deprecation warning); its values and indices may not
     * overlap it. index makes out from in. */
    vt_use u[2 + VT_MAX_DIMS] = {{&c.out, VT_USE_WRITE | (put ? VT_USE_READ | VT_USE_SAME_VALUE : 0), 0},
                                 {&c.in, VT_USE_READ, 0}};
    int nu = 2;
    for (int i = 0; i < n; i++)
        if (indices[i]) u[nu++] = (vt_use){&c.list->t[i], VT_USE_READ, 0};
    vt_prepared p;
    if ((s = vt_uses_prepare(dev, name, u, nu, &p)) != VT_OK) {
        free(c.list);
        return s;
    }
    p.payload = c.list;
    return vt_enqueue_prepared(dev, name, adv_kernel, &c, sizeof c, &p, VT_ENQ_AUTO);
}

vt_status vt_op_index(int dev, const char *name, const vt_tensor *out, const vt_tensor *in, int n,
                      const vt_tensor *const *indices) {
    if (!out || !in) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "index(): NULL tensor");
    return adv_enqueue(dev, name, 0, 0, out, in, n, indices);
}

vt_status vt_op_index_put(int dev, const char *name, const vt_tensor *out, int n, const vt_tensor *const *indices,
                          const vt_tensor *values, int accumulate) {
    if (!out || !values) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "index_put(): NULL tensor");
    return adv_enqueue(dev, name, 1, accumulate, out, values, n, indices);
}

/* ------------------------------------------------------------ masks and nonzero */

vt_status vt_op_count_nonzero(int dev, const char *name, const vt_tensor *count, const vt_tensor *in) {
    const vt_tensor *ins[1] = {in};
    return submit(dev, name, VT_INDEX_OP_COUNT_NONZERO, count, 0, ins, 1, none);
}

vt_status vt_op_nonzero(int dev, const char *name, const vt_tensor *out, const vt_tensor *in) {
    const vt_tensor *ins[1] = {in};
    return submit(dev, name, VT_INDEX_OP_NONZERO, out, 0, ins, 1, none);
}

/* out = where(mask, value, out): an elementwise node, so DeferAndFuse
 * fuses it with what computes out (the scores of an attention written out:
 * a scale, the mask, a softmax). An out with repeated elements (an expanded
 * tensor, which CPU fills with a deprecation warning) cannot be an
 * elementwise output: the mask kernel fills it. */
vt_status vt_op_masked_fill(int dev, const char *name, const vt_tensor *out, const vt_tensor *mask,
                            const vt_tensor *value_t, vt_scalar value) {
    if (!name) name = "vt_op_masked_fill";
    const vt_tensor *ins[2] = {mask, value_t};
    if (!out || !mask) return submit(dev, name, VT_INDEX_OP_MASKED_FILL, out, 0, ins, 2, value); /* its NULL error */
    vt_status s = vt_tensor_validate(out, "out"); /* before its geometry is read */
    if (s != VT_OK) return vt_error_prefix(s, name);
    if (vt_view_internal_overlap(out)) return submit(dev, name, VT_INDEX_OP_MASKED_FILL, out, 0, ins, 2, value);
    s = ix_check_mask(name, mask);
    if (s == VT_OK && value_t && (s = vt_tensor_validate(value_t, "value")) != VT_OK) s = vt_error_prefix(s, name);
    if (s == VT_OK && value_t && vt_tensor_numel(value_t) != 1)
        s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: value must have one element", name);
    if (s != VT_OK) return s;
    vt_node n;
    vt_node_init(&n, VT_NODE_WHERE, 0, name);
    n.compute = out->dtype; /* a host value is held in out's dtype, as the mask kernel converts it */
    vt_node_add_out(&n, out);
    s = vt_node_add_src(&n, mask, NULL);
    if (s == VT_OK) s = value_t ? vt_node_add_src(&n, value_t, NULL) : vt_node_add_src(&n, NULL, &value);
    if (s == VT_OK) s = vt_node_add_src(&n, out, NULL);
    return s == VT_OK ? vt_node_submit(dev, &n) : s;
}

vt_status vt_op_masked_select(int dev, const char *name, const vt_tensor *out, const vt_tensor *in,
                              const vt_tensor *mask) {
    const vt_tensor *ins[2] = {in, mask};
    return submit(dev, name, VT_INDEX_OP_MASKED_SELECT, out, 0, ins, 2, none);
}

vt_status vt_op_masked_scatter(int dev, const char *name, const vt_tensor *out, const vt_tensor *mask,
                               const vt_tensor *source) {
    const vt_tensor *ins[2] = {mask, source};
    return submit(dev, name, VT_INDEX_OP_MASKED_SCATTER, out, 0, ins, 2, none);
}

/* ------------------------------------------------------------ embedding backward */

vt_status vt_op_embedding_dense_backward(int dev, const char *name, const vt_tensor *grad_weight,
                                         const vt_tensor *grad, const vt_tensor *indices, int64_t padding_idx,
                                         int scale_grad_by_freq) {
    const int64_t ip[2] = {padding_idx, scale_grad_by_freq};
    const vt_tensor *ins[2] = {grad, indices};
    return submit_p(dev, name, VT_INDEX_OP_EMBEDDING_BACKWARD, grad_weight, ip, 2, ins, 2, none);
}
