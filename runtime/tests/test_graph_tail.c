/* test_graph_tail.c — DeferAndFuse groups that end in a tail: a node that
 * reads all of what its group computes, once each element (a one-pass
 * reduction, a softmax, a layer or RMS norm), fed by the group's tiles where its geometry allows
 * and run after the group where it does not. Every case is compared with
 * Strict bit for bit (test_defer_util.h) and against the fusion counters. */
#include "test_defer_util.h"

/* ------------------------------------------------------------ trailing reductions */

/* r = op(tanh(x * x + x)) with both intermediates dead: one group, the
 * reduction fed by the group's tiles, so only r is written, bit for bit
 * Strict's result. Every one-pass reduction, over the inner dim (a walk
 * along rows), all dims, and the outer dim and a middle dim (lanes across
 * columns, fed a run of rows' tiles at a time; 1031 columns end in a
 * partial tile), in f32, f64, bf16 (stored bf16, computed in f32) and i64. */
TEST(defer_reduction_ends_a_group_fed_by_its_tiles) {
    CHECK_OK(vt_init());
    static const struct {
        vt_reduce_op op;
        double param;
    } ops[] = {{VT_REDUCE_SUM, 0},  {VT_REDUCE_MEAN, 0}, {VT_REDUCE_PROD, 0}, {VT_REDUCE_AMAX, 0},
               {VT_REDUCE_AMIN, 0}, {VT_REDUCE_NORM, 2}, {VT_REDUCE_NORM, 3}, {VT_REDUCE_NORM, INFINITY}};
    static const uint64_t masks[] = {4, 1, 7, 2};
    static const vt_dtype dts[] = {VT_F32, VT_F64, VT_BF16, VT_I64};
    int64_t sh[3] = {13, 5, 1031}; /* odd extents: partial chunks, lanes and tiles */
    for (size_t di = 0; di < sizeof dts / sizeof dts[0]; di++)
        for (size_t oi = 0; oi < sizeof ops / sizeof ops[0]; oi++)
            for (size_t mi = 0; mi < sizeof masks / sizeof masks[0]; mi++) {
                const vt_dtype D = dts[di], C = D == VT_BF16 ? VT_F32 : D;
                const int integer = !vt_dtype_is_float(D);
                if (integer && (ops[oi].op == VT_REDUCE_MEAN || ops[oi].op == VT_REDUCE_NORM)) continue;
                prog p = {0};
                int x = add_buf(&p, D, 3, sh, 0), t0 = add_buf(&p, D, 3, sh, 1), t1 = add_buf(&p, D, 3, sh, 1);
                if (integer) /* small values: products wrap the same way in both modes anyway */
                    for (int64_t i = 0; i < 13 * 5 * 1031; i++) ((int64_t *)p.buf[x].block)[i] = i % 5 - 2;
                int r = add_reduced_buf(&p, D, x, masks[mi]);
                add_step(&p, VT_NODE_BINARY, VT_MUL, C, t0, x, x, 0);
                add_step(&p, VT_NODE_BINARY, VT_ADD, C, t1, t0, x, 0);
                if (!integer) add_step(&p, VT_NODE_UNARY, VT_TANH, C, t1, t1, 0, 0);
                add_reduce(&p, ops[oi].op, C, r, t1, masks[mi], ops[oi].param);
                char what[96];
                snprintf(what, sizeof what, "%s %s mask %llu", vt_dtype_name(D), vt_reduce_op_name(ops[oi].op),
                         (unsigned long long)masks[mi]);
                vt_fusion_stats st;
                if (!agree(what, &p, &st)) {
                    prog_free(&p);
                    return;
                }
                const uint64_t bytes = 13 * 5 * 1031 * vt_dtype_size(D);
                const uint64_t rbytes = (uint64_t)vt_tensor_numel(&p.buf[r].t) * vt_dtype_size(D);
                const uint64_t nodes = integer ? 3 : 4;
                CHECK_MSG(vt_reduce_takes_source(ops[oi].op, &p.buf[r].t, &p.buf[t1].t, masks[mi]), "%s: not fed",
                          what);
                CHECK_MSG(st.groups == 1 && st.fused_nodes == nodes && st.bytes_written == rbytes &&
                              st.bytes_elided == (nodes - 1) * bytes, /* every member writes scratch */
                          "%s: groups %llu fused %llu written %llu elided %llu", what, STATS(st));
                prog_free(&p);
            }
}

