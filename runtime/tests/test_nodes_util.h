/* test_nodes_util.h — what the node tests share: the tensor inputs each
 * elementwise kind takes, and the harness that runs a multi-tensor node
 * synchronously, queued, in Debug and as its scalar reference. */
#ifndef VTPU_TEST_NODES_UTIL_H
#define VTPU_TEST_NODES_UTIL_H

#include "graph/node.h"
#include "test_kernels_util.h"

static inline int nsrc_of(vt_node_kind k) {
    switch (k) {
    case VT_NODE_UNARY: case VT_NODE_COPY: return 1;
    case VT_NODE_BINARY: return 2;
    case VT_NODE_TERNARY: case VT_NODE_WHERE: return 3;
    default: return 0;
    }
}

typedef struct norm_shape {
    int ndim;
    int64_t s[4];
} norm_shape;

/* An output's dtype and shape; ndim 0 with s[0] = -1: absent. */
typedef struct out_spec {
    vt_dtype dt;
    norm_shape shape;
} out_spec;

/* The node proto (kind, op, iparams, params; no tensors) on the input
 * templates tmpl[] (NULL: absent) and fresh outputs. Each of five runs gets
 * fresh copies of the inputs (some ops update an input in place):
 * synchronously, queued in Strict behind a closed gate (the ring's packed
 * copy), in Debug, recorded in DeferAndFuse and run at the synchronisation,
 * and the scalar reference. The first four agree bit for bit, outputs and
 * inputs as left; the reference within rtol (sums in another order;
 * rtol < 0: the op has no reference). */
#define MULTI_RUNS 5
#define MULTI_REF 4
static inline void multi_case(const char *what, const vt_node *proto, host_tensor *const *tmpl, int nin,
                              const out_spec *outs, int nout, double rtol) {
    host_tensor in[MULTI_RUNS][VT_NODE_MAX_SRC], out[MULTI_RUNS][VT_NODE_MAX_OUT];
    for (int r = 0; r < MULTI_RUNS; r++) {
        vt_node n;
        memcpy(&n, proto, offsetof(vt_node, out));
        n.nout = n.nsrc = 0;
        n.absent = 0;
        for (int j = 0; j < nout; j++) {
            if (outs[j].shape.s[0] < 0) {
                vt_node_add_out(&n, NULL);
                continue;
            }
            out[r][j] = ht_new(outs[j].dt, outs[j].shape.ndim, outs[j].shape.s);
            if (r != MULTI_REF) ht_device(&out[r][j]);
            vt_node_add_out(&n, &out[r][j].t);
        }
        for (int k = 0; k < nin; k++) {
            if (!tmpl[k]) {
                vt_node_add_optional(&n, NULL);
                continue;
            }
            in[r][k] = *tmpl[k];
            in[r][k].block = malloc(tmpl[k]->bytes);
            memcpy(in[r][k].block, tmpl[k]->block, tmpl[k]->bytes);
            in[r][k].t.data = in[r][k].block;
            if (r != MULTI_REF) ht_device(&in[r][k]);
            CHECK_OK(vt_node_add_src(&n, &in[r][k].t, NULL));
        }
        vt_status s;
        if (r == 0) {
            s = vt_node_check(&n);
            if (s == VT_OK) s = vt_node_run(&n);
        } else if (r == MULTI_REF) {
            s = rtol < 0 ? VT_OK : vt_node_run_ref(&n);
        } else {
            static const vt_eager_mode modes[4] = {0, VT_EAGER_STRICT, VT_EAGER_DEBUG, VT_EAGER_DEFER_AND_FUSE};
            vt_fusion_stats before, after;
            vt_get_fusion_stats(&before);
            vt_set_thread_eager_mode(modes[r]);
            if (r == 1) CHECK_OK(vt_debug_gate_enqueue(0, 30000));
            s = vt_node_submit(0, &n);
            memset(&n, 0xAB, sizeof n); /* the queue (or the record) keeps its own copy */
            if (r == 1) vt_debug_gate_open();
            if (s == VT_OK) s = vt_synchronize(0);
            vt_set_thread_eager_mode(-1);
            vt_get_fusion_stats(&after);
            /* recorded, then run by the synchronisation's flush */
            if (r == 3) CHECK_MSG(after.nodes == before.nodes + 1, "%s was not recorded", what);
        }
        CHECK_MSG(s == VT_OK, "%s run %d: %s", what, r, vt_last_error());
    }
    for (int r = 1; r < MULTI_RUNS; r++) {
        if (r == MULTI_REF && rtol < 0) continue;
        for (int j = 0; j < nout; j++) {
            if (outs[j].shape.s[0] < 0) continue;
            if (r != MULTI_REF) CHECK(ht_compare(what, &out[r][j].t, &out[0][j].t, -1) == 0);
            else CHECK(ht_near(what, &out[0][j].t, &out[r][j].t, rtol, rtol * 0.1) == 0);
        }
        for (int k = 0; k < nin; k++) /* inputs as the op left them (running statistics) */
            if (tmpl[k]) {
                if (r != MULTI_REF) CHECK(ht_compare(what, &in[r][k].t, &in[0][k].t, -1) == 0);
                else CHECK(ht_near(what, &in[0][k].t, &in[r][k].t, rtol, rtol * 0.1) == 0);
            }
    }
    for (int r = 0; r < MULTI_RUNS; r++) {
        for (int j = 0; j < nout; j++)
            if (outs[j].shape.s[0] >= 0) ht_free(&out[r][j]);
        for (int k = 0; k < nin; k++)
            if (tmpl[k]) ht_free(&in[r][k]);
    }
}

/* A float template of the shape (NULL when absent): values in [lo, hi). */
static inline host_tensor *uniform(host_tensor *h, const norm_shape *sh, double lo, double hi) {
    if (sh->s[0] < 0) return NULL;
    *h = ht_new(VT_F32, sh->ndim, sh->s);
    for (int64_t e = 0; e < vt_tensor_numel(&h->t); e++)
        ((float *)h->block)[e] = (float)(lo + (hi - lo) * ((double)(next_u64() >> 11) * 0x1p-53));
    return h;
}

#endif
