/* vtpu.h — public C API of libvtpu, the virtual TPU runtime.
 * Plain C11, no PyTorch. Every fallible call returns vt_status and leaves a
 * thread-local message readable with vt_last_error(); the library never aborts. */
#ifndef VTPU_VTPU_H
#define VTPU_VTPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ status */

typedef enum vt_status {
    VT_OK = 0,
    VT_ERR_INVALID_ARGUMENT, /* bad shape, stride, dtype or value (Python: RuntimeError / ValueError) */
    VT_ERR_OUT_OF_MEMORY,    /* HBM or host memory exhausted (Python: torch.OutOfMemoryError) */
    VT_ERR_UNSUPPORTED,      /* valid request the runtime cannot do (the binding may fall back) */
    VT_ERR_INDEX,            /* index out of range (Python: IndexError) */
    VT_ERR_KERNEL,           /* a kernel failed while running, e.g. integer division by zero */
    VT_ERR_BAD_FORK,         /* runtime used in a child forked after initialisation */
    VT_ERR_TIMEOUT,          /* a bounded wait ran out before the work finished */
    VT_ERR_INTERNAL,
} vt_status;

/* Static string naming the status ("VT_OK", ...). */
const char *vt_status_string(vt_status s);
/* Message of the last failing call on this thread; "" when none. Borrowed,
 * valid until the next failing call on this thread. */
const char *vt_last_error(void);

/* ------------------------------------------------------------------ dtypes */

typedef enum vt_dtype {
    VT_F32 = 0,
    VT_BF16,
    VT_F16,
    VT_F64,
    VT_I8,
    VT_U8,
    VT_I16,
    VT_I32,
    VT_I64,
    VT_BOOL,
    VT_DTYPE_COUNT
} vt_dtype;

size_t vt_dtype_size(vt_dtype dt);       /* bytes per element; 0 for an invalid dtype */
const char *vt_dtype_name(vt_dtype dt);  /* "float32", "bfloat16", ... */
int vt_dtype_is_float(vt_dtype dt);      /* F32, BF16, F16, F64 */

/* ------------------------------------------------------------------ tensors */

#define VT_MAX_DIMS 16

/* A strided view of device (or host) memory, PyTorch conventions: sizes and
 * strides count elements; element (i0..in) lives at
 * data + (offset + sum(ik * strides[k])) * vt_dtype_size(dtype).
 * Plain value type: copying it copies the view, never the data. */
typedef struct vt_tensor {
    void *data;
    vt_dtype dtype;
    int32_t ndim;
    int64_t offset;
    int64_t sizes[VT_MAX_DIMS];
    int64_t strides[VT_MAX_DIMS];
} vt_tensor;

int64_t vt_tensor_numel(const vt_tensor *t);
int vt_tensor_is_contiguous(const vt_tensor *t);

/* A scalar carried exactly: integers in i, floating values in f. */
typedef struct vt_scalar {
    double f;
    int64_t i;
    int is_float; /* which member is authoritative */
} vt_scalar;

vt_scalar vt_scalar_from_double(double v);
vt_scalar vt_scalar_from_int(int64_t v);

/* ------------------------------------------------------------------ runtime */

/* Initialise once (idempotent, thread-safe): reads VTPU_CHIP (default "v6e"),
 * VTPU_NUM_DEVICES (default 1), VTPU_HBM_BYTES, VTPU_NUM_THREADS, VTPU_ISA. */
vt_status vt_init(void);
int vt_is_initialized(void);
/* Number of local devices; 0 before vt_init. */
int vt_device_count(void);
/* Validates a device index: VT_ERR_INDEX with a message naming the count. */
vt_status vt_check_device(int dev);

typedef struct vt_chip_info {
    const char *name;           /* "v5e", "v5p", "v6e", "v7x" */
    const char *marketing_name; /* "TPU v6e (Trillium)" */
    uint64_t hbm_bytes;         /* HBM capacity per chip */
    double hbm_gbytes_per_s;    /* HBM bandwidth per chip */
    int tensorcores;            /* TensorCores per chip */
    int mxu_count;              /* MXUs per TensorCore */
    int mxu_rows, mxu_cols;     /* systolic array shape */
    double peak_bf16_tflops;    /* per chip */
    int chips_per_host;
    int host_topology[3];       /* chips per host laid out as x*y*z */
    const char *slice_topology; /* "2D torus", "3D torus" */
} vt_chip_info;

/* Chip table lookup by name; VT_ERR_INVALID_ARGUMENT lists the valid names.
 * *out is borrowed static data. */
vt_status vt_chip_lookup(const char *name, const vt_chip_info **out);
/* The chip every local device emulates (after vt_init). Borrowed. */
const vt_chip_info *vt_chip(void);

/* Fork safety: after fork() in a child of an initialised parent, every
 * runtime call fails with VT_ERR_BAD_FORK. */
int vt_in_bad_fork(void);

/* ------------------------------------------------------------------ ISA */

