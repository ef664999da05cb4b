/* ops_reduce.c — queued reductions and scans: the kernels' full argument
 * checks run on the calling thread (a bad dim or shape fails at the op, not
 * at the next synchronisation), then the descriptors are copied into a
 * command whose trampoline runs the synchronous kernel on the device queue. */

#include "internal.h"

static vt_status check_present(const char *name, const vt_tensor *t, const char *what) {
    if (!t) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", name, what);
    return VT_OK;
}

/* ------------------------------------------------------------ reduce */

typedef struct reduce_cmd {
    vt_reduce_op op;
    vt_dtype compute;
    double param;
    uint64_t mask;
    vt_tensor out, in;
} reduce_cmd;

static vt_status reduce_kernel(void *p) {
    const reduce_cmd *c = p;
    return vt_reduce(c->op, &c->out, &c->in, c->mask, c->compute, c->param);
}

vt_status vt_op_reduce(int dev, const char *name, vt_reduce_op op, const vt_tensor *out, const vt_tensor *in,
                       uint64_t dims_mask, vt_dtype compute, double param) {
    if (!name) name = "vt_op_reduce";
    vt_status s = vt_check_device(dev);
    if (s == VT_OK) s = check_present(name, out, "out");
    if (s == VT_OK) s = check_present(name, in, "input");
    if (s != VT_OK) return s;
    /* Dimension errors keep PyTorch's exact wording (no prefix): the
     * binding raises them as IndexError with the message as is. */
    if ((s = vt_reduce_check(op, out, in, dims_mask, compute, param)) != VT_OK)
        return s == VT_ERR_INDEX ? s : vt_error_prefix(s, name);
    reduce_cmd c;
    memset(&c, 0, sizeof c);
    c.op = op;
    c.compute = compute;
    c.param = param;
    c.mask = dims_mask;
    c.out = *out;
    c.in = *in;
    /* out may be in itself (nothing reduced); other overlaps are copied */
    vt_use u[2] = {{&c.out, VT_USE_WRITE, 0}, {&c.in, VT_USE_READ | VT_USE_ALIAS_OK | VT_USE_STAGE, 0}};
    return vt_enqueue_uses(dev, name, reduce_kernel, &c, sizeof c, u, 2);
}

/* ------------------------------------------------------------ max/min with indices */

typedef struct reduce_arg_cmd {
    int is_max, dim, has_values, has_indices;
    vt_tensor values, indices, in;
} reduce_arg_cmd;

static vt_status reduce_arg_kernel(void *p) {
    const reduce_arg_cmd *c = p;
    return vt_reduce_arg(c->is_max, c->has_values ? &c->values : NULL, c->has_indices ? &c->indices : NULL, &c->in,
                         c->dim);
}

vt_status vt_op_reduce_arg(int dev, const char *name, int is_max, const vt_tensor *values, const vt_tensor *indices,
                           const vt_tensor *in, int dim) {
    if (!name) name = "vt_op_reduce_arg";
    vt_status s = vt_check_device(dev);
    if (s == VT_OK) s = check_present(name, in, "input");
    if (s == VT_OK && !values && !indices)
        s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: neither values nor indices given", name);
    if (s != VT_OK) return s;
    if ((s = vt_reduce_arg_check(is_max, values, indices, in, dim)) != VT_OK)
        return s == VT_ERR_INDEX ? s : vt_error_prefix(s, name);
    reduce_arg_cmd c;
    memset(&c, 0, sizeof c);
    c.is_max = is_max;
    c.dim = dim;
    c.has_values = values != NULL;
    c.has_indices = indices != NULL;
    if (values) c.values = *values;
    if (indices) c.indices = *indices;
    c.in = *in;
    vt_use u[3] = {{&c.in, VT_USE_READ | VT_USE_STAGE, 0}};
    int n = 1;
    if (values) u[n++] = (vt_use){&c.values, VT_USE_WRITE, 0};
    if (indices) u[n++] = (vt_use){&c.indices, VT_USE_WRITE, 0};
    return vt_enqueue_uses(dev, name, reduce_arg_kernel, &c, sizeof c, u, n);
}

/* ------------------------------------------------------------ scans */

typedef struct scan_cmd {
    vt_scan_op op;
    vt_dtype compute;
    int dim;
    vt_tensor out, in;
} scan_cmd;

static vt_status scan_kernel(void *p) {
    const scan_cmd *c = p;
    return vt_scan(c->op, &c->out, &c->in, c->dim, c->compute);
}

vt_status vt_op_scan(int dev, const char *name, vt_scan_op op, const vt_tensor *out, const vt_tensor *in, int dim,
                     vt_dtype compute) {
    if (!name) name = "vt_op_scan";
    vt_status s = vt_check_device(dev);
    if (s == VT_OK) s = check_present(name, out, "out");
    if (s == VT_OK) s = check_present(name, in, "input");
    if (s != VT_OK) return s;
    if ((s = vt_scan_check(op, out, in, dim, compute)) != VT_OK) return s == VT_ERR_INDEX ? s : vt_error_prefix(s, name);
    scan_cmd c;
    memset(&c, 0, sizeof c);
    c.op = op;
    c.compute = compute;
    c.dim = dim;
    c.out = *out;
    c.in = *in;
    /* in place exactly, as CPU allows; a partial overlap is refused as CPU does */
    vt_use u[2] = {{&c.out, VT_USE_WRITE, 0}, {&c.in, VT_USE_READ | VT_USE_ALIAS_OK, 0}};
    return vt_enqueue_uses(dev, name, scan_kernel, &c, sizeof c, u, 2);
}
