/* test_kernels_conv.c — vt_conv_forward / backward_input / backward_weight
 * against the direct-loop references for 1-3 spatial dims, stride,
 * padding, dilation, groups, odd sizes and non-contiguous layouts: exactly
 * with small integers (every partial sum exact), within fp32 rounding with
 * random values; adjoint identities; errors; zero sizes; the queued ops.
 * Which driver takes which shape, and their edge cases:
 * test_kernels_conv_paths.c. */
#include "test_kernels_conv_util.h"

/* Small integers: products and partial sums are exact in f32 (and the
 * results exact in bf16 / f16 or rounded once the same way), so the MXU
 * path must equal the reference whatever the summation order. */
TEST(kernels_conv_exact_small_integers) {
    static const vt_dtype dts[] = {VT_F32, VT_BF16, VT_F16, VT_F64};
    for (size_t i = 0; i < N_CASES; i++)
        for (size_t d = 0; d < 4; d++) check_case(&cases[i], dts[d], VT_PRECISION_DEFAULT, LAYOUT_CONTIGUOUS, 1, 0);
}

TEST(kernels_conv_exact_every_engine) {
    unsigned active = vt_isa_active();
    static const unsigned masks[] = {0, VT_ISA_AVX2, VT_ISA_AVX2 | VT_ISA_AVX512,
                                     VT_ISA_AVX2 | VT_ISA_AVX512 | VT_ISA_AVX512BF16};
    static const char *const names[] = {"2d", "3d", "2d depthwise 33ch", "3d depthwise", "2d depthwise wide rows",
                                        "2d depthwise wide rows s3 d2"};
    for (size_t m = 0; m < sizeof masks / sizeof masks[0]; m++) {
        vt_isa_force(masks[m] & active);
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            check_case(case_named(names[i]), VT_F32, VT_PRECISION_DEFAULT, LAYOUT_CONTIGUOUS, 1, 0);
            check_case(case_named(names[i]), VT_BF16, VT_PRECISION_DEFAULT, LAYOUT_CHANNELS_LAST, 1, 0);
            /* random data: every ISA's loops give the same bits, within the
             * reference's tolerance */
            check_case(case_named(names[i]), VT_F32, VT_PRECISION_HIGH, LAYOUT_CHANNELS_LAST, 0, 1e-5);
            check_case(case_named(names[i]), VT_F32, VT_PRECISION_HIGHEST, LAYOUT_CONTIGUOUS, 0, 1e-5);
        }
    }
    vt_isa_force(active);
}

TEST(kernels_conv_layouts) {
    for (size_t i = 0; i < N_CASES; i++)
        for (int l = LAYOUT_CHANNELS_LAST; l < LAYOUT_COUNT; l++) {
            if (cases[i].N * cases[i].in[0] * cases[i].in[1] > 1000) continue; /* keep the reference cheap */
            check_case(&cases[i], VT_F32, VT_PRECISION_DEFAULT, l, 1, 0);
            check_case(&cases[i], VT_BF16, VT_PRECISION_DEFAULT, l, 1, 0);
        }
}

/* Random fp32 data: the MXU sums in f32, the reference in fp64 over the
 * same bf16 products, so they agree to f32 accumulation error. */
TEST(kernels_conv_random_f32_every_precision) {
    for (size_t i = 0; i < N_CASES; i++)
        for (int prec = 0; prec <= VT_PRECISION_HIGHEST; prec++)
            check_case(&cases[i], VT_F32, (vt_precision)prec, (int[]){LAYOUT_CONTIGUOUS, LAYOUT_CHANNELS_LAST, LAYOUT_MIXED}[i % 3], 0,
                       1e-5);
}

TEST(kernels_conv_random_half_and_double) {
    for (size_t i = 0; i < N_CASES; i++) {
        check_case(&cases[i], VT_BF16, VT_PRECISION_HIGHEST, LAYOUT_CONTIGUOUS, 0, 1e-2);
        check_case(&cases[i], VT_F16, VT_PRECISION_DEFAULT, LAYOUT_STRIDED, 0, 2e-3);
        check_case(&cases[i], VT_F64, VT_PRECISION_DEFAULT, LAYOUT_CONTIGUOUS, 0, 1e-13);
    }
}

