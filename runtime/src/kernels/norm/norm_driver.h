/* norm_driver.h — the normalisation drivers, written once for the compute
 * type T (float or double) and included by norm.c for each. Every layer is
 * the same walk: "units" (a layer-norm row, a group of one sample, a batch
 * channel) made of R runs of L contiguous elements; statistics per unit in
 * fixed chunks of CH elements whose sums meet in double, so the result
 * depends on the shapes alone, never on the threads.
 * Expects T, SFX (f32 / f64), TDT (the vt_dtype of T), KT (kernel table). */

#define NJ(a, b) a##_##b
#define NJOIN(a, b) NJ(a, b)
#define N_(name) NJOIN(name, SFX)

/* Pointer to n elements of tensor data at element offset off, as T: the
 * memory itself when it holds T, else converted into buf. */
static const T *N_(load)(const char *base, vt_dtype dt, int64_t off, int64_t n, T *buf) {
    if (dt == TDT) return (const T *)base + off;
    vt_convert(dt, base + off * (int64_t)vt_dtype_size(dt), 1, TDT, buf, 1, n);
    return buf;
}

/* Where a result of n elements is computed: the output itself when it
 * holds T, else buf (then N_(flush) converts it). */
static T *N_(target)(char *base, vt_dtype dt, int64_t off, T *buf) {
    return dt == TDT ? (T *)base + off : buf;
}
static void N_(flush)(char *base, vt_dtype dt, int64_t off, int64_t n, const T *buf) {
    if (dt != TDT) vt_convert(TDT, buf, 1, dt, base + off * (int64_t)vt_dtype_size(dt), 1, n);
}

typedef struct N_(fwd_ctx) {
    const norm_geo *g;
    const KT *k;
    const char *x;
    vt_dtype xdt;
    char *y;
    vt_dtype ydt;
    double eps;
    int rms, have_stats;
    const T *w, *b; /* per element (vector mode) or per channel; nullable */
    T *mean, *rstd; /* per unit: outputs, or inputs when have_stats */
    T *var;         /* per unit (nullable): the biased variance */
    const vt_source *src; /* where x comes from (NULL: memory; else units of one run, ustride L) */
    _Atomic int *oom;
} N_(fwd_ctx);

/* Units whose statistics one pass computes together: a unit's sums, its
 * division and square root are one chain of dependent steps, and the
 * units of a block are independent, so their chains overlap (a layer-norm
 * row of 512 took about 400 cycles one at a time). Each unit's arithmetic
 * is the same as alone. Units read where they lie only (x holds T, no
 * source): a staged unit has one buffer. */
#define NORM_BLOCK 8

