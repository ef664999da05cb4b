/* foreach.c — the multi-tensor (_foreach_*) driver: one call runs an op over
 * a whole list of tensors, its work cut into element ranges across all the
 * tensors (so many small tensors and one large one both fill the pool).
 * Contiguous f32 runs go straight to the ISA block kernels; other dtypes and
 * strides are staged through small float/double buffers. */
#include <stdatomic.h>
#include <stdlib.h>

#include "kernels/optim/optim.h"

#define STAGE 512                /* elements staged per block: L1-sized buffers */
#define FE_GRAIN 32768           /* elements per parallel task */
#define NORM_BLOCK 16384         /* fixed partial-sum blocks: results independent of threads */

static const char *const fe_names[VT_FOREACH_OP_COUNT] = {
    "add", "sub", "mul", "div", "maximum", "minimum", "clamp_min", "clamp_max", "pow", "rpow",
    "addcmul", "addcdiv", "lerp", "neg", "abs", "sqrt", "exp", "sign", "reciprocal", "zero", "copy",
    "norm", "max",
};

const char *vt_foreach_op_name(vt_foreach_op op) {
    return (unsigned)op < VT_FOREACH_OP_COUNT ? fe_names[op] : "invalid";
}

static int is_float_dt(vt_dtype d) { return d == VT_F32 || d == VT_BF16 || d == VT_F16 || d == VT_F64; }
static int fe_is_reduction(vt_foreach_op op) { return op == VT_FOREACH_NORM || op == VT_FOREACH_MAX; }
static int fe_needs_a(vt_foreach_op op) { return op != VT_FOREACH_ZERO; }

static vt_status check_list_tensor(const char *what, int64_t i, const vt_tensor *t) {
    vt_status s = vt_tensor_validate(t, what);
    if (s != VT_OK) return s;
    if (!is_float_dt(t->dtype))
        return vt_set_error(VT_ERR_UNSUPPORTED, "%s[%lld]: dtype %s is not a float dtype", what, (long long)i,
                            vt_dtype_name(t->dtype));
    if (!t->data && vt_tensor_numel(t) > 0)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s[%lld] has no data", what, (long long)i);
    return VT_OK;
}

static vt_status check_bcast(const char *what, int64_t i, const vt_tensor *t, const vt_tensor *out) {
    vt_tensor tmp;
    if (vt_broadcast_to(t, out->ndim, out->sizes, &tmp) != VT_OK)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s[%lld] does not broadcast to the output's shape", what,
                            (long long)i);
    return VT_OK;
}

vt_status vt_foreach_check(const vt_foreach_args *x) {
    if (!x) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "foreach: args is NULL");
    if ((unsigned)x->op >= VT_FOREACH_OP_COUNT)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "foreach: invalid op %d", (int)x->op);
    if (x->n < 0) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "foreach: negative list length");
    if (x->n == 0) return VT_OK;
    vt_foreach_op op = x->op;
    if (!x->out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "foreach %s: out is NULL", fe_names[op]);
    if (fe_needs_a(op) && !x->a) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "foreach %s: self is NULL", fe_names[op]);
    if ((op == VT_FOREACH_ADDCMUL || op == VT_FOREACH_ADDCDIV) && (!x->b || !x->c))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "foreach %s: tensor1 and tensor2 are required", fe_names[op]);
    if (op == VT_FOREACH_LERP && !x->b)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "foreach lerp: end tensors are required");
    if (x->scalar_tensor) {
        vt_status s = check_list_tensor("scalar tensor", 0, x->scalar_tensor);
        if (s != VT_OK) return s;
        if (vt_tensor_numel(x->scalar_tensor) != 1)
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "foreach %s: the scalar tensor has %lld elements, not 1",
                                fe_names[op], (long long)vt_tensor_numel(x->scalar_tensor));
    }
    for (int64_t i = 0; i < x->n; i++) {
        vt_status s = check_list_tensor("out", i, &x->out[i]);
        if (s == VT_OK && x->a) s = check_list_tensor("self", i, &x->a[i]);
        if (s == VT_OK && x->b) s = check_list_tensor("other", i, &x->b[i]);
        if (s == VT_OK && x->c) s = check_list_tensor("tensor2", i, &x->c[i]);
        if (s != VT_OK) return s;
        if (fe_is_reduction(op)) {
            if (vt_tensor_numel(&x->out[i]) != 1)
                return vt_set_error(VT_ERR_INVALID_ARGUMENT, "foreach %s: out[%lld] must have one element",
                                    fe_names[op], (long long)i);
            if (op == VT_FOREACH_MAX && vt_tensor_numel(&x->a[i]) == 0)
                return vt_set_error(VT_ERR_INVALID_ARGUMENT,
                                    "max(): Expected reduction dim to be specified for input.numel() == 0. "
                                    "Specify the reduction dim with the 'dim' argument.");
            continue;
        }
        if (x->a && (s = check_bcast("self", i, &x->a[i], &x->out[i])) != VT_OK) return s;
        if (x->b && (s = check_bcast("other", i, &x->b[i], &x->out[i])) != VT_OK) return s;
        if (x->c && (s = check_bcast("tensor2", i, &x->c[i], &x->out[i])) != VT_OK) return s;
    }
    if (op == VT_FOREACH_NORM) {
        double p = x->scalar;
        if (!(p >= 0) && !isinf(p))
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "foreach norm: ord %g is not supported", p);
    }
    return VT_OK;
}

