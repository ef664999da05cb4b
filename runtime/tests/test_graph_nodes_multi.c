/* test_graph_nodes_multi.c — the multi-tensor node kinds (normalisation,
 * losses, the matrix product, attention, convolution): each op run
 * synchronously, queued from the ring's packed copy, in Debug and recorded
 * in DeferAndFuse, bit for bit alike (outputs, and inputs an op updates in place), and against its
 * scalar reference; bad arguments fail at the op. */
#include "graph/node.h"
#include "kernels/conv/conv.h"
#include "test_kernels_util.h"
#include "test_nodes_util.h"

/* ------------------------------------------------------------ multi-tensor families */

/* One normalisation op: outputs f32 of the given shapes, inputs filled with
 * signed values (the data and gradients) or positive ones (weights,
 * statistics, variances). */
static void norm_case(vt_norm_op op, int training, const norm_shape *outs, int nout, const norm_shape *ins, int nin,
                      int64_t norm_ndim, int64_t groups) {
    host_tensor t[VT_NODE_MAX_SRC];
    host_tensor *tp[VT_NODE_MAX_SRC];
    const int backward = op == VT_NORM_LAYER_BACKWARD || op == VT_NORM_RMS_BACKWARD || op == VT_NORM_GROUP_BACKWARD ||
                         op == VT_NORM_BATCH_BACKWARD;
    for (int k = 0; k < nin; k++) {
        const int data = k == 0 || (k == 1 && backward);
        tp[k] = uniform(&t[k], &ins[k], data ? -3.0 : 0.5, data ? 3.0 : 2.0);
    }
    out_spec o[VT_NODE_MAX_OUT];
    for (int j = 0; j < nout; j++) o[j] = (out_spec){VT_F32, outs[j]};
    vt_node n;
    vt_node_init(&n, VT_NODE_NORM, op, vt_norm_op_name(op));
    n.iparams[0] = norm_ndim, n.iparams[1] = groups, n.iparams[2] = training;
    n.params[0] = 1e-5, n.params[1] = 0.1;
    multi_case(n.name, &n, tp, nin, o, nout, 1e-4);
    for (int k = 0; k < nin; k++)
        if (tp[k]) ht_free(&t[k]);
}

TEST(graph_nodes_norm_sync_queued_debug_and_reference_agree) {
    CHECK_OK(vt_init());
    const norm_shape X = {2, {5, 12}}, V = {1, {12}}, M = {1, {5}}, NO = {0, {-1}};
    const norm_shape I4 = {4, {2, 6, 3, 4}}, C = {1, {6}}, G = {1, {6}}; /* 2 x 3 groups; 6 channels */
    {
        const norm_shape o[] = {X, M, M}, i[] = {X, V, V};
        norm_case(VT_NORM_LAYER, 0, o, 3, i, 3, 1, 0);
        const norm_shape o2[] = {X, NO, NO}, i2[] = {X, NO, NO}; /* no statistics, no affine */
        norm_case(VT_NORM_LAYER, 0, o2, 3, i2, 3, 1, 0);
    }
    {
        const norm_shape o[] = {X, V, V}, i[] = {X, X, M, M, V};
        norm_case(VT_NORM_LAYER_BACKWARD, 0, o, 3, i, 5, 1, 0);
    }
    {
        const norm_shape o[] = {X, M}, i[] = {X, V};
        norm_case(VT_NORM_RMS, 0, o, 2, i, 2, 1, 0);
        const norm_shape ob[] = {X, V}, ib[] = {X, X, M, V};
        norm_case(VT_NORM_RMS_BACKWARD, 0, ob, 2, ib, 4, 1, 0);
    }
    {
        const norm_shape o[] = {I4, G, G}, i[] = {I4, C, C};
        norm_case(VT_NORM_GROUP, 0, o, 3, i, 3, 0, 3);
        const norm_shape ob[] = {I4, C, C}, ib[] = {I4, I4, G, G, C};
        norm_case(VT_NORM_GROUP_BACKWARD, 0, ob, 3, ib, 5, 0, 3);
    }
    for (int training = 0; training < 2; training++) {
        const norm_shape o[] = {I4, C, C}, i[] = {I4, C, C, C, C};
        norm_case(VT_NORM_BATCH, training, o, 3, i, 5, 0, 0);
        const norm_shape ob[] = {I4, C, C}, ib[] = {I4, I4, C, C, C, C, C};
        norm_case(VT_NORM_BATCH_BACKWARD, training, ob, 3, ib, 7, 0, 0);
    }
    /* bad arguments fail at the op, named, and nothing is queued */
    int64_t bad[2] = {5, 11};
    host_tensor x = ht_new(VT_F32, 2, X.s), y = ht_new(VT_F32, 2, bad);
    ht_device(&x), ht_device(&y);
    const int64_t pending = vt_queue_pending(0);
    CHECK_STATUS(vt_op_layer_norm(0, "aten::native_layer_norm", &y.t, NULL, NULL, &x.t, NULL, NULL, 1, 1e-5),
                 VT_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(vt_last_error(), "aten::native_layer_norm"), "%s", vt_last_error());
    CHECK_STATUS(vt_op_group_norm(0, "aten::native_group_norm", &x.t, NULL, NULL, &x.t, NULL, NULL, 0, 1e-5),
                 VT_ERR_INVALID_ARGUMENT);
    CHECK(vt_queue_pending(0) == pending);
    CHECK_OK(vt_synchronize(0));
    ht_free(&x), ht_free(&y);
}

