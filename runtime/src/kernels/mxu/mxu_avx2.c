/* mxu_avx2.c — AVX2/FMA MXU engine: bf16 split and VNNI zip on 8 lanes and
 * a 6x16 f32 block kernel on operands widened from bf16. A bf16 product is
 * exact in f32, so each FMA equals the exact product rounded into the sum. */
#include <immintrin.h>
#include <pthread.h>
#include <stdlib.h>

#include "mxu_local.h"

void vt_mxu_split_avx2(const float *restrict x, int64_t n, int64_t npad, vt_precision prec, uint16_t *restrict hi,
                       uint16_t *restrict mid, uint16_t *restrict lo) {
    for (int64_t i = 0; i < npad; i += 16) {
        float tail[16];
        const float *src = x + i;
        if (i + 16 > n) {
            for (int64_t t = 0; t < 16; t++) tail[t] = i + t < n ? x[i + t] : 0.0f;
            src = tail;
        }
        __m256i p0[3], p1[3];
        int nseg = vt_mxu_split8(_mm256_loadu_ps(src), prec, p0);
        vt_mxu_split8(_mm256_loadu_ps(src + 8), prec, p1);
        /* parts in order hi(, mid), lo: mid only for HIGHEST, lo past DEFAULT */
        _mm256_storeu_si256((__m256i *)(hi + i), vt_mxu_narrow16(p0[0], p1[0]));
        if (mid) _mm256_storeu_si256((__m256i *)(mid + i), vt_mxu_narrow16(p0[1], p1[1]));
        if (lo) _mm256_storeu_si256((__m256i *)(lo + i), vt_mxu_narrow16(p0[nseg - 1], p1[nseg - 1]));
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

/* The block kernel widens its bf16 operands to f32 once per K slice (KS
 * values) and then runs a plain f32 FMA kernel: 6 rows x 16 columns, 12
 * accumulators, B loaded and A broadcast straight from L1 with no integer
 * work in the inner loop. Widening in the inner loop (a shift and a mask
 * per broadcast) held the old 4 x 16 kernel to about a third of the FMA
 * peak. A slice of A (128 x KS f32, 256 KiB) and one B panel (16 x KS f32,
 * 32 KiB) live in a buffer each thread keeps (freed when it exits); C stays
 * in L2 between slices. Without that buffer the kernel runs one chunk per
 * slice from a small one on the stack.
 * Every element is still the sequential f32 sum over k in order, one FMA
 * per product (exact in f32), so the bits equal the old kernel's. */
/* 512 measured best on a 2-core AMD EPYC (AVX2, 512 KiB L2): 2048^3 at
 * 145-170 GFLOP/s against 133-140 at 128 and 80-143 at 1024. */
#define KS 512
#define MR 6

static inline void widen_a(int64_t kcs, int64_t mb, const uint16_t *restrict a, int64_t as, float *restrict aw,
                           int64_t lda) {
    for (int64_t m = 0; m < mb; m++) {
        const uint16_t *row = a + (m / 16) * as + (m % 16) * 32;
        float *dst = aw + m * lda;
        for (int64_t ch = 0; ch < kcs; ch++)
            for (int q = 0; q < 32; q += 8) {
                __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(row + ch * VT_MXU_CHUNK + q)));
                _mm256_storeu_si256((__m256i *)(dst + ch * 32 + q), _mm256_slli_epi32(w, 16));
            }
    }
}

/* One 16-column panel: pair j of a chunk holds (k even, k odd) per column. */
static inline void widen_b(int64_t kcs, const uint16_t *restrict b, float *restrict bw) {
    const __m256i himask = vt_mxu_set1_8(0xffff0000u);
    for (int64_t ch = 0; ch < kcs; ch++)
        for (int j = 0; j < 16; j++) {
            const uint16_t *p = b + ch * VT_MXU_CHUNK + j * 32;
            __m256i w0 = _mm256_loadu_si256((const __m256i *)p), w1 = _mm256_loadu_si256((const __m256i *)(p + 16));
            float *ev = bw + (ch * 32 + 2 * j) * 16, *od = ev + 16;
            __m256i e0 = _mm256_slli_epi32(w0, 16), o0 = _mm256_and_si256(w0, himask);
            __m256i e1 = _mm256_slli_epi32(w1, 16), o1 = _mm256_and_si256(w1, himask);
            _mm256_storeu_si256((__m256i *)ev, e0);
            _mm256_storeu_si256((__m256i *)(ev + 8), e1);
            _mm256_storeu_si256((__m256i *)od, o0);
            _mm256_storeu_si256((__m256i *)(od + 8), o1);
        }
}

