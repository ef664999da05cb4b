/* node.c — building nodes, their packed form in the queue's ring, the uses
 * they resolve, the order elementwise nodes visit their elements in, and
 * submitting them (queued, or recorded in DeferAndFuse). What each kind
 * checks and runs is node_kinds.c. */
#include "graph/defer.h"
#include "graph/node.h"

/* ------------------------------------------------------------ building */

void vt_node_init(vt_node *n, vt_node_kind kind, int32_t op, const char *name) {
    memset(n, 0, offsetof(vt_node, out)); /* the tensors are filled as they are added */
    n->kind = kind;
    n->op = op;
    n->name = name;
}

void vt_node_add_out(vt_node *n, const vt_tensor *t) {
    const int j = n->nout++;
    if (j >= VT_NODE_MAX_OUT) return; /* counted but not kept: the kind's check refuses the count */
    if (t) {
        vt_tensor_copy(&n->out[j], t);
    } else {
        n->absent |= 1u << j;
        memset(&n->out[j], 0, offsetof(vt_tensor, sizes));
    }
}

vt_status vt_node_add_src(vt_node *n, const vt_tensor *t, const vt_scalar *host) {
    if (n->nsrc >= VT_NODE_MAX_SRC)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: more than %d inputs", n->name, VT_NODE_MAX_SRC);
    if (host && n->nsrc >= VT_NODE_MAX_HOST)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: input %d is a host scalar; only the first %d may be", n->name,
                            n->nsrc, VT_NODE_MAX_HOST);
    const int k = n->nsrc++;
    vt_tensor *d = &n->src[k];
    if (!host) {
        if (!t) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: input %d is NULL", n->name, k);
        vt_tensor_copy(d, t);
        return VT_OK;
    }
    /* A host scalar: a 0-dim tensor in the compute dtype, held in the node. */
    vt_status s = vt_node_check_compute(n);
    if (s != VT_OK) return s;
    memset(d, 0, sizeof *d);
    d->data = n->store[k];
    d->dtype = n->compute;
    n->host |= 1u << k;
    s = vt_fill(d, *host);
    return s == VT_OK ? VT_OK : vt_error_prefix(s, n->name);
}

vt_status vt_node_submit_op(int dev, vt_node_kind kind, int32_t op, const char *name, const vt_tensor *const *outs,
                            int nout, const vt_tensor *const *srcs, int nsrc, const int64_t *iparams, int ni,
                            const double *params, int np) {
    vt_node n;
    vt_node_init(&n, kind, op, name);
    for (int j = 0; j < nout; j++) vt_node_add_out(&n, outs[j]);
    for (int k = 0; k < nsrc; k++) vt_node_add_optional(&n, srcs[k]);
    for (int i = 0; i < ni && i < VT_NODE_MAX_IPARAMS; i++) n.iparams[i] = iparams[i];
    for (int i = 0; i < np && i < VT_EW_MAX_PARAMS; i++) n.params[i] = params[i];
    return vt_node_submit(dev, &n);
}

void vt_node_add_optional(vt_node *n, const vt_tensor *t) {
    if (t) {
        vt_node_add_src(n, t, NULL);
        return;
    }
    const int k = n->nsrc++;
    if (k < VT_NODE_MAX_SRC) {
        memset(&n->src[k], 0, sizeof n->src[k]);
        n->absent |= 1u << (VT_NODE_MAX_OUT + k);
    }
}

vt_status vt_node_check_counts(const vt_node *n, int nout, int nsrc) {
    if (n->nout != nout || n->nsrc != nsrc)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %d outputs and %d inputs given, %s takes %d and %d", n->name,
                            n->nout, n->nsrc, vt_node_kinds[n->kind].name, nout, nsrc);
    return VT_OK;
}

vt_status vt_node_check(const vt_node *n) {
    if ((unsigned)n->kind >= VT_NODE_KIND_COUNT)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: invalid node kind %d", n->name, (int)n->kind);
    return vt_node_kinds[n->kind].check(n);
}

/* Host scalars live in the node: wherever it was copied to, point at them. */
static void bind_store(vt_node *n) {
    for (int k = 0; k < n->nsrc; k++)
        if (n->host >> k & 1) n->src[k].data = n->store[k];
}

vt_status vt_node_run(vt_node *n) {
    bind_store(n);
    return vt_node_kinds[n->kind].run(n);
}

vt_status vt_node_run_ref(vt_node *n) {
    bind_store(n);
    const vt_node_kind_def *d = &vt_node_kinds[n->kind];
    if (!d->ref) return vt_set_error(VT_ERR_UNSUPPORTED, "%s: %s has no scalar reference", n->name, d->name);
    return d->ref(n);
}

/* ------------------------------------------------------------ packed form
 * What the queue stores: the header, then each present tensor cut to its
 * ndim sizes and strides. A node of small tensors packs into a few cache
 * lines instead of the full record (2 KB), and the producer writes and the
 * worker reads those lines once per op. */

