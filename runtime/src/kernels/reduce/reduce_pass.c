/* reduce_pass.c — one pass of a reduction (reduce_pass.h): each output's
 * values mapped and combined, walking either one output at a time along
 * contiguous runs ("inner") or up to VW neighbouring outputs side by side
 * as lanes ("vertical", column sums), from memory or fed by a source. */
#include <stdlib.h>

#include "kernels/reduce/reduce_pass.h"

/* Input offset (elements) of kept position o over the first nk kept dims. */
static int64_t kept_offset(const red_plan *pl, int64_t o, int nk) {
    int64_t off = 0;
    for (int d = nk - 1; d >= 0; d--) {
        off += (o % pl->ksz[d]) * pl->kin[d];
        o /= pl->ksz[d];
    }
    return off;
}

static int64_t red_index(const red_plan *pl, int64_t j, int64_t *idx) {
    int64_t off = 0;
    for (int d = pl->nr - 1; d >= 0; d--) {
        if (pl->rsz[d] == 0) { /* empty extent: nothing will be read */
            idx[d] = 0;
            continue;
        }
        idx[d] = j % pl->rsz[d];
        j /= pl->rsz[d];
        off += idx[d] * pl->rin[d];
    }
    return off;
}

/* Advance the reduced multi-index by n (n never crosses the innermost dim's end). */
static int64_t red_advance(const red_plan *pl, int64_t *idx, int64_t off, int64_t n) {
    int d = pl->nr - 1;
    idx[d] += n;
    off += n * pl->rin[d];
    while (d > 0 && idx[d] >= pl->rsz[d]) {
        off -= idx[d] * pl->rin[d];
        idx[d] = 0;
        d--;
        idx[d]++;
        off += pl->rin[d];
    }
    return off;
}

/* Convert m values at p (stride in elements) to the pass's class type,
 * through the compute dtype as "inputs are converted to compute" says. */
static void convert_in(const red_pass *ps, const void *p, int64_t stride, int64_t m, void *buf, void *tmp) {
    const red_plan *pl = ps->pl;
    if (pl->in_dt == pl->compute || pl->compute == ps->cls_dt) {
        vt_convert(pl->in_dt, p, stride, ps->cls_dt, buf, 1, m);
    } else {
        vt_convert(pl->in_dt, p, stride, pl->compute, tmp, 1, m);
        vt_convert(pl->compute, tmp, 1, ps->cls_dt, buf, 1, m);
    }
}

static const void *stage(const red_pass *ps, const char *p, int64_t stride, int64_t m, void *buf, void *tmp,
                         int allow_direct) {
    const red_plan *pl = ps->pl;
    if (ps->src) { /* the values at p come from the source */
        const int64_t first = (p - pl->in_base) / (int64_t)pl->in_es;
        if (stride != 1 && m > 1) { /* vt_reduce_takes_source said no such runs: one value at a time */
            const size_t es = vt_dtype_size(ps->cls_dt);
            for (int64_t i = 0; i < m; i++)
                convert_in(ps, ps->src->read(ps->src->ctx, first + i * stride, 1), 1, 1, (char *)buf + i * (int64_t)es,
                           tmp);
            return buf;
        }
        p = ps->src->read(ps->src->ctx, first, m);
        stride = 1;
    }
    if (allow_direct && ps->direct && stride == 1) return p;
    convert_in(ps, p, stride, m, buf, tmp);
    return buf;
}

/* ------------------------------------------------------------ per-class kernels
 * Instantiated for float, double and int64. Integer sums and products wrap
 * (through uint64, so there is no undefined overflow), as PyTorch's do. */

#define ADD_FP(a, b) ((a) + (b))
#define MUL_FP(a, b) ((a) * (b))
#define SUB_FP(a, b) ((a) - (b))
#define ADD_INT(a, b) ((int64_t)((uint64_t)(a) + (uint64_t)(b)))
#define MUL_INT(a, b) ((int64_t)((uint64_t)(a) * (uint64_t)(b)))
#define SUB_INT(a, b) ((int64_t)((uint64_t)(a) - (uint64_t)(b)))
#define NAN_FP(v) ((v) != (v))
#define NAN_INT(v) 0
static inline int64_t abs_int(int64_t v) { return v < 0 ? (int64_t)(0 - (uint64_t)v) : v; }
static inline int64_t unused_int(int64_t v) { return v; }
static inline int64_t pow_unused_int(int64_t v, int64_t p) { return v + p; }

