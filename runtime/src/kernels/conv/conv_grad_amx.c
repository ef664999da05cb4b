/* conv_grad_amx.c — the implicit GEMM's convolution gradients (AMX tiles,
 * or VDPBF16PS blocks on the AVX512-BF16 engine): the weight
 * gradient as a product over the padded grid's positions (stride 1, or a
 * stride under 16 channels by phase planes), and the input gradient of a
 * strided few-channel convolution (an RGB stem) as one stride-1
 * convolution of grad_out. Shares the forward's padded grid (conv_amx.c). */
#include <immintrin.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "kernels/conv/conv_amx.h"

/* ------------------------------------------------------------ strided input gradient, few channels
 * gi[s*m + r][c] = sum over o and d of gy[m + d][o] * w[o][c][r + pad - s*d]
 * (per dim; taps inside the kernel only): every phase r of the stride reads
 * grad_out at shifts d, the phases' shifts together dmin .. dmax. That is
 * one stride-1 convolution of grad_out (its O channels in) with D = dmax -
 * dmin + 1 taps per dim and s0*s1*s2 * C outputs (phase, channel), whose
 * weight holds w's taps where a phase has them and zeros elsewhere, then
 * each phase's outputs copied to its positions of grad_input. For fewer
 * than 16 input channels (an RGB stem: 12 outputs at stride 2, 4 x 4 taps
 * for a 7x7 kernel), where a product per phase or col2im would run
 * products a few channels wide. A grad_out or weight with inf or NaN is
 * declined: a zero tap times inf would make a NaN no window has. */

/* Per dim: the shifts, the phase grid (ceil(in / s) positions), and the
 * convolution's padding P with output m of the grid at m + dmin + P. */
typedef struct dgrad_dim {
    int64_t dmin, D, M, P;
} dgrad_dim;

static int64_t floor_div64(int64_t a, int64_t b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }

static dgrad_dim dgrad_of(const vt_conv_geom *g, int d) {
    const int64_t s = g->stride[d], p = g->pad[d], K = g->k[d];
    dgrad_dim f;
    f.dmin = -floor_div64(K - 1 - p, s); /* ceil((p - K + 1) / s), at r = 0 */
    int64_t dmax = floor_div64(p + s - 1, s); /* at r = s - 1 */
    f.D = dmax - f.dmin + 1;
    f.M = (g->in[d] + s - 1) / s;
    f.P = -f.dmin;
    if (f.P < 0) f.P = 0;
    if (f.M + dmax - g->out[d] > f.P) f.P = f.M + dmax - g->out[d];
    return f;
}

/* The geometry of the convolution of grad_out. */
static vt_conv_geom dgrad_geom(const vt_conv_geom *g, const dgrad_dim *f) {
    vt_conv_geom h = *g;
    int64_t ph = 1;
    h.spatial = 3; /* its tensors are the 5-d views */
    for (int d = 0; d < 3; d++) {
        h.in[d] = g->out[d];
        h.k[d] = f[d].D;
        h.pad[d] = f[d].P;
        h.stride[d] = h.dil[d] = 1;
        h.out[d] = g->out[d] + 2 * f[d].P - f[d].D + 1;
        ph *= g->stride[d];
    }
    h.C = h.Cg = g->O;
    h.O = h.Og = ph * g->C;
    h.in_prod = h.in[0] * h.in[1] * h.in[2];
    h.k_prod = h.k[0] * h.k[1] * h.k[2];
    h.out_prod = h.out[0] * h.out[1] * h.out[2];
    return h;
}

int vt_conv_amx_dgrad_takes(const vt_conv_geom *g, vt_precision prec) {
    if (!vt_conv_amx_takes_shape(g, prec) || g->C >= 16) return 0;
    int strided = 0;
    for (int d = 0; d < 3; d++) {
        if (g->dil[d] != 1) return 0;
        strided |= g->stride[d] > 1;
    }
    if (!strided || g->stride[0] * g->stride[1] * g->stride[2] * g->C > 32) return 0;
    dgrad_dim f[3];
    for (int d = 0; d < 3; d++) f[d] = dgrad_of(g, d);
    vt_conv_geom h = dgrad_geom(g, f);
    return vt_conv_amx_takes(&h, prec);
}

