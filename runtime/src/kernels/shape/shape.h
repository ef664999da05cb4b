/* shape.h — private declarations of the data-movement family (kernels/shape*.c,
 * kernels/sort*.c): the kernels' argument checks, shared by the queued ops so
 * that bad shapes fail at the op, and small geometry helpers. */
#ifndef VTPU_KERNELS_SHAPE_H
#define VTPU_KERNELS_SHAPE_H

#include "internal.h"

vt_status vt_cat_check(const vt_tensor *out, int n, const vt_tensor *ins, int dim);
vt_status vt_flip_check(const vt_tensor *out, const vt_tensor *in, uint64_t dims_mask);
vt_status vt_roll_check(const vt_tensor *out, const vt_tensor *in, int ndims, const int *dims, const int64_t *shifts);
vt_status vt_tri_check(const vt_tensor *out, const vt_tensor *in);
vt_status vt_sort_check(const vt_tensor *values, const vt_tensor *indices, const vt_tensor *in, int dim, int *wdim);
vt_status vt_topk_check(const vt_tensor *values, const vt_tensor *indices, const vt_tensor *in, int dim, int64_t k,
                        int *wdim);
vt_status vt_range_check(const vt_tensor *out, const char *what);
vt_status vt_searchsorted_check(const vt_tensor *out, const vt_tensor *sorted, const vt_tensor *values);

/* The family's node kind (VT_NODE_SHAPE, shape_node.c). */
typedef struct vt_node vt_node;
vt_status vt_shape_node_check(const vt_node *n);
vt_status vt_shape_node_run(const vt_node *n);
vt_status vt_shape_node_ref(const vt_node *n);
unsigned vt_shape_node_use(const vt_node *n, int t, unsigned flags);

/* t with dim d narrowed to [start, start + len). */
static inline vt_tensor vt_shape_narrow(const vt_tensor *t, int d, int64_t start, int64_t len) {
    vt_tensor v = *t;
    v.offset += start * t->strides[d];
    v.sizes[d] = len;
    return v;
}

/* Sort keys: an unsigned integer per element whose order is PyTorch's
 * ascending sort order (NaNs equal and largest, -0.0 == 0.0). */
uint64_t vt_sort_key(vt_dtype dt, const void *p);
void vt_sort_keys(vt_dtype dt, const char *base, int64_t stride, int64_t n, int descending, uint64_t *keys);

#endif
