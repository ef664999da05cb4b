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
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = first(n - i);
        const __m512 x = vt_avx512_bf16x16_to_f32(_mm256_maskz_loadu_epi16(m, d + i)), y = vt_avx512_bf16x16_to_f32(_mm256_maskz_loadu_epi16(m, s + i));
        _mm256_mask_storeu_epi16(d + i, m, vt_avx512_f32x16_to_bf16(axpy(x, y, a)));
    }
}

void vt_transpose16_avx512(const char *src, int64_t ss, char *dst, int64_t ds, size_t es, int nr, int nj) {
    __m512i a[16];
    if (es == 4) {
        const __mmask16 m = first(nr), mj = first(nj);
        for (int j = 0; j < 16; j++)
            a[j] = j < nj ? _mm512_maskz_loadu_epi32(m, (const void *)(src + j * ss)) : _mm512_setzero_si512();
        vt_transpose16x16_epi32(a);
        for (int r = 0; r < nr; r++) _mm512_mask_storeu_epi32((void *)(dst + r * ds), mj, a[r]);
        return;
    }
    const __mmask16 m = first(nr), mj = first(nj);
    for (int j = 0; j < 16; j++)
        a[j] = j < nj ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const void *)(src + j * ss)))
                      : _mm512_setzero_si512();
    vt_transpose16x16_epi32(a);
    for (int r = 0; r < nr; r++) _mm256_mask_storeu_epi16((void *)(dst + r * ds), mj, _mm512_cvtepi32_epi16(a[r]));
}