enum {
    VT_ISA_AVX2 = 1u << 0,       /* AVX2 + FMA */
    VT_ISA_AVX512 = 1u << 1,     /* AVX-512 F/BW/VL/DQ */
    VT_ISA_AVX512BF16 = 1u << 2,
    VT_ISA_AMX = 1u << 3,        /* AMX-TILE + AMX-BF16, OS permission granted */
    VT_ISA_NEON = 1u << 4,
};

/* What the CPU and OS offer (detected once). */
unsigned vt_isa_available(void);
/* What the dispatch tables use: available, limited by VTPU_ISA. */
unsigned vt_isa_active(void);
/* Best active path: "amx", "avx512bf16", "avx512", "avx2", "neon" or "scalar". */
const char *vt_isa_path(void);

/* ------------------------------------------------------------------ HBM */

typedef struct vt_stat {
    int64_t current, peak, allocated, freed;
} vt_stat;

typedef struct vt_hbm_stats {
    vt_stat allocated_bytes;   /* bytes handed out to tensors */
    vt_stat reserved_bytes;    /* bytes held from the host (in use + cached) */
    vt_stat allocation;        /* live allocations count */
    vt_stat segment;           /* host blocks held */
    int64_t num_alloc_retries; /* allocations that emptied the cache to fit */
    int64_t num_ooms;
    uint64_t capacity;         /* effective capacity */
} vt_hbm_stats;

/* Allocate device memory, 64-byte aligned. bytes == 0 gives *out = NULL.
 * Over capacity: VT_ERR_OUT_OF_MEMORY naming chip, request and free bytes.
 * The caller owns the block until vt_hbm_free. */
vt_status vt_hbm_alloc(int dev, size_t bytes, void **out);
/* Return a block to the cache. Stream-ordered: all writes to device memory go
 * through the device's queues, which order every use of a block after the
 * uses enqueued before (see Queues and streams), so the block may be reused
 * at once. NULL is ok. */
void vt_hbm_free(int dev, void *ptr);
/* Release cached (unused) blocks to the host. Live blocks are untouched. */
vt_status vt_hbm_empty_cache(int dev);
vt_status vt_hbm_get_stats(int dev, vt_hbm_stats *out);
vt_status vt_hbm_reset_peak(int dev);
vt_status vt_hbm_reset_accumulated(int dev);
/* Effective capacity and free bytes (capacity - reserved + cached). */
vt_status vt_hbm_mem_info(int dev, uint64_t *free_bytes, uint64_t *total_bytes);
/* 1 if ptr is the start of a live block of any device; *dev receives it. */
int vt_hbm_owns(const void *ptr, int *dev);

/* ------------------------------------------------------------------ queue */

/* Kernel run by a device queue's worker. Returns VT_OK or an error with a
 * message set by vt_set_error (runtime-internal) on the worker thread. */
typedef vt_status (*vt_kernel_fn)(void *args);

/* Maximum argument block copied into a queued command. */
#define VT_MAX_ARGS 2048

/* Enqueue fn(args) on device dev's in-order queue; the args block (args_size
 * bytes, at most VT_MAX_ARGS) is copied. Returns at enqueue in Strict mode.
 * In Debug mode (thread-local) waits for completion and returns the kernel's
 * error, prefixed with op_name. op_name must be a static string. */
vt_status vt_enqueue(int dev, const char *op_name, vt_kernel_fn fn, const void *args, size_t args_size);

/* Errors of queued work. A kernel that fails on the queue becomes a fault:
 * every tensor it writes is poisoned with it, later ops that read poisoned
 * memory do not run and poison what they write in turn, and a host read of
 * poisoned memory (vt_check_readable) returns the fault's error. A
 * synchronisation returns every fault of the device not yet returned,
 * oldest first, as one error ("aten::div: ZeroDivisionError" and the
 * others named after it). A successful op that writes a whole allocation
 * densely clears its poison. */

/* Wait until all work enqueued on dev so far has run; returns (and clears)
 * the faults of dev not yet reported, as VT_ERR_KERNEL or the op's own
 * status. */
vt_status vt_synchronize(int dev);
/* As vt_synchronize, but gives up after timeout_ms with VT_ERR_TIMEOUT
 * (work continues; nothing is cleared). Lets a caller poll for interrupts.
 * timeout_ms 0 only asks whether the work is done (no wait at all). */
vt_status vt_synchronize_timeout(int dev, int64_t timeout_ms);
/* Wait (at most timeout_ms, < 0 forever) until all work enqueued on dev so
 * far has run. Reports no fault: use before host reads (then
 * vt_check_readable) and host writes of device memory. */
vt_status vt_wait(int dev, int64_t timeout_ms);
/* After a wait: VT_OK when t's memory (any device) holds valid data, else
 * the error of the failed op that wrote it or that its data depends on. A
 * view that is not live device memory is VT_ERR_INVALID_ARGUMENT. */
vt_status vt_check_readable(const vt_tensor *t);
/* The host wrote t's memory (after a wait): every host write of device
 * memory must say so (kernels keep data derived from an allocation until
 * it is written); a dense write of a whole allocation clears its poison. */
void vt_mark_written(const vt_tensor *t);

