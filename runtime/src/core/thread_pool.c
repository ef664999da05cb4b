/* thread_pool.c — the persistent CPU thread pool behind vt_parallel_for. Workers
 * spin briefly and then sleep, so back-to-back kernels from a device queue
 * dispatch in well under a microsecond while an idle runtime costs no CPU. */
#include <errno.h>
#include <pthread.h>
#ifdef __linux__
#include <sched.h>
#endif
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* How long an idle worker polls (yielding the core: vt_poll_yield) before
 * sleeping: long enough to catch the next kernel of a busy queue, short
 * enough not to burn a core when idle. A sleeping worker wakes tens of
 * microseconds late on a VM, and meanwhile the caller claims its chunk
 * too: at 30 us, ops with single-threaded stretches between their parallel
 * phases (a backward's) ran mostly on one core. At 300 us, layer_norm's
 * forward and backward over 2048x512 f32 took 851-870 us against 961-1004
 * (bench/ops.py: norms' fwd+bwd 8-15% faster, geometric mean 1.22x ->
 * 1.24x). */
#define SPIN_NS 300000

/* One job at a time. Its fields are atomics because a late worker may read
 * them while the next job is being published; such a worker cannot claim a
 * chunk of the new job under its old generation, so what it read is unused. */
#define MAX_THREADS 256
static struct {
    _Atomic(vt_range_fn) fn;
    _Atomic(void *) ctx;
    _Atomic int64_t n;
    _Atomic uint32_t nchunks;
    _Atomic uint64_t gen;  /* bumped to publish a job */
    _Atomic uint32_t done; /* chunks finished in the current generation */
    /* Generation that last claimed each chunk; claiming is a CAS from an
     * older value, so a chunk runs once and only under its own job. */
    _Atomic uint64_t chunk_gen[MAX_THREADS];
} job;

static int pool_threads = 1; /* participants, caller included; set once */
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t call_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t sleep_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sleep_cond = PTHREAD_COND_INITIALIZER;
static _Atomic int sleepers;
static _Atomic int forked_child; /* pool threads do not survive fork() */
static _Thread_local int in_pool;

static void chunk_bounds(int64_t n, uint32_t nchunks, uint32_t k, int64_t *b, int64_t *e) {
    int64_t q = n / nchunks, r = n % nchunks;
    *b = (int64_t)k * q + ((int64_t)k < r ? (int64_t)k : r);
    *e = *b + q + ((int64_t)k < r ? 1 : 0);
}

/* Claim and run chunks of generation gen until none are left, starting at
 * chunk `self` so that back-to-back jobs over the same data keep each chunk
 * on the same core (and in its cache). */
static void run_chunks(uint64_t gen, int self) {
    /* seq_cst loads: seeing any field of a newer job implies seeing the
     * chunk_gen refresh the publisher did before writing it (see below). */
    vt_range_fn fn = atomic_load(&job.fn);
    void *ctx = atomic_load(&job.ctx);
    int64_t n = atomic_load(&job.n);
    uint32_t nchunks = atomic_load(&job.nchunks);
    if (atomic_load_explicit(&job.gen, memory_order_acquire) != gen || nchunks == 0) return;
    for (uint32_t t = 0; t < nchunks; t++) {
        uint32_t k = ((uint32_t)self + t) % nchunks;
        uint64_t v = atomic_load(&job.chunk_gen[k]);
        if (v > gen) return; /* a newer job is running: we are stale */
        if (v == gen) continue;
        if (!atomic_compare_exchange_strong_explicit(&job.chunk_gen[k], &v, gen, memory_order_acq_rel,
                                                     memory_order_acquire))
            continue;
        /* A claim under gen proves the fields read above belong to gen:
         * the next job cannot be published before this chunk ends. */
        int64_t b, e;
        chunk_bounds(n, nchunks, k, &b, &e);
        fn(ctx, b, e);
        atomic_fetch_add_explicit(&job.done, 1, memory_order_release);
    }
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void *worker_main(void *arg) {
    int self = (int)(intptr_t)arg;
    in_pool = 1;
    vt_place_thread(self);
    uint64_t seen = 0;
    for (;;) {
        uint64_t gen = atomic_load_explicit(&job.gen, memory_order_acquire);
        if (gen == seen) {
            int64_t deadline = now_ns() + SPIN_NS;
            while ((gen = atomic_load_explicit(&job.gen, memory_order_acquire)) == seen) {
                vt_poll_yield();
                if (now_ns() > deadline) break;
            }
        }
        if (gen == seen) {
            pthread_mutex_lock(&sleep_mutex);
            atomic_fetch_add(&sleepers, 1); /* seq_cst pairs with the publisher's store + load */
            while ((gen = atomic_load(&job.gen)) == seen) pthread_cond_wait(&sleep_cond, &sleep_mutex);
            atomic_fetch_sub(&sleepers, 1);
            pthread_mutex_unlock(&sleep_mutex);
        }
        seen = gen;
        run_chunks(gen, self);
    }
    return NULL;
}

static void atfork_child(void) { atomic_store(&forked_child, 1); }

/* Placement. The pool's participants are the calling thread (a device
 * queue's worker, which takes chunk 0) and the workers (chunk i for worker
 * i); the application's own threads wait beside them, polling. Left to the
 * scheduler, on a machine with as many cores as participants, a polling
 * waiter counts as a full load, so the two busy participants could share
 * a core for a whole run: sum(dim=-1) over 2048x512 f32 took 140-200 us in
 * such a process and 50 us in another, an add 280 against 140 us. So when
 * the pool is as wide as the CPUs this process may use, worker i and the
 * first queue worker of device d stay on CPU i and d of that set: each
 * chunk keeps its core and its cache across ops. A narrower pool (the user
 * or a launcher asked for fewer threads), VTPU_PIN_THREADS=0, or another OS
 * leaves placement to the scheduler. */
static void pool_init(void);
#ifdef __linux__
static cpu_set_t allowed_cpus;
#endif
static int allowed_count; /* CPUs this process may run on (0: unknown) */
static int pin_threads;

static void read_allowed_cpus(void) {
#ifdef __linux__
    CPU_ZERO(&allowed_cpus);
    if (sched_getaffinity(0, sizeof allowed_cpus, &allowed_cpus) == 0) allowed_count = CPU_COUNT(&allowed_cpus);
#endif
}

void vt_place_thread(int slot) {
    pthread_once(&pool_once, pool_init);
#ifdef __linux__
    if (!pin_threads || slot < 0) return;
    int want = slot % allowed_count;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &allowed_cpus) || want-- > 0) continue;
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        pthread_setaffinity_np(pthread_self(), sizeof one, &one); /* a refusal leaves the thread where it was */
        return;
    }
