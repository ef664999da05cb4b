/* test_graph_nodes_data.c — the data-movement and indexing node kinds
 * (VT_NODE_SHAPE, VT_NODE_INDEX): every op of both catalogues run
 * synchronously, queued from the ring's packed copy, in Debug and recorded
 * in DeferAndFuse, bit for bit alike, and against its scalar reference where it has one; bad
 * arguments fail at the op; DeferAndFuse records them between groups. */
#include "test_defer_util.h"

/* An int64 template of the shape with values in [0, bound). */
static host_tensor *indices(host_tensor *h, const norm_shape *sh, int64_t bound) {
    *h = ht_new(VT_I64, sh->ndim, sh->s);
    for (int64_t e = 0; e < vt_tensor_numel(&h->t); e++) ((int64_t *)h->block)[e] = (int64_t)(next_u64() % bound);
    return h;
}

/* A bool template of the shape, true at every third element. */
static host_tensor *every_third(host_tensor *h, const norm_shape *sh) {
    *h = ht_new(VT_BOOL, sh->ndim, sh->s);
    for (int64_t e = 0; e < vt_tensor_numel(&h->t); e++) ((unsigned char *)h->block)[e] = e % 3 == 0;
    return h;
}

static const out_spec NONE = {VT_F32, {0, {-1}}};

TEST(graph_nodes_shape_ops_sync_queued_debug_and_reference_agree) {
    CHECK_OK(vt_init());
    const norm_shape A = {3, {2, 5, 6}}, B = {3, {2, 3, 6}}, C = {3, {2, 8, 6}}, K = {3, {2, 3, 6}};
    const norm_shape SORTED = {1, {9}}, VALS = {2, {4, 3}}, R = {1, {37}};
    host_tensor a, b, srt, vals;
    uniform(&a, &A, -2.0, 2.0), uniform(&b, &B, -2.0, 2.0), uniform(&vals, &VALS, -1.0, 1.0);
    srt = ht_new(VT_F32, 1, SORTED.s);
    for (int e = 0; e < 9; e++) ((float *)srt.block)[e] = -1.0f + 0.25f * (float)e;
    int ops_run = 0;
    for (int op = 0; op < VT_SHAPE_OP_COUNT; op++) {
        vt_node n;
        vt_node_init(&n, VT_NODE_SHAPE, op, vt_shape_op_name(op));
        const char *what = n.name;
        switch ((vt_shape_op)op) {
        case VT_SHAPE_OP_CAT: {
            n.iparams[0] = 1;
            host_tensor *ts[] = {&a, &b};
            const out_spec o[] = {{VT_F32, C}};
            multi_case(what, &n, ts, 2, o, 1, 0);
            break;
        }
        case VT_SHAPE_OP_FLIP:
        case VT_SHAPE_OP_ROLL:
        case VT_SHAPE_OP_TRI: {
            if (op == VT_SHAPE_OP_FLIP) n.iparams[0] = 5; /* dims 0 and 2 */
            const int dims[2] = {2, 1};
            const int64_t shifts[2] = {-7, 3};
            if (op == VT_SHAPE_OP_ROLL) vt_node_set_roll(&n, 2, dims, shifts);
            if (op == VT_SHAPE_OP_TRI) n.iparams[0] = -1, n.iparams[1] = 1;
            host_tensor *ts[] = {&a};
            const out_spec o[] = {{VT_F32, A}};
            multi_case(what, &n, ts, 1, o, 1, 0);
            break;
        }
        case VT_SHAPE_OP_SORT:
        case VT_SHAPE_OP_TOPK: {
            n.iparams[0] = 1, n.iparams[1] = 1, n.iparams[2] = op == VT_SHAPE_OP_TOPK ? 3 : -1;
            const norm_shape *sh = op == VT_SHAPE_OP_TOPK ? &K : &A;
            host_tensor *ts[] = {&a};
            const out_spec o[] = {{VT_F32, *sh}, {VT_I64, *sh}};
            multi_case(what, &n, ts, 1, o, 2, 0);
            const out_spec only_idx[] = {NONE, {VT_I64, *sh}}; /* values not asked for */
            multi_case(what, &n, ts, 1, only_idx, 2, 0);
            break;
        }
        case VT_SHAPE_OP_ARANGE:
        case VT_SHAPE_OP_LINSPACE: {
            vt_node_set_range(&n, vt_scalar_from_double(-1.5), vt_scalar_from_double(op == VT_SHAPE_OP_ARANGE ? 0.25 : 4.0),
                              0, 16);
            const out_spec o[] = {{VT_F32, R}};
            multi_case(what, &n, NULL, 0, o, 1, -1);
            break;
        }
        case VT_SHAPE_OP_SEARCHSORTED: {
            n.iparams[0] = 1;
            host_tensor *ts[] = {&srt, &vals};
            const out_spec o[] = {{VT_I64, VALS}};
            multi_case(what, &n, ts, 2, o, 1, -1);
            break;
        }
        default: CHECK_MSG(0, "shape op %d has no case", op);
        }
        ops_run++;
    }
    CHECK(ops_run == VT_SHAPE_OP_COUNT);
    /* bad arguments fail at the op, as the kernels word them */
    host_tensor o = ht_new(VT_F32, K.ndim, K.s), x = a;
    ht_device(&o), ht_device(&x);
    CHECK_STATUS(vt_op_flip(0, "aten::flip", &o.t, &x.t, 1), VT_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(vt_last_error(), "aten::flip"), "%s", vt_last_error());
    const int bad_dim = 3;
    const int64_t shift = 1;
    CHECK_STATUS(vt_op_roll(0, "aten::roll", &x.t, &x.t, 1, &bad_dim, &shift), VT_ERR_INDEX);
    CHECK_STATUS(vt_op_topk(0, "aten::topk", &o.t, NULL, &x.t, 1, 9, 1), VT_ERR_INDEX);
    CHECK_OK(vt_synchronize(0));
    ht_free(&o), ht_free(&x), ht_free(&b), ht_free(&srt), ht_free(&vals);
}

