/* hbm.c — device memory: a capacity-limited caching allocator per device.
 * The capacity is the chip's HBM or what the host can really give, so a model
 * too big fails with a CUDA-style out-of-memory error, not the OOM killer.
 * Freed blocks are cached per rounded size class and reused exactly. An
 * address index finds the block behind any view (queued ops check that
 * their tensors are this device's memory), and each block carries the
 * fault of a failed op that wrote it, for the allocation it was written in. */
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

#define KIB ((size_t)1024)
#define MIB (KIB * 1024)
#define SMALL_MAX MIB          /* classes up to here are 512-byte multiples, from malloc */
#define SMALL_STEP ((size_t)512)
#define MID_MAX (32 * MIB)     /* 1..32 MiB: 64 KiB steps, above: 2 MiB steps (waste < 7%) */
#define MID_STEP (64 * KIB)
#define LARGE_STEP (2 * MIB)
#define MAX_REQUEST ((size_t)1 << 60)
#define REDZONE ((size_t)64)
#define REDZONE_BYTE 0xFD
#define CLASS_BUCKETS 256

typedef struct hbm_block {
    char *ptr;              /* what the caller gets */
    char *base;             /* what the host gave */
    size_t size;            /* size class: what stats and capacity count */
    size_t host_size;       /* bytes held from the host */
    size_t requested;       /* bytes the current allocation asked for (red zones start there) */
    uint8_t mmapped, redzone, live;
    uint64_t gen;           /* allocation generation: new each time the block is handed out */
    /* Writes announced so far (any allocation): a command that writes the
     * block counts one when it is prepared or recorded, a host write when
     * it is marked. With gen, it names the block's contents as the queue
     * will have made them (vt_hbm_version). */
    _Atomic uint64_t writes;
    _Atomic uint64_t live_gen; /* gen while the allocation is live, 0 once freed (read without the lock) */
    struct hbm_block *next; /* live-table chain, or free stack of its class */
    /* Per queue of the device, the ticket (done count) of the last command
     * enqueued there that used the block, in any allocation: a command of
     * another queue waits for it (queue.c). Kept across frees, so a block
     * handed out again is ordered after its last owner's work. */
    _Atomic uint64_t last_use[VT_MAX_QUEUES];
    /* On a line of its own: the queue worker reads it for every command,
     * the allocator writes the fields above on every allocation. */
    alignas(64) _Atomic(vt_fault *) fault; /* the failed op that wrote allocation fault_gen (poison_mu) */
    uint64_t fault_gen;
} hbm_block;

typedef struct size_class {
    size_t size;
    hbm_block *free;
    struct size_class *next;
} size_class;

/* An address index entry: the block's start beside it, so the search
 * compares without reaching into the blocks. */
typedef struct hbm_entry {
    uintptr_t start;
    hbm_block *b;
} hbm_entry;

typedef struct hbm_device {
    pthread_mutex_t mu;
    uint64_t capacity, default_capacity;
    uint64_t reserved, cached; /* bytes held from the host; of which in the cache */
    hbm_block **live;
    size_t live_buckets, live_count;
    hbm_entry *index;       /* every block held from the host, by address */
    size_t index_len, index_cap;
    size_class *classes[CLASS_BUCKETS];
    vt_hbm_stats st;
} hbm_device;

static hbm_device devices[VT_MAX_DEVICES];
static int hbm_ndev;
static atomic_uint_fast64_t next_gen = 1;
static pthread_mutex_t poison_mu = PTHREAD_MUTEX_INITIALIZER;
static const vt_chip_info *hbm_chip;
static void (*drain)(int dev); /* the runtime's queue drain (drain_queue) */
static atomic_int hbm_ready;

/* ------------------------------------------------------------ capacity */

static uint64_t host_available_bytes(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kb;
        while (fgets(line, sizeof line, f)) {
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
                fclose(f);
                return (uint64_t)kb * 1024;
            }
        }
        fclose(f);
    }
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) return (uint64_t)pages * (uint64_t)page;
    return 0;
}

int vt_exceeds_host_memory(double bytes) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 && bytes > (double)pages * (double)page;
}

