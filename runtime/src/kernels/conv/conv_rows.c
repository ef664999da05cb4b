/* conv_rows.c — convolution when the input's channels are contiguous
 * (channels-last). The im2col matrix is built by rows: row m is output
 * position m = (image, z), K = G * taps * Cg ordered (group, tap, channel),
 * so every tap of a row is one run of Cg input channels (a memcpy, or a
 * conversion). The products' rows are output positions, so a channels-last
 * output (or grad_output) is an MXU operand or result as it lies, and a 1x1
 * convolution with stride 1 and no padding needs no columns at all: its
 * input is its im2col matrix.
 *
 * Columns are in the input's dtype when the MXU reads it directly (F32,
 * BF16), so bf16 data moves at half the bytes; sums that go on past one
 * product (col2im, the weight gradient over chunks) are kept in f32. */
#include <stdatomic.h>
#include <stdlib.h>

#include "kernels/conv/conv.h"

/* Rows per parallel task of the movers. */
#define ROW_GRAIN 64

int vt_conv_rows_takes(const vt_conv_geom *g, const vt_tensor *x, vt_conv_kind kind) {
    vt_tensor x5 = vt_conv_view5(x, g->spatial);
    /* F16 goes through f32 columns and the NCHW drivers' rounding. Runs
     * of fewer channels cost more per element than the NCHW drivers' rows
     * of positions, unless a window's taps along the last dim join into
     * one run (im2row_one: an RGB stem's 7 taps of 3 channels), which the
     * forward and the weight gradient read; the input gradient sums its
     * rows back tap by tap (row2im) */
    const int joined = kind != VT_CONV_BACKWARD_INPUT && g->G == 1 && g->dil[2] == 1 && x5.strides[4] == g->C &&
                       g->k[2] * g->Cg >= 8;
    return (g->dtype == VT_F32 || g->dtype == VT_BF16) && (g->Cg >= 8 || joined) && x5.strides[1] == 1;
}

/* The tensor t5 [N, C, s0, s1, s2] as rows (n, z): 1 with *row_stride
 * when the four dims step as one. */
static int rows_of(const vt_tensor *t5, int64_t *row_stride) {
    int64_t sizes[4] = {t5->sizes[0], t5->sizes[2], t5->sizes[3], t5->sizes[4]};
    int64_t strides[4] = {t5->strides[0], t5->strides[2], t5->strides[3], t5->strides[4]};
    return vt_conv_merge_dims(4, sizes, strides, row_stride);
}

/* The weight [O, Cg, k0, k1, k2] as an [O, taps * Cg] matrix of dt, K in
 * (tap, channel) order: a view when it lies so (a channels-last weight),
 * else a packed copy (*owned). */
typedef struct wmat {
    const void *data;
    int64_t offset, row, col; /* elements */
    void *owned;
} wmat;

static vt_status weight_rows(const vt_conv_geom *g, const vt_tensor *w5, vt_dtype dt, const char *fn, wmat *m) {
    memset(m, 0, sizeof *m);
    int64_t sizes[4] = {w5->sizes[2], w5->sizes[3], w5->sizes[4], w5->sizes[1]};
    int64_t strides[4] = {w5->strides[2], w5->strides[3], w5->strides[4], w5->strides[1]};
    if (w5->dtype == dt && vt_conv_merge_dims(4, sizes, strides, &m->col)) {
        m->data = w5->data, m->offset = w5->offset, m->row = w5->strides[0];
        return VT_OK;
    }
    vt_status s = VT_OK;
    int64_t K = g->k_prod * g->Cg;
    m->owned = vt_conv_scratch(g->O * K, dt, fn, "packed weight", &s);
    if (!m->owned) return s;
    int64_t st[5] = {K, 1, g->k[1] * g->k[2] * g->Cg, g->k[2] * g->Cg, g->Cg};
    vt_tensor dst = vt_conv_tensor(m->owned, dt, 5, w5->sizes, st, 0);
    m->data = m->owned, m->offset = 0, m->row = K, m->col = 1;
    return vt_copy(&dst, w5);
}

/* ------------------------------------------------------------ movers */

/* row2im over a chunk's column rows (the input gradient's products). */
typedef struct row_job {
    const vt_conv_geom *g;
    const vt_tensor *x5; /* the input gradient, written */
    vt_dtype cdt;        /* dtype of the columns (the sums') */
    char *col;           /* rows of the chunk, ld elements apart */
    int64_t ld, m0;      /* m0: the chunk's first row */
    _Atomic int oom;
} row_job;

