/* ops.c — the queued-op layer: validate on the calling thread (so bad
 * arguments fail at the op), copy the descriptors into a command, name the
 * tensors it reads and writes (access.c checks them) and let the device
 * queue run the synchronous kernel. The elementwise family (unary, binary,
 * ternary, where, copy, fill) is built as nodes (graph/node.h); the other
 * families still queue bespoke commands. Host scalars travel inside the command,
 * so the caller's copy may die as soon as the op returns. Elementwise
 * kernels may write over an input exactly (in place), as TensorIterator
 * allows; any other overlap is refused or resolved by a copy. */
#include <pthread.h>
#include <stdalign.h>
#include <time.h>

#include "graph/node.h"
#include "internal.h"

/* ------------------------------------------------------------ elementwise: nodes */

/* A node's host-scalar inputs and device inputs in order: the builders
 * below only fill nodes; vt_node_submit checks and queues them. */
static vt_status add_operand(vt_node *n, const vt_tensor *t, const vt_scalar *host) {
    return vt_node_add_src(n, host ? NULL : t, host);
}

static void copy_params(double *dst, const double *params) {
    for (int k = 0; k < VT_EW_MAX_PARAMS; k++) dst[k] = params ? params[k] : 0.0;
}

vt_status vt_op_unary_ex(int dev, const char *name, vt_unary_op op, const vt_tensor *out, const vt_tensor *a,
                         vt_dtype compute, const double *params) {
    vt_node n;
    vt_node_init(&n, VT_NODE_UNARY, (int32_t)op, name ? name : "vt_op_unary");
    if (!out || !a) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", n.name, out ? "input" : "out");
    n.compute = compute;
    vt_node_add_out(&n, out);
    copy_params(n.params, params);
    vt_status s = add_operand(&n, a, NULL);
    return s == VT_OK ? vt_node_submit(dev, &n) : s;
}

vt_status vt_op_unary(int dev, const char *name, vt_unary_op op, const vt_tensor *out, const vt_tensor *a,
                      vt_dtype compute) {
    return vt_op_unary_ex(dev, name, op, out, a, compute, NULL);
}