vt_status vt_hbm_init(const vt_runtime_config *cfg) {
    static int mutexes_ready;
    if (!mutexes_ready) {
        for (int d = 0; d < VT_MAX_DEVICES; d++) pthread_mutex_init(&devices[d].mu, NULL);
        mutexes_ready = 1;
    }
    uint64_t cap = cfg->chip->hbm_bytes;
    if (cfg->hbm_override) {
        cap = cfg->hbm_bytes;
    } else {
        /* Leave the host some room, and split it between the devices. */
        uint64_t host = host_available_bytes();
        uint64_t share = (uint64_t)((double)host * 0.85) / (uint64_t)cfg->num_devices;
        if (host && share < cap) cap = share;
    }
    for (int d = 0; d < cfg->num_devices; d++) {
        devices[d].capacity = devices[d].default_capacity = cap;
        devices[d].st.capacity = cap;
    }
    hbm_chip = cfg->chip;
    hbm_ndev = cfg->num_devices;
    drain = cfg->drain;
    atomic_store(&hbm_ready, 1);
    return VT_OK;
}

vt_status vt_hbm_set_capacity_for_test(int dev, uint64_t bytes) {
    vt_status s = vt_check_device(dev);
    if (s != VT_OK) return s;
    hbm_device *d = &devices[dev];
    pthread_mutex_lock(&d->mu);
    d->capacity = bytes ? bytes : d->default_capacity;
    d->st.capacity = d->capacity;
    pthread_mutex_unlock(&d->mu);
    return VT_OK;
}

/* ------------------------------------------------------------ helpers */

static size_t round_size(size_t n) {
    size_t step = n <= SMALL_MAX ? SMALL_STEP : n <= MID_MAX ? MID_STEP : LARGE_STEP;
    return (n + step - 1) & ~(step - 1);
}

static void stat_add(vt_stat *s, int64_t delta) {
    s->current += delta;
    if (delta > 0) s->allocated += delta;
    else s->freed -= delta;
    if (s->current > s->peak) s->peak = s->current;
}

static size_t ptr_hash(const void *p, size_t buckets) {
    uint64_t x = (uint64_t)(uintptr_t)p >> 6;
    x *= 0x9E3779B97F4A7C15ull;
    return (size_t)(x >> 32) & (buckets - 1);
}

static size_class **class_slot(hbm_device *d, size_t size) {
    uint64_t h = (uint64_t)(size / SMALL_STEP) * 0x9E3779B97F4A7C15ull;
    size_class **pp = &d->classes[(h >> 32) % CLASS_BUCKETS];
    while (*pp && (*pp)->size != size) pp = &(*pp)->next;
    return pp;
}

/* ------------------------------------------------------------ address index */

/* Position of the last indexed block starting at or before p (-1: none).
 * Branch-free halving: the comparison becomes a conditional move instead of
 * a branch the CPU cannot predict. */
static ptrdiff_t index_floor(const hbm_device *d, uintptr_t p) {
    size_t n = d->index_len;
    if (n == 0 || d->index[0].start > p) return -1;
    const hbm_entry *base = d->index;
    while (n > 1) {
        const size_t half = n / 2;
        base = base[half].start <= p ? base + half : base;
        n -= half;
    }
    return base - d->index;
}

static int index_insert(hbm_device *d, hbm_block *b) {
    if (d->index_len == d->index_cap) {
        size_t cap = d->index_cap ? d->index_cap * 2 : 256;
        hbm_entry *t = realloc(d->index, cap * sizeof *t);
        if (!t) return 0;
        d->index = t;
        d->index_cap = cap;
    }
    size_t at = (size_t)(index_floor(d, (uintptr_t)b->ptr) + 1);
    memmove(d->index + at + 1, d->index + at, (d->index_len - at) * sizeof *d->index);
    d->index[at] = (hbm_entry){(uintptr_t)b->ptr, b};
    d->index_len++;
    return 1;
}

static void index_remove(hbm_device *d, const hbm_block *b) {
    ptrdiff_t at = index_floor(d, (uintptr_t)b->ptr);
    if (at < 0 || d->index[at].b != b) return;
    memmove(d->index + at, d->index + at + 1, (d->index_len - (size_t)at - 1) * sizeof *d->index);
    d->index_len--;
}

