/* shape.c — data movement without arithmetic: cat, flip, roll and
 * tril/triu. Contiguous same-dtype cat runs as one parallel loop of
 * memcpys; every other layout goes through vt_copy on views (negative
 * strides for flip, two narrowed halves per rolled dim). */
#include <stdlib.h>

#include "shape.h"

static vt_status same_shape(const vt_tensor *a, const vt_tensor *b, const char *what) {
    if (a->ndim != b->ndim) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: out has %d dims, input %d", what, a->ndim, b->ndim);
    for (int d = 0; d < a->ndim; d++)
        if (a->sizes[d] != b->sizes[d])
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: out size %lld != input size %lld at dim %d", what,
                                (long long)a->sizes[d], (long long)b->sizes[d], d);
    return VT_OK;
}

/* ------------------------------------------------------------ cat */

vt_status vt_cat_check(const vt_tensor *out, int n, const vt_tensor *ins, int dim) {
    vt_status s = vt_tensor_validate(out, "cat");
    if (s) return s;
    if (n < 0 || (n > 0 && !ins)) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "cat: bad input list");
    if (dim < 0 || dim >= out->ndim)
        return vt_set_error(VT_ERR_INDEX, "cat: dim %d out of range for %d dims", dim, out->ndim);
    int64_t total = 0;
    for (int k = 0; k < n; k++) {
        if ((s = vt_tensor_validate(&ins[k], "cat"))) return s;
        if (ins[k].ndim != out->ndim)
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "cat: input %d has %d dims, out %d", k, ins[k].ndim, out->ndim);
        for (int d = 0; d < out->ndim; d++)
            if (d != dim && ins[k].sizes[d] != out->sizes[d])
                return vt_set_error(VT_ERR_INVALID_ARGUMENT,
                                    "Sizes of tensors must match except in dimension %d. Expected size %lld but got "
                                    "size %lld for tensor number %d in the list.",
                                    dim, (long long)out->sizes[d], (long long)ins[k].sizes[d], k);
        total += ins[k].sizes[dim];
    }
    if (total != out->sizes[dim])
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "cat: input sizes along dim %d add up to %lld, out has %lld", dim,
                            (long long)total, (long long)out->sizes[dim]);
    return VT_OK;
}

typedef struct cat_ctx {
    char *out;            /* first element of out */
    const char *src[VT_MAX_ARGS / 8];
    int64_t bytes[VT_MAX_ARGS / 8]; /* per outer row, per input */
    int64_t dst_off[VT_MAX_ARGS / 8];
    int64_t row_bytes;    /* out bytes per outer row */
    int n;
} cat_ctx;

static void cat_range(void *vctx, int64_t b, int64_t e) {
    const cat_ctx *c = vctx;
    for (int64_t t = b; t < e; t++) {
        int64_t o = t / c->n;
        int k = (int)(t % c->n);
        memcpy(c->out + o * c->row_bytes + c->dst_off[k], c->src[k] + o * c->bytes[k], (size_t)c->bytes[k]);
    }
}

vt_status vt_cat(const vt_tensor *out, int n, const vt_tensor *ins, int dim) {
    vt_status s = vt_cat_check(out, n, ins, dim);
    if (s) return s;
    if (vt_tensor_numel(out) == 0) return VT_OK;
    size_t es = vt_dtype_size(out->dtype);
    int fast = vt_tensor_is_contiguous(out) && n <= (int)(VT_MAX_ARGS / 8);
    for (int k = 0; k < n && fast; k++)
        fast = ins[k].dtype == out->dtype && (vt_tensor_numel(&ins[k]) == 0 || vt_tensor_is_contiguous(&ins[k]));
    if (!fast) {
        int64_t at = 0;
        for (int k = 0; k < n; k++) {
            vt_tensor slice = vt_shape_narrow(out, dim, at, ins[k].sizes[dim]);
            at += ins[k].sizes[dim];
            if (vt_tensor_numel(&slice) && (s = vt_copy(&slice, &ins[k]))) return s;
        }
        return VT_OK;
    }
    cat_ctx *c = malloc(sizeof *c);
    if (!c) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "cat: no host memory for the plan");
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < dim; d++) outer *= out->sizes[d];
    for (int d = dim + 1; d < out->ndim; d++) inner *= out->sizes[d];
    c->out = vt_base(out);
    c->row_bytes = out->sizes[dim] * inner * (int64_t)es;
    c->n = 0;
    int64_t at = 0;
    for (int k = 0; k < n; k++) {
        if (!ins[k].sizes[dim]) continue;
        c->src[c->n] = (const char *)vt_base(&ins[k]);
        c->bytes[c->n] = ins[k].sizes[dim] * inner * (int64_t)es;
        c->dst_off[c->n] = at;
        at += c->bytes[c->n];
        c->n++;
    }
    int64_t tasks = outer * c->n;
    int64_t per = c->row_bytes / (c->n ? c->n : 1);
    int64_t grain = (int64_t)VT_ELEMENTWISE_GRAIN * 4 / (per > 0 ? per : 1);
    vt_parallel_for(tasks, grain < 1 ? 1 : grain, cat_range, c);
    free(c);
    return VT_OK;
}

