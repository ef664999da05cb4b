/* vtpu/index.h — indexing and data movement: gather/scatter, index_select/put/add, embedding, masked ops, nonzero, cat, flip, roll, tril/triu, sort/topk, arange/linspace/eye.
 * Part of the public C API: included by vtpu/vtpu.h, never on its own. */
#ifndef VTPU_INDEX_H
#define VTPU_INDEX_H

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
