/* test_runtime_queue.c — the device queue: order, asynchrony (observed with
 * the debug gate, never with timing), latched errors, Debug mode, events,
 * timeouts and concurrent producers. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "internal.h"
#include "test.h"
#include "test_kernels_util.h"

#define GATE_MS 30000 /* gates are always opened by the test; this only bounds a broken run */

typedef struct seq_args {
    atomic_int *counter;
    int expect;
    atomic_int *violations;
} seq_args;

/* Checks that commands run in enqueue order. */
static vt_status seq_kernel(void *p) {
    seq_args *a = p;
    if (atomic_load(a->counter) != a->expect) atomic_fetch_add(a->violations, 1);
    atomic_fetch_add(a->counter, 1);
    return VT_OK;
}

static vt_status flag_kernel(void *p) {
    atomic_store(*(atomic_int **)p, 1);
    return VT_OK;
}

static vt_status fail_kernel(void *p) {
    return vt_set_error(VT_ERR_KERNEL, "ZeroDivisionError");
}

static vt_status bad_arg_kernel(void *p) {
    return vt_set_error(VT_ERR_INVALID_ARGUMENT, "index 7 is out of bounds");
}

static void strict_mode(void) {
    CHECK_OK(vt_init());
    vt_set_thread_eager_mode(VT_EAGER_STRICT);
}

TEST(runtime_queue_order_10000) {
    strict_mode();
    static atomic_int counter, violations;
    atomic_store(&counter, 0);
    atomic_store(&violations, 0);
    for (int i = 0; i < 10000; i++) {
        seq_args a = {&counter, i, &violations};
        CHECK_OK(vt_enqueue(0, "seq", seq_kernel, &a, sizeof a));
    }
    CHECK_OK(vt_synchronize(0));
    CHECK(atomic_load(&counter) == 10000);
    CHECK(atomic_load(&violations) == 0);
    CHECK(vt_queue_pending(0) == 0);
    vt_set_thread_eager_mode(-1);
}

TEST(runtime_queue_async_with_gate) {
    strict_mode();
    static atomic_int flag;
    atomic_store(&flag, 0);
    atomic_int *fp = &flag;
    CHECK_OK(vt_debug_gate_enqueue(0, GATE_MS));
    CHECK_OK(vt_enqueue(0, "flag", flag_kernel, &fp, sizeof fp));
    /* Returned at enqueue: the kernel is behind the closed gate. */
    CHECK(atomic_load(&flag) == 0);
    CHECK(vt_queue_pending(0) >= 1);
    uint64_t t;
    CHECK_OK(vt_event_record(0, &t));
    CHECK(!vt_event_query(0, t));
    CHECK_STATUS(vt_synchronize_timeout(0, 0), VT_ERR_TIMEOUT);
    CHECK(strstr(vt_last_error(), "timed out"));
    CHECK_STATUS(vt_synchronize_timeout(0, 5), VT_ERR_TIMEOUT);
    CHECK(atomic_load(&flag) == 0);
    vt_debug_gate_open();
    CHECK_OK(vt_synchronize(0));
    CHECK(atomic_load(&flag) == 1);
    CHECK(vt_event_query(0, t));
    CHECK(vt_queue_pending(0) == 0);
    vt_set_thread_eager_mode(-1);
}

TEST(runtime_queue_gate_opened_before_it_runs) {
    strict_mode();
    /* The second gate has not started when open() is called: it must still
     * pass. The next gate is closed again. */
    CHECK_OK(vt_debug_gate_enqueue(0, GATE_MS));
    CHECK_OK(vt_debug_gate_enqueue(0, GATE_MS));
    vt_debug_gate_open();
    CHECK_OK(vt_synchronize(0));
    CHECK_OK(vt_debug_gate_enqueue(0, GATE_MS));
    CHECK_STATUS(vt_synchronize_timeout(0, 1), VT_ERR_TIMEOUT);
    vt_debug_gate_open();
    CHECK_OK(vt_synchronize(0));
    /* A gate that nobody opens ends at its timeout. */
    CHECK_OK(vt_debug_gate_enqueue(0, 1));
    CHECK_OK(vt_synchronize(0));
    vt_set_thread_eager_mode(-1);
}

