/* test_kernels_rnn.c — the fused LSTM and GRU cells (vtpu/rnn.h) against
 * the same cells composed of the elementwise kernels (vt_binary,
 * vt_unary, vt_ternary) in PyTorch's order: the same bits on every ISA
 * path, every float dtype, with and without biases, strided gates and
 * states, row counts that split over threads and hidden sizes with vector
 * tails; a double-precision check of the formulas; the queued ops and
 * their errors. */
#include "test_kernels_util.h"

static const vt_dtype dts[] = {VT_F32, VT_BF16, VT_F16};

static void fill(host_tensor *h, double lo, double hi) {
    int64_t n = ht_block_elems(h);
    for (int64_t i = 0; i < n; i++) {
        double u = (double)(next_u64() >> 11) * 0x1p-53, v = lo + (hi - lo) * u;
        vt_convert(VT_F64, &v, 1, h->t.dtype, (char *)h->block + i * (int64_t)vt_dtype_size(h->t.dtype), 1, 1);
    }
}

static host_tensor mat(vt_dtype dt, int64_t a, int64_t b) {
    int64_t s[2] = {a, b};
    return ht_new(dt, 2, s);
}

/* Columns [c0, c0 + n) of t. */
static vt_tensor cols(const vt_tensor *t, int64_t c0, int64_t n) {
    vt_tensor v = *t;
    v.offset += c0 * t->strides[t->ndim - 1];
    v.sizes[t->ndim - 1] = n;
    return v;
}

static void add(const vt_tensor *out, const vt_tensor *a, const vt_tensor *b, vt_dtype dt) {
    CHECK_OK(vt_binary(VT_ADD, out, a, b, dt, vt_scalar_from_double(1)));
}

/* The LSTM cell as composed ops: ws = ig + hg (+ bi + bh), activations in
 * place, cy = f * cx + i * g, hy = o * tanh(cy). */
static void composed_lstm(const vt_tensor *hy, const vt_tensor *cy, const vt_tensor *ws, const vt_tensor *ig,
                          const vt_tensor *hg, const vt_tensor *cx, const vt_tensor *bi, const vt_tensor *bh,
                          int64_t H) {
    const vt_dtype dt = ig->dtype;
    add(ws, ig, hg, dt);
    if (bi) add(ws, ws, bi, dt), add(ws, ws, bh, dt);
    vt_tensor i = cols(ws, 0, H), f = cols(ws, H, H), g = cols(ws, 2 * H, H), o = cols(ws, 3 * H, H);
    CHECK_OK(vt_unary(VT_SIGMOID, &i, &i, dt));
    CHECK_OK(vt_unary(VT_SIGMOID, &f, &f, dt));
    CHECK_OK(vt_unary(VT_TANH, &g, &g, dt));
    CHECK_OK(vt_unary(VT_SIGMOID, &o, &o, dt));
    CHECK_OK(vt_binary(VT_MUL, cy, &f, cx, dt, vt_scalar_from_double(1)));
    CHECK_OK(vt_ternary(VT_ADDCMUL, cy, cy, &i, &g, dt, vt_scalar_from_double(1)));
    CHECK_OK(vt_unary(VT_TANH, hy, cy, dt));
    CHECK_OK(vt_binary(VT_MUL, hy, &o, hy, dt, vt_scalar_from_double(1)));
}

