/* elementwise_avx512.c — AVX512 versions of the contiguous f32 binary microkernels,
 * picked at run time by elementwise_ops.c. Plain IEEE add/sub/mul/div per
 * lane, so results are bit-identical to the portable loop. */
#include <immintrin.h>

#include "internal.h"

/* f32 outputs of a call this large stream past the cache (vt_stream_store_bytes). */
#define NT_MIN_ELEMS (vt_stream_store_bytes() / 4)

/* add/sub/mul/div: kernels/elementwise/elementwise_f32_binary.h on 16 lanes */
#define VEC __m512
#define W 16
#define VI(name) _mm512_##name
#define SFX avx512
#include "kernels/elementwise/elementwise_f32_binary.h"
#include "kernels/elementwise/erf_table.h"
#include "kernels/vmath_avx512.h"
#undef VEC
#undef W
#undef VI
#undef SFX

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

/* erf_table.h's piecewise polynomial. From |x| = 4 on, the last interval's
 * 1 - p(0.125) rounds to 1 (erfc(4) is below half an ulp of 1). */
static inline __m512 erf512(__m512 x) {
    const float(*T)[16] = vt_erf_table;
    __m512 axc = _mm512_min_ps(_mm512_set1_ps(4.0f), _mm512_abs_ps(x)); /* NaN (second operand) passes */
    /* NaN converts to INT_MIN: any table entry, the result stays NaN */
    __m512i i = _mm512_min_epi32(_mm512_cvttps_epi32(_mm512_mul_ps(axc, _mm512_set1_ps(4.0f))), _mm512_set1_epi32(15));
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

static inline __m512 gelu512(__m512 x) {
    __m512 e = erf512(_mm512_mul_ps(x, _mm512_set1_ps(0.707106781186547524f)));
    __m512 r = _mm512_mul_ps(_mm512_mul_ps(x, _mm512_set1_ps(0.5f)), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    /* +-inf give NaN, as CPU PyTorch's float gelu */
    __mmask16 inf = _mm512_cmp_ps_mask(_mm512_abs_ps(x), _mm512_set1_ps(INFINITY), _CMP_EQ_OQ);
    return _mm512_mask_blend_ps(inf, r, _mm512_set1_ps(NAN));
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

/* Streaming stores once the output is 64-byte aligned and large. */
#define ACT_LOOP(n, out, EXPR_OF_I)                                                                            \
    do {                                                                                                       \
        int64_t i = 0;                                                                                         \
        if ((n) >= NT_MIN_ELEMS) {                                                                             \
            int64_t head = (int64_t)((64 - ((uintptr_t)(out) & 63)) & 63) / 4;                                 \
            if (((uintptr_t)(out) & 3) == 0 && head > 0) {                                                     \
                __mmask16 m = (__mmask16)((1u << head) - 1);                                                   \
                _mm512_mask_storeu_ps((out), m, EXPR_OF_I(m));                                                 \
                i = head;                                                                                      \
            }                                                                                                  \
            if (((uintptr_t)((out) + i) & 63) == 0) {                                                          \
                for (; i + 16 <= (n); i += 16) _mm512_stream_ps((out) + i, EXPR_OF_I((__mmask16)0xffff));      \
                _mm_sfence();                                                                                  \
            }                                                                                                  \
        }                                                                                                      \
        for (; i + 16 <= (n); i += 16) _mm512_storeu_ps((out) + i, EXPR_OF_I((__mmask16)0xffff));              \
        if (i < (n)) {                                                                                         \
            __mmask16 m = (__mmask16)((1u << ((n) - i)) - 1);                                                  \
            _mm512_mask_storeu_ps((out) + i, m, EXPR_OF_I(m));                                                 \
        }                                                                                                      \
    } while (0)

#define LD(p, m) _mm512_maskz_loadu_ps((m), (p) + i)

/* One loop per activation: E(m) is the vector expression for mask m. */
#define ACT_UNARY(NAME, F)                                                                                     \
    static void NAME(int64_t n, float *out, const float *x) {                                                  \
        ACT_LOOP(n, out, F##_E1);                                                                              \
    }
#define ACT_BINARY(NAME, F)                                                                                    \
    static void NAME(int64_t n, float *out, const float *g, const float *x) {                                  \
        ACT_LOOP(n, out, F##_E2);                                                                              \
    }
#define silu512_E1(m) silu512(LD(x, m))
#define gelu512_E1(m) gelu512(LD(x, m))
#define gelu_tanh512_E1(m) gelu_tanh512(LD(x, m))
#define tanh512_E1(m) tanh512(LD(x, m))
#define sigmoid512_E1(m) sigmoid512(LD(x, m))
#define silu_bw512_E2(m) silu_bw512(LD(g, m), LD(x, m))
#define gelu_bw512_E2(m) gelu_bw512(LD(g, m), LD(x, m))
#define gelu_tanh_bw512_E2(m) gelu_tanh_bw512(LD(g, m), LD(x, m))
ACT_UNARY(silu_avx512, silu512)
ACT_UNARY(gelu_avx512, gelu512)
ACT_UNARY(gelu_tanh_avx512, gelu_tanh512)
ACT_UNARY(tanh_avx512, tanh512)
ACT_UNARY(sigmoid_avx512, sigmoid512)
ACT_BINARY(silu_bw_avx512, silu_bw512)
ACT_BINARY(gelu_bw_avx512, gelu_bw512)
ACT_BINARY(gelu_tanh_bw_avx512, gelu_tanh_bw512)
static void addcmul_avx512(int64_t n, float *out, const float *a, const float *b, const float *c, float v) {
    const __m512 vv = _mm512_set1_ps(v);
#define E(m) _mm512_add_ps(LD(a, m), _mm512_mul_ps(_mm512_mul_ps(vv, LD(b, m)), LD(c, m)))
    ACT_LOOP(n, out, E);
#undef E
}

const vt_f32_act_table vt_f32_act_avx512 = {silu_avx512,    gelu_avx512,         gelu_tanh_avx512, silu_bw_avx512,
                                            gelu_bw_avx512, gelu_tanh_bw_avx512, addcmul_avx512,   tanh_avx512,
                                            sigmoid_avx512};
