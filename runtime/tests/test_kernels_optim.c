/* test_kernels_optim.c — foreach and fused optimizer kernels against their
 * scalar references (every ISA path, awkward sizes, bf16/f16/f64,
 * non-contiguous, in place, empty), and the error statuses. */
#include <math.h>
#include <stdlib.h>

#include "graph/node.h"
#include "internal.h"
#include "kernels/optim/optim.h"
#include "test.h"
#include "test_kernels_util.h"

#define NT 5

typedef struct lists {
    host_tensor out[NT], a[NT], b[NT], c[NT], ro[NT];
    vt_tensor to[NT], ta[NT], tb[NT], tc[NT], tr[NT];
} lists;

static void make_lists(lists *L, vt_dtype dt, int64_t base, int strided) {
    for (int i = 0; i < NT; i++) {
        int64_t n = base + i * 7;
        L->out[i] = ht_1d(dt, n);
        L->ro[i] = ht_1d(dt, n);
        L->a[i] = strided && i == 1 ? ht_strided(dt, n, 2) : ht_1d(dt, n);
        L->b[i] = ht_1d(dt == VT_F16 ? VT_F32 : dt, n); /* mixed dtypes too */
        L->c[i] = strided && i == 2 ? ht_strided(dt, n, 3) : ht_1d(dt, n);
        ht_fill_random(&L->a[i], 0, 0);
        ht_fill_random(&L->b[i], 0, 0);
        ht_fill_random(&L->c[i], 0, 1);
        L->to[i] = L->out[i].t;
        L->tr[i] = L->ro[i].t;
        L->ta[i] = L->a[i].t;
        L->tb[i] = L->b[i].t;
        L->tc[i] = L->c[i].t;
    }
}

static void free_lists(lists *L) {
    for (int i = 0; i < NT; i++) {
        ht_free(&L->out[i]);
        ht_free(&L->ro[i]);
        ht_free(&L->a[i]);
        ht_free(&L->b[i]);
        ht_free(&L->c[i]);
    }
}

static const vt_foreach_op elementwise_ops[] = {
    VT_FOREACH_ADD, VT_FOREACH_SUB, VT_FOREACH_MUL, VT_FOREACH_DIV, VT_FOREACH_MAXIMUM, VT_FOREACH_MINIMUM,
    VT_FOREACH_CLAMP_MIN, VT_FOREACH_CLAMP_MAX, VT_FOREACH_ADDCMUL, VT_FOREACH_ADDCDIV, VT_FOREACH_LERP,
    VT_FOREACH_NEG, VT_FOREACH_ABS, VT_FOREACH_SQRT, VT_FOREACH_SIGN, VT_FOREACH_RECIPROCAL, VT_FOREACH_ZERO,
    VT_FOREACH_COPY,
};

static void run_case(vt_foreach_op op, vt_dtype dt, int64_t base, int strided, int with_b, int with_c,
                     const double *scalars) {
    lists L;
    make_lists(&L, dt, base, strided);
    vt_foreach_args x = {0};
    x.op = op;
    x.n = NT;
    x.out = L.to;
    x.a = op == VT_FOREACH_ZERO ? NULL : L.ta;
    x.b = with_b ? L.tb : NULL;
    x.c = with_c ? L.tc : NULL;
    x.scalars = scalars;
    x.scalar = 0.3;
    x.alpha = -0.7;
    CHECK_OK(vt_foreach(&x));
    x.out = L.tr;
    CHECK_OK(vt_ref_foreach(&x));
    for (int i = 0; i < NT; i++)
        CHECK_MSG(ht_compare(vt_foreach_op_name(op), &L.to[i], &L.tr[i], -1) == 0, "%s dtype %s base %lld",
                  vt_foreach_op_name(op), vt_dtype_name(dt), (long long)base);
    /* each tensor as a node (what DeferAndFuse records): the same bits */
    for (int i = 0; i < NT; i++) {
        memset(L.ro[i].block, 0xA5, L.ro[i].bytes);
        vt_node n;
        vt_foreach_item_node(&n, "aten::_foreach_test", &x, i);
        CHECK_OK(vt_node_check(&n));
        CHECK_OK(vt_node_run(&n));
        CHECK_MSG(ht_compare(vt_foreach_op_name(op), &L.to[i], &L.tr[i], -1) == 0, "%s node dtype %s base %lld",
                  vt_foreach_op_name(op), vt_dtype_name(dt), (long long)base);
    }
    free_lists(&L);
}

