/* softmax.c — vt_softmax and vt_softmax_backward: the lines along `dim` are
 * walked either one at a time ("rows", when the dim is contiguous) or 16
 * side by side along the input's most contiguous other dim ("cols", a
 * strided softmax dim such as the channels of NCHW), staged through f32 (or
 * f64) buffers when a dtype or stride keeps the microkernels from reading
 * memory directly. */
#include <stdatomic.h>
#include <stdlib.h>

#include "softmax.h"

/* ------------------------------------------------------------ portable microkernels */

#define SM_PORTABLE(SFX, T, EXP, LOG)                                                                               \
    static void row_##SFX(const T *x, T *y, int64_t n, int is_log) {                                                  \
        T m = -INFINITY;                                                                                            \
        for (int64_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m;                                                    \
        double s = 0;                                                                                               \
        if (is_log) {                                                                                                  \
            for (int64_t i = 0; i < n; i++) s += EXP(x[i] - m);                                                     \
            T ls = LOG((T)s);                                                                                       \
            for (int64_t i = 0; i < n; i++) y[i] = x[i] - m - ls;                                                   \
        } else {                                                                                                    \
            for (int64_t i = 0; i < n; i++) s += (y[i] = EXP(x[i] - m));                                            \
            T r = (T)1 / (T)s;                                                                                      \
            for (int64_t i = 0; i < n; i++) y[i] *= r;                                                              \
        }                                                                                                           \
    }                                                                                                               \
    static void row_bwd_##SFX(const T *g, const T *y, T *gi, int64_t n, int is_log) {                                 \
        double s = 0;                                                                                               \
        if (is_log) {                                                                                                  \
            for (int64_t i = 0; i < n; i++) s += g[i];                                                              \
            for (int64_t i = 0; i < n; i++) gi[i] = g[i] - EXP(y[i]) * (T)s;                                        \
        } else {                                                                                                    \
            for (int64_t i = 0; i < n; i++) s += (double)g[i] * y[i];                                               \
            for (int64_t i = 0; i < n; i++) gi[i] = y[i] * (g[i] - (T)s);                                           \
        }                                                                                                           \
    }                                                                                                               \
    static void cols_##SFX(const T *x, int64_t xs, T *y, int64_t ys, int64_t C, int64_t w, int is_log) {              \
        T m[VT_SM_LANES];                                                                                           \
        double s[VT_SM_LANES];                                                                                      \
        for (int64_t l = 0; l < w; l++) m[l] = -INFINITY, s[l] = 0;                                                 \
        for (int64_t c = 0; c < C; c++)                                                                             \
            for (int64_t l = 0; l < w; l++) m[l] = x[c * xs + l] > m[l] ? x[c * xs + l] : m[l];                     \
        if (is_log) {                                                                                                  \
            for (int64_t c = 0; c < C; c++)                                                                         \
                for (int64_t l = 0; l < w; l++) s[l] += EXP(x[c * xs + l] - m[l]);                                  \
            T ls[VT_SM_LANES];                                                                                      \
            for (int64_t l = 0; l < w; l++) ls[l] = LOG((T)s[l]);                                                   \
            for (int64_t c = 0; c < C; c++)                                                                         \
                for (int64_t l = 0; l < w; l++) y[c * ys + l] = x[c * xs + l] - m[l] - ls[l];                       \
        } else {                                                                                                    \
            for (int64_t c = 0; c < C; c++)                                                                         \
                for (int64_t l = 0; l < w; l++) s[l] += (y[c * ys + l] = EXP(x[c * xs + l] - m[l]));                \
            T r[VT_SM_LANES];                                                                                       \
            for (int64_t l = 0; l < w; l++) r[l] = (T)1 / (T)s[l];                                                  \
            for (int64_t c = 0; c < C; c++)                                                                         \
                for (int64_t l = 0; l < w; l++) y[c * ys + l] *= r[l];                                              \
        }                                                                                                           \
    }                                                                                                               \
    static void cols_bwd_##SFX(const T *g, int64_t gs, const T *y, int64_t ys, T *gi, int64_t is, int64_t C,       \
                               int64_t w, int is_log) {                                                                \
        double s[VT_SM_LANES] = {0};                                                                                \
        for (int64_t c = 0; c < C; c++)                                                                             \
            for (int64_t l = 0; l < w; l++) s[l] += is_log ? (double)g[c * gs + l] : (double)g[c * gs + l] * y[c * ys + l]; \
        for (int64_t c = 0; c < C; c++)                                                                             \
            for (int64_t l = 0; l < w; l++)                                                                         \
                gi[c * is + l] = is_log ? g[c * gs + l] - EXP(y[c * ys + l]) * (T)s[l]                                 \
                                     : y[c * ys + l] * (g[c * gs + l] - (T)s[l]);                                   \
    }

