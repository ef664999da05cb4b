/* test_graph_nodes.c — the node harness: every op of the elementwise
 * catalogue (unary.def, binary.def, ternary.def, plus where, copy and fill)
 * in each layout (contiguous, broadcast, transposed, empty, 0-dim, in
 * place) is built as a node and run synchronously, queued in Strict mode,
 * queued in Debug mode and replayed from the queue's copy; all four must
 * agree bit for bit, and with the node's scalar reference within a
 * tolerance that holds on every ISA path (2e-3 relative: gelu's vector erf
 * is Abramowitz-Stegun's, absolute error 1.5e-7; every other op is within a
 * few ulps of the reference). Bad nodes fail when built, before the queue
 * sees them. */
#include "graph/node.h"
#include "test_kernels_util.h"
#include "test_nodes_util.h"

typedef struct cat_row {
    vt_node_kind kind;
    int32_t op;
    const char *name;
} cat_row;

static const cat_row catalogue[] = {
#define VT_UNARY_OP(e, n) {VT_NODE_UNARY, VT_##e, #n},
#include "vtpu/unary.def"
#undef VT_UNARY_OP
#define VT_BINARY_OP(e, n) {VT_NODE_BINARY, VT_##e, #n},
#include "vtpu/binary.def"
#undef VT_BINARY_OP
#define VT_TERNARY_OP(e, n) {VT_NODE_TERNARY, VT_##e, #n},
#include "vtpu/ternary.def"
#undef VT_TERNARY_OP
    {VT_NODE_WHERE, 0, "where"},
    {VT_NODE_COPY, 0, "copy"},
    {VT_NODE_FILL, 0, "fill"},
};
#define N_CATALOGUE (sizeof catalogue / sizeof catalogue[0])

enum { L_CONTIG, L_BROADCAST, L_TRANSPOSED, L_EMPTY, L_SCALAR, L_INPLACE, L_COUNT };
static const char *const layout_names[L_COUNT] = {"contiguous", "broadcast", "transposed", "empty", "0-dim",
                                                  "in place"};


static int bool_out(const cat_row *r) {
    return (r->kind == VT_NODE_UNARY && vt_unary_op_is_bool((vt_unary_op)r->op)) ||
           (r->kind == VT_NODE_BINARY && vt_binary_op_is_bool((vt_binary_op)r->op));
}

/* A device tensor of the layout for input k of a [R, C] output. */
static host_tensor make_input(vt_dtype dt, int layout, int k, int64_t R, int64_t C) {
    host_tensor h;
    int64_t s[2] = {R, C};
    switch (layout) {
    case L_BROADCAST: { /* input 0 a row, the others a column */
        int64_t b[2] = {k == 0 ? 1 : R, k == 0 ? C : 1};
        h = ht_new(dt, 2, b);
        break;
    }
    case L_TRANSPOSED: h = ht_transposed(dt, R, C); break;
    case L_SCALAR: h = ht_new(dt, 0, s); break;
    default: h = ht_new(dt, 2, s); break;
    }
    if (vt_tensor_numel(&h.t) > 0) ht_fill_random(&h, 0, 1); /* no zeros: integer division stays defined */
    ht_device(&h);
    return h;
}

typedef struct run_case {
    const cat_row *row;
    vt_dtype compute;
    int layout;
} run_case;

/* Node for the case, writing out, reading in[] (host scalars none). */
static void build(vt_node *n, const run_case *c, const vt_tensor *out, host_tensor *in) {
    vt_node_init(n, c->row->kind, c->row->op, c->row->name);
    n->compute = c->compute;
    vt_node_add_out(n, out);
    n->alpha = vt_scalar_from_double(c->row->kind == VT_NODE_FILL ? -2.5 : 1.5);
    if (!vt_dtype_is_float(c->compute) && c->row->kind != VT_NODE_FILL) n->alpha = vt_scalar_from_int(2);
    const double params[VT_EW_MAX_PARAMS] = {1.0, 20.0, 1.0, 0.0}; /* softplus beta/threshold, elu alpha/scale, ... */
    memcpy(n->params, params, sizeof params);
    for (int k = 0; k < nsrc_of(c->row->kind); k++) CHECK_OK(vt_node_add_src(n, &in[k].t, NULL));
}

static void restore(host_tensor *in, void *const *saved, int nsrc) {
    for (int k = 0; k < nsrc; k++) memcpy(in[k].block, saved[k], in[k].bytes);
}

/* Runs one case; returns 1 if the op ran (0: the kernel does not take this
 * compute dtype, which the kernel tests pin down). */
