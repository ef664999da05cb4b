/* test_runtime_ops.c — the queued-op layer: ops run on the device queue,
 * host scalars travel inside the command, bad arguments fail at the op,
 * kernel errors come back at the next synchronisation, transfers wait. */
#include <math.h>
#include <stdatomic.h>

#include "test_runtime_util.h"

#define N 1000
#define GATE_MS 30000

static void *dev_alloc(size_t bytes) { return dev_alloc_on(0, bytes); }

static void begin(void) {
    CHECK_OK(vt_init());
    vt_set_thread_eager_mode(VT_EAGER_STRICT);
}

static void end(void) { vt_set_thread_eager_mode(-1); }

TEST(runtime_ops_fill_binary_scalars) {
    begin();
    float *da = dev_alloc(N * 4), *dout = dev_alloc(N * 4), *dout2 = dev_alloc(N * 4);
    vt_tensor a = vec(da, VT_F32, N), out = vec(dout, VT_F32, N), out2 = vec(dout2, VT_F32, N);
    CHECK_OK(vt_op_fill(0, "aten::fill_", &a, vt_scalar_from_double(2.0)));
    vt_scalar three = vt_scalar_from_double(3.0), ten = vt_scalar_from_double(10.0);
    CHECK_OK(vt_op_binary(0, "aten::add", VT_ADD, &out, &a, NULL, NULL, &three, VT_F32, vt_scalar_from_int(1)));
    three.f = -100.0; /* the op holds its own copy of the scalar */
    CHECK_OK(vt_op_binary(0, "aten::rsub", VT_SUB, &out2, NULL, &ten, &a, NULL, VT_F32, vt_scalar_from_int(1)));
    static float host[N], host2[N];
    vt_tensor h = vec(host, VT_F32, N), h2 = vec(host2, VT_F32, N);
    CHECK_OK(vt_copy_to_host(0, &h, &out));
    CHECK_OK(vt_copy_to_host(0, &h2, &out2));
    int bad = 0;
    for (int i = 0; i < N; i++) bad += host[i] != 5.0f || host2[i] != 8.0f;
    CHECK_MSG(bad == 0, "%d wrong (host[0]=%g host2[0]=%g)", bad, host[0], host2[0]);
    vt_hbm_free(0, da);
    vt_hbm_free(0, dout);
    vt_hbm_free(0, dout2);
    end();
}

TEST(runtime_ops_scalar_survives_until_run) {
    begin();
    int32_t *dx = dev_alloc(N * 4), *dy = dev_alloc(N * 4);
    vt_tensor x = vec(dx, VT_I32, N), y = vec(dy, VT_I32, N);
    CHECK_OK(vt_op_fill(0, "aten::fill_", &x, vt_scalar_from_int(6)));
    CHECK_OK(vt_debug_gate_enqueue(0, GATE_MS));
    vt_scalar s = vt_scalar_from_int(7);
    CHECK_OK(vt_op_binary(0, "aten::mul", VT_MUL, &y, &x, NULL, NULL, &s, VT_I32, vt_scalar_from_int(1)));
    s.i = 0; /* overwritten before the command runs */
    vt_debug_gate_open();
    static int32_t host[N];
    vt_tensor h = vec(host, VT_I32, N);
    CHECK_OK(vt_copy_to_host(0, &h, &y));
    CHECK(host[0] == 42 && host[N - 1] == 42);
    vt_hbm_free(0, dx);
    vt_hbm_free(0, dy);
    end();
}

TEST(runtime_ops_kernel_error_latched) {
    begin();
    int32_t *dx = dev_alloc(64 * 4), *dy = dev_alloc(64 * 4);
    vt_tensor x = vec(dx, VT_I32, 64), y = vec(dy, VT_I32, 64);
    CHECK_OK(vt_op_fill(0, "aten::fill_", &x, vt_scalar_from_int(5)));
    vt_scalar zero = vt_scalar_from_int(0);
    CHECK_OK(vt_op_binary(0, "aten::div", VT_DIV_TRUNC, &y, &x, NULL, NULL, &zero, VT_I32, vt_scalar_from_int(1)));
    CHECK_STATUS(vt_synchronize(0), VT_ERR_KERNEL);
    CHECK_MSG(strstr(vt_last_error(), "aten::div: ") == vt_last_error() &&
                  strstr(vt_last_error(), "ZeroDivisionError"),
              "got '%s'", vt_last_error());
    CHECK_OK(vt_synchronize(0));
    /* Debug mode: the same error at the op. */
    vt_set_thread_eager_mode(VT_EAGER_DEBUG);
    CHECK_STATUS(vt_op_binary(0, "aten::remainder", VT_REMAINDER, &y, &x, NULL, NULL, &zero, VT_I32,
                              vt_scalar_from_int(1)),
                 VT_ERR_KERNEL);
    CHECK(strstr(vt_last_error(), "aten::remainder: ") == vt_last_error());
    vt_set_thread_eager_mode(VT_EAGER_STRICT);
    CHECK_OK(vt_synchronize(0));
    vt_hbm_free(0, dx);
    vt_hbm_free(0, dy);
    end();
}