SM_PORTABLE(f32, float, expf, logf)
SM_PORTABLE(f64, double, exp, log)

const vt_sm_table vt_sm_portable = {row_f32, row_bwd_f32, cols_f32, cols_bwd_f32};

static _Atomic unsigned sm_isa = ~0u;

unsigned vt_softmax_select_isa(unsigned mask) {
    const unsigned isa = vt_isa_widest(mask);
    atomic_store(&sm_isa, isa);
    return isa;
}

static const vt_sm_table *active_table(void) {
    unsigned isa = atomic_load(&sm_isa);
    if (isa == ~0u) {
        vt_kernels_ready();
        isa = atomic_load(&sm_isa);
    }
#if VT_X86
    if (isa & VT_ISA_AVX512) return &vt_sm_avx512;
    if (isa & VT_ISA_AVX2) return &vt_sm_avx2;
#endif
    return &vt_sm_portable;
}

/* ------------------------------------------------------------ checks */

static vt_status same_shape(const vt_tensor *a, const vt_tensor *b, const char *what) {
    int same = a->ndim == b->ndim;
    for (int d = 0; same && d < a->ndim; d++) same = a->sizes[d] == b->sizes[d];
    if (!same) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: shape differs from the input's", what);
    return VT_OK;
}

static vt_status float_operand(const vt_tensor *t, const char *what) {
    vt_status s = vt_tensor_validate(t, what);
    if (s != VT_OK) return s;
    if (!vt_dtype_is_float(t->dtype))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: expected a floating dtype, got %s", what,
                            vt_dtype_name(t->dtype));
    return VT_OK;
}

vt_status vt_softmax_check(const vt_tensor *out, const vt_tensor *in, int dim, int *wrapped) {
    vt_status s;
    if (!out || !in) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "softmax: NULL tensor");
    if ((s = float_operand(in, "softmax input")) != VT_OK) return s;
    if ((s = float_operand(out, "softmax out")) != VT_OK) return s;
    if ((s = same_shape(out, in, "softmax out")) != VT_OK) return s;
    return vt_wrap_dim(dim, in->ndim, wrapped);
}

vt_status vt_softmax_backward_check(const vt_tensor *grad_in, const vt_tensor *grad_out, const vt_tensor *y, int dim,
                                    int *wrapped) {
    vt_status s;
    if (!grad_in || !grad_out || !y) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "softmax_backward: NULL tensor");
    if ((s = float_operand(y, "softmax_backward output")) != VT_OK) return s;
    if ((s = float_operand(grad_out, "softmax_backward grad_output")) != VT_OK) return s;
    if ((s = float_operand(grad_in, "softmax_backward grad_input")) != VT_OK) return s;
    if ((s = same_shape(grad_out, y, "softmax_backward grad_output")) != VT_OK) return s;
    if ((s = same_shape(grad_in, y, "softmax_backward grad_input")) != VT_OK) return s;
    return vt_wrap_dim(dim, y->ndim, wrapped);
}

/* ------------------------------------------------------------ driver */

