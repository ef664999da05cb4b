/* test_kernels_mxu.c — vt_matmul against vt_ref_matmul on every MXU engine
 * the CPU has: bit-exact where every partial sum is exact (K = 1, small
 * integers), within the fp32 accumulation bound otherwise, plus the
 * torch_xla precision recipe, specials, layouts, batches, bias, errors and
 * the kept B panels. The paths a product can take are in
 * test_kernels_mxu_paths.c. */
#include <pthread.h>

#include "test_kernels_mxu_util.h"

static const int64_t odd[] = {1, 15, 17, 33};

TEST(kernels_mxu_exact_small_integers) {
    for (size_t e = 0; e < N_ENGINES; e++) {
        if (!use_engine(e)) continue;
        for (int p = 0; p < 3; p++)
            for (size_t i = 0; i < 4; i++)
                for (size_t k = 0; k < 4; k++) {
                    int64_t M = odd[i], K = odd[k] * 2 + 1, N = odd[(i + k) % 4];
                    vt_dtype dts[] = {VT_F32, VT_BF16, VT_F16, VT_F64};
                    vt_dtype dt = dts[(i + k + (size_t)p) % 4];
                    host_tensor a = mat(dt, M, K), b = mat(dt, K, N);
                    fill(&a, 1), fill(&b, 1);
                    run_case("ints", &a, &b, (vt_precision)p, 1);
                    ht_free(&a), ht_free(&b);
                }
    }
    restore_engine();
}

TEST(kernels_mxu_exact_k1) {
    /* One product per output: DEFAULT and bf16/f16 inputs are exact; HIGH and
     * HIGHEST add 3 or 6 products in f32, so they get the bound. */
    for (size_t e = 0; e < N_ENGINES; e++) {
        if (!use_engine(e)) continue;
        vt_dtype dts[] = {VT_F32, VT_BF16, VT_F16};
        for (size_t d = 0; d < 3; d++)
            for (int p = 0; p < 3; p++) {
                host_tensor a = mat(dts[d], 17, 1), b = mat(dts[d], 1, 33);
                fill(&a, 0), fill(&b, 0);
                run_case("k1", &a, &b, (vt_precision)p, p == 0 || dts[d] != VT_F32);
                ht_free(&a), ht_free(&b);
            }
    }
    restore_engine();
}

TEST(kernels_mxu_random_within_bound) {
    static const int64_t shapes[][3] = {{1, 1, 1}, {15, 17, 31}, {33, 257, 17}, {31, 64, 33}, {2, 300, 3}};
    for (size_t e = 0; e < N_ENGINES; e++) {
        if (!use_engine(e)) continue;
        for (size_t s = 0; s < 5; s++)
            for (int p = 0; p < 3; p++) {
                vt_dtype dt = p == 0 && s % 2 ? VT_BF16 : VT_F32;
                host_tensor a = mat(dt, shapes[s][0], shapes[s][1]), b = mat(dt, shapes[s][1], shapes[s][2]);
                fill(&a, 0), fill(&b, 0);
                run_case("random", &a, &b, (vt_precision)p, 0);
                ht_free(&a), ht_free(&b);
            }
    }
    restore_engine();
}

/* torch_xla test_mat_mul_precision: products of values in [0.99, 1.01];
 * the max error against fp64 lies in [w/4, w], w = (1+2^-b)^2 - 1,
 * b = 8 / 14 / 22 bits. torch_xla multiplies diagonal matrices; here an
 * [n, 1] x [1, n] outer product gives n^2 products instead of n (every sum
 * is one exact term either way), so the max lands near the passes' worst
 * case on every engine, not above w/4 by the luck of 64 draws. Each case
 * draws from its own seed: the values do not depend on which tests ran. */
