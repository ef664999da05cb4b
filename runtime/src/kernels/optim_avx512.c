/* optim_avx512.c — the foreach and fused optimizer block kernels built for
 * AVX-512. The same element formulas as the portable file (kernels/optim.h):
 * IEEE add/mul/div/sqrt and explicit fma per lane, no contraction, so every
 * path gives the same bits; only the loops are vectorised (O3 here). */
#pragma GCC optimize("O3", "no-math-errno", "no-trapping-math")
#include "kernels/optim.h"

static void fe_f32(const optim_fe_f32 *p, int64_t n, float *out, const float *a, const float *b,
                   const float *c) {
    OPTIM_FE_BODY(float, fmaf, sqrtf, expf, powf)
}

static void adam_f32(const optim_adam_f32 *p, int64_t n, float *restrict param, float *restrict grad,
                     float *restrict m, float *restrict v, float *restrict mx) {
    if (!p->amsgrad && !p->has_scale && !p->maximize) {
        /* The common case as its own loop, without per-element flags. */
        const float decay = p->adamw ? p->decay : 1.0f, wd = p->adamw ? 0.0f : p->wd;
        const float lc = p->lerp_coeff, c2 = p->c2, b2 = p->beta2, bs = p->bc2_sqrt, eps = p->eps, ns = p->neg_step;
        const int small = p->lerp_small, use_wd = wd != 0;
        for (int64_t i = 0; i < n; i++) {
            float pv = param[i] * decay, g = grad[i];
            if (use_wd) g = fmaf(param[i], wd, g);
            float mv = m[i];
            mv = fmaf(lc, g - mv, small ? mv : g);
            float vv = fmaf(c2 * g, g, v[i] * b2);
            m[i] = mv;
            v[i] = vv;
            float den = sqrtf(vv) / bs + eps;
            param[i] = pv + (ns * mv) / den;
        }
        return;
    }
    OPTIM_ADAM_BODY
}

static void sgd_f32(const optim_sgd_f32 *p, int64_t n, float *restrict param, float *restrict grad,
                    float *restrict buf) {
    OPTIM_SGD_BODY
}

const optim_table optim_table_avx512 = {"avx512", fe_f32, adam_f32, sgd_f32};
