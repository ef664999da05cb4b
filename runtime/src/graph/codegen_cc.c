/* codegen_cc.c — generated code's compile (codegen.h): the system C
 * compiler run on a group's source (codegen.c writes it), the shared
 * objects in the compile cache, and the process's table of loaded groups.
 *
 * The cache key is a 128-bit hash of the source, the compiler (its path,
 * size and modification time: never run to ask) and its flags; the entry
 * holds the source too, compared on load, so a hash collision is a miss,
 * never another group's code. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "graph/codegen.h"
#include "vtpu/cache.h"

extern char **environ;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    atomic_uint_fast64_t compiles, loads, failures, runs, compile_us;
} stats;

/* ------------------------------------------------------------ the compiler */

static int cc_known;      /* the compiler was looked for */
static char cc_path[4096]; /* "": none, generated code is off */
static char cc_id[4300];   /* path, size, modification time */
static char tmp_dir[4096];

/* The compiler's full path: name as is when it has a '/', else found in PATH. */
static int find_compiler(const char *name, char *path, size_t cap) {
    if (!name || !*name || strcmp(name, "none") == 0) return 0;
    if (strchr(name, '/')) {
        if (access(name, X_OK) != 0 || strlen(name) >= cap) return 0;
        strcpy(path, name);
        return 1;
    }
    const char *dirs = getenv("PATH");
    if (!dirs) dirs = "/usr/bin:/bin";
    while (*dirs) {
        const char *end = strchr(dirs, ':');
        const size_t n = end ? (size_t)(end - dirs) : strlen(dirs);
        if (n > 0 && (size_t)snprintf(path, cap, "%.*s/%s", (int)n, dirs, name) < cap && access(path, X_OK) == 0)
            return 1;
        dirs += n + (end != NULL);
    }
    return 0;
}

static void set_compiler_locked(const char *name) {
    cc_known = 1;
    cc_path[0] = cc_id[0] = 0;
    char path[sizeof cc_path];
    struct stat st;
    if (!find_compiler(name, path, sizeof path) || stat(path, &st) != 0) return;
    strcpy(cc_path, path);
    snprintf(cc_id, sizeof cc_id, "%s|%lld|%lld", path, (long long)st.st_size, (long long)st.st_mtime);
}

static int have_compiler_locked(void) {
    if (!cc_known) {
        const char *env = getenv("VTPU_CC");
        set_compiler_locked(env && *env ? env : "cc");
    }
    return cc_path[0] != 0;
}

vt_status vt_codegen_set_compiler(const char *name) {
    pthread_mutex_lock(&mu);
    set_compiler_locked(name ? name : "none");
    const int ok = cc_path[0] != 0 || !name || strcmp(name, "none") == 0;
    pthread_mutex_unlock(&mu);
    return ok ? VT_OK : vt_set_error(VT_ERR_INVALID_ARGUMENT, "C compiler %s not found", name);
}

int vt_cg_enabled(void) {
    pthread_mutex_lock(&mu);
    const int on = have_compiler_locked();
    pthread_mutex_unlock(&mu);
    return on;
}

void vt_codegen_get_stats(vt_codegen_stats *out) {
    out->compiles = atomic_load(&stats.compiles);
    out->loads = atomic_load(&stats.loads);
    out->failures = atomic_load(&stats.failures);
    out->runs = atomic_load(&stats.runs);
    out->compile_us = atomic_load(&stats.compile_us);
}

void vt_cg_count_run(void) { atomic_fetch_add_explicit(&stats.runs, 1, memory_order_relaxed); }

/* Flags for the ISA path in force: the object is built for what the
 * kernels run on (the key holds the flags, so hosts sharing a tier-3 root
 * share objects only where their paths match). */
static const char *isa_flags(void) {
#if defined(__x86_64__)
    const char *p = vt_isa_path();
    if (strcmp(p, "avx2") == 0) return "-mavx2 -mfma -mf16c";
    if (strcmp(p, "scalar") != 0) return "-mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq";
#endif
    return "";
}

static void remove_tmp_dir(void) {
    if (tmp_dir[0]) rmdir(tmp_dir);
}