#define DEFINE_CLASS(SFX, T, ADD, MUL, SUB, ISNAN, ABS, POW, EXP, LOWEST, HIGHEST)                                  \
    static T ident_##SFX(int id) {                                                                                  \
        return id == ID_ZERO ? (T)0 : id == ID_ONE ? (T)1 : id == ID_LOWEST ? LOWEST : HIGHEST;                   \
    }                                                                                                              \
    /* 16 running lanes (vectorisable, 16 dependent adds each) folded pairwise. */                              \
    static T sum_block_##SFX(const T *x, int64_t m) {                                                           \
        /* Named locals, not an array: the accumulators must live in      \
         * registers for the adds to pipeline. */                          \
        T a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;                                         \
        T b0 = 0, b1 = 0, b2 = 0, b3 = 0, b4 = 0, b5 = 0, b6 = 0, b7 = 0;                                         \
        int64_t i = 0;                                                                                             \
        for (; i + 16 <= m; i += 16) {                                                                             \
            a0 = ADD(a0, x[i + 0]), a1 = ADD(a1, x[i + 1]), a2 = ADD(a2, x[i + 2]), a3 = ADD(a3, x[i + 3]);        \
            a4 = ADD(a4, x[i + 4]), a5 = ADD(a5, x[i + 5]), a6 = ADD(a6, x[i + 6]), a7 = ADD(a7, x[i + 7]);        \
            b0 = ADD(b0, x[i + 8]), b1 = ADD(b1, x[i + 9]), b2 = ADD(b2, x[i + 10]), b3 = ADD(b3, x[i + 11]);      \
            b4 = ADD(b4, x[i + 12]), b5 = ADD(b5, x[i + 13]), b6 = ADD(b6, x[i + 14]), b7 = ADD(b7, x[i + 15]);    \
        }                                                                                                          \
        T t[16] = {a0, a1, a2, a3, a4, a5, a6, a7, b0, b1, b2, b3, b4, b5, b6, b7};                               \
        for (int l = 0; i < m; i++, l++) t[l] = ADD(t[l], x[i]);                                                   \
        for (int w = 8; w >= 1; w >>= 1)                                                                           \
            for (int l = 0; l < w; l++) t[l] = ADD(t[l], t[l + w]);                                                \
        return t[0];                                                                                               \
    }                                                                                                              \
    /* Binary-counter cascade: level k holds the sum of 2^k blocks, so the  \
     * error grows with log2 of the count, as in pairwise summation. */                                          \
    typedef struct casc_##SFX {                                                                                      \
        uint64_t occ;                                                                                              \
        T lev[64];                                                                                                 \
    } casc_##SFX;                                                                                                    \
    static inline void casc_push_##SFX(casc_##SFX *c, T v) {                                                          \
        int k = 0;                                                                                                 \
        while (k < 63 && ((c->occ >> k) & 1)) {                                                                    \
            v = ADD(c->lev[k], v);                                                                                 \
            c->occ &= ~(1ull << k);                                                                                \
            k++;                                                                                                   \
        }                                                                                                          \
        if ((c->occ >> k) & 1) v = ADD(c->lev[k], v);                                                              \
        c->lev[k] = v;                                                                                             \
        c->occ |= 1ull << k;                                                                                       \
    }                                                                                                              \
    static inline T casc_total_##SFX(const casc_##SFX *c) {                                                           \
        T s = 0;                                                                                                   \
        for (uint64_t m = c->occ; m; m &= m - 1) s = ADD(c->lev[__builtin_ctzll(m)], s); /* levels, low to high */ \
        return s;                                                                                                  \
    }                                                                                                              \
    static T fold_##SFX(int cmb, const T *x, int64_t m, T acc) {                                                    \
        switch (cmb) {                                                                                             \
        case CMB_PROD:                                                                                             \
            for (int64_t i = 0; i < m; i++) acc = MUL(acc, x[i]);                                                  \
            break;                                                                                                 \
        case CMB_MAX: /* a NaN, once in acc, stays: nothing compares greater */                                   \
            for (int64_t i = 0; i < m; i++) acc = (x[i] > acc || ISNAN(x[i])) ? x[i] : acc;                        \
            break;                                                                                                 \
        case CMB_MIN:                                                                                              \
            for (int64_t i = 0; i < m; i++) acc = (x[i] < acc || ISNAN(x[i])) ? x[i] : acc;                        \
            break;                                                                                                 \
        default: {                                                                                                 \
            casc_##SFX c;                                                                                            \
            c.occ = 0;                                                                                             \
            casc_push_##SFX(&c, acc);                                                                                \
            for (int64_t i = 0; i < m; i++) casc_push_##SFX(&c, x[i]);                                               \
            acc = casc_total_##SFX(&c);                                                                              \
        }                                                                                                          \
        }                                                                                                          \
        return acc;                                                                                                \
    }                                                                                                              \
    /* dst[i] = f(src[i]); c[i * cs] is the per-output constant. */                                              \
    static void map_##SFX(int map, T *dst, const T *src, int64_t m, const T *c, int64_t cs, double p) {            \
        switch (map) {                                                                                             \
        case MAP_ABS: for (int64_t i = 0; i < m; i++) dst[i] = ABS(src[i]); break;                                 \
        case MAP_SQUARE: for (int64_t i = 0; i < m; i++) dst[i] = MUL(src[i], src[i]); break;                      \
        case MAP_NONZERO: for (int64_t i = 0; i < m; i++) dst[i] = src[i] != 0 ? (T)1 : (T)0; break;               \
        case MAP_POW: for (int64_t i = 0; i < m; i++) dst[i] = POW(ABS(src[i]), (T)p); break;                      \
        case MAP_SUBSQ:                                                                                            \
            for (int64_t i = 0; i < m; i++) {                                                                      \
                T d = SUB(src[i], c[i * cs]);                                                                      \
                dst[i] = MUL(d, d);                                                                                \
            }                                                                                                      \
            break;                                                                                                 \
        case MAP_EXPSUB: for (int64_t i = 0; i < m; i++) dst[i] = EXP(SUB(src[i], c[i * cs])); break;              \
        default:                                                                                                   \
            if (dst != src) memcpy(dst, src, (size_t)m * sizeof(T));                                               \
        }                                                                                                          \
    }                                                                                                              \
    /* acc[l] op= v[l] over ng groups of 16 lanes (constant trip counts vectorise). */                           \
    static void lanes_##SFX(int cmb, T *restrict acc, const T *restrict v, int64_t ng) {                            \
        for (int64_t g = 0; g < ng; g++) {                                                                         \
            T *a = acc + g * 16;                                                                                   \
            const T *x = v + g * 16;                                                                               \
            switch (cmb) {                                                                                         \
            case CMB_SUM: for (int l = 0; l < 16; l++) a[l] = ADD(a[l], x[l]); break;                              \
            case CMB_PROD: for (int l = 0; l < 16; l++) a[l] = MUL(a[l], x[l]); break;                             \
            case CMB_MAX: for (int l = 0; l < 16; l++) a[l] = (x[l] > a[l] || ISNAN(x[l])) ? x[l] : a[l]; break;   \
            default: for (int l = 0; l < 16; l++) a[l] = (x[l] < a[l] || ISNAN(x[l])) ? x[l] : a[l]; break;        \
            }                                                                                                      \
        }                                                                                                          \
    }                                                                                                              \
    /* One output: the reduced elements [j0, j1) in runs along the innermost dim. */                             \
    static T item_inner_##SFX(const red_pass *ps, int64_t o, int64_t j0, int64_t j1) {                             \
        const red_plan *pl = ps->pl;                                                                               \
        _Alignas(64) T buf[CH];                                                                                    \
        _Alignas(64) unsigned char tmp[CH * 8];                                                                    \
        T c = ps->c ? ((const T *)ps->c)[o] : (T)0;                                                                \
        casc_##SFX cs;                                                                                               \
        cs.occ = 0;                                                                                                \
        T acc = ident_##SFX(ps->ident);                                                                              \
        int64_t idx[VT_MAX_DIMS];                                                                                  \
        int64_t base = kept_offset(pl, o, pl->nk), off = red_index(pl, j0, idx);                                   \
        int64_t isz = pl->rsz[pl->nr - 1], ist = pl->rin[pl->nr - 1];                                             \
        for (int64_t j = j0; j < j1;) {                                                                            \
            int64_t run = min64(isz - idx[pl->nr - 1], j1 - j);                                                    \
            for (int64_t pos = 0; pos < run;) {                                                                    \
                int64_t m = min64(CH, run - pos);                                                                  \
                const char *p = pl->in_base + (base + off + pos * ist) * (int64_t)pl->in_es;                       \
                const T *x = stage(ps, p, ist, m, buf, tmp, 1);                                                       \
                if (ps->map != MAP_ID) {                                                                           \
                    map_##SFX(ps->map, buf, x, m, &c, 0, ps->p);                                                     \
                    x = buf;                                                                                       \
                }                                                                                                  \
                if (ps->cmb == CMB_SUM) {                                                                          \
                    int64_t b = 0;                                                                                 \
                    if (ps->blocks_f32) {                                                                          \
                        float sums[CH / VT_REDUCE_SUM_BLOCK];                                                      \
                        int64_t nb = m / VT_REDUCE_SUM_BLOCK;                                                      \
                        ps->blocks_f32((const float *)x, nb, sums);                                                \
                        for (int64_t k = 0; k < nb; k++) casc_push_##SFX(&cs, (T)sums[k]);                         \
                        b = nb * VT_REDUCE_SUM_BLOCK;                                                              \
                    }                                                                                              \
                    for (; b < m; b += VT_REDUCE_SUM_BLOCK) {                                                      \
                        int64_t mb = min64(VT_REDUCE_SUM_BLOCK, m - b);                                            \
                        casc_push_##SFX(&cs, ps->part_f32 ? (T)ps->part_f32((const float *)(x + b), mb)            \
                                                          : sum_block_##SFX(x + b, mb));                          \
                    }                                                                                              \
                } else {                                                                                           \
                    acc = fold_##SFX(ps->cmb, x, m, acc);                                                            \
                }                                                                                                  \
                pos += m;                                                                                          \
            }                                                                                                      \
            off = red_advance(pl, idx, off, run);                                                                  \
            j += run;                                                                                              \
        }                                                                                                          \
        return ps->cmb == CMB_SUM ? casc_total_##SFX(&cs) : acc;                                                     \
    }                                                                                                              \
    typedef struct lcasc_##SFX {                                                                                     \
        uint64_t occ;                                                                                              \
        _Alignas(64) T tmp[VW];                                                                                    \
        _Alignas(64) T lev[LV][VW];                                                                                \
    } lcasc_##SFX;                                                                                                   \
    static void lcasc_push_##SFX(lcasc_##SFX *c, int64_t ng) {                                                        \
        int k = 0;                                                                                                 \
        while (k < LV - 1 && ((c->occ >> k) & 1)) {                                                                \
            lanes_##SFX(CMB_SUM, c->tmp, c->lev[k], ng);                                                             \
            c->occ &= ~(1ull << k);                                                                                \
            k++;                                                                                                   \
        }                                                                                                          \
        if ((c->occ >> k) & 1) lanes_##SFX(CMB_SUM, c->tmp, c->lev[k], ng);                                          \
        memcpy(c->lev[k], c->tmp, (size_t)ng * 16 * sizeof(T));                                                    \
        memset(c->tmp, 0, (size_t)ng * 16 * sizeof(T));                                                            \
        c->occ |= 1ull << k;                                                                                       \
    }                                                                                                              \
    /* The running state of one vertical tile of up to VW lanes. */                                            \
    typedef struct vtile_##SFX {                                                                                     \
        lcasc_##SFX lc;                                                                                              \
        _Alignas(64) T acc[VW];                                                                                    \
        int rows;                                                                                                  \
    } vtile_##SFX;                                                                                                   \
    static void vtile_init_##SFX(const red_pass *ps, vtile_##SFX *v) {                                               \
        const T id = ident_##SFX(ps->ident);                                                                         \
        v->lc.occ = 0;                                                                                             \
        v->rows = 0;                                                                                               \
        for (int l = 0; l < VW; l++) v->acc[l] = id, v->lc.tmp[l] = 0;                                             \
    }                                                                                                              \
    /* One row of the tile: x holds its w lanes, readable in ng groups of 16; \
     * a map writes mbuf (VW values). */                                      \
    static void vtile_row_##SFX(const red_pass *ps, vtile_##SFX *v, const T *x, int64_t w, int64_t ng, const T *cv, \
                                T *mbuf) {                                                                         \
        if (ps->map != MAP_ID) {                                                                                   \
            map_##SFX(ps->map, mbuf, x, w, cv, 1, ps->p);                                                            \
            x = mbuf;                                                                                              \
        }                                                                                                          \
        if (ps->cmb != CMB_SUM) {                                                                                  \
            lanes_##SFX(ps->cmb, v->acc, x, ng);                                                                     \
            return;                                                                                                \
        }                                                                                                          \
        if (ps->lanes_add_f32) ps->lanes_add_f32((float *)v->lc.tmp, (const float *)x, ng);                        \
        else lanes_##SFX(CMB_SUM, v->lc.tmp, x, ng);                                                                 \
        if (++v->rows == VB) lcasc_push_##SFX(&v->lc, ng), v->rows = 0;                                              \
    }                                                                                                              \
    static void vtile_finish_##SFX(const red_pass *ps, vtile_##SFX *v, int64_t w, int64_t ng, T *res) {              \
        if (ps->cmb == CMB_SUM) {                                                                                  \
            if (v->rows) lcasc_push_##SFX(&v->lc, ng);                                                               \
            for (int l = 0; l < VW; l++) v->acc[l] = 0;                                                            \
            for (int k = 0; k < LV; k++)                                                                           \
                if ((v->lc.occ >> k) & 1) lanes_##SFX(CMB_SUM, v->acc, v->lc.lev[k], ng);                            \
        }                                                                                                          \
        memcpy(res, v->acc, (size_t)w * sizeof(T));                                                                \
    }                                                                                                              \
    /* Up to VW neighbouring outputs: row by row over reduced elements [j0, j1). */                              \
    static void item_vert_##SFX(const red_pass *ps, int64_t g, int64_t j0, int64_t j1, T *res) {                   \
        const red_plan *pl = ps->pl;                                                                               \
        int64_t outer = g / pl->tiles, lane0 = g % pl->tiles * VW;                                                 \
        int64_t w = min64(VW, pl->lane_len - lane0), ng = (w + 15) / 16, o0 = outer * pl->lane_len + lane0;       \
        int64_t sk = pl->kin[pl->nk - 1];                                                                          \
        int64_t base = kept_offset(pl, outer, pl->nk - 1) + lane0 * sk;                                            \
        const T *cv = ps->c ? (const T *)ps->c + o0 : NULL;                                                        \
        _Alignas(64) T buf[VW];                                                                                    \
        _Alignas(64) unsigned char tmp[VW * 8];                                                                    \
        vtile_##SFX v;                                                                                               \
        /* Lanes read whole groups of 16: memory is read in place only when \
         * that stays inside the tile (or a map copies it out first). */     \
        int in_place = w % 16 == 0 || ps->map != MAP_ID;                                                           \
        vtile_init_##SFX(ps, &v);                                                                                    \
        for (int l = 0; l < VW; l++) buf[l] = 0;                                                                   \
        int64_t idx[VT_MAX_DIMS];                                                                                  \
        int64_t off = red_index(pl, j0, idx);                                                                      \
        for (int64_t j = j0; j < j1; j++) {                                                                        \
            const char *p = pl->in_base + (base + off) * (int64_t)pl->in_es;                                       \
            vtile_row_##SFX(ps, &v, stage(ps, p, sk, w, buf, tmp, in_place), w, ng, cv, buf);                        \
            off = red_advance(pl, idx, off, 1);                                                                    \
        }                                                                                                          \
        vtile_finish_##SFX(ps, &v, w, ng, res);                                                                      \
    }                                                                                                              \
    /* Fed (vt_reduce_takes_source): tiles [t0, t1) of one outer index over \
     * reduced elements [j0, j1), segment s, reading each row's lanes of all \
     * of them in one run from the source. Each tile goes through the same  \
     * steps as in item_vert, so the results are the same bit for bit. */   \
    static size_t rows_bytes_##SFX(int64_t nt, int64_t m) { /* item_rows' scratch */                               \
        return sizeof(vtile_##SFX) * (size_t)nt + (((size_t)m * sizeof(T) + 63) & ~(size_t)63) + 2 * VW * sizeof(T) + \
               (((size_t)m * 8 + 63) & ~(size_t)63);                                                               \
    }                                                                                                              \
    static void item_rows_##SFX(const red_pass *ps, unsigned char *mem, int64_t outer, int64_t t0, int64_t t1,      \
                                int64_t s, int64_t j0, int64_t j1) {                                               \
        const red_plan *pl = ps->pl;                                                                               \
        const int64_t lane0 = t0 * VW, m = min64(pl->lane_len, t1 * VW) - lane0, nt = t1 - t0;                   \
        const int64_t base = kept_offset(pl, outer, pl->nk - 1) + lane0; /* lanes are contiguous */              \
        const size_t tiles_bytes = sizeof(vtile_##SFX) * (size_t)nt, buf_bytes = ((size_t)m * sizeof(T) + 63) & ~(size_t)63; \
        vtile_##SFX *v = (vtile_##SFX *)(void *)mem;                                                                 \
        T *buf = (T *)(void *)(mem + tiles_bytes), *pad = (T *)(void *)(mem + tiles_bytes + buf_bytes);          \
        T *mbuf = pad + VW;                                                                                        \
        void *tmp = mbuf + VW;                                                                                     \
        for (int64_t t = 0; t < nt; t++) vtile_init_##SFX(ps, &v[t]);                                                \
        for (int l = 0; l < 2 * VW; l++) pad[l] = 0;                                                               \
        int64_t idx[VT_MAX_DIMS];                                                                                  \
        int64_t off = red_index(pl, j0, idx);                                                                      \
        for (int64_t j = j0; j < j1; j++) {                                                                        \
            const T *x = stage(ps, pl->in_base + (base + off) * (int64_t)pl->in_es, 1, m, buf, tmp, 1);            \
            for (int64_t t = 0; t < nt; t++) {                                                                     \
                const int64_t w = min64(VW, m - t * VW), o0 = outer * pl->lane_len + lane0 + t * VW;             \
                const T *xt = x + t * VW;                                                                          \
                if (ps->map == MAP_ID && w % 16) { /* a partial tile's lanes past w: zeros, as item_vert's */     \
                    memcpy(pad, xt, (size_t)w * sizeof(T));                                                        \
                    xt = pad;                                                                                      \
                }                                                                                                  \
                vtile_row_##SFX(ps, &v[t], xt, w, (w + 15) / 16, ps->c ? (const T *)ps->c + o0 : NULL, mbuf);      \
            }                                                                                                      \
            off = red_advance(pl, idx, off, 1);                                                                    \
        }                                                                                                          \
        for (int64_t t = 0; t < nt; t++) {                                                                         \
            const int64_t w = min64(VW, m - t * VW), g = outer * pl->tiles + t0 + t;                              \
            T *dst = pl->S > 1 ? (T *)ps->parts + (g * pl->S + s) * VW                                             \
                               : (T *)ps->res + outer * pl->lane_len + (t0 + t) * VW;                              \
            vtile_finish_##SFX(ps, &v[t], w, (w + 15) / 16, dst);                                                    \
        }                                                                                                          \
    }                                                                                                              \
    static void items_##SFX(const red_pass *ps, int64_t b, int64_t e) {                                             \
        const red_plan *pl = ps->pl;                                                                               \
        const int64_t nc = ps->row_chunks;                                                                         \
        unsigned char *mem = NULL; /* fed lanes: one scratch for the range's items, sized for the largest */      \
        if (nc) {                                                                                                  \
            const int64_t tmax = (pl->tiles + nc - 1) / nc;                                                        \
            mem = aligned_alloc(64, rows_bytes_##SFX(tmax, min64(pl->lane_len, tmax * VW)));                         \
            if (!mem) {                                                                                            \
                atomic_store(ps->no_memory, 1);                                                                    \
                return;                                                                                            \
            }                                                                                                      \
        }                                                                                                          \
        for (int64_t it = b; it < e; it++) {                                                                       \
            int64_t g = it / pl->S, s = it % pl->S;                                                                \
            int64_t j0 = s * pl->seg, j1 = min64(pl->R, j0 + pl->seg);                                             \
            if (nc) { /* g: an outer index and one of its nc chunks of tiles */                                    \
                const int64_t c = g % nc;                                                                          \
                item_rows_##SFX(ps, mem, g / nc, c * pl->tiles / nc, (c + 1) * pl->tiles / nc, s, j0, j1);         \
            } else if (pl->vertical) {                                                                             \
                T *dst = pl->S > 1 ? (T *)ps->parts + it * VW                                                      \
                                   : (T *)ps->res + g / pl->tiles * pl->lane_len + g % pl->tiles * VW;             \
                item_vert_##SFX(ps, g, j0, j1, dst);                                                                 \
            } else {                                                                                               \
                T r = item_inner_##SFX(ps, g, j0, j1);                                                               \
                if (pl->S > 1) ((T *)ps->parts)[it] = r;                                                           \
                else ((T *)ps->res)[g] = r;                                                                        \
            }                                                                                                      \
        }                                                                                                          \
        free(mem);                                                                                                 \
    }                                                                                                              \
    /* Segments of one group combine in segment order: deterministic. */                                         \
    static void combine_##SFX(const red_pass *ps) {                                                                 \
        const red_plan *pl = ps->pl;                                                                               \
        const T *parts = ps->parts;                                                                                \
        T *res = ps->res;                                                                                          \
        T col[64];                                                                                                 \
        for (int64_t g = 0; g < pl->groups; g++) {                                                                 \
            int64_t w = 1, o0 = g, stride = 1;                                                                     \
            if (pl->vertical) {                                                                                    \
                o0 = g / pl->tiles * pl->lane_len + g % pl->tiles * VW;                                            \
                w = min64(VW, pl->lane_len - g % pl->tiles * VW);                                                  \
                stride = VW;                                                                                       \
            }                                                                                                      \
            for (int64_t l = 0; l < w; l++) {                                                                      \
                T acc = ps->cmb == CMB_SUM ? (T)0 : ident_##SFX(ps->ident);                                          \
                casc_##SFX cs;                                                                                       \
                cs.occ = 0;                                                                                        \
                for (int64_t s0 = 0; s0 < pl->S; s0 += 64) {                                                       \
                    int64_t m = min64(64, pl->S - s0);                                                             \
                    for (int64_t s = 0; s < m; s++) col[s] = parts[((g * pl->S) + s0 + s) * stride + l];           \
                    if (ps->cmb == CMB_SUM) casc_push_##SFX(&cs, sum_block_##SFX(col, m));                             \
                    else acc = fold_##SFX(ps->cmb, col, m, acc);                                                     \
                }                                                                                                  \
                res[o0 + l] = ps->cmb == CMB_SUM ? casc_total_##SFX(&cs) : acc;                                      \
            }                                                                                                      \
        }                                                                                                          \
    }