/* Every loss op as a node, each reduction, every pointwise kind. */
TEST(graph_nodes_losses_sync_queued_debug_and_reference_agree) {
    CHECK_OK(vt_init());
    const norm_shape NC = {2, {6, 5}}, C = {1, {5}}, N = {1, {6}}, S = {0, {1}}, NO = {0, {-1}};
    const norm_shape X = {2, {4, 7}}, W = {1, {7}};
    int64_t nsz = 6;
    host_tensor target = ht_new(VT_I64, 1, &nsz);
    for (int i = 0; i < 6; i++) ((int64_t *)target.block)[i] = i == 3 ? -100 : (i * 3) % 5; /* one ignored */
    host_tensor in, w, g, tw;
    for (int red = 0; red < 3; red++) {
        char what[96];
        const norm_shape *R = red == VT_REDUCTION_NONE ? &N : &S;
        uniform(&in, &NC, -4.0, 0.0); /* log-probabilities */
        uniform(&w, &C, 0.5, 2.0);
        {
            vt_node n;
            vt_node_init(&n, VT_NODE_LOSS, VT_LOSS_OP_NLL, "nll_loss");
            n.iparams[1] = red, n.iparams[2] = -100;
            host_tensor *ts[] = {&in, &target, &w};
            const out_spec o[] = {{VT_F32, *R}, {VT_F32, S}};
            snprintf(what, sizeof what, "nll_loss reduction %d", red);
            multi_case(what, &n, ts, 3, o, 2, 1e-5);
            host_tensor *ts_nw[] = {&in, &target, NULL};
            const out_spec o_nw[] = {{VT_F32, *R}, {VT_F32, NO}};
            multi_case(what, &n, ts_nw, 3, o_nw, 2, 1e-5);
        }
        {
            uniform(&g, R, -1.0, 1.0);
            uniform(&tw, &S, 2.0, 3.0);
            vt_node n;
            vt_node_init(&n, VT_NODE_LOSS, VT_LOSS_OP_NLL_BACKWARD, "nll_loss_backward");
            n.iparams[1] = red, n.iparams[2] = -100;
            host_tensor *ts[] = {&g, &in, &target, &w, &tw};
            const out_spec o[] = {{VT_F32, NC}};
            snprintf(what, sizeof what, "nll_loss_backward reduction %d", red);
            multi_case(what, &n, ts, 5, o, 1, 1e-5);
            ht_free(&g), ht_free(&tw);
        }
        ht_free(&in), ht_free(&w);
        for (int kind = 0; kind < VT_POINTWISE_LOSS_COUNT; kind++) {
            const int bce = kind == VT_LOSS_BCE || kind == VT_LOSS_BCE_LOGITS;
            host_tensor x, t, wt, pw, go;
            uniform(&x, &X, kind == VT_LOSS_BCE ? 0.05 : -2.0, kind == VT_LOSS_BCE ? 0.95 : 2.0);
            uniform(&t, &X, bce ? 0.0 : -2.0, bce ? 1.0 : 2.0);
            host_tensor *wp = bce ? uniform(&wt, &W, 0.5, 2.0) : NULL;
            host_tensor *pwp = kind == VT_LOSS_BCE_LOGITS ? uniform(&pw, &W, 0.5, 2.0) : NULL;
            const norm_shape *RX = red == VT_REDUCTION_NONE ? &X : &S;
            vt_node n;
            vt_node_init(&n, VT_NODE_LOSS, VT_LOSS_OP_POINTWISE, "pointwise_loss");
            n.iparams[0] = kind, n.iparams[1] = red;
            n.params[0] = 0.7;
            host_tensor *ts[] = {&x, &t, wp, pwp};
            const out_spec o[] = {{VT_F32, *RX}};
            snprintf(what, sizeof what, "pointwise_loss kind %d reduction %d", kind, red);
            multi_case(what, &n, ts, 4, o, 1, 1e-5);
            uniform(&go, RX, -1.0, 1.0);
            vt_node_init(&n, VT_NODE_LOSS, VT_LOSS_OP_POINTWISE_BACKWARD, "pointwise_loss_backward");
            n.iparams[0] = kind, n.iparams[1] = red;
            n.params[0] = 0.7;
            host_tensor *tb[] = {&go, &x, &t, wp, pwp};
            const out_spec ob[] = {{VT_F32, X}};
            snprintf(what, sizeof what, "pointwise_loss_backward kind %d reduction %d", kind, red);
            multi_case(what, &n, tb, 5, ob, 1, 1e-5);
            ht_free(&x), ht_free(&t), ht_free(&go);
            if (wp) ht_free(&wt);
            if (pwp) ht_free(&pw);
        }
    }
    /* a target out of range: a data-dependent error, raised at the next
     * synchronisation in Strict, named */
    host_tensor x, out;
    uniform(&x, &NC, -1.0, 0.0);
    ht_device(&x);
    out = ht_new(VT_F32, 0, NULL);
    ht_device(&out);
    host_tensor bad = ht_new(VT_I64, 1, &nsz);
    ((int64_t *)bad.block)[2] = 12;
    ht_device(&bad);
    vt_set_thread_eager_mode(VT_EAGER_STRICT);
    CHECK_OK(vt_op_nll_loss(0, "aten::nll_loss_forward", &out.t, NULL, &x.t, &bad.t, NULL, VT_REDUCTION_MEAN, -100));
    vt_set_thread_eager_mode(-1);
    CHECK_STATUS(vt_synchronize(0), VT_ERR_INDEX);
    CHECK_MSG(strstr(vt_last_error(), "out of bounds"), "%s", vt_last_error());
    /* a bad shape fails at the op */
    CHECK_STATUS(vt_op_nll_loss(0, "aten::nll_loss_forward", &out.t, NULL, &x.t, &x.t, NULL, VT_REDUCTION_MEAN, -100),
                 VT_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(vt_last_error(), "aten::nll_loss_forward"), "%s", vt_last_error());
    ht_free(&x), ht_free(&out), ht_free(&bad), ht_free(&target);
}

