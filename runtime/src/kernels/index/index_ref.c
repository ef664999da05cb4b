/* index_ref.c — scalar references for the indexing kernels: one element at
 * a time in row-major order, no threads, coordinates unravelled afresh for
 * every element. Reductions round to the element dtype after every step in
 * the class type (float / double / int64), as the kernels do. */
#include <stdio.h>
#include <stdlib.h>

#include "index.h"

static int64_t off_at(const vt_tensor *t, const int64_t *coord) {
    int64_t o = t->offset;
    for (int d = 0; d < t->ndim; d++) o += coord[d] * t->strides[d];
    return o;
}

static char *elem(const vt_tensor *t, int64_t off) { return (char *)t->data + off * (int64_t)vt_dtype_size(t->dtype); }

static int next(int nd, const int64_t *sizes, int64_t *coord) {
    for (int d = nd - 1; d >= 0; d--) {
        if (++coord[d] < sizes[d]) return 1;
        coord[d] = 0;
    }
    return 0;
}

static int64_t numel(int nd, const int64_t *s) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= s[d];
    return n;
}

static int64_t idx_at(const vt_tensor *ix, const int64_t *coord) {
    return ix_load(ix->data, ix->dtype == VT_I64, off_at(ix, coord));
}

static vt_status oob(const char *op, int64_t v, int dim, int64_t size) { return ix_oob(op, v, dim, size); }

static vt_tensor promote(const vt_tensor *t) {
    vt_tensor r = *t;
    if (r.ndim == 0) r.ndim = 1, r.sizes[0] = 1, r.strides[0] = 1;
    return r;
}

/* d = d op s (op: ix_mode) in the class type of dt, then rounded to dt. */
static void combine(vt_dtype dt, ix_mode mode, char *d, const char *s, vt_scalar alpha) {
    size_t es = vt_dtype_size(dt);
    if (mode == IX_COPY) {
        memcpy(d, s, es);
        return;
    }
    if (dt == VT_F64 || dt == VT_F32 || dt == VT_BF16 || dt == VT_F16) {
        double a, b, al = alpha.is_float ? alpha.f : (double)alpha.i, r;
        vt_convert(dt, d, 1, VT_F64, &a, 1, 1);
        vt_convert(dt, s, 1, VT_F64, &b, 1, 1);
        if (dt != VT_F64) {
            float fa = (float)a, fb = (float)b, fal = (float)al, fr;
            switch (mode) {
            case IX_SUM: fr = fa + fal * fb; break;
            case IX_PROD: fr = fa * fb; break;
            case IX_AMAX: fr = isnan(fb) ? fb : (fa < fb ? fb : fa); break;
            default: fr = isnan(fb) ? fb : (fb < fa ? fb : fa); break;
            }
            vt_convert(VT_F32, &fr, 1, dt, d, 1, 1);
            return;
        }
        switch (mode) {
        case IX_SUM: r = a + al * b; break;
        case IX_PROD: r = a * b; break;
        case IX_AMAX: r = isnan(b) ? b : (a < b ? b : a); break;
        default: r = isnan(b) ? b : (b < a ? b : a); break;
        }
        memcpy(d, &r, 8);
        return;
    }
    int64_t a, b, al = alpha.is_float ? (int64_t)alpha.f : alpha.i, r;
    vt_convert(dt, d, 1, VT_I64, &a, 1, 1);
    vt_convert(dt, s, 1, VT_I64, &b, 1, 1);
    switch (mode) {
    case IX_SUM: r = (int64_t)((uint64_t)a + (uint64_t)al * (uint64_t)b); break;
    case IX_PROD: r = (int64_t)((uint64_t)a * (uint64_t)b); break;
    case IX_AMAX: r = a < b ? b : a; break;
    default: r = b < a ? b : a; break;
    }
    if (dt == VT_BOOL) {
        *(uint8_t *)d = r != 0;
        return;
    }
    /* narrowing keeps the low bits, as the kernels' casts do */
    switch (es) {
    case 1: *(uint8_t *)d = (uint8_t)(uint64_t)r; break;
    case 2: *(uint16_t *)d = (uint16_t)(uint64_t)r; break;
    case 4: *(uint32_t *)d = (uint32_t)(uint64_t)r; break;
    default: *(int64_t *)d = r; break;
    }
}