TEST(foreach_every_path_matches_reference) {
    static const vt_dtype dts[] = {VT_F32, VT_BF16, VT_F16, VT_F64};
    static const int64_t bases[] = {0, 1, 17, 1000, 40000};
    const double sl[NT] = {0.25, -1.5, 2.0, 0.75, 0.1};
    unsigned masks[] = {vt_isa_available(), VT_ISA_AVX2, 0}; /* AVX2 too where AVX-512 is best */
    for (int mi = 0; mi < 3; mi++) {
        if ((masks[mi] & vt_isa_available()) != masks[mi]) continue;
        vt_isa_force(masks[mi]);
        for (size_t o = 0; o < sizeof elementwise_ops / sizeof elementwise_ops[0]; o++) {
            vt_foreach_op op = elementwise_ops[o];
            int ternary = op == VT_FOREACH_ADDCMUL || op == VT_FOREACH_ADDCDIV;
            int unary = op >= VT_FOREACH_NEG;
            for (size_t d = 0; d < 4; d++)
                for (size_t b = 0; b < 5; b++) {
                    int64_t base = bases[b];
                    if (base > 1000 && dts[d] != VT_F32) continue;
                    if (unary) run_case(op, dts[d], base, b == 2, 0, 0, NULL);
                    else if (ternary) run_case(op, dts[d], base, b == 2, 1, 1, b == 3 ? sl : NULL);
                    else if (op == VT_FOREACH_LERP) {
                        run_case(op, dts[d], base, b == 2, 1, 0, NULL);
                        run_case(op, dts[d], base, 0, 1, 1, NULL);
                    } else {
                        run_case(op, dts[d], base, b == 2, 1, 0, NULL);
                        run_case(op, dts[d], base, 0, 0, 0, b == 1 ? sl : NULL);
                    }
                }
        }
    }
    vt_isa_force(vt_isa_default());
}

TEST(foreach_inplace_and_scalar_tensor) {
    host_tensor a = ht_1d(VT_F32, 1003), r = ht_1d(VT_F32, 1003), s = ht_new(VT_F32, 0, NULL);
    ht_fill_random(&a, 0, 0);
    memcpy(r.block, a.block, 1003 * 4);
    *(float *)s.block = 1.25f;
    vt_foreach_args x = {0};
    x.op = VT_FOREACH_MUL;
    x.n = 1;
    x.out = &a.t;
    x.a = &a.t;
    x.scalar_tensor = &s.t;
    CHECK_OK(vt_foreach(&x));
    for (int i = 0; i < 1003; i++) CHECK(((float *)a.block)[i] == ((float *)r.block)[i] * 1.25f);
    ht_free(&a);
    ht_free(&r);
    ht_free(&s);
}

/* Entries that share memory run one after another, in list order, as CPU
 * PyTorch's per-tensor loop does: a tensor listed twice is scaled twice; the
 * second half of a list reads what the first half wrote. Large enough that
 * the work is split across threads. */
TEST(foreach_entries_sharing_memory_run_in_order) {
    const int64_t n = 3 * 32768 + 5;
    host_tensor t = ht_1d(VT_F32, 2 * n), r = ht_1d(VT_F32, 2 * n);
    ht_fill_random(&t, 0, 0);
    memcpy(r.block, t.block, (size_t)(2 * n) * 4);
    float *tv = t.block, *rv = r.block;
    vt_tensor twice[2] = {t.t, t.t};
    vt_foreach_args x = {0};
    x.op = VT_FOREACH_MUL;
    x.n = 2;
    x.out = x.a = twice;
    x.scalar = 0.75;
    CHECK_OK(vt_foreach(&x));
    for (int64_t i = 0; i < 2 * n; i++) CHECK(tv[i] == rv[i] * 0.75f * 0.75f);
    /* halves: [lo, hi] += [hi, lo] */
    memcpy(r.block, t.block, (size_t)(2 * n) * 4);
    vt_tensor halves[2] = {t.t, t.t}, swapped[2];
    halves[0].sizes[0] = halves[1].sizes[0] = n;
    halves[1].offset += n;
    swapped[0] = halves[1], swapped[1] = halves[0];
    x = (vt_foreach_args){0};
    x.op = VT_FOREACH_ADD;
    x.n = 2;
    x.out = x.a = halves;
    x.b = swapped;
    x.alpha = 1.0;
    CHECK_OK(vt_foreach(&x));
    for (int64_t i = 0; i < n; i++) {
        const float lo = rv[i] + rv[n + i];
        CHECK(tv[i] == lo && tv[n + i] == rv[n + i] + lo);
    }
    ht_free(&t);
    ht_free(&r);
}

