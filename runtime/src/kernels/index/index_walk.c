/* index_walk.c — the engine under gather, scatter, index_select/add/copy/
 * fill, take and advanced indexing: walk an index tensor's shape, move one
 * operand by index values along one dim, and combine elements with typed
 * loops. Work is cut into items of fixed size, independent of the thread
 * count; when several index values may hit one destination, each rest
 * position keeps its whole dim loop on one thread, in increasing order. */
#include <stdio.h>

#include "index.h"

/* ------------------------------------------------------------ shared helpers */

void ix_err_init(ix_err *e) {
    pthread_mutex_init(&e->mu, NULL);
    e->key = INT64_MAX;
    e->value = e->bound = 0;
    e->dim = 0;
}

void ix_err_note(ix_err *e, int64_t key, int64_t value, int64_t bound, int dim) {
    pthread_mutex_lock(&e->mu);
    if (key < e->key) e->key = key, e->value = value, e->bound = bound, e->dim = dim;
    pthread_mutex_unlock(&e->mu);
}

vt_status ix_oob(const char *op, int64_t v, int dim, int64_t n) {
    if (!strcmp(op, "take"))
        return vt_set_error(VT_ERR_INDEX, "out of range: tried to access index %lld on a tensor of %lld elements.",
                            (long long)v, (long long)n);
    vt_status s = !strcmp(op, "gather") || !strncmp(op, "scatter", 7) ? VT_ERR_KERNEL : VT_ERR_INDEX;
    return vt_set_error(s, "%sindex %lld is out of bounds for dimension %d with size %lld",
                        !strcmp(op, "index_copy") ? "index_copy_(): " : "", (long long)v, dim, (long long)n);
}

vt_status ix_err_finish(ix_err *e, const char *op) {
    pthread_mutex_destroy(&e->mu);
    if (e->key == INT64_MAX) return VT_OK;
    return ix_oob(op, e->value, e->dim, e->bound);
}

void ix_value_bytes(vt_dtype dt, const vt_tensor *value_t, vt_scalar value, void *buf) {
    memset(buf, 0, 8);
    if (value_t) {
        const char *p = (const char *)vt_base(value_t);
        vt_convert(value_t->dtype, p, 1, dt, buf, 1, 1);
    } else if (value.is_float) {
        vt_convert(VT_F64, &value.f, 1, dt, buf, 1, 1);
    } else {
        vt_convert(VT_I64, &value.i, 1, dt, buf, 1, 1);
    }
}

int64_t ix_offset_of(const vt_tensor *t, int64_t lin) {
    int64_t off = t->offset;
    for (int d = t->ndim - 1; d >= 0; d--) {
        int64_t s = t->sizes[d];
        off += (lin % s) * t->strides[d];
        lin /= s;
    }
    return off;
}

/* ------------------------------------------------------------ geometry */

void ix_walk_init(ix_walk *w, int ndim, const int64_t *shape, int dim, char *const base[3],
                  const int64_t *const strides[3]) {
    memset(w, 0, sizeof *w);
    for (int q = 0; q < 3; q++) w->base[q] = base[q];
    w->L = ndim ? shape[dim] : 1;
    for (int q = 0; q < 3; q++) w->ds[q] = ndim ? strides[q][dim] : 0;
    int nr = 0;
    for (int d = 0; d < ndim; d++) {
        if (d == dim) continue;
        if (shape[d] == 0) { /* nothing to walk */
            w->nr = 1;
            w->size[0] = 0;
            return;
        }
        if (shape[d] == 1) continue;
        if (nr > 0) {
            int p = nr - 1, ok = 1;
            for (int q = 0; q < 3; q++) ok &= w->st[q][p] == strides[q][d] * shape[d];
            if (ok) {
                w->size[p] *= shape[d];
                for (int q = 0; q < 3; q++) w->st[q][p] = strides[q][d];
                continue;
            }
        }
        w->size[nr] = shape[d];
        for (int q = 0; q < 3; q++) w->st[q][nr] = strides[q][d];
        nr++;
    }
    if (nr == 0) {
        w->size[0] = 1;
        nr = 1;
    }
    w->nr = nr;
}

/* ------------------------------------------------------------ typed loops */

/* Returns -1, or the local position of the first bad index (and its value). */
typedef void (*ix_row_fn)(void *d, const void *s, int64_t n, const void *alpha);
static inline int ix_has_row(ix_row_fn f) { return f != NULL; }
typedef int64_t (*ix_inner_fn)(const ix_walk *w, const int64_t *off, int64_t n, int64_t i0, int64_t i1, int iouter,
                               const void *alpha, int64_t *badv);