TEST(kernels_mxu_torch_xla_precision_recipe) {
    const int bits[3] = {8, 14, 22};
    const int64_t n = 64;
    for (size_t e = 0; e < N_ENGINES; e++) {
        if (!use_engine(e)) continue;
        for (int p = 0; p < 3; p++) {
            rng_state = 0x243f6a8885a308d3ull + (uint64_t)p;
            host_tensor a = mat(VT_F32, n, 1), b = mat(VT_F32, 1, n), out = mat(VT_F32, n, n);
            for (int64_t i = 0; i < n; i++) {
                set_f(&a, i, (double)(float)(0.99 + 0.02 * (double)(next_u64() >> 11) * 0x1p-53));
                set_f(&b, i, (double)(float)(0.99 + 0.02 * (double)(next_u64() >> 11) * 0x1p-53));
            }
            CHECK_OK(vt_matmul(&out.t, &a.t, &b.t, NULL, 1.0, 0.0, (vt_precision)p));
            double maxerr = 0, w = pow(1.0 + ldexp(1.0, -bits[p]), 2) - 1.0;
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < n; j++) {
                    double want = get_at(&a.t, i, 0) * get_at(&b.t, 0, j);
                    maxerr = fmax(maxerr, fabs(get_at(&out.t, i, j) - want));
                }
            CHECK_MSG(maxerr >= w / 4 && maxerr <= w, "%s prec %d: max error %.3g outside [%.3g, %.3g]",
                      vt_mxu_path(), p, maxerr, w / 4, w);
            ht_free(&a), ht_free(&b), ht_free(&out);
        }
    }
    restore_engine();
}

TEST(kernels_mxu_specials) {
    for (size_t e = 0; e < N_ENGINES; e++) {
        if (!use_engine(e)) continue;
        for (int p = 0; p < 3; p++) {
            /* a = [inf, -0, nan, 1; ...] x b = I-ish rows, K = 2 */
            host_tensor a = mat(VT_F32, 4, 2), b = mat(VT_F32, 2, 2), out = mat(VT_F32, 4, 2);
            double av[8] = {INFINITY, 1.0, -0.0, -0.0, NAN, 1.0, 3.0, 1e38};
            double bv[4] = {1.0, -0.0, 2.0, 0.0};
            for (int i = 0; i < 8; i++) set_f(&a, i, av[i]);
            for (int i = 0; i < 4; i++) set_f(&b, i, bv[i]);
            CHECK_OK(vt_matmul(&out.t, &a.t, &b.t, NULL, 1.0, 0.0, (vt_precision)p));
            /* inf*1 + 1*2 = inf (the guard keeps HIGH/HIGHEST from NaN) */
            CHECK_MSG(isinf(get_at(&out.t, 0, 0)) && get_at(&out.t, 0, 0) > 0, "%s p%d inf: %g", vt_mxu_path(), p,
                      get_at(&out.t, 0, 0));
            CHECK(isnan(get_at(&out.t, 0, 1))); /* inf * -0 */
            { /* -0*1 + -0*2: sums start at +0, as an MXU accumulator (and AMX) does: +0 on every path */
                double z = get_at(&out.t, 1, 0);
                CHECK_MSG(z == 0 && !signbit(z), "%s: all -0 sum gave %g", vt_mxu_path(), z);
            }
            CHECK(isnan(get_at(&out.t, 2, 0)));
            /* 3*1 + 1e38*2 overflows bf16? no: 2e38 < max; product exact, sum finite */
            CHECK(isfinite(get_at(&out.t, 3, 0)));
            host_tensor ref = mat(VT_F32, 4, 2);
            CHECK_OK(vt_ref_matmul(&ref.t, &a.t, &b.t, NULL, 1.0, 0.0, (vt_precision)p));
            CHECK(ht_compare("specials", &out.t, &ref.t, -1) == 0);
            ht_free(&a), ht_free(&b), ht_free(&out), ht_free(&ref);
        }
    }
    restore_engine();
}

