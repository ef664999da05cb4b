/* attention_avx512.c — AVX-512 row kernels of the attention family: the
 * score rows, a vector exp (Cephes-style, about 1 ulp), and packers that
 * write f32 tiles straight into the MXU's bf16 layout (the bf16 parts are
 * split with the bit operations of kernels/mxu/, lane for lane the same
 * values as vt_mxu_split). */
#include "attention.h"
#include "kernels/mxu/mxu_local.h"
#include "kernels/vmath_avx512.h"

/* Lanes below -104 (their exp rounds to 0: a masked score's -inf) are
 * cleared (vt_avx512_exp_keep: 58% of a causal attention's time went to
 * subnormal scalef results before); NaN comes back as itself. */
static inline __m512 exp16(__m512 x) {
    __mmask16 keep = vt_avx512_exp_keep(x);
    __m512 xc = _mm512_maskz_min_ps(keep, _mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(89.0f));
    __m512 n, y = vt_avx512_exp_poly(xc, &n, 0);
    y = _mm512_maskz_scalef_ps(keep, y, n);
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    return _mm512_mask_mov_ps(y, nan, x);
}

static float scores_avx512(float *s, int64_t n, int64_t nvalid, float scale, const float *bias) {
    __m512 m = _mm512_set1_ps(-INFINITY), sc = _mm512_set1_ps(scale);
    __mmask16 nan = 0;
    VT_AVX512_FOR16(c, nvalid, k, {
        __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s + c), sc);
        if (bias) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(k, bias + c));
        _mm512_mask_storeu_ps(s + c, k, x);
        nan |= _mm512_mask_cmp_ps_mask(k, x, x, _CMP_UNORD_Q);
        m = _mm512_mask_max_ps(m, k, m, x);
    });
    for (int64_t c = nvalid; c < n; c++) s[c] = -INFINITY;
    return nan ? NAN : _mm512_reduce_max_ps(m);
}

static float exp_sum_avx512(float *s, int64_t n, float m) {
    __m512 acc = _mm512_setzero_ps(), mv = _mm512_set1_ps(m);
    VT_AVX512_FOR16(c, n, k, {
        __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + c), mv));
        _mm512_mask_storeu_ps(s + c, k, e);
        acc = _mm512_mask_add_ps(acc, k, acc, e);
    });
    return _mm512_reduce_add_ps(acc);
}

static void bwd_p_avx512(float *s, int64_t n, int64_t nvalid, float scale, const float *bias, float lse) {
    __m512 sc = _mm512_set1_ps(scale), lv = _mm512_set1_ps(lse);
    VT_AVX512_FOR16(c, nvalid, k, {
        __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s + c), sc);
        if (bias) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(k, bias + c));
        _mm512_mask_storeu_ps(s + c, k, exp16(_mm512_sub_ps(x, lv)));
    });
    for (int64_t c = nvalid; c < n; c++) s[c] = 0.0f;
}

static void bwd_ds_avx512(float *ds, const float *p, const float *dp, int64_t n, float delta, float scale) {
    __m512 dv = _mm512_set1_ps(delta), sc = _mm512_set1_ps(scale);
    VT_AVX512_FOR16(c, n, k, {
        __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, p + c), _mm512_sub_ps(_mm512_maskz_loadu_ps(k, dp + c), dv));
        _mm512_mask_storeu_ps(ds + c, k, _mm512_mul_ps(x, sc));
    });
}

static void scale_avx512(float *x, int64_t n, float a) {
    __m512 av = _mm512_set1_ps(a);
    VT_AVX512_FOR16(c, n, k, { _mm512_mask_storeu_ps(x + c, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + c), av)); });
}

/* The bf16 parts of 16 floats (as f32 bits, low halves zero): parts[g] for
 * segment g of prec (hi; hi, lo; hi, mid, lo). */
static inline int split16(__m512 x, vt_precision prec, __m512i parts[3]) {
    __m512i u = _mm512_castps_si512(x);
    if (prec == VT_PRECISION_DEFAULT) {
        parts[0] = vt_mxu_rne_ftz16(u);
        return 1;
    }
    parts[0] = vt_mxu_trunc_ftz16(u);
    __m512 r = _mm512_sub_ps(x, _mm512_castsi512_ps(parts[0]));
    if (prec == VT_PRECISION_HIGH) {
        parts[1] = vt_mxu_rne_ftz16(_mm512_castps_si512(r));
        return 2;
    }
    parts[1] = vt_mxu_trunc_ftz16(_mm512_castps_si512(r));
    r = _mm512_sub_ps(r, _mm512_castsi512_ps(parts[1]));
    parts[2] = vt_mxu_rne_ftz16(_mm512_castps_si512(r));
    return 3;
}

static void pack_a_avx512(const float *x, int64_t ldx, int64_t rows, int64_t cols, vt_precision prec, int64_t kt,
                          int64_t c0, uint16_t *dst, int64_t panel) {
    for (int64_t r = 0; r < rows; r++) {
        uint16_t *pr = dst + (r / 16) * panel + (r % 16) * 32 + c0 * VT_MXU_CHUNK;
        const float *xr = x + r * ldx;
        for (int64_t k = 0; k < cols; k += 16) {
            __m512i parts[3];
            int nseg = split16(_mm512_loadu_ps(xr + k), prec, parts);
            uint16_t *o = pr + (k / 32) * VT_MXU_CHUNK + k % 32;
            for (int g = 0; g < nseg; g++)
                _mm256_storeu_si256((__m256i *)(o + g * kt * VT_MXU_CHUNK),
                                    _mm512_cvtepi32_epi16(_mm512_srli_epi32(parts[g], 16)));
        }
    }
}

static void pack_b_avx512(const float *x, int64_t ldx, int64_t krows, int64_t ncols, vt_precision prec, int64_t kt,
                          int64_t c0, uint16_t *dst, int64_t panel) {
    const __m512i hi_mask = _mm512_set1_epi32((int)0xffff0000u);
    for (int64_t k = 0; k < krows; k += 2) {
        uint16_t *pk = dst + (c0 + k / 32) * VT_MXU_CHUNK + ((k % 32) / 2) * 32;
        for (int64_t n = 0; n < ncols; n += 16) {
            __m512i pe[3], po[3];
            int nseg = split16(_mm512_loadu_ps(x + k * ldx + n), prec, pe);
            split16(_mm512_loadu_ps(x + (k + 1) * ldx + n), prec, po);
            uint16_t *o = pk + (n / 16) * panel;
            for (int g = 0; g < nseg; g++) {
                __m512i w = _mm512_or_si512(_mm512_and_si512(po[g], hi_mask), _mm512_srli_epi32(pe[g], 16));
                _mm512_storeu_si512(o + g * kt * VT_MXU_CHUNK, w);
            }
        }
    }
}

const vt_attn_rows vt_attn_rows_avx512 = {scores_avx512, exp_sum_avx512, bwd_p_avx512, bwd_ds_avx512,
                                          scale_avx512,  pack_a_avx512,  pack_b_avx512};
