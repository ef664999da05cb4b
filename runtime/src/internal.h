/* internal.h — runtime-private helpers shared by libvtpu's files: error
 * reporting, element conversions and the per-ISA dispatch tables. Not installed. */
#ifndef VTPU_INTERNAL_H
#define VTPU_INTERNAL_H

#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>

#include "vtpu/vtpu.h"

/* VT_X86: the x86 ISA paths are built (x86-64 hosts). VT_PORTABLE_ONLY
 * (runtime/Makefile's test-portable) leaves them out on any host, so the
 * portable C that AArch64 and other CPUs run builds and is tested here. */
#if defined(__x86_64__) && !defined(VT_PORTABLE_ONLY)
#define VT_X86 1
#else
#define VT_X86 0
#endif

/* One step of a polling loop (a waiter, an idle queue worker or pool
 * thread): give the core to any runnable thread. vtpu runs one thread more
 * than the cores it uses (the caller's, each queue's worker, the pool's),
 * so a poll that held its core (a pause loop) kept the thread it waited for
 * off it: an op + synchronize took 175 us where its kernel took 55 us. */
static inline void vt_poll_yield(void) { sched_yield(); }

/* Every family's ISA rule: the widest of AVX-512 and AVX2 that mask allows
 * (0: portable C). VT_ISA_TABLE names the family's table for that answer;
 * off x86 it names the portable one alone, so x86 tables need not exist. */
static inline unsigned vt_isa_widest(unsigned mask) {
    return !VT_X86 ? 0u : mask & VT_ISA_AVX512 ? VT_ISA_AVX512 : mask & VT_ISA_AVX2;
}
#if VT_X86
#define VT_ISA_TABLE(isa, portable, avx2, avx512) \
    ((isa) == VT_ISA_AVX512 ? (avx512) : (isa) == VT_ISA_AVX2 ? (avx2) : (portable))
#else
#define VT_ISA_TABLE(isa, portable, avx2, avx512) (portable)
#endif

/* Whether a host allocation of this many bytes exceeds the machine's
 * physical memory: such a request is refused up front, since overcommit
 * would accept it and the OOM killer end the process (core/hbm.c). */
int vt_exceeds_host_memory(double bytes);

