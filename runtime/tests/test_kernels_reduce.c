/* test_kernels_reduce.c — vt_reduce, vt_reduce_arg and vt_scan against the
 * scalar references: every op and dtype class over full, last, first,
 * middle and multiple dims at awkward sizes, non-contiguous operands,
 * specials, empty extents, thread-count and ISA independence, the queued
 * ops and their errors. */

#include "test_kernels_util.h"

/* ------------------------------------------------------------ helpers */

static int64_t elem_off(const vt_tensor *t, int64_t li) {
    int64_t off = t->offset;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (li % t->sizes[d]) * t->strides[d];
        li /= t->sizes[d];
    }
    return off;
}

static double get_d(const vt_tensor *t, int64_t li) {
    double v;
    vt_convert(t->dtype, (const char *)t->data + elem_off(t, li) * (int64_t)vt_dtype_size(t->dtype), 1, VT_F64, &v, 1,
               1);
    return v;
}

static void set_d(const vt_tensor *t, int64_t li, double v) {
    vt_convert(VT_F64, &v, 1, t->dtype, (char *)t->data + elem_off(t, li) * (int64_t)vt_dtype_size(t->dtype), 1, 1);
}

/* Input of the given shape: layout 0 contiguous, 1 transposed (dims in
 * reverse memory order), 2 strided (every other element, offset 3). */
static host_tensor make_input(vt_dtype dt, int nd, const int64_t *sizes, int layout) {
    host_tensor h;
    if (layout == 1 && nd > 1) {
        int64_t rev[VT_MAX_DIMS];
        for (int d = 0; d < nd; d++) rev[d] = sizes[nd - 1 - d];
        h = ht_new(dt, nd, rev);
        int64_t st[VT_MAX_DIMS];
        for (int d = 0; d < nd; d++) st[d] = h.t.strides[nd - 1 - d];
        for (int d = 0; d < nd; d++) h.t.sizes[d] = sizes[d], h.t.strides[d] = st[d];
    } else if (layout == 2) {
        int64_t n = 1;
        for (int d = 0; d < nd; d++) n *= sizes[d];
        h = ht_1d(dt, 2 * n + 4);
        h.t.ndim = nd;
        h.t.offset = 3;
        int64_t st = 2;
        for (int d = nd - 1; d >= 0; d--) h.t.sizes[d] = sizes[d], h.t.strides[d] = st, st *= sizes[d];
    } else {
        h = ht_new(dt, nd, sizes);
    }
    return h;
}

static host_tensor make_out(vt_dtype dt, int nd, const int64_t *in_sizes, uint64_t mask, int strided) {
    int64_t s[VT_MAX_DIMS] = {0};
    for (int d = 0; d < nd; d++) s[d] = (mask >> d) & 1 ? 1 : in_sizes[d];
    return make_input(dt, nd, s, strided ? 2 : 0);
}

/* Empty tensors are left alone: ht_block_elems counts their other dims. */
static void fill_rand(host_tensor *h, int specials, int nonzero) {
    if (vt_tensor_numel(&h->t) > 0) ht_fill_random(h, specials, nonzero);
}

static void fill_near_one(host_tensor *h) {
    int64_t n = vt_tensor_numel(&h->t) > 0 ? ht_block_elems(h) : 0;
    for (int64_t i = 0; i < n; i++) {
        double v = (1.0 + ((double)(next_u64() >> 11) * 0x1p-53 - 0.5) * 2e-3) * ((next_u64() & 1) ? 1 : -1);
        vt_convert(VT_F64, &v, 1, h->t.dtype, (char *)h->block + i * (int64_t)vt_dtype_size(h->t.dtype), 1, 1);
    }
}

static double eps_of(vt_dtype dt) {
    switch (dt) {
    case VT_BF16: return 0x1p-8;
    case VT_F16: return 0x1p-11;
    case VT_F32: return 0x1p-24;
    default: return 0x1p-53;
    }
}

static int64_t reduced_count(const vt_tensor *in, uint64_t mask) {
    int64_t r = 1;
    for (int d = 0; d < in->ndim; d++)
        if ((mask >> d) & 1) r *= in->sizes[d];
    return r;
}

static const char *op_names[] = {"sum", "mean", "prod", "amax", "amin", "any", "all", "var", "std", "norm", "lse"};

/* Error model: sums in the compute class (pairwise: grows with log2 of the
 * count, plus the 16 sequential adds of a lane) relative to the sum of
 * magnitudes, plus one rounding to out's dtype. */
static int64_t compare_reduce(vt_reduce_op op, double p, vt_dtype compute, const vt_tensor *in, uint64_t mask,
                              const vt_tensor *got, const vt_tensor *want, const vt_tensor *mag, const char *what) {
    int64_t n = vt_tensor_numel(got), bad = 0, R = reduced_count(in, mask);
    double ec = (compute == VT_F64 || op == VT_REDUCE_VAR || op == VT_REDUCE_STD) ? 0x1p-52 : 0x1p-23;
    double eo = eps_of(got->dtype) * 2, L = log2((double)R + 1) + 20;
    int exact = !vt_dtype_is_float(compute) || op == VT_REDUCE_AMAX || op == VT_REDUCE_AMIN ||
                op == VT_REDUCE_ANY || op == VT_REDUCE_ALL || (op == VT_REDUCE_NORM && (isinf(p) || p == 0));
    for (int64_t i = 0; i < n; i++) {
        double a = get_d(got, i), b = get_d(want, i), m = get_d(mag, i), tol;
        int ok;
        if (!vt_dtype_is_float(got->dtype) || exact) {
            ok = a == b || (isnan(a) && isnan(b));
        } else if (isnan(a) || isnan(b) || isinf(b)) {
            ok = (isnan(a) && isnan(b)) || a == b;
        } else {
            switch (op) {
            case VT_REDUCE_SUM: tol = ec * L * m; break;
            case VT_REDUCE_MEAN: tol = ec * L * m / (double)R; break;
            case VT_REDUCE_PROD: tol = ec * (double)R * 2 * fabs(b); break;
            case VT_REDUCE_NORM: tol = ec * L * 4 * fabs(b) * fmax(1.0, 1.0 / fabs(p)); break;
            case VT_REDUCE_LOGSUMEXP: tol = ec * L * 4 * (1 + fabs(b)); break;
            default: tol = 1e-12 * fabs(b); break; /* var, std: double both ways */
            }
            ok = fabs(a - b) <= tol + eo * fabs(b) + 1e-300;
        }
        if (!ok) {
            if (bad < 3)
                vt_test_fail(__FILE__, __LINE__, "%s: output %lld: got %.17g want %.17g (R=%lld)", what, (long long)i,
                             a, b, (long long)R);
            bad++;
        }
    }
    return bad;
}

