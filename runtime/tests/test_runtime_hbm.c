/* test_runtime_hbm.c — the caching allocator: stats with PyTorch's meaning,
 * reuse of cached blocks, out-of-memory at a small capacity (test hook),
 * retry after emptying the cache, the OOM message and debug red zones.
 * Checks are deltas from a baseline: other tests may hold blocks. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "internal.h"
#include "test.h"

#define MIB ((size_t)1024 * 1024)
#define GIB ((uint64_t)1024 * MIB)

/* Strict for the test's duration: under TPU_LAUNCH_BLOCKING=1 (Debug) blocks
 * get red zones and are never cached. */
static void begin(void) {
    CHECK_OK(vt_init());
    vt_set_thread_eager_mode(VT_EAGER_STRICT);
}

static vt_hbm_stats stats(void) {
    vt_hbm_stats s;
    memset(&s, 0, sizeof s);
    CHECK_OK(vt_hbm_get_stats(0, &s));
    return s;
}

TEST(runtime_hbm_alloc_free_stats) {
    begin();
    CHECK_OK(vt_hbm_empty_cache(0));
    vt_hbm_stats b = stats();
    uint64_t free0, total;
    CHECK_OK(vt_hbm_mem_info(0, &free0, &total));
    CHECK(total == b.capacity && total > 0 && free0 <= total);

    void *p = NULL;
    CHECK_OK(vt_hbm_alloc(0, 1000, &p));
    CHECK(p != NULL && ((uintptr_t)p & 63) == 0);
    memset(p, 0xab, 1000);
    int dev = -1;
    CHECK(vt_hbm_owns(p, &dev) && dev == 0);
    CHECK(!vt_hbm_owns((char *)p + 64, NULL)); /* interior pointers are not block starts */
    vt_hbm_stats a = stats();
    CHECK(a.allocated_bytes.current - b.allocated_bytes.current == 1024); /* rounded to 512 B */
    CHECK(a.reserved_bytes.current - b.reserved_bytes.current == 1024);
    CHECK(a.allocation.current - b.allocation.current == 1);
    CHECK(a.segment.current - b.segment.current == 1);
    CHECK(a.allocated_bytes.allocated - b.allocated_bytes.allocated == 1024);
    uint64_t free1;
    CHECK_OK(vt_hbm_mem_info(0, &free1, NULL));
    CHECK(free0 - free1 == 1024);

    vt_hbm_free(0, p);
    vt_hbm_stats f = stats();
    CHECK(f.allocated_bytes.current == b.allocated_bytes.current);
    CHECK(f.allocation.current == b.allocation.current);
    CHECK(f.allocated_bytes.freed - b.allocated_bytes.freed == 1024);
    CHECK(f.reserved_bytes.current - b.reserved_bytes.current == 1024); /* cached */
    CHECK(!vt_hbm_owns(p, NULL));
    CHECK_OK(vt_hbm_mem_info(0, &free1, NULL));
    CHECK(free1 == free0); /* cached bytes count as free */

    CHECK_OK(vt_hbm_empty_cache(0));
    f = stats();
    CHECK(f.reserved_bytes.current == b.reserved_bytes.current);
    CHECK(f.segment.current == b.segment.current);
    CHECK(f.reserved_bytes.freed - b.reserved_bytes.freed == 1024);
    vt_set_thread_eager_mode(-1);
}

