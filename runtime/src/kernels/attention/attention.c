/* attention.c — vt_sdpa_forward / vt_sdpa_backward: flash-attention style
 * drivers. Scores are computed a BQ x BK tile at a time on the MXU engine's
 * block kernels (AMX, AVX512-BF16, ... or portable C), the softmax runs
 * online over key blocks with f32 statistics, and the [L, S] score matrix
 * never exists. Each work unit is independent and summed in a fixed order,
 * so results do not depend on the thread count. */
#include <stdatomic.h>
#include <stdlib.h>

#include "attention.h"
#include "kernels/mxu/mxu_local.h"

#define BQ VT_ATTN_BQ
#define BK VT_ATTN_BK

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
static int nseg_of(vt_precision prec) { return vt_mxu_nslots(vt_mxu_nlow(prec)); }

/* ------------------------------------------------------------ dispatch */

static _Atomic(const vt_attn_rows *) rows_active;

unsigned vt_attn_select_isa(unsigned mask) {
    const unsigned isa = vt_isa_widest(mask);
    atomic_store(&rows_active, VT_ISA_TABLE(isa, &vt_attn_rows_portable, &vt_attn_rows_avx2, &vt_attn_rows_avx512));
    return isa;
}

const vt_attn_rows *vt_attn_rows_active(void) {
    const vt_attn_rows *r = atomic_load(&rows_active);
    if (!r) {
        vt_kernels_ready();
        r = atomic_load(&rows_active);
    }
    return r;
}

/* ------------------------------------------------------------ checks */

static void shape4(const vt_tensor *t, vt_tensor *o) {
    *o = *t;
    if (t->ndim == 3) {
        for (int d = 3; d > 0; d--) o->sizes[d] = t->sizes[d - 1], o->strides[d] = t->strides[d - 1];
        o->sizes[0] = 1, o->strides[0] = 0, o->ndim = 4;
    }
}

static vt_status want_shape(const char *fn, const char *what, const vt_tensor *t, int64_t s0, int64_t s1, int64_t s2,
                            int64_t s3) {
    if (t->sizes[0] != s0 || t->sizes[1] != s1 || t->sizes[2] != s2 || t->sizes[3] != s3)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld, %lld]",
                            fn, what, (long long)t->sizes[0], (long long)t->sizes[1], (long long)t->sizes[2],
                            (long long)t->sizes[3], (long long)s0, (long long)s1, (long long)s2, (long long)s3);
    return VT_OK;
}

static vt_status operand(const char *fn, const char *what, const vt_tensor *t, int ndim, vt_dtype dt, vt_tensor *o) {
    if (!t) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, what);
    vt_status s = vt_tensor_validate(t, what);
    if (s != VT_OK) return vt_error_prefix(s, fn);
    if (t->ndim != ndim)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s must have %d dimensions like query, got %d", fn, what, ndim,
                            (int)t->ndim);
    if (t->dtype != dt)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s has dtype %s, expected %s", fn, what,
                            vt_dtype_name(t->dtype), vt_dtype_name(dt));
    shape4(t, o);
    return VT_OK;
}

