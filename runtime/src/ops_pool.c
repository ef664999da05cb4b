/* ops_pool.c — queued pooling and upsampling: the kernels' argument checks
 * run on the calling thread (a bad shape fails at the op), then the
 * descriptors are copied into a command run on the device queue. */
#include "kernels/pool/pool.h"

typedef enum pool_op {
    OP_MAX = 0, OP_MAX_BWD, OP_AVG, OP_AVG_BWD, OP_AAVG, OP_AAVG_BWD, OP_AMAX, OP_UP, OP_UP_BWD
} pool_op;

typedef struct pool_cmd {
    pool_op op;
    vt_tensor a, b, idx; /* a: output (grad_in for backward); b: input (grad_out) */
    int has_idx;
    vt_pool2d_params p;
    vt_upsample_mode mode;
    int align_corners;
    double sh, sw;
} pool_cmd;

static vt_status pool_kernel(void *v) {
    const pool_cmd *c = v;
    const vt_tensor *idx = c->has_idx ? &c->idx : NULL;
    switch (c->op) {
    case OP_MAX: return vt_max_pool2d(&c->a, idx, &c->b, &c->p);
    case OP_MAX_BWD: return vt_max_pool2d_backward(&c->a, &c->b, idx);
    case OP_AVG: return vt_avg_pool2d(&c->a, &c->b, &c->p);
    case OP_AVG_BWD: return vt_avg_pool2d_backward(&c->a, &c->b, &c->p);
    case OP_AAVG: return vt_adaptive_avg_pool2d(&c->a, &c->b);
    case OP_AAVG_BWD: return vt_adaptive_avg_pool2d_backward(&c->a, &c->b);
    case OP_AMAX: return vt_adaptive_max_pool2d(&c->a, idx, &c->b);
    case OP_UP: return vt_upsample2d(c->mode, &c->a, &c->b, c->align_corners, c->sh, c->sw);
    case OP_UP_BWD: return vt_upsample2d_backward(c->mode, &c->a, &c->b, c->align_corners, c->sh, c->sw);
    }
    return vt_set_error(VT_ERR_INTERNAL, "pool: unknown op %d", (int)c->op);
}

/* fout / fin: the forward op's output and input, as vt_pool_check takes them. */
static vt_status submit(int dev, const char *name, pool_op op, vt_pool_kind kind, const vt_tensor *a,
                        const vt_tensor *b, const vt_tensor *idx, const vt_tensor *fout, const vt_tensor *fin,
                        const vt_pool2d_params *p, pool_cmd *c) {
    vt_status s = vt_check_device(dev);
    if (s) return s;
    if (!a || !b) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: tensor is NULL", name);
    if ((s = vt_pool_check(kind, fout, idx, fin, p, name))) return s;
    c->op = op;
    c->a = *a;
    c->b = *b;
    if (idx) {
        c->idx = *idx;
        c->has_idx = 1;
    }
    if (p) c->p = *p;
    /* a is written (with the argmax indices of a forward max pool); the
     * inputs are read while a is written, so overlaps are copied */
    int idx_out = op == OP_MAX || op == OP_AMAX;
    vt_use u[3] = {{&c->a, VT_USE_WRITE, 0}, {&c->b, VT_USE_READ | VT_USE_STAGE, 0}};
    int n = 2;
    if (idx) u[n++] = (vt_use){&c->idx, idx_out ? VT_USE_WRITE : VT_USE_READ | VT_USE_STAGE, 0};
    return vt_enqueue_uses(dev, name, pool_kernel, c, sizeof *c, u, n);
}

#define NAME(n, d) ((n) ? (n) : (d))

vt_status vt_op_max_pool2d(int dev, const char *name, const vt_tensor *out, const vt_tensor *indices,
                           const vt_tensor *in, const vt_pool2d_params *p) {
    pool_cmd c = {0};
    name = NAME(name, "vt_op_max_pool2d");
    if (!out || !in) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: tensor is NULL", name);
    return submit(dev, name, OP_MAX, VT_POOL_MAX, out, in, indices, out, in, p, &c);
}

