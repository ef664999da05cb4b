/* vmath_avx512.h — the Cephes expf core the families' AVX-512 exps share
 * (softmax, attention, the activations; vmath_avx2.h has its AVX2 twin):
 * the range reduction and polynomial, and the lanes whose exp is certainly
 * 0; the pairwise fold of 16 lanes; bf16 <-> f32 on 16 lanes. Include only from files built with the
 * AVX-512 flags. */
#ifndef VTPU_VMATH_AVX512_H
#define VTPU_VMATH_AVX512_H

#include <immintrin.h>
#include <stdint.h>

/* The statements after k run for i in [0, n) in steps of 16, k the step's
 * lane mask: every whole step with k the constant 0xffff (the compiler
 * drops the mask from its loads, stores and arithmetic), then one step over
 * the rest. A mask computed in every step keeps every load and store
 * masked: on Zen 5 the softmax line backward ran 1.5x slower so. */
#define VT_AVX512_FOR16(i, n, k, ...)                                                                          \
    do {                                                                                                       \
        const int64_t n_##i = (n);                                                                             \
        int64_t i = 0;                                                                                         \
        for (; i + 16 <= n_##i; i += 16) {                                                                     \
            const __mmask16 k = (__mmask16)0xffff;                                                             \
            __VA_ARGS__                                                                                        \
        }                                                                                                      \
        if (i < n_##i) {                                                                                       \
            const __mmask16 k = (__mmask16)((1u << (n_##i - i)) - 1);                                         \
            __VA_ARGS__                                                                                        \
        }                                                                                                      \
    } while (0)

/* 16 lanes folded pairwise: l + l+8, then +4, +2, +1 (the portable 16-lane
 * sums' order; vt_avx2_fold16's twin). */
static inline float vt_avx512_fold16(__m512 v) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}

/* The lanes whose exp is not certainly 0 (x >= -104 or NaN). The exps
 * compute the other lanes as exp(0) and clear them (maskz): a scalef result
 * in the subnormal range costs a microcode assist of about a hundred cycles,
 * and a masked score or logit (-inf) would pay it in every lane. */
static inline __mmask16 vt_avx512_exp_keep(__m512 x) {
    return _mm512_cmp_ps_mask(x, _mm512_set1_ps(-104.0f), _CMP_NLT_UQ);
}

/* Cephes expf on x already clamped (to [-104, 89] or less): the polynomial
 * p with e^x = p * 2^n (n in *n, for scalef). one_last: add the 1 after the
 * last FMA (the softmax files' order) instead of folding r + 1 into it. */
static inline __m512 vt_avx512_exp_poly(__m512 x, __m512 *n, int one_last) {
    *n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(*n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(*n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    if (one_last) return _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    return _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
}

/* bf16 <-> f32 on 16 lanes, bit-identical to vt_bf16_to_f32 /
 * vt_f32_to_bf16: widening is exact; narrowing rounds to nearest even and
 * gives every NaN 0x7fc0. */
static inline __m512 vt_avx512_bf16x16_to_f32(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static inline __m256i vt_avx512_f32x16_to_bf16(__m512 f) {
    __m512i u = _mm512_castps_si512(f);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7fc0));
    return _mm512_cvtepi32_epi16(r);
}

/* The same narrowing where the file is built for AVX512-BF16: one
 * VCVTNEPS2BF16 (16 lanes) or VCVTNE2PS2BF16 (32: lo, then hi) unless a
 * lane is NaN or denormal (which the instructions keep or read as zero):
 * those vectors take the integer rounding. Elsewhere the integer rounding. */
static inline __m256i vt_avx512_f32x16_to_bf16_fast(__m512 f) {
#ifdef __AVX512BF16__
    if (__builtin_expect(_mm512_fpclass_ps_mask(f, 0xa1) == 0, 1)) /* quiet NaN 0x01, denormal 0x20, signalling 0x80 */
        return (__m256i)_mm512_cvtneps_pbh(f);
#endif
    return vt_avx512_f32x16_to_bf16(f);
}
static inline __m512i vt_avx512_f32x32_to_bf16_fast(__m512 lo, __m512 hi) {
#ifdef __AVX512BF16__
    if (__builtin_expect((_mm512_fpclass_ps_mask(lo, 0xa1) | _mm512_fpclass_ps_mask(hi, 0xa1)) == 0, 1))
        return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
#endif
    return _mm512_inserti64x4(_mm512_castsi256_si512(vt_avx512_f32x16_to_bf16(lo)), vt_avx512_f32x16_to_bf16(hi), 1);
}

#endif
