/* kernels/optim/optim.h — private to the multi-tensor (_foreach_*) and fused
 * optimizer kernels: the element formulas (written once, instantiated by the
 * portable file and by the AVX-512 file, so every path rounds alike) and the
 * per-ISA table of contiguous block kernels. */
#ifndef VTPU_KERNELS_OPTIM_H
#define VTPU_KERNELS_OPTIM_H

#include <math.h>

#include "internal.h"

/* Scalars of one foreach tensor, already in the compute type (CPU PyTorch
 * rounds a Python scalar to the op-math type before the loop). */
typedef struct optim_fe_f32 {
    int op; /* vt_foreach_op */
    float s, alpha;
} optim_fe_f32;
typedef struct optim_fe_f64 {
    int op;
    double s, alpha;
} optim_fe_f64;

/* Adam step constants (CPU's fused kernel: computed in double, then rounded
 * to the op-math type). */
typedef struct optim_adam_f32 {
    float wd, decay, lerp_coeff, beta2, c2, bc2_sqrt, eps, neg_step, grad_scale;
    int lerp_small, adamw, amsgrad, maximize, has_scale;
} optim_adam_f32;

typedef struct optim_sgd_f32 {
    float wd, momentum, one_minus_damp, neg_lr, grad_scale;
    int has_momentum, nesterov, maximize, first, has_scale;
} optim_sgd_f32;

/* Contiguous blocks. b, c: NULL when the operand is the scalar p->s (or not
 * used); out may alias a, b or c exactly. */
typedef void (*optim_fe_f32_fn)(const optim_fe_f32 *p, int64_t n, float *out, const float *a, const float *b,
                                const float *c);
/* Updates param, m, v, mx (NULL unless amsgrad) in place; grad is written
 * (divided by the grad scale) only when has_scale. */
typedef void (*optim_adam_f32_fn)(const optim_adam_f32 *p, int64_t n, float *param, float *grad, float *m, float *v,
                                  float *mx);
typedef void (*optim_sgd_f32_fn)(const optim_sgd_f32 *p, int64_t n, float *param, float *grad, float *buf);

typedef struct optim_table {
    const char *name;
    optim_fe_f32_fn foreach;
    optim_adam_f32_fn adam;
    optim_sgd_f32_fn sgd;
} optim_table;

extern const optim_table optim_table_portable;
#if VT_X86
extern const optim_table optim_table_avx512;
extern const optim_table optim_table_avx2;
#endif
const optim_table *optim_active_table(void);

void optim_fe_f64_block(const optim_fe_f64 *p, int64_t n, double *out, const double *a, const double *b,
                        const double *c);

/* ------------------------------------------------------------ element formulas
 * As CPU PyTorch 2.x computes them (its C++ is built with FMA contraction):
 * add/sub: fma(other, alpha, self); addcmul: fma(value*t1, t2, self);
 * addcdiv: self + (value*t1)/t2; lerp: fma(coeff, end-start, base). */

#define OPTIM_LERP(T, FMA, a, b, w) \
    (fabs((double)(w)) < 0.5 ? FMA((w), (b) - (a), (a)) : FMA((w) - (T)1, (b) - (a), (b)))

#define OPTIM_MAXF(x, y) ((x) != (x) || (y) != (y) ? (x) + (y) : ((x) > (y) ? (x) : (y)))
#define OPTIM_MINF(x, y) ((x) != (x) || (y) != (y) ? (x) + (y) : ((x) < (y) ? (x) : (y)))
#define OPTIM_SIGN(T, x) ((x) != (x) ? (x) : (T)(((x) > 0) - ((x) < 0)))

