/* test_graph_defer.c — DeferAndFuse against Strict. The same node sequence
 * is submitted in Strict mode and recorded in DeferAndFuse, with the same
 * buffers freed before the synchronisation; the live results must agree
 * bit for bit (each node runs its own microkernels on the same elements in
 * both modes, on every ISA path), and the fusion counters must show what
 * ran as one group and which dead outputs were never written. */
#include "test_defer_util.h"

/* The 8-op chain of bench/fuse.py, GELU-tanh written out plus scale and
 * bias, over an awkward length: one group, and only the result is written. */
TEST(defer_pointwise_chain_is_one_group_and_writes_live_outputs_only) {
    CHECK_OK(vt_init());
    const int64_t N = 100003, R = 7;
    int64_t shape[2] = {R, N / R + 1}, row[2] = {1, N / R + 1};
    prog p = {0};
    const vt_dtype F = VT_F32;
    int x = add_buf(&p, F, 2, shape, 0), bias = add_buf(&p, F, 2, row, 0);
    int t[7];
    for (int i = 0; i < 7; i++) t[i] = add_buf(&p, F, 2, shape, 1);
    int y = add_buf(&p, F, 2, shape, 0);
    add_step(&p, VT_NODE_BINARY, VT_MUL, F, t[0], x, x, 0);           /* x^2 */
    add_step(&p, VT_NODE_BINARY, VT_MUL, F, t[1], t[0], x, 0);        /* x^3 */
    add_step(&p, VT_NODE_BINARY, VT_ADD, F, t[2], x, t[1], 0);        /* x + alpha x^3 */
    add_step(&p, VT_NODE_BINARY, VT_MUL, F, t[3], t[2], -1, 0);       /* * c */
    add_step(&p, VT_NODE_UNARY, VT_TANH, F, t[4], t[3], 0, 0);
    add_step(&p, VT_NODE_BINARY, VT_ADD, F, t[5], t[4], -1, 0);       /* 1 + tanh */
    add_step(&p, VT_NODE_BINARY, VT_MUL, F, t[6], t[5], x, 0);        /* x (1 + tanh) (* scale) */
    add_step(&p, VT_NODE_BINARY, VT_ADD, F, y, t[6], bias, 0);        /* + bias */
    vt_fusion_stats st;
    agree("gelu chain", &p, &st);
    CHECK_MSG(st.groups == 1 && st.fused_nodes == 8 && st.nodes == 8, "groups %llu fused %llu nodes %llu",
              (unsigned long long)st.groups, (unsigned long long)st.fused_nodes, (unsigned long long)st.nodes);
    const uint64_t bytes = (uint64_t)shape[0] * shape[1] * 4;
    CHECK_MSG(st.bytes_written == bytes && st.bytes_elided == 7 * bytes, "written %llu elided %llu",
              (unsigned long long)st.bytes_written, (unsigned long long)st.bytes_elided);

    /* the same chain with every intermediate kept alive: all eight written */
    memset(p.dead, 0, sizeof p.dead);
    agree("gelu chain, live", &p, &st);
    CHECK(st.groups == 1 && st.bytes_written == 8 * bytes && st.bytes_elided == 0);
    prog_free(&p);
}

/* Every op of the catalogue inside a chain, reading an input from scratch
 * and writing its result to scratch: t0 = a * 2 (dead), t1 = op(t0, c, b)
 * (dead), out = copy(t1) as float64. Float and integer compute, in each
 * layout: contiguous with a broadcast row, a transposed input, 0-dim, in
 * place (op writes t0 over itself) and empty (nothing recorded). */
enum { L_CONTIG, L_TRANSPOSED, L_SCALAR, L_INPLACE, L_EMPTY, L_COUNT };
static const char *const layout_names[L_COUNT] = {"contiguous", "transposed", "0-dim", "in place", "empty"};

static int catalogue_case(vt_node_kind kind, int op, vt_dtype C, int layout) {
    /* skip what the kernel does not take in this dtype */
    {
        vt_ew_plan pl;
        host_tensor o = ht_1d(C, 1), i0 = ht_1d(C, 1);
        vt_status s = VT_OK;
        if (kind == VT_NODE_UNARY) s = vt_unary_plan(&pl, op, &o.t, &i0.t, C, NULL);
        if (kind == VT_NODE_BINARY) s = vt_binary_plan(&pl, op, &o.t, &i0.t, &i0.t, C, vt_scalar_from_int(1), NULL);
        if (kind == VT_NODE_TERNARY)
            s = vt_ternary_plan(&pl, op, &o.t, &i0.t, &i0.t, &i0.t, C, vt_scalar_from_int(1));
        ht_free(&o);
        ht_free(&i0);
        if (s != VT_OK) return 0;
    }
    const int is_bool = (kind == VT_NODE_UNARY && vt_unary_op_is_bool(op)) ||
                        (kind == VT_NODE_BINARY && vt_binary_op_is_bool(op));
    if (layout == L_INPLACE && (is_bool || kind == VT_NODE_FILL)) return 0; /* t1 is t0 */
    const int64_t R = layout == L_EMPTY ? 0 : 9, Cn = 131;
    const int nd = layout == L_SCALAR ? 0 : 2;
    int64_t shape[2] = {R, Cn}, row[2] = {1, Cn}, tshape[2] = {Cn, R};
    prog p = {0};
    int a = add_buf(&p, C, nd, shape, 0);
    if (layout == L_TRANSPOSED) { /* a: an [R, C] view of a [C, R] block */
        int base = add_buf(&p, C, 2, tshape, 0);
        p.alias[a] = base + 1;
        p.buf[a].t.strides[0] = 1;
        p.buf[a].t.strides[1] = R;
    }
    int b = add_buf(&p, C, nd, row, 0), c = add_buf(&p, C, nd, shape, 0);
    int cond = add_buf(&p, VT_BOOL, nd, shape, 0);
    int t0 = add_buf(&p, C, nd, shape, 1);
    int t1 = layout == L_INPLACE ? t0 : add_buf(&p, is_bool ? VT_BOOL : C, nd, shape, 1);
    int out = add_buf(&p, VT_F64, nd, shape, 0);
    add_step(&p, VT_NODE_BINARY, VT_MUL, C, t0, a, -1, 0); /* t0 = a * 2 */
    if (kind == VT_NODE_WHERE) add_step(&p, VT_NODE_WHERE, 0, C, t1, cond, t0, b);
    else if (kind == VT_NODE_FILL) add_step(&p, VT_NODE_FILL, 0, C, t1, 0, 0, 0);
    else if (kind == VT_NODE_COPY) add_step(&p, VT_NODE_COPY, 0, C, t1, t0, 0, 0);
    else add_step(&p, kind, op, C, t1, t0, c, b);
    add_step(&p, VT_NODE_COPY, 0, C, out, t1, 0, 0);
    char what[128];
    snprintf(what, sizeof what, "%s %d %s %s", vt_node_kinds[kind].name, op, vt_dtype_name(C), layout_names[layout]);
    vt_fusion_stats st;
    int ok = agree(what, &p, &st);
    const uint64_t numel = (uint64_t)(nd ? R * Cn : 1);
    if (layout == L_EMPTY) CHECK_MSG(st.nodes == 0, "%s: %llu nodes recorded", what, (unsigned long long)st.nodes);
    else
        CHECK_MSG(st.groups == 1 && st.fused_nodes == 3 && st.bytes_written == numel * 8 &&
                      st.bytes_elided == numel * (vt_dtype_size(p.buf[t0].t.dtype) + vt_dtype_size(p.buf[t1].t.dtype)),
                  "%s: groups %llu fused %llu written %llu elided %llu", what, (unsigned long long)st.groups,
                  (unsigned long long)st.fused_nodes, (unsigned long long)st.bytes_written,
                  (unsigned long long)st.bytes_elided);
    prog_free(&p);
    return ok;
}