TEST(runtime_queue_latched_error) {
    strict_mode();
    static atomic_int flag;
    atomic_store(&flag, 0);
    atomic_int *fp = &flag;
    CHECK_OK(vt_enqueue(0, "aten::div", fail_kernel, NULL, 0));        /* async: no error yet */
    CHECK_OK(vt_enqueue(0, "aten::index", bad_arg_kernel, NULL, 0));  /* second error: kept too */
    CHECK_OK(vt_enqueue(0, "flag", flag_kernel, &fp, sizeof fp));     /* later independent ops still run */
    CHECK_STATUS(vt_synchronize(0), VT_ERR_KERNEL);                   /* the first error's status */
    CHECK_MSG(strncmp(vt_last_error(), "aten::div: ZeroDivisionError\n(and 1 more error on TPU 0", 55) == 0 &&
                  strstr(vt_last_error(), "aten::index: index 7 is out of bounds)"),
              "got '%s'", vt_last_error());
    CHECK(atomic_load(&flag) == 1);
    CHECK_OK(vt_synchronize(0)); /* cleared */
    CHECK_OK(vt_enqueue(0, "aten::index", bad_arg_kernel, NULL, 0));
    CHECK_STATUS(vt_synchronize(0), VT_ERR_INVALID_ARGUMENT); /* the op's own status */
    CHECK(strcmp(vt_last_error(), "aten::index: index 7 is out of bounds") == 0);
    /* A timed-out synchronize clears nothing. */
    CHECK_OK(vt_debug_gate_enqueue(0, GATE_MS));
    CHECK_OK(vt_enqueue(0, "aten::div", fail_kernel, NULL, 0));
    CHECK_STATUS(vt_synchronize_timeout(0, 0), VT_ERR_TIMEOUT);
    vt_debug_gate_open();
    CHECK_STATUS(vt_synchronize_timeout(0, -1), VT_ERR_KERNEL);
    CHECK(strstr(vt_last_error(), "aten::div: ZeroDivisionError"));
    CHECK_OK(vt_synchronize(0));
    vt_set_thread_eager_mode(-1);
}

static _Thread_local int host_mode = -1; /* a host's per-thread context */
static int host_mode_source(void) { return host_mode; }

/* The eager mode comes from the thread override, else the host's source,
 * else the process default; an answer out of range counts as none. */
TEST(runtime_queue_eager_mode_source) {
    CHECK_OK(vt_init());
    vt_eager_mode def = vt_get_eager_mode();
    vt_set_eager_mode_source(host_mode_source);
    CHECK(vt_get_eager_mode() == def);
    host_mode = VT_EAGER_DEBUG;
    CHECK(vt_get_eager_mode() == VT_EAGER_DEBUG);
    CHECK_STATUS(vt_enqueue(0, "aten::div", fail_kernel, NULL, 0), VT_ERR_KERNEL); /* raised at the op */
    CHECK_OK(vt_synchronize(0));
    vt_set_thread_eager_mode(VT_EAGER_STRICT);
    CHECK(vt_get_eager_mode() == VT_EAGER_STRICT);
    vt_set_thread_eager_mode(-1);
    host_mode = 99;
    CHECK(vt_get_eager_mode() == def);
    host_mode = -1;
    vt_set_eager_mode_source(NULL);
}

