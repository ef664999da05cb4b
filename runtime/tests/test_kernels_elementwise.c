/* test_kernels_elementwise.c — vt_unary / vt_binary / vt_where against the
 * scalar references: every op in every compute class, awkward sizes,
 * strided, transposed, broadcast and in-place operands, every ISA path. */
#include "test_kernels_util.h"

/* Ops whose results are not a single correctly rounded IEEE operation are
 * compared with a tolerance: libm differs between float and double. */
static int unary_exact(vt_unary_op op) {
    switch (op) {
    case VT_EXP: case VT_EXPM1: case VT_LOG: case VT_LOG1P: case VT_LOG2: case VT_LOG10: case VT_RSQRT:
    case VT_SIN: case VT_COS: case VT_TAN: case VT_TANH: case VT_SIGMOID: case VT_ERF:
    case VT_SILU: case VT_GELU: case VT_GELU_TANH: /* vector exp / erf on the AVX-512 path */
        return 0;
    default: return 1; /* the newer references evaluate the same formula in the class type */
    }
}
static int binary_exact(vt_binary_op op) {
    return op != VT_POW && op != VT_ATAN2 && op != VT_SILU_BACKWARD && op != VT_GELU_BACKWARD &&
           op != VT_GELU_TANH_BACKWARD;
}

static const vt_dtype float_computes[] = {VT_F32, VT_BF16, VT_F16, VT_F64};
static const vt_dtype int_computes[] = {VT_I64, VT_I32, VT_I8, VT_U8, VT_I16, VT_BOOL};

static int int_compute(vt_dtype dt) { return !vt_dtype_is_float(dt); }

static int binary_supported(vt_binary_op op, vt_dtype compute) {
    if (int_compute(compute)) {
        if (op >= VT_SILU_BACKWARD)
            return op == VT_FMIN || op == VT_FMAX || op == VT_HEAVISIDE || op == VT_SHIFT_LEFT ||
                   op == VT_SHIFT_RIGHT || op == VT_CLAMP_MIN || op == VT_CLAMP_MAX;
        return op != VT_DIV && op != VT_ATAN2 && op < VT_THRESHOLD_BACKWARD;
    }
    if (op == VT_SHIFT_LEFT || op == VT_SHIFT_RIGHT) return 0;
    return op < VT_BITWISE_AND || op >= VT_THRESHOLD_BACKWARD;
}

static int unary_supported(vt_unary_op op, vt_dtype compute) {
    if (!int_compute(compute)) return op != VT_BITWISE_NOT;
    switch (op) {
    case VT_NEG: case VT_ABS: case VT_SIGN: case VT_SQUARE: case VT_RELU: case VT_CEIL: case VT_FLOOR:
    case VT_ROUND: case VT_TRUNC: case VT_LOGICAL_NOT: case VT_BITWISE_NOT: case VT_ISNAN: case VT_ISINF:
    case VT_ISFINITE: case VT_NAN_TO_NUM: case VT_ISNEGINF: case VT_ISPOSINF: case VT_SIGNBIT:
        return 1;
    default: return 0;
    }
}

static int binary_is_bool(vt_binary_op op) { return vt_binary_op_is_bool(op); }
static int needs_nonzero(vt_binary_op op) {
    return op == VT_DIV_TRUNC || op == VT_DIV_FLOOR || op == VT_REMAINDER || op == VT_FMOD;
}

/* Run op on (a, b) into out and into a fresh reference of out's layout. */
static void check_binary_p(vt_binary_op op, vt_dtype compute, host_tensor *out, host_tensor *a, host_tensor *b,
                           vt_scalar alpha, const double *params, const char *layout) {
    host_tensor ref = ht_new(out->t.dtype, out->t.ndim, out->t.sizes);
    int nz = int_compute(compute) && needs_nonzero(op);
    ht_fill_random(a, 1, 0);
    if (b != a) ht_fill_random(b, 1, nz);
    if (op == VT_POW && int_compute(compute)) { /* keep exponents sane for the reference's loop */
        host_tensor *e = b;
        int64_t n = ht_block_elems(e);
        for (int64_t i = 0; i < n; i++) {
            int64_t v;
            vt_convert(e->t.dtype, (char *)e->block + i * (int64_t)vt_dtype_size(e->t.dtype), 1, VT_I64, &v, 1, 1);
            v = v % 70;
            vt_convert(VT_I64, &v, 1, e->t.dtype, (char *)e->block + i * (int64_t)vt_dtype_size(e->t.dtype), 1, 1);
        }
    }
    /* The reference reads copies, so in-place (out == a) is checked too. */
    host_tensor ca = ht_new(a->t.dtype, a->t.ndim, a->t.sizes), cb = ht_new(b->t.dtype, b->t.ndim, b->t.sizes);
    CHECK_OK(vt_ref_copy(&ca.t, &a->t));
    CHECK_OK(vt_ref_copy(&cb.t, &b->t));
    CHECK_OK(vt_binary_ex(op, &out->t, &a->t, &b->t, compute, alpha, params));
    CHECK_OK(vt_ref_binary_ex(op, &ref.t, &ca.t, &cb.t, compute, alpha, params));
    char what[128];
    snprintf(what, sizeof what, "%s compute=%s out=%s %s n=%lld", vt_binary_op_name(op), vt_dtype_name(compute),
             vt_dtype_name(out->t.dtype), layout, (long long)vt_tensor_numel(&out->t));
    double tol = binary_exact(op) ? -1
                                  : inexact_tol(op == VT_SILU_BACKWARD || op == VT_GELU_BACKWARD ||
                                                    op == VT_GELU_TANH_BACKWARD,
                                                compute);
    if (op == VT_FMIN || op == VT_FMAX) tol = 0; /* equal values: C leaves fmin(0, -0)'s sign open */
    CHECK(ht_compare(what, &out->t, &ref.t, tol) == 0);
    ht_free(&ref);
    ht_free(&ca);
    ht_free(&cb);
}

