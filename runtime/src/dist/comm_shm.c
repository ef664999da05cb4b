/* comm_shm.c — collectives between the processes of one host through one
 * shared memory segment: each rank stages a chunk in its slot, a barrier,
 * each rank reduces (or copies) its share, a barrier, each copies the
 * result out. Slots alternate between two sets, so the barrier that starts
 * a chunk also proves every rank is done with the set used two chunks ago.
 * A barrier that times out, or sees a peer's process gone, names the rank
 * and marks the segment broken so the others fail at once too. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "vtpu/comm.h"

#define MAGIC 0x76747075646d6d31ull /* "vtpudmm1" */
#define DEFAULT_SLOT (2u << 20)

typedef struct shm_header {
    atomic_uint_fast64_t magic; /* set last by rank 0: the header is ready */
    int32_t size;
    uint32_t pad0;
    uint64_t slot_bytes;
    atomic_int broken;
    atomic_int pids[VT_COMM_MAX_RANKS]; /* set once the rank holds its liveness lock */
    struct {
        alignas(64) atomic_uint_fast64_t epoch; /* barriers this rank has entered */
    } arrive[VT_COMM_MAX_RANKS];
    alignas(64) int64_t desc[2][VT_COMM_MAX_RANKS][VT_COMM_DESC];
} shm_header;

struct vt_comm {
    shm_header *h;
    int fd; /* kept open: it holds this rank's liveness lock */
    size_t map_bytes;
    int rank, size;
    size_t slot; /* bytes per slot */
    uint64_t epoch; /* barriers this rank has passed */
    uint64_t uses;  /* slot sets used: the parity picks the set */
    int64_t timeout_ms;
};

static size_t header_bytes(void) { return (sizeof(shm_header) + 4095) & ~(size_t)4095; }

/* Set p of slots: one per rank, then a result area. */
static char *slot_of(vt_comm *c, int set, int k) {
    return (char *)c->h + header_bytes() + ((size_t)set * (size_t)(c->size + 1) + (size_t)k) * c->slot;
}

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void pause_briefly(unsigned spins) {
    if (spins < 2000) return;
    if (spins < 4000) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
}

static vt_status broken_error(vt_comm *c) {
    return vt_set_error(VT_ERR_KERNEL,
                        "the shared-memory transport of this group broke in an earlier collective (a rank timed "
                        "out or exited); make a new process group");
}

/* Each rank holds a record lock on byte `rank` of the segment's file while
 * it lives: the kernel drops it when the process exits, even while the
 * process is a zombie nobody has reaped (a pid check would still find it). */
static int lock_byte(int fd, int k, int cmd, struct flock *l) {
    memset(l, 0, sizeof *l);
    l->l_type = F_WRLCK;
    l->l_whence = SEEK_SET;
    l->l_start = k;
    l->l_len = 1;
    return fcntl(fd, cmd, l);
}

static int rank_died(vt_comm *c, int k) {
    struct flock l;
    if (lock_byte(c->fd, k, F_GETLK, &l) != 0) return 0;
    return l.l_type == F_UNLCK;
}

/* Wait until every rank has entered this barrier. */
static vt_status barrier(vt_comm *c) {
    if (atomic_load_explicit(&c->h->broken, memory_order_acquire)) return broken_error(c);
    const uint64_t e = ++c->epoch;
    atomic_store_explicit(&c->h->arrive[c->rank].epoch, e, memory_order_release);
    const int64_t t0 = now_ms();
    for (int k = 0; k < c->size; k++) {
        unsigned spins = 0;
        while (atomic_load_explicit(&c->h->arrive[k].epoch, memory_order_acquire) < e) {
            if (atomic_load_explicit(&c->h->broken, memory_order_relaxed)) return broken_error(c);
            pause_briefly(++spins);
            if ((spins & 1023) != 0) continue;
            const int pid = atomic_load(&c->h->pids[k]);
            if (pid > 0 && k != c->rank && rank_died(c, k)) {
                atomic_store(&c->h->broken, 1);
                return vt_set_error(VT_ERR_KERNEL, "rank %d of %d (pid %d) exited during the collective", k,
                                    c->size, (int)pid);
            }
            if (c->timeout_ms >= 0 && now_ms() - t0 > c->timeout_ms) {
                atomic_store(&c->h->broken, 1);
                return vt_set_error(VT_ERR_TIMEOUT, "rank %d of %d did not reach the collective within %lld ms", k,
                                    c->size, (long long)c->timeout_ms);
            }
        }
    }
    return VT_OK;
}

