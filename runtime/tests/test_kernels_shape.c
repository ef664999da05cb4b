/* test_kernels_shape.c — the data-movement kernels (cat, flip, roll,
 * tril/triu, sort, topk, arange/linspace, searchsorted) against the scalar
 * references: every dtype, awkward sizes, contiguous and strided operands,
 * NaN and ties for the sorts, empty extents, the queued ops and their errors. */
#include "test_kernels_util.h"

static const vt_dtype all_dtypes[] = {VT_F32, VT_BF16, VT_F16, VT_F64, VT_I8, VT_U8, VT_I16, VT_I32, VT_I64, VT_BOOL};
#define N_DT (int)(sizeof all_dtypes / sizeof all_dtypes[0])

/* A [a, b, c] input: layout 0 contiguous, 1 with dims 0 and 2 swapped in
 * memory, 2 every other element with an offset. */
static host_tensor make3(vt_dtype dt, int64_t a, int64_t b, int64_t c, int layout) {
    host_tensor h;
    if (layout == 1) {
        int64_t s[3] = {c, b, a};
        h = ht_new(dt, 3, s);
        h.t.sizes[0] = a, h.t.sizes[2] = c;
        int64_t t = h.t.strides[0];
        h.t.strides[0] = h.t.strides[2], h.t.strides[2] = t;
    } else if (layout == 2) {
        int64_t s[3] = {a, b, 2 * c + 2};
        h = ht_new(dt, 3, s);
        h.t.sizes[2] = c;
        h.t.strides[2] = 2;
        h.t.offset = 1;
    } else {
        int64_t s[3] = {a, b, c};
        h = ht_new(dt, 3, s);
    }
    if (a && b && c) ht_fill_random(&h, 1, 0); /* an empty view may span no block at all */
    return h;
}

static host_tensor out3(vt_dtype dt, const int64_t *s) {
    host_tensor h = ht_new(dt, 3, s);
    if (s[0] && s[1] && s[2]) ht_fill_random(&h, 0, 0); /* garbage a kernel must overwrite */
    return h;
}

TEST(kernels_shape_cat) {
    for (int di = 0; di < N_DT; di++)
        for (int dim = 0; dim < 3; dim++)
            for (int layout = 0; layout < 3; layout++)
                for (int nin = 1; nin <= 9; nin += 4) {
                    vt_dtype dt = all_dtypes[di];
                    host_tensor ins[9];
                    vt_tensor tv[9];
                    int64_t os[3] = {3, 5, 7};
                    os[dim] = 0;
                    for (int k = 0; k < nin; k++) {
                        int64_t s[3] = {3, 5, 7};
                        s[dim] = (k * 7 + 3) % 6; /* includes empty pieces */
                        os[dim] += s[dim];
                        /* mixed layouts and one converting input */
                        vt_dtype idt = (k == 2 && layout == 2) ? VT_F64 : dt;
                        ins[k] = make3(idt, s[0], s[1], s[2], (layout + k) % 3);
                        tv[k] = ins[k].t;
                    }
                    host_tensor a = out3(dt, os), b = out3(dt, os);
                    CHECK_OK(vt_cat(&a.t, nin, tv, dim));
                    CHECK_OK(vt_ref_cat(&b.t, nin, tv, dim));
                    CHECK(ht_compare("cat", &a.t, &b.t, -1) == 0);
                    ht_free(&a), ht_free(&b);
                    for (int k = 0; k < nin; k++) ht_free(&ins[k]);
                }
    /* the fast path at a large size, and a mismatched shape */
    host_tensor x = make3(VT_F32, 8, 256, 64, 0), y = make3(VT_F32, 8, 256, 64, 0);
    vt_tensor l[2] = {x.t, y.t};
    int64_t os[3] = {8, 256, 128};
    host_tensor a = out3(VT_F32, os), b = out3(VT_F32, os);
    CHECK_OK(vt_cat(&a.t, 2, l, 2));
    CHECK_OK(vt_ref_cat(&b.t, 2, l, 2));
    CHECK(ht_compare("cat large", &a.t, &b.t, -1) == 0);
    l[1].sizes[1] = 255;
    CHECK_STATUS(vt_cat(&a.t, 2, l, 2), VT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(vt_last_error(), "Sizes of tensors must match except in dimension 2") != NULL);
    CHECK_STATUS(vt_cat(&a.t, 2, l, 3), VT_ERR_INDEX);
    ht_free(&a), ht_free(&b), ht_free(&x), ht_free(&y);
}

