/* test_kernels_attention.c — vt_sdpa_forward / vt_sdpa_backward against the
 * scalar references: every dtype and precision, awkward sequence lengths and
 * head dims (block remainders), Dv != D, grouped-query heads, causal, bool
 * and float masks (broadcast), fully masked rows, transposed layouts, empty
 * extents, both row-kernel paths, thread-count independence and errors. */
#include "kernels/attention/attention.h"
#include "test_kernels_util.h"

typedef struct sdpa_case {
    int64_t B, Hq, Hk, L, S, D, Dv;
    int causal;
    int mask; /* 0 none, 1 bool [L, S], 2 float [B, 1, L, S], 3 bool with fully masked rows */
    int transposed; /* q, k, v as [B, T, H, D] views */
} sdpa_case;

static const sdpa_case cases[] = {
    {1, 1, 1, 1, 1, 8, 8, 0, 0, 0},       {2, 2, 2, 17, 17, 16, 16, 0, 0, 0}, {1, 2, 2, 65, 65, 64, 64, 1, 0, 0},
    {1, 4, 2, 33, 70, 33, 20, 0, 1, 1},   {2, 2, 1, 70, 33, 40, 40, 1, 0, 1}, {1, 2, 2, 1, 130, 64, 64, 0, 2, 0},
    {1, 1, 1, 64, 64, 100, 48, 0, 3, 0},  {1, 3, 3, 130, 129, 24, 24, 1, 2, 0}, {1, 1, 1, 20, 20, 256, 256, 0, 0, 1},
};
#define N_CASES (sizeof cases / sizeof cases[0])

/* [B, H, T, E] tensor, contiguous or a [B, T, H, E] block viewed transposed. */
static host_tensor make4(vt_dtype dt, int64_t B, int64_t H, int64_t T, int64_t E, int tr) {
    int64_t s[4] = {B, H, T, E}, st[4] = {B, T, H, E};
    if (!tr) return ht_new(dt, 4, s);
    host_tensor h = ht_new(dt, 4, st);
    h.t.sizes[1] = H, h.t.sizes[2] = T;
    int64_t tmp = h.t.strides[1];
    h.t.strides[1] = h.t.strides[2], h.t.strides[2] = tmp;
    return h;
}

static void fill_unit(host_tensor *h, double amp) {
    if (vt_tensor_numel(&h->t) == 0) return;
    int64_t n = ht_block_elems(h);
    size_t es = vt_dtype_size(h->t.dtype);
    for (int64_t i = 0; i < n; i++) {
        double d = ((double)(next_u64() >> 11) * 0x1p-53 - 0.5) * 2.0 * amp;
        if (h->t.dtype == VT_BOOL) {
            uint8_t b = (next_u64() & 3) != 0;
            memcpy((char *)h->block + i, &b, 1);
        } else {
            vt_convert(VT_F64, &d, 1, h->t.dtype, (char *)h->block + i * (int64_t)es, 1, 1);
        }
    }
}

static host_tensor make_mask(const sdpa_case *c) {
    host_tensor m;
    if (c->mask == 2) {
        int64_t s[4] = {c->B, 1, c->L, c->S};
        m = ht_new(VT_F32, 4, s);
        fill_unit(&m, 2.0);
    } else {
        int64_t s[2] = {c->L, c->S};
        m = ht_new(VT_BOOL, 2, s);
        fill_unit(&m, 1.0);
        if (c->mask == 3)
            for (int64_t i = 0; i < c->L; i += 5) memset((uint8_t *)m.block + i * c->S, 0, (size_t)c->S);
    }
    return m;
}

/* Largest |x| of a tensor (for tolerances scaled to the values). */
static double max_abs(const vt_tensor *t) {
    int64_t n = vt_tensor_numel(t);
    double m = 0.0;
    vt_tensor c = *t;
    host_tensor tmp = ht_new(VT_F64, t->ndim, t->sizes);
    vt_copy(&tmp.t, &c);
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(((double *)tmp.block)[i]));
    ht_free(&tmp);
    return m;
}

