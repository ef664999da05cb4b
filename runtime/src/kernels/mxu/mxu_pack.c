/* mxu_pack.c — turns strided f32/bf16/f16 operands into the engines' packed
 * bf16 layout (see internal.h), splitting fp32 into the parts each precision
 * mode needs. Each part is packed once, as its own K segment of the panel
 * (DEFAULT: hi; HIGH: hi, lo; HIGHEST: hi, mid, lo); the driver walks the
 * passes of numerics_amx.md §5 by pointing every pass at its two parts
 * (vt_mxu_passes), rather than packing one copy per pass, which wrote 6x
 * DEFAULT's bytes for HIGHEST. */
#include "mxu_local.h"

/* The part (0 hi, 1 mid, 2 lo) each segment of a panel holds. */
static const int slots_highest[] = {0, 1, 2}, slots_high[] = {0, 2}, slots_default[] = {0};

const int *vt_mxu_slot_parts(int nlow) {
    return nlow == 5 ? slots_highest : nlow == 2 ? slots_high : slots_default;
}

/* Segment numbers of the passes, in XLA's order: the guarded low passes
 * (X3: lo.hi, hi.lo; X6: mid.mid, hi.lo, lo.hi, hi.mid, mid.hi), then hi.hi.
 * HIGH's segments are 0 hi, 1 lo; HIGHEST's 0 hi, 1 mid, 2 lo. */
static const vt_mxu_pass passes_high[] = {{1, 0}, {0, 1}, {0, 0}};
static const vt_mxu_pass passes_highest[] = {{1, 1}, {0, 2}, {2, 0}, {0, 1}, {1, 0}, {0, 0}};
static const vt_mxu_pass passes_default[] = {{0, 0}};

const vt_mxu_pass *vt_mxu_passes(int nlow) {
    return nlow == 5 ? passes_highest : nlow == 2 ? passes_high : passes_default;
}

int vt_mxu_nslots(int nlow) { return nlow == 5 ? 3 : nlow == 2 ? 2 : 1; }

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

void vt_mxu_pack_plan(vt_mxu_packed *p, int64_t M, int64_t N, int64_t K, vt_precision prec, int64_t *a_elems,
                      int64_t *b_elems) {
    memset(p, 0, sizeof *p);
    p->M = M, p->N = N, p->K = K;
    p->Mp = round_up(M, 32);
    p->Np = round_up(N, 32);
    p->kt = round_up(K, 32) / 32;
    p->nlow = vt_mxu_nlow(prec);
    p->a_panel = vt_mxu_nslots(p->nlow) * p->kt * VT_MXU_CHUNK;
    p->b_panel = p->a_panel;
    *a_elems = p->Mp / 16 * p->a_panel;
    *b_elems = p->Np / 16 * p->b_panel;
}

/* B is packed by pairs of rows when its rows are contiguous (or neither
 * direction is), by columns when its columns are. */
static int b_by_columns(const vt_tensor *b) { return b->strides[1] != 1 && b->strides[0] == 1; }

#if VT_X86
/* Whether line `index` of t (elements elem_stride apart) can go through the
 * engine's direct packers: AVX-512 engines, f32 or bf16 at unit stride.
 * Other lines are converted to f32 and split through scratch. */
static int direct_line(const vt_mxu_engine *e, const vt_tensor *t, int64_t elem_stride) {
    return e->pack && elem_stride == 1 && (t->dtype == VT_F32 || t->dtype == VT_BF16);
}
#endif

/* A is packed chunk by chunk across all its panels when its columns are
 * contiguous (a weight gradient's X^T); else panel by panel, row by row. */
static int a_by_columns(const vt_tensor *a) { return a->strides[1] != 1 && a->strides[0] == 1; }

int64_t vt_mxu_pack_tasks(const vt_mxu_packed *p, const vt_mxu_engine *e, const vt_tensor *a, const vt_tensor *b,
                          int64_t *na) {
    *na = a_by_columns(a) ? p->kt : p->Mp / 16;
    return *na + (b_by_columns(b) ? p->Np / 16 : p->kt);
}

/* n elements of t starting at element off, step stride, as f32: the data
 * itself when it already is contiguous f32, else converted into tmp. */
