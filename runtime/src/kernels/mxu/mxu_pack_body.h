/* mxu_pack_body.h — the packers' fast path: f32 or bf16 lines at unit
 * stride go straight into the engine layout of internal.h in one pass (load,
 * split, interleave, store 64 bytes), instead of convert -> split -> copy or
 * zip through scratch lines, and columns of a transposed B are turned into
 * VNNI rows with an in-register 16x16 transpose instead of 4-byte stores.
 * The parts are those of vt_mxu_split, so the packed bits do not change.
 *
 * Included by mxu_pack_avx512.c and mxu_pack_avx512bf16.c, which define
 *   VT_PACK_RNE16(u)      the bf16 RNE part of 16 f32 (bits, low halves 0);
 *   VT_PACK_RNE32(lo, hi) optional: the 32 RNE bf16 words of two such
 *                         vectors, in order (DEFAULT's one part);
 *   VT_PACK_TABLE         the name of the vt_mxu_packers table to define. */
#ifndef VT_PACK_RNE16
#error "define VT_PACK_RNE16 and VT_PACK_TABLE before including mxu_pack_body.h"
#endif
#include "kernels/transpose_avx512.h"

/* 16 values of x from element i as f32 bits; lanes at or past x.n are +0.
 * A bf16 value widens exactly, so its parts are the f32 path's. */
static inline __m512i load16(vt_mxu_line x, int64_t i) {
    int64_t left = x.n - i;
    if (left <= 0) return _mm512_setzero_si512();
    /* whole vectors unmasked (see load32w) */
    const __mmask16 k = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
    if (x.is_bf16) {
        const uint16_t *p = (const uint16_t *)x.p + i;
        __m256i h = left >= 16 ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskz_loadu_epi16(k, p);
        return _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
    }
    const float *p = (const float *)x.p + i;
    return _mm512_castps_si512(left >= 16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(k, p));
}

/* A bf16 line at DEFAULT needs no f32 round trip: its one part is the
 * value itself with the engine's flush (a denormal becomes the zero of its
 * sign, a NaN gets its quiet bit), which is what rounding the widened value
 * gives: its low half is zero, so RNE keeps it. 32 words at a time. */
static inline __m512i load32w(vt_mxu_line x, int64_t i) {
    int64_t left = x.n - i;
    const uint16_t *p = (const uint16_t *)x.p + i;
    if (left >= 32) return _mm512_loadu_si512(p);
    if (left <= 0) return _mm512_setzero_si512();
    /* A short line (16 channels of a 1x1 weight gradient's rows) in halves.
     * On AMD Zen 5 the packers' masked 64-byte loads, in these streaming
     * loops, ran 2-3x slower than plain loads of the same lines (the 16 -> 96
     * 1x1 weight gradient at batch 32: bf16 19.5 -> 9.2 ms, f32 at batch 4
     * 3.3 -> 1.35 ms with load16 below), so masks are kept for the tails. */
    if (left >= 16) {
        __m256i hi = _mm256_maskz_loadu_epi16((__mmask16)((1u << (left - 16)) - 1), p + 16);
        return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p)), hi, 1);
    }
    return _mm512_zextsi256_si512(_mm256_maskz_loadu_epi16((__mmask16)((1u << left) - 1), p));
}
static inline __m512i flush32w(__m512i w) {
    __mmask32 den = _mm512_testn_epi16_mask(w, _mm512_set1_epi16(0x7f80));
    __mmask32 nan = _mm512_cmpgt_epu16_mask(_mm512_and_si512(w, _mm512_set1_epi16(0x7fff)), _mm512_set1_epi16(0x7f80));
    w = _mm512_mask_mov_epi16(w, nan, _mm512_or_si512(w, _mm512_set1_epi16(0x0040)));
    return _mm512_mask_mov_epi16(w, den, _mm512_and_si512(w, _mm512_set1_epi16((short)0x8000)));
}
static inline int words_only(vt_mxu_line x, vt_precision prec) { return x.is_bf16 && prec == VT_PRECISION_DEFAULT; }
/* Words 0-15 (half 0) or 16-31 (half 1) of e and o as VNNI pairs (e, o). */
static inline __m512i zip32w(__m512i e, __m512i o, int half) {
    const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6, 37,
                                        5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    return _mm512_permutex2var_epi16(e, half ? hi : lo, o);
}