TEST(defer_catalogue_ops_run_from_and_into_scratch_in_every_layout) {
    CHECK_OK(vt_init());
    static const vt_dtype computes[] = {VT_F32, VT_I64};
    int ran = 0;
    for (size_t d = 0; d < 2; d++)
        for (int kind = VT_NODE_UNARY; kind <= VT_NODE_FILL; kind++) {
            const int nops = kind == VT_NODE_UNARY     ? VT_UNARY_OP_COUNT
                             : kind == VT_NODE_BINARY  ? VT_BINARY_OP_COUNT
                             : kind == VT_NODE_TERNARY ? VT_TERNARY_OP_COUNT
                                                       : 1;
            for (int op = 0; op < nops; op++)
                for (int l = 0; l < L_COUNT; l++) ran += catalogue_case((vt_node_kind)kind, op, computes[d], l);
        }
    CHECK(ran > 4 * (VT_UNARY_OP_COUNT + VT_BINARY_OP_COUNT));
}

/* Hazards cut groups: a node reading a buffer through another view than
 * the one a node of the group writes it through (a transpose) cannot run
 * tile by tile with it; in place ops through the same view can; another
 * output shape starts a new group. Strict's result every time. */
TEST(defer_hazards_and_shapes_cut_groups) {
    CHECK_OK(vt_init());
    const vt_dtype F = VT_F32;
    int64_t sq[2] = {67, 67}, other[2] = {3, 11};
    prog p = {0};
    int a = add_buf(&p, F, 2, sq, 0), b = add_buf(&p, F, 2, sq, 0);
    int at = add_buf(&p, F, 2, sq, 0); /* a transposed view of a's block */
    p.alias[at] = a + 1;
    p.buf[at].t.strides[0] = 1;
    p.buf[at].t.strides[1] = 67;
    int c = add_buf(&p, F, 2, sq, 0), s = add_buf(&p, F, 2, other, 0), s2 = add_buf(&p, F, 2, other, 0);
    add_step(&p, VT_NODE_BINARY, VT_ADD, F, a, a, b, 0);  /* a += b, in place */
    add_step(&p, VT_NODE_UNARY, VT_EXP, F, b, a, 0, 0);   /* b = exp(a): same group */
    add_step(&p, VT_NODE_BINARY, VT_MUL, F, c, at, -1, 0); /* c = a^T * 1.5: a new group */
    add_step(&p, VT_NODE_BINARY, VT_MUL, F, a, a, -1, 0); /* a *= 1.5 while c read a^T: a new group */
    add_step(&p, VT_NODE_BINARY, VT_SUB, F, c, b, a, 0);
    add_step(&p, VT_NODE_UNARY, VT_SIN, F, s2, s, 0, 0);  /* another shape: a new group */
    add_step(&p, VT_NODE_BINARY, VT_ADD, F, c, c, b, 0);  /* and back: joins c -= ..., the sin touches neither */
    vt_fusion_stats st;
    agree("hazards", &p, &st);
    CHECK_MSG(st.groups == 4 && st.nodes == 7, "groups %llu nodes %llu", (unsigned long long)st.groups,
              (unsigned long long)st.nodes);
    prog_free(&p);

    /* A node cannot move before a newer group that reads what it writes. */
    prog q = {0};
    int x = add_buf(&q, F, 2, sq, 0), y = add_buf(&q, F, 2, sq, 0), t = add_buf(&q, F, 2, other, 0);
    int xv = add_buf(&q, F, 2, other, 0); /* the first 3 x 11 of x's block, another shape */
    q.alias[xv] = x + 1;
    add_step(&q, VT_NODE_UNARY, VT_EXP, F, y, x, 0, 0);   /* y = exp(x) */
    add_step(&q, VT_NODE_UNARY, VT_SIN, F, t, xv, 0, 0);  /* t = sin(x's first rows): another shape */
    add_step(&q, VT_NODE_BINARY, VT_MUL, F, x, y, -1, 0); /* x = y * 1.5 writes what the sin read: a new group */
    add_step(&q, VT_NODE_UNARY, VT_COS, F, y, y, 0, 0);   /* joins the mul (the sin does not touch y) */
    agree("write after a newer group's read", &q, &st);
    CHECK_MSG(st.groups == 3 && st.nodes == 4, "groups %llu nodes %llu", (unsigned long long)st.groups,
              (unsigned long long)st.nodes);
    prog_free(&q);
}