TEST(graph_nodes_index_ops_sync_queued_debug_and_reference_agree) {
    CHECK_OK(vt_init());
    const norm_shape X = {2, {6, 5}}, I1 = {1, {4}}, SEL = {2, {4, 5}}, G = {2, {3, 5}}, V = {0, {1}};
    const norm_shape SRC = {2, {4, 5}}, NZ = {2, {30, 2}}, MS = {1, {10}}, EMB = {2, {7, 5}}, EI = {1, {6}};
    host_tensor x, idx, cidx, gidx, src, value, mask, grad, eidx;
    uniform(&x, &X, -2.0, 2.0), uniform(&src, &SRC, -1.0, 1.0), uniform(&value, &V, 3.0, 4.0);
    uniform(&grad, &X, -1.0, 1.0);
    indices(&idx, &I1, 6), indices(&cidx, &I1, 5), indices(&gidx, &G, 6), indices(&eidx, &EI, 7), every_third(&mask, &X);
    int ops_run = 0;
    for (int op = 0; op < VT_INDEX_OP_COUNT; op++) {
        vt_node n;
        vt_node_init(&n, VT_NODE_INDEX, op, vt_index_op_name(op));
        n.iparams[0] = 0; /* dim */
        n.alpha = vt_scalar_from_double(0.5);
        const char *what = n.name;
        const out_spec like_x[] = {{VT_F32, X}};
        switch ((vt_index_op)op) {
        case VT_INDEX_OP_SELECT: {
            host_tensor *ts[] = {&x, &idx};
            const out_spec o[] = {{VT_F32, SEL}};
            multi_case(what, &n, ts, 2, o, 1, 0);
            break;
        }
        case VT_INDEX_OP_GATHER: {
            host_tensor *ts[] = {&x, &gidx};
            const out_spec o[] = {{VT_F32, G}};
            multi_case(what, &n, ts, 2, o, 1, 0);
            break;
        }
        case VT_INDEX_OP_SCATTER:
            for (int red = VT_SCATTER_ASSIGN; red <= VT_SCATTER_AMIN; red++) {
                n.iparams[1] = red, n.iparams[2] = 1;
                host_tensor *ts[] = {&gidx, &src, NULL};
                multi_case(what, &n, ts, 3, like_x, 1, 1e-6);
            }
            {
                host_tensor *ts[] = {&gidx, NULL, &value}; /* a value fill */
                n.iparams[1] = VT_SCATTER_ASSIGN;
                multi_case(what, &n, ts, 3, like_x, 1, 0);
            }
            break;
        case VT_INDEX_OP_ADD:
        case VT_INDEX_OP_COPY: {
            host_tensor *ts[] = {&idx, &src};
            multi_case(what, &n, ts, 2, like_x, 1, op == VT_INDEX_OP_ADD ? 1e-6 : -1);
            break;
        }
        case VT_INDEX_OP_FILL: {
            host_tensor *with[] = {&idx, &value}, *without[] = {&idx, NULL};
            multi_case(what, &n, with, 2, like_x, 1, -1);
            multi_case(what, &n, without, 2, like_x, 1, -1);
            break;
        }
        case VT_INDEX_OP_TAKE: {
            host_tensor *ts[] = {&x, &gidx};
            const out_spec o[] = {{VT_F32, G}};
            multi_case(what, &n, ts, 2, o, 1, 0);
            break;
        }
        case VT_INDEX_OP_COUNT_NONZERO:
        case VT_INDEX_OP_NONZERO: {
            host_tensor *ts[] = {&x}; /* no zero among uniform values */
            const norm_shape one = {1, {1}};
            const out_spec o[] = {{VT_I64, op == VT_INDEX_OP_NONZERO ? NZ : one}};
            multi_case(what, &n, ts, 1, o, 1, op == VT_INDEX_OP_NONZERO ? 0 : -1);
            break;
        }
        case VT_INDEX_OP_MASKED_SELECT: {
            host_tensor *ts[] = {&x, &mask};
            const out_spec o[] = {{VT_F32, MS}};
            multi_case(what, &n, ts, 2, o, 1, 0);
            break;
        }
        case VT_INDEX_OP_MASKED_SCATTER: {
            host_tensor *ts[] = {&mask, &x};
            multi_case(what, &n, ts, 2, like_x, 1, 0);
            break;
        }
        case VT_INDEX_OP_MASKED_FILL: {
            host_tensor *ts[] = {&mask, &value};
            multi_case(what, &n, ts, 2, like_x, 1, -1);
            break;
        }
        case VT_INDEX_OP_EMBEDDING_BACKWARD: {
            n.iparams[0] = 2, n.iparams[1] = 1; /* padding_idx, scale by frequency */
            host_tensor *ts[] = {&grad, &eidx};
            const out_spec o[] = {{VT_F32, EMB}};
            multi_case(what, &n, ts, 2, o, 1, 1e-6);
            break;
        }
        case VT_INDEX_OP_INDEX: {
            host_tensor *rows[] = {&x, &idx}, *cols[] = {&x, NULL, &cidx}, *both[] = {&x, &idx, &cidx};
            const out_spec r[] = {{VT_F32, SEL}}, c[] = {{VT_F32, {2, {6, 4}}}}, b[] = {{VT_F32, I1}};
            multi_case(what, &n, rows, 2, r, 1, 0); /* x[idx] */
            multi_case(what, &n, cols, 3, c, 1, 0); /* x[:, cidx] */
            multi_case(what, &n, both, 3, b, 1, 0); /* x[idx, cidx] */
            break;
        }
        case VT_INDEX_OP_INDEX_PUT: {
            host_tensor *rows[] = {&src, &idx}, *pairs[] = {&value, &idx, &cidx};
            for (int acc = 0; acc <= 1; acc++) {
                n.iparams[0] = acc; /* repeated rows: the last write, or their sum */
                multi_case(what, &n, rows, 2, like_x, 1, acc ? 1e-6 : 0); /* x[idx] (+)= src */
                multi_case(what, &n, pairs, 3, like_x, 1, acc ? 1e-6 : 0); /* x[idx, cidx] (+)= value */
            }
            break;
        }
        default: CHECK_MSG(0, "index op %d has no case", op);
        }
        ops_run++;
    }
    CHECK(ops_run == VT_INDEX_OP_COUNT);
    /* bad arguments fail at the op; a bad index value at the synchronisation */
    host_tensor o = ht_new(VT_F32, SEL.ndim, SEL.s), xd = x, bad = idx;
    ((int64_t *)bad.block)[2] = 6;
    ht_device(&o), ht_device(&xd), ht_device(&bad);
    CHECK_STATUS(vt_op_index_select(0, "aten::index_select", &o.t, &xd.t, 0, &xd.t), VT_ERR_INVALID_ARGUMENT);
    CHECK_OK(vt_op_index_select(0, "aten::index_select", &o.t, &xd.t, 0, &bad.t));
    CHECK_STATUS(vt_synchronize(0), VT_ERR_INDEX);
    CHECK_MSG(strstr(vt_last_error(), "aten::index_select"), "%s", vt_last_error());
    CHECK_OK(vt_synchronize(0));
    /* advanced indexing likewise: values that do not broadcast, too many
     * indices, then an index past the dim */
    const vt_tensor *list[2] = {&bad.t, NULL}, *many[3] = {&bad.t, NULL, NULL};
    CHECK_STATUS(vt_op_index_put(0, "aten::index_put_", &xd.t, 1, list, &xd.t, 0), VT_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(vt_last_error(), "shape mismatch"), "%s", vt_last_error());
    CHECK_STATUS(vt_op_index(0, "aten::index", &o.t, &xd.t, 3, many), VT_ERR_INDEX);
    CHECK_OK(vt_op_index(0, "aten::index", &o.t, &xd.t, 1, list));
    CHECK_STATUS(vt_synchronize(0), VT_ERR_INDEX);
    CHECK_MSG(strstr(vt_last_error(), "aten::index"), "%s", vt_last_error());
    CHECK_OK(vt_synchronize(0));
    ht_free(&o), ht_free(&xd), ht_free(&bad), ht_free(&gidx), ht_free(&src), ht_free(&value), ht_free(&mask);
    ht_free(&grad), ht_free(&eidx), ht_free(&cidx);
}

