/* node.h — an op as data. A vt_node names its op (a kind from the table
 * below and the family's op code), its output and input descriptors, its
 * host scalars, parameters and the user's op name; the queue stores and runs
 * nodes, and whatever else needs to read an op (a recorder, a fuser, a
 * trace) reads the same record. Per kind, one row of vt_node_kinds:
 *   check  validates a node once, when it is built (bad arguments fail at
 *          the op, never at a later synchronisation);
 *   run    the kernel, on a checked node;
 *   ref    the scalar reference the tests compare against (may be NULL);
 *   plan   for elementwise kinds, the kernel as a plan over a range of
 *          output elements (run is plan + vt_ew_plan_run; the fuser runs
 *          plans tile by tile), else NULL;
 *   read   how the kernel reads its inputs (access.c's VT_USE_* flags),
 *          write how it writes its outputs, use where an op differs;
 *   fed, run_from
 *          for kinds whose input src[0] may come from a producer (the
 *          DeferAndFuse group that computes it, graph/fuse.c): whether a
 *          vt_source can feed this node, and the kernel reading src[0]
 *          through one; else NULL.
 * A node's payload is the node itself: queue-owned once enqueued, never
 * freed by its kernel, so a node can be run again. */
#ifndef VTPU_GRAPH_NODE_H
#define VTPU_GRAPH_NODE_H

#include <stdalign.h>
#include <stddef.h>

#include "internal.h"

#define VT_NODE_MAX_SRC (1 + VT_MAX_DIMS) /* advanced indexing: its input and an index per dim */
#define VT_NODE_MAX_HOST 7 /* inputs that may be host scalars (the first ones): the store is in every node's header */
#define VT_NODE_MAX_OUT 3
#define VT_NODE_MAX_IPARAMS (2 + VT_MAX_DIMS) /* a roll over every dim (a pooling window takes 12) */

typedef enum vt_node_kind {
    VT_NODE_UNARY = 0, /* op: vt_unary_op; params */
    VT_NODE_BINARY,    /* op: vt_binary_op; alpha, params */
    VT_NODE_TERNARY,   /* op: vt_ternary_op; alpha */
    VT_NODE_WHERE,     /* src: cond, a, b */
    VT_NODE_COPY,      /* out = src[0] converted */
    VT_NODE_FILL,      /* out = alpha converted */
    VT_NODE_REDUCE,    /* op: vt_reduce_op; iparams[0]: dims mask; params[0]: param */
    VT_NODE_REDUCE_ARG, /* op: 1 max, 0 min; out: values, indices (either absent); iparams[0]: dim */
    VT_NODE_SCAN,      /* op: vt_scan_op; iparams[0]: dim */
    VT_NODE_SOFTMAX,   /* op: 1 log_softmax, 0 softmax; iparams[0]: dim */
    VT_NODE_SOFTMAX_BACKWARD, /* op as forward; out: grad_in; src: grad_out, y; iparams[0]: dim */
    VT_NODE_RNG,       /* op: vt_rng_op (kernels/rng/rng.def); iparams[0..1]: seed, offset */
    VT_NODE_POOL,      /* op: vt_pool_op (kernels/pool/pool.def) */
    VT_NODE_NORM,      /* op: vt_norm_op (kernels/norm/norm.def) */
    VT_NODE_LOSS,      /* op: vt_loss_op (kernels/loss/loss.def) */
    VT_NODE_ATTENTION, /* op: 0 forward (out, lse | q, k, v, mask), 1 backward (dq, dk, dv | dout, q, k, v, mask,
                          out, lse); params[0]: scale; iparams[0]: causal, iparams[1]: precision */
    VT_NODE_CONV,      /* op: vt_conv_kind; out: the written tensor; src: the two read (and bias, forward);
                          iparams: vt_node_set_conv_params */
    VT_NODE_MATMUL,    /* out = alpha a @ b + beta bias; src: a, b, bias (optional); params: alpha, beta;
                          iparams[0]: precision */
    VT_NODE_FOREACH,   /* one tensor of a foreach op: op: vt_foreach_op; src: self, other, weight/tensor2 as
                          the op has them; params[0]: its scalar, params[1]: alpha; iparams[0]: which
                          tensor of the op's lists; iparams[1]: the op is in place (vt_foreach_in_place) */
    VT_NODE_SHAPE,     /* op: vt_shape_op (kernels/shape/shape.def) */
    VT_NODE_INDEX,     /* op: vt_index_op (kernels/index/index.def) */
    VT_NODE_RNN,       /* op: vt_rnn_op (kernels/rnn/rnn.def) */
    VT_NODE_KIND_COUNT
} vt_node_kind;

