/* ops_norm.c — queued normalisation ops: each fills a node of kind
 * VT_NODE_NORM (kernels/norm/norm.def), which vt_node_submit checks at the
 * op and queues packed (each descriptor cut to its dims). */
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
