/* shape_ref.c — scalar references of the data-movement kernels: one element
 * at a time through multi-indices, comparisons written from PyTorch's
 * comparators (not from sort keys), insertion sort. What the tests compare against. */
#include <stdlib.h>

#include "shape.h"

static int64_t off_of(const vt_tensor *t, const int64_t *idx) {
    int64_t o = t->offset;
    for (int d = 0; d < t->ndim; d++) o += idx[d] * t->strides[d];
    return o;
}

static char *at(const vt_tensor *t, const int64_t *idx) {
    return (char *)t->data + off_of(t, idx) * (int64_t)vt_dtype_size(t->dtype);
}

/* Next multi-index in row-major order; 0 when done. */
static int next_idx(const vt_tensor *t, int64_t *idx) {
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (++idx[d] < t->sizes[d]) return 1;
        idx[d] = 0;
    }
    return 0;
}

static void put(const vt_tensor *o, const int64_t *io, const vt_tensor *x, const int64_t *ix) {
    vt_convert(x->dtype, at(x, ix), 1, o->dtype, at(o, io), 1, 1);
}

vt_status vt_ref_cat(const vt_tensor *out, int n, const vt_tensor *ins, int dim) {
    vt_status s = vt_cat_check(out, n, ins, dim);
    if (s) return s;
    int64_t base = 0;
    for (int k = 0; k < n; k++) {
        int64_t idx[VT_MAX_DIMS] = {0}, io[VT_MAX_DIMS];
        if (vt_tensor_numel(&ins[k]) > 0) do {
                memcpy(io, idx, sizeof io);
                io[dim] += base;
                put(out, io, &ins[k], idx);
            } while (next_idx(&ins[k], idx));
        base += ins[k].sizes[dim];
    }
    return VT_OK;
}

vt_status vt_ref_flip(const vt_tensor *out, const vt_tensor *in, uint64_t mask) {
    vt_status s = vt_flip_check(out, in, mask);
    if (s || vt_tensor_numel(out) == 0) return s;
    int64_t idx[VT_MAX_DIMS] = {0}, ix[VT_MAX_DIMS];
    do {
        for (int d = 0; d < in->ndim; d++) ix[d] = (mask >> d) & 1 ? in->sizes[d] - 1 - idx[d] : idx[d];
        put(out, idx, in, ix);
    } while (next_idx(out, idx));
    return VT_OK;
}

vt_status vt_ref_roll(const vt_tensor *out, const vt_tensor *in, int ndims, const int *dims, const int64_t *shifts) {
    vt_status s = vt_roll_check(out, in, ndims, dims, shifts);
    if (s || vt_tensor_numel(out) == 0) return s;
    int64_t idx[VT_MAX_DIMS] = {0}, ix[VT_MAX_DIMS];
    do {
        memcpy(ix, idx, sizeof ix);
        for (int k = 0; k < ndims; k++) {
            int64_t n = in->sizes[dims[k]];
            int64_t j = (idx[dims[k]] - shifts[k] % n) % n;
            ix[dims[k]] = j < 0 ? j + n : j;
        }
        put(out, idx, in, ix);
    } while (next_idx(out, idx));
    return VT_OK;
}

vt_status vt_ref_tri(const vt_tensor *out, const vt_tensor *in, int64_t diagonal, int upper) {
    vt_status s = vt_tri_check(out, in);
    if (s || vt_tensor_numel(out) == 0) return s;
    int64_t idx[VT_MAX_DIMS] = {0};
    int nd = in->ndim;
    do {
        int64_t dj = idx[nd - 1] - idx[nd - 2];
        int keep = upper ? dj >= diagonal : dj <= diagonal;
        if (keep) put(out, idx, in, idx);
        else memset(at(out, idx), 0, vt_dtype_size(out->dtype));
    } while (next_idx(out, idx));
    return VT_OK;
}

/* PyTorch's comparators: NaN greatest, NaNs equal. */
static int less_asc(vt_dtype dt, const char *a, const char *b) {
    if (vt_dtype_is_float(dt)) {
        double x, y;
        vt_convert(dt, a, 1, VT_F64, &x, 1, 1);
        vt_convert(dt, b, 1, VT_F64, &y, 1, 1);
        return (!isnan(x) && isnan(y)) || x < y;
    }
    int64_t x, y;
    vt_convert(dt, a, 1, VT_I64, &x, 1, 1);
    vt_convert(dt, b, 1, VT_I64, &y, 1, 1);
    return x < y;
}

/* Stable insertion sort of one line's indices; first k written. */
static vt_status ref_select(const vt_tensor *values, const vt_tensor *indices, const vt_tensor *in, int dim, int64_t k,
                            int desc) {
    int64_t len = in->sizes[dim];
    int64_t *perm = malloc(sizeof(int64_t) * (size_t)(len + 1));
    if (!perm) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "ref sort: no memory");
    vt_tensor line = *in;
    line.sizes[dim] = 1;
    int64_t idx[VT_MAX_DIMS] = {0};
    if (vt_tensor_numel(&line) > 0 && k > 0) do {
            int64_t ix[VT_MAX_DIMS], iy[VT_MAX_DIMS];
            memcpy(ix, idx, sizeof ix);
            memcpy(iy, idx, sizeof iy);
            for (int64_t i = 0; i < len; i++) {
                int64_t j = i;
                ix[dim] = i;
                while (j > 0) {
                    iy[dim] = perm[j - 1];
                    int before = desc ? less_asc(in->dtype, at(in, iy), at(in, ix)) : less_asc(in->dtype, at(in, ix), at(in, iy));
                    if (!before) break;
                    perm[j] = perm[j - 1];
                    j--;
                }
                perm[j] = i;
            }
            for (int64_t j = 0; j < k; j++) {
                int64_t io[VT_MAX_DIMS];
                memcpy(io, idx, sizeof io);
                io[dim] = j;
                ix[dim] = perm[j];
                if (values) put(values, io, in, ix);
                if (indices) *(int64_t *)at(indices, io) = perm[j];
            }
        } while (next_idx(&line, idx));
    free(perm);
    return VT_OK;
}

vt_status vt_ref_sort(const vt_tensor *values, const vt_tensor *indices, const vt_tensor *in, int dim, int descending) {
    int d;
    vt_status s = vt_sort_check(values, indices, in, dim, &d);
    if (s) return s;
    return ref_select(values, indices, in, d, in->sizes[d], descending);
}

vt_status vt_ref_topk(const vt_tensor *values, const vt_tensor *indices, const vt_tensor *in, int dim, int64_t k,
                      int largest) {
    int d;
    vt_status s = vt_topk_check(values, indices, in, dim, k, &d);
    if (s) return s;
    return ref_select(values, indices, in, d, k, largest);
}
