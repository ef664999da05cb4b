/* vtpu/optim.h — multi-tensor (_foreach_*) ops and fused optimizer steps.
 * Part of the public C API: included by vtpu/vtpu.h, never on its own.
 * One call covers a whole list of tensors: the work is split over all the
 * tensors' elements, so a queued call is one command, not one per tensor. */
#ifndef VTPU_OPTIM_H
#define VTPU_OPTIM_H

typedef enum vt_foreach_op {
    /* Binary: B is b[i] when b is given, else the scalar S. */
    VT_FOREACH_ADD = 0,   /* fma(B, alpha, a)          (PyTorch CPU's a + alpha*B) */
    VT_FOREACH_SUB,       /* fma(B, -alpha, a) */
    VT_FOREACH_MUL,       /* a * B */
    VT_FOREACH_DIV,       /* a / B */
    VT_FOREACH_MAXIMUM,   /* NaN of either propagates */
    VT_FOREACH_MINIMUM,
    VT_FOREACH_CLAMP_MIN, /* a < B ? B : a (NaN of a propagates) */
    VT_FOREACH_CLAMP_MAX,
    VT_FOREACH_POW,       /* a ** B */
    VT_FOREACH_RPOW,      /* S ** a */
    /* Ternary (b and c are tensors; S is the value) */
    VT_FOREACH_ADDCMUL,   /* fma(S*b, c, a) */
    VT_FOREACH_ADDCDIV,   /* a + (S*b)/c */
    VT_FOREACH_LERP,      /* lerp(a, b, w), w = c[i] when c is given else S; as PyTorch: fma(w, b-a, a) for |w| < 0.5, else fma(w-1, b-a, b) */
    /* Unary */
    VT_FOREACH_NEG, VT_FOREACH_ABS, VT_FOREACH_SQRT, VT_FOREACH_EXP, VT_FOREACH_SIGN, VT_FOREACH_RECIPROCAL,
    VT_FOREACH_ZERO,      /* out = 0 (a unused) */
    VT_FOREACH_COPY,      /* out = a, converted to out's dtype */
    /* Reductions: out[i] is a 1-element tensor */
    VT_FOREACH_NORM,      /* S = ord: 0, 1, 2, inf, -inf or any p > 0; accumulated in double */
    VT_FOREACH_MAX,       /* NaN propagates; an empty tensor fails (VT_ERR_INVALID_ARGUMENT) */
    VT_FOREACH_OP_COUNT
} vt_foreach_op;

/* A foreach call. Every array holds n entries (the caller's: borrowed for
 * the call; the queued op copies them). out[i] may alias a[i] (in place). b
 * and c broadcast to out[i]'s shape. Dtypes: float (F32, BF16, F16, F64);
 * tensor i computes in double when any of its operands is F64, else in
 * float, and rounds once to out's dtype. The scalar S of tensor i is
 * scalar_tensor's value (read when the kernel runs) if given, else
 * scalars[i] if given, else scalar; S and alpha are rounded to the compute
 * type (alpha to out's dtype when it is BF16/F16, and for add/sub without b
 * S too, as CPU PyTorch's TensorIterator casts them; for mul without b or
 * scalar_tensor S too when out aliases a, as CPU's in-place _foreach_mul_
 * does). */
typedef struct vt_foreach_args {
    vt_foreach_op op;
    int64_t n;
    const vt_tensor *out;
    const vt_tensor *a; /* NULL for VT_FOREACH_ZERO */
    const vt_tensor *b; /* NULL: S takes its place (binary ops) */
    const vt_tensor *c; /* addcmul/addcdiv: required; lerp: optional weights */
    const double *scalars;
    double scalar;
    const vt_tensor *scalar_tensor; /* 1 element, any float dtype */
    double alpha;                   /* add/sub */
    /* Whether the op is the in-place one: 0, out[i] is a[i] (their
     * pointers say); 1, yes; -1, no. (A recorded op's operands may be
     * rewritten to scratch by DeferAndFuse: it says which it was.) CPU's
     * in-place mul_ rounds its scalar to a reduced-float dtype. */
    int in_place;
} vt_foreach_args;

vt_status vt_foreach(const vt_foreach_args *args);
/* Scalar reference: same contract, element by element, no SIMD, no threads. */
vt_status vt_ref_foreach(const vt_foreach_args *args);
/* Argument checks alone (lengths, shapes, dtypes), as the queued op runs them. */
vt_status vt_foreach_check(const vt_foreach_args *args);
const char *vt_foreach_op_name(vt_foreach_op op);

/* Fused Adam / AdamW step over n parameters, as CPU PyTorch's
 * _fused_adam_/_fused_adamw_: one pass reading each param, grad and state
 * once. All tensors contiguous, of one float dtype (F32, BF16, F16) per
 * parameter, same shape as the param. steps[i]: 1-element F32 (read when the
 * kernel runs: the caller has incremented it). lr_tensor (1 element, F32/F64)
 * replaces lr when given. grad_scale (F32, 1 element): grads are divided by
 * it and written back. found_inf (F32, 1 element): nonzero skips the step.
 * max_exp_avg_sqs is required when amsgrad. Math in float, each state
 * rounded once when stored. */
typedef struct vt_fused_adam_args {
    int64_t n;
    const vt_tensor *params, *grads, *exp_avgs, *exp_avg_sqs, *max_exp_avg_sqs, *steps;
    double lr, beta1, beta2, weight_decay, eps;
    const vt_tensor *lr_tensor, *grad_scale, *found_inf;
    int amsgrad, maximize, adamw;
} vt_fused_adam_args;

vt_status vt_fused_adam(const vt_fused_adam_args *args);
vt_status vt_ref_fused_adam(const vt_fused_adam_args *args);
vt_status vt_fused_adam_check(const vt_fused_adam_args *args);

/* Fused SGD step (CPU PyTorch's _fused_sgd_). momentum_buffers: required
 * when momentum != 0; is_first_step copies the (decayed) grad into them. */
typedef struct vt_fused_sgd_args {
    int64_t n;
    const vt_tensor *params, *grads, *momentum_buffers;
    double weight_decay, momentum, lr, dampening;
    const vt_tensor *lr_tensor, *grad_scale, *found_inf;
    int nesterov, maximize, is_first_step;
} vt_fused_sgd_args;

vt_status vt_fused_sgd(const vt_fused_sgd_args *args);
vt_status vt_ref_fused_sgd(const vt_fused_sgd_args *args);
vt_status vt_fused_sgd_check(const vt_fused_sgd_args *args);

/* Queued versions: check on the calling thread, copy every descriptor into
 * one heap block owned by the command (freed when it has run), one enqueue. */
vt_status vt_op_foreach(int dev, const char *name, const vt_foreach_args *args);
vt_status vt_op_fused_adam(int dev, const char *name, const vt_fused_adam_args *args);
vt_status vt_op_fused_sgd(int dev, const char *name, const vt_fused_sgd_args *args);

#endif /* VTPU_OPTIM_H */