TEST(runtime_hbm_zero_null_and_foreign_pointers) {
    begin();
    void *p = (void *)1;
    CHECK_OK(vt_hbm_alloc(0, 0, &p));
    CHECK(p == NULL);
    vt_hbm_free(0, NULL);
    vt_hbm_stats b = stats();
    int local = 0;
    vt_clear_error();
    vt_hbm_free(0, &local); /* not ours: reported, ignored */
    CHECK(strstr(vt_last_error(), "not a live allocation"));
    void *m = malloc(64);
    vt_hbm_free(0, m);
    free(m);
    CHECK_OK(vt_hbm_alloc(0, 100, &p));
    vt_hbm_free(0, p);
    vt_clear_error();
    vt_hbm_free(0, p); /* double free */
    CHECK(strstr(vt_last_error(), "not a live allocation"));
    vt_hbm_stats a = stats();
    CHECK(a.allocated_bytes.current == b.allocated_bytes.current && a.allocation.current == b.allocation.current);
    CHECK_STATUS(vt_hbm_alloc(vt_device_count(), 16, &p), VT_ERR_INDEX);
    CHECK_STATUS(vt_hbm_alloc(0, 16, NULL), VT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(vt_hbm_get_stats(0, NULL), VT_ERR_INVALID_ARGUMENT);
    vt_hbm_free(vt_device_count() + 3, (void *)&local); /* bad device: no crash */
    vt_set_thread_eager_mode(-1);
}

TEST(runtime_hbm_caching_reuse) {
    begin();
    void *p, *q;
    CHECK_OK(vt_hbm_alloc(0, 3000, &p));
    vt_hbm_free(0, p);
    vt_hbm_stats b = stats();
    CHECK_OK(vt_hbm_alloc(0, 2900, &q)); /* same 3072-byte class */
    CHECK(q == p);
    vt_hbm_stats a = stats();
    CHECK(a.segment.current == b.segment.current && a.reserved_bytes.current == b.reserved_bytes.current);
    vt_hbm_free(0, q);

    /* Large blocks (mmap) are cached the same way. */
    CHECK_OK(vt_hbm_alloc(0, 3 * MIB, &p));
    memset(p, 1, 3 * MIB);
    vt_hbm_free(0, p);
    CHECK_OK(vt_hbm_alloc(0, 3 * MIB - 100, &q));
    CHECK(q == p);
    vt_hbm_free(0, q);
    a = stats();
    CHECK_OK(vt_hbm_alloc(0, 100 * MIB + 1, &p)); /* 2 MiB steps above 32 MiB */
    vt_hbm_stats c = stats();
    CHECK(c.allocated_bytes.current - a.allocated_bytes.current == (int64_t)(102 * MIB));
    vt_hbm_free(0, p);
    CHECK_OK(vt_hbm_empty_cache(0));
    vt_set_thread_eager_mode(-1);
}

/* Blocks of 2 MB and more start on a 2 MB boundary (the host backs only
 * aligned 2 MB ranges with huge pages), and all of each stays usable. */
TEST(runtime_hbm_large_blocks_start_on_huge_page_boundaries) {
    begin();
    CHECK_OK(vt_hbm_empty_cache(0));
    const size_t sizes[] = {2 * MIB, 2 * MIB + 1, 5 * MIB - 3, 40 * MIB + 4096};
    void *p[4];
    for (int i = 0; i < 4; i++) {
        CHECK_OK(vt_hbm_alloc(0, sizes[i], &p[i]));
        CHECK_MSG(((uintptr_t)p[i] & (2 * MIB - 1)) == 0, "%zu bytes at %p", sizes[i], p[i]);
        memset(p[i], 0x5a, sizes[i]);
    }
    for (int i = 0; i < 4; i++) {
        const unsigned char *b = p[i];
        CHECK(b[0] == 0x5a && b[sizes[i] - 1] == 0x5a);
        vt_hbm_free(0, p[i]);
    }
    CHECK_OK(vt_hbm_empty_cache(0));
    vt_set_thread_eager_mode(-1);
}

/* The address index that finds the block holding a view, against a plain
 * list of what is live: 600 blocks of mixed sizes (past the index's first
 * 256 entries), a third freed, then views at, inside, across and past
 * each block's bounds, and host memory. Blocks freed here stay cached:
 * still indexed, but not live, so a view of one is refused. */
TEST(runtime_hbm_index_finds_the_holding_block) {
    begin();
    enum { N = 600 };
    static void *ptr[N];
    static size_t len[N];
    static int live[N];
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < N; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        len[i] = 1 + (size_t)(rng >> 33) % 20000;
        CHECK_OK(vt_hbm_alloc(0, len[i], &ptr[i]));
        live[i] = 1;
    }
    for (int i = 0; i < N; i += 3) {
        vt_hbm_free(0, ptr[i]);
        live[i] = 0;
    }
    int where;
    vt_access a;
    for (int i = 0; i < N; i++) {
        const uintptr_t lo = (uintptr_t)ptr[i], hi = lo + len[i];
        const uintptr_t views[][2] = {{lo, hi}, {lo, lo + 1}, {hi - 1, hi}, {lo + len[i] / 2, hi}, {lo, hi + 1}};
        for (int v = 0; v < 5; v++) {
            /* the model: inside block i while it is live, and no other block
             * can hold bytes of block i's range */
            const int inside = views[v][1] <= hi;
            const int want = live[i] && inside;
            vt_status s = vt_hbm_resolve(0, views[v][0], views[v][1], &a, &where);
            CHECK_MSG((s == VT_OK) == want, "block %d (%zu bytes, %s) view %d: status %d", i, len[i],
                      live[i] ? "live" : "freed", v, (int)s);
            if (s == VT_OK) CHECK(where == 0 && vt_hbm_access_live(&a));
            vt_clear_error();
        }
    }
    static char host[64];
    CHECK(vt_hbm_resolve(0, (uintptr_t)host, (uintptr_t)host + 8, &a, &where) != VT_OK);
    CHECK(where == -1);
    vt_clear_error();
    for (int i = 0; i < N; i++)
        if (live[i]) vt_hbm_free(0, ptr[i]);
    CHECK_OK(vt_hbm_empty_cache(0));
    vt_set_thread_eager_mode(-1);
}

