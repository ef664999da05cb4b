/* conv.c — the convolution drivers: forward, input gradient and weight
 * gradient as im2col / col2im around vt_matmul, so every product has the
 * MXU's numerics at the caller's precision. Images go through in chunks
 * whose column buffer fits VT_CONV_COL_BYTES; each chunk is one (batched) vt_matmul. */
#include <stdlib.h>

#include "kernels/conv/conv.h"


/* Columns are in vt_conv_col_dtype (bf16 data moves as bf16), the
 * products' sums in vt_conv_acc_dtype: col2im and the weight gradient's
 * chunks sum in f32 and round once. */

vt_tensor vt_conv_tensor(void *data, vt_dtype dt, int ndim, const int64_t *sizes, const int64_t *strides,
                             int64_t offset) {
    vt_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dt;
    t.ndim = ndim;
    t.offset = offset;
    for (int d = 0; d < ndim; d++) t.sizes[d] = sizes[d], t.strides[d] = strides[d];
    return t;
}

/* Contiguous row-major strides of a shape. */
void vt_conv_contiguous(int ndim, const int64_t *sizes, int64_t *strides) {
    int64_t n = 1;
    for (int d = ndim - 1; d >= 0; d--) strides[d] = n, n *= sizes[d];
}

/* 1 if dims [0, n) of (sizes, strides) step as one flat dim; *stride gets
 * its step (1 when every dim has size 1). */
int vt_conv_merge_dims(int n, const int64_t *sizes, const int64_t *strides, int64_t *stride) {
    int64_t want = 0;
    int have = 0;
    for (int d = n - 1; d >= 0; d--) {
        if (sizes[d] == 1) continue;
        if (!have) {
            *stride = strides[d];
            want = strides[d] * sizes[d];
            have = 1;
        } else {
            if (strides[d] != want) return 0;
            want *= sizes[d];
        }
    }
    if (!have) *stride = 1;
    return 1;
}

/* Host scratch, refused up front over the machine's physical memory. */
void *vt_conv_scratch(int64_t elems, vt_dtype dt, const char *fn, const char *what, vt_status *s) {
    double bytes = (double)elems * (double)vt_dtype_size(dt);
    void *p = vt_exceeds_host_memory(bytes) ? NULL : malloc((size_t)(elems > 0 ? elems : 1) * vt_dtype_size(dt));
    if (!p) *s = vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: cannot allocate %.0f bytes for the %s", fn, bytes, what);
    return p;
}

/* Images per chunk: as many as fit VT_CONV_COL_BYTES, at least one. */
int64_t vt_conv_chunk_images(const vt_conv_geom *g, vt_dtype ct) {
    double per = (double)g->C * (double)g->k_prod * (double)g->out_prod * (double)vt_dtype_size(ct);
    int64_t nb = per <= 0 ? g->N : (int64_t)((double)VT_CONV_COL_BYTES / per);
    if (nb < 1) nb = 1;
    return nb < g->N ? nb : g->N;
}

/* The weight as an [O, Cg * k_prod] matrix of the compute dtype: a view of
 * the caller's tensor when it already is one, else a packed copy (*owned). */
typedef struct weight_matrix {
    vt_tensor t;      /* the viewed data, dims as the weight */
    int64_t row_stride, col_stride; /* in elements */
    void *owned;
} weight_matrix;

static vt_status weight_as_matrix(const vt_tensor *w, vt_dtype ct, const char *fn, weight_matrix *m) {
    memset(m, 0, sizeof *m);
    m->t = *w;
    m->row_stride = w->strides[0];
    if (w->dtype == ct && vt_conv_merge_dims(w->ndim - 1, w->sizes + 1, w->strides + 1, &m->col_stride)) return VT_OK;
    vt_status s = VT_OK;
    int64_t strides[VT_MAX_DIMS];
    vt_conv_contiguous(w->ndim, w->sizes, strides);
    m->owned = vt_conv_scratch(vt_tensor_numel(w), ct, fn, "packed weight", &s);
    if (!m->owned) return s;
    m->t = vt_conv_tensor(m->owned, ct, w->ndim, w->sizes, strides, 0);
    s = vt_copy(&m->t, w);
    m->row_stride = strides[0];
    m->col_stride = 1;
    return s;
}

/* Zero a tensor (results of empty reductions). */
static vt_status zero_fill(const vt_tensor *t) { return vt_fill(t, vt_scalar_from_double(0.0)); }

/* ------------------------------------------------------------ forward */

typedef struct finish_job {
    const vt_conv_geom *g;
    const vt_tensor *y5, *bias;
    const char *buf; /* [O][ld] of ct: image b's positions at b * out_prod */
    vt_dtype ct;
    int64_t n0, ld;
} finish_job;

static double load_one(const vt_tensor *t, int64_t off) {
    double d;
    vt_convert(t->dtype, (const char *)t->data + off * (int64_t)vt_dtype_size(t->dtype), 1, VT_F64, &d, 1, 1);
    return d;
}

