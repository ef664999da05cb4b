/* ops_attention.c — queued scaled dot-product attention, as nodes
 * (VT_NODE_ATTENTION): the kernels' argument checks run at the op, the
 * node is queued packed (each descriptor cut to its dims). */
#include "graph/node.h"
#include "internal.h"

static vt_status submit(int dev, const char *name, int backward, const vt_tensor *const *outs, int nout,
                        const vt_tensor *const *srcs, int nsrc, double scale, int is_causal, vt_precision prec) {
    const int64_t ip[] = {is_causal, prec};
    return vt_node_submit_op(dev, VT_NODE_ATTENTION, backward, name, outs, nout, srcs, nsrc, ip, 2, &scale, 1);
}

vt_status vt_op_sdpa_forward(int dev, const char *name, const vt_tensor *out, const vt_tensor *lse,
                             const vt_tensor *q, const vt_tensor *k, const vt_tensor *v, const vt_tensor *mask,
                             double scale, int is_causal, vt_precision prec) {
    const vt_tensor *o[] = {out, lse}, *s[] = {q, k, v, mask};
    return submit(dev, name ? name : "vt_op_sdpa_forward", 0, o, 2, s, 4, scale, is_causal, prec);
}

vt_status vt_op_sdpa_backward(int dev, const char *name, const vt_tensor *dq, const vt_tensor *dk,
                              const vt_tensor *dv, const vt_tensor *dout, const vt_tensor *q, const vt_tensor *k,
                              const vt_tensor *v, const vt_tensor *mask, const vt_tensor *out,
                              const vt_tensor *lse, double scale, int is_causal, vt_precision prec) {
    const vt_tensor *o[] = {dq, dk, dv}, *s[] = {dout, q, k, v, mask, out, lse};
    return submit(dev, name ? name : "vt_op_sdpa_backward", 1, o, 3, s, 7, scale, is_causal, prec);
}
