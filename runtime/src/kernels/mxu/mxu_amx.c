/* mxu_amx.c — AMX-BF16 MXU engine: 2x2 tile blocking (C in tmm0-3 for the
 * whole K block, A in tmm4-5, B in tmm6-7) over the packed layout, where
 * every 32-K chunk of a 16-wide panel is one 1 KiB tile with 64-byte rows,
 * and a bf16 A read where it lies (direct_amx). */
#include <immintrin.h>

#include "mxu_local.h"

static void block_amx(int64_t kc, int64_t mb, int64_t nb, const uint16_t *restrict a, int64_t as,
                      const uint16_t *restrict b, int64_t bs, float *restrict c, int64_t ldc, int acc) {
    vt_amx_load_config(&vt_amx_tiles16);
    const size_t ldcb = (size_t)ldc * sizeof(float);
    /* Rows outer: the two A strips are reused from L2 across all of nb
     * while B strips stream past them (measured faster than columns outer
     * with the driver's wide NC). */
    for (int64_t m = 0; m < mb; m += 32) {
        const uint16_t *a0 = a + (m / 16) * as, *a1 = a0 + as;
        for (int64_t n = 0; n < nb; n += 32) {
            const uint16_t *b0 = b + (n / 16) * bs, *b1 = b0 + bs;
            float *c0 = c + m * ldc + n, *c1 = c0 + 16 * ldc;
            vt_amx_c_start(c0, c1, ldcb, acc);
            for (int64_t ch = 0; ch < kc; ch++) {
                int64_t o = ch * VT_MXU_CHUNK;
                vt_amx_step(a0 + o, 64, a1 + o, 64, b0 + o, b1 + o, 64);
            }
            vt_amx_c_store(c0, c1, ldcb);
        }
    }
    _tile_release();
}

/* The tile configuration of a strip of r <= 32 rows whose chunks hold
 * `pairs` k-pairs: C tiles 0-1 and A tile 4 hold its first min(r, 16)
 * rows, C tiles 2-3 and A tile 5 the rest (unused when r <= 16); the A
 * tiles are pairs * 4 bytes wide and the B tiles 6-7 that many rows. */
static vt_amx_tile_config strip_tiles(int64_t r, int pairs) {
    vt_amx_tile_config t = vt_amx_tiles16;
    uint8_t r0 = (uint8_t)(r < 16 ? r : 16), r1 = (uint8_t)(r > 16 ? r - 16 : 0);
    t.rows[0] = t.rows[1] = t.rows[4] = r0;
    t.rows[2] = t.rows[3] = t.rows[5] = r1;
    t.colsb[4] = t.colsb[5] = (uint16_t)(pairs * 4);
    t.rows[6] = t.rows[7] = (uint8_t)pairs;
    if (!r1) t.colsb[2] = t.colsb[3] = t.colsb[5] = 0;
    return t;
}

/* Finished blocks on their way to the sink, two deep: a block's tiles are
 * stored to one buffer while the block before is read from the other, so
 * the vector loads never wait on the tile stores just issued (with K = 16
 * that wait was most of the kernel). */
typedef struct sink_queue {
    _Alignas(64) float buf[2][32 * 32];
    int cur, have;
    int64_t m, n, rows; /* the pending block */
} sink_queue;

static void sink_drain(sink_queue *q, const vt_mxu_sink *sink) {
    if (q->have) vt_mxu_sink_rows(sink, q->m, q->n, q->buf[q->cur ^ 1], 32, q->rows);
    q->have = 0;
}

/* The block just stored into q->buf[q->cur]: queue it, write out the one
 * before. */
static void sink_push(sink_queue *q, const vt_mxu_sink *sink, int64_t m, int64_t n, int64_t rows) {
    sink_drain(q, sink);
    q->m = m, q->n = n, q->rows = rows, q->have = 1;
    q->cur ^= 1;
}

/* A read in place: a bf16 row-major matrix whose rows are lda apart is
 * already in the A tiles' format (16 rows of 32 k, one row stride), so only
 * B is packed. Strips of 32 rows as block_amx, each under strip_tiles: the
 * last strip's fewer rows, and K < 32's `pairs`, so no row past mb and no k
 * past K is read; a strip of at most 16 rows uses half the tiles. */
static void direct_amx(int64_t kc, int pairs, int64_t mb, int64_t nb, const uint16_t *restrict a, int64_t lda,
                       const uint16_t *restrict b, int64_t bs, float *restrict c, int64_t ldc, int acc,
                       const vt_mxu_sink *sink) {
    const size_t ldcb = (size_t)ldc * sizeof(float), ldab = (size_t)lda * sizeof(uint16_t);
    sink_queue q;
    q.cur = q.have = 0;
    for (int64_t m = 0; m < mb; m += 32) {
        const int64_t r = mb - m < 32 ? mb - m : 32;
        if (m == 0 || r < 32) { /* the whole strips' configuration, then the last strip's */
            const vt_amx_tile_config t = strip_tiles(r, pairs);
            vt_amx_load_config(&t);
        }
        const uint16_t *a0 = a + m * lda, *a1 = a0 + 16 * lda;
        for (int64_t n = 0; n < nb; n += 32) {
            const uint16_t *b0 = b + (n / 16) * bs, *b1 = b0 + bs;
            float *c0 = c + m * ldc + n, *c1 = c0 + 16 * ldc, *s = sink ? q.buf[q.cur] : c0;
            const size_t ls = sink ? 32 * sizeof(float) : ldcb;
            if (r > 16) {
                vt_amx_c_start(c0, c1, ldcb, acc);
                for (int64_t ch = 0; ch < kc; ch++)
                    vt_amx_step(a0 + ch * 32, ldab, a1 + ch * 32, ldab, b0 + ch * VT_MXU_CHUNK,
                                b1 + ch * VT_MXU_CHUNK, 64);
                vt_amx_c_store(s, sink ? s + 16 * 32 : c1, ls);
            } else {
                if (acc) {
                    _tile_loadd(0, c0, ldcb);
                    _tile_loadd(1, c0 + 16, ldcb);
                } else {
                    _tile_zero(0);
                    _tile_zero(1);
                }
                for (int64_t ch = 0; ch < kc; ch++) {
                    _tile_loadd(4, a0 + ch * 32, ldab);
                    _tile_stream_loadd(6, b0 + ch * VT_MXU_CHUNK, 64);
                    _tile_stream_loadd(7, b1 + ch * VT_MXU_CHUNK, 64);
                    _tile_dpbf16ps(0, 4, 6);
                    _tile_dpbf16ps(1, 4, 7);
                }
                _tile_stored(0, s, ls);
                _tile_stored(1, s + 16, ls);
            }
            if (sink) sink_push(&q, sink, m, n, r);
        }
    }
    if (sink) sink_drain(&q, sink);
    _tile_release();
}

const vt_mxu_engine vt_mxu_engine_amx = {"amx", VT_ISA_AVX2 | VT_ISA_AVX512 | VT_ISA_AVX512BF16 | VT_ISA_AMX,
                                         block_amx, direct_amx, vt_mxu_split_avx512, vt_mxu_zip_avx512, 0, 0,
                                         &vt_mxu_packers_avx512bf16};
