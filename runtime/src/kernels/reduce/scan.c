/* scan.c — vt_scan: inclusive cumsum, cumprod and logcumsumexp along one
 * dim. The running value is carried in PyTorch's CPU accumulate type
 * (at::acc_type<T, false>): double for f32 and f64 compute, float for bf16
 * and f16, wrapping int64 otherwise; each output is rounded to the compute
 * dtype, then converted to out's. */
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

/* The same in float (the accumulate type of bf16 and f16). */
static inline float log_add_expf(float x, float acc) {
    if (x != x || acc != acc) return NAN;
    float mn = x < acc ? x : acc, mx = x < acc ? acc : x;
    if (mn != mx || isfinite(mn)) return mx + log1pf(expf(mn - mx));
    return x;
}

/* Scan m staged values in place, continuing from *acc: in double
 * (scan_f) and in float (scan_ff). */
#define SCAN_FLOAT(NAME, T, LOG_ADD_EXP)                                                                      \
    static void NAME(vt_scan_op op, T *v, int64_t m, T *acc) {                                                 \
        T a = *acc;                                                                                            \
        switch (op) {                                                                                          \
        case VT_SCAN_CUMSUM: for (int64_t i = 0; i < m; i++) v[i] = a = a + v[i]; break;                       \
        case VT_SCAN_CUMPROD: for (int64_t i = 0; i < m; i++) v[i] = a = a * v[i]; break;                      \
        default: for (int64_t i = 0; i < m; i++) v[i] = a = LOG_ADD_EXP(v[i], a); break;                       \
        }                                                                                                      \
        *acc = a;                                                                                              \
    }
SCAN_FLOAT(scan_f, double, log_add_exp)
SCAN_FLOAT(scan_ff, float, log_add_expf)
#undef SCAN_FLOAT

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
    float aff = (float)init_f(c->op);
    uint64_t ai = c->op == VT_SCAN_CUMPROD;
    /* Staged before written: out may alias in exactly (an in-place scan). */
    for (int64_t j0 = 0; j0 < g->len; j0 += VTL_CHUNK) {
        int64_t m = g->len - j0 < VTL_CHUNK ? g->len - j0 : VTL_CHUNK;
        vt_lines_convert(c->in_dt, c->in_base + (ioff + j0 * g->sin) * (int64_t)c->in_es, g->sin, c->compute,
                         c->acc_dt, buf, 1, m, tmp);
        if (c->acc_dt == VT_F64) scan_f(c->op, (double *)buf, m, &af);
        else if (c->acc_dt == VT_F32) scan_ff(c->op, (float *)(void *)buf, m, &aff);
        else scan_i(c->op, (int64_t *)buf, m, &ai);
        vt_lines_convert(c->acc_dt, buf, 1, c->compute, c->out_dt,
                         c->out_base + (ooff + j0 * g->so[0]) * (int64_t)c->out_es, g->so[0], m, tmp);
    }
}

#define SCAN_GROUP 8 /* the named running values below */
#define GROUP_CHUNK 256

