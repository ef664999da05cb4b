/* pool.c — pooling and upsampling drivers. Work is split over the N*C
 * planes; each plane is gathered into a contiguous double scratch (any
 * strides and dtype, one vt_convert per row), computed there and stored back
 * with one rounding, so NCHW, channels-last and views share one code path
 * and results do not depend on the thread count. */
#include <stdatomic.h>
#include <stdlib.h>

#include "pool.h"

typedef struct plane_job {
    vt_pool_kind kind;
    int backward;
    vt_pool2d_params p;
    vt_upsample_mode mode;
    int align_corners;
    double sh, sw;
    vt_tensor fout, idx, fin; /* the forward op's output and input (grad_out / grad_in in backward) */
    int has_idx;
    int64_t C, IH, IW, OH, OW; /* IH, IW: input of the forward op; OH, OW: its output */
    vt_upsample_src *rows, *cols;
    _Atomic int failed;     /* 1: out of memory, 2: bad index */
    _Atomic int64_t bad_index;
} plane_job;

static char *plane_ptr(const vt_tensor *t, int64_t plane, int64_t C) {
    int64_t n = plane / C, c = plane % C;
    return (char *)t->data + (t->offset + n * t->strides[0] + c * t->strides[1]) * (int64_t)vt_dtype_size(t->dtype);
}

static void load_plane(const vt_tensor *t, int64_t plane, int64_t C, double *dst) {
    int64_t H = t->sizes[2], W = t->sizes[3], es = (int64_t)vt_dtype_size(t->dtype);
    const char *base = plane_ptr(t, plane, C);
    if (t->strides[3] == 1 && t->strides[2] == W) {
        vt_convert(t->dtype, base, 1, VT_F64, dst, 1, H * W);
        return;
    }
    for (int64_t h = 0; h < H; h++) vt_convert(t->dtype, base + h * t->strides[2] * es, t->strides[3], VT_F64, dst + h * W, 1, W);
}

static void store_plane(const vt_tensor *t, int64_t plane, int64_t C, const double *src) {
    int64_t H = t->sizes[2], W = t->sizes[3], es = (int64_t)vt_dtype_size(t->dtype);
    char *base = plane_ptr(t, plane, C);
    if (t->strides[3] == 1 && t->strides[2] == W) {
        vt_convert(VT_F64, src, 1, t->dtype, base, 1, H * W);
        return;
    }
    for (int64_t h = 0; h < H; h++) vt_convert(VT_F64, src + h * W, 1, t->dtype, base + h * t->strides[2] * es, t->strides[3], W);
}

static int64_t *idx_at(const vt_tensor *t, int64_t plane, int64_t C, int64_t h, int64_t w) {
    return (int64_t *)plane_ptr(t, plane, C) + h * t->strides[2] + w * t->strides[3];
}

/* ---------------------------------------------------------------- forward planes */

/* The window's maximum so far (m at best) meets v at `at`: v wins when
 * greater or NaN (a later NaN too, as PyTorch's CPU loop), chosen with a bit
 * mask (GCC turned ?: back into a branch): on random data the branch was a
 * coin toss, and its misses most of the pool's time. */
static inline void max_take(double *m, int64_t *best, double v, int64_t at) {
    uint64_t take = -(uint64_t)((v > *m) | (v != v)), vb, mb;
    memcpy(&vb, &v, 8);
    memcpy(&mb, m, 8);
    mb = (vb & take) | (mb & ~take);
    memcpy(m, &mb, 8);
    *best = (int64_t)(((uint64_t)at & take) | ((uint64_t)*best & ~take));
}

static void max_plane(const plane_job *j, const double *in, double *out, int64_t plane) {
    const vt_pool2d_params *p = &j->p;
    int64_t IH = j->IH, IW = j->IW;
    int64_t *idx = j->has_idx ? idx_at(&j->idx, plane, j->C, 0, 0) : NULL; /* the plane's first index */
    const int64_t is0 = j->idx.strides[2], is1 = j->idx.strides[3];
    for (int64_t oh = 0; oh < j->OH; oh++) {
        int64_t h0 = oh * p->stride[0] - p->padding[0];
        int64_t h1 = h0 + (p->kernel[0] - 1) * p->dilation[0] + 1;
        if (h1 > IH) h1 = IH;
        while (h0 < 0) h0 += p->dilation[0];
        for (int64_t ow = 0; ow < j->OW; ow++) {
            int64_t w0 = ow * p->stride[1] - p->padding[1];
            int64_t w1 = w0 + (p->kernel[1] - 1) * p->dilation[1] + 1;
            if (w1 > IW) w1 = IW;
            while (w0 < 0) w0 += p->dilation[1];
            int64_t best = h0 * IW + w0;
            double m = -INFINITY;
            for (int64_t h = h0; h < h1; h += p->dilation[0])
                for (int64_t w = w0; w < w1; w += p->dilation[1]) max_take(&m, &best, in[h * IW + w], h * IW + w);
            out[oh * j->OW + ow] = m;
            if (idx) idx[oh * is0 + ow * is1] = best;
        }
    }
}

