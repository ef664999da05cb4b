/* test_graph_defer.c — DeferAndFuse against Strict. The same node sequence
 * is submitted in Strict mode and recorded in DeferAndFuse, with the same
 * buffers freed before the synchronisation; the live results must agree
 * bit for bit (each node runs its own microkernels on the same elements in
 * both modes, on every ISA path), and the fusion counters must show what
 * ran as one group and which dead outputs were never written. */
#include "graph/defer.h"
#include "test_kernels_util.h"
#include "test_nodes_util.h"

#define MAXBUF 12
#define MAXSTEP 48

/* One step of a program: node kind and op, output buffer, inputs (buffer
 * index, or -1 for the host scalar 1.5 / 2). */
typedef struct step {
    vt_node_kind kind;
    int32_t op;
    int out;
    int src[3];
    vt_dtype compute;
    uint64_t mask; /* a reduction's dims; a softmax's dim */
    double param;  /* a reduction's parameter */
} step;

typedef struct prog {
    int nbuf, nstep;
    host_tensor buf[MAXBUF];       /* shapes and initial contents */
    unsigned char dead[MAXBUF];    /* freed before the synchronisation */
    int alias[MAXBUF];             /* 1 + the buffer whose block this view reads, or 0 */
    step s[MAXSTEP];
} prog;


static void build_node(vt_node *n, const step *st, host_tensor *b) {
    vt_node_init(n, st->kind, st->op, "aten::test_op");
    n->compute = st->compute;
    n->alpha = vt_dtype_is_float(st->compute) ? vt_scalar_from_double(st->kind == VT_NODE_FILL ? -2.5 : 0.75)
                                              : vt_scalar_from_int(2);
    const double params[VT_EW_MAX_PARAMS] = {1.0, 20.0, 1.0, 0.0};
    memcpy(n->params, params, sizeof params);
    vt_node_add_out(n, &b[st->out].t);
    if (st->kind == VT_NODE_REDUCE || st->kind == VT_NODE_SOFTMAX) {
        n->iparams[0] = (int64_t)st->mask;
        n->params[0] = st->param;
        CHECK_OK(vt_node_add_src(n, &b[st->src[0]].t, NULL));
        return;
    }
    for (int k = 0; k < nsrc_of(st->kind); k++) {
        vt_scalar v = vt_dtype_is_float(st->compute) ? vt_scalar_from_double(1.5) : vt_scalar_from_int(2);
        CHECK_OK(vt_node_add_src(n, st->src[k] >= 0 ? &b[st->src[k]].t : NULL, st->src[k] >= 0 ? NULL : &v));
    }
}

/* Run p in mode on device copies of its buffers; live results into res[]
 * (host copies), the status of the synchronisation returned. */
static vt_status run_prog(const prog *p, vt_eager_mode mode, host_tensor *res) {
    host_tensor b[MAXBUF];
    for (int i = 0; i < p->nbuf; i++) {
        b[i] = p->buf[i];
        if (p->alias[i]) continue;
        b[i].block = malloc(p->buf[i].bytes);
        memcpy(b[i].block, p->buf[i].block, p->buf[i].bytes);
        b[i].t.data = b[i].block;
        b[i].on_device = 0;
        ht_device(&b[i]);
    }
    for (int i = 0; i < p->nbuf; i++)
        if (p->alias[i]) b[i].t.data = b[p->alias[i] - 1].block;
    vt_set_thread_eager_mode(mode);
    vt_status s = VT_OK;
    for (int i = 0; i < p->nstep && s == VT_OK; i++) {
        vt_node n;
        build_node(&n, &p->s[i], b);
        s = vt_node_submit(0, &n);
        CHECK_MSG(s == VT_OK, "step %d: %s", i, vt_last_error());
    }
    for (int i = 0; i < p->nbuf; i++)
        if (p->dead[i]) ht_free(&b[i]);
    vt_status w = vt_synchronize(0);
    vt_set_thread_eager_mode(-1);
    for (int i = 0; i < p->nbuf; i++) {
        if (p->dead[i] || p->alias[i]) continue;
        res[i] = p->buf[i];
        res[i].block = malloc(p->buf[i].bytes);
        res[i].t.data = res[i].block;
        res[i].on_device = 0;
        if (w == VT_OK) memcpy(res[i].block, b[i].block, b[i].bytes);
        ht_free(&b[i]);
    }
    return w;
}

