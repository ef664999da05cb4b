/* test_kernels_conv_paths.c — the convolution drivers each shape takes
 * (depthwise, channels-last rows, the AMX implicit GEMM, strided input
 * gradients by phase) and their edge cases: non-finite inputs, bf16
 * denormal outputs, chunks of images, the AVX512-BF16 rounding. */
#include <sys/mman.h>
#include <unistd.h>

#include "test_kernels_conv_util.h"

/* The depthwise cases run the depthwise kernels (not the im2col path the
 * other cases check them against); a depth multiplier does not. */
TEST(kernels_conv_depthwise_cases_take_the_depthwise_kernels) {
    static const char *const dw[] = {"2d depthwise", "1d depthwise s2 d2", "2d depthwise 33ch",
                                     "2d depthwise s2 pad2", "3d depthwise", "2d depthwise bands s2 d2",
                                     "2d depthwise wide rows", "2d depthwise 32ch", "2d depthwise wide rows s3 d2",
                                     "2d depthwise wide rows s2", "2d depthwise wide rows s2 pad2",
                                     "2d depthwise 32ch s2 nopad"};
    for (size_t i = 0; i < sizeof dw / sizeof dw[0]; i++) {
        vt_conv_geom g = case_geom(case_named(dw[i]));
        CHECK_MSG(vt_conv_dw_takes(&g), "%s", dw[i]);
    }
    vt_conv_geom g = case_geom(case_named("2d depthwise x2"));
    CHECK(!vt_conv_dw_takes(&g));
}

/* Random data x, weight w and bias b (NULL: none), then special values by
 * `inf`: 1 an inf weight (element 5); 2 values whose sums are denormal; 3 a
 * signalling NaN (x's element 7); 4 denormal data with large weights. */
static void fill_specials(host_tensor *x, host_tensor *w, host_tensor *b, int inf) {
    fill_values(x, 0), fill_values(w, 0);
    if (b) fill_values(b, 0);
    if (inf == 2) scale_values(x, 0x1p-60), scale_values(w, 0x1p-66);
    if (inf == 2 && b) scale_values(b, 0x1p-126);
    if (inf == 4) scale_values(x, 0x1p-130), scale_values(w, 0x1p60);
    if (inf == 4 && b) scale_values(b, 0x1p-80);
    if (inf == 1) {
        double v = INFINITY;
        vt_convert(VT_F64, &v, 1, w->t.dtype, (char *)w->block + 5 * vt_dtype_size(w->t.dtype), 1, 1);
    }
    if (inf == 3) {
        char *e = (char *)x->block + 7 * vt_dtype_size(x->t.dtype);
        if (x->t.dtype == VT_F32) {
            const uint32_t snan = 0x7f800001u;
            memcpy(e, &snan, 4);
        } else {
            const uint16_t snan = 0x7f81u;
            memcpy(e, &snan, 2);
        }
    }
}

/* One same-bits comparison of case c in dtype dt with fill_specials'
 * special values `inf`; what names it in a failure. */
typedef void (*same_bits_fn)(const conv_case *c, vt_dtype dt, int inf, const char *what);

/* fn on every ISA path this CPU has (the portable loops, AVX2, AVX-512,
 * AVX512-BF16), for each of the n named cases, F32 and BF16, each special
 * value (0 none; 1 inf; 2 denormal sums; 3 a signalling NaN; 4 denormal
 * inputs). */
static void each_isa_case(const char *const *names, size_t n, same_bits_fn fn) {
    const unsigned active = vt_isa_active();
    static const unsigned masks[] = {0, VT_ISA_AVX2, VT_ISA_AVX2 | VT_ISA_AVX512,
                                     VT_ISA_AVX2 | VT_ISA_AVX512 | VT_ISA_AVX512BF16};
    static const vt_dtype dts[] = {VT_F32, VT_BF16};
    for (size_t m = 0; m < sizeof masks / sizeof masks[0]; m++) {
        vt_isa_force(masks[m] & active);
        for (size_t i = 0; i < n; i++)
            for (size_t d = 0; d < 2; d++)
                for (int inf = 0; inf < 5; inf++) {
                    const conv_case *c = case_named(names[i]);
                    char what[160];
                    snprintf(what, sizeof what, "%s %s inf %d isa %u", c->name, vt_dtype_name(dts[d]), inf,
                             masks[m] & active);
                    fn(c, dts[d], inf, what);
                }
    }
    vt_isa_force(active);
}

