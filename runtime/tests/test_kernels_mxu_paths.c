/* test_kernels_mxu_paths.c — the paths vt_matmul takes by layout, dtype
 * and shape (transposed A, the AVX2 and portable engines, the packers, bf16
 * words, f32 out, A read in place, rounded or in strips, produced rows, K
 * slices) give the bits of the path they stand in for, on every engine. */
#include "test_kernels_mxu_util.h"

TEST(kernels_mxu_transposed_a_same_bits_as_rows) {
    static const int64_t shapes[][3] = {{17, 33, 15}, {48, 70, 40}, {5, 1, 3}, {33, 100, 64}, {64, 64, 32}};
    static const vt_dtype dts[] = {VT_F32, VT_BF16, VT_F16}; /* f16: through the converting line reader */
    for (size_t e = 0; e < N_ENGINES; e++) {
        if (!use_engine(e)) continue;
        for (size_t d = 0; d < 3; d++)
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
                for (int p = 0; p < 3; p++) {
                    int64_t M = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
                    host_tensor a = mat(dts[d], M, K), at = ht_transposed(dts[d], M, K), b = mat(dts[d], K, N);
                    ht_fill_random(&a, p == 1, 0);
                    ht_fill_random(&b, 0, 0);
                    for (int64_t i = 0; i < M; i++)
                        for (int64_t k = 0; k < K; k++) set_f(&at, i + k * M, get_at(&a.t, i, k));
                    host_tensor o1 = mat(dts[d], M, N), o2 = mat(dts[d], M, N);
                    CHECK_OK(vt_matmul(&o1.t, &a.t, &b.t, NULL, 1.0, 0.0, (vt_precision)p));
                    CHECK_OK(vt_matmul(&o2.t, &at.t, &b.t, NULL, 1.0, 0.0, (vt_precision)p));
                    char what[160];
                    snprintf(what, sizeof what, "A^T vs A %s %s prec=%d %lldx%lldx%lld", vt_mxu_path(),
                             vt_dtype_name(dts[d]), p, (long long)M, (long long)K, (long long)N);
                    CHECK(ht_compare(what, &o2.t, &o1.t, -1) == 0);
                    if (p != 1) run_case("A^T random", &at, &b, (vt_precision)p, 0);
                    ht_free(&a), ht_free(&at), ht_free(&b), ht_free(&o1), ht_free(&o2);
                }
    }
    restore_engine();
}

/* The portable and AVX2 engines both add each product (exact in f32) to the
 * sum in k order, one rounding per product, so with no denormal sums their
 * bits agree exactly. Sizes cross the AVX2 kernel's 6-row strips (M 70),
 * its 512-value K slices and the driver's 2048-value K blocks (K 2100). */
TEST(kernels_mxu_avx2_same_bits_as_portable) {
    if (!(vt_isa_available() & VT_ISA_AVX2)) return;
    static const int64_t shapes[][3] = {{70, 2100, 40}, {6, 513, 16}, {1, 32, 1}, {37, 700, 53}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int p = 0; p < 3; p++) {
            int64_t M = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
            host_tensor a = mat(VT_F32, M, K), b = mat(VT_F32, K, N), o1 = mat(VT_F32, M, N), o2 = mat(VT_F32, M, N);
            fill(&a, 0), fill(&b, 0);
            vt_isa_force(0);
            CHECK_OK(vt_matmul(&o1.t, &a.t, &b.t, NULL, 1.0, 0.0, (vt_precision)p));
            vt_isa_force(VT_ISA_AVX2);
            CHECK_OK(vt_matmul(&o2.t, &a.t, &b.t, NULL, 1.0, 0.0, (vt_precision)p));
            char what[160];
            snprintf(what, sizeof what, "avx2 vs portable prec=%d %lldx%lldx%lld", p, (long long)M, (long long)K,
                     (long long)N);
            CHECK(ht_compare(what, &o2.t, &o1.t, -1) == 0);
            ht_free(&a), ht_free(&b), ht_free(&o1), ht_free(&o2);
        }
    restore_engine();
}

#if VT_X86
/* The AVX512-BF16 packers round with VCVTNEPS2BF16 / VCVTNE2PS2BF16, the
 * AVX-512 ones with integer bit operations (vt_mxu_rne_ftz16 = vt_mxu_split):
 * all four must pack the same bits, at every precision, for every high half
 * of an f32 with low halves at and around the rounding ties (so every
 * class: zeros, denormals of both signs, normals, the largest finite values
 * rounding to infinity, infinities, NaNs with any payload), from f32 and
 * bf16 lines, ragged lengths included. */