/* This process's directory for sources and objects on their way. */
static int make_tmp_dir_locked(void) {
    if (tmp_dir[0]) return 1;
    const char *t = getenv("TMPDIR");
    if (!t || !*t) t = "/tmp";
    if ((size_t)snprintf(tmp_dir, sizeof tmp_dir, "%s/vtpu-cg-XXXXXX", t) >= sizeof tmp_dir || !mkdtemp(tmp_dir)) {
        tmp_dir[0] = 0;
        return 0;
    }
    atexit(remove_tmp_dir);
    return 1;
}

static int64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Run the compiler on src (the file) into so; 1 when it exited with 0. */
static int run_compiler(const char *src, const char *so) {
    char flags[256];
    snprintf(flags, sizeof flags, "%s", isa_flags());
    char *argv[32];
    int n = 0;
    argv[n++] = cc_path;
    static char *const fixed[] = {"-std=c11", "-O3", "-fPIC", "-shared", "-ffp-contract=off", "-fno-fast-math",
                                  "-fno-math-errno", "-w"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) argv[n++] = fixed[i];
    for (char *f = strtok(flags, " "); f && n < 24; f = strtok(NULL, " ")) argv[n++] = f;
    argv[n++] = "-o";
    argv[n++] = (char *)so;
    argv[n++] = (char *)src;
    argv[n++] = "-lm";
    argv[n] = NULL;
    posix_spawn_file_actions_t fa;
    if (posix_spawn_file_actions_init(&fa) != 0) return 0;
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    const int e = posix_spawn(&pid, cc_path, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (e != 0) return 0;
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return 0;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static int write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    const int ok = fwrite(data, 1, len, f) == len;
    return fclose(f) == 0 && ok;
}

static void *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    void *data = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        const long n = ftell(f);
        if (n > 0 && fseek(f, 0, SEEK_SET) == 0 && (data = malloc((size_t)n)) != NULL) {
            if (fread(data, 1, (size_t)n, f) != (size_t)n) {
                free(data);
                data = NULL;
            } else {
                *len = (size_t)n;
            }
        }
    }
    fclose(f);
    return data;
}

/* The object at path loaded: its group function, or NULL. */
static vt_cg_fn load_object(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) return NULL;
    const int *abi = dlsym(h, "vt_cg_abi");
    void *fn = dlsym(h, "vt_cg_group");
    if (!abi || *abi != VT_CG_ABI || !fn) {
        dlclose(h);
        return NULL;
    }
    vt_cg_fn f;
    memcpy(&f, &fn, sizeof f);
    return f; /* never closed: queued commands may hold the function */
}

/* ------------------------------------------------------------ loaded groups */

/* A group's source seen in this process: seen in one program run only
 * (ready 0: not looked up yet), or looked up (ready 1) with its function,
 * NULL when the compile failed (the group runs its plans, and is not
 * compiled again). */
typedef struct loaded {
    char key[48];
    char *src;
    int ready;
    uint64_t seen; /* the program run it was first seen in */
    vt_cg_fn fn;
} loaded;
static loaded *table;
static size_t n_table, cap_table;

static int grow_table(void) {
    const size_t cap = cap_table ? cap_table * 2 : 64;
    loaded *t = realloc(table, cap * sizeof *t);
    if (!t) return 0;
    table = t;
    cap_table = cap;
    return 1;
}