static void free_results(const prog *p, host_tensor *res) {
    for (int i = 0; i < p->nbuf; i++)
        if (!p->dead[i] && !p->alias[i]) free(res[i].block);
}

/* Strict and DeferAndFuse agree bit for bit; the stats of the DeferAndFuse run out. */
static int agree(const char *what, const prog *p, vt_fusion_stats *st) {
    host_tensor a[MAXBUF], b[MAXBUF];
    vt_status sa = run_prog(p, VT_EAGER_STRICT, a);
    vt_reset_fusion_stats();
    vt_status sb = run_prog(p, VT_EAGER_DEFER_AND_FUSE, b);
    vt_get_fusion_stats(st);
    CHECK_MSG(sa == VT_OK && sb == VT_OK, "%s: %d %d %s", what, sa, sb, vt_last_error());
    int bad = 0;
    for (int i = 0; i < p->nbuf && sa == VT_OK && sb == VT_OK; i++)
        if (!p->dead[i] && !p->alias[i]) bad |= ht_compare(what, &a[i].t, &b[i].t, -1) != 0;
    free_results(p, a);
    free_results(p, b);
    CHECK_MSG(!bad, "%s: DeferAndFuse differs from Strict", what);
    return !bad;
}

static void prog_free(prog *p) {
    for (int i = 0; i < p->nbuf; i++) free(p->buf[i].block);
}

static int add_buf(prog *p, vt_dtype dt, int ndim, const int64_t *sizes, int dead) {
    p->buf[p->nbuf] = ht_new(dt, ndim, sizes);
    if (vt_tensor_numel(&p->buf[p->nbuf].t) > 0) ht_fill_random(&p->buf[p->nbuf], 0, 1);
    p->dead[p->nbuf] = (unsigned char)dead;
    return p->nbuf++;
}

static void add_step(prog *p, vt_node_kind kind, int32_t op, vt_dtype compute, int out, int s0, int s1, int s2) {
    p->s[p->nstep++] = (step){kind, op, out, {s0, s1, s2}, compute, 0, 0.0};
}

/* out = op(in) over the dims in mask; out's shape is in's with those dims 1. */
static void add_reduce(prog *p, vt_reduce_op op, vt_dtype compute, int out, int in, uint64_t mask, double param) {
    p->s[p->nstep++] = (step){VT_NODE_REDUCE, (int32_t)op, out, {in, 0, 0}, compute, mask, param};
}

/* A buffer for the reduction of buffer `in` over mask. */
static int add_reduced_buf(prog *p, vt_dtype dt, int in, uint64_t mask) {
    int64_t sh[VT_MAX_DIMS];
    const vt_tensor *t = &p->buf[in].t;
    for (int d = 0; d < t->ndim; d++) sh[d] = mask >> d & 1 ? 1 : t->sizes[d];
    return add_buf(p, dt, t->ndim, sh, 0);
}

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

