/* index_adv.c — advanced indexing (x[i, :, j], x[i] = v, x[i] += v): the
 * index tensors broadcast to a shape B, each position of B becomes one
 * element offset into the indexed dims (checked and wrapped once), and the
 * dim walk then moves whole slices of the unindexed dims. */
#include <stdio.h>
#include <stdlib.h>

#include "index.h"

typedef struct adv_plan {
    int nidx;                   /* index tensors given */
    int dims[VT_MAX_DIMS];      /* the dim of in each one indexes */
    vt_tensor idx[VT_MAX_DIMS]; /* broadcast to B */
    int32_t bnd, rnd;
    int64_t b[VT_MAX_DIMS], bnumel;
    int64_t rsz[VT_MAX_DIMS];   /* result shape */
    int rsrc[VT_MAX_DIMS];      /* result dim -> dim of in, -1 inside B */
    int bpos;
} adv_plan;

static void shape_text(const vt_tensor *t, char *buf, size_t len) {
    size_t u = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < t->ndim && d < VT_MAX_DIMS && u < len; d++)
        u += (size_t)snprintf(buf + u, len - u, d ? ", %lld" : "%lld", (long long)t->sizes[d]);
    if (u < len) snprintf(buf + u, len - u, "]");
}

vt_status ix_values_mismatch(const vt_tensor *values, int rnd, const int64_t *rsz, vt_status broadcast_status) {
    if (values->ndim < 0 || values->ndim > VT_MAX_DIMS) return broadcast_status; /* not a shape */
    vt_tensor r = *values;
    r.ndim = rnd;
    memcpy(r.sizes, rsz, sizeof(int64_t) * (size_t)rnd);
    char a[256], b[256];
    shape_text(values, a, sizeof a);
    shape_text(&r, b, sizeof b);
    return vt_set_error(VT_ERR_INVALID_ARGUMENT,
                        "shape mismatch: value tensor of shape %s cannot be broadcast to indexing result of shape %s",
                        a, b);
}

static vt_status plan_make(const char *op, const vt_tensor *in, int n, const vt_tensor *const *indices,
                           adv_plan *p) {
    memset(p, 0, sizeof *p);
    if (!in) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): input is NULL", op);
    vt_status s = vt_tensor_validate(in, "input");
    if (s != VT_OK) return vt_error_prefix(s, op);
    if (n < 0 || n > in->ndim)
        return vt_set_error(VT_ERR_INDEX, "too many indices for tensor of dimension %d (got %d)", (int)in->ndim, n);
    for (int i = 0; i < n; i++) {
        const vt_tensor *t = indices ? indices[i] : NULL;
        if (!t) continue;
        if ((s = vt_tensor_validate(t, "index")) != VT_OK) return vt_error_prefix(s, op);
        if (t->dtype != VT_I64 && t->dtype != VT_I32)
            return vt_set_error(VT_ERR_INDEX, "tensors used as indices must be long or int tensors (bool masks are "
                                              "expanded by the caller)");
        p->dims[p->nidx++] = i;
        if (t->ndim > p->bnd) p->bnd = t->ndim;
    }
    /* broadcast the index shapes, right-aligned */
    for (int d = 0; d < p->bnd; d++) p->b[d] = 1;
    for (int k = 0; k < p->nidx; k++) {
        const vt_tensor *t = indices[p->dims[k]];
        for (int d = 0; d < t->ndim; d++) {
            int bd = p->bnd - t->ndim + d;
            int64_t sz = t->sizes[d];
            if (sz == p->b[bd] || sz == 1) continue;
            if (p->b[bd] == 1) {
                p->b[bd] = sz;
                continue;
            }
            char msg[512];
            size_t u = (size_t)snprintf(msg, sizeof msg, "shape mismatch: indexing tensors could not be broadcast "
                                                         "together with shapes ");
            for (int j = 0; j < p->nidx && u < sizeof msg; j++) {
                if (j) u += (size_t)snprintf(msg + u, sizeof msg - u, ", ");
                if (u < sizeof msg) shape_text(indices[p->dims[j]], msg + u, sizeof msg - u);
                u = strlen(msg);
            }
            return vt_set_error(VT_ERR_INDEX, "%s", msg);
        }
    }
    p->bnumel = 1;
    for (int d = 0; d < p->bnd; d++) p->bnumel *= p->b[d];
    /* Any index into a dimension of size 0 is out of bounds: known without
     * reading the indices, so refused here (on the calling thread), as CPU does. */
    for (int k = 0; k < p->nidx && p->bnumel > 0; k++)
        if (in->sizes[p->dims[k]] == 0)
            return vt_set_error(VT_ERR_INDEX, "index is out of bounds for dimension with size 0");
    for (int k = 0; k < p->nidx; k++)
        if ((s = vt_broadcast_to(indices[p->dims[k]], p->bnd, p->b, &p->idx[k])) != VT_OK) return s;
    int adjacent = p->nidx == 0 || p->dims[p->nidx - 1] - p->dims[0] + 1 == p->nidx;
    int r = 0;
    if (in->ndim - p->nidx + p->bnd > VT_MAX_DIMS)
        return vt_set_error(VT_ERR_UNSUPPORTED, "%s(): the result would have more than %d dims", op, VT_MAX_DIMS);
    if (adjacent) {
        p->bpos = p->nidx ? p->dims[0] : 0;
        for (int d = 0; d < p->bpos; d++) p->rsrc[r] = d, p->rsz[r++] = in->sizes[d];
        for (int d = 0; d < p->bnd; d++) p->rsrc[r] = -1, p->rsz[r++] = p->b[d];
        for (int d = p->nidx ? p->dims[p->nidx - 1] + 1 : 0; d < in->ndim; d++)
            p->rsrc[r] = d, p->rsz[r++] = in->sizes[d];
    } else {
        p->bpos = 0;
        for (int d = 0; d < p->bnd; d++) p->rsrc[r] = -1, p->rsz[r++] = p->b[d];
        int k = 0;
        for (int d = 0; d < in->ndim; d++) {
            if (k < p->nidx && p->dims[k] == d) {
                k++;
                continue;
            }
            p->rsrc[r] = d, p->rsz[r++] = in->sizes[d];
        }
    }
    p->rnd = r;
    return VT_OK;
}

