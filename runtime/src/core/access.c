/* access.c — the one check every queued op goes through. An op names the
 * device tensors it reads and writes; here each is found in the device's
 * HBM (memory of another device or of the host is refused, as PyTorch
 * refuses tensors on two devices), PyTorch's overlap rules are applied to
 * what it writes, and an input the kernel cannot read while writing over it
 * is copied first. The result is the command's access list. */
#include <stdlib.h>

#include "internal.h"

static const char kPartialMsg[] =
    "unsupported operation: some elements of the input tensor and the written-to tensor refer to a single memory "
    "location. Please clone() the tensor before performing the operation.";
static const char kInternalMsg[] =
    "unsupported operation: more than one element of the written-to tensor refers to a single memory location. "
    "Please clone() the tensor before performing the operation.";

/* ------------------------------------------------------------ geometry */

/* 1: [lo, hi) spans the view; 0: the view is empty; -1: the extent
 * overflows or the descriptor is malformed. An empty view must still be
 * one whose extent (its sizes counted as at least 1) can be computed:
 * kernels walk its geometry before they find nothing to do. */
static int span_of(const vt_tensor *t, uintptr_t *lo, uintptr_t *hi) {
    size_t es = vt_dtype_size(t->dtype);
    if (!es || t->ndim < 0 || t->ndim > VT_MAX_DIMS) return -1;
    int64_t neg = 0, pos = 0;
    int empty = 0;
    for (int32_t i = 0; i < t->ndim; i++) {
        if (t->sizes[i] < 0) return -1;
        empty |= t->sizes[i] == 0;
    }
    for (int32_t i = 0; i < t->ndim; i++) {
        int64_t ext, sz = t->sizes[i] ? t->sizes[i] : 1;
        if (__builtin_mul_overflow(sz, t->strides[i], &ext)) return -1; /* size * stride: what a walk computes */
        ext -= t->strides[i];
        if (ext < 0 ? __builtin_add_overflow(neg, ext, &neg) : __builtin_add_overflow(pos, ext, &pos)) return -1;
    }
    int64_t first, last, bfirst, blast;
    if (__builtin_add_overflow(t->offset, neg, &first) || __builtin_add_overflow(t->offset, pos, &last) ||
        __builtin_mul_overflow(first, (int64_t)es, &bfirst) || __builtin_mul_overflow(last, (int64_t)es, &blast))
        return -1;
    uintptr_t base = (uintptr_t)t->data;
    if (!base) return empty && t->offset == 0 ? 0 : -1; /* no memory: only an empty view at offset 0 */
    if (bfirst < 0 ? base < (uintptr_t)(-(bfirst + 1)) + 1 : UINTPTR_MAX - base < (uintptr_t)bfirst) return -1;
    if (blast < 0 ? base < (uintptr_t)(-(blast + 1)) + 1 : UINTPTR_MAX - base - es < (uintptr_t)blast) return -1;
    if (empty) return 0;
    *lo = base + (uintptr_t)bfirst;
    *hi = base + (uintptr_t)blast + es;
    return 1;
}

int vt_view_span(const vt_tensor *t, uintptr_t *lo, uintptr_t *hi) { return span_of(t, lo, hi) == 1; }

int vt_view_is_dense(const vt_tensor *t) {
    if (t->ndim == 0) return 1;
    if (t->ndim == 1) return t->sizes[0] < 2 || t->strides[0] == 1;
    /* PyTorch's compute_non_overlapping_and_dense: dims of size < 2 last,
     * the others by increasing stride; the strides must then be the running
     * products of the sizes. */
    int perm[VT_MAX_DIMS];
    int n = 0;
    for (int32_t i = 0; i < t->ndim; i++) {
        if (t->sizes[i] < 2) continue;
        int j = n++;
        while (j > 0 && t->strides[perm[j - 1]] > t->strides[i]) {
            perm[j] = perm[j - 1];
            j--;
        }
        perm[j] = i;
    }
    int64_t require = 1;
    for (int k = 0; k < n; k++) {
        if (t->strides[perm[k]] != require) return 0;
        require *= t->sizes[perm[k]];
    }
    return 1;
}