/* Window of average-pooling output (oh, ow) and its divisor; 0 when empty. */
static double avg_window(const vt_pool2d_params *p, int64_t IH, int64_t IW, int64_t oh, int64_t ow, int64_t *h0,
                         int64_t *h1, int64_t *w0, int64_t *w1) {
    int64_t a = oh * p->stride[0] - p->padding[0], b = ow * p->stride[1] - p->padding[1];
    int64_t a1 = a + p->kernel[0], b1 = b + p->kernel[1];
    if (a1 > IH + p->padding[0]) a1 = IH + p->padding[0];
    if (b1 > IW + p->padding[1]) b1 = IW + p->padding[1];
    int64_t pool = (a1 - a) * (b1 - b);
    if (a < 0) a = 0;
    if (b < 0) b = 0;
    if (a1 > IH) a1 = IH;
    if (b1 > IW) b1 = IW;
    *h0 = a; *h1 = a1; *w0 = b; *w1 = b1;
    if (a >= a1 || b >= b1) return 0;
    if (p->divisor_override) return (double)p->divisor_override;
    return p->count_include_pad ? (double)pool : (double)((a1 - a) * (b1 - b));
}

static void avg_plane(const plane_job *j, const double *in, double *out) {
    for (int64_t oh = 0; oh < j->OH; oh++)
        for (int64_t ow = 0; ow < j->OW; ow++) {
            int64_t h0, h1, w0, w1;
            double div = avg_window(&j->p, j->IH, j->IW, oh, ow, &h0, &h1, &w0, &w1);
            double s = 0;
            if (div != 0)
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++) s += in[h * j->IW + w];
            out[oh * j->OW + ow] = div != 0 ? s / div : 0.0;
        }
}

static void adaptive_plane(const plane_job *j, const double *in, double *out, int64_t plane, int is_max) {
    for (int64_t oh = 0; oh < j->OH; oh++) {
        int64_t h0 = vt_adaptive_start(oh, j->IH, j->OH), h1 = vt_adaptive_end(oh, j->IH, j->OH);
        for (int64_t ow = 0; ow < j->OW; ow++) {
            int64_t w0 = vt_adaptive_start(ow, j->IW, j->OW), w1 = vt_adaptive_end(ow, j->IW, j->OW);
            if (is_max) {
                int64_t best = h0 * j->IW + w0;
                double m = -INFINITY;
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++) max_take(&m, &best, in[h * j->IW + w], h * j->IW + w);
                out[oh * j->OW + ow] = m;
                if (j->has_idx) *idx_at(&j->idx, plane, j->C, oh, ow) = best;
            } else {
                double s = 0;
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++) s += in[h * j->IW + w];
                out[oh * j->OW + ow] = s / (double)((h1 - h0) * (w1 - w0));
            }
        }
    }
}

/* Separable as PyTorch's kernel: each source row is interpolated along W
 * (tmp, IH x OW), then output rows blend two tmp rows. */
static void upsample_plane(const plane_job *j, const double *in, double *out, double *tmp) {
    int64_t IW = j->IW, OW = j->OW;
    if (j->mode != VT_UPSAMPLE_BILINEAR) {
        for (int64_t oh = 0; oh < j->OH; oh++) {
            const double *src = in + j->rows[oh].i0 * IW;
            double *dst = out + oh * OW;
            for (int64_t ow = 0; ow < OW; ow++) dst[ow] = src[j->cols[ow].i0];
        }
        return;
    }
    for (int64_t ih = 0; ih < j->IH; ih++) {
        const double *src = in + ih * IW;
        double *dst = tmp + ih * OW;
        for (int64_t ow = 0; ow < OW; ow++) {
            const vt_upsample_src *c = &j->cols[ow];
            dst[ow] = c->l0 * src[c->i0] + c->l1 * src[c->i1];
        }
    }
    for (int64_t oh = 0; oh < j->OH; oh++) {
        const vt_upsample_src *r = &j->rows[oh];
        const double *restrict a = tmp + r->i0 * OW, *restrict b = tmp + r->i1 * OW;
        double *restrict dst = out + oh * OW;
        double l0 = r->l0, l1 = r->l1;
        for (int64_t ow = 0; ow < OW; ow++) dst[ow] = l0 * a[ow] + l1 * b[ow];
    }
}

