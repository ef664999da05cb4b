/* conv_dw.c — depthwise convolution (one input channel per group, one
 * output channel per input channel): no im2col and no MXU call, since each
 * output is a short dot product over the kernel window. A task is one
 * (image, block of VT_DW_LANES channels): it lays its input window block
 * out as [padded positions][lanes], splits it into the bf16 parts of the
 * caller's precision, runs the compute loops of conv_dw_body.h and writes
 * the result back in the tensor's own layout (NCHW, channels-last or any
 * strides). */
#include <stdatomic.h>
#include <stdlib.h>

#define DW_SFX portable
#include "kernels/conv/conv_dw_body.h"

/* Scratch of one task above this is not worth it: the im2col path runs. */
#define DW_TASK_BYTES ((int64_t)64 << 20)
/* The forward and the weight gradient go in bands of output rows whose
 * input window block is about this many bytes, so a task's passes (fill,
 * split, compute, store) stay in L2: whole 112x112 planes did not, and
 * each pass went to L3. */
#define DW_BAND_BYTES ((int64_t)96 << 10)
/* The channels-last forward's bands: their input rows, every channel. Its
 * stage holds one lane block at a time, so its bands can be longer (fewer
 * rows staged twice where bands meet): at 96 KB a stride-2 forward of 144
 * channels went one output row a band, each staging three input rows for
 * two new ones; 192 KB measured 5-10% faster on Zen 5, 320 KB slower. */
#define DW_CL_BAND_BYTES ((int64_t)192 << 10)

static _Atomic(const vt_dw_kernels *) dw_active;

unsigned vt_conv_dw_select_isa(unsigned mask) {
    unsigned isa = vt_isa_widest(mask);
    const vt_dw_kernels *k = VT_ISA_TABLE(isa, &vt_dw_kernels_portable, &vt_dw_kernels_avx2, &vt_dw_kernels_avx512);
#if VT_X86
    if (isa == VT_ISA_AVX512 && (mask & VT_ISA_AVX512BF16)) k = &vt_dw_kernels_avx512bf16, isa |= VT_ISA_AVX512BF16;
#endif
    atomic_store(&dw_active, k);
    return isa;
}

static const vt_dw_kernels *dw_kernels(void) {
    const vt_dw_kernels *k = atomic_load(&dw_active);
    if (!k) {
        vt_kernels_ready();
        k = atomic_load(&dw_active);
    }
    return k;
}

/* Window extent of dim i: the padded input positions the windows read. */
static int64_t extent(const vt_conv_geom *g, int i) {
    return (g->out[i] - 1) * g->stride[i] + (g->k[i] - 1) * g->dil[i] + 1;
}

/* d's extents (the padded window block), outputs, strides and window. */
static void geom_dims(const vt_conv_geom *g, vt_dw_geom *d) {
    for (int i = 0; i < 3; i++) {
        d->E[i] = extent(g, i), d->out[i] = g->out[i], d->stride[i] = g->stride[i];
        d->k[i] = g->k[i], d->dil[i] = g->dil[i];
    }
}

static int64_t block_floats(const vt_conv_geom *g) {
    return extent(g, 0) * extent(g, 1) * extent(g, 2) * VT_DW_LANES;
}

int vt_conv_dw_takes(const vt_conv_geom *g) {
    if (g->dtype == VT_F64 || g->Cg != 1 || g->Og != 1 || g->G != g->C || g->k_prod > 4096) return 0;
    int64_t x = block_floats(g), z = g->out_prod * VT_DW_LANES;
    /* input slots and raw block, an output / gradient block and its slots */
    return (4 * x + 4 * z) * 4 <= DW_TASK_BYTES;
}

/* Each tap's offset from its window's first position in a block of extent
 * E, in units of `unit` floats (a lane vector, or one float of a plane). */
static void tap_offsets(const vt_conv_geom *g, const int64_t E[3], int64_t unit, int64_t *toff) {
    int64_t t = 0;
    for (int64_t k0 = 0; k0 < g->k[0]; k0++)
        for (int64_t k1 = 0; k1 < g->k[1]; k1++)
            for (int64_t k2 = 0; k2 < g->k[2]; k2++, t++)
                toff[t] = ((k0 * g->dil[0] * E[1] + k1 * g->dil[1]) * E[2] + k2 * g->dil[2]) * unit;
}

/* ------------------------------------------------------------ moving blocks */

static inline float load_elem(vt_dtype dt, const char *p) {
    switch (dt) {
    case VT_F32: { float f; memcpy(&f, p, 4); return f; }
    case VT_BF16: { uint16_t h; memcpy(&h, p, 2); return vt_bf16_to_f32(h); }
    default: { uint16_t h; memcpy(&h, p, 2); return vt_f16_to_f32(h); }
    }
}

/* Lanes [0, nl) of blk[e0][e1][e2] (extent E, zero elsewhere) = the
 * tensor t5 [N, C, s0, s1, s2] at image n, channels c0.., position
 * e - pad (dim 1: e + row0 - pad, the block being a band from padded row
 * row0); positions outside t5 stay 0. */
