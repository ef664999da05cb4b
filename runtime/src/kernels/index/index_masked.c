/* index_masked.c — ops driven by a mask or by nonzero elements:
 * count_nonzero, nonzero, masked_fill, masked_select and masked_scatter.
 * Outputs whose positions depend on the data count per fixed chunk of the
 * row-major order first, then each chunk writes from its prefix, so the
 * result is the serial one whatever the thread count. */
#include <stdlib.h>

#include "index.h"

vt_status ix_check_mask(const char *op, const vt_tensor *mask) {
    if (!mask) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): mask is NULL", op);
    vt_status s = vt_tensor_validate(mask, "mask");
    if (s != VT_OK) return vt_error_prefix(s, op);
    if (mask->dtype != VT_BOOL && mask->dtype != VT_U8)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): expected a bool mask, got %s", op,
                            vt_dtype_name(mask->dtype));
    return VT_OK;
}

vt_status ix_broadcast_shape(const vt_tensor *a, const vt_tensor *b, int32_t *ndim, int64_t *sizes) {
    int32_t n = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int d = 0; d < n; d++) {
        int da = d - (n - a->ndim), db = d - (n - b->ndim);
        int64_t x = da >= 0 ? a->sizes[da] : 1, y = db >= 0 ? b->sizes[db] : 1;
        if (x != y && x != 1 && y != 1)
            return vt_set_error(VT_ERR_INVALID_ARGUMENT,
                                "The size of tensor a (%lld) must match the size of tensor b (%lld) at "
                                "non-singleton dimension %d",
                                (long long)x, (long long)y, d);
        sizes[d] = x == 1 ? y : x;
    }
    *ndim = n;
    return VT_OK;
}

vt_status ix_check_same_shape(const char *op, const vt_tensor *a, const vt_tensor *b) {
    if (a->ndim != b->ndim || memcmp(a->sizes, b->sizes, sizeof(int64_t) * (size_t)a->ndim))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): shapes differ", op);
    return VT_OK;
}

/* Nonzero test on raw elements: floats ignore the sign bit (-0.0 is zero,
 * NaN is not), everything else is nonzero when any bit is set. */
static int64_t count_run(vt_dtype dt, const char *p, int64_t st, int64_t n) {
    int64_t c = 0;
    switch (vt_dtype_size(dt)) {
    case 1:
        for (int64_t j = 0; j < n; j++) c += p[j * st] != 0;
        break;
    case 2: {
        uint16_t m = vt_dtype_is_float(dt) ? 0x7fffu : 0xffffu;
        for (int64_t j = 0; j < n; j++) c += (((const uint16_t *)p)[j * st] & m) != 0;
    } break;
    case 4: {
        uint32_t m = vt_dtype_is_float(dt) ? 0x7fffffffu : 0xffffffffu;
        for (int64_t j = 0; j < n; j++) c += (((const uint32_t *)p)[j * st] & m) != 0;
    } break;
    default: {
        uint64_t m = vt_dtype_is_float(dt) ? 0x7fffffffffffffffull : ~0ull;
        for (int64_t j = 0; j < n; j++) c += (((const uint64_t *)p)[j * st] & m) != 0;
    } break;
    }
    return c;
}

static int elem_nonzero(vt_dtype dt, const char *p) { return count_run(dt, p, 1, 1) != 0; }

typedef struct chunk_ctx {
    vt_iter it;      /* operand ops-1 is the mask (or the counted tensor) */
    vt_dtype dt;     /* dtype of the counted operand */
    int counted;     /* which operand is counted */
    int64_t *counts; /* per chunk */
    int64_t total;
    /* pass 2 */
    char *out;       /* masked_select: out's element 0; nonzero: out's */
    int64_t ost[2];
    size_t es;
    const vt_tensor *src; /* masked_select input / masked_scatter source / nonzero input */
    int src_contig;
    int64_t run_pos;      /* scratch for the run callbacks */
} chunk_ctx;

typedef struct run_state {
    chunk_ctx *c;
    int64_t pos; /* output (or source) position of the next true element */
    int64_t acc;
} run_state;