vt_status vt_ref_gather(const vt_tensor *out_, const vt_tensor *in_, int dim, const vt_tensor *index_) {
    vt_status s = ix_check_gather(out_, in_, dim, index_);
    if (s != VT_OK) return s;
    vt_tensor out = promote(out_), in = promote(in_), ix = promote(index_);
    if (numel(ix.ndim, ix.sizes) == 0) return VT_OK;
    int64_t c[VT_MAX_DIMS] = {0};
    do {
        int64_t k = idx_at(&ix, c);
        if (k < 0 || k >= in.sizes[dim]) return oob("gather", k, dim, in.sizes[dim]);
        int64_t sc[VT_MAX_DIMS];
        memcpy(sc, c, sizeof sc);
        sc[dim] = k;
        memcpy(elem(&out, off_at(&out, c)), elem(&in, off_at(&in, sc)), vt_dtype_size(in.dtype));
    } while (next(ix.ndim, ix.sizes, c));
    return VT_OK;
}

vt_status vt_ref_index_select(const vt_tensor *out_, const vt_tensor *in_, int dim, const vt_tensor *index_) {
    vt_status s = ix_check_select(out_, in_, dim, index_);
    if (s != VT_OK) return s;
    vt_tensor out = promote(out_), in = promote(in_), ix = promote(index_);
    if (numel(out.ndim, out.sizes) == 0) return VT_OK;
    int64_t c[VT_MAX_DIMS] = {0};
    do {
        int64_t k = ix_load(ix.data, ix.dtype == VT_I64, ix.offset + c[dim] * ix.strides[0]);
        if (k < 0 || k >= in.sizes[dim]) return oob("index_select", k, dim, in.sizes[dim]);
        int64_t sc[VT_MAX_DIMS];
        memcpy(sc, c, sizeof sc);
        sc[dim] = k;
        memcpy(elem(&out, off_at(&out, c)), elem(&in, off_at(&in, sc)), vt_dtype_size(in.dtype));
    } while (next(out.ndim, out.sizes, c));
    return VT_OK;
}

/* dst[coord with dim <- index] op= src[coord] over `shape`. */
static vt_status ref_scatter_walk(const char *op, vt_tensor *o, int dim, const vt_tensor *ix, int vector_index,
                                  const vt_tensor *src, const unsigned char *value, int nd, const int64_t *shape,
                                  ix_mode mode, vt_scalar alpha, int wrap) {
    if (numel(nd, shape) == 0) return VT_OK;
    int64_t c[VT_MAX_DIMS] = {0};
    do {
        int64_t k = vector_index ? ix_load(ix->data, ix->dtype == VT_I64, ix->offset + c[dim] * ix->strides[0])
                                 : idx_at(ix, c);
        int64_t x = wrap && k < 0 ? k + o->sizes[dim] : k;
        if (x < 0 || x >= o->sizes[dim]) return oob(op, k, dim, o->sizes[dim]);
        int64_t dc[VT_MAX_DIMS];
        memcpy(dc, c, sizeof dc);
        dc[dim] = x;
        combine(o->dtype, mode, elem(o, off_at(o, dc)), src ? elem(src, off_at(src, c)) : (const char *)value, alpha);
    } while (next(nd, shape, c));
    return VT_OK;
}