/* Where the reduction cannot be fed (it reads runs that are not
 * consecutive elements, or fewer than all of what the group wrote), or is
 * not the group's, it runs on its own after the group, which writes what
 * it reads; a live input is written and fed; an in-place chain, a
 * transposed chain and a reduction through another view of the group's
 * result are fed. All bit for bit Strict's. */
TEST(defer_reduction_fed_or_not_agrees_with_strict) {
    CHECK_OK(vt_init());
    const vt_dtype F = VT_F32;
    vt_fusion_stats st;
    {   /* few values per output: lanes across strided columns, not fed */
        int64_t sh[2] = {1000, 8};
        prog p = {0};
        int x = add_buf(&p, F, 2, sh, 0), t = add_buf(&p, F, 2, sh, 1);
        int r = add_reduced_buf(&p, F, x, 2);
        add_step(&p, VT_NODE_UNARY, VT_EXP, F, t, x, 0, 0);
        add_reduce(&p, VT_REDUCE_SUM, F, r, t, 2, 0);
        agree("strided lanes", &p, &st);
        CHECK_MSG(st.groups == 2 && st.fused_nodes == 0 && st.bytes_written == 8000 * 4 + 1000 * 4 &&
                      st.bytes_elided == 0,
                  "groups %llu fused %llu written %llu elided %llu", STATS(st));
        prog_free(&p);
    }
    {   /* a live intermediate: written, and the reduction fed */
        int64_t sh[2] = {64, 300};
        prog p = {0};
        int x = add_buf(&p, F, 2, sh, 0), t = add_buf(&p, F, 2, sh, 0);
        int r = add_reduced_buf(&p, F, x, 3);
        add_step(&p, VT_NODE_UNARY, VT_SIN, F, t, x, 0, 0);
        add_reduce(&p, VT_REDUCE_SUM, F, r, t, 3, 0);
        agree("live input", &p, &st);
        CHECK_MSG(st.groups == 1 && st.fused_nodes == 2 && st.bytes_written == 64 * 300 * 4 + 4,
                  "groups %llu fused %llu written %llu elided %llu", STATS(st));
        prog_free(&p);
    }
    {   /* in place: a *= 1.5, a += x, then its row sums; a is live */
        int64_t sh[2] = {33, 257};
        prog p = {0};
        int x = add_buf(&p, F, 2, sh, 0), a = add_buf(&p, F, 2, sh, 0);
        int r = add_reduced_buf(&p, F, x, 2);
        add_step(&p, VT_NODE_BINARY, VT_MUL, F, a, a, -1, 0);
        add_step(&p, VT_NODE_BINARY, VT_ADD, F, a, a, x, 0);
        add_reduce(&p, VT_REDUCE_SUM, F, r, a, 2, 0);
        agree("in place", &p, &st);
        CHECK_MSG(st.groups == 1 && st.fused_nodes == 3, "groups %llu fused %llu written %llu elided %llu",
                  STATS(st));
        prog_free(&p);
    }
    {   /* a transposed chain: the group walks its memory order, the sums read it in that order */
        int64_t sh[2] = {300, 53};
        prog p = {0};
        int x = add_buf(&p, F, 2, sh, 0), t = add_buf(&p, F, 2, sh, 1);
        p.buf[x].t.strides[0] = 1, p.buf[x].t.strides[1] = 300;
        p.buf[t].t.strides[0] = 1, p.buf[t].t.strides[1] = 300;
        int r0 = add_reduced_buf(&p, F, x, 1), r1 = add_reduced_buf(&p, F, x, 3);
        int u = add_buf(&p, F, 2, sh, 1);
        p.buf[u].t.strides[0] = 1, p.buf[u].t.strides[1] = 300;
        add_step(&p, VT_NODE_UNARY, VT_EXP, F, t, x, 0, 0);
        add_reduce(&p, VT_REDUCE_SUM, F, r0, t, 1, 0);
        add_step(&p, VT_NODE_UNARY, VT_COS, F, u, x, 0, 0);
        add_reduce(&p, VT_REDUCE_AMAX, F, r1, u, 3, 0);
        agree("transposed", &p, &st);
        CHECK_MSG(st.groups == 2 && st.fused_nodes == 4 && st.bytes_elided == 2 * 300 * 53 * 4,
                  "groups %llu fused %llu written %llu elided %llu", STATS(st));
        prog_free(&p);
    }
    {   /* column sums of rows of 200 (fewer than a source's shortest run): not fed */
        int64_t sh[2] = {300, 200};
        prog p = {0};
        int x = add_buf(&p, F, 2, sh, 0), t = add_buf(&p, F, 2, sh, 1);
        int r = add_reduced_buf(&p, F, x, 1);
        add_step(&p, VT_NODE_UNARY, VT_EXP, F, t, x, 0, 0);
        add_reduce(&p, VT_REDUCE_SUM, F, r, t, 1, 0);
        agree("short rows", &p, &st);
        CHECK_MSG(st.groups == 2 && st.fused_nodes == 0 && st.bytes_written == (300 * 200 + 200) * 4,
                  "groups %llu fused %llu written %llu elided %llu", STATS(st));
        prog_free(&p);
    }
    {   /* column sums of rows of 400, of 16700 (runs of tiles past one read
         * of VT_SOURCE_MAX values), and of 1031 rows of 300 (few tiles: the
         * rows are split in segments, summed apart, then combined), a live
         * input among them: fed */
        static const int64_t shapes[][2] = {{300, 400}, {9, VT_SOURCE_MAX + 316}, {1031, 300}};
        static const char *const names[] = {"columns", "long rows", "segments"};
        for (int c = 0; c < 3; c++) {
            int64_t sh[2] = {shapes[c][0], shapes[c][1]};
            const uint64_t bytes = (uint64_t)sh[0] * (uint64_t)sh[1] * 4;
            prog p = {0};
            int x = add_buf(&p, F, 2, sh, 0), t = add_buf(&p, F, 2, sh, 1), u = add_buf(&p, F, 2, sh, 0);
            int r = add_reduced_buf(&p, F, x, 1);
            add_step(&p, VT_NODE_UNARY, VT_EXP, F, t, x, 0, 0);
            add_step(&p, VT_NODE_BINARY, VT_MUL, F, u, t, x, 0);
            add_reduce(&p, VT_REDUCE_SUM, F, r, u, 1, 0);
            agree(names[c], &p, &st);
            CHECK_MSG(st.groups == 1 && st.fused_nodes == 3 && st.bytes_written == bytes + (uint64_t)sh[1] * 4 &&
                          st.bytes_elided == bytes,
                      "groups %llu fused %llu written %llu elided %llu", STATS(st));
            prog_free(&p);
        }
    }
    {   /* the sum of a flat view of the chain's [40, 50] result */
        int64_t sh[2] = {40, 50}, flat[1] = {2000}, one[1] = {1};
        prog p = {0};
        int x = add_buf(&p, F, 2, sh, 0), t = add_buf(&p, F, 2, sh, 0);
        int tv = add_buf(&p, F, 1, flat, 0);
        p.alias[tv] = t + 1;
        int r = add_buf(&p, F, 1, one, 0);
        add_step(&p, VT_NODE_UNARY, VT_TANH, F, t, x, 0, 0);
        add_reduce(&p, VT_REDUCE_SUM, F, r, tv, 1, 0);
        agree("flat view", &p, &st);
        CHECK_MSG(st.groups == 1 && st.fused_nodes == 2, "groups %llu fused %llu written %llu elided %llu",
                  STATS(st));
        prog_free(&p);
    }
    {   /* the sum of half of what the group wrote: not fed */
        int64_t sh[2] = {40, 50}, half[2] = {20, 50}, one[2] = {1, 1};
        prog p = {0};
        int x = add_buf(&p, F, 2, sh, 0), t = add_buf(&p, F, 2, sh, 0);
        int tv = add_buf(&p, F, 2, half, 0);
        p.alias[tv] = t + 1;
        int r = add_buf(&p, F, 2, one, 0);
        add_step(&p, VT_NODE_UNARY, VT_TANH, F, t, x, 0, 0);
        add_reduce(&p, VT_REDUCE_SUM, F, r, tv, 3, 0);
        agree("half view", &p, &st);
        CHECK_MSG(st.groups == 2 && st.fused_nodes == 0, "groups %llu fused %llu written %llu elided %llu",
                  STATS(st));
        prog_free(&p);
    }
    {   /* a reduction of memory nothing recorded wrote, then another of the same */
        int64_t sh[2] = {64, 300};
        prog p = {0};
        int x = add_buf(&p, F, 2, sh, 0);
        int r = add_reduced_buf(&p, F, x, 2), r2 = add_reduced_buf(&p, F, x, 1);
        add_reduce(&p, VT_REDUCE_SUM, F, r, x, 2, 0);
        add_reduce(&p, VT_REDUCE_AMIN, F, r2, x, 1, 0);
        agree("alone", &p, &st);
        CHECK_MSG(st.groups == 2 && st.fused_nodes == 0 && st.bytes_written == (64 + 300) * 4,
                  "groups %llu fused %llu written %llu elided %llu", STATS(st));
        prog_free(&p);
    }
}