/* Queues and streams. A device has VT_MAX_QUEUES in-order queues, each
 * drained by its own worker, so work on one overlaps work on another:
 * queue 0 runs the default stream, queue VT_QUEUE_COMM the collectives
 * (tpu_dist), and the others the streams a program makes (stream ids other
 * than 0 share them). Commands on different queues are ordered by the memory
 * they touch: a command waits for every command of another queue enqueued
 * before it that uses the same allocation (read or write, this one or an
 * earlier one of the same block), so no stream can read data another has yet
 * to write or write over data another still reads. Events order the rest.
 * Each thread enqueues on its current queue of each device (0 until set),
 * which the stream guard sets. Tickets name their queue. A wait, a
 * synchronisation or vt_queue_pending covers every queue of the device. */
#define VT_MAX_QUEUES 4
#define VT_QUEUE_COMM 1
#define VT_STREAM_COMM ((int64_t)1 << 40) /* the stream id of the communication queue */
/* The queue a stream id runs on: 0 for 0, VT_QUEUE_COMM for VT_STREAM_COMM,
 * else one of the others. */
int vt_stream_queue(int64_t stream_id);
/* The calling thread's current queue on dev (what vt_enqueue and
 * vt_event_record use); vt_set_thread_queue returns the previous one.
 * Out-of-range values are ignored. */
int vt_set_thread_queue(int dev, int queue);
int vt_thread_queue(int dev);
/* The queue a ticket belongs to. */
int vt_ticket_queue(uint64_t ticket);

/* Events: a ticket marks a point in a queue (the calling thread's current
 * queue when recorded). */
vt_status vt_event_record(int dev, uint64_t *ticket_out);
/* 1 if all work up to ticket has completed. */
int vt_event_query(int dev, uint64_t ticket);
/* *done_out = vt_event_query; when done, returns the faults up to ticket
 * not yet reported (as vt_synchronize does for all). */
vt_status vt_event_status(int dev, uint64_t ticket, int *done_out);
/* Wait for the ticket (bounded: VT_ERR_TIMEOUT after timeout_ms, <0 = forever). */
vt_status vt_event_wait(int dev, uint64_t ticket, int64_t timeout_ms);
/* vt_event_wait, then the faults up to ticket not yet reported. */
vt_status vt_event_synchronize(int dev, uint64_t ticket, int64_t timeout_ms);
/* Make later work on dev's current queue wait until ticket of src_dev
 * completed (nothing when it is the same queue). */
vt_status vt_event_block(int dev, int src_dev, uint64_t ticket);
/* Number of commands enqueued but not yet completed, over dev's queues. */
int64_t vt_queue_pending(int dev);

typedef enum vt_eager_mode {
    VT_EAGER_STRICT = 0, /* async, op by op */
    VT_EAGER_DEBUG = 1,  /* each op completes before enqueue returns; errors at the op */
    VT_EAGER_DEFER_AND_FUSE = 2,
} vt_eager_mode;

/* Process default (from TPU_LAUNCH_BLOCKING / TPU_DEFER_AND_FUSE at vt_init)
 * and a thread-local override (-1 clears it). A host that keeps a
 * per-thread context elsewhere (the PyTorch binding: one that follows a
 * backward() into autograd's threads) names a source for the calling
 * thread's mode (-1: none); vt_get_eager_mode takes the thread override,
 * else the source's answer, else the process default. */
void vt_set_default_eager_mode(vt_eager_mode m);
void vt_set_thread_eager_mode(int m);
void vt_set_eager_mode_source(int (*source)(void));
vt_eager_mode vt_get_eager_mode(void);

/* DeferAndFuse. In VT_EAGER_DEFER_AND_FUSE the elementwise ops (vt_op_unary,
 * _binary, _ternary, _where, _fill and same-device vt_op_copy) are checked
 * and recorded, not queued. A device's recorded nodes are flushed (cut into
 * fusion groups, each queued as one command that runs its nodes tile by
 * tile and never writes an output whose buffer was freed before the flush)
 * when any other work touches the device's queue (another op, a transfer,
 * an event, a wait or synchronisation), on vt_flush, and when the record
 * grows past a bound or starts repeating (a loop). */
vt_status vt_flush(int dev);
/* A graph program (torch.compile) runs on this thread between begin and end
 * (nestable): its ops are a finite sequence the caller flushes at its end,
 * so a repeating stretch of it (a foreach op's per-parameter nodes, say)
 * does not start a flush as a loop would. */
void vt_defer_program_begin(void);
void vt_defer_program_end(void);
/* Process-wide counters of what flushes did, since the last reset. */
typedef struct vt_fusion_stats {
    uint64_t flushes;        /* flushes that had recorded nodes */
    uint64_t nodes;          /* recorded nodes run */
    uint64_t groups;         /* commands the flushes queued */
    uint64_t fused_nodes;    /* nodes that ran in a group of two or more */
    uint64_t bytes_written;  /* bytes recorded nodes wrote to device memory */
    uint64_t bytes_elided;   /* bytes of outputs freed before the flush, never written */
    uint64_t loop_flushes;   /* flushes started by a repeating op sequence */
} vt_fusion_stats;
void vt_get_fusion_stats(vt_fusion_stats *out);
void vt_reset_fusion_stats(void);

