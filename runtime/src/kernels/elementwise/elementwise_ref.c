/* elementwise_ref.c — scalar references for copy, unary and binary: one
 * element at a time over the logical index, conversions written from their
 * definitions. Deliberately shares no code with the fast paths it checks. */
#include <math.h>

#include "internal.h"

/* ------------------------------------------------------------ half precision */

/* Round a finite or special float to a binary16-like format with mbits
 * stored mantissa bits and ebits exponent bits: scale to the format's
 * quantum at x's exponent, round to nearest even, re-encode. */
static uint16_t ref_round_small_float(float f, int mbits, int ebits, uint16_t nan_bits) {
    double x = f;
    int bias = (1 << (ebits - 1)) - 1, emin = 1 - bias, emax = bias;
    uint16_t sign = signbit(x) ? (uint16_t)(1u << (mbits + ebits)) : 0;
    uint16_t inf = (uint16_t)(((1u << ebits) - 1) << mbits);
    if (isnan(x)) return nan_bits;
    double a = fabs(x);
    if (isinf(a)) return sign | inf;
    if (a == 0) return sign;
    int e;
    frexp(a, &e);
    e -= 1; /* a = m * 2^e, 1 <= m < 2 */
    if (e < emin) e = emin;
    double quantum = ldexp(1.0, e - mbits);
    double r = nearbyint(a / quantum) * quantum;
    if (r >= ldexp(1.0, emax + 1)) return sign | inf;
    if (r < ldexp(1.0, emin)) return sign | (uint16_t)(r / ldexp(1.0, emin - mbits));
    frexp(r, &e);
    e -= 1;
    uint16_t man = (uint16_t)(r / ldexp(1.0, e - mbits) - (double)(1 << mbits));
    return sign | (uint16_t)((unsigned)(e + bias) << mbits) | man;
}

uint16_t vt_ref_f32_to_f16(float f) {
    /* c10 keeps the sign of a NaN and makes it the canonical quiet NaN. */
    return ref_round_small_float(f, 10, 5, (uint16_t)(signbit(f) ? 0xfe00 : 0x7e00));
}

uint16_t vt_ref_f32_to_bf16(float f) { return ref_round_small_float(f, 7, 8, 0x7fc0); }

float vt_ref_f16_to_f32(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 31) {
        if (m == 0) return s ? -INFINITY : INFINITY;
        uint32_t u = ((uint32_t)s << 31) | 0x7fc00000u | ((uint32_t)m << 13);
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return (float)(s ? -v : v);
}

/* ------------------------------------------------------------ element values */

typedef struct rval {
    int is_int;
    double d; /* exact value of a floating element */
    int64_t i;
} rval;

static rval rv_f(double d) { return (rval){0, d, 0}; }
static rval rv_i(int64_t i) { return (rval){1, 0, i}; }

static rval ref_load(vt_dtype dt, const char *p) {
    switch (dt) {
    case VT_F32: { float f; memcpy(&f, p, 4); return rv_f(f); }
    case VT_BF16: {
        uint16_t h;
        memcpy(&h, p, 2);
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return rv_f(f);
    }
    case VT_F16: { uint16_t h; memcpy(&h, p, 2); return rv_f(vt_ref_f16_to_f32(h)); }
    case VT_F64: { double d; memcpy(&d, p, 8); return rv_f(d); }
    case VT_I8: return rv_i(*(const int8_t *)p);
    case VT_U8: return rv_i(*(const uint8_t *)p);
    case VT_I16: { int16_t v; memcpy(&v, p, 2); return rv_i(v); }
    case VT_I32: { int32_t v; memcpy(&v, p, 4); return rv_i(v); }
    case VT_I64: { int64_t v; memcpy(&v, p, 8); return rv_i(v); }
    default: return rv_i(*(const uint8_t *)p != 0);
    }
}

/* Two's complement value of the low `bits` bits of w. */
static int64_t low_bits_signed(int64_t w, int bits) {
    uint64_t u = (uint64_t)w & ((1ull << bits) - 1);
    if (u >> (bits - 1)) return -(int64_t)((1ull << bits) - u);
    return (int64_t)u;
}

static void ref_store(vt_dtype dt, char *p, rval v) {
    if (vt_dtype_is_float(dt)) {
        if (dt == VT_F64) {
            double d = v.is_int ? (double)v.i : v.d;
            memcpy(p, &d, 8);
            return;
        }
        float f = v.is_int ? (float)v.i : (float)v.d; /* double -> float first, as c10 */
        if (dt == VT_F32) {
            memcpy(p, &f, 4);
        } else {
            uint16_t h = dt == VT_BF16 ? vt_ref_f32_to_bf16(f) : vt_ref_f32_to_f16(f);
            memcpy(p, &h, 2);
        }
        return;
    }
    if (dt == VT_BOOL) {
        *(uint8_t *)p = v.is_int ? v.i != 0 : v.d != 0;
        return;
    }
    int64_t w;
    if (v.is_int) {
        w = v.i;
    } else if (dt == VT_I64) {
        w = (v.d >= -0x1p63 && v.d < 0x1p63) ? (int64_t)v.d : INT64_MIN;
    } else {
        double t = trunc(v.d);
        w = (t >= -0x1p31 && t < 0x1p31) ? (int64_t)t : INT32_MIN;
    }
    switch (dt) {
    case VT_I8: *(int8_t *)p = (int8_t)low_bits_signed(w, 8); break;
    case VT_U8: *(uint8_t *)p = (uint8_t)((uint64_t)w & 0xff); break;
    case VT_I16: { int16_t x = (int16_t)low_bits_signed(w, 16); memcpy(p, &x, 2); break; }
    case VT_I32: { int32_t x = (int32_t)low_bits_signed(w, 32); memcpy(p, &x, 4); break; }
    default: memcpy(p, &w, 8); break;
    }
}

static rval ref_cast(vt_dtype dt, rval v) {
    char tmp[8];
    ref_store(dt, tmp, v);
    return ref_load(dt, tmp);
}

/* ------------------------------------------------------------ iteration */

#define REF_MAX_OPS 3