static uint64_t hash64(uint64_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

/* An entry's payload: the source's length (8 bytes, little-endian), the
 * source, the object. */
static vt_cg_fn from_entry(const char *key, const char *src, const void *data, size_t len) {
    const size_t n = strlen(src);
    const unsigned char *d = data;
    if (len < 8) return NULL;
    uint64_t m = 0;
    for (int i = 0; i < 8; i++) m |= (uint64_t)d[i] << (8 * i);
    if (m != n || len <= 8 + n || memcmp(d + 8, src, n) != 0) return NULL;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.so", tmp_dir, key);
    vt_cg_fn fn = write_file(path, d + 8 + n, len - 8 - n) ? load_object(path) : NULL;
    unlink(path);
    return fn;
}

static vt_cg_fn compile_source(const char *key, const char *src) {
    char c_path[4200], so_path[4200];
    snprintf(c_path, sizeof c_path, "%s/%s.c", tmp_dir, key);
    snprintf(so_path, sizeof so_path, "%s/%s.so", tmp_dir, key);
    const int64_t t0 = now_us();
    vt_cg_fn fn = NULL;
    size_t so_len = 0;
    void *so = NULL;
    if (write_file(c_path, src, strlen(src)) && run_compiler(c_path, so_path) && (so = read_file(so_path, &so_len))) {
        fn = load_object(so_path);
        const uint64_t us = (uint64_t)(now_us() - t0);
        atomic_fetch_add(&stats.compiles, 1);
        atomic_fetch_add(&stats.compile_us, us);
        if (fn) {
            const size_t n = strlen(src);
            unsigned char *entry = malloc(8 + n + so_len);
            if (entry) {
                for (int i = 0; i < 8; i++) entry[i] = (unsigned char)((uint64_t)n >> (8 * i));
                memcpy(entry + 8, src, n);
                memcpy(entry + 8 + n, so, so_len);
                vt_cache_put(key, entry, 8 + n + so_len, us); /* a tier that refuses it is noted there */
                free(entry);
            }
        }
    }
    free(so);
    unlink(c_path);
    unlink(so_path);
    return fn;
}

/* (codegen.h) Loaded before, from the cache, or compiled now.
 * A group is looked up when it runs in a second program run, not in the
 * first it ran in: how a record is cut into groups depends on which
 * buffers are alive, and a program's first call (with its compile, or its
 * load from the cache) keeps others alive than its later calls. So the
 * groups a process looks up are its steady ones, those another process
 * running the same program has compiled; a group that runs in one call
 * only (if in each of a model's layers) is not worth a compile. */
vt_cg_fn vt_cg_function(const char *src) {
    pthread_mutex_lock(&mu);
    vt_cg_fn fn = NULL;
    if (!have_compiler_locked() || !make_tmp_dir_locked()) goto out;
    const char *flags = isa_flags();
    uint64_t h1 = hash64(0xcbf29ce484222325ull, src, strlen(src)), h2 = hash64(0x84222325cbf29ce4ull, src, strlen(src));
    h1 = hash64(hash64(h1, cc_id, strlen(cc_id)), flags, strlen(flags));
    h2 = hash64(hash64(h2, flags, strlen(flags)), cc_id, strlen(cc_id));
    char key[48];
    snprintf(key, sizeof key, "cg%d-%016llx%016llx", VT_CG_ABI, (unsigned long long)h1, (unsigned long long)h2);
    loaded *t = NULL;
    for (size_t i = 0; i < n_table && !t; i++)
        if (strcmp(table[i].key, key) == 0 && strcmp(table[i].src, src) == 0) t = &table[i];
    if (t && t->ready) {
        fn = t->fn;
        goto out;
    }
    const uint64_t run = vt_defer_program_runs();
    if (t && t->seen == run) goto out; /* the same program run */
    if (!t) { /* its first run: noted */
        char *copy = strdup(src);
        if (!copy || (n_table == cap_table && !grow_table())) {
            free(copy);
            goto out;
        }
        t = &table[n_table++];
        snprintf(t->key, sizeof t->key, "%s", key);
        t->src = copy;
        t->ready = 0;
        t->seen = run;
        t->fn = NULL;
        goto out;
    }
    /* one compile per key across the host's processes: the lock first, so
     * a process that waited finds the entry another one stored */
    int lock = -1;
    vt_cache_lock(key, 10 * 60 * 1000, &lock);
    void *data = NULL;
    size_t len = 0;
    int tier = 0;
    if (vt_cache_get(key, &data, &len, &tier) == VT_OK && data) fn = from_entry(key, src, data, len);
    vt_cache_release(data);
    if (fn) atomic_fetch_add(&stats.loads, 1);
    else fn = compile_source(key, src);
    vt_cache_unlock(lock);
    if (!fn) atomic_fetch_add(&stats.failures, 1);
    t->fn = fn;
    t->ready = 1;
out:
    pthread_mutex_unlock(&mu);
    return fn;
}