#define IX_STEP(G, T0, ELEM)                                                                                      \
    {                                                                                                             \
        int64_t k = ix_load(b2, is64, o2 + j * r2 + i * d2);                                                      \
        if (wrap && k < 0) k += bound;                                                                            \
        if ((uint64_t)k >= (uint64_t)bound) {                                                                     \
            *badv = ix_load(b2, is64, o2 + j * r2 + i * d2);                                                      \
            return iouter ? (i - i0) * n + j : j * (i1 - i0) + (i - i0);                                          \
        }                                                                                                         \
        T0 *d = b0 + j * r0 + ((G) ? i * d0 : k * xs);                                                            \
        const T0 *s = b1 + j * r1 + ((G) ? k * xs : i * d1);                                                      \
        ELEM;                                                                                                     \
    }

/* A broadcast index (index_select, index_add...) moves whole runs at once;
 * a copy moves a contiguous run that does not overlap itself with memcpy. */
#define IX_RUN(G, T0, CP, ELEM, ROW)                                                                              \
    for (int64_t i = i0; i < i1; i++) {                                                                           \
        int64_t j = 0;                                                                                            \
        int64_t k = ix_load(b2, is64, o2 + i * d2);                                                               \
        if (wrap && k < 0) k += bound;                                                                            \
        if ((uint64_t)k >= (uint64_t)bound) {                                                                     \
            *badv = ix_load(b2, is64, o2 + i * d2);                                                               \
            return (i - i0) * n;                                                                                  \
        }                                                                                                         \
        T0 *dd = b0 + ((G) ? i * d0 : k * xs);                                                                    \
        const T0 *ss = b1 + ((G) ? k * xs : i * d1);                                                              \
        const int disjoint = r0 == 1 && r1 == 1 &&                                                                \
                             ((uintptr_t)(dd + n) <= (uintptr_t)ss || (uintptr_t)(ss + n) <= (uintptr_t)dd);     \
        if ((CP) && disjoint) {                                                                                   \
            memcpy(dd, ss, (size_t)n * sizeof(T0)); /* a disjoint row of a copy: the element loop's result */    \
        } else if (ix_has_row(ROW) && disjoint) {                                                                 \
            ix_row_fn row_ = (ROW); /* a disjoint row of a reduction: its lanes, the element loop's bits */       \
            row_(dd, ss, n, alpha);                                                                               \
        } else if (r0 == 1 && r1 == 1) {                                                                          \
            for (; j < n; j++) {                                                                                  \
                T0 *d = dd + j;                                                                                   \
                const T0 *s = ss + j;                                                                             \
                ELEM;                                                                                             \
            }                                                                                                     \
        } else {                                                                                                  \
            for (; j < n; j++) {                                                                                  \
                T0 *d = dd + j * r0;                                                                              \
                const T0 *s = ss + j * r1;                                                                        \
                ELEM;                                                                                             \
            }                                                                                                     \
        }                                                                                                         \
    }

#define IX_FN(NAME, G, T0, CP, ELEM, ROW)                                                                         \
    static int64_t NAME(const ix_walk *w, const int64_t *off, int64_t n, int64_t i0, int64_t i1, int iouter,     \
                        const void *alpha, int64_t *badv) {                                                       \
        T0 *b0 = (T0 *)w->base[0] + off[0];                                                                       \
        const T0 *b1 = (const T0 *)w->base[1] + off[1];                                                           \
        const char *b2 = w->base[2];                                                                              \
        const int64_t o2 = off[2], last = w->nr - 1;                                                              \
        const int64_t r0 = w->st[0][last], r1 = w->st[1][last], r2 = w->st[2][last];                              \
        const int64_t d0 = w->ds[0], d1 = w->ds[1], d2 = w->ds[2], xs = w->xs, bound = w->bound;                  \
        const int wrap = w->wrap, is64 = w->is64;                                                                 \
        (void)alpha, (void)d0, (void)d1;                                                                          \
        if (iouter && r2 == 0) {                                                                                  \
            IX_RUN(G, T0, CP, ELEM, ROW)                                                                          \
        } else if (iouter) {                                                                                      \
            for (int64_t i = i0; i < i1; i++)                                                                     \
                for (int64_t j = 0; j < n; j++) IX_STEP(G, T0, ELEM)                                              \
        } else {                                                                                                  \
            for (int64_t j = 0; j < n; j++)                                                                       \
                for (int64_t i = i0; i < i1; i++) IX_STEP(G, T0, ELEM)                                            \
        }                                                                                                         \
        return -1;                                                                                                \
    }

