/* act_avx512.h — the activations' AVX-512 vector math on 16 f32 lanes,
 * shared by the f32 loops (elementwise_avx512.c) and the bf16 loops
 * (elementwise_avx512bf16.c), so a bf16 activation is its f32 result
 * rounded once. Include only from files built with the AVX-512 flags. */
#ifndef VTPU_KERNELS_ACT_AVX512_H
#define VTPU_KERNELS_ACT_AVX512_H

#include <immintrin.h>
#include <math.h>

#include "kernels/elementwise/erf_table.h"
#include "kernels/vmath_avx512.h"

/* ------------------------------------------------------------ activations
 * silu, gelu and addcmul with PyTorch's vector formulas. exp is Cephes'
 * single-precision range reduction and polynomial (about 1 ulp) with
 * scalef doing the 2^n, so overflow, underflow and NaN come out as libm's;
 * gelu's erf is a piecewise polynomial (erf512).
 * Tails run through masked loads and stores: every element sees one path. */

static inline __m512 exp512(__m512 x) {
    __mmask16 keep = vt_avx512_exp_keep(x); /* below -104: cleared */
    x = _mm512_maskz_min_ps(keep, _mm512_set1_ps(88.8f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x)); /* NaN passes */
    __m512 n, p = vt_avx512_exp_poly(x, &n, 0);
    return _mm512_maskz_scalef_ps(keep, p, n);
}

/* Cephes tanhf: odd polynomial below 0.625, 1 - 2 / (exp(2|x|) + 1) above. */
static inline __m512 tanh512(__m512 x) {
    const __m512 one = _mm512_set1_ps(1.0f);
    __m512 ax = _mm512_abs_ps(x);
    __m512 z = _mm512_mul_ps(x, x);
    __m512 p = _mm512_set1_ps(-5.70498872745E-3f);
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(2.06390887954E-2f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-5.37397155531E-2f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(1.33314422036E-1f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-3.33332819422E-1f));
    __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, z), x, x);
    __m512 e = exp512(_mm512_add_ps(ax, ax));
    __m512 big = _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
    __mmask16 m = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.625f), _CMP_LT_OQ);
    /* the sign of x, -0.0 included */
    return _mm512_or_ps(_mm512_abs_ps(_mm512_mask_blend_ps(m, big, small)), _mm512_and_ps(x, _mm512_set1_ps(-0.0f)));
}

/* erf_table.h's piecewise polynomial. |x| is clamped just below 4, so the
 * interval index floor(4 |x|) is at most 15 without a clamp of its own;
 * from there on the last interval's 1 - p(t) rounds to 1 (erfc(4) is
 * below half an ulp of 1), as it would at 4. */
static inline __m512 erf512(__m512 x) {
    const float(*T)[16] = vt_erf_table;
    /* NaN (the second operand) passes */
    __m512 axc = _mm512_min_ps(_mm512_set1_ps(0x1.fffffep+1f), _mm512_abs_ps(x));
    /* NaN converts to INT_MIN: table entry 0 (the permutes read 4 bits), the result stays NaN */
    __m512i i = _mm512_cvttps_epi32(_mm512_mul_ps(axc, _mm512_set1_ps(4.0f)));
    __m512 t = _mm512_sub_ps(axc, _mm512_permutexvar_ps(i, _mm512_loadu_ps(T[0])));
    __m512 g = _mm512_fmadd_ps(_mm512_permutexvar_ps(i, _mm512_loadu_ps(T[6])), t,
                               _mm512_permutexvar_ps(i, _mm512_loadu_ps(T[5])));
    g = _mm512_fmadd_ps(g, t, _mm512_permutexvar_ps(i, _mm512_loadu_ps(T[4])));
    g = _mm512_fmadd_ps(g, t, _mm512_permutexvar_ps(i, _mm512_loadu_ps(T[3])));
    g = _mm512_fmadd_ps(g, t, _mm512_permutexvar_ps(i, _mm512_loadu_ps(T[2])));
    g = _mm512_fmadd_ps(g, t, _mm512_permutexvar_ps(i, _mm512_loadu_ps(T[1])));
    /* |x| < 1: |x| g; from 1 on: 1 - g */
    __m512 y = _mm512_mask_sub_ps(_mm512_mul_ps(axc, g), _mm512_cmpge_epi32_mask(i, _mm512_set1_epi32(4)),
                                  _mm512_set1_ps(1.0f), g);
    return _mm512_or_ps(y, _mm512_and_ps(x, _mm512_set1_ps(-0.0f)));
}

