/* ops_norm.c — queued normalisation ops and recurrent cells: each fills a
 * node of kind VT_NODE_NORM (kernels/norm/norm.def) or VT_NODE_RNN
 * (kernels/rnn/rnn.def), which vt_node_submit checks at the op and queues
 * packed (each descriptor cut to its dims). */
#include "graph/node.h"
#include "internal.h"

static vt_status submit(int dev, const char *name, vt_norm_op op, const vt_tensor *const *outs, int nout,
                        const vt_tensor *const *srcs, int nsrc, int64_t norm_ndim, int64_t groups, int training,
                        double eps, double momentum) {
    const int64_t ip[] = {norm_ndim, groups, training};
    const double p[] = {eps, momentum};
    return vt_node_submit_op(dev, VT_NODE_NORM, op, name, outs, nout, srcs, nsrc, ip, 3, p, 2);
}

vt_status vt_op_layer_norm(int dev, const char *name, const vt_tensor *out, const vt_tensor *mean,
                           const vt_tensor *rstd, const vt_tensor *in, const vt_tensor *weight,
                           const vt_tensor *bias, int32_t norm_ndim, double eps) {
    const vt_tensor *o[] = {out, mean, rstd}, *s[] = {in, weight, bias};
    return submit(dev, name ? name : "vt_op_layer_norm", VT_NORM_LAYER, o, 3, s, 3, norm_ndim, 0, 0, eps, 0);
}

vt_status vt_op_layer_norm_backward(int dev, const char *name, const vt_tensor *grad_in,
                                    const vt_tensor *grad_weight, const vt_tensor *grad_bias,
                                    const vt_tensor *grad_out, const vt_tensor *in, const vt_tensor *mean,
                                    const vt_tensor *rstd, const vt_tensor *weight, int32_t norm_ndim) {
    const vt_tensor *o[] = {grad_in, grad_weight, grad_bias}, *s[] = {grad_out, in, mean, rstd, weight};
    return submit(dev, name ? name : "vt_op_layer_norm_backward", VT_NORM_LAYER_BACKWARD, o, 3, s, 5, norm_ndim, 0,
                  0, 0, 0);
}

vt_status vt_op_rms_norm(int dev, const char *name, const vt_tensor *out, const vt_tensor *rstd, const vt_tensor *in,
                         const vt_tensor *weight, int32_t norm_ndim, double eps) {
    const vt_tensor *o[] = {out, rstd}, *s[] = {in, weight};
    return submit(dev, name ? name : "vt_op_rms_norm", VT_NORM_RMS, o, 2, s, 2, norm_ndim, 0, 0, eps, 0);
}

vt_status vt_op_rms_norm_backward(int dev, const char *name, const vt_tensor *grad_in, const vt_tensor *grad_weight,
                                  const vt_tensor *grad_out, const vt_tensor *in, const vt_tensor *rstd,
                                  const vt_tensor *weight, int32_t norm_ndim) {
    const vt_tensor *o[] = {grad_in, grad_weight}, *s[] = {grad_out, in, rstd, weight};
    return submit(dev, name ? name : "vt_op_rms_norm_backward", VT_NORM_RMS_BACKWARD, o, 2, s, 4, norm_ndim, 0, 0, 0,
                  0);
}

vt_status vt_op_group_norm(int dev, const char *name, const vt_tensor *out, const vt_tensor *mean,
                           const vt_tensor *rstd, const vt_tensor *in, const vt_tensor *weight,
                           const vt_tensor *bias, int64_t groups, double eps) {
    const vt_tensor *o[] = {out, mean, rstd}, *s[] = {in, weight, bias};
    return submit(dev, name ? name : "vt_op_group_norm", VT_NORM_GROUP, o, 3, s, 3, 0, groups, 0, eps, 0);
}

vt_status vt_op_group_norm_backward(int dev, const char *name, const vt_tensor *grad_in,
                                    const vt_tensor *grad_weight, const vt_tensor *grad_bias,
                                    const vt_tensor *grad_out, const vt_tensor *in, const vt_tensor *mean,
                                    const vt_tensor *rstd, const vt_tensor *weight, int64_t groups) {
    const vt_tensor *o[] = {grad_in, grad_weight, grad_bias}, *s[] = {grad_out, in, mean, rstd, weight};
    return submit(dev, name ? name : "vt_op_group_norm_backward", VT_NORM_GROUP_BACKWARD, o, 3, s, 5, 0, groups, 0, 0,
                  0);
}

