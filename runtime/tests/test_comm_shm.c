/* test_comm_shm.c — the local collectives between processes: the n-way
 * reduction against a double-precision reference for every dtype and op
 * (NaN, integer wrap), then 2 and 4 forked processes running each
 * collective at awkward sizes (chunks that split counts unevenly) against
 * values every rank can compute, a rank that exits and one that stalls. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "vtpu/comm.h"

static double red_ref(vt_red_op op, double a, double b) {
    switch (op) {
        case VT_RED_SUM: return a + b;
        case VT_RED_PROD: return a * b;
        case VT_RED_MIN: return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
        case VT_RED_MAX: return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
    }
    return 0;
}

/* Rank r's element i: small values, so float sums are exact and products stay finite. */
static double value_of(int r, size_t i) { return (double)((int)((i * 7 + (size_t)r * 13) % 11) - 5) * 0.5; }

TEST(comm_reduce_n_matches_a_double_reference) {
    enum { N = 37, K = 3 };
    for (int op = VT_RED_SUM; op <= VT_RED_MAX; op++) {
        float f[K][N], fo[N];
        double d[K][N], dout[N];
        int32_t i32[K][N], io[N];
        int8_t i8[K][N], i8o[N];
        const void *fs[K], *ds[K], *is[K], *i8s[K];
        for (int k = 0; k < K; k++) {
            for (int i = 0; i < N; i++) {
                f[k][i] = (float)value_of(k, (size_t)i);
                d[k][i] = value_of(k, (size_t)i);
                i32[k][i] = (int32_t)(value_of(k, (size_t)i) * 2);
                i8[k][i] = (int8_t)(i * 40 + k * 50); /* sums and products wrap */
            }
            fs[k] = f[k], ds[k] = d[k], is[k] = i32[k], i8s[k] = i8[k];
        }
        f[1][3] = NAN;
        CHECK_OK(vt_reduce_n(fo, fs, K, N, VT_F32, (vt_red_op)op));
        CHECK_OK(vt_reduce_n(dout, ds, K, N, VT_F64, (vt_red_op)op));
        CHECK_OK(vt_reduce_n(io, is, K, N, VT_I32, (vt_red_op)op));
        CHECK_OK(vt_reduce_n(i8o, i8s, K, N, VT_I8, (vt_red_op)op));
        for (int i = 0; i < N; i++) {
            double wf = f[0][i], wd = d[0][i], wi = i32[0][i];
            int64_t w8 = i8[0][i];
            for (int k = 1; k < K; k++) {
                wf = red_ref((vt_red_op)op, wf, f[k][i]);
                wd = red_ref((vt_red_op)op, wd, d[k][i]);
                wi = red_ref((vt_red_op)op, wi, i32[k][i]);
                w8 = (int64_t)red_ref((vt_red_op)op, (double)w8, i8[k][i]);
            }
            CHECK_MSG((isnan(wf) && isnan(fo[i])) || (float)wf == fo[i], "op %d f32[%d]: %g want %g", op, i, fo[i], wf);
            CHECK_MSG(wd == dout[i], "op %d f64[%d]", op, i);
            CHECK_MSG(wi == io[i], "op %d i32[%d]", op, i);
            CHECK_MSG((int8_t)(uint8_t)(w8 & 0xff) == i8o[i], "op %d i8[%d]: %d want %d", op, i, i8o[i],
                      (int8_t)(uint8_t)(w8 & 0xff));
        }
    }
    /* bf16 through float, rounded once */
    uint16_t a[3] = {0x3f80, 0x3f81, 0x7fc0}, b[3] = {0x3b80, 0x3f80, 0x3f80}, o[3]; /* 1, 1.0078, nan; 2^-8, 1, 1 */
    const void *s2[2] = {a, b};
    CHECK_OK(vt_reduce_n(o, s2, 2, 3, VT_BF16, VT_RED_SUM));
    CHECK(o[0] == 0x3f80 && o[1] == 0x4000 && (o[2] & 0x7fff) > 0x7f80); /* 1 + 2^-8 ties to even */
    uint8_t b1[2] = {1, 0}, b2[2] = {0, 0}, bo[2];
    const void *bs[2] = {b1, b2};
    CHECK_OK(vt_reduce_n(bo, bs, 2, 2, VT_BOOL, VT_RED_SUM));
    CHECK(bo[0] == 1 && bo[1] == 0);
    CHECK_OK(vt_reduce_n(bo, bs, 2, 2, VT_BOOL, VT_RED_PROD));
    CHECK(bo[0] == 0 && bo[1] == 0);
    CHECK_STATUS(vt_reduce_n(bo, bs, 0, 2, VT_BOOL, VT_RED_SUM), VT_ERR_INVALID_ARGUMENT);
}