/* out = product + bias, rounded once to out's dtype (the product is the
 * MXU's f32 sum; the addition is in double, as vt_matmul's epilogue). */
static void finish_rows(void *ctx, int64_t begin, int64_t end) {
    const finish_job *j = ctx;
    const vt_conv_geom *g = j->g;
    const vt_tensor *y = j->y5;
    size_t es = vt_dtype_size(y->dtype);
    for (int64_t r = begin; r < end; r++) {
        int64_t b = r / g->O, o = r % g->O;
        double bias = j->bias ? load_one(j->bias, j->bias->offset + o * j->bias->strides[0]) : 0.0;
        const float *pf = (const float *)j->buf + o * j->ld + b * g->out_prod;
        const double *pd = (const double *)j->buf + o * j->ld + b * g->out_prod;
        int64_t z = 0;
        for (int64_t z0 = 0; z0 < g->out[0]; z0++)
            for (int64_t z1 = 0; z1 < g->out[1]; z1++) {
                char *dst = (char *)y->data + (y->offset + (j->n0 + b) * y->strides[0] + o * y->strides[1] +
                                               z0 * y->strides[2] + z1 * y->strides[3]) * (int64_t)es;
                int64_t step = y->strides[4] * (int64_t)es;
                if (j->ct == VT_F32 && y->dtype == VT_F32 && step == 4) { /* the common case, vectorisable */
                    float *d = (float *)dst;
                    for (int64_t z2 = 0; z2 < g->out[2]; z2++) d[z2] = (float)((double)pf[z + z2] + bias);
                    z += g->out[2];
                    continue;
                }
                for (int64_t z2 = 0; z2 < g->out[2]; z2++, z++, dst += step) {
                    double v = (j->ct == VT_F64 ? pd[z] : (double)pf[z]) + bias;
                    switch (y->dtype) {
                    case VT_F64: memcpy(dst, &v, 8); break;
                    case VT_F32: { float f = (float)v; memcpy(dst, &f, 4); break; }
                    case VT_BF16: { uint16_t h = vt_mxu_f64_to_bf16(v); memcpy(dst, &h, 2); break; }
                    default: { uint16_t h = vt_mxu_f64_to_f16(v); memcpy(dst, &h, 2); break; }
                    }
                }
            }
    }
}

/* No input channels: every output is the bias (or 0), as PyTorch gives. */
static vt_status bias_only(const vt_tensor *out, const vt_tensor *bias, int spatial) {
    if (!bias) return zero_fill(out);
    int64_t sizes[4] = {bias->sizes[0], 1, 1, 1}, strides[4] = {bias->strides[0], 0, 0, 0};
    vt_tensor b = vt_conv_tensor(bias->data, bias->dtype, 1 + spatial, sizes, strides, bias->offset);
    return vt_copy(out, &b);
}

/* The im2col rows of one group over a chunk of images, as an MXU operand
 * produced row by row (vt_matmul_rows): row k is channel c0 + k / k_prod,
 * tap k % k_prod, over the chunk's output positions. */
typedef struct plane_source {
    const vt_conv_geom *g;
    const vt_tensor *x5;
    int64_t n0, nb, c0;
    vt_dtype ct;
} plane_source;

static void plane_row(void *ctx, int64_t k, void *dst) {
    const plane_source *s = ctx;
    vt_conv_im2col_row(s->g, s->x5, s->n0, s->nb, s->c0 + k / s->g->k_prod, k % s->g->k_prod, s->ct, dst);
}

/* Rows [r0, r1) of a plane source written out, ld elements each. */
typedef struct stored_rows {
    plane_source *src;
    char *buf;
    int64_t ld;
} stored_rows;

static void store_rows(void *ctx, int64_t r0, int64_t r1) {
    const stored_rows *j = ctx;
    const int64_t row_bytes = j->ld * (int64_t)vt_dtype_size(j->src->ct);
    for (int64_t r = r0; r < r1; r++) plane_row(j->src, r, j->buf + r * row_bytes);
}

/* Images per chunk: the packed columns (bf16 parts) and an f32 output
 * buffer of at most VT_CONV_COL_BYTES, at least one image. */
static int64_t chunk_outputs(const vt_conv_geom *g) {
    double per = (double)g->out_prod * (double)(g->C * g->k_prod * 2 + g->O * 4);
    int64_t nb = per <= 0 ? g->N : (int64_t)((double)VT_CONV_COL_BYTES / per);
    if (nb < 1) nb = 1;
    return nb < g->N ? nb : g->N;
}