/* Whether prec has part i (0 hi, 1 mid, 2 lo). */
static inline int part_used(int i, vt_precision prec) {
    return i == 0 || (i == 2 && prec != VT_PRECISION_DEFAULT) || prec == VT_PRECISION_HIGHEST;
}

/* part[0] hi, part[1] mid, part[2] lo, as vt_mxu_split computes them (the
 * differences are exact in f32; MXCSR is the default, as in the scalar). */
static inline void parts16(__m512i u, vt_precision prec, __m512i part[3]) {
    if (prec == VT_PRECISION_DEFAULT) {
        part[0] = VT_PACK_RNE16(u);
        return;
    }
    __m512i h = vt_mxu_trunc_ftz16(u);
    part[0] = h;
    __m512 r = _mm512_sub_ps(_mm512_castsi512_ps(u), _mm512_castsi512_ps(h));
    if (prec == VT_PRECISION_HIGHEST) {
        __m512i m = vt_mxu_trunc_ftz16(_mm512_castps_si512(r));
        part[1] = m;
        r = _mm512_sub_ps(r, _mm512_castsi512_ps(m));
    }
    part[2] = VT_PACK_RNE16(_mm512_castps_si512(r));
}

/* The 32 bf16 of one 32-K chunk of a line, per part: the high halves of the
 * two 16-lane part vectors, in order (consecutive pairs are VNNI words). */
static inline void chunk32(vt_mxu_line x, int64_t k0, vt_precision prec, __m512i out[3]) {
    if (words_only(x, prec)) {
        out[0] = flush32w(load32w(x, k0));
        return;
    }
#ifdef VT_PACK_RNE32
    if (prec == VT_PRECISION_DEFAULT) {
        out[0] = VT_PACK_RNE32(load16(x, k0), load16(x, k0 + 16));
        return;
    }
#endif
    const __m512i odd = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27,
                                         25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    __m512i p0[3], p1[3];
    parts16(load16(x, k0), prec, p0);
    parts16(load16(x, k0 + 16), prec, p1);
    for (int i = 0; i < 3; i++)
        if (part_used(i, prec)) out[i] = _mm512_permutex2var_epi16(p0[i], odd, p1[i]);
}

static void pack_a_row(vt_mxu_line x, vt_precision prec, int64_t kt, int nseg, const int *seg, uint16_t *dst,
                       int r) {
    for (int64_t c = 0; c < kt; c++) {
        __m512i v[3];
        chunk32(x, c * 32, prec, v);
        for (int g = 0; g < nseg; g++) _mm512_storeu_si512(dst + (g * kt + c) * VT_MXU_CHUNK + r * 32, v[seg[g]]);
    }
}

static void pack_b_rows(vt_mxu_line even, vt_mxu_line odd, vt_precision prec, int64_t np, int64_t kt, int nseg,
                        const int *seg, uint16_t *b, int64_t b_panel, int64_t c, int j) {
    if (words_only(even, prec) && words_only(odd, prec)) { /* np: a multiple of 32 */
        for (int64_t i = 0; i < np; i += 32) {
            __m512i e = flush32w(load32w(even, i)), o = flush32w(load32w(odd, i));
            uint16_t *d = b + (i / 16) * b_panel + c * VT_MXU_CHUNK + j * 32;
            _mm512_storeu_si512(d, zip32w(e, o, 0));
            _mm512_storeu_si512(d + b_panel, zip32w(e, o, 1));
        }
        return;
    }
    for (int64_t i = 0; i < np; i += 16) {
        __m512i pe[3], po[3];
        parts16(load16(even, i), prec, pe);
        parts16(load16(odd, i), prec, po);
        uint16_t *d = b + (i / 16) * b_panel + c * VT_MXU_CHUNK + j * 32;
        /* parts have zero low halves: the pair word is (even >> 16) | odd */
        for (int g = 0; g < nseg; g++)
            _mm512_storeu_si512(d + g * kt * VT_MXU_CHUNK,
                                _mm512_or_si512(_mm512_srli_epi32(pe[seg[g]], 16), po[seg[g]]));
    }
}

