/* test_kernels_norm.c — layer norm, RMS norm, group norm and batch norm
 * (forward and backward) against the scalar references: every dtype,
 * awkward row lengths (chunk remainders, several chunks), empty and
 * non-contiguous operands, large means, ISA independence, running-stat
 * updates, the queued ops and their errors. */
#include "test_kernels_util.h"

#include "kernels/norm/norm.h"

static const vt_dtype fdt[] = {VT_F32, VT_BF16, VT_F16, VT_F64};

/* Tolerance per dtype for outputs of unit scale (normalised values). */
static double tol_of(vt_dtype dt) {
    switch (dt) {
    case VT_BF16: return 2e-2;
    case VT_F16: return 3e-3;
    case VT_F32: return 2e-4;
    default: return 1e-10;
    }
}

/* |a - b| <= tol * (1 + |b|) everywhere; returns mismatches. */
static int64_t close(const char *what, const vt_tensor *x, const vt_tensor *y, double tol) {
    int64_t n = vt_tensor_numel(x), bad = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t ox = x->offset, oy = y->offset, li = i;
        for (int d = x->ndim - 1; d >= 0; d--) {
            ox += (li % x->sizes[d]) * x->strides[d];
            oy += (li % x->sizes[d]) * y->strides[d];
            li /= x->sizes[d];
        }
        double a, b;
        vt_convert(x->dtype, (const char *)x->data + ox * (int64_t)vt_dtype_size(x->dtype), 1, VT_F64, &a, 1, 1);
        vt_convert(y->dtype, (const char *)y->data + oy * (int64_t)vt_dtype_size(y->dtype), 1, VT_F64, &b, 1, 1);
        int ok = (isnan(a) && isnan(b)) || fabs(a - b) <= tol * (1 + fabs(b));
        if (!ok && bad++ < 3)
            vt_test_fail(__FILE__, __LINE__, "%s: element %lld: %.10g vs %.10g (%s)", what, (long long)i, a, b,
                         vt_dtype_name(x->dtype));
    }
    return bad;
}

static void fill(host_tensor *h, double lo, double hi) {
    if (vt_tensor_numel(&h->t) == 0) return;
    int64_t n = ht_block_elems(h);
    for (int64_t i = 0; i < n; i++) {
        double u = (double)(next_u64() >> 11) * 0x1p-53, v = lo + (hi - lo) * u;
        vt_convert(VT_F64, &v, 1, h->t.dtype, (char *)h->block + i * (int64_t)vt_dtype_size(h->t.dtype), 1, 1);
    }
}

/* [a, b] or its transpose-backed view when transposed. */
static host_tensor mat(vt_dtype dt, int64_t a, int64_t b, int transposed) {
    if (transposed) return ht_transposed(dt, a, b);
    int64_t s[2] = {a, b};
    return ht_new(dt, 2, s);
}

/* ------------------------------------------------------------ layer norm / RMS norm */

