/* sort.c — stable sort and top-k along one dim. Each element becomes an
 * unsigned key whose integer order is PyTorch's order (NaNs equal and
 * largest, -0.0 == 0.0; descending complements the key), paired with its
 * index; lines are sorted by an LSD radix sort on the key bytes that vary
 * (stable, so equal keys keep input order), top-k keeps the k best
 * (key, index) pairs (a sorted array up to SORTED_K, a heap above; float
 * lines make their keys on the fly and skip 16-value blocks that cannot
 * enter). Values are read back through the indices, so they keep their
 * exact bits. Lines run in parallel. */
#include <stdlib.h>

#include "kernels/shape/shape.h"

/* ------------------------------------------------------------ keys */

static inline uint64_t key_f32(float f) {
    if (f != f) return UINT64_MAX;
    if (f == 0.0f) f = 0.0f;
    uint32_t u;
    memcpy(&u, &f, 4);
    return (u & 0x80000000u) ? (uint64_t)(~u) : (uint64_t)(u | 0x80000000u);
}

static inline uint64_t key_f64(double f) {
    if (f != f) return UINT64_MAX;
    if (f == 0.0) f = 0.0;
    uint64_t u;
    memcpy(&u, &f, 8);
    /* NaN takes UINT64_MAX; the largest number (+inf) maps below it. */
    return (u >> 63) ? ~u : (u | (1ull << 63)) - 1;
}

uint64_t vt_sort_key(vt_dtype dt, const void *p) {
    switch (dt) {
    case VT_F32: return key_f32(*(const float *)p);
    case VT_BF16: return key_f32(vt_bf16_to_f32(*(const uint16_t *)p));
    case VT_F16: return key_f32(vt_f16_to_f32(*(const uint16_t *)p));
    case VT_F64: return key_f64(*(const double *)p);
    case VT_I8: return (uint64_t)(*(const int8_t *)p) ^ (1ull << 63);
    case VT_U8: return *(const uint8_t *)p;
    case VT_I16: return (uint64_t)(*(const int16_t *)p) ^ (1ull << 63);
    case VT_I32: return (uint64_t)(*(const int32_t *)p) ^ (1ull << 63);
    case VT_I64: return (uint64_t)(*(const int64_t *)p) ^ (1ull << 63);
    case VT_BOOL: return *(const uint8_t *)p != 0;
    default: return 0;
    }
}

void vt_sort_keys(vt_dtype dt, const char *base, int64_t stride, int64_t n, int descending, uint64_t *keys) {
    uint64_t flip = descending ? UINT64_MAX : 0;
    size_t es = vt_dtype_size(dt);
    if (dt == VT_F32) {
        const float *p = (const float *)base;
        for (int64_t i = 0; i < n; i++) keys[i] = key_f32(p[i * stride]) ^ flip;
        return;
    }
    if (dt == VT_BF16) { /* vt_sort_key's bf16 keys, without a call and a switch per element */
        const uint16_t *p = (const uint16_t *)base;
        for (int64_t i = 0; i < n; i++) keys[i] = key_f32(vt_bf16_to_f32(p[i * stride])) ^ flip;
        return;
    }
    for (int64_t i = 0; i < n; i++) keys[i] = vt_sort_key(dt, base + i * stride * (int64_t)es) ^ flip;
}

/* ------------------------------------------------------------ lines */

/* The lines along dim of a tensor: offsets of line o's first element. */
typedef struct lines {
    int32_t nd; /* dims other than dim */
    int64_t sizes[VT_MAX_DIMS];
    int64_t st[3][VT_MAX_DIMS]; /* in, values, indices */
    int64_t count;
} lines;

static void lines_init(lines *g, int dim, const vt_tensor *in, const vt_tensor *v, const vt_tensor *ix) {
    memset(g, 0, sizeof *g);
    g->count = 1;
    for (int d = 0; d < in->ndim; d++) {
        if (d == dim) continue;
        g->sizes[g->nd] = in->sizes[d];
        g->st[0][g->nd] = in->strides[d];
        g->st[1][g->nd] = v ? v->strides[d] : 0;
        g->st[2][g->nd] = ix ? ix->strides[d] : 0;
        g->count *= in->sizes[d];
        g->nd++;
    }
}

