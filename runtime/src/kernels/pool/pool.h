/* kernels/pool/pool.h — private to the pooling / upsampling family: the argument
 * checks the queued ops run at the call, and the geometry the kernels and the
 * scalar reference share (window bounds, PyTorch's source-index formulas). */
#ifndef VTPU_KERNELS_POOL_H
#define VTPU_KERNELS_POOL_H

#include "internal.h"

typedef enum vt_pool_kind {
    VT_POOL_MAX = 0,
    VT_POOL_AVG,
    VT_POOL_ADAPTIVE_AVG,
    VT_POOL_ADAPTIVE_MAX,
    VT_POOL_UPSAMPLE,
} vt_pool_kind;

/* Checks shared by kernels, references and queued ops. `out` is the pooled
 * (small) side, `in` the image side; for backward ops pass grad_out as out
 * and grad_in as in. indices may be NULL. */
vt_status vt_pool_check(vt_pool_kind kind, const vt_tensor *out, const vt_tensor *indices, const vt_tensor *in,
                        const vt_pool2d_params *p, const char *what);

/* Adaptive window of output cell o: [start, end). */
static inline int64_t vt_adaptive_start(int64_t o, int64_t in, int64_t out) { return (o * in) / out; }
static inline int64_t vt_adaptive_end(int64_t o, int64_t in, int64_t out) { return ((o + 1) * in + out - 1) / out; }

/* Source of output index o along one axis (PyTorch's float formulas):
 * nearest modes give i0 only; bilinear gives i0, i1 and weights l0, l1,
 * computed in double when f64 (PyTorch's opmath for double). */
typedef struct vt_upsample_src {
    int64_t i0, i1;
    double l0, l1; /* float-valued unless f64 */
} vt_upsample_src;
vt_upsample_src vt_upsample_source(vt_upsample_mode mode, int64_t o, int64_t in, int64_t out, int align_corners,
                                   double scale, int f64);

/* The family's node kind (VT_NODE_POOL, pool_node.c). */
typedef struct vt_node vt_node;
vt_status vt_pool_node_check(const vt_node *n);
vt_status vt_pool_node_run(const vt_node *n);
vt_status vt_pool_node_ref(const vt_node *n);

#endif