static int run_one(const run_case *c) {
    const cat_row *r = c->row;
    const int nsrc = nsrc_of(r->kind);
    const int64_t R = c->layout == L_EMPTY ? 0 : 13, C = 7;
    const int in_place = c->layout == L_INPLACE;
    vt_dtype out_dt = bool_out(r) ? VT_BOOL : c->compute;
    if (r->kind == VT_NODE_COPY) out_dt = c->compute == VT_F32 ? VT_BF16 : VT_F32; /* a converting copy */
    if (in_place && (out_dt != c->compute || nsrc == 0 || r->kind == VT_NODE_WHERE)) return 0; /* out aliases input 0 */

    host_tensor in[3];
    void *saved[3];
    for (int k = 0; k < nsrc; k++) {
        vt_dtype dt = r->kind == VT_NODE_WHERE && k == 0 ? VT_BOOL : c->compute;
        in[k] = make_input(dt, c->layout, k, R, C);
        saved[k] = malloc(in[k].bytes);
        memcpy(saved[k], in[k].block, in[k].bytes);
    }
    int64_t shape[2] = {R, C};
    const int out_ndim = c->layout == L_SCALAR ? 0 : 2;
    host_tensor outs[3], ref = ht_new(out_dt, out_ndim, shape);
    for (int m = 0; m < 3; m++) {
        outs[m] = ht_new(out_dt, out_ndim, shape);
        ht_device(&outs[m]);
    }
    char what[160];
    snprintf(what, sizeof what, "%s %s %s", r->name, vt_dtype_name(c->compute), layout_names[c->layout]);

    /* synchronous: the kernel on the calling thread */
    vt_node n;
    const vt_tensor *o0 = in_place ? &in[0].t : &outs[0].t;
    build(&n, c, o0, in);
    CHECK_MSG(vt_node_check(&n) == VT_OK, "%s: check: %s", what, vt_last_error());
    vt_status sync_status = vt_node_run(&n);
    if (sync_status == VT_ERR_INVALID_ARGUMENT && strstr(vt_last_error(), "not supported")) {
        for (int k = 0; k < nsrc; k++) ht_free(&in[k]), free(saved[k]);
        for (int m = 0; m < 3; m++) ht_free(&outs[m]);
        ht_free(&ref);
        return 0;
    }
    if (in_place) { /* keep the result, give the next runs the original input */
        memcpy(outs[0].block, in[0].block, outs[0].bytes);
        restore(in, saved, nsrc);
    }

    /* the reference, on host copies of the inputs */
    {
        vt_node rn;
        build(&rn, c, &ref.t, in);
        vt_status rs = vt_node_run_ref(&rn);
        if (sync_status == VT_OK) {
            CHECK_MSG(rs == VT_OK, "%s: reference: %s", what, vt_last_error());
            CHECK(ht_compare(what, &outs[0].t, &ref.t, vt_dtype_is_float(out_dt) ? 2e-3 : -1) == 0);
        }
    }

    /* queued in Strict mode (behind a closed gate: the ring's packed copy
     * runs on the worker), then in Debug mode (an idle queue: a small node
     * runs on this thread); each must match the synchronous run bit for bit */
    for (int m = 1; m < 3; m++) {
        vt_set_thread_eager_mode(m == 1 ? VT_EAGER_STRICT : VT_EAGER_DEBUG);
        vt_node q;
        build(&q, c, in_place ? &in[0].t : &outs[m].t, in);
        if (m == 1) CHECK_OK(vt_debug_gate_enqueue(0, 30000));
        vt_status s = vt_node_submit(0, &q);
        memset(&q, 0xAB, sizeof q); /* the queue keeps its own copy */
        if (m == 1) vt_debug_gate_open();
        vt_status w = vt_synchronize(0);
        vt_set_thread_eager_mode(-1);
        if (sync_status != VT_OK) {
            /* the same kernel error, raised at the op (Debug) or at the synchronisation (Strict) */
            CHECK_MSG(m == 1 ? (s == VT_OK && w != VT_OK) : (s != VT_OK && w == VT_OK), "%s: error path, mode %d",
                      what, m);
            continue;
        }
        CHECK_MSG(s == VT_OK && w == VT_OK, "%s: mode %d: %s", what, m, vt_last_error());
        if (in_place) {
            memcpy(outs[m].block, in[0].block, outs[m].bytes);
            restore(in, saved, nsrc);
        }
        CHECK(ht_compare(what, &outs[m].t, &outs[0].t, -1) == 0);
    }
    for (int k = 0; k < nsrc; k++) ht_free(&in[k]), free(saved[k]);
    for (int m = 0; m < 3; m++) ht_free(&outs[m]);
    ht_free(&ref);
    return 1;
}

TEST(graph_nodes_catalogue_sync_queued_debug_and_reference_agree) {
    CHECK_OK(vt_init());
    static const vt_dtype computes[] = {VT_F32, VT_I64};
    int ran = 0, ops_run = 0;
    for (size_t i = 0; i < N_CATALOGUE; i++) {
        int any = 0;
        for (size_t d = 0; d < sizeof computes / sizeof computes[0]; d++)
            for (int l = 0; l < L_COUNT; l++) {
                run_case c = {&catalogue[i], computes[d], l};
                int r = run_one(&c);
                ran += r;
                any |= r;
            }
        ops_run += any;
        CHECK_MSG(any, "%s: ran in no compute dtype", catalogue[i].name);
    }
    CHECK(ops_run == (int)N_CATALOGUE);
    CHECK(ran > (int)N_CATALOGUE * 6);
}

/* The catalogue is the one list: its rows are the enums, in order, and
 * their names are the kernels' names. */
TEST(graph_nodes_catalogue_matches_the_enums) {
    int u = 0, b = 0, t = 0;
    for (size_t i = 0; i < N_CATALOGUE; i++) {
        const cat_row *r = &catalogue[i];
        if (r->kind == VT_NODE_UNARY) {
            CHECK(r->op == u++);
            CHECK(strcmp(vt_unary_op_name((vt_unary_op)r->op), r->name) == 0);
        } else if (r->kind == VT_NODE_BINARY) {
            CHECK(r->op == b++);
            CHECK(strcmp(vt_binary_op_name((vt_binary_op)r->op), r->name) == 0);
        } else if (r->kind == VT_NODE_TERNARY) {
            CHECK(r->op == t++);
            CHECK(strcmp(vt_ternary_op_name((vt_ternary_op)r->op), r->name) == 0);
        }
    }
    CHECK(u == VT_UNARY_OP_COUNT && b == VT_BINARY_OP_COUNT && t == VT_TERNARY_OP_COUNT);
}

