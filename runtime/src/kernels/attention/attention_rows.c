/* attention_rows.c — portable row kernels of the attention family: score
 * scaling and masking, exp and row sums, the backward's P and dS, and the
 * packers that write f32 tiles into the MXU engine's bf16 layout (one K
 * segment per bf16 part of the precision, as kernels/mxu/ packs them). */
#include "attention.h"
#include "kernels/mxu/mxu_local.h"

static float scores_portable(float *s, int64_t n, int64_t nvalid, float scale, const float *bias) {
    float m = -INFINITY;
    int nan = 0;
    for (int64_t c = 0; c < nvalid; c++) {
        float x = s[c] * scale;
        if (bias) x += bias[c];
        s[c] = x;
        if (x != x) nan = 1;
        if (x > m) m = x;
    }
    for (int64_t c = nvalid; c < n; c++) s[c] = -INFINITY;
    return nan ? NAN : m;
}

static float exp_sum_portable(float *s, int64_t n, float m) {
    float sum = 0.0f;
    for (int64_t c = 0; c < n; c++) {
        float e = expf(s[c] - m);
        s[c] = e;
        sum += e;
    }
    return sum;
}

static void bwd_p_portable(float *s, int64_t n, int64_t nvalid, float scale, const float *bias, float lse) {
    for (int64_t c = 0; c < nvalid; c++) {
        float x = s[c] * scale;
        if (bias) x += bias[c];
        s[c] = expf(x - lse);
    }
    for (int64_t c = nvalid; c < n; c++) s[c] = 0.0f;
}

static void bwd_ds_portable(float *ds, const float *p, const float *dp, int64_t n, float delta, float scale) {
    for (int64_t c = 0; c < n; c++) ds[c] = p[c] * (dp[c] - delta) * scale;
}

static void scale_portable(float *x, int64_t n, float a) {
    for (int64_t c = 0; c < n; c++) x[c] *= a;
}

/* The part (0 hi, 1 mid, 2 lo) segment g holds, as in mxu_pack.c. */
static int seg_part(vt_precision prec, int g) {
    if (prec == VT_PRECISION_HIGHEST) return g;
    return g == 0 ? 0 : 2;
}

static int nseg_of(vt_precision prec) {
    return prec == VT_PRECISION_HIGHEST ? 3 : prec == VT_PRECISION_HIGH ? 2 : 1;
}

static void pack_a_portable(const float *x, int64_t ldx, int64_t rows, int64_t cols, vt_precision prec, int64_t kt,
                            int64_t c0, uint16_t *dst, int64_t panel) {
    int nseg = nseg_of(prec);
    for (int64_t r = 0; r < rows; r++) {
        uint16_t *pr = dst + (r / 16) * panel + (r % 16) * 32;
        for (int64_t k = 0; k < cols; k++) {
            uint32_t parts[3];
            vt_mxu_split(x[r * ldx + k], prec, parts);
            for (int g = 0; g < nseg; g++)
                pr[(g * kt + c0 + k / 32) * VT_MXU_CHUNK + k % 32] = (uint16_t)(parts[seg_part(prec, g)] >> 16);
        }
    }
}

static void pack_b_portable(const float *x, int64_t ldx, int64_t krows, int64_t ncols, vt_precision prec, int64_t kt,
                            int64_t c0, uint16_t *dst, int64_t panel) {
    int nseg = nseg_of(prec);
    for (int64_t k = 0; k < krows; k++) {
        int64_t within = ((k % 32) / 2) * 32 + (k % 2);
        for (int64_t n = 0; n < ncols; n++) {
            uint32_t parts[3];
            vt_mxu_split(x[k * ldx + n], prec, parts);
            uint16_t *pn = dst + (n / 16) * panel + within + (n % 16) * 2;
            for (int g = 0; g < nseg; g++)
                pn[(g * kt + c0 + k / 32) * VT_MXU_CHUNK] = (uint16_t)(parts[seg_part(prec, g)] >> 16);
        }
    }
}

const vt_attn_rows vt_attn_rows_portable = {scores_portable, exp_sum_portable, bwd_p_portable, bwd_ds_portable,
                                            scale_portable,  pack_a_portable,  pack_b_portable};