int vt_view_is_dense_forward(const vt_tensor *t) {
    if (!vt_view_is_dense(t)) return 0;
    for (int32_t d = 0; d < t->ndim; d++)
        if (t->strides[d] < 0) return 0;
    return 1;
}

int vt_view_internal_overlap(const vt_tensor *t) {
    if (vt_view_is_dense(t)) return 0;
    for (int32_t i = 0; i < t->ndim; i++)
        if (t->strides[i] == 0 && t->sizes[i] > 1) return 1;
    return 0;
}

static uintptr_t start_of(const vt_tensor *t) {
    return (uintptr_t)t->data + (uintptr_t)(t->offset * (int64_t)vt_dtype_size(t->dtype));
}

/* Same elements in the same order: same element size and start, and the
 * same sizes and strides once dims of size 1 are dropped. */
static int same_view(const vt_tensor *a, const vt_tensor *b) {
    if (vt_dtype_size(a->dtype) != vt_dtype_size(b->dtype) || start_of(a) != start_of(b)) return 0;
    int32_t i = 0, j = 0;
    for (;;) {
        while (i < a->ndim && a->sizes[i] == 1) i++;
        while (j < b->ndim && b->sizes[j] == 1) j++;
        if (i == a->ndim || j == b->ndim) return i == a->ndim && j == b->ndim;
        if (a->sizes[i] != b->sizes[j] || a->strides[i] != b->strides[j]) return 0;
        i++, j++;
    }
}

static uint64_t gcd_u64(uint64_t x, uint64_t y) {
    while (y) {
        uint64_t r = x % y;
        x = y;
        y = r;
    }
    return x;
}

/* Element addresses of a view are start + a combination of its byte
 * strides, so all of them are congruent to start modulo g, the gcd of both
 * views' strides. When the two starts differ by more than an element width
 * modulo g, no element of one can touch an element of the other (the
 * interleaved halves of x[:, 0::2] and x[:, 1::2]). */
static int provably_disjoint(const vt_tensor *a, const vt_tensor *b) {
    uint64_t ea = vt_dtype_size(a->dtype), eb = vt_dtype_size(b->dtype), g = 0;
    for (int32_t i = 0; i < a->ndim; i++)
        if (a->sizes[i] > 1) g = gcd_u64(g, (uint64_t)(a->strides[i] < 0 ? -a->strides[i] : a->strides[i]) * ea);
    for (int32_t i = 0; i < b->ndim; i++)
        if (b->sizes[i] > 1) g = gcd_u64(g, (uint64_t)(b->strides[i] < 0 ? -b->strides[i] : b->strides[i]) * eb);
    if (g == 0) return 0;
    /* the start difference modulo g, of the signed difference */
    const uint64_t d = (uint64_t)(start_of(a) - start_of(b));
    uint64_t r = (int64_t)d < 0 ? (g - ((uint64_t)0 - d) % g) % g : d % g;
    /* element of a at A, of b at B overlap iff -eb < A - B < ea */
    return r >= ea && g - r >= eb;
}

/* Whether some sum of i_k * s[k] with |i_k| < size[k] lies within w of
 * d: dims k.. of a geometry sorted by falling stride, rest[k] the farthest
 * those dims reach. Each stride is past what the smaller dims reach (the
 * caller checked), so at most two i_k leave a remainder they can reach. */
static int reaches(const uint64_t *s, const int64_t *size, const uint64_t *rest, int k, int n, int64_t d, uint64_t w) {
    const uint64_t ad = d < 0 ? (uint64_t)0 - (uint64_t)d : (uint64_t)d;
    if (ad >= rest[k] + w) return 0;
    if (k == n) return 1;
    int64_t i0 = d / (int64_t)s[k];
    if (d < 0 && (uint64_t)(-d) % s[k]) i0--; /* floor */
    for (int64_t i = i0; i <= i0 + 1; i++)
        if ((i < 0 ? -i : i) < size[k] && reaches(s, size, rest, k + 1, n, d - i * (int64_t)s[k], w)) return 1;
    return 0;
}