/* Validate operands against out's shape (broadcasting right-aligned). */
static vt_status ref_check(const vt_tensor *out, int nin, const vt_tensor *const *in) {
    vt_status s = vt_tensor_validate(out, "ref");
    if (s) return s;
    for (int k = 0; k < nin; k++) {
        if ((s = vt_tensor_validate(in[k], "ref"))) return s;
        if (in[k]->ndim > out->ndim) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "ref: too many dims");
        int lead = out->ndim - in[k]->ndim;
        for (int d = 0; d < in[k]->ndim; d++)
            if (in[k]->sizes[d] != 1 && in[k]->sizes[d] != out->sizes[d + lead])
                return vt_set_error(VT_ERR_INVALID_ARGUMENT, "ref: shapes do not broadcast");
    }
    return VT_OK;
}

/* Address of the element of t that logical output index idx maps to. */
static char *ref_addr(const vt_tensor *t, int out_ndim, const int64_t *idx) {
    int lead = out_ndim - t->ndim;
    int64_t off = t->offset;
    for (int d = 0; d < t->ndim; d++) off += (t->sizes[d] == 1 ? 0 : idx[d + lead]) * t->strides[d];
    return (char *)t->data + off * (int64_t)vt_dtype_size(t->dtype);
}

static void ref_next(const vt_tensor *out, int64_t *idx) {
    for (int d = out->ndim - 1; d >= 0; d--) {
        if (++idx[d] < out->sizes[d]) return;
        idx[d] = 0;
    }
}

vt_status vt_ref_copy(const vt_tensor *dst, const vt_tensor *src) {
    const vt_tensor *in[1] = {src};
    vt_status s = ref_check(dst, 1, in);
    if (s) return s;
    int64_t idx[VT_MAX_DIMS] = {0}, n = vt_tensor_numel(dst);
    for (int64_t li = 0; li < n; li++, ref_next(dst, idx)) {
        const char *ps = ref_addr(src, dst->ndim, idx);
        char *pd = ref_addr(dst, dst->ndim, idx);
        if (src->dtype == dst->dtype) /* bits unchanged */
            memcpy(pd, ps, vt_dtype_size(dst->dtype));
        else
            ref_store(dst->dtype, pd, ref_load(src->dtype, ps));
    }
    return VT_OK;
}

vt_status vt_ref_where(const vt_tensor *out, const vt_tensor *cond, const vt_tensor *a, const vt_tensor *b) {
    const vt_tensor *in[3] = {cond, a, b};
    vt_status s = ref_check(out, 3, in);
    if (s) return s;
    int64_t idx[VT_MAX_DIMS] = {0}, n = vt_tensor_numel(out);
    for (int64_t li = 0; li < n; li++, ref_next(out, idx)) {
        rval c = ref_load(cond->dtype, ref_addr(cond, out->ndim, idx));
        const vt_tensor *pick = (c.is_int ? c.i != 0 : c.d != 0) ? a : b;
        ref_store(out->dtype, ref_addr(out, out->ndim, idx), ref_load(pick->dtype, ref_addr(pick, out->ndim, idx)));
    }
    return VT_OK;
}

/* ------------------------------------------------------------ ops */

enum { CLS_F32, CLS_F64, CLS_INT };

static int ref_class(vt_dtype compute) {
    if (compute == VT_F64) return CLS_F64;
    return vt_dtype_is_float(compute) ? CLS_F32 : CLS_INT;
}

/* Floating binary ops, written once per precision. Transcendental ones go
 * through double (tests compare those with a tolerance). */
#define REF_FLOAT_BINARY(NAME, T)                                                                              \
    static T NAME(vt_binary_op op, T x, T y, T al, int *is_bool) {                                             \
        T m;                                                                                                   \
        *is_bool = 0;                                                                                          \
        switch (op) {                                                                                          \
        case VT_ADD: return al == 1 ? x + y : _Generic(x, float: fmaf, default: fma)(al, y, x);                \
        case VT_SUB: return al == 1 ? x - y : _Generic(x, float: fmaf, default: fma)(-al, y, x);               \
        case VT_MUL: return x * y;                                                                             \
        case VT_DIV: return x / y;                                                                             \
        case VT_DIV_TRUNC: { T q = x / y; return (T)trunc(q); }                                                \
        case VT_DIV_FLOOR: {                                                                                   \
            if (y == 0) return x / y;                                                                          \
            m = (T)fmod(x, y);                                                                                 \
            T q = (x - m) / y;                                                                                 \
            if (m != 0 && (y < 0) != (m < 0)) q = q - 1;                                                       \
            if (q == 0) return (T)copysign(0.0, (double)(x / y));                                              \
            T fl = (T)floor(q);                                                                                \
            return q - fl > (T)0.5 ? fl + 1 : fl;                                                              \
        }                                                                                                      \
        case VT_REMAINDER:                                                                                     \
            m = (T)fmod(x, y);                                                                                 \
            return (m != 0 && (y < 0) != (m < 0)) ? m + y : m;                                                 \
        case VT_FMOD: return (T)fmod(x, y);                                                                    \
        case VT_POW: return (T)pow(x, y);                                                                      \
        case VT_MAXIMUM: return isnan(x) || isnan(y) ? (T)NAN : (x > y ? x : y);                               \
        case VT_MINIMUM: return isnan(x) || isnan(y) ? (T)NAN : (x < y ? x : y);                               \
        case VT_ATAN2: return (T)atan2(x, y);                                                                  \
        case VT_THRESHOLD_BACKWARD: return y <= al ? (T)0 : x;                                                 \
        case VT_TANH_BACKWARD: return x * _Generic(x, float: fmaf, default: fma)(-y, y, (T)1);                 \
        case VT_SIGMOID_BACKWARD: return x * ((T)1 - y) * y;                                                   \
        default: break;                                                                                        \
        }                                                                                                      \
        *is_bool = 1;                                                                                          \
        switch (op) {                                                                                          \
        case VT_EQ: return x == y;                                                                             \
        case VT_NE: return x != y;                                                                             \
        case VT_LT: return x < y;                                                                              \
        case VT_LE: return x <= y;                                                                             \
        case VT_GT: return x > y;                                                                              \
        case VT_GE: return x >= y;                                                                             \
        case VT_LOGICAL_AND: return x != 0 && y != 0;                                                          \
        case VT_LOGICAL_OR: return x != 0 || y != 0;                                                           \
        default: return (x != 0) != (y != 0);                                                                  \
        }                                                                                                      \
    }
