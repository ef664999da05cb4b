/* elementwise.c — drivers for vt_unary, vt_binary and vt_where: broadcast,
 * walk the iteration space in innermost-dimension runs, stage operands in
 * the compute class when dtypes or strides demand it, and run microkernels. */
#include <stdatomic.h>

#include "internal.h"

/* Staging chunk: small enough for every buffer to stay in L1. */
#define CHUNK 1024

static const char *const unary_names[VT_UNARY_OP_COUNT] = {
#define VT_UNARY_OP(e, name) #name,
#include "vtpu/unary.def"
#undef VT_UNARY_OP
};
static const char *const binary_names[VT_BINARY_OP_COUNT] = {
#define VT_BINARY_OP(e, name) #name,
#include "vtpu/binary.def"
#undef VT_BINARY_OP
};
static const char *const ternary_names[VT_TERNARY_OP_COUNT] = {
#define VT_TERNARY_OP(e, name) #name,
#include "vtpu/ternary.def"
#undef VT_TERNARY_OP
};

const char *vt_unary_op_name(vt_unary_op op) {
    return (unsigned)op < VT_UNARY_OP_COUNT ? unary_names[op] : "invalid";
}
const char *vt_binary_op_name(vt_binary_op op) {
    return (unsigned)op < VT_BINARY_OP_COUNT ? binary_names[op] : "invalid";
}
const char *vt_ternary_op_name(vt_ternary_op op) {
    return (unsigned)op < VT_TERNARY_OP_COUNT ? ternary_names[op] : "invalid";
}

typedef struct ew_ctx {
    vt_ew_head h; /* the iterator (out, then the inputs) and the failure flag */
    int nin;
    vt_dtype in_dt[3], out_dt;
    vt_dtype compute; /* PyTorch's common dtype */
    vt_dtype cls_dt;  /* F32, F64 or I64: what the microkernels compute in */
    int is_bool;      /* the op's result is bool whatever the compute dtype */
    vt_unary_ukernel un;
    vt_binary_ukernel bin;
    vt_ternary_ukernel ter;
    vt_f32_binary_fn f32; /* what bin calls (vt_f32_binary_direct; NULL: none), called directly */
    float f32_al;         /* and the alpha it takes */
    /* bf16 in, out and compute with a vt_bf16_act kernel: contiguous runs call it (NULL: none) */
    vt_bf16_act_unary_fn bf16_un;
    vt_bf16_act_binary_fn bf16_bin;
    /* Class-typed alpha and params: binary/ternary kernels read [0] = alpha,
     * [1 + k] = params[k]; unary kernels read prm + 1 (params[k] at [k]). */
    union {
        float f[1 + VT_EW_MAX_PARAMS];
        double d[1 + VT_EW_MAX_PARAMS];
        int64_t i[1 + VT_EW_MAX_PARAMS];
    } prm;
} ew_ctx;
_Static_assert(sizeof(ew_ctx) <= VT_EW_PLAN_BYTES, "ew_ctx outgrew a plan");

static const void *unary_prm(const ew_ctx *c) {
    switch (c->cls_dt) {
    case VT_F32: return &c->prm.f[1];
    case VT_F64: return &c->prm.d[1];
    default: return &c->prm.i[1];
    }
}

static int call_kernel(ew_ctx *c, int64_t n, void *o, const void *const *in, const int64_t *ks) {
    switch (c->nin) {
    case 1: return c->un(n, o, in[0], unary_prm(c));
    case 2: return c->bin(n, o, in[0], ks[0], in[1], ks[1], &c->prm);
    default: return c->ter(n, o, in[0], ks[0], in[1], ks[1], in[2], ks[2], &c->prm);
    }
}

static vt_dtype class_dtype(vt_dtype compute, vt_compute_class *cls) {
    switch (compute) {
    case VT_F32:
    case VT_BF16:
    case VT_F16: *cls = VT_CLASS_FLOAT; return VT_F32;
    case VT_F64: *cls = VT_CLASS_DOUBLE; return VT_F64;
    default: *cls = VT_CLASS_INT; return VT_I64;
    }
}