static void check_rows(vt_dtype dt, int64_t M, int64_t N, int affine, int transposed, int rms) {
    host_tensor x = mat(dt, M, N, transposed), y = mat(dt, M, N, 0), yr = mat(dt, M, N, 0);
    host_tensor mu = ht_1d(VT_F32, M), rs = ht_1d(VT_F32, M), mur = ht_1d(VT_F32, M), rsr = ht_1d(VT_F32, M);
    host_tensor w = ht_1d(VT_F32, N), b = ht_1d(VT_F32, N);
    fill(&x, -3, 5);
    fill(&w, 0.5, 1.5);
    fill(&b, -1, 1);
    const vt_tensor *wp = affine ? &w.t : NULL, *bp = affine && !rms ? &b.t : NULL;
    char what[96];
    snprintf(what, sizeof what, "%s %s %lldx%lld affine=%d T=%d", rms ? "rms" : "ln", vt_dtype_name(dt),
             (long long)M, (long long)N, affine, transposed);
    if (rms) {
        CHECK_OK(vt_rms_norm(&y.t, &rs.t, &x.t, wp, 1, 1e-5));
        CHECK_OK(vt_ref_rms_norm(&yr.t, &rsr.t, &x.t, wp, 1, 1e-5));
    } else {
        CHECK_OK(vt_layer_norm(&y.t, &mu.t, &rs.t, &x.t, wp, bp, 1, 1e-5));
        CHECK_OK(vt_ref_layer_norm(&yr.t, &mur.t, &rsr.t, &x.t, wp, bp, 1, 1e-5));
        CHECK_MSG(close(what, &mu.t, &mur.t, 1e-5) == 0, "%s mean", what);
    }
    CHECK_MSG(close(what, &rs.t, &rsr.t, 1e-5) == 0, "%s rstd", what);
    CHECK_MSG(close(what, &y.t, &yr.t, tol_of(dt)) == 0, "%s out", what);

    /* backward from the reference's statistics */
    host_tensor dy = mat(dt, M, N, !transposed), dx = mat(dt, M, N, 0), dxr = mat(dt, M, N, 0);
    host_tensor dw = ht_1d(VT_F32, N), db = ht_1d(VT_F32, N), dwr = ht_1d(VT_F32, N), dbr = ht_1d(VT_F32, N);
    fill(&dy, -1, 1);
    if (rms) {
        CHECK_OK(vt_rms_norm_backward(&dx.t, affine ? &dw.t : NULL, &dy.t, &x.t, &rsr.t, wp, 1));
        CHECK_OK(vt_ref_rms_norm_backward(&dxr.t, affine ? &dwr.t : NULL, &dy.t, &x.t, &rsr.t, wp, 1));
    } else {
        CHECK_OK(vt_layer_norm_backward(&dx.t, &dw.t, &db.t, &dy.t, &x.t, &mur.t, &rsr.t, wp, 1));
        CHECK_OK(vt_ref_layer_norm_backward(&dxr.t, &dwr.t, &dbr.t, &dy.t, &x.t, &mur.t, &rsr.t, wp, 1));
        CHECK_MSG(close(what, &db.t, &dbr.t, 1e-4) == 0, "%s db", what);
    }
    /* dx sums cancel: scale the tolerance by the row length's error growth */
    CHECK_MSG(close(what, &dx.t, &dxr.t, tol_of(dt) * 4) == 0, "%s dx", what);
    if (affine || !rms) CHECK_MSG(close(what, &dw.t, &dwr.t, dt == VT_F64 ? 1e-9 : 1e-4) == 0, "%s dw", what);
    host_tensor *all[] = {&x, &y, &yr, &mu, &rs, &mur, &rsr, &w, &b, &dy, &dx, &dxr, &dw, &db, &dwr, &dbr};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ht_free(all[i]);
}

TEST(kernels_norm_rows_match_reference) {
    static const int64_t Ns[] = {1, 15, 17, 512, 1025, 3000};
    static const int64_t Ms[] = {0, 1, 7, 65};
    for (size_t d = 0; d < 4; d++)
        for (size_t i = 0; i < sizeof Ns / sizeof Ns[0]; i++)
            for (size_t j = 0; j < sizeof Ms / sizeof Ms[0]; j++)
                for (int rms = 0; rms < 2; rms++) {
                    if (Ns[i] * Ms[j] > 70000 && fdt[d] != VT_F32) continue;
                    check_rows(fdt[d], Ms[j], Ns[i], (int)((i + j) & 1), (int)(j == 2), rms);
                    check_rows(fdt[d], Ms[j], Ns[i], !((i + j) & 1), 0, rms);
                }
}