/* A bad node fails when it is built, naming the user's op, and the queue
 * never sees it. */
TEST(graph_nodes_bad_arguments_fail_at_build) {
    CHECK_OK(vt_init());
    CHECK_OK(vt_synchronize(0));
    int64_t s3[1] = {3}, s4[1] = {4};
    host_tensor out = ht_new(VT_F32, 1, s3), a = ht_new(VT_F32, 1, s4);
    ht_device(&out);
    ht_device(&a);
    const int64_t pending = vt_queue_pending(0);
    vt_node n;
    vt_node_init(&n, VT_NODE_UNARY, VT_EXP, "aten::exp");
    n.compute = VT_F32;
    vt_node_add_out(&n, &out.t);
    CHECK_OK(vt_node_add_src(&n, &a.t, NULL));
    CHECK_STATUS(vt_node_submit(0, &n), VT_ERR_INVALID_ARGUMENT); /* [4] does not broadcast to [3] */
    CHECK_MSG(strncmp(vt_last_error(), "aten::exp:", 10) == 0, "got '%s'", vt_last_error());
    vt_node_init(&n, VT_NODE_BINARY, VT_BINARY_OP_COUNT, "aten::bad");
    n.compute = VT_F32;
    vt_node_add_out(&n, &out.t);
    CHECK_STATUS(vt_node_submit(0, &n), VT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(vt_last_error(), "invalid binary op") != NULL);
    vt_node_init(&n, VT_NODE_UNARY, VT_NEG, "aten::neg");
    n.compute = (vt_dtype)99;
    vt_node_add_out(&n, &out.t);
    CHECK_OK(vt_node_add_src(&n, &out.t, NULL));
    CHECK_STATUS(vt_node_submit(0, &n), VT_ERR_INVALID_ARGUMENT);
    vt_node_init(&n, VT_NODE_BINARY, VT_ADD, "aten::add");
    n.compute = VT_F32;
    vt_node_add_out(&n, &out.t);
    CHECK_OK(vt_node_add_src(&n, &out.t, NULL)); /* one input where two are needed */
    CHECK_STATUS(vt_node_submit(0, &n), VT_ERR_INVALID_ARGUMENT);
    vt_node_init(&n, VT_NODE_REDUCE_ARG, 1, "aten::max.dim");
    for (int j = 0; j < 3; j++) vt_node_add_out(&n, &out.t); /* one more than a node holds */
    CHECK_OK(vt_node_add_src(&n, &out.t, NULL));
    CHECK_STATUS(vt_node_submit(0, &n), VT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(vt_last_error(), "3 outputs") != NULL);
    /* host scalars only in the first VT_NODE_MAX_HOST inputs (their store is
     * in every node's header); tensors up to VT_NODE_MAX_SRC */
    vt_node_init(&n, VT_NODE_INDEX, VT_INDEX_OP_INDEX, "aten::index");
    n.compute = VT_F32;
    vt_scalar one = vt_scalar_from_double(1.0);
    for (int k = 0; k < VT_NODE_MAX_HOST; k++) CHECK_OK(vt_node_add_src(&n, &out.t, NULL));
    CHECK_STATUS(vt_node_add_src(&n, NULL, &one), VT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(vt_last_error(), "host scalar") != NULL);
    for (int k = VT_NODE_MAX_HOST; k < VT_NODE_MAX_SRC; k++) CHECK_OK(vt_node_add_src(&n, &out.t, NULL));
    CHECK_STATUS(vt_node_add_src(&n, &out.t, NULL), VT_ERR_INVALID_ARGUMENT);
    CHECK(vt_queue_pending(0) == pending);
    ht_free(&out);
    ht_free(&a);
}

/* Host scalars live in the node: a node copied elsewhere, and run twice,
 * reads its own copy (the queue's payload is replayable). */
TEST(graph_nodes_host_scalars_travel_with_the_node) {
    CHECK_OK(vt_init());
    int64_t s4[1] = {4};
    host_tensor out = ht_new(VT_F32, 1, s4), a = ht_new(VT_F32, 1, s4);
    for (int i = 0; i < 4; i++) ((float *)a.block)[i] = (float)i;
    vt_node n;
    vt_node_init(&n, VT_NODE_BINARY, VT_MUL, "aten::mul.Scalar");
    n.compute = VT_F32;
    n.alpha = vt_scalar_from_int(1);
    vt_node_add_out(&n, &out.t);
    vt_scalar three = vt_scalar_from_double(3.0);
    CHECK_OK(vt_node_add_src(&n, &a.t, NULL));
    CHECK_OK(vt_node_add_src(&n, NULL, &three));
    CHECK_OK(vt_node_check(&n));
    vt_node copy;
    memcpy(&copy, &n, vt_node_size(&n));
    /* and the queue's packed form, unpacked over garbage */
    unsigned char packed[VT_NODE_PACKED_MAX];
    const size_t size = vt_node_pack(&n, packed);
    CHECK(size == offsetof(vt_node, out) + 3 * 24 + 2 * 2 * sizeof(int64_t)); /* out, a: 1 dim; the scalar: 0 */
    vt_node unpacked;
    memset(&unpacked, 0xCD, sizeof unpacked);
    vt_node_unpack(packed, &unpacked);
    memset(&n, 0xAB, sizeof n); /* the original is gone */
    for (int rep = 0; rep < 2; rep++) {
        memset(out.block, 0, out.bytes);
        CHECK_OK(vt_node_run(&copy));
        for (int i = 0; i < 4; i++) CHECK(((float *)out.block)[i] == 3.0f * (float)i);
        memset(out.block, 0, out.bytes);
        CHECK_OK(vt_node_run(&unpacked));
        for (int i = 0; i < 4; i++) CHECK(((float *)out.block)[i] == 3.0f * (float)i);
    }
    ht_free(&out);
    ht_free(&a);
}

