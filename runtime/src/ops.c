/* ops.c — the queued-op layer: validate on the calling thread (so bad
 * arguments fail at the op), copy the descriptors into a command, name the
 * tensors it reads and writes (access.c checks them) and let the device
 * queue run the synchronous kernel. Host scalars travel inside the command,
 * so the caller's copy may die as soon as the op returns. Elementwise
 * kernels may write over an input exactly (in place), as TensorIterator
 * allows; any other overlap is refused or resolved by a copy. */
#include <pthread.h>
#include <stdalign.h>
#include <time.h>

#include "internal.h"

static vt_status check_tensor(const char *name, const vt_tensor *t, const char *what) {
    if (!t) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", name, what);
    vt_status s = vt_tensor_validate(t, what);
    if (s != VT_OK) return vt_error_prefix(s, name);
    if (!t->data && vt_tensor_numel(t) > 0)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s has no data", name, what);
    return VT_OK;
}

/* An input must broadcast to the output's shape; checked here so the error
 * comes from the op, not from a later synchronisation. */
static vt_status check_input(const char *name, const vt_tensor *t, const char *what, const vt_tensor *out) {
    vt_status s = check_tensor(name, t, what);
    if (s != VT_OK) return s;
    vt_tensor view;
    s = vt_broadcast_to(t, out->ndim, out->sizes, &view);
    return s == VT_OK ? VT_OK : vt_error_prefix(s, name);
}

static vt_status check_dtype(const char *name, vt_dtype dt, const char *what) {
    if ((int)dt < 0 || dt >= VT_DTYPE_COUNT)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: invalid %s dtype %d", name, what, (int)dt);
    return VT_OK;
}

/* ------------------------------------------------------------ unary */

typedef struct unary_cmd {
    vt_unary_op op;
    vt_dtype compute;
    vt_tensor out, a;
    double params[VT_EW_MAX_PARAMS];
} unary_cmd;

static vt_status unary_kernel(void *p) {
    unary_cmd *c = p;
    return vt_unary_ex(c->op, &c->out, &c->a, c->compute, c->params);
}

static void copy_params(double *dst, const double *params) {
    for (int k = 0; k < VT_EW_MAX_PARAMS; k++) dst[k] = params ? params[k] : 0.0;
}

vt_status vt_op_unary_ex(int dev, const char *name, vt_unary_op op, const vt_tensor *out, const vt_tensor *a,
                         vt_dtype compute, const double *params) {
    if (!name) name = "vt_op_unary";
    vt_status s = vt_check_device(dev);
    if (s == VT_OK && ((int)op < 0 || op >= VT_UNARY_OP_COUNT))
        s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: invalid unary op %d", name, (int)op);
    if (s == VT_OK) s = check_dtype(name, compute, "compute");
    if (s == VT_OK) s = check_tensor(name, out, "out");
    if (s == VT_OK) s = check_input(name, a, "input", out);
    if (s != VT_OK) return s;
    unary_cmd c;
    memset(&c, 0, sizeof c);
    c.op = op;
    c.compute = compute;
    c.out = *out;
    c.a = *a;
    copy_params(c.params, params);
    vt_use u[2] = {{&c.out, VT_USE_WRITE, 0}, {&c.a, VT_USE_READ | VT_USE_ALIAS_OK, 0}};
    return vt_enqueue_uses(dev, name, unary_kernel, &c, sizeof c, u, 2);
}

vt_status vt_op_unary(int dev, const char *name, vt_unary_op op, const vt_tensor *out, const vt_tensor *a,
                      vt_dtype compute) {
    return vt_op_unary_ex(dev, name, op, out, a, compute, NULL);
}

/* ------------------------------------------------------------ binary, ternary */

typedef struct binary_cmd {
    vt_binary_op op;
    vt_dtype compute;
    vt_scalar alpha;
    int a_scalar, b_scalar;
    vt_tensor out, a, b;
    double params[VT_EW_MAX_PARAMS];
    alignas(16) unsigned char a_store[16], b_store[16]; /* host scalars, in compute dtype */
} binary_cmd;