static void position_of(const vt_conv_geom *g, int64_t z, int64_t zz[3]) {
    zz[2] = z % g->out[2];
    zz[1] = z / g->out[2] % g->out[1];
    zz[0] = z / (g->out[2] * g->out[1]);
}

/* n elements of dt at src into dst as cdt. */
static void move_run(vt_dtype dt, const char *src, vt_dtype cdt, char *dst, int64_t n) {
    if (n <= 0) return;
    if (dt == cdt) memcpy(dst, src, (size_t)n * vt_dtype_size(cdt));
    else vt_convert(dt, src, 1, cdt, dst, 1, n);
}

/* Group `group` of row m (image m / Z, position m % Z) of the im2col
 * matrix at dst as [tap][Cg] of cdt: each tap's Cg channels, or 0 where the
 * window reads padding. Where a position's channels follow the previous
 * position's (one group, undilated last dim) the window's taps along the
 * last dim are one run of input: a stem's 7 taps of 3 channels move as 21
 * elements, not 7 runs of 3. */
static void im2row_one(const vt_conv_geom *g, const vt_tensor *x, vt_dtype cdt, int64_t m, int64_t group, char *dst) {
    size_t es = vt_dtype_size(x->dtype), cs = vt_dtype_size(cdt), run = (size_t)g->Cg * cs;
    int64_t n = m / g->out_prod, zz[3], t = 0;
    position_of(g, m % g->out_prod, zz);
    const int joined = g->dil[2] == 1 && x->strides[4] == g->Cg;
    const int64_t first2 = zz[2] * g->stride[2] - g->pad[2];
    /* taps [lo2, hi2) of the last dim read inside the input */
    const int64_t lo2 = first2 < 0 ? (-first2 + g->dil[2] - 1) / g->dil[2] : 0;
    int64_t hi2 = g->in[2] - first2 <= 0 ? 0 : (g->in[2] - first2 + g->dil[2] - 1) / g->dil[2];
    hi2 = hi2 < g->k[2] ? hi2 : g->k[2];
    for (int64_t k0 = 0; k0 < g->k[0]; k0++)
        for (int64_t k1 = 0; k1 < g->k[1]; k1++, t += g->k[2]) {
            int64_t i0 = zz[0] * g->stride[0] - g->pad[0] + k0 * g->dil[0];
            int64_t i1 = zz[1] * g->stride[1] - g->pad[1] + k1 * g->dil[1];
            char *d = dst + t * (int64_t)run;
            if (i0 < 0 || i0 >= g->in[0] || i1 < 0 || i1 >= g->in[1] || lo2 >= hi2) {
                memset(d, 0, run * (size_t)g->k[2]);
                continue;
            }
            const char *line = (const char *)x->data + (x->offset + n * x->strides[0] + i0 * x->strides[2] +
                                                        i1 * x->strides[3] + group * g->Cg) * (int64_t)es;
            memset(d, 0, run * (size_t)lo2);
            if (joined) {
                move_run(x->dtype, line + (first2 + lo2) * x->strides[4] * (int64_t)es, cdt, d + lo2 * (int64_t)run,
                         (hi2 - lo2) * g->Cg);
            } else {
                for (int64_t k2 = lo2; k2 < hi2; k2++)
                    move_run(x->dtype, line + (first2 + k2 * g->dil[2]) * x->strides[4] * (int64_t)es, cdt,
                             d + k2 * (int64_t)run, g->Cg);
            }
            memset(d + hi2 * (int64_t)run, 0, run * (size_t)(g->k[2] - hi2));
        }
}

/* The im2col rows of one group as an MXU operand produced row by row
 * (vt_matmul_rows): no column matrix is stored. */
typedef struct row_source {
    const vt_conv_geom *g;
    const vt_tensor *x5;
    vt_dtype cdt;
    int64_t m0, group;
} row_source;

static void source_row(void *ctx, int64_t i, void *dst) {
    const row_source *r = ctx;
    im2row_one(r->g, r->x5, r->cdt, r->m0 + i, r->group, dst);
}

/* Input positions [begin, end) of the chunk's images (position p = image
 * offset * in_prod + i): the sum over taps of the column entries that read
 * it, in f32 (f64), rounded once into x. */