/* Two views of one geometry (element size, sizes, strides), one shifted
 * from the other (x[..., :20] and x[..., 20:]): an element of one meets one
 * of the other only if the shift is, within an element, a sum of strides
 * times index differences the sizes allow. Decided where each stride
 * passes what the smaller dims reach (a view that does not overlap
 * itself, laid out dim within dim); else not proven. */
static int shifted_disjoint(const vt_tensor *a, const vt_tensor *b) {
    const uint64_t es = vt_dtype_size(a->dtype);
    if (es != vt_dtype_size(b->dtype) || a->ndim != b->ndim) return 0;
    uint64_t s[VT_MAX_DIMS], rest[VT_MAX_DIMS + 1];
    int64_t size[VT_MAX_DIMS];
    int n = 0;
    for (int32_t i = 0; i < a->ndim; i++) {
        if (a->sizes[i] != b->sizes[i] || a->strides[i] != b->strides[i]) return 0;
        if (a->sizes[i] == 1) continue;
        const uint64_t st = (uint64_t)(a->strides[i] < 0 ? -a->strides[i] : a->strides[i]) * es;
        int j = n++;
        for (; j > 0 && s[j - 1] < st; j--) s[j] = s[j - 1], size[j] = size[j - 1];
        s[j] = st, size[j] = a->sizes[i];
    }
    rest[n] = 0;
    for (int k = n - 1; k >= 0; k--) {
        if (s[k] < rest[k + 1] + es) return 0;
        rest[k] = rest[k + 1] + (uint64_t)(size[k] - 1) * s[k];
    }
    return !reaches(s, size, rest, 0, n, (int64_t)(start_of(a) - start_of(b)), es);
}

/* vt_view_overlap for views whose byte spans [lo, hi) are known. */
static vt_overlap overlap_of(const vt_tensor *a, uintptr_t alo, uintptr_t ahi, const vt_tensor *b, uintptr_t blo,
                             uintptr_t bhi) {
    if (ahi <= blo || bhi <= alo) return VT_OVERLAP_NO;
    if (same_view(a, b)) return VT_OVERLAP_FULL;
    if (vt_view_is_dense(a) && vt_view_is_dense(b)) {
        /* at::get_overlap_status: the same bytes with the same strides is
         * full overlap, any other intersection partial */
        if (alo == blo && ahi == bhi && a->ndim == b->ndim && vt_dtype_size(a->dtype) == vt_dtype_size(b->dtype)) {
            int same = 1;
            for (int32_t i = 0; i < a->ndim; i++) same &= a->strides[i] == b->strides[i];
            if (same) return VT_OVERLAP_FULL;
        }
        return VT_OVERLAP_PARTIAL;
    }
    return provably_disjoint(a, b) || shifted_disjoint(a, b) ? VT_OVERLAP_NO : VT_OVERLAP_TOO_HARD;
}

vt_overlap vt_view_overlap(const vt_tensor *a, const vt_tensor *b) {
    uintptr_t alo, ahi, blo, bhi;
    if (span_of(a, &alo, &ahi) != 1 || span_of(b, &blo, &bhi) != 1) return VT_OVERLAP_NO;
    return overlap_of(a, alo, ahi, b, blo, bhi);
}

/* ------------------------------------------------------------ staging */

/* Copy *t into a fresh contiguous block of dev (a queued copy, ahead of the
 * op) and point *t at the copy; p->scratch has room for the block. */
static vt_status stage(int dev, const char *name, vt_tensor *t, vt_prepared *p) {
    int64_t numel = vt_tensor_numel(t);
    size_t es = vt_dtype_size(t->dtype);
    void *mem = NULL;
    vt_status s = vt_hbm_alloc(dev, (size_t)numel * es, &mem);
    if (s != VT_OK) return vt_error_prefix(s, name);
    p->scratch[p->nscratch++] = mem;
    vt_tensor copy = vt_contiguous_like(t, mem);
    s = vt_op_copy(dev, name, &copy, t);
    if (s == VT_OK) *t = copy;
    return s;
}