static void N_(fwd_range)(void *p, int64_t u0, int64_t u1) {
    const N_(fwd_ctx) *c = p;
    const norm_geo *g = c->g;
    const KT *k = c->k;
    T xb[NORM_CH], yb[NORM_CH];
    const size_t xes = vt_dtype_size(c->xdt);
    /* From a source: units of up to VT_SOURCE_MAX values are read several
     * at a time (consecutive units are consecutive values) and used where
     * the source leaves them, valid until the next read; a longer unit is
     * staged in row, read as often as the walk reads memory. */
    const int64_t per_read = c->src && g->L <= VT_SOURCE_MAX ? VT_SOURCE_MAX / g->L : 0;
    const char *read = NULL;
    int64_t read_first = 0, read_end = 0; /* the units read holds */
    char *row = NULL;
    if (c->src && !per_read && !(row = malloc((size_t)g->L * xes))) {
        atomic_store(c->oom, 1);
        return;
    }
    const int64_t block = c->xdt == TDT && !c->src ? NORM_BLOCK : 1;
    for (int64_t u = u0; u < u1; u += block) {
        const int64_t nb = u1 - u < block ? u1 - u : block;
        const char *xu[NORM_BLOCK]; /* x of unit u + i is at xu[i] + (xo[i] + element offset in the unit) */
        int64_t xo[NORM_BLOCK];
        const T *whole[NORM_BLOCK];
        T m[NORM_BLOCK], r[NORM_BLOCK];
        double mean[NORM_BLOCK], q[NORM_BLOCK];
        for (int64_t i = 0; i < nb; i++) {
            const int64_t v = u + i, ub = v * g->ustride;
            xu[i] = c->x, xo[i] = ub;
            if (per_read) {
                if (v >= read_end) {
                    read_first = v;
                    read_end = u1 - v < per_read ? u1 : v + per_read;
                    read = c->src->read(c->src->ctx, ub, (read_end - v) * g->L);
                }
                xu[i] = read + (size_t)((v - read_first) * g->L) * xes, xo[i] = 0;
            } else if (row) {
                for (int64_t j = 0; j < g->L; j += VT_SOURCE_MAX) {
                    const int64_t n = g->L - j < VT_SOURCE_MAX ? g->L - j : VT_SOURCE_MAX;
                    memcpy(row + (size_t)j * xes, c->src->read(c->src->ctx, ub + j, n), (size_t)n * xes);
                }
                xu[i] = row, xo[i] = 0;
            }
            /* a unit of one chunk (a layer-norm row) is loaded (converted
             * from bf16 / f16) once for its three passes */
            whole[i] = g->R == 1 && g->L <= NORM_CH ? N_(load)(xu[i], c->xdt, xo[i], g->L, xb) : NULL;
        }
#define N_CHUNK(i, rr, j, n) \
    (whole[i] ? whole[i] + (j) : N_(load)(xu[i], c->xdt, xo[i] + (rr) * g->rstride + (j), n, xb))
        if (c->have_stats) {
            for (int64_t i = 0; i < nb; i++) m[i] = c->mean[u + i], r[i] = c->rstd[u + i];
        } else {
            for (int64_t i = 0; i < nb; i++) {
                double s = 0;
                mean[i] = 0;
                if (!c->rms) {
                    for (int64_t rr = 0; rr < g->R; rr++)
                        for (int64_t j = 0; j < g->L; j += NORM_CH) {
                            int64_t n = g->L - j < NORM_CH ? g->L - j : NORM_CH;
                            s += (double)k->sum(N_CHUNK(i, rr, j, n), n);
                        }
                    mean[i] = s / (double)g->count;
                }
            }
            for (int64_t i = 0; i < nb; i++) {
                q[i] = 0;
                for (int64_t rr = 0; rr < g->R; rr++)
                    for (int64_t j = 0; j < g->L; j += NORM_CH) {
                        int64_t n = g->L - j < NORM_CH ? g->L - j : NORM_CH;
                        q[i] += (double)k->sqdev(N_CHUNK(i, rr, j, n), n, (T)mean[i]);
                    }
            }
            for (int64_t i = 0; i < nb; i++) {
                double var = q[i] / (double)g->count;
                m[i] = (T)mean[i];
                r[i] = (T)(1.0 / sqrt(var + c->eps));
                if (c->mean) c->mean[u + i] = m[i];
                if (c->rstd) c->rstd[u + i] = r[i];
                if (c->var) c->var[u + i] = (T)var;
            }
        }
        for (int64_t i = 0; i < nb; i++) {
            const int64_t ub = (u + i) * g->ustride;
            for (int64_t rr = 0; rr < g->R; rr++) {
                int64_t ch = g->cmod ? ((u + i) % g->cmod) * g->cmul + rr * g->rmul : 0;
                T a = r[i], sh = 0;
                if (g->cmod) { /* per-channel scale and shift, as PyTorch's kernels */
                    if (c->w) a = r[i] * c->w[ch];
                    sh = (c->b ? c->b[ch] : (T)0) - m[i] * a;
                }
                for (int64_t j = 0; j < g->L; j += NORM_CH) {
                    int64_t n = g->L - j < NORM_CH ? g->L - j : NORM_CH, off = ub + rr * g->rstride + j;
                    const T *xs = N_CHUNK(i, rr, j, n);
                    T *ys = N_(target)(c->y, c->ydt, off, yb);
                    if (g->cmod) k->scale_shift(ys, xs, n, a, sh);
                    else k->affine(ys, xs, n, c->rms ? (T)0 : m[i], r[i], c->w ? c->w + j : NULL, c->b ? c->b + j : NULL);
                    N_(flush)(c->y, c->ydt, off, n, ys);
                }
            }
        }
#undef N_CHUNK
    }
    free(row);
}

/* Backward of the channel layouts (group norm, batch norm): per-run sums
 * of dy and dy * (x - m) (kept for the parameter gradients), the unit's
 * coefficients, then dx = rstd * w * dy + c2 * (x - m) + c3. */
