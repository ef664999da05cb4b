/* conv_amx.c — the convolution forward on the AMX engine (or, with the
 * same buffers, VDPBF16PS blocks on the AVX512-BF16 engine) as an implicit
 * GEMM: no im2col rows, no packed A. Images are copied (a chunk at a time)
 * into a zero-padded buffer with channels innermost, padded to a multiple
 * of 32 (Cp), each value already its bf16 part (the packers' rounding), so
 * the A tile of 16 output positions x 32 channels of one tap is one tile
 * load from that buffer with a row stride of the conv stride times Cp. The
 * weight is packed once into VNNI tiles [16-output panel][tap][32-channel
 * chunk]. Each C tile (16 positions x 16 outputs, f32) sums over every tap
 * and chunk in the tiles, then is written out: the bias added to the f32
 * sum (as oneDNN adds it), then rounded to the output's dtype.
 *
 * Positions: with stride 1 in every dim, position v of the padded grid
 * (v = (o0 * E1 + o1) * E2 + o2) reads tap t at v + toff[t], so tiles run
 * over v straight across rows (the E - out columns and rows of each plane
 * are computed and dropped). Otherwise tiles run along one output row, the
 * last one short. Rows of a tile past the valid ones read whatever lies
 * there (inside the buffer's margin) and are never written out.
 *
 * Numerics are the MXU's DEFAULT: bf16 parts of both operands (F32 at
 * DEFAULT, BF16 and F16 inputs), exact products, f32 sums. */
#include <immintrin.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "kernels/conv/conv_amx.h"

/* Bytes of padded input per chunk of images (tests make it small to run
 * several chunks on small images). */
static _Atomic int64_t xbuf_bytes = (int64_t)16 << 20;
void vt_conv_amx_force_chunk_bytes(int64_t bytes) { atomic_store(&xbuf_bytes, bytes > 0 ? bytes : (int64_t)16 << 20); }
int64_t vt_conv_amx_chunk_bytes(void) { return atomic_load(&xbuf_bytes); }
/* Output panels (of 16) whose packed weight stays in L2 while a task's
 * positions stream past it. */
#define WEIGHT_L2_BYTES ((int64_t)1 << 20)

/* What both directions need: the AMX engine, one bf16 pass (F32 at DEFAULT,
 * BF16, F16), groups 1, and more than one tap. A 1x1 convolution is a
 * plain product of the input, which the drivers run as one (long K loops,
 * no copy). */
int vt_conv_amx_takes_shape(const vt_conv_geom *g, vt_precision prec) {
    const vt_mxu_engine *e = vt_mxu_engine_active();
    if (e != &vt_mxu_engine_amx && e != &vt_mxu_engine_avx512bf16) return 0;
    int dt_ok = g->dtype == VT_BF16 || g->dtype == VT_F16 || (g->dtype == VT_F32 && prec == VT_PRECISION_DEFAULT);
    return dt_ok && g->G == 1 && g->k_prod > 1;
}

/* Merged taps, for fewer than 16 channels (an RGB stem), which padded to
 * 32 would be mostly padding: each position's channels padded to Cq (even
 * where the last dim has an odd number of taps), a window's k2 taps along
 * the undilated last dim lie back to back in the padded buffer, so they
 * are one K chunk of k2 * Cq <= 32 values, read by A tiles exactly that
 * wide (no value outside the window enters a sum). Returns Cq, or 0 where
 * the taps do not merge. */
static int64_t merged_channels(const vt_conv_geom *g) {
    int64_t cq = g->k[2] % 2 ? g->C + g->C % 2 : g->C;
    return g->C < 16 && g->dil[2] == 1 && g->k[2] * cq <= 32 ? cq : 0;
}

int vt_conv_igemm_dp(void) { return vt_mxu_engine_active() == &vt_mxu_engine_avx512bf16; }

int vt_conv_amx_takes(const vt_conv_geom *g, vt_precision prec) {
    /* few positions per output channel (a late layer: 4 images of 7x7
     * against 512 outputs) do not pay for packing the weight into tiles */
    return vt_conv_amx_takes_shape(g, prec) && (g->C >= 16 || merged_channels(g)) && g->N * g->out_prod >= 2 * g->O;
}


/* ------------------------------------------------------------ packing */

/* The bf16 parts (MXU DEFAULT rounding) of n values of t from element off,
 * stride st, at dst; dst[n..npad) = +0, and up to npad rounded up to 16
 * written (the split's whole vectors). tmp: n floats. */
void vt_conv_amx_parts_line(const vt_tensor *t, int64_t off, int64_t st, int64_t n, int64_t npad, float *tmp,
                       uint16_t *dst) {
    const float *x = tmp;
    const char *src = (const char *)t->data + off * (int64_t)vt_dtype_size(t->dtype);
    if (t->dtype == VT_F32 && st == 1) x = (const float *)src;
    else vt_convert(t->dtype, src, st, VT_F32, tmp, 1, n);
    vt_mxu_split_avx512(x, n, npad, VT_PRECISION_DEFAULT, dst, NULL, NULL);
}

