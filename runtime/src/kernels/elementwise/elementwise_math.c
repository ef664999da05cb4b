/* elementwise_math.c — portable microkernels for the activations, their
 * gradients, the further math ops and the ternary ops (addcmul, addcdiv,
 * lerp, clamp), with PyTorch's CPU formulas written in the class type. */
#include <pthread.h>
#include <stdatomic.h>
#include <tgmath.h>

#include "elementwise_loop.h"
#include "erf_table.h"
#include "internal.h"

/* Unary: EXPR sees x and the params p[0..]. */
#define MUN(NAME, T, O, EXPR)                                                                                  \
    static int NAME(int64_t n, void *out_, const void *a_, const void *prm_) {                                 \
        O *out = out_;                                                                                         \
        const T *a = a_, *p = prm_;                                                                            \
        (void)p;                                                                                               \
        VLOOP(n, { T x = a[i]; out[i] = (O)(EXPR); });                                                         \
        return 0;                                                                                              \
    }

/* Binary: EXPR sees x, y and p[0] = alpha, p[1..] = params. Operand strides are 0 or 1. */
#define MBIN(NAME, T, O, EXPR)                                                                                 \
    static int NAME(int64_t n, void *out_, const void *a_, int64_t as, const void *b_, int64_t bs,             \
                    const void *prm_) {                                                                        \
        O *out = out_;                                                                                         \
        const T *a = a_, *b = b_, *p = prm_;                                                                   \
        (void)p;                                                                                               \
        BIN_WALK(n, T, O, out, a, as, b, bs, EXPR);                                                            \
        return 0;                                                                                              \
    }

/* Ternary: EXPR sees x, y, z and p[0] = alpha. The all-contiguous case gets
 * its own loop; others index with the strides (0 or 1). */
#define MTER(NAME, T, EXPR)                                                                                    \
    static int NAME(int64_t n, void *out_, const void *a_, int64_t as, const void *b_, int64_t bs,             \
                    const void *c_, int64_t cs, const void *prm_) {                                            \
        T *out = out_;                                                                                         \
        const T *a = a_, *b = b_, *c = c_, *p = prm_;                                                          \
        (void)p;                                                                                               \
        if (as && bs && cs) {                                                                                  \
            VLOOP(n, { T x = a[i], y = b[i], z = c[i]; out[i] = (T)(EXPR); });                                 \
        } else {                                                                                               \
            for (int64_t i = 0; i < n; i++) {                                                                  \
                T x = a[i * as], y = b[i * bs], z = c[i * cs];                                                 \
                out[i] = (T)(EXPR);                                                                            \
            }                                                                                                  \
        }                                                                                                      \
        return 0;                                                                                              \
    }

/* ------------------------------------------------------------ special functions */

/* calc_erfinv of ATen/native/Math.h: a rational first guess and two Newton steps. */
#define DEFINE_ERFINV(NAME, T)                                                                                 \
    static inline T NAME(T y) {                                                                                \
        const T a[4] = {(T)0.886226899, (T)-1.645349621, (T)0.914624893, (T)-0.140543331};                     \
        const T b[4] = {(T)-2.118377725, (T)1.442710462, (T)-0.329097515, (T)0.012229801};                     \
        const T c[4] = {(T)-1.970840454, (T)-1.624906493, (T)3.429567803, (T)1.641345311};                     \
        const T d[2] = {(T)3.543889200, (T)1.637067800};                                                       \
        T x, z, num, dem, ya = fabs(y);                                                                        \
        if (ya > (T)1) return (T)NAN;                                                                          \
        if (ya == (T)1) return copysign((T)INFINITY, y);                                                       \
        if (ya <= (T)0.7) {                                                                                    \
            z = y * y;                                                                                         \
            num = (((a[3] * z + a[2]) * z + a[1]) * z + a[0]);                                                 \
            dem = ((((b[3] * z + b[2]) * z + b[1]) * z + b[0]) * z + (T)1);                                    \
            x = y * num / dem;                                                                                 \
        } else {                                                                                               \
            z = sqrt(-log(((T)1 - ya) / (T)2));                                                                \
            num = ((c[3] * z + c[2]) * z + c[1]) * z + c[0];                                                   \
            dem = (d[1] * z + d[0]) * z + (T)1;                                                                \
            x = copysign(num, y) / dem;                                                                        \
        }                                                                                                      \
        const T two_rsqrt_pi = (T)2 * (T)0.564189583547756286948079451560772586;                               \
        x = x - (erf(x) - y) / (two_rsqrt_pi * exp(-x * x));                                                   \
        x = x - (erf(x) - y) / (two_rsqrt_pi * exp(-x * x));                                                   \
        return x;                                                                                              \
    }