/* ------------------------------------------------------------ per-tensor plan */

typedef struct fe_item {
    vt_tensor ops[4]; /* out, a, b, c (broadcast to out's shape) */
    int nops;         /* how many of ops are present: out [a [b [c]]] */
    int has_a, has_b, has_c;
    int f64;
    int fast; /* every operand F32, contiguous, full shape */
    optim_fe_f32 p32;
    optim_fe_f64 p64;
} fe_item;

int vt_foreach_in_place(const vt_foreach_args *x, int64_t i) {
    if (x->in_place) return x->in_place > 0;
    return x->a && x->a[i].data == x->out[i].data && x->a[i].offset == x->out[i].offset;
}

static double read_scalar_tensor(const vt_tensor *t) {
    double v;
    vt_convert(t->dtype, (const char *)vt_base(t), 0, VT_F64, &v, 0, 1);
    return v;
}

static float round_to(vt_dtype dt, double v) {
    if (dt == VT_BF16) return vt_bf16_to_f32(vt_f32_to_bf16((float)v));
    if (dt == VT_F16) return vt_f16_to_f32(vt_f32_to_f16((float)v));
    return (float)v;
}

static void plan_item(const vt_foreach_args *x, int64_t i, double st, int has_st, fe_item *it) {
    memset(it, 0, sizeof *it);
    const vt_tensor *out = &x->out[i];
    it->ops[0] = *out;
    it->has_a = x->a != NULL;
    it->has_b = x->b != NULL;
    it->has_c = x->c != NULL;
    int k = 1;
    /* Operands keep a fixed slot order; a missing middle one reuses out's view (never read). */
    if (it->has_a) vt_broadcast_to(&x->a[i], out->ndim, out->sizes, &it->ops[1]); else it->ops[1] = *out;
    if (it->has_a || it->has_b || it->has_c) k = 2;
    if (it->has_b) { vt_broadcast_to(&x->b[i], out->ndim, out->sizes, &it->ops[2]); k = 3; }
    else it->ops[2] = *out;
    if (it->has_c) { vt_broadcast_to(&x->c[i], out->ndim, out->sizes, &it->ops[3]); k = 4; }
    it->nops = k;
    it->f64 = 0;
    for (int j = 0; j < k; j++)
        if (it->ops[j].dtype == VT_F64) it->f64 = 1;
    double s = has_st ? st : (x->scalars ? x->scalars[i] : x->scalar);
    double alpha = x->op == VT_FOREACH_SUB ? -x->alpha : x->alpha;
    it->p32.op = it->p64.op = (int)x->op;
    it->p64.s = s;
    it->p64.alpha = alpha;
    it->p32.s = (float)s;
    it->p32.alpha = it->has_b ? round_to(out->dtype, alpha) : (float)alpha;
    if (!it->has_b && (x->op == VT_FOREACH_ADD || x->op == VT_FOREACH_SUB)) {
        /* add/sub(t, Scalar or 0-dim tensor, alpha): CPU's TensorIterator casts
         * the scalar operand to the common dtype, so a BF16/F16 tensor adds
         * the scalar rounded to BF16/F16 (unlike mul/div, whose reduced-float
         * scalar branch keeps it in float), and its vector loop computes
         * fma(S, alpha, t) with alpha rounded to the dtype too. */
        it->p32.s = round_to(out->dtype, s);
        it->p32.alpha = round_to(out->dtype, alpha);
    }
    if (x->op == VT_FOREACH_MUL && !it->has_b && !has_st && it->has_a && vt_foreach_in_place(x, i)) {
        /* CPU PyTorch's in-place _foreach_mul_(BF16/F16 list, Scalar or
         * ScalarList) multiplies by the scalar rounded to the dtype, while the
         * out-of-place _foreach_mul (and div/div_) keep it in float:
         * measured on PyTorch 2.13. An in-place call is out aliasing self. */
        it->p32.s = round_to(out->dtype, s);
    }
    int fast = !it->f64;
    for (int j = 0; j < k && fast; j++) {
        const vt_tensor *t = &it->ops[j];
        if (j == 1 && !it->has_a) continue;
        if (t->dtype != VT_F32 || !vt_tensor_is_contiguous(t)) fast = 0;
    }
    it->fast = fast;
}

