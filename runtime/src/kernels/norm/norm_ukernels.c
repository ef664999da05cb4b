/* norm_ukernels.c — portable microkernels of the normalisation family, for
 * float and double: 64 lanes for every sum (element i in lane i % 64,
 * folded pairwise, as the AVX-512 versions' four vectors of 16 are),
 * plain loops for the elementwise passes. */
#include "kernels/norm/norm.h"

#define LANES 64

#define DEFINE_NORM_UKERNELS(SFX, T)                                                                            \
    static T fold_##SFX(T *a) {                                                                                 \
        for (int w = LANES / 2; w >= 1; w >>= 1)                                                                \
            for (int l = 0; l < w; l++) a[l] += a[l + w];                                                       \
        return a[0];                                                                                            \
    }                                                                                                           \
    static T sum_##SFX(const T *x, int64_t n) {                                                                 \
        T a[LANES] = {0};                                                                                       \
        int64_t i = 0;                                                                                          \
        for (; i + LANES <= n; i += LANES)                                                                      \
            for (int l = 0; l < LANES; l++) a[l] += x[i + l];                                                   \
        for (int l = 0; i < n; i++, l++) a[l] += x[i];                                                          \
        return fold_##SFX(a);                                                                                   \
    }                                                                                                           \
    static T sqdev_##SFX(const T *x, int64_t n, T m) {                                                          \
        T a[LANES] = {0};                                                                                       \
        int64_t i = 0;                                                                                          \
        for (; i + LANES <= n; i += LANES)                                                                      \
            for (int l = 0; l < LANES; l++) {                                                                   \
                T d = x[i + l] - m;                                                                             \
                a[l] += d * d;                                                                                  \
            }                                                                                                   \
        for (int l = 0; i < n; i++, l++) {                                                                      \
            T d = x[i] - m;                                                                                     \
            a[l] += d * d;                                                                                      \
        }                                                                                                       \
        return fold_##SFX(a);                                                                                   \
    }                                                                                                           \
    static void scale_shift_##SFX(T *y, const T *x, int64_t n, T a, T b) {                                      \
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * a + b;                                                    \
    }                                                                                                           \
    static void affine_##SFX(T *y, const T *x, int64_t n, T m, T r, const T *w, const T *b) {                   \
        for (int64_t i = 0; i < n; i++) {                                                                       \
            T v = (x[i] - m) * r;                                                                               \
            if (w) v *= w[i];                                                                                   \
            if (b) v += b[i];                                                                                   \
            y[i] = v;                                                                                           \
        }                                                                                                       \
    }                                                                                                           \
    static void grad_sums_##SFX(const T *dy, const T *x, const T *w, int64_t n, T m, T *sg, T *sgx) {           \
        T a[LANES] = {0}, b[LANES] = {0};                                                                       \
        for (int64_t i = 0; i < n; i++) {                                                                       \
            T g = w ? dy[i] * w[i] : dy[i];                                                                     \
            a[i % LANES] += g;                                                                                  \
            b[i % LANES] += g * (x[i] - m);                                                                     \
        }                                                                                                       \
        *sg = fold_##SFX(a);                                                                                    \
        *sgx = fold_##SFX(b);                                                                                   \
    }                                                                                                           \
    static void grad_in_##SFX(T *dx, const T *dy, const T *x, const T *w, int64_t n, T a, T m, T c2, T c3) {    \
        for (int64_t i = 0; i < n; i++) {                                                                       \
            T g = w ? a * w[i] : a;                                                                             \
            dx[i] = g * dy[i] + c2 * (x[i] - m) + c3;                                                           \
        }                                                                                                       \
    }                                                                                                           \
    static void grad_params_##SFX(T *dw, T *db, const T *dy, const T *x, int64_t n, T m, T r) {                 \
        if (dw)                                                                                                 \
            for (int64_t i = 0; i < n; i++) dw[i] += dy[i] * ((x[i] - m) * r);                                  \
        if (db)                                                                                                 \
            for (int64_t i = 0; i < n; i++) db[i] += dy[i];                                                     \
    }

DEFINE_NORM_UKERNELS(f32, float)
DEFINE_NORM_UKERNELS(f64, double)

const vt_norm_f32_kernels vt_norm_f32_portable = {sum_f32,    sqdev_f32,     scale_shift_f32, affine_f32,
                                                  grad_sums_f32, grad_in_f32, grad_params_f32};
const vt_norm_f64_kernels vt_norm_f64_portable = {sum_f64,    sqdev_f64,     scale_shift_f64, affine_f64,
                                                  grad_sums_f64, grad_in_f64, grad_params_f64};
