/* test_defer_util.h — what the DeferAndFuse tests share: a program of
 * nodes over host-initialised buffers, run in Strict and recorded in
 * DeferAndFuse with the same buffers freed before the synchronisation, and
 * the comparison of the two runs' live results, bit for bit. */
#ifndef VTPU_TEST_DEFER_UTIL_H
#define VTPU_TEST_DEFER_UTIL_H

#include "graph/defer.h"
#include "test_kernels_util.h"
#include "test_nodes_util.h"
#define MAXBUF 24
#define MAXSTEP 48

/* One step of a program: node kind and op, output buffer, inputs (buffer
 * index, or -1 for the host scalar 1.5 / 2). */
typedef struct step {
    vt_node_kind kind;
    int32_t op;
    int out;
    int src[3];
    vt_dtype compute;
    uint64_t mask; /* a reduction's dims; a softmax's dim; a norm's normalised dims */
    double param;  /* a reduction's parameter; a norm's eps */
    int more[2];   /* a norm's other outputs (mean, rstd; RMS: rstd): 1 + buffer, or 0: absent */
} step;

typedef struct prog {
    int nbuf, nstep;
    host_tensor buf[MAXBUF];       /* shapes and initial contents */
    unsigned char dead[MAXBUF];    /* freed before the synchronisation */
    int alias[MAXBUF];             /* 1 + the buffer whose block this view reads, or 0 */
    step s[MAXSTEP];
} prog;


/* A host (malloc'd) copy of tensor h, which may be on the device (HBM is
 * host memory), and a device copy of it. */
static inline host_tensor ht_copy_to_host(const host_tensor *h) {
    host_tensor c = *h;
    c.block = malloc(h->bytes);
    memcpy(c.block, h->block, h->bytes);
    c.t.data = c.block;
    c.on_device = 0;
    return c;
}

static inline host_tensor ht_copy_to_device(const host_tensor *h) {
    host_tensor d = ht_copy_to_host(h);
    ht_device(&d);
    return d;
}

