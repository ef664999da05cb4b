/* copy_avx512.c — AVX512 versions of the contiguous bfloat16 <-> float32
 * conversions, picked at run time by vt_convert (copy.c), of the row
 * accumulations d += alpha * s (vt_accumulate_*) and of copy.c's 16 x 16
 * transpose tiles. Bit-identical to
 * vt_bf16_to_f32 / vt_f32_to_bf16: round to nearest even, NaN -> 0x7fc0.
 * Tails run through masked loads and stores. */
#include <immintrin.h>

#include "internal.h"
#include "kernels/transpose_avx512.h"
#include "kernels/vmath_avx512.h"

void vt_cvt_bf16_f32_avx512(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 a = vt_avx512_bf16x16_to_f32(_mm256_loadu_si256((const __m256i *)(src + i)));
        __m512 b = vt_avx512_bf16x16_to_f32(_mm256_loadu_si256((const __m256i *)(src + i + 16)));
        _mm512_storeu_ps(dst + i, a);
        _mm512_storeu_ps(dst + i + 16, b);
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(dst + i, m, vt_avx512_bf16x16_to_f32(_mm256_maskz_loadu_epi16(m, src + i)));
    }
}

void vt_cvt_f32_bf16_avx512(const float *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i a = vt_avx512_f32x16_to_bf16(_mm512_loadu_ps(src + i));
        __m256i b = vt_avx512_f32x16_to_bf16(_mm512_loadu_ps(src + i + 16));
        _mm256_storeu_si256((__m256i *)(dst + i), a);
        _mm256_storeu_si256((__m256i *)(dst + i + 16), b);
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        _mm256_mask_storeu_epi16(dst + i, m, vt_avx512_f32x16_to_bf16(_mm512_maskz_loadu_ps(m, src + i)));
    }
}

static inline __mmask16 first(int64_t left) { return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1); }

/* A multiply, then an add: never fused, as the scalar loop. */
static inline __m512 axpy(__m512 d, __m512 s, __m512 a) { return _mm512_add_ps(d, _mm512_mul_ps(a, s)); }

void vt_acc_f32_avx512(float *d, const float *s, int64_t n, float alpha) {
    const __m512 a = _mm512_set1_ps(alpha);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(d + i, axpy(_mm512_loadu_ps(d + i), _mm512_loadu_ps(s + i), a));
    if (i < n) {
        const __mmask16 m = first(n - i);
        _mm512_mask_storeu_ps(d + i, m, axpy(_mm512_maskz_loadu_ps(m, d + i), _mm512_maskz_loadu_ps(m, s + i), a));
    }
}

void vt_acc_bf16_avx512(uint16_t *d, const uint16_t *s, int64_t n, float alpha) {
    const __m512 a = _mm512_set1_ps(alpha);
    VT_AVX512_FOR16(i, n, m, {
        const __m512 x = vt_avx512_bf16x16_to_f32(_mm256_maskz_loadu_epi16(m, d + i)), y = vt_avx512_bf16x16_to_f32(_mm256_maskz_loadu_epi16(m, s + i));
        _mm256_mask_storeu_epi16(d + i, m, vt_avx512_f32x16_to_bf16(axpy(x, y, a)));
    });
}

/* 16 x 16 of 16-bit values in 16 ymm rows, transposed in place: pairs,
 * quads and octets of rows interleaved within 128-bit lanes, then the
 * lanes of rows 0-7 and 8-15 put together (64 shuffles, no widening). */
static inline void transpose16x16_epi16(__m256i r[16]) {
    __m256i t[16], u[16], v[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm256_unpacklo_epi16(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_epi16(r[i], r[i + 1]);
    }
    /* u[4g + e]: rows 4g .. 4g+3, elements 2e, 2e+1 (and + 8 in the high lane) */
    for (int i = 0; i < 16; i += 4) {
        u[i] = _mm256_unpacklo_epi32(t[i], t[i + 2]);
        u[i + 1] = _mm256_unpackhi_epi32(t[i], t[i + 2]);
        u[i + 2] = _mm256_unpacklo_epi32(t[i + 1], t[i + 3]);
        u[i + 3] = _mm256_unpackhi_epi32(t[i + 1], t[i + 3]);
    }
    /* v[2e + h] (v[8 + 2e + h]): rows 0-7 (8-15), element 2e + h (+ 8 high) */
    for (int half = 0; half < 2; half++)
        for (int e = 0; e < 4; e++) {
            v[half * 8 + 2 * e] = _mm256_unpacklo_epi64(u[half * 8 + e], u[half * 8 + 4 + e]);
            v[half * 8 + 2 * e + 1] = _mm256_unpackhi_epi64(u[half * 8 + e], u[half * 8 + 4 + e]);
        }
    for (int c = 0; c < 8; c++) {
        r[c] = _mm256_permute2x128_si256(v[c], v[8 + c], 0x20);
        r[c + 8] = _mm256_permute2x128_si256(v[c], v[8 + c], 0x31);
    }
}

void vt_transpose16_avx512(const char *src, int64_t ss, char *dst, int64_t ds, size_t es, int nr, int nj) {
    const __mmask16 m = first(nr), mj = first(nj);
    if (es == 4) {
        __m512i a[16];
        for (int j = 0; j < 16; j++)
            a[j] = j < nj ? _mm512_maskz_loadu_epi32(m, (const void *)(src + j * ss)) : _mm512_setzero_si512();
        vt_transpose16x16_epi32(a);
        for (int r = 0; r < nr; r++) _mm512_mask_storeu_epi32((void *)(dst + r * ds), mj, a[r]);
        return;
    }
    __m256i a[16];
    for (int j = 0; j < 16; j++)
        a[j] = j < nj ? _mm256_maskz_loadu_epi16(m, (const void *)(src + j * ss)) : _mm256_setzero_si256();
    transpose16x16_epi16(a);
    for (int r = 0; r < nr; r++) _mm256_mask_storeu_epi16((void *)(dst + r * ds), mj, a[r]);
}