/* |a - r| <= tol * max(1, max|r|) element-wise. */
static int64_t compare_scaled(const char *what, const vt_tensor *a, const vt_tensor *r, double tol) {
    double scale = fmax(1.0, max_abs(r));
    int64_t n = vt_tensor_numel(a), bad = 0;
    host_tensor x = ht_new(VT_F64, a->ndim, a->sizes), y = ht_new(VT_F64, r->ndim, r->sizes);
    vt_copy(&x.t, a);
    vt_copy(&y.t, r);
    for (int64_t i = 0; i < n; i++) {
        double u = ((double *)x.block)[i], v = ((double *)y.block)[i];
        int ok = (isinf(u) || isinf(v)) ? u == v : fabs(u - v) <= tol * scale;
        if (!ok && bad++ < 3) vt_test_fail(__FILE__, __LINE__, "%s: element %lld: %.9g vs ref %.9g", what, (long long)i, u, v);
    }
    ht_free(&x), ht_free(&y);
    return bad;
}

static double tolerance(vt_dtype dt, vt_precision prec) {
    if (dt == VT_BF16) return 3e-2;
    if (dt == VT_F16) return 2e-2;
    return prec == VT_PRECISION_DEFAULT ? 2e-2 : prec == VT_PRECISION_HIGH ? 2e-4 : 2e-5;
}

typedef struct setup {
    host_tensor q, k, v, out, lse, mask, dout, dq, dk, dv;
    int has_mask;
} setup;

static void setup_case(setup *s, const sdpa_case *c, vt_dtype dt) {
    s->q = make4(dt, c->B, c->Hq, c->L, c->D, c->transposed);
    s->k = make4(dt, c->B, c->Hk, c->S, c->D, c->transposed);
    s->v = make4(dt, c->B, c->Hk, c->S, c->Dv, c->transposed);
    s->out = make4(dt, c->B, c->Hq, c->L, c->Dv, 0);
    s->dout = make4(dt, c->B, c->Hq, c->L, c->Dv, c->transposed);
    s->dq = make4(dt, c->B, c->Hq, c->L, c->D, 0);
    s->dk = make4(dt, c->B, c->Hk, c->S, c->D, 0);
    s->dv = make4(dt, c->B, c->Hk, c->S, c->Dv, 0);
    int64_t ls[3] = {c->B, c->Hq, c->L};
    s->lse = ht_new(VT_F32, 3, ls);
    fill_unit(&s->q, 1.5);
    fill_unit(&s->k, 1.5);
    fill_unit(&s->v, 1.0);
    fill_unit(&s->dout, 1.0);
    s->has_mask = c->mask != 0;
    if (s->has_mask) s->mask = make_mask(c);
}

static void free_setup(setup *s) {
    ht_free(&s->q), ht_free(&s->k), ht_free(&s->v), ht_free(&s->out), ht_free(&s->lse), ht_free(&s->dout);
    ht_free(&s->dq), ht_free(&s->dk), ht_free(&s->dv);
    if (s->has_mask) ht_free(&s->mask);
}

