/* queue.c — a device's in-order command queues (VT_MAX_QUEUES, one per
 * stream class), each drained by its own worker thread, plus events and the
 * eager-mode switches. Enqueue is the hot path of
 * every eager op: a producer takes a ticket (one atomic add), copies the
 * command into that ring slot and publishes the slot with a plain release
 * store, so no fence waits for the slot's cache lines to reach memory; it
 * touches the worker only when the worker is asleep. A command carries the memory it
 * reads and writes: a failing command becomes a fault (fault.c) that poisons
 * what it wrote, and a command whose inputs are poisoned passes the fault
 * on instead of computing from garbage. Commands of different queues of a
 * device are ordered by the allocations they touch (hbm.c keeps, per block,
 * the last ticket of each queue that used it): a command waits on its worker
 * for those of other queues enqueued before it. Such waits point only at
 * tickets taken earlier, so they never form a cycle. */
#include <pthread.h>
#include <signal.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#ifdef __linux__
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "internal.h"

#define RING_SLOTS 2048u    /* power of two */
/* Polling loops yield the core (vt_poll_yield) rather than hold it, so the
 * waiter can poll for a whole short kernel: its wake-up from a sleep costs
 * about 30 us on a VM, and going to sleep a process-wide barrier (an IPI
 * to every CPU, tens of us more on a VM), more than many kernels take. A
 * waiter that gave up after 200 us made ops of 0.2-2 ms about 70 us slower
 * half the time (layer_norm of 2048x512: 0.19 or 0.27 ms, a 1024^2 f32
 * product 1.1 or 1.4 ms); a yielding poll leaves the cores to the workers. */
/* How long an idle worker polls before sleeping. Waking a worker asleep on
 * another CPU costs the submitting thread 16 us and the command 45 us
 * before it starts, on the VMs here (a condvar signal to an idle vCPU;
 * 5 us when both share a CPU). Python between ops often runs longer than
 * 50 us (an optimizer step's bookkeeping before its first foreach op): at
 * 50 us a small MLP's training step took 394-441 us median against CPU
 * PyTorch's 293-339, at 300 us 234-278 (bench/overhead.py's step), as
 * long as the thread pool's workers poll (thread_pool.c). */
#define WORKER_SPIN_NS 300000
#define WAITER_SPIN_NS 2000000 /* how long a waiter polls before sleeping */
#define SLICE_MS 1000       /* longest single condvar sleep: waits re-check */
#define ERR_LEN 1024

typedef struct cmd_result {
    vt_status status;
    char msg[ERR_LEN];
} cmd_result;

typedef struct vt_command {
    atomic_uint_fast64_t ready; /* ticket + 1 once the slot holds that ticket's command */
    vt_kernel_fn fn;
    const char *op_name;
    cmd_result *result; /* set: report to the waiting producer instead of latching */
    int nacc;
    vt_access *acc;     /* inline_acc, or a malloc'd list the worker frees */
    uint64_t after[VT_MAX_QUEUES]; /* wait until queue q has done after[q] (0: nothing) */
    void *payload;      /* malloc'd block the args point into, freed after the command */
    void *argp;         /* what fn gets: args, or the caller's block when run on its thread */
    vt_access inline_acc[VT_ACCESS_INLINE];
    alignas(64) unsigned char args[VT_MAX_ARGS];
} vt_command;

typedef struct vt_queue {
    pthread_mutex_t prod_mu; /* guards the lazy start of the worker */
    pthread_mutex_t mu;      /* guards sleeping on the condvars */
    pthread_cond_t work_cv;  /* the idle worker sleeps here */
    pthread_cond_t done_cv;  /* waiters for completions (and for ring space) */
    vt_command *ring;
    atomic_int started;
    int index; /* in its device's queues */
    atomic_uint_fast64_t done_seen;        /* producers' cached copy of done (release/acquire: a slot
                                              it shows free was left by the worker) */
    alignas(64) atomic_uint_fast64_t tail; /* tickets handed out (commands queued or being copied in) */
    alignas(64) atomic_uint_fast64_t done; /* commands completed */
    atomic_uint_fast64_t wake_at;          /* smallest done count a sleeper waits for */
    alignas(64) atomic_int worker_sleeping;
    int dev;
} vt_queue;

static vt_queue queues[VT_MAX_DEVICES][VT_MAX_QUEUES];
static atomic_int multi_queue[VT_MAX_DEVICES]; /* a queue other than 0 was used: cross-queue order matters */
static _Thread_local unsigned char thread_queue[VT_MAX_DEVICES];
static pthread_once_t queues_once = PTHREAD_ONCE_INIT;
static _Thread_local vt_queue *worker_of; /* the queue this thread drains, if any */
static _Thread_local const char *failed_op; /* set by a kernel that runs several user ops */

