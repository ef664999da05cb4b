/* mxu.c — the MXU driver of one 2-D product: packs both operands into the
 * engine layout, runs the bf16 passes over L2-sized C tiles on both cores
 * and writes out alpha*C+beta*bias. The entry points and the batch are in
 * mxu_batch.c. */
#include <stdatomic.h>
#include <stdlib.h>

#include "mxu_local.h"

/* C tile of one task: MC x NC f32 (128 KiB, in out itself when it can be).
 * KC chunks of 32 per block call: C stays in the AMX tiles for up to 2048 K,
 * and one 32-row A strip (KC KiB x 2) stays in L2 while the NC columns of
 * B stream past it. Measured on the 2048^3 product: 16 or 32 chunks and
 * 128-wide tiles were 10-25% slower. */
#define MC 128
#define NC 256
#define KC 64
/* When K is short enough that a 32-row A strip fits in L1 (K <= 512: 32
 * KiB of bf16), the strip is reused across every column pair of its claim
 * from L1, and a wider claim reuses it more often per fetch from L3: up to
 * NC_WIDE columns, as long as the claim's B columns (K x nc bf16) stay
 * within B_BLOCK_BYTES of L2. Measured on one core (2048 x 512 x 2048
 * bf16, AMX): 256 columns 1.3 TFLOP/s, 512 1.6, 1024 1.7. Longer K keeps
 * NC: its A strip streams from L2 whatever the width. */
#define NC_WIDE 1024
#define A_STRIP_L1_CHUNKS 16
#define B_BLOCK_BYTES ((int64_t)1 << 20)
/* The longest K whose A rows a claim rounds into a strip of its own
 * (vt_mxu_matmul_2d's a_strip): MC rows of it in bf16, 512 KiB. */
#define A_STRIP_MAX_K 2048
/* The multi-pass modes claim up to MGROUP C tiles of one NC column block at
 * a time and run each pass over all of them before the next pass, so that
 * pass's part of the B columns (NC x K bf16, 1 MiB at K = 2048) stays in L2
 * while the A strips stream past it, as in DEFAULT. Tile by tile, the three
 * parts' B columns (3 MiB) overflowed the 2 MiB L2 and every pass reloaded
 * them. The order of the sum of each element does not change. */
#define MGROUP 8

/* ------------------------------------------------------------ epilogue */

static double load_double(const vt_tensor *t, int64_t off) {
    const char *p = (const char *)t->data;
    switch (t->dtype) {
    case VT_F32: return ((const float *)p)[off];
    case VT_F64: return ((const double *)p)[off];
    case VT_BF16: return vt_bf16_to_f32(((const uint16_t *)p)[off]);
    case VT_F16: return vt_f16_to_f32(((const uint16_t *)p)[off]);
    default: {
        double d;
        vt_convert(t->dtype, p + off * (int64_t)vt_dtype_size(t->dtype), 1, VT_F64, &d, 1, 1);
        return d;
    }
    }
}

typedef struct epilogue {
    const vt_tensor *out, *bias; /* 2-D views; bias NULL when beta*bias is not added */
    double alpha, beta;
    int vec_bf16; /* AVX-512 is there for the bf16 row store (and the guard) */
} epilogue;

/* A plain row (alpha == 1, no bias) at unit stride: f32 copies, bf16 rounds
 * as vt_f32_to_bf16 does, 16 lanes at a time when it can. */
static int write_plain_row(const epilogue *ep, const float *cr, int64_t oi, int64_t nb) {
    const vt_tensor *o = ep->out;
    if (o->strides[1] != 1 && nb > 1) return 0;
    if (o->dtype == VT_F32) {
        memcpy((float *)o->data + oi, cr, (size_t)nb * sizeof(float));
        return 1;
    }
#if VT_X86
    if (o->dtype == VT_BF16 && ep->vec_bf16) {
        vt_mxu_store_bf16_avx512((uint16_t *)o->data + oi, cr, nb);
        return 1;
    }
#endif
    return 0;
}

/* One element of out (at oi) from its f32 sum v: plain (alpha == 1, no
 * bias) rounds v directly, else alpha*v + beta*bias[bi] in f64, rounded
 * once. */