/* In DeferAndFuse, a cat is recorded as a copy per input into its slice,
 * which join the group of the exp that computes one of them; the
 * index_select that reads the cat runs in order after that group: one
 * flush, Strict's bits. */
TEST(defer_shape_and_index_nodes_run_between_groups) {
    CHECK_OK(vt_init());
    const int64_t sx[2] = {6, 5}, sc[2] = {12, 5}, si[1] = {4}, so[2] = {4, 5};
    float strict[20];
    for (int mode = 0; mode < 2; mode++) {
        host_tensor x = ht_new(VT_F32, 2, sx), t = ht_new(VT_F32, 2, sx), c = ht_new(VT_F32, 2, sc);
        host_tensor i = ht_new(VT_I64, 1, si), s = ht_new(VT_F32, 2, so), y = ht_new(VT_F32, 2, so);
        for (int k = 0; k < 30; k++) ((float *)x.block)[k] = 0.1f * (float)k - 1.0f;
        for (int k = 0; k < 4; k++) ((int64_t *)i.block)[k] = (k * 5) % 12;
        ht_device(&x), ht_device(&t), ht_device(&c), ht_device(&i), ht_device(&s), ht_device(&y);
        vt_set_thread_eager_mode(mode ? VT_EAGER_DEFER_AND_FUSE : VT_EAGER_STRICT);
        vt_reset_fusion_stats();
        vt_node n;
        vt_node_init(&n, VT_NODE_UNARY, VT_EXP, "aten::exp");
        n.compute = VT_F32;
        vt_node_add_out(&n, &t.t);
        CHECK_OK(vt_node_add_src(&n, &x.t, NULL));
        CHECK_OK(vt_node_submit(0, &n));
        const vt_tensor parts[2] = {x.t, t.t};
        CHECK_OK(vt_op_cat(0, "aten::cat", &c.t, 2, parts, 0));
        CHECK_OK(vt_op_index_select(0, "aten::index_select", &s.t, &c.t, 0, &i.t));
        vt_node_init(&n, VT_NODE_UNARY, VT_SIN, "aten::sin");
        n.compute = VT_F32;
        vt_node_add_out(&n, &y.t);
        CHECK_OK(vt_node_add_src(&n, &s.t, NULL));
        CHECK_OK(vt_node_submit(0, &n));
        vt_fusion_stats st;
        vt_get_fusion_stats(&st);
        CHECK_MSG(st.flushes == 0, "mode %d: %llu flushes before the synchronisation", mode,
                  (unsigned long long)st.flushes);
        CHECK_OK(vt_synchronize(0));
        vt_get_fusion_stats(&st);
        vt_set_thread_eager_mode(-1);
        if (mode)
            CHECK_MSG(st.flushes == 1 && st.nodes == 5 && st.groups == 3 && st.fused_nodes == 3,
                      "flushes %llu nodes %llu groups %llu fused %llu", (unsigned long long)st.flushes,
                      (unsigned long long)st.nodes, (unsigned long long)st.groups, (unsigned long long)st.fused_nodes);
        /* the selected rows are rows of x and of exp(x), exactly */
        const float *xs = x.block, *ts = t.block, *ss = s.block;
        int bad = 0;
        for (int r = 0; r < 4; r++)
            for (int col = 0; col < 5; col++) {
                const int64_t row = ((const int64_t *)i.block)[r];
                bad += ss[r * 5 + col] != (row < 6 ? xs[row * 5 + col] : ts[(row - 6) * 5 + col]);
            }
        CHECK_MSG(!bad, "mode %d: %d wrong elements", mode, bad);
        if (mode == 0) memcpy(strict, y.block, sizeof strict);
        else CHECK(memcmp(strict, y.block, sizeof strict) == 0);
        ht_free(&x), ht_free(&t), ht_free(&c), ht_free(&i), ht_free(&s), ht_free(&y);
    }
}