static void check_binary(vt_binary_op op, vt_dtype compute, host_tensor *out, host_tensor *a, host_tensor *b,
                         vt_scalar alpha, const char *layout) {
    check_binary_p(op, compute, out, a, b, alpha, NULL, layout);
}

static void check_unary_p(vt_unary_op op, vt_dtype compute, host_tensor *out, host_tensor *a, const double *params,
                          const char *layout) {
    host_tensor ref = ht_new(out->t.dtype, out->t.ndim, out->t.sizes);
    ht_fill_random(a, 1, 0);
    host_tensor ca = ht_new(a->t.dtype, a->t.ndim, a->t.sizes);
    CHECK_OK(vt_ref_copy(&ca.t, &a->t));
    CHECK_OK(vt_unary_ex(op, &out->t, &a->t, compute, params));
    CHECK_OK(vt_ref_unary_ex(op, &ref.t, &ca.t, compute, params));
    char what[128];
    snprintf(what, sizeof what, "%s compute=%s out=%s %s n=%lld", vt_unary_op_name(op), vt_dtype_name(compute),
             vt_dtype_name(out->t.dtype), layout, (long long)vt_tensor_numel(&out->t));
    double tol = unary_exact(op) ? -1 : inexact_tol(op == VT_GELU || op == VT_GELU_TANH, compute);
    CHECK(ht_compare(what, &out->t, &ref.t, tol) == 0);
    ht_free(&ref);
    ht_free(&ca);
}

static void check_unary(vt_unary_op op, vt_dtype compute, host_tensor *out, host_tensor *a, const char *layout) {
    check_unary_p(op, compute, out, a, NULL, layout);
}

static vt_dtype result_dtype(int is_bool, vt_dtype compute) { return is_bool ? VT_BOOL : compute; }

static void binary_all_layouts(vt_binary_op op, vt_dtype compute, int big) {
    vt_scalar one = int_compute(compute) ? vt_scalar_from_int(1) : vt_scalar_from_double(1.0);
    vt_dtype rd = result_dtype(binary_is_bool(op), compute);
    for (size_t k = 0; k < N_AWKWARD; k++) {
        int64_t n = awkward_sizes[k];
        if (n > 1000 && !big) continue;
        host_tensor a = ht_1d(compute, n), b = ht_1d(compute, n), o = ht_1d(rd, n);
        check_binary(op, compute, &o, &a, &b, one, "contiguous");
        ht_free(&a); ht_free(&b); ht_free(&o);
    }
    /* Strided, transposed, scalar and row broadcasts, in place. */
    host_tensor sa = ht_strided(compute, 257, 2), sb = ht_strided(compute, 257, 3), so = ht_strided(rd, 257, 2);
    check_binary(op, compute, &so, &sa, &sb, one, "strided");
    host_tensor ta = ht_transposed(compute, 33, 17);
    int64_t shape[2] = {33, 17}, rshape[2] = {1, 17};
    host_tensor tb = ht_new(compute, 2, rshape), to = ht_new(rd, 2, shape);
    check_binary(op, compute, &to, &ta, &tb, one, "transposed+row broadcast");
    host_tensor sc = ht_new(compute, 0, NULL), ca = ht_1d(compute, 1000), co = ht_1d(rd, 1000);
    check_binary(op, compute, &co, &ca, &sc, one, "tensor-scalar");
    check_binary(op, compute, &co, &sc, &ca, one, "scalar-tensor");
    if (rd == compute) {
        check_binary(op, compute, &ca, &ca, &sc, one, "in place");
    }
    if (rd == compute && !(int_compute(compute) && needs_nonzero(op))) { /* converted divisors may be 0 */
        /* Mixed input dtypes and a different output dtype. */
        host_tensor ma = ht_1d(VT_I16, 300), mb = ht_1d(VT_F32, 300), mo = ht_1d(VT_F64, 300);
        check_binary(op, compute, &mo, &ma, &mb, one, "mixed dtypes");
        ht_free(&ma); ht_free(&mb); ht_free(&mo);
    }
    ht_free(&sa); ht_free(&sb); ht_free(&so); ht_free(&ta); ht_free(&tb); ht_free(&to);
    ht_free(&sc); ht_free(&ca); ht_free(&co);
}