/* Set this thread's last-error message and return s (printf-style). */
vt_status vt_set_error(vt_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void vt_clear_error(void);
/* Re-set this thread's last error as "<name>: <message>" and return s. */
vt_status vt_error_prefix(vt_status s, const char *name);

/* Fails with VT_ERR_BAD_FORK in a forked child, VT_ERR_INVALID_ARGUMENT
 * before vt_init; used at the top of every public entry point that touches
 * devices. */
vt_status vt_check_runtime(void);

/* ---- bf16 / f16 <-> f32, bit-exact with PyTorch (round-to-nearest-even, NaN kept quiet) */
static inline float vt_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint16_t vt_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if (f != f) return 0x7fc0;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
float vt_f16_to_f32(uint16_t h);
uint16_t vt_f32_to_f16(float f);

/* ---- tensor geometry */
/* Address of t's first element; NULL for a view with no memory (an empty
 * tensor may have data NULL, and no arithmetic is done on it). */
static inline char *vt_base(const vt_tensor *t) {
    return t->data ? (char *)t->data + t->offset * (int64_t)vt_dtype_size(t->dtype) : NULL;
}
/* Whether t broadcasts to sizes[0..ndim): VT_OK or PyTorch's error. */
vt_status vt_broadcast_check(const vt_tensor *t, int32_t ndim, const int64_t *sizes);
/* The operand checks every op runs when it is built (node checks) or
 * called directly (vt_ew_validate): a descriptor that is valid and has data
 * (errors name the op and the operand), and an input that also broadcasts
 * to the output's shape. */
vt_status vt_check_operand(const char *name, const vt_tensor *t, const char *what);
vt_status vt_check_input(const char *name, const vt_tensor *t, const char *what, const vt_tensor *out);
/* Broadcast t's view to the shape (ndim, sizes) of an output: right-aligned,
 * size-1 dims get stride 0. VT_ERR_INVALID_ARGUMENT if not broadcastable. */
vt_status vt_broadcast_to(const vt_tensor *t, int32_t ndim, const int64_t *sizes, vt_tensor *out);
/* A contiguous (row-major) view of like's shape and dtype over data. */
vt_tensor vt_contiguous_like(const vt_tensor *like, void *data);
/* *d = *s for the dims s has (d's dims past s->ndim are left as they are):
 * the hot paths copy a few dims, not the whole 16-dim descriptor. An ndim
 * out of range is kept for the checks to refuse. */
static inline void vt_tensor_copy(vt_tensor *d, const vt_tensor *s) {
    d->data = s->data;
    d->dtype = s->dtype;
    d->ndim = s->ndim;
    d->offset = s->offset;
    const int32_t n = s->ndim < 0 ? 0 : s->ndim > VT_MAX_DIMS ? VT_MAX_DIMS : s->ndim;
    for (int32_t i = 0; i < n; i++) {
        d->sizes[i] = s->sizes[i];
        d->strides[i] = s->strides[i];
    }
}
/* Check a descriptor: dtype valid, 0 <= ndim <= VT_MAX_DIMS, sizes >= 0. */
vt_status vt_tensor_validate(const vt_tensor *t, const char *what);

/* ---- runtime: device.c, hbm.c, queue.c */
#define VT_MAX_DEVICES 64

/* What vt_init reads from the environment. Parsing is separate from vt_init
 * so tests can exercise it after the process has initialised. */
typedef struct vt_runtime_config {
    const vt_chip_info *chip;  /* VTPU_CHIP, default v6e */
    int num_devices;           /* VTPU_NUM_DEVICES, default 1, 1..VT_MAX_DEVICES */
    int hbm_override;          /* VTPU_HBM_BYTES given */
    uint64_t hbm_bytes;
    int eager_from_env;        /* TPU_LAUNCH_BLOCKING / TPU_DEFER_AND_FUSE given */
    vt_eager_mode eager_mode;
    /* For the allocator: wait until dev's queue has run everything queued
     * (and recorded) so far, leaving kernel errors for the next sync. */
    void (*drain)(int dev);
} vt_runtime_config;
/* The queue's drain (queue.c), which vt_init hands the allocator. */
void vt_queue_drain(int dev);
vt_status vt_runtime_config_from_env(vt_runtime_config *cfg);
/* "4096", "512M", "2G", "2GiB", "1.5GB" (K/M/G/T are binary multiples). */
vt_status vt_parse_bytes(const char *s, uint64_t *out);
/* CUDA-style size text: "512 bytes", "1.50 KiB", "31.25 GiB". */
void vt_format_bytes(uint64_t n, char *buf, size_t len);

/* Called once by vt_init, before the runtime is published. */
vt_status vt_hbm_init(const vt_runtime_config *cfg);
/* Test hook: set device dev's effective capacity (0 restores the default). */
vt_status vt_hbm_set_capacity_for_test(int dev, uint64_t bytes);

/* vt_enqueue with an explicit completion policy. VT_ENQ_WAIT waits for the
 * command and returns its own error (not latched), whatever the eager mode;
 * *ticket_out (may be NULL) receives the command's ticket. */
typedef enum vt_enqueue_policy { VT_ENQ_AUTO = 0, VT_ENQ_ASYNC, VT_ENQ_WAIT } vt_enqueue_policy;
/* Or'ed into a policy: the command is small (a few microseconds at most), so
 * when the queue is idle it may run on the calling thread, in its place in
 * the stream, instead of being handed to the worker. */
#define VT_ENQ_INLINE_OK 0x10
vt_status vt_enqueue_ex(int dev, const char *op_name, vt_kernel_fn fn, const void *args, size_t args_size,
                        vt_enqueue_policy policy, uint64_t *ticket_out);
/* Whether the calling thread is a queue worker (it runs commands, it never
 * records or flushes). */
int vt_on_queue_worker(void);
/* A kernel that runs several user ops (a fused group) names the one that
 * failed: the fault carries that name instead of the command's. */
void vt_command_failed_op(const char *name);
/* Tracing (trace.c): whether it is on, and what the running command is, for
 * the trace (a kernel that knows more than its op name says it; copied). */
int vt_tracing(void);
void vt_command_describe(const char *name, const char *shape, int nodes, uint64_t bytes);
int64_t vt_trace_begin(void); /* a command starts: its start time */
void vt_trace_record(int dev, int queue, const char *op_name, int64_t start_ns);
/* "2x3x4" into buf (len bytes). */
void vt_shape_string(const vt_tensor *t, char *buf, size_t len);
/* DeferAndFuse (graph/defer.c): flush dev's recorded nodes before other
 * work touches its queue. Does nothing on a worker, inside a flush, or when
 * nothing is pending. */
vt_status vt_defer_flush_before(int dev);

/* ---- what a queued command touches (access.c)
 * Every queued op names the device tensors it reads and writes. The one
 * check every op goes through (vt_uses_prepare) then: finds each tensor's
 * HBM block (memory that is not the device's is refused, as PyTorch refuses
 * tensors on two devices), applies PyTorch's overlap rules to what it
 * writes, and copies inputs that a kernel cannot read while writing over
 * them. The resolved list travels with the command, so the queue can poison
 * what a failed op wrote and refuse to compute from poisoned memory. */
enum {
    VT_USE_READ = 1u << 0,
    VT_USE_WRITE = 1u << 1,
    /* read: may be exactly a written view; the kernel is elementwise in place
     * (TensorIterator's rule: full overlap allowed, partial refused) */
    VT_USE_ALIAS_OK = 1u << 2,
    /* read: the kernel cannot read memory it writes (PyTorch does not check
     * the op): any overlap with a write is resolved by copying the input */
    VT_USE_STAGE = 1u << 3,
    /* read: may live on another device (the source of a cross-device copy) */
    VT_USE_ANY_DEVICE = 1u << 4,
    /* write: every element written gets the same value (fill), so repeated
     * elements in the output are harmless, as PyTorch allows for fill_ */
    VT_USE_SAME_VALUE = 1u << 5,
};
/* t points at the descriptor the command will carry: staging rewrites it to
 * a copy. Uses of different nonzero groups are not compared (a foreach list
 * entry is checked against its own entries). */
typedef struct vt_use {
    vt_tensor *t;
    unsigned flags;
    int32_t group;
} vt_use;

struct hbm_block;
/* A use resolved to its memory: the HBM block and the allocation generation
 * it had when the command was built (a block handed out again is new data). */
#define VT_ACCESS_COVERS (1u << 8) /* a dense write of the whole allocation */
/* A read that orders the command (across queues) but whose poison the queue
 * does not check: the kernel checks it itself (a host step). */
#define VT_ACCESS_UNCHECKED (1u << 9)
typedef struct vt_access {
    struct hbm_block *block;
    uint64_t gen;
    unsigned flags; /* VT_USE_READ / VT_USE_WRITE, VT_ACCESS_COVERS */
    int dev;
} vt_access;

#define VT_ACCESS_INLINE 12
#define VT_STAGE_INLINE 4
typedef struct vt_prepared {
    int n;
    vt_access *acc; /* inline_acc, or malloc'd when n > VT_ACCESS_INLINE */
    vt_access inline_acc[VT_ACCESS_INLINE];
    int nscratch;
    void **scratch; /* staged input copies, freed (stream-ordered) after the enqueue */
    void *inline_scratch[VT_STAGE_INLINE];
    /* A malloc'd block the command's args point into (descriptor lists):
     * the queue frees it once the command has run or been skipped, and on
     * a failed enqueue. Kernels never free what they are given. */
    void *payload;
} vt_prepared;

/* Check and resolve n uses for an op on dev (see above). On success p holds
 * the accesses (and any staged copies, already enqueued); hand it to
 * vt_enqueue_prepared, which releases it. On failure nothing was enqueued
 * and p holds nothing. */
vt_status vt_uses_prepare(int dev, const char *name, vt_use *uses, int n, vt_prepared *p);
/* Enqueue fn(args) with the prepared accesses (policy as vt_enqueue_ex),
 * then release p. */
vt_status vt_enqueue_prepared(int dev, const char *name, vt_kernel_fn fn, const void *args, size_t args_size,
                              vt_prepared *p, vt_enqueue_policy policy);
/* vt_enqueue_prepared (VT_ENQ_AUTO) that says whether the command was queued
 * (*queued: it runs, or has run, exactly once) or refused before that. */
vt_status vt_enqueue_prepared_q(int dev, const char *name, vt_kernel_fn fn, const void *args, size_t args_size,
                                vt_prepared *p, int *queued);
/* A kernel with a compact queued form: pack writes args into a ring slot
 * (at most VT_MAX_ARGS bytes) and run_packed reads them there; run reads
 * args where the caller keeps them, for a command run on the caller's
 * thread (VT_ENQ_INLINE_OK, or a wait from the queue's own worker). */
typedef struct vt_packed_kernel {
    vt_kernel_fn run, run_packed;
    size_t (*pack)(const void *args, void *slot);
} vt_packed_kernel;
vt_status vt_enqueue_packed(int dev, const char *name, const vt_packed_kernel *pk, const void *args, vt_prepared *p,
                            vt_enqueue_policy policy);
/* Prepare then enqueue (the common case; policy VT_ENQ_AUTO). */
vt_status vt_enqueue_uses(int dev, const char *name, vt_kernel_fn fn, void *args, size_t args_size, vt_use *uses,
                          int n);
/* Release what vt_uses_prepare took when the command is not enqueued after all. */
void vt_prepared_release(int dev, vt_prepared *p);
/* An empty p with room for nacc accesses: the inline list, or a malloc'd one
 * when they do not fit (the command owns it once p is enqueued). 0 when host
 * memory ran out; p then holds nothing. */
int vt_prepared_init(vt_prepared *p, int nacc);

/* View geometry, PyTorch's rules (access.c). Bytes [*lo, *hi) a non-empty
 * view spans; 0 on overflow. */
int vt_view_span(const vt_tensor *t, uintptr_t *lo, uintptr_t *hi);
/* is_non_overlapping_and_dense: the elements tile a block without gaps. */
int vt_view_is_dense(const vt_tensor *t);
/* Dense with nonnegative strides: the element offsets from vt_base(t) are
 * exactly [0, numel), the indices a vt_source reads by. */
int vt_view_is_dense_forward(const vt_tensor *t);
/* at::has_internal_overlap's YES: a dimension of stride 0 and size > 1. */
int vt_view_internal_overlap(const vt_tensor *t);
typedef enum vt_overlap { VT_OVERLAP_NO = 0, VT_OVERLAP_FULL, VT_OVERLAP_PARTIAL, VT_OVERLAP_TOO_HARD } vt_overlap;
/* at::get_overlap_status, refined: identical views are FULL even when not
 * dense, and views that provably share no element are NO. */
vt_overlap vt_view_overlap(const vt_tensor *a, const vt_tensor *b);

/* ---- HBM blocks behind the accesses (hbm.c) */
/* Resolve [lo, hi) to the live block that holds it, looking at dev_hint
 * first (-1: none): *dev_out is its device. VT_ERR_INVALID_ARGUMENT when no
 * live block holds it, with *dev_out the device whose memory it starts in
 * (a freed block, or past the end of one) or -1 (host memory). */
vt_status vt_hbm_resolve(int dev_hint, uintptr_t lo, uintptr_t hi, vt_access *a, int *dev_out);
/* The fast path of a queued op: resolve n spans (lo[k], hi[k] are stride
 * bytes apart) against dev's live blocks under one lock; found[k] = 1 where
 * a block of dev holds span k (acc[k] filled), else 0. Never fails. */
void vt_hbm_resolve_local(int dev, int n, const uintptr_t *lo, const uintptr_t *hi, size_t stride, vt_access *acc,
                          unsigned char *found);

/* Cross-queue order (queue.c): after[k] (k != self) is raised to the last
 * ticket of queue k that used any block of acc; vt_hbm_mark_uses records a
 * command of queue self that completes at done_at. */
void vt_hbm_uses_before(const vt_access *acc, int n, int dev, int self, uint64_t *after);
void vt_hbm_mark_uses(const vt_access *acc, int n, int dev, int self, uint64_t done_at);
/* Cross-device order (queue.c): make dev's current queue wait until every
 * queue of src_dev has run what it holds now; and queue on src_dev's current
 * queue a command that reads p's accesses (of src_dev) and waits until dev's
 * ticket completes, so later work of any src_dev queue on that memory waits
 * for dev's use of it. */
vt_status vt_queue_block_on_device(int dev, int src_dev);
vt_status vt_queue_hold_reads(int src_dev, int dev, uint64_t ticket, vt_prepared *p);
/* Whether a queue other than 0 of dev has been used (queue.c), and whether
 * queue k of dev has completed done_at commands. */
int vt_queues_in_use(int dev);
int vt_queue_reached(int dev, int k, uint64_t done_at);

/* ---- faults: errors of queued work (fault.c)
 * A failed command's error becomes a fault: the memory it writes is
 * poisoned with it, commands that read poisoned memory do not run and pass
 * the fault on to what they write, host reads of poisoned memory raise it,
 * and a synchronisation of the device raises every fault not yet raised. */
typedef struct vt_fault vt_fault;
/* A new fault (one reference) for a command of dev at ticket. */
vt_fault *vt_fault_new(int dev, uint64_t ticket, vt_status s, const char *op_name, const char *msg);
void vt_fault_ref(vt_fault *f);
void vt_fault_unref(vt_fault *f);
/* Keep f for the device's next synchronisation (takes a reference). */
void vt_fault_latch(vt_fault *f);
/* What f says, without raising it. */
const char *vt_fault_message(const vt_fault *f);
vt_status vt_fault_status(const vt_fault *f);
/* Set f as this thread's error (status returned) and mark it raised. */
vt_status vt_fault_raise(vt_fault *f);
/* Raise the faults of dev not yet raised that are in upto's queue with a
 * ticket <= upto (every queue's when upto is UINT64_MAX), and those of no
 * queue, as one error naming each (VT_OK when there are none). */
vt_status vt_fault_take(int dev, uint64_t upto);
/* Poison the written blocks of acc with f. */
void vt_fault_poison(const vt_access *acc, int n, vt_fault *f);
/* The fault poisoning any read of acc (a reference), or NULL. */
vt_fault *vt_fault_of_reads(const vt_access *acc, int n);
/* A command succeeded: writes that cover their whole block clear its poison. */
void vt_fault_clear_writes(const vt_access *acc, int n);
/* One block (hbm.c): poison the allocation a->gen of a->block with f (the
 * first fault of an allocation stays), the fault of a's allocation (a
 * reference, or NULL), and clear it. */
void vt_hbm_poison(const vt_access *a, vt_fault *f);
vt_fault *vt_hbm_fault(const vt_access *a);
void vt_hbm_unpoison(const vt_access *a);
/* Contents versions. Every command that writes a block counts a write
 * there when it is prepared or recorded (vt_uses_prepare), and a host
 * write when it is marked (vt_mark_written), so a block's (allocation
 * generation, writes) pair changes before any write it stands for runs: a
 * command prepared after it reads the contents the queue has made by then,
 * and a later command with the same pair reads the same bytes. Lets a
 * kernel keep what it derived from an operand (mxu.c's packed B panels). */
typedef struct vt_version {
    uint64_t gen, writes;
} vt_version;
void vt_hbm_note_write(const vt_access *a);
vt_version vt_hbm_version(const vt_access *a);
/* The version of the block holding t's view (0, 0 when t is empty or not
 * device memory). */
vt_version vt_view_version(const vt_tensor *t);

/* Whether a's allocation is still live (not freed since a was resolved);
 * lock-free. A block stays known while queued or recorded work names it:
 * blocks go back to the host only after the queue drained. */
int vt_hbm_access_live(const vt_access *a);

/* ---- dtype conversion (kernels/copy/copy.c) and strided iteration (core/iter.c) */
/* Convert n elements between any two dtypes with vt_copy's rules; strides
 * count elements. Same-dtype conversion copies the bits unchanged. */
void vt_convert(vt_dtype from, const void *src, int64_t src_stride, vt_dtype to, void *dst, int64_t dst_stride,
                int64_t n);
/* d[i] = d[i] + alpha * s[i] over n contiguous f32 or bf16 values (bf16:
 * widened, computed in f32, rounded once as vt_f32_to_bf16 rounds), a
 * multiply then an add, never fused: the bits of the element loop on
 * every ISA. d and s do not overlap. */
void vt_accumulate_f32(float *d, const float *s, int64_t n, float alpha);
void vt_accumulate_bf16(uint16_t *d, const uint16_t *s, int64_t n, float alpha);

/* Walks the shared shape of up to VT_ITER_MAX_OPS operands (already
 * broadcast to it) as runs along the innermost dimension, after dropping
 * size-1 dimensions and merging dimensions every operand lays out alike. */
#define VT_ITER_MAX_OPS 4
typedef struct vt_iter {
    int32_t ndim, nops;
    int64_t numel;
    int64_t sizes[VT_MAX_DIMS];
    int64_t strides[VT_ITER_MAX_OPS][VT_MAX_DIMS]; /* elements */
    char *base[VT_ITER_MAX_OPS];                   /* data + offset, in bytes */
    size_t elsize[VT_ITER_MAX_OPS];
} vt_iter;
/* ptrs: first element of the run per operand; strides: innermost strides. */
typedef void (*vt_iter_run_fn)(void *ctx, char *const *ptrs, const int64_t *strides, int64_t n);
void vt_iter_init(vt_iter *it, int nops, const vt_tensor *ops);
/* Elements visited in the order of ops[0]'s memory: the permutation of
 * the dims (shared by the m operands, all of ops[0]'s ndim) that puts the
 * largest stride outermost, the first operand with different non-zero
 * strides in two dims deciding (TensorIterator's reorder_dimensions);
 * dims of size 1 keep their places and no stride of theirs stops the
 * others; returns whether any dim moved. vt_permute_dims applies it to every
 * operand. */
int vt_memory_perm(vt_tensor *const *ops, int m, int *perm);
void vt_permute_dims(vt_tensor *const *ops, int m, const int *perm);
/* Visit logical (row-major) elements [begin, end) run by run. */
void vt_iter_range(const vt_iter *it, int64_t begin, int64_t end, vt_iter_run_fn fn, void *ctx);
/* The same visit, a block of runs per call: `rows` runs of n elements, the
 * first at ptrs, each rstrides[k] bytes after the one before (operand k).
 * Whole inner rows come several per call; a range's partial first or last
 * row comes alone (rows == 1). Drivers whose per-run work has a fixed cost
 * (checks, staging set-up) pay it once per block. */
typedef void (*vt_iter_block_fn)(void *ctx, char *const *ptrs, const int64_t *strides, int64_t n, int64_t rows,
                                 const int64_t *rstrides);
void vt_iter_blocks(const vt_iter *it, int64_t begin, int64_t end, vt_iter_block_fn fn, void *ctx);

/* Keep the calling thread on CPU `slot` (modulo) of the CPUs the process
 * may use, when the pool spans all of them (thread_pool.c); else nothing. */
void vt_place_thread(int slot);

/* A kernel call (one thread's range) that writes at least this many bytes
 * writes them with streaming stores: its thread's share of the last-level
 * cache (thread_pool.c). Below it the output stays in cache for the op that
 * reads it next (a 4 MB add runs 3x faster than with streaming stores); above
 * it streaming skips the read-for-ownership (a 64 MB add 1.2x faster). */
int64_t vt_stream_store_bytes(void);
/* Tests: set that threshold (bytes > 0), or restore the machine's (0). */
void vt_stream_store_force(int64_t bytes);

/* ---- the ISA registry (kernels/registry.c)
 * Every kernel family's ISA-specific tables are picked in one place: once,
 * before the first kernel runs, for vt_isa_active(); again when a test
 * forces a mask. A family keeps its picker (called only by the registry)
 * and the tables it reads; its getters call vt_kernels_ready() if they find
 * nothing picked yet. */
void vt_kernels_ready(void);
/* Test aid: every family on the best path within mask (limited to what the
 * CPU has); vt_isa_active() and vt_isa_path() report it. Returns the mask in
 * force. vt_isa_force(vt_isa_default()) restores the start-up choice. */
unsigned vt_isa_force(unsigned mask);
/* The mask chosen at start-up (the CPU's, limited by VTPU_ISA). */
unsigned vt_isa_default(void);
/* isa.c: make mask (limited to what the CPU has) the active one; returns it. */
unsigned vt_isa_set_active(unsigned mask);
/* The families' pickers: each stores its choice within mask and returns the
 * VT_ISA_* bits of the path it chose. */
unsigned vt_convert_select_isa(unsigned mask);
unsigned vt_elementwise_select_isa(unsigned mask);
unsigned vt_elementwise_act_select_isa(unsigned mask);
unsigned vt_reduce_select_isa(unsigned mask);
unsigned vt_norm_select_isa(unsigned mask);
unsigned vt_softmax_select_isa(unsigned mask);
unsigned vt_rng_select_isa(unsigned mask);
unsigned vt_mxu_select_isa(unsigned mask);
unsigned vt_attn_select_isa(unsigned mask);
unsigned vt_optim_select_isa(unsigned mask);
unsigned vt_conv_dw_select_isa(unsigned mask);
unsigned vt_rnn_select_isa(unsigned mask);

/* Elements per parallel chunk for memory-bound elementwise work: below it
 * the pool costs more than it gains. */
#define VT_ELEMENTWISE_GRAIN 32768

/* ---- kernels: elementwise plans (kernels/elementwise/elementwise.c, kernels/copy/copy.c)
 * Every elementwise kernel (unary, binary, ternary, where, copy, fill) is
 * built as a plan: the iterator over its operands (out first, then the
 * inputs broadcast to out's shape) and a function that computes logical
 * elements [b, e). vt_ew_plan_run runs one plan over the thread pool; the
 * fuser (graph/fuse.c) runs several tile by tile, moving operands into L1
 * scratch by rebasing their iterators. */
typedef struct vt_ew_head {
    vt_iter it;
    _Atomic int failed; /* an integer division by zero happened */
} vt_ew_head;
#define VT_EW_PLAN_BYTES 1024
typedef struct vt_ew_plan {
    void (*range)(void *ctx, int64_t b, int64_t e);
    _Alignas(64) unsigned char ctx[VT_EW_PLAN_BYTES]; /* starts with a vt_ew_head */
} vt_ew_plan;
static inline vt_ew_head *vt_ew_plan_head(vt_ew_plan *p) { return (vt_ew_head *)(void *)p->ctx; }
/* The plans trust their operands: checked by the node's check, or by
 * vt_ew_validate (valid descriptors, inputs that broadcast to out, a valid
 * compute dtype, or -1 for ops without one: copy, where) in the direct
 * entry points (vt_binary_ex...). */
vt_status vt_ew_validate(const vt_tensor *out, int nin, const vt_tensor *const *in, vt_dtype compute,
                         const char *what);
vt_status vt_unary_plan(vt_ew_plan *p, vt_unary_op op, const vt_tensor *out, const vt_tensor *a, vt_dtype compute,
                        const double *params);
vt_status vt_binary_plan(vt_ew_plan *p, vt_binary_op op, const vt_tensor *out, const vt_tensor *a, const vt_tensor *b,
                         vt_dtype compute, vt_scalar alpha, const double *params);
vt_status vt_ternary_plan(vt_ew_plan *p, vt_ternary_op op, const vt_tensor *out, const vt_tensor *a,
                          const vt_tensor *b, const vt_tensor *c, vt_dtype compute, vt_scalar alpha);
vt_status vt_where_plan(vt_ew_plan *p, const vt_tensor *out, const vt_tensor *cond, const vt_tensor *a,
                        const vt_tensor *b);
vt_status vt_copy_plan(vt_ew_plan *p, const vt_tensor *dst, const vt_tensor *src);
vt_status vt_fill_plan(vt_ew_plan *p, const vt_tensor *out, vt_scalar value);
/* Tensor i of foreach op x as a plan (kernels/elementwise/foreach.c): the
 * multi-tensor kernel's per-element code on that one tensor. Only for ops
 * vt_foreach_fusable accepts (not the reductions, no scalar tensor). */
struct vt_foreach_args;
int vt_foreach_fusable(const struct vt_foreach_args *x);
/* Whether tensor i of x is written in place (x->in_place says, or out[i] is a[i]). */
int vt_foreach_in_place(const struct vt_foreach_args *x, int64_t i);
vt_status vt_foreach_item_plan(vt_ew_plan *p, const struct vt_foreach_args *x, int64_t i);
/* The f32 scalar S and alpha tensor i of x computes with (rounded as its
 * plan rounds them: generated code reproduces the plan); 0 when tensor i
 * computes in f64 (or x is not fusable). */
int vt_foreach_item_f32_scalars(const struct vt_foreach_args *x, int64_t i, float *s, float *alpha);
/* Run p over all its elements; VT_ERR_KERNEL "ZeroDivisionError" after an
 * integer division by zero. */
vt_status vt_ew_plan_run(vt_ew_plan *p);
/* The float-class microkernel a unary (*nin 1, a vt_unary_ukernel) or
 * binary (*nin 2, a vt_binary_ukernel) plan calls on its f32 buffers, and
 * the parameter block it passes (prm: 1 + VT_EW_MAX_PARAMS floats, as the
 * kernel reads them), for generated code that calls the same kernel on its
 * own buffers. 0 for another class, a ternary or boolean op. */
int vt_ew_plan_float_kernel(const vt_ew_plan *p, const void **fn, int *nin, float *prm);

/* ---- kernels: elementwise microkernels (kernels/elementwise/elementwise_ops.c)
 * Operate on the compute class of a dtype: float (F32, BF16, F16), double
 * (F64) or int64 (every integer dtype and bool). Inputs and a non-bool
 * output are of the class type; bool-valued ops write uint8 0/1. An input
 * stride of 0 makes it a scalar, otherwise it is 1. alpha points to a value
 * of the class type. They return nonzero after an integer division by zero. */
typedef enum vt_compute_class { VT_CLASS_FLOAT = 0, VT_CLASS_DOUBLE, VT_CLASS_INT, VT_CLASS_COUNT } vt_compute_class;
/* prm points to class-typed values: for binary and ternary kernels prm[0]
 * is alpha and prm[1 + k] the op's params[k]; for unary ones prm[k] is
 * params[k]. */
typedef int (*vt_binary_ukernel)(int64_t n, void *out, const void *a, int64_t as, const void *b, int64_t bs,
                                 const void *alpha);
typedef int (*vt_unary_ukernel)(int64_t n, void *out, const void *a, const void *prm);
typedef int (*vt_ternary_ukernel)(int64_t n, void *out, const void *a, int64_t as, const void *b, int64_t bs,
                                  const void *c, int64_t cs, const void *prm);
/* Activations and further math (kernels/elementwise/elementwise_math.c); NULL where an
 * op has no kernel in a class or lives in the tables above. */
extern const vt_unary_ukernel vt_math_unary_ukernels[VT_CLASS_COUNT][VT_UNARY_OP_COUNT];
extern const vt_binary_ukernel vt_math_binary_ukernels[VT_CLASS_COUNT][VT_BINARY_OP_COUNT];
extern const vt_ternary_ukernel vt_ternary_ukernels[VT_CLASS_COUNT][VT_TERNARY_OP_COUNT];
/* Contiguous f32 activations with per-ISA versions (elementwise_avx512.c):
 * same formulas with a vector exp/erf of about an ulp. out may alias inputs. */
typedef struct vt_f32_act_table {
    void (*silu)(int64_t n, float *out, const float *x);
    void (*gelu)(int64_t n, float *out, const float *x);
    void (*gelu_tanh)(int64_t n, float *out, const float *x);
    void (*silu_backward)(int64_t n, float *out, const float *g, const float *x);
    void (*gelu_backward)(int64_t n, float *out, const float *g, const float *x);
    void (*gelu_tanh_backward)(int64_t n, float *out, const float *g, const float *x);
    void (*addcmul)(int64_t n, float *out, const float *a, const float *b, const float *c, float v);
    void (*tanh_act)(int64_t n, float *out, const float *x); /* tanh */
    void (*sigmoid)(int64_t n, float *out, const float *x);
} vt_f32_act_table;
/* The active table (portable entries are NULL: the class kernels run). */
const vt_f32_act_table *vt_f32_act(void);
/* Contiguous bf16 rows of the same activations (elementwise_avx512bf16.c),
 * indexed by op: the f32 kernel's result rounded once, computed without
 * staging. out may alias inputs. */
typedef void (*vt_bf16_act_unary_fn)(int64_t n, uint16_t *out, const uint16_t *x);
typedef void (*vt_bf16_act_binary_fn)(int64_t n, uint16_t *out, const uint16_t *a, const uint16_t *b);
typedef struct vt_bf16_act_table {
    vt_bf16_act_unary_fn unary[VT_UNARY_OP_COUNT];
    vt_bf16_act_binary_fn binary[VT_BINARY_OP_COUNT];
} vt_bf16_act_table;
/* The active table; NULL where the ISA has none (the staged path runs). */
const vt_bf16_act_table *vt_bf16_act(void);
/* NULL where the op has no meaning in that class (bitwise on floats, exp on ints). */
extern const vt_binary_ukernel vt_binary_ukernels[VT_CLASS_COUNT][VT_BINARY_OP_COUNT];
/* Ops PyTorch evaluates in the narrow type's own arithmetic, rounding every
 * step (trunc/floor division, xlogy and logit in bf16 or f16,
 * sigmoid_backward in f16); NULL for other ops and dtypes. */
vt_binary_ukernel vt_narrow_ukernel(vt_binary_op op, vt_dtype compute);
vt_unary_ukernel vt_narrow_unary_ukernel(vt_unary_op op, vt_dtype compute);
extern const vt_unary_ukernel vt_unary_ukernels[VT_CLASS_COUNT][VT_UNARY_OP_COUNT];
int vt_binary_op_is_bool(vt_binary_op op);
int vt_unary_op_is_bool(vt_unary_op op);

/* ---- kernels: elementwise ISA dispatch (kernels/elementwise*.c) */
/* f32 microkernels that have per-ISA versions: out[i] = a[i*as] op b[i*bs]
 * with out contiguous, as and bs each 1 or 0 (a scalar operand, read once),
 * not both 0; out may alias a or b. al: axpy's alpha (a + al * b rounded
 * once), ignored by the others. */
typedef void (*vt_f32_binary_fn)(int64_t n, float *out, const float *a, int64_t as, const float *b, int64_t bs,
                                 float al);
typedef struct vt_f32_binary_table {
    vt_f32_binary_fn add, sub, mul, div, axpy;
} vt_f32_binary_table;
extern const vt_f32_binary_table vt_f32_binary_portable;
/* The active ISA's microkernel that f32 op with alpha (a float: the binary
 * ukernel's class-typed alpha) calls for two operands of stride 1 or 0, and
 * in *al the alpha to pass it; NULL for ops without one. */
vt_f32_binary_fn vt_f32_binary_direct(vt_binary_op op, const void *alpha, float *al);
#if VT_X86
extern const vt_f32_binary_table vt_f32_binary_avx2;
extern const vt_f32_binary_table vt_f32_binary_avx512;
extern const vt_f32_act_table vt_f32_act_avx512;
extern const vt_f32_act_table vt_f32_act_avx2;
extern const vt_bf16_act_table vt_bf16_act_avx512bf16;
#endif
#if VT_X86
void vt_cvt_bf16_f32_avx512(const uint16_t *src, float *dst, int64_t n);
void vt_cvt_f32_bf16_avx512(const float *src, uint16_t *dst, int64_t n);
void vt_cvt_bf16_f32_avx2(const uint16_t *src, float *dst, int64_t n);
void vt_cvt_f32_bf16_avx2(const float *src, uint16_t *dst, int64_t n);
void vt_cvt_f32_bf16_avx512bf16(const float *src, uint16_t *dst, int64_t n);
void vt_acc_f32_avx512(float *d, const float *s, int64_t n, float alpha);
void vt_acc_bf16_avx512(uint16_t *d, const uint16_t *s, int64_t n, float alpha);
void vt_acc_f32_avx2(float *d, const float *s, int64_t n, float alpha);
void vt_acc_bf16_avx2(uint16_t *d, const uint16_t *s, int64_t n, float alpha);
/* A 16 x 16 tile of 2- or 4-byte elements (es) transposed: dst row r
 * (bytes ds apart) = element r of each src row j (bytes ss apart), j in
 * order. Partial tiles: nr elements of nj src rows read, nr dst rows of nj
 * elements written (masked: nothing outside them is touched). */
void vt_transpose16_avx512(const char *src, int64_t ss, char *dst, int64_t ds, size_t es, int nr, int nj);
#endif

/* ---- kernels: scalar references (kernels/elementwise/elementwise_ref.c)
 * Half-precision rounding written from the definition (scale, round to
 * nearest even, re-encode), independent of the bit tricks in tensor.c. */
uint16_t vt_ref_f32_to_f16(float f);
uint16_t vt_ref_f32_to_bf16(float f);
float vt_ref_f16_to_f32(uint16_t h);

/* ---- kernels: random numbers (kernels/rng/rng.c) */
/* Philox counter values one vt_rng_uniform / vt_rng_normal call on n
 * elements of dtype consumes; the generator offset advances by this. */
/* One Philox4x32-10 block: the four words for (counter, key). */
void vt_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
/* Philox words of nblocks consecutive counters first, first+1, ... (high
 * 64 bits of the counter zero): out[4*j + w] = word w of block j. Picks the
 * widest path at run time (pure integer: every path gives the same bits). */
void vt_philox_blocks(const uint32_t key[2], uint64_t first, int64_t nblocks, uint32_t *out);
void vt_philox_blocks_portable(const uint32_t key[2], uint64_t first, int64_t nblocks, uint32_t *out);
#if VT_X86
void vt_philox_blocks_avx512(const uint32_t key[2], uint64_t first, int64_t nblocks, uint32_t *out);
#endif
/* 16 counters at once, lane-wise (vectorises where the ISA allows). */
static inline void vt_philox16(const uint32_t key[2], uint64_t first, uint32_t *out) {
    uint32_t c0[16], c1[16], c2[16], c3[16];
    for (int l = 0; l < 16; l++) {
        uint64_t ctr = first + (uint64_t)l;
        c0[l] = (uint32_t)ctr;
        c1[l] = (uint32_t)(ctr >> 32);
        c2[l] = 0;
        c3[l] = 0;
    }
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        for (int l = 0; l < 16; l++) {
            uint64_t p0 = (uint64_t)0xD2511F53u * c0[l], p1 = (uint64_t)0xCD9E8D57u * c2[l];
            uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1[l] ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3[l] ^ k1;
            c1[l] = (uint32_t)p1;
            c3[l] = (uint32_t)p0;
            c0[l] = n0;
            c2[l] = n2;
        }
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    for (int l = 0; l < 16; l++) {
        out[4 * l] = c0[l];
        out[4 * l + 1] = c1[l];
        out[4 * l + 2] = c2[l];
        out[4 * l + 3] = c3[l];
    }
}

/* ---- kernels: MXU (kernels/mxu/)
 * fp32 inputs become bf16 "parts" for the passes of numerics_amx.md §1. A
 * part is kept as f32 bits whose low 16 bits are zero, so it is both a bf16
 * (the high half) and an exactly representable float. Subnormal parts are
 * flushed to signed zero, as the TPU and AMX (DAZ) do. */
static inline uint32_t vt_mxu_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float vt_mxu_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* Round to nearest even (overflow -> inf, NaN stays NaN and quiet). */
static inline uint32_t vt_mxu_rne_ftz(uint32_t u) {
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u | 0x00400000u) & 0xffff0000u;
    if ((u & 0x7f800000u) == 0) return u & 0x80000000u;
    u += 0x7fffu + ((u >> 16) & 1u);
    return u & 0xffff0000u;
}
/* Truncation (XLA masks with 0xFFFF0000), subnormals flushed. */
static inline uint32_t vt_mxu_trunc_ftz(uint32_t u) {
    if ((u & 0x7f800000u) == 0) return u & 0x80000000u;
    return u & 0xffff0000u;
}
/* parts[0] = hi, parts[1] = mid, parts[2] = lo (as f32 bits); unused parts
 * are 0. DEFAULT: hi = RNE(x). HIGH: hi = trunc(x), lo = RNE(x - hi).
 * HIGHEST: hi = trunc(x), mid = trunc(x - hi), lo = RNE(x - hi - mid).
 * The differences are exact in f32 (inf gives hi = inf, lo = NaN). */
