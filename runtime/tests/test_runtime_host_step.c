/* test_runtime_host_step.c — a host step (a collective handed to a
 * transport) is device work: it runs after what produced its inputs, later
 * work waits for it, it runs even on a poisoned input and is told the
 * fault, its failure poisons what it writes, and bad requests never call it. */
#include <stdatomic.h>
#include <stdlib.h>

#include "test_runtime_util.h"

#define N 256
#define GATE_MS 30000

typedef struct step_ctx {
    const int32_t *src;
    int32_t *dst;
    atomic_int calls;
    int saw_first; /* src[0] when it ran */
    char fault[256];
    int fail;
} step_ctx;

/* dst = 2 * src on the host, as a transport would write a received buffer. */
static vt_status double_it(void *p, const char *input_fault) {
    step_ctx *c = p;
    atomic_fetch_add(&c->calls, 1);
    snprintf(c->fault, sizeof c->fault, "%s", input_fault ? input_fault : "");
    c->saw_first = c->src[0];
    for (int i = 0; i < N; i++) c->dst[i] = 2 * c->src[i];
    if (c->fail) return vt_host_step_error(VT_ERR_KERNEL, "peer 1 closed the connection");
    return VT_OK;
}

static vt_status read_back(const vt_tensor *t, int32_t *host) {
    vt_tensor h = vec(host, VT_I32, t->sizes[0]);
    return vt_copy_to_host(0, &h, t);
}

static void begin(void) {
    CHECK_OK(vt_init());
    vt_set_thread_eager_mode(VT_EAGER_STRICT);
    CHECK_OK(vt_synchronize(0));
}

TEST(host_step_runs_in_queue_order) {
    begin();
    int32_t *dx = dev_alloc_on(0, N * 4), *dy = dev_alloc_on(0, N * 4), *dz = dev_alloc_on(0, N * 4);
    vt_tensor x = vec(dx, VT_I32, N), y = vec(dy, VT_I32, N), z = vec(dz, VT_I32, N);
    static step_ctx c;
    memset(&c, 0, sizeof c);
    c.src = dx, c.dst = dy;
    CHECK_OK(vt_debug_gate_enqueue(0, GATE_MS));
    CHECK_OK(vt_op_fill(0, "aten::fill_", &x, vt_scalar_from_int(7)));
    CHECK_OK(vt_enqueue_host(0, "tpu_dist allreduce", double_it, &c, &x, 1, &y, 1, NULL));
    /* later work reads what the step wrote */
    CHECK_OK(vt_op_binary(0, "aten::add", VT_ADD, &z, &y, NULL, &x, NULL, VT_I32, vt_scalar_from_int(1)));
    CHECK(atomic_load(&c.calls) == 0); /* enqueued behind the gate, not run */
    vt_debug_gate_open();
    static int32_t host[N];
    CHECK_OK(read_back(&z, host));
    CHECK(host[0] == 21 && host[N - 1] == 21);
    CHECK(atomic_load(&c.calls) == 1 && c.saw_first == 7 && c.fault[0] == 0);
    CHECK_OK(vt_synchronize(0));
    vt_hbm_free(0, dx), vt_hbm_free(0, dy), vt_hbm_free(0, dz);
    vt_set_thread_eager_mode(-1);
}

TEST(host_step_on_a_poisoned_input_runs_and_passes_the_fault_on) {
    begin();
    int32_t *dx = dev_alloc_on(0, N * 4), *dy = dev_alloc_on(0, N * 4), *dz = dev_alloc_on(0, N * 4);
    vt_tensor x = vec(dx, VT_I32, N), y = vec(dy, VT_I32, N), z = vec(dz, VT_I32, N);
    static step_ctx c;
    memset(&c, 0, sizeof c);
    c.src = dy, c.dst = dz;
    const vt_scalar zero = {0.0, 0, 0};
    CHECK_OK(vt_op_fill(0, "aten::fill_", &x, vt_scalar_from_int(3)));
    CHECK_OK(vt_op_binary(0, "aten::div", VT_DIV_TRUNC, &y, &x, NULL, NULL, &zero, VT_I32, vt_scalar_from_int(1)));
    CHECK_OK(vt_enqueue_host(0, "tpu_dist allreduce", double_it, &c, &y, 1, &z, 1, NULL));
    static int32_t host[N];
    CHECK_STATUS(read_back(&z, host), VT_ERR_KERNEL);
    CHECK_MSG(strstr(vt_last_error(), "ZeroDivisionError"), "got '%s'", vt_last_error());
    CHECK(atomic_load(&c.calls) == 1);
    CHECK_MSG(strstr(c.fault, "aten::div: ZeroDivisionError"), "step was told '%s'", c.fault);
    /* the division is raised once, with the step's own fault after it */
    CHECK_STATUS(vt_synchronize(0), VT_ERR_KERNEL);
    CHECK_OK(vt_synchronize(0));
    vt_hbm_free(0, dx), vt_hbm_free(0, dy), vt_hbm_free(0, dz);
    vt_set_thread_eager_mode(-1);
}