/* C[mr x 16] (+)= A[mr x ks] B[ks x 16]; mr <= MR is a constant after inlining. */
static inline __attribute__((always_inline)) void micro(int mr, int64_t ks, const float *restrict aw,
                                                        int64_t lda, const float *restrict bw, float *restrict c,
                                                        int64_t ldc, int acc) {
    __m256 s[MR][2];
#pragma GCC unroll 6
    for (int r = 0; r < mr; r++) {
        s[r][0] = acc ? _mm256_loadu_ps(c + r * ldc) : _mm256_setzero_ps();
        s[r][1] = acc ? _mm256_loadu_ps(c + r * ldc + 8) : _mm256_setzero_ps();
    }
    for (int64_t k = 0; k < ks; k++) {
        __m256 b0 = _mm256_load_ps(bw + k * 16), b1 = _mm256_load_ps(bw + k * 16 + 8);
#pragma GCC unroll 6
        for (int r = 0; r < mr; r++) {
            __m256 x = _mm256_broadcast_ss(aw + r * lda + k);
            s[r][0] = _mm256_fmadd_ps(x, b0, s[r][0]);
            s[r][1] = _mm256_fmadd_ps(x, b1, s[r][1]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < mr; r++) {
        _mm256_storeu_ps(c + r * ldc, s[r][0]);
        _mm256_storeu_ps(c + r * ldc + 8, s[r][1]);
    }
}

static void strip(int mr, int64_t ks, const float *aw, int64_t lda, const float *bw, float *c, int64_t ldc, int acc) {
    switch (mr) {
    case 6: micro(6, ks, aw, lda, bw, c, ldc, acc); break;
    case 5: micro(5, ks, aw, lda, bw, c, ldc, acc); break;
    case 4: micro(4, ks, aw, lda, bw, c, ldc, acc); break;
    case 3: micro(3, ks, aw, lda, bw, c, ldc, acc); break;
    case 2: micro(2, ks, aw, lda, bw, c, ldc, acc); break;
    default: micro(1, ks, aw, lda, bw, c, ldc, acc); break;
    }
}

/* The block over K slices of ks_max (a multiple of 32) values. */
static void block_slices(int64_t kc, int64_t mb, int64_t nb, const uint16_t *a, int64_t as, const uint16_t *b,
                         int64_t bs, float *c, int64_t ldc, int acc, float *aw, float *bw, int64_t ks_max) {
    for (int64_t m0 = 0; m0 < mb; m0 += 128) { /* mb is at most MC (128) in mxu.c; stay general */
        int64_t mbs = mb - m0 < 128 ? mb - m0 : 128;
        const uint16_t *as0 = a + (m0 / 16) * as;
        for (int64_t k0 = 0; k0 < kc; k0 += ks_max / 32) {
            int64_t kcs = kc - k0 < ks_max / 32 ? kc - k0 : ks_max / 32, ks = kcs * 32;
            int first = !acc && k0 == 0;
            widen_a(kcs, mbs, as0 + k0 * VT_MXU_CHUNK, as, aw, ks_max);
            for (int64_t n = 0; n < nb; n += 16) {
                widen_b(kcs, b + (n / 16) * bs + k0 * VT_MXU_CHUNK, bw);
                for (int64_t m = 0; m < mbs; m += MR) {
                    int mr = mbs - m < MR ? (int)(mbs - m) : MR;
                    strip(mr, ks, aw + m * ks_max, ks_max, bw, c + (m0 + m) * ldc + n, ldc, !first);
                }
            }
        }
    }
}

static pthread_key_t ws_key;
static pthread_once_t ws_once = PTHREAD_ONCE_INIT;
static void ws_make_key(void) {
    if (pthread_key_create(&ws_key, free) != 0) ws_key = (pthread_key_t)-1;
}

/* This thread's widening buffer (128 x KS + 16 x KS f32), or NULL. */
static float *thread_ws(void) {
    pthread_once(&ws_once, ws_make_key);
    if (ws_key == (pthread_key_t)-1) return NULL;
    float *w = pthread_getspecific(ws_key);
    if (!w && (w = aligned_alloc(64, (size_t)(128 + 16) * KS * sizeof(float))) && pthread_setspecific(ws_key, w)) {
        free(w);
        w = NULL;
    }
    return w;
}

void vt_mxu_block_avx2(int64_t kc, int64_t mb, int64_t nb, const uint16_t *restrict a, int64_t as,
                       const uint16_t *restrict b, int64_t bs, float *restrict c, int64_t ldc, int acc) {
    /* AMX and VDPBF16PS flush denormal inputs and results; match them. */
    unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040); /* FTZ | DAZ */
    float *ws = thread_ws();
    if (ws) {
        block_slices(kc, mb, nb, a, as, b, bs, c, ldc, acc, ws, ws + 128 * KS, KS);
    } else {
        _Alignas(64) float aw[128 * 32], bw[16 * 32];
        block_slices(kc, mb, nb, a, as, b, bs, c, ldc, acc, aw, bw, 32);
    }
    _mm_setcsr(csr);
}

const vt_mxu_engine vt_mxu_engine_avx2 = {"avx2", VT_ISA_AVX2, vt_mxu_block_avx2, NULL, vt_mxu_split_avx2,
                                          vt_mxu_zip_avx2, 1, 1, NULL};