/* Batches of products above the parallel threshold: an even or long
 * batch runs whole products on each thread, a short odd one splits each
 * product over the threads; a broadcast b (batch stride 0) makes one
 * product of all the rows (a's rows copied together first when they do
 * not merge). Either way each product gives the bits it gives alone
 * (random values), and small integers give the reference's exact sums. */
static vt_tensor slice(const host_tensor *h, int64_t i) {
    vt_tensor t = h->t;
    t.offset += i * t.strides[0];
    t.ndim = 2;
    t.sizes[0] = h->t.sizes[1], t.sizes[1] = h->t.sizes[2];
    t.strides[0] = h->t.strides[1], t.strides[1] = h->t.strides[2];
    return t;
}

TEST(kernels_mxu_batches_of_large_products) {
    const vt_dtype dts[2] = {VT_BF16, VT_F32};
    const int64_t nbs[3] = {4, 3, 9};
    for (size_t e = 0; e < N_ENGINES; e++) {
        if (!use_engine(e)) continue;
        for (int d = 0; d < 2; d++)
            for (int k = 0; k < 3; k++)
                for (int v = 0; v < 8; v++) {
                    const int bcast = v & 1, ints = v >> 1 & 1, tr = v >> 2;
                    /* 70 x 96 x 50: 336k products each, above PARALLEL_MACS;
                     * tr: a's rows laid out [70][batch][96], so a's batch and
                     * rows do not merge (a transposed activation) */
                    int64_t as[3] = {tr ? 70 : nbs[k], tr ? nbs[k] : 70, 96}, bs[3] = {bcast ? 1 : nbs[k], 96, 50},
                            os[3] = {nbs[k], 70, 50};
                    host_tensor a = ht_new(dts[d], 3, as), b = ht_new(dts[d], 3, bs), out = ht_new(dts[d], 3, os),
                                ref = ht_new(dts[d], 3, os);
                    fill(&a, ints), fill(&b, ints);
                    if (tr) {
                        const int64_t s0 = a.t.strides[0];
                        a.t.sizes[0] = nbs[k], a.t.sizes[1] = 70, a.t.strides[0] = a.t.strides[1], a.t.strides[1] = s0;
                    }
                    /* b broadcast over the batch: one product of all the rows */
                    if (bcast) b.t.sizes[0] = nbs[k], b.t.strides[0] = 0;
                    CHECK_OK(vt_matmul(&out.t, &a.t, &b.t, NULL, 1.0, 0.0, VT_PRECISION_DEFAULT));
                    if (ints) {
                        CHECK_OK(vt_ref_matmul(&ref.t, &a.t, &b.t, NULL, 1.0, 0.0, VT_PRECISION_DEFAULT));
                    } else {
                        for (int64_t i = 0; i < nbs[k]; i++) {
                            vt_tensor ai = slice(&a, i), bi = slice(&b, i), oi = slice(&ref, i);
                            CHECK_OK(vt_matmul(&oi, &ai, &bi, NULL, 1.0, 0.0, VT_PRECISION_DEFAULT));
                        }
                    }
                    char what[96];
                    snprintf(what, sizeof what, "%s batch %lld bcast %d ints %d tr %d %s", vt_mxu_path(),
                             (long long)nbs[k], bcast, ints, tr, vt_dtype_name(dts[d]));
                    CHECK(ht_compare(what, &out.t, &ref.t, -1) == 0);
                    ht_free(&a), ht_free(&b), ht_free(&out), ht_free(&ref);
                }
    }
    restore_engine();
}