/* The parts of n bf16 values: the values themselves (the MXU rounding of a
 * bf16 is exact) but denormals flushed to a signed zero and NaNs quieted,
 * as vt_mxu_split rounds them. */
void vt_conv_amx_bf16_parts(const uint16_t *src, int64_t n, uint16_t *dst) {
    const __m512i exp = _mm512_set1_epi16(0x7f80), mag = _mm512_set1_epi16(0x7fff);
    const __m512i sign = _mm512_set1_epi16((short)0x8000), quiet = _mm512_set1_epi16(0x0040);
    for (int64_t i = 0; i < n; i += 32) {
        /* whole vectors unmasked: masked loads in a streaming loop ran 2-3x
         * slower on AMD Zen 5 (see mxu_pack_body.h's load32w) */
        const int whole = n - i >= 32;
        __mmask32 k = whole ? (__mmask32)0xffffffffu : (__mmask32)((1u << (n - i)) - 1);
        __m512i v = whole ? _mm512_loadu_si512(src + i) : _mm512_maskz_loadu_epi16(k, src + i);
        __mmask32 den = _mm512_testn_epi16_mask(v, exp);
        __mmask32 nan = _mm512_cmpgt_epu16_mask(_mm512_and_si512(v, mag), exp);
        v = _mm512_mask_mov_epi16(v, den, _mm512_and_si512(v, sign));
        v = _mm512_mask_mov_epi16(v, nan, _mm512_or_si512(v, quiet));
        if (whole) _mm512_storeu_si512(dst + i, v);
        else _mm512_mask_storeu_epi16(dst + i, k, v);
    }
}

/* vt_conv_amx_bf16_parts of n values at dst[0 .. n), then zeros up to dst[npad). */
static void bf16_parts_padded(const uint16_t *src, int64_t n, int64_t npad, uint16_t *dst) {
    vt_conv_amx_bf16_parts(src, n, dst);
    for (int64_t i = n; i < npad; i += 32) {
        __mmask32 k = npad - i >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << (npad - i)) - 1);
        _mm512_mask_storeu_epi16(dst + i, k, _mm512_setzero_si512());
    }
}

/* Whether any of n bf16 parts is inf or NaN. */
static int any_nonfinite(const uint16_t *p, int64_t n) {
    const __m512i exp = _mm512_set1_epi16(0x7f80);
    __mmask32 bad = 0;
    for (int64_t i = 0; i < n; i += 32) {
        __mmask32 k = n - i >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << (n - i)) - 1);
        __m512i v = _mm512_maskz_loadu_epi16(k, p + i);
        bad |= _mm512_mask_cmpeq_epi16_mask(k, _mm512_and_si512(v, exp), exp);
    }
    return bad != 0;
}

/* One input row (from element base) of a merged-taps buffer at dst, its
 * padding columns included: E2 positions of Cq, each its C channels' parts
 * and zeros. prow: E2 * C + 32 parts whose padding positions are zero (the
 * row's own positions are written here, then 16 zeros past them: the
 * split writes whole vectors); tmp: room for C * in[2] floats and in[2]
 * parts. Positions go from C to Cq values, 32 / Cq at a time, by a masked
 * permute. */
static void merged_row(const amx_job *j, int64_t base, float *tmp, uint16_t *prow, uint16_t *dst) {
    const vt_conv_geom *g = j->g;
    const vt_tensor *x = j->x5;
    const int64_t C = g->C, n = g->in[2], Cq = j->Cp, E2 = j->E[2];
    uint16_t *parts = prow + g->pad[2] * C; /* [position][C] */
    if (x->strides[1] == 1 && x->strides[4] == C) { /* channels-last: the row is one run */
        if (x->dtype == VT_BF16) vt_conv_amx_bf16_parts((const uint16_t *)x->data + base, n * C, parts);
        else vt_conv_amx_parts_line(x, base, 1, n * C, n * C, tmp, parts);
    } else {
        uint16_t *line = (uint16_t *)(tmp + C * n); /* one channel's, then spread */
        for (int64_t c = 0; c < C; c++) {
            vt_conv_amx_parts_line(x, base + c * x->strides[1], x->strides[4], n, n, tmp, line);
            for (int64_t i = 0; i < n; i++) parts[i * C + c] = line[i];
        }
    }
    _mm256_storeu_si256((__m256i *)(parts + n * C), _mm256_setzero_si256());
    const int64_t ppv = 32 / Cq; /* positions a vector */
    uint16_t ia[32];
    __mmask32 keep = 0;
    for (int l = 0; l < 32; l++) {
        ia[l] = (uint16_t)(l % Cq < C ? l / Cq * C + l % Cq : 0);
        if (l < ppv * Cq && l % Cq < C) keep |= (__mmask32)1u << l;
    }
    const __m512i idx = _mm512_loadu_si512(ia);
    const __mmask32 ld = ppv * C >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << (ppv * C)) - 1);
    for (int64_t p = 0; p < E2; p += ppv) {
        const int64_t vals = (E2 - p < ppv ? E2 - p : ppv) * Cq;
        __m512i v = _mm512_maskz_permutexvar_epi16(keep, idx, _mm512_maskz_loadu_epi16(ld, prow + p * C));
        _mm512_mask_storeu_epi16(dst + p * Cq, vals >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << vals) - 1), v);
    }
}