/* (a + a) * a, then its sum, recorded; returns the status of recording it. */
static vt_status record_chain_sum(host_tensor *a, host_tensor *t, host_tensor *o, host_tensor *s) {
    vt_status st = record_chain(a, t, o);
    if (st != VT_OK) return st;
    vt_node n;
    vt_node_init(&n, VT_NODE_REDUCE, VT_REDUCE_SUM, "aten::sum");
    n.compute = VT_F32;
    n.iparams[0] = 1;
    vt_node_add_out(&n, &s->t);
    st = vt_node_add_src(&n, &o->t, NULL);
    return st == VT_OK ? vt_node_submit(0, &n) : st;
}

/* Host memory running out for the tiles of a group that feeds a reduction
 * (on the worker, inside the reduction): the synchronisation raises
 * VT_ERR_OUT_OF_MEMORY, the sum raises on a read, and recorded again it
 * runs. An integer division by zero in such a group names its op. */
TEST(defer_reduction_group_errors) {
    CHECK_OK(vt_init());
    const int64_t N = 100000;
    host_tensor a = ht_1d(VT_F32, N), t = ht_1d(VT_F32, N), o = ht_1d(VT_F32, N), s = ht_1d(VT_F32, 1);
    host_tensor h = ht_1d(VT_F32, 1);
    for (int64_t i = 0; i < N; i++) ((float *)a.block)[i] = (float)(i % 7);
    ht_device(&a), ht_device(&t), ht_device(&o), ht_device(&s);
    CHECK_OK(vt_synchronize(0));
    vt_set_thread_eager_mode(VT_EAGER_DEFER_AND_FUSE);
    CHECK_OK(record_chain_sum(&a, &t, &o, &s));
    vt_defer_fail_alloc_for_test(2); /* the tables, the command, then a thread's tiles */
    vt_status f = vt_flush(0), w = vt_synchronize(0);
    vt_set_thread_eager_mode(-1);
    vt_defer_fail_alloc_for_test(-1);
    CHECK_MSG(f == VT_OK && w == VT_ERR_OUT_OF_MEMORY, "flush %s, synchronize %s: %s", vt_status_string(f),
              vt_status_string(w), vt_last_error());
    CHECK_STATUS(vt_copy_to_host(0, &h.t, &s.t), VT_ERR_OUT_OF_MEMORY);
    CHECK_OK(vt_synchronize(0));
    vt_set_thread_eager_mode(VT_EAGER_DEFER_AND_FUSE);
    CHECK_OK(record_chain_sum(&a, &t, &o, &s));
    vt_set_thread_eager_mode(-1);
    CHECK_OK(vt_copy_to_host(0, &h.t, &s.t));
    double want = 0;
    for (int64_t i = 0; i < N; i++) want += 2.0 * (i % 7) * (i % 7);
    CHECK_MSG(fabs(((float *)h.block)[0] - want) <= 1e-5 * want, "sum %g, want %g", ((float *)h.block)[0], want);
    ht_free(&a), ht_free(&t), ht_free(&o), ht_free(&s), ht_free(&h);

    host_tensor x = ht_1d(VT_I64, 100), z = ht_1d(VT_I64, 100), q = ht_1d(VT_I64, 100), r = ht_1d(VT_I64, 1);
    for (int i = 0; i < 100; i++) ((int64_t *)x.block)[i] = i + 1;
    ht_device(&x), ht_device(&z), ht_device(&q), ht_device(&r);
    vt_set_thread_eager_mode(VT_EAGER_DEFER_AND_FUSE);
    CHECK_OK(submit_binary(VT_DIV_TRUNC, "aten::div.Tensor_mode", VT_I64, &q.t, &x.t, &z.t));
    vt_node n;
    vt_node_init(&n, VT_NODE_REDUCE, VT_REDUCE_SUM, "aten::sum");
    n.compute = VT_I64;
    n.iparams[0] = 1;
    vt_node_add_out(&n, &r.t);
    CHECK_OK(vt_node_add_src(&n, &q.t, NULL));
    CHECK_OK(vt_node_submit(0, &n));
    w = vt_synchronize(0);
    vt_set_thread_eager_mode(-1);
    CHECK(w == VT_ERR_KERNEL);
    CHECK_MSG(strstr(vt_last_error(), "aten::div.Tensor_mode") && strstr(vt_last_error(), "ZeroDivisionError"),
              "%s", vt_last_error());
    CHECK_OK(vt_synchronize(0));
    ht_free(&x), ht_free(&z), ht_free(&q), ht_free(&r);
}