int vt_on_queue_worker(void) { return worker_of != NULL; }

/* ------------------------------------------------------------ queues, tickets */

#define TICKET_SHIFT 56
#define SEQ_MASK (((uint64_t)1 << TICKET_SHIFT) - 1)
static inline uint64_t ticket_of(const vt_queue *q, uint64_t seq) {
    return (uint64_t)q->index << TICKET_SHIFT | seq;
}
static inline uint64_t seq_of(uint64_t ticket) { return ticket & SEQ_MASK; }
int vt_ticket_queue(uint64_t ticket) { return (int)(ticket >> TICKET_SHIFT); }

int vt_stream_queue(int64_t stream_id) {
    if (stream_id == 0) return 0;
    if (stream_id == VT_STREAM_COMM) return VT_QUEUE_COMM;
    return 2 + (int)((uint64_t)(stream_id - 1) % (VT_MAX_QUEUES - 2));
}

int vt_set_thread_queue(int dev, int queue) {
    if (dev < 0 || dev >= VT_MAX_DEVICES) return 0;
    int old = thread_queue[dev];
    if (queue >= 0 && queue < VT_MAX_QUEUES) thread_queue[dev] = (unsigned char)queue;
    return old;
}

int vt_thread_queue(int dev) {
    if (dev < 0 || dev >= VT_MAX_DEVICES) return 0;
    return worker_of && worker_of->dev == dev ? worker_of->index : thread_queue[dev];
}
void vt_command_failed_op(const char *name) { failed_op = name; }

/* Both sleep handshakes are Dekker pairs. A producer publishes a slot, then
 * reads worker_sleeping; the worker sets worker_sleeping, then reads the
 * slot. Whoever completes a command stores done, then reads wake_at; a
 * waiter lowers wake_at, then reads done. Each side needs a store-load
 * barrier. The publishing and completing sides run per op, and their
 * barrier would wait for every store before it (the slot's lines, the
 * kernel's output), so where the kernel offers it the side that sleeps
 * (rarely) issues a process-wide barrier (membarrier) that stands for both
 * (sleeper_barrier), and the per-op side's is a compiler barrier
 * (hot_barrier). Elsewhere both sides use a full fence. */
static int asym_barrier;

static void membarrier_init(void) {
#if defined(__linux__) && defined(__NR_membarrier)
    asym_barrier = syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
#endif
}

static inline void hot_barrier(void) {
    if (asym_barrier) atomic_signal_fence(memory_order_seq_cst);
    else atomic_thread_fence(memory_order_seq_cst);
}

static void sleeper_barrier(void) {
#if defined(__linux__) && defined(__NR_membarrier)
    if (asym_barrier && syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0) return;
    /* Registered but refused: cannot happen on a kernel that accepted the
     * registration; a lost wake-up would still end within SLICE_MS. */
#endif
    atomic_thread_fence(memory_order_seq_cst);
}

static atomic_int default_eager = VT_EAGER_STRICT;
static _Thread_local int thread_eager = -1;
static int (*_Atomic eager_source)(void); /* the host's per-thread context, if it has one */

/* ------------------------------------------------------------ eager modes */

void vt_set_default_eager_mode(vt_eager_mode m) {
    if ((int)m >= VT_EAGER_STRICT && (int)m <= VT_EAGER_DEFER_AND_FUSE) atomic_store(&default_eager, (int)m);
}

void vt_set_thread_eager_mode(int m) {
    if (m < 0) thread_eager = -1;
    else if (m <= VT_EAGER_DEFER_AND_FUSE) thread_eager = m;
}

void vt_set_eager_mode_source(int (*source)(void)) { atomic_store(&eager_source, source); }

vt_eager_mode vt_get_eager_mode(void) {
    int m = thread_eager;
    if (m < 0) {
        int (*source)(void) = atomic_load_explicit(&eager_source, memory_order_acquire);
        if (source) m = source();
        if (m > VT_EAGER_DEFER_AND_FUSE) m = -1;
    }
    return (vt_eager_mode)(m >= 0 ? m : atomic_load_explicit(&default_eager, memory_order_relaxed));
}

/* ------------------------------------------------------------ time */

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static struct timespec abs_after_ns(int64_t deadline_ns) {
    struct timespec ts = {(time_t)(deadline_ns / 1000000000), (long)(deadline_ns % 1000000000)};
    return ts;
}

