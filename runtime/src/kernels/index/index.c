/* index.c — gather, scatter (assign / reduce / mean), index_select,
 * index_add, index_copy, index_fill and take on the dim walk of
 * index_walk.c, with the argument checks the queued ops share. */
#include <stdio.h>
#include <stdlib.h>

#include "index.h"

/* ------------------------------------------------------------ checks */

vt_status ix_check_index_dtype(const vt_tensor *index, const char *op) {
    if (index->dtype != VT_I64 && index->dtype != VT_I32)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): Expected dtype int32 or int64 for index, got %s", op,
                            vt_dtype_name(index->dtype));
    return VT_OK;
}

static vt_status validate(const char *op, const vt_tensor *t, const char *what) {
    if (!t) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): %s is NULL", op, what);
    vt_status s = vt_tensor_validate(t, what);
    if (s != VT_OK) return vt_error_prefix(s, op);
    if (!t->data && vt_tensor_numel(t) > 0)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): %s has no data", op, what);
    return VT_OK;
}

static vt_status check_dim(const char *op, int dim, int ndim) {
    int n = ndim ? ndim : 1;
    if (dim < 0 || dim >= n)
        return vt_set_error(VT_ERR_INDEX, "%s(): dim %d out of range for a %d-dim tensor", op, dim, ndim);
    return VT_OK;
}

static vt_status same_dtype(const char *op, const vt_tensor *a, const vt_tensor *b) {
    if (a->dtype != b->dtype)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): expected %s and %s to have the same dtype", op,
                            vt_dtype_name(a->dtype), vt_dtype_name(b->dtype));
    return VT_OK;
}

/* A 0-d view as a 1-element 1-d one (PyTorch treats them alike here). */
static vt_tensor promote(const vt_tensor *t) {
    vt_tensor r = *t;
    if (r.ndim == 0) r.ndim = 1, r.sizes[0] = 1, r.strides[0] = 1;
    return r;
}

static vt_status check_vector_index(const char *op, const vt_tensor *index) {
    vt_status s = validate(op, index, "index");
    if (s == VT_OK) s = ix_check_index_dtype(index, op);
    if (s == VT_OK && index->ndim > 1)
        s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): Index is supposed to be a vector", op);
    return s;
}

vt_status ix_check_select(const vt_tensor *out, const vt_tensor *in, int dim, const vt_tensor *index) {
    const char *op = "index_select";
    vt_status s = validate(op, out, "out");
    if (s == VT_OK) s = validate(op, in, "input");
    if (s == VT_OK) s = check_vector_index(op, index);
    if (s == VT_OK) s = same_dtype(op, out, in);
    if (s == VT_OK) s = check_dim(op, dim, in->ndim);
    if (s != VT_OK) return s;
    vt_tensor o = promote(out), x = promote(in);
    if (o.ndim != x.ndim) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): out must have input's ndim", op);
    for (int d = 0; d < x.ndim; d++) {
        int64_t want = d == dim ? vt_tensor_numel(index) : x.sizes[d];
        if (o.sizes[d] != want)
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): out has size %lld at dim %d, expected %lld", op,
                                (long long)o.sizes[d], d, (long long)want);
    }
    return VT_OK;
}

vt_status ix_check_gather(const vt_tensor *out, const vt_tensor *in, int dim, const vt_tensor *index) {
    const char *op = "gather";
    vt_status s = validate(op, out, "out");
    if (s == VT_OK) s = validate(op, in, "input");
    if (s == VT_OK) s = validate(op, index, "index");
    if (s == VT_OK) s = ix_check_index_dtype(index, op);
    if (s == VT_OK) s = same_dtype(op, out, in);
    if (s == VT_OK) s = check_dim(op, dim, in->ndim);
    if (s != VT_OK) return s;
    vt_tensor o = promote(out), x = promote(in), ix = promote(index);
    if (ix.ndim != x.ndim || o.ndim != x.ndim)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT,
                            "%s(): Index tensor must have the same number of dimensions as input tensor", op);
    for (int d = 0; d < x.ndim; d++) {
        if (o.sizes[d] != ix.sizes[d])
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): out must have index's shape", op);
        if (d != dim && ix.sizes[d] > x.sizes[d])
            return vt_set_error(VT_ERR_INVALID_ARGUMENT,
                                "%s(): Size does not match at dimension %d expected index to be smaller than self "
                                "apart from dimension %d",
                                op, d, dim);
    }
    return VT_OK;
}