/* ------------------------------------------------------------ flip */

vt_status vt_flip_check(const vt_tensor *out, const vt_tensor *in, uint64_t dims_mask) {
    vt_status s = vt_tensor_validate(out, "flip");
    if (!s) s = vt_tensor_validate(in, "flip");
    if (!s) s = same_shape(out, in, "flip");
    if (!s && in->ndim < 64 && (dims_mask >> in->ndim))
        s = vt_set_error(VT_ERR_INDEX, "flip: dims mask 0x%llx names dims beyond %d", (unsigned long long)dims_mask,
                         in->ndim);
    return s;
}

/* in seen backwards along the dims of mask. */
static vt_tensor flipped_view(const vt_tensor *in, uint64_t mask) {
    vt_tensor v = *in;
    for (int d = 0; d < in->ndim; d++)
        if ((mask >> d) & 1 && in->sizes[d] > 0) {
            v.offset += (in->sizes[d] - 1) * in->strides[d];
            v.strides[d] = -in->strides[d];
        }
    return v;
}

vt_status vt_flip(const vt_tensor *out, const vt_tensor *in, uint64_t dims_mask) {
    vt_status s = vt_flip_check(out, in, dims_mask);
    if (s) return s;
    vt_tensor v = flipped_view(in, dims_mask);
    return vt_copy(out, &v);
}

/* ------------------------------------------------------------ roll */

vt_status vt_roll_check(const vt_tensor *out, const vt_tensor *in, int ndims, const int *dims, const int64_t *shifts) {
    vt_status s = vt_tensor_validate(out, "roll");
    if (!s) s = vt_tensor_validate(in, "roll");
    if (!s) s = same_shape(out, in, "roll");
    if (s) return s;
    if (ndims < 0 || ndims > VT_MAX_DIMS || (ndims && (!dims || !shifts)))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "roll: bad dims list");
    uint64_t seen = 0;
    for (int k = 0; k < ndims; k++) {
        if (dims[k] < 0 || dims[k] >= in->ndim)
            return vt_set_error(VT_ERR_INDEX, "roll: dim %d out of range for %d dims", dims[k], in->ndim);
        if ((seen >> dims[k]) & 1) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "roll: dim %d repeated", dims[k]);
        seen |= 1ull << dims[k];
    }
    return VT_OK;
}

static vt_status roll_rec(vt_tensor out, vt_tensor in, int k, int ndims, const int *dims, const int64_t *shifts) {
    if (vt_tensor_numel(&out) == 0) return VT_OK;
    if (k == ndims) return vt_copy(&out, &in);
    int d = dims[k];
    int64_t n = in.sizes[d];
    int64_t sh = n ? shifts[k] % n : 0;
    if (sh < 0) sh += n;
    if (sh == 0) return roll_rec(out, in, k + 1, ndims, dims, shifts);
    /* out[sh:] = in[:n-sh], out[:sh] = in[n-sh:] */
    vt_status s = roll_rec(vt_shape_narrow(&out, d, sh, n - sh), vt_shape_narrow(&in, d, 0, n - sh), k + 1, ndims, dims,
                           shifts);
    if (s) return s;
    return roll_rec(vt_shape_narrow(&out, d, 0, sh), vt_shape_narrow(&in, d, n - sh, sh), k + 1, ndims, dims, shifts);
}