/* A softmax or log_softmax along a contiguous dim of at least 256 values
 * ends the group that computes its input: the input, dead, is never
 * written, and the result is Strict's bit for bit, in f32, f64 and bf16.
 * Along a strided dim, or along lines of fewer values, it is not fed: it
 * runs after its group, which writes its input. */
TEST(defer_softmax_ends_a_group_fed_by_its_tiles) {
    CHECK_OK(vt_init());
    static const vt_dtype dts[] = {VT_F32, VT_F64, VT_BF16};
    static const struct {
        int64_t rows, cols;
        int dim, fed;
    } cases[] = {{37, 1031, 1, 1}, {37, 1031, -1, 1}, {300, 77, 1, 0}, {1031, 37, 0, 0}, {1, 5000, 1, 1}};
    for (size_t di = 0; di < sizeof dts / sizeof dts[0]; di++)
        for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
            for (int log = 0; log < 2; log++) {
                const vt_dtype D = dts[di], C = D == VT_BF16 ? VT_F32 : D;
                int64_t sh[2] = {cases[ci].rows, cases[ci].cols};
                prog p = {0};
                int x = add_buf(&p, D, 2, sh, 0), t0 = add_buf(&p, D, 2, sh, 1), t1 = add_buf(&p, D, 2, sh, 1);
                int y = add_buf(&p, D, 2, sh, 0);
                add_step(&p, VT_NODE_BINARY, VT_MUL, C, t0, x, -1, 0);
                add_step(&p, VT_NODE_BINARY, VT_ADD, C, t1, t0, x, 0);
                p.s[p.nstep++] = (step){VT_NODE_SOFTMAX, log, y, {t1, 0, 0}, C, (uint64_t)(int64_t)cases[ci].dim, 0, {0, 0}};
                char what[96];
                snprintf(what, sizeof what, "%s %s %lldx%lld dim %d", vt_dtype_name(D), log ? "log_softmax" : "softmax",
                         (long long)sh[0], (long long)sh[1], cases[ci].dim);
                vt_fusion_stats st;
                if (!agree(what, &p, &st)) {
                    prog_free(&p);
                    return;
                }
                const uint64_t bytes = (uint64_t)sh[0] * sh[1] * vt_dtype_size(D);
                if (cases[ci].fed)
                    CHECK_MSG(st.groups == 1 && st.fused_nodes == 3 && st.bytes_written == bytes &&
                                  st.bytes_elided == 2 * bytes,
                              "%s: groups %llu fused %llu written %llu elided %llu", what, STATS(st));
                else
                    CHECK_MSG(st.groups == 2 && st.fused_nodes == 2 && st.bytes_written == 2 * bytes &&
                                  st.bytes_elided == bytes,
                              "%s: groups %llu fused %llu written %llu elided %llu", what, STATS(st));
                prog_free(&p);
            }
    /* y = softmax(exp(y^T)): the group reads y through another view while
     * the softmax would write it row by row, so the two run apart. */
    int64_t sq[2] = {300, 300};
    prog p = {0};
    int y = add_buf(&p, VT_F32, 2, sq, 0), yt = add_buf(&p, VT_F32, 2, sq, 0), t = add_buf(&p, VT_F32, 2, sq, 1);
    p.alias[yt] = y + 1;
    p.buf[yt].t.strides[0] = 1, p.buf[yt].t.strides[1] = 300;
    add_step(&p, VT_NODE_UNARY, VT_EXP, VT_F32, t, yt, 0, 0);
    p.s[p.nstep++] = (step){VT_NODE_SOFTMAX, 0, y, {t, 0, 0}, VT_F32, 1, 0, {0, 0}};
    vt_fusion_stats st;
    agree("softmax over what its group reads", &p, &st);
    CHECK_MSG(st.groups == 2 && st.fused_nodes == 0, "groups %llu fused %llu written %llu elided %llu", STATS(st));
    prog_free(&p);
}