vt_status ix_check_scatter(const vt_tensor *out, int dim, const vt_tensor *index, const vt_tensor *src,
                           const vt_tensor *value_t, vt_scatter_reduce op_) {
    const char *op = "scatter";
    vt_status s = validate(op, out, "out");
    if (s == VT_OK) s = validate(op, index, "index");
    if (s == VT_OK) s = ix_check_index_dtype(index, op);
    if (s == VT_OK) s = check_dim(op, dim, out->ndim);
    if (s == VT_OK && src) s = validate(op, src, "src");
    if (s == VT_OK && src) s = same_dtype(op, out, src);
    if (s == VT_OK && value_t) s = validate(op, value_t, "value");
    if (s == VT_OK && value_t && vt_tensor_numel(value_t) != 1)
        s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): value must have one element", op);
    if (s == VT_OK && ((int)op_ < 0 || op_ > VT_SCATTER_AMIN))
        s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): unknown reduction %d", op, (int)op_);
    if (s != VT_OK) return s;
    vt_tensor o = promote(out), ix = promote(index), sr;
    if (src) sr = promote(src);
    if (ix.ndim != o.ndim || (src && sr.ndim != o.ndim))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT,
                            "%s(): Index tensor must have the same number of dimensions as self tensor", op);
    for (int d = 0; d < o.ndim; d++) {
        if ((d != dim && ix.sizes[d] > o.sizes[d]) || (src && ix.sizes[d] > sr.sizes[d]))
            return vt_set_error(VT_ERR_INVALID_ARGUMENT,
                                "%s(): Expected index %s to be smaller than self apart from dimension %d and to be "
                                "smaller size than src",
                                op, "shape", dim);
    }
    return VT_OK;
}

vt_status ix_check_index_update(const char *op, const vt_tensor *out, int dim, const vt_tensor *index,
                                const vt_tensor *src) {
    vt_status s = validate(op, out, "out");
    if (s == VT_OK) s = check_vector_index(op, index);
    if (s == VT_OK) s = check_dim(op, dim, out->ndim);
    if (s == VT_OK && src) s = validate(op, src, "source");
    if (s == VT_OK && src) s = same_dtype(op, out, src);
    if (s != VT_OK || !src) return s;
    vt_tensor o = promote(out), sr = promote(src);
    if (o.ndim != sr.ndim)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): source and self must have the same ndim", op);
    for (int d = 0; d < o.ndim; d++) {
        int64_t want = d == dim ? vt_tensor_numel(index) : o.sizes[d];
        if (sr.sizes[d] != want)
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): source has size %lld at dim %d, expected %lld", op,
                                (long long)sr.sizes[d], d, (long long)want);
    }
    return VT_OK;
}

/* ------------------------------------------------------------ walks */

static vt_status walk(int ndim, const int64_t *shape, int dim, const vt_tensor *t0, const vt_tensor *t1,
                      const int64_t *st1, const vt_tensor *idx, const int64_t *st2, int64_t xs, int64_t bound,
                      int wrap, int gather, vt_dtype dt, ix_mode mode, vt_scalar alpha, int conflicts,
                      const char *op, int err_dim, const void *value_buf) {
    ix_walk w;
    char *base[3];
    const int64_t *strides[3] = {t0->strides, st1, st2};
    base[0] = vt_base(t0);
    base[1] = value_buf ? (char *)value_buf : vt_base(t1);
    base[2] = vt_base(idx);
    ix_walk_init(&w, ndim, shape, dim, base, strides);
    w.xs = xs;
    w.bound = bound;
    w.wrap = wrap;
    w.gather = gather;
    w.is64 = idx->dtype == VT_I64;
    return ix_walk_run(&w, dt, mode, alpha, conflicts, op, err_dim);
}

static const int64_t zeros[VT_MAX_DIMS];

vt_status vt_gather(const vt_tensor *out, const vt_tensor *in, int dim, const vt_tensor *index) {
    vt_status s = ix_check_gather(out, in, dim, index);
    if (s != VT_OK) return s;
    vt_tensor o = promote(out), x = promote(in), ix = promote(index);
    if (vt_tensor_numel(&o) == 0) return VT_OK;
    return walk(ix.ndim, ix.sizes, dim, &o, &x, x.strides, &ix, ix.strides, x.strides[dim], x.sizes[dim], 0, 1,
                x.dtype, IX_COPY, vt_scalar_from_int(1), 0, "gather", dim, NULL);
}