/* Tracing. While on, every command the device queues run is recorded: the
 * user's op (or, for a fused group, its ops), the output shape where the
 * command is a node, bytes written, nodes run and start/end times
 * (CLOCK_MONOTONIC). vt_trace_stop hands the events over (malloc'd, the
 * caller frees them) and returns their count (-1: host memory ran out). */
typedef struct vt_trace_event {
    char name[160];
    char shape[48];
    int32_t dev, nodes;
    int32_t queue; /* the device queue that ran it */
    int64_t start_ns, end_ns;
    uint64_t bytes;
} vt_trace_event;
void vt_trace_start(void);
int64_t vt_trace_stop(vt_trace_event **events);

/* Parallel loop on the runtime's thread pool (sized to the cores, or
 * VTPU_NUM_THREADS). fn(ctx, begin, end) covers [0, n) in chunks of at least
 * grain. Runs inline when n <= grain or when called from a pool thread. */
typedef void (*vt_range_fn)(void *ctx, int64_t begin, int64_t end);
void vt_parallel_for(int64_t n, int64_t grain, vt_range_fn fn, void *ctx);
int vt_num_threads(void);

/* ------------------------------------------------------------------ kernels
 * Synchronous: they compute on the calling thread (and the pool) at once.
 * The enqueueing wrappers below (vt_op_*) run them on a device queue. */

typedef enum vt_unary_op {
#define VT_UNARY_OP(e, name) VT_##e,
#include "unary.def"
#undef VT_UNARY_OP
    VT_UNARY_OP_COUNT
} vt_unary_op;

/* Most extra parameters an elementwise op takes (params[] below). */
#define VT_EW_MAX_PARAMS 4

typedef enum vt_binary_op {
#define VT_BINARY_OP(e, name) VT_##e,
#include "binary.def"
#undef VT_BINARY_OP
    VT_BINARY_OP_COUNT
} vt_binary_op;

/* out = f(a, b, c), each broadcast to out's shape. */
typedef enum vt_ternary_op {
#define VT_TERNARY_OP(e, name) VT_##e,
#include "ternary.def"
#undef VT_TERNARY_OP
    VT_TERNARY_OP_COUNT
} vt_ternary_op;

const char *vt_unary_op_name(vt_unary_op op);
const char *vt_binary_op_name(vt_binary_op op);
const char *vt_ternary_op_name(vt_ternary_op op);

/* The strides (in elements) of a new elementwise result of shape
 * sizes[ndim] computed from inputs[nin] (any ndim <= ndim, broadcast
 * right-aligned; only ndim, sizes and strides are read), as PyTorch's
 * TensorIterator lays out an output it allocates: contiguous, channels-last
 * or the inputs' own strides when every input has the result's shape and
 * that layout; else dims ordered by the inputs' strides (the first input
 * that orders two dims decides) and packed densely in that order. The
 * elementwise kernels then visit the result in its memory order. */
void vt_ew_result_strides(int32_t ndim, const int64_t *sizes, int nin, const vt_tensor *const *inputs,
                          int64_t *strides);

/* out = op(a) computed in `compute` dtype (PyTorch's common dtype): inputs are
 * converted to compute, the result converted to out's dtype. a broadcasts to
 * out's shape. Any strides; out may alias a exactly (in place). */
vt_status vt_unary(vt_unary_op op, const vt_tensor *out, const vt_tensor *a, vt_dtype compute);
/* vt_unary with the op's parameters: params holds VT_EW_MAX_PARAMS values
 * (NULL: all 0), converted to the compute class (float for F32/BF16/F16,
 * double for F64, int64 for integers) as PyTorch converts its Scalars. */
vt_status vt_unary_ex(vt_unary_op op, const vt_tensor *out, const vt_tensor *a, vt_dtype compute,
                      const double *params);

/* out = op(a, b[, alpha]) in `compute` dtype; a and b broadcast to out's shape
 * (right-aligned, size-1 dims repeat). Integer division or remainder by zero
 * fails with VT_ERR_KERNEL "ZeroDivisionError". */
vt_status vt_binary(vt_binary_op op, const vt_tensor *out, const vt_tensor *a, const vt_tensor *b,
                    vt_dtype compute, vt_scalar alpha);
/* vt_binary with the op's parameters (as vt_unary_ex). */
vt_status vt_binary_ex(vt_binary_op op, const vt_tensor *out, const vt_tensor *a, const vt_tensor *b,
                       vt_dtype compute, vt_scalar alpha, const double *params);

/* out = op(a, b, c[, alpha]) in `compute` dtype; inputs broadcast to out's
 * shape; any strides; out may alias an input exactly. alpha is addcmul's /
 * addcdiv's value, converted to the compute class (float for BF16/F16, as
 * PyTorch's reduced-precision kernels). */
vt_status vt_ternary(vt_ternary_op op, const vt_tensor *out, const vt_tensor *a, const vt_tensor *b,
                     const vt_tensor *c, vt_dtype compute, vt_scalar alpha);

