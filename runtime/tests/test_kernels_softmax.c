/* test_kernels_softmax.c — vt_softmax, vt_softmax_backward and the losses
 * against their scalar references: rows and strided (lane) layouts at
 * awkward sizes, every float dtype, half_to_float, in place, specials,
 * empty extents, both ISA paths; nll with weights, ignore_index, spatial
 * dims and bad targets; the pointwise losses; the queued ops' errors. */
#include "kernels/softmax/softmax.h"
#include "test_kernels_util.h"

static double tol_of(vt_dtype dt) {
    switch (dt) {
    case VT_BF16: return 1.6e-2;
    case VT_F16: return 2e-3;
    case VT_F32: return 2e-5;
    default: return 1e-12;
    }
}

/* Tensor of the given shape: layout 0 contiguous, 1 dims in reverse memory
 * order, 2 every other element from offset 3. */
static host_tensor make(vt_dtype dt, int nd, const int64_t *sizes, int layout) {
    host_tensor h;
    if (layout == 1 && nd > 1) {
        int64_t rev[VT_MAX_DIMS], st[VT_MAX_DIMS];
        for (int d = 0; d < nd; d++) rev[d] = sizes[nd - 1 - d];
        h = ht_new(dt, nd, rev);
        for (int d = 0; d < nd; d++) st[d] = h.t.strides[nd - 1 - d];
        for (int d = 0; d < nd; d++) h.t.sizes[d] = sizes[d], h.t.strides[d] = st[d];
    } else if (layout == 2) {
        int64_t n = 1, st = 2;
        for (int d = 0; d < nd; d++) n *= sizes[d];
        h = ht_1d(dt, 2 * n + 4);
        h.t.ndim = nd;
        h.t.offset = 3;
        for (int d = nd - 1; d >= 0; d--) h.t.sizes[d] = sizes[d], h.t.strides[d] = st, st *= sizes[d];
    } else {
        h = ht_new(dt, nd, sizes);
    }
    return h;
}

static void fill(host_tensor *h, double lo, double hi) {
    int64_t n = vt_tensor_numel(&h->t) > 0 ? ht_block_elems(h) : 0;
    for (int64_t i = 0; i < n; i++) {
        double v = lo + (hi - lo) * (double)(next_u64() >> 11) * 0x1p-53;
        vt_convert(VT_F64, &v, 1, h->t.dtype, (char *)h->block + i * (int64_t)vt_dtype_size(h->t.dtype), 1, 1);
    }
}

/* Largest magnitude in t: float math cancels (sigmoid(x) - t...), so errors scale with the terms. */
static double max_abs(const vt_tensor *t) {
    double m = 0;
    for (int64_t i = 0; i < vt_tensor_numel(t); i++) m = fmax(m, fabs(vt_sm_load(t, vt_sm_offset(t, i))));
    return m;
}

static const vt_dtype float_dts[] = {VT_F32, VT_BF16, VT_F16, VT_F64};

/* ------------------------------------------------------------ softmax */

static void softmax_case(vt_dtype dt, vt_dtype odt, int nd, const int64_t *sizes, int dim, int layout, int is_log) {
    host_tensor x = make(dt, nd, sizes, layout), y = make(odt, nd, sizes, layout ? 0 : 2), r = make(odt, nd, sizes, 0);
    fill(&x, -8, 8);
    CHECK_OK(vt_softmax(&y.t, &x.t, dim, is_log));
    CHECK_OK(vt_ref_softmax(&r.t, &x.t, dim, is_log));
    double t = tol_of(odt);
    ht_near(is_log ? "log_softmax" : "softmax", &y.t, &r.t, t, t * 0.1);
    /* backward on the reference output */
    host_tensor g = make(odt, nd, sizes, layout), gi = make(odt, nd, sizes, 2), gr = make(odt, nd, sizes, 0);
    fill(&g, -1, 1);
    CHECK_OK(vt_softmax_backward(&gi.t, &g.t, &r.t, dim, is_log));
    CHECK_OK(vt_ref_softmax_backward(&gr.t, &g.t, &r.t, dim, is_log));
    ht_near(is_log ? "log_softmax_backward" : "softmax_backward", &gi.t, &gr.t, t, t * 2);
    ht_free(&x), ht_free(&y), ht_free(&r), ht_free(&g), ht_free(&gi), ht_free(&gr);
}