static void forward_cl_vs_blocks(const conv_case *c, vt_dtype dt, int inf, const char *what) {
    conv_tensors cl = make_tensors(c, dt, LAYOUT_CHANNELS_LAST), mixed = make_tensors(c, dt, LAYOUT_MIXED),
                 nchw = make_tensors(c, dt, LAYOUT_CONTIGUOUS);
    /* the input's element 7 a signalling NaN: the cl path stages it without quieting */
    fill_specials(&cl.x, &cl.w, &cl.b, inf);
    CHECK_OK(vt_copy(&mixed.x.t, &cl.x.t));
    CHECK_OK(vt_copy(&mixed.w.t, &cl.w.t));
    CHECK_OK(vt_copy(&nchw.x.t, &cl.x.t));
    CHECK_OK(vt_copy(&nchw.w.t, &cl.w.t));
    vt_conv_params p = case_params(c);
    const vt_tensor *bias = c->bias ? &cl.b.t : NULL;
    CHECK_OK(vt_conv_forward(&cl.y.t, &cl.x.t, &cl.w.t, bias, &p, VT_PRECISION_DEFAULT));
    CHECK_OK(vt_conv_forward(&mixed.y.t, &mixed.x.t, &mixed.w.t, bias, &p, VT_PRECISION_DEFAULT));
    CHECK_OK(vt_conv_forward(&nchw.y.t, &nchw.x.t, &nchw.w.t, bias, &p, VT_PRECISION_DEFAULT));
    CHECK(ht_compare(what, &cl.y.t, &mixed.y.t, -1) == 0);
    /* NCHW planes (row stride 1 or 2: their phases) */
    CHECK(ht_compare(what, &nchw.y.t, &mixed.y.t, -1) == 0);
    free_tensors(&cl), free_tensors(&mixed), free_tensors(&nchw);
}

/* A channels-last depthwise forward at DEFAULT whose output is channels-last
 * too reads its input where it lies (no blocks); the same sums in the same
 * order as the blocks a contiguous output goes through, so the same bits on
 * every ISA path: random data with a bias, a weight tap that is inf (it
 * meets the padding's zeros: NaN where a window crosses it, in both), tiny
 * values whose sums are denormal (the AVX512-BF16 store's other path), a
 * signalling NaN input (NaN wherever a window holds it, in both), denormal
 * inputs (flushed to zero by both: the products would be normal), F32 and
 * BF16, partial lane blocks, strides, dilation, 1 to 3 dims, several bands
 * of rows with a short last one. */
TEST(kernels_conv_depthwise_channels_last_same_bits_as_blocks) {
    static const char *const dw[] = {"2d depthwise", "1d depthwise s2 d2", "2d depthwise 33ch", "2d depthwise s2 pad2",
                                     "3d depthwise", "2d depthwise 32ch", "2d depthwise bands s2 d2",
                                     "2d depthwise wide rows s2", "2d depthwise wide rows s2 pad2"};
    each_isa_case(dw, sizeof dw / sizeof dw[0], forward_cl_vs_blocks);
}