/* Whether an input row's channels are lines of their own (NCHW): each
 * channel's positions contiguous, at least a tile of them. */
static int channel_lines(const amx_job *j) { return !j->merged && j->x5->strides[4] == 1 && j->g->in[2] >= 16; }

/* One input row (from element base) of an NCHW input at dst: the parts of
 * each channel's line (tmp: [round_up(C, 16)][round_up(n, 16)] parts, then
 * n floats), transposed 16 x 16 at a time into n positions of Cp. */
static void transposed_row(const amx_job *j, int64_t base, uint16_t *tmp, uint16_t *dst) {
    const vt_conv_geom *g = j->g;
    const vt_tensor *x = j->x5;
    const int64_t C = g->C, Cr = round_up(C, 16), n = g->in[2], np = round_up(n, 16), Cp = j->Cp;
    float *ftmp = (float *)(void *)(tmp + Cr * np);
    for (int64_t c = 0; c < C; c++) {
        int64_t at = base + c * x->strides[1];
        if (x->dtype == VT_BF16) vt_conv_amx_bf16_parts((const uint16_t *)x->data + at, n, tmp + c * np);
        else vt_conv_amx_parts_line(x, at, 1, n, np, ftmp, tmp + c * np);
    }
    memset(tmp + C * np, 0, (size_t)((Cr - C) * np) * 2);
    for (int64_t i0 = 0; i0 < n; i0 += 16) {
        const int nr = n - i0 < 16 ? (int)(n - i0) : 16; /* positions of this tile */
        for (int64_t c0 = 0; c0 < Cr; c0 += 16)
            vt_transpose16_avx512((const char *)(tmp + c0 * np + i0), np * 2, (char *)(dst + i0 * Cp + c0), Cp * 2, 2,
                                  nr, 16);
        if (Cr < Cp)
            for (int64_t i = i0; i < n && i < i0 + 16; i++) memset(dst + i * Cp + Cr, 0, (size_t)(Cp - Cr) * 2);
    }
}

/* Rows [begin, end) of the padded buffer: row r = (b, e0, e1) of the
 * chunk, E2 positions of Cp parts; zero outside the input. */
void vt_conv_amx_fill_rows(void *ctx, int64_t begin, int64_t end) {
    amx_job *j = ctx;
    const vt_conv_geom *g = j->g;
    const vt_tensor *x = j->x5;
    /* the row's floats, then (merged taps) its parts and one channel's;
     * NCHW rows: every channel's parts, then one line's floats */
    size_t bytes = channel_lines(j) ? (size_t)(round_up(g->C, 16) * round_up(g->in[2], 16) * 2 + g->in[2] * 4)
                                    : (size_t)(g->C * g->in[2]) * sizeof(float) * (j->merged ? 3 : 1);
    float *tmp = malloc(bytes + 256);
    /* merged taps: a row's parts with zero padding positions around them */
    uint16_t *prow = j->merged ? calloc((size_t)(j->E[2] * g->C + 32), 2) : NULL;
    if (!tmp || (j->merged && !prow)) {
        free(tmp), free(prow);
        atomic_store(&j->oom, 1);
        return;
    }
    int64_t Cp = j->Cp, E0 = j->E[0], E1 = j->E[1], E2 = j->E[2];
    for (int64_t r = begin; r < end; r++) {
        int64_t b = r / (E0 * E1), e0 = r / E1 % E0, e1 = r % E1;
        uint16_t *dst = j->xbuf + r * E2 * Cp;
        int64_t i0 = e0 - g->pad[0], i1 = e1 - g->pad[1];
        if (i0 < 0 || i0 >= g->in[0] || i1 < 0 || i1 >= g->in[1]) {
            memset(dst, 0, (size_t)(E2 * Cp) * 2);
            continue;
        }
        int64_t base = x->offset + (j->n0 + b) * x->strides[0] + i0 * x->strides[2] + i1 * x->strides[3];
        if (j->merged) { /* its padding columns too */
            merged_row(j, base, tmp, prow, dst);
        } else {
            memset(dst, 0, (size_t)(g->pad[2] * Cp) * 2);
            memset(dst + (g->pad[2] + g->in[2]) * Cp, 0, (size_t)((E2 - g->pad[2] - g->in[2]) * Cp) * 2);
            if (Cp == g->C && x->strides[1] == 1 && x->strides[4] == g->C) { /* the row's values lie as the buffer's */
                uint16_t *row = dst + g->pad[2] * Cp;
                if (x->dtype == VT_BF16) vt_conv_amx_bf16_parts((const uint16_t *)x->data + base, g->in[2] * Cp, row);
                else vt_conv_amx_parts_line(x, base, 1, g->in[2] * Cp, g->in[2] * Cp, tmp, row);
            } else if (channel_lines(j)) {
                transposed_row(j, base, (uint16_t *)(void *)tmp, dst + g->pad[2] * Cp);
            } else if (x->dtype == VT_BF16 && x->strides[1] == 1) { /* channels innermost, fewer than Cp */
                for (int64_t i2 = 0; i2 < g->in[2]; i2++)
                    bf16_parts_padded((const uint16_t *)x->data + base + i2 * x->strides[4], g->C, Cp,
                                      dst + (g->pad[2] + i2) * Cp);
            } else {
                for (int64_t i2 = 0; i2 < g->in[2]; i2++)
                    vt_conv_amx_parts_line(x, base + i2 * x->strides[4], x->strides[1], g->C, Cp, tmp,
                               dst + (g->pad[2] + i2) * Cp);
            }
        }
        if (j->check && any_nonfinite(dst + g->pad[2] * Cp, g->in[2] * Cp)) atomic_store(&j->nonfinite, 1);
    }
    free(tmp), free(prow);
}