vt_status vt_index_shape(const vt_tensor *in, int n, const vt_tensor *const *indices, int32_t *out_ndim,
                         int64_t *out_sizes) {
    adv_plan p;
    vt_status s = plan_make("index", in, n, indices, &p);
    if (s != VT_OK) return s;
    *out_ndim = p.rnd;
    memcpy(out_sizes, p.rsz, sizeof(int64_t) * (size_t)p.rnd);
    return VT_OK;
}

/* ------------------------------------------------------------ offsets */

typedef struct off_ctx {
    const adv_plan *p;
    const vt_tensor *in;
    int64_t *off;
    ix_err err;
} off_ctx;

static void off_range(void *q, int64_t b0, int64_t b1) {
    off_ctx *c = q;
    const adv_plan *p = c->p;
    int64_t coord[VT_MAX_DIMS];
    int64_t lin = b0;
    for (int d = p->bnd - 1; d >= 0; d--) coord[d] = lin % p->b[d], lin /= p->b[d];
    for (int64_t b = b0; b < b1; b++) {
        int64_t off = 0;
        for (int k = 0; k < p->nidx; k++) {
            const vt_tensor *t = &p->idx[k];
            int64_t e = t->offset;
            for (int d = 0; d < p->bnd; d++) e += coord[d] * t->strides[d];
            int64_t v = ix_load(t->data, t->dtype == VT_I64, e), size = c->in->sizes[p->dims[k]];
            int64_t x = v < 0 ? v + size : v;
            if (x < 0 || x >= size) {
                ix_err_note(&c->err, b, v, size, p->dims[k]);
                return;
            }
            off += x * c->in->strides[p->dims[k]];
        }
        c->off[b] = off;
        for (int d = p->bnd - 1; d >= 0; d--) {
            if (++coord[d] < p->b[d]) break;
            coord[d] = 0;
        }
    }
}

static vt_status compute_offsets(const adv_plan *p, const vt_tensor *in, int64_t **out) {
    int64_t n = p->bnumel ? p->bnumel : 1;
    off_ctx c;
    memset(&c, 0, sizeof c);
    c.p = p, c.in = in, c.off = malloc((size_t)n * 8);
    if (!c.off) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "index(): no host memory for %lld offsets", (long long)n);
    ix_err_init(&c.err);
    vt_parallel_for(p->bnumel, 4096, off_range, &c);
    vt_status s = ix_err_finish(&c.err, "index");
    if (s != VT_OK) {
        free(c.off);
        return s;
    }
    *out = c.off;
    return VT_OK;
}

/* The walk over the result shape, with B either kept (flat 0) or merged into
 * one dim (flat 1, the caller guarantees `other` can be merged across B).
 * in_w: `in` seen over the walk shape (0 across B); other_w: the tensor laid
 * out over the result (out, or values) over the walk shape; off_w: offsets. */
static void walk_views(const adv_plan *p, const vt_tensor *in, const vt_tensor *other, int flat, int32_t *wnd,
                       int64_t *wsz, int *wdim, int64_t *in_st, int64_t *other_st, int64_t *off_st) {
    int n = 0, bcount = p->bnd ? p->bnd : 1;
    int64_t bst[VT_MAX_DIMS];
    int64_t acc = 1;
    for (int d = p->bnd - 1; d >= 0; d--) bst[d] = acc, acc *= p->b[d];
    for (int r = 0; r < p->bpos; r++)
        wsz[n] = p->rsz[r], in_st[n] = in->strides[p->rsrc[r]], other_st[n] = other->strides[r], off_st[n++] = 0;
    if (flat || p->bnd == 0) {
        wsz[n] = p->bnd ? p->bnumel : 1;
        in_st[n] = 0;
        other_st[n] = p->bnd ? other->strides[p->bpos + p->bnd - 1] : 0;
        off_st[n++] = p->bnd ? 1 : 0;
        bcount = 1;
    } else {
        for (int d = 0; d < p->bnd; d++)
            wsz[n] = p->b[d], in_st[n] = 0, other_st[n] = other->strides[p->bpos + d], off_st[n++] = bst[d];
    }
    *wdim = n - 1;
    (void)bcount;
    for (int r = p->bpos + p->bnd; r < p->rnd; r++)
        wsz[n] = p->rsz[r], in_st[n] = in->strides[p->rsrc[r]], other_st[n] = other->strides[r], off_st[n++] = 0;
    *wnd = n;
}