/* ---------------------------------------------------------------- backward planes
 * go: grad_out plane (OH x OW); gi: grad_in plane (IH x IW), zeroed. */

static void max_backward_plane(plane_job *j, const double *go, double *gi, int64_t plane) {
    int64_t lim = j->IH * j->IW;
    for (int64_t oh = 0; oh < j->OH; oh++)
        for (int64_t ow = 0; ow < j->OW; ow++) {
            int64_t k = *idx_at(&j->idx, plane, j->C, oh, ow);
            if (k < 0 || k >= lim) {
                int expect = 0;
                if (atomic_compare_exchange_strong(&j->failed, &expect, 2)) atomic_store(&j->bad_index, k);
                continue;
            }
            gi[k] += go[oh * j->OW + ow];
        }
}

static void avg_backward_plane(const plane_job *j, const double *go, double *gi) {
    for (int64_t oh = 0; oh < j->OH; oh++)
        for (int64_t ow = 0; ow < j->OW; ow++) {
            int64_t h0, h1, w0, w1;
            double div;
            if (j->kind == VT_POOL_AVG) {
                div = avg_window(&j->p, j->IH, j->IW, oh, ow, &h0, &h1, &w0, &w1);
                if (div == 0) continue;
            } else {
                h0 = vt_adaptive_start(oh, j->IH, j->OH), h1 = vt_adaptive_end(oh, j->IH, j->OH);
                w0 = vt_adaptive_start(ow, j->IW, j->OW), w1 = vt_adaptive_end(ow, j->IW, j->OW);
                div = (double)((h1 - h0) * (w1 - w0));
            }
            double g = go[oh * j->OW + ow] / div;
            for (int64_t h = h0; h < h1; h++)
                for (int64_t w = w0; w < w1; w++) gi[h * j->IW + w] += g;
        }
}

static void upsample_backward_plane(const plane_job *j, const double *go, double *gi, double *tmp) {
    int64_t IW = j->IW, OW = j->OW;
    if (j->mode != VT_UPSAMPLE_BILINEAR) {
        for (int64_t oh = 0; oh < j->OH; oh++) {
            double *dst = gi + j->rows[oh].i0 * IW;
            const double *src = go + oh * OW;
            for (int64_t ow = 0; ow < OW; ow++) dst[j->cols[ow].i0] += src[ow];
        }
        return;
    }
    memset(tmp, 0, (size_t)(j->IH * OW) * sizeof(double));
    for (int64_t oh = 0; oh < j->OH; oh++) {
        const vt_upsample_src *r = &j->rows[oh];
        double *a = tmp + r->i0 * OW, *b = tmp + r->i1 * OW;
        const double *src = go + oh * OW;
        double l0 = r->l0, l1 = r->l1;
        for (int64_t ow = 0; ow < OW; ow++) a[ow] += l0 * src[ow];
        for (int64_t ow = 0; ow < OW; ow++) b[ow] += l1 * src[ow];
    }
    for (int64_t ih = 0; ih < j->IH; ih++) {
        const double *src = tmp + ih * OW;
        double *dst = gi + ih * IW;
        for (int64_t ow = 0; ow < OW; ow++) {
            const vt_upsample_src *c = &j->cols[ow];
            dst[c->i0] += c->l0 * src[ow];
            dst[c->i1] += c->l1 * src[ow];
        }
    }
}

/* ---------------------------------------------------------------- driver */

