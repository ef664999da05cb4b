/* fuzz_ops.c — fuzzes the queued-op entry points with tensor descriptors
 * (shapes, strides, offsets, dtypes, data pointers) and index values built
 * from the input bytes. Whatever the input, an op must refuse it with a
 * status or run it inside the memory it was given: under AddressSanitizer
 * the device blocks are exactly as large as their allocations, so a kernel
 * that reaches past a view's block aborts the run.
 *
 * Built with clang -fsanitize=fuzzer it is a libFuzzer target (make fuzz);
 * otherwise main() below is a seeded random driver (make test runs it
 * briefly under ASan + UBSan). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

#define NBLOCKS 4
#define BLOCK_BYTES 8192 /* a multiple of the allocator's 512-byte class: no slack past the end */

static void *blocks[NBLOCKS + 1]; /* the last one lives on device 1 */
static long accepted;              /* inputs an op took (the rest it refused) */

typedef struct reader {
    const uint8_t *p;
    size_t n;
} reader;

static uint8_t u8(reader *r) {
    if (!r->n) return 0;
    r->n--;
    return *r->p++;
}

static int64_t i64(reader *r) {
    uint64_t v = 0;
    for (int k = 0; k < 8; k++) v = v << 8 | u8(r);
    return (int64_t)v;
}

/* Small numbers mostly, sometimes extreme ones. */
static int64_t num(reader *r, int64_t small) {
    uint8_t k = u8(r);
    switch (k & 15) {
    case 0: return i64(r);
    case 1: return -(int64_t)(u8(r) % 4) - 1;
    case 2: return INT64_MAX - (int64_t)u8(r);
    default: return (int64_t)(u8(r) % (uint64_t)small);
    }
}

/* A wild descriptor: any dtype, rank, size, stride and offset. */
static vt_tensor wild(reader *r) {
    vt_tensor t;
    memset(&t, 0, sizeof t);
    uint8_t where = u8(r);
    static char host[BLOCK_BYTES];
    t.data = where % 16 == 15 ? (void *)host : where % 16 == 14 ? NULL : blocks[where % (NBLOCKS + 1)];
    uint8_t dt = u8(r);
    t.dtype = dt % 32 == 31 ? (vt_dtype)(VT_DTYPE_COUNT + dt % 3) : (vt_dtype)(dt % VT_DTYPE_COUNT);
    uint8_t nd = u8(r);
    t.ndim = nd % 32 == 31 ? (int32_t)(VT_MAX_DIMS + 1 + nd % 4) : nd % 32 == 30 ? -1 : (int32_t)(nd % 5);
    for (int d = 0; d < VT_MAX_DIMS; d++) {
        t.sizes[d] = num(r, 9);
        int64_t st = num(r, 40);
        t.strides[d] = u8(r) % 8 == 0 ? (int64_t)(0 - (uint64_t)st) : st;
    }
    t.offset = num(r, 200);
    return t;
}

/* A view PyTorch could make, most of the time: small sizes, row-major
 * strides that may be permuted, broadcast (0) or gapped (x2), in one of the
 * blocks, of dtype dt. */
typedef struct shape {
    int32_t ndim;
    int64_t sizes[4];
} shape;

static vt_tensor plausible(reader *r, vt_dtype dt, const shape *common) {
    vt_tensor t;
    memset(&t, 0, sizeof t);
    t.data = blocks[u8(r) % (NBLOCKS + 1)];
    t.dtype = u8(r) % 8 == 0 ? (vt_dtype)(u8(r) % VT_DTYPE_COUNT) : dt;
    uint8_t like = u8(r) % 4; /* mostly the op's common shape, some dims 1 (broadcast) */
    t.ndim = like ? common->ndim : u8(r) % 4;
    int64_t st = 1;
    for (int d = t.ndim - 1; d >= 0; d--) {
        t.sizes[d] = like == 0 ? u8(r) % 7 : like == 3 && u8(r) % 2 ? 1 : common->sizes[d];
        t.strides[d] = st;
        st *= t.sizes[d] ? t.sizes[d] : 1;
    }
    uint8_t how = u8(r);
    if (t.ndim >= 2 && how % 4 == 1) { /* a transpose */
        int64_t x = t.sizes[0], y = t.strides[0];
        t.sizes[0] = t.sizes[1], t.strides[0] = t.strides[1];
        t.sizes[1] = x, t.strides[1] = y;
    }
    if (t.ndim >= 1 && how % 4 == 2) t.strides[u8(r) % t.ndim] = 0;
    if (t.ndim >= 1 && how % 4 == 3) t.strides[u8(r) % t.ndim] *= 2;
    t.offset = u8(r) % 16;
    return t;
}

