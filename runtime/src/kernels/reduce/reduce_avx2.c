/* reduce_avx2.c — AVX2 versions of the two f32 summation loops that bound
 * vt_reduce's bandwidth. The 16 lanes of the portable loops are two
 * vectors here: same lanes, same order, same folding, so every ISA gives
 * bit-identical sums. */
#include <immintrin.h>

#include "internal.h"
#include "kernels/vmath_avx2.h"

/* out[b] = sum of x[b*256 .. b*256+256): lane l adds x[16i + l] in order,
 * then lanes fold pairwise. */
void vt_reduce_blocks_f32_avx2(const float *x, int64_t nblocks, float *out) {
    for (int64_t b = 0; b < nblocks; b++) {
        const float *p = x + b * VT_REDUCE_SUM_BLOCK;
        __m256 lo = _mm256_setzero_ps(), hi = lo;
        for (int i = 0; i < VT_REDUCE_SUM_BLOCK; i += 16) {
            lo = _mm256_add_ps(lo, _mm256_loadu_ps(p + i));
            hi = _mm256_add_ps(hi, _mm256_loadu_ps(p + i + 8));
        }
        out[b] = vt_avx2_fold16(lo, hi);
    }
}

static inline __m256 widen8(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

/* The same over bf16 values, each widened to f32 as it is loaded (the
 * exact conversion vt_convert would stage): the same bits as converting
 * the block first and calling vt_reduce_blocks_f32_avx2. */
void vt_reduce_blocks_bf16_avx2(const uint16_t *x, int64_t nblocks, float *out) {
    for (int64_t b = 0; b < nblocks; b++) {
        const uint16_t *p = x + b * VT_REDUCE_SUM_BLOCK;
        __m256 lo = _mm256_setzero_ps(), hi = lo;
        for (int i = 0; i < VT_REDUCE_SUM_BLOCK; i += 16) {
            lo = _mm256_add_ps(lo, widen8(p + i));
            hi = _mm256_add_ps(hi, widen8(p + i + 8));
        }
        out[b] = vt_avx2_fold16(lo, hi);
    }
}

/* Adds the first r (0 <= r <= 8) values at x to the first r lanes of v;
 * the other lanes stay exactly as they were. */
static inline __m256 add_first(__m256 v, const float *x, int64_t r) {
    if (r <= 0) return v;
    __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)r), idx);
    __m256 add = _mm256_add_ps(v, _mm256_maskload_ps(x, mask));
    return _mm256_blendv_ps(v, add, _mm256_castsi256_ps(mask));
}

/* The same sum of one block's first m values (0 < m <= 256): the lanes of
 * the last, partial group add only its m % 16 values. */
float vt_reduce_part_f32_avx2(const float *x, int64_t m) {
    __m256 lo = _mm256_setzero_ps(), hi = lo;
    int64_t i = 0;
    for (; i + 16 <= m; i += 16) {
        lo = _mm256_add_ps(lo, _mm256_loadu_ps(x + i));
        hi = _mm256_add_ps(hi, _mm256_loadu_ps(x + i + 8));
    }
    int64_t r = m - i;
    lo = add_first(lo, x + i, r < 8 ? r : 8);
    hi = add_first(hi, x + i + 8, r - 8);
    return vt_avx2_fold16(lo, hi);
}

/* acc[l] += x[l] for ng groups of 16 lanes. */
void vt_reduce_lanes_add_f32_avx2(float *acc, const float *x, int64_t ng) {
    for (int64_t g = 0; g < ng * 16; g += 8)
        _mm256_storeu_ps(acc + g, _mm256_add_ps(_mm256_loadu_ps(acc + g), _mm256_loadu_ps(x + g)));
}
