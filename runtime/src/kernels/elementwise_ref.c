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
