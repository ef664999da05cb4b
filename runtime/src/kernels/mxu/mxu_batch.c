/* mxu_batch.c — vt_matmul's entry points: validates shapes and dtypes,
 * broadcasts the batch dims and runs the batch over vt_mxu_matmul_2d (whole
 * products per thread, or one product of all the rows when b is shared). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "mxu_local.h"

/* ------------------------------------------------------------ validation */

static vt_status check_operand(const vt_tensor *t, const char *what) {
    if (!t) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "vt_matmul: %s is NULL", what);
    vt_status s = vt_tensor_validate(t, what);
    if (s != VT_OK) return s;
    if (t->ndim < 2)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "vt_matmul: %s must have at least 2 dimensions, got %d", what,
                            (int)t->ndim);
    return VT_OK;
}

static void shape_text(const vt_tensor *t, char *buf, size_t len) {
    size_t used = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < t->ndim && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? ", " : "", (long long)t->sizes[i]);
    if (used < len) snprintf(buf + used, len - used, "]");
}

/* Broadcast t's batch dims to out's; keeps t's last two dims. */
static vt_status batch_view(const vt_tensor *t, const vt_tensor *out, const char *what, vt_tensor *view) {
    int64_t sizes[VT_MAX_DIMS];
    memcpy(sizes, out->sizes, sizeof sizes);
    sizes[out->ndim - 2] = t->sizes[t->ndim - 2];
    sizes[out->ndim - 1] = t->sizes[t->ndim - 1];
    if (t->ndim > out->ndim || vt_broadcast_to(t, out->ndim, sizes, view) != VT_OK) {
        char ts[200], os[200];
        shape_text(t, ts, sizeof ts);
        shape_text(out, os, sizeof os);
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "vt_matmul: batch dimensions of %s %s do not broadcast to out %s",
                            what, ts, os);
    }
    return VT_OK;
}

static vt_status check_products(const vt_tensor *out, const vt_tensor *a, const vt_tensor *b, const vt_tensor *bias,
                                vt_precision prec, int f32_out);

vt_status vt_matmul_check(const vt_tensor *out, const vt_tensor *a, const vt_tensor *b, const vt_tensor *bias,
                          vt_precision prec) {
    return check_products(out, a, b, bias, prec, 0);
}

/* f32_out: out may be F32 whatever the operands' float dtype (the MXU's
 * f32 sums, unrounded), for callers that go on summing them. */
static vt_status check_products(const vt_tensor *out, const vt_tensor *a, const vt_tensor *b, const vt_tensor *bias,
                                vt_precision prec, int f32_out) {
    vt_status s = check_operand(a, "a");
    if (s == VT_OK) s = check_operand(b, "b");
    if (s == VT_OK) s = check_operand(out, "out");
    if (s == VT_OK && bias) s = vt_tensor_validate(bias, "bias");
    if (s != VT_OK) return s;
    if ((unsigned)prec > VT_PRECISION_HIGHEST)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "vt_matmul: invalid precision %d", (int)prec);
    if (a->dtype != b->dtype)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "expected m1 and m2 to have the same dtype, but got: %s != %s",
                            vt_dtype_name(a->dtype), vt_dtype_name(b->dtype));
    if (!vt_dtype_is_float(a->dtype))
        return vt_set_error(VT_ERR_UNSUPPORTED, "vt_matmul: %s operands are not supported (float types only)",
                            vt_dtype_name(a->dtype));
    if (out->dtype != a->dtype && !(f32_out && out->dtype == VT_F32 && a->dtype != VT_F64))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "vt_matmul: expected out dtype %s, but got %s",
                            vt_dtype_name(a->dtype), vt_dtype_name(out->dtype));
    int64_t M = a->sizes[a->ndim - 2], K = a->sizes[a->ndim - 1];
    int64_t K2 = b->sizes[b->ndim - 2], N = b->sizes[b->ndim - 1];
    if (K != K2)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "mat1 and mat2 shapes cannot be multiplied (%lldx%lld and %lldx%lld)",
                            (long long)M, (long long)K, (long long)K2, (long long)N);
    if (out->sizes[out->ndim - 2] != M || out->sizes[out->ndim - 1] != N) {
        char os[200];
        shape_text(out, os, sizeof os);
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "vt_matmul: out has shape %s, but the product is %lldx%lld", os,
                            (long long)M, (long long)N);
    }
    vt_tensor v;
    s = batch_view(a, out, "a", &v);
    if (s == VT_OK) s = batch_view(b, out, "b", &v);
    if (s == VT_OK && bias && vt_broadcast_to(bias, out->ndim, out->sizes, &v) != VT_OK) {
        char bs[200], os[200];
        shape_text(bias, bs, sizeof bs);
        shape_text(out, os, sizeof os);
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "vt_matmul: bias %s does not broadcast to out %s", bs, os);
    }
    return s;
}