vt_status vt_conv_forward(const vt_tensor *out, const vt_tensor *input, const vt_tensor *weight,
                          const vt_tensor *bias, const vt_conv_params *p, vt_precision prec) {
    const char *fn = "vt_conv_forward";
    vt_conv_geom g;
    vt_status s = vt_conv_check(VT_CONV_FORWARD, input, weight, out, bias, p, prec, &g);
    if (s != VT_OK || vt_tensor_numel(out) == 0) return s;
    if (g.Cg == 0) return bias_only(out, bias, g.spatial);
    if (vt_conv_dw_takes(&g)) return vt_conv_dw_forward(&g, out, input, weight, bias, prec);
#if VT_X86
    if (vt_conv_amx_takes(&g, prec)) return vt_conv_amx_forward(&g, out, input, weight, bias);
#endif
    if (vt_conv_rows_takes(&g, input, VT_CONV_FORWARD)) return vt_conv_rows_forward(&g, out, input, weight, bias, prec);
    vt_dtype ct = vt_conv_col_dtype(g.dtype), at = vt_conv_acc_dtype(g.dtype);
    vt_precision mp = vt_conv_product_precision(g.dtype, prec);
    vt_tensor x5 = vt_conv_view5(input, g.spatial), y5 = vt_conv_view5(out, g.spatial);
    /* Image by image when packing a group's weight costs no more than
     * packing the image's columns (Og <= Z): each product writes its
     * image's output itself when the positions lie as one dim, in its dtype
     * or f32. Small images (a late ResNet layer) go in chunks, so the
     * weight is packed once for all of them, through a buffer. */
    int64_t zs = 1, CgK = g.Cg * g.k_prod, Z = g.out_prod, nb = g.Og <= Z ? 1 : chunk_outputs(&g);
    int direct = nb == 1 && (out->dtype == ct || out->dtype == VT_F32) &&
                 vt_conv_merge_dims(3, y5.sizes + 2, y5.strides + 2, &zs) && zs == 1;
    /* Otherwise (chunks of images, or a channels-last out whose positions
     * are strided) without a bias, the products round their sums into a
     * buffer of out's dtype, [O][images][Z], and one tiled transposing copy
     * moves it into place (each of the product's own stores to a strided out
     * started a line: the ResNet stem's channels-last forward spent more
     * there than in its product). With a bias finish_rows adds it. */
    const int copy_out = !direct && !bias && (out->dtype == ct || out->dtype == VT_F32);
    const vt_dtype yt = copy_out ? out->dtype : at;

    /* A 1x1, stride-1, unpadded convolution image by image reads each
     * image's planes as the product's B where they lie: rows of positions,
     * one per channel (no rows built for it one call at a time). */
    int64_t xzs = 0;
    int plain_b = nb == 1 && g.k_prod == 1 && x5.dtype == ct &&
                  vt_conv_merge_dims(3, x5.sizes + 2, x5.strides + 2, &xzs) && xzs == 1;
    for (int d = 0; d < 3; d++) plain_b &= g.stride[d] == 1 && g.pad[d] == 0;

    weight_matrix wm;
    s = weight_as_matrix(weight, ct, fn, &wm);
    void *ybuf = NULL;
    if (s == VT_OK && !direct) ybuf = vt_conv_scratch(nb * g.O * Z, yt, fn, "output buffer", &s);
    for (int64_t n0 = 0; s == VT_OK && n0 < g.N; n0 += nb) {
        int64_t nbc = g.N - n0 < nb ? g.N - n0 : nb, ld = nbc * Z;
        /* per group: out_g[Og, nbc * Z] = W_g[Og, CgK] @ col_g[CgK, nbc * Z] */
        for (int64_t gi = 0; s == VT_OK && gi < g.G; gi++) {
            plane_source src = {&g, &x5, n0, nbc, gi * g.Cg, ct};
            vt_mxu_rows rows = {plane_row, &src};
            int64_t as[2] = {g.Og, CgK}, ast[2] = {wm.row_stride, wm.col_stride};
            vt_tensor a = vt_conv_tensor(wm.t.data, ct, 2, as, ast, wm.t.offset + gi * g.Og * wm.row_stride);
            int64_t bs[2] = {CgK, ld}, bst[2] = {plain_b ? x5.strides[1] : ld, 1};
            vt_tensor b = vt_conv_tensor(x5.data, ct, 2, bs, bst,
                                         plain_b ? x5.offset + n0 * x5.strides[0] + gi * g.Cg * x5.strides[1] : 0);
            const vt_mxu_rows *b_rows = plain_b ? NULL : &rows;
            int64_t os[2] = {g.Og, ld};
            if (direct) {
                int64_t ost[2] = {y5.strides[1], zs};
                vt_tensor o = vt_conv_tensor(out->data, out->dtype, 2, os, ost,
                                             out->offset + n0 * y5.strides[0] + gi * g.Og * y5.strides[1]);
                vt_tensor bv;
                if (bias) {
                    int64_t bsz[2] = {g.Og, 1}, bstr[2] = {bias->strides[0], 0};
                    bv = vt_conv_tensor(bias->data, bias->dtype, 2, bsz, bstr,
                                        bias->offset + gi * g.Og * bias->strides[0]);
                }
                s = vt_matmul_rows(&o, &a, NULL, &b, b_rows, bias ? &bv : NULL, 1.0, 1.0, mp);
            } else {
                int64_t ost[2] = {ld, 1};
                vt_tensor o = vt_conv_tensor(ybuf, yt, 2, os, ost, gi * g.Og * ld);
                s = vt_matmul_rows(&o, &a, NULL, &b, b_rows, NULL, 1.0, 0.0, mp);
            }
        }
        if (s == VT_OK && copy_out) {
            int64_t st[5] = {Z, ld, g.out[1] * g.out[2], g.out[2], 1};
            vt_tensor dst = y5, src = vt_conv_tensor(ybuf, yt, 5, y5.sizes, st, 0);
            dst.offset += n0 * y5.strides[0];
            dst.sizes[0] = src.sizes[0] = nbc;
            s = vt_copy(&dst, &src);
        } else if (s == VT_OK && !direct) {
            finish_job fj = {&g, &y5, bias, ybuf, at, n0, ld};
            vt_parallel_for(nbc * g.O, Z >= 4096 ? 1 : 4096 / Z + 1, finish_rows, &fj);
        }
    }
    free(ybuf);
    free(wm.owned);
    return s;
}