static void pack_b_cols(const vt_mxu_line cols[16], vt_precision prec, int64_t kt, int nseg, const int *seg,
                        uint16_t *dst) {
    for (int64_t c = 0; c < kt; c++) {
        __m512i w[3][16];
        for (int q = 0; q < 16; q++) {
            __m512i v[3];
            chunk32(cols[q], c * 32, prec, v);
            for (int i = 0; i < 3; i++)
                if (part_used(i, prec)) w[i][q] = v[i];
        }
        for (int i = 0; i < 3; i++)
            if (part_used(i, prec)) vt_transpose16x16_epi32(w[i]); /* w[i][j]: word j of every column */
        for (int g = 0; g < nseg; g++) {
            uint16_t *d = dst + (g * kt + c) * VT_MXU_CHUNK;
            for (int j = 0; j < 16; j++) _mm512_storeu_si512(d + j * 32, w[seg[g]][j]);
        }
    }
}

/* Chunk c of a 16-row A panel whose columns are contiguous (a transposed A,
 * as in a weight gradient X^T dY): x.p is row m0's element at k = 0, x.n the
 * valid rows (<= 16) and k_stride the elements between consecutive k. Storage
 * rows k and k+1 give the 16 rows' VNNI words of pair (k%32)/2 in one OR, and
 * transpose16 turns the chunk's 16 pair vectors into its 16 tile rows. */
static void pack_a_cols(vt_mxu_line x, int64_t k_stride, int64_t K, vt_precision prec, int64_t kt, int nseg,
                        const int *seg, uint16_t *dst, int64_t c) {
    size_t es = x.is_bf16 ? 2 : 4;
    __m512i w[3][16];
    for (int j = 0; j < 16; j++) {
        int64_t k = c * 32 + 2 * j;
        vt_mxu_line e = x, o = x;
        e.n = k < K ? x.n : 0, o.n = k + 1 < K ? x.n : 0;
        if (e.n) e.p = (const char *)x.p + (size_t)(k * k_stride) * es;
        if (o.n) o.p = (const char *)x.p + (size_t)((k + 1) * k_stride) * es;
        if (words_only(x, prec)) {
            w[0][j] = zip32w(flush32w(load32w(e, 0)), flush32w(load32w(o, 0)), 0);
            continue;
        }
        __m512i pe[3], po[3];
        parts16(load16(e, 0), prec, pe);
        parts16(load16(o, 0), prec, po);
        for (int i = 0; i < 3; i++)
            if (part_used(i, prec)) w[i][j] = _mm512_or_si512(_mm512_srli_epi32(pe[i], 16), po[i]);
    }
    for (int i = 0; i < 3; i++)
        if (part_used(i, prec)) vt_transpose16x16_epi32(w[i]); /* w[i][j]: word j of every column */
    for (int g = 0; g < nseg; g++) {
        uint16_t *d = dst + (g * kt + c) * VT_MXU_CHUNK;
        for (int r = 0; r < 16; r++) _mm512_storeu_si512(d + r * 32, w[seg[g]][r]);
    }
}

const vt_mxu_packers VT_PACK_TABLE = {pack_a_row, pack_b_rows, pack_b_cols, pack_a_cols};
