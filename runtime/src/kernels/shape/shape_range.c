/* shape_range.c — arange and linspace, element for element as PyTorch's CPU
 * kernels compute them (x86-64 build: the AVX2 kernel, its 2-vector blocks
 * whose first element is rounded to the output type, and the fused
 * multiply-adds the compiler forms), so tpu factories equal CPU ones bit for
 * bit; and searchsorted. Every element is a function of its index alone, so
 * the work splits freely across threads. */
#include <math.h>
#include <stdlib.h>

#include "shape.h"

vt_status vt_range_check(const vt_tensor *out, const char *what) {
    vt_status s = vt_tensor_validate(out, what);
    if (s) return s;
    if (out->ndim != 1 || (out->sizes[0] > 1 && out->strides[0] != 1))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: out must be a contiguous 1-D tensor", what);
    return VT_OK;
}

/* Where element i sits: in a SIMD block (base index and lane) or the scalar tail. */
typedef struct range_geo {
    int64_t n, vec, chunk;
} range_geo;

static inline int64_t block_base(const range_geo *g, int64_t i, int64_t *lane) {
    if (g->vec <= 0) return -1;
    int64_t cb = (i / g->chunk) * g->chunk, ce = cb + g->chunk < g->n ? cb + g->chunk : g->n;
    int64_t blk = ((ce - cb) / (2 * g->vec)) * 2 * g->vec;
    int64_t r = i - cb;
    if (r >= blk) return -1;
    *lane = r % g->vec;
    return i - *lane;
}

/* Round x to dt and widen back (the rounding a value of type dt incurs). */
static inline double round_d(vt_dtype dt, double x) { return dt == VT_F32 ? (double)(float)x : x; }
static inline float round_f(vt_dtype dt, float x) {
    return dt == VT_BF16 ? vt_bf16_to_f32(vt_f32_to_bf16(x)) : vt_f16_to_f32(vt_f32_to_f16(x));
}

typedef struct range_ctx {
    vt_tensor out;
    range_geo g;
    int linspace;
    double ds, de, dstep;  /* double accumulate (f32/f64 arange, int linspace, f64 linspace) */
    float fs, fe, fstep;   /* float accumulate (bf16/f16 arange, f32 linspace) */
    int64_t is, istep;     /* int arange */
    int64_t halfway;
    int exact; /* arange whose every value is an integer exact in out's dtype */
} range_ctx;

/* Narrow-type arithmetic of c10::BFloat16 / c10::Half: each operation rounds. */
static inline float nar(vt_dtype dt, float x) { return round_f(dt, x); }

static void range_batch(const range_ctx *c, int64_t b, int64_t m, void *tmp, vt_dtype *tdt) {
    vt_dtype dt = c->out.dtype;
    int isint = !vt_dtype_is_float(dt);
    const range_geo *g = &c->g;
    if (!c->linspace) {
        if (isint) {
            int64_t *t = tmp;
            for (int64_t k = 0; k < m; k++) t[k] = (int64_t)((uint64_t)c->is + (uint64_t)c->istep * (uint64_t)(b + k));
            *tdt = VT_I64;
        } else if (c->exact) {
            /* integral start and step, every value exact in the type: all formulas agree */
            double *t = tmp;
            for (int64_t k = 0; k < m; k++) t[k] = c->ds + c->dstep * (double)(b + k);
            *tdt = VT_F64;
        } else if (dt == VT_F32 || dt == VT_F64) {
            double *t = tmp;
            for (int64_t k = 0; k < m; k++) {
                int64_t i = b + k, lane;
                int64_t base = block_base(g, i, &lane);
                if (base < 0) t[k] = fma(c->dstep, (double)i, c->ds);
                else t[k] = fma((double)lane, c->dstep, round_d(dt, fma(c->dstep, (double)base, c->ds)));
            }
            *tdt = VT_F64;
        } else {
            float *t = tmp;
            for (int64_t k = 0; k < m; k++) {
                int64_t i = b + k, lane;
                int64_t base = block_base(g, i, &lane);
                if (base < 0) t[k] = fmaf(c->fstep, (float)i, c->fs);
                else t[k] = fmaf((float)lane, c->fstep, round_f(dt, fmaf(c->fstep, (float)base, c->fs)));
            }
            *tdt = VT_F32;
        }
        return;
    }
    /* linspace: the first half counts up from start, the second down from end;
     * a SIMD block takes the branch of its first element. */
    if (dt == VT_F32) {
        float *t = tmp;
        for (int64_t k = 0; k < m; k++) {
            int64_t i = b + k, lane;
            int64_t base = block_base(g, i, &lane);
            int64_t f = base < 0 ? i : base;
            float v = f < c->halfway ? fmaf(c->fstep, (float)f, c->fs) : fmaf(-c->fstep, (float)(g->n - f - 1), c->fe);
            t[k] = base < 0 ? v : fmaf((float)lane, c->fstep, v);
        }
        *tdt = VT_F32;
    } else if (dt == VT_F64 || isint) {
        double *t = tmp;
        for (int64_t k = 0; k < m; k++) {
            int64_t i = b + k, lane;
            int64_t base = block_base(g, i, &lane);
            int64_t f = base < 0 ? i : base;
            double v = f < c->halfway ? fma(c->dstep, (double)f, c->ds) : fma(-c->dstep, (double)(g->n - f - 1), c->de);
            if (base >= 0) {
                if (isint) vt_convert(VT_F64, &v, 1, dt, &v, 1, 1), vt_convert(dt, &v, 1, VT_F64, &v, 1, 1);
                v = fma((double)lane, c->dstep, v);
            }
            t[k] = v;
        }
        *tdt = VT_F64;
    } else {
        float *t = tmp;
        for (int64_t k = 0; k < m; k++) {
            int64_t i = b + k, lane;
            int64_t base = block_base(g, i, &lane);
            int64_t f = base < 0 ? i : base;
            float v = f < c->halfway ? nar(dt, c->fs + nar(dt, c->fstep * nar(dt, (float)f)))
                                     : nar(dt, c->fe - nar(dt, c->fstep * nar(dt, (float)(g->n - f - 1))));
            if (base >= 0 && lane) v = nar(dt, v + nar(dt, nar(dt, (float)lane) * c->fstep));
            t[k] = v;
        }
        *tdt = VT_F32;
    }
}

