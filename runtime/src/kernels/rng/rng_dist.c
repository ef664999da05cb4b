/* rng_dist.c — distributions on the counter-based Philox stream beyond
 * uniform / normal: integers, Bernoulli, fused dropout, multinomial,
 * permutations, normal with tensor parameters. Draw i of a call reads the
 * words of counter offset + i / per (per = 4 draws of one word, or 2 draws
 * of two words), so results never depend on strides or threads. */
#include <stdatomic.h>
#include <stdlib.h>

#include "internal.h"

/* ------------------------------------------------------------ block generation */

typedef void (*philox_fn)(const uint32_t[2], uint64_t, int64_t, uint32_t *);
static _Atomic philox_fn philox_blocks_fn;

void vt_philox_blocks_portable(const uint32_t key[2], uint64_t first, int64_t nblocks, uint32_t *out) {
    for (int64_t j = 0; j < nblocks; j++) {
        uint64_t ctr = first + (uint64_t)j;
        uint32_t cv[4] = {(uint32_t)ctr, (uint32_t)(ctr >> 32), 0, 0};
        vt_philox4x32_10(cv, key, out + 4 * j);
    }
}

unsigned vt_rng_select_isa(unsigned mask) {
#if VT_X86
    if (mask & VT_ISA_AVX512) {
        atomic_store(&philox_blocks_fn, vt_philox_blocks_avx512);
        return VT_ISA_AVX512;
    }
#endif
    (void)mask;
    atomic_store(&philox_blocks_fn, vt_philox_blocks_portable);
    return 0;
}

void vt_philox_blocks(const uint32_t key[2], uint64_t first, int64_t nblocks, uint32_t *out) {
    philox_fn f = atomic_load_explicit(&philox_blocks_fn, memory_order_acquire);
    if (!f) {
        vt_kernels_ready();
        f = atomic_load_explicit(&philox_blocks_fn, memory_order_acquire);
    }
    f(key, first, nblocks, out);
}

static inline double ld_f64(vt_dtype dt, const char *p) {
    double v;
    vt_convert(dt, p, 1, VT_F64, &v, 1, 1);
    return v;
}
static inline void st_f64(vt_dtype dt, char *p, double v) { vt_convert(VT_F64, &v, 1, dt, p, 1, 1); }

/* ------------------------------------------------------------ elementwise draws */

typedef enum draw_kind { DRAW_RANDOM = 0, DRAW_BERNOULLI, DRAW_DROPOUT } draw_kind;

typedef struct draw_ctx {
    vt_iter it; /* op 0: out; bernoulli: op 1 p (if any); dropout: op 1 in, op 2 mask (if any) */
    draw_kind kind;
    vt_dtype dt, p_dt;
    int per, has_p, has_mask;
    uint32_t key[2];
    uint64_t offset;
    int64_t from;
    uint64_t range;
    double p;                  /* bernoulli scalar p; dropout keep probability 1 - p */
    float scale_f;
    double scale_d;
    _Atomic int bad;
} draw_ctx;

typedef struct draw_range {
    draw_ctx *c;
    uint64_t pos;
} draw_range;

#define DRAW_CHUNK 256