/* An input the microkernel can read in place: already in the class type and
 * not narrower than it (an F32 tensor in BF16 compute must be rounded). */
static inline int input_direct(const ew_ctx *c, int k, int64_t s) {
    return c->in_dt[k] == c->compute && c->compute == c->cls_dt && (s == 1 || s == 0);
}

static inline int output_direct(const ew_ctx *c, int64_t s) {
    if (s != 1) return 0;
    return c->is_bool ? c->out_dt == VT_BOOL : (c->out_dt == c->compute && c->compute == c->cls_dt);
}

/* Convert m elements of input k to the class type in buf: through the
 * compute dtype, since "inputs are converted to compute" first. A stride-0
 * input converts one element and stays a scalar (*ks = 0). */
static const void *stage_input(const ew_ctx *c, int k, const char *p, int64_t s, int64_t m, void *buf, void *tmp,
                               int64_t *ks) {
    if (input_direct(c, k, s)) {
        *ks = s;
        return p;
    }
    int64_t cnt = s == 0 ? 1 : m;
    *ks = s == 0 ? 0 : 1;
    vt_dtype dt = c->in_dt[k];
    if (dt == c->compute || c->compute == c->cls_dt) {
        vt_convert(dt, p, s, c->cls_dt, buf, 1, cnt);
    } else {
        vt_convert(dt, p, s, c->compute, tmp, 1, cnt);
        vt_convert(c->compute, tmp, 1, c->cls_dt, buf, 1, cnt);
    }
    return buf;
}

/* Results are rounded to the compute dtype, then converted to out's. */
static void store_result(const ew_ctx *c, const void *res, int64_t rs, char *p, int64_t s, int64_t m, void *tmp) {
    if (c->is_bool) {
        vt_convert(VT_BOOL, res, rs, c->out_dt, p, s, m);
    } else if (c->out_dt == c->compute || c->compute == c->cls_dt) {
        vt_convert(c->cls_dt, res, rs, c->out_dt, p, s, m);
    } else {
        vt_convert(c->cls_dt, res, rs, c->compute, tmp, 1, rs ? m : 1);
        vt_convert(c->compute, tmp, rs, c->out_dt, p, s, m);
    }
}

/* One run through staging buffers: inputs converted to the class type or
 * gathered from strides, the result converted or scattered. */
static void ew_run_staged(ew_ctx *c, char *const *ptrs, const int64_t *strides, int64_t n) {
    int nin = c->nin;
    int64_t so = strides[0];
    int err = 0;
    _Alignas(64) unsigned char ibuf[3][CHUNK * 8], rbuf[CHUNK * 8], tmp[CHUNK * 8];
    for (int64_t off = 0; off < n; off += CHUNK) {
        int64_t m = n - off < CHUNK ? n - off : CHUNK;
        char *po = ptrs[0] + off * so * (int64_t)c->h.it.elsize[0];
        const void *in[3] = {NULL, NULL, NULL};
        int64_t ks[3] = {0, 0, 0};
        int scalar = 1; /* every input a scalar: compute one element, broadcast it on store */
        for (int k = 0; k < nin; k++) {
            const char *pk = ptrs[k + 1] + off * strides[k + 1] * (int64_t)c->h.it.elsize[k + 1];
            in[k] = stage_input(c, k, pk, strides[k + 1], m, ibuf[k], tmp, &ks[k]);
            scalar &= ks[k] == 0;
        }
        int64_t cnt = scalar ? 1 : m;
        int direct = !scalar && output_direct(c, so);
        void *r = direct ? (void *)po : (void *)rbuf;
        err |= call_kernel(c, cnt, r, in, ks);
        if (!direct) store_result(c, rbuf, scalar ? 0 : 1, po, so, m, tmp);
    }
    if (err) atomic_store_explicit(&c->h.failed, 1, memory_order_relaxed);
}

/* A block of runs: when every operand is readable and writable in place
 * (decided once per block: the strides are the same for every run), each
 * run is one microkernel call; else each goes through staging. */