static vt_status run_walk(int32_t wnd, const int64_t *wsz, int wdim, const vt_tensor *t0, const int64_t *st0,
                          const vt_tensor *t1, const int64_t *st1, const int64_t *off, const int64_t *off_st,
                          int gather, ix_mode mode, int conflicts) {
    ix_walk w;
    char *base[3] = {vt_base(t0), vt_base(t1), (char *)off};
    const int64_t *strides[3] = {st0, st1, off_st};
    ix_walk_init(&w, wnd, wsz, wdim, base, strides);
    w.xs = 1;
    w.bound = INT64_MAX;
    w.is64 = 1;
    w.gather = gather;
    return ix_walk_run(&w, t0->dtype, mode, vt_scalar_from_int(1), conflicts, "index", 0);
}

static int64_t numel_of(int32_t nd, const int64_t *sz) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= sz[d];
    return n;
}

vt_status vt_index(const vt_tensor *out, const vt_tensor *in, int n, const vt_tensor *const *indices) {
    adv_plan p;
    vt_status s = plan_make("index", in, n, indices, &p);
    if (s != VT_OK) return s;
    if (!out || (s = vt_tensor_validate(out, "out")) != VT_OK)
        return out ? vt_error_prefix(s, "index") : vt_set_error(VT_ERR_INVALID_ARGUMENT, "index(): out is NULL");
    if (out->dtype != in->dtype || out->ndim != p.rnd || memcmp(out->sizes, p.rsz, sizeof(int64_t) * p.rnd))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "index(): out must have the result's shape and input's dtype");
    if (numel_of(p.rnd, p.rsz) == 0) return VT_OK;
    int64_t *off;
    if ((s = compute_offsets(&p, in, &off)) != VT_OK) return s;
    int32_t wnd;
    int wdim;
    int64_t wsz[VT_MAX_DIMS], in_st[VT_MAX_DIMS], o_st[VT_MAX_DIMS], off_st[VT_MAX_DIMS];
    walk_views(&p, in, out, 0, &wnd, wsz, &wdim, in_st, o_st, off_st);
    s = run_walk(wnd, wsz, wdim, out, o_st, in, in_st, off, off_st, 1, IX_COPY, 0);
    free(off);
    return s;
}

vt_status vt_index_put(const vt_tensor *out, int n, const vt_tensor *const *indices, const vt_tensor *values,
                       int accumulate) {
    adv_plan p;
    vt_status s = plan_make("index_put", out, n, indices, &p);
    if (s != VT_OK) return s;
    if (!values || (s = vt_tensor_validate(values, "values")) != VT_OK)
        return values ? vt_error_prefix(s, "index_put")
                      : vt_set_error(VT_ERR_INVALID_ARGUMENT, "index_put(): values is NULL");
    if (values->dtype != out->dtype)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "index_put(): values and self must have the same dtype");
    vt_tensor v;
    if ((s = vt_broadcast_to(values, p.rnd, p.rsz, &v)) != VT_OK) return ix_values_mismatch(values, p.rnd, p.rsz, s);
    if (numel_of(p.rnd, p.rsz) == 0) return VT_OK;
    /* Destinations may repeat across B, so B is walked as one ordered dim:
     * values must be mergeable across B, else they are staged contiguously. */
    void *staged = NULL;
    int mergeable = 1;
    for (int d = p.bpos; d + 1 < p.bpos + p.bnd; d++)
        mergeable &= v.strides[d] == v.strides[d + 1] * p.rsz[d + 1];
    if (!mergeable) {
        size_t es = vt_dtype_size(v.dtype);
        staged = malloc((size_t)numel_of(p.rnd, p.rsz) * es);
        if (!staged) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "index_put(): no host memory to stage values");
        vt_tensor c = v;
        c.data = staged;
        c.offset = 0;
        int64_t st = 1;
        for (int d = p.rnd - 1; d >= 0; d--) c.strides[d] = st, st *= p.rsz[d];
        if ((s = vt_copy(&c, &v)) != VT_OK) {
            free(staged);
            return s;
        }
        v = c;
    }
    int64_t *off;
    if ((s = compute_offsets(&p, out, &off)) == VT_OK) {
        int32_t wnd;
        int wdim;
        int64_t wsz[VT_MAX_DIMS], in_st[VT_MAX_DIMS], v_st[VT_MAX_DIMS], off_st[VT_MAX_DIMS];
        walk_views(&p, out, &v, 1, &wnd, wsz, &wdim, in_st, v_st, off_st);
        s = run_walk(wnd, wsz, wdim, out, in_st, &v, v_st, off, off_st, 0, accumulate ? IX_SUM : IX_COPY, 1);
        free(off);
    }
    free(staged);
    return s;
}