TEST(kernels_mxu_layouts_batch_bias) {
    for (size_t e = 0; e < N_ENGINES; e++) {
        if (!use_engine(e)) continue;
        /* Transposed a and b, a strided (every other column) view. */
        host_tensor at = ht_transposed(VT_F32, 17, 33), bt = ht_transposed(VT_F32, 33, 15);
        fill(&at, 1), fill(&bt, 1);
        run_case("transposed", &at, &bt, VT_PRECISION_HIGH, 1);
        host_tensor big = mat(VT_F32, 17, 66);
        fill(&big, 1);
        host_tensor sl = big;
        sl.t.sizes[1] = 33, sl.t.strides[1] = 2, sl.t.offset = 1;
        run_case("strided", &sl, &bt, VT_PRECISION_DEFAULT, 1);
        ht_free(&at), ht_free(&bt), ht_free(&big);

        /* Batch broadcast: a [3, 1, 5, 7] x b [2, 7, 4] -> out [3, 2, 5, 4],
         * bias [4] broadcast, alpha/beta. */
        int64_t as[4] = {3, 1, 5, 7}, bs[3] = {2, 7, 4}, os[4] = {3, 2, 5, 4}, biass[1] = {4};
        host_tensor a = ht_new(VT_F32, 4, as), b = ht_new(VT_F32, 3, bs), out = ht_new(VT_F32, 4, os),
                    ref = ht_new(VT_F32, 4, os), bias = ht_new(VT_F32, 1, biass);
        fill(&a, 1), fill(&b, 1), fill(&bias, 1);
        CHECK_OK(vt_matmul(&out.t, &a.t, &b.t, &bias.t, 2.0, -0.5, VT_PRECISION_HIGHEST));
        CHECK_OK(vt_ref_matmul(&ref.t, &a.t, &b.t, &bias.t, 2.0, -0.5, VT_PRECISION_HIGHEST));
        CHECK(ht_compare("batch+bias", &out.t, &ref.t, -1) == 0);
        /* Bias aliasing out exactly (in-place addmm). */
        CHECK_OK(vt_ref_matmul(&ref.t, &a.t, &b.t, &out.t, 1.0, 1.0, VT_PRECISION_DEFAULT));
        CHECK_OK(vt_matmul(&out.t, &a.t, &b.t, &out.t, 1.0, 1.0, VT_PRECISION_DEFAULT));
        CHECK(ht_compare("bias aliases out", &out.t, &ref.t, -1) == 0);
        ht_free(&a), ht_free(&b), ht_free(&out), ht_free(&ref), ht_free(&bias);

        /* bf16 out with bias: rounded once from alpha*C + beta*bias. */
        host_tensor a2 = mat(VT_BF16, 5, 9), b2 = mat(VT_BF16, 9, 6), o2 = mat(VT_BF16, 5, 6), r2 = mat(VT_BF16, 5, 6);
        host_tensor bias2 = mat(VT_F32, 5, 1);
        fill(&a2, 1), fill(&b2, 1), fill(&bias2, 0);
        CHECK_OK(vt_matmul(&o2.t, &a2.t, &b2.t, &bias2.t, 0.5, 3.0, VT_PRECISION_DEFAULT));
        CHECK_OK(vt_ref_matmul(&r2.t, &a2.t, &b2.t, &bias2.t, 0.5, 3.0, VT_PRECISION_DEFAULT));
        CHECK(ht_compare("bf16 bias", &o2.t, &r2.t, -1) == 0);
        ht_free(&a2), ht_free(&b2), ht_free(&o2), ht_free(&r2), ht_free(&bias2);

        /* A column-major out (written column by column), f32 and bf16,
         * plain, with alpha, beta and a bias, and with out as its own bias. */
        for (int h = 0; h < 2; h++) {
            vt_dtype dt = h ? VT_BF16 : VT_F32;
            host_tensor a3 = mat(dt, 37, 40), b3 = mat(dt, 40, 45), bias3 = mat(VT_F32, 37, 45);
            host_tensor o3 = ht_transposed(dt, 37, 45), r3 = mat(dt, 37, 45);
            fill(&a3, 1), fill(&b3, 1), fill(&bias3, 1);
            for (int with_bias = 0; with_bias < 2; with_bias++) {
                const vt_tensor *bp = with_bias ? &bias3.t : NULL;
                double al = with_bias ? 2.0 : 1.0, be = with_bias ? -0.5 : 0.0;
                CHECK_OK(vt_matmul(&o3.t, &a3.t, &b3.t, bp, al, be, VT_PRECISION_DEFAULT));
                CHECK_OK(vt_ref_matmul(&r3.t, &a3.t, &b3.t, bp, al, be, VT_PRECISION_DEFAULT));
                CHECK_MSG(ht_compare("column-major out", &o3.t, &r3.t, -1) == 0, "%s %s bias %d", vt_mxu_path(),
                          vt_dtype_name(dt), with_bias);
            }
            /* the bias is out itself (a weight gradient summed over chunks) */
            CHECK_OK(vt_ref_matmul(&r3.t, &a3.t, &b3.t, &o3.t, 1.0, 1.0, VT_PRECISION_DEFAULT));
            CHECK_OK(vt_matmul(&o3.t, &a3.t, &b3.t, &o3.t, 1.0, 1.0, VT_PRECISION_DEFAULT));
            CHECK_MSG(ht_compare("column-major out, bias aliases out", &o3.t, &r3.t, -1) == 0, "%s %s", vt_mxu_path(),
                      vt_dtype_name(dt));
            ht_free(&a3), ht_free(&b3), ht_free(&bias3), ht_free(&o3), ht_free(&r3);
        }
    }
    restore_engine();
}