TEST(kernels_binary_float_vs_ref) {
    for (int op = 0; op < VT_BINARY_OP_COUNT; op++)
        for (size_t c = 0; c < sizeof float_computes / sizeof float_computes[0]; c++)
            if (binary_supported((vt_binary_op)op, float_computes[c]))
                binary_all_layouts((vt_binary_op)op, float_computes[c],
                                   op == VT_ADD || op == VT_MUL || op == VT_DIV || op == VT_LT);
}

TEST(kernels_binary_int_vs_ref) {
    for (int op = 0; op < VT_BINARY_OP_COUNT; op++)
        for (size_t c = 0; c < sizeof int_computes / sizeof int_computes[0]; c++)
            if (binary_supported((vt_binary_op)op, int_computes[c]))
                binary_all_layouts((vt_binary_op)op, int_computes[c],
                                   c == 0 && (op == VT_ADD || op == VT_DIV_FLOOR));
}

TEST(kernels_binary_alpha) {
    for (size_t c = 0; c < 4; c++) {
        vt_dtype dt = float_computes[c];
        host_tensor a = ht_1d(dt, 1000), b = ht_1d(dt, 1000), o = ht_1d(dt, 1000);
        check_binary(VT_ADD, dt, &o, &a, &b, vt_scalar_from_double(0.3), "alpha 0.3");
        check_binary(VT_SUB, dt, &o, &a, &b, vt_scalar_from_double(-2.0), "alpha -2");
        ht_free(&a); ht_free(&b); ht_free(&o);
    }
    host_tensor a = ht_1d(VT_I32, 1000), b = ht_1d(VT_I32, 1000), o = ht_1d(VT_I32, 1000);
    check_binary(VT_ADD, VT_I32, &o, &a, &b, vt_scalar_from_int(-3), "alpha -3");
    check_binary(VT_SUB, VT_I32, &o, &a, &b, vt_scalar_from_int(5), "alpha 5");
    ht_free(&a); ht_free(&b); ht_free(&o);
}

TEST(kernels_unary_vs_ref) {
    for (int op = 0; op < VT_UNARY_OP_COUNT; op++) {
        const vt_dtype all[] = {VT_F32, VT_BF16, VT_F16, VT_F64, VT_I64, VT_I8, VT_U8, VT_BOOL};
        for (size_t c = 0; c < sizeof all / sizeof all[0]; c++) {
            vt_dtype dt = all[c];
            if (!unary_supported((vt_unary_op)op, dt)) {
                host_tensor a = ht_1d(dt, 4), o = ht_1d(dt, 4);
                CHECK_STATUS(vt_unary((vt_unary_op)op, &o.t, &a.t, dt), VT_ERR_INVALID_ARGUMENT);
                ht_free(&a); ht_free(&o);
                continue;
            }
            int is_bool = vt_unary_op_is_bool((vt_unary_op)op);
            vt_dtype rd = result_dtype(is_bool, dt);
            for (size_t k = 0; k < N_AWKWARD; k++) {
                int64_t n = awkward_sizes[k];
                if (n > 1000 && !(op == VT_NEG || op == VT_EXP) ) continue;
                host_tensor a = ht_1d(dt, n), o = ht_1d(rd, n);
                check_unary((vt_unary_op)op, dt, &o, &a, "contiguous");
                if (rd == dt) check_unary((vt_unary_op)op, dt, &a, &a, "in place");
                ht_free(&a); ht_free(&o);
            }
            host_tensor ta = ht_transposed(dt, 17, 33);
            int64_t shape[2] = {17, 33};
            host_tensor to = ht_new(rd, 2, shape);
            check_unary((vt_unary_op)op, dt, &to, &ta, "transposed");
            host_tensor sa = ht_strided(VT_I32, 257, 3), so = ht_strided(VT_F64, 257, 2);
            check_unary((vt_unary_op)op, dt, &so, &sa, "strided, converted in and out");
            host_tensor sc = ht_new(dt, 0, NULL);
            check_unary((vt_unary_op)op, dt, &to, &sc, "scalar broadcast");
            ht_free(&ta); ht_free(&to); ht_free(&sa); ht_free(&so); ht_free(&sc);
        }
    }
}

static int64_t binary_i64(vt_binary_op op, int64_t x, int64_t y, vt_status *st) {
    int64_t one = 1, r = 0;
    host_tensor a = ht_new(VT_I64, 1, &one), b = ht_new(VT_I64, 1, &one), o = ht_new(VT_I64, 1, &one);
    *(int64_t *)a.block = x;
    *(int64_t *)b.block = y;
    *st = vt_binary(op, &o.t, &a.t, &b.t, VT_I64, vt_scalar_from_int(1));
    r = *(int64_t *)o.block;
    ht_free(&a); ht_free(&b); ht_free(&o);
    return r;
}