/* One loop per op, switch outside: the loops vectorise. */
#define OPTIM_FE_BODY(T, FMA, SQRT, EXP, POW)                                                              \
    const T s = p->s, al = p->alpha;                                                                       \
    int64_t i;                                                                                             \
    switch ((vt_foreach_op)p->op) {                                                                        \
    case VT_FOREACH_ADD:                                                                                   \
    case VT_FOREACH_SUB:                                                                                   \
        if (b) for (i = 0; i < n; i++) out[i] = FMA(b[i], al, a[i]);                                       \
        else for (i = 0; i < n; i++) out[i] = FMA(s, al, a[i]);                                            \
        break;                                                                                             \
    case VT_FOREACH_MUL:                                                                                   \
        if (b) for (i = 0; i < n; i++) out[i] = a[i] * b[i];                                               \
        else for (i = 0; i < n; i++) out[i] = a[i] * s;                                                    \
        break;                                                                                             \
    case VT_FOREACH_DIV:                                                                                   \
        if (b) for (i = 0; i < n; i++) out[i] = a[i] / b[i];                                               \
        else for (i = 0; i < n; i++) out[i] = a[i] / s;                                                    \
        break;                                                                                             \
    case VT_FOREACH_MAXIMUM:                                                                               \
        if (b) for (i = 0; i < n; i++) out[i] = OPTIM_MAXF(a[i], b[i]);                                    \
        else for (i = 0; i < n; i++) out[i] = OPTIM_MAXF(a[i], s);                                         \
        break;                                                                                             \
    case VT_FOREACH_MINIMUM:                                                                               \
        if (b) for (i = 0; i < n; i++) out[i] = OPTIM_MINF(a[i], b[i]);                                    \
        else for (i = 0; i < n; i++) out[i] = OPTIM_MINF(a[i], s);                                         \
        break;                                                                                             \
    case VT_FOREACH_CLAMP_MIN: /* NaN of self propagates, a NaN bound is ignored (std::max order) */      \
        if (b) for (i = 0; i < n; i++) out[i] = a[i] < b[i] ? b[i] : a[i];                                 \
        else for (i = 0; i < n; i++) out[i] = a[i] < s ? s : a[i];                                         \
        break;                                                                                             \
    case VT_FOREACH_CLAMP_MAX:                                                                             \
        if (b) for (i = 0; i < n; i++) out[i] = a[i] > b[i] ? b[i] : a[i];                                 \
        else for (i = 0; i < n; i++) out[i] = a[i] > s ? s : a[i];                                         \
        break;                                                                                             \
    case VT_FOREACH_POW:                                                                                   \
        if (b) for (i = 0; i < n; i++) out[i] = POW(a[i], b[i]);                                           \
        else if (s == (T)2) for (i = 0; i < n; i++) out[i] = a[i] * a[i];                                  \
        else if (s == (T)0.5) for (i = 0; i < n; i++) out[i] = SQRT(a[i]);                                 \
        else if (s == (T)1) for (i = 0; i < n; i++) out[i] = a[i];                                         \
        else if (s == (T)-1) for (i = 0; i < n; i++) out[i] = (T)1 / a[i];                                 \
        else for (i = 0; i < n; i++) out[i] = POW(a[i], s);                                                \
        break;                                                                                             \
    case VT_FOREACH_RPOW:                                                                                  \
        for (i = 0; i < n; i++) out[i] = POW(s, a[i]);                                                     \
        break;                                                                                             \
    case VT_FOREACH_ADDCMUL:                                                                               \
        for (i = 0; i < n; i++) out[i] = FMA(s * b[i], c[i], a[i]);                                        \
        break;                                                                                             \
    case VT_FOREACH_ADDCDIV:                                                                               \
        for (i = 0; i < n; i++) out[i] = a[i] + (s * b[i]) / c[i];                                         \
        break;                                                                                             \
    case VT_FOREACH_LERP:                                                                                  \
        if (c) for (i = 0; i < n; i++) out[i] = OPTIM_LERP(T, FMA, a[i], b[i], c[i]);                      \
        else if (fabs((double)s) < 0.5) for (i = 0; i < n; i++) out[i] = FMA(s, b[i] - a[i], a[i]);        \
        else for (i = 0; i < n; i++) out[i] = FMA(s - (T)1, b[i] - a[i], b[i]);                            \
        break;                                                                                             \
    case VT_FOREACH_NEG: for (i = 0; i < n; i++) out[i] = -a[i]; break;                                    \
    case VT_FOREACH_ABS: for (i = 0; i < n; i++) out[i] = a[i] < 0 ? -a[i] : (a[i] == 0 ? (T)0 : a[i]); break; \
    case VT_FOREACH_SQRT: for (i = 0; i < n; i++) out[i] = SQRT(a[i]); break;                              \
    case VT_FOREACH_EXP: for (i = 0; i < n; i++) out[i] = EXP(a[i]); break;                                \
    case VT_FOREACH_SIGN: for (i = 0; i < n; i++) out[i] = OPTIM_SIGN(T, a[i]); break;                     \
    case VT_FOREACH_RECIPROCAL: for (i = 0; i < n; i++) out[i] = (T)1 / a[i]; break;                       \
    case VT_FOREACH_ZERO: for (i = 0; i < n; i++) out[i] = 0; break;                                       \
    case VT_FOREACH_COPY: for (i = 0; i < n; i++) out[i] = a[i]; break;                                    \
    default: break;                                                                                        \
    }

/* CPU PyTorch's fused Adam/AdamW vector path (FusedAdamKernel.cpp), element i. */
#define OPTIM_ADAM_BODY                                                                                    \
    for (int64_t i = 0; i < n; i++) {                                                                      \
        float pv = param[i], g = grad[i];                                                                  \
        if (p->has_scale) {                                                                                \
            g = g / p->grad_scale;                                                                         \
            grad[i] = g;                                                                                   \
        }                                                                                                  \
        if (p->maximize) g = -g;                                                                           \
        if (p->adamw) pv = pv * p->decay;                                                                  \
        else if (p->wd != 0) g = fmaf(pv, p->wd, g);                                                       \
        float mv = m[i];                                                                                   \
        mv = fmaf(p->lerp_coeff, g - mv, p->lerp_small ? mv : g);                                          \
        float vv = fmaf(p->c2 * g, g, v[i] * p->beta2);                                                    \
        m[i] = mv;                                                                                         \
        v[i] = vv;                                                                                         \
        if (p->amsgrad) {                                                                                  \
            float x = mx[i];                                                                               \
            vv = OPTIM_MAXF(x, vv);                                                                        \
            mx[i] = vv;                                                                                    \
        }                                                                                                  \
        float den = sqrtf(vv) / p->bc2_sqrt + p->eps;                                                      \
        param[i] = pv + (p->neg_step * mv) / den;                                                          \
    }

/* CPU PyTorch's fused SGD vector path (FusedSGDKernel.cpp), element i. */
#define OPTIM_SGD_BODY                                                                                     \
    for (int64_t i = 0; i < n; i++) {                                                                      \
        float pv = param[i], g = grad[i];                                                                  \
        if (p->has_scale) {                                                                                \
            g = g / p->grad_scale;                                                                         \
            grad[i] = g;                                                                                   \
        }                                                                                                  \
        if (p->maximize) g = -g;                                                                           \
        if (p->wd != 0) g = fmaf(pv, p->wd, g);                                                            \
        if (p->has_momentum) {                                                                             \
            float bv = p->first ? g : fmaf(p->one_minus_damp, g, buf[i] * p->momentum);                    \
            buf[i] = bv;                                                                                   \
            g = p->nesterov ? fmaf(bv, p->momentum, g) : bv;                                               \
        }                                                                                                  \
        param[i] = fmaf(g, p->neg_lr, pv);                                                                 \
    }

#endif
