/* mxu_pack_avx512.c — the packers of mxu_pack_body.h on AVX-512 (the bf16
 * parts by integer bit operations), the epilogue's bf16 row store and the
 * low-pass guard. */
#include "mxu_local.h"

#define VT_PACK_RNE16(u) vt_mxu_rne_ftz16(u)
#define VT_PACK_TABLE vt_mxu_packers_avx512
#include "mxu_pack_body.h"

void vt_mxu_store_bf16_avx512(uint16_t *dst, const float *src, int64_t n) {
    VT_AVX512_FOR16(i, n, k, {
        _mm256_mask_storeu_epi16(dst + i, k, vt_avx512_f32x16_to_bf16(_mm512_maskz_loadu_ps(k, src + i)));
    });
}

void vt_mxu_guard_avx512(float *c, int64_t n) {
    const __m512i exp = vt_mxu_set1(0x7f800000u);
    VT_AVX512_FOR16(i, n, k, {
        __m512i u = _mm512_maskz_loadu_epi32(k, c + i);
        __mmask16 bad = _mm512_mask_cmpeq_epi32_mask(k, _mm512_and_si512(u, exp), exp);
        if (bad) _mm512_mask_storeu_ps(c + i, bad, _mm512_setzero_ps());
    });
}
