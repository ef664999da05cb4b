/* norm.c — layer norm, RMS norm, group norm and batch norm, forward and
 * backward. Each entry point brings its tensors to a dense layout (views
 * that already are dense are used in place), loads the small per-row or
 * per-channel vectors in the compute type, and runs one of the two drivers
 * of norm_driver.h over "units" in parallel. */
#include <stdatomic.h>
#include <stdlib.h>

#include "kernels/norm/norm.h"

#define NORM_CH 1024 /* elements per chunk: one partial sum, one staging buffer */
#define NORM_GRAIN 32768
#define NORM_BLOCKS 64 /* row blocks (fixed count) whose partial dw / db meet in order */
#define NORM_LANE_RUN 32 /* batch norm runs shorter than this are regrouped channel-major */
#define NORM_SOURCE_MAX_ROW ((int64_t)1 << 20) /* the longest row a thread stages from a source */

typedef struct norm_geo {
    int64_t U, R, L;          /* units, runs per unit, run length */
    int64_t ustride, rstride; /* element offsets of unit u, run r: u * ustride + r * rstride */
    int64_t cmod, cmul, rmul; /* channel of run r of unit u: (u % cmod) * cmul + r * rmul; cmod 0: vector params */
    int64_t count;            /* R * L */
} norm_geo;

/* ------------------------------------------------------------ ISA choice */

static _Atomic unsigned norm_isa = ~0u;

unsigned vt_norm_select_isa(unsigned mask) {
    const unsigned isa = vt_isa_widest(mask);
    atomic_store(&norm_isa, isa);
    return isa;
}

static const vt_norm_f32_kernels *f32_kernels(void) {
    unsigned isa = atomic_load(&norm_isa);
    if (isa == ~0u) {
        vt_kernels_ready();
        isa = atomic_load(&norm_isa);
    }
#if VT_X86
    if (isa & VT_ISA_AVX512) return &vt_norm_f32_avx512;
    if (isa & VT_ISA_AVX2) return &vt_norm_f32_avx2;
#endif
    return &vt_norm_f32_portable;
}

/* ------------------------------------------------------------ drivers */

#define T float
#define SFX f32
#define TDT VT_F32
#define KT vt_norm_f32_kernels
#include "kernels/norm/norm_driver.h"
#undef T
#undef SFX
#undef TDT
#undef KT
#define T double
#define SFX f64
#define TDT VT_F64
#define KT vt_norm_f64_kernels
#include "kernels/norm/norm_driver.h"
#undef T
#undef SFX
#undef TDT
#undef KT

/* ------------------------------------------------------------ scratch and layouts */

typedef struct scratch {
    void *p[24];
    int n;
} scratch;

static void *sc_alloc(scratch *sc, size_t bytes) {
    if (sc->n == (int)(sizeof sc->p / sizeof sc->p[0])) return NULL;
    void *p = calloc(1, bytes ? bytes : 1);
    if (p) sc->p[sc->n++] = p;
    return p;
}

static void sc_free(scratch *sc) {
    for (int i = 0; i < sc->n; i++) free(sc->p[i]);
    sc->n = 0;
}

static vt_status oom(const char *op, size_t bytes) {
    return vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes of scratch", op, bytes);
}

/* Dense strides of t's shape: row-major, or channel-major ([1] outermost,
 * then [0], then the rest) for batch norm's regrouping. */
static void dense_strides(const vt_tensor *t, int channel_major, int64_t *st) {
    int64_t n = 1;
    for (int32_t d = t->ndim - 1; d >= 2; d--) st[d] = n, n *= t->sizes[d];
    if (t->ndim < 2) {
        for (int32_t d = t->ndim - 1; d >= 0; d--) st[d] = n, n *= t->sizes[d];
        return;
    }
    if (channel_major) {
        st[0] = n, n *= t->sizes[0];
        st[1] = n;
    } else {
        st[1] = n, n *= t->sizes[1];
        st[0] = n;
    }
}