vt_status vt_attn_setup(vt_attn_problem *p, const char *fn, int backward, const vt_tensor *out, const vt_tensor *lse,
                        const vt_tensor *q, const vt_tensor *k, const vt_tensor *v, const vt_tensor *mask,
                        const vt_tensor *dout, const vt_tensor *dq, const vt_tensor *dk, const vt_tensor *dv,
                        double scale, int is_causal, vt_precision prec) {
    memset(p, 0, sizeof *p);
    if (!q) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: query is NULL", fn);
    vt_status s = vt_tensor_validate(q, "query");
    if (s != VT_OK) return vt_error_prefix(s, fn);
    if (q->ndim != 3 && q->ndim != 4)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: query must be 3-D or 4-D, got %d dimensions", fn, (int)q->ndim);
    vt_dtype dt = q->dtype;
    if (dt != VT_F32 && dt != VT_BF16 && dt != VT_F16)
        return vt_set_error(VT_ERR_UNSUPPORTED, "%s: dtype %s is not supported (float32, bfloat16, float16)", fn,
                            vt_dtype_name(dt));
    if ((unsigned)prec > VT_PRECISION_HIGHEST)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: invalid precision %d", fn, (int)prec);
    int nd = q->ndim;
    shape4(q, &p->q);
    if ((s = operand(fn, "key", k, nd, dt, &p->k)) != VT_OK) return s;
    if ((s = operand(fn, "value", v, nd, dt, &p->v)) != VT_OK) return s;
    if ((s = operand(fn, "out", out, nd, dt, &p->out)) != VT_OK) return s;
    p->B = p->q.sizes[0], p->Hq = p->q.sizes[1], p->L = p->q.sizes[2], p->D = p->q.sizes[3];
    p->Hk = p->k.sizes[1], p->S = p->k.sizes[2], p->Dv = p->v.sizes[3];
    if (p->k.sizes[0] != p->B || p->v.sizes[0] != p->B)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: query, key and value must have the same batch size", fn);
    if (p->v.sizes[1] != p->Hk || p->v.sizes[2] != p->S)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: key and value must have the same heads and sequence length", fn);
    if (p->k.sizes[3] != p->D)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: query and key must have the same head dim (%lld vs %lld)", fn,
                            (long long)p->D, (long long)p->k.sizes[3]);
    if (p->Hk == 0 ? p->Hq != 0 : p->Hq % p->Hk != 0)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT,
                            "%s: number of query heads (%lld) must be a multiple of key/value heads (%lld)", fn,
                            (long long)p->Hq, (long long)p->Hk);
    if ((s = want_shape(fn, "out", &p->out, p->B, p->Hq, p->L, p->Dv)) != VT_OK) return s;
    if (!lse) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: logsumexp is NULL", fn);
    if ((s = vt_tensor_validate(lse, "logsumexp")) != VT_OK) return vt_error_prefix(s, fn);
    if (lse->dtype != VT_F32 || lse->ndim < 2 || lse->ndim > 3)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: logsumexp must be a float32 [B, Hq, L] tensor", fn);
    p->lse = *lse;
    if (lse->ndim == 2) {
        p->lse.sizes[2] = lse->sizes[1], p->lse.strides[2] = lse->strides[1];
        p->lse.sizes[1] = lse->sizes[0], p->lse.strides[1] = lse->strides[0];
        p->lse.sizes[0] = 1, p->lse.strides[0] = 0;
    }
    p->lse.ndim = 4, p->lse.sizes[3] = 1, p->lse.strides[3] = 0;
    if ((s = want_shape(fn, "logsumexp", &p->lse, p->B, p->Hq, p->L, 1)) != VT_OK) return s;
    if (mask) {
        if ((s = vt_tensor_validate(mask, "attn_mask")) != VT_OK) return vt_error_prefix(s, fn);
        if (mask->dtype != VT_BOOL && !vt_dtype_is_float(mask->dtype))
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: attn_mask must be bool or floating, got %s", fn,
                                vt_dtype_name(mask->dtype));
        int64_t want[4] = {p->B, p->Hq, p->L, p->S};
        if (mask->ndim > 4 || vt_broadcast_to(mask, 4, want, &p->mask) != VT_OK)
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: attn_mask does not broadcast to [%lld, %lld, %lld, %lld]",
                                fn, (long long)p->B, (long long)p->Hq, (long long)p->L, (long long)p->S);
        p->has_mask = 1;
    }
    if (backward) {
        if ((s = operand(fn, "grad_out", dout, nd, dt, &p->dout)) != VT_OK) return s;
        if ((s = want_shape(fn, "grad_out", &p->dout, p->B, p->Hq, p->L, p->Dv)) != VT_OK) return s;
        if (dq) {
            if ((s = operand(fn, "grad_query", dq, nd, dt, &p->dq)) != VT_OK) return s;
            if ((s = want_shape(fn, "grad_query", &p->dq, p->B, p->Hq, p->L, p->D)) != VT_OK) return s;
            p->has_dq = 1;
        }
        if (dk) {
            if ((s = operand(fn, "grad_key", dk, nd, dt, &p->dk)) != VT_OK) return s;
            if ((s = want_shape(fn, "grad_key", &p->dk, p->B, p->Hk, p->S, p->D)) != VT_OK) return s;
            p->has_dk = 1;
        }
        if (dv) {
            if ((s = operand(fn, "grad_value", dv, nd, dt, &p->dv)) != VT_OK) return s;
            if ((s = want_shape(fn, "grad_value", &p->dv, p->B, p->Hk, p->S, p->Dv)) != VT_OK) return s;
            p->has_dv = 1;
        }
    }
    p->scale = scale;
    p->causal = is_causal != 0;
    p->prec = dt == VT_F32 ? prec : VT_PRECISION_DEFAULT;
    return VT_OK;
}

const float *vt_attn_mask_row(const vt_attn_problem *p, int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n,
                              float *dst) {
    const vt_tensor *m = &p->mask;
    int64_t off = m->offset + b * m->strides[0] + h * m->strides[1] + i * m->strides[2] + j0 * m->strides[3];
    if (m->dtype == VT_F32 && m->strides[3] == 1) return (const float *)m->data + off;
    if (m->dtype == VT_BOOL) {
        const uint8_t *src = (const uint8_t *)m->data + off;
        for (int64_t c = 0; c < n; c++) dst[c] = src[c * m->strides[3]] ? 0.0f : -INFINITY;
        return dst;
    }
    vt_convert(m->dtype, (const char *)m->data + off * (int64_t)vt_dtype_size(m->dtype), m->strides[3], VT_F32, dst, 1,
               n);
    return dst;
}

/* ------------------------------------------------------------ shared helpers */

/* rows x cols of t[b][h] starting at row r0, as f32 into dst (row stride ld),
 * or transposed (dst[c * ld + r]) when tr: 16 rows at a time are converted
 * into a small buffer first, so each column writes one 64-byte run. */
static void load_f32(const vt_tensor *t, int64_t b, int64_t h, int64_t r0, int64_t rows, int64_t cols, int tr,
                     float *dst, int64_t ld) {
    size_t es = vt_dtype_size(t->dtype);
    if (!tr) {
        for (int64_t r = 0; r < rows; r++) {
            int64_t off = t->offset + b * t->strides[0] + h * t->strides[1] + (r0 + r) * t->strides[2];
            const char *src = (const char *)t->data + off * (int64_t)es;
            if (t->dtype == VT_F32 && t->strides[3] == 1) memcpy(dst + r * ld, src, (size_t)cols * 4);
            else vt_convert(t->dtype, src, t->strides[3], VT_F32, dst + r * ld, 1, cols);
        }
        return;
    }
    float small[16 * 256];
    float *buf = cols <= 256 ? small : malloc((size_t)cols * 16 * sizeof(float));
    if (!buf) { /* no scratch: convert straight into the strided columns */
        for (int64_t r = 0; r < rows; r++) {
            int64_t off = t->offset + b * t->strides[0] + h * t->strides[1] + (r0 + r) * t->strides[2];
            vt_convert(t->dtype, (const char *)t->data + off * (int64_t)es, t->strides[3], VT_F32, dst + r, ld, cols);
        }
        return;
    }
    for (int64_t g = 0; g < rows; g += 16) {
        int64_t n = rows - g < 16 ? rows - g : 16;
        load_f32(t, b, h, r0 + g, n, cols, 0, buf, cols);
        for (int64_t c = 0; c < cols; c++)
            for (int64_t r = 0; r < n; r++) dst[c * ld + g + r] = buf[r * cols + c];
    }
    if (buf != small) free(buf);
}

/* rows x cols of f32 src (row stride ld; transposed source when tr: element
 * (r, c) at src[c * ld + r]) into t[b][h] from row r0, converted. */
