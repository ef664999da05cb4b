/* mxu_local.h — declarations shared by kernels/mxu/ and the families that
 * pack for its engines (attention): the fast packers that write the engine
 * layout of internal.h straight from f32 or bf16 lines (no converted copy,
 * no separate zip pass), per ISA, and the row stores of the epilogue.
 * Everything else the MXU files share is in internal.h. */
#ifndef VTPU_MXU_LOCAL_H
#define VTPU_MXU_LOCAL_H

#include "internal.h"

/* A line of an operand that the fast packers can read directly: n valid
 * elements of dtype f32 or bf16 at unit stride (values past n read as +0). */
typedef struct vt_mxu_line {
    const void *p;
    int is_bf16;
    int64_t n;
} vt_mxu_line;

/* The packed panels (vt_mxu_packed of internal.h) hold each bf16 part once,
 * as a K segment of kt chunks: vt_mxu_nslots(nlow) segments per panel
 * (DEFAULT hi; HIGH hi, lo; HIGHEST hi, mid, lo), not one per pass. A pass
 * multiplies segment a of the A panels by segment b of the B panels. */
typedef struct vt_mxu_pass {
    int a, b;
} vt_mxu_pass;
/* The nlow + 1 passes of a mode, in summation order: the nlow guarded low
 * passes, then hi*hi. */
const vt_mxu_pass *vt_mxu_passes(int nlow);
int vt_mxu_nslots(int nlow);
/* The part (0 hi, 1 mid, 2 lo) each of those segments holds, in order. */
const int *vt_mxu_slot_parts(int nlow);

/* The fast packers (mxu_pack_body.h), per ISA: an engine whose pack is
 * set reads f32 and bf16 lines at unit stride straight into its layout.
 *   pack_a_row:  row r (< 16) of an A panel, all kt chunks of each segment
 *                (seg[g]: the part segment g holds; nseg of them).
 *   pack_b_rows: rows k and k+1 of B (even, odd) over all np columns (a
 *                multiple of 32): pair j = (k%32)/2 of chunk c, written to
 *                b + panel*b_panel + (g*kt + c)*VT_MXU_CHUNK + j*32.
 *   pack_b_cols: a 16-column B panel whose columns are contiguous lines:
 *                cols[q] is column q (n = 0 for columns past N).
 *   pack_a_cols: chunk c (32 K) of a 16-row panel of A whose columns are
 *                contiguous: x.p is the panel's first row at k = 0, x.n its
 *                valid rows, k_stride the elements from one k to the next
 *                (k >= K reads as +0). */
typedef struct vt_mxu_packers {
    void (*pack_a_row)(vt_mxu_line x, vt_precision prec, int64_t kt, int nseg, const int *seg, uint16_t *dst, int r);
    void (*pack_b_rows)(vt_mxu_line even, vt_mxu_line odd, vt_precision prec, int64_t np, int64_t kt, int nseg,
                        const int *seg, uint16_t *b, int64_t b_panel, int64_t c, int j);
    void (*pack_b_cols)(const vt_mxu_line cols[16], vt_precision prec, int64_t kt, int nseg, const int *seg,
                        uint16_t *dst);
    void (*pack_a_cols)(vt_mxu_line x, int64_t k_stride, int64_t K, vt_precision prec, int64_t kt, int nseg,
                        const int *seg, uint16_t *dst, int64_t c);
} vt_mxu_packers;
#if VT_X86
extern const vt_mxu_packers vt_mxu_packers_avx512, vt_mxu_packers_avx512bf16;
#endif

/* mxu_cache.c: packed operands' memory kept across products. The
 * workspace: one block reused by the products that find it free (cached
 * set), a block of their own for the others. Kept B panels: a B named by
 * its version (rows of C up to VT_MXU_KEPT_ROWS) keeps its packed panels
 * for the next product with the same contents and view (hit set: b holds
 * them; else the caller packs into b, or into its workspace when NULL is
 * returned); released with whether the panels were written. */
