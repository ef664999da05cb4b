/* test_kernels_util.h — helpers shared by the kernel tests: host tensors of
 * any dtype and layout, deterministic awkward values, and comparison of two
 * outputs bit for bit or within a tolerance. */
#ifndef VTPU_TEST_KERNELS_UTIL_H
#define VTPU_TEST_KERNELS_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "test.h"

static const int64_t awkward_sizes[] = {0, 1, 15, 17, 31, 33, 257, 1000, 100003};
#define N_AWKWARD (sizeof awkward_sizes / sizeof awkward_sizes[0])

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static inline uint64_t next_u64(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A tensor over its own heap block; view describes how it is read. */
typedef struct host_tensor {
    vt_tensor t;
    void *block;
    size_t bytes;
    int on_device; /* block is device 0's HBM (ht_device) */
} host_tensor;

/* Contiguous tensor of the given shape (ndim 0 = scalar). */
static inline host_tensor ht_new(vt_dtype dt, int ndim, const int64_t *sizes) {
    host_tensor h;
    memset(&h, 0, sizeof h);
    h.t.dtype = dt;
    h.t.ndim = ndim;
    int64_t n = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        h.t.sizes[d] = sizes[d];
        h.t.strides[d] = n;
        n *= sizes[d];
    }
    size_t bytes = (size_t)(n ? n : 1) * vt_dtype_size(dt);
    h.block = calloc(1, bytes);
    h.bytes = bytes;
    h.t.data = h.block;
    return h;
}

/* Move h's block (and its contents) into device 0's HBM: queued ops take
 * device memory only. The kernels themselves take any memory, and tests of
 * them keep malloc'd blocks so AddressSanitizer sees every overrun. */
static inline void ht_device(host_tensor *h) {
    if (h->on_device) return;
    void *d = NULL;
    if (vt_hbm_alloc(0, h->bytes, &d) != VT_OK || !d) {
        fprintf(stderr, "ht_device: %s\n", vt_last_error());
        abort();
    }
    memcpy(d, h->block, h->bytes);
    free(h->block);
    h->block = d;
    h->t.data = d;
    h->on_device = 1;
}

static inline host_tensor ht_1d(vt_dtype dt, int64_t n) { return ht_new(dt, 1, &n); }

/* A 1-D view of n elements reading every `step`-th element starting at 3. */
static inline host_tensor ht_strided(vt_dtype dt, int64_t n, int64_t step) {
    host_tensor h = ht_1d(dt, n * step + 3);
    h.t.sizes[0] = n;
    h.t.strides[0] = step;
    h.t.offset = 3;
    return h;
}

/* rows x cols view of a cols x rows contiguous block (a transpose). */
static inline host_tensor ht_transposed(vt_dtype dt, int64_t rows, int64_t cols) {
    int64_t s[2] = {cols, rows};
    host_tensor h = ht_new(dt, 2, s);
    h.t.sizes[0] = rows;
    h.t.sizes[1] = cols;
    h.t.strides[0] = 1;
    h.t.strides[1] = rows;
    return h;
}

static inline void ht_free(host_tensor *h) {
    if (h->on_device) vt_hbm_free(0, h->block);
    else free(h->block);
    h->block = NULL;
}

static inline int64_t ht_block_elems(const host_tensor *h) {
    int64_t n = h->t.offset + 1;
    for (int d = 0; d < h->t.ndim; d++)
        if (h->t.sizes[d] > 0) n += (h->t.sizes[d] - 1) * h->t.strides[d];
    return n;
}

/* Awkward float values: specials, ties for rounding, small integers. */
static inline double awkward_double(int kind_mask) {
    static const double specials[] = {0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.0, 1e-30, 65504.0,
                                      70000.0, 1e30, INFINITY, -INFINITY, NAN, 3e9, -7.0, 100.0};
    uint64_t r = next_u64();
    if (kind_mask && (r % 8) == 0) return specials[(r >> 8) % (sizeof specials / sizeof specials[0])];
    double u = (double)(r >> 11) * 0x1p-53;
    return (u - 0.5) * 20.0;
}

/* Fill every element of the block with dtype-appropriate values.
 * nonzero: avoid zeros (integer divisors); specials: include inf/NaN. */