TEST(kernels_int_division_semantics) {
    vt_status st;
    CHECK(binary_i64(VT_DIV_FLOOR, -7, 2, &st) == -4 && st == VT_OK);
    CHECK(binary_i64(VT_DIV_TRUNC, -7, 2, &st) == -3);
    CHECK(binary_i64(VT_REMAINDER, -7, 2, &st) == 1);
    CHECK(binary_i64(VT_REMAINDER, 7, -2, &st) == -1);
    CHECK(binary_i64(VT_FMOD, -7, 2, &st) == -1);
    CHECK(binary_i64(VT_DIV_TRUNC, INT64_MIN, -1, &st) == INT64_MIN && st == VT_OK);
    CHECK(binary_i64(VT_DIV_FLOOR, INT64_MIN, -1, &st) == INT64_MIN && st == VT_OK);
    CHECK(binary_i64(VT_REMAINDER, INT64_MIN, -1, &st) == 0 && st == VT_OK);
    CHECK(binary_i64(VT_POW, 2, -1, &st) == 0);
    CHECK(binary_i64(VT_POW, -1, -3, &st) == -1);
    CHECK(binary_i64(VT_POW, 1, -3, &st) == 1);
    CHECK(binary_i64(VT_POW, 3, 4, &st) == 81);
    const vt_binary_op divs[] = {VT_DIV_TRUNC, VT_DIV_FLOOR, VT_REMAINDER, VT_FMOD};
    for (int i = 0; i < 4; i++) {
        vt_clear_error();
        binary_i64(divs[i], 5, 0, &st);
        CHECK(st == VT_ERR_KERNEL);
        CHECK(strcmp(vt_last_error(), "ZeroDivisionError") == 0);
    }
    /* A zero divisor deep inside a large, parallel, narrow-int op. */
    host_tensor a = ht_1d(VT_I8, 100003), b = ht_1d(VT_I8, 100003), o = ht_1d(VT_I8, 100003);
    ht_fill_random(&a, 0, 0);
    ht_fill_random(&b, 0, 1);
    ((int8_t *)b.block)[99999] = 0;
    CHECK_STATUS(vt_binary(VT_REMAINDER, &o.t, &a.t, &b.t, VT_I8, vt_scalar_from_int(1)), VT_ERR_KERNEL);
    CHECK(strcmp(vt_last_error(), "ZeroDivisionError") == 0);
    CHECK_STATUS(vt_ref_binary(VT_REMAINDER, &o.t, &a.t, &b.t, VT_I8, vt_scalar_from_int(1)), VT_ERR_KERNEL);
    CHECK_STATUS(vt_binary(VT_DIV, &o.t, &a.t, &b.t, VT_I8, vt_scalar_from_int(1)), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_binary(VT_BITWISE_AND, &o.t, &a.t, &b.t, VT_F32, vt_scalar_from_int(1)),
                 VT_ERR_INVALID_ARGUMENT);
    ht_free(&a); ht_free(&b); ht_free(&o);
}

static float f32_binary(vt_binary_op op, float x, float y) {
    int64_t one = 1;
    host_tensor a = ht_new(VT_F32, 1, &one), b = ht_new(VT_F32, 1, &one), o = ht_new(VT_F32, 1, &one);
    *(float *)a.block = x;
    *(float *)b.block = y;
    CHECK_OK(vt_binary(op, &o.t, &a.t, &b.t, VT_F32, vt_scalar_from_double(1.0)));
    float r = *(float *)o.block;
    ht_free(&a); ht_free(&b); ht_free(&o);
    return r;
}

static float f32_unary(vt_unary_op op, float x) {
    int64_t one = 1;
    host_tensor a = ht_new(VT_F32, 1, &one), o = ht_new(VT_F32, 1, &one);
    *(float *)a.block = x;
    CHECK_OK(vt_unary(op, &o.t, &a.t, VT_F32));
    float r = *(float *)o.block;
    ht_free(&a); ht_free(&o);
    return r;
}

TEST(kernels_float_semantics) {
    CHECK(f32_binary(VT_DIV_FLOOR, -7.0f, 2.0f) == -4.0f);
    CHECK(f32_binary(VT_REMAINDER, -7.0f, 2.0f) == 1.0f);
    CHECK(f32_binary(VT_REMAINDER, 7.0f, -2.0f) == -1.0f);
    CHECK(f32_binary(VT_FMOD, -7.0f, 2.0f) == -1.0f);
    CHECK(isinf(f32_binary(VT_DIV_FLOOR, 1.0f, 0.0f)));
    CHECK(isnan(f32_binary(VT_MAXIMUM, NAN, 1.0f)) && isnan(f32_binary(VT_MINIMUM, 1.0f, NAN)));
    CHECK(f32_unary(VT_ROUND, 2.5f) == 2.0f && f32_unary(VT_ROUND, -3.5f) == -4.0f);
    CHECK(f32_unary(VT_SIGN, NAN) == 0.0f && f32_unary(VT_SIGN, -3.0f) == -1.0f);
    CHECK(isnan(f32_unary(VT_RELU, NAN)) && f32_unary(VT_RELU, -1.0f) == 0.0f);
    CHECK(f32_unary(VT_FRAC, -2.75f) == -0.75f);
}

