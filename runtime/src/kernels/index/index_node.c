/* index_node.c — the indexing family as nodes (VT_NODE_INDEX, the ops of
 * index.def): the node's check (the kernels' shape and dtype checks, run
 * once when the node is built, in PyTorch's wording), how each op uses its
 * tensors, its kernel and its scalar reference. Bad index values are found
 * by the kernel, on the queue. As on CPU, an output may not overlap the
 * data or indices it is computed from (at::assert_no_overlap); fills of
 * repeated elements are allowed. */
#include "graph/node.h"
#include "kernels/index/index.h"

static const char *const names[VT_INDEX_OP_COUNT] = {
#define VT_INDEX_OP(e, name) #name,
#include "kernels/index/index.def"
#undef VT_INDEX_OP
};

const char *vt_index_op_name(vt_index_op op) { return (unsigned)op < VT_INDEX_OP_COUNT ? names[op] : "invalid"; }

static const vt_tensor *src_opt(const vt_node *n, int k) { return vt_node_has_src(n, k) ? &n->src[k] : NULL; }

/* ------------------------------------------------------------ check */

/* nsrc inputs, those past `required` optional; one output; no host scalars */
static vt_status counts(const vt_node *n, int nsrc, int required) {
    vt_status s = vt_node_check_counts(n, 1, nsrc);
    if (s != VT_OK) return s;
    if (n->absent & 1)
        s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: NULL tensor", n->name);
    else if (n->host)
        s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: inputs are tensors", n->name);
    for (int k = 0; k < required && s == VT_OK; k++)
        if (!vt_node_has_src(n, k)) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: NULL tensor", n->name);
    return s;
}

static vt_status check_mask_op(const vt_node *n) {
    const vt_tensor *out = &n->out[0], *in = &n->src[0];
    const int op = n->op;
    vt_status s = vt_tensor_validate(out, "out");
    if (s != VT_OK) return vt_error_prefix(s, n->name);
    const int has_in = op == VT_INDEX_OP_COUNT_NONZERO || op == VT_INDEX_OP_NONZERO || op == VT_INDEX_OP_MASKED_SELECT;
    const vt_tensor *mask = op == VT_INDEX_OP_MASKED_SELECT ? &n->src[1]
                            : op == VT_INDEX_OP_MASKED_SCATTER || op == VT_INDEX_OP_MASKED_FILL ? &n->src[0]
                                                                                                  : NULL;
    if (has_in && (s = vt_tensor_validate(in, "input")) != VT_OK) return vt_error_prefix(s, n->name);
    if (op == VT_INDEX_OP_MASKED_SCATTER && (s = vt_tensor_validate(&n->src[1], "input")) != VT_OK)
        return vt_error_prefix(s, n->name);
    if (mask && (s = ix_check_mask(n->name, mask)) != VT_OK) return s;
    vt_tensor tmp;
    int32_t nd;
    int64_t sz[VT_MAX_DIMS];
    switch (op) {
    case VT_INDEX_OP_COUNT_NONZERO:
        if (out->dtype != VT_I64 || vt_tensor_numel(out) != 1)
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: count must be one int64 element", n->name);
        return VT_OK;
    case VT_INDEX_OP_NONZERO:
        if (out->dtype != VT_I64 || out->ndim != 2 || out->sizes[1] != in->ndim)
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: out must be int64 [n, ndim]", n->name);
        return VT_OK;
    case VT_INDEX_OP_MASKED_SELECT:
        if ((s = ix_broadcast_shape(in, mask, &nd, sz)) != VT_OK) return s;
        if (out->ndim != 1 || out->dtype != in->dtype)
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: out must be 1-d of input's dtype", n->name);
        return VT_OK;
    default: /* masked_scatter, masked_fill */
        if ((s = vt_broadcast_to(mask, out->ndim, out->sizes, &tmp)) != VT_OK) return s;
        if (op == VT_INDEX_OP_MASKED_SCATTER && n->src[1].dtype != out->dtype)
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: source and self must have the same dtype", n->name);
        if (op == VT_INDEX_OP_MASKED_FILL && vt_node_has_src(n, 1)) {
            if ((s = vt_tensor_validate(&n->src[1], "value")) != VT_OK) return vt_error_prefix(s, n->name);
            if (vt_tensor_numel(&n->src[1]) != 1)
                return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: value must have one element", n->name);
        }
        return VT_OK;
    }
}

/* Advanced indexing's list: src[1..] (absent: a whole dim); returns its length. */
static int index_list(const vt_node *n, const vt_tensor **list) {
    const int nidx = n->nsrc - 1;
    for (int i = 0; i < nidx && i < VT_MAX_DIMS; i++) list[i] = src_opt(n, 1 + i);
    return nidx;
}