static void ew_block(void *vctx, char *const *ptrs, const int64_t *strides, int64_t n, int64_t rows,
                     const int64_t *rstrides) {
    ew_ctx *c = vctx;
    const int nin = c->nin;
    char *p[4] = {ptrs[0], ptrs[1], nin > 1 ? ptrs[2] : NULL, nin > 2 ? ptrs[3] : NULL};
    if ((c->bf16_un || c->bf16_bin) && strides[0] == 1 && strides[1] == 1 && (nin == 1 || strides[2] == 1)) {
        for (int64_t r = 0; r < rows; r++) {
            uint16_t *o = (uint16_t *)(void *)p[0];
            const uint16_t *a = (const uint16_t *)(const void *)p[1], *b = (const uint16_t *)(const void *)p[2];
            if (nin == 1)
                c->bf16_un(n, o, a);
            else
                c->bf16_bin(n, o, a, b);
            for (int k = 0; k <= nin; k++) p[k] += rstrides[k];
        }
        return;
    }
    int direct_all = output_direct(c, strides[0]);
    for (int k = 0; k < nin && direct_all; k++)
        direct_all = input_direct(c, k, strides[k + 1]) && (nin > 1 || strides[k + 1] == 1);
    if (!direct_all) {
        for (int64_t r = 0; r < rows; r++) {
            ew_run_staged(c, p, strides, n);
            for (int k = 0; k <= nin; k++) p[k] += rstrides[k];
        }
        return;
    }
    const int64_t ks[3] = {strides[1], nin > 1 ? strides[2] : 0, nin > 2 ? strides[3] : 0};
    if (c->f32 && (ks[0] || ks[1])) { /* short runs (a strided view's rows) cost a call chain each */
        for (int64_t r = 0; r < rows; r++) {
            c->f32(n, (float *)(void *)p[0], (const float *)(void *)p[1], ks[0], (const float *)(void *)p[2], ks[1],
                   c->f32_al);
            for (int k = 0; k <= nin; k++) p[k] += rstrides[k];
        }
        return;
    }
    int err = 0;
    for (int64_t r = 0; r < rows; r++) {
        const void *in[3] = {p[1], p[2], p[3]};
        err |= call_kernel(c, n, p[0], in, ks);
        for (int k = 0; k <= nin; k++) p[k] += rstrides[k];
    }
    if (err) atomic_store_explicit(&c->h.failed, 1, memory_order_relaxed);
}

static void ew_range(void *vctx, int64_t b, int64_t e) {
    ew_ctx *c = vctx;
    vt_iter_blocks(&c->h.it, b, e, ew_block, c);
}

vt_status vt_ew_validate(const vt_tensor *out, int nin, const vt_tensor *const *in, vt_dtype compute,
                         const char *what) {
    vt_status s = vt_check_operand(what, out, "out");
    for (int k = 0; k < nin && s == VT_OK; k++) s = vt_check_input(what, in[k], "input", out);
    if (s == VT_OK && (int)compute != -1 && (unsigned)compute >= VT_DTYPE_COUNT)
        s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: invalid compute dtype %d", what, (int)compute);
    return s;
}

/* The operands were checked (vt_ew_validate, or the node's check). */
static vt_status ew_prepare(vt_ew_plan *p, ew_ctx *c, const vt_tensor *out, int nin, const vt_tensor *const *in,
                            vt_dtype compute) {
    vt_status s;
    vt_tensor ops[4];
    vt_tensor_copy(&ops[0], out);
    for (int k = 0; k < nin; k++) {
        if ((s = vt_broadcast_to(in[k], out->ndim, out->sizes, &ops[k + 1]))) return s;
        c->in_dt[k] = in[k]->dtype;
    }
    vt_iter_init(&c->h.it, nin + 1, ops);
    atomic_init(&c->h.failed, 0);
    p->range = ew_range;
    c->f32 = NULL;
    c->bf16_un = NULL;
    c->bf16_bin = NULL;
    c->nin = nin;
    c->out_dt = out->dtype;
    c->compute = compute;
    return VT_OK;
}