static void write_element(const epilogue *ep, int plain, float v, int64_t oi, int64_t bi) {
    const vt_tensor *o = ep->out;
    if (plain) {
        switch (o->dtype) {
        case VT_F32: ((float *)o->data)[oi] = v; break;
        case VT_BF16: ((uint16_t *)o->data)[oi] = vt_f32_to_bf16(v); break;
        default: ((uint16_t *)o->data)[oi] = vt_f32_to_f16(v); break;
        }
        return;
    }
    double d = ep->alpha == 1.0 ? (double)v : ep->alpha * (double)v;
    if (ep->bias) d += ep->beta * load_double(ep->bias, bi);
    switch (o->dtype) {
    case VT_F32: ((float *)o->data)[oi] = (float)d; break;
    case VT_BF16: ((uint16_t *)o->data)[oi] = vt_mxu_f64_to_bf16(d); break;
    default: ((uint16_t *)o->data)[oi] = vt_mxu_f64_to_f16(d); break;
    }
}

/* out[m0.., n0..] = alpha*C + beta*bias, rounded once to out's dtype; the
 * common alpha == 1, no-bias case rounds the f32 sum directly. */
static void write_out(const epilogue *ep, const float *c, int64_t ldc, int64_t m0, int64_t n0, int64_t mb, int64_t nb) {
    const vt_tensor *o = ep->out;
    int plain = ep->alpha == 1.0 && !ep->bias;
    if (o->strides[0] == 1 && o->strides[1] != 1 && mb > 1) {
        /* an out whose M runs at unit stride (a transposed weight
         * gradient): column by column, each a contiguous run of out (row by
         * row, every element of a row went to its own line, often a page
         * apart, in one L1 set) */
        const vt_tensor *b = ep->bias;
        for (int64_t j = 0; j < nb; j++) {
            int64_t ocol = o->offset + m0 + (n0 + j) * o->strides[1];
            int64_t bcol = b ? b->offset + m0 * b->strides[0] + (n0 + j) * b->strides[1] : 0;
            if (plain && o->dtype == VT_F32) {
                float *d = (float *)o->data + ocol;
                for (int64_t i = 0; i < mb; i++) d[i] = c[i * ldc + j];
                continue;
            }
            for (int64_t i = 0; i < mb; i++)
                write_element(ep, plain, c[i * ldc + j], ocol + i, b ? bcol + i * b->strides[0] : 0);
        }
        return;
    }
    for (int64_t i = 0; i < mb; i++) {
        const float *cr = c + i * ldc;
        int64_t orow = o->offset + (m0 + i) * o->strides[0] + n0 * o->strides[1], os = o->strides[1];
        if (plain && write_plain_row(ep, cr, orow, nb)) continue;
        int64_t brow = ep->bias ? ep->bias->offset + (m0 + i) * ep->bias->strides[0] + n0 * ep->bias->strides[1] : 0;
        for (int64_t j = 0; j < nb; j++)
            write_element(ep, plain, cr[j], orow + j * os, ep->bias ? brow + j * ep->bias->strides[1] : 0);
    }
}

/* ------------------------------------------------------------ 2-D product */

typedef struct gemm_job {
    const vt_mxu_engine *e;
    vt_precision prec;
    const vt_tensor *a, *b;
    vt_mxu_packed p;
    int64_t na;    /* packing tasks that are A panels */
    int64_t first; /* task number of the current packing loop's index 0 */
    int64_t ntm;   /* tiles along M */
    int64_t group; /* tiles along M per claim: MGROUP in multi-pass modes, else 1 */
    int64_t ngm;   /* claims along M */
    int64_t nclaims;
    int64_t nc;        /* columns per claim: NC (up to NC_WIDE for short K), or less so every thread has claims */
    atomic_llong next; /* next claim */
    int direct;        /* full tiles may accumulate in out itself (f32, unit stride, plain) */
    const uint16_t *a_direct; /* A read where it lies (engine's direct kernel): its row 0, else NULL */
    int64_t lda;
    int pairs;     /* k-pairs per chunk of the in-place A: 16, or K / 2 when K < 32 */
    int sink_bf16; /* a_direct and a plain bf16 out at unit stride: tiles go out through the sink */
    int a_strip;   /* each claim rounds its own rows of the f32 A into a bf16 strip read in place */
    epilogue ep;
    atomic_int oom;
} gemm_job;

