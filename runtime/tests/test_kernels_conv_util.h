/* test_kernels_conv_util.h — the convolution tests' cases (1-3 spatial
 * dims, stride, padding, dilation, groups, odd sizes; the shapes each
 * driver takes) and helpers: tensors in every layout, the three kernels run
 * and compared with the direct-loop references (check_case). */
#ifndef VTPU_TEST_KERNELS_CONV_UTIL_H
#define VTPU_TEST_KERNELS_CONV_UTIL_H

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
    /* no padding at stride 2: the last input row and column meet no window */
    {"2d depthwise 32ch s2 nopad", 2, 2, 32, 32, 32, {10, 12}, {3, 3}, {2, 2}, {0, 0}, {1, 1}, 0},
    {"3d depthwise", 3, 1, 17, 17, 17, {4, 5, 6}, {3, 2, 3}, {1, 2, 1}, {1, 0, 2}, {1, 1, 2}, 1},
    /* planes wide enough to go in bands of output rows, the last one short */
    {"2d depthwise bands s2 d2", 2, 1, 16, 16, 16, {101, 160}, {3, 3}, {2, 2}, {2, 2}, {2, 2}, 1},
    /* NCHW planes with rows of 16-lane chunks and a tail (stride 1 along them) */
    {"2d depthwise wide rows", 2, 2, 5, 5, 5, {4, 37}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
    /* stride 3 and dilation 2 along rows wider than a lane block */
    {"2d depthwise wide rows s3 d2", 2, 2, 5, 5, 5, {5, 61}, {3, 3}, {1, 3}, {1, 1}, {1, 2}, 1},
    /* NCHW stride 2 along rows of several lane chunks: the rows' two phases,
     * the first input at an odd padded position (pad 1) and at an even one */
    {"2d depthwise wide rows s2", 2, 1, 6, 6, 6, {5, 75}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, 1},
    {"2d depthwise wide rows s2 pad2", 2, 1, 3, 3, 3, {3, 70}, {3, 5}, {1, 2}, {0, 2}, {1, 1}, 0},
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
    /* a narrow weight gradient over a long K (images x positions at least
     * 4096): by K slices over the cores, the columns stored first */
    {"2d 1x1 long K", 2, 3, 24, 40, 1, {41, 37}, {1, 1}, {1, 1}, {0, 0}, {1, 1}, 0},
    {"2d 3ch 3x3 long K groups", 2, 2, 6, 10, 2, {50, 47}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
    {"3d", 3, 2, 2, 3, 1, {5, 6, 7}, {3, 2, 3}, {1, 2, 1}, {1, 0, 1}, {1, 1, 2}, 1},
    {"3d s2 groups2", 3, 1, 4, 4, 2, {5, 5, 6}, {2, 3, 3}, {2, 2, 2}, {1, 1, 0}, {1, 1, 1}, 0},
    /* the AMX engine's implicit GEMMs (conv_amx.c: forward, and the weight
     * gradient) from 16 channels, groups 1:
     * stride 1 runs tiles across the padded grid (1-3 dims, dilation,
     * channels and outputs not multiples of 32, rows not of 16), other
     * strides along output rows with a short last tile; the AVX512-BF16
     * engine's tiles gather output positions */
    {"2d amx grid", 2, 2, 40, 40, 1, {5, 21}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
    {"2d amx s2 rows", 2, 1, 32, 17, 1, {7, 37}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, 1},
    {"2d amx dil2", 2, 1, 16, 33, 1, {9, 10}, {3, 3}, {1, 1}, {2, 2}, {2, 2}, 0},
    {"1d amx", 1, 3, 64, 48, 1, {50}, {5}, {1}, {2}, {1}, 1},
    {"3d amx", 3, 1, 20, 24, 1, {3, 5, 6}, {2, 3, 3}, {1, 1, 1}, {0, 1, 1}, {1, 1, 1}, 0},
    {"2d amx 1x3 s2", 2, 2, 24, 20, 1, {9, 10}, {1, 3}, {2, 2}, {0, 1}, {1, 1}, 1},
    /* small images: on the AVX512-BF16 engine a tile's 16 positions run on
     * into the next image (49 and 25 positions an image) */
    {"2d amx small images", 2, 5, 24, 40, 1, {7, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
    {"2d amx small images s2", 2, 3, 32, 20, 1, {9, 9}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, 0},
    /* fewer channels: merged taps (a window's taps along the last dim as
     * one K chunk of k2 * Cq <= 32), channels padded to even Cq where k2
     * is odd: an RGB stem (7x7/2, pad 3), one channel with an even k2 and
     * dilation in the other dims, 3-d, 1-d with stride 3 */
    {"2d amx stem", 2, 2, 3, 20, 1, {23, 30}, {7, 7}, {2, 2}, {3, 3}, {1, 1}, 1},
    {"2d amx 1ch dil", 2, 1, 1, 17, 1, {12, 19}, {5, 4}, {1, 1}, {2, 1}, {2, 1}, 0},
    {"3d amx merged", 3, 1, 5, 16, 1, {4, 6, 9}, {2, 3, 5}, {1, 2, 1}, {1, 1, 2}, {1, 1, 1}, 1},
    {"1d amx merged", 1, 3, 6, 18, 1, {40}, {5}, {3}, {2}, {1}, 1},
    /* the AMX weight gradient by phase planes (strided, under 16
     * channels): a kernel narrower than stride 3 (phases with no taps),
     * 3-d with strides 2, 1, 2 */
    {"2d k2 s3 8ch", 2, 1, 8, 7, 1, {11, 10}, {2, 2}, {3, 3}, {1, 1}, {1, 1}, 0},
    {"3d s2x1x2 4ch", 3, 1, 4, 20, 1, {5, 6, 7}, {3, 2, 3}, {2, 1, 2}, {1, 0, 1}, {1, 1, 1}, 1},
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
    /* 1x1 convolutions widening the channels: the weight gradient as the
     * transposed product (input^T @ grad_out), groups too */
    {"2d 1x1 widening", 2, 2, 8, 24, 1, {5, 6}, {1, 1}, {1, 1}, {0, 0}, {1, 1}, 1},
    {"2d 1x1 groups2 widening", 2, 2, 16, 48, 2, {3, 7}, {1, 1}, {1, 1}, {0, 0}, {1, 1}, 0},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static inline vt_conv_params case_params(const conv_case *c) {
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

static inline int64_t out_size(const conv_case *c, int d) {
    return (c->in[d] + 2 * c->pad[d] - c->dil[d] * (c->k[d] - 1) - 1) / c->stride[d] + 1;
}

/* mixed: channels-last input, input gradient and weight; contiguous
 * output, output gradient and weight gradient (the channels-last drivers'
 * copies in and out, and their weight view). */
enum { LAYOUT_CONTIGUOUS = 0, LAYOUT_CHANNELS_LAST, LAYOUT_STRIDED, LAYOUT_MIXED, LAYOUT_COUNT };
static const char *const layout_names[] = {"contiguous", "channels-last", "strided", "mixed"};

/* A tensor [A, B, *spatial] in the given layout: channels-last puts dim 1
 * innermost; strided reads every other element of the last dim, from 1. */
static inline host_tensor ht_layout(vt_dtype dt, int ndim, const int64_t *sizes, int layout) {
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
static inline void fill_values(host_tensor *h, int ints) {
    int64_t n = ht_block_elems(h);
    size_t es = vt_dtype_size(h->t.dtype);
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = next_u64();
        double d = ints ? (double)((int64_t)(r % 5) - 2) : (double)(r >> 11) * 0x1p-52 - 1.0;
        vt_convert(VT_F64, &d, 1, h->t.dtype, (char *)h->block + i * (int64_t)es, 1, 1);
    }
}

/* Every value of h's block times s (rounded to its dtype). */
static inline void scale_values(host_tensor *h, double s) {
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
static inline host_tensor to_f64(const vt_tensor *t, int abs_values) {
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
static inline int64_t compare_scaled(const char *what, const vt_tensor *x, const vt_tensor *ref, const vt_tensor *scale,
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

static inline conv_tensors make_tensors(const conv_case *c, vt_dtype dt, int layout) {
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

static inline void free_tensors(conv_tensors *t) {
    ht_free(&t->x), ht_free(&t->w), ht_free(&t->b), ht_free(&t->y);
    ht_free(&t->gy), ht_free(&t->gx), ht_free(&t->gw);
}

/* Run all three kernels on case c and compare with the references at prec.
 * ints: small-integer data, compared exactly; else random data within tol
 * of the absolute-value scale. */
static inline void check_case(const conv_case *c, vt_dtype dt, vt_precision prec, int layout, int ints, double tol) {
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

static const conv_case *case_named(const char *name) {
    for (size_t i = 0; i < N_CASES; i++)
        if (!strcmp(cases[i].name, name)) return &cases[i];
    CHECK_MSG(0, "no conv case %s", name);
    return &cases[0];
}

/* The geometry vt_conv_check gives a case (forward, contiguous f32). */
static inline vt_conv_geom case_geom(const conv_case *c) {
    conv_tensors t = make_tensors(c, VT_F32, LAYOUT_CONTIGUOUS);
    vt_conv_params p = case_params(c);
    vt_conv_geom g;
    memset(&g, 0, sizeof g);
    CHECK_OK(vt_conv_check(VT_CONV_FORWARD, &t.x.t, &t.w.t, &t.y.t, c->bias ? &t.b.t : NULL, &p,
                           VT_PRECISION_DEFAULT, &g));
    free_tensors(&t);
    return g;
}

#endif