static float *special_values(int64_t *n) {
    static const uint32_t lows[] = {0x0000, 0x8000, 0x7fff, 0x8001, 0xffff, 0x0001};
    const int64_t per = (int64_t)(sizeof lows / sizeof lows[0]) + 1; /* and one random low half */
    *n = 65536 * per;
    float *v = malloc((size_t)*n * sizeof *v);
    for (uint32_t h = 0; h < 65536; h++)
        for (int64_t k = 0; k < per; k++) {
            uint32_t u = h << 16 | (k < per - 1 ? lows[k] : (uint32_t)next_u64() & 0xffff);
            memcpy(&v[h * per + k], &u, 4);
        }
    return v;
}

TEST(kernels_mxu_bf16_packers_same_bits) {
    const unsigned need = VT_ISA_AVX512 | VT_ISA_AVX512BF16;
    if ((vt_isa_available() & need) != need) return;
    int64_t n;
    float *v = special_values(&n);
    uint16_t *h16 = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) h16[i] = (uint16_t)(i * 40503u);
    static const int segs[3][3] = {{0}, {0, 2}, {0, 1, 2}};
    const vt_mxu_packers *P[2] = {&vt_mxu_packers_avx512, &vt_mxu_packers_avx512bf16};
    for (int prec = 0; prec < 3; prec++) {
        const int nseg = prec + 1, *seg = segs[prec];
        const vt_precision pr = (vt_precision)prec;
        int bad = 0;
        /* pack_a_row: one long f32 line, one short ragged one, a bf16 line */
        for (int form = 0; form < 3; form++) {
            vt_mxu_line x = {form == 2 ? (const void *)h16 : (const void *)v, form == 2, form == 1 ? 45 : n};
            int64_t kt = (x.n + 31) / 32;
            size_t bytes = (size_t)(nseg * kt) * VT_MXU_CHUNK * 2;
            uint16_t *d[2] = {malloc(bytes), malloc(bytes)};
            for (int e = 0; e < 2; e++) {
                memset(d[e], 0xab, bytes);
                P[e]->pack_a_row(x, pr, kt, nseg, seg, d[e], 5);
            }
            bad += memcmp(d[0], d[1], bytes) != 0;
            free(d[0]), free(d[1]);
        }
        /* pack_b_rows: pairs of rows of 1000 columns (np 1008), chunk 0, every pair j */
        {
            const int64_t np = 1008, kt = 1, panel = nseg * kt * VT_MXU_CHUNK;
            size_t bytes = (size_t)(np / 16 * panel) * 2;
            uint16_t *d[2] = {malloc(bytes), malloc(bytes)};
            for (int e = 0; e < 2; e++) {
                memset(d[e], 0xab, bytes);
                for (int j = 0; j < 16; j++) {
                    vt_mxu_line ev = {v + (int64_t)j * 30000, 0, 1000}, od = {v + (int64_t)j * 30000 + 1000, 0, 1000};
                    P[e]->pack_b_rows(ev, od, pr, np, kt, nseg, seg, d[e], panel, 0, j);
                }
            }
            bad += memcmp(d[0], d[1], bytes) != 0;
            free(d[0]), free(d[1]);
        }
        /* pack_b_cols: 16 columns of K 1000 (ragged: 32 chunks), two past N */
        {
            const int64_t K = 1000, kt = (K + 31) / 32;
            size_t bytes = (size_t)(nseg * kt) * VT_MXU_CHUNK * 2;
            uint16_t *d[2] = {malloc(bytes), malloc(bytes)};
            for (int base = 0; base < 8; base++) {
                vt_mxu_line cols[16];
                for (int q = 0; q < 16; q++)
                    cols[q] = (vt_mxu_line){v + (int64_t)(base * 16 + q) * 3500, 0, q < 14 ? K : 0};
                for (int e = 0; e < 2; e++) {
                    memset(d[e], 0xab, bytes);
                    P[e]->pack_b_cols(cols, pr, kt, nseg, seg, d[e]);
                }
                bad += memcmp(d[0], d[1], bytes) != 0;
            }
            free(d[0]), free(d[1]);
        }
        /* pack_a_cols: 13 valid rows, k_stride 16, K 70, every chunk */
        {
            const int64_t K = 70, kt = (K + 31) / 32;
            size_t bytes = (size_t)(nseg * kt) * VT_MXU_CHUNK * 2;
            uint16_t *d[2] = {malloc(bytes), malloc(bytes)};
            for (int64_t off = 0; off + 16 * K < n; off += 16 * K * 37) {
                vt_mxu_line x = {v + off, 0, 13};
                for (int e = 0; e < 2; e++) {
                    memset(d[e], 0xab, bytes);
                    for (int64_t c = 0; c < kt; c++) P[e]->pack_a_cols(x, 16, K, pr, kt, nseg, seg, d[e], c);
                }
                bad += memcmp(d[0], d[1], bytes) != 0;
            }
            free(d[0]), free(d[1]);
        }
        CHECK_MSG(bad == 0, "precision %d: %d packings differ between the AVX-512 and AVX512-BF16 packers", prec, bad);
    }
    free(v), free(h16);
}