/* The staged lockstep of scan_lines in accumulate type ACC (vt_dtype ADT). */
#define SCAN_GROUP_STAGED(NAME, ACC, ADT)                                                                     \
    static void NAME(const scan_ctx *c, const int64_t *ioff, const int64_t *ooff, int n) {                     \
        const vt_lines *g = &c->g;                                                                             \
        _Alignas(64) ACC buf[SCAN_GROUP][GROUP_CHUNK];                                                         \
        _Alignas(64) unsigned char tmp[GROUP_CHUNK * 8];                                                       \
        ACC a[SCAN_GROUP];                                                                                     \
        for (int l = 0; l < SCAN_GROUP; l++) a[l] = (ACC)init_f(c->op);                                        \
        for (int l = n; l < SCAN_GROUP; l++) memset(buf[l], 0, sizeof buf[l]); /* idle lanes run on zeros */    \
        for (int64_t j0 = 0; j0 < g->len; j0 += GROUP_CHUNK) {                                                 \
            int64_t m = g->len - j0 < GROUP_CHUNK ? g->len - j0 : GROUP_CHUNK;                                 \
            for (int l = 0; l < n; l++)                                                                        \
                vt_lines_convert(c->in_dt, c->in_base + (ioff[l] + j0 * g->sin) * (int64_t)c->in_es, g->sin,   \
                                 c->compute, ADT, buf[l], 1, m, tmp);                                          \
            /* named running values: an array indexed in the loop stayed in                                    \
             * memory, every add waiting on a store */                                                         \
            ACC a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3], a4 = a[4], a5 = a[5], a6 = a[6], a7 = a[7];        \
            if (c->op == VT_SCAN_CUMSUM) {                                                                     \
                SCAN_STEP(+)                                                                                   \
            } else {                                                                                           \
                SCAN_STEP(*)                                                                                   \
            }                                                                                                  \
            a[0] = a0, a[1] = a1, a[2] = a2, a[3] = a3, a[4] = a4, a[5] = a5, a[6] = a6, a[7] = a7;            \
            for (int l = 0; l < n; l++)                                                                        \
                vt_lines_convert(ADT, buf[l], 1, c->compute, c->out_dt,                                        \
                                 c->out_base + (ooff[l] + j0 * g->so[0]) * (int64_t)c->out_es, g->so[0], m,   \
                                 tmp);                                                                         \
        }                                                                                                      \
    }
#define SCAN_STEP(OP)                                                                                   \
    for (int64_t i = 0; i < m; i++) {                                                                  \
        buf[0][i] = a0 = a0 OP buf[0][i], buf[1][i] = a1 = a1 OP buf[1][i];                             \
        buf[2][i] = a2 = a2 OP buf[2][i], buf[3][i] = a3 = a3 OP buf[3][i];                             \
        buf[4][i] = a4 = a4 OP buf[4][i], buf[5][i] = a5 = a5 OP buf[5][i];                             \
        buf[6][i] = a6 = a6 OP buf[6][i], buf[7][i] = a7 = a7 OP buf[7][i];                             \
    }
SCAN_GROUP_STAGED(scan_group_f64, double, VT_F64)
SCAN_GROUP_STAGED(scan_group_f32, float, VT_F32)
#undef SCAN_STEP
#undef SCAN_GROUP_STAGED

/* Lines o .. o+n (n <= SCAN_GROUP) of a cumsum or cumprod in lockstep: each
 * line's running value goes through its values in order exactly as
 * scan_line's, the lines' chains side by side so the adds overlap. */