#endif
}

static void pool_init(void) {
    long n = 0;
    const char *env = getenv("VTPU_NUM_THREADS");
    if (env && *env) {
        char *end;
        n = strtol(env, &end, 10);
        if (*end || n < 1) n = 0;
    }
    read_allowed_cpus();
    if (n <= 0) n = allowed_count > 0 ? allowed_count : sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    if (n > MAX_THREADS) n = MAX_THREADS;
    const char *pin = getenv("VTPU_PIN_THREADS");
    pin_threads = n >= 2 && n == allowed_count && !(pin && strcmp(pin, "0") == 0);
    pthread_atfork(NULL, NULL, atfork_child);
    int started = 1;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    for (long i = 1; i < n; i++) {
        pthread_t th;
        if (pthread_create(&th, &attr, worker_main, (void *)(intptr_t)i) != 0) break;
#ifdef __linux__
        char name[16];
        snprintf(name, sizeof name, "vtpu-pool-%ld", i);
        pthread_setname_np(th, name);
#endif
        started++;
    }
    pthread_attr_destroy(&attr);
    pool_threads = started;
}

int vt_num_threads(void) {
    pthread_once(&pool_once, pool_init);
    return pool_threads;
}

/* The last-level cache the pool's threads share: sysfs' highest cache level
 * of cpu0 (what this machine or VM has), else sysconf's, else 32 MiB. */