/* A whose columns are contiguous (a weight gradient's X^T) is packed chunk
 * by chunk: it must pack the same bits as the row-major A of equal values,
 * on every engine, dtype (f16 through the converting line reader) and
 * precision, with specials, ragged M (not a multiple of 16 or 32) and
 * ragged K (not a multiple of 32), and stay within the accumulation bound
 * of the reference. */

TEST(kernels_mxu_large_parallel) {
    /* Big enough to use both cores, several tiles and K blocks. */
    host_tensor a = mat(VT_F32, 257, 600), b = mat(VT_F32, 600, 300);
    fill(&a, 1), fill(&b, 1);
    for (int p = 0; p < 3; p++) run_case("large", &a, &b, (vt_precision)p, 1);
    ht_free(&a), ht_free(&b);
}

/* K <= 512 widens the driver's claims to up to 1024 columns (mxu.c): ragged
 * N past one and two wide claims, f32 and bf16 operands (bf16: A read in
 * place, out rounded in the kernel), a plain out and one through the
 * scratch tiles (alpha and a bias). Small integers: every sum is exact, so
 * out must equal the scalar reference bit for bit on every engine. */
TEST(kernels_mxu_wide_claims_exact) {
    static const int64_t shapes[][3] = {{70, 96, 700}, {257, 512, 1100}, {33, 32, 1030}};
    static const vt_dtype dts[] = {VT_F32, VT_BF16};
    for (size_t e = 0; e < N_ENGINES; e++) {
        if (!use_engine(e)) continue;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (size_t d = 0; d < 2; d++)
                for (int form = 0; form < 2; form++) {
                    const int64_t M = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
                    host_tensor a = mat(dts[d], M, K), b = mat(dts[d], K, N), bias = mat(dts[d], M, N);
                    host_tensor out = mat(dts[d], M, N), ref = mat(dts[d], M, N);
                    fill(&a, 1), fill(&b, 1), fill(&bias, 1);
                    memset(out.block, 0xff, out.bytes);
                    const vt_tensor *bp = form ? &bias.t : NULL;
                    const double alpha = form ? 2.0 : 1.0, beta = form ? 0.5 : 0.0;
                    CHECK_OK(vt_matmul(&out.t, &a.t, &b.t, bp, alpha, beta, VT_PRECISION_DEFAULT));
                    CHECK_OK(vt_ref_matmul(&ref.t, &a.t, &b.t, bp, alpha, beta, VT_PRECISION_DEFAULT));
                    char what[160];
                    snprintf(what, sizeof what, "wide claims %s %s form %d %lldx%lldx%lld", vt_mxu_path(),
                             vt_dtype_name(dts[d]), form, (long long)M, (long long)K, (long long)N);
                    CHECK(ht_compare(what, &out.t, &ref.t, -1) == 0);
                    ht_free(&a), ht_free(&b), ht_free(&bias), ht_free(&out), ht_free(&ref);
                }
    }
    restore_engine();
}