/* ------------------------------------------------------------ setup */

static void queues_init(void) {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    for (int i = 0; i < VT_MAX_DEVICES; i++)
        for (int k = 0; k < VT_MAX_QUEUES; k++) {
            vt_queue *q = &queues[i][k];
            pthread_mutex_init(&q->prod_mu, NULL);
            pthread_mutex_init(&q->mu, NULL);
            q->dev = i;
            q->index = k;
            pthread_cond_init(&q->work_cv, &ca);
            pthread_cond_init(&q->done_cv, &ca);
            atomic_init(&q->wake_at, UINT64_MAX);
        }
    pthread_condattr_destroy(&ca);
    membarrier_init();
}

/* The calling thread's current queue of dev: for a queue worker, its own
 * (work a command enqueues runs in its place in that command's stream). */
static vt_queue *queue_of(int dev) {
    pthread_once(&queues_once, queues_init);
    if (worker_of && worker_of->dev == dev) return worker_of;
    return &queues[dev][thread_queue[dev]];
}

static vt_queue *queue_at(int dev, int k) {
    pthread_once(&queues_once, queues_init);
    return &queues[dev][k];
}

/* ------------------------------------------------------------ waiting */

/* Wait until q has completed `target` commands. timeout_ms < 0: forever;
 * 0: only whether it has (no poll: the binding asks so while it holds the
 * GIL, then waits without it). Returns 1 when done, 0 on timeout. */
static int wait_done(vt_queue *q, uint64_t target, int64_t timeout_ms) {
    if (atomic_load(&q->done) >= target) return 1;
    if (timeout_ms == 0) return 0;
    int64_t start = now_ns();
    /* A poll catches short kernels without a sleep/wake round trip. */
    for (;;) {
        if (atomic_load(&q->done) >= target) return 1;
        if (now_ns() - start > WAITER_SPIN_NS) break;
        vt_poll_yield();
    }
    /* Beyond ~11 days a bound is the same as none (and would overflow). */
    int64_t deadline = timeout_ms < 0 || timeout_ms > ((int64_t)1 << 30) ? INT64_MAX : start + timeout_ms * 1000000;
    int ok = 1;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        /* Register before re-checking: complete() stores done, then reads
         * wake_at; we store wake_at, then read done (see hot_barrier). */
        uint64_t w = atomic_load(&q->wake_at);
        while (target < w && !atomic_compare_exchange_weak(&q->wake_at, &w, target)) {}
        sleeper_barrier();
        if (atomic_load(&q->done) >= target) break;
        int64_t now = now_ns();
        if (now >= deadline) {
            ok = 0;
            break;
        }
        int64_t until = now + (int64_t)SLICE_MS * 1000000;
        if (until > deadline) until = deadline;
        struct timespec ts = abs_after_ns(until);
        pthread_cond_timedwait(&q->done_cv, &q->mu, &ts);
    }
    pthread_mutex_unlock(&q->mu);
    return ok;
}

/* ------------------------------------------------------------ worker */

static void report(cmd_result *r, vt_status s) {
    r->status = s;
    snprintf(r->msg, ERR_LEN, "%s", vt_last_error());
}

/* Run one command (ticket: its place in the queue). A command whose inputs
 * a failed op wrote does not run: what it writes carries that fault on. */
static void run_command(vt_queue *q, vt_command *c, uint64_t ticket) {
    for (int k = 0; k < VT_MAX_QUEUES; k++)
        if (c->after[k]) wait_done(&queues[q->dev][k], c->after[k], -1);
    vt_fault *f = c->nacc ? vt_fault_of_reads(c->acc, c->nacc) : NULL;
    if (f) {
        vt_fault_poison(c->acc, c->nacc, f);
        if (c->result) report(c->result, vt_fault_raise(f));
    } else {
        vt_clear_error();
        failed_op = NULL;
        const int64_t t0 = vt_tracing() ? vt_trace_begin() : 0;
        vt_status s = c->fn(c->argp);
        if (t0) vt_trace_record(q->dev, q->index, c->op_name, t0);
        if (s != VT_OK) {
            f = vt_fault_new(q->dev, ticket_of(q, ticket), s, failed_op ? failed_op : c->op_name, vt_last_error());
            vt_fault_poison(c->acc, c->nacc, f);
            if (c->result) report(c->result, vt_fault_raise(f));
            else vt_fault_latch(f);
        } else {
            if (c->nacc) vt_fault_clear_writes(c->acc, c->nacc);
            if (c->result) c->result->status = VT_OK;
        }
    }
    if (f) vt_fault_unref(f);
    if (c->acc != c->inline_acc) free(c->acc);
    free(c->payload);
    c->acc = NULL;
    c->nacc = 0;
    c->payload = NULL;
}