/* A node that does not fuse (here a matmul) is recorded too: it runs
 * alone, in order between the groups, and does not flush the record. A
 * dead intermediate it reads is still written; the ones only a group
 * reads are not; an elementwise node after it that touches nothing it
 * touches joins the group before it. */
TEST(defer_matmul_is_recorded_and_runs_between_groups) {
    CHECK_OK(vt_init());
    const vt_dtype F = VT_F32;
    int64_t sx[2] = {33, 40}, sw[2] = {40, 24}, sm[2] = {33, 24};
    prog p = {0};
    int x = add_buf(&p, F, 2, sx, 0), w = add_buf(&p, F, 2, sw, 0);
    int t1 = add_buf(&p, F, 2, sx, 1), h = add_buf(&p, F, 2, sx, 1), z = add_buf(&p, F, 2, sx, 0);
    int m = add_buf(&p, F, 2, sm, 0), u = add_buf(&p, F, 2, sm, 1), v = add_buf(&p, F, 2, sm, 0);
    add_step(&p, VT_NODE_BINARY, VT_MUL, F, t1, x, -1, 0); /* t1 = x * 1.5: dead, never written */
    add_step(&p, VT_NODE_UNARY, VT_EXP, F, h, t1, 0, 0);   /* h = exp(t1): dead, but the matmul reads it */
    add_step(&p, VT_NODE_MATMUL, 0, F, m, h, w, 0);        /* m = h @ w: alone */
    add_step(&p, VT_NODE_BINARY, VT_MUL, F, u, m, -1, 0);  /* u = m * 1.5: dead, never written */
    add_step(&p, VT_NODE_UNARY, VT_SIN, F, v, u, 0, 0);    /* v = sin(u) */
    add_step(&p, VT_NODE_BINARY, VT_SUB, F, z, x, -1, 0);  /* z = x - 1.5: joins the first group */
    vt_fusion_stats st;
    agree("matmul between groups", &p, &st);
    const uint64_t X = 33 * 40 * 4, M = 33 * 24 * 4;
    CHECK_MSG(st.flushes == 1 && st.nodes == 6 && st.groups == 3 && st.fused_nodes == 5,
              "flushes %llu nodes %llu groups %llu fused %llu", (unsigned long long)st.flushes,
              (unsigned long long)st.nodes, (unsigned long long)st.groups, (unsigned long long)st.fused_nodes);
    CHECK_MSG(st.bytes_written == 2 * X + 2 * M && st.bytes_elided == X + M, "%llu %llu %llu %llu", STATS(st));
    prog_free(&p);
}

/* A loop body of 12 unary ops on two buffers, three times over (36 nodes). */
static void repeating_prog(prog *p) {
    const vt_dtype F = VT_F32;
    int64_t sh[1] = {64};
    int x = add_buf(p, F, 1, sh, 0), y = add_buf(p, F, 1, sh, 0);
    static const int ops[12] = {VT_SIN, VT_COS, VT_NEG, VT_ABS, VT_EXP, VT_TANH,
                                VT_SIGMOID, VT_SIN, VT_NEG, VT_COS, VT_ABS, VT_TANH};
    for (int it = 0; it < 3; it++)
        for (int k = 0; k < 12; k++) add_step(p, VT_NODE_UNARY, ops[k], F, k % 2 ? x : y, k % 2 ? y : x, 0, 0);
}

/* A loop body repeated is flushed, not grown. */
TEST(defer_loop_detection_flushes_a_repeating_record) {
    CHECK_OK(vt_init());
    prog p = {0};
    repeating_prog(&p);
    vt_fusion_stats st;
    agree("loop", &p, &st);
    CHECK_MSG(st.loop_flushes >= 1 && st.flushes >= 2, "loop flushes %llu flushes %llu",
              (unsigned long long)st.loop_flushes, (unsigned long long)st.flushes);
    prog_free(&p);
}

/* The same repeating record inside a graph program (vt_defer_program_begin)
 * is one flush: a program's ops are a finite sequence its caller flushes. */
TEST(defer_program_scope_records_a_repeating_sequence_whole) {
    CHECK_OK(vt_init());
    prog p = {0};
    repeating_prog(&p);
    vt_fusion_stats st;
    vt_defer_program_begin();
    vt_defer_program_begin(); /* nested: the outer scope still holds after the inner ends */
    vt_defer_program_end();
    agree("loop in a program", &p, &st);
    vt_defer_program_end();
    CHECK_MSG(st.loop_flushes == 0 && st.flushes == 1 && st.nodes == 36, "loop flushes %llu flushes %llu nodes %llu",
              (unsigned long long)st.loop_flushes, (unsigned long long)st.flushes, (unsigned long long)st.nodes);
    vt_defer_program_end(); /* unbalanced: ignored */
    agree("loop after the program", &p, &st);
    CHECK_MSG(st.loop_flushes >= 1, "loop flushes %llu", (unsigned long long)st.loop_flushes);
    prog_free(&p);
}

/* Integer division by zero inside a group: the synchronisation raises it
 * naming the node's op, as Strict does, and the process goes on. */
TEST(defer_error_in_group_names_the_op) {
    CHECK_OK(vt_init());
    int64_t sh[1] = {100};
    host_tensor a = ht_1d(VT_I64, 100), z = ht_1d(VT_I64, 100), t = ht_1d(VT_I64, 100), o = ht_1d(VT_I64, 100);
    for (int i = 0; i < 100; i++) ((int64_t *)a.block)[i] = i + 1;
    ht_device(&a), ht_device(&z), ht_device(&t), ht_device(&o);
    (void)sh;
    vt_set_thread_eager_mode(VT_EAGER_DEFER_AND_FUSE);
    CHECK_OK(submit_binary(VT_ADD, "aten::add.Tensor", VT_I64, &t.t, &a.t, &a.t));
    CHECK_OK(submit_binary(VT_DIV_TRUNC, "aten::div.Tensor_mode", VT_I64, &o.t, &t.t, &z.t));
    vt_status s = vt_synchronize(0);
    vt_set_thread_eager_mode(-1);
    CHECK(s == VT_ERR_KERNEL);
    CHECK_MSG(strstr(vt_last_error(), "aten::div.Tensor_mode") && strstr(vt_last_error(), "ZeroDivisionError"),
              "%s", vt_last_error());
    CHECK_OK(vt_synchronize(0));
    ht_free(&a), ht_free(&z), ht_free(&t), ht_free(&o);
}