TEST(kernels_norm_rows_multi_dim_and_large_mean) {
    /* normalise over the last 2 dims of [3, 4, 5]; mean 1e4, spread 1: two passes keep the variance */
    int64_t s[3] = {3, 4, 5};
    host_tensor x = ht_new(VT_F32, 3, s), y = ht_new(VT_F32, 3, s), yr = ht_new(VT_F32, 3, s);
    host_tensor mu = ht_1d(VT_F32, 3), rs = ht_1d(VT_F32, 3), mur = ht_1d(VT_F64, 3), rsr = ht_1d(VT_F64, 3);
    fill(&x, 1e4 - 1, 1e4 + 1);
    CHECK_OK(vt_layer_norm(&y.t, &mu.t, &rs.t, &x.t, NULL, NULL, 2, 1e-12));
    CHECK_OK(vt_ref_layer_norm(&yr.t, &mur.t, &rsr.t, &x.t, NULL, NULL, 2, 1e-12));
    CHECK(close("large mean rstd", &rs.t, &rsr.t, 1e-3) == 0);
    CHECK(close("large mean out", &y.t, &yr.t, 2e-3) == 0);
    host_tensor *all[] = {&x, &y, &yr, &mu, &rs, &mur, &rsr};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ht_free(all[i]);
}

/* ------------------------------------------------------------ group norm / batch norm */

static host_tensor nchw(vt_dtype dt, int64_t n, int64_t c, int64_t hw, int strided) {
    int64_t s[3] = {n, c, hw};
    if (!strided) return ht_new(dt, 3, s);
    /* channels-last-like: [N, HW, C] memory seen as [N, C, HW] */
    int64_t m[3] = {n, hw, c};
    host_tensor h = ht_new(dt, 3, m);
    h.t.sizes[1] = c, h.t.sizes[2] = hw;
    h.t.strides[0] = hw * c, h.t.strides[1] = 1, h.t.strides[2] = c;
    return h;
}

static void check_group(vt_dtype dt, int64_t N, int64_t C, int64_t HW, int64_t G, int affine, int strided) {
    host_tensor x = nchw(dt, N, C, HW, strided), y = nchw(dt, N, C, HW, 0), yr = nchw(dt, N, C, HW, 0);
    host_tensor mu = ht_1d(VT_F32, N * G), rs = ht_1d(VT_F32, N * G), mur = ht_1d(VT_F32, N * G),
                rsr = ht_1d(VT_F32, N * G);
    host_tensor w = ht_1d(dt, C), b = ht_1d(dt, C);
    fill(&x, -2, 6);
    fill(&w, 0.5, 1.5);
    fill(&b, -1, 1);
    const vt_tensor *wp = affine ? &w.t : NULL, *bp = affine ? &b.t : NULL;
    char what[96];
    snprintf(what, sizeof what, "gn %s %lldx%lldx%lld G=%lld", vt_dtype_name(dt), (long long)N, (long long)C,
             (long long)HW, (long long)G);
    CHECK_OK(vt_group_norm(&y.t, &mu.t, &rs.t, &x.t, wp, bp, G, 1e-5));
    CHECK_OK(vt_ref_group_norm(&yr.t, &mur.t, &rsr.t, &x.t, wp, bp, G, 1e-5));
    CHECK_MSG(close(what, &mu.t, &mur.t, 1e-5) == 0, "%s mean", what);
    CHECK_MSG(close(what, &rs.t, &rsr.t, 1e-5) == 0, "%s rstd", what);
    CHECK_MSG(close(what, &y.t, &yr.t, tol_of(dt)) == 0, "%s out", what);
    host_tensor dy = nchw(dt, N, C, HW, !strided), dx = nchw(dt, N, C, HW, strided), dxr = nchw(dt, N, C, HW, 0);
    host_tensor dw = ht_1d(VT_F32, C), db = ht_1d(VT_F32, C), dwr = ht_1d(VT_F32, C), dbr = ht_1d(VT_F32, C);
    fill(&dy, -1, 1);
    CHECK_OK(vt_group_norm_backward(&dx.t, &dw.t, &db.t, &dy.t, &x.t, &mur.t, &rsr.t, wp, G));
    CHECK_OK(vt_ref_group_norm_backward(&dxr.t, &dwr.t, &dbr.t, &dy.t, &x.t, &mur.t, &rsr.t, wp, G));
    CHECK_MSG(close(what, &dx.t, &dxr.t, tol_of(dt) * 4) == 0, "%s dx", what);
    CHECK_MSG(close(what, &dw.t, &dwr.t, 1e-4) == 0, "%s dw", what);
    CHECK_MSG(close(what, &db.t, &dbr.t, 1e-4) == 0, "%s db", what);
    host_tensor *all[] = {&x, &y, &yr, &mu, &rs, &mur, &rsr, &w, &b, &dy, &dx, &dxr, &dw, &db, &dwr, &dbr};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ht_free(all[i]);
}

