/* test_kernels_pool.c — pooling and upsampling kernels against the scalar
 * references (every dtype, NCHW and channels-last, awkward sizes, ceil mode,
 * padding, dilation), backward ops by the adjoint identity <f(x), g> =
 * <x, f'(g)>, and the error statuses. */
#include "test_kernels_util.h"

static host_tensor nchw(vt_dtype dt, int64_t n, int64_t c, int64_t h, int64_t w, int channels_last) {
    int64_t s[4] = {n, c, h, w};
    host_tensor t = ht_new(dt, 4, s);
    if (channels_last) { /* strides of an NHWC block */
        t.t.strides[1] = 1;
        t.t.strides[3] = c;
        t.t.strides[2] = c * w;
        t.t.strides[0] = c * w * h;
    }
    return t;
}

static double dot(const vt_tensor *a, const vt_tensor *b) {
    int64_t n = vt_tensor_numel(a);
    host_tensor x = ht_1d(VT_F64, n), y = ht_1d(VT_F64, n);
    vt_tensor xv = x.t, yv = y.t;
    xv.ndim = yv.ndim = a->ndim;
    int64_t st = 1;
    for (int d = a->ndim - 1; d >= 0; d--) {
        xv.sizes[d] = yv.sizes[d] = a->sizes[d];
        xv.strides[d] = yv.strides[d] = st;
        st *= a->sizes[d];
    }
    vt_copy(&xv, a);
    vt_copy(&yv, b);
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += ((double *)x.block)[i] * ((double *)y.block)[i];
    ht_free(&x);
    ht_free(&y);
    return s;
}

typedef struct pool_case {
    int64_t n, c, h, w, k[2], s[2], p[2], d[2];
    int ceil;
} pool_case;

static const pool_case cases[] = {
    {2, 3, 7, 9, {2, 2}, {2, 2}, {0, 0}, {1, 1}, 0},
    {1, 5, 17, 15, {3, 3}, {2, 2}, {1, 1}, {1, 1}, 1},
    {2, 2, 10, 11, {3, 2}, {1, 3}, {1, 1}, {2, 1}, 0},
    {1, 1, 5, 5, {5, 5}, {1, 1}, {2, 2}, {1, 1}, 1},
    {3, 33, 8, 8, {2, 2}, {2, 2}, {1, 0}, {1, 1}, 1},
};

