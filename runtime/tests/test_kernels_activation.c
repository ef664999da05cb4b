/* test_kernels_activation.c — the activations (silu, gelu, tanh, sigmoid,
 * their gradients, addcmul; softplus, hardswish, erfinv ... semantics):
 * the AVX2 and AVX-512 loops against the portable ones, sigmoid and gelu
 * against fp64, and bf16 results as the f32 kernel's rounded once, on
 * every ISA path. */
#include "test_kernels_util.h"

static float f32_un(vt_unary_op op, float x, const double *p) {
    int64_t one = 1;
    host_tensor a = ht_new(VT_F32, 1, &one), o = ht_new(VT_F32, 1, &one);
    *(float *)a.block = x;
    CHECK_OK(vt_unary_ex(op, &o.t, &a.t, VT_F32, p));
    float r = *(float *)o.block;
    ht_free(&a); ht_free(&o);
    return r;
}

TEST(kernels_activation_semantics) {
    const double sp[VT_EW_MAX_PARAMS] = {1.0, 20.0}, nn[VT_EW_MAX_PARAMS] = {0.0, 7.0, -7.0};
    CHECK(f32_un(VT_SOFTPLUS, 30.0f, sp) == 30.0f); /* above the threshold: x itself */
    CHECK(f32_un(VT_HARDSIGMOID, 5.0f, NULL) == 1.0f && f32_un(VT_HARDSIGMOID, -5.0f, NULL) == 0.0f);
    CHECK(isnan(f32_un(VT_HARDSWISH, NAN, NULL)));
    CHECK(f32_un(VT_NAN_TO_NUM, INFINITY, nn) == 7.0f && f32_un(VT_NAN_TO_NUM, NAN, nn) == 0.0f);
    CHECK(isinf(f32_un(VT_DIGAMMA, 0.0f, NULL)) && isnan(f32_un(VT_DIGAMMA, -2.0f, NULL)));
    CHECK(isinf(f32_un(VT_ERFINV, 1.0f, NULL)) && isnan(f32_un(VT_ERFINV, 1.5f, NULL)));
    CHECK(fabsf(f32_un(VT_ERFINV, 0.5f, NULL) - 0.4769362762f) < 1e-6f);
    CHECK(fabsf(f32_un(VT_SILU, 1.0f, NULL) - 0.7310585786f) < 1e-6f);
    CHECK(fabsf(f32_un(VT_GELU, 1.0f, NULL) - 0.8413447461f) < 1e-6f);
    CHECK(fabsf(f32_un(VT_GELU_TANH, 1.0f, NULL) - 0.8411920071f) < 1e-6f);
    CHECK(f32_un(VT_SILU, -200.0f, NULL) == -0.0f && f32_un(VT_SILU, 200.0f, NULL) == 200.0f);
}

/* The AVX2 and AVX-512 activations against the portable ones, at every
 * tail length and around the streaming-store threshold, on specials too. */
