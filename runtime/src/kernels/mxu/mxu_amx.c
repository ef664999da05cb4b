/* mxu_amx.c — AMX-BF16 MXU engine: 2x2 tile blocking (C in tmm0-3 for the
 * whole K block, A in tmm4-5, B in tmm6-7) over the packed layout, where
 * every 32-K chunk of a 16-wide panel is one 1 KiB tile with 64-byte rows. */
#include <immintrin.h>

#include "mxu_local.h"

static void block_amx(int64_t kc, int64_t mb, int64_t nb, const uint16_t *restrict a, int64_t as,
                      const uint16_t *restrict b, int64_t bs, float *restrict c, int64_t ldc, int acc) {
    _tile_loadconfig(&vt_amx_tiles16);
    const size_t ldcb = (size_t)ldc * sizeof(float);
    /* Rows outer: the two A strips are reused from L2 across all of nb
     * while B strips stream past them (measured faster than columns outer
     * with the driver's wide NC). */
    for (int64_t m = 0; m < mb; m += 32) {
        const uint16_t *a0 = a + (m / 16) * as, *a1 = a0 + as;
        for (int64_t n = 0; n < nb; n += 32) {
            const uint16_t *b0 = b + (n / 16) * bs, *b1 = b0 + bs;
            float *c0 = c + m * ldc + n, *c1 = c0 + 16 * ldc;
            if (acc) {
                _tile_loadd(0, c0, ldcb);
                _tile_loadd(1, c0 + 16, ldcb);
                _tile_loadd(2, c1, ldcb);
                _tile_loadd(3, c1 + 16, ldcb);
            } else {
                /* a fresh sum starts at +0, as an MXU accumulator does */
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
            }
            for (int64_t ch = 0; ch < kc; ch++) {
                int64_t o = ch * VT_MXU_CHUNK;
                _tile_loadd(4, a0 + o, 64);
                _tile_loadd(6, b0 + o, 64);
                _tile_loadd(7, b1 + o, 64);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_loadd(5, a1 + o, 64);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
            _tile_stored(0, c0, ldcb);
            _tile_stored(1, c0 + 16, ldcb);
            _tile_stored(2, c1, ldcb);
            _tile_stored(3, c1 + 16, ldcb);
        }
    }
    _tile_release();
}

const vt_mxu_engine vt_mxu_engine_amx = {"amx", VT_ISA_AVX2 | VT_ISA_AVX512 | VT_ISA_AVX512BF16 | VT_ISA_AMX,
                                         block_amx, vt_mxu_split_avx512, vt_mxu_zip_avx512, 0,
                                         &vt_mxu_packers_avx512bf16};