static inline void vt_mxu_split(float x, vt_precision prec, uint32_t parts[3]) {
    parts[1] = parts[2] = 0;
    if (prec == VT_PRECISION_DEFAULT) {
        parts[0] = vt_mxu_rne_ftz(vt_mxu_bits(x));
        return;
    }
    parts[0] = vt_mxu_trunc_ftz(vt_mxu_bits(x));
    float r = x - vt_mxu_float(parts[0]);
    if (prec == VT_PRECISION_HIGHEST) {
        parts[1] = vt_mxu_trunc_ftz(vt_mxu_bits(r));
        r -= vt_mxu_float(parts[1]);
    }
    parts[2] = vt_mxu_rne_ftz(vt_mxu_bits(r));
}
/* Round a double once to bf16 / f16 (round to odd at f32 precision, then
 * RNE: 24 bits leave the 2 guard bits that make this exact). */
static inline float vt_mxu_f64_to_f32_odd(double d) {
    float f = (float)d;
    if ((double)f != d && f == f && !isinf(f)) {
        if (fabs((double)f) > fabs(d)) f = nextafterf(f, 0.0f);
        f = vt_mxu_float(vt_mxu_bits(f) | 1u);
    }
    return f;
}
static inline uint16_t vt_mxu_f64_to_bf16(double d) { return vt_f32_to_bf16(vt_mxu_f64_to_f32_odd(d)); }
static inline uint16_t vt_mxu_f64_to_f16(double d) { return vt_f32_to_f16(vt_mxu_f64_to_f32_odd(d)); }