/* The GRU cell as composed ops into ws = [r, z, n, hx, hn + b_hn]. */
static void composed_gru(const vt_tensor *hy, const vt_tensor *ws, const vt_tensor *ig, const vt_tensor *hg,
                         const vt_tensor *hx, const vt_tensor *bi, const vt_tensor *bh, int64_t H) {
    const vt_dtype dt = ig->dtype;
    vt_tensor w[5], ic[3], hc[3], bic[3], bhc[3];
    for (int k = 0; k < 5; k++) w[k] = cols(ws, k * H, H);
    for (int k = 0; k < 3; k++) {
        ic[k] = cols(ig, k * H, H), hc[k] = cols(hg, k * H, H);
        if (bi) bic[k] = cols(bi, k * H, H), bhc[k] = cols(bh, k * H, H);
    }
    for (int k = 0; k < 2; k++) {
        add(&w[k], &ic[k], &hc[k], dt);
        if (bi) add(&w[k], &w[k], &bic[k], dt), add(&w[k], &w[k], &bhc[k], dt);
        CHECK_OK(vt_unary(VT_SIGMOID, &w[k], &w[k], dt));
    }
    CHECK_OK(vt_copy(&w[3], hx));
    if (bh) add(&w[4], &hc[2], &bhc[2], dt);
    else CHECK_OK(vt_copy(&w[4], &hc[2]));
    CHECK_OK(vt_binary(VT_MUL, &w[2], &w[0], &w[4], dt, vt_scalar_from_double(1)));
    add(&w[2], &w[2], &ic[2], dt);
    if (bi) add(&w[2], &w[2], &bic[2], dt);
    CHECK_OK(vt_unary(VT_TANH, &w[2], &w[2], dt));
    CHECK_OK(vt_binary(VT_SUB, hy, hx, &w[2], dt, vt_scalar_from_double(1)));
    CHECK_OK(vt_binary(VT_MUL, hy, hy, &w[1], dt, vt_scalar_from_double(1)));
    add(hy, hy, &w[2], dt);
}

/* One case: B rows, H units; gates strided (every other column of a wider
 * block) when strided. */
static void check_cells(vt_dtype dt, int64_t B, int64_t H, int bias, int strided, const char *isa) {
    char what[128];
    for (int lstm = 0; lstm < 2; lstm++) {
        const int64_t k = lstm ? 4 : 3, wsk = lstm ? 4 : 5, step = strided ? 2 : 1;
        host_tensor igb = mat(dt, B, k * H * step), hgb = mat(dt, B, k * H * step), prevb = mat(dt, B, H * step);
        host_tensor bi = ht_1d(dt, k * H), bh = ht_1d(dt, k * H);
        fill(&igb, -4, 4), fill(&hgb, -4, 4), fill(&prevb, -2, 2), fill(&bi, -1, 1), fill(&bh, -1, 1);
        vt_tensor ig = igb.t, hg = hgb.t, prev = prevb.t;
        ig.sizes[1] = hg.sizes[1] = k * H, prev.sizes[1] = H;
        ig.strides[1] = hg.strides[1] = prev.strides[1] = step;
        host_tensor hy = mat(dt, B, H), cy = mat(dt, B, H), ws = mat(dt, B, wsk * H);
        host_tensor hy2 = mat(dt, B, H), cy2 = mat(dt, B, H), ws2 = mat(dt, B, wsk * H);
        const vt_tensor *pbi = bias ? &bi.t : NULL, *pbh = bias ? &bh.t : NULL;
        if (lstm) {
            CHECK_OK(vt_lstm_cell(&hy.t, &cy.t, &ws.t, &ig, &hg, &prev, pbi, pbh));
            composed_lstm(&hy2.t, &cy2.t, &ws2.t, &ig, &hg, &prev, pbi, pbh, H);
        } else {
            CHECK_OK(vt_gru_cell(&hy.t, &ws.t, &ig, &hg, &prev, pbi, pbh));
            composed_gru(&hy2.t, &ws2.t, &ig, &hg, &prev, pbi, pbh, H);
        }
        snprintf(what, sizeof what, "%s %s B=%lld H=%lld bias %d strided %d isa %s", lstm ? "lstm" : "gru",
                 vt_dtype_name(dt), (long long)B, (long long)H, bias, strided, isa);
        CHECK(ht_compare(what, &hy.t, &hy2.t, -1) == 0);
        CHECK(ht_compare(what, &ws.t, &ws2.t, -1) == 0);
        if (lstm) CHECK(ht_compare(what, &cy.t, &cy2.t, -1) == 0);
        host_tensor *all[] = {&igb, &hgb, &prevb, &bi, &bh, &hy, &cy, &ws, &hy2, &cy2, &ws2};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ht_free(all[i]);
    }
}