vt_status vt_conv_amx_backward_input(const vt_conv_geom *g, const vt_tensor *grad_input, const vt_tensor *grad_out,
                                     const vt_tensor *weight, vt_precision prec, int *declined) {
    const char *fn = "vt_conv_backward_input";
    (void)prec;
    *declined = 0;
    dgrad_dim f[3];
    for (int d = 0; d < 3; d++) f[d] = dgrad_of(g, d);
    const vt_conv_geom h = dgrad_geom(g, f);
    const int64_t O2 = h.O, C = g->C, O = g->O;
    const size_t es = vt_dtype_size(g->dtype);
    vt_tensor w5 = vt_conv_view5(weight, g->spatial), x5 = vt_conv_view5(grad_input, g->spatial),
              y5 = vt_conv_view5(grad_out, g->spatial);
    vt_status s = VT_OK;
    char *wb = vt_conv_scratch(O2 * O * h.k_prod, g->dtype, fn, "phase weight", &s);
    char *tb = s == VT_OK ? vt_conv_scratch(h.N * h.out_prod * O2, g->dtype, fn, "phase outputs", &s) : NULL;
    if (s != VT_OK) goto done;
    /* the weight [(phase, c)][o][u0][u1][u2], o innermost */
    int64_t wsz[5] = {O2, O, h.k[0], h.k[1], h.k[2]};
    int64_t wst[5] = {h.k_prod * O, 1, h.k[1] * h.k[2] * O, h.k[2] * O, O};
    memset(wb, 0, (size_t)(O2 * O * h.k_prod) * es);
    for (int64_t q = 0; q < O2 / C; q++) {
        const int64_t r[3] = {q / (g->stride[1] * g->stride[2]), q / g->stride[2] % g->stride[1], q % g->stride[2]};
        for (int64_t u = 0; u < h.k_prod; u++) {
            const int64_t uu[3] = {u / (h.k[1] * h.k[2]), u / h.k[2] % h.k[1], u % h.k[2]};
            int64_t k[3], inside = 1;
            for (int d = 0; d < 3; d++) {
                k[d] = r[d] + g->pad[d] - g->stride[d] * (uu[d] + f[d].dmin);
                inside &= k[d] >= 0 && k[d] < g->k[d];
            }
            if (!inside) continue;
            for (int64_t c = 0; c < C; c++)
                for (int64_t o = 0; o < O; o++) {
                    const char *src = (const char *)w5.data +
                                      (w5.offset + o * w5.strides[0] + c * w5.strides[1] + k[0] * w5.strides[2] +
                                       k[1] * w5.strides[3] + k[2] * w5.strides[4]) * (int64_t)es;
                    double v;
                    vt_convert(g->dtype, src, 1, VT_F64, &v, 1, 1);
                    if (!isfinite(v)) { /* a zero tap of another phase would meet it as 0 * inf */
                        *declined = 1;
                        goto done;
                    }
                    memcpy(wb + ((q * C + c) * wst[0] + o + u * O) * (int64_t)es, src, es);
                }
        }
    }
    vt_tensor wt = vt_conv_tensor(wb, g->dtype, 5, wsz, wst, 0);
    /* the outputs [N][m0][m1][m2][(phase, c)], channels-last: written as the tiles give them */
    int64_t tsz[5] = {h.N, O2, h.out[0], h.out[1], h.out[2]};
    int64_t tst[5] = {h.out_prod * O2, 1, h.out[1] * h.out[2] * O2, h.out[2] * O2, O2};
    vt_tensor tt = vt_conv_tensor(tb, g->dtype, 5, tsz, tst, 0);
    s = vt_conv_amx_forward_checked(&h, &tt, &y5, &wt, NULL, 1, declined);
    for (int64_t q = 0; s == VT_OK && !*declined && q < O2 / C; q++) {
        const int64_t r[3] = {q / (g->stride[1] * g->stride[2]), q / g->stride[2] % g->stride[1], q % g->stride[2]};
        vt_tensor src = tt, dst = x5;
        int empty = 0;
        src.sizes[1] = C, src.offset += q * C;
        for (int d = 0; d < 3; d++) {
            const int64_t n = r[d] < g->in[d] ? (g->in[d] - r[d] + g->stride[d] - 1) / g->stride[d] : 0;
            empty |= n == 0;
            src.offset += (f[d].dmin + f[d].P) * tst[2 + d], src.sizes[2 + d] = n;
            dst.offset += r[d] * x5.strides[2 + d], dst.sizes[2 + d] = n, dst.strides[2 + d] *= g->stride[d];
        }
        if (!empty) s = vt_copy(&dst, &src);
    }
done:
    free(tb);
    free(wb);
    return s;
}

