/* scan.c — vt_scan: inclusive cumsum, cumprod and logcumsumexp along one
 * dim. The running value is carried in double for every float compute
 * dtype (PyTorch's CPU accumulate type) and in wrapping int64 otherwise;
 * each output is rounded to the compute dtype, then converted to out's. */
#include "reduce_lines.h"

#define SCAN_GRAIN 32768

typedef struct scan_ctx {
    vt_lines g;
    vt_scan_op op;
    vt_dtype in_dt, out_dt, compute, acc_dt;
    const char *in_base;
    char *out_base;
    size_t in_es, out_es;
} scan_ctx;

/* PyTorch's _log_add_exp_helper, with NaN propagating from either side. */
static inline double log_add_exp(double x, double acc) {
    if (x != x || acc != acc) return NAN;
    double mn = x < acc ? x : acc, mx = x < acc ? acc : x;
    if (mn != mx || isfinite(mn)) return mx + log1p(exp(mn - mx));
    return x;
}

/* Scan m staged values in place, continuing from *acc. */
static void scan_f(vt_scan_op op, double *v, int64_t m, double *acc) {
    double a = *acc;
    switch (op) {
    case VT_SCAN_CUMSUM: for (int64_t i = 0; i < m; i++) v[i] = a = a + v[i]; break;
    case VT_SCAN_CUMPROD: for (int64_t i = 0; i < m; i++) v[i] = a = a * v[i]; break;
    default: for (int64_t i = 0; i < m; i++) v[i] = a = log_add_exp(v[i], a); break;
    }
    *acc = a;
}

static void scan_i(vt_scan_op op, int64_t *v, int64_t m, uint64_t *acc) {
    uint64_t a = *acc;
    if (op == VT_SCAN_CUMSUM) {
        for (int64_t i = 0; i < m; i++) v[i] = (int64_t)(a += (uint64_t)v[i]);
    } else {
        for (int64_t i = 0; i < m; i++) v[i] = (int64_t)(a *= (uint64_t)v[i]);
    }
    *acc = a;
}

static double init_f(vt_scan_op op) { return op == VT_SCAN_CUMPROD ? 1.0 : op == VT_SCAN_CUMSUM ? 0.0 : -INFINITY; }

static void scan_line(const scan_ctx *c, int64_t o) {
    const vt_lines *g = &c->g;
    int64_t ioff, ooff, unused;
    vt_lines_offsets(g, o, g->nk, &ioff, &ooff, &unused);
    _Alignas(64) unsigned char buf[VTL_CHUNK * 8], tmp[VTL_CHUNK * 8];
    double af = init_f(c->op);
    uint64_t ai = c->op == VT_SCAN_CUMPROD;
    /* Staged before written: out may alias in exactly (an in-place scan). */
    for (int64_t j0 = 0; j0 < g->len; j0 += VTL_CHUNK) {
        int64_t m = g->len - j0 < VTL_CHUNK ? g->len - j0 : VTL_CHUNK;
        vt_lines_convert(c->in_dt, c->in_base + (ioff + j0 * g->sin) * (int64_t)c->in_es, g->sin, c->compute,
                         c->acc_dt, buf, 1, m, tmp);
        if (c->acc_dt == VT_F64) scan_f(c->op, (double *)buf, m, &af);
        else scan_i(c->op, (int64_t *)buf, m, &ai);
        vt_lines_convert(c->acc_dt, buf, 1, c->compute, c->out_dt,
                         c->out_base + (ooff + j0 * g->so[0]) * (int64_t)c->out_es, g->so[0], m, tmp);
    }
}

static void scan_tile(const scan_ctx *c, int64_t t) {
    const vt_lines *g = &c->g;
    int nk = g->nk;
    int64_t outer = t / g->tiles, lane0 = t % g->tiles * VTL_LANES;
    int64_t w = g->lane_len - lane0 < VTL_LANES ? g->lane_len - lane0 : VTL_LANES;
    int64_t ioff, ooff, unused;
    vt_lines_offsets(g, outer, nk - 1, &ioff, &ooff, &unused);
    int64_t sk = g->kin[nk - 1], sko = g->ko[0][nk - 1];
    ioff += lane0 * sk, ooff += lane0 * sko;
    _Alignas(64) unsigned char row[VTL_LANES * 8], tmp[VTL_LANES * 8];
    double af[VTL_LANES];
    uint64_t ai[VTL_LANES];
    for (int l = 0; l < VTL_LANES; l++) af[l] = init_f(c->op), ai[l] = c->op == VT_SCAN_CUMPROD;
    for (int64_t j = 0; j < g->len; j++) {
        vt_lines_convert(c->in_dt, c->in_base + (ioff + j * g->sin) * (int64_t)c->in_es, sk, c->compute, c->acc_dt,
                         row, 1, w, tmp);
        if (c->acc_dt == VT_F64) {
            double *v = (double *)row;
            for (int64_t l = 0; l < w; l++) scan_f(c->op, v + l, 1, af + l);
        } else {
            int64_t *v = (int64_t *)row;
            for (int64_t l = 0; l < w; l++) scan_i(c->op, v + l, 1, ai + l);
        }
        vt_lines_convert(c->acc_dt, row, 1, c->compute, c->out_dt,
                         c->out_base + (ooff + j * g->so[0]) * (int64_t)c->out_es, sko, w, tmp);
    }
}

static void scan_range(void *vctx, int64_t b, int64_t e) {
    const scan_ctx *c = vctx;
    for (int64_t k = b; k < e; k++) c->g.vertical ? scan_tile(c, k) : scan_line(c, k);
}

vt_status vt_scan(vt_scan_op op, const vt_tensor *out, const vt_tensor *in, int dim, vt_dtype compute) {
    vt_status s = vt_scan_check(op, out, in, dim, compute);
    if (s != VT_OK) return s;
    int d;
    vt_wrap_dim(dim, in->ndim, &d);
    scan_ctx c;
    memset(&c, 0, sizeof c);
    vt_lines_init(&c.g, in, in->ndim > 0 ? d : -1, out, NULL);
    if (c.g.nlines == 0 || c.g.len == 0) return VT_OK;
    c.op = op;
    c.in_dt = in->dtype;
    c.out_dt = out->dtype;
    c.compute = compute;
    c.acc_dt = vt_dtype_is_float(compute) ? VT_F64 : VT_I64;
    c.in_es = vt_dtype_size(in->dtype);
    c.out_es = vt_dtype_size(out->dtype);
    c.in_base = (const char *)vt_base(in);
    c.out_base = vt_base(out);
    int64_t work = c.g.vertical ? c.g.len * VTL_LANES : c.g.len;
    int64_t grain = SCAN_GRAIN / (work > 0 ? work : 1);
    vt_parallel_for(c.g.groups, grain < 1 ? 1 : grain, scan_range, &c);
    return VT_OK;
}
