/* optim_avx512.c — the foreach and fused optimizer block kernels built for
 * AVX-512. The same element formulas as the portable file (kernels/optim/optim.h):
 * IEEE add/mul/div/sqrt and explicit fma per lane, no contraction, so every
 * path gives the same bits; only the loops are vectorised (O3 here, and
 * intrinsics for the common Adam loop). */
#pragma GCC optimize("O3", "no-math-errno", "no-trapping-math")
#include <immintrin.h>

#include "kernels/optim/optim.h"
#include "kernels/vmath_avx512.h"

static void fe_f32(const optim_fe_f32 *p, int64_t n, float *out, const float *a, const float *b,
                   const float *c) {
    if (p->op == VT_FOREACH_SQRT) { /* sqrtf's errno branch keeps the vectoriser off this loop */
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, _mm512_sqrt_ps(_mm512_loadu_ps(a + i)));
        if (i < n) {
            const __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
            _mm512_mask_storeu_ps(out + i, k, _mm512_sqrt_ps(_mm512_maskz_loadu_ps(k, a + i)));
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
    const __m512 decay = _mm512_set1_ps(p->adamw ? p->decay : 1.0f), wd = _mm512_set1_ps(p->wd);
    const __m512 lc = _mm512_set1_ps(p->lerp_coeff), c2 = _mm512_set1_ps(p->c2), b2 = _mm512_set1_ps(p->beta2);
    const __m512 bs = _mm512_set1_ps(p->bc2_sqrt), eps = _mm512_set1_ps(p->eps), ns = _mm512_set1_ps(p->neg_step);
    VT_AVX512_FOR16(i, n, k, {
        __m512 pr = _mm512_maskz_loadu_ps(k, param + i), g = _mm512_maskz_loadu_ps(k, grad + i);
        __m512 mv = _mm512_maskz_loadu_ps(k, m + i), vv = _mm512_maskz_loadu_ps(k, v + i);
        __m512 pv = _mm512_mul_ps(pr, decay);
        if (use_wd) g = _mm512_fmadd_ps(pr, wd, g);
        mv = _mm512_fmadd_ps(lc, _mm512_sub_ps(g, mv), small ? mv : g);
        vv = _mm512_fmadd_ps(_mm512_mul_ps(c2, g), g, _mm512_mul_ps(vv, b2));
        _mm512_mask_storeu_ps(m + i, k, mv);
        _mm512_mask_storeu_ps(v + i, k, vv);
        __m512 den = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vv), bs), eps);
        _mm512_mask_storeu_ps(param + i, k, _mm512_add_ps(pv, _mm512_div_ps(_mm512_mul_ps(ns, mv), den)));
    });
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
 * auto-vectoriser out); the flags are uniform, so testing them per 16 lanes
 * costs nothing. Same per-lane operations and order. */
static void sgd_f32(const optim_sgd_f32 *p, int64_t n, float *restrict param, float *restrict grad,
                    float *restrict buf) {
    const __m512 gs = _mm512_set1_ps(p->grad_scale), wd = _mm512_set1_ps(p->wd), mo = _mm512_set1_ps(p->momentum);
    const __m512 omd = _mm512_set1_ps(p->one_minus_damp), nlr = _mm512_set1_ps(p->neg_lr);
    const __m512 sign = _mm512_castsi512_ps(_mm512_set1_epi32((int)0x80000000u));
    VT_AVX512_FOR16(i, n, k, {
        __m512 pv = _mm512_maskz_loadu_ps(k, param + i), g = _mm512_maskz_loadu_ps(k, grad + i);
        if (p->has_scale) {
            g = _mm512_div_ps(g, gs);
            _mm512_mask_storeu_ps(grad + i, k, g);
        }
        if (p->maximize) g = _mm512_xor_ps(g, sign);
        if (p->wd != 0) g = _mm512_fmadd_ps(pv, wd, g);
        if (p->has_momentum) {
            __m512 bv = p->first ? g : _mm512_fmadd_ps(omd, g, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, buf + i), mo));
            _mm512_mask_storeu_ps(buf + i, k, bv);
            g = p->nesterov ? _mm512_fmadd_ps(bv, mo, g) : bv;
        }
        _mm512_mask_storeu_ps(param + i, k, _mm512_fmadd_ps(g, nlr, pv));
    });
}

const optim_table optim_table_avx512 = {"avx512", fe_f32, adam_f32, sgd_f32};
