/* iter.c — the strided iterator every elementwise driver walks: operands of
 * one shape (inputs already broadcast), their trivial dims dropped and the
 * dims every operand steps through as one merged, visited run by run in
 * logical (row-major) order over any range of elements. */
#include "internal.h"

void vt_iter_init(vt_iter *it, int nops, const vt_tensor *ops) {
    const vt_tensor *t0 = &ops[0];
    /* Only dims [0, ndim) and operands [0, nops) are ever read. */
    it->nops = nops;
    it->numel = vt_tensor_numel(t0);
    for (int k = 0; k < nops; k++) {
        it->elsize[k] = vt_dtype_size(ops[k].dtype);
        it->base[k] = vt_base(&ops[k]);
    }
    /* Keep the non-trivial dims, outermost first, merging a dim into the
     * one inside it when every operand steps through both as one. */
    int32_t nd = 0;
    for (int32_t d = 0; d < t0->ndim; d++) {
        if (t0->sizes[d] == 1) continue;
        it->sizes[nd] = t0->sizes[d];
        for (int k = 0; k < nops; k++) it->strides[k][nd] = ops[k].strides[d];
        nd++;
    }
    int32_t out = 0;
    for (int32_t d = 0; d < nd; d++) {
        if (out > 0) {
            int merge = 1;
            for (int k = 0; k < nops && merge; k++)
                merge = it->strides[k][out - 1] == it->strides[k][d] * it->sizes[d];
            if (merge) {
                it->sizes[out - 1] *= it->sizes[d];
                for (int k = 0; k < nops; k++) it->strides[k][out - 1] = it->strides[k][d];
                continue;
            }
        }
        it->sizes[out] = it->sizes[d];
        for (int k = 0; k < nops; k++) it->strides[k][out] = it->strides[k][d];
        out++;
    }
    if (out == 0) { /* a single element */
        it->sizes[0] = 1;
        for (int k = 0; k < nops; k++) it->strides[k][0] = 1;
        out = 1;
    }
    it->ndim = out;
}

void vt_iter_blocks(const vt_iter *it, int64_t begin, int64_t end, vt_iter_block_fn fn, void *ctx) {
    int32_t nd = it->ndim, inner = nd - 1;
    int nops = it->nops;
    int64_t idx[VT_MAX_DIMS];
    int64_t off[VT_ITER_MAX_OPS] = {0};
    int64_t rem = begin;
    for (int32_t d = inner; d >= 0; d--) {
        idx[d] = rem % it->sizes[d];
        rem /= it->sizes[d];
        for (int k = 0; k < nops; k++) off[k] += idx[d] * it->strides[k][d];
    }
    int64_t istr[VT_ITER_MAX_OPS], rstr[VT_ITER_MAX_OPS] = {0};
    for (int k = 0; k < nops; k++) {
        istr[k] = it->strides[k][inner];
        if (inner > 0) rstr[k] = it->strides[k][inner - 1] * (int64_t)it->elsize[k];
    }
    const int64_t len = it->sizes[inner];
    char *ptrs[VT_ITER_MAX_OPS];
    int64_t pos = begin;
    while (pos < end) {
        int64_t run = len - idx[inner], rows = 1;
        if (run > end - pos) run = end - pos;
        /* whole runs from the start of one: as many as the next dim and the
         * range allow, in one call */
        if (inner > 0 && idx[inner] == 0 && run == len) {
            rows = (end - pos) / len;
            if (rows > it->sizes[inner - 1] - idx[inner - 1]) rows = it->sizes[inner - 1] - idx[inner - 1];
        }
        for (int k = 0; k < nops; k++) ptrs[k] = it->base[k] + off[k] * (int64_t)it->elsize[k];
        fn(ctx, ptrs, istr, run, rows, rstr);
        pos += run * rows;
        if (rows > 1) {
            idx[inner - 1] += rows - 1; /* the last row's end carries below */
            for (int k = 0; k < nops; k++) off[k] += (rows - 1) * it->strides[k][inner - 1];
        }
        idx[inner] += run;
        for (int k = 0; k < nops; k++) off[k] += run * istr[k];
        for (int32_t d = inner; d > 0 && idx[d] == it->sizes[d]; d--) {
            for (int k = 0; k < nops; k++) off[k] += it->strides[k][d - 1] - it->sizes[d] * it->strides[k][d];
            idx[d] = 0;
            idx[d - 1]++;
        }
    }
}

typedef struct runs_ctx {
    vt_iter_run_fn fn;
    void *ctx;
    int nops;
} runs_ctx;

static void runs_of_block(void *vctx, char *const *ptrs, const int64_t *strides, int64_t n, int64_t rows,
                          const int64_t *rstrides) {
    const runs_ctx *r = vctx;
    char *p[VT_ITER_MAX_OPS];
    for (int k = 0; k < r->nops; k++) p[k] = ptrs[k];
    for (int64_t i = 0; i < rows; i++) {
        r->fn(r->ctx, p, strides, n);
        for (int k = 0; k < r->nops; k++) p[k] += rstrides[k];
    }
}

void vt_iter_range(const vt_iter *it, int64_t begin, int64_t end, vt_iter_run_fn fn, void *ctx) {
    runs_ctx r = {fn, ctx, it->nops};
    vt_iter_blocks(it, begin, end, runs_of_block, &r);
}

/* Whether dim a, now outside dim b, should go inside it: the first operand
 * (ops[0], then the rest in order) that steps through both with different
 * non-zero strides decides, as in TensorIterator's reorder_dimensions. */
static int goes_inside(vt_tensor *const *ops, int m, int a, int b) {
    for (int k = 0; k < m; k++) {
        const int64_t sa = ops[k]->strides[a], sb = ops[k]->strides[b];
        if (sa == 0 || sb == 0 || sa == sb) continue;
        return sa < sb;
    }
    return 0;
}

int vt_memory_perm(vt_tensor *const *ops, int m, int *perm) {
    const vt_tensor *o = ops[0];
    /* the dims of more than one element, sorted among their own places;
     * dims of size 1 stay where they are, whatever their strides */
    int at[VT_MAX_DIMS], dims[VT_MAX_DIMS], n = 0, moved = 0;
    for (int d = 0; d < o->ndim; d++) {
        perm[d] = d;
        if (o->sizes[d] != 1) at[n] = dims[n] = d, n++;
    }
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && goes_inside(ops, m, dims[j - 1], dims[j]); j--) {
            const int t = dims[j];
            dims[j] = dims[j - 1], dims[j - 1] = t;
            moved = 1;
        }
    for (int i = 0; i < n; i++) perm[at[i]] = dims[i];
    return moved;
}

void vt_permute_dims(vt_tensor *const *ops, int m, const int *perm) {
    for (int k = 0; k < m; k++) {
        const int nd = ops[k]->ndim;
        int64_t sz[VT_MAX_DIMS], st[VT_MAX_DIMS];
        for (int d = 0; d < nd; d++) sz[d] = ops[k]->sizes[perm[d]], st[d] = ops[k]->strides[perm[d]];
        memcpy(ops[k]->sizes, sz, (size_t)nd * sizeof sz[0]);
        memcpy(ops[k]->strides, st, (size_t)nd * sizeof st[0]);
    }
}