static void store_rows(const vt_tensor *t, int64_t b, int64_t h, int64_t r0, int64_t rows, int64_t cols, int tr,
                       const float *src, int64_t ld) {
    size_t es = vt_dtype_size(t->dtype);
    for (int64_t r = 0; r < rows; r++) {
        int64_t off = t->offset + b * t->strides[0] + h * t->strides[1] + (r0 + r) * t->strides[2];
        char *dst = (char *)t->data + off * (int64_t)es;
        if (tr) vt_convert(VT_F32, src + r, ld, t->dtype, dst, t->strides[3], cols);
        else vt_convert(VT_F32, src + r * ld, 1, t->dtype, dst, t->strides[3], cols);
    }
}

static float *lse_at(const vt_attn_problem *p, int64_t b, int64_t h, int64_t i) {
    const vt_tensor *t = &p->lse;
    return (float *)t->data + t->offset + b * t->strides[0] + h * t->strides[1] + i * t->strides[2];
}

/* c (+)= A B over kc chunks as the passes of prec: the low passes into one
 * sum whose non-finite values become 0, then hi*hi (as kernels/mxu/).
 * a_seg / b_seg: elements between segments of a panel. accumulate adds the
 * product to c (through tmp, mb x nb, in the multi-pass modes). */
static void mm(const vt_mxu_engine *e, vt_precision prec, int64_t kc, int64_t mb, int64_t nb, const uint16_t *a,
               int64_t as, int64_t a_seg, const uint16_t *b, int64_t bs, int64_t b_seg, float *c, int64_t ldc,
               int accumulate, float *tmp) {
    if (kc == 0) {
        if (!accumulate)
            for (int64_t i = 0; i < mb; i++) memset(c + i * ldc, 0, (size_t)nb * 4);
        return;
    }
    int nlow = vt_mxu_nlow(prec);
    if (nlow == 0) {
        e->block(kc, mb, nb, a, as, b, bs, c, ldc, accumulate);
        return;
    }
    const vt_mxu_pass *ps = vt_mxu_passes(nlow);
    float *t = accumulate ? tmp : c;
    int64_t ldt = accumulate ? nb : ldc;
    for (int g = 0; g < nlow; g++) e->block(kc, mb, nb, a + ps[g].a * a_seg, as, b + ps[g].b * b_seg, bs, t, ldt, g > 0);
    for (int64_t i = 0; i < mb; i++)
        for (int64_t j = 0; j < nb; j++)
            if (!isfinite(t[i * ldt + j])) t[i * ldt + j] = 0.0f;
    e->block(kc, mb, nb, a, as, b, bs, t, ldt, 1);
    if (accumulate)
        for (int64_t i = 0; i < mb; i++)
            for (int64_t j = 0; j < nb; j++) c[i * ldc + j] += t[i * nb + j];
}

/* Keys of block j0.. that query i may attend (before the mask). */
static int64_t valid_keys(const vt_attn_problem *p, int64_t i, int64_t j0) {
    int64_t n = p->S - j0 < BK ? p->S - j0 : BK;
    if (p->causal && i - j0 + 1 < n) n = i - j0 + 1;
    return n < 0 ? 0 : n;
}

/* Geometry shared by both directions. */
typedef struct geom {
    int64_t Lp, Sp, Dp, Dvp, ktD, ktDv, ktL, ktS;
    int nseg;
} geom;

static void geom_init(geom *g, const vt_attn_problem *p) {
    g->Lp = round_up(p->L, BQ), g->Sp = round_up(p->S, BK);
    g->Dp = round_up(p->D, 32), g->Dvp = round_up(p->Dv, 32);
    g->ktD = g->Dp / 32, g->ktDv = g->Dvp / 32, g->ktL = g->Lp / 32, g->ktS = g->Sp / 32;
    g->nseg = nseg_of(p->prec);
}

/* Panel sizes (elements) of a packed operand whose K is kt chunks. */
static int64_t panel_of(const geom *g, int64_t kt) { return g->nseg * kt * VT_MXU_CHUNK; }

/* ------------------------------------------------------------ forward */

typedef struct fwd_job {
    const vt_attn_problem *p;
    const vt_attn_rows *rows;
    const vt_mxu_engine *e;
    geom g;
    uint16_t *kpack, *vpack; /* per (b, hk): K as B[d][key], V as B[key][dv] */
    int64_t khead, vhead, kpanel, vpanel;
    int64_t nqb, nunits;
    atomic_llong next;
    atomic_int oom;
} fwd_job;

/* A row of t[b][h] (cols values from f32 or bf16 at unit stride) as a line
 * for the MXU packers; rows past the end read as zeros. */
static vt_mxu_line row_line(const vt_tensor *t, int64_t b, int64_t h, int64_t r, int64_t rows, int64_t cols) {
    vt_mxu_line x = {t->data, t->dtype == VT_BF16, r < rows ? cols : 0};
    if (x.n)
        x.p = (const char *)t->data +
              (t->offset + b * t->strides[0] + h * t->strides[1] + r * t->strides[2]) * (int64_t)vt_dtype_size(t->dtype);
    return x;
}

/* Whether engine e packs t's rows straight from t (f32 or bf16 at unit
 * stride, an engine with fast packers), with no f32 staging. */
static int packs_direct(const vt_mxu_engine *e, const vt_tensor *t) {
    return e->pack && (t->dtype == VT_F32 || t->dtype == VT_BF16) && t->strides[3] == 1;
}

/* B = t[b][h]^T (rows x cols) by 16-row panels of t: t's rows are B's
 * columns (kt chunks of its cols), into dst (panel stride panel). */
static void pack_b_of_rows_t(const vt_mxu_engine *e, const vt_tensor *t, int64_t b, int64_t h, int64_t rows,
                             int64_t rows_p, int64_t cols, vt_precision prec, int64_t kt, uint16_t *dst, int64_t panel) {
    for (int64_t n0 = 0; n0 < rows_p; n0 += 16) {
        vt_mxu_line c16[16];
        for (int q = 0; q < 16; q++) c16[q] = row_line(t, b, h, n0 + q, rows, cols);
        e->pack->pack_b_cols(c16, prec, kt, nseg_of(prec), vt_mxu_slot_parts(vt_mxu_nlow(prec)),
                             dst + (n0 / 16) * panel);
    }
}

