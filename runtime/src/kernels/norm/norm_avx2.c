/* norm_avx2.c — AVX2 f32 microkernels of the normalisation family. The 16
 * lanes of the portable and AVX-512 kernels (element i in lane i % 16) are
 * two vectors here, with the same pairwise fold and no fused multiply-adds,
 * so they give the portable kernels' results bit for bit. */
#include "kernels/norm/norm.h"
#include "kernels/vmath_avx2.h"

/* Lanes 0-7 and 8-15 of the 16-lane accumulator, and their masks. */
#define LANES16(i, n) const __m256i k0 = vt_avx2_tail((n) - (i)), k1 = vt_avx2_tail((n) - (i) - 8)
#define LD(p, k) vt_avx2_load(p, k)
#define MASKED(v, k) _mm256_and_ps(v, _mm256_castsi256_ps(k))

static inline float fold(__m256 lo, __m256 hi) {
    __m256 h = _mm256_add_ps(lo, hi);
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}

static float sum(const float *x, int64_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    for (int64_t i = 0; i < n; i += 16) {
        LANES16(i, n);
        a0 = _mm256_add_ps(a0, LD(x + i, k0));
        a1 = _mm256_add_ps(a1, LD(x + i + 8, k1));
    }
    return fold(a0, a1);
}

static float sqdev(const float *x, int64_t n, float m) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, vm = _mm256_set1_ps(m);
    for (int64_t i = 0; i < n; i += 16) {
        LANES16(i, n);
        __m256 d0 = MASKED(_mm256_sub_ps(LD(x + i, k0), vm), k0), d1 = MASKED(_mm256_sub_ps(LD(x + i + 8, k1), vm), k1);
        a0 = _mm256_add_ps(a0, _mm256_mul_ps(d0, d0));
        a1 = _mm256_add_ps(a1, _mm256_mul_ps(d1, d1));
    }
    return fold(a0, a1);
}

static void scale_shift(float *y, const float *x, int64_t n, float a, float b) {
    __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
    for (int64_t i = 0; i < n; i += 8) {
        const __m256i k = vt_avx2_tail(n - i);
        vt_avx2_store(y + i, k, _mm256_add_ps(_mm256_mul_ps(LD(x + i, k), va), vb));
    }
}

static void affine(float *y, const float *x, int64_t n, float m, float r, const float *w, const float *b) {
    __m256 vm = _mm256_set1_ps(m), vr = _mm256_set1_ps(r);
    for (int64_t i = 0; i < n; i += 8) {
        const __m256i k = vt_avx2_tail(n - i);
        __m256 v = _mm256_mul_ps(_mm256_sub_ps(LD(x + i, k), vm), vr);
        if (w) v = _mm256_mul_ps(v, LD(w + i, k));
        if (b) v = _mm256_add_ps(v, LD(b + i, k));
        vt_avx2_store(y + i, k, v);
    }
}

static void grad_sums(const float *dy, const float *x, const float *w, int64_t n, float m, float *sg, float *sgx) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0, vm = _mm256_set1_ps(m);
    for (int64_t i = 0; i < n; i += 16) {
        LANES16(i, n);
        __m256 g0 = LD(dy + i, k0), g1 = LD(dy + i + 8, k1);
        if (w) g0 = _mm256_mul_ps(g0, LD(w + i, k0)), g1 = _mm256_mul_ps(g1, LD(w + i + 8, k1));
        a0 = _mm256_add_ps(a0, g0);
        a1 = _mm256_add_ps(a1, g1);
        b0 = _mm256_add_ps(b0, _mm256_mul_ps(g0, MASKED(_mm256_sub_ps(LD(x + i, k0), vm), k0)));
        b1 = _mm256_add_ps(b1, _mm256_mul_ps(g1, MASKED(_mm256_sub_ps(LD(x + i + 8, k1), vm), k1)));
    }
    *sg = fold(a0, a1);
    *sgx = fold(b0, b1);
}

static void grad_in(float *dx, const float *dy, const float *x, const float *w, int64_t n, float a, float m, float c2,
                    float c3) {
    __m256 va = _mm256_set1_ps(a), vm = _mm256_set1_ps(m), v2 = _mm256_set1_ps(c2), v3 = _mm256_set1_ps(c3);
    for (int64_t i = 0; i < n; i += 8) {
        const __m256i k = vt_avx2_tail(n - i);
        __m256 g = w ? _mm256_mul_ps(va, LD(w + i, k)) : va;
        __m256 v = _mm256_mul_ps(g, LD(dy + i, k));
        v = _mm256_add_ps(v, _mm256_mul_ps(v2, _mm256_sub_ps(LD(x + i, k), vm)));
        vt_avx2_store(dx + i, k, _mm256_add_ps(v, v3));
    }
}

static void grad_params(float *dw, float *db, const float *dy, const float *x, int64_t n, float m, float r) {
    __m256 vm = _mm256_set1_ps(m), vr = _mm256_set1_ps(r);
    for (int64_t i = 0; i < n; i += 8) {
        const __m256i k = vt_avx2_tail(n - i);
        __m256 g = LD(dy + i, k);
        if (dw) {
            __m256 xh = _mm256_mul_ps(_mm256_sub_ps(LD(x + i, k), vm), vr);
            vt_avx2_store(dw + i, k, _mm256_add_ps(LD(dw + i, k), _mm256_mul_ps(g, xh)));
        }
        if (db) vt_avx2_store(db + i, k, _mm256_add_ps(LD(db + i, k), g));
    }
}

const vt_norm_f32_kernels vt_norm_f32_avx2 = {sum, sqdev, scale_shift, affine, grad_sums, grad_in, grad_params};