/* The matrix product as a node: every precision, with and without a bias,
 * a batch broadcast; the reference within the fp32 accumulation of K = 33
 * terms (the engines sum in another order). */
TEST(graph_nodes_matmul_sync_queued_debug_and_reference_agree) {
    CHECK_OK(vt_init());
    const norm_shape A = {3, {2, 9, 33}}, B = {2, {33, 17}}, BIAS = {1, {17}}, O = {3, {2, 9, 17}};
    host_tensor a, b, bias;
    uniform(&a, &A, -1.0, 1.0), uniform(&b, &B, -1.0, 1.0), uniform(&bias, &BIAS, -1.0, 1.0);
    for (int prec = 0; prec < 3; prec++)
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            vt_node n;
            vt_node_init(&n, VT_NODE_MATMUL, 0, "aten::addmm");
            n.params[0] = with_bias ? 0.5 : 1.0, n.params[1] = with_bias ? 2.0 : 0.0;
            n.iparams[0] = prec;
            host_tensor *ts[] = {&a, &b, with_bias ? &bias : NULL};
            const out_spec o[] = {{VT_F32, O}};
            char what[64];
            snprintf(what, sizeof what, "matmul precision %d bias %d", prec, with_bias);
            multi_case(what, &n, ts, 3, o, 1, 1e-4);
        }
    /* shapes that do not multiply fail at the op, named */
    host_tensor o = ht_new(VT_F32, O.ndim, O.s);
    ht_device(&a), ht_device(&o);
    CHECK_STATUS(vt_op_matmul(0, "aten::mm", &o.t, &a.t, &a.t, NULL, 1.0, 0.0, VT_PRECISION_DEFAULT),
                 VT_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(vt_last_error(), "aten::mm") && strstr(vt_last_error(), "cannot be multiplied"), "%s",
              vt_last_error());
    CHECK_OK(vt_synchronize(0));
    ht_free(&a), ht_free(&b), ht_free(&bias), ht_free(&o);
}