/* out = where(cond, a, b): cond is bool, a/b broadcast; a, b converted to out dtype. */
vt_status vt_where(const vt_tensor *out, const vt_tensor *cond, const vt_tensor *a, const vt_tensor *b);

/* Copy with conversion between any dtypes; src broadcasts to dst's shape.
 * float -> int truncates toward zero; NaN and out-of-range give the value
 * x86-64 gives (INT_MIN of int32/int64, then narrowed); x -> bool is x != 0. */
vt_status vt_copy(const vt_tensor *dst, const vt_tensor *src);

/* Fill every element of out with value converted to out's dtype. */
vt_status vt_fill(const vt_tensor *out, vt_scalar value);

/* Counter-based random numbers (Philox4x32-10): element i of out (in
 * row-major logical order) depends only on (seed, offset, i), so results do
 * not depend on strides or threads. */
vt_status vt_rng_uniform(const vt_tensor *out, uint64_t seed, uint64_t offset, double from, double to);
vt_status vt_rng_normal(const vt_tensor *out, uint64_t seed, uint64_t offset, double mean, double std);
/* Counter values one vt_rng_* call on n elements of dtype consumes: the
 * caller's generator advances its offset by this much per call. */
uint64_t vt_rng_counters_used(vt_dtype dtype, int64_t n);
/* More draws on the same scheme. "4/block" calls consume
 * vt_rng_counters_used(VT_F32, n) counter values for n draws, "2/block"
 * calls vt_rng_counters_used(VT_F64, n); draw i depends only on (seed,
 * offset, i), i in row-major logical order of `out` unless stated. */
/* out = -log1p(-u) / lambd (u uniform in [0, 1)); counters as vt_rng_uniform. */
vt_status vt_rng_exponential(const vt_tensor *out, uint64_t seed, uint64_t offset, double lambd);
/* Integers uniform in [from, from + range) (range 0: the whole 64-bit span),
 * a 64-bit draw modulo range; any out dtype (converted as vt_copy). 2/block. */
vt_status vt_rng_random(const vt_tensor *out, uint64_t seed, uint64_t offset, int64_t from, uint64_t range);
/* out = (u < p) with u a 32-bit uniform; p a tensor broadcast to out (NULL:
 * p_scalar). p outside [0, 1] fails with VT_ERR_INVALID_ARGUMENT. 4/block. */
vt_status vt_rng_bernoulli(const vt_tensor *out, const vt_tensor *p, double p_scalar, uint64_t seed,
                           uint64_t offset);
/* Dropout in one pass: keep = (u < 1 - p); out = (in * keep) * scale with
 * scale = 1 / (1 - p) (0 when p == 1), in in's float dtype (as PyTorch's
 * input.mul(mask).mul_(scale)); mask (nullable, bool, out's shape) = keep.
 * out, in same float dtype and shape; out may alias in. 4/block. */
vt_status vt_rng_dropout(const vt_tensor *out, const vt_tensor *mask, const vt_tensor *in, double p, uint64_t seed,
                         uint64_t offset);
/* grad_in = grad * (mask * scale), mask bool, (mask * scale) rounded to
 * grad's dtype first as PyTorch's native_dropout_backward. No randomness. */
vt_status vt_dropout_backward(const vt_tensor *grad_in, const vt_tensor *grad, const vt_tensor *mask, double scale);
/* Samples of category indices (out: int64 [rows, k]) from the rows of probs
 * ([rows, cats], float, unnormalised weights). With replacement draw
 * (r, s) = index r*k + s, inverse CDF on a 53-bit uniform; without, category
 * (r, c) = index r*cats + c gets key -log(u)/w and the k smallest keys are
 * the samples in draw order. Consumes vt_rng_counters_used(VT_F64,
 * rows * (replacement ? k : cats)). Negative, inf or NaN weights, a zero
 * row, or too few non-zero weights without replacement fail with
 * VT_ERR_INVALID_ARGUMENT (PyTorch's messages). */
vt_status vt_rng_multinomial(const vt_tensor *out, const vt_tensor *probs, int replacement, uint64_t seed,
                             uint64_t offset);
/* out (1-D, n elements, any dtype holding n-1) = a random permutation of
 * 0..n-1: element i gets a 64-bit key, indices sorted by key. 2/block. */
vt_status vt_rng_randperm(const vt_tensor *out, uint64_t seed, uint64_t offset);
/* out = mean + std * z, z as vt_rng_normal(0, 1); mean / std tensors
 * broadcast to out (NULL: the scalar). A negative std fails. */
vt_status vt_rng_normal_tensor(const vt_tensor *out, const vt_tensor *mean, double mean_scalar, const vt_tensor *std,
                               double std_scalar, uint64_t seed, uint64_t offset);

/* ---- MXU: matrix products with TPU numerics */

typedef enum vt_precision {
    VT_PRECISION_DEFAULT = 0, /* fp32 -> bf16 RNE, 1 pass, fp32 accumulation */
    VT_PRECISION_HIGH = 1,    /* 3 bf16 passes (truncation split hi/lo) */
    VT_PRECISION_HIGHEST = 2, /* 6 bf16 passes (hi/mid/lo) */
} vt_precision;