/* One rank's run of every collective; returns the number of wrong values. */
static int run_rank(const char *name, int rank, int size) {
    vt_comm *c = NULL;
    if (vt_comm_open(name, rank, size, 4096, 20000, &c) != VT_OK) {
        fprintf(stderr, "rank %d: open: %s\n", rank, vt_last_error());
        return 1000;
    }
    int bad = 0;
    /* awkward: 3001 floats = 12004 bytes, over 3 slots of 1024 floats */
    enum { COUNT = 3001 };
    static float buf[COUNT];
    for (int op = VT_RED_SUM; op <= VT_RED_MAX; op++) {
        for (size_t i = 0; i < COUNT; i++) buf[i] = (float)value_of(rank, i);
        if (vt_comm_allreduce(c, buf, COUNT, VT_F32, (vt_red_op)op) != VT_OK) return bad + 1000;
        for (size_t i = 0; i < COUNT; i++) {
            double w = value_of(0, i);
            for (int k = 1; k < size; k++) w = red_ref((vt_red_op)op, w, value_of(k, i));
            bad += (float)w != buf[i];
        }
    }
    /* int64 sum */
    static int64_t ibuf[777];
    for (int i = 0; i < 777; i++) ibuf[i] = (int64_t)i * (rank + 1);
    if (vt_comm_allreduce(c, ibuf, 777, VT_I64, VT_RED_SUM) != VT_OK) return bad + 1000;
    for (int i = 0; i < 777; i++) bad += ibuf[i] != (int64_t)i * size * (size + 1) / 2;
    /* broadcast from the last rank */
    static unsigned char bytes[9000];
    for (int i = 0; i < 9000; i++) bytes[i] = (unsigned char)(rank == size - 1 ? i * 3 : 0xee);
    if (vt_comm_broadcast(c, bytes, 9000, size - 1) != VT_OK) return bad + 1000;
    for (int i = 0; i < 9000; i++) bad += bytes[i] != (unsigned char)(i * 3);
    /* allgather of 5000 bytes each */
    static unsigned char in[5000], out[4 * 5000];
    for (int i = 0; i < 5000; i++) in[i] = (unsigned char)(i + rank * 7);
    if (vt_comm_allgather(c, out, in, 5000) != VT_OK) return bad + 1000;
    for (int k = 0; k < size; k++)
        for (int i = 0; i < 5000; i++) bad += out[k * 5000 + i] != (unsigned char)(i + k * 7);
    /* reduce-scatter: each rank's piece of 1500 doubles */
    static double rin[4 * 1500], rout[1500];
    for (int k = 0; k < size; k++)
        for (int i = 0; i < 1500; i++) rin[k * 1500 + i] = value_of(rank, (size_t)(k * 1500 + i));
    if (vt_comm_reduce_scatter(c, rout, rin, 1500, VT_F64, VT_RED_SUM) != VT_OK) return bad + 1000;
    for (int i = 0; i < 1500; i++) {
        double w = 0;
        for (int k = 0; k < size; k++) w += value_of(k, (size_t)(rank * 1500 + i));
        bad += w != rout[i];
    }
    /* exchange */
    int64_t mine[VT_COMM_DESC] = {rank, rank * 10}, all[VT_COMM_MAX_RANKS * VT_COMM_DESC];
    if (vt_comm_exchange(c, mine, all) != VT_OK) return bad + 1000;
    for (int k = 0; k < size; k++) bad += all[k * VT_COMM_DESC] != k || all[k * VT_COMM_DESC + 1] != k * 10;
    if (vt_comm_barrier(c) != VT_OK) return bad + 1000;
    vt_comm_close(c);
    return bad;
}