REF_FLOAT_BINARY(ref_binary_f32, float)

/* Rounding division of bf16/f16 follows PyTorch, which evaluates it in the
 * narrow type's own arithmetic: every intermediate is rounded to it. */
static float ref_round(vt_dtype dt, double v) {
    return dt == VT_BF16 ? vt_bf16_to_f32(vt_ref_f32_to_bf16((float)v)) : vt_ref_f16_to_f32(vt_ref_f32_to_f16((float)v));
}

static float ref_reduced_div(vt_binary_op op, vt_dtype dt, float x, float y) {
    if (op == VT_DIV_TRUNC) return truncf(ref_round(dt, (double)x / y));
    if (y == 0) return x / y;
    float m = fmodf(x, y);
    float q = ref_round(dt, ref_round(dt, x - m) / y);
    if (m != 0 && (y < 0) != (m < 0)) q = ref_round(dt, q - 1);
    if (q == 0) return copysignf(0.0f, ref_round(dt, (double)x / y));
    float fl = floorf(q);
    return ref_round(dt, q - fl) > 0.5f ? ref_round(dt, fl + 1) : fl;
}
REF_FLOAT_BINARY(ref_binary_f64, double)

#define REF_FLOAT_UNARY(NAME, T)                                                                               \
    static T NAME(vt_unary_op op, T x, int *is_bool) {                                                         \
        double d = x;                                                                                          \
        *is_bool = 0;                                                                                          \
        switch (op) {                                                                                          \
        case VT_NEG: return -x;                                                                                \
        case VT_ABS: return x < 0 || (x == 0 && signbit(x)) ? -x : x;                                          \
        case VT_SIGN: return x > 0 ? 1 : x < 0 ? -1 : 0;                                                       \
        case VT_RECIPROCAL: return 1 / x;                                                                      \
        case VT_SQUARE: return x * x;                                                                          \
        case VT_EXP: return (T)exp(d);                                                                         \
        case VT_EXPM1: return (T)expm1(d);                                                                     \
        case VT_LOG: return (T)log(d);                                                                         \
        case VT_LOG1P: return (T)log1p(d);                                                                     \
        case VT_LOG2: return (T)log2(d);                                                                       \
        case VT_LOG10: return (T)log10(d);                                                                     \
        case VT_SQRT: return (T)sqrt(d);                                                                       \
        case VT_RSQRT: return (T)(1 / sqrt(d));                                                                \
        case VT_SIN: return (T)sin(d);                                                                         \
        case VT_COS: return (T)cos(d);                                                                         \
        case VT_TAN: return (T)tan(d);                                                                         \
        case VT_TANH: return (T)tanh(d);                                                                       \
        case VT_SIGMOID: return (T)(1 / (1 + exp(-d)));                                                        \
        case VT_RELU: return x < 0 ? 0 : x;                                                                    \
        case VT_ERF: return (T)erf(d);                                                                         \
        case VT_CEIL: return (T)ceil(d);                                                                       \
        case VT_FLOOR: return (T)floor(d);                                                                     \
        case VT_ROUND: return (T)nearbyint(d);                                                                 \
        case VT_TRUNC: return (T)trunc(d);                                                                     \
        case VT_FRAC: return x - (T)trunc(d);                                                                  \
        default: break;                                                                                        \
        }                                                                                                      \
        *is_bool = 1;                                                                                          \
        switch (op) {                                                                                          \
        case VT_LOGICAL_NOT: return x == 0;                                                                    \
        case VT_ISNAN: return isnan(x) != 0;                                                                   \
        case VT_ISINF: return isinf(x) != 0;                                                                   \
        default: return isfinite(x) != 0;                                                                      \
        }                                                                                                      \
    }
REF_FLOAT_UNARY(ref_unary_f32, float)
REF_FLOAT_UNARY(ref_unary_f64, double)

static uint64_t u(int64_t v) { return (uint64_t)v; }
static int64_t s(uint64_t v) { return (int64_t)v; }

/* Integer ops in int64 with wrapping; *err on division by zero. */
static int64_t ref_binary_int(vt_binary_op op, int64_t x, int64_t y, int64_t al, int *is_bool, int *err) {
    *is_bool = 0;
    switch (op) {
    case VT_ADD: return s(u(x) + u(al) * u(y));
    case VT_SUB: return s(u(x) - u(al) * u(y));
    case VT_MUL: return s(u(x) * u(y));
    case VT_DIV_TRUNC:
    case VT_DIV_FLOOR:
    case VT_REMAINDER:
    case VT_FMOD: {
        if (y == 0) {
            *err = 1;
            return 0;
        }
        /* Work on magnitudes in uint64 so INT64_MIN / -1 is ordinary. */
        uint64_t ax = x < 0 ? 0 - u(x) : u(x), ay = y < 0 ? 0 - u(y) : u(y);
        uint64_t q = ax / ay, r = ax % ay;
        int neg = (x < 0) != (y < 0);
        int64_t tq = s(neg ? 0 - q : q);
        int64_t tr = s(x < 0 ? 0 - r : r); /* C remainder: sign of the dividend */
        if (op == VT_DIV_TRUNC) return tq;
        if (op == VT_FMOD) return tr;
        if (op == VT_DIV_FLOOR) return (neg && r != 0) ? s(u(tq) - 1) : tq;
        return (tr != 0 && (tr < 0) != (y < 0)) ? s(u(tr) + u(y)) : tr;
    }
    case VT_POW: {
        if (y < 0) return x == 1 ? 1 : x == -1 ? ((y % 2) ? -1 : 1) : 0;
        uint64_t r = 1;
        for (int64_t k = 0; k < y && k < 200; k++) r *= u(x); /* repeated multiplication */
        if (y >= 200) { /* large exponents: only |x| <= 1 or an even x (reaching 0) matter */
            r = 1;
            uint64_t b = u(x);
            for (int64_t e = y; e; e >>= 1, b *= b)
                if (e & 1) r *= b;
        }
        return s(r);
    }
    case VT_MAXIMUM: return x > y ? x : y;
    case VT_MINIMUM: return x < y ? x : y;
    case VT_BITWISE_AND: return x & y;
    case VT_BITWISE_OR: return x | y;
    case VT_BITWISE_XOR: return x ^ y;
    default: break;
    }
    *is_bool = 1;
    switch (op) {
    case VT_EQ: return x == y;
    case VT_NE: return x != y;
    case VT_LT: return x < y;
    case VT_LE: return x <= y;
    case VT_GT: return x > y;
    case VT_GE: return x >= y;
    case VT_LOGICAL_AND: return x && y;
    case VT_LOGICAL_OR: return x || y;
    default: return !x != !y;
    }
}