static inline int slot_ready(vt_queue *q, uint64_t ticket) {
    return atomic_load_explicit(&q->ring[ticket & (RING_SLOTS - 1)].ready, memory_order_acquire) == ticket + 1;
}

/* The worker's next command: the one after the last completed. A producer
 * that ran commands itself moved done on; those slots are never published. */
static inline int has_work(vt_queue *q) { return slot_ready(q, atomic_load(&q->done)); }

/* `next` commands have completed: publish it and wake waiters. */
static void complete(vt_queue *q, uint64_t next) {
    atomic_store_explicit(&q->done, next, memory_order_release);
    hot_barrier();
    if (next >= atomic_load_explicit(&q->wake_at, memory_order_relaxed)) {
        pthread_mutex_lock(&q->mu);
        atomic_store(&q->wake_at, UINT64_MAX); /* sleepers still short re-register */
        pthread_mutex_unlock(&q->mu);
        pthread_cond_broadcast(&q->done_cv); /* after the unlock, as wake_worker */
    }
}

static void *worker_main(void *arg) {
    vt_queue *q = arg;
    worker_of = q;
    /* a device's first queue runs its parallel kernels' chunk 0: on a CPU
     * of its own beside the pool's workers (other streams' queues float) */
    if (q->index == 0) vt_place_thread((int)(q - &queues[0][0]) / VT_MAX_QUEUES);
    for (;;) {
        if (!has_work(q)) {
            int64_t start = now_ns();
            int ready = 0;
            for (;;) {
                vt_poll_yield();
                if ((ready = has_work(q))) break;
                if (now_ns() - start > WORKER_SPIN_NS) break;
            }
            if (!ready) {
                /* Sleep: store worker_sleeping, barrier, re-read the slot
                 * (the producers' half of the handshake is in enqueue_cmd). */
                atomic_store(&q->worker_sleeping, 1);
                sleeper_barrier();
                pthread_mutex_lock(&q->mu);
                while (!has_work(q)) {
                    struct timespec ts = abs_after_ns(now_ns() + (int64_t)SLICE_MS * 1000000);
                    pthread_cond_timedwait(&q->work_cv, &q->mu, &ts);
                }
                pthread_mutex_unlock(&q->mu);
                atomic_store(&q->worker_sleeping, 0);
            }
            continue;
        }
        const uint64_t next = atomic_load(&q->done);
        run_command(q, &q->ring[next & (RING_SLOTS - 1)], next + 1);
        complete(q, next + 1);
    }
    return NULL;
}

/* Caller holds prod_mu. */
static vt_status start_worker(vt_queue *q, int dev) {
    q->ring = aligned_alloc(alignof(vt_command), (size_t)RING_SLOTS * sizeof(vt_command));
    if (!q->ring) return vt_set_error(VT_ERR_OUT_OF_MEMORY, "TPU %d: cannot allocate the command queue", dev);
    for (unsigned i = 0; i < RING_SLOTS; i++) atomic_init(&q->ring[i].ready, 0);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* Signals (SIGINT for Python) belong to the application's threads. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t th;
    int rc = pthread_create(&th, &attr, worker_main, q);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        free(q->ring);
        q->ring = NULL;
        return vt_set_error(VT_ERR_INTERNAL, "TPU %d: cannot start the queue worker thread (error %d)", dev, rc);
    }
    char name[16];
    if (q->index) snprintf(name, sizeof name, "vtpu-q%d.%d", dev, q->index);
    else snprintf(name, sizeof name, "vtpu-queue-%d", dev);
    pthread_setname_np(th, name);
    atomic_store_explicit(&q->started, 1, memory_order_release);
    return VT_OK;
}

/* ------------------------------------------------------------ enqueue */

/* Wake the worker from its sleep on work_cv. Taking and dropping mu orders
 * the signal after the worker's has_work check (made under mu): it either
 * sees the work or already waits. Signalling after the unlock lets the woken
 * worker take mu at once: signalled under mu, it woke only to block on mu,
 * and the unlock had to wake it a second time (two futex wake-ups of a
 * sleeping CPU, each an IPI on a VM). */
static void wake_worker(vt_queue *q) {
    pthread_mutex_lock(&q->mu);
    pthread_mutex_unlock(&q->mu);
    pthread_cond_signal(&q->work_cv);
}