/* B = t[b][h] (rows are B's K, kt chunks; np padded columns) into dst. */
static void pack_b_of_rows(const vt_mxu_engine *e, const vt_tensor *t, int64_t b, int64_t h, int64_t rows,
                           int64_t cols, int64_t np, vt_precision prec, int64_t kt, uint16_t *dst, int64_t panel) {
    for (int64_t c = 0; c < kt; c++)
        for (int jj = 0; jj < 16; jj++) {
            int64_t k = c * 32 + 2 * jj;
            e->pack->pack_b_rows(row_line(t, b, h, k, rows, cols), row_line(t, b, h, k + 1, rows, cols), prec, np,
                                 kt, nseg_of(prec), vt_mxu_slot_parts(vt_mxu_nlow(prec)), dst, panel, c, jj);
        }
}

/* A = rows r0 .. r0 + rows_p of t[b][h] (kt chunks of cols; rows past
 * `rows` read as zeros) into dst. */
static void pack_a_of_rows(const vt_mxu_engine *e, const vt_tensor *t, int64_t b, int64_t h, int64_t r0, int64_t rows,
                           int64_t rows_p, int64_t cols, vt_precision prec, int64_t kt, uint16_t *dst, int64_t panel) {
    for (int64_t r = 0; r < rows_p; r++)
        e->pack->pack_a_row(row_line(t, b, h, r0 + r, rows, cols), prec, kt, nseg_of(prec),
                            vt_mxu_slot_parts(vt_mxu_nlow(prec)), dst + (r / 16) * panel, (int)(r % 16));
}

/* A = t[b][h]^T (cols_p padded rows of A, K = t's rows, kt chunks) into dst:
 * a panel's 16 A rows are 16 adjacent elements of each t row. */
static void pack_a_of_rows_t(const vt_mxu_engine *e, const vt_tensor *t, int64_t b, int64_t h, int64_t rows,
                             int64_t cols, int64_t cols_p, vt_precision prec, int64_t kt, uint16_t *dst,
                             int64_t panel) {
    for (int64_t d0 = 0; d0 < cols_p; d0 += 16) {
        vt_mxu_line x = row_line(t, b, h, 0, rows, cols);
        x.n = d0 < cols ? (cols - d0 < 16 ? cols - d0 : 16) : 0;
        if (x.n) x.p = (const char *)x.p + d0 * (int64_t)vt_dtype_size(t->dtype);
        for (int64_t c = 0; c < kt; c++)
            e->pack->pack_a_cols(x, t->strides[2], rows, prec, kt, nseg_of(prec),
                                 vt_mxu_slot_parts(vt_mxu_nlow(prec)), dst + (d0 / 16) * panel, c);
    }
}

/* The engine packs K and V of one kv head straight from their rows: K's rows
 * are the columns of B = K^T, V's rows are B's rows. */
static int fwd_direct_kv(const fwd_job *j) { return packs_direct(j->e, &j->p->k) && packs_direct(j->e, &j->p->v); }

static void fwd_pack_direct(fwd_job *j, int64_t u) {
    const vt_attn_problem *p = j->p;
    const geom *g = &j->g;
    int64_t b = u / p->Hk, h = u % p->Hk;
    pack_b_of_rows_t(j->e, &p->k, b, h, p->S, g->Sp, p->D, p->prec, g->ktD, j->kpack + u * j->khead, j->kpanel);
    pack_b_of_rows(j->e, &p->v, b, h, p->S, p->Dv, g->Dvp, p->prec, g->ktS, j->vpack + u * j->vhead, j->vpanel);
}

static void fwd_pack_range(void *ctx, int64_t begin, int64_t end) {
    fwd_job *j = ctx;
    const vt_attn_problem *p = j->p;
    const geom *g = &j->g;
    if (fwd_direct_kv(j)) {
        for (int64_t u = begin; u < end; u++) fwd_pack_direct(j, u);
        return;
    }
    int64_t big = (g->Dp > g->Dvp ? g->Dp : g->Dvp) * g->Sp;
    float *stage = malloc((size_t)(big ? big : 1) * sizeof(float));
    if (!stage) {
        atomic_store(&j->oom, 1);
        return;
    }
    for (int64_t u = begin; u < end; u++) {
        int64_t b = u / p->Hk, h = u % p->Hk;
        memset(stage, 0, (size_t)g->Dp * g->Sp * 4);
        load_f32(&p->k, b, h, 0, p->S, p->D, 1, stage, g->Sp);
        j->rows->pack_b(stage, g->Sp, g->Dp, g->Sp, p->prec, g->ktD, 0, j->kpack + u * j->khead, j->kpanel);
        memset(stage, 0, (size_t)g->Sp * g->Dvp * 4);
        load_f32(&p->v, b, h, 0, p->S, p->Dv, 0, stage, g->Dvp);
        j->rows->pack_b(stage, g->Dvp, g->Sp, g->Dvp, p->prec, g->ktS, 0, j->vpack + u * j->vhead, j->vpanel);
    }
    free(stage);
}

typedef struct fwd_ws {
    float *qstage, *s, *o, *tmp, *m, *l, *bias;
    uint16_t *qa, *pa;
    void *block;
} fwd_ws;