vt_status vt_op_binary_ex(int dev, const char *name, vt_binary_op op, const vt_tensor *out, const vt_tensor *a,
                          const vt_scalar *a_scalar, const vt_tensor *b, const vt_scalar *b_scalar, vt_dtype compute,
                          vt_scalar alpha, const double *params) {
    vt_node n;
    vt_node_init(&n, VT_NODE_BINARY, (int32_t)op, name ? name : "vt_op_binary");
    if (!out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: out is NULL", n.name);
    n.compute = compute;
    n.alpha = alpha;
    vt_node_add_out(&n, out);
    copy_params(n.params, params);
    vt_status s = vt_check_device(dev);
    if (s == VT_OK) s = add_operand(&n, a, a_scalar);
    if (s == VT_OK) s = add_operand(&n, b, b_scalar);
    return s == VT_OK ? vt_node_submit(dev, &n) : s;
}

vt_status vt_op_binary(int dev, const char *name, vt_binary_op op, const vt_tensor *out, const vt_tensor *a,
                       const vt_scalar *a_scalar, const vt_tensor *b, const vt_scalar *b_scalar, vt_dtype compute,
                       vt_scalar alpha) {
    return vt_op_binary_ex(dev, name, op, out, a, a_scalar, b, b_scalar, compute, alpha, NULL);
}

vt_status vt_op_ternary(int dev, const char *name, vt_ternary_op op, const vt_tensor *out, const vt_tensor *a,
                        const vt_scalar *a_scalar, const vt_tensor *b, const vt_scalar *b_scalar, const vt_tensor *cc,
                        const vt_scalar *c_scalar, vt_dtype compute, vt_scalar alpha) {
    vt_node n;
    vt_node_init(&n, VT_NODE_TERNARY, (int32_t)op, name ? name : "vt_op_ternary");
    if (!out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: out is NULL", n.name);
    n.compute = compute;
    n.alpha = alpha;
    vt_node_add_out(&n, out);
    vt_status s = vt_check_device(dev);
    if (s == VT_OK) s = add_operand(&n, a, a_scalar);
    if (s == VT_OK) s = add_operand(&n, b, b_scalar);
    if (s == VT_OK) s = add_operand(&n, cc, c_scalar);
    return s == VT_OK ? vt_node_submit(dev, &n) : s;
}

/* ------------------------------------------------------------ where, copy, fill */

vt_status vt_op_where(int dev, const char *name, const vt_tensor *out, const vt_tensor *cond, const vt_tensor *a,
                      const vt_tensor *b) {
    vt_node n;
    vt_node_init(&n, VT_NODE_WHERE, 0, name ? name : "vt_op_where");
    if (!out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: out is NULL", n.name);
    vt_node_add_out(&n, out);
    vt_status s = add_operand(&n, cond, NULL);
    if (s == VT_OK) s = add_operand(&n, a, NULL);
    if (s == VT_OK) s = add_operand(&n, b, NULL);
    return s == VT_OK ? vt_node_submit(dev, &n) : s;
}

/* A copy node of dst = src, checked (without a device check). */
static vt_status copy_node(vt_node *n, const char *name, const vt_tensor *dst, const vt_tensor *src) {
    vt_node_init(n, VT_NODE_COPY, 0, name);
    if (!dst || !src) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", name, dst ? "src" : "dst");
    vt_node_add_out(n, dst);
    vt_status s = vt_node_add_src(n, src, NULL);
    return s == VT_OK ? vt_node_check(n) : s;
}

/* The device whose memory holds a non-empty view (-1: none, or empty). */
static int device_of(const vt_tensor *t) {
    uintptr_t lo, hi;
    vt_access a;
    int where = -1;
    if (!vt_view_span(t, &lo, &hi) || vt_hbm_resolve(-1, lo, hi, &a, &where) != VT_OK) return -1;
    return where;
}

vt_status vt_op_copy(int dev, const char *name, const vt_tensor *dst, const vt_tensor *src) {
    if (!name) name = "vt_op_copy";
    vt_node n;
    vt_status s = vt_check_device(dev);
    if (s == VT_OK) s = copy_node(&n, name, dst, src);
    if (s != VT_OK) return s;
    int sdev = device_of(src);
    if (sdev < 0 || sdev == dev) return vt_node_submit(dev, &n);
    /* Across devices: the copy runs on dev once every queue of src's device
     * has run what was queued before it (writes of src), and src's device
     * holds a read of src until the copy has run, so its later work on that
     * memory (a write to src, or a reuse of src's block once it is freed),
     * on any of its queues, waits for the copy. */
    vt_use u[VT_NODE_MAX_OUT + VT_NODE_MAX_SRC];
    const int m = vt_node_uses(&n, u);
    u[1].flags |= VT_USE_ANY_DEVICE;
    vt_prepared p, held;
    uint64_t copied = 0;
    if ((s = vt_uses_prepare(dev, name, u, m, &p)) != VT_OK) return s;
    if ((s = vt_queue_block_on_device(dev, sdev)) != VT_OK) {
        vt_prepared_release(dev, &p);
        return s;
    }
    s = vt_node_enqueue(dev, &n, &p, VT_ENQ_AUTO);
    if (s == VT_OK) s = vt_event_record(dev, &copied);
    vt_tensor sc = *src;
    vt_use su = {&sc, VT_USE_READ, 1};
    if (s == VT_OK && (s = vt_uses_prepare(sdev, name, &su, 1, &held)) == VT_OK)
        s = vt_queue_hold_reads(sdev, dev, copied, &held);
    return s;
}

vt_status vt_op_fill(int dev, const char *name, const vt_tensor *out, vt_scalar value) {
    vt_node n;
    vt_node_init(&n, VT_NODE_FILL, 0, name ? name : "vt_op_fill");
    if (!out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: out is NULL", n.name);
    vt_node_add_out(&n, out);
    n.alpha = value;
    return vt_node_submit(dev, &n);
}

/* ------------------------------------------------------------ rng */

/* uniform and normal; the rest of the family is in ops_rng.c */
static vt_status op_rng(int dev, const char *name, vt_rng_op op, const vt_tensor *out, uint64_t seed,
                        uint64_t offset, double p0, double p1) {
    vt_node n;
    vt_node_init(&n, VT_NODE_RNG, op, name);
    if (!out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: out is NULL", name);
    vt_node_add_out(&n, out);
    n.iparams[0] = (int64_t)seed;
    n.iparams[1] = (int64_t)offset;
    n.params[0] = p0;
    n.params[1] = p1;
    return vt_node_submit(dev, &n);
}

vt_status vt_op_rng_uniform(int dev, const char *name, const vt_tensor *out, uint64_t seed, uint64_t offset,
                            double from, double to) {
    return op_rng(dev, name ? name : "vt_op_rng_uniform", VT_RNG_UNIFORM, out, seed, offset, from, to);
}

vt_status vt_op_rng_normal(int dev, const char *name, const vt_tensor *out, uint64_t seed, uint64_t offset,
                           double mean, double std) {
    return op_rng(dev, name ? name : "vt_op_rng_normal", VT_RNG_NORMAL, out, seed, offset, mean, std);
}

/* ------------------------------------------------------------ matmul */

vt_status vt_op_matmul(int dev, const char *name, const vt_tensor *out, const vt_tensor *a, const vt_tensor *b,
                       const vt_tensor *bias, double alpha, double beta, vt_precision prec) {
    vt_node n;
    vt_node_init(&n, VT_NODE_MATMUL, 0, name ? name : "vt_op_matmul");
    vt_node_add_out(&n, out);
    vt_node_add_optional(&n, a);
    vt_node_add_optional(&n, b);
    vt_node_add_optional(&n, bias);
    n.params[0] = alpha;
    n.params[1] = beta;
    n.iparams[0] = prec;
    return vt_node_submit(dev, &n);
}

/* ------------------------------------------------------------ transfers */

/* The host side of a transfer is the caller's memory, which the runtime
 * cannot see; its view must at least be one (no extent that overflows). */
static vt_status check_host_view(const char *name, const vt_tensor *t) {
    uintptr_t lo, hi;
    if (vt_tensor_numel(t) > 0 && !vt_view_span(t, &lo, &hi))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: the host tensor's view overflows the address space", name);
    return VT_OK;
}

vt_status vt_copy_to_device(int dev, const vt_tensor *dst_dev, const vt_tensor *src_host) {
    const char *name = "vt_copy_to_device";
    vt_node n;
    vt_status s = vt_check_device(dev);
    if (s == VT_OK) s = copy_node(&n, name, dst_dev, src_host);
    if (s == VT_OK) s = check_host_view(name, src_host);
    if (s != VT_OK) return s;
    /* Ordered on the queue (the destination may still be read by pending
     * ops), then waited for: the host buffer is the caller's again. */
    vt_use u[1] = {{&n.out[0], VT_USE_WRITE, 0}};
    vt_prepared p;
    if ((s = vt_uses_prepare(dev, name, u, 1, &p)) != VT_OK) return s;
    return vt_node_enqueue(dev, &n, &p, VT_ENQ_WAIT);
}

vt_status vt_copy_to_device_async(int dev, const vt_tensor *dst_dev, const vt_tensor *src_host, uint64_t *ticket_out) {
    const char *name = "vt_copy_to_device_async";
    vt_node n;
    vt_status s = vt_check_device(dev);
    if (s == VT_OK) s = copy_node(&n, name, dst_dev, src_host);
    if (s == VT_OK) s = check_host_view(name, src_host);
    if (s == VT_OK && !ticket_out) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: ticket_out is NULL", name);
    if (s != VT_OK) return s;
    vt_use u[1] = {{&n.out[0], VT_USE_WRITE, 0}};
    vt_prepared p;
    if ((s = vt_uses_prepare(dev, name, u, 1, &p)) != VT_OK) return s;
    if ((s = vt_node_enqueue(dev, &n, &p, VT_ENQ_AUTO)) != VT_OK) return s;
    return vt_event_record(dev, ticket_out);
}

vt_status vt_copy_to_host(int dev, const vt_tensor *dst_host, const vt_tensor *src_dev) {
    const char *name = "vt_copy_to_host";
    vt_node n;
    vt_status s = vt_check_device(dev);
    if (s == VT_OK) s = copy_node(&n, name, dst_host, src_dev);
    if (s == VT_OK) s = check_host_view(name, dst_host);
    /* Waits for the queue, not for errors of unrelated work: only a fault
     * of the memory read here is this read's error. */
    if (s == VT_OK && vt_tensor_numel(src_dev) > 0 && device_of(src_dev) != dev)
        s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: the source is not memory of TPU %d", name, dev);
    if (s == VT_OK) s = vt_wait(dev, -1);
    if (s == VT_OK) s = vt_check_readable(src_dev);
    if (s != VT_OK) return s;
    s = vt_copy(dst_host, src_dev);
    return s == VT_OK ? VT_OK : vt_error_prefix(s, name);
}

/* ------------------------------------------------------------ debug gate */

/* Gate number g is released once opened >= g; an open releases every gate
 * enqueued so far (even one that has not started), later gates need a new
 * open. */
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv;
static pthread_once_t gate_once = PTHREAD_ONCE_INIT;
static uint64_t gates_enqueued, gates_opened;

static void gate_init(void) {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&gate_cv, &ca);
    pthread_condattr_destroy(&ca);
}

typedef struct gate_cmd {
    uint64_t gen;
    int64_t timeout_ms;
} gate_cmd;

static vt_status gate_kernel(void *p) {
    const gate_cmd *g = p;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t ms = g->timeout_ms < 0 || g->timeout_ms > ((int64_t)1 << 30) ? (int64_t)1 << 30 : g->timeout_ms;
    int64_t deadline = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec + ms * 1000000;
    struct timespec ts = {(time_t)(deadline / 1000000000), (long)(deadline % 1000000000)};
    pthread_mutex_lock(&gate_mu);
    while (gates_opened < g->gen) {
        if (pthread_cond_timedwait(&gate_cv, &gate_mu, &ts) != 0) {
            clock_gettime(CLOCK_MONOTONIC, &now);
            if ((int64_t)now.tv_sec * 1000000000 + now.tv_nsec >= deadline) break;
        }
    }
    pthread_mutex_unlock(&gate_mu);
    return VT_OK;
}

vt_status vt_debug_gate_enqueue(int dev, int64_t timeout_ms) {
    vt_status s = vt_check_device(dev);
    if (s != VT_OK) return s;
    pthread_once(&gate_once, gate_init);
    pthread_mutex_lock(&gate_mu);
    gate_cmd g = {++gates_enqueued, timeout_ms};
    pthread_mutex_unlock(&gate_mu);
    /* Always asynchronous: a gate that made its producer wait would only
     * ever end by timeout. */
    return vt_enqueue_ex(dev, "vt_debug_gate", gate_kernel, &g, sizeof g, VT_ENQ_ASYNC, NULL);
}

void vt_debug_gate_open(void) {
    pthread_once(&gate_once, gate_init);
    pthread_mutex_lock(&gate_mu);
    gates_opened = gates_enqueued;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
}