/* ------------------------------------------------------------ weight gradient
 * dW[o][t][c] = sum over images and positions of gy[o][pos] x[pos + toff[t]][c],
 * for stride 1: a product with K = the padded grid positions of every image
 * (Vp per image, gy 0 at the grid's padding rows and columns), M = outputs,
 * N = (tap, channel). A tiles are gy^T's parts, packed as whole tiles
 * [output panel][32 positions] (each 1 KiB: no page per row); B tiles are
 * pairs of consecutive positions of the padded input, 32 channels a line
 * pair (VNNI), read straight from two copies: pairs starting at even
 * positions and pairs starting at odd ones, so every tap's shift is a tile
 * load. An input with inf or NaN is declined: K runs over the padding
 * positions too, where 0 * inf would make a NaN no window reads. K goes
 * in blocks whose gy^T and input rows stay in L2 while every unit (2
 * output panels x 1 tap x 32 channels) of a thread adds the block to its
 * 4 C tiles; sums go on in f32 across blocks and chunks and are rounded
 * once into grad_weight. */

typedef struct wg_job {
    amx_job f;          /* geometry, the padded input and its fill */
    int64_t Vp;         /* K positions per image (V rounded up to 32) */
    int64_t nkc;        /* K chunks of the chunk's images */
    int64_t Kp;         /* K positions gy^T has room for: nb * Vp */
    const vt_tensor *y5;
    uint32_t *xe, *xo;  /* pairs (2i, 2i+1) and (2i+1, 2i+2) of the padded input: [Cp/32][pair][32] */
    int64_t npairs;
    uint16_t *gt;       /* [Op/16][Kp/32][16][32] parts of gy^T */
    float *acc;         /* [Op][taps][Cp] f32 sums */
    int first;          /* the first chunk: sums start at +0 */
} wg_job;

/* Pairs [begin, end) of both pair copies, 32 channels at a time. */
static void pair_rows(void *ctx, int64_t begin, int64_t end) {
    wg_job *w = ctx;
    int64_t Cp = w->f.Cp;
    const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6, 37,
                                        5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi = _mm512_set_epi16(63, 31, 62, 30, 61, 29, 60, 28, 59, 27, 58, 26, 57, 25, 56, 24, 55, 23, 54, 22,
                                        53, 21, 52, 20, 51, 19, 50, 18, 49, 17, 48, 16);
    for (int64_t i = begin; i < end; i++)
        for (int h = 0; h < 2; h++) {
            const uint16_t *p0 = w->f.xbuf + (2 * i + h) * Cp, *p1 = p0 + Cp;
            uint32_t *dst = (h ? w->xo : w->xe) + i * 32;
            for (int64_t c = 0; c < Cp; c += 32) {
                __m512i a = _mm512_loadu_si512(p0 + c), b = _mm512_loadu_si512(p1 + c);
                uint32_t *d = dst + (c / 32) * w->npairs * 32; /* 32 channels: one 128-byte line pair */
                _mm512_storeu_si512(d, _mm512_permutex2var_epi16(a, lo, b));
                _mm512_storeu_si512(d + 16, _mm512_permutex2var_epi16(a, hi, b));
            }
        }
}

