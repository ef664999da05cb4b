/* test_runtime_faults.c — errors of queued work reach the code that depends
 * on them and nothing else: what a failed op wrote, and everything computed
 * from it, reads as that error (never as stale memory); unrelated reads do
 * not see it; a synchronisation raises every error nobody has seen; a block
 * handed out again is new, clean data. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "test_runtime_util.h"

#define N 256
#define GATE_MS 30000

static void begin(void) {
    CHECK_OK(vt_init());
    vt_set_thread_eager_mode(VT_EAGER_STRICT);
    for (int d = 0; d < vt_device_count(); d++) CHECK_OK(vt_synchronize(d));
}

static void end(void) {
    for (int d = 0; d < vt_device_count(); d++) CHECK_OK(vt_synchronize(d));
    vt_set_thread_eager_mode(-1);
}

static const vt_scalar zero_i = {0.0, 0, 0};

/* y = x // 0 on int32: fails on the queue with ZeroDivisionError. */
static void failing_div(int dev, vt_tensor *y, vt_tensor *x) {
    CHECK_OK(vt_op_binary(dev, "aten::div", VT_DIV_TRUNC, y, x, NULL, NULL, &zero_i, VT_I32, vt_scalar_from_int(1)));
}

static vt_status read_back(int dev, const vt_tensor *t, int32_t *host) {
    vt_tensor h = vec(host, VT_I32, t->sizes[0]);
    return vt_copy_to_host(dev, &h, t);
}

TEST(faults_follow_the_data) {
    begin();
    int32_t *dx = dev_alloc_on(0, N * 4), *dy = dev_alloc_on(0, N * 4), *dz = dev_alloc_on(0, N * 4), *du = dev_alloc_on(0, N * 4);
    vt_tensor x = vec(dx, VT_I32, N), y = vec(dy, VT_I32, N), z = vec(dz, VT_I32, N), u = vec(du, VT_I32, N);
    static int32_t host[N];
    CHECK_OK(vt_op_fill(0, "aten::fill_", &x, vt_scalar_from_int(6)));
    failing_div(0, &y, &x);
    /* computed from the failed output: does not run, carries the error */
    CHECK_OK(vt_op_binary(0, "aten::add", VT_ADD, &z, &y, NULL, &x, NULL, VT_I32, vt_scalar_from_int(1)));
    /* unrelated: runs */
    CHECK_OK(vt_op_binary(0, "aten::mul", VT_MUL, &u, &x, NULL, &x, NULL, VT_I32, vt_scalar_from_int(1)));
    CHECK_OK(read_back(0, &u, host));
    CHECK(host[0] == 36 && host[N - 1] == 36);
    CHECK_STATUS(read_back(0, &y, host), VT_ERR_KERNEL);
    CHECK_MSG(!strcmp(vt_last_error(), "aten::div: ZeroDivisionError"), "got '%s'", vt_last_error());
    CHECK_STATUS(read_back(0, &z, host), VT_ERR_KERNEL); /* the cause, named */
    CHECK(!strcmp(vt_last_error(), "aten::div: ZeroDivisionError"));
    CHECK_STATUS(vt_check_readable(&z), VT_ERR_KERNEL);
    CHECK_OK(vt_check_readable(&x));
    CHECK_OK(vt_synchronize(0)); /* raised by the reads already */
    /* a partial write leaves the rest poisoned; a whole new value clears it */
    vt_tensor half = vec(dy, VT_I32, N / 2);
    CHECK_OK(vt_op_fill(0, "aten::fill_", &half, vt_scalar_from_int(1)));
    CHECK_STATUS(read_back(0, &y, host), VT_ERR_KERNEL);
    CHECK_OK(vt_op_fill(0, "aten::fill_", &y, vt_scalar_from_int(2)));
    CHECK_OK(read_back(0, &y, host));
    CHECK(host[0] == 2 && host[N - 1] == 2);
    CHECK_STATUS(read_back(0, &z, host), VT_ERR_KERNEL); /* z itself was never rewritten */
    vt_hbm_free(0, dx), vt_hbm_free(0, dy), vt_hbm_free(0, dz), vt_hbm_free(0, du);
    end();
}