/* Fill a command's accesses: the list is copied into the slot when it is
 * short, else the command takes the malloc'd list over. */
static void set_accesses(vt_command *c, vt_access *acc, int nacc, int heap) {
    c->nacc = nacc;
    if (heap) {
        c->acc = acc;
    } else {
        if (nacc) memcpy(c->inline_acc, acc, (size_t)nacc * sizeof *acc);
        c->acc = c->inline_acc;
    }
}

/* Fill a command. In a ring slot (in_slot) the args are copied in (packed by
 * pk->pack when given); a command run on this thread reads the caller's. */
static void fill_command(vt_command *c, int in_slot, vt_kernel_fn fn, const vt_packed_kernel *pk, const char *op_name,
                         cmd_result *result, void *payload, vt_access *acc, int nacc, int heap, const void *args,
                         size_t args_size, const uint64_t *after) {
    c->fn = pk ? (in_slot ? pk->run_packed : pk->run) : fn;
    memcpy(c->after, after, sizeof c->after);
    c->op_name = op_name;
    c->result = result;
    c->payload = payload;
    set_accesses(c, acc, nacc, heap);
    if (!in_slot) {
        c->argp = (void *)args;
    } else {
        c->argp = c->args;
        if (pk) pk->pack(args, c->args);
        else if (args_size) memcpy(c->args, args, args_size);
    }
}

/* The core of every enqueue. acc (nacc entries; heap: malloc'd) is what the
 * command touches; the heap list and payload belong to the command from
 * here, and are freed on failure too. */
static vt_status enqueue_cmd(int dev, const char *op_name, vt_kernel_fn fn, const vt_packed_kernel *pk,
                             const void *args, size_t args_size, vt_access *acc, int nacc, int heap, void *payload,
                             vt_enqueue_policy policy, uint64_t *ticket_out, int *queued) {
    if (queued) *queued = 0;
    vt_status s = vt_check_device(dev);
    if (s == VT_OK && !fn && !pk) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: kernel function is NULL", op_name);
    if (s == VT_OK && args_size > VT_MAX_ARGS)
        s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: argument block of %zu bytes exceeds VT_MAX_ARGS (%d)",
                         op_name, args_size, VT_MAX_ARGS);
    if (s == VT_OK && args_size && !args) s = vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: args is NULL", op_name);
    if (s == VT_OK) s = vt_defer_flush_before(dev); /* recorded work runs first */
    if (s != VT_OK) {
        if (heap) free(acc);
        free(payload);
        return s;
    }
    const int may_inline = policy & VT_ENQ_INLINE_OK;
    policy &= ~VT_ENQ_INLINE_OK;
    if (policy == VT_ENQ_AUTO) policy = vt_get_eager_mode() == VT_EAGER_DEBUG ? VT_ENQ_WAIT : VT_ENQ_ASYNC;
    vt_queue *q = queue_of(dev);

    /* Cross-queue order: what other queues enqueued on these blocks before. */
    uint64_t after[VT_MAX_QUEUES] = {0};
    int waits = 0;
    if (q->index && !atomic_load_explicit(&multi_queue[dev], memory_order_relaxed))
        atomic_store(&multi_queue[dev], 1);
    if (nacc && atomic_load_explicit(&multi_queue[dev], memory_order_relaxed)) {
        vt_hbm_uses_before(acc, nacc, dev, q->index, after);
        for (int k = 0; k < VT_MAX_QUEUES; k++) {
            if (after[k] && atomic_load(&queues[dev][k].done) >= after[k]) after[k] = 0;
            waits |= after[k] != 0;
        }
    }

    cmd_result res;
    vt_command local;
    if (policy == VT_ENQ_WAIT && worker_of == q) {
        /* A kernel waiting on its own queue would deadlock: run it here, which
         * is where it would run next anyway. It is part of the running
         * command, whose accesses ordered it: waiting for other queues' later
         * work could close a cycle. */
        memset(after, 0, sizeof after);
        uint64_t at = atomic_load(&q->done);
        if (ticket_out) *ticket_out = ticket_of(q, at);
        if (queued) *queued = 1;
        fill_command(&local, 0, fn, pk, op_name, &res, payload, acc, nacc, heap, args, args_size, after);
        run_command(q, &local, at + 1);
        return res.status == VT_OK ? VT_OK : vt_set_error(res.status, "%s", res.msg);
    }
    uint64_t seq = atomic_load(&q->tail);
    if (may_inline && !waits && worker_of == NULL && atomic_load(&q->done) == seq &&
        atomic_compare_exchange_strong(&q->tail, &seq, seq + 1)) {
        /* The queue is idle and this ticket is ours: a small command runs on
         * this thread, in its place in the stream, as the worker would run
         * it (faults latch or report the same way). Handing it over would
         * cost more than the command. */
        fill_command(&local, 0, fn, pk, op_name, policy == VT_ENQ_WAIT ? &res : NULL, payload, acc, nacc, heap, args,
                     args_size, after);
        if (queued) *queued = 1;
        worker_of = q;
        run_command(q, &local, seq + 1);
        worker_of = NULL;
        complete(q, seq + 1);
        /* Commands queued behind this one wait for done: wake the worker. */
        if (atomic_load(&q->tail) > seq + 1 && atomic_load(&q->worker_sleeping)) wake_worker(q);
        if (ticket_out) *ticket_out = ticket_of(q, seq + 1);
        if (policy != VT_ENQ_WAIT || res.status == VT_OK) return VT_OK;
        return vt_set_error(res.status, "%s", res.msg);
    }

    if (!atomic_load_explicit(&q->started, memory_order_acquire)) {
        pthread_mutex_lock(&q->prod_mu);
        if (!atomic_load_explicit(&q->started, memory_order_relaxed)) s = start_worker(q, dev);
        pthread_mutex_unlock(&q->prod_mu);
        if (s != VT_OK) {
            if (heap) free(acc);
            free(payload);
            return s;
        }
    }
    /* Nothing below can fail: a ticket taken is a slot the worker waits for. */
    if (queued) *queued = 1;
    seq = atomic_fetch_add(&q->tail, 1);
    if (seq - atomic_load_explicit(&q->done_seen, memory_order_acquire) >= RING_SLOTS) {
        uint64_t d = atomic_load(&q->done);
        /* Full: wait until half the ring is free, so we do not wake per slot. */
        if (seq - d >= RING_SLOTS) {
            wait_done(q, seq - RING_SLOTS / 2 + 1, -1);
            d = atomic_load(&q->done);
        }
        atomic_store_explicit(&q->done_seen, d, memory_order_release);
    }
    if (nacc) vt_hbm_mark_uses(acc, nacc, dev, q->index, seq + 1);
    vt_command *c = &q->ring[seq & (RING_SLOTS - 1)];
    fill_command(c, 1, fn, pk, op_name, policy == VT_ENQ_WAIT ? &res : NULL, payload, acc, nacc, heap, args,
                 args_size, after);
    atomic_store_explicit(&c->ready, seq + 1, memory_order_release);
    hot_barrier();
    if (atomic_load_explicit(&q->worker_sleeping, memory_order_relaxed)) wake_worker(q);
    if (ticket_out) *ticket_out = ticket_of(q, seq + 1);
    if (policy != VT_ENQ_WAIT) return VT_OK;
    wait_done(q, seq + 1, -1);
    if (res.status == VT_OK) return VT_OK;
    return vt_set_error(res.status, "%s", res.msg);
}