/* out[..., M, N] = beta * bias + alpha * (a[..., M, K] @ b[..., K, N]).
 * Any strides; leading (batch) dims of a and b broadcast to out's. bias is
 * NULL or broadcasts to out (it may alias out exactly). a and b share a
 * dtype, out has it too: F32 runs as bf16 passes per prec with fp32
 * accumulation, BF16 and F16 run one pass (F16 rounded to bf16), F64 is
 * computed in double. K == 0 gives beta * bias (or zeros). */
vt_status vt_matmul(const vt_tensor *out, const vt_tensor *a, const vt_tensor *b, const vt_tensor *bias, double alpha,
                    double beta, vt_precision prec);
/* Engine vt_matmul runs its bf16 passes on: "amx", "avx512bf16", "avx512",
 * "avx2" or "scalar" (static string). */
const char *vt_mxu_path(void);
/* A matmul op with few rows keeps its B operand's packed panels while B's
 * memory is not written (every write of device memory is announced: a
 * queued op's when it is prepared, a host write by vt_mark_written), and
 * reuses them for the same B. Test aids: the products that reused kept
 * panels so far, and dropping every kept panel no product holds. */
uint64_t vt_mxu_kept_hits(void);
void vt_mxu_kept_clear(void);

/* ---- convolution on the MXU (im2col + vt_matmul), 1 to 3 spatial dims.
 * Layouts as PyTorch: input [N, C, *spatial], weight [O, C/groups, *kernel],
 * out [N, O, *out_spatial]; any strides. Numerics as vt_matmul at prec. */

typedef struct vt_conv_params {
    int32_t spatial;     /* 1, 2 or 3 */
    int64_t stride[3];
    int64_t padding[3];
    int64_t dilation[3];
    int64_t groups;
} vt_conv_params;

/* out = conv(input, weight) + bias (bias NULL or [O]). */
vt_status vt_conv_forward(const vt_tensor *out, const vt_tensor *input, const vt_tensor *weight,
                          const vt_tensor *bias, const vt_conv_params *p, vt_precision prec);
/* grad_input = d(conv)/d(input) applied to grad_out (the transposed
 * convolution); grad_input's shape gives the input size. */
vt_status vt_conv_backward_input(const vt_tensor *grad_input, const vt_tensor *grad_out, const vt_tensor *weight,
                                 const vt_conv_params *p, vt_precision prec);
/* grad_weight = d(conv)/d(weight) for grad_out and input. */
vt_status vt_conv_backward_weight(const vt_tensor *grad_weight, const vt_tensor *grad_out, const vt_tensor *input,
                                  const vt_conv_params *p, vt_precision prec);

/* ---- reductions and scans */

typedef enum vt_reduce_op {
#define VT_REDUCE_OP(e, name) VT_REDUCE_##e,
#include "reduce.def"
#undef VT_REDUCE_OP
    VT_REDUCE_OP_COUNT
} vt_reduce_op;

/* out = op over the dims of `in` whose bit is set in dims_mask (bit d = dim
 * d of in); out has in's ndim with size 1 on reduced dims (keepdim layout,
 * any strides). Computed in `compute` (PyTorch's accumulate dtype rules are
 * the caller's: float32 for bf16/f16 sums, int64 for integer sums...), then
 * converted to out's dtype. An empty reduction gives the op's identity
 * (sum 0, prod 1, any false, all true, mean/var NaN, norm 0, logsumexp -inf);
 * amax/amin over an empty dim fail with VT_ERR_INDEX (PyTorch's IndexError)
 * and norm with p < 0 with VT_ERR_INVALID_ARGUMENT. dims_mask 0 reduces
 * nothing (each output reduces one element); the caller expands PyTorch's
 * dim=None. A 0-dim `in` accepts bit 0. Integer compute allows sum, prod,
 * amax, amin, any, all. var/std accumulate in double whatever `compute`.
 * Results depend only on shapes and strides, never on the thread count;
 * out may alias in. */
vt_status vt_reduce(vt_reduce_op op, const vt_tensor *out, const vt_tensor *in, uint64_t dims_mask, vt_dtype compute,
                    double param);

/* max/min with index along one dim: values (nullable) and int64 indices
 * (nullable) in keepdim layout; ties give the first index; NaN wins (first
 * NaN's index), as PyTorch. is_max: 1 for max/argmax, 0 for min/argmin.
 * dim may be negative (wraps); an empty dim fails with VT_ERR_INDEX. */
vt_status vt_reduce_arg(int is_max, const vt_tensor *values, const vt_tensor *indices, const vt_tensor *in, int dim);

typedef enum vt_scan_op {
#define VT_SCAN_OP(e, name) VT_SCAN_##e,
#include "scan.def"
#undef VT_SCAN_OP
    VT_SCAN_OP_COUNT
} vt_scan_op;
/* out = inclusive scan of `in` along dim (negative dims wrap), inputs
 * converted to `compute`; the running value is carried in double for float
 * compute dtypes (PyTorch's CPU accumulate type), wrapping int64 otherwise,
 * and each output is rounded to compute, then to out's dtype. out may alias
 * in exactly. logcumsumexp needs a float compute dtype. */