/* ------------------------------------------------------------ trailing norms */

/* out = norm(x * 1.5 + x) over rows, with mean and rstd: where its rows
 * are contiguous and hold at least 256 values, the norm is fed and only
 * its outputs are written; where they hold fewer it runs after its group,
 * which writes its input. Layer norm with and without weight and bias,
 * RMS norm with and without weight; f32, f64 and bf16; bit for bit. */
TEST(defer_norm_ends_a_group_fed_by_its_tiles) {
    CHECK_OK(vt_init());
    static const vt_dtype dts[] = {VT_F32, VT_F64, VT_BF16};
    static const struct {
        int64_t rows, cols;
        int fed;
    } cases[] = {{37, 1031, 1}, {3, 4096, 1}, {300, 256, 1}, {2, VT_SOURCE_MAX + 3, 1}, {300, 77, 0}};
    for (size_t di = 0; di < sizeof dts / sizeof dts[0]; di++)
        for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
            for (int rms = 0; rms < 2; rms++)
                for (int affine = 0; affine < 2; affine++) {
                    const vt_dtype D = dts[di], C = D == VT_BF16 ? VT_F32 : D, S = D == VT_F64 ? VT_F64 : VT_F32;
                    const int64_t R = cases[ci].rows, N = cases[ci].cols;
                    int64_t sh[2] = {R, N}, col[2] = {R, 1}, row[1] = {N};
                    prog p = {0};
                    int x = add_buf(&p, D, 2, sh, 0), t0 = add_buf(&p, D, 2, sh, 1), t1 = add_buf(&p, D, 2, sh, 1);
                    int y = add_buf(&p, D, 2, sh, 0), mean = add_buf(&p, S, 2, col, 0), rstd = add_buf(&p, S, 2, col, 0);
                    int w = add_buf(&p, D, 1, row, 0), b = add_buf(&p, D, 1, row, 0);
                    add_step(&p, VT_NODE_BINARY, VT_MUL, C, t0, x, -1, 0);
                    add_step(&p, VT_NODE_BINARY, VT_ADD, C, t1, t0, x, 0);
                    step n = {VT_NODE_NORM, rms ? VT_NORM_RMS : VT_NORM_LAYER, y, {t1, affine ? w : -1, affine ? b : -1},
                              C, 1, 1e-5, {0, 0}};
                    if (rms) n.more[0] = rstd + 1;
                    else n.more[0] = mean + 1, n.more[1] = rstd + 1;
                    p.s[p.nstep++] = n;
                    char what[96];
                    snprintf(what, sizeof what, "%s %s %lldx%lld affine %d", vt_dtype_name(D), rms ? "rms_norm" : "layer_norm",
                             (long long)R, (long long)N, affine);
                    vt_fusion_stats st;
                    if (!agree(what, &p, &st)) {
                        prog_free(&p);
                        return;
                    }
                    const uint64_t bytes = (uint64_t)R * N * vt_dtype_size(D);
                    const uint64_t stats = (uint64_t)(rms ? 1 : 2) * R * vt_dtype_size(S);
                    if (cases[ci].fed)
                        CHECK_MSG(st.groups == 1 && st.fused_nodes == 3 && st.bytes_written == bytes + stats &&
                                      st.bytes_elided == 2 * bytes,
                                  "%s: groups %llu fused %llu written %llu elided %llu", what, STATS(st));
                    else
                        CHECK_MSG(st.groups == 2 && st.fused_nodes == 2 && st.bytes_written == 2 * bytes + stats &&
                                      st.bytes_elided == bytes,
                                  "%s: groups %llu fused %llu written %llu elided %llu", what, STATS(st));
                    prog_free(&p);
                }
}

