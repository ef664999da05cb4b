/* test_runtime_iter.c — the strided iterator (core/iter.c): over permuted,
 * broadcast, sliced and size-1 layouts and every kind of [begin, end) range,
 * vt_iter_blocks and vt_iter_range visit exactly the logical elements of the
 * range, in row-major order, at the addresses the descriptors give. The
 * reference is a plain index walk over the unmerged descriptors. */
#include "test_runtime_util.h"

#define NOPS 3
#define MAXN 4096

typedef struct visit {
    int64_t n, nops;
    char *addr[NOPS][MAXN];
    int overflow;
} visit;

static void record(visit *v, char *const *p, const int64_t *s, int64_t n, const size_t *es) {
    for (int64_t i = 0; i < n; i++) {
        if (v->n >= MAXN) {
            v->overflow = 1;
            return;
        }
        for (int k = 0; k < v->nops; k++) v->addr[k][v->n] = p[k] + i * s[k] * (int64_t)es[k];
        v->n++;
    }
}

typedef struct ctx {
    visit *v;
    const size_t *es;
    int64_t max_rows; /* the most rows any block had */
} ctx;

static void on_block(void *vc, char *const *ptrs, const int64_t *s, int64_t n, int64_t rows, const int64_t *rs) {
    ctx *c = vc;
    char *p[NOPS];
    for (int k = 0; k < c->v->nops; k++) p[k] = ptrs[k];
    if (rows > c->max_rows) c->max_rows = rows;
    for (int64_t r = 0; r < rows; r++) {
        record(c->v, p, s, n, c->es);
        for (int k = 0; k < c->v->nops; k++) p[k] += rs[k];
    }
}

static void on_run(void *vc, char *const *ptrs, const int64_t *s, int64_t n) {
    ctx *c = vc;
    record(c->v, ptrs, s, n, c->es);
}

/* Address of logical element li of t (row-major over t's sizes). */
static char *addr_of(const vt_tensor *t, int64_t li) {
    int64_t off = t->offset;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (li % t->sizes[d]) * t->strides[d];
        li /= t->sizes[d];
    }
    return (char *)t->data + off * (int64_t)vt_dtype_size(t->dtype);
}

static int64_t check_ranges(const char *what, const vt_tensor *ops) {
    vt_iter it;
    vt_iter_init(&it, NOPS, ops);
    const int64_t numel = vt_tensor_numel(&ops[0]);
    int64_t bad = 0, ranges[][2] = {{0, numel}, {0, 1}, {1, numel}, {numel / 3, 2 * numel / 3}, {7, 8}, {5, numel - 3}};
    size_t es[NOPS];
    for (int k = 0; k < NOPS; k++) es[k] = vt_dtype_size(ops[k].dtype);
    static visit vb, vr;
    int64_t max_rows = 0;
    for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++) {
        int64_t b = ranges[r][0], e = ranges[r][1];
        if (b < 0 || e > numel || b > e) continue;
        vb.n = vr.n = 0, vb.nops = vr.nops = NOPS, vb.overflow = vr.overflow = 0;
        ctx cb = {&vb, es, 0}, cr = {&vr, es, 0};
        vt_iter_blocks(&it, b, e, on_block, &cb);
        vt_iter_range(&it, b, e, on_run, &cr);
        if (cb.max_rows > max_rows) max_rows = cb.max_rows;
        CHECK_MSG(!vb.overflow && vb.n == e - b, "%s [%lld, %lld): blocks visited %lld elements", what, (long long)b,
                  (long long)e, (long long)vb.n);
        CHECK_MSG(!vr.overflow && vr.n == e - b, "%s [%lld, %lld): runs visited %lld elements", what, (long long)b,
                  (long long)e, (long long)vr.n);
        for (int64_t i = 0; i < vb.n && i < e - b; i++)
            for (int k = 0; k < NOPS; k++) {
                char *want = addr_of(&ops[k], b + i);
                if (vb.addr[k][i] != want || vr.addr[k][i] != want) {
                    if (bad++ < 3)
                        vt_test_fail(__FILE__, __LINE__, "%s [%lld, %lld) element %lld operand %d: wrong address", what,
                                     (long long)b, (long long)e, (long long)(b + i), k);
                }
            }
    }
    return max_rows;
}