TEST(kernels_isa_paths_match_portable) {
    unsigned avail = vt_isa_available(), active = vt_isa_active();
    const unsigned masks[] = {0, VT_ISA_AVX2, VT_ISA_AVX2 | VT_ISA_AVX512};
    const vt_binary_op ops[] = {VT_ADD, VT_SUB, VT_MUL, VT_DIV};
    for (size_t m = 0; m < 3; m++) {
        if ((masks[m] & avail) != masks[m]) continue;
        CHECK(vt_isa_force(masks[m]) == masks[m]);
        CHECK(vt_elementwise_select_isa(masks[m]) == (masks[m] & VT_ISA_AVX512 ? VT_ISA_AVX512 : masks[m]));
        for (size_t o = 0; o < 4; o++) {
            /* add and sub with an alpha other than 1 run the table's axpy
             * (one fused multiply-add per lane) */
            const int has_alpha = ops[o] == VT_ADD || ops[o] == VT_SUB;
            const vt_scalar alphas[] = {vt_scalar_from_double(1.0), vt_scalar_from_double(0.3),
                                        vt_scalar_from_double(-2.5)};
            for (size_t al = 0; al < (has_alpha ? 3u : 1u); al++)
                for (size_t k = 0; k < N_AWKWARD; k++) {
                    int64_t n = awkward_sizes[k];
                    host_tensor a = ht_1d(VT_F32, n), b = ht_1d(VT_F32, n), out = ht_1d(VT_F32, n);
                    check_binary(ops[o], VT_F32, &out, &a, &b, alphas[al], vt_isa_path());
                    /* Unaligned starts. */
                    if (n > 3) {
                        a.t.offset = 1; a.t.sizes[0] = n - 3;
                        b.t.offset = 2; b.t.sizes[0] = n - 3;
                        out.t.offset = 3; out.t.sizes[0] = n - 3;
                        check_binary(ops[o], VT_F32, &out, &a, &b, alphas[al], "unaligned");
                    }
                    ht_free(&a); ht_free(&b); ht_free(&out);
                }
            /* A scalar operand on either side (its own specialisation per
             * ISA), up to sizes that take the streaming-store path (its
             * threshold lowered to 256 KiB, where the pool's chunks of the
             * largest size are over it on any thread count up to 6). */
            vt_stream_store_force(256 << 10);
            const int64_t sizes[] = {1, 15, 17, 63, 65, 1000, 3 << 19};
            for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
                host_tensor a = ht_1d(VT_F32, sizes[k]), s = ht_new(VT_F32, 0, NULL), out = ht_1d(VT_F32, sizes[k]);
                check_binary(ops[o], VT_F32, &out, &a, &s, vt_scalar_from_double(1.0), "tensor-scalar");
                check_binary(ops[o], VT_F32, &out, &s, &a, vt_scalar_from_double(1.0), "scalar-tensor");
                check_binary(ops[o], VT_F32, &a, &a, &s, vt_scalar_from_double(1.0), "tensor-scalar in place");
                if (has_alpha) {
                    check_binary(ops[o], VT_F32, &out, &a, &s, vt_scalar_from_double(0.3), "tensor-scalar, alpha");
                    check_binary(ops[o], VT_F32, &out, &s, &a, vt_scalar_from_double(-2.5), "scalar-tensor, alpha");
                }
                ht_free(&a); ht_free(&s); ht_free(&out);
            }
            vt_stream_store_force(0);
            /* Short rows of a wider tensor (a sliced view, as RoPE's halves):
             * the row loop calls the ISA microkernel directly, with a row
             * broadcast or a scalar beside it, and alpha 2 (the axpy). */
            int64_t wide[2] = {7, 64}, rows[2] = {7, 33}, row[2] = {1, 33};
            host_tensor v = ht_new(VT_F32, 2, wide), r = ht_new(VT_F32, 2, row), s = ht_new(VT_F32, 0, NULL);
            host_tensor out = ht_new(VT_F32, 2, rows);
            v.t.sizes[1] = 33;
            check_binary(ops[o], VT_F32, &out, &v, &r, vt_scalar_from_double(1.0), "row view + row");
            check_binary(ops[o], VT_F32, &out, &r, &v, vt_scalar_from_double(1.0), "row + row view");
            check_binary(ops[o], VT_F32, &out, &v, &s, vt_scalar_from_double(1.0), "row view + scalar");
            check_binary(ops[o], VT_F32, &v, &v, &r, vt_scalar_from_double(1.0), "row view in place");
            if (ops[o] == VT_ADD || ops[o] == VT_SUB)
                check_binary(ops[o], VT_F32, &out, &v, &r, vt_scalar_from_double(2.0), "row view, alpha 2");
            ht_free(&v); ht_free(&r); ht_free(&s); ht_free(&out);
        }
    }
    vt_isa_force(active);
}