typedef struct packed_tensor {
    void *data;
    int64_t offset;
    int32_t dtype, ndim;
} packed_tensor;

_Static_assert(sizeof(packed_tensor) == 24, "VT_NODE_PACKED_MAX counts 24 bytes per tensor header");

static unsigned char *pack_tensor(unsigned char *p, const vt_tensor *t) {
    packed_tensor h = {t->data, t->offset, (int32_t)t->dtype, t->ndim};
    const size_t dims = (size_t)t->ndim * sizeof(int64_t);
    memcpy(p, &h, sizeof h);
    memcpy(p + sizeof h, t->sizes, dims);
    memcpy(p + sizeof h + dims, t->strides, dims);
    return p + sizeof h + 2 * dims;
}

static const unsigned char *unpack_tensor(const unsigned char *p, vt_tensor *t) {
    packed_tensor h;
    memcpy(&h, p, sizeof h);
    t->data = h.data;
    t->offset = h.offset;
    t->dtype = (vt_dtype)h.dtype;
    t->ndim = h.ndim;
    const size_t dims = (size_t)h.ndim * sizeof(int64_t);
    memcpy(t->sizes, p + sizeof h, dims);
    memcpy(t->strides, p + sizeof h + dims, dims);
    return p + sizeof h + 2 * dims;
}

size_t vt_node_packed_size(const vt_node *n) {
    size_t b = offsetof(vt_node, out);
    for (int j = 0; j < n->nout; j++) b += sizeof(packed_tensor) + 2 * (size_t)n->out[j].ndim * sizeof(int64_t);
    for (int k = 0; k < n->nsrc; k++) b += sizeof(packed_tensor) + 2 * (size_t)n->src[k].ndim * sizeof(int64_t);
    return b;
}

size_t vt_node_pack(const vt_node *n, unsigned char *buf) {
    unsigned char *p = buf;
    memcpy(p, n, offsetof(vt_node, out));
    p += offsetof(vt_node, out);
    for (int j = 0; j < n->nout; j++) p = pack_tensor(p, &n->out[j]);
    for (int k = 0; k < n->nsrc; k++) p = pack_tensor(p, &n->src[k]);
    return (size_t)(p - buf);
}

void vt_node_unpack(const unsigned char *buf, vt_node *n) {
    memcpy(n, buf, offsetof(vt_node, out));
    const unsigned char *p = buf + offsetof(vt_node, out);
    for (int j = 0; j < n->nout; j++) p = unpack_tensor(p, &n->out[j]);
    for (int k = 0; k < n->nsrc; k++) p = unpack_tensor(p, &n->src[k]);
}

static vt_status node_run_kernel(void *payload) {
    vt_node *n = payload;
    if (vt_tracing()) {
        char shape[48] = "";
        const uint64_t bytes = (uint64_t)vt_node_out_bytes(n);
        if (n->nout && !(n->absent & 1)) vt_shape_string(&n->out[0], shape, sizeof shape);
        vt_command_describe(n->name, shape, 1, bytes);
    }
    return vt_node_run(n);
}

/* The queue's kernel for a packed node, unpacked into the worker's stack. */
static vt_status node_packed_kernel(void *payload) {
    vt_node n;
    vt_node_unpack(payload, &n);
    return node_run_kernel(&n);
}

static size_t node_pack(const void *n, void *slot) { return vt_node_pack(n, slot); }

static const vt_packed_kernel node_kernel = {node_run_kernel, node_packed_kernel, node_pack};

/* Whether n's packed form fits a ring slot (refused at the op otherwise,
 * recorded or queued alike). */
static vt_status node_fits(const vt_node *n) {
    const size_t size = vt_node_packed_size(n);
    if (size <= VT_MAX_ARGS) return VT_OK;
    return vt_set_error(VT_ERR_UNSUPPORTED, "%s: %zu bytes of descriptors exceed a queued command (%d)", n->name,
                        size, VT_MAX_ARGS);
}

int64_t vt_node_out_bytes(const vt_node *n) {
    int64_t bytes = 0;
    for (int j = 0; j < n->nout; j++)
        if (vt_node_has_out(n, j)) bytes += vt_tensor_bytes(&n->out[j]);
    return bytes;
}

/* (node.h) Products count their multiply-adds per bf16 pass; convolution
 * and attention are never short here; the rest is memory-bound and counts
 * the bytes of its operands (a gather reads about what it writes, not its
 * whole input). */