static void planes_fn(void *vctx, int64_t b, int64_t e) {
    plane_job *j = vctx;
    int64_t in_n = j->IH * j->IW, out_n = j->OH * j->OW, tmp_n = j->IH * j->OW;
    double *buf = malloc((size_t)(in_n + out_n + tmp_n + 1) * sizeof(double));
    if (!buf) {
        int expect = 0;
        atomic_compare_exchange_strong(&j->failed, &expect, 1);
        return;
    }
    double *inp = buf, *outp = buf + in_n, *tmp = outp + out_n;
    for (int64_t plane = b; plane < e; plane++) {
        if (!j->backward) {
            load_plane(&j->fin, plane, j->C, inp);
            switch (j->kind) {
            case VT_POOL_MAX: max_plane(j, inp, outp, plane); break;
            case VT_POOL_AVG: avg_plane(j, inp, outp); break;
            case VT_POOL_ADAPTIVE_AVG: adaptive_plane(j, inp, outp, plane, 0); break;
            case VT_POOL_ADAPTIVE_MAX: adaptive_plane(j, inp, outp, plane, 1); break;
            case VT_POOL_UPSAMPLE: upsample_plane(j, inp, outp, tmp); break;
            }
            store_plane(&j->fout, plane, j->C, outp);
        } else {
            load_plane(&j->fout, plane, j->C, outp);
            memset(inp, 0, (size_t)in_n * sizeof(double));
            switch (j->kind) {
            case VT_POOL_MAX:
            case VT_POOL_ADAPTIVE_MAX: max_backward_plane(j, outp, inp, plane); break;
            case VT_POOL_AVG:
            case VT_POOL_ADAPTIVE_AVG: avg_backward_plane(j, outp, inp); break;
            case VT_POOL_UPSAMPLE: upsample_backward_plane(j, outp, inp, tmp); break;
            }
            store_plane(&j->fin, plane, j->C, inp);
        }
    }
    free(buf);
}

static vt_status run_job(plane_job *j, const char *what) {
    j->C = j->fin.sizes[1];
    j->IH = j->fin.sizes[2];
    j->IW = j->fin.sizes[3];
    j->OH = j->fout.sizes[2];
    j->OW = j->fout.sizes[3];
    int64_t planes = j->fin.sizes[0] * j->C;
    if (planes == 0) return VT_OK;
    if (!j->backward && j->OH * j->OW == 0) return VT_OK;
    if (j->backward && j->IH * j->IW == 0) return VT_OK;
    if (j->kind == VT_POOL_UPSAMPLE) {
        int f64 = j->fin.dtype == VT_F64;
        j->rows = malloc((size_t)(j->OH + j->OW) * sizeof *j->rows);
        if (!j->rows) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
        j->cols = j->rows + j->OH;
        for (int64_t o = 0; o < j->OH; o++)
            j->rows[o] = vt_upsample_source(j->mode, o, j->IH, j->OH, j->align_corners, j->sh, f64);
        for (int64_t o = 0; o < j->OW; o++)
            j->cols[o] = vt_upsample_source(j->mode, o, j->IW, j->OW, j->align_corners, j->sw, f64);
    }
    atomic_init(&j->failed, 0);
    atomic_init(&j->bad_index, 0);
    int64_t per_plane = j->IH * j->IW + j->OH * j->OW + 1;
    int64_t grain = VT_ELEMENTWISE_GRAIN / 2 / per_plane;
    vt_parallel_for(planes, grain < 1 ? 1 : grain, planes_fn, j);
    free(j->rows);
    int f = atomic_load(&j->failed);
    if (f == 1) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: out of host memory for plane scratch", what);
    if (f == 2)
        return vt_set_error(VT_ERR_INDEX, "%s: index %lld is out of bounds for an input plane of %lld elements", what,
                            (long long)atomic_load(&j->bad_index), (long long)(j->IH * j->IW));
    return VT_OK;
}

static void job_init(plane_job *j, vt_pool_kind kind, int backward, const vt_tensor *fout, const vt_tensor *idx,
                     const vt_tensor *fin) {
    memset(j, 0, sizeof *j);
    j->kind = kind;
    j->backward = backward;
    j->fout = *fout;
    j->fin = *fin;
    if (idx) {
        j->idx = *idx;
        j->has_idx = 1;
    }
}

vt_status vt_max_pool2d(const vt_tensor *out, const vt_tensor *indices, const vt_tensor *in,
                        const vt_pool2d_params *p) {
    vt_status s = vt_pool_check(VT_POOL_MAX, out, indices, in, p, "max_pool2d");
    if (s) return s;
    plane_job j;
    job_init(&j, VT_POOL_MAX, 0, out, indices, in);
    j.p = *p;
    return run_job(&j, "max_pool2d");
}

