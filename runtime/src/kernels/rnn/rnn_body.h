/* rnn_body.h — a cell's rows (kernels/rnn/rnn.c), included once per ISA:
 * rnn.c (portable C), rnn_avx2.c, rnn_avx512.c, so the loops of their
 * own (the bf16 roundings, the fused sums) vectorise to each ISA's widest
 * registers; the elementwise microkernels they call are the active ISA's
 * anyway. C11 mode keeps every multiply and add apart (no contraction):
 * the same bits on every path. The includer defines RNN_SFX. */
#include <stdatomic.h>
#include <stdlib.h>

#include "kernels/elementwise/elementwise_loop.h"
#include "kernels/rnn/rnn.h"

#define RNN_CAT2(a, b) a##b
#define RNN_CAT(a, b) RNN_CAT2(a, b)

static const float ONE = 1.0f, NO_PARAMS[VT_EW_MAX_PARAMS + 1];

static void add(float *out, const float *a, const float *b, int64_t n) {
    vt_binary_ukernels[VT_CLASS_FLOAT][VT_ADD](n, out, a, 1, b, 1, &ONE);
}
static void sub(float *out, const float *a, const float *b, int64_t n) {
    vt_binary_ukernels[VT_CLASS_FLOAT][VT_SUB](n, out, a, 1, b, 1, &ONE);
}
static void mul(float *out, const float *a, const float *b, int64_t n) {
    vt_binary_ukernels[VT_CLASS_FLOAT][VT_MUL](n, out, a, 1, b, 1, &ONE);
}
static void act(vt_unary_op op, float *x, int64_t n) { vt_unary_ukernels[VT_CLASS_FLOAT][op](n, x, x, NO_PARAMS); }
/* out = a + b * c (addcmul with value 1) */
static void addcmul(float *out, const float *a, const float *b, const float *c, int64_t n) {
    vt_ternary_ukernels[VT_CLASS_FLOAT][VT_ADDCMUL](n, out, a, 1, b, 1, c, 1, &ONE);
}

/* v as a bf16 tensor stores it, in float: vt_f32_to_bf16's rounding
 * (nearest even, NaN canonical), branch-free so the loops vectorise. */
static inline float bf16_round(float v) {
    uint32_t u, r;
    memcpy(&u, &v, 4);
    r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    r = (u & 0x7fffffffu) > 0x7f800000u ? 0x7fc00000u : r;
    memcpy(&v, &r, 4);
    return v;
}

/* x rounded to dt (the value a dt tensor stores), f16 through tmp. */
static void rnd(vt_dtype dt, float *x, int64_t n, uint16_t *tmp) {
    if (dt == VT_BF16) {
        VLOOP(n, x[i] = bf16_round(x[i]));
    } else if (dt == VT_F16) {
        vt_convert(VT_F32, x, 1, dt, tmp, 1, n);
        vt_convert(dt, tmp, 1, VT_F32, x, 1, n);
    }
}

static const char *row_at(const vt_tensor *t, int64_t b) {
    return (const char *)t->data + (t->offset + b * t->strides[0]) * (int64_t)vt_dtype_size(t->dtype);
}
static void load(const vt_tensor *t, int64_t b, int64_t col, float *dst, int64_t n) {
    vt_convert(t->dtype, row_at(t, b) + col * t->strides[1] * (int64_t)vt_dtype_size(t->dtype), t->strides[1],
               VT_F32, dst, 1, n);
}
static void store(const vt_tensor *t, int64_t b, const float *src, int64_t n) {
    vt_convert(VT_F32, src, 1, t->dtype, (char *)row_at(t, b), t->strides[1], n);
}

/* gates (+ b_ih, + b_hh), each sum rounded: n values at a. (The binary
 * microkernels' add is IEEE addition: bf16's three sums and roundings go
 * in one pass.) */
static void gate_sum(const vt_rnn_cell_job *j, float *a, const float *h, int64_t col, int64_t n, uint16_t *tmp) {
    if (j->dt == VT_BF16 && j->bi) {
        const float *bi = j->bi + col, *bh = j->bh + col;
        VLOOP(n, a[i] = bf16_round(bf16_round(bf16_round(a[i] + h[i]) + bi[i]) + bh[i]));
        return;
    }
    add(a, a, h, n), rnd(j->dt, a, n, tmp);
    if (!j->bi) return;
    add(a, a, j->bi + col, n), rnd(j->dt, a, n, tmp);
    add(a, a, j->bh + col, n), rnd(j->dt, a, n, tmp);
}