static void count_cb(void *p, char *const *ptrs, const int64_t *strides, int64_t n) {
    run_state *r = p;
    r->acc += count_run(r->c->dt, ptrs[r->c->counted], strides[r->c->counted], n);
}

static void count_chunks(void *p, int64_t b, int64_t e) {
    chunk_ctx *c = p;
    for (int64_t k = b; k < e; k++) {
        run_state r = {c, 0, 0};
        int64_t lo = k * IX_CHUNK, hi = lo + IX_CHUNK < c->it.numel ? lo + IX_CHUNK : c->it.numel;
        vt_iter_range(&c->it, lo, hi, count_cb, &r);
        c->counts[k] = r.acc;
    }
}

/* Count per chunk, then turn counts into exclusive prefixes; c->total. */
static vt_status count_all(chunk_ctx *c, const char *op) {
    int64_t nch = (c->it.numel + IX_CHUNK - 1) / IX_CHUNK;
    c->counts = malloc((size_t)(nch ? nch : 1) * 8);
    if (!c->counts) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s(): no host memory for chunk counts", op);
    vt_parallel_for(nch, 1, count_chunks, c);
    int64_t t = 0;
    for (int64_t k = 0; k < nch; k++) {
        int64_t x = c->counts[k];
        c->counts[k] = t;
        t += x;
    }
    c->total = t;
    return VT_OK;
}

static vt_status mask_view(const char *op, const vt_tensor *mask, int32_t nd, const int64_t *sz, vt_tensor *out) {
    vt_status s = vt_broadcast_to(mask, nd, sz, out);
    return s == VT_OK ? s : vt_error_prefix(s, op);
}

/* ------------------------------------------------------------ count_nonzero */

vt_status vt_count_nonzero(const vt_tensor *count, const vt_tensor *in) {
    const char *op = "count_nonzero";
    if (!count || !in) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): NULL tensor", op);
    vt_status s = vt_tensor_validate(in, "input");
    if (s != VT_OK) return vt_error_prefix(s, op);
    if (count->dtype != VT_I64 || vt_tensor_numel(count) != 1)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): count must be one int64 element", op);
    chunk_ctx c;
    memset(&c, 0, sizeof c);
    vt_iter_init(&c.it, 1, in);
    c.dt = in->dtype;
    if ((s = count_all(&c, op)) != VT_OK) return s;
    free(c.counts);
    ((int64_t *)count->data)[count->offset] = c.total;
    return VT_OK;
}

/* ------------------------------------------------------------ nonzero */

static void nonzero_chunks(void *p, int64_t b, int64_t e) {
    chunk_ctx *c = p;
    const vt_tensor *in = c->src;
    size_t es = vt_dtype_size(in->dtype);
    int nd = in->ndim;
    for (int64_t k = b; k < e; k++) {
        int64_t lo = k * IX_CHUNK, hi = lo + IX_CHUNK < c->it.numel ? lo + IX_CHUNK : c->it.numel;
        int64_t coord[VT_MAX_DIMS], lin = lo, off = in->offset, row = c->counts[k];
        for (int d = nd - 1; d >= 0; d--) {
            coord[d] = lin % in->sizes[d];
            lin /= in->sizes[d];
            off += coord[d] * in->strides[d];
        }
        for (int64_t i = lo; i < hi; i++) {
            if (elem_nonzero(in->dtype, (const char *)in->data + off * (int64_t)es)) {
                if (row < c->total) {
                    int64_t *o = (int64_t *)c->out + row * c->ost[0];
                    for (int d = 0; d < nd; d++) o[d * c->ost[1]] = coord[d];
                }
                row++;
            }
            for (int d = nd - 1; d >= 0; d--) {
                off += in->strides[d];
                if (++coord[d] < in->sizes[d]) break;
                off -= coord[d] * in->strides[d];
                coord[d] = 0;
            }
        }
    }
}