/* Rows (image, o0, o1) [begin, end) of gy into gy^T (zeros elsewhere were
 * written before): a row of positions at a time when they are contiguous,
 * else each position's outputs, split, then scattered. */
static void gy_rows(void *ctx, int64_t begin, int64_t end) {
    wg_job *w = ctx;
    const amx_job *j = &w->f;
    const vt_conv_geom *g = j->g;
    const vt_tensor *y = w->y5;
    int64_t n = g->O > g->out[2] ? g->O : g->out[2];
    float *tmp = malloc((size_t)n * sizeof(float) + 64);
    uint16_t *parts = malloc((size_t)(g->O * g->out[2] + 16) * 2); /* a row of positions' outputs */
    if (!tmp || !parts) {
        free(tmp), free(parts);
        atomic_store(&w->f.oom, 1);
        return;
    }
    for (int64_t r = begin; r < end; r++) {
        int64_t b = r / (g->out[0] * g->out[1]), o0 = r / g->out[1] % g->out[0], o1 = r % g->out[1];
        int64_t k0 = b * w->Vp + (o0 * j->E[1] + o1) * j->E[2];
        int64_t src0 = y->offset + (j->n0 + b) * y->strides[0] + o0 * y->strides[2] + o1 * y->strides[3];
        if (y->strides[4] == 1 || g->out[2] == 1) {
            /* a bf16 line is its own parts, masked straight into each run;
             * others split into parts first (the split stores 16 at a time) */
            const int direct = y->dtype == VT_BF16;
            for (int64_t o = 0; o < g->O; o++) {
                const int64_t at = src0 + o * y->strides[1];
                if (!direct) vt_conv_amx_parts_line(y, at, 1, g->out[2], g->out[2], tmp, parts);
                uint16_t *row = w->gt + (o / 16) * w->Kp * 16 + (o % 16) * 32;
                for (int64_t i = 0, k = k0; i < g->out[2];) { /* runs up to the next 32-position tile */
                    int64_t run = 32 - k % 32 < g->out[2] - i ? 32 - k % 32 : g->out[2] - i;
                    uint16_t *to = row + (k / 32) * 512 + k % 32;
                    if (direct) vt_conv_amx_bf16_parts((const uint16_t *)y->data + at + i, run, to);
                    else memcpy(to, parts + i, (size_t)run * 2);
                    i += run, k += run;
                }
            }
            continue;
        }
        /* outputs innermost: each position's parts, then 16 x 16 transposes
         * (16 outputs x up to 16 positions within one 32-position tile) */
        for (int64_t o2 = 0; o2 < g->out[2]; o2++)
            vt_conv_amx_channel_parts(y, src0 + o2 * y->strides[4], g->O, g->O, tmp, parts + o2 * g->O);
        for (int64_t i = 0, run; i < g->out[2]; i += run) {
            int64_t k = k0 + i;
            run = 32 - k % 32;
            if (run > 16) run = 16;
            if (run > g->out[2] - i) run = g->out[2] - i;
            for (int64_t ob = 0; ob < g->O; ob += 16)
                vt_transpose16_avx512((const char *)(parts + i * g->O + ob), g->O * 2,
                                      (char *)(w->gt + (ob / 16) * w->Kp * 16 + (k / 32) * 512 + k % 32), 64, 2,
                                      g->O - ob < 16 ? (int)(g->O - ob) : 16, (int)run);
        }
    }
    free(tmp), free(parts);
}