/* ------------------------------------------------------------ prepare */

typedef struct span {
    uintptr_t lo, hi;
    int use;
} span;

static int span_cmp(const void *x, const void *y) {
    const span *a = x, *b = y;
    return a->lo < b->lo ? -1 : a->lo > b->lo;
}

static void init_prepared(vt_prepared *p) {
    p->n = 0;
    p->acc = p->inline_acc;
    p->nscratch = 0;
    p->scratch = p->inline_scratch;
    p->payload = NULL;
}

int vt_prepared_init(vt_prepared *p, int nacc) {
    init_prepared(p);
    if (nacc <= VT_ACCESS_INLINE) return 1;
    p->acc = malloc(sizeof(vt_access) * (size_t)nacc);
    if (p->acc) return 1;
    p->acc = p->inline_acc;
    return 0;
}

void vt_prepared_release(int dev, vt_prepared *p) {
    for (int i = 0; i < p->nscratch; i++) vt_hbm_free(dev, p->scratch[i]);
    if (p->scratch != p->inline_scratch) free(p->scratch);
    if (p->acc != p->inline_acc) free(p->acc);
    free(p->payload);
    init_prepared(p);
}

static vt_status device_mismatch(int dev, int other) {
    if (other < 0)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT,
                            "Expected all tensors to be on the same device, but found at least two devices, tpu:%d "
                            "and cpu!",
                            dev);
    return vt_set_error(VT_ERR_INVALID_ARGUMENT,
                        "Expected all tensors to be on the same device, but found at least two devices, tpu:%d and "
                        "tpu:%d!",
                        dev, other);
}

/* What a (write, read) pair, of the byte spans ws and rs, needs: 0 nothing,
 * 1 stage the read, -1 refuse. */
static int pair_action(const vt_use *w, const span *ws, const vt_use *r, const span *rs) {
    switch (overlap_of(w->t, ws->lo, ws->hi, r->t, rs->lo, rs->hi)) {
    case VT_OVERLAP_NO: return 0;
    case VT_OVERLAP_FULL:
        if (r->flags & VT_USE_ALIAS_OK) return 0;
        return r->flags & VT_USE_STAGE ? 1 : -1;
    case VT_OVERLAP_PARTIAL: return r->flags & VT_USE_STAGE ? 1 : -1;
    case VT_OVERLAP_TOO_HARD: return 1; /* PyTorch lets it run; a copy makes the result well defined */
    }
    return 0;
}

