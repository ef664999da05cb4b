/* conv_dw_body.h — the depthwise convolution's compute loops over blocks of
 * VT_DW_LANES channels (conv_dw.c lays the blocks out), included once per
 * ISA: conv_dw.c (portable C), conv_dw_avx2.c, conv_dw_avx512.c,
 * conv_dw_avx512bf16.c (its rounding to bf16 in one instruction). The lanes
 * are a GCC/Clang vector of 16 floats, which each ISA's flags lower to its
 * widest registers (4 SSE / NEON, 2 AVX2 or 1 AVX-512 op per step).
 *
 * Every product is of two bf16 parts (floats whose low 16 bits are zero),
 * so it is exact in f32 and a fused multiply-add rounds the same as the
 * multiply and the add: all ISA paths give the same bits. Not below the
 * smallest normal f32 (about 1.2e-38): there a product rounds, so the
 * paths of one ISA sum every tap in the same order of fused steps (their
 * outputs agree bit for bit), while a build without FMA may differ in the
 * last bit of such tiny sums. The includer defines DW_SFX (the table's
 * name suffix). */
#include "kernels/conv/conv.h"
#include "kernels/mxu/mxu_local.h"
#if defined(__AVX512F__)
#include "kernels/transpose_avx512.h"
#endif
#if defined(__AVX2__)
#include <immintrin.h>
#endif

/* The helpers below pass lane vectors by value; they are static inline, so
 * the ABI GCC warns about for builds without AVX-512 never applies. */
#pragma GCC diagnostic ignored "-Wpsabi"
/* Products of two parts are exact, so a fused multiply-add rounds as the
 * multiply and the add do: let the compiler fuse them (C11 mode does not). */
#if defined(__clang__)
#pragma clang fp contract(fast)
#else
#pragma GCC optimize("fp-contract=fast")
#endif

#define DW_CAT2(a, b) a##b
#define DW_CAT(a, b) DW_CAT2(a, b)
#define DW_NAME(x) DW_CAT(x, DW_SFX)

typedef float dw_vf __attribute__((vector_size(64)));
typedef uint32_t dw_vu __attribute__((vector_size(64)));
typedef uint16_t dw_vh __attribute__((vector_size(32)));