static void softmax_all_shapes(void) {
    static const int64_t cs[] = {1, 2, 15, 17, 33, 257, 1000};
    for (size_t di = 0; di < 4; di++)
        for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++)
            for (int lg = 0; lg < 2; lg++) {
                vt_dtype dt = float_dts[di];
                int64_t s2[2] = {7, cs[ci]};
                for (int layout = 0; layout < 3; layout++) {
                    softmax_case(dt, dt, 2, s2, 1, layout, lg);
                    softmax_case(dt, dt, 2, s2, 0, layout, lg);
                }
                int64_t s3[3] = {3, cs[ci], 37};
                for (int layout = 0; layout < 3; layout++) softmax_case(dt, dt, 3, s3, 1, layout, lg);
            }
}

TEST(softmax_matches_reference_avx512_or_best) {
    vt_isa_force(vt_isa_default());
    softmax_all_shapes();
}

TEST(softmax_matches_reference_portable) {
    vt_isa_force(0);
    softmax_all_shapes();
    vt_isa_force(vt_isa_default());
}

/* The AVX2 kernels on a machine whose best path is AVX-512 or AMX too. */
TEST(softmax_matches_reference_avx2) {
    if (!(vt_isa_available() & VT_ISA_AVX2)) return;
    vt_isa_force(VT_ISA_AVX2);
    softmax_all_shapes();
    vt_isa_force(vt_isa_default());
}

/* Many lines over two dims that do not merge (reversed and strided
 * layouts): the threads' ranges start mid-walk and step across both dims. */
TEST(softmax_many_lines_split_between_threads) {
    int64_t s3[3] = {64, 33, 300};
    for (int layout = 0; layout < 3; layout++)
        for (int dim = 0; dim < 3; dim += 1) softmax_case(VT_F32, VT_F32, 3, s3, dim, layout, dim == 2);
}

TEST(softmax_half_to_float_and_large_rows) {
    int64_t s[2] = {5, 100003};
    softmax_case(VT_BF16, VT_F32, 2, s, 1, 0, 0);
    softmax_case(VT_F16, VT_F32, 2, s, 1, 0, 1);
    softmax_case(VT_F32, VT_F32, 2, s, 1, 0, 1);
    int64_t s4[4] = {2, 3, 5, 64};
    for (int d = 0; d < 4; d++) softmax_case(VT_F32, VT_F32, 4, s4, d, 1, d & 1);
    int64_t s0 = 0;
    softmax_case(VT_F32, VT_F32, 0, &s0, 0, 0, 0); /* 0-dim: one element */
}

TEST(softmax_in_place_and_empty) {
    int64_t s[2] = {9, 77};
    host_tensor x = make(VT_F32, 2, s, 0), r = make(VT_F32, 2, s, 0);
    fill(&x, -5, 5);
    CHECK_OK(vt_ref_softmax(&r.t, &x.t, 1, 0));
    CHECK_OK(vt_softmax(&x.t, &x.t, 1, 0));
    ht_near("in place", &x.t, &r.t, 2e-5, 2e-6);
    int64_t e[2] = {0, 5}, e2[2] = {5, 0};
    host_tensor a = make(VT_F32, 2, e, 0), b = make(VT_F32, 2, e2, 0);
    CHECK_OK(vt_softmax(&a.t, &a.t, 1, 1));
    CHECK_OK(vt_softmax(&b.t, &b.t, 1, 0));
    CHECK_OK(vt_softmax_backward(&b.t, &b.t, &b.t, 1, 0));
    ht_free(&x), ht_free(&r), ht_free(&a), ht_free(&b);
}

