/* ops_norm.c — queued normalisation ops. The kernels' argument checks run
 * on the calling thread (a bad shape fails at the op); the descriptors are
 * then packed with only their used dims (a batch-norm backward carries ten
 * tensors, more than VT_MAX_ARGS holds as full descriptors) into one
 * command whose trampoline unpacks them and runs the synchronous kernel. */
#include "internal.h"
#include "kernels/norm/norm.h"

enum { K_LN, K_LN_BWD, K_RMS, K_RMS_BWD, K_GN, K_GN_BWD, K_BN, K_BN_BWD };
#define MAX_T 10

typedef struct norm_cmd_head {
    int kind, training, nt;
    int32_t norm_ndim;
    int64_t groups;
    double eps, momentum;
} norm_cmd_head;

typedef struct packed_hdr {
    void *data;
    int64_t offset;
    int32_t dtype, ndim; /* ndim -1: absent */
} packed_hdr;

static size_t packed_size(const vt_tensor *t) {
    return sizeof(packed_hdr) + (t ? 2 * (size_t)t->ndim * sizeof(int64_t) : 0);
}

static size_t pack(char *buf, const vt_tensor *t) {
    packed_hdr h = {0};
    h.ndim = -1;
    if (t) h = (packed_hdr){t->data, t->offset, (int32_t)t->dtype, t->ndim};
    memcpy(buf, &h, sizeof h);
    if (!t) return sizeof h;
    memcpy(buf + sizeof h, t->sizes, (size_t)t->ndim * sizeof(int64_t));
    memcpy(buf + sizeof h + (size_t)t->ndim * sizeof(int64_t), t->strides, (size_t)t->ndim * sizeof(int64_t));
    return packed_size(t);
}

static size_t unpack(const char *buf, vt_tensor *t, int *present) {
    packed_hdr h;
    memcpy(&h, buf, sizeof h);
    *present = h.ndim >= 0;
    if (!*present) return sizeof h;
    memset(t, 0, sizeof *t);
    t->data = h.data;
    t->offset = h.offset;
    t->dtype = (vt_dtype)h.dtype;
    t->ndim = h.ndim;
    memcpy(t->sizes, buf + sizeof h, (size_t)h.ndim * sizeof(int64_t));
    memcpy(t->strides, buf + sizeof h + (size_t)h.ndim * sizeof(int64_t), (size_t)h.ndim * sizeof(int64_t));
    return sizeof h + 2 * (size_t)h.ndim * sizeof(int64_t);
}

static vt_status norm_kernel(void *p) {
    norm_cmd_head h;
    memcpy(&h, p, sizeof h);
    const char *buf = (const char *)p + sizeof h;
    vt_tensor ts[MAX_T];
    const vt_tensor *t[MAX_T];
    for (int i = 0; i < h.nt; i++) {
        int present;
        buf += unpack(buf, &ts[i], &present);
        t[i] = present ? &ts[i] : NULL;
    }
    switch (h.kind) {
        case K_LN: return vt_layer_norm(t[0], t[1], t[2], t[3], t[4], t[5], h.norm_ndim, h.eps);
        case K_LN_BWD: return vt_layer_norm_backward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], h.norm_ndim);
        case K_RMS: return vt_rms_norm(t[0], t[1], t[2], t[3], h.norm_ndim, h.eps);
        case K_RMS_BWD: return vt_rms_norm_backward(t[0], t[1], t[2], t[3], t[4], t[5], h.norm_ndim);
        case K_GN: return vt_group_norm(t[0], t[1], t[2], t[3], t[4], t[5], h.groups, h.eps);
        case K_GN_BWD: return vt_group_norm_backward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], h.groups);
        case K_BN: return vt_batch_norm(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], h.training, h.momentum, h.eps);
        case K_BN_BWD:
            return vt_batch_norm_backward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9], h.training,
                                          h.eps);
    }
    return vt_set_error(VT_ERR_INTERNAL, "norm: unknown command %d", h.kind);
}

/* ts[0..nout) are written; a training batch norm also updates its running
 * statistics (ts[6], ts[7]) in place. Inputs that overlap an output are
 * copied first. */
static vt_status enqueue(int dev, const char *name, norm_cmd_head h, const vt_tensor *const *ts, int nout) {
    char buf[VT_MAX_ARGS];
    size_t n = sizeof h;
    for (int i = 0; i < h.nt; i++) n += packed_size(ts[i]);
    if (n > sizeof buf)
        return vt_set_error(VT_ERR_UNSUPPORTED, "%s: %zu bytes of descriptors exceed a queued command", name, n);
    vt_tensor loc[MAX_T];
    vt_use u[MAX_T];
    int nu = 0;
    for (int i = 0; i < h.nt; i++) {
        if (!ts[i]) continue;
        loc[i] = *ts[i];
        unsigned f = i < nout ? VT_USE_WRITE : VT_USE_READ | VT_USE_STAGE;
        if (h.kind == K_BN && h.training && (i == 6 || i == 7)) f = VT_USE_READ | VT_USE_WRITE;
        u[nu++] = (vt_use){&loc[i], f, 0};
    }
    vt_prepared p;
    vt_status s = vt_uses_prepare(dev, name, u, nu, &p);
    if (s != VT_OK) return s;
    memcpy(buf, &h, sizeof h);
    size_t pos = sizeof h;
    for (int i = 0; i < h.nt; i++) pos += pack(buf + pos, ts[i] ? &loc[i] : NULL);
    return vt_enqueue_prepared(dev, name, norm_kernel, buf, pos, &p, VT_ENQ_AUTO);
}

