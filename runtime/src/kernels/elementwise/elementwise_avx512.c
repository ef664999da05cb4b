/* elementwise_avx512.c — AVX512 versions of the contiguous f32 binary microkernels,
 * picked at run time by elementwise_ops.c. Plain IEEE add/sub/mul/div per
 * lane, so results are bit-identical to the portable loop. */
#include <immintrin.h>

#include "internal.h"

/* f32 outputs of a call this large stream past the cache (vt_stream_store_bytes). */
#define NT_MIN_ELEMS (vt_stream_store_bytes() / 4)

/* add/sub/mul/div: kernels/elementwise/elementwise_f32_binary.h on 16 lanes */
#define VEC __m512
#define W 16
#define VI(name) _mm512_##name
#define SFX avx512
#include "kernels/elementwise/elementwise_f32_binary.h"
#undef VEC
#undef W
#undef VI
#undef SFX

/* silu, gelu, tanh, sigmoid, their gradients and addcmul: act_avx512.h's
 * vector math over contiguous f32 rows. */
#include "kernels/elementwise/act_avx512.h"

/* Streaming stores once the output is 64-byte aligned and large. */
#define ACT_LOOP(n, out, EXPR_OF_I)                                                                            \
    do {                                                                                                       \
        int64_t i = 0;                                                                                         \
        if ((n) >= NT_MIN_ELEMS) {                                                                             \
            int64_t head = (int64_t)((64 - ((uintptr_t)(out) & 63)) & 63) / 4;                                 \
            if (((uintptr_t)(out) & 3) == 0 && head > 0) {                                                     \
                __mmask16 m = (__mmask16)((1u << head) - 1);                                                   \
                _mm512_mask_storeu_ps((out), m, EXPR_OF_I(m));                                                 \
                i = head;                                                                                      \
            }                                                                                                  \
            if (((uintptr_t)((out) + i) & 63) == 0) {                                                          \
                for (; i + 16 <= (n); i += 16) _mm512_stream_ps((out) + i, EXPR_OF_I((__mmask16)0xffff));      \
                _mm_sfence();                                                                                  \
            }                                                                                                  \
        }                                                                                                      \
        for (; i + 16 <= (n); i += 16) _mm512_storeu_ps((out) + i, EXPR_OF_I((__mmask16)0xffff));              \
        if (i < (n)) {                                                                                         \
            __mmask16 m = (__mmask16)((1u << ((n) - i)) - 1);                                                  \
            _mm512_mask_storeu_ps((out) + i, m, EXPR_OF_I(m));                                                 \
        }                                                                                                      \
    } while (0)

#define LD(p, m) _mm512_maskz_loadu_ps((m), (p) + i)

/* One loop per activation: E(m) is the vector expression for mask m. */
#define ACT_UNARY(NAME, F)                                                                                     \
    static void NAME(int64_t n, float *out, const float *x) {                                                  \
        ACT_LOOP(n, out, F##_E1);                                                                              \
    }
#define ACT_BINARY(NAME, F)                                                                                    \
    static void NAME(int64_t n, float *out, const float *g, const float *x) {                                  \
        ACT_LOOP(n, out, F##_E2);                                                                              \
    }
#define silu512_E1(m) silu512(LD(x, m))
#define gelu512_E1(m) gelu512(LD(x, m))
#define gelu_tanh512_E1(m) gelu_tanh512(LD(x, m))
#define tanh512_E1(m) tanh512(LD(x, m))
#define sigmoid512_E1(m) sigmoid512(LD(x, m))
#define silu_bw512_E2(m) silu_bw512(LD(g, m), LD(x, m))
#define gelu_bw512_E2(m) gelu_bw512(LD(g, m), LD(x, m))
#define gelu_tanh_bw512_E2(m) gelu_tanh_bw512(LD(g, m), LD(x, m))
ACT_UNARY(silu_avx512, silu512)
ACT_UNARY(gelu_avx512, gelu512)
ACT_UNARY(gelu_tanh_avx512, gelu_tanh512)
ACT_UNARY(tanh_avx512, tanh512)
ACT_UNARY(sigmoid_avx512, sigmoid512)
ACT_BINARY(silu_bw_avx512, silu_bw512)
ACT_BINARY(gelu_bw_avx512, gelu_bw512)
ACT_BINARY(gelu_tanh_bw_avx512, gelu_tanh_bw512)
static void addcmul_avx512(int64_t n, float *out, const float *a, const float *b, const float *c, float v) {
    const __m512 vv = _mm512_set1_ps(v);
#define E(m) _mm512_add_ps(LD(a, m), _mm512_mul_ps(_mm512_mul_ps(vv, LD(b, m)), LD(c, m)))
    ACT_LOOP(n, out, E);
#undef E
}

const vt_f32_act_table vt_f32_act_avx512 = {silu_avx512,    gelu_avx512,         gelu_tanh_avx512, silu_bw_avx512,
                                            gelu_bw_avx512, gelu_tanh_bw_avx512, addcmul_avx512,   tanh_avx512,
                                            sigmoid_avx512};