static inline void ht_fill_random(host_tensor *h, int specials, int nonzero) {
    int64_t n = ht_block_elems(h);
    char *p = h->block;
    size_t es = vt_dtype_size(h->t.dtype);
    for (int64_t i = 0; i < n; i++) {
        char *e = p + i * (int64_t)es;
        if (vt_dtype_is_float(h->t.dtype)) {
            double d = awkward_double(specials);
            if (nonzero && d == 0) d = 1.25;
            vt_convert(VT_F64, &d, 1, h->t.dtype, e, 1, 1);
        } else {
            uint64_t r = next_u64();
            int64_t v;
            switch (r % 4) {
            case 0: v = (int64_t)(r >> 8) % 7 - 3; break; /* small, often zero / negative */
            case 1: v = (int64_t)(r >> 2);  break;        /* full range */
            default: v = (int64_t)((r >> 8) % 2001) - 1000; break;
            }
            if (h->t.dtype == VT_BOOL) v = (int64_t)(r >> 40) & 1;
            if (nonzero && v == 0) v = 3;
            vt_convert(VT_I64, &v, 1, h->t.dtype, e, 1, 1);
            if (nonzero) { /* narrowing may have produced a zero */
                int64_t back;
                vt_convert(h->t.dtype, e, 1, VT_I64, &back, 1, 1);
                if (back == 0) {
                    int64_t one = 1;
                    vt_convert(VT_I64, &one, 1, h->t.dtype, e, 1, 1);
                }
            }
        }
    }
}

static inline double ulp_tolerance(vt_dtype dt) {
    switch (dt) {
    case VT_BF16: return 1.6e-2;
    case VT_F16: return 2e-3;
    case VT_F32: return 2e-6;
    default: return 1e-13;
    }
}

/* Relative tolerance of an inexact elementwise op: the vector erf
 * (erf_table.h) is not libm's, and gelu's gradient far left, cdf + x pdf,
 * cancels: one ulp of erf there moves the result by up to a part in a
 * thousand. */
static inline double inexact_tol(int is_gelu, vt_dtype compute) {
    double ulps = ulp_tolerance(compute) * 4;
    return is_gelu && compute != VT_F64 && ulps < 1e-3 ? 1e-3 : ulps;
}

/* Compare two same-shaped tensors element by element (both read through
 * vt_convert to double / int64). tol < 0: bits must match (NaN == NaN).
 * Returns the number of mismatches and reports the first few. */
static inline int64_t ht_compare(const char *what, const vt_tensor *x, const vt_tensor *y, double tol) {
    int64_t n = vt_tensor_numel(x), bad = 0;
    int64_t idx[VT_MAX_DIMS] = {0};
    size_t es = vt_dtype_size(x->dtype);
    for (int64_t li = 0; li < n; li++) {
        int64_t ox = x->offset, oy = y->offset;
        for (int d = 0; d < x->ndim; d++) {
            ox += idx[d] * x->strides[d];
            oy += idx[d] * y->strides[d];
        }
        const char *px = (const char *)x->data + ox * (int64_t)es, *py = (const char *)y->data + oy * (int64_t)es;
        int ok;
        if (vt_dtype_is_float(x->dtype)) {
            double a, b;
            vt_convert(x->dtype, px, 1, VT_F64, &a, 1, 1);
            vt_convert(y->dtype, py, 1, VT_F64, &b, 1, 1);
            if (isnan(a) || isnan(b)) ok = isnan(a) && isnan(b);
            else if (tol < 0) ok = memcmp(px, py, es) == 0;
            else ok = a == b || fabs(a - b) <= tol * fmax(fabs(a), fabs(b)) + tol * 1e-3;
        } else {
            ok = memcmp(px, py, es) == 0;
        }
        if (!ok) {
            if (bad < 3) {
                double a = 0, b = 0;
                vt_convert(x->dtype, px, 1, VT_F64, &a, 1, 1);
                vt_convert(y->dtype, py, 1, VT_F64, &b, 1, 1);
                vt_test_fail(__FILE__, __LINE__, "%s: element %lld: %.17g vs %.17g (%s)", what, (long long)li, a, b,
                             vt_dtype_name(x->dtype));
            }
            bad++;
        }
        for (int d = x->ndim - 1; d >= 0; d--) {
            if (++idx[d] < x->sizes[d]) break;
            idx[d] = 0;
        }
    }
    return bad;
}