static vt_status binary_kernel(void *p) {
    binary_cmd *c = p;
    /* The command was copied into the queue: point the 0-dim scalar tensors
     * at this copy's storage, not the caller's. */
    if (c->a_scalar) c->a.data = c->a_store;
    if (c->b_scalar) c->b.data = c->b_store;
    return vt_binary_ex(c->op, &c->out, &c->a, &c->b, c->compute, c->alpha, c->params);
}

static vt_status scalar_operand(const char *name, const vt_scalar *v, vt_dtype compute, vt_tensor *t,
                                unsigned char *store) {
    memset(t, 0, sizeof *t);
    t->data = store;
    t->dtype = compute;
    t->ndim = 0;
    vt_status s = vt_fill(t, *v);
    return s == VT_OK ? VT_OK : vt_error_prefix(s, name);
}

/* One operand of a queued op: a device tensor (checked against out) or a
 * host scalar stored in the command. */
static vt_status operand(const char *name, const char *what, const vt_tensor *t, const vt_scalar *sc,
                         vt_dtype compute, const vt_tensor *out, vt_tensor *dst, unsigned char *store) {
    if (sc) return scalar_operand(name, sc, compute, dst, store);
    vt_status s = check_input(name, t, what, out);
    if (s == VT_OK) *dst = *t;
    return s;
}

vt_status vt_op_binary_ex(int dev, const char *name, vt_binary_op op, const vt_tensor *out, const vt_tensor *a,
                          const vt_scalar *a_scalar, const vt_tensor *b, const vt_scalar *b_scalar, vt_dtype compute,
                          vt_scalar alpha, const double *params) {
    if (!name) name = "vt_op_binary";
    vt_status s = vt_check_device(dev);
    if (s == VT_OK && ((int)op < 0 || op >= VT_BINARY_OP_COUNT))
        s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: invalid binary op %d", name, (int)op);
    if (s == VT_OK) s = check_dtype(name, compute, "compute");
    if (s == VT_OK) s = check_tensor(name, out, "out");
    if (s != VT_OK) return s;
    binary_cmd c;
    memset(&c, 0, sizeof c);
    c.op = op;
    c.compute = compute;
    c.alpha = alpha;
    c.out = *out;
    c.a_scalar = a_scalar != NULL;
    c.b_scalar = b_scalar != NULL;
    copy_params(c.params, params);
    s = operand(name, "input", a, a_scalar, compute, out, &c.a, c.a_store);
    if (s == VT_OK) s = operand(name, "other", b, b_scalar, compute, out, &c.b, c.b_store);
    if (s != VT_OK) return s;
    vt_use u[3] = {{&c.out, VT_USE_WRITE, 0}};
    int n = 1;
    if (!a_scalar) u[n++] = (vt_use){&c.a, VT_USE_READ | VT_USE_ALIAS_OK, 0};
    if (!b_scalar) u[n++] = (vt_use){&c.b, VT_USE_READ | VT_USE_ALIAS_OK, 0};
    return vt_enqueue_uses(dev, name, binary_kernel, &c, sizeof c, u, n);
}

vt_status vt_op_binary(int dev, const char *name, vt_binary_op op, const vt_tensor *out, const vt_tensor *a,
                       const vt_scalar *a_scalar, const vt_tensor *b, const vt_scalar *b_scalar, vt_dtype compute,
                       vt_scalar alpha) {
    return vt_op_binary_ex(dev, name, op, out, a, a_scalar, b, b_scalar, compute, alpha, NULL);
}

typedef struct ternary_cmd {
    vt_ternary_op op;
    vt_dtype compute;
    vt_scalar alpha;
    int is_scalar[3];
    vt_tensor out, in[3];
    alignas(16) unsigned char store[3][16]; /* host scalars, in compute dtype */
} ternary_cmd;

static vt_status ternary_kernel(void *p) {
    ternary_cmd *c = p;
    for (int k = 0; k < 3; k++)
        if (c->is_scalar[k]) c->in[k].data = c->store[k];
    return vt_ternary(c->op, &c->out, &c->in[0], &c->in[1], &c->in[2], c->compute, c->alpha);
}