vt_status vt_comm_open(const char *name, int rank, int size, size_t slot_bytes, int64_t timeout_ms, vt_comm **out) {
    if (!out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "vt_comm_open: out is NULL");
    *out = NULL;
    if (!name || name[0] != '/' || size < 1 || size > VT_COMM_MAX_RANKS || rank < 0 || rank >= size)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "vt_comm_open: bad name, rank %d or size %d (at most %d)", rank,
                            size, VT_COMM_MAX_RANKS);
    if (!slot_bytes) slot_bytes = DEFAULT_SLOT;
    if (slot_bytes < 4096) slot_bytes = 4096; /* a reduce-scatter chunk holds an element of every rank */
    slot_bytes = (slot_bytes + 63) & ~(size_t)63;
    const size_t bytes = header_bytes() + 2 * (size_t)(size + 1) * slot_bytes;
    const int64_t t0 = now_ms();
    int fd = -1;
    if (rank == 0) {
        fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd >= 0 && ftruncate(fd, (off_t)bytes) != 0) {
            close(fd);
            shm_unlink(name);
            return vt_set_error(VT_ERR_OUT_OF_MEMORY, "vt_comm_open: cannot size %s to %zu bytes: %s", name, bytes,
                                strerror(errno));
        }
    } else {
        /* rank 0 may not have created (or sized) it yet */
        for (;;) {
            fd = shm_open(name, O_RDWR, 0600);
            struct stat st;
            if (fd >= 0 && fstat(fd, &st) == 0 && (size_t)st.st_size == bytes) break;
            if (fd >= 0) close(fd);
            fd = -1;
            if (timeout_ms >= 0 && now_ms() - t0 > timeout_ms) break;
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    if (fd < 0)
        return vt_set_error(VT_ERR_KERNEL, "vt_comm_open: cannot open shared memory %s: %s", name,
                            rank == 0 ? strerror(errno) : "rank 0 did not create it in time");
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    vt_comm *c = p == MAP_FAILED ? NULL : calloc(1, sizeof *c);
    if (!c) {
        if (p != MAP_FAILED) munmap(p, bytes);
        close(fd);
        return vt_set_error(VT_ERR_OUT_OF_MEMORY, "vt_comm_open: cannot map %zu bytes of shared memory", bytes);
    }
    *c = (vt_comm){.h = p, .fd = fd, .map_bytes = bytes, .rank = rank, .size = size, .slot = slot_bytes, .timeout_ms = timeout_ms};
    shm_header *h = c->h;
    if (rank == 0) {
        h->size = size;
        h->slot_bytes = slot_bytes;
        atomic_store_explicit(&h->magic, MAGIC, memory_order_release);
    } else {
        while (atomic_load_explicit(&h->magic, memory_order_acquire) != MAGIC) {
            if (timeout_ms >= 0 && now_ms() - t0 > timeout_ms) {
                vt_comm_close(c);
                return vt_set_error(VT_ERR_TIMEOUT, "vt_comm_open: %s was never initialised", name);
            }
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
        if (h->size != size || h->slot_bytes != slot_bytes) {
            vt_comm_close(c);
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "vt_comm_open: %s was made for %d ranks, not %d", name,
                                (int)h->size, size);
        }
    }
    struct flock l;
    if (lock_byte(fd, rank, F_SETLK, &l) != 0) {
        vt_comm_close(c);
        return vt_set_error(VT_ERR_KERNEL, "vt_comm_open: cannot lock %s: %s", name, strerror(errno));
    }
    atomic_store(&h->pids[rank], (int)getpid());
    vt_status s = barrier(c); /* everyone is mapped and has published its pid */
    if (s != VT_OK) {
        vt_comm_close(c);
        return s;
    }
    *out = c;
    return VT_OK;
}

void vt_comm_unlink(const char *name) {
    if (name) shm_unlink(name);
}

void vt_comm_close(vt_comm *c) {
    if (!c) return;
    munmap(c->h, c->map_bytes);
    close(c->fd); /* drops the liveness lock */
    free(c);
}

void vt_comm_set_timeout(vt_comm *c, int64_t timeout_ms) {
    if (c) c->timeout_ms = timeout_ms;
}

vt_status vt_comm_barrier(vt_comm *c) { return barrier(c); }

vt_status vt_comm_exchange(vt_comm *c, const int64_t *mine, int64_t *all) {
    const int set = (int)(c->uses++ & 1);
    memcpy(c->h->desc[set][c->rank], mine, sizeof(int64_t) * VT_COMM_DESC);
    vt_status s = barrier(c);
    if (s != VT_OK) return s;
    for (int r = 0; r < c->size; r++) memcpy(all + r * VT_COMM_DESC, c->h->desc[set][r], sizeof(int64_t) * VT_COMM_DESC);
    return VT_OK;
}

/* ------------------------------------------------------------ reduction */

#define FOLD_LOOP(T, EXPR)                                                                                  \
    do {                                                                                                    \
        T *restrict d = dst;                                                                                \
        const T *restrict s = src;                                                                          \
        for (size_t i = 0; i < count; i++) {                                                                \
            T a = d[i], b = s[i];                                                                           \
            d[i] = (EXPR);                                                                                  \
        }                                                                                                   \
    } while (0)

/* NaN propagates through MIN and MAX, as in PyTorch. */
#define FMIN(a, b) ((a) != (a) ? (a) : (b) != (b) ? (b) : (a) < (b) ? (a) : (b))
#define FMAX(a, b) ((a) != (a) ? (a) : (b) != (b) ? (b) : (a) > (b) ? (a) : (b))
#define IMIN(a, b) ((a) < (b) ? (a) : (b))
#define IMAX(a, b) ((a) > (b) ? (a) : (b))

#define FOLD_FLOAT(T, NAME)                                                                                 \
    static void NAME(T *dst, const T *src, size_t count, vt_red_op op) {                                   \
        switch (op) {                                                                                       \
            case VT_RED_SUM: FOLD_LOOP(T, a + b); break;                                                    \
            case VT_RED_PROD: FOLD_LOOP(T, a * b); break;                                                   \
            case VT_RED_MIN: FOLD_LOOP(T, FMIN(a, b)); break;                                               \
            case VT_RED_MAX: FOLD_LOOP(T, FMAX(a, b)); break;                                               \
        }                                                                                                   \
    }
FOLD_FLOAT(float, fold_float)
FOLD_FLOAT(double, fold_double)

/* Integers wrap as PyTorch's do: add and multiply in the unsigned type. */
#define FOLD_INT(T, U)                                                                                      \
    static void fold_##T(T *dst, const T *src, size_t count, vt_red_op op) {                                \
        switch (op) {                                                                                       \
            case VT_RED_SUM: FOLD_LOOP(T, (T)((U)a + (U)b)); break;                                         \
            case VT_RED_PROD: FOLD_LOOP(T, (T)((U)a * (U)b)); break;                                        \
            case VT_RED_MIN: FOLD_LOOP(T, IMIN(a, b)); break;                                               \
            case VT_RED_MAX: FOLD_LOOP(T, IMAX(a, b)); break;                                               \
        }                                                                                                   \
    }