static int live_insert(hbm_device *d, hbm_block *b) {
    if (d->live_count >= d->live_buckets) {
        size_t nb = d->live_buckets ? d->live_buckets * 2 : 256;
        hbm_block **t = calloc(nb, sizeof *t);
        if (t) {
            for (size_t i = 0; i < d->live_buckets; i++) {
                for (hbm_block *x = d->live[i], *nx; x; x = nx) {
                    nx = x->next;
                    size_t h = ptr_hash(x->ptr, nb);
                    x->next = t[h];
                    t[h] = x;
                }
            }
            free(d->live);
            d->live = t;
            d->live_buckets = nb;
        } else if (!d->live_buckets) {
            return 0; /* no table at all; a failed grow only lengthens chains */
        }
    }
    size_t h = ptr_hash(b->ptr, d->live_buckets);
    b->next = d->live[h];
    d->live[h] = b;
    d->live_count++;
    return 1;
}

static hbm_block *live_find(hbm_device *d, const void *p, int unlink) {
    if (!d->live_buckets) return NULL;
    hbm_block **pp = &d->live[ptr_hash(p, d->live_buckets)];
    for (; *pp; pp = &(*pp)->next) {
        if ((*pp)->ptr == (const char *)p) {
            hbm_block *b = *pp;
            if (unlink) {
                *pp = b->next;
                b->next = NULL;
                d->live_count--;
            }
            return b;
        }
    }
    return NULL;
}

/* ------------------------------------------------------------ host memory */

static int host_alloc(hbm_block *b, size_t size, size_t requested, int redzone) {
    size_t pad = redzone ? REDZONE : 0;
    size_t want = size + 2 * pad;
    b->size = size;
    b->requested = requested;
    b->redzone = (uint8_t)redzone;
    if (size <= SMALL_MAX) {
        void *p = NULL;
        if (posix_memalign(&p, 64, want) != 0) return 0;
        b->base = p;
        b->host_size = want;
        b->mmapped = 0;
    } else {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        want = (want + page - 1) & ~(page - 1);
        /* A large block starts on a 2 MB boundary: the kernel backs only
         * aligned 2 MB ranges with huge pages, so an unaligned block has
         * 4 KB pages at both ends, as many as the placement gives (random
         * per process). On a VM a TLB miss walks two page tables: rows
         * gathered at random from a 4 MB table took 115 us in processes
         * where it was half unaligned, 25 us aligned. */
        const size_t align = want >= LARGE_STEP ? LARGE_STEP : page;
        const size_t mapped = want + align - page;
        char *m = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return 0;
        char *p = (char *)(((uintptr_t)m + align - 1) & ~(uintptr_t)(align - 1));
        if (p > m) munmap(m, (size_t)(p - m));
        if (m + mapped > p + want) munmap(p + want, (size_t)(m + mapped - (p + want)));
#ifdef MADV_HUGEPAGE
        if (want >= LARGE_STEP) madvise(p, want, MADV_HUGEPAGE);
#endif
        b->base = p;
        b->host_size = want;
        b->mmapped = 1;
    }
    b->ptr = b->base + pad;
    if (redzone) {
        memset(b->base, REDZONE_BYTE, REDZONE);
        memset(b->ptr + requested, REDZONE_BYTE, b->host_size - REDZONE - requested);
    }
    return 1;
}

static void host_release(hbm_block *b) {
    if (b->mmapped) munmap(b->base, b->host_size);
    else free(b->base);
}

static void check_redzones(const hbm_block *b, int dev) {
    const unsigned char *head = (const unsigned char *)b->base;
    const unsigned char *tail = (const unsigned char *)b->ptr + b->requested;
    size_t tail_len = b->host_size - REDZONE - b->requested;
    int head_bad = 0, tail_bad = 0;
    for (size_t i = 0; i < REDZONE; i++) head_bad |= head[i] != REDZONE_BYTE;
    for (size_t i = 0; i < tail_len; i++) tail_bad |= tail[i] != REDZONE_BYTE;
    if (head_bad || tail_bad)
        fprintf(stderr,
                "vtpu: HBM red zone corrupted %s block %p (%zu bytes) on TPU %d: memory was written out of "
                "bounds\n",
                head_bad && tail_bad ? "before and after" : head_bad ? "before" : "after", (void *)b->ptr,
                b->requested, dev);
}

/* Cached blocks were freed stream-ordered: queued kernels may still read
 * them. Before handing them back to the host, the device's queue must reach
 * this point: the allocator knows nothing of queues, the runtime gives it
 * the drain at start-up (vt_hbm_init's cfg). */
