/* elementwise_ops.c — the portable elementwise microkernels, one per op and
 * compute class, with PyTorch's CPU formulas. Leaf loops over contiguous (or
 * scalar) operands; the driver in elementwise.c owns dtypes and strides. */
#include <pthread.h>
#include <stdatomic.h>
#include <tgmath.h>

#include "elementwise_loop.h"
#include "internal.h"

/* A binary kernel over T inputs writing O; EXPR sees x, y, al and may set err. */
#define BIN_KERNEL(NAME, T, O, EXPR)                                                                           \
    static int NAME(int64_t n, void *out_, const void *a_, int64_t as, const void *b_, int64_t bs,             \
                    const void *al_) {                                                                         \
        O *out = out_;                                                                                         \
        const T *a = a_, *b = b_;                                                                              \
        const T al = *(const T *)al_;                                                                          \
        int err = 0;                                                                                           \
        (void)al;                                                                                              \
        BIN_WALK(n, T, O, out, a, as, b, bs, EXPR);                                                            \
        return err;                                                                                            \
    }

#define UN_KERNEL(NAME, T, O, EXPR)                                                                            \
    static int NAME(int64_t n, void *out_, const void *a_, const void *prm_) {                                 \
        O *out = out_;                                                                                         \
        (void)prm_;                                                                                            \
        const T *a = a_;                                                                                       \
        VLOOP(n, { T x = a[i]; out[i] = (O)(EXPR); });                                                         \
        return 0;                                                                                              \
    }

/* ------------------------------------------------------------ float classes */

/* c10::div_floor_floating: fmod-based so that the quotient is exact. */
#define DEFINE_FLOAT_HELPERS(P, T)                                                                             \
    static inline T P##_floordiv1(T a, T b) {                                                                  \
        if (b == 0) return a / b;                                                                              \
        T mod = fmod(a, b);                                                                                    \
        T div = (a - mod) / b;                                                                                 \
        if ((mod != 0) && ((b < 0) != (mod < 0))) div -= (T)1;                                                 \
        T floordiv;                                                                                            \
        if (div != 0) {                                                                                        \
            floordiv = floor(div);                                                                             \
            if (div - floordiv > (T)0.5) floordiv += (T)1;                                                     \
        } else {                                                                                               \
            floordiv = copysign((T)0, a / b);                                                                  \
        }                                                                                                      \
        return floordiv;                                                                                       \
    }                                                                                                          \
    static inline T P##_remainder1(T a, T b) {                                                                 \
        T mod = fmod(a, b);                                                                                    \
        if ((mod != 0) && ((b < 0) != (mod < 0))) mod += b;                                                    \
        return mod;                                                                                            \
    }

/* alpha == 1 is the common case and plain a+b is what fma(1, b, a) gives;
 * any other alpha is one fused multiply-add, as PyTorch's vectorised add. */
