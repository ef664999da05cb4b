/* softmax_avx512.c — AVX-512 versions of the f32 softmax line kernels: a
 * 16-lane expf (Cephes polynomial, 2^n applied with scalef so underflow to
 * subnormals and overflow to inf come out right), max / exp-sum / scale
 * passes along a contiguous line, and 16 strided lines side by side. */
#include <immintrin.h>

#include "softmax.h"
#include "kernels/vmath_avx512.h"

/* Lanes below -104 (exp rounds to 0; a masked logit's -inf) are cleared
 * (vt_avx512_exp_keep). */
static inline __m512 exp16(__m512 x) {
    __mmask16 keep = vt_avx512_exp_keep(x);
    /* max/min return their second operand when one is NaN: NaN survives. */
    x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
    x = _mm512_maskz_min_ps(keep, _mm512_set1_ps(89.0f), x);
    __m512 n, p = vt_avx512_exp_poly(x, &n, 1);
    return _mm512_maskz_scalef_ps(keep, p, n);
}

static inline __mmask16 tail_mask(int64_t k) { return (__mmask16)((1u << k) - 1u); }

static float line_max(const float *x, int64_t n) {
    __m512 a = _mm512_set1_ps(-INFINITY), b = a;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a = _mm512_max_ps(a, _mm512_loadu_ps(x + i));
        b = _mm512_max_ps(b, _mm512_loadu_ps(x + i + 16));
    }
    for (; i + 16 <= n; i += 16) a = _mm512_max_ps(a, _mm512_loadu_ps(x + i));
    if (i < n) {
        __mmask16 k = tail_mask(n - i);
        a = _mm512_mask_max_ps(a, k, a, _mm512_maskz_loadu_ps(k, x + i));
    }
    return _mm512_reduce_max_ps(_mm512_max_ps(a, b));
}

static void row(const float *x, float *y, int64_t n, int is_log) {
    const __m512 vm = _mm512_set1_ps(line_max(x, n));
    __m512 s0 = _mm512_setzero_ps(), s1 = s0;
    int64_t i = 0;
    if (is_log) {
        for (; i + 32 <= n; i += 32) {
            s0 = _mm512_add_ps(s0, exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm)));
            s1 = _mm512_add_ps(s1, exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), vm)));
        }
        for (; i + 16 <= n; i += 16) s0 = _mm512_add_ps(s0, exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm)));
        if (i < n) {
            __mmask16 k = tail_mask(n - i);
            s1 = _mm512_mask_add_ps(s1, k, s1, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm)));
        }
        const __m512 ls = _mm512_set1_ps(logf(_mm512_reduce_add_ps(_mm512_add_ps(s0, s1))));
        for (i = 0; i + 16 <= n; i += 16)
            _mm512_storeu_ps(y + i, _mm512_sub_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm), ls));
        if (i < n) {
            __mmask16 k = tail_mask(n - i);
            _mm512_mask_storeu_ps(y + i, k, _mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm), ls));
        }
        return;
    }
    for (; i + 32 <= n; i += 32) {
        __m512 e0 = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
        __m512 e1 = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), vm));
        _mm512_storeu_ps(y + i, e0);
        _mm512_storeu_ps(y + i + 16, e1);
        s0 = _mm512_add_ps(s0, e0);
        s1 = _mm512_add_ps(s1, e1);
    }
    for (; i + 16 <= n; i += 16) {
        __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
        _mm512_storeu_ps(y + i, e);
        s0 = _mm512_add_ps(s0, e);
    }
    if (i < n) {
        __mmask16 k = tail_mask(n - i);
        __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm));
        _mm512_mask_storeu_ps(y + i, k, e);
        s1 = _mm512_mask_add_ps(s1, k, s1, e);
    }
    const __m512 r = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(_mm512_add_ps(s0, s1)));
    for (i = 0; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(y + i), r));
    if (i < n) {
        __mmask16 k = tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, y + i), r));
    }
}

