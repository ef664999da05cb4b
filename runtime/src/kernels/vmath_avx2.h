/* vmath_avx2.h — the AVX2 building blocks the families' *_avx2.c files
 * share: tail masks for the masked loads and stores that stand in for
 * AVX-512's, horizontal reductions, and the Cephes expf core of
 * vmath_avx512.h (same range reduction, polynomial and FMAs), with scalef's
 * x * 2^n done as two exact power-of-two products so that underflow to
 * subnormals and overflow to inf round once, as scalef does. Include only
 * from files built with the AVX2 flags. */
#ifndef VTPU_VMATH_AVX2_H
#define VTPU_VMATH_AVX2_H

#include <immintrin.h>
#include <stdint.h>

/* Lanes [0, left) set (left clamped to 8), for _mm256_mask{load,store}_ps. */
static inline __m256i vt_avx2_tail(int64_t left) {
    int k = left >= 8 ? 8 : (int)left;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
/* Masked-off lanes read as +0 and are never touched, as maskz_loadu. A
 * full mask takes the plain load or store: VMASKMOVPS is microcoded on AMD
 * Zen (a masked store costs about ten plain ones), and the loops call these
 * for every vector, not only the tail. */
static inline int vt_avx2_full(__m256i k) { return _mm256_movemask_ps(_mm256_castsi256_ps(k)) == 0xff; }
static inline __m256 vt_avx2_load(const float *p, __m256i k) {
    return vt_avx2_full(k) ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, k);
}
static inline void vt_avx2_store(float *p, __m256i k, __m256 v) {
    if (vt_avx2_full(k)) _mm256_storeu_ps(p, v);
    else _mm256_maskstore_ps(p, k, v);
}

static inline float vt_avx2_hmax(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}
static inline float vt_avx2_hadd(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}
/* 16 lanes (lo: 0-7, hi: 8-15) folded pairwise: l + l+8, then +4, +2, +1
 * (the portable 16-lane sums' order). */
static inline float vt_avx2_fold16(__m256 lo, __m256 hi) { return vt_avx2_hadd(_mm256_add_ps(lo, hi)); }

/* All-ones in the lanes whose exp is not certainly 0 (x >= -104 or NaN).
 * The exps compute the other lanes as exp(0) and clear them: a product in
 * the subnormal range costs a microcode assist of about a hundred cycles,
 * and a masked score or logit (-inf) would pay it in every lane. */
static inline __m256 vt_avx2_keep(__m256 x) { return _mm256_cmp_ps(x, _mm256_set1_ps(-104.0f), _CMP_NLT_UQ); }

/* y * 2^n for integral n in [-150, 128] (AVX-512's scalef on that range):
 * y * 2^(n/2) is exact for the y the exp polynomial gives, and the second
 * product rounds once. */
static inline __m256 vt_avx2_scalef(__m256 y, __m256 n) {
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    __m256 p1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
    __m256 p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
    return _mm256_mul_ps(_mm256_mul_ps(y, p1), p2);
}

/* Cephes expf on x already clamped to [-104, 89]: the polynomial p with
 * e^x = p * 2^n (n in *n). one_last: add the 1 after the last FMA (the
 * softmax files' order) instead of folding r + 1 into it. */
static inline __m256 vt_avx2_exp_poly(__m256 x, __m256 *n, int one_last) {
    *n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(*n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(*n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    if (one_last) return _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    return _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
}

#endif