static void fill_block(const vt_dw_kernels *k, const vt_tensor *t5, int64_t n, int64_t c0, int nl, const int64_t E[3],
                       const int64_t pad[3], int64_t row0, float *blk) {
    memset(blk, 0, (size_t)(E[0] * E[1] * E[2] * VT_DW_LANES) * sizeof(float));
    size_t es = vt_dtype_size(t5->dtype);
    const char *base = (const char *)t5->data + (t5->offset + n * t5->strides[0] + c0 * t5->strides[1]) * (int64_t)es;
    int64_t cs = t5->strides[1] * (int64_t)es, s2 = t5->strides[4] * (int64_t)es;
    int64_t lo2 = pad[2], hi2 = t5->sizes[4] + pad[2] < E[2] ? t5->sizes[4] + pad[2] : E[2];
    int64_t i1_lo = row0 > pad[1] ? row0 - pad[1] : 0;
    for (int64_t i0 = 0; i0 < t5->sizes[2] && i0 + pad[0] < E[0]; i0++)
        for (int64_t i1 = i1_lo; i1 < t5->sizes[3] && i1 + pad[1] - row0 < E[1]; i1++) {
            const char *row = base + (i0 * t5->strides[2] + i1 * t5->strides[3]) * (int64_t)es;
            float *dst = blk + ((i0 + pad[0]) * E[1] + i1 + pad[1] - row0) * E[2] * VT_DW_LANES;
            if (t5->strides[1] == 1 && t5->dtype == VT_F32) { /* channels innermost: one run per position */
                for (int64_t e2 = lo2; e2 < hi2; e2++)
                    memcpy(dst + e2 * VT_DW_LANES, row + (e2 - lo2) * s2, (size_t)nl * sizeof(float));
                continue;
            }
            if (t5->strides[1] == 1 && t5->dtype == VT_BF16) {
                for (int64_t e2 = lo2; e2 < hi2; e2++) {
                    const uint16_t *h = (const uint16_t *)(row + (e2 - lo2) * s2);
                    float *d = dst + e2 * VT_DW_LANES;
                    for (int l = 0; l < nl; l++) d[l] = vt_bf16_to_f32(h[l]);
                }
                continue;
            }
            int64_t done = 0; /* positions moved 16 x 16 in registers (NCHW rows) */
            if (k->lanes_in && nl == VT_DW_LANES && s2 == (int64_t)es &&
                (t5->dtype == VT_F32 || t5->dtype == VT_BF16))
                for (; done + 16 <= hi2 - lo2; done += 16)
                    k->lanes_in(row + done * s2, t5->dtype == VT_BF16, cs, dst + (lo2 + done) * VT_DW_LANES);
            for (int l = 0; l < nl; l++) {
                const char *src = row + l * cs + done * s2;
                float *d = dst + (lo2 + done) * VT_DW_LANES + l;
                int64_t n2 = hi2 - lo2 - done;
                if (t5->dtype == VT_F32 && s2 == 4) {
                    const float *f = (const float *)src;
                    for (int64_t i = 0; i < n2; i++) d[i * VT_DW_LANES] = f[i];
                } else if (t5->dtype == VT_BF16 && s2 == 2) {
                    const uint16_t *h = (const uint16_t *)src;
                    for (int64_t i = 0; i < n2; i++) d[i * VT_DW_LANES] = vt_bf16_to_f32(h[i]);
                } else {
                    for (int64_t i = 0; i < n2; i++) d[i * VT_DW_LANES] = load_elem(t5->dtype, src + i * s2);
                }
            }
        }
}

/* fill_block then the split into the precision's slots, in one pass when
 * the lanes are 16 contiguous f32 or bf16 channels (fill_block has the
 * rest: a partial block, strided channels, F16). */
static void fill_split(const vt_dw_kernels *k, const vt_tensor *t5, int64_t n, int64_t c0, int nl,
                       const int64_t E[3], const int64_t pad[3], int64_t row0, int nlow, int nslots,
                       float *const slot[3]) {
    int64_t X = E[0] * E[1] * E[2] * VT_DW_LANES;
    if (nl != VT_DW_LANES || t5->strides[1] != 1 || (t5->dtype != VT_F32 && t5->dtype != VT_BF16)) {
        fill_block(k, t5, n, c0, nl, E, pad, row0, slot[0]);
        k->split(slot[0], X, nlow, slot);
        return;
    }
    size_t es = vt_dtype_size(t5->dtype);
    const char *base = (const char *)t5->data + (t5->offset + n * t5->strides[0] + c0) * (int64_t)es;
    int64_t lo2 = pad[2], hi2 = t5->sizes[4] + pad[2] < E[2] ? t5->sizes[4] + pad[2] : E[2];
    int64_t i1_lo = row0 > pad[1] ? row0 - pad[1] : 0;
    /* Zero only what the loads below leave: the rows they do not reach and
     * the padding columns of those they do (clearing whole blocks first
     * took a sixth of a stride-2 weight gradient's time). */
    const int64_t e0_lo = pad[0], e0_hi = pad[0] + (t5->sizes[2] < E[0] - pad[0] ? t5->sizes[2] : E[0] - pad[0]);
    const int64_t e1_lo = i1_lo + pad[1] - row0,
                  e1_hi = (t5->sizes[3] < E[1] - pad[1] + row0 ? t5->sizes[3] : E[1] - pad[1] + row0) + pad[1] - row0;
    const size_t lane_bytes = VT_DW_LANES * sizeof(float);
    for (int s = 0; s < nslots; s++)
        for (int64_t e0 = 0; e0 < E[0]; e0++)
            for (int64_t e1 = 0; e1 < E[1]; e1++) {
                float *row = slot[s] + (e0 * E[1] + e1) * E[2] * VT_DW_LANES;
                if (e0 < e0_lo || e0 >= e0_hi || e1 < e1_lo || e1 >= e1_hi || hi2 <= lo2) {
                    memset(row, 0, (size_t)E[2] * lane_bytes);
                    continue;
                }
                memset(row, 0, (size_t)lo2 * lane_bytes);
                memset(row + hi2 * VT_DW_LANES, 0, (size_t)(E[2] - hi2) * lane_bytes);
            }
    for (int64_t i0 = 0; i0 < t5->sizes[2] && i0 + pad[0] < E[0]; i0++)
        for (int64_t i1 = i1_lo; i1 < t5->sizes[3] && i1 + pad[1] - row0 < E[1]; i1++) {
            const char *row = base + (i0 * t5->strides[2] + i1 * t5->strides[3]) * (int64_t)es;
            int64_t dst = ((i0 + pad[0]) * E[1] + i1 + pad[1] - row0) * E[2] + lo2;
            if (hi2 > lo2) k->load_split(row, t5->dtype == VT_BF16, t5->strides[4], hi2 - lo2, nlow, slot, dst);
        }
}