vt_status vt_scan(vt_scan_op op, const vt_tensor *out, const vt_tensor *in, int dim, vt_dtype compute);

/* Scalar C references, one per kernel family: same contracts, no SIMD, no
 * threads, element by element. Tests compare every path against them. */
vt_status vt_ref_unary(vt_unary_op op, const vt_tensor *out, const vt_tensor *a, vt_dtype compute);
vt_status vt_ref_binary(vt_binary_op op, const vt_tensor *out, const vt_tensor *a, const vt_tensor *b,
                        vt_dtype compute, vt_scalar alpha);
vt_status vt_ref_copy(const vt_tensor *dst, const vt_tensor *src);
vt_status vt_ref_where(const vt_tensor *out, const vt_tensor *cond, const vt_tensor *a, const vt_tensor *b);
vt_status vt_ref_unary_ex(vt_unary_op op, const vt_tensor *out, const vt_tensor *a, vt_dtype compute,
                          const double *params);
vt_status vt_ref_binary_ex(vt_binary_op op, const vt_tensor *out, const vt_tensor *a, const vt_tensor *b,
                           vt_dtype compute, vt_scalar alpha, const double *params);
vt_status vt_ref_ternary(vt_ternary_op op, const vt_tensor *out, const vt_tensor *a, const vt_tensor *b,
                         const vt_tensor *c, vt_dtype compute, vt_scalar alpha);
/* Algorithm-exact matmul reference: the kept bf16 pass products summed in
 * fp64 and rounded once (F64 inputs: plain fp64 sum). */
vt_status vt_ref_matmul(const vt_tensor *out, const vt_tensor *a, const vt_tensor *b, const vt_tensor *bias,
                        double alpha, double beta, vt_precision prec);

/* ------------------------------------------------------------------ queued ops
 * Validate, copy the descriptors and enqueue the kernel on dev's queue.
 * Tensors whose data is NULL with ndim 0 and a scalar given are not allowed:
 * host scalars go through the *_scalar variants, copied into the command. */

vt_status vt_op_unary(int dev, const char *name, vt_unary_op op, const vt_tensor *out, const vt_tensor *a,
                      vt_dtype compute);
/* a_scalar / b_scalar: when non-NULL, that operand is this host scalar (of
 * the compute dtype) instead of a device tensor. */
vt_status vt_op_binary(int dev, const char *name, vt_binary_op op, const vt_tensor *out, const vt_tensor *a,
                       const vt_scalar *a_scalar, const vt_tensor *b, const vt_scalar *b_scalar, vt_dtype compute,
                       vt_scalar alpha);
/* The _ex forms carry the op's params (VT_EW_MAX_PARAMS values or NULL),
 * copied into the command. */
vt_status vt_op_unary_ex(int dev, const char *name, vt_unary_op op, const vt_tensor *out, const vt_tensor *a,
                         vt_dtype compute, const double *params);
vt_status vt_op_binary_ex(int dev, const char *name, vt_binary_op op, const vt_tensor *out, const vt_tensor *a,
                          const vt_scalar *a_scalar, const vt_tensor *b, const vt_scalar *b_scalar, vt_dtype compute,
                          vt_scalar alpha, const double *params);
/* a_scalar / b_scalar / c_scalar: when non-NULL, that operand is this host
 * scalar, converted to the compute dtype (as PyTorch casts a wrapped number). */
vt_status vt_op_ternary(int dev, const char *name, vt_ternary_op op, const vt_tensor *out, const vt_tensor *a,
                        const vt_scalar *a_scalar, const vt_tensor *b, const vt_scalar *b_scalar, const vt_tensor *c,
                        const vt_scalar *c_scalar, vt_dtype compute, vt_scalar alpha);
vt_status vt_op_where(int dev, const char *name, const vt_tensor *out, const vt_tensor *cond, const vt_tensor *a,
                      const vt_tensor *b);
/* dst (on dev) = src converted to dst's dtype. src may live on another
 * device: the copy then runs on dev after src's pending work, and src's
 * device runs nothing further until the copy has read it. */
vt_status vt_op_copy(int dev, const char *name, const vt_tensor *dst, const vt_tensor *src);
vt_status vt_op_fill(int dev, const char *name, const vt_tensor *out, vt_scalar value);
vt_status vt_op_rng_uniform(int dev, const char *name, const vt_tensor *out, uint64_t seed, uint64_t offset,
                            double from, double to);
vt_status vt_op_rng_normal(int dev, const char *name, const vt_tensor *out, uint64_t seed, uint64_t offset,
                           double mean, double std);
/* Queued forms of the rng kernels above (runtime/src/ops_rng.c). */
vt_status vt_op_rng_exponential(int dev, const char *name, const vt_tensor *out, uint64_t seed, uint64_t offset,
                                double lambd);
vt_status vt_op_rng_random(int dev, const char *name, const vt_tensor *out, uint64_t seed, uint64_t offset,
                           int64_t from, uint64_t range);