vt_status vt_nonzero(const vt_tensor *out, const vt_tensor *in) {
    const char *op = "nonzero";
    if (!out || !in) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): NULL tensor", op);
    vt_status s = vt_tensor_validate(in, "input");
    if (s == VT_OK) s = vt_tensor_validate(out, "out");
    if (s != VT_OK) return vt_error_prefix(s, op);
    if (out->dtype != VT_I64 || out->ndim != 2 || out->sizes[1] != in->ndim)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): out must be int64 of shape [n, %d]", op, (int)in->ndim);
    chunk_ctx c;
    memset(&c, 0, sizeof c);
    vt_iter_init(&c.it, 1, in);
    c.dt = in->dtype;
    if ((s = count_all(&c, op)) != VT_OK) return s;
    if (c.total != out->sizes[0]) {
        free(c.counts);
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): out has %lld rows for %lld nonzero elements", op,
                            (long long)out->sizes[0], (long long)c.total);
    }
    c.src = in;
    c.out = (char *)((int64_t *)out->data + out->offset);
    c.ost[0] = out->strides[0];
    c.ost[1] = out->strides[1];
    if (c.total > 0 && in->ndim > 0) vt_parallel_for((c.it.numel + IX_CHUNK - 1) / IX_CHUNK, 1, nonzero_chunks, &c);
    free(c.counts);
    return VT_OK;
}

/* ------------------------------------------------------------ masked_fill */

typedef struct fill_ctx {
    vt_iter it;
    unsigned char value[8];
    size_t es;
} fill_ctx;

static void fill_cb(void *p, char *const *ptrs, const int64_t *strides, int64_t n) {
    const fill_ctx *c = p;
    const char *m = ptrs[1];
    for (int64_t j = 0; j < n; j++)
        if (m[j * strides[1]]) memcpy(ptrs[0] + j * strides[0] * (int64_t)c->es, c->value, c->es);
}

static void fill_range(void *p, int64_t b, int64_t e) {
    fill_ctx *c = p;
    vt_iter_range(&c->it, b, e, fill_cb, c);
}

vt_status vt_masked_fill(const vt_tensor *out, const vt_tensor *mask, const vt_tensor *value_t, vt_scalar value) {
    const char *op = "masked_fill";
    if (!out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): out is NULL", op);
    vt_status s = vt_tensor_validate(out, "out");
    if (s != VT_OK) return vt_error_prefix(s, op);
    if ((s = ix_check_mask(op, mask)) != VT_OK) return s;
    if (value_t && vt_tensor_numel(value_t) != 1)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): value must have one element", op);
    fill_ctx c;
    vt_tensor ops[2] = {*out};
    if ((s = mask_view(op, mask, out->ndim, out->sizes, &ops[1])) != VT_OK) return s;
    vt_iter_init(&c.it, 2, ops);
    c.es = vt_dtype_size(out->dtype);
    ix_value_bytes(out->dtype, value_t, value, c.value);
    vt_parallel_for(c.it.numel, VT_ELEMENTWISE_GRAIN, fill_range, &c);
    return VT_OK;
}

/* ------------------------------------------------------------ masked_select / masked_scatter */

static void select_cb(void *p, char *const *ptrs, const int64_t *strides, int64_t n) {
    run_state *r = p;
    chunk_ctx *c = r->c;
    const char *m = ptrs[1];
    for (int64_t j = 0; j < n; j++) {
        if (!m[j * strides[1]]) continue;
        if (r->pos < c->total)
            memcpy(c->out + r->pos * c->ost[0] * (int64_t)c->es, ptrs[0] + j * strides[0] * (int64_t)c->es, c->es);
        r->pos++;
    }
}

static void scatter_cb(void *p, char *const *ptrs, const int64_t *strides, int64_t n) {
    run_state *r = p;
    chunk_ctx *c = r->c;
    const char *m = ptrs[1];
    const vt_tensor *src = c->src;
    const char *sb = (const char *)src->data;
    for (int64_t j = 0; j < n; j++) {
        if (!m[j * strides[1]]) continue;
        int64_t so = c->src_contig ? src->offset + r->pos : ix_offset_of(src, r->pos);
        memcpy(ptrs[0] + j * strides[0] * (int64_t)c->es, sb + so * (int64_t)c->es, c->es);
        r->pos++;
    }
}