static const float *read_line(const vt_tensor *t, int64_t off, int64_t stride, int64_t n, float *tmp) {
    size_t es = vt_dtype_size(t->dtype);
    const char *src = (const char *)t->data + off * (int64_t)es;
    if (t->dtype == VT_F32 && stride == 1) return (const float *)src;
    vt_convert(t->dtype, src, stride, VT_F32, tmp, 1, n);
    return tmp;
}

/* Scratch of one task: a converted line, its three parts, and a produced
 * row (vt_mxu_rows). */
typedef struct scratch {
    float *line;
    uint16_t *part[3];
    void *row;
} scratch;

static int64_t longest_line(const vt_mxu_packed *p) { return p->kt * 32 > p->Np ? p->kt * 32 : p->Np; }

/* Per scratch: line (4 bytes), three parts (2 each), row (4): 14 bytes a
 * position; two of them per task. */
size_t vt_mxu_pack_scratch_bytes(const vt_mxu_packed *p) { return (size_t)longest_line(p) * 28; }

static void scratch_at(scratch *s, void *mem, int64_t n) {
    s->line = mem;
    uint16_t *u = (uint16_t *)(s->line + n);
    for (int i = 0; i < 3; i++) s->part[i] = u + i * n;
    s->row = u + 3 * n;
}

/* Row `index` of operand t as the packers read it: t itself, or — when its
 * rows are produced and index is a real row (< count; padding rows are
 * never produced) — the row written into s->row, seen as row 0 of a view. */
static const vt_tensor *row_source(const vt_mxu_rows *src, const vt_tensor *t, int64_t *index, int64_t count,
                                   scratch *s, vt_tensor *view) {
    if (!src || *index >= count) return t;
    src->row(src->ctx, *index, s->row);
    *view = *t;
    view->data = s->row;
    view->offset = 0;
    view->strides[1] = 1;
    *index = 0;
    return view;
}

/* K padding is +0: padded products add +0 to sums that start at +0 (as an
 * MXU accumulator does, so an all -0 sum comes out +0 on every path). */
#define B_PAD 0x0000u

static void fill_u16(uint16_t *p, uint16_t v, int64_t n) {
    for (int64_t i = 0; i < n; i++) p[i] = v;
}

/* Parts of line `index` of t (n valid elements of npad); `pad` values when
 * the line is padding (index >= count). */
static void split_line(const vt_mxu_engine *e, vt_precision prec, const vt_tensor *t, int64_t index, int64_t count,
                       int64_t line_stride, int64_t elem_stride, int64_t n, int64_t npad, scratch *s, uint16_t pad) {
    if (index >= count) {
        for (int i = 0; i < 3; i++) fill_u16(s->part[i], pad, npad);
        return;
    }
    const float *x = read_line(t, t->offset + index * line_stride, elem_stride, n, s->line);
    e->split(x, n, npad, prec, s->part[0], prec == VT_PRECISION_HIGHEST ? s->part[1] : NULL,
             prec == VT_PRECISION_DEFAULT ? NULL : s->part[2]);
}


#if VT_X86
/* Line `index` of t (f32 or bf16: direct_line) for the direct packers;
 * past `count` it is all +0. */
static vt_mxu_line line_at(const vt_tensor *t, int64_t index, int64_t count, int64_t line_stride, int64_t n) {
    vt_mxu_line x = {t->data, t->dtype == VT_BF16, index < count ? n : 0};
    if (index < count) x.p = (const char *)t->data + (t->offset + index * line_stride) * (x.is_bf16 ? 2 : 4);
    return x;
}
#endif

/* One 16-row panel of A: row r of chunk c of segment g goes to
 * panel + (g*kt + c)*512 + r*32. */
