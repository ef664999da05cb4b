/* conv_igemm_avx512bf16.c — the implicit GEMM's blocks on the AVX512-BF16
 * engine (VDPBF16PS), over the same buffers the AMX tiles read (conv_amx.h):
 * the padded input with channels innermost, the weight's VNNI tiles, gy^T's
 * tiles and the paired input of the weight gradient. Each VDPBF16PS adds one
 * A pair (broadcast) times 16 columns' pairs to 16 f32 sums, flushing
 * denormal inputs and rounding each step as the engine's matmul does. */
#include <immintrin.h>

#include "kernels/conv/conv.h"

/* 8 rows x 32 columns of f32 sums, named (GCC keeps an array of them on
 * the stack: see mxu_avx512bf16.c). */
#define DECL(r) __m512 c##r##0 = _mm512_setzero_ps(), c##r##1 = _mm512_setzero_ps();
#define LOAD(r) c##r##0 = _mm512_loadu_ps(c + (r) * ldc), c##r##1 = _mm512_loadu_ps(c + (r) * ldc + 16);
#define STORE(r) _mm512_storeu_ps(c + (r) * ldc, c##r##0), _mm512_storeu_ps(c + (r) * ldc + 16, c##r##1);
#define STEP(r, ap)                                                                                               \
    do {                                                                                                          \
        uint32_t w;                                                                                               \
        memcpy(&w, (ap), 4);                                                                                      \
        __m512bh av = (__m512bh)_mm512_set1_epi32((int)w);                                                        \
        c##r##0 = _mm512_dpbf16_ps(c##r##0, av, b0);                                                              \
        c##r##1 = _mm512_dpbf16_ps(c##r##1, av, b1);                                                              \
    } while (0)
#define ALL(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)

/* Rows 0 .. 7 of rp (each row's first tap) of a forward tile. */
static inline void fwd_rows8(const uint16_t *const *rp, const int64_t *toff, int64_t Cp, int64_t taps, int64_t ncc,
                             int pairs, const uint16_t *w0, const uint16_t *w1, float *c, int64_t ldc) {
    ALL(DECL)
    for (int64_t t = 0; t < taps; t++) {
        const int64_t xo = toff[t] * Cp;
        const uint16_t *x0 = rp[0] + xo, *x1 = rp[1] + xo, *x2 = rp[2] + xo, *x3 = rp[3] + xo, *x4 = rp[4] + xo,
                       *x5 = rp[5] + xo, *x6 = rp[6] + xo, *x7 = rp[7] + xo;
        const uint16_t *u0 = w0 + t * ncc * 512, *u1 = w1 + t * ncc * 512;
        for (int64_t cc = 0; cc < ncc; cc++) {
            const uint16_t *v0 = u0 + cc * 512, *v1 = u1 + cc * 512;
            for (int j = 0; j < pairs; j++) {
                __m512bh b0 = (__m512bh)_mm512_loadu_si512(v0 + j * 32), b1 = (__m512bh)_mm512_loadu_si512(v1 + j * 32);
                const int64_t k = cc * 32 + 2 * j;
                STEP(0, x0 + k); STEP(1, x1 + k); STEP(2, x2 + k); STEP(3, x3 + k);
                STEP(4, x4 + k); STEP(5, x5 + k); STEP(6, x6 + k); STEP(7, x7 + k);
            }
        }
    }
    ALL(STORE)
}

void vt_conv_dp_forward_tile(const uint16_t *const rows[16], const int64_t *toff, int64_t Cp, int64_t taps,
                             int64_t ncc, int pairs, const uint16_t *w0, const uint16_t *w1, float *c) {
    fwd_rows8(rows, toff, Cp, taps, ncc, pairs, w0, w1, c, 32);
    fwd_rows8(rows + 8, toff, Cp, taps, ncc, pairs, w0, w1, c + 8 * 32, 32);
}

/* Rows (outputs) r .. r + 7 of a weight-gradient unit: A row q at a + q * 32
 * of each chunk's tile (chunk k at a + k * 512), B pair j of chunk k at
 * x[k] + j * 32 words (channels 0-15, then 16-31). */
static inline void wg_rows8(const uint16_t *a, const uint32_t *const *x, int64_t nk, float *c, int64_t ldc, int acc) {
    ALL(DECL)
    if (acc) { ALL(LOAD) }
    for (int64_t k = 0; k < nk; k++) {
        const uint16_t *ak = a + k * 512;
        const uint32_t *xk = x[k];
        for (int j = 0; j < 16; j++) {
            __m512bh b0 = (__m512bh)_mm512_loadu_si512(xk + j * 32), b1 = (__m512bh)_mm512_loadu_si512(xk + j * 32 + 16);
            const uint16_t *ap = ak + 2 * j;
            STEP(0, ap); STEP(1, ap + 32); STEP(2, ap + 64); STEP(3, ap + 96);
            STEP(4, ap + 128); STEP(5, ap + 160); STEP(6, ap + 192); STEP(7, ap + 224);
        }
    }
    ALL(STORE)
}

void vt_conv_dp_wgrad_unit(const uint16_t *a0, const uint16_t *a1, const uint32_t *const *x, int64_t nk, float *c0,
                           float *c1, int64_t ldc, int acc) {
    wg_rows8(a0, x, nk, c0, ldc, acc);
    wg_rows8(a0 + 8 * 32, x, nk, c0 + 8 * ldc, ldc, acc);
    wg_rows8(a1, x, nk, c1, ldc, acc);
    wg_rows8(a1 + 8 * 32, x, nk, c1 + 8 * ldc, ldc, acc);
}