static void drain_queue(int dev) {
    if (drain) drain(dev);
}

/* Give a block's memory back to the host and forget it. Caller holds d->mu
 * and no queued command may still use the block. */
static void retire_block(hbm_device *d, hbm_block *b) {
    index_remove(d, b);
    host_release(b);
    d->reserved -= b->size;
    stat_add(&d->st.reserved_bytes, -(int64_t)b->size);
    stat_add(&d->st.segment, -1);
    vt_fault *f = atomic_exchange(&b->fault, NULL);
    if (f) vt_fault_unref(f);
    free(b);
}

/* Give every cached block of d back to the host. Caller holds d->mu and has
 * drained the device's queue. */
static void release_cache(hbm_device *d) {
    for (int i = 0; i < CLASS_BUCKETS; i++) {
        size_class *c = d->classes[i];
        while (c) {
            for (hbm_block *b = c->free, *nb; b; b = nb) {
                nb = b->next;
                retire_block(d, b);
            }
            size_class *nc = c->next;
            free(c);
            c = nc;
        }
        d->classes[i] = NULL;
    }
    d->cached = 0;
}

static vt_status oom(hbm_device *d, int dev, size_t bytes) {
    char req[32], total[32], freeb[32], alloc[32], unalloc[32];
    uint64_t in_use = d->reserved - d->cached;
    uint64_t avail = d->capacity > in_use ? d->capacity - in_use : 0;
    vt_format_bytes(bytes, req, sizeof req);
    vt_format_bytes(d->capacity, total, sizeof total);
    vt_format_bytes(avail, freeb, sizeof freeb);
    vt_format_bytes((uint64_t)d->st.allocated_bytes.current, alloc, sizeof alloc);
    vt_format_bytes(d->reserved - (uint64_t)d->st.allocated_bytes.current, unalloc, sizeof unalloc);
    d->st.num_ooms++;
    return vt_set_error(VT_ERR_OUT_OF_MEMORY,
                        "TPU out of memory. Tried to allocate %s. TPU %d (%s) has a total capacity of %s of which "
                        "%s is free. Of the allocated memory %s is allocated by vtpu and %s is reserved but "
                        "unallocated.",
                        req, dev, hbm_chip->name, total, freeb, alloc, unalloc);
}

/* Whether a command of queue self could use b at once: every other queue
 * has run its last use of it. */
static int idle_for(const hbm_block *b, int dev, int self) {
    for (int k = 0; k < VT_MAX_QUEUES; k++)
        if (k != self && !vt_queue_reached(dev, k, atomic_load_explicit(&b->last_use[k], memory_order_relaxed)))
            return 0;
    return 1;
}

/* Which cached block of a class to hand out (the link to it), or NULL for a
 * fresh one. With one queue in use, the newest. With several, the newest
 * that no other queue still uses, so the new owner's work on this thread's
 * queue does not wait for another queue (what per-stream pools give CUDA's
 * allocator); when the newest few are all in use, a fresh block if it fits,
 * else the newest (its new owner waits, which is correct, only slower). */
#define CACHE_SCAN 8
static hbm_block **pick_cached(hbm_device *d, int dev, hbm_block **head, size_t size) {
    if (!vt_queues_in_use(dev)) return head;
    const int self = vt_thread_queue(dev);
    hbm_block **pp = head;
    for (int i = 0; *pp && i < CACHE_SCAN; i++, pp = &(*pp)->next)
        if (idle_for(*pp, dev, self)) return pp;
    return d->reserved + size <= d->capacity ? NULL : head;
}

/* ------------------------------------------------------------ public API */