static void dropout_chunk(draw_ctx *c, char *const *p, const int64_t *s, int64_t k0, int64_t m, const uint32_t *w,
                          uint64_t i0) {
    /* keep when u < 1 - p, with u = w * 2^-32 compared exactly in double */
    double keep = c->p;
    uint8_t *mask = c->has_mask ? (uint8_t *)p[2] : NULL;
    int64_t ms = c->has_mask ? s[2] : 0;
    unsigned first = (unsigned)(i0 % 4);
    switch (c->dt) {
    case VT_F32: {
        float *o = (float *)p[0];
        const float *x = (const float *)p[1];
        float sc = c->scale_f;
        for (int64_t t = 0; t < m; t++) {
            int64_t k = k0 + t;
            int kp = (double)w[first + t] * 0x1p-32 < keep;
            if (mask) mask[k * ms] = (uint8_t)kp;
            o[k * s[0]] = (x[k * s[1]] * (float)kp) * sc;
        }
        break;
    }
    case VT_F64: {
        double *o = (double *)p[0];
        const double *x = (const double *)p[1];
        for (int64_t t = 0; t < m; t++) {
            int64_t k = k0 + t;
            int kp = (double)w[first + t] * 0x1p-32 < keep;
            if (mask) mask[k * ms] = (uint8_t)kp;
            o[k * s[0]] = (x[k * s[1]] * (double)kp) * c->scale_d;
        }
        break;
    }
    default: { /* bf16 / f16: each multiply rounds to the dtype, as PyTorch's two ops */
        uint16_t *o = (uint16_t *)p[0];
        const uint16_t *x = (const uint16_t *)p[1];
        int bf = c->dt == VT_BF16;
        for (int64_t t = 0; t < m; t++) {
            int64_t k = k0 + t;
            int kp = (double)w[first + t] * 0x1p-32 < keep;
            if (mask) mask[k * ms] = (uint8_t)kp;
            float xv = bf ? vt_bf16_to_f32(x[k * s[1]]) : vt_f16_to_f32(x[k * s[1]]);
            uint16_t y = bf ? vt_f32_to_bf16(xv * (float)kp) : vt_f32_to_f16(xv * (float)kp);
            float yv = bf ? vt_bf16_to_f32(y) : vt_f16_to_f32(y);
            o[k * s[0]] = bf ? vt_f32_to_bf16(yv * c->scale_f) : vt_f32_to_f16(yv * c->scale_f);
        }
        break;
    }
    }
}

static void draw_run(void *vr, char *const *p, const int64_t *s, int64_t n) {
    draw_range *rr = vr;
    draw_ctx *c = rr->c;
    uint32_t w[4 * (DRAW_CHUNK / 2 + 2)];
    for (int64_t k0 = 0; k0 < n; k0 += DRAW_CHUNK) {
        int64_t m = n - k0 < DRAW_CHUNK ? n - k0 : DRAW_CHUNK;
        uint64_t i0 = rr->pos + (uint64_t)k0;
        uint64_t b0 = i0 / (uint64_t)c->per, b1 = (i0 + (uint64_t)m - 1) / (uint64_t)c->per;
        vt_philox_blocks(c->key, c->offset + b0, (int64_t)(b1 - b0 + 1), w);
        if (c->kind == DRAW_DROPOUT) {
            dropout_chunk(c, p, s, k0, m, w, i0);
            continue;
        }
        for (int64_t t = 0; t < m; t++) {
            int64_t k = k0 + t;
            uint64_t i = i0 + (uint64_t)t;
            char *e = p[0] + k * s[0] * (int64_t)c->it.elsize[0];
            if (c->kind == DRAW_RANDOM) {
                const uint32_t *wi = w + 4 * (i / 2 - b0) + 2 * (i % 2);
                uint64_t u = ((uint64_t)wi[0] << 32) | wi[1];
                int64_t v = (int64_t)((uint64_t)c->from + (c->range ? u % c->range : u));
                vt_convert(VT_I64, &v, 1, c->dt, e, 1, 1);
            } else {
                double pv = c->has_p ? ld_f64(c->p_dt, p[1] + k * s[1] * (int64_t)c->it.elsize[1]) : c->p;
                if (!(pv >= 0.0 && pv <= 1.0)) {
                    atomic_store(&c->bad, 1);
                    continue;
                }
                double u = (double)w[4 * (i / 4 - b0) + i % 4] * 0x1p-32;
                st_f64(c->dt, e, u < pv ? 1.0 : 0.0);
            }
        }
    }
    rr->pos += (uint64_t)n;
}

static void draw_range_fn(void *vctx, int64_t b, int64_t e) {
    draw_range rr = {vctx, (uint64_t)b};
    vt_iter_range(&((draw_ctx *)vctx)->it, b, e, draw_run, &rr);
}

static void draw_init(draw_ctx *c, draw_kind kind, const vt_tensor *out, uint64_t seed, uint64_t offset, int per) {
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->dt = out->dtype;
    c->per = per;
    c->key[0] = (uint32_t)seed;
    c->key[1] = (uint32_t)(seed >> 32);
    c->offset = offset;
    atomic_init(&c->bad, 0);
}

static void draw_go(draw_ctx *c) {
    if (c->it.numel) vt_parallel_for(c->it.numel, VT_ELEMENTWISE_GRAIN / 4, draw_range_fn, c);
}

