/* mxu_pack_avx512bf16.c — the packers of mxu_pack_body.h where the CPU has
 * AVX512-BF16: VCVTNEPS2BF16 rounds exactly as vt_mxu_rne_ftz does (round
 * to nearest even; a zero or denormal input gives a zero of its sign; a NaN
 * keeps its top bits with the quiet bit set; a normal f32 never rounds to a
 * bf16 denormal), in one instruction instead of eleven, and VCVTNE2PS2BF16
 * rounds 32 values into DEFAULT's packed words at once. */
#include "mxu_local.h"

static inline __m512i rne16_bf16(__m512i u) {
    __m256i h = (__m256i)_mm512_cvtneps_pbh(_mm512_castsi512_ps(u));
    return _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
}

#define VT_PACK_RNE16(u) rne16_bf16(u)
#define VT_PACK_RNE32(lo, hi) ((__m512i)_mm512_cvtne2ps_pbh(_mm512_castsi512_ps(hi), _mm512_castsi512_ps(lo)))
#define VT_PACK_TABLE vt_mxu_packers_avx512bf16
#include "mxu_pack_body.h"
