/* ops_shape.c — queued data-movement ops as nodes (VT_NODE_SHAPE,
 * kernels/shape/shape_node.c checks and runs them): bad shapes fail at the
 * op. A cat list longer than a node holds is split: each node writes its
 * own slice of out; recorded (DeferAndFuse), a cat is a copy per input. */
#include <stdlib.h>

#include "graph/defer.h"
#include "kernels/shape/shape.h"

static vt_status prefixed(vt_status s, const char *name) { return s == VT_ERR_INDEX ? s : vt_error_prefix(s, name); }

/* A node of op with out[0] and the inputs ins[0..nin); iparams set by fill. */
static void shape_node(vt_node *n, vt_shape_op op, const char *name, const vt_tensor *out) {
    vt_node_init(n, VT_NODE_SHAPE, op, name);
    vt_node_add_out(n, out);
}

/* ------------------------------------------------------------ cat */

vt_status vt_op_cat(int dev, const char *name, const vt_tensor *out, int n, const vt_tensor *ins, int dim) {
    if (!name) name = "vt_op_cat";
    vt_status s = vt_check_device(dev);
    if (s) return s;
    if (!out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: out is NULL", name);
    if ((s = vt_cat_check(out, n, ins, dim))) return s == VT_ERR_INVALID_ARGUMENT ? s : prefixed(s, name);
    /* The inputs are checked against the whole of out at once (as CPU
     * refuses any overlap); the nodes then write disjoint slices. */
    vt_tensor whole = *out;
    vt_tensor *local = malloc(sizeof(vt_tensor) * (size_t)(n > 0 ? n : 1));
    vt_use *u = malloc(sizeof(vt_use) * (size_t)(n + 1));
    if (!local || !u) {
        free(local);
        free(u);
        return vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: out of host memory", name);
    }
    u[0] = (vt_use){&whole, VT_USE_WRITE, 0};
    for (int k = 0; k < n; k++) {
        local[k] = ins[k];
        u[k + 1] = (vt_use){&local[k], VT_USE_READ, 0};
    }
    vt_prepared all;
    s = vt_uses_prepare(dev, name, u, n + 1, &all);
    free(u);
    int64_t at = 0;
    if (s == VT_OK && vt_defer_wants(vt_get_eager_mode())) {
        /* Recorded, each input is a copy into its slice of out: an
         * elementwise node, so it can join the group that computes the
         * input, which then writes its values straight into out's slice
         * (graph/fuse.c); the input itself, if dead, is never written. */
        for (int k = 0; s == VT_OK && k < n; k++) {
            const vt_tensor slice = vt_shape_narrow(out, dim, at, local[k].sizes[dim]);
            at += local[k].sizes[dim];
            if (vt_tensor_numel(&slice) == 0) continue;
            vt_node nd;
            vt_node_init(&nd, VT_NODE_COPY, 0, name);
            vt_node_add_out(&nd, &slice);
            if ((s = vt_node_add_src(&nd, &local[k], NULL)) == VT_OK) s = vt_node_submit(dev, &nd);
        }
        n = 0;
    }
    /* each node takes the inputs its ring slot holds (fewer of many dims) */
    for (int k = 0; s == VT_OK && k < n;) {
        vt_node nd;
        shape_node(&nd, VT_SHAPE_OP_CAT, name, out);
        nd.iparams[0] = dim;
        int64_t len = 0;
        while (k < n && nd.nsrc < VT_NODE_MAX_SRC) {
            vt_node_add_src(&nd, &local[k], NULL);
            if (nd.nsrc > 1 && vt_node_packed_size(&nd) > VT_MAX_ARGS) {
                nd.nsrc--;
                break;
            }
            len += local[k++].sizes[dim];
        }
        if (len == 0) continue;
        const vt_tensor slice = vt_shape_narrow(out, dim, at, len);
        vt_tensor_copy(&nd.out[0], &slice);
        at += len;
        s = vt_node_submit(dev, &nd);
    }
    vt_prepared_release(dev, &all); /* staged inputs go after the nodes that read them */
    free(local);
    return s;
}

/* ------------------------------------------------------------ flip, roll, tril/triu */

static vt_status one_in(int dev, vt_node *n, const vt_tensor *in) {
    vt_status s = vt_node_add_src(n, in, NULL);
    return s == VT_OK ? vt_node_submit(dev, n) : s;
}

vt_status vt_op_flip(int dev, const char *name, const vt_tensor *out, const vt_tensor *in, uint64_t dims_mask) {
    if (!name) name = "vt_op_flip";
    vt_status s = vt_check_device(dev);
    if (!s && (!out || !in)) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: NULL tensor", name);
    if (s) return s;
    vt_node n;
    shape_node(&n, VT_SHAPE_OP_FLIP, name, out);
    n.iparams[0] = (int64_t)dims_mask;
    return one_in(dev, &n, in);
}

vt_status vt_op_roll(int dev, const char *name, const vt_tensor *out, const vt_tensor *in, int ndims, const int *dims,
                     const int64_t *shifts) {
    if (!name) name = "vt_op_roll";
    vt_status s = vt_check_device(dev);
    if (!s && (!out || !in)) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: NULL tensor", name);
    if (s) return s;
    /* the dims as given: the node holds valid ones only */
    if ((s = vt_roll_check(out, in, ndims, dims, shifts))) return prefixed(s, name);
    vt_node n;
    shape_node(&n, VT_SHAPE_OP_ROLL, name, out);
    vt_node_set_roll(&n, ndims, dims, shifts);
    return one_in(dev, &n, in);
}

vt_status vt_op_tri(int dev, const char *name, const vt_tensor *out, const vt_tensor *in, int64_t diagonal, int upper) {
    if (!name) name = "vt_op_tri";
    vt_status s = vt_check_device(dev);
    if (!s && (!out || !in)) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: NULL tensor", name);
    if (s) return s;
    vt_node n;
    shape_node(&n, VT_SHAPE_OP_TRI, name, out);
    n.iparams[0] = diagonal;
    n.iparams[1] = upper;
    return one_in(dev, &n, in);
}

/* ------------------------------------------------------------ sort, topk */

static vt_status select_op(int dev, const char *name, vt_shape_op op, const vt_tensor *values,
                           const vt_tensor *indices, const vt_tensor *in, int dim, int64_t k, int flag) {
    vt_status s = vt_check_device(dev);
    if (!s && !in) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: input is NULL", name);
    if (s) return s;
    vt_node n;
    shape_node(&n, op, name, values);
    vt_node_add_out(&n, indices);
    n.iparams[0] = dim;
    n.iparams[1] = flag;
    n.iparams[2] = k;
    return one_in(dev, &n, in);
}

vt_status vt_op_sort(int dev, const char *name, const vt_tensor *values, const vt_tensor *indices, const vt_tensor *in,
                     int dim, int descending) {
    return select_op(dev, name ? name : "vt_op_sort", VT_SHAPE_OP_SORT, values, indices, in, dim, -1, descending);
}

vt_status vt_op_topk(int dev, const char *name, const vt_tensor *values, const vt_tensor *indices, const vt_tensor *in,
                     int dim, int64_t k, int largest) {
    return select_op(dev, name ? name : "vt_op_topk", VT_SHAPE_OP_TOPK, values, indices, in, dim, k, largest);
}

/* ------------------------------------------------------------ ranges, searchsorted */

static vt_status range_op(int dev, const char *name, vt_shape_op op, const vt_tensor *out, vt_scalar a, vt_scalar b,
                          int64_t vec, int64_t chunk) {
    vt_status s = vt_check_device(dev);
    if (!s && !out) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: out is NULL", name);
    if (s) return s;
    vt_node n;
    shape_node(&n, op, name, out);
    vt_node_set_range(&n, a, b, vec, chunk);
    return vt_node_submit(dev, &n);
}

vt_status vt_op_arange(int dev, const char *name, const vt_tensor *out, vt_scalar start, vt_scalar step, int64_t vec,
                       int64_t chunk) {
    return range_op(dev, name ? name : "vt_op_arange", VT_SHAPE_OP_ARANGE, out, start, step, vec, chunk);
}

vt_status vt_op_linspace(int dev, const char *name, const vt_tensor *out, vt_scalar start, vt_scalar end, int64_t vec,
                         int64_t chunk) {
    return range_op(dev, name ? name : "vt_op_linspace", VT_SHAPE_OP_LINSPACE, out, start, end, vec, chunk);
}

vt_status vt_op_searchsorted(int dev, const char *name, const vt_tensor *out, const vt_tensor *sorted,
                             const vt_tensor *values, int right) {
    if (!name) name = "vt_op_searchsorted";
    vt_status s = vt_check_device(dev);
    if (!s && (!out || !sorted || !values)) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: NULL tensor", name);
    if (s) return s;
    vt_node n;
    shape_node(&n, VT_SHAPE_OP_SEARCHSORTED, name, out);
    n.iparams[0] = right;
    s = vt_node_add_src(&n, sorted, NULL);
    return s == VT_OK ? one_in(dev, &n, values) : s;
}