vt_status vt_rng_random(const vt_tensor *out, uint64_t seed, uint64_t offset, int64_t from, uint64_t range) {
    vt_status s = vt_tensor_validate(out, "random_");
    if (s) return s;
    draw_ctx c;
    draw_init(&c, DRAW_RANDOM, out, seed, offset, 2);
    c.from = from;
    c.range = range;
    vt_iter_init(&c.it, 1, out);
    draw_go(&c);
    return VT_OK;
}

vt_status vt_rng_bernoulli(const vt_tensor *out, const vt_tensor *p, double p_scalar, uint64_t seed,
                           uint64_t offset) {
    vt_status s = vt_tensor_validate(out, "bernoulli");
    if (s) return s;
    draw_ctx c;
    draw_init(&c, DRAW_BERNOULLI, out, seed, offset, 4);
    vt_tensor ops[2] = {*out};
    if (p) {
        if ((s = vt_tensor_validate(p, "bernoulli"))) return s;
        if (!vt_dtype_is_float(p->dtype))
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "bernoulli: p must be a floating tensor, got %s",
                                vt_dtype_name(p->dtype));
        if ((s = vt_broadcast_to(p, out->ndim, out->sizes, &ops[1]))) return s;
        c.has_p = 1;
        c.p_dt = p->dtype;
    } else {
        if (!(p_scalar >= 0.0 && p_scalar <= 1.0))
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "bernoulli_ expects p to be in [0, 1], but got p=%g", p_scalar);
        c.p = p_scalar;
    }
    vt_iter_init(&c.it, p ? 2 : 1, ops);
    draw_go(&c);
    if (atomic_load(&c.bad))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "bernoulli: p must have all elements in [0, 1]");
    return VT_OK;
}

vt_status vt_rng_dropout(const vt_tensor *out, const vt_tensor *mask, const vt_tensor *in, double p, uint64_t seed,
                         uint64_t offset) {
    vt_status s = vt_tensor_validate(out, "dropout");
    if (!s) s = vt_tensor_validate(in, "dropout");
    if (!s && mask) s = vt_tensor_validate(mask, "dropout");
    if (s) return s;
    if (!vt_dtype_is_float(out->dtype) || in->dtype != out->dtype || (mask && mask->dtype != VT_BOOL))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "dropout: expected float input and output of one dtype and a bool mask");
    if (!(p >= 0.0 && p <= 1.0))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "dropout probability has to be between 0 and 1, but got %g", p);
    if (in->ndim != out->ndim || (mask && mask->ndim != out->ndim))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "dropout: input, output and mask shapes differ");
    for (int d = 0; d < out->ndim; d++)
        if (in->sizes[d] != out->sizes[d] || (mask && mask->sizes[d] != out->sizes[d]))
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "dropout: input, output and mask shapes differ");
    draw_ctx c;
    draw_init(&c, DRAW_DROPOUT, out, seed, offset, 4);
    c.p = 1.0 - p;
    c.scale_d = c.p == 0.0 ? 0.0 : 1.0 / c.p;
    c.scale_f = (float)c.scale_d;
    c.has_mask = mask != NULL;
    vt_tensor ops[3] = {*out, *in};
    if (mask) ops[2] = *mask;
    vt_iter_init(&c.it, mask ? 3 : 2, ops);
    draw_go(&c);
    return VT_OK;
}

/* ------------------------------------------------------------ dropout backward */

typedef struct dbwd_ctx {
    vt_iter it;
    vt_dtype dt;
    double scale; /* already rounded to dt */
} dbwd_ctx;

static void dbwd_run(void *vc, char *const *p, const int64_t *s, int64_t n) {
    const dbwd_ctx *c = vc;
    const uint8_t *m = (const uint8_t *)p[2];
    if (c->dt == VT_F32) {
        float *o = (float *)p[0];
        const float *g = (const float *)p[1];
        float sc = (float)c->scale;
        for (int64_t k = 0; k < n; k++) o[k * s[0]] = g[k * s[1]] * (m[k * s[2]] ? sc : 0.0f);
        return;
    }
    size_t es = vt_dtype_size(c->dt);
    for (int64_t k = 0; k < n; k++) {
        double g = ld_f64(c->dt, p[1] + k * s[1] * (int64_t)es), ms = m[k * s[2]] ? c->scale : 0.0;
        double v = c->dt == VT_F64 ? g * ms : (double)((float)g * (float)ms);
        st_f64(c->dt, p[0] + k * s[0] * (int64_t)es, v);
    }
}