/* A loop body repeated is flushed, not grown. */
TEST(defer_loop_detection_flushes_a_repeating_record) {
    CHECK_OK(vt_init());
    const vt_dtype F = VT_F32;
    int64_t sh[1] = {64};
    prog p = {0};
    int x = add_buf(&p, F, 1, sh, 0), y = add_buf(&p, F, 1, sh, 0);
    static const int ops[12] = {VT_SIN, VT_COS, VT_NEG, VT_ABS, VT_EXP, VT_TANH,
                                VT_SIGMOID, VT_SIN, VT_NEG, VT_COS, VT_ABS, VT_TANH};
    for (int it = 0; it < 3; it++)
        for (int k = 0; k < 12; k++) add_step(&p, VT_NODE_UNARY, ops[k], F, k % 2 ? x : y, k % 2 ? y : x, 0, 0);
    vt_fusion_stats st;
    agree("loop", &p, &st);
    CHECK_MSG(st.loop_flushes >= 1 && st.flushes >= 2, "loop flushes %llu flushes %llu",
              (unsigned long long)st.loop_flushes, (unsigned long long)st.flushes);
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
    vt_node n;
    vt_node_init(&n, VT_NODE_BINARY, VT_ADD, "aten::add.Tensor");
    n.compute = VT_I64;
    n.alpha = vt_scalar_from_int(1);
    vt_node_add_out(&n, &t.t);
    CHECK_OK(vt_node_add_src(&n, &a.t, NULL));
    CHECK_OK(vt_node_add_src(&n, &a.t, NULL));
    CHECK_OK(vt_node_submit(0, &n));
    vt_node_init(&n, VT_NODE_BINARY, VT_DIV_TRUNC, "aten::div.Tensor_mode");
    n.compute = VT_I64;
    vt_node_add_out(&n, &o.t);
    CHECK_OK(vt_node_add_src(&n, &t.t, NULL));
    CHECK_OK(vt_node_add_src(&n, &z.t, NULL));
    CHECK_OK(vt_node_submit(0, &n));
    vt_status s = vt_synchronize(0);
    vt_set_thread_eager_mode(-1);
    CHECK(s == VT_ERR_KERNEL);
    CHECK_MSG(strstr(vt_last_error(), "aten::div.Tensor_mode") && strstr(vt_last_error(), "ZeroDivisionError"),
              "%s", vt_last_error());
    CHECK_OK(vt_synchronize(0));
    ht_free(&a), ht_free(&z), ht_free(&t), ht_free(&o);
}

/* o = (a + a) * a recorded; returns the status of recording it. */
static vt_status record_chain(host_tensor *a, host_tensor *t, host_tensor *o) {
    vt_node n;
    vt_node_init(&n, VT_NODE_BINARY, VT_ADD, "aten::add.Tensor");
    n.compute = VT_F32;
    n.alpha = vt_scalar_from_int(1);
    vt_node_add_out(&n, &t->t);
    vt_status s = vt_node_add_src(&n, &a->t, NULL);
    if (s == VT_OK) s = vt_node_add_src(&n, &a->t, NULL);
    if (s == VT_OK) s = vt_node_submit(0, &n);
    if (s != VT_OK) return s;
    vt_node_init(&n, VT_NODE_BINARY, VT_MUL, "aten::mul.Tensor");
    n.compute = VT_F32;
    n.alpha = vt_scalar_from_int(1);
    vt_node_add_out(&n, &o->t);
    s = vt_node_add_src(&n, &t->t, NULL);
    if (s == VT_OK) s = vt_node_add_src(&n, &a->t, NULL);
    return s == VT_OK ? vt_node_submit(0, &n) : s;
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
        for (int k = 0; k < 4; k++) {
            d[i][k] = in[i][k];
            d[i][k].block = malloc(in[i][k].bytes);
            memcpy(d[i][k].block, in[i][k].block, in[i][k].bytes);
            d[i][k].t.data = d[i][k].block;
            d[i][k].on_device = 0;
            ht_device(&d[i][k]);
        }
        t[i] = ht_new(in[i][0].t.dtype, in[i][0].t.ndim, in[i][0].t.sizes);
        ht_device(&t[i]);
        P[i] = d[i][0].t, M[i] = d[i][1].t, V[i] = d[i][2].t, G[i] = d[i][3].t, T[i] = t[i].t;
        bc2[i] = 0.3 + 0.1 * i, step[i] = -1e-3 * (i + 1);
    }
    vt_set_thread_eager_mode(mode);
    const vt_foreach_args ops[] = {
        {.op = VT_FOREACH_MUL, .n = NPARAM, .out = P, .a = P, .scalar = 1 - 1e-3 * 0.01},
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
        for (int k = 0; k < 3; k++) {
            res[i][k] = in[i][k];
            res[i][k].block = malloc(in[i][k].bytes);
            res[i][k].t.data = res[i][k].block;
            res[i][k].on_device = 0;
            memcpy(res[i][k].block, d[i][k].block, in[i][k].bytes);
        }
        for (int k = 0; k < 4; k++) ht_free(&d[i][k]);
    }
    return s != VT_OK ? s : w;
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
    CHECK_MSG(st.bytes_elided == temp_bytes, "elided %llu of %llu temporary bytes", (unsigned long long)st.bytes_elided,
              (unsigned long long)temp_bytes);
    for (int i = 0; i < NPARAM; i++)
        for (int k = 0; k < 4; k++) ht_free(&in[i][k]);
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
    CHECK_MSG(st.bytes_elided == 37 * 53 * 4, "elided %llu", (unsigned long long)st.bytes_elided);
    prog_free(&p);
}