static void pack_range(void *ctx, int64_t begin, int64_t end) {
    gemm_job *j = ctx;
    void *mem = malloc(vt_mxu_pack_scratch_bytes(&j->p));
    if (!mem) {
        atomic_store(&j->oom, 1);
        return;
    }
    for (int64_t t = begin; t < end; t++) vt_mxu_pack_task(&j->p, j->e, j->prec, j->a, j->b, j->first + t, j->na, mem);
    free(mem);
}

/* Elements of a rounded A (vt_mxu_matmul_2d's a_round) per task: a multiple of 16. */
#define ROUND_RUN ((int64_t)1 << 15)

/* Runs [begin, end) of the dense f32 A rounded into the bf16 copy a_direct. */
static void round_range(void *ctx, int64_t begin, int64_t end) {
    gemm_job *j = ctx;
    const int64_t total = j->p.M * j->p.K;
    const float *x = (const float *)j->a->data + j->a->offset;
    for (int64_t t = begin; t < end; t++) {
        const int64_t i = t * ROUND_RUN, n = total - i < ROUND_RUN ? total - i : ROUND_RUN;
        j->e->split(x + i, n, n, VT_PRECISION_DEFAULT, (uint16_t *)j->a_direct + i, NULL, NULL);
    }
}

/* One C tile of a claim: rows m0.., columns n0.. (mb x nb, multiples of 32),
 * accumulated at c (row stride ldc), in out itself when direct. */
typedef struct tile {
    int64_t m0, n0, mb, nb, ldc;
    float *c;
    int direct;
    int sunk; /* the direct kernel rounds the sums into out itself (sink) */
    vt_mxu_sink sink;
    const uint16_t *a; /* A's row m0 read in place (rows lda apart), or NULL: the packed panels */
    int64_t lda;
} tile;

/* Tile x's C (+)= segment ps.a of its A panels times segment ps.b of its B
 * panels, KC chunks per block call; acc == 0 starts the sum at +0. */
static void run_pass(const gemm_job *j, const tile *x, vt_mxu_pass ps, int acc) {
    const vt_mxu_packed *p = &j->p;
    const uint16_t *a = p->a + (x->m0 / 16) * p->a_panel + ps.a * p->kt * VT_MXU_CHUNK;
    const uint16_t *b = p->b + (x->n0 / 16) * p->b_panel + ps.b * p->kt * VT_MXU_CHUNK;
    if (x->a) { /* one pass (DEFAULT): A's rows from m0, 32 k per chunk */
        const vt_mxu_sink *sink = x->sunk ? &x->sink : NULL;
        for (int64_t k = 0; k < p->kt; k += KC) {
            int64_t kc = p->kt - k < KC ? p->kt - k : KC;
            j->e->direct(kc, j->pairs, x->mb, x->nb, x->a + k * 32, x->lda,
                         b + k * VT_MXU_CHUNK, p->b_panel, x->c, x->ldc, acc || k > 0, k + KC >= p->kt ? sink : NULL);
        }
        return;
    }
    for (int64_t k = 0; k < p->kt; k += KC) {
        int64_t kc = p->kt - k < KC ? p->kt - k : KC;
        j->e->block(kc, x->mb, x->nb, a + k * VT_MXU_CHUNK, p->a_panel, b + k * VT_MXU_CHUNK, p->b_panel, x->c,
                    x->ldc, acc || k > 0);
    }
}

/* The guard: non-finite low sums become +0. Scalar, it took as long as a
 * seventh of DEFAULT's GEMM at 2048^3; AVX-512 does 16 at a time. */
static void guard_row(const gemm_job *j, float *c, int64_t n) {
#if VT_X86
    if (j->ep.vec_bf16) {
        vt_mxu_guard_avx512(c, n);
        return;
    }
#endif
    for (int64_t x = 0; x < n; x++)
        if (!isfinite(c[x])) c[x] = 0.0f;
}

/* The passes in order, each over the whole K and all the claim's tiles, so
 * every element is the same sequential f32 sum as one GEMM over the passes
 * concatenated along K (numerics_amx.md §5). The low passes form one sum; a
 * non-finite one (inf*0 from an inf input's NaN lo part, overflow) is
 * replaced by 0 before hi*hi is added, as XLA's ReplaceNaNWithZeros does. */