/* Run op on in (already filled) into an out of the given layout and
 * compare with the reference. */
static void check_reduce(vt_reduce_op op, double p, vt_dtype compute, vt_dtype out_dt, host_tensor *in,
                         uint64_t mask, int out_strided, const char *layout) {
    int nd = in->t.ndim;
    host_tensor out = make_out(out_dt, nd, in->t.sizes, mask, out_strided);
    host_tensor ref = make_out(out_dt, nd, in->t.sizes, mask, 0);
    host_tensor mag = make_out(VT_F64, nd, in->t.sizes, mask, 0);
    char what[200];
    snprintf(what, sizeof what, "%s(p=%g) in=%s compute=%s out=%s %s shape=[%lld,%lld,%lld] mask=%llu", op_names[op],
             p, vt_dtype_name(in->t.dtype), vt_dtype_name(compute), vt_dtype_name(out_dt), layout,
             (long long)in->t.sizes[0], (long long)(nd > 1 ? in->t.sizes[1] : 0),
             (long long)(nd > 2 ? in->t.sizes[2] : 0), (unsigned long long)mask);
    vt_status s1 = vt_reduce(op, &out.t, &in->t, mask, compute, p);
    vt_status s2 = vt_ref_reduce(op, &ref.t, &in->t, mask, compute, p);
    CHECK_MSG(s1 == s2, "%s: status %s vs ref %s (%s)", what, vt_status_string(s1), vt_status_string(s2),
              vt_last_error());
    if (s1 == VT_OK && s2 == VT_OK) {
        if (vt_dtype_is_float(compute) && (op == VT_REDUCE_SUM || op == VT_REDUCE_MEAN))
            CHECK_OK(vt_ref_reduce(VT_REDUCE_NORM, &mag.t, &in->t, mask, VT_F64, 1.0));
        CHECK(compare_reduce(op, p, compute, &in->t, mask, &out.t, &ref.t, &mag.t, what) == 0);
    }
    ht_free(&out);
    ht_free(&ref);
    ht_free(&mag);
}

typedef struct shape_case {
    int nd;
    int64_t sizes[3];
    uint64_t mask;
} shape_case;

/* full, last dim, first dim, middle dim, several dims, scalar, empties */
static const shape_case shapes[] = {
    {1, {0}, 1},          {1, {1}, 1},          {1, {15}, 1},           {1, {17}, 1},        {1, {33}, 1},
    {1, {257}, 1},        {1, {1000}, 1},       {1, {100003}, 1},       {2, {3, 1000}, 2},   {2, {17, 33}, 2},
    {2, {257, 15}, 2},    {2, {40, 2500}, 2},   {2, {1000, 3}, 1},      {2, {33, 17}, 1},    {2, {2500, 40}, 1},
    {2, {100003, 2}, 1},  {2, {15, 257}, 1},    {3, {5, 33, 17}, 2},    {3, {7, 257, 3}, 5}, {3, {4, 5, 6}, 3},
    {3, {17, 3, 33}, 6},  {3, {3, 4, 5}, 0},    {0, {0}, 0},            {2, {0, 5}, 1},      {2, {5, 0}, 2},
    {2, {0, 5}, 2},       {2, {200, 1}, 1},     {3, {33, 1, 1000}, 5},
};
#define N_SHAPES (sizeof shapes / sizeof shapes[0])

static int big(const shape_case *c) {
    int64_t n = 1;
    for (int d = 0; d < c->nd; d++) n *= c->sizes[d];
    return n > 50000;
}

/* ------------------------------------------------------------ vt_reduce */

typedef struct op_case {
    vt_reduce_op op;
    double p;
} op_case;

static const op_case float_ops[] = {
    {VT_REDUCE_SUM, 0},  {VT_REDUCE_MEAN, 0},      {VT_REDUCE_PROD, 0},      {VT_REDUCE_AMAX, 0},
    {VT_REDUCE_AMIN, 0}, {VT_REDUCE_ANY, 0},       {VT_REDUCE_ALL, 0},       {VT_REDUCE_VAR, 1},
    {VT_REDUCE_VAR, 0},  {VT_REDUCE_STD, 1},       {VT_REDUCE_NORM, 2},      {VT_REDUCE_NORM, 1},
    {VT_REDUCE_NORM, 0}, {VT_REDUCE_NORM, INFINITY}, {VT_REDUCE_NORM, -INFINITY}, {VT_REDUCE_NORM, 3.5},
    {VT_REDUCE_NORM, 0.5}, {VT_REDUCE_LOGSUMEXP, 0},
};

/* Powers of 1e30 overflow float as they do in PyTorch's float kernels,
 * while the fp64 reference keeps them: those norms get ordinary values. */
static int specials_ok(const op_case *oc) {
    return oc->op != VT_REDUCE_NORM || oc->p == 0 || oc->p == 1 || isinf(oc->p);
}

static void run_float_op(const op_case *oc, vt_dtype in_dt, vt_dtype compute, int all_shapes) {
    vt_dtype out_dt = (oc->op == VT_REDUCE_ANY || oc->op == VT_REDUCE_ALL) ? VT_BOOL : in_dt;
    vt_dtype comp = (oc->op == VT_REDUCE_ANY || oc->op == VT_REDUCE_ALL) ? VT_BOOL : compute;
    for (size_t k = 0; k < N_SHAPES; k++) {
        const shape_case *c = &shapes[k];
        if (big(c) && !all_shapes) continue;
        for (int layout = 0; layout < 3; layout++) {
            if (layout && (big(c) || c->nd < 2)) continue; /* layouts on the small multi-dim shapes */
            if (layout == 1 && (in_dt == VT_BF16 || in_dt == VT_F16)) continue;
            host_tensor in = make_input(in_dt, c->nd, c->sizes, layout);
            if (oc->op == VT_REDUCE_PROD) fill_near_one(&in);
            else fill_rand(&in, specials_ok(oc) && (oc->op != VT_REDUCE_SUM || k % 2), 0);
            check_reduce(oc->op, oc->p, comp, out_dt, &in, c->mask, layout == 2,
                         layout == 0 ? "contiguous" : layout == 1 ? "transposed" : "strided");
            ht_free(&in);
        }
    }
}

TEST(kernels_reduce_float_ops) {
    for (size_t i = 0; i < sizeof float_ops / sizeof float_ops[0]; i++) {
        vt_reduce_op op = float_ops[i].op;
        int big_ok = op == VT_REDUCE_SUM || op == VT_REDUCE_AMAX || op == VT_REDUCE_VAR ||
                     op == VT_REDUCE_LOGSUMEXP || (op == VT_REDUCE_NORM && float_ops[i].p == 2);
        run_float_op(&float_ops[i], VT_F32, VT_F32, big_ok);
        run_float_op(&float_ops[i], VT_F64, VT_F64, i < 3);
        run_float_op(&float_ops[i], VT_BF16, VT_F32, 0);
        run_float_op(&float_ops[i], VT_F16, VT_F32, 0);
    }
}