/* Fed by a source, layer norm and RMS norm give what they give from
 * memory, bit for bit (out, mean, rstd), reading each element once; they
 * take one only for a contiguous input whose rows hold at least
 * VT_SOURCE_RUN values. */
TEST(kernels_norm_rows_from_a_source) {
    static const struct {
        int64_t M, N;
        int transposed;
    } cases[] = {{37, 1031, 0}, {5, 3000, 0}, {300, 77, 0}, {64, 256, 0}, {64, 300, 1}, {1, 4097, 0}};
    static const vt_dtype dts[] = {VT_F32, VT_BF16, VT_F64};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (size_t di = 0; di < sizeof dts / sizeof dts[0]; di++)
            for (int rms = 0; rms < 2; rms++) {
                const vt_dtype dt = dts[di];
                const int64_t M = cases[k].M, N = cases[k].N;
                host_tensor x = mat(dt, M, N, cases[k].transposed), ya = mat(dt, M, N, 0), yb = mat(dt, M, N, 0);
                host_tensor ma = ht_1d(VT_F32, M), mb = ht_1d(VT_F32, M), ra = ht_1d(VT_F32, M), rb = ht_1d(VT_F32, M);
                host_tensor w = ht_1d(VT_F32, N), b = ht_1d(VT_F32, N);
                fill(&x, -3, 5);
                fill(&w, 0.5, 1.5);
                fill(&b, -1, 1);
                const int takes = vt_norm_rows_takes_source(&x.t, 1);
                char what[96];
                snprintf(what, sizeof what, "%s %s %lldx%lld T=%d", rms ? "rms" : "ln", vt_dtype_name(dt),
                         (long long)M, (long long)N, cases[k].transposed);
                CHECK_MSG(takes == (!cases[k].transposed && N >= VT_SOURCE_RUN), "%s: takes %d", what, takes);
                if (takes) {
                    CHECK_OK(vt_norm_rows_run(rms, &ya.t, &ma.t, &ra.t, &x.t, &w.t, &b.t, 1, 1e-5, NULL));
                    int *reads = calloc((size_t)(M * N), sizeof *reads);
                    mem_source ms = {.base = vt_base(&x.t), .es = vt_dtype_size(dt), .reads = reads, .strict = 1};
                    const vt_source src = {mem_read, &ms};
                    CHECK_OK(vt_norm_rows_run(rms, &yb.t, &mb.t, &rb.t, &x.t, &w.t, &b.t, 1, 1e-5, &src));
                    mem_source_release(&ms);
                    CHECK_MSG(!ms.bad, "%s: a read of fewer than 1 or more than VT_SOURCE_MAX values", what);
                    CHECK(ht_compare(what, &ya.t, &yb.t, -1) == 0);
                    CHECK(ht_compare(what, &ra.t, &rb.t, -1) == 0);
                    if (!rms) CHECK(ht_compare(what, &ma.t, &mb.t, -1) == 0);
                    int64_t wrong = 0;
                    for (int64_t i = 0; i < M * N; i++) wrong += reads[i] != 1;
                    CHECK_MSG(wrong == 0, "%s: %lld elements not read exactly once", what, (long long)wrong);
                    free(reads);
                } else { /* a source it cannot take is refused, never misread */
                    mem_source ms = {.base = vt_base(&x.t), .es = vt_dtype_size(dt)};
                    const vt_source src = {mem_read, &ms};
                    CHECK_STATUS(vt_norm_rows_run(rms, &yb.t, &mb.t, &rb.t, &x.t, &w.t, &b.t, 1, 1e-5, &src),
                                 VT_ERR_INTERNAL);
                }
                host_tensor *all[] = {&x, &ya, &yb, &ma, &mb, &ra, &rb, &w, &b};
                for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ht_free(all[i]);
            }
}

