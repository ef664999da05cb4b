/* conv_dw_grad_body.h — the depthwise gradients of a lane block (the input
 * gradient gathered at DEFAULT or scattered, the weight gradient's tap
 * sums), included by conv_dw_body.h once per ISA, after the helpers they
 * use (dw_vf, dw_ld, dw_st, dw_base, dw_guard). */

/* The output positions along dim 2 that read padded position i2, in
 * increasing order: for each, its tap k2 and position z2. */
typedef struct dw_reads {
    int n;
    int64_t k2[4], z2[4];
} dw_reads;

/* Positions 2m and 2m + 1 of one padded row of the gather for 3 taps at
 * stride 2 along it (n outputs): position 2m reads output m - 1 through tap
 * 2 and output m through tap 0, position 2m + 1 output m through tap 1;
 * output rows q (grow, weight rows wrow) in order, taps as listed. nr is a
 * constant where the row loop below inlines it (1 or 2 rows, the interior
 * positions: no edge tests), else the count of rows. */
static inline __attribute__((always_inline)) void DW_NAME(dw_gather_pair_)(const float *const *grow,
                                                                          const float *const *wrow, int64_t nr,
                                                                          int64_t n, int64_t m, float *dst,
                                                                          int interior) {
    const int64_t zl = (m - 1) * VT_DW_LANES, zr = m * VT_DW_LANES;
    dw_vf even = {0}, odd = {0};
    for (int64_t q = 0; q < nr; q++) {
        const float *g = grow[q], *w = wrow[q];
        if (interior || m > 0) even += dw_ld(g + zl) * dw_ld(w + 2 * VT_DW_LANES);
        if (interior || m < n) even += dw_ld(g + zr) * dw_ld(w), odd += dw_ld(g + zr) * dw_ld(w + VT_DW_LANES);
    }
    dw_st(dst, even);
    if (interior || m < n) dw_st(dst + VT_DW_LANES, odd);
}

/* One padded row of that gather (E2 = 2 * n + 1 positions): the edge
 * positions and any row count through the general step, the interior of
 * one or two rows (every row of a 3x3 window at stride 2) through steps
 * with the count and the edges known: the general one's tests and loads
 * of the row pointers took most of a stride-2 input gradient's time. */
static void DW_NAME(dw_gather_row_3s2_)(const float *const *grow, const float *const *wrow, int64_t nr, int64_t n,
                                         float *dst) {
    if (n < 2 || (nr != 1 && nr != 2)) {
        for (int64_t m = 0; m <= n; m++) DW_NAME(dw_gather_pair_)(grow, wrow, nr, n, m, dst + 2 * m * VT_DW_LANES, 0);
        return;
    }
    DW_NAME(dw_gather_pair_)(grow, wrow, nr, n, 0, dst, 0);
    if (nr == 1)
        for (int64_t m = 1; m < n; m++) DW_NAME(dw_gather_pair_)(grow, wrow, 1, n, m, dst + 2 * m * VT_DW_LANES, 1);
    else
        for (int64_t m = 1; m < n; m++) DW_NAME(dw_gather_pair_)(grow, wrow, 2, n, m, dst + 2 * m * VT_DW_LANES, 1);
    DW_NAME(dw_gather_pair_)(grow, wrow, nr, n, n, dst + 2 * n * VT_DW_LANES, 0);
}

/* The input gradient at DEFAULT, gathered: each padded position's sum of
 * gy * w over the (output position, tap) pairs that read it, added from 0
 * in increasing output position, the order in which the scatter below adds
 * them (an output position's window runs forward from its first input, so
 * a later position reads a position through an earlier tap): the same
 * sums, each position written once, with no zeroed block and no read of a
 * sum a few taps after it was stored. At stride 2 the scatter's stores
 * and reloads of the positions two windows share held MobileNetV2's
 * 4 x 144 x 56 x 56 input gradient at 0.3 ms. Only o's rows are summed,
 * each into a row buffer and from there to o's positions in one pass: to
 * a channels-last tensor itself, where a whole padded block and its copy
 * out took a fifth of that layer's f32 input gradient. More than 4 readers
 * a position along dim 2, or windows of more than 256 rows, take the
 * scatter. */