static int ref_int_supported_binary(vt_binary_op op) {
    return op != VT_DIV && op != VT_ATAN2 && op < VT_THRESHOLD_BACKWARD;
}
static int ref_float_supported_binary(vt_binary_op op) { return op < VT_BITWISE_AND || op >= VT_THRESHOLD_BACKWARD; }

vt_status vt_ref_binary(vt_binary_op op, const vt_tensor *out, const vt_tensor *a, const vt_tensor *b,
                        vt_dtype compute, vt_scalar alpha) {
    if (op >= VT_SILU_BACKWARD && op < VT_BINARY_OP_COUNT) return vt_ref_binary_ex(op, out, a, b, compute, alpha, NULL);
    const vt_tensor *in[2] = {a, b};
    vt_status st = ref_check(out, 2, in);
    if (st) return st;
    if ((unsigned)op >= VT_BINARY_OP_COUNT || (unsigned)compute >= VT_DTYPE_COUNT)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "ref_binary: bad op or dtype");
    int cls = ref_class(compute);
    if (cls == CLS_INT ? !ref_int_supported_binary(op) : !ref_float_supported_binary(op))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "ref_binary: %s not supported for %s", vt_binary_op_name(op),
                            vt_dtype_name(compute));
    int64_t idx[VT_MAX_DIMS] = {0}, n = vt_tensor_numel(out);
    int zero_div = 0;
    for (int64_t li = 0; li < n; li++, ref_next(out, idx)) {
        rval x = ref_cast(compute, ref_load(a->dtype, ref_addr(a, out->ndim, idx)));
        rval y = ref_cast(compute, ref_load(b->dtype, ref_addr(b, out->ndim, idx)));
        int is_bool, err = 0;
        rval r;
        if ((op == VT_DIV_TRUNC || op == VT_DIV_FLOOR) && (compute == VT_BF16 || compute == VT_F16)) {
            is_bool = 0;
            r = rv_f(ref_reduced_div(op, compute, (float)x.d, (float)y.d));
        } else if (op == VT_SIGMOID_BACKWARD && compute == VT_F16) {
            is_bool = 0;
            float one_minus = ref_round(VT_F16, 1.0 - y.d);
            r = rv_f(ref_round(VT_F16, (double)ref_round(VT_F16, x.d * one_minus) * y.d));
        } else if (cls == CLS_F32) {
            float al = alpha.is_float ? (float)alpha.f : (float)alpha.i;
            r = rv_f(ref_binary_f32(op, (float)x.d, (float)y.d, al, &is_bool));
        } else if (cls == CLS_F64) {
            double al = alpha.is_float ? alpha.f : (double)alpha.i;
            r = rv_f(ref_binary_f64(op, x.d, y.d, al, &is_bool));
        } else {
            int64_t al = alpha.i;
            if (alpha.is_float) al = ref_cast(VT_I64, rv_f(alpha.f)).i;
            r = rv_i(ref_binary_int(op, x.i, y.i, al, &is_bool, &err));
        }
        zero_div |= err;
        if (is_bool)
            r = rv_i(r.is_int ? r.i != 0 : r.d != 0);
        else
            r = ref_cast(compute, r);
        ref_store(out->dtype, ref_addr(out, out->ndim, idx), r);
    }
    if (zero_div) return vt_set_error(VT_ERR_KERNEL, "ZeroDivisionError");
    return VT_OK;
}

vt_status vt_ref_unary(vt_unary_op op, const vt_tensor *out, const vt_tensor *a, vt_dtype compute) {
    if (op >= VT_SILU && op < VT_UNARY_OP_COUNT) return vt_ref_unary_ex(op, out, a, compute, NULL);
    const vt_tensor *in[1] = {a};
    vt_status st = ref_check(out, 1, in);
    if (st) return st;
    if ((unsigned)op >= VT_UNARY_OP_COUNT || (unsigned)compute >= VT_DTYPE_COUNT)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "ref_unary: bad op or dtype");
    int cls = ref_class(compute);
    int int_ok = op == VT_NEG || op == VT_ABS || op == VT_SIGN || op == VT_SQUARE || op == VT_RELU ||
                 op == VT_CEIL || op == VT_FLOOR || op == VT_ROUND || op == VT_TRUNC || op == VT_LOGICAL_NOT ||
                 op == VT_BITWISE_NOT || op == VT_ISNAN || op == VT_ISINF || op == VT_ISFINITE;
    if (cls == CLS_INT ? !int_ok : op == VT_BITWISE_NOT)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "ref_unary: %s not supported for %s", vt_unary_op_name(op),
                            vt_dtype_name(compute));
    int64_t idx[VT_MAX_DIMS] = {0}, n = vt_tensor_numel(out);
    for (int64_t li = 0; li < n; li++, ref_next(out, idx)) {
        rval x = ref_cast(compute, ref_load(a->dtype, ref_addr(a, out->ndim, idx)));
        int is_bool = 0;
        rval r;
        if (cls == CLS_F32) {
            r = rv_f(ref_unary_f32(op, (float)x.d, &is_bool));
        } else if (cls == CLS_F64) {
            r = rv_f(ref_unary_f64(op, x.d, &is_bool));
        } else {
            int64_t v = x.i;
            switch (op) {
            case VT_NEG: r = rv_i(s(0 - u(v))); break;
            case VT_ABS: r = rv_i(v < 0 ? s(0 - u(v)) : v); break;
            case VT_SIGN: r = rv_i(v > 0 ? 1 : v < 0 ? -1 : 0); break;
            case VT_SQUARE: r = rv_i(s(u(v) * u(v))); break;
            case VT_RELU: r = rv_i(v > 0 ? v : 0); break;
            case VT_LOGICAL_NOT: r = rv_i(v == 0); is_bool = 1; break;
            case VT_BITWISE_NOT: r = compute == VT_BOOL ? rv_i(v == 0) : rv_i(~v); break;
            case VT_ISNAN: case VT_ISINF: r = rv_i(0); is_bool = 1; break;
            case VT_ISFINITE: r = rv_i(1); is_bool = 1; break;
            default: r = rv_i(v); break; /* ceil, floor, round, trunc */
            }
        }
        if (is_bool)
            r = rv_i(r.is_int ? r.i != 0 : r.d != 0);
        else
            r = ref_cast(compute, r);
        ref_store(out->dtype, ref_addr(out, out->ndim, idx), r);
    }
    return VT_OK;
}