/* A bf16 line at DEFAULT is packed word for word (flushed, not rounded
 * through f32); every one of the 65536 bf16 patterns must pack to the bits
 * its f32 value packs to, through all four packers of both tables, ragged
 * lengths and padding included. (The engines' dot products flush denormal
 * inputs themselves, so a product cannot show a missing flush: the packed
 * bits are compared.) */
TEST(kernels_mxu_bf16_words_pack_as_f32) {
    const unsigned need = VT_ISA_AVX512 | VT_ISA_AVX512BF16;
    if ((vt_isa_available() & need) != need) return;
    const int64_t n = 65536 + 7;
    uint16_t *h16 = malloc((size_t)n * 2);
    float *f = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) {
        h16[i] = (uint16_t)(i * 40503u); /* a permutation of the 65536 patterns, then 7 more */
        uint32_t u = (uint32_t)h16[i] << 16;
        memcpy(&f[i], &u, 4);
    }
    static const int seg0[1] = {0};
    const vt_mxu_packers *P[2] = {&vt_mxu_packers_avx512, &vt_mxu_packers_avx512bf16};
    const vt_precision D = VT_PRECISION_DEFAULT;
    int bad = 0;
    for (int e = 0; e < 2; e++) {
        for (int64_t len = n; len >= 45; len = len == n ? 45 : 0) { /* pack_a_row: the whole line, a ragged one */
            int64_t kt = (len + 31) / 32;
            size_t bytes = (size_t)kt * VT_MXU_CHUNK * 2;
            uint16_t *d[2] = {malloc(bytes), malloc(bytes)};
            memset(d[0], 0xab, bytes), memset(d[1], 0xab, bytes);
            P[e]->pack_a_row((vt_mxu_line){h16, 1, len}, D, kt, 1, seg0, d[0], 3);
            P[e]->pack_a_row((vt_mxu_line){f, 0, len}, D, kt, 1, seg0, d[1], 3);
            bad += memcmp(d[0], d[1], bytes) != 0;
            free(d[0]), free(d[1]);
        }
        { /* pack_b_rows: 16 pairs of rows of 1000 columns (np 1024) */
            const int64_t np = 1024, panel = VT_MXU_CHUNK;
            size_t bytes = (size_t)(np / 16 * panel) * 2;
            uint16_t *d[2] = {malloc(bytes), malloc(bytes)};
            memset(d[0], 0xab, bytes), memset(d[1], 0xab, bytes);
            for (int j = 0; j < 16; j++) {
                int64_t o = (int64_t)j * 4000;
                P[e]->pack_b_rows((vt_mxu_line){h16 + o, 1, 1000}, (vt_mxu_line){h16 + o + 1000, 1, 1000}, D, np, 1,
                                  1, seg0, d[0], panel, 0, j);
                P[e]->pack_b_rows((vt_mxu_line){f + o, 0, 1000}, (vt_mxu_line){f + o + 1000, 0, 1000}, D, np, 1, 1,
                                  seg0, d[1], panel, 0, j);
            }
            bad += memcmp(d[0], d[1], bytes) != 0;
            free(d[0]), free(d[1]);
        }
        { /* pack_b_cols: 16 columns of K 1000, two past N */
            const int64_t K = 1000, kt = (K + 31) / 32;
            size_t bytes = (size_t)kt * VT_MXU_CHUNK * 2;
            uint16_t *d[2] = {malloc(bytes), malloc(bytes)};
            for (int base = 0; base < 4; base++) {
                vt_mxu_line ch[16], cf[16];
                for (int q = 0; q < 16; q++) {
                    int64_t o = (int64_t)(base * 16 + q) * 1000, len = q < 14 ? K : 0;
                    ch[q] = (vt_mxu_line){h16 + o, 1, len}, cf[q] = (vt_mxu_line){f + o, 0, len};
                }
                memset(d[0], 0xab, bytes), memset(d[1], 0xab, bytes);
                P[e]->pack_b_cols(ch, D, kt, 1, seg0, d[0]);
                P[e]->pack_b_cols(cf, D, kt, 1, seg0, d[1]);
                bad += memcmp(d[0], d[1], bytes) != 0;
            }
            free(d[0]), free(d[1]);
        }
        { /* pack_a_cols: 13 valid rows, k_stride 16, K 70, every chunk */
            const int64_t K = 70, kt = (K + 31) / 32;
            size_t bytes = (size_t)kt * VT_MXU_CHUNK * 2;
            uint16_t *d[2] = {malloc(bytes), malloc(bytes)};
            for (int64_t off = 0; off + 16 * K < n; off += 16 * K) {
                memset(d[0], 0xab, bytes), memset(d[1], 0xab, bytes);
                for (int64_t c = 0; c < kt; c++) {
                    P[e]->pack_a_cols((vt_mxu_line){h16 + off, 1, 13}, 16, K, D, kt, 1, seg0, d[0], c);
                    P[e]->pack_a_cols((vt_mxu_line){f + off, 0, 13}, 16, K, D, kt, 1, seg0, d[1], c);
                }
                bad += memcmp(d[0], d[1], bytes) != 0;
            }
            free(d[0]), free(d[1]);
        }
    }
    CHECK_MSG(bad == 0, "%d bf16 packings differ from the same values packed from f32", bad);
    free(h16), free(f);
}
#endif