/* ------------------------------------------------------------ reductions */

/* The node proto (inputs in[], outputs given by shape and dtype) runs
 * synchronously, queued in Strict and in Debug mode, and as its reference;
 * the runs agree bit for bit, and with the reference within the family's
 * tolerance (g_rtol, g_atol: sums in another order, vector exp; integer
 * results exactly). Returns 1 if it ran. */
static double g_rtol = 1e-5, g_atol = 1e-8; /* reference tolerance of the family under test */

static int agree_inputs(const vt_node *proto, const host_tensor *const *in, int nin, int nout, const vt_dtype *out_dt,
                        const int64_t *out_sizes, int out_ndim, const char *what) {
    host_tensor o[4][VT_NODE_MAX_OUT]; /* sync, strict, debug, reference */
    for (int r = 0; r < 4; r++)
        for (int j = 0; j < nout; j++) {
            o[r][j] = ht_new(out_dt[j], out_ndim, out_sizes);
            if (r < 3) ht_device(&o[r][j]);
        }
    vt_node n[4];
    for (int r = 0; r < 4; r++) {
        memcpy(&n[r], proto, offsetof(vt_node, src));
        n[r].nout = 0;
        n[r].absent = 0;
        for (int j = 0; j < nout; j++) vt_node_add_out(&n[r], proto->absent >> j & 1 ? NULL : &o[r][j].t);
        n[r].nsrc = 0;
        for (int k = 0; k < nin; k++) CHECK_OK(vt_node_add_src(&n[r], &in[k]->t, NULL));
    }
    int ran = 0;
    if (vt_node_check(&n[0]) == VT_OK) { /* else the kernel does not take this compute dtype */
        ran = 1;
        CHECK_MSG(vt_node_run(&n[0]) == VT_OK, "%s: %s", what, vt_last_error());
        CHECK_MSG(vt_node_run_ref(&n[3]) == VT_OK, "%s: reference: %s", what, vt_last_error());
        for (int m = 1; m < 3; m++) {
            vt_set_thread_eager_mode(m == 1 ? VT_EAGER_STRICT : VT_EAGER_DEBUG);
            CHECK_MSG(vt_node_submit(0, &n[m]) == VT_OK, "%s: mode %d: %s", what, m, vt_last_error());
            vt_set_thread_eager_mode(-1);
            CHECK_OK(vt_synchronize(0));
        }
        for (int j = 0; j < nout; j++) {
            if (proto->absent >> j & 1) continue;
            CHECK(ht_compare(what, &o[1][j].t, &o[0][j].t, -1) == 0);
            CHECK(ht_compare(what, &o[2][j].t, &o[0][j].t, -1) == 0);
            if (vt_dtype_is_float(out_dt[j])) CHECK(ht_near(what, &o[0][j].t, &o[3][j].t, g_rtol, g_atol) == 0);
            else CHECK(ht_compare(what, &o[0][j].t, &o[3][j].t, -1) == 0);
        }
    }
    for (int r = 0; r < 4; r++)
        for (int j = 0; j < nout; j++) ht_free(&o[r][j]);
    return ran;
}

static int agree_one_input(const vt_node *proto, const host_tensor *in, int nout, const vt_dtype *out_dt,
                           const int64_t *out_sizes, int out_ndim, const char *what) {
    return agree_inputs(proto, &in, 1, nout, out_dt, out_sizes, out_ndim, what);
}

TEST(graph_nodes_reductions_sync_queued_debug_and_reference_agree) {
    CHECK_OK(vt_init());
    static const vt_dtype computes[] = {VT_F32, VT_I64};
    int64_t sizes[2] = {13, 7};
    char what[128];
    int ran = 0;
    for (size_t d = 0; d < 2; d++) {
        host_tensor in = ht_new(computes[d], 2, sizes);
        ht_fill_random(&in, 0, 1);
        ht_device(&in);
        static const char *const reduce_names[] = {
#define VT_REDUCE_OP(e, name) #name,
#include "vtpu/reduce.def"
#undef VT_REDUCE_OP
        };
        for (int op = 0; op < VT_REDUCE_OP_COUNT; op++)
            for (uint64_t mask = 1; mask <= 3; mask++) {
                vt_node n;
                vt_node_init(&n, VT_NODE_REDUCE, op, reduce_names[op]);
                n.compute = computes[d];
                n.iparams[0] = (int64_t)mask;
                n.params[0] = op == VT_REDUCE_NORM ? 2.0 : 1.0; /* p = 2; var/std correction 1 */
                int64_t os[2] = {mask & 1 ? 1 : 13, mask & 2 ? 1 : 7};
                vt_dtype odt = op == VT_REDUCE_ANY || op == VT_REDUCE_ALL ? VT_BOOL : computes[d];
                snprintf(what, sizeof what, "%s %s mask %d", reduce_names[op], vt_dtype_name(computes[d]), (int)mask);
                ran += agree_one_input(&n, &in, 1, &odt, os, 2, what);
            }
        static const char *const scan_names[] = {
#define VT_SCAN_OP(e, name) #name,
#include "vtpu/scan.def"
#undef VT_SCAN_OP
        };
        for (int op = 0; op < VT_SCAN_OP_COUNT; op++)
            for (int dim = 0; dim < 2; dim++) {
                vt_node n;
                vt_node_init(&n, VT_NODE_SCAN, op, scan_names[op]);
                n.compute = computes[d];
                n.iparams[0] = dim;
                snprintf(what, sizeof what, "%s %s dim %d", scan_names[op], vt_dtype_name(computes[d]), dim);
                ran += agree_one_input(&n, &in, 1, &computes[d], sizes, 2, what);
            }
        for (int is_max = 0; is_max < 2; is_max++)
            for (uint32_t absent = 0; absent < 3; absent++) { /* both, indices only, values only */
                vt_node n;
                vt_node_init(&n, VT_NODE_REDUCE_ARG, is_max, is_max ? "max.dim" : "min.dim");
                n.iparams[0] = 1;
                n.absent = absent;
                const vt_dtype odt[2] = {computes[d], VT_I64};
                int64_t os[2] = {13, 1};
                snprintf(what, sizeof what, "%s %s absent %u", n.name, vt_dtype_name(computes[d]), absent);
                ran += agree_one_input(&n, &in, 2, odt, os, 2, what);
            }
        ht_free(&in);
    }
    CHECK(ran >= 2 * (VT_REDUCE_OP_COUNT * 3 + VT_SCAN_OP_COUNT * 2 + 6) - 40); /* a few ops take floats only */
}