vt_status vt_ref_scatter(const vt_tensor *out_, int dim, const vt_tensor *index_, const vt_tensor *src_,
                         const vt_tensor *value_t, vt_scalar value, vt_scatter_reduce op, int include_self) {
    vt_status s = ix_check_scatter(out_, dim, index_, src_, value_t, op);
    if (s != VT_OK) return s;
    vt_tensor o = promote(out_), ix = promote(index_), sr;
    if (src_) sr = promote(src_);
    unsigned char vbuf[8] = {0}, idv[8] = {0};
    if (!src_) ix_value_bytes(o.dtype, value_t, value, vbuf);
    vt_scalar one = vt_scalar_from_int(1);
    if (op != VT_SCATTER_ASSIGN && !include_self) {
        double f = op == VT_SCATTER_PROD ? 1 : op == VT_SCATTER_AMAX ? -INFINITY : op == VT_SCATTER_AMIN ? INFINITY : 0;
        if (vt_dtype_is_float(o.dtype)) {
            vt_convert(VT_F64, &f, 1, o.dtype, idv, 1, 1);
        } else {
            int64_t lim[VT_DTYPE_COUNT][2] = {[VT_I8] = {INT8_MIN, INT8_MAX}, [VT_U8] = {0, UINT8_MAX},
                                              [VT_I16] = {INT16_MIN, INT16_MAX}, [VT_I32] = {INT32_MIN, INT32_MAX},
                                              [VT_I64] = {INT64_MIN, INT64_MAX}, [VT_BOOL] = {0, 1}};
            int64_t i = op == VT_SCATTER_PROD ? 1 : op == VT_SCATTER_AMAX ? lim[o.dtype][0]
                                                : op == VT_SCATTER_AMIN   ? lim[o.dtype][1]
                                                                          : 0;
            vt_convert(VT_I64, &i, 1, o.dtype, idv, 1, 1);
        }
        if ((s = ref_scatter_walk("scatter", &o, dim, &ix, 0, NULL, idv, ix.ndim, ix.sizes, IX_COPY, one, 0)))
            return s;
    }
    static const ix_mode modes[] = {IX_COPY, IX_SUM, IX_PROD, IX_SUM, IX_AMAX, IX_AMIN};
    s = ref_scatter_walk("scatter", &o, dim, &ix, 0, src_ ? &sr : NULL, vbuf, ix.ndim, ix.sizes, modes[op], one, 0);
    if (s != VT_OK || op != VT_SCATTER_MEAN || numel(ix.ndim, ix.sizes) == 0) return s;
    int64_t n = numel(o.ndim, o.sizes);
    int64_t *cnt = calloc((size_t)(n ? n : 1), 8);
    if (!cnt) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "no memory");
    int64_t c[VT_MAX_DIMS] = {0};
    do { /* count contributions per destination (row-major linear position) */
        int64_t k = idx_at(&ix, c), lin = 0;
        for (int d = 0; d < o.ndim; d++) lin = lin * o.sizes[d] + (d == dim ? k : c[d]);
        cnt[lin]++;
    } while (next(ix.ndim, ix.sizes, c));
    memset(c, 0, sizeof c);
    int64_t lin = 0;
    do {
        int64_t m = cnt[lin++] + (include_self ? 1 : 0);
        if (m <= 1) continue;
        char *e = elem(&o, off_at(&o, c));
        if (o.dtype == VT_F64) {
            *(double *)e /= (double)m;
        } else if (vt_dtype_is_float(o.dtype)) {
            float f;
            vt_convert(o.dtype, e, 1, VT_F32, &f, 1, 1);
            f /= (float)m;
            vt_convert(VT_F32, &f, 1, o.dtype, e, 1, 1);
        } else {
            int64_t v;
            vt_convert(o.dtype, e, 1, VT_I64, &v, 1, 1);
            int64_t q = v / m - (v % m != 0 && v < 0);
            vt_convert(VT_I64, &q, 1, o.dtype, e, 1, 1);
        }
    } while (next(o.ndim, o.sizes, c));
    free(cnt);
    return VT_OK;
}

vt_status vt_ref_index_add(const vt_tensor *out_, int dim, const vt_tensor *index_, const vt_tensor *src_,
                           vt_scalar alpha) {
    vt_status s = ix_check_index_update("index_add", out_, dim, index_, src_);
    if (s != VT_OK) return s;
    if (!src_) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "index_add(): source is NULL");
    vt_tensor o = promote(out_), ix = promote(index_), sr = promote(src_);
    return ref_scatter_walk("index_add", &o, dim, &ix, 1, &sr, NULL, sr.ndim, sr.sizes, IX_SUM, alpha, 0);
}

vt_status vt_ref_take(const vt_tensor *out, const vt_tensor *in, const vt_tensor *index) {
    if (!out || !in || !index || vt_tensor_numel(out) != vt_tensor_numel(index) || out->dtype != in->dtype)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "take(): bad arguments");
    int64_t n = vt_tensor_numel(in), k = vt_tensor_numel(index);
    for (int64_t i = 0; i < k; i++) {
        int64_t v = ix_load(index->data, index->dtype == VT_I64, ix_offset_of(index, i)), x = v < 0 ? v + n : v;
        if (x < 0 || x >= n) return oob("take", v, 0, n);
        memcpy(elem(out, ix_offset_of(out, i)), elem(in, ix_offset_of(in, x)), vt_dtype_size(in->dtype));
    }
    return VT_OK;
}