vt_status vt_uses_prepare(int dev, const char *name, vt_use *uses, int n, vt_prepared *p) {
    init_prepared(p);
    if (!name) name = "vt_op";
    vt_status s = vt_check_device(dev);
    if (s != VT_OK) return s;
    if (n < 0 || (n > 0 && !uses)) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: bad use list", name);
    if (n == 0) return VT_OK;
    /* per use: its span, the access it resolved to (-1: empty), whether to stage it */
    span local_spans[16];
    int local_acc_of[16];
    unsigned char local_stage[16];
    span *sp = local_spans;
    int *acc_of = local_acc_of;
    unsigned char *stage_it = local_stage;
    void *heap = NULL;
    if (n > 16) {
        heap = malloc((sizeof(span) + sizeof(int) + 1) * (size_t)n);
        sp = heap;
        acc_of = heap ? (int *)(sp + n) : NULL;
        stage_it = heap ? (unsigned char *)(acc_of + n) : NULL;
    }
    if ((n > 16 && !heap) || !vt_prepared_init(p, n)) {
        s = vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: out of host memory for %d tensor uses", name, n);
        goto fail;
    }
    memset(stage_it, 0, (size_t)n);

    /* The bytes each tensor spans (empty tensors touch no memory). */
    int ns = 0;
    for (int i = 0; i < n; i++) {
        const vt_use *u = &uses[i];
        acc_of[i] = -1;
        if (!u->t || !(u->flags & (VT_USE_READ | VT_USE_WRITE))) {
            s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: use %d has no tensor or no mode", name, i);
            goto fail;
        }
        uintptr_t lo, hi;
        int k = span_of(u->t, &lo, &hi);
        if (k < 0) {
            s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: tensor %d has a malformed or overflowing view", name, i);
            goto fail;
        }
        if (k == 1) {
            acc_of[i] = ns;
            sp[ns++] = (span){lo, hi, i};
        }
    }

    /* Where each lives: the op's device's blocks in one locked pass, any
     * other memory (another device's, the host's) looked up one by one. */
    p->n = ns;
    vt_hbm_resolve_local(dev, ns, &sp[0].lo, &sp[0].hi, sizeof *sp, p->acc, stage_it);
    for (int x = 0; x < ns; x++) {
        const vt_use *u = &uses[sp[x].use];
        vt_access *a = &p->acc[x];
        if (!stage_it[x]) {
            int where = -1;
            s = vt_hbm_resolve(u->flags & VT_USE_ANY_DEVICE ? -1 : dev, sp[x].lo, sp[x].hi, a, &where);
            if (s != VT_OK) {
                /* device memory, but no live block holds the whole view; or host memory */
                s = where >= 0 ? vt_error_prefix(s, name) : device_mismatch(dev, -1);
                goto fail;
            }
            if (where != dev && !(u->flags & VT_USE_ANY_DEVICE)) {
                s = device_mismatch(dev, where);
                goto fail;
            }
        }
        a->flags = (a->flags & VT_ACCESS_COVERS) | (u->flags & (VT_USE_READ | VT_USE_WRITE));
        if (!(u->flags & VT_USE_WRITE) || !vt_view_is_dense(u->t)) a->flags &= ~VT_ACCESS_COVERS;
        if ((u->flags & VT_USE_WRITE) && !(u->flags & VT_USE_SAME_VALUE) && vt_view_internal_overlap(u->t)) {
            s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s", kInternalMsg);
            goto fail;
        }
    }
    memset(stage_it, 0, (size_t)n);

    /* Pairs whose bytes intersect: sorted by start, each span meets only
     * the spans that start before it ends. */
    if (ns > 16) {
        qsort(sp, (size_t)ns, sizeof *sp, span_cmp);
    } else {
        for (int x = 1; x < ns; x++) /* a few spans: insertion sort */
            for (int y = x; y > 0 && sp[y - 1].lo > sp[y].lo; y--) {
                span t = sp[y];
                sp[y] = sp[y - 1];
                sp[y - 1] = t;
            }
    }
    for (int x = 0; x < ns; x++) {
        for (int y = x + 1; y < ns && sp[y].lo < sp[x].hi; y++) {
            const vt_use *a = &uses[sp[x].use], *b = &uses[sp[y].use];
            if (a->group && b->group && a->group != b->group) continue;
            int aw = (a->flags & VT_USE_WRITE) != 0, bw = (b->flags & VT_USE_WRITE) != 0;
            if (!aw && !bw) continue;
            if (aw && bw) {
                /* two outputs in the same memory: the result would depend on write order */
                vt_overlap o = overlap_of(a->t, sp[x].lo, sp[x].hi, b->t, sp[y].lo, sp[y].hi);
                if (o == VT_OVERLAP_FULL || o == VT_OVERLAP_PARTIAL) {
                    s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s", kPartialMsg);
                    goto fail;
                }
            }
            /* a use that reads and writes is checked as the write against
             * the other's read, and the other way round */
            for (int dir = 0; dir < 2; dir++) {
                const vt_use *w = dir ? b : a, *r = dir ? a : b;
                const span *ws = dir ? &sp[y] : &sp[x], *rs = dir ? &sp[x] : &sp[y];
                int ri = dir ? sp[x].use : sp[y].use;
                if (!(w->flags & VT_USE_WRITE) || !(r->flags & VT_USE_READ)) continue;
                int act = pair_action(w, ws, r, rs);
                if (act > 0 && (r->flags & VT_USE_WRITE)) act = -1; /* an in-place operand cannot be a copy */
                if (act < 0) {
                    s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s", kPartialMsg);
                    goto fail;
                }
                if (act > 0) stage_it[ri] = 1;
            }
        }
    }

    /* Copies of the inputs that need them, queued ahead of the op; the op's
     * access then reads the copy (a failure upstream still flows through
     * it: the copy itself reads the original). */
    int nstage = 0;
    for (int i = 0; i < n; i++) nstage += stage_it[i];
    if (nstage > VT_STAGE_INLINE && !(p->scratch = malloc(sizeof(void *) * (size_t)nstage))) {
        p->scratch = p->inline_scratch;
        s = vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: out of host memory", name);
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        if (!stage_it[i]) continue;
        if ((s = stage(dev, name, uses[i].t, p)) != VT_OK) goto fail;
        uintptr_t lo, hi;
        int where = -1;
        vt_access *a = &p->acc[acc_of[i]];
        if (span_of(uses[i].t, &lo, &hi) != 1 || (s = vt_hbm_resolve(dev, lo, hi, a, &where)) != VT_OK) {
            s = vt_set_error(VT_ERR_INTERNAL, "%s: cannot resolve a staged copy", name);
            goto fail;
        }
        a->flags = VT_USE_READ;
    }
    for (int x = 0; x < p->n; x++)
        if (p->acc[x].flags & VT_USE_WRITE) vt_hbm_note_write(&p->acc[x]);
    free(heap);
    return VT_OK;

fail:
    free(heap);
    vt_prepared_release(dev, p);
    return s;
}