static void lines_offsets(const lines *g, int64_t o, int64_t off[3]) {
    off[0] = off[1] = off[2] = 0;
    for (int d = g->nd - 1; d >= 0; d--) {
        int64_t i = o % g->sizes[d];
        o /= g->sizes[d];
        for (int k = 0; k < 3; k++) off[k] += i * g->st[k][d];
    }
}

/* ------------------------------------------------------------ radix sort */

typedef struct kv {
    uint64_t key;
    int64_t idx;
} kv;

/* Sort a[0..n) by key, stable; tmp has n slots. Returns the buffer holding the result. */
static kv *radix_sort(kv *a, kv *tmp, int64_t n) {
    if (n < 48) {
        for (int64_t i = 1; i < n; i++) {
            kv x = a[i];
            int64_t j = i;
            while (j > 0 && a[j - 1].key > x.key) a[j] = a[j - 1], j--;
            a[j] = x;
        }
        return a;
    }
    uint64_t and_all = UINT64_MAX, or_all = 0;
    for (int64_t i = 0; i < n; i++) and_all &= a[i].key, or_all |= a[i].key;
    uint64_t vary = and_all ^ or_all;
    int64_t cnt[256];
    for (int b = 0; b < 8; b++) {
        int sh = 8 * b;
        if (!((vary >> sh) & 0xff)) continue;
        memset(cnt, 0, sizeof cnt);
        for (int64_t i = 0; i < n; i++) cnt[(a[i].key >> sh) & 0xff]++;
        int64_t sum = 0;
        for (int v = 0; v < 256; v++) {
            int64_t c = cnt[v];
            cnt[v] = sum;
            sum += c;
        }
        for (int64_t i = 0; i < n; i++) tmp[cnt[(a[i].key >> sh) & 0xff]++] = a[i];
        kv *t = a;
        a = tmp;
        tmp = t;
    }
    return a;
}

/* ------------------------------------------------------------ checks */

static vt_status check_out(const vt_tensor *o, const vt_tensor *in, int dim, int64_t len, vt_dtype want, const char *what,
                           const char *name) {
    vt_status s = vt_tensor_validate(o, name);
    if (s) return s;
    if (o->dtype != want)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s must be %s, got %s", name, what, vt_dtype_name(want),
                            vt_dtype_name(o->dtype));
    int ind = in->ndim ? in->ndim : 1;
    if (o->ndim != ind) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s has %d dims, input %d", name, what, o->ndim, ind);
    for (int d = 0; d < in->ndim; d++)
        if (o->sizes[d] != (d == dim ? len : in->sizes[d]))
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s has the wrong size at dim %d", name, what, d);
    return VT_OK;
}

static vt_status check_common(const vt_tensor *values, const vt_tensor *indices, const vt_tensor *in, int dim,
                              int *wdim, const char *name) {
    vt_status s = vt_tensor_validate(in, name);
    if (s) return s;
    if (!values && !indices) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: neither values nor indices given", name);
    if (in->ndim == 0) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: input must have at least 1 dim (view a scalar as [1])", name);
    return vt_wrap_dim(dim, in->ndim, wdim);
}

vt_status vt_sort_check(const vt_tensor *values, const vt_tensor *indices, const vt_tensor *in, int dim, int *wdim) {
    vt_status s = check_common(values, indices, in, dim, wdim, "sort");
    if (!s && values) s = check_out(values, in, *wdim, in->sizes[*wdim], in->dtype, "values", "sort");
    if (!s && indices) s = check_out(indices, in, *wdim, in->sizes[*wdim], VT_I64, "indices", "sort");
    return s;
}

