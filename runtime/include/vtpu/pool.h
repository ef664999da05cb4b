/* vtpu/pool.h — pooling (max, average, adaptive) and upsampling (nearest, bilinear).
 * Part of the public C API: included by vtpu/vtpu.h, never on its own.
 *
 * Every tensor is 4-D [N, C, H, W] with any strides (NCHW, channels-last or
 * views); the kernels work plane by plane (one (n, c) at a time), in double,
 * and round once when they store. Index tensors are int64, shaped like the
 * pooled output, and hold PyTorch's flat per-plane index h * W + w. Results
 * do not depend on the thread count. */
#ifndef VTPU_POOL_H
#define VTPU_POOL_H

typedef struct vt_pool2d_params {
    int64_t kernel[2]; /* {kH, kW} */
    int64_t stride[2];
    int64_t padding[2];
    int64_t dilation[2];   /* max pooling only; average pooling uses 1 */
    int32_t ceil_mode;
    int32_t count_include_pad; /* average pooling */
    int64_t divisor_override;  /* average pooling; 0 = none */
} vt_pool2d_params;

/* PyTorch's pooling_output_shape: the output extent of one spatial dim. */
int64_t vt_pool_output_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride, int64_t dilation, int ceil_mode);

/* out[n,c,oh,ow] = max over the (dilated, padded) window; indices (nullable)
 * the flat input index of the max. NaN wins (the last NaN of the window, as
 * PyTorch's CPU kernel). out's H, W must be the pooled sizes of p. */
vt_status vt_max_pool2d(const vt_tensor *out, const vt_tensor *indices, const vt_tensor *in,
                        const vt_pool2d_params *p);
/* grad_in = 0, then grad_in[n,c,indices[n,c,oh,ow]] += grad_out[n,c,oh,ow]:
 * the backward of max_pool2d and adaptive_max_pool2d. An index outside
 * [0, H*W) fails with VT_ERR_INDEX. */
vt_status vt_max_pool2d_backward(const vt_tensor *grad_in, const vt_tensor *grad_out, const vt_tensor *indices);
/* Average pooling (PyTorch's divisor rules: divisor_override, else the
 * padded window if count_include_pad, else the in-image part). */
vt_status vt_avg_pool2d(const vt_tensor *out, const vt_tensor *in, const vt_pool2d_params *p);
vt_status vt_avg_pool2d_backward(const vt_tensor *grad_in, const vt_tensor *grad_out, const vt_pool2d_params *p);
/* Adaptive pooling: output cell o covers [floor(o*I/O), ceil((o+1)*I/O)). */
vt_status vt_adaptive_avg_pool2d(const vt_tensor *out, const vt_tensor *in);
vt_status vt_adaptive_avg_pool2d_backward(const vt_tensor *grad_in, const vt_tensor *grad_out);
vt_status vt_adaptive_max_pool2d(const vt_tensor *out, const vt_tensor *indices, const vt_tensor *in);

typedef enum vt_upsample_mode {
    VT_UPSAMPLE_NEAREST = 0,   /* PyTorch's "nearest" (floor(o * scale)) */
    VT_UPSAMPLE_NEAREST_EXACT, /* "nearest-exact" (floor((o + 0.5) * scale)) */
    VT_UPSAMPLE_BILINEAR,
} vt_upsample_mode;

/* Upsampling from in's H, W to out's. scale_h / scale_w: the user's scale
 * factors (<= 0: none, the sizes' ratio is used), as PyTorch's
 * compute_scales_value; align_corners for bilinear. Source indices and
 * weights are computed in float exactly as PyTorch's CPU kernels do. */
vt_status vt_upsample2d(vt_upsample_mode mode, const vt_tensor *out, const vt_tensor *in, int align_corners,
                        double scale_h, double scale_w);
/* The adjoint: grad_in (zeroed first) accumulates grad_out through the same weights. */
vt_status vt_upsample2d_backward(vt_upsample_mode mode, const vt_tensor *grad_in, const vt_tensor *grad_out,
                                 int align_corners, double scale_h, double scale_w);

/* Scalar references: same contracts, element by element, no threads. */
vt_status vt_ref_max_pool2d(const vt_tensor *out, const vt_tensor *indices, const vt_tensor *in,
                            const vt_pool2d_params *p);
vt_status vt_ref_avg_pool2d(const vt_tensor *out, const vt_tensor *in, const vt_pool2d_params *p);
vt_status vt_ref_adaptive_avg_pool2d(const vt_tensor *out, const vt_tensor *in);
vt_status vt_ref_adaptive_max_pool2d(const vt_tensor *out, const vt_tensor *indices, const vt_tensor *in);
vt_status vt_ref_upsample2d(vt_upsample_mode mode, const vt_tensor *out, const vt_tensor *in, int align_corners,
                            double scale_h, double scale_w);

/* Queued: the shape checks run at the call, the kernel on dev's queue. */
vt_status vt_op_max_pool2d(int dev, const char *name, const vt_tensor *out, const vt_tensor *indices,
                           const vt_tensor *in, const vt_pool2d_params *p);
vt_status vt_op_max_pool2d_backward(int dev, const char *name, const vt_tensor *grad_in, const vt_tensor *grad_out,
                                    const vt_tensor *indices);
vt_status vt_op_avg_pool2d(int dev, const char *name, const vt_tensor *out, const vt_tensor *in,
                           const vt_pool2d_params *p);
vt_status vt_op_avg_pool2d_backward(int dev, const char *name, const vt_tensor *grad_in, const vt_tensor *grad_out,
                                    const vt_pool2d_params *p);
vt_status vt_op_adaptive_avg_pool2d(int dev, const char *name, const vt_tensor *out, const vt_tensor *in);
vt_status vt_op_adaptive_avg_pool2d_backward(int dev, const char *name, const vt_tensor *grad_in,
                                             const vt_tensor *grad_out);
vt_status vt_op_adaptive_max_pool2d(int dev, const char *name, const vt_tensor *out, const vt_tensor *indices,
                                    const vt_tensor *in);
vt_status vt_op_upsample2d(int dev, const char *name, vt_upsample_mode mode, const vt_tensor *out,
                           const vt_tensor *in, int align_corners, double scale_h, double scale_w);
vt_status vt_op_upsample2d_backward(int dev, const char *name, vt_upsample_mode mode, const vt_tensor *grad_in,
                                    const vt_tensor *grad_out, int align_corners, double scale_h, double scale_w);

#endif /* VTPU_POOL_H */