static void dbwd_range(void *vc, int64_t b, int64_t e) {
    dbwd_ctx *c = vc;
    vt_iter_range(&c->it, b, e, dbwd_run, c);
}

vt_status vt_dropout_backward(const vt_tensor *grad_in, const vt_tensor *grad, const vt_tensor *mask, double scale) {
    vt_status s = vt_tensor_validate(grad_in, "native_dropout_backward");
    if (!s) s = vt_tensor_validate(grad, "native_dropout_backward");
    if (!s) s = vt_tensor_validate(mask, "native_dropout_backward");
    if (s) return s;
    if (!vt_dtype_is_float(grad_in->dtype) || grad->dtype != grad_in->dtype || mask->dtype != VT_BOOL)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT,
                            "native_dropout_backward: expected float gradients of one dtype and a bool mask");
    dbwd_ctx c;
    memset(&c, 0, sizeof c);
    vt_tensor ops[3] = {*grad_in};
    if ((s = vt_broadcast_to(grad, grad_in->ndim, grad_in->sizes, &ops[1]))) return s;
    if ((s = vt_broadcast_to(mask, grad_in->ndim, grad_in->sizes, &ops[2]))) return s;
    c.dt = grad_in->dtype;
    /* mask.type_as(grad) * scale rounds the scale to grad's dtype */
    st_f64(VT_F64, (char *)&c.scale, scale);
    if (c.dt != VT_F64) {
        float f = (float)scale;
        if (c.dt == VT_BF16) f = vt_bf16_to_f32(vt_f32_to_bf16(f));
        if (c.dt == VT_F16) f = vt_f16_to_f32(vt_f32_to_f16(f));
        c.scale = f;
    }
    vt_iter_init(&c.it, 3, ops);
    if (c.it.numel) vt_parallel_for(c.it.numel, VT_ELEMENTWISE_GRAIN, dbwd_range, &c);
    return VT_OK;
}

/* ------------------------------------------------------------ normal with tensor parameters */

typedef struct nt_ctx {
    vt_iter it;
    int has_mean, has_std;
    double mean, std;
    _Atomic int bad;
} nt_ctx;

/* Operands: out, then mean and std when given; their dtypes are read from
 * the descriptors kept alongside. */
typedef struct nt_full {
    nt_ctx c;
    vt_dtype dt[3];
} nt_full;

static void nt_run_full(void *vc, char *const *p, const int64_t *s, int64_t n) {
    nt_full *f = vc;
    nt_ctx *c = &f->c;
    for (int64_t k = 0; k < n; k++) {
        int op = 1;
        double m = c->mean, sd = c->std;
        if (c->has_mean) {
            m = ld_f64(f->dt[op], p[op] + k * s[op] * (int64_t)c->it.elsize[op]);
            op++;
        }
        if (c->has_std) sd = ld_f64(f->dt[op], p[op] + k * s[op] * (int64_t)c->it.elsize[op]);
        if (!(sd >= 0.0)) atomic_store(&c->bad, 1);
        char *e = p[0] + k * s[0] * (int64_t)c->it.elsize[0];
        double z = ld_f64(f->dt[0], e);
        st_f64(f->dt[0], e, m + sd * z);
    }
}

static void nt_range(void *vc, int64_t b, int64_t e) {
    nt_full *f = vc;
    vt_iter_range(&f->c.it, b, e, nt_run_full, f);
}

