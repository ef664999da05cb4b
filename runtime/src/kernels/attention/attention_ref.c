/* attention_ref.c — scalar references for scaled dot-product attention:
 * the whole score row in double, operands rounded as the precision rounds
 * the MXU's inputs, no tiling, no SIMD, no threads. What the tests compare
 * the tiled kernels against. */
#include <stdlib.h>

#include "attention.h"

static double elem(const vt_tensor *t, int64_t b, int64_t h, int64_t r, int64_t c) {
    int64_t off = t->offset + b * t->strides[0] + h * t->strides[1] + r * t->strides[2] + c * t->strides[3];
    const char *p = (const char *)t->data;
    switch (t->dtype) {
    case VT_F32: return ((const float *)p)[off];
    case VT_BF16: return vt_bf16_to_f32(((const uint16_t *)p)[off]);
    case VT_F16: return vt_f16_to_f32(((const uint16_t *)p)[off]);
    case VT_F64: return ((const double *)p)[off];
    case VT_BOOL: return ((const uint8_t *)p)[off] ? 0.0 : -INFINITY;
    default: {
        double d;
        vt_convert(t->dtype, p + off * (int64_t)vt_dtype_size(t->dtype), 1, VT_F64, &d, 1, 1);
        return d;
    }
    }
}

static void put(const vt_tensor *t, int64_t b, int64_t h, int64_t r, int64_t c, double v) {
    int64_t off = t->offset + b * t->strides[0] + h * t->strides[1] + r * t->strides[2] + c * t->strides[3];
    float f = (float)v;
    vt_convert(VT_F32, &f, 1, t->dtype, (char *)t->data + off * (int64_t)vt_dtype_size(t->dtype), 1, 1);
}

/* An MXU operand as the precision sees it: DEFAULT rounds to bf16 (RNE,
 * subnormals flushed); the split modes keep about f32. */
static double rnd(double x, vt_precision prec) {
    float f = (float)x;
    if (prec != VT_PRECISION_DEFAULT) return f;
    return vt_mxu_float(vt_mxu_rne_ftz(vt_mxu_bits(f)));
}

/* Row i of (b, h): P over the S keys into pr (normalised, double); returns
 * the log-sum-exp (-inf when every key is masked, pr all 0). */
static double prob_row(const vt_attn_problem *p, int64_t b, int64_t h, int64_t i, double *pr) {
    int64_t hk = h / (p->Hq / p->Hk);
    double m = -INFINITY;
    for (int64_t j = 0; j < p->S; j++) {
        if (p->causal && j > i) {
            pr[j] = -INFINITY;
            continue;
        }
        double s = 0.0;
        for (int64_t d = 0; d < p->D; d++)
            s += rnd(elem(&p->q, b, h, i, d), p->prec) * rnd(elem(&p->k, b, hk, j, d), p->prec);
        double x = (double)(float)s * p->scale;
        if (p->has_mask) x += elem(&p->mask, b, h, i, j);
        pr[j] = x;
        if (x > m || x != x) m = x;
    }
    if (m == -INFINITY) {
        for (int64_t j = 0; j < p->S; j++) pr[j] = 0.0;
        return -INFINITY;
    }
    double sum = 0.0;
    for (int64_t j = 0; j < p->S; j++) sum += (pr[j] = exp(pr[j] - m));
    for (int64_t j = 0; j < p->S; j++) pr[j] /= sum;
    return m + log(sum);
}

vt_status vt_ref_sdpa_forward(const vt_tensor *out, const vt_tensor *lse, const vt_tensor *q, const vt_tensor *k,
                              const vt_tensor *v, const vt_tensor *mask, double scale, int is_causal,
                              vt_precision prec) {
    vt_attn_problem p;
    vt_status s = vt_attn_setup(&p, "vt_ref_sdpa_forward", 0, out, lse, q, k, v, mask, NULL, NULL, NULL, NULL, scale,
                                is_causal, prec);
    if (s != VT_OK) return s;
    double *pr = malloc((size_t)(p.S + 1) * sizeof(double));
    if (!pr) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "vt_ref_sdpa_forward: out of memory");
    for (int64_t b = 0; b < p.B; b++)
        for (int64_t h = 0; h < p.Hq; h++)
            for (int64_t i = 0; i < p.L; i++) {
                int64_t hk = h / (p.Hq / p.Hk);
                double l = prob_row(&p, b, h, i, pr);
                put(&p.lse, b, h, i, 0, l);
                for (int64_t c = 0; c < p.Dv; c++) {
                    double acc = 0.0;
                    for (int64_t j = 0; j < p.S; j++) acc += rnd(pr[j], p.prec) * rnd(elem(&p.v, b, hk, j, c), p.prec);
                    put(&p.out, b, h, i, c, acc);
                }
            }
    free(pr);
    return VT_OK;
}

