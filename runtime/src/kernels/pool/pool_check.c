/* pool_check.c — argument checks and shared geometry of the pooling and
 * upsampling family: output sizes as PyTorch's pooling_output_shape, and the
 * upsampling source indices and weights with PyTorch's float formulas. */
#include "pool.h"

static int64_t div_rtn(int64_t x, int64_t y) {
    int64_t q = x / y, r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) q--;
    return q;
}

int64_t vt_pool_output_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride, int64_t dilation, int ceil_mode) {
    if (stride <= 0) return 0;
    int64_t o = div_rtn(in + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0), stride) + 1;
    if (ceil_mode && (o - 1) * stride >= in + pad) o--;
    return o;
}

static vt_status check_4d(const vt_tensor *t, const char *what, const char *role) {
    vt_status s = vt_tensor_validate(t, what);
    if (s) return s;
    if (t->ndim != 4)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s must be 4-D [N, C, H, W], got %d dims", what, role,
                            (int)t->ndim);
    if (!vt_dtype_is_float(t->dtype))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s must be a floating tensor, got %s", what, role,
                            vt_dtype_name(t->dtype));
    return VT_OK;
}

vt_status vt_pool_check(vt_pool_kind kind, const vt_tensor *out, const vt_tensor *indices, const vt_tensor *in,
                        const vt_pool2d_params *p, const char *what) {
    vt_status s = check_4d(out, what, "output");
    if (!s) s = check_4d(in, what, "input");
    if (s) return s;
    if (out->dtype != in->dtype)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: input is %s but output is %s", what,
                            vt_dtype_name(in->dtype), vt_dtype_name(out->dtype));
    if (out->sizes[0] != in->sizes[0] || out->sizes[1] != in->sizes[1])
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: batch and channel sizes differ (input %lldx%lld, output %lldx%lld)",
                            what, (long long)in->sizes[0], (long long)in->sizes[1], (long long)out->sizes[0],
                            (long long)out->sizes[1]);
    if (indices) {
        if ((s = vt_tensor_validate(indices, what))) return s;
        if (indices->dtype != VT_I64 || indices->ndim != 4)
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: indices must be a 4-D int64 tensor", what);
        for (int d = 0; d < 4; d++)
            if (indices->sizes[d] != out->sizes[d])
                return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: indices and output shapes differ at dim %d", what, d);
    }
    int64_t planes = in->sizes[0] * in->sizes[1];
    int64_t ih = in->sizes[2], iw = in->sizes[3], oh = out->sizes[2], ow = out->sizes[3];
    if (kind == VT_POOL_MAX || kind == VT_POOL_AVG) {
        if (!p) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: pooling parameters are NULL", what);
        for (int d = 0; d < 2; d++) {
            int64_t dil = kind == VT_POOL_MAX ? p->dilation[d] : 1;
            if (p->kernel[d] <= 0 || p->stride[d] <= 0 || dil <= 0 || p->padding[d] < 0 ||
                p->padding[d] > ((p->kernel[d] - 1) * dil + 1) / 2)
                return vt_set_error(VT_ERR_INVALID_ARGUMENT,
                                    "%s: bad pooling parameters (kernel %lld, stride %lld, padding %lld, dilation %lld)",
                                    what, (long long)p->kernel[d], (long long)p->stride[d], (long long)p->padding[d],
                                    (long long)dil);
            int64_t want = vt_pool_output_size(in->sizes[2 + d], p->kernel[d], p->padding[d], p->stride[d], dil,
                                               p->ceil_mode);
            if (out->sizes[2 + d] != want)
                return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: output size %lld at dim %d, expected %lld", what,
                                    (long long)out->sizes[2 + d], 2 + d, (long long)want);
        }
        if (planes > 0 && ih * iw > 0 && oh * ow <= 0)
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: output size is too small", what);
    }
    if ((kind == VT_POOL_ADAPTIVE_AVG || kind == VT_POOL_ADAPTIVE_MAX || kind == VT_POOL_UPSAMPLE) && planes > 0 &&
        oh * ow > 0 && ih * iw == 0)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: empty input plane (%lldx%lld) for a non-empty output",
                            what, (long long)ih, (long long)iw);
    return VT_OK;
}

static float scales_value_f(double scale, int64_t in, int64_t out) {
    return scale > 0.0 ? (float)(1.0 / scale) : (float)in / (float)out;
}

vt_upsample_src vt_upsample_source(vt_upsample_mode mode, int64_t o, int64_t in, int64_t out, int align_corners,
                                   double scale, int f64) {
    vt_upsample_src r = {0, 0, 1.0, 0.0};
    if (mode == VT_UPSAMPLE_NEAREST) {
        if (out == in)
            r.i0 = o;
        else if (out == 2 * in)
            r.i0 = o >> 1;
        else {
            int64_t i = (int64_t)floorf((float)o * scales_value_f(scale, in, out));
            r.i0 = i < in - 1 ? i : in - 1;
        }
        r.i1 = r.i0;
        return r;
    }
    if (mode == VT_UPSAMPLE_NEAREST_EXACT) {
        int64_t i = (int64_t)floorf((float)(((double)o + 0.5) * (double)scales_value_f(scale, in, out)));
        r.i0 = r.i1 = i < in - 1 ? i : in - 1;
        return r;
    }
    if (out == in) {
        r.i0 = r.i1 = o;
        return r;
    }
    if (f64) { /* PyTorch's opmath for double is double */
        double ratio = align_corners ? (out > 1 ? (double)(in - 1) / (double)(out - 1) : 0.0)
                                     : (scale > 0.0 ? 1.0 / scale : (double)in / (double)out);
        double real = align_corners ? ratio * (double)o : ratio * ((double)o + 0.5) - 0.5;
        if (!align_corners && real < 0.0) real = 0.0;
        int64_t i0 = (int64_t)floorf((float)real);
        if (i0 > in - 1) i0 = in - 1;
        double l1 = real - (double)i0;
        l1 = l1 < 0.0 ? 0.0 : (l1 > 1.0 ? 1.0 : l1);
        r.i0 = i0;
        r.i1 = i0 + (i0 < in - 1 ? 1 : 0);
        r.l1 = l1;
        r.l0 = 1.0 - l1;
        return r;
    }
    float ratio = align_corners ? (out > 1 ? (float)(in - 1) / (float)(out - 1) : 0.0f) : scales_value_f(scale, in, out);
    float real = align_corners ? ratio * (float)o : ratio * ((float)o + 0.5f) - 0.5f;
    if (!align_corners && real < 0.0f) real = 0.0f;
    int64_t i0 = (int64_t)floorf(real);
    if (i0 > in - 1) i0 = in - 1;
    float l1 = real - (float)i0;
    l1 = l1 < 0.0f ? 0.0f : (l1 > 1.0f ? 1.0f : l1);
    r.i0 = i0;
    r.i1 = i0 + (i0 < in - 1 ? 1 : 0);
    r.l1 = l1;
    r.l0 = 1.0f - l1;
    return r;
}
