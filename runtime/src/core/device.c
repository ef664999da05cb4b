/* device.c — the chip table, runtime initialisation from the environment and
 * fork safety. Every device entry point goes through vt_check_runtime, so a
 * child forked from an initialised parent fails cleanly instead of waiting on
 * queue threads that do not exist in it. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "internal.h"

#define GIB (1024ull * 1024ull * 1024ull)

/* HBM per chip in GiB (the stacks are binary-sized); MXU counts are per
 * TensorCore; TPU7x's is not published and assumed like v6e (2 x 256x256). Source:
 * reference/numerics_amx.md section 2. */
static const vt_chip_info chip_table[] = {
    {"v5e", "TPU v5e", 16 * GIB, 819.0, 1, 4, 128, 128, 197.0, 8, {2, 4, 1}, "2D torus"},
    {"v5p", "TPU v5p", 95 * GIB, 2765.0, 2, 4, 128, 128, 459.0, 4, {2, 2, 1}, "3D torus"},
    {"v6e", "TPU v6e (Trillium)", 32 * GIB, 1638.0, 1, 2, 256, 256, 918.0, 8, {2, 4, 1}, "2D torus"},
    {"v7x", "TPU7x (Ironwood)", 192 * GIB, 7380.0, 2, 2, 256, 256, 2307.0, 4, {2, 2, 1}, "3D torus"},
};
#define N_CHIPS ((int)(sizeof chip_table / sizeof chip_table[0]))
#define VALID_CHIPS "v5e, v5p, v6e, v7x"

static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static atomic_int initialized;
static atomic_int bad_fork;
static const vt_chip_info *active_chip;
static int num_devices;

vt_status vt_chip_lookup(const char *name, const vt_chip_info **out) {
    if (!out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "vt_chip_lookup: out is NULL");
    *out = NULL;
    for (int i = 0; name && i < N_CHIPS; i++) {
        if (strcasecmp(name, chip_table[i].name) == 0) {
            *out = &chip_table[i];
            return VT_OK;
        }
    }
    return vt_set_error(VT_ERR_INVALID_ARGUMENT, "Unknown TPU chip '%s': valid names are " VALID_CHIPS,
                        name ? name : "(null)");
}

static int env_flag(const char *name) {
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    return !(strcmp(v, "0") == 0 || strcasecmp(v, "false") == 0 || strcasecmp(v, "no") == 0 ||
             strcasecmp(v, "off") == 0);
}

vt_status vt_parse_bytes(const char *s, uint64_t *out) {
    if (!s || !out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "vt_parse_bytes: NULL argument");
    const char *p = s;
    while (*p == ' ' || *p == '\t') p++;
    if (*p < '0' || *p > '9') goto bad;
    char *end;
    errno = 0;
    double v = strtod(p, &end);
    if (errno || end == p || v != v) goto bad;
    while (*end == ' ' || *end == '\t') end++;
    double mult = 1.0;
    if (*end) {
        static const struct { const char *suffix; double mult; } units[] = {
            {"b", 1.0},
            {"k", 1024.0}, {"kib", 1024.0}, {"kb", 1e3},
            {"m", 1048576.0}, {"mib", 1048576.0}, {"mb", 1e6},
            {"g", 1073741824.0}, {"gib", 1073741824.0}, {"gb", 1e9},
            {"t", 1099511627776.0}, {"tib", 1099511627776.0}, {"tb", 1e12},
        };
        size_t n = strlen(end);
        while (n && (end[n - 1] == ' ' || end[n - 1] == '\t')) n--;
        int found = 0;
        for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
            if (strlen(units[i].suffix) == n && strncasecmp(end, units[i].suffix, n) == 0) {
                mult = units[i].mult;
                found = 1;
                break;
            }
        }
        if (!found) goto bad;
    }
    v *= mult;
    if (v < 1.0 || v >= 18446744073709551615.0) goto bad;
    *out = (uint64_t)v;
    return VT_OK;
bad:
    return vt_set_error(VT_ERR_INVALID_ARGUMENT,
                        "Invalid byte count '%s': expected a positive number with an optional suffix "
                        "(e.g. 1073741824, 512M, 2G, 2GiB, 4GB)", s);
}

void vt_format_bytes(uint64_t n, char *buf, size_t len) {
    /* PyTorch's c10 format_size, so messages read like CUDA's. */
    if (n <= 1024) snprintf(buf, len, "%llu bytes", (unsigned long long)n);
    else if (n <= 1048576) snprintf(buf, len, "%.2f KiB", (double)n / 1024.0);
    else if (n <= 1073741824ull) snprintf(buf, len, "%.2f MiB", (double)n / 1048576.0);
    else snprintf(buf, len, "%.2f GiB", (double)n / 1073741824.0);
}