TEST(kernels_reduce_int_ops) {
    static const vt_dtype dts[] = {VT_I8, VT_U8, VT_I16, VT_I32, VT_I64, VT_BOOL};
    static const vt_reduce_op ops[] = {VT_REDUCE_SUM, VT_REDUCE_PROD, VT_REDUCE_AMAX, VT_REDUCE_AMIN, VT_REDUCE_ANY,
                                       VT_REDUCE_ALL};
    for (size_t t = 0; t < sizeof dts / sizeof dts[0]; t++)
        for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
            vt_reduce_op op = ops[o];
            vt_dtype compute = op <= VT_REDUCE_PROD ? VT_I64 : op >= VT_REDUCE_ANY ? VT_BOOL : dts[t];
            vt_dtype out_dt = op <= VT_REDUCE_PROD ? VT_I64 : op >= VT_REDUCE_ANY ? VT_BOOL : dts[t];
            for (size_t k = 0; k < N_SHAPES; k++) {
                const shape_case *c = &shapes[k];
                if (big(c) && t != 3) continue;
                for (int layout = 0; layout < (c->nd > 1 ? 3 : 1); layout++) {
                    host_tensor in = make_input(dts[t], c->nd, c->sizes, layout);
                    fill_rand(&in, 0, 0);
                    check_reduce(op, 0, compute, out_dt, &in, c->mask, layout == 2, "int");
                    ht_free(&in);
                }
            }
        }
    /* Mixed: integer input reduced to a float output (a mean the binding
     * computes in float), float input with bool compute (any/all). */
    int64_t s[2] = {33, 257};
    host_tensor in = make_input(VT_I32, 2, s, 0);
    fill_rand(&in, 0, 0);
    check_reduce(VT_REDUCE_MEAN, 0, VT_F64, VT_F32, &in, 2, 0, "int->f64 mean");
    check_reduce(VT_REDUCE_SUM, 0, VT_I32, VT_I32, &in, 1, 1, "i32 compute sum");
    ht_free(&in);
}

/* Hand-written cases for specials and identities, against PyTorch's results. */
static double reduce_1d(vt_reduce_op op, double p, const double *v, int64_t n) {
    host_tensor in = ht_1d(VT_F32, n), out = ht_1d(VT_F32, 1);
    for (int64_t i = 0; i < n; i++) set_d(&in.t, i, v[i]);
    vt_status s = vt_reduce(op, &out.t, &in.t, 1, VT_F32, p);
    double r = s == VT_OK ? get_d(&out.t, 0) : -12345.0;
    ht_free(&in);
    ht_free(&out);
    return r;
}

TEST(kernels_reduce_specials) {
    double nan_mid[] = {1, 2, NAN, 5, -INFINITY};
    CHECK(isnan(reduce_1d(VT_REDUCE_AMAX, 0, nan_mid, 5)));
    CHECK(isnan(reduce_1d(VT_REDUCE_AMIN, 0, nan_mid, 5)));
    CHECK(isnan(reduce_1d(VT_REDUCE_NORM, INFINITY, nan_mid, 5)));
    CHECK(reduce_1d(VT_REDUCE_NORM, 0, nan_mid, 5) == 5); /* NaN counts as nonzero */
    double ninf[] = {-INFINITY, -INFINITY, -INFINITY};
    CHECK(reduce_1d(VT_REDUCE_LOGSUMEXP, 0, ninf, 3) == -INFINITY);
    double pinf[] = {1, INFINITY, 3};
    CHECK(reduce_1d(VT_REDUCE_LOGSUMEXP, 0, pinf, 3) == INFINITY);
    double big_v[] = {1000, 1000};
    CHECK(fabs(reduce_1d(VT_REDUCE_LOGSUMEXP, 0, big_v, 2) - (1000 + log(2.0))) < 1e-3); /* no overflow */
    double one[] = {3};
    CHECK(isnan(reduce_1d(VT_REDUCE_VAR, 1, one, 1)));
    CHECK(reduce_1d(VT_REDUCE_VAR, 0, one, 1) == 0);
    double two[] = {1, 3};
    CHECK(reduce_1d(VT_REDUCE_VAR, 2, two, 2) == INFINITY); /* N - correction = 0, M2 > 0 */
    CHECK(reduce_1d(VT_REDUCE_VAR, 1, two, 2) == 2);
    CHECK(reduce_1d(VT_REDUCE_STD, 1, two, 2) == (double)sqrtf(2.0f));
    CHECK(reduce_1d(VT_REDUCE_NORM, -INFINITY, two, 2) == 1);
    double with_inf[] = {1, INFINITY};
    CHECK(isnan(reduce_1d(VT_REDUCE_VAR, 1, with_inf, 2)));
    /* empty reductions */
    CHECK(reduce_1d(VT_REDUCE_SUM, 0, NULL, 0) == 0);
    CHECK(reduce_1d(VT_REDUCE_PROD, 0, NULL, 0) == 1);
    CHECK(isnan(reduce_1d(VT_REDUCE_MEAN, 0, NULL, 0)));
    CHECK(isnan(reduce_1d(VT_REDUCE_VAR, 1, NULL, 0)));
    CHECK(isnan(reduce_1d(VT_REDUCE_STD, 0, NULL, 0)));
    CHECK(reduce_1d(VT_REDUCE_ANY, 0, NULL, 0) == 0);
    CHECK(reduce_1d(VT_REDUCE_ALL, 0, NULL, 0) == 1);
    CHECK(reduce_1d(VT_REDUCE_LOGSUMEXP, 0, NULL, 0) == -INFINITY);
    CHECK(reduce_1d(VT_REDUCE_NORM, 2, NULL, 0) == 0);
    CHECK(reduce_1d(VT_REDUCE_NORM, INFINITY, NULL, 0) == 0);
    host_tensor e = ht_1d(VT_F32, 0), o = ht_1d(VT_F32, 1);
    CHECK_STATUS(vt_reduce(VT_REDUCE_AMAX, &o.t, &e.t, 1, VT_F32, 0), VT_ERR_INDEX);
    CHECK(strcmp(vt_last_error(), "amax(): Expected reduction dim 0 to have non-zero size.") == 0);
    CHECK_STATUS(vt_reduce(VT_REDUCE_AMIN, &o.t, &e.t, 1, VT_F32, 0), VT_ERR_INDEX);
    CHECK_STATUS(vt_reduce(VT_REDUCE_NORM, &o.t, &e.t, 1, VT_F32, -1), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_reduce(VT_REDUCE_NORM, &o.t, &e.t, 1, VT_F32, -INFINITY), VT_ERR_INVALID_ARGUMENT);
    ht_free(&e);
    ht_free(&o);
    /* NaN in one column of a column reduction (lanes) and of a row reduction */
    int64_t s[2] = {300, 40};
    host_tensor m = ht_new(VT_F32, 2, s);
    for (int64_t i = 0; i < 300 * 40; i++) ((float *)m.t.data)[i] = (float)(i % 7);
    ((float *)m.t.data)[150 * 40 + 5] = NAN;
    int64_t cs[2] = {1, 40}, rs[2] = {300, 1};
    host_tensor cm = ht_new(VT_F32, 2, cs), rm = ht_new(VT_F32, 2, rs);
    CHECK_OK(vt_reduce(VT_REDUCE_AMAX, &cm.t, &m.t, 1, VT_F32, 0));
    CHECK_OK(vt_reduce(VT_REDUCE_SUM, &rm.t, &m.t, 2, VT_F32, 0));
    CHECK(isnan(((float *)cm.t.data)[5]) && ((float *)cm.t.data)[4] == 6);
    CHECK(isnan(((float *)rm.t.data)[150]) && !isnan(((float *)rm.t.data)[149]));
    ht_free(&m);
    ht_free(&cm);
    ht_free(&rm);
}