static void run_tiles(const gemm_job *j, const tile *tl, int64_t nt) {
    const vt_mxu_packed *p = &j->p;
    const vt_mxu_pass *ps = vt_mxu_passes(p->nlow);
    if (p->kt == 0) { /* K == 0: the sum of no products */
        for (int64_t t = 0; t < nt; t++)
            for (int64_t i = 0; i < tl[t].mb; i++) memset(tl[t].c + i * tl[t].ldc, 0, (size_t)tl[t].nb * 4);
        return;
    }
    for (int g = 0; g < p->nlow; g++)
        for (int64_t t = 0; t < nt; t++) run_pass(j, &tl[t], ps[g], g > 0);
    for (int64_t t = 0; t < nt; t++) {
        if (p->nlow)
            for (int64_t i = 0; i < tl[t].mb; i++) guard_row(j, tl[t].c + i * tl[t].ldc, tl[t].nb);
        run_pass(j, &tl[t], ps[p->nlow], p->nlow > 0);
    }
}

/* Each participant claims tiles until none are left (rather than taking a
 * fixed half), so a core slowed by other processes does not hold up the
 * other. Claims go M-fastest: consecutive claims share their B panels. */
static void tile_range(void *ctx, int64_t begin, int64_t end) {
    (void)begin, (void)end;
    gemm_job *j = ctx;
    const vt_mxu_packed *p = &j->p;
    const vt_tensor *o = j->ep.out;
    float *scratch = NULL; /* group tiles of MC x nc, allocated when a tile is not direct */
    uint16_t *strip = NULL; /* a_strip: MC rounded rows of A */
    for (int64_t u; (u = atomic_fetch_add(&j->next, 1)) < j->nclaims;) {
        tile tl[MGROUP];
        int64_t t0 = (u % j->ngm) * j->group, nt = j->ntm - t0 < j->group ? j->ntm - t0 : j->group;
        for (int64_t t = 0; t < nt; t++) {
            tile *x = &tl[t];
            x->m0 = (t0 + t) * MC, x->n0 = (u / j->ngm) * j->nc;
            x->mb = p->Mp - x->m0 < MC ? p->Mp - x->m0 : MC, x->nb = p->Np - x->n0 < j->nc ? p->Np - x->n0 : j->nc;
            /* M's padding rows (up to 31, all of them but one for a
             * matrix-vector product) cost as much as real ones; an engine
             * that takes any row count skips them (m0 < M always). */
            if ((j->e->rows_any || j->a_direct || j->a_strip) && p->M - x->m0 < x->mb) x->mb = p->M - x->m0;
            if (j->e->cols16 && p->N - x->n0 < x->nb) x->nb = (p->N - x->n0 + 15) & ~(int64_t)15;
            x->a = NULL;
            if (j->a_direct) x->a = j->a_direct + x->m0 * j->lda, x->lda = j->lda;
            if (j->a_strip) {
                if (!strip && !(strip = aligned_alloc(64, (size_t)MC * p->K * sizeof(uint16_t)))) {
                    atomic_store(&j->oom, 1);
                    goto done;
                }
                const float *a0 = (const float *)j->a->data + j->a->offset + x->m0 * j->a->strides[0];
                for (int64_t i = 0; i < x->mb; i++)
                    j->e->split(a0 + i * j->a->strides[0], p->K, p->K, VT_PRECISION_DEFAULT, strip + i * p->K, NULL,
                                NULL);
                x->a = strip, x->lda = p->K;
            }
            /* C accumulates in out when the whole tile is inside it: the
             * f32 sum is the result, so the copy would only move bytes. */
            x->direct = j->direct && x->m0 + x->mb <= p->M && x->n0 + x->nb <= p->N;
            if (!x->direct && !scratch) {
                scratch = aligned_alloc(64, (size_t)j->group * MC * j->nc * sizeof(float));
                if (!scratch) {
                    atomic_store(&j->oom, 1);
                    goto done;
                }
            }
            x->c = x->direct ? (float *)o->data + o->offset + x->m0 * o->strides[0] + x->n0 : scratch + t * MC * j->nc;
            x->ldc = x->direct ? o->strides[0] : j->nc;
            /* a plain bf16 out takes an in-place A's sums straight from the
             * kernel, rounded in L1, not from a scratch tile */
            x->sunk = j->sink_bf16;
            if (x->sunk)
                x->sink = (vt_mxu_sink){(uint16_t *)o->data + o->offset + x->m0 * o->strides[0] + x->n0, o->strides[0],
                                        p->N - x->n0};
        }
        run_tiles(j, tl, nt);
        for (int64_t t = 0; t < nt; t++) {
            const tile *x = &tl[t];
            if (x->direct || x->sunk) continue;
            int64_t mv = p->M - x->m0 < x->mb ? p->M - x->m0 : x->mb;
            int64_t nv = p->N - x->n0 < x->nb ? p->N - x->n0 : x->nb;
            write_out(&j->ep, x->c, x->ldc, x->m0, x->n0, mv, nv);
        }
    }
done:
    free(scratch);
    free(strip);
}