#define DEFINE_FLOAT_CLASS(P, T)                                                                               \
    DEFINE_FLOAT_HELPERS(P, T)                                                                                 \
    BIN_KERNEL(P##_add1, T, T, x + y)                                                                          \
    BIN_KERNEL(P##_add_alpha, T, T, fma(al, y, x))                                                             \
    BIN_KERNEL(P##_sub1, T, T, x - y)                                                                          \
    BIN_KERNEL(P##_sub_alpha, T, T, fma(-al, y, x))                                                            \
    BIN_KERNEL(P##_mul, T, T, x * y)                                                                           \
    BIN_KERNEL(P##_div, T, T, x / y)                                                                           \
    BIN_KERNEL(P##_div_trunc, T, T, trunc(x / y))                                                              \
    BIN_KERNEL(P##_div_floor, T, T, P##_floordiv1(x, y))                                                       \
    BIN_KERNEL(P##_remainder, T, T, P##_remainder1(x, y))                                                      \
    BIN_KERNEL(P##_fmod, T, T, fmod(x, y))                                                                     \
    BIN_KERNEL(P##_pow, T, T, pow(x, y))                                                                       \
    BIN_KERNEL(P##_maximum, T, T, (x != x || y != y) ? (T)NAN : (x > y ? x : y))                               \
    BIN_KERNEL(P##_minimum, T, T, (x != x || y != y) ? (T)NAN : (x < y ? x : y))                               \
    BIN_KERNEL(P##_atan2, T, T, atan2(x, y))                                                                   \
    BIN_KERNEL(P##_eq, T, uint8_t, x == y)                                                                     \
    BIN_KERNEL(P##_ne, T, uint8_t, x != y)                                                                     \
    BIN_KERNEL(P##_lt, T, uint8_t, x < y)                                                                      \
    BIN_KERNEL(P##_le, T, uint8_t, x <= y)                                                                     \
    BIN_KERNEL(P##_gt, T, uint8_t, x > y)                                                                      \
    BIN_KERNEL(P##_ge, T, uint8_t, x >= y)                                                                     \
    BIN_KERNEL(P##_land, T, uint8_t, (x != 0) & (y != 0))                                                      \
    BIN_KERNEL(P##_lor, T, uint8_t, (x != 0) | (y != 0))                                                       \
    BIN_KERNEL(P##_lxor, T, uint8_t, (x != 0) ^ (y != 0))                                                      \
    BIN_KERNEL(P##_threshold_bw, T, T, y <= al ? (T)0 : x)                                                     \
    BIN_KERNEL(P##_tanh_bw, T, T, x * _Generic(y, float: fmaf, default: fma)(-y, y, (T)1))                    \
    BIN_KERNEL(P##_sigmoid_bw, T, T, x * ((T)1 - y) * y)                                                       \
    static int P##_add(int64_t n, void *o, const void *a, int64_t as, const void *b, int64_t bs,               \
                       const void *al) {                                                                       \
        return (*(const T *)al == 1 ? P##_add1 : P##_add_alpha)(n, o, a, as, b, bs, al);                       \
    }                                                                                                          \
    static int P##_sub(int64_t n, void *o, const void *a, int64_t as, const void *b, int64_t bs,               \
                       const void *al) {                                                                       \
        return (*(const T *)al == 1 ? P##_sub1 : P##_sub_alpha)(n, o, a, as, b, bs, al);                       \
    }                                                                                                          \
    UN_KERNEL(P##_neg, T, T, -x)                                                                               \
    UN_KERNEL(P##_abs, T, T, fabs(x))                                                                          \
    UN_KERNEL(P##_sign, T, T, (T)((0 < x) - (x < 0))) /* sign(NaN) = 0, as PyTorch */                          \
    UN_KERNEL(P##_reciprocal, T, T, (T)1 / x)                                                                  \
    UN_KERNEL(P##_square, T, T, x * x)                                                                         \
    UN_KERNEL(P##_exp, T, T, exp(x))                                                                           \
    UN_KERNEL(P##_expm1, T, T, expm1(x))                                                                       \
    UN_KERNEL(P##_log, T, T, log(x))                                                                           \
    UN_KERNEL(P##_log1p, T, T, log1p(x))                                                                       \
    UN_KERNEL(P##_log2, T, T, log2(x))                                                                         \
    UN_KERNEL(P##_log10, T, T, log10(x))                                                                       \
    UN_KERNEL(P##_sqrt, T, T, sqrt(x))                                                                         \
    UN_KERNEL(P##_rsqrt, T, T, (T)1 / sqrt(x))                                                                 \
    UN_KERNEL(P##_sin, T, T, sin(x))                                                                           \
    UN_KERNEL(P##_cos, T, T, cos(x))                                                                           \
    UN_KERNEL(P##_tan, T, T, tan(x))                                                                           \
    UN_KERNEL(P##_tanh, T, T, tanh(x))                                                                         \
    UN_KERNEL(P##_sigmoid, T, T, (T)1 / ((T)1 + exp(-x)))                                                      \
    UN_KERNEL(P##_relu, T, T, x < 0 ? (T)0 : x) /* NaN and -0.0 pass through, as clamp_min */                  \
    UN_KERNEL(P##_erf, T, T, erf(x))                                                                           \
    UN_KERNEL(P##_ceil, T, T, ceil(x))                                                                         \
    UN_KERNEL(P##_floor, T, T, floor(x))                                                                       \
    UN_KERNEL(P##_round, T, T, nearbyint(x)) /* half to even */                                                \
    UN_KERNEL(P##_trunc, T, T, trunc(x))                                                                       \
    UN_KERNEL(P##_frac, T, T, x - trunc(x))                                                                    \
    UN_KERNEL(P##_lnot, T, uint8_t, x == 0)                                                                    \
    UN_KERNEL(P##_isnan, T, uint8_t, x != x)                                                                   \
    UN_KERNEL(P##_isinf, T, uint8_t, fabs(x) == (T)INFINITY)                                                   \
    UN_KERNEL(P##_isfinite, T, uint8_t, x - x == 0)

DEFINE_FLOAT_CLASS(dbl, double)

/* f32 add/sub/mul/div on contiguous operands go through the ISA table. */
DEFINE_FLOAT_CLASS(flt, float)

#define F32_PORTABLE(NAME, EXPR)                                                                               \
    static void f32p_##NAME(int64_t n, float *out, const float *a, int64_t as, const float *b, int64_t bs,     \
                            float al) {                                                                        \
        (void)al;                                                                                              \
        BIN_WALK(n, float, float, out, a, as, b, bs, EXPR);                                                    \
    }
F32_PORTABLE(add, x + y)
F32_PORTABLE(sub, x - y)
F32_PORTABLE(mul, x * y)
F32_PORTABLE(div, x / y)
F32_PORTABLE(axpy, fmaf(al, y, x))
const vt_f32_binary_table vt_f32_binary_portable = {f32p_add, f32p_sub, f32p_mul, f32p_div, f32p_axpy};

static _Atomic(const vt_f32_binary_table *) f32_active;

unsigned vt_elementwise_select_isa(unsigned mask) {
    const unsigned isa = vt_isa_widest(mask);
    atomic_store_explicit(&f32_active,
                          VT_ISA_TABLE(isa, &vt_f32_binary_portable, &vt_f32_binary_avx2, &vt_f32_binary_avx512),
                          memory_order_release);
    return isa;
}

static inline const vt_f32_binary_table *f32_table(void) {
    const vt_f32_binary_table *t = atomic_load_explicit(&f32_active, memory_order_acquire);
    if (t) return t;
    vt_kernels_ready();
    return atomic_load_explicit(&f32_active, memory_order_acquire);
}

/* add and sub with alpha 1 are the table's add and sub; any other alpha is
 * its axpy, fma(al, b, a) (sub: fma(-al, b, a)), as flt_add_alpha and
 * flt_sub_alpha compute. *al: the alpha to pass. */
vt_f32_binary_fn vt_f32_binary_direct(vt_binary_op op, const void *alpha, float *al) {
    const vt_f32_binary_table *t = f32_table();
    const float a1 = *(const float *)alpha;
    *al = a1;
    switch (op) {
    case VT_ADD: return a1 == 1 ? t->add : t->axpy;
    case VT_SUB:
        *al = -a1;
        return a1 == 1 ? t->sub : t->axpy;
    case VT_MUL: return t->mul;
    case VT_DIV: return t->div;
    default: return NULL;
    }
}

#define F32_DISPATCHED(NAME, OP)                                                                               \
    static int f32_##NAME(int64_t n, void *o, const void *a, int64_t as, const void *b, int64_t bs,            \
                          const void *al) {                                                                    \
        float alv;                                                                                             \
        const vt_f32_binary_fn f = vt_f32_binary_direct(OP, al, &alv);                                         \
        if (as || bs) {                                                                                        \
            f(n, o, a, as, b, bs, alv);                                                                        \
            return 0;                                                                                          \
        }                                                                                                      \
        return flt_##NAME(n, o, a, as, b, bs, al);                                                             \
    }
F32_DISPATCHED(add, VT_ADD)
F32_DISPATCHED(sub, VT_SUB)
F32_DISPATCHED(mul, VT_MUL)
F32_DISPATCHED(div, VT_DIV)

/* ------------------------------------------------------------ int64 class
 * Wrapping arithmetic is done in uint64_t (signed overflow is undefined);
 * narrower integer dtypes get the same low bits, which the store keeps. */

static inline int64_t wrap(uint64_t u) { return (int64_t)u; } /* gcc: modulo 2^64 */
static inline int64_t i_neg(int64_t x) { return wrap(0u - (uint64_t)x); }

static inline int64_t i_div_trunc(int64_t a, int64_t b, int *err) {
    if (b == 0) {
        *err = 1;
        return 0;
    }
    if (b == -1) return i_neg(a); /* INT64_MIN / -1 wraps instead of trapping */
    return a / b;
}
static inline int64_t i_div_floor(int64_t a, int64_t b, int *err) {
    if (b == 0) {
        *err = 1;
        return 0;
    }
    if (b == -1) return i_neg(a);
    int64_t q = a / b, r = a % b;
    if (r != 0 && ((a < 0) != (b < 0))) q--; /* c10::div_floor_integer */
    return q;
}
static inline int64_t i_remainder(int64_t a, int64_t b, int *err) {
    if (b == 0) {
        *err = 1;
        return 0;
    }
    if (b == -1) return 0;
    int64_t r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}
static inline int64_t i_fmod(int64_t a, int64_t b, int *err) {
    if (b == 0) {
        *err = 1;
        return 0;
    }
    if (b == -1) return 0;
    return a % b;
}
/* PyTorch's powi: negative exponents give 0 except for bases 1 and -1. */
static inline int64_t i_pow(int64_t a, int64_t b) {
    if (b < 0) {
        if (a == 1) return 1;
        if (a == -1) return (b & 1) ? -1 : 1;
        return 0;
    }
    uint64_t r = 1, base = (uint64_t)a;
    while (b) {
        if (b & 1) r *= base;
        b >>= 1;
        base *= base;
    }
    return wrap(r);
}

BIN_KERNEL(int_add, int64_t, int64_t, wrap((uint64_t)x + (uint64_t)al * (uint64_t)y))
BIN_KERNEL(int_sub, int64_t, int64_t, wrap((uint64_t)x - (uint64_t)al * (uint64_t)y))
BIN_KERNEL(int_mul, int64_t, int64_t, wrap((uint64_t)x * (uint64_t)y))
BIN_KERNEL(int_div_trunc, int64_t, int64_t, i_div_trunc(x, y, &err))
BIN_KERNEL(int_div_floor, int64_t, int64_t, i_div_floor(x, y, &err))
BIN_KERNEL(int_remainder, int64_t, int64_t, i_remainder(x, y, &err))
BIN_KERNEL(int_fmod, int64_t, int64_t, i_fmod(x, y, &err))
BIN_KERNEL(int_pow, int64_t, int64_t, i_pow(x, y))
BIN_KERNEL(int_maximum, int64_t, int64_t, x > y ? x : y)
BIN_KERNEL(int_minimum, int64_t, int64_t, x < y ? x : y)
BIN_KERNEL(int_eq, int64_t, uint8_t, x == y)
BIN_KERNEL(int_ne, int64_t, uint8_t, x != y)
BIN_KERNEL(int_lt, int64_t, uint8_t, x < y)
BIN_KERNEL(int_le, int64_t, uint8_t, x <= y)
BIN_KERNEL(int_gt, int64_t, uint8_t, x > y)
BIN_KERNEL(int_ge, int64_t, uint8_t, x >= y)
BIN_KERNEL(int_land, int64_t, uint8_t, (x != 0) & (y != 0))
BIN_KERNEL(int_lor, int64_t, uint8_t, (x != 0) | (y != 0))
BIN_KERNEL(int_lxor, int64_t, uint8_t, (x != 0) ^ (y != 0))
BIN_KERNEL(int_band, int64_t, int64_t, x & y)
BIN_KERNEL(int_bor, int64_t, int64_t, x | y)
BIN_KERNEL(int_bxor, int64_t, int64_t, x ^ y)

UN_KERNEL(int_neg, int64_t, int64_t, i_neg(x))
UN_KERNEL(int_abs, int64_t, int64_t, x < 0 ? i_neg(x) : x)
UN_KERNEL(int_sign, int64_t, int64_t, (x > 0) - (x < 0))
UN_KERNEL(int_square, int64_t, int64_t, wrap((uint64_t)x * (uint64_t)x))
UN_KERNEL(int_relu, int64_t, int64_t, x < 0 ? 0 : x)
UN_KERNEL(int_identity, int64_t, int64_t, x) /* ceil/floor/round/trunc of an integer */
UN_KERNEL(int_lnot, int64_t, uint8_t, x == 0)
UN_KERNEL(int_bnot, int64_t, int64_t, ~x)
UN_KERNEL(int_false, int64_t, uint8_t, ((void)x, 0))
UN_KERNEL(int_true, int64_t, uint8_t, ((void)x, 1))

/* ------------------------------------------------------------ bf16 / f16 rounding division */

/* PyTorch evaluates trunc and floor division of bf16/f16 in the narrow type's
 * own arithmetic (c10::BFloat16 / c10::Half operators), so every intermediate
 * is rounded; one rounding at the end would differ in the last place. */
static inline float round_bf16(float x) { return vt_bf16_to_f32(vt_f32_to_bf16(x)); }
static inline float round_f16(float x) { return vt_f16_to_f32(vt_f32_to_f16(x)); }

#define DEFINE_NARROW_DIV(P, R)                                                                                \
    static inline float P##_floordiv1(float a, float b) {                                                      \
        if (b == 0) return a / b;                                                                              \
        float mod = fmodf(a, b);                                                                               \
        float div = R(R(a - mod) / b);                                                                         \
        if ((mod != 0) && ((b < 0) != (mod < 0))) div = R(div - 1.0f);                                        \
        if (div == 0) return copysignf(0.0f, R(a / b));                                                        \
        float fl = floorf(div);                                                                                \
        return R(div - fl) > 0.5f ? R(fl + 1.0f) : fl;                                                         \
    }                                                                                                          \
    BIN_KERNEL(P##_div_trunc, float, float, truncf(R(x / y)))                                                  \
    BIN_KERNEL(P##_div_floor, float, float, P##_floordiv1(x, y))

/* xlogy and logit in bf16 and f16 are the narrow type's steps on CPU too
 * (std::log of a BFloat16 / Half is rounded, then the product or the
 * quotient): log(x / (1 - x)) rounds 1 - x, the quotient and the log;
 * with eps, x is first clamped to [eps, 1 - eps], both in the narrow type. */
#define DEFINE_NARROW_MATH(P, R)                                                                               \
    BIN_KERNEL(P##_xlogy, float, float, y != y ? NAN : x == 0 ? 0.0f : R(x * R(logf(y))))                     \
    static inline float P##_logit1(float x, float eps) {                                                       \
        if (eps >= 0) {                                                                                        \
            const float lo = R(eps), hi = R(1.0f - lo);                                                        \
            x = x < lo ? lo : (x > hi ? hi : x);                                                               \
        }                                                                                                      \
        return R(logf(R(x / R(1.0f - x))));                                                                    \
    }                                                                                                          \
    static int P##_logit(int64_t n, void *out_, const void *a_, const void *prm_) {                            \
        float *out = out_;                                                                                     \
        const float *a = a_, *p = prm_;                                                                        \
        VLOOP(n, { out[i] = P##_logit1(a[i], p[0]); });                                                        \
        return 0;                                                                                              \
    }

DEFINE_NARROW_DIV(bf16n, round_bf16)
DEFINE_NARROW_DIV(f16n, round_f16)
DEFINE_NARROW_MATH(bf16n, round_bf16)
DEFINE_NARROW_MATH(f16n, round_f16)
/* PyTorch's sigmoid_backward for f16 (not bf16) runs in Half arithmetic too. */
BIN_KERNEL(f16n_sigmoid_bw, float, float, round_f16(round_f16(x * round_f16(1.0f - y)) * y))

vt_binary_ukernel vt_narrow_ukernel(vt_binary_op op, vt_dtype compute) {
    if (compute == VT_BF16) {
        switch (op) {
        case VT_DIV_TRUNC: return bf16n_div_trunc;
        case VT_DIV_FLOOR: return bf16n_div_floor;
        case VT_XLOGY: return bf16n_xlogy;
        default: return NULL;
        }
    }
    if (compute != VT_F16) return NULL;
    switch (op) {
    case VT_DIV_TRUNC: return f16n_div_trunc;
    case VT_DIV_FLOOR: return f16n_div_floor;
    case VT_SIGMOID_BACKWARD: return f16n_sigmoid_bw;
    case VT_XLOGY: return f16n_xlogy;
    default: return NULL;
    }
}

vt_unary_ukernel vt_narrow_unary_ukernel(vt_unary_op op, vt_dtype compute) {
    if (op != VT_LOGIT) return NULL;
    return compute == VT_BF16 ? bf16n_logit : compute == VT_F16 ? f16n_logit : NULL;
}

/* ------------------------------------------------------------ tables */

#define FLOAT_BINARY_ROW(P, ADD, SUB, MUL, DIV)                                                                \
    {                                                                                                          \
        [VT_ADD] = ADD, [VT_SUB] = SUB, [VT_MUL] = MUL, [VT_DIV] = DIV,                                        \
        [VT_DIV_TRUNC] = P##_div_trunc, [VT_DIV_FLOOR] = P##_div_floor,                                        \
        [VT_REMAINDER] = P##_remainder, [VT_FMOD] = P##_fmod, [VT_POW] = P##_pow,                              \
        [VT_MAXIMUM] = P##_maximum, [VT_MINIMUM] = P##_minimum, [VT_ATAN2] = P##_atan2,                        \
        [VT_EQ] = P##_eq, [VT_NE] = P##_ne, [VT_LT] = P##_lt, [VT_LE] = P##_le, [VT_GT] = P##_gt,              \
        [VT_GE] = P##_ge, [VT_LOGICAL_AND] = P##_land, [VT_LOGICAL_OR] = P##_lor,                              \
        [VT_LOGICAL_XOR] = P##_lxor, [VT_THRESHOLD_BACKWARD] = P##_threshold_bw,                               \
        [VT_TANH_BACKWARD] = P##_tanh_bw, [VT_SIGMOID_BACKWARD] = P##_sigmoid_bw,                              \
    }

const vt_binary_ukernel vt_binary_ukernels[VT_CLASS_COUNT][VT_BINARY_OP_COUNT] = {
    [VT_CLASS_FLOAT] = FLOAT_BINARY_ROW(flt, f32_add, f32_sub, f32_mul, f32_div),
    [VT_CLASS_DOUBLE] = FLOAT_BINARY_ROW(dbl, dbl_add, dbl_sub, dbl_mul, dbl_div),
    [VT_CLASS_INT] =
        {
            [VT_ADD] = int_add, [VT_SUB] = int_sub, [VT_MUL] = int_mul, [VT_DIV_TRUNC] = int_div_trunc,
            [VT_DIV_FLOOR] = int_div_floor, [VT_REMAINDER] = int_remainder, [VT_FMOD] = int_fmod,
            [VT_POW] = int_pow, [VT_MAXIMUM] = int_maximum, [VT_MINIMUM] = int_minimum, [VT_EQ] = int_eq,
            [VT_NE] = int_ne, [VT_LT] = int_lt, [VT_LE] = int_le, [VT_GT] = int_gt, [VT_GE] = int_ge,
            [VT_LOGICAL_AND] = int_land, [VT_LOGICAL_OR] = int_lor, [VT_LOGICAL_XOR] = int_lxor,
            [VT_BITWISE_AND] = int_band, [VT_BITWISE_OR] = int_bor, [VT_BITWISE_XOR] = int_bxor,
        },
};

/* f32 tanh and sigmoid: the vector versions where the ISA has them (vt_f32_act). */
static int flt_tanh_act(int64_t n, void *out, const void *a, const void *prm) {
    const vt_f32_act_table *t = vt_f32_act();
    if (t->tanh_act) {
        t->tanh_act(n, out, a);
        return 0;
    }
    return flt_tanh(n, out, a, prm);
}
static int flt_sigmoid_act(int64_t n, void *out, const void *a, const void *prm) {
    const vt_f32_act_table *t = vt_f32_act();
    if (t->sigmoid) {
        t->sigmoid(n, out, a);
        return 0;
    }
    return flt_sigmoid(n, out, a, prm);
}

#define FLOAT_UNARY_ROW(P, TANH, SIGMOID)                                                                      \
    {                                                                                                          \
        [VT_NEG] = P##_neg, [VT_ABS] = P##_abs, [VT_SIGN] = P##_sign, [VT_RECIPROCAL] = P##_reciprocal,        \
        [VT_SQUARE] = P##_square, [VT_EXP] = P##_exp, [VT_EXPM1] = P##_expm1, [VT_LOG] = P##_log,              \
        [VT_LOG1P] = P##_log1p, [VT_LOG2] = P##_log2, [VT_LOG10] = P##_log10, [VT_SQRT] = P##_sqrt,            \
        [VT_RSQRT] = P##_rsqrt, [VT_SIN] = P##_sin, [VT_COS] = P##_cos, [VT_TAN] = P##_tan,                    \
        [VT_TANH] = TANH, [VT_SIGMOID] = SIGMOID, [VT_RELU] = P##_relu, [VT_ERF] = P##_erf,                    \
        [VT_CEIL] = P##_ceil, [VT_FLOOR] = P##_floor, [VT_ROUND] = P##_round, [VT_TRUNC] = P##_trunc,          \
        [VT_FRAC] = P##_frac, [VT_LOGICAL_NOT] = P##_lnot, [VT_ISNAN] = P##_isnan,                             \
        [VT_ISINF] = P##_isinf, [VT_ISFINITE] = P##_isfinite,                                                  \
    }

const vt_unary_ukernel vt_unary_ukernels[VT_CLASS_COUNT][VT_UNARY_OP_COUNT] = {
    [VT_CLASS_FLOAT] = FLOAT_UNARY_ROW(flt, flt_tanh_act, flt_sigmoid_act),
    [VT_CLASS_DOUBLE] = FLOAT_UNARY_ROW(dbl, dbl_tanh, dbl_sigmoid),
    [VT_CLASS_INT] =
        {
            [VT_NEG] = int_neg, [VT_ABS] = int_abs, [VT_SIGN] = int_sign, [VT_SQUARE] = int_square,
            [VT_RELU] = int_relu, [VT_CEIL] = int_identity, [VT_FLOOR] = int_identity,
            [VT_ROUND] = int_identity, [VT_TRUNC] = int_identity, [VT_LOGICAL_NOT] = int_lnot,
            [VT_BITWISE_NOT] = int_bnot, [VT_ISNAN] = int_false, [VT_ISINF] = int_false,
            [VT_ISFINITE] = int_true,
        },
};

int vt_binary_op_is_bool(vt_binary_op op) { return op >= VT_EQ && op <= VT_LOGICAL_XOR; }

int vt_unary_op_is_bool(vt_unary_op op) {
    return op == VT_LOGICAL_NOT || op == VT_ISNAN || op == VT_ISINF || op == VT_ISFINITE || op == VT_ISNEGINF ||
           op == VT_ISPOSINF || op == VT_SIGNBIT;
}