typedef enum vt_rng_op {
#define VT_RNG_OP(e, name) VT_RNG_##e,
#include "kernels/rng/rng.def"
#undef VT_RNG_OP
    VT_RNG_OP_COUNT
} vt_rng_op;
const char *vt_rng_op_name(vt_rng_op op);

typedef enum vt_pool_op {
#define VT_POOL_OP(e, name) VT_POOL_OP_##e,
#include "kernels/pool/pool.def"
#undef VT_POOL_OP
    VT_POOL_OP_COUNT
} vt_pool_op;
const char *vt_pool_op_name(vt_pool_op op);

typedef enum vt_norm_op {
#define VT_NORM_OP(e, name, nout, nsrc) VT_NORM_##e,
#include "kernels/norm/norm.def"
#undef VT_NORM_OP
    VT_NORM_OP_COUNT
} vt_norm_op;
const char *vt_norm_op_name(vt_norm_op op);

typedef enum vt_loss_op {
#define VT_LOSS_OP(e, name, nout, nsrc) VT_LOSS_OP_##e,
#include "kernels/loss/loss.def"
#undef VT_LOSS_OP
    VT_LOSS_OP_COUNT
} vt_loss_op;
const char *vt_loss_op_name(vt_loss_op op);

typedef enum vt_shape_op {
#define VT_SHAPE_OP(e, name) VT_SHAPE_OP_##e,
#include "kernels/shape/shape.def"
#undef VT_SHAPE_OP
    VT_SHAPE_OP_COUNT
} vt_shape_op;
const char *vt_shape_op_name(vt_shape_op op);

typedef enum vt_index_op {
#define VT_INDEX_OP(e, name) VT_INDEX_OP_##e,
#include "kernels/index/index.def"
#undef VT_INDEX_OP
    VT_INDEX_OP_COUNT
} vt_index_op;
const char *vt_index_op_name(vt_index_op op);

typedef enum vt_rnn_op {
#define VT_RNN_OP(e, name, nout, nsrc) VT_RNN_##e,
#include "kernels/rnn/rnn.def"
#undef VT_RNN_OP
    VT_RNN_OP_COUNT
} vt_rnn_op;
const char *vt_rnn_op_name(vt_rnn_op op);

typedef struct vt_node {
    vt_node_kind kind;
    int32_t op;       /* the family's op code */
    vt_dtype compute; /* PyTorch's common dtype, where the kind has one */
    int32_t nout, nsrc;
    uint32_t absent;  /* bit j: out[j] is an optional output not asked for;
                         bit VT_NODE_MAX_OUT + k: src[k] is an optional input not given */
    uint32_t host;    /* bit k: src[k] is a host scalar held in store[k] (k < VT_NODE_MAX_HOST) */
    const char *name; /* the user's op, "aten::add.Tensor" (a static string) */
    vt_scalar alpha;
    double params[VT_EW_MAX_PARAMS];
    int64_t iparams[VT_NODE_MAX_IPARAMS];
    alignas(16) unsigned char store[VT_NODE_MAX_HOST][16]; /* host scalars, in compute dtype */
    vt_tensor out[VT_NODE_MAX_OUT];
    vt_tensor src[VT_NODE_MAX_SRC]; /* last: a node is copied up to src[nsrc] */
} vt_node;