/* A reduction's bad dimension fails at the op with PyTorch's wording. */
TEST(graph_nodes_reduce_bad_dim_fails_at_build) {
    CHECK_OK(vt_init());
    int64_t sizes[2] = {3, 4}, os[1] = {3};
    host_tensor in = ht_new(VT_F32, 2, sizes), out = ht_new(VT_F32, 1, os);
    ht_device(&in);
    ht_device(&out);
    const int64_t pending = vt_queue_pending(0);
    CHECK(vt_op_scan(0, "aten::cumsum", VT_SCAN_CUMSUM, &out.t, &in.t, 5, VT_F32) == VT_ERR_INDEX);
    CHECK(strstr(vt_last_error(), "Dimension out of range") != NULL);
    CHECK(vt_op_reduce_arg(0, "aten::max.dim", 1, NULL, NULL, &in.t, 0) == VT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(vt_last_error(), "neither values nor indices") != NULL);
    CHECK(vt_queue_pending(0) == pending);
    ht_free(&in);
    ht_free(&out);
}

TEST(graph_nodes_softmax_sync_queued_debug_and_reference_agree) {
    CHECK_OK(vt_init());
    int64_t sizes[2] = {13, 7};
    host_tensor x = ht_new(VT_F32, 2, sizes), g = ht_new(VT_F32, 2, sizes), y = ht_new(VT_F32, 2, sizes);
    ht_fill_random(&x, 0, 0);
    ht_fill_random(&g, 0, 0);
    ht_device(&x);
    ht_device(&g);
    ht_device(&y);
    const vt_dtype f32 = VT_F32;
    char what[96];
    /* the softmax kernel tests' tolerance (vector exp; the backward's row sum cancels) */
    g_rtol = 2e-5;
    g_atol = 4e-5;
    for (int log = 0; log < 2; log++)
        for (int dim = -2; dim < 2; dim++) {
            vt_node n;
            vt_node_init(&n, VT_NODE_SOFTMAX, log, log ? "log_softmax" : "softmax");
            n.iparams[0] = dim;
            snprintf(what, sizeof what, "%s dim %d", n.name, dim);
            CHECK(agree_one_input(&n, &x, 1, &f32, sizes, 2, what));
            /* the backward from the forward's output */
            CHECK_OK(vt_ref_softmax(&y.t, &x.t, dim, log));
            vt_node_init(&n, VT_NODE_SOFTMAX_BACKWARD, log, log ? "log_softmax_backward" : "softmax_backward");
            n.iparams[0] = dim;
            const host_tensor *in[2] = {&g, &y};
            snprintf(what, sizeof what, "%s dim %d", n.name, dim);
            CHECK(agree_inputs(&n, in, 2, 1, &f32, sizes, 2, what));
        }
    ht_free(&x);
    ht_free(&g);
    ht_free(&y);
    g_rtol = 1e-5;
    g_atol = 1e-8;
}

/* The random-number family as nodes: each op, run synchronously and queued
 * in Strict and in Debug with the same (seed, offset), gives the same bits
 * (the stream is a function of the counters, not of where it runs); a
 * missing required input or a wrong output count fails at build. */
