/* mxu_avx2.c — AVX2/FMA MXU engine: bf16 split and VNNI zip on 8 lanes and
 * a 4x16 block kernel that widens bf16 to f32 by shifts. A bf16 product is
 * exact in f32, so each FMA equals the exact product rounded into the sum. */
#include <immintrin.h>

#include "internal.h"

static inline __m256i set1(uint32_t v) { return _mm256_set1_epi32((int)v); }

/* vt_mxu_rne_ftz and vt_mxu_trunc_ftz on 8 lanes (bf16 in the high half). */
static inline __m256i rne_ftz8(__m256i u) {
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, set1(0x7fffffffu)), set1(0x7f800000u));
    __m256i den = _mm256_cmpeq_epi32(_mm256_and_si256(u, set1(0x7f800000u)), _mm256_setzero_si256());
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(set1(0x7fffu), _mm256_and_si256(_mm256_srli_epi32(u, 16), set1(1))));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(u, set1(0x00400000u)), nan);
    r = _mm256_blendv_epi8(r, _mm256_and_si256(u, set1(0x80000000u)), den);
    return _mm256_and_si256(r, set1(0xffff0000u));
}
static inline __m256i trunc_ftz8(__m256i u) {
    __m256i den = _mm256_cmpeq_epi32(_mm256_and_si256(u, set1(0x7f800000u)), _mm256_setzero_si256());
    return _mm256_blendv_epi8(_mm256_and_si256(u, set1(0xffff0000u)), _mm256_and_si256(u, set1(0x80000000u)), den);
}

/* 16 parts (two vectors of f32 bits) to 16 contiguous bf16. */
static inline void store16(uint16_t *dst, __m256i p0, __m256i p1) {
    __m256i v = _mm256_packus_epi32(_mm256_srli_epi32(p0, 16), _mm256_srli_epi32(p1, 16));
    _mm256_storeu_si256((__m256i *)dst, _mm256_permute4x64_epi64(v, 0xD8));
}

static inline void split8(__m256 x, vt_precision prec, __m256i *hi, __m256i *mid, __m256i *lo) {
    __m256i u = _mm256_castps_si256(x);
    if (prec == VT_PRECISION_DEFAULT) {
        *hi = rne_ftz8(u);
        return;
    }
    *hi = trunc_ftz8(u);
    __m256 r = _mm256_sub_ps(x, _mm256_castsi256_ps(*hi));
    if (prec == VT_PRECISION_HIGHEST) {
        *mid = trunc_ftz8(_mm256_castps_si256(r));
        r = _mm256_sub_ps(r, _mm256_castsi256_ps(*mid));
    }
    *lo = rne_ftz8(_mm256_castps_si256(r));
}

void vt_mxu_split_avx2(const float *restrict x, int64_t n, int64_t npad, vt_precision prec, uint16_t *restrict hi,
                       uint16_t *restrict mid, uint16_t *restrict lo) {
    for (int64_t i = 0; i < npad; i += 16) {
        float tail[16];
        const float *src = x + i;
        if (i + 16 > n) {
            for (int64_t t = 0; t < 16; t++) tail[t] = i + t < n ? x[i + t] : 0.0f;
            src = tail;
        }
        __m256i h0, h1, m0 = _mm256_setzero_si256(), m1 = m0, l0 = m0, l1 = m0;
        split8(_mm256_loadu_ps(src), prec, &h0, &m0, &l0);
        split8(_mm256_loadu_ps(src + 8), prec, &h1, &m1, &l1);
        store16(hi + i, h0, h1);
        if (mid) store16(mid + i, m0, m1);
        if (lo) store16(lo + i, l0, l1);
    }
}