/* Units [begin, end): unit u = (output panel pair, tap, 32 channels), over
 * K blocks of KBLOCK chunks. */
#define KBLOCK 64
static void wg_units(void *ctx, int64_t begin, int64_t end) {
    wg_job *w = ctx;
    const amx_job *j = &w->f;
    const int64_t Cp = j->Cp, taps = j->taps;
    const size_t ldc = (size_t)(taps * Cp) * sizeof(float);
    const int dp = vt_conv_igemm_dp();
    const uint32_t *xs[KBLOCK];
    if (!dp) vt_amx_load_config(&vt_amx_tiles16);
    for (int64_t kb = 0; kb < w->nkc; kb += KBLOCK) {
        int64_t ke = kb + KBLOCK < w->nkc ? kb + KBLOCK : w->nkc;
        for (int64_t u = begin; u < end; u++) {
            int64_t nqa = j->Op / 32, cc = u / (taps * nqa), t = u / nqa % taps, qa = u % nqa;
            float *c0 = w->acc + ((2 * qa * 16) * taps + t) * Cp + cc * 32, *c1 = c0 + 16 * taps * Cp;
            const uint16_t *a0 = w->gt + 2 * qa * 16 * w->Kp, *a1 = a0 + 16 * w->Kp; /* panels 2qa, 2qa + 1 */
            for (int64_t k = kb; k < ke; k++) {
                int64_t b = k * 32 / w->Vp, v0 = k * 32 % w->Vp, pos = b * j->img + v0 + j->toff[t];
                xs[k - kb] = (pos & 1 ? w->xo + (pos - 1) / 2 * 32 : w->xe + pos / 2 * 32) + cc * w->npairs * 32;
            }
            if (dp) {
                vt_conv_dp_wgrad_unit(a0 + kb * 512, a1 + kb * 512, xs, ke - kb, c0, c1, taps * Cp,
                                      !(w->first && kb == 0));
                continue;
            }
            vt_amx_c_start(c0, c1, ldc, !(w->first && kb == 0));
            for (int64_t k = kb; k < ke; k++)
                vt_amx_step(a0 + k * 512, 64, a1 + k * 512, 64, xs[k - kb], xs[k - kb] + 16, 128);
            vt_amx_c_store(c0, c1, ldc);
        }
    }
    if (!dp) _tile_release();
}

/* The product of g's strides: its phases. */
static int64_t stride_product(const vt_conv_geom *g) { return g->stride[0] * g->stride[1] * g->stride[2]; }

/* The f32 sums (5-d, channels innermost) into grad_weight (5-d view),
 * rounded once. A grad_weight of another dtype whose channels are not
 * innermost (NCHW) takes two copies: the f32 transpose into its logical
 * order (whole tiles in registers), then the rounding along runs; one
 * copy would convert element by element across the transpose. */
static vt_status store_sums(const vt_tensor *gw5, const vt_tensor *sums, const char *fn) {
    if (gw5->dtype == VT_F32 || gw5->strides[1] == 1 || gw5->sizes[1] == 1) return vt_copy(gw5, sums);
    vt_status s = VT_OK;
    float *buf = vt_conv_scratch(vt_tensor_numel(gw5), VT_F32, fn, "weight gradient", &s);
    if (!buf) return s;
    int64_t st[5];
    vt_conv_contiguous(5, gw5->sizes, st);
    vt_tensor mid = vt_conv_tensor(buf, VT_F32, 5, gw5->sizes, st, 0);
    s = vt_copy(&mid, sums);
    if (s == VT_OK) s = vt_copy(gw5, &mid);
    free(buf);
    return s;
}