static inline void store_elem(vt_dtype dt, char *p, float f, const double *bias) {
    if (bias) {
        double v = (double)f + *bias;
        switch (dt) {
        case VT_F32: f = (float)v; memcpy(p, &f, 4); return;
        case VT_BF16: { uint16_t h = vt_mxu_f64_to_bf16(v); memcpy(p, &h, 2); return; }
        default: { uint16_t h = vt_mxu_f64_to_f16(v); memcpy(p, &h, 2); return; }
        }
    }
    switch (dt) {
    case VT_F32: memcpy(p, &f, 4); return;
    case VT_BF16: { uint16_t h = vt_f32_to_bf16(f); memcpy(p, &h, 2); return; }
    default: { uint16_t h = vt_f32_to_f16(f); memcpy(p, &h, 2); return; }
    }
}

/* t5 at image n, channels c0 .. c0+nl, every position i = the block at
 * i + pad (extent E; positions past it, which no window reads, get 0),
 * plus bias[l] when given, rounded once to t5's dtype. */
static void store_block(const vt_dw_kernels *k, const vt_tensor *t5, int64_t n, int64_t c0, int nl,
                        const int64_t E[3], const int64_t pad[3], const float *blk, const double *bias) {
    size_t es = vt_dtype_size(t5->dtype);
    char *base = (char *)t5->data + (t5->offset + n * t5->strides[0] + c0 * t5->strides[1]) * (int64_t)es;
    int64_t cs = t5->strides[1] * (int64_t)es, s2 = t5->strides[4] * (int64_t)es;
    const float zero[VT_DW_LANES] = {0};
    for (int64_t i0 = 0; i0 < t5->sizes[2]; i0++)
        for (int64_t i1 = 0; i1 < t5->sizes[3]; i1++) {
            char *row = base + (i0 * t5->strides[2] + i1 * t5->strides[3]) * (int64_t)es;
            int64_t e0 = i0 + pad[0], e1 = i1 + pad[1];
            int inside = e0 < E[0] && e1 < E[1];
            const float *src = blk + (e0 * E[1] + e1) * E[2] * VT_DW_LANES;
            int64_t n2 = !inside ? 0 : E[2] - pad[2] < t5->sizes[4] ? E[2] - pad[2] : t5->sizes[4];
            if (n2 < 0) n2 = 0;
            if (t5->strides[1] == 1 && !bias && nl == VT_DW_LANES && (t5->dtype == VT_F32 || t5->dtype == VT_BF16)) {
                k->store(src + pad[2] * VT_DW_LANES, n2, row, t5->dtype == VT_BF16, t5->strides[4]);
                for (int64_t i2 = n2; i2 < t5->sizes[4]; i2++)
                    k->store(zero, 1, row + i2 * s2, t5->dtype == VT_BF16, t5->strides[4]);
                continue;
            }
            if (t5->strides[1] == 1 && !bias && (t5->dtype == VT_F32 || t5->dtype == VT_BF16)) {
                for (int64_t i2 = 0; i2 < t5->sizes[4]; i2++) {
                    int64_t e2 = i2 + pad[2];
                    const float *v = inside && e2 < E[2] ? src + e2 * VT_DW_LANES : zero;
                    if (t5->dtype == VT_F32) {
                        memcpy(row + i2 * s2, v, (size_t)nl * sizeof(float));
                    } else {
                        uint16_t *h = (uint16_t *)(row + i2 * s2);
                        for (int l = 0; l < nl; l++) h[l] = vt_f32_to_bf16(v[l]);
                    }
                }
                continue;
            }
            /* positions [0, n2) read the block, the rest are 0 */
            const float *s0 = src + pad[2] * VT_DW_LANES;
            int64_t done = 0; /* positions moved 16 x 16 in registers (NCHW rows) */
            if (k->lanes_out && !bias && nl == VT_DW_LANES && s2 == (int64_t)es &&
                (t5->dtype == VT_F32 || t5->dtype == VT_BF16))
                for (; done + 16 <= n2; done += 16)
                    k->lanes_out(s0 + done * VT_DW_LANES, row + done * s2, t5->dtype == VT_BF16, cs);
            for (int l = 0; l < nl; l++) {
                char *dst = row + l * cs;
                const double *b = bias ? bias + l : NULL;
                int64_t i2 = done;
                if (!b && t5->dtype == VT_F32 && s2 == 4) {
                    float *f = (float *)dst;
                    for (; i2 < n2; i2++) f[i2] = s0[i2 * VT_DW_LANES + l];
                } else if (!b && t5->dtype == VT_BF16 && s2 == 2) {
                    uint16_t *h = (uint16_t *)dst;
                    for (; i2 < n2; i2++) h[i2] = vt_f32_to_bf16(s0[i2 * VT_DW_LANES + l]);
                } else {
                    for (; i2 < n2; i2++) store_elem(t5->dtype, dst + i2 * s2, s0[i2 * VT_DW_LANES + l], b);
                }
                for (; i2 < t5->sizes[4]; i2++) store_elem(t5->dtype, dst + i2 * s2, 0.0f, b);
            }
        }
}

/* The positions of channels-last t5 (image n, 16 lanes from c0) that no
 * window reads, padded index hi[k] (= pad[k] + i) on along some dim: 0. */
static void zero_past(const vt_tensor *t5, int64_t n, int64_t c0, const int64_t hi[3], const int64_t pad[3]) {
    const size_t es = vt_dtype_size(t5->dtype);
    char *base = (char *)t5->data + (t5->offset + n * t5->strides[0] + c0) * (int64_t)es;
    for (int64_t i0 = 0; i0 < t5->sizes[2]; i0++)
        for (int64_t i1 = 0; i1 < t5->sizes[3]; i1++) {
            const int whole = i0 + pad[0] >= hi[0] || i1 + pad[1] >= hi[1];
            for (int64_t i2 = whole ? 0 : hi[2] - pad[2]; i2 < t5->sizes[4]; i2++)
                memset(base + (i0 * t5->strides[2] + i1 * t5->strides[3] + i2 * t5->strides[4]) * (int64_t)es, 0,
                       VT_DW_LANES * es);
        }
}