vt_status vt_ref_sdpa_backward(const vt_tensor *dq, const vt_tensor *dk, const vt_tensor *dv, const vt_tensor *dout,
                               const vt_tensor *q, const vt_tensor *k, const vt_tensor *v, const vt_tensor *mask,
                               const vt_tensor *out, const vt_tensor *lse, double scale, int is_causal,
                               vt_precision prec) {
    vt_attn_problem p;
    vt_status s = vt_attn_setup(&p, "vt_ref_sdpa_backward", 1, out, lse, q, k, v, mask, dout, dq, dk, dv, scale,
                                is_causal, prec);
    if (s != VT_OK) return s;
    int64_t nq = p.B * p.Hq * p.L * p.D, nk = p.B * p.Hk * p.S * p.D, nv = p.B * p.Hk * p.S * p.Dv;
    double *gq = calloc((size_t)nq + 1, sizeof(double)), *gk = calloc((size_t)nk + 1, sizeof(double));
    double *gv = calloc((size_t)nv + 1, sizeof(double)), *pr = malloc((size_t)(p.S + 1) * sizeof(double));
    if (!gq || !gk || !gv || !pr) {
        free(gq), free(gk), free(gv), free(pr);
        return vt_set_error(VT_ERR_OUT_OF_MEMORY, "vt_ref_sdpa_backward: out of memory");
    }
    vt_precision pc = p.prec;
    for (int64_t b = 0; b < p.B; b++)
        for (int64_t h = 0; h < p.Hq; h++) {
            int64_t hk = h / (p.Hq / p.Hk);
            for (int64_t i = 0; i < p.L; i++) {
                prob_row(&p, b, h, i, pr);
                double delta = 0.0;
                for (int64_t c = 0; c < p.Dv; c++)
                    delta += (double)(float)elem(&p.dout, b, h, i, c) * (double)(float)elem(&p.out, b, h, i, c);
                for (int64_t j = 0; j < p.S; j++) {
                    if (pr[j] == 0.0) continue;
                    double dpv = 0.0;
                    for (int64_t c = 0; c < p.Dv; c++)
                        dpv += rnd(elem(&p.dout, b, h, i, c), pc) * rnd(elem(&p.v, b, hk, j, c), pc);
                    double ds = pr[j] * (dpv - delta) * p.scale;
                    for (int64_t c = 0; c < p.Dv; c++)
                        gv[((b * p.Hk + hk) * p.S + j) * p.Dv + c] += rnd(pr[j], pc) * rnd(elem(&p.dout, b, h, i, c), pc);
                    for (int64_t d = 0; d < p.D; d++) {
                        gk[((b * p.Hk + hk) * p.S + j) * p.D + d] += rnd(ds, pc) * rnd(elem(&p.q, b, h, i, d), pc);
                        gq[((b * p.Hq + h) * p.L + i) * p.D + d] += rnd(ds, pc) * rnd(elem(&p.k, b, hk, j, d), pc);
                    }
                }
            }
        }
    for (int64_t b = 0; b < p.B; b++) {
        for (int64_t h = 0; h < p.Hq && p.has_dq; h++)
            for (int64_t i = 0; i < p.L; i++)
                for (int64_t d = 0; d < p.D; d++) put(&p.dq, b, h, i, d, gq[((b * p.Hq + h) * p.L + i) * p.D + d]);
        for (int64_t h = 0; h < p.Hk; h++)
            for (int64_t j = 0; j < p.S; j++) {
                for (int64_t d = 0; d < p.D && p.has_dk; d++) put(&p.dk, b, h, j, d, gk[((b * p.Hk + h) * p.S + j) * p.D + d]);
                for (int64_t c = 0; c < p.Dv && p.has_dv; c++)
                    put(&p.dv, b, h, j, c, gv[((b * p.Hk + h) * p.S + j) * p.Dv + c]);
            }
    }
    free(gq), free(gk), free(gv), free(pr);
    return VT_OK;
}