typedef struct sm_ctx {
    int nops, log, bwd, col;
    vt_dtype cdt; /* F32 or F64 */
    size_t ces;
    int64_t C, cs[3];
    int64_t L, ls[3];                         /* cols: the lane dim */
    int nd;                                   /* outer dims (coalesced) */
    int64_t sz[VT_MAX_DIMS], st[3][VT_MAX_DIMS];
    int64_t items, tiles;
    char *base[3];
    vt_dtype dt[3];
    size_t es[3];
    const vt_sm_table *tab;
    const vt_source *src; /* where the forward's input comes from (NULL: memory) */
    _Atomic int oom;
} sm_ctx;

static int64_t abs64(int64_t a) { return a < 0 ? -a : a; }

/* ops: fwd {out, in}; bwd {grad_in, grad_out, y}. ref: the input whose
 * layout decides the walk. */
static void plan(sm_ctx *c, int nops, const vt_tensor *const *ops, int ref, int dim) {
    c->nops = nops;
    c->cdt = VT_F32;
    for (int k = 0; k < nops; k++) {
        c->dt[k] = ops[k]->dtype;
        c->es[k] = vt_dtype_size(ops[k]->dtype);
        c->base[k] = vt_base(ops[k]);
        if (ops[k]->dtype == VT_F64) c->cdt = VT_F64;
    }
    c->ces = vt_dtype_size(c->cdt);
    const vt_tensor *r = ops[ref];
    int nd = r->ndim;
    c->C = nd ? r->sizes[dim] : 1;
    for (int k = 0; k < nops; k++) c->cs[k] = nd ? ops[k]->strides[dim] : 1;
    /* Lanes when the softmax dim is strided and another dim is closer. */
    int lane = -1;
    if (c->C > 1 && abs64(r->strides[dim]) != 1) {
        for (int d = 0; d < nd; d++)
            if (d != dim && r->sizes[d] > 1 && (lane < 0 || abs64(r->strides[d]) <= abs64(r->strides[lane])))
                lane = d;
        if (lane >= 0 && abs64(r->strides[lane]) >= abs64(r->strides[dim])) lane = -1;
    }
    c->col = lane >= 0;
    c->L = 1;
    if (c->col) {
        c->L = r->sizes[lane];
        for (int k = 0; k < nops; k++) c->ls[k] = ops[k]->strides[lane];
    }
    c->nd = 0;
    int64_t lines = 1;
    for (int d = 0; d < nd; d++) {
        if (d == dim || d == lane) continue;
        int64_t n = r->sizes[d];
        lines *= n;
        if (n == 1) continue;
        int j = c->nd, merge = j > 0;
        for (int k = 0; merge && k < nops; k++) merge = c->st[k][j - 1] == ops[k]->strides[d] * n;
        if (merge) {
            c->sz[j - 1] *= n;
            for (int k = 0; k < nops; k++) c->st[k][j - 1] = ops[k]->strides[d];
        } else {
            c->sz[j] = n;
            for (int k = 0; k < nops; k++) c->st[k][j] = ops[k]->strides[d];
            c->nd++;
        }
    }
    c->tiles = c->col ? (c->L + VT_SM_LANES - 1) / VT_SM_LANES : 1;
    c->items = lines * c->tiles;
    if (c->C == 0 || c->L == 0) c->items = 0;
}

/* The lines in order: each operand's offset of the current line, found by
 * division once per range, then stepped (a division per line cost as much
 * as a short line's softmax). */
typedef struct line_walk {
    int64_t idx[VT_MAX_DIMS], off[3];
} line_walk;

static void walk_start(const sm_ctx *c, int64_t line, line_walk *w) {
    for (int k = 0; k < c->nops; k++) w->off[k] = 0;
    for (int d = c->nd - 1; d >= 0; d--) {
        int64_t i = line % c->sz[d];
        line /= c->sz[d];
        w->idx[d] = i;
        for (int k = 0; k < c->nops; k++) w->off[k] += i * c->st[k][d];
    }
}

