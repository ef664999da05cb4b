/* copy_avx512bf16.c — f32 -> bf16 where the CPU has AVX512-BF16:
 * VCVTNEPS2BF16 rounds a normal float to nearest even exactly as
 * vt_f32_to_bf16 does, in one instruction. It reads a denormal as zero and
 * keeps a NaN's payload, where vt_f32_to_bf16 rounds the denormal and
 * gives every NaN 0x7fc0: a vector holding either (one VFPCLASSPS tells)
 * takes copy_avx512.c's conversion. */
#include <immintrin.h>

#include "internal.h"

static inline __mmask16 first(int64_t left) { return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1); }

void vt_cvt_f32_bf16_avx512bf16(const float *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i < n; i += 16) {
        const __mmask16 m = first(n - i);
        const __m512 v = _mm512_maskz_loadu_ps(m, src + i);
        /* quiet NaN 0x01, denormal 0x20, signalling NaN 0x80 */
        if (__builtin_expect(_mm512_fpclass_ps_mask(v, 0xa1) != 0, 0)) {
            vt_cvt_f32_bf16_avx512(src + i, dst + i, n - i < 16 ? n - i : 16);
            continue;
        }
        _mm256_mask_storeu_epi16(dst + i, m, (__m256i)_mm512_cvtneps_pbh(v));
    }
}