TEST(softmax_specials) {
    const unsigned paths[3] = {0, VT_ISA_AVX2, vt_isa_default()};
    for (int isa = 0; isa < 3; isa++) {
        if ((paths[isa] & vt_isa_available()) != paths[isa]) continue;
        vt_isa_force(paths[isa]);
        int64_t s[2] = {3, 20};
        host_tensor x = make(VT_F32, 2, s, 0), y = make(VT_F32, 2, s, 0);
        float *p = x.block;
        for (int i = 0; i < 60; i++) p[i] = (float)(i % 7) - 3.0f;
        for (int i = 0; i < 20; i++) p[i] = -INFINITY; /* all -inf: NaN */
        p[25] = -INFINITY;                             /* one -inf: 0 */
        p[45] = 1000.0f;                               /* dominates: 1 */
        CHECK_OK(vt_softmax(&y.t, &x.t, 1, 0));
        float *q = y.block;
        CHECK(isnan(q[0]) && isnan(q[19]));
        CHECK(q[25] == 0.0f);
        CHECK(q[45] == 1.0f && q[46] == 0.0f);
        CHECK_OK(vt_softmax(&y.t, &x.t, 1, 1));
        CHECK(isinf(q[25]) && q[25] < 0);
        CHECK(q[45] == 0.0f);
        ht_free(&x), ht_free(&y);
    }
    vt_isa_force(vt_isa_default());
}

/* Scores far below the row's max, where exp underflows: subnormal results
 * (max - x in 87.3 .. 103.97) and zeros below, as fp64 gives them rounded
 * to float, along a contiguous row and along a strided dim, on every path.
 * The vector exps compute lanes below -104 (a masked -inf) without a
 * subnormal intermediate; this pins that the values do not change. Bound:
 * 2 ulp of the result plus one subnormal ulp (2^-149) where it is tiny. */
TEST(softmax_underflow_matches_fp64) {
    const float d[] = {0.0f, -1.0f, -86.0f, -87.3f, -88.0f, -95.0f, -100.0f, -103.0f, -103.9f, -103.98f,
                       -104.0f, -104.5f, -110.0f, -1e30f, -INFINITY, -50.0f, -20.0f};
    const int n = (int)(sizeof d / sizeof d[0]);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)d[i]);
    const unsigned paths[3] = {0, VT_ISA_AVX2, vt_isa_default()};
    for (int isa = 0; isa < 3; isa++) {
        if ((paths[isa] & vt_isa_available()) != paths[isa]) continue;
        vt_isa_force(paths[isa]);
        for (int strided = 0; strided < 2; strided++) {
            int64_t s[2] = {strided ? n : 3, strided ? 3 : n};
            host_tensor x = make(VT_F32, 2, s, 0), y = make(VT_F32, 2, s, 0);
            float *p = x.block, *q = y.block;
            for (int r = 0; r < 3; r++)
                for (int i = 0; i < n; i++) p[strided ? i * 3 + r : r * n + i] = d[i] + (float)r;
            CHECK_OK(vt_softmax(&y.t, &x.t, strided ? 0 : 1, 0));
            for (int r = 0; r < 3; r++)
                for (int i = 0; i < n; i++) {
                    double ref = (double)(float)(exp((double)d[i]) / sum);
                    double got = q[strided ? i * 3 + r : r * n + i];
                    CHECK_MSG(fabs(got - ref) <= 2.0 * ldexp(ref, -23) + 0x1p-149,
                              "isa %#x strided %d x=%g: %.9g vs fp64 %.9g", paths[isa], strided, (double)d[i], got,
                              ref);
                }
            ht_free(&x), ht_free(&y);
        }
    }
    vt_isa_force(vt_isa_default());
}

/* Fed by a source, softmax gives what it gives from memory, bit for bit,
 * reading each element once; it takes one only for lines of at least
 * VT_SOURCE_RUN values along a contiguous dim of a dense input. */
