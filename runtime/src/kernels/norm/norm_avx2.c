/* norm_avx2.c — AVX2 f32 microkernels of the normalisation family. The 64
 * lanes of the portable and AVX-512 kernels' sums (element i in lane
 * i % 64) are eight vectors here, with the same pairwise fold and no fused
 * multiply-adds, so they give the portable kernels' results bit for bit. */
#include "kernels/norm/norm.h"
#include "kernels/vmath_avx2.h"

#define LD(p, k) vt_avx2_load(p, k)
#define MASKED(v, k) _mm256_and_ps(v, _mm256_castsi256_ps(k))

/* The 64 lanes' sum (eight vectors of 8): lanes l and l + 32, then l and
 * l + 16, then fold. */
static inline float fold8(const __m256 *a) {
    /* read only (and inlined): the caller's array stays in registers */
    const __m256 b0 = _mm256_add_ps(a[0], a[4]), b1 = _mm256_add_ps(a[1], a[5]), b2 = _mm256_add_ps(a[2], a[6]),
                 b3 = _mm256_add_ps(a[3], a[7]);
    return vt_avx2_fold16(_mm256_add_ps(b0, b2), _mm256_add_ps(b1, b3));
}

/* The loops below take 64 elements a step, vector q of them into a[q]
 * (unrolled, so the accumulators stay in registers; masked-out lanes past
 * n add +0). */
static float sum(const float *x, int64_t n) {
    __m256 a[8];
    for (int q = 0; q < 8; q++) a[q] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 64) {
#pragma GCC unroll 8
        for (int q = 0; q < 8; q++) a[q] = _mm256_add_ps(a[q], LD(x + i + 8 * q, vt_avx2_tail(n - i - 8 * q)));
    }
    return fold8(a);
}

static float sqdev(const float *x, int64_t n, float m) {
    __m256 a[8], vm = _mm256_set1_ps(m);
    for (int q = 0; q < 8; q++) a[q] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 64) {
#pragma GCC unroll 8
        for (int q = 0; q < 8; q++) {
            const __m256i k = vt_avx2_tail(n - i - 8 * q);
            __m256 d = MASKED(_mm256_sub_ps(LD(x + i + 8 * q, k), vm), k);
            a[q] = _mm256_add_ps(a[q], _mm256_mul_ps(d, d));
        }
    }
    return fold8(a);
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
    __m256 a[8], b[8], vm = _mm256_set1_ps(m);
    for (int q = 0; q < 8; q++) a[q] = b[q] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 64) {
#pragma GCC unroll 8
        for (int q = 0; q < 8; q++) {
            const int64_t e = i + 8 * q;
            const __m256i k = vt_avx2_tail(n - e);
            __m256 g = LD(dy + e, k);
            if (w) g = _mm256_mul_ps(g, LD(w + e, k));
            a[q] = _mm256_add_ps(a[q], g);
            b[q] = _mm256_add_ps(b[q], _mm256_mul_ps(g, MASKED(_mm256_sub_ps(LD(x + e, k), vm), k)));
        }
    }
    *sg = fold8(a);
    *sgx = fold8(b);
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
