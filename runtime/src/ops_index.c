/* ops_index.c — queued indexing ops: the kernels' shape and dtype checks
 * run on the calling thread (bad arguments fail at the op), descriptors are
 * copied into a command, and the kernel runs on the device queue, where
 * bad index values are found (reported at the next synchronisation). As on
 * CPU, an output may not overlap the data or indices it is computed from
 * (at::assert_no_overlap); fills of repeated elements are allowed. */
#include <stdlib.h>

#include "graph/node.h"
#include "kernels/index/index.h"

static vt_status pre(int dev, const char *name) {
    (void)name;
    return vt_check_device(dev);
}

/* Shape errors keep the kernels' PyTorch-style wording (no op prefix). */
static vt_status fail(vt_status s) { return s; }

/* ------------------------------------------------------------ along one dim */

typedef struct dim_cmd {
    int kind; /* 0 index_select, 1 gather, 2 scatter, 3 index_add, 4 index_copy, 5 index_fill */
    int dim, has_src, has_value_t, include_self;
    vt_scatter_reduce op;
    vt_scalar value;
    vt_tensor out, in, index, src, value_t;
} dim_cmd;

static vt_status dim_kernel(void *p) {
    const dim_cmd *c = p;
    const vt_tensor *src = c->has_src ? &c->src : NULL, *vt = c->has_value_t ? &c->value_t : NULL;
    switch (c->kind) {
    case 0: return vt_index_select(&c->out, &c->in, c->dim, &c->index);
    case 1: return vt_gather(&c->out, &c->in, c->dim, &c->index);
    case 2: return vt_scatter(&c->out, c->dim, &c->index, src, vt, c->value, c->op, c->include_self);
    case 3: return vt_index_add(&c->out, c->dim, &c->index, src, c->value);
    case 4: return vt_index_copy(&c->out, c->dim, &c->index, src);
    default: return vt_index_fill(&c->out, c->dim, &c->index, vt, c->value);
    }
}

static vt_status dim_enqueue(int dev, const char *name, dim_cmd *c, const vt_tensor *out, const vt_tensor *in,
                             const vt_tensor *index, const vt_tensor *src, const vt_tensor *value_t) {
    c->out = *out;
    if (in) c->in = *in;
    c->index = *index;
    c->has_src = src != NULL;
    if (src) c->src = *src;
    c->has_value_t = value_t != NULL;
    if (value_t) c->value_t = *value_t;
    /* select and gather make out; the others update it in place */
    unsigned ow = VT_USE_WRITE | (in ? 0 : VT_USE_READ) | (c->kind == 5 ? VT_USE_SAME_VALUE : 0);
    vt_use u[4] = {{&c->out, ow, 0}, {&c->index, VT_USE_READ, 0}};
    int n = 2;
    if (in) u[n++] = (vt_use){&c->in, VT_USE_READ, 0};
    if (src) u[n++] = (vt_use){&c->src, VT_USE_READ, 0};
    if (value_t) u[n++] = (vt_use){&c->value_t, VT_USE_READ, 0};
    return vt_enqueue_uses(dev, name, dim_kernel, c, sizeof *c, u, n);
}

vt_status vt_op_index_select(int dev, const char *name, const vt_tensor *out, const vt_tensor *in, int dim,
                             const vt_tensor *index) {
    vt_status s = pre(dev, name);
    if (s == VT_OK) s = ix_check_select(out, in, dim, index);
    if (s != VT_OK) return fail(s);
    dim_cmd c;
    memset(&c, 0, sizeof c);
    c.kind = 0, c.dim = dim;
    return dim_enqueue(dev, name, &c, out, in, index, NULL, NULL);
}

vt_status vt_op_gather(int dev, const char *name, const vt_tensor *out, const vt_tensor *in, int dim,
                       const vt_tensor *index) {
    vt_status s = pre(dev, name);
    if (s == VT_OK) s = ix_check_gather(out, in, dim, index);
    if (s != VT_OK) return fail(s);
    dim_cmd c;
    memset(&c, 0, sizeof c);
    c.kind = 1, c.dim = dim;
    return dim_enqueue(dev, name, &c, out, in, index, NULL, NULL);
}

