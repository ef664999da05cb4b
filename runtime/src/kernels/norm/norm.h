/* kernels/norm/norm.h — private to the normalisation family: the contiguous
 * microkernels every layer is built from (per ISA for f32, portable for
 * f64), the argument checks shared by kernels, references and queued ops,
 * and the ISA test aid. */
#ifndef VTPU_KERNELS_NORM_H
#define VTPU_KERNELS_NORM_H

#include "internal.h"

/* Microkernels on n contiguous values of T (float or double). Sums use 16
 * running lanes folded pairwise, so a chunk's result depends only on n.
 * Nullable vector operands (w, b, dw, db) count as absent (1, 0, skipped). */
#define NORM_UKERNELS(T)                                                                                      \
    struct {                                                                                                  \
        /* sum of x */                                                                                        \
        T (*sum)(const T *x, int64_t n);                                                                      \
        /* sum of (x - m)^2 */                                                                                \
        T (*sqdev)(const T *x, int64_t n, T m);                                                               \
        /* y = x * a + b */                                                                                   \
        void (*scale_shift)(T *y, const T *x, int64_t n, T a, T b);                                           \
        /* y = (x - m) * r * w[j] + b[j] */                                                                   \
        void (*affine)(T *y, const T *x, int64_t n, T m, T r, const T *w, const T *b);                        \
        /* *sg = sum of dy * w[j], *sgx = sum of dy * w[j] * (x - m) */                                       \
        void (*grad_sums)(const T *dy, const T *x, const T *w, int64_t n, T m, T *sg, T *sgx);                \
        /* dx = a * w[j] * dy + c2 * (x - m) + c3 */                                                          \
        void (*grad_in)(T *dx, const T *dy, const T *x, const T *w, int64_t n, T a, T m, T c2, T c3);        \
        /* dw[j] += dy * (x - m) * r, db[j] += dy */                                                          \
        void (*grad_params)(T *dw, T *db, const T *dy, const T *x, int64_t n, T m, T r);                      \
    }

typedef NORM_UKERNELS(float) vt_norm_f32_kernels;
typedef NORM_UKERNELS(double) vt_norm_f64_kernels;

extern const vt_norm_f32_kernels vt_norm_f32_portable;
extern const vt_norm_f64_kernels vt_norm_f64_portable;
#if VT_X86
extern const vt_norm_f32_kernels vt_norm_f32_avx512;
extern const vt_norm_f32_kernels vt_norm_f32_avx2;
#endif


/* Argument checks (shapes, dtypes, element counts), shared by the kernels,
 * the references and the queued ops. *rows / *cols receive M and N. */
vt_status vt_layer_norm_check(const char *op, const vt_tensor *in, const vt_tensor *out, const vt_tensor *mean,
                              const vt_tensor *rstd, const vt_tensor *weight, const vt_tensor *bias,
                              const vt_tensor *grad_in, int32_t norm_ndim, int64_t *rows, int64_t *cols);
/* in [N, C, *]: *n, *c, *hw. groups <= 0 for batch norm (per-channel
 * tensors have C elements), else per-(n, group) tensors have N * groups. */
vt_status vt_channel_norm_check(const char *op, const vt_tensor *in, const vt_tensor *out, const vt_tensor *grad_in,
                                int64_t groups, int64_t *n, int64_t *c, int64_t *hw);
/* Whether a source (vt_source) can feed the input of a layer or RMS norm
 * over its last norm_ndim dims: in is contiguous (row u's element j at
 * offset u * N + j) and a row holds at least VT_SOURCE_RUN values (and no
 * more than a thread stages). Each row is staged from the source once, then
 * read as the kernel reads memory: the result is the same bits. */
int vt_norm_rows_takes_source(const vt_tensor *in, int32_t norm_ndim);
/* vt_layer_norm (rms 0) or vt_rms_norm (rms 1, mean and bias unused),
 * reading in through src (NULL: from memory). */
vt_status vt_norm_rows_run(int rms, const vt_tensor *out, const vt_tensor *mean, const vt_tensor *rstd,
                           const vt_tensor *in, const vt_tensor *weight, const vt_tensor *bias, int32_t norm_ndim,
                           double eps, const vt_source *src);
/* t (nullable) must be a float tensor of `want` elements. */
vt_status vt_norm_check_vec(const char *op, const char *what, const vt_tensor *t, int64_t want);

#endif
