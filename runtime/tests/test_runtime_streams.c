/* test_runtime_streams.c — a device's queues. Work on one queue runs while
 * another is blocked; commands of different queues that touch the same
 * allocation run in the order they were enqueued (read after write, write
 * after read, and a freed block handed out again); events, faults, waits and
 * the pending count cover every queue. Each case holds a queue behind a
 * debug gate, so "not run yet" is observed, not timed. */
#include <stdatomic.h>
#include <stdlib.h>

#include "test_runtime_util.h"

#define N 4096
#define GATE_MS 30000
#define Q2 2 /* a queue of user streams */

static void begin(void) {
    CHECK_OK(vt_init());
    vt_set_thread_eager_mode(VT_EAGER_STRICT);
    vt_set_thread_queue(0, 0);
    CHECK_OK(vt_synchronize(0));
}

static void end(void) {
    vt_debug_gate_open();
    vt_set_thread_queue(0, 0);
    vt_set_thread_eager_mode(-1);
}

/* A host step that records whether it ran, so a test can see it without a
 * host read (which would wait for every queue). */
static vt_status mark_ran(void *p, const char *fault) {
    (void)fault;
    atomic_store((atomic_int *)p, 1);
    return VT_OK;
}

static void fill_on(int q, vt_tensor *t, int v) {
    int old = vt_set_thread_queue(0, q);
    CHECK_OK(vt_op_fill(0, "aten::fill_", t, vt_scalar_from_int(v)));
    vt_set_thread_queue(0, old);
}

static void copy_on(int q, vt_tensor *dst, const vt_tensor *src) {
    int old = vt_set_thread_queue(0, q);
    CHECK_OK(vt_op_copy(0, "aten::copy_", dst, src));
    vt_set_thread_queue(0, old);
}

static int32_t first_of(const vt_tensor *t) {
    static int32_t host[N];
    vt_tensor h = vec(host, VT_I32, t->sizes[0]);
    CHECK_OK(vt_copy_to_host(0, &h, t));
    for (int64_t i = 1; i < t->sizes[0]; i++) CHECK(host[i] == host[0]);
    return host[0];
}

TEST(streams_map_to_queues) {
    CHECK(vt_stream_queue(0) == 0);
    CHECK(vt_stream_queue(VT_STREAM_COMM) == VT_QUEUE_COMM);
    for (int64_t id = 1; id < 64; id++) {
        int q = vt_stream_queue(id);
        CHECK(q >= 2 && q < VT_MAX_QUEUES);
    }
    CHECK(vt_stream_queue(1) != vt_stream_queue(2)); /* two new streams do not share a queue */
    begin();
    CHECK(vt_set_thread_queue(0, Q2) == 0);
    CHECK(vt_thread_queue(0) == Q2);
    CHECK(vt_set_thread_queue(0, VT_MAX_QUEUES) == Q2); /* out of range: ignored */
    CHECK(vt_thread_queue(0) == Q2);
    end();
}

TEST(streams_a_blocked_queue_does_not_hold_another) {
    begin();
    int32_t *da = dev_alloc_on(0, N * 4);
    vt_tensor a = vec(da, VT_I32, N);
    static atomic_int ran;
    atomic_store(&ran, 0);
    CHECK_OK(vt_debug_gate_enqueue(0, GATE_MS)); /* queue 0 blocked */
    vt_set_thread_queue(0, Q2);
    CHECK_OK(vt_op_fill(0, "aten::fill_", &a, vt_scalar_from_int(5)));
    CHECK_OK(vt_enqueue_host(0, "step", mark_ran, (void *)&ran, &a, 1, NULL, 0, NULL));
    uint64_t t2 = 0;
    CHECK_OK(vt_event_record(0, &t2));
    CHECK(vt_ticket_queue(t2) == Q2);
    CHECK_OK(vt_event_wait(0, t2, GATE_MS)); /* runs although queue 0 is held */
    CHECK(atomic_load(&ran) == 1);
    vt_set_thread_queue(0, 0);
    CHECK(vt_queue_pending(0) >= 1); /* the gate */
    uint64_t t0 = 0;
    CHECK_OK(vt_event_record(0, &t0));
    CHECK(vt_ticket_queue(t0) == 0 && !vt_event_query(0, t0));
    vt_debug_gate_open();
    CHECK(first_of(&a) == 5);
    CHECK(vt_queue_pending(0) == 0);
    vt_hbm_free(0, da);
    end();
}