TEST(kernels_rnn_cells_give_the_composed_ops_bits_on_every_path) {
    const unsigned active = vt_isa_active();
    const unsigned paths[] = {0, VT_ISA_AVX2, active};
    static const int64_t shapes[][2] = {{1, 1}, {3, 37}, {16, 256}, {33, 20}};
    for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
        if ((paths[p] & vt_isa_available()) != paths[p]) continue;
        vt_isa_force(paths[p]);
        char isa[16];
        snprintf(isa, sizeof isa, "%#x", paths[p]);
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
                for (int bias = 0; bias < 2; bias++) check_cells(dts[d], shapes[s][0], shapes[s][1], bias, s & 1, isa);
    }
    vt_isa_force(active);
}

/* The formulas themselves, in f32 against double arithmetic of the same
 * inputs (sigmoid and tanh of the vector paths are within a few ulp). */
TEST(kernels_rnn_cells_match_the_formulas) {
    const int64_t B = 5, H = 7;
    host_tensor ig = mat(VT_F32, B, 4 * H), hg = mat(VT_F32, B, 4 * H), cx = mat(VT_F32, B, H);
    host_tensor bi = ht_1d(VT_F32, 4 * H), bh = ht_1d(VT_F32, 4 * H);
    host_tensor hy = mat(VT_F32, B, H), cy = mat(VT_F32, B, H), ws = mat(VT_F32, B, 4 * H);
    fill(&ig, -3, 3), fill(&hg, -3, 3), fill(&cx, -2, 2), fill(&bi, -1, 1), fill(&bh, -1, 1);
    CHECK_OK(vt_lstm_cell(&hy.t, &cy.t, &ws.t, &ig.t, &hg.t, &cx.t, &bi.t, &bh.t));
    const float *pig = ig.block, *phg = hg.block, *pcx = cx.block, *pbi = bi.block, *pbh = bh.block;
    const float *phy = hy.block, *pcy = cy.block;
    for (int64_t b = 0; b < B; b++)
        for (int64_t u = 0; u < H; u++) {
            double gate[4];
            for (int q = 0; q < 4; q++) {
                const int64_t j = q * H + u;
                gate[q] = (double)pig[b * 4 * H + j] + phg[b * 4 * H + j] + pbi[j] + pbh[j];
            }
            const double i = 1 / (1 + exp(-gate[0])), f = 1 / (1 + exp(-gate[1])), g = tanh(gate[2]),
                         o = 1 / (1 + exp(-gate[3]));
            const double c = f * pcx[b * H + u] + i * g, h = o * tanh(c);
            CHECK_MSG(fabs(pcy[b * H + u] - c) <= 1e-5 * (1 + fabs(c)), "cy[%lld,%lld] %g vs %g", (long long)b,
                      (long long)u, pcy[b * H + u], c);
            CHECK_MSG(fabs(phy[b * H + u] - h) <= 1e-5 * (1 + fabs(h)), "hy[%lld,%lld] %g vs %g", (long long)b,
                      (long long)u, phy[b * H + u], h);
        }
    host_tensor *all[] = {&ig, &hg, &cx, &bi, &bh, &hy, &cy, &ws};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ht_free(all[i]);
}

