/* test_cache.c — the compile cache (graph/cache.c): tiers, checks of entry
 * files, writes that fail, and one compile per key across processes. The
 * tests fork processes, so their names keep them out of the TSan run. */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"
#include "vtpu/cache.h"

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    return remove(path);
}

static void rm_tree(const char *dir) { nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static void make_tmp(char *dir, size_t n) {
    snprintf(dir, n, "/tmp/vtpu-cache-test-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    chmod(dir, 0755);
}

static void payload(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(seed * 131 + i * 7 + (i >> 8));
}

/* get, checking it hits tier want with exactly p[0..n). */
static void expect_hit(const char *key, const unsigned char *p, size_t n, int want) {
    void *data;
    size_t len;
    int tier;
    CHECK_OK(vt_cache_get(key, &data, &len, &tier));
    CHECK_MSG(tier == want, "%s: tier %d, want %d", key, tier, want);
    CHECK(data != NULL && len == n && memcmp(data, p, n) == 0);
    vt_cache_release(data);
}

static void expect_miss(const char *key) {
    void *data;
    size_t len;
    int tier;
    CHECK_OK(vt_cache_get(key, &data, &len, &tier));
    CHECK_MSG(tier == 0 && data == NULL, "%s: hit tier %d, want a miss", key, tier);
    vt_cache_release(data);
}

static void entry_path(char *out, size_t n, const char *dir, const char *key) {
    snprintf(out, n, "%s/%s.bin", dir, key);
}

TEST(cache_tiers_hand_entries_down) {
    char root[64], d2[128], d3[128], path[256];
    make_tmp(root, sizeof root);
    snprintf(d2, sizeof d2, "%s/host/a/b", root); /* created on first write */
    snprintf(d3, sizeof d3, "%s/shared", root);
    unsigned char p[5000];
    payload(p, sizeof p, 1);
    CHECK_OK(vt_cache_configure(d2, d3));
    CHECK_OK(vt_cache_clear(0));
    CHECK_OK(vt_cache_put("k1", p, sizeof p, 1234));
    expect_hit("k1", p, sizeof p, 1);
    CHECK_OK(vt_cache_clear(0)); /* as a new process on this host */
    expect_hit("k1", p, sizeof p, 2);
    expect_hit("k1", p, sizeof p, 1);
    vt_cache_entry_stats es;
    CHECK_OK(vt_cache_entry_at(0, &es));
    CHECK(strcmp(es.key, "k1") == 0 && es.read_count == 2 && es.compile_us == 1234 && es.last_read_us > 0);
    CHECK_STATUS(vt_cache_entry_at(1, &es), VT_ERR_INDEX);
    CHECK_OK(vt_cache_clear(0)); /* as a process on another host: only tier 3 has it */
    entry_path(path, sizeof path, d2, "k1");
    CHECK(unlink(path) == 0);
    expect_hit("k1", p, sizeof p, 3);
    CHECK(access(path, F_OK) == 0); /* copied into this host's tier */
    CHECK_OK(vt_cache_clear(0));
    expect_hit("k1", p, sizeof p, 2);
    expect_miss("k2");
    vt_cache_stats st;
    vt_cache_get_stats(&st);
    CHECK(st.requests == 2 && st.hits == 1 && st.tier_hits[2] == 1 && st.discarded == 0);
    CHECK_OK(vt_cache_put("empty", p, 0, 0)); /* an empty payload is an entry */
    CHECK_OK(vt_cache_clear(0));
    expect_hit("empty", p, 0, 2);
    CHECK_OK(vt_cache_clear(1)); /* tier 2's entries go, tier 3's stay */
    CHECK(access(path, F_OK) != 0);
    expect_hit("k1", p, sizeof p, 3);
    CHECK_OK(vt_cache_configure(NULL, NULL));
    CHECK_OK(vt_cache_clear(0));
    expect_miss("k1");
    rm_tree(root);
}

TEST(cache_rejects_bad_keys) {
    void *data;
    size_t len;
    int tier, h;
    char long_key[VT_CACHE_KEY_MAX + 2];
    memset(long_key, 'a', sizeof long_key - 1);
    long_key[sizeof long_key - 1] = 0;
    const char *bad[] = {"", "../x", "a/b", "a.b", "sp ace", long_key};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK_STATUS(vt_cache_get(bad[i], &data, &len, &tier), VT_ERR_INVALID_ARGUMENT);
        CHECK_STATUS(vt_cache_put(bad[i], "x", 1, 0), VT_ERR_INVALID_ARGUMENT);
        CHECK_STATUS(vt_cache_lock(bad[i], -1, &h), VT_ERR_INVALID_ARGUMENT);
    }
    CHECK_STATUS(vt_cache_get(NULL, &data, &len, &tier), VT_ERR_INVALID_ARGUMENT);
    long_key[VT_CACHE_KEY_MAX] = 0;
    CHECK_OK(vt_cache_put(long_key, "x", 1, 0));
    CHECK_OK(vt_cache_clear(0));
}

/* Rewrites the entry file of key with f applied; then a new process's get
 * must miss, count one discarded entry and delete the file. */
static void damaged(const char *dir, const char *key, void (*f)(const char *path, size_t size)) {
    char path[256];
    entry_path(path, sizeof path, dir, key);
    struct stat st;
    CHECK(stat(path, &st) == 0);
    f(path, (size_t)st.st_size);
    CHECK_OK(vt_cache_clear(0));
    expect_miss(key);
    vt_cache_stats s;
    vt_cache_get_stats(&s);
    CHECK_MSG(s.discarded == 1, "%s: discarded %llu", key, (unsigned long long)s.discarded);
    CHECK(access(path, F_OK) != 0);
}

static void flip_byte(const char *path, size_t at) {
    int fd = open(path, O_RDWR);
    unsigned char c;
    CHECK(pread(fd, &c, 1, (off_t)at) == 1);
    c ^= 0x10;
    CHECK(pwrite(fd, &c, 1, (off_t)at) == 1);
    close(fd);
}
static void flip_payload(const char *path, size_t size) { flip_byte(path, size - 100); }
static void flip_header(const char *path, size_t size) { flip_byte(path, 26); } /* the compile time */
static void truncate_half(const char *path, size_t size) { CHECK(truncate(path, (off_t)(size / 2)) == 0); }
static void truncate_empty(const char *path, size_t size) { CHECK(truncate(path, 0) == 0); }
static void grow(const char *path, size_t size) { CHECK(truncate(path, (off_t)(size + 3)) == 0); }

TEST(cache_discards_damaged_entries) {
    char dir[64];
    make_tmp(dir, sizeof dir);
    unsigned char p[3000];
    payload(p, sizeof p, 2);
    CHECK_OK(vt_cache_configure(dir, NULL));
    void (*damage[])(const char *, size_t) = {flip_payload, flip_header, truncate_half, truncate_empty, grow};
    for (size_t i = 0; i < sizeof damage / sizeof *damage; i++) {
        CHECK_OK(vt_cache_put("key", p, sizeof p, 7));
        damaged(dir, "key", damage[i]);
        CHECK_OK(vt_cache_put("key", p, sizeof p, 7)); /* rebuilt, and good again */
        CHECK_OK(vt_cache_clear(0));
        expect_hit("key", p, sizeof p, 2);
    }
    /* another key's entry under this key's name */
    char a[256], b[256];
    CHECK_OK(vt_cache_put("other", p, sizeof p, 7));
    entry_path(a, sizeof a, dir, "other");
    entry_path(b, sizeof b, dir, "key");
    CHECK(rename(a, b) == 0);
    CHECK_OK(vt_cache_clear(0));
    expect_miss("key");
    CHECK(access(b, F_OK) != 0);
    CHECK_OK(vt_cache_configure(NULL, NULL));
    CHECK_OK(vt_cache_clear(0));
    rm_tree(dir);
}

/* No temporary file of a failed write stays behind. */
static int tmp_files(const char *dir) {
    int n = 0;
    DIR *d = opendir(dir);
    for (struct dirent *de; d && (de = readdir(d));) {
        size_t len = strlen(de->d_name);
        n += len > 4 && strcmp(de->d_name + len - 4, ".tmp") == 0;
    }
    if (d) closedir(d);
    return n;
}

TEST(cache_write_failures_degrade_to_no_cache) {
    char root[64], file[128], under[160];
    make_tmp(root, sizeof root);
    snprintf(file, sizeof file, "%s/file", root);
    FILE *f = fopen(file, "w");
    CHECK(f != NULL);
    fclose(f);
    snprintf(under, sizeof under, "%s/cache", file); /* a directory that cannot exist */
    unsigned char p[2000];
    payload(p, sizeof p, 3);
    CHECK_OK(vt_cache_configure(under, NULL));
    CHECK_OK(vt_cache_clear(0));
    CHECK_STATUS(vt_cache_put("a", p, sizeof p, 1), VT_ERR_UNSUPPORTED);
    CHECK(strstr(vt_last_error(), under) != NULL && strstr(vt_last_error(), "Not a directory") != NULL);
    CHECK_OK(vt_cache_put("b", p, sizeof p, 1)); /* reported once */
    expect_hit("a", p, sizeof p, 1);             /* tier 1 still has it */
    int h;
    CHECK_OK(vt_cache_lock("a", -1, &h));
    CHECK(h == -1);
    vt_cache_stats st;
    vt_cache_get_stats(&st);
    CHECK(st.write_errors == 1);

    /* a full filesystem (the file size limit: writes fail part-way) and a
     * read-only directory (written by someone else), in children */
    char dir[128];
    snprintf(dir, sizeof dir, "%s/full", root);
    for (int kind = 0; kind < 2; kind++) {
        CHECK(mkdir(dir, kind ? 0555 : 0755) == 0);
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            int bad = 0;
            if (kind == 0) {
                signal(SIGXFSZ, SIG_IGN);
                struct rlimit rl = {1000, 1000};
                setrlimit(RLIMIT_FSIZE, &rl);
            } else if (geteuid() == 0 && setuid(65534) != 0) {
                _exit(0); /* cannot drop root: nothing to check */
            }
            vt_cache_configure(dir, NULL);
            vt_cache_clear(0);
            if (vt_cache_put("a", p, sizeof p, 1) != VT_ERR_UNSUPPORTED) bad |= 1;
            if (!strstr(vt_last_error(), kind ? "Permission denied" : "File too large")) bad |= 2;
            void *data;
            size_t len;
            int tier;
            if (vt_cache_get("a", &data, &len, &tier) != VT_OK || tier != 1) bad |= 4;
            vt_cache_release(data);
            _exit(bad);
        }
        int status = 0;
        CHECK(waitpid(pid, &status, 0) == pid);
        CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "kind %d: status %#x", kind, status);
        CHECK(!tmp_files(dir));
        rmdir(dir);
    }
    CHECK_OK(vt_cache_configure(NULL, NULL));
    CHECK_OK(vt_cache_clear(0));
    rm_tree(root);
}

