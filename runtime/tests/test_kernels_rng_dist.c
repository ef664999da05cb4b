/* test_kernels_rng_dist.c — the distribution kernels on the Philox stream:
 * the AVX-512 block generator against the portable one, reproducibility
 * across layouts and offsets, statistical sanity with bounds from the
 * sample size, and error statuses. */
#include "test_kernels_util.h"

TEST(kernels_rng_philox_paths_agree) {
    uint32_t key[2] = {0x12345678u, 0x9abcdef0u};
    uint32_t a[4 * 53], b[4 * 53];
    unsigned saved = vt_isa_active();
    vt_isa_force(0);
    vt_philox_blocks(key, 0xfffffffffffffff0ull, 53, a); /* crosses the 64-bit counter wrap */
    vt_isa_force(saved);
    vt_philox_blocks(key, 0xfffffffffffffff0ull, 53, b);
    CHECK(memcmp(a, b, sizeof a) == 0);
    uint32_t one[4], ctr[4] = {7, 0, 0, 0};
    vt_philox4x32_10(ctr, key, one);
    vt_philox_blocks(key, 7, 1, a);
    CHECK(memcmp(one, a, sizeof one) == 0);
}

TEST(kernels_rng_dropout_layout_and_stats) {
    const vt_dtype dts[] = {VT_F32, VT_BF16, VT_F16, VT_F64};
    for (size_t d = 0; d < 4; d++) {
        int64_t rows = 257, cols = 301, n = rows * cols;
        host_tensor x = ht_1d(dts[d], n), o1 = ht_1d(dts[d], n), m1 = ht_1d(VT_BOOL, n);
        host_tensor o2 = ht_transposed(dts[d], rows, cols), m2 = ht_transposed(VT_BOOL, rows, cols);
        double one = 1.0;
        for (int64_t i = 0; i < n; i++) vt_convert(VT_F64, &one, 1, dts[d], (char *)x.block + i * (int64_t)vt_dtype_size(dts[d]), 1, 1);
        CHECK_OK(vt_rng_dropout(&o1.t, &m1.t, &x.t, 0.1, 5, 3));
        vt_tensor x2 = x.t;
        x2.ndim = 2; x2.sizes[0] = rows; x2.sizes[1] = cols; x2.strides[0] = cols; x2.strides[1] = 1;
        CHECK_OK(vt_rng_dropout(&o2.t, &m2.t, &x2, 0.1, 5, 3));
        vt_tensor o1v = o1.t, m1v = m1.t;
        o1v.ndim = m1v.ndim = 2;
        o1v.sizes[0] = m1v.sizes[0] = rows; o1v.sizes[1] = m1v.sizes[1] = cols;
        o1v.strides[0] = m1v.strides[0] = cols; o1v.strides[1] = m1v.strides[1] = 1;
        CHECK(ht_compare("dropout layout", &o1v, &o2.t, -1) == 0);
        CHECK(ht_compare("dropout mask layout", &m1v, &m2.t, -1) == 0);
        int64_t kept = 0;
        for (int64_t i = 0; i < n; i++) kept += ((uint8_t *)m1.block)[i];
        double rate = (double)kept / (double)n, sd = sqrt(0.9 * 0.1 / (double)n);
        CHECK_MSG(fabs(rate - 0.9) < 6 * sd, "keep rate %g", rate);
        double v;
        for (int64_t i = 0; i < 50; i++) {
            vt_convert(dts[d], (char *)o1.block + i * (int64_t)vt_dtype_size(dts[d]), 1, VT_F64, &v, 1, 1);
            double want = ((uint8_t *)m1.block)[i] ? 1.0 / 0.9 : 0.0;
            CHECK_MSG(fabs(v - want) <= ulp_tolerance(dts[d]) * 2 + 1e-6 * (dts[d] == VT_F32), "dropout value %g", v);
        }
        ht_free(&x); ht_free(&o1); ht_free(&m1); ht_free(&o2); ht_free(&m2);
    }
}