/* HIGHEST on fp32 against a plain fp64 convolution of the fp32 values:
 * six bf16 passes carry the full f32 mantissa. */
TEST(kernels_conv_highest_matches_fp64) {
    for (size_t i = 0; i < N_CASES; i++) {
        const conv_case *c = &cases[i];
        conv_tensors t = make_tensors(c, VT_F32, LAYOUT_CONTIGUOUS);
        fill_values(&t.x, 0), fill_values(&t.w, 0), fill_values(&t.b, 0), fill_values(&t.gy, 0);
        vt_conv_params p = case_params(c);
        host_tensor x = to_f64(&t.x.t, 0), w = to_f64(&t.w.t, 0), b = to_f64(&t.b.t, 0), gy = to_f64(&t.gy.t, 0);
        host_tensor ax = to_f64(&t.x.t, 1), aw = to_f64(&t.w.t, 1), ab = to_f64(&t.b.t, 1), agy = to_f64(&t.gy.t, 1);
        host_tensor r = ht_new(VT_F64, t.y.t.ndim, t.y.t.sizes), s = ht_new(VT_F64, t.y.t.ndim, t.y.t.sizes);
        CHECK_OK(vt_conv_forward(&t.y.t, &t.x.t, &t.w.t, &t.b.t, &p, VT_PRECISION_HIGHEST));
        CHECK_OK(vt_ref_conv_forward(&r.t, &x.t, &w.t, &b.t, &p, VT_PRECISION_HIGHEST));
        CHECK_OK(vt_ref_conv_forward(&s.t, &ax.t, &aw.t, &ab.t, &p, VT_PRECISION_HIGHEST));
        CHECK(compare_scaled(c->name, &t.y.t, &r.t, &s.t, 1e-5) == 0);
        ht_free(&r), ht_free(&s);
        r = ht_new(VT_F64, t.gx.t.ndim, t.gx.t.sizes), s = ht_new(VT_F64, t.gx.t.ndim, t.gx.t.sizes);
        CHECK_OK(vt_conv_backward_input(&t.gx.t, &t.gy.t, &t.w.t, &p, VT_PRECISION_HIGHEST));
        CHECK_OK(vt_ref_conv_backward_input(&r.t, &gy.t, &w.t, &p, VT_PRECISION_HIGHEST));
        CHECK_OK(vt_ref_conv_backward_input(&s.t, &agy.t, &aw.t, &p, VT_PRECISION_HIGHEST));
        CHECK(compare_scaled(c->name, &t.gx.t, &r.t, &s.t, 1e-5) == 0);
        ht_free(&r), ht_free(&s);
        r = ht_new(VT_F64, t.gw.t.ndim, t.gw.t.sizes), s = ht_new(VT_F64, t.gw.t.ndim, t.gw.t.sizes);
        CHECK_OK(vt_conv_backward_weight(&t.gw.t, &t.gy.t, &t.x.t, &p, VT_PRECISION_HIGHEST));
        CHECK_OK(vt_ref_conv_backward_weight(&r.t, &gy.t, &x.t, &p, VT_PRECISION_HIGHEST));
        CHECK_OK(vt_ref_conv_backward_weight(&s.t, &agy.t, &ax.t, &p, VT_PRECISION_HIGHEST));
        CHECK(compare_scaled(c->name, &t.gw.t, &r.t, &s.t, 1e-5) == 0);
        ht_free(&r), ht_free(&s);
        ht_free(&x), ht_free(&w), ht_free(&b), ht_free(&gy), ht_free(&ax), ht_free(&aw), ht_free(&ab), ht_free(&agy);
        free_tensors(&t);
    }
}

static double dot(const vt_tensor *a, const vt_tensor *b) {
    host_tensor x = to_f64(a, 0), y = to_f64(b, 0);
    double s = 0;
    for (int64_t i = 0; i < vt_tensor_numel(a); i++) s += ((double *)x.block)[i] * ((double *)y.block)[i];
    ht_free(&x), ht_free(&y);
    return s;
}