/* The parts of C values along dim 1 of t (a weight tap's channels, a
 * position's outputs) from element off at dst[0 .. Cp), zeros past C: a
 * bf16 tensor with that dim contiguous is its own parts (vt_conv_amx_bf16_parts), any
 * other goes through f32 and the split, which may write up to 15 zeros
 * past dst[Cp) (a caller's next run overwrites them). tmp: C floats. */
void vt_conv_amx_channel_parts(const vt_tensor *t, int64_t off, int64_t C, int64_t Cp, float *tmp, uint16_t *dst) {
    if (t->dtype == VT_BF16 && (t->strides[1] == 1 || C == 1)) {
        vt_conv_amx_bf16_parts((const uint16_t *)t->data + off, C, dst);
        memset(dst + C, 0, (size_t)(Cp - C) * 2);
    } else {
        vt_conv_amx_parts_line(t, off, t->strides[1], C, Cp, tmp, dst);
    }
}

/* Output panels [begin, end) of the packed weight: word (k-pair p, output
 * o) of tile (panel, tap, chunk) holds the parts of K values 2p, 2p + 1 of
 * the chunk: channels, or (merged taps) (k2, channel) pairs. Each of the
 * panel's 16 outputs gets a line of every tap's parts, and each tile is a
 * transpose of 32-bit pairs out of the 16 lines (merged taps: Kq / 2 rows,
 * all a tile load reads). */
static void pack_weight(void *ctx, int64_t begin, int64_t end) {
    amx_job *j = ctx;
    const vt_conv_geom *g = j->g;
    const vt_tensor *w = j->w5;
    const int64_t Cp = j->Cp, taps = j->taps, ncc = j->ncc, Kq = j->Kq, k2n = j->merged ? g->k[2] : 1;
    const int pairs = (int)(Kq < 32 ? Kq : 32) / 2; /* k-pairs of a chunk: a B tile's rows */
    const int64_t ls = taps * Kq + 16;                /* the last tap's parts may write 15 past its Cp */
    uint16_t *lines = malloc((size_t)(16 * ls) * 2);
    float *tmp = malloc((size_t)(g->C + 16) * sizeof(float));
    if (!lines || !tmp) {
        free(lines), free(tmp);
        atomic_store(&j->oom, 1);
        return;
    }
    for (int64_t panel = begin; panel < end; panel++) {
        uint32_t *dst = (uint32_t *)(j->wp + panel * taps * ncc * 512);
        for (int64_t o16 = 0; o16 < 16; o16++) {
            int64_t o = panel * 16 + o16;
            uint16_t *line = lines + o16 * ls;
            if (o >= g->O) {
                memset(line, 0, (size_t)(taps * Kq) * 2);
                continue;
            }
            /* the weight's taps in order (k2 inner), each Cp parts */
            for (int64_t t = 0; t < taps * k2n; t++) {
                int64_t k0 = t / (g->k[1] * g->k[2]), k1 = t / g->k[2] % g->k[1], k2 = t % g->k[2];
                int64_t off = w->offset + o * w->strides[0] + k0 * w->strides[2] + k1 * w->strides[3] +
                              k2 * w->strides[4];
                vt_conv_amx_channel_parts(w, off, g->C, Cp, tmp, line + t * Cp);
            }
        }
        for (int64_t t = 0; t < taps; t++)
            for (int64_t cc = 0; cc < ncc; cc++)
                vt_transpose16_avx512((const char *)(lines + t * Kq + cc * 32), ls * 2,
                                      (char *)(dst + (t * ncc + cc) * 256), 64, 4, pairs, 16);
    }
    free(lines), free(tmp);
}