/* ------------------------------------------------------------ jobs */

typedef struct dw_job {
    const vt_conv_geom *g;
    const vt_dw_kernels *k;
    vt_dw_geom d;
    vt_conv_kind kind;
    const vt_tensor *x5, *y5; /* input-shaped, output-shaped */
    const double *bias;       /* forward: per channel, or NULL */
    const float *w;           /* [ncb][nslots][taps][lanes] weight parts */
    float *partial;           /* weight gradient: [N][ncb][nbands][2][taps][lanes] */
    int64_t ncb, nslots;
    int64_t band, nbands;     /* output rows (dim 1) per task, tasks per plane */
    int rows;                 /* the weight gradient's whole lane blocks take weight_rows */
    _Atomic int oom;
} dw_job;

static const int64_t no_pad[3] = {0, 0, 0};

static void dw_range(void *ctx, int64_t begin, int64_t end) {
    dw_job *j = ctx;
    const vt_conv_geom *g = j->g;
    const vt_dw_geom *whole = &j->d;
    int64_t X = whole->E[0] * whole->E[1] * whole->E[2] * VT_DW_LANES, T = whole->taps * VT_DW_LANES;
    int64_t Z = g->out[0] * j->band * g->out[2] * VT_DW_LANES;
    int S = (int)j->nslots;
    /* x slots (the raw block is slot 0), y raw + slots, and for the input
     * gradient its lo and hi accumulators */
    float *mem = aligned_alloc(64, (size_t)(S * X + S * Z + 2 * X) * sizeof(float) + 64);
    if (!mem) {
        atomic_store(&j->oom, 1);
        return;
    }
    float *xs[3] = {mem, mem + X, mem + 2 * X}, *ys[3] = {mem + S * X, mem + S * X + Z, mem + S * X + 2 * Z};
    float *lo = mem + S * X + S * Z, *hi = lo + X;
    for (int64_t t = begin; t < end; t++) {
        int64_t bi = t % j->nbands, plane = t / j->nbands, n = plane / j->ncb, cb = plane % j->ncb;
        int64_t c0 = cb * VT_DW_LANES, z1 = bi * j->band;
        int nl = g->C - c0 < VT_DW_LANES ? (int)(g->C - c0) : VT_DW_LANES;
        /* this band's output rows, and the output(-gradient) tensor seen from its first */
        vt_dw_geom band = j->d;
        band.out[1] = g->out[1] - z1 < j->band ? g->out[1] - z1 : j->band;
        int64_t yE[3] = {g->out[0], band.out[1], g->out[2]};
        vt_tensor yb = *j->y5;
        yb.offset += z1 * yb.strides[3];
        yb.sizes[3] = band.out[1];
        const vt_dw_geom *d = &band;
        const float *ws[3];
        for (int s = 0; s < S; s++) ws[s] = j->w + (cb * S + s) * T;
        const int64_t *pad = g->pad;
        if (j->rows && nl == VT_DW_LANES) { /* a 3x3 weight gradient read straight from the tensors */
            const vt_tensor *x5 = j->x5, *y5 = j->y5;
            const int64_t xes = (int64_t)vt_dtype_size(x5->dtype), yes = (int64_t)vt_dtype_size(y5->dtype);
            const vt_dw_rows src = {(const char *)x5->data + (x5->offset + n * x5->strides[0] + c0) * xes,
                                    (const char *)y5->data + (y5->offset + n * y5->strides[0] + c0) * yes,
                                    x5->dtype == VT_BF16,
                                    y5->dtype == VT_BF16,
                                    {x5->strides[3], x5->strides[4]},
                                    {y5->strides[3], y5->strides[4]}};
            float *p = j->partial + t * 2 * T;
            j->k->weight_rows(g, &src, z1, z1 + band.out[1], xs[0], p + T);
            continue;
        }
        if (j->kind != VT_CONV_BACKWARD_INPUT) { /* the input window block */
            fill_split(j->k, j->x5, n, c0, nl, d->E, pad, z1 * g->stride[1], d->nlow, S, xs);
        }
        if (j->kind != VT_CONV_FORWARD) { /* the output gradient block */
            fill_split(j->k, &yb, n, c0, nl, yE, no_pad, 0, d->nlow, S, ys);
        }
        if (j->kind == VT_CONV_FORWARD) {
            j->k->forward(d, (const float *const *)xs, ws, ys[0]);
            store_block(j->k, &yb, n, c0, nl, yE, no_pad, ys[0], j->bias ? j->bias + c0 : NULL);
        } else if (j->kind == VT_CONV_BACKWARD_INPUT) {
            /* a gathered sum goes straight into a channels-last tensor of
             * whole lane blocks, else into the block's interior */
            const vt_tensor *x5 = j->x5;
            const int direct =
                nl == VT_DW_LANES && x5->strides[1] == 1 && (x5->dtype == VT_F32 || x5->dtype == VT_BF16);
            vt_dw_dst o = {(char *)(hi + ((pad[0] * d->E[1] + pad[1]) * d->E[2] + pad[2]) * VT_DW_LANES), 0,
                           {pad[0], pad[1], pad[2]}, {0}, {d->E[1] * d->E[2] * VT_DW_LANES, d->E[2] * VT_DW_LANES,
                           VT_DW_LANES}};
            for (int k = 0; k < 3; k++) {
                const int64_t end = pad[k] + x5->sizes[2 + k]; /* past the input's last position */
                o.hi[k] = end < d->E[k] ? end : d->E[k];
            }
            if (direct) {
                o.bf16 = x5->dtype == VT_BF16;
                o.p = (char *)x5->data + (x5->offset + n * x5->strides[0] + c0) * (int64_t)vt_dtype_size(x5->dtype);
                for (int k = 0; k < 3; k++) o.st[k] = x5->strides[2 + k];
            }
            if (d->nlow) memset(hi, 0, (size_t)X * sizeof(float)), memset(lo, 0, (size_t)X * sizeof(float));
            if (j->k->backward_input(d, (const float *const *)ys, ws, lo, hi, &o) && direct) {
                zero_past(x5, n, c0, o.hi, pad);
                continue;
            }
            if (d->nlow) /* the guarded low sum, then hi * hi */
                for (int64_t i = 0; i < X; i++) hi[i] = (isfinite(lo[i]) ? lo[i] : 0.0f) + hi[i];
            store_block(j->k, x5, n, c0, nl, d->E, pad, hi, NULL);
        } else {
            float *p = j->partial + t * 2 * T;
            j->k->backward_weight(d, (const float *const *)ys, (const float *const *)xs, p, p + T);
        }
    }
    free(mem);
}

