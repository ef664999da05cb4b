/* ops_conv.c — queued convolution ops, as nodes (VT_NODE_CONV): the whole
 * argument check runs at the op (a bad shape fails there, not at the next
 * synchronisation), the node is queued packed. */
#include "graph/node.h"
#include "internal.h"
#include "kernels/conv/conv.h"

static vt_status submit(int dev, const char *name, vt_conv_kind kind, const vt_tensor *t0, const vt_tensor *t1,
                        const vt_tensor *t2, const vt_tensor *bias, const vt_conv_params *p, vt_precision prec) {
    if (!p) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: convolution parameters are NULL", name);
    vt_node n;
    vt_node_init(&n, VT_NODE_CONV, kind, name);
    vt_node_add_out(&n, t0);
    vt_node_add_optional(&n, t1);
    vt_node_add_optional(&n, t2);
    vt_node_add_optional(&n, bias);
    vt_node_set_conv_params(&n, p, prec);
    return vt_node_submit(dev, &n);
}

vt_status vt_op_conv_forward(int dev, const char *name, const vt_tensor *out, const vt_tensor *input,
                             const vt_tensor *weight, const vt_tensor *bias, const vt_conv_params *p,
                             vt_precision prec) {
    return submit(dev, name ? name : "vt_op_conv_forward", VT_CONV_FORWARD, out, input, weight, bias, p, prec);
}

vt_status vt_op_conv_backward_input(int dev, const char *name, const vt_tensor *grad_input,
                                    const vt_tensor *grad_out, const vt_tensor *weight, const vt_conv_params *p,
                                    vt_precision prec) {
    return submit(dev, name ? name : "vt_op_conv_backward_input", VT_CONV_BACKWARD_INPUT, grad_input, grad_out,
                  weight, NULL, p, prec);
}

vt_status vt_op_conv_backward_weight(int dev, const char *name, const vt_tensor *grad_weight,
                                     const vt_tensor *grad_out, const vt_tensor *input, const vt_conv_params *p,
                                     vt_precision prec) {
    return submit(dev, name ? name : "vt_op_conv_backward_weight", VT_CONV_BACKWARD_WEIGHT, grad_weight, grad_out,
                  input, NULL, p, prec);
}
