/* optim_avx2.c — the foreach and fused optimizer block kernels built for
 * AVX2, optim_avx512.c's loops on 8 lanes. The same element formulas as
 * the portable file (kernels/optim/optim.h):
 * IEEE add/mul/div/sqrt and explicit fma per lane, no contraction, so every
 * path gives the same bits; only the loops are vectorised (O3 here, and
 * intrinsics for the common Adam loop). */
#pragma GCC optimize("O3", "no-math-errno", "no-trapping-math")
#include <immintrin.h>

#include "kernels/optim/optim.h"
#include "kernels/vmath_avx2.h"

static void fe_f32(const optim_fe_f32 *p, int64_t n, float *out, const float *a, const float *b,
                   const float *c) {
    if (p->op == VT_FOREACH_SQRT) { /* sqrtf's errno branch keeps the vectoriser off this loop */
        for (int64_t i = 0; i < n; i += 8) {
            const __m256i k = vt_avx2_tail(n - i);
            vt_avx2_store(out + i, k, _mm256_sqrt_ps(vt_avx2_load(a + i, k)));
        }
        return;
    }
    OPTIM_FE_BODY(float, fmaf, sqrtf, expf, powf)
}

/* The common Adam case (no amsgrad, grad scale or maximize), written with
 * intrinsics: the auto-vectoriser gives up on this loop (sqrtf's errno
 * branch), and a scalar loop here was slower than CPU PyTorch's fused step.
 * Same per-lane operations and order as OPTIM_ADAM_BODY. */
static inline __attribute__((always_inline)) void adam_plain(const optim_adam_f32 *p, int64_t n, float *restrict param,
                                                             const float *restrict grad, float *restrict m,
                                                             float *restrict v, const int small, const int use_wd) {
    const __m256 decay = _mm256_set1_ps(p->adamw ? p->decay : 1.0f), wd = _mm256_set1_ps(p->wd);
    const __m256 lc = _mm256_set1_ps(p->lerp_coeff), c2 = _mm256_set1_ps(p->c2), b2 = _mm256_set1_ps(p->beta2);
    const __m256 bs = _mm256_set1_ps(p->bc2_sqrt), eps = _mm256_set1_ps(p->eps), ns = _mm256_set1_ps(p->neg_step);
    for (int64_t i = 0; i < n; i += 8) {
        const __m256i k = vt_avx2_tail(n - i);
        __m256 pr = vt_avx2_load(param + i, k), g = vt_avx2_load(grad + i, k);
        __m256 mv = vt_avx2_load(m + i, k), vv = vt_avx2_load(v + i, k);
        __m256 pv = _mm256_mul_ps(pr, decay);
        if (use_wd) g = _mm256_fmadd_ps(pr, wd, g);
        mv = _mm256_fmadd_ps(lc, _mm256_sub_ps(g, mv), small ? mv : g);
        vv = _mm256_fmadd_ps(_mm256_mul_ps(c2, g), g, _mm256_mul_ps(vv, b2));
        vt_avx2_store(m + i, k, mv);
        vt_avx2_store(v + i, k, vv);
        __m256 den = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vv), bs), eps);
        vt_avx2_store(param + i, k, _mm256_add_ps(pv, _mm256_div_ps(_mm256_mul_ps(ns, mv), den)));
    }
}

static void adam_f32(const optim_adam_f32 *p, int64_t n, float *restrict param, float *restrict grad,
                     float *restrict m, float *restrict v, float *restrict mx) {
    if (!p->amsgrad && !p->has_scale && !p->maximize) {
        const int use_wd = !p->adamw && p->wd != 0; /* AdamW: decay is applied to pv instead */
        if (p->lerp_small) {
            if (use_wd) adam_plain(p, n, param, grad, m, v, 1, 1);
            else adam_plain(p, n, param, grad, m, v, 1, 0);
        } else {
            if (use_wd) adam_plain(p, n, param, grad, m, v, 0, 1);
            else adam_plain(p, n, param, grad, m, v, 0, 0);
        }
        return;
    }
    OPTIM_ADAM_BODY
}

/* OPTIM_SGD_BODY with intrinsics (its per-element flag tests kept the
 * auto-vectoriser out); the flags are uniform, so testing them per 8 lanes
 * costs nothing. Same per-lane operations and order. */
static void sgd_f32(const optim_sgd_f32 *p, int64_t n, float *restrict param, float *restrict grad,
                    float *restrict buf) {
    const __m256 gs = _mm256_set1_ps(p->grad_scale), wd = _mm256_set1_ps(p->wd), mo = _mm256_set1_ps(p->momentum);
    const __m256 omd = _mm256_set1_ps(p->one_minus_damp), nlr = _mm256_set1_ps(p->neg_lr);
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    for (int64_t i = 0; i < n; i += 8) {
        const __m256i k = vt_avx2_tail(n - i);
        __m256 pv = vt_avx2_load(param + i, k), g = vt_avx2_load(grad + i, k);
        if (p->has_scale) {
            g = _mm256_div_ps(g, gs);
            vt_avx2_store(grad + i, k, g);
        }
        if (p->maximize) g = _mm256_xor_ps(g, sign);
        if (p->wd != 0) g = _mm256_fmadd_ps(pv, wd, g);
        if (p->has_momentum) {
            __m256 bv = p->first ? g : _mm256_fmadd_ps(omd, g, _mm256_mul_ps(vt_avx2_load(buf + i, k), mo));
            vt_avx2_store(buf + i, k, bv);
            g = p->nesterov ? _mm256_fmadd_ps(bv, mo, g) : bv;
        }
        vt_avx2_store(param + i, k, _mm256_fmadd_ps(g, nlr, pv));
    }
}

const optim_table optim_table_avx2 = {"avx2", fe_f32, adam_f32, sgd_f32};
