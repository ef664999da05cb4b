/* kernels/softmax/softmax.h — private to the softmax and loss kernels: the f32 line
 * microkernels that have per-ISA versions, their dispatch table, and the
 * argument checks the queued ops share with the kernels. */
#ifndef VTPU_KERNELS_SOFTMAX_H
#define VTPU_KERNELS_SOFTMAX_H

#include "internal.h"

/* Contiguous line of n values: y = softmax(x) (log: log_softmax); y may be x. */
typedef void (*vt_sm_row_fn)(const float *x, float *y, int64_t n, int log);
/* gi = gradient for one contiguous line (gi may be g). */
typedef void (*vt_sm_row_bwd_fn)(const float *g, const float *y, float *gi, int64_t n, int log);
/* w (<= 16) side-by-side lines of length C whose elements are contiguous
 * across lines: element c of line l at x[c * xs + l]. */
typedef void (*vt_sm_cols_fn)(const float *x, int64_t xs, float *y, int64_t ys, int64_t C, int64_t w, int log);
typedef void (*vt_sm_cols_bwd_fn)(const float *g, int64_t gs, const float *y, int64_t ys, float *gi, int64_t is,
                                  int64_t C, int64_t w, int log);

typedef struct vt_sm_table {
    vt_sm_row_fn row;
    vt_sm_row_bwd_fn row_bwd;
    vt_sm_cols_fn cols;
    vt_sm_cols_bwd_fn cols_bwd;
} vt_sm_table;

#define VT_SM_LANES 16 /* lines per cols call */

extern const vt_sm_table vt_sm_portable;
#if VT_X86
extern const vt_sm_table vt_sm_avx512;
extern const vt_sm_table vt_sm_avx2;
#endif

/* vt_softmax on arguments vt_softmax_check accepted (a checked node's),
 * reading in through src (NULL: from memory). */
vt_status vt_softmax_run(const vt_tensor *out, const vt_tensor *in, int dim, int log, const vt_source *src);
/* Whether a source can feed it: lines along a contiguous dim, each of at
 * least VT_SOURCE_RUN values, of a dense input with nonnegative strides. */
int vt_softmax_takes_source(const vt_tensor *out, const vt_tensor *in, int dim);

/* Checks shared by the kernels and the queued ops (fail at the op). */
vt_status vt_softmax_check(const vt_tensor *out, const vt_tensor *in, int dim, int *wrapped);
vt_status vt_softmax_backward_check(const vt_tensor *grad_in, const vt_tensor *grad_out, const vt_tensor *y, int dim,
                                    int *wrapped);
vt_status vt_nll_loss_check(const vt_tensor *out, const vt_tensor *total_weight, const vt_tensor *input,
                            const vt_tensor *target, const vt_tensor *weight, vt_loss_reduction reduction);
vt_status vt_nll_loss_backward_check(const vt_tensor *grad_input, const vt_tensor *grad_out, const vt_tensor *input,
                                     const vt_tensor *target, const vt_tensor *weight, vt_loss_reduction reduction,
                                     const vt_tensor *total_weight);
vt_status vt_pointwise_loss_check(vt_loss_kind kind, const vt_tensor *out, const vt_tensor *input,
                                  const vt_tensor *target, const vt_tensor *weight, const vt_tensor *pos_weight,
                                  vt_loss_reduction reduction, int backward);

/* Element offset (in elements, offset included) of logical index li of t. */
static inline int64_t vt_sm_offset(const vt_tensor *t, int64_t li) {
    int64_t off = t->offset;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->sizes[d] == 0) return t->offset;
        off += (li % t->sizes[d]) * t->strides[d];
        li /= t->sizes[d];
    }
    return off;
}
static inline double vt_sm_load(const vt_tensor *t, int64_t off) {
    double v;
    vt_convert(t->dtype, (const char *)t->data + off * (int64_t)vt_dtype_size(t->dtype), 1, VT_F64, &v, 1, 1);
    return v;
}
static inline void vt_sm_store(const vt_tensor *t, int64_t off, double v) {
    vt_convert(VT_F64, &v, 1, t->dtype, (char *)t->data + off * (int64_t)vt_dtype_size(t->dtype), 1, 1);
}
static inline int64_t vt_sm_load_index(const vt_tensor *t, int64_t off) {
    const char *p = (const char *)t->data + off * (int64_t)vt_dtype_size(t->dtype);
    if (t->dtype == VT_U8) return *(const uint8_t *)p;
    return *(const int64_t *)p;
}

#endif