vt_status vt_index_select(const vt_tensor *out, const vt_tensor *in, int dim, const vt_tensor *index) {
    vt_status s = ix_check_select(out, in, dim, index);
    if (s != VT_OK) return s;
    vt_tensor o = promote(out), x = promote(in), ix = promote(index);
    if (vt_tensor_numel(&o) == 0) return VT_OK;
    int64_t st2[VT_MAX_DIMS] = {0};
    st2[dim] = ix.strides[0];
    return walk(o.ndim, o.sizes, dim, &o, &x, x.strides, &ix, st2, x.strides[dim], x.sizes[dim], 0, 1, x.dtype,
                IX_COPY, vt_scalar_from_int(1), 0, "index_select", dim, NULL);
}

/* dst[index] op= src (or value) along dim over `shape` (index's for
 * scatter, src's for the index_* ops); stride-0 value when src is NULL. */
static vt_status scatter_walk(const vt_tensor *o, int dim, const vt_tensor *ix, const int64_t *ix_st,
                              const vt_tensor *src, const unsigned char *value, const int64_t *shape, ix_mode mode,
                              vt_scalar alpha, int wrap, const char *op) {
    return walk(o->ndim, shape, dim, o, src, src ? src->strides : zeros, ix, ix_st, o->strides[dim],
                o->sizes[dim], wrap, 0, o->dtype, mode, alpha, 1, op, dim, src ? NULL : value);
}

static void identity_value(vt_scatter_reduce op, vt_dtype dt, unsigned char buf[8]) {
    double f = 0;
    int64_t i = 0;
    switch (op) {
    case VT_SCATTER_PROD: f = 1, i = 1; break;
    case VT_SCATTER_AMAX: f = -INFINITY, i = INT64_MIN; break;
    case VT_SCATTER_AMIN: f = INFINITY, i = INT64_MAX; break;
    default: break;
    }
    memset(buf, 0, 8);
    if (vt_dtype_is_float(dt)) {
        vt_convert(VT_F64, &f, 1, dt, buf, 1, 1);
        return;
    }
    /* the dtype's own extremes (int64 extremes would wrap when narrowed) */
    if (op == VT_SCATTER_AMAX || op == VT_SCATTER_AMIN) {
        int mx = op == VT_SCATTER_AMIN;
        switch (dt) {
        case VT_I8: i = mx ? INT8_MAX : INT8_MIN; break;
        case VT_U8: i = mx ? UINT8_MAX : 0; break;
        case VT_BOOL: i = mx ? 1 : 0; break;
        case VT_I16: i = mx ? INT16_MAX : INT16_MIN; break;
        case VT_I32: i = mx ? INT32_MAX : INT32_MIN; break;
        default: break;
        }
    }
    vt_convert(VT_I64, &i, 1, dt, buf, 1, 1);
}

/* out /= max(count, 1) where count > 1 (floor division for integers). */
typedef struct mean_ctx {
    vt_iter it;
    vt_dtype dt;
} mean_ctx;

static void mean_run(void *p, char *const *ptrs, const int64_t *strides, int64_t n) {
    const mean_ctx *c = p;
    size_t es = vt_dtype_size(c->dt);
    for (int64_t j = 0; j < n; j++) {
        int64_t cnt = *(const int64_t *)(ptrs[1] + j * strides[1] * 8);
        if (cnt <= 1) continue;
        char *e = ptrs[0] + j * strides[0] * (int64_t)es;
        if (c->dt == VT_F64) {
            *(double *)e /= (double)cnt;
        } else if (vt_dtype_is_float(c->dt)) {
            float f;
            vt_convert(c->dt, e, 1, VT_F32, &f, 1, 1);
            f = f / (float)cnt;
            vt_convert(VT_F32, &f, 1, c->dt, e, 1, 1);
        } else {
            int64_t v;
            vt_convert(c->dt, e, 1, VT_I64, &v, 1, 1);
            int64_t q = v / cnt;
            if (v % cnt != 0 && v < 0) q--;
            vt_convert(VT_I64, &q, 1, c->dt, e, 1, 1);
        }
    }
}