static void walk_next(const sm_ctx *c, line_walk *w) {
    for (int d = c->nd - 1; d >= 0; d--) {
        for (int k = 0; k < c->nops; k++) w->off[k] += c->st[k][d];
        if (++w->idx[d] < c->sz[d]) return;
        for (int k = 0; k < c->nops; k++) w->off[k] -= c->st[k][d] * c->sz[d];
        w->idx[d] = 0;
    }
}

/* Row walk: one line of C values per item. */
static void rows_range(void *p, int64_t b, int64_t e) {
    sm_ctx *c = p;
    const int64_t C = c->C;
    char *buf = malloc((size_t)C * c->ces * 3);
    if (!buf) {
        c->oom = 1;
        return;
    }
    line_walk w;
    walk_start(c, b, &w);
    for (int64_t it = b; it < e; it++, walk_next(c, &w)) {
        const int64_t *off = w.off;
        void *ptr[3];
        int direct[3];
        for (int k = 0; k < c->nops; k++) {
            char *m = c->base[k] + off[k] * (int64_t)c->es[k];
            direct[k] = c->dt[k] == c->cdt && (c->cs[k] == 1 || C == 1) && !(k == 1 && c->src);
            if (direct[k]) {
                ptr[k] = m;
            } else if (k == 1 && c->src) { /* the line from the source, in runs */
                ptr[k] = buf + (size_t)k * C * c->ces;
                for (int64_t i = 0; i < C; i += VT_SOURCE_MAX) {
                    const int64_t n = C - i < VT_SOURCE_MAX ? C - i : VT_SOURCE_MAX;
                    vt_convert(c->dt[k], c->src->read(c->src->ctx, off[k] + i, n), 1, c->cdt,
                               (char *)ptr[k] + i * (int64_t)c->ces, 1, n);
                }
            } else {
                ptr[k] = buf + (size_t)k * C * c->ces;
                if (k > 0) vt_convert(c->dt[k], m, c->cs[k], c->cdt, ptr[k], 1, C);
            }
        }
        if (c->cdt == VT_F32) {
            if (c->bwd) c->tab->row_bwd(ptr[1], ptr[2], ptr[0], C, c->log);
            else c->tab->row(ptr[1], ptr[0], C, c->log);
        } else {
            if (c->bwd) row_bwd_f64(ptr[1], ptr[2], ptr[0], C, c->log);
            else row_f64(ptr[1], ptr[0], C, c->log);
        }
        if (!direct[0]) vt_convert(c->cdt, ptr[0], 1, c->dt[0], c->base[0] + off[0] * (int64_t)c->es[0], c->cs[0], C);
    }
    free(buf);
}