DEFINE_ERFINV(erfinv_f, float)
DEFINE_ERFINV(erfinv_d, double)

/* calc_digamma of ATen/native/Math.h (Cephes): recurrence up to 10, then
 * the asymptotic series; the reflection's pi/tan(pi r) in double. */
#define DEFINE_DIGAMMA(NAME, T)                                                                                \
    static T NAME(T x) {                                                                                       \
        static const T A[] = {(T)8.33333333333333333333E-2, (T)-2.10927960927960927961E-2,                     \
                              (T)7.57575757575757575758E-3, (T)-4.16666666666666666667E-3,                     \
                              (T)3.96825396825396825397E-3, (T)-8.33333333333333333333E-3,                     \
                              (T)8.33333333333333333333E-2};                                                   \
        if (x == 0) return copysign((T)INFINITY, -x);                                                          \
        if (x < 0) {                                                                                           \
            if (x == trunc(x)) return (T)NAN;                                                                  \
            double q, r = modf((double)x, &q);                                                                 \
            T pi_over_tan = (T)(3.14159265358979323846 / tan(3.14159265358979323846 * r));                     \
            return NAME((T)1 - x) - pi_over_tan;                                                               \
        }                                                                                                      \
        T result = 0;                                                                                          \
        while (x < 10) {                                                                                       \
            result -= (T)1 / x;                                                                                \
            x += 1;                                                                                            \
        }                                                                                                      \
        if (x == 10) return result + (T)2.25175258906672110764;                                                \
        T y = 0;                                                                                               \
        if (x < (T)1.0e17) {                                                                                   \
            T z = (T)1 / (x * x), pol = 0;                                                                     \
            for (int k = 0; k <= 6; k++) pol = pol * z + A[k];                                                 \
            y = z * pol;                                                                                       \
        }                                                                                                      \
        return result + log(x) - ((T)0.5 / x) - y;                                                             \
    }
DEFINE_DIGAMMA(digamma_f, float)
DEFINE_DIGAMMA(digamma_d, double)

/* calc_trigamma of ATen/native/Math.h with its types: T throughout, except
 * the series' tail, whose double constants make it double (then added to
 * the T sum); sin in T. digamma's derivative, polygamma(1, x). */
#define DEFINE_TRIGAMMA(NAME, T, SIN)                                                                          \
    static T NAME(T x) {                                                                                       \
        const T pi = (T)3.14159265358979323846;                                                                \
        T sign = 1, result = 0;                                                                                \
        if (x < (T)0.5f) {                                                                                     \
            sign = -1;                                                                                         \
            const T s = SIN(pi * x);                                                                           \
            result -= (pi * pi) / (s * s);                                                                     \
            x = 1 - x;                                                                                         \
        }                                                                                                      \
        for (int i = 0; i < 6; ++i) {                                                                          \
            result += 1 / (x * x);                                                                             \
            x += 1;                                                                                            \
        }                                                                                                      \
        const T ixx = 1 / (x * x);                                                                             \
        result += (1 + 1 / (2 * x) + ixx * (1. / 6 - ixx * (1. / 30 - ixx * (1. / 42)))) / x;                 \
        return sign * result;                                                                                  \
    }
DEFINE_TRIGAMMA(trigamma_f, float, sinf)
DEFINE_TRIGAMMA(trigamma_d, double, sin)

/* lgamma without touching the global signgam (kernels run on many threads). */
static inline float lgamma_f(float x) {
    int s;
    return lgammaf_r(x, &s);
}
static inline double lgamma_d(double x) {
    int s;
    return lgamma_r(x, &s);
}

/* ------------------------------------------------------------ float classes */

#define FMA(T) _Generic((T)0, float: fmaf, default: fma)

/* The activations and gradients in the class type T, each with PyTorch's
 * scalar formula (Activation.cpp, UnaryOpsKernel.cpp, BinaryOpsKernel.cpp). */