/* A small C with a long K (M x N within 128 x 128 once padded to 32, K of
 * 4096 or more: a weight gradient of a layer with few channels) is summed
 * in K slices by groups, the groups' sums added in order (mxu.c). Small
 * integers: every partial sum is exact in any order, so out must equal the
 * scalar reference bit for bit on every engine, f32 and bf16 operands, A
 * transposed as a weight gradient's is (form 0) or not, K ending mid-slice
 * and mid-chunk, out plain or through alpha and a bias (form 1), always a
 * view with a gap that must stay untouched, and B produced row by row. */

TEST(kernels_mxu_zero_sizes_and_k0) {
    host_tensor a = mat(VT_F32, 3, 0), b = mat(VT_F32, 0, 4), out = mat(VT_F32, 3, 4), bias = mat(VT_F32, 3, 4);
    fill(&bias, 1);
    for (int64_t i = 0; i < 12; i++) set_f(&out, i, 99.0);
    CHECK_OK(vt_matmul(&out.t, &a.t, &b.t, NULL, 1.0, 0.0, VT_PRECISION_HIGH));
    for (int64_t i = 0; i < 12; i++) CHECK(((float *)out.block)[i] == 0.0f && !signbit(((float *)out.block)[i]));
    CHECK_OK(vt_matmul(&out.t, &a.t, &b.t, &bias.t, 1.0, 2.0, VT_PRECISION_DEFAULT));
    for (int64_t i = 0; i < 12; i++) CHECK(((float *)out.block)[i] == 2.0f * ((float *)bias.block)[i]);
    host_tensor a0 = mat(VT_F32, 0, 5), b0 = mat(VT_F32, 5, 4), o0 = mat(VT_F32, 0, 4);
    CHECK_OK(vt_matmul(&o0.t, &a0.t, &b0.t, NULL, 1.0, 0.0, VT_PRECISION_DEFAULT));
    int64_t s3[3] = {0, 3, 4}, sa[3] = {0, 3, 5};
    host_tensor ob = ht_new(VT_F32, 3, s3), ab = ht_new(VT_F32, 3, sa);
    CHECK_OK(vt_matmul(&ob.t, &ab.t, &b0.t, NULL, 1.0, 0.0, VT_PRECISION_DEFAULT));
    ht_free(&a), ht_free(&b), ht_free(&out), ht_free(&bias), ht_free(&a0), ht_free(&b0), ht_free(&o0);
    ht_free(&ob), ht_free(&ab);
}