TEST(kernels_rnn_errors_and_queued_ops) {
    CHECK_OK(vt_init());
    host_tensor ig = mat(VT_F32, 2, 8), hg = mat(VT_F32, 2, 8), cx = mat(VT_F32, 2, 2), hy = mat(VT_F32, 2, 2),
                cy = mat(VT_F32, 2, 2), ws = mat(VT_F32, 2, 8), b8 = ht_1d(VT_F32, 8), b7 = ht_1d(VT_F32, 7);
    host_tensor hg4 = mat(VT_F32, 2, 4), cxh = mat(VT_BF16, 2, 2), igi = mat(VT_I32, 2, 8);
    fill(&ig, -1, 1), fill(&hg, -1, 1), fill(&cx, -1, 1), fill(&b8, -1, 1);
    /* hidden gates of another size, one bias alone, a bias of the wrong size, a state of another dtype, integer gates */
    CHECK_STATUS(vt_lstm_cell(&hy.t, &cy.t, &ws.t, &ig.t, &hg4.t, &cx.t, NULL, NULL), VT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(vt_last_error(), "hidden_gates") != NULL);
    CHECK_STATUS(vt_lstm_cell(&hy.t, &cy.t, &ws.t, &ig.t, &hg.t, &cx.t, &b8.t, NULL), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_lstm_cell(&hy.t, &cy.t, &ws.t, &ig.t, &hg.t, &cx.t, &b7.t, &b7.t), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_lstm_cell(&hy.t, &cy.t, &ws.t, &ig.t, &hg.t, &cxh.t, NULL, NULL), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_lstm_cell(&hy.t, &cy.t, &ws.t, &igi.t, &igi.t, &cx.t, NULL, NULL), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_gru_cell(&hy.t, &ws.t, &ig.t, &hg.t, &cx.t, NULL, NULL), VT_ERR_INVALID_ARGUMENT); /* 8 % 3 */
    /* queued: errors at the call naming the op, results after a synchronisation */
    CHECK_STATUS(vt_op_lstm_cell(0, "aten::_thnn_fused_lstm_cell", &hy.t, &cy.t, &ws.t, &ig.t, &hg4.t, &cx.t, NULL,
                                 NULL),
                 VT_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(vt_last_error(), "aten::_thnn_fused_lstm_cell") != NULL, "%s", vt_last_error());
    host_tensor hy2 = mat(VT_F32, 2, 2), cy2 = mat(VT_F32, 2, 2), ws2 = mat(VT_F32, 2, 8);
    CHECK_OK(vt_lstm_cell(&hy2.t, &cy2.t, &ws2.t, &ig.t, &hg.t, &cx.t, &b8.t, &b8.t));
    host_tensor *dev[] = {&ig, &hg, &cx, &hy, &cy, &ws, &b8};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) ht_device(dev[i]);
    CHECK_OK(vt_op_lstm_cell(0, "aten::_thnn_fused_lstm_cell", &hy.t, &cy.t, &ws.t, &ig.t, &hg.t, &cx.t, &b8.t,
                             &b8.t));
    CHECK_OK(vt_synchronize(0));
    CHECK(ht_compare("queued lstm hy", &hy.t, &hy2.t, -1) == 0);
    CHECK(ht_compare("queued lstm cy", &cy.t, &cy2.t, -1) == 0);
    CHECK(ht_compare("queued lstm ws", &ws.t, &ws2.t, -1) == 0);
    host_tensor *all[] = {&ig, &hg, &cx, &hy, &cy, &ws, &b8, &b7, &hg4, &cxh, &igi, &hy2, &cy2, &ws2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ht_free(all[i]);
}

/* The LSTM backward composed of elementwise kernels in PyTorch's order
 * (rnn_ops.cpp's composition): gc = ghy * o * (1 - tanh(cy)^2) + gcy,
 * the gates' gradients, grad_cx = gc * f. */