static void activation_path(unsigned vec) {
    const vt_unary_op uops[] = {VT_SILU, VT_GELU, VT_GELU_TANH, VT_TANH, VT_SIGMOID};
    const int nu = (int)(sizeof uops / sizeof uops[0]);
    const int64_t sizes[] = {1, 15, 16, 17, 33, 1000, (1 << 19) + 37};
    vt_stream_store_force(256 << 10); /* the largest size streams on up to 8 threads */
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        int64_t n = sizes[k];
        host_tensor a = ht_1d(VT_F32, n + 1), b = ht_1d(VT_F32, n + 1), c = ht_1d(VT_F32, n + 1);
        host_tensor o1 = ht_1d(VT_F32, n + 1), o2 = ht_1d(VT_F32, n + 1);
        ht_fill_random(&a, 1, 0);
        ht_fill_random(&b, 1, 0);
        ht_fill_random(&c, 1, 0);
        /* offset 1: an unaligned start */
        a.t.offset = b.t.offset = c.t.offset = o1.t.offset = o2.t.offset = 1;
        a.t.sizes[0] = b.t.sizes[0] = c.t.sizes[0] = o1.t.sizes[0] = o2.t.sizes[0] = n;
        for (int u = 0; u < nu; u++) {
            vt_isa_force(0);
            CHECK_OK(vt_unary(uops[u], &o1.t, &a.t, VT_F32));
            vt_isa_force(vec);
            CHECK_OK(vt_unary(uops[u], &o2.t, &a.t, VT_F32));
            int is_gelu = uops[u] == VT_GELU || uops[u] == VT_GELU_TANH;
            CHECK(ht_compare(vt_unary_op_name(uops[u]), &o2.t, &o1.t, inexact_tol(is_gelu, VT_F32)) == 0);
        }
        vt_isa_force(0);
        CHECK_OK(vt_binary(VT_SILU_BACKWARD, &o1.t, &a.t, &b.t, VT_F32, vt_scalar_from_int(1)));
        vt_isa_force(vec);
        CHECK_OK(vt_binary(VT_SILU_BACKWARD, &o2.t, &a.t, &b.t, VT_F32, vt_scalar_from_int(1)));
        /* 1 + x (1 - sigmoid) cancels near x = -1.28: an ulp of sigmoid is 1e-7 absolute */
        CHECK(ht_compare("silu_backward", &o2.t, &o1.t, inexact_tol(1, VT_F32)) == 0);
        /* gelu backward, dy (cdf + x pdf): the vector erf is PyTorch's
         * Abramowitz-Stegun form, 1.5e-7 absolute, which shows relative to
         * a small cdf + x pdf (x near -0.75, or x < -4): bound the error by
         * |dy| as well as by the result. */
        const vt_binary_op bops[] = {VT_GELU_BACKWARD, VT_GELU_TANH_BACKWARD};
        for (size_t u = 0; u < 2; u++) {
            vt_isa_force(0);
            CHECK_OK(vt_binary(bops[u], &o1.t, &a.t, &b.t, VT_F32, vt_scalar_from_int(1)));
            vt_isa_force(vec);
            CHECK_OK(vt_binary(bops[u], &o2.t, &a.t, &b.t, VT_F32, vt_scalar_from_int(1)));
            const float *r1 = (const float *)o1.block + 1, *r2 = (const float *)o2.block + 1;
            const float *dy = (const float *)a.block + 1;
            int64_t bad = 0;
            for (int64_t i = 0; i < n; i++) {
                double x1 = r1[i], x2 = r2[i];
                if (x1 == x2) continue;
                if (isnan(x1) || isnan(x2)) {
                    bad += !(isnan(x1) && isnan(x2));
                    continue;
                }
                double bound = 1e-3 * fmax(fabs(x1), fabs(x2)) + 1e-6 * fabs((double)dy[i]) + 1e-30;
                if (!(fabs(x1 - x2) <= bound) && bad++ < 3)
                    CHECK_MSG(0, "%s n=%lld element %lld: %.9g vs %.9g (dy %.9g)", vt_binary_op_name(bops[u]),
                              (long long)n, (long long)i, x2, x1, dy[i]);
            }
            CHECK(bad == 0);
        }
        vt_isa_force(0);
        CHECK_OK(vt_ternary(VT_ADDCMUL, &o1.t, &a.t, &b.t, &c.t, VT_F32, vt_scalar_from_double(0.3)));
        vt_isa_force(vec);
        CHECK_OK(vt_ternary(VT_ADDCMUL, &o2.t, &a.t, &b.t, &c.t, VT_F32, vt_scalar_from_double(0.3)));
        CHECK(ht_compare("addcmul", &o2.t, &o1.t, -1) == 0);
        ht_free(&a); ht_free(&b); ht_free(&c); ht_free(&o1); ht_free(&o2);
    }
    vt_stream_store_force(0);
}