static void row2im_range(void *ctx, int64_t begin, int64_t end) {
    row_job *j = ctx;
    const vt_conv_geom *g = j->g;
    const vt_tensor *x = j->x5;
    size_t es = vt_dtype_size(x->dtype), as = vt_dtype_size(j->cdt);
    int64_t n0 = j->m0 / g->out_prod;
    char *acc = malloc((size_t)g->C * as + 8);
    if (!acc) {
        atomic_store(&j->oom, 1);
        return;
    }
    for (int64_t p = begin; p < end; p++) {
        int64_t b = p / g->in_prod, i = p % g->in_prod;
        int64_t ii[3] = {i / (g->in[1] * g->in[2]), i / g->in[2] % g->in[1], i % g->in[2]};
        memset(acc, 0, (size_t)g->C * as);
        int64_t t = 0;
        for (int64_t k0 = 0; k0 < g->k[0]; k0++)
            for (int64_t k1 = 0; k1 < g->k[1]; k1++)
                for (int64_t k2 = 0; k2 < g->k[2]; k2++, t++) {
                    int64_t kk[3] = {k0, k1, k2}, z = 0, ok = 1;
                    for (int d = 0; d < 3 && ok; d++) {
                        int64_t u = ii[d] + g->pad[d] - kk[d] * g->dil[d];
                        ok = u >= 0 && u % g->stride[d] == 0 && u / g->stride[d] < g->out[d];
                        z = z * g->out[d] + (ok ? u / g->stride[d] : 0);
                    }
                    if (!ok) continue;
                    const char *row = j->col + (b * g->out_prod + z) * j->ld * (int64_t)as;
                    for (int64_t gi = 0; gi < g->G; gi++) {
                        const char *src = row + (gi * g->k_prod + t) * g->Cg * (int64_t)as;
                        if (j->cdt == VT_F64) {
                            double *a = (double *)acc + gi * g->Cg;
                            const double *s = (const double *)src;
                            for (int64_t c = 0; c < g->Cg; c++) a[c] += s[c];
                        } else {
                            float *a = (float *)acc + gi * g->Cg;
                            const float *s = (const float *)src;
                            for (int64_t c = 0; c < g->Cg; c++) a[c] += s[c];
                        }
                    }
                }
        char *dst = (char *)x->data + (x->offset + (n0 + b) * x->strides[0] + ii[0] * x->strides[2] +
                                       ii[1] * x->strides[3] + ii[2] * x->strides[4]) * (int64_t)es;
        if (x->dtype == j->cdt && x->strides[1] == 1) memcpy(dst, acc, (size_t)g->C * as);
        else vt_convert(j->cdt, acc, 1, x->dtype, dst, x->strides[1], g->C);
    }
    free(acc);
}

/* Images [n0, n0 + nb) of an output-shaped tensor as rows [nb * Z, O] of
 * dt: a view when they lie so, else a copy into buf. *rs, *cs: strides. */
static vt_status out_rows(const vt_conv_geom *g, const vt_tensor *y5, vt_dtype dt, int64_t n0, int64_t nb, void *buf,
                          const void **data, int64_t *off, int64_t *rs, int64_t *cs) {
    if (y5->dtype == dt && rows_of(y5, rs)) {
        *data = y5->data, *off = y5->offset + n0 * y5->strides[0], *cs = y5->strides[1];
        return VT_OK;
    }
    vt_tensor src = *y5;
    src.offset += n0 * y5->strides[0];
    src.sizes[0] = nb;
    int64_t st[5] = {g->out_prod * g->O, 1, g->out[1] * g->out[2] * g->O, g->out[2] * g->O, g->O};
    vt_tensor dst = vt_conv_tensor(buf, dt, 5, src.sizes, st, 0);
    *data = buf, *off = 0, *rs = g->O, *cs = 1;
    return vt_copy(&dst, &src);
}

/* The 1x1 convolution with stride 1 and no padding whose input already is
 * its column matrix (rows of the input's dtype == cdt). */
static int input_is_col(const vt_conv_geom *g, const vt_tensor *x5, vt_dtype cdt, int64_t *rs) {
    if (g->k_prod != 1 || x5->dtype != cdt || !rows_of(x5, rs)) return 0;
    for (int d = 0; d < 3; d++)
        if (g->stride[d] != 1 || g->pad[d] != 0) return 0;
    return 1;
}