/* sigmoid from e = exp(-|x|) <= 1, which cannot overflow: 1 / (1 + e) for
 * x >= 0, e / (1 + e) below, so a large negative x keeps its tiny (denormal)
 * value instead of the 1 / (1 + exp(88.8)) a clamped exp(-x) would give. */
static inline __m512 sigmoid512(__m512 x) {
    const __m512 one = _mm512_set1_ps(1.0f);
    __m512 e = exp512(_mm512_xor_ps(_mm512_abs_ps(x), _mm512_set1_ps(-0.f)));
    __m512 num = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ), one, e);
    return _mm512_div_ps(num, _mm512_add_ps(one, e));
}

static inline __m512 silu512(__m512 x) {
    const __m512 one = _mm512_set1_ps(1.0f);
    return _mm512_div_ps(x, _mm512_add_ps(one, exp512(_mm512_xor_ps(x, _mm512_set1_ps(-0.f)))));
}

/* +-inf give NaN, as CPU PyTorch's float gelu: one VFIXUPIMMPS replaces
 * the lanes whose x is -inf (token 4) or +inf (token 5) by the default
 * NaN (response 3), the NaN an invalid operation makes. */
static inline __m512 gelu512(__m512 x) {
    __m512 e = erf512(_mm512_mul_ps(x, _mm512_set1_ps(0.707106781186547524f)));
    __m512 r = _mm512_mul_ps(_mm512_mul_ps(x, _mm512_set1_ps(0.5f)), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    return _mm512_fixupimm_ps(r, x, _mm512_set1_epi32(0x00330000), 0);
}

static inline __m512 gelu_tanh512(__m512 x) {
    const __m512 beta = _mm512_set1_ps((float)(1.41421356237309504880 * 1.12837916709551257390 * 0.5));
    __m512 cube = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
    __m512 inner = _mm512_mul_ps(beta, _mm512_add_ps(x, _mm512_mul_ps(_mm512_set1_ps(0.044715f), cube)));
    return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), _mm512_add_ps(_mm512_set1_ps(1.0f), tanh512(inner)));
}

static inline __m512 silu_bw512(__m512 dy, __m512 x) {
    const __m512 one = _mm512_set1_ps(1.0f);
    __m512 s = _mm512_div_ps(one, _mm512_add_ps(one, exp512(_mm512_xor_ps(x, _mm512_set1_ps(-0.f)))));
    return _mm512_mul_ps(_mm512_mul_ps(dy, s), _mm512_add_ps(one, _mm512_mul_ps(x, _mm512_sub_ps(one, s))));
}

/* PyTorch's gelu_backward: dy * (cdf + x * pdf). */
static inline __m512 gelu_bw512(__m512 dy, __m512 x) {
    const __m512 half = _mm512_set1_ps(0.5f);
    __m512 cdf = _mm512_mul_ps(half, _mm512_add_ps(_mm512_set1_ps(1.0f),
                                                   erf512(_mm512_mul_ps(x, _mm512_set1_ps(0.707106781186547524f)))));
    __m512 pdf = _mm512_mul_ps(_mm512_set1_ps((float)(1.12837916709551257390 * 0.707106781186547524400844362104849039 * 0.5)),
                               exp512(_mm512_mul_ps(_mm512_mul_ps(x, x), _mm512_set1_ps(-0.5f))));
    return _mm512_mul_ps(dy, _mm512_fmadd_ps(x, pdf, cdf));
}

static inline __m512 gelu_tanh_bw512(__m512 dy, __m512 x) {
    const __m512 one = _mm512_set1_ps(1.0f), half = _mm512_set1_ps(0.5f);
    const __m512 beta = _mm512_set1_ps((float)(1.41421356237309504880 * 1.12837916709551257390 * 0.5));
    const __m512 kappa = _mm512_set1_ps(0.044715f);
    __m512 x_sq = _mm512_mul_ps(x, x), x_cube = _mm512_mul_ps(x_sq, x);
    __m512 th = tanh512(_mm512_mul_ps(beta, _mm512_add_ps(x, _mm512_mul_ps(kappa, x_cube))));
    __m512 left = _mm512_mul_ps(half, x), right = _mm512_add_ps(one, th);
    __m512 left_d = _mm512_mul_ps(half, right);
    __m512 tanh_d = _mm512_sub_ps(one, _mm512_mul_ps(th, th));
    __m512 inner_d = _mm512_mul_ps(beta, _mm512_add_ps(one, _mm512_mul_ps(_mm512_set1_ps(3.0f), _mm512_mul_ps(kappa, x_sq))));
    __m512 right_d = _mm512_mul_ps(_mm512_mul_ps(left, tanh_d), inner_d);
    return _mm512_mul_ps(dy, _mm512_add_ps(left_d, right_d));
}

#endif