#define COPY_ELEM (*d = *s)
IX_FN(gather_1, 1, uint8_t, 1, COPY_ELEM, NULL)
IX_FN(gather_2, 1, uint16_t, 1, COPY_ELEM, NULL)
IX_FN(gather_4, 1, uint32_t, 1, COPY_ELEM, NULL)
IX_FN(gather_8, 1, uint64_t, 1, COPY_ELEM, NULL)
IX_FN(scatter_1, 0, uint8_t, 1, COPY_ELEM, NULL)
IX_FN(scatter_2, 0, uint16_t, 1, COPY_ELEM, NULL)
IX_FN(scatter_4, 0, uint32_t, 1, COPY_ELEM, NULL)
IX_FN(scatter_8, 0, uint64_t, 1, COPY_ELEM, NULL)

/* Reductions: load to the class type A, combine, store (rounding once). */
#define F_SUM(a, b) ((a) + al * (b))
#define F_PROD(a, b) ((a) * (b))
#define F_MAX(a, b) ((b) != (b) ? (b) : ((a) < (b) ? (b) : (a)))
#define F_MIN(a, b) ((b) != (b) ? (b) : ((b) < (a) ? (b) : (a)))
#define I_SUM(a, b) ((int64_t)((uint64_t)(a) + (uint64_t)al * (uint64_t)(b)))
#define I_PROD(a, b) ((int64_t)((uint64_t)(a) * (uint64_t)(b)))
#define I_MAX(a, b) ((a) < (b) ? (b) : (a))
#define I_MIN(a, b) ((b) < (a) ? (b) : (a))

#define RED_ELEM(A, LD, ST, OP) (*d = ST(OP(LD(*d), LD(*s))))
#define ID(x) (x)
#define ST_BOOL(x) ((uint8_t)((x) != 0))