/* Slice g of a [G, M, X] tensor, as 2-D. */
static vt_tensor group_slice(const vt_tensor *t, int64_t g) {
    vt_tensor r = *t;
    r.offset += g * t->strides[0];
    r.ndim = 2;
    r.sizes[0] = t->sizes[1], r.sizes[1] = t->sizes[2];
    r.strides[0] = t->strides[1], r.strides[1] = t->strides[2];
    return r;
}

/* The [M, K] operand of group g's im2col rows, produced by src (its data
 * pointer only names the input; it is not read as a matrix). */
static vt_tensor produced(const vt_tensor *x5, vt_dtype cdt, int64_t M, int64_t K) {
    int64_t sz[2] = {M, K}, st[2] = {K, 1};
    return vt_conv_tensor(x5->data, cdt, 2, sz, st, 0);
}

/* ------------------------------------------------------------ forward */

vt_status vt_conv_rows_forward(const vt_conv_geom *g, const vt_tensor *out, const vt_tensor *input,
                               const vt_tensor *weight, const vt_tensor *bias, vt_precision prec) {
    const char *fn = "vt_conv_forward";
    vt_dtype cdt = vt_conv_col_dtype(g->dtype), adt = vt_conv_acc_dtype(g->dtype);
    vt_precision mp = vt_conv_product_precision(g->dtype, prec);
    vt_tensor x5 = vt_conv_view5(input, g->spatial), y5 = vt_conv_view5(out, g->spatial),
              w5 = vt_conv_view5(weight, g->spatial);
    int64_t K = g->k_prod * g->Cg, Z = g->out_prod, xrs = 0, yrs = 0;
    int no_col = input_is_col(g, &x5, cdt, &xrs);
    int64_t nb = no_col ? g->N : vt_conv_chunk_images(g, cdt);
    /* the MXU writes the output itself when its rows lie so, in its dtype or f32 */
    int direct = (out->dtype == cdt || out->dtype == VT_F32) && rows_of(&y5, &yrs);
    wmat wm;
    vt_status s = weight_rows(g, &w5, cdt, fn, &wm);
    void *ybuf = NULL;
    if (s == VT_OK && !direct) ybuf = vt_conv_scratch(nb * Z * g->O, adt, fn, "output buffer", &s);
    for (int64_t n0 = 0; s == VT_OK && n0 < g->N; n0 += nb) {
        int64_t nbc = g->N - n0 < nb ? g->N - n0 : nb, M = nbc * Z;
        /* per group: out_g[M, Og] = col_g[M, K] @ W_g^T[K, Og] */
        int64_t bs[3] = {g->G, K, g->Og}, bst[3] = {g->Og * wm.row, wm.col, wm.row};
        vt_tensor b = vt_conv_tensor((void *)wm.data, cdt, 3, bs, bst, wm.offset);
        int64_t os[3] = {g->G, M, g->Og};
        vt_tensor bv, o;
        if (bias) {
            int64_t bsz[3] = {g->G, 1, g->Og}, bstr[3] = {g->Og * bias->strides[0], 0, bias->strides[0]};
            bv = vt_conv_tensor(bias->data, bias->dtype, 3, bsz, bstr, bias->offset);
        }
        if (direct) {
            int64_t ost[3] = {g->Og * y5.strides[1], yrs, y5.strides[1]};
            o = vt_conv_tensor(out->data, out->dtype, 3, os, ost, out->offset + n0 * y5.strides[0]);
        } else {
            int64_t ost[3] = {g->Og, g->O, 1};
            o = vt_conv_tensor(ybuf, adt, 3, os, ost, 0);
        }
        if (no_col) {
            int64_t as[3] = {g->G, M, K}, ast[3] = {g->Cg, xrs, 1};
            vt_tensor a = vt_conv_tensor(x5.data, cdt, 3, as, ast, x5.offset + n0 * x5.strides[0]);
            s = vt_matmul_f32_out(&o, &a, &b, bias ? &bv : NULL, 1.0, 1.0, mp);
        }
        for (int64_t gi = 0; !no_col && s == VT_OK && gi < g->G; gi++) {
            row_source src = {g, &x5, cdt, n0 * Z, gi};
            vt_mxu_rows rows = {source_row, &src};
            vt_tensor a2 = produced(&x5, cdt, M, K), b2 = group_slice(&b, gi), o2 = group_slice(&o, gi);
            vt_tensor bv2 = bias ? group_slice(&bv, gi) : o2;
            s = vt_matmul_rows(&o2, &a2, &rows, &b2, NULL, bias ? &bv2 : NULL, 1.0, 1.0, mp);
        }
        if (s == VT_OK && !direct) { /* rows [M, O] back into the output's layout, rounded once */
            vt_tensor dst = y5;
            dst.offset += n0 * y5.strides[0];
            dst.sizes[0] = nbc;
            int64_t st[5] = {Z * g->O, 1, g->out[1] * g->out[2] * g->O, g->out[2] * g->O, g->O};
            vt_tensor src = vt_conv_tensor(ybuf, adt, 5, dst.sizes, st, 0);
            s = vt_copy(&dst, &src);
        }
    }
    free(ybuf);
    free(wm.owned);
    return s;
}

