/* transpose_avx512.h — a 16 x 16 transpose of 32-bit lanes in AVX-512
 * registers, for the files built with AVX-512 (copy's tiles, the depthwise
 * convolution's NCHW lane blocks). */
#ifndef VTPU_TRANSPOSE_AVX512_H
#define VTPU_TRANSPOSE_AVX512_H
#include <immintrin.h>

/* Rows a[0..15] transposed in place: unpacks of 32 and 64 bits leave, in
 * 128-bit lane k of u[4g + c], column 4k + c of rows 4g .. 4g + 3; two
 * shuffles of 128-bit lanes gather each column's four lanes. */
static inline __attribute__((always_inline)) void vt_transpose16x16_epi32(__m512i a[16]) {
    __m512i t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(a[i], a[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(a[i], a[i + 1]);
    }
    for (int g = 0; g < 16; g += 4) {
        u[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
        u[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
        u[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
        u[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
    }
    for (int c = 0; c < 4; c++) {
        __m512i v0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44), v1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xee);
        __m512i v2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44), v3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xee);
        a[c] = _mm512_shuffle_i32x4(v0, v2, 0x88);
        a[4 + c] = _mm512_shuffle_i32x4(v0, v2, 0xdd);
        a[8 + c] = _mm512_shuffle_i32x4(v1, v3, 0x88);
        a[12 + c] = _mm512_shuffle_i32x4(v1, v3, 0xdd);
    }
}

#endif