/* <conv(x, w), g> = <x, backward_input(g, w)> = <w, backward_weight(g, x)>:
 * the three kernels are one bilinear form, in F64 (and F32 at HIGHEST). */
TEST(kernels_conv_adjoint) {
    static const vt_dtype dts[] = {VT_F64, VT_F32};
    for (size_t i = 0; i < N_CASES; i++)
        for (size_t d = 0; d < 2; d++) {
            const conv_case *c = &cases[i];
            conv_tensors t = make_tensors(c, dts[d], i % 3 == 1 ? LAYOUT_CHANNELS_LAST : LAYOUT_CONTIGUOUS);
            fill_values(&t.x, 0), fill_values(&t.w, 0), fill_values(&t.gy, 0);
            vt_conv_params p = case_params(c);
            vt_precision prec = VT_PRECISION_HIGHEST;
            CHECK_OK(vt_conv_forward(&t.y.t, &t.x.t, &t.w.t, NULL, &p, prec));
            CHECK_OK(vt_conv_backward_input(&t.gx.t, &t.gy.t, &t.w.t, &p, prec));
            CHECK_OK(vt_conv_backward_weight(&t.gw.t, &t.gy.t, &t.x.t, &p, prec));
            double yg = dot(&t.y.t, &t.gy.t), xg = dot(&t.x.t, &t.gx.t), wg = dot(&t.w.t, &t.gw.t);
            double k = (double)(c->C / c->G);
            for (int s = 0; s < c->sp; s++) k *= (double)c->k[s];
            double scale = sqrt((double)vt_tensor_numel(&t.y.t) * k);
            double tol = (dts[d] == VT_F64 ? 1e-12 : 1e-5) * scale;
            CHECK_MSG(fabs(yg - xg) <= tol && fabs(yg - wg) <= tol, "%s %s: <y,g>=%.17g <x,gx>=%.17g <w,gw>=%.17g",
                      c->name, vt_dtype_name(dts[d]), yg, xg, wg);
            free_tensors(&t);
        }
}

/* Fill a contiguous tensor with (i % mod) - sub, as the PyTorch script
 * that produced the expected values did (torch.arange(n) % mod - sub). */
static host_tensor arange_mod(int ndim, const int64_t *sizes, int mod, int sub) {
    host_tensor h = ht_new(VT_F32, ndim, sizes);
    for (int64_t i = 0; i < vt_tensor_numel(&h.t); i++) ((float *)h.block)[i] = (float)(i % mod - sub);
    return h;
}

static int equals_list(const host_tensor *h, const int *want, int n) {
    int bad = vt_tensor_numel(&h->t) != n;
    for (int i = 0; i < n && !bad; i++) bad = ((const float *)h->block)[i] != (float)want[i];
    return !bad;
}

/* An oracle independent of both the kernels and the reference: outputs of
 * PyTorch 2.13 CPU (F.conv1d, F.conv2d, F.conv_transpose2d) on small
 * integer data, pasted in. */