vt_status vt_runtime_config_from_env(vt_runtime_config *cfg) {
    if (!cfg) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "vt_runtime_config_from_env: cfg is NULL");
    memset(cfg, 0, sizeof *cfg);
    const char *chip = getenv("VTPU_CHIP");
    if (!chip || !*chip) chip = "v6e";
    if (vt_chip_lookup(chip, &cfg->chip) != VT_OK)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "VTPU_CHIP='%s' is not a known TPU chip: valid names are "
                            VALID_CHIPS, chip);

    cfg->num_devices = 1;
    const char *nd = getenv("VTPU_NUM_DEVICES");
    if (nd && *nd) {
        char *end;
        errno = 0;
        long v = strtol(nd, &end, 10);
        while (*end == ' ') end++;
        if (errno || end == nd || *end || v < 1 || v > VT_MAX_DEVICES)
            return vt_set_error(VT_ERR_INVALID_ARGUMENT,
                                "VTPU_NUM_DEVICES='%s' is invalid: expected an integer in 1..%d", nd,
                                VT_MAX_DEVICES);
        cfg->num_devices = (int)v;
    }

    const char *hb = getenv("VTPU_HBM_BYTES");
    if (hb && *hb) {
        if (vt_parse_bytes(hb, &cfg->hbm_bytes) != VT_OK)
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "VTPU_HBM_BYTES: %s", vt_last_error());
        cfg->hbm_override = 1;
    }

    if (env_flag("TPU_LAUNCH_BLOCKING")) {
        cfg->eager_from_env = 1;
        cfg->eager_mode = VT_EAGER_DEBUG;
    } else if (env_flag("TPU_DEFER_AND_FUSE")) {
        cfg->eager_from_env = 1;
        cfg->eager_mode = VT_EAGER_DEFER_AND_FUSE;
    }
    return VT_OK;
}

/* The child has the parent's memory but none of its threads: queue workers,
 * pool threads and any lock they held are gone, so nothing may be used. */
static void atfork_child(void) {
    if (atomic_load(&initialized)) atomic_store(&bad_fork, 1);
}

static void register_atfork(void) { pthread_atfork(NULL, NULL, atfork_child); }

static vt_status bad_fork_error(void) {
    return vt_set_error(VT_ERR_BAD_FORK,
                        "Cannot re-initialize TPU in forked subprocess. To use TPU with multiprocessing, you "
                        "must use the 'spawn' start method");
}

vt_status vt_init(void) {
    if (atomic_load_explicit(&bad_fork, memory_order_relaxed)) return bad_fork_error();
    if (atomic_load_explicit(&initialized, memory_order_acquire)) return VT_OK;
    /* A mutex, not pthread_once: a failed init (bad VTPU_CHIP) must be
     * retryable once the environment is fixed. */
    pthread_mutex_lock(&init_mu);
    vt_status s = VT_OK;
    if (!atomic_load_explicit(&initialized, memory_order_acquire)) {
        vt_runtime_config cfg;
        s = vt_runtime_config_from_env(&cfg);
        cfg.drain = vt_queue_drain;
        if (s == VT_OK) s = vt_hbm_init(&cfg);
        if (s == VT_OK) {
            pthread_once(&atfork_once, register_atfork);
            active_chip = cfg.chip;
            num_devices = cfg.num_devices;
            if (cfg.eager_from_env) vt_set_default_eager_mode(cfg.eager_mode);
            atomic_store_explicit(&initialized, 1, memory_order_release);
        }
    }
    pthread_mutex_unlock(&init_mu);
    return s;
}

int vt_is_initialized(void) {
    /* Like torch.cuda.is_initialized(): false in a bad-fork child. */
    return atomic_load_explicit(&initialized, memory_order_acquire) &&
           !atomic_load_explicit(&bad_fork, memory_order_relaxed);
}

int vt_in_bad_fork(void) { return atomic_load_explicit(&bad_fork, memory_order_relaxed); }

int vt_device_count(void) {
    return atomic_load_explicit(&initialized, memory_order_acquire) ? num_devices : 0;
}

const vt_chip_info *vt_chip(void) {
    return atomic_load_explicit(&initialized, memory_order_acquire) ? active_chip : NULL;
}

vt_status vt_check_runtime(void) {
    if (atomic_load_explicit(&bad_fork, memory_order_relaxed)) return bad_fork_error();
    if (!atomic_load_explicit(&initialized, memory_order_acquire))
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "The TPU runtime is not initialized: call vt_init() first");
    return VT_OK;
}

vt_status vt_check_device(int dev) {
    vt_status s = vt_check_runtime();
    if (s != VT_OK) return s;
    if (dev < 0 || dev >= num_devices)
        return vt_set_error(VT_ERR_INDEX, "Invalid device index %d: vtpu has %d device(s) (chip %s)", dev,
                            num_devices, active_chip->name);
    return VT_OK;
}