static int fwd_ws_alloc(fwd_ws *w, const geom *g) {
    size_t nq = (size_t)BQ * g->Dp, no = (size_t)BQ * g->Dvp, ns = (size_t)BQ * BK;
    size_t tmpn = no > ns ? no : ns;
    size_t floats = nq + ns + no + tmpn + 2 * BQ + BK;
    size_t halves = (size_t)BQ / 16 * panel_of(g, g->ktD) + (size_t)BQ / 16 * panel_of(g, BK / 32);
    w->block = aligned_alloc(64, round_up((int64_t)(floats * 4 + halves * 2 + 256), 64));
    if (!w->block) return 0;
    float *f = w->block;
    w->qstage = f, f += nq;
    w->s = f, f += ns;
    w->o = f, f += no;
    w->tmp = f, f += tmpn;
    w->m = f, f += BQ;
    w->l = f, f += BQ;
    w->bias = f, f += BK;
    w->qa = (uint16_t *)f;
    w->pa = w->qa + (size_t)BQ / 16 * panel_of(g, g->ktD);
    return 1;
}

static void fwd_unit(fwd_job *j, fwd_ws *w, int64_t u) {
    const vt_attn_problem *p = j->p;
    const geom *g = &j->g;
    const vt_attn_rows *R = j->rows;
    int64_t qb = j->nqb - 1 - u / (p->B * p->Hq); /* largest causal units first */
    int64_t bh = u % (p->B * p->Hq), b = bh / p->Hq, h = bh % p->Hq, hk = h / (p->Hq / p->Hk);
    int64_t i0 = qb * BQ, nrows = p->L - i0 < BQ ? p->L - i0 : BQ;
    int64_t qpanel = panel_of(g, g->ktD), ppanel = panel_of(g, BK / 32);
    float scale = (float)p->scale;
    if (packs_direct(j->e, &p->q)) {
        pack_a_of_rows(j->e, &p->q, b, h, i0, p->L, BQ, p->D, p->prec, g->ktD, w->qa, qpanel);
    } else {
        memset(w->qstage, 0, (size_t)BQ * g->Dp * 4);
        load_f32(&p->q, b, h, i0, nrows, p->D, 0, w->qstage, g->Dp);
        R->pack_a(w->qstage, g->Dp, BQ, g->Dp, p->prec, g->ktD, 0, w->qa, qpanel);
    }
    memset(w->o, 0, (size_t)BQ * g->Dvp * 4);
    for (int r = 0; r < BQ; r++) w->m[r] = -INFINITY, w->l[r] = 0.0f;
    int64_t kend = p->causal ? (i0 + BQ < p->S ? i0 + BQ : p->S) : p->S;
    int64_t nkb = (kend + BK - 1) / BK;
    const uint16_t *kp = j->kpack + (b * p->Hk + hk) * j->khead, *vp = j->vpack + (b * p->Hk + hk) * j->vhead;
    for (int64_t kb = 0; kb < nkb; kb++) {
        int64_t j0 = kb * BK;
        mm(j->e, p->prec, g->ktD, BQ, BK, w->qa, qpanel, g->ktD * VT_MXU_CHUNK, kp + (j0 / 16) * j->kpanel, j->kpanel,
           g->ktD * VT_MXU_CHUNK, w->s, BK, 0, w->tmp);
        for (int64_t r = 0; r < BQ; r++) {
            float *sr = w->s + r * BK;
            int64_t i = i0 + r;
            int64_t nv = r < nrows ? valid_keys(p, i, j0) : 0;
            const float *bias = p->has_mask && nv > 0 ? vt_attn_mask_row(p, b, h, i, j0, nv, w->bias) : NULL;
            float mx = R->scores(sr, BK, nv, scale, bias);
            float mold = w->m[r], mnew = (mx > mold || mx != mx) ? mx : mold;
            if (mnew == -INFINITY) {
                memset(sr, 0, BK * 4);
                continue;
            }
            float alpha = expf(mold - mnew);
            float sum = R->exp_sum(sr, BK, mnew);
            w->l[r] = w->l[r] * alpha + sum;
            w->m[r] = mnew;
            if (alpha != 1.0f) R->scale(w->o + r * g->Dvp, g->Dvp, alpha);
        }
        R->pack_a(w->s, BK, BQ, BK, p->prec, BK / 32, 0, w->pa, ppanel);
        mm(j->e, p->prec, BK / 32, BQ, g->Dvp, w->pa, ppanel, (BK / 32) * VT_MXU_CHUNK, vp + (j0 / 32) * VT_MXU_CHUNK,
           j->vpanel, g->ktS * VT_MXU_CHUNK, w->o, g->Dvp, 1, w->tmp);
    }
    for (int64_t r = 0; r < nrows; r++) {
        float *orow = w->o + r * g->Dvp, *lse = lse_at(p, b, h, i0 + r);
        if (w->l[r] == 0.0f || w->m[r] == -INFINITY) {
            memset(orow, 0, (size_t)g->Dvp * 4);
            *lse = -INFINITY;
            continue;
        }
        R->scale(orow, p->Dv, 1.0f / w->l[r]);
        *lse = w->m[r] + logf(w->l[r]);
    }
    store_rows(&p->out, b, h, i0, nrows, p->Dv, 0, w->o, g->Dvp);
}

static void fwd_range(void *ctx, int64_t begin, int64_t end) {
    (void)begin, (void)end;
    fwd_job *j = ctx;
    fwd_ws w;
    if (!fwd_ws_alloc(&w, &j->g)) {
        atomic_store(&j->oom, 1);
        return;
    }
    for (int64_t u; (u = atomic_fetch_add(&j->next, 1)) < j->nunits;) fwd_unit(j, &w, u);
    free(w.block);
}

/* Units worth one pool task at least: below this much work one core does it. */
#define PARALLEL_MACS (1 << 20)