/* Advanced indexing from the definition: for each result coordinate, find
 * the B coordinate and the unindexed ones, then the source element. */
static vt_status ref_adv(const char *op, const vt_tensor *t, int n, const vt_tensor *const *indices,
                         const vt_tensor *other, int put, int accumulate) {
    int32_t rnd;
    int64_t rsz[VT_MAX_DIMS];
    vt_status s = vt_index_shape(t, n, indices, &rnd, rsz);
    if (s != VT_OK) return s;
    int nidx = 0, dims[VT_MAX_DIMS], bnd = 0;
    for (int i = 0; i < n; i++)
        if (indices[i]) {
            dims[nidx++] = i;
            if (indices[i]->ndim > bnd) bnd = indices[i]->ndim;
        }
    int adjacent = nidx == 0 || dims[nidx - 1] - dims[0] + 1 == nidx;
    int bpos = adjacent && nidx ? dims[0] : 0;
    vt_tensor v = *other;
    if (put && (s = vt_broadcast_to(other, rnd, rsz, &v)) != VT_OK) return s;
    if (numel(rnd, rsz) == 0) return VT_OK;
    int64_t c[VT_MAX_DIMS] = {0};
    do {
        int64_t src[VT_MAX_DIMS] = {0};
        int r = 0;
        int indexed[VT_MAX_DIMS] = {0};
        for (int k = 0; k < nidx; k++) {
            const vt_tensor *ix = indices[dims[k]];
            int64_t ic[VT_MAX_DIMS];
            for (int d = 0; d < ix->ndim; d++) {
                int bd = bnd - ix->ndim + d;
                ic[d] = ix->sizes[d] == 1 ? 0 : c[bpos + bd];
            }
            int64_t val = idx_at(ix, ic), size = t->sizes[dims[k]], x = val < 0 ? val + size : val;
            if (x < 0 || x >= size) return oob(put ? "index" : "index", val, dims[k], size);
            src[dims[k]] = x;
            indexed[dims[k]] = 1;
        }
        /* unindexed dims in order fill the non-B result dims in order */
        for (int d = 0; d < t->ndim; d++) {
            if (indexed[d]) continue;
            if (r == bpos) r += bnd;
            src[d] = c[r++];
        }
        char *te = elem(t, off_at(t, src));
        if (put) combine(t->dtype, accumulate ? IX_SUM : IX_COPY, te, elem(&v, off_at(&v, c)), vt_scalar_from_int(1));
        else memcpy(elem(other, off_at(other, c)), te, vt_dtype_size(t->dtype));
    } while (next(rnd, rsz, c));
    return VT_OK;
}

vt_status vt_ref_index(const vt_tensor *out, const vt_tensor *in, int n, const vt_tensor *const *indices) {
    return ref_adv("index", in, n, indices, out, 0, 0);
}

vt_status vt_ref_index_put(const vt_tensor *out, int n, const vt_tensor *const *indices, const vt_tensor *values,
                           int accumulate) {
    return ref_adv("index_put", out, n, indices, values, 1, accumulate);
}

static int nonzero_at(const vt_tensor *t, const int64_t *c) {
    double f;
    vt_convert(t->dtype, elem(t, off_at(t, c)), 1, VT_F64, &f, 1, 1);
    return f != 0;
}

vt_status vt_ref_nonzero(const vt_tensor *out, const vt_tensor *in) {
    int64_t c[VT_MAX_DIMS] = {0}, row = 0;
    if (vt_tensor_numel(in) == 0) return VT_OK;
    do {
        if (!nonzero_at(in, c)) continue;
        if (row >= out->sizes[0]) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "nonzero(): out too small");
        for (int d = 0; d < in->ndim; d++)
            ((int64_t *)out->data)[out->offset + row * out->strides[0] + d * out->strides[1]] = c[d];
        row++;
    } while (next(in->ndim, in->sizes, c));
    return row == out->sizes[0] ? VT_OK : vt_set_error(VT_ERR_INVALID_ARGUMENT, "nonzero(): count mismatch");
}

