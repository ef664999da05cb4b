/* softmax_avx2.c — AVX2 versions of the f32 softmax line kernels: the AVX-512
 * file's passes on 8 lanes (max, exp-sum, scale along a contiguous line;
 * up to 16 strided lines side by side as two vectors), with the same Cephes
 * exp (kernels/vmath_avx2.h). */
#include "kernels/vmath_avx2.h"
#include "softmax.h"

static inline __m256 exp8(__m256 x) {
    __m256 keep = vt_avx2_keep(x);
    /* max/min return their second operand when one is NaN: NaN survives. */
    x = _mm256_max_ps(_mm256_set1_ps(-104.0f), x);
    x = _mm256_and_ps(keep, _mm256_min_ps(_mm256_set1_ps(89.0f), x));
    __m256 n, p = vt_avx2_exp_poly(x, &n, 1);
    return _mm256_and_ps(keep, vt_avx2_scalef(p, n));
}

static float line_max(const float *x, int64_t n) {
    __m256 a = _mm256_set1_ps(-INFINITY), b = a;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a = _mm256_max_ps(a, _mm256_loadu_ps(x + i));
        b = _mm256_max_ps(b, _mm256_loadu_ps(x + i + 8));
    }
    for (; i < n; i += 8) {
        __m256i k = vt_avx2_tail(n - i);
        a = _mm256_blendv_ps(a, _mm256_max_ps(a, vt_avx2_load(x + i, k)), _mm256_castsi256_ps(k));
    }
    return vt_avx2_hmax(_mm256_max_ps(a, b));
}

static void row(const float *x, float *y, int64_t n, int is_log) {
    const __m256 vm = _mm256_set1_ps(line_max(x, n));
    __m256 s0 = _mm256_setzero_ps(), s1 = s0;
    int64_t i = 0;
    if (is_log) {
        for (; i + 16 <= n; i += 16) {
            s0 = _mm256_add_ps(s0, exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm)));
            s1 = _mm256_add_ps(s1, exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vm)));
        }
        for (; i < n; i += 8) {
            __m256i k = vt_avx2_tail(n - i);
            __m256 e = exp8(_mm256_sub_ps(vt_avx2_load(x + i, k), vm));
            s1 = _mm256_add_ps(s1, _mm256_and_ps(e, _mm256_castsi256_ps(k)));
        }
        const __m256 ls = _mm256_set1_ps(logf(vt_avx2_hadd(_mm256_add_ps(s0, s1))));
        for (i = 0; i < n; i += 8) {
            __m256i k = vt_avx2_tail(n - i);
            vt_avx2_store(y + i, k, _mm256_sub_ps(_mm256_sub_ps(vt_avx2_load(x + i, k), vm), ls));
        }
        return;
    }
    for (; i + 16 <= n; i += 16) {
        __m256 e0 = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        __m256 e1 = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vm));
        _mm256_storeu_ps(y + i, e0);
        _mm256_storeu_ps(y + i + 8, e1);
        s0 = _mm256_add_ps(s0, e0);
        s1 = _mm256_add_ps(s1, e1);
    }
    for (; i < n; i += 8) {
        __m256i k = vt_avx2_tail(n - i);
        __m256 e = exp8(_mm256_sub_ps(vt_avx2_load(x + i, k), vm));
        vt_avx2_store(y + i, k, e);
        s1 = _mm256_add_ps(s1, _mm256_and_ps(e, _mm256_castsi256_ps(k)));
    }
    const __m256 r = _mm256_set1_ps(1.0f / vt_avx2_hadd(_mm256_add_ps(s0, s1)));
    for (i = 0; i < n; i += 8) {
        __m256i k = vt_avx2_tail(n - i);
        vt_avx2_store(y + i, k, _mm256_mul_ps(vt_avx2_load(y + i, k), r));
    }
}