/* A dense view (layout per channel_major) with t's dtype and shape: t
 * itself when it is laid out so, else fresh scratch, filled from t when
 * copy_in. *base receives the first element's address. */
static vt_status dense(scratch *sc, const char *op, const vt_tensor *t, int channel_major, int copy_in, vt_tensor *v,
                       char **base) {
    int64_t st[VT_MAX_DIMS];
    dense_strides(t, channel_major, st);
    int64_t numel = vt_tensor_numel(t);
    int ok = 1;
    for (int32_t d = 0; d < t->ndim; d++)
        if (t->sizes[d] > 1 && t->strides[d] != st[d]) ok = 0;
    size_t es = vt_dtype_size(t->dtype);
    if (ok || numel == 0) {
        *v = *t;
        *base = vt_base(t);
        return VT_OK;
    }
    *v = *t;
    v->offset = 0;
    memcpy(v->strides, st, sizeof st);
    v->data = sc_alloc(sc, (size_t)numel * es);
    if (!v->data) return oom(op, (size_t)numel * es);
    *base = v->data;
    return copy_in ? vt_copy(v, t) : VT_OK;
}

/* t's elements (row-major) as n values of dtype cdt in scratch; NULL t gives NULL. */
static vt_status load_vec(scratch *sc, const char *op, const vt_tensor *t, vt_dtype cdt, void **out) {
    *out = NULL;
    if (!t) return VT_OK;
    int64_t n = vt_tensor_numel(t);
    size_t bytes = (size_t)(n ? n : 1) * vt_dtype_size(cdt);
    void *p = sc_alloc(sc, bytes);
    if (!p) return oom(op, bytes);
    *out = p;
    if (n == 0) return VT_OK;
    vt_tensor v = *t;
    v.dtype = cdt;
    v.data = p;
    v.offset = 0;
    dense_strides(t, 0, v.strides);
    return vt_copy(&v, t);
}

static vt_status store_vec(const vt_tensor *t, vt_dtype cdt, const void *p) {
    if (!t || vt_tensor_numel(t) == 0) return VT_OK;
    vt_tensor v = *t;
    v.dtype = cdt;
    v.data = (void *)p;
    v.offset = 0;
    dense_strides(t, 0, v.strides);
    return vt_copy(t, &v);
}

static vt_status scratch_vec(scratch *sc, const char *op, int64_t n, vt_dtype cdt, void **out) {
    size_t bytes = (size_t)(n ? n : 1) * vt_dtype_size(cdt);
    *out = sc_alloc(sc, bytes);
    return *out ? VT_OK : oom(op, bytes);
}

static vt_dtype compute_of(const vt_tensor *in) { return in->dtype == VT_F64 ? VT_F64 : VT_F32; }

static int64_t grain_of(int64_t unit_elems) { return unit_elems >= NORM_GRAIN ? 1 : NORM_GRAIN / (unit_elems ? unit_elems : 1); }

/* ------------------------------------------------------------ driver launch */

typedef struct fwd_args {
    const norm_geo *g;
    const char *x;
    vt_dtype xdt;
    char *y;
    vt_dtype ydt;
    double eps;
    int rms, have_stats;
    const void *w, *b;
    void *mean, *rstd, *var;
    const vt_source *src; /* x through a source (NULL: memory) */
} fwd_args;

/* VT_ERR_OUT_OF_MEMORY when a thread could not stage its units. */
static vt_status run_fwd(vt_dtype cdt, const fwd_args *a) {
    int64_t grain = grain_of(a->g->count);
    _Atomic int oom = 0;
    if (cdt == VT_F64) {
        fwd_ctx_f64 c = {a->g, &vt_norm_f64_portable, a->x, a->xdt, a->y, a->ydt, a->eps, a->rms, a->have_stats,
                         a->w, a->b, a->mean, a->rstd, a->var, a->src, &oom};
        vt_parallel_for(a->g->U, grain, fwd_range_f64, &c);
    } else {
        fwd_ctx_f32 c = {a->g, f32_kernels(), a->x, a->xdt, a->y, a->ydt, a->eps, a->rms, a->have_stats,
                         a->w, a->b, a->mean, a->rstd, a->var, a->src, &oom};
        vt_parallel_for(a->g->U, grain, fwd_range_f32, &c);
    }
    return atomic_load(&oom) ? vt_set_error(VT_ERR_OUT_OF_MEMORY, "normalisation: out of host memory staging rows")
                             : VT_OK;
}