static void composed_lstm_backward(const vt_tensor *gg, const vt_tensor *gcx, const vt_tensor *ghy,
                                   const vt_tensor *gcy, const vt_tensor *cx, const vt_tensor *cy,
                                   const vt_tensor *ws, int64_t H) {
    const vt_dtype dt = cx->dtype;
    const int64_t B = cx->sizes[0];
    const vt_scalar one = vt_scalar_from_double(1);
    host_tensor one_t = ht_new(dt, 0, NULL), tcy = mat(dt, B, H), gc = mat(dt, B, H), t1 = mat(dt, B, H),
                t2 = mat(dt, B, H);
    vt_convert(VT_F64, &(double){1.0}, 1, dt, one_t.block, 1, 1);
    vt_tensor i = cols(ws, 0, H), f = cols(ws, H, H), g = cols(ws, 2 * H, H), o = cols(ws, 3 * H, H);
    CHECK_OK(vt_unary(VT_TANH, &tcy.t, cy, dt));
    /* 1 - s (rsub) and 1 - s^2 (mul, neg, add) into out */
#define ONE_MINUS(out, s) CHECK_OK(vt_binary(VT_SUB, out, &one_t.t, s, dt, one))
#define ONE_MINUS_SQ(out, s)                                                                                   \
    do {                                                                                                       \
        CHECK_OK(vt_binary(VT_MUL, out, s, s, dt, one));                                                       \
        CHECK_OK(vt_unary(VT_NEG, out, out, dt));                                                              \
        CHECK_OK(vt_binary(VT_ADD, out, out, &one_t.t, dt, one));                                              \
    } while (0)
    if (ghy) {
        CHECK_OK(vt_binary(VT_MUL, &gc.t, ghy, &o, dt, one));
        ONE_MINUS_SQ(&t1.t, &tcy.t);
        CHECK_OK(vt_binary(VT_MUL, &gc.t, &gc.t, &t1.t, dt, one));
    } else {
        CHECK_OK(vt_fill(&gc.t, vt_scalar_from_double(0)));
    }
    if (gcy) CHECK_OK(vt_binary(VT_ADD, &gc.t, &gc.t, gcy, dt, one));
    const vt_tensor *gate[3] = {&g, cx, &i}, *act_of[3] = {&i, &f, &g};
    for (int k = 0; k < 3; k++) {
        vt_tensor out = cols(gg, k * H, H);
        CHECK_OK(vt_binary(VT_MUL, &out, &gc.t, gate[k], dt, one));
        if (k < 2) {
            ONE_MINUS(&t1.t, act_of[k]);
            CHECK_OK(vt_binary(VT_MUL, &t2.t, act_of[k], &t1.t, dt, one));
        } else {
            ONE_MINUS_SQ(&t2.t, act_of[k]);
        }
        CHECK_OK(vt_binary(VT_MUL, &out, &out, &t2.t, dt, one));
    }
    vt_tensor o3 = cols(gg, 3 * H, H);
    if (ghy) {
        CHECK_OK(vt_binary(VT_MUL, &o3, ghy, &tcy.t, dt, one));
        ONE_MINUS(&t1.t, &o);
        CHECK_OK(vt_binary(VT_MUL, &t2.t, &o, &t1.t, dt, one));
        CHECK_OK(vt_binary(VT_MUL, &o3, &o3, &t2.t, dt, one));
    } else {
        CHECK_OK(vt_fill(&o3, vt_scalar_from_double(0)));
    }
    CHECK_OK(vt_binary(VT_MUL, gcx, &gc.t, &f, dt, one));
#undef ONE_MINUS
#undef ONE_MINUS_SQ
    host_tensor *all[] = {&one_t, &tcy, &gc, &t1, &t2};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) ht_free(all[k]);
}

/* The LSTM backward against its composition on the portable, AVX2 and
 * active paths, every float dtype, with grad_hy and grad_cy, either alone
 * (strided: every other column); values against double formulas in f32;
 * errors. */