/* Where a norm's other tensors meet its group, it runs after the group, as
 * in Strict: a weight the group computes (the norm reads it whole before
 * its first row), and an rstd written over rows of x the group has yet to
 * read (each row's rstd lands on the next row's first value). */
TEST(defer_norm_apart_from_what_its_group_touches) {
    CHECK_OK(vt_init());
    const vt_dtype F = VT_F32;
    vt_fusion_stats st;
    {   /* w = x * 1.5 and t = x + x, one group of shape [1031]; y = layer_norm(t, w) */
        int64_t n[1] = {1031}, one[1] = {1};
        prog p = {0};
        int x = add_buf(&p, F, 1, n, 0), w = add_buf(&p, F, 1, n, 0), t = add_buf(&p, F, 1, n, 1);
        int y = add_buf(&p, F, 1, n, 0), mean = add_buf(&p, F, 1, one, 0), rstd = add_buf(&p, F, 1, one, 0);
        add_step(&p, VT_NODE_BINARY, VT_MUL, F, w, x, -1, 0);
        add_step(&p, VT_NODE_BINARY, VT_ADD, F, t, x, x, 0);
        p.s[p.nstep++] = (step){VT_NODE_NORM, VT_NORM_LAYER, y, {t, w, -1}, F, 1, 1e-5, {mean + 1, rstd + 1}};
        agree("weight from the group", &p, &st);
        CHECK_MSG(st.groups == 2 && st.fused_nodes == 2 && st.bytes_elided == 0,
                  "groups %llu fused %llu written %llu elided %llu", STATS(st));
        prog_free(&p);
    }
    {   /* b[:4] = x * 1.5 and t = b[4:] + x, one group (the halves of b share
         * no element); y = layer_norm(t, weight b[0]): the weight is in the
         * half the group writes, so the norm runs after the group */
        int64_t sb[2] = {8, 300}, half[2] = {4, 300}, row[1] = {300}, one[2] = {4, 1};
        prog p = {0};
        int b = add_buf(&p, F, 2, sb, 0), b1 = add_buf(&p, F, 2, half, 0), b2 = add_buf(&p, F, 2, half, 0);
        int wv = add_buf(&p, F, 1, row, 0), x = add_buf(&p, F, 2, half, 0), t = add_buf(&p, F, 2, half, 1);
        int y = add_buf(&p, F, 2, half, 0), mean = add_buf(&p, F, 2, one, 0), rstd = add_buf(&p, F, 2, one, 0);
        p.alias[b1] = p.alias[b2] = p.alias[wv] = b + 1;
        p.buf[b2].t.offset = 4 * 300;
        add_step(&p, VT_NODE_BINARY, VT_MUL, F, b1, x, -1, 0);
        add_step(&p, VT_NODE_BINARY, VT_ADD, F, t, b2, x, 0);
        p.s[p.nstep++] = (step){VT_NODE_NORM, VT_NORM_LAYER, y, {t, wv, -1}, F, 1, 1e-5, {mean + 1, rstd + 1}};
        agree("weight in a slice the group writes", &p, &st);
        CHECK_MSG(st.groups == 2 && st.fused_nodes == 2, "groups %llu fused %llu written %llu elided %llu",
                  STATS(st));
        prog_free(&p);
    }
    {   /* t = exp(x[:8]) (dead), y = rms_norm(t) with rstd[u] over x[u + 1, 0] */
        int64_t sh[2] = {9, 1031}, rows[2] = {8, 1031}, col[2] = {8, 1};
        prog p = {0};
        int x = add_buf(&p, F, 2, sh, 0), xv = add_buf(&p, F, 2, rows, 0);
        int t = add_buf(&p, F, 2, rows, 1), y = add_buf(&p, F, 2, rows, 0), rstd = add_buf(&p, F, 2, col, 0);
        p.alias[xv] = x + 1;
        p.alias[rstd] = x + 1;
        p.buf[rstd].t.offset = 1031;
        p.buf[rstd].t.strides[0] = 1031;
        p.s[p.nstep++] = (step){VT_NODE_UNARY, VT_EXP, t, {xv, 0, 0}, F, 0, 0, {0, 0}};
        p.s[p.nstep++] = (step){VT_NODE_NORM, VT_NORM_RMS, y, {t, -1, -1}, F, 1, 1e-5, {rstd + 1, 0}};
        agree("rstd over what the group reads", &p, &st);
        CHECK_MSG(st.groups == 2 && st.fused_nodes == 0, "groups %llu fused %llu written %llu elided %llu",
                  STATS(st));
        prog_free(&p);
    }
}

