/* copy_avx512bf16.c — f32 -> bf16 where the CPU has AVX512-BF16:
 * VCVTNEPS2BF16 rounds a normal float to nearest even exactly as
 * vt_f32_to_bf16 does, in one instruction. It reads a denormal as zero and
 * keeps a NaN's payload, where vt_f32_to_bf16 rounds the denormal and
 * gives every NaN 0x7fc0: a vector holding either (one VFPCLASSPS tells)
 * takes the integer rounding (vmath_avx512.h's narrowing). */
#include <immintrin.h>

#include "internal.h"
#include "kernels/vmath_avx512.h"

void vt_cvt_f32_bf16_avx512bf16(const float *src, uint16_t *dst, int64_t n) {
    VT_AVX512_FOR16(i, n, m, {
        _mm256_mask_storeu_epi16(dst + i, m, vt_avx512_f32x16_to_bf16_fast(_mm512_maskz_loadu_ps(m, src + i)));
    });
}