#define SHORT_MACS ((int64_t)8 << 20)
int vt_node_is_short(const vt_node *n) {
    if (n->kind == VT_NODE_CONV || n->kind == VT_NODE_ATTENTION) return 0;
    if (n->kind == VT_NODE_MATMUL) {
        const vt_tensor *a = &n->src[0];
        const int64_t K = a->ndim ? a->sizes[a->ndim - 1] : 1;
        const int64_t passes = 1 + vt_mxu_nlow((vt_precision)n->iparams[0]);
        return vt_tensor_numel(&n->out[0]) * K * passes <= SHORT_MACS;
    }
    int64_t bytes = vt_node_out_bytes(n);
    const int gathers = n->kind == VT_NODE_INDEX && (n->op == VT_INDEX_OP_SELECT || n->op == VT_INDEX_OP_GATHER ||
                                                     n->op == VT_INDEX_OP_TAKE || n->op == VT_INDEX_OP_INDEX);
    for (int k = 0; k < n->nsrc; k++) {
        if ((n->host >> k & 1) || !vt_node_has_src(n, k)) continue;
        const int64_t b = vt_tensor_bytes(&n->src[k]), out0 = vt_tensor_bytes(&n->out[0]);
        bytes += k == 0 && gathers && b > out0 ? out0 : b;
    }
    return bytes <= VT_SHORT_BYTES;
}

vt_status vt_node_enqueue(int dev, vt_node *n, vt_prepared *p, vt_enqueue_policy policy) {
    vt_status s = node_fits(n);
    if (s != VT_OK) {
        vt_prepared_release(dev, p);
        return s;
    }
    if (vt_node_is_short(n)) policy |= VT_ENQ_INLINE_OK;
    return vt_enqueue_packed(dev, n->name, &node_kernel, n, p, policy);
}

int vt_node_uses(vt_node *n, vt_use *u) {
    const vt_node_kind_def *d = &vt_node_kinds[n->kind];
    int m = 0;
    for (int j = 0; j < n->nout; j++)
        if (!(n->absent >> j & 1)) u[m++] = (vt_use){&n->out[j], d->use ? d->use(n, j, d->write) : d->write, 0};
    for (int k = 0; k < n->nsrc; k++)
        if (!(n->host >> k & 1) && vt_node_has_src(n, k))
            u[m++] = (vt_use){&n->src[k], d->use ? d->use(n, VT_NODE_MAX_OUT + k, d->read) : d->read, 0};
    return m;
}

/* An elementwise node visits its elements in the order of out's memory:
 * the dims of every operand are permuted alike, largest out stride
 * outermost. Each output element is computed from the same input elements
 * as before; only the order of the visits changes, so a permuted output
 * (as TensorIterator lays out the result of a transposed input) is written
 * front to back instead of a run here and a run a page further. Inputs are
 * broadcast to out's dims first; host scalars stay 0-dim. Run after the
 * overlap checks (vt_uses_prepare), which judge the op's own views. */
/* out, then each tensor input broadcast to out's dims, into ops; 0 when n
 * is not an elementwise node of 2 or more dims. */
static int ordered_operands(vt_node *n, vt_tensor **ops) {
    vt_tensor *o = &n->out[0];
    const int nd = o->ndim;
    if (!vt_node_kinds[n->kind].plan || nd < 2 || !n->nout || (n->absent & 1)) return 0;
    int m = 0;
    ops[m++] = o;
    for (int k = 0; k < n->nsrc; k++) {
        if ((n->host >> k & 1) || !vt_node_has_src(n, k)) continue;
        if (vt_broadcast_to(&n->src[k], nd, o->sizes, &n->src[k]) != VT_OK) return 0; /* the check passed: cannot fail */
        ops[m++] = &n->src[k];
    }
    return m;
}

int vt_node_memory_perm(vt_node *n, int *perm) {
    vt_tensor *ops[1 + VT_NODE_MAX_SRC];
    const int m = ordered_operands(n, ops);
    return m && vt_memory_perm(ops, m, perm);
}

void vt_node_permute(vt_node *n, const int *perm) {
    vt_tensor *ops[1 + VT_NODE_MAX_SRC];
    vt_permute_dims(ops, ordered_operands(n, ops), perm);
}

void vt_node_memory_order(vt_node *n) {
    int perm[VT_MAX_DIMS];
    if (vt_node_memory_perm(n, perm)) vt_node_permute(n, perm);
}

void vt_node_note_versions(vt_node *n) {
    if (n->kind != VT_NODE_MATMUL) return;
    const vt_version v = vt_view_version(&n->src[1]);
    n->iparams[1] = (int64_t)v.gen, n->iparams[2] = (int64_t)v.writes;
}

vt_status vt_node_submit(int dev, vt_node *n) {
    vt_status s = vt_check_device(dev);
    if (s == VT_OK) s = vt_node_check(n);
    if (s == VT_OK) s = node_fits(n);
    if (s != VT_OK) return s;
    vt_use u[VT_NODE_MAX_OUT + VT_NODE_MAX_SRC];
    const int m = vt_node_uses(n, u);
    /* the thread's mode, read once: record, or queue (Debug waits) */
    const vt_eager_mode mode = vt_get_eager_mode();
    if (vt_defer_wants(mode)) return vt_defer_record(dev, n, u, m);
    vt_prepared p;
    if ((s = vt_uses_prepare(dev, n->name, u, m, &p)) != VT_OK) return s;
    vt_node_note_versions(n);
    vt_node_memory_order(n);
    return vt_node_enqueue(dev, n, &p, mode == VT_EAGER_DEBUG ? VT_ENQ_WAIT : VT_ENQ_ASYNC);
}
