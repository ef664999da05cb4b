/* norm_ref.c — scalar references of the normalisation family: the
 * textbook formulas in double, element by element in logical order, no
 * SIMD, no threads, no shared code with the kernels beyond the checks. */
#include <stdlib.h>

#include "kernels/norm/norm.h"

/* Element i (row-major logical order) of t, as double. */
static double get(const vt_tensor *t, int64_t i) {
    int64_t off = t->offset;
    for (int32_t d = t->ndim - 1; d >= 0; d--) {
        off += (i % t->sizes[d]) * t->strides[d];
        i /= t->sizes[d];
    }
    double v;
    vt_convert(t->dtype, (const char *)t->data + off * (int64_t)vt_dtype_size(t->dtype), 1, VT_F64, &v, 1, 1);
    return v;
}

static void set(const vt_tensor *t, int64_t i, double v) {
    int64_t off = t->offset;
    for (int32_t d = t->ndim - 1; d >= 0; d--) {
        off += (i % t->sizes[d]) * t->strides[d];
        i /= t->sizes[d];
    }
    vt_convert(VT_F64, &v, 1, t->dtype, (char *)t->data + off * (int64_t)vt_dtype_size(t->dtype), 1, 1);
}

static double opt(const vt_tensor *t, int64_t i, double dflt) { return t ? get(t, i) : dflt; }

/* ------------------------------------------------------------ rows */

static vt_status ref_rows(const char *op, int rms, const vt_tensor *out, const vt_tensor *mean, const vt_tensor *rstd,
                          const vt_tensor *in, const vt_tensor *w, const vt_tensor *b, int32_t nd, double eps) {
    int64_t M, N;
    vt_status s = vt_layer_norm_check(op, in, out, mean, rstd, w, b, NULL, nd, &M, &N);
    if (s != VT_OK) return s;
    for (int64_t m = 0; m < M; m++) {
        double mu = 0, q = 0;
        if (!rms) {
            for (int64_t j = 0; j < N; j++) mu += get(in, m * N + j);
            mu /= (double)N;
        }
        for (int64_t j = 0; j < N; j++) {
            double d = get(in, m * N + j) - mu;
            q += d * d;
        }
        double r = 1.0 / sqrt(q / (double)N + eps);
        if (mean) set(mean, m, mu);
        if (rstd) set(rstd, m, r);
        for (int64_t j = 0; j < N; j++)
            set(out, m * N + j, (get(in, m * N + j) - mu) * r * opt(w, j, 1) + opt(b, j, 0));
    }
    return VT_OK;
}

static vt_status ref_rows_backward(const char *op, int rms, const vt_tensor *dx, const vt_tensor *dw,
                                   const vt_tensor *db, const vt_tensor *dy, const vt_tensor *in,
                                   const vt_tensor *mean, const vt_tensor *rstd, const vt_tensor *w, int32_t nd) {
    int64_t M, N;
    vt_status s = vt_layer_norm_check(op, in, dy, mean, rstd, w, NULL, dx, nd, &M, &N);
    if (s == VT_OK) s = vt_norm_check_vec(op, "grad_weight", dw, N);
    if (s == VT_OK) s = vt_norm_check_vec(op, "grad_bias", db, N);
    if (s != VT_OK) return s;
    double *acc = calloc((size_t)(2 * N + 1), sizeof(double));
    if (!acc) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: no memory", op);
    for (int64_t m = 0; m < M; m++) {
        double mu = rms ? 0 : get(mean, m), r = get(rstd, m), sg = 0, sgx = 0;
        for (int64_t j = 0; j < N; j++) {
            double g = get(dy, m * N + j) * opt(w, j, 1), xh = (get(in, m * N + j) - mu) * r;
            sg += g, sgx += g * xh;
            acc[j] += get(dy, m * N + j) * xh;
            acc[N + j] += get(dy, m * N + j);
        }
        if (!dx) continue;
        for (int64_t j = 0; j < N; j++) {
            double g = get(dy, m * N + j) * opt(w, j, 1), xh = (get(in, m * N + j) - mu) * r;
            set(dx, m * N + j, r * (g - (rms ? 0 : sg / (double)N) - xh * sgx / (double)N));
        }
    }
    for (int64_t j = 0; j < N; j++) {
        if (dw) set(dw, j, acc[j]);
        if (db) set(db, j, acc[N + j]);
    }
    free(acc);
    return VT_OK;
}