/* vt_matmul_f32_out: BF16 / F16 operands, F32 out — the f32 sums vt_matmul
 * forms before rounding. The same values as f32 operands at DEFAULT split
 * to the same bf16 parts (F16 through its exact f32 value), so every engine
 * must give the f32 product bit for bit; a bias goes through the epilogue. */
TEST(kernels_mxu_f32_out_same_bits_as_f32_operands) {
    static const vt_dtype halves[] = {VT_BF16, VT_F16};
    for (size_t e = 0; e < N_ENGINES; e++) {
        if (!use_engine(e)) continue;
        for (size_t h = 0; h < 2; h++) {
            host_tensor a = mat(halves[h], 37, 70), b = mat(halves[h], 70, 45), bias = mat(VT_F32, 37, 45);
            fill(&a, 0), fill(&b, 0), fill(&bias, 0);
            host_tensor af = mat(VT_F32, 37, 70), bf = mat(VT_F32, 70, 45);
            CHECK_OK(vt_copy(&af.t, &a.t));
            CHECK_OK(vt_copy(&bf.t, &b.t));
            host_tensor got = mat(VT_F32, 37, 45), want = mat(VT_F32, 37, 45);
            for (int with_bias = 0; with_bias < 2; with_bias++) {
                const vt_tensor *bp = with_bias ? &bias.t : NULL;
                CHECK_OK(vt_matmul_f32_out(&got.t, &a.t, &b.t, bp, 1.0, 1.0, VT_PRECISION_HIGHEST));
                CHECK_OK(vt_matmul(&want.t, &af.t, &bf.t, bp, 1.0, 1.0, VT_PRECISION_DEFAULT));
                CHECK_MSG(!memcmp(got.block, want.block, got.bytes), "engine %zu %s bias %d", e,
                          vt_dtype_name(halves[h]), with_bias);
            }
            /* out must still be the operands' dtype or F32 */
            host_tensor bad = mat(VT_F64, 37, 45);
            CHECK_STATUS(vt_matmul_f32_out(&bad.t, &a.t, &b.t, NULL, 1.0, 0.0, VT_PRECISION_DEFAULT),
                         VT_ERR_INVALID_ARGUMENT);
            ht_free(&a), ht_free(&b), ht_free(&bias), ht_free(&af), ht_free(&bf), ht_free(&got), ht_free(&want);
            ht_free(&bad);
        }
    }
    restore_engine();
}

/* A bf16 A whose rows are whole 32-k chunks, or one chunk of an even K
 * below 32, is read where it lies by the engines that can (AMX,
 * AVX512-BF16): no packing, any row count (AMX runs the last strip of fewer
 * than 32 rows, and K < 32, under tile configurations of their own), any
 * row stride. The same values as f32 operands at DEFAULT go through the
 * packed path with the same bf16 parts in the same order, so out must match
 * bit for bit: at awkward M (one row, a partial 16, a partial 32), K past
 * one 2048-k block, rows a view with an odd stride, bf16 and f32 outs, a
 * bias, a bf16 out that is a view, and specials (inf, NaN, denormals the
 * engines flush, -0). */
