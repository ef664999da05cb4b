/* conv.h — private to the convolution family (kernels/conv/, ops_conv.c and
 * its tests): the checked geometry every conv entry point shares, the
 * im2col / col2im movers and the scalar reference. Not installed. */
#ifndef VTPU_KERNELS_CONV_H
#define VTPU_KERNELS_CONV_H

#include "internal.h"

/* A convolution of 1 to 3 spatial dims, padded to 3: the missing leading
 * spatial dims have size 1, stride 1, padding 0 and dilation 1, so every
 * loop below is written once, for 3 dims. */
typedef struct vt_conv_geom {
    int spatial;
    vt_dtype dtype;
    int64_t N, C, O, G, Cg, Og;
    int64_t in[3], k[3], out[3];
    int64_t stride[3], pad[3], dil[3];
    int64_t in_prod, k_prod, out_prod; /* elements per channel plane */
} vt_conv_geom;

/* Which entry point a check is for: it names the tensors in messages
 * ("input" / "grad_input" ...) and says which shapes are given. */
typedef enum vt_conv_kind { VT_CONV_FORWARD = 0, VT_CONV_BACKWARD_INPUT, VT_CONV_BACKWARD_WEIGHT } vt_conv_kind;

/* Validate one call and fill g. x is the input-shaped tensor (input or
 * grad_input), w the weight-shaped one, y the output-shaped one (out or
 * grad_out), bias only for the forward. PyTorch's messages where it has one. */
vt_status vt_conv_check(vt_conv_kind kind, const vt_tensor *x, const vt_tensor *w, const vt_tensor *y,
                        const vt_tensor *bias, const vt_conv_params *p, vt_precision prec, vt_conv_geom *g);

/* A tensor of shape [A, B, *spatial] seen as 5 dims [A, B, s0, s1, s2]
 * (inserted spatial dims have size 1, stride 0). */
vt_tensor vt_conv_view5(const vt_tensor *t, int spatial);

/* ---- helpers of the drivers (conv.c) */
/* Column bytes per chunk of images: big enough that small images batch
 * into one product with room for the pool, small enough to stay near the
 * caches. */
#define VT_CONV_COL_BYTES ((int64_t)16 << 20)
vt_tensor vt_conv_tensor(void *data, vt_dtype dt, int ndim, const int64_t *sizes, const int64_t *strides,
                         int64_t offset);
/* Contiguous row-major strides of a shape. */
void vt_conv_contiguous(int ndim, const int64_t *sizes, int64_t *strides);
/* 1 if dims [0, n) of (sizes, strides) step as one flat dim; *stride gets
 * its step (1 when every dim has size 1). */
int vt_conv_merge_dims(int n, const int64_t *sizes, const int64_t *strides, int64_t *stride);
/* Host scratch of elems of dt; NULL (and *s set) when it cannot be had. */
void *vt_conv_scratch(int64_t elems, vt_dtype dt, const char *fn, const char *what, vt_status *s);
/* The dtype columns are built in (what the MXU reads directly: the input's
 * for F32 and BF16, F32 for F16, F64) and the one sums are kept in. */
static inline vt_dtype vt_conv_col_dtype(vt_dtype dt) { return dt == VT_BF16 || dt == VT_F64 ? dt : VT_F32; }
static inline vt_dtype vt_conv_acc_dtype(vt_dtype dt) { return dt == VT_F64 ? VT_F64 : VT_F32; }
/* Half-precision operands are one bf16 pass whatever the caller asked for,
 * as vt_matmul does for BF16 and F16 tensors. */
static inline vt_precision vt_conv_product_precision(vt_dtype dt, vt_precision prec) {
    return dt == VT_F32 ? prec : VT_PRECISION_DEFAULT;
}
/* Images per chunk whose column matrix (C * k_prod x out_prod of dt) fits
 * VT_CONV_COL_BYTES, at least one. */
int64_t vt_conv_chunk_images(const vt_conv_geom *g, vt_dtype dt);

/* Whether a strided input gradient runs as one stride-1 convolution per
 * phase (conv.c): a stride, no dilation, at least 16 input channels. */
int vt_conv_input_grad_by_phases(const vt_conv_geom *g);

/* ---- channels innermost (conv_rows.c): when the input's channels are
 * contiguous (channels-last), the im2col matrix is built by rows, one per
 * output position, K ordered (group, tap, channel) so each tap is one run
 * of channels, and the products' rows are output positions: the
 * channels-last output is the MXU's own. */
/* kind: which pass asks (the input gradient takes fewer cases). */
int vt_conv_rows_takes(const vt_conv_geom *g, const vt_tensor *x, vt_conv_kind kind);
vt_status vt_conv_rows_forward(const vt_conv_geom *g, const vt_tensor *out, const vt_tensor *input,
                               const vt_tensor *weight, const vt_tensor *bias, vt_precision prec);