static char *elem_ptr(const vt_tensor *t) {
    return vt_base(t);
}

/* ------------------------------------------------------------ staged runs */

typedef struct fe_run_ctx {
    const fe_item *it;
    const optim_table *tab;
    int ref;
} fe_run_ctx;

static void stage_in(const fe_item *it, int j, char *p, int64_t s, int64_t m, vt_dtype to, void *buf) {
    vt_convert(it->ops[j].dtype, p, s, to, buf, 1, m);
}

static void fe_run(void *vctx, char *const *ptrs, const int64_t *strides, int64_t n) {
    const fe_run_ctx *c = vctx;
    const fe_item *it = c->it;
    if (it->f64) {
        double bo[STAGE], ba[STAGE], bb[STAGE], bc[STAGE];
        for (int64_t o = 0; o < n; o += STAGE) {
            int64_t m = n - o < STAGE ? n - o : STAGE;
            if (it->has_a) stage_in(it, 1, ptrs[1] + o * strides[1] * (int64_t)vt_dtype_size(it->ops[1].dtype), strides[1], m, VT_F64, ba);
            if (it->has_b) stage_in(it, 2, ptrs[2] + o * strides[2] * (int64_t)vt_dtype_size(it->ops[2].dtype), strides[2], m, VT_F64, bb);
            if (it->has_c) stage_in(it, 3, ptrs[3] + o * strides[3] * (int64_t)vt_dtype_size(it->ops[3].dtype), strides[3], m, VT_F64, bc);
            if (c->ref) {
                for (int64_t e = 0; e < m; e++)
                    optim_fe_f64_block(&it->p64, 1, bo + e, ba + e, it->has_b ? bb + e : NULL, it->has_c ? bc + e : NULL);
            } else {
                optim_fe_f64_block(&it->p64, m, bo, ba, it->has_b ? bb : NULL, it->has_c ? bc : NULL);
            }
            vt_convert(VT_F64, bo, 1, it->ops[0].dtype, ptrs[0] + o * strides[0] * (int64_t)vt_dtype_size(it->ops[0].dtype), strides[0], m);
        }
        return;
    }
    float bo[STAGE], ba[STAGE], bb[STAGE], bc[STAGE];
    for (int64_t o = 0; o < n; o += STAGE) {
        int64_t m = n - o < STAGE ? n - o : STAGE;
        if (it->has_a) stage_in(it, 1, ptrs[1] + o * strides[1] * (int64_t)vt_dtype_size(it->ops[1].dtype), strides[1], m, VT_F32, ba);
        if (it->has_b) stage_in(it, 2, ptrs[2] + o * strides[2] * (int64_t)vt_dtype_size(it->ops[2].dtype), strides[2], m, VT_F32, bb);
        if (it->has_c) stage_in(it, 3, ptrs[3] + o * strides[3] * (int64_t)vt_dtype_size(it->ops[3].dtype), strides[3], m, VT_F32, bc);
        if (c->ref) {
            for (int64_t e = 0; e < m; e++)
                optim_table_portable.foreach(&it->p32, 1, bo + e, ba + e, it->has_b ? bb + e : NULL, it->has_c ? bc + e : NULL);
        } else {
            c->tab->foreach(&it->p32, m, bo, ba, it->has_b ? bb : NULL, it->has_c ? bc : NULL);
        }
        vt_convert(VT_F32, bo, 1, it->ops[0].dtype, ptrs[0] + o * strides[0] * (int64_t)vt_dtype_size(it->ops[0].dtype), strides[0], m);
    }
}

