/* reduce_ref.c — scalar references for vt_reduce, vt_reduce_arg and
 * vt_scan: one output at a time, reduced elements in logical order, fp64
 * (or wrapping int64) arithmetic; a bf16 or f16 scan carries float, as CPU
 * PyTorch does. Shares only the conversions and argument checks with the
 * fast paths it checks. */
#include "internal.h"

/* Element at logical offset off (elements) read as compute, then as fp64
 * or int64. */
static void load(const vt_tensor *t, int64_t off, vt_dtype compute, double *d, int64_t *i) {
    size_t es = vt_dtype_size(t->dtype);
    unsigned char c[8];
    vt_convert(t->dtype, (const char *)t->data + (t->offset + off) * (int64_t)es, 1, compute, c, 1, 1);
    vt_convert(compute, c, 1, VT_F64, d, 1, 1);
    vt_convert(compute, c, 1, VT_I64, i, 1, 1);
}

static void store(const vt_tensor *t, int64_t off, vt_dtype compute, int is_int, double d, int64_t i) {
    unsigned char c[8];
    if (is_int) vt_convert(VT_I64, &i, 1, compute, c, 1, 1);
    else vt_convert(VT_F64, &d, 1, compute, c, 1, 1);
    size_t es = vt_dtype_size(t->dtype);
    vt_convert(compute, c, 1, t->dtype, (char *)t->data + (t->offset + off) * (int64_t)es, 1, 1);
}

/* Offsets (in, out) of the o-th output and of the j-th reduced element. */
static void out_pos(const vt_tensor *in, const vt_tensor *out, uint64_t mask, int64_t o, int64_t *ioff,
                    int64_t *ooff) {
    *ioff = *ooff = 0;
    for (int d = in->ndim - 1; d >= 0; d--) {
        if ((mask >> d) & 1) continue;
        int64_t k = o % in->sizes[d];
        o /= in->sizes[d];
        *ioff += k * in->strides[d];
        *ooff += k * out->strides[d];
    }
}

static int64_t red_pos(const vt_tensor *in, uint64_t mask, int64_t j) {
    int64_t off = 0;
    for (int d = in->ndim - 1; d >= 0; d--) {
        if (!((mask >> d) & 1)) continue;
        off += (j % in->sizes[d]) * in->strides[d];
        j /= in->sizes[d];
    }
    return off;
}

static double fmax_nan(double a, double b) { return (a != a || b != b) ? NAN : (a > b ? a : b); }
static double fmin_nan(double a, double b) { return (a != a || b != b) ? NAN : (a < b ? a : b); }

vt_status vt_ref_reduce(vt_reduce_op op, const vt_tensor *out, const vt_tensor *in, uint64_t dims_mask,
                        vt_dtype compute, double param) {
    vt_status s = vt_reduce_check(op, out, in, dims_mask, compute, param);
    if (s != VT_OK) return s;
    uint64_t mask = in->ndim > 0 ? dims_mask : 0;
    int64_t nout = 1, R = 1;
    for (int d = 0; d < in->ndim; d++) *((mask >> d) & 1 ? &R : &nout) *= in->sizes[d];
    int is_int = !vt_dtype_is_float(compute);
    for (int64_t o = 0; o < nout; o++) {
        int64_t ib, ob;
        out_pos(in, out, mask, o, &ib, &ob);
        double acc = 0, mx = -INFINITY, mn = INFINITY, prod = 1;
        uint64_t iacc = 0, iprod = 1;
        int64_t imax = INT64_MIN, imin = INT64_MAX, any = 0, all = 1;
        for (int64_t j = 0; j < R; j++) {
            double x;
            int64_t xi;
            load(in, ib + red_pos(in, mask, j), compute, &x, &xi);
            int nz = is_int ? xi != 0 : x != 0;
            any |= nz;
            all &= nz;
            if (is_int) {
                iacc += (uint64_t)xi;
                iprod *= (uint64_t)xi;
                imax = xi > imax ? xi : imax;
                imin = xi < imin ? xi : imin;
                continue;
            }
            mx = fmax_nan(mx, x);
            mn = fmin_nan(mn, x);
            prod *= x;
            switch (op) {
            case VT_REDUCE_NORM:
                if (param == 0) acc += nz;
                else if (param == 1) acc += fabs(x);
                else if (param == 2) acc += x * x;
                else if (isinf(param)) acc = param > 0 ? fmax_nan(j ? acc : 0, fabs(x)) : fmin_nan(j ? acc : INFINITY, fabs(x));
                else acc += pow(fabs(x), param);
                break;
            default: acc += x; break;
            }
        }
        double r = 0;
        int64_t ri = 0;
        switch (op) {
        case VT_REDUCE_SUM: r = acc, ri = (int64_t)iacc; break;
        case VT_REDUCE_MEAN: r = acc / (double)R; break;
        case VT_REDUCE_PROD: r = prod, ri = (int64_t)iprod; break;
        case VT_REDUCE_AMAX: r = mx, ri = imax; break;
        case VT_REDUCE_AMIN: r = mn, ri = imin; break;
        case VT_REDUCE_ANY: r = (double)any, ri = any; break;
        case VT_REDUCE_ALL: r = (double)all, ri = all; break;
        case VT_REDUCE_NORM:
            if (R == 0) r = 0;
            else if (param == 2) r = sqrt(acc);
            else if (param != 0 && param != 1 && !isinf(param)) r = pow(acc, 1.0 / param);
            else r = acc;
            break;
        case VT_REDUCE_VAR:
        case VT_REDUCE_STD:
        case VT_REDUCE_LOGSUMEXP: {
            /* second pass: around the mean, or shifted by the max */
            double c = op == VT_REDUCE_LOGSUMEXP ? (isinf(mx) ? 0 : mx) : acc / (double)R, m2 = 0;
            for (int64_t j = 0; j < R; j++) {
                double x;
                int64_t xi;
                load(in, ib + red_pos(in, mask, j), compute, &x, &xi);
                m2 += op == VT_REDUCE_LOGSUMEXP ? exp(x - c) : (x - c) * (x - c);
            }
            if (op == VT_REDUCE_LOGSUMEXP) {
                r = log(m2) + c;
            } else {
                double div = (double)R - param > 0 ? (double)R - param : 0;
                r = op == VT_REDUCE_STD ? sqrt(m2 / div) : m2 / div;
            }
            break;
        }
        default: break;
        }
        store(out, ob, compute, is_int, r, ri);
    }
    return VT_OK;
}