static void run_case(const sdpa_case *c, size_t ci, vt_dtype dt, vt_precision prec, int backward) {
    setup s, r;
    uint64_t seed = rng_state;
    setup_case(&s, c, dt);
    rng_state = seed;
    setup_case(&r, c, dt);
    double scale = 1.0 / sqrt((double)c->D);
    const vt_tensor *m = s.has_mask ? &s.mask.t : NULL, *mr = r.has_mask ? &r.mask.t : NULL;
    CHECK_OK(vt_sdpa_forward(&s.out.t, &s.lse.t, &s.q.t, &s.k.t, &s.v.t, m, scale, c->causal, prec));
    CHECK_OK(vt_ref_sdpa_forward(&r.out.t, &r.lse.t, &r.q.t, &r.k.t, &r.v.t, mr, scale, c->causal, prec));
    double tol = tolerance(dt, prec);
    char what[128];
    snprintf(what, sizeof what, "case %zu %s prec %d out", ci, vt_dtype_name(dt), (int)prec);
    CHECK(compare_scaled(what, &s.out.t, &r.out.t, tol) == 0);
    snprintf(what, sizeof what, "case %zu %s prec %d lse", ci, vt_dtype_name(dt), (int)prec);
    CHECK(compare_scaled(what, &s.lse.t, &r.lse.t, tol) == 0);
    if (backward) {
        CHECK_OK(vt_sdpa_backward(&s.dq.t, &s.dk.t, &s.dv.t, &s.dout.t, &s.q.t, &s.k.t, &s.v.t, m, &s.out.t, &s.lse.t,
                                  scale, c->causal, prec));
        CHECK_OK(vt_ref_sdpa_backward(&r.dq.t, &r.dk.t, &r.dv.t, &r.dout.t, &r.q.t, &r.k.t, &r.v.t, mr, &r.out.t,
                                      &r.lse.t, scale, c->causal, prec));
        double gt = tol * 2;
        snprintf(what, sizeof what, "case %zu %s prec %d dq", ci, vt_dtype_name(dt), (int)prec);
        CHECK(compare_scaled(what, &s.dq.t, &r.dq.t, gt) == 0);
        snprintf(what, sizeof what, "case %zu %s prec %d dk", ci, vt_dtype_name(dt), (int)prec);
        CHECK(compare_scaled(what, &s.dk.t, &r.dk.t, gt) == 0);
        snprintf(what, sizeof what, "case %zu %s prec %d dv", ci, vt_dtype_name(dt), (int)prec);
        CHECK(compare_scaled(what, &s.dv.t, &r.dv.t, gt) == 0);
    }
    free_setup(&s);
    free_setup(&r);
}

TEST(kernels_attention_forward_backward_f32) {
    for (size_t i = 0; i < N_CASES; i++)
        for (int p = 0; p <= 2; p++) run_case(&cases[i], i, VT_F32, (vt_precision)p, 1);
}

TEST(kernels_attention_forward_backward_half) {
    for (size_t i = 0; i < N_CASES; i++) {
        run_case(&cases[i], i, VT_BF16, VT_PRECISION_HIGHEST, 1); /* narrow inputs: one pass whatever prec */
        run_case(&cases[i], i, VT_F16, VT_PRECISION_DEFAULT, 1);
    }
}

/* The portable and AVX2 row kernels, whatever the best path here is. */
TEST(kernels_attention_portable_and_avx2_paths) {
    unsigned active = vt_isa_active();
    const unsigned paths[2] = {0, VT_ISA_AVX2};
    for (int p = 0; p < 2; p++) {
        if ((paths[p] & vt_isa_available()) != paths[p]) continue;
        vt_isa_force(paths[p]);
        for (size_t i = 0; i < N_CASES; i += p ? 1 : 2) {
            run_case(&cases[i], i, VT_F32, VT_PRECISION_DEFAULT, 1);
            run_case(&cases[i], i, VT_F32, VT_PRECISION_HIGHEST, 1);
        }
    }
    vt_isa_force(active);
}

/* The same call forced inline (from inside a pool task) and run twice gives
 * the same bits. */
typedef struct inline_call {
    setup *s;
    int causal;
    vt_status st;
} inline_call;

static void run_inline(void *ctx, int64_t b, int64_t e) {
    (void)e;
    inline_call *ic = ctx;
    if (b != 0) return;
    setup *s = ic->s;
    ic->st = vt_sdpa_forward(&s->out.t, &s->lse.t, &s->q.t, &s->k.t, &s->v.t, NULL, 0.125, ic->causal,
                             VT_PRECISION_DEFAULT);
    if (ic->st == VT_OK)
        ic->st = vt_sdpa_backward(&s->dq.t, &s->dk.t, &s->dv.t, &s->dout.t, &s->q.t, &s->k.t, &s->v.t, NULL, &s->out.t,
                                  &s->lse.t, 0.125, ic->causal, VT_PRECISION_DEFAULT);
}