vt_status vt_conv_rows_backward_input(const vt_conv_geom *g, const vt_tensor *grad_input, const vt_tensor *grad_out,
                                      const vt_tensor *weight, vt_precision prec);
vt_status vt_conv_rows_backward_weight(const vt_conv_geom *g, const vt_tensor *grad_weight,
                                       const vt_tensor *grad_out, const vt_tensor *input, vt_precision prec);

/* ---- the implicit GEMM (conv_amx.c: the forward; conv_grad_amx.c: the
 * gradients): A tiles load straight from a zero-padded bf16 copy of the
 * input (channels innermost), for groups 1, at least 16 channels (fewer:
 * merged taps, phase planes), at DEFAULT (F32) or in BF16 / F16, whatever
 * the tensors' layouts. Taken when the active MXU engine is AMX (tiles) or
 * AVX512-BF16 (VDPBF16PS blocks over the same buffers,
 * conv_igemm_avx512bf16.c). */
#if VT_X86
int vt_conv_amx_takes(const vt_conv_geom *g, vt_precision prec);
vt_status vt_conv_amx_forward(const vt_conv_geom *g, const vt_tensor *out, const vt_tensor *input,
                              const vt_tensor *weight, const vt_tensor *bias);
/* The weight gradient: stride 1 (K over the padded grid's positions), or
 * strided under 16 channels by phase planes. *declined: an input with inf
 * or NaN, which the caller's drivers take. */
int vt_conv_amx_wgrad_takes(const vt_conv_geom *g, vt_precision prec);
vt_status vt_conv_amx_backward_weight(const vt_conv_geom *g, const vt_tensor *grad_weight, const vt_tensor *grad_out,
                                      const vt_tensor *input, int *declined);
/* The input gradient of a strided convolution with fewer than 16 input
 * channels (an RGB stem) as one stride-1 convolution of grad_out whose
 * outputs are (phase, channel). *declined: a grad_out or weight with inf
 * or NaN, which the caller's drivers take. */
int vt_conv_amx_dgrad_takes(const vt_conv_geom *g, vt_precision prec);
vt_status vt_conv_amx_backward_input(const vt_conv_geom *g, const vt_tensor *grad_input, const vt_tensor *grad_out,
                                     const vt_tensor *weight, vt_precision prec, int *declined);
/* Tests: the padded input's bytes per chunk of images (0: the default). */
void vt_conv_amx_force_chunk_bytes(int64_t bytes);
/* Whether the blocks run on VDPBF16PS (conv_igemm_avx512bf16.c) rather
 * than AMX tiles: the active engine is AVX512-BF16. */
int vt_conv_igemm_dp(void);
/* The VDPBF16PS blocks. A forward tile: 16 positions (row r's first tap at
 * rows[r]) x 32 outputs (the weight panels w0, w1) into c[16][32], over
 * taps (row r's tap t at rows[r] + toff[t] * Cp, its tiles ncc * 512 on in
 * each panel) and ncc chunks of `pairs` k-pairs. A weight-gradient unit: 32
 * outputs (gy^T panels a0, a1) x 32 channels (chunk k's pairs at x[k])
 * over nk chunks into c0 (outputs 0-15) and c1, rows ldc floats apart,
 * added to what they hold when acc. */
void vt_conv_dp_forward_tile(const uint16_t *const rows[16], const int64_t *toff, int64_t Cp, int64_t taps,
                             int64_t ncc, int pairs, const uint16_t *w0, const uint16_t *w1, float *c);
void vt_conv_dp_wgrad_unit(const uint16_t *a0, const uint16_t *a1, const uint32_t *const *x, int64_t nk, float *c0,
                           float *c1, int64_t ldc, int acc);
#endif

/* ---- im2col rows / col2im (conv_im2col.c). Row (c, kk) of the im2col
 * matrix of images [n0, n0+nb): tap kk of channel c at every output
 * position, nb * out_prod values of ct at dst (image b's at b * out_prod);
 * padding reads give 0. The col2im buffer of nb images is [C * k_prod][ld]
 * in ct: row c * k_prod + kk holds, for image b, out_prod values at
 * b * out_prod. */
void vt_conv_im2col_row(const vt_conv_geom *g, const vt_tensor *x5, int64_t n0, int64_t nb, int64_t c, int64_t kk,
                        vt_dtype ct, void *dst);
/* x5[n0 .. n0+nb) = the sum of every column entry that reads it (the
 * adjoint of im2col), rounded once to x5's dtype; positions no window
 * reads become 0. */