int vt_conv_amx_wgrad_takes(const vt_conv_geom *g, vt_precision prec) {
    if (!vt_conv_amx_takes_shape(g, prec)) return 0;
    int64_t ph = stride_product(g);
    if (ph == 1) return g->C >= 16;
    /* strided, by phase planes: where the drivers' im2col rows are a few
     * channels wide (an RGB stem, 12 plane channels at stride 2: 1.7 ms
     * against 2.4 for the 7x7/2 stem's bf16 channels-last gradient); from
     * 16 channels the planes' extra taps (16 for 9 at 3x3/2) and copies
     * cost more than the drivers' product (1.8 ms against 1.5 at 128) */
    for (int d = 0; d < 3; d++)
        if (g->dil[d] != 1) return 0;
    return g->C < 16 && ph * g->C >= 12;
}

/* The stride-1 weight gradient (every dim). */
static vt_status wgrad_unit_stride(const vt_conv_geom *g, const vt_tensor *grad_weight, const vt_tensor *grad_out,
                                   const vt_tensor *input, int *declined) {
    const char *fn = "vt_conv_backward_weight";
    vt_tensor x5 = vt_conv_view5(input, g->spatial), y5 = vt_conv_view5(grad_out, g->spatial),
              w5 = vt_conv_view5(grad_weight, g->spatial);
    wg_job w;
    vt_conv_ws ws = {0};
    memset(&w, 0, sizeof w);
    amx_job *j = &w.f;
    j->x5 = &x5, w.y5 = &y5;
    vt_status s = vt_conv_amx_grid_setup(j, g, 0, fn);
    j->check = 1;
    *declined = 0;
    int64_t V = ((g->out[0] - 1) * j->E[1] + g->out[1] - 1) * j->E[2] + g->out[2];
    w.Vp = round_up(V, 32);
    /* B tiles read 32 positions from v + toff: up to 31 past the last image */
    int64_t margin = 64 + j->E[2];
    int64_t nb = vt_conv_amx_chunk_bytes() / (3 * j->img * j->Cp * 2);
    nb = nb < 1 ? 1 : nb > g->N ? g->N : nb;
    int64_t npos = nb * j->img + margin;
    w.npairs = (npos - 2) / 2;
    w.Kp = nb * w.Vp;
    uint16_t *xe = NULL, *xo = NULL, *acc = NULL;
    if (s == VT_OK) {
        const int64_t n[5] = {npos * j->Cp, 2 * w.npairs * j->Cp, 2 * w.npairs * j->Cp, j->Op * w.Kp,
                              2 * j->Op * j->taps * j->Cp};
        s = vt_conv_amx_scratch(&ws, 5, n, (uint16_t **const[]){&j->xbuf, &xe, &xo, &w.gt, &acc}, fn,
                                "padded and paired input, transposed grad_output and weight sums");
        w.xe = (uint32_t *)(void *)xe, w.xo = (uint32_t *)(void *)xo, w.acc = (float *)(void *)acc;
    }
    if (s != VT_OK) goto done;
    memset(j->xbuf + nb * j->img * j->Cp, 0, (size_t)(margin * j->Cp) * 2);
    w.first = 1;
    for (int64_t n0 = 0; n0 < g->N && !atomic_load(&j->oom); n0 += nb) {
        j->n0 = n0, j->nbc = g->N - n0 < nb ? g->N - n0 : nb;
        w.nkc = j->nbc * w.Vp / 32;
        vt_parallel_for(j->nbc * j->E[0] * j->E[1], 8, vt_conv_amx_fill_rows, j);
        if (atomic_load(&j->nonfinite)) {
            /* K runs over the grid's padding positions too (gy 0 there):
             * an inf input would add 0 * inf = NaN where no window reads it */
            *declined = 1;
            goto done;
        }
        vt_parallel_for(w.npairs, 64, pair_rows, &w);
        memset(w.gt, 0, (size_t)(j->Op * w.Kp) * 2);
        vt_parallel_for(j->nbc * g->out[0] * g->out[1], 4, gy_rows, &w);
        if (atomic_load(&j->oom)) break;
        vt_parallel_for(j->Op / 32 * j->taps * j->ncc, 1, wg_units, &w);
        w.first = 0;
    }
    if (atomic_load(&j->oom)) {
        s = vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: out of host memory for scratch", fn);
    } else { /* [O][tap][C] of the sums into grad_weight's layout, rounded once */
        int64_t st[5] = {j->taps * j->Cp, 1, g->k[1] * g->k[2] * j->Cp, g->k[2] * j->Cp, j->Cp};
        vt_tensor all = vt_conv_tensor(w.acc, VT_F32, 5, w5.sizes, st, 0);
        s = store_sums(&w5, &all, fn);
    }
done:
    vt_conv_amx_scratch_release(&ws);
    free(j->toff);
    return s;
}