#define VT_MXU_KEPT_ROWS 128
void *vt_mxu_ws_acquire(size_t bytes, int *cached);
void vt_mxu_ws_release(void *p, int cached);
typedef struct vt_mxu_kept_key {
    vt_version v;
    const void *data;
    int64_t offset, K, N, s0, s1;
    int dtype, prec;
    const vt_mxu_engine *e;
} vt_mxu_kept_key;

typedef struct vt_mxu_kept_panels {
    vt_mxu_kept_key key;
    uint16_t *b; /* NULL: only seen once so far */
    size_t bytes;
    int refs, ready; /* ready: b holds the packed panels */
    uint64_t used;
} vt_mxu_kept_panels;
vt_mxu_kept_panels *vt_mxu_kept_acquire(const vt_mxu_kept_key *key, size_t bytes, int *hit);
void vt_mxu_kept_release(vt_mxu_kept_panels *k, int ok);

#if defined(__AMX_TILE__)
/* The one AMX tile configuration (palette 1): tiles 0-7 of 16 rows x 64
 * bytes (C 16x16 f32, A 16x32 bf16, B 16 k-pairs x 16 columns). */
typedef struct vt_amx_tile_config {
    uint8_t palette_id, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} vt_amx_tile_config;
static const vt_amx_tile_config vt_amx_tiles16 = {1,
                                                   0,
                                                   {0},
                                                   {64, 64, 64, 64, 64, 64, 64, 64},
                                                   {16, 16, 16, 16, 16, 16, 16, 16}};

/* LDTILECFG of a whole configuration. GCC 12's _tile_loadconfig tells the
 * compiler that it reads 8 bytes, so the stores to the rest of a
 * configuration built on the stack may be dropped as dead (a standalone
 * test built with -O2 loaded a configuration without its rows and columns
 * and faulted); this operand is all 64 bytes. */
static inline void vt_amx_load_config(const vt_amx_tile_config *t) {
    __asm__ volatile("ldtilecfg %0" ::"m"(*t));
}

/* The 2x2 blocking every AMX kernel uses: a 32x32 f32 C block in tiles 0-3
 * (rows 0-15 at c0, rows 16-31 at c1, columns 16-31 16 floats on; ldc in
 * bytes), A tiles 4-5, B tiles 6-7. */
static inline void vt_amx_c_start(float *c0, float *c1, size_t ldc, int acc) {
    if (acc) {
        _tile_loadd(0, c0, ldc);
        _tile_loadd(1, c0 + 16, ldc);
        _tile_loadd(2, c1, ldc);
        _tile_loadd(3, c1 + 16, ldc);
    } else { /* a fresh sum starts at +0, as an MXU accumulator does */
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    }
}
/* One 32-wide K step: C += [A0; A1] x [B0 B1] (A rows as0 / as1 bytes
 * apart, B rows bs). B's tiles stream past (every caller reuses its A tiles
 * across B's blocks): loaded with the T1 hint, they do not evict A from L1. */
static inline void vt_amx_step(const void *a0, size_t as0, const void *a1, size_t as1, const void *b0, const void *b1,
                               size_t bs) {
    _tile_loadd(4, a0, as0);
    _tile_stream_loadd(6, b0, bs);
    _tile_stream_loadd(7, b1, bs);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_loadd(5, a1, as1);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
}
static inline void vt_amx_c_store(float *c0, float *c1, size_t ldc) {
    _tile_stored(0, c0, ldc);
    _tile_stored(1, c0 + 16, ldc);
    _tile_stored(2, c1, ldc);
    _tile_stored(3, c1 + 16, ldc);
}
#endif

#if defined(__AVX512F__)
#include <immintrin.h>

#include "kernels/vmath_avx512.h"

/* The bf16 parts of 16 f32 values (as f32 bits, low halves zero), exactly
 * vt_mxu_rne_ftz / vt_mxu_trunc_ftz of internal.h lane by lane. */