TEST(kernels_where) {
    int64_t shape[2] = {33, 257}, cshape[2] = {33, 1};
    host_tensor cond = ht_new(VT_BOOL, 2, cshape), a = ht_transposed(VT_F32, 33, 257), b = ht_new(VT_I32, 0, NULL);
    host_tensor out = ht_new(VT_F64, 2, shape);
    ht_fill_random(&cond, 0, 0);
    ht_fill_random(&a, 1, 0);
    *(int32_t *)b.block = -5;
    CHECK_OK(vt_where(&out.t, &cond.t, &a.t, &b.t));
    int bad = 0;
    for (int64_t i = 0; i < 33; i++) {
        for (int64_t j = 0; j < 257; j++) {
            double got = ((double *)out.block)[i * 257 + j];
            double want = ((uint8_t *)cond.block)[i] ? (double)((float *)a.block)[i + j * 33] : -5.0;
            if (!(got == want || (isnan(got) && isnan(want)))) bad++;
        }
    }
    CHECK(bad == 0);
    /* In place, large. */
    host_tensor c2 = ht_1d(VT_BOOL, 100003), x = ht_1d(VT_I16, 100003), y = ht_1d(VT_I16, 100003);
    ht_fill_random(&c2, 0, 0);
    ht_fill_random(&x, 0, 0);
    ht_fill_random(&y, 0, 0);
    int16_t *keep = malloc(100003 * 2);
    memcpy(keep, x.block, 100003 * 2);
    CHECK_OK(vt_where(&x.t, &c2.t, &x.t, &y.t));
    bad = 0;
    for (int64_t i = 0; i < 100003; i++)
        if (((int16_t *)x.block)[i] != (((uint8_t *)c2.block)[i] ? keep[i] : ((int16_t *)y.block)[i])) bad++;
    CHECK(bad == 0);
    free(keep);
    ht_free(&cond); ht_free(&a); ht_free(&b); ht_free(&out); ht_free(&c2); ht_free(&x); ht_free(&y);
}

/* where() on operands already of out's dtype selects their bits in place,
 * per width: every dtype width, a tensor or a 0-dim `a`, a contiguous or a
 * transposed out, a row-broadcast or a full condition; NaN bits kept. */
TEST(kernels_where_same_dtype_widths) {
    static const vt_dtype dts[] = {VT_BOOL, VT_I8, VT_BF16, VT_I16, VT_F32, VT_I32, VT_F64, VT_I64};
    const int64_t R = 37, C = 300;
    for (size_t di = 0; di < sizeof dts / sizeof dts[0]; di++)
        for (int layout = 0; layout < 8; layout++) { /* bit 0: 0-dim a; bit 1: a row of conditions; bit 2: out transposed */
            const vt_dtype dt = dts[di];
            const size_t es = vt_dtype_size(dt);
            int64_t shape[2] = {R, C}, row[2] = {1, C};
            host_tensor cond = ht_new(VT_BOOL, 2, layout & 2 ? row : shape);
            host_tensor a = layout & 1 ? ht_new(dt, 0, NULL) : ht_new(dt, 2, shape), b = ht_new(dt, 2, shape);
            host_tensor out = layout & 4 ? ht_transposed(dt, R, C) : ht_new(dt, 2, shape);
            ht_fill_random(&cond, 0, 0);
            ht_fill_random(&a, 1, 0); /* specials: NaN payloads must survive */
            ht_fill_random(&b, 1, 0);
            CHECK_OK(vt_where(&out.t, &cond.t, &a.t, &b.t));
            int64_t bad = 0;
            for (int64_t i = 0; i < R; i++)
                for (int64_t j = 0; j < C; j++) {
                    const int64_t oi = i * out.t.strides[0] + j * out.t.strides[1];
                    const int64_t ci = layout & 2 ? j : i * C + j;
                    const char *want = ((uint8_t *)cond.block)[ci] ? (const char *)a.block + (layout & 1 ? 0 : (i * C + j) * (int64_t)es)
                                                                   : (const char *)b.block + (i * C + j) * (int64_t)es;
                    bad += memcmp((const char *)out.block + oi * (int64_t)es, want, es) != 0;
                }
            CHECK_MSG(bad == 0, "%s layout %d: %lld wrong", vt_dtype_name(dt), layout, (long long)bad);
            ht_free(&cond), ht_free(&a), ht_free(&b), ht_free(&out);
        }
}