/* Packed operand layout, shared by every engine. K is cut into chunks of 32
 * (zero padded). A: 16-row panels; in a panel, chunk c holds 16 rows x 32
 * bf16 (row r at c*512 + r*32): one AMX A tile. B: 16-column panels; chunk
 * c holds 16 k-pairs x 16 columns x 2 (B[k][n] at c*512 + (k%32/2)*32 +
 * n*2 + k%2, the VNNI order): one AMX B tile. */
#define VT_MXU_CHUNK 512 /* bf16 elements per 32-K chunk of a 16-wide panel */

/* Block kernel: the mb x nb block of C (multiples of 32; mb any count for
 * an engine with rows_any, nb a multiple of 16 for one with cols16) += A B
 * over kc chunks. a: first A panel (next panel a + as), b: first B panel
 * (next b + bs), c: f32 with row stride ldc. acc == 0 starts the sum from
 * +0 (as an MXU accumulator does); otherwise C's contents are the starting
 * value. It allocates nothing per call (the AVX2 kernel keeps one buffer
 * per thread). */
typedef void (*vt_mxu_block_fn)(int64_t kc, int64_t mb, int64_t nb, const uint16_t *restrict a, int64_t as,
                                const uint16_t *restrict b, int64_t bs, float *restrict c, int64_t ldc, int acc);
