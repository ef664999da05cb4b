/* reduce_avx512.c — AVX-512 versions of the two f32 summation loops that
 * bound vt_reduce's bandwidth: 16-lane block sums and lane-wise row adds.
 * Same lanes, same order, same folding as the portable loops in reduce.c,
 * so every ISA gives bit-identical sums. */
#include <immintrin.h>

#include "internal.h"
#include "kernels/vmath_avx512.h"

/* 16 values at element i of x: f32, or bf16 widened to f32 as they load
 * (the exact conversion vt_convert would stage). */
static inline __m512 load16(const void *x, int64_t i, int bf16) {
    if (!bf16) return _mm512_loadu_ps((const float *)x + i);
    const __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)x + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* out[b] = sum of x[b*256 .. b*256+256): lane l adds x[16i + l] in order,
 * then lanes fold pairwise. Four blocks go side by side: each block's adds
 * stay in their order, the four chains overlap. */
static inline void blocks(const void *x, int64_t nblocks, float *out, int bf16) {
    const int64_t B = VT_REDUCE_SUM_BLOCK;
    int64_t b = 0;
    for (; b + 4 <= nblocks; b += 4) {
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t i = b * B; i < b * B + B; i += 16) {
            a0 = _mm512_add_ps(a0, load16(x, i, bf16));
            a1 = _mm512_add_ps(a1, load16(x, i + B, bf16));
            a2 = _mm512_add_ps(a2, load16(x, i + 2 * B, bf16));
            a3 = _mm512_add_ps(a3, load16(x, i + 3 * B, bf16));
        }
        out[b] = vt_avx512_fold16(a0), out[b + 1] = vt_avx512_fold16(a1);
        out[b + 2] = vt_avx512_fold16(a2), out[b + 3] = vt_avx512_fold16(a3);
    }
    for (; b < nblocks; b++) {
        __m512 acc = _mm512_setzero_ps();
        for (int64_t i = b * B; i < b * B + B; i += 16) acc = _mm512_add_ps(acc, load16(x, i, bf16));
        out[b] = vt_avx512_fold16(acc);
    }
}

void vt_reduce_blocks_f32_avx512(const float *x, int64_t nblocks, float *out) { blocks(x, nblocks, out, 0); }

/* The same over bf16 values: the same bits as converting the block first
 * and calling vt_reduce_blocks_f32_avx512. */
void vt_reduce_blocks_bf16_avx512(const uint16_t *x, int64_t nblocks, float *out) { blocks(x, nblocks, out, 1); }

/* The same sum of one block's first m values (0 < m <= 256): the lanes of
 * the last, partial group add only its m % 16 values (a masked add leaves
 * the others exactly as they were). */
float vt_reduce_part_f32_avx512(const float *x, int64_t m) {
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= m; i += 16) acc = _mm512_add_ps(acc, _mm512_loadu_ps(x + i));
    if (i < m) {
        __mmask16 k = (__mmask16)((1u << (m - i)) - 1);
        acc = _mm512_mask_add_ps(acc, k, acc, _mm512_maskz_loadu_ps(k, x + i));
    }
    return vt_avx512_fold16(acc);
}

/* acc[l] += x[l] for ng groups of 16 lanes. */
void vt_reduce_lanes_add_f32_avx512(float *acc, const float *x, int64_t ng) {
    for (int64_t g = 0; g < ng; g++)
        _mm512_storeu_ps(acc + g * 16, _mm512_add_ps(_mm512_loadu_ps(acc + g * 16), _mm512_loadu_ps(x + g * 16)));
}