/* ------------------------------------------------------------ compute */

/* One tile of 16 positions: its first grid position and row step, and for
 * each valid row its tile row, image and output position; gathered, each
 * row's first input (rows past the valid ones repeat the first). */
typedef struct tile_rows {
    int64_t first, step;
    int nv;
    int row[16];
    int64_t b[16], o[16][3];
    const uint16_t *rp[16];
} tile_rows;

/* Tiles of the chunk's images: gathered, its output positions 16 at a time
 * (images one after another); otherwise `tiles` per image. */
static int64_t chunk_tiles(const amx_job *j) {
    return j->gathered ? (j->nbc * j->g->out_prod + 15) / 16 : j->nbc * j->tiles;
}

/* Gathered: tile i holds the chunk's output positions 16i .. 16i + 15 in
 * (image, o0, o1, o2) order, each row reading from its own first input in
 * the padded grid. No row is spent on a padding column or on the rest of
 * a short last tile of an image (a 14x14 output in 16-wide grid rows used
 * 196 of 224 rows, a 7x7 one 49 of 64). */
static void gathered_rows(const amx_job *j, int64_t i, tile_rows *t) {
    const vt_conv_geom *g = j->g;
    const int64_t P = g->out_prod, total = j->nbc * P;
    t->first = 0, t->step = 1; /* unused: each row has its own first input */
    for (int r = 0; r < 16 && i * 16 + r < total; r++) {
        const int64_t pos = i * 16 + r, b = pos / P, q = pos % P;
        const int64_t o2 = q % g->out[2], o1 = q / g->out[2] % g->out[1], o0 = q / (g->out[2] * g->out[1]);
        const int64_t grid = (o0 * g->stride[0] * j->E[1] + o1 * g->stride[1]) * j->E[2] + o2 * g->stride[2];
        t->row[t->nv] = r;
        t->b[t->nv] = b;
        t->o[t->nv][0] = o0, t->o[t->nv][1] = o1, t->o[t->nv][2] = o2;
        t->rp[r] = j->xbuf + (b * j->img + grid) * j->Cp;
        t->nv++;
    }
    for (int r = t->nv; r < 16; r++) t->rp[r] = t->rp[0];
}

/* Tile i of the chunk (chunk_tiles). */
static void rows_of_tile(const amx_job *j, int64_t i, tile_rows *t) {
    const vt_conv_geom *g = j->g;
    t->nv = 0;
    if (j->gathered) {
        gathered_rows(j, i, t);
        return;
    }
    const int64_t img = i / j->tiles;
    for (int r = 0; r < 16; r++) t->b[r] = img;
    i %= j->tiles;
    if (j->linear) {
        t->first = i * 16, t->step = 1;
        /* grid coordinates of the first position, then stepped (no divisions per row) */
        int64_t o2 = t->first % j->E[2], o1 = t->first / j->E[2] % j->E[1], o0 = t->first / (j->E[2] * j->E[1]);
        for (int r = 0; r < 16 && t->first + r < j->V; r++) {
            if (o2 < g->out[2] && o1 < g->out[1]) { /* else a column or row of the padding */
                t->row[t->nv] = r;
                t->o[t->nv][0] = o0, t->o[t->nv][1] = o1, t->o[t->nv][2] = o2;
                t->nv++;
            }
            if (++o2 == j->E[2]) {
                o2 = 0;
                if (++o1 == j->E[1]) o1 = 0, o0++;
            }
        }
        return;
    }
    int64_t line = i / j->tpr, o2s = i % j->tpr * 16, o0 = line / g->out[1], o1 = line % g->out[1];
    t->first = (o0 * g->stride[0] * j->E[1] + o1 * g->stride[1]) * j->E[2] + o2s * g->stride[2];
    t->step = g->stride[2];
    for (int r = 0; r < 16 && o2s + r < g->out[2]; r++) {
        t->row[t->nv] = r;
        t->o[t->nv][0] = o0, t->o[t->nv][1] = o1, t->o[t->nv][2] = o2s + r;
        t->nv++;
    }
}

/* 16 f32 out to dst[0 .. 16) under mask m, in the output's dtype. */
static inline void store16(const amx_job *j, int64_t off, __mmask16 m, __m512 v) {
    if (j->ydt == VT_F32) {
        _mm512_mask_storeu_ps((float *)j->y + off, m, v);
    } else if (j->ydt == VT_BF16) {
        _mm256_mask_storeu_epi16((uint16_t *)j->y + off, m, vt_avx512_f32x16_to_bf16(v));
    } else {
        float f[16];
        _mm512_storeu_ps(f, v);
        for (int q = 0; q < 16; q++)
            if (m >> q & 1) ((uint16_t *)j->y)[off + q] = vt_f32_to_f16(f[q]);
    }
}