/* ------------------------------------------------------------ input gradient */

/* Images [n0, n0+nb) of an output-shaped tensor as [nb, G, Og, Z] of ct: a
 * view when its spatial dims are one flat dim, else a packed copy in buf. */
static vt_status out_groups(const vt_conv_geom *g, const vt_tensor *y5, vt_dtype ct, int64_t n0, int64_t nb,
                            void *buf, vt_tensor *v) {
    int64_t Z = g->out_prod, zs = 1;
    int64_t sz[4] = {nb, g->G, g->Og, Z};
    if (y5->dtype == ct && vt_conv_merge_dims(3, y5->sizes + 2, y5->strides + 2, &zs)) {
        int64_t st[4] = {y5->strides[0], g->Og * y5->strides[1], y5->strides[1], zs};
        *v = vt_conv_tensor(y5->data, ct, 4, sz, st, y5->offset + n0 * y5->strides[0]);
        return VT_OK;
    }
    vt_tensor src = *y5;
    src.offset += n0 * y5->strides[0];
    src.sizes[0] = nb;
    vt_tensor dst = src;
    dst.data = buf;
    dst.dtype = ct;
    dst.offset = 0;
    vt_conv_contiguous(5, dst.sizes, dst.strides);
    int64_t st[4] = {g->O * Z, g->Og * Z, Z, 1};
    *v = vt_conv_tensor(buf, ct, 4, sz, st, 0);
    return vt_copy(&dst, &src);
}

/* With stride 1, the input gradient is itself a convolution: of grad_out,
 * padded by dil * (k - 1) - pad, with the weight's input and output
 * channels swapped (per group) and its taps reversed. Run as a forward
 * convolution it needs no column buffer and no col2im, and its sums are
 * one MXU reduction over (output channel, tap). 0 when it does not apply
 * (a stride, or padding wider than the window). */
static int input_grad_is_conv(const vt_conv_geom *g, vt_conv_params *tp) {
    memset(tp, 0, sizeof *tp);
    tp->spatial = g->spatial;
    tp->groups = g->G;
    for (int i = 0; i < g->spatial; i++) {
        int d = 3 - g->spatial + i; /* the geometry's padded dim */
        int64_t pad = g->dil[d] * (g->k[d] - 1) - g->pad[d];
        if (g->stride[d] != 1 || pad < 0) return 0;
        tp->stride[i] = 1, tp->padding[i] = pad, tp->dilation[i] = g->dil[d];
    }
    return 1;
}

/* The weight seen from grad_out: w'[g*Cg + c, o, t] = w[g*Og + o, c, k - 1 - t]
 * in a scratch buffer (*buf, which the caller frees), laid out as grad_out
 * is (channels innermost when it has them) so the drivers view it, as a
 * weight-shaped [C, Og, *k] tensor. */
