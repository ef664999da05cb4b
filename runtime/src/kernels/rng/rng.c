/* rng.c — counter-based random numbers (Philox4x32-10). Each output element
 * is a pure function of (seed, offset, logical index), so results do not
 * depend on strides, chunking or thread count.
 *
 * Counter scheme: block j is Philox(counter = offset + j as a 128-bit
 * little-endian integer with the top 64 bits zero, key = seed), giving four
 * 32-bit words.
 *   F32 / BF16 / F16: element i uses block i / 4; uniform takes word i % 4,
 *     normal uses words (0,1) for elements 4j, 4j+1 and (2,3) for 4j+2, 4j+3
 *     (Box–Muller cosine, then sine).
 *   F64: element i uses block i / 2; uniform takes words 2(i % 2), +1 as a
 *     53-bit fraction, normal makes two 53-bit uniforms from the block and
 *     gives the cosine to even i, the sine to odd i.
 * A call on n elements therefore consumes ceil(n / 4) counter values for
 * 32-bit-class dtypes and ceil(n / 2) for F64 (vt_rng_counters_used). */
#include <math.h>

#include "internal.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void vt_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0, p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

uint64_t vt_rng_counters_used(vt_dtype dtype, int64_t n) {
    if (n <= 0) return 0;
    uint64_t per = dtype == VT_F64 ? 2 : 4;
    return ((uint64_t)n + per - 1) / per;
}

typedef struct rng_ctx {
    vt_iter it;
    vt_dtype dt;
    int normal;
    int exponential; /* uniform u, then -log1p(-u) / lambd (lambd in b) */
    uint32_t key[2];
    uint64_t offset;
    double a, b;     /* uniform: from, to - from; normal: mean, std */
    double to;       /* uniform: exclusive upper bound */
    double below_to; /* largest dtype value under `to` */
    int degenerate;  /* uniform with from == to */
} rng_ctx;

static void block(const rng_ctx *c, uint64_t j, uint32_t w[4]) {
    uint64_t ctr = c->offset + j;
    uint32_t cv[4] = {(uint32_t)ctr, (uint32_t)(ctr >> 32), 0, 0};
    vt_philox4x32_10(cv, c->key, w);
}

static inline double u53(uint32_t hi, uint32_t lo) {
    return (double)((((uint64_t)hi << 32) | lo) >> 11) * 0x1p-53;
}

/* The value of logical element i, in double before rounding to dtype. */
static double sample(const rng_ctx *c, uint64_t i, uint64_t *cached_j, uint32_t w[4]) {
    int f64 = c->dt == VT_F64;
    uint64_t j = f64 ? i / 2 : i / 4;
    if (j != *cached_j) {
        block(c, j, w);
        *cached_j = j;
    }
    if (!c->normal) {
        double u = f64 ? u53(w[2 * (i % 2)], w[2 * (i % 2) + 1]) : (double)(w[i % 4] >> 8) * 0x1p-24;
        if (c->exponential) return -log1p(-u) / c->b;
        return c->a + u * c->b;
    }
    double u1, u2;
    if (f64) {
        u1 = 1.0 - u53(w[0], w[1]); /* (0, 1]: log stays finite */
        u2 = u53(w[2], w[3]);
    } else {
        unsigned p = (unsigned)(i % 4) / 2;
        u1 = ((double)w[2 * p] + 1.0) * 0x1p-32;
        u2 = (double)w[2 * p + 1] * 0x1p-32;
    }
    double r = sqrt(-2.0 * log(u1)), t = 2.0 * M_PI * u2;
    double z = (i % 2) ? r * sin(t) : r * cos(t);
    return c->a + c->b * z;
}

static double dtype_round(vt_dtype dt, double v) {
    switch (dt) {
    case VT_F32: return (float)v;
    case VT_BF16: return vt_bf16_to_f32(vt_f32_to_bf16((float)v));
    case VT_F16: return vt_f16_to_f32(vt_f32_to_f16((float)v));
    default: return v;
    }
}

/* Largest value of dtype strictly below to (to is finite). */
static double largest_below(vt_dtype dt, double to) {
    if (dt == VT_F64) return nextafter(to, -INFINITY);
    if (dt == VT_F32) {
        float t = (float)to;
        while ((double)t >= to) t = nextafterf(t, -INFINITY);
        return t;
    }
    uint16_t h = dt == VT_BF16 ? vt_f32_to_bf16((float)to) : vt_f32_to_f16((float)to);
    for (;;) {
        double v = dt == VT_BF16 ? vt_bf16_to_f32(h) : vt_f16_to_f32(h);
        if (v < to) return v;
        /* Step one representable value down (sign-magnitude encoding). */
        if (h == 0) h = 0x8001;
        else if (h & 0x8000) h++;
        else h--;
    }
}

