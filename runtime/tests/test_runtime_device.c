/* test_runtime_device.c — chip table, environment parsing, vt_init and
 * device-index checks; a fresh copy of this binary tests vt_init from a clean
 * process (env is read once per process). */
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "kernels/attention/attention.h"
#include "kernels/optim/optim.h"
#include "test.h"

extern char **environ;

#define MIB (1024ull * 1024ull)
#define GIB (1024ull * MIB)

TEST(runtime_chip_lookup) {
    const vt_chip_info *c = NULL;
    CHECK_OK(vt_chip_lookup("v6e", &c));
    CHECK(c && strcmp(c->name, "v6e") == 0);
    CHECK(c->hbm_bytes == 32 * GIB);
    CHECK(c->mxu_rows == 256 && c->mxu_cols == 256 && c->tensorcores == 1);
    CHECK(c->chips_per_host == 8 && c->host_topology[0] * c->host_topology[1] * c->host_topology[2] == 8);
    CHECK(c->peak_bf16_tflops == 918.0 && c->hbm_gbytes_per_s == 1638.0);
    CHECK_OK(vt_chip_lookup("v5p", &c));
    CHECK(c->hbm_bytes == 95 * GIB && c->tensorcores == 2 && c->chips_per_host == 4);
    CHECK(strcmp(c->slice_topology, "3D torus") == 0);
    CHECK_OK(vt_chip_lookup("v5e", &c));
    CHECK(c->hbm_bytes == 16 * GIB && c->mxu_count == 4 && c->mxu_rows == 128);
    CHECK(c->host_topology[0] == 2 && c->host_topology[1] == 4 && c->host_topology[2] == 1);
    CHECK_OK(vt_chip_lookup("V7X", &c));
    CHECK(strcmp(c->name, "v7x") == 0 && c->hbm_bytes == 192 * GIB && c->peak_bf16_tflops == 2307.0);
    CHECK(c->host_topology[0] == 2 && c->host_topology[1] == 2 && c->host_topology[2] == 1);

    CHECK_STATUS(vt_chip_lookup("v4", &c), VT_ERR_INVALID_ARGUMENT);
    CHECK(c == NULL);
    CHECK(strstr(vt_last_error(), "'v4'") && strstr(vt_last_error(), "v5e, v5p, v6e, v7x"));
    CHECK_STATUS(vt_chip_lookup(NULL, &c), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_chip_lookup("v6e", NULL), VT_ERR_INVALID_ARGUMENT);
}

TEST(runtime_parse_and_format_bytes) {
    uint64_t v = 0;
    CHECK_OK(vt_parse_bytes("4096", &v));
    CHECK(v == 4096);
    CHECK_OK(vt_parse_bytes("512M", &v));
    CHECK(v == 512 * MIB);
    CHECK_OK(vt_parse_bytes("2G", &v));
    CHECK(v == 2 * GIB);
    CHECK_OK(vt_parse_bytes("2GiB", &v));
    CHECK(v == 2 * GIB);
    CHECK_OK(vt_parse_bytes("4GB", &v));
    CHECK(v == 4000000000ull);
    CHECK_OK(vt_parse_bytes("1.5g", &v));
    CHECK(v == 3 * GIB / 2);
    CHECK_OK(vt_parse_bytes("64 KiB", &v));
    CHECK(v == 65536);
    const char *bad[] = {"", "abc", "-5", "0", "12X", "1e400", "G"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_STATUS(vt_parse_bytes(bad[i], &v), VT_ERR_INVALID_ARGUMENT);
        CHECK(strstr(vt_last_error(), "512M"));
    }
    char buf[32];
    vt_format_bytes(0, buf, sizeof buf);
    CHECK(strcmp(buf, "0 bytes") == 0);
    vt_format_bytes(1024, buf, sizeof buf);
    CHECK(strcmp(buf, "1024 bytes") == 0);
    vt_format_bytes(1536, buf, sizeof buf);
    CHECK(strcmp(buf, "1.50 KiB") == 0);
    vt_format_bytes(40 * GIB, buf, sizeof buf);
    CHECK(strcmp(buf, "40.00 GiB") == 0);
    vt_format_bytes(32000 * MIB, buf, sizeof buf);
    CHECK(strcmp(buf, "31.25 GiB") == 0);
}

/* Set or (value NULL) clear an environment variable, remembering the old
 * value in saved[] for env_restore. */
static const char *env_names[] = {"VTPU_CHIP", "VTPU_NUM_DEVICES", "VTPU_HBM_BYTES", "TPU_LAUNCH_BLOCKING",
                                  "TPU_DEFER_AND_FUSE"};
#define N_ENV (sizeof env_names / sizeof env_names[0])

static void env_save(char **saved) {
    for (size_t i = 0; i < N_ENV; i++) {
        const char *v = getenv(env_names[i]);
        saved[i] = v ? strdup(v) : NULL;
        unsetenv(env_names[i]);
    }
}

