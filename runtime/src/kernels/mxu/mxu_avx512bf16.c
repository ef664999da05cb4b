/* mxu_avx512bf16.c — AVX512-BF16 MXU engine: an 8x32 block kernel on
 * VDPBF16PS, which reads the same VNNI-packed B as AMX and broadcasts one
 * A pair per row. VDPBF16PS flushes denormals and rounds each step (RNE). */
#include <immintrin.h>

#include "mxu_local.h"

/* C[8 x 32] (wide: two B panels) or C[8 x 16] (one: a last 16 columns,
 * an N of 16 modulo 32) (+)= over kc chunks; a: first of the 8 rows, b:
 * first panel; acc == 0 starts every sum at +0 in the registers (C is not
 * read: zeroing the tile in memory first cost about 4% of a training
 * step). Each element is the same sequence of steps at either width. wide
 * is a constant at every call (always inlined), so each width compiles to
 * its own loop. The accumulators are named variables, not an array
 * indexed in a loop: GCC kept such an array on the stack and every
 * VDPBF16PS loaded and stored its accumulator, which held the engine to
 * about a fifth of its peak. sk: the finished sums go to this sink at (sm,
 * sn) from the registers, not to c (which is only read, when acc); NULL
 * at the block kernels' calls. */
#define VT_ACC_DECL(r)                                                                  \
    __m512 c##r##0 = acc ? _mm512_loadu_ps(c + r * ldc) : _mm512_setzero_ps(),           \
           c##r##1 = wide && acc ? _mm512_loadu_ps(c + r * ldc + 16) : _mm512_setzero_ps();
#define VT_ACC_STEP(r)                                                                  \
    do {                                                                                \
        uint32_t w;                                                                     \
        memcpy(&w, ac + r * ars + 2 * j, 4);                                             \
        __m512bh av = (__m512bh)_mm512_set1_epi32((int)w);                              \
        c##r##0 = _mm512_dpbf16_ps(c##r##0, av, b0);                                    \
        if (wide) c##r##1 = _mm512_dpbf16_ps(c##r##1, av, b1);                          \
    } while (0)