vt_status vt_ew_plan_run(vt_ew_plan *p) {
    vt_ew_head *h = vt_ew_plan_head(p);
    if (h->it.numel > 0) vt_parallel_for(h->it.numel, VT_ELEMENTWISE_GRAIN, p->range, p->ctx);
    if (atomic_load_explicit(&h->failed, memory_order_relaxed)) return vt_set_error(VT_ERR_KERNEL, "ZeroDivisionError");
    return VT_OK;
}

int vt_ew_plan_float_kernel(const vt_ew_plan *p, const void **fn, int *nin, float *prm) {
    const ew_ctx *c = (const ew_ctx *)(const void *)p->ctx;
    if (p->range != ew_range || c->cls_dt != VT_F32 || c->is_bool || c->nin > 2) return 0;
    *nin = c->nin;
    if (c->nin == 1) {
        *fn = (const void *)c->un;
        memcpy(prm, unary_prm(c), sizeof(float) * VT_EW_MAX_PARAMS);
        prm[VT_EW_MAX_PARAMS] = 0;
    } else {
        *fn = (const void *)c->bin;
        memcpy(prm, c->prm.f, sizeof(float) * (1 + VT_EW_MAX_PARAMS));
    }
    return *fn != NULL;
}

/* alpha into slot 0 and params into slots 1.. of the class-typed block,
 * converted as PyTorch converts a Scalar to the kernel's scalar type. */
static void set_params(ew_ctx *c, vt_scalar alpha, const double *params) {
    double p[VT_EW_MAX_PARAMS] = {0};
    if (params) memcpy(p, params, sizeof p);
    switch (c->cls_dt) {
    case VT_F32:
        c->prm.f[0] = alpha.is_float ? (float)alpha.f : (float)alpha.i;
        for (int k = 0; k < VT_EW_MAX_PARAMS; k++) c->prm.f[1 + k] = (float)p[k];
        break;
    case VT_F64:
        c->prm.d[0] = alpha.is_float ? alpha.f : (double)alpha.i;
        for (int k = 0; k < VT_EW_MAX_PARAMS; k++) c->prm.d[1 + k] = p[k];
        break;
    default:
        if (alpha.is_float)
            vt_convert(VT_F64, &alpha.f, 1, VT_I64, &c->prm.i[0], 1, 1);
        else
            c->prm.i[0] = alpha.i;
        vt_convert(VT_F64, p, 1, VT_I64, &c->prm.i[1], 1, VT_EW_MAX_PARAMS);
        break;
    }
}

/* The ISA's bf16 activation kernels (vt_bf16_act) when every operand is
 * bf16 in bf16 compute (they then take contiguous runs), else NULL. */
static const vt_bf16_act_table *bf16_act_for(const ew_ctx *c) {
    if (c->compute != VT_BF16 || c->out_dt != VT_BF16) return NULL;
    for (int k = 0; k < c->nin; k++)
        if (c->in_dt[k] != VT_BF16) return NULL;
    return vt_bf16_act();
}

vt_status vt_unary_plan(vt_ew_plan *p, vt_unary_op op, const vt_tensor *out, const vt_tensor *a, vt_dtype compute,
                        const double *params) {
    if ((unsigned)op >= VT_UNARY_OP_COUNT)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "unary: invalid op %d", (int)op);
    ew_ctx *c = (ew_ctx *)p->ctx;
    const vt_tensor *in[1] = {a};
    vt_status s = ew_prepare(p, c, out, 1, in, compute);
    if (s) return s;
    vt_compute_class cls;
    c->cls_dt = class_dtype(compute, &cls);
    /* On bool, bitwise_not is logical not (~1 would read back as true). */
    if (compute == VT_BOOL && op == VT_BITWISE_NOT) op = VT_LOGICAL_NOT;
    c->un = vt_narrow_unary_ukernel(op, compute);
    const vt_bf16_act_table *bt = c->un ? NULL : bf16_act_for(c);
    if (bt) c->bf16_un = bt->unary[op];
    if (!c->un) c->un = vt_unary_ukernels[cls][op];
    if (!c->un) c->un = vt_math_unary_ukernels[cls][op];
    c->bin = NULL;
    c->ter = NULL;
    c->is_bool = vt_unary_op_is_bool(op);
    if (!c->un)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: not supported for %s compute", unary_names[op],
                            vt_dtype_name(compute));
    set_params(c, vt_scalar_from_int(0), params);
    return VT_OK;
}