/* num(r, small) - shift, wrapping (the input chooses extreme values too). */
static int64_t shifted(reader *r, int64_t small, int64_t shift) { return (int64_t)((uint64_t)num(r, small) - (uint64_t)shift); }

static vt_tensor tensor(reader *r, vt_dtype dt, const shape *common) {
    return u8(r) % 8 == 0 ? wild(r) : plausible(r, dt, common);
}

/* A contiguous int64 index tensor in a block, values from the input. */
static vt_tensor index_tensor(reader *r, int block, int64_t n) {
    vt_tensor t;
    memset(&t, 0, sizeof t);
    t.data = blocks[block];
    t.dtype = u8(r) % 2 ? VT_I64 : VT_I32;
    t.ndim = 1;
    t.sizes[0] = n;
    t.strides[0] = 1;
    int64_t *v = blocks[block];
    for (int64_t k = 0; k < n && k < BLOCK_BYTES / 8; k++) v[k] = shifted(r, 12, 2);
    return t;
}

/* Elements a view names, saturating. A broadcast view of huge size in a few
 * bytes is valid (PyTorch's expand makes them) and costs its size in work,
 * on CPU as here: the fuzzer skips those, it looks for memory errors. */
static int64_t elements(const vt_tensor *t) {
    if (t->ndim < 0 || t->ndim > VT_MAX_DIMS) return 0;
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->sizes[d] <= 0) return 0;
        if (__builtin_mul_overflow(n, t->sizes[d], &n)) return INT64_MAX;
    }
    return n;
}