vt_status vt_op_scatter(int dev, const char *name, const vt_tensor *out, int dim, const vt_tensor *index,
                        const vt_tensor *src, const vt_tensor *value_t, vt_scalar value, vt_scatter_reduce op,
                        int include_self) {
    vt_status s = pre(dev, name);
    if (s == VT_OK) s = ix_check_scatter(out, dim, index, src, value_t, op);
    if (s != VT_OK) return fail(s);
    dim_cmd c;
    memset(&c, 0, sizeof c);
    c.kind = 2, c.dim = dim, c.op = op, c.include_self = include_self, c.value = value;
    return dim_enqueue(dev, name, &c, out, NULL, index, src, value_t);
}

vt_status vt_op_index_add(int dev, const char *name, const vt_tensor *out, int dim, const vt_tensor *index,
                          const vt_tensor *src, vt_scalar alpha) {
    vt_status s = pre(dev, name);
    if (s == VT_OK && !src) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "index_add(): source is NULL");
    if (s == VT_OK) s = ix_check_index_update("index_add", out, dim, index, src);
    if (s != VT_OK) return fail(s);
    dim_cmd c;
    memset(&c, 0, sizeof c);
    c.kind = 3, c.dim = dim, c.value = alpha;
    return dim_enqueue(dev, name, &c, out, NULL, index, src, NULL);
}

vt_status vt_op_index_copy(int dev, const char *name, const vt_tensor *out, int dim, const vt_tensor *index,
                           const vt_tensor *src) {
    vt_status s = pre(dev, name);
    if (s == VT_OK && !src) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "index_copy(): source is NULL");
    if (s == VT_OK) s = ix_check_index_update("index_copy", out, dim, index, src);
    if (s != VT_OK) return fail(s);
    dim_cmd c;
    memset(&c, 0, sizeof c);
    c.kind = 4, c.dim = dim;
    return dim_enqueue(dev, name, &c, out, NULL, index, src, NULL);
}

vt_status vt_op_index_fill(int dev, const char *name, const vt_tensor *out, int dim, const vt_tensor *index,
                           const vt_tensor *value_t, vt_scalar value) {
    vt_status s = pre(dev, name);
    if (s == VT_OK) s = ix_check_index_update("index_fill", out, dim, index, NULL);
    if (s == VT_OK && value_t && vt_tensor_numel(value_t) != 1)
        s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "index_fill(): value must have one element");
    if (s != VT_OK) return fail(s);
    dim_cmd c;
    memset(&c, 0, sizeof c);
    c.kind = 5, c.dim = dim, c.value = value;
    return dim_enqueue(dev, name, &c, out, NULL, index, NULL, value_t);
}

/* ------------------------------------------------------------ take */

typedef struct take_cmd {
    vt_tensor out, in, index;
} take_cmd;

static vt_status take_kernel(void *p) {
    const take_cmd *c = p;
    return vt_take(&c->out, &c->in, &c->index);
}

vt_status vt_op_take(int dev, const char *name, const vt_tensor *out, const vt_tensor *in, const vt_tensor *index) {
    vt_status s = pre(dev, name);
    if (s == VT_OK && (!out || !in || !index)) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "take(): NULL tensor");
    if (s == VT_OK) s = ix_check_index_dtype(index, "take");
    if (s == VT_OK && (out->dtype != in->dtype || out->ndim != index->ndim ||
                       vt_tensor_numel(out) != vt_tensor_numel(index)))
        s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "take(): out must have index's shape and input's dtype");
    if (s != VT_OK) return s;
    take_cmd c = {*out, *in, *index};
    vt_use u[3] = {{&c.out, VT_USE_WRITE, 0}, {&c.in, VT_USE_READ, 0}, {&c.index, VT_USE_READ, 0}};
    return vt_enqueue_uses(dev, name, take_kernel, &c, sizeof c, u, 3);
}

/* ------------------------------------------------------------ advanced indexing */

/* The index list lives on the heap (16 descriptors exceed VT_MAX_ARGS),
 * owned by the command. */
typedef struct adv_list {
    int n;
    unsigned present;
    vt_tensor t[VT_MAX_DIMS];
} adv_list;