vt_status vt_unary_ex(vt_unary_op op, const vt_tensor *out, const vt_tensor *a, vt_dtype compute,
                      const double *params) {
    vt_ew_plan p;
    const vt_tensor *in[1] = {a};
    vt_status s = vt_ew_validate(out, 1, in, compute, vt_unary_op_name(op));
    if (s == VT_OK) s = vt_unary_plan(&p, op, out, a, compute, params);
    return s == VT_OK ? vt_ew_plan_run(&p) : s;
}

vt_status vt_unary(vt_unary_op op, const vt_tensor *out, const vt_tensor *a, vt_dtype compute) {
    return vt_unary_ex(op, out, a, compute, NULL);
}

vt_status vt_binary_plan(vt_ew_plan *p, vt_binary_op op, const vt_tensor *out, const vt_tensor *a, const vt_tensor *b,
                         vt_dtype compute, vt_scalar alpha, const double *params) {
    if ((unsigned)op >= VT_BINARY_OP_COUNT)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "binary: invalid op %d", (int)op);
    ew_ctx *c = (ew_ctx *)p->ctx;
    const vt_tensor *in[2] = {a, b};
    vt_status s = ew_prepare(p, c, out, 2, in, compute);
    if (s) return s;
    vt_compute_class cls;
    c->cls_dt = class_dtype(compute, &cls);
    c->bin = vt_narrow_ukernel(op, compute);
    const vt_bf16_act_table *bt = c->bin ? NULL : bf16_act_for(c);
    if (bt) c->bf16_bin = bt->binary[op];
    if (!c->bin) c->bin = vt_binary_ukernels[cls][op];
    if (!c->bin) c->bin = vt_math_binary_ukernels[cls][op];
    c->un = NULL;
    c->ter = NULL;
    c->is_bool = vt_binary_op_is_bool(op);
    if (!c->bin)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: not supported for %s compute", binary_names[op],
                            vt_dtype_name(compute));
    set_params(c, alpha, params);
    if (c->bin == vt_binary_ukernels[VT_CLASS_FLOAT][op]) c->f32 = vt_f32_binary_direct(op, &c->prm.f[0], &c->f32_al);
    return VT_OK;
}

vt_status vt_binary_ex(vt_binary_op op, const vt_tensor *out, const vt_tensor *a, const vt_tensor *b,
                       vt_dtype compute, vt_scalar alpha, const double *params) {
    vt_ew_plan p;
    const vt_tensor *in[2] = {a, b};
    vt_status s = vt_ew_validate(out, 2, in, compute, vt_binary_op_name(op));
    if (s == VT_OK) s = vt_binary_plan(&p, op, out, a, b, compute, alpha, params);
    return s == VT_OK ? vt_ew_plan_run(&p) : s;
}

vt_status vt_binary(vt_binary_op op, const vt_tensor *out, const vt_tensor *a, const vt_tensor *b,
                    vt_dtype compute, vt_scalar alpha) {
    return vt_binary_ex(op, out, a, b, compute, alpha, NULL);
}

vt_status vt_ternary_plan(vt_ew_plan *p, vt_ternary_op op, const vt_tensor *out, const vt_tensor *a,
                          const vt_tensor *b, const vt_tensor *cc, vt_dtype compute, vt_scalar alpha) {
    if ((unsigned)op >= VT_TERNARY_OP_COUNT)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "ternary: invalid op %d", (int)op);
    ew_ctx *c = (ew_ctx *)p->ctx;
    const vt_tensor *in[3] = {a, b, cc};
    vt_status s = ew_prepare(p, c, out, 3, in, compute);
    if (s) return s;
    vt_compute_class cls;
    c->cls_dt = class_dtype(compute, &cls);
    c->ter = vt_ternary_ukernels[cls][op];
    c->un = NULL;
    c->bin = NULL;
    c->is_bool = 0;
    if (!c->ter)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: not supported for %s compute", ternary_names[op],
                            vt_dtype_name(compute));
    set_params(c, alpha, NULL);
    return VT_OK;
}