/* Elements [lo, hi) of one tensor. */
static void fe_item_range(const fe_item *it, const optim_table *tab, int ref, int64_t lo, int64_t hi) {
    if (it->fast && !ref) {
        float *o = (float *)elem_ptr(&it->ops[0]) + lo;
        const float *a = it->has_a ? (const float *)elem_ptr(&it->ops[1]) + lo : NULL;
        const float *b = it->has_b ? (const float *)elem_ptr(&it->ops[2]) + lo : NULL;
        const float *c = it->has_c ? (const float *)elem_ptr(&it->ops[3]) + lo : NULL;
        tab->foreach(&it->p32, hi - lo, o, a, b, c);
        return;
    }
    vt_iter iter;
    vt_iter_init(&iter, it->nops, it->ops);
    fe_run_ctx c = {it, tab, ref};
    vt_iter_range(&iter, lo, hi, fe_run, &c);
}

/* ------------------------------------------------------------ one tensor as a plan
 * Tensor i of a (non-reducing) foreach op as an elementwise plan: the same
 * per-element code the multi-tensor kernel runs on it (plan_item's scalars,
 * the ISA table on f32 runs, f32/f64 staging otherwise), so DeferAndFuse can
 * record an optimizer's foreach ops per parameter and fuse each
 * parameter's chain, bit for bit as the multi-tensor kernel computes it. */

typedef struct fe_plan_ctx {
    vt_ew_head h; /* operands: out, then a, b, c as present */
    int has_a, has_b, has_c, f64;
    vt_dtype dt[4];
    optim_fe_f32 p32;
    optim_fe_f64 p64;
    const optim_table *tab;
} fe_plan_ctx;
_Static_assert(sizeof(fe_plan_ctx) <= VT_EW_PLAN_BYTES, "fe_plan_ctx outgrew a plan");

/* Where operand k of a chunk comes from: read in place (the working dtype,
 * unit stride), a buffer filled once per row (a broadcast value, stride 0:
 * an optimizer's per-parameter scalars), or converted chunk by chunk. */
enum { FE_IN_PLACE, FE_ONCE, FE_CONVERT };

static int fe_source(vt_dtype d, int64_t stride, vt_dtype w) {
    if (d == w && stride == 1) return FE_IN_PLACE;
    return stride == 0 ? FE_ONCE : FE_CONVERT;
}