typedef struct bwd_args {
    const norm_geo *g;
    const char *x, *dy;
    vt_dtype xdt, dydt;
    char *dx;
    vt_dtype dxdt;
    const void *w, *mean, *rstd;
    int stats_fixed, rms;
    double *run_sg, *run_sgx;
    void *dwp, *dbp;
    int64_t block_rows, tasks;
} bwd_args;

static void run_bwd(vt_dtype cdt, const bwd_args *a) {
    int64_t grain = a->g->cmod ? grain_of(a->g->count) : 1;
    if (cdt == VT_F64) {
        bwd_ctx_f64 c = {a->g, &vt_norm_f64_portable, a->x, a->dy, a->xdt, a->dydt, a->dx, a->dxdt, a->w, a->mean,
                         a->rstd, a->stats_fixed, a->rms, a->run_sg, a->run_sgx, a->dwp, a->dbp, a->block_rows};
        vt_parallel_for(a->tasks, grain, bwd_range_f64, &c);
    } else {
        bwd_ctx_f32 c = {a->g, f32_kernels(), a->x, a->dy, a->xdt, a->dydt, a->dx, a->dxdt, a->w, a->mean,
                         a->rstd, a->stats_fixed, a->rms, a->run_sg, a->run_sgx, a->dwp, a->dbp, a->block_rows};
        vt_parallel_for(a->tasks, grain, bwd_range_f32, &c);
    }
}

static double vec_get(vt_dtype cdt, const void *p, int64_t i) {
    return cdt == VT_F64 ? ((const double *)p)[i] : (double)((const float *)p)[i];
}
static void vec_set(vt_dtype cdt, void *p, int64_t i, double v) {
    if (cdt == VT_F64) ((double *)p)[i] = v;
    else ((float *)p)[i] = (float)v;
}

/* ------------------------------------------------------------ layer norm, RMS norm */