typedef struct adv_cmd {
    int put, accumulate;
    adv_list *list;
    vt_tensor out, in;
} adv_cmd;

static vt_status adv_kernel(void *p) {
    const adv_cmd *c = p;
    const vt_tensor *ptrs[VT_MAX_DIMS];
    for (int i = 0; i < c->list->n; i++) ptrs[i] = (c->list->present >> i) & 1 ? &c->list->t[i] : NULL;
    return c->put ? vt_index_put(&c->out, c->list->n, ptrs, &c->in, c->accumulate)
                  : vt_index(&c->out, &c->in, c->list->n, ptrs);
}

static vt_status adv_enqueue(int dev, const char *name, int put, int accumulate, const vt_tensor *out,
                             const vt_tensor *in, int n, const vt_tensor *const *indices) {
    vt_status s = pre(dev, name);
    if (s != VT_OK) return s;
    const vt_tensor *self = put ? out : in, *other = put ? in : out;
    int32_t rnd;
    int64_t rsz[VT_MAX_DIMS];
    if ((s = vt_index_shape(self, n, indices, &rnd, rsz)) != VT_OK) return s;
    if (!other) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: NULL tensor", name);
    /* CPU's order: the values' shape, then their dtype */
    if (put) {
        vt_tensor v;
        if ((s = vt_broadcast_to(other, rnd, rsz, &v)) != VT_OK) return ix_values_mismatch(other, rnd, rsz, s);
    } else if (other->ndim != rnd || memcmp(other->sizes, rsz, sizeof(int64_t) * (size_t)rnd)) {
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "index(): out must have the result's shape");
    }
    if (other->dtype != self->dtype)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "Index put requires the source and destination dtypes match, "
                                                     "got %s for the destination and %s for the source.",
                            vt_dtype_name(self->dtype), vt_dtype_name(other->dtype));
    adv_cmd c;
    memset(&c, 0, sizeof c);
    c.list = calloc(1, sizeof *c.list);
    if (!c.list) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: no host memory for the index list", name);
    c.list->n = n;
    for (int i = 0; i < n; i++)
        if (indices[i]) c.list->present |= 1u << i, c.list->t[i] = *indices[i];
    c.put = put, c.accumulate = accumulate;
    c.out = *out;
    c.in = *in;
    /* index_put_ updates out in place (repeated elements allowed, as CPU
     * allows with a deprecation warning); its values and indices may not
     * overlap it. index makes out from in. */
    vt_use u[2 + VT_MAX_DIMS] = {{&c.out, VT_USE_WRITE | (put ? VT_USE_READ | VT_USE_SAME_VALUE : 0), 0},
                                 {&c.in, VT_USE_READ, 0}};
    int nu = 2;
    for (int i = 0; i < n; i++)
        if (indices[i]) u[nu++] = (vt_use){&c.list->t[i], VT_USE_READ, 0};
    vt_prepared p;
    if ((s = vt_uses_prepare(dev, name, u, nu, &p)) != VT_OK) {
        free(c.list);
        return s;
    }
    p.payload = c.list;
    return vt_enqueue_prepared(dev, name, adv_kernel, &c, sizeof c, &p, VT_ENQ_AUTO);
}

vt_status vt_op_index(int dev, const char *name, const vt_tensor *out, const vt_tensor *in, int n,
                      const vt_tensor *const *indices) {
    if (!out || !in) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "index(): NULL tensor");
    return adv_enqueue(dev, name, 0, 0, out, in, n, indices);
}

vt_status vt_op_index_put(int dev, const char *name, const vt_tensor *out, int n, const vt_tensor *const *indices,
                          const vt_tensor *values, int accumulate) {
    if (!out || !values) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "index_put(): NULL tensor");
    return adv_enqueue(dev, name, 1, accumulate, out, values, n, indices);
}

/* ------------------------------------------------------------ masks and nonzero */

typedef struct mask_cmd {
    int kind; /* 0 count, 1 nonzero, 2 masked_fill, 3 masked_select, 4 masked_scatter */
    int has_value_t;
    vt_scalar value;
    vt_tensor out, in, mask, value_t;
} mask_cmd;