TEST(runtime_hbm_peak_and_reset) {
    begin();
    CHECK_OK(vt_hbm_reset_peak(0));
    vt_hbm_stats b = stats();
    CHECK(b.allocated_bytes.peak == b.allocated_bytes.current);
    void *p[4];
    for (int i = 0; i < 4; i++) CHECK_OK(vt_hbm_alloc(0, 4096, &p[i]));
    for (int i = 0; i < 4; i++) vt_hbm_free(0, p[i]);
    vt_hbm_stats a = stats();
    CHECK(a.allocated_bytes.peak - b.allocated_bytes.current == 4 * 4096);
    CHECK(a.allocation.peak - b.allocation.current == 4);
    CHECK(a.allocated_bytes.current == b.allocated_bytes.current);
    CHECK_OK(vt_hbm_reset_peak(0));
    a = stats();
    CHECK(a.allocated_bytes.peak == a.allocated_bytes.current);
    CHECK(a.reserved_bytes.peak == a.reserved_bytes.current);
    CHECK_OK(vt_hbm_reset_accumulated(0));
    a = stats();
    CHECK(a.allocated_bytes.allocated == 0 && a.allocated_bytes.freed == 0 && a.num_ooms == 0);
    CHECK(a.num_alloc_retries == 0 && a.segment.allocated == 0);
    CHECK(a.allocated_bytes.current == b.allocated_bytes.current); /* current untouched */
    CHECK_OK(vt_hbm_empty_cache(0));
    vt_set_thread_eager_mode(-1);
}

TEST(runtime_hbm_oom_and_retry) {
    begin();
    CHECK_OK(vt_hbm_empty_cache(0));
    vt_hbm_stats b = stats();
    uint64_t live = (uint64_t)b.reserved_bytes.current;
    CHECK_OK(vt_hbm_set_capacity_for_test(0, live + 8 * MIB));
    void *p = NULL, *q = NULL;
    CHECK_OK(vt_hbm_alloc(0, 6 * MIB, &p));
    CHECK_STATUS(vt_hbm_alloc(0, 4 * MIB, &q), VT_ERR_OUT_OF_MEMORY);
    CHECK(q == NULL);
    char want[128];
    snprintf(want, sizeof want, "TPU out of memory. Tried to allocate 4.00 MiB. TPU 0 (%s) has a total capacity of ",
             vt_chip()->name);
    CHECK_MSG(strncmp(vt_last_error(), want, strlen(want)) == 0, "got '%s'", vt_last_error());
    CHECK(strstr(vt_last_error(), "of which 2.00 MiB is free"));
    vt_hbm_stats a = stats();
    CHECK(a.num_ooms - b.num_ooms == 1);

    /* The 6 MiB block is cached but not the 4 MiB class: the allocator
     * empties its cache and retries. */
    vt_hbm_free(0, p);
    CHECK_OK(vt_hbm_alloc(0, 4 * MIB, &q));
    a = stats();
    CHECK(a.num_alloc_retries - b.num_alloc_retries == 1);
    CHECK(a.reserved_bytes.current - b.reserved_bytes.current == (int64_t)(4 * MIB));
    vt_hbm_free(0, q);

    /* Small blocks also count against the capacity. */
    void *blocks[64];
    int n = 0;
    vt_status s = VT_OK;
    while (n < 64 && (s = vt_hbm_alloc(0, 512 * 1024, &blocks[n])) == VT_OK) n++;
    CHECK(s == VT_ERR_OUT_OF_MEMORY && n == 16);
    for (int i = 0; i < n; i++) vt_hbm_free(0, blocks[i]);
    CHECK_OK(vt_hbm_set_capacity_for_test(0, 0));
    CHECK_OK(vt_hbm_empty_cache(0));
    a = stats();
    CHECK(a.reserved_bytes.current == b.reserved_bytes.current && a.capacity == b.capacity);
    vt_set_thread_eager_mode(-1);
}