static vt_status index_backward_check(const vt_tensor *grad_in, const vt_tensor *grad_out, const vt_tensor *indices,
                                      const char *what) {
    if (!indices) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: indices are NULL", what);
    return vt_pool_check(VT_POOL_ADAPTIVE_MAX, grad_out, indices, grad_in, NULL, what);
}

vt_status vt_max_pool2d_backward(const vt_tensor *grad_in, const vt_tensor *grad_out, const vt_tensor *indices) {
    vt_status s = index_backward_check(grad_in, grad_out, indices, "max_pool2d_backward");
    if (s) return s;
    plane_job j;
    job_init(&j, VT_POOL_MAX, 1, grad_out, indices, grad_in);
    return run_job(&j, "max_pool2d_backward");
}

vt_status vt_avg_pool2d(const vt_tensor *out, const vt_tensor *in, const vt_pool2d_params *p) {
    vt_status s = vt_pool_check(VT_POOL_AVG, out, NULL, in, p, "avg_pool2d");
    if (s) return s;
    plane_job j;
    job_init(&j, VT_POOL_AVG, 0, out, NULL, in);
    j.p = *p;
    return run_job(&j, "avg_pool2d");
}

vt_status vt_avg_pool2d_backward(const vt_tensor *grad_in, const vt_tensor *grad_out, const vt_pool2d_params *p) {
    vt_status s = vt_pool_check(VT_POOL_AVG, grad_out, NULL, grad_in, p, "avg_pool2d_backward");
    if (s) return s;
    plane_job j;
    job_init(&j, VT_POOL_AVG, 1, grad_out, NULL, grad_in);
    j.p = *p;
    return run_job(&j, "avg_pool2d_backward");
}

vt_status vt_adaptive_avg_pool2d(const vt_tensor *out, const vt_tensor *in) {
    vt_status s = vt_pool_check(VT_POOL_ADAPTIVE_AVG, out, NULL, in, NULL, "adaptive_avg_pool2d");
    if (s) return s;
    plane_job j;
    job_init(&j, VT_POOL_ADAPTIVE_AVG, 0, out, NULL, in);
    return run_job(&j, "adaptive_avg_pool2d");
}

vt_status vt_adaptive_avg_pool2d_backward(const vt_tensor *grad_in, const vt_tensor *grad_out) {
    vt_status s = vt_pool_check(VT_POOL_ADAPTIVE_AVG, grad_out, NULL, grad_in, NULL, "adaptive_avg_pool2d_backward");
    if (s) return s;
    plane_job j;
    job_init(&j, VT_POOL_ADAPTIVE_AVG, 1, grad_out, NULL, grad_in);
    return run_job(&j, "adaptive_avg_pool2d_backward");
}

vt_status vt_adaptive_max_pool2d(const vt_tensor *out, const vt_tensor *indices, const vt_tensor *in) {
    vt_status s = vt_pool_check(VT_POOL_ADAPTIVE_MAX, out, indices, in, NULL, "adaptive_max_pool2d");
    if (s) return s;
    plane_job j;
    job_init(&j, VT_POOL_ADAPTIVE_MAX, 0, out, indices, in);
    return run_job(&j, "adaptive_max_pool2d");
}

vt_status vt_upsample2d(vt_upsample_mode mode, const vt_tensor *out, const vt_tensor *in, int align_corners,
                        double scale_h, double scale_w) {
    vt_status s = vt_pool_check(VT_POOL_UPSAMPLE, out, NULL, in, NULL, "upsample2d");
    if (s) return s;
    plane_job j;
    job_init(&j, VT_POOL_UPSAMPLE, 0, out, NULL, in);
    j.mode = mode;
    j.align_corners = align_corners;
    j.sh = scale_h;
    j.sw = scale_w;
    return run_job(&j, "upsample2d");
}

vt_status vt_upsample2d_backward(vt_upsample_mode mode, const vt_tensor *grad_in, const vt_tensor *grad_out,
                                 int align_corners, double scale_h, double scale_w) {
    vt_status s = vt_pool_check(VT_POOL_UPSAMPLE, grad_out, NULL, grad_in, NULL, "upsample2d_backward");
    if (s) return s;
    plane_job j;
    job_init(&j, VT_POOL_UPSAMPLE, 1, grad_out, NULL, grad_in);
    j.mode = mode;
    j.align_corners = align_corners;
    j.sh = scale_h;
    j.sw = scale_w;
    return run_job(&j, "upsample2d_backward");
}