TEST(kernels_conv_matches_pytorch_values) {
    static const int want1[] = {-1, -2, 1, -1, -2, 1, 2, 3, -2, 2, 3, -2};
    int64_t xs1[3] = {1, 4, 7}, ws1[3] = {4, 2, 3}, ys1[3] = {1, 4, 3};
    host_tensor x = arange_mod(3, xs1, 5, 2), w = arange_mod(3, ws1, 3, 1), y = ht_new(VT_F32, 3, ys1);
    vt_conv_params p1 = {1, {2}, {1}, {2}, 2};
    CHECK_OK(vt_conv_forward(&y.t, &x.t, &w.t, NULL, &p1, VT_PRECISION_DEFAULT));
    CHECK(equals_list(&y, want1, 12));
    ht_free(&x), ht_free(&w), ht_free(&y);

    static const int want2[] = {-7, -5, 4, 4, 5, -1, 1, -4, -2, 0, 2, 4, 0, 5, 3, -4, -2, -7};
    int64_t xs2[4] = {1, 2, 5, 5}, ws2[4] = {2, 1, 3, 2}, ys2[4] = {1, 2, 3, 3};
    x = arange_mod(4, xs2, 7, 3), w = arange_mod(4, ws2, 4, 1), y = ht_new(VT_F32, 4, ys2);
    vt_conv_params p2 = {2, {2, 1}, {1, 0}, {1, 2}, 2};
    CHECK_OK(vt_conv_forward(&y.t, &x.t, &w.t, NULL, &p2, VT_PRECISION_DEFAULT));
    CHECK(equals_list(&y, want2, 18));
    ht_free(&x), ht_free(&w), ht_free(&y);

    /* conv_transpose2d(x [1,2,2,2], w [2,1,3,3], stride 2, padding 1, output_padding 1) -> [1,1,4,4]. */
    static const int want3[] = {-2, 2, 1, 2, 1, 0, 0, 0, 1, -5, -2, 2, 1, 2, 0, -1};
    int64_t xs3[4] = {1, 2, 2, 2}, ws3[4] = {2, 1, 3, 3}, ys3[4] = {1, 1, 4, 4};
    x = arange_mod(4, xs3, 3, 1), w = arange_mod(4, ws3, 5, 2), y = ht_new(VT_F32, 4, ys3);
    vt_conv_params p3 = {2, {2, 2}, {1, 1}, {1, 1}, 1};
    CHECK_OK(vt_conv_backward_input(&y.t, &x.t, &w.t, &p3, VT_PRECISION_DEFAULT));
    CHECK(equals_list(&y, want3, 16));
    ht_free(&x), ht_free(&w), ht_free(&y);
}

/* DEFAULT really rounds fp32 operands to bf16 (one pass), HIGHEST does not. */
TEST(kernels_conv_default_rounds_to_bf16) {
    int64_t xs[3] = {1, 1, 1}, ws[3] = {1, 1, 1};
    host_tensor x = ht_new(VT_F32, 3, xs), w = ht_new(VT_F32, 3, ws), y = ht_new(VT_F32, 3, xs);
    ((float *)x.block)[0] = 1.0f + 0x1p-12f;
    ((float *)w.block)[0] = 1.0f;
    vt_conv_params p = {1, {1}, {0}, {1}, 1};
    CHECK_OK(vt_conv_forward(&y.t, &x.t, &w.t, NULL, &p, VT_PRECISION_DEFAULT));
    CHECK(((float *)y.block)[0] == 1.0f);
    CHECK_OK(vt_conv_forward(&y.t, &x.t, &w.t, NULL, &p, VT_PRECISION_HIGHEST));
    CHECK(((float *)y.block)[0] == 1.0f + 0x1p-12f);
    ht_free(&x), ht_free(&w), ht_free(&y);
}

/* A transposed convolution is backward_input with the larger grad_input
 * shape carrying output_padding: positions no window reads get 0. */
TEST(kernels_conv_transposed_output_padding) {
    /* conv_transpose2d(x [1, 2, 4, 4], w [2, 3, 3, 3], stride 2, padding 1, output_padding 1) -> [1, 3, 8, 8];
     * and stride 3 with output_padding 2 leaves a row nobody reads. */
    for (int v = 0; v < 2; v++) {
        int64_t s = v ? 3 : 2, in = v ? 12 : 8;
        int64_t xs[4] = {1, 2, 4, 4}, ws[4] = {2, 3, 3, 3}, os[4] = {1, 3, in, in};
        host_tensor x = ht_new(VT_F32, 4, xs), w = ht_new(VT_F32, 4, ws), o = ht_new(VT_F32, 4, os),
                    r = ht_new(VT_F32, 4, os);
        fill_values(&x, 1), fill_values(&w, 1), fill_values(&o, 0);
        vt_conv_params p = {2, {s, s}, {1, 1}, {1, 1}, 1};
        CHECK_OK(vt_conv_backward_input(&o.t, &x.t, &w.t, &p, VT_PRECISION_DEFAULT));
        CHECK_OK(vt_ref_conv_backward_input(&r.t, &x.t, &w.t, &p, VT_PRECISION_DEFAULT));
        CHECK(compare_scaled("conv_transpose", &o.t, &r.t, NULL, 0) == 0);
        if (v) {
            /* Row 11: 11 + 1 - k must be a multiple of 3 below 12 -> k = 0 gives 12/3 = 4 >= 4: unread. */
            int nz = 0;
            for (int c = 0; c < 3; c++)
                for (int j = 0; j < in; j++) nz += ((float *)o.block)[(c * in + 11) * in + j] != 0.0f;
            CHECK(nz == 0);
        }
        ht_free(&x), ht_free(&w), ht_free(&o), ht_free(&r);
    }
}

