/* pool_node.c — the pooling family as nodes (VT_NODE_POOL, the ops of
 * pool.def): the window parameters a node holds, its check (vt_pool_check,
 * run once when the node is built), its kernel and its scalar reference. */
#include "graph/node.h"
#include "kernels/pool/pool.h"

static const char *const pool_names[VT_POOL_OP_COUNT] = {
#define VT_POOL_OP(e, name) #name,
#include "kernels/pool/pool.def"
#undef VT_POOL_OP
};

const char *vt_pool_op_name(vt_pool_op op) { return (unsigned)op < VT_POOL_OP_COUNT ? pool_names[op] : "invalid"; }

void vt_node_set_pool_params(vt_node *n, const vt_pool2d_params *p) {
    n->iparams[11] = p != NULL;
    if (!p) return;
    for (int d = 0; d < 2; d++) {
        n->iparams[0 + d] = p->kernel[d];
        n->iparams[2 + d] = p->stride[d];
        n->iparams[4 + d] = p->padding[d];
        n->iparams[6 + d] = p->dilation[d];
    }
    n->iparams[8] = p->ceil_mode;
    n->iparams[9] = p->count_include_pad;
    n->iparams[10] = p->divisor_override;
}

/* The node's pooling parameters in p; NULL when none were given. */
static const vt_pool2d_params *pool_params(const vt_node *n, vt_pool2d_params *p) {
    if (!n->iparams[11]) return NULL;
    for (int d = 0; d < 2; d++) {
        p->kernel[d] = n->iparams[0 + d];
        p->stride[d] = n->iparams[2 + d];
        p->padding[d] = n->iparams[4 + d];
        p->dilation[d] = n->iparams[6 + d];
    }
    p->ceil_mode = (int32_t)n->iparams[8];
    p->count_include_pad = (int32_t)n->iparams[9];
    p->divisor_override = n->iparams[10];
    return p;
}

static int pool_is_backward(int op) {
    return op == VT_POOL_OP_MAX_BACKWARD || op == VT_POOL_OP_AVG_BACKWARD || op == VT_POOL_OP_ADAPTIVE_AVG_BACKWARD ||
           op == VT_POOL_OP_UPSAMPLE_BACKWARD;
}

vt_status vt_pool_node_check(const vt_node *n) {
    if (n->op < 0 || n->op >= VT_POOL_OP_COUNT)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: invalid pool op %d", n->name, (int)n->op);
    const int with_idx = n->op == VT_POOL_OP_MAX || n->op == VT_POOL_OP_ADAPTIVE_MAX;
    const int nout = with_idx ? 2 : 1, nsrc = n->op == VT_POOL_OP_MAX_BACKWARD ? 2 : 1;
    vt_status s = vt_node_check_counts(n, nout, nsrc);
    if (s == VT_OK && (!vt_node_has_out(n, 0) || !vt_node_has_src(n, 0) ||
                       (n->op == VT_POOL_OP_MAX_BACKWARD && !vt_node_has_src(n, 1))))
        s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: tensor is NULL", n->name);
    if (s != VT_OK) return s;
    /* the forward op's output and input, as vt_pool_check takes them */
    const int bwd = pool_is_backward(n->op);
    const vt_tensor *fout = bwd ? &n->src[0] : &n->out[0], *fin = bwd ? &n->out[0] : &n->src[0];
    const vt_tensor *idx = n->op == VT_POOL_OP_MAX_BACKWARD ? &n->src[1]
                           : with_idx && vt_node_has_out(n, 1) ? &n->out[1]
                                                                : NULL;
    static const vt_pool_kind kinds[VT_POOL_OP_COUNT] = {
        VT_POOL_MAX,          VT_POOL_ADAPTIVE_MAX, VT_POOL_AVG,     VT_POOL_AVG,    VT_POOL_ADAPTIVE_AVG,
        VT_POOL_ADAPTIVE_AVG, VT_POOL_ADAPTIVE_MAX, VT_POOL_UPSAMPLE, VT_POOL_UPSAMPLE};
    vt_pool2d_params p;
    return vt_pool_check(kinds[n->op], fout, idx, fin, pool_params(n, &p), n->name);
}

vt_status vt_pool_node_run(const vt_node *n) {
    vt_pool2d_params pp;
    const vt_pool2d_params *p = pool_params(n, &pp);
    const vt_tensor *a = &n->out[0], *b = &n->src[0];
    const vt_tensor *idx = vt_node_has_out(n, 1) ? &n->out[1] : NULL;
    const vt_upsample_mode mode = (vt_upsample_mode)n->iparams[0];
    const int corners = (int)n->iparams[1];
    switch ((vt_pool_op)n->op) {
    case VT_POOL_OP_MAX: return vt_max_pool2d(a, idx, b, p);
    case VT_POOL_OP_MAX_BACKWARD: return vt_max_pool2d_backward(a, b, &n->src[1]);
    case VT_POOL_OP_AVG: return vt_avg_pool2d(a, b, p);
    case VT_POOL_OP_AVG_BACKWARD: return vt_avg_pool2d_backward(a, b, p);
    case VT_POOL_OP_ADAPTIVE_AVG: return vt_adaptive_avg_pool2d(a, b);
    case VT_POOL_OP_ADAPTIVE_AVG_BACKWARD: return vt_adaptive_avg_pool2d_backward(a, b);
    case VT_POOL_OP_ADAPTIVE_MAX: return vt_adaptive_max_pool2d(a, idx, b);
    case VT_POOL_OP_UPSAMPLE: return vt_upsample2d(mode, a, b, corners, n->params[0], n->params[1]);
    case VT_POOL_OP_UPSAMPLE_BACKWARD: return vt_upsample2d_backward(mode, a, b, corners, n->params[0], n->params[1]);
    case VT_POOL_OP_COUNT: break;
    }
    return vt_set_error(VT_ERR_INTERNAL, "%s: unknown pool op %d", n->name, (int)n->op);
}

/* The forward ops' scalar references (the backward ops have none). */
vt_status vt_pool_node_ref(const vt_node *n) {
    vt_pool2d_params pp;
    const vt_pool2d_params *p = pool_params(n, &pp);
    const vt_tensor *a = &n->out[0], *b = &n->src[0];
    const vt_tensor *idx = vt_node_has_out(n, 1) ? &n->out[1] : NULL;
    switch ((vt_pool_op)n->op) {
    case VT_POOL_OP_MAX: return vt_ref_max_pool2d(a, idx, b, p);
    case VT_POOL_OP_AVG: return vt_ref_avg_pool2d(a, b, p);
    case VT_POOL_OP_ADAPTIVE_AVG: return vt_ref_adaptive_avg_pool2d(a, b);
    case VT_POOL_OP_ADAPTIVE_MAX: return vt_ref_adaptive_max_pool2d(a, idx, b);
    case VT_POOL_OP_UPSAMPLE:
        return vt_ref_upsample2d((vt_upsample_mode)n->iparams[0], a, b, (int)n->iparams[1], n->params[0], n->params[1]);
    default: return vt_set_error(VT_ERR_UNSUPPORTED, "%s: no scalar reference", n->name);
    }
}