/* Split n f32 values into bf16 parts (per vt_mxu_split), written as bf16 to
 * hi/mid/lo (mid and lo NULL when prec does not use them); x[n..npad) count
 * as zeros. */
typedef void (*vt_mxu_split_fn)(const float *restrict x, int64_t n, int64_t npad, vt_precision prec,
                                uint16_t *restrict hi, uint16_t *restrict mid, uint16_t *restrict lo);
/* Interleave n (multiple of 16) bf16 pairs: out[2i] = even[i], out[2i+1] =
 * odd[i], 16 at a time into out + (i/16)*stride (the B panel order). */
typedef void (*vt_mxu_zip_fn)(const uint16_t *restrict even, const uint16_t *restrict odd, int64_t n,
                              uint16_t *restrict out, int64_t stride);
/* Where a block's finished sums go instead of c: rounded once to bf16 (as
 * vt_f32_to_bf16 rounds) at p[row * ld + col], columns below ncols only
 * (row and col from the block's origin). */
typedef struct vt_mxu_sink {
    uint16_t *p;
    int64_t ld, ncols;
} vt_mxu_sink;
/* Block kernel over an A that is not packed: a row-major bf16 matrix (a:
 * row 0 of the block at k 0, lda elements from row to row), whose chunks
 * hold `pairs` k-pairs each: 16 (K a multiple of 32), or K / 2 when K < 32
 * is even (kc is then 1; no k past K is read). mb any count (no row past
 * mb is read). The rest as vt_mxu_block_fn, but with a sink the sums go
 * there (c is only read, when acc). */
