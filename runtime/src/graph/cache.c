/* cache.c — the compile cache's three tiers (see include/vtpu/cache.h). */
#include "vtpu/cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define MAGIC "VTPUCACH"
#define FORMAT_VERSION 1u
#define HEADER 40 /* magic 8, version 4, key length 4, payload length 8, compile µs 8, checksum 8 */
#define MAX_PAYLOAD ((uint64_t)1 << 34)

typedef struct entry {
    char key[VT_CACHE_KEY_MAX + 1];
    void *data; /* tier 1's copy */
    size_t len;
    uint64_t compile_us, read_count;
    int64_t last_read_us;
} entry;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char *dirs[4];     /* [2], [3]: the tier directories, NULL when off */
static int writable[4];   /* [2], [3]: not refused a write since configured */
static entry *entries;
static size_t n_entries, cap_entries;
static vt_cache_stats stats;
static atomic_uint tmp_counter;

static int64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int key_ok(const char *key) {
    if (!key) return 0;
    size_t n = strlen(key);
    if (n == 0 || n > VT_CACHE_KEY_MAX) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = key[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* Little-endian fields of n bytes, so entries read the same on every host. */
static void st_le(uint8_t *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t ld_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* 64-bit checksum, 8 bytes a step; every step is a bijection of the state,
 * so any change confined to one word always changes the result. */
static uint64_t checksum(uint64_t h, const void *data, size_t n) {
    const uint8_t *p = data;
    const uint64_t prime = 0x100000001b3ull;
    for (; n >= 8; p += 8, n -= 8) {
        h ^= ld_le(p, 8);
        h *= prime;
        h ^= h >> 29;
    }
    for (; n; p++, n--) {
        h ^= *p;
        h *= prime;
    }
    return h;
}

static uint64_t entry_checksum(const uint8_t *header, const char *key, size_t keylen, const void *data, size_t len) {
    uint64_t h = checksum(0xcbf29ce484222325ull, header, HEADER - 8);
    h = checksum(h, key, keylen);
    return checksum(h, data, len);
}

static int mkdir_p(const char *dir) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) return ENAMETOOLONG;
    for (char *p = path + 1;; p++) {
        if (*p == '/' || *p == 0) {
            char c = *p;
            *p = 0;
            if (mkdir(path, 0755) != 0 && errno != EEXIST) return errno;
            *p = c;
            if (!c) break;
        }
    }
    struct stat st;
    if (stat(dir, &st) != 0) return errno;
    return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

static int write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Writes one entry file atomically; returns 0 or an errno. */
static int write_entry(const char *dir, const char *key, const void *data, size_t len, uint64_t compile_us) {
    int err = mkdir_p(dir);
    if (err) return err;
    size_t keylen = strlen(key);
    uint8_t header[HEADER];
    memcpy(header, MAGIC, 8);
    st_le(header + 8, FORMAT_VERSION, 4);
    st_le(header + 12, (uint32_t)keylen, 4);
    st_le(header + 16, len, 8);
    st_le(header + 24, compile_us, 8);
    st_le(header + 32, entry_checksum(header, key, keylen, data, len), 8);
    char tmp[4200], path[4200];
    snprintf(path, sizeof path, "%s/%s.bin", dir, key);
    snprintf(tmp, sizeof tmp, "%s/.%s.%d.%u.tmp", dir, key, (int)getpid(), atomic_fetch_add(&tmp_counter, 1));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return errno;
    err = write_all(fd, header, HEADER);
    if (!err) err = write_all(fd, key, keylen);
    if (!err) err = write_all(fd, data, len);
    if (!err && fsync(fd) != 0) err = errno;
    if (close(fd) != 0 && !err) err = errno;
    if (!err && rename(tmp, path) != 0) err = errno;
    if (err) unlink(tmp);
    return err;
}

/* Reads and checks one entry file: 1 hit (*data malloc'd), 0 absent or
 * unreadable, -1 failed its checks (and deleted). */
static int read_entry(const char *dir, const char *key, void **data, size_t *len, uint64_t *compile_us) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.bin", dir, key);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    struct stat st;
    uint8_t *buf = NULL;
    int bad = 1;
    size_t keylen = strlen(key);
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size > MAX_PAYLOAD + HEADER + VT_CACHE_KEY_MAX) goto done;
    size_t size = (size_t)st.st_size;
    if (size < HEADER + keylen || !(buf = malloc(size ? size : 1))) goto done;
    for (size_t got = 0; got < size;) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) goto done; /* shorter than it said: truncated under us */
        got += (size_t)r;
    }
    uint64_t payload = ld_le(buf + 16, 8);
    if (memcmp(buf, MAGIC, 8) != 0 || ld_le(buf + 8, 4) != FORMAT_VERSION || ld_le(buf + 12, 4) != keylen ||
        memcmp(buf + HEADER, key, keylen) != 0 || payload != size - HEADER - keylen)
        goto done;
    const uint8_t *body = buf + HEADER + keylen;
    if (ld_le(buf + 32, 8) != entry_checksum(buf, key, keylen, body, payload)) goto done;
    void *out = malloc(payload ? payload : 1);
    if (!out) { /* no memory: a miss, the file stays */
        bad = 0;
        goto done;
    }
    memcpy(out, body, payload);
    *data = out;
    *len = payload;
    *compile_us = ld_le(buf + 24, 8);
    free(buf);
    close(fd);
    return 1;