static void fe_plan_row(const fe_plan_ctx *c, char *const *p, const int64_t *s, int64_t n) {
    const int na = c->has_a, nb = na + c->has_b; /* operand slots of a, b, c: 1, 1 + na, 1 + nb */
    const int slot[3] = {1, 1 + na, 1 + nb};
    const int has[3] = {c->has_a, c->has_b, c->has_c};
    const vt_dtype w = c->f64 ? VT_F64 : VT_F32;
    const size_t ws = vt_dtype_size(w);
    _Alignas(64) unsigned char bo[STAGE * 8], bin[3][STAGE * 8];
    const int out_in_place = c->dt[0] == w && s[0] == 1;
    int src[3] = {0, 0, 0}, direct = out_in_place;
    for (int j = 0; j < 3; j++) {
        if (!has[j]) continue;
        src[j] = fe_source(c->dt[slot[j]], s[slot[j]], w);
        direct &= src[j] == FE_IN_PLACE;
        if (src[j] == FE_ONCE) /* the one value, as many times as a chunk takes */
            vt_convert(c->dt[slot[j]], p[slot[j]], 0, w, bin[j], 1, n < STAGE ? n : STAGE);
    }
    /* every operand in place: the whole row in one call, no chunks */
    const int64_t chunk = direct ? n : STAGE;
    for (int64_t o = 0; o < n; o += chunk) {
        const int64_t m = n - o < chunk ? n - o : chunk;
        const void *in[3] = {NULL, NULL, NULL};
        for (int j = 0; j < 3; j++) {
            if (!has[j]) continue;
            const vt_dtype d = c->dt[slot[j]];
            char *at = p[slot[j]] + o * s[slot[j]] * (int64_t)vt_dtype_size(d);
            if (src[j] == FE_IN_PLACE) in[j] = at;
            else {
                if (src[j] == FE_CONVERT) vt_convert(d, at, s[slot[j]], w, bin[j], 1, m);
                in[j] = bin[j];
            }
        }
        void *out = out_in_place ? (void *)(p[0] + o * (int64_t)ws) : (void *)bo;
        if (c->f64)
            optim_fe_f64_block(&c->p64, m, (double *)out, (const double *)in[0], (const double *)in[1],
                               (const double *)in[2]);
        else
            c->tab->foreach(&c->p32, m, (float *)out, (const float *)in[0], (const float *)in[1],
                            (const float *)in[2]);
        if (!out_in_place) vt_convert(w, bo, 1, c->dt[0], p[0] + o * s[0] * (int64_t)vt_dtype_size(c->dt[0]), s[0], m);
    }
}

static void fe_plan_block(void *vctx, char *const *ptrs, const int64_t *s, int64_t n, int64_t rows,
                          const int64_t *rs) {
    const fe_plan_ctx *c = vctx;
    char *p[4];
    for (int k = 0; k < c->h.it.nops; k++) p[k] = ptrs[k];
    for (int64_t r = 0; r < rows; r++) {
        fe_plan_row(c, p, s, n);
        for (int k = 0; k < c->h.it.nops; k++) p[k] += rs[k];
    }
}

static void fe_plan_range(void *vctx, int64_t b, int64_t e) {
    fe_plan_ctx *c = vctx;
    vt_iter_blocks(&c->h.it, b, e, fe_plan_block, c);
}

int vt_foreach_item_f32_scalars(const vt_foreach_args *x, int64_t i, float *s, float *alpha) {
    if (!vt_foreach_fusable(x) || i < 0 || i >= x->n) return 0;
    fe_item it;
    plan_item(x, i, 0, 0, &it);
    *s = it.p32.s;
    *alpha = it.p32.alpha;
    return !it.f64;
}

int vt_foreach_fusable(const vt_foreach_args *x) {
    return x && (unsigned)x->op < VT_FOREACH_OP_COUNT && !fe_is_reduction(x->op) && !x->scalar_tensor;
}

vt_status vt_foreach_item_plan(vt_ew_plan *p, const vt_foreach_args *x, int64_t i) {
    if (!vt_foreach_fusable(x) || i < 0 || i >= x->n)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "foreach: tensor %lld of this op is not a plan", (long long)i);
    fe_item it;
    plan_item(x, i, 0, 0, &it);
    fe_plan_ctx *c = (fe_plan_ctx *)(void *)p->ctx;
    vt_tensor ops[4];
    int k = 0;
    ops[k++] = it.ops[0];
    if (it.has_a) ops[k++] = it.ops[1];
    if (it.has_b) ops[k++] = it.ops[2];
    if (it.has_c) ops[k++] = it.ops[3];
    for (int j = 0; j < k; j++) c->dt[j] = ops[j].dtype;
    vt_iter_init(&c->h.it, k, ops);
    atomic_init(&c->h.failed, 0);
    c->has_a = it.has_a, c->has_b = it.has_b, c->has_c = it.has_c, c->f64 = it.f64;
    c->p32 = it.p32;
    c->p64 = it.p64;
    c->tab = optim_active_table();
    p->range = fe_plan_range;
    return VT_OK;
}