static void mean_range(void *p, int64_t b, int64_t e) {
    mean_ctx *c = p;
    vt_iter_range(&c->it, b, e, mean_run, c);
}

vt_status vt_scatter(const vt_tensor *out, int dim, const vt_tensor *index, const vt_tensor *src,
                     const vt_tensor *value_t, vt_scalar value, vt_scatter_reduce op, int include_self) {
    vt_status s = ix_check_scatter(out, dim, index, src, value_t, op);
    if (s != VT_OK) return s;
    vt_tensor o = promote(out), ix = promote(index), sr;
    if (src) sr = promote(src);
    if (vt_tensor_numel(&ix) == 0 || vt_tensor_numel(&o) == 0) return VT_OK;
    unsigned char vbuf[8], idbuf[8];
    if (!src) ix_value_bytes(o.dtype, value_t, value, vbuf);
    vt_scalar one = vt_scalar_from_int(1);
    if (op != VT_SCATTER_ASSIGN && !include_self) {
        identity_value(op, o.dtype, idbuf);
        s = scatter_walk(&o, dim, &ix, ix.strides, NULL, idbuf, ix.sizes, IX_COPY, one, 0, "scatter");
        if (s != VT_OK) return s;
    }
    static const ix_mode modes[] = {IX_COPY, IX_SUM, IX_PROD, IX_SUM, IX_AMAX, IX_AMIN};
    s = scatter_walk(&o, dim, &ix, ix.strides, src ? &sr : NULL, vbuf, ix.sizes, modes[op], one, 0, "scatter");
    if (s != VT_OK || op != VT_SCATTER_MEAN) return s;
    /* counts in a contiguous int64 tensor of out's shape */
    int64_t n = vt_tensor_numel(&o);
    vt_tensor cnt = o;
    cnt.dtype = VT_I64;
    cnt.offset = 0;
    cnt.data = malloc((size_t)n * 8);
    if (!cnt.data) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "scatter(): no host memory for the mean counts");
    int64_t st = 1;
    for (int d = o.ndim - 1; d >= 0; d--) cnt.strides[d] = st, st *= o.sizes[d];
    int64_t start = include_self ? 1 : 0;
    for (int64_t i = 0; i < n; i++) ((int64_t *)cnt.data)[i] = start;
    int64_t one64 = 1;
    s = scatter_walk(&cnt, dim, &ix, ix.strides, NULL, (const unsigned char *)&one64, ix.sizes, IX_SUM, one, 0,
                     "scatter");
    if (s == VT_OK) {
        mean_ctx c;
        vt_tensor ops[2] = {o, cnt};
        vt_iter_init(&c.it, 2, ops);
        c.dt = o.dtype;
        vt_parallel_for(c.it.numel, VT_ELEMENTWISE_GRAIN, mean_range, &c);
    }
    free(cnt.data);
    return s;
}

static vt_status index_update(const char *op, const vt_tensor *out, int dim, const vt_tensor *index,
                              const vt_tensor *src, const vt_tensor *value_t, vt_scalar value, ix_mode mode,
                              vt_scalar alpha, int wrap) {
    vt_status s = ix_check_index_update(op, out, dim, index, src);
    if (s == VT_OK && value_t) s = validate(op, value_t, "value");
    if (s == VT_OK && value_t && vt_tensor_numel(value_t) != 1)
        s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): value must have one element", op);
    if (s != VT_OK) return s;
    vt_tensor o = promote(out), ix = promote(index), sr;
    if (src) sr = promote(src);
    int64_t shape[VT_MAX_DIMS], st2[VT_MAX_DIMS] = {0};
    for (int d = 0; d < o.ndim; d++) shape[d] = d == dim ? vt_tensor_numel(&ix) : o.sizes[d];
    st2[dim] = ix.strides[0];
    unsigned char vbuf[8];
    if (!src) ix_value_bytes(o.dtype, value_t, value, vbuf);
    return scatter_walk(&o, dim, &ix, st2, src ? &sr : NULL, vbuf, shape, mode, alpha, wrap, op);
}

/* CPU PyTorch runs index_add_ on a tensor of 2+ dims along its first or
 * last dim, with alpha 1, int64 indices and a source of out's shape (but
 * along dim) as scatter_add_: a bad index is then scatter's RuntimeError,
 * otherwise an IndexError. The same inputs give the same exception here. */