TEST(runtime_iter_blocks_visit_the_range_in_order) {
    char *base0 = (char *)(uintptr_t)0x100000, *base1 = (char *)(uintptr_t)0x900000, *base2 = (char *)(uintptr_t)0x1100000;
    {   /* out contiguous [3, 5, 7, 4]; a permuted view; b broadcast over dims 0 and 2 */
        int64_t sz[4] = {3, 5, 7, 4};
        int64_t so[4] = {140, 28, 4, 1}, sa[4] = {4, 12, 60, 1}, sb[4] = {0, 4, 0, 1};
        vt_tensor ops[NOPS] = {view(base0, VT_F32, 4, sz, so, 0), view(base1, VT_F32, 4, sz, sa, 2),
                               view(base2, VT_F64, 4, sz, sb, 1)};
        CHECK(check_ranges("permuted+broadcast", ops) > 1); /* whole rows came several per call */
    }
    {   /* half of the last dim of a bigger tensor (RoPE's x[..., :d]), a size-1 dim */
        int64_t sz[4] = {2, 1, 6, 8};
        int64_t so[4] = {48, 48, 8, 1}, sa[4] = {192, 7, 16, 1}, sb[4] = {0, 0, 8, 1};
        vt_tensor ops[NOPS] = {view(base0, VT_BF16, 4, sz, so, 0), view(base1, VT_F32, 4, sz, sa, 3),
                               view(base2, VT_F32, 4, sz, sb, 0)};
        check_ranges("sliced halves", ops);
    }
    {   /* everything mergeable: one dim after merging, rows == 1 */
        int64_t sz[3] = {4, 5, 6}, s[3] = {30, 6, 1};
        vt_tensor ops[NOPS] = {view(base0, VT_F32, 3, sz, s, 0), view(base1, VT_F32, 3, sz, s, 0),
                               view(base2, VT_F32, 3, sz, s, 5)};
        CHECK(check_ranges("contiguous", ops) == 1);
    }
    {   /* 1-D strided and a 0-dim scalar broadcast */
        int64_t sz[1] = {37}, so[1] = {1}, sa[1] = {-2 + 5}, sb[1] = {0};
        vt_tensor ops[NOPS] = {view(base0, VT_I64, 1, sz, so, 0), view(base1, VT_I32, 1, sz, sa, 0),
                               view(base2, VT_F32, 1, sz, sb, 0)};
        check_ranges("1-D", ops);
    }
    {   /* transposed out over a contiguous input (a transposed copy) */
        int64_t sz[3] = {6, 9, 5};
        int64_t so[3] = {1, 30, 6}, sa[3] = {45, 5, 1}, sb[3] = {45, 5, 1};
        vt_tensor ops[NOPS] = {view(base0, VT_F32, 3, sz, so, 0), view(base1, VT_F32, 3, sz, sa, 0),
                               view(base2, VT_F16, 3, sz, sb, 0)};
        check_ranges("transposed out", ops);
    }
}

/* vt_memory_perm: the largest stride outermost, the first operand with
 * different strides deciding; a dim of size 1 keeps its place and its
 * stride stops nothing (a channels-last block seen as 5-d with a size-1
 * dim strided like the batch must still walk channels innermost). */
TEST(runtime_iter_memory_perm) {
    vt_tensor a, b;
    memset(&a, 0, sizeof a), memset(&b, 0, sizeof b);
    a.ndim = b.ndim = 5;
    const int64_t sz[5] = {4, 128, 1, 28, 28};
    const int64_t sa[5] = {430592, 1, 430592, 14848, 512}, sb[5] = {401408, 1, 0, 14336, 256};
    for (int d = 0; d < 5; d++) a.sizes[d] = b.sizes[d] = sz[d], a.strides[d] = sa[d], b.strides[d] = sb[d];
    vt_tensor *ops[2] = {&a, &b};
    int perm[5];
    CHECK(vt_memory_perm(ops, 2, perm));
    const int want[5] = {0, 3, 2, 4, 1};
    for (int d = 0; d < 5; d++) CHECK_MSG(perm[d] == want[d], "perm[%d] = %d, want %d", d, perm[d], want[d]);
    /* contiguous but for a size-1 dim's stride: nothing moves */
    vt_tensor c;
    memset(&c, 0, sizeof c);
    c.ndim = 3;
    c.sizes[0] = 4, c.sizes[1] = 1, c.sizes[2] = 8;
    c.strides[0] = 8, c.strides[1] = 1000, c.strides[2] = 1;
    vt_tensor *one[1] = {&c};
    CHECK(!vt_memory_perm(one, 1, perm));
    for (int d = 0; d < 3; d++) CHECK(perm[d] == d);
    /* a transpose: the unit-stride dim goes innermost */
    c.sizes[1] = 5, c.strides[0] = 1, c.strides[1] = 32, c.strides[2] = 4;
    CHECK(vt_memory_perm(one, 1, perm));
    CHECK(perm[0] == 1 && perm[1] == 2 && perm[2] == 0);
}