static inline __m512i vt_mxu_set1(uint32_t v) { return _mm512_set1_epi32((int)v); }
static inline __m512i vt_mxu_rne_ftz16(__m512i u) {
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, vt_mxu_set1(0x7fffffffu)), vt_mxu_set1(0x7f800000u));
    __mmask16 den = _mm512_testn_epi32_mask(u, vt_mxu_set1(0x7f800000u));
    __m512i r = _mm512_add_epi32(
        u, _mm512_add_epi32(vt_mxu_set1(0x7fffu), _mm512_and_si512(_mm512_srli_epi32(u, 16), vt_mxu_set1(1))));
    r = _mm512_mask_or_epi32(r, nan, u, vt_mxu_set1(0x00400000u));
    r = _mm512_mask_and_epi32(r, den, u, vt_mxu_set1(0x80000000u));
    return _mm512_and_si512(r, vt_mxu_set1(0xffff0000u));
}
/* One row of 32 finished sums (lo: columns 0-15, hi: 16-31) out to a sink
 * at its (m, n): the columns below its ncols. */
static inline void vt_mxu_sink_row(const vt_mxu_sink *s, int64_t m, int64_t n, __m512 lo, __m512 hi) {
    uint16_t *d = s->p + m * s->ld + n;
    int64_t left = s->ncols - n;
    if (left >= 32) {
        _mm512_storeu_si512(d, vt_avx512_f32x32_to_bf16_fast(lo, hi));
        return;
    }
    __mmask16 k0 = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
    __mmask16 k1 = left <= 16 ? 0 : (__mmask16)((1u << (left - 16)) - 1);
    _mm256_mask_storeu_epi16(d, k0, vt_avx512_f32x16_to_bf16(lo));
    _mm256_mask_storeu_epi16(d + 16, k1, vt_avx512_f32x16_to_bf16(hi));
}
/* The same for a row of 16 (a 16-wide last block: ncols - n <= 16). */
static inline void vt_mxu_sink_row16(const vt_mxu_sink *s, int64_t m, int64_t n, __m512 lo) {
    uint16_t *d = s->p + m * s->ld + n;
    int64_t left = s->ncols - n;
    if (left >= 16) {
        _mm256_storeu_si256((__m256i *)d, vt_avx512_f32x16_to_bf16_fast(lo));
        return;
    }
    _mm256_mask_storeu_epi16(d, (__mmask16)((1u << left) - 1), vt_avx512_f32x16_to_bf16(lo));
}
/* rows x 32 sums of a finished block (row stride ldc) out to a sink at its
 * (m, n). */
static inline void vt_mxu_sink_rows(const vt_mxu_sink *s, int64_t m, int64_t n, const float *c, int64_t ldc,
                                    int64_t rows) {
    for (int64_t r = 0; r < rows; r++)
        vt_mxu_sink_row(s, m + r, n, _mm512_loadu_ps(c + r * ldc), _mm512_loadu_ps(c + r * ldc + 16));
}
static inline __m512i vt_mxu_trunc_ftz16(__m512i u) {
    __mmask16 den = _mm512_testn_epi32_mask(u, vt_mxu_set1(0x7f800000u));
    return _mm512_and_si512(u, _mm512_mask_mov_epi32(vt_mxu_set1(0xffff0000u), den, vt_mxu_set1(0x80000000u)));
}
#endif

#if defined(__AVX2__)
#include <immintrin.h>