/* f32 sigmoid on every path against fp64: exp(-|x|) (Cephes, about 1 ulp),
 * 1 + e and the division (half an ulp each) bound the vector form by 3 ulp
 * of the result. Results below 2^-126 (x < -87.3) are denormal: the vector
 * form keeps them (within two denormal ulps), the portable float formula
 * and CPU PyTorch give 0 once 1 + exp(-x) overflows (x < -88.7), so the
 * bound there is absolute, 2^-126. Specials:
 * +inf -> 1, -inf -> 0, NaN stays NaN, -0 -> 0.5. */
static void sigmoid_path(unsigned vec) {
    const float specials[] = {INFINITY, -INFINITY, -0.0f, 0.0f, 1e-30f, -1e-30f, 88.8f, -88.8f, -100.0f,
                              -103.0f, -104.5f, -150.0f, 17.0f, 16.5f, -16.5f, 0.625f, -1.25f};
    const int ns = (int)(sizeof specials / sizeof specials[0]);
    const int64_t n = 4099 + ns;
    host_tensor a = ht_1d(VT_F32, n), o = ht_1d(VT_F32, n);
    float *x = (float *)a.block;
    for (int64_t i = 0; i < n - ns - 1; i++) x[i] = -110.0f + 130.0f * (float)i / (float)(n - ns); /* -110 .. 20 */
    for (int k = 0; k < ns; k++) x[n - ns - 1 + k] = specials[k];
    x[n - 1] = NAN;
    vt_isa_force(vec);
    CHECK_OK(vt_unary(VT_SIGMOID, &o.t, &a.t, VT_F32));
    const float *y = (const float *)o.block;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(x[i])) {
            bad += !isnan(y[i]);
            continue;
        }
        double ref = 1.0 / (1.0 + exp(-(double)x[i]));
        double bound = 3.0 * ldexp(fabs(ref), -23) + (ref < 0x1p-126 ? 0x1p-126 : 0.0);
        if (!(fabs((double)y[i] - ref) <= bound) && bad++ < 3)
            CHECK_MSG(0, "sigmoid isa %#x x=%.9g: %.9g vs fp64 %.17g", vec, x[i], y[i], ref);
    }
    CHECK(bad == 0);
    ht_free(&a); ht_free(&o);
}

TEST(kernels_sigmoid_accuracy) {
    unsigned active = vt_isa_active();
    const unsigned vecs[3] = {0, VT_ISA_AVX2, VT_ISA_AVX2 | VT_ISA_AVX512};
    for (int v = 0; v < 3; v++)
        if ((vecs[v] & vt_isa_available()) == vecs[v]) sigmoid_path(vecs[v]);
    vt_isa_force(active);
}

TEST(kernels_activation_isa_paths) {
    unsigned active = vt_isa_active();
    const unsigned vecs[2] = {VT_ISA_AVX2, VT_ISA_AVX2 | VT_ISA_AVX512};
    for (int v = 0; v < 2; v++)
        if ((vecs[v] & vt_isa_available()) == vecs[v]) activation_path(vecs[v]);
    vt_isa_force(active);
}

/* f32 gelu on every path against fp64, 0.5 x (1 + erf(x / sqrt 2)): the
 * vector erf (erf_table.h, within 2.1 ulp of fp64) errs absolutely near
 * +-1, so 1 + erf carries up to 3 * 2^-24 (erf, the rounded x / sqrt 2,
 * 1 + erf), scaled by 0.5 |x|; the two products add 2 ulp of the result.
 * Specials: +-inf give NaN (CPU PyTorch's float gelu), NaN stays, -0 -> -0.
 * The AVX2 and AVX-512 forms run the same operations: the same bits.
 * Leaves the output in *out. */