/* ------------------------------------------------------------ NCHW planes */

/* The forward over NCHW planes with unit stride along the rows (and a
 * stride-1 or 2 convolution along them): one task per (image, channel), the
 * positions along the lanes, so neither side is transposed. At stride 2
 * each padded row is laid out as its even positions, then its odd ones
 * (phases), so a window's taps along the row read both at unit stride;
 * through 16 x 16 transposes into channel lanes and back, a MobileNetV2
 * stride-2 layer (4 x 144 x 56 x 56, f32) took 0.35 ms, oneDNN 0.19. */
static int plane_takes(const vt_conv_geom *g, const vt_tensor *x5, const vt_tensor *y5) {
    return x5->strides[4] == 1 && y5->strides[4] == 1 && x5->strides[1] != 1 &&
           (g->stride[2] == 1 || g->stride[2] == 2);
}

typedef struct plane_job {
    const vt_conv_geom *g;
    const vt_dw_kernels *k;
    vt_dw_geom d; /* E: the padded plane, rows of E[2] (a multiple of 16) */
    int64_t half; /* stride 2: floats of a row's even phase (then the odd one), else 0 */
    const vt_tensor *x5, *y5;
    const double *bias;
    const float *w; /* [ncb][nslots][taps][lanes] */
    int nslots;
    _Atomic int oom;
} plane_job;

static void plane_range(void *ctx, int64_t begin, int64_t end) {
    plane_job *j = ctx;
    const vt_conv_geom *g = j->g;
    const vt_dw_geom *d = &j->d;
    int64_t X = d->E[0] * d->E[1] * d->E[2], n2 = (g->out[2] + VT_DW_LANES - 1) / VT_DW_LANES * VT_DW_LANES;
    int64_t Y = g->out[0] * g->out[1] * n2, T = g->k_prod * VT_DW_LANES;
    int S = j->nslots;
    /* a row staged as f32 (f16) */
    const int64_t R = j->x5->dtype != VT_F32 && j->x5->dtype != VT_BF16 ? (g->in[2] + 15) / 16 * 16 : 0;
    float *mem = aligned_alloc(64, (size_t)(S * X + Y + R) * sizeof(float) + 64);
    if (!mem) {
        atomic_store(&j->oom, 1);
        return;
    }
    float *xs[3] = {mem, mem + X, mem + 2 * X}, *y = mem + S * X, *staged = y + Y;
    const vt_tensor *x5 = j->x5, *y5 = j->y5;
    size_t xes = vt_dtype_size(x5->dtype), yes = vt_dtype_size(y5->dtype);
    /* the positions of a row the windows read: up to E[2], or the extent at stride 2 */
    const int64_t row_end = j->half ? extent(g, 2) : d->E[2];
    int64_t n_in = g->in[2] < row_end - g->pad[2] ? g->in[2] : row_end - g->pad[2];
    for (int64_t t = begin; t < end; t++) {
        int64_t n = t / g->C, c = t % g->C;
        /* the padded plane (the phases or rows of each input row) */
        memset(xs[0], 0, (size_t)X * sizeof(float));
        const char *plane = (const char *)x5->data + (x5->offset + n * x5->strides[0] + c * x5->strides[1]) * (int64_t)xes;
        for (int64_t i0 = 0; i0 < g->in[0] && i0 + g->pad[0] < d->E[0]; i0++) {
            if (x5->dtype == VT_F32 || x5->dtype == VT_BF16) { /* the plane's rows in one call */
                const int64_t rows = g->in[1] < d->E[1] - g->pad[1] ? g->in[1] : d->E[1] - g->pad[1];
                j->k->phases(plane + i0 * x5->strides[2] * (int64_t)xes, x5->dtype == VT_BF16, x5->strides[3], rows,
                             n_in, g->pad[2], xs[0] + ((i0 + g->pad[0]) * d->E[1] + g->pad[1]) * d->E[2], d->E[2],
                             j->half, d->nlow == 0);
                continue;
            }
            for (int64_t i1 = 0; i1 < g->in[1] && i1 + g->pad[1] < d->E[1]; i1++) { /* f16: each row as f32 first */
                const char *src = plane + (i0 * x5->strides[2] + i1 * x5->strides[3]) * (int64_t)xes;
                float *row = xs[0] + ((i0 + g->pad[0]) * d->E[1] + i1 + g->pad[1]) * d->E[2];
                for (int64_t i = 0; i < n_in; i++) staged[i] = load_elem(x5->dtype, src + i * (int64_t)xes);
                j->k->phases(staged, 0, 0, 1, n_in, g->pad[2], row, 0, j->half, d->nlow == 0);
            }
        }
        /* the rows came rounded at DEFAULT; the precision's parts */
        if (d->nlow) j->k->split(xs[0], X, d->nlow, xs);
        const float *ws[3];
        for (int s = 0; s < S; s++) ws[s] = j->w + ((c / VT_DW_LANES) * S + s) * T + c % VT_DW_LANES;
        j->k->plane_forward(d, (const float *const *)xs, ws, y);
        /* rows back into the output, plus the bias, rounded once */
        const double *b = j->bias ? j->bias + c : NULL;
        char *oplane = (char *)y5->data + (y5->offset + n * y5->strides[0] + c * y5->strides[1]) * (int64_t)yes;
        for (int64_t z0 = 0; z0 < g->out[0]; z0++)
            for (int64_t z1 = 0; z1 < g->out[1]; z1++) {
                const float *row = y + (z0 * g->out[1] + z1) * n2;
                char *dst = oplane + (z0 * y5->strides[2] + z1 * y5->strides[3]) * (int64_t)yes;
                if (y5->dtype == VT_F32 && !b) {
                    memcpy(dst, row, (size_t)g->out[2] * sizeof(float));
                } else if (y5->dtype == VT_BF16 && !b) {
                    j->k->narrow(row, g->out[2], (uint16_t *)dst);
                } else {
                    for (int64_t i = 0; i < g->out[2]; i++) store_elem(y5->dtype, dst + i * (int64_t)yes, row[i], b);
                }
            }
    }
    free(mem);
}

