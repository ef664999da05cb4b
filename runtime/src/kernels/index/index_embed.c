/* index_embed.c — embedding_dense_backward: the (index, position) pairs are
 * sorted once, then threads own ranges of weight rows; a row sums its
 * gradient rows in increasing position in the class type and rounds once,
 * rows nobody indexes are zeroed in the same pass (one write of the weight). */
#include <stdlib.h>

#include "index.h"

typedef struct pair {
    int64_t v, pos;
} pair;

static int pair_cmp(const void *a, const void *b) {
    const pair *x = a, *y = b;
    if (x->v != y->v) return x->v < y->v ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

typedef struct emb_ctx {
    const vt_tensor *gw, *g;
    const pair *p;
    int64_t np;
    int scale;
} emb_ctx;

#define EMB_TILE 256

/* Sum (scaled) rows p[a..b) of g into gw's row `row`. */
static void row_sum(const emb_ctx *c, int64_t row, int64_t a, int64_t b) {
    const vt_tensor *gw = c->gw, *g = c->g;
    vt_dtype dt = gw->dtype;
    size_t es = vt_dtype_size(dt);
    int64_t D = gw->sizes[1];
    char *dst = (char *)gw->data + (gw->offset + row * gw->strides[0]) * (int64_t)es;
    const char *gb = (const char *)vt_base(g);
    if (dt == VT_F64) {
        double sc = c->scale ? 1.0 / (double)(b - a) : 1.0, acc[EMB_TILE];
        for (int64_t t0 = 0; t0 < D; t0 += EMB_TILE) {
            int64_t n = D - t0 < EMB_TILE ? D - t0 : EMB_TILE;
            for (int64_t j = 0; j < n; j++) acc[j] = 0;
            for (int64_t k = a; k < b; k++) {
                const double *x = (const double *)gb + c->p[k].pos * g->strides[0] + t0 * g->strides[1];
                if (c->scale)
                    for (int64_t j = 0; j < n; j++) acc[j] += x[j * g->strides[1]] * sc;
                else
                    for (int64_t j = 0; j < n; j++) acc[j] += x[j * g->strides[1]];
            }
            vt_convert(VT_F64, acc, 1, dt, dst + t0 * gw->strides[1] * 8, gw->strides[1], n);
        }
        return;
    }
    float sc = c->scale ? (float)(1.0 / (double)(b - a)) : 1.0f, acc[EMB_TILE], tmp[EMB_TILE];
    for (int64_t t0 = 0; t0 < D; t0 += EMB_TILE) {
        int64_t n = D - t0 < EMB_TILE ? D - t0 : EMB_TILE;
        for (int64_t j = 0; j < n; j++) acc[j] = 0;
        for (int64_t k = a; k < b; k++) {
            const char *x = gb + (c->p[k].pos * g->strides[0] + t0 * g->strides[1]) * (int64_t)es;
            const float *xf = (const float *)x;
            if (dt != VT_F32 || g->strides[1] != 1) {
                vt_convert(dt, x, g->strides[1], VT_F32, tmp, 1, n);
                xf = tmp;
            }
            if (c->scale)
                for (int64_t j = 0; j < n; j++) acc[j] += xf[j] * sc;
            else
                for (int64_t j = 0; j < n; j++) acc[j] += xf[j];
        }
        vt_convert(VT_F32, acc, 1, dt, dst + t0 * gw->strides[1] * (int64_t)es, gw->strides[1], n);
    }
}

static void zero_row(const emb_ctx *c, int64_t row) {
    const vt_tensor *gw = c->gw;
    size_t es = vt_dtype_size(gw->dtype);
    char *dst = (char *)gw->data + (gw->offset + row * gw->strides[0]) * (int64_t)es;
    int64_t D = gw->sizes[1];
    if (gw->strides[1] == 1) {
        memset(dst, 0, (size_t)D * es);
        return;
    }
    for (int64_t j = 0; j < D; j++) memset(dst + j * gw->strides[1] * (int64_t)es, 0, es);
}

static void emb_rows(void *q, int64_t r0, int64_t r1) {
    const emb_ctx *c = q;
    /* first pair with v >= r0 */
    int64_t lo = 0, hi = c->np;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (c->p[mid].v < r0) lo = mid + 1;
        else hi = mid;
    }
    for (int64_t row = r0; row < r1; row++) {
        if (lo < c->np && c->p[lo].v == row) {
            int64_t e = lo;
            while (e < c->np && c->p[e].v == row) e++;
            row_sum(c, row, lo, e);
            lo = e;
        } else {
            zero_row(c, row);
        }
    }
}

static vt_status check(const vt_tensor *gw, const vt_tensor *g, const vt_tensor *ix) {
    const char *op = "embedding_dense_backward";
    if (!gw || !g || !ix) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): NULL tensor", op);
    vt_status s = vt_tensor_validate(gw, "grad_weight");
    if (s == VT_OK) s = vt_tensor_validate(g, "grad");
    if (s == VT_OK) s = vt_tensor_validate(ix, "indices");
    if (s != VT_OK) return vt_error_prefix(s, op);
    if ((s = ix_check_index_dtype(ix, op)) != VT_OK) return s;
    if (gw->ndim != 2 || g->ndim != 2 || ix->ndim != 1 || gw->sizes[1] != g->sizes[1] || g->sizes[0] != ix->sizes[0])
        return vt_set_error(VT_ERR_INVALID_ARGUMENT,
                            "%s(): expected grad_weight [V, D], grad [N, D] and indices [N]", op);
    if (gw->dtype != g->dtype || !vt_dtype_is_float(gw->dtype))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): grad and grad_weight must share a float dtype", op);
    return VT_OK;
}

vt_status vt_embedding_dense_backward(const vt_tensor *grad_weight, const vt_tensor *grad, const vt_tensor *indices,
                                      int64_t padding_idx, int scale_grad_by_freq) {
    vt_status s = check(grad_weight, grad, indices);
    if (s != VT_OK) return s;
    int64_t n = indices->sizes[0], V = grad_weight->sizes[0];
    pair *p = malloc((size_t)(n ? n : 1) * sizeof *p);
    if (!p) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "embedding_dense_backward(): no host memory for %lld indices",
                                (long long)n);
    int64_t np = 0;
    const char *ib = (const char *)indices->data;
    int is64 = indices->dtype == VT_I64;
    for (int64_t i = 0; i < n; i++) {
        int64_t v = ix_load(ib, is64, indices->offset + i * indices->strides[0]);
        if (v < 0 || v >= V) {
            free(p);
            return ix_oob("embedding_dense_backward", v, 0, V);
        }
        if (v == padding_idx) continue;
        p[np].v = v;
        p[np++].pos = i;
    }
    qsort(p, (size_t)np, sizeof *p, pair_cmp);
    emb_ctx c = {grad_weight, grad, p, np, scale_grad_by_freq};
    int64_t D = grad_weight->sizes[1] ? grad_weight->sizes[1] : 1;
    if (grad_weight->sizes[1] > 0) vt_parallel_for(V, 65536 / D > 0 ? 65536 / D : 1, emb_rows, &c);
    free(p);
    return VT_OK;
}
