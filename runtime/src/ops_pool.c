/* ops_pool.c — queued pooling and upsampling as nodes (graph/node.h, the
 * kind's row checks them at the op: a bad shape fails there). */
#include "graph/node.h"

/* A pooling node: a (the output, or grad_input), b (the input, or
 * grad_output), idx (the argmax indices: written by a forward max op, read
 * by its backward; may be NULL), the window p (may be NULL). */
static vt_status submit(int dev, const char *name, vt_pool_op op, const vt_tensor *a, const vt_tensor *b,
                        const vt_tensor *idx, const vt_pool2d_params *p, vt_node *n) {
    vt_node_init(n, VT_NODE_POOL, op, name);
    vt_node_add_out(n, a);
    if (op == VT_POOL_OP_MAX || op == VT_POOL_OP_ADAPTIVE_MAX) vt_node_add_out(n, idx);
    vt_status s = vt_node_add_src(n, b, NULL);
    if (s == VT_OK && op == VT_POOL_OP_MAX_BACKWARD) s = vt_node_add_src(n, idx, NULL);
    if (s != VT_OK) return s;
    if (op != VT_POOL_OP_UPSAMPLE && op != VT_POOL_OP_UPSAMPLE_BACKWARD) vt_node_set_pool_params(n, p);
    return vt_node_submit(dev, n);
}

static vt_status submit_upsample(int dev, const char *name, vt_pool_op op, vt_upsample_mode mode, const vt_tensor *a,
                                 const vt_tensor *b, int align_corners, double scale_h, double scale_w) {
    vt_node n;
    vt_node_init(&n, VT_NODE_POOL, op, name);
    n.iparams[0] = mode;
    n.iparams[1] = align_corners;
    n.params[0] = scale_h;
    n.params[1] = scale_w;
    vt_node_add_out(&n, a);
    vt_status s = vt_node_add_src(&n, b, NULL);
    return s == VT_OK ? vt_node_submit(dev, &n) : s;
}

#define NAME(n, d) ((n) ? (n) : (d))

vt_status vt_op_max_pool2d(int dev, const char *name, const vt_tensor *out, const vt_tensor *indices,
                           const vt_tensor *in, const vt_pool2d_params *p) {
    vt_node n;
    name = NAME(name, "vt_op_max_pool2d");
    if (!out || !in) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: tensor is NULL", name);
    return submit(dev, name, VT_POOL_OP_MAX, out, in, indices, p, &n);
}

vt_status vt_op_max_pool2d_backward(int dev, const char *name, const vt_tensor *grad_in, const vt_tensor *grad_out,
                                    const vt_tensor *indices) {
    vt_node n;
    name = NAME(name, "vt_op_max_pool2d_backward");
    if (!grad_in || !grad_out || !indices) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: tensor is NULL", name);
    return submit(dev, name, VT_POOL_OP_MAX_BACKWARD, grad_in, grad_out, indices, NULL, &n);
}

vt_status vt_op_avg_pool2d(int dev, const char *name, const vt_tensor *out, const vt_tensor *in,
                           const vt_pool2d_params *p) {
    vt_node n;
    name = NAME(name, "vt_op_avg_pool2d");
    if (!out || !in) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: tensor is NULL", name);
    return submit(dev, name, VT_POOL_OP_AVG, out, in, NULL, p, &n);
}

vt_status vt_op_avg_pool2d_backward(int dev, const char *name, const vt_tensor *grad_in, const vt_tensor *grad_out,
                                    const vt_pool2d_params *p) {
    vt_node n;
    name = NAME(name, "vt_op_avg_pool2d_backward");
    if (!grad_in || !grad_out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: tensor is NULL", name);
    return submit(dev, name, VT_POOL_OP_AVG_BACKWARD, grad_in, grad_out, NULL, p, &n);
}

vt_status vt_op_adaptive_avg_pool2d(int dev, const char *name, const vt_tensor *out, const vt_tensor *in) {
    vt_node n;
    name = NAME(name, "vt_op_adaptive_avg_pool2d");
    if (!out || !in) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: tensor is NULL", name);
    return submit(dev, name, VT_POOL_OP_ADAPTIVE_AVG, out, in, NULL, NULL, &n);
}

vt_status vt_op_adaptive_avg_pool2d_backward(int dev, const char *name, const vt_tensor *grad_in,
                                             const vt_tensor *grad_out) {
    vt_node n;
    name = NAME(name, "vt_op_adaptive_avg_pool2d_backward");
    if (!grad_in || !grad_out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: tensor is NULL", name);
    return submit(dev, name, VT_POOL_OP_ADAPTIVE_AVG_BACKWARD, grad_in, grad_out, NULL, NULL, &n);
}

vt_status vt_op_adaptive_max_pool2d(int dev, const char *name, const vt_tensor *out, const vt_tensor *indices,
                                    const vt_tensor *in) {
    vt_node n;
    name = NAME(name, "vt_op_adaptive_max_pool2d");
    if (!out || !in) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: tensor is NULL", name);
    return submit(dev, name, VT_POOL_OP_ADAPTIVE_MAX, out, in, indices, NULL, &n);
}

vt_status vt_op_upsample2d(int dev, const char *name, vt_upsample_mode mode, const vt_tensor *out,
                           const vt_tensor *in, int align_corners, double scale_h, double scale_w) {
    name = NAME(name, "vt_op_upsample2d");
    if (!out || !in) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: tensor is NULL", name);
    return submit_upsample(dev, name, VT_POOL_OP_UPSAMPLE, mode, out, in, align_corners, scale_h, scale_w);
}

vt_status vt_op_upsample2d_backward(int dev, const char *name, vt_upsample_mode mode, const vt_tensor *grad_in,
                                    const vt_tensor *grad_out, int align_corners, double scale_h, double scale_w) {
    name = NAME(name, "vt_op_upsample2d_backward");
    if (!grad_in || !grad_out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: tensor is NULL", name);
    return submit_upsample(dev, name, VT_POOL_OP_UPSAMPLE_BACKWARD, mode, grad_in, grad_out, align_corners, scale_h,
                           scale_w);
}