vt_status vt_ternary(vt_ternary_op op, const vt_tensor *out, const vt_tensor *a, const vt_tensor *b,
                     const vt_tensor *cc, vt_dtype compute, vt_scalar alpha) {
    vt_ew_plan p;
    const vt_tensor *in[3] = {a, b, cc};
    vt_status s = vt_ew_validate(out, 3, in, compute, vt_ternary_op_name(op));
    if (s == VT_OK) s = vt_ternary_plan(&p, op, out, a, b, cc, compute, alpha);
    return s == VT_OK ? vt_ew_plan_run(&p) : s;
}

/* ------------------------------------------------------------ where */

typedef struct where_ctx {
    vt_ew_head h;
    vt_dtype out_dt, cond_dt, a_dt, b_dt;
} where_ctx;
_Static_assert(sizeof(where_ctx) <= VT_EW_PLAN_BYTES, "where_ctx outgrew a plan");

/* o[i * so] = c[i] ? a[i * sa] : b[i * sb] for m elements of one width
 * (the selected value's bits, copied); a stride of 0 is a scalar. */
#define WHERE_SELECT(T)                                                                                            \
    static void where_select_##T(char *po, int64_t so, const unsigned char *c, const char *pa, int64_t sa,          \
                                 const char *pb, int64_t sb, int64_t m) {                                            \
        T *o = (T *)(void *)po;                                                                                    \
        const T *a = (const T *)(const void *)pa, *b = (const T *)(const void *)pb;                                \
        if (so == 1 && sa == 1 && sb == 1)                                                                         \
            for (int64_t i = 0; i < m; i++) o[i] = c[i] ? a[i] : b[i];                                              \
        else if (so == 1 && sa == 0 && sb == 1)                                                                    \
            for (int64_t i = 0; i < m; i++) o[i] = c[i] ? a[0] : b[i];                                              \
        else                                                                                                       \
            for (int64_t i = 0; i < m; i++) o[i * so] = c[i] ? a[i * sa] : b[i * sb];                               \
    }
WHERE_SELECT(uint8_t)
WHERE_SELECT(uint16_t)
WHERE_SELECT(uint32_t)
WHERE_SELECT(uint64_t)
#undef WHERE_SELECT

/* Operand k's m values from element off as out's dtype: in place where it
 * already is (stride 0 or 1, *st set to it), else converted into buf. */
static const char *where_operand(vt_dtype dt, vt_dtype out_dt, const char *p, int64_t s, size_t es, int64_t off,
                                 int64_t m, unsigned char *buf, int64_t *st) {
    const char *at = p + off * s * (int64_t)es;
    if (dt == out_dt && (s == 0 || s == 1)) {
        *st = s;
        return at;
    }
    vt_convert(dt, at, s, out_dt, buf, 1, m);
    *st = 1;
    return (const char *)buf;
}

static void where_run(void *vctx, char *const *p, const int64_t *s, int64_t n) {
    where_ctx *c = vctx;
    _Alignas(64) unsigned char abuf[CHUNK * 8], bbuf[CHUNK * 8], cbuf[CHUNK];
    const size_t es = c->h.it.elsize[0];
    for (int64_t off = 0; off < n; off += CHUNK) {
        const int64_t m = n - off < CHUNK ? n - off : CHUNK;
        char *po = p[0] + off * s[0] * (int64_t)es;
        const unsigned char *cv = cbuf;
        if (c->cond_dt == VT_BOOL && s[1] == 1) /* bools are 0 or 1 */
            cv = (const unsigned char *)p[1] + off;
        else
            vt_convert(c->cond_dt, p[1] + off * s[1] * (int64_t)c->h.it.elsize[1], s[1], VT_BOOL, cbuf, 1, m);
        int64_t sa, sb;
        const char *pa = where_operand(c->a_dt, c->out_dt, p[2], s[2], c->h.it.elsize[2], off, m, abuf, &sa);
        const char *pb = where_operand(c->b_dt, c->out_dt, p[3], s[3], c->h.it.elsize[3], off, m, bbuf, &sb);
        switch (es) {
        case 1: where_select_uint8_t(po, s[0], cv, pa, sa, pb, sb, m); break;
        case 2: where_select_uint16_t(po, s[0], cv, pa, sa, pb, sb, m); break;
        case 4: where_select_uint32_t(po, s[0], cv, pa, sa, pb, sb, m); break;
        case 8: where_select_uint64_t(po, s[0], cv, pa, sa, pb, sb, m); break;
        default:
            for (int64_t i = 0; i < m; i++)
                memcpy(po + i * s[0] * (int64_t)es, (cv[i] ? pa + i * sa * (int64_t)es : pb + i * sb * (int64_t)es),
                       es);
        }
    }
}