static void gelu_path(unsigned vec, host_tensor *out) {
    const float specials[] = {-0.0f, 0.0f, 1e-30f, -1e-30f, 1e-8f, 3.9f, -3.9f, 4.0f, 5.657f, -5.657f, 6.0f, -6.0f,
                              10.0f, -10.0f, 0.25f, 0.5f, -0.75f, 2.75f, 1e6f, -1e6f};
    const int ns = (int)(sizeof specials / sizeof specials[0]);
    const int64_t n = 8191 + ns + 3;
    host_tensor a = ht_1d(VT_F32, n), o = ht_1d(VT_F32, n);
    float *x = (float *)a.block;
    for (int64_t i = 0; i < n - ns - 3; i++) x[i] = -8.0f + 16.0f * (float)i / (float)(n - ns - 3);
    for (int k = 0; k < ns; k++) x[n - ns - 3 + k] = specials[k];
    x[n - 3] = INFINITY, x[n - 2] = -INFINITY, x[n - 1] = NAN;
    vt_isa_force(vec);
    CHECK_OK(vt_unary(VT_GELU, &o.t, &a.t, VT_F32));
    const float *y = (const float *)o.block;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(x[i]) || isinf(x[i])) {
            bad += !isnan(y[i]);
            continue;
        }
        double ref = 0.5 * (double)x[i] * (1.0 + erf((double)x[i] / sqrt(2.0)));
        double bound = 0.5 * fabs((double)x[i]) * 3.0 * 0x1p-24 + 2.0 * ldexp(fabs(ref), -23) + 0x1p-149;
        if (!(fabs((double)y[i] - ref) <= bound) && bad++ < 3)
            CHECK_MSG(0, "gelu isa %#x x=%.9g: %.9g vs fp64 %.17g", vec, x[i], y[i], ref);
    }
    CHECK(bad == 0);
    CHECK(signbit(y[n - ns - 3]) && y[n - ns - 3] == 0.0f); /* gelu(-0) = -0 */
    ht_free(&a);
    *out = o;
}

TEST(kernels_gelu_accuracy) {
    unsigned active = vt_isa_active();
    const unsigned vecs[3] = {0, VT_ISA_AVX2, VT_ISA_AVX2 | VT_ISA_AVX512};
    host_tensor o[3];
    int ran[3] = {0, 0, 0};
    for (int v = 0; v < 3; v++)
        if ((vecs[v] & vt_isa_available()) == vecs[v]) gelu_path(vecs[v], &o[v]), ran[v] = 1;
    if (ran[1] && ran[2]) CHECK(ht_compare("gelu avx2 vs avx512", &o[1].t, &o[2].t, -1) == 0);
    for (int v = 0; v < 3; v++)
        if (ran[v]) ht_free(&o[v]);
    vt_isa_force(active);
}

/* bf16 activations: each result is the f32 kernel's result for the widened
 * input, rounded once to nearest even (NaN -> 0x7fc0). The fused AVX512-BF16
 * loops (vt_bf16_act) and the staged path (every other ISA, and strided
 * operands on any) must both give exactly those bits: at every tail
 * length, from an unaligned start, on specials and on inputs whose f32
 * results are denormal (silu and sigmoid far left), which VCVTNEPS2BF16
 * would flush. */