/* Float sums stay close to the exact sum: n copies of 0.1f and a sum of
 * 1..n whose exact value is known. */
TEST(kernels_reduce_sum_accuracy) {
    int64_t n = 1 << 22;
    host_tensor in = ht_1d(VT_F32, n), out = ht_1d(VT_F32, 1);
    for (int64_t i = 0; i < n; i++) ((float *)in.t.data)[i] = 0.1f;
    CHECK_OK(vt_reduce(VT_REDUCE_SUM, &out.t, &in.t, 1, VT_F32, 0));
    double exact = (double)0.1f * (double)n, got = ((float *)out.t.data)[0];
    CHECK_MSG(fabs(got - exact) <= exact * 0x1p-24 * 8, "sum of 0.1f: %.9g vs %.9g", got, exact);
    CHECK_OK(vt_reduce(VT_REDUCE_MEAN, &out.t, &in.t, 1, VT_F32, 0));
    CHECK(fabs(((float *)out.t.data)[0] - 0.1f) <= 0.1f * 0x1p-24 * 8);
    ht_free(&in);
    ht_free(&out);
}

/* Results depend on shapes only: the same call forced inline (from inside
 * a pool task, where vt_parallel_for never fans out) and on the portable
 * loops gives the same bits. */
typedef struct inline_call {
    vt_reduce_op op;
    const vt_tensor *out, *in;
    uint64_t mask;
    double p;
    vt_status st;
} inline_call;

static void run_inline(void *ctx, int64_t b, int64_t e) {
    inline_call *c = ctx;
    (void)e;
    if (b == 0) c->st = vt_reduce(c->op, c->out, c->in, c->mask, VT_F32, c->p);
}

TEST(kernels_reduce_thread_and_isa_independent) {
    static const shape_case cases[] = {
        {1, {300007}, 1}, {2, {256, 1031}, 2}, {2, {1031, 256}, 1}, {2, {100001, 3}, 1}, {2, {5, 70003}, 2},
        {3, {16, 100, 129}, 5},
        /* rows of whole 256-value blocks side by side: several rows' blocks per kernel call */
        {2, {37, 512}, 2}, {2, {9, 768}, 2}, {2, {6, 1024}, 2}, {2, {5, 256}, 2},
        /* more rows than one call takes (64 blocks), ending in a part */
        {2, {150, 512}, 2}, {2, {67, 768}, 2}, {2, {70, 1024}, 2}, {2, {130, 256}, 2},
    };
    static const op_case ops[] = {{VT_REDUCE_SUM, 0}, {VT_REDUCE_AMAX, 0}, {VT_REDUCE_VAR, 1}, {VT_REDUCE_LOGSUMEXP, 0}};
    unsigned active = vt_isa_active();
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const shape_case *c = &cases[k];
        host_tensor in = make_input(VT_F32, c->nd, c->sizes, 0);
        fill_rand(&in, 0, 0);
        for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
            host_tensor a = make_out(VT_F32, c->nd, c->sizes, c->mask, 0);
            host_tensor b = make_out(VT_F32, c->nd, c->sizes, c->mask, 0);
            host_tensor p = make_out(VT_F32, c->nd, c->sizes, c->mask, 0);
            CHECK_OK(vt_reduce(ops[o].op, &a.t, &in.t, c->mask, VT_F32, ops[o].p));
            inline_call ic = {ops[o].op, &b.t, &in.t, c->mask, ops[o].p, VT_ERR_INTERNAL};
            vt_parallel_for(2, 1, run_inline, &ic);
            CHECK_OK(ic.st);
            vt_isa_force(0);
            CHECK_OK(vt_reduce(ops[o].op, &p.t, &in.t, c->mask, VT_F32, ops[o].p));
            if (vt_isa_available() & VT_ISA_AVX2) { /* the AVX2 loops too, wherever AVX-512 is best */
                host_tensor v = make_out(VT_F32, c->nd, c->sizes, c->mask, 0);
                vt_isa_force(VT_ISA_AVX2);
                CHECK_OK(vt_reduce(ops[o].op, &v.t, &in.t, c->mask, VT_F32, ops[o].p));
                CHECK(ht_compare("avx2 vs portable", &v.t, &p.t, -1) == 0);
                ht_free(&v);
            }
            vt_isa_force(active);
            char what[96];
            snprintf(what, sizeof what, "%s case %zu inline", op_names[ops[o].op], k);
            CHECK(ht_compare(what, &a.t, &b.t, -1) == 0);
            snprintf(what, sizeof what, "%s case %zu portable", op_names[ops[o].op], k);
            CHECK(ht_compare(what, &a.t, &p.t, -1) == 0);
            ht_free(&a);
            ht_free(&b);
            ht_free(&p);
        }
        ht_free(&in);
    }
}

/* A reduction fed by a source gives what it gives from memory, bit for bit,
 * for every op, geometry and layout; where vt_reduce_takes_source says so
 * it asks for every element exactly once, and it refuses two-pass ops and
 * inputs that are not dense. */