static inline dw_vf dw_ld(const float *p) {
    dw_vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void dw_st(float *p, dw_vf v) { memcpy(p, &v, sizeof v); }
static inline dw_vu dw_bits(dw_vf v) {
    dw_vu u;
    memcpy(&u, &v, sizeof u);
    return u;
}
static inline dw_vf dw_float(dw_vu u) {
    dw_vf v;
    memcpy(&v, &u, sizeof v);
    return v;
}
/* 16 bf16 at p as f32 bits. On AVX-512 vmath_avx512.h's widening (one
 * VPMOVZXWD): the generic conversion came out as two 8-lane halves and an
 * insert (the bf16 stage of a stride-2 channels-last depthwise spent half
 * its time there). */
static inline dw_vu dw_ld_bf16(const uint16_t *p) {
#if defined(__AVX512F__)
    __m512 x = vt_avx512_bf16x16_to_f32(_mm256_loadu_si256((const __m256i *)(const void *)p));
    dw_vu u;
    memcpy(&u, &x, sizeof u);
    return u;
#else
    dw_vh h;
    memcpy(&h, p, sizeof h);
    return __builtin_convertvector(h, dw_vu) << 16;
#endif
}
/* 16 contiguous lanes at p, f32 or bf16 (widened exactly), as f32 bits. */
static inline dw_vu dw_ld_lanes(const void *p, int is_bf16) {
    return is_bf16 ? dw_ld_bf16((const uint16_t *)p) : dw_bits(dw_ld((const float *)p));
}
/* where mask (all ones / zeros per lane): a, else b */
static inline dw_vu dw_sel(dw_vu mask, dw_vu a, dw_vu b) { return (mask & a) | (~mask & b); }

/* vt_mxu_rne_ftz / vt_mxu_trunc_ftz of internal.h, lane by lane. Built
 * for AVX512-BF16 (DW_HW_RNE), the rounding is VCVTNEPS2BF16: the same bits
 * in one instruction (mxu_pack_avx512bf16.c says why). */
#if defined(DW_HW_RNE)
static inline dw_vu dw_rne_ftz(dw_vu u) {
    __m512i x;
    memcpy(&x, &u, sizeof x);
    __m256i h = (__m256i)_mm512_cvtneps_pbh(_mm512_castsi512_ps(x));
    x = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
    memcpy(&u, &x, sizeof u);
    return u;
}
#elif defined(__AVX512F__)
static inline dw_vu dw_rne_ftz(dw_vu u) {
    __m512i x;
    memcpy(&x, &u, sizeof x);
    x = vt_mxu_rne_ftz16(x);
    memcpy(&u, &x, sizeof u);
    return u;
}
#elif defined(__AVX2__)
/* mxu_local.h's AVX2 rounding on each half: GCC split the generic form's
 * ordered compare of 16-lane vectors into single lanes (half an AVX2
 * depthwise plane's time) */
static inline dw_vu dw_rne_ftz(dw_vu u) {
    __m256i h[2];
    memcpy(h, &u, sizeof h);
    h[0] = vt_mxu_rne_ftz8(h[0]), h[1] = vt_mxu_rne_ftz8(h[1]);
    memcpy(&u, h, sizeof u);
    return u;
}
#else
static inline dw_vu dw_rne_ftz(dw_vu u) {
    dw_vu nan = (dw_vu)((u & 0x7fffffffu) > 0x7f800000u), den = (dw_vu)((u & 0x7f800000u) == 0);
    dw_vu r = u + 0x7fffu + ((u >> 16) & 1u);
    r = dw_sel(nan, u | 0x00400000u, r);
    r = dw_sel(den, u & 0x80000000u, r);
    return r & 0xffff0000u;
}
#endif
/* dw_rne_ftz of a value that already is bf16 (low 16 bits zero), as the
 * taps read it: the rounding leaves it as it is and only the flush of a
 * subnormal to a signed zero remains. A NaN stays as it is: the taps' fused
 * multiply-adds quiet it as dw_rne_ftz would (IEEE 754: the operation
 * delivers the quiet NaN of the signalling one's payload). */
#if defined(__AVX512F__)
static inline dw_vu dw_bf16_ftz(dw_vu u) { /* the same in two mask ops */
    __m512i x;
    memcpy(&x, &u, sizeof x);
    __mmask16 den = _mm512_testn_epi32_mask(x, _mm512_set1_epi32(0x7f800000));
    x = _mm512_mask_and_epi32(x, den, x, _mm512_set1_epi32((int)0x80000000u));
    memcpy(&u, &x, sizeof u);
    return u;
}
#else
static inline dw_vu dw_bf16_ftz(dw_vu u) {
    return dw_sel((dw_vu)((u & 0x7f800000u) == 0), u & 0x80000000u, u);
}
#endif
static inline dw_vu dw_trunc_ftz(dw_vu u) {
    dw_vu den = (dw_vu)((u & 0x7f800000u) == 0);
    return dw_sel(den, u & 0x80000000u, u & 0xffff0000u);
}
/* Non-finite lanes become +0 (the low-pass guard of the MXU driver). */
static inline dw_vf dw_guard(dw_vf v) {
    dw_vu u = dw_bits(v);
    return dw_float(u & (dw_vu)((u & 0x7f800000u) != 0x7f800000u));
}

/* The parts of n floats (n a multiple of the lanes) as vt_mxu_split gives
 * them, slot g holding part vt_mxu_slot_parts(nlow)[g]. slot[0] may be raw. */
static void DW_NAME(dw_split_)(const float *raw, int64_t n, int nlow, float *const slot[3]) {
    for (int64_t i = 0; i < n; i += VT_DW_LANES) {
        dw_vf x = dw_ld(raw + i);
        dw_vu u = dw_bits(x);
        if (nlow == 0) {
            dw_st(slot[0] + i, dw_float(dw_rne_ftz(u)));
            continue;
        }
        dw_vu hi = dw_trunc_ftz(u);
        dw_vf r = x - dw_float(hi);
        dw_st(slot[0] + i, dw_float(hi));
        if (nlow == 5) { /* HIGHEST: slots hi, mid, lo */
            dw_vu mid = dw_trunc_ftz(dw_bits(r));
            r -= dw_float(mid);
            dw_st(slot[1] + i, dw_float(mid));
            dw_st(slot[2] + i, dw_float(dw_rne_ftz(dw_bits(r))));
        } else { /* HIGH: slots hi, lo */
            dw_st(slot[1] + i, dw_float(dw_rne_ftz(dw_bits(r))));
        }
    }
}

/* Rows' values by the parity of their position: position q of a row to
 * row[(q & 1) * half + (q >> 1)], so a stride-2 window along the row reads
 * its taps at unit stride from one phase or the other (half 0: to row[q],
 * stride 1). round: each value rounded as the DEFAULT split rounds it
 * (dw_rne_ftz), so the split need not pass over the plane again. */
static inline float DW_NAME(dw_phase_at_)(const void *src, int is_bf16, int64_t i) {
    return is_bf16 ? vt_bf16_to_f32(((const uint16_t *)src)[i]) : ((const float *)src)[i];
}
static inline float DW_NAME(dw_rne_ftz1_)(float f) { return vt_mxu_float(vt_mxu_rne_ftz(vt_mxu_bits(f))); }
#if defined(__AVX512F__)
/* values [i, i + 16) of src as f32, lanes from r on zero (r <= 16) */
static inline __m512 DW_NAME(dw_phase_ld_)(const void *src, int is_bf16, int64_t i, int64_t r) {
    const __mmask16 m = (__mmask16)(r >= 16 ? 0xffff : (1u << (r > 0 ? r : 0)) - 1);
    if (!is_bf16) return _mm512_maskz_loadu_ps(m, (const float *)src + i);
    return vt_avx512_bf16x16_to_f32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)src + i));
}
/* dw_rne_ftz of 16 values */
static inline __m512 DW_NAME(dw_round16_)(__m512 v) {
    dw_vf t;
    memcpy(&t, &v, sizeof t);
    t = dw_float(dw_rne_ftz(dw_bits(t)));
    memcpy(&v, &t, sizeof v);
    return v;
}
#else
/* n floats at p rounded as the DEFAULT split rounds them (dw_rne_ftz) */
static void DW_NAME(dw_round_run_)(float *p, int64_t n) {
    int64_t i = 0;
    for (; i + VT_DW_LANES <= n; i += VT_DW_LANES) dw_st(p + i, dw_float(dw_rne_ftz(dw_bits(dw_ld(p + i)))));
    for (; i < n; i++) p[i] = DW_NAME(dw_rne_ftz1_)(p[i]);
}
#endif

