/* pool_ref.c — scalar references for pooling and upsampling: one output
 * element at a time, read and written through the strided descriptors,
 * straight from PyTorch's formulas (bilinear in the textbook 4-term form). */
#include "pool.h"

static char *elem(const vt_tensor *t, int64_t n, int64_t c, int64_t h, int64_t w) {
    int64_t k = t->offset + n * t->strides[0] + c * t->strides[1] + h * t->strides[2] + w * t->strides[3];
    return (char *)t->data + k * (int64_t)vt_dtype_size(t->dtype);
}
static double ld(const vt_tensor *t, int64_t n, int64_t c, int64_t h, int64_t w) {
    double v;
    vt_convert(t->dtype, elem(t, n, c, h, w), 1, VT_F64, &v, 1, 1);
    return v;
}
static void st(const vt_tensor *t, int64_t n, int64_t c, int64_t h, int64_t w, double v) {
    vt_convert(VT_F64, &v, 1, t->dtype, elem(t, n, c, h, w), 1, 1);
}

vt_status vt_ref_max_pool2d(const vt_tensor *out, const vt_tensor *indices, const vt_tensor *in,
                            const vt_pool2d_params *p) {
    vt_status s = vt_pool_check(VT_POOL_MAX, out, indices, in, p, "max_pool2d");
    if (s) return s;
    int64_t IH = in->sizes[2], IW = in->sizes[3];
    for (int64_t n = 0; n < out->sizes[0]; n++)
        for (int64_t c = 0; c < out->sizes[1]; c++)
            for (int64_t oh = 0; oh < out->sizes[2]; oh++)
                for (int64_t ow = 0; ow < out->sizes[3]; ow++) {
                    double m = -INFINITY;
                    int64_t best = -1;
                    for (int64_t kh = 0; kh < p->kernel[0]; kh++)
                        for (int64_t kw = 0; kw < p->kernel[1]; kw++) {
                            int64_t h = oh * p->stride[0] - p->padding[0] + kh * p->dilation[0];
                            int64_t w = ow * p->stride[1] - p->padding[1] + kw * p->dilation[1];
                            if (h < 0 || h >= IH || w < 0 || w >= IW) continue;
                            double v = ld(in, n, c, h, w);
                            if (best < 0 || v > m || isnan(v)) {
                                m = v;
                                best = h * IW + w;
                            }
                        }
                    st(out, n, c, oh, ow, m);
                    if (indices) *(int64_t *)elem(indices, n, c, oh, ow) = best;
                }
    return VT_OK;
}

vt_status vt_ref_avg_pool2d(const vt_tensor *out, const vt_tensor *in, const vt_pool2d_params *p) {
    vt_status s = vt_pool_check(VT_POOL_AVG, out, NULL, in, p, "avg_pool2d");
    if (s) return s;
    int64_t IH = in->sizes[2], IW = in->sizes[3];
    for (int64_t n = 0; n < out->sizes[0]; n++)
        for (int64_t c = 0; c < out->sizes[1]; c++)
            for (int64_t oh = 0; oh < out->sizes[2]; oh++)
                for (int64_t ow = 0; ow < out->sizes[3]; ow++) {
                    double sum = 0;
                    int64_t inside = 0, padded = 0;
                    for (int64_t kh = 0; kh < p->kernel[0]; kh++)
                        for (int64_t kw = 0; kw < p->kernel[1]; kw++) {
                            int64_t h = oh * p->stride[0] - p->padding[0] + kh;
                            int64_t w = ow * p->stride[1] - p->padding[1] + kw;
                            /* the padded window stops at the padding's far edge */
                            if (h < IH + p->padding[0] && w < IW + p->padding[1]) padded++;
                            if (h < 0 || h >= IH || w < 0 || w >= IW) continue;
                            sum += ld(in, n, c, h, w);
                            inside++;
                        }
                    double div = p->divisor_override ? (double)p->divisor_override
                                 : p->count_include_pad ? (double)padded : (double)inside;
                    st(out, n, c, oh, ow, inside ? sum / div : 0.0);
                }
    return VT_OK;
}

static vt_status adaptive_ref(const vt_tensor *out, const vt_tensor *indices, const vt_tensor *in, int is_max) {
    vt_status s = vt_pool_check(is_max ? VT_POOL_ADAPTIVE_MAX : VT_POOL_ADAPTIVE_AVG, out, indices, in, NULL,
                                is_max ? "adaptive_max_pool2d" : "adaptive_avg_pool2d");
    if (s) return s;
    int64_t IH = in->sizes[2], IW = in->sizes[3], OH = out->sizes[2], OW = out->sizes[3];
    for (int64_t n = 0; n < out->sizes[0]; n++)
        for (int64_t c = 0; c < out->sizes[1]; c++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    int64_t h0 = (int64_t)floor((double)oh * IH / OH), h1 = (int64_t)ceil((double)(oh + 1) * IH / OH);
                    int64_t w0 = (int64_t)floor((double)ow * IW / OW), w1 = (int64_t)ceil((double)(ow + 1) * IW / OW);
                    double acc = is_max ? -INFINITY : 0.0;
                    int64_t best = -1;
                    for (int64_t h = h0; h < h1; h++)
                        for (int64_t w = w0; w < w1; w++) {
                            double v = ld(in, n, c, h, w);
                            if (!is_max)
                                acc += v;
                            else if (best < 0 || v > acc || isnan(v)) {
                                acc = v;
                                best = h * IW + w;
                            }
                        }
                    st(out, n, c, oh, ow, is_max ? acc : acc / (double)((h1 - h0) * (w1 - w0)));
                    if (indices) *(int64_t *)elem(indices, n, c, oh, ow) = best;
                }
    return VT_OK;
}

vt_status vt_ref_adaptive_avg_pool2d(const vt_tensor *out, const vt_tensor *in) { return adaptive_ref(out, NULL, in, 0); }
vt_status vt_ref_adaptive_max_pool2d(const vt_tensor *out, const vt_tensor *indices, const vt_tensor *in) {
    return adaptive_ref(out, indices, in, 1);
}

vt_status vt_ref_upsample2d(vt_upsample_mode mode, const vt_tensor *out, const vt_tensor *in, int align_corners,
                            double scale_h, double scale_w) {
    vt_status s = vt_pool_check(VT_POOL_UPSAMPLE, out, NULL, in, NULL, "upsample2d");
    if (s) return s;
    int f64 = in->dtype == VT_F64;
    for (int64_t n = 0; n < out->sizes[0]; n++)
        for (int64_t c = 0; c < out->sizes[1]; c++)
            for (int64_t oh = 0; oh < out->sizes[2]; oh++) {
                vt_upsample_src r = vt_upsample_source(mode, oh, in->sizes[2], out->sizes[2], align_corners, scale_h, f64);
                for (int64_t ow = 0; ow < out->sizes[3]; ow++) {
                    vt_upsample_src q =
                        vt_upsample_source(mode, ow, in->sizes[3], out->sizes[3], align_corners, scale_w, f64);
                    double v = r.l0 * q.l0 * ld(in, n, c, r.i0, q.i0) + r.l0 * q.l1 * ld(in, n, c, r.i0, q.i1) +
                               r.l1 * q.l0 * ld(in, n, c, r.i1, q.i0) + r.l1 * q.l1 * ld(in, n, c, r.i1, q.i1);
                    if (mode != VT_UPSAMPLE_BILINEAR) v = ld(in, n, c, r.i0, q.i0);
                    st(out, n, c, oh, ow, v);
                }
            }
    return VT_OK;
}
