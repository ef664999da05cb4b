/* elementwise_avx2.c — AVX2 versions of the contiguous f32 binary microkernels,
 * picked at run time by elementwise_ops.c (plain IEEE add/sub/mul/div per
 * lane, so results are bit-identical to the portable loop), and of the f32
 * activations (elementwise_math.c). */
#include <immintrin.h>

#include "internal.h"
#include "kernels/vmath_avx2.h"

/* f32 outputs of a call this large stream past the cache (vt_stream_store_bytes). */
#define NT_MIN_ELEMS (vt_stream_store_bytes() / 4)

/* add/sub/mul/div: kernels/elementwise/elementwise_f32_binary.h on 8 lanes */
#define VEC __m256
#define W 8
#define VI(name) _mm256_##name
#define SFX avx2
#include "kernels/elementwise/elementwise_f32_binary.h"
#include "kernels/elementwise/erf_table.h"
#undef VEC
#undef W
#undef VI
#undef SFX

/* ------------------------------------------------------------ activations
 * The AVX-512 file's activation formulas on 8 lanes, with its exp (Cephes,
 * kernels/vmath_avx2.h), tanh and erf. Tails run through masked loads and
 * stores: every element sees one path. */

static inline __m256 abs8(__m256 x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }

static inline __m256 exp8(__m256 x) {
    __m256 keep = vt_avx2_keep(x);
    x = _mm256_and_ps(keep, _mm256_min_ps(_mm256_set1_ps(88.8f), _mm256_max_ps(_mm256_set1_ps(-104.0f), x))); /* NaN passes */
    __m256 n, p = vt_avx2_exp_poly(x, &n, 0);
    return _mm256_and_ps(keep, vt_avx2_scalef(p, n));
}

static inline __m256 tanh8(__m256 x) {
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 ax = abs8(x), z = _mm256_mul_ps(x, x);
    __m256 p = _mm256_set1_ps(-5.70498872745E-3f);
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(2.06390887954E-2f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-5.37397155531E-2f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.33314422036E-1f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-3.33332819422E-1f));
    __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), x, x);
    __m256 e = exp8(_mm256_add_ps(ax, ax));
    __m256 big = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
    __m256 m = _mm256_cmp_ps(ax, _mm256_set1_ps(0.625f), _CMP_LT_OQ);
    return _mm256_or_ps(abs8(_mm256_blendv_ps(big, small, m)), _mm256_and_ps(x, _mm256_set1_ps(-0.0f)));
}

/* Entry i (0..15) of a 16-entry row of erf_table.h in each lane: two
 * 8-entry permutes and a blend on i's bit 3. */
static inline __m256 erf_pick(const float *row, __m256i i, __m256 high) {
    return _mm256_blendv_ps(_mm256_permutevar8x32_ps(_mm256_loadu_ps(row), i),
                            _mm256_permutevar8x32_ps(_mm256_loadu_ps(row + 8), i), high);
}

/* erf512's operations on 8 lanes: the same bits. */
static inline __m256 erf8(__m256 x) {
    const float(*T)[16] = vt_erf_table;
    __m256 axc = _mm256_min_ps(_mm256_set1_ps(4.0f), abs8(x)); /* NaN (second operand) passes */
    __m256i i = _mm256_min_epi32(_mm256_cvttps_epi32(_mm256_mul_ps(axc, _mm256_set1_ps(4.0f))), _mm256_set1_epi32(15));
    __m256 high = _mm256_castsi256_ps(_mm256_slli_epi32(i, 28)); /* bit 3 as the sign: entries 8-15 */
    __m256 t = _mm256_sub_ps(axc, erf_pick(T[0], i, high));
    __m256 g = _mm256_fmadd_ps(erf_pick(T[6], i, high), t, erf_pick(T[5], i, high));
    g = _mm256_fmadd_ps(g, t, erf_pick(T[4], i, high));
    g = _mm256_fmadd_ps(g, t, erf_pick(T[3], i, high));
    g = _mm256_fmadd_ps(g, t, erf_pick(T[2], i, high));
    g = _mm256_fmadd_ps(g, t, erf_pick(T[1], i, high));
    __m256 y = _mm256_blendv_ps(_mm256_mul_ps(axc, g), _mm256_sub_ps(_mm256_set1_ps(1.0f), g),
                                _mm256_castsi256_ps(_mm256_cmpgt_epi32(i, _mm256_set1_epi32(3))));
    return _mm256_or_ps(y, _mm256_and_ps(x, _mm256_set1_ps(-0.0f)));
}

/* sigmoid512's form: e = exp(-|x|) never overflows. */
static inline __m256 sigmoid8(__m256 x) {
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 e = exp8(_mm256_xor_ps(abs8(x), _mm256_set1_ps(-0.f)));
    __m256 num = _mm256_blendv_ps(one, e, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
    return _mm256_div_ps(num, _mm256_add_ps(one, e));
}

static inline __m256 silu8(__m256 x) {
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), exp8(_mm256_xor_ps(x, _mm256_set1_ps(-0.f)))));
}