TEST(kernels_elementwise_bad_args) {
    int64_t s3 = 3, s4 = 4;
    host_tensor a = ht_1d(VT_F32, 3), o = ht_1d(VT_F32, 4);
    CHECK_STATUS(vt_unary(VT_NEG, &o.t, &a.t, VT_F32), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_unary((vt_unary_op)99, &a.t, &a.t, VT_F32), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_unary(VT_NEG, &a.t, &a.t, (vt_dtype)42), VT_ERR_INVALID_ARGUMENT);
    vt_tensor neg = a.t;
    neg.sizes[0] = -1;
    CHECK_STATUS(vt_unary(VT_NEG, &neg, &a.t, VT_F32), VT_ERR_INVALID_ARGUMENT);
    (void)s3; (void)s4;
    /* The plans trust their operands: every direct entry point checks them
     * first (a [3] input does not broadcast to a [4] output; a non-empty
     * tensor needs data; the compute dtype must exist). */
    vt_tensor nodata = o.t;
    nodata.data = NULL;
    const vt_scalar one = vt_scalar_from_int(1);
    CHECK_STATUS(vt_binary(VT_ADD, &o.t, &a.t, &o.t, VT_F32, one), VT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(vt_last_error(), "must match the size") != NULL);
    CHECK_STATUS(vt_binary(VT_ADD, &o.t, &o.t, &nodata, VT_F32, one), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_binary(VT_ADD, &o.t, &o.t, &o.t, (vt_dtype)42, one), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_ternary(VT_ADDCMUL, &o.t, &o.t, &o.t, &a.t, VT_F32, one), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_ternary(VT_ADDCMUL, &nodata, &o.t, &o.t, &o.t, VT_F32, one), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_where(&o.t, &o.t, &a.t, &o.t), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_copy(&o.t, &a.t), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_copy(&nodata, &o.t), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_fill(&nodata, one), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_fill(&neg, one), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_copy(NULL, &o.t), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_where(NULL, &o.t, &o.t, &o.t), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_binary(VT_ADD, &o.t, &o.t, NULL, VT_F32, one), VT_ERR_INVALID_ARGUMENT);
    CHECK(strcmp(vt_binary_op_name(VT_DIV_FLOOR), "div_floor") == 0);
    CHECK(strcmp(vt_unary_op_name(VT_ISFINITE), "isfinite") == 0);
    ht_free(&a); ht_free(&o);
}

/* ------------------------------------------------------------ params, ternary, activation paths */

TEST(kernels_elementwise_params_vs_ref) {
    static const struct { vt_unary_op op; double p[VT_EW_MAX_PARAMS]; } un[] = {
        {VT_SOFTPLUS, {2.0, 5.0}}, {VT_SOFTPLUS, {0.5, 20.0}}, {VT_ELU, {1.5, 1.0507, 0.7}},
        {VT_LEAKY_RELU, {0.1}}, {VT_LOGIT, {-1.0}}, {VT_LOGIT, {0.1}}, {VT_NAN_TO_NUM, {1.0, 2.0, -3.0}},
    };
    static const struct { vt_binary_op op; double p[VT_EW_MAX_PARAMS]; } bin[] = {
        {VT_SOFTPLUS_BACKWARD, {2.0, 5.0}}, {VT_ELU_BACKWARD, {1.5, 1.0507, 0.7, 0.0}},
        {VT_ELU_BACKWARD, {1.5, 1.0507, 0.7, 1.0}}, {VT_LEAKY_RELU_BACKWARD, {0.1}},
        {VT_HARDTANH_BACKWARD, {-1.0, 2.0}}, {VT_LOGIT_BACKWARD, {-1.0}}, {VT_LOGIT_BACKWARD, {0.2}},
        {VT_LERP_SCALAR, {0.3}}, {VT_LERP_SCALAR, {0.7}}, {VT_LERP_SCALAR, {-2.0}},
    };
    for (size_t c = 0; c < 4; c++) {
        vt_dtype dt = float_computes[c];
        for (size_t k = 0; k < sizeof un / sizeof un[0]; k++) {
            host_tensor a = ht_1d(dt, 1000), o = ht_1d(dt, 1000);
            check_unary_p(un[k].op, dt, &o, &a, un[k].p, "params");
            host_tensor t = ht_transposed(dt, 17, 33);
            int64_t shape[2] = {17, 33};
            host_tensor to = ht_new(VT_F64, 2, shape);
            check_unary_p(un[k].op, dt, &to, &t, un[k].p, "params, transposed");
            ht_free(&a); ht_free(&o); ht_free(&t); ht_free(&to);
        }
        for (size_t k = 0; k < sizeof bin / sizeof bin[0]; k++) {
            host_tensor a = ht_1d(dt, 1000), b = ht_1d(dt, 1000), o = ht_1d(dt, 1000), sc = ht_new(dt, 0, NULL);
            check_binary_p(bin[k].op, dt, &o, &a, &b, vt_scalar_from_int(1), bin[k].p, "params");
            check_binary_p(bin[k].op, dt, &o, &a, &sc, vt_scalar_from_int(1), bin[k].p, "params, scalar");
            check_binary_p(bin[k].op, dt, &a, &a, &b, vt_scalar_from_int(1), bin[k].p, "params, in place");
            ht_free(&a); ht_free(&b); ht_free(&o); ht_free(&sc);
        }
    }
}