vt_status vt_enqueue_ex(int dev, const char *op_name, vt_kernel_fn fn, const void *args, size_t args_size,
                        vt_enqueue_policy policy, uint64_t *ticket_out) {
    return enqueue_cmd(dev, op_name ? op_name : "vt_enqueue", fn, NULL, args, args_size, NULL, 0, 0, NULL, policy,
                       ticket_out, NULL);
}

vt_status vt_enqueue(int dev, const char *op_name, vt_kernel_fn fn, const void *args, size_t args_size) {
    return vt_enqueue_ex(dev, op_name, fn, args, args_size, VT_ENQ_AUTO, NULL);
}

static vt_status enqueue_prepared(int dev, const char *name, vt_kernel_fn fn, const vt_packed_kernel *pk,
                                  const void *args, size_t args_size, vt_prepared *p, vt_enqueue_policy policy,
                                  int *queued) {
    int heap = p->acc != p->inline_acc;
    vt_status s = enqueue_cmd(dev, name ? name : "vt_op", fn, pk, args, args_size, p->acc, p->n, heap, p->payload,
                              policy, NULL, queued);
    p->acc = p->inline_acc; /* the command owns the malloc'd list and payload now */
    p->n = 0;
    p->payload = NULL;
    /* Staged copies are freed stream-ordered: the op that reads them is
     * queued, and later writes to a reused block queue after it. */
    vt_prepared_release(dev, p);
    return s;
}