vt_status vt_op_max_pool2d_backward(int dev, const char *name, const vt_tensor *grad_in, const vt_tensor *grad_out,
                                    const vt_tensor *indices) {
    pool_cmd c = {0};
    name = NAME(name, "vt_op_max_pool2d_backward");
    if (!grad_in || !grad_out || !indices) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: tensor is NULL", name);
    return submit(dev, name, OP_MAX_BWD, VT_POOL_ADAPTIVE_MAX, grad_in, grad_out, indices, grad_out, grad_in, NULL, &c);
}

vt_status vt_op_avg_pool2d(int dev, const char *name, const vt_tensor *out, const vt_tensor *in,
                           const vt_pool2d_params *p) {
    pool_cmd c = {0};
    name = NAME(name, "vt_op_avg_pool2d");
    if (!out || !in) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: tensor is NULL", name);
    return submit(dev, name, OP_AVG, VT_POOL_AVG, out, in, NULL, out, in, p, &c);
}

vt_status vt_op_avg_pool2d_backward(int dev, const char *name, const vt_tensor *grad_in, const vt_tensor *grad_out,
                                    const vt_pool2d_params *p) {
    pool_cmd c = {0};
    name = NAME(name, "vt_op_avg_pool2d_backward");
    if (!grad_in || !grad_out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: tensor is NULL", name);
    return submit(dev, name, OP_AVG_BWD, VT_POOL_AVG, grad_in, grad_out, NULL, grad_out, grad_in, p, &c);
}

vt_status vt_op_adaptive_avg_pool2d(int dev, const char *name, const vt_tensor *out, const vt_tensor *in) {
    pool_cmd c = {0};
    name = NAME(name, "vt_op_adaptive_avg_pool2d");
    if (!out || !in) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: tensor is NULL", name);
    return submit(dev, name, OP_AAVG, VT_POOL_ADAPTIVE_AVG, out, in, NULL, out, in, NULL, &c);
}

vt_status vt_op_adaptive_avg_pool2d_backward(int dev, const char *name, const vt_tensor *grad_in,
                                             const vt_tensor *grad_out) {
    pool_cmd c = {0};
    name = NAME(name, "vt_op_adaptive_avg_pool2d_backward");
    if (!grad_in || !grad_out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: tensor is NULL", name);
    return submit(dev, name, OP_AAVG_BWD, VT_POOL_ADAPTIVE_AVG, grad_in, grad_out, NULL, grad_out, grad_in, NULL, &c);
}

vt_status vt_op_adaptive_max_pool2d(int dev, const char *name, const vt_tensor *out, const vt_tensor *indices,
                                    const vt_tensor *in) {
    pool_cmd c = {0};
    name = NAME(name, "vt_op_adaptive_max_pool2d");
    if (!out || !in) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: tensor is NULL", name);
    return submit(dev, name, OP_AMAX, VT_POOL_ADAPTIVE_MAX, out, in, indices, out, in, NULL, &c);
}

vt_status vt_op_upsample2d(int dev, const char *name, vt_upsample_mode mode, const vt_tensor *out,
                           const vt_tensor *in, int align_corners, double scale_h, double scale_w) {
    pool_cmd c = {0};
    name = NAME(name, "vt_op_upsample2d");
    if (!out || !in) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: tensor is NULL", name);
    c.mode = mode;
    c.align_corners = align_corners;
    c.sh = scale_h;
    c.sw = scale_w;
    return submit(dev, name, OP_UP, VT_POOL_UPSAMPLE, out, in, NULL, out, in, NULL, &c);
}

vt_status vt_op_upsample2d_backward(int dev, const char *name, vt_upsample_mode mode, const vt_tensor *grad_in,
                                    const vt_tensor *grad_out, int align_corners, double scale_h, double scale_w) {
    pool_cmd c = {0};
    name = NAME(name, "vt_op_upsample2d_backward");
    if (!grad_in || !grad_out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: tensor is NULL", name);
    c.mode = mode;
    c.align_corners = align_corners;
    c.sh = scale_h;
    c.sw = scale_w;
    return submit(dev, name, OP_UP_BWD, VT_POOL_UPSAMPLE, grad_in, grad_out, NULL, grad_out, grad_in, NULL, &c);
}