TEST(streams_read_after_write_across_queues) {
    begin();
    int32_t *da = dev_alloc_on(0, N * 4), *db = dev_alloc_on(0, N * 4);
    vt_tensor a = vec(da, VT_I32, N), b = vec(db, VT_I32, N);
    fill_on(0, &a, 1);
    CHECK_OK(vt_synchronize(0));
    CHECK_OK(vt_debug_gate_enqueue(0, GATE_MS));
    fill_on(0, &a, 7);  /* queue 0 writes a, behind the gate */
    copy_on(Q2, &b, &a); /* queue 2 reads a: must see 7, so it waits */
    vt_set_thread_queue(0, Q2);
    uint64_t t2 = 0;
    CHECK_OK(vt_event_record(0, &t2));
    vt_set_thread_queue(0, 0);
    CHECK_STATUS(vt_event_wait(0, t2, 50), VT_ERR_TIMEOUT);
    vt_debug_gate_open();
    CHECK(first_of(&b) == 7);
    vt_hbm_free(0, da), vt_hbm_free(0, db);
    end();
}

TEST(streams_write_after_read_across_queues) {
    begin();
    int32_t *da = dev_alloc_on(0, N * 4), *db = dev_alloc_on(0, N * 4);
    vt_tensor a = vec(da, VT_I32, N), b = vec(db, VT_I32, N);
    fill_on(0, &a, 3);
    CHECK_OK(vt_synchronize(0));
    vt_set_thread_queue(0, Q2);
    CHECK_OK(vt_debug_gate_enqueue(0, GATE_MS));
    vt_set_thread_queue(0, 0);
    copy_on(Q2, &b, &a); /* queue 2 reads a, behind its gate */
    fill_on(0, &a, 9);   /* queue 0 overwrites a: must wait for the read */
    uint64_t t0 = 0;
    CHECK_OK(vt_event_record(0, &t0));
    CHECK_STATUS(vt_event_wait(0, t0, 50), VT_ERR_TIMEOUT);
    vt_debug_gate_open();
    CHECK(first_of(&b) == 3);
    CHECK(first_of(&a) == 9);
    vt_hbm_free(0, da), vt_hbm_free(0, db);
    end();
}

TEST(streams_a_freed_block_handed_out_again_waits_for_its_last_use) {
    begin();
    int32_t *da = dev_alloc_on(0, N * 4), *db = dev_alloc_on(0, N * 4);
    vt_tensor a = vec(da, VT_I32, N), b = vec(db, VT_I32, N);
    fill_on(0, &a, 4);
    CHECK_OK(vt_synchronize(0));
    vt_set_thread_queue(0, Q2);
    CHECK_OK(vt_debug_gate_enqueue(0, GATE_MS));
    vt_set_thread_queue(0, 0);
    copy_on(Q2, &b, &a); /* the last use of a, pending on queue 2 */
    vt_hbm_free(0, da);
    /* With room, the allocator passes over a block another queue still uses. */
    int32_t *dfresh = dev_alloc_on(0, N * 4);
    CHECK(dfresh != da);
    /* Without room, it hands that block out, and the new owner waits. */
    vt_hbm_stats st;
    CHECK_OK(vt_hbm_get_stats(0, &st));
    CHECK_OK(vt_hbm_set_capacity_for_test(0, (uint64_t)st.reserved_bytes.current));
    int32_t *dc = dev_alloc_on(0, N * 4);
    CHECK(dc == da);
    CHECK_OK(vt_hbm_set_capacity_for_test(0, 0));
    vt_tensor c = vec(dc, VT_I32, N);
    fill_on(0, &c, 8); /* the new owner writes it on queue 0 */
    uint64_t t0 = 0;
    CHECK_OK(vt_event_record(0, &t0));
    CHECK_STATUS(vt_event_wait(0, t0, 50), VT_ERR_TIMEOUT);
    vt_debug_gate_open();
    CHECK(first_of(&b) == 4);
    CHECK(first_of(&c) == 8);
    vt_hbm_free(0, db), vt_hbm_free(0, dc), vt_hbm_free(0, dfresh);
    end();
}

