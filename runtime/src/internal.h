/* internal.h — runtime-private helpers shared by libvtpu's files: error
 * reporting, element conversions and the per-ISA dispatch tables. Not installed. */
#ifndef VTPU_INTERNAL_H
#define VTPU_INTERNAL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "vtpu/vtpu.h"

/* Set this thread's last-error message and return s (printf-style). */
vt_status vt_set_error(vt_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void vt_clear_error(void);

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
/* Broadcast t's view to the shape (ndim, sizes) of an output: right-aligned,
 * size-1 dims get stride 0. VT_ERR_INVALID_ARGUMENT if not broadcastable. */
vt_status vt_broadcast_to(const vt_tensor *t, int32_t ndim, const int64_t *sizes, vt_tensor *out);
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
} vt_runtime_config;
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
vt_status vt_enqueue_ex(int dev, const char *op_name, vt_kernel_fn fn, const void *args, size_t args_size,
                        vt_enqueue_policy policy, uint64_t *ticket_out);

/* ---- kernels: dtype conversion and strided iteration (kernels/copy.c) */
/* Convert n elements between any two dtypes with vt_copy's rules; strides
 * count elements. Same-dtype conversion copies the bits unchanged. */
void vt_convert(vt_dtype from, const void *src, int64_t src_stride, vt_dtype to, void *dst, int64_t dst_stride,
                int64_t n);

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
/* Visit logical (row-major) elements [begin, end) run by run. */
void vt_iter_range(const vt_iter *it, int64_t begin, int64_t end, vt_iter_run_fn fn, void *ctx);

/* Elements per parallel chunk for memory-bound elementwise work: below it
 * the pool costs more than it gains. */
#define VT_ELEMENTWISE_GRAIN 32768

/* ---- kernels: elementwise microkernels (kernels/elementwise_ops.c)
 * Operate on the compute class of a dtype: float (F32, BF16, F16), double
 * (F64) or int64 (every integer dtype and bool). Inputs and a non-bool
 * output are of the class type; bool-valued ops write uint8 0/1. An input
 * stride of 0 makes it a scalar, otherwise it is 1. alpha points to a value
 * of the class type. They return nonzero after an integer division by zero. */
typedef enum vt_compute_class { VT_CLASS_FLOAT = 0, VT_CLASS_DOUBLE, VT_CLASS_INT, VT_CLASS_COUNT } vt_compute_class;
typedef int (*vt_binary_ukernel)(int64_t n, void *out, const void *a, int64_t as, const void *b, int64_t bs,
                                 const void *alpha);
typedef int (*vt_unary_ukernel)(int64_t n, void *out, const void *a);
/* NULL where the op has no meaning in that class (bitwise on floats, exp on ints). */
extern const vt_binary_ukernel vt_binary_ukernels[VT_CLASS_COUNT][VT_BINARY_OP_COUNT];
/* Trunc/floor division in bf16 or f16 compute (rounded at every step, as
 * PyTorch does); NULL for other ops and dtypes. */
vt_binary_ukernel vt_narrow_div_ukernel(vt_binary_op op, vt_dtype compute);
extern const vt_unary_ukernel vt_unary_ukernels[VT_CLASS_COUNT][VT_UNARY_OP_COUNT];
int vt_binary_op_is_bool(vt_binary_op op);
int vt_unary_op_is_bool(vt_unary_op op);

/* ---- kernels: elementwise ISA dispatch (kernels/elementwise*.c) */
/* Contiguous f32 microkernels that have per-ISA versions; out may alias a or b. */
typedef void (*vt_f32_binary_fn)(int64_t n, float *out, const float *a, const float *b);
typedef struct vt_f32_binary_table {
    vt_f32_binary_fn add, sub, mul, div;
} vt_f32_binary_table;
extern const vt_f32_binary_table vt_f32_binary_portable;
#if defined(__x86_64__)
extern const vt_f32_binary_table vt_f32_binary_avx2;
extern const vt_f32_binary_table vt_f32_binary_avx512;
#endif
/* Test aid: make the elementwise kernels use the best path within mask
 * (VT_ISA_* bits, still limited to what the CPU has); returns the mask of
 * the path chosen. vt_elementwise_force_isa(vt_isa_active()) restores. */
unsigned vt_elementwise_force_isa(unsigned mask);

/* ---- kernels: scalar references (kernels/elementwise_ref.c)
 * Half-precision rounding written from the definition (scale, round to
 * nearest even, re-encode), independent of the bit tricks in tensor.c. */
uint16_t vt_ref_f32_to_f16(float f);
uint16_t vt_ref_f32_to_bf16(float f);
float vt_ref_f16_to_f32(uint16_t h);

/* ---- kernels: random numbers (kernels/rng.c) */
/* Philox counter values one vt_rng_uniform / vt_rng_normal call on n
 * elements of dtype consumes; the generator offset advances by this. */
/* One Philox4x32-10 block: the four words for (counter, key). */
void vt_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

#endif