vt_status vt_enqueue_prepared(int dev, const char *name, vt_kernel_fn fn, const void *args, size_t args_size,
                              vt_prepared *p, vt_enqueue_policy policy) {
    return enqueue_prepared(dev, name, fn, NULL, args, args_size, p, policy, NULL);
}

vt_status vt_enqueue_prepared_q(int dev, const char *name, vt_kernel_fn fn, const void *args, size_t args_size,
                                vt_prepared *p, int *queued) {
    return enqueue_prepared(dev, name, fn, NULL, args, args_size, p, VT_ENQ_AUTO, queued);
}

vt_status vt_enqueue_packed(int dev, const char *name, const vt_packed_kernel *pk, const void *args, vt_prepared *p,
                            vt_enqueue_policy policy) {
    return enqueue_prepared(dev, name, NULL, pk, args, 0, p, policy, NULL);
}

/* ------------------------------------------------------------ sync, events */

/* Wait until every queue of dev has run what was enqueued on it when the
 * wait began. */
static int wait_all(int dev, int64_t timeout_ms) {
    uint64_t target[VT_MAX_QUEUES];
    int busy = 0;
    for (int k = 0; k < VT_MAX_QUEUES; k++) {
        vt_queue *q = queue_at(dev, k);
        target[k] = atomic_load(&q->tail);
        busy |= atomic_load(&q->done) < target[k];
    }
    if (!busy) return 1; /* an idle device: no clock reads */
    int64_t deadline = timeout_ms < 0 ? -1 : now_ns() + timeout_ms * 1000000;
    for (int k = 0; k < VT_MAX_QUEUES; k++) {
        if (atomic_load(&queue_at(dev, k)->done) >= target[k]) continue;
        int64_t left = -1;
        if (deadline >= 0) {
            left = (deadline - now_ns()) / 1000000;
            if (left < 0) left = 0;
        }
        if (!wait_done(queue_at(dev, k), target[k], left)) return 0;
    }
    return 1;
}

static uint64_t pending_all(int dev) {
    uint64_t n = 0;
    for (int k = 0; k < VT_MAX_QUEUES; k++) {
        vt_queue *q = queue_at(dev, k);
        uint64_t done = atomic_load(&q->done);
        n += atomic_load(&q->tail) - done;
    }
    return n;
}

vt_status vt_wait(int dev, int64_t timeout_ms) {
    vt_status s = vt_check_device(dev);
    if (s == VT_OK) s = vt_defer_flush_before(dev);
    if (s != VT_OK) return s;
    if (!wait_all(dev, timeout_ms < 0 ? -1 : timeout_ms))
        return vt_set_error(VT_ERR_TIMEOUT, "TPU %d: wait timed out after %lld ms with %llu op(s) pending", dev,
                            (long long)timeout_ms, (unsigned long long)pending_all(dev));
    return VT_OK;
}

void vt_queue_drain(int dev) {
    if (vt_check_device(dev) == VT_OK && vt_defer_flush_before(dev) == VT_OK) wait_all(dev, -1);
}

vt_status vt_synchronize_timeout(int dev, int64_t timeout_ms) {
    vt_status s = vt_wait(dev, timeout_ms);
    return s != VT_OK ? s : vt_fault_take(dev, UINT64_MAX);
}

vt_status vt_synchronize(int dev) { return vt_synchronize_timeout(dev, -1); }

vt_status vt_event_record(int dev, uint64_t *ticket_out) {
    if (!ticket_out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "vt_event_record: ticket_out is NULL");
    vt_status s = vt_check_device(dev);
    if (s == VT_OK) s = vt_defer_flush_before(dev); /* the event follows recorded work */
    if (s != VT_OK) return s;
    vt_queue *q = queue_of(dev);
    *ticket_out = ticket_of(q, atomic_load(&q->tail));
    return VT_OK;
}

/* The queue a ticket of dev names, or NULL (error set) for a ticket never
 * recorded. */
static vt_queue *ticket_queue(int dev, uint64_t ticket) {
    vt_queue *q = queue_at(dev, vt_ticket_queue(ticket) % VT_MAX_QUEUES);
    uint64_t tail = atomic_load(&q->tail);
    if (vt_ticket_queue(ticket) >= VT_MAX_QUEUES || seq_of(ticket) > tail) {
        vt_set_error(VT_ERR_INVALID_ARGUMENT, "TPU %d: event ticket %#llx was never recorded (last is %#llx)", dev,
                     (unsigned long long)ticket, (unsigned long long)ticket_of(q, tail));
        return NULL;
    }
    return q;
}

static int reached(int dev, uint64_t ticket) {
    return atomic_load(&queue_at(dev, vt_ticket_queue(ticket) % VT_MAX_QUEUES)->done) >= seq_of(ticket);
}

