/* shape_node.c — the data-movement family as nodes (VT_NODE_SHAPE, the ops
 * of shape.def): the node's parameters, its check (the kernels' own
 * argument checks, run once when the node is built, with the error wording
 * CPU PyTorch uses), its kernel and its scalar reference. */
#include "graph/node.h"
#include "kernels/shape/shape.h"

static const char *const names[VT_SHAPE_OP_COUNT] = {
#define VT_SHAPE_OP(e, name) #name,
#include "kernels/shape/shape.def"
#undef VT_SHAPE_OP
};

const char *vt_shape_op_name(vt_shape_op op) { return (unsigned)op < VT_SHAPE_OP_COUNT ? names[op] : "invalid"; }

/* ------------------------------------------------------------ parameters */

_Static_assert(VT_MAX_DIMS <= 16, "a roll's dims are packed as 4-bit fields in one iparam");

void vt_node_set_roll(vt_node *n, int ndims, const int *dims, const int64_t *shifts) {
    uint64_t packed = 0;
    n->iparams[0] = ndims;
    for (int k = 0; k < ndims && k < VT_MAX_DIMS; k++) {
        packed |= (uint64_t)(dims[k] & 15) << (4 * k);
        n->iparams[2 + k] = shifts[k];
    }
    n->iparams[1] = (int64_t)packed;
}

static int roll_args(const vt_node *n, int *dims, int64_t *shifts) {
    const int ndims = (int)n->iparams[0];
    for (int k = 0; k < ndims && k < VT_MAX_DIMS; k++) {
        dims[k] = (int)((uint64_t)n->iparams[1] >> (4 * k) & 15);
        shifts[k] = n->iparams[2 + k];
    }
    return ndims;
}

/* A scalar in three iparams: which member holds it, the integer, the
 * double's bits. */
static void put_scalar(int64_t *ip, vt_scalar v) {
    ip[0] = v.is_float;
    ip[1] = v.i;
    memcpy(&ip[2], &v.f, sizeof v.f);
}

static vt_scalar get_scalar(const int64_t *ip) {
    vt_scalar v;
    v.is_float = (int)ip[0];
    v.i = ip[1];
    memcpy(&v.f, &ip[2], sizeof v.f);
    return v;
}

void vt_node_set_range(vt_node *n, vt_scalar a, vt_scalar b, int64_t vec, int64_t chunk) {
    put_scalar(&n->iparams[0], a);
    put_scalar(&n->iparams[3], b);
    n->iparams[6] = vec;
    n->iparams[7] = chunk;
}

/* ------------------------------------------------------------ check */

static vt_status counts(const vt_node *n, int nout, int nsrc_min, int nsrc_max) {
    const int in_range = n->nsrc >= nsrc_min && n->nsrc <= nsrc_max;
    vt_status s = vt_node_check_counts(n, nout, in_range ? n->nsrc : nsrc_max);
    if (s != VT_OK) return s;
    /* only sort's and topk's outputs are optional; no input is */
    const uint32_t may_lack = n->op == VT_SHAPE_OP_SORT || n->op == VT_SHAPE_OP_TOPK ? 3u : 0u;
    if (n->absent & ~may_lack)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: a tensor is missing", n->name);
    if (n->host) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: inputs are tensors", n->name);
    return VT_OK;
}

/* The kernels' wording: index errors as CPU words them, others with the op. */
static vt_status prefixed(vt_status s, const char *name) {
    return s == VT_OK || s == VT_ERR_INDEX ? s : vt_error_prefix(s, name);
}

static const vt_tensor *opt_out(const vt_node *n, int j) { return vt_node_has_out(n, j) ? &n->out[j] : NULL; }

