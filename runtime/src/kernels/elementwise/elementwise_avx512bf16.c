/* elementwise_avx512bf16.c — bf16 activations where the CPU has
 * AVX512-BF16. A bf16 silu / gelu / tanh / sigmoid (and the gradients of
 * silu and gelu) is its f32 kernel's result rounded once: the staged path
 * widens a chunk into a buffer, runs the f32 loop and narrows the result
 * into another. Here each 16 values are widened in registers, run through
 * act_avx512.h's f32 math (the f32 loops' own) and rounded by
 * VCVTNEPS2BF16 (vmath_avx512.h's narrowing: a vector holding a NaN or a
 * denormal takes the integer rounding). The same bits as the staged path,
 * without its buffers. */
#include <immintrin.h>

#include "internal.h"
#include "kernels/elementwise/act_avx512.h"

static inline __m512 ld(const uint16_t *p, __mmask16 m) {
    return vt_avx512_bf16x16_to_f32(_mm256_maskz_loadu_epi16(m, p));
}

/* Whole vectors unmasked (a masked load and store in every step cost 10%),
 * two at a time (their long dependency chains overlap, one NaN/denormal
 * test and one 64-byte store for both), then one masked tail. E(p, m) is
 * the f32 result for the 16 values at p. */
#define BF16_LOOP(n, out, E)                                                                                   \
    do {                                                                                                       \
        int64_t i = 0;                                                                                         \
        for (; i + 32 <= (n); i += 32)                                                                         \
            _mm512_storeu_si512((out) + i, vt_avx512_f32x32_to_bf16_fast(E(i, 0xffff), E(i + 16, 0xffff)));   \
        for (; i + 16 <= (n); i += 16)                                                                         \
            _mm256_storeu_si256((__m256i *)((out) + i), vt_avx512_f32x16_to_bf16_fast(E(i, 0xffff)));          \
        if (i < (n)) {                                                                                         \
            const __mmask16 m = (__mmask16)((1u << ((n) - i)) - 1);                                            \
            _mm256_mask_storeu_epi16((out) + i, m, vt_avx512_f32x16_to_bf16_fast(E(i, m)));                    \
        }                                                                                                      \
    } while (0)

#define BF16_UNARY(NAME, F)                                                                                    \
    static void NAME(int64_t n, uint16_t *out, const uint16_t *x) {                                            \
        BF16_LOOP(n, out, NAME##_E);                                                                           \
    }
#define BF16_BINARY(NAME, F)                                                                                   \
    static void NAME(int64_t n, uint16_t *out, const uint16_t *g, const uint16_t *x) {                         \
        BF16_LOOP(n, out, NAME##_E);                                                                           \
    }
#define silu_bf16_E(i, m) silu512(ld(x + (i), m))
#define gelu_bf16_E(i, m) gelu512(ld(x + (i), m))
#define gelu_tanh_bf16_E(i, m) gelu_tanh512(ld(x + (i), m))
#define tanh_bf16_E(i, m) tanh512(ld(x + (i), m))
#define sigmoid_bf16_E(i, m) sigmoid512(ld(x + (i), m))
#define silu_bw_bf16_E(i, m) silu_bw512(ld(g + (i), m), ld(x + (i), m))
#define gelu_bw_bf16_E(i, m) gelu_bw512(ld(g + (i), m), ld(x + (i), m))
#define gelu_tanh_bw_bf16_E(i, m) gelu_tanh_bw512(ld(g + (i), m), ld(x + (i), m))
BF16_UNARY(silu_bf16, silu512)
BF16_UNARY(gelu_bf16, gelu512)
BF16_UNARY(gelu_tanh_bf16, gelu_tanh512)
BF16_UNARY(tanh_bf16, tanh512)
BF16_UNARY(sigmoid_bf16, sigmoid512)
BF16_BINARY(silu_bw_bf16, silu_bw512)
BF16_BINARY(gelu_bw_bf16, gelu_bw512)
BF16_BINARY(gelu_tanh_bw_bf16, gelu_tanh_bw512)

const vt_bf16_act_table vt_bf16_act_avx512bf16 = {
    .unary = {[VT_SILU] = silu_bf16, [VT_GELU] = gelu_bf16, [VT_GELU_TANH] = gelu_tanh_bf16, [VT_TANH] = tanh_bf16,
              [VT_SIGMOID] = sigmoid_bf16},
    .binary = {[VT_SILU_BACKWARD] = silu_bw_bf16, [VT_GELU_BACKWARD] = gelu_bw_bf16,
               [VT_GELU_TANH_BACKWARD] = gelu_tanh_bw_bf16},
};