TEST(kernels_norm_group_match_reference) {
    for (size_t d = 0; d < 4; d++) {
        check_group(fdt[d], 2, 6, 25, 3, 1, 0);
        check_group(fdt[d], 3, 4, 1, 2, 0, 0);
        check_group(fdt[d], 2, 8, 1100, 4, 1, d == 0);
        check_group(fdt[d], 0, 4, 5, 2, 1, 0);
        check_group(fdt[d], 1, 5, 17, 5, 1, 1);
    }
}

static void check_batch(vt_dtype dt, int64_t N, int64_t C, int64_t HW, int training, int affine, int strided) {
    host_tensor x = nchw(dt, N, C, HW, strided), y = nchw(dt, N, C, HW, 0), yr = nchw(dt, N, C, HW, 0);
    host_tensor sm = ht_1d(VT_F32, C), si = ht_1d(VT_F32, C), smr = ht_1d(VT_F32, C), sir = ht_1d(VT_F32, C);
    host_tensor rm = ht_1d(VT_F32, C), rv = ht_1d(VT_F32, C), rmr = ht_1d(VT_F32, C), rvr = ht_1d(VT_F32, C);
    host_tensor w = ht_1d(VT_F32, C), b = ht_1d(VT_F32, C);
    fill(&x, -2, 6);
    fill(&w, 0.5, 1.5);
    fill(&b, -1, 1);
    fill(&rm, -1, 1);
    fill(&rv, 0.5, 2);
    memcpy(rmr.block, rm.block, (size_t)C * 4);
    memcpy(rvr.block, rv.block, (size_t)C * 4);
    const vt_tensor *wp = affine ? &w.t : NULL, *bp = affine ? &b.t : NULL;
    char what[96];
    snprintf(what, sizeof what, "bn %s %lldx%lldx%lld train=%d", vt_dtype_name(dt), (long long)N, (long long)C,
             (long long)HW, training);
    CHECK_OK(vt_batch_norm(&y.t, training ? &sm.t : NULL, training ? &si.t : NULL, &x.t, wp, bp, &rm.t, &rv.t,
                           training, 0.1, 1e-5));
    CHECK_OK(vt_ref_batch_norm(&yr.t, training ? &smr.t : NULL, training ? &sir.t : NULL, &x.t, wp, bp, &rmr.t,
                               &rvr.t, training, 0.1, 1e-5));
    CHECK_MSG(close(what, &y.t, &yr.t, tol_of(dt)) == 0, "%s out", what);
    CHECK_MSG(close(what, &rm.t, &rmr.t, 1e-5) == 0, "%s running_mean", what);
    CHECK_MSG(close(what, &rv.t, &rvr.t, 1e-5) == 0, "%s running_var", what);
    if (training) {
        CHECK_MSG(close(what, &sm.t, &smr.t, 1e-5) == 0, "%s save_mean", what);
        CHECK_MSG(close(what, &si.t, &sir.t, 1e-5) == 0, "%s save_invstd", what);
    }
    host_tensor dy = nchw(dt, N, C, HW, !strided), dx = nchw(dt, N, C, HW, 0), dxr = nchw(dt, N, C, HW, 0);
    host_tensor dw = ht_1d(VT_F32, C), db = ht_1d(VT_F32, C), dwr = ht_1d(VT_F32, C), dbr = ht_1d(VT_F32, C);
    fill(&dy, -1, 1);
    CHECK_OK(vt_batch_norm_backward(&dx.t, &dw.t, &db.t, &dy.t, &x.t, wp, &rmr.t, &rvr.t, &smr.t, &sir.t, training,
                                    1e-5));
    CHECK_OK(vt_ref_batch_norm_backward(&dxr.t, &dwr.t, &dbr.t, &dy.t, &x.t, wp, &rmr.t, &rvr.t, &smr.t, &sir.t,
                                        training, 1e-5));
    CHECK_MSG(close(what, &dx.t, &dxr.t, tol_of(dt) * 4) == 0, "%s dx", what);
    CHECK_MSG(close(what, &dw.t, &dwr.t, 1e-4) == 0, "%s dw", what);
    CHECK_MSG(close(what, &db.t, &dbr.t, 1e-4) == 0, "%s db", what);
    host_tensor *all[] = {&x,  &y,  &yr, &sm, &si, &smr, &sir, &rm,  &rv,  &rmr,
                          &rvr, &w, &b,  &dy, &dx, &dxr, &dw,  &db, &dwr, &dbr};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ht_free(all[i]);
}