static void input_grad_gather_vs_scatter(const conv_case *c, vt_dtype dt, int inf, const char *what) {
    conv_tensors a = make_tensors(c, dt, LAYOUT_CHANNELS_LAST), b = make_tensors(c, dt, LAYOUT_CHANNELS_LAST);
    fill_specials(&a.gy, &a.w, NULL, inf);
    fill_values(&a.gx, 0), fill_values(&b.gx, 0); /* stale contents must be overwritten */
    vt_conv_params p = case_params(c);
    CHECK_OK(vt_conv_backward_input(&a.gx.t, &a.gy.t, &a.w.t, &p, VT_PRECISION_DEFAULT));
    vt_conv_dw_force_scatter(1);
    CHECK_OK(vt_conv_backward_input(&b.gx.t, &a.gy.t, &a.w.t, &p, VT_PRECISION_DEFAULT));
    vt_conv_dw_force_scatter(0);
    CHECK(ht_compare(what, &a.gx.t, &b.gx.t, -1) == 0);
    free_tensors(&a), free_tensors(&b);
}

/* The depthwise input gradient at DEFAULT gathers each position's sum in
 * the order the scatter adds it: the same bits, on every ISA path, for
 * strides, dilation, padding past the window, 3-d, several channel
 * blocks, and special values (an inf weight, denormal sums and inputs, a
 * signalling NaN in the gradient). */
TEST(kernels_conv_depthwise_input_grad_gather_same_bits_as_scatter) {
    static const char *const dw[] = {"2d depthwise", "2d depthwise 33ch", "2d depthwise s2 pad2", "3d depthwise",
                                     "2d depthwise bands s2 d2", "2d depthwise wide rows s2",
                                     "2d depthwise wide rows s2 pad2", "2d depthwise wide rows s3 d2"};
    each_isa_case(dw, sizeof dw / sizeof dw[0], input_grad_gather_vs_scatter);
}

static void weight_grad_rows_vs_blocks(const conv_case *c, vt_dtype dt, int inf, const char *what) {
    conv_tensors cl = make_tensors(c, dt, LAYOUT_CHANNELS_LAST), nchw = make_tensors(c, dt, LAYOUT_CONTIGUOUS);
    fill_specials(&cl.x, &cl.gy, NULL, inf);
    CHECK_OK(vt_copy(&nchw.x.t, &cl.x.t));
    CHECK_OK(vt_copy(&nchw.gy.t, &cl.gy.t));
    vt_conv_params p = case_params(c);
    CHECK_OK(vt_conv_backward_weight(&cl.gw.t, &cl.gy.t, &cl.x.t, &p, VT_PRECISION_DEFAULT));
    CHECK_OK(vt_conv_backward_weight(&nchw.gw.t, &nchw.gy.t, &nchw.x.t, &p, VT_PRECISION_DEFAULT));
    CHECK(ht_compare(what, &cl.gw.t, &nchw.gw.t, -1) == 0);
    free_tensors(&cl), free_tensors(&nchw);
}

/* A 3x3 depthwise weight gradient at DEFAULT whose input and output
 * gradient are channels-last reads them where they lie (weight_rows, whole
 * lane blocks); the same sums in the same order as the blocks NCHW tensors
 * go through, so the same bits on every ISA path: strides, dilation (a
 * ring of 5 rows), padding, none (rows no window reads), a partial last
 * lane block, bands of rows, special values in both operands (the inf in
 * the output gradient). */
TEST(kernels_conv_depthwise_weight_grad_rows_same_bits_as_blocks) {
    static const char *const dw[] = {"2d depthwise 33ch", "2d depthwise s2 pad2", "2d depthwise 32ch",
                                     "2d depthwise 32ch s2 nopad", "2d depthwise bands s2 d2"};
    each_isa_case(dw, sizeof dw / sizeof dw[0], weight_grad_rows_vs_blocks);
}