FOLD_INT(int8_t, uint8_t)
FOLD_INT(uint8_t, unsigned)
FOLD_INT(int16_t, uint16_t)
FOLD_INT(int32_t, uint32_t)
FOLD_INT(int64_t, uint64_t)

static void fold_bool(uint8_t *dst, const uint8_t *src, size_t count, vt_red_op op) {
    /* sum and max are "any", product and min "all" */
    if (op == VT_RED_SUM || op == VT_RED_MAX) FOLD_LOOP(uint8_t, (uint8_t)((a | b) != 0));
    else FOLD_LOOP(uint8_t, (uint8_t)((a & b) != 0));
}

#define HALF_BLOCK 512

vt_status vt_reduce_n(void *dst, const void *const *src, int n, size_t count, vt_dtype dt, vt_red_op op) {
    if (n < 1 || !dst || !src || (unsigned)op > VT_RED_MAX)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "vt_reduce_n: bad arguments");
    const size_t esz = vt_dtype_size(dt);
    if (!esz) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "vt_reduce_n: bad dtype");
    if (dt == VT_BF16 || dt == VT_F16) {
        /* through float, rounded once at the end */
        float acc[HALF_BLOCK], x[HALF_BLOCK];
        for (size_t at = 0; at < count; at += HALF_BLOCK) {
            const size_t m = count - at < HALF_BLOCK ? count - at : HALF_BLOCK;
            for (int k = 0; k < n; k++) {
                const uint16_t *s = (const uint16_t *)src[k] + at;
                float *to = k ? x : acc;
                for (size_t i = 0; i < m; i++) to[i] = dt == VT_BF16 ? vt_bf16_to_f32(s[i]) : vt_f16_to_f32(s[i]);
                if (k) fold_float(acc, x, m, op);
            }
            uint16_t *d = (uint16_t *)dst + at;
            for (size_t i = 0; i < m; i++) d[i] = dt == VT_BF16 ? vt_f32_to_bf16(acc[i]) : vt_f32_to_f16(acc[i]);
        }
        return VT_OK;
    }
    if (dst != src[0]) memmove(dst, src[0], count * esz);
    for (int k = 1; k < n; k++) {
        const void *s = src[k];
        switch (dt) {
            case VT_F32: fold_float(dst, s, count, op); break;
            case VT_F64: fold_double(dst, s, count, op); break;
            case VT_I8: fold_int8_t(dst, s, count, op); break;
            case VT_U8: fold_uint8_t(dst, s, count, op); break;
            case VT_I16: fold_int16_t(dst, s, count, op); break;
            case VT_I32: fold_int32_t(dst, s, count, op); break;
            case VT_I64: fold_int64_t(dst, s, count, op); break;
            case VT_BOOL: fold_bool(dst, s, count, op); break;
            default: return vt_set_error(VT_ERR_INVALID_ARGUMENT, "vt_reduce_n: bad dtype");
        }
    }
    return VT_OK;
}