/* Processes that miss the same key at once: the lock lets one compile, the
 * others wait and then read its entry. */
TEST(cache_lock_compiles_a_key_once) {
    char dir[64], log[128];
    make_tmp(dir, sizeof dir);
    snprintf(log, sizeof log, "%s/compiles.log", dir);
    unsigned char p[4096];
    payload(p, sizeof p, 4);
    enum { N = 4 };
    pid_t pids[N];
    fflush(NULL);
    for (int i = 0; i < N; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            int bad = 0, h;
            void *data;
            size_t len;
            int tier;
            vt_cache_configure(dir, NULL);
            vt_cache_clear(0);
            vt_cache_lock("shared", -1, &h);
            if (h < 0) bad |= 1;
            vt_cache_get("shared", &data, &len, &tier);
            if (!data) {
                int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
                if (write(fd, "c\n", 2) != 2) bad |= 2;
                close(fd);
                usleep(50000); /* a slow compile: the others queue behind the lock */
                if (vt_cache_put("shared", p, sizeof p, 50000) != VT_OK) bad |= 4;
            } else if (tier != 2 || len != sizeof p || memcmp(data, p, len) != 0) {
                bad |= 8;
            }
            vt_cache_release(data);
            vt_cache_unlock(h);
            _exit(bad);
        }
    }
    for (int i = 0; i < N; i++) {
        int status = 0;
        CHECK(waitpid(pids[i], &status, 0) == pids[i]);
        CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d: status %#x", i, status);
    }
    FILE *f = fopen(log, "r");
    int lines = 0;
    for (int c; f && (c = fgetc(f)) != EOF;) lines += c == '\n';
    if (f) fclose(f);
    CHECK_MSG(lines == 1, "%d compiles, want 1", lines);
    rm_tree(dir);
}