TEST(runtime_queue_debug_mode) {
    CHECK_OK(vt_init());
    vt_eager_mode def = vt_get_eager_mode();
    vt_set_thread_eager_mode(VT_EAGER_DEBUG);
    CHECK(vt_get_eager_mode() == VT_EAGER_DEBUG);
    CHECK_STATUS(vt_enqueue(0, "aten::div", fail_kernel, NULL, 0), VT_ERR_KERNEL);
    CHECK_MSG(strcmp(vt_last_error(), "aten::div: ZeroDivisionError") == 0, "got '%s'", vt_last_error());
    CHECK_OK(vt_synchronize(0)); /* reported at the op, not latched */
    static atomic_int flag;
    atomic_store(&flag, 0);
    atomic_int *fp = &flag;
    CHECK_OK(vt_enqueue(0, "flag", flag_kernel, &fp, sizeof fp));
    CHECK(atomic_load(&flag) == 1); /* completed before enqueue returned */
    vt_set_thread_eager_mode(-1);
    CHECK(vt_get_eager_mode() == def);

    /* The process default, and a thread override winning over it. */
    vt_set_default_eager_mode(VT_EAGER_DEBUG);
    CHECK(vt_get_eager_mode() == VT_EAGER_DEBUG);
    vt_set_thread_eager_mode(VT_EAGER_STRICT);
    CHECK(vt_get_eager_mode() == VT_EAGER_STRICT);
    vt_set_thread_eager_mode(-1);
    vt_set_default_eager_mode(def);
    CHECK(vt_get_eager_mode() == def);
}

TEST(runtime_queue_events) {
    strict_mode();
    CHECK_OK(vt_synchronize(0));
    uint64_t t0, t1;
    CHECK_OK(vt_event_record(0, &t0));
    CHECK(vt_event_query(0, t0));
    CHECK_OK(vt_event_wait(0, t0, 0));
    CHECK_OK(vt_debug_gate_enqueue(0, GATE_MS));
    CHECK_OK(vt_event_record(0, &t1));
    CHECK(t1 > t0);
    CHECK(!vt_event_query(0, t1));
    CHECK_STATUS(vt_event_wait(0, t1, 0), VT_ERR_TIMEOUT);
    CHECK_STATUS(vt_event_wait(0, t1, 3), VT_ERR_TIMEOUT);
    CHECK_STATUS(vt_event_wait(0, t1 + 1000, 0), VT_ERR_INVALID_ARGUMENT); /* never recorded */
    CHECK_OK(vt_event_block(0, 0, t1)); /* same queue: already ordered */
    CHECK_STATUS(vt_event_block(0, vt_device_count(), t1), VT_ERR_INDEX);
    vt_debug_gate_open();
    CHECK_OK(vt_event_wait(0, t1, -1));
    CHECK_OK(vt_event_wait(0, t1, INT64_MAX)); /* huge bounds do not overflow */
    CHECK(vt_event_query(0, t1));
    CHECK_STATUS(vt_event_record(0, NULL), VT_ERR_INVALID_ARGUMENT);
    CHECK(vt_queue_pending(vt_device_count()) < 0);
    CHECK(!vt_event_query(-1, 0));
    vt_set_thread_eager_mode(-1);
}

TEST(runtime_queue_event_block_cross_device) {
    strict_mode();
    if (vt_device_count() < 2) { /* covered by runtime_fresh_process with 3 devices */
        vt_set_thread_eager_mode(-1);
        return;
    }
    static atomic_int flag;
    atomic_store(&flag, 0);
    atomic_int *fp = &flag;
    uint64_t t;
    CHECK_OK(vt_debug_gate_enqueue(0, GATE_MS));
    CHECK_OK(vt_event_record(0, &t));
    CHECK_OK(vt_event_block(1, 0, t));
    CHECK_OK(vt_enqueue(1, "flag", flag_kernel, &fp, sizeof fp));
    CHECK_STATUS(vt_synchronize_timeout(1, 5), VT_ERR_TIMEOUT);
    CHECK(atomic_load(&flag) == 0);
    vt_debug_gate_open();
    CHECK_OK(vt_synchronize(1));
    CHECK(atomic_load(&flag) == 1);
    vt_set_thread_eager_mode(-1);
}

typedef struct producer {
    atomic_int counter, violations;
    int n;
} producer;

static void *producer_main(void *arg) {
    producer *p = arg;
    vt_set_thread_eager_mode(VT_EAGER_STRICT);
    for (int i = 0; i < p->n; i++) {
        seq_args a = {&p->counter, i, &p->violations};
        if (vt_enqueue(0, "seq", seq_kernel, &a, sizeof a) != VT_OK) atomic_fetch_add(&p->violations, 1000);
    }
    return NULL;
}