TEST(kernels_mxu_bf16_a_in_place_same_bits) {
    static const int64_t Ms[] = {1, 15, 16, 17, 31, 33, 100};
    static const int64_t Ks[] = {2, 16, 17, 30, 32, 96, 2080}; /* K < 32 even: one short chunk; 17 is packed */
    /* N: a last block of 13 columns (16 wide), one of 30 (32 wide, 2 past N
     * not written) and one of 16 (16 wide, whole) */
    for (size_t e = 0; e < N_ENGINES; e++) {
        if (!use_engine(e)) continue;
        for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
            for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++)
                for (int view = 0; view < 6; view++) {
                    static const int64_t Ns[] = {45, 62, 48};
                    const int64_t M = Ms[mi], K = Ks[ki], N = Ns[view / 2], lda = view % 2 ? K + 3 : K;
                    host_tensor a = mat(VT_BF16, M, lda), b = mat(VT_BF16, K, N), bias = mat(VT_F32, M, N);
                    fill(&a, 0), fill(&b, 0), fill(&bias, 0);
                    a.t.sizes[1] = K; /* the view: rows lda apart */
                    static const double specials[] = {INFINITY, -INFINITY, NAN, 1e-40, -1e-40, -0.0};
                    for (int q = 0; q < 6 && q < M; q++) set_f(&a, q * lda + (q * 7) % K, specials[q]);
                    /* what lies past K in a row must not be read: a NaN there would show */
                    for (int64_t i = 0; view % 2 && i < M; i++) set_f(&a, i * lda + K, NAN);
                    host_tensor af = mat(VT_F32, M, K), bf = mat(VT_F32, K, N);
                    CHECK_OK(vt_copy(&af.t, &a.t));
                    CHECK_OK(vt_copy(&bf.t, &b.t));
                    for (int form = 0; form < 4; form++) { /* bf16 out; f32 out; with a bias; bf16 view out */
                        const int half = form == 0 || form == 3;
                        host_tensor got = mat(half ? VT_BF16 : VT_F32, M, form == 3 ? N + 5 : N),
                                    want = mat(VT_F32, M, N);
                        got.t.sizes[1] = N;
                        const vt_tensor *bp = form == 2 ? &bias.t : NULL;
                        memset(got.block, 0xff, got.bytes);
                        if (!half) CHECK_OK(vt_matmul_f32_out(&got.t, &a.t, &b.t, bp, 1.0, 0.5, VT_PRECISION_DEFAULT));
                        else CHECK_OK(vt_matmul(&got.t, &a.t, &b.t, NULL, 1.0, 0.0, VT_PRECISION_DEFAULT));
                        CHECK_OK(vt_matmul(&want.t, &af.t, &bf.t, bp, 1.0, 0.5, VT_PRECISION_DEFAULT));
                        host_tensor w = mat(got.t.dtype, M, N); /* the f32 sums, rounded once to out's dtype */
                        CHECK_OK(vt_copy(&w.t, &want.t));
                        ht_free(&want);
                        want = w;
                        CHECK_MSG(ht_compare("in place", &got.t, &want.t, -1) == 0, "%s M %lld K %lld N %lld view %d form %d",
                                  vt_mxu_path(), (long long)M, (long long)K, (long long)N, view, form);
                        /* the view's gaps are untouched */
                        for (int64_t i = 0; form == 3 && i < M; i++)
                            for (int64_t g = N; g < N + 5; g++) CHECK(((uint16_t *)got.block)[i * (N + 5) + g] == 0xffff);
                        ht_free(&got), ht_free(&want);
                    }
                    ht_free(&a), ht_free(&b), ht_free(&bias), ht_free(&af), ht_free(&bf);
                }
    }
    restore_engine();
}

/* A dense f32 A at DEFAULT with an even K below 32 is rounded into a bf16
 * copy, end to end in runs of 32768 elements, and read in place (AMX,
 * AVX512-BF16); the same A as a view with a row gap goes through the packed
 * panels. Both must give the same bits on every engine: K = 2, 16 and 30
 * (17 and 32 take one path either way), M from one row to runs that end
 * mid-vector (5463 x 6 = 32778 elements: two runs, the last of 10), an out
 * that is a view, a bias, and specials (inf, NaN, denormals the rounding
 * flushes, -0, a value that rounds up to inf). */
TEST(kernels_mxu_f32_a_rounded_in_place_same_bits) {
    static const int64_t Ms[] = {1, 17, 100, 5463};
    static const int64_t Ks[] = {2, 6, 16, 17, 30, 32};
    for (size_t e = 0; e < N_ENGINES; e++) {
        if (!use_engine(e)) continue;
        for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
            for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++) {
                const int64_t M = Ms[mi], K = Ks[ki], N = 45;
                host_tensor a = mat(VT_F32, M, K), av = mat(VT_F32, M, K + 3), b = mat(VT_F32, K, N);
                host_tensor bias = mat(VT_F32, M, N);
                fill(&a, 0), fill(&b, 0), fill(&bias, 0);
                static const double specials[] = {INFINITY, -INFINITY, NAN, 1e-40, -1e-40, -0.0, 3.4e38};
                for (int q = 0; q < 7 && q < M; q++) set_f(&a, q * K + (q * 5) % K, specials[q]);
                av.t.sizes[1] = K; /* the view: rows K + 3 apart */
                CHECK_OK(vt_copy(&av.t, &a.t));
                for (int form = 0; form < 3; form++) { /* out; with a bias; out a view with a row gap */
                    host_tensor got = mat(VT_F32, M, form == 2 ? N + 5 : N), want = mat(VT_F32, M, N);
                    got.t.sizes[1] = N;
                    const vt_tensor *bp = form == 1 ? &bias.t : NULL;
                    CHECK_OK(vt_matmul(&got.t, &a.t, &b.t, bp, 1.0, 0.5, VT_PRECISION_DEFAULT));
                    CHECK_OK(vt_matmul(&want.t, &av.t, &b.t, bp, 1.0, 0.5, VT_PRECISION_DEFAULT));
                    CHECK_MSG(ht_compare("rounded A", &got.t, &want.t, -1) == 0, "%s M %lld K %lld form %d",
                              vt_mxu_path(), (long long)M, (long long)K, form);
                    ht_free(&got), ht_free(&want);
                }
                ht_free(&a), ht_free(&av), ht_free(&b), ht_free(&bias);
            }
    }
    restore_engine();
}