TEST(softmax_from_a_source) {
    static const struct {
        int nd;
        int64_t sizes[3];
        int dim;
    } cases[] = {{2, {37, 1031}, 1}, {3, {3, 5, 2500}, -1}, {2, {300, 77}, 1}, {2, {1031, 300}, 0}, {1, {4097}, 0}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int layout = 0; layout < 3; layout++)
            for (size_t di = 0; di < sizeof float_dts / sizeof float_dts[0]; di++) {
                const vt_dtype dt = float_dts[di];
                host_tensor in = make(dt, cases[k].nd, cases[k].sizes, layout);
                host_tensor a = make(dt, cases[k].nd, cases[k].sizes, 0), b = make(dt, cases[k].nd, cases[k].sizes, 0);
                fill(&in, -5, 5);
                const int takes = vt_softmax_takes_source(&b.t, &in.t, cases[k].dim);
                const int d = cases[k].dim < 0 ? cases[k].nd - 1 : cases[k].dim;
                const int64_t C = cases[k].sizes[d];
                const int contiguous_dim = layout != 2 && in.t.strides[d] == 1; /* layout 2 is not dense */
                char what[96];
                snprintf(what, sizeof what, "%s case %zu layout %d", vt_dtype_name(dt), k, layout);
                CHECK_MSG(takes == (contiguous_dim && C >= VT_SOURCE_RUN), "%s: takes %d", what, takes);
                for (int log = 0; log < 2 && takes; log++) {
                    CHECK_OK(vt_softmax(&a.t, &in.t, cases[k].dim, log));
                    int *reads = calloc((size_t)ht_block_elems(&in), sizeof *reads);
                    mem_source ms = {.base = vt_base(&in.t), .es = vt_dtype_size(dt), .reads = reads, .strict = 1};
                    const vt_source src = {mem_read, &ms};
                    CHECK_OK(vt_softmax_run(&b.t, &in.t, cases[k].dim, log, &src));
                    mem_source_release(&ms);
                    CHECK_MSG(!ms.bad, "%s: a read of fewer than 1 or more than VT_SOURCE_MAX values", what);
                    CHECK(ht_compare(what, &a.t, &b.t, -1) == 0);
                    int64_t wrong = 0;
                    for (int64_t i = 0; i < vt_tensor_numel(&in.t); i++) wrong += reads[i] != 1;
                    CHECK_MSG(wrong == 0, "%s: %lld elements not read exactly once", what, (long long)wrong);
                    free(reads);
                }
                ht_free(&in), ht_free(&a), ht_free(&b);
            }
}

TEST(softmax_errors) {
    int64_t s[2] = {3, 4}, s2[2] = {4, 3};
    host_tensor x = make(VT_F32, 2, s, 0), y = make(VT_F32, 2, s2, 0), xi = make(VT_I32, 2, s, 0);
    CHECK_STATUS(vt_softmax(&y.t, &x.t, 1, 0), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_softmax(&x.t, &x.t, 2, 0), VT_ERR_INDEX);
    CHECK_STATUS(vt_softmax(&xi.t, &xi.t, 1, 0), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_softmax_backward(&x.t, &y.t, &x.t, 1, 0), VT_ERR_INVALID_ARGUMENT);
    CHECK_OK(vt_softmax(&x.t, &x.t, -1, 0));
    ht_free(&x), ht_free(&y), ht_free(&xi);
}

/* ------------------------------------------------------------ nll */

static host_tensor targets(int nd, const int64_t *sizes, int64_t C, int64_t ignore) {
    host_tensor t = ht_new(VT_I64, nd, sizes);
    int64_t n = vt_tensor_numel(&t.t);
    for (int64_t i = 0; i < n; i++) ((int64_t *)t.block)[i] = (next_u64() % 9 == 0) ? ignore : (int64_t)(next_u64() % C);
    return t;
}

static void nll_case(vt_dtype dt, int nd, const int64_t *isz, int with_weight, vt_loss_reduction red, int layout) {
    int64_t C = nd == 1 ? isz[0] : isz[1], tsz[VT_MAX_DIMS];
    int tnd = nd == 1 ? 0 : nd - 1;
    for (int d = 0; d < tnd; d++) tsz[d] = isz[d == 0 ? 0 : d + 1];
    host_tensor x = make(dt, nd, isz, layout), t = targets(tnd, tsz, C, -100), w = make(dt, 1, &C, 2);
    fill(&x, -4, 4);
    fill(&w, 0.1, 2);
    int per_sample = red == VT_REDUCTION_NONE && nd >= 2;
    host_tensor o = per_sample ? make(dt, tnd, tsz, 0) : ht_new(dt, 0, NULL), orf = per_sample ? make(dt, tnd, tsz, 0) : ht_new(dt, 0, NULL);
    host_tensor tw = ht_new(dt, 0, NULL), twr = ht_new(dt, 0, NULL);
    const vt_tensor *wp = with_weight ? &w.t : NULL;
    CHECK_OK(vt_nll_loss(&o.t, &tw.t, &x.t, &t.t, wp, red, -100));
    CHECK_OK(vt_ref_nll_loss(&orf.t, &twr.t, &x.t, &t.t, wp, red, -100));
    double tol = tol_of(dt);
    ht_near("nll_loss", &o.t, &orf.t, tol, tol * 1e-3);
    ht_near("nll_loss total_weight", &tw.t, &twr.t, tol, 0);
    /* backward */
    host_tensor gi = make(dt, nd, isz, 2), gr = make(dt, nd, isz, 0);
    host_tensor go = per_sample ? make(dt, tnd, tsz, 1) : ht_new(dt, 0, NULL);
    fill(&go, -1, 1);
    CHECK_OK(vt_nll_loss_backward(&gi.t, &go.t, &x.t, &t.t, wp, red, -100, &twr.t));
    CHECK_OK(vt_ref_nll_loss_backward(&gr.t, &go.t, &x.t, &t.t, wp, red, -100, &twr.t));
    ht_near("nll_loss_backward", &gi.t, &gr.t, tol, 0);
    ht_free(&x), ht_free(&t), ht_free(&w), ht_free(&o), ht_free(&orf), ht_free(&tw), ht_free(&twr);
    ht_free(&gi), ht_free(&gr), ht_free(&go);
}