vt_status vt_topk_check(const vt_tensor *values, const vt_tensor *indices, const vt_tensor *in, int dim, int64_t k,
                        int *wdim) {
    vt_status s = check_common(values, indices, in, dim, wdim, "topk");
    if (s) return s;
    if (k < 0 || k > in->sizes[*wdim]) return vt_set_error(VT_ERR_INDEX, "selected index k out of range");
    if (values) s = check_out(values, in, *wdim, k, in->dtype, "values", "topk");
    if (!s && indices) s = check_out(indices, in, *wdim, k, VT_I64, "indices", "topk");
    return s;
}

/* ------------------------------------------------------------ drivers */

typedef struct sel_ctx {
    lines g;
    vt_tensor in, values, indices;
    int has_v, has_i;
    int64_t len, k; /* k == len: full sort */
    int descending;
    int dim;
    _Atomic int failed; /* a worker could not get scratch memory */
} sel_ctx;

static void write_line(const sel_ctx *c, const int64_t off[3], const kv *r, int64_t m) {
    size_t es = vt_dtype_size(c->in.dtype);
    const char *src = (const char *)c->in.data + (c->in.offset + off[0]) * (int64_t)es;
    int64_t sin = c->in.strides[c->dim];
    if (c->has_v) {
        char *dst = (char *)c->values.data + (c->values.offset + off[1]) * (int64_t)es;
        int64_t sv = c->values.strides[c->dim];
        switch (es) {
        case 1: for (int64_t j = 0; j < m; j++) dst[j * sv] = src[r[j].idx * sin]; break;
        case 2: for (int64_t j = 0; j < m; j++) ((uint16_t *)dst)[j * sv] = ((const uint16_t *)src)[r[j].idx * sin]; break;
        case 4: for (int64_t j = 0; j < m; j++) ((uint32_t *)dst)[j * sv] = ((const uint32_t *)src)[r[j].idx * sin]; break;
        default: for (int64_t j = 0; j < m; j++) ((uint64_t *)dst)[j * sv] = ((const uint64_t *)src)[r[j].idx * sin]; break;
        }
    }
    if (c->has_i) {
        int64_t *dst = (int64_t *)c->indices.data + c->indices.offset + off[2];
        int64_t si = c->indices.strides[c->dim];
        for (int64_t j = 0; j < m; j++) dst[j * si] = r[j].idx;
    }
}

/* Max-heap on (key, idx): the root is the worst of the kept. */
static inline int kv_worse(const kv *a, const kv *b) { return a->key > b->key || (a->key == b->key && a->idx > b->idx); }