vt_status vt_hbm_alloc(int dev, size_t bytes, void **out) {
    if (!out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "vt_hbm_alloc: out is NULL");
    *out = NULL;
    vt_status s = vt_check_device(dev);
    if (s != VT_OK) return s;
    if (bytes == 0) return VT_OK;
    int redzone = vt_get_eager_mode() == VT_EAGER_DEBUG;
    hbm_device *d = &devices[dev];
    pthread_mutex_lock(&d->mu);
    if (bytes > MAX_REQUEST || round_size(bytes) > d->capacity) {
        s = oom(d, dev, bytes);
        goto done;
    }
    size_t size = round_size(bytes);
    hbm_block *b = NULL;
    if (!redzone) {
        size_class *c = *class_slot(d, size);
        hbm_block **pp = c && c->free ? pick_cached(d, dev, &c->free, size) : NULL;
        if (pp) {
            b = *pp;
            *pp = b->next;
            b->next = NULL;
            d->cached -= size;
        }
    }
    if (!b) {
        if (d->reserved + size > d->capacity) {
            if (d->cached) {
                drain_queue(dev);
                release_cache(d);
                d->st.num_alloc_retries++;
            }
            if (d->reserved + size > d->capacity) {
                s = oom(d, dev, bytes);
                goto done;
            }
        }
        b = aligned_alloc(alignof(hbm_block), sizeof *b);
        if (b) memset(b, 0, sizeof *b);
        int ok = b && host_alloc(b, size, bytes, redzone);
        if (!ok && b && d->cached) {
            drain_queue(dev);
            release_cache(d);
            d->st.num_alloc_retries++;
            ok = host_alloc(b, size, bytes, redzone);
        }
        if (ok && !index_insert(d, b)) {
            host_release(b);
            ok = 0;
        }
        if (!ok) {
            free(b);
            s = oom(d, dev, bytes);
            goto done;
        }
        d->reserved += size;
        stat_add(&d->st.reserved_bytes, (int64_t)size);
        stat_add(&d->st.segment, 1);
    }
    if (!live_insert(d, b)) {
        /* Cannot track it: hand it straight back rather than leak it. */
        retire_block(d, b);
        s = oom(d, dev, bytes);
        goto done;
    }
    b->requested = bytes;
    b->gen = atomic_fetch_add(&next_gen, 1);
    b->live = 1;
    atomic_store_explicit(&b->live_gen, b->gen, memory_order_release);
    stat_add(&d->st.allocated_bytes, (int64_t)size);
    stat_add(&d->st.allocation, 1);
    *out = b->ptr;
done:
    pthread_mutex_unlock(&d->mu);
    return s;
}

void vt_hbm_free(int dev, void *ptr) {
    if (!ptr) return;
    /* In a bad-fork child the parent's mutexes may be held by threads that do
     * not exist here: leak rather than risk a deadlock. */
    if (vt_check_device(dev) != VT_OK) return;
    hbm_device *d = &devices[dev];
    pthread_mutex_lock(&d->mu);
    hbm_block *b = live_find(d, ptr, 1);
    if (!b) {
        pthread_mutex_unlock(&d->mu);
        vt_set_error(VT_ERR_INVALID_ARGUMENT, "vt_hbm_free: %p is not a live allocation of TPU %d", ptr, dev);
        return;
    }
    stat_add(&d->st.allocated_bytes, -(int64_t)b->size);
    stat_add(&d->st.allocation, -1);
    b->live = 0;
    atomic_store_explicit(&b->live_gen, 0, memory_order_release);
    size_class **pp = b->redzone ? NULL : class_slot(d, b->size);
    if (pp && !*pp) *pp = calloc(1, sizeof **pp);
    if (pp && *pp) {
        (*pp)->size = b->size;
        b->next = (*pp)->free;
        (*pp)->free = b;
        d->cached += b->size;
    } else {
        /* Debug blocks are checked and returned at once, never reused (and
         * a block with no cache slot goes back too); a kernel queued in
         * Strict mode may still use it, so drain first. */
        drain_queue(dev);
        if (b->redzone) check_redzones(b, dev);
        retire_block(d, b);
    }
    pthread_mutex_unlock(&d->mu);
}

vt_status vt_hbm_empty_cache(int dev) {
    vt_status s = vt_check_device(dev);
    if (s != VT_OK) return s;
    hbm_device *d = &devices[dev];
    pthread_mutex_lock(&d->mu);
    drain_queue(dev);
    release_cache(d);
    pthread_mutex_unlock(&d->mu);
    return VT_OK;
}

vt_status vt_hbm_get_stats(int dev, vt_hbm_stats *out) {
    if (!out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "vt_hbm_get_stats: out is NULL");
    vt_status s = vt_check_device(dev);
    if (s != VT_OK) return s;
    hbm_device *d = &devices[dev];
    pthread_mutex_lock(&d->mu);
    *out = d->st;
    pthread_mutex_unlock(&d->mu);
    return VT_OK;
}

static void reset_peak(vt_stat *s) { s->peak = s->current; }
static void reset_accum(vt_stat *s) { s->allocated = s->freed = 0; }