TEST(kernels_pool_forward_vs_reference) {
    const vt_dtype dts[] = {VT_F32, VT_BF16, VT_F16, VT_F64};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (size_t di = 0; di < 4; di++)
            for (int cl = 0; cl < 2; cl++) {
                const pool_case *q = &cases[ci];
                vt_dtype dt = dts[di];
                vt_pool2d_params p = {{q->k[0], q->k[1]}, {q->s[0], q->s[1]}, {q->p[0], q->p[1]},
                                      {q->d[0], q->d[1]}, q->ceil, (int)(ci % 2), ci == 3 ? 7 : 0};
                host_tensor x = nchw(dt, q->n, q->c, q->h, q->w, cl);
                ht_fill_random(&x, ci == 0, 0);
                int64_t oh = vt_pool_output_size(q->h, q->k[0], q->p[0], q->s[0], q->d[0], q->ceil);
                int64_t ow = vt_pool_output_size(q->w, q->k[1], q->p[1], q->s[1], q->d[1], q->ceil);
                host_tensor o1 = nchw(dt, q->n, q->c, oh, ow, cl), o2 = nchw(dt, q->n, q->c, oh, ow, 0);
                host_tensor i1 = nchw(VT_I64, q->n, q->c, oh, ow, cl), i2 = nchw(VT_I64, q->n, q->c, oh, ow, 0);
                CHECK_OK(vt_max_pool2d(&o1.t, &i1.t, &x.t, &p));
                CHECK_OK(vt_ref_max_pool2d(&o2.t, &i2.t, &x.t, &p));
                CHECK(ht_compare("max_pool2d", &o1.t, &o2.t, -1) == 0);
                CHECK(ht_compare("max_pool2d indices", &i1.t, &i2.t, -1) == 0);
                int64_t aoh = vt_pool_output_size(q->h, q->k[0], q->p[0], q->s[0], 1, q->ceil);
                int64_t aow = vt_pool_output_size(q->w, q->k[1], q->p[1], q->s[1], 1, q->ceil);
                host_tensor a1 = nchw(dt, q->n, q->c, aoh, aow, cl), a2 = nchw(dt, q->n, q->c, aoh, aow, 0);
                CHECK_OK(vt_avg_pool2d(&a1.t, &x.t, &p));
                CHECK_OK(vt_ref_avg_pool2d(&a2.t, &x.t, &p));
                CHECK(ht_compare("avg_pool2d", &a1.t, &a2.t, ulp_tolerance(dt)) == 0);
                /* adjoint of average pooling */
                if (dt == VT_F64) {
                    host_tensor g = nchw(dt, q->n, q->c, aoh, aow, cl), gi = nchw(dt, q->n, q->c, q->h, q->w, !cl);
                    ht_fill_random(&g, 0, 0);
                    CHECK_OK(vt_avg_pool2d_backward(&gi.t, &g.t, &p));
                    double l = dot(&a1.t, &g.t), r = dot(&x.t, &gi.t);
                    if (ci != 0) /* case 0 holds inf / NaN */
                        CHECK_MSG(fabs(l - r) <= 1e-9 * (fabs(l) + 1), "avg adjoint %g vs %g", l, r);
                    /* max backward: grad scattered at the indices */
                    host_tensor gm = nchw(dt, q->n, q->c, oh, ow, 0), gmi = nchw(dt, q->n, q->c, q->h, q->w, cl);
                    ht_fill_random(&gm, 0, 0);
                    CHECK_OK(vt_max_pool2d_backward(&gmi.t, &gm.t, &i1.t));
                    double lm = dot(&o1.t, &gm.t), rm = dot(&x.t, &gmi.t);
                    if (ci != 0) CHECK_MSG(fabs(lm - rm) <= 1e-9 * (fabs(lm) + 1), "max adjoint %g vs %g", lm, rm);
                    ht_free(&g); ht_free(&gi); ht_free(&gm); ht_free(&gmi);
                }
                ht_free(&x); ht_free(&o1); ht_free(&o2); ht_free(&i1); ht_free(&i2); ht_free(&a1); ht_free(&a2);
            }
}

TEST(kernels_pool_adaptive_and_upsample_vs_reference) {
    const vt_dtype dts[] = {VT_F32, VT_BF16, VT_F16, VT_F64};
    const int64_t shapes[][4] = {{7, 9, 3, 4}, {5, 5, 1, 1}, {10, 3, 4, 7}, {4, 6, 9, 13}, {3, 3, 3, 3}};
    for (size_t si = 0; si < 5; si++)
        for (size_t di = 0; di < 4; di++)
            for (int cl = 0; cl < 2; cl++) {
                vt_dtype dt = dts[di];
                int64_t ih = shapes[si][0], iw = shapes[si][1], oh = shapes[si][2], ow = shapes[si][3];
                host_tensor x = nchw(dt, 2, 3, ih, iw, cl);
                ht_fill_random(&x, 0, 0);
                host_tensor o1 = nchw(dt, 2, 3, oh, ow, cl), o2 = nchw(dt, 2, 3, oh, ow, 0);
                host_tensor i1 = nchw(VT_I64, 2, 3, oh, ow, 0), i2 = nchw(VT_I64, 2, 3, oh, ow, cl);
                CHECK_OK(vt_adaptive_avg_pool2d(&o1.t, &x.t));
                CHECK_OK(vt_ref_adaptive_avg_pool2d(&o2.t, &x.t));
                CHECK(ht_compare("adaptive_avg", &o1.t, &o2.t, ulp_tolerance(dt)) == 0);
                CHECK_OK(vt_adaptive_max_pool2d(&o1.t, &i1.t, &x.t));
                CHECK_OK(vt_ref_adaptive_max_pool2d(&o2.t, &i2.t, &x.t));
                CHECK(ht_compare("adaptive_max", &o1.t, &o2.t, -1) == 0);
                CHECK(ht_compare("adaptive_max indices", &i1.t, &i2.t, -1) == 0);
                if (dt == VT_F64) {
                    host_tensor g = nchw(dt, 2, 3, oh, ow, cl), gi = nchw(dt, 2, 3, ih, iw, 0);
                    ht_fill_random(&g, 0, 0);
                    CHECK_OK(vt_adaptive_avg_pool2d(&o1.t, &x.t));
                    CHECK_OK(vt_adaptive_avg_pool2d_backward(&gi.t, &g.t));
                    double l = dot(&o1.t, &g.t), r = dot(&x.t, &gi.t);
                    CHECK_MSG(fabs(l - r) <= 1e-9 * (fabs(l) + 1), "adaptive avg adjoint %g vs %g", l, r);
                    ht_free(&g); ht_free(&gi);
                }
                /* upsample from (oh, ow) to (ih, iw), all modes, scales given or not */
                host_tensor u = nchw(dt, 2, 3, oh, ow, !cl);
                ht_fill_random(&u, 0, 0);
                for (int mode = 0; mode < 3; mode++)
                    for (int ac = 0; ac < 2; ac++) {
                        double sh = ac ? 0.0 : (double)ih / (double)oh * 1.01, sw = ac ? 0.0 : 2.5;
                        CHECK_OK(vt_upsample2d((vt_upsample_mode)mode, &x.t, &u.t, ac, sh, sw));
                        host_tensor r = nchw(dt, 2, 3, ih, iw, 0);
                        CHECK_OK(vt_ref_upsample2d((vt_upsample_mode)mode, &r.t, &u.t, ac, sh, sw));
                        CHECK(ht_compare("upsample", &x.t, &r.t, mode == 2 ? ulp_tolerance(dt) : -1) == 0);
                        if (dt == VT_F64) {
                            host_tensor g = nchw(dt, 2, 3, ih, iw, 0), gi = nchw(dt, 2, 3, oh, ow, cl);
                            ht_fill_random(&g, 0, 0);
                            CHECK_OK(vt_upsample2d_backward((vt_upsample_mode)mode, &gi.t, &g.t, ac, sh, sw));
                            double l = dot(&x.t, &g.t), rr = dot(&u.t, &gi.t);
                            CHECK_MSG(fabs(l - rr) <= 1e-9 * (fabs(l) + 1), "upsample adjoint mode %d: %g vs %g", mode, l, rr);
                            ht_free(&g); ht_free(&gi);
                        }
                        ht_free(&r);
                    }
                ht_free(&u); ht_free(&x); ht_free(&o1); ht_free(&o2); ht_free(&i1); ht_free(&i2);
            }
}

