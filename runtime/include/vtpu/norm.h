/* vtpu/norm.h — normalisation layers: layer_norm, rms_norm, group_norm, batch_norm.
 * Part of the public C API: included by vtpu/vtpu.h, never on its own.
 *
 * Common contract. Inputs are F32, BF16, F16 or F64, any strides (a
 * contiguous layout takes the fast path). Statistics and arithmetic run in
 * float for F32/BF16/F16 inputs and in double for F64 (PyTorch CPU's
 * accumulate type); each output is rounded once to its own dtype. Optional
 * tensors (weight, bias, saved statistics, gradients to produce) may be
 * NULL. Parameter and statistic tensors may be of any float dtype and any
 * shape with the stated number of elements (taken in row-major order).
 * Statistics are computed in two passes (mean, then squared deviations)
 * over fixed blocks, so large means do not cancel and results never depend
 * on the thread count. Empty inputs are allowed (statistics of an empty set
 * are NaN, as PyTorch). No output may overlap an input. */
#ifndef VTPU_NORM_H
#define VTPU_NORM_H

/* ---- layer norm and RMS norm over the last norm_ndim dims of `in`:
 * M rows of N elements. mean / rstd have M elements; weight / bias N. */

/* out = (in - mean) * rstd * weight + bias, rstd = 1 / sqrt(var + eps),
 * var biased. */
vt_status vt_layer_norm(const vt_tensor *out, const vt_tensor *mean, const vt_tensor *rstd, const vt_tensor *in,
                        const vt_tensor *weight, const vt_tensor *bias, int32_t norm_ndim, double eps);
/* Gradients of vt_layer_norm from the saved mean and rstd. */
vt_status vt_layer_norm_backward(const vt_tensor *grad_in, const vt_tensor *grad_weight, const vt_tensor *grad_bias,
                                 const vt_tensor *grad_out, const vt_tensor *in, const vt_tensor *mean,
                                 const vt_tensor *rstd, const vt_tensor *weight, int32_t norm_ndim);
/* out = in * rstd * weight, rstd = 1 / sqrt(mean(in^2) + eps). */
vt_status vt_rms_norm(const vt_tensor *out, const vt_tensor *rstd, const vt_tensor *in, const vt_tensor *weight,
                      int32_t norm_ndim, double eps);
vt_status vt_rms_norm_backward(const vt_tensor *grad_in, const vt_tensor *grad_weight, const vt_tensor *grad_out,
                               const vt_tensor *in, const vt_tensor *rstd, const vt_tensor *weight, int32_t norm_ndim);

/* ---- group norm: in is [N, C, *] (ndim >= 2); C splits into `groups`
 * groups (C % groups == 0). mean / rstd have N * groups elements (row-major
 * [N, groups]); weight / bias have C. */
vt_status vt_group_norm(const vt_tensor *out, const vt_tensor *mean, const vt_tensor *rstd, const vt_tensor *in,
                        const vt_tensor *weight, const vt_tensor *bias, int64_t groups, double eps);
vt_status vt_group_norm_backward(const vt_tensor *grad_in, const vt_tensor *grad_weight, const vt_tensor *grad_bias,
                                 const vt_tensor *grad_out, const vt_tensor *in, const vt_tensor *mean,
                                 const vt_tensor *rstd, const vt_tensor *weight, int64_t groups);

/* ---- batch norm: in is [N, C, *] (ndim >= 2); statistics per channel over
 * N and the trailing dims. All per-channel tensors have C elements.
 * training: batch statistics; save_mean / save_invstd (nullable) receive
 * the mean and 1 / sqrt(var + eps); running_mean / running_var (nullable)
 * are updated in place: r = (1 - momentum) * r + momentum * stat, the
 * variance unbiased (n / (n - 1)). Not training: running_mean and
 * running_var are required and normalise; nothing is written but out. */
vt_status vt_batch_norm(const vt_tensor *out, const vt_tensor *save_mean, const vt_tensor *save_invstd,
                        const vt_tensor *in, const vt_tensor *weight, const vt_tensor *bias,
                        const vt_tensor *running_mean, const vt_tensor *running_var, int training, double momentum,
                        double eps);
/* training: uses save_mean / save_invstd (required); otherwise
 * running_mean / running_var (required) and eps. */
vt_status vt_batch_norm_backward(const vt_tensor *grad_in, const vt_tensor *grad_weight, const vt_tensor *grad_bias,
                                 const vt_tensor *grad_out, const vt_tensor *in, const vt_tensor *weight,
                                 const vt_tensor *running_mean, const vt_tensor *running_var,
                                 const vt_tensor *save_mean, const vt_tensor *save_invstd, int training, double eps);

/* ---- scalar references: same contracts, plain double loops over logical
 * indices, no SIMD, no threads. */
vt_status vt_ref_layer_norm(const vt_tensor *out, const vt_tensor *mean, const vt_tensor *rstd, const vt_tensor *in,
                            const vt_tensor *weight, const vt_tensor *bias, int32_t norm_ndim, double eps);