/* A cat of k random inputs of shape si along dim, in Strict and recorded,
 * against the scalar reference. */
static void cat_in_both_modes(const char *what, int k, int32_t ndim, const int64_t *si, const int64_t *so, int dim) {
    host_tensor ref = ht_new(VT_F32, ndim, so), in[VT_NODE_MAX_SRC + 8];
    vt_tensor ins[VT_NODE_MAX_SRC + 8];
    CHECK(k <= VT_NODE_MAX_SRC + 8);
    for (int i = 0; i < k; i++) {
        in[i] = ht_new(VT_F32, ndim, si);
        ht_fill_random(&in[i], (uint64_t)i, 1);
        ins[i] = in[i].t;
    }
    CHECK_OK(vt_ref_cat(&ref.t, k, ins, dim));
    for (int i = 0; i < k; i++) ht_device(&in[i]), ins[i] = in[i].t;
    for (int mode = 0; mode < 2; mode++) {
        host_tensor o = ht_new(VT_F32, ndim, so);
        ht_device(&o);
        vt_set_thread_eager_mode(mode ? VT_EAGER_DEFER_AND_FUSE : VT_EAGER_STRICT);
        vt_status s = vt_op_cat(0, "aten::cat", &o.t, k, ins, dim);
        vt_status w = vt_synchronize(0);
        vt_set_thread_eager_mode(-1);
        CHECK_MSG(s == VT_OK && w == VT_OK, "%s, mode %d: %s", what, mode, vt_last_error());
        CHECK(ht_compare(what, &o.t, &ref.t, -1) == 0);
        ht_free(&o);
    }
    for (int i = 0; i < k; i++) ht_free(&in[i]);
    ht_free(&ref);
}