static inline __m256 gelu8(__m256 x) {
    __m256 e = erf8(_mm256_mul_ps(x, _mm256_set1_ps(0.707106781186547524f)));
    __m256 r = _mm256_mul_ps(_mm256_mul_ps(x, _mm256_set1_ps(0.5f)), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
    /* +-inf give NaN on every vtpu path, as CPU PyTorch's AVX-512 float gelu (its AVX2 one gives +inf at +inf) */
    return _mm256_blendv_ps(r, _mm256_set1_ps(NAN), _mm256_cmp_ps(abs8(x), _mm256_set1_ps(INFINITY), _CMP_EQ_OQ));
}

static inline __m256 gelu_tanh8(__m256 x) {
    const __m256 beta = _mm256_set1_ps((float)(1.41421356237309504880 * 1.12837916709551257390 * 0.5));
    __m256 cube = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    __m256 inner = _mm256_mul_ps(beta, _mm256_add_ps(x, _mm256_mul_ps(_mm256_set1_ps(0.044715f), cube)));
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), _mm256_add_ps(_mm256_set1_ps(1.0f), tanh8(inner)));
}

static inline __m256 silu_bw8(__m256 dy, __m256 x) {
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 s = _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_xor_ps(x, _mm256_set1_ps(-0.f)))));
    return _mm256_mul_ps(_mm256_mul_ps(dy, s), _mm256_add_ps(one, _mm256_mul_ps(x, _mm256_sub_ps(one, s))));
}

/* PyTorch's gelu_backward: dy * (cdf + x * pdf). */
static inline __m256 gelu_bw8(__m256 dy, __m256 x) {
    const __m256 half = _mm256_set1_ps(0.5f);
    __m256 cdf = _mm256_mul_ps(
        half, _mm256_add_ps(_mm256_set1_ps(1.0f), erf8(_mm256_mul_ps(x, _mm256_set1_ps(0.707106781186547524f)))));
    __m256 pdf = _mm256_mul_ps(_mm256_set1_ps((float)(1.12837916709551257390 * 0.707106781186547524400844362104849039 * 0.5)),
                               exp8(_mm256_mul_ps(_mm256_mul_ps(x, x), _mm256_set1_ps(-0.5f))));
    return _mm256_mul_ps(dy, _mm256_fmadd_ps(x, pdf, cdf));
}

static inline __m256 gelu_tanh_bw8(__m256 dy, __m256 x) {
    const __m256 one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f);
    const __m256 beta = _mm256_set1_ps((float)(1.41421356237309504880 * 1.12837916709551257390 * 0.5));
    const __m256 kappa = _mm256_set1_ps(0.044715f);
    __m256 x_sq = _mm256_mul_ps(x, x), x_cube = _mm256_mul_ps(x_sq, x);
    __m256 th = tanh8(_mm256_mul_ps(beta, _mm256_add_ps(x, _mm256_mul_ps(kappa, x_cube))));
    __m256 left = _mm256_mul_ps(half, x), right = _mm256_add_ps(one, th);
    __m256 left_d = _mm256_mul_ps(half, right);
    __m256 tanh_d = _mm256_sub_ps(one, _mm256_mul_ps(th, th));
    __m256 inner_d = _mm256_mul_ps(beta, _mm256_add_ps(one, _mm256_mul_ps(_mm256_set1_ps(3.0f), _mm256_mul_ps(kappa, x_sq))));
    __m256 right_d = _mm256_mul_ps(_mm256_mul_ps(left, tanh_d), inner_d);
    return _mm256_mul_ps(dy, _mm256_add_ps(left_d, right_d));
}

#define LD8(p) vt_avx2_load((p) + i, k)
#define ACT_LOOP8(n, out, E)                                                                                   \
    for (int64_t i = 0; i < (n); i += 8) {                                                                     \
        const __m256i k = vt_avx2_tail((n) - i);                                                               \
        vt_avx2_store((out) + i, k, E);                                                                        \
    }
#define ACT_UNARY8(NAME, F)                                                                                    \
    static void NAME(int64_t n, float *out, const float *x) { ACT_LOOP8(n, out, F(LD8(x))) }
#define ACT_BINARY8(NAME, F)                                                                                   \
    static void NAME(int64_t n, float *out, const float *g, const float *x) { ACT_LOOP8(n, out, F(LD8(g), LD8(x))) }
ACT_UNARY8(silu_avx2, silu8)
ACT_UNARY8(gelu_avx2, gelu8)
ACT_UNARY8(gelu_tanh_avx2, gelu_tanh8)
ACT_UNARY8(tanh_avx2, tanh8)
ACT_UNARY8(sigmoid_avx2, sigmoid8)
ACT_BINARY8(silu_bw_avx2, silu_bw8)
ACT_BINARY8(gelu_bw_avx2, gelu_bw8)
ACT_BINARY8(gelu_tanh_bw_avx2, gelu_tanh_bw8)
static void addcmul_avx2(int64_t n, float *out, const float *a, const float *b, const float *c, float v) {
    const __m256 vv = _mm256_set1_ps(v);
    ACT_LOOP8(n, out, _mm256_add_ps(LD8(a), _mm256_mul_ps(_mm256_mul_ps(vv, LD8(b)), LD8(c))))
}

const vt_f32_act_table vt_f32_act_avx2 = {silu_avx2,    gelu_avx2,         gelu_tanh_avx2, silu_bw_avx2,
                                          gelu_bw_avx2, gelu_tanh_bw_avx2, addcmul_avx2,   tanh_avx2,
                                          sigmoid_avx2};