vt_status vt_sdpa_forward(const vt_tensor *out, const vt_tensor *lse, const vt_tensor *q, const vt_tensor *k,
                          const vt_tensor *v, const vt_tensor *mask, double scale, int is_causal, vt_precision prec) {
    vt_attn_problem p;
    vt_status s = vt_attn_setup(&p, "vt_sdpa_forward", 0, out, lse, q, k, v, mask, NULL, NULL, NULL, NULL, scale,
                                is_causal, prec);
    if (s != VT_OK) return s;
    if (p.B == 0 || p.Hq == 0 || p.L == 0) return VT_OK;
    fwd_job j;
    memset(&j, 0, sizeof j);
    j.p = &p;
    j.rows = vt_attn_rows_active();
    j.e = vt_mxu_engine_active();
    geom_init(&j.g, &p);
    const geom *g = &j.g;
    j.kpanel = panel_of(g, g->ktD), j.vpanel = panel_of(g, g->ktS);
    j.khead = g->Sp / 16 * j.kpanel, j.vhead = g->Dvp / 16 * j.vpanel;
    int64_t nkv = p.B * p.Hk;
    size_t bytes = (size_t)(nkv * (j.khead + j.vhead)) * 2 + 64;
    uint16_t *packs = aligned_alloc(64, (size_t)round_up((int64_t)bytes, 64));
    if (!packs) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "vt_sdpa_forward: cannot allocate %zu bytes", bytes);
    j.kpack = packs, j.vpack = packs + nkv * j.khead;
    int64_t work = p.B * p.Hq * p.L * (p.S ? p.S : 1) * (p.D + p.Dv);
    int par = work >= PARALLEL_MACS;
    vt_parallel_for(nkv, par ? 1 : nkv, fwd_pack_range, &j);
    j.nqb = g->Lp / BQ;
    j.nunits = j.nqb * p.B * p.Hq;
    if (!atomic_load(&j.oom)) {
        int nt = vt_num_threads();
        int64_t tasks = par ? (nt < j.nunits ? nt : j.nunits) : 1;
        vt_parallel_for(tasks, 1, fwd_range, &j);
    }
    free(packs);
    if (atomic_load(&j.oom)) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "vt_sdpa_forward: out of host memory for scratch");
    return VT_OK;
}

/* ------------------------------------------------------------ backward */

typedef struct bwd_job {
    const vt_attn_problem *p;
    const vt_attn_rows *rows;
    const vt_mxu_engine *e;
    geom g;
    int64_t G; /* query heads per kv head */
    int64_t nunits;
    atomic_llong next;
    atomic_int oom;
} bwd_job;

/* One unit's workspace: packs of K, V and of the G query heads. */
typedef struct bwd_ws {
    uint16_t *kbt, *kb, *vbt;      /* K as B[d][key], K as B[key][d], V as B[dv][key] */
    uint16_t *qa, *qat, *doa, *doat; /* per head: Q as A[q][d], Q^T as A[d][q], dO as A[q][dv], dO^T as A[dv][q] */
    uint16_t *pb, *dsb, *dsa;      /* per step: P, dS as B[q][key]; dS as A[q][key] */
    float *lse, *delta, *dq;       /* per head: Lp, Lp, Lp x Dp */
    float *stage, *s, *dp, *ds, *dkt, *dvt, *tmp, *bias, *orow;
    int64_t qa_h, qat_h, doa_h, doat_h; /* elements per head */
    void *block;
} bwd_ws;

static int bwd_ws_alloc(bwd_ws *w, const bwd_job *j) {
    const geom *g = &j->g;
    int64_t G = j->G, tile = panel_of(g, BK / 32) * (BQ / 16); /* = panel_of(BQ / 32) * (BK / 16) */
    int64_t kbt = g->Sp / 16 * panel_of(g, g->ktD), kb = g->Dp / 16 * panel_of(g, g->ktS),
            vbt = g->Sp / 16 * panel_of(g, g->ktDv);
    w->qa_h = g->Lp / 16 * panel_of(g, g->ktD), w->qat_h = g->Dp / 16 * panel_of(g, g->ktL);
    w->doa_h = g->Lp / 16 * panel_of(g, g->ktDv), w->doat_h = g->Dvp / 16 * panel_of(g, g->ktL);
    int64_t halves = kbt + kb + vbt + G * (w->qa_h + w->qat_h + w->doa_h + w->doat_h) + 3 * tile;
    int64_t big = g->Dp > g->Dvp ? g->Dp : g->Dvp;
    int64_t rows = g->Lp > g->Sp ? g->Lp : g->Sp;
    int64_t floats = G * (2 * g->Lp + g->Lp * g->Dp) + rows * big + 3 * BQ * BK + g->Dp * BK + g->Dvp * BK +
                     (big > BK ? big : BK) * (big > BQ ? big : BQ) + BK + big;
    w->block = aligned_alloc(64, (size_t)round_up(halves * 2 + floats * 4 + 1024, 64));
    if (!w->block) return 0;
    uint16_t *h = w->block;
    w->kbt = h, h += kbt;
    w->kb = h, h += kb;
    w->vbt = h, h += vbt;
    w->qa = h, h += G * w->qa_h;
    w->qat = h, h += G * w->qat_h;
    w->doa = h, h += G * w->doa_h;
    w->doat = h, h += G * w->doat_h;
    w->pb = h, h += tile;
    w->dsb = h, h += tile;
    w->dsa = h, h += tile;
    float *f = (float *)(((uintptr_t)h + 63) & ~(uintptr_t)63);
    w->lse = f, f += G * g->Lp;
    w->delta = f, f += G * g->Lp;
    w->dq = f, f += G * g->Lp * g->Dp;
    w->stage = f, f += rows * big;
    w->s = f, f += BQ * BK;
    w->dp = f, f += BQ * BK;
    w->ds = f, f += BQ * BK;
    w->dkt = f, f += g->Dp * BK;
    w->dvt = f, f += g->Dvp * BK;
    w->tmp = f, f += (big > BK ? big : BK) * (big > BQ ? big : BQ);
    w->bias = f, f += BK;
    w->orow = f;
    return 1;
}