static void env_restore(char **saved) {
    for (size_t i = 0; i < N_ENV; i++) {
        if (saved[i]) setenv(env_names[i], saved[i], 1);
        else unsetenv(env_names[i]);
        free(saved[i]);
    }
}

TEST(runtime_config_from_env) {
    char *saved[N_ENV];
    env_save(saved);
    vt_runtime_config cfg;
    CHECK_OK(vt_runtime_config_from_env(&cfg));
    CHECK(strcmp(cfg.chip->name, "v6e") == 0 && cfg.num_devices == 1 && !cfg.hbm_override && !cfg.eager_from_env);

    setenv("VTPU_CHIP", "v5p", 1);
    setenv("VTPU_NUM_DEVICES", "4", 1);
    setenv("VTPU_HBM_BYTES", "2GiB", 1);
    setenv("TPU_DEFER_AND_FUSE", "1", 1);
    CHECK_OK(vt_runtime_config_from_env(&cfg));
    CHECK(strcmp(cfg.chip->name, "v5p") == 0 && cfg.num_devices == 4);
    CHECK(cfg.hbm_override && cfg.hbm_bytes == 2 * GIB);
    CHECK(cfg.eager_from_env && cfg.eager_mode == VT_EAGER_DEFER_AND_FUSE);
    setenv("TPU_LAUNCH_BLOCKING", "1", 1); /* wins over DeferAndFuse */
    CHECK_OK(vt_runtime_config_from_env(&cfg));
    CHECK(cfg.eager_mode == VT_EAGER_DEBUG);
    setenv("TPU_LAUNCH_BLOCKING", "0", 1);
    setenv("TPU_DEFER_AND_FUSE", "0", 1);
    CHECK_OK(vt_runtime_config_from_env(&cfg));
    CHECK(!cfg.eager_from_env);

    setenv("VTPU_CHIP", "tpu9000", 1);
    CHECK_STATUS(vt_runtime_config_from_env(&cfg), VT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(vt_last_error(), "VTPU_CHIP='tpu9000'") && strstr(vt_last_error(), "v5e, v5p, v6e, v7x"));
    setenv("VTPU_CHIP", "v7x", 1);
    const char *bad_counts[] = {"0", "65", "two", "3x", "-1"};
    for (size_t i = 0; i < sizeof bad_counts / sizeof bad_counts[0]; i++) {
        setenv("VTPU_NUM_DEVICES", bad_counts[i], 1);
        CHECK_STATUS(vt_runtime_config_from_env(&cfg), VT_ERR_INVALID_ARGUMENT);
        CHECK(strstr(vt_last_error(), "VTPU_NUM_DEVICES") && strstr(vt_last_error(), "1..64"));
    }
    setenv("VTPU_NUM_DEVICES", "64", 1);
    setenv("VTPU_HBM_BYTES", "lots", 1);
    CHECK_STATUS(vt_runtime_config_from_env(&cfg), VT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(vt_last_error(), "VTPU_HBM_BYTES") && strstr(vt_last_error(), "'lots'"));
    env_restore(saved);
}

TEST(runtime_init_and_device_index) {
    CHECK_OK(vt_init());
    CHECK_OK(vt_init()); /* idempotent */
    CHECK(vt_is_initialized() == 1);
    CHECK(!vt_in_bad_fork());
    int n = vt_device_count();
    CHECK(n >= 1 && n <= VT_MAX_DEVICES);
    const vt_chip_info *chip = vt_chip();
    CHECK(chip != NULL);
    CHECK_OK(vt_check_runtime());
    for (int d = 0; d < n; d++) CHECK_OK(vt_check_device(d));
    CHECK_STATUS(vt_check_device(n), VT_ERR_INDEX);
    char want[160];
    snprintf(want, sizeof want, "Invalid device index %d: vtpu has %d device(s) (chip %s)", n, n, chip->name);
    CHECK_MSG(strcmp(vt_last_error(), want) == 0, "got '%s'", vt_last_error());
    CHECK_STATUS(vt_check_device(-1), VT_ERR_INDEX);
    CHECK(strstr(vt_last_error(), "Invalid device index -1"));
}

/* ------------------------------------------------------------ fresh process */

static void *init_thread(void *arg) {
    *(vt_status *)arg = vt_init();
    return NULL;
}

static vt_status cross_flag_kernel(void *p) {
    **(int **)p = 1;
    return VT_OK;
}

