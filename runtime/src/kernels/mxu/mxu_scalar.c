/* mxu_scalar.c — the portable MXU engine: bf16 split, VNNI zip and a block
 * kernel in plain C. It is the base path on every CPU (AArch64 included) and
 * accumulates in the AMX pseudo-code's order: per k pair, even k then odd k. */
#include "internal.h"

static void split_scalar(const float *restrict x, int64_t n, int64_t npad, vt_precision prec, uint16_t *restrict hi,
                         uint16_t *restrict mid, uint16_t *restrict lo) {
    for (int64_t i = 0; i < npad; i++) {
        uint32_t parts[3] = {0, 0, 0};
        if (i < n) vt_mxu_split(x[i], prec, parts);
        hi[i] = (uint16_t)(parts[0] >> 16);
        if (mid) mid[i] = (uint16_t)(parts[1] >> 16);
        if (lo) lo[i] = (uint16_t)(parts[2] >> 16);
    }
}

static void zip_scalar(const uint16_t *restrict even, const uint16_t *restrict odd, int64_t n, uint16_t *restrict out,
                       int64_t stride) {
    for (int64_t i = 0; i < n; i++) {
        uint16_t *d = out + (i / 16) * stride + (i % 16) * 2;
        d[0] = even[i];
        d[1] = odd[i];
    }
}

/* One 16 x 16 tile, as one TDPBF16PS chain would compute it. The products
 * of two bf16 are exact in f32, so acc + a*b rounds once either way. */
static void tile_scalar(int64_t kc, const uint16_t *restrict a, const uint16_t *restrict b, float *restrict c,
                        int64_t ldc) {
    for (int64_t ch = 0; ch < kc; ch++) {
        const uint16_t *ac = a + ch * VT_MXU_CHUNK, *bc = b + ch * VT_MXU_CHUNK;
        for (int64_t j = 0; j < 16; j++) {
            const uint16_t *brow = bc + j * 32;
            float b0[16], b1[16];
            for (int n = 0; n < 16; n++) {
                b0[n] = vt_bf16_to_f32(brow[2 * n]);
                b1[n] = vt_bf16_to_f32(brow[2 * n + 1]);
            }
            for (int64_t m = 0; m < 16; m++) {
                float a0 = vt_bf16_to_f32(ac[m * 32 + 2 * j]), a1 = vt_bf16_to_f32(ac[m * 32 + 2 * j + 1]);
                float *cr = c + m * ldc;
                for (int n = 0; n < 16; n++) {
                    float t = cr[n] + a0 * b0[n];
                    cr[n] = t + a1 * b1[n];
                }
            }
        }
    }
}

static void block_scalar(int64_t kc, int64_t mb, int64_t nb, const uint16_t *restrict a, int64_t as,
                         const uint16_t *restrict b, int64_t bs, float *restrict c, int64_t ldc, int acc) {
    if (!acc)
        for (int64_t m = 0; m < mb; m++)
            for (int64_t n = 0; n < nb; n++) c[m * ldc + n] = 0.0f;
    for (int64_t n = 0; n < nb; n += 16)
        for (int64_t m = 0; m < mb; m += 16) tile_scalar(kc, a + (m / 16) * as, b + (n / 16) * bs, c + m * ldc + n, ldc);
}

const vt_mxu_engine vt_mxu_engine_scalar = {"scalar", 0, block_scalar, NULL, split_scalar, zip_scalar, 0, 1, NULL};