/* ------------------------------------------------------------ input gradient */

/* Strided (or over-padded) input gradients: stride 1 runs as a forward
 * convolution (conv.c). */
vt_status vt_conv_rows_backward_input(const vt_conv_geom *g, const vt_tensor *grad_input, const vt_tensor *grad_out,
                                      const vt_tensor *weight, vt_precision prec) {
    const char *fn = "vt_conv_backward_input";
    vt_dtype cdt = vt_conv_col_dtype(g->dtype), adt = vt_conv_acc_dtype(g->dtype);
    vt_precision mp = vt_conv_product_precision(g->dtype, prec);
    vt_tensor x5 = vt_conv_view5(grad_input, g->spatial), y5 = vt_conv_view5(grad_out, g->spatial),
              w5 = vt_conv_view5(weight, g->spatial);
    int64_t K = g->k_prod * g->Cg, Z = g->out_prod, nb = vt_conv_chunk_images(g, adt), yrs0;
    int packed_out = !(grad_out->dtype == cdt && rows_of(&y5, &yrs0));
    wmat wm;
    vt_status s = weight_rows(g, &w5, cdt, fn, &wm);
    void *col = NULL, *gbuf = NULL;
    if (s == VT_OK) col = vt_conv_scratch(nb * Z * g->G * K, adt, fn, "column buffer", &s);
    if (s == VT_OK && packed_out) gbuf = vt_conv_scratch(nb * Z * g->O, cdt, fn, "packed grad_output", &s);
    for (int64_t n0 = 0; s == VT_OK && n0 < g->N; n0 += nb) {
        int64_t nbc = g->N - n0 < nb ? g->N - n0 : nb, M = nbc * Z, yoff, yrs, ycs;
        const void *ydata;
        s = out_rows(g, &y5, cdt, n0, nbc, gbuf, &ydata, &yoff, &yrs, &ycs);
        if (s != VT_OK) break;
        /* per group: col_g[M, K] = grad_out_g[M, Og] @ W_g[Og, K] */
        int64_t as[3] = {g->G, M, g->Og}, ast[3] = {g->Og * ycs, yrs, ycs};
        vt_tensor a = vt_conv_tensor((void *)ydata, cdt, 3, as, ast, yoff);
        int64_t bs[3] = {g->G, g->Og, K}, bst[3] = {g->Og * wm.row, wm.row, wm.col};
        vt_tensor b = vt_conv_tensor((void *)wm.data, cdt, 3, bs, bst, wm.offset);
        int64_t os[3] = {g->G, M, K}, ost[3] = {K, g->G * K, 1};
        vt_tensor o = vt_conv_tensor(col, adt, 3, os, ost, 0);
        s = vt_matmul_f32_out(&o, &a, &b, NULL, 1.0, 0.0, mp);
        if (s != VT_OK) break;
        row_job j = {g, &x5, adt, col, g->G * K, n0 * Z, 0};
        vt_parallel_for(nbc * g->in_prod, ROW_GRAIN, row2im_range, &j);
        if (atomic_load(&j.oom)) s = vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: out of host memory for scratch", fn);
    }
    free(gbuf);
    free(col);
    free(wm.owned);
    return s;
}

/* ------------------------------------------------------------ weight gradient */