TEST(nll_loss_matches_reference) {
    static const int64_t s1[1] = {13}, s2[2] = {37, 11}, s2b[2] = {5000, 3}, s4[4] = {3, 5, 7, 9}, s5[5] = {2, 4, 3, 1, 6};
    for (size_t di = 0; di < 4; di++)
        for (int red = 0; red < 3; red++)
            for (int w = 0; w < 2; w++) {
                vt_dtype dt = float_dts[di];
                nll_case(dt, 1, s1, w, red, 0);
                nll_case(dt, 2, s2, w, red, 0);
                nll_case(dt, 2, s2, w, red, 1);
                nll_case(dt, 2, s2b, w, red, 2);
                nll_case(dt, 4, s4, w, red, 1);
                nll_case(dt, 5, s5, w, red, 2);
            }
}

TEST(nll_loss_bad_target_and_empty) {
    int64_t s[2] = {4, 10}, n = 4;
    host_tensor x = make(VT_F32, 2, s, 0), t = ht_1d(VT_I64, n), o = ht_new(VT_F32, 0, NULL), tw = ht_new(VT_F32, 0, NULL);
    fill(&x, -1, 1);
    int64_t *tp = t.block;
    tp[0] = 1, tp[1] = 12, tp[2] = -100, tp[3] = -3;
    for (int red = 0; red < 3; red++) {
        host_tensor on = red == 0 ? ht_1d(VT_F32, n) : ht_new(VT_F32, 0, NULL);
        CHECK_STATUS(vt_nll_loss(&on.t, &tw.t, &x.t, &t.t, NULL, red, -100), VT_ERR_INDEX);
        CHECK(strcmp(vt_last_error(), "Target 12 is out of bounds.") == 0);
        ht_free(&on);
    }
    host_tensor gi = make(VT_F32, 2, s, 0), go = ht_new(VT_F32, 0, NULL);
    *(float *)tw.block = 1.0f;
    CHECK_STATUS(vt_nll_loss_backward(&gi.t, &go.t, &x.t, &t.t, NULL, VT_REDUCTION_MEAN, -100, &tw.t), VT_ERR_INDEX);
    tp[1] = 3, tp[3] = 0;
    CHECK_OK(vt_nll_loss(&o.t, &tw.t, &x.t, &t.t, NULL, VT_REDUCTION_MEAN, -100));
    CHECK(*(float *)tw.block == 3.0f);
    tp[1] = 12, tp[2] = 0; /* ignore_index 12 skips it */
    CHECK_OK(vt_nll_loss(&o.t, &tw.t, &x.t, &t.t, NULL, VT_REDUCTION_SUM, 12));
    /* empty batch: mean NaN, sum 0 */
    int64_t e[2] = {0, 10}, z = 0;
    host_tensor xe = make(VT_F32, 2, e, 0), te = ht_1d(VT_I64, z);
    CHECK_OK(vt_nll_loss(&o.t, &tw.t, &xe.t, &te.t, NULL, VT_REDUCTION_MEAN, -100));
    CHECK(isnan(*(float *)o.block));
    CHECK_OK(vt_nll_loss(&o.t, &tw.t, &xe.t, &te.t, NULL, VT_REDUCTION_SUM, -100));
    CHECK(*(float *)o.block == 0.0f);
    /* shape and dtype errors */
    host_tensor ti = ht_1d(VT_I32, n);
    CHECK_STATUS(vt_nll_loss(&o.t, &tw.t, &x.t, &ti.t, NULL, VT_REDUCTION_SUM, -100), VT_ERR_INVALID_ARGUMENT);
    int64_t c9 = 9;
    host_tensor w9 = ht_1d(VT_F32, c9);
    CHECK_STATUS(vt_nll_loss(&o.t, &tw.t, &x.t, &t.t, &w9.t, VT_REDUCTION_SUM, -100), VT_ERR_INVALID_ARGUMENT);
    ht_free(&x), ht_free(&t), ht_free(&o), ht_free(&tw), ht_free(&gi), ht_free(&go), ht_free(&xe), ht_free(&te);
    ht_free(&ti), ht_free(&w9);
}