static vt_status transposed_weight(const vt_conv_geom *g, const vt_tensor *grad_out, const vt_tensor *weight,
                                   vt_tensor *wt, void **buf) {
    vt_tensor w5 = vt_conv_view5(weight, g->spatial), y5 = vt_conv_view5(grad_out, g->spatial);
    int64_t sz[6] = {g->G, g->Cg, g->Og, g->k[0], g->k[1], g->k[2]};
    int64_t st[6] = {g->Og * w5.strides[0], w5.strides[1], w5.strides[0], -w5.strides[2], -w5.strides[3],
                     -w5.strides[4]};
    int64_t off = w5.offset + (g->k[0] - 1) * w5.strides[2] + (g->k[1] - 1) * w5.strides[3] +
                  (g->k[2] - 1) * w5.strides[4];
    vt_tensor src = vt_conv_tensor(w5.data, w5.dtype, 6, sz, st, off);
    int last = y5.strides[1] == 1 && g->O > 1;
    int64_t K = g->k_prod, Og = g->Og;
    int64_t dst6[6] = {g->Cg * Og * K, Og * K, K, g->k[1] * g->k[2], g->k[2], 1};
    int64_t dst6l[6] = {g->Cg * Og * K, Og * K, 1, g->k[1] * g->k[2] * Og, g->k[2] * Og, Og};
    vt_status s = VT_OK;
    *buf = vt_conv_scratch(g->C * Og * K, weight->dtype, "vt_conv_backward_input", "transposed weight", &s);
    if (!*buf) return s;
    vt_tensor dst = vt_conv_tensor(*buf, weight->dtype, 6, sz, last ? dst6l : dst6, 0);
    s = vt_copy(&dst, &src);
    /* the same memory as the weight-shaped [C, Og, *k] tensor */
    *wt = *weight;
    wt->data = *buf, wt->offset = 0;
    wt->sizes[0] = g->C, wt->sizes[1] = Og;
    wt->strides[0] = Og * K, wt->strides[1] = last ? 1 : K;
    for (int i = 0; i < g->spatial; i++) {
        int d = 3 - g->spatial + i;
        wt->strides[2 + i] = last ? dst6l[3 + d] : dst6[3 + d];
    }
    return s;
}

static vt_status input_grad_as_conv(const vt_conv_geom *g, const vt_conv_params *tp, const vt_tensor *grad_input,
                                    const vt_tensor *grad_out, const vt_tensor *weight, vt_precision prec) {
    vt_tensor wt;
    void *buf = NULL;
    vt_status s = transposed_weight(g, grad_out, weight, &wt, &buf);
    if (s == VT_OK) s = vt_conv_forward(grad_input, grad_out, &wt, NULL, tp, prec);
    free(buf);
    return s;
}

/* With a stride (and no dilation), input position i = s*m + r of phase r
 * (in each dim) gets its sums from the taps k = q + s*j, q = (r + pad) mod
 * s, through outputs o = m + c - j, c = (r + pad - q) / s: a stride-1
 * convolution of grad_out with the phase's sub-kernel (its J taps,
 * reversed), written into grad_input's phase-r positions (a view stepping
 * s). s^spatial convolutions of 1/s^spatial the work each: no column
 * buffer and no col2im. Every phase reads a window of grad_out with no
 * padding of its own, so its output is exactly the phase's M positions:
 * where some window reaches past grad_out, grad_out is copied once into a
 * buffer with zero borders and those phases read that. A phase with no taps
 * (a kernel narrower than the stride) is zero. Taken from 16 input
 * channels. */
int vt_conv_input_grad_by_phases(const vt_conv_geom *g) {
    /* the phases' outputs are the input's channels: fewer than 16 (an RGB
     * stem) would leave the product tiles mostly empty, and col2im's
     * scatter is cheap there */
    if (g->C < 16) return 0;
    int strided = 0;
    for (int d = 0; d < 3; d++) {
        if (g->dil[d] != 1) return 0;
        strided |= g->stride[d] > 1;
    }
    return strided;
}

typedef struct phase_dim {
    int64_t J, c, M; /* taps, output shift, input positions of the phase */
    int64_t first;   /* the sub-kernel's first tap in the transposed (reversed) weight */
} phase_dim;

static phase_dim phase_of(const vt_conv_geom *g, int d, int64_t r) {
    const int64_t s = g->stride[d], p = g->pad[d], K = g->k[d], q = (r + p) % s;
    phase_dim f;
    f.J = q < K ? (K - q + s - 1) / s : 0;
    f.c = (r + p - q) / s;
    f.M = r < g->in[d] ? (g->in[d] - r + s - 1) / s : 0;
    f.first = f.J ? K - 1 - q - s * (f.J - 1) : 0;
    return f;
}

/* A 5-d view [A, B, s0, s1, s2] back at 2 + spatial dims. */
static vt_tensor view_nd(vt_tensor t5, int spatial) {
    vt_tensor t = t5;
    t.ndim = 2 + spatial;
    for (int i = 0; i < spatial; i++) {
        t.sizes[2 + i] = t5.sizes[5 - spatial + i];
        t.strides[2 + i] = t5.strides[5 - spatial + i];
    }
    return t;
}