TEST(kernels_attention_thread_independent) {
    sdpa_case c = {2, 4, 2, 200, 200, 64, 64, 1, 0, 0};
    setup a, b;
    uint64_t seed = rng_state;
    setup_case(&a, &c, VT_F32);
    rng_state = seed;
    setup_case(&b, &c, VT_F32);
    CHECK_OK(vt_sdpa_forward(&a.out.t, &a.lse.t, &a.q.t, &a.k.t, &a.v.t, NULL, 0.125, 1, VT_PRECISION_DEFAULT));
    CHECK_OK(vt_sdpa_backward(&a.dq.t, &a.dk.t, &a.dv.t, &a.dout.t, &a.q.t, &a.k.t, &a.v.t, NULL, &a.out.t, &a.lse.t,
                              0.125, 1, VT_PRECISION_DEFAULT));
    inline_call ic = {&b, 1, VT_ERR_INTERNAL};
    vt_parallel_for(2, 1, run_inline, &ic);
    CHECK_OK(ic.st);
    CHECK(ht_compare("out inline", &a.out.t, &b.out.t, -1) == 0);
    CHECK(ht_compare("lse inline", &a.lse.t, &b.lse.t, -1) == 0);
    CHECK(ht_compare("dq inline", &a.dq.t, &b.dq.t, -1) == 0);
    CHECK(ht_compare("dk inline", &a.dk.t, &b.dk.t, -1) == 0);
    CHECK(ht_compare("dv inline", &a.dv.t, &b.dv.t, -1) == 0);
    free_setup(&a);
    free_setup(&b);
}

TEST(kernels_attention_empty_and_3d) {
    /* S == 0: out 0, lse -inf, gradients 0; L == 0: nothing to do */
    sdpa_case c = {1, 2, 2, 5, 0, 8, 8, 0, 0, 0};
    setup s;
    setup_case(&s, &c, VT_F32);
    fill_unit(&s.out, 1.0);
    fill_unit(&s.dq, 1.0);
    CHECK_OK(vt_sdpa_forward(&s.out.t, &s.lse.t, &s.q.t, &s.k.t, &s.v.t, NULL, 0.3, 0, VT_PRECISION_DEFAULT));
    for (int i = 0; i < 10; i++) CHECK(((float *)s.lse.block)[i] == -INFINITY);
    for (int i = 0; i < 80; i++) CHECK(((float *)s.out.block)[i] == 0.0f);
    CHECK_OK(vt_sdpa_backward(&s.dq.t, &s.dk.t, &s.dv.t, &s.dout.t, &s.q.t, &s.k.t, &s.v.t, NULL, &s.out.t, &s.lse.t,
                              0.3, 0, VT_PRECISION_DEFAULT));
    for (int i = 0; i < 80; i++) CHECK(((float *)s.dq.block)[i] == 0.0f);
    free_setup(&s);
    /* 3-D [H, L, D] operands */
    int64_t qs[3] = {2, 9, 16}, ls[2] = {2, 9};
    host_tensor q = ht_new(VT_F32, 3, qs), k = ht_new(VT_F32, 3, qs), v = ht_new(VT_F32, 3, qs);
    host_tensor o = ht_new(VT_F32, 3, qs), ro = ht_new(VT_F32, 3, qs), l = ht_new(VT_F32, 2, ls), rl = ht_new(VT_F32, 2, ls);
    fill_unit(&q, 1.0), fill_unit(&k, 1.0), fill_unit(&v, 1.0);
    CHECK_OK(vt_sdpa_forward(&o.t, &l.t, &q.t, &k.t, &v.t, NULL, 0.25, 1, VT_PRECISION_HIGHEST));
    CHECK_OK(vt_ref_sdpa_forward(&ro.t, &rl.t, &q.t, &k.t, &v.t, NULL, 0.25, 1, VT_PRECISION_HIGHEST));
    CHECK(compare_scaled("3-D out", &o.t, &ro.t, 2e-5) == 0);
    CHECK(compare_scaled("3-D lse", &l.t, &rl.t, 2e-5) == 0);
    ht_free(&q), ht_free(&k), ht_free(&v), ht_free(&o), ht_free(&ro), ht_free(&l), ht_free(&rl);
}