void vt_mxu_zip_avx2(const uint16_t *restrict even, const uint16_t *restrict odd, int64_t n, uint16_t *restrict out,
                     int64_t stride) {
    for (int64_t i = 0; i < n; i += 16) {
        __m256i e = _mm256_loadu_si256((const __m256i *)(even + i)), o = _mm256_loadu_si256((const __m256i *)(odd + i));
        __m256i lo = _mm256_unpacklo_epi16(e, o), hi = _mm256_unpackhi_epi16(e, o);
        uint16_t *d = out + (i / 16) * stride;
        _mm256_storeu_si256((__m256i *)d, _mm256_permute2x128_si256(lo, hi, 0x20));
        _mm256_storeu_si256((__m256i *)(d + 16), _mm256_permute2x128_si256(lo, hi, 0x31));
    }
}

/* C[4 x 16] over kc chunks; a: row 0 of the 4 (rows 32 apart in the panel). */
static inline void micro_4x16(int64_t kc, const uint16_t *restrict a, const uint16_t *restrict b, float *restrict c,
                              int64_t ldc) {
    __m256 acc[4][2];
    for (int r = 0; r < 4; r++) {
        acc[r][0] = _mm256_loadu_ps(c + r * ldc);
        acc[r][1] = _mm256_loadu_ps(c + r * ldc + 8);
    }
    const __m256i himask = set1(0xffff0000u);
    for (int64_t ch = 0; ch < kc; ch++) {
        const uint16_t *ac = a + ch * VT_MXU_CHUNK, *bc = b + ch * VT_MXU_CHUNK;
        for (int j = 0; j < 16; j++) {
            __m256i w0 = _mm256_loadu_si256((const __m256i *)(bc + j * 32));
            __m256i w1 = _mm256_loadu_si256((const __m256i *)(bc + j * 32 + 16));
            __m256 e0 = _mm256_castsi256_ps(_mm256_slli_epi32(w0, 16));
            __m256 o0 = _mm256_castsi256_ps(_mm256_and_si256(w0, himask));
            __m256 e1 = _mm256_castsi256_ps(_mm256_slli_epi32(w1, 16));
            __m256 o1 = _mm256_castsi256_ps(_mm256_and_si256(w1, himask));
            for (int r = 0; r < 4; r++) {
                uint32_t w;
                memcpy(&w, ac + r * 32 + 2 * j, 4);
                __m256 ae = _mm256_set1_ps(vt_mxu_float(w << 16)), ao = _mm256_set1_ps(vt_mxu_float(w & 0xffff0000u));
                acc[r][0] = _mm256_fmadd_ps(ae, e0, acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(ae, e1, acc[r][1]);
                acc[r][0] = _mm256_fmadd_ps(ao, o0, acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(ao, o1, acc[r][1]);
            }
        }
    }
    for (int r = 0; r < 4; r++) {
        _mm256_storeu_ps(c + r * ldc, acc[r][0]);
        _mm256_storeu_ps(c + r * ldc + 8, acc[r][1]);
    }
}

void vt_mxu_block_avx2(int64_t kc, int64_t mb, int64_t nb, const uint16_t *restrict a, int64_t as,
                       const uint16_t *restrict b, int64_t bs, float *restrict c, int64_t ldc, int acc) {
    /* AMX and VDPBF16PS flush denormal inputs and results; match them. */
    unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040); /* FTZ | DAZ */
    if (!acc)
        for (int64_t m = 0; m < mb; m++)
            for (int64_t n = 0; n < nb; n += 8) _mm256_storeu_ps(c + m * ldc + n, _mm256_setzero_ps());
    for (int64_t n = 0; n < nb; n += 16)
        for (int64_t m = 0; m < mb; m += 4)
            micro_4x16(kc, a + (m / 16) * as + (m % 16) * 32, b + (n / 16) * bs, c + m * ldc + n, ldc);
    _mm_setcsr(csr);
}

const vt_mxu_engine vt_mxu_engine_avx2 = {"avx2", VT_ISA_AVX2, vt_mxu_block_avx2, vt_mxu_split_avx2,
                                          vt_mxu_zip_avx2};