/* A cat of many inputs of many dims is split into nodes whose packed form
 * fits a ring slot, in Strict and recorded alike: 7 inputs of 12 dims
 * would not fit one. */
TEST(cat_of_many_dims_splits_into_nodes_that_fit) {
    CHECK_OK(vt_init());
    int64_t si[12], so[12];
    for (int d = 0; d < 12; d++) si[d] = so[d] = 1;
    si[11] = 2, so[11] = 14;
    cat_in_both_modes("cat of 12 dims", 7, 12, si, so, 11);
}

/* A cat of 20 inputs: a node of VT_NODE_MAX_SRC inputs has more accesses
 * than a command's inline list (VT_ACCESS_INLINE); queued in Strict and
 * queued alone at a flush, it runs from a list the command owns. */
TEST(cat_of_more_inputs_than_inline_accesses_runs_in_every_mode) {
    CHECK_OK(vt_init());
    CHECK(VT_NODE_MAX_OUT + VT_NODE_MAX_SRC > VT_ACCESS_INLINE);
    const int64_t si[1] = {3}, so[1] = {3 * 20};
    cat_in_both_modes("cat of 20", 20, 1, si, so, 0);
}

/* A flush that fails drops its nodes, and everything they write carries
 * the error: a sort's indices as well as its values. */
