/* conv_im2col.c — the data movers around the MXU products of a convolution:
 * an im2col row (one tap of one channel over every output position, as the
 * packers ask for it: the column matrix is never stored), and col2im, which
 * sums column entries back onto the input positions they came from, one
 * (image, channel) plane per task on the pool. Both take any input strides. */
#include "kernels/conv/conv.h"

/* Elements per parallel task below which the pool costs more than it gains. */
#define MOVE_GRAIN 32768
/* col2im accumulates an input row in blocks of this many positions on the
 * stack, so a long 1-D signal needs no heap row. */
#define ROW_BLOCK 256

static inline int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && a < 0); }
static inline int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }
static inline int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Output positions z in [*lo, *hi) of one dim whose input position
 * z*s - p + k*d lies in [i0, i1). */
static inline void valid_range(int64_t i0, int64_t i1, int64_t s, int64_t p, int64_t kd, int64_t nz, int64_t *lo,
                               int64_t *hi) {
    *lo = clamp64(ceil_div(i0 + p - kd, s), 0, nz);
    *hi = clamp64(ceil_div(i1 + p - kd, s), *lo, nz);
}

/* Vectors of the GCC/Clang extension (SIMD on any target, no ISA flags). */
typedef uint64_t vec4d __attribute__((vector_size(32)));
typedef uint32_t vec4w __attribute__((vector_size(16)));
typedef uint32_t vec8w __attribute__((vector_size(32)));
typedef uint16_t vec8h __attribute__((vector_size(16)));

/* Copy n elements read every `step` elements of dtype dt into contiguous ct.
 * Same-dtype runs (f32, bf16: a strided convolution's rows) are plain
 * loads and stores, not the generic converter's per-element dispatch; at
 * stride 2 (the common strided convolution) each pair of elements is one
 * wider word whose low half (little-endian) is the element kept, and a
 * vector truncation keeps eight or four at once (2.1 -> 1.7 ms for a
 * 3x3/2 128-channel bf16 weight gradient, NCHW). */
static void gather_run(vt_dtype dt, const char *src, int64_t step, vt_dtype ct, char *dst, int64_t n) {
    if (n <= 0) return;
    if (dt == ct && step == 1) {
        memcpy(dst, src, (size_t)n * vt_dtype_size(ct));
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    } else if (dt == ct && step == 2 && vt_dtype_size(ct) == 2) { /* a stride-2 row: */
        int64_t i = 0; /* the low halves of 32-bit words, eight at a time; */
        for (; i + 8 < n; i += 8) { /* the word of the last element would read one past it */
            vec8w w;
            memcpy(&w, src + i * 4, sizeof w);
            vec8h h = __builtin_convertvector(w, vec8h);
            memcpy(dst + i * 2, &h, sizeof h);
        }
        for (; i < n; i++) memcpy(dst + i * 2, src + i * 4, 2);
    } else if (dt == ct && step == 2 && vt_dtype_size(ct) == 4) { /* of 64-bit words */
        int64_t i = 0;
        for (; i + 4 < n; i += 4) {
            vec4d w;
            memcpy(&w, src + i * 8, sizeof w);
            vec4w h = __builtin_convertvector(w, vec4w);
            memcpy(dst + i * 4, &h, sizeof h);
        }
        for (; i < n; i++) memcpy(dst + i * 4, src + i * 8, 4);
#endif
    } else if (dt == ct && vt_dtype_size(ct) == 4) {
        const uint32_t *s = (const uint32_t *)src;
        uint32_t *d = (uint32_t *)dst;
        for (int64_t i = 0; i < n; i++) d[i] = s[i * step];
    } else if (dt == ct && vt_dtype_size(ct) == 2) {
        const uint16_t *s = (const uint16_t *)src;
        uint16_t *d = (uint16_t *)dst;
        for (int64_t i = 0; i < n; i++) d[i] = s[i * step];
    } else {
        vt_convert(dt, src, step, ct, dst, 1, n);
    }
}