vt_status vt_ref_layer_norm_backward(const vt_tensor *grad_in, const vt_tensor *grad_weight,
                                     const vt_tensor *grad_bias, const vt_tensor *grad_out, const vt_tensor *in,
                                     const vt_tensor *mean, const vt_tensor *rstd, const vt_tensor *weight,
                                     int32_t norm_ndim);
vt_status vt_ref_rms_norm(const vt_tensor *out, const vt_tensor *rstd, const vt_tensor *in, const vt_tensor *weight,
                          int32_t norm_ndim, double eps);
vt_status vt_ref_rms_norm_backward(const vt_tensor *grad_in, const vt_tensor *grad_weight, const vt_tensor *grad_out,
                                   const vt_tensor *in, const vt_tensor *rstd, const vt_tensor *weight,
                                   int32_t norm_ndim);
vt_status vt_ref_group_norm(const vt_tensor *out, const vt_tensor *mean, const vt_tensor *rstd, const vt_tensor *in,
                            const vt_tensor *weight, const vt_tensor *bias, int64_t groups, double eps);
vt_status vt_ref_group_norm_backward(const vt_tensor *grad_in, const vt_tensor *grad_weight,
                                     const vt_tensor *grad_bias, const vt_tensor *grad_out, const vt_tensor *in,
                                     const vt_tensor *mean, const vt_tensor *rstd, const vt_tensor *weight,
                                     int64_t groups);
vt_status vt_ref_batch_norm(const vt_tensor *out, const vt_tensor *save_mean, const vt_tensor *save_invstd,
                            const vt_tensor *in, const vt_tensor *weight, const vt_tensor *bias,
                            const vt_tensor *running_mean, const vt_tensor *running_var, int training,
                            double momentum, double eps);
vt_status vt_ref_batch_norm_backward(const vt_tensor *grad_in, const vt_tensor *grad_weight,
                                     const vt_tensor *grad_bias, const vt_tensor *grad_out, const vt_tensor *in,
                                     const vt_tensor *weight, const vt_tensor *running_mean,
                                     const vt_tensor *running_var, const vt_tensor *save_mean,
                                     const vt_tensor *save_invstd, int training, double eps);

/* ---- queued: the checks run at the call (a bad shape fails at the op),
 * then the kernel runs on dev's queue. The descriptors are copied; the
 * memory must stay alive until the op has run (stream order). */
vt_status vt_op_layer_norm(int dev, const char *name, const vt_tensor *out, const vt_tensor *mean,
                           const vt_tensor *rstd, const vt_tensor *in, const vt_tensor *weight,
                           const vt_tensor *bias, int32_t norm_ndim, double eps);
vt_status vt_op_layer_norm_backward(int dev, const char *name, const vt_tensor *grad_in,
                                    const vt_tensor *grad_weight, const vt_tensor *grad_bias,
                                    const vt_tensor *grad_out, const vt_tensor *in, const vt_tensor *mean,
                                    const vt_tensor *rstd, const vt_tensor *weight, int32_t norm_ndim);
vt_status vt_op_rms_norm(int dev, const char *name, const vt_tensor *out, const vt_tensor *rstd, const vt_tensor *in,
                         const vt_tensor *weight, int32_t norm_ndim, double eps);
vt_status vt_op_rms_norm_backward(int dev, const char *name, const vt_tensor *grad_in, const vt_tensor *grad_weight,
                                  const vt_tensor *grad_out, const vt_tensor *in, const vt_tensor *rstd,
                                  const vt_tensor *weight, int32_t norm_ndim);
vt_status vt_op_group_norm(int dev, const char *name, const vt_tensor *out, const vt_tensor *mean,
                           const vt_tensor *rstd, const vt_tensor *in, const vt_tensor *weight,
                           const vt_tensor *bias, int64_t groups, double eps);
vt_status vt_op_group_norm_backward(int dev, const char *name, const vt_tensor *grad_in,
                                    const vt_tensor *grad_weight, const vt_tensor *grad_bias,
                                    const vt_tensor *grad_out, const vt_tensor *in, const vt_tensor *mean,
                                    const vt_tensor *rstd, const vt_tensor *weight, int64_t groups);
vt_status vt_op_batch_norm(int dev, const char *name, const vt_tensor *out, const vt_tensor *save_mean,
                           const vt_tensor *save_invstd, const vt_tensor *in, const vt_tensor *weight,
                           const vt_tensor *bias, const vt_tensor *running_mean, const vt_tensor *running_var,
                           int training, double momentum, double eps);
vt_status vt_op_batch_norm_backward(int dev, const char *name, const vt_tensor *grad_in,
                                    const vt_tensor *grad_weight, const vt_tensor *grad_bias,
                                    const vt_tensor *grad_out, const vt_tensor *in, const vt_tensor *weight,
                                    const vt_tensor *running_mean, const vt_tensor *running_var,
                                    const vt_tensor *save_mean, const vt_tensor *save_invstd, int training,
                                    double eps);

#endif /* VTPU_NORM_H */