static vt_status plane_forward(const vt_conv_geom *g, const vt_tensor *x5, const vt_tensor *y5, const float *wparts,
                               const double *bias, int nlow, const char *fn) {
    plane_job j;
    memset(&j, 0, sizeof j);
    j.g = g, j.k = dw_kernels(), j.x5 = x5, j.y5 = y5, j.bias = bias, j.w = wparts;
    j.nslots = vt_mxu_nslots(nlow);
    j.d.nlow = nlow;
    j.d.taps = g->k_prod;
    int64_t n2 = (g->out[2] + VT_DW_LANES - 1) / VT_DW_LANES * VT_DW_LANES;
    geom_dims(g, &j.d);
    /* rows wide enough for every window of a 16-wide chunk, a multiple of 16;
     * at stride 2 each phase is (tap p along the row: phase p & 1, p >> 1 on) */
    const int64_t reach = (g->k[2] - 1) * g->dil[2];
    if (g->stride[2] == 2) {
        j.half = (n2 + reach / 2 + VT_DW_LANES - 1) / VT_DW_LANES * VT_DW_LANES;
        j.d.E[2] = 2 * j.half;
    } else {
        j.d.E[2] = (n2 + reach + VT_DW_LANES - 1) / VT_DW_LANES * VT_DW_LANES;
    }
    int64_t toff[g->k_prod > 0 ? g->k_prod : 1];
    tap_offsets(g, j.d.E, 1, toff);
    if (j.half)
        for (int64_t t = 0; t < g->k_prod; t++) { /* the row part of each offset, into its phase */
            const int64_t p = t % g->k[2] * g->dil[2];
            toff[t] += (p & 1) * j.half + (p >> 1) - p;
        }
    j.d.toff = toff;
    vt_parallel_for(g->N * g->C, 1, plane_range, &j);
    if (atomic_load(&j.oom)) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: out of host memory for scratch", fn);
    return VT_OK;
}

/* ------------------------------------------------------------ channels-last rows */

/* The forward at DEFAULT over channels-last F32 / BF16 tensors: no blocks to
 * lay out and write back, each output row straight from the input. */
static int cl_takes(const vt_conv_geom *g, const vt_tensor *x5, const vt_tensor *y5, int nlow) {
    return nlow == 0 && x5->strides[1] == 1 && y5->strides[1] == 1 && (x5->dtype == VT_F32 || x5->dtype == VT_BF16);
}

typedef struct cl_job {
    vt_dw_cl c;
    const vt_dw_kernels *k;
    const vt_tensor *y5;
    const double *bias;
    int64_t band, nbands; /* output rows (dim 1) per task */
    _Atomic int oom;
} cl_job;

static void cl_range(void *ctx, int64_t begin, int64_t end) {
    cl_job *j = ctx;
    const vt_conv_geom *g = j->c.g;
    const vt_tensor *y5 = j->y5;
    const int64_t width = j->c.ncb * VT_DW_LANES, S = vt_dw_cl_stage_floats(&j->c, j->band);
    /* the band's rows buffer only when the sums do not go straight to y */
    const int64_t rows_floats = j->c.y ? 0 : j->band * g->out[2] * width;
    float *stage = aligned_alloc(64, (size_t)(S + rows_floats) * sizeof(float) + 64);
    if (!stage) {
        atomic_store(&j->oom, 1);
        return;
    }
    float *rows = stage + S;
    const size_t es = vt_dtype_size(y5->dtype);
    for (int64_t t = begin; t < end; t++) {
        int64_t b = t % j->nbands, z0 = t / j->nbands % g->out[0], n = t / (j->nbands * g->out[0]);
        int64_t z1a = b * j->band, z1b = z1a + j->band < g->out[1] ? z1a + j->band : g->out[1];
        j->k->cl_rows(&j->c, n, z0, z1a, z1b, stage, rows);
        if (j->c.y) continue; /* written straight into y */
        for (int64_t z1 = z1a; z1 < z1b; z1++) {
            char *dst = (char *)y5->data +
                        (y5->offset + n * y5->strides[0] + z0 * y5->strides[2] + z1 * y5->strides[3]) * (int64_t)es;
            const float *row = rows + (z1 - z1a) * g->out[2] * width;
            if (!j->bias && width == g->C && y5->strides[4] == g->C) { /* the row lies as the buffer's */
                if (y5->dtype == VT_F32) memcpy(dst, row, (size_t)(g->out[2] * width) * sizeof(float));
                else j->k->narrow(row, g->out[2] * width, (uint16_t *)(void *)dst);
                continue;
            }
            for (int64_t z2 = 0; z2 < g->out[2]; z2++) {
                const float *v = row + z2 * width;
                char *p = dst + z2 * y5->strides[4] * (int64_t)es;
                if (y5->dtype == VT_F32 && !j->bias) memcpy(p, v, (size_t)g->C * sizeof(float));
                else if (y5->dtype == VT_BF16 && !j->bias) j->k->narrow(v, g->C, (uint16_t *)(void *)p);
                else
                    for (int64_t c = 0; c < g->C; c++)
                        store_elem(y5->dtype, p + c * (int64_t)es, v[c], j->bias ? j->bias + c : NULL);
            }
        }
    }
    free(stage);
}