#define DEFINE_MATH_CLASS(P, T, ERFINV, DIGAMMA, LGAMMA, TRIGAMMA)                                                       \
    MUN(P##_silu, T, T, x / ((T)1 + exp(-x)))                                                                  \
    MUN(P##_gelu, T, T, P##_gelu1(x))              \
    MUN(P##_gelu_tanh, T, T,                                                                                   \
        (T)0.5 * x * ((T)1 + tanh((T)(1.41421356237309504880 * 1.12837916709551257390 * 0.5) *                 \
                                  (x + (T)0.044715 * (x * x * x)))))                                           \
    MUN(P##_softplus, T, T, (x * p[0]) > p[1] ? x : log1p(exp(x * p[0])) / p[0])                               \
    MUN(P##_mish, T, T, x * tanh(log1p(exp(x))))                                                               \
    MUN(P##_elu, T, T, x <= 0 ? expm1(x * p[2]) * (p[0] * p[1]) : x * p[1])                                    \
    MUN(P##_leaky_relu, T, T, x > 0 ? x : x * p[0])                                                            \
    MUN(P##_hardsigmoid, T, T, P##_relu6_3(x) / (T)6)                                                          \
    MUN(P##_hardswish, T, T, x * P##_relu6_3(x) / (T)6)                                                        \
    MUN(P##_log_sigmoid, T, T, (x < 0 ? x : (T)0) - log1p(exp(-fabs(x))))                                      \
    MUN(P##_logit, T, T, P##_logit1(x, p[0]))                                                                  \
    MUN(P##_nan_to_num, T, T, x != x ? p[0] : x == (T)INFINITY ? p[1] : x == -(T)INFINITY ? p[2] : x)          \
    MUN(P##_isneginf, T, uint8_t, x == -(T)INFINITY)                                                           \
    MUN(P##_isposinf, T, uint8_t, x == (T)INFINITY)                                                            \
    MUN(P##_signbit, T, uint8_t, signbit(x) != 0)                                                              \
    MUN(P##_sinh, T, T, sinh(x))                                                                               \
    MUN(P##_cosh, T, T, cosh(x))                                                                               \
    MUN(P##_asin, T, T, asin(x))                                                                               \
    MUN(P##_acos, T, T, acos(x))                                                                               \
    MUN(P##_atan, T, T, atan(x))                                                                               \
    MUN(P##_asinh, T, T, asinh(x))                                                                             \
    MUN(P##_acosh, T, T, acosh(x))                                                                             \
    MUN(P##_atanh, T, T, atanh(x))                                                                             \
    MUN(P##_exp2, T, T, exp2(x))                                                                               \
    MUN(P##_erfc, T, T, erfc(x))                                                                               \
    MUN(P##_erfinv, T, T, ERFINV(x))                                                                           \
    MUN(P##_lgamma, T, T, LGAMMA(x))                                                                           \
    MUN(P##_digamma, T, T, DIGAMMA(x))                                                                         \
    MUN(P##_trigamma, T, T, TRIGAMMA(x))                                                                       \
    MBIN(P##_silu_bw, T, T, P##_silu_bw1(x, y))                                                                \
    MBIN(P##_gelu_bw, T, T, P##_gelu_bw1(x, y))                                                                \
    MBIN(P##_gelu_tanh_bw, T, T, P##_gelu_tanh_bw1(x, y))                                                      \
    MBIN(P##_mish_bw, T, T, P##_mish_bw1(x, y))                                                                \
    MBIN(P##_softplus_bw, T, T, (y * p[1]) > p[2] ? x : x * exp(y * p[1]) / (exp(y * p[1]) + (T)1))            \
    MBIN(P##_elu_bw, T, T, P##_elu_bw1(x, y, p))                                                               \
    MBIN(P##_leaky_relu_bw, T, T, y > 0 ? x : x * p[1])                                                        \
    MBIN(P##_hardtanh_bw, T, T, (y <= p[1] || y >= p[2]) ? (T)0 : x)                                           \
    MBIN(P##_hardsigmoid_bw, T, T, (y > (T)-3 && y < (T)3) ? x * (T)(1.0f / 6.0f) : (T)0) /* a float sixth, as c10 */                         \
    MBIN(P##_hardswish_bw, T, T, y <= (T)-3 ? (T)0 : y < (T)3 ? x * ((y / (T)3) + (T)0.5) : x)                 \
    MBIN(P##_log_sigmoid_bw, T, T, P##_log_sigmoid_bw1(x, y))                                                  \
    MBIN(P##_logit_bw, T, T, P##_logit_bw1(x, y, p[1]))                                                        \
    MBIN(P##_xlogy, T, T, y != y ? (T)NAN : x == 0 ? (T)0 : x * log(y))                                        \
    MBIN(P##_hypot, T, T, hypot(x, y))                                                                         \
    MBIN(P##_copysign, T, T, copysign(x, y))                                                                   \
    MBIN(P##_logaddexp, T, T, P##_logaddexp1(x, y))                                                            \
    MBIN(P##_logaddexp2, T, T, P##_logaddexp2_1(x, y))                                                         \
    MBIN(P##_fmin, T, T, fmin(x, y))                                                                           \
    MBIN(P##_fmax, T, T, fmax(x, y))                                                                           \
    MBIN(P##_heaviside, T, T, x == 0 ? y : (T)(x > 0))                                                         \
    MBIN(P##_clamp_min, T, T, x < y ? y : x)                                                                   \
    MBIN(P##_clamp_max, T, T, x > y ? y : x)                                                                   \
    MBIN(P##_lerp_s, T, T, P##_lerp1(x, y, p[1]))                                                              \
    MTER(P##_addcmul, T, x + p[0] * y * z)                                                                     \
    MTER(P##_addcdiv, T, x + p[0] * y / z)                                                                     \
    MTER(P##_lerp, T, P##_lerp1(x, y, z))                                                                      \
    MTER(P##_clamp, T, (y != y || z != z) ? (T)NAN : P##_clamp1(x, y, z))

#define DEFINE_MATH_HELPERS(P, T)                                                                              \
    /* std::min(std::max(x + 3, 0), 6): NaN passes through, unlike fmin/fmax */                               \
    static inline T P##_relu6_3(T x) {                                                                         \
        T t = x + (T)3;                                                                                        \
        t = t < 0 ? (T)0 : t;                                                                                  \
        return (T)6 < t ? (T)6 : t;                                                                            \
    }                                                                                                          \
    static inline T P##_logit1(T x, T eps) {                                                                   \
        if (eps < 0) return x == (T)1 ? (T)INFINITY : log(x / ((T)1 - x));                                     \
        T lo = eps, hi = (T)1 - eps;                                                                           \
        T xc = x < lo ? lo : (x > hi ? hi : x);                                                                \
        return log(xc / ((T)1 - xc));                                                                          \
    }                                                                                                          \
    /* CPU PyTorch's float gelu gives NaN at +-inf; its double gelu gives +-inf * (1 + erf). */            \
    static inline T P##_gelu1(T x) {                                                                           \
        if (sizeof(T) == 4 && isinf(x)) return (T)NAN;                                                         \
        return x * (T)0.5 * ((T)1 + erf(x * (T)0.707106781186547524400844362104849039));                       \
    }                                                                                                          \
    static inline T P##_silu_bw1(T dy, T x) {                                                                  \
        const T s = (T)1 / ((T)1 + exp(-x));                                                                   \
        return dy * s * ((T)1 + x * ((T)1 - s));                                                               \
    }                                                                                                          \
    static inline T P##_gelu_bw1(T dy, T x) {                                                                  \
        const T kBeta = (T)(1.12837916709551257390 * 0.707106781186547524400844362104849039 * 0.5);            \
        const T cdf = (T)0.5 * ((T)1 + erf(x * (T)0.707106781186547524400844362104849039));                    \
        const T pdf = kBeta * exp(x * x * (T)-0.5);                                                            \
        return dy * (cdf + x * pdf);                                                                           \
    }                                                                                                          \
    static inline T P##_gelu_tanh_bw1(T dy, T x) {                                                             \
        const T kBeta = (T)(1.41421356237309504880 * 1.12837916709551257390 * 0.5), kKappa = (T)0.044715;     \
        T x_sq = x * x, x_cube = x_sq * x;                                                                     \
        T inner = kBeta * (x + kKappa * x_cube);                                                               \
        T th = tanh(inner);                                                                                    \
        T left = (T)0.5 * x, right = (T)1 + th;                                                                \
        T left_d = (T)0.5 * right;                                                                             \
        T tanh_d = (T)1 - th * th;                                                                             \
        T inner_d = kBeta * ((T)1 + (T)3 * kKappa * x_sq);                                                     \
        T right_d = left * tanh_d * inner_d;                                                                   \
        return dy * (left_d + right_d);                                                                        \
    }                                                                                                          \
    static inline T P##_mish_bw1(T dy, T x) {                                                                  \
        const T s = (T)1 / ((T)1 + exp(-x));                                                                   \
        const T ts = tanh(log1p(exp(x)));                                                                      \
        return dy * (ts + x * s * ((T)1 - ts * ts));                                                           \
    }                                                                                                          \
    static inline T P##_elu_bw1(T g, T y, const T *p) {                                                        \
        const T negcoef = p[1] * p[2], poscoef = p[2], negiptcoef = p[3];                                      \
        if (p[4] != 0) return y <= 0 ? g * negiptcoef * (y + negcoef) : g * poscoef;                           \
        return y <= 0 ? g * negiptcoef * negcoef * exp(y * negiptcoef) : g * poscoef;                          \
    }                                                                                                          \
    static inline T P##_log_sigmoid_bw1(T g, T x) {                                                            \
        const int neg = x < 0;                                                                                 \
        const T max_deriv = neg ? (T)1 : (T)0, sign = neg ? (T)1 : (T)-1;                                      \
        const T z = exp(-fabs(x));                                                                             \
        return g * (max_deriv - sign * (z / ((T)1 + z)));                                                      \
    }                                                                                                          \
    static inline T P##_logit_bw1(T dy, T x, T eps) {                                                          \
        if (eps < 0)                                                                                           \
            return (x < 0 || x > (T)1) ? (T)NAN                                                                \
                   : (x == 0 || x == (T)1) ? dy * (T)INFINITY : dy / (x * ((T)1 - x));                         \
        T lo = eps, hi = (T)1 - eps;                                                                           \
        return (x < lo || x > hi) ? (T)0 : (x == 0 || x == (T)1) ? dy * (T)INFINITY : dy / (x * ((T)1 - x));  \
    }                                                                                                          \
    static inline T P##_logaddexp1(T a, T b) {                                                                 \
        if (isinf(a) && a == b) return a;                                                                      \
        T m = a < b ? b : a;                                                                                   \
        return m + log1p(exp(-fabs(a - b)));                                                                   \
    }                                                                                                          \
    static inline T P##_logaddexp2_1(T a, T b) {                                                               \
        if (isinf(a) && a == b) return a;                                                                      \
        T m = a < b ? b : a;                                                                                   \
        return m + log1p(exp2(-fabs(a - b))) * (T)(1.0 / 0.693147180559945309417232121458176568);              \
    }                                                                                                          \
    /* PyTorch's vector lerp: one fused multiply-add from the nearer end. */                                  \
    static inline T P##_lerp1(T a, T b, T w) {                                                                 \
        int small = fabs(w) < (T)0.5;                                                                          \
        return FMA(T)(small ? w : w - (T)1, b - a, small ? a : b);                                             \
    }                                                                                                          \
    static inline T P##_clamp1(T x, T lo, T hi) {                                                              \
        T m = x < lo ? lo : x;                                                                                 \
        return hi < m ? hi : m;                                                                                \
    }

DEFINE_MATH_HELPERS(flt, float)
DEFINE_MATH_HELPERS(dbl, double)
DEFINE_MATH_CLASS(flt, float, erfinv_f, digamma_f, lgamma_f, trigamma_f)
DEFINE_MATH_CLASS(dbl, double, erfinv_d, digamma_d, lgamma_d, trigamma_d)

/* ------------------------------------------------------------ f32 ISA dispatch */

static const vt_f32_act_table act_portable = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
static _Atomic(const vt_f32_act_table *) act_active;
static _Atomic(const vt_bf16_act_table *) bf16_act_active;

unsigned vt_elementwise_act_select_isa(unsigned mask) {
    unsigned isa = vt_isa_widest(mask);
    const vt_bf16_act_table *b = NULL;
#if VT_X86
    if (isa == VT_ISA_AVX512 && (mask & VT_ISA_AVX512BF16)) b = &vt_bf16_act_avx512bf16, isa |= VT_ISA_AVX512BF16;
#endif
    atomic_store_explicit(&bf16_act_active, b, memory_order_release);
    atomic_store_explicit(&act_active, VT_ISA_TABLE(isa & ~VT_ISA_AVX512BF16, &act_portable, &vt_f32_act_avx2,
                                                    &vt_f32_act_avx512),
                          memory_order_release);
    return isa;
}

const vt_bf16_act_table *vt_bf16_act(void) {
    vt_f32_act(); /* the tables are picked together */
    return atomic_load_explicit(&bf16_act_active, memory_order_acquire);
}

const vt_f32_act_table *vt_f32_act(void) {
    const vt_f32_act_table *t = atomic_load_explicit(&act_active, memory_order_acquire);
    if (t) return t;
    vt_kernels_ready();
    return atomic_load_explicit(&act_active, memory_order_acquire);
}

#define F32_ACT_UNARY(NAME, FALLBACK)                                                                          \
    static int f32a_##NAME(int64_t n, void *o, const void *a, const void *p) {                                 \
        const vt_f32_act_table *t = vt_f32_act();                                                              \
        if (t->NAME) {                                                                                         \
            t->NAME(n, o, a);                                                                                  \
            return 0;                                                                                          \
        }                                                                                                      \
        return FALLBACK(n, o, a, p);                                                                           \
    }
F32_ACT_UNARY(silu, flt_silu)
F32_ACT_UNARY(gelu, flt_gelu)
F32_ACT_UNARY(gelu_tanh, flt_gelu_tanh)

#define F32_ACT_BINARY(NAME, FIELD, FALLBACK)                                                                 \
    static int f32a_##NAME(int64_t n, void *o, const void *a, int64_t as, const void *b, int64_t bs,            \
                           const void *p) {                                                                     \
        const vt_f32_act_table *t = vt_f32_act();                                                              \
        if (t->FIELD && as && bs) {                                                                            \
            t->FIELD(n, o, a, b);                                                                              \
            return 0;                                                                                          \
        }                                                                                                      \
        return FALLBACK(n, o, a, as, b, bs, p);                                                                \
    }
F32_ACT_BINARY(silu_bw, silu_backward, flt_silu_bw)
F32_ACT_BINARY(gelu_bw, gelu_backward, flt_gelu_bw)
F32_ACT_BINARY(gelu_tanh_bw, gelu_tanh_backward, flt_gelu_tanh_bw)

static int f32a_addcmul(int64_t n, void *o, const void *a, int64_t as, const void *b, int64_t bs, const void *c,
                        int64_t cs, const void *p) {
    const vt_f32_act_table *t = vt_f32_act();
    if (t->addcmul && as && bs && cs) {
        t->addcmul(n, o, a, b, c, *(const float *)p);
        return 0;
    }
    return flt_addcmul(n, o, a, as, b, bs, c, cs, p);
}

/* ------------------------------------------------------------ int64 class */

MUN(int_identity2, int64_t, int64_t, x) /* nan_to_num of an integer */
MUN(int_false2, int64_t, uint8_t, ((void)x, 0))
MUN(int_signbit, int64_t, uint8_t, x < 0)
MBIN(int_fmin, int64_t, int64_t, x < y ? x : y)
MBIN(int_fmax, int64_t, int64_t, x > y ? x : y)
MBIN(int_heaviside, int64_t, int64_t, x == 0 ? y : (int64_t)(x > 0))
/* Shifts as c10: left by >= 64 (or negative) gives 0, right gives the sign
 * fill; narrower dtypes get the same low bits, which the store keeps. */
MBIN(int_shl, int64_t, int64_t, (y < 0 || y >= 64) ? 0 : (int64_t)((uint64_t)x << y))
MBIN(int_shr, int64_t, int64_t, (y < 0 || y >= 64) ? (x >> 63) : (x >> y))
MBIN(int_clamp_min, int64_t, int64_t, x < y ? y : x)
MBIN(int_clamp_max, int64_t, int64_t, x > y ? y : x)
MTER(int_addcmul, int64_t, (int64_t)((uint64_t)x + (uint64_t)p[0] * (uint64_t)y * (uint64_t)z))
MTER(int_clamp, int64_t, (z < (x < y ? y : x)) ? z : (x < y ? y : x))

/* ------------------------------------------------------------ tables */

#define MATH_UNARY_ROW(P, SILU, GELU, GELU_TANH)                                                               \
    {                                                                                                          \
        [VT_SILU] = SILU, [VT_GELU] = GELU, [VT_GELU_TANH] = GELU_TANH, [VT_SOFTPLUS] = P##_softplus,          \
        [VT_MISH] = P##_mish, [VT_ELU] = P##_elu, [VT_LEAKY_RELU] = P##_leaky_relu,                            \
        [VT_HARDSIGMOID] = P##_hardsigmoid, [VT_HARDSWISH] = P##_hardswish,                                    \
        [VT_LOG_SIGMOID] = P##_log_sigmoid, [VT_LOGIT] = P##_logit, [VT_NAN_TO_NUM] = P##_nan_to_num,          \
        [VT_ISNEGINF] = P##_isneginf, [VT_ISPOSINF] = P##_isposinf, [VT_SIGNBIT] = P##_signbit,                \
        [VT_SINH] = P##_sinh, [VT_COSH] = P##_cosh, [VT_ASIN] = P##_asin, [VT_ACOS] = P##_acos,                \
        [VT_ATAN] = P##_atan, [VT_ASINH] = P##_asinh, [VT_ACOSH] = P##_acosh, [VT_ATANH] = P##_atanh,          \
        [VT_EXP2] = P##_exp2, [VT_ERFC] = P##_erfc, [VT_ERFINV] = P##_erfinv, [VT_LGAMMA] = P##_lgamma,        \
        [VT_DIGAMMA] = P##_digamma, [VT_TRIGAMMA] = P##_trigamma,                                                                            \
    }

const vt_unary_ukernel vt_math_unary_ukernels[VT_CLASS_COUNT][VT_UNARY_OP_COUNT] = {
    [VT_CLASS_FLOAT] = MATH_UNARY_ROW(flt, f32a_silu, f32a_gelu, f32a_gelu_tanh),
    [VT_CLASS_DOUBLE] = MATH_UNARY_ROW(dbl, dbl_silu, dbl_gelu, dbl_gelu_tanh),
    [VT_CLASS_INT] = {[VT_NAN_TO_NUM] = int_identity2, [VT_ISNEGINF] = int_false2, [VT_ISPOSINF] = int_false2,
                      [VT_SIGNBIT] = int_signbit},
};

#define MATH_BINARY_ROW(P, SILU_BW, GELU_BW, GELU_TANH_BW)                                                     \
    {                                                                                                          \
        [VT_SILU_BACKWARD] = SILU_BW, [VT_GELU_BACKWARD] = GELU_BW,                                            \
        [VT_GELU_TANH_BACKWARD] = GELU_TANH_BW, [VT_MISH_BACKWARD] = P##_mish_bw,                              \
        [VT_SOFTPLUS_BACKWARD] = P##_softplus_bw, [VT_ELU_BACKWARD] = P##_elu_bw,                              \
        [VT_LEAKY_RELU_BACKWARD] = P##_leaky_relu_bw, [VT_HARDTANH_BACKWARD] = P##_hardtanh_bw,                \
        [VT_HARDSIGMOID_BACKWARD] = P##_hardsigmoid_bw, [VT_HARDSWISH_BACKWARD] = P##_hardswish_bw,            \
        [VT_LOG_SIGMOID_BACKWARD] = P##_log_sigmoid_bw, [VT_LOGIT_BACKWARD] = P##_logit_bw,                    \
        [VT_XLOGY] = P##_xlogy, [VT_HYPOT] = P##_hypot, [VT_COPYSIGN] = P##_copysign,                          \
        [VT_LOGADDEXP] = P##_logaddexp, [VT_LOGADDEXP2] = P##_logaddexp2, [VT_FMIN] = P##_fmin,                \
        [VT_FMAX] = P##_fmax, [VT_HEAVISIDE] = P##_heaviside, [VT_CLAMP_MIN] = P##_clamp_min,                  \
        [VT_CLAMP_MAX] = P##_clamp_max, [VT_LERP_SCALAR] = P##_lerp_s,                                         \
    }

const vt_binary_ukernel vt_math_binary_ukernels[VT_CLASS_COUNT][VT_BINARY_OP_COUNT] = {
    [VT_CLASS_FLOAT] = MATH_BINARY_ROW(flt, f32a_silu_bw, f32a_gelu_bw, f32a_gelu_tanh_bw),
    [VT_CLASS_DOUBLE] = MATH_BINARY_ROW(dbl, dbl_silu_bw, dbl_gelu_bw, dbl_gelu_tanh_bw),
    [VT_CLASS_INT] = {[VT_FMIN] = int_fmin, [VT_FMAX] = int_fmax, [VT_HEAVISIDE] = int_heaviside,
                      [VT_SHIFT_LEFT] = int_shl, [VT_SHIFT_RIGHT] = int_shr, [VT_CLAMP_MIN] = int_clamp_min,
                      [VT_CLAMP_MAX] = int_clamp_max},
};

const vt_ternary_ukernel vt_ternary_ukernels[VT_CLASS_COUNT][VT_TERNARY_OP_COUNT] = {
    [VT_CLASS_FLOAT] = {[VT_ADDCMUL] = f32a_addcmul, [VT_ADDCDIV] = flt_addcdiv, [VT_LERP] = flt_lerp,
                        [VT_CLAMP] = flt_clamp},
    [VT_CLASS_DOUBLE] = {[VT_ADDCMUL] = dbl_addcmul, [VT_ADDCDIV] = dbl_addcdiv, [VT_LERP] = dbl_lerp,
                         [VT_CLAMP] = dbl_clamp},
    [VT_CLASS_INT] = {[VT_ADDCMUL] = int_addcmul, [VT_CLAMP] = int_clamp},
};

/* erf_table.h: midpoints, then the coefficients of t^0 .. t^5. */
const float vt_erf_table[7][16] = {
{0.1250f, 0.3750f, 0.6250f, 0.8750f, 1.1250f, 1.3750f, 1.6250f, 1.8750f, 2.1250f, 2.3750f, 2.6250f, 2.8750f, 3.1250f, 3.3750f, 3.6250f, 3.8750f},
    {1.12252963f, 1.07764506f, 0.997185409f, 0.896085799f, 0.111611769f, 0.0518299229f, 0.0215562657f, 0.00800994225f, 0.00265402952f, 0.000782938616f, 0.000205376011f, 4.78549773e-05f, 9.89678847e-06f, 1.81529902e-06f, 2.95144957e-07f, 4.25150404e-08f},
    {-0.0931549519f, -0.259446084f, -0.373897403f, -0.424389422f, -0.318273962f, -0.170359775f, -0.0804722533f, -0.0335458256f, -0.0123408195f, -0.004006478f, -0.00114787545f, -0.00029022849f, -6.47587949e-05f, -1.27517833e-05f, -2.21593359e-06f, -3.39825789e-07f},
    {-0.365642309f, -0.288495272f, -0.16526486f, -0.0397309512f, 0.35806033f, 0.234247714f, 0.130769402f, 0.0628989935f, 0.0262239985f, 0.00951495953f, 0.00301286369f, 0.000834249309f, 0.000202308394f, 4.30168366e-05f, 8.0272157e-06f, 1.31555328e-06f},
    {0.0553776175f, 0.142985716f, 0.175344661f, 0.151600942f, -0.162450284f, -0.157938004f, -0.114841931f, -0.0674421415f, -0.0330378078f, -0.0137305092f, -0.00489028171f, -0.0015024232f, -0.000399962708f, -9.25610002e-05f, -1.86669549e-05f, -3.28675355e-06f},
    {0.106054366f, 0.0626982301f, 0.00198060903f, -0.0444000699f, -0.0283348728f, 0.029983025f, 0.0493812673f, 0.0421630591f, 0.0264029279f, 0.0132059455f, 0.00546693848f, 0.00190853828f, 0.000568222604f, 0.000145342943f, 3.21036641e-05f, 6.14645387e-06f},
    {-0.0194636676f, -0.046244245f, -0.0464531966f, -0.0255095623f, 0.061061196f, 0.0306439158f, 0.002303252f, -0.011328022f, -0.0124442121f, -0.00836057868f, -0.0042364141f, -0.00172770733f, -0.000584262016f, -0.000166579775f, -4.04595812e-05f, -8.43041653e-06f},
};