TEST(faults_none_is_lost_and_each_is_raised_once) {
    begin();
    int32_t *dx = dev_alloc_on(0, N * 4), *dy = dev_alloc_on(0, N * 4);
    vt_tensor x = vec(dx, VT_I32, N), y = vec(dy, VT_I32, N);
    CHECK_OK(vt_op_fill(0, "aten::fill_", &x, vt_scalar_from_int(6)));
    failing_div(0, &y, &x);
    CHECK_OK(vt_op_binary(0, "aten::remainder", VT_REMAINDER, &x, &x, NULL, NULL, &zero_i, VT_I32,
                          vt_scalar_from_int(1)));
    CHECK_STATUS(vt_synchronize(0), VT_ERR_KERNEL);
    CHECK_MSG(strstr(vt_last_error(), "aten::div: ZeroDivisionError") == vt_last_error() &&
                  strstr(vt_last_error(), "(and 1 more error on TPU 0") &&
                  strstr(vt_last_error(), "aten::remainder: ZeroDivisionError"),
              "got '%s'", vt_last_error());
    CHECK_OK(vt_synchronize(0));
    /* the tensors still say what happened to them */
    static int32_t host[N];
    CHECK_STATUS(read_back(0, &x, host), VT_ERR_KERNEL);
    CHECK(strstr(vt_last_error(), "aten::remainder"));
    vt_hbm_free(0, dx), vt_hbm_free(0, dy);
    end();
}

/* A freed block handed out again is clean for its new owner, even when the
 * failing op that wrote it runs after the reuse; a command queued before
 * the free still sees the fault. */
TEST(faults_belong_to_one_allocation) {
    begin();
    int32_t *dx = dev_alloc_on(0, N * 4), *dy = dev_alloc_on(0, N * 4), *dz = dev_alloc_on(0, N * 4);
    vt_tensor x = vec(dx, VT_I32, N), y = vec(dy, VT_I32, N), z = vec(dz, VT_I32, N);
    CHECK_OK(vt_op_fill(0, "aten::fill_", &x, vt_scalar_from_int(6)));
    CHECK_OK(vt_debug_gate_enqueue(0, GATE_MS));
    failing_div(0, &y, &x);
    CHECK_OK(vt_op_copy(0, "aten::copy_", &z, &y)); /* queued before y's block is freed */
    vt_hbm_free(0, dy);
    int32_t *dw = dev_alloc_on(0, N * 4); /* the cache hands y's block out again */
    CHECK(dw == dy);
    vt_tensor w = vec(dw, VT_I32, 128);
    CHECK_OK(vt_op_fill(0, "aten::fill_", &w, vt_scalar_from_int(9))); /* a partial write of the new owner */
    vt_debug_gate_open();
    static int32_t host[N];
    CHECK_OK(read_back(0, &w, host));
    CHECK(host[0] == 9 && host[127] == 9);
    CHECK_STATUS(read_back(0, &z, host), VT_ERR_KERNEL);
    CHECK(strstr(vt_last_error(), "aten::div"));
    vt_hbm_free(0, dx), vt_hbm_free(0, dw), vt_hbm_free(0, dz);
    end();
}

/* Debug mode raises at the op, including an op that reads a tensor a failed
 * op wrote; events raise the faults that precede them. */
TEST(faults_in_debug_mode_and_at_events) {
    begin();
    int32_t *dx = dev_alloc_on(0, N * 4), *dy = dev_alloc_on(0, N * 4), *dz = dev_alloc_on(0, N * 4);
    vt_tensor x = vec(dx, VT_I32, N), y = vec(dy, VT_I32, N), z = vec(dz, VT_I32, N);
    CHECK_OK(vt_op_fill(0, "aten::fill_", &x, vt_scalar_from_int(6)));
    vt_set_thread_eager_mode(VT_EAGER_DEBUG);
    CHECK_STATUS(vt_op_binary(0, "aten::div", VT_DIV_TRUNC, &y, &x, NULL, NULL, &zero_i, VT_I32,
                              vt_scalar_from_int(1)),
                 VT_ERR_KERNEL);
    CHECK_STATUS(vt_op_copy(0, "aten::copy_", &z, &y), VT_ERR_KERNEL);
    CHECK(!strcmp(vt_last_error(), "aten::div: ZeroDivisionError"));
    vt_set_thread_eager_mode(VT_EAGER_STRICT);
    CHECK_OK(vt_synchronize(0)); /* each was raised at its op */
    uint64_t before = 0, after = 0;
    CHECK_OK(vt_event_record(0, &before));
    failing_div(0, &z, &x);
    CHECK_OK(vt_event_record(0, &after));
    CHECK_OK(vt_event_synchronize(0, before, -1)); /* the failure comes after this event */
    CHECK_OK(vt_event_wait(0, after, -1));         /* a plain wait raises nothing */
    int done = 0;
    CHECK_STATUS(vt_event_status(0, after, &done), VT_ERR_KERNEL);
    CHECK(done == 1);
    CHECK_OK(vt_event_synchronize(0, after, -1));
    vt_hbm_free(0, dx), vt_hbm_free(0, dy), vt_hbm_free(0, dz);
    end();
}