typedef struct vt_node_kind_def {
    const char *name;
    vt_status (*check)(const vt_node *n);
    vt_status (*run)(const vt_node *n);
    vt_status (*ref)(const vt_node *n);
    vt_status (*plan)(const vt_node *n, vt_ew_plan *p); /* operands: out[0], then src[k] */
    unsigned read;  /* VT_USE_* flags of each input */
    unsigned write; /* VT_USE_* flags of each output */
    int (*fed)(const vt_node *n);
    vt_status (*run_from)(const vt_node *n, const vt_source *src);
    /* where an op of the kind uses a tensor otherwise: the flags of tensor
     * t (j for out[j], VT_NODE_MAX_OUT + k for src[k]) given the kind's
     * (NULL: the kind's, always) */
    unsigned (*use)(const vt_node *n, int t, unsigned flags);
    /* fed (run_from), it writes element i of an output shaped like its
     * input only after the source gave it element i, on the same thread
     * (row by row): such an output may reuse memory the feeding group
     * reads at the same elements (graph/fuse.c) */
    int in_step;
} vt_node_kind_def;

extern const vt_node_kind_def vt_node_kinds[VT_NODE_KIND_COUNT];

/* Whether n is short work, about a hundred microseconds at most (16 MB of
 * operands, or 8 M multiply-adds of a product). A short node runs on the
 * calling thread when its queue is idle (VT_ENQ_INLINE_OK): handing it to
 * the queue's worker costs the caller about 5 us on the 2-core hosts here
 * (the caller polling for the end is a third thread on two cores and slows
 * the kernel; then the hand-back), as long as a 1 MB copy takes, while the
 * asynchrony it buys is at most the caller's time to issue its next op. */
int vt_node_is_short(const vt_node *n);
#define VT_SHORT_BYTES ((int64_t)16 << 20)

/* Bytes of t's elements. */
static inline int64_t vt_tensor_bytes(const vt_tensor *t) {
    return vt_tensor_numel(t) * (int64_t)vt_dtype_size(t->dtype);
}
/* Bytes n's outputs hold (an output not asked for: none). */
int64_t vt_node_out_bytes(const vt_node *n);

/* Bytes of n that matter: the header and its nsrc inputs. */
static inline size_t vt_node_size(const vt_node *n) {
    return offsetof(vt_node, src) + (size_t)n->nsrc * sizeof(vt_tensor);
}

/* A new node of kind on the user's op name. */
void vt_node_init(vt_node *n, vt_node_kind kind, int32_t op, const char *name);
/* Output j of n (NULL: an optional output not asked for). */
void vt_node_add_out(vt_node *n, const vt_tensor *t);
/* Input k of n: a tensor (checked against n->out[0] when n is checked), or a
 * host scalar (t NULL) stored in n in n->compute. Adds one input. */
vt_status vt_node_add_src(vt_node *n, const vt_tensor *t, const vt_scalar *host);
/* Input k of n, optional: t NULL adds an absent input. */
void vt_node_add_optional(vt_node *n, const vt_tensor *t);
/* Pooling parameters into iparams (p NULL: none given, which the check
 * refuses where the op needs them). */
void vt_node_set_pool_params(vt_node *n, const vt_pool2d_params *p);
/* Whether out[j] / src[k] is there. */
static inline int vt_node_has_out(const vt_node *n, int j) { return j < n->nout && !(n->absent >> j & 1); }
static inline int vt_node_has_src(const vt_node *n, int k) {
    return k < n->nsrc && !(n->absent >> (VT_NODE_MAX_OUT + k) & 1);
}
/* n's compute dtype is one (node_kinds.c; host scalars are made in it). */
vt_status vt_node_check_compute(const vt_node *n);
/* n has nout outputs and nsrc inputs, as its kind (or op) takes. */
vt_status vt_node_check_counts(const vt_node *n, int nout, int nsrc);
/* n's check (errors are prefixed with n's name). */
vt_status vt_node_check(const vt_node *n);
/* After n's uses are prepared (its own writes counted): a matmul names the
 * contents of its B (iparams[1], iparams[2]: vt_version's gen and writes,
 * 0 0 for none), so the kernel may reuse B's packed panels. */