static vt_status input_grad_phases(const vt_conv_geom *g, const vt_tensor *grad_input, const vt_tensor *grad_out,
                                   const vt_tensor *weight, vt_precision prec) {
    const char *fn = "vt_conv_backward_input";
    vt_tensor x5 = vt_conv_view5(grad_input, g->spatial), y5 = vt_conv_view5(grad_out, g->spatial);
    /* the borders every phase's window needs */
    int64_t lo[3] = {0, 0, 0}, hi[3] = {0, 0, 0}, E[3];
    for (int d = 0; d < 3; d++) {
        for (int64_t r = 0; r < g->stride[d]; r++) {
            phase_dim f = phase_of(g, d, r);
            if (!f.J || !f.M) continue;
            if (f.J - 1 - f.c > lo[d]) lo[d] = f.J - 1 - f.c;
            if (f.c + f.M - g->out[d] > hi[d]) hi[d] = f.c + f.M - g->out[d];
        }
        E[d] = lo[d] + g->out[d] + hi[d];
    }
    int bordered = 0;
    for (int d = 0; d < 3; d++) bordered |= lo[d] > 0 || hi[d] > 0;
    vt_tensor wt;
    void *wbuf = NULL, *ybuf = NULL, *xbuf = NULL;
    vt_status s = transposed_weight(g, grad_out, weight, &wt, &wbuf);
    if (s == VT_OK && bordered)
        ybuf = vt_conv_scratch(g->N * g->O * E[0] * E[1] * E[2], grad_out->dtype, fn, "bordered grad_output", &s);
    /* grad_input without its channels innermost (NCHW): the phases write a
     * channels-last buffer, where each phase position takes a whole run of
     * channels (NCHW would have its values s apart along the rows), then
     * one copy (a transpose in tiles) lays it out as grad_input */
    const vt_tensor x5_out = x5;
    if (s == VT_OK && x5.strides[1] != 1 && g->C > 1) {
        xbuf = vt_conv_scratch(g->N * g->C * g->in_prod, grad_input->dtype, fn, "channels-last grad_input", &s);
        int64_t xsz[5] = {g->N, g->C, g->in[0], g->in[1], g->in[2]};
        int64_t xst[5] = {g->in_prod * g->C, 1, g->in[1] * g->in[2] * g->C, g->in[2] * g->C, g->C};
        x5 = vt_conv_tensor(xbuf, grad_input->dtype, 5, xsz, xst, 0);
    }
    if (s != VT_OK) goto done;
    /* the bordered grad_out, channels innermost when grad_out has them */
    int64_t ysz[5] = {g->N, g->O, E[0], E[1], E[2]}, yst[5];
    vt_conv_contiguous(5, ysz, yst);
    if (y5.strides[1] == 1 && g->O > 1) yst[4] = g->O, yst[3] = E[2] * g->O, yst[2] = E[1] * yst[3], yst[1] = 1;
    vt_tensor yb = vt_conv_tensor(ybuf, grad_out->dtype, 5, ysz, yst, 0);
    if (bordered) {
        memset(ybuf, 0, (size_t)(g->N * g->O * E[0] * E[1] * E[2]) * vt_dtype_size(grad_out->dtype));
        vt_tensor inner = yb;
        for (int d = 0; d < 3; d++) inner.sizes[2 + d] = g->out[d], inner.offset += lo[d] * yst[2 + d];
        vt_tensor inner_nd = view_nd(inner, g->spatial);
        s = vt_copy(&inner_nd, grad_out);
    }
    vt_tensor w5 = vt_conv_view5(&wt, g->spatial);
    vt_conv_params pp;
    memset(&pp, 0, sizeof pp);
    pp.spatial = g->spatial, pp.groups = g->G;
    for (int i = 0; i < g->spatial; i++) pp.stride[i] = 1, pp.dilation[i] = 1;
    for (int64_t r0 = 0; s == VT_OK && r0 < g->stride[0]; r0++)
        for (int64_t r1 = 0; s == VT_OK && r1 < g->stride[1]; r1++)
            for (int64_t r2 = 0; s == VT_OK && r2 < g->stride[2]; r2++) {
                const int64_t r[3] = {r0, r1, r2};
                phase_dim f[3];
                int empty = 0, zero = 0, inside = 1;
                for (int d = 0; d < 3; d++) {
                    f[d] = phase_of(g, d, r[d]);
                    empty |= !f[d].M, zero |= !f[d].J;
                    inside &= f[d].c >= f[d].J - 1 && f[d].c + f[d].M <= g->out[d];
                }
                /* a window inside grad_out is read where it lies (a 1x1
                 * downsample's one phase: all of it) */
                vt_tensor out = x5, in = inside ? y5 : yb, w = w5;
                for (int d = 0; d < 3; d++) {
                    out.offset += r[d] * x5.strides[2 + d];
                    out.sizes[2 + d] = f[d].M, out.strides[2 + d] = g->stride[d] * x5.strides[2 + d];
                    in.offset += (f[d].c - (f[d].J - 1) + (inside ? 0 : lo[d])) * in.strides[2 + d];
                    in.sizes[2 + d] = f[d].M + f[d].J - 1;
                    w.offset += f[d].first * w5.strides[2 + d];
                    w.sizes[2 + d] = f[d].J, w.strides[2 + d] = g->stride[d] * w5.strides[2 + d];
                }
                if (empty) continue;
                vt_tensor o = view_nd(out, g->spatial), x = view_nd(in, g->spatial), k = view_nd(w, g->spatial);
                s = zero ? vt_fill(&o, vt_scalar_from_double(0.0)) : vt_conv_forward(&o, &x, &k, NULL, &pp, prec);
            }
    if (s == VT_OK && xbuf) s = vt_copy(&x5_out, &x5);
done:
    free(xbuf);
    free(ybuf);
    free(wbuf);
    return s;
}