DEFINE_CLASS(f, float, ADD_FP, MUL_FP, SUB_FP, NAN_FP, fabsf, powf, expf, -INFINITY, INFINITY)
DEFINE_CLASS(d, double, ADD_FP, MUL_FP, SUB_FP, NAN_FP, fabs, pow, exp, -INFINITY, INFINITY)
DEFINE_CLASS(i, int64_t, ADD_INT, MUL_INT, SUB_INT, NAN_INT, abs_int, pow_unused_int, unused_int, INT64_MIN,
             INT64_MAX)

/* item_inner_f for the commonest reduction, a plain sum along contiguous
 * rows (sum(dim=-1), mean's sum): the same chunks, blocks and cascade, so
 * the same bits, without the general walk's per-row index arithmetic (two
 * 64-bit divisions a row cost as much as summing a 512-value row). */
static int rows_sum(const red_pass *ps) {
    const red_plan *pl = ps->pl;
    return ps->cls == VT_CLASS_FLOAT && !pl->vertical && pl->S == 1 && ps->cmb == CMB_SUM && ps->map == MAP_ID &&
           !ps->src && pl->nr == 1 && pl->rin[0] == 1;
}

/* Block sums the row path takes from one call of the block kernel: 64 KB
 * of f32 rows, so its four chains overlap across short rows. */