static void where_range(void *vctx, int64_t b, int64_t e) {
    where_ctx *c = vctx;
    vt_iter_range(&c->h.it, b, e, where_run, c);
}

vt_status vt_where_plan(vt_ew_plan *p, const vt_tensor *out, const vt_tensor *cond, const vt_tensor *a,
                        const vt_tensor *b) {
    const vt_tensor *in[3] = {cond, a, b};
    vt_status s;
    vt_tensor ops[4];
    vt_tensor_copy(&ops[0], out);
    for (int k = 0; k < 3; k++)
        if ((s = vt_broadcast_to(in[k], out->ndim, out->sizes, &ops[k + 1]))) return s;
    where_ctx *c = (where_ctx *)p->ctx;
    vt_iter_init(&c->h.it, 4, ops);
    atomic_init(&c->h.failed, 0);
    p->range = where_range;
    c->out_dt = out->dtype;
    c->cond_dt = cond->dtype;
    c->a_dt = a->dtype;
    c->b_dt = b->dtype;
    return VT_OK;
}

vt_status vt_where(const vt_tensor *out, const vt_tensor *cond, const vt_tensor *a, const vt_tensor *b) {
    vt_ew_plan p;
    const vt_tensor *in[3] = {cond, a, b};
    vt_status s = vt_ew_validate(out, 3, in, (vt_dtype)-1, "where");
    if (s == VT_OK) s = vt_where_plan(&p, out, cond, a, b);
    return s == VT_OK ? vt_ew_plan_run(&p) : s;
}

/* ------------------------------------------------------------ result layout
 * TensorIterator's rules for an output it allocates (compute_fast_setup_type,
 * reorder_dimensions, allocate_or_resize_outputs), so a result has the
 * strides CPU PyTorch gives it. */

static int64_t max1(int64_t v) { return v > 1 ? v : 1; }

static int is_contig(const vt_tensor *t) {
    if (vt_tensor_numel(t) == 0) return 1;
    int64_t expected = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->sizes[d] == 1) continue;
        if (t->strides[d] != expected) return 0;
        expected *= t->sizes[d];
    }
    return 1;
}

static int is_channels_last(const vt_tensor *t) {
    if (t->ndim != 4) return 0;
    static const int order[4] = {1, 3, 2, 0};
    int64_t expected = 1;
    for (int i = 0; i < 4; i++) {
        const int d = order[i];
        if (t->sizes[d] == 1) continue;
        if (t->strides[d] != expected) return 0;
        expected *= t->sizes[d];
    }
    return 1;
}

/* c10's compute_non_overlapping_and_dense. */
static int is_dense(const vt_tensor *t) {
    const int nd = t->ndim;
    if (nd == 1) return t->sizes[0] < 2 || t->strides[0] == 1;
    int perm[VT_MAX_DIMS];
    for (int d = 0; d < nd; d++) perm[d] = d;
    /* stable sort by stride ascending, dims of size 0 or 1 last */
    for (int i = 1; i < nd; i++)
        for (int j = i; j > 0; j--) {
            const int a = perm[j - 1], b = perm[j];
            const int b_first = t->sizes[a] < 2 ? t->sizes[b] >= 2 : (t->sizes[b] >= 2 && t->strides[b] < t->strides[a]);
            if (!b_first) break;
            perm[j - 1] = b, perm[j] = a;
        }
    int64_t require = 1;
    for (int i = 0; i < nd; i++) {
        const int64_t sz = t->sizes[perm[i]];
        if (sz < 2) return 1;
        if (t->strides[perm[i]] != require) return 0;
        require *= sz;
    }
    return 1;
}