static void scan_lines(const scan_ctx *c, int64_t o, int n) {
    const vt_lines *g = &c->g;
    int64_t ioff[SCAN_GROUP], ooff[SCAN_GROUP], unused;
    for (int l = 0; l < n; l++) vt_lines_offsets(g, o + l, g->nk, &ioff[l], &ooff[l], &unused);
    const vt_dtype dt = c->in_dt;
    if ((dt == VT_F32 || dt == VT_BF16) && c->out_dt == dt && c->compute == dt && g->sin == 1 && g->so[0] == 1 &&
        c->op == VT_SCAN_CUMSUM) {
        /* f32 / bf16 lines read and written where they lie: each value
         * widened, added in the accumulate type (double for f32, float for
         * bf16), the running value rounded into out as the staged path
         * rounds it (an in-place scan reads each value before writing it) */
        const char *x[SCAN_GROUP];
        char *y[SCAN_GROUP];
        for (int l = 0; l < SCAN_GROUP; l++) {
            int k = l < n ? l : 0; /* idle lanes redo line 0's reads, and write nothing */
            x[l] = c->in_base + ioff[k] * (int64_t)c->in_es;
            y[l] = c->out_base + ooff[k] * (int64_t)c->out_es;
        }
#define SCAN_DIRECT(T, ACC, LD, ST)                                                                             \
    do {                                                                                                       \
        const T *x0 = (const T *)(const void *)x[0], *x1 = (const T *)(const void *)x[1],                      \
                *x2 = (const T *)(const void *)x[2], *x3 = (const T *)(const void *)x[3],                      \
                *x4 = (const T *)(const void *)x[4], *x5 = (const T *)(const void *)x[5],                      \
                *x6 = (const T *)(const void *)x[6], *x7 = (const T *)(const void *)x[7];                      \
        T *y0 = (T *)(void *)y[0], *y1 = (T *)(void *)y[1], *y2 = (T *)(void *)y[2], *y3 = (T *)(void *)y[3];  \
        T *y4 = (T *)(void *)y[4], *y5 = (T *)(void *)y[5], *y6 = (T *)(void *)y[6], *y7 = (T *)(void *)y[7];  \
        ACC a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;                                    \
        if (n == SCAN_GROUP) {                                                                                 \
            for (int64_t i = 0; i < g->len; i++) {                                                             \
                a0 += LD(x0[i]), a1 += LD(x1[i]), a2 += LD(x2[i]), a3 += LD(x3[i]);                            \
                a4 += LD(x4[i]), a5 += LD(x5[i]), a6 += LD(x6[i]), a7 += LD(x7[i]);                            \
                y0[i] = ST(a0), y1[i] = ST(a1), y2[i] = ST(a2), y3[i] = ST(a3);                                \
                y4[i] = ST(a4), y5[i] = ST(a5), y6[i] = ST(a6), y7[i] = ST(a7);                                \
            }                                                                                                  \
        } else {                                                                                               \
            for (int l = 0; l < n; l++) {                                                                      \
                const T *xl = (const T *)(const void *)x[l];                                                   \
                T *yl = (T *)(void *)y[l];                                                                     \
                ACC acc = 0;                                                                                   \
                for (int64_t i = 0; i < g->len; i++) yl[i] = ST(acc += LD(xl[i]));                            \
            }                                                                                                  \
        }                                                                                                      \
    } while (0)
#define LD_F(v) ((double)(v))
#define ST_F(v) ((float)(v))
#define LD_H(v) vt_bf16_to_f32(v)
#define ST_H(v) vt_f32_to_bf16(v)
        if (dt == VT_F32) SCAN_DIRECT(float, double, LD_F, ST_F);
        else SCAN_DIRECT(uint16_t, float, LD_H, ST_H);
#undef SCAN_DIRECT
#undef LD_F
#undef ST_F
#undef LD_H
#undef ST_H
        return;
    }
    if (c->acc_dt == VT_F64) scan_group_f64(c, ioff, ooff, n);
    else scan_group_f32(c, ioff, ooff, n);
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
    float aff[VTL_LANES];
    uint64_t ai[VTL_LANES];
    for (int l = 0; l < VTL_LANES; l++) af[l] = init_f(c->op), aff[l] = (float)af[l], ai[l] = c->op == VT_SCAN_CUMPROD;
    for (int64_t j = 0; j < g->len; j++) {
        vt_lines_convert(c->in_dt, c->in_base + (ioff + j * g->sin) * (int64_t)c->in_es, sk, c->compute, c->acc_dt,
                         row, 1, w, tmp);
        if (c->acc_dt == VT_F64) {
            double *v = (double *)row;
            for (int64_t l = 0; l < w; l++) scan_f(c->op, v + l, 1, af + l);
        } else if (c->acc_dt == VT_F32) {
            float *v = (float *)(void *)row;
            for (int64_t l = 0; l < w; l++) scan_ff(c->op, v + l, 1, aff + l);
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
    if (!c->g.vertical && c->acc_dt != VT_I64 && c->op != VT_SCAN_LOGCUMSUMEXP) {
        for (int64_t k = b; k < e; k += SCAN_GROUP) scan_lines(c, k, e - k < SCAN_GROUP ? (int)(e - k) : SCAN_GROUP);
        return;
    }
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
    c.acc_dt = !vt_dtype_is_float(compute) ? VT_I64 : compute == VT_BF16 || compute == VT_F16 ? VT_F32 : VT_F64;
    c.in_es = vt_dtype_size(in->dtype);
    c.out_es = vt_dtype_size(out->dtype);
    c.in_base = (const char *)vt_base(in);
    c.out_base = vt_base(out);
    int64_t work = c.g.vertical ? c.g.len * VTL_LANES : c.g.len;
    int64_t grain = SCAN_GRAIN / (work > 0 ? work : 1);
    vt_parallel_for(c.g.groups, grain < 1 ? 1 : grain, scan_range, &c);
    return VT_OK;
}