/* A node with an empty output is checked as in Strict before nothing is
 * recorded: an input in host memory (not the device's) is refused in both
 * modes, with the same status. */
TEST(defer_empty_output_node_is_checked_as_in_strict) {
    CHECK_OK(vt_init());
    const int64_t s0[1] = {0}, sx[2] = {6, 5}, so[2] = {0, 5};
    host_tensor x = ht_new(VT_F32, 2, sx), idx = ht_new(VT_I64, 1, s0), o = ht_new(VT_F32, 2, so);
    ht_device(&idx), ht_device(&o); /* x stays in host memory */
    vt_status got[2];
    for (int mode = 0; mode < 2; mode++) {
        vt_set_thread_eager_mode(mode ? VT_EAGER_DEFER_AND_FUSE : VT_EAGER_STRICT);
        got[mode] = vt_op_index_select(0, "aten::index_select", &o.t, &x.t, 0, &idx.t);
        vt_set_thread_eager_mode(-1);
        CHECK_MSG(got[mode] != VT_OK, "mode %d accepted a host input", mode);
        CHECK_MSG(strstr(vt_last_error(), "aten::index_select") || strstr(vt_last_error(), "device"), "%s",
                  vt_last_error());
    }
    CHECK(got[0] == got[1]);
    CHECK_OK(vt_synchronize(0));
    ht_free(&x), ht_free(&idx), ht_free(&o);
}

/* Host memory running out at a flush (its tables, the group's command, or
 * a thread's tiles on the worker): the caller of the flush, or the next
 * synchronisation, gets VT_ERR_OUT_OF_MEMORY (torch.OutOfMemoryError);
 * what the dropped nodes write raises on a read instead of returning stale
 * memory; and the same ops recorded again run. */
TEST(defer_out_of_memory_at_flush) {
    CHECK_OK(vt_init());
    const int64_t N = 100000; /* several tiles, on every thread */
    for (int skip = 0; skip < 3; skip++) {
        host_tensor a = ht_1d(VT_F32, N), t = ht_1d(VT_F32, N), o = ht_1d(VT_F32, N), h = ht_1d(VT_F32, N);
        for (int64_t i = 0; i < N; i++) ((float *)a.block)[i] = (float)(i % 7);
        ht_device(&a), ht_device(&t), ht_device(&o);
        CHECK_OK(vt_synchronize(0));
        vt_set_thread_eager_mode(VT_EAGER_DEFER_AND_FUSE);
        CHECK_OK(record_chain(&a, &t, &o));
        vt_defer_fail_alloc_for_test(skip);
        vt_status f = vt_flush(0);
        vt_status w = vt_synchronize(0);
        vt_set_thread_eager_mode(-1);
        vt_defer_fail_alloc_for_test(-1);
        /* the tables or the command: at the flush; the tiles: at the synchronisation */
        CHECK_MSG(skip < 2 ? f == VT_ERR_OUT_OF_MEMORY : f == VT_OK && w == VT_ERR_OUT_OF_MEMORY,
                  "skip %d: flush %s, synchronize %s: %s", skip, vt_status_string(f), vt_status_string(w),
                  vt_last_error());
        CHECK_MSG(strstr(vt_last_error(), "out of host memory"), "%s", vt_last_error());
        /* the output was never written: reading it raises, then clears */
        CHECK_STATUS(vt_copy_to_host(0, &h.t, &o.t), VT_ERR_OUT_OF_MEMORY);
        CHECK_OK(vt_synchronize(0));
        /* recorded again, it runs */
        vt_set_thread_eager_mode(VT_EAGER_DEFER_AND_FUSE);
        CHECK_OK(record_chain(&a, &t, &o));
        vt_set_thread_eager_mode(-1);
        CHECK_OK(vt_copy_to_host(0, &h.t, &o.t));
        int bad = 0;
        for (int64_t i = 0; i < N; i++) {
            const float x = (float)(i % 7);
            bad += ((float *)h.block)[i] != (x + x) * x;
        }
        CHECK_MSG(bad == 0, "skip %d: %d wrong", skip, bad);
        ht_free(&a), ht_free(&t), ht_free(&o), ht_free(&h);
    }
}

/* ------------------------------------------------------------ foreach */

#define NPARAM 3

/* An AdamW step as PyTorch's foreach implementation issues it, op by op
 * across all parameters, on device copies of p, m, v, g; the square-root
 * temporaries are freed before the synchronisation. Results into res. */
static vt_status adamw_foreach(vt_eager_mode mode, host_tensor in[NPARAM][4], host_tensor res[NPARAM][3]) {
    host_tensor d[NPARAM][4], t[NPARAM];
    vt_tensor P[NPARAM], M[NPARAM], V[NPARAM], G[NPARAM], T[NPARAM];
    double bc2[NPARAM], step[NPARAM];
    for (int i = 0; i < NPARAM; i++) {
        for (int k = 0; k < 4; k++) d[i][k] = ht_copy_to_device(&in[i][k]);
        t[i] = ht_new(in[i][0].t.dtype, in[i][0].t.ndim, in[i][0].t.sizes);
        ht_device(&t[i]);
        P[i] = d[i][0].t, M[i] = d[i][1].t, V[i] = d[i][2].t, G[i] = d[i][3].t, T[i] = t[i].t;
        bc2[i] = 0.3 + 0.1 * i, step[i] = -1e-3 * (i + 1);
    }
    vt_set_thread_eager_mode(mode);
    const vt_foreach_args ops[] = {
        {.op = VT_FOREACH_MUL, .n = NPARAM, .out = P, .a = P, .scalar = 0.9}, /* no bf16: CPU rounds it, in place (in scratch too) */
        {.op = VT_FOREACH_LERP, .n = NPARAM, .out = M, .a = M, .b = G, .scalar = 0.1},
        {.op = VT_FOREACH_MUL, .n = NPARAM, .out = V, .a = V, .scalar = 0.999},
        {.op = VT_FOREACH_ADDCMUL, .n = NPARAM, .out = V, .a = V, .b = G, .c = G, .scalar = 0.001},
        {.op = VT_FOREACH_SQRT, .n = NPARAM, .out = T, .a = V},
        {.op = VT_FOREACH_DIV, .n = NPARAM, .out = T, .a = T, .scalars = bc2},
        {.op = VT_FOREACH_ADD, .n = NPARAM, .out = T, .a = T, .scalar = 1e-8, .alpha = 1},
        {.op = VT_FOREACH_ADDCDIV, .n = NPARAM, .out = P, .a = P, .b = M, .c = T, .scalars = step},
    };
    vt_status s = VT_OK;
    for (size_t o = 0; o < sizeof ops / sizeof ops[0] && s == VT_OK; o++) {
        s = vt_op_foreach(0, "aten::_foreach_op_", &ops[o]);
        CHECK_MSG(s == VT_OK, "op %d: %s", (int)o, vt_last_error());
    }
    for (int i = 0; i < NPARAM; i++) ht_free(&t[i]);
    vt_status w = vt_synchronize(0);
    vt_set_thread_eager_mode(-1);
    for (int i = 0; i < NPARAM; i++) {
        for (int k = 0; k < 3; k++) res[i][k] = ht_copy_to_host(&d[i][k]);
        for (int k = 0; k < 4; k++) ht_free(&d[i][k]);
    }
    return s != VT_OK ? s : w;
}