vt_status vt_op_batch_norm(int dev, const char *name, const vt_tensor *out, const vt_tensor *save_mean,
                           const vt_tensor *save_invstd, const vt_tensor *in, const vt_tensor *weight,
                           const vt_tensor *bias, const vt_tensor *running_mean, const vt_tensor *running_var,
                           int training, double momentum, double eps) {
    const vt_tensor *o[] = {out, save_mean, save_invstd}, *s[] = {in, weight, bias, running_mean, running_var};
    return submit(dev, name ? name : "vt_op_batch_norm", VT_NORM_BATCH, o, 3, s, 5, 0, 0, training, eps, momentum);
}

vt_status vt_op_batch_norm_backward(int dev, const char *name, const vt_tensor *grad_in,
                                    const vt_tensor *grad_weight, const vt_tensor *grad_bias,
                                    const vt_tensor *grad_out, const vt_tensor *in, const vt_tensor *weight,
                                    const vt_tensor *running_mean, const vt_tensor *running_var,
                                    const vt_tensor *save_mean, const vt_tensor *save_invstd, int training,
                                    double eps) {
    const vt_tensor *o[] = {grad_in, grad_weight, grad_bias};
    const vt_tensor *s[] = {grad_out, in, weight, running_mean, running_var, save_mean, save_invstd};
    return submit(dev, name ? name : "vt_op_batch_norm_backward", VT_NORM_BATCH_BACKWARD, o, 3, s, 7, 0, 0, training,
                  eps, 0);
}

/* ------------------------------------------------------------ recurrent cells (VT_NODE_RNN) */

vt_status vt_op_lstm_cell(int dev, const char *name, const vt_tensor *hy, const vt_tensor *cy,
                          const vt_tensor *workspace, const vt_tensor *input_gates, const vt_tensor *hidden_gates,
                          const vt_tensor *cx, const vt_tensor *b_ih, const vt_tensor *b_hh) {
    const vt_tensor *o[] = {hy, cy, workspace}, *s[] = {input_gates, hidden_gates, cx, b_ih, b_hh};
    return vt_node_submit_op(dev, VT_NODE_RNN, VT_RNN_LSTM_CELL, name ? name : "vt_op_lstm_cell", o, 3, s, 5, NULL,
                             0, NULL, 0);
}

vt_status vt_op_gru_cell(int dev, const char *name, const vt_tensor *hy, const vt_tensor *workspace,
                         const vt_tensor *input_gates, const vt_tensor *hidden_gates, const vt_tensor *hx,
                         const vt_tensor *b_ih, const vt_tensor *b_hh) {
    const vt_tensor *o[] = {hy, workspace}, *s[] = {input_gates, hidden_gates, hx, b_ih, b_hh};
    return vt_node_submit_op(dev, VT_NODE_RNN, VT_RNN_GRU_CELL, name ? name : "vt_op_gru_cell", o, 2, s, 5, NULL, 0,
                             NULL, 0);
}

vt_status vt_op_lstm_cell_backward(int dev, const char *name, const vt_tensor *grad_gates, const vt_tensor *grad_cx,
                                   const vt_tensor *grad_hy, const vt_tensor *grad_cy, const vt_tensor *cx,
                                   const vt_tensor *cy, const vt_tensor *workspace) {
    const vt_tensor *o[] = {grad_gates, grad_cx}, *s[] = {grad_hy, grad_cy, cx, cy, workspace};
    return vt_node_submit_op(dev, VT_NODE_RNN, VT_RNN_LSTM_CELL_BACKWARD,
                             name ? name : "vt_op_lstm_cell_backward", o, 2, s, 5, NULL, 0, NULL, 0);
}

vt_status vt_op_gru_cell_backward(int dev, const char *name, const vt_tensor *grad_input_gates,
                                  const vt_tensor *grad_hidden_gates, const vt_tensor *grad_hx,
                                  const vt_tensor *grad_hy, const vt_tensor *workspace) {
    const vt_tensor *o[] = {grad_input_gates, grad_hidden_gates, grad_hx}, *s[] = {grad_hy, workspace};
    return vt_node_submit_op(dev, VT_NODE_RNN, VT_RNN_GRU_CELL_BACKWARD, name ? name : "vt_op_gru_cell_backward", o, 3,
                             s, 2, NULL, 0, NULL, 0);
}