/* Cols walk: up to 16 neighbouring lines along the lane dim per item. */
static void cols_range(void *p, int64_t b, int64_t e) {
    sm_ctx *c = p;
    const int64_t C = c->C, W = VT_SM_LANES;
    char *buf = malloc((size_t)C * W * c->ces * 3);
    if (!buf) {
        c->oom = 1;
        return;
    }
    line_walk w;
    walk_start(c, b / c->tiles, &w);
    for (int64_t it = b; it < e; it++) {
        const int64_t tile = it % c->tiles, *off = w.off;
        if (it > b && tile == 0) walk_next(c, &w);
        int64_t l0 = tile * W, w = c->L - l0 < W ? c->L - l0 : W;
        void *ptr[3];
        int64_t rs[3];
        for (int k = 0; k < c->nops; k++) {
            char *m = c->base[k] + (off[k] + l0 * c->ls[k]) * (int64_t)c->es[k];
            if (c->dt[k] == c->cdt && (c->ls[k] == 1 || w == 1)) {
                ptr[k] = m;
                rs[k] = c->cs[k];
            } else {
                ptr[k] = buf + (size_t)k * C * W * c->ces;
                rs[k] = W;
                if (k > 0)
                    for (int64_t i = 0; i < C; i++)
                        vt_convert(c->dt[k], m + i * c->cs[k] * (int64_t)c->es[k], c->ls[k], c->cdt,
                                   (char *)ptr[k] + i * W * c->ces, 1, w);
            }
        }
        if (c->cdt == VT_F32) {
            if (c->bwd) c->tab->cols_bwd(ptr[1], rs[1], ptr[2], rs[2], ptr[0], rs[0], C, w, c->log);
            else c->tab->cols(ptr[1], rs[1], ptr[0], rs[0], C, w, c->log);
        } else {
            if (c->bwd) cols_bwd_f64(ptr[1], rs[1], ptr[2], rs[2], ptr[0], rs[0], C, w, c->log);
            else cols_f64(ptr[1], rs[1], ptr[0], rs[0], C, w, c->log);
        }
        char *m0 = c->base[0] + (off[0] + l0 * c->ls[0]) * (int64_t)c->es[0];
        if (ptr[0] != m0) {
            for (int64_t i = 0; i < C; i++)
                vt_convert(c->cdt, (char *)ptr[0] + i * W * c->ces, 1, c->dt[0], m0 + i * c->cs[0] * (int64_t)c->es[0],
                           c->ls[0], w);
        }
    }
    free(buf);
}

static vt_status run(sm_ctx *c) {
    if (c->items == 0) return VT_OK;
    c->tab = active_table();
    int64_t work = c->C * (c->col ? VT_SM_LANES : 1);
    int64_t grain = VT_ELEMENTWISE_GRAIN / (work ? work : 1);
    vt_parallel_for(c->items, grain < 1 ? 1 : grain, c->col ? cols_range : rows_range, c);
    if (c->oom) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "softmax: out of host memory for staging buffers");
    return VT_OK;
}

vt_status vt_softmax(const vt_tensor *out, const vt_tensor *in, int dim, int is_log) {
    int d;
    vt_status s = vt_softmax_check(out, in, dim, &d);
    return s == VT_OK ? vt_softmax_run(out, in, d, is_log, NULL) : s;
}

/* dim wrapped as vt_wrap_dim does, for arguments it accepted. */
static int wrapped_dim(int dim, int ndim) { return dim < 0 ? dim + (ndim > 0 ? ndim : 1) : dim; }

vt_status vt_softmax_run(const vt_tensor *out, const vt_tensor *in, int dim, int is_log, const vt_source *src) {
    const int d = wrapped_dim(dim, in->ndim);
    sm_ctx c;
    memset(&c, 0, sizeof c);
    c.log = is_log != 0;
    c.src = src;
    const vt_tensor *ops[2] = {out, in};
    plan(&c, 2, ops, 1, d);
    if (src && c.col) return vt_set_error(VT_ERR_INTERNAL, "softmax: a source cannot feed a strided softmax dim");
    return run(&c);
}

int vt_softmax_takes_source(const vt_tensor *out, const vt_tensor *in, int dim) {
    const int d = wrapped_dim(dim, in->ndim);
    if (!vt_view_is_dense_forward(in)) return 0;
    sm_ctx c;
    memset(&c, 0, sizeof c);
    const vt_tensor *ops[2] = {out, in};
    plan(&c, 2, ops, 1, d);
    return !c.col && c.items > 0 && c.cs[1] == 1 && c.C >= VT_SOURCE_RUN;
}

vt_status vt_softmax_backward(const vt_tensor *grad_in, const vt_tensor *grad_out, const vt_tensor *y, int dim,
                              int is_log) {
    int d;
    vt_status s = vt_softmax_backward_check(grad_in, grad_out, y, dim, &d);
    if (s != VT_OK) return s;
    sm_ctx c;
    memset(&c, 0, sizeof c);
    c.log = is_log != 0;
    c.bwd = 1;
    const vt_tensor *ops[3] = {grad_in, grad_out, y};
    plan(&c, 3, ops, 2, d);
    return run(&c);
}