TEST(runtime_hbm_huge_request_message) {
    begin();
    vt_hbm_stats b = stats();
    CHECK_OK(vt_hbm_set_capacity_for_test(0, 32000ull * MIB));
    void *p = (void *)1;
    CHECK_STATUS(vt_hbm_alloc(0, (size_t)(40 * GIB), &p), VT_ERR_OUT_OF_MEMORY);
    CHECK(p == NULL);
    char want[160];
    snprintf(want, sizeof want,
             "TPU out of memory. Tried to allocate 40.00 GiB. TPU 0 (%s) has a total capacity of 31.25 GiB of which ",
             vt_chip()->name);
    const char *m = vt_last_error();
    CHECK_MSG(strncmp(m, want, strlen(want)) == 0, "got '%s'", m);
    CHECK(strstr(m, " is free. Of the allocated memory ") && strstr(m, " is allocated by vtpu and "));
    CHECK(strstr(m, " is reserved but unallocated."));
    if (b.allocated_bytes.current == 0 && b.reserved_bytes.current == 0)
        CHECK(strstr(m, "of which 31.25 GiB is free. Of the allocated memory 0 bytes is allocated by vtpu and 0 "
                        "bytes is reserved but unallocated."));
    CHECK_STATUS(vt_hbm_alloc(0, SIZE_MAX, &p), VT_ERR_OUT_OF_MEMORY);
    CHECK_OK(vt_hbm_set_capacity_for_test(0, 0));
    vt_hbm_stats a = stats();
    CHECK(a.num_ooms - b.num_ooms == 2 && a.reserved_bytes.current == b.reserved_bytes.current);
    vt_set_thread_eager_mode(-1);
}

/* Run f with stderr sent to a temporary file; return what it wrote. */
static void capture_stderr(void (*f)(void *), void *arg, char *out, size_t len) {
    fflush(stderr);
    FILE *tmp = tmpfile();
    int saved = dup(2);
    dup2(fileno(tmp), 2);
    f(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t n = fread(out, 1, len - 1, tmp);
    out[n] = '\0';
    fclose(tmp);
}

static void free_block(void *p) { vt_hbm_free(0, p); }

TEST(runtime_hbm_debug_red_zones) {
    begin();
    vt_set_thread_eager_mode(VT_EAGER_DEBUG);
    char msg[512];
    unsigned char *p = NULL;
    CHECK_OK(vt_hbm_alloc(0, 100, (void **)&p));
    CHECK(((uintptr_t)p & 63) == 0);
    memset(p, 0x11, 100);
    capture_stderr(free_block, p, msg, sizeof msg);
    CHECK_MSG(msg[0] == '\0', "unexpected: %s", msg);

    CHECK_OK(vt_hbm_alloc(0, 100, (void **)&p));
    p[100] = 0; /* one past the end: lands in the tail red zone */
    capture_stderr(free_block, p, msg, sizeof msg);
    CHECK_MSG(strstr(msg, "red zone corrupted after block") && strstr(msg, "100 bytes"), "got '%s'", msg);

    CHECK_OK(vt_hbm_alloc(0, 2 * MIB, (void **)&p)); /* mmap path */
    p[-1] = 0;
    capture_stderr(free_block, p, msg, sizeof msg);
    CHECK_MSG(strstr(msg, "red zone corrupted before block"), "got '%s'", msg);
    vt_set_thread_eager_mode(VT_EAGER_STRICT);

    /* Strict-mode blocks have no red zones and are cached as usual. */
    vt_hbm_stats b = stats();
    CHECK_OK(vt_hbm_alloc(0, 100, (void **)&p));
    vt_hbm_free(0, p);
    vt_hbm_stats a = stats();
    CHECK(a.allocated_bytes.current == b.allocated_bytes.current);
    vt_set_thread_eager_mode(-1);
}

static void *alloc_worker(void *arg) {
    unsigned seed = (unsigned)(uintptr_t)arg;
    void *held[8] = {0};
    for (int i = 0; i < 2000; i++) {
        seed = seed * 1103515245u + 12345u;
        int k = (int)((seed >> 16) % 8);
        if (held[k]) {
            vt_hbm_free(0, held[k]);
            held[k] = NULL;
        } else {
            size_t sz = 1 + (seed >> 8) % (i % 50 == 0 ? 3 * MIB : 20000);
            if (vt_hbm_alloc(0, sz, &held[k]) == VT_OK) memset(held[k], k, sz < 64 ? sz : 64);
        }
    }
    for (int k = 0; k < 8; k++) vt_hbm_free(0, held[k]);
    return NULL;
}

TEST(runtime_hbm_threads) {
    begin();
    vt_hbm_stats b = stats();
    pthread_t th[4];
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, alloc_worker, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    vt_hbm_stats a = stats();
    CHECK(a.allocated_bytes.current == b.allocated_bytes.current);
    CHECK(a.allocation.current == b.allocation.current);
    CHECK_OK(vt_hbm_empty_cache(0));
    a = stats();
    CHECK(a.reserved_bytes.current <= b.reserved_bytes.current);
    vt_set_thread_eager_mode(-1);
}