/* Channels-last inputs of these cases run the rows drivers. */
TEST(kernels_conv_channels_last_cases_take_the_rows_drivers) {
    static const char *const rows[] = {"2d 1x1",      "2d bigger",       "2d groups2 wide",
                                       "3d wide",     "1d 1x1 wide",     "2d 1x1 widening",
                                       "2d 1x1 groups2 widening"};
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

/* On the AMX and AVX512-BF16 engines the implicit GEMM takes these forwards (and the
 * stride-1 input gradients, which run as forwards), whatever the layout,
 * fewer than 16 channels with merged taps; not HIGH / HIGHEST F32, groups,
 * few channels whose window along the last dim is over 32 values or
 * dilated. The weight gradient: 16 channels or more, stride 1. */
TEST(kernels_conv_amx_cases_take_the_implicit_gemm) {
#if VT_X86
    const vt_mxu_engine *e = vt_mxu_engine_active();
    if (e != &vt_mxu_engine_amx && e != &vt_mxu_engine_avx512bf16) return;
    static const char *const amx[] = {"2d amx grid",   "2d amx s2 rows", "2d amx dil2",    "1d amx",
                                      "3d amx",        "2d amx 1x3 s2",  "1d depthwise s2 d2", "2d amx stem",
                                      "2d amx 1ch dil", "3d amx merged", "1d amx merged",  "2d bigger",
                                      "2d amx small images", "2d amx small images s2"};
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
    /* the weight gradient: stride 1 from 16 channels; strided (by phase
     * planes) under 16 channels, from 12 plane channels, no dilation */
    static const char *const wg[] = {"2d amx grid", "2d amx dil2",   "1d amx",      "3d amx",
                                     "2d amx stem", "1d amx merged", "2d k2 s3 8ch", "3d s2x1x2 4ch"};
    for (size_t i = 0; i < sizeof wg / sizeof wg[0]; i++) {
        g = case_geom(case_named(wg[i]));
        CHECK_MSG(vt_conv_amx_wgrad_takes(&g, VT_PRECISION_DEFAULT), "%s", wg[i]);
    }
    static const char *const no_wg[] = {"2d bigger", "1d long", "3d s3x2x1 groups2", "2d amx s2 rows",
                                        "2d 3x3 s2 even"};
    for (size_t i = 0; i < sizeof no_wg / sizeof no_wg[0]; i++) {
        g = case_geom(case_named(no_wg[i]));
        CHECK_MSG(!vt_conv_amx_wgrad_takes(&g, VT_PRECISION_DEFAULT), "%s", no_wg[i]);
    }
    g = case_geom(case_named("2d amx stem"));
    g.dil[2] = 2; /* strided and dilated */
    CHECK(!vt_conv_amx_wgrad_takes(&g, VT_PRECISION_DEFAULT));
#endif
}

/* got against the reference ref: the same value everywhere, NaN where ref
 * is NaN (any NaN); the first mismatches reported under `what`. Returns
 * the mismatches; *nonfinite = the reference's inf and NaN entries. */
static int64_t mismatches(const char *what, const vt_tensor *got, const vt_tensor *ref, int64_t *nonfinite) {
    host_tensor a = to_f64(got, 0), r = to_f64(ref, 0);
    const double *pa = a.block, *pr = r.block;
    int64_t wrong = 0;
    *nonfinite = 0;
    for (int64_t e = 0; e < vt_tensor_numel(ref); e++) {
        *nonfinite += !isfinite(pr[e]);
        int same = isnan(pr[e]) ? isnan(pa[e]) : pa[e] == pr[e];
        if (!same && wrong++ < 3) CHECK_MSG(0, "%s element %lld: %g vs reference %g", what, (long long)e, pa[e], pr[e]);
    }
    ht_free(&a), ht_free(&r);
    return wrong;
}

/* An inf in the input: every weight-gradient entry whose windows read it
 * is inf or NaN, the others stay what the reference gives. (The AMX
 * weight gradient sums over the padded grid's padding positions too, with
 * gy 0 there, and would add 0 * inf = NaN elsewhere: it hands such inputs
 * to the drivers.) Small integers otherwise: exact. */
TEST(kernels_conv_weight_gradient_inf_input) {
    static const char *const names[] = {"2d amx grid", "2d amx dil2", "2d bigger", "2d amx stem", "2d k2 s3 8ch"};
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
            char what[96];
            snprintf(what, sizeof what, "%s layout %d", names[i], layout);
            int64_t nonfinite;
            CHECK(mismatches(what, &t.gw.t, &gwr.t, &nonfinite) == 0);
            CHECK_MSG(nonfinite > 0 && nonfinite < vt_tensor_numel(&gwr.t), "%s: %lld non-finite", names[i],
                      (long long)nonfinite);
            ht_free(&gwr);
            free_tensors(&t);
        }
    }
}