static void bwd_pack_head(const bwd_job *j, bwd_ws *w, int64_t b, int64_t h, int64_t gi) {
    const vt_attn_problem *p = j->p;
    const geom *g = &j->g;
    const vt_attn_rows *R = j->rows;
    float *st = w->stage;
    if (packs_direct(j->e, &p->q)) {
        pack_a_of_rows(j->e, &p->q, b, h, 0, p->L, g->Lp, p->D, p->prec, g->ktD, w->qa + gi * w->qa_h,
                       panel_of(g, g->ktD));
        pack_a_of_rows_t(j->e, &p->q, b, h, p->L, p->D, g->Dp, p->prec, g->ktL, w->qat + gi * w->qat_h,
                         panel_of(g, g->ktL));
    } else {
        memset(st, 0, (size_t)g->Lp * g->Dp * 4);
        load_f32(&p->q, b, h, 0, p->L, p->D, 0, st, g->Dp);
        R->pack_a(st, g->Dp, g->Lp, g->Dp, p->prec, g->ktD, 0, w->qa + gi * w->qa_h, panel_of(g, g->ktD));
        memset(st, 0, (size_t)g->Lp * g->Dp * 4);
        load_f32(&p->q, b, h, 0, p->L, p->D, 1, st, g->Lp);
        R->pack_a(st, g->Lp, g->Dp, g->Lp, p->prec, g->ktL, 0, w->qat + gi * w->qat_h, panel_of(g, g->ktL));
    }
    memset(st, 0, (size_t)g->Lp * g->Dvp * 4);
    load_f32(&p->dout, b, h, 0, p->L, p->Dv, 0, st, g->Dvp);
    R->pack_a(st, g->Dvp, g->Lp, g->Dvp, p->prec, g->ktDv, 0, w->doa + gi * w->doa_h, panel_of(g, g->ktDv));
    /* delta = rowsum(dO * O) in f32, from the f32 dO still in the stage */
    float *lse = w->lse + gi * g->Lp, *delta = w->delta + gi * g->Lp;
    for (int64_t i = 0; i < g->Lp; i++) {
        if (i >= p->L) {
            lse[i] = INFINITY, delta[i] = 0.0f;
            continue;
        }
        float l = *lse_at(p, b, h, i);
        lse[i] = l == -INFINITY ? INFINITY : l; /* a fully masked row has P = 0 */
        load_f32(&p->out, b, h, i, 1, p->Dv, 0, w->orow, p->Dv);
        float acc = 0.0f;
        for (int64_t c = 0; c < p->Dv; c++) acc += st[i * g->Dvp + c] * w->orow[c];
        delta[i] = acc;
    }
    if (packs_direct(j->e, &p->dout)) {
        pack_a_of_rows_t(j->e, &p->dout, b, h, p->L, p->Dv, g->Dvp, p->prec, g->ktL, w->doat + gi * w->doat_h,
                         panel_of(g, g->ktL));
        return;
    }
    memset(st, 0, (size_t)g->Lp * g->Dvp * 4);
    load_f32(&p->dout, b, h, 0, p->L, p->Dv, 1, st, g->Lp);
    R->pack_a(st, g->Lp, g->Dvp, g->Lp, p->prec, g->ktL, 0, w->doat + gi * w->doat_h, panel_of(g, g->ktL));
}