vt_status vt_rng_normal_tensor(const vt_tensor *out, const vt_tensor *mean, double mean_scalar, const vt_tensor *std,
                               double std_scalar, uint64_t seed, uint64_t offset) {
    vt_status s = vt_rng_normal(out, seed, offset, 0.0, 1.0);
    if (s) return s;
    nt_full f;
    memset(&f, 0, sizeof f);
    vt_tensor ops[3] = {*out};
    int nops = 1;
    f.dt[0] = out->dtype;
    if (mean) {
        if ((s = vt_broadcast_to(mean, out->ndim, out->sizes, &ops[nops]))) return s;
        f.dt[nops++] = mean->dtype;
        f.c.has_mean = 1;
    }
    if (std) {
        if ((s = vt_broadcast_to(std, out->ndim, out->sizes, &ops[nops]))) return s;
        f.dt[nops++] = std->dtype;
        f.c.has_std = 1;
    }
    f.c.mean = mean_scalar;
    f.c.std = std_scalar;
    atomic_init(&f.c.bad, 0);
    vt_iter_init(&f.c.it, nops, ops);
    if (f.c.it.numel) vt_parallel_for(f.c.it.numel, VT_ELEMENTWISE_GRAIN / 4, nt_range, &f);
    if (atomic_load(&f.c.bad)) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "normal expects all elements of std >= 0.0");
    return VT_OK;
}

/* ------------------------------------------------------------ permutations */

typedef struct keyed {
    uint64_t key;
    int64_t idx;
} keyed;

static int keyed_cmp(const void *a, const void *b) {
    const keyed *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* 64-bit draw i of a 2/block stream. */
static void draws64(const uint32_t key[2], uint64_t offset, uint64_t i0, int64_t n, uint64_t *out) {
    uint32_t w[4 * 64];
    for (int64_t k0 = 0; k0 < n; k0 += 64) {
        int64_t m = n - k0 < 64 ? n - k0 : 64;
        uint64_t a = i0 + (uint64_t)k0, b0 = a / 2, b1 = (a + (uint64_t)m - 1) / 2;
        vt_philox_blocks(key, offset + b0, (int64_t)(b1 - b0 + 1), w);
        for (int64_t t = 0; t < m; t++) {
            uint64_t i = a + (uint64_t)t;
            const uint32_t *wi = w + 4 * (i / 2 - b0) + 2 * (i % 2);
            out[k0 + t] = ((uint64_t)wi[0] << 32) | wi[1];
        }
    }
}

vt_status vt_rng_randperm(const vt_tensor *out, uint64_t seed, uint64_t offset) {
    vt_status s = vt_tensor_validate(out, "randperm");
    if (s) return s;
    if (out->ndim != 1) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "randperm: out must be 1-D");
    int64_t n = out->sizes[0];
    if (n == 0) return VT_OK;
    keyed *k = malloc((size_t)n * sizeof *k);
    uint64_t *u = malloc((size_t)n * sizeof *u);
    if (!k || !u) {
        free(k);
        free(u);
        return vt_set_error(VT_ERR_OUT_OF_MEMORY, "randperm: out of host memory for %lld keys", (long long)n);
    }
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    draws64(key, offset, 0, n, u);
    for (int64_t i = 0; i < n; i++) k[i] = (keyed){u[i], i};
    qsort(k, (size_t)n, sizeof *k, keyed_cmp);
    size_t es = vt_dtype_size(out->dtype);
    char *base = vt_base(out);
    for (int64_t i = 0; i < n; i++) vt_convert(VT_I64, &k[i].idx, 1, out->dtype, base + i * out->strides[0] * (int64_t)es, 1, 1);
    free(k);
    free(u);
    return VT_OK;
}

/* ------------------------------------------------------------ multinomial */

typedef struct mn_ctx {
    vt_tensor out, probs;
    int replacement;
    int64_t cats, k;
    uint32_t key[2];
    uint64_t offset;
    _Atomic int bad; /* 1: bad value, 2: zero sum, 3: too few categories, 4: out of memory */
} mn_ctx;

static double to_unit(uint64_t u) { return (double)(u >> 11) * 0x1p-53; }

