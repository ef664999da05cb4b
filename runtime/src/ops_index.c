/* ops_index.c — queued indexing ops, all nodes (VT_NODE_INDEX,
 * kernels/index/index_node.c checks and runs them): shape and dtype errors
 * fail at the op, bad index values are found by the kernel on the queue
 * (reported at the next synchronisation). */
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

/* A node of in (index: the input; index_put: the values) and the list of n
 * index tensors (NULL: the whole dim), which may be as long as self has dims. */
static vt_status submit_adv(int dev, const char *name, vt_index_op op, const vt_tensor *out, const vt_tensor *in,
                            int n, const vt_tensor *const *indices, int accumulate) {
    vt_status s = pre(dev, name);
    if (s != VT_OK) return s;
    const vt_tensor *self = op == VT_INDEX_OP_INDEX_PUT ? out : in;
    if (n < 0 || n > VT_MAX_DIMS || (n > 0 && !indices))
        return vt_set_error(VT_ERR_INDEX, "too many indices for tensor of dimension %d (got %d)", (int)self->ndim, n);
    vt_node nd;
    vt_node_init(&nd, VT_NODE_INDEX, op, name);
    vt_node_add_out(&nd, out);
    nd.iparams[0] = accumulate;
    vt_node_add_optional(&nd, in);
    for (int i = 0; i < n; i++) vt_node_add_optional(&nd, indices[i]);
    return vt_node_submit(dev, &nd);
}

vt_status vt_op_index(int dev, const char *name, const vt_tensor *out, const vt_tensor *in, int n,
                      const vt_tensor *const *indices) {
    if (!out || !in) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "index(): NULL tensor");
    return submit_adv(dev, name, VT_INDEX_OP_INDEX, out, in, n, indices, 0);
}

vt_status vt_op_index_put(int dev, const char *name, const vt_tensor *out, int n, const vt_tensor *const *indices,
                          const vt_tensor *values, int accumulate) {
    if (!out || !values) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "index_put(): NULL tensor");
    return submit_adv(dev, name, VT_INDEX_OP_INDEX_PUT, out, values, n, indices, accumulate);
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