/* CPU PyTorch's scalar rounding for BF16 lists: add/sub round the Scalar to
 * BF16; mul rounds it only in place (out aliases self); out of place it stays
 * float. */
TEST(foreach_bf16_scalar_rounding) {
    const int n = 100;
    host_tensor a = ht_1d(VT_BF16, n), o = ht_1d(VT_BF16, n), r = ht_1d(VT_BF16, n);
    ht_fill_random(&a, 0, 0);
    memcpy(r.block, a.block, (size_t)n * 2);
    const uint16_t *pa = r.block;
    const double s = 0.3; /* BF16: 0.30078125 */
    const float s16 = vt_bf16_to_f32(vt_f32_to_bf16((float)s));
    vt_foreach_args x = {0};
    x.n = 1;
    x.out = &o.t;
    x.a = &a.t;
    x.scalar = s;
    x.alpha = 1;
    x.op = VT_FOREACH_ADD;
    CHECK_OK(vt_foreach(&x));
    for (int i = 0; i < n; i++)
        CHECK(((uint16_t *)o.block)[i] == vt_f32_to_bf16(vt_bf16_to_f32(pa[i]) + s16));
    x.op = VT_FOREACH_MUL;
    CHECK_OK(vt_foreach(&x));
    for (int i = 0; i < n; i++)
        CHECK(((uint16_t *)o.block)[i] == vt_f32_to_bf16(vt_bf16_to_f32(pa[i]) * (float)s));
    x.out = &a.t; /* in place */
    CHECK_OK(vt_foreach(&x));
    for (int i = 0; i < n; i++)
        CHECK(((uint16_t *)a.block)[i] == vt_f32_to_bf16(vt_bf16_to_f32(pa[i]) * s16));
    ht_free(&a);
    ht_free(&o);
    ht_free(&r);
}

TEST(foreach_norm_and_max) {
    host_tensor a[3] = {ht_1d(VT_F32, 100003), ht_1d(VT_BF16, 17), ht_strided(VT_F32, 33, 2)};
    host_tensor o[3], r[3];
    vt_tensor ta[3], to[3], tr[3];
    for (int i = 0; i < 3; i++) {
        ht_fill_random(&a[i], 0, 0);
        o[i] = ht_new(VT_F32, 0, NULL);
        r[i] = ht_new(VT_F32, 0, NULL);
        ta[i] = a[i].t;
        to[i] = o[i].t;
        tr[i] = r[i].t;
    }
    const double ords[] = {2, 1, INFINITY, 0, 3};
    for (int k = 0; k < 6; k++) {
        vt_foreach_args x = {0};
        x.op = k == 5 ? VT_FOREACH_MAX : VT_FOREACH_NORM;
        x.scalar = k < 5 ? ords[k] : 0;
        x.n = 3;
        x.a = ta;
        x.out = to;
        CHECK_OK(vt_foreach(&x));
        x.out = tr;
        CHECK_OK(vt_ref_foreach(&x));
        for (int i = 0; i < 3; i++) CHECK(ht_compare("norm", &to[i], &tr[i], 1e-6) == 0);
    }
    for (int i = 0; i < 3; i++) {
        ht_free(&a[i]);
        ht_free(&o[i]);
        ht_free(&r[i]);
    }
}

TEST(foreach_errors) {
    host_tensor a = ht_1d(VT_F32, 4), b = ht_1d(VT_F32, 5), i32 = ht_1d(VT_I32, 4);
    vt_foreach_args x = {0};
    x.op = VT_FOREACH_ADD;
    x.n = 1;
    x.out = &a.t;
    x.a = &a.t;
    x.b = &b.t;
    CHECK_STATUS(vt_foreach(&x), VT_ERR_INVALID_ARGUMENT); /* shapes */
    x.b = &i32.t;
    CHECK_STATUS(vt_foreach(&x), VT_ERR_UNSUPPORTED);
    x.b = NULL;
    x.op = VT_FOREACH_ADDCMUL;
    CHECK_STATUS(vt_foreach(&x), VT_ERR_INVALID_ARGUMENT);
    x.op = (vt_foreach_op)99;
    CHECK_STATUS(vt_foreach(&x), VT_ERR_INVALID_ARGUMENT);
    x.op = VT_FOREACH_ADD;
    x.n = -1;
    CHECK_STATUS(vt_foreach(&x), VT_ERR_INVALID_ARGUMENT);
    x.n = 0;
    CHECK_OK(vt_foreach(&x));
    CHECK_STATUS(vt_foreach(NULL), VT_ERR_INVALID_ARGUMENT);
    ht_free(&a);
    ht_free(&b);
    ht_free(&i32);
}