/* The same on 8 lanes with AVX2. */
static inline __m256i vt_mxu_set1_8(uint32_t v) { return _mm256_set1_epi32((int)v); }
static inline __m256i vt_mxu_rne_ftz8(__m256i u) {
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, vt_mxu_set1_8(0x7fffffffu)), vt_mxu_set1_8(0x7f800000u));
    __m256i den = _mm256_cmpeq_epi32(_mm256_and_si256(u, vt_mxu_set1_8(0x7f800000u)), _mm256_setzero_si256());
    __m256i r = _mm256_add_epi32(
        u, _mm256_add_epi32(vt_mxu_set1_8(0x7fffu), _mm256_and_si256(_mm256_srli_epi32(u, 16), vt_mxu_set1_8(1))));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(u, vt_mxu_set1_8(0x00400000u)), nan);
    r = _mm256_blendv_epi8(r, _mm256_and_si256(u, vt_mxu_set1_8(0x80000000u)), den);
    return _mm256_and_si256(r, vt_mxu_set1_8(0xffff0000u));
}
static inline __m256i vt_mxu_trunc_ftz8(__m256i u) {
    __m256i den = _mm256_cmpeq_epi32(_mm256_and_si256(u, vt_mxu_set1_8(0x7f800000u)), _mm256_setzero_si256());
    return _mm256_blendv_epi8(_mm256_and_si256(u, vt_mxu_set1_8(0xffff0000u)),
                              _mm256_and_si256(u, vt_mxu_set1_8(0x80000000u)), den);
}
/* The bf16 parts of 8 floats (f32 bits, low halves zero) for segment g of
 * prec (hi; hi, lo; hi, mid, lo); returns the number of segments. */
static inline int vt_mxu_split8(__m256 x, vt_precision prec, __m256i parts[3]) {
    __m256i u = _mm256_castps_si256(x);
    if (prec == VT_PRECISION_DEFAULT) {
        parts[0] = vt_mxu_rne_ftz8(u);
        return 1;
    }
    parts[0] = vt_mxu_trunc_ftz8(u);
    __m256 r = _mm256_sub_ps(x, _mm256_castsi256_ps(parts[0]));
    if (prec == VT_PRECISION_HIGH) {
        parts[1] = vt_mxu_rne_ftz8(_mm256_castps_si256(r));
        return 2;
    }
    parts[1] = vt_mxu_trunc_ftz8(_mm256_castps_si256(r));
    r = _mm256_sub_ps(r, _mm256_castsi256_ps(parts[1]));
    parts[2] = vt_mxu_rne_ftz8(_mm256_castps_si256(r));
    return 3;
}
/* 16 parts (two vectors of f32 bits, low halves zero) as 16 contiguous bf16. */
static inline __m256i vt_mxu_narrow16(__m256i p0, __m256i p1) {
    __m256i v = _mm256_packus_epi32(_mm256_srli_epi32(p0, 16), _mm256_srli_epi32(p1, 16));
    return _mm256_permute4x64_epi64(v, 0xD8);
}
#endif

#if VT_X86
/* Row r (0..15) of an A panel: the kt chunks of every segment g go to
 * dst + (g*kt + c)*VT_MXU_CHUNK + r*32. seg[g] is the part (0 hi, 1 mid,
 * 2 lo) segment g holds; nseg segments. */
/* c[i] = +0 where c[i] is inf or NaN (the low-pass guard of mxu.c). */
void vt_mxu_guard_avx512(float *c, int64_t n);
/* dst[i] = bf16 of src[i] as vt_f32_to_bf16 rounds it (RNE, NaN -> 0x7fc0). */
void vt_mxu_store_bf16_avx512(uint16_t *dst, const float *src, int64_t n);
#endif

/* mxu.c: one 2-D product on engine e, operands validated (mxu_batch.c).
 * a_rows / b_rows: a produced operand's rows (NULL: read a / b); b_version:
 * what b holds (NULL: unknown), for the kept panels. Products below
 * VT_MXU_PARALLEL_MACS multiply-adds run on the calling thread: the pool
 * costs more than it gains. */
#define VT_MXU_PARALLEL_MACS (1 << 18)
vt_status vt_mxu_matmul_2d(const vt_mxu_engine *e, const vt_tensor *out, const vt_tensor *a, const vt_tensor *b,
                           const vt_tensor *bias, double alpha, double beta, vt_precision prec,
                           const vt_mxu_rows *a_rows, const vt_mxu_rows *b_rows, const vt_version *b_version);

#endif