/* a: [4H] gates, then activations; t: [4H] hidden gates; c, y: [H]. */
static void lstm_row(const vt_rnn_cell_job *j, int64_t b, float *a, float *t, float *c, float *y, uint16_t *tmp) {
    const int64_t H = j->H;
    load(j->ig, b, 0, a, 4 * H), load(j->hg, b, 0, t, 4 * H);
    gate_sum(j, a, t, 0, 4 * H, tmp);
    act(VT_SIGMOID, a, H), act(VT_SIGMOID, a + H, H), act(VT_TANH, a + 2 * H, H), act(VT_SIGMOID, a + 3 * H, H);
    rnd(j->dt, a, 4 * H, tmp);
    store(j->ws, b, a, 4 * H);
    const float *i = a, *f = a + H, *g = a + 2 * H, *o = a + 3 * H;
    load(j->prev, b, 0, c, H);
    mul(y, f, c, H), rnd(j->dt, y, H, tmp); /* cy = f * cx + i * g */
    addcmul(y, y, i, g, H), rnd(j->dt, y, H, tmp);
    store(j->cy, b, y, H);
    act(VT_TANH, y, H); /* hy = o * tanh(cy) */
    if (j->dt == VT_BF16) {
        VLOOP(H, y[i] = bf16_round(o[i] * bf16_round(y[i])));
    } else {
        rnd(j->dt, y, H, tmp);
        mul(y, o, y, H), rnd(j->dt, y, H, tmp);
    }
    store(j->hy, b, y, H);
}

/* w: [5H] workspace r, z, n, hx, hn + b_hn; ig, hg: [3H]; y: [H]. */
static void gru_row(const vt_rnn_cell_job *j, int64_t b, float *w, float *ig, float *hg, float *y, uint16_t *tmp) {
    const int64_t H = j->H;
    load(j->ig, b, 0, ig, 3 * H), load(j->hg, b, 0, hg, 3 * H);
    float *r = w, *z = w + H, *n = w + 2 * H, *hx = w + 3 * H, *hn = w + 4 * H;
    for (int k = 0; k < 2; k++) { /* reset and update gates */
        float *gk = w + k * H;
        memcpy(gk, ig + k * H, (size_t)H * sizeof(float));
        gate_sum(j, gk, hg + k * H, k * H, H, tmp);
        act(VT_SIGMOID, gk, H), rnd(j->dt, gk, H, tmp);
    }
    load(j->prev, b, 0, hx, H);
    if (j->bh) add(hn, hg + 2 * H, j->bh + 2 * H, H), rnd(j->dt, hn, H, tmp);
    else memcpy(hn, hg + 2 * H, (size_t)H * sizeof(float));
    mul(n, r, hn, H), rnd(j->dt, n, H, tmp); /* n = tanh(i_n + b_in + r * (h_n + b_hn)) */
    add(n, n, ig + 2 * H, H), rnd(j->dt, n, H, tmp);
    if (j->bi) add(n, n, j->bi + 2 * H, H), rnd(j->dt, n, H, tmp);
    act(VT_TANH, n, H), rnd(j->dt, n, H, tmp);
    store(j->ws, b, w, 5 * H);
    sub(y, hx, n, H), rnd(j->dt, y, H, tmp); /* hy = n + z * (hx - n) */
    mul(y, y, z, H), rnd(j->dt, y, H, tmp);
    add(y, y, n, H), rnd(j->dt, y, H, tmp);
    store(j->hy, b, y, H);
}

void RNN_CAT(vt_rnn_cell_rows_, RNN_SFX)(void *ctx, int64_t b0, int64_t b1) {
    vt_rnn_cell_job *j = ctx;
    const int64_t H = j->H;
    /* lstm: a 4H, t 4H, c H, y H; gru: w 5H, ig 3H, hg 3H, y H */
    float *f = malloc((size_t)(12 * H + 64) * sizeof(float));
    uint16_t *tmp = malloc((size_t)(5 * H + 64) * sizeof(uint16_t));
    if (!f || !tmp) {
        free(f), free(tmp);
        atomic_store(&j->oom, 1);
        return;
    }
    for (int64_t b = b0; b < b1; b++) {
        if (j->lstm) lstm_row(j, b, f, f + 4 * H, f + 8 * H, f + 9 * H, tmp);
        else gru_row(j, b, f, f + 5 * H, f + 8 * H, f + 11 * H, tmp);
    }
    free(f), free(tmp);
}


/* ------------------------------------------------------------ LSTM backward */

/* One row of the LSTM cell's backward, each op of the composed backward
 * rounded by R: gc = ghy * o * (1 - tanh(cy)^2) (+ gcy), then the gates'
 * gradients and grad_cx. w: the row's i, f, g, o; t: tanh(cy), rounded;
 * x: cx; gh, gcv: the gradients (NULL: absent). */