TEST(kernels_shape_flip_roll_tri) {
    for (int di = 0; di < N_DT; di++)
        for (int layout = 0; layout < 3; layout++) {
            vt_dtype dt = all_dtypes[di];
            host_tensor x = make3(dt, 4, 17, 33, layout);
            int64_t s[3] = {4, 17, 33};
            for (uint64_t mask = 0; mask < 8; mask++) {
                host_tensor a = out3(dt, s), b = out3(dt, s);
                CHECK_OK(vt_flip(&a.t, &x.t, mask));
                CHECK_OK(vt_ref_flip(&b.t, &x.t, mask));
                CHECK(ht_compare("flip", &a.t, &b.t, -1) == 0);
                ht_free(&a), ht_free(&b);
            }
            static const int dims_sets[][2] = {{0, 0}, {1, 0}, {2, 0}, {2, 0}, {0, 2}};
            static const int64_t shifts[][2] = {{1, 0}, {-5, 0}, {33, 0}, {70, 0}, {-3, 100}};
            for (int c = 0; c < 5; c++) {
                int nd = c == 4 ? 2 : 1;
                host_tensor a = out3(dt, s), b = out3(dt, s);
                CHECK_OK(vt_roll(&a.t, &x.t, nd, dims_sets[c], shifts[c]));
                CHECK_OK(vt_ref_roll(&b.t, &x.t, nd, dims_sets[c], shifts[c]));
                CHECK(ht_compare("roll", &a.t, &b.t, -1) == 0);
                ht_free(&a), ht_free(&b);
            }
            static const int64_t diags[] = {0, 1, -1, 5, -20, 40};
            for (int c = 0; c < 6; c++)
                for (int up = 0; up < 2; up++) {
                    host_tensor a = out3(dt, s), b = out3(dt, s);
                    CHECK_OK(vt_tri(&a.t, &x.t, diags[c], up));
                    CHECK_OK(vt_ref_tri(&b.t, &x.t, diags[c], up));
                    CHECK(ht_compare("tri", &a.t, &b.t, -1) == 0);
                    /* in place */
                    CHECK_OK(vt_copy(&a.t, &x.t));
                    CHECK_OK(vt_tri(&a.t, &a.t, diags[c], up));
                    CHECK(ht_compare("tri in place", &a.t, &b.t, -1) == 0);
                    ht_free(&a), ht_free(&b);
                }
            ht_free(&x);
        }
    host_tensor v = ht_1d(VT_F32, 5), o = ht_1d(VT_F32, 5);
    CHECK_STATUS(vt_tri(&o.t, &v.t, 0, 0), VT_ERR_INVALID_ARGUMENT);
    int d = 1;
    int64_t sh = 1;
    CHECK_STATUS(vt_roll(&o.t, &v.t, 1, &d, &sh), VT_ERR_INDEX);
    ht_free(&v), ht_free(&o);
}

/* Lines with many ties and NaNs: values from a small set, +-inf, +-0, NaN
 * of either sign. */
static void fill_ties(host_tensor *h) {
    int64_t n = ht_block_elems(h);
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = next_u64();
        double v = (double)((int64_t)(r % 7) - 3);
        if (r % 23 == 0) v = NAN;
        if (r % 29 == 0) v = -0.0;
        if (r % 31 == 0) v = INFINITY;
        if (r % 37 == 0) v = -INFINITY;
        if (r % 41 == 0) v = -NAN; /* a NaN with its sign bit set: NaNs are equal */
        if (h->t.dtype == VT_BOOL) v = (double)(r & 1);
        if (h->t.dtype == VT_U8 && v < 0) v = -v;
        vt_convert(VT_F64, &v, 1, h->t.dtype, (char *)h->block + i * (int64_t)vt_dtype_size(h->t.dtype), 1, 1);
    }
}

/* Top-k of float lines long enough for the selection (k at most a 16th of
 * the line): the sorted array (k <= 32) and the heap (larger k), random
 * values and ties with NaNs of both signs, along the last dim (16-value
 * blocks compared first) and along a strided dim, against the reference. */
TEST(kernels_shape_topk_long_float_lines) {
    const vt_dtype dts[] = {VT_F32, VT_BF16, VT_F16};
    const int64_t ks[] = {1, 5, 32, 33, 68};
    for (int di = 0; di < 3; di++)
        for (int ties = 0; ties < 2; ties++)
            for (int layout = 0; layout < 2; layout++) {
                int64_t len = 1100;
                host_tensor x = make3(dts[di], 3, 2, len, layout);
                if (ties) fill_ties(&x);
                for (int kk = 0; kk < 5; kk++)
                    for (int desc = 0; desc < 2; desc++) {
                        int64_t ts[3] = {3, 2, ks[kk]};
                        host_tensor a = out3(dts[di], ts), b = out3(dts[di], ts), p = out3(VT_I64, ts),
                                    q = out3(VT_I64, ts);
                        CHECK_OK(vt_topk(&a.t, &p.t, &x.t, 2, ks[kk], desc));
                        CHECK_OK(vt_ref_topk(&b.t, &q.t, &x.t, 2, ks[kk], desc));
                        CHECK(ht_compare("topk values", &a.t, &b.t, -1) == 0);
                        CHECK(ht_compare("topk indices", &p.t, &q.t, -1) == 0);
                        ht_free(&a), ht_free(&b), ht_free(&p), ht_free(&q);
                    }
                ht_free(&x);
            }
}