TEST(kernels_norm_batch_match_reference) {
    for (size_t d = 0; d < 4; d++)
        for (int training = 0; training < 2; training++) {
            check_batch(fdt[d], 4, 6, 25, training, 1, 0);    /* short runs: channel-major regrouping */
            check_batch(fdt[d], 16, 3, 1, training, 0, 0);    /* BatchNorm1d on [N, C] */
            check_batch(fdt[d], 3, 5, 1031, training, 1, 1);  /* long runs, strided input */
            check_batch(fdt[d], 1, 2, 40, training, 1, 0);
        }
}

TEST(kernels_norm_isa_independent) {
    unsigned active = vt_isa_active();
    int64_t M = 37, N = 1500;
    host_tensor x = mat(VT_F32, M, N, 0), y0 = mat(VT_F32, M, N, 0), y1 = mat(VT_F32, M, N, 0);
    host_tensor dy = mat(VT_F32, M, N, 0), dx0 = mat(VT_F32, M, N, 0), dx1 = mat(VT_F32, M, N, 0);
    host_tensor mu = ht_1d(VT_F32, M), rs = ht_1d(VT_F32, M), w = ht_1d(VT_F32, N), b = ht_1d(VT_F32, N);
    host_tensor dw0 = ht_1d(VT_F32, N), dw1 = ht_1d(VT_F32, N);
    fill(&x, -3, 3);
    fill(&dy, -1, 1);
    fill(&w, 0, 2);
    fill(&b, -1, 1);
    vt_isa_force(0);
    CHECK_OK(vt_layer_norm(&y0.t, &mu.t, &rs.t, &x.t, &w.t, &b.t, 1, 1e-5));
    CHECK_OK(vt_layer_norm_backward(&dx0.t, &dw0.t, NULL, &dy.t, &x.t, &mu.t, &rs.t, &w.t, 1));
    const unsigned paths[2] = {active, VT_ISA_AVX2}; /* AVX2 too wherever AVX-512 is best */
    for (int p = 0; p < 2; p++) {
        if ((paths[p] & vt_isa_available()) != paths[p]) continue;
        vt_isa_force(paths[p]);
        CHECK_OK(vt_layer_norm(&y1.t, &mu.t, &rs.t, &x.t, &w.t, &b.t, 1, 1e-5));
        CHECK_OK(vt_layer_norm_backward(&dx1.t, &dw1.t, NULL, &dy.t, &x.t, &mu.t, &rs.t, &w.t, 1));
        CHECK(ht_compare("ln isa out", &y0.t, &y1.t, -1) == 0);
        CHECK(ht_compare("ln isa dx", &dx0.t, &dx1.t, -1) == 0);
        CHECK(ht_compare("ln isa dw", &dw0.t, &dw1.t, -1) == 0);
    }
    vt_isa_force(active);
    host_tensor *all[] = {&x, &y0, &y1, &dy, &dx0, &dx1, &mu, &rs, &w, &b, &dw0, &dw1};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ht_free(all[i]);
}