TEST(kernels_reduce_from_a_source) {
    static const shape_case cases[] = {
        {1, {3001}, 1},          {2, {256, 1031}, 2},  {2, {1031, 256}, 1}, {2, {1000, 8}, 2},
        {2, {7, 3}, 3},          {3, {13, 5, 1031}, 2}, {3, {13, 5, 1031}, 5}, {3, {40, 30, 9}, 4},
        {2, {100, 100}, 0},      {2, {5, 16700}, 1},   {2, {2, 140000}, 1}, {2, {40, 300}, 1},
        {2, {300, 257}, 1},      {2, {3, 16385}, 1},
        /* sums along rows, which from memory take their own walk (rows_sum_f) */
        {2, {300, 257}, 2},      {2, {5, 16700}, 2},   {3, {40, 30, 9}, 4}, {3, {7, 6, 2049}, 4},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int layout = 0; layout < 3; layout++) {
            const shape_case *c = &cases[k];
            host_tensor in = make_input(VT_F32, c->nd, c->sizes, layout);
            fill_rand(&in, 0, 0);
            const int64_t span = ht_block_elems(&in);
            int *reads = calloc((size_t)span, sizeof *reads);
            static const double norm_ps[] = {3, 0, 1, 2, INFINITY, -INFINITY};
            for (int run = 0; run < VT_REDUCE_OP_COUNT + 5; run++) { /* every op, then the norm at each other p */
                const int op = run < VT_REDUCE_OP_COUNT ? run : VT_REDUCE_NORM;
                const double p = op == VT_REDUCE_NORM ? norm_ps[run < VT_REDUCE_OP_COUNT ? 0 : run - VT_REDUCE_OP_COUNT + 1]
                                 : op == VT_REDUCE_VAR || op == VT_REDUCE_STD ? 1
                                                                              : 0;
                host_tensor a = make_out(VT_F32, c->nd, c->sizes, c->mask, 0);
                host_tensor b = make_out(VT_F32, c->nd, c->sizes, c->mask, 0);
                CHECK_OK(vt_reduce((vt_reduce_op)op, &a.t, &in.t, c->mask, VT_F32, p));
                memset(reads, 0, sizeof *reads * (size_t)span);
                mem_source ms = {.base = vt_base(&in.t), .es = 4, .reads = reads + in.t.offset, .strict = 1};
                const vt_source src = {mem_read, &ms};
                CHECK_OK(vt_reduce_run((vt_reduce_op)op, &b.t, &in.t, c->mask, VT_F32, p, &src));
                mem_source_release(&ms);
                char what[96];
                snprintf(what, sizeof what, "%s p %g case %zu layout %d", op_names[op], p, k, layout);
                CHECK(ht_compare(what, &a.t, &b.t, -1) == 0);
                CHECK_MSG(!ms.bad, "%s: a read of fewer than 1 or more than VT_SOURCE_MAX values", what);
                const int takes = vt_reduce_takes_source((vt_reduce_op)op, &b.t, &in.t, c->mask);
                const int two_pass = op == VT_REDUCE_VAR || op == VT_REDUCE_STD || op == VT_REDUCE_LOGSUMEXP;
                CHECK_MSG(!takes || (!two_pass && layout != 2), "%s: takes a source", what);
                if (takes) {
                    int64_t wrong = 0;
                    for (int64_t i = 0; i < vt_tensor_numel(&in.t); i++) {
                        int64_t off = 0, li = i;
                        for (int d = in.t.ndim - 1; d >= 0; d--)
                            off += li % in.t.sizes[d] * in.t.strides[d], li /= in.t.sizes[d];
                        wrong += __atomic_load_n(&ms.reads[off], __ATOMIC_RELAXED) != 1;
                    }
                    CHECK_MSG(wrong == 0, "%s: %lld elements not read exactly once", what, (long long)wrong);
                }
                ht_free(&a);
                ht_free(&b);
            }
            /* the contiguous one-pass reductions of everything do take one */
            if (layout == 0 && c->mask == (1ull << c->nd) - 1 && vt_tensor_numel(&in.t) >= VT_SOURCE_RUN) {
                host_tensor o = make_out(VT_F32, c->nd, c->sizes, c->mask, 0);
                CHECK(vt_reduce_takes_source(VT_REDUCE_SUM, &o.t, &in.t, c->mask));
                ht_free(&o);
            }
            free(reads);
            ht_free(&in);
        }
}

TEST(kernels_reduce_errors) {
    int64_t s[2] = {4, 5}, so[2] = {4, 1}, bad[2] = {4, 2};
    host_tensor in = ht_new(VT_F32, 2, s), out = ht_new(VT_F32, 2, so), wrong = ht_new(VT_F32, 2, bad);
    CHECK_STATUS(vt_reduce(VT_REDUCE_SUM, &out.t, &in.t, 1ull << 5, VT_F32, 0), VT_ERR_INDEX);
    CHECK_MSG(strcmp(vt_last_error(), "Dimension out of range (expected to be in range of [-2, 1], but got 5)") == 0,
              "%s", vt_last_error());
    CHECK_STATUS(vt_reduce(VT_REDUCE_SUM, &wrong.t, &in.t, 2, VT_F32, 0), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_reduce(VT_REDUCE_SUM, &out.t, &in.t, 1, VT_F32, 0), VT_ERR_INVALID_ARGUMENT); /* not keepdim */
    CHECK_STATUS(vt_reduce(VT_REDUCE_MEAN, &out.t, &in.t, 2, VT_I64, 0), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_reduce(VT_REDUCE_VAR, &out.t, &in.t, 2, VT_I32, 1), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_reduce(VT_REDUCE_OP_COUNT, &out.t, &in.t, 2, VT_F32, 0), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_reduce(VT_REDUCE_SUM, &out.t, &in.t, 2, (vt_dtype)99, 0), VT_ERR_INVALID_ARGUMENT);
    host_tensor sc = ht_new(VT_F32, 0, NULL), so0 = ht_new(VT_F32, 0, NULL);
    CHECK_OK(vt_reduce(VT_REDUCE_SUM, &so0.t, &sc.t, 1, VT_F32, 0)); /* dim 0 of a 0-dim tensor */
    CHECK_STATUS(vt_reduce(VT_REDUCE_SUM, &so0.t, &sc.t, 2, VT_F32, 0), VT_ERR_INDEX);
    ht_free(&in);
    ht_free(&out);
    ht_free(&wrong);
    ht_free(&sc);
    ht_free(&so0);
}

/* ------------------------------------------------------------ vt_reduce_arg */