#define RANGE_BATCH 512

static void range_range(void *vctx, int64_t b, int64_t e) {
    const range_ctx *c = vctx;
    _Alignas(64) double tmp[RANGE_BATCH];
    size_t es = vt_dtype_size(c->out.dtype);
    char *out = vt_base(&c->out);
    for (int64_t i = b; i < e; i += RANGE_BATCH) {
        int64_t m = e - i < RANGE_BATCH ? e - i : RANGE_BATCH;
        vt_dtype tdt;
        range_batch(c, i, m, tmp, &tdt);
        vt_convert(tdt, tmp, 1, c->out.dtype, out + i * (int64_t)es, 1, m);
    }
}

static vt_status range_run(range_ctx *c, int64_t vec, int64_t chunk) {
    c->g.n = c->out.sizes[0];
    c->g.vec = vec;
    c->g.chunk = chunk > 0 ? chunk : (c->g.n > 0 ? c->g.n : 1);
    if (c->g.n > 0) vt_parallel_for(c->g.n, VT_ELEMENTWISE_GRAIN / 4, range_range, c);
    return VT_OK;
}

static double sc_d(vt_scalar s) { return s.is_float ? s.f : (double)s.i; }

vt_status vt_arange(const vt_tensor *out, vt_scalar start, vt_scalar step, int64_t vec, int64_t chunk) {
    vt_status s = vt_range_check(out, "arange");
    if (s) return s;
    range_ctx c;
    memset(&c, 0, sizeof c);
    c.out = *out;
    c.ds = sc_d(start);
    c.dstep = sc_d(step);
    c.fs = (float)c.ds;
    c.fstep = (float)c.dstep;
    c.is = start.is_float ? (int64_t)start.f : start.i;
    c.istep = step.is_float ? (int64_t)step.f : step.i;
    double lim = out->dtype == VT_F32 ? 0x1p24 : out->dtype == VT_F64 ? 0x1p53 : out->dtype == VT_BF16 ? 0x1p8 : 0x1p11;
    double last = c.ds + c.dstep * (double)(out->sizes[0] > 0 ? out->sizes[0] - 1 : 0);
    c.exact = vt_dtype_is_float(out->dtype) && c.ds == floor(c.ds) && c.dstep == floor(c.dstep) && fabs(c.ds) <= lim &&
              fabs(last) <= lim;
    return range_run(&c, vec, chunk);
}

vt_status vt_linspace(const vt_tensor *out, vt_scalar start, vt_scalar end, int64_t vec, int64_t chunk) {
    vt_status s = vt_range_check(out, "linspace");
    if (s) return s;
    range_ctx c;
    memset(&c, 0, sizeof c);
    c.out = *out;
    c.linspace = 1;
    int64_t n = out->sizes[0];
    vt_dtype dt = out->dtype;
    if (n == 1) return vt_fill(out, start);
    c.halfway = n / 2;
    double ds = sc_d(start), de = sc_d(end);
    if (dt == VT_F64) {
        c.ds = ds, c.de = de, c.dstep = (de - ds) / (double)(n - 1);
    } else if (dt == VT_F32) {
        c.fs = (float)ds, c.fe = (float)de;
        c.fstep = (c.fe - c.fs) / (float)(n - 1);
    } else if (dt == VT_BF16 || dt == VT_F16) {
        c.fs = nar(dt, (float)ds), c.fe = nar(dt, (float)de);
        c.fstep = nar(dt, nar(dt, c.fe - c.fs) / nar(dt, (float)(n - 1)));
    } else { /* integers: start and end in the type, step in double */
        double a = ds, z = de;
        vt_convert(VT_F64, &a, 1, dt, &a, 1, 1), vt_convert(dt, &a, 1, VT_F64, &a, 1, 1);
        vt_convert(VT_F64, &z, 1, dt, &z, 1, 1), vt_convert(dt, &z, 1, VT_F64, &z, 1, 1);
        if (!start.is_float) a = (double)start.i;
        if (!end.is_float) z = (double)end.i;
        c.ds = a, c.de = z, c.dstep = (z - a) / (double)(n - 1);
    }
    return range_run(&c, vec, chunk);
}