static void bwd_unit(bwd_job *j, bwd_ws *w, int64_t u) {
    const vt_attn_problem *p = j->p;
    const geom *g = &j->g;
    const vt_attn_rows *R = j->rows;
    const vt_mxu_engine *e = j->e;
    int64_t b = u / p->Hk, hk = u % p->Hk, G = j->G;
    float scale = (float)p->scale;
    int64_t CH = VT_MXU_CHUNK;
    /* K and V of this kv head */
    float *st = w->stage;
    if (packs_direct(e, &p->k)) {
        pack_b_of_rows_t(e, &p->k, b, hk, p->S, g->Sp, p->D, p->prec, g->ktD, w->kbt, panel_of(g, g->ktD));
        pack_b_of_rows(e, &p->k, b, hk, p->S, p->D, g->Dp, p->prec, g->ktS, w->kb, panel_of(g, g->ktS));
    } else {
        memset(st, 0, (size_t)g->Dp * g->Sp * 4);
        load_f32(&p->k, b, hk, 0, p->S, p->D, 1, st, g->Sp);
        R->pack_b(st, g->Sp, g->Dp, g->Sp, p->prec, g->ktD, 0, w->kbt, panel_of(g, g->ktD));
        memset(st, 0, (size_t)g->Sp * g->Dp * 4);
        load_f32(&p->k, b, hk, 0, p->S, p->D, 0, st, g->Dp);
        R->pack_b(st, g->Dp, g->Sp, g->Dp, p->prec, g->ktS, 0, w->kb, panel_of(g, g->ktS));
    }
    if (packs_direct(e, &p->v)) {
        pack_b_of_rows_t(e, &p->v, b, hk, p->S, g->Sp, p->Dv, p->prec, g->ktDv, w->vbt, panel_of(g, g->ktDv));
    } else {
        memset(st, 0, (size_t)g->Dvp * g->Sp * 4);
        load_f32(&p->v, b, hk, 0, p->S, p->Dv, 1, st, g->Sp);
        R->pack_b(st, g->Sp, g->Dvp, g->Sp, p->prec, g->ktDv, 0, w->vbt, panel_of(g, g->ktDv));
    }
    for (int64_t gi = 0; gi < G; gi++) bwd_pack_head(j, w, b, hk * G + gi, gi);
    memset(w->dq, 0, (size_t)(G * g->Lp * g->Dp) * 4);
    /* P, dS as B (K = the block's queries, 16-key panels); dS as A (K = its keys) */
    int64_t bpanel = panel_of(g, BQ / 32), bseg = (BQ / 32) * CH, apanel = panel_of(g, BK / 32), aseg = (BK / 32) * CH;
    int64_t kbt_panel = panel_of(g, g->ktD), kb_panel = panel_of(g, g->ktS), vbt_panel = panel_of(g, g->ktDv);
    int64_t qa_panel = panel_of(g, g->ktD), doa_panel = panel_of(g, g->ktDv), t_panel = panel_of(g, g->ktL);
    for (int64_t kb = 0; kb < g->Sp / BK; kb++) {
        int64_t j0 = kb * BK, nk = p->S - j0 < BK ? p->S - j0 : BK;
        memset(w->dkt, 0, (size_t)g->Dp * BK * 4);
        memset(w->dvt, 0, (size_t)g->Dvp * BK * 4);
        int64_t qb0 = p->causal ? j0 / BQ : 0;
        for (int64_t gi = 0; gi < G; gi++) {
            int64_t h = hk * G + gi;
            const float *lse = w->lse + gi * g->Lp, *delta = w->delta + gi * g->Lp;
            for (int64_t qb = qb0; qb < g->Lp / BQ; qb++) {
                int64_t i0 = qb * BQ;
                mm(e, p->prec, g->ktD, BQ, BK, w->qa + gi * w->qa_h + (i0 / 16) * qa_panel, qa_panel, g->ktD * CH,
                   w->kbt + (j0 / 16) * kbt_panel, kbt_panel, g->ktD * CH, w->s, BK, 0, w->tmp);
                mm(e, p->prec, g->ktDv, BQ, BK, w->doa + gi * w->doa_h + (i0 / 16) * doa_panel, doa_panel,
                   g->ktDv * CH, w->vbt + (j0 / 16) * vbt_panel, vbt_panel, g->ktDv * CH, w->dp, BK, 0, w->tmp);
                for (int64_t r = 0; r < BQ; r++) {
                    int64_t i = i0 + r;
                    int64_t nv = i < p->L ? valid_keys(p, i, j0) : 0;
                    const float *bias = p->has_mask && nv > 0 ? vt_attn_mask_row(p, b, h, i, j0, nv, w->bias) : NULL;
                    R->bwd_p(w->s + r * BK, BK, nv, scale, bias, lse[i]);
                    R->bwd_ds(w->ds + r * BK, w->s + r * BK, w->dp + r * BK, BK, delta[i], scale);
                }
                R->pack_b(w->s, BK, BQ, BK, p->prec, BQ / 32, 0, w->pb, bpanel);
                R->pack_b(w->ds, BK, BQ, BK, p->prec, BQ / 32, 0, w->dsb, bpanel);
                R->pack_a(w->ds, BK, BQ, BK, p->prec, BK / 32, 0, w->dsa, apanel);
                /* dV^T += dO^T P, dK^T += Q^T dS (K = this block's queries) */
                mm(e, p->prec, BQ / 32, g->Dvp, BK, w->doat + gi * w->doat_h + (i0 / 32) * CH, t_panel, g->ktL * CH,
                   w->pb, bpanel, bseg, w->dvt, BK, 1, w->tmp);
                mm(e, p->prec, BQ / 32, g->Dp, BK, w->qat + gi * w->qat_h + (i0 / 32) * CH, t_panel, g->ktL * CH,
                   w->dsb, bpanel, bseg, w->dkt, BK, 1, w->tmp);
                /* dQ += dS K (K = this block's keys) */
                mm(e, p->prec, BK / 32, BQ, g->Dp, w->dsa, apanel, aseg, w->kb + (j0 / 32) * CH, kb_panel, g->ktS * CH,
                   w->dq + (gi * g->Lp + i0) * g->Dp, g->Dp, 1, w->tmp);
            }
        }
        if (p->has_dk) store_rows(&p->dk, b, hk, j0, nk, p->D, 1, w->dkt, BK);
        if (p->has_dv) store_rows(&p->dv, b, hk, j0, nk, p->Dv, 1, w->dvt, BK);
    }
    if (p->has_dq)
        for (int64_t gi = 0; gi < G; gi++)
            store_rows(&p->dq, b, hk * G + gi, 0, p->L, p->D, 0, w->dq + gi * g->Lp * g->Dp, g->Dp);
}

static void bwd_range(void *ctx, int64_t begin, int64_t end) {
    (void)begin, (void)end;
    bwd_job *j = ctx;
    bwd_ws w;
    if (!bwd_ws_alloc(&w, j)) {
        atomic_store(&j->oom, 1);
        return;
    }
    for (int64_t u; (u = atomic_fetch_add(&j->next, 1)) < j->nunits;) bwd_unit(j, &w, u);
    free(w.block);
}

/* Zero a gradient (empty sequence on the other side). */
static void zero_grad(const vt_tensor *t) {
    if (vt_tensor_numel(t) > 0) vt_fill(t, vt_scalar_from_double(0.0));
}

vt_status vt_sdpa_backward(const vt_tensor *dq, const vt_tensor *dk, const vt_tensor *dv, const vt_tensor *dout,
                           const vt_tensor *q, const vt_tensor *k, const vt_tensor *v, const vt_tensor *mask,
                           const vt_tensor *out, const vt_tensor *lse, double scale, int is_causal,
                           vt_precision prec) {
    vt_attn_problem p;
    vt_status s = vt_attn_setup(&p, "vt_sdpa_backward", 1, out, lse, q, k, v, mask, dout, dq, dk, dv, scale, is_causal,
                                prec);
    if (s != VT_OK) return s;
    if (p.B == 0 || p.Hk == 0) return VT_OK;
    if (p.L == 0 || p.S == 0) {
        if (dq) zero_grad(dq);
        if (dk) zero_grad(dk);
        if (dv) zero_grad(dv);
        return VT_OK;
    }
    bwd_job j;
    memset(&j, 0, sizeof j);
    j.p = &p;
    j.rows = vt_attn_rows_active();
    j.e = vt_mxu_engine_active();
    geom_init(&j.g, &p);
    j.G = p.Hq / p.Hk;
    j.nunits = p.B * p.Hk;
    int64_t work = p.B * p.Hq * p.L * p.S * (p.D + p.Dv);
    int nt = vt_num_threads();
    int64_t tasks = work >= PARALLEL_MACS ? (nt < j.nunits ? nt : j.nunits) : 1;
    vt_parallel_for(tasks, 1, bwd_range, &j);
    if (atomic_load(&j.oom)) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "vt_sdpa_backward: out of host memory for scratch");
    return VT_OK;
}