/* in seen as nout lines of R values along dim (a 0-dim input: one line of
 * one); returns the wrapped dim. */
static int one_dim_lines(const vt_tensor *in, int dim, uint64_t *mask, int64_t *nout, int64_t *R) {
    int d = 0;
    vt_wrap_dim(dim, in->ndim, &d);
    *mask = in->ndim > 0 ? 1ull << d : 0;
    *R = in->ndim > 0 ? in->sizes[d] : 1;
    *nout = 1;
    for (int k = 0; k < in->ndim; k++)
        if (k != d) *nout *= in->sizes[k];
    return d;
}

vt_status vt_ref_reduce_arg(int is_max, const vt_tensor *values, const vt_tensor *indices, const vt_tensor *in,
                            int dim) {
    vt_status s = vt_reduce_arg_check(is_max, values, indices, in, dim);
    if (s != VT_OK) return s;
    uint64_t mask;
    int64_t nout, R;
    one_dim_lines(in, dim, &mask, &nout, &R);
    int is_int = !vt_dtype_is_float(in->dtype);
    vt_dtype cdt = is_int ? VT_I64 : VT_F64;
    const vt_tensor *shape_t = values ? values : indices;
    for (int64_t o = 0; o < nout && shape_t; o++) {
        int64_t ib, ob, ob2 = 0;
        out_pos(in, shape_t, mask, o, &ib, &ob);
        if (values && indices) out_pos(in, indices, mask, o, &ib, &ob2);
        else ob2 = ob;
        double best = 0;
        int64_t besti = 0, bi = 0;
        for (int64_t j = 0; j < R; j++) {
            double x;
            int64_t xi;
            load(in, ib + red_pos(in, mask, j), cdt, &x, &xi);
            int take;
            if (j == 0) take = 1;
            else if (is_int) take = is_max ? xi > besti : xi < besti;
            else if (best != best) take = 0;
            else take = x != x || (is_max ? x > best : x < best);
            if (take) best = x, besti = xi, bi = j;
        }
        if (values) store(values, ob, cdt, is_int, best, besti);
        if (indices) store(indices, ob2, VT_I64, 1, 0, bi);
    }
    return VT_OK;
}

static double log_add_exp(double a, double b) {
    if (a != a || b != b) return NAN;
    double mn = a < b ? a : b, mx = a < b ? b : a;
    if (mn != mx || isfinite(mn)) return mx + log1p(exp(mn - mx));
    return a;
}

vt_status vt_ref_scan(vt_scan_op op, const vt_tensor *out, const vt_tensor *in, int dim, vt_dtype compute) {
    vt_status s = vt_scan_check(op, out, in, dim, compute);
    if (s != VT_OK) return s;
    uint64_t mask;
    int64_t nout, R;
    const int d = one_dim_lines(in, dim, &mask, &nout, &R);
    int is_int = !vt_dtype_is_float(compute);
    /* PyTorch's CPU accumulate type: float for bf16 and f16, else double */
    const int narrow = compute == VT_BF16 || compute == VT_F16;
    for (int64_t o = 0; o < nout; o++) {
        int64_t ib, ob;
        out_pos(in, out, mask, o, &ib, &ob);
        double acc = op == VT_SCAN_CUMPROD ? 1 : op == VT_SCAN_LOGCUMSUMEXP ? -INFINITY : 0;
        float facc = (float)acc;
        uint64_t iacc = op == VT_SCAN_CUMPROD ? 1 : 0;
        for (int64_t j = 0; j < R; j++) {
            double x;
            int64_t xi;
            load(in, ib + red_pos(in, mask, j), compute, &x, &xi);
            if (narrow) {
                const float xf = (float)x; /* a bf16 or f16 value: exact */
                if (op == VT_SCAN_CUMSUM) facc += xf;
                else if (op == VT_SCAN_CUMPROD) facc *= xf;
                else if (xf != xf || facc != facc) facc = NAN;
                else if (fminf(xf, facc) != fmaxf(xf, facc) || isfinite(xf))
                    facc = fmaxf(xf, facc) + log1pf(expf(fminf(xf, facc) - fmaxf(xf, facc)));
                acc = facc;
            } else if (op == VT_SCAN_CUMSUM) acc += x, iacc += (uint64_t)xi;
            else if (op == VT_SCAN_CUMPROD) acc *= x, iacc *= (uint64_t)xi;
            else acc = log_add_exp(x, acc);
            int64_t opos = 0, jj = j;
            if (in->ndim > 0) opos = jj * out->strides[d];
            store(out, ob + opos, compute, is_int, acc, (int64_t)iacc);
        }
    }
    return VT_OK;
}