void vt_conv_col2im(const vt_conv_geom *g, const vt_tensor *x5, int64_t n0, int64_t nb, vt_dtype ct,
                    const void *col, int64_t ld);

/* ---- depthwise convolution (conv_dw.c): groups == input channels ==
 * output channels, any spatial dims, stride, padding and dilation, for F32,
 * BF16 and F16. Channels go in blocks of VT_DW_LANES, each image's block laid
 * out as [positions][lanes] floats (the padded input window extent E, the
 * output, or the weights' taps), so the loops run over whole lane vectors
 * whatever the tensors' layout. Products have the MXU's numerics at the
 * caller's precision (bf16 parts, f32 sums, the low passes guarded). */
#define VT_DW_LANES 16
typedef struct vt_dw_geom {
    int64_t E[3];         /* padded input extent the windows read */
    int64_t out[3], stride[3];
    int64_t taps;         /* k_prod */
    int64_t k[3], dil[3]; /* the window (the input gradient at DEFAULT gathers by them) */
    int scatter;          /* the input gradient scatters at DEFAULT too (vt_conv_dw_force_scatter) */
    const int64_t *toff;  /* per tap: its offset from a window's first position, in floats */
    int nlow;             /* 0 DEFAULT, 2 HIGH, 5 HIGHEST: the low passes */
} vt_dw_geom;
/* A channels-last forward at DEFAULT read straight from the tensors: the
 * input x (F32 or BF16) at image 0, channel 0, its channels contiguous and
 * xs the element strides of image, s0, s1 and s2; w the weight's bf16 parts
 * laid out as the blocks' ([ncb][tap][lane]). */
typedef struct vt_dw_cl {
    const vt_conv_geom *g;
    const char *x;
    int x_bf16;
    int64_t xs[4], ncb;
    const float *w;
    /* y: the output itself (y_bf16: bf16, else f32; strides ys of n, z0,
     * z1, z2 in elements, channels at unit stride, a whole number of lane
     * blocks, no bias): cl_rows writes it, else its out buffer */
    char *y;
    int y_bf16;
    int64_t ys[4];
} vt_dw_cl;
/* Where a gathered input gradient goes: padded position (i0, i1, i2) with
 * lo[k] <= ik < hi[k] (the positions that are the input's) at p +
 * sum_k (ik - lo[k]) * st[k] elements, 16 contiguous lanes of f32, or of
 * bf16 rounded as vt_f32_to_bf16 (nearest even, NaN 0x7fc0): the
 * interior of the padded block, or the channels-last tensor itself. */
typedef struct vt_dw_dst {
    char *p;
    int bf16;
    int64_t lo[3], hi[3], st[3];
} vt_dw_dst;
/* A 3x3 weight gradient's operands read where they lie: channels-last x
 * and gy (F32 or BF16) at image n, channel c0 (16 whole channels), and
 * their element strides from one row to the next and one position to the
 * next (dims 3 and 4 of the 5-d view). */
typedef struct vt_dw_rows {
    const char *x, *gy;
    int x_bf16, gy_bf16;
    int64_t xs[2], gs[2];
} vt_dw_rows;
/* Floats of the stage of a vt_dw_cl band of `rows` output rows: one lane
 * block's input window (cl_rows stages one block at a time). */
static inline int64_t vt_dw_cl_stage_floats(const vt_dw_cl *c, int64_t rows) {
    const vt_conv_geom *g = c->g;
    return g->k[0] * ((rows - 1) * g->stride[1] + (g->k[1] - 1) * g->dil[1] + 1) *
           ((g->out[2] - 1) * g->stride[2] + (g->k[2] - 1) * g->dil[2] + 1) * VT_DW_LANES;
}
/* The compute loops (conv_dw_body.h), per ISA. x, w, gy: the parts' slots
 * (vt_mxu_slot_parts order). */