#define VT_ACC_STORE(r)                                                                 \
    if (sk && wide)                                                                     \
        vt_mxu_sink_row(sk, sm + r, sn, c##r##0, c##r##1);                              \
    else if (sk)                                                                        \
        vt_mxu_sink_row16(sk, sm + r, sn, c##r##0);                                     \
    else if (wide)                                                                      \
        _mm512_storeu_ps(c + r * ldc, c##r##0), _mm512_storeu_ps(c + r * ldc + 16, c##r##1); \
    else                                                                                \
        _mm512_storeu_ps(c + r * ldc, c##r##0);

static inline __attribute__((always_inline)) void micro_8(int wide, int64_t kc, int pairs, const uint16_t *restrict a,
                                                          int64_t ars, int64_t acs, const uint16_t *restrict b,
                                                          int64_t bs, float *restrict c, int64_t ldc, int acc,
                                                          const vt_mxu_sink *sk, int64_t sm, int64_t sn) {
    VT_ACC_DECL(0) VT_ACC_DECL(1) VT_ACC_DECL(2) VT_ACC_DECL(3)
    VT_ACC_DECL(4) VT_ACC_DECL(5) VT_ACC_DECL(6) VT_ACC_DECL(7)
    for (int64_t ch = 0; ch < kc; ch++) {
        const uint16_t *ac = a + ch * acs, *b0c = b + ch * VT_MXU_CHUNK, *b1c = b0c + bs;
        for (int j = 0; j < pairs; j++) {
            __m512bh b0 = (__m512bh)_mm512_loadu_si512(b0c + j * 32);
            __m512bh b1 = wide ? (__m512bh)_mm512_loadu_si512(b1c + j * 32) : b0;
            VT_ACC_STEP(0); VT_ACC_STEP(1); VT_ACC_STEP(2); VT_ACC_STEP(3);
            VT_ACC_STEP(4); VT_ACC_STEP(5); VT_ACC_STEP(6); VT_ACC_STEP(7);
        }
    }
    VT_ACC_STORE(0) VT_ACC_STORE(1) VT_ACC_STORE(2) VT_ACC_STORE(3)
    VT_ACC_STORE(4) VT_ACC_STORE(5) VT_ACC_STORE(6) VT_ACC_STORE(7)
}
#undef VT_ACC_DECL
#undef VT_ACC_STEP
#undef VT_ACC_STORE

/* One row of C[1 x 32] or C[1 x 16]: the rows past the last whole 8 (a
 * short M, a matrix-vector product), with the same per-element sequence
 * of steps. */
static inline __attribute__((always_inline)) void micro_1(int wide, int64_t kc, int pairs, const uint16_t *restrict a,
                                                          int64_t acs, const uint16_t *restrict b, int64_t bs,
                                                          float *restrict c, int acc) {
    __m512 c0 = acc ? _mm512_loadu_ps(c) : _mm512_setzero_ps();
    __m512 c1 = wide && acc ? _mm512_loadu_ps(c + 16) : _mm512_setzero_ps();
    for (int64_t ch = 0; ch < kc; ch++) {
        const uint16_t *ac = a + ch * acs, *b0c = b + ch * VT_MXU_CHUNK, *b1c = b0c + bs;
        for (int j = 0; j < pairs; j++) {
            uint32_t w;
            memcpy(&w, ac + 2 * j, 4);
            __m512bh av = (__m512bh)_mm512_set1_epi32((int)w);
            c0 = _mm512_dpbf16_ps(c0, av, (__m512bh)_mm512_loadu_si512(b0c + j * 32));
            if (wide) c1 = _mm512_dpbf16_ps(c1, av, (__m512bh)_mm512_loadu_si512(b1c + j * 32));
        }
    }
    _mm512_storeu_ps(c, c0);
    if (wide) _mm512_storeu_ps(c + 16, c1);
}

/* The mb rows of one column block: 8 at a time, then one by one. */
static inline __attribute__((always_inline)) void strip(int wide, int64_t kc, int pairs, int64_t mb,
                                                        const uint16_t *restrict a, int64_t as, int64_t ars,
                                                        int64_t acs, const uint16_t *restrict b, int64_t bs,
                                                        float *restrict c, int64_t ldc, int acc) {
    const int64_t m8 = mb & ~(int64_t)7;
    for (int64_t m = 0; m < m8; m += 8)
        micro_8(wide, kc, pairs, a + (m / 16) * as + (m % 16) * ars, ars, acs, b, bs, c + m * ldc, ldc, acc, NULL, 0,
                0);
    for (int64_t m = m8; m < mb; m++)
        micro_1(wide, kc, pairs, a + (m / 16) * as + (m % 16) * ars, acs, b, bs, c + m * ldc, acc);
}

/* A's row m at a + (m / 16) * as + (m % 16) * ars, chunk c of it + c * acs,
 * `pairs` k-pairs of each chunk: the packed panels, or a bf16 matrix read
 * where it lies. */
static inline void blocks(int64_t kc, int pairs, int64_t mb, int64_t nb, const uint16_t *restrict a, int64_t as,
                          int64_t ars, int64_t acs, const uint16_t *restrict b, int64_t bs, float *restrict c,
                          int64_t ldc, int acc) {
    for (int64_t n = 0; n < nb; n += 32) {
        if (nb - n >= 32)
            strip(1, kc, pairs, mb, a, as, ars, acs, b + (n / 16) * bs, bs, c + n, ldc, acc);
        else /* the engine's cols16: a last 16 columns */
            strip(0, kc, pairs, mb, a, as, ars, acs, b + (n / 16) * bs, bs, c + n, ldc, acc);
    }
}

static void block_avx512bf16(int64_t kc, int64_t mb, int64_t nb, const uint16_t *restrict a, int64_t as,
                             const uint16_t *restrict b, int64_t bs, float *restrict c, int64_t ldc, int acc) {
    blocks(kc, 16, mb, nb, a, as, 32, VT_MXU_CHUNK, b, bs, c, ldc, acc);
}

static void direct_avx512bf16(int64_t kc, int pairs, int64_t mb, int64_t nb, const uint16_t *restrict a,
                              int64_t lda, const uint16_t *restrict b, int64_t bs, float *restrict c, int64_t ldc,
                              int acc, const vt_mxu_sink *sink) {
    if (!sink) {
        blocks(kc, pairs, mb, nb, a, 16 * lda, lda, 32, b, bs, c, ldc, acc);
        return;
    }
    /* 8-row blocks round their sums into the sink from the registers;
     * shorter ones go through a small block in L1 */
    _Alignas(64) float done[8 * 32];
    for (int64_t n = 0; n < nb; n += 32)
        for (int64_t m = 0; m < mb; m += 8) {
            int64_t rows = mb - m < 8 ? mb - m : 8, w = nb - n < 32 ? nb - n : 32;
            if (rows == 8) {
                if (w == 32)
                    micro_8(1, kc, pairs, a + m * lda, lda, 32, b + (n / 16) * bs, bs, c + m * ldc + n, ldc, acc, sink,
                            m, n);
                else
                    micro_8(0, kc, pairs, a + m * lda, lda, 32, b + (n / 16) * bs, bs, c + m * ldc + n, ldc, acc, sink,
                            m, n);
                continue;
            }
            if (acc)
                for (int64_t r = 0; r < rows; r++) memcpy(done + r * 32, c + (m + r) * ldc + n, (size_t)w * sizeof(float));
            /* a constant width each: blocks() inlined for one 32-wide or one 16-wide step */
            if (w == 32)
                blocks(kc, pairs, rows, 32, a + m * lda, 16 * lda, lda, 32, b + (n / 16) * bs, bs, done, 32, acc);
            else
                blocks(kc, pairs, rows, 16, a + m * lda, 16 * lda, lda, 32, b + (n / 16) * bs, bs, done, 32, acc);
            vt_mxu_sink_rows(sink, m, n, done, 32, rows);
        }
}

const vt_mxu_engine vt_mxu_engine_avx512bf16 = {"avx512bf16", VT_ISA_AVX2 | VT_ISA_AVX512 | VT_ISA_AVX512BF16,
                                                block_avx512bf16, direct_avx512bf16, vt_mxu_split_avx512,
                                                vt_mxu_zip_avx512, 1, 1, &vt_mxu_packers_avx512bf16};