static void check_arg(int is_max, host_tensor *in, int dim, int with_values, int strided) {
    int nd = in->t.ndim, d = dim < 0 ? dim + (nd ? nd : 1) : dim;
    uint64_t mask = nd ? 1ull << d : 0;
    host_tensor v = make_out(in->t.dtype, nd, in->t.sizes, mask, strided), i = make_out(VT_I64, nd, in->t.sizes, mask, strided);
    host_tensor rv = make_out(in->t.dtype, nd, in->t.sizes, mask, 0), ri = make_out(VT_I64, nd, in->t.sizes, mask, 0);
    CHECK_OK(vt_reduce_arg(is_max, with_values ? &v.t : NULL, &i.t, &in->t, dim));
    CHECK_OK(vt_ref_reduce_arg(is_max, &rv.t, &ri.t, &in->t, dim));
    char what[128];
    snprintf(what, sizeof what, "arg%s %s dim=%d nd=%d", is_max ? "max" : "min", vt_dtype_name(in->t.dtype), dim, nd);
    CHECK(ht_compare(what, &i.t, &ri.t, -1) == 0);
    if (with_values) CHECK(ht_compare(what, &v.t, &rv.t, 0) == 0);
    ht_free(&v);
    ht_free(&i);
    ht_free(&rv);
    ht_free(&ri);
}

/* Few distinct values, so ties are everywhere; NaN in some lines. */
static void fill_ties(host_tensor *h, int nans) {
    int64_t n = vt_tensor_numel(&h->t) > 0 ? ht_block_elems(h) : 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = next_u64();
        double v = (double)(r % 5);
        if (nans && vt_dtype_is_float(h->t.dtype) && r % 97 == 0) v = NAN;
        vt_convert(VT_F64, &v, 1, h->t.dtype, (char *)h->block + i * (int64_t)vt_dtype_size(h->t.dtype), 1, 1);
    }
}

TEST(kernels_reduce_arg) {
    static const vt_dtype dts[] = {VT_F32, VT_BF16, VT_F16, VT_F64, VT_I8, VT_U8, VT_I16, VT_I32, VT_I64, VT_BOOL};
    static const shape_case cases[] = {
        {1, {1}, 0}, {1, {17}, 0}, {1, {100003}, 0}, {2, {33, 257}, 1}, {2, {257, 33}, 0}, {2, {1000, 3}, -1},
        {3, {5, 17, 33}, 1}, {3, {5, 17, 100}, -3}, {0, {0}, 0}, {2, {0, 4}, 1},
    };
    for (size_t t = 0; t < sizeof dts / sizeof dts[0]; t++)
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            const shape_case *c = &cases[k];
            if (big(c) && t != 0) continue;
            for (int layout = 0; layout < (c->nd > 1 ? 3 : 1); layout++) {
                host_tensor in = make_input(dts[t], c->nd, c->sizes, layout);
                if (k % 2) fill_ties(&in, 1);
                else fill_rand(&in, 1, 0);
                check_arg(1, &in, (int)c->mask, 1, layout == 2);
                check_arg(0, &in, (int)c->mask, layout != 1, 0);
                ht_free(&in);
            }
        }
    /* explicit ties and NaN: first index wins */
    double v[] = {1, 3, 3, NAN, 3, NAN};
    host_tensor in = ht_1d(VT_F32, 6), idx = ht_1d(VT_I64, 1), val = ht_1d(VT_F32, 1);
    for (int i = 0; i < 6; i++) set_d(&in.t, i, v[i]);
    CHECK_OK(vt_reduce_arg(1, &val.t, &idx.t, &in.t, 0));
    CHECK(((int64_t *)idx.t.data)[0] == 3 && isnan(((float *)val.t.data)[0]));
    in.t.sizes[0] = 3;
    CHECK_OK(vt_reduce_arg(1, &val.t, &idx.t, &in.t, -1));
    CHECK(((int64_t *)idx.t.data)[0] == 1 && ((float *)val.t.data)[0] == 3);
    CHECK_OK(vt_reduce_arg(0, &val.t, &idx.t, &in.t, 0));
    CHECK(((int64_t *)idx.t.data)[0] == 0);
    /* errors */
    CHECK_STATUS(vt_reduce_arg(1, NULL, &idx.t, &in.t, 1), VT_ERR_INDEX);
    CHECK_MSG(strcmp(vt_last_error(), "Dimension out of range (expected to be in range of [-1, 0], but got 1)") == 0,
              "%s", vt_last_error());
    CHECK_STATUS(vt_reduce_arg(1, NULL, &val.t, &in.t, 0), VT_ERR_INVALID_ARGUMENT); /* indices not int64 */
    in.t.sizes[0] = 0;
    CHECK_STATUS(vt_reduce_arg(1, NULL, &idx.t, &in.t, 0), VT_ERR_INDEX);
    CHECK(strcmp(vt_last_error(), "argmax(): Expected reduction dim 0 to have non-zero size.") == 0);
    ht_free(&in);
    ht_free(&idx);
    ht_free(&val);
}

/* ------------------------------------------------------------ vt_scan */

static void check_scan(vt_scan_op op, vt_dtype compute, vt_dtype out_dt, host_tensor *in, int dim, int out_layout) {
    host_tensor out = make_input(out_dt, in->t.ndim, in->t.sizes, out_layout);
    host_tensor ref = make_input(out_dt, in->t.ndim, in->t.sizes, 0);
    CHECK_OK(vt_scan(op, &out.t, &in->t, dim, compute));
    CHECK_OK(vt_ref_scan(op, &ref.t, &in->t, dim, compute));
    char what[128];
    snprintf(what, sizeof what, "%s %s compute=%s dim=%d nd=%d", vt_scan_op_name(op), vt_dtype_name(in->t.dtype),
             vt_dtype_name(compute), dim, in->t.ndim);
    CHECK(ht_compare(what, &out.t, &ref.t, -1) == 0); /* same order, same carry type: same bits */
    ht_free(&out);
    ht_free(&ref);
}