TEST(kernels_rnn_lstm_backward_gives_the_composed_ops_bits_on_every_path) {
    const unsigned active = vt_isa_active();
    const unsigned paths[] = {0, VT_ISA_AVX2, active};
    const int64_t B = 9, H = 37;
    for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
        if ((paths[p] & vt_isa_available()) != paths[p]) continue;
        vt_isa_force(paths[p]);
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
            const vt_dtype dt = dts[d];
            host_tensor ig = mat(dt, B, 4 * H), hg = mat(dt, B, 4 * H), cx = mat(dt, B, H), hy = mat(dt, B, H),
                        cy = mat(dt, B, H), ws = mat(dt, B, 4 * H), ghb = mat(dt, B, 2 * H), gcy = mat(dt, B, H);
            fill(&ig, -3, 3), fill(&hg, -3, 3), fill(&cx, -2, 2), fill(&ghb, -1, 1), fill(&gcy, -1, 1);
            vt_tensor ghy = ghb.t;
            ghy.sizes[1] = H, ghy.strides[1] = 2;
            CHECK_OK(vt_lstm_cell(&hy.t, &cy.t, &ws.t, &ig.t, &hg.t, &cx.t, NULL, NULL));
            for (int which = 0; which < 3; which++) {
                const vt_tensor *gh = which != 2 ? &ghy : NULL, *gc = which != 1 ? &gcy.t : NULL;
                host_tensor g0 = mat(dt, B, 4 * H), x0 = mat(dt, B, H), g1 = mat(dt, B, 4 * H), x1 = mat(dt, B, H);
                CHECK_OK(vt_lstm_cell_backward(&g0.t, &x0.t, gh, gc, &cx.t, &cy.t, &ws.t));
                composed_lstm_backward(&g1.t, &x1.t, gh, gc, &cx.t, &cy.t, &ws.t, H);
                char what[96];
                snprintf(what, sizeof what, "lstm backward %s grads %d isa %#x", vt_dtype_name(dt), which, paths[p]);
                CHECK(ht_compare(what, &g0.t, &g1.t, -1) == 0);
                CHECK(ht_compare(what, &x0.t, &x1.t, -1) == 0);
                if (dt == VT_F32 && which == 0) { /* the formulas, in double */
                    const float *pw = ws.block, *pc = cy.block, *px = cx.block, *ph = ghb.block, *pg = gcy.block;
                    const float *pgg = g0.block, *pgx = x0.block;
                    for (int64_t e = 0; e < B * H; e++) {
                        const int64_t b = e / H, u = e % H;
                        const double i = pw[b * 4 * H + u], f = pw[b * 4 * H + H + u],
                                     g = pw[b * 4 * H + 2 * H + u], o = pw[b * 4 * H + 3 * H + u],
                                     t = tanh((double)pc[e]), dh = ph[b * 2 * H + 2 * u];
                        const double gcv = dh * o * (1 - t * t) + pg[e];
                        const double want[5] = {gcv * g * i * (1 - i), gcv * px[e] * f * (1 - f),
                                                gcv * i * (1 - g * g), dh * t * o * (1 - o), gcv * f};
                        const double got[5] = {pgg[b * 4 * H + u], pgg[b * 4 * H + H + u],
                                               pgg[b * 4 * H + 2 * H + u], pgg[b * 4 * H + 3 * H + u], pgx[e]};
                        for (int q = 0; q < 5; q++)
                            CHECK_MSG(fabs(got[q] - want[q]) <= 1e-5 * (1 + fabs(want[q])),
                                      "element %lld part %d: %g vs %g", (long long)e, q, got[q], want[q]);
                    }
                }
                ht_free(&g0), ht_free(&x0), ht_free(&g1), ht_free(&x1);
            }
            /* errors: neither gradient, a workspace of the wrong width, a grad_gates of the wrong width */
            host_tensor g2 = mat(dt, B, 4 * H), x2 = mat(dt, B, H);
            CHECK_STATUS(vt_lstm_cell_backward(&g2.t, &x2.t, NULL, NULL, &cx.t, &cy.t, &ws.t),
                         VT_ERR_INVALID_ARGUMENT);
            CHECK_STATUS(vt_lstm_cell_backward(&g2.t, &x2.t, &gcy.t, NULL, &cx.t, &cy.t, &cy.t),
                         VT_ERR_INVALID_ARGUMENT);
            CHECK_STATUS(vt_lstm_cell_backward(&x2.t, &x2.t, &gcy.t, NULL, &cx.t, &cy.t, &ws.t),
                         VT_ERR_INVALID_ARGUMENT);
            host_tensor *all[] = {&ig, &hg, &cx, &hy, &cy, &ws, &ghb, &gcy, &g2, &x2};
            for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ht_free(all[i]);
        }
    }
    vt_isa_force(active);
}

/* The GRU backward: plain IEEE arithmetic, so the same bits on every path
 * (the composed ops' order is held against the ops by the Python tests);
 * f32 against double formulas; errors; the queued op. */