typedef struct move_job {
    const vt_conv_geom *g;
    const vt_tensor *x5;
    int64_t n0, ld;
    vt_dtype ct;
    char *col;
} move_job;

/* ------------------------------------------------------------ im2col rows */

/* Tap (k0, k1, k2) of channel c of image n over every output position:
 * out_prod values of ct at dst, 0 where the window reads padding. */
static void plane_row(const vt_conv_geom *g, const vt_tensor *x, int64_t n, int64_t c, int64_t k0, int64_t k1,
                      int64_t k2, vt_dtype ct, char *dst) {
    size_t es = vt_dtype_size(x->dtype), cs = vt_dtype_size(ct);
    const char *plane = (const char *)x->data + (x->offset + n * x->strides[0] + c * x->strides[1]) * (int64_t)es;
    const int64_t *xs = x->strides + 2;
    int64_t lo, hi;
    valid_range(0, g->in[2], g->stride[2], g->pad[2], k2 * g->dil[2], g->out[2], &lo, &hi);
    for (int64_t z0 = 0; z0 < g->out[0]; z0++) {
        int64_t i0 = z0 * g->stride[0] - g->pad[0] + k0 * g->dil[0];
        for (int64_t z1 = 0; z1 < g->out[1]; z1++, dst += g->out[2] * (int64_t)cs) {
            int64_t i1 = z1 * g->stride[1] - g->pad[1] + k1 * g->dil[1];
            if (i0 < 0 || i0 >= g->in[0] || i1 < 0 || i1 >= g->in[1] || lo == hi) {
                memset(dst, 0, (size_t)g->out[2] * cs);
                continue;
            }
            memset(dst, 0, (size_t)lo * cs);
            int64_t i2 = lo * g->stride[2] - g->pad[2] + k2 * g->dil[2];
            const char *src = plane + (i0 * xs[0] + i1 * xs[1] + i2 * xs[2]) * (int64_t)es;
            gather_run(x->dtype, src, g->stride[2] * xs[2], ct, dst + lo * (int64_t)cs, hi - lo);
            memset(dst + hi * (int64_t)cs, 0, (size_t)(g->out[2] - hi) * cs);
        }
    }
}

void vt_conv_im2col_row(const vt_conv_geom *g, const vt_tensor *x5, int64_t n0, int64_t nb, int64_t c, int64_t kk,
                        vt_dtype ct, void *dst) {
    int64_t k2 = kk % g->k[2], k1 = kk / g->k[2] % g->k[1], k0 = kk / (g->k[2] * g->k[1]);
    size_t cs = vt_dtype_size(ct);
    for (int64_t b = 0; b < nb; b++)
        plane_row(g, x5, n0 + b, c, k0, k1, k2, ct, (char *)dst + b * g->out_prod * (int64_t)cs);
}

/* ------------------------------------------------------------ col2im */

/* Eight floats as one value (GCC/Clang vector extension: SIMD on any
 * target, without ISA-specific flags); memcpy loads need no alignment. */
typedef float vec8f __attribute__((vector_size(32)));

/* acc[i * step] += src[i], i < n, in ct. Unit steps (stride 1, the usual
 * case) go eight at a time: -O2 does not vectorise this loop by itself. */
static inline void add_run(vt_dtype ct, char *acc, const char *src, int64_t step, int64_t n) {
    if (ct == VT_F32 && step == 1) {
        float *a = (float *)acc;
        const float *s = (const float *)src;
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
            vec8f va, vs;
            memcpy(&va, a + i, sizeof va);
            memcpy(&vs, s + i, sizeof vs);
            va += vs;
            memcpy(a + i, &va, sizeof va);
        }
        for (; i < n; i++) a[i] += s[i];
    } else if (ct == VT_F64) {
        double *a = (double *)acc;
        const double *s = (const double *)src;
        for (int64_t i = 0; i < n; i++) a[i * step] += s[i];
    } else {
        float *a = (float *)acc;
        const float *s = (const float *)src;
        for (int64_t i = 0; i < n; i++) a[i * step] += s[i];
    }
}

