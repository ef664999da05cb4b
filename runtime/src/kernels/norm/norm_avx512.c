/* norm_avx512.c — AVX-512 f32 microkernels of the normalisation family.
 * Same lanes (element i in lane i % 64: four accumulators of 16, so the
 * sums are not one chain of dependent adds), same pairwise fold and no
 * fused multiply-adds, so they give the portable kernels' results bit for
 * bit. */
#include <immintrin.h>

#include "kernels/norm/norm.h"
#include "kernels/vmath_avx512.h"

static inline __mmask16 tail_mask(int64_t left) { return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1); }

/* The 64 lanes' sum (four vectors in registers, never an array the
 * compiler keeps in memory): lanes l and l + 32, then l + 16, then fold. */
static inline float fold4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    return vt_avx512_fold16(_mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3)));
}
static inline __mmask16 block_mask(int64_t n, int64_t i) { return i < n ? tail_mask(n - i) : 0; }

static float sum(const float *x, int64_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_add_ps(a0, _mm512_loadu_ps(x + i));
        a1 = _mm512_add_ps(a1, _mm512_loadu_ps(x + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_loadu_ps(x + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_loadu_ps(x + i + 48));
    }
    if (i < n) { /* the last 64 lanes, as far as they go (masked-out lanes add +0) */
        a0 = _mm512_add_ps(a0, _mm512_maskz_loadu_ps(block_mask(n, i), x + i));
        a1 = _mm512_add_ps(a1, _mm512_maskz_loadu_ps(block_mask(n, i + 16), x + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_maskz_loadu_ps(block_mask(n, i + 32), x + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_maskz_loadu_ps(block_mask(n, i + 48), x + i + 48));
    }
    return fold4(a0, a1, a2, a3);
}

static inline __m512 sqdev16(__m512 a, const float *x, __m512 vm, __mmask16 k) {
    __m512 d = _mm512_maskz_sub_ps(k, _mm512_maskz_loadu_ps(k, x), vm);
    return _mm512_add_ps(a, _mm512_mul_ps(d, d));
}

static float sqdev(const float *x, int64_t n, float m) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    const __m512 vm = _mm512_set1_ps(m);
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) { /* whole blocks: constant masks, which the compiler drops */
        a0 = sqdev16(a0, x + i, vm, 0xffff);
        a1 = sqdev16(a1, x + i + 16, vm, 0xffff);
        a2 = sqdev16(a2, x + i + 32, vm, 0xffff);
        a3 = sqdev16(a3, x + i + 48, vm, 0xffff);
    }
    if (i < n) {
        a0 = sqdev16(a0, x + i, vm, block_mask(n, i));
        a1 = sqdev16(a1, x + i + 16, vm, block_mask(n, i + 16));
        a2 = sqdev16(a2, x + i + 32, vm, block_mask(n, i + 32));
        a3 = sqdev16(a3, x + i + 48, vm, block_mask(n, i + 48));
    }
    return fold4(a0, a1, a2, a3);
}

static void scale_shift(float *y, const float *x, int64_t n, float a, float b) {
    __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
    VT_AVX512_FOR16(i, n, k, {
        __m512 v = _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), va), vb);
        _mm512_mask_storeu_ps(y + i, k, v);
    });
}

static void affine(float *y, const float *x, int64_t n, float m, float r, const float *w, const float *b) {
    __m512 vm = _mm512_set1_ps(m), vr = _mm512_set1_ps(r);
    VT_AVX512_FOR16(i, n, k, {
        __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm), vr);
        if (w) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(k, w + i));
        if (b) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, b + i));
        _mm512_mask_storeu_ps(y + i, k, v);
    });
}

/* 16 lanes of grad_sums into (a, b). */
static inline void grad16(__m512 *a, __m512 *b, const float *dy, const float *x, const float *w, __m512 vm,
                          __mmask16 k) {
    __m512 g = _mm512_maskz_loadu_ps(k, dy);
    if (w) g = _mm512_mul_ps(g, _mm512_maskz_loadu_ps(k, w));
    *a = _mm512_add_ps(*a, g);
    *b = _mm512_add_ps(*b, _mm512_mul_ps(g, _mm512_maskz_sub_ps(k, _mm512_maskz_loadu_ps(k, x), vm)));
}

static void grad_sums(const float *dy, const float *x, const float *w, int64_t n, float m, float *sg, float *sgx) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    const __m512 vm = _mm512_set1_ps(m);
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) { /* whole blocks: constant masks, which the compiler drops */
        grad16(&a0, &b0, dy + i, x + i, w ? w + i : NULL, vm, 0xffff);
        grad16(&a1, &b1, dy + i + 16, x + i + 16, w ? w + i + 16 : NULL, vm, 0xffff);
        grad16(&a2, &b2, dy + i + 32, x + i + 32, w ? w + i + 32 : NULL, vm, 0xffff);
        grad16(&a3, &b3, dy + i + 48, x + i + 48, w ? w + i + 48 : NULL, vm, 0xffff);
    }
    if (i < n) {
        grad16(&a0, &b0, dy + i, x + i, w ? w + i : NULL, vm, block_mask(n, i));
        grad16(&a1, &b1, dy + i + 16, x + i + 16, w ? w + i + 16 : NULL, vm, block_mask(n, i + 16));
        grad16(&a2, &b2, dy + i + 32, x + i + 32, w ? w + i + 32 : NULL, vm, block_mask(n, i + 32));
        grad16(&a3, &b3, dy + i + 48, x + i + 48, w ? w + i + 48 : NULL, vm, block_mask(n, i + 48));
    }
    *sg = fold4(a0, a1, a2, a3);
    *sgx = fold4(b0, b1, b2, b3);
}

static void grad_in(float *dx, const float *dy, const float *x, const float *w, int64_t n, float a, float m, float c2,
                    float c3) {
    __m512 va = _mm512_set1_ps(a), vm = _mm512_set1_ps(m), v2 = _mm512_set1_ps(c2), v3 = _mm512_set1_ps(c3);
    VT_AVX512_FOR16(i, n, k, {
        __m512 g = w ? _mm512_mul_ps(va, _mm512_maskz_loadu_ps(k, w + i)) : va;
        __m512 v = _mm512_mul_ps(g, _mm512_maskz_loadu_ps(k, dy + i));
        v = _mm512_add_ps(v, _mm512_mul_ps(v2, _mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm)));
        _mm512_mask_storeu_ps(dx + i, k, _mm512_add_ps(v, v3));
    });
}

static void grad_params(float *dw, float *db, const float *dy, const float *x, int64_t n, float m, float r) {
    __m512 vm = _mm512_set1_ps(m), vr = _mm512_set1_ps(r);
    VT_AVX512_FOR16(i, n, k, {
        __m512 g = _mm512_maskz_loadu_ps(k, dy + i);
        if (dw) {
            __m512 xh = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm), vr);
            _mm512_mask_storeu_ps(dw + i, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, dw + i), _mm512_mul_ps(g, xh)));
        }
        if (db) _mm512_mask_storeu_ps(db + i, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, db + i), g));
    });
}

const vt_norm_f32_kernels vt_norm_f32_avx512 = {sum, sqdev, scale_shift, affine, grad_sums, grad_in, grad_params};