TEST(kernels_conv_zero_sizes) {
    /* Zero batch: outputs are empty, the weight gradient is zero. */
    int64_t xs[4] = {0, 3, 6, 6}, ws[4] = {4, 3, 3, 3}, ys[4] = {0, 4, 4, 4}, bs = 4;
    host_tensor x = ht_new(VT_F32, 4, xs), w = ht_new(VT_F32, 4, ws), y = ht_new(VT_F32, 4, ys),
                gw = ht_new(VT_F32, 4, ws), b = ht_new(VT_F32, 1, &bs);
    fill_values(&w, 1), fill_values(&gw, 0), fill_values(&b, 1);
    vt_conv_params p = {2, {1, 1}, {0, 0}, {1, 1}, 1};
    CHECK_OK(vt_conv_forward(&y.t, &x.t, &w.t, &b.t, &p, VT_PRECISION_DEFAULT));
    CHECK_OK(vt_conv_backward_input(&x.t, &y.t, &w.t, &p, VT_PRECISION_DEFAULT));
    CHECK_OK(vt_conv_backward_weight(&gw.t, &y.t, &x.t, &p, VT_PRECISION_DEFAULT));
    int nz = 0;
    for (int i = 0; i < 4 * 27; i++) nz += ((float *)gw.block)[i] != 0.0f;
    CHECK(nz == 0);
    ht_free(&x), ht_free(&y);
    /* Zero channels: the output is the bias. */
    int64_t xs0[4] = {2, 0, 6, 6}, ws0[4] = {4, 0, 3, 3}, ys0[4] = {2, 4, 4, 4};
    host_tensor x0 = ht_new(VT_F32, 4, xs0), w0 = ht_new(VT_F32, 4, ws0), y0 = ht_new(VT_F32, 4, ys0);
    fill_values(&y0, 0);
    CHECK_OK(vt_conv_forward(&y0.t, &x0.t, &w0.t, &b.t, &p, VT_PRECISION_DEFAULT));
    int bad = 0;
    for (int i = 0; i < 2 * 4 * 16; i++) bad += ((float *)y0.block)[i] != ((float *)b.block)[(i / 16) % 4];
    CHECK(bad == 0);
    ht_free(&x0), ht_free(&w0), ht_free(&y0), ht_free(&w), ht_free(&gw), ht_free(&b);
}

static void expect_error(vt_status got, vt_status want, const char *needle) {
    CHECK_MSG(got == want, "status %s, want %s (%s)", vt_status_string(got), vt_status_string(want), vt_last_error());
    CHECK_MSG(strstr(vt_last_error(), needle) != NULL, "message \"%s\" lacks \"%s\"", vt_last_error(), needle);
}

