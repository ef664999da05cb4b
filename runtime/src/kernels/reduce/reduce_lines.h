/* reduce_lines.h — geometry shared by the one-dim kernels (vt_reduce_arg,
 * vt_scan): the input seen as independent lines along one dim, the other
 * dims coalesced, and the choice between walking one line at a time and
 * walking VTL_LANES neighbouring lines side by side. */
#ifndef VTPU_REDUCE_LINES_H
#define VTPU_REDUCE_LINES_H

#include "internal.h"

#define VTL_LANES 64   /* lines walked side by side */
#define VTL_CHUNK 1024 /* values staged per chunk of one line */

typedef struct vt_lines {
    int nk;
    int64_t ksz[VT_MAX_DIMS], kin[VT_MAX_DIMS], ko[2][VT_MAX_DIMS]; /* kept dims: input and two outputs */
    int64_t len, sin, so[2];                                        /* the line: length and strides */
    int64_t nlines;
    int vertical;          /* lanes across the last kept dim */
    int64_t lane_len, tiles, groups;
} vt_lines;

/* outs[k] (NULL allowed) share in's shape except maybe along dim. */
static inline void vt_lines_init(vt_lines *g, const vt_tensor *in, int dim, const vt_tensor *o0, const vt_tensor *o1) {
    const vt_tensor *outs[2] = {o0, o1};
    memset(g, 0, sizeof *g);
    g->len = 1;
    g->nlines = 1;
    for (int32_t d = 0; d < in->ndim; d++) {
        int64_t n = in->sizes[d];
        if (d == dim) {
            g->len = n;
            g->sin = in->strides[d];
            for (int k = 0; k < 2; k++) g->so[k] = outs[k] ? outs[k]->strides[d] : 0;
            continue;
        }
        g->nlines *= n;
        if (n == 1) continue;
        int64_t os[2] = {outs[0] ? outs[0]->strides[d] : 0, outs[1] ? outs[1]->strides[d] : 0};
        int k = g->nk;
        if (k > 0 && g->kin[k - 1] == in->strides[d] * n && g->ko[0][k - 1] == os[0] * n && g->ko[1][k - 1] == os[1] * n) {
            g->ksz[k - 1] *= n;
            g->kin[k - 1] = in->strides[d], g->ko[0][k - 1] = os[0], g->ko[1][k - 1] = os[1];
        } else {
            g->ksz[k] = n, g->kin[k] = in->strides[d], g->ko[0][k] = os[0], g->ko[1][k] = os[1];
            g->nk++;
        }
    }
    int64_t sl = g->sin < 0 ? -g->sin : g->sin, sk = g->nk ? g->kin[g->nk - 1] : 0;
    if (sk < 0) sk = -sk;
    /* Lanes when neighbouring lines are closer in memory than neighbouring
     * elements of one line (a scan or argmax over dim 0). */
    g->vertical = g->nlines > 0 && g->nk > 0 && g->len > 1 && sk < sl; /* no lines: a dim of size 0 */
    if (g->vertical) {
        g->lane_len = g->ksz[g->nk - 1];
        g->tiles = (g->lane_len + VTL_LANES - 1) / VTL_LANES;
        g->groups = g->nlines / g->lane_len * g->tiles;
    } else {
        g->groups = g->nlines;
    }
}

/* Offsets of kept position o (over the first nk kept dims) in the input
 * and the two outputs. */
static inline void vt_lines_offsets(const vt_lines *g, int64_t o, int nk, int64_t *in, int64_t *o0, int64_t *o1) {
    *in = *o0 = *o1 = 0;
    for (int d = nk - 1; d >= 0; d--) {
        int64_t k = o % g->ksz[d];
        o /= g->ksz[d];
        *in += k * g->kin[d], *o0 += k * g->ko[0][d], *o1 += k * g->ko[1][d];
    }
}

/* Convert m values (stride s) from `from` to `to` through `via` (inputs are
 * converted to the compute dtype first); tmp holds m values of 8 bytes. */
static inline void vt_lines_convert(vt_dtype from, const void *src, int64_t s, vt_dtype via, vt_dtype to, void *dst,
                                    int64_t ds, int64_t m, void *tmp) {
    if (from == via || via == to) {
        vt_convert(from, src, s, to, dst, ds, m);
    } else {
        vt_convert(from, src, s, via, tmp, 1, m);
        vt_convert(via, tmp, 1, to, dst, ds, m);
    }
}

#endif