/* out = (a / b) * 0.5 + c per tensor, b a broadcast value (stride 0, as
 * an optimizer's per-parameter bias corrections reach its foreach ops), a
 * transposed in one tensor, f32 and bf16: recorded and fused, each plan
 * reads its operands in place, once per row or converted, and computes
 * what Strict's multi-tensor kernel does, bit for bit. */
static vt_status broadcast_chain(vt_eager_mode mode, host_tensor in[NPARAM][3], host_tensor res[NPARAM]) {
    host_tensor d[NPARAM][3], o[NPARAM];
    vt_tensor A[NPARAM], B[NPARAM], C[NPARAM], O[NPARAM];
    for (int i = 0; i < NPARAM; i++) {
        for (int k = 0; k < 3; k++) d[i][k] = ht_copy_to_device(&in[i][k]);
        o[i] = ht_new(in[i][0].t.dtype, in[i][0].t.ndim, in[i][0].t.sizes);
        ht_device(&o[i]);
        A[i] = d[i][0].t, B[i] = d[i][1].t, C[i] = d[i][2].t, O[i] = o[i].t;
        for (int j = 0; j < B[i].ndim; j++) B[i].strides[j] = 0; /* element 0, everywhere */
    }
    vt_set_thread_eager_mode(mode);
    const vt_foreach_args ops[] = {
        {.op = VT_FOREACH_DIV, .n = NPARAM, .out = O, .a = A, .b = B, .in_place = -1},
        {.op = VT_FOREACH_MUL, .n = NPARAM, .out = O, .a = O, .scalar = 0.5},
        {.op = VT_FOREACH_ADD, .n = NPARAM, .out = O, .a = O, .b = C, .alpha = 1},
    };
    vt_status s = VT_OK;
    for (size_t k = 0; k < sizeof ops / sizeof ops[0] && s == VT_OK; k++) {
        s = vt_op_foreach(0, "aten::_foreach_op_", &ops[k]);
        CHECK_MSG(s == VT_OK, "op %d: %s", (int)k, vt_last_error());
    }
    vt_status w = vt_synchronize(0);
    vt_set_thread_eager_mode(-1);
    for (int i = 0; i < NPARAM; i++) {
        res[i] = ht_copy_to_host(&o[i]);
        ht_free(&o[i]);
        for (int k = 0; k < 3; k++) ht_free(&d[i][k]);
    }
    return s != VT_OK ? s : w;
}

TEST(defer_foreach_plans_read_broadcast_operands_as_strict_does) {
    CHECK_OK(vt_init());
    static const int64_t shapes[NPARAM][2] = {{33, 1500}, {64, 3}, {7, 45}};
    static const vt_dtype dts[NPARAM] = {VT_F32, VT_BF16, VT_F32};
    host_tensor in[NPARAM][3];
    for (int i = 0; i < NPARAM; i++)
        for (int k = 0; k < 3; k++) {
            in[i][k] = ht_new(dts[i], 2, shapes[i]);
            ht_fill_random(&in[i][k], 0, 1); /* finite, b nonzero: the value check below is meaningful */
        }
    in[2][0].t.strides[0] = 1, in[2][0].t.strides[1] = 7; /* a transposed view of a 45 x 7 block */
    host_tensor a[NPARAM], b[NPARAM];
    CHECK_OK(broadcast_chain(VT_EAGER_STRICT, in, a));
    vt_reset_fusion_stats();
    CHECK_OK(broadcast_chain(VT_EAGER_DEFER_AND_FUSE, in, b));
    vt_fusion_stats st;
    vt_get_fusion_stats(&st);
    CHECK_MSG(st.groups == NPARAM && st.fused_nodes == 3 * NPARAM, "groups %llu fused %llu",
              (unsigned long long)st.groups, (unsigned long long)st.fused_nodes);
    for (int i = 0; i < NPARAM; i++) {
        char what[32];
        snprintf(what, sizeof what, "tensor %d", i);
        CHECK(ht_compare(what, &b[i].t, &a[i].t, -1) == 0);
        /* and the value: (a / b[0]) * 0.5 + c at one element, in float64 */
        double x, y, z, r;
        vt_convert(dts[i], in[i][0].block, 1, VT_F64, &x, 1, 1);
        vt_convert(dts[i], in[i][1].block, 1, VT_F64, &y, 1, 1);
        vt_convert(dts[i], in[i][2].block, 1, VT_F64, &z, 1, 1);
        vt_convert(dts[i], b[i].block, 1, VT_F64, &r, 1, 1);
        CHECK_MSG(fabs(r - (x / y * 0.5 + z)) <= 1e-2 * fabs(x / y * 0.5 + z) + 1e-6, "tensor %d: %g vs %g", i, r,
                  x / y * 0.5 + z);
        free(a[i].block), free(b[i].block);
        for (int k = 0; k < 3; k++) ht_free(&in[i][k]);
    }
}