TEST(kernels_attention_errors) {
    sdpa_case c = {1, 3, 2, 4, 4, 8, 8, 0, 0, 0};
    setup s;
    setup_case(&s, &c, VT_F32);
    /* 3 query heads over 2 kv heads */
    CHECK_STATUS(vt_sdpa_forward(&s.out.t, &s.lse.t, &s.q.t, &s.k.t, &s.v.t, NULL, 1.0, 0, VT_PRECISION_DEFAULT),
                 VT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(vt_last_error(), "multiple") != NULL);
    free_setup(&s);
    sdpa_case c2 = {1, 2, 2, 4, 4, 8, 8, 0, 0, 0};
    setup_case(&s, &c2, VT_F32);
    vt_tensor bad = s.k.t;
    bad.sizes[3] = 7;
    CHECK_STATUS(vt_sdpa_forward(&s.out.t, &s.lse.t, &s.q.t, &bad, &s.v.t, NULL, 1.0, 0, VT_PRECISION_DEFAULT),
                 VT_ERR_INVALID_ARGUMENT);
    bad = s.v.t;
    bad.dtype = VT_BF16;
    CHECK_STATUS(vt_sdpa_forward(&s.out.t, &s.lse.t, &s.q.t, &s.k.t, &bad, NULL, 1.0, 0, VT_PRECISION_DEFAULT),
                 VT_ERR_INVALID_ARGUMENT);
    int64_t ms[2] = {3, 4};
    host_tensor m = ht_new(VT_F32, 2, ms);
    CHECK_STATUS(vt_sdpa_forward(&s.out.t, &s.lse.t, &s.q.t, &s.k.t, &s.v.t, &m.t, 1.0, 0, VT_PRECISION_DEFAULT),
                 VT_ERR_INVALID_ARGUMENT);
    bad = s.q.t;
    bad.dtype = VT_I32;
    CHECK_STATUS(vt_sdpa_forward(&s.out.t, &s.lse.t, &bad, &s.k.t, &s.v.t, NULL, 1.0, 0, VT_PRECISION_DEFAULT),
                 VT_ERR_UNSUPPORTED);
    CHECK_STATUS(vt_sdpa_backward(&s.dq.t, &s.dk.t, &s.dv.t, NULL, &s.q.t, &s.k.t, &s.v.t, NULL, &s.out.t, &s.lse.t,
                                  1.0, 0, VT_PRECISION_DEFAULT),
                 VT_ERR_INVALID_ARGUMENT);
    ht_free(&m);
    free_setup(&s);
}

/* The rows' exp on every path against fp64 exp: within 2 ulp of the
 * correctly rounded value (subnormal results included, where an ulp is
 * 2^-149), +0 below -104, inf above the f32 range, NaN kept. 300 values
 * span the whole range plus the edges, and 300 is not a multiple of 8 or
 * 16, so vector tails are covered. */
TEST(kernels_attention_row_exp_accuracy) {
    const unsigned paths[3] = {0, VT_ISA_AVX2, vt_isa_default()};
    enum { N = 300 };
    float x[N];
    for (int i = 0; i < N - 8; i++) x[i] = -110.0f + 200.0f * (float)i / (float)(N - 9);
    const float edges[8] = {-104.5f, -103.9f, -87.4f, -0.0f, 1e-7f, 88.7f, 89.5f, NAN};
    for (int i = 0; i < 8; i++) x[N - 8 + i] = edges[i];
    for (int p = 0; p < 3; p++) {
        if ((paths[p] & vt_isa_available()) != paths[p]) continue;
        vt_isa_force(paths[p]);
        float s[N];
        memcpy(s, x, sizeof s);
        vt_attn_rows_active()->exp_sum(s, N, 0.0f);
        int bad = 0;
        for (int i = 0; i < N; i++) {
            double ref = exp((double)x[i]);
            float r = (float)ref;
            int ok;
            if (isnan(x[i])) ok = isnan(s[i]);
            else if (x[i] < -104.0f) ok = s[i] == 0.0f;
            else if (isinf(r)) ok = isinf(s[i]) && s[i] > 0;
            else {
                double ulp = fabs(r) < 0x1p-126 ? 0x1p-149 : fabs(nextafterf(r, INFINITY) - r);
                ok = fabs((double)s[i] - ref) <= 2 * ulp;
            }
            if (!ok && bad++ < 3)
                vt_test_fail(__FILE__, __LINE__, "path %s: exp(%.9g) = %.9g, fp64 %.9g", vt_isa_path(), (double)x[i],
                             (double)s[i], ref);
        }
        CHECK(bad == 0);
    }
    vt_isa_force(vt_isa_default());
}
