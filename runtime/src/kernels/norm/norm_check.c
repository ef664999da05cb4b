/* norm_check.c — argument checks of the normalisation family, shared by
 * the kernels, the references and the queued ops (so a bad shape fails at
 * the op). The binding raises PyTorch's own messages before these run;
 * these guard the C API. */
#include "kernels/norm/norm.h"

static int same_shape(const vt_tensor *a, const vt_tensor *b) {
    if (a->ndim != b->ndim) return 0;
    for (int32_t d = 0; d < a->ndim; d++)
        if (a->sizes[d] != b->sizes[d]) return 0;
    return 1;
}

static vt_status check_float(const char *op, const char *what, const vt_tensor *t) {
    vt_status s = vt_tensor_validate(t, what);
    if (s != VT_OK) return vt_error_prefix(s, op);
    if (!vt_dtype_is_float(t->dtype))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s must be a floating-point tensor, got %s", op, what,
                            vt_dtype_name(t->dtype));
    if (vt_tensor_numel(t) > 0 && !t->data)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s has no data", op, what);
    return VT_OK;
}

vt_status vt_norm_check_vec(const char *op, const char *what, const vt_tensor *t, int64_t want) {
    if (!t) return VT_OK;
    vt_status s = check_float(op, what, t);
    if (s != VT_OK) return s;
    if (vt_tensor_numel(t) != want)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s has %lld elements, expected %lld", op, what,
                            (long long)vt_tensor_numel(t), (long long)want);
    return VT_OK;
}

/* out (nullable) must be a float tensor of in's shape. */
static vt_status check_like(const char *op, const char *what, const vt_tensor *t, const vt_tensor *in) {
    if (!t) return VT_OK;
    vt_status s = check_float(op, what, t);
    if (s != VT_OK) return s;
    if (!same_shape(t, in)) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s must have the input's shape", op, what);
    return VT_OK;
}

vt_status vt_layer_norm_check(const char *op, const vt_tensor *in, const vt_tensor *out, const vt_tensor *mean,
                              const vt_tensor *rstd, const vt_tensor *weight, const vt_tensor *bias,
                              const vt_tensor *grad_in, int32_t norm_ndim, int64_t *rows, int64_t *cols) {
    vt_status s = check_float(op, "input", in);
    if (s != VT_OK) return s;
    if (norm_ndim < 0 || norm_ndim > in->ndim)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %d normalized dims for an input of %d dims", op,
                            (int)norm_ndim, (int)in->ndim);
    int64_t m = 1, n = 1;
    for (int32_t d = 0; d < in->ndim; d++) {
        if (d < in->ndim - norm_ndim) m *= in->sizes[d];
        else n *= in->sizes[d];
    }
    if ((s = check_like(op, "output", out, in)) != VT_OK) return s;
    if ((s = check_like(op, "grad_input", grad_in, in)) != VT_OK) return s;
    if ((s = vt_norm_check_vec(op, "mean", mean, m)) != VT_OK) return s;
    if ((s = vt_norm_check_vec(op, "rstd", rstd, m)) != VT_OK) return s;
    if ((s = vt_norm_check_vec(op, "weight", weight, n)) != VT_OK) return s;
    if ((s = vt_norm_check_vec(op, "bias", bias, n)) != VT_OK) return s;
    *rows = m;
    *cols = n;
    return VT_OK;
}

vt_status vt_channel_norm_check(const char *op, const vt_tensor *in, const vt_tensor *out, const vt_tensor *grad_in,
                                int64_t groups, int64_t *n, int64_t *c, int64_t *hw) {
    vt_status s = check_float(op, "input", in);
    if (s != VT_OK) return s;
    if (in->ndim < 2)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: input must have at least 2 dims, got %d", op, (int)in->ndim);
    *n = in->sizes[0];
    *c = in->sizes[1];
    *hw = 1;
    for (int32_t d = 2; d < in->ndim; d++) *hw *= in->sizes[d];
    if (groups > 0 && *c % groups != 0)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %lld channels do not split into %lld groups", op,
                            (long long)*c, (long long)groups);
    if ((s = check_like(op, "output", out, in)) != VT_OK) return s;
    return check_like(op, "grad_input", grad_in, in);
}