TEST(runtime_ops_unary_where_copy_rng) {
    begin();
    float *da = dev_alloc(N * 4), *db = dev_alloc(N * 4), *dout = dev_alloc(N * 4);
    uint8_t *dc = dev_alloc(N);
    uint16_t *dh = dev_alloc(N * 2);
    vt_tensor a = vec(da, VT_F32, N), b = vec(db, VT_F32, N), out = vec(dout, VT_F32, N);
    vt_tensor cond = vec(dc, VT_BOOL, N), half = vec(dh, VT_BF16, N);
    static float src[N], host[N];
    static uint8_t csrc[N];
    for (int i = 0; i < N; i++) {
        src[i] = (float)i;
        csrc[i] = (uint8_t)(i & 1);
    }
    vt_tensor hs = vec(src, VT_F32, N), hc = vec(csrc, VT_BOOL, N), h = vec(host, VT_F32, N);
    CHECK_OK(vt_copy_to_device(0, &a, &hs));
    CHECK_OK(vt_copy_to_device(0, &cond, &hc));
    CHECK_OK(vt_op_unary(0, "aten::neg", VT_NEG, &b, &a, VT_F32));
    CHECK_OK(vt_op_where(0, "aten::where", &out, &cond, &a, &b));
    CHECK_OK(vt_copy_to_host(0, &h, &out));
    int bad = 0;
    for (int i = 0; i < N; i++) bad += host[i] != (i & 1 ? (float)i : -(float)i);
    CHECK_MSG(bad == 0, "where: %d wrong", bad);

    /* f32 -> bf16 on the device, back to f32 on the host: 257 rounds to 256. */
    CHECK_OK(vt_op_copy(0, "aten::_to_copy", &half, &a));
    CHECK_OK(vt_copy_to_host(0, &h, &half));
    CHECK(host[3] == 3.0f && host[257] == 256.0f);

    CHECK_OK(vt_op_rng_uniform(0, "aten::uniform_", &out, 1234, 0, 2.0, 3.0));
    CHECK_OK(vt_copy_to_host(0, &h, &out));
    bad = 0;
    for (int i = 0; i < N; i++) bad += !(host[i] >= 2.0f && host[i] <= 3.0f);
    CHECK_MSG(bad == 0, "uniform: %d out of range", bad);
    CHECK_OK(vt_op_rng_normal(0, "aten::normal_", &out, 1234, 0, 0.0, 1.0));
    CHECK_OK(vt_copy_to_host(0, &h, &out));
    double mean = 0;
    bad = 0;
    for (int i = 0; i < N; i++) {
        bad += !isfinite(host[i]);
        mean += host[i];
    }
    CHECK(bad == 0 && fabs(mean / N) < 0.5);
    vt_hbm_free(0, da);
    vt_hbm_free(0, db);
    vt_hbm_free(0, dout);
    vt_hbm_free(0, dc);
    vt_hbm_free(0, dh);
    end();
}

TEST(runtime_ops_validation_at_the_op) {
    begin();
    float *da = dev_alloc(8 * 4), *db = dev_alloc(3 * 4);
    vt_tensor a = vec(da, VT_F32, 8), b = vec(db, VT_F32, 3);
    vt_scalar one = vt_scalar_from_int(1);
    CHECK_STATUS(vt_op_binary(0, "aten::add", VT_ADD, &a, &a, NULL, &b, NULL, VT_F32, one), VT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(vt_last_error(), "aten::add: ") == vt_last_error());
    CHECK_STATUS(vt_op_binary(0, "aten::add", VT_ADD, &a, &a, NULL, NULL, NULL, VT_F32, one), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_op_binary(0, "aten::add", VT_BINARY_OP_COUNT, &a, &a, NULL, &a, NULL, VT_F32, one),
                 VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_op_unary(0, "aten::neg", VT_NEG, NULL, &a, VT_F32), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_op_unary(0, "aten::neg", VT_NEG, &a, &a, VT_DTYPE_COUNT), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_op_unary(vt_device_count(), "aten::neg", VT_NEG, &a, &a, VT_F32), VT_ERR_INDEX);
    vt_tensor nodata = vec(NULL, VT_F32, 8);
    CHECK_STATUS(vt_op_copy(0, "aten::copy_", &a, &nodata), VT_ERR_INVALID_ARGUMENT);
    vt_tensor baddim = a;
    baddim.ndim = VT_MAX_DIMS + 1;
    CHECK_STATUS(vt_op_fill(0, "aten::fill_", &baddim, one), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_copy_to_device(0, &a, &b), VT_ERR_INVALID_ARGUMENT);
    CHECK_OK(vt_synchronize(0)); /* nothing was enqueued, nothing latched */
    vt_hbm_free(0, da);
    vt_hbm_free(0, db);
    end();
}