TEST(kernels_mxu_errors) {
    host_tensor a = mat(VT_F32, 2, 3), b = mat(VT_F32, 4, 5), out = mat(VT_F32, 2, 5);
    CHECK_STATUS(vt_matmul(&out.t, &a.t, &b.t, NULL, 1, 0, VT_PRECISION_DEFAULT), VT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(vt_last_error(), "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)") != NULL);
    host_tensor bb = mat(VT_BF16, 3, 5);
    CHECK_STATUS(vt_matmul(&out.t, &a.t, &bb.t, NULL, 1, 0, VT_PRECISION_DEFAULT), VT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(vt_last_error(), "same dtype") != NULL);
    host_tensor ai = mat(VT_I32, 2, 3), bi = mat(VT_I32, 3, 5), oi = mat(VT_I32, 2, 5);
    CHECK_STATUS(vt_matmul(&oi.t, &ai.t, &bi.t, NULL, 1, 0, VT_PRECISION_DEFAULT), VT_ERR_UNSUPPORTED);
    host_tensor b3 = mat(VT_F32, 3, 5), o3 = mat(VT_F32, 2, 4);
    CHECK_STATUS(vt_matmul(&o3.t, &a.t, &b3.t, NULL, 1, 0, VT_PRECISION_DEFAULT), VT_ERR_INVALID_ARGUMENT);
    host_tensor v = ht_1d(VT_F32, 3);
    CHECK_STATUS(vt_matmul(&out.t, &v.t, &b3.t, NULL, 1, 0, VT_PRECISION_DEFAULT), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_matmul(&out.t, &a.t, &b3.t, NULL, 1, 0, (vt_precision)7), VT_ERR_INVALID_ARGUMENT);
    ht_free(&a), ht_free(&b), ht_free(&out), ht_free(&bb), ht_free(&ai), ht_free(&bi), ht_free(&oi);
    ht_free(&b3), ht_free(&o3), ht_free(&v);
}

TEST(kernels_mxu_path_names) {
    const char *p = vt_mxu_path();
    CHECK(!strcmp(p, "amx") || !strcmp(p, "avx512bf16") || !strcmp(p, "avx512") || !strcmp(p, "avx2") ||
          !strcmp(p, "scalar"));
    CHECK(vt_isa_force(0) == 0 && !strcmp(vt_mxu_path(), "scalar"));
    restore_engine();
}

TEST(kernels_mxu_queued_op) {
    CHECK_OK(vt_init());
    host_tensor a = mat(VT_F32, 9, 40), b = mat(VT_F32, 40, 7), out = mat(VT_F32, 9, 7), ref = mat(VT_F32, 9, 7);
    fill(&a, 1), fill(&b, 1);
    ht_device(&a), ht_device(&b), ht_device(&out);
    CHECK_OK(vt_op_matmul(0, "aten::mm", &out.t, &a.t, &b.t, NULL, 1.0, 0.0, VT_PRECISION_HIGH));
    CHECK_OK(vt_synchronize(0));
    CHECK_OK(vt_ref_matmul(&ref.t, &a.t, &b.t, NULL, 1.0, 0.0, VT_PRECISION_HIGH));
    CHECK(ht_compare("queued", &out.t, &ref.t, -1) == 0);
    /* Bad shapes fail at the op, named. */
    host_tensor bad = mat(VT_F32, 41, 7);
    ht_device(&bad);
    CHECK_STATUS(vt_op_matmul(0, "aten::mm", &out.t, &a.t, &bad.t, NULL, 1.0, 0.0, VT_PRECISION_DEFAULT),
                 VT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(vt_last_error(), "aten::mm: mat1 and mat2 shapes cannot be multiplied (9x40 and 41x7)") != NULL);
    ht_free(&a), ht_free(&b), ht_free(&out), ht_free(&ref), ht_free(&bad);
}

/* Products that name B's contents (vt_version) keep B's packed panels from
 * the second one on: every product gives the bits a fresh pack gives, and
 * reuse happens only for the same contents, view, precision and engine. */
typedef struct kept_worker {
    const vt_tensor *a, *b, *ref;
    vt_version v;
    atomic_int bad;
} kept_worker;

static void *kept_thread(void *p) {
    kept_worker *w = p;
    host_tensor o = mat(w->ref->dtype, w->ref->sizes[0], w->ref->sizes[1]);
    for (int i = 0; i < 40; i++) {
        if (vt_matmul_versioned(&o.t, w->a, w->b, NULL, 1.0, 0.0, VT_PRECISION_DEFAULT, w->v) != VT_OK ||
            ht_compare("kept, two threads", &o.t, w->ref, -1) != 0)
            atomic_fetch_add(&w->bad, 1);
    }
    ht_free(&o);
    return NULL;
}