/* The allocator hands a dead operand's block to the next output of its
 * size: a residual add of a product's result, then a norm (or softmax) of
 * the sum written where the product was. The tail writes each row after
 * the group read it there, so the group still feeds it; written one row
 * on, over a row the group has yet to read, it runs after the group. */
TEST(defer_tail_written_over_what_its_group_reads) {
    CHECK_OK(vt_init());
    const vt_dtype F = VT_F32;
    const int64_t R = 37, N = 1031;
    vt_fusion_stats st;
    for (int kind = 0; kind < 2; kind++)
        for (int shift = 0; shift < 2; shift++) {
            int64_t big[2] = {R + 1, N}, sh[2] = {R, N}, col[2] = {R, 1};
            prog p = {0};
            int m = add_buf(&p, F, 2, big, 0), mv = add_buf(&p, F, 2, sh, 0), y = add_buf(&p, F, 2, sh, 0);
            int x = add_buf(&p, F, 2, sh, 0), t = add_buf(&p, F, 2, sh, 1), rstd = add_buf(&p, F, 2, col, 0);
            p.alias[mv] = m + 1;
            p.alias[y] = m + 1;
            p.buf[y].t.offset = shift * N; /* over row u (in step), or row u + 1 */
            add_step(&p, VT_NODE_BINARY, VT_ADD, F, t, x, mv, 0);
            if (kind == 0) p.s[p.nstep++] = (step){VT_NODE_NORM, VT_NORM_RMS, y, {t, -1, -1}, F, 1, 1e-5, {rstd + 1, 0}};
            else p.s[p.nstep++] = (step){VT_NODE_SOFTMAX, 0, y, {t, 0, 0}, F, 1, 0, {0, 0}};
            char what[64];
            snprintf(what, sizeof what, "%s written %s", kind ? "softmax" : "rms_norm", shift ? "a row on" : "in step");
            if (!agree(what, &p, &st)) {
                prog_free(&p);
                return;
            }
            CHECK_MSG(st.groups == (shift ? 2u : 1u) && st.fused_nodes == (shift ? 0u : 2u),
                      "%s: groups %llu fused %llu written %llu elided %llu", what, STATS(st));
            prog_free(&p);
        }
}