typedef void (*vt_mxu_direct_fn)(int64_t kc, int pairs, int64_t mb, int64_t nb, const uint16_t *restrict a,
                                 int64_t lda, const uint16_t *restrict b, int64_t bs, float *restrict c, int64_t ldc,
                                 int acc, const vt_mxu_sink *sink);
typedef struct vt_mxu_engine {
    const char *name;
    unsigned isa; /* VT_ISA_* bits it needs */
    vt_mxu_block_fn block;
    vt_mxu_direct_fn direct; /* NULL: A is always packed */
    vt_mxu_split_fn split;
    vt_mxu_zip_fn zip;
    int rows_any; /* block computes exactly mb rows, any count: the driver skips M's padding rows */
    int cols16;   /* block and direct compute exactly nb columns, a multiple of 16: the driver skips N's
                   * padding to 32 (an N of 16: half the work) */
    const struct vt_mxu_packers *pack; /* fast packers (kernels/mxu/mxu_local.h); NULL: split + zip */
} vt_mxu_engine;
extern const vt_mxu_engine vt_mxu_engine_scalar;
#if VT_X86
extern const vt_mxu_engine vt_mxu_engine_avx2, vt_mxu_engine_avx512, vt_mxu_engine_avx512bf16, vt_mxu_engine_amx;
void vt_mxu_split_avx2(const float *restrict x, int64_t n, int64_t npad, vt_precision prec, uint16_t *restrict hi,
                       uint16_t *restrict mid, uint16_t *restrict lo);