/* Runs only in a child started by runtime_fresh_process. */
static void fresh_process_checks(void) {
    char *saved[N_ENV];
    env_save(saved);
    CHECK(!vt_is_initialized() && vt_device_count() == 0 && vt_chip() == NULL);
    CHECK_STATUS(vt_check_runtime(), VT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(vt_last_error(), "vt_init"));
    CHECK_STATUS(vt_check_device(0), VT_ERR_INVALID_ARGUMENT);
    void *p = (void *)1;
    CHECK_STATUS(vt_hbm_alloc(0, 16, &p), VT_ERR_INVALID_ARGUMENT);
    CHECK(p == NULL);
    CHECK_STATUS(vt_synchronize(0), VT_ERR_INVALID_ARGUMENT);

    /* A bad name fails and can be retried once the environment is fixed. */
    setenv("VTPU_CHIP", "v9", 1);
    CHECK_STATUS(vt_init(), VT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(vt_last_error(), "v5e, v5p, v6e, v7x"));
    CHECK(!vt_is_initialized());
    setenv("VTPU_CHIP", "v5p", 1);
    setenv("VTPU_NUM_DEVICES", "100", 1);
    CHECK_STATUS(vt_init(), VT_ERR_INVALID_ARGUMENT);
    setenv("VTPU_NUM_DEVICES", "3", 1);
    setenv("VTPU_HBM_BYTES", "64M", 1);
    setenv("TPU_LAUNCH_BLOCKING", "1", 1);

    pthread_t th[4];
    vt_status st[4];
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, init_thread, &st[i]);
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_STATUS(st[i], VT_OK);
    }
    CHECK(vt_is_initialized() && vt_device_count() == 3 && strcmp(vt_chip()->name, "v5p") == 0);
    CHECK(vt_get_eager_mode() == VT_EAGER_DEBUG);
    setenv("VTPU_CHIP", "v5e", 1); /* read once: no effect now */
    CHECK_OK(vt_init());
    CHECK(strcmp(vt_chip()->name, "v5p") == 0);
    CHECK_STATUS(vt_check_device(3), VT_ERR_INDEX);
    CHECK(strstr(vt_last_error(), "vtpu has 3 device(s) (chip v5p)"));
    uint64_t free_b = 0, total = 0;
    CHECK_OK(vt_hbm_mem_info(2, &free_b, &total));
    CHECK(total == 64 * MIB && free_b == 64 * MIB);

    /* Cross-device ordering: work on device 1 waits for device 0's ticket. */
    vt_set_thread_eager_mode(VT_EAGER_STRICT);
    int flag = 0;
    int *fp = &flag;
    uint64_t t0;
    CHECK_OK(vt_debug_gate_enqueue(0, 20000));
    CHECK_OK(vt_event_record(0, &t0));
    CHECK_OK(vt_event_block(1, 0, t0));
    CHECK_OK(vt_enqueue(1, "flag", cross_flag_kernel, &fp, sizeof fp));
    CHECK_STATUS(vt_synchronize_timeout(1, 20), VT_ERR_TIMEOUT);
    CHECK(flag == 0);
    vt_debug_gate_open();
    CHECK_OK(vt_synchronize(1));
    CHECK(flag == 1 && vt_event_query(0, t0));
    vt_set_thread_eager_mode(-1);
    env_restore(saved);
}

TEST(runtime_fresh_process) {
    if (getenv("VTPU_TEST_FRESH_PROCESS")) {
        fresh_process_checks();
        return;
    }
    int n = 0;
    while (environ[n]) n++;
    char **envp = calloc((size_t)n + 2, sizeof *envp);
    for (int i = 0; i < n; i++) envp[i] = environ[i];
    envp[n] = "VTPU_TEST_FRESH_PROCESS=1";
    char *argv[] = {"vtpu_tests", "runtime_fresh_process", NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0); /* the child's summary line */
    pid_t pid;
    int rc = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    free(envp);
    CHECK_MSG(rc == 0, "posix_spawn failed: %d", rc);
    if (rc != 0) return;
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "fresh-process child failed (status 0x%x)", status);
}

/* One registry picks every family's kernels: forcing the portable path
 * reaches the matrix engine, the attention rows and the optimizer tables
 * alike, and the start-up choice comes back. */
TEST(runtime_isa_registry_forces_and_restores_every_family) {
    const unsigned start = vt_isa_default();
    char path[32], mxu[32];
    snprintf(path, sizeof path, "%s", vt_isa_path());
    snprintf(mxu, sizeof mxu, "%s", vt_mxu_path());
    CHECK(vt_isa_active() == start);
    CHECK(vt_isa_force(0) == 0);
    CHECK(vt_isa_active() == 0 && !strcmp(vt_isa_path(), "scalar"));
    CHECK(!strcmp(vt_mxu_path(), "scalar"));
    CHECK(vt_attn_rows_active() == &vt_attn_rows_portable);
    CHECK(!strcmp(optim_active_table()->name, "portable"));
    /* a mask is limited to what the CPU has */
    CHECK(vt_isa_force(~0u) == vt_isa_available());
    CHECK(vt_isa_force(start) == start);
    CHECK_MSG(!strcmp(vt_isa_path(), path) && !strcmp(vt_mxu_path(), mxu), "restored %s/%s, was %s/%s",
              vt_isa_path(), vt_mxu_path(), path, mxu);
    if (start & VT_ISA_AVX512) {
        CHECK(vt_attn_rows_active() != &vt_attn_rows_portable);
        CHECK(strcmp(optim_active_table()->name, "portable") != 0);
    }
}