/* A lock held elsewhere: a bounded wait runs out with VT_ERR_TIMEOUT and
 * no handle, and succeeds once the holder lets go. */
TEST(cache_lock_wait_is_bounded) {
    char dir[64];
    make_tmp(dir, sizeof dir);
    CHECK_OK(vt_cache_configure(dir, NULL));
    int pipefd[2];
    CHECK(pipe(pipefd) == 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) { /* the holder: locks, says so, holds 300 ms */
        int h;
        vt_cache_lock("held", -1, &h);
        if (write(pipefd[1], "x", 1) != 1) _exit(1);
        usleep(300000);
        vt_cache_unlock(h);
        _exit(h < 0);
    }
    char c;
    CHECK(read(pipefd[0], &c, 1) == 1);
    int h = 7;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_STATUS(vt_cache_lock("held", 50, &h), VT_ERR_TIMEOUT);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double waited = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
    CHECK(h == -1 && waited >= 49);
    CHECK(strstr(vt_last_error(), "another process holds the lock") != NULL);
    CHECK_OK(vt_cache_lock("held", 5000, &h)); /* the holder lets go within it */
    CHECK(h >= 0);
    vt_cache_unlock(h);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(pipefd[0]);
    close(pipefd[1]);
    CHECK_OK(vt_cache_configure(NULL, NULL));
    rm_tree(dir);
}