/* An optimizer step recorded foreach op by foreach op fuses parameter by
 * parameter (one group each, the temporaries never written) and computes
 * what Strict's multi-tensor kernels compute, bit for bit: f32 and bf16
 * parameters, a transposed gradient. */
TEST(defer_foreach_optimizer_step_fuses_per_parameter) {
    CHECK_OK(vt_init());
    static const int64_t shapes[NPARAM][2] = {{33, 17}, {64, 1}, {7, 45}};
    static const vt_dtype dts[NPARAM] = {VT_F32, VT_BF16, VT_F32};
    host_tensor in[NPARAM][4];
    uint64_t temp_bytes = 0;
    for (int i = 0; i < NPARAM; i++) {
        for (int k = 0; k < 4; k++) {
            in[i][k] = ht_new(dts[i], 2, shapes[i]);
            ht_fill_random(&in[i][k], 0, 1);
        }
        /* v >= 0, as a second moment is */
        for (int64_t e = 0; e < vt_tensor_numel(&in[i][2].t); e++) {
            double x;
            vt_convert(dts[i], (char *)in[i][2].block + e * (int64_t)vt_dtype_size(dts[i]), 1, VT_F64, &x, 1, 1);
            x = fabs(x);
            vt_convert(VT_F64, &x, 1, dts[i], (char *)in[i][2].block + e * (int64_t)vt_dtype_size(dts[i]), 1, 1);
        }
        temp_bytes += 3 * (uint64_t)vt_tensor_numel(&in[i][0].t) * vt_dtype_size(dts[i]);
    }
    /* parameter 2's gradient is a transposed view of a 45 x 7 block */
    in[2][3].t.strides[0] = 1, in[2][3].t.strides[1] = 7;
    host_tensor a[NPARAM][3], b[NPARAM][3];
    CHECK_OK(adamw_foreach(VT_EAGER_STRICT, in, a));
    vt_reset_fusion_stats();
    CHECK_OK(adamw_foreach(VT_EAGER_DEFER_AND_FUSE, in, b));
    vt_fusion_stats st;
    vt_get_fusion_stats(&st);
    for (int i = 0; i < NPARAM; i++)
        for (int k = 0; k < 3; k++) {
            char what[64];
            snprintf(what, sizeof what, "param %d %s", i, k == 0 ? "p" : k == 1 ? "exp_avg" : "exp_avg_sq");
            CHECK(ht_compare(what, &b[i][k].t, &a[i][k].t, -1) == 0);
            free(a[i][k].block), free(b[i][k].block);
        }
    CHECK_MSG(st.nodes == 8 * NPARAM && st.groups == NPARAM && st.fused_nodes == 8 * NPARAM,
              "nodes %llu groups %llu fused %llu", (unsigned long long)st.nodes, (unsigned long long)st.groups,
              (unsigned long long)st.fused_nodes);
    /* p, exp_avg and exp_avg_sq are written once each: the temporary's
     * three values and the first values of p and exp_avg_sq (mul_, then
     * overwritten in the group by addcdiv_ and addcmul_) stay in scratch */
    CHECK_MSG(st.bytes_elided == temp_bytes * 5 / 3 && st.bytes_written == temp_bytes,
              "elided %llu written %llu, temporaries %llu bytes", (unsigned long long)st.bytes_elided,
              (unsigned long long)st.bytes_written, (unsigned long long)temp_bytes);
    for (int i = 0; i < NPARAM; i++)
        for (int k = 0; k < 4; k++) ht_free(&in[i][k]);
}

/* t = a + 1, u = t * 0.1 (out of place), p += u on bf16 with t and u
 * dead: u's product reads t from scratch and writes scratch, two operands
 * at one scratch address, and is still the out-of-place mul, whose scalar
 * CPU keeps in float (the in-place mul_ rounds it to bf16). */
static vt_status scaled_add(vt_eager_mode mode, const host_tensor *a0, const host_tensor *p0, host_tensor *res) {
    host_tensor a = ht_copy_to_device(a0), p = ht_copy_to_device(p0);
    host_tensor t = ht_new(a0->t.dtype, a0->t.ndim, a0->t.sizes), u = ht_new(a0->t.dtype, a0->t.ndim, a0->t.sizes);
    ht_device(&t), ht_device(&u);
    vt_set_thread_eager_mode(mode);
    const vt_foreach_args ops[] = {
        {.op = VT_FOREACH_ADD, .n = 1, .out = &t.t, .a = &a.t, .scalar = 1.0, .alpha = 1},
        {.op = VT_FOREACH_MUL, .n = 1, .out = &u.t, .a = &t.t, .scalar = 0.1},
        {.op = VT_FOREACH_ADD, .n = 1, .out = &p.t, .a = &p.t, .b = &u.t, .alpha = 1},
    };
    vt_status s = VT_OK;
    for (int o = 0; o < 3 && s == VT_OK; o++) s = vt_op_foreach(0, "aten::_foreach_op", &ops[o]);
    ht_free(&t), ht_free(&u);
    vt_status w = vt_synchronize(0);
    vt_set_thread_eager_mode(-1);
    *res = ht_copy_to_host(&p);
    ht_free(&a), ht_free(&p);
    return s != VT_OK ? s : w;
}

TEST(defer_out_of_place_foreach_mul_in_scratch_keeps_its_scalar) {
    CHECK_OK(vt_init());
    int64_t sh[2] = {31, 29};
    host_tensor a = ht_new(VT_BF16, 2, sh), p = ht_new(VT_BF16, 2, sh), want, got;
    ht_fill_random(&a, 0, 1), ht_fill_random(&p, 0, 1);
    CHECK_OK(scaled_add(VT_EAGER_STRICT, &a, &p, &want));
    vt_reset_fusion_stats();
    CHECK_OK(scaled_add(VT_EAGER_DEFER_AND_FUSE, &a, &p, &got));
    vt_fusion_stats st;
    vt_get_fusion_stats(&st);
    CHECK_MSG(st.groups == 1 && st.bytes_written == 31 * 29 * 2, "groups %llu fused %llu written %llu elided %llu",
              STATS(st));
    CHECK(ht_compare("p", &got.t, &want.t, -1) == 0);
    ht_free(&a), ht_free(&p), ht_free(&want), ht_free(&got);
}

