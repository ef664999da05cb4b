/* test_kernels_conv.c — vt_conv_forward / backward_input / backward_weight
 * against the direct-loop references for 1-3 spatial dims, stride,
 * padding, dilation, groups, odd sizes and non-contiguous layouts: exactly
 * with small integers (every partial sum exact), within fp32 rounding with
 * random values; adjoint identities; errors; zero sizes; the queued ops. */
#include "kernels/conv/conv.h"
#include "test_kernels_util.h"

typedef struct conv_case {
    const char *name;
    int sp;
    int64_t N, C, O, G;
    int64_t in[3], k[3], stride[3], pad[3], dil[3];
    int bias;
} conv_case;

static const conv_case cases[] = {
    {"1d", 1, 2, 3, 4, 1, {11}, {3}, {1}, {1}, {1}, 1},
    {"1d s2 d2 p2 groups", 1, 3, 4, 6, 2, {13}, {4}, {2}, {2}, {2}, 0},
    {"2d", 2, 2, 3, 5, 1, {7, 9}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
    {"2d s2 odd", 2, 1, 2, 3, 1, {10, 7}, {3, 2}, {2, 2}, {0, 0}, {1, 1}, 0},
    {"2d dil2 groups2", 2, 2, 4, 6, 2, {9, 8}, {3, 3}, {1, 2}, {2, 2}, {2, 2}, 1},
    {"2d depthwise", 2, 2, 5, 5, 5, {9, 8}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, 1},
    {"2d depthwise x2", 2, 1, 3, 6, 3, {6, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 0},
    /* the depthwise kernels (conv_dw.c): channels over one lane block,
     * stride, dilation, padding wider than the window reads, 1-3 dims */
    {"1d depthwise s2 d2", 1, 2, 18, 18, 18, {17}, {5}, {2}, {3}, {2}, 1},
    {"2d depthwise 33ch", 2, 2, 33, 33, 33, {9, 11}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
    {"2d depthwise s2 pad2", 2, 1, 20, 20, 20, {8, 7}, {3, 3}, {2, 2}, {2, 2}, {1, 1}, 0},
    /* whole lane blocks, no bias: a channels-last output row is one run */
    {"2d depthwise 32ch", 2, 2, 32, 32, 32, {9, 10}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 0},
    {"3d depthwise", 3, 1, 17, 17, 17, {4, 5, 6}, {3, 2, 3}, {1, 2, 1}, {1, 0, 2}, {1, 1, 2}, 1},
    /* planes wide enough to go in bands of output rows, the last one short */
    {"2d depthwise bands s2 d2", 2, 1, 16, 16, 16, {101, 160}, {3, 3}, {2, 2}, {2, 2}, {2, 2}, 1},
    /* NCHW planes with rows of 16-lane chunks and a tail (stride 1 along them) */
    {"2d depthwise wide rows", 2, 2, 5, 5, 5, {4, 37}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
    /* channels-last takes the rows drivers (conv_rows.c) from 8 channels a group */
    {"2d groups2 wide", 2, 2, 16, 8, 2, {6, 7}, {3, 2}, {1, 2}, {1, 0}, {2, 1}, 1},
    {"3d wide", 3, 1, 9, 4, 1, {4, 5, 4}, {2, 3, 2}, {2, 1, 1}, {0, 1, 1}, {1, 1, 2}, 0},
    {"1d 1x1 wide", 1, 3, 12, 5, 1, {9}, {1}, {1}, {0}, {1}, 1},
    /* stride 1: the input gradient runs as a convolution with the
     * transposed, reversed weight (groups, dilation); padding wider than
     * the window keeps col2im */
    {"2d groups2 s1", 2, 2, 16, 8, 2, {6, 5}, {3, 2}, {1, 1}, {1, 1}, {1, 2}, 1},
    {"2d pad past window", 2, 1, 3, 4, 1, {5, 5}, {2, 2}, {1, 1}, {2, 2}, {1, 1}, 0},
    /* a long 1-d signal with stride */
    {"1d long", 1, 2, 3, 4, 1, {150}, {3}, {2}, {1}, {1}, 1},
    {"2d 1x1", 2, 2, 16, 8, 1, {5, 6}, {1, 1}, {1, 1}, {0, 0}, {1, 1}, 1},
    {"2d bigger", 2, 2, 8, 16, 1, {16, 16}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
    {"3d", 3, 2, 2, 3, 1, {5, 6, 7}, {3, 2, 3}, {1, 2, 1}, {1, 0, 1}, {1, 1, 2}, 1},
    {"3d s2 groups2", 3, 1, 4, 4, 2, {5, 5, 6}, {2, 3, 3}, {2, 2, 2}, {1, 1, 0}, {1, 1, 1}, 0},
    /* the AMX engine's implicit GEMMs (conv_amx.c: forward, and the weight
     * gradient for stride 1) from 16 channels, groups 1:
     * stride 1 runs tiles across the padded grid (1-3 dims, dilation,
     * channels and outputs not multiples of 32, rows not of 16), other
     * strides along output rows with a short last tile */
    {"2d amx grid", 2, 2, 40, 40, 1, {5, 21}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
    {"2d amx s2 rows", 2, 1, 32, 17, 1, {7, 37}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, 1},
    {"2d amx dil2", 2, 1, 16, 33, 1, {9, 10}, {3, 3}, {1, 1}, {2, 2}, {2, 2}, 0},
    {"1d amx", 1, 3, 64, 48, 1, {50}, {5}, {1}, {2}, {1}, 1},
    {"3d amx", 3, 1, 20, 24, 1, {3, 5, 6}, {2, 3, 3}, {1, 1, 1}, {0, 1, 1}, {1, 1, 1}, 0},
    {"2d amx 1x3 s2", 2, 2, 24, 20, 1, {9, 10}, {1, 3}, {2, 2}, {0, 1}, {1, 1}, 1},
    /* fewer channels: merged taps (a window's taps along the last dim as
     * one K chunk of k2 * Cq <= 32), channels padded to even Cq where k2
     * is odd: an RGB stem (7x7/2, pad 3), one channel with an even k2 and
     * dilation in the other dims, 3-d, 1-d with stride 3 */
    {"2d amx stem", 2, 2, 3, 20, 1, {23, 30}, {7, 7}, {2, 2}, {3, 3}, {1, 1}, 1},
    {"2d amx 1ch dil", 2, 1, 1, 17, 1, {12, 19}, {5, 4}, {1, 1}, {2, 1}, {2, 1}, 0},
    {"3d amx merged", 3, 1, 5, 16, 1, {4, 6, 9}, {2, 3, 5}, {1, 2, 1}, {1, 1, 2}, {1, 1, 1}, 1},
    {"1d amx merged", 1, 3, 6, 18, 1, {40}, {5}, {3}, {2}, {1}, 1},
    /* strided input gradients by phase (a stride-1 convolution per phase
     * of the stride): a 1x1 downsample (three phases zero), a ResNet 3x3/2
     * on even rows, a kernel narrower than stride 3 with padding (phases
     * with 1, 0 and 1 taps), different strides per dim on channels over
     * the AMX threshold */
    {"2d 1x1 s2", 2, 2, 16, 24, 1, {9, 8}, {1, 1}, {2, 2}, {0, 0}, {1, 1}, 0},
    {"2d 3x3 s2 even", 2, 2, 32, 20, 1, {8, 10}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, 1},
    {"2d k2 s3 pad1", 2, 1, 16, 7, 1, {11, 10}, {2, 2}, {3, 3}, {1, 1}, {1, 1}, 0},
    {"1d long 16ch", 1, 2, 16, 4, 1, {150}, {3}, {2}, {1}, {1}, 1},
    {"3d s3x2x1 groups2", 3, 1, 34, 18, 2, {7, 6, 5}, {3, 2, 3}, {3, 2, 1}, {1, 0, 1}, {1, 1, 1}, 1},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static vt_conv_params case_params(const conv_case *c) {
    vt_conv_params p;
    memset(&p, 0, sizeof p);
    p.spatial = c->sp;
    for (int d = 0; d < 3; d++) {
        p.stride[d] = c->stride[d];
        p.padding[d] = c->pad[d];
        p.dilation[d] = c->dil[d];
    }
    p.groups = c->G;
    return p;
}

static int64_t out_size(const conv_case *c, int d) {
    return (c->in[d] + 2 * c->pad[d] - c->dil[d] * (c->k[d] - 1) - 1) / c->stride[d] + 1;
}

/* mixed: channels-last input, input gradient and weight; contiguous
 * output, output gradient and weight gradient (the channels-last drivers'
 * copies in and out, and their weight view). */
enum { LAYOUT_CONTIGUOUS = 0, LAYOUT_CHANNELS_LAST, LAYOUT_STRIDED, LAYOUT_MIXED, LAYOUT_COUNT };
static const char *const layout_names[] = {"contiguous", "channels-last", "strided", "mixed"};

/* A tensor [A, B, *spatial] in the given layout: channels-last puts dim 1
 * innermost; strided reads every other element of the last dim, from 1. */
static host_tensor ht_layout(vt_dtype dt, int ndim, const int64_t *sizes, int layout) {
    if (layout == LAYOUT_CONTIGUOUS) return ht_new(dt, ndim, sizes);
    int64_t bs[VT_MAX_DIMS];
    memcpy(bs, sizes, sizeof(int64_t) * (size_t)ndim);
    if (layout == LAYOUT_STRIDED) {
        bs[ndim - 1] = 2 * sizes[ndim - 1] + 1;
        host_tensor h = ht_new(dt, ndim, bs);
        h.t.sizes[ndim - 1] = sizes[ndim - 1];
        h.t.strides[ndim - 1] = 2;
        h.t.offset = 1;
        return h;
    }
    host_tensor h = ht_new(dt, ndim, sizes);
    int64_t n = sizes[1];
    h.t.strides[1] = 1;
    for (int d = ndim - 1; d >= 2; d--) h.t.strides[d] = n, n *= sizes[d];
    h.t.strides[0] = n;
    return h;
}

/* Whole block: small integers in [-2, 2] (ints) or uniform in [-1, 1). */
static void fill_values(host_tensor *h, int ints) {
    int64_t n = ht_block_elems(h);
    size_t es = vt_dtype_size(h->t.dtype);
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = next_u64();
        double d = ints ? (double)((int64_t)(r % 5) - 2) : (double)(r >> 11) * 0x1p-52 - 1.0;
        vt_convert(VT_F64, &d, 1, h->t.dtype, (char *)h->block + i * (int64_t)es, 1, 1);
    }
}

/* Every value of h's block times s (rounded to its dtype). */
static void scale_values(host_tensor *h, double s) {
    int64_t n = ht_block_elems(h);
    size_t es = vt_dtype_size(h->t.dtype);
    for (int64_t i = 0; i < n; i++) {
        double d;
        char *p = (char *)h->block + i * (int64_t)es;
        vt_convert(h->t.dtype, p, 1, VT_F64, &d, 1, 1);
        d *= s;
        vt_convert(VT_F64, &d, 1, h->t.dtype, p, 1, 1);
    }
}

/* A contiguous F64 copy of t, with absolute values when abs_values. */
static host_tensor to_f64(const vt_tensor *t, int abs_values) {
    host_tensor h = ht_new(VT_F64, t->ndim, t->sizes);
    CHECK_OK(vt_ref_copy(&h.t, t));
    if (abs_values) {
        double *p = h.block;
        for (int64_t i = 0; i < vt_tensor_numel(&h.t); i++) p[i] = fabs(p[i]);
    }
    return h;
}

/* |x - ref| <= tol * scale elementwise, scale being the same sum over
 * absolute values (so cancellation does not make the bound meaningless);
 * tol 0: the values must be equal. */
static int64_t compare_scaled(const char *what, const vt_tensor *x, const vt_tensor *ref, const vt_tensor *scale,
                              double tol) {
    host_tensor a = to_f64(x, 0), b = to_f64(ref, 0);
    const double *pa = a.block, *pb = b.block, *ps = scale ? (const double *)scale->data : NULL;
    int64_t n = vt_tensor_numel(x), bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double lim = tol * (ps ? ps[i] : 0.0) + (tol ? 1e-30 : 0.0);
        if (!(fabs(pa[i] - pb[i]) <= lim)) {
            if (bad < 3)
                vt_test_fail(__FILE__, __LINE__, "%s: element %lld: %.17g vs %.17g (limit %g)", what, (long long)i,
                             pa[i], pb[i], lim);
            bad++;
        }
    }
    ht_free(&a);
    ht_free(&b);
    return bad;
}

typedef struct conv_tensors {
    host_tensor x, w, b, y, gy, gx, gw;
} conv_tensors;

static conv_tensors make_tensors(const conv_case *c, vt_dtype dt, int layout) {
    conv_tensors t;
    int nd = c->sp + 2;
    int64_t xs[5] = {c->N, c->C}, ws[5] = {c->O, c->C / c->G}, ys[5] = {c->N, c->O};
    for (int d = 0; d < c->sp; d++) {
        xs[2 + d] = c->in[d];
        ws[2 + d] = c->k[d];
        ys[2 + d] = out_size(c, d);
    }
    int mixed = layout == LAYOUT_MIXED, in_layout = mixed ? LAYOUT_CHANNELS_LAST : layout;
    int out_layout = mixed ? LAYOUT_CONTIGUOUS : layout;
    t.x = ht_layout(dt, nd, xs, in_layout);
    t.w = ht_layout(dt, nd, ws, mixed ? LAYOUT_CHANNELS_LAST : layout == LAYOUT_STRIDED ? LAYOUT_STRIDED : LAYOUT_CONTIGUOUS);
    t.b = ht_layout(dt, 1, &c->O, layout == LAYOUT_STRIDED ? LAYOUT_STRIDED : LAYOUT_CONTIGUOUS);
    t.y = ht_layout(dt, nd, ys, out_layout);
    t.gy = ht_layout(dt, nd, ys, out_layout);
    t.gx = ht_layout(dt, nd, xs, in_layout);
    t.gw = ht_layout(dt, nd, ws, out_layout);
    return t;
}

static void free_tensors(conv_tensors *t) {
    ht_free(&t->x), ht_free(&t->w), ht_free(&t->b), ht_free(&t->y);
    ht_free(&t->gy), ht_free(&t->gx), ht_free(&t->gw);
}

/* Run all three kernels on case c and compare with the references at prec.
 * ints: small-integer data, compared exactly; else random data within tol
 * of the absolute-value scale. */
static void check_case(const conv_case *c, vt_dtype dt, vt_precision prec, int layout, int ints, double tol) {
    conv_tensors t = make_tensors(c, dt, layout);
    fill_values(&t.x, ints), fill_values(&t.w, ints), fill_values(&t.b, ints), fill_values(&t.gy, ints);
    fill_values(&t.y, 0), fill_values(&t.gx, 0), fill_values(&t.gw, 0); /* stale contents must be overwritten */
    vt_conv_params p = case_params(c);
    const vt_tensor *bias = c->bias ? &t.b.t : NULL;
    host_tensor yr = ht_new(dt, t.y.t.ndim, t.y.t.sizes), gxr = ht_new(dt, t.gx.t.ndim, t.gx.t.sizes),
                gwr = ht_new(dt, t.gw.t.ndim, t.gw.t.sizes);
    /* Absolute-value scales: the F64 reference over |operands|. */
    host_tensor ax = to_f64(&t.x.t, 1), aw = to_f64(&t.w.t, 1), ab = to_f64(&t.b.t, 1), agy = to_f64(&t.gy.t, 1);
    host_tensor sy = ht_new(VT_F64, yr.t.ndim, yr.t.sizes), sgx = ht_new(VT_F64, gxr.t.ndim, gxr.t.sizes),
                sgw = ht_new(VT_F64, gwr.t.ndim, gwr.t.sizes);
    if (!ints) {
        CHECK_OK(vt_ref_conv_forward(&sy.t, &ax.t, &aw.t, c->bias ? &ab.t : NULL, &p, prec));
        CHECK_OK(vt_ref_conv_backward_input(&sgx.t, &agy.t, &aw.t, &p, prec));
        CHECK_OK(vt_ref_conv_backward_weight(&sgw.t, &agy.t, &ax.t, &p, prec));
    }

    char what[200];
    snprintf(what, sizeof what, "%s %s prec=%d %s %s", c->name, vt_dtype_name(dt), (int)prec, layout_names[layout],
             ints ? "ints" : "random");
    char w2[240];
    CHECK_OK(vt_conv_forward(&t.y.t, &t.x.t, &t.w.t, bias, &p, prec));
    CHECK_OK(vt_ref_conv_forward(&yr.t, &t.x.t, &t.w.t, bias, &p, prec));
    snprintf(w2, sizeof w2, "forward %s", what);
    CHECK(compare_scaled(w2, &t.y.t, &yr.t, &sy.t, ints ? 0 : tol) == 0);

    CHECK_OK(vt_conv_backward_input(&t.gx.t, &t.gy.t, &t.w.t, &p, prec));
    CHECK_OK(vt_ref_conv_backward_input(&gxr.t, &t.gy.t, &t.w.t, &p, prec));
    snprintf(w2, sizeof w2, "backward_input %s", what);
    CHECK(compare_scaled(w2, &t.gx.t, &gxr.t, &sgx.t, ints ? 0 : tol) == 0);

    CHECK_OK(vt_conv_backward_weight(&t.gw.t, &t.gy.t, &t.x.t, &p, prec));
    CHECK_OK(vt_ref_conv_backward_weight(&gwr.t, &t.gy.t, &t.x.t, &p, prec));
    snprintf(w2, sizeof w2, "backward_weight %s", what);
    CHECK(compare_scaled(w2, &t.gw.t, &gwr.t, &sgw.t, ints ? 0 : tol) == 0);

    ht_free(&yr), ht_free(&gxr), ht_free(&gwr), ht_free(&ax), ht_free(&aw), ht_free(&ab), ht_free(&agy);
    ht_free(&sy), ht_free(&sgx), ht_free(&sgw);
    free_tensors(&t);
}

/* Small integers: products and partial sums are exact in f32 (and the
 * results exact in bf16 / f16 or rounded once the same way), so the MXU
 * path must equal the reference whatever the summation order. */
TEST(kernels_conv_exact_small_integers) {
    static const vt_dtype dts[] = {VT_F32, VT_BF16, VT_F16, VT_F64};
    for (size_t i = 0; i < N_CASES; i++)
        for (size_t d = 0; d < 4; d++) check_case(&cases[i], dts[d], VT_PRECISION_DEFAULT, LAYOUT_CONTIGUOUS, 1, 0);
}

static const conv_case *case_named(const char *name) {
    for (size_t i = 0; i < N_CASES; i++)
        if (!strcmp(cases[i].name, name)) return &cases[i];
    CHECK_MSG(0, "no conv case %s", name);
    return &cases[0];
}

/* The geometry vt_conv_check gives a case (forward, contiguous f32). */
static vt_conv_geom case_geom(const conv_case *c) {
    conv_tensors t = make_tensors(c, VT_F32, LAYOUT_CONTIGUOUS);
    vt_conv_params p = case_params(c);
    vt_conv_geom g;
    memset(&g, 0, sizeof g);
    CHECK_OK(vt_conv_check(VT_CONV_FORWARD, &t.x.t, &t.w.t, &t.y.t, c->bias ? &t.b.t : NULL, &p,
                           VT_PRECISION_DEFAULT, &g));
    free_tensors(&t);
    return g;
}

/* The depthwise cases run the depthwise kernels (not the im2col path the
 * other cases check them against); a depth multiplier does not. */
TEST(kernels_conv_depthwise_cases_take_the_depthwise_kernels) {
    static const char *const dw[] = {"2d depthwise", "1d depthwise s2 d2", "2d depthwise 33ch",
                                     "2d depthwise s2 pad2", "3d depthwise", "2d depthwise bands s2 d2",
                                     "2d depthwise wide rows", "2d depthwise 32ch"};
    for (size_t i = 0; i < sizeof dw / sizeof dw[0]; i++) {
        vt_conv_geom g = case_geom(case_named(dw[i]));
        CHECK_MSG(vt_conv_dw_takes(&g), "%s", dw[i]);
    }
    vt_conv_geom g = case_geom(case_named("2d depthwise x2"));
    CHECK(!vt_conv_dw_takes(&g));
}

/* A channels-last depthwise forward at DEFAULT whose output is channels-last
 * too reads its input where it lies (no blocks); the same sums in the same
 * order as the blocks a contiguous output goes through, so the same bits on
 * every ISA path: random data with a bias, a weight tap that is inf (it
 * meets the padding's zeros: NaN where a window crosses it, in both), tiny
 * values whose sums are denormal (the AVX512-BF16 store's other path), F32
 * and BF16, partial lane blocks, strides, dilation, 1 to 3 dims. */
TEST(kernels_conv_depthwise_channels_last_same_bits_as_blocks) {
    unsigned active = vt_isa_active();
    static const unsigned masks[] = {0, VT_ISA_AVX2, VT_ISA_AVX2 | VT_ISA_AVX512,
                                     VT_ISA_AVX2 | VT_ISA_AVX512 | VT_ISA_AVX512BF16};
    static const char *const dw[] = {"2d depthwise", "1d depthwise s2 d2", "2d depthwise 33ch", "2d depthwise s2 pad2",
                                     "3d depthwise", "2d depthwise 32ch"};
    static const vt_dtype dts[] = {VT_F32, VT_BF16};
    for (size_t m = 0; m < sizeof masks / sizeof masks[0]; m++) {
        vt_isa_force(masks[m] & active);
        for (size_t i = 0; i < sizeof dw / sizeof dw[0]; i++)
            for (size_t d = 0; d < 2; d++)
                for (int inf = 0; inf < 3; inf++) { /* 2: tiny values, denormal sums */
                    const conv_case *c = case_named(dw[i]);
                    conv_tensors cl = make_tensors(c, dts[d], LAYOUT_CHANNELS_LAST),
                                 mixed = make_tensors(c, dts[d], LAYOUT_MIXED);
                    fill_values(&cl.x, 0), fill_values(&cl.w, 0), fill_values(&cl.b, 0);
                    if (inf == 2) scale_values(&cl.x, 0x1p-60), scale_values(&cl.w, 0x1p-66), scale_values(&cl.b, 0x1p-126);
                    if (inf == 1) {
                        double v = INFINITY;
                        vt_convert(VT_F64, &v, 1, cl.w.t.dtype, (char *)cl.w.block + 5 * vt_dtype_size(cl.w.t.dtype),
                                   1, 1);
                    }
                    CHECK_OK(vt_copy(&mixed.x.t, &cl.x.t));
                    CHECK_OK(vt_copy(&mixed.w.t, &cl.w.t));
                    vt_conv_params p = case_params(c);
                    const vt_tensor *bias = c->bias ? &cl.b.t : NULL;
                    CHECK_OK(vt_conv_forward(&cl.y.t, &cl.x.t, &cl.w.t, bias, &p, VT_PRECISION_DEFAULT));
                    CHECK_OK(vt_conv_forward(&mixed.y.t, &mixed.x.t, &mixed.w.t, bias, &p, VT_PRECISION_DEFAULT));
                    char what[160];
                    snprintf(what, sizeof what, "%s %s inf %d isa %u", c->name, vt_dtype_name(dts[d]), inf,
                             masks[m] & active);
                    CHECK(ht_compare(what, &cl.y.t, &mixed.y.t, -1) == 0);
                    free_tensors(&cl), free_tensors(&mixed);
                }
    }
    vt_isa_force(active);
}

/* Channels-last inputs of these cases run the rows drivers. */
TEST(kernels_conv_channels_last_cases_take_the_rows_drivers) {
    static const char *const rows[] = {"2d 1x1", "2d bigger", "2d groups2 wide", "3d wide", "1d 1x1 wide"};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const conv_case *c = case_named(rows[i]);
        vt_conv_geom g = case_geom(c);
        conv_tensors t = make_tensors(c, VT_F32, LAYOUT_CHANNELS_LAST);
        CHECK_MSG(vt_conv_rows_takes(&g, &t.x.t, VT_CONV_FORWARD), "%s", rows[i]);
        free_tensors(&t);
        t = make_tensors(c, VT_F32, LAYOUT_CONTIGUOUS);
        CHECK_MSG(!vt_conv_rows_takes(&g, &t.x.t, VT_CONV_FORWARD), "%s contiguous", rows[i]);
        free_tensors(&t);
    }
}

/* On the AMX engine the implicit GEMM takes these forwards (and the
 * stride-1 input gradients, which run as forwards), whatever the layout,
 * fewer than 16 channels with merged taps; not HIGH / HIGHEST F32, groups,
 * few channels whose window along the last dim is over 32 values or
 * dilated. The weight gradient: 16 channels or more, stride 1. */
TEST(kernels_conv_amx_cases_take_the_implicit_gemm) {
#if VT_X86
    if (vt_mxu_engine_active() != &vt_mxu_engine_amx) return;
    static const char *const amx[] = {"2d amx grid",   "2d amx s2 rows", "2d amx dil2",    "1d amx",
                                      "3d amx",        "2d amx 1x3 s2",  "1d depthwise s2 d2", "2d amx stem",
                                      "2d amx 1ch dil", "3d amx merged", "1d amx merged",  "2d bigger"};
    for (size_t i = 0; i < sizeof amx / sizeof amx[0]; i++) {
        vt_conv_geom g = case_geom(case_named(amx[i]));
        if (vt_conv_dw_takes(&g)) continue; /* depthwise goes first */
        CHECK_MSG(vt_conv_amx_takes(&g, VT_PRECISION_DEFAULT), "%s", amx[i]);
        CHECK_MSG(!vt_conv_amx_takes(&g, VT_PRECISION_HIGH), "%s HIGH", amx[i]);
    }
    vt_conv_geom g = case_geom(case_named("2d groups2 wide"));
    CHECK(!vt_conv_amx_takes(&g, VT_PRECISION_DEFAULT));
    g = case_geom(case_named("2d bigger")); /* 8 channels: 3 taps of 8 merge */
    g.k[2] = 5;                               /* 5 taps of 8 are 40 values */
    CHECK(!vt_conv_amx_takes(&g, VT_PRECISION_DEFAULT));
    g = case_geom(case_named("2d amx stem"));
    g.dil[2] = 2; /* dilated taps do not lie back to back */
    CHECK(!vt_conv_amx_takes(&g, VT_PRECISION_DEFAULT));
    g = case_geom(case_named("2d 1x1")); /* a plain product */
    CHECK(!vt_conv_amx_takes(&g, VT_PRECISION_DEFAULT));
    /* the weight gradient: stride 1 only */
    static const char *const wg[] = {"2d amx grid", "2d amx dil2", "1d amx", "3d amx"};
    for (size_t i = 0; i < sizeof wg / sizeof wg[0]; i++) {
        g = case_geom(case_named(wg[i]));
        CHECK_MSG(vt_conv_amx_wgrad_takes(&g, VT_PRECISION_DEFAULT), "%s", wg[i]);
    }
    g = case_geom(case_named("2d amx s2 rows"));
    CHECK(!vt_conv_amx_wgrad_takes(&g, VT_PRECISION_DEFAULT));
    g = case_geom(case_named("2d bigger"));
    CHECK(!vt_conv_amx_wgrad_takes(&g, VT_PRECISION_DEFAULT));
#endif
}

/* An inf in the input: every weight-gradient entry whose windows read it
 * is inf or NaN, the others stay what the reference gives. (The AMX
 * weight gradient sums over the padded grid's padding positions too, with
 * gy 0 there, and would add 0 * inf = NaN elsewhere: it hands such inputs
 * to the drivers.) Small integers otherwise: exact. */
TEST(kernels_conv_weight_gradient_inf_input) {
    static const char *const names[] = {"2d amx grid", "2d amx dil2", "2d bigger"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const conv_case *c = case_named(names[i]);
        for (int layout = 0; layout < 2; layout++) {
            conv_tensors t = make_tensors(c, VT_F32, layout ? LAYOUT_CHANNELS_LAST : LAYOUT_CONTIGUOUS);
            fill_values(&t.x, 1), fill_values(&t.gy, 1);
            /* image 0, channel 1, the last column of the first row: only the
             * windows at the right edge read it */
            int64_t pos = c->in[c->sp - 1] - 1;
            float inf = INFINITY;
            int64_t off = t.x.t.offset + 1 * t.x.t.strides[1] + pos * t.x.t.strides[t.x.t.ndim - 1];
            memcpy((float *)t.x.t.data + off, &inf, 4);
            vt_conv_params p = case_params(c);
            host_tensor gwr = ht_new(VT_F32, t.gw.t.ndim, t.gw.t.sizes);
            CHECK_OK(vt_conv_backward_weight(&t.gw.t, &t.gy.t, &t.x.t, &p, VT_PRECISION_DEFAULT));
            CHECK_OK(vt_ref_conv_backward_weight(&gwr.t, &t.gy.t, &t.x.t, &p, VT_PRECISION_DEFAULT));
            host_tensor a = to_f64(&t.gw.t, 0), b = to_f64(&gwr.t, 0);
            const double *pa = a.block, *pb = b.block;
            int64_t bad = 0, nonfinite = 0;
            for (int64_t e = 0; e < vt_tensor_numel(&gwr.t); e++) {
                nonfinite += !isfinite(pb[e]);
                int same = isnan(pb[e]) ? isnan(pa[e]) : pa[e] == pb[e];
                if (!same && bad++ < 3)
                    CHECK_MSG(0, "%s layout %d element %lld: %g vs reference %g", names[i], layout, (long long)e,
                              pa[e], pb[e]);
            }
            CHECK(bad == 0);
            CHECK_MSG(nonfinite > 0 && nonfinite < vt_tensor_numel(&gwr.t), "%s: %lld non-finite", names[i],
                      (long long)nonfinite);
            ht_free(&a), ht_free(&b), ht_free(&gwr);
            free_tensors(&t);
        }
    }
}

/* A NaN and an inf in the input reach exactly the outputs whose windows
 * read them (the reference's NaN and inf outputs, the same finite values
 * elsewhere): merged taps read a window's values and nothing past them,
 * and the tiles' rows past the valid positions are never written. Small
 * integers otherwise: exact, on whatever path the case takes. */
TEST(kernels_conv_forward_nonfinite_input_stays_in_its_windows) {
    static const char *const names[] = {"2d amx stem", "2d amx 1ch dil", "3d amx merged", "1d amx merged",
                                        "2d bigger", "2d amx s2 rows", "2d"};
    static const vt_dtype dts[] = {VT_F32, VT_BF16};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        for (int layout = 0; layout < 2; layout++)
            for (size_t d = 0; d < 2; d++) {
                const conv_case *c = case_named(names[i]);
                conv_tensors t = make_tensors(c, dts[d], layout ? LAYOUT_CHANNELS_LAST : LAYOUT_CONTIGUOUS);
                fill_values(&t.x, 1), fill_values(&t.w, 1), fill_values(&t.b, 1);
                /* image 0: a NaN at the middle of the last dim of channel 0,
                 * an inf at its last position of the last channel */
                const int nd = t.x.t.ndim;
                const double bad[2] = {NAN, INFINITY};
                const int64_t pos[2] = {c->in[c->sp - 1] / 2, c->in[c->sp - 1] - 1}, ch[2] = {0, c->C - 1};
                for (int b = 0; b < 2; b++)
                    vt_convert(VT_F64, &bad[b], 1, dts[d],
                               (char *)t.x.t.data + (t.x.t.offset + ch[b] * t.x.t.strides[1] +
                                                     pos[b] * t.x.t.strides[nd - 1]) *
                                                        (int64_t)vt_dtype_size(dts[d]),
                               1, 1);
                vt_conv_params p = case_params(c);
                const vt_tensor *bias = c->bias ? &t.b.t : NULL;
                host_tensor yr = ht_new(dts[d], t.y.t.ndim, t.y.t.sizes);
                CHECK_OK(vt_conv_forward(&t.y.t, &t.x.t, &t.w.t, bias, &p, VT_PRECISION_DEFAULT));
                CHECK_OK(vt_ref_conv_forward(&yr.t, &t.x.t, &t.w.t, bias, &p, VT_PRECISION_DEFAULT));
                host_tensor a = to_f64(&t.y.t, 0), r = to_f64(&yr.t, 0);
                const double *pa = a.block, *pr = r.block;
                int64_t wrong = 0, nonfinite = 0, n = vt_tensor_numel(&yr.t);
                for (int64_t e = 0; e < n; e++) {
                    nonfinite += !isfinite(pr[e]);
                    int same = isnan(pr[e]) ? isnan(pa[e]) : pa[e] == pr[e];
                    if (!same && wrong++ < 3)
                        CHECK_MSG(0, "%s %s layout %d element %lld: %g vs reference %g", names[i],
                                  vt_dtype_name(dts[d]), layout, (long long)e, pa[e], pr[e]);
                }
                CHECK(wrong == 0);
                CHECK_MSG(nonfinite > 0 && nonfinite < n / 2, "%s: %lld of %lld non-finite", names[i],
                          (long long)nonfinite, (long long)n);
                ht_free(&a), ht_free(&r), ht_free(&yr);
                free_tensors(&t);
            }
}

/* Strides without dilation take the phases from 16 input channels;
 * dilation, fewer channels (an RGB stem) and stride 1 (one convolution
 * already) do not. */
TEST(kernels_conv_strided_input_grad_takes_phases) {
    static const char *const yes[] = {"2d 1x1 s2", "2d 3x3 s2 even", "2d k2 s3 pad1", "3d s3x2x1 groups2",
                                      "2d amx s2 rows", "2d amx 1x3 s2", "1d long 16ch"};
    static const char *const no[] = {"1d s2 d2 p2 groups", "3d wide", "2d amx stem", "2d s2 odd", "2d",
                                     "2d dil2 groups2", "3d amx"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        vt_conv_geom g = case_geom(case_named(yes[i]));
        CHECK_MSG(vt_conv_input_grad_by_phases(&g), "%s", yes[i]);
    }
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        vt_conv_geom g = case_geom(case_named(no[i]));
        CHECK_MSG(!vt_conv_input_grad_by_phases(&g), "%s", no[i]);
    }
}

/* Outputs that round to bf16 denormals (a zero input, a bias of
 * denormals) keep them exactly, as vt_f32_to_bf16 rounds: the engines'
 * write-out rounds whole rows in one instruction where the CPU has one,
 * which reads denormals as zero, so such rows take the integer rounding. */
TEST(kernels_conv_bf16_denormal_outputs) {
    static const char *const names[] = {"2d amx grid", "2d bigger", "2d"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        for (int layout = 0; layout < 2; layout++) {
            const conv_case *c = case_named(names[i]);
            conv_tensors t = make_tensors(c, VT_BF16, layout ? LAYOUT_CHANNELS_LAST : LAYOUT_CONTIGUOUS);
            memset(t.x.block, 0, t.x.bytes);
            fill_values(&t.w, 1);
            uint16_t *bb = (uint16_t *)t.b.block;
            for (int64_t o = 0; o < c->O; o++) bb[o] = (uint16_t)((o % 2 ? 0x8000u : 0u) | (uint16_t)(1 + o * 3 % 0x7f));
            vt_conv_params p = case_params(c);
            host_tensor yr = ht_new(VT_BF16, t.y.t.ndim, t.y.t.sizes);
            CHECK_OK(vt_conv_forward(&t.y.t, &t.x.t, &t.w.t, &t.b.t, &p, VT_PRECISION_DEFAULT));
            CHECK_OK(vt_ref_conv_forward(&yr.t, &t.x.t, &t.w.t, &t.b.t, &p, VT_PRECISION_DEFAULT));
            CHECK_MSG(ht_compare("denormal bias", &t.y.t, &yr.t, -1) == 0, "%s layout %d", names[i], layout);
            /* and they are the bias itself, not zeros */
            uint16_t first;
            memcpy(&first, (const char *)t.y.t.data + t.y.t.offset * 2, 2);
            CHECK_MSG(first == bb[0], "%s layout %d: %#x, bias %#x", names[i], layout, first, bb[0]);
            ht_free(&yr);
            free_tensors(&t);
        }
}

/* The AMX implicit GEMMs over several chunks of images (a padded input
 * buffer of a few KiB): each chunk's fill, the weight gradient's sums going
 * on across chunks from the f32 buffer (the path a K of several blocks
 * takes too), the last chunk short. */
TEST(kernels_conv_amx_chunks) {
#if VT_X86
    static const char *const names[] = {"2d amx grid", "2d amx s2 rows", "1d amx", "3d amx", "2d amx stem",
                                        "1d amx merged"};
    vt_conv_amx_force_chunk_bytes(14 << 10); /* 1-d: forwards 2 images a chunk (3: the last short), the rest 1 */
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        check_case(case_named(names[i]), VT_F32, VT_PRECISION_DEFAULT, LAYOUT_CONTIGUOUS, 1, 0);
        check_case(case_named(names[i]), VT_BF16, VT_PRECISION_DEFAULT, LAYOUT_CHANNELS_LAST, 1, 0);
        check_case(case_named(names[i]), VT_F32, VT_PRECISION_DEFAULT, LAYOUT_MIXED, 0, 1e-5);
    }
    vt_conv_amx_force_chunk_bytes(0);
#endif
}

TEST(kernels_conv_exact_every_engine) {
    unsigned active = vt_isa_active();
    static const unsigned masks[] = {0, VT_ISA_AVX2, VT_ISA_AVX2 | VT_ISA_AVX512,
                                     VT_ISA_AVX2 | VT_ISA_AVX512 | VT_ISA_AVX512BF16};
    static const char *const names[] = {"2d", "3d", "2d depthwise 33ch", "3d depthwise", "2d depthwise wide rows"};
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

#if VT_X86
/* The AVX512-BF16 depthwise loops round with VCVTNEPS2BF16, the AVX-512 ones
 * with bit operations: the same parts for every high half of an f32 and low
 * halves at and around the ties (zeros, denormals, the largest finite values,
 * infinities, NaN payloads), at DEFAULT, HIGH and HIGHEST. */
TEST(kernels_conv_dw_split_same_bits_avx512bf16) {
    const unsigned need = VT_ISA_AVX512 | VT_ISA_AVX512BF16;
    if ((vt_isa_available() & need) != need) return;
    static const uint32_t lows[] = {0x0000, 0x8000, 0x7fff, 0x8001, 0xffff, 0x0001, 0x1234};
    const int64_t per = (int64_t)(sizeof lows / sizeof lows[0]), n = 65536 * per;
    float *raw = malloc((size_t)n * sizeof *raw), *s[2][3];
    for (uint32_t h = 0; h < 65536; h++)
        for (int64_t k = 0; k < per; k++) {
            uint32_t u = h << 16 | lows[k];
            memcpy(&raw[h * per + k], &u, 4);
        }
    for (int e = 0; e < 2; e++)
        for (int k = 0; k < 3; k++) s[e][k] = malloc((size_t)n * sizeof(float));
    const vt_dw_kernels *K[2] = {&vt_dw_kernels_avx512, &vt_dw_kernels_avx512bf16};
    static const int nlows[] = {0, 2, 5}; /* DEFAULT, HIGH, HIGHEST */
    for (int p = 0; p < 3; p++) {
        for (int e = 0; e < 2; e++) {
            for (int k = 0; k < 3; k++) memset(s[e][k], 0, (size_t)n * sizeof(float));
            K[e]->split(raw, n, nlows[p], s[e]);
        }
        for (int k = 0; k < 3; k++) CHECK_MSG(memcmp(s[0][k], s[1][k], (size_t)n * sizeof(float)) == 0, "nlow %d slot %d", nlows[p], k);
    }
    for (int e = 0; e < 2; e++)
        for (int k = 0; k < 3; k++) free(s[e][k]);
    free(raw);
}
#endif