static int index_add_as_scatter(const vt_tensor *out, int dim, const vt_tensor *index, const vt_tensor *src,
                                vt_scalar alpha) {
    if (out->ndim < 2 || (dim != 0 && dim != out->ndim - 1) || index->dtype != VT_I64 || src->ndim != out->ndim)
        return 0;
    if (alpha.is_float ? alpha.f != 1.0 : alpha.i != 1) return 0;
    for (int d = 0; d < out->ndim; d++)
        if (d != dim && out->sizes[d] != src->sizes[d]) return 0;
    return 1;
}

vt_status vt_index_add(const vt_tensor *out, int dim, const vt_tensor *index, const vt_tensor *src, vt_scalar alpha) {
    if (!src) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "index_add(): source is NULL");
    int d = dim < 0 ? dim + (out->ndim ? out->ndim : 1) : dim;
    return index_update(index_add_as_scatter(out, d, index, src, alpha) ? "scatter_add" : "index_add", out, dim,
                        index, src, NULL, alpha, IX_SUM, alpha, 0);
}

vt_status vt_index_copy(const vt_tensor *out, int dim, const vt_tensor *index, const vt_tensor *src) {
    if (!src) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "index_copy(): source is NULL");
    return index_update("index_copy", out, dim, index, src, NULL, vt_scalar_from_int(0), IX_COPY,
                        vt_scalar_from_int(1), 0);
}

vt_status vt_index_fill(const vt_tensor *out, int dim, const vt_tensor *index, const vt_tensor *value_t,
                        vt_scalar value) {
    return index_update("index_fill", out, dim, index, NULL, value_t, value, IX_COPY, vt_scalar_from_int(1), 1);
}

/* ------------------------------------------------------------ take */

typedef struct flat_ctx {
    const vt_tensor *in, *index;
    int64_t *off, numel;
    ix_err err;
} flat_ctx;

static void flat_range(void *p, int64_t b, int64_t e) {
    flat_ctx *c = p;
    const char *ib = (const char *)c->index->data;
    int is64 = c->index->dtype == VT_I64;
    for (int64_t k = b; k < e; k++) {
        int64_t v = ix_load(ib, is64, ix_offset_of(c->index, k)), x = v < 0 ? v + c->numel : v;
        if (x < 0 || x >= c->numel) {
            ix_err_note(&c->err, k, v, c->numel, 0);
            return;
        }
        c->off[k] = ix_offset_of(c->in, x) - c->in->offset;
    }
}

vt_status vt_take(const vt_tensor *out, const vt_tensor *in, const vt_tensor *index) {
    const char *op = "take";
    vt_status s = validate(op, out, "out");
    if (s == VT_OK) s = validate(op, in, "input");
    if (s == VT_OK) s = validate(op, index, "index");
    if (s == VT_OK) s = ix_check_index_dtype(index, op);
    if (s == VT_OK) s = same_dtype(op, out, in);
    if (s == VT_OK && (out->ndim != index->ndim || vt_tensor_numel(out) != vt_tensor_numel(index)))
        s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): out must have index's shape", op);
    if (s != VT_OK) return s;
    int64_t k = vt_tensor_numel(index);
    if (k == 0) return VT_OK;
    flat_ctx c;
    memset(&c, 0, sizeof c);
    c.in = in, c.index = index, c.off = malloc((size_t)k * 8), c.numel = vt_tensor_numel(in);
    if (!c.off) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "take(): no host memory for %lld offsets", (long long)k);
    ix_err_init(&c.err);
    vt_parallel_for(k, VT_ELEMENTWISE_GRAIN, flat_range, &c);
    s = ix_err_finish(&c.err, op);
    if (s == VT_OK) {
        vt_tensor o = promote(out), offs = promote(index), x = *in;
        offs.dtype = VT_I64;
        offs.data = c.off;
        offs.offset = 0;
        int64_t st = 1;
        for (int d = offs.ndim - 1; d >= 0; d--) offs.strides[d] = st, st *= offs.sizes[d];
        s = walk(o.ndim, o.sizes, o.ndim - 1, &o, &x, zeros, &offs, offs.strides, 1, INT64_MAX, 0, 1, x.dtype,
                 IX_COPY, vt_scalar_from_int(1), 0, op, 0, NULL);
    }
    free(c.off);
    return s;
}