TEST(graph_nodes_rng_sync_and_queued_agree) {
    CHECK_OK(vt_init());
    const int64_t n = 1000;
    for (int op = 0; op < VT_RNG_OP_COUNT; op++) {
        const int is_dropout = op == VT_RNG_DROPOUT, bwd = op == VT_RNG_DROPOUT_BACKWARD;
        const vt_dtype odt = op == VT_RNG_RANDOM || op == VT_RNG_RANDPERM || op == VT_RNG_MULTINOMIAL ? VT_I64 : VT_F32;
        int64_t osz[2] = {op == VT_RNG_MULTINOMIAL ? 4 : n, 3};
        const int ond = op == VT_RNG_MULTINOMIAL ? 2 : 1;
        int64_t psz[2] = {4, 10};
        host_tensor in0 = op == VT_RNG_MULTINOMIAL ? ht_new(VT_F32, 2, psz) : ht_1d(VT_F32, n);
        host_tensor in1 = ht_1d(bwd ? VT_BOOL : VT_F32, n);
        float *p0 = in0.block;
        for (int64_t i = 0; i < vt_tensor_numel(&in0.t); i++) p0[i] = 0.05f + 0.9f * (float)(i % 17) / 17.0f;
        if (bwd)
            for (int64_t i = 0; i < n; i++) ((uint8_t *)in1.block)[i] = (uint8_t)(i % 3 != 0);
        else
            for (int64_t i = 0; i < n; i++) ((float *)in1.block)[i] = 0.5f + (float)(i % 5);
        ht_device(&in0), ht_device(&in1);
        host_tensor outs[3], masks[3];
        for (int m = 0; m < 3; m++) {
            outs[m] = ht_new(odt, ond, osz);
            masks[m] = ht_1d(VT_BOOL, n);
            ht_device(&outs[m]), ht_device(&masks[m]);
            vt_node nd;
            vt_node_init(&nd, VT_NODE_RNG, op, "aten::rng_test");
            vt_node_add_out(&nd, &outs[m].t);
            if (is_dropout) vt_node_add_out(&nd, &masks[m].t);
            if (op == VT_RNG_BERNOULLI || is_dropout || op == VT_RNG_MULTINOMIAL || bwd) vt_node_add_optional(&nd, &in0.t);
            if (bwd) vt_node_add_optional(&nd, &in1.t);
            if (op == VT_RNG_NORMAL_TENSOR) vt_node_add_optional(&nd, NULL), vt_node_add_optional(&nd, &in1.t);
            nd.iparams[0] = 1234;
            nd.iparams[1] = 8;
            nd.iparams[2] = op == VT_RNG_RANDOM ? -5 : 1; /* random's from; multinomial's replacement */
            nd.iparams[3] = 11;
            nd.params[0] = op == VT_RNG_EXPONENTIAL ? 2.0 : 0.25;
            nd.params[1] = 3.0;
            vt_status s;
            if (m == 0) {
                s = vt_node_check(&nd);
                if (s == VT_OK) s = vt_node_run(&nd);
            } else {
                vt_set_thread_eager_mode(m == 1 ? VT_EAGER_STRICT : VT_EAGER_DEBUG);
                s = vt_node_submit(0, &nd);
                if (s == VT_OK) s = vt_synchronize(0);
                vt_set_thread_eager_mode(-1);
            }
            CHECK_MSG(s == VT_OK, "%s mode %d: %s", vt_rng_op_name(op), m, vt_last_error());
        }
        for (int m = 1; m < 3; m++) {
            CHECK_MSG(ht_compare(vt_rng_op_name(op), &outs[m].t, &outs[0].t, -1) == 0, "%s", vt_rng_op_name(op));
            if (is_dropout) CHECK(ht_compare("dropout mask", &masks[m].t, &masks[0].t, -1) == 0);
        }
        for (int m = 0; m < 3; m++) ht_free(&outs[m]), ht_free(&masks[m]);
        ht_free(&in0), ht_free(&in1);
    }
    /* bad nodes fail when built */
    host_tensor o = ht_1d(VT_F32, 8);
    ht_device(&o);
    vt_node nd;
    vt_node_init(&nd, VT_NODE_RNG, VT_RNG_DROPOUT_BACKWARD, "aten::native_dropout_backward");
    vt_node_add_out(&nd, &o.t);
    vt_node_add_optional(&nd, &o.t);
    vt_node_add_optional(&nd, NULL);
    CHECK(vt_node_submit(0, &nd) == VT_ERR_INVALID_ARGUMENT && strstr(vt_last_error(), "aten::native_dropout_backward"));
    vt_node_init(&nd, VT_NODE_RNG, VT_RNG_UNIFORM, "aten::uniform_");
    vt_node_add_out(&nd, &o.t);
    vt_node_add_optional(&nd, &o.t); /* uniform takes no input */
    CHECK(vt_node_submit(0, &nd) == VT_ERR_INVALID_ARGUMENT);
    vt_node_init(&nd, VT_NODE_RNG, VT_RNG_OP_COUNT, "aten::uniform_");
    vt_node_add_out(&nd, &o.t);
    CHECK(vt_node_submit(0, &nd) == VT_ERR_INVALID_ARGUMENT && strstr(vt_last_error(), "invalid rng op"));
    CHECK_OK(vt_synchronize(0));
    ht_free(&o);
}

/* ------------------------------------------------------------ pooling */

/* One pooling node on (a, b, idx): a written (with idx for a forward max
 * op), b and a backward max op's idx read. */
static void pool_node(vt_node *n, vt_pool_op op, const vt_tensor *a, const vt_tensor *b, const vt_tensor *idx,
                      const vt_pool2d_params *p) {
    vt_node_init(n, VT_NODE_POOL, op, vt_pool_op_name(op));
    vt_node_add_out(n, a);
    if (op == VT_POOL_OP_MAX || op == VT_POOL_OP_ADAPTIVE_MAX) vt_node_add_out(n, idx);
    CHECK_OK(vt_node_add_src(n, b, NULL));
    if (op == VT_POOL_OP_MAX_BACKWARD) CHECK_OK(vt_node_add_src(n, idx, NULL));
    if (op == VT_POOL_OP_UPSAMPLE || op == VT_POOL_OP_UPSAMPLE_BACKWARD) {
        n->iparams[0] = VT_UPSAMPLE_BILINEAR;
        n->params[0] = n->params[1] = -1.0; /* the sizes' ratio */
    } else {
        vt_node_set_pool_params(n, p);
    }
}