static void check_ternary(vt_ternary_op op, vt_dtype compute, host_tensor *out, host_tensor *a, host_tensor *b,
                          host_tensor *c, vt_scalar alpha, const char *layout) {
    host_tensor ref = ht_new(out->t.dtype, out->t.ndim, out->t.sizes);
    ht_fill_random(a, 1, 0);
    if (b != a) ht_fill_random(b, 1, 0);
    if (c != a && c != b) ht_fill_random(c, 1, 0);
    host_tensor ca = ht_new(a->t.dtype, a->t.ndim, a->t.sizes), cb = ht_new(b->t.dtype, b->t.ndim, b->t.sizes);
    host_tensor cc = ht_new(c->t.dtype, c->t.ndim, c->t.sizes);
    CHECK_OK(vt_ref_copy(&ca.t, &a->t));
    CHECK_OK(vt_ref_copy(&cb.t, &b->t));
    CHECK_OK(vt_ref_copy(&cc.t, &c->t));
    CHECK_OK(vt_ternary(op, &out->t, &a->t, &b->t, &c->t, compute, alpha));
    CHECK_OK(vt_ref_ternary(op, &ref.t, &ca.t, &cb.t, &cc.t, compute, alpha));
    char what[128];
    snprintf(what, sizeof what, "%s compute=%s out=%s %s n=%lld", vt_ternary_op_name(op), vt_dtype_name(compute),
             vt_dtype_name(out->t.dtype), layout, (long long)vt_tensor_numel(&out->t));
    CHECK(ht_compare(what, &out->t, &ref.t, -1) == 0);
    ht_free(&ref); ht_free(&ca); ht_free(&cb); ht_free(&cc);
}

static void ternary_all_layouts(vt_ternary_op op, vt_dtype dt) {
    vt_scalar al = int_compute(dt) ? vt_scalar_from_int(3) : vt_scalar_from_double(0.375);
    for (size_t k = 0; k < N_AWKWARD; k++) {
        int64_t n = awkward_sizes[k];
        host_tensor a = ht_1d(dt, n), b = ht_1d(dt, n), c = ht_1d(dt, n), o = ht_1d(dt, n);
        check_ternary(op, dt, &o, &a, &b, &c, al, "contiguous");
        check_ternary(op, dt, &a, &a, &b, &c, al, "in place");
        ht_free(&a); ht_free(&b); ht_free(&c); ht_free(&o);
    }
    host_tensor sa = ht_strided(dt, 257, 2), sb = ht_strided(dt, 257, 3), sc = ht_new(dt, 0, NULL);
    host_tensor so = ht_strided(dt, 257, 2);
    check_ternary(op, dt, &so, &sa, &sb, &sc, al, "strided + scalar");
    check_ternary(op, dt, &so, &sc, &sa, &sb, al, "scalar first");
    host_tensor ta = ht_transposed(dt, 33, 17);
    int64_t shape[2] = {33, 17}, rshape[2] = {1, 17}, cshape[2] = {33, 1};
    host_tensor tb = ht_new(dt, 2, rshape), tc = ht_new(dt, 2, cshape), to = ht_new(VT_F64, 2, shape);
    check_ternary(op, dt, &to, &ta, &tb, &tc, al, "transposed, row and column broadcasts, f64 out");
    host_tensor s1 = ht_new(dt, 0, NULL), s2 = ht_new(dt, 0, NULL);
    check_ternary(op, dt, &to, &sc, &s1, &s2, al, "all scalars");
    ht_free(&sa); ht_free(&sb); ht_free(&sc); ht_free(&so); ht_free(&ta); ht_free(&tb); ht_free(&tc); ht_free(&to);
    ht_free(&s1); ht_free(&s2);
}

TEST(kernels_ternary_vs_ref) {
    for (int op = 0; op < VT_TERNARY_OP_COUNT; op++) {
        for (size_t c = 0; c < 4; c++) ternary_all_layouts((vt_ternary_op)op, float_computes[c]);
        if (op == VT_ADDCMUL || op == VT_CLAMP) {
            for (size_t c = 0; c < sizeof int_computes / sizeof int_computes[0]; c++)
                ternary_all_layouts((vt_ternary_op)op, int_computes[c]);
        } else {
            host_tensor a = ht_1d(VT_I32, 4);
            CHECK_STATUS(vt_ternary((vt_ternary_op)op, &a.t, &a.t, &a.t, &a.t, VT_I32, vt_scalar_from_int(1)),
                         VT_ERR_INVALID_ARGUMENT);
            ht_free(&a);
        }
    }
    host_tensor a = ht_1d(VT_F32, 3), b = ht_1d(VT_F32, 4);
    CHECK_STATUS(vt_ternary(VT_ADDCMUL, &a.t, &a.t, &b.t, &a.t, VT_F32, vt_scalar_from_int(1)),
                 VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_ternary((vt_ternary_op)9, &a.t, &a.t, &a.t, &a.t, VT_F32, vt_scalar_from_int(1)),
                 VT_ERR_INVALID_ARGUMENT);
    CHECK(strcmp(vt_ternary_op_name(VT_LERP), "lerp") == 0);
    ht_free(&a); ht_free(&b);
}