static vt_status mask_kernel(void *p) {
    const mask_cmd *c = p;
    switch (c->kind) {
    case 0: return vt_count_nonzero(&c->out, &c->in);
    case 1: return vt_nonzero(&c->out, &c->in);
    case 2: return vt_masked_fill(&c->out, &c->mask, c->has_value_t ? &c->value_t : NULL, c->value);
    case 3: return vt_masked_select(&c->out, &c->in, &c->mask);
    default: return vt_masked_scatter(&c->out, &c->mask, &c->in);
    }
}

static vt_status mask_enqueue(int dev, const char *name, int kind, const vt_tensor *out, const vt_tensor *in,
                              const vt_tensor *mask, const vt_tensor *value_t, vt_scalar value) {
    vt_status s = pre(dev, name);
    if (s != VT_OK) return s;
    if (!out || (kind != 2 && !in) || (kind >= 2 && !mask))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: NULL tensor", name);
    if ((s = vt_tensor_validate(out, "out")) != VT_OK) return vt_error_prefix(s, name);
    if (in && (s = vt_tensor_validate(in, "input")) != VT_OK) return vt_error_prefix(s, name);
    if (mask && (s = ix_check_mask(name, mask)) != VT_OK) return s;
    int32_t nd;
    int64_t sz[VT_MAX_DIMS];
    vt_tensor tmp;
    switch (kind) {
    case 0:
        if (out->dtype != VT_I64 || vt_tensor_numel(out) != 1)
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: count must be one int64 element", name);
        break;
    case 1:
        if (out->dtype != VT_I64 || out->ndim != 2 || out->sizes[1] != in->ndim)
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: out must be int64 [n, ndim]", name);
        break;
    case 2:
    case 4:
        if ((s = vt_broadcast_to(mask, out->ndim, out->sizes, &tmp)) != VT_OK) return s;
        if (kind == 4 && in->dtype != out->dtype)
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: source and self must have the same dtype", name);
        if (value_t && vt_tensor_numel(value_t) != 1)
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: value must have one element", name);
        break;
    default:
        if ((s = ix_broadcast_shape(in, mask, &nd, sz)) != VT_OK) return s;
        if (out->ndim != 1 || out->dtype != in->dtype)
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: out must be 1-d of input's dtype", name);
        break;
    }
    mask_cmd c;
    memset(&c, 0, sizeof c);
    c.kind = kind;
    c.value = value;
    c.out = *out;
    if (in) c.in = *in;
    if (mask) c.mask = *mask;
    c.has_value_t = value_t != NULL;
    if (value_t) c.value_t = *value_t;
    /* count and nonzero make out; masked_select makes out from in; fill and
     * scatter update out in place (a fill may repeat elements, and its mask
     * may be out itself, as on CPU) */
    vt_use u[4];
    int nu = 0;
    if (kind == 2) {
        u[nu++] = (vt_use){&c.out, VT_USE_WRITE | VT_USE_READ | VT_USE_SAME_VALUE, 0};
        u[nu++] = (vt_use){&c.mask, VT_USE_READ | VT_USE_ALIAS_OK, 0};
        if (value_t) u[nu++] = (vt_use){&c.value_t, VT_USE_READ, 0};
    } else {
        u[nu++] = (vt_use){&c.out, VT_USE_WRITE | (kind == 4 ? VT_USE_READ : 0), 0};
        u[nu++] = (vt_use){&c.in, VT_USE_READ, 0};
        if (mask) u[nu++] = (vt_use){&c.mask, VT_USE_READ, 0};
    }
    return vt_enqueue_uses(dev, name, mask_kernel, &c, sizeof c, u, nu);
}

vt_status vt_op_count_nonzero(int dev, const char *name, const vt_tensor *count, const vt_tensor *in) {
    return mask_enqueue(dev, name, 0, count, in, NULL, NULL, vt_scalar_from_int(0));
}

vt_status vt_op_nonzero(int dev, const char *name, const vt_tensor *out, const vt_tensor *in) {
    return mask_enqueue(dev, name, 1, out, in, NULL, NULL, vt_scalar_from_int(0));
}