vt_status vt_op_ternary(int dev, const char *name, vt_ternary_op op, const vt_tensor *out, const vt_tensor *a,
                        const vt_scalar *a_scalar, const vt_tensor *b, const vt_scalar *b_scalar, const vt_tensor *cc,
                        const vt_scalar *c_scalar, vt_dtype compute, vt_scalar alpha) {
    if (!name) name = "vt_op_ternary";
    vt_status s = vt_check_device(dev);
    if (s == VT_OK && ((int)op < 0 || op >= VT_TERNARY_OP_COUNT))
        s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: invalid ternary op %d", name, (int)op);
    if (s == VT_OK) s = check_dtype(name, compute, "compute");
    if (s == VT_OK) s = check_tensor(name, out, "out");
    if (s != VT_OK) return s;
    ternary_cmd c;
    memset(&c, 0, sizeof c);
    c.op = op;
    c.compute = compute;
    c.alpha = alpha;
    c.out = *out;
    const vt_tensor *ts[3] = {a, b, cc};
    const vt_scalar *ss[3] = {a_scalar, b_scalar, c_scalar};
    static const char *const what[3] = {"input", "tensor1", "tensor2"};
    for (int k = 0; k < 3 && s == VT_OK; k++) {
        c.is_scalar[k] = ss[k] != NULL;
        s = operand(name, what[k], ts[k], ss[k], compute, out, &c.in[k], c.store[k]);
    }
    if (s != VT_OK) return s;
    vt_use u[4] = {{&c.out, VT_USE_WRITE, 0}};
    int n = 1;
    for (int k = 0; k < 3; k++)
        if (!ss[k]) u[n++] = (vt_use){&c.in[k], VT_USE_READ | VT_USE_ALIAS_OK, 0};
    return vt_enqueue_uses(dev, name, ternary_kernel, &c, sizeof c, u, n);
}

/* ------------------------------------------------------------ where, copy, fill */

typedef struct where_cmd {
    vt_tensor out, cond, a, b;
} where_cmd;

static vt_status where_kernel(void *p) {
    where_cmd *c = p;
    return vt_where(&c->out, &c->cond, &c->a, &c->b);
}

vt_status vt_op_where(int dev, const char *name, const vt_tensor *out, const vt_tensor *cond, const vt_tensor *a,
                      const vt_tensor *b) {
    if (!name) name = "vt_op_where";
    vt_status s = vt_check_device(dev);
    if (s == VT_OK) s = check_tensor(name, out, "out");
    if (s == VT_OK) s = check_input(name, cond, "condition", out);
    if (s == VT_OK) s = check_input(name, a, "input", out);
    if (s == VT_OK) s = check_input(name, b, "other", out);
    if (s != VT_OK) return s;
    where_cmd c = {*out, *cond, *a, *b};
    vt_use u[4] = {{&c.out, VT_USE_WRITE, 0},
                   {&c.cond, VT_USE_READ | VT_USE_ALIAS_OK, 0},
                   {&c.a, VT_USE_READ | VT_USE_ALIAS_OK, 0},
                   {&c.b, VT_USE_READ | VT_USE_ALIAS_OK, 0}};
    return vt_enqueue_uses(dev, name, where_kernel, &c, sizeof c, u, 4);
}

typedef struct copy_cmd {
    vt_tensor dst, src;
} copy_cmd;

static vt_status copy_kernel(void *p) {
    copy_cmd *c = p;
    return vt_copy(&c->dst, &c->src);
}