/* ------------------------------------------------------------ trailing reductions */

#define STATS(st)                                                                                                  \
    (unsigned long long)(st).groups, (unsigned long long)(st).fused_nodes, (unsigned long long)(st).bytes_written, \
        (unsigned long long)(st).bytes_elided

/* r = op(tanh(x * x + x)) with both intermediates dead: one group, the
 * reduction fed by the group's tiles, so only r is written, bit for bit
 * Strict's result. Every one-pass reduction, over the inner dim (a walk
 * along rows) and all dims, and, not fed (lanes across columns read too
 * few values per row), the outer dim and a middle dim, in f32, f64, bf16
 * (stored bf16, computed in f32) and i64. */
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
                /* rows of 1031 and the whole: fed; lanes across columns: not */
                const int fed = vt_reduce_takes_source(ops[oi].op, &p.buf[r].t, &p.buf[t1].t, masks[mi]);
                CHECK_MSG(fed == (masks[mi] == 4 || masks[mi] == 7), "%s: fed %d", what, fed);
                if (fed)
                    CHECK_MSG(st.groups == 1 && st.fused_nodes == nodes && st.bytes_written == rbytes &&
                                  st.bytes_elided == (nodes - 1) * bytes, /* every member writes scratch */
                              "%s: groups %llu fused %llu written %llu elided %llu", what, STATS(st));
                else /* the group writes what the reduction then reads */
                    CHECK_MSG(st.groups == 2 && st.fused_nodes == nodes - 1 &&
                                  st.bytes_written == rbytes + (nodes - 2) * bytes && st.bytes_elided == bytes,
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
    {   /* column sums: lanes read 128 values per row, not fed */
        int64_t sh[2] = {300, 400};
        prog p = {0};
        int x = add_buf(&p, F, 2, sh, 0), t = add_buf(&p, F, 2, sh, 1);
        int r = add_reduced_buf(&p, F, x, 1);
        add_step(&p, VT_NODE_UNARY, VT_EXP, F, t, x, 0, 0);
        add_reduce(&p, VT_REDUCE_SUM, F, r, t, 1, 0);
        agree("columns", &p, &st);
        CHECK_MSG(st.groups == 2 && st.fused_nodes == 0 && st.bytes_written == (300 * 400 + 400) * 4,
                  "groups %llu fused %llu written %llu elided %llu", STATS(st));
        prog_free(&p);
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
    vt_node n;
    vt_node_init(&n, VT_NODE_BINARY, VT_DIV_TRUNC, "aten::div.Tensor_mode");
    n.compute = VT_I64;
    vt_node_add_out(&n, &q.t);
    CHECK_OK(vt_node_add_src(&n, &x.t, NULL));
    CHECK_OK(vt_node_add_src(&n, &z.t, NULL));
    CHECK_OK(vt_node_submit(0, &n));
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
                p.s[p.nstep++] = (step){VT_NODE_SOFTMAX, log, y, {t1, 0, 0}, C, (uint64_t)(int64_t)cases[ci].dim, 0};
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
    p.s[p.nstep++] = (step){VT_NODE_SOFTMAX, 0, y, {t, 0, 0}, VT_F32, 1, 0};
    vt_fusion_stats st;
    agree("softmax over what its group reads", &p, &st);
    CHECK_MSG(st.groups == 2 && st.fused_nodes == 0, "groups %llu fused %llu written %llu elided %llu", STATS(st));
    prog_free(&p);
}