TEST(kernels_conv_errors) {
    int64_t xs[4] = {2, 4, 10, 10}, ws[4] = {8, 3, 3, 3}, ys[4] = {2, 8, 8, 8}, bs = 4;
    host_tensor x = ht_new(VT_F32, 4, xs), w = ht_new(VT_F32, 4, ws), y = ht_new(VT_F32, 4, ys),
                b = ht_new(VT_F32, 1, &bs);
    vt_conv_params p = {2, {1, 1}, {0, 0}, {1, 1}, 1};
    expect_error(vt_conv_forward(&y.t, &x.t, &w.t, NULL, &p, VT_PRECISION_DEFAULT), VT_ERR_INVALID_ARGUMENT,
                 "Given groups=1, weight of size [8, 3, 3, 3], expected input[2, 4, 10, 10] to have 3 channels, but "
                 "got 4 channels instead");
    x.t.sizes[1] = 3;
    expect_error(vt_conv_forward(&y.t, &x.t, &w.t, &b.t, &p, VT_PRECISION_DEFAULT), VT_ERR_INVALID_ARGUMENT,
                 "expected bias to be 1-dimensional with 8 elements, but got bias of size [4] instead");
    x.t.sizes[2] = x.t.sizes[3] = 2;
    expect_error(vt_conv_forward(&y.t, &x.t, &w.t, NULL, &p, VT_PRECISION_DEFAULT), VT_ERR_INVALID_ARGUMENT,
                 "Kernel size can't be greater than actual input size (calculated output size per channel (0 x 0) is "
                 "too small)");
    x.t.sizes[2] = x.t.sizes[3] = 10;
    y.t.sizes[2] = y.t.sizes[3] = 7;
    expect_error(vt_conv_forward(&y.t, &x.t, &w.t, NULL, &p, VT_PRECISION_DEFAULT), VT_ERR_INVALID_ARGUMENT,
                 "expected out of size [2, 8, 8, 8]");
    expect_error(vt_conv_backward_input(&x.t, &y.t, &w.t, &p, VT_PRECISION_DEFAULT), VT_ERR_INVALID_ARGUMENT,
                 "expected grad_output of size [2, 8, 8, 8]");
    y.t.sizes[2] = y.t.sizes[3] = 8;
    p.groups = 3;
    expect_error(vt_conv_forward(&y.t, &x.t, &w.t, NULL, &p, VT_PRECISION_DEFAULT), VT_ERR_INVALID_ARGUMENT,
                 "Given groups=3, expected weight to be divisible by 3 at dimension 0");
    p.groups = 0;
    expect_error(vt_conv_forward(&y.t, &x.t, &w.t, NULL, &p, VT_PRECISION_DEFAULT), VT_ERR_INVALID_ARGUMENT,
                 "non-positive groups is not supported");
    p.groups = 1;
    p.stride[1] = 0;
    expect_error(vt_conv_forward(&y.t, &x.t, &w.t, NULL, &p, VT_PRECISION_DEFAULT), VT_ERR_INVALID_ARGUMENT,
                 "non-positive stride is not supported");
    p.stride[1] = 1;
    p.padding[0] = -1;
    expect_error(vt_conv_forward(&y.t, &x.t, &w.t, NULL, &p, VT_PRECISION_DEFAULT), VT_ERR_INVALID_ARGUMENT,
                 "negative padding is not supported");
    p.padding[0] = 0;
    w.t.dtype = VT_BF16;
    expect_error(vt_conv_forward(&y.t, &x.t, &w.t, NULL, &p, VT_PRECISION_DEFAULT), VT_ERR_INVALID_ARGUMENT,
                 "Input type (float32) and weight type (bfloat16) should be the same");
    w.t.dtype = VT_F32;
    x.t.ndim = 3;
    expect_error(vt_conv_forward(&y.t, &x.t, &w.t, NULL, &p, VT_PRECISION_DEFAULT), VT_ERR_INVALID_ARGUMENT,
                 "Expected 4-dimensional input for 4-dimensional weight [8, 3, 3, 3]");
    x.t.ndim = 4;
    x.t.sizes[2] = 0;
    expect_error(vt_conv_forward(&y.t, &x.t, &w.t, NULL, &p, VT_PRECISION_DEFAULT), VT_ERR_INVALID_ARGUMENT,
                 "Only zero batch or zero channel inputs are supported");
    x.t.sizes[2] = 10;
    vt_tensor xi = x.t, wi = w.t, yi = y.t;
    xi.dtype = wi.dtype = yi.dtype = VT_I32;
    expect_error(vt_conv_forward(&yi, &xi, &wi, NULL, &p, VT_PRECISION_DEFAULT), VT_ERR_UNSUPPORTED, "int32");
    CHECK_OK(vt_conv_forward(&y.t, &x.t, &w.t, NULL, &p, VT_PRECISION_DEFAULT)); /* still fine */
    ht_free(&x), ht_free(&w), ht_free(&y), ht_free(&b);
}