static vt_status cl_forward(const vt_conv_geom *g, const vt_tensor *x5, const vt_tensor *y5, const float *wparts,
                            int64_t ncb, const double *bias, const char *fn) {
    cl_job j;
    memset(&j, 0, sizeof j);
    j.c.g = g, j.c.ncb = ncb, j.c.w = wparts, j.c.x_bf16 = x5->dtype == VT_BF16;
    j.c.x = (const char *)x5->data + x5->offset * (int64_t)vt_dtype_size(x5->dtype);
    j.c.xs[0] = x5->strides[0], j.c.xs[1] = x5->strides[2], j.c.xs[2] = x5->strides[3], j.c.xs[3] = x5->strides[4];
    j.k = dw_kernels(), j.y5 = y5, j.bias = bias;
    if (!bias && g->C % VT_DW_LANES == 0 && (y5->dtype == VT_F32 || y5->dtype == VT_BF16)) {
        /* whole lane blocks: the sums go straight to y */
        j.c.y = (char *)y5->data + y5->offset * (int64_t)vt_dtype_size(y5->dtype);
        j.c.y_bf16 = y5->dtype == VT_BF16;
        j.c.ys[0] = y5->strides[0], j.c.ys[1] = y5->strides[2], j.c.ys[2] = y5->strides[3], j.c.ys[3] = y5->strides[4];
    }
    /* bands whose window over every block (the input rows each block's
     * stage re-reads) stays near DW_CL_BAND_BYTES (in L2), at least a row */
    int64_t per_row = (vt_dw_cl_stage_floats(&j.c, 2) - vt_dw_cl_stage_floats(&j.c, 1)) * ncb;
    j.band = per_row > 0 ? DW_CL_BAND_BYTES / (per_row * (int64_t)sizeof(float)) : g->out[1];
    j.band = j.band < 1 ? 1 : j.band < g->out[1] ? j.band : g->out[1];
    j.nbands = (g->out[1] + j.band - 1) / j.band;
    vt_parallel_for(g->N * g->out[0] * j.nbands, 1, cl_range, &j);
    if (atomic_load(&j.oom)) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: out of host memory for scratch", fn);
    return VT_OK;
}

static _Atomic int scatter_forced;

void vt_conv_dw_force_scatter(int on) { atomic_store(&scatter_forced, on != 0); }

/* Prepare d and the weight parts, run the tasks. w5: the weight [C, 1, k..]
 * (or, for the weight gradient, NULL). */
static vt_status run(dw_job *j, const vt_conv_geom *g, const vt_tensor *w, vt_precision prec, const char *fn) {
    int64_t toff[g->k_prod > 0 ? g->k_prod : 1];
    j->g = g;
    j->k = dw_kernels();
    j->d.nlow = vt_mxu_nlow(vt_conv_product_precision(g->dtype, prec));
    j->nslots = vt_mxu_nslots(j->d.nlow);
    j->ncb = (g->C + VT_DW_LANES - 1) / VT_DW_LANES;
    geom_dims(g, &j->d);
    j->d.taps = g->k_prod;
    j->d.scatter = atomic_load(&scatter_forced);
    /* bands of output rows (dim 1); the input gradient scatters into its
     * whole window block, so it goes plane by plane */
    j->band = g->out[1];
    if (j->kind != VT_CONV_BACKWARD_INPUT) {
        int64_t row = j->d.E[0] * g->stride[1] * j->d.E[2] * VT_DW_LANES * (int64_t)sizeof(float);
        int64_t b = row > 0 ? DW_BAND_BYTES / row : g->out[1];
        j->band = b < 1 ? 1 : b < g->out[1] ? b : g->out[1];
        j->d.E[1] = (j->band - 1) * g->stride[1] + (g->k[1] - 1) * g->dil[1] + 1;
    }
    j->nbands = (g->out[1] + j->band - 1) / j->band;
    tap_offsets(g, j->d.E, VT_DW_LANES, toff);
    j->d.toff = toff;
    int64_t T = g->k_prod * VT_DW_LANES;
    float *wparts = NULL;
    if (w) {
        /* [ncb][slot][tap][lane]: weight c's tap t in lane c % lanes */
        float *raw = calloc((size_t)(j->ncb * T), sizeof(float));
        wparts = aligned_alloc(64, (size_t)(j->ncb * j->nslots * T) * sizeof(float) + 64);
        if (!raw || !wparts) {
            free(raw), free(wparts);
            return vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: out of host memory for the weight parts", fn);
        }
        size_t es = vt_dtype_size(w->dtype);
        for (int64_t c = 0; c < g->C; c++) {
            int64_t kk = 0;
            for (int64_t k0 = 0; k0 < g->k[0]; k0++)
                for (int64_t k1 = 0; k1 < g->k[1]; k1++)
                    for (int64_t k2 = 0; k2 < g->k[2]; k2++, kk++) {
                        int64_t off = w->offset + c * w->strides[0] + k0 * w->strides[2] + k1 * w->strides[3] +
                                      k2 * w->strides[4];
                        raw[(c / VT_DW_LANES) * T + kk * VT_DW_LANES + c % VT_DW_LANES] =
                            load_elem(w->dtype, (const char *)w->data + off * (int64_t)es);
                    }
        }
        for (int64_t cb = 0; cb < j->ncb; cb++) {
            float *slots[3];
            for (int s = 0; s < j->nslots; s++) slots[s] = wparts + (cb * j->nslots + s) * T;
            j->k->split(raw + cb * T, T, j->d.nlow, slots);
        }
        free(raw);
    }
    j->w = wparts;
    if (j->kind == VT_CONV_FORWARD && cl_takes(g, j->x5, j->y5, j->d.nlow)) {
        vt_status s = cl_forward(g, j->x5, j->y5, wparts, j->ncb, j->bias, fn);
        free(wparts);
        return s;
    }
    if (j->kind == VT_CONV_FORWARD && plane_takes(g, j->x5, j->y5)) {
        vt_status s = plane_forward(g, j->x5, j->y5, wparts, j->bias, j->d.nlow, fn);
        free(wparts);
        return s;
    }
    const vt_tensor *x5 = j->x5, *y5 = j->y5;
    j->rows = j->kind == VT_CONV_BACKWARD_WEIGHT && j->d.nlow == 0 && g->k[0] == 1 && g->out[0] == 1 &&
              g->k[1] == 3 && g->k[2] == 3 && x5->strides[1] == 1 && y5->strides[1] == 1 &&
              (x5->dtype == VT_F32 || x5->dtype == VT_BF16) && (y5->dtype == VT_F32 || y5->dtype == VT_BF16);
    int64_t tasks = g->N * j->ncb * j->nbands;
    vt_parallel_for(tasks, 1, dw_range, j);
    free(wparts);
    if (atomic_load(&j->oom)) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: out of host memory for scratch", fn);
    return VT_OK;
}