static int DW_NAME(dw_gather_input_)(const vt_dw_geom *d, const float *gy, const float *w, const vt_dw_dst *o) {
    const int64_t E2 = d->E[2], K2 = d->k[2];
    if (d->k[0] * d->k[1] > 256) return 0;
    /* 3 taps at stride 2 along the row have a row loop of their own; other
     * windows read per position the list of its readers */
    const int row3s2 = K2 == 3 && d->stride[2] == 2 && d->dil[2] == 1;
    dw_reads *rd = row3s2 ? NULL : malloc((size_t)E2 * sizeof *rd);
    float *buf = malloc((size_t)E2 * VT_DW_LANES * sizeof(float)); /* one padded row */
    if ((!row3s2 && !rd) || !buf) {
        free(rd), free(buf);
        return 0;
    }
    for (int64_t i2 = 0; !row3s2 && i2 < E2; i2++) {
        rd[i2].n = 0;
        for (int64_t k2 = K2 - 1; k2 >= 0; k2--) {
            const int64_t b = i2 - k2 * d->dil[2];
            if (b < 0 || b % d->stride[2] || b / d->stride[2] >= d->out[2]) continue;
            if (rd[i2].n == 4) {
                free(rd), free(buf);
                return 0;
            }
            rd[i2].k2[rd[i2].n] = k2, rd[i2].z2[rd[i2].n] = b / d->stride[2] * VT_DW_LANES;
            rd[i2].n++;
        }
    }
    const int64_t nrow = d->k[0] * d->k[1];
    for (int64_t i0 = o->lo[0]; i0 < o->hi[0]; i0++)
        for (int64_t i1 = o->lo[1]; i1 < o->hi[1]; i1++) {
            /* the output rows reading this input row, in increasing order, and their weight rows */
            const float *grow[nrow > 0 ? nrow : 1], *wrow[nrow > 0 ? nrow : 1];
            int64_t nr = 0;
            for (int64_t k0 = d->k[0] - 1; k0 >= 0; k0--) {
                const int64_t b0 = i0 - k0 * d->dil[0];
                if (b0 < 0 || b0 % d->stride[0] || b0 / d->stride[0] >= d->out[0]) continue;
                for (int64_t k1 = d->k[1] - 1; k1 >= 0; k1--) {
                    const int64_t b1 = i1 - k1 * d->dil[1];
                    if (b1 < 0 || b1 % d->stride[1] || b1 / d->stride[1] >= d->out[1]) continue;
                    grow[nr] = gy + (b0 / d->stride[0] * d->out[1] + b1 / d->stride[1]) * d->out[2] * VT_DW_LANES;
                    wrow[nr] = w + (k0 * d->k[1] + k1) * K2 * VT_DW_LANES;
                    nr++;
                }
            }
            if (row3s2) {
                DW_NAME(dw_gather_row_3s2_)(grow, wrow, nr, d->out[2], buf);
            } else {
                for (int64_t i2 = o->lo[2]; i2 < o->hi[2]; i2++) {
                    const dw_reads *r = &rd[i2];
                    dw_vf acc = {0};
                    for (int64_t q = 0; q < nr; q++)
                        for (int e = 0; e < r->n; e++)
                            acc += dw_ld(grow[q] + r->z2[e]) * dw_ld(wrow[q] + r->k2[e] * VT_DW_LANES);
                    dw_st(buf + i2 * VT_DW_LANES, acc);
                }
            }
            /* the row's input positions out, in one pass over it */
            const int64_t es = o->bf16 ? 2 : 4;
            DW_NAME(dw_store_)(buf + o->lo[2] * VT_DW_LANES, o->hi[2] - o->lo[2],
                               o->p + ((i0 - o->lo[0]) * o->st[0] + (i1 - o->lo[1]) * o->st[1]) * es, o->bf16,
                               o->st[2]);
        }
    free(rd), free(buf);
    return 1;
}

/* gx from each output position's gradient times the weights over its
 * window: at DEFAULT gathered into o (returns 1), else scattered into the
 * padded blocks lo and hi (zeroed), the low passes' products into lo, hi *
 * hi into hi (the caller guards lo and adds; returns 0). The weight is A,
 * the output gradient B. */