int vt_event_query(int dev, uint64_t ticket) {
    if (vt_check_device(dev) != VT_OK) return 0;
    return reached(dev, ticket);
}

vt_status vt_event_status(int dev, uint64_t ticket, int *done_out) {
    if (!done_out) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "vt_event_status: done_out is NULL");
    *done_out = 0;
    vt_status s = vt_check_device(dev);
    if (s != VT_OK) return s;
    if (!reached(dev, ticket)) return VT_OK;
    *done_out = 1;
    return vt_fault_take(dev, ticket);
}

vt_status vt_event_wait(int dev, uint64_t ticket, int64_t timeout_ms) {
    vt_status s = vt_check_device(dev);
    if (s != VT_OK) return s;
    vt_queue *q = ticket_queue(dev, ticket);
    if (!q) return VT_ERR_INVALID_ARGUMENT;
    if (!wait_done(q, seq_of(ticket), timeout_ms < 0 ? -1 : timeout_ms))
        return vt_set_error(VT_ERR_TIMEOUT, "TPU %d: event wait timed out after %lld ms", dev, (long long)timeout_ms);
    return VT_OK;
}

vt_status vt_event_synchronize(int dev, uint64_t ticket, int64_t timeout_ms) {
    vt_status s = vt_event_wait(dev, ticket, timeout_ms);
    return s != VT_OK ? s : vt_fault_take(dev, ticket);
}

typedef struct event_block_args {
    vt_queue *src;
    uint64_t seq;
} event_block_args;

static vt_status event_block_kernel(void *p) {
    const event_block_args *a = p;
    wait_done(a->src, a->seq, -1);
    return VT_OK;
}

vt_status vt_event_block(int dev, int src_dev, uint64_t ticket) {
    vt_status s = vt_check_device(dev);
    if (s == VT_OK) s = vt_check_device(src_dev);
    if (s != VT_OK) return s;
    vt_queue *src = ticket_queue(src_dev, ticket);
    if (!src) return VT_ERR_INVALID_ARGUMENT;
    /* Same queue: in-order already. Already reached: nothing to wait for. */
    if (src == queue_of(dev) || atomic_load(&src->done) >= seq_of(ticket)) return VT_OK;
    event_block_args a = {src, seq_of(ticket)};
    return vt_enqueue_ex(dev, "vt_event_block", event_block_kernel, &a, sizeof a, VT_ENQ_ASYNC, NULL);
}

vt_status vt_queue_block_on_device(int dev, int src_dev) {
    vt_status s = vt_check_device(dev);
    if (s == VT_OK) s = vt_check_device(src_dev);
    if (s == VT_OK) s = vt_defer_flush_before(src_dev);
    for (int k = 0; k < VT_MAX_QUEUES && s == VT_OK; k++) {
        vt_queue *src = queue_at(src_dev, k);
        uint64_t seq = atomic_load(&src->tail);
        if (src == queue_of(dev) || atomic_load(&src->done) >= seq) continue;
        event_block_args a = {src, seq};
        s = vt_enqueue_ex(dev, "vt_event_block", event_block_kernel, &a, sizeof a, VT_ENQ_ASYNC, NULL);
    }
    return s;
}

vt_status vt_queue_hold_reads(int src_dev, int dev, uint64_t ticket, vt_prepared *p) {
    vt_status s = vt_check_device(src_dev);
    if (s == VT_OK) s = vt_check_device(dev);
    vt_queue *q = s == VT_OK ? ticket_queue(dev, ticket) : NULL;
    if (!q) {
        vt_prepared_release(src_dev, p);
        return s == VT_OK ? VT_ERR_INVALID_ARGUMENT : s;
    }
    for (int i = 0; i < p->n; i++) p->acc[i].flags = VT_USE_READ | VT_ACCESS_UNCHECKED;
    event_block_args a = {q, seq_of(ticket)};
    return vt_enqueue_prepared(src_dev, "vt_event_block", event_block_kernel, &a, sizeof a, p, VT_ENQ_ASYNC);
}

int64_t vt_queue_pending(int dev) {
    if (vt_check_device(dev) != VT_OK) return -1;
    return (int64_t)pending_all(dev);
}

int vt_queues_in_use(int dev) { return atomic_load_explicit(&multi_queue[dev], memory_order_relaxed); }

int vt_queue_reached(int dev, int k, uint64_t done_at) {
    return !done_at || atomic_load(&queue_at(dev, k)->done) >= done_at;
}