static __mmask16 lanes(int64_t left) {
    return left >= 16 ? (__mmask16)0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
}

/* The C rows of one tile of positions (16 rows of 32 f32 at c: outputs
 * o_first .. o_first + 31, those < O) out, row by row: the bias added to
 * the f32 sum, then rounded to the output's dtype. */
static void write_tiles(const amx_job *j, const float *c, const tile_rows *t, int64_t o_first) {
    int64_t left = j->g->O - o_first;
    __mmask16 m0 = lanes(left), m1 = lanes(left - 16);
    __m512 bias0 = _mm512_setzero_ps(), bias1 = _mm512_setzero_ps();
    if (j->bias) bias0 = _mm512_loadu_ps(j->bias + o_first), bias1 = _mm512_loadu_ps(j->bias + o_first + 16);
    for (int k = 0; k < t->nv; k++) {
        int64_t off = j->yoff + t->b[k] * j->ys[0] + o_first + t->o[k][0] * j->ys[1] + t->o[k][1] * j->ys[2] +
                      t->o[k][2] * j->ys[3];
        __m512 v0 = _mm512_load_ps(c + t->row[k] * 32), v1 = _mm512_load_ps(c + t->row[k] * 32 + 16);
        if (j->bias) v0 = _mm512_add_ps(v0, bias0), v1 = _mm512_add_ps(v1, bias1);
        if (j->ydt == VT_BF16 && m1 == 0xffff) { /* a whole row of 32 */
            _mm512_storeu_si512((uint16_t *)j->y + off, vt_avx512_f32x32_to_bf16_fast(v0, v1));
            continue;
        }
        store16(j, off, m0, v0);
        if (m1) store16(j, off + 16, m1, v1);
    }
}

/* Tile pairs [begin, end) of the chunk: pair p is tiles 2p and 2p + 1 of
 * the (image, tile) order; a missing second tile repeats the first and is
 * not written. Output panels go in blocks of ob whose weight stays in L2. */
static void compute_pairs(void *ctx, int64_t begin, int64_t end) {
    amx_job *j = ctx;
    const int64_t Cp = j->Cp, ncc = j->ncc, taps = j->taps, npanel = j->Op / 16, ntiles = chunk_tiles(j);
    const int64_t panel_elems = taps * ncc * 512;
    float *c = aligned_alloc(64, 4 * 1024);
    if (!c) {
        atomic_store(&j->oom, 1);
        return;
    }
    const int dp = j->gathered; /* the VDPBF16PS blocks read gathered rows */
    const int pairs = (int)(j->Kq < 32 ? j->Kq : 32) / 2; /* k-pairs of a chunk (VDPBF16PS blocks) */
    if (!dp) vt_amx_load_config(j->merged ? &j->cfg : &vt_amx_tiles16);
    for (int64_t pb = 0; pb < npanel; pb += j->ob) {
        int64_t pe = pb + j->ob < npanel ? pb + j->ob : npanel;
        for (int64_t p = begin; p < end; p++) {
            tile_rows tr[2];
            const uint16_t *a[2];
            size_t as[2];
            for (int h = 0; h < 2; h++) {
                rows_of_tile(j, 2 * p + h < ntiles ? 2 * p + h : 2 * p, &tr[h]);
                a[h] = j->xbuf + (tr[h].b[0] * j->img + tr[h].first) * Cp;
                as[h] = (size_t)(tr[h].step * Cp) * 2;
            }
            int second = 2 * p + 1 < ntiles;
            for (int64_t q = pb; q < pe; q += 2) {
                const uint16_t *b0 = j->wp + q * panel_elems, *b1 = b0 + panel_elems;
                if (dp) {
                    for (int h = 0; h < 1 + second; h++)
                        vt_conv_dp_forward_tile(tr[h].rp, j->toff, Cp, taps, ncc, pairs, b0, b1, c + h * 512);
                    for (int h = 0; h < 1 + second; h++) write_tiles(j, c + h * 512, &tr[h], q * 16);
                    continue;
                }
                vt_amx_c_start(c, c + 512, 128, 0);
                for (int64_t t = 0; t < taps; t++) {
                    const uint16_t *x0 = a[0] + j->toff[t] * Cp, *x1 = a[1] + j->toff[t] * Cp;
                    const uint16_t *w0 = b0 + t * ncc * 512, *w1 = b1 + t * ncc * 512;
                    for (int64_t cc = 0; cc < ncc; cc++)
                        vt_amx_step(x0 + cc * 32, as[0], x1 + cc * 32, as[1], w0 + cc * 512, w1 + cc * 512, 64);
                }
                vt_amx_c_store(c, c + 512, 128); /* C as 32 x 32 floats */
                for (int h = 0; h < 1 + second; h++) write_tiles(j, c + h * 512, &tr[h], q * 16);
            }
        }
    }
    if (!dp) _tile_release();
    free(c);
}

/* ------------------------------------------------------------ driver */