/* half 0: one phase (stride 1), position q to row[q] */
static void DW_NAME(dw_copy_row_)(const void *src, int is_bf16, int64_t n, float *row, int round) {
    int64_t i = 0;
#if defined(__AVX512F__)
    for (; i < n; i += 16) {
        const int64_t r = n - i < 16 ? n - i : 16;
        __m512 v = DW_NAME(dw_phase_ld_)(src, is_bf16, i, r);
        if (round) v = DW_NAME(dw_round16_)(v);
        _mm512_mask_storeu_ps(row + i, (__mmask16)(r >= 16 ? 0xffff : (1u << r) - 1), v);
    }
#else
    if (is_bf16) {
        for (; i + VT_DW_LANES <= n; i += VT_DW_LANES) dw_st(row + i, dw_float(dw_ld_bf16((const uint16_t *)src + i)));
        for (; i < n; i++) row[i] = DW_NAME(dw_phase_at_)(src, 1, i);
    } else {
        memcpy(row, src, (size_t)(n > 0 ? n : 0) * sizeof(float));
    }
    if (round) DW_NAME(dw_round_run_)(row, n);
#endif
}
static void DW_NAME(dw_phase_row_)(const void *src, int is_bf16, int64_t n, int64_t q0, float *row, int64_t half,
                                   int round) {
    if (!half) {
        DW_NAME(dw_copy_row_)(src, is_bf16, n, row + q0, round);
        return;
    }
    int64_t i = 0;
    if (n > 0 && (q0 & 1)) { /* from an even position on */
        const float v = DW_NAME(dw_phase_at_)(src, is_bf16, 0);
        row[half + (q0 >> 1)] = round ? DW_NAME(dw_rne_ftz1_)(v) : v;
        i = 1;
    }
    float *ev = row + ((q0 + i) >> 1), *od = row + half + ((q0 + i) >> 1);
    const int64_t m = n - i;
    int64_t k = 0;
#if defined(__AVX512F__)
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    for (; 2 * k < m; k += 16) {
        const int64_t r = m - 2 * k < 32 ? m - 2 * k : 32; /* values left, up to 32 */
        const __m512 a = DW_NAME(dw_phase_ld_)(src, is_bf16, i + 2 * k, r),
                     b = DW_NAME(dw_phase_ld_)(src, is_bf16, i + 2 * k + 16, r - 16);
        __m512 e = _mm512_permutex2var_ps(a, even, b), o = _mm512_permutex2var_ps(a, odd, b);
        if (round) e = DW_NAME(dw_round16_)(e), o = DW_NAME(dw_round16_)(o);
        const int64_t ne = (r + 1) / 2, no = r / 2;
        _mm512_mask_storeu_ps(ev + k, (__mmask16)(ne >= 16 ? 0xffff : (1u << ne) - 1), e);
        _mm512_mask_storeu_ps(od + k, (__mmask16)(no >= 16 ? 0xffff : (1u << no) - 1), o);
    }
#else
#if defined(__AVX2__)
    if (!is_bf16)
        for (const float *s = (const float *)src + i; 2 * k + 16 <= m; k += 8) {
            const __m256 a = _mm256_loadu_ps(s + 2 * k), b = _mm256_loadu_ps(s + 2 * k + 8);
            /* [a0 a2 b0 b2 | a4 a6 b4 b6] -> [a0 a2 a4 a6 b0 b2 b4 b6] */
            const __m256 e = _mm256_shuffle_ps(a, b, 0x88), o = _mm256_shuffle_ps(a, b, 0xdd);
            _mm256_storeu_ps(ev + k, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xd8)));
            _mm256_storeu_ps(od + k, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), 0xd8)));
        }
#endif
    for (; 2 * k < m; k++) {
        ev[k] = DW_NAME(dw_phase_at_)(src, is_bf16, i + 2 * k);
        if (2 * k + 1 < m) od[k] = DW_NAME(dw_phase_at_)(src, is_bf16, i + 2 * k + 1);
    }
    if (round) DW_NAME(dw_round_run_)(ev, (m + 1) / 2), DW_NAME(dw_round_run_)(od, m / 2);
#endif
}
static void DW_NAME(dw_phases_)(const void *src, int is_bf16, int64_t src_step, int64_t rows, int64_t n, int64_t q0,
                                float *dst, int64_t dst_step, int64_t half, int round) {
    const int64_t es = is_bf16 ? 2 : 4;
    for (int64_t r = 0; r < rows; r++)
        DW_NAME(dw_phase_row_)((const char *)src + r * src_step * es, is_bf16, n, q0, dst + r * dst_step, half, round);
}

/* n positions of 16 contiguous lanes each (channels innermost), src_step
 * elements apart, f32 or bf16: their parts into the slots at lane vector
 * dst, dst + 1, ... (fill and split in one pass). */
static void DW_NAME(dw_load_split_)(const void *src, int is_bf16, int64_t src_step, int64_t n, int nlow,
                                    float *const slot[3], int64_t dst) {
    float *s0 = slot[0] + dst * VT_DW_LANES;
    for (int64_t i = 0; i < n; i++, s0 += VT_DW_LANES) {
        const dw_vu u = dw_ld_lanes((const char *)src + i * src_step * (is_bf16 ? 2 : 4), is_bf16);
        if (nlow == 0) {
            dw_st(s0, dw_float(dw_rne_ftz(u)));
            continue;
        }
        float raw[VT_DW_LANES];
        memcpy(raw, &u, sizeof raw);
        float *parts[3] = {s0, slot[1] + (dst + i) * VT_DW_LANES, nlow == 5 ? slot[2] + (dst + i) * VT_DW_LANES : NULL};
        DW_NAME(dw_split_)(raw, VT_DW_LANES, nlow, parts);
    }
}