void vt_mxu_zip_avx2(const uint16_t *restrict even, const uint16_t *restrict odd, int64_t n, uint16_t *restrict out,
                     int64_t stride);
void vt_mxu_block_avx2(int64_t kc, int64_t mb, int64_t nb, const uint16_t *restrict a, int64_t as,
                       const uint16_t *restrict b, int64_t bs, float *restrict c, int64_t ldc, int acc);
void vt_mxu_split_avx512(const float *restrict x, int64_t n, int64_t npad, vt_precision prec,
                         uint16_t *restrict hi, uint16_t *restrict mid, uint16_t *restrict lo);
void vt_mxu_zip_avx512(const uint16_t *restrict even, const uint16_t *restrict odd, int64_t n,
                       uint16_t *restrict out, int64_t stride);
#endif
/* The engine vt_matmul uses (the ISA registry picks it). */
const vt_mxu_engine *vt_mxu_engine_active(void);

/* Packed operands of one 2-D product (kernels/mxu/mxu_pack.c). */
typedef struct vt_mxu_packed {
    int64_t M, N, K, Mp, Np, kt; /* Mp, Np: multiples of 32; kt: chunks per segment */
    int nlow;                    /* low segments before the hi*hi one: 0, 2 or 5 */
    uint16_t *a, *b;             /* panels of vt_mxu_nslots(nlow) * kt chunks: one K segment per bf16 part */
    int64_t a_panel, b_panel;    /* elements per panel */
    const struct vt_mxu_rows *a_rows, *b_rows; /* operands whose rows are produced, not read (or NULL) */
} vt_mxu_packed;
/* The low (guarded) passes before hi*hi at a precision: 0, 2 or 5. */
static inline int vt_mxu_nlow(vt_precision prec) {
    return prec == VT_PRECISION_HIGHEST ? 5 : prec == VT_PRECISION_HIGH ? 2 : 0;
}
/* Plan the layout (no allocation): sizes in elements of the two buffers. */
void vt_mxu_pack_plan(vt_mxu_packed *p, int64_t M, int64_t N, int64_t K, vt_precision prec, int64_t *a_elems,
                      int64_t *b_elems);
/* Number of independent packing tasks (A panels + B units) and running one. */
int64_t vt_mxu_pack_tasks(const vt_mxu_packed *p, const vt_mxu_engine *e, const vt_tensor *a, const vt_tensor *b,
                          int64_t *na);
