/* kernels/index/index.h — private to the indexing kernels: the first-bad-index
 * record shared by parallel workers, the argument checks the queued ops
 * reuse, and the "dim walk" engine every gather/scatter-like op runs on. */
#ifndef VTPU_KERNELS_INDEX_H
#define VTPU_KERNELS_INDEX_H

#include <pthread.h>

#include "internal.h"

/* Workers record the bad index with the smallest key (a position in the
 * kernel's fixed visiting order), so the message does not depend on threads. */
typedef struct ix_err {
    pthread_mutex_t mu;
    int64_t key, value, bound;
    int dim;
} ix_err;
void ix_err_init(ix_err *e);
void ix_err_note(ix_err *e, int64_t key, int64_t value, int64_t bound, int dim);
/* VT_OK, or ix_oob for the bad index recorded. */
vt_status ix_err_finish(ix_err *e, const char *op);
/* Index v out of range for a dimension of size n, reported as CPU PyTorch
 * reports it for op: gather and the scatter family raise RuntimeError
 * (VT_ERR_KERNEL), the others IndexError (VT_ERR_INDEX); take counts
 * elements. The queued op prefixes the op's name. */
vt_status ix_oob(const char *op, int64_t v, int dim, int64_t n);
/* index_put's error for values that do not broadcast to the indexing result
 * (rnd dims rsz); broadcast_status itself when values is no valid shape. */
vt_status ix_values_mismatch(const vt_tensor *values, int rnd, const int64_t *rsz, vt_status broadcast_status);

/* Read element i (in elements) of an I32 / I64 tensor's memory. */
static inline int64_t ix_load(const void *base, int is64, int64_t i) {
    return is64 ? ((const int64_t *)base)[i] : (int64_t)((const int32_t *)base)[i];
}
/* The value of a scalar (or of a 0-d tensor) as bytes of dtype dt. */
void ix_value_bytes(vt_dtype dt, const vt_tensor *value_t, vt_scalar value, void *buf);
/* Element offset of logical (row-major) position lin in t. */
int64_t ix_offset_of(const vt_tensor *t, int64_t lin);

/* The dim walk: operand 0 is the destination, 1 the source, 2 the index.
 * The walked shape is the index's (dim `dim` of length L); the rest dims
 * are merged where all three operands allow. In gather mode the index
 * value moves operand 1 (times xs), otherwise operand 0. */
typedef struct ix_walk {
    int nr;
    int64_t size[VT_MAX_DIMS];
    int64_t st[3][VT_MAX_DIMS];
    int64_t L, ds[3], xs, bound;
    int wrap, gather, is64;
    char *base[3];
} ix_walk;

/* Build the walk from per-dim views of the three operands over `shape`
 * (ndim dims, dim `dim` walked with index values). stride arrays are in
 * elements; base pointers point at element 0 of each view. */
void ix_walk_init(ix_walk *w, int ndim, const int64_t *shape, int dim, char *const base[3],
                  const int64_t *const strides[3]);

typedef enum ix_mode {
    IX_COPY = 0, /* dst = src (gather, scatter assign, index_copy, value fills) */
    IX_SUM,      /* dst = dst + alpha * src */
    IX_PROD,
    IX_AMAX,
    IX_AMIN,
} ix_mode;

/* Run the walk. dt: element dtype of operands 0 and 1. conflicts: several
 * index values may hit one destination (scatter-like), so each rest
 * position keeps its whole dim loop on one thread, in order. alpha: for
 * IX_SUM (class value). op: name for the error message. */
vt_status ix_walk_run(const ix_walk *w, vt_dtype dt, ix_mode mode, vt_scalar alpha, int conflicts, const char *op,
                      int err_dim);

/* Argument checks (shapes, dtypes) of the kernels, used by the queued ops. */
vt_status ix_check_index_dtype(const vt_tensor *index, const char *op);
vt_status ix_check_select(const vt_tensor *out, const vt_tensor *in, int dim, const vt_tensor *index);
vt_status ix_check_gather(const vt_tensor *out, const vt_tensor *in, int dim, const vt_tensor *index);
vt_status ix_check_scatter(const vt_tensor *out, int dim, const vt_tensor *index, const vt_tensor *src,
                           const vt_tensor *value_t, vt_scatter_reduce op);
vt_status ix_check_index_update(const char *op, const vt_tensor *out, int dim, const vt_tensor *index,
                                const vt_tensor *src);
vt_status ix_check_same_shape(const char *op, const vt_tensor *a, const vt_tensor *b);
vt_status ix_check_mask(const char *op, const vt_tensor *mask);
/* Broadcast shape of a and b (VT_ERR_INVALID_ARGUMENT if none). */
vt_status ix_broadcast_shape(const vt_tensor *a, const vt_tensor *b, int32_t *ndim, int64_t *sizes);

/* The family's node kind (VT_NODE_INDEX, index_node.c). */
typedef struct vt_node vt_node;
vt_status vt_index_node_check(const vt_node *n);
vt_status vt_index_node_run(const vt_node *n);
vt_status vt_index_node_ref(const vt_node *n);
unsigned vt_index_node_use(const vt_node *n, int t, unsigned flags);

/* Number of elements of a chunk in the masked kernels' fixed chunking. */
#define IX_CHUNK 65536

#endif