typedef struct N_(bwd_ctx) {
    const norm_geo *g;
    const KT *k;
    const char *x, *dy;
    vt_dtype xdt, dydt;
    char *dx;
    vt_dtype dxdt;
    const T *w, *mean, *rstd;
    int stats_fixed;      /* batch norm eval: statistics are constants */
    int rms;              /* no mean: the constant term vanishes */
    double *run_sg, *run_sgx; /* [U * R] */
    T *dwp, *dbp;         /* vector mode: per-block partials [nblocks * L] */
    int64_t block_rows;
} N_(bwd_ctx);

static void N_(bwd_unit)(const N_(bwd_ctx) *c, int64_t u, T *xb, T *db_, T *ob, T *dwp, T *dbp) {
    const norm_geo *g = c->g;
    const KT *k = c->k;
    const int64_t ub = u * g->ustride;
    const T m = c->mean ? c->mean[u] : (T)0, r = c->rstd[u];
    double A = 0, B = 0;
    for (int64_t rr = 0; rr < g->R; rr++) {
        int64_t ch = g->cmod ? (u % g->cmod) * g->cmul + rr * g->rmul : 0;
        double sg = 0, sgx = 0;
        for (int64_t j = 0; j < g->L; j += NORM_CH) {
            int64_t n = g->L - j < NORM_CH ? g->L - j : NORM_CH, off = ub + rr * g->rstride + j;
            T a, b;
            const T *w = g->cmod ? NULL : (c->w ? c->w + j : NULL);
            k->grad_sums(N_(load)(c->dy, c->dydt, off, n, db_), N_(load)(c->x, c->xdt, off, n, xb), w, n, m, &a, &b);
            sg += a, sgx += b;
        }
        if (g->cmod) {
            c->run_sg[u * g->R + rr] = sg;
            c->run_sgx[u * g->R + rr] = sgx;
            double wc = c->w ? (double)c->w[ch] : 1.0;
            A += wc * sg, B += wc * sgx;
        } else {
            A += sg, B += sgx;
        }
    }
    T c2 = 0, c3 = 0;
    if (!c->stats_fixed) {
        double rd = (double)r, cnt = (double)g->count;
        c2 = (T)(-rd * rd * rd * B / cnt);
        c3 = c->rms ? (T)0 : (T)(-rd * A / cnt);
    }
    for (int64_t rr = 0; rr < g->R; rr++) {
        int64_t ch = g->cmod ? (u % g->cmod) * g->cmul + rr * g->rmul : 0;
        T a = r;
        if (g->cmod && c->w) a = r * c->w[ch];
        for (int64_t j = 0; j < g->L; j += NORM_CH) {
            int64_t n = g->L - j < NORM_CH ? g->L - j : NORM_CH, off = ub + rr * g->rstride + j;
            const T *dys = N_(load)(c->dy, c->dydt, off, n, db_);
            const T *xs = N_(load)(c->x, c->xdt, off, n, xb);
            if (c->dx) {
                T *o = N_(target)(c->dx, c->dxdt, off, ob);
                k->grad_in(o, dys, xs, g->cmod ? NULL : (c->w ? c->w + j : NULL), n, a, m, c2, c3);
                N_(flush)(c->dx, c->dxdt, off, n, o);
            }
            if (!g->cmod && (dwp || dbp)) k->grad_params(dwp ? dwp + j : NULL, dbp ? dbp + j : NULL, dys, xs, n, m, r);
        }
    }
}

static void N_(bwd_range)(void *p, int64_t t0, int64_t t1) {
    const N_(bwd_ctx) *c = p;
    const norm_geo *g = c->g;
    T xb[3 * NORM_CH];
    for (int64_t t = t0; t < t1; t++) {
        if (g->cmod) {
            N_(bwd_unit)(c, t, xb, xb + NORM_CH, xb + 2 * NORM_CH, NULL, NULL);
            continue;
        }
        /* vector mode: t is a block of rows sharing one partial dw / db */
        T *dwp = c->dwp ? c->dwp + t * g->L : NULL, *dbp = c->dbp ? c->dbp + t * g->L : NULL;
        if (dwp) memset(dwp, 0, (size_t)g->L * sizeof(T));
        if (dbp) memset(dbp, 0, (size_t)g->L * sizeof(T));
        int64_t u1 = (t + 1) * c->block_rows < g->U ? (t + 1) * c->block_rows : g->U;
        for (int64_t u = t * c->block_rows; u < u1; u++) N_(bwd_unit)(c, u, xb, xb + NORM_CH, xb + 2 * NORM_CH, dwp, dbp);
    }
}

#undef N_
#undef NJOIN
#undef NJ