TEST(host_step_failure_poisons_its_writes_and_is_raised_once) {
    begin();
    int32_t *dx = dev_alloc_on(0, N * 4), *dy = dev_alloc_on(0, N * 4), *dz = dev_alloc_on(0, N * 4);
    vt_tensor x = vec(dx, VT_I32, N), y = vec(dy, VT_I32, N), z = vec(dz, VT_I32, N);
    static step_ctx c;
    memset(&c, 0, sizeof c);
    c.src = dx, c.dst = dy, c.fail = 1;
    CHECK_OK(vt_op_fill(0, "aten::fill_", &x, vt_scalar_from_int(1)));
    CHECK_OK(vt_enqueue_host(0, "tpu_dist broadcast", double_it, &c, &x, 1, &y, 1, NULL));
    CHECK_OK(vt_op_copy(0, "aten::copy_", &z, &y)); /* computed from the failed step: carries its fault */
    static int32_t host[N];
    CHECK_OK(read_back(&x, host)); /* what it only read is fine */
    CHECK_STATUS(read_back(&z, host), VT_ERR_KERNEL);
    CHECK_MSG(!strcmp(vt_last_error(), "tpu_dist broadcast: peer 1 closed the connection"), "got '%s'",
              vt_last_error());
    CHECK_OK(vt_synchronize(0)); /* raised by the read already */
    /* in Debug mode the enqueue returns the step's error */
    vt_set_thread_eager_mode(VT_EAGER_DEBUG);
    int queued = 0;
    CHECK_STATUS(vt_enqueue_host(0, "tpu_dist broadcast", double_it, &c, &x, 1, &y, 1, &queued), VT_ERR_KERNEL);
    CHECK(queued == 1); /* it ran: the error is its own */
    CHECK(strstr(vt_last_error(), "peer 1 closed the connection"));
    CHECK(atomic_load(&c.calls) == 2);
    vt_set_thread_eager_mode(VT_EAGER_STRICT);
    CHECK_OK(vt_synchronize(0));
    vt_hbm_free(0, dx), vt_hbm_free(0, dy), vt_hbm_free(0, dz);
    vt_set_thread_eager_mode(-1);
}

TEST(host_step_refuses_bad_requests_without_calling_fn) {
    begin();
    int32_t *dx = dev_alloc_on(0, N * 4);
    static int32_t host[N];
    vt_tensor x = vec(dx, VT_I32, N), h = vec(host, VT_I32, N);
    static step_ctx c;
    memset(&c, 0, sizeof c);
    c.src = dx, c.dst = dx;
    int queued = 1;
    CHECK_STATUS(vt_enqueue_host(0, "tpu_dist allreduce", double_it, &c, &h, 1, &x, 1, &queued),
                 VT_ERR_INVALID_ARGUMENT);
    CHECK(queued == 0);
    queued = 1;
    CHECK_STATUS(vt_enqueue_host(0, "tpu_dist allreduce", double_it, &c, &x, 1, &h, 1, &queued),
                 VT_ERR_INVALID_ARGUMENT);
    CHECK(queued == 0);
    CHECK_STATUS(vt_enqueue_host(0, "tpu_dist allreduce", NULL, &c, &x, 1, &x, 1, NULL), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_enqueue_host(0, "tpu_dist allreduce", double_it, &c, NULL, 1, &x, 1, NULL),
                 VT_ERR_INVALID_ARGUMENT);
    queued = 1;
    CHECK_STATUS(vt_enqueue_host(vt_device_count(), "tpu_dist allreduce", double_it, &c, &x, 1, &x, 1, &queued),
                 VT_ERR_INDEX);
    CHECK(queued == 0);
    CHECK_OK(vt_synchronize(0));
    CHECK(atomic_load(&c.calls) == 0);
    /* many tensors (past the inline lists), and none */
    vt_tensor many[40];
    for (int i = 0; i < 40; i++) many[i] = vec(dx + i * 4, VT_I32, 4);
    CHECK_OK(vt_op_fill(0, "aten::fill_", &x, vt_scalar_from_int(5)));
    CHECK_OK(vt_enqueue_host(0, "tpu_dist allgather", double_it, &c, many, 40, many, 40, NULL));
    CHECK_OK(vt_synchronize(0));
    CHECK(atomic_load(&c.calls) == 1 && c.saw_first == 5);
    CHECK_OK(vt_enqueue_host(0, "tpu_dist barrier", double_it, &c, NULL, 0, NULL, 0, NULL));
    CHECK_OK(vt_synchronize(0));
    CHECK(atomic_load(&c.calls) == 2 && c.saw_first == 10);
    vt_hbm_free(0, dx);
    vt_set_thread_eager_mode(-1);
}
