/* reduce_check.c — argument contracts of vt_reduce, vt_reduce_arg and
 * vt_scan: dim wrapping, keepdim shapes, dtypes and empty extents, with
 * PyTorch's wording, shared by the kernels, their references and the
 * queued ops (which must fail at the op, not at the next synchronisation). */
#include <stdio.h>

#include "internal.h"

static const char *const reduce_names[VT_REDUCE_OP_COUNT] = {
#define VT_REDUCE_OP(e, name) #name,
#include "vtpu/reduce.def"
#undef VT_REDUCE_OP
};
static const char *const scan_names[VT_SCAN_OP_COUNT] = {
#define VT_SCAN_OP(e, name) #name,
#include "vtpu/scan.def"
#undef VT_SCAN_OP
};

const char *vt_reduce_op_name(vt_reduce_op op) {
    return (unsigned)op < VT_REDUCE_OP_COUNT ? reduce_names[op] : "reduce";
}
const char *vt_scan_op_name(vt_scan_op op) { return (unsigned)op < VT_SCAN_OP_COUNT ? scan_names[op] : "scan"; }

vt_status vt_wrap_dim(int64_t dim, int32_t ndim, int *out) {
    int64_t n = ndim > 0 ? ndim : 1; /* a 0-dim tensor takes dim 0 or -1, as in PyTorch */
    if (dim < -n || dim >= n)
        return vt_set_error(VT_ERR_INDEX, "Dimension out of range (expected to be in range of [%lld, %lld], but got %lld)",
                            (long long)-n, (long long)(n - 1), (long long)dim);
    *out = (int)(dim < 0 ? dim + n : dim);
    return VT_OK;
}

static void format_shape(char *buf, size_t len, int32_t ndim, const int64_t *sizes) {
    size_t k = (size_t)snprintf(buf, len, "[");
    for (int32_t d = 0; d < ndim && k < len; d++)
        k += (size_t)snprintf(buf + k, len - k, d ? ", %lld" : "%lld", (long long)sizes[d]);
    if (k < len) snprintf(buf + k, len - k, "]");
}

/* t must have in's shape with the dims in mask set to 1 (0-dim in: 0-dim t). */
static vt_status check_keepdim(const char *name, const char *what, const vt_tensor *t, const vt_tensor *in,
                               uint64_t mask) {
    int ok = t->ndim == in->ndim;
    int64_t want[VT_MAX_DIMS];
    for (int32_t d = 0; d < in->ndim; d++) {
        want[d] = (mask >> d) & 1 ? 1 : in->sizes[d];
        if (ok && t->sizes[d] != want[d]) ok = 0;
    }
    if (ok) return VT_OK;
    char a[200], b[200];
    format_shape(a, sizeof a, t->ndim, t->sizes);
    format_shape(b, sizeof b, in->ndim, want);
    return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): %s has shape %s, expected the keepdim shape %s", name, what, a,
                        b);
}

static int int_compute(vt_dtype dt) { return !vt_dtype_is_float(dt); }

vt_status vt_reduce_check(vt_reduce_op op, const vt_tensor *out, const vt_tensor *in, uint64_t dims_mask,
                          vt_dtype compute, double param) {
    if ((unsigned)op >= VT_REDUCE_OP_COUNT)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "reduce: invalid op %d", (int)op);
    const char *name = reduce_names[op];
    vt_status s = vt_tensor_validate(in, name);
    if (s == VT_OK) s = vt_tensor_validate(out, name);
    if (s != VT_OK) return s;
    if ((unsigned)compute >= VT_DTYPE_COUNT)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): invalid compute dtype %d", name, (int)compute);
    /* A 0-dim tensor accepts dim 0 (a no-op), as PyTorch wraps it like a 1-dim one. */
    int32_t nd = in->ndim > 0 ? in->ndim : 1;
    if (nd < 64 && (dims_mask >> nd) != 0) {
        int bad = nd;
        while (!((dims_mask >> bad) & 1)) bad++;
        return vt_set_error(VT_ERR_INDEX, "Dimension out of range (expected to be in range of [%d, %d], but got %d)",
                            -nd, nd - 1, bad);
    }
    uint64_t mask = in->ndim > 0 ? dims_mask : 0;
    if ((s = check_keepdim(name, "out", out, in, mask)) != VT_OK) return s;
    if (int_compute(compute) && op != VT_REDUCE_SUM && op != VT_REDUCE_PROD && op != VT_REDUCE_AMAX &&
        op != VT_REDUCE_AMIN && op != VT_REDUCE_ANY && op != VT_REDUCE_ALL)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT,
                            "%s(): not implemented for %s compute: the input must be of a floating point dtype", name,
                            vt_dtype_name(compute));
    int empty = 0, empty_dim = 0;
    for (int32_t d = 0; d < in->ndim; d++)
        if (((mask >> d) & 1) && in->sizes[d] == 0 && !empty) empty = 1, empty_dim = d;
    if (empty && (op == VT_REDUCE_AMAX || op == VT_REDUCE_AMIN))
        return vt_set_error(VT_ERR_INDEX, "%s(): Expected reduction dim %d to have non-zero size.", name, empty_dim);
    if (empty && op == VT_REDUCE_NORM && param < 0)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT,
                            "linalg.vector_norm cannot compute the %g norm on an empty tensor because the operation "
                            "does not have an identity",
                            param);
    return VT_OK;
}

vt_status vt_reduce_arg_check(int is_max, const vt_tensor *values, const vt_tensor *indices, const vt_tensor *in,
                              int dim) {
    const char *name = values ? (is_max ? "max" : "min") : (is_max ? "argmax" : "argmin");
    vt_status s = vt_tensor_validate(in, name);
    if (s == VT_OK && values) s = vt_tensor_validate(values, name);
    if (s == VT_OK && indices) s = vt_tensor_validate(indices, name);
    if (s != VT_OK) return s;
    int d = 0;
    if ((s = vt_wrap_dim(dim, in->ndim, &d)) != VT_OK) return s;
    uint64_t mask = in->ndim > 0 ? 1ull << d : 0;
    if (values && (s = check_keepdim(name, "values", values, in, mask)) != VT_OK) return s;
    if (indices && (s = check_keepdim(name, "indices", indices, in, mask)) != VT_OK) return s;
    if (indices && indices->dtype != VT_I64)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): indices must be int64, got %s", name,
                            vt_dtype_name(indices->dtype));
    if (in->ndim > 0 && in->sizes[d] == 0)
        return vt_set_error(VT_ERR_INDEX, "%s(): Expected reduction dim %d to have non-zero size.", name, d);
    return VT_OK;
}

vt_status vt_scan_check(vt_scan_op op, const vt_tensor *out, const vt_tensor *in, int dim, vt_dtype compute) {
    if ((unsigned)op >= VT_SCAN_OP_COUNT)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "scan: invalid op %d", (int)op);
    const char *name = scan_names[op];
    vt_status s = vt_tensor_validate(in, name);
    if (s == VT_OK) s = vt_tensor_validate(out, name);
    if (s != VT_OK) return s;
    if ((unsigned)compute >= VT_DTYPE_COUNT)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): invalid compute dtype %d", name, (int)compute);
    int d;
    if ((s = vt_wrap_dim(dim, in->ndim, &d)) != VT_OK) return s;
    if ((s = check_keepdim(name, "out", out, in, 0)) != VT_OK) return s;
    if (op == VT_SCAN_LOGCUMSUMEXP && int_compute(compute))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): not implemented for %s compute", name,
                            vt_dtype_name(compute));
    return VT_OK;
}