/* The padded grid both directions walk: channels padded to 32 (or, merged
 * taps, to Cq), outputs to 32, the padded extents, and each tap's offset in
 * grid positions (toff, which the caller frees). */
vt_status vt_conv_amx_grid_setup(amx_job *j, const vt_conv_geom *g, int64_t merged_cq, const char *fn) {
    j->g = g;
    j->merged = merged_cq > 0;
    j->Cp = j->merged ? merged_cq : round_up(g->C, 32), j->ncc = j->merged ? 1 : j->Cp / 32;
    j->Op = round_up(g->O, 32);
    j->taps = j->merged ? g->k[0] * g->k[1] : g->k_prod;
    j->Kq = j->merged ? g->k[2] * merged_cq : j->Cp;
    if (j->merged) { /* A tiles Kq values wide, B tiles Kq / 2 pairs deep */
        vt_amx_tile_config c = vt_amx_tiles16;
        c.colsb[4] = c.colsb[5] = (uint16_t)(2 * j->Kq);
        c.rows[6] = c.rows[7] = (uint8_t)(j->Kq / 2);
        j->cfg = c;
    }
    for (int d = 0; d < 3; d++) j->E[d] = g->in[d] + 2 * g->pad[d];
    j->img = j->E[0] * j->E[1] * j->E[2];
    vt_status s = VT_OK;
    j->toff = vt_conv_scratch(j->taps, VT_I64, fn, "tap offsets", &s);
    if (s != VT_OK) return s;
    const int64_t k2n = j->merged ? 1 : g->k[2]; /* merged: a tap starts at its window's first position */
    for (int64_t k0 = 0, t = 0; k0 < g->k[0]; k0++)
        for (int64_t k1 = 0; k1 < g->k[1]; k1++)
            for (int64_t k2 = 0; k2 < k2n; k2++, t++)
                j->toff[t] = (k0 * g->dil[0] * j->E[1] + k1 * g->dil[1]) * j->E[2] + k2 * g->dil[2];
    return VT_OK;
}

/* The count blocks of n[i] bf16 (each on a 64-byte boundary) at *p[i],
 * carved from one allocation: the MXU's workspace when it is free, which
 * stays mapped across calls (a fresh 14 MB padded input took a page fault
 * per 4 KiB on every call, a tenth of a batch-32 forward), else a block of
 * its own. */
vt_status vt_conv_amx_scratch(vt_conv_ws *ws, int count, const int64_t *n, uint16_t **const *p, const char *fn,
                              const char *what) {
    size_t bytes = 0;
    for (int i = 0; i < count; i++) bytes += (size_t)round_up(n[i] * 2, 64);
    ws->base = vt_mxu_ws_acquire(bytes, &ws->cached);
    if (!ws->base) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes for the %s", fn, bytes, what);
    char *at = ws->base;
    for (int i = 0; i < count; i++) {
        *p[i] = (uint16_t *)(void *)at;
        at += round_up(n[i] * 2, 64);
    }
    return VT_OK;
}

void vt_conv_amx_scratch_release(vt_conv_ws *ws) {
    if (ws->base) vt_mxu_ws_release(ws->base, ws->cached);
    ws->base = NULL;
}

/* check: an input with inf or NaN stops it with *declined set (what it
 * wrote is to be discarded). */