static void pack_a_panel(const vt_mxu_packed *p, const vt_mxu_engine *e, vt_precision prec, const vt_tensor *a,
                         int64_t panel, scratch *s) {
    const int *seg = vt_mxu_slot_parts(p->nlow);
    int nseg = vt_mxu_nslots(p->nlow);
    int64_t kp = p->kt * 32;
    uint16_t *dst = p->a + panel * p->a_panel;
    vt_tensor view;
#if VT_X86
    if (direct_line(e, a, p->a_rows ? 1 : a->strides[1])) {
        for (int r = 0; r < 16; r++) {
            int64_t i = panel * 16 + r;
            const vt_tensor *t = row_source(p->a_rows, a, &i, p->M, s, &view);
            e->pack->pack_a_row(line_at(t, i, p->M, t->strides[0], p->K), prec, p->kt, nseg, seg, dst, r);
        }
        return;
    }
#endif
    for (int64_t r = 0; r < 16; r++) {
        int64_t i = panel * 16 + r;
        const vt_tensor *t = row_source(p->a_rows, a, &i, p->M, s, &view);
        split_line(e, prec, t, i, p->M, t->strides[0], t->strides[1], p->K, kp, s, 0);
        for (int g = 0; g < nseg; g++) {
            const uint16_t *src = s->part[seg[g]];
            for (int64_t c = 0; c < p->kt; c++)
                memcpy(dst + (g * p->kt + c) * VT_MXU_CHUNK + r * 32, src + c * 32, 64);
        }
    }
}

/* One 32-K chunk of every A panel, for an A whose columns are contiguous
 * (a_by_columns). Chunk by chunk, the 32 storage rows it reads are read
 * end to end; panel by panel, every panel touched all K rows, a page apart
 * each, and the TLB misses cost more than the packing. The AVX-512 engines
 * transpose in registers; the others split 16 contiguous values of each k
 * with the engine's split and scatter the parts into the panel's rows. */
static void pack_a_chunk(const vt_mxu_packed *p, const vt_mxu_engine *e, vt_precision prec, const vt_tensor *a,
                         int64_t c, scratch *s) {
    const int *seg = vt_mxu_slot_parts(p->nlow);
    int nseg = vt_mxu_nslots(p->nlow);
#if VT_X86
    if (direct_line(e, a, 1)) {
        size_t es = vt_dtype_size(a->dtype);
        for (int64_t m0 = 0; m0 < p->Mp; m0 += 16) {
            /* 32 interleaved streams, a page apart: the hardware prefetchers
             * do not follow them all, so ask for the lines 8 panels ahead. */
            if (m0 + 128 < p->M)
                for (int64_t k = c * 32; k < c * 32 + 32 && k < p->K; k++)
                    __builtin_prefetch((const char *)a->data + (a->offset + m0 + 128 + k * a->strides[1]) * (int64_t)es);
            vt_mxu_line x = line_at(a, m0, p->M, 1, p->M - m0 < 16 ? p->M - m0 : 16);
            e->pack->pack_a_cols(x, a->strides[1], p->K, prec, p->kt, nseg, seg, p->a + (m0 / 16) * p->a_panel, c);
        }
        return;
    }
#endif
    for (int64_t m0 = 0; m0 < p->Mp; m0 += 16) {
        uint16_t *dst = p->a + (m0 / 16) * p->a_panel + c * VT_MXU_CHUNK;
        int64_t rows = p->M - m0 < 16 ? p->M - m0 : 16;
        for (int64_t kk = 0; kk < 32; kk++) {
            int64_t k = c * 32 + kk;
            if (rows <= 0 || k >= p->K) { /* padding: +0 */
                for (int i = 0; i < 3; i++) fill_u16(s->part[i], 0, 16);
            } else {
                const float *x = read_line(a, a->offset + m0 + k * a->strides[1], 1, rows, s->line);
                e->split(x, rows, 16, prec, s->part[0], prec == VT_PRECISION_HIGHEST ? s->part[1] : NULL,
                         prec == VT_PRECISION_DEFAULT ? NULL : s->part[2]);
            }
            for (int g = 0; g < nseg; g++) {
                const uint16_t *src = s->part[seg[g]];
                uint16_t *d = dst + g * p->kt * VT_MXU_CHUNK + kk;
                for (int r = 0; r < 16; r++) d[r * 32] = src[r];
            }
        }
    }
}

/* One 32-row chunk of B over all columns, by pairs of rows: the engine's zip
 * interleaves rows k and k+1 straight into the VNNI order. */