TEST(kernels_shape_sort_topk) {
    static const int64_t lens[] = {1, 17, 48, 300};
    for (int di = 0; di < N_DT; di++)
        for (int li = 0; li < 4; li++)
            for (int layout = 0; layout < 3; layout++)
                for (int ties = 0; ties < 2; ties++) {
                    vt_dtype dt = all_dtypes[di];
                    int64_t len = lens[li];
                    if (layout == 1 && dt != VT_F32) continue;
                    host_tensor x = make3(dt, 3, 2, len, layout);
                    if (ties) fill_ties(&x);
                    int64_t s[3] = {3, 2, len};
                    for (int desc = 0; desc < 2; desc++) {
                        int dim = layout == 1 ? 2 : (desc ? -1 : 2);
                        host_tensor va = out3(dt, s), vb = out3(dt, s), ia = out3(VT_I64, s), ib = out3(VT_I64, s);
                        CHECK_OK(vt_sort(&va.t, &ia.t, &x.t, dim, desc));
                        CHECK_OK(vt_ref_sort(&vb.t, &ib.t, &x.t, dim, desc));
                        CHECK(ht_compare("sort values", &va.t, &vb.t, -1) == 0);
                        CHECK(ht_compare("sort indices", &ia.t, &ib.t, -1) == 0);
                        ht_free(&va), ht_free(&vb), ht_free(&ia), ht_free(&ib);
                        int64_t ks[] = {0, 1, len / 20, len};
                        for (int kk = 0; kk < 4; kk++) {
                            int64_t k = ks[kk], ts[3] = {3, 2, k};
                            host_tensor a = out3(dt, ts), b = out3(dt, ts), p = out3(VT_I64, ts), q = out3(VT_I64, ts);
                            CHECK_OK(vt_topk(&a.t, &p.t, &x.t, 2, k, desc));
                            CHECK_OK(vt_ref_topk(&b.t, &q.t, &x.t, 2, k, desc));
                            CHECK(ht_compare("topk values", &a.t, &b.t, -1) == 0);
                            CHECK(ht_compare("topk indices", &p.t, &q.t, -1) == 0);
                            ht_free(&a), ht_free(&b), ht_free(&p), ht_free(&q);
                        }
                    }
                    /* sort along a middle dim, values only */
                    host_tensor va = out3(dt, s), vb = out3(dt, s);
                    CHECK_OK(vt_sort(&va.t, NULL, &x.t, 0, 0));
                    CHECK_OK(vt_ref_sort(&vb.t, NULL, &x.t, 0, 0));
                    CHECK(ht_compare("sort dim 0", &va.t, &vb.t, -1) == 0);
                    ht_free(&va), ht_free(&vb), ht_free(&x);
                }
    host_tensor x = ht_1d(VT_F32, 5), o = ht_1d(VT_F32, 6);
    CHECK_STATUS(vt_topk(&o.t, NULL, &x.t, 0, 6, 1), VT_ERR_INDEX);
    CHECK_STATUS(vt_sort(&o.t, NULL, &x.t, 1, 0), VT_ERR_INDEX);
    CHECK_STATUS(vt_sort(&o.t, NULL, &x.t, 0, 0), VT_ERR_INVALID_ARGUMENT);
    ht_free(&x), ht_free(&o);
}