/* A NaN and an inf in the input reach exactly the outputs whose windows
 * read them (the reference's NaN and inf outputs, the same finite values
 * elsewhere): merged taps read a window's values and nothing past them,
 * and the tiles' rows past the valid positions are never written. Small
 * integers otherwise: exact, on whatever path the case takes, on each engine
 * the host has (an AMX host also runs the AVX512-BF16 blocks). */
TEST(kernels_conv_forward_nonfinite_input_stays_in_its_windows) {
    static const char *const names[] = {"2d amx stem", "2d amx 1ch dil", "3d amx merged", "1d amx merged",
                                        "2d bigger", "2d amx s2 rows", "2d"};
    static const vt_dtype dts[] = {VT_F32, VT_BF16};
    const unsigned active = vt_isa_active();
    /* an AMX host runs the cases again on the AVX512-BF16 engine's blocks */
    for (int e = 0; e < 1 + !!(active & VT_ISA_AMX); e++) {
        vt_isa_force(e ? active & ~VT_ISA_AMX : active);
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
                    char what[96];
                    snprintf(what, sizeof what, "%s %s layout %d", names[i], vt_dtype_name(dts[d]), layout);
                    int64_t nonfinite, n = vt_tensor_numel(&yr.t);
                    CHECK(mismatches(what, &t.y.t, &yr.t, &nonfinite) == 0);
                    CHECK_MSG(nonfinite > 0 && nonfinite < n / 2, "%s: %lld of %lld non-finite", names[i],
                              (long long)nonfinite, (long long)n);
                    ht_free(&yr);
                    free_tensors(&t);
                }
    }
    vt_isa_force(active);
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

/* The implicit GEMM on each engine that runs it: AMX tiles, and VDPBF16PS
 * blocks over the same buffers (the AVX512-BF16 engine, forced on an AMX
 * host). Forward, input and weight gradients of every case it takes against
 * the direct-loop reference: small integers exactly (every partial sum is
 * exact in f32, so the order of the sums does not matter), random f32 and
 * bf16 within f32 accumulation error of the absolute-value scale (1e-5
 * f32; bf16 results are rounded once to bf16, 1e-2), in every layout. */