/* ------------------------------------------------------------ reductions */

typedef struct norm_acc {
    double v;
    int nan;
} norm_acc;

static void norm_block(vt_foreach_op op, double p, const vt_tensor *t, int64_t lo, int64_t hi, norm_acc *acc);

typedef struct fe_job {
    const vt_foreach_args *x;
    fe_item *items;
    int64_t *start; /* n+1 prefix offsets (elements, or blocks for reductions) */
    int64_t n;
    const optim_table *tab;
    int ref;
    norm_acc *partials;
} fe_job;

static int64_t find_item(const int64_t *start, int64_t n, int64_t pos) {
    int64_t lo = 0, hi = n; /* start[lo] <= pos < start[hi] */
    while (hi - lo > 1) {
        int64_t mid = (lo + hi) / 2;
        if (start[mid] <= pos) lo = mid;
        else hi = mid;
    }
    return lo;
}

static void fe_chunk(void *vctx, int64_t begin, int64_t end) {
    const fe_job *j = vctx;
    int64_t i = find_item(j->start, j->n, begin);
    int64_t pos = begin;
    while (pos < end && i < j->n) {
        int64_t s0 = j->start[i], s1 = j->start[i + 1];
        if (s1 > pos) {
            int64_t hi = end < s1 ? end : s1;
            fe_item_range(&j->items[i], j->tab, j->ref, pos - s0, hi - s0);
            pos = hi;
        }
        i++;
    }
}

static void red_chunk(void *vctx, int64_t begin, int64_t end) {
    const fe_job *j = vctx;
    for (int64_t blk = begin; blk < end; blk++) {
        int64_t i = find_item(j->start, j->n, blk);
        while (j->start[i + 1] <= blk) i++;
        const vt_tensor *t = &j->x->a[i];
        int64_t numel = vt_tensor_numel(t);
        int64_t lo = (blk - j->start[i]) * NORM_BLOCK;
        int64_t hi = lo + NORM_BLOCK < numel ? lo + NORM_BLOCK : numel;
        norm_block(j->x->op, j->x->scalar, t, lo, hi, &j->partials[blk]);
    }
}

typedef struct norm_run_ctx {
    vt_foreach_op op;
    double p;
    vt_dtype dt;
    norm_acc *acc;
} norm_run_ctx;

static void norm_run(void *vctx, char *const *ptrs, const int64_t *strides, int64_t n) {
    norm_run_ctx *c = vctx;
    double buf[STAGE];
    double acc = c->acc->v;
    for (int64_t o = 0; o < n; o += STAGE) {
        int64_t m = n - o < STAGE ? n - o : STAGE;
        vt_convert(c->dt, ptrs[0] + o * strides[0] * (int64_t)vt_dtype_size(c->dt), strides[0], VT_F64, buf, 1, m);
        for (int64_t e = 0; e < m; e++) {
            double v = buf[e];
            if (v != v) c->acc->nan = 1;
            if (c->op == VT_FOREACH_MAX) {
                if (v > acc) acc = v;
                continue;
            }
            double av = fabs(v);
            if (c->p == 2) acc += av * av;
            else if (c->p == 1) acc += av;
            else if (isinf(c->p) && c->p > 0) acc = av > acc ? av : acc;
            else if (isinf(c->p)) acc = av < acc ? av : acc;
            else if (c->p == 0) acc += av != 0;
            else acc += pow(av, c->p);
        }
    }
    c->acc->v = acc;
}

static double norm_identity(vt_foreach_op op, double p) {
    if (op == VT_FOREACH_MAX) return -INFINITY;
    if (isinf(p) && p < 0) return INFINITY;
    return 0;
}