/* Every pooling op as a node: run synchronously, queued in Strict (behind
 * a closed gate: the ring's packed copy) and in Debug, bit for bit alike;
 * the forward ops also against their scalar reference (1e-5 relative:
 * averages and interpolation sum in another order; max ops exactly). */
TEST(graph_nodes_pooling_sync_queued_debug_and_reference_agree) {
    CHECK_OK(vt_init());
    const vt_pool2d_params p = {{3, 2}, {2, 2}, {1, 1}, {1, 1}, 1, 0, 0};
    int64_t is[4] = {2, 3, 7, 6};
    int64_t ps[4] = {2, 3, vt_pool_output_size(7, 3, 1, 2, 1, 1), vt_pool_output_size(6, 2, 1, 2, 1, 1)};
    int64_t as[4] = {2, 3, 3, 4}, us[4] = {2, 3, 11, 9};
    host_tensor in = ht_new(VT_F32, 4, is);
    ht_fill_random(&in, 0, 1);
    ht_device(&in);
    /* valid argmax indices for the backward of max pooling */
    host_tensor fidx = ht_new(VT_I64, 4, ps), fout = ht_new(VT_F32, 4, ps);
    ht_device(&fidx), ht_device(&fout);
    CHECK_OK(vt_max_pool2d(&fout.t, &fidx.t, &in.t, &p));
    int ops_run = 0;
    for (int op = 0; op < VT_POOL_OP_COUNT; op++) {
        const int bwd = op == VT_POOL_OP_MAX_BACKWARD || op == VT_POOL_OP_AVG_BACKWARD ||
                        op == VT_POOL_OP_ADAPTIVE_AVG_BACKWARD || op == VT_POOL_OP_UPSAMPLE_BACKWARD;
        const int adaptive = op == VT_POOL_OP_ADAPTIVE_AVG || op == VT_POOL_OP_ADAPTIVE_AVG_BACKWARD ||
                             op == VT_POOL_OP_ADAPTIVE_MAX;
        const int up = op == VT_POOL_OP_UPSAMPLE || op == VT_POOL_OP_UPSAMPLE_BACKWARD;
        const int64_t *small = adaptive ? as : up ? us : ps; /* the forward op's output */
        const int with_idx = op == VT_POOL_OP_MAX || op == VT_POOL_OP_ADAPTIVE_MAX;
        /* a: what the node writes; b: what it reads (a backward op reads the forward output's gradient) */
        host_tensor b = bwd ? ht_new(VT_F32, 4, small) : in;
        if (bwd) ht_fill_random(&b, 1, 1), ht_device(&b);
        host_tensor a[4], idx[4];
        for (int r = 0; r < 4; r++) {
            a[r] = ht_new(VT_F32, 4, bwd ? is : small);
            idx[r] = ht_new(VT_I64, 4, small);
            if (r < 3) ht_device(&a[r]), ht_device(&idx[r]);
        }
        const host_tensor *ix = op == VT_POOL_OP_MAX_BACKWARD ? &fidx : NULL;
        const char *what = vt_pool_op_name(op);
        for (int r = 0; r < 3; r++) {
            vt_node n;
            pool_node(&n, op, &a[r].t, &b.t, ix ? &ix->t : with_idx ? &idx[r].t : NULL, &p);
            if (r == 0) {
                CHECK_MSG(vt_node_check(&n) == VT_OK && vt_node_run(&n) == VT_OK, "%s: %s", what, vt_last_error());
                continue;
            }
            vt_set_thread_eager_mode(r == 1 ? VT_EAGER_STRICT : VT_EAGER_DEBUG);
            if (r == 1) CHECK_OK(vt_debug_gate_enqueue(0, 30000));
            vt_status s = vt_node_submit(0, &n);
            memset(&n, 0xAB, sizeof n); /* the queue keeps its own copy */
            if (r == 1) vt_debug_gate_open();
            vt_set_thread_eager_mode(-1);
            CHECK_MSG(s == VT_OK && vt_synchronize(0) == VT_OK, "%s: mode %d: %s", what, r, vt_last_error());
            CHECK(ht_compare(what, &a[r].t, &a[0].t, -1) == 0);
            if (with_idx) CHECK(ht_compare(what, &idx[r].t, &idx[0].t, -1) == 0);
        }
        if (!bwd) {
            vt_node n;
            pool_node(&n, op, &a[3].t, &b.t, with_idx ? &idx[3].t : NULL, &p);
            CHECK_MSG(vt_node_run_ref(&n) == VT_OK, "%s: reference: %s", what, vt_last_error());
            CHECK(ht_near(what, &a[0].t, &a[3].t, 1e-5, 1e-7) == 0);
            if (with_idx) CHECK(ht_compare(what, &idx[0].t, &idx[3].t, -1) == 0);
        }
        for (int r = 0; r < 4; r++) ht_free(&a[r]), ht_free(&idx[r]);
        if (bwd) ht_free(&b);
        ops_run++;
    }
    CHECK(ops_run == VT_POOL_OP_COUNT);
    /* bad arguments fail at the op, named */
    vt_node n;
    host_tensor wrong = ht_new(VT_F32, 4, as);
    ht_device(&wrong);
    pool_node(&n, VT_POOL_OP_MAX, &wrong.t, &in.t, NULL, &p);
    CHECK_STATUS(vt_node_submit(0, &n), VT_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(vt_last_error(), "max_pool2d"), "%s", vt_last_error());
    pool_node(&n, VT_POOL_OP_AVG, &fout.t, &in.t, NULL, NULL);
    CHECK_STATUS(vt_node_submit(0, &n), VT_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(vt_last_error(), "parameters are NULL"), "%s", vt_last_error());
    CHECK_OK(vt_synchronize(0));
    ht_free(&wrong), ht_free(&in), ht_free(&fidx), ht_free(&fout);
}