vt_status vt_conv_rows_backward_weight(const vt_conv_geom *g, const vt_tensor *grad_weight,
                                       const vt_tensor *grad_out, const vt_tensor *input, vt_precision prec) {
    const char *fn = "vt_conv_backward_weight";
    vt_dtype cdt = vt_conv_col_dtype(g->dtype), adt = vt_conv_acc_dtype(g->dtype);
    vt_precision mp = vt_conv_product_precision(g->dtype, prec);
    vt_tensor x5 = vt_conv_view5(input, g->spatial), y5 = vt_conv_view5(grad_out, g->spatial),
              w5 = vt_conv_view5(grad_weight, g->spatial);
    int64_t K = g->k_prod * g->Cg, Z = g->out_prod, xrs = 0, yrs0;
    int no_col = input_is_col(g, &x5, cdt, &xrs);
    int64_t nb = no_col ? g->N : vt_conv_chunk_images(g, cdt);
    int packed_out = !(grad_out->dtype == cdt && rows_of(&y5, &yrs0));
    /* the f32 (f64) sum over chunks, [G][Og][K]; rounded once into grad_weight */
    vt_status s = VT_OK;
    void *gbuf = NULL, *wacc = vt_conv_scratch(g->O * K, adt, fn, "weight accumulator", &s);
    if (s == VT_OK && packed_out) gbuf = vt_conv_scratch(nb * Z * g->O, cdt, fn, "packed grad_output", &s);
    int64_t ws[3] = {g->G, g->Og, K}, wst[3] = {g->Og * K, K, 1};
    vt_tensor acc = vt_conv_tensor(wacc, adt, 3, ws, wst, 0);
    for (int64_t n0 = 0; s == VT_OK && n0 < g->N; n0 += nb) {
        int64_t nbc = g->N - n0 < nb ? g->N - n0 : nb, M = nbc * Z, yoff, yrs, ycs;
        const void *ydata;
        s = out_rows(g, &y5, cdt, n0, nbc, gbuf, &ydata, &yoff, &yrs, &ycs);
        if (s != VT_OK) break;
        /* per group: dW_g[Og, K] += grad_out_g^T[Og, M] @ col_g[M, K] */
        int64_t as[3] = {g->G, g->Og, M}, ast[3] = {g->Og * ycs, ycs, yrs};
        vt_tensor a = vt_conv_tensor((void *)ydata, cdt, 3, as, ast, yoff);
        if (no_col && g->Og > K) {
            /* dW_g^T[K, Og] = col_g^T[K, M] @ grad_out_g[M, Og] into the
             * same accumulator seen transposed: the operand packed column
             * by column is then the narrower one (a 1x1 widening 16 -> 96
             * channels packed 16 columns of every position, not 96) */
            int64_t ts[3] = {g->G, K, M}, tst[3] = {g->Cg, 1, xrs};
            vt_tensor xt = vt_conv_tensor(x5.data, cdt, 3, ts, tst, x5.offset + n0 * x5.strides[0]);
            int64_t ys[3] = {g->G, M, g->Og}, yst[3] = {g->Og * ycs, yrs, ycs};
            vt_tensor y = vt_conv_tensor((void *)ydata, cdt, 3, ys, yst, yoff);
            int64_t os[3] = {g->G, K, g->Og}, ost[3] = {g->Og * K, 1, K};
            vt_tensor acct = vt_conv_tensor(wacc, adt, 3, os, ost, 0);
            s = vt_matmul_f32_out(&acct, &xt, &y, n0 ? &acct : NULL, 1.0, n0 ? 1.0 : 0.0, mp);
        } else if (no_col) {
            int64_t bs[3] = {g->G, M, K}, bst[3] = {g->Cg, xrs, 1};
            vt_tensor b = vt_conv_tensor(x5.data, cdt, 3, bs, bst, x5.offset + n0 * x5.strides[0]);
            s = vt_matmul_f32_out(&acc, &a, &b, n0 ? &acc : NULL, 1.0, n0 ? 1.0 : 0.0, mp);
        }
        for (int64_t gi = 0; !no_col && s == VT_OK && gi < g->G; gi++) {
            row_source src = {g, &x5, cdt, n0 * Z, gi};
            vt_mxu_rows rows = {source_row, &src};
            vt_tensor a2 = group_slice(&a, gi), b2 = produced(&x5, cdt, M, K), acc2 = group_slice(&acc, gi);
            s = vt_matmul_rows(&acc2, &a2, NULL, &b2, &rows, n0 ? &acc2 : NULL, 1.0, n0 ? 1.0 : 0.0, mp);
        }
    }
    if (s == VT_OK) { /* [O][tap][Cg] into the weight's layout */
        int64_t st[5] = {K, 1, g->k[1] * g->k[2] * g->Cg, g->k[2] * g->Cg, g->Cg};
        vt_tensor all = vt_conv_tensor(wacc, adt, 5, w5.sizes, st, 0);
        s = vt_copy(&w5, &all);
    }
    free(gbuf);
    free(wacc);
    return s;
}