/* ------------------------------------------------------------ K slices
 * A product with a small C and a long K (the weight gradient of a layer
 * with few channels: 16 x 96 summed over 50176 positions) had few C tiles
 * for the cores (two column claims of 64 and 32 columns on 2 threads) and
 * packed both operands whole (13 MB of panels) before reading them back.
 * It is cut along K instead: KS_GROUPS groups (fewer when K is shorter)
 * of consecutive KS_CHUNKS-chunk slices; a thread takes a group,
 * packs one slice at a time into its own panels (in L2) and accumulates
 * the slice into the group's C, and the groups' sums are added in group
 * order at the end. The grouping depends on the shape only, so the result
 * does not depend on the thread count; each element is a sum of group
 * sums, each the sequential f32 sum over its slices (a different order
 * than the whole-K sum, with the same per-product error). DEFAULT only:
 * the guarded low passes of HIGH and HIGHEST are a whole-K sum. A B whose
 * rows are produced (a convolution's column matrix) is asked for the rows
 * of each slice; an A whose rows are produced keeps the whole-K path (its
 * rows span K). Kept B panels are not used here: B is packed slice by
 * slice, as A is. */
#define KS_CHUNKS 32
#define KS_GROUPS 16
#define KS_MAX_C (128 * 128)
#define KS_MIN_SLICES 4

typedef struct ksplit_job {
    const gemm_job *j; /* the whole product: engine, operands, plan, epilogue */
    int64_t nslices, ngroups;
    float *part; /* ngroups C sums of Mp x Np */
    atomic_llong next;
    atomic_int oom;
} ksplit_job;

static int64_t ksplit_first(const ksplit_job *ks, int64_t g) { return g * ks->nslices / ks->ngroups; }

/* A produced B's rows seen from a slice starting at row k0. */
typedef struct slice_rows {
    const vt_mxu_rows *whole;
    int64_t k0;
} slice_rows;

static void slice_row(void *ctx, int64_t index, void *dst) {
    const slice_rows *r = ctx;
    r->whole->row(r->whole->ctx, r->k0 + index, dst);
}

/* Slice s of the whole product: its K range of a and b, packed into the
 * job's own panels. */
static void ksplit_pack(const gemm_job *whole, int64_t s, gemm_job *sj, void *mem) {
    const int64_t k0 = s * KS_CHUNKS * 32, K = whole->p.K, kl = K - k0 < KS_CHUNKS * 32 ? K - k0 : KS_CHUNKS * 32;
    vt_tensor av = *whole->a, bv = *whole->b;
    av.offset += k0 * av.strides[1], av.sizes[1] = kl;
    bv.offset += k0 * bv.strides[0], bv.sizes[0] = kl;
    slice_rows sr = {whole->p.b_rows, k0};
    const vt_mxu_rows rows = {slice_row, &sr};
    uint16_t *pa = sj->p.a, *pb = sj->p.b;
    int64_t a_elems, b_elems;
    vt_mxu_pack_plan(&sj->p, whole->p.M, whole->p.N, kl, VT_PRECISION_DEFAULT, &a_elems, &b_elems);
    sj->p.a = pa, sj->p.b = pb;
    sj->p.b_rows = whole->p.b_rows ? &rows : NULL;
    int64_t na, ntasks = vt_mxu_pack_tasks(&sj->p, sj->e, &av, &bv, &na);
    for (int64_t t = 0; t < ntasks; t++) vt_mxu_pack_task(&sj->p, sj->e, VT_PRECISION_DEFAULT, &av, &bv, t, na, mem);
    sj->p.b_rows = NULL;
}

