/* reduce_arg.c — vt_reduce_arg: max/min with their first index along one
 * dim. Values compare exactly in float, double or int64 (every input dtype
 * widens exactly to one of them); ties keep the first index and the first
 * NaN wins, as PyTorch. Each line is walked in order by one thread. */
#include "reduce_lines.h"

#define ARG_GRAIN 32768

typedef struct arg_ctx {
    vt_lines g;
    int is_max;
    vt_dtype in_dt, cls_dt;
    const char *in_base;
    char *vbase, *ibase; /* NULL when not wanted */
    vt_dtype v_dt;
    size_t in_es, v_es;
} arg_ctx;

static void put(const arg_ctx *c, int64_t voff, int64_t ioff, const void *best, const int64_t *idx, int64_t n,
                int64_t vs, int64_t is) {
    if (c->vbase) vt_convert(c->cls_dt, best, 1, c->v_dt, c->vbase + voff * (int64_t)c->v_es, vs, n);
    if (c->ibase) vt_convert(VT_I64, idx, 1, VT_I64, c->ibase + ioff * 8, is, n);
}

#define NAN_FP(v) ((v) != (v))
#define NAN_INT(v) 0

/* take: x replaces best (not once best is NaN; a NaN x always; else strictly better). */
#define DEFINE_ARG(SFX, T, ISNAN)                                                                                 \
    static void line_##SFX(const arg_ctx *c, int64_t o) {                                                       \
        const vt_lines *g = &c->g;                                                                               \
        int64_t ioff, voff, xoff;                                                                                \
        vt_lines_offsets(g, o, g->nk, &ioff, &voff, &xoff);                                                      \
        _Alignas(64) T buf[VTL_CHUNK];                                                                           \
        T best = 0;                                                                                              \
        int64_t bi = 0;                                                                                          \
        for (int64_t j0 = 0; j0 < g->len; j0 += VTL_CHUNK) {                                                     \
            int64_t m = g->len - j0 < VTL_CHUNK ? g->len - j0 : VTL_CHUNK;                                       \
            vt_convert(c->in_dt, c->in_base + (ioff + j0 * g->sin) * (int64_t)c->in_es, g->sin, c->cls_dt, buf, \
                       1, m);                                                                                    \
            int64_t i = 0;                                                                                       \
            if (j0 == 0) best = buf[0], i = 1;                                                                   \
            if (ISNAN(best)) break;                                                                              \
            if (c->is_max) {                                                                                     \
                for (; i < m; i++)                                                                               \
                    if (buf[i] > best || ISNAN(buf[i])) {                                                        \
                        best = buf[i], bi = j0 + i;                                                              \
                        if (ISNAN(best)) break;                                                                  \
                    }                                                                                            \
            } else {                                                                                             \
                for (; i < m; i++)                                                                               \
                    if (buf[i] < best || ISNAN(buf[i])) {                                                        \
                        best = buf[i], bi = j0 + i;                                                              \
                        if (ISNAN(best)) break;                                                                  \
                    }                                                                                            \
            }                                                                                                    \
            if (ISNAN(best)) break;                                                                              \
        }                                                                                                        \
        put(c, voff, xoff, &best, &bi, 1, 1, 1);                                                                 \
    }                                                                                                            \
    static void tile_##SFX(const arg_ctx *c, int64_t t) {                                                       \
        const vt_lines *g = &c->g;                                                                               \
        int nk = g->nk;                                                                                          \
        int64_t outer = t / g->tiles, lane0 = t % g->tiles * VTL_LANES;                                          \
        int64_t w = g->lane_len - lane0 < VTL_LANES ? g->lane_len - lane0 : VTL_LANES;                           \
        int64_t ioff, voff, xoff;                                                                                \
        vt_lines_offsets(g, outer, nk - 1, &ioff, &voff, &xoff);                                                 \
        ioff += lane0 * g->kin[nk - 1], voff += lane0 * g->ko[0][nk - 1], xoff += lane0 * g->ko[1][nk - 1];      \
        _Alignas(64) T best[VTL_LANES], row[VTL_LANES];                                                          \
        int64_t bi[VTL_LANES];                                                                                   \
        for (int64_t j = 0; j < g->len; j++) {                                                                   \
            vt_convert(c->in_dt, c->in_base + (ioff + j * g->sin) * (int64_t)c->in_es, g->kin[nk - 1], c->cls_dt, \
                       j ? (void *)row : (void *)best, 1, w);                                                    \
            if (j == 0) {                                                                                        \
                for (int64_t l = 0; l < w; l++) bi[l] = 0;                                                       \
                continue;                                                                                        \
            }                                                                                                    \
            for (int64_t l = 0; l < w; l++) {                                                                    \
                T x = row[l];                                                                                    \
                int take = !ISNAN(best[l]) && (ISNAN(x) || (c->is_max ? x > best[l] : x < best[l]));             \
                if (take) best[l] = x, bi[l] = j;                                                                \
            }                                                                                                    \
        }                                                                                                        \
        put(c, voff, xoff, best, bi, w, g->ko[0][nk - 1], g->ko[1][nk - 1]);                                     \
    }

DEFINE_ARG(f, float, NAN_FP)
DEFINE_ARG(d, double, NAN_FP)
DEFINE_ARG(i, int64_t, NAN_INT)

static void arg_range(void *vctx, int64_t b, int64_t e) {
    const arg_ctx *c = vctx;
    for (int64_t k = b; k < e; k++) {
        switch (c->cls_dt) {
        case VT_F32: c->g.vertical ? tile_f(c, k) : line_f(c, k); break;
        case VT_F64: c->g.vertical ? tile_d(c, k) : line_d(c, k); break;
        default: c->g.vertical ? tile_i(c, k) : line_i(c, k); break;
        }
    }
}

vt_status vt_reduce_arg(int is_max, const vt_tensor *values, const vt_tensor *indices, const vt_tensor *in, int dim) {
    vt_status s = vt_reduce_arg_check(is_max, values, indices, in, dim);
    if (s != VT_OK) return s;
    if (!values && !indices) return VT_OK;
    int d;
    vt_wrap_dim(dim, in->ndim, &d);
    arg_ctx c;
    memset(&c, 0, sizeof c);
    vt_lines_init(&c.g, in, in->ndim > 0 ? d : -1, values, indices);
    if (c.g.nlines == 0) return VT_OK;
    c.is_max = is_max != 0;
    c.in_dt = in->dtype;
    c.in_es = vt_dtype_size(in->dtype);
    c.in_base = (const char *)vt_base(in);
    c.cls_dt = in->dtype == VT_F64 ? VT_F64 : vt_dtype_is_float(in->dtype) ? VT_F32 : VT_I64;
    if (values) {
        c.v_dt = values->dtype;
        c.v_es = vt_dtype_size(values->dtype);
        c.vbase = vt_base(values);
    }
    if (indices) c.ibase = (char *)indices->data + indices->offset * 8;
    int64_t work = c.g.vertical ? c.g.len * VTL_LANES : c.g.len;
    int64_t grain = ARG_GRAIN / (work > 0 ? work : 1);
    vt_parallel_for(c.g.groups, grain < 1 ? 1 : grain, arg_range, &c);
    return VT_OK;
}