/* Scratch that cannot exist fails cleanly (a 1-D signal of 2^40 samples
 * needs TiBs of packed columns; nothing is read before the allocation). */
TEST(kernels_conv_out_of_memory) {
    float dummy[4] = {0};
    int64_t big = (int64_t)1 << 40;
    vt_tensor x, w, y;
    memset(&x, 0, sizeof x);
    x.data = dummy;
    x.dtype = VT_F32;
    x.ndim = 3;
    x.sizes[0] = 1, x.sizes[1] = 1, x.sizes[2] = big;
    x.strides[2] = 1;
    y = x;
    w = x;
    w.sizes[2] = 1;
    vt_conv_params p = {1, {1}, {0}, {1}, 1};
    CHECK_STATUS(vt_conv_forward(&y, &x, &w, NULL, &p, VT_PRECISION_DEFAULT), VT_ERR_OUT_OF_MEMORY);
    CHECK(strstr(vt_last_error(), "cannot allocate") != NULL);
    CHECK_STATUS(vt_conv_backward_input(&x, &y, &w, &p, VT_PRECISION_DEFAULT), VT_ERR_OUT_OF_MEMORY);
    CHECK_STATUS(vt_conv_backward_weight(&w, &y, &x, &p, VT_PRECISION_DEFAULT), VT_ERR_OUT_OF_MEMORY);
}

/* The queued ops: same results as the synchronous kernels, and a bad
 * shape fails at the op with the op's name in front. */
TEST(kernels_conv_queued_ops) {
    CHECK_OK(vt_init());
    vt_set_thread_eager_mode(VT_EAGER_STRICT);
    const conv_case *c = &cases[4];
    conv_tensors t = make_tensors(c, VT_F32, LAYOUT_CONTIGUOUS), r = make_tensors(c, VT_F32, LAYOUT_CONTIGUOUS);
    fill_values(&t.x, 1), fill_values(&t.w, 1), fill_values(&t.b, 1), fill_values(&t.gy, 1);
    host_tensor *all[] = {&t.x, &t.w, &t.b, &t.y, &t.gy, &t.gx, &t.gw};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ht_device(all[i]);
    vt_conv_params p = case_params(c);
    CHECK_OK(vt_op_conv_forward(0, "aten::convolution", &t.y.t, &t.x.t, &t.w.t, &t.b.t, &p, VT_PRECISION_DEFAULT));
    CHECK_OK(vt_op_conv_backward_input(0, NULL, &t.gx.t, &t.gy.t, &t.w.t, &p, VT_PRECISION_DEFAULT));
    CHECK_OK(vt_op_conv_backward_weight(0, NULL, &t.gw.t, &t.gy.t, &t.x.t, &p, VT_PRECISION_DEFAULT));
    vt_conv_params q = p;
    q.groups = 4;
    vt_status s = vt_op_conv_forward(0, "aten::convolution", &t.y.t, &t.x.t, &t.w.t, NULL, &q, VT_PRECISION_DEFAULT);
    CHECK(s == VT_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strncmp(vt_last_error(), "aten::convolution: Given groups=4", 33) == 0, "%s", vt_last_error());
    CHECK_OK(vt_synchronize(0));
    CHECK_OK(vt_ref_conv_forward(&r.y.t, &t.x.t, &t.w.t, &t.b.t, &p, VT_PRECISION_DEFAULT));
    CHECK_OK(vt_ref_conv_backward_input(&r.gx.t, &t.gy.t, &t.w.t, &p, VT_PRECISION_DEFAULT));
    CHECK_OK(vt_ref_conv_backward_weight(&r.gw.t, &t.gy.t, &t.x.t, &p, VT_PRECISION_DEFAULT));
    CHECK(compare_scaled("queued forward", &t.y.t, &r.y.t, NULL, 0) == 0);
    CHECK(compare_scaled("queued backward_input", &t.gx.t, &r.gx.t, NULL, 0) == 0);
    CHECK(compare_scaled("queued backward_weight", &t.gw.t, &r.gw.t, NULL, 0) == 0);
    free_tensors(&t);
    free_tensors(&r);
    vt_set_thread_eager_mode(-1);
}
