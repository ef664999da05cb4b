/* conv_ref.c — scalar references for the convolution family: the defining
 * nested loops (no im2col, no matmul, no threads) over the same kept bf16
 * pass products vt_ref_matmul sums, in fp64, rounded once. Tests compare
 * the im2col + MXU drivers against these. */
#include "kernels/conv/conv.h"

/* (part of one operand, part of the other) per low pass; 0 hi, 1 mid, 2 lo. */
static const int passes_high[][2] = {{2, 0}, {0, 2}};
static const int passes_highest[][2] = {{1, 1}, {0, 2}, {2, 0}, {0, 1}, {1, 0}};

typedef struct ref_sum {
    vt_dtype dt;
    vt_precision prec;
    int npass;
    const int (*passes)[2];
    double low, hh, plain;
    int64_t terms;
} ref_sum;

static ref_sum ref_sum_init(vt_dtype dt, vt_precision prec) {
    ref_sum r;
    memset(&r, 0, sizeof r);
    r.dt = dt;
    r.prec = dt == VT_F32 ? prec : VT_PRECISION_DEFAULT;
    if (r.prec == VT_PRECISION_HIGH) r.passes = passes_high, r.npass = 2;
    if (r.prec == VT_PRECISION_HIGHEST) r.passes = passes_highest, r.npass = 5;
    r.low = r.hh = r.plain = 0.0; /* sums start at +0, as vt_matmul */
    return r;
}

static double ref_load(const vt_tensor *t, int64_t off) {
    double d;
    vt_convert(t->dtype, (const char *)t->data + off * (int64_t)vt_dtype_size(t->dtype), 1, VT_F64, &d, 1, 1);
    return d;
}

static void ref_parts(const ref_sum *r, const vt_tensor *t, int64_t off, double parts[3]) {
    uint32_t p[3] = {0, 0, 0};
    if (t->dtype == VT_F32) vt_mxu_split(((const float *)t->data)[off], r->prec, p);
    else p[0] = vt_mxu_rne_ftz(vt_mxu_bits((float)ref_load(t, off))); /* bf16 / f16: exact in f32 */
    for (int i = 0; i < 3; i++) parts[i] = (double)vt_mxu_float(p[i]);
}

static void ref_add(ref_sum *r, const vt_tensor *a, int64_t ao, const vt_tensor *b, int64_t bo) {
    r->terms++;
    if (r->dt == VT_F64) {
        r->plain += ref_load(a, ao) * ref_load(b, bo);
        return;
    }
    double pa[3], pb[3];
    ref_parts(r, a, ao, pa);
    ref_parts(r, b, bo, pb);
    for (int p = 0; p < r->npass; p++) r->low += pa[r->passes[p][0]] * pb[r->passes[p][1]];
    r->hh += pa[0] * pb[0];
}

static double ref_value(const ref_sum *r) {
    if (r->terms == 0) return 0.0;
    if (r->dt == VT_F64) return r->plain;
    if (!r->npass) return r->hh;
    return (isfinite(r->low) ? r->low : 0.0) + r->hh; /* the guard on the low passes */
}

static void ref_store(const vt_tensor *t, int64_t off, double v) {
    char *dst = (char *)t->data + off * (int64_t)vt_dtype_size(t->dtype);
    switch (t->dtype) {
    case VT_F64: memcpy(dst, &v, 8); break;
    case VT_F32: { float f = (float)v; memcpy(dst, &f, 4); break; }
    case VT_BF16: { uint16_t h = vt_mxu_f64_to_bf16(v); memcpy(dst, &h, 2); break; }
    default: { uint16_t h = vt_mxu_f64_to_f16(v); memcpy(dst, &h, 2); break; }
    }
}

static inline int64_t off5(const vt_tensor *t, int64_t a, int64_t b, const int64_t *s) {
    return t->offset + a * t->strides[0] + b * t->strides[1] + s[0] * t->strides[2] + s[1] * t->strides[3] +
           s[2] * t->strides[4];
}

/* Input position of output position z through kernel tap k; 0 if padding. */
static int tap(const vt_conv_geom *g, const int64_t *z, const int64_t *k, int64_t *i) {
    for (int d = 0; d < 3; d++) {
        i[d] = z[d] * g->stride[d] - g->pad[d] + k[d] * g->dil[d];
        if (i[d] < 0 || i[d] >= g->in[d]) return 0;
    }
    return 1;
}

/* Row-major walk over a 3-index box. */
static int next3(int64_t *v, const int64_t *n) {
    for (int d = 2; d >= 0; d--) {
        if (++v[d] < n[d]) return 1;
        v[d] = 0;
    }
    return 0;
}