vt_status vt_conv_dw_forward(const vt_conv_geom *g, const vt_tensor *out, const vt_tensor *input,
                             const vt_tensor *weight, const vt_tensor *bias, vt_precision prec) {
    dw_job j;
    memset(&j, 0, sizeof j);
    vt_tensor x5 = vt_conv_view5(input, g->spatial), y5 = vt_conv_view5(out, g->spatial),
              w5 = vt_conv_view5(weight, g->spatial);
    j.kind = VT_CONV_FORWARD;
    j.x5 = &x5, j.y5 = &y5;
    double *b = NULL;
    if (bias) {
        b = malloc((size_t)g->C * sizeof(double) + 8);
        if (!b) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "vt_conv_forward: out of host memory");
        vt_convert(bias->dtype, vt_base(bias), bias->strides[0], VT_F64, b, 1, g->C);
    }
    j.bias = b;
    vt_status s = run(&j, g, &w5, prec, "vt_conv_forward");
    free(b);
    return s;
}

vt_status vt_conv_dw_backward_input(const vt_conv_geom *g, const vt_tensor *grad_input, const vt_tensor *grad_out,
                                    const vt_tensor *weight, vt_precision prec) {
    dw_job j;
    memset(&j, 0, sizeof j);
    vt_tensor x5 = vt_conv_view5(grad_input, g->spatial), y5 = vt_conv_view5(grad_out, g->spatial),
              w5 = vt_conv_view5(weight, g->spatial);
    j.kind = VT_CONV_BACKWARD_INPUT;
    j.x5 = &x5, j.y5 = &y5;
    return run(&j, g, &w5, prec, "vt_conv_backward_input");
}

vt_status vt_conv_dw_backward_weight(const vt_conv_geom *g, const vt_tensor *grad_weight, const vt_tensor *grad_out,
                                     const vt_tensor *input, vt_precision prec) {
    const char *fn = "vt_conv_backward_weight";
    dw_job j;
    memset(&j, 0, sizeof j);
    vt_tensor x5 = vt_conv_view5(input, g->spatial), y5 = vt_conv_view5(grad_out, g->spatial),
              w5 = vt_conv_view5(grad_weight, g->spatial);
    j.kind = VT_CONV_BACKWARD_WEIGHT;
    j.x5 = &x5, j.y5 = &y5;
    int64_t ncb = (g->C + VT_DW_LANES - 1) / VT_DW_LANES, T = g->k_prod * VT_DW_LANES;
    /* bands: at most one per output row (dim 1) */
    j.partial = malloc((size_t)(g->N * ncb * g->out[1] * 2 * T) * sizeof(float) + 64);
    if (!j.partial) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "%s: out of host memory for partial sums", fn);
    vt_status s = run(&j, g, NULL, prec, fn);
    if (s == VT_OK) {
        /* images in order: the low sums, guarded, then the hi * hi sums */
        int nlow = j.d.nlow;
        size_t es = vt_dtype_size(grad_weight->dtype);
        for (int64_t c = 0; c < g->C; c++) {
            int64_t cb = c / VT_DW_LANES, l = c % VT_DW_LANES, kk = 0;
            for (int64_t k0 = 0; k0 < g->k[0]; k0++)
                for (int64_t k1 = 0; k1 < g->k[1]; k1++)
                    for (int64_t k2 = 0; k2 < g->k[2]; k2++, kk++) {
                        float lo = 0.0f, hi = 0.0f;
                        for (int64_t n = 0; n < g->N; n++)
                            for (int64_t b = 0; b < j.nbands; b++) {
                                const float *p = j.partial + ((n * ncb + cb) * j.nbands + b) * 2 * T +
                                                 kk * VT_DW_LANES + l;
                                if (nlow) lo += p[0];
                                hi += p[T];
                            }
                        float v = nlow ? (isfinite(lo) ? lo : 0.0f) + hi : hi;
                        int64_t off = w5.offset + c * w5.strides[0] + k0 * w5.strides[2] + k1 * w5.strides[3] +
                                      k2 * w5.strides[4];
                        store_elem(w5.dtype, (char *)w5.data + off * (int64_t)es, v, NULL);
                    }
        }
    }
    free(j.partial);
    return s;
}