/* ------------------------------------------------------------ batches */

typedef struct batch_job {
    const vt_mxu_engine *e;
    vt_tensor out, a, b, bias; /* broadcast to out's ndim */
    int has_bias;
    double alpha, beta;
    vt_precision prec;
    const vt_version *b_version; /* one product only */
    atomic_int status;
} batch_job;

/* The 2-D slice `index` (row-major over the batch dims) of a broadcast view. */
static vt_tensor slice2d(const vt_tensor *t, int64_t index, const vt_tensor *out) {
    vt_tensor r = *t;
    int nb = out->ndim - 2;
    for (int d = nb - 1; d >= 0; d--) {
        int64_t i = index % out->sizes[d];
        index /= out->sizes[d];
        r.offset += i * t->strides[d];
    }
    r.ndim = 2;
    r.sizes[0] = t->sizes[nb], r.sizes[1] = t->sizes[nb + 1];
    r.strides[0] = t->strides[nb], r.strides[1] = t->strides[nb + 1];
    return r;
}

static vt_status run_batch(batch_job *j, int64_t i) {
    vt_tensor o = slice2d(&j->out, i, &j->out), a = slice2d(&j->a, i, &j->out), b = slice2d(&j->b, i, &j->out);
    vt_tensor bias = j->has_bias ? slice2d(&j->bias, i, &j->out) : o;
    return vt_mxu_matmul_2d(j->e, &o, &a, &b, j->has_bias ? &bias : NULL, j->alpha, j->beta, j->prec, NULL, NULL,
                     j->b_version);
}

static void batch_range(void *ctx, int64_t begin, int64_t end) {
    batch_job *j = ctx;
    for (int64_t i = begin; i < end; i++) {
        vt_status s = run_batch(j, i);
        if (s != VT_OK) atomic_store(&j->status, (int)s);
    }
}

static vt_status matmul_checked(const vt_tensor *out, const vt_tensor *a, const vt_tensor *b, const vt_tensor *bias,
                                double alpha, double beta, vt_precision prec, const vt_version *b_version);

vt_status vt_matmul(const vt_tensor *out, const vt_tensor *a, const vt_tensor *b, const vt_tensor *bias, double alpha,
                    double beta, vt_precision prec) {
    vt_status s = vt_matmul_check(out, a, b, bias, prec);
    return s != VT_OK ? s : matmul_checked(out, a, b, bias, alpha, beta, prec, NULL);
}

vt_status vt_matmul_versioned(const vt_tensor *out, const vt_tensor *a, const vt_tensor *b, const vt_tensor *bias,
                              double alpha, double beta, vt_precision prec, vt_version b_version) {
    vt_status s = vt_matmul_check(out, a, b, bias, prec);
    return s != VT_OK ? s : matmul_checked(out, a, b, bias, alpha, beta, prec, &b_version);
}

vt_status vt_matmul_f32_out(const vt_tensor *out, const vt_tensor *a, const vt_tensor *b, const vt_tensor *bias,
                            double alpha, double beta, vt_precision prec) {
    vt_status s = check_products(out, a, b, bias, prec, 1);
    return s != VT_OK ? s : matmul_checked(out, a, b, bias, alpha, beta, prec, NULL);
}

vt_status vt_matmul_rows(const vt_tensor *out, const vt_tensor *a, const vt_mxu_rows *a_rows, const vt_tensor *b,
                         const vt_mxu_rows *b_rows, const vt_tensor *bias, double alpha, double beta,
                         vt_precision prec) {
    /* internal callers: shapes and dtypes only (a produced operand's data is never read) */
    if (out->ndim != 2 || a->ndim != 2 || b->ndim != 2 || a->sizes[1] != b->sizes[0] ||
        out->sizes[0] != a->sizes[0] || out->sizes[1] != b->sizes[1] || a->dtype != b->dtype ||
        !vt_dtype_is_float(a->dtype) || (out->dtype != a->dtype && (out->dtype != VT_F32 || a->dtype == VT_F64)) ||
        (unsigned)prec > VT_PRECISION_HIGHEST)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "vt_matmul_rows: operands do not match");
    return vt_mxu_matmul_2d(vt_mxu_engine_active(), out, a, b, bias, alpha, beta, prec, a_rows, b_rows, NULL);
}

/* t's batch dims and its row dim as one dim of rows (t->strides[nb] apart),
 * if its strides allow: *rows2d the 2-D view. */