/* Advanced indexing: the result's shape from self (in; out for index_put)
 * and the list src[1..], then, in CPU's order, the other tensor's shape and
 * its dtype. */
static vt_status check_adv(const vt_node *n) {
    const int put = n->op == VT_INDEX_OP_INDEX_PUT;
    vt_status s = n->nsrc < 1 ? counts(n, 1, 1) : counts(n, n->nsrc, 1);
    if (s != VT_OK) return s;
    const vt_tensor *list[VT_MAX_DIMS];
    const int nidx = index_list(n, list);
    const vt_tensor *self = put ? &n->out[0] : &n->src[0], *other = put ? &n->src[0] : &n->out[0];
    int32_t rnd;
    int64_t rsz[VT_MAX_DIMS];
    if ((s = vt_index_shape(self, nidx, list, &rnd, rsz)) != VT_OK) return s;
    if ((s = vt_tensor_validate(other, put ? "values" : "out")) != VT_OK) return vt_error_prefix(s, n->name);
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
    return VT_OK;
}

/* Shape errors keep the kernels' PyTorch-style wording (no op prefix). */
vt_status vt_index_node_check(const vt_node *n) {
    const vt_tensor *out = &n->out[0];
    const int dim = (int)n->iparams[0];
    vt_status s;
    switch ((vt_index_op)n->op) {
    case VT_INDEX_OP_SELECT:
        if ((s = counts(n, 2, 2))) return s;
        return ix_check_select(out, &n->src[0], dim, &n->src[1]);
    case VT_INDEX_OP_GATHER:
        if ((s = counts(n, 2, 2))) return s;
        return ix_check_gather(out, &n->src[0], dim, &n->src[1]);
    case VT_INDEX_OP_SCATTER:
        if ((s = counts(n, 3, 1))) return s;
        if (n->iparams[1] < VT_SCATTER_ASSIGN || n->iparams[1] > VT_SCATTER_AMIN)
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: invalid reduction %d", n->name, (int)n->iparams[1]);
        return ix_check_scatter(out, dim, &n->src[0], src_opt(n, 1), src_opt(n, 2), (vt_scatter_reduce)n->iparams[1]);
    case VT_INDEX_OP_ADD:
    case VT_INDEX_OP_COPY: {
        const char *what = n->op == VT_INDEX_OP_ADD ? "index_add" : "index_copy";
        if ((s = counts(n, 2, 1))) return s;
        if (!vt_node_has_src(n, 1)) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): source is NULL", what);
        return ix_check_index_update(what, out, dim, &n->src[0], &n->src[1]);
    }
    case VT_INDEX_OP_FILL:
        if ((s = counts(n, 2, 1))) return s;
        if ((s = ix_check_index_update("index_fill", out, dim, &n->src[0], NULL))) return s;
        if (vt_node_has_src(n, 1) && vt_tensor_numel(&n->src[1]) != 1)
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "index_fill(): value must have one element");
        return VT_OK;
    case VT_INDEX_OP_TAKE:
        if ((s = counts(n, 2, 2))) return s;
        if ((s = ix_check_index_dtype(&n->src[1], "take"))) return s;
        if (out->dtype != n->src[0].dtype || out->ndim != n->src[1].ndim ||
            vt_tensor_numel(out) != vt_tensor_numel(&n->src[1]))
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "take(): out must have index's shape and input's dtype");
        return VT_OK;
    case VT_INDEX_OP_COUNT_NONZERO:
    case VT_INDEX_OP_NONZERO:
        if ((s = counts(n, 1, 1))) return s;
        return check_mask_op(n);
    case VT_INDEX_OP_MASKED_SELECT:
    case VT_INDEX_OP_MASKED_SCATTER:
        if ((s = counts(n, 2, 2))) return s;
        return check_mask_op(n);
    case VT_INDEX_OP_MASKED_FILL:
        if ((s = counts(n, 2, 1))) return s;
        return check_mask_op(n);
    case VT_INDEX_OP_EMBEDDING_BACKWARD: {
        if ((s = counts(n, 2, 2))) return s;
        const vt_tensor *grad = &n->src[0], *indices = &n->src[1];
        if ((s = ix_check_index_dtype(indices, "embedding_dense_backward")) != VT_OK) return s;
        if (out->ndim != 2 || grad->ndim != 2 || indices->ndim != 1 || out->sizes[1] != grad->sizes[1] ||
            grad->sizes[0] != indices->sizes[0] || grad->dtype != out->dtype || !vt_dtype_is_float(grad->dtype))
            return vt_set_error(VT_ERR_INVALID_ARGUMENT,
                                "%s: expected float grad_weight [V, D], grad [N, D] and indices [N]", n->name);
        return VT_OK;
    }
    case VT_INDEX_OP_INDEX:
    case VT_INDEX_OP_INDEX_PUT: return check_adv(n);
    default:
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: invalid index op %d", n->name, (int)n->op);
    }
}