static vt_status check_copy(int dev, const char *name, const vt_tensor *dst, const vt_tensor *src) {
    vt_status s = vt_check_device(dev);
    if (s == VT_OK) s = check_tensor(name, dst, "dst");
    if (s == VT_OK) s = check_input(name, src, "src", dst);
    return s;
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
    vt_status s = check_copy(dev, name, dst, src);
    if (s != VT_OK) return s;
    copy_cmd c = {*dst, *src};
    vt_use u[2] = {{&c.dst, VT_USE_WRITE, 0}, {&c.src, VT_USE_READ | VT_USE_ALIAS_OK, 0}};
    int sdev = device_of(src);
    if (sdev < 0 || sdev == dev) return vt_enqueue_uses(dev, name, copy_kernel, &c, sizeof c, u, 2);
    /* Across devices: the copy runs on dev once src's device has run what
     * was queued before it (writes of src), and src's device waits for the
     * copy before its later work (a write to src, or a reuse of src's block
     * once it is freed) can run. */
    u[1].flags |= VT_USE_ANY_DEVICE;
    vt_prepared p;
    uint64_t before = 0, copied = 0;
    if ((s = vt_uses_prepare(dev, name, u, 2, &p)) != VT_OK) return s;
    if ((s = vt_event_record(sdev, &before)) != VT_OK || (s = vt_event_block(dev, sdev, before)) != VT_OK) {
        vt_prepared_release(dev, &p);
        return s;
    }
    s = vt_enqueue_prepared(dev, name, copy_kernel, &c, sizeof c, &p, VT_ENQ_AUTO);
    if (s == VT_OK && (s = vt_event_record(dev, &copied)) == VT_OK) s = vt_event_block(sdev, dev, copied);
    return s;
}

typedef struct fill_cmd {
    vt_tensor out;
    vt_scalar value;
} fill_cmd;

static vt_status fill_kernel(void *p) {
    fill_cmd *c = p;
    return vt_fill(&c->out, c->value);
}

vt_status vt_op_fill(int dev, const char *name, const vt_tensor *out, vt_scalar value) {
    if (!name) name = "vt_op_fill";
    vt_status s = vt_check_device(dev);
    if (s == VT_OK) s = check_tensor(name, out, "out");
    if (s != VT_OK) return s;
    fill_cmd c = {*out, value};
    vt_use u[1] = {{&c.out, VT_USE_WRITE | VT_USE_SAME_VALUE, 0}};
    return vt_enqueue_uses(dev, name, fill_kernel, &c, sizeof c, u, 1);
}

/* ------------------------------------------------------------ rng */

typedef struct rng_cmd {
    vt_tensor out;
    uint64_t seed, offset;
    double p0, p1;
    int normal;
} rng_cmd;

static vt_status rng_kernel(void *p) {
    rng_cmd *c = p;
    return c->normal ? vt_rng_normal(&c->out, c->seed, c->offset, c->p0, c->p1)
                     : vt_rng_uniform(&c->out, c->seed, c->offset, c->p0, c->p1);
}

static vt_status op_rng(int dev, const char *name, const vt_tensor *out, uint64_t seed, uint64_t offset, double p0,
                        double p1, int normal) {
    vt_status s = vt_check_device(dev);
    if (s == VT_OK) s = check_tensor(name, out, "out");
    if (s != VT_OK) return s;
    rng_cmd c = {*out, seed, offset, p0, p1, normal};
    vt_use u[1] = {{&c.out, VT_USE_WRITE, 0}};
    return vt_enqueue_uses(dev, name, rng_kernel, &c, sizeof c, u, 1);
}

vt_status vt_op_rng_uniform(int dev, const char *name, const vt_tensor *out, uint64_t seed, uint64_t offset,
                            double from, double to) {
    return op_rng(dev, name ? name : "vt_op_rng_uniform", out, seed, offset, from, to, 0);
}

vt_status vt_op_rng_normal(int dev, const char *name, const vt_tensor *out, uint64_t seed, uint64_t offset,
                           double mean, double std) {
    return op_rng(dev, name ? name : "vt_op_rng_normal", out, seed, offset, mean, std, 1);
}

/* ------------------------------------------------------------ matmul */

typedef struct matmul_cmd {
    vt_tensor out, a, b, bias;
    int has_bias;
    double alpha, beta;
    vt_precision prec;
} matmul_cmd;

static vt_status matmul_kernel(void *p) {
    matmul_cmd *c = p;
    return vt_matmul(&c->out, &c->a, &c->b, c->has_bias ? &c->bias : NULL, c->alpha, c->beta, c->prec);
}