vt_status vt_ref_layer_norm(const vt_tensor *out, const vt_tensor *mean, const vt_tensor *rstd, const vt_tensor *in,
                            const vt_tensor *weight, const vt_tensor *bias, int32_t norm_ndim, double eps) {
    return ref_rows("layer_norm", 0, out, mean, rstd, in, weight, bias, norm_ndim, eps);
}
vt_status vt_ref_rms_norm(const vt_tensor *out, const vt_tensor *rstd, const vt_tensor *in, const vt_tensor *weight,
                          int32_t norm_ndim, double eps) {
    return ref_rows("rms_norm", 1, out, NULL, rstd, in, weight, NULL, norm_ndim, eps);
}
vt_status vt_ref_layer_norm_backward(const vt_tensor *grad_in, const vt_tensor *grad_weight,
                                     const vt_tensor *grad_bias, const vt_tensor *grad_out, const vt_tensor *in,
                                     const vt_tensor *mean, const vt_tensor *rstd, const vt_tensor *weight,
                                     int32_t norm_ndim) {
    return ref_rows_backward("layer_norm_backward", 0, grad_in, grad_weight, grad_bias, grad_out, in, mean, rstd,
                             weight, norm_ndim);
}
vt_status vt_ref_rms_norm_backward(const vt_tensor *grad_in, const vt_tensor *grad_weight, const vt_tensor *grad_out,
                                   const vt_tensor *in, const vt_tensor *rstd, const vt_tensor *weight,
                                   int32_t norm_ndim) {
    return ref_rows_backward("rms_norm_backward", 1, grad_in, grad_weight, NULL, grad_out, in, NULL, rstd, weight,
                             norm_ndim);
}

/* ------------------------------------------------------------ channels
 * Element (n, c, h) of [N, C, HW] is (n * C + c) * HW + h in logical order.
 * A "set" is a group (n, g) or a channel c; members lists its elements. */

typedef struct chan_set {
    int64_t N, C, HW, G; /* G > 0: group norm */
} chan_set;

static int64_t set_count(const chan_set *cs) { return cs->G > 0 ? cs->C / cs->G * cs->HW : cs->N * cs->HW; }
/* k-th element of set u, and its channel. */
static int64_t set_elem(const chan_set *cs, int64_t u, int64_t k, int64_t *ch) {
    if (cs->G > 0) {
        int64_t D = cs->C / cs->G, n = u / cs->G, g = u % cs->G;
        *ch = g * D + k / cs->HW;
        return (n * cs->C + *ch) * cs->HW + k % cs->HW;
    }
    *ch = u;
    return (k / cs->HW * cs->C + u) * cs->HW + k % cs->HW;
}

static vt_status ref_chan(const char *op, const vt_tensor *out, const vt_tensor *mean, const vt_tensor *rstd,
                          const vt_tensor *in, const vt_tensor *w, const vt_tensor *b, const vt_tensor *rm,
                          const vt_tensor *rv, int64_t groups, int training, double mom, double eps) {
    int64_t N, C, HW;
    vt_status s = vt_channel_norm_check(op, in, out, NULL, groups, &N, &C, &HW);
    if (s != VT_OK) return s;
    chan_set cs = {N, C, HW, groups};
    int64_t U = groups > 0 ? N * groups : C, cnt = set_count(&cs), ch;
    if ((s = vt_norm_check_vec(op, "weight", w, C)) != VT_OK) return s;
    if ((s = vt_norm_check_vec(op, "bias", b, C)) != VT_OK) return s;
    if ((s = vt_norm_check_vec(op, "mean", mean, U)) != VT_OK) return s;
    if ((s = vt_norm_check_vec(op, "rstd", rstd, U)) != VT_OK) return s;
    if ((s = vt_norm_check_vec(op, "running_mean", rm, C)) != VT_OK) return s;
    if ((s = vt_norm_check_vec(op, "running_var", rv, C)) != VT_OK) return s;
    if (groups <= 0 && !training && (!rm || !rv))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: running statistics required", op);
    for (int64_t u = 0; u < U; u++) {
        double mu = 0, var = 0;
        if (groups > 0 || training) {
            for (int64_t k = 0; k < cnt; k++) mu += get(in, set_elem(&cs, u, k, &ch));
            mu /= (double)cnt;
            for (int64_t k = 0; k < cnt; k++) {
                double d = get(in, set_elem(&cs, u, k, &ch)) - mu;
                var += d * d;
            }
            var /= (double)cnt;
        } else {
            mu = get(rm, u);
            var = get(rv, u);
        }
        double r = 1.0 / sqrt(var + eps);
        for (int64_t k = 0; k < cnt; k++) {
            int64_t i = set_elem(&cs, u, k, &ch);
            set(out, i, (get(in, i) - mu) * r * opt(w, ch, 1) + opt(b, ch, 0));
        }
        if (groups <= 0 && !training) continue;
        if (mean) set(mean, u, mu);
        if (rstd) set(rstd, u, r);
        if (groups <= 0 && cnt > 0) {
            if (rm) set(rm, u, (1 - mom) * get(rm, u) + mom * mu);
            if (rv) set(rv, u, (1 - mom) * get(rv, u) + mom * var * (double)cnt / (double)(cnt - 1));
        }
    }
    return VT_OK;
}