static void mn_rows(void *vc, int64_t b, int64_t e) {
    mn_ctx *c = vc;
    int64_t cats = c->cats, k = c->k;
    int64_t draws = c->replacement ? k : cats;
    double *w = malloc((size_t)cats * sizeof *w);
    uint64_t *u = malloc((size_t)draws * sizeof *u);
    keyed *ks = c->replacement ? NULL : malloc((size_t)cats * sizeof *ks);
    if (!w || !u || (!c->replacement && !ks)) {
        atomic_store(&c->bad, 4);
        goto done;
    }
    size_t pes = vt_dtype_size(c->probs.dtype);
    for (int64_t r = b; r < e; r++) {
        const char *row = (const char *)c->probs.data + (c->probs.offset + r * c->probs.strides[0]) * (int64_t)pes;
        vt_convert(c->probs.dtype, row, c->probs.strides[1], VT_F64, w, 1, cats);
        double total = 0;
        int64_t nonzero = 0;
        for (int64_t j = 0; j < cats; j++) {
            if (!(w[j] >= 0.0) || isinf(w[j])) {
                atomic_store(&c->bad, 1);
                goto done;
            }
            nonzero += w[j] > 0;
        }
        draws64(c->key, c->offset, (uint64_t)(r * draws), draws, u);
        int64_t *o = (int64_t *)c->out.data + c->out.offset + r * c->out.strides[0];
        if (c->replacement) {
            for (int64_t j = 0; j < cats; j++) w[j] = (total += w[j]); /* w becomes the CDF */
            if (!(total > 0)) {
                atomic_store(&c->bad, 2);
                goto done;
            }
            for (int64_t s = 0; s < k; s++) {
                double x = to_unit(u[s]) * total;
                int64_t lo = 0, hi = cats - 1; /* first j with cdf[j] > x */
                while (lo < hi) {
                    int64_t mid = lo + (hi - lo) / 2;
                    if (w[mid] > x) hi = mid;
                    else lo = mid + 1;
                }
                o[s * c->out.strides[1]] = lo;
            }
        } else {
            if (nonzero == 0) {
                atomic_store(&c->bad, 2);
                goto done;
            }
            if (nonzero < k) {
                atomic_store(&c->bad, 3);
                goto done;
            }
            int64_t m = 0;
            for (int64_t j = 0; j < cats; j++) {
                if (w[j] <= 0) continue;
                double e1 = -log(1.0 - to_unit(u[j])); /* Exp(1), finite: 1 - u > 0 */
                double key = e1 / w[j];
                uint64_t bits;
                memcpy(&bits, &key, 8); /* non-negative doubles order as their bits */
                ks[m++] = (keyed){bits, j};
            }
            qsort(ks, (size_t)m, sizeof *ks, keyed_cmp);
            for (int64_t s = 0; s < k; s++) o[s * c->out.strides[1]] = ks[s].idx;
        }
    }
done:
    free(w);
    free(u);
    free(ks);
}

vt_status vt_rng_multinomial(const vt_tensor *out, const vt_tensor *probs, int replacement, uint64_t seed,
                             uint64_t offset) {
    vt_status s = vt_tensor_validate(out, "multinomial");
    if (!s) s = vt_tensor_validate(probs, "multinomial");
    if (s) return s;
    if (out->ndim != 2 || probs->ndim != 2 || out->dtype != VT_I64 || !vt_dtype_is_float(probs->dtype) ||
        out->sizes[0] != probs->sizes[0])
        return vt_set_error(VT_ERR_INVALID_ARGUMENT,
                            "multinomial: expected float probs [rows, cats] and int64 out [rows, k]");
    mn_ctx c;
    memset(&c, 0, sizeof c);
    c.out = *out;
    c.probs = *probs;
    c.replacement = replacement;
    c.cats = probs->sizes[1];
    c.k = out->sizes[1];
    c.key[0] = (uint32_t)seed;
    c.key[1] = (uint32_t)(seed >> 32);
    c.offset = offset;
    atomic_init(&c.bad, 0);
    if (!replacement && c.k > c.cats)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
    if (c.k == 0 || out->sizes[0] == 0) return VT_OK;
    if (c.cats == 0) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "multinomial: no categories to sample from");
    int64_t grain = 4096 / (c.cats + c.k) + 1;
    vt_parallel_for(out->sizes[0], grain, mn_rows, &c);
    switch (atomic_load(&c.bad)) {
    case 1: return vt_set_error(VT_ERR_INVALID_ARGUMENT, "probability tensor contains either `inf`, `nan` or element < 0");
    case 2: return vt_set_error(VT_ERR_INVALID_ARGUMENT, "invalid multinomial distribution (sum of probabilities <= 0)");
    case 3:
        return vt_set_error(VT_ERR_INVALID_ARGUMENT,
                            "invalid multinomial distribution (with replacement=False, not enough non-negative category to sample)");
    case 4: return vt_set_error(VT_ERR_OUT_OF_MEMORY, "multinomial: out of host memory");
    default: return VT_OK;
    }
}