static vt_status rows_forward(const char *op, int rms, const vt_tensor *out, const vt_tensor *mean,
                              const vt_tensor *rstd, const vt_tensor *in, const vt_tensor *weight,
                              const vt_tensor *bias, int32_t norm_ndim, double eps, const vt_source *src) {
    int64_t M, N;
    vt_status s = vt_layer_norm_check(op, in, out, mean, rstd, weight, bias, NULL, norm_ndim, &M, &N);
    if (s != VT_OK) return s;
    if (!out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: output is NULL", op);
    if (src && !vt_norm_rows_takes_source(in, norm_ndim))
        return vt_set_error(VT_ERR_INTERNAL, "%s: a source cannot feed this input", op);
    const vt_dtype cdt = compute_of(in);
    scratch sc = {0};
    vt_tensor xv, yv;
    char *xb, *yb;
    void *w, *b, *mu, *rs;
    if ((s = dense(&sc, op, in, 0, 1, &xv, &xb)) != VT_OK) goto done;
    if ((s = dense(&sc, op, out, 0, 0, &yv, &yb)) != VT_OK) goto done;
    if ((s = load_vec(&sc, op, weight, cdt, &w)) != VT_OK) goto done;
    if ((s = load_vec(&sc, op, bias, cdt, &b)) != VT_OK) goto done;
    if ((s = scratch_vec(&sc, op, M, cdt, &mu)) != VT_OK) goto done;
    if ((s = scratch_vec(&sc, op, M, cdt, &rs)) != VT_OK) goto done;
    norm_geo g = {M, 1, N, N, 0, 0, 0, 0, N};
    fwd_args a = {&g, xb, in->dtype, yb, out->dtype, eps, rms, 0, w, b, mu, rs, NULL, src};
    if ((s = run_fwd(cdt, &a)) != VT_OK) goto done;
    if (yv.data != out->data && (s = vt_copy(out, &yv)) != VT_OK) goto done;
    if ((s = store_vec(mean, cdt, mu)) != VT_OK) goto done;
    s = store_vec(rstd, cdt, rs);
done:
    sc_free(&sc);
    return s;
}

static vt_status rows_backward(const char *op, int rms, const vt_tensor *grad_in, const vt_tensor *grad_weight,
                               const vt_tensor *grad_bias, const vt_tensor *grad_out, const vt_tensor *in,
                               const vt_tensor *mean, const vt_tensor *rstd, const vt_tensor *weight,
                               int32_t norm_ndim) {
    int64_t M, N;
    vt_status s = vt_layer_norm_check(op, in, grad_out, mean, rstd, weight, NULL, grad_in, norm_ndim, &M, &N);
    if (s == VT_OK) s = vt_norm_check_vec(op, "grad_weight", grad_weight, N);
    if (s == VT_OK) s = vt_norm_check_vec(op, "grad_bias", grad_bias, N);
    if (s != VT_OK) return s;
    if (!grad_out || !rstd || (!rms && !mean))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: grad_output and the saved statistics are required", op);
    const vt_dtype cdt = compute_of(in);
    const size_t es = vt_dtype_size(cdt);
    scratch sc = {0};
    vt_tensor xv, dyv, dxv;
    char *xb, *dyb, *dxb = NULL;
    void *w, *mu = NULL, *rs, *dwp = NULL, *dbp = NULL;
    if ((s = dense(&sc, op, in, 0, 1, &xv, &xb)) != VT_OK) goto done;
    if ((s = dense(&sc, op, grad_out, 0, 1, &dyv, &dyb)) != VT_OK) goto done;
    if (grad_in && (s = dense(&sc, op, grad_in, 0, 0, &dxv, &dxb)) != VT_OK) goto done;
    if ((s = load_vec(&sc, op, weight, cdt, &w)) != VT_OK) goto done;
    if (!rms && (s = load_vec(&sc, op, mean, cdt, &mu)) != VT_OK) goto done;
    if ((s = load_vec(&sc, op, rstd, cdt, &rs)) != VT_OK) goto done;
    int64_t block_rows = (M + NORM_BLOCKS - 1) / NORM_BLOCKS, tasks = 0;
    if (block_rows < 1) block_rows = 1;
    tasks = (M + block_rows - 1) / block_rows;
    if (grad_weight && (s = scratch_vec(&sc, op, tasks * N, cdt, &dwp)) != VT_OK) goto done;
    if (grad_bias && (s = scratch_vec(&sc, op, tasks * N, cdt, &dbp)) != VT_OK) goto done;
    norm_geo g = {M, 1, N, N, 0, 0, 0, 0, N};
    bwd_args a = {&g, xb, dyb, in->dtype, grad_out->dtype, dxb, grad_in ? grad_in->dtype : VT_F32, w, mu, rs, 0, rms,
                  NULL, NULL, dwp, dbp, block_rows, tasks};
    run_bwd(cdt, &a);
    if (grad_in && dxv.data != grad_in->data && (s = vt_copy(grad_in, &dxv)) != VT_OK) goto done;
    void *parts[2] = {dwp, dbp};
    const vt_tensor *outs[2] = {grad_weight, grad_bias};
    for (int k = 0; k < 2; k++) {
        if (!outs[k]) continue;
        void *sum;
        if ((s = scratch_vec(&sc, op, N, cdt, &sum)) != VT_OK) goto done;
        for (int64_t j = 0; j < N; j++) {
            double acc = 0;
            for (int64_t t = 0; t < tasks; t++) acc += vec_get(cdt, parts[k], t * N + j);
            vec_set(cdt, sum, j, acc);
        }
        if ((s = store_vec(outs[k], cdt, sum)) != VT_OK) goto done;
    }
    (void)es;
done:
    sc_free(&sc);
    return s;
}

vt_status vt_layer_norm(const vt_tensor *out, const vt_tensor *mean, const vt_tensor *rstd, const vt_tensor *in,
                        const vt_tensor *weight, const vt_tensor *bias, int32_t norm_ndim, double eps) {
    return rows_forward("layer_norm", 0, out, mean, rstd, in, weight, bias, norm_ndim, eps, NULL);
}

vt_status vt_rms_norm(const vt_tensor *out, const vt_tensor *rstd, const vt_tensor *in, const vt_tensor *weight,
                      int32_t norm_ndim, double eps) {
    return rows_forward("rms_norm", 1, out, NULL, rstd, in, weight, NULL, norm_ndim, eps, NULL);
}

int vt_norm_rows_takes_source(const vt_tensor *in, int32_t norm_ndim) {
    if (norm_ndim < 1 || norm_ndim > in->ndim || !vt_view_is_dense_forward(in) || !vt_tensor_is_contiguous(in))
        return 0;
    int64_t n = 1;
    for (int32_t d = in->ndim - norm_ndim; d < in->ndim; d++) n *= in->sizes[d];
    return n >= VT_SOURCE_RUN && n <= NORM_SOURCE_MAX_ROW;
}

vt_status vt_norm_rows_run(int rms, const vt_tensor *out, const vt_tensor *mean, const vt_tensor *rstd,
                           const vt_tensor *in, const vt_tensor *weight, const vt_tensor *bias, int32_t norm_ndim,
                           double eps, const vt_source *src) {
    return rms ? rows_forward("rms_norm", 1, out, NULL, rstd, in, weight, NULL, norm_ndim, eps, src)
               : rows_forward("layer_norm", 0, out, mean, rstd, in, weight, bias, norm_ndim, eps, src);
}

vt_status vt_layer_norm_backward(const vt_tensor *grad_in, const vt_tensor *grad_weight, const vt_tensor *grad_bias,
                                 const vt_tensor *grad_out, const vt_tensor *in, const vt_tensor *mean,
                                 const vt_tensor *rstd, const vt_tensor *weight, int32_t norm_ndim) {
    return rows_backward("layer_norm_backward", 0, grad_in, grad_weight, grad_bias, grad_out, in, mean, rstd, weight,
                         norm_ndim);
}

vt_status vt_rms_norm_backward(const vt_tensor *grad_in, const vt_tensor *grad_weight, const vt_tensor *grad_out,
                               const vt_tensor *in, const vt_tensor *rstd, const vt_tensor *weight, int32_t norm_ndim) {
    return rows_backward("rms_norm_backward", 1, grad_in, grad_weight, NULL, grad_out, in, NULL, rstd, weight,
                         norm_ndim);
}

/* ------------------------------------------------------------ group norm, batch norm */

/* Geometry of [N, C, HW]: group norm units are (n, group), contiguous;
 * batch norm units are channels, N runs of HW apart by C * HW, or (channel
 * major, for short runs) one contiguous run of N * HW. */
static norm_geo channel_geo(int64_t N, int64_t C, int64_t HW, int64_t groups, int channel_major) {
    norm_geo g;
    memset(&g, 0, sizeof g);
    if (groups > 0) {
        int64_t D = C / groups;
        g = (norm_geo){N * groups, D, HW, D * HW, HW, groups, D, 1, D * HW};
    } else if (channel_major) {
        g = (norm_geo){C, 1, N * HW, N * HW, 0, C, 1, 0, N * HW};
    } else {
        g = (norm_geo){C, N, HW, HW, C * HW, C, 1, 0, N * HW};
    }
    return g;
}

typedef struct chan_fwd {
    const vt_tensor *out, *in, *weight, *bias;
    const vt_tensor *mean_out, *rstd_out;  /* group norm / batch norm training: saved statistics */
    const vt_tensor *run_mean, *run_var;   /* batch norm */
    int64_t groups;                        /* > 0: group norm */
    int training;
    double momentum, eps;
} chan_fwd;

static vt_status channel_forward(const char *op, const chan_fwd *f) {
    int64_t N, C, HW;
    vt_status s = vt_channel_norm_check(op, f->in, f->out, NULL, f->groups, &N, &C, &HW);
    if (s != VT_OK) return s;
    if (!f->out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: output is NULL", op);
    const int gn = f->groups > 0;
    const int64_t units = gn ? N * f->groups : C;
    if (s == VT_OK) s = vt_norm_check_vec(op, "weight", f->weight, C);
    if (s == VT_OK) s = vt_norm_check_vec(op, "bias", f->bias, C);
    if (s == VT_OK) s = vt_norm_check_vec(op, "mean", f->mean_out, units);
    if (s == VT_OK) s = vt_norm_check_vec(op, "rstd", f->rstd_out, units);
    if (s == VT_OK) s = vt_norm_check_vec(op, "running_mean", f->run_mean, C);
    if (s == VT_OK) s = vt_norm_check_vec(op, "running_var", f->run_var, C);
    if (s != VT_OK) return s;
    if (!gn && !f->training && (!f->run_mean || !f->run_var))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: running_mean and running_var are required in eval mode", op);
    const vt_dtype cdt = compute_of(f->in);
    const int cm = !gn && HW < NORM_LANE_RUN && N > 1;
    scratch sc = {0};
    vt_tensor xv, yv;
    char *xb, *yb;
    void *w, *b, *mu, *rs, *var = NULL;
    double *rm = NULL, *rv = NULL;
    if ((s = dense(&sc, op, f->in, cm, 1, &xv, &xb)) != VT_OK) goto done;
    if ((s = dense(&sc, op, f->out, cm, 0, &yv, &yb)) != VT_OK) goto done;
    if ((s = load_vec(&sc, op, f->weight, cdt, &w)) != VT_OK) goto done;
    if ((s = load_vec(&sc, op, f->bias, cdt, &b)) != VT_OK) goto done;
    if ((s = scratch_vec(&sc, op, units, cdt, &mu)) != VT_OK) goto done;
    if ((s = scratch_vec(&sc, op, units, cdt, &rs)) != VT_OK) goto done;
    if ((s = scratch_vec(&sc, op, units, cdt, &var)) != VT_OK) goto done;
    if ((s = load_vec(&sc, op, f->run_mean, VT_F64, (void **)&rm)) != VT_OK) goto done;
    if ((s = load_vec(&sc, op, f->run_var, VT_F64, (void **)&rv)) != VT_OK) goto done;
    const int have_stats = !gn && !f->training;
    if (have_stats)
        for (int64_t c = 0; c < C; c++) {
            vec_set(cdt, mu, c, rm[c]);
            vec_set(cdt, rs, c, 1.0 / sqrt(rv[c] + f->eps));
        }
    norm_geo g = channel_geo(N, C, HW, f->groups, cm);
    fwd_args a = {&g, xb, f->in->dtype, yb, f->out->dtype, f->eps, 0, have_stats, w, b, mu, rs, var, NULL};
    if ((s = run_fwd(cdt, &a)) != VT_OK) goto done;
    if (yv.data != f->out->data && (s = vt_copy(f->out, &yv)) != VT_OK) goto done;
    if (have_stats) goto done;
    if ((s = store_vec(f->mean_out, cdt, mu)) != VT_OK) goto done;
    if ((s = store_vec(f->rstd_out, cdt, rs)) != VT_OK) goto done;
    if (!gn && g.count > 0 && (rm || rv)) {
        const double mom = f->momentum, cnt = (double)g.count;
        for (int64_t c = 0; c < C; c++) {
            if (rm) rm[c] = (1 - mom) * rm[c] + mom * vec_get(cdt, mu, c);
            if (rv) rv[c] = (1 - mom) * rv[c] + mom * vec_get(cdt, var, c) * cnt / (cnt - 1);
        }
        if (rm && (s = store_vec(f->run_mean, VT_F64, rm)) != VT_OK) goto done;
        if (rv && (s = store_vec(f->run_var, VT_F64, rv)) != VT_OK) goto done;
    }
done:
    sc_free(&sc);
    return s;
}

typedef struct chan_bwd {
    const vt_tensor *grad_in, *grad_weight, *grad_bias, *grad_out, *in, *weight;
    const vt_tensor *mean, *rstd;          /* saved (group norm, batch norm training) */
    const vt_tensor *run_mean, *run_var;   /* batch norm eval */
    int64_t groups;
    int training;
    double eps;
} chan_bwd;

static vt_status channel_backward(const char *op, const chan_bwd *f) {
    int64_t N, C, HW;
    vt_status s = vt_channel_norm_check(op, f->in, f->grad_out, f->grad_in, f->groups, &N, &C, &HW);
    if (s != VT_OK) return s;
    const int gn = f->groups > 0, fixed = !gn && !f->training;
    const int64_t units = gn ? N * f->groups : C;
    if (!f->grad_out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: grad_output is NULL", op);
    if (fixed ? (!f->run_mean || !f->run_var) : (!f->mean || !f->rstd))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: the %s statistics are required", op,
                            fixed ? "running" : "saved");
    if (s == VT_OK) s = vt_norm_check_vec(op, "weight", f->weight, C);
    if (s == VT_OK) s = vt_norm_check_vec(op, "grad_weight", f->grad_weight, C);
    if (s == VT_OK) s = vt_norm_check_vec(op, "grad_bias", f->grad_bias, C);
    if (s == VT_OK && !fixed) s = vt_norm_check_vec(op, "mean", f->mean, units);
    if (s == VT_OK && !fixed) s = vt_norm_check_vec(op, "rstd", f->rstd, units);
    if (s == VT_OK && fixed) s = vt_norm_check_vec(op, "running_mean", f->run_mean, C);
    if (s == VT_OK && fixed) s = vt_norm_check_vec(op, "running_var", f->run_var, C);
    if (s != VT_OK) return s;
    const vt_dtype cdt = compute_of(f->in);
    const int cm = !gn && HW < NORM_LANE_RUN && N > 1;
    scratch sc = {0};
    vt_tensor xv, dyv, dxv;
    char *xb, *dyb, *dxb = NULL;
    void *w, *mu, *rs;
    double *sg, *sgx, *dw, *db;
    norm_geo g = channel_geo(N, C, HW, f->groups, cm);
    if ((s = dense(&sc, op, f->in, cm, 1, &xv, &xb)) != VT_OK) goto done;
    if ((s = dense(&sc, op, f->grad_out, cm, 1, &dyv, &dyb)) != VT_OK) goto done;
    if (f->grad_in && (s = dense(&sc, op, f->grad_in, cm, 0, &dxv, &dxb)) != VT_OK) goto done;
    if ((s = load_vec(&sc, op, f->weight, cdt, &w)) != VT_OK) goto done;
    if (fixed) {
        double *rm, *rv;
        if ((s = load_vec(&sc, op, f->run_mean, VT_F64, (void **)&rm)) != VT_OK) goto done;
        if ((s = load_vec(&sc, op, f->run_var, VT_F64, (void **)&rv)) != VT_OK) goto done;
        if ((s = scratch_vec(&sc, op, C, cdt, &mu)) != VT_OK) goto done;
        if ((s = scratch_vec(&sc, op, C, cdt, &rs)) != VT_OK) goto done;
        for (int64_t c = 0; c < C; c++) {
            vec_set(cdt, mu, c, rm[c]);
            vec_set(cdt, rs, c, 1.0 / sqrt(rv[c] + f->eps));
        }
    } else {
        if ((s = load_vec(&sc, op, f->mean, cdt, &mu)) != VT_OK) goto done;
        if ((s = load_vec(&sc, op, f->rstd, cdt, &rs)) != VT_OK) goto done;
    }
    if ((s = scratch_vec(&sc, op, g.U * g.R, VT_F64, (void **)&sg)) != VT_OK) goto done;
    if ((s = scratch_vec(&sc, op, g.U * g.R, VT_F64, (void **)&sgx)) != VT_OK) goto done;
    if ((s = scratch_vec(&sc, op, C, VT_F64, (void **)&dw)) != VT_OK) goto done;
    if ((s = scratch_vec(&sc, op, C, VT_F64, (void **)&db)) != VT_OK) goto done;
    bwd_args a = {&g, xb, dyb, f->in->dtype, f->grad_out->dtype, dxb, f->grad_in ? f->grad_in->dtype : VT_F32, w, mu,
                  rs, fixed, 0, sg, sgx, NULL, NULL, 0, g.U};
    run_bwd(cdt, &a);
    if (f->grad_in && dxv.data != f->grad_in->data && (s = vt_copy(f->grad_in, &dxv)) != VT_OK) goto done;
    /* Parameter gradients from the per-run sums, in a fixed order. */
    for (int64_t u = 0; u < g.U; u++) {
        double r = vec_get(cdt, rs, u);
        for (int64_t rr = 0; rr < g.R; rr++) {
            int64_t ch = (u % g.cmod) * g.cmul + rr * g.rmul;
            dw[ch] += sgx[u * g.R + rr] * r;
            db[ch] += sg[u * g.R + rr];
        }
    }
    if ((s = store_vec(f->grad_weight, VT_F64, dw)) != VT_OK) goto done;
    s = store_vec(f->grad_bias, VT_F64, db);
done:
    sc_free(&sc);
    return s;
}

vt_status vt_group_norm(const vt_tensor *out, const vt_tensor *mean, const vt_tensor *rstd, const vt_tensor *in,
                        const vt_tensor *weight, const vt_tensor *bias, int64_t groups, double eps) {
    if (groups <= 0) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "group_norm: groups must be positive, got %lld", (long long)groups);
    chan_fwd f = {out, in, weight, bias, mean, rstd, NULL, NULL, groups, 1, 0, eps};
    return channel_forward("group_norm", &f);
}

vt_status vt_group_norm_backward(const vt_tensor *grad_in, const vt_tensor *grad_weight, const vt_tensor *grad_bias,
                                 const vt_tensor *grad_out, const vt_tensor *in, const vt_tensor *mean,
                                 const vt_tensor *rstd, const vt_tensor *weight, int64_t groups) {
    if (groups <= 0)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "group_norm_backward: groups must be positive, got %lld",
                            (long long)groups);
    chan_bwd f = {grad_in, grad_weight, grad_bias, grad_out, in, weight, mean, rstd, NULL, NULL, groups, 1, 0};
    return channel_backward("group_norm_backward", &f);
}

vt_status vt_batch_norm(const vt_tensor *out, const vt_tensor *save_mean, const vt_tensor *save_invstd,
                        const vt_tensor *in, const vt_tensor *weight, const vt_tensor *bias,
                        const vt_tensor *running_mean, const vt_tensor *running_var, int training, double momentum,
                        double eps) {
    chan_fwd f = {out, in, weight, bias, save_mean, save_invstd, running_mean, running_var, 0, training, momentum, eps};
    return channel_forward("batch_norm", &f);
}

vt_status vt_batch_norm_backward(const vt_tensor *grad_in, const vt_tensor *grad_weight, const vt_tensor *grad_bias,
                                 const vt_tensor *grad_out, const vt_tensor *in, const vt_tensor *weight,
                                 const vt_tensor *running_mean, const vt_tensor *running_var,
                                 const vt_tensor *save_mean, const vt_tensor *save_invstd, int training, double eps) {
    chan_bwd f = {grad_in, grad_weight, grad_bias, grad_out, in, weight, save_mean, save_invstd, running_mean,
                  running_var, 0, training, eps};
    return channel_backward("batch_norm_backward", &f);
}