TEST(runtime_queue_concurrent_producers) {
    strict_mode();
    static producer ps[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        atomic_store(&ps[i].counter, 0);
        atomic_store(&ps[i].violations, 0);
        ps[i].n = 3000;
        pthread_create(&th[i], NULL, producer_main, &ps[i]);
    }
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    CHECK_OK(vt_synchronize(0));
    for (int i = 0; i < 4; i++) {
        CHECK(atomic_load(&ps[i].counter) == 3000);
        CHECK(atomic_load(&ps[i].violations) == 0); /* each thread's ops stay in its order */
    }
    vt_set_thread_eager_mode(-1);
}

static vt_status pattern_kernel(void *p) {
    const unsigned char *b = p;
    for (int i = 0; i < VT_MAX_ARGS; i++)
        if (b[i] != (unsigned char)(i * 7 + 3)) return vt_set_error(VT_ERR_KERNEL, "byte %d differs", i);
    return VT_OK;
}

TEST(runtime_queue_args_copied) {
    strict_mode();
    unsigned char buf[VT_MAX_ARGS + 1];
    for (int i = 0; i < VT_MAX_ARGS; i++) buf[i] = (unsigned char)(i * 7 + 3);
    CHECK_OK(vt_debug_gate_enqueue(0, GATE_MS));
    CHECK_OK(vt_enqueue(0, "pattern", pattern_kernel, buf, VT_MAX_ARGS));
    memset(buf, 0, sizeof buf); /* the queue holds its own copy */
    vt_debug_gate_open();
    CHECK_OK(vt_synchronize(0));
    CHECK_STATUS(vt_enqueue(0, "big", pattern_kernel, buf, VT_MAX_ARGS + 1), VT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(vt_last_error(), "VT_MAX_ARGS"));
    CHECK_STATUS(vt_enqueue(0, "null", NULL, NULL, 0), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_enqueue(0, "null args", pattern_kernel, NULL, 8), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_enqueue(-1, "bad dev", pattern_kernel, buf, 8), VT_ERR_INDEX);
    CHECK_STATUS(vt_synchronize(vt_device_count()), VT_ERR_INDEX);
    CHECK_OK(vt_synchronize(0));
    vt_set_thread_eager_mode(-1);
}

typedef struct nested_args {
    atomic_int *flag;
} nested_args;

/* A kernel that issues a Debug-mode (waiting) enqueue on its own queue must
 * not deadlock. */
static vt_status nested_kernel(void *p) {
    nested_args *a = p;
    return vt_enqueue_ex(0, "inner", flag_kernel, &a->flag, sizeof a->flag, VT_ENQ_WAIT, NULL);
}

TEST(runtime_queue_wait_from_own_worker) {
    strict_mode();
    static atomic_int flag;
    atomic_store(&flag, 0);
    nested_args a = {&flag};
    CHECK_OK(vt_enqueue(0, "outer", nested_kernel, &a, sizeof a));
    CHECK_OK(vt_synchronize(0));
    CHECK(atomic_load(&flag) == 1);
    vt_set_thread_eager_mode(-1);
}

/* ------------------------------------------------------------ small ops on the caller's thread */

/* x += 1 as the op the binding queues (aten::add.Tensor with a host 1). */
static vt_status add_one(const vt_tensor *x) {
    vt_scalar one = vt_scalar_from_int(1);
    return vt_op_binary(0, "aten::add", VT_ADD, x, x, NULL, NULL, &one, VT_F32, vt_scalar_from_int(1));
}

/* A small elementwise op on an idle queue runs before its enqueue returns
 * (on the caller's thread); behind queued work it waits its turn; its
 * errors keep Strict's and Debug's rules either way. */