static void bf16_activation_path(unsigned vec) {
    const vt_unary_op uops[] = {VT_SILU, VT_GELU, VT_GELU_TANH, VT_TANH, VT_SIGMOID};
    const vt_binary_op bops[] = {VT_SILU_BACKWARD, VT_GELU_BACKWARD, VT_GELU_TANH_BACKWARD};
    const float specials[] = {NAN, INFINITY, -INFINITY, -0.0f, 0.0f, -100.0f, -95.0f, -90.0f, -88.5f, -87.0f,
                              1e-30f, -1e-30f, 3.9f, -3.9f, 4.0f, -4.0f, 6.0f, -6.0f, 0.625f, -1.25f};
    const int ns = (int)(sizeof specials / sizeof specials[0]);
    const int64_t sizes[] = {1, 15, 16, 17, 33, 1000, (1 << 16) + 37};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const int64_t n = sizes[k];
        host_tensor a = ht_1d(VT_BF16, n + 1), b = ht_1d(VT_BF16, n + 1), o = ht_1d(VT_BF16, n + 1);
        host_tensor af = ht_1d(VT_F32, n), bf = ht_1d(VT_F32, n), of = ht_1d(VT_F32, n);
        host_tensor as = ht_strided(VT_BF16, n, 2), os = ht_strided(VT_BF16, n, 2);
        uint16_t *xa = (uint16_t *)a.block + 1, *xb = (uint16_t *)b.block + 1;
        for (int64_t i = 0; i < n; i++) {
            float v = (float)((double)(next_u64() >> 11) * 0x1p-53 * 24.0 - 12.0);
            if (i % 7 == 3) v = specials[(i / 7) % ns];
            xa[i] = vt_f32_to_bf16(v);
            xb[i] = vt_f32_to_bf16((float)((double)(next_u64() >> 11) * 0x1p-53 * 24.0 - 12.0));
            ((uint16_t *)as.block)[3 + 2 * i] = xa[i];
        }
        a.t.offset = b.t.offset = o.t.offset = 1; /* an unaligned start */
        a.t.sizes[0] = b.t.sizes[0] = o.t.sizes[0] = n;
        vt_convert(VT_BF16, xa, 1, VT_F32, af.block, 1, n);
        vt_convert(VT_BF16, xb, 1, VT_F32, bf.block, 1, n);
        vt_isa_force(vec);
        for (int u = 0; u < 5 + 3; u++) {
            const char *name = u < 5 ? vt_unary_op_name(uops[u]) : vt_binary_op_name(bops[u - 5]);
            if (u < 5) {
                CHECK_OK(vt_unary(uops[u], &of.t, &af.t, VT_F32));
                CHECK_OK(vt_unary(uops[u], &o.t, &a.t, VT_BF16));
                CHECK_OK(vt_unary(uops[u], &os.t, &as.t, VT_BF16));
            } else {
                CHECK_OK(vt_binary(bops[u - 5], &of.t, &bf.t, &af.t, VT_F32, vt_scalar_from_int(1)));
                CHECK_OK(vt_binary(bops[u - 5], &o.t, &b.t, &a.t, VT_BF16, vt_scalar_from_int(1)));
                memset(os.block, 0, os.bytes);
            }
            const float *rf = (const float *)of.block;
            const uint16_t *r = (const uint16_t *)o.block + 1, *rs = (const uint16_t *)os.block + 3;
            int64_t bad = 0;
            for (int64_t i = 0; i < n; i++) {
                uint16_t want = vt_f32_to_bf16(rf[i]);
                if ((r[i] != want || (u < 5 && rs[2 * i] != want)) && bad++ < 3)
                    CHECK_MSG(0, "%s bf16 isa %#x n=%lld x=%a: %#x (strided %#x), f32 result %a rounds to %#x", name,
                              vec, (long long)n, (double)vt_bf16_to_f32(xa[i]), r[i], u < 5 ? rs[2 * i] : 0,
                              (double)rf[i], want);
            }
            CHECK(bad == 0);
        }
        ht_free(&a); ht_free(&b); ht_free(&o); ht_free(&af); ht_free(&bf); ht_free(&of);
        ht_free(&as); ht_free(&os);
    }
}

TEST(kernels_bf16_activation_isa_paths) {
    unsigned active = vt_isa_active();
    const unsigned vecs[4] = {0, VT_ISA_AVX2, VT_ISA_AVX2 | VT_ISA_AVX512,
                              VT_ISA_AVX2 | VT_ISA_AVX512 | VT_ISA_AVX512BF16};
    for (int v = 0; v < 4; v++)
        if ((vecs[v] & vt_isa_available()) == vecs[v]) bf16_activation_path(vecs[v]);
    CHECK(!(vt_isa_available() & VT_ISA_AVX512BF16) || vt_isa_force(vecs[3]) != vecs[3] || vt_bf16_act() != NULL);
    vt_isa_force(active);
}