typedef struct adam_set {
    host_tensor p[NT], g[NT], m[NT], v[NT], mx[NT], st[NT];
    vt_tensor tp[NT], tg[NT], tm[NT], tv[NT], tmx[NT], tst[NT];
} adam_set;

static void make_set(adam_set *S, vt_dtype dt, int64_t base, uint64_t seed) {
    rng_state = seed;
    for (int i = 0; i < NT; i++) {
        int64_t n = base + 13 * i;
        host_tensor *hs[5] = {&S->p[i], &S->g[i], &S->m[i], &S->v[i], &S->mx[i]};
        vt_tensor *ts[5] = {&S->tp[i], &S->tg[i], &S->tm[i], &S->tv[i], &S->tmx[i]};
        for (int k = 0; k < 5; k++) {
            *hs[k] = ht_1d(dt, n);
            ht_fill_random(hs[k], 0, 0);
            if (k >= 3) { /* second moments are non-negative */
                for (int64_t e = 0; e < n; e++) {
                    double d;
                    vt_convert(dt, (char *)hs[k]->block + e * (int64_t)vt_dtype_size(dt), 1, VT_F64, &d, 1, 1);
                    d = fabs(d);
                    vt_convert(VT_F64, &d, 1, dt, (char *)hs[k]->block + e * (int64_t)vt_dtype_size(dt), 1, 1);
                }
            }
            *ts[k] = hs[k]->t;
        }
        S->st[i] = ht_new(VT_F32, 0, NULL);
        *(float *)S->st[i].block = 3.0f;
        S->tst[i] = S->st[i].t;
    }
}

static void free_set(adam_set *S) {
    for (int i = 0; i < NT; i++) {
        ht_free(&S->p[i]);
        ht_free(&S->g[i]);
        ht_free(&S->m[i]);
        ht_free(&S->v[i]);
        ht_free(&S->mx[i]);
        ht_free(&S->st[i]);
    }
}

static void compare_sets(adam_set *A, adam_set *B, const char *what) {
    for (int i = 0; i < NT; i++) {
        CHECK_MSG(ht_compare(what, &A->tp[i], &B->tp[i], -1) == 0, "%s param", what);
        CHECK_MSG(ht_compare(what, &A->tg[i], &B->tg[i], -1) == 0, "%s grad", what);
        CHECK_MSG(ht_compare(what, &A->tm[i], &B->tm[i], -1) == 0, "%s m", what);
        CHECK_MSG(ht_compare(what, &A->tv[i], &B->tv[i], -1) == 0, "%s v", what);
        CHECK_MSG(ht_compare(what, &A->tmx[i], &B->tmx[i], -1) == 0, "%s mx", what);
    }
}

TEST(fused_adam_sgd_match_reference) {
    static const vt_dtype dts[] = {VT_F32, VT_BF16, VT_F16};
    static const int64_t bases[] = {0, 1, 31, 20000};
    host_tensor gs = ht_new(VT_F32, 0, NULL);
    *(float *)gs.block = 2.0f;
    unsigned masks[] = {vt_isa_available(), VT_ISA_AVX2, 0}; /* AVX2 too where AVX-512 is best */
    for (int mi = 0; mi < 3; mi++) {
        if ((masks[mi] & vt_isa_available()) != masks[mi]) continue;
        vt_isa_force(masks[mi]);
        for (int d = 0; d < 3; d++)
            for (int b = 0; b < 4; b++)
                for (int variant = 0; variant < 4; variant++) {
                    adam_set A, B;
                    make_set(&A, dts[d], bases[b], 77 + variant);
                    make_set(&B, dts[d], bases[b], 77 + variant);
                    vt_fused_adam_args x = {0};
                    x.n = NT;
                    x.lr = 1e-3;
                    x.beta1 = variant == 3 ? 0.3 : 0.9;
                    x.beta2 = 0.999;
                    x.weight_decay = variant == 1 ? 0 : 0.01;
                    x.eps = 1e-8;
                    x.adamw = variant & 1;
                    x.amsgrad = variant == 2;
                    x.maximize = variant == 3;
                    x.grad_scale = variant == 1 ? &gs.t : NULL;
                    x.params = A.tp, x.grads = A.tg, x.exp_avgs = A.tm, x.exp_avg_sqs = A.tv;
                    x.max_exp_avg_sqs = A.tmx, x.steps = A.tst;
                    CHECK_OK(vt_fused_adam(&x));
                    x.params = B.tp, x.grads = B.tg, x.exp_avgs = B.tm, x.exp_avg_sqs = B.tv;
                    x.max_exp_avg_sqs = B.tmx, x.steps = B.tst;
                    CHECK_OK(vt_ref_fused_adam(&x));
                    compare_sets(&A, &B, "adam");
                    vt_fused_sgd_args y = {0};
                    y.n = NT;
                    y.lr = 0.1;
                    y.momentum = variant == 0 ? 0 : 0.9;
                    y.dampening = variant == 2 ? 0.1 : 0;
                    y.weight_decay = 0.01;
                    y.nesterov = variant == 3;
                    y.is_first_step = variant == 1;
                    y.grad_scale = variant == 2 ? &gs.t : NULL;
                    y.params = A.tp, y.grads = A.tg, y.momentum_buffers = A.tm;
                    CHECK_OK(vt_fused_sgd(&y));
                    y.params = B.tp, y.grads = B.tg, y.momentum_buffers = B.tm;
                    CHECK_OK(vt_ref_fused_sgd(&y));
                    compare_sets(&A, &B, "sgd");
                    free_set(&A);
                    free_set(&B);
                }
    }
    vt_isa_force(vt_isa_default());
    ht_free(&gs);
}