vt_status vt_conv_backward_input(const vt_tensor *grad_input, const vt_tensor *grad_out, const vt_tensor *weight,
                                 const vt_conv_params *p, vt_precision prec) {
    const char *fn = "vt_conv_backward_input";
    vt_conv_geom g;
    vt_status s = vt_conv_check(VT_CONV_BACKWARD_INPUT, grad_input, weight, grad_out, NULL, p, prec, &g);
    if (s != VT_OK || vt_tensor_numel(grad_input) == 0) return s;
    if (g.Og == 0) return zero_fill(grad_input);
    vt_conv_params tp;
    if (input_grad_is_conv(&g, &tp)) return input_grad_as_conv(&g, &tp, grad_input, grad_out, weight, prec);
    if (vt_conv_dw_takes(&g)) return vt_conv_dw_backward_input(&g, grad_input, grad_out, weight, prec);
#if VT_X86
    if (vt_conv_amx_dgrad_takes(&g, prec)) {
        int declined;
        s = vt_conv_amx_backward_input(&g, grad_input, grad_out, weight, prec, &declined);
        if (s != VT_OK || !declined) return s;
    }
#endif
    if (vt_conv_input_grad_by_phases(&g)) return input_grad_phases(&g, grad_input, grad_out, weight, prec);
    if (vt_conv_rows_takes(&g, grad_input, VT_CONV_BACKWARD_INPUT))
        return vt_conv_rows_backward_input(&g, grad_input, grad_out, weight, prec);
    vt_dtype ct = vt_conv_col_dtype(g.dtype), at = vt_conv_acc_dtype(g.dtype);
    vt_precision mp = vt_conv_product_precision(g.dtype, prec);
    vt_tensor x5 = vt_conv_view5(grad_input, g.spatial), y5 = vt_conv_view5(grad_out, g.spatial);
    int64_t zs = 1, CgK = g.Cg * g.k_prod, Z = g.out_prod, nb = vt_conv_chunk_images(&g, at);
    int packed_out = !(grad_out->dtype == ct && vt_conv_merge_dims(3, y5.sizes + 2, y5.strides + 2, &zs));

    weight_matrix wm;
    s = weight_as_matrix(weight, ct, fn, &wm);
    void *col = NULL, *gbuf = NULL;
    if (s == VT_OK) col = vt_conv_scratch(g.C * g.k_prod * nb * Z, at, fn, "column buffer", &s);
    if (s == VT_OK && packed_out) gbuf = vt_conv_scratch(nb * g.O * Z, ct, fn, "packed grad_output", &s);
    for (int64_t n0 = 0; s == VT_OK && n0 < g.N; n0 += nb) {
        int64_t nbc = g.N - n0 < nb ? g.N - n0 : nb, ld = nbc * Z;
        /* Per (image, group): col_g[CgK, Z] = W_g^T[CgK, Og] @ grad_out_g[Og, Z]. */
        vt_tensor b;
        s = out_groups(&g, &y5, ct, n0, nbc, gbuf, &b);
        if (s != VT_OK) break;
        int64_t as[4] = {1, g.G, CgK, g.Og}, ast[4] = {0, g.Og * wm.row_stride, wm.col_stride, wm.row_stride};
        vt_tensor a = vt_conv_tensor(wm.t.data, ct, 4, as, ast, wm.t.offset);
        int64_t os[4] = {nbc, g.G, CgK, Z}, ost[4] = {Z, CgK * ld, ld, 1};
        vt_tensor o = vt_conv_tensor(col, at, 4, os, ost, 0);
        s = vt_matmul_f32_out(&o, &a, &b, NULL, 1.0, 0.0, mp);
        if (s == VT_OK) vt_conv_col2im(&g, &x5, n0, nbc, at, col, ld);
    }
    free(gbuf);
    free(col);
    free(wm.owned);
    return s;
}

/* ------------------------------------------------------------ weight gradient */