static int same_shape(const vt_tensor *t, int32_t ndim, const int64_t *sizes) {
    if (t->ndim != ndim) return 0;
    for (int d = 0; d < ndim; d++)
        if (t->sizes[d] != sizes[d]) return 0;
    return 1;
}

void vt_ew_result_strides(int32_t ndim, const int64_t *sizes, int nin, const vt_tensor *const *inputs,
                          int64_t *strides) {
    if (ndim <= 0) return;
    /* contiguous unless a rule below says otherwise */
    strides[ndim - 1] = 1;
    for (int d = ndim - 2; d >= 0; d--) strides[d] = strides[d + 1] * max1(sizes[d + 1]);
    if (ndim == 1 || nin <= 0) return;
    int same = 1, contig = 1, cl = 1, dense = 1;
    for (int k = 0; k < nin; k++) {
        same &= same_shape(inputs[k], ndim, sizes);
        contig &= is_contig(inputs[k]);
        cl &= is_channels_last(inputs[k]);
        dense &= is_dense(inputs[k]);
    }
    if (same) {
        if (contig) return;
        if (cl) {
            strides[1] = 1;
            strides[3] = sizes[1];
            strides[2] = strides[3] * sizes[3];
            strides[0] = strides[2] * sizes[2];
            return;
        }
        if (dense) {
            int eq = 1;
            for (int k = 1; k < nin && eq; k++)
                for (int d = 0; d < ndim; d++) eq &= inputs[k]->strides[d] == inputs[0]->strides[d];
            if (eq) {
                memcpy(strides, inputs[0]->strides, (size_t)ndim * sizeof *strides);
                return;
            }
        }
    }
    /* The inputs' strides broadcast to the result (a broadcast dim steps 0). */
    int64_t st[VT_ITER_MAX_OPS][VT_MAX_DIMS];
    const int n = nin < VT_ITER_MAX_OPS ? nin : VT_ITER_MAX_OPS;
    for (int k = 0; k < n; k++) {
        const vt_tensor *t = inputs[k];
        const int lead = ndim - t->ndim;
        for (int d = 0; d < ndim; d++) {
            const int td = d - lead;
            st[k][d] = td < 0 || (t->sizes[td] == 1 && sizes[d] != 1) ? 0 : t->strides[td];
        }
    }
    /* perm[0] is the innermost dim; insertion sort with ambiguous
     * comparisons, as reorder_dimensions: 1 when dim a goes outside dim b. */
    int perm[VT_MAX_DIMS];
    for (int i = 0; i < ndim; i++) perm[i] = ndim - 1 - i;
    for (int i = 1; i < ndim; i++) {
        int d1 = i;
        for (int d0 = i - 1; d0 >= 0; d0--) {
            const int a = perm[d0], b = perm[d1];
            int cmp = 0;
            for (int k = 0; k < n; k++) {
                const int64_t sa = st[k][a], sb = st[k][b];
                if (sa == 0 || sb == 0) continue;
                if (sa < sb) { cmp = -1; break; }
                if (sa > sb) { cmp = 1; break; }
                if (sizes[a] > sizes[b]) { cmp = 1; break; }
            }
            if (cmp > 0) {
                perm[d0] = b, perm[d1] = a;
                d1 = d0;
            } else if (cmp < 0) {
                break;
            }
        }
    }
    int inverted = 1;
    for (int i = 0; i < ndim; i++) inverted &= perm[i] == ndim - 1 - i;
    if (inverted) return; /* row-major: contiguous, as set above */
    int64_t s = 1; /* compatible_stride: a plain product, as PyTorch's */
    for (int i = 0; i < ndim; i++) {
        strides[perm[i]] = s;
        s *= sizes[perm[i]];
    }
}