static inline void build_node(vt_node *n, const step *st, host_tensor *b) {
    vt_node_init(n, st->kind, st->op, "aten::test_op");
    n->compute = st->compute;
    n->alpha = vt_dtype_is_float(st->compute) ? vt_scalar_from_double(st->kind == VT_NODE_FILL ? -2.5 : 0.75)
                                              : vt_scalar_from_int(2);
    const double params[VT_EW_MAX_PARAMS] = {1.0, 20.0, 1.0, 0.0};
    memcpy(n->params, params, sizeof params);
    vt_node_add_out(n, &b[st->out].t);
    if (st->kind == VT_NODE_NORM) { /* src: in, weight, bias (RMS: in, weight); -1: absent */
        n->iparams[0] = (int64_t)st->mask;
        n->params[0] = st->param;
        for (int j = 0; j < (st->op == VT_NORM_RMS ? 1 : 2); j++)
            vt_node_add_out(n, st->more[j] ? &b[st->more[j] - 1].t : NULL);
        for (int k = 0; k < (st->op == VT_NORM_RMS ? 2 : 3); k++)
            vt_node_add_optional(n, st->src[k] >= 0 ? &b[st->src[k]].t : NULL);
        return;
    }
    if (st->kind == VT_NODE_MATMUL) { /* out = src[0] @ src[1], no bias, DEFAULT precision */
        n->params[0] = 1.0, n->params[1] = 0.0;
        n->iparams[0] = VT_PRECISION_DEFAULT;
        CHECK_OK(vt_node_add_src(n, &b[st->src[0]].t, NULL));
        CHECK_OK(vt_node_add_src(n, &b[st->src[1]].t, NULL));
        vt_node_add_optional(n, NULL);
        return;
    }
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
static inline vt_status run_prog(const prog *p, vt_eager_mode mode, host_tensor *res) {
    host_tensor b[MAXBUF];
    for (int i = 0; i < p->nbuf; i++) b[i] = p->alias[i] ? p->buf[i] : ht_copy_to_device(&p->buf[i]);
    for (int i = 0; i < p->nbuf; i++)
        if (p->alias[i]) b[i].t.data = b[p->alias[i] - 1].block;
    vt_set_thread_eager_mode(mode);
    vt_status s = VT_OK;
    for (int i = 0; i < p->nstep && s == VT_OK; i++) {
        const step *st = &p->s[i];
        if (st->kind == VT_NODE_SHAPE && st->op == VT_SHAPE_OP_CAT) { /* add_cat */
            const vt_tensor ins[2] = {b[st->src[0]].t, b[st->src[1]].t};
            s = vt_op_cat(0, "aten::cat", &b[st->out].t, 2, ins, (int)st->mask);
        } else {
            vt_node n;
            build_node(&n, st, b);
            s = vt_node_submit(0, &n);
        }
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

static inline void free_results(const prog *p, host_tensor *res) {
    for (int i = 0; i < p->nbuf; i++)
        if (!p->dead[i] && !p->alias[i]) free(res[i].block);
}

/* Strict and DeferAndFuse agree bit for bit; the stats of the DeferAndFuse run out. */
static inline int agree(const char *what, const prog *p, vt_fusion_stats *st) {
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

static inline void prog_free(prog *p) {
    for (int i = 0; i < p->nbuf; i++) free(p->buf[i].block);
}

static inline int add_buf(prog *p, vt_dtype dt, int ndim, const int64_t *sizes, int dead) {
    if (p->nbuf == MAXBUF) {
        fprintf(stderr, "test program: more than %d buffers\n", MAXBUF);
        abort();
    }
    p->buf[p->nbuf] = ht_new(dt, ndim, sizes);
    if (vt_tensor_numel(&p->buf[p->nbuf].t) > 0) ht_fill_random(&p->buf[p->nbuf], 0, 1);
    p->dead[p->nbuf] = (unsigned char)dead;
    return p->nbuf++;
}

static inline void add_step(prog *p, vt_node_kind kind, int32_t op, vt_dtype compute, int out, int s0, int s1, int s2) {
    if (p->nstep == MAXSTEP) {
        fprintf(stderr, "test program: more than %d steps\n", MAXSTEP);
        abort();
    }
    p->s[p->nstep++] = (step){kind, op, out, {s0, s1, s2}, compute, 0, 0.0, {0, 0}};
}

/* out = cat((a, b), dim), through vt_op_cat. */
static inline void add_cat(prog *p, int out, int a, int b, int dim) {
    if (p->nstep == MAXSTEP) {
        fprintf(stderr, "test program: more than %d steps\n", MAXSTEP);
        abort();
    }
    p->s[p->nstep++] = (step){VT_NODE_SHAPE, VT_SHAPE_OP_CAT, out, {a, b, 0}, VT_F32, (uint64_t)dim, 0.0, {0, 0}};
}

/* out = op(in) over the dims in mask; out's shape is in's with those dims 1. */
static inline void add_reduce(prog *p, vt_reduce_op op, vt_dtype compute, int out, int in, uint64_t mask, double param) {
    if (p->nstep == MAXSTEP) {
        fprintf(stderr, "test program: more than %d steps\n", MAXSTEP);
        abort();
    }
    p->s[p->nstep++] = (step){VT_NODE_REDUCE, (int32_t)op, out, {in, 0, 0}, compute, mask, param, {0, 0}};
}

/* A buffer for the reduction of buffer `in` over mask. */
static inline int add_reduced_buf(prog *p, vt_dtype dt, int in, uint64_t mask) {
    int64_t sh[VT_MAX_DIMS];
    const vt_tensor *t = &p->buf[in].t;
    for (int d = 0; d < t->ndim; d++) sh[d] = mask >> d & 1 ? 1 : t->sizes[d];
    return add_buf(p, dt, t->ndim, sh, 0);
}

/* out = a op b (alpha 1) as one node on device 0, submitted as the binding
 * submits it: recorded or run, by the thread's eager mode. */
static inline vt_status submit_binary(vt_binary_op op, const char *name, vt_dtype compute, const vt_tensor *out,
                                      const vt_tensor *a, const vt_tensor *b) {
    vt_node n;
    vt_node_init(&n, VT_NODE_BINARY, op, name);
    n.compute = compute;
    n.alpha = vt_scalar_from_int(1);
    vt_node_add_out(&n, out);
    vt_status s = vt_node_add_src(&n, a, NULL);
    if (s == VT_OK) s = vt_node_add_src(&n, b, NULL);
    return s == VT_OK ? vt_node_submit(0, &n) : s;
}

/* o = (a + a) * a recorded; returns the status of recording it. */
static inline vt_status record_chain(host_tensor *a, host_tensor *t, host_tensor *o) {
    vt_status s = submit_binary(VT_ADD, "aten::add.Tensor", VT_F32, &t->t, &a->t, &a->t);
    return s == VT_OK ? submit_binary(VT_MUL, "aten::mul.Tensor", VT_F32, &o->t, &t->t, &a->t) : s;
}

#define STATS(st)                                                                                                  \
    (unsigned long long)(st).groups, (unsigned long long)(st).fused_nodes, (unsigned long long)(st).bytes_written, \
        (unsigned long long)(st).bytes_elided

#endif