/* ------------------------------------------------------------ pointwise losses */

static void pw_case(vt_loss_kind kind, vt_dtype dt, int nd, const int64_t *sz, vt_loss_reduction red, int layout,
                    int wmode, double param) {
    host_tensor x = make(dt, nd, sz, layout), t = make(dt, nd, sz, layout ? 0 : 2);
    int bce = kind == VT_LOSS_BCE || kind == VT_LOSS_BCE_LOGITS;
    fill(&x, kind == VT_LOSS_BCE ? 0.001 : -3, kind == VT_LOSS_BCE ? 0.999 : 3);
    fill(&t, bce ? 0 : -3, bce ? 1 : 3);
    int64_t last = nd ? sz[nd - 1] : 1;
    host_tensor w = ht_1d(dt, last), pw = ht_1d(dt, last);
    fill(&w, 0.2, 2);
    fill(&pw, 0.5, 3);
    const vt_tensor *wp = bce && wmode ? &w.t : NULL, *pwp = kind == VT_LOSS_BCE_LOGITS && wmode > 1 ? &pw.t : NULL;
    host_tensor o = red == VT_REDUCTION_NONE ? make(dt, nd, sz, 2) : ht_new(dt, 0, NULL);
    host_tensor r = red == VT_REDUCTION_NONE ? make(dt, nd, sz, 0) : ht_new(dt, 0, NULL);
    CHECK_OK(vt_pointwise_loss(kind, &o.t, &x.t, &t.t, wp, pwp, red, param));
    CHECK_OK(vt_ref_pointwise_loss(kind, &r.t, &x.t, &t.t, wp, pwp, red, param));
    double tol = tol_of(dt);
    ht_near("pointwise loss", &o.t, &r.t, tol * 4, tol * 4 * max_abs(&r.t));
    host_tensor go = red == VT_REDUCTION_NONE ? make(dt, nd, sz, 1) : ht_new(dt, 0, NULL);
    fill(&go, -1, 1);
    host_tensor gi = make(dt, nd, sz, 2), gr = make(dt, nd, sz, 0);
    CHECK_OK(vt_pointwise_loss_backward(kind, &gi.t, &go.t, &x.t, &t.t, wp, pwp, red, param));
    CHECK_OK(vt_ref_pointwise_loss_backward(kind, &gr.t, &go.t, &x.t, &t.t, wp, pwp, red, param));
    ht_near("pointwise loss backward", &gi.t, &gr.t, tol * 4, tol * 4 * max_abs(&gr.t));
    ht_free(&x), ht_free(&t), ht_free(&w), ht_free(&pw), ht_free(&o), ht_free(&r), ht_free(&go), ht_free(&gi),
        ht_free(&gr);
}

TEST(pointwise_losses_match_reference) {
    static const int64_t s1[1] = {100003}, s3[3] = {5, 7, 33};
    for (int kind = 0; kind < VT_POINTWISE_LOSS_COUNT; kind++)
        for (size_t di = 0; di < 4; di++)
            for (int red = 0; red < 3; red++) {
                double param = kind == VT_LOSS_SMOOTH_L1 ? 0.7 : (kind == VT_LOSS_HUBER ? 1.3 : 0);
                pw_case(kind, float_dts[di], 3, s3, red, di % 3, red, param);
                pw_case(kind, float_dts[di], 1, s1, red, 0, 2, param);
            }
    int64_t s = 17;
    pw_case(VT_LOSS_SMOOTH_L1, VT_F32, 1, &s, VT_REDUCTION_NONE, 0, 0, 0.0); /* beta 0: l1 */
    int64_t e = 0;
    pw_case(VT_LOSS_MSE, VT_F32, 1, &e, VT_REDUCTION_SUM, 0, 0, 0.0);
}