static int rows_merge(const vt_tensor *t, vt_tensor *rows2d) {
    const int nb = t->ndim - 2;
    int64_t rows = t->sizes[nb];
    for (int d = nb - 1; d >= 0; d--) {
        if (t->sizes[d] != 1 && t->strides[d] != t->sizes[d + 1] * t->strides[d + 1]) return 0;
        rows *= t->sizes[d];
    }
    *rows2d = *t;
    rows2d->ndim = 2;
    rows2d->sizes[0] = rows, rows2d->sizes[1] = t->sizes[nb + 1];
    rows2d->strides[0] = t->strides[nb], rows2d->strides[1] = t->strides[nb + 1];
    return 1;
}

/* A batch whose b is one matrix for every product (batch strides 0: a
 * weight broadcast over a 3-D activation) and whose out rows follow each
 * other is one product of all the rows: b is packed once, not once a
 * product. An a whose rows do not merge (a transposed activation) is
 * copied into rows first, as CPU PyTorch's matmul folds it. 1: done (or
 * failed, *s), 0: not such a batch. */
static int fold_shared_b(const vt_mxu_engine *e, const batch_job *j, int64_t nbatch, vt_status *s) {
    const int nb = j->out.ndim - 2;
    if (nbatch <= 1 || j->has_bias) return 0;
    for (int d = 0; d < nb; d++)
        if (j->b.strides[d] != 0 && j->b.sizes[d] != 1) return 0;
    vt_tensor o2, a2, b2 = slice2d(&j->b, 0, &j->out);
    if (!rows_merge(&j->out, &o2)) return 0;
    void *copy = NULL;
    if (!rows_merge(&j->a, &a2)) {
        const size_t es = vt_dtype_size(j->a.dtype);
        const int64_t K = j->a.sizes[nb + 1], n = o2.sizes[0] * K;
        if (vt_exceeds_host_memory((double)n * (double)es)) return 0;
        copy = malloc((size_t)n * es + 1);
        if (!copy) return 0;
        const vt_tensor dense = vt_contiguous_like(&j->a, copy);
        *s = vt_copy(&dense, &j->a);
        if (*s != VT_OK) {
            free(copy);
            return 1;
        }
        rows_merge(&dense, &a2);
    }
    *s = vt_mxu_matmul_2d(e, &o2, &a2, &b2, NULL, j->alpha, j->beta, j->prec, NULL, NULL, NULL);
    free(copy);
    return 1;
}

static vt_status matmul_checked(const vt_tensor *out, const vt_tensor *a, const vt_tensor *b, const vt_tensor *bias,
                                double alpha, double beta, vt_precision prec, const vt_version *b_version) {
    vt_status s = VT_OK;
    batch_job j;
    memset(&j, 0, sizeof j);
    j.e = vt_mxu_engine_active();
    j.out = *out;
    batch_view(a, out, "a", &j.a);
    batch_view(b, out, "b", &j.b);
    if (bias) vt_broadcast_to(bias, out->ndim, out->sizes, &j.bias);
    j.has_bias = bias != NULL;
    j.alpha = alpha, j.beta = beta, j.prec = prec;
    int64_t nbatch = 1;
    for (int d = 0; d < out->ndim - 2; d++) nbatch *= out->sizes[d];
    int64_t M = out->sizes[out->ndim - 2], N = out->sizes[out->ndim - 1], K = a->sizes[a->ndim - 1];
    if (nbatch == 0 || M == 0 || N == 0) return VT_OK;
    if (nbatch == 1) j.b_version = b_version;
    if (fold_shared_b(j.e, &j, nbatch, &s)) return s;
    /* Products of a batch run whole, one per task, each on one core: small
     * ones always (their fork and join would cost more than they do), any
     * where the batch splits evenly over the threads or is long enough that
     * a leftover product matters little. Split over the threads, a product
     * cost three fork-joins (packing A, packing B, the tiles): a batch of
     * 64 attention products of 256 x 64 x 256 in bf16 took 0.94 ms. */
    const int64_t nt = vt_num_threads();
    if (nbatch > 1 && (M * N * (K ? K : 1) < VT_MXU_PARALLEL_MACS || nbatch % nt == 0 || nbatch >= 4 * nt)) {
        vt_parallel_for(nbatch, 1, batch_range, &j);
        s = (vt_status)atomic_load(&j.status);
        return s == VT_OK ? VT_OK : vt_set_error(s, "vt_matmul: out of host memory for scratch");
    }
    for (int64_t i = 0; i < nbatch && s == VT_OK; i++) s = run_batch(&j, i);
    return s;
}