void vt_node_note_versions(vt_node *n);
/* Check n and run it on dev's queue (the eager mode decides whether this
 * waits). n may be rewritten by staging (access.c). */
vt_status vt_node_submit(int dev, vt_node *n);
/* Build and submit a multi-tensor node: outs[0..nout) as outputs,
 * srcs[0..nsrc) as optional inputs (NULL: absent), in the kernel's own
 * argument order; iparams[0..ni) and params[0..np) into the node's. */
vt_status vt_node_submit_op(int dev, vt_node_kind kind, int32_t op, const char *name, const vt_tensor *const *outs,
                            int nout, const vt_tensor *const *srcs, int nsrc, const int64_t *iparams, int ni,
                            const double *params, int np);
/* A convolution's parameters and precision into n's iparams, and back. */
void vt_node_set_conv_params(vt_node *n, const vt_conv_params *p, vt_precision prec);
vt_precision vt_node_conv_params(const vt_node *n, vt_conv_params *p);
/* A roll's dims and shifts, a range's scalars into n's iparams
 * (kernels/shape/shape_node.c). */
void vt_node_set_roll(vt_node *n, int ndims, const int *dims, const int64_t *shifts);
void vt_node_set_range(vt_node *n, vt_scalar a, vt_scalar b, int64_t vec, int64_t chunk);
/* The node of tensor i of foreach op x (checked by vt_foreach_check). */
void vt_foreach_item_node(vt_node *n, const char *name, const vt_foreach_args *x, int64_t i);
/* The single-tensor foreach call a foreach node stands for. */
vt_foreach_args vt_foreach_node_args(const vt_node *n);
/* An elementwise node's dims, permuted alike in every operand so that its
 * elements are visited in out's memory order (no-op for other kinds). */
void vt_node_memory_order(vt_node *n);
/* The same in two steps, for a fusion group that walks all its members in
 * its first member's order: perm[d] is the dim visited d-th (returns whether
 * that differs from row-major; inputs are broadcast to out's dims), and
 * every operand of an elementwise node of that out shape permuted by it. */
int vt_node_memory_perm(vt_node *n, int *perm);
void vt_node_permute(vt_node *n, const int *perm);
/* Run n here and now, without the queue; ref: the scalar reference. A
 * node's host scalars are found wherever the node lives. */
vt_status vt_node_run(vt_node *n);
vt_status vt_node_run_ref(vt_node *n);
/* The tensors n touches, for access.c (u has room for VT_NODE_MAX_OUT +
 * VT_NODE_MAX_SRC): outputs first, then each tensor input. Returns the count. */
int vt_node_uses(vt_node *n, vt_use *u);
/* The packed form the queue stores: the header and each tensor cut to its
 * dims (vt_node_packed_size bytes, at most VT_NODE_PACKED_MAX; a node whose
 * packed form exceeds a ring slot, VT_MAX_ARGS, is refused at the op).
 * Returns the bytes written. */
#define VT_NODE_PACKED_MAX (offsetof(vt_node, out) + (VT_NODE_MAX_OUT + VT_NODE_MAX_SRC) * (24 + 2 * 8 * VT_MAX_DIMS))
size_t vt_node_packed_size(const vt_node *n);
size_t vt_node_pack(const vt_node *n, unsigned char *buf);
void vt_node_unpack(const unsigned char *buf, vt_node *n);
/* Queue n (checked; its uses prepared in p) on dev: packed into the ring
 * slot, or (small elementwise work, idle queue) run on this thread. */
vt_status vt_node_enqueue(int dev, vt_node *n, vt_prepared *p, vt_enqueue_policy policy);

#endif