vt_status vt_op_matmul(int dev, const char *name, const vt_tensor *out, const vt_tensor *a, const vt_tensor *b,
                       const vt_tensor *bias, double alpha, double beta, vt_precision prec) {
    if (!name) name = "vt_op_matmul";
    vt_status s = vt_check_device(dev);
    if (s == VT_OK && ((unsigned)prec > VT_PRECISION_HIGHEST))
        s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: invalid precision %d", name, (int)prec);
    if (s == VT_OK) s = check_tensor(name, out, "out");
    if (s == VT_OK) s = check_tensor(name, a, "mat1");
    if (s == VT_OK) s = check_tensor(name, b, "mat2");
    if (s == VT_OK && bias) s = check_input(name, bias, "bias", out);
    if (s != VT_OK) return s;
    /* The kernel's own shape and dtype checks, run here so that a mismatch
     * fails at the op, not at the next synchronisation. */
    s = vt_matmul_check(out, a, b, bias, prec);
    if (s != VT_OK) return vt_error_prefix(s, name);
    matmul_cmd c;
    memset(&c, 0, sizeof c);
    c.out = *out;
    c.a = *a;
    c.b = *b;
    c.has_bias = bias != NULL;
    if (bias) c.bias = *bias;
    c.alpha = alpha;
    c.beta = beta;
    c.prec = prec;
    /* The product reads a and b while it writes out (CPU PyTorch does not
     * check this and gets some aliased products wrong): overlapping operands
     * are copied. bias is read elementwise and may be out itself. */
    vt_use u[4] = {{&c.out, VT_USE_WRITE, 0}, {&c.a, VT_USE_READ | VT_USE_STAGE, 0}, {&c.b, VT_USE_READ | VT_USE_STAGE, 0}};
    int n = 3;
    if (bias) u[n++] = (vt_use){&c.bias, VT_USE_READ | VT_USE_ALIAS_OK | VT_USE_STAGE, 0};
    return vt_enqueue_uses(dev, name, matmul_kernel, &c, sizeof c, u, n);
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
    vt_status s = check_copy(dev, name, dst_dev, src_host);
    if (s == VT_OK) s = check_host_view(name, src_host);
    if (s != VT_OK) return s;
    /* Ordered on the queue (the destination may still be read by pending
     * ops), then waited for: the host buffer is the caller's again. */
    copy_cmd c = {*dst_dev, *src_host};
    vt_use u[1] = {{&c.dst, VT_USE_WRITE, 0}};
    vt_prepared p;
    if ((s = vt_uses_prepare(dev, name, u, 1, &p)) != VT_OK) return s;
    return vt_enqueue_prepared(dev, name, copy_kernel, &c, sizeof c, &p, VT_ENQ_WAIT);
}

vt_status vt_copy_to_device_async(int dev, const vt_tensor *dst_dev, const vt_tensor *src_host, uint64_t *ticket_out) {
    const char *name = "vt_copy_to_device_async";
    vt_status s = check_copy(dev, name, dst_dev, src_host);
    if (s == VT_OK) s = check_host_view(name, src_host);
    if (s == VT_OK && !ticket_out) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: ticket_out is NULL", name);
    if (s != VT_OK) return s;
    copy_cmd c = {*dst_dev, *src_host};
    vt_use u[1] = {{&c.dst, VT_USE_WRITE, 0}};
    vt_prepared p;
    if ((s = vt_uses_prepare(dev, name, u, 1, &p)) != VT_OK) return s;
    if ((s = vt_enqueue_prepared(dev, name, copy_kernel, &c, sizeof c, &p, VT_ENQ_AUTO)) != VT_OK) return s;
    return vt_event_record(dev, ticket_out);
}

vt_status vt_copy_to_host(int dev, const vt_tensor *dst_host, const vt_tensor *src_dev) {
    const char *name = "vt_copy_to_host";
    vt_status s = check_copy(dev, name, dst_host, src_dev);
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