TEST(kernels_rnn_gru_backward_on_every_path) {
    const unsigned active = vt_isa_active();
    const int64_t B = 7, H = 37;
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        const vt_dtype dt = dts[d];
        host_tensor ig = mat(dt, B, 3 * H), hg = mat(dt, B, 3 * H), hx = mat(dt, B, H), hy = mat(dt, B, H),
                    ws = mat(dt, B, 5 * H), ghy = mat(dt, B, H), bi = ht_1d(dt, 3 * H), bh = ht_1d(dt, 3 * H);
        fill(&ig, -3, 3), fill(&hg, -3, 3), fill(&hx, -2, 2), fill(&ghy, -1, 1), fill(&bi, -1, 1), fill(&bh, -1, 1);
        CHECK_OK(vt_gru_cell(&hy.t, &ws.t, &ig.t, &hg.t, &hx.t, &bi.t, &bh.t));
        host_tensor gi0 = mat(dt, B, 3 * H), gh0 = mat(dt, B, 3 * H), gx0 = mat(dt, B, H);
        vt_isa_force(0);
        CHECK_OK(vt_gru_cell_backward(&gi0.t, &gh0.t, &gx0.t, &ghy.t, &ws.t));
        const unsigned paths[] = {VT_ISA_AVX2, active};
        for (size_t p = 0; p < 2; p++) {
            if ((paths[p] & vt_isa_available()) != paths[p]) continue;
            vt_isa_force(paths[p]);
            host_tensor gi1 = mat(dt, B, 3 * H), gh1 = mat(dt, B, 3 * H), gx1 = mat(dt, B, H);
            CHECK_OK(vt_gru_cell_backward(&gi1.t, &gh1.t, &gx1.t, &ghy.t, &ws.t));
            CHECK(ht_compare("gru backward gi", &gi1.t, &gi0.t, -1) == 0);
            CHECK(ht_compare("gru backward gh", &gh1.t, &gh0.t, -1) == 0);
            CHECK(ht_compare("gru backward ghx", &gx1.t, &gx0.t, -1) == 0);
            ht_free(&gi1), ht_free(&gh1), ht_free(&gx1);
        }
        vt_isa_force(active);
        if (dt == VT_F32) {
            const float *w = ws.block, *pg = ghy.block, *pi = gi0.block, *ph = gh0.block, *px = gx0.block;
            for (int64_t e = 0; e < B * H; e++) {
                const int64_t b = e / H, u = e % H, o = b * 5 * H + u, q = b * 3 * H + u;
                const double r = w[o], z = w[o + H], n = w[o + 2 * H], x = w[o + 3 * H], hn = w[o + 4 * H];
                const double dz = (x - n) * pg[e] * z * (1 - z), dn = (1 - z) * pg[e] * (1 - n * n),
                             dr = dn * hn * r * (1 - r);
                const double want[6] = {dr, dz, dn, dn * r, pg[e] * z, dz};
                const double got[6] = {pi[q], pi[q + H], pi[q + 2 * H], ph[q + 2 * H], px[e], ph[q + H]};
                for (int k = 0; k < 6; k++)
                    CHECK_MSG(fabs(got[k] - want[k]) <= 1e-5 * (1 + fabs(want[k])), "element %lld part %d: %g vs %g",
                              (long long)e, k, got[k], want[k]);
            }
        }
        /* errors: no grad_hy, a workspace of 4H */
        CHECK_STATUS(vt_gru_cell_backward(&gi0.t, &gh0.t, &gx0.t, NULL, &ws.t), VT_ERR_INVALID_ARGUMENT);
        CHECK_STATUS(vt_gru_cell_backward(&gi0.t, &gh0.t, &gx0.t, &ghy.t, &ig.t), VT_ERR_INVALID_ARGUMENT);
        if (dt == VT_F32) { /* queued, on device memory: the same bits */
            CHECK_OK(vt_init());
            host_tensor gi2 = mat(dt, B, 3 * H), gh2 = mat(dt, B, 3 * H), gx2 = mat(dt, B, H);
            host_tensor *dev[] = {&gi2, &gh2, &gx2, &ghy, &ws};
            for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) ht_device(dev[i]);
            CHECK_OK(vt_op_gru_cell_backward(0, "aten::_thnn_fused_gru_cell_backward", &gi2.t, &gh2.t, &gx2.t,
                                             &ghy.t, &ws.t));
            CHECK_OK(vt_synchronize(0));
            CHECK(ht_compare("queued gru backward", &gi2.t, &gi0.t, -1) == 0);
            CHECK(ht_compare("queued gru backward hx", &gx2.t, &gx0.t, -1) == 0);
            ht_free(&gi2), ht_free(&gh2), ht_free(&gx2);
        }
        host_tensor *all[] = {&ig, &hg, &hx, &hy, &ws, &ghy, &bi, &bh, &gi0, &gh0, &gx0};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ht_free(all[i]);
    }
}