TEST(runtime_queue_small_ops_keep_stream_order) {
    strict_mode();
    host_tensor xh = ht_1d(VT_F32, 1000);
    ht_device(&xh);
    const vt_tensor x = xh.t;
    const float *xp = xh.block;
    CHECK_OK(vt_op_fill(0, "aten::fill_", &x, vt_scalar_from_double(0.0)));
    CHECK_OK(vt_synchronize(0));
    CHECK_OK(add_one(&x));
    CHECK(xp[0] == 1.0f && xp[999] == 1.0f); /* idle queue: already done */
    CHECK(vt_queue_pending(0) == 0);

    CHECK_OK(vt_debug_gate_enqueue(0, GATE_MS));
    CHECK_OK(add_one(&x)); /* behind the gate: queued, not run */
    CHECK(xp[0] == 1.0f);
    CHECK(vt_queue_pending(0) == 2);
    vt_debug_gate_open();
    CHECK_OK(vt_synchronize(0));
    CHECK(xp[0] == 2.0f && xp[999] == 2.0f);

    /* Integer division by zero: latched in Strict, raised at the op in Debug. */
    host_tensor ih = ht_1d(VT_I64, 16);
    ht_device(&ih);
    const vt_tensor it = ih.t;
    CHECK_OK(vt_op_fill(0, "aten::zero_", &it, vt_scalar_from_int(0)));
    CHECK_OK(vt_op_binary(0, "aten::div", VT_DIV_FLOOR, &it, &it, NULL, &it, NULL, VT_I64, vt_scalar_from_int(1)));
    CHECK_STATUS(vt_synchronize(0), VT_ERR_KERNEL);
    CHECK(strstr(vt_last_error(), "aten::div: ZeroDivisionError"));
    vt_set_thread_eager_mode(VT_EAGER_DEBUG);
    CHECK_STATUS(vt_op_binary(0, "aten::div", VT_DIV_FLOOR, &it, &it, NULL, &it, NULL, VT_I64, vt_scalar_from_int(1)),
                 VT_ERR_KERNEL);
    CHECK(strstr(vt_last_error(), "aten::div: ZeroDivisionError"));
    CHECK_OK(vt_synchronize(0));
    vt_set_thread_eager_mode(-1);
    ht_free(&ih);
    ht_free(&xh);
}

typedef struct expect_args {
    const float *x;
    float want;
    atomic_int *violations;
} expect_args;

static vt_status expect_kernel(void *p) {
    expect_args *a = p;
    if (a->x[0] != a->want) atomic_fetch_add(a->violations, 1);
    return VT_OK;
}

typedef struct mixed_producer {
    host_tensor x; /* on the device */
    atomic_int violations;
} mixed_producer;

static void *mixed_main(void *arg) {
    mixed_producer *p = arg;
    vt_set_thread_eager_mode(VT_EAGER_STRICT);
    for (int i = 0; i < 2000; i++) {
        expect_args a = {p->x.block, (float)(i + 1), &p->violations};
        if (add_one(&p->x.t) != VT_OK || vt_enqueue(0, "expect", expect_kernel, &a, sizeof a) != VT_OK)
            atomic_fetch_add(&p->violations, 1000);
    }
    return NULL;
}

/* Threads mixing small ops (run inline whenever they find the queue idle)
 * with queued commands that read their results: every command sees every
 * op before it in its thread's order, and none after. */
TEST(runtime_queue_small_ops_with_concurrent_producers) {
    strict_mode();
    static mixed_producer ps[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        ps[i].x = ht_1d(VT_F32, 64);
        ht_device(&ps[i].x);
        CHECK_OK(vt_op_fill(0, "aten::zero_", &ps[i].x.t, vt_scalar_from_int(0)));
        atomic_store(&ps[i].violations, 0);
    }
    CHECK_OK(vt_synchronize(0));
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, mixed_main, &ps[i]);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    CHECK_OK(vt_synchronize(0));
    for (int i = 0; i < 4; i++) {
        CHECK(atomic_load(&ps[i].violations) == 0);
        const float *xp = ps[i].x.block;
        CHECK(xp[0] == 2000.0f && xp[63] == 2000.0f);
        ht_free(&ps[i].x);
    }
    CHECK(vt_queue_pending(0) == 0);
    vt_set_thread_eager_mode(-1);
}