static void write_chunks(void *p, int64_t b, int64_t e, vt_iter_run_fn fn) {
    chunk_ctx *c = p;
    for (int64_t k = b; k < e; k++) {
        run_state r = {c, c->counts[k], 0};
        int64_t lo = k * IX_CHUNK, hi = lo + IX_CHUNK < c->it.numel ? lo + IX_CHUNK : c->it.numel;
        vt_iter_range(&c->it, lo, hi, fn, &r);
    }
}
static void select_chunks(void *p, int64_t b, int64_t e) { write_chunks(p, b, e, select_cb); }
static void scatter_chunks(void *p, int64_t b, int64_t e) { write_chunks(p, b, e, scatter_cb); }

vt_status vt_masked_select(const vt_tensor *out, const vt_tensor *in, const vt_tensor *mask) {
    const char *op = "masked_select";
    if (!out || !in) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): NULL tensor", op);
    vt_status s = vt_tensor_validate(in, "input");
    if (s == VT_OK) s = vt_tensor_validate(out, "out");
    if (s != VT_OK) return vt_error_prefix(s, op);
    if ((s = ix_check_mask(op, mask)) != VT_OK) return s;
    if (out->ndim != 1 || out->dtype != in->dtype)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): out must be 1-d of input's dtype", op);
    int32_t nd;
    int64_t sz[VT_MAX_DIMS];
    if ((s = ix_broadcast_shape(in, mask, &nd, sz)) != VT_OK) return vt_error_prefix(s, op);
    chunk_ctx c;
    memset(&c, 0, sizeof c);
    vt_tensor ops[2];
    if ((s = vt_broadcast_to(in, nd, sz, &ops[0])) != VT_OK) return vt_error_prefix(s, op);
    if ((s = mask_view(op, mask, nd, sz, &ops[1])) != VT_OK) return s;
    vt_iter_init(&c.it, 2, ops);
    c.dt = VT_U8;
    c.counted = 1;
    if ((s = count_all(&c, op)) != VT_OK) return s;
    if (c.total != out->sizes[0]) {
        free(c.counts);
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): out has %lld elements for %lld selected", op,
                            (long long)out->sizes[0], (long long)c.total);
    }
    c.es = vt_dtype_size(in->dtype);
    c.out = vt_base(out);
    c.ost[0] = out->strides[0];
    if (c.total) vt_parallel_for((c.it.numel + IX_CHUNK - 1) / IX_CHUNK, 1, select_chunks, &c);
    free(c.counts);
    return VT_OK;
}

vt_status vt_masked_scatter(const vt_tensor *out, const vt_tensor *mask, const vt_tensor *source) {
    const char *op = "masked_scatter";
    if (!out || !source) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): NULL tensor", op);
    vt_status s = vt_tensor_validate(out, "out");
    if (s == VT_OK) s = vt_tensor_validate(source, "source");
    if (s != VT_OK) return vt_error_prefix(s, op);
    if ((s = ix_check_mask(op, mask)) != VT_OK) return s;
    if (out->dtype != source->dtype)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s(): source and self must have the same dtype", op);
    chunk_ctx c;
    memset(&c, 0, sizeof c);
    vt_tensor ops[2] = {*out};
    if ((s = mask_view(op, mask, out->ndim, out->sizes, &ops[1])) != VT_OK) return s;
    vt_iter_init(&c.it, 2, ops);
    c.dt = VT_U8;
    c.counted = 1;
    if ((s = count_all(&c, op)) != VT_OK) return s;
    if (c.total > vt_tensor_numel(source)) {
        free(c.counts);
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "Number of elements of source < number of ones in mask");
    }
    c.es = vt_dtype_size(out->dtype);
    c.src = source;
    c.src_contig = vt_tensor_is_contiguous(source);
    if (c.total) vt_parallel_for((c.it.numel + IX_CHUNK - 1) / IX_CHUNK, 1, scatter_chunks, &c);
    free(c.counts);
    return VT_OK;
}