#define RNN_BACK_ROW(R)                                                                                        \
    VLOOP(H, {                                                                                                 \
        const float in = w[i], f = w[H + i], g = w[2 * H + i], o = w[3 * H + i], th = t[i];                    \
        float gc = gh ? R(R(gh[i] * o) * R(1.0f - R(th * th))) : 0.0f;                                          \
        if (gcv) gc = R(gc + gcv[i]);                                                                          \
        out[i] = R(R(gc * g) * R(in * R(1.0f - in)));                                                          \
        out[H + i] = R(R(gc * x[i]) * R(f * R(1.0f - f)));                                                     \
        out[2 * H + i] = R(R(gc * in) * R(1.0f - R(g * g)));                                                   \
        out[3 * H + i] = gh ? R(R(gh[i] * th) * R(o * R(1.0f - o))) : 0.0f;                                     \
        ocx[i] = R(gc * f);                                                                                    \
    })

static inline float no_round(float v) { return v; }
static inline float f16_round(float v) { return vt_f16_to_f32(vt_f32_to_f16(v)); }

/* One row of the GRU cell's backward (pure IEEE arithmetic, each op
 * rounded by R): through hy = n + z (hx - n), n = tanh(i_n + r hn), r, z
 * sigmoids. w: the row's r, z, n, hx, hn; gy: grad_hy; out: dr, dz, dn
 * (the input gates'), outh: the hidden gates' (dn scaled by r). */
#define RNN_GRU_BACK_ROW(R)                                                                                    \
    VLOOP(H, {                                                                                                 \
        const float r = w[i], z = w[H + i], n = w[2 * H + i], hx = w[3 * H + i], hn = w[4 * H + i], g = gy[i];  \
        const float dz = R(R(R(hx - n) * g) * R(z * R(1.0f - z)));                                             \
        const float dn = R(R(R(1.0f - z) * g) * R(1.0f - R(n * n)));                                           \
        const float dr = R(R(dn * hn) * R(r * R(1.0f - r)));                                                   \
        out[i] = dr, out[H + i] = dz, out[2 * H + i] = dn;                                                     \
        outh[i] = dr, outh[H + i] = dz, outh[2 * H + i] = R(dn * r);                                           \
        ocx[i] = R(g * z);                                                                                     \
    })

static void gru_back_rows(vt_rnn_back_job *j, int64_t b0, int64_t b1, float *buf) {
    const int64_t H = j->H;
    float *w = buf, *out = buf + 5 * H, *outh = buf + 8 * H, *gy = buf + 11 * H, *ocx = buf + 12 * H;
    for (int64_t b = b0; b < b1; b++) {
        load(j->ws, b, 0, w, 5 * H), load(j->ghy, b, 0, gy, H);
        if (j->dt == VT_BF16) RNN_GRU_BACK_ROW(bf16_round);
        else if (j->dt == VT_F16) RNN_GRU_BACK_ROW(f16_round);
        else RNN_GRU_BACK_ROW(no_round);
        store(j->gg, b, out, 3 * H), store(j->ggh, b, outh, 3 * H), store(j->gcx, b, ocx, H);
    }
}

void RNN_CAT(vt_rnn_back_rows_, RNN_SFX)(void *ctx, int64_t b0, int64_t b1) {
    vt_rnn_back_job *j = ctx;
    const int64_t H = j->H;
    /* w 4H, out 4H, t, x, gh, gcv, ocx: H each */
    float *buf = malloc((size_t)(13 * H + 64) * sizeof(float));
    uint16_t *tmp = malloc((size_t)(H + 64) * sizeof(uint16_t));
    if (!buf || !tmp) {
        free(buf), free(tmp);
        atomic_store(&j->oom, 1);
        return;
    }
    if (j->gru) {
        gru_back_rows(j, b0, b1, buf);
        free(buf), free(tmp);
        return;
    }
    float *w = buf, *out = buf + 4 * H, *t = buf + 8 * H, *x = buf + 9 * H, *ocx = buf + 12 * H;
    float *gh = j->ghy ? buf + 10 * H : NULL, *gcv = j->gcy ? buf + 11 * H : NULL;
    for (int64_t b = b0; b < b1; b++) {
        load(j->ws, b, 0, w, 4 * H), load(j->cy, b, 0, t, H), load(j->cx, b, 0, x, H);
        if (gh) load(j->ghy, b, 0, gh, H);
        if (gcv) load(j->gcy, b, 0, gcv, H);
        act(VT_TANH, t, H), rnd(j->dt, t, H, tmp);
        if (j->dt == VT_BF16) RNN_BACK_ROW(bf16_round);
        else if (j->dt == VT_F16) RNN_BACK_ROW(f16_round);
        else RNN_BACK_ROW(no_round);
        store(j->gg, b, out, 4 * H), store(j->gcx, b, ocx, H);
    }
    free(buf), free(tmp);
}