#define ROW_BLOCKS 64

static void rows_sum_f(const red_pass *ps, int64_t b, int64_t e) {
    const red_plan *pl = ps->pl;
    _Alignas(64) float buf[CH];
    _Alignas(64) unsigned char tmp[CH * 8];
    float sums[CH / VT_REDUCE_SUM_BLOCK];
    const int64_t R = pl->rsz[0], es = (int64_t)pl->in_es;
    /* bf16 summed in f32: whole blocks widen as they load, not staged */
    const int widen = ps->blocks_bf16 && pl->in_dt == VT_BF16 && pl->compute == VT_F32;
    /* Short f32 (or widened bf16) rows of whole blocks, side by side in
     * memory (a [rows, 512] sum(dim=-1)): the blocks of several rows go to
     * the block kernel in one call, so its chains overlap across rows; each
     * row's cascade then takes its blocks' sums in the order it always does. */
    const int64_t per = R / VT_REDUCE_SUM_BLOCK;
    const int whole_f32 = ps->blocks_f32 && !widen && ps->direct && pl->in_dt == VT_F32;
    if ((widen || whole_f32) && pl->nk == 1 && pl->kin[0] == R && R % VT_REDUCE_SUM_BLOCK == 0 && per >= 1 &&
        per <= 4) {
        /* The cascade of a row's 1-4 block sums, written out: pushing
         * s0..s3 and taking the total adds (s0 + s1) + (s2 + s3), then the
         * total's + 0 (level by level, low to high: a lone s2 first). */
        float many[ROW_BLOCKS];
        const int64_t rows = ROW_BLOCKS / per;
        float *res = ps->res;
        for (int64_t o = b; o < e; o += rows) {
            const int64_t n = min64(rows, e - o);
            const void *first = pl->in_base + o * R * es;
            if (widen) ps->blocks_bf16((const uint16_t *)first, n * per, many);
            else ps->blocks_f32((const float *)first, n * per, many);
            const float *s = many;
            switch (per) {
            case 1:
                for (int64_t r = 0; r < n; r++) res[o + r] = s[r] + 0.0f;
                break;
            case 2:
                for (int64_t r = 0; r < n; r++) res[o + r] = (s[2 * r] + s[2 * r + 1]) + 0.0f;
                break;
            case 3:
                for (int64_t r = 0; r < n; r++) res[o + r] = (s[3 * r] + s[3 * r + 1]) + (s[3 * r + 2] + 0.0f);
                break;
            default:
                for (int64_t r = 0; r < n; r++)
                    res[o + r] = ((s[4 * r] + s[4 * r + 1]) + (s[4 * r + 2] + s[4 * r + 3])) + 0.0f;
            }
        }
        return;
    }
    for (int64_t o = b; o < e; o++) {
        const char *row = pl->in_base + (pl->nk == 1 ? o * pl->kin[0] : kept_offset(pl, o, pl->nk)) * es;
        casc_f cs;
        cs.occ = 0;
        for (int64_t pos = 0; pos < R; pos += CH) {
            const int64_t m = min64(CH, R - pos);
            int64_t i = 0;
            if (widen) {
                const int64_t nb = m / VT_REDUCE_SUM_BLOCK;
                ps->blocks_bf16((const uint16_t *)(const void *)(row + pos * es), nb, sums);
                for (int64_t k = 0; k < nb; k++) casc_push_f(&cs, sums[k]);
                i = nb * VT_REDUCE_SUM_BLOCK;
            }
            if (i == m) continue;
            const int64_t left = m - i;
            const float *x = stage(ps, row + (pos + i) * es, 1, left, buf, tmp, 1); /* values i..m */
            int64_t j = 0;
            if (ps->blocks_f32 && !widen) {
                const int64_t nb = left / VT_REDUCE_SUM_BLOCK;
                ps->blocks_f32(x, nb, sums);
                for (int64_t k = 0; k < nb; k++) casc_push_f(&cs, sums[k]);
                j = nb * VT_REDUCE_SUM_BLOCK;
            }
            for (; j < left; j += VT_REDUCE_SUM_BLOCK) {
                const int64_t mb = min64(VT_REDUCE_SUM_BLOCK, left - j);
                casc_push_f(&cs, ps->part_f32 ? ps->part_f32(x + j, mb) : sum_block_f(x + j, mb));
            }
        }
        ((float *)ps->res)[o] = casc_total_f(&cs);
    }
}

