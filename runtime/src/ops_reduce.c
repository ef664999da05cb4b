/* ops_reduce.c — queued reductions and scans, built as nodes
 * (graph/node.h): the kernels' full argument checks run when the node is
 * built, on the calling thread (a bad dim or shape fails at the op, not at
 * the next synchronisation). */

#include "graph/node.h"

static vt_status check_present(const char *name, const vt_tensor *t, const char *what) {
    if (!t) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", name, what);
    return VT_OK;
}

/* ------------------------------------------------------------ reduce */

vt_status vt_op_reduce(int dev, const char *name, vt_reduce_op op, const vt_tensor *out, const vt_tensor *in,
                       uint64_t dims_mask, vt_dtype compute, double param) {
    if (!name) name = "vt_op_reduce";
    vt_status s = check_present(name, out, "out");
    if (s == VT_OK) s = check_present(name, in, "input");
    if (s != VT_OK) return s;
    vt_node n;
    vt_node_init(&n, VT_NODE_REDUCE, (int32_t)op, name);
    n.compute = compute;
    n.params[0] = param;
    n.iparams[0] = (int64_t)dims_mask;
    vt_node_add_out(&n, out);
    return (s = vt_node_add_src(&n, in, NULL)) == VT_OK ? vt_node_submit(dev, &n) : s;
}

/* ------------------------------------------------------------ max/min with indices */

vt_status vt_op_reduce_arg(int dev, const char *name, int is_max, const vt_tensor *values, const vt_tensor *indices,
                           const vt_tensor *in, int dim) {
    if (!name) name = "vt_op_reduce_arg";
    vt_status s = check_present(name, in, "input");
    if (s != VT_OK) return s;
    vt_node n;
    vt_node_init(&n, VT_NODE_REDUCE_ARG, is_max, name);
    n.iparams[0] = dim;
    vt_node_add_out(&n, values);
    vt_node_add_out(&n, indices);
    return (s = vt_node_add_src(&n, in, NULL)) == VT_OK ? vt_node_submit(dev, &n) : s;
}

/* ------------------------------------------------------------ scans */

vt_status vt_op_scan(int dev, const char *name, vt_scan_op op, const vt_tensor *out, const vt_tensor *in, int dim,
                     vt_dtype compute) {
    if (!name) name = "vt_op_scan";
    vt_status s = check_present(name, out, "out");
    if (s == VT_OK) s = check_present(name, in, "input");
    if (s != VT_OK) return s;
    vt_node n;
    vt_node_init(&n, VT_NODE_SCAN, (int32_t)op, name);
    n.compute = compute;
    n.iparams[0] = dim;
    vt_node_add_out(&n, out);
    return (s = vt_node_add_src(&n, in, NULL)) == VT_OK ? vt_node_submit(dev, &n) : s;
}