/* mem: vt_mxu_pack_scratch_bytes(p) bytes of scratch, 4-byte aligned. */
size_t vt_mxu_pack_scratch_bytes(const vt_mxu_packed *p);
void vt_mxu_pack_task(const vt_mxu_packed *p, const vt_mxu_engine *e, vt_precision prec, const vt_tensor *a,
                      const vt_tensor *b, int64_t task, int64_t na, void *mem);

/* vt_matmul of a B whose contents are b_version (vt_view_version when the
 * op was prepared): a product with few rows keeps B's packed panels for
 * the next product of the same contents (mxu.c). */
vt_status vt_matmul_versioned(const vt_tensor *out, const vt_tensor *a, const vt_tensor *b, const vt_tensor *bias,
                              double alpha, double beta, vt_precision prec, vt_version b_version);
/* vt_matmul with an F32 out for BF16 / F16 operands: the MXU's f32 sums
 * unrounded (as the kernel has them before its epilogue), for callers that
 * sum them further and round once (convolution). */
vt_status vt_matmul_f32_out(const vt_tensor *out, const vt_tensor *a, const vt_tensor *b, const vt_tensor *bias,
                            double alpha, double beta, vt_precision prec);
/* An operand whose rows are produced as the packers reach them instead of
 * read from memory (a convolution's im2col rows: no column matrix is ever
 * stored). row(ctx, i, dst) writes row i — the operand's last-dim count of
 * its dtype — contiguous at dst. */
typedef struct vt_mxu_rows {
    void (*row)(void *ctx, int64_t index, void *dst);
    void *ctx;
} vt_mxu_rows;
/* vt_matmul_f32_out of 2-D operands, either of which may be produced by
 * rows (its tensor then gives dtype and sizes; its data is not read). */
vt_status vt_matmul_rows(const vt_tensor *out, const vt_tensor *a, const vt_mxu_rows *a_rows, const vt_tensor *b,
                         const vt_mxu_rows *b_rows, const vt_tensor *bias, double alpha, double beta,
                         vt_precision prec);
/* Whether an M x N x K product (A of a_dtype) runs by K slices spread over
 * the cores (a narrow output over a long K, DEFAULT): only when A is
 * stored; produced rows of A keep the whole-K path. */
int vt_mxu_splits_k(int64_t M, int64_t N, int64_t K, vt_dtype a_dtype, vt_precision prec);
/* vt_matmul's argument checks alone (shapes, dtypes, broadcasts), for the
 * queued op to fail at enqueue. */
vt_status vt_matmul_check(const vt_tensor *out, const vt_tensor *a, const vt_tensor *b, const vt_tensor *bias,
                          vt_precision prec);

/* F64 product (kernels/mxu/mxu_f64.c): 2-D views, out = alpha*a@b + beta*bias. */
void vt_mxu_gemm_f64(const vt_tensor *out, const vt_tensor *a, const vt_tensor *b, const vt_tensor *bias, double alpha,
                     double beta);

/* ---- kernels fed by a producer
 * A kernel whose input comes from a producer instead of memory (a
 * DeferAndFuse group, graph/fuse.c): read(ctx, first, m) returns the m
 * values of the input's dtype at element offsets first, first + 1, ...
 * from vt_base(input), the ones the kernel would otherwise load; m <=
 * VT_SOURCE_MAX, and the values stay valid until the next read on the same
 * thread. A kernel takes a source only where it reads each element once,
 * in runs of at least VT_SOURCE_RUN consecutive elements (fewer would cost
 * more per read than the fusion saves). */
typedef struct vt_source {
    const void *(*read)(void *ctx, int64_t first, int64_t m);
    void *ctx;
} vt_source;
#define VT_SOURCE_MAX 16384
#define VT_SOURCE_RUN 256

/* ---- kernels: reductions and scans (kernels/reduce/: reduce.c and reduce_pass.c, scan.c) */
/* Wrap a possibly negative dim into [0, ndim) as PyTorch does (a 0-dim
 * tensor accepts 0 and -1); VT_ERR_INDEX "Dimension out of range ..." else. */
vt_status vt_wrap_dim(int64_t dim, int32_t ndim, int *out);
/* The kernels' own argument checks (shapes, dims, dtypes, empty extents),
 * so the queued ops fail at the op rather than at the next synchronisation. */
vt_status vt_reduce_check(vt_reduce_op op, const vt_tensor *out, const vt_tensor *in, uint64_t dims_mask,
                          vt_dtype compute, double param);
vt_status vt_reduce_arg_check(int is_max, const vt_tensor *values, const vt_tensor *indices, const vt_tensor *in,
                              int dim);
vt_status vt_scan_check(vt_scan_op op, const vt_tensor *out, const vt_tensor *in, int dim, vt_dtype compute);
const char *vt_reduce_op_name(vt_reduce_op op);
/* Whether a source (vt_source) can feed this (checked) reduction: it
 * reads each element of in once (one pass: not var, std or logsumexp), in
 * runs of at least VT_SOURCE_RUN consecutive elements (along the reduced
 * dims, or, for column sums, along rows of lanes), and in is dense with
 * nonnegative strides. */
int vt_reduce_takes_source(vt_reduce_op op, const vt_tensor *out, const vt_tensor *in, uint64_t dims_mask);
/* vt_reduce on arguments vt_reduce_check accepted (a checked node's),
 * reading in through src (NULL: from memory). */
vt_status vt_reduce_run(vt_reduce_op op, const vt_tensor *out, const vt_tensor *in, uint64_t dims_mask,
                        vt_dtype compute, double param, const vt_source *src);
/* f32 summation loops with per-ISA versions (bit-identical to the portable
 * ones): block sums of VT_REDUCE_SUM_BLOCK values, the sum of a partial
 * block, lane-wise row adds. */
#define VT_REDUCE_SUM_BLOCK 256
#if VT_X86
void vt_reduce_blocks_f32_avx512(const float *x, int64_t nblocks, float *out);
void vt_reduce_lanes_add_f32_avx512(float *acc, const float *x, int64_t ng);
float vt_reduce_part_f32_avx512(const float *x, int64_t m);
float vt_reduce_part_f32_avx2(const float *x, int64_t m);
void vt_reduce_blocks_f32_avx2(const float *x, int64_t nblocks, float *out);
void vt_reduce_blocks_bf16_avx512(const uint16_t *x, int64_t nblocks, float *out);
void vt_reduce_blocks_bf16_avx2(const uint16_t *x, int64_t nblocks, float *out);
void vt_reduce_lanes_add_f32_avx2(float *acc, const float *x, int64_t ng);
#endif
const char *vt_scan_op_name(vt_scan_op op);
/* Scalar references: plain fp64 / int64 loops in logical order, one output
 * at a time (kernels/reduce/reduce_ref.c). Same contracts as the kernels. */
vt_status vt_ref_reduce(vt_reduce_op op, const vt_tensor *out, const vt_tensor *in, uint64_t dims_mask,
                        vt_dtype compute, double param);
vt_status vt_ref_reduce_arg(int is_max, const vt_tensor *values, const vt_tensor *indices, const vt_tensor *in,
                            int dim);
vt_status vt_ref_scan(vt_scan_op op, const vt_tensor *out, const vt_tensor *in, int dim, vt_dtype compute);

#endif