static void ksplit_range(void *ctx, int64_t begin, int64_t end) {
    (void)begin, (void)end;
    ksplit_job *ks = ctx;
    const gemm_job *whole = ks->j;
    vt_mxu_packed full;
    int64_t a_elems, b_elems;
    vt_mxu_pack_plan(&full, whole->p.M, whole->p.N, KS_CHUNKS * 32, VT_PRECISION_DEFAULT, &a_elems, &b_elems);
    gemm_job sj;
    memset(&sj, 0, sizeof sj);
    sj.e = whole->e;
    uint16_t *panels = aligned_alloc(64, (size_t)(a_elems + b_elems) * sizeof(uint16_t));
    void *mem = malloc(vt_mxu_pack_scratch_bytes(&full));
    if (!panels || !mem) {
        free(panels), free(mem);
        atomic_store(&ks->oom, 1);
        return;
    }
    sj.p.a = panels, sj.p.b = panels + a_elems;
    const int64_t Mp = full.Mp, Np = full.Np;
    for (int64_t g; (g = atomic_fetch_add(&ks->next, 1)) < ks->ngroups;) {
        float *c = ks->part + g * Mp * Np;
        for (int64_t s = ksplit_first(ks, g); s < ksplit_first(ks, g + 1); s++) {
            ksplit_pack(whole, s, &sj, mem);
            for (int64_t m0 = 0; m0 < Mp; m0 += MC)
                for (int64_t n0 = 0; n0 < Np; n0 += NC) {
                    tile x = {m0, n0, Mp - m0 < MC ? Mp - m0 : MC, Np - n0 < NC ? Np - n0 : NC, Np,
                              c + m0 * Np + n0, 0, 0, {0}, NULL, 0};
                    if (sj.e->rows_any && whole->p.M - m0 < x.mb) x.mb = whole->p.M - m0;
                    if (sj.e->cols16 && whole->p.N - n0 < x.nb) x.nb = (whole->p.N - n0 + 15) & ~(int64_t)15;
                    run_pass(&sj, &x, vt_mxu_passes(0)[0], s > ksplit_first(ks, g));
                }
        }
    }
    free(panels), free(mem);
}

/* Whether a product of stored operands runs by K slices (the plan p). */
static int ksplit_takes(const vt_mxu_packed *p) {
    return p->nlow == 0 && p->Mp * p->Np <= KS_MAX_C && p->kt >= KS_MIN_SLICES * KS_CHUNKS;
}

int vt_mxu_splits_k(int64_t M, int64_t N, int64_t K, vt_dtype a_dtype, vt_precision prec) {
    vt_mxu_packed p;
    int64_t a_elems, b_elems;
    vt_mxu_pack_plan(&p, M, N, K, a_dtype == VT_F32 ? prec : VT_PRECISION_DEFAULT, &a_elems, &b_elems);
    return ksplit_takes(&p);
}

/* The whole product by K slices (j: planned, DEFAULT, operands stored). */
static vt_status ksplit_run(const gemm_job *j, int parallel) {
    ksplit_job ks;
    memset(&ks, 0, sizeof ks);
    ks.j = j;
    ks.nslices = (j->p.kt + KS_CHUNKS - 1) / KS_CHUNKS;
    ks.ngroups = ks.nslices < KS_GROUPS ? ks.nslices : KS_GROUPS;
    const int64_t Mp = j->p.Mp, Np = j->p.Np;
    ks.part = aligned_alloc(64, (size_t)(ks.ngroups * Mp * Np) * sizeof(float));
    if (!ks.part) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "vt_matmul: out of host memory for scratch");
    vt_parallel_for(ks.ngroups, parallel ? 1 : ks.ngroups, ksplit_range, &ks);
    if (!atomic_load(&ks.oom)) {
        /* in group order, over the M x N sums the tiles wrote (not the
         * padding rows and columns an engine with rows_any or cols16 skips) */
        for (int64_t g = 1; g < ks.ngroups; g++)
            for (int64_t r = 0; r < j->p.M; r++)
                for (int64_t c = 0; c < j->p.N; c++) ks.part[r * Np + c] += ks.part[g * Mp * Np + r * Np + c];
        write_out(&j->ep, ks.part, Np, 0, 0, j->p.M, j->p.N);
    }
    free(ks.part);
    if (atomic_load(&ks.oom)) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "vt_matmul: out of host memory for scratch");
    return VT_OK;
}