/* Device, then the kernel's own checks (prefixed with the op's name). */
static vt_status precheck(int dev, const char *name, vt_status s) {
    if (s != VT_OK) return vt_error_prefix(s, name);
    return vt_check_device(dev);
}

static vt_status rows_check(const vt_tensor *in, const vt_tensor *out, const vt_tensor *mean, const vt_tensor *rstd,
                            const vt_tensor *w, const vt_tensor *b, const vt_tensor *gi, const vt_tensor *gw,
                            const vt_tensor *gb, int32_t nd) {
    int64_t m, n;
    if (!in || !out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "input and output are required");
    vt_status s = vt_layer_norm_check("check", in, out, mean, rstd, w, b, gi, nd, &m, &n);
    if (s == VT_OK) s = vt_norm_check_vec("check", "grad_weight", gw, n);
    if (s == VT_OK) s = vt_norm_check_vec("check", "grad_bias", gb, n);
    return s;
}

vt_status vt_op_layer_norm(int dev, const char *name, const vt_tensor *out, const vt_tensor *mean,
                           const vt_tensor *rstd, const vt_tensor *in, const vt_tensor *weight,
                           const vt_tensor *bias, int32_t norm_ndim, double eps) {
    if (!name) name = "vt_op_layer_norm";
    vt_status s = precheck(dev, name, rows_check(in, out, mean, rstd, weight, bias, NULL, NULL, NULL, norm_ndim));
    if (s != VT_OK) return s;
    const vt_tensor *ts[] = {out, mean, rstd, in, weight, bias};
    return enqueue(dev, name, (norm_cmd_head){K_LN, 0, 6, norm_ndim, 0, eps, 0}, ts, 3);
}

vt_status vt_op_layer_norm_backward(int dev, const char *name, const vt_tensor *grad_in,
                                    const vt_tensor *grad_weight, const vt_tensor *grad_bias,
                                    const vt_tensor *grad_out, const vt_tensor *in, const vt_tensor *mean,
                                    const vt_tensor *rstd, const vt_tensor *weight, int32_t norm_ndim) {
    if (!name) name = "vt_op_layer_norm_backward";
    vt_status s = rows_check(in, grad_out, mean, rstd, weight, NULL, grad_in, grad_weight, grad_bias, norm_ndim);
    if (s == VT_OK && (!mean || !rstd)) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "mean and rstd are required");
    if ((s = precheck(dev, name, s)) != VT_OK) return s;
    const vt_tensor *ts[] = {grad_in, grad_weight, grad_bias, grad_out, in, mean, rstd, weight};
    return enqueue(dev, name, (norm_cmd_head){K_LN_BWD, 0, 8, norm_ndim, 0, 0, 0}, ts, 3);
}

vt_status vt_op_rms_norm(int dev, const char *name, const vt_tensor *out, const vt_tensor *rstd, const vt_tensor *in,
                         const vt_tensor *weight, int32_t norm_ndim, double eps) {
    if (!name) name = "vt_op_rms_norm";
    vt_status s = precheck(dev, name, rows_check(in, out, NULL, rstd, weight, NULL, NULL, NULL, NULL, norm_ndim));
    if (s != VT_OK) return s;
    const vt_tensor *ts[] = {out, rstd, in, weight};
    return enqueue(dev, name, (norm_cmd_head){K_RMS, 0, 4, norm_ndim, 0, eps, 0}, ts, 2);
}

vt_status vt_op_rms_norm_backward(int dev, const char *name, const vt_tensor *grad_in, const vt_tensor *grad_weight,
                                  const vt_tensor *grad_out, const vt_tensor *in, const vt_tensor *rstd,
                                  const vt_tensor *weight, int32_t norm_ndim) {
    if (!name) name = "vt_op_rms_norm_backward";
    vt_status s = rows_check(in, grad_out, NULL, rstd, weight, NULL, grad_in, grad_weight, NULL, norm_ndim);
    if (s == VT_OK && !rstd) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "rstd is required");
    if ((s = precheck(dev, name, s)) != VT_OK) return s;
    const vt_tensor *ts[] = {grad_in, grad_weight, grad_out, in, rstd, weight};
    return enqueue(dev, name, (norm_cmd_head){K_RMS_BWD, 0, 6, norm_ndim, 0, 0, 0}, ts, 2);
}

/* Channel layouts: shapes and per-channel / per-group element counts
 * (groups -1: batch norm). */