vt_status vt_enqueue_uses(int dev, const char *name, vt_kernel_fn fn, void *args, size_t args_size, vt_use *uses,
                          int n) {
    vt_prepared p;
    vt_status s = vt_uses_prepare(dev, name, uses, n, &p);
    if (s != VT_OK) return s;
    return vt_enqueue_prepared(dev, name, fn, args, args_size, &p, VT_ENQ_AUTO);
}

/* ------------------------------------------------------------ host reads and writes */

static vt_status resolve_view(const vt_tensor *t, vt_access *a, int *empty) {
    uintptr_t lo, hi;
    int where = -1;
    *empty = 0;
    if (!t) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "tensor descriptor is NULL");
    int k = span_of(t, &lo, &hi);
    if (k < 0) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "a malformed or overflowing tensor view");
    if (k == 0) {
        *empty = 1;
        return VT_OK;
    }
    return vt_hbm_resolve(-1, lo, hi, a, &where);
}

vt_status vt_check_readable(const vt_tensor *t) {
    vt_status s = vt_check_runtime();
    if (s != VT_OK) return s;
    vt_access a;
    int empty;
    if ((s = resolve_view(t, &a, &empty)) != VT_OK || empty) return s;
    vt_fault *f = vt_hbm_fault(&a);
    if (!f) return VT_OK;
    s = vt_fault_raise(f);
    vt_fault_unref(f);
    return s;
}

void vt_mark_written(const vt_tensor *t) {
    if (vt_check_runtime() != VT_OK || !t) return;
    vt_access a;
    int empty;
    if (resolve_view(t, &a, &empty) != VT_OK || empty) return;
    vt_hbm_note_write(&a);
    if ((a.flags & VT_ACCESS_COVERS) && vt_view_is_dense(t)) vt_hbm_unpoison(&a);
}

vt_version vt_view_version(const vt_tensor *t) {
    vt_access a;
    int empty;
    if (vt_check_runtime() != VT_OK || !t || resolve_view(t, &a, &empty) != VT_OK || empty) {
        vt_clear_error();
        return (vt_version){0, 0};
    }
    return vt_hbm_version(&a);
}