/* Attention forward and backward, and the three convolutions, as nodes. */
TEST(graph_nodes_attention_and_conv_sync_queued_debug_and_reference_agree) {
    CHECK_OK(vt_init());
    const norm_shape Q = {4, {2, 2, 5, 8}}, KV = {4, {2, 2, 7, 8}}, L = {3, {2, 2, 5}}, MASK = {2, {5, 7}};
    host_tensor q, k, v, mask, dout, out, lse;
    uniform(&q, &Q, -1.0, 1.0), uniform(&k, &KV, -1.0, 1.0), uniform(&v, &KV, -1.0, 1.0);
    uniform(&mask, &MASK, -1.0, 0.0), uniform(&dout, &Q, -1.0, 1.0), uniform(&out, &Q, -1.0, 1.0);
    uniform(&lse, &L, 2.0, 3.0);
    for (int prec = 0; prec < 3; prec += 2)
        for (int variant = 0; variant < 3; variant++) { /* plain, causal, masked */
            vt_node n;
            char what[64];
            /* the backward reads the forward's own out and lse */
            CHECK_OK(vt_sdpa_forward(&out.t, &lse.t, &q.t, &k.t, &v.t, variant == 2 ? &mask.t : NULL, 0.3, variant == 1,
                                     (vt_precision)prec));
            /* DEFAULT rounds operands to bf16 where the reference's order of
             * operations differs: the reference agrees to bf16's precision */
            const double rtol = prec == VT_PRECISION_DEFAULT ? 3e-2 : 1e-4;
            vt_node_init(&n, VT_NODE_ATTENTION, 0, "sdpa");
            n.params[0] = 0.3, n.iparams[0] = variant == 1, n.iparams[1] = prec;
            host_tensor *fs[] = {&q, &k, &v, variant == 2 ? &mask : NULL};
            const out_spec fo[] = {{VT_F32, Q}, {VT_F32, L}};
            snprintf(what, sizeof what, "sdpa forward precision %d variant %d", prec, variant);
            multi_case(what, &n, fs, 4, fo, 2, rtol);
            vt_node_init(&n, VT_NODE_ATTENTION, 1, "sdpa_backward");
            n.params[0] = 0.3, n.iparams[0] = variant == 1, n.iparams[1] = prec;
            host_tensor *bs[] = {&dout, &q, &k, &v, variant == 2 ? &mask : NULL, &out, &lse};
            const out_spec bo[] = {{VT_F32, Q}, {VT_F32, KV}, {VT_F32, KV}};
            snprintf(what, sizeof what, "sdpa backward precision %d variant %d", prec, variant);
            multi_case(what, &n, bs, 7, bo, 3, rtol);
        }
    ht_free(&q), ht_free(&k), ht_free(&v), ht_free(&mask), ht_free(&dout), ht_free(&out), ht_free(&lse);

    const vt_conv_params p = {2, {1, 2, 1}, {1, 0, 0}, {1, 1, 1}, 1};
    const norm_shape X = {4, {2, 3, 6, 5}}, W = {4, {4, 3, 3, 2}}, B = {1, {4}}, Y = {4, {2, 4, 6, 2}};
    host_tensor x, w, b, gy;
    uniform(&x, &X, -1.0, 1.0), uniform(&w, &W, -1.0, 1.0), uniform(&b, &B, -1.0, 1.0), uniform(&gy, &Y, -1.0, 1.0);
    for (int kind = 0; kind < 3; kind++) {
        vt_node n;
        vt_node_init(&n, VT_NODE_CONV, kind, "convolution");
        vt_node_set_conv_params(&n, &p, VT_PRECISION_HIGHEST);
        host_tensor *fwd[] = {&x, &w, &b}, *bin[] = {&gy, &w, NULL}, *bw[] = {&gy, &x, NULL};
        const out_spec o[] = {{VT_F32, kind == VT_CONV_FORWARD ? Y : kind == VT_CONV_BACKWARD_INPUT ? X : W}};
        char what[48];
        snprintf(what, sizeof what, "convolution kind %d", kind);
        multi_case(what, &n, kind == VT_CONV_FORWARD ? fwd : kind == VT_CONV_BACKWARD_INPUT ? bin : bw, 3, o, 1, 1e-4);
    }
    /* a bias on a backward convolution, or no parameters, fail at the op */
    host_tensor gx = ht_new(VT_F32, X.ndim, X.s);
    ht_device(&gx), ht_device(&gy), ht_device(&w), ht_device(&b);
    CHECK_STATUS(vt_op_conv_backward_input(0, "aten::convolution_backward", &gx.t, &gy.t, &w.t, NULL,
                                           VT_PRECISION_DEFAULT),
                 VT_ERR_INVALID_ARGUMENT);
    CHECK_OK(vt_synchronize(0));
    ht_free(&x), ht_free(&w), ht_free(&b), ht_free(&gy), ht_free(&gx);
}