static vt_status ref_chan_backward(const char *op, const vt_tensor *dx, const vt_tensor *dw, const vt_tensor *db,
                                   const vt_tensor *dy, const vt_tensor *in, const vt_tensor *w,
                                   const vt_tensor *mean, const vt_tensor *rstd, const vt_tensor *rm,
                                   const vt_tensor *rv, int64_t groups, int training, double eps) {
    int64_t N, C, HW;
    vt_status s = vt_channel_norm_check(op, in, dy, dx, groups, &N, &C, &HW);
    if (s != VT_OK) return s;
    const int fixed = groups <= 0 && !training;
    if (!dy || (fixed ? (!rm || !rv) : (!mean || !rstd)))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: missing operands", op);
    chan_set cs = {N, C, HW, groups};
    int64_t U = groups > 0 ? N * groups : C, cnt = set_count(&cs), ch;
    double *acc = calloc((size_t)(2 * C + 1), sizeof(double));
    if (!acc) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: no memory", op);
    for (int64_t u = 0; u < U; u++) {
        double mu = fixed ? get(rm, u) : get(mean, u);
        double r = fixed ? 1.0 / sqrt(get(rv, u) + eps) : get(rstd, u);
        double sg = 0, sgx = 0;
        for (int64_t k = 0; k < cnt; k++) {
            int64_t i = set_elem(&cs, u, k, &ch);
            double xh = (get(in, i) - mu) * r, g = get(dy, i) * opt(w, ch, 1);
            sg += g, sgx += g * xh;
            acc[ch] += get(dy, i) * xh;
            acc[C + ch] += get(dy, i);
        }
        if (!dx) continue;
        for (int64_t k = 0; k < cnt; k++) {
            int64_t i = set_elem(&cs, u, k, &ch);
            double xh = (get(in, i) - mu) * r, g = get(dy, i) * opt(w, ch, 1);
            set(dx, i, fixed ? r * g : r * (g - sg / (double)cnt - xh * sgx / (double)cnt));
        }
    }
    for (int64_t c = 0; c < C; c++) {
        if (dw) set(dw, c, acc[c]);
        if (db) set(db, c, acc[C + c]);
    }
    free(acc);
    return VT_OK;
}

vt_status vt_ref_group_norm(const vt_tensor *out, const vt_tensor *mean, const vt_tensor *rstd, const vt_tensor *in,
                            const vt_tensor *weight, const vt_tensor *bias, int64_t groups, double eps) {
    if (groups <= 0) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "group_norm: groups must be positive");
    return ref_chan("group_norm", out, mean, rstd, in, weight, bias, NULL, NULL, groups, 1, 0, eps);
}
vt_status vt_ref_group_norm_backward(const vt_tensor *grad_in, const vt_tensor *grad_weight,
                                     const vt_tensor *grad_bias, const vt_tensor *grad_out, const vt_tensor *in,
                                     const vt_tensor *mean, const vt_tensor *rstd, const vt_tensor *weight,
                                     int64_t groups) {
    if (groups <= 0) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "group_norm_backward: groups must be positive");
    return ref_chan_backward("group_norm_backward", grad_in, grad_weight, grad_bias, grad_out, in, weight, mean, rstd,
                             NULL, NULL, groups, 1, 0);
}
vt_status vt_ref_batch_norm(const vt_tensor *out, const vt_tensor *save_mean, const vt_tensor *save_invstd,
                            const vt_tensor *in, const vt_tensor *weight, const vt_tensor *bias,
                            const vt_tensor *running_mean, const vt_tensor *running_var, int training,
                            double momentum, double eps) {
    return ref_chan("batch_norm", out, save_mean, save_invstd, in, weight, bias, running_mean, running_var, 0,
                    training, momentum, eps);
}
vt_status vt_ref_batch_norm_backward(const vt_tensor *grad_in, const vt_tensor *grad_weight,
                                     const vt_tensor *grad_bias, const vt_tensor *grad_out, const vt_tensor *in,
                                     const vt_tensor *weight, const vt_tensor *running_mean,
                                     const vt_tensor *running_var, const vt_tensor *save_mean,
                                     const vt_tensor *save_invstd, int training, double eps) {
    return ref_chan_backward("batch_norm_backward", grad_in, grad_weight, grad_bias, grad_out, in, weight, save_mean,
                             save_invstd, running_mean, running_var, 0, training, eps);
}
