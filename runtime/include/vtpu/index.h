/* vtpu/index.h — indexing and data movement: gather/scatter, index_select/put/add, embedding, masked ops, nonzero, cat, flip, roll, tril/triu, sort/topk, arange/linspace/eye.
 * Part of the public C API: included by vtpu/vtpu.h, never on its own. */
#ifndef VTPU_INDEX_H
#define VTPU_INDEX_H

/* ---- indexing (gather/scatter, index_*, advanced indexing, masks, nonzero)
 *
 * Common contract. Index tensors are VT_I64 or VT_I32 (any strides); masks
 * are VT_BOOL (VT_U8 accepted: nonzero is true). Values of every vt dtype
 * are moved bit for bit; reductions compute in the element's class (float
 * for F32/BF16/F16, double for F64, wrapping int64 for integers, logical for
 * bool) and round each stored result, in a fixed order per destination, so
 * results never depend on the thread count. An index outside its dimension
 * fails with VT_ERR_INDEX, "<op>(): index 12 is out of bounds for dimension
 * 0 with size 10" (the first bad one in the kernel's fixed visiting order);
 * nothing outside the tensors is read or written, but an in-place op may
 * have updated part of its destination by then. `wrap`-style negative
 * indices (PyTorch's index, index_fill, take) count from the end; the other
 * ops reject them as PyTorch does. Tensors given to one call must not
 * overlap in memory, except where "in place" is stated. */

/* How scatter combines a value into its destination. */
typedef enum vt_scatter_reduce {
    VT_SCATTER_ASSIGN = 0, /* last write (in visiting order along dim) wins */
    VT_SCATTER_SUM,
    VT_SCATTER_PROD,
    VT_SCATTER_MEAN, /* sum, then divide by the count (floor division for integers) */
    VT_SCATTER_AMAX, /* NaN propagates */
    VT_SCATTER_AMIN,
} vt_scatter_reduce;

/* out[..., i, ...] = in[..., index[i], ...] along dim (index: 0-d or 1-d;
 * out: in's shape with index.numel() at dim, in's dtype). 0 <= index < size. */
vt_status vt_index_select(const vt_tensor *out, const vt_tensor *in, int dim, const vt_tensor *index);

/* out = in.gather(dim, index): out[i][j] = in[index[i][j]][j] (dim 0).
 * index has in's ndim and sizes <= in's off dim; out has index's shape. */
vt_status vt_gather(const vt_tensor *out, const vt_tensor *in, int dim, const vt_tensor *index);

/* In place on out (which holds self): out[index[i][j]][j] op= src[i][j]
 * (dim 0). src NULL: the scalar value_t (a 0-d tensor, read when the kernel
 * runs) if given, else value. index has out's ndim, sizes <= out's off dim
 * and <= src's. include_self 0 first resets every indexed destination to
 * the op's identity (PyTorch's scatter_reduce include_self=False). Each
 * destination sees its contributions in increasing index position along dim. */
vt_status vt_scatter(const vt_tensor *out, int dim, const vt_tensor *index, const vt_tensor *src,
                     const vt_tensor *value_t, vt_scalar value, vt_scatter_reduce op, int include_self);

/* In place on out along dim with a 0-d/1-d index (PyTorch's index_add_,
 * index_copy_, index_fill_). index_add: out[..., index[i], ...] += alpha *
 * src[..., i, ...] in increasing i. index_copy: assignment (the last i
 * wins). index_fill: every selected slice takes value_t (0-d tensor, if
 * given) or value; negative indices wrap. */
vt_status vt_index_add(const vt_tensor *out, int dim, const vt_tensor *index, const vt_tensor *src, vt_scalar alpha);
vt_status vt_index_copy(const vt_tensor *out, int dim, const vt_tensor *index, const vt_tensor *src);
vt_status vt_index_fill(const vt_tensor *out, int dim, const vt_tensor *index, const vt_tensor *value_t,
                        vt_scalar value);

/* out[k] = in.flatten()[index[k]] (negative indices wrap); out has index's shape. */
vt_status vt_take(const vt_tensor *out, const vt_tensor *in, const vt_tensor *index);

/* Advanced indexing, PyTorch's x[i0, None-slice, i2, ...]: indices[d] is the
 * integer index tensor of dim d of in, or NULL for a full slice (n <= in's
 * ndim; missing trailing entries are slices). Bool masks are expanded to
 * integer indices (nonzero) by the caller. The index tensors broadcast to a
 * shape B; the result is in's dims before the first index, B, then the dims
 * after the last one when the indexed dims are adjacent, else B followed by
 * every unindexed dim. vt_index_shape computes it (the caller allocates out). */