TEST(kernels_pool_errors_and_empty) {
    vt_pool2d_params p = {{2, 2}, {2, 2}, {0, 0}, {1, 1}, 0, 1, 0};
    host_tensor x = nchw(VT_F32, 1, 2, 4, 4, 0), o = nchw(VT_F32, 1, 2, 3, 2, 0), ok = nchw(VT_F32, 1, 2, 2, 2, 0);
    CHECK_STATUS(vt_max_pool2d(&o.t, NULL, &x.t, &p), VT_ERR_INVALID_ARGUMENT); /* wrong output size */
    vt_pool2d_params bad = p;
    bad.padding[0] = 2;
    CHECK_STATUS(vt_avg_pool2d(&ok.t, &x.t, &bad), VT_ERR_INVALID_ARGUMENT);
    host_tensor xi = nchw(VT_I32, 1, 2, 4, 4, 0);
    CHECK_STATUS(vt_max_pool2d(&ok.t, NULL, &xi.t, &p), VT_ERR_INVALID_ARGUMENT);
    /* out-of-range index in the backward */
    host_tensor idx = nchw(VT_I64, 1, 2, 2, 2, 0), g = nchw(VT_F32, 1, 2, 2, 2, 0);
    ((int64_t *)idx.block)[5] = 16;
    CHECK_STATUS(vt_max_pool2d_backward(&x.t, &g.t, &idx.t), VT_ERR_INDEX);
    ((int64_t *)idx.block)[5] = -1;
    CHECK_STATUS(vt_max_pool2d_backward(&x.t, &g.t, &idx.t), VT_ERR_INDEX);
    /* empty batch is fine */
    host_tensor e = nchw(VT_F32, 0, 2, 4, 4, 0), eo = nchw(VT_F32, 0, 2, 2, 2, 0);
    CHECK_OK(vt_max_pool2d(&eo.t, NULL, &e.t, &p));
    CHECK_OK(vt_upsample2d(VT_UPSAMPLE_BILINEAR, &e.t, &eo.t, 0, 0, 0));
    ht_free(&x); ht_free(&o); ht_free(&ok); ht_free(&xi); ht_free(&idx); ht_free(&g); ht_free(&e); ht_free(&eo);
}