/* A contiguous descriptor without data: vt_node_is_short reads shapes only. */
static vt_tensor shape_only(vt_dtype dt, int ndim, int64_t d0, int64_t d1) {
    vt_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dt, t.ndim = ndim;
    t.sizes[0] = d0, t.sizes[1] = d1;
    t.strides[0] = ndim == 2 ? d1 : 1, t.strides[1] = 1;
    return t;
}

static int short_binary(int64_t n) {
    vt_node node;
    vt_tensor t = shape_only(VT_F32, 1, n, 0);
    vt_node_init(&node, VT_NODE_BINARY, VT_ADD, "add");
    vt_node_add_out(&node, &t);
    vt_node_add_src(&node, &t, NULL), vt_node_add_src(&node, &t, NULL);
    return vt_node_is_short(&node);
}

static int short_index(int op, int64_t table_rows, int64_t rows) {
    vt_node n;
    vt_tensor table = shape_only(VT_F32, 2, table_rows, 512), out = shape_only(VT_F32, 2, rows, 512);
    vt_tensor idx = shape_only(VT_I64, 1, rows, 0);
    vt_node_init(&n, VT_NODE_INDEX, op, "index");
    if (op == VT_INDEX_OP_SELECT) { /* out = table[idx] */
        vt_node_add_out(&n, &out);
        vt_node_add_src(&n, &table, NULL), vt_node_add_src(&n, &idx, NULL);
    } else { /* index_add: table[idx] += out-shaped rows */
        vt_node_add_out(&n, &table);
        vt_node_add_src(&n, &idx, NULL), vt_node_add_src(&n, &out, NULL);
    }
    return vt_node_is_short(&n);
}

static int short_matmul(vt_dtype dt, int64_t M, int64_t K, int64_t N, vt_precision prec) {
    vt_node n;
    vt_tensor a = shape_only(dt, 2, M, K), b = shape_only(dt, 2, K, N), c = shape_only(dt, 2, M, N);
    vt_node_init(&n, VT_NODE_MATMUL, 0, "mm");
    vt_node_add_out(&n, &c);
    vt_node_add_src(&n, &a, NULL), vt_node_add_src(&n, &b, NULL), vt_node_add_optional(&n, NULL);
    n.iparams[0] = prec;
    return vt_node_is_short(&n);
}

/* Which nodes count as short work (run on the calling thread when the queue
 * is idle): 16 MB of operands, 8 M multiply-adds per bf16 pass of a
 * product; a gather counts what it writes, not its whole input. */
TEST(graph_nodes_short_work_by_bytes_and_products) {
    CHECK(short_binary(1 << 20));      /* 3 x 4 MB */
    CHECK(!short_binary(3 << 19));     /* 3 x 6 MB */
    CHECK(short_binary((16 << 20) / 12));
    CHECK(!short_binary((16 << 20) / 12 + 1));
    CHECK(short_index(VT_INDEX_OP_SELECT, 1 << 15, 1024));  /* 2 MB out of a 64 MB table */
    CHECK(!short_index(VT_INDEX_OP_SELECT, 1 << 15, 4096)); /* 8 MB out, 8 MB read */
    CHECK(!short_index(VT_INDEX_OP_ADD, 1 << 15, 1024));    /* updates the 64 MB table in place */
    CHECK(short_index(VT_INDEX_OP_ADD, 1024, 1024));
    /* an LSTM step's product: 16 x 256 x 1024 = 4 M multiply-adds */
    CHECK(short_matmul(VT_BF16, 16, 256, 1024, VT_PRECISION_DEFAULT));
    CHECK(short_matmul(VT_F32, 16, 512, 1024, VT_PRECISION_DEFAULT)); /* 8 M */
    CHECK(!short_matmul(VT_F32, 16, 512, 1024, VT_PRECISION_HIGH));   /* 3 passes */
    CHECK(!short_matmul(VT_F32, 512, 512, 512, VT_PRECISION_DEFAULT));
    /* convolution is never short, however small */
    vt_node n;
    vt_tensor x = shape_only(VT_F32, 2, 1, 1);
    vt_node_init(&n, VT_NODE_CONV, 0, "conv");
    vt_node_add_out(&n, &x);
    vt_node_add_src(&n, &x, NULL), vt_node_add_src(&n, &x, NULL);
    CHECK(!vt_node_is_short(&n));
    /* an output not asked for moves no bytes: an argmax counts its input and indices */
    for (int64_t cols = 2040; cols <= 2048; cols += 8) { /* 16.73 MB, 16.79 MB of rows */
        vt_tensor rows = shape_only(VT_F32, 2, 2048, cols), arg = shape_only(VT_I64, 1, 2048, 0);
        vt_node_init(&n, VT_NODE_REDUCE_ARG, 1, "argmax");
        vt_node_add_out(&n, NULL), vt_node_add_out(&n, &arg);
        vt_node_add_src(&n, &rows, NULL);
        CHECK(vt_node_is_short(&n) == (cols == 2040));
    }
}
