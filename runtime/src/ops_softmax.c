/* ops_softmax.c — queued softmax and losses, as nodes (graph/node.h): the
 * kernels' argument checks run on the calling thread (bad shapes and dtypes
 * fail at the op), and the synchronous kernel runs on the device queue,
 * where data-dependent errors (a target out of range, a BCE input outside
 * [0, 1]) are latched for the next synchronisation. */
#include "graph/node.h"
#include "internal.h"
#include "kernels/softmax/softmax.h"


/* ------------------------------------------------------------ softmax: nodes */

vt_status vt_op_softmax(int dev, const char *name, const vt_tensor *out, const vt_tensor *in, int dim, int log) {
    vt_node n;
    vt_node_init(&n, VT_NODE_SOFTMAX, log != 0, name ? name : "vt_op_softmax");
    n.iparams[0] = dim;
    vt_node_add_out(&n, out);
    vt_status s = vt_node_add_src(&n, in, NULL);
    return s == VT_OK ? vt_node_submit(dev, &n) : s;
}

vt_status vt_op_softmax_backward(int dev, const char *name, const vt_tensor *grad_in, const vt_tensor *grad_out,
                                 const vt_tensor *y, int dim, int log) {
    vt_node n;
    vt_node_init(&n, VT_NODE_SOFTMAX_BACKWARD, log != 0, name ? name : "vt_op_softmax_backward");
    n.iparams[0] = dim;
    vt_node_add_out(&n, grad_in);
    vt_status s = vt_node_add_src(&n, grad_out, NULL);
    if (s == VT_OK) s = vt_node_add_src(&n, y, NULL);
    return s == VT_OK ? vt_node_submit(dev, &n) : s;
}

/* ------------------------------------------------------------ losses: nodes */

static vt_status loss_submit(int dev, const char *name, vt_loss_op op, const vt_tensor *const *outs, int nout,
                             const vt_tensor *const *srcs, int nsrc, vt_loss_kind kind, vt_loss_reduction reduction,
                             int64_t ignore_index, double param) {
    const int64_t ip[] = {kind, reduction, ignore_index};
    return vt_node_submit_op(dev, VT_NODE_LOSS, op, name, outs, nout, srcs, nsrc, ip, 3, &param, 1);
}

vt_status vt_op_nll_loss(int dev, const char *name, const vt_tensor *out, const vt_tensor *total_weight,
                         const vt_tensor *input, const vt_tensor *target, const vt_tensor *weight,
                         vt_loss_reduction reduction, int64_t ignore_index) {
    const vt_tensor *o[] = {out, total_weight}, *s[] = {input, target, weight};
    return loss_submit(dev, name ? name : "vt_op_nll_loss", VT_LOSS_OP_NLL, o, 2, s, 3, 0, reduction, ignore_index,
                       0);
}

vt_status vt_op_nll_loss_backward(int dev, const char *name, const vt_tensor *grad_input, const vt_tensor *grad_out,
                                  const vt_tensor *input, const vt_tensor *target, const vt_tensor *weight,
                                  vt_loss_reduction reduction, int64_t ignore_index, const vt_tensor *total_weight) {
    const vt_tensor *o[] = {grad_input}, *s[] = {grad_out, input, target, weight, total_weight};
    return loss_submit(dev, name ? name : "vt_op_nll_loss_backward", VT_LOSS_OP_NLL_BACKWARD, o, 1, s, 5, 0,
                       reduction, ignore_index, 0);
}

vt_status vt_op_pointwise_loss(int dev, const char *name, vt_loss_kind kind, const vt_tensor *out,
                               const vt_tensor *input, const vt_tensor *target, const vt_tensor *weight,
                               const vt_tensor *pos_weight, vt_loss_reduction reduction, double param) {
    const vt_tensor *o[] = {out}, *s[] = {input, target, weight, pos_weight};
    return loss_submit(dev, name ? name : "vt_op_pointwise_loss", VT_LOSS_OP_POINTWISE, o, 1, s, 4, kind, reduction, 0,
                       param);
}

vt_status vt_op_pointwise_loss_backward(int dev, const char *name, vt_loss_kind kind,
                                        const vt_tensor *grad_input, const vt_tensor *grad_out,
                                        const vt_tensor *input, const vt_tensor *target, const vt_tensor *weight,
                                        const vt_tensor *pos_weight, vt_loss_reduction reduction, double param) {
    const vt_tensor *o[] = {grad_input}, *s[] = {grad_out, input, target, weight, pos_weight};
    return loss_submit(dev, name ? name : "vt_op_pointwise_loss_backward", VT_LOSS_OP_POINTWISE_BACKWARD, o, 1, s, 5,
                       kind, reduction, 0, param);
}
