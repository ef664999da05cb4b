/* test_runtime_fork.c — a child forked after vt_init must get VT_ERR_BAD_FORK
 * from every device entry point (and never hang on the parent's threads);
 * the parent keeps working. The child reports through its exit code. */
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "test.h"

static vt_status nop_kernel(void *p) { return VT_OK; }

static int child_checks(void *parent_block) {
    int bad = 0, bit = 0;
#define EXPECT(cond) do { if (!(cond)) bad |= 1 << bit; bit++; } while (0)
    EXPECT(vt_in_bad_fork() == 1);
    EXPECT(vt_is_initialized() == 0);
    EXPECT(vt_init() == VT_ERR_BAD_FORK);
    EXPECT(strstr(vt_last_error(), "Cannot re-initialize TPU in forked subprocess. To use TPU with multiprocessing") != NULL);
    EXPECT(strstr(vt_last_error(), "'spawn' start method") != NULL);
    EXPECT(vt_check_device(0) == VT_ERR_BAD_FORK);
    void *p = NULL;
    EXPECT(vt_hbm_alloc(0, 64, &p) == VT_ERR_BAD_FORK && p == NULL);
    vt_hbm_free(0, parent_block); /* must not crash or hang */
    EXPECT(vt_enqueue(0, "nop", nop_kernel, NULL, 0) == VT_ERR_BAD_FORK);
    EXPECT(vt_synchronize(0) == VT_ERR_BAD_FORK);
    uint64_t t;
    EXPECT(vt_event_record(0, &t) == VT_ERR_BAD_FORK);
    EXPECT(vt_queue_pending(0) < 0);
    float x = 0;
    vt_tensor tt = {.data = &x, .dtype = VT_F32, .ndim = 0};
    EXPECT(vt_op_fill(0, "fill", &tt, vt_scalar_from_double(1.0)) == VT_ERR_BAD_FORK);
    vt_hbm_stats st;
    EXPECT(vt_hbm_get_stats(0, &st) == VT_ERR_BAD_FORK);
    EXPECT(vt_hbm_owns(parent_block, NULL) == 0);
#undef EXPECT
    return bad;
}

TEST(runtime_bad_fork) {
    CHECK_OK(vt_init());
    void *blk = NULL;
    CHECK_OK(vt_hbm_alloc(0, 256, &blk));
    CHECK_OK(vt_enqueue(0, "nop", nop_kernel, NULL, 0));
    CHECK_OK(vt_synchronize(0));
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int bad = child_checks(blk);
        _exit(bad ? 1 + __builtin_ctz((unsigned)bad) : 0); /* exit code: first failing check + 1 */
    }
    CHECK(pid > 0);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed checks: status 0x%x", status);
    /* The parent is untouched. */
    CHECK(!vt_in_bad_fork());
    CHECK_OK(vt_enqueue(0, "nop", nop_kernel, NULL, 0));
    CHECK_OK(vt_synchronize(0));
    vt_hbm_free(0, blk);
}