done:
    free(buf);
    close(fd);
    if (bad) {
        unlink(path);
        return -1;
    }
    return 0;
}

static entry *find(const char *key) {
    for (size_t i = 0; i < n_entries; i++)
        if (strcmp(entries[i].key, key) == 0) return &entries[i];
    return NULL;
}

/* The entry of key, added when new (NULL when there is no memory). mu held. */
static entry *find_or_add(const char *key) {
    entry *e = find(key);
    if (e) return e;
    if (n_entries == cap_entries) {
        size_t cap = cap_entries ? 2 * cap_entries : 16;
        entry *grown = realloc(entries, cap * sizeof *grown);
        if (!grown) return NULL;
        entries = grown;
        cap_entries = cap;
    }
    e = &entries[n_entries++];
    memset(e, 0, sizeof *e);
    snprintf(e->key, sizeof e->key, "%s", key);
    stats.entries = n_entries;
    return e;
}

/* Keeps a copy of data in tier 1. mu held. */
static void keep(entry *e, const void *data, size_t len) {
    void *copy = malloc(len ? len : 1);
    if (!copy) return; /* tier 1 goes without it */
    memcpy(copy, data, len);
    free(e->data);
    e->data = copy;
    e->len = len;
}

/* Counts a hit on e (may be NULL) in tier t. mu held. */
static void count_hit(entry *e, int t) {
    stats.hits++;
    stats.tier_hits[t]++;
    if (e) {
        e->read_count++;
        e->last_read_us = now_us();
    }
}

static vt_status bad_key(const char *key) {
    return vt_set_error(VT_ERR_INVALID_ARGUMENT, "compile cache: bad key \"%.140s\" (1..%d characters of [0-9A-Za-z_-])",
                        key ? key : "(null)", VT_CACHE_KEY_MAX);
}

vt_status vt_cache_configure(const char *tier2_dir, const char *tier3_dir) {
    char *d2 = tier2_dir && *tier2_dir ? strdup(tier2_dir) : NULL;
    char *d3 = tier3_dir && *tier3_dir ? strdup(tier3_dir) : NULL;
    if ((tier2_dir && *tier2_dir && !d2) || (tier3_dir && *tier3_dir && !d3)) {
        free(d2);
        free(d3);
        return vt_set_error(VT_ERR_OUT_OF_MEMORY, "compile cache: no host memory");
    }
    pthread_mutex_lock(&mu);
    free(dirs[2]);
    free(dirs[3]);
    dirs[2] = d2;
    dirs[3] = d3;
    writable[2] = writable[3] = 1;
    pthread_mutex_unlock(&mu);
    return VT_OK;
}

/* A copy of tier t's directory (only while it takes writes, when
 * for_write), or NULL. */
static char *dir_of(int t, int for_write) {
    pthread_mutex_lock(&mu);
    char *d = dirs[t] && (!for_write || writable[t]) ? strdup(dirs[t]) : NULL;
    pthread_mutex_unlock(&mu);
    return d;
}

vt_status vt_cache_get(const char *key, void **data, size_t *len, int *tier) {
    *data = NULL;
    *len = 0;
    *tier = 0;
    if (!key_ok(key)) return bad_key(key);
    pthread_mutex_lock(&mu);
    stats.requests++;
    entry *e = find(key);
    if (e && e->data) {
        void *out = malloc(e->len ? e->len : 1);
        if (out) {
            memcpy(out, e->data, e->len);
            *data = out;
            *len = e->len;
            *tier = 1;
            count_hit(e, 1);
        }
        pthread_mutex_unlock(&mu);
        return VT_OK;
    }
    pthread_mutex_unlock(&mu);

    uint64_t compile_us = 0;
    int found = 0, discarded = 0;
    for (int t = 2; t <= 3 && !found; t++) {
        char *dir = dir_of(t, 0);
        if (!dir) continue;
        int r = read_entry(dir, key, data, len, &compile_us);
        free(dir);
        if (r < 0) discarded++;
        if (r > 0) found = t;
    }
    if (found == 3) { /* the host's tier learns what the cluster's had */
        char *dir2 = dir_of(2, 1);
        if (dir2) write_entry(dir2, key, *data, *len, compile_us);
        free(dir2);
    }
    pthread_mutex_lock(&mu);
    stats.discarded += (uint64_t)discarded;
    if (found) {
        *tier = found;
        e = find_or_add(key);
        if (e) {
            keep(e, *data, *len);
            e->compile_us = compile_us;
        }
        count_hit(e, found);
    }
    pthread_mutex_unlock(&mu);
    return VT_OK;
}