TEST(kernels_scan) {
    static const shape_case cases[] = {
        {1, {0}, 0}, {1, {1}, 0}, {1, {17}, 0}, {1, {100003}, 0}, {2, {33, 257}, 1}, {2, {257, 33}, 0},
        {2, {1000, 3}, -2}, {3, {5, 17, 33}, 1}, {3, {3, 4, 1000}, 2}, {0, {0}, 0}, {2, {0, 4}, 1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const shape_case *c = &cases[k];
        for (int layout = 0; layout < (c->nd > 1 ? 3 : 1); layout++) {
            host_tensor f = make_input(VT_F32, c->nd, c->sizes, layout);
            fill_rand(&f, 1, 0);
            for (int op = 0; op < 3; op++) check_scan((vt_scan_op)op, VT_F32, VT_F32, &f, (int)c->mask, layout ? 2 : 0);
            ht_free(&f);
            if (big(c)) continue;
            host_tensor b = make_input(VT_BF16, c->nd, c->sizes, layout);
            fill_rand(&b, 1, 0);
            check_scan(VT_SCAN_CUMSUM, VT_F32, VT_BF16, &b, (int)c->mask, layout);
            check_scan(VT_SCAN_CUMSUM, VT_BF16, VT_BF16, &b, (int)c->mask, layout); /* bf16 lines read in place */
            check_scan(VT_SCAN_LOGCUMSUMEXP, VT_F32, VT_BF16, &b, (int)c->mask, 0);
            ht_free(&b);
            host_tensor d = make_input(VT_F64, c->nd, c->sizes, layout);
            fill_near_one(&d);
            check_scan(VT_SCAN_CUMPROD, VT_F64, VT_F64, &d, (int)c->mask, layout);
            ht_free(&d);
            host_tensor i = make_input(VT_I32, c->nd, c->sizes, layout);
            fill_rand(&i, 0, 0);
            check_scan(VT_SCAN_CUMSUM, VT_I64, VT_I64, &i, (int)c->mask, layout);
            check_scan(VT_SCAN_CUMPROD, VT_I64, VT_I64, &i, (int)c->mask, 0);
            ht_free(&i);
            host_tensor u = make_input(VT_BOOL, c->nd, c->sizes, layout);
            fill_rand(&u, 0, 0);
            check_scan(VT_SCAN_CUMSUM, VT_I64, VT_I64, &u, (int)c->mask, layout);
            ht_free(&u);
        }
    }
    /* in place, NaN and infinities in logcumsumexp */
    double v[] = {-INFINITY, -INFINITY, 1, INFINITY, 2, NAN, 3};
    host_tensor x = ht_1d(VT_F32, 7), y = ht_1d(VT_F32, 7);
    for (int i = 0; i < 7; i++) set_d(&x.t, i, v[i]);
    CHECK_OK(vt_scan(VT_SCAN_LOGCUMSUMEXP, &y.t, &x.t, 0, VT_F32));
    CHECK(get_d(&y.t, 0) == -INFINITY && get_d(&y.t, 1) == -INFINITY && get_d(&y.t, 2) == 1);
    CHECK(get_d(&y.t, 3) == INFINITY && get_d(&y.t, 4) == INFINITY && isnan(get_d(&y.t, 5)) && isnan(get_d(&y.t, 6)));
    for (int i = 0; i < 7; i++) set_d(&x.t, i, i + 1);
    CHECK_OK(vt_scan(VT_SCAN_CUMSUM, &x.t, &x.t, -1, VT_F32));
    CHECK(get_d(&x.t, 6) == 28 && get_d(&x.t, 2) == 6);
    /* in place over lines that go eight at a time (41 of them: a partial
     * group), specials included: the reference's bits on a copy */
    {
        int64_t sz[2] = {41, 300};
        for (int dt = 0; dt < 2; dt++) {
            vt_dtype t = dt ? VT_BF16 : VT_F32;
            host_tensor a = ht_new(t, 2, sz), r = ht_new(t, 2, sz), a0 = ht_new(t, 2, sz);
            fill_rand(&a, 1, 0);
            set_d(&a.t, 3 * 300 + 7, INFINITY), set_d(&a.t, 9 * 300 + 100, NAN), set_d(&a.t, 40 * 300 + 299, -INFINITY);
            CHECK_OK(vt_copy(&a0.t, &a.t));
            CHECK_OK(vt_ref_scan(VT_SCAN_CUMSUM, &r.t, &a0.t, 1, t));
            CHECK_OK(vt_scan(VT_SCAN_CUMSUM, &a.t, &a.t, 1, t));
            CHECK(ht_compare("in-place cumsum lines", &a.t, &r.t, -1) == 0);
            ht_free(&a), ht_free(&r), ht_free(&a0);
        }
    }
    CHECK_STATUS(vt_scan(VT_SCAN_LOGCUMSUMEXP, &y.t, &x.t, 0, VT_I64), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_scan(VT_SCAN_CUMSUM, &y.t, &x.t, 2, VT_F32), VT_ERR_INDEX);
    ht_free(&x);
    ht_free(&y);
}

/* ------------------------------------------------------------ queued ops */

TEST(kernels_reduce_queued_ops) {
    CHECK_OK(vt_init());
    vt_set_thread_eager_mode(VT_EAGER_STRICT);
    int64_t R = 64, C = 300;
    float *din = NULL, *dsum = NULL, *dcum = NULL;
    int64_t *didx = NULL;
    CHECK_OK(vt_hbm_alloc(0, (size_t)(R * C) * 4, (void **)&din));
    CHECK_OK(vt_hbm_alloc(0, (size_t)C * 4, (void **)&dsum));
    CHECK_OK(vt_hbm_alloc(0, (size_t)(R * C) * 4, (void **)&dcum));
    CHECK_OK(vt_hbm_alloc(0, (size_t)C * 8, (void **)&didx));
    int64_t s[2] = {R, C}, so[2] = {1, C};
    host_tensor h = ht_new(VT_F32, 2, s);
    for (int64_t i = 0; i < R * C; i++) ((float *)h.t.data)[i] = (float)(i / C == (i % C) % R ? 100 : i % 5);
    vt_tensor in = h.t, sum = h.t, cum = h.t, idx = h.t;
    in.data = din;
    cum.data = dcum;
    sum.data = dsum;
    sum.sizes[0] = 1;
    idx = sum;
    idx.data = didx;
    idx.dtype = VT_I64;
    CHECK_OK(vt_copy_to_device(0, &in, &h.t));
    CHECK_OK(vt_op_reduce(0, "aten::sum", VT_REDUCE_SUM, &sum, &in, 1, VT_F32, 0));
    CHECK_OK(vt_op_reduce_arg(0, "aten::argmax", 1, NULL, &idx, &in, 0));
    CHECK_OK(vt_op_scan(0, "aten::cumsum", VT_SCAN_CUMSUM, &cum, &in, 0, VT_F32));
    host_tensor hs = ht_new(VT_F32, 2, so), hi = ht_new(VT_I64, 2, so), hc = ht_new(VT_F32, 2, s);
    CHECK_OK(vt_copy_to_host(0, &hs.t, &sum));
    CHECK_OK(vt_copy_to_host(0, &hi.t, &idx));
    CHECK_OK(vt_copy_to_host(0, &hc.t, &cum));
    host_tensor rs = ht_new(VT_F32, 2, so);
    CHECK_OK(vt_ref_reduce(VT_REDUCE_SUM, &rs.t, &h.t, 1, VT_F32, 0));
    CHECK(ht_compare("queued sum", &hs.t, &rs.t, 1e-6) == 0);
    int bad = 0;
    for (int64_t j = 0; j < C; j++) bad += ((int64_t *)hi.t.data)[j] != j % R;
    for (int64_t j = 0; j < C; j++) bad += ((float *)hc.t.data)[(R - 1) * C + j] != ((float *)rs.t.data)[j];
    CHECK_MSG(bad == 0, "%d wrong argmax / cumsum", bad);
    /* bad arguments fail at the op with PyTorch's messages */
    CHECK_STATUS(vt_op_reduce(0, "aten::sum", VT_REDUCE_SUM, &sum, &in, 1ull << 5, VT_F32, 0), VT_ERR_INDEX);
    CHECK_MSG(strcmp(vt_last_error(), "Dimension out of range (expected to be in range of [-2, 1], but got 5)") == 0,
              "%s", vt_last_error());
    CHECK_STATUS(vt_op_reduce(0, "aten::sum", VT_REDUCE_SUM, &sum, &in, 2, VT_F32, 0), VT_ERR_INVALID_ARGUMENT);
    CHECK(strncmp(vt_last_error(), "aten::sum: ", 11) == 0);
    CHECK_STATUS(vt_op_reduce_arg(0, "aten::max", 1, &sum, &sum, &in, 0), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_op_reduce_arg(0, "aten::max", 1, NULL, &idx, &in, -3), VT_ERR_INDEX);
    CHECK_STATUS(vt_op_reduce_arg(0, "aten::max", 1, NULL, NULL, &in, 0), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_op_scan(0, "aten::cumsum", VT_SCAN_CUMSUM, &sum, &in, 0, VT_F32), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_op_scan(0, "aten::cumsum", VT_SCAN_CUMSUM, &cum, &in, 2, VT_F32), VT_ERR_INDEX);
    CHECK_STATUS(vt_op_reduce(99, "aten::sum", VT_REDUCE_SUM, &sum, &in, 1, VT_F32, 0), VT_ERR_INDEX);
    CHECK_OK(vt_synchronize(0));
    vt_hbm_free(0, din);
    vt_hbm_free(0, dsum);
    vt_hbm_free(0, dcum);
    vt_hbm_free(0, didx);
    ht_free(&h);
    ht_free(&hs);
    ht_free(&hi);
    ht_free(&hc);
    ht_free(&rs);
    vt_set_thread_eager_mode(-1);
}

/* Rows shorter than a block or ending in a partial one: the AVX2 and
 * AVX-512 partial-block sums add the last group's values to their own lanes
 * only, bit for bit as the portable loop, at every tail length; on rows
 * with -0.0 values too (a sum of them is +0.0 on every path). */
TEST(kernels_reduce_partial_blocks_match_portable) {
    unsigned active = vt_isa_active();
    const unsigned paths[] = {VT_ISA_AVX2, VT_ISA_AVX2 | VT_ISA_AVX512};
    for (int64_t m = 1; m <= 300; m += m < 40 ? 1 : 13) {
        for (int zeros = 0; zeros < 2; zeros++) {
            int64_t sizes[2] = {3, m};
            host_tensor in = make_input(VT_F32, 2, sizes, 0);
            fill_rand(&in, 0, 0);
            float *x = (float *)in.block;
            for (int64_t i = 0; i < 3 * m; i++)
                if (zeros || i % 5 == 0) x[i] = -0.0f;
            host_tensor p = make_out(VT_F32, 2, sizes, 2, 0), v = make_out(VT_F32, 2, sizes, 2, 0);
            vt_isa_force(0);
            CHECK_OK(vt_reduce(VT_REDUCE_SUM, &p.t, &in.t, 2, VT_F32, 0));
            for (int k = 0; k < 2; k++) {
                if ((vt_isa_available() & paths[k]) != paths[k]) continue;
                vt_isa_force(paths[k]);
                CHECK_OK(vt_reduce(VT_REDUCE_SUM, &v.t, &in.t, 2, VT_F32, 0));
                CHECK_MSG(memcmp(v.block, p.block, 3 * sizeof(float)) == 0, "m=%lld zeros=%d path %d: %a %a %a vs %a %a %a",
                          (long long)m, zeros, k, ((float *)v.block)[0], ((float *)v.block)[1], ((float *)v.block)[2],
                          ((float *)p.block)[0], ((float *)p.block)[1], ((float *)p.block)[2]);
            }
            vt_isa_force(active);
            ht_free(&in);
            ht_free(&p);
            ht_free(&v);
        }
    }
}

/* bf16 rows summed in f32 (the sums of sum(dim=-1) and mean over bf16)
 * widen whole blocks as they load: the same bits as the same values given
 * as f32, on every path, for whole and partial blocks and several chunks. */
TEST(kernels_reduce_bf16_rows_match_f32) {
    static const shape_case cases[] = {
        {2, {300, 257}, 2}, {2, {7, 2049}, 2}, {2, {33, 256}, 2}, {2, {5, 1024}, 2}, {2, {3, 100}, 2}, {3, {4, 6, 512}, 4},
        {2, {37, 512}, 2}, {2, {9, 768}, 2},
    };
    unsigned active = vt_isa_active();
    unsigned masks[3] = {0, VT_ISA_AVX2, active};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int layout = 0; layout < 2; layout++) {
            const shape_case *c = &cases[k];
            host_tensor h = make_input(VT_BF16, c->nd, c->sizes, layout), f = make_input(VT_F32, c->nd, c->sizes, layout);
            const int64_t n = ht_block_elems(&h);
            if (k == 0) {
                fill_rand(&h, 1, 0); /* specials: a NaN or an infinity decides its row */
            } else { /* exponents 2^-27 .. 2^23 apart: the f32 sums round, so their order shows */
                for (int64_t i = 0; i < n; i++) {
                    const uint64_t r = next_u64();
                    ((uint16_t *)vt_base(&h.t))[i] = (uint16_t)((r & 0x8000u) | ((100 + (r >> 16) % 50) << 7) | ((r >> 8) & 0x7f));
                }
            }
            for (int64_t i = 0; i < n; i++) ((float *)vt_base(&f.t))[i] = vt_bf16_to_f32(((uint16_t *)vt_base(&h.t))[i]);
            for (int m = 0; m < 3; m++) {
                if ((masks[m] & vt_isa_available()) != masks[m]) continue;
                vt_isa_force(masks[m]);
                for (int op = 0; op < 2; op++) {
                    const vt_reduce_op o = op ? VT_REDUCE_MEAN : VT_REDUCE_SUM;
                    host_tensor a = make_out(VT_F32, c->nd, c->sizes, c->mask, 0);
                    host_tensor b = make_out(VT_F32, c->nd, c->sizes, c->mask, 0);
                    CHECK_OK(vt_reduce(o, &a.t, &h.t, c->mask, VT_F32, 0));
                    CHECK_OK(vt_reduce(o, &b.t, &f.t, c->mask, VT_F32, 0));
                    char what[96];
                    snprintf(what, sizeof what, "%s case %zu layout %d isa %x", op_names[o], k, layout, masks[m]);
                    CHECK(ht_compare(what, &a.t, &b.t, -1) == 0);
                    ht_free(&a);
                    ht_free(&b);
                }
            }
            vt_isa_force(active);
            ht_free(&h);
            ht_free(&f);
        }
}