/* A chain mixing layouts (a transposed intermediate read next to a
 * contiguous operand) is one group: the group walks every member in its
 * first member's memory order, so tile t is the same elements for all. */
TEST(defer_mixed_layout_chain_is_one_group) {
    CHECK_OK(vt_init());
    const vt_dtype F = VT_F32;
    int64_t sq[2] = {37, 53};
    prog p = {0};
    int a = add_buf(&p, F, 2, sq, 0), w = add_buf(&p, F, 2, sq, 0), z = add_buf(&p, F, 2, sq, 0);
    int y = add_buf(&p, F, 2, sq, 1); /* a transposed intermediate, freed before the flush */
    p.buf[y].t.strides[0] = 1, p.buf[y].t.strides[1] = 37;
    p.buf[a].t.strides[0] = 1, p.buf[a].t.strides[1] = 37; /* a transposed input too */
    add_step(&p, VT_NODE_BINARY, VT_MUL, F, y, a, -1, 0); /* y = a * 1.5, y laid out like a */
    add_step(&p, VT_NODE_BINARY, VT_ADD, F, z, w, y, 0);  /* z = w + y: contiguous first operand */
    add_step(&p, VT_NODE_UNARY, VT_EXP, F, z, z, 0, 0);
    vt_fusion_stats st;
    agree("mixed layouts", &p, &st);
    CHECK_MSG(st.groups == 1 && st.nodes == 3, "groups %llu nodes %llu", (unsigned long long)st.groups,
              (unsigned long long)st.nodes);
    /* y, and z's sum, which exp overwrites in place */
    CHECK_MSG(st.bytes_elided == 2 * 37 * 53 * 4 && st.bytes_written == 37 * 53 * 4, "elided %llu written %llu",
              (unsigned long long)st.bytes_elided, (unsigned long long)st.bytes_written);
    prog_free(&p);
}

/* A value a later member overwrites, all of it, stays in scratch: z = w + a,
 * y = z * 1.5 (reads the sum), z = exp(z) in place, z *= 1.5 (overwrites
 * the exp too), u = z - w (reads the product, from memory, not a value
 * left in scratch). z is written once; y and u agree with Strict bit for
 * bit.
 * Then a slice: h = x[:, :20], h = h + w2 twice, r = x[:, 20:] * 1.5
 * between them (a disjoint view of the same buffer): x's first half is
 * written once, its second half read from memory. */
TEST(defer_overwritten_value_stays_in_scratch) {
    CHECK_OK(vt_init());
    const vt_dtype F = VT_F32;
    int64_t sq[2] = {29, 40}, sh[2] = {29, 20};
    prog p = {0};
    int a = add_buf(&p, F, 2, sq, 0), w = add_buf(&p, F, 2, sq, 0), z = add_buf(&p, F, 2, sq, 0);
    int y = add_buf(&p, F, 2, sq, 0), u = add_buf(&p, F, 2, sq, 0);
    add_step(&p, VT_NODE_BINARY, VT_ADD, F, z, w, a, 0);
    add_step(&p, VT_NODE_BINARY, VT_MUL, F, y, z, -1, 0);
    add_step(&p, VT_NODE_UNARY, VT_EXP, F, z, z, 0, 0);
    add_step(&p, VT_NODE_BINARY, VT_MUL, F, z, z, -1, 0);
    add_step(&p, VT_NODE_BINARY, VT_SUB, F, u, z, w, 0);
    vt_fusion_stats st;
    agree("in-place chain", &p, &st);
    const uint64_t B = 29 * 40 * 4;
    CHECK_MSG(st.groups == 1 && st.nodes == 5 && st.bytes_written == 3 * B && st.bytes_elided == 2 * B,
              "groups %llu fused %llu written %llu elided %llu", STATS(st));
    prog_free(&p);

    prog q = {0};
    int x = add_buf(&q, F, 2, sq, 0), h = add_buf(&q, F, 2, sh, 0), h2 = add_buf(&q, F, 2, sh, 0);
    int w2 = add_buf(&q, F, 2, sh, 0), r = add_buf(&q, F, 2, sh, 0);
    q.alias[h] = q.alias[h2] = x + 1; /* x[:, :20] and x[:, 20:] */
    q.buf[h].t.strides[0] = q.buf[h2].t.strides[0] = 40;
    q.buf[h2].t.offset = 20;
    add_step(&q, VT_NODE_BINARY, VT_ADD, F, h, h, w2, 0);
    add_step(&q, VT_NODE_BINARY, VT_MUL, F, r, h2, -1, 0);
    add_step(&q, VT_NODE_BINARY, VT_ADD, F, h, h, w2, 0);
    agree("slice overwritten", &q, &st);
    CHECK_MSG(st.groups == 1 && st.nodes == 3 && st.bytes_written == 2 * 29 * 20 * 4 && st.bytes_elided == 29 * 20 * 4,
              "groups %llu fused %llu written %llu elided %llu", STATS(st));
    prog_free(&q);
}

/* In DeferAndFuse a cat is a copy per input into its slice of the result,
 * and two uses of one buffer that share no element never order each other:
 * so rotary embedding written out (x1 * c - x2 * s and x2 * c + x1 * s, on
 * the halves of x's last dim, then their cat) is one group that writes the
 * result only. A member reading one slice the group wrote, through the
 * copy's view, joins it; one reading a view across both slices, or writing
 * over part of a slice, starts a new group. Strict's bits throughout. */