vt_status vt_roll(const vt_tensor *out, const vt_tensor *in, int ndims, const int *dims, const int64_t *shifts) {
    vt_status s = vt_roll_check(out, in, ndims, dims, shifts);
    if (s) return s;
    return roll_rec(*out, *in, 0, ndims, dims, shifts);
}

/* ------------------------------------------------------------ tril / triu */

vt_status vt_tri_check(const vt_tensor *out, const vt_tensor *in) {
    vt_status s = vt_tensor_validate(out, "tril/triu");
    if (!s) s = vt_tensor_validate(in, "tril/triu");
    if (!s) s = same_shape(out, in, "tril/triu");
    if (s) return s;
    if (in->ndim < 2) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "tril/triu: input tensor must have at least 2 dimensions");
    if (in->dtype != out->dtype)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "tril/triu: out dtype %s != input dtype %s",
                            vt_dtype_name(out->dtype), vt_dtype_name(in->dtype));
    return VT_OK;
}

typedef struct tri_ctx {
    vt_tensor out, in;
    int64_t rows, cols, diag;
    int upper;
    size_t es;
} tri_ctx;

static void zero_run(char *p, int64_t stride, int64_t n, size_t es) {
    if (n <= 0) return;
    if (stride == 1) {
        memset(p, 0, (size_t)n * es);
        return;
    }
    for (int64_t j = 0; j < n; j++) memset(p + j * stride * (int64_t)es, 0, es);
}

static void tri_range(void *vctx, int64_t b, int64_t e) {
    const tri_ctx *c = vctx;
    const vt_tensor *o = &c->out, *x = &c->in;
    int nd = o->ndim;
    int64_t es = (int64_t)c->es;
    vt_dtype bits = es == 1 ? VT_U8 : es == 2 ? VT_I16 : es == 4 ? VT_I32 : VT_I64;
    for (int64_t r = b; r < e; r++) {
        int64_t i = r % c->rows, rest = r / c->rows;
        int64_t ooff = o->offset + i * o->strides[nd - 2], xoff = x->offset + i * x->strides[nd - 2];
        for (int d = nd - 3; d >= 0; d--) {
            int64_t id = rest % o->sizes[d];
            rest /= o->sizes[d];
            ooff += id * o->strides[d];
            xoff += id * x->strides[d];
        }
        char *po = (char *)o->data + ooff * es;
        const char *px = (const char *)x->data + xoff * es;
        int64_t so = o->strides[nd - 1], sx = x->strides[nd - 1];
        /* kept columns [lo, hi) */
        int64_t lo, hi;
        if (c->upper) {
            lo = i + c->diag;
            lo = lo < 0 ? 0 : lo > c->cols ? c->cols : lo;
            hi = c->cols;
        } else {
            lo = 0;
            hi = i + c->diag + 1;
            hi = hi < 0 ? 0 : hi > c->cols ? c->cols : hi;
        }
        zero_run(po, so, lo, c->es);
        if (po != px || so != sx) vt_convert(bits, px + lo * sx * es, sx, bits, po + lo * so * es, so, hi - lo);
        zero_run(po + hi * so * es, so, c->cols - hi, c->es);
    }
}

vt_status vt_tri(const vt_tensor *out, const vt_tensor *in, int64_t diagonal, int upper) {
    vt_status s = vt_tri_check(out, in);
    if (s) return s;
    if (vt_tensor_numel(out) == 0) return VT_OK;
    tri_ctx c;
    c.out = *out;
    c.in = *in;
    c.rows = out->sizes[out->ndim - 2];
    c.cols = out->sizes[out->ndim - 1];
    c.diag = diagonal;
    c.upper = upper;
    c.es = vt_dtype_size(out->dtype);
    int64_t nrows = vt_tensor_numel(out) / c.cols;
    int64_t grain = VT_ELEMENTWISE_GRAIN / c.cols;
    vt_parallel_for(nrows, grain < 1 ? 1 : grain, tri_range, &c);
    return VT_OK;
}