static void row_bwd(const float *g, const float *y, float *gi, int64_t n, int is_log) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0;
    int64_t i = 0;
    if (is_log) {
        for (; i + 32 <= n; i += 32) {
            s0 = _mm512_add_ps(s0, _mm512_loadu_ps(g + i));
            s1 = _mm512_add_ps(s1, _mm512_loadu_ps(g + i + 16));
        }
        for (; i + 16 <= n; i += 16) s0 = _mm512_add_ps(s0, _mm512_loadu_ps(g + i));
        if (i < n) s1 = _mm512_add_ps(s1, _mm512_maskz_loadu_ps(tail_mask(n - i), g + i));
    } else {
        for (; i + 32 <= n; i += 32) {
            s0 = _mm512_fmadd_ps(_mm512_loadu_ps(g + i), _mm512_loadu_ps(y + i), s0);
            s1 = _mm512_fmadd_ps(_mm512_loadu_ps(g + i + 16), _mm512_loadu_ps(y + i + 16), s1);
        }
        for (; i + 16 <= n; i += 16) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(g + i), _mm512_loadu_ps(y + i), s0);
        if (i < n) {
            __mmask16 k = tail_mask(n - i);
            s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, g + i), _mm512_maskz_loadu_ps(k, y + i), s1);
        }
    }
    const __m512 s = _mm512_set1_ps(_mm512_reduce_add_ps(_mm512_add_ps(s0, s1)));
    VT_AVX512_FOR16(c, n, k, {
        __m512 vg = _mm512_maskz_loadu_ps(k, g + c), vy = _mm512_maskz_loadu_ps(k, y + c);
        __m512 r = is_log ? _mm512_fnmadd_ps(exp16(vy), s, vg) : _mm512_mul_ps(vy, _mm512_sub_ps(vg, s));
        _mm512_mask_storeu_ps(gi + c, k, r);
    });
}

static void cols(const float *x, int64_t xs, float *y, int64_t ys, int64_t C, int64_t w, int is_log) {
    const __mmask16 k = tail_mask(w);
    __m512 m = _mm512_set1_ps(-INFINITY), s = _mm512_setzero_ps();
    for (int64_t c = 0; c < C; c++) m = _mm512_mask_max_ps(m, k, m, _mm512_maskz_loadu_ps(k, x + c * xs));
    if (is_log) {
        for (int64_t c = 0; c < C; c++) s = _mm512_add_ps(s, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + c * xs), m)));
        float sv[16], lv[16];
        _mm512_storeu_ps(sv, s);
        for (int l = 0; l < 16; l++) lv[l] = l < w ? logf(sv[l]) : 0.0f;
        const __m512 ls = _mm512_loadu_ps(lv);
        for (int64_t c = 0; c < C; c++)
            _mm512_mask_storeu_ps(y + c * ys, k, _mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + c * xs), m), ls));
        return;
    }
    for (int64_t c = 0; c < C; c++) {
        __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + c * xs), m));
        _mm512_mask_storeu_ps(y + c * ys, k, e);
        s = _mm512_add_ps(s, e);
    }
    const __m512 r = _mm512_div_ps(_mm512_set1_ps(1.0f), s);
    for (int64_t c = 0; c < C; c++)
        _mm512_mask_storeu_ps(y + c * ys, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, y + c * ys), r));
}

static void cols_bwd(const float *g, int64_t gs, const float *y, int64_t ys, float *gi, int64_t is, int64_t C,
                     int64_t w, int is_log) {
    const __mmask16 k = tail_mask(w);
    __m512 s = _mm512_setzero_ps();
    for (int64_t c = 0; c < C; c++) {
        __m512 vg = _mm512_maskz_loadu_ps(k, g + c * gs);
        s = is_log ? _mm512_add_ps(s, vg) : _mm512_fmadd_ps(vg, _mm512_maskz_loadu_ps(k, y + c * ys), s);
    }
    for (int64_t c = 0; c < C; c++) {
        __m512 vg = _mm512_maskz_loadu_ps(k, g + c * gs), vy = _mm512_maskz_loadu_ps(k, y + c * ys);
        __m512 r = is_log ? _mm512_fnmadd_ps(exp16(vy), s, vg) : _mm512_mul_ps(vy, _mm512_sub_ps(vg, s));
        _mm512_mask_storeu_ps(gi + c * is, k, r);
    }
}

const vt_sm_table vt_sm_avx512 = {row, row_bwd, cols, cols_bwd};