TEST(kernels_conv_implicit_gemm_every_engine) {
#if VT_X86
    unsigned active = vt_isa_active();
    static const unsigned masks[] = {VT_ISA_AVX2 | VT_ISA_AVX512 | VT_ISA_AVX512BF16 | VT_ISA_AMX,
                                     VT_ISA_AVX2 | VT_ISA_AVX512 | VT_ISA_AVX512BF16};
    static const char *const names[] = {"2d amx grid",   "2d amx s2 rows", "2d amx dil2",   "1d amx",
                                        "3d amx",        "2d amx 1x3 s2",  "2d amx stem",   "2d amx 1ch dil",
                                        "3d amx merged", "1d amx merged",  "2d bigger",     "2d k2 s3 8ch",
                                        "3d s2x1x2 4ch", "2d amx small images", "2d amx small images s2"};
    for (size_t m = 0; m < sizeof masks / sizeof masks[0]; m++) {
        if ((masks[m] & active) != masks[m]) continue;
        vt_isa_force(masks[m]);
        const vt_mxu_engine *e = vt_mxu_engine_active();
        CHECK(e == (masks[m] & VT_ISA_AMX ? &vt_mxu_engine_amx : &vt_mxu_engine_avx512bf16));
        CHECK(vt_conv_igemm_dp() == !(masks[m] & VT_ISA_AMX));
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            const conv_case *c = case_named(names[i]);
            vt_conv_geom g = case_geom(c);
            CHECK_MSG(vt_conv_amx_takes(&g, VT_PRECISION_DEFAULT) || vt_conv_amx_wgrad_takes(&g, VT_PRECISION_DEFAULT),
                      "%s on %s", names[i], e->name);
            for (int l = LAYOUT_CONTIGUOUS; l < LAYOUT_COUNT; l++) {
                check_case(c, VT_F32, VT_PRECISION_DEFAULT, l, 1, 0);
                check_case(c, VT_BF16, VT_PRECISION_DEFAULT, l, 1, 0);
            }
            check_case(c, VT_F32, VT_PRECISION_DEFAULT, LAYOUT_CHANNELS_LAST, 0, 1e-5);
            check_case(c, VT_F32, VT_PRECISION_DEFAULT, LAYOUT_CONTIGUOUS, 0, 1e-5);
            check_case(c, VT_BF16, VT_PRECISION_DEFAULT, LAYOUT_MIXED, 0, 1e-2);
            check_case(c, VT_F16, VT_PRECISION_DEFAULT, LAYOUT_CHANNELS_LAST, 0, 2e-3);
        }
    }
    vt_isa_force(active);
#endif
}

/* Fewer than 16 input channels at a stride, on the AMX or AVX512-BF16 engine: one
 * stride-1 convolution of grad_out with (phase, channel) outputs, up to 32
 * of them. */
TEST(kernels_conv_strided_few_channel_input_grad_takes_the_phase_convolution) {
#if VT_X86
    const vt_mxu_engine *e = vt_mxu_engine_active();
    if (e != &vt_mxu_engine_amx && e != &vt_mxu_engine_avx512bf16) return;
    static const char *const yes[] = {"2d amx stem", "1d amx merged", "3d s2x1x2 4ch"};
    static const char *const no[] = {"2d k2 s3 8ch", "2d 3x3 s2 even", "2d amx grid", "2d 1x1 s2", "1d s2 d2 p2 groups"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        vt_conv_geom g = case_geom(case_named(yes[i]));
        CHECK_MSG(vt_conv_amx_dgrad_takes(&g, VT_PRECISION_DEFAULT), "%s", yes[i]);
        CHECK_MSG(!vt_conv_amx_dgrad_takes(&g, VT_PRECISION_HIGH), "%s HIGH", yes[i]);
    }
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        vt_conv_geom g = case_geom(case_named(no[i]));
        CHECK_MSG(!vt_conv_amx_dgrad_takes(&g, VT_PRECISION_DEFAULT), "%s", no[i]);
    }
#endif
}

/* An inf in grad_out or the weight of a strided few-channel convolution
 * (and in grad_out of a stride-1 one): the input gradient is the
 * reference's (its inf and NaN entries where the reference has them, the
 * same values elsewhere). The phase convolution's zero taps would meet
 * them as 0 * inf, so it hands such calls to the drivers. Small integers
 * otherwise: exact. */