vt_status vt_hbm_reset_peak(int dev) {
    vt_status s = vt_check_device(dev);
    if (s != VT_OK) return s;
    hbm_device *d = &devices[dev];
    pthread_mutex_lock(&d->mu);
    reset_peak(&d->st.allocated_bytes);
    reset_peak(&d->st.reserved_bytes);
    reset_peak(&d->st.allocation);
    reset_peak(&d->st.segment);
    pthread_mutex_unlock(&d->mu);
    return VT_OK;
}

vt_status vt_hbm_reset_accumulated(int dev) {
    vt_status s = vt_check_device(dev);
    if (s != VT_OK) return s;
    hbm_device *d = &devices[dev];
    pthread_mutex_lock(&d->mu);
    reset_accum(&d->st.allocated_bytes);
    reset_accum(&d->st.reserved_bytes);
    reset_accum(&d->st.allocation);
    reset_accum(&d->st.segment);
    d->st.num_alloc_retries = 0;
    d->st.num_ooms = 0;
    pthread_mutex_unlock(&d->mu);
    return VT_OK;
}

vt_status vt_hbm_mem_info(int dev, uint64_t *free_bytes, uint64_t *total_bytes) {
    vt_status s = vt_check_device(dev);
    if (s != VT_OK) return s;
    hbm_device *d = &devices[dev];
    pthread_mutex_lock(&d->mu);
    uint64_t in_use = d->reserved - d->cached;
    if (free_bytes) *free_bytes = d->capacity > in_use ? d->capacity - in_use : 0;
    if (total_bytes) *total_bytes = d->capacity;
    pthread_mutex_unlock(&d->mu);
    return VT_OK;
}