static void pass_range(void *ctx, int64_t b, int64_t e) {
    const red_pass *ps = ctx;
    switch (ps->cls) {
    case VT_CLASS_FLOAT:
        if (rows_sum(ps)) rows_sum_f(ps, b, e);
        else items_f(ps, b, e);
        break;
    case VT_CLASS_DOUBLE: items_d(ps, b, e); break;
    default: items_i(ps, b, e); break;
    }
}

/* VT_ISA_* bits the f32 loops may use; UINT_MAX until first use. */
static _Atomic unsigned reduce_isa = ~0u;

unsigned vt_reduce_select_isa(unsigned mask) {
    const unsigned isa = vt_isa_widest(mask);
    atomic_store(&reduce_isa, isa);
    return isa;
}

void vt_reduce_pass_run(red_pass *ps) {
    const red_plan *pl = ps->pl;
    ps->direct = pl->in_dt == ps->cls_dt && pl->compute == ps->cls_dt;
    unsigned isa = atomic_load(&reduce_isa);
    if (isa == ~0u) {
        vt_kernels_ready();
        isa = atomic_load(&reduce_isa);
    }
    ps->blocks_f32 = NULL;
    ps->blocks_bf16 = NULL;
    ps->part_f32 = NULL;
    ps->lanes_add_f32 = NULL;
#if VT_X86
    if (ps->cls == VT_CLASS_FLOAT && (isa & VT_ISA_AVX512)) {
        ps->blocks_f32 = vt_reduce_blocks_f32_avx512;
        ps->blocks_bf16 = vt_reduce_blocks_bf16_avx512;
        ps->part_f32 = vt_reduce_part_f32_avx512;
        ps->lanes_add_f32 = vt_reduce_lanes_add_f32_avx512;
    } else if (ps->cls == VT_CLASS_FLOAT && (isa & VT_ISA_AVX2)) {
        ps->blocks_f32 = vt_reduce_blocks_f32_avx2;
        ps->blocks_bf16 = vt_reduce_blocks_bf16_avx2;
        ps->part_f32 = vt_reduce_part_f32_avx2;
        ps->lanes_add_f32 = vt_reduce_lanes_add_f32_avx2;
    }
#endif
    int64_t items = pl->groups * pl->S;
    if (items == 0) return;
    int64_t work = pl->vertical ? min64(pl->seg, pl->R) * min64(VW, pl->lane_len) : min64(pl->seg, pl->R);
    ps->row_chunks = 0;
    if (ps->src && pl->vertical && pl->kin[pl->nk - 1] == 1) {
        /* Fed lanes read a run of tiles per row: the longer the run, the
         * less a source's cost per read weighs, so an outer index's tiles go
         * in as few chunks as still give each thread an item, cut evenly,
         * each at least three tiles (over 256 values: a source's shortest
         * run) and at most VT_SOURCE_MAX values. The chunks change the order
         * of the visits, never the order of any tile's own operations. */
        const int64_t per = pl->groups / pl->tiles * pl->S, threads = vt_num_threads();
        int64_t nc = per >= threads ? 1 : (threads + per - 1) / per;
        if (nc > pl->lane_len / (VT_SOURCE_RUN + VW)) nc = pl->lane_len / (VT_SOURCE_RUN + VW);
        if (nc < (pl->tiles + VT_SOURCE_MAX / VW - 1) / (VT_SOURCE_MAX / VW))
            nc = (pl->tiles + VT_SOURCE_MAX / VW - 1) / (VT_SOURCE_MAX / VW);
        ps->row_chunks = nc < 1 ? 1 : nc;
        items = pl->groups / pl->tiles * ps->row_chunks * pl->S;
        work *= (pl->tiles + ps->row_chunks - 1) / ps->row_chunks;
    }
    if (work < 1) work = 1;
    int64_t grain = GRAIN / work;
    vt_parallel_for(items, grain < 1 ? 1 : grain, pass_range, ps);
    if (pl->S > 1) {
        switch (ps->cls) {
        case VT_CLASS_FLOAT: combine_f(ps); break;
        case VT_CLASS_DOUBLE: combine_d(ps); break;
        default: combine_i(ps); break;
        }
    }
}