TEST(kernels_conv_input_gradient_nonfinite) {
    static const char *const names[] = {"2d amx stem", "3d s2x1x2 4ch", "2d s2 odd", "2d bigger"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        for (int which = 0; which < (i < 3 ? 2 : 1); which++) {
            const conv_case *c = case_named(names[i]);
            conv_tensors t = make_tensors(c, VT_F32, LAYOUT_CHANNELS_LAST);
            fill_values(&t.w, 1), fill_values(&t.gy, 1);
            host_tensor *h = which ? &t.w : &t.gy;
            float inf = INFINITY;
            memcpy((float *)h->t.data + h->t.offset + h->t.strides[h->t.ndim - 1], &inf, 4);
            vt_conv_params p = case_params(c);
            host_tensor gr = ht_new(VT_F32, t.x.t.ndim, t.x.t.sizes);
            CHECK_OK(vt_conv_backward_input(&t.x.t, &t.gy.t, &t.w.t, &p, VT_PRECISION_DEFAULT));
            CHECK_OK(vt_ref_conv_backward_input(&gr.t, &t.gy.t, &t.w.t, &p, VT_PRECISION_DEFAULT));
            char what[96];
            snprintf(what, sizeof what, "%s inf in %s", names[i], which ? "the weight" : "grad_out");
            int64_t nonfinite;
            CHECK(mismatches(what, &t.x.t, &gr.t, &nonfinite) == 0);
            CHECK_MSG(nonfinite > 0, "%s: no non-finite entry", names[i]);
            ht_free(&gr);
            free_tensors(&t);
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

/* A stride-2 column row is gathered a vector of words at a time
 * (conv_im2col.c: each kept element is the low half of a word twice its
 * width); the word of a row's last kept element must not be read whole,
 * for the element after it may lie past the input. The input here ends
 * right before a page that cannot be read (a plain build faults, ASan
 * sees the overrun as well), in 1x1 stride-2 convolutions whose kept
 * elements end at the last one: output widths 4 and 8 (where one vector
 * ends exactly there for f32 and bf16), 9 and 16; forward and weight
 * gradient against the reference, small integers (exact sums). */
TEST(kernels_conv_strided_rows_read_no_further_than_the_input) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    static const vt_dtype dts[] = {VT_F32, VT_BF16};
    static const int64_t widths[] = {4, 8, 9, 16};
    for (size_t d = 0; d < 2; d++)
        for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
            const int64_t ow = widths[wi], W = 2 * ow - 1;
            int64_t xs[4] = {1, 3, 3, W}, ws[4] = {4, 3, 1, 1}, ys[4] = {1, 4, 2, ow};
            host_tensor x = ht_new(dts[d], 4, xs), w = ht_new(dts[d], 4, ws), y = ht_new(dts[d], 4, ys);
            host_tensor yr = ht_new(dts[d], 4, ys), gw = ht_new(dts[d], 4, ws), gwr = ht_new(dts[d], 4, ws);
            fill_values(&x, 1), fill_values(&w, 1), fill_values(&y, 1);
            const size_t bytes = x.bytes, span = (bytes + page - 1) / page * page;
            char *map = mmap(NULL, span + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            CHECK(map != MAP_FAILED);
            if (map == MAP_FAILED) return;
            CHECK(mprotect(map + span, page, PROT_NONE) == 0);
            vt_tensor xg = x.t;
            xg.data = map + span - bytes;
            memcpy(xg.data, x.block, bytes);
            vt_conv_params p = {2, {2, 2, 1}, {0, 0, 0}, {1, 1, 1}, 1};
            CHECK_OK(vt_conv_forward(&yr.t, &xg, &w.t, NULL, &p, VT_PRECISION_DEFAULT));
            host_tensor want = ht_new(dts[d], 4, ys);
            CHECK_OK(vt_ref_conv_forward(&want.t, &x.t, &w.t, NULL, &p, VT_PRECISION_DEFAULT));
            CHECK_MSG(ht_compare("strided forward", &yr.t, &want.t, -1) == 0, "%s width %lld",
                      vt_dtype_name(dts[d]), (long long)ow);
            CHECK_OK(vt_conv_backward_weight(&gw.t, &y.t, &xg, &p, VT_PRECISION_DEFAULT));
            CHECK_OK(vt_ref_conv_backward_weight(&gwr.t, &y.t, &x.t, &p, VT_PRECISION_DEFAULT));
            CHECK_MSG(ht_compare("strided weight gradient", &gw.t, &gwr.t, -1) == 0, "%s width %lld",
                      vt_dtype_name(dts[d]), (long long)ow);
            munmap(map, span + page);
            ht_free(&x), ht_free(&w), ht_free(&y), ht_free(&yr), ht_free(&gw), ht_free(&gwr), ht_free(&want);
        }
}