/* A row source that copies row i of a stored matrix (and counts calls). */
/* A dense-row f32 A at DEFAULT with whole 32-k chunks (K <= 2048), N within
 * one column claim and at least two claims a thread is rounded claim by
 * claim into strips the engine reads in place (mxu.c's a_strip, AMX and
 * AVX512-BF16); the same A stored column-major is packed into panels. Same
 * bits on every engine: N of 1, 16, 40, 64 and 300, M ending mid-claim,
 * rows with a gap, a bias, K up to the limit and one chunk past it (packed
 * either way), and specials (inf, NaN, denormals, -0, a value that rounds
 * up to inf). */
TEST(kernels_mxu_f32_a_strips_same_bits) {
    static const int64_t shapes[][3] = {{600, 96, 16},  {1000, 64, 64}, {513, 2048, 1},
                                        {777, 32, 40},  {1100, 64, 300}, {520, 2080, 8}};
    for (size_t e = 0; e < N_ENGINES; e++) {
        if (!use_engine(e)) continue;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int form = 0; form < 2; form++) { /* plain; rows 5 apart more than K, with a bias */
                const int64_t M = shapes[s][0], K = shapes[s][1], N = shapes[s][2], lda = form ? K + 5 : K;
                host_tensor a = mat(VT_F32, M, lda), at = ht_transposed(VT_F32, M, K), b = mat(VT_F32, K, N);
                host_tensor bias = mat(VT_F32, M, N), got = mat(VT_F32, M, N), want = mat(VT_F32, M, N);
                fill(&a, 0), fill(&b, 0), fill(&bias, 0);
                a.t.sizes[1] = K;
                static const double specials[] = {INFINITY, -INFINITY, NAN, 1e-40, -1e-40, -0.0, 3.4e38};
                for (int q = 0; q < 7; q++) set_f(&a, (q * 97 % M) * lda + (q * 5) % K, specials[q]);
                CHECK_OK(vt_copy(&at.t, &a.t));
                const vt_tensor *bp = form ? &bias.t : NULL;
                memset(got.block, 0xff, got.bytes);
                CHECK_OK(vt_matmul(&got.t, &a.t, &b.t, bp, 1.0, 0.5, VT_PRECISION_DEFAULT));
                CHECK_OK(vt_matmul(&want.t, &at.t, &b.t, bp, 1.0, 0.5, VT_PRECISION_DEFAULT));
                CHECK_MSG(ht_compare("A strips", &got.t, &want.t, -1) == 0, "%s %lldx%lldx%lld form %d", vt_mxu_path(),
                          (long long)M, (long long)K, (long long)N, form);
                ht_free(&a), ht_free(&at), ht_free(&b), ht_free(&bias), ht_free(&got), ht_free(&want);
            }
    }
    restore_engine();
}

TEST(kernels_mxu_produced_rows_same_bits) {
    static const vt_dtype dts[] = {VT_F32, VT_BF16};
    static const int64_t shapes[][3] = {{17, 70, 33}, {64, 32, 1}, {1, 5, 300}};
    for (size_t e = 0; e < N_ENGINES; e++) {
        if (!use_engine(e)) continue;
        for (size_t d = 0; d < 2; d++)
            for (size_t sh = 0; sh < 3; sh++)
                for (int prec = 0; prec <= VT_PRECISION_HIGHEST; prec++) {
                    int64_t M = shapes[sh][0], K = shapes[sh][1], N = shapes[sh][2];
                    host_tensor a = mat(dts[d], M, K), b = mat(dts[d], K, N);
                    fill(&a, 0), fill(&b, 0);
                    host_tensor got = mat(VT_F32, M, N), want = mat(VT_F32, M, N);
                    CHECK_OK(vt_matmul_f32_out(&want.t, &a.t, &b.t, NULL, 1.0, 0.0, (vt_precision)prec));
                    for (int which = 1; which < 4; which++) {
                        copy_rows ca = {&a, 0}, cb = {&b, 0};
                        vt_mxu_rows ra = {copy_row, &ca}, rb = {copy_row, &cb};
                        memset(got.block, 0xff, got.bytes);
                        CHECK_OK(vt_matmul_rows(&got.t, &a.t, which & 1 ? &ra : NULL, &b.t, which & 2 ? &rb : NULL,
                                                NULL, 1.0, 0.0, (vt_precision)prec));
                        CHECK_MSG(!memcmp(got.block, want.block, got.bytes), "engine %zu %s %lldx%lldx%lld prec %d rows %d",
                                  e, vt_dtype_name(dts[d]), (long long)M, (long long)K, (long long)N, prec, which);
                        CHECK(atomic_load(&ca.calls) == (which & 1 ? M : 0));
                        CHECK(atomic_load(&cb.calls) == (which & 2 ? K : 0));
                    }
                    ht_free(&a), ht_free(&b), ht_free(&got), ht_free(&want);
                }
    }
    restore_engine();
}