vt_status vt_index_shape(const vt_tensor *in, int n, const vt_tensor *const *indices, int32_t *out_ndim,
                         int64_t *out_sizes);
/* out = in[indices] (out of vt_index_shape's shape, in's dtype). */
vt_status vt_index(const vt_tensor *out, const vt_tensor *in, int n, const vt_tensor *const *indices);
/* In place: out[indices] = values (accumulate 0) or += values (accumulate
 * 1, in increasing position of the index's broadcast shape). values
 * broadcast to vt_index_shape(out, ...). */
vt_status vt_index_put(const vt_tensor *out, int n, const vt_tensor *const *indices, const vt_tensor *values,
                       int accumulate);

/* count (0-d VT_I64) = number of nonzero elements of in (NaN is nonzero). */
vt_status vt_count_nonzero(const vt_tensor *count, const vt_tensor *in);
/* out [n, ndim(in)] VT_I64: coordinates of in's nonzero elements in
 * row-major order; n must equal their count (else VT_ERR_INVALID_ARGUMENT
 * and out is left partly written). */
vt_status vt_nonzero(const vt_tensor *out, const vt_tensor *in);
/* In place: out[mask] = value_t (0-d tensor, if given) or value; mask
 * broadcasts to out. */
vt_status vt_masked_fill(const vt_tensor *out, const vt_tensor *mask, const vt_tensor *value_t, vt_scalar value);
/* out (1-d, count elements) = in[mask], in and mask broadcast together,
 * row-major order; count must equal the number of true mask elements of the
 * broadcast shape. */
vt_status vt_masked_select(const vt_tensor *out, const vt_tensor *in, const vt_tensor *mask);
/* In place: the k-th true element of mask (broadcast to out, row-major)
 * takes source's k-th element (row-major). Fails with
 * VT_ERR_INVALID_ARGUMENT before writing if source has too few elements. */
vt_status vt_masked_scatter(const vt_tensor *out, const vt_tensor *mask, const vt_tensor *source);

/* grad_weight [num_weights, D] = sum over i of grad[i, :] into row
 * indices[i] (grad [N, D], indices [N]); rows never indexed are zero,
 * indices equal to padding_idx contribute nothing, and scale_grad_by_freq
 * scales each contribution by 1 / (occurrences of its index). Each row sums
 * its contributions in increasing i in the class type and rounds once. */
vt_status vt_embedding_dense_backward(const vt_tensor *grad_weight, const vt_tensor *grad, const vt_tensor *indices,
                                      int64_t padding_idx, int scale_grad_by_freq);

/* Scalar references (plain loops, one element at a time), same contracts. */
vt_status vt_ref_index_select(const vt_tensor *out, const vt_tensor *in, int dim, const vt_tensor *index);
vt_status vt_ref_gather(const vt_tensor *out, const vt_tensor *in, int dim, const vt_tensor *index);
vt_status vt_ref_scatter(const vt_tensor *out, int dim, const vt_tensor *index, const vt_tensor *src,
                         const vt_tensor *value_t, vt_scalar value, vt_scatter_reduce op, int include_self);
vt_status vt_ref_index_add(const vt_tensor *out, int dim, const vt_tensor *index, const vt_tensor *src,
                           vt_scalar alpha);
vt_status vt_ref_take(const vt_tensor *out, const vt_tensor *in, const vt_tensor *index);
vt_status vt_ref_index(const vt_tensor *out, const vt_tensor *in, int n, const vt_tensor *const *indices);
vt_status vt_ref_index_put(const vt_tensor *out, int n, const vt_tensor *const *indices, const vt_tensor *values,
                           int accumulate);
vt_status vt_ref_nonzero(const vt_tensor *out, const vt_tensor *in);
vt_status vt_ref_masked_select(const vt_tensor *out, const vt_tensor *in, const vt_tensor *mask);
vt_status vt_ref_masked_scatter(const vt_tensor *out, const vt_tensor *mask, const vt_tensor *source);
vt_status vt_ref_embedding_dense_backward(const vt_tensor *grad_weight, const vt_tensor *grad,
                                          const vt_tensor *indices, int64_t padding_idx, int scale_grad_by_freq);

