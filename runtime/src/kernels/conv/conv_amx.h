/* conv_amx.h — private to the AMX convolution files (conv_amx.c: the
 * forward and what both directions share; conv_grad_amx.c: the weight
 * gradient and the few-channel strided input gradient). Not installed. */
#ifndef VTPU_KERNELS_CONV_AMX_H
#define VTPU_KERNELS_CONV_AMX_H

#include <stdatomic.h>

#include "kernels/conv/conv.h"
#include "kernels/mxu/mxu_local.h"

typedef struct amx_job {
    const vt_conv_geom *g;
    const vt_tensor *x5, *w5;
    int64_t Cp, ncc, Op, taps;
    /* merged taps (merged_channels): Cp is Cq, taps are (k0, k1), each one
     * chunk of Kq = k2 * Cq values (otherwise Kq is Cp: ncc chunks of 32),
     * and cfg the tiles' shapes */
    int merged;
    int64_t Kq;
    vt_amx_tile_config cfg;
    int64_t E[3];       /* padded input extents */
    int64_t *toff;      /* per tap: offset from a position's first input, in grid positions */
    int linear;         /* stride 1 everywhere: tiles run over the padded grid */
    int64_t V;          /* linear: grid positions per image that cover every output */
    int64_t tpr;        /* otherwise: tiles per output row */
    int64_t tiles;      /* per image (not gathered) */
    int gathered;       /* the VDPBF16PS blocks: tiles of output positions, each row its own (chunk_tiles) */
    int64_t img;        /* grid positions per image */
    uint16_t *xbuf;     /* [nb][E0][E1][E2][Cp] bf16 parts, then a margin */
    uint16_t *wp;       /* [Op/16][taps][ncc] tiles of 16 k-pairs x 16 outputs */
    float *bias;        /* Op floats, or NULL */
    int64_t n0, nbc;    /* the chunk's images */
    int64_t ob;         /* output panels per weight block (even) */
    int check;          /* vt_conv_amx_fill_rows notes non-finite parts in nonfinite */
    _Atomic int nonfinite;
    /* out rows: image b's position (o0, o1, o2) at y + yoff + b*ys[0] +
     * o0*ys[1] + o1*ys[2] + o2*ys[3], its outputs contiguous */
    void *y;
    vt_dtype ydt;
    int64_t yoff, ys[4];
    _Atomic int oom;
} amx_job;

static inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* The AMX or AVX512-BF16 engine, one bf16 pass, groups 1, more than one tap. */
int vt_conv_amx_takes_shape(const vt_conv_geom *g, vt_precision prec);
/* Bytes of padded input per chunk of images. */
int64_t vt_conv_amx_chunk_bytes(void);
/* The bf16 parts of n values of t from element off, stride st, at dst;
 * dst[n..npad) = +0 (up to npad rounded up to 16 written). tmp: n floats. */
void vt_conv_amx_parts_line(const vt_tensor *t, int64_t off, int64_t st, int64_t n, int64_t npad, float *tmp,
                            uint16_t *dst);
/* The parts of n bf16 values (denormals flushed, NaNs quieted). */
void vt_conv_amx_bf16_parts(const uint16_t *src, int64_t n, uint16_t *dst);
/* The parts of C values along dim 1 of t at dst[0 .. Cp), zeros past C. */
void vt_conv_amx_channel_parts(const vt_tensor *t, int64_t off, int64_t C, int64_t Cp, float *tmp, uint16_t *dst);
/* Rows [begin, end) of a job's padded input buffer (a parallel_for body). */
void vt_conv_amx_fill_rows(void *ctx, int64_t begin, int64_t end);
/* The padded grid of a job (toff allocated: the caller frees it). */
vt_status vt_conv_amx_grid_setup(amx_job *j, const vt_conv_geom *g, int64_t merged_cq, const char *fn);
/* A job's scratch blocks, carved from one allocation (the MXU workspace
 * when it is free): n[i] bf16 on a 64-byte boundary at *p[i]. Released
 * once, whatever was carved (a zeroed vt_conv_ws releases nothing). */
typedef struct vt_conv_ws {
    void *base;
    int cached;
} vt_conv_ws;
vt_status vt_conv_amx_scratch(vt_conv_ws *ws, int count, const int64_t *n, uint16_t **const *p, const char *fn,
                              const char *what);
void vt_conv_amx_scratch_release(vt_conv_ws *ws);
/* The forward; check: an input with inf or NaN stops it with *declined set. */
vt_status vt_conv_amx_forward_checked(const vt_conv_geom *g, const vt_tensor *out, const vt_tensor *input,
                                      const vt_tensor *weight, const vt_tensor *bias, int check, int *declined);

#endif
