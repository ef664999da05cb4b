/* attention.h — private to the attention family: the normalised problem
 * (4-D views), argument checks, and the row kernels (score scaling and
 * masking, exp, operand packing into the MXU layout) that have per-ISA
 * versions. The matmuls themselves are the MXU engine's block kernels. */
#ifndef VTPU_KERNELS_ATTENTION_H
#define VTPU_KERNELS_ATTENTION_H

#include "internal.h"

/* Block of queries and of keys one step works on (the S tile is BQ x BK). */
#define VT_ATTN_BQ 64
#define VT_ATTN_BK 64

/* One SDPA call, every tensor seen as 4-D ([B, H, rows, cols]; mask
 * broadcast to [B, Hq, L, S] with stride-0 dims). */
typedef struct vt_attn_problem {
    int64_t B, Hq, Hk, L, S, D, Dv;
    vt_tensor q, k, v, out, lse, dout, dq, dk, dv, mask;
    int has_mask, has_dq, has_dk, has_dv;
    double scale;
    int causal;
    vt_precision prec; /* effective: DEFAULT for bf16/f16 inputs */
} vt_attn_problem;

/* Validate and normalise. backward != 0 checks dout and the gradients too.
 * fn names the entry point in messages. */
vt_status vt_attn_setup(vt_attn_problem *p, const char *fn, int backward, const vt_tensor *out, const vt_tensor *lse,
                        const vt_tensor *q, const vt_tensor *k, const vt_tensor *v, const vt_tensor *mask,
                        const vt_tensor *dout, const vt_tensor *dq, const vt_tensor *dk, const vt_tensor *dv,
                        double scale, int is_causal, vt_precision prec);

/* n mask values of row (b, h, i) starting at key j0 as additive f32 (bool:
 * 0 / -inf) into dst; returns dst or, when the mask row is contiguous f32,
 * a pointer into the mask itself. */
const float *vt_attn_mask_row(const vt_attn_problem *p, int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n,
                              float *dst);

/* Row kernels, per ISA.
 * scores: s[c] = s[c] * scale + (bias ? bias[c] : 0) for c < nvalid, -inf
 *   for nvalid <= c < n; returns the max over the row (-inf if none; NaN
 *   propagates).
 * exp_sum: s[c] = exp(s[c] - m) for c < n, returns the f32 sum.
 * bwd_p: s[c] = exp(s[c] * scale + bias[c] - lse) for c < nvalid, 0 after.
 * bwd_ds: ds[c] = p[c] * (dp[c] - delta) * scale.
 * scale: x[c] *= a for c < n (the output rows' rescale by the running max).
 * pack_a: rows x cols (multiples of 16 and 32) of f32 x (row stride ldx)
 *   into the MXU A layout: 16-row panels, panel stride `panel` elements,
 *   nseg segments (the bf16 parts of prec) of kt chunks each, written from
 *   chunk c0 of each segment.
 * pack_b: x's rows are K (krows, multiple of 32) and columns N (ncols,
 *   multiple of 16): the MXU B layout (16-column panels, VNNI pairs), from
 *   chunk c0 of each segment. */
typedef struct vt_attn_rows {
    float (*scores)(float *s, int64_t n, int64_t nvalid, float scale, const float *bias);
    float (*exp_sum)(float *s, int64_t n, float m);
    void (*bwd_p)(float *s, int64_t n, int64_t nvalid, float scale, const float *bias, float lse);
    void (*bwd_ds)(float *ds, const float *p, const float *dp, int64_t n, float delta, float scale);
    void (*scale)(float *x, int64_t n, float a);
    void (*pack_a)(const float *x, int64_t ldx, int64_t rows, int64_t cols, vt_precision prec, int64_t kt,
                   int64_t c0, uint16_t *dst, int64_t panel);
    void (*pack_b)(const float *x, int64_t ldx, int64_t krows, int64_t ncols, vt_precision prec, int64_t kt,
                   int64_t c0, uint16_t *dst, int64_t panel);
} vt_attn_rows;

extern const vt_attn_rows vt_attn_rows_portable;
#if VT_X86
extern const vt_attn_rows vt_attn_rows_avx512;
extern const vt_attn_rows vt_attn_rows_avx2;
#endif
/* The table in use (best within vt_isa_active()). */
const vt_attn_rows *vt_attn_rows_active(void);

#endif