/* A produced operand written out as a row-major matrix (*view), or NULL. */
static void *materialize(const vt_tensor *t, const vt_mxu_rows *src, vt_tensor *view) {
    size_t es = vt_dtype_size(t->dtype);
    int64_t R = t->sizes[0], C = t->sizes[1];
    char *buf = vt_exceeds_host_memory((double)R * (double)C * (double)es) ? NULL : malloc((size_t)(R * C) * es + 1);
    if (!buf) return NULL;
    for (int64_t i = 0; i < R; i++) src->row(src->ctx, i, buf + i * C * (int64_t)es);
    *view = *t;
    view->data = buf;
    view->offset = 0;
    view->strides[0] = C, view->strides[1] = 1;
    return buf;
}

vt_status vt_mxu_matmul_2d(const vt_mxu_engine *e, const vt_tensor *out, const vt_tensor *a, const vt_tensor *b,
                           const vt_tensor *bias, double alpha, double beta, vt_precision prec,
                           const vt_mxu_rows *a_rows, const vt_mxu_rows *b_rows, const vt_version *b_version) {
    int64_t M = out->sizes[0], N = out->sizes[1], K = a->sizes[1];
    if (M == 0 || N == 0) return VT_OK;
    if (out->dtype == VT_F64) { /* plain f64 products read stored operands: store produced ones */
        vt_tensor av = *a, bv = *b;
        void *am = a_rows ? materialize(a, a_rows, &av) : NULL, *bm = b_rows ? materialize(b, b_rows, &bv) : NULL;
        if ((a_rows && !am) || (b_rows && !bm)) {
            free(am), free(bm);
            return vt_set_error(VT_ERR_OUT_OF_MEMORY, "vt_matmul: out of host memory for an operand");
        }
        vt_mxu_gemm_f64(out, &av, &bv, bias, alpha, beta);
        free(am), free(bm);
        return VT_OK;
    }
    gemm_job j;
    memset(&j, 0, sizeof j);
    j.e = e;
    j.prec = a->dtype == VT_F32 ? prec : VT_PRECISION_DEFAULT;
    j.a = a, j.b = b;
    j.ep = (epilogue){out, beta != 0.0 ? bias : NULL, alpha, beta, 0};
#if VT_X86
    j.ep.vec_bf16 = e->split == vt_mxu_split_avx512;
#endif
    j.direct = out->dtype == VT_F32 && out->strides[1] == 1 && out->strides[0] >= N && alpha == 1.0 && !j.ep.bias;
    int64_t a_elems, b_elems;
    vt_mxu_pack_plan(&j.p, M, N, K, j.prec, &a_elems, &b_elems);
    j.p.a_rows = a_rows, j.p.b_rows = b_rows;
    int64_t macs = M * N * (K ? K : 1) * (j.p.nlow + 1);
    int parallel = macs >= VT_MXU_PARALLEL_MACS;
    if (!a_rows && ksplit_takes(&j.p)) return ksplit_run(&j, parallel);
    j.ntm = (j.p.Mp + MC - 1) / MC;
    j.group = j.p.nlow ? MGROUP : 1;
    j.ngm = (j.ntm + j.group - 1) / j.group;
    /* A product with few row tiles (a weight gradient: M = output channels)
     * in NC-wide claims left a core idle (3 claims on 2 threads): narrower
     * claims, down to 64 columns, until each thread has about 4. */
    j.nc = NC;
    if (j.p.nlow == 0 && j.p.kt <= A_STRIP_L1_CHUNKS)
        while (j.nc < NC_WIDE && j.nc < j.p.Np && j.p.kt * 32 * (2 * j.nc) * 2 <= B_BLOCK_BYTES) j.nc *= 2;
    int64_t want = parallel ? 4 * (int64_t)vt_num_threads() : 1;
    while (j.nc > 64 && j.ngm * ((j.p.Np + j.nc - 1) / j.nc) < want) j.nc /= 2;
    j.nclaims = j.ngm * ((j.p.Np + j.nc - 1) / j.nc);
    /* A bf16 A whose rows are runs of whole 32-k chunks, or one run of an
     * even K below 32, is read in place by an engine that can: its packing
     * would only copy it. */
    if (e->direct && a->dtype == VT_BF16 && !a_rows && K > 0 && (K % 32 == 0 || (K < 32 && K % 2 == 0)) &&
        a->strides[1] == 1 && j.p.nlow == 0) {
        j.a_direct = (const uint16_t *)a->data + a->offset;
        j.lda = a->strides[0];
        j.pairs = K % 32 ? (int)(K / 2) : 16;
        a_elems = 0;
        j.sink_bf16 = out->dtype == VT_BF16 && out->strides[1] == 1 && alpha == 1.0 && !j.ep.bias;
    }
    /* A dense f32 A at DEFAULT with an even K below 32 (a 16-channel 1x1
     * convolution's input) is rounded once, end to end, into a bf16 copy
     * of itself that the engine then reads in place: its panels would pad
     * every row to 32 k (twice the bytes) and be packed row by row. The
     * same bits as the panels (the engine's split, DEFAULT's one part). */
    const int a_round = e->direct && a->dtype == VT_F32 && !a_rows && K > 0 && K < 32 && K % 2 == 0 &&
                        a->strides[1] == 1 && a->strides[0] == K && j.p.nlow == 0;
    if (a_round) {
        j.lda = K;
        j.pairs = (int)(K / 2);
        a_elems = M * K + 16; /* the split writes whole vectors of 16 */
    }
    /* The same A with whole 32-k chunks (rows at unit stride), in a
     * product whose claims are one column claim wide (a 1x1 convolution's
     * forward or input gradient, a Linear of up to nc outputs): each claim
     * rounds its own rows (MC x K, in L2) just before the engine reads them
     * in place, so A is read once and nothing is written back; packed,
     * every row was split and stored to its panels, then read again. The
     * same bits as the panels. With fewer than two claims a thread, the
     * packing's finer split of A over the cores wins (measured, ms packed
     * -> strips: 256 x 2048 x 10 0.071 -> 0.086; 512 x 2048 x 16 0.22 ->
     * 0.15; 50176 x 96 x 16 1.19 -> 0.86; 50176 x 64 x 256 2.8 -> 1.8;
     * 3136 x 512 x 128 0.43 -> 0.35-0.40; 2048 x 512 x 512 0.51 -> 0.49). */
    j.a_strip = e->direct && a->dtype == VT_F32 && !a_rows && K > 0 && K % 32 == 0 && K <= A_STRIP_MAX_K &&
                a->strides[1] == 1 && j.p.nlow == 0 && j.p.Np <= j.nc && j.ntm >= 2 * (int64_t)vt_num_threads();
    if (j.a_strip) {
        j.pairs = 16;
        a_elems = 0;
    }
    int cached = 0, hit = 0;
    uint16_t *ws = NULL;
    vt_mxu_kept_panels *kb = NULL;
    if (K > 0) {
        if (b_version && !b_rows && j.p.Mp <= VT_MXU_KEPT_ROWS) {
            const vt_mxu_kept_key key = {*b_version,     b->data,       b->offset, K, N, b->strides[0],
                                         b->strides[1], (int)b->dtype, (int)j.prec, e};
            kb = vt_mxu_kept_acquire(&key, (size_t)b_elems * sizeof(uint16_t), &hit);
        }
        const int64_t ws_elems = a_elems + (kb ? 0 : b_elems) + 32; /* never empty */
        ws = vt_mxu_ws_acquire((size_t)ws_elems * sizeof(uint16_t), &cached);
        if (!ws) {
            vt_mxu_kept_release(kb, hit);
            return vt_set_error(VT_ERR_OUT_OF_MEMORY, "vt_matmul: cannot allocate %lld bytes of packing workspace",
                                (long long)(ws_elems * 2));
        }
        j.p.a = ws;
        j.p.b = kb ? kb->b : ws + a_elems;
        int64_t ntasks = vt_mxu_pack_tasks(&j.p, e, a, b, &j.na);
        /* A panels and B tasks differ in cost: two loops keep both halves even. */
        j.first = 0;
        if (a_round) {
            j.a_direct = ws;
            const int64_t nr = (M * K + ROUND_RUN - 1) / ROUND_RUN;
            vt_parallel_for(nr, parallel ? 1 : nr, round_range, &j);
        } else if (!j.a_direct && !j.a_strip) {
            vt_parallel_for(j.na, parallel ? 1 : j.na, pack_range, &j);
        }
        j.first = j.na;
        if (!hit) vt_parallel_for(ntasks - j.na, parallel ? 1 : ntasks, pack_range, &j);
    }
    if (!atomic_load(&j.oom)) vt_parallel_for(j.nclaims, parallel ? 1 : j.nclaims, tile_range, &j);
    if (ws) vt_mxu_ws_release(ws, cached);
    vt_mxu_kept_release(kb, hit || !atomic_load(&j.oom));
    if (atomic_load(&j.oom)) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "vt_matmul: out of host memory for scratch");
    return VT_OK;
}