static void shm_name(char *buf, size_t n, const char *tag) {
    snprintf(buf, n, "/vtpu-test-%s-%d", tag, (int)getpid());
}

TEST(comm_collectives_across_processes) {
    for (int size = 2; size <= 4; size += 2) {
        char name[64];
        shm_name(name, sizeof name, "coll");
        pid_t kids[4];
        for (int r = 1; r < size; r++) {
            kids[r] = fork();
            if (kids[r] == 0) _exit(run_rank(name, r, size) ? 1 : 0);
        }
        int bad = run_rank(name, 0, size);
        vt_comm_unlink(name);
        CHECK_MSG(bad == 0, "size %d: rank 0 saw %d wrong values", size, bad);
        for (int r = 1; r < size; r++) {
            int st = 0;
            waitpid(kids[r], &st, 0);
            CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "size %d: rank %d failed", size, r);
        }
    }
}

TEST(comm_a_rank_that_exits_or_stalls_fails_the_others) {
    char name[64];
    shm_name(name, sizeof name, "dead");
    pid_t kid = fork();
    if (kid == 0) {
        vt_comm *c = NULL;
        _exit(vt_comm_open(name, 1, 2, 0, 20000, &c) == VT_OK ? 0 : 1); /* opens, then exits */
    }
    vt_comm *c = NULL;
    CHECK_OK(vt_comm_open(name, 0, 2, 0, 20000, &c));
    vt_comm_unlink(name);
    if (!c) return;
    int st = 0;
    float x[4] = {1, 2, 3, 4};
    /* not reaped yet: a zombie still has its pid, and is still found dead */
    CHECK_STATUS(vt_comm_allreduce(c, x, 4, VT_F32, VT_RED_SUM), VT_ERR_KERNEL);
    waitpid(kid, &st, 0);
    CHECK_MSG(strstr(vt_last_error(), "rank 1 of 2") && strstr(vt_last_error(), "exited"), "got '%s'",
              vt_last_error());
    CHECK_STATUS(vt_comm_barrier(c), VT_ERR_KERNEL); /* broken from now on */
    CHECK(strstr(vt_last_error(), "broke"));
    vt_comm_close(c);

    shm_name(name, sizeof name, "stall");
    kid = fork();
    if (kid == 0) {
        vt_comm *k = NULL;
        if (vt_comm_open(name, 1, 2, 0, 20000, &k) != VT_OK) _exit(1);
        pause(); /* alive, never arrives */
        _exit(0);
    }
    CHECK_OK(vt_comm_open(name, 0, 2, 0, 20000, &c));
    vt_comm_unlink(name);
    if (!c) return;
    vt_comm_set_timeout(c, 200);
    CHECK_STATUS(vt_comm_barrier(c), VT_ERR_TIMEOUT);
    CHECK_MSG(strstr(vt_last_error(), "rank 1 of 2 did not reach the collective within 200 ms"), "got '%s'",
              vt_last_error());
    kill(kid, SIGKILL);
    waitpid(kid, &st, 0);
    vt_comm_close(c);
    CHECK_STATUS(vt_comm_open("no-slash", 0, 2, 0, 100, &c), VT_ERR_INVALID_ARGUMENT);
    CHECK(c == NULL);
}