static int DW_NAME(dw_backward_input_)(const vt_dw_geom *d, const float *const gy[3], const float *const w[3],
                                       float *lo, float *hi, const vt_dw_dst *o) {
    if (d->nlow == 0) {
        if (!d->scatter && DW_NAME(dw_gather_input_)(d, gy[0], w[0], o)) return 1;
        memset(hi, 0, (size_t)(d->E[0] * d->E[1] * d->E[2] * VT_DW_LANES) * sizeof(float));
    }
    const vt_mxu_pass *ps = vt_mxu_passes(d->nlow);
    const int64_t *off = d->toff, T = d->taps;
    int64_t z = 0;
    for (int64_t z0 = 0; z0 < d->out[0]; z0++)
        for (int64_t z1 = 0; z1 < d->out[1]; z1++)
            for (int64_t z2 = 0; z2 < d->out[2]; z2++, z += VT_DW_LANES) {
                int64_t b = dw_base(d, z0, z1, z2);
                for (int g = 0; g < d->nlow; g++) {
                    dw_vf v = dw_ld(gy[ps[g].b] + z);
                    const float *ws = w[ps[g].a];
                    for (int64_t t = 0; t < T; t++)
                        dw_st(lo + b + off[t], dw_ld(lo + b + off[t]) + v * dw_ld(ws + t * VT_DW_LANES));
                }
                dw_vf v = dw_ld(gy[0] + z);
                for (int64_t t = 0; t < T; t++)
                    dw_st(hi + b + off[t], dw_ld(hi + b + off[t]) + v * dw_ld(w[0] + t * VT_DW_LANES));
            }
    return 0;
}

/* Per tap, the sum over output positions of the output gradient times the
 * input at that tap (low passes into lo, hi * hi into hi, [taps][lanes]).
 * The output gradient is A, the input B. */
static void DW_NAME(dw_backward_weight_)(const vt_dw_geom *d, const float *const gy[3], const float *const x[3],
                                         float *lo, float *hi) {
    const vt_mxu_pass *ps = vt_mxu_passes(d->nlow);
    if (d->taps == 9 && d->nlow == 0) { /* 3x3 at DEFAULT: the nine sums in registers, one pass */
        const int64_t *off = d->toff, step = d->stride[2] * VT_DW_LANES;
        dw_vf a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, a4 = {0}, a5 = {0}, a6 = {0}, a7 = {0}, a8 = {0};
        const float *g = gy[0];
        for (int64_t z0 = 0; z0 < d->out[0]; z0++)
            for (int64_t z1 = 0; z1 < d->out[1]; z1++) {
                const float *p = x[0] + dw_base(d, z0, z1, 0);
                for (int64_t z2 = 0; z2 < d->out[2]; z2++, g += VT_DW_LANES, p += step) {
                    dw_vf v = dw_ld(g);
                    a0 += v * dw_ld(p + off[0]), a1 += v * dw_ld(p + off[1]), a2 += v * dw_ld(p + off[2]);
                    a3 += v * dw_ld(p + off[3]), a4 += v * dw_ld(p + off[4]), a5 += v * dw_ld(p + off[5]);
                    a6 += v * dw_ld(p + off[6]), a7 += v * dw_ld(p + off[7]), a8 += v * dw_ld(p + off[8]);
                }
            }
        dw_st(hi, a0), dw_st(hi + 16, a1), dw_st(hi + 32, a2), dw_st(hi + 48, a3), dw_st(hi + 64, a4);
        dw_st(hi + 80, a5), dw_st(hi + 96, a6), dw_st(hi + 112, a7), dw_st(hi + 128, a8);
        return;
    }
    for (int64_t t = 0; t < d->taps; t++) {
        for (int g = 0; g <= d->nlow; g++) {
            const float *gs = gy[ps[g].a], *xs = x[ps[g].b] + d->toff[t];
            dw_vf acc = {0};
            int64_t z = 0;
            for (int64_t z0 = 0; z0 < d->out[0]; z0++)
                for (int64_t z1 = 0; z1 < d->out[1]; z1++) {
                    int64_t b = dw_base(d, z0, z1, 0), step = d->stride[2] * VT_DW_LANES;
                    for (int64_t z2 = 0; z2 < d->out[2]; z2++, z += VT_DW_LANES, b += step)
                        acc += dw_ld(gs + z) * dw_ld(xs + b);
                }
            float *dst = (g < d->nlow ? lo : hi) + t * VT_DW_LANES;
            dw_st(dst, (g == 0 || g == d->nlow ? (dw_vf){0} : dw_ld(dst)) + acc);
        }
    }
}