TEST(kernels_rng_bernoulli_random_exponential) {
    int64_t n = 100000;
    host_tensor b = ht_1d(VT_F32, n), p = ht_1d(VT_F64, 1);
    ((double *)p.block)[0] = 0.3;
    vt_tensor pv = p.t;
    pv.ndim = 0;
    CHECK_OK(vt_rng_bernoulli(&b.t, &pv, 0, 1, 0));
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += ((float *)b.block)[i];
    CHECK_MSG(fabs(s / n - 0.3) < 6 * sqrt(0.21 / n), "bernoulli rate %g", s / n);
    ((double *)p.block)[0] = 1.5;
    CHECK_STATUS(vt_rng_bernoulli(&b.t, &pv, 0, 1, 0), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_rng_bernoulli(&b.t, NULL, -0.1, 1, 0), VT_ERR_INVALID_ARGUMENT);
    host_tensor r = ht_1d(VT_I64, n);
    CHECK_OK(vt_rng_random(&r.t, 9, 0, -5, 10));
    int64_t cnt[10] = {0};
    for (int64_t i = 0; i < n; i++) {
        int64_t v = ((int64_t *)r.block)[i];
        CHECK(v >= -5 && v < 5);
        if (v >= -5 && v < 5) cnt[v + 5]++;
    }
    for (int k = 0; k < 10; k++) CHECK_MSG(fabs(cnt[k] - n / 10.0) < 6 * sqrt(n * 0.09), "random bucket %d: %lld", k, (long long)cnt[k]);
    CHECK_OK(vt_rng_exponential(&b.t, 3, 0, 2.0));
    s = 0;
    for (int64_t i = 0; i < n; i++) {
        CHECK(((float *)b.block)[i] >= 0);
        s += ((float *)b.block)[i];
    }
    CHECK_MSG(fabs(s / n - 0.5) < 6 * 0.5 / sqrt(n), "exponential mean %g", s / n);
    CHECK_STATUS(vt_rng_exponential(&b.t, 3, 0, 0.0), VT_ERR_INVALID_ARGUMENT);
    ht_free(&b); ht_free(&p); ht_free(&r);
}

TEST(kernels_rng_randperm_multinomial) {
    const int64_t ns[] = {1, 2, 17, 1000, 100003};
    for (size_t k = 0; k < 5; k++) {
        int64_t n = ns[k];
        host_tensor o = ht_1d(VT_I64, n);
        CHECK_OK(vt_rng_randperm(&o.t, 11, 4));
        uint8_t *seen = calloc((size_t)n, 1);
        int ok = 1;
        for (int64_t i = 0; i < n; i++) {
            int64_t v = ((int64_t *)o.block)[i];
            if (v < 0 || v >= n || seen[v]) ok = 0;
            else seen[v] = 1;
        }
        CHECK_MSG(ok, "randperm(%lld) is not a permutation", (long long)n);
        free(seen);
        ht_free(&o);
    }
    int64_t ps[2] = {2, 4}, os[2] = {2, 20000};
    host_tensor p = ht_new(VT_F32, 2, ps), o = ht_new(VT_I64, 2, os);
    float w[8] = {1, 2, 0, 5, 0.25f, 0.25f, 0.25f, 0.25f};
    memcpy(p.block, w, sizeof w);
    CHECK_OK(vt_rng_multinomial(&o.t, &p.t, 1, 1, 0));
    for (int r = 0; r < 2; r++) {
        int64_t cnt[4] = {0};
        for (int64_t s = 0; s < 20000; s++) cnt[((int64_t *)o.block)[r * 20000 + s]]++;
        double tot = r ? 1.0 : 8.0;
        for (int c = 0; c < 4; c++) {
            double pr = w[r * 4 + c] / tot, want = pr * 20000;
            CHECK_MSG(fabs(cnt[c] - want) <= 6 * sqrt(20000 * pr * (1 - pr)) + 0.5, "multinomial row %d cat %d: %lld",
                      r, c, (long long)cnt[c]);
        }
    }
    int64_t os2[2] = {2, 3};
    host_tensor o2 = ht_new(VT_I64, 2, os2);
    CHECK_OK(vt_rng_multinomial(&o2.t, &p.t, 0, 1, 0));
    for (int r = 0; r < 2; r++) {
        int64_t *v = (int64_t *)o2.block + r * 3;
        CHECK(v[0] != v[1] && v[1] != v[2] && v[0] != v[2]);
        if (r == 0) CHECK(v[0] != 2 && v[1] != 2 && v[2] != 2); /* zero weight never drawn */
    }
    int64_t os3[2] = {2, 4};
    host_tensor o3 = ht_new(VT_I64, 2, os3);
    CHECK_STATUS(vt_rng_multinomial(&o3.t, &p.t, 0, 1, 0), VT_ERR_INVALID_ARGUMENT); /* row 0: 3 non-zero */
    ((float *)p.block)[1] = -1;
    CHECK_STATUS(vt_rng_multinomial(&o2.t, &p.t, 1, 1, 0), VT_ERR_INVALID_ARGUMENT);
    ht_free(&p); ht_free(&o); ht_free(&o2); ht_free(&o3);
}
