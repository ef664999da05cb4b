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

const vt_mxu_engine vt_mxu_engine_amx = {"amx", VT_ISA_AVX2 | VT_ISA_AVX512 | VT_ISA_AVX512BF16 | VT_ISA_AMX,
                                         block_amx, vt_mxu_split_avx512, vt_mxu_zip_avx512, 0,
                                         &vt_mxu_packers_avx512bf16};