vt_status vt_op_rng_bernoulli(int dev, const char *name, const vt_tensor *out, const vt_tensor *p, double p_scalar,
                              uint64_t seed, uint64_t offset);
vt_status vt_op_rng_dropout(int dev, const char *name, const vt_tensor *out, const vt_tensor *mask,
                            const vt_tensor *in, double p, uint64_t seed, uint64_t offset);
vt_status vt_op_dropout_backward(int dev, const char *name, const vt_tensor *grad_in, const vt_tensor *grad,
                                 const vt_tensor *mask, double scale);
vt_status vt_op_rng_multinomial(int dev, const char *name, const vt_tensor *out, const vt_tensor *probs,
                                int replacement, uint64_t seed, uint64_t offset);
vt_status vt_op_rng_randperm(int dev, const char *name, const vt_tensor *out, uint64_t seed, uint64_t offset);
vt_status vt_op_rng_normal_tensor(int dev, const char *name, const vt_tensor *out, const vt_tensor *mean,
                                  double mean_scalar, const vt_tensor *std, double std_scalar, uint64_t seed,
                                  uint64_t offset);

vt_status vt_op_matmul(int dev, const char *name, const vt_tensor *out, const vt_tensor *a, const vt_tensor *b,
                       const vt_tensor *bias, double alpha, double beta, vt_precision prec);

vt_status vt_op_conv_forward(int dev, const char *name, const vt_tensor *out, const vt_tensor *input,
                             const vt_tensor *weight, const vt_tensor *bias, const vt_conv_params *p,
                             vt_precision prec);
vt_status vt_op_conv_backward_input(int dev, const char *name, const vt_tensor *grad_input,
                                    const vt_tensor *grad_out, const vt_tensor *weight, const vt_conv_params *p,
                                    vt_precision prec);
vt_status vt_op_conv_backward_weight(int dev, const char *name, const vt_tensor *grad_weight,
                                     const vt_tensor *grad_out, const vt_tensor *input, const vt_conv_params *p,
                                     vt_precision prec);

vt_status vt_op_reduce(int dev, const char *name, vt_reduce_op op, const vt_tensor *out, const vt_tensor *in,
                       uint64_t dims_mask, vt_dtype compute, double param);
vt_status vt_op_reduce_arg(int dev, const char *name, int is_max, const vt_tensor *values, const vt_tensor *indices,
                           const vt_tensor *in, int dim);
vt_status vt_op_scan(int dev, const char *name, vt_scan_op op, const vt_tensor *out, const vt_tensor *in, int dim,
                     vt_dtype compute);

/* ------------------------------------------------------------------ kernel families
 * Each family's synchronous kernels, references and queued wrappers. */
#include "softmax.h"

#include "norm.h"

#include "rnn.h"

#include "index.h"

#include "attention.h"

#include "optim.h"

#include "pool.h"

/* Host <-> device transfers. Host-to-device waits until the copy has run
 * (the host buffer is the caller's); device-to-host synchronises first. Both
 * take strided views and convert dtypes like vt_copy. */
vt_status vt_copy_to_device(int dev, const vt_tensor *dst_dev, const vt_tensor *src_host);
vt_status vt_copy_to_host(int dev, const vt_tensor *dst_host, const vt_tensor *src_dev);
/* Host-to-device without the wait (a non-blocking copy from pinned host
 * memory): the copy runs in queue order and *ticket_out receives an event
 * ticket reached once it has run; the host buffer must stay allocated and
 * unchanged until then (vt_event_query). In Debug mode it waits as usual. */
vt_status vt_copy_to_device_async(int dev, const vt_tensor *dst_dev, const vt_tensor *src_host, uint64_t *ticket_out);

/* Host steps: work a host library runs in queue order, such as a collective
 * handed to a transport. fn(ctx, input_fault) runs on dev's worker after the
 * work enqueued before it, and later work waits for it. reads and writes
 * list the device tensors it touches (device memory of dev only). It runs
 * even when a read is poisoned (peers in other processes wait for it):
 * input_fault is then that fault's message, else NULL, and what it writes is
 * poisoned. It returns VT_OK, or a status after vt_host_step_error().
 * *queued (may be NULL) says whether the step was queued: then fn is called
 * exactly once and owns ctx; else it never is and the error is the
 * request's. Debug mode waits for the step and returns its error. */
typedef vt_status (*vt_host_fn)(void *ctx, const char *input_fault);
vt_status vt_enqueue_host(int dev, const char *name, vt_host_fn fn, void *ctx, const vt_tensor *reads, int nreads,
                          const vt_tensor *writes, int nwrites, int *queued);
/* A host step's failure: sets the message the fault carries, returns s. */
vt_status vt_host_step_error(vt_status s, const char *msg);

/* Test aid: a kernel that blocks the queue until vt_debug_gate_open() (or
 * timeout_ms passes), so tests can observe asynchrony without timing. */
vt_status vt_debug_gate_enqueue(int dev, int64_t timeout_ms);
void vt_debug_gate_open(void);

#ifdef __cplusplus
}
#endif
#endif /* VTPU_VTPU_H */