/* Mismatches of x against y (same shape, any strides, read as double):
 * |a - b| <= rtol (|a| + |b|) + atol, NaN == NaN. Reports the first few. */
static inline int64_t ht_near(const char *what, const vt_tensor *x, const vt_tensor *y, double rtol, double atol) {
    int64_t n = vt_tensor_numel(x), bad = 0;
    int64_t idx[VT_MAX_DIMS] = {0};
    for (int64_t li = 0; li < n; li++) {
        int64_t ox = x->offset, oy = y->offset;
        for (int d = 0; d < x->ndim; d++) {
            ox += idx[d] * x->strides[d];
            oy += idx[d] * y->strides[d];
        }
        double a, b;
        vt_convert(x->dtype, (const char *)x->data + ox * (int64_t)vt_dtype_size(x->dtype), 1, VT_F64, &a, 1, 1);
        vt_convert(y->dtype, (const char *)y->data + oy * (int64_t)vt_dtype_size(y->dtype), 1, VT_F64, &b, 1, 1);
        int ok = (isnan(a) || isnan(b)) ? (isnan(a) && isnan(b))
                                        : (a == b || fabs(a - b) <= rtol * (fabs(a) + fabs(b)) + atol);
        if (!ok && bad++ < 3)
            vt_test_fail(__FILE__, __LINE__, "%s: element %lld: %.9g vs %.9g (%s)", what, (long long)li, a, b,
                         vt_dtype_name(x->dtype));
        for (int d = x->ndim - 1; d >= 0; d--) {
            if (++idx[d] < x->sizes[d]) break;
            idx[d] = 0;
        }
    }
    return bad;
}

/* A source (vt_source) that hands out the input's own memory and counts
 * each element's reads (reads may be NULL only if never read). */
/* A source over memory (vt_source): counts the reads of each element
 * (reads: NULL for none) and notes a read of fewer than 1 or more than
 * VT_SOURCE_MAX values (bad). Strict, it hands out a fresh copy of exactly
 * the m values asked for, so a kernel reading past them is caught by the
 * sanitizers; mem_source_release frees the copies. */
typedef struct mem_source {
    const char *base;
    size_t es;
    int *reads;
    int strict, bad, lock;
    void **copies;
    size_t ncopies, cap;
} mem_source;

static inline const void *mem_read(void *ctx, int64_t first, int64_t m) {
    mem_source *ms = ctx;
    const char *p = ms->base + first * (int64_t)ms->es;
    if (m < 1 || m > VT_SOURCE_MAX) __atomic_store_n(&ms->bad, 1, __ATOMIC_RELAXED);
    if (ms->reads)
        for (int64_t i = 0; i < m; i++) __atomic_fetch_add(&ms->reads[first + i], 1, __ATOMIC_RELAXED);
    if (!ms->strict || m < 1) return p;
    void *copy = malloc((size_t)m * ms->es);
    if (!copy) {
        __atomic_store_n(&ms->bad, 1, __ATOMIC_RELAXED);
        return p;
    }
    memcpy(copy, p, (size_t)m * ms->es);
    while (__atomic_test_and_set(&ms->lock, __ATOMIC_ACQUIRE)) {}
    if (ms->ncopies == ms->cap) {
        size_t cap = ms->cap ? 2 * ms->cap : 64;
        void **grown = realloc(ms->copies, cap * sizeof *grown);
        if (grown) ms->copies = grown, ms->cap = cap;
    }
    if (ms->ncopies < ms->cap) ms->copies[ms->ncopies++] = copy;
    else __atomic_store_n(&ms->bad, 1, __ATOMIC_RELAXED); /* the copy leaks: the test fails anyway */
    __atomic_clear(&ms->lock, __ATOMIC_RELEASE);
    return copy;
}

static inline void mem_source_release(mem_source *ms) {
    for (size_t i = 0; i < ms->ncopies; i++) free(ms->copies[i]);
    free(ms->copies);
    ms->copies = NULL;
    ms->ncopies = ms->cap = 0;
}

#endif