typedef struct rng_range {
    const rng_ctx *c;
    uint64_t pos; /* logical index of the next run */
} rng_range;

static void rng_run(void *vr, char *const *p, const int64_t *s, int64_t n) {
    rng_range *rr = vr;
    const rng_ctx *c = rr->c;
    uint64_t cached = UINT64_MAX;
    uint32_t w[4];
    char *out = p[0];
    for (int64_t k = 0; k < n; k++) {
        uint64_t i = rr->pos + (uint64_t)k;
        double v = sample(c, i, &cached, w);
        if (!c->normal && !c->exponential) {
            if (c->degenerate)
                v = c->a;
            else if (dtype_round(c->dt, v) >= c->to)
                v = c->below_to; /* rounding up must not reach `to` */
        }
        char *e = out + k * s[0] * (int64_t)c->it.elsize[0];
        switch (c->dt) {
        case VT_F32: { float f = (float)v; memcpy(e, &f, 4); break; }
        case VT_BF16: { uint16_t h = vt_f32_to_bf16((float)v); memcpy(e, &h, 2); break; }
        case VT_F16: { uint16_t h = vt_f32_to_f16((float)v); memcpy(e, &h, 2); break; }
        default: memcpy(e, &v, 8); break;
        }
    }
    rr->pos += (uint64_t)n;
}

static void rng_range_fn(void *vctx, int64_t b, int64_t e) {
    rng_range rr = {vctx, (uint64_t)b};
    vt_iter_range(&((const rng_ctx *)vctx)->it, b, e, rng_run, &rr);
}

static vt_status rng_common(rng_ctx *c, const vt_tensor *out, uint64_t seed, uint64_t offset, const char *what) {
    memset(c, 0, sizeof *c);
    vt_status s = vt_tensor_validate(out, what);
    if (s) return s;
    if (!vt_dtype_is_float(out->dtype))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: expected a floating dtype, got %s", what,
                            vt_dtype_name(out->dtype));
    vt_iter_init(&c->it, 1, out);
    c->dt = out->dtype;
    c->key[0] = (uint32_t)seed;
    c->key[1] = (uint32_t)(seed >> 32);
    c->offset = offset;
    return VT_OK;
}

vt_status vt_rng_uniform(const vt_tensor *out, uint64_t seed, uint64_t offset, double from, double to) {
    rng_ctx c;
    vt_status s = rng_common(&c, out, seed, offset, "uniform");
    if (s) return s;
    if (!isfinite(from) || !isfinite(to) || !(from <= to) || !isfinite(to - from))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT,
                            "uniform: expects from <= to and to - from finite, got from=%g to=%g", from, to);
    c.normal = 0;
    c.a = from;
    c.b = to - from;
    c.to = to;
    c.degenerate = from == to;
    c.below_to = c.degenerate ? from : largest_below(c.dt, to);
    if (c.it.numel) vt_parallel_for(c.it.numel, VT_ELEMENTWISE_GRAIN / 4, rng_range_fn, &c);
    return VT_OK;
}

vt_status vt_rng_normal(const vt_tensor *out, uint64_t seed, uint64_t offset, double mean, double std) {
    rng_ctx c;
    vt_status s = rng_common(&c, out, seed, offset, "normal");
    if (s) return s;
    if (!(std >= 0.0) || !isfinite(std) || !isfinite(mean))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "normal expects std >= 0.0, but found std %g", std);
    c.normal = 1;
    c.a = mean;
    c.b = std;
    c.to = 0;
    c.below_to = 0;
    c.degenerate = 0;
    if (c.it.numel) vt_parallel_for(c.it.numel, VT_ELEMENTWISE_GRAIN / 4, rng_range_fn, &c);
    return VT_OK;
}

vt_status vt_rng_exponential(const vt_tensor *out, uint64_t seed, uint64_t offset, double lambd) {
    rng_ctx c;
    vt_status s = rng_common(&c, out, seed, offset, "exponential");
    if (s) return s;
    if (!(lambd > 0.0))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "exponential_ expects lambda > 0.0, but found lambda=%g", lambd);
    c.normal = 0;
    c.exponential = 1;
    c.a = 0;
    c.b = lambd;
    c.to = 0;
    c.below_to = 0;
    c.degenerate = 0;
    if (c.it.numel) vt_parallel_for(c.it.numel, VT_ELEMENTWISE_GRAIN / 4, rng_range_fn, &c);
    return VT_OK;
}