#define IX_RED4(SFX, T0, A, LD, ST, P, SUMROW)                                                                     \
    IX_FN(red_sum_##SFX, 0, T0, 0, A al = *(const A *)alpha; RED_ELEM(A, LD, ST, P##_SUM), SUMROW)                  \
    IX_FN(red_prod_##SFX, 0, T0, 0, RED_ELEM(A, LD, ST, P##_PROD), NULL)                                             \
    IX_FN(red_max_##SFX, 0, T0, 0, RED_ELEM(A, LD, ST, P##_MAX), NULL)                                               \
    IX_FN(red_min_##SFX, 0, T0, 0, RED_ELEM(A, LD, ST, P##_MIN), NULL)

static inline float ld_f16(uint16_t h) { return vt_f16_to_f32(h); }
static inline uint16_t st_f16(float f) { return vt_f32_to_f16(f); }

/* The sum of a disjoint unit-stride row (vt_accumulate_*, vector loops of
 * the active ISA): the same multiply, add and rounding per element as
 * F_SUM, so the same bits as the element loop. */
static void row_sum_f32(void *d, const void *s, int64_t n, const void *alpha) {
    vt_accumulate_f32(d, s, n, *(const float *)alpha);
}

static void row_sum_bf16(void *d, const void *s, int64_t n, const void *alpha) {
    vt_accumulate_bf16(d, s, n, *(const float *)alpha);
}

IX_RED4(f32, float, float, ID, ID, F, row_sum_f32)
IX_RED4(f64, double, double, ID, ID, F, NULL)
IX_RED4(bf16, uint16_t, float, vt_bf16_to_f32, vt_f32_to_bf16, F, row_sum_bf16)
IX_RED4(f16, uint16_t, float, ld_f16, st_f16, F, NULL)
IX_RED4(i8, int8_t, int64_t, (int64_t), (int8_t), I, NULL)
IX_RED4(u8, uint8_t, int64_t, (int64_t), (uint8_t), I, NULL)
IX_RED4(i16, int16_t, int64_t, (int64_t), (int16_t), I, NULL)
IX_RED4(i32, int32_t, int64_t, (int64_t), (int32_t), I, NULL)
IX_RED4(i64, int64_t, int64_t, (int64_t), (int64_t), I, NULL)
IX_RED4(b8, uint8_t, int64_t, (int64_t), ST_BOOL, I, NULL)

#define RED_ROW(SFX) {red_sum_##SFX, red_prod_##SFX, red_max_##SFX, red_min_##SFX}
static const ix_inner_fn red_table[VT_DTYPE_COUNT][4] = {
    [VT_F32] = RED_ROW(f32), [VT_BF16] = RED_ROW(bf16), [VT_F16] = RED_ROW(f16), [VT_F64] = RED_ROW(f64),
    [VT_I8] = RED_ROW(i8),   [VT_U8] = RED_ROW(u8),     [VT_I16] = RED_ROW(i16), [VT_I32] = RED_ROW(i32),
    [VT_I64] = RED_ROW(i64), [VT_BOOL] = RED_ROW(b8),
};

/* ------------------------------------------------------------ driver */

#define IX_ITEM 16384 /* element steps per work item */
#define IX_SPLIT_MIN 65536 /* element steps worth waking the pool for */

typedef struct run_ctx {
    const ix_walk *w;
    ix_inner_fn fn;
    int iouter;
    int64_t run, blk, nblk, lch, nlch, nouter;
    union { float f; double d; int64_t i; } alpha;
    ix_err err;
    int err_dim;
} run_ctx;

static void run_items(void *p, int64_t begin, int64_t end) {
    run_ctx *c = p;
    const ix_walk *w = c->w;
    int last = w->nr - 1;
    for (int64_t item = begin; item < end; item++) {
        int64_t lc = item % c->nlch, rest = item / c->nlch;
        int64_t b = rest % c->nblk, o = rest / c->nblk;
        int64_t off[3] = {0, 0, 0};
        for (int d = last - 1; d >= 0; d--) {
            int64_t x = o % w->size[d];
            o /= w->size[d];
            for (int q = 0; q < 3; q++) off[q] += x * w->st[q][d];
        }
        int64_t j0 = b * c->blk, n = w->size[last] - j0 < c->blk ? w->size[last] - j0 : c->blk;
        for (int q = 0; q < 3; q++) off[q] += j0 * w->st[q][last];
        int64_t i0 = lc * c->lch, i1 = w->L - i0 < c->lch ? w->L : i0 + c->lch;
        int64_t badv = 0;
        int64_t local = c->fn(w, off, n, i0, i1, c->iouter, &c->alpha, &badv);
        if (local >= 0) ix_err_note(&c->err, item * c->blk * c->lch + local, badv, w->bound, c->err_dim);
    }
}

static int64_t iabs64(int64_t x) { return x < 0 ? -x : x; }

vt_status ix_walk_run(const ix_walk *w, vt_dtype dt, ix_mode mode, vt_scalar alpha, int conflicts, const char *op,
                      int err_dim) {
    run_ctx c;
    memset(&c, 0, sizeof c);
    c.w = w;
    c.err_dim = err_dim;
    int last = w->nr - 1;
    if (w->L == 0 || w->size[last] == 0) return VT_OK;
    for (int d = 0; d < last; d++)
        if (w->size[d] == 0) return VT_OK;
    if (mode == IX_COPY) {
        static const ix_inner_fn g[4] = {gather_1, gather_2, gather_4, gather_8};
        static const ix_inner_fn s[4] = {scatter_1, scatter_2, scatter_4, scatter_8};
        size_t es = vt_dtype_size(dt);
        int lg = es == 1 ? 0 : es == 2 ? 1 : es == 4 ? 2 : 3;
        c.fn = w->gather ? g[lg] : s[lg];
    } else {
        c.fn = red_table[dt][mode - IX_SUM];
        if (dt == VT_F64) c.alpha.d = alpha.is_float ? alpha.f : (double)alpha.i;
        else if (vt_dtype_is_float(dt)) c.alpha.f = (float)(alpha.is_float ? alpha.f : (double)alpha.i);
        else c.alpha.i = alpha.is_float ? (int64_t)alpha.f : alpha.i;
    }
    /* Walk the dim outermost when the moving operand is laid out along it
     * more coarsely than along the run. */
    int q = w->gather ? 0 : 1;
    c.iouter = iabs64(w->ds[q]) >= iabs64(w->st[q][last]) || w->size[last] == 1;
    int64_t run = w->size[last], L = w->L;
    if (c.iouter) {
        c.blk = run < IX_ITEM ? run : IX_ITEM;
        c.lch = conflicts ? L : (IX_ITEM / c.blk > 0 ? IX_ITEM / c.blk : 1);
    } else {
        c.lch = conflicts ? L : (L < IX_ITEM ? L : IX_ITEM);
        c.blk = IX_ITEM / c.lch > 0 ? IX_ITEM / c.lch : 1;
        if (c.blk > run) c.blk = run;
    }
    if (c.lch > L) c.lch = L;
    c.nblk = (run + c.blk - 1) / c.blk;
    c.nlch = (L + c.lch - 1) / c.lch;
    c.nouter = 1;
    for (int d = 0; d < last; d++) c.nouter *= w->size[d];
    /* A scatter whose indices may repeat walks all of them in one item; with
     * fewer items than threads (index_add's backward of index_select: one
     * row block) the run is split between the threads instead: disjoint
     * columns never conflict, and each still sums in index order. */
    int64_t nt = vt_num_threads();
    if (conflicts && c.nouter * c.nblk < nt && L * run >= IX_SPLIT_MIN) {
        int64_t want = (nt + c.nouter - 1) / c.nouter;
        int64_t b = ((run + want - 1) / want + 63) / 64 * 64;
        if (b < c.blk) {
            c.blk = b;
            c.nblk = (run + b - 1) / b;
        }
    }
    ix_err_init(&c.err);
    vt_parallel_for(c.nouter * c.nblk * c.nlch, 1, run_items, &c);
    return ix_err_finish(&c.err, op);
}