static void heap_down(kv *h, int64_t n, int64_t i) {
    for (;;) {
        int64_t l = 2 * i + 1, w = i;
        if (l < n && kv_worse(&h[l], &h[w])) w = l;
        if (l + 1 < n && kv_worse(&h[l + 1], &h[w])) w = l + 1;
        if (w == i) return;
        kv t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

static int kv_cmp(const void *pa, const void *pb) {
    const kv *a = pa, *b = pb;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* Full sort when k is a large part of the line, else a k-heap. */
static int use_heap(int64_t len, int64_t k) { return k < len && len >= 256 && k * 16 <= len; }

/* A float's order as 32 bits, branch-free: the order of key_f32 (NaNs
 * equal and largest, -0.0 == 0.0), which the top-k heap alone uses. */
static inline uint32_t key32_of_bits(uint32_t u) {
    uint32_t a = u & 0x7fffffffu;
    uint32_t k = (u >> 31) ? ~u : (u | 0x80000000u);
    k = a == 0 ? 0x80000000u : k;
    return a > 0x7f800000u ? 0xffffffffu : k;
}

static inline float float_at(vt_dtype dt, const char *src, int64_t i) {
    if (dt == VT_F32) {
        float f;
        memcpy(&f, src + i * 4, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, src + i * 2, 2);
    return dt == VT_BF16 ? vt_bf16_to_f32(h) : vt_f16_to_f32(h);
}

static inline uint32_t key32_at(vt_dtype dt, const char *src, int64_t i) {
    float f = float_at(dt, src, i);
    uint32_t u;
    memcpy(&u, &f, 4);
    return key32_of_bits(u);
}

/* Insert x into the k-heap holding n of k pairs; returns the new n. */
static inline int64_t heap_offer(kv *h, int64_t n, int64_t k, kv x) {
    if (n < k) {
        int64_t j = n++;
        h[j] = x;
        while (j > 0 && kv_worse(&h[j], &h[(j - 1) / 2])) {
            kv t = h[j];
            h[j] = h[(j - 1) / 2];
            h[(j - 1) / 2] = t;
            j = (j - 1) / 2;
        }
    } else if (x.key < h[0].key) { /* the line goes up in index: an equal key is worse */
        h[0] = x;
        heap_down(h, k, 0);
    }
    return n;
}

/* Whether some of the 16 values at src (unit stride) could enter a full
 * heap whose worst kept value is w: a float comparison (+-0 equal, as
 * their keys), NaN largest; the keys decide for the blocks that pass. */
static int block_may_enter(vt_dtype dt, const char *src, float w, int descending) {
    float v[16];
    if (dt == VT_F32) {
        memcpy(v, src, sizeof v);
    } else {
        const uint16_t *h = (const uint16_t *)src;
        for (int j = 0; j < 16; j++) v[j] = vt_bf16_to_f32(h[j]);
    }
    int any = 0;
    if (descending)
        for (int j = 0; j < 16; j++) any |= (v[j] > w) | (v[j] != v[j]);
    else
        for (int j = 0; j < 16; j++) any |= v[j] < w;
    return any;
}

/* Up to this k, the kept pairs are a sorted array (an insertion moves
 * fewer than k pairs, predictably) rather than a heap (whose sift-down
 * mispredicts), and the result needs no sort. */
#define SORTED_K 32

/* Insert x into the sorted best-first array h holding n of k pairs (x comes
 * after every kept pair of its key: the line goes up in index); returns
 * the new n. */
static inline int64_t sorted_offer(kv *h, int64_t n, int64_t k, kv x) {
    int64_t j = n < k ? n++ : k - 1;
    while (j > 0 && h[j - 1].key > x.key) {
        h[j] = h[j - 1];
        j--;
    }
    h[j] = x;
    return n;
}

/* The k best pairs of a float line into h, keys made on the fly as 32
 * bits: once k are kept, an element costs a load, its key and one
 * comparison with the worst kept; along a unit-stride f32 or bf16 line, 16
 * values at a time are first compared as floats with the worst kept value
 * (block_may_enter), and most blocks stop there. Returns how many are kept;
 * *sorted says whether h is already in result order (k <= SORTED_K) or a
 * heap. */
static int64_t best_of_float_line(vt_dtype dt, const char *src, int64_t stride, int64_t len, int64_t k,
                                  int descending, kv *h, int *sorted) {
    const uint32_t flip = descending ? 0xffffffffu : 0;
    const size_t es = vt_dtype_size(dt);
    const int blocks = stride == 1 && dt != VT_F16;
    *sorted = k <= SORTED_K;
    kv *worst = *sorted ? &h[k - 1] : &h[0];
    int64_t n = 0, i = 0;
    for (; i < len && n < k; i++) {
        kv x = {key32_at(dt, src, i * stride) ^ flip, i};
        n = *sorted ? sorted_offer(h, n, k, x) : heap_offer(h, n, k, x);
    }
    float wv = float_at(dt, src, worst->idx * stride);
    while (i < len) {
        int64_t end = len;
        if (blocks && i + 16 <= len) {
            /* a NaN kept: only a NaN can enter (largest) or anything can (smallest) */
            if (wv == wv && !block_may_enter(dt, src + i * (int64_t)es, wv, descending)) {
                i += 16;
                continue;
            }
            end = i + 16;
        }
        for (; i < end; i++) {
            uint32_t key = key32_at(dt, src, i * stride) ^ flip;
            if (key < worst->key) {
                kv x = {key, i};
                if (*sorted) sorted_offer(h, n, k, x);
                else heap_offer(h, n, k, x);
                wv = float_at(dt, src, worst->idx * stride);
            }
        }
    }
    return n;
}

static void sel_range(void *vctx, int64_t b, int64_t e) {
    const sel_ctx *c = vctx;
    int64_t len = c->len, k = c->k;
    int heap = use_heap(len, k);
    vt_dtype dt = c->in.dtype;
    int float_heap = heap && (dt == VT_F32 || dt == VT_BF16 || dt == VT_F16);
    kv *buf = malloc(sizeof(kv) * (size_t)(heap ? k : 2 * len) + 1);
    uint64_t *keys = float_heap ? NULL : malloc(sizeof(uint64_t) * (size_t)len + 1);
    if (!buf || (!float_heap && !keys)) {
        ((sel_ctx *)c)->failed = 1;
        free(buf);
        free(keys);
        return;
    }
    size_t es = vt_dtype_size(dt);
    for (int64_t o = b; o < e; o++) {
        int64_t off[3];
        lines_offsets(&c->g, o, off);
        const char *src = (const char *)c->in.data + (c->in.offset + off[0]) * (int64_t)es;
        if (float_heap) {
            int sorted;
            int64_t n = best_of_float_line(dt, src, c->in.strides[c->dim], len, k, c->descending, buf, &sorted);
            if (!sorted) qsort(buf, (size_t)n, sizeof(kv), kv_cmp);
            write_line(c, off, buf, k);
            continue;
        }
        vt_sort_keys(dt, src, c->in.strides[c->dim], len, c->descending, keys);
        if (heap) {
            int64_t n = 0;
            for (int64_t i = 0; i < len; i++) n = heap_offer(buf, n, k, (kv){keys[i], i});
            qsort(buf, (size_t)n, sizeof(kv), kv_cmp);
            write_line(c, off, buf, k);
        } else {
            for (int64_t i = 0; i < len; i++) buf[i].key = keys[i], buf[i].idx = i;
            kv *r = radix_sort(buf, buf + len, len);
            write_line(c, off, r, k);
        }
    }
    free(buf);
    free(keys);
}

static vt_status select_run(const vt_tensor *values, const vt_tensor *indices, const vt_tensor *in, int dim, int64_t k,
                            int descending) {
    sel_ctx *c = malloc(sizeof *c);
    if (!c) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "sort: no host memory");
    memset(c, 0, sizeof *c);
    c->in = *in;
    c->has_v = values != NULL;
    c->has_i = indices != NULL;
    if (values) c->values = *values;
    if (indices) c->indices = *indices;
    c->dim = dim;
    c->len = in->sizes[dim];
    c->k = k;
    c->descending = descending;
    lines_init(&c->g, dim, in, values, indices);
    if (c->g.count > 0 && k > 0) {
        int64_t work = c->len * 8 + 64;
        int64_t grain = VT_ELEMENTWISE_GRAIN / work;
        vt_parallel_for(c->g.count, grain < 1 ? 1 : grain, sel_range, c);
    }
    int failed = c->failed;
    free(c);
    return failed ? vt_set_error(VT_ERR_OUT_OF_MEMORY, "sort: no host memory for a line's scratch") : VT_OK;
}

vt_status vt_sort(const vt_tensor *values, const vt_tensor *indices, const vt_tensor *in, int dim, int descending) {
    int d;
    vt_status s = vt_sort_check(values, indices, in, dim, &d);
    if (s) return s;
    return select_run(values, indices, in, d, in->sizes[d], descending);
}

vt_status vt_topk(const vt_tensor *values, const vt_tensor *indices, const vt_tensor *in, int dim, int64_t k,
                  int largest) {
    int d;
    vt_status s = vt_topk_check(values, indices, in, dim, k, &d);
    if (s) return s;
    return select_run(values, indices, in, d, k, largest);
}