vt_status vt_ref_masked_select(const vt_tensor *out, const vt_tensor *in, const vt_tensor *mask) {
    int32_t nd;
    int64_t sz[VT_MAX_DIMS];
    vt_status s = ix_broadcast_shape(in, mask, &nd, sz);
    if (s != VT_OK) return s;
    vt_tensor bi, bm;
    vt_broadcast_to(in, nd, sz, &bi);
    vt_broadcast_to(mask, nd, sz, &bm);
    if (numel(nd, sz) == 0) return VT_OK;
    int64_t c[VT_MAX_DIMS] = {0}, k = 0;
    do {
        if (!*elem(&bm, off_at(&bm, c))) continue;
        if (k >= out->sizes[0]) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "masked_select(): out too small");
        memcpy(elem(out, out->offset + k++ * out->strides[0]), elem(&bi, off_at(&bi, c)), vt_dtype_size(in->dtype));
    } while (next(nd, sz, c));
    return VT_OK;
}

vt_status vt_ref_masked_scatter(const vt_tensor *out, const vt_tensor *mask, const vt_tensor *source) {
    vt_tensor bm;
    vt_status s = vt_broadcast_to(mask, out->ndim, out->sizes, &bm);
    if (s != VT_OK) return s;
    if (vt_tensor_numel(out) == 0) return VT_OK;
    int64_t c[VT_MAX_DIMS] = {0}, k = 0, total = 0;
    do total += *elem(&bm, off_at(&bm, c)) != 0;
    while (next(out->ndim, out->sizes, c));
    if (total > vt_tensor_numel(source))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "Number of elements of source < number of ones in mask");
    memset(c, 0, sizeof c);
    do {
        if (!*elem(&bm, off_at(&bm, c))) continue;
        memcpy(elem(out, off_at(out, c)), elem(source, ix_offset_of(source, k++)), vt_dtype_size(out->dtype));
    } while (next(out->ndim, out->sizes, c));
    return VT_OK;
}

vt_status vt_ref_embedding_dense_backward(const vt_tensor *gw, const vt_tensor *g, const vt_tensor *ix,
                                          int64_t padding_idx, int scale) {
    int64_t V = gw->sizes[0], D = gw->sizes[1], N = ix->sizes[0];
    int isf64 = gw->dtype == VT_F64;
    double *acc = calloc((size_t)(V * D > 0 ? V * D : 1), sizeof(double));
    int64_t *cnt = calloc((size_t)(V ? V : 1), 8);
    if (!acc || !cnt) {
        free(acc), free(cnt);
        return vt_set_error(VT_ERR_OUT_OF_MEMORY, "no memory");
    }
    for (int64_t i = 0; i < N; i++) {
        int64_t v = ix_load(ix->data, ix->dtype == VT_I64, ix->offset + i * ix->strides[0]);
        if (v < 0 || v >= V) {
            free(acc), free(cnt);
            return oob("embedding_dense_backward", v, 0, V);
        }
        cnt[v]++;
    }
    for (int64_t i = 0; i < N; i++) {
        int64_t v = ix_load(ix->data, ix->dtype == VT_I64, ix->offset + i * ix->strides[0]);
        if (v == padding_idx) continue;
        for (int64_t j = 0; j < D; j++) {
            double x;
            vt_convert(g->dtype, elem(g, g->offset + i * g->strides[0] + j * g->strides[1]), 1, VT_F64, &x, 1, 1);
            if (isf64) {
                acc[v * D + j] += scale ? x * (1.0 / (double)cnt[v]) : x;
            } else {
                float f = (float)acc[v * D + j] + (scale ? (float)x * (float)(1.0 / (double)cnt[v]) : (float)x);
                acc[v * D + j] = f;
            }
        }
    }
    for (int64_t r = 0; r < V; r++)
        for (int64_t j = 0; j < D; j++)
            vt_convert(VT_F64, &acc[r * D + j], 1, gw->dtype, elem(gw, gw->offset + r * gw->strides[0] + j * gw->strides[1]),
                       1, 1);
    free(acc), free(cnt);
    return VT_OK;
}