/* A failed output copied to another device is still the failed output. */
TEST(faults_cross_devices) {
    begin();
    CHECK(vt_device_count() >= 2);
    int32_t *dx = dev_alloc_on(0, N * 4), *dy = dev_alloc_on(0, N * 4), *d1 = dev_alloc_on(1, N * 4);
    vt_tensor x = vec(dx, VT_I32, N), y = vec(dy, VT_I32, N), o = vec(d1, VT_I32, N);
    CHECK_OK(vt_op_fill(0, "aten::fill_", &x, vt_scalar_from_int(6)));
    failing_div(0, &y, &x);
    CHECK_OK(vt_op_copy(1, "aten::copy_", &o, &y));
    static int32_t host[N];
    CHECK_STATUS(read_back(1, &o, host), VT_ERR_KERNEL);
    CHECK(!strcmp(vt_last_error(), "aten::div: ZeroDivisionError"));
    CHECK_OK(vt_synchronize(1)); /* device 1 had no failure of its own */
    CHECK_OK(vt_synchronize(0)); /* device 0's failure was raised once, by the read of its copy */
    vt_hbm_free(0, dx), vt_hbm_free(0, dy), vt_hbm_free(1, d1);
    end();
}

/* ------------------------------------------------------------ threads */

typedef struct worker_args {
    int id, dev, rounds;
    atomic_int *wrong;
} worker_args;

/* Each thread computes on its own tensors, sometimes fails on purpose,
 * copies across devices and frees: its reads must see exactly its own
 * values or its own error. */
static void *stress_worker(void *p) {
    worker_args *a = p;
    vt_set_thread_eager_mode(VT_EAGER_STRICT);
    unsigned seed = (unsigned)a->id * 2654435761u;
    for (int r = 0; r < a->rounds; r++) {
        seed = seed * 1103515245u + 12345u;
        int dev = a->dev, other = (dev + 1) % vt_device_count();
        int32_t *dx = NULL, *dy = NULL, *dz = NULL;
        if (vt_hbm_alloc(dev, N * 4, (void **)&dx) || vt_hbm_alloc(dev, N * 4, (void **)&dy) ||
            vt_hbm_alloc(other, N * 4, (void **)&dz)) {
            atomic_fetch_add(a->wrong, 1);
            break;
        }
        vt_tensor x = vec(dx, VT_I32, N), y = vec(dy, VT_I32, N), z = vec(dz, VT_I32, N);
        int value = (int)(seed % 1000) + 1, fail = (seed >> 12) % 4 == 0;
        vt_scalar v = vt_scalar_from_int(value), by = fail ? zero_i : vt_scalar_from_int(1);
        vt_op_fill(dev, "aten::fill_", &x, v);
        vt_op_binary(dev, "aten::div", VT_DIV_TRUNC, &y, &x, NULL, NULL, &by, VT_I32, vt_scalar_from_int(1));
        vt_op_copy(other, "aten::copy_", &z, &y);
        vt_hbm_free(dev, dy); /* stream-ordered: the copy still reads the old y */
        int32_t host[N];
        vt_tensor h = vec(host, VT_I32, N);
        vt_status s = vt_copy_to_host(other, &h, &z);
        if (fail) {
            if (s != VT_ERR_KERNEL || !strstr(vt_last_error(), "ZeroDivisionError")) atomic_fetch_add(a->wrong, 1);
        } else if (s != VT_OK || host[0] != value || host[N - 1] != value) {
            atomic_fetch_add(a->wrong, 1);
        }
        vt_hbm_free(dev, dx);
        vt_hbm_free(other, dz);
    }
    return NULL;
}

TEST(faults_threads_devices_copies_errors_frees) {
    begin();
    enum { THREADS = 4 };
    pthread_t th[THREADS];
    worker_args args[THREADS];
    atomic_int wrong;
    atomic_init(&wrong, 0);
    for (int i = 0; i < THREADS; i++) {
        args[i] = (worker_args){i, i % vt_device_count(), 200, &wrong};
        CHECK(pthread_create(&th[i], NULL, stress_worker, &args[i]) == 0);
    }
    for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
    CHECK_MSG(atomic_load(&wrong) == 0, "%d reads saw another thread's data or error", atomic_load(&wrong));
    /* every failure was raised by a read; the synchronisations owe nothing */
    for (int d = 0; d < vt_device_count(); d++) CHECK_OK(vt_synchronize(d));
    end();
}