/* ------------------------------------------------------------ strided weight gradient
 * With stride s and no dilation, tap k = s*a + r of output o reads padded
 * input position s*(o + a) + r: phase r of the padded grid at o + a. With
 * the input laid out as phase planes (space to depth: channel (r0, r1, r2,
 * c) of s0*s1*s2 * C, position i holding padded position s*i + r, zeros
 * past the grid), the weight gradient is the stride-1 one over the planes
 * with ceil(k/s) taps, whose taps with s*a + r >= k (no such weight) are
 * dropped. The planes cost one copy of the input; the product does
 * (s * ceil(k/s))^2 / k^2 of the taps' work in 2-d (16/9 for 3x3/2, 64/49
 * for the 7x7/2 stem). The sums are f32 through the copies and rounded
 * once into grad_weight. */
static vt_status wgrad_strided(const vt_conv_geom *g, const vt_tensor *grad_weight, const vt_tensor *grad_out,
                               const vt_tensor *input, int *declined) {
    const char *fn = "vt_conv_backward_weight";
    vt_conv_geom h = *g;
    for (int d = 0; d < 3; d++) {
        h.k[d] = (g->k[d] + g->stride[d] - 1) / g->stride[d];
        h.in[d] = g->out[d] + h.k[d] - 1;
        h.stride[d] = 1, h.pad[d] = 0, h.dil[d] = 1;
    }
    const int64_t ph = stride_product(g);
    h.spatial = 3;
    h.C = h.Cg = ph * g->C;
    h.k_prod = h.k[0] * h.k[1] * h.k[2];
    h.in_prod = h.in[0] * h.in[1] * h.in[2];
    vt_status s = VT_OK;
    void *xp = vt_conv_scratch(h.N * h.C * h.in_prod, g->dtype, fn, "phase planes", &s);
    float *dw = s == VT_OK ? vt_conv_scratch(h.O * h.C * h.k_prod, VT_F32, fn, "phase weight gradient", &s) : NULL;
    float *full = s == VT_OK ? vt_conv_scratch(g->O * g->C * g->k_prod, VT_F32, fn, "weight gradient", &s) : NULL;
    if (s != VT_OK) goto done;
    memset(xp, 0, (size_t)(h.N * h.C * h.in_prod) * vt_dtype_size(g->dtype));
    /* the planes in the input's layout: channels-last [N][i0][i1][i2][r0][r1][r2][C]
     * (each position's channels one run, as the input's), else
     * [N][r0][r1][r2][C][i0][i1][i2] (rows of positions, as the input's);
     * their gradient [O][a0][a1][a2][r0][r1][r2][C] and grad_weight's f32
     * sums [O][k0][k1][k2][C] channels innermost (each phase's taps a row of
     * C at a time) */
    vt_tensor x5 = vt_conv_view5(input, g->spatial), y5 = vt_conv_view5(grad_out, g->spatial);
    int64_t xsz[5] = {h.N, h.C, h.in[0], h.in[1], h.in[2]}, xst[5];
    if (x5.strides[1] == 1) {
        int64_t st[5] = {h.in_prod * h.C, 1, h.in[1] * h.in[2] * h.C, h.in[2] * h.C, h.C};
        memcpy(xst, st, sizeof st);
    } else {
        vt_conv_contiguous(5, xsz, xst);
    }
    vt_tensor xt = vt_conv_tensor(xp, g->dtype, 5, xsz, xst, 0);
    int64_t wsz[5] = {h.O, h.C, h.k[0], h.k[1], h.k[2]};
    int64_t wst[5] = {h.k_prod * h.C, 1, h.k[1] * h.k[2] * h.C, h.k[2] * h.C, h.C};
    vt_tensor wt = vt_conv_tensor(dw, VT_F32, 5, wsz, wst, 0);
    int64_t fsz[5] = {g->O, g->C, g->k[0], g->k[1], g->k[2]};
    int64_t fst[5] = {g->k_prod * g->C, 1, g->k[1] * g->k[2] * g->C, g->k[2] * g->C, g->C};
    vt_tensor ft = vt_conv_tensor(full, VT_F32, 5, fsz, fst, 0);
    for (int pass = 0; pass < 2 && s == VT_OK; pass++) {
        for (int64_t q = 0; q < ph && s == VT_OK; q++) {
            const int64_t r[3] = {q / (g->stride[1] * g->stride[2]), q / g->stride[2] % g->stride[1],
                                  q % g->stride[2]};
            vt_tensor dst, src;
            int empty = 0;
            if (pass == 0) { /* the input's phase-r positions into plane channels q*C .. */
                dst = xt, src = x5;
                dst.sizes[1] = g->C, dst.offset += q * g->C * xst[1];
                for (int d = 0; d < 3; d++) {
                    const int64_t st = g->stride[d], first = g->pad[d] - r[d]; /* s*i >= pad - r */
                    int64_t lo = first > 0 ? (first + st - 1) / st : 0;
                    int64_t hi = g->in[d] - 1 + g->pad[d] - r[d] < 0 ? 0 : (g->in[d] - 1 + g->pad[d] - r[d]) / st + 1;
                    if (hi > h.in[d]) hi = h.in[d];
                    empty |= hi <= lo;
                    dst.offset += lo * xst[2 + d], dst.sizes[2 + d] = hi - lo;
                    src.offset += (st * lo + r[d] - g->pad[d]) * x5.strides[2 + d];
                    src.sizes[2 + d] = hi - lo, src.strides[2 + d] = st * x5.strides[2 + d];
                }
            } else { /* the real taps k = s*a + r of the planes' gradient */
                dst = ft, src = wt;
                src.sizes[1] = g->C, src.offset += q * g->C;
                for (int d = 0; d < 3; d++) {
                    const int64_t st = g->stride[d], A = r[d] < g->k[d] ? (g->k[d] - r[d] + st - 1) / st : 0;
                    empty |= A == 0;
                    src.sizes[2 + d] = A;
                    dst.offset += r[d] * fst[2 + d], dst.sizes[2 + d] = A, dst.strides[2 + d] = st * fst[2 + d];
                }
            }
            if (!empty) s = vt_copy(&dst, &src);
        }
        if (pass == 0 && s == VT_OK) {
            s = wgrad_unit_stride(&h, &wt, &y5, &xt, declined);
            if (*declined) break;
        }
    }
    if (s == VT_OK && !*declined) { /* rounded once into grad_weight's dtype and layout */
        vt_tensor gw5 = vt_conv_view5(grad_weight, g->spatial);
        s = store_sums(&gw5, &ft, fn);
    }
done:
    free(full);
    free(dw);
    free(xp);
    return s;
}

vt_status vt_conv_amx_backward_weight(const vt_conv_geom *g, const vt_tensor *grad_weight, const vt_tensor *grad_out,
                                      const vt_tensor *input, int *declined) {
    *declined = 0;
    return stride_product(g) == 1 ? wgrad_unit_stride(g, grad_weight, grad_out, input, declined)
                                  : wgrad_strided(g, grad_weight, grad_out, input, declined);
}