typedef struct vt_dw_kernels {
    void (*split)(const float *raw, int64_t n, int nlow, float *const slot[3]);
    /* split straight from n positions of 16 contiguous f32 / bf16 lanes */
    void (*load_split)(const void *src, int is_bf16, int64_t src_step, int64_t n, int nlow, float *const slot[3],
                       int64_t dst);
    /* n positions of 16 lanes out to 16 contiguous f32 / bf16 lanes each */
    void (*store)(const float *src, int64_t n, void *dst, int is_bf16, int64_t dst_step);
    /* n contiguous f32 to bf16 (vt_f32_to_bf16's rounding) */
    void (*narrow)(const float *src, int64_t n, uint16_t *dst);
    void (*forward)(const vt_dw_geom *d, const float *const x[3], const float *const w[3], float *y);
    /* one NCHW channel plane, positions along the lanes (stride 1 along
     * rows, or 2 over a plane whose rows are split into phases) */
    void (*plane_forward)(const vt_dw_geom *d, const float *const x[3], const float *const w[3], float *y);
    /* rows of n contiguous f32 / bf16 values (src_step elements apart),
     * the first of each at position q0: position q to row[(q & 1) * half +
     * (q >> 1)] of its row at dst (dst_step floats apart; a stride-2
     * plane's two phases; half 0: to row[q]), rounded as split rounds at
     * DEFAULT when round */
    void (*phases)(const void *src, int is_bf16, int64_t src_step, int64_t rows, int64_t n, int64_t q0, float *dst,
                   int64_t dst_step, int64_t half, int round);
    /* output rows [z1a, z1b) of (n, z0) of a vt_dw_cl forward, block by
     * block through stage (vt_dw_cl_stage_floats): into c->y when set, else
     * out[z1 - z1a][z2][ncb * lanes] */
    void (*cl_rows)(const vt_dw_cl *c, int64_t n, int64_t z0, int64_t z1a, int64_t z1b, float *stage, float *out);
    /* the input gradient of a lane block: at DEFAULT (nlow 0) gathered
     * into o (returns 1); otherwise (or a window the gather does not take)
     * added to hi and lo, zeroed by the caller (returns 0) */
    int (*backward_input)(const vt_dw_geom *d, const float *const gy[3], const float *const w[3], float *lo,
                          float *hi, const vt_dw_dst *o);
    void (*backward_weight)(const vt_dw_geom *d, const float *const gy[3], const float *const x[3], float *lo,
                            float *hi);
    /* the same 3x3 sums at DEFAULT (a 2-d window, k[0] = 1) over output
     * rows [z1a, z1b), straight from s: the rows through ring (2 * dil[1]
     * + 1 padded rows of E[2] positions of lanes), the same bits as
     * backward_weight over the blocks */
    void (*weight_rows)(const vt_conv_geom *g, const vt_dw_rows *s, int64_t z1a, int64_t z1b, float *ring,
                        float *hi);
    /* NCHW lane blocks, 16 x 16 at a time (NULL: no register transpose on
     * this ISA): 16 channel rows (row_bytes apart, 16 contiguous f32 or
     * bf16 positions each) in as 16 positions of 16 f32 lanes; and out,
     * rounded to bf16 as vt_f32_to_bf16 when is_bf16 */
    void (*lanes_in)(const void *src, int is_bf16, int64_t row_bytes, float *dst);
    void (*lanes_out)(const float *src, void *dst, int is_bf16, int64_t row_bytes);
} vt_dw_kernels;
extern const vt_dw_kernels vt_dw_kernels_portable;
#if VT_X86
extern const vt_dw_kernels vt_dw_kernels_avx2, vt_dw_kernels_avx512, vt_dw_kernels_avx512bf16;
#endif
/* Whether the depthwise kernels take this call (else the im2col path). */
int vt_conv_dw_takes(const vt_conv_geom *g);
vt_status vt_conv_dw_forward(const vt_conv_geom *g, const vt_tensor *out, const vt_tensor *input,
                             const vt_tensor *weight, const vt_tensor *bias, vt_precision prec);
/* Test hook: the depthwise input gradient scatters at DEFAULT as at
 * HIGH and HIGHEST (1), or gathers where it can (0, the default). */
void vt_conv_dw_force_scatter(int on);
vt_status vt_conv_dw_backward_input(const vt_conv_geom *g, const vt_tensor *grad_input, const vt_tensor *grad_out,
                                    const vt_tensor *weight, vt_precision prec);
vt_status vt_conv_dw_backward_weight(const vt_conv_geom *g, const vt_tensor *grad_weight, const vt_tensor *grad_out,
                                     const vt_tensor *input, vt_precision prec);

/* ---- scalar references (conv_ref.c): direct loops, no im2col, no
 * threads. Each output element is the sum in fp64 of the exact products of
 * the bf16 parts vt_matmul keeps at prec (low passes guarded, then hi*hi;
 * F64: plain products), rounded once to the output's dtype. */
vt_status vt_ref_conv_forward(const vt_tensor *out, const vt_tensor *input, const vt_tensor *weight,
                              const vt_tensor *bias, const vt_conv_params *p, vt_precision prec);
vt_status vt_ref_conv_backward_input(const vt_tensor *grad_input, const vt_tensor *grad_out,
                                     const vt_tensor *weight, const vt_conv_params *p, vt_precision prec);
vt_status vt_ref_conv_backward_weight(const vt_tensor *grad_weight, const vt_tensor *grad_out,
                                      const vt_tensor *input, const vt_conv_params *p, vt_precision prec);

#endif