/* ------------------------------------------------------------ collectives */

vt_status vt_comm_allreduce(vt_comm *c, void *buf, size_t count, vt_dtype dt, vt_red_op op) {
    const size_t esz = vt_dtype_size(dt);
    if (!esz || (unsigned)op > VT_RED_MAX) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "vt_comm_allreduce: bad dtype or op");
    const size_t chunk = c->slot / esz;
    const void *src[VT_COMM_MAX_RANKS];
    for (size_t off = 0; off < count; off += chunk) {
        const size_t m = count - off < chunk ? count - off : chunk;
        const int set = (int)(c->uses++ & 1);
        char *mine = (char *)buf + off * esz;
        memcpy(slot_of(c, set, c->rank), mine, m * esz);
        vt_status s = barrier(c);
        if (s != VT_OK) return s;
        /* this rank's share of the chunk, from every rank's slot */
        const size_t lo = m * (size_t)c->rank / (size_t)c->size, hi = m * (size_t)(c->rank + 1) / (size_t)c->size;
        char *res = slot_of(c, set, c->size);
        if (hi > lo) {
            for (int k = 0; k < c->size; k++) src[k] = slot_of(c, set, k) + lo * esz;
            if ((s = vt_reduce_n(res + lo * esz, src, c->size, hi - lo, dt, op)) != VT_OK) return s;
        }
        if ((s = barrier(c)) != VT_OK) return s;
        memcpy(mine, res, m * esz);
    }
    return VT_OK;
}

vt_status vt_comm_broadcast(vt_comm *c, void *buf, size_t bytes, int root) {
    if (root < 0 || root >= c->size) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "vt_comm_broadcast: bad root %d", root);
    for (size_t off = 0; off < bytes; off += c->slot) {
        const size_t m = bytes - off < c->slot ? bytes - off : c->slot;
        const int set = (int)(c->uses++ & 1);
        if (c->rank == root) memcpy(slot_of(c, set, 0), (char *)buf + off, m);
        vt_status s = barrier(c);
        if (s != VT_OK) return s;
        if (c->rank != root) memcpy((char *)buf + off, slot_of(c, set, 0), m);
    }
    return VT_OK;
}

vt_status vt_comm_allgather(vt_comm *c, void *out, const void *in, size_t bytes) {
    for (size_t off = 0; off < bytes; off += c->slot) {
        const size_t m = bytes - off < c->slot ? bytes - off : c->slot;
        const int set = (int)(c->uses++ & 1);
        memcpy(slot_of(c, set, c->rank), (const char *)in + off, m);
        vt_status s = barrier(c);
        if (s != VT_OK) return s;
        for (int k = 0; k < c->size; k++) memcpy((char *)out + (size_t)k * bytes + off, slot_of(c, set, k), m);
    }
    return VT_OK;
}

vt_status vt_comm_reduce_scatter(vt_comm *c, void *out, const void *in, size_t count, vt_dtype dt, vt_red_op op) {
    const size_t esz = vt_dtype_size(dt);
    if (!esz || (unsigned)op > VT_RED_MAX)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "vt_comm_reduce_scatter: bad dtype or op");
    /* a chunk takes m elements of each rank's piece: n * m fit one slot */
    size_t chunk = c->slot / esz / (size_t)c->size;
    if (!chunk) chunk = 1;
    const void *src[VT_COMM_MAX_RANKS];
    for (size_t off = 0; off < count; off += chunk) {
        const size_t m = count - off < chunk ? count - off : chunk;
        const int set = (int)(c->uses++ & 1);
        char *slot = slot_of(c, set, c->rank);
        for (int k = 0; k < c->size; k++)
            memcpy(slot + (size_t)k * m * esz, (const char *)in + ((size_t)k * count + off) * esz, m * esz);
        vt_status s = barrier(c);
        if (s != VT_OK) return s;
        for (int k = 0; k < c->size; k++) src[k] = slot_of(c, set, k) + (size_t)c->rank * m * esz;
        if ((s = vt_reduce_n((char *)out + off * esz, src, c->size, m, dt, op)) != VT_OK) return s;
    }
    return VT_OK;
}
