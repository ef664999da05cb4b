/* ops_shape.c — queued data-movement ops: the kernels' argument checks run
 * on the calling thread (bad shapes fail at the op), then the descriptors
 * are copied into a command run on the device queue. A cat list longer than
 * one command holds is split: each command writes its own slice of out. */
#include <stdlib.h>

#include "kernels/shape/shape.h"

static vt_status prefixed(vt_status s, const char *name) { return s == VT_ERR_INDEX ? s : vt_error_prefix(s, name); }

/* ------------------------------------------------------------ cat */

#define CAT_PER_CMD 6

typedef struct cat_cmd {
    int n, dim;
    vt_tensor out;
    vt_tensor ins[CAT_PER_CMD];
} cat_cmd;

static vt_status cat_kernel(void *p) {
    const cat_cmd *c = p;
    return vt_cat(&c->out, c->n, c->ins, c->dim);
}

vt_status vt_op_cat(int dev, const char *name, const vt_tensor *out, int n, const vt_tensor *ins, int dim) {
    if (!name) name = "vt_op_cat";
    vt_status s = vt_check_device(dev);
    if (s) return s;
    if (!out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: out is NULL", name);
    if ((s = vt_cat_check(out, n, ins, dim))) return s == VT_ERR_INVALID_ARGUMENT ? s : prefixed(s, name);
    /* The inputs are checked against the whole of out at once (as CPU
     * refuses any overlap); the commands then write disjoint slices. */
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
    for (int k0 = 0; s == VT_OK && k0 < n; k0 += CAT_PER_CMD) {
        cat_cmd c;
        memset(&c, 0, sizeof c);
        c.n = n - k0 < CAT_PER_CMD ? n - k0 : CAT_PER_CMD;
        c.dim = dim;
        int64_t len = 0;
        for (int k = 0; k < c.n; k++) c.ins[k] = local[k0 + k], len += local[k0 + k].sizes[dim];
        c.out = vt_shape_narrow(out, dim, at, len);
        at += len;
        if (len == 0) continue;
        vt_use cu[1 + CAT_PER_CMD] = {{&c.out, VT_USE_WRITE, 0}};
        for (int k = 0; k < c.n; k++) cu[k + 1] = (vt_use){&c.ins[k], VT_USE_READ, 0};
        s = vt_enqueue_uses(dev, name, cat_kernel, &c, sizeof c, cu, c.n + 1);
    }
    vt_prepared_release(dev, &all); /* staged inputs go after the commands that read them */
    free(local);
    return s;
}

/* ------------------------------------------------------------ flip, roll, tril/triu */

typedef struct flip_cmd {
    uint64_t mask;
    vt_tensor out, in;
} flip_cmd;

static vt_status flip_kernel(void *p) {
    const flip_cmd *c = p;
    return vt_flip(&c->out, &c->in, c->mask);
}

vt_status vt_op_flip(int dev, const char *name, const vt_tensor *out, const vt_tensor *in, uint64_t dims_mask) {
    if (!name) name = "vt_op_flip";
    vt_status s = vt_check_device(dev);
    if (!s && (!out || !in)) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: NULL tensor", name);
    if (s) return s;
    if ((s = vt_flip_check(out, in, dims_mask))) return prefixed(s, name);
    flip_cmd c;
    memset(&c, 0, sizeof c);
    c.mask = dims_mask, c.out = *out, c.in = *in;
    vt_use u[2] = {{&c.out, VT_USE_WRITE, 0}, {&c.in, VT_USE_READ | VT_USE_STAGE, 0}};
    return vt_enqueue_uses(dev, name, flip_kernel, &c, sizeof c, u, 2);
}

typedef struct roll_cmd {
    int ndims;
    int dims[VT_MAX_DIMS];
    int64_t shifts[VT_MAX_DIMS];
    vt_tensor out, in;
} roll_cmd;

static vt_status roll_kernel(void *p) {
    const roll_cmd *c = p;
    return vt_roll(&c->out, &c->in, c->ndims, c->dims, c->shifts);
}

vt_status vt_op_roll(int dev, const char *name, const vt_tensor *out, const vt_tensor *in, int ndims, const int *dims,
                     const int64_t *shifts) {
    if (!name) name = "vt_op_roll";
    vt_status s = vt_check_device(dev);
    if (!s && (!out || !in)) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: NULL tensor", name);
    if (s) return s;
    if ((s = vt_roll_check(out, in, ndims, dims, shifts))) return prefixed(s, name);
    roll_cmd c;
    memset(&c, 0, sizeof c);
    c.ndims = ndims, c.out = *out, c.in = *in;
    for (int k = 0; k < ndims; k++) c.dims[k] = dims[k], c.shifts[k] = shifts[k];
    vt_use u[2] = {{&c.out, VT_USE_WRITE, 0}, {&c.in, VT_USE_READ | VT_USE_STAGE, 0}};
    return vt_enqueue_uses(dev, name, roll_kernel, &c, sizeof c, u, 2);
}

typedef struct tri_cmd {
    int64_t diagonal;
    int upper;
    vt_tensor out, in;
} tri_cmd;

static vt_status tri_kernel(void *p) {
    const tri_cmd *c = p;
    return vt_tri(&c->out, &c->in, c->diagonal, c->upper);
}

vt_status vt_op_tri(int dev, const char *name, const vt_tensor *out, const vt_tensor *in, int64_t diagonal, int upper) {
    if (!name) name = "vt_op_tri";
    vt_status s = vt_check_device(dev);
    if (!s && (!out || !in)) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: NULL tensor", name);
    if (s) return s;
    if ((s = vt_tri_check(out, in))) return prefixed(s, name);
    tri_cmd c;
    memset(&c, 0, sizeof c);
    c.diagonal = diagonal, c.upper = upper, c.out = *out, c.in = *in;
    /* elementwise: tril_ in place is exact */
    vt_use u[2] = {{&c.out, VT_USE_WRITE, 0}, {&c.in, VT_USE_READ | VT_USE_ALIAS_OK | VT_USE_STAGE, 0}};
    return vt_enqueue_uses(dev, name, tri_kernel, &c, sizeof c, u, 2);
}

/* ------------------------------------------------------------ sort, topk */

typedef struct sel_cmd {
    int dim, flag, has_v, has_i;
    int64_t k; /* < 0: sort */
    vt_tensor values, indices, in;
} sel_cmd;

static vt_status sel_kernel(void *p) {
    const sel_cmd *c = p;
    const vt_tensor *v = c->has_v ? &c->values : NULL, *i = c->has_i ? &c->indices : NULL;
    return c->k < 0 ? vt_sort(v, i, &c->in, c->dim, c->flag) : vt_topk(v, i, &c->in, c->dim, c->k, c->flag);
}

static vt_status sel_enqueue(int dev, const char *name, const vt_tensor *values, const vt_tensor *indices,
                             const vt_tensor *in, int dim, int64_t k, int flag) {
    sel_cmd c;
    memset(&c, 0, sizeof c);
    c.dim = dim, c.flag = flag, c.k = k, c.in = *in;
    c.has_v = values != NULL, c.has_i = indices != NULL;
    if (values) c.values = *values;
    if (indices) c.indices = *indices;
    vt_use u[3] = {{&c.in, VT_USE_READ | VT_USE_STAGE, 0}};
    int n = 1;
    if (values) u[n++] = (vt_use){&c.values, VT_USE_WRITE, 0};
    if (indices) u[n++] = (vt_use){&c.indices, VT_USE_WRITE, 0};
    return vt_enqueue_uses(dev, name, sel_kernel, &c, sizeof c, u, n);
}

vt_status vt_op_sort(int dev, const char *name, const vt_tensor *values, const vt_tensor *indices, const vt_tensor *in,
                     int dim, int descending) {
    if (!name) name = "vt_op_sort";
    vt_status s = vt_check_device(dev);
    if (!s && !in) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: input is NULL", name);
    if (s) return s;
    int d;
    if ((s = vt_sort_check(values, indices, in, dim, &d))) return prefixed(s, name);
    return sel_enqueue(dev, name, values, indices, in, d, -1, descending);
}

vt_status vt_op_topk(int dev, const char *name, const vt_tensor *values, const vt_tensor *indices, const vt_tensor *in,
                     int dim, int64_t k, int largest) {
    if (!name) name = "vt_op_topk";
    vt_status s = vt_check_device(dev);
    if (!s && !in) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: input is NULL", name);
    if (s) return s;
    int d;
    if ((s = vt_topk_check(values, indices, in, dim, k, &d))) return prefixed(s, name);
    return sel_enqueue(dev, name, values, indices, in, d, k, largest);
}

/* ------------------------------------------------------------ ranges, searchsorted */

typedef struct range_cmd {
    int linspace;
    vt_scalar a, b;
    int64_t vec, chunk;
    vt_tensor out;
} range_cmd;

static vt_status range_kernel(void *p) {
    const range_cmd *c = p;
    return c->linspace ? vt_linspace(&c->out, c->a, c->b, c->vec, c->chunk)
                       : vt_arange(&c->out, c->a, c->b, c->vec, c->chunk);
}

static vt_status range_enqueue(int dev, const char *name, int linspace, const vt_tensor *out, vt_scalar a, vt_scalar b,
                               int64_t vec, int64_t chunk) {
    vt_status s = vt_check_device(dev);
    if (!s && !out) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: out is NULL", name);
    if (s) return s;
    if ((s = vt_range_check(out, linspace ? "linspace" : "arange"))) return prefixed(s, name);
    range_cmd c;
    memset(&c, 0, sizeof c);
    c.linspace = linspace, c.a = a, c.b = b, c.vec = vec, c.chunk = chunk, c.out = *out;
    vt_use u[1] = {{&c.out, VT_USE_WRITE, 0}};
    return vt_enqueue_uses(dev, name, range_kernel, &c, sizeof c, u, 1);
}

vt_status vt_op_arange(int dev, const char *name, const vt_tensor *out, vt_scalar start, vt_scalar step, int64_t vec,
                       int64_t chunk) {
    return range_enqueue(dev, name ? name : "vt_op_arange", 0, out, start, step, vec, chunk);
}

vt_status vt_op_linspace(int dev, const char *name, const vt_tensor *out, vt_scalar start, vt_scalar end, int64_t vec,
                         int64_t chunk) {
    return range_enqueue(dev, name ? name : "vt_op_linspace", 1, out, start, end, vec, chunk);
}

typedef struct ss_cmd {
    int right;
    vt_tensor out, sorted, values;
} ss_cmd;

static vt_status ss_kernel(void *p) {
    const ss_cmd *c = p;
    return vt_searchsorted(&c->out, &c->sorted, &c->values, c->right);
}

vt_status vt_op_searchsorted(int dev, const char *name, const vt_tensor *out, const vt_tensor *sorted,
                             const vt_tensor *values, int right) {
    if (!name) name = "vt_op_searchsorted";
    vt_status s = vt_check_device(dev);
    if (!s && (!out || !sorted || !values)) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: NULL tensor", name);
    if (s) return s;
    if ((s = vt_searchsorted_check(out, sorted, values))) return prefixed(s, name);
    ss_cmd c;
    memset(&c, 0, sizeof c);
    c.right = right, c.out = *out, c.sorted = *sorted, c.values = *values;
    vt_use u[3] = {{&c.out, VT_USE_WRITE, 0},
                   {&c.sorted, VT_USE_READ | VT_USE_STAGE, 0},
                   {&c.values, VT_USE_READ | VT_USE_STAGE, 0}};
    return vt_enqueue_uses(dev, name, ss_kernel, &c, sizeof c, u, 3);
}