TEST(kernels_norm_errors_and_queued_ops) {
    CHECK_OK(vt_init());
    int64_t s[2] = {4, 6};
    host_tensor x = ht_new(VT_F32, 2, s), y = ht_new(VT_F32, 2, s), mu = ht_1d(VT_F32, 4), rs = ht_1d(VT_F32, 4);
    host_tensor w5 = ht_1d(VT_F32, 5), xi = ht_new(VT_I32, 2, s), c4 = ht_1d(VT_F32, 6);
    fill(&x, -1, 1);
    /* wrong weight size, integer input, bad groups, bad norm dims */
    CHECK_STATUS(vt_layer_norm(&y.t, &mu.t, &rs.t, &x.t, &w5.t, NULL, 1, 1e-5), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_layer_norm(&y.t, &mu.t, &rs.t, &xi.t, NULL, NULL, 1, 1e-5), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_layer_norm(&y.t, &mu.t, &rs.t, &x.t, NULL, NULL, 3, 1e-5), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_group_norm(&y.t, NULL, NULL, &x.t, NULL, NULL, 4, 1e-5), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_group_norm(&y.t, NULL, NULL, &x.t, NULL, NULL, 0, 1e-5), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_batch_norm(&y.t, NULL, NULL, &x.t, NULL, NULL, NULL, NULL, 0, 0.1, 1e-5), VT_ERR_INVALID_ARGUMENT);
    /* queued: errors at the call, results after a synchronisation */
    CHECK_STATUS(vt_op_layer_norm(0, "aten::native_layer_norm", &y.t, &mu.t, &rs.t, &x.t, &w5.t, NULL, 1, 1e-5),
                 VT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(vt_last_error(), "aten::native_layer_norm") != NULL);
    CHECK_STATUS(vt_op_group_norm(0, "aten::native_group_norm", &y.t, NULL, NULL, &x.t, NULL, NULL, 5, 1e-5),
                 VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_op_layer_norm(99, "aten::native_layer_norm", &y.t, &mu.t, &rs.t, &x.t, NULL, NULL, 1, 1e-5),
                 VT_ERR_INDEX);
    host_tensor yr = ht_new(VT_F32, 2, s), mur = ht_1d(VT_F32, 4), rsr = ht_1d(VT_F32, 4);
    ht_device(&x), ht_device(&y), ht_device(&mu), ht_device(&rs), ht_device(&yr), ht_device(&c4);
    CHECK_OK(vt_op_layer_norm(0, "aten::native_layer_norm", &y.t, &mu.t, &rs.t, &x.t, NULL, NULL, 1, 1e-5));
    CHECK_OK(vt_synchronize(0));
    CHECK_OK(vt_ref_layer_norm(&yr.t, &mur.t, &rsr.t, &x.t, NULL, NULL, 1, 1e-5));
    CHECK(close("queued ln", &y.t, &yr.t, 1e-5) == 0);
    /* ten descriptors through one queued command */
    host_tensor dx = ht_new(VT_F32, 2, s), dw = ht_1d(VT_F32, 6), db = ht_1d(VT_F32, 6), sm = ht_1d(VT_F32, 6),
                si = ht_1d(VT_F32, 6);
    ht_device(&dx), ht_device(&dw), ht_device(&db), ht_device(&sm), ht_device(&si);
    fill(&c4, 1, 2);
    CHECK_OK(vt_op_batch_norm(0, "aten::native_batch_norm", &yr.t, &sm.t, &si.t, &x.t, &c4.t, NULL, NULL, NULL, 1,
                              0.1, 1e-5));
    CHECK_OK(vt_op_batch_norm_backward(0, "aten::native_batch_norm_backward", &dx.t, &dw.t, &db.t, &y.t, &x.t, &c4.t,
                                       &c4.t, &c4.t, &sm.t, &si.t, 1, 1e-5));
    CHECK_OK(vt_synchronize(0));
    host_tensor dxr = ht_new(VT_F32, 2, s);
    CHECK_OK(vt_ref_batch_norm_backward(&dxr.t, NULL, NULL, &y.t, &x.t, &c4.t, NULL, NULL, &sm.t, &si.t, 1, 1e-5));
    CHECK(close("queued bn backward", &dx.t, &dxr.t, 1e-4) == 0);
    host_tensor *all[] = {&x, &y, &mu, &rs, &w5, &xi, &c4, &yr, &mur, &rsr, &dx, &dw, &db, &sm, &si, &dxr};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ht_free(all[i]);
}