TEST(kernels_mxu_kept_panels) {
    static const vt_dtype dts[] = {VT_F32, VT_BF16};
    for (size_t e = 0; e < N_ENGINES; e++) {
        if (!use_engine(e)) continue;
        for (size_t d = 0; d < 2; d++)
            for (int p = 0; p < 3; p++) {
                const int64_t M = 16, K = 70, N = 48;
                host_tensor a = mat(dts[d], M, K), b = mat(dts[d], K, 2 * N), o = mat(dts[d], M, N),
                            want = mat(dts[d], M, N);
                ht_fill_random(&a, 0, 0), ht_fill_random(&b, 0, 0);
                vt_tensor left = b.t, right = b.t; /* two views of one allocation */
                left.sizes[1] = right.sizes[1] = N;
                right.offset = N;
                const vt_version v = {777 + e, 1};
                vt_mxu_kept_clear();
                uint64_t hits = vt_mxu_kept_hits();
                CHECK_OK(vt_matmul(&want.t, &a.t, &left, NULL, 1.0, 0.0, (vt_precision)p));
                for (int i = 0; i < 3; i++) { /* seen, kept, reused */
                    memset(o.block, 0xff, (size_t)ht_block_elems(&o) * vt_dtype_size(o.t.dtype));
                    CHECK_OK(vt_matmul_versioned(&o.t, &a.t, &left, NULL, 1.0, 0.0, (vt_precision)p, v));
                    CHECK(ht_compare("kept: same contents", &o.t, &want.t, -1) == 0);
                }
                CHECK(vt_mxu_kept_hits() == hits + 1);
                /* the other view, another precision: never the kept panels */
                CHECK_OK(vt_matmul(&want.t, &a.t, &right, NULL, 1.0, 0.0, (vt_precision)p));
                CHECK_OK(vt_matmul_versioned(&o.t, &a.t, &right, NULL, 1.0, 0.0, (vt_precision)p, v));
                CHECK(ht_compare("kept: another view", &o.t, &want.t, -1) == 0);
                const vt_precision q = (vt_precision)((p + 1) % 3);
                CHECK_OK(vt_matmul(&want.t, &a.t, &left, NULL, 1.0, 0.0, q));
                CHECK_OK(vt_matmul_versioned(&o.t, &a.t, &left, NULL, 1.0, 0.0, q, v));
                CHECK(ht_compare("kept: another precision", &o.t, &want.t, -1) == 0);
                /* new contents under a new version */
                ht_fill_random(&b, 0, 0);
                const vt_version v2 = {v.gen, 2};
                CHECK_OK(vt_matmul(&want.t, &a.t, &left, NULL, 1.0, 0.0, (vt_precision)p));
                for (int i = 0; i < 3; i++) {
                    CHECK_OK(vt_matmul_versioned(&o.t, &a.t, &left, NULL, 1.0, 0.0, (vt_precision)p, v2));
                    CHECK(ht_compare("kept: new contents", &o.t, &want.t, -1) == 0);
                }
                ht_free(&a), ht_free(&b), ht_free(&o), ht_free(&want);
            }
    }
    restore_engine();
    /* two threads reusing one kept B at once */
    host_tensor a = mat(VT_F32, 32, 64), b = mat(VT_F32, 64, 96), want = mat(VT_F32, 32, 96);
    ht_fill_random(&a, 0, 0), ht_fill_random(&b, 0, 0);
    CHECK_OK(vt_matmul(&want.t, &a.t, &b.t, NULL, 1.0, 0.0, VT_PRECISION_DEFAULT));
    kept_worker w = {&a.t, &b.t, &want.t, {4242, 1}, 0};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) CHECK(pthread_create(&th[i], NULL, kept_thread, &w) == 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    CHECK(atomic_load(&w.bad) == 0);
    vt_mxu_kept_clear();
    ht_free(&a), ht_free(&b), ht_free(&want);
}