TEST(kernels_mxu_k_slices_exact) {
    static const int64_t shapes[][3] = {{96, 4200, 16}, {16, 4127, 96}, {1, 4096, 1}, {33, 4097, 45}};
    static const vt_dtype dts[] = {VT_F32, VT_BF16};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t d = 0; d < 2; d++)
            for (int form = 0; form < 2; form++) {
                const int64_t M = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
                host_tensor a = form ? mat(dts[d], M, K) : ht_transposed(dts[d], M, K), b = mat(dts[d], K, N);
                host_tensor bias = mat(dts[d], M, N), out = mat(dts[d], M, N + 3), ref = mat(dts[d], M, N);
                out.t.sizes[1] = N;
                fill(&a, 1), fill(&b, 1), fill(&bias, 1);
                const vt_tensor *bp = form ? &bias.t : NULL;
                const double alpha = form ? 2.0 : 1.0, beta = form ? 0.5 : 0.0;
                CHECK_OK(vt_ref_matmul(&ref.t, &a.t, &b.t, bp, alpha, beta, VT_PRECISION_DEFAULT));
                for (size_t e = 0; e < N_ENGINES; e++) {
                    if (!use_engine(e)) continue;
                    memset(out.block, 0xff, out.bytes);
                    CHECK_OK(vt_matmul(&out.t, &a.t, &b.t, bp, alpha, beta, VT_PRECISION_DEFAULT));
                    char what[160];
                    snprintf(what, sizeof what, "k slices %s %s form %d %lldx%lldx%lld", vt_mxu_path(),
                             vt_dtype_name(dts[d]), form, (long long)M, (long long)K, (long long)N);
                    CHECK(ht_compare(what, &out.t, &ref.t, -1) == 0);
                    for (int64_t i = 0; i < M; i++) /* the view's gap */
                        CHECK(((uint8_t *)out.block)[(size_t)(i * (N + 3) + N + 1) * vt_dtype_size(out.t.dtype)] == 0xff);
                }
                ht_free(&a), ht_free(&b), ht_free(&bias), ht_free(&out), ht_free(&ref);
            }
    /* B produced row by row (a convolution's column matrix): each slice asks
     * for its own rows, each row once */
    for (size_t d = 0; d < 2; d++) {
        const int64_t M = 32, K = 4200, N = 27;
        host_tensor a = ht_transposed(dts[d], M, K), b = mat(dts[d], K, N);
        host_tensor out = mat(VT_F32, M, N), ref = mat(VT_F32, M, N), af = mat(VT_F32, M, K), bf = mat(VT_F32, K, N);
        fill(&a, 1), fill(&b, 1);
        CHECK_OK(vt_copy(&af.t, &a.t));
        CHECK_OK(vt_copy(&bf.t, &b.t));
        CHECK_OK(vt_ref_matmul(&ref.t, &af.t, &bf.t, NULL, 1.0, 0.0, VT_PRECISION_DEFAULT));
        for (size_t e = 0; e < N_ENGINES; e++) {
            if (!use_engine(e)) continue;
            copy_rows cb = {&b, 0};
            vt_mxu_rows rb = {copy_row, &cb};
            memset(out.block, 0xff, out.bytes);
            CHECK_OK(vt_matmul_rows(&out.t, &a.t, NULL, &b.t, &rb, NULL, 1.0, 0.0, VT_PRECISION_DEFAULT));
            CHECK_MSG(ht_compare("k slices, produced B", &out.t, &ref.t, -1) == 0, "%s %s", vt_mxu_path(),
                      vt_dtype_name(dts[d]));
            CHECK(atomic_load(&cb.calls) == K);
        }
        ht_free(&a), ht_free(&b), ht_free(&out), ht_free(&ref), ht_free(&af), ht_free(&bf);
    }
    restore_engine();
}