TEST(defer_failed_flush_poisons_every_output) {
    CHECK_OK(vt_init());
    const int64_t sh[2] = {3, 40};
    host_tensor x = ht_new(VT_F32, 2, sh), v = ht_new(VT_F32, 2, sh), i = ht_new(VT_I64, 2, sh);
    host_tensor hv = ht_new(VT_F32, 2, sh), hi = ht_new(VT_I64, 2, sh);
    ht_fill_random(&x, 0, 1);
    ht_device(&x), ht_device(&v), ht_device(&i);
    CHECK_OK(vt_synchronize(0));
    vt_set_thread_eager_mode(VT_EAGER_DEFER_AND_FUSE);
    CHECK_OK(vt_op_sort(0, "aten::sort", &v.t, &i.t, &x.t, 1, 0));
    vt_defer_fail_alloc_for_test(0); /* the flush's tables */
    CHECK_STATUS(vt_flush(0), VT_ERR_OUT_OF_MEMORY);
    vt_defer_fail_alloc_for_test(-1);
    vt_set_thread_eager_mode(-1);
    CHECK_STATUS(vt_copy_to_host(0, &hi.t, &i.t), VT_ERR_OUT_OF_MEMORY);
    CHECK_STATUS(vt_copy_to_host(0, &hv.t, &v.t), VT_ERR_OUT_OF_MEMORY);
    CHECK_OK(vt_synchronize(0));
    /* sorted again, it runs */
    CHECK_OK(vt_op_sort(0, "aten::sort", &v.t, &i.t, &x.t, 1, 0));
    CHECK_OK(vt_copy_to_host(0, &hi.t, &i.t));
    int bad = 0;
    for (int r = 0; r < 3; r++)
        for (int c = 1; c < 40; c++) {
            const float *xs = x.block;
            const int64_t *is = hi.block;
            bad += xs[r * 40 + is[r * 40 + c - 1]] > xs[r * 40 + is[r * 40 + c]];
        }
    CHECK_MSG(bad == 0, "%d out of order", bad);
    ht_free(&x), ht_free(&v), ht_free(&i), ht_free(&hv), ht_free(&hi);
}
