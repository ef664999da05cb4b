/* vtpu/softmax.h — softmax, log_softmax and the losses built on them (nll, cross-entropy, mse).
 * Part of the public C API: included by vtpu/vtpu.h, never on its own. */
#ifndef VTPU_SOFTMAX_H
#define VTPU_SOFTMAX_H

/* ---- softmax / log_softmax along one dim
 * out = softmax(in) (log: log_softmax) along dim (negative dims wrap); out
 * has in's shape, any strides, and may alias in exactly. F32, BF16 and F16
 * compute in f32 (max-subtracted), F64 in double; in and out may differ in
 * dtype (half_to_float: BF16/F16 in, F32 out), each value is rounded once
 * when stored. An all -inf line gives NaN, as PyTorch. A 0-dim tensor is a
 * line of one element. Results do not depend on the thread count. */
vt_status vt_softmax(const vt_tensor *out, const vt_tensor *in, int dim, int log);
/* Gradient of vt_softmax given its output y: softmax: gi = y * (g - sum(g * y)),
 * log: gi = g - exp(y) * sum(g), sums along dim. grad_in, grad_out and y
 * share a shape; any strides and float dtypes (computed in f32, or double
 * when any operand is F64); grad_in may alias grad_out exactly. */
vt_status vt_softmax_backward(const vt_tensor *grad_in, const vt_tensor *grad_out, const vt_tensor *y, int dim,
                              int log);

/* ---- losses. Reductions use PyTorch's at::Reduction numbering. */
typedef enum vt_loss_reduction { VT_REDUCTION_NONE = 0, VT_REDUCTION_MEAN = 1, VT_REDUCTION_SUM = 2 } vt_loss_reduction;

/* Negative log likelihood, PyTorch's nll_loss / nll_loss2d forward.
 * input: [C] with target [] (one sample), or [N, C, d1..dk] (k >= 0) with
 * target [N, d1..dk]; target I64 or U8 class indices; weight NULL or [C].
 * Per element loss = -weight[t] * input[n, t, ...], 0 where t == ignore_index.
 * NONE: out has target's shape (for a 1-D input a 0-dim out, no division)
 * and total_weight is 0 (1-D input: weight[t]); MEAN/SUM: out is 0-dim, the
 * sum (divided by total_weight for MEAN: 0/0 gives NaN), total_weight the
 * 0-dim sum of the weights (count without weight). Float dtypes; sums in
 * double, rounded once. A target outside [0, C) other than ignore_index
 * fails with VT_ERR_INDEX "Target 12 is out of bounds." and writes nothing
 * outside the tensors. total_weight may be NULL. */
vt_status vt_nll_loss(const vt_tensor *out, const vt_tensor *total_weight, const vt_tensor *input,
                      const vt_tensor *target, const vt_tensor *weight, vt_loss_reduction reduction,
                      int64_t ignore_index);
/* grad_input (input's shape) = 0 except grad_input[n, t, ...] = -weight[t] * g,
 * g = grad_out[n, ...] (NONE with a batch) or grad_out / total_weight (MEAN)
 * or grad_out (SUM, and NONE on a 1-D input); both 0-dim then. Same target
 * checks as vt_nll_loss. */
vt_status vt_nll_loss_backward(const vt_tensor *grad_input, const vt_tensor *grad_out, const vt_tensor *input,
                               const vt_tensor *target, const vt_tensor *weight, vt_loss_reduction reduction,
                               int64_t ignore_index, const vt_tensor *total_weight);

/* Pointwise losses: d = input - target (x = input, t = target for BCE). */
typedef enum vt_pointwise_loss {
    VT_LOSS_MSE = 0,    /* d^2 */
    VT_LOSS_L1,         /* |d| */
    VT_LOSS_SMOOTH_L1,  /* |d| < beta ? 0.5 d^2 / beta : |d| - 0.5 beta   (param = beta; 0 gives |d|) */
    VT_LOSS_HUBER,      /* |d| < delta ? 0.5 d^2 : delta (|d| - 0.5 delta)  (param = delta) */
    VT_LOSS_BCE,        /* -w (t max(log x, -100) + (1 - t) max(log(1 - x), -100)); x outside [0, 1] fails */
    VT_LOSS_BCE_LOGITS, /* w ((1 - t) x - (1 + (pw - 1) t) log_sigmoid(x)) */
    VT_POINTWISE_LOSS_COUNT
} vt_loss_kind;