/* Queued wrappers: argument checks on the calling thread, then the kernel on
 * dev's queue. Index-value errors surface when the kernel runs (at the next
 * synchronisation in Strict mode, at the op in Debug mode). Index tensors
 * must be device tensors (the pointer array of vt_op_index* is copied). */
vt_status vt_op_index_select(int dev, const char *name, const vt_tensor *out, const vt_tensor *in, int dim,
                             const vt_tensor *index);
vt_status vt_op_gather(int dev, const char *name, const vt_tensor *out, const vt_tensor *in, int dim,
                       const vt_tensor *index);
vt_status vt_op_scatter(int dev, const char *name, const vt_tensor *out, int dim, const vt_tensor *index,
                        const vt_tensor *src, const vt_tensor *value_t, vt_scalar value, vt_scatter_reduce op,
                        int include_self);
vt_status vt_op_index_add(int dev, const char *name, const vt_tensor *out, int dim, const vt_tensor *index,
                          const vt_tensor *src, vt_scalar alpha);
vt_status vt_op_index_copy(int dev, const char *name, const vt_tensor *out, int dim, const vt_tensor *index,
                           const vt_tensor *src);
vt_status vt_op_index_fill(int dev, const char *name, const vt_tensor *out, int dim, const vt_tensor *index,
                           const vt_tensor *value_t, vt_scalar value);
vt_status vt_op_take(int dev, const char *name, const vt_tensor *out, const vt_tensor *in, const vt_tensor *index);
vt_status vt_op_index(int dev, const char *name, const vt_tensor *out, const vt_tensor *in, int n,
                      const vt_tensor *const *indices);
vt_status vt_op_index_put(int dev, const char *name, const vt_tensor *out, int n, const vt_tensor *const *indices,
                          const vt_tensor *values, int accumulate);
vt_status vt_op_count_nonzero(int dev, const char *name, const vt_tensor *count, const vt_tensor *in);
vt_status vt_op_nonzero(int dev, const char *name, const vt_tensor *out, const vt_tensor *in);
vt_status vt_op_masked_fill(int dev, const char *name, const vt_tensor *out, const vt_tensor *mask,
                            const vt_tensor *value_t, vt_scalar value);
vt_status vt_op_masked_select(int dev, const char *name, const vt_tensor *out, const vt_tensor *in,
                              const vt_tensor *mask);
vt_status vt_op_masked_scatter(int dev, const char *name, const vt_tensor *out, const vt_tensor *mask,
                               const vt_tensor *source);
vt_status vt_op_embedding_dense_backward(int dev, const char *name, const vt_tensor *grad_weight,
                                         const vt_tensor *grad, const vt_tensor *indices, int64_t padding_idx,
                                         int scale_grad_by_freq);

/* ---- data movement (cat, flip, roll, tril/triu, sort, arange...) */

/* out = ins[0..n) concatenated along dim (0 <= dim < out->ndim): every
 * input has out's ndim and out's sizes except at dim, where the sizes add up
 * to out's. Inputs of any strides and dtypes are converted to out's dtype
 * (vt_copy's rules); none may overlap out. Empty inputs contribute nothing. */
vt_status vt_cat(const vt_tensor *out, int n, const vt_tensor *ins, int dim);
vt_status vt_ref_cat(const vt_tensor *out, int n, const vt_tensor *ins, int dim);
/* Queued: the list is copied (any n >= 1, split into several commands). */
vt_status vt_op_cat(int dev, const char *name, const vt_tensor *out, int n, const vt_tensor *ins, int dim);

/* out = in reversed along every dim whose bit is set in dims_mask; out has
 * in's shape and must not overlap it. */
vt_status vt_flip(const vt_tensor *out, const vt_tensor *in, uint64_t dims_mask);
vt_status vt_ref_flip(const vt_tensor *out, const vt_tensor *in, uint64_t dims_mask);
vt_status vt_op_flip(int dev, const char *name, const vt_tensor *out, const vt_tensor *in, uint64_t dims_mask);

/* out = in rolled: along dims[k] element i moves to (i + shifts[k]) mod
 * size (any shift, negative too); ndims <= VT_MAX_DIMS, distinct dims. out
 * has in's shape and must not overlap it. */