/* A read returns the error of the op that wrote what it reads, and only
 * that: an unrelated tensor reads fine, the failed output raises on every
 * read until it is overwritten, and a fault raised by a read is not raised
 * again by the next synchronisation. */
TEST(runtime_ops_copy_to_host_returns_the_error_of_what_it_reads) {
    begin();
    float *da = dev_alloc(4 * 4);
    vt_tensor a = vec(da, VT_F32, 4);
    int32_t *dx = dev_alloc(4 * 4);
    vt_tensor x = vec(dx, VT_I32, 4);
    vt_scalar zero = vt_scalar_from_int(0);
    CHECK_OK(vt_op_fill(0, "aten::fill_", &a, vt_scalar_from_double(1.5)));
    CHECK_OK(vt_op_fill(0, "aten::fill_", &x, vt_scalar_from_int(1)));
    CHECK_OK(vt_op_binary(0, "aten::div", VT_DIV_TRUNC, &x, &x, NULL, NULL, &zero, VT_I32, vt_scalar_from_int(1)));
    float host[4];
    int32_t hx[4];
    vt_tensor h = vec(host, VT_F32, 4), hxt = vec(hx, VT_I32, 4);
    CHECK_OK(vt_copy_to_host(0, &h, &a)); /* unrelated: no error */
    CHECK(host[0] == 1.5f && host[3] == 1.5f);
    CHECK_STATUS(vt_copy_to_host(0, &hxt, &x), VT_ERR_KERNEL);
    CHECK(strstr(vt_last_error(), "aten::div: "));
    CHECK_STATUS(vt_copy_to_host(0, &hxt, &x), VT_ERR_KERNEL); /* still garbage */
    CHECK_OK(vt_synchronize(0));                               /* raised once already */
    CHECK_OK(vt_op_fill(0, "aten::fill_", &x, vt_scalar_from_int(3))); /* a whole new value */
    CHECK_OK(vt_copy_to_host(0, &hxt, &x));
    CHECK(hx[0] == 3 && hx[3] == 3);
    vt_hbm_free(0, da);
    vt_hbm_free(0, dx);
    end();
}

/* A non-blocking host-to-device copy returns before it runs (the gate holds
 * the queue) and reports, through its ticket, when the host buffer is free. */
TEST(runtime_ops_copy_to_device_async_runs_in_order) {
    begin();
    vt_set_thread_eager_mode(VT_EAGER_STRICT);
    float *da = dev_alloc(N * 4);
    static float src[N], host[N];
    for (int i = 0; i < N; i++) src[i] = (float)(3 * i);
    vt_tensor a = vec(da, VT_F32, N), hs = vec(src, VT_F32, N), h = vec(host, VT_F32, N);
    CHECK_OK(vt_debug_gate_enqueue(0, 20000));
    uint64_t ticket = 0;
    CHECK_OK(vt_copy_to_device_async(0, &a, &hs, &ticket));
    CHECK(vt_event_query(0, ticket) == 0); /* held behind the gate: not run yet */
    vt_debug_gate_open();
    CHECK_OK(vt_event_wait(0, ticket, 20000));
    CHECK(vt_event_query(0, ticket) == 1);
    CHECK_OK(vt_copy_to_host(0, &h, &a));
    int bad = 0;
    for (int i = 0; i < N; i++) bad += host[i] != (float)(3 * i);
    CHECK_MSG(bad == 0, "async copy: %d wrong", bad);
    CHECK(vt_copy_to_device_async(0, &a, &hs, NULL) == VT_ERR_INVALID_ARGUMENT);
    vt_hbm_free(0, da);
    end();
}