static void norm_block(vt_foreach_op op, double p, const vt_tensor *t, int64_t lo, int64_t hi, norm_acc *acc) {
    acc->v = norm_identity(op, p);
    acc->nan = 0;
    vt_iter iter;
    vt_iter_init(&iter, 1, t);
    norm_run_ctx c = {op, p, t->dtype, acc};
    if (hi > lo) vt_iter_range(&iter, lo, hi, norm_run, &c);
}

static double norm_combine(vt_foreach_op op, double p, double acc, double v) {
    if (op == VT_FOREACH_MAX) return v > acc ? v : acc;
    if (isinf(p)) return p > 0 ? (v > acc ? v : acc) : (v < acc ? v : acc);
    return acc + v;
}

static double norm_finish(vt_foreach_op op, double p, double acc) {
    if (op == VT_FOREACH_MAX || isinf(p) || p == 0 || p == 1) return acc;
    if (p == 2) return sqrt(acc);
    return pow(acc, 1.0 / p);
}

static vt_status run_reduction(const vt_foreach_args *x, int ref) {
    int64_t n = x->n;
    int64_t *start = malloc((size_t)(n + 1) * sizeof *start);
    if (!start) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "foreach %s: out of host memory", fe_names[x->op]);
    start[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t numel = vt_tensor_numel(&x->a[i]);
        int64_t nb = (numel + NORM_BLOCK - 1) / NORM_BLOCK;
        if (nb == 0) nb = 1;
        start[i + 1] = start[i] + nb;
    }
    int64_t total = start[n];
    norm_acc *partials = malloc((size_t)total * sizeof *partials);
    if (!partials) {
        free(start);
        return vt_set_error(VT_ERR_OUT_OF_MEMORY, "foreach %s: out of host memory", fe_names[x->op]);
    }
    if (ref) {
        /* Plain logical-order accumulation of each tensor. */
        for (int64_t i = 0; i < n; i++) {
            norm_acc a;
            norm_block(x->op, x->scalar, &x->a[i], 0, vt_tensor_numel(&x->a[i]), &a);
            double r = a.nan ? NAN : norm_finish(x->op, x->scalar, a.v);
            vt_convert(VT_F64, &r, 0, x->out[i].dtype, elem_ptr(&x->out[i]), 0, 1);
        }
    } else {
        fe_job j = {x, NULL, start, n, NULL, 0, partials};
        vt_parallel_for(total, 1, red_chunk, &j);
        for (int64_t i = 0; i < n; i++) {
            double acc = norm_identity(x->op, x->scalar);
            int nan = 0;
            for (int64_t b = start[i]; b < start[i + 1]; b++) {
                acc = norm_combine(x->op, x->scalar, acc, partials[b].v);
                nan |= partials[b].nan;
            }
            double r = nan ? NAN : norm_finish(x->op, x->scalar, acc);
            vt_convert(VT_F64, &r, 0, x->out[i].dtype, elem_ptr(&x->out[i]), 0, 1);
        }
    }
    free(partials);
    free(start);
    return VT_OK;
}

/* ------------------------------------------------------------ aliasing lists
 * CPU PyTorch runs a foreach op tensor by tensor, in list order. When one
 * entry's output is memory another entry reads or writes (a parameter
 * listed twice, two views of one tensor), the order matters: such lists run
 * one tensor after another here too, instead of all at once (where two
 * threads would update the same elements together). */

/* The bytes [lo, hi) a tensor's elements lie in (vt_view_span); lo == hi
 * when empty. */
typedef struct span {
    uintptr_t lo, hi;
    int64_t i; /* the list entry */
} span;

static span span_of(const vt_tensor *t, int64_t i) {
    span r = {0, 0, i};
    if (!vt_view_span(t, &r.lo, &r.hi)) r.lo = r.hi = 0;
    return r;
}

static int cmp_span(const void *pa, const void *pb) {
    const uintptr_t a = ((const span *)pa)->lo, b = ((const span *)pb)->lo;
    return (a > b) - (a < b);
}