/* ------------------------------------------------------------ searchsorted */

vt_status vt_searchsorted_check(const vt_tensor *out, const vt_tensor *sorted, const vt_tensor *values) {
    vt_status s = vt_tensor_validate(out, "searchsorted");
    if (!s) s = vt_tensor_validate(sorted, "searchsorted");
    if (!s) s = vt_tensor_validate(values, "searchsorted");
    if (s) return s;
    if (out->dtype != VT_I64 && out->dtype != VT_I32)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "searchsorted: out must be int64 or int32");
    if (out->ndim != values->ndim) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "searchsorted: out shape != values shape");
    for (int d = 0; d < out->ndim; d++)
        if (out->sizes[d] != values->sizes[d])
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "searchsorted: out shape != values shape");
    if (sorted->ndim < 1) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "searchsorted: sorted sequence must have dims");
    if (sorted->ndim > 1) {
        if (sorted->ndim != values->ndim)
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "searchsorted: leading dims of sorted and values differ");
        for (int d = 0; d < sorted->ndim - 1; d++)
            if (sorted->sizes[d] != values->sizes[d])
                return vt_set_error(VT_ERR_INVALID_ARGUMENT, "searchsorted: leading dims of sorted and values differ");
    }
    return VT_OK;
}

typedef struct ss_ctx {
    vt_tensor out, sorted, values;
    int right, ints;
} ss_ctx;

static inline double ld_d(vt_dtype dt, const char *p) {
    double v;
    vt_convert(dt, p, 1, VT_F64, &v, 1, 1);
    return v;
}
static inline int64_t ld_i(vt_dtype dt, const char *p) {
    int64_t v;
    vt_convert(dt, p, 1, VT_I64, &v, 1, 1);
    return v;
}

static void ss_range(void *vctx, int64_t b, int64_t e) {
    const ss_ctx *c = vctx;
    const vt_tensor *o = &c->out, *sq = &c->sorted, *v = &c->values;
    int nd = v->ndim;
    size_t ves = vt_dtype_size(v->dtype), ses = vt_dtype_size(sq->dtype), oes = vt_dtype_size(o->dtype);
    int64_t len = sq->sizes[sq->ndim - 1], sst = sq->strides[sq->ndim - 1];
    for (int64_t i = b; i < e; i++) {
        int64_t rest = i, voff = v->offset, ooff = o->offset, soff = sq->offset;
        for (int d = nd - 1; d >= 0; d--) {
            int64_t id = rest % v->sizes[d];
            rest /= v->sizes[d];
            voff += id * v->strides[d];
            ooff += id * o->strides[d];
            if (sq->ndim > 1 && d < nd - 1) soff += id * sq->strides[d];
        }
        const char *base = (const char *)sq->data + soff * (int64_t)ses;
        int64_t lo = 0, hi = len;
        if (c->ints) {
            int64_t x = ld_i(v->dtype, (const char *)v->data + voff * (int64_t)ves);
            while (lo < hi) {
                int64_t mid = lo + (hi - lo) / 2;
                int64_t y = ld_i(sq->dtype, base + mid * sst * (int64_t)ses);
                if (c->right ? !(y > x) : !(y >= x)) lo = mid + 1;
                else hi = mid;
            }
        } else {
            double x = ld_d(v->dtype, (const char *)v->data + voff * (int64_t)ves);
            while (lo < hi) {
                int64_t mid = lo + (hi - lo) / 2;
                double y = ld_d(sq->dtype, base + mid * sst * (int64_t)ses);
                if (c->right ? !(y > x) : !(y >= x)) lo = mid + 1;
                else hi = mid;
            }
        }
        char *po = (char *)o->data + ooff * (int64_t)oes;
        if (o->dtype == VT_I64) *(int64_t *)po = lo;
        else *(int32_t *)po = (int32_t)lo;
    }
}

vt_status vt_searchsorted(const vt_tensor *out, const vt_tensor *sorted, const vt_tensor *values, int right) {
    vt_status s = vt_searchsorted_check(out, sorted, values);
    if (s) return s;
    ss_ctx c;
    c.out = *out;
    c.sorted = *sorted;
    c.values = *values;
    c.right = right;
    c.ints = !vt_dtype_is_float(sorted->dtype) && !vt_dtype_is_float(values->dtype);
    int64_t n = vt_tensor_numel(values);
    if (n > 0) vt_parallel_for(n, 2048, ss_range, &c);
    return VT_OK;
}