/* The ops that update out in place read it; fills and index_put may
 * repeat its elements (index_put of repeated elements as CPU allows them,
 * with a deprecation warning), and a masked fill's mask may be out itself,
 * as on CPU. */
unsigned vt_index_node_use(const vt_node *n, int t, unsigned f) {
    const int op = n->op;
    if (t < VT_NODE_MAX_OUT) {
        if (op == VT_INDEX_OP_FILL || op == VT_INDEX_OP_MASKED_FILL || op == VT_INDEX_OP_INDEX_PUT)
            return f | VT_USE_READ | VT_USE_SAME_VALUE;
        if (op == VT_INDEX_OP_SCATTER || op == VT_INDEX_OP_ADD || op == VT_INDEX_OP_COPY ||
            op == VT_INDEX_OP_MASKED_SCATTER)
            return f | VT_USE_READ;
        return f;
    }
    return op == VT_INDEX_OP_MASKED_FILL && t == VT_NODE_MAX_OUT ? f | VT_USE_ALIAS_OK : f;
}

/* ------------------------------------------------------------ kernels */

static vt_status call(const vt_node *n, int ref) {
    const vt_tensor *out = &n->out[0], *a = &n->src[0], *b = &n->src[1];
    const int dim = (int)n->iparams[0];
    const vt_tensor *list[VT_MAX_DIMS];
    switch ((vt_index_op)n->op) {
    case VT_INDEX_OP_INDEX: return (ref ? vt_ref_index : vt_index)(out, a, index_list(n, list), list);
    case VT_INDEX_OP_INDEX_PUT:
        return (ref ? vt_ref_index_put : vt_index_put)(out, index_list(n, list), list, a, (int)n->iparams[0]);
    case VT_INDEX_OP_SELECT: return (ref ? vt_ref_index_select : vt_index_select)(out, a, dim, b);
    case VT_INDEX_OP_GATHER: return (ref ? vt_ref_gather : vt_gather)(out, a, dim, b);
    case VT_INDEX_OP_SCATTER:
        return (ref ? vt_ref_scatter : vt_scatter)(out, dim, a, src_opt(n, 1), src_opt(n, 2), n->alpha,
                                                   (vt_scatter_reduce)n->iparams[1], (int)n->iparams[2]);
    case VT_INDEX_OP_ADD: return (ref ? vt_ref_index_add : vt_index_add)(out, dim, a, b, n->alpha);
    case VT_INDEX_OP_TAKE: return (ref ? vt_ref_take : vt_take)(out, a, b);
    case VT_INDEX_OP_NONZERO: return (ref ? vt_ref_nonzero : vt_nonzero)(out, a);
    case VT_INDEX_OP_MASKED_SELECT: return (ref ? vt_ref_masked_select : vt_masked_select)(out, a, b);
    case VT_INDEX_OP_MASKED_SCATTER: return (ref ? vt_ref_masked_scatter : vt_masked_scatter)(out, a, b);
    case VT_INDEX_OP_EMBEDDING_BACKWARD:
        return (ref ? vt_ref_embedding_dense_backward : vt_embedding_dense_backward)(out, a, b, n->iparams[0],
                                                                                     (int)n->iparams[1]);
    default: break;
    }
    if (ref)
        return vt_set_error(VT_ERR_UNSUPPORTED, "%s: index op %s has no scalar reference", n->name,
                            vt_index_op_name((vt_index_op)n->op));
    switch ((vt_index_op)n->op) {
    case VT_INDEX_OP_COPY: return vt_index_copy(out, dim, a, b);
    case VT_INDEX_OP_FILL: return vt_index_fill(out, dim, a, src_opt(n, 1), n->alpha);
    case VT_INDEX_OP_COUNT_NONZERO: return vt_count_nonzero(out, a);
    case VT_INDEX_OP_MASKED_FILL: return vt_masked_fill(out, a, src_opt(n, 1), n->alpha);
    default: return VT_ERR_INTERNAL;
    }
}

vt_status vt_index_node_run(const vt_node *n) { return call(n, 0); }
vt_status vt_index_node_ref(const vt_node *n) { return call(n, 1); }
