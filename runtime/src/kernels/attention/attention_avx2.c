/* attention_avx2.c — AVX2 row kernels of the attention family, the AVX-512
 * file's operations on 8 lanes: score rows, the same Cephes exp (2^n by
 * kernels/vmath_avx2.h's two exact products), and packers that write f32
 * tiles into the MXU's bf16 layout with kernels/mxu/'s bit operations. */
#include "attention.h"
#include "kernels/mxu/mxu_local.h"
#include "kernels/vmath_avx2.h"

/* Lanes below -104 are computed as exp(0) and zeroed (vt_avx2_keep). */
static inline __m256 exp8(__m256 x) {
    __m256 keep = vt_avx2_keep(x);
    __m256 xc = _mm256_and_ps(keep, _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-104.0f)), _mm256_set1_ps(89.0f)));
    __m256 n, y = vt_avx2_exp_poly(xc, &n, 0);
    y = _mm256_and_ps(keep, vt_avx2_scalef(y, n));
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

static float scores_avx2(float *s, int64_t n, int64_t nvalid, float scale, const float *bias) {
    __m256 m = _mm256_set1_ps(-INFINITY), sc = _mm256_set1_ps(scale), nan = _mm256_setzero_ps();
    int64_t c = 0;
    for (; c < nvalid; c += 8) {
        __m256i k = vt_avx2_tail(nvalid - c);
        __m256 x = _mm256_mul_ps(vt_avx2_load(s + c, k), sc);
        if (bias) x = _mm256_add_ps(x, vt_avx2_load(bias + c, k));
        vt_avx2_store(s + c, k, x);
        __m256 valid = _mm256_castsi256_ps(k);
        nan = _mm256_or_ps(nan, _mm256_and_ps(valid, _mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
        m = _mm256_blendv_ps(m, _mm256_max_ps(m, x), valid);
    }
    for (c = nvalid; c < n; c++) s[c] = -INFINITY;
    return _mm256_movemask_ps(nan) ? NAN : vt_avx2_hmax(m);
}

static float exp_sum_avx2(float *s, int64_t n, float m) {
    __m256 acc = _mm256_setzero_ps(), mv = _mm256_set1_ps(m);
    for (int64_t c = 0; c < n; c += 8) {
        __m256i k = vt_avx2_tail(n - c);
        __m256 e = exp8(_mm256_sub_ps(vt_avx2_load(s + c, k), mv));
        vt_avx2_store(s + c, k, e);
        acc = _mm256_add_ps(acc, _mm256_and_ps(e, _mm256_castsi256_ps(k)));
    }
    return vt_avx2_hadd(acc);
}

static void bwd_p_avx2(float *s, int64_t n, int64_t nvalid, float scale, const float *bias, float lse) {
    __m256 sc = _mm256_set1_ps(scale), lv = _mm256_set1_ps(lse);
    int64_t c = 0;
    for (; c < nvalid; c += 8) {
        __m256i k = vt_avx2_tail(nvalid - c);
        __m256 x = _mm256_mul_ps(vt_avx2_load(s + c, k), sc);
        if (bias) x = _mm256_add_ps(x, vt_avx2_load(bias + c, k));
        vt_avx2_store(s + c, k, exp8(_mm256_sub_ps(x, lv)));
    }
    for (c = nvalid; c < n; c++) s[c] = 0.0f;
}

static void bwd_ds_avx2(float *ds, const float *p, const float *dp, int64_t n, float delta, float scale) {
    __m256 dv = _mm256_set1_ps(delta), sc = _mm256_set1_ps(scale);
    for (int64_t c = 0; c < n; c += 8) {
        __m256i k = vt_avx2_tail(n - c);
        __m256 x = _mm256_mul_ps(vt_avx2_load(p + c, k), _mm256_sub_ps(vt_avx2_load(dp + c, k), dv));
        vt_avx2_store(ds + c, k, _mm256_mul_ps(x, sc));
    }
}

static void scale_avx2(float *x, int64_t n, float a) {
    __m256 av = _mm256_set1_ps(a);
    for (int64_t c = 0; c < n; c += 8) {
        __m256i k = vt_avx2_tail(n - c);
        vt_avx2_store(x + c, k, _mm256_mul_ps(vt_avx2_load(x + c, k), av));
    }
}

/* cols is a multiple of 16, as for the AVX-512 packer. */
static void pack_a_avx2(const float *x, int64_t ldx, int64_t rows, int64_t cols, vt_precision prec, int64_t kt,
                        int64_t c0, uint16_t *dst, int64_t panel) {
    for (int64_t r = 0; r < rows; r++) {
        uint16_t *pr = dst + (r / 16) * panel + (r % 16) * 32 + c0 * VT_MXU_CHUNK;
        const float *xr = x + r * ldx;
        for (int64_t k = 0; k < cols; k += 16) {
            __m256i p0[3], p1[3];
            int nseg = vt_mxu_split8(_mm256_loadu_ps(xr + k), prec, p0);
            vt_mxu_split8(_mm256_loadu_ps(xr + k + 8), prec, p1);
            uint16_t *o = pr + (k / 32) * VT_MXU_CHUNK + k % 32;
            for (int g = 0; g < nseg; g++)
                _mm256_storeu_si256((__m256i *)(o + g * kt * VT_MXU_CHUNK), vt_mxu_narrow16(p0[g], p1[g]));
        }
    }
}

static void pack_b_avx2(const float *x, int64_t ldx, int64_t krows, int64_t ncols, vt_precision prec, int64_t kt,
                        int64_t c0, uint16_t *dst, int64_t panel) {
    const __m256i hi_mask = _mm256_set1_epi32((int)0xffff0000u);
    for (int64_t k = 0; k < krows; k += 2) {
        uint16_t *pk = dst + (c0 + k / 32) * VT_MXU_CHUNK + ((k % 32) / 2) * 32;
        for (int64_t n = 0; n < ncols; n += 8) {
            __m256i pe[3], po[3];
            int nseg = vt_mxu_split8(_mm256_loadu_ps(x + k * ldx + n), prec, pe);
            vt_mxu_split8(_mm256_loadu_ps(x + (k + 1) * ldx + n), prec, po);
            uint16_t *o = pk + (n / 16) * panel + (n % 16) * 2;
            for (int g = 0; g < nseg; g++) {
                __m256i w = _mm256_or_si256(_mm256_and_si256(po[g], hi_mask), _mm256_srli_epi32(pe[g], 16));
                _mm256_storeu_si256((__m256i *)(o + g * kt * VT_MXU_CHUNK), w);
            }
        }
    }
}

const vt_attn_rows vt_attn_rows_avx2 = {scores_avx2, exp_sum_avx2, bwd_p_avx2, bwd_ds_avx2,
                                        scale_avx2,  pack_a_avx2,   pack_b_avx2};