TEST(streams_events_order_queues) {
    begin();
    int32_t *da = dev_alloc_on(0, N * 4);
    vt_tensor a = vec(da, VT_I32, N);
    static atomic_int ran;
    atomic_store(&ran, 0);
    vt_set_thread_queue(0, Q2);
    CHECK_OK(vt_debug_gate_enqueue(0, GATE_MS));
    uint64_t t2 = 0;
    CHECK_OK(vt_event_record(0, &t2));
    vt_set_thread_queue(0, 0);
    CHECK_OK(vt_event_block(0, 0, t2)); /* queue 0 waits for queue 2's event */
    CHECK_OK(vt_enqueue_host(0, "step", mark_ran, (void *)&ran, NULL, 0, &a, 1, NULL));
    uint64_t t0 = 0;
    CHECK_OK(vt_event_record(0, &t0));
    CHECK_STATUS(vt_event_wait(0, t0, 50), VT_ERR_TIMEOUT);
    CHECK(atomic_load(&ran) == 0);
    vt_debug_gate_open();
    CHECK_OK(vt_event_synchronize(0, t0, GATE_MS));
    CHECK(atomic_load(&ran) == 1);
    /* a ticket of a queue that never got that far is refused */
    vt_set_thread_queue(0, 3);
    uint64_t t3 = 0;
    CHECK_OK(vt_event_record(0, &t3));
    vt_set_thread_queue(0, 0);
    CHECK_STATUS(vt_event_wait(0, t3 + 5, 0), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_event_wait(0, (uint64_t)(VT_MAX_QUEUES + 3) << 56, 0), VT_ERR_INVALID_ARGUMENT);
    vt_hbm_free(0, da);
    end();
}

TEST(streams_faults_cross_queues) {
    begin();
    int32_t *dx = dev_alloc_on(0, N * 4), *dy = dev_alloc_on(0, N * 4), *dz = dev_alloc_on(0, N * 4);
    vt_tensor x = vec(dx, VT_I32, N), y = vec(dy, VT_I32, N), z = vec(dz, VT_I32, N);
    const vt_scalar zero = {0.0, 0, 0};
    fill_on(Q2, &x, 3);
    vt_set_thread_queue(0, Q2);
    CHECK_OK(vt_op_binary(0, "aten::div", VT_DIV_TRUNC, &y, &x, NULL, NULL, &zero, VT_I32, vt_scalar_from_int(1)));
    uint64_t t2 = 0;
    CHECK_OK(vt_event_record(0, &t2));
    vt_set_thread_queue(0, 0);
    copy_on(0, &z, &y); /* queue 0 reads what failed on queue 2 */
    static int32_t host[N];
    vt_tensor h = vec(host, VT_I32, N);
    CHECK_STATUS(vt_copy_to_host(0, &h, &z), VT_ERR_KERNEL);
    CHECK_MSG(strstr(vt_last_error(), "ZeroDivisionError"), "got '%s'", vt_last_error());
    /* raised once: the event and the device have nothing more to say */
    CHECK_OK(vt_event_synchronize(0, t2, GATE_MS));
    CHECK_OK(vt_synchronize(0));
    /* a queue-2 event reports a fault of queue 2 that nobody read */
    vt_set_thread_queue(0, Q2);
    CHECK_OK(vt_op_binary(0, "aten::div", VT_DIV_TRUNC, &y, &x, NULL, NULL, &zero, VT_I32, vt_scalar_from_int(1)));
    CHECK_OK(vt_event_record(0, &t2));
    vt_set_thread_queue(0, 0);
    uint64_t t0 = 0;
    CHECK_OK(vt_event_record(0, &t0));
    CHECK_OK(vt_event_synchronize(0, t0, GATE_MS)); /* queue 0's event: not its fault */
    CHECK_STATUS(vt_event_synchronize(0, t2, GATE_MS), VT_ERR_KERNEL);
    CHECK_OK(vt_synchronize(0));
    /* a fault on another queue is reported by a device synchronisation */
    vt_set_thread_queue(0, Q2);
    CHECK_OK(vt_op_binary(0, "aten::div", VT_DIV_TRUNC, &y, &x, NULL, NULL, &zero, VT_I32, vt_scalar_from_int(1)));
    vt_set_thread_queue(0, 0);
    CHECK_STATUS(vt_synchronize(0), VT_ERR_KERNEL);
    CHECK_OK(vt_synchronize(0));
    fill_on(0, &y, 0); /* clears the poison */
    CHECK(first_of(&y) == 0);
    vt_hbm_free(0, dx), vt_hbm_free(0, dy), vt_hbm_free(0, dz);
    end();
}

TEST(streams_wait_covers_every_queue) {
    begin();
    int32_t *da = dev_alloc_on(0, N * 4);
    vt_tensor a = vec(da, VT_I32, N);
    static atomic_int ran;
    atomic_store(&ran, 0);
    vt_set_thread_queue(0, 3);
    CHECK_OK(vt_debug_gate_enqueue(0, GATE_MS));
    CHECK_OK(vt_enqueue_host(0, "step", mark_ran, (void *)&ran, NULL, 0, &a, 1, NULL));
    vt_set_thread_queue(0, 0);
    CHECK(vt_queue_pending(0) == 2);
    CHECK_STATUS(vt_wait(0, 50), VT_ERR_TIMEOUT);
    vt_debug_gate_open();
    CHECK_OK(vt_synchronize(0));
    CHECK(atomic_load(&ran) == 1 && vt_queue_pending(0) == 0);
    vt_hbm_free(0, da);
    end();
}