/* out = loss(input, target) (NONE: input's shape) or its MEAN / SUM (0-dim
 * out). target, weight (BCE kinds, else NULL) and pos_weight (BCE_LOGITS,
 * else NULL) broadcast to input's shape; the caller broadcasts input and
 * target to a common shape first. Float dtypes (all operands one dtype),
 * f32 math for F32/BF16/F16, double for F64; MEAN/SUM sum in double in fixed
 * blocks (thread-count independent). BCE with an input outside [0, 1] fails
 * with VT_ERR_INVALID_ARGUMENT "all elements of input should be between 0 and 1". */
vt_status vt_pointwise_loss(vt_loss_kind kind, const vt_tensor *out, const vt_tensor *input,
                            const vt_tensor *target, const vt_tensor *weight, const vt_tensor *pos_weight,
                            vt_loss_reduction reduction, double param);
/* grad_input (input's shape) = d loss / d input * grad_out; grad_out is
 * 0-dim for MEAN / SUM (MEAN also divides by input's numel), else
 * broadcasts to input. BCE: g (x - t) / max((1 - x) x, 1e-12) * w;
 * BCE_LOGITS: g w ((1 + (pw - 1) t) sigmoid(x) - pw t)... as PyTorch. */
vt_status vt_pointwise_loss_backward(vt_loss_kind kind, const vt_tensor *grad_input, const vt_tensor *grad_out,
                                     const vt_tensor *input, const vt_tensor *target, const vt_tensor *weight,
                                     const vt_tensor *pos_weight, vt_loss_reduction reduction, double param);

/* Scalar references: same contracts, plain double loops in logical order. */
vt_status vt_ref_softmax(const vt_tensor *out, const vt_tensor *in, int dim, int log);
vt_status vt_ref_softmax_backward(const vt_tensor *grad_in, const vt_tensor *grad_out, const vt_tensor *y, int dim,
                                  int log);
vt_status vt_ref_nll_loss(const vt_tensor *out, const vt_tensor *total_weight, const vt_tensor *input,
                          const vt_tensor *target, const vt_tensor *weight, vt_loss_reduction reduction,
                          int64_t ignore_index);
vt_status vt_ref_nll_loss_backward(const vt_tensor *grad_input, const vt_tensor *grad_out, const vt_tensor *input,
                                   const vt_tensor *target, const vt_tensor *weight, vt_loss_reduction reduction,
                                   int64_t ignore_index, const vt_tensor *total_weight);
vt_status vt_ref_pointwise_loss(vt_loss_kind kind, const vt_tensor *out, const vt_tensor *input,
                                const vt_tensor *target, const vt_tensor *weight, const vt_tensor *pos_weight,
                                vt_loss_reduction reduction, double param);
vt_status vt_ref_pointwise_loss_backward(vt_loss_kind kind, const vt_tensor *grad_input,
                                         const vt_tensor *grad_out, const vt_tensor *input, const vt_tensor *target,
                                         const vt_tensor *weight, const vt_tensor *pos_weight,
                                         vt_loss_reduction reduction, double param);

/* Queued: validate (shape and dtype errors fail at the op), copy the
 * descriptors, run the kernel on dev's queue. Target bounds and BCE's input
 * range are checked by the kernel: errors surface at the next
 * synchronisation (Strict) or at the op (Debug). */
vt_status vt_op_softmax(int dev, const char *name, const vt_tensor *out, const vt_tensor *in, int dim, int log);
vt_status vt_op_softmax_backward(int dev, const char *name, const vt_tensor *grad_in, const vt_tensor *grad_out,
                                 const vt_tensor *y, int dim, int log);
vt_status vt_op_nll_loss(int dev, const char *name, const vt_tensor *out, const vt_tensor *total_weight,
                         const vt_tensor *input, const vt_tensor *target, const vt_tensor *weight,
                         vt_loss_reduction reduction, int64_t ignore_index);
vt_status vt_op_nll_loss_backward(int dev, const char *name, const vt_tensor *grad_input, const vt_tensor *grad_out,
                                  const vt_tensor *input, const vt_tensor *target, const vt_tensor *weight,
                                  vt_loss_reduction reduction, int64_t ignore_index, const vt_tensor *total_weight);
vt_status vt_op_pointwise_loss(int dev, const char *name, vt_loss_kind kind, const vt_tensor *out,
                               const vt_tensor *input, const vt_tensor *target, const vt_tensor *weight,
                               const vt_tensor *pos_weight, vt_loss_reduction reduction, double param);
vt_status vt_op_pointwise_loss_backward(int dev, const char *name, vt_loss_kind kind,
                                        const vt_tensor *grad_input, const vt_tensor *grad_out,
                                        const vt_tensor *input, const vt_tensor *target, const vt_tensor *weight,
                                        const vt_tensor *pos_weight, vt_loss_reduction reduction, double param);

#endif /* VTPU_SOFTMAX_H */