static vt_status chan_check(const vt_tensor *in, const vt_tensor *out, const vt_tensor *gi, int64_t groups,
                            const vt_tensor *const per_c[], int nc, const vt_tensor *const per_u[], int nu) {
    int64_t n, c, hw;
    if (!in || !out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "input and output are required");
    if (groups == 0 || groups < -1) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "groups must be positive");
    vt_status s = vt_channel_norm_check("check", in, out, gi, groups, &n, &c, &hw);
    for (int i = 0; s == VT_OK && i < nc; i++) s = vt_norm_check_vec("check", "per-channel tensor", per_c[i], c);
    int64_t units = groups > 0 ? n * groups : c;
    for (int i = 0; s == VT_OK && i < nu; i++) s = vt_norm_check_vec("check", "statistics", per_u[i], units);
    return s;
}

vt_status vt_op_group_norm(int dev, const char *name, const vt_tensor *out, const vt_tensor *mean,
                           const vt_tensor *rstd, const vt_tensor *in, const vt_tensor *weight,
                           const vt_tensor *bias, int64_t groups, double eps) {
    if (!name) name = "vt_op_group_norm";
    const vt_tensor *pc[] = {weight, bias}, *pu[] = {mean, rstd};
    vt_status s = groups <= 0 ? vt_set_error(VT_ERR_INVALID_ARGUMENT, "groups must be positive")
                              : chan_check(in, out, NULL, groups, pc, 2, pu, 2);
    if ((s = precheck(dev, name, s)) != VT_OK) return s;
    const vt_tensor *ts[] = {out, mean, rstd, in, weight, bias};
    return enqueue(dev, name, (norm_cmd_head){K_GN, 0, 6, 0, groups, eps, 0}, ts, 3);
}

vt_status vt_op_group_norm_backward(int dev, const char *name, const vt_tensor *grad_in,
                                    const vt_tensor *grad_weight, const vt_tensor *grad_bias,
                                    const vt_tensor *grad_out, const vt_tensor *in, const vt_tensor *mean,
                                    const vt_tensor *rstd, const vt_tensor *weight, int64_t groups) {
    if (!name) name = "vt_op_group_norm_backward";
    const vt_tensor *pc[] = {weight, grad_weight, grad_bias}, *pu[] = {mean, rstd};
    vt_status s = groups <= 0 ? vt_set_error(VT_ERR_INVALID_ARGUMENT, "groups must be positive")
                              : chan_check(in, grad_out, grad_in, groups, pc, 3, pu, 2);
    if (s == VT_OK && (!mean || !rstd)) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "mean and rstd are required");
    if ((s = precheck(dev, name, s)) != VT_OK) return s;
    const vt_tensor *ts[] = {grad_in, grad_weight, grad_bias, grad_out, in, mean, rstd, weight};
    return enqueue(dev, name, (norm_cmd_head){K_GN_BWD, 0, 8, 0, groups, 0, 0}, ts, 3);
}

vt_status vt_op_batch_norm(int dev, const char *name, const vt_tensor *out, const vt_tensor *save_mean,
                           const vt_tensor *save_invstd, const vt_tensor *in, const vt_tensor *weight,
                           const vt_tensor *bias, const vt_tensor *running_mean, const vt_tensor *running_var,
                           int training, double momentum, double eps) {
    if (!name) name = "vt_op_batch_norm";
    const vt_tensor *pc[] = {weight, bias, running_mean, running_var, save_mean, save_invstd};
    vt_status s = chan_check(in, out, NULL, -1, pc, 6, NULL, 0);
    if (s == VT_OK && !training && (!running_mean || !running_var))
        s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "running_mean and running_var are required in eval mode");
    if ((s = precheck(dev, name, s)) != VT_OK) return s;
    const vt_tensor *ts[] = {out, save_mean, save_invstd, in, weight, bias, running_mean, running_var};
    return enqueue(dev, name, (norm_cmd_head){K_BN, training, 8, 0, 0, eps, momentum}, ts, 3);
}

vt_status vt_op_batch_norm_backward(int dev, const char *name, const vt_tensor *grad_in,
                                    const vt_tensor *grad_weight, const vt_tensor *grad_bias,
                                    const vt_tensor *grad_out, const vt_tensor *in, const vt_tensor *weight,
                                    const vt_tensor *running_mean, const vt_tensor *running_var,
                                    const vt_tensor *save_mean, const vt_tensor *save_invstd, int training,
                                    double eps) {
    if (!name) name = "vt_op_batch_norm_backward";
    const vt_tensor *pc[] = {weight, grad_weight, grad_bias, running_mean, running_var, save_mean, save_invstd};
    vt_status s = chan_check(in, grad_out, grad_in, -1, pc, 7, NULL, 0);
    if (s == VT_OK && (training ? (!save_mean || !save_invstd) : (!running_mean || !running_var)))
        s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "the %s statistics are required", training ? "saved" : "running");
    if ((s = precheck(dev, name, s)) != VT_OK) return s;
    const vt_tensor *ts[] = {grad_in, grad_weight, grad_bias, grad_out, in,
                             weight, running_mean, running_var, save_mean, save_invstd};
    return enqueue(dev, name, (norm_cmd_head){K_BN_BWD, training, 10, 0, 0, eps, 0}, ts, 3);
}