/* n positions of 16 lanes from src into 16 contiguous f32 or bf16 lanes
 * each, dst_step elements apart; bf16 rounds as vt_f32_to_bf16 (nearest
 * even, NaN -> 0x7fc0). */
static void DW_NAME(dw_store_)(const float *src, int64_t n, void *dst, int is_bf16, int64_t dst_step) {
    for (int64_t i = 0; i < n; i++, src += VT_DW_LANES) {
        if (!is_bf16) {
            memcpy((float *)dst + i * dst_step, src, VT_DW_LANES * sizeof(float));
            continue;
        }
        dw_vu u = dw_bits(dw_ld(src));
        dw_vu nan = (dw_vu)((u & 0x7fffffffu) > 0x7f800000u);
        dw_vu r = dw_sel(nan, (dw_vu){0} + 0x7fc0u, (u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
        dw_vh h = __builtin_convertvector(r, dw_vh);
        memcpy((uint16_t *)dst + i * dst_step, &h, sizeof h);
    }
}

/* n contiguous f32 -> bf16 rounded as vt_f32_to_bf16. On AVX-512 a tail
 * under 16 values (every row of a 14-wide NCHW plane) is one masked
 * vector: value by value, the conversions took 45% of a bf16 depthwise
 * convolution at 14x14. */
static void DW_NAME(dw_narrow_)(const float *src, int64_t n, uint16_t *dst) {
    int64_t i = 0;
    for (; i + VT_DW_LANES <= n; i += VT_DW_LANES) DW_NAME(dw_store_)(src + i, 1, dst + i, 1, 0);
#if defined(__AVX512F__)
    if (i < n) { /* lanes past n are +0: no NaN or denormal to send to the integer rounding */
        const __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        _mm256_mask_storeu_epi16(dst + i, k, vt_avx512_f32x16_to_bf16_fast(_mm512_maskz_loadu_ps(k, src + i)));
    }
#else
    for (; i < n; i++) dst[i] = vt_f32_to_bf16(src[i]);
#endif
}

/* One lane vector rounded as vt_f32_to_bf16 into 16 bf16 at dst: on
 * AVX-512 vmath_avx512.h's narrowing (VCVTNEPS2BF16 in the AVX512-BF16
 * build, a vector with a NaN or denormal lane by the integer rounding). */
static inline void DW_NAME(dw_put_bf16_)(void *dst, dw_vf v) {
#if defined(__AVX512F__)
    __m512 x;
    memcpy(&x, &v, sizeof x);
    _mm256_storeu_si256((__m256i *)dst, vt_avx512_f32x16_to_bf16_fast(x));
#else
    DW_NAME(dw_store_)((const float *)&v, 1, dst, 1, 0);
#endif
}

/* Input position (in lane vectors) of output position z's first tap. */
static inline int64_t dw_base(const vt_dw_geom *d, int64_t z0, int64_t z1, int64_t z2) {
    return ((z0 * d->stride[0] * d->E[1] + z1 * d->stride[1]) * d->E[2] + z2 * d->stride[2]) * VT_DW_LANES;
}

/* Four positions step floats apart, each += its T taps (x at off[t], the
 * weight's lane vector t of w), taps in order. */
static inline void DW_NAME(dw_taps_4_)(const float *x, const float *w, const int64_t *off, int64_t T, int64_t step,
                                       dw_vf *a0, dw_vf *a1, dw_vf *a2, dw_vf *a3) {
    for (int64_t t = 0; t < T; t++) {
        const dw_vf wt = dw_ld(w + t * VT_DW_LANES);
        const float *p = x + off[t];
        *a0 += dw_ld(p) * wt;
        *a1 += dw_ld(p + step) * wt;
        *a2 += dw_ld(p + 2 * step) * wt;
        *a3 += dw_ld(p + 3 * step) * wt;
    }
}

/* y[z] = sum over taps of w * x at z's window: the guarded low passes in
 * the MXU's order (pass by pass, taps in order), then hi * hi. A weight is
 * the MXU's A operand, the input its B (passes' a and b). Four positions
 * of a row at a time: four independent sums keep the adder busy. */
static inline void DW_NAME(dw_forward_4_)(const vt_dw_geom *d, const vt_mxu_pass *ps, const float *const x[3],
                                          const float *const w[3], int64_t b, int64_t step, float *y) {
    dw_vf a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    for (int g = 0; g <= d->nlow; g++) {
        if (g == d->nlow && d->nlow) a0 = dw_guard(a0), a1 = dw_guard(a1), a2 = dw_guard(a2), a3 = dw_guard(a3);
        DW_NAME(dw_taps_4_)(x[ps[g].b] + b, w[ps[g].a], d->toff, d->taps, step, &a0, &a1, &a2, &a3);
    }
    dw_st(y, a0), dw_st(y + VT_DW_LANES, a1), dw_st(y + 2 * VT_DW_LANES, a2), dw_st(y + 3 * VT_DW_LANES, a3);
}

/* One row of a 3x3 window at DEFAULT (one pass): the nine weights stay in
 * registers, four positions at a time. */
static inline void DW_NAME(dw_row_3x3_)(const int64_t *off, const float *x, const float *w, int64_t step, int64_t n,
                                        float *y) {
    dw_vf w0 = dw_ld(w), w1 = dw_ld(w + 16), w2 = dw_ld(w + 32), w3 = dw_ld(w + 48), w4 = dw_ld(w + 64);
    dw_vf w5 = dw_ld(w + 80), w6 = dw_ld(w + 96), w7 = dw_ld(w + 112), w8 = dw_ld(w + 128);
    int64_t o0 = off[0], o1 = off[1], o2 = off[2], o3 = off[3], o4 = off[4], o5 = off[5], o6 = off[6], o7 = off[7],
            o8 = off[8];
    /* from 0, each tap added in turn (one fused multiply-add each): summed
     * from the first product instead, the compiler may fuse either product
     * of the first pair, and a product in the denormal range is not exact */
#define DW_TAPS(p)                                                                                              \
    ((dw_vf){0} + dw_ld((p) + o0) * w0 + dw_ld((p) + o1) * w1 + dw_ld((p) + o2) * w2 + dw_ld((p) + o3) * w3 +   \
     dw_ld((p) + o4) * w4 + dw_ld((p) + o5) * w5 + dw_ld((p) + o6) * w6 + dw_ld((p) + o7) * w7 +                 \
     dw_ld((p) + o8) * w8)
    int64_t i = 0;
    for (; i + 2 <= n; i += 2, x += 2 * step, y += 2 * VT_DW_LANES) {
        dw_vf a = DW_TAPS(x), b = DW_TAPS(x + step);
        dw_st(y, a), dw_st(y + VT_DW_LANES, b);
    }
    for (; i < n; i++, x += step, y += VT_DW_LANES) dw_st(y, DW_TAPS(x));
#undef DW_TAPS
}

static void DW_NAME(dw_forward_)(const vt_dw_geom *d, const float *const x[3], const float *const w[3], float *y) {
    const vt_mxu_pass *ps = vt_mxu_passes(d->nlow);
    const int64_t *off = d->toff, T = d->taps, step = d->stride[2] * VT_DW_LANES;
    for (int64_t z0 = 0; z0 < d->out[0]; z0++)
        for (int64_t z1 = 0; z1 < d->out[1]; z1++) {
            if (T == 9 && d->nlow == 0) {
                DW_NAME(dw_row_3x3_)(off, x[0] + dw_base(d, z0, z1, 0), w[0], step, d->out[2], y);
                y += d->out[2] * VT_DW_LANES;
                continue;
            }
            int64_t z2 = 0;
            for (; z2 + 4 <= d->out[2]; z2 += 4, y += 4 * VT_DW_LANES)
                DW_NAME(dw_forward_4_)(d, ps, x, w, dw_base(d, z0, z1, z2), step, y);
            for (; z2 < d->out[2]; z2++, y += VT_DW_LANES) {
                int64_t b = dw_base(d, z0, z1, z2);
                dw_vf acc = {0};
                for (int g = 0; g <= d->nlow; g++) {
                    if (g == d->nlow && d->nlow) acc = dw_guard(acc);
                    const float *xs = x[ps[g].b] + b, *ws = w[ps[g].a];
                    for (int64_t t = 0; t < T; t++) acc += dw_ld(xs + off[t]) * dw_ld(ws + t * VT_DW_LANES);
                }
                dw_st(y, acc);
            }
        }
}

#include "kernels/conv/conv_dw_grad_body.h"

/* One channel plane with the positions along the lanes (NCHW, stride 1
 * along the rows): x is the padded, split plane, rows of E[2] floats (a
 * multiple of 16, wide enough for every window of a 16-wide chunk); toff
 * in floats of the plane; w[s][t * 16] tap t's weight part; y rows of
 * out[2] rounded up to 16. Same sums in the same order as dw_forward_. */
static void DW_NAME(dw_plane_forward_)(const vt_dw_geom *d, const float *const x[3], const float *const w[3],
                                       float *y) {
    const vt_mxu_pass *ps = vt_mxu_passes(d->nlow);
    const int64_t *off = d->toff, T = d->taps, E2 = d->E[2];
    int64_t n2 = (d->out[2] + VT_DW_LANES - 1) / VT_DW_LANES * VT_DW_LANES;
    /* 3x3 at DEFAULT: the nine weights in registers, set once per plane
     * (the compiler, seeing stores to y, reloaded them for every row) */
    const int t3x3 = T == 9 && d->nlow == 0;
    float wt[9] = {0};
    for (int t = 0; t3x3 && t < 9; t++) wt[t] = w[0][t * VT_DW_LANES];
    const dw_vf w0 = (dw_vf){0} + wt[0], w1 = (dw_vf){0} + wt[1], w2 = (dw_vf){0} + wt[2];
    const dw_vf w3 = (dw_vf){0} + wt[3], w4 = (dw_vf){0} + wt[4], w5 = (dw_vf){0} + wt[5];
    const dw_vf w6 = (dw_vf){0} + wt[6], w7 = (dw_vf){0} + wt[7], w8 = (dw_vf){0} + wt[8];
    for (int64_t z0 = 0; z0 < d->out[0]; z0++)
        for (int64_t z1 = 0; z1 < d->out[1]; z1++, y += n2) {
            int64_t b = (z0 * d->stride[0] * d->E[1] + z1 * d->stride[1]) * E2;
            if (t3x3) {
                const float *xs = x[0] + b;
                for (int64_t z2 = 0; z2 < n2; z2 += VT_DW_LANES) {
                    const float *p = xs + z2;
                    /* from 0, as dw_row_3x3_ (a denormal product is not exact) */
                    dw_vf a = (dw_vf){0} + dw_ld(p + off[0]) * w0 + dw_ld(p + off[1]) * w1 + dw_ld(p + off[2]) * w2 +
                              dw_ld(p + off[3]) * w3 + dw_ld(p + off[4]) * w4 + dw_ld(p + off[5]) * w5 +
                              dw_ld(p + off[6]) * w6 + dw_ld(p + off[7]) * w7 + dw_ld(p + off[8]) * w8;
                    dw_st(y + z2, (dw_vf){0} + a);
                }
                continue;
            }
            for (int64_t z2 = 0; z2 < n2; z2 += VT_DW_LANES) {
                dw_vf acc = {0};
                for (int g = 0; g <= d->nlow; g++) {
                    if (g == d->nlow && d->nlow) acc = dw_guard(acc);
                    const float *xs = x[ps[g].b] + b + z2, *ws = w[ps[g].a];
                    for (int64_t t = 0; t < T; t++) acc += dw_ld(xs + off[t]) * ((dw_vf){0} + ws[t * VT_DW_LANES]);
                }
                dw_st(y + z2, acc);
            }
        }
}

/* One output row of a 3x3 window over rows of the cl stage (rw floats
 * apart, positions W floats apart, step floats per output): the nine
 * weights in registers, two positions at a time (four at unit stride), the
 * taps in order. kind 0: into y (lane vectors ystep floats apart), 1:
 * f32 at yd, 2: bf16 at yd (ystep elements apart). A function of its own
 * so that its few pointers stay in registers. Returns the positions done
 * (n rounded down to a multiple of four at unit stride, of two otherwise). */
__attribute__((noinline)) static int64_t DW_NAME(dw_cl_row3x3_)(const float *x, int64_t rw, int64_t W, int64_t step,
                                                               int64_t n, const float *w, int kind, float *y,
                                                               char *yd, int64_t ystep) {
    const dw_vf w0 = dw_ld(w), w1 = dw_ld(w + 16), w2 = dw_ld(w + 32), w3 = dw_ld(w + 48);
    const dw_vf w4 = dw_ld(w + 64), w5 = dw_ld(w + 80), w6 = dw_ld(w + 96), w7 = dw_ld(w + 112);
    const dw_vf w8 = dw_ld(w + 128);
    const int64_t n2 = n / 2 * 2;
    /* each tap as a row's base plus 0, W or 2W: the compiler, left to
     * itself, kept all eighteen offsets and ran out of registers */
#define DW_ROWS3(q)                                                                                             \
    const float *q##0 = q, *q##1 = q + rw, *q##2 = q + 2 * rw;                                                  \
    __asm__("" : "+r"(q##1), "+r"(q##2))
#define DW_TAPS9(q)                                                                                             \
    ((dw_vf){0} + dw_ld(q##0) * w0 + dw_ld(q##0 + W) * w1 + dw_ld(q##0 + 2 * W) * w2 + dw_ld(q##1) * w3 +       \
     dw_ld(q##1 + W) * w4 + dw_ld(q##1 + 2 * W) * w5 + dw_ld(q##2) * w6 + dw_ld(q##2 + W) * w7 +               \
     dw_ld(q##2 + 2 * W) * w8)
    /* one loop per kind of output o (stepping ostep per position) */
#define DW_ROW9(o, ostep, PUT)                                                                                  \
    for (int64_t i = 0; i < n2; i += 2, x += 2 * step, o += 2 * (ostep)) {                                      \
        const float *p = x, *r = x + step;                                                                      \
        DW_ROWS3(p);                                                                                            \
        DW_ROWS3(r);                                                                                            \
        const dw_vf a0 = DW_TAPS9(p), a1 = DW_TAPS9(r);                                                          \
        PUT(o, a0);                                                                                             \
        PUT(o + (ostep), a1);                                                                                   \
    }
    /* unit stride: four positions at a time, their taps interleaved
     * (tap t of all four, then t + 1): each sum is a chain of nine
     * dependent FMAs, and two chains an iteration left the FMA units
     * waiting on them (the scheduler holds about two iterations). Position
     * j's tap (row r, column k) is row r's column S * j + k, W floats
     * apart. (At stride 2, S = 2, it measured slower than two at a time.) */
#define DW_C(q, i) dw_ld(q + (i) * W)
#define DW_ROWTAPS(q, S, wa, wb, wc)                                                                            \
    a0 += DW_C(q, 0) * wa, a1 += DW_C(q, S) * wa, a2 += DW_C(q, 2 * S) * wa, a3 += DW_C(q, 3 * S) * wa;         \
    a0 += DW_C(q, 1) * wb, a1 += DW_C(q, S + 1) * wb, a2 += DW_C(q, 2 * S + 1) * wb;                            \
    a3 += DW_C(q, 3 * S + 1) * wb;                                                                              \
    a0 += DW_C(q, 2) * wc, a1 += DW_C(q, S + 2) * wc, a2 += DW_C(q, 2 * S + 2) * wc;                            \
    a3 += DW_C(q, 3 * S + 2) * wc
#define DW_ROW4(o, ostep, PUT, S)                                                                               \
    for (int64_t i = 0; i + 4 <= n; i += 4, x += 4 * (S) * W, o += 4 * (ostep), done += 4) {                  \
        const float *p = x;                                                                                     \
        DW_ROWS3(p);                                                                                            \
        dw_vf a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};                                                           \
        DW_ROWTAPS(p0, S, w0, w1, w2);                                                                          \
        DW_ROWTAPS(p1, S, w3, w4, w5);                                                                          \
        DW_ROWTAPS(p2, S, w6, w7, w8);                                                                          \
        PUT(o, a0);                                                                                             \
        PUT(o + (ostep), a1);                                                                                   \
        PUT(o + 2 * (ostep), a2);                                                                               \
        PUT(o + 3 * (ostep), a3);                                                                               \
    }
#define DW_KINDS4(S)                                                                                            \
    do {                                                                                                        \
        int64_t done = 0;                                                                                       \
        if (kind == 0) DW_ROW4(y, ystep, dw_st, S)                                                              \
        else if (kind == 1) DW_ROW4(f, ystep, dw_st, S)                                                         \
        else DW_ROW4(h, ystep, DW_NAME(dw_put_bf16_), S)                                                        \
        return done;                                                                                            \
    } while (0)
    float *f = (float *)(void *)yd;
    uint16_t *h = (uint16_t *)(void *)yd;
    if (step == W) DW_KINDS4(1);
    if (kind == 0) DW_ROW9(y, ystep, dw_st)
    else if (kind == 1) DW_ROW9(f, ystep, dw_st)
    else DW_ROW9(h, ystep, DW_NAME(dw_put_bf16_))
#undef DW_KINDS4
#undef DW_ROW4
#undef DW_ROWTAPS
#undef DW_C
#undef DW_ROW9
#undef DW_TAPS9
#undef DW_ROWS3
    return n2;
}

/* Output rows z1 in [z1a, z1b) of image n, slice z0 of a vt_dw_cl forward,
 * one block of lanes at a time: the input rows they read, that block's
 * channels, go once through the bf16 rounding into stage
 * ([k0][row][E2][lanes], zeros in the padding and past C: a padding zero
 * still meets a non-finite weight, as in the blocks); then y = sum over taps
 * of x * w, taps in order from +0 (dw_forward_ at DEFAULT), into
 * out[z1 - z1a][z2][ncb * lanes]. A block's stage (about 11 KB for 3 rows
 * of 57 positions) stays in L1 between its fill and its sums: staged for
 * every channel at once, it went through L2, and the fill alone took 40% of
 * a stride-2 forward. */
static void DW_NAME(dw_cl_rows_)(const vt_dw_cl *c, int64_t n, int64_t z0, int64_t z1a, int64_t z1b, float *stage,
                                 float *out) {
    const vt_conv_geom *g = c->g;
    const int64_t ncb = c->ncb, W = ncb * VT_DW_LANES, L = VT_DW_LANES, last = g->C - (ncb - 1) * VT_DW_LANES;
    const int64_t E2 = (g->out[2] - 1) * g->stride[2] + (g->k[2] - 1) * g->dil[2] + 1;
    const int64_t R = (z1b - z1a - 1) * g->stride[1] + (g->k[1] - 1) * g->dil[1] + 1;
    const size_t es = c->x_bf16 ? 2 : 4;
    const int64_t T = g->k_prod;
    int64_t toff[T > 0 ? T : 1]; /* each tap from a window's first position, in floats */
    for (int64_t k0 = 0, t = 0; k0 < g->k[0]; k0++)
        for (int64_t k1 = 0; k1 < g->k[1]; k1++)
            for (int64_t k2 = 0; k2 < g->k[2]; k2++, t++)
                toff[t] = ((k0 * R + k1 * g->dil[1]) * E2 + k2 * g->dil[2]) * L;
    const int64_t step = g->stride[2] * L;
    const size_t yes = c->y_bf16 ? 2 : 4;
    const int row3x3 = g->k[0] == 1 && g->k[1] == 3 && g->k[2] == 3 && g->dil[1] == 1 && g->dil[2] == 1;
    for (int64_t cb = 0; cb < ncb; cb++) {
        const int whole = cb < ncb - 1 || last == VT_DW_LANES;
        for (int64_t k0 = 0; k0 < g->k[0]; k0++) {
            const int64_t i0 = z0 * g->stride[0] - g->pad[0] + k0 * g->dil[0];
            for (int64_t r = 0; r < R; r++) {
                const int64_t i1 = z1a * g->stride[1] - g->pad[1] + r;
                float *dst = stage + (k0 * R + r) * E2 * L;
                if (i0 < 0 || i0 >= g->in[0] || i1 < 0 || i1 >= g->in[1]) {
                    memset(dst, 0, (size_t)(E2 * L) * sizeof(float));
                    continue;
                }
                const char *src = c->x + (n * c->xs[0] + i0 * c->xs[1] + i1 * c->xs[2] + cb * L) * (int64_t)es;
                const int64_t ps = c->xs[3] * (int64_t)es; /* bytes from one position to the next */
                /* the positions inside the input, [e2a, e2b); zeros around them */
                int64_t e2a = g->pad[2] < E2 ? g->pad[2] : E2, e2b = g->in[2] + g->pad[2];
                if (e2b > E2) e2b = E2;
                if (e2b < e2a) e2b = e2a;
                /* a position or two: vector stores (a memset call per row cost more) */
                for (int64_t e2 = 0; e2 < e2a; e2++) dw_st(dst + e2 * L, (dw_vf){0});
                for (int64_t e2 = e2b; e2 < E2; e2++) dw_st(dst + e2 * L, (dw_vf){0});
                const char *p = src + (e2a - g->pad[2]) * ps;
                float *d = dst + e2a * L;
                if (whole && c->x_bf16) {
                    for (int64_t e2 = e2a; e2 < e2b; e2++, p += ps, d += L)
                        dw_st(d, dw_float(dw_bf16_ftz(dw_ld_bf16((const uint16_t *)(const void *)p))));
                } else if (whole) {
                    for (int64_t e2 = e2a; e2 < e2b; e2++, p += ps, d += L)
                        dw_st(d, dw_float(dw_rne_ftz(dw_ld_lanes(p, 0))));
                } else { /* the last block's channels, the rest 0 */
                    for (int64_t e2 = e2a; e2 < e2b; e2++, p += ps, d += L) {
                        float part[VT_DW_LANES] = {0};
                        for (int64_t l = 0; l < last; l++)
                            part[l] = c->x_bf16 ? vt_bf16_to_f32(((const uint16_t *)(const void *)p)[l])
                                                : ((const float *)(const void *)p)[l];
                        dw_st(d, dw_float(dw_rne_ftz(dw_bits(dw_ld(part)))));
                    }
                }
            }
        }
        /* four positions at a time: four independent sums keep the FMA busy;
         * each sum goes to the output itself (c->y) or to out */
        const float *w = c->w + cb * T * VT_DW_LANES;
        for (int64_t z1 = z1a; z1 < z1b; z1++) {
            const float *x = stage + (z1 - z1a) * g->stride[1] * E2 * L;
            float *y = out + (z1 - z1a) * g->out[2] * W + cb * VT_DW_LANES;
            int64_t ystep = W;
            char *yd = NULL;
            if (c->y) {
                yd = c->y + (n * c->ys[0] + z0 * c->ys[1] + z1 * c->ys[2] + cb * VT_DW_LANES) * (int64_t)yes;
                ystep = c->ys[3];
            }
#define DW_PUT(i, v)                                                                                            \
    do {                                                                                                        \
        dw_vf v_ = (v);                                                                                         \
        if (!yd) dw_st(y + (i) * W, v_);                                                                        \
        else if (!c->y_bf16) dw_st((float *)(void *)(yd + (i) * ystep * 4), v_);                               \
        else DW_NAME(dw_put_bf16_)(yd + (i) * ystep * 2, v_);                                                    \
    } while (0)
            int64_t z2 = 0;
            if (row3x3) {
                const int kind = !yd ? 0 : !c->y_bf16 ? 1 : 2;
                z2 = DW_NAME(dw_cl_row3x3_)(x, E2 * L, L, step, g->out[2], w, kind, y, yd, ystep);
                x += z2 * step;
            }
            for (; z2 + 4 <= g->out[2]; z2 += 4, x += 4 * step) {
                dw_vf a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
                DW_NAME(dw_taps_4_)(x, w, toff, T, step, &a0, &a1, &a2, &a3);
                DW_PUT(z2, a0);
                DW_PUT(z2 + 1, a1);
                DW_PUT(z2 + 2, a2);
                DW_PUT(z2 + 3, a3);
            }
            for (; z2 < g->out[2]; z2++, x += step) {
                dw_vf acc = {0};
                for (int64_t t = 0; t < T; t++) acc += dw_ld(x + toff[t]) * dw_ld(w + t * VT_DW_LANES);
                DW_PUT(z2, acc);
            }
#undef DW_PUT
        }
    }
}

#if defined(__AVX512F__)
static void DW_NAME(dw_lanes_in_)(const void *src, int is_bf16, int64_t row_bytes, float *dst) {
    __m512i a[16];
    for (int j = 0; j < 16; j++) {
        const char *p = (const char *)src + j * row_bytes;
        a[j] = is_bf16 ? _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)p)), 16)
                       : _mm512_loadu_si512((const void *)p);
    }
    vt_transpose16x16_epi32(a);
    for (int r = 0; r < 16; r++) _mm512_storeu_si512((void *)(dst + r * VT_DW_LANES), a[r]);
}

static void DW_NAME(dw_lanes_out_)(const float *src, void *dst, int is_bf16, int64_t row_bytes) {
    __m512i a[16];
    for (int j = 0; j < 16; j++) a[j] = _mm512_loadu_si512((const void *)(src + j * VT_DW_LANES));
    vt_transpose16x16_epi32(a);
    for (int r = 0; r < 16; r++) {
        char *p = (char *)dst + r * row_bytes;
        if (!is_bf16) {
            _mm512_storeu_si512((void *)p, a[r]);
        } else {
            dw_vf v;
            memcpy(&v, &a[r], sizeof v);
            DW_NAME(dw_put_bf16_)(p, v);
        }
    }
}
#define DW_LANES_IN DW_NAME(dw_lanes_in_)
#define DW_LANES_OUT DW_NAME(dw_lanes_out_)
#else
#define DW_LANES_IN NULL
#define DW_LANES_OUT NULL
#endif

const vt_dw_kernels DW_NAME(vt_dw_kernels_) = {
    DW_NAME(dw_split_),
    DW_NAME(dw_load_split_),
    DW_NAME(dw_store_),
    DW_NAME(dw_narrow_),
    DW_NAME(dw_forward_),
    DW_NAME(dw_plane_forward_),
    DW_NAME(dw_phases_),
    DW_NAME(dw_cl_rows_),
    DW_NAME(dw_backward_input_),
    DW_NAME(dw_backward_weight_),
    DW_NAME(dw_weight_rows_),
    DW_LANES_IN,
    DW_LANES_OUT,
};
#undef DW_LANES_IN
#undef DW_LANES_OUT
