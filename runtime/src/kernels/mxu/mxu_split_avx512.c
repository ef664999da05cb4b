/* mxu_split_avx512.c — AVX-512 bf16 split and VNNI zip used by the packers
 * of the AVX-512, AVX512-BF16 and AMX engines (16 lanes, masked tails), and
 * the AVX-512 engine itself (AVX2 block kernel, since it has no bf16 dot). */
#include <immintrin.h>

#include "mxu_local.h"

static inline void store16(uint16_t *dst, __m512i p) {
    _mm256_storeu_si256((__m256i *)dst, _mm512_cvtepi32_epi16(_mm512_srli_epi32(p, 16)));
}

/* The parts of the 16 values at x + i under mask k (lanes outside: +0). */
static inline void split16(const float *restrict x, int64_t i, __mmask16 k, vt_precision prec, uint16_t *restrict hi,
                           uint16_t *restrict mid, uint16_t *restrict lo) {
    __m512 v = _mm512_maskz_loadu_ps(k, x + i);
    __m512i u = _mm512_castps_si512(v);
    if (prec == VT_PRECISION_DEFAULT) {
        store16(hi + i, vt_mxu_rne_ftz16(u));
        return;
    }
    __m512i h = vt_mxu_trunc_ftz16(u);
    store16(hi + i, h);
    __m512 r = _mm512_sub_ps(v, _mm512_castsi512_ps(h));
    if (prec == VT_PRECISION_HIGHEST) {
        __m512i m = vt_mxu_trunc_ftz16(_mm512_castps_si512(r));
        store16(mid + i, m);
        r = _mm512_sub_ps(r, _mm512_castsi512_ps(m));
    }
    store16(lo + i, vt_mxu_rne_ftz16(_mm512_castps_si512(r)));
}

/* Whole vectors with a constant mask (the compiler drops it: a mask
 * computed in every step kept every load masked), then the tail and the
 * zero padding up to npad. */
void vt_mxu_split_avx512(const float *restrict x, int64_t n, int64_t npad, vt_precision prec,
                         uint16_t *restrict hi, uint16_t *restrict mid, uint16_t *restrict lo) {
    const int64_t whole = n < npad ? n : npad; /* values read: [0, min(n, npad)) */
    int64_t i = 0;
    for (; i + 16 <= whole; i += 16) split16(x, i, (__mmask16)0xffff, prec, hi, mid, lo);
    for (; i < npad; i += 16) {
        int64_t left = whole - i;
        split16(x, i, left <= 0 ? 0 : (__mmask16)((1u << left) - 1), prec, hi, mid, lo);
    }
}

void vt_mxu_zip_avx512(const uint16_t *restrict even, const uint16_t *restrict odd, int64_t n,
                       uint16_t *restrict out, int64_t stride) {
    for (int64_t i = 0; i < n; i += 16) {
        __m512i e = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(even + i)));
        __m512i o = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(odd + i)));
        _mm512_storeu_si512(out + (i / 16) * stride, _mm512_or_si512(e, _mm512_slli_epi32(o, 16)));
    }
}

const vt_mxu_engine vt_mxu_engine_avx512 = {"avx512", VT_ISA_AVX2 | VT_ISA_AVX512, vt_mxu_block_avx2, NULL,
                                            vt_mxu_split_avx512, vt_mxu_zip_avx512, 1, 1, &vt_mxu_packers_avx512};