static int64_t llc_bytes(void) {
    int64_t best = 0;
    int best_level = 0;
    for (int i = 0; i < 8; i++) {
        char path[96], buf[32];
        int level = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (!f) break;
        if (fscanf(f, "%d", &level) != 1) level = 0;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        f = fopen(path, "r");
        if (!f) continue;
        long long v = 0;
        char unit = 0;
        if (fgets(buf, sizeof buf, f) && sscanf(buf, "%lld%c", &v, &unit) >= 1 && level >= best_level) {
            best_level = level;
            best = v * (unit == 'K' ? 1024 : unit == 'M' ? 1024 * 1024 : 1);
        }
        fclose(f);
    }
#ifdef _SC_LEVEL3_CACHE_SIZE
    if (best <= 0) best = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
    return best > 0 ? best : (int64_t)32 << 20;
}

static pthread_once_t stream_once = PTHREAD_ONCE_INIT;
static int64_t stream_default;
static _Atomic int64_t stream_bytes;

static void stream_init(void) {
    stream_default = llc_bytes() / vt_num_threads();
    atomic_store(&stream_bytes, stream_default);
}

int64_t vt_stream_store_bytes(void) {
    pthread_once(&stream_once, stream_init);
    return atomic_load_explicit(&stream_bytes, memory_order_relaxed);
}

void vt_stream_store_force(int64_t bytes) {
    pthread_once(&stream_once, stream_init);
    atomic_store(&stream_bytes, bytes > 0 ? bytes : stream_default);
}

void vt_parallel_for(int64_t n, int64_t grain, vt_range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (n <= grain || in_pool) {
        fn(ctx, 0, n);
        return;
    }
    int nthreads = vt_num_threads();
    if (nthreads <= 1 || atomic_load_explicit(&forked_child, memory_order_relaxed)) {
        fn(ctx, 0, n);
        return;
    }
    int64_t want = n / grain;
    uint32_t nchunks = (uint32_t)(want < nthreads ? want : nthreads);
    if (nchunks <= 1) {
        fn(ctx, 0, n);
        return;
    }

    pthread_mutex_lock(&call_mutex);
    in_pool = 1;
    uint64_t gen = atomic_load_explicit(&job.gen, memory_order_relaxed) + 1;
    /* Chunks the previous job did not use still carry older generations; a
     * worker still holding that job's generation could claim them with
     * fields it read from this one. Raise them first, then write the fields
     * (all seq_cst), so such a worker either reads consistent old fields or
     * sees no claimable chunk. */
    for (int k = 0; k < nthreads; k++)
        if (atomic_load(&job.chunk_gen[k]) < gen - 1) atomic_store(&job.chunk_gen[k], gen - 1);
    atomic_store(&job.fn, fn);
    atomic_store(&job.ctx, ctx);
    atomic_store(&job.n, n);
    atomic_store(&job.nchunks, nchunks);
    atomic_store(&job.done, 0);
    atomic_store(&job.gen, gen); /* seq_cst: publishes the fields above */
    if (atomic_load(&sleepers) > 0) {
        pthread_mutex_lock(&sleep_mutex);
        pthread_cond_broadcast(&sleep_cond);
        pthread_mutex_unlock(&sleep_mutex);
    }
    run_chunks(gen, 0);
    /* Whatever is left is running on workers; chunks are even, so this wait
     * is about one chunk's imbalance. */
    while (atomic_load_explicit(&job.done, memory_order_acquire) < nchunks) vt_poll_yield();
    in_pool = 0;
    pthread_mutex_unlock(&call_mutex);
}