TEST(fused_errors_and_found_inf) {
    adam_set A;
    make_set(&A, VT_F32, 8, 5);
    host_tensor fi = ht_new(VT_F32, 0, NULL), before = ht_1d(VT_F32, 8);
    *(float *)fi.block = 1.0f;
    memcpy(before.block, A.p[0].block, 8 * 4);
    vt_fused_adam_args x = {0};
    x.n = NT;
    x.lr = 1e-3, x.beta1 = 0.9, x.beta2 = 0.999, x.eps = 1e-8;
    x.params = A.tp, x.grads = A.tg, x.exp_avgs = A.tm, x.exp_avg_sqs = A.tv, x.steps = A.tst;
    x.found_inf = &fi.t;
    CHECK_OK(vt_fused_adam(&x));
    CHECK(memcmp(before.block, A.p[0].block, 8 * 4) == 0);
    x.found_inf = NULL;
    x.amsgrad = 1; /* no max_exp_avg_sqs */
    CHECK_STATUS(vt_fused_adam(&x), VT_ERR_INVALID_ARGUMENT);
    x.amsgrad = 0;
    vt_tensor bad = A.tg[0];
    bad.sizes[0] = 3;
    vt_tensor gl[NT];
    memcpy(gl, A.tg, sizeof gl);
    gl[0] = bad;
    x.grads = gl;
    CHECK_STATUS(vt_fused_adam(&x), VT_ERR_INVALID_ARGUMENT);
    vt_fused_sgd_args y = {0};
    y.n = NT;
    y.momentum = 0.9;
    y.params = A.tp;
    y.grads = A.tg;
    CHECK_STATUS(vt_fused_sgd(&y), VT_ERR_INVALID_ARGUMENT);
    free_set(&A);
    ht_free(&fi);
    ht_free(&before);
}

TEST(foreach_queued_op) {
    CHECK_OK(vt_init());
    int64_t n = 1000;
    void *mem[2];
    CHECK_OK(vt_hbm_alloc(0, (size_t)n * 4, &mem[0]));
    CHECK_OK(vt_hbm_alloc(0, (size_t)n * 4, &mem[1]));
    vt_tensor t[2];
    for (int i = 0; i < 2; i++) {
        memset(&t[i], 0, sizeof t[i]);
        t[i].data = mem[i];
        t[i].dtype = VT_F32;
        t[i].ndim = 1;
        t[i].sizes[0] = n;
        t[i].strides[0] = 1;
        for (int64_t e = 0; e < n; e++) ((float *)mem[i])[e] = (float)e;
    }
    vt_foreach_args x = {0};
    x.op = VT_FOREACH_MUL;
    x.n = 2;
    x.out = t;
    x.a = t;
    x.scalar = 2.0;
    CHECK_OK(vt_op_foreach(0, "test_foreach", &x));
    memset(t, 0, sizeof t); /* the command holds its own copy */
    CHECK_OK(vt_synchronize(0));
    CHECK(((float *)mem[1])[999] == 1998.0f);
    x.out = NULL;
    CHECK_STATUS(vt_op_foreach(0, "test_foreach", &x), VT_ERR_INVALID_ARGUMENT);
    vt_hbm_free(0, mem[0]);
    vt_hbm_free(0, mem[1]);
}