/* ------------------------------------------------------------ activations and more math
 * PyTorch's scalar formulas, written out again in the class type T with
 * libm, one element at a time. */

#define REF_PI 3.14159265358979323846

/* libm in the class type: the reference evaluates the formula in T, as the
 * kernels and PyTorch's scalar code do. */
#define M_f32(fn) fn##f
#define M_f64(fn) fn
#define L_f32 lgammaf_r
#define L_f64 lgamma_r

#define REF_MATH(SUF, T)                                                                                       \
    static T ref_clamp06_##SUF(T t) { return t < 0 ? 0 : (t > 6 ? 6 : t); }                                    \
    static T ref_digamma_##SUF(T x) {                                                                          \
        if (x == 0) return M_##SUF(copysign)(INFINITY, -(double)x);                                                  \
        if (x < 0) {                                                                                           \
            if (x == (T)trunc((double)x)) return (T)NAN;                                                       \
            double ip, r = modf((double)x, &ip);                                                               \
            return ref_digamma_##SUF(1 - x) - (T)(REF_PI / tan(REF_PI * r));                                   \
        }                                                                                                      \
        T acc = 0;                                                                                             \
        for (; x < 10; x += 1) acc -= 1 / x;                                                                   \
        if (x == 10) return acc + (T)2.25175258906672110764;                                                   \
        const T A[7] = {(T)8.33333333333333333333E-2, (T)-2.10927960927960927961E-2,                           \
                        (T)7.57575757575757575758E-3, (T)-4.16666666666666666667E-3,                           \
                        (T)3.96825396825396825397E-3, (T)-8.33333333333333333333E-3,                           \
                        (T)8.33333333333333333333E-2};                                                         \
        T tail = 0;                                                                                            \
        if (x < (T)1e17) {                                                                                     \
            T z = 1 / (x * x), poly = 0;                                                                       \
            for (int k = 0; k < 7; k++) poly = poly * z + A[k];                                                \
            tail = z * poly;                                                                                   \
        }                                                                                                      \
        return acc + M_##SUF(log)(x) - ((T)0.5 / x) - tail;                                                          \
    }                                                                                                          \
    /* calc_trigamma's steps: reflection below 1/2, six recurrence steps, the \
     * asymptotic tail (its constants double, as ATen writes them). */       \
    static T ref_trigamma_##SUF(T x) {                                                                         \
        T sign = 1, acc = 0;                                                                                   \
        if (x < (T)0.5f) {                                                                                     \
            const T s = M_##SUF(sin)((T)REF_PI * x);                                                           \
            sign = -1;                                                                                         \
            acc -= ((T)REF_PI * (T)REF_PI) / (s * s);                                                          \
            x = 1 - x;                                                                                         \
        }                                                                                                      \
        for (int k = 0; k < 6; k++, x += 1) acc += 1 / (x * x);                                                \
        const T w = 1 / (x * x);                                                                               \
        acc += (1 + 1 / (2 * x) + w * (1. / 6 - w * (1. / 30 - w * (1. / 42)))) / x;                          \
        return sign * acc;                                                                                     \
    }                                                                                                          \
    static T ref_erfinv_##SUF(T y) {                                                                           \
        T ay = y < 0 ? -y : y, x;                                                                              \
        if (ay > 1) return (T)NAN;                                                                             \
        if (ay == 1) return y > 0 ? (T)INFINITY : (T)-INFINITY;                                                \
        if (ay <= (T)0.7) {                                                                                    \
            T z = y * y;                                                                                       \
            T num = ((((T)-0.140543331 * z + (T)0.914624893) * z + (T)-1.645349621) * z + (T)0.886226899);     \
            T den = (((((T)0.012229801 * z + (T)-0.329097515) * z + (T)1.442710462) * z + (T)-2.118377725) *    \
                         z + 1);                                                                               \
            x = y * num / den;                                                                                 \
        } else {                                                                                               \
            T z = M_##SUF(sqrt)(-M_##SUF(log)((1 - ay) / 2));                                                                 \
            T num = (((T)1.641345311 * z + (T)3.429567803) * z + (T)-1.624906493) * z + (T)-1.970840454;        \
            T den = ((T)1.637067800 * z + (T)3.543889200) * z + 1;                                             \
            x = M_##SUF(copysign)(num, y) / den;                                                                     \
        }                                                                                                      \
        for (int k = 0; k < 2; k++)                                                                            \
            x = x - (M_##SUF(erf)(x) - y) / (((T)2 * (T)0.564189583547756286948079451560772586) * M_##SUF(exp)(-x * x));  \
        return x;                                                                                              \
    }                                                                                                          \
    static T ref_math_unary_##SUF(vt_unary_op op, T x, const T *p, int *is_bool) {                             \
        const T s2 = (T)0.707106781186547524400844362104849039;                                                \
        *is_bool = 0;                                                                                          \
        switch (op) {                                                                                          \
        case VT_SILU: return x / (1 + M_##SUF(exp)(-x));                                                             \
        case VT_GELU: return sizeof(T) == 4 && isinf(x) ? (T)NAN : x * (T)0.5 * (1 + M_##SUF(erf)(x * s2));                                                \
        case VT_GELU_TANH: {                                                                                   \
            T beta = (T)(1.41421356237309504880 * 1.12837916709551257390 * 0.5);                              \
            return (T)0.5 * x * (1 + M_##SUF(tanh)(beta * (x + (T)0.044715 * (x * x * x))));                         \
        }                                                                                                      \
        case VT_SOFTPLUS: return x * p[0] > p[1] ? x : M_##SUF(log1p)(M_##SUF(exp)(x * p[0])) / p[0];                         \
        case VT_MISH: return x * M_##SUF(tanh)(M_##SUF(log1p)(M_##SUF(exp)(x)));                                                       \
        case VT_ELU: return x <= 0 ? M_##SUF(expm1)(x * p[2]) * (p[0] * p[1]) : x * p[1];                            \
        case VT_LEAKY_RELU: return x > 0 ? x : x * p[0];                                                       \
        case VT_HARDSIGMOID: return ref_clamp06_##SUF(x + 3) / 6;                                              \
        case VT_HARDSWISH: return x * ref_clamp06_##SUF(x + 3) / 6;                                            \
        case VT_LOG_SIGMOID: return (x < 0 ? x : 0) - M_##SUF(log1p)(M_##SUF(exp)(-fabs(x)));                                 \
        case VT_LOGIT: {                                                                                       \
            if (p[0] < 0) return x == 1 ? (T)INFINITY : M_##SUF(log)(x / (1 - x));                                   \
            T lo = p[0], hi = 1 - p[0], c = x < lo ? lo : x > hi ? hi : x;                                     \
            return M_##SUF(log)(c / (1 - c));                                                                        \
        }                                                                                                      \
        case VT_NAN_TO_NUM: return isnan(x) ? p[0] : isinf(x) ? (x > 0 ? p[1] : p[2]) : x;                     \
        case VT_SINH: return M_##SUF(sinh)(x);                                                                       \
        case VT_COSH: return M_##SUF(cosh)(x);                                                                       \
        case VT_ASIN: return M_##SUF(asin)(x);                                                                       \
        case VT_ACOS: return M_##SUF(acos)(x);                                                                       \
        case VT_ATAN: return M_##SUF(atan)(x);                                                                       \
        case VT_ASINH: return M_##SUF(asinh)(x);                                                                     \
        case VT_ACOSH: return M_##SUF(acosh)(x);                                                                     \
        case VT_ATANH: return M_##SUF(atanh)(x);                                                                     \
        case VT_EXP2: return M_##SUF(exp2)(x);                                                                       \
        case VT_ERFC: return M_##SUF(erfc)(x);                                                                       \
        case VT_ERFINV: return ref_erfinv_##SUF(x);                                                            \
        case VT_LGAMMA: {                                                                                      \
            int sg;                                                                                            \
            return L_##SUF(x, &sg);                                                                            \
        }                                                                                                      \
        case VT_DIGAMMA: return ref_digamma_##SUF(x);                                                          \
        case VT_TRIGAMMA: return ref_trigamma_##SUF(x);                                                        \
        default: break;                                                                                        \
        }                                                                                                      \
        *is_bool = 1;                                                                                          \
        switch (op) {                                                                                          \
        case VT_ISNEGINF: return isinf(x) && x < 0;                                                            \
        case VT_ISPOSINF: return isinf(x) && x > 0;                                                            \
        default: return signbit(x) != 0;                                                                       \
        }                                                                                                      \
    }                                                                                                          \
    /* g: the incoming gradient (or a), x: the forward input (or b); p[0] alpha, p[1..] params */            \
    static T ref_math_binary_##SUF(vt_binary_op op, T g, T x, const T *p) {                                    \
        switch (op) {                                                                                          \
        case VT_SILU_BACKWARD: {                                                                               \
            T sg = 1 / (1 + M_##SUF(exp)(-x));                                                                       \
            return g * sg * (1 + x * (1 - sg));                                                                \
        }                                                                                                      \
        case VT_GELU_BACKWARD: {                                                                               \
            T cdf = (T)0.5 * (1 + M_##SUF(erf)(x * (T)0.707106781186547524400844362104849039));                      \
            T pdf = (T)(1.12837916709551257390 * 0.707106781186547524400844362104849039 * 0.5) *               \
                    M_##SUF(exp)(x * x * (T)-0.5);                                                                   \
            return g * (cdf + x * pdf);                                                                        \
        }                                                                                                      \
        case VT_GELU_TANH_BACKWARD: {                                                                          \
            T beta = (T)(1.41421356237309504880 * 1.12837916709551257390 * 0.5), kappa = (T)0.044715;         \
            T th = M_##SUF(tanh)(beta * (x + kappa * (x * x * x)));                                                  \
            T right_d = (T)0.5 * x * (1 - th * th) * (beta * (1 + 3 * kappa * (x * x)));                       \
            return g * ((T)0.5 * (1 + th) + right_d);                                                          \
        }                                                                                                      \
        case VT_MISH_BACKWARD: {                                                                               \
            T sg = 1 / (1 + M_##SUF(exp)(-x)), ts = M_##SUF(tanh)(M_##SUF(log1p)(M_##SUF(exp)(x)));                                          \
            return g * (ts + x * sg * (1 - ts * ts));                                                          \
        }                                                                                                      \
        case VT_SOFTPLUS_BACKWARD: {                                                                           \
            T z = M_##SUF(exp)(x * p[1]);                                                                            \
            return x * p[1] > p[2] ? g : g * z / (z + 1);                                                      \
        }                                                                                                      \
        case VT_ELU_BACKWARD: {                                                                                \
            T neg = p[1] * p[2];                                                                               \
            if (!(x <= 0)) return g * p[2]; /* NaN takes the positive branch, as PyTorch */                                                                        \
            return p[4] != 0 ? g * p[3] * (x + neg) : g * p[3] * neg * M_##SUF(exp)(x * p[3]);                       \
        }                                                                                                      \
        case VT_LEAKY_RELU_BACKWARD: return x > 0 ? g : g * p[1];                                              \
        case VT_HARDTANH_BACKWARD: return x <= p[1] || x >= p[2] ? 0 : g;                                      \
        case VT_HARDSIGMOID_BACKWARD: return x > -3 && x < 3 ? g * (T)(1.0f / 6.0f) : 0;                             \
        case VT_HARDSWISH_BACKWARD: return x <= -3 ? 0 : x < 3 ? g * (x / 3 + (T)0.5) : g;                     \
        case VT_LOG_SIGMOID_BACKWARD: {                                                                        \
            T z = M_##SUF(exp)(-fabs(x));                                                                            \
            return x < 0 ? g * (1 - z / (1 + z)) : g * (0 + z / (1 + z));                                      \
        }                                                                                                      \
        case VT_LOGIT_BACKWARD: {                                                                              \
            T lo = p[1] < 0 ? 0 : p[1], hi = p[1] < 0 ? 1 : 1 - p[1];                                          \
            if (x < lo || x > hi) return p[1] < 0 ? (T)NAN : 0;                                                \
            return x == 0 || x == 1 ? g * (T)INFINITY : g / (x * (1 - x));                                     \
        }                                                                                                      \
        case VT_XLOGY: return isnan(x) ? (T)NAN : g == 0 ? 0 : g * M_##SUF(log)(x);                                  \
        case VT_HYPOT: return M_##SUF(hypot)(g, x);                                                                  \
        case VT_COPYSIGN: return M_##SUF(copysign)(g, x);                                                            \
        case VT_LOGADDEXP:                                                                                     \
        case VT_LOGADDEXP2: {                                                                                  \
            if (isinf(g) && g == x) return g;                                                                  \
            T m = g < x ? x : g, d = -(T)fabs(g - x);                                                          \
            if (op == VT_LOGADDEXP) return m + M_##SUF(log1p)(M_##SUF(exp)(d));                                               \
            return m + M_##SUF(log1p)(M_##SUF(exp2)(d)) * (T)(1.0 / 0.693147180559945309417232121458176568);                  \
        }                                                                                                      \
        case VT_FMIN: return M_##SUF(fmin)(g, x);                                                                    \
        case VT_FMAX: return M_##SUF(fmax)(g, x);                                                                    \
        case VT_HEAVISIDE: return g == 0 ? x : (T)(g > 0);                                                     \
        case VT_CLAMP_MIN: return g < x ? x : g;                                                               \
        case VT_CLAMP_MAX: return g > x ? x : g;                                                               \
        default: { /* VT_LERP_SCALAR */                                                                        \
            T w = p[1];                                                                                        \
            return fabs(w) < (T)0.5 ? M_##SUF(fma)(w, x - g, g) : M_##SUF(fma)(w - 1, x - g, x);                            \
        }                                                                                                      \
        }                                                                                                      \
    }                                                                                                          \
    static T ref_ternary_##SUF(vt_ternary_op op, T a, T b, T c, T al) {                                        \
        switch (op) {                                                                                          \
        case VT_ADDCMUL: return a + al * b * c;                                                                \
        case VT_ADDCDIV: return a + al * b / c;                                                                \
        case VT_LERP: return fabs(c) < (T)0.5 ? M_##SUF(fma)(c, b - a, a) : M_##SUF(fma)(c - 1, b - a, b);                  \
        default:                                                                                               \
            if (isnan(b) || isnan(c)) return (T)NAN;                                                           \
            if (isnan(a)) return a;                                                                            \
            return a < b ? (b > c ? c : b) : (a > c ? c : a);                                                  \
        }                                                                                                      \
    }
REF_MATH(f32, float)
REF_MATH(f64, double)

static void ref_params(int cls, vt_scalar alpha, const double *params, float *pf, double *pd, int64_t *pi) {
    double p[VT_EW_MAX_PARAMS] = {0};
    if (params) memcpy(p, params, sizeof p);
    pf[0] = alpha.is_float ? (float)alpha.f : (float)alpha.i;
    pd[0] = alpha.is_float ? alpha.f : (double)alpha.i;
    pi[0] = alpha.is_float ? ref_cast(VT_I64, rv_f(alpha.f)).i : alpha.i;
    for (int k = 0; k < VT_EW_MAX_PARAMS; k++) {
        pf[1 + k] = (float)p[k];
        pd[1 + k] = p[k];
        pi[1 + k] = ref_cast(VT_I64, rv_f(p[k])).i;
    }
    (void)cls;
}

static int ref_math_unary_int_ok(vt_unary_op op) {
    return op == VT_NAN_TO_NUM || op == VT_ISNEGINF || op == VT_ISPOSINF || op == VT_SIGNBIT;
}

vt_status vt_ref_unary_ex(vt_unary_op op, const vt_tensor *out, const vt_tensor *a, vt_dtype compute,
                          const double *params) {
    if ((unsigned)op < VT_SILU) return vt_ref_unary(op, out, a, compute);
    const vt_tensor *in[1] = {a};
    vt_status st = ref_check(out, 1, in);
    if (st) return st;
    if ((unsigned)op >= VT_UNARY_OP_COUNT || (unsigned)compute >= VT_DTYPE_COUNT)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "ref_unary: bad op or dtype");
    int cls = ref_class(compute);
    if (cls == CLS_INT && !ref_math_unary_int_ok(op))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "ref_unary: %s not supported for %s", vt_unary_op_name(op),
                            vt_dtype_name(compute));
    float pf[1 + VT_EW_MAX_PARAMS];
    double pd[1 + VT_EW_MAX_PARAMS];
    int64_t pi[1 + VT_EW_MAX_PARAMS];
    ref_params(cls, vt_scalar_from_int(0), params, pf, pd, pi);
    int64_t idx[VT_MAX_DIMS] = {0}, n = vt_tensor_numel(out);
    for (int64_t li = 0; li < n; li++, ref_next(out, idx)) {
        rval x = ref_cast(compute, ref_load(a->dtype, ref_addr(a, out->ndim, idx)));
        int is_bool = 0;
        rval r;
        if (op == VT_LOGIT && (compute == VT_BF16 || compute == VT_F16)) {
            /* PyTorch's narrow logit: the clamp bounds, 1 - x, the quotient
             * and the log each rounded to the narrow type */
            float v = (float)x.d;
            if (pf[1] >= 0) {
                const float lo = ref_round(compute, pf[1]), hi = ref_round(compute, 1.0 - lo);
                v = v < lo ? lo : v > hi ? hi : v;
            }
            const float q = ref_round(compute, (double)v / ref_round(compute, 1.0 - v));
            r = rv_f(ref_round(compute, logf(q)));
        } else if (cls == CLS_F32) {
            r = rv_f(ref_math_unary_f32(op, (float)x.d, pf + 1, &is_bool));
        } else if (cls == CLS_F64) {
            r = rv_f(ref_math_unary_f64(op, x.d, pd + 1, &is_bool));
        } else {
            is_bool = op != VT_NAN_TO_NUM;
            r = rv_i(op == VT_NAN_TO_NUM ? x.i : op == VT_SIGNBIT ? x.i < 0 : 0);
        }
        r = is_bool ? rv_i(r.is_int ? r.i != 0 : r.d != 0) : ref_cast(compute, r);
        ref_store(out->dtype, ref_addr(out, out->ndim, idx), r);
    }
    return VT_OK;
}

static int ref_math_binary_ok(vt_binary_op op, int cls) {
    if (cls != CLS_INT) return op != VT_SHIFT_LEFT && op != VT_SHIFT_RIGHT;
    return op == VT_FMIN || op == VT_FMAX || op == VT_HEAVISIDE || op == VT_SHIFT_LEFT || op == VT_SHIFT_RIGHT ||
           op == VT_CLAMP_MIN || op == VT_CLAMP_MAX;
}

vt_status vt_ref_binary_ex(vt_binary_op op, const vt_tensor *out, const vt_tensor *a, const vt_tensor *b,
                           vt_dtype compute, vt_scalar alpha, const double *params) {
    if ((unsigned)op < VT_SILU_BACKWARD) return vt_ref_binary(op, out, a, b, compute, alpha);
    const vt_tensor *in[2] = {a, b};
    vt_status st = ref_check(out, 2, in);
    if (st) return st;
    if ((unsigned)op >= VT_BINARY_OP_COUNT || (unsigned)compute >= VT_DTYPE_COUNT)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "ref_binary: bad op or dtype");
    int cls = ref_class(compute);
    if (!ref_math_binary_ok(op, cls))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "ref_binary: %s not supported for %s", vt_binary_op_name(op),
                            vt_dtype_name(compute));
    float pf[1 + VT_EW_MAX_PARAMS];
    double pd[1 + VT_EW_MAX_PARAMS];
    int64_t pi[1 + VT_EW_MAX_PARAMS];
    ref_params(cls, alpha, params, pf, pd, pi);
    int64_t idx[VT_MAX_DIMS] = {0}, n = vt_tensor_numel(out);
    for (int64_t li = 0; li < n; li++, ref_next(out, idx)) {
        rval x = ref_cast(compute, ref_load(a->dtype, ref_addr(a, out->ndim, idx)));
        rval y = ref_cast(compute, ref_load(b->dtype, ref_addr(b, out->ndim, idx)));
        rval r;
        if (op == VT_XLOGY && (compute == VT_BF16 || compute == VT_F16)) {
            /* the narrow type's log, then the narrow product */
            r = rv_f(isnan(y.d) ? NAN : x.d == 0 ? 0.0 : ref_round(compute, x.d * ref_round(compute, logf((float)y.d))));
        } else if (cls == CLS_F32) {
            r = rv_f(ref_math_binary_f32(op, (float)x.d, (float)y.d, pf));
        } else if (cls == CLS_F64) {
            r = rv_f(ref_math_binary_f64(op, x.d, y.d, pd));
        } else {
            int64_t xa = x.i, yb = y.i, w;
            switch (op) {
            case VT_FMIN: w = xa < yb ? xa : yb; break;
            case VT_FMAX: w = xa > yb ? xa : yb; break;
            case VT_HEAVISIDE: w = xa == 0 ? yb : xa > 0; break;
            case VT_SHIFT_LEFT: w = yb < 0 || yb >= 64 ? 0 : s(u(xa) << yb); break;
            case VT_SHIFT_RIGHT: w = yb < 0 || yb >= 64 ? (xa < 0 ? -1 : 0) : xa >> yb; break;
            case VT_CLAMP_MIN: w = xa < yb ? yb : xa; break;
            default: w = xa > yb ? yb : xa; break;
            }
            r = rv_i(w);
        }
        ref_store(out->dtype, ref_addr(out, out->ndim, idx), ref_cast(compute, r));
    }
    return VT_OK;
}