static void row_bwd(const float *g, const float *y, float *gi, int64_t n, int is_log) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0;
    int64_t i = 0;
    if (is_log) {
        for (; i + 16 <= n; i += 16) {
            s0 = _mm256_add_ps(s0, _mm256_loadu_ps(g + i));
            s1 = _mm256_add_ps(s1, _mm256_loadu_ps(g + i + 8));
        }
        for (; i < n; i += 8) s1 = _mm256_add_ps(s1, vt_avx2_load(g + i, vt_avx2_tail(n - i)));
    } else {
        for (; i + 16 <= n; i += 16) {
            s0 = _mm256_fmadd_ps(_mm256_loadu_ps(g + i), _mm256_loadu_ps(y + i), s0);
            s1 = _mm256_fmadd_ps(_mm256_loadu_ps(g + i + 8), _mm256_loadu_ps(y + i + 8), s1);
        }
        for (; i < n; i += 8) {
            __m256i k = vt_avx2_tail(n - i);
            s1 = _mm256_fmadd_ps(vt_avx2_load(g + i, k), vt_avx2_load(y + i, k), s1);
        }
    }
    const __m256 s = _mm256_set1_ps(vt_avx2_hadd(_mm256_add_ps(s0, s1)));
    for (i = 0; i < n; i += 8) {
        __m256i k = vt_avx2_tail(n - i);
        __m256 vg = vt_avx2_load(g + i, k), vy = vt_avx2_load(y + i, k);
        __m256 r = is_log ? _mm256_fnmadd_ps(exp8(vy), s, vg) : _mm256_mul_ps(vy, _mm256_sub_ps(vg, s));
        vt_avx2_store(gi + i, k, r);
    }
}

/* w lines side by side, 8 at a time. */
static void cols8(const float *x, int64_t xs, float *y, int64_t ys, int64_t C, int64_t w, int is_log) {
    const __m256i k = vt_avx2_tail(w);
    __m256 m = _mm256_set1_ps(-INFINITY), s = _mm256_setzero_ps();
    for (int64_t c = 0; c < C; c++) m = _mm256_max_ps(m, vt_avx2_load(x + c * xs, k));
    if (is_log) {
        for (int64_t c = 0; c < C; c++) s = _mm256_add_ps(s, exp8(_mm256_sub_ps(vt_avx2_load(x + c * xs, k), m)));
        float sv[8], lv[8];
        _mm256_storeu_ps(sv, s);
        for (int l = 0; l < 8; l++) lv[l] = l < w ? logf(sv[l]) : 0.0f;
        const __m256 ls = _mm256_loadu_ps(lv);
        for (int64_t c = 0; c < C; c++)
            vt_avx2_store(y + c * ys, k, _mm256_sub_ps(_mm256_sub_ps(vt_avx2_load(x + c * xs, k), m), ls));
        return;
    }
    for (int64_t c = 0; c < C; c++) {
        __m256 e = exp8(_mm256_sub_ps(vt_avx2_load(x + c * xs, k), m));
        vt_avx2_store(y + c * ys, k, e);
        s = _mm256_add_ps(s, e);
    }
    const __m256 r = _mm256_div_ps(_mm256_set1_ps(1.0f), s);
    for (int64_t c = 0; c < C; c++) vt_avx2_store(y + c * ys, k, _mm256_mul_ps(vt_avx2_load(y + c * ys, k), r));
}

static void cols(const float *x, int64_t xs, float *y, int64_t ys, int64_t C, int64_t w, int is_log) {
    for (int64_t l = 0; l < w; l += 8) cols8(x + l, xs, y + l, ys, C, w - l < 8 ? w - l : 8, is_log);
}

static void cols_bwd8(const float *g, int64_t gs, const float *y, int64_t ys, float *gi, int64_t is, int64_t C,
                      int64_t w, int is_log) {
    const __m256i k = vt_avx2_tail(w);
    __m256 s = _mm256_setzero_ps();
    for (int64_t c = 0; c < C; c++) {
        __m256 vg = vt_avx2_load(g + c * gs, k);
        s = is_log ? _mm256_add_ps(s, vg) : _mm256_fmadd_ps(vg, vt_avx2_load(y + c * ys, k), s);
    }
    for (int64_t c = 0; c < C; c++) {
        __m256 vg = vt_avx2_load(g + c * gs, k), vy = vt_avx2_load(y + c * ys, k);
        __m256 r = is_log ? _mm256_fnmadd_ps(exp8(vy), s, vg) : _mm256_mul_ps(vy, _mm256_sub_ps(vg, s));
        vt_avx2_store(gi + c * is, k, r);
    }
}

static void cols_bwd(const float *g, int64_t gs, const float *y, int64_t ys, float *gi, int64_t is, int64_t C,
                     int64_t w, int is_log) {
    for (int64_t l = 0; l < w; l += 8)
        cols_bwd8(g + l, gs, y + l, ys, gi + l, is, C, w - l < 8 ? w - l : 8, is_log);
}

const vt_sm_table vt_sm_avx2 = {row, row_bwd, cols, cols_bwd};