static void setup(void) {
    setenv("VTPU_NUM_DEVICES", "2", 0);
    if (vt_init() != VT_OK) abort();
    for (int b = 0; b <= NBLOCKS; b++) {
        if (vt_hbm_alloc(b == NBLOCKS ? 1 : 0, BLOCK_BYTES, &blocks[b]) != VT_OK) abort();
        memset(blocks[b], 0, BLOCK_BYTES);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int ready;
    if (!ready) setup(), ready = 1;
    reader r = {data, size};
    vt_set_thread_eager_mode(u8(&r) % 4 == 0 ? VT_EAGER_DEBUG : VT_EAGER_STRICT);
    uint8_t op = u8(&r);
    vt_dtype dt = (vt_dtype)(u8(&r) % VT_DTYPE_COUNT);
    shape common = {u8(&r) % 4, {0}};
    for (int d = 0; d < 4; d++) common.sizes[d] = u8(&r) % 6;
    vt_tensor a = tensor(&r, dt, &common), b = tensor(&r, dt, &common), c = tensor(&r, dt, &common);
    if (elements(&a) > 4096 || elements(&b) > 4096 || elements(&c) > 4096) return 0;
    int dim = (int)shifted(&r, 6, 2);
    vt_scalar s = vt_scalar_from_double((double)shifted(&r, 100, 50));
    vt_tensor ix = index_tensor(&r, u8(&r) % NBLOCKS, num(&r, 40));
    const vt_tensor *ixs[2] = {&ix, NULL};
    vt_status st = VT_ERR_INVALID_ARGUMENT;
    switch (op % 28) {
    case 0: st = vt_op_unary(0, "fuzz", (vt_unary_op)(u8(&r) % VT_UNARY_OP_COUNT), &a, &b, b.dtype); break;
    case 1:
        st = vt_op_binary(0, "fuzz", (vt_binary_op)(u8(&r) % VT_BINARY_OP_COUNT), &a, &b, NULL, &c, NULL, a.dtype, s);
        break;
    case 2: st = vt_op_binary(0, "fuzz", VT_DIV_TRUNC, &a, &b, NULL, NULL, &s, VT_I64, s); break;
    case 3: st = vt_op_ternary(0, "fuzz", (vt_ternary_op)(u8(&r) % VT_TERNARY_OP_COUNT), &a, &b, NULL, &c, NULL, &b, NULL, a.dtype, s); break;
    case 4: st = vt_op_where(0, "fuzz", &a, &b, &c, &a); break;
    case 5: st = vt_op_copy(u8(&r) % 2, "fuzz", &a, &b); break;
    case 6: st = vt_op_fill(0, "fuzz", &a, s); break;
    case 7: st = vt_op_rng_uniform(0, "fuzz", &a, 1, 0, 0.0, 1.0); break;
    case 8: st = vt_op_matmul(0, "fuzz", &a, &b, &c, NULL, 1.0, 0.0, (vt_precision)(u8(&r) % 3)); break;
    case 9: st = vt_op_reduce(0, "fuzz", (vt_reduce_op)(u8(&r) % VT_REDUCE_OP_COUNT), &a, &b, (uint64_t)num(&r, 64), a.dtype, 1.0); break;
    case 10: st = vt_op_reduce_arg(0, "fuzz", u8(&r) % 2, &a, &ix, &b, dim); break;
    case 11: st = vt_op_scan(0, "fuzz", (vt_scan_op)(u8(&r) % 3), &a, &b, dim, a.dtype); break;
    case 12: st = vt_op_softmax(0, "fuzz", &a, &b, dim, u8(&r) % 2); break;
    case 13: st = vt_op_index_select(0, "fuzz", &a, &b, dim, &ix); break;
    case 14: st = vt_op_gather(0, "fuzz", &a, &b, dim, &ix); break;
    case 15:
        st = vt_op_scatter(0, "fuzz", &a, dim, &ix, u8(&r) % 2 ? &b : NULL, NULL, s, (vt_scatter_reduce)(u8(&r) % 3), 1);
        break;
    case 16: st = vt_op_index_add(0, "fuzz", &a, dim, &ix, &b, s); break;
    case 17: st = vt_op_take(0, "fuzz", &a, &b, &ix); break;
    case 18: st = vt_op_index(0, "fuzz", &a, &b, 1, ixs); break;
    case 19: st = vt_op_index_put(0, "fuzz", &a, 1, ixs, &b, u8(&r) % 2); break;
    case 20: st = vt_op_masked_fill(0, "fuzz", &a, &b, NULL, s); break;
    case 21: st = vt_op_embedding_dense_backward(0, "fuzz", &a, &b, &ix, shifted(&r, 10, 2), u8(&r) % 2); break;
    case 22: {
        vt_tensor list[3] = {b, c, b};
        st = vt_op_cat(0, "fuzz", &a, 1 + u8(&r) % 3, list, dim);
        break;
    }
    case 23: st = vt_op_flip(0, "fuzz", &a, &b, (uint64_t)num(&r, 32)); break;
    case 24: st = vt_op_tri(0, "fuzz", &a, &b, shifted(&r, 8, 4), u8(&r) % 2); break;
    case 25: st = vt_op_sort(0, "fuzz", &a, &ix, &b, dim, u8(&r) % 2); break;
    case 26: st = vt_op_layer_norm(0, "fuzz", &a, NULL, NULL, &b, NULL, NULL, (int32_t)num(&r, 4), 1e-5); break;
    default: { /* transfers: a host buffer laid out contiguously, as the binding passes it */
        static char host[BLOCK_BYTES];
        vt_tensor h = a;
        h.data = host;
        h.offset = 0;
        int64_t n = 1, es = (int64_t)vt_dtype_size(a.dtype);
        for (int d = a.ndim - 1; d >= 0 && a.ndim <= VT_MAX_DIMS; d--) {
            h.strides[d] = n;
            if (a.sizes[d] > 0 && n > BLOCK_BYTES / a.sizes[d]) n = BLOCK_BYTES + 1;
            else n *= a.sizes[d] > 0 ? a.sizes[d] : 1;
        }
        if (!es || n * es > BLOCK_BYTES) break; /* larger than the host buffer: not a view of it */
        st = u8(&r) % 2 ? vt_copy_to_host(0, &h, &a) : vt_copy_to_device(0, &a, &h);
        break;
    }
    }
    accepted += st == VT_OK;
    vt_check_readable(&a);
    vt_synchronize(0);
    vt_synchronize(1);
    vt_set_thread_eager_mode(-1);
    return 0;
}

#ifndef VT_LIBFUZZER
/* Seeded random driver: `fuzz_ops [inputs] [seed] [seconds]`; inputs 0 with
 * seconds: as many as fit in that time. The same seed gives the same inputs. */
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10000;
    uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 0) : 0x9e3779b97f4a7c15ull;
    double seconds = argc > 3 ? atof(argv[3]) : 0;
    printf("fuzz_ops: seed %llu\n", (unsigned long long)seed);
    fflush(stdout);
    if (!seed) seed = 0x9e3779b97f4a7c15ull; /* xorshift needs a nonzero state */
    time_t start = time(NULL);
    uint8_t buf[512];
    long i = 0;
    for (; n <= 0 || i < n; i++) {
        if (seconds > 0 && (i & 1023) == 0 && difftime(time(NULL), start) >= seconds) break;
        size_t len = 0;
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        len = (size_t)(seed % sizeof buf);
        for (size_t k = 0; k < len; k++) {
            seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
            buf[k] = (uint8_t)(seed >> 29);
        }
        LLVMFuzzerTestOneInput(buf, len);
    }
    printf("fuzz_ops: %ld inputs (%ld ran, the rest refused), no memory error\n", i, accepted);
    return 0;
}
#endif