TEST(defer_cat_writes_its_slices_from_the_group) {
    CHECK_OK(vt_init());
    const vt_dtype F = VT_F32;
    int64_t sx[3] = {4, 6, 40}, sh[3] = {4, 6, 20};
    prog p = {0};
    int x = add_buf(&p, F, 3, sx, 0), x1 = add_buf(&p, F, 3, sh, 0), x2 = add_buf(&p, F, 3, sh, 0);
    int c = add_buf(&p, F, 3, sh, 0), s = add_buf(&p, F, 3, sh, 0);
    int t0 = add_buf(&p, F, 3, sh, 1), t1 = add_buf(&p, F, 3, sh, 1), a = add_buf(&p, F, 3, sh, 1);
    int b = add_buf(&p, F, 3, sh, 1), out = add_buf(&p, F, 3, sx, 0);
    p.alias[x1] = p.alias[x2] = x + 1; /* x[..., :20] and x[..., 20:] */
    for (int v = x1; v <= x2; v++) p.buf[v].t.strides[0] = 240, p.buf[v].t.strides[1] = 40;
    p.buf[x2].t.offset = 20;
    add_step(&p, VT_NODE_BINARY, VT_MUL, F, t0, x1, c, 0);
    add_step(&p, VT_NODE_BINARY, VT_MUL, F, t1, x2, s, 0);
    add_step(&p, VT_NODE_BINARY, VT_SUB, F, a, t0, t1, 0);
    add_step(&p, VT_NODE_BINARY, VT_MUL, F, t0, x2, c, 0);
    add_step(&p, VT_NODE_BINARY, VT_MUL, F, t1, x1, s, 0);
    add_step(&p, VT_NODE_BINARY, VT_ADD, F, b, t0, t1, 0);
    add_cat(&p, out, a, b, 2);
    vt_fusion_stats st;
    agree("rotary", &p, &st);
    CHECK_MSG(st.groups == 1 && st.nodes == 8 && st.fused_nodes == 8 && st.bytes_written == 4 * 6 * 40 * 4 &&
                  st.bytes_elided == 6 * 4 * 6 * 20 * 4,
              "groups %llu fused %llu written %llu elided %llu", STATS(st));

    /* then y = exp(out[..., :20]): through the first copy's view, it joins;
     * z = sin(out[..., 10:30]) reads across both slices: a new group, which
     * y2 = cos(out[..., 20:]) joins (reads only); out[..., 5:25] *= 1.5
     * writes what those read through other views: a group of its own */
    int o1 = add_buf(&p, F, 3, sh, 0), om = add_buf(&p, F, 3, sh, 0), o2 = add_buf(&p, F, 3, sh, 0);
    int ow = add_buf(&p, F, 3, sh, 0), y = add_buf(&p, F, 3, sh, 0), z = add_buf(&p, F, 3, sh, 0);
    int y2 = add_buf(&p, F, 3, sh, 0);
    const int64_t offs[4] = {0, 10, 20, 5};
    const int views[4] = {o1, om, o2, ow};
    for (int k = 0; k < 4; k++) {
        p.alias[views[k]] = out + 1;
        p.buf[views[k]].t.strides[0] = 240, p.buf[views[k]].t.strides[1] = 40, p.buf[views[k]].t.offset = offs[k];
    }
    add_step(&p, VT_NODE_UNARY, VT_EXP, F, y, o1, 0, 0);
    add_step(&p, VT_NODE_UNARY, VT_SIN, F, z, om, 0, 0);
    add_step(&p, VT_NODE_UNARY, VT_COS, F, y2, o2, 0, 0);
    add_step(&p, VT_NODE_BINARY, VT_MUL, F, ow, ow, -1, 0);
    agree("reads of the slices", &p, &st);
    CHECK_MSG(st.groups == 3 && st.nodes == 12 && st.fused_nodes == 11,
              "groups %llu nodes %llu fused %llu", (unsigned long long)st.groups, (unsigned long long)st.nodes,
              (unsigned long long)st.fused_nodes);
    prog_free(&p);
}

/* A fault left on a buffer by a failed op reaches whatever reads it, in a
 * group as in Strict: y's block is poisoned (an integer division by zero
 * wrote it), then y[:50] = a * a and w = y[50:] + a. The group writes the
 * first half and reads the second from memory, still poisoned: w carries
 * the division's error in both modes. */
TEST(defer_read_of_a_slice_the_group_did_not_write_keeps_its_fault) {
    CHECK_OK(vt_init());
    for (int mode = 0; mode < 2; mode++) {
        host_tensor a = ht_1d(VT_I64, 50), z = ht_1d(VT_I64, 100), y = ht_1d(VT_I64, 100), w = ht_1d(VT_I64, 50);
        host_tensor num = ht_1d(VT_I64, 100);
        for (int i = 0; i < 50; i++) ((int64_t *)a.block)[i] = i + 1;
        for (int i = 0; i < 100; i++) ((int64_t *)num.block)[i] = i + 1;
        ht_device(&a), ht_device(&z), ht_device(&y), ht_device(&w), ht_device(&num);
        CHECK_OK(submit_binary(VT_DIV_TRUNC, "aten::div.Tensor_mode", VT_I64, &y.t, &num.t, &z.t));
        CHECK(vt_synchronize(0) == VT_ERR_KERNEL);
        vt_set_thread_eager_mode(mode ? VT_EAGER_DEFER_AND_FUSE : VT_EAGER_STRICT);
        vt_tensor y1 = y.t, y2 = y.t;
        y1.sizes[0] = y2.sizes[0] = 50;
        y2.offset = 50;
        CHECK_OK(submit_binary(VT_MUL, "aten::mul.Tensor", VT_I64, &y1, &a.t, &a.t));
        /* Strict: the op ran inline and failed */
        vt_status s = submit_binary(VT_ADD, "aten::add.Tensor", VT_I64, &w.t, &y2, &a.t);
        if (s == VT_OK) s = vt_synchronize(0);
        vt_set_thread_eager_mode(-1);
        int64_t host[50];
        vt_tensor h = w.t;
        h.data = host;
        h.offset = 0;
        if (s == VT_OK) s = vt_copy_to_host(0, &h, &w.t); /* DeferAndFuse: w carries the fault */
        CHECK_MSG(s == VT_ERR_KERNEL && strstr(vt_last_error(), "ZeroDivisionError"), "mode %d: %d %s", mode, s,
                  vt_last_error());
        CHECK_OK(vt_synchronize(0));
        ht_free(&a), ht_free(&z), ht_free(&y), ht_free(&w), ht_free(&num);
    }
}