/* out = where(mask, value, out): an elementwise node, so DeferAndFuse
 * records it and fuses it with what computes out (the scores of an
 * attention written out: a scale, the mask, a softmax). An out with
 * repeated elements (an expanded tensor, which CPU fills with a
 * deprecation warning) cannot be an elementwise output: the mask kernel
 * fills it. */
vt_status vt_op_masked_fill(int dev, const char *name, const vt_tensor *out, const vt_tensor *mask,
                            const vt_tensor *value_t, vt_scalar value) {
    if (!name) name = "vt_op_masked_fill";
    if (!out || !mask) return mask_enqueue(dev, name, 2, out, NULL, mask, value_t, value); /* its NULL error */
    vt_status s = vt_tensor_validate(out, "out"); /* before its geometry is read */
    if (s != VT_OK) return vt_error_prefix(s, name);
    if (vt_view_internal_overlap(out)) return mask_enqueue(dev, name, 2, out, NULL, mask, value_t, value);
    s = ix_check_mask(name, mask);
    if (s == VT_OK && value_t && (s = vt_tensor_validate(value_t, "value")) != VT_OK) s = vt_error_prefix(s, name);
    if (s == VT_OK && value_t && vt_tensor_numel(value_t) != 1)
        s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: value must have one element", name);
    if (s != VT_OK) return s;
    vt_node n;
    vt_node_init(&n, VT_NODE_WHERE, 0, name);
    n.compute = out->dtype; /* a host value is held in out's dtype, as the mask kernel converts it */
    vt_node_add_out(&n, out);
    s = vt_node_add_src(&n, mask, NULL);
    if (s == VT_OK) s = value_t ? vt_node_add_src(&n, value_t, NULL) : vt_node_add_src(&n, NULL, &value);
    if (s == VT_OK) s = vt_node_add_src(&n, out, NULL);
    return s == VT_OK ? vt_node_submit(dev, &n) : s;
}

vt_status vt_op_masked_select(int dev, const char *name, const vt_tensor *out, const vt_tensor *in,
                              const vt_tensor *mask) {
    return mask_enqueue(dev, name, 3, out, in, mask, NULL, vt_scalar_from_int(0));
}

vt_status vt_op_masked_scatter(int dev, const char *name, const vt_tensor *out, const vt_tensor *mask,
                               const vt_tensor *source) {
    return mask_enqueue(dev, name, 4, out, source, mask, NULL, vt_scalar_from_int(0));
}

/* ------------------------------------------------------------ embedding backward */

typedef struct emb_cmd {
    int64_t padding_idx;
    int scale;
    vt_tensor gw, grad, indices;
} emb_cmd;

static vt_status emb_kernel(void *p) {
    const emb_cmd *c = p;
    return vt_embedding_dense_backward(&c->gw, &c->grad, &c->indices, c->padding_idx, c->scale);
}

vt_status vt_op_embedding_dense_backward(int dev, const char *name, const vt_tensor *grad_weight,
                                         const vt_tensor *grad, const vt_tensor *indices, int64_t padding_idx,
                                         int scale_grad_by_freq) {
    vt_status s = pre(dev, name);
    if (s != VT_OK) return s;
    if (!grad_weight || !grad || !indices) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: NULL tensor", name);
    if ((s = ix_check_index_dtype(indices, "embedding_dense_backward")) != VT_OK) return s;
    if (grad_weight->ndim != 2 || grad->ndim != 2 || indices->ndim != 1 || grad_weight->sizes[1] != grad->sizes[1] ||
        grad->sizes[0] != indices->sizes[0] || grad->dtype != grad_weight->dtype ||
        !vt_dtype_is_float(grad->dtype))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT,
                            "%s: expected float grad_weight [V, D], grad [N, D] and indices [N]", name);
    emb_cmd c = {padding_idx, scale_grad_by_freq, *grad_weight, *grad, *indices};
    vt_use u[3] = {{&c.gw, VT_USE_WRITE, 0}, {&c.grad, VT_USE_READ, 0}, {&c.indices, VT_USE_READ, 0}};
    return vt_enqueue_uses(dev, name, emb_kernel, &c, sizeof c, u, 3);
}
