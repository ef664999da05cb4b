/* mxu_ref.c — vt_ref_matmul, the algorithm-exact scalar reference: every
 * kept bf16 pass product is exact in double and summed in fp64 (guarded low
 * sum, then hi*hi), times alpha, plus beta*bias, rounded once to out's dtype.
 * It shares nothing with the fast path but the bf16 conversion helpers. */
#include <stdlib.h>

#include "internal.h"

/* (part of a, part of b) per pass; 0 hi, 1 mid, 2 lo. */
static const int passes_high[][2] = {{2, 0}, {0, 2}};
static const int passes_highest[][2] = {{1, 1}, {0, 2}, {2, 0}, {0, 1}, {1, 0}};

static double ref_load(const vt_tensor *t, int64_t off) {
    double d;
    vt_convert(t->dtype, (const char *)t->data + off * (int64_t)vt_dtype_size(t->dtype), 1, VT_F64, &d, 1, 1);
    return d;
}

/* Offset of the element of t (broadcast right-aligned to out's shape) at
 * out's multi-index idx. */
static int64_t ref_offset(const vt_tensor *t, const vt_tensor *out, const int64_t *idx, int keep_last2) {
    int64_t off = t->offset;
    int lead = out->ndim - t->ndim;
    for (int d = 0; d < t->ndim; d++) {
        int od = d + lead;
        if (keep_last2 && d >= t->ndim - 2) continue;
        if (t->sizes[d] != 1) off += idx[od] * t->strides[d];
    }
    return off;
}

/* The bf16 parts of one input element (as doubles, exact). */
static void ref_parts(const vt_tensor *t, int64_t off, vt_precision prec, double parts[3]) {
    uint32_t p[3] = {0, 0, 0};
    if (t->dtype == VT_F32) {
        vt_mxu_split(((const float *)t->data)[off], prec, p);
    } else {
        float x = (float)ref_load(t, off); /* bf16 / f16: exact in f32 */
        p[0] = vt_mxu_rne_ftz(vt_mxu_bits(x));
    }
    for (int i = 0; i < 3; i++) parts[i] = (double)vt_mxu_float(p[i]);
}

static vt_status ref_check(const vt_tensor *out, const vt_tensor *a, const vt_tensor *b, const vt_tensor *bias) {
    if (!out || !a || !b) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "vt_ref_matmul: NULL tensor");
    if (a->ndim < 2 || b->ndim < 2 || out->ndim < 2 || a->ndim > out->ndim || b->ndim > out->ndim)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "vt_ref_matmul: bad ranks");
    if (a->dtype != b->dtype || out->dtype != a->dtype || !vt_dtype_is_float(a->dtype))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "vt_ref_matmul: bad dtypes");
    if (a->sizes[a->ndim - 1] != b->sizes[b->ndim - 2] || a->sizes[a->ndim - 2] != out->sizes[out->ndim - 2] ||
        b->sizes[b->ndim - 1] != out->sizes[out->ndim - 1])
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "mat1 and mat2 shapes cannot be multiplied (%lldx%lld and %lldx%lld)",
                            (long long)a->sizes[a->ndim - 2], (long long)a->sizes[a->ndim - 1],
                            (long long)b->sizes[b->ndim - 2], (long long)b->sizes[b->ndim - 1]);
    const vt_tensor *ops[2] = {a, b};
    for (int o = 0; o < 2; o++)
        for (int d = 0; d < ops[o]->ndim - 2; d++) {
            int64_t s = ops[o]->sizes[d], os = out->sizes[d + out->ndim - ops[o]->ndim];
            if (s != 1 && s != os) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "vt_ref_matmul: batch mismatch");
        }
    if (bias) {
        if (bias->ndim > out->ndim) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "vt_ref_matmul: bias rank");
        for (int d = 0; d < bias->ndim; d++) {
            int64_t s = bias->sizes[d], os = out->sizes[d + out->ndim - bias->ndim];
            if (s != 1 && s != os) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "vt_ref_matmul: bias mismatch");
        }
    }
    return VT_OK;
}

vt_status vt_ref_matmul(const vt_tensor *out, const vt_tensor *a, const vt_tensor *b, const vt_tensor *bias,
                        double alpha, double beta, vt_precision prec) {
    vt_status s = ref_check(out, a, b, bias);
    if (s != VT_OK) return s;
    int nd = out->ndim;
    int64_t K = a->sizes[a->ndim - 1], total = vt_tensor_numel(out);
    int npass = 0;
    const int(*passes)[2] = NULL;
    if (a->dtype == VT_F32 && prec == VT_PRECISION_HIGH) passes = passes_high, npass = 2;
    if (a->dtype == VT_F32 && prec == VT_PRECISION_HIGHEST) passes = passes_highest, npass = 5;
    int64_t idx[VT_MAX_DIMS] = {0};
    for (int64_t e = 0; e < total; e++) {
        int64_t m = idx[nd - 2], n = idx[nd - 1];
        int64_t abase = ref_offset(a, out, idx, 1), bbase = ref_offset(b, out, idx, 1);
        int64_t as0 = a->strides[a->ndim - 2], as1 = a->strides[a->ndim - 1];
        int64_t bs0 = b->strides[b->ndim - 2], bs1 = b->strides[b->ndim - 1];
        double sum;
        if (a->dtype == VT_F64) {
            sum = 0.0; /* sums start at +0, as the MXU accumulator */
            for (int64_t k = 0; k < K; k++)
                sum += ref_load(a, abase + m * as0 + k * as1) * ref_load(b, bbase + k * bs0 + n * bs1);
        } else {
            double low = 0.0, hh = 0.0;
            for (int64_t k = 0; k < K; k++) {
                double pa[3], pb[3];
                ref_parts(a, abase + m * as0 + k * as1, prec, pa);
                ref_parts(b, bbase + k * bs0 + n * bs1, prec, pb);
                for (int p = 0; p < npass; p++) low += pa[passes[p][0]] * pb[passes[p][1]];
                hh += pa[0] * pb[0];
            }
            if (!isfinite(low)) low = 0.0; /* the NaN/inf guard on the low passes */
            sum = K == 0 ? 0.0 : npass ? low + hh : hh;
        }
        double r = alpha == 1.0 ? sum : alpha * sum;
        if (bias && beta != 0.0) r += beta * ref_load(bias, ref_offset(bias, out, idx, 0));
        int64_t ooff = out->offset;
        for (int d = 0; d < nd; d++) ooff += idx[d] * out->strides[d];
        char *dst = (char *)out->data + ooff * (int64_t)vt_dtype_size(out->dtype);
        switch (out->dtype) {
        case VT_F64: memcpy(dst, &r, 8); break;
        case VT_F32: { float f = (float)r; memcpy(dst, &f, 4); break; }
        case VT_BF16: { uint16_t h = vt_mxu_f64_to_bf16(r); memcpy(dst, &h, 2); break; }
        default: { uint16_t h = vt_mxu_f64_to_f16(r); memcpy(dst, &h, 2); break; }
        }
        for (int d = nd - 1; d >= 0; d--) {
            if (++idx[d] < out->sizes[d]) break;
            idx[d] = 0;
        }
    }
    return VT_OK;
}