TEST(kernels_shape_ranges) {
    /* integer-valued ranges are exact in every dtype and every blocking */
    for (int di = 0; di < N_DT - 1; di++) {
        vt_dtype dt = all_dtypes[di];
        host_tensor o = ht_1d(dt, 100);
        for (int64_t vec = 0; vec <= 16; vec += 8)
            for (int64_t chunk = 0; chunk <= 37; chunk += 37) {
                CHECK_OK(vt_arange(&o.t, vt_scalar_from_int(-20), vt_scalar_from_int(1), vec, chunk));
                for (int64_t i = 0; i < 100; i++) {
                    double v;
                    vt_convert(dt, (char *)o.block + i * (int64_t)vt_dtype_size(dt), 1, VT_F64, &v, 1, 1);
                    double want = (double)(i - 20);
                    if (dt == VT_U8) want = (double)(uint8_t)(int)(i - 20);
                    CHECK_MSG(v == want, "arange %s vec %lld chunk %lld [%lld] = %g", vt_dtype_name(dt),
                              (long long)vec, (long long)chunk, (long long)i, v);
                }
                CHECK_OK(vt_linspace(&o.t, vt_scalar_from_double(0), vt_scalar_from_double(99), vec, chunk));
                for (int64_t i = 0; i < 100; i++) {
                    double v;
                    vt_convert(dt, (char *)o.block + i * (int64_t)vt_dtype_size(dt), 1, VT_F64, &v, 1, 1);
                    if (dt == VT_I8 && i > 127) continue;
                    CHECK_MSG(v == (double)i || dt == VT_I8, "linspace %s [%lld] = %g", vt_dtype_name(dt), (long long)i, v);
                }
            }
        ht_free(&o);
    }
    /* the block formula: element 0 of each 2*vec block is rounded, the rest stepped from it */
    host_tensor o = ht_1d(VT_F32, 40);
    CHECK_OK(vt_arange(&o.t, vt_scalar_from_double(0.3), vt_scalar_from_double(0.37), 8, 0));
    const float *f = o.block;
    for (int64_t i = 0; i < 40; i++) {
        float want = i < 32 ? (float)fma((double)(i % 8), 0.37, (double)(float)fma(0.37, (double)(i - i % 8), 0.3))
                            : (float)fma(0.37, (double)i, 0.3);
        CHECK_MSG(f[i] == want, "arange block formula [%lld]", (long long)i);
    }
    host_tensor two = ht_new(VT_F32, 2, (int64_t[]){2, 2});
    CHECK_STATUS(vt_arange(&two.t, vt_scalar_from_int(0), vt_scalar_from_int(1), 8, 0), VT_ERR_INVALID_ARGUMENT);
    ht_free(&o), ht_free(&two);
}

TEST(kernels_shape_searchsorted) {
    host_tensor sq = ht_1d(VT_F32, 9), v = ht_1d(VT_F32, 12), o = ht_1d(VT_I64, 12);
    const float seq[9] = {-1, 0, 0, 0, 2, 2, 5, INFINITY, NAN};
    memcpy(sq.block, seq, sizeof seq);
    const float vals[12] = {-5, -1, 0, 1, 2, 3, 5, 6, INFINITY, NAN, -0.0f, -INFINITY};
    memcpy(v.block, vals, sizeof vals);
    static const int64_t left[12] = {0, 0, 1, 4, 4, 6, 6, 7, 7, 9, 1, 0};
    static const int64_t right[12] = {0, 1, 4, 4, 6, 6, 7, 7, 9, 9, 4, 0}; /* NaN > inf is false */
    for (int r = 0; r < 2; r++) {
        CHECK_OK(vt_searchsorted(&o.t, &sq.t, &v.t, r));
        for (int i = 0; i < 12; i++)
            CHECK_MSG(((int64_t *)o.block)[i] == (r ? right : left)[i], "searchsorted right=%d [%d] = %lld", r, i,
                      (long long)((int64_t *)o.block)[i]);
    }
    ht_free(&sq), ht_free(&v), ht_free(&o);
}

TEST(kernels_shape_queued) {
    CHECK_OK(vt_init());
    host_tensor x = make3(VT_F32, 2, 3, 4, 0);
    ht_device(&x);
    vt_tensor l[8];
    for (int k = 0; k < 8; k++) l[k] = x.t;
    int64_t os[3] = {2, 3, 32};
    host_tensor a = out3(VT_F32, os), b = out3(VT_F32, os);
    ht_device(&a);
    CHECK_OK(vt_op_cat(0, "aten::cat", &a.t, 8, l, 2));
    CHECK_OK(vt_synchronize(0));
    CHECK_OK(vt_ref_cat(&b.t, 8, l, 2));
    CHECK(ht_compare("queued cat", &a.t, &b.t, -1) == 0);
    l[3].sizes[0] = 1;
    CHECK_STATUS(vt_op_cat(0, "aten::cat", &a.t, 8, l, 2), VT_ERR_INVALID_ARGUMENT);
    int64_t ts[3] = {2, 3, 5};
    host_tensor tv = out3(VT_F32, ts);
    ht_device(&tv);
    CHECK_STATUS(vt_op_topk(0, "aten::topk", &tv.t, NULL, &x.t, 2, 5, 1), VT_ERR_INDEX);
    CHECK_OK(vt_synchronize(0));
    ht_free(&x), ht_free(&a), ht_free(&b), ht_free(&tv);
}