vt_status vt_conv_amx_forward_checked(const vt_conv_geom *g, const vt_tensor *out, const vt_tensor *input,
                             const vt_tensor *weight, const vt_tensor *bias, int check, int *declined) {
    const char *fn = "vt_conv_forward";
    vt_tensor x5 = vt_conv_view5(input, g->spatial), w5 = vt_conv_view5(weight, g->spatial),
              y5 = vt_conv_view5(out, g->spatial);
    amx_job j;
    vt_conv_ws ws = {0};
    memset(&j, 0, sizeof j);
    j.x5 = &x5, j.w5 = &w5;
    j.check = check;
    *declined = 0;
    vt_status s = vt_conv_amx_grid_setup(&j, g, g->C >= 16 ? 0 : merged_channels(g), fn);
    j.gathered = vt_conv_igemm_dp();
    j.linear = g->stride[0] == 1 && g->stride[1] == 1 && g->stride[2] == 1;
    if (j.linear) {
        j.V = ((g->out[0] - 1) * j.E[1] + g->out[1] - 1) * j.E[2] + g->out[2];
        j.tiles = (j.V + 15) / 16;
    } else {
        j.tpr = (g->out[2] + 15) / 16;
        j.tiles = g->out[0] * g->out[1] * j.tpr;
    }
    int64_t panel_bytes = j.taps * j.ncc * 1024, npanel = j.Op / 16;
    j.ob = WEIGHT_L2_BYTES / panel_bytes / 2 * 2;
    if (j.ob < 2) j.ob = 2;
    if (j.ob > npanel) j.ob = npanel;
    /* a tile's rows past the valid ones read up to 16 steps and a row on
     * (and merged taps a window of up to 16 positions) */
    int64_t margin = 16 * g->stride[2] + j.E[2] + 32;
    int64_t nb = atomic_load(&xbuf_bytes) / (j.img * j.Cp * 2);
    nb = nb < 1 ? 1 : nb > g->N ? g->N : nb;
    int direct = y5.strides[1] == 1 || g->O == 1;
    /* tile rows are 64 bytes: on 64-byte boundaries, none straddles two cache lines */
    if (s == VT_OK) {
        const int64_t n[2] = {(nb * j.img + margin) * j.Cp, npanel * j.taps * j.ncc * 512};
        s = vt_conv_amx_scratch(&ws, 2, n, (uint16_t **const[]){&j.xbuf, &j.wp}, fn, "padded input and packed weight");
    }
    if (s == VT_OK && bias) j.bias = vt_conv_scratch(j.Op, VT_F32, fn, "bias", &s);
    void *ybuf = NULL;
    if (s == VT_OK && !direct) ybuf = vt_conv_scratch(nb * g->out_prod * g->O, out->dtype, fn, "output buffer", &s);
    if (s != VT_OK) goto done;
    memset(j.xbuf + nb * j.img * j.Cp, 0, (size_t)(margin * j.Cp) * 2);
    if (bias) {
        memset(j.bias, 0, (size_t)j.Op * sizeof(float));
        vt_convert(bias->dtype, (const char *)bias->data + bias->offset * (int64_t)vt_dtype_size(bias->dtype),
                   bias->strides[0], VT_F32, j.bias, 1, g->O);
    }
    /* a weight whose channels are not innermost (NCHW) is first copied
     * channels-last, so each tap's channels are one run for the packer */
    vt_tensor wcl = w5;
    void *wbuf = NULL;
    if (s == VT_OK && w5.strides[1] != 1 && g->C > 1) {
        int64_t k_prod = g->k[0] * g->k[1] * g->k[2];
        wbuf = vt_conv_scratch(g->O * g->C * k_prod, w5.dtype, fn, "channels-last weight", &s);
        if (s == VT_OK) {
            int64_t st[5] = {g->C * k_prod, 1, g->k[1] * g->k[2] * g->C, g->k[2] * g->C, g->C};
            wcl = vt_conv_tensor(wbuf, w5.dtype, 5, w5.sizes, st, 0);
            s = vt_copy(&wcl, &w5);
            j.w5 = &wcl;
        }
        if (s != VT_OK) {
            free(wbuf);
            goto done;
        }
    }
    vt_parallel_for(npanel, 1, pack_weight, &j);
    free(wbuf);
    j.w5 = &w5;
    j.y = direct ? out->data : ybuf, j.ydt = out->dtype;
    if (direct) {
        j.ys[0] = y5.strides[0], j.ys[1] = y5.strides[2], j.ys[2] = y5.strides[3], j.ys[3] = y5.strides[4];
    } else {
        j.ys[3] = g->O, j.ys[2] = g->out[2] * g->O, j.ys[1] = g->out[1] * j.ys[2], j.ys[0] = g->out[0] * j.ys[1];
    }
    for (int64_t n0 = 0; n0 < g->N && !atomic_load(&j.oom); n0 += nb) {
        j.n0 = n0, j.nbc = g->N - n0 < nb ? g->N - n0 : nb;
        j.yoff = direct ? y5.offset + n0 * y5.strides[0] : 0;
        vt_parallel_for(j.nbc * j.E[0] * j.E[1], 8, vt_conv_amx_fill_rows, &j);
        if (atomic_load(&j.oom)) break;
        if (atomic_load(&j.nonfinite)) {
            *declined = 1;
            break;
        }
        vt_parallel_for((chunk_tiles(&j) + 1) / 2, 4, compute_pairs, &j);
        if (!direct && !atomic_load(&j.oom)) {
            vt_tensor dst = y5;
            dst.offset += n0 * y5.strides[0];
            dst.sizes[0] = j.nbc;
            int64_t st[5] = {j.ys[0], 1, j.ys[1], j.ys[2], j.ys[3]};
            vt_tensor src = vt_conv_tensor(ybuf, out->dtype, 5, dst.sizes, st, 0);
            s = vt_copy(&dst, &src);
            if (s != VT_OK) break;
        }
    }
    if (s == VT_OK && atomic_load(&j.oom))
        s = vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: out of host memory for scratch", fn);
done:
    free(ybuf);
    free(j.bias);
    vt_conv_amx_scratch_release(&ws);
    free(j.toff);
    return s;
}

vt_status vt_conv_amx_forward(const vt_conv_geom *g, const vt_tensor *out, const vt_tensor *input,
                              const vt_tensor *weight, const vt_tensor *bias) {
    int declined;
    return vt_conv_amx_forward_checked(g, out, input, weight, bias, 0, &declined);
}