vt_status vt_shape_node_check(const vt_node *n) {
    if (n->op < 0 || n->op >= VT_SHAPE_OP_COUNT)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: invalid shape op %d", n->name, (int)n->op);
    vt_status s;
    int wdim, dims[VT_MAX_DIMS];
    int64_t shifts[VT_MAX_DIMS];
    switch ((vt_shape_op)n->op) {
    case VT_SHAPE_OP_CAT:
        if ((s = counts(n, 1, 1, VT_NODE_MAX_SRC))) return s;
        s = vt_cat_check(&n->out[0], n->nsrc, n->src, (int)n->iparams[0]);
        return s == VT_ERR_INVALID_ARGUMENT ? s : prefixed(s, n->name);
    case VT_SHAPE_OP_FLIP:
        if ((s = counts(n, 1, 1, 1))) return s;
        return prefixed(vt_flip_check(&n->out[0], &n->src[0], (uint64_t)n->iparams[0]), n->name);
    case VT_SHAPE_OP_ROLL: {
        if ((s = counts(n, 1, 1, 1))) return s;
        if (n->iparams[0] < 0 || n->iparams[0] > VT_MAX_DIMS)
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %lld dims to roll", n->name, (long long)n->iparams[0]);
        const int nd = roll_args(n, dims, shifts);
        return prefixed(vt_roll_check(&n->out[0], &n->src[0], nd, dims, shifts), n->name);
    }
    case VT_SHAPE_OP_TRI:
        if ((s = counts(n, 1, 1, 1))) return s;
        return prefixed(vt_tri_check(&n->out[0], &n->src[0]), n->name);
    case VT_SHAPE_OP_SORT:
        if ((s = counts(n, 2, 1, 1))) return s;
        return prefixed(vt_sort_check(opt_out(n, 0), opt_out(n, 1), &n->src[0], (int)n->iparams[0], &wdim), n->name);
    case VT_SHAPE_OP_TOPK:
        if ((s = counts(n, 2, 1, 1))) return s;
        return prefixed(
            vt_topk_check(opt_out(n, 0), opt_out(n, 1), &n->src[0], (int)n->iparams[0], n->iparams[2], &wdim),
            n->name);
    case VT_SHAPE_OP_ARANGE:
    case VT_SHAPE_OP_LINSPACE:
        if ((s = counts(n, 1, 0, 0))) return s;
        return prefixed(vt_range_check(&n->out[0], vt_shape_op_name((vt_shape_op)n->op)), n->name);
    case VT_SHAPE_OP_SEARCHSORTED:
        if ((s = counts(n, 1, 2, 2))) return s;
        return prefixed(vt_searchsorted_check(&n->out[0], &n->src[0], &n->src[1]), n->name);
    default: break;
    }
    return VT_ERR_INTERNAL;
}

/* tril / triu in place is exact */
unsigned vt_shape_node_use(const vt_node *n, int t, unsigned f) {
    return t >= VT_NODE_MAX_OUT && n->op == VT_SHAPE_OP_TRI ? f | VT_USE_ALIAS_OK : f;
}

/* ------------------------------------------------------------ kernels */

static vt_status call(const vt_node *n, int ref) {
    const vt_tensor *out = &n->out[0], *in = &n->src[0];
    int dims[VT_MAX_DIMS];
    int64_t shifts[VT_MAX_DIMS];
    switch ((vt_shape_op)n->op) {
    case VT_SHAPE_OP_CAT: return (ref ? vt_ref_cat : vt_cat)(out, n->nsrc, n->src, (int)n->iparams[0]);
    case VT_SHAPE_OP_FLIP: return (ref ? vt_ref_flip : vt_flip)(out, in, (uint64_t)n->iparams[0]);
    case VT_SHAPE_OP_ROLL: {
        const int nd = roll_args(n, dims, shifts);
        return (ref ? vt_ref_roll : vt_roll)(out, in, nd, dims, shifts);
    }
    case VT_SHAPE_OP_TRI: return (ref ? vt_ref_tri : vt_tri)(out, in, n->iparams[0], (int)n->iparams[1]);
    case VT_SHAPE_OP_SORT:
        return (ref ? vt_ref_sort : vt_sort)(opt_out(n, 0), opt_out(n, 1), in, (int)n->iparams[0],
                                             (int)n->iparams[1]);
    case VT_SHAPE_OP_TOPK:
        return (ref ? vt_ref_topk : vt_topk)(opt_out(n, 0), opt_out(n, 1), in, (int)n->iparams[0], n->iparams[2],
                                             (int)n->iparams[1]);
    default: break;
    }
    if (ref) return vt_set_error(VT_ERR_UNSUPPORTED, "%s: shape op %s has no scalar reference", n->name,
                                 vt_shape_op_name((vt_shape_op)n->op));
    switch ((vt_shape_op)n->op) {
    case VT_SHAPE_OP_ARANGE:
        return vt_arange(out, get_scalar(&n->iparams[0]), get_scalar(&n->iparams[3]), n->iparams[6], n->iparams[7]);
    case VT_SHAPE_OP_LINSPACE:
        return vt_linspace(out, get_scalar(&n->iparams[0]), get_scalar(&n->iparams[3]), n->iparams[6],
                           n->iparams[7]);
    case VT_SHAPE_OP_SEARCHSORTED: return vt_searchsorted(out, &n->src[0], &n->src[1], (int)n->iparams[0]);
    default: return VT_ERR_INTERNAL;
    }
}

vt_status vt_shape_node_run(const vt_node *n) { return call(n, 0); }
vt_status vt_shape_node_ref(const vt_node *n) { return call(n, 1); }