/* 1: some entry's output may share elements with another entry's output,
 * or does share them with another entry's input; 0: none; -1: out of host
 * memory. O(n log n): the outputs' spans sorted (two outputs whose spans
 * meet count as sharing), each input's span looked up among them, and an
 * input meeting another entry's output judged element by element
 * (vt_view_overlap: a weight and its other column half interleave their
 * spans, not their elements). */
static int lists_alias(const vt_foreach_args *x) {
    const int64_t n = x->n;
    span *outs = malloc((size_t)n * sizeof *outs);
    if (!outs) return -1;
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        const span sp = span_of(&x->out[i], i);
        if (sp.hi > sp.lo) outs[m++] = sp;
    }
    qsort(outs, (size_t)m, sizeof *outs, cmp_span);
    int alias = 0;
    for (int64_t k = 1; k < m && !alias; k++) alias = outs[k].lo < outs[k - 1].hi;
    /* the outputs' spans are disjoint now: sorted by lo, they are sorted by hi */
    const vt_tensor *lists[3] = {x->a, x->b, x->c};
    for (int l = 0; l < 3 && !alias; l++)
        for (int64_t i = 0; lists[l] && i < n && !alias; i++) {
            const span in = span_of(&lists[l][i], i);
            if (in.hi <= in.lo) continue;
            int64_t lo = 0, hi = m; /* the first output ending after in starts */
            while (lo < hi) {
                const int64_t mid = (lo + hi) / 2;
                if (outs[mid].hi <= in.lo) lo = mid + 1;
                else hi = mid;
            }
            for (int64_t k = lo; k < m && outs[k].lo < in.hi && !alias; k++)
                alias = outs[k].i != i && vt_view_overlap(&x->out[outs[k].i], &lists[l][i]) != VT_OVERLAP_NO;
        }
    free(outs);
    return alias;
}

typedef struct fe_part {
    const fe_job *j;
    int64_t first; /* the part's first element in the job's numbering */
} fe_part;

static void fe_part_chunk(void *vctx, int64_t begin, int64_t end) {
    const fe_part *p = vctx;
    fe_chunk((void *)p->j, p->first + begin, p->first + end);
}

/* ------------------------------------------------------------ entry points */

static vt_status run_foreach(const vt_foreach_args *x, int ref) {
    vt_status s = vt_foreach_check(x);
    if (s != VT_OK || x->n == 0) return s;
    if (fe_is_reduction(x->op)) return run_reduction(x, ref);
    int64_t n = x->n;
    fe_item *items = malloc((size_t)n * sizeof *items);
    int64_t *start = malloc((size_t)(n + 1) * sizeof *start);
    if (!items || !start) {
        free(items);
        free(start);
        return vt_set_error(VT_ERR_OUT_OF_MEMORY, "foreach %s: out of host memory", fe_names[x->op]);
    }
    double st = x->scalar_tensor ? read_scalar_tensor(x->scalar_tensor) : 0;
    start[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        plan_item(x, i, st, x->scalar_tensor != NULL, &items[i]);
        start[i + 1] = start[i] + vt_tensor_numel(&x->out[i]);
    }
    fe_job j = {x, items, start, n, ref ? &optim_table_portable : optim_active_table(), ref, NULL};
    const int alias = ref ? 0 : lists_alias(x);
    if (alias < 0) {
        s = vt_set_error(VT_ERR_OUT_OF_MEMORY, "foreach %s: out of host memory", fe_names[x->op]);
    } else if (ref) {
        fe_chunk(&j, 0, start[n]);
    } else if (alias) {
        for (int64_t i = 0; i < n; i++) {
            fe_part part = {&j, start[i]};
            vt_parallel_for(start[i + 1] - start[i], FE_GRAIN, fe_part_chunk, &part);
        }
    } else {
        vt_parallel_for(start[n], FE_GRAIN, fe_chunk, &j);
    }
    free(items);
    free(start);
    return s;
}

vt_status vt_foreach(const vt_foreach_args *x) { return run_foreach(x, 0); }
vt_status vt_ref_foreach(const vt_foreach_args *x) { return run_foreach(x, 1); }