int vt_hbm_owns(const void *ptr, int *dev) {
    if (!ptr || !atomic_load(&hbm_ready) || vt_in_bad_fork()) return 0;
    for (int i = 0; i < hbm_ndev; i++) {
        hbm_device *d = &devices[i];
        pthread_mutex_lock(&d->mu);
        int found = live_find(d, ptr, 0) != NULL;
        pthread_mutex_unlock(&d->mu);
        if (found) {
            if (dev) *dev = i;
            return 1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------ views and faults */

/* The live block of d holding [lo, hi), or NULL. Caller holds d->mu. */
static hbm_block *holder(const hbm_device *d, uintptr_t lo, uintptr_t hi, int *partly) {
    ptrdiff_t at = index_floor(d, lo);
    if (at < 0) return NULL;
    hbm_block *b = d->index[at].b;
    uintptr_t start = (uintptr_t)b->ptr;
    if (lo >= start + b->size) return NULL; /* past this block: not device memory */
    *partly = 1;
    if (!b->live || hi > start + b->requested) return NULL;
    return b;
}

vt_status vt_hbm_resolve(int dev_hint, uintptr_t lo, uintptr_t hi, vt_access *a, int *dev_out) {
    *dev_out = -1;
    if (!atomic_load(&hbm_ready)) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "device memory is not initialised");
    for (int k = -1; k < hbm_ndev; k++) {
        int i = k < 0 ? dev_hint : k;
        if (i < 0 || (k >= 0 && i == dev_hint)) continue;
        hbm_device *d = &devices[i];
        int partly = 0;
        pthread_mutex_lock(&d->mu);
        hbm_block *b = holder(d, lo, hi, &partly);
        if (b) {
            a->block = b;
            a->gen = b->gen;
            a->dev = i;
            a->flags = lo == (uintptr_t)b->ptr && hi == (uintptr_t)b->ptr + b->requested ? VT_ACCESS_COVERS : 0;
        }
        pthread_mutex_unlock(&d->mu);
        if (b) {
            *dev_out = i;
            return VT_OK;
        }
        if (partly) {
            *dev_out = i;
            return vt_set_error(VT_ERR_INVALID_ARGUMENT,
                                "a tensor view reaches outside its allocation on TPU %d (freed, or bytes "
                                "[%#lx, %#lx) past its end)",
                                i, (unsigned long)lo, (unsigned long)hi);
        }
    }
    return vt_set_error(VT_ERR_INVALID_ARGUMENT, "memory [%#lx, %#lx) is not device memory", (unsigned long)lo,
                        (unsigned long)hi);
}

void vt_hbm_resolve_local(int dev, int n, const uintptr_t *lo, const uintptr_t *hi, size_t stride, vt_access *acc,
                          unsigned char *found) {
    hbm_device *d = &devices[dev];
    pthread_mutex_lock(&d->mu);
    for (int k = 0; k < n; k++) {
        uintptr_t l = *(const uintptr_t *)((const char *)lo + (size_t)k * stride);
        uintptr_t h = *(const uintptr_t *)((const char *)hi + (size_t)k * stride);
        int partly = 0;
        hbm_block *b = holder(d, l, h, &partly);
        found[k] = b != NULL;
        if (!b) continue;
        acc[k].block = b;
        acc[k].gen = b->gen;
        acc[k].dev = dev;
        acc[k].flags = l == (uintptr_t)b->ptr && h == (uintptr_t)b->ptr + b->requested ? VT_ACCESS_COVERS : 0;
    }
    pthread_mutex_unlock(&d->mu);
}

void vt_hbm_note_write(const vt_access *a) { atomic_fetch_add_explicit(&a->block->writes, 1, memory_order_relaxed); }

vt_version vt_hbm_version(const vt_access *a) {
    return (vt_version){a->gen, atomic_load_explicit(&a->block->writes, memory_order_relaxed)};
}

int vt_hbm_access_live(const vt_access *a) {
    return atomic_load_explicit(&a->block->live_gen, memory_order_acquire) == a->gen;
}

/* A block's fault belongs to one allocation generation: commands queued
 * before the block was freed and handed out again still see it, the new
 * owner does not. Only failures take poison_mu. */
void vt_hbm_poison(const vt_access *a, vt_fault *f) {
    hbm_block *b = a->block;
    pthread_mutex_lock(&poison_mu);
    vt_fault *old = atomic_load_explicit(&b->fault, memory_order_relaxed);
    if (!(old && b->fault_gen == a->gen)) { /* the first failure to write an allocation is its cause */
        vt_fault_ref(f);
        b->fault_gen = a->gen;
        atomic_store_explicit(&b->fault, f, memory_order_release);
        if (old) vt_fault_unref(old);
    }
    pthread_mutex_unlock(&poison_mu);
}

vt_fault *vt_hbm_fault(const vt_access *a) {
    hbm_block *b = a->block;
    if (!atomic_load_explicit(&b->fault, memory_order_acquire)) return NULL;
    pthread_mutex_lock(&poison_mu);
    vt_fault *f = atomic_load_explicit(&b->fault, memory_order_relaxed);
    if (f && b->fault_gen == a->gen) vt_fault_ref(f);
    else f = NULL;
    pthread_mutex_unlock(&poison_mu);
    return f;
}

void vt_hbm_unpoison(const vt_access *a) {
    hbm_block *b = a->block;
    if (!atomic_load_explicit(&b->fault, memory_order_acquire)) return;
    vt_fault *f = NULL;
    pthread_mutex_lock(&poison_mu);
    if (b->fault_gen == a->gen) f = atomic_exchange_explicit(&b->fault, NULL, memory_order_acq_rel);
    pthread_mutex_unlock(&poison_mu);
    if (f) vt_fault_unref(f);
}

/* ------------------------------------------------------------ cross-queue order */

/* Tickets are per device: another device's block (a cross-device copy's
 * source) is ordered by vt_op_copy's events instead. */
void vt_hbm_uses_before(const vt_access *acc, int n, int dev, int self, uint64_t *after) {
    for (int i = 0; i < n; i++)
        for (int k = 0; k < VT_MAX_QUEUES && acc[i].dev == dev; k++) {
            if (k == self) continue;
            uint64_t t = atomic_load_explicit(&acc[i].block->last_use[k], memory_order_acquire);
            if (t > after[k]) after[k] = t;
        }
}

void vt_hbm_mark_uses(const vt_access *acc, int n, int dev, int self, uint64_t done_at) {
    for (int i = 0; i < n; i++) {
        if (acc[i].dev != dev) continue;
        _Atomic uint64_t *u = &acc[i].block->last_use[self];
        uint64_t t = atomic_load_explicit(u, memory_order_relaxed);
        while (t < done_at && !atomic_compare_exchange_weak_explicit(u, &t, done_at, memory_order_release,
                                                                      memory_order_relaxed)) {}
    }
}