/* One input plane, row block by row block: every column entry that read a
 * position is added to it (kernel taps in order), then the block is
 * rounded once into x. Writing each position exactly once needs no zeroing
 * and leaves positions outside every window (output_padding) at 0. */
static void col2im_plane(const move_job *j, int64_t b, int64_t c) {
    const vt_conv_geom *g = j->g;
    const vt_tensor *x = j->x5;
    size_t es = vt_dtype_size(x->dtype), cs = vt_dtype_size(j->ct);
    char *plane = (char *)x->data + (x->offset + (j->n0 + b) * x->strides[0] + c * x->strides[1]) * (int64_t)es;
    const int64_t *xs = x->strides + 2;
    union { double d[ROW_BLOCK]; float f[ROW_BLOCK]; } acc_store; /* the compute dtype's row block */
    char *acc = j->ct == VT_F64 ? (char *)acc_store.d : (char *)acc_store.f;
    const char *cplane = j->col + (c * g->k_prod * j->ld + b * g->out_prod) * (int64_t)cs;
    for (int64_t i0 = 0; i0 < g->in[0]; i0++)
        for (int64_t i1 = 0; i1 < g->in[1]; i1++)
            for (int64_t w0 = 0; w0 < g->in[2]; w0 += ROW_BLOCK) {
                int64_t bw = g->in[2] - w0 < ROW_BLOCK ? g->in[2] - w0 : ROW_BLOCK;
                memset(acc, 0, (size_t)bw * cs);
                for (int64_t k0 = 0; k0 < g->k[0]; k0++) {
                    int64_t t0 = i0 + g->pad[0] - k0 * g->dil[0];
                    if (t0 < 0 || t0 % g->stride[0] || t0 / g->stride[0] >= g->out[0]) continue;
                    for (int64_t k1 = 0; k1 < g->k[1]; k1++) {
                        int64_t t1 = i1 + g->pad[1] - k1 * g->dil[1];
                        if (t1 < 0 || t1 % g->stride[1] || t1 / g->stride[1] >= g->out[1]) continue;
                        int64_t zrow = (t0 / g->stride[0] * g->out[1] + t1 / g->stride[1]) * g->out[2];
                        for (int64_t k2 = 0; k2 < g->k[2]; k2++) {
                            int64_t kk = (k0 * g->k[1] + k1) * g->k[2] + k2, lo, hi;
                            int64_t kd = k2 * g->dil[2];
                            valid_range(w0, w0 + bw, g->stride[2], g->pad[2], kd, g->out[2], &lo, &hi);
                            if (lo == hi) continue;
                            const char *src = cplane + (kk * j->ld + zrow + lo) * (int64_t)cs;
                            int64_t first = lo * g->stride[2] - g->pad[2] + kd - w0;
                            add_run(j->ct, acc + first * (int64_t)cs, src, g->stride[2], hi - lo);
                        }
                    }
                }
                char *dst = plane + (i0 * xs[0] + i1 * xs[1] + w0 * xs[2]) * (int64_t)es;
                if (x->dtype == j->ct && xs[2] == 1) memcpy(dst, acc, (size_t)bw * cs);
                else vt_convert(j->ct, acc, 1, x->dtype, dst, xs[2], bw);
            }
}

static void col2im_range(void *ctx, int64_t begin, int64_t end) {
    const move_job *j = ctx;
    for (int64_t t = begin; t < end; t++) col2im_plane(j, t / j->g->C, t % j->g->C);
}

void vt_conv_col2im(const vt_conv_geom *g, const vt_tensor *x5, int64_t n0, int64_t nb, vt_dtype ct,
                    const void *col, int64_t ld) {
    move_job j = {g, x5, n0, ld, ct, (char *)col};
    int64_t per = g->k_prod * (g->in_prod > g->out_prod ? g->in_prod : g->out_prod);
    vt_parallel_for(nb * g->C, per >= MOVE_GRAIN ? 1 : MOVE_GRAIN / (per ? per : 1), col2im_range, &j);
}