vt_status vt_roll(const vt_tensor *out, const vt_tensor *in, int ndims, const int *dims, const int64_t *shifts);
vt_status vt_ref_roll(const vt_tensor *out, const vt_tensor *in, int ndims, const int *dims, const int64_t *shifts);
vt_status vt_op_roll(int dev, const char *name, const vt_tensor *out, const vt_tensor *in, int ndims, const int *dims,
                     const int64_t *shifts);

/* tril (upper = 0) / triu (upper = 1) over the last two dims (ndim >= 2):
 * out[..., i, j] = in[..., i, j] where j - i <= diagonal (tril) or
 * j - i >= diagonal (triu), else 0. Same dtype; out may alias in exactly. */
vt_status vt_tri(const vt_tensor *out, const vt_tensor *in, int64_t diagonal, int upper);
vt_status vt_ref_tri(const vt_tensor *out, const vt_tensor *in, int64_t diagonal, int upper);
vt_status vt_op_tri(int dev, const char *name, const vt_tensor *out, const vt_tensor *in, int64_t diagonal,
                    int upper);

/* Stable sort along dim (negative wraps): values (in's dtype, nullable) and
 * int64 indices (nullable) of in's shape, any strides, not overlapping in.
 * Order as PyTorch: NaN is greater than every number and NaNs are equal,
 * -0.0 equals 0.0; descending puts NaN first; equal keys keep input order. */
vt_status vt_sort(const vt_tensor *values, const vt_tensor *indices, const vt_tensor *in, int dim, int descending);
vt_status vt_ref_sort(const vt_tensor *values, const vt_tensor *indices, const vt_tensor *in, int dim,
                      int descending);
vt_status vt_op_sort(int dev, const char *name, const vt_tensor *values, const vt_tensor *indices,
                     const vt_tensor *in, int dim, int descending);

/* The k largest (largest = 1) or smallest elements along dim, in sorted
 * order (best first; equal keys by lower index), PyTorch's NaN order:
 * values/indices (nullable) are in's shape with k at dim. 0 <= k <= size
 * (VT_ERR_INDEX otherwise). */
vt_status vt_topk(const vt_tensor *values, const vt_tensor *indices, const vt_tensor *in, int dim, int64_t k,
                  int largest);
vt_status vt_ref_topk(const vt_tensor *values, const vt_tensor *indices, const vt_tensor *in, int dim, int64_t k,
                      int largest);
vt_status vt_op_topk(int dev, const char *name, const vt_tensor *values, const vt_tensor *indices,
                     const vt_tensor *in, int dim, int64_t k, int largest);

/* Range factories on a contiguous 1-D out, reproducing PyTorch CPU's
 * arithmetic exactly: values are computed in the accumulate type (double
 * for f32/f64, float for bf16/f16, int64 for integers), the output is cut
 * into `chunk`-element pieces (PyTorch's parallel split; <= 0: one piece)
 * and each piece into blocks of 2 * vec elements (PyTorch's SIMD width for
 * out's dtype; 0: no blocks) whose first element is rounded to out's dtype
 * and the others stepped from it.
 * arange: out[i] = start + step * i. */
vt_status vt_arange(const vt_tensor *out, vt_scalar start, vt_scalar step, int64_t vec, int64_t chunk);
/* linspace over out's n elements: step = (end - start) / (n - 1) in out's
 * dtype (double for integers); the first half counts up from start, the
 * second down from end. n == 1 gives start. PyTorch's kernel is scalar:
 * pass vec = 0 to match it. */
vt_status vt_linspace(const vt_tensor *out, vt_scalar start, vt_scalar end, int64_t vec, int64_t chunk);
vt_status vt_op_arange(int dev, const char *name, const vt_tensor *out, vt_scalar start, vt_scalar step, int64_t vec,
                       int64_t chunk);
vt_status vt_op_linspace(int dev, const char *name, const vt_tensor *out, vt_scalar start, vt_scalar end,
                         int64_t vec, int64_t chunk);

/* out[..] = insertion point of values[..] in the rows of sorted (its last
 * dim; the leading dims match values' or sorted is 1-D): the first i with
 * sorted[i] >= v (right = 0) or sorted[i] > v (right = 1), compared in
 * double (int64 when both are integers). out is int64 or int32 of values'
 * shape. */
vt_status vt_searchsorted(const vt_tensor *out, const vt_tensor *sorted, const vt_tensor *values, int right);
vt_status vt_op_searchsorted(int dev, const char *name, const vt_tensor *out, const vt_tensor *sorted,
                             const vt_tensor *values, int right);

#endif /* VTPU_INDEX_H */