void vt_cache_release(void *data) { free(data); }

vt_status vt_cache_put(const char *key, const void *data, size_t len, uint64_t compile_us) {
    if (!key_ok(key)) return bad_key(key);
    if (!data && len) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "compile cache: no data");
    pthread_mutex_lock(&mu);
    entry *e = find_or_add(key);
    if (e) {
        keep(e, data, len);
        e->compile_us = compile_us;
    }
    pthread_mutex_unlock(&mu);
    vt_status status = VT_OK;
    for (int t = 2; t <= 3; t++) {
        char *dir = dir_of(t, 1);
        if (!dir) continue;
        int err = write_entry(dir, key, data, len, compile_us);
        if (err) {
            pthread_mutex_lock(&mu);
            int first = writable[t];
            writable[t] = 0;
            stats.write_errors++;
            pthread_mutex_unlock(&mu);
            if (first && status == VT_OK)
                status = vt_set_error(VT_ERR_UNSUPPORTED, "compile cache: cannot write tier %d directory %s: %s", t, dir,
                                      strerror(err));
        }
        free(dir);
    }
    return status;
}

static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

vt_status vt_cache_lock(const char *key, int64_t timeout_ms, int *handle) {
    *handle = -1;
    if (!key_ok(key)) return bad_key(key);
    char *dir = dir_of(2, 0);
    if (!dir) return VT_OK;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.lock", dir, key);
    int fd = mkdir_p(dir) == 0 ? open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644) : -1;
    free(dir);
    if (fd < 0) return VT_OK; /* a directory nobody can write needs no lock */
    int64_t deadline = timeout_ms < 0 ? -1 : mono_ms() + timeout_ms;
    long nap_us = 1000;
    for (;;) {
        if (flock(fd, deadline < 0 ? LOCK_EX : LOCK_EX | LOCK_NB) == 0) break;
        if (errno == EINTR) continue;
        if (errno != EWOULDBLOCK) { /* a filesystem without locks: go on unlocked */
            close(fd);
            return VT_OK;
        }
        int64_t left = deadline - mono_ms();
        if (left <= 0) {
            close(fd);
            return vt_set_error(VT_ERR_TIMEOUT, "compile cache: another process holds the lock of %.16s...", key);
        }
        struct timespec nap = {0, (left * 1000 < nap_us ? left * 1000 : nap_us) * 1000};
        nanosleep(&nap, NULL);
        if (nap_us < 20000) nap_us *= 2; /* 1 ms, growing to 20 ms */
    }
    *handle = fd;
    return VT_OK;
}

void vt_cache_unlock(int handle) {
    if (handle < 0) return;
    flock(handle, LOCK_UN);
    close(handle);
}

vt_status vt_cache_clear(int files) {
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < n_entries; i++) free(entries[i].data);
    free(entries);
    entries = NULL;
    n_entries = cap_entries = 0;
    memset(&stats, 0, sizeof stats);
    char *dir = files && dirs[2] ? strdup(dirs[2]) : NULL;
    pthread_mutex_unlock(&mu);
    if (!dir) return VT_OK;
    DIR *d = opendir(dir);
    if (d) {
        /* entries only: a lock file may be held by another process */
        for (struct dirent *de; (de = readdir(d));) {
            size_t n = strlen(de->d_name);
            if (n > 4 && strcmp(de->d_name + n - 4, ".bin") == 0) unlinkat(dirfd(d), de->d_name, 0);
        }
        closedir(d);
    }
    free(dir);
    return VT_OK;
}

void vt_cache_get_stats(vt_cache_stats *out) {
    pthread_mutex_lock(&mu);
    *out = stats;
    pthread_mutex_unlock(&mu);
}

vt_status vt_cache_entry_at(size_t i, vt_cache_entry_stats *out) {
    pthread_mutex_lock(&mu);
    if (i >= n_entries) {
        size_t n = n_entries;
        pthread_mutex_unlock(&mu);
        return vt_set_error(VT_ERR_INDEX, "compile cache: entry %zu of %zu", i, n);
    }
    entry *e = &entries[i];
    memcpy(out->key, e->key, sizeof out->key);
    out->read_count = e->read_count;
    out->compile_us = e->compile_us;
    out->last_read_us = e->last_read_us;
    pthread_mutex_unlock(&mu);
    return VT_OK;
}