static void pack_b_chunk(const vt_mxu_packed *p, const vt_mxu_engine *e, vt_precision prec, const vt_tensor *b,
                         int64_t c, scratch *s0, scratch *s1) {
    const int *seg = vt_mxu_slot_parts(p->nlow);
    int nseg = vt_mxu_nslots(p->nlow);
    vt_tensor v0, v1;
#if VT_X86
    if (direct_line(e, b, p->b_rows ? 1 : b->strides[1])) {
        for (int j = 0; j < 16; j++) {
            int64_t k0 = c * 32 + 2 * j, k1 = k0 + 1;
            const vt_tensor *t0 = row_source(p->b_rows, b, &k0, p->K, s0, &v0);
            const vt_tensor *t1 = row_source(p->b_rows, b, &k1, p->K, s1, &v1);
            e->pack->pack_b_rows(line_at(t0, k0, p->K, t0->strides[0], p->N),
                                 line_at(t1, k1, p->K, t1->strides[0], p->N), prec, p->Np, p->kt, nseg, seg, p->b,
                                 p->b_panel, c, j);
        }
        return;
    }
#endif
    for (int64_t j = 0; j < 16; j++) {
        int64_t k0 = c * 32 + 2 * j, k1 = k0 + 1;
        const vt_tensor *t0 = row_source(p->b_rows, b, &k0, p->K, s0, &v0);
        const vt_tensor *t1 = row_source(p->b_rows, b, &k1, p->K, s1, &v1);
        split_line(e, prec, t0, k0, p->K, t0->strides[0], t0->strides[1], p->N, p->Np, s0, B_PAD);
        split_line(e, prec, t1, k1, p->K, t1->strides[0], t1->strides[1], p->N, p->Np, s1, B_PAD);
        for (int g = 0; g < nseg; g++)
            e->zip(s0->part[seg[g]], s1->part[seg[g]], p->Np, p->b + (g * p->kt + c) * VT_MXU_CHUNK + j * 32,
                   p->b_panel);
    }
}

/* One 16-column panel of B whose columns are contiguous (a transposed
 * weight): consecutive-K pairs of a column already are the VNNI words. */
static void pack_b_panel(const vt_mxu_packed *p, const vt_mxu_engine *e, vt_precision prec, const vt_tensor *b,
                         int64_t panel, scratch *s) {
    const int *seg = vt_mxu_slot_parts(p->nlow);
    int nseg = vt_mxu_nslots(p->nlow);
    int64_t kp = p->kt * 32;
    uint16_t *dst = p->b + panel * p->b_panel;
#if VT_X86
    if (direct_line(e, b, b->strides[0])) {
        vt_mxu_line cols[16];
        for (int q = 0; q < 16; q++) cols[q] = line_at(b, panel * 16 + q, p->N, b->strides[1], p->K);
        e->pack->pack_b_cols(cols, prec, p->kt, nseg, seg, dst);
        return;
    }
#endif
    for (int64_t q = 0; q < 16; q++) {
        split_line(e, prec, b, panel * 16 + q, p->N, b->strides[1], b->strides[0], p->K, kp, s, 0);
        if (panel * 16 + q < p->N)
            for (int i = 0; i < 3; i++) fill_u16(s->part[i] + p->K, B_PAD, kp - p->K);
        for (int g = 0; g < nseg; g++) {
            const uint16_t *src = s->part[seg[g]];
            for (int64_t c = 0; c < p->kt; c++) {
                uint16_t *d = dst + (g * p->kt + c) * VT_MXU_CHUNK + q * 2;
                const uint16_t *w = src + c * 32;
                for (int64_t j = 0; j < 16; j++) memcpy(d + j * 32, w + 2 * j, 4);
            }
        }
    }
}

void vt_mxu_pack_task(const vt_mxu_packed *p, const vt_mxu_engine *e, vt_precision prec, const vt_tensor *a,
                      const vt_tensor *b, int64_t task, int64_t na, void *mem) {
    int64_t n = longest_line(p);
    scratch s0, s1;
    scratch_at(&s0, mem, n);
    scratch_at(&s1, (char *)mem + n * 14, n);
    if (task < na && a_by_columns(a)) pack_a_chunk(p, e, prec, a, task, &s0);
    else if (task < na) pack_a_panel(p, e, prec, a, task, &s0);
    else if (b_by_columns(b)) pack_b_panel(p, e, prec, b, task - na, &s0);
    else pack_b_chunk(p, e, prec, b, task - na, &s0, &s1);
}