/* A host step (a collective) reads its inputs across queues: it waits for
 * their producer on another queue, and a later writer waits for it. */
typedef struct peek_ctx {
    const int32_t *src;
    atomic_int saw;
} peek_ctx;

static vt_status peek(void *p, const char *fault) {
    (void)fault;
    peek_ctx *c = p;
    atomic_store(&c->saw, c->src[0]);
    return VT_OK;
}

TEST(streams_host_step_inputs_are_ordered_across_queues) {
    begin();
    int32_t *da = dev_alloc_on(0, N * 4), *db = dev_alloc_on(0, N * 4);
    vt_tensor a = vec(da, VT_I32, N), b = vec(db, VT_I32, N);
    fill_on(0, &a, 1);
    CHECK_OK(vt_synchronize(0));
    static peek_ctx c;
    c.src = da;
    atomic_store(&c.saw, -1);
    /* read after write: the producer is held on queue 0 */
    CHECK_OK(vt_debug_gate_enqueue(0, GATE_MS));
    fill_on(0, &a, 7);
    vt_set_thread_queue(0, VT_QUEUE_COMM);
    CHECK_OK(vt_enqueue_host(0, "tpu_dist send", peek, &c, &a, 1, &b, 1, NULL));
    uint64_t t1 = 0;
    CHECK_OK(vt_event_record(0, &t1));
    vt_set_thread_queue(0, 0);
    CHECK_STATUS(vt_event_wait(0, t1, 50), VT_ERR_TIMEOUT);
    vt_debug_gate_open();
    CHECK_OK(vt_event_wait(0, t1, GATE_MS));
    CHECK(atomic_load(&c.saw) == 7);
    /* write after read: the step is held on its queue, a writer on queue 0 waits */
    vt_set_thread_queue(0, VT_QUEUE_COMM);
    CHECK_OK(vt_debug_gate_enqueue(0, GATE_MS));
    CHECK_OK(vt_enqueue_host(0, "tpu_dist send", peek, &c, &a, 1, NULL, 0, NULL));
    vt_set_thread_queue(0, 0);
    fill_on(0, &a, 9);
    uint64_t t0 = 0;
    CHECK_OK(vt_event_record(0, &t0));
    CHECK_STATUS(vt_event_wait(0, t0, 50), VT_ERR_TIMEOUT);
    vt_debug_gate_open();
    CHECK_OK(vt_synchronize(0));
    CHECK(atomic_load(&c.saw) == 7);
    CHECK(first_of(&a) == 9);
    vt_hbm_free(0, da), vt_hbm_free(0, db);
    end();
}

/* A copy between devices waits for every queue of the source device that
 * writes the source, and any queue of the source device that later writes it
 * waits for the copy. */
TEST(streams_copy_across_devices_orders_every_queue) {
    begin();
    CHECK(vt_device_count() >= 2);
    int32_t *dx = dev_alloc_on(0, N * 4), *d1 = dev_alloc_on(1, N * 4);
    vt_tensor x = vec(dx, VT_I32, N), o = vec(d1, VT_I32, N);
    fill_on(0, &x, 2);
    CHECK_OK(vt_synchronize(0));
    vt_set_thread_queue(0, Q2);
    CHECK_OK(vt_debug_gate_enqueue(0, GATE_MS));
    CHECK_OK(vt_op_fill(0, "aten::fill_", &x, vt_scalar_from_int(5))); /* written on device 0's queue 2, held */
    vt_set_thread_queue(0, 0);
    CHECK_OK(vt_op_copy(1, "aten::copy_", &o, &x)); /* device 1 must see 5 */
    vt_set_thread_queue(0, 3);
    CHECK_OK(vt_op_fill(0, "aten::fill_", &x, vt_scalar_from_int(8))); /* must not overtake the copy */
    vt_set_thread_queue(0, 0);
    vt_debug_gate_open();
    static int32_t host[N];
    vt_tensor h = vec(host, VT_I32, N);
    CHECK_OK(vt_copy_to_host(1, &h, &o));
    CHECK(host[0] == 5 && host[N - 1] == 5);
    CHECK(first_of(&x) == 8);
    vt_hbm_free(0, dx), vt_hbm_free(1, d1);
    end();
}