vt_status vt_conv_backward_weight(const vt_tensor *grad_weight, const vt_tensor *grad_out, const vt_tensor *input,
                                  const vt_conv_params *p, vt_precision prec) {
    const char *fn = "vt_conv_backward_weight";
    vt_conv_geom g;
    vt_status s = vt_conv_check(VT_CONV_BACKWARD_WEIGHT, input, grad_weight, grad_out, NULL, p, prec, &g);
    if (s != VT_OK || vt_tensor_numel(grad_weight) == 0) return s;
    if (g.N == 0) return zero_fill(grad_weight);
    if (vt_conv_dw_takes(&g)) return vt_conv_dw_backward_weight(&g, grad_weight, grad_out, input, prec);
#if VT_X86
    if (vt_conv_amx_wgrad_takes(&g, prec)) {
        int declined;
        s = vt_conv_amx_backward_weight(&g, grad_weight, grad_out, input, &declined);
        if (s != VT_OK || !declined) return s;
    }
#endif
    if (vt_conv_rows_takes(&g, input, VT_CONV_BACKWARD_WEIGHT))
        return vt_conv_rows_backward_weight(&g, grad_weight, grad_out, input, prec);
    vt_dtype ct = vt_conv_col_dtype(g.dtype), at = vt_conv_acc_dtype(g.dtype);
    vt_precision mp = vt_conv_product_precision(g.dtype, prec);
    vt_tensor x5 = vt_conv_view5(input, g.spatial), y5 = vt_conv_view5(grad_out, g.spatial);
    int64_t CgK = g.Cg * g.k_prod, Z = g.out_prod, nb = vt_conv_chunk_images(&g, ct);

    /* The f32 (f64) sum over chunks; rounded once into grad_weight. */
    void *gbuf = NULL, *abuf = NULL, *wacc = vt_conv_scratch(g.O * CgK, at, fn, "weight accumulator", &s);
    if (s == VT_OK) gbuf = vt_conv_scratch(nb * g.O * Z, ct, fn, "packed grad_output", &s);
    /* A narrow product over a long K (few channels and taps by few output
     * channels: a 1x1 layer's weight gradient) runs by K slices spread over
     * the cores, which the engine does from a stored A only: such a chunk's
     * columns are written out once, rows in parallel, instead of produced
     * as the one packing thread asks for them (a 64x64 gradient over 16
     * images of 32x32 ran on one core). At most the chunk's columns: the
     * chunk's size bounds them (vt_conv_chunk_images). */
    if (s == VT_OK && vt_mxu_splits_k(CgK, g.Og, nb * Z, ct, mp))
        abuf = vt_conv_scratch(CgK * nb * Z, ct, fn, "columns", &s);
    for (int64_t n0 = 0; s == VT_OK && n0 < g.N; n0 += nb) {
        int64_t nbc = g.N - n0 < nb ? g.N - n0 : nb, ld = nbc * Z;
        /* Per group, all images of the chunk in one product, transposed so
         * the im2col rows are produced as the packers want them:
         * dW_g^T[CgK, Og] += col_g[CgK, nbc*Z] @ grad_out_g^T[nbc*Z, Og].
         * grad_out is packed as [O][nbc][Z] so (image, position) is one K dim. */
        vt_tensor src = y5;
        src.offset += n0 * y5.strides[0];
        src.sizes[0] = nbc;
        vt_tensor dst = src;
        dst.data = gbuf;
        dst.dtype = ct;
        dst.offset = 0;
        vt_conv_contiguous(5, dst.sizes, dst.strides);
        dst.strides[0] = Z;
        dst.strides[1] = ld;
        s = vt_copy(&dst, &src);
        if (s != VT_OK) break;
        for (int64_t gi = 0; s == VT_OK && gi < g.G; gi++) {
            plane_source srcs = {&g, &x5, n0, nbc, gi * g.Cg, ct};
            vt_mxu_rows rows = {plane_row, &srcs};
            const int stored = abuf && vt_mxu_splits_k(CgK, g.Og, ld, ct, mp);
            if (stored) {
                stored_rows sr = {&srcs, abuf, ld};
                vt_parallel_for(CgK, 1, store_rows, &sr);
            }
            int64_t as[2] = {CgK, ld}, ast[2] = {ld, 1};
            vt_tensor a = vt_conv_tensor(stored ? abuf : x5.data, ct, 2, as, ast, 0);
            int64_t bs[2] = {ld, g.Og}, bst[2] = {1, ld};
            vt_tensor b = vt_conv_tensor(gbuf, ct, 2, bs, bst, gi * g.Og * ld);
            int64_t os[2] = {CgK, g.Og}, ost[2] = {1, CgK};
            vt_tensor o = vt_conv_tensor(wacc, at, 2, os, ost, gi * g.Og * CgK);
            s = vt_matmul_rows(&o, &a, stored ? NULL : &rows, &b, NULL, n0 ? &o : NULL, 1.0, n0 ? 1.0 : 0.0, mp);
        }
    }
    if (s == VT_OK) {
        vt_tensor all = vt_conv_tensor(wacc, at, grad_weight->ndim, grad_weight->sizes, grad_weight->strides, 0);
        vt_conv_contiguous(all.ndim, all.sizes, all.strides);
        s = vt_copy(grad_weight, &all);
    }
    free(gbuf);
    free(abuf);
    free(wacc);
    return s;
}
