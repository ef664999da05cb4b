/* elementwise_avx2.c — AVX2 versions of the contiguous f32 binary microkernels,
 * picked at run time by elementwise_ops.c. Plain IEEE add/sub/mul/div per
 * lane, so results are bit-identical to the portable loop. */
#include <immintrin.h>

#include "internal.h"

/* Outputs this large will not be reread from cache soon: streaming stores
 * skip the read-for-ownership and cut memory traffic by a quarter. */
#define NT_MIN_ELEMS (1 << 19)

/* Four vectors per iteration keep enough loads in flight to saturate
 * memory bandwidth; the tail (under one vector) goes element by element. */
#define F32_AVX2(NAME, VOP, SOP)                                                                               \
    static void NAME(int64_t n, float *out, const float *a, const float *b) {                                  \
        int64_t i = 0;                                                                                         \
        if (n >= NT_MIN_ELEMS) {                                                                               \
            for (; ((uintptr_t)(out + i) & 63) != 0; i++) out[i] = a[i] SOP b[i];                              \
            for (; i + 8 <= n; i += 8)                                                                         \
                _mm256_stream_ps(out + i, VOP(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));                \
            _mm_sfence(); /* order the streamed lines before the pool's completion flag */                     \
        }                                                                                                      \
        for (; i + 4 * 8 <= n; i += 4 * 8) {                                                                   \
            __m256 a0 = _mm256_loadu_ps(a + i), a1 = _mm256_loadu_ps(a + i + 8);                               \
            __m256 a2 = _mm256_loadu_ps(a + i + 2 * 8), a3 = _mm256_loadu_ps(a + i + 3 * 8);                   \
            __m256 b0 = _mm256_loadu_ps(b + i), b1 = _mm256_loadu_ps(b + i + 8);                               \
            __m256 b2 = _mm256_loadu_ps(b + i + 2 * 8), b3 = _mm256_loadu_ps(b + i + 3 * 8);                   \
            _mm256_storeu_ps(out + i, VOP(a0, b0));                                                            \
            _mm256_storeu_ps(out + i + 8, VOP(a1, b1));                                                        \
            _mm256_storeu_ps(out + i + 2 * 8, VOP(a2, b2));                                                    \
            _mm256_storeu_ps(out + i + 3 * 8, VOP(a3, b3));                                                    \
        }                                                                                                      \
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, VOP(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i))); \
        for (; i < n; i++) out[i] = a[i] SOP b[i];                                                             \
    }

F32_AVX2(add_avx2, _mm256_add_ps, +)
F32_AVX2(sub_avx2, _mm256_sub_ps, -)
F32_AVX2(mul_avx2, _mm256_mul_ps, *)
F32_AVX2(div_avx2, _mm256_div_ps, /)

const vt_f32_binary_table vt_f32_binary_avx2 = {add_avx2, sub_avx2, mul_avx2, div_avx2};
