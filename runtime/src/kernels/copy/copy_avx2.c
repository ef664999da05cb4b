/* copy_avx2.c — AVX2 versions of the contiguous bfloat16 <-> float32
 * conversions, picked at run time by vt_convert (copy.c), and of the row
 * accumulations d += alpha * s (vt_accumulate_*). Bit-identical to
 * vt_bf16_to_f32 / vt_f32_to_bf16: round to nearest even, NaN -> 0x7fc0.
 * Tails (under a vector) go element by element. */
#include <immintrin.h>

#include "internal.h"

static inline __m256 bf16x8_to_f32(__m128i h) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* 16 floats to 16 bf16 (two vectors in, one out, in order). */
static inline __m256i f32x16_to_bf16(__m256 f0, __m256 f1) {
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff), qnan = _mm256_set1_epi32(0x7fc0);
    __m256i u0 = _mm256_castps_si256(f0), u1 = _mm256_castps_si256(f1);
    __m256i r0 = _mm256_srli_epi32(_mm256_add_epi32(u0, _mm256_add_epi32(_mm256_and_si256(_mm256_srli_epi32(u0, 16), one), bias)), 16);
    __m256i r1 = _mm256_srli_epi32(_mm256_add_epi32(u1, _mm256_add_epi32(_mm256_and_si256(_mm256_srli_epi32(u1, 16), one), bias)), 16);
    r0 = _mm256_blendv_epi8(r0, qnan, _mm256_castps_si256(_mm256_cmp_ps(f0, f0, _CMP_UNORD_Q)));
    r1 = _mm256_blendv_epi8(r1, qnan, _mm256_castps_si256(_mm256_cmp_ps(f1, f1, _CMP_UNORD_Q)));
    return _mm256_permute4x64_epi64(_mm256_packus_epi32(r0, r1), 0xD8);
}

void vt_cvt_bf16_f32_avx2(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 a = bf16x8_to_f32(_mm_loadu_si128((const __m128i *)(src + i)));
        __m256 b = bf16x8_to_f32(_mm_loadu_si128((const __m128i *)(src + i + 8)));
        _mm256_storeu_ps(dst + i, a);
        _mm256_storeu_ps(dst + i + 8, b);
    }
    for (; i < n; i++) dst[i] = vt_bf16_to_f32(src[i]);
}

void vt_cvt_f32_bf16_avx2(const float *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), f32x16_to_bf16(_mm256_loadu_ps(src + i), _mm256_loadu_ps(src + i + 8)));
    for (; i < n; i++) dst[i] = vt_f32_to_bf16(src[i]);
}

/* A multiply, then an add: never fused, as the scalar loop. */
static inline __m256 axpy(__m256 d, __m256 s, __m256 a) { return _mm256_add_ps(d, _mm256_mul_ps(a, s)); }

void vt_acc_f32_avx2(float *d, const float *s, int64_t n, float alpha) {
    const __m256 a = _mm256_set1_ps(alpha);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, axpy(_mm256_loadu_ps(d + i), _mm256_loadu_ps(s + i), a));
    for (; i < n; i++) d[i] = d[i] + alpha * s[i];
}

void vt_acc_bf16_avx2(uint16_t *d, const uint16_t *s, int64_t n, float alpha) {
    const __m256 a = _mm256_set1_ps(alpha);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 x0 = bf16x8_to_f32(_mm_loadu_si128((const __m128i *)(d + i)));
        __m256 x1 = bf16x8_to_f32(_mm_loadu_si128((const __m128i *)(d + i + 8)));
        __m256 y0 = bf16x8_to_f32(_mm_loadu_si128((const __m128i *)(s + i)));
        __m256 y1 = bf16x8_to_f32(_mm_loadu_si128((const __m128i *)(s + i + 8)));
        _mm256_storeu_si256((__m256i *)(d + i), f32x16_to_bf16(axpy(x0, y0, a), axpy(x1, y1, a)));
    }
    for (; i < n; i++) d[i] = vt_f32_to_bf16(vt_bf16_to_f32(d[i]) + alpha * vt_bf16_to_f32(s[i]));
}