vt_status vt_ref_conv_forward(const vt_tensor *out, const vt_tensor *input, const vt_tensor *weight,
                              const vt_tensor *bias, const vt_conv_params *p, vt_precision prec) {
    vt_conv_geom g;
    vt_status s = vt_conv_check(VT_CONV_FORWARD, input, weight, out, bias, p, prec, &g);
    if (s != VT_OK) return s;
    vt_tensor x = vt_conv_view5(input, g.spatial), w = vt_conv_view5(weight, g.spatial);
    vt_tensor y = vt_conv_view5(out, g.spatial);
    for (int64_t n = 0; n < g.N; n++)
        for (int64_t o = 0; o < g.O; o++) {
            int64_t z[3] = {0, 0, 0};
            do {
                ref_sum r = ref_sum_init(g.dtype, prec);
                for (int64_t c = 0; c < g.Cg; c++) {
                    int64_t k[3] = {0, 0, 0}, i[3];
                    do {
                        if (tap(&g, z, k, i))
                            ref_add(&r, &w, off5(&w, o, c, k), &x, off5(&x, n, (o / g.Og) * g.Cg + c, i));
                    } while (next3(k, g.k));
                }
                double v = ref_value(&r);
                if (bias) v += ref_load(bias, bias->offset + o * bias->strides[0]);
                ref_store(&y, off5(&y, n, o, z), v);
            } while (next3(z, g.out));
        }
    return VT_OK;
}

vt_status vt_ref_conv_backward_input(const vt_tensor *grad_input, const vt_tensor *grad_out,
                                     const vt_tensor *weight, const vt_conv_params *p, vt_precision prec) {
    vt_conv_geom g;
    vt_status s = vt_conv_check(VT_CONV_BACKWARD_INPUT, grad_input, weight, grad_out, NULL, p, prec, &g);
    if (s != VT_OK) return s;
    vt_tensor x = vt_conv_view5(grad_input, g.spatial), w = vt_conv_view5(weight, g.spatial);
    vt_tensor y = vt_conv_view5(grad_out, g.spatial);
    for (int64_t n = 0; n < g.N; n++)
        for (int64_t c = 0; c < g.C; c++) {
            int64_t i[3] = {0, 0, 0}, grp = c / g.Cg;
            do {
                ref_sum r = ref_sum_init(g.dtype, prec);
                for (int64_t o = grp * g.Og; o < (grp + 1) * g.Og; o++) {
                    int64_t k[3] = {0, 0, 0};
                    do {
                        /* z * stride = i + pad - k * dil, when that is a whole in-range z. */
                        int64_t z[3], ok = 1;
                        for (int d = 0; d < 3 && ok; d++) {
                            int64_t t = i[d] + g.pad[d] - k[d] * g.dil[d];
                            ok = t >= 0 && t % g.stride[d] == 0 && t / g.stride[d] < g.out[d];
                            z[d] = ok ? t / g.stride[d] : 0;
                        }
                        if (ok) ref_add(&r, &w, off5(&w, o, c % g.Cg, k), &y, off5(&y, n, o, z));
                    } while (next3(k, g.k));
                }
                ref_store(&x, off5(&x, n, c, i), ref_value(&r));
            } while (next3(i, g.in));
        }
    return VT_OK;
}

vt_status vt_ref_conv_backward_weight(const vt_tensor *grad_weight, const vt_tensor *grad_out,
                                      const vt_tensor *input, const vt_conv_params *p, vt_precision prec) {
    vt_conv_geom g;
    vt_status s = vt_conv_check(VT_CONV_BACKWARD_WEIGHT, input, grad_weight, grad_out, NULL, p, prec, &g);
    if (s != VT_OK) return s;
    vt_tensor x = vt_conv_view5(input, g.spatial), w = vt_conv_view5(grad_weight, g.spatial);
    vt_tensor y = vt_conv_view5(grad_out, g.spatial);
    for (int64_t o = 0; o < g.O; o++)
        for (int64_t c = 0; c < g.Cg; c++) {
            int64_t k[3] = {0, 0, 0};
            do {
                ref_sum r = ref_sum_init(g.dtype, prec);
                for (int64_t n = 0; n < g.N; n++) {
                    int64_t z[3] = {0, 0, 0}, i[3];
                    do {
                        if (tap(&g, z, k, i))
                            ref_add(&r, &y, off5(&y, n, o, z), &x, off5(&x, n, (o / g.Og) * g.Cg + c, i));
                    } while (next3(z, g.out));
                }
                ref_store(&w, off5(&w, o, c, k), ref_value(&r));
            } while (next3(k, g.k));
        }
    return VT_OK;
}