/* The same path on U(-1, 1) values: within the f32 accumulation bound of
 * any summation order against the reference (check_bound). */
TEST(kernels_mxu_k_slices_random_within_bound) {
    static const int64_t shapes[][3] = {{20, 4500, 7}, {40, 4133, 16}};
    for (size_t e = 0; e < N_ENGINES; e++) {
        if (!use_engine(e)) continue;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int d = 0; d < 2; d++) {
                const vt_dtype dt = d ? VT_BF16 : VT_F32;
                host_tensor a = ht_transposed(dt, shapes[s][0], shapes[s][1]), b = mat(dt, shapes[s][1], shapes[s][2]);
                fill(&a, 0), fill(&b, 0);
                run_case("k slices random", &a, &b, VT_PRECISION_DEFAULT, 0);
                ht_free(&a), ht_free(&b);
            }
    }
    restore_engine();
}

/* bf16 operands at DEFAULT are packed word for word (mxu_pack_body.h: no
 * f32 round trip), with the flush the f32 path's rounding applies: a
 * denormal becomes the zero of its sign, a NaN (signalling ones too) gets
 * its quiet bit. The same values as f32 operands must give the same f32
 * sums bit for bit on every engine, through each packer: A by rows and by
 * columns (a transposed view), B by rows and by columns, N ragged and
 * narrow, and the K-sliced path. The specials decide their sums (a
 * denormal times 2^60 is its row's only product; NaN, inf, -0). The packed
 * bits themselves are compared by kernels_mxu_bf16_words_pack_as_f32. */
TEST(kernels_mxu_bf16_words_same_bits_as_f32) {
    static const int64_t shapes[][3] = {{37, 70, 45}, {20, 100, 16}, {40, 4200, 16}};
    for (size_t e = 0; e < N_ENGINES; e++) {
        if (!use_engine(e)) continue;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int form = 0; form < 4; form++) { /* bit 0: A transposed; bit 1: B transposed */
                const int64_t M = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
                host_tensor a = form & 1 ? ht_transposed(VT_BF16, M, K) : mat(VT_BF16, M, K);
                host_tensor b = form & 2 ? ht_transposed(VT_BF16, K, N) : mat(VT_BF16, K, N);
                host_tensor af = mat(VT_F32, M, K), bf = mat(VT_F32, K, N);
                fill(&a, 0), fill(&b, 0);
                uint16_t *pa = a.block, *pb = b.block;
#define A_AT(i, k) pa[(form & 1) ? (i) + (k) * M : (i) * K + (k)]
#define B_AT(k, j) pb[(form & 2) ? (k) + (j) * K : (k) * N + (j)]
                for (int64_t k = 0; k < K; k++) A_AT(0, k) = A_AT(1, k) = A_AT(4, k) = 0;
                A_AT(0, 3) = 0x0001;  /* the smallest denormal, its row's only product with B row 3 (2^60) */
                A_AT(1, 9) = 0x807f;  /* the largest negative denormal, times B row 9 (-2^60) */
                A_AT(2, 5) = 0x7f81;  /* a signalling NaN */
                A_AT(3, 7) = 0xff80;  /* -inf */
                A_AT(4, 11) = 0x5d80; /* 2^60, its row's only product with B row 11 (denormals) */
                for (int64_t j = 0; j < N; j++) {
                    B_AT(3, j) = 0x5d80, B_AT(9, j) = 0xdd80, B_AT(11, j) = (uint16_t)(0x8001 + (j & 1) * 0x7fff);
                    B_AT(13, j) = j % 3 ? 0x8000 : 0xffc1; /* -0 and a quiet NaN */
                }
#undef A_AT
#undef B_AT
                CHECK_OK(vt_copy(&af.t, &a.t));
                CHECK_OK(vt_copy(&bf.t, &b.t));
                host_tensor got = mat(VT_F32, M, N), want = mat(VT_F32, M, N);
                memset(got.block, 0xff, got.bytes);
                CHECK_OK(vt_matmul_f32_out(&got.t, &a.t, &b.t, NULL, 1.0, 0.0, VT_PRECISION_DEFAULT));
                CHECK_OK(vt_matmul(&want.t, &af.t, &bf.t, NULL, 1.0, 0.0, VT_PRECISION_DEFAULT));
                CHECK_MSG(!memcmp(got.block, want.block, got.bytes), "%s %lldx%lldx%lld form %d", vt_mxu_path(),
                          (long long)M, (long long)K, (long long)N, form);
                ht_free(&a), ht_free(&b), ht_free(&af), ht_free(&bf), ht_free(&got), ht_free(&want);
            }
    }
    restore_engine();
}