/* backward_weight's 3x3 sums at DEFAULT read straight from channels-last
 * tensors: each input row the taps read goes once through the bf16
 * rounding into a ring of 2 * dil[1] + 1 padded rows (zeros in the
 * padding), which stays in L1; each output gradient position is rounded as
 * it loads. The same values in the same order as over the blocks, so the
 * same bits, without filling a band's blocks first: that fill took more of
 * a MobileNetV2 layer's weight gradient than its products. */
static void DW_NAME(dw_weight_rows_)(const vt_conv_geom *g, const vt_dw_rows *s, int64_t z1a, int64_t z1b,
                                     float *ring, float *hi) {
    const int64_t L = VT_DW_LANES, E2 = (g->out[2] - 1) * g->stride[2] + 2 * g->dil[2] + 1, R = 2 * g->dil[1] + 1;
    const int64_t e2a = g->pad[2] < E2 ? g->pad[2] : E2, e2b0 = g->in[2] + g->pad[2];
    const int64_t e2b = e2b0 > E2 ? E2 : e2b0 < e2a ? e2a : e2b0;
    const int64_t xes = s->x_bf16 ? 2 : 4, ges = s->gy_bf16 ? 2 : 4, step = g->stride[2] * L, d2 = g->dil[2] * L;
    int64_t tag[R]; /* the input row each slot holds */
    for (int64_t r = 0; r < R; r++) tag[r] = -1 - g->pad[1] - R; /* none: below every row read */
    dw_vf a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, a4 = {0}, a5 = {0}, a6 = {0}, a7 = {0}, a8 = {0};
    for (int64_t z1 = z1a; z1 < z1b; z1++) {
        const float *rp[3];
        for (int k1 = 0; k1 < 3; k1++) {
            const int64_t i1 = z1 * g->stride[1] - g->pad[1] + k1 * g->dil[1], slot = (i1 % R + R) % R;
            float *dst = ring + slot * E2 * L;
            rp[k1] = dst;
            if (tag[slot] == i1) continue;
            tag[slot] = i1;
            if (i1 < 0 || i1 >= g->in[1]) {
                memset(dst, 0, (size_t)(E2 * L) * sizeof(float));
                continue;
            }
            for (int64_t e2 = 0; e2 < e2a; e2++) dw_st(dst + e2 * L, (dw_vf){0}); /* a position or two */
            for (int64_t e2 = e2b; e2 < E2; e2++) dw_st(dst + e2 * L, (dw_vf){0});
            const char *p = s->x + (i1 * s->xs[0] + (e2a - g->pad[2]) * s->xs[1]) * xes;
            for (int64_t e2 = e2a; e2 < e2b; e2++, p += s->xs[1] * xes) {
                dw_st(dst + e2 * L, dw_float(dw_rne_ftz(dw_ld_lanes(p, s->x_bf16))));
            }
        }
        const float *p0 = rp[0], *p1 = rp[1], *p2 = rp[2];
        const char *gp = s->gy + z1 * s->gs[0] * ges;
        for (int64_t z2 = 0; z2 < g->out[2]; z2++, gp += s->gs[1] * ges, p0 += step, p1 += step, p2 += step) {
            const dw_vf v = dw_float(dw_rne_ftz(dw_ld_lanes(gp, s->gy_bf16)));
            a0 += v * dw_ld(p0), a1 += v * dw_ld(p0 + d2), a2 += v * dw_ld(p0 + 2 * d2);
            a3 += v * dw_ld(p1), a4 += v * dw_ld(p1 + d2), a5 += v * dw_ld(p1 + 2 * d2);
            a6 += v * dw_ld(p2), a7 += v * dw_ld(p2 + d2), a8 += v * dw_ld(p2 + 2 * d2);
        }
    }
    dw_st(hi, a0), dw_st(hi + 16, a1), dw_st(hi + 32, a2), dw_st(hi + 48, a3), dw_st(hi + 64, a4);
    dw_st(hi + 80, a5), dw_st(hi + 96, a6), dw_st(hi + 112, a7), dw_st(hi + 128, a8);
}