TEST(pointwise_loss_errors_and_empty_mean) {
    int64_t n = 8;
    host_tensor x = ht_1d(VT_F32, n), t = ht_1d(VT_F32, n), o = ht_new(VT_F32, 0, NULL);
    fill(&x, 0.1, 0.9);
    fill(&t, 0, 1);
    ((float *)x.block)[5] = 1.5f;
    CHECK_STATUS(vt_pointwise_loss(VT_LOSS_BCE, &o.t, &x.t, &t.t, NULL, NULL, VT_REDUCTION_MEAN, 0),
                 VT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(vt_last_error(), "between 0 and 1") != NULL);
    CHECK_STATUS(vt_pointwise_loss(VT_LOSS_MSE, &o.t, &x.t, &t.t, &t.t, NULL, VT_REDUCTION_MEAN, 0),
                 VT_ERR_INVALID_ARGUMENT);
    int64_t m = 3;
    host_tensor t3 = ht_1d(VT_F32, m);
    CHECK_STATUS(vt_pointwise_loss(VT_LOSS_MSE, &o.t, &x.t, &t3.t, NULL, NULL, VT_REDUCTION_MEAN, 0),
                 VT_ERR_INVALID_ARGUMENT);
    int64_t z = 0;
    host_tensor xe = ht_1d(VT_F32, z);
    CHECK_OK(vt_pointwise_loss(VT_LOSS_MSE, &o.t, &xe.t, &xe.t, NULL, NULL, VT_REDUCTION_MEAN, 0));
    CHECK(isnan(*(float *)o.block));
    ht_free(&x), ht_free(&t), ht_free(&o), ht_free(&t3), ht_free(&xe);
}

/* ------------------------------------------------------------ queued ops */

TEST(softmax_queued_ops_and_latched_index_error) {
    CHECK_OK(vt_init());
    int64_t s[2] = {4, 10};
    host_tensor x = make(VT_F32, 2, s, 0), y = make(VT_F32, 2, s, 0), r = make(VT_F32, 2, s, 0);
    fill(&x, -3, 3);
    ht_device(&x), ht_device(&y);
    CHECK_OK(vt_op_softmax(0, "aten::_softmax", &y.t, &x.t, 1, 0));
    CHECK_OK(vt_synchronize(0));
    CHECK_OK(vt_ref_softmax(&r.t, &x.t, 1, 0));
    ht_near("queued softmax", &y.t, &r.t, 2e-5, 2e-6);
    CHECK_STATUS(vt_op_softmax(0, "aten::_softmax", &y.t, &x.t, 5, 0), VT_ERR_INDEX);
    host_tensor t = ht_1d(VT_I64, 4), o = ht_new(VT_F32, 0, NULL), tw = ht_new(VT_F32, 0, NULL);
    ((int64_t *)t.block)[2] = 12;
    ht_device(&t), ht_device(&o), ht_device(&tw);
    CHECK_OK(vt_op_nll_loss(0, "aten::nll_loss_forward", &o.t, &tw.t, &x.t, &t.t, NULL, VT_REDUCTION_MEAN, -100));
    vt_status st = vt_synchronize(0);
    CHECK(st == VT_ERR_INDEX);
    CHECK(strstr(vt_last_error(), "Target 12 is out of bounds.") != NULL);
    CHECK_OK(vt_synchronize(0));
    host_tensor ti = ht_1d(VT_I64, 3);
    ht_device(&ti);
    CHECK_STATUS(vt_op_nll_loss(0, "aten::nll_loss_forward", &o.t, &tw.t, &x.t, &ti.t, NULL, VT_REDUCTION_MEAN, -100),
                 VT_ERR_INVALID_ARGUMENT);
    CHECK_OK(vt_op_pointwise_loss(0, "aten::mse_loss", VT_LOSS_MSE, &o.t, &x.t, &y.t, NULL, NULL, VT_REDUCTION_SUM, 0));
    CHECK_OK(vt_synchronize(0));
    ht_free(&x), ht_free(&y), ht_free(&r), ht_free(&t), ht_free(&o), ht_free(&tw), ht_free(&ti);
}