vt_status vt_ref_ternary(vt_ternary_op op, const vt_tensor *out, const vt_tensor *a, const vt_tensor *b,
                         const vt_tensor *c, vt_dtype compute, vt_scalar alpha) {
    const vt_tensor *in[3] = {a, b, c};
    vt_status st = ref_check(out, 3, in);
    if (st) return st;
    if ((unsigned)op >= VT_TERNARY_OP_COUNT || (unsigned)compute >= VT_DTYPE_COUNT)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "ref_ternary: bad op or dtype");
    int cls = ref_class(compute);
    if (cls == CLS_INT && (op == VT_ADDCDIV || op == VT_LERP))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "ref_ternary: %s not supported for %s",
                            vt_ternary_op_name(op), vt_dtype_name(compute));
    float pf[1 + VT_EW_MAX_PARAMS];
    double pd[1 + VT_EW_MAX_PARAMS];
    int64_t pi[1 + VT_EW_MAX_PARAMS];
    ref_params(cls, alpha, NULL, pf, pd, pi);
    int64_t idx[VT_MAX_DIMS] = {0}, n = vt_tensor_numel(out);
    for (int64_t li = 0; li < n; li++, ref_next(out, idx)) {
        rval x = ref_cast(compute, ref_load(a->dtype, ref_addr(a, out->ndim, idx)));
        rval y = ref_cast(compute, ref_load(b->dtype, ref_addr(b, out->ndim, idx)));
        rval z = ref_cast(compute, ref_load(c->dtype, ref_addr(c, out->ndim, idx)));
        rval r;
        if (cls == CLS_F32) {
            r = rv_f(ref_ternary_f32(op, (float)x.d, (float)y.d, (float)z.d, pf[0]));
        } else if (cls == CLS_F64) {
            r = rv_f(ref_ternary_f64(op, x.d, y.d, z.d, pd[0]));
        } else if (op == VT_ADDCMUL) {
            r = rv_i(s(u(x.i) + u(pi[0]) * u(y.i) * u(z.i)));
        } else {
            int64_t m = x.i < y.i ? y.i : x.i;
            r = rv_i(m > z.i ? z.i : m);
        }
        ref_store(out->dtype, ref_addr(out, out->ndim, idx), ref_cast(compute, r));
    }
    return VT_OK;
}
