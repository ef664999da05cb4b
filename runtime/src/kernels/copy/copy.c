/* copy.c — dtype conversion with PyTorch's casting rules, and the copy /
 * fill kernels built on it and the strided iterator (core/iter.c). */
#include <stdatomic.h>

#include "internal.h"

/* ------------------------------------------------------------ conversions
 * Every source dtype loads exactly into one of float, double or int64; each
 * destination then has one rule per class, chosen with _Generic. That gives
 * correctly rounded int64 -> float (no detour through double) and PyTorch's
 * double -> float -> bf16/f16 double rounding. */

/* Float -> integer: C leaves NaN and out-of-range undefined; PyTorch on
 * x86-64 gets cvtt*2si's "integer indefinite" (INT_MIN), narrower types
 * take the low bits of the int32 result. Check the range first, then cast. */
static inline int64_t f64_to_i64(double x) {
    if (x >= -9.2233720368547758e18 && x < 9.2233720368547758e18) return (int64_t)x;
    return INT64_MIN;
}
static inline int32_t f64_to_i32(double x) {
    if (x > -2147483649.0 && x < 2147483648.0) return (int32_t)x;
    return INT32_MIN;
}
static inline int64_t f32_to_i64(float x) { return f64_to_i64((double)x); }
static inline int32_t f32_to_i32(float x) { return f64_to_i32((double)x); }
/* Two's complement narrowing, spelled through unsigned so it is defined. */
static inline int8_t wrap_i8(uint64_t u) {
    uint8_t v = (uint8_t)u;
    return v < 0x80u ? (int8_t)v : (int8_t)((int)v - 256);
}
static inline int16_t wrap_i16(uint64_t u) {
    uint16_t v = (uint16_t)u;
    return v < 0x8000u ? (int16_t)v : (int16_t)((int32_t)v - 65536);
}
static inline int32_t wrap_i32(uint64_t u) {
    uint32_t v = (uint32_t)u;
    return v < 0x80000000u ? (int32_t)v : (int32_t)((int64_t)v - 4294967296LL);
}

#define TO_F32(v) _Generic((v), float: (float)(v), double: (float)(v), int64_t: (float)(v))
#define TO_F64(v) _Generic((v), float: (double)(v), double: (double)(v), int64_t: (double)(v))
#define TO_BF16(v) vt_f32_to_bf16(TO_F32(v))
#define TO_F16(v) vt_f32_to_f16(TO_F32(v))
static inline int64_t fi64_i(int64_t v) { return v; }
static inline int64_t ff_i64(float v) { return f32_to_i64(v); }
static inline int64_t fd_i64(double v) { return f64_to_i64(v); }
static inline uint64_t to_i32_bits_f(float v) { return (uint64_t)(int64_t)f32_to_i32(v); }
static inline uint64_t to_i32_bits_d(double v) { return (uint64_t)(int64_t)f64_to_i32(v); }
static inline uint64_t to_i32_bits_i(int64_t v) { return (uint64_t)v; }
#define TO_I64(v) _Generic((v), float: ff_i64, double: fd_i64, int64_t: fi64_i)(v)
#define LOWBITS(v) _Generic((v), float: to_i32_bits_f, double: to_i32_bits_d, int64_t: to_i32_bits_i)(v)
#define TO_I32(v) wrap_i32(LOWBITS(v))
#define TO_I16(v) wrap_i16(LOWBITS(v))
#define TO_I8(v) wrap_i8(LOWBITS(v))
#define TO_U8(v) ((uint8_t)LOWBITS(v))
#define TO_BOOL(v) ((uint8_t)((v) != 0))

#define LD_F32(p, i) (((const float *)(p))[i])
#define LD_BF16(p, i) vt_bf16_to_f32(((const uint16_t *)(p))[i])
#define LD_F16(p, i) vt_f16_to_f32(((const uint16_t *)(p))[i])
#define LD_F64(p, i) (((const double *)(p))[i])
#define LD_I8(p, i) ((int64_t)((const int8_t *)(p))[i])
#define LD_U8(p, i) ((int64_t)((const uint8_t *)(p))[i])
#define LD_I16(p, i) ((int64_t)((const int16_t *)(p))[i])
#define LD_I32(p, i) ((int64_t)((const int32_t *)(p))[i])
#define LD_I64(p, i) (((const int64_t *)(p))[i])
#define LD_BOOL(p, i) ((int64_t)(((const uint8_t *)(p))[i] != 0))

#define ST_F32(p, i, v) (((float *)(p))[i] = TO_F32(v))
#define ST_BF16(p, i, v) (((uint16_t *)(p))[i] = TO_BF16(v))
#define ST_F16(p, i, v) (((uint16_t *)(p))[i] = TO_F16(v))
#define ST_F64(p, i, v) (((double *)(p))[i] = TO_F64(v))
#define ST_I8(p, i, v) (((int8_t *)(p))[i] = TO_I8(v))
#define ST_U8(p, i, v) (((uint8_t *)(p))[i] = TO_U8(v))
#define ST_I16(p, i, v) (((int16_t *)(p))[i] = TO_I16(v))
#define ST_I32(p, i, v) (((int32_t *)(p))[i] = TO_I32(v))
#define ST_I64(p, i, v) (((int64_t *)(p))[i] = TO_I64(v))
#define ST_BOOL(p, i, v) (((uint8_t *)(p))[i] = TO_BOOL(v))

typedef void (*cvt_fn)(const void *src, int64_t ss, void *dst, int64_t ds, int64_t n);

/* The unit-stride loop is kept separate so the compiler can vectorise it. */
#define CVT_LOOP(S, D)                                                                                         \
    static void cvt_##S##_##D(const void *src, int64_t ss, void *dst, int64_t ds, int64_t n) {                 \
        if (ss == 1 && ds == 1) {                                                                              \
            for (int64_t i = 0; i < n; i++) ST_##D(dst, i, LD_##S(src, i));                                    \
        } else {                                                                                               \
            for (int64_t i = 0; i < n; i++) ST_##D(dst, i * ds, LD_##S(src, i * ss));                          \
        }                                                                                                      \
    }
#define FOR_EACH_DST(M, S) M(S, F32) M(S, BF16) M(S, F16) M(S, F64) M(S, I8) M(S, U8) M(S, I16) M(S, I32) M(S, I64) M(S, BOOL)
FOR_EACH_DST(CVT_LOOP, F32)
FOR_EACH_DST(CVT_LOOP, BF16)
FOR_EACH_DST(CVT_LOOP, F16)
FOR_EACH_DST(CVT_LOOP, F64)
FOR_EACH_DST(CVT_LOOP, I8)
FOR_EACH_DST(CVT_LOOP, U8)
FOR_EACH_DST(CVT_LOOP, I16)
FOR_EACH_DST(CVT_LOOP, I32)
FOR_EACH_DST(CVT_LOOP, I64)
FOR_EACH_DST(CVT_LOOP, BOOL)

#define CVT_ENTRY(S, D) cvt_##S##_##D,
static const cvt_fn cvt_table[VT_DTYPE_COUNT][VT_DTYPE_COUNT] = {
    {FOR_EACH_DST(CVT_ENTRY, F32)},  {FOR_EACH_DST(CVT_ENTRY, BF16)}, {FOR_EACH_DST(CVT_ENTRY, F16)},
    {FOR_EACH_DST(CVT_ENTRY, F64)},  {FOR_EACH_DST(CVT_ENTRY, I8)},   {FOR_EACH_DST(CVT_ENTRY, U8)},
    {FOR_EACH_DST(CVT_ENTRY, I16)},  {FOR_EACH_DST(CVT_ENTRY, I32)},  {FOR_EACH_DST(CVT_ENTRY, I64)},
    {FOR_EACH_DST(CVT_ENTRY, BOOL)},
};

/* Same dtype: move bits, so NaN payloads and non-0/1 bools survive a copy. */
static void copy_same(size_t es, const void *src, int64_t ss, void *dst, int64_t ds, int64_t n) {
    if (ss == 1 && ds == 1) {
        if (src != dst) memmove(dst, src, (size_t)n * es);
        return;
    }
    const char *s = src;
    char *d = dst;
    switch (es) {
    case 1: for (int64_t i = 0; i < n; i++) d[i * ds] = s[i * ss]; break;
    case 2: for (int64_t i = 0; i < n; i++) ((uint16_t *)d)[i * ds] = ((const uint16_t *)s)[i * ss]; break;
    case 4: for (int64_t i = 0; i < n; i++) ((uint32_t *)d)[i * ds] = ((const uint32_t *)s)[i * ss]; break;
    default: for (int64_t i = 0; i < n; i++) ((uint64_t *)d)[i * ds] = ((const uint64_t *)s)[i * ss]; break;
    }
}

/* Contiguous bf16 <-> f32, the conversions every bf16 kernel stages through:
 * per-ISA versions, chosen once. */
typedef void (*transpose_fn)(const char *src, int64_t ss, char *dst, int64_t ds, size_t es, int nr, int nj);
typedef struct bf16_cvt {
    void (*to_f32)(const uint16_t *src, float *dst, int64_t n);
    void (*from_f32)(const float *src, uint16_t *dst, int64_t n);
    void (*acc_f32)(float *d, const float *s, int64_t n, float alpha);
    void (*acc_bf16)(uint16_t *d, const uint16_t *s, int64_t n, float alpha);
    transpose_fn transpose16; /* NULL: the scalar tiles */
} bf16_cvt;

static void bf16_f32_portable(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = vt_bf16_to_f32(src[i]);
}
static void f32_bf16_portable(const float *src, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = vt_f32_to_bf16(src[i]);
}

/* The portable accumulations in 4-lane vectors (SSE2 / NEON wide on every
 * build): the same multiply, add and rounding per element as the scalar
 * loop. */
typedef float acc_v4f __attribute__((vector_size(16)));
typedef uint32_t acc_v4u __attribute__((vector_size(16)));
typedef uint16_t acc_v4h __attribute__((vector_size(8)));

static void acc_f32_portable(float *restrict d, const float *restrict s, int64_t n, float alpha) {
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        acc_v4f a, b;
        memcpy(&a, d + j, sizeof a);
        memcpy(&b, s + j, sizeof b);
        a = a + alpha * b;
        memcpy(d + j, &a, sizeof a);
    }
    for (; j < n; j++) d[j] = d[j] + alpha * s[j];
}

static inline acc_v4f bf16x4_to_f32(const uint16_t *p) {
    acc_v4h h;
    memcpy(&h, p, sizeof h);
    acc_v4u u = __builtin_convertvector(h, acc_v4u) << 16;
    acc_v4f f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* vt_f32_to_bf16 on four lanes: nearest even, NaN -> 0x7fc0. */
static inline void f32x4_to_bf16(uint16_t *p, acc_v4f f) {
    acc_v4u u;
    memcpy(&u, &f, sizeof u);
    acc_v4u nan = (acc_v4u)(f != f);
    acc_v4u r = ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16 & ~nan) | (nan & 0x7fc0u);
    acc_v4h h = __builtin_convertvector(r, acc_v4h);
    memcpy(p, &h, sizeof h);
}

static void acc_bf16_portable(uint16_t *restrict d, const uint16_t *restrict s, int64_t n, float alpha) {
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) f32x4_to_bf16(d + j, bf16x4_to_f32(d + j) + alpha * bf16x4_to_f32(s + j));
    for (; j < n; j++) d[j] = vt_f32_to_bf16(vt_bf16_to_f32(d[j]) + alpha * vt_bf16_to_f32(s[j]));
}

static const bf16_cvt bf16_portable = {bf16_f32_portable, f32_bf16_portable, acc_f32_portable, acc_bf16_portable,
                                       NULL};
#if VT_X86
static const bf16_cvt bf16_avx512 = {vt_cvt_bf16_f32_avx512, vt_cvt_f32_bf16_avx512, vt_acc_f32_avx512,
                                     vt_acc_bf16_avx512, vt_transpose16_avx512};
static const bf16_cvt bf16_avx512bf16 = {vt_cvt_bf16_f32_avx512, vt_cvt_f32_bf16_avx512bf16, vt_acc_f32_avx512,
                                         vt_acc_bf16_avx512, vt_transpose16_avx512};
static const bf16_cvt bf16_avx2 = {vt_cvt_bf16_f32_avx2, vt_cvt_f32_bf16_avx2, vt_acc_f32_avx2, vt_acc_bf16_avx2,
                                   NULL};
#endif
static _Atomic(const bf16_cvt *) bf16_active;

static inline const bf16_cvt *bf16_table(void) {
    const bf16_cvt *t = atomic_load_explicit(&bf16_active, memory_order_acquire);
    if (!t) {
        vt_kernels_ready();
        t = atomic_load_explicit(&bf16_active, memory_order_acquire);
    }
    return t;
}

void vt_accumulate_f32(float *d, const float *s, int64_t n, float alpha) {
    if (n > 0) bf16_table()->acc_f32(d, s, n, alpha);
}

void vt_accumulate_bf16(uint16_t *d, const uint16_t *s, int64_t n, float alpha) {
    if (n > 0) bf16_table()->acc_bf16(d, s, n, alpha);
}

unsigned vt_convert_select_isa(unsigned mask) {
    unsigned isa = vt_isa_widest(mask);
    const bf16_cvt *t = VT_ISA_TABLE(isa, &bf16_portable, &bf16_avx2, &bf16_avx512);
#if VT_X86
    if (isa == VT_ISA_AVX512 && (mask & VT_ISA_AVX512BF16)) t = &bf16_avx512bf16, isa |= VT_ISA_AVX512BF16;
#endif
    atomic_store_explicit(&bf16_active, t, memory_order_release);
    return isa;
}

void vt_convert(vt_dtype from, const void *src, int64_t src_stride, vt_dtype to, void *dst, int64_t dst_stride,
                int64_t n) {
    if (n <= 0) return;
    if (src_stride == 1 && dst_stride == 1) {
        if (from == VT_BF16 && to == VT_F32) {
            bf16_table()->to_f32(src, dst, n);
            return;
        }
        if (from == VT_F32 && to == VT_BF16) {
            bf16_table()->from_f32(src, dst, n);
            return;
        }
    }
    if (from == to)
        copy_same(vt_dtype_size(from), src, src_stride, dst, dst_stride, n);
    else
        cvt_table[from][to](src, src_stride, dst, dst_stride, n);
}

/* ------------------------------------------------------------ copy / fill */

typedef struct copy_ctx {
    vt_ew_head h;
    vt_dtype from, to;
} copy_ctx;
_Static_assert(sizeof(copy_ctx) <= VT_EW_PLAN_BYTES, "copy_ctx outgrew a plan");

/* A transpose of rows x n elements of es bytes: dst contiguous along the
 * row (s0 = 1), src along the rows (rs1 = +-es). 16 x 16 tiles, so each
 * tile reads and writes whole cache lines instead of one line per element;
 * tiles of 2- and 4-byte elements with src ascending go through the ISA's
 * register transpose where it has one (masked where short, unless they are
 * slivers of under 64 elements). */
#define TRANSPOSE_TILE 16
#define TRANSPOSE_LOOP(T)                                                                                          \
    for (int64_t r0 = rb; r0 < re_; r0 += TRANSPOSE_TILE)                                                          \
        for (int64_t j0 = jb; j0 < je_; j0 += TRANSPOSE_TILE) {                                                    \
            int64_t re = r0 + TRANSPOSE_TILE < re_ ? r0 + TRANSPOSE_TILE : re_;                                     \
            int64_t je = j0 + TRANSPOSE_TILE < je_ ? j0 + TRANSPOSE_TILE : je_;                                     \
            for (int64_t r = r0; r < re; r++) {                                                                    \
                T *d = (T *)(dst + r * rs[0]);                                                                     \
                const T *q = (const T *)(src + r * rs[1]);                                                         \
                for (int64_t j = j0; j < je; j++) d[j] = q[j * s1];                                                \
            }                                                                                                      \
        }
/* rows [rb, re_) x elements [jb, je_) */
static void transpose_tiles(char *dst, const char *src, int64_t s1, int64_t rb, int64_t re_, int64_t jb, int64_t je_,
                            const int64_t *rs, size_t es) {
    switch (es) {
    case 1: TRANSPOSE_LOOP(uint8_t) break;
    case 2: TRANSPOSE_LOOP(uint16_t) break;
    case 4: TRANSPOSE_LOOP(uint32_t) break;
    default: TRANSPOSE_LOOP(uint64_t) break;
    }
}

static void transpose_block(char *dst, const char *src, int64_t s1, int64_t n, int64_t rows, const int64_t *rs,
                            size_t es) {
    const transpose_fn tile = bf16_table()->transpose16;
    if (!tile || (es != 2 && es != 4) || rs[1] != (int64_t)es) {
        transpose_tiles(dst, src, s1, 0, rows, 0, n, rs, es);
        return;
    }
    for (int64_t r0 = 0; r0 < rows; r0 += TRANSPOSE_TILE)
        for (int64_t j0 = 0; j0 < n; j0 += TRANSPOSE_TILE) {
            const int nr = (int)(rows - r0 < TRANSPOSE_TILE ? rows - r0 : TRANSPOSE_TILE);
            const int nj = (int)(n - j0 < TRANSPOSE_TILE ? n - j0 : TRANSPOSE_TILE);
            if (nr * nj < 64) /* a sliver: the register transpose costs as much as a whole tile */
                transpose_tiles(dst, src, s1, r0, r0 + nr, j0, j0 + nj, rs, es);
            else
                tile(src + r0 * rs[1] + j0 * s1 * (int64_t)es, s1 * (int64_t)es, dst + r0 * rs[0] + j0 * (int64_t)es,
                     rs[0], es, nr, nj);
        }
}

/* rows x n elements of es bytes, each row of src read backwards (a flipped
 * kernel's taps: the input gradient's transposed weight walks runs of 9).
 * vt_convert's strided loop per run of a few elements cost more than the
 * copy; a typed loop does not. */
#define REVERSE_LOOP(T)                                                                                            \
    for (int64_t r = 0; r < rows; r++) {                                                                           \
        T *d = (T *)(dst + r * rs[0]);                                                                             \
        const T *q = (const T *)(src + r * rs[1]);                                                                 \
        for (int64_t j = 0; j < n; j++) d[j] = q[-j];                                                              \
    }
static void reverse_rows(char *dst, const char *src, int64_t n, int64_t rows, const int64_t *rs, size_t es) {
    switch (es) {
    case 1: REVERSE_LOOP(uint8_t) break;
    case 2: REVERSE_LOOP(uint16_t) break;
    case 4: REVERSE_LOOP(uint32_t) break;
    default: REVERSE_LOOP(uint64_t) break;
    }
}

static void copy_block(void *vctx, char *const *p, const int64_t *s, int64_t n, int64_t rows, const int64_t *rs) {
    copy_ctx *c = vctx;
    char *dst = p[0];
    const char *src = p[1];
    const size_t es = c->h.it.elsize[0];
    const int across = rs[1] == (int64_t)es || rs[1] == -(int64_t)es; /* src steps one element a row */
    if (c->from == c->to && rows > 1 && s[0] == 1 && (s[1] > 1 || s[1] < -1) && across && es <= 8 &&
        (es & (es - 1)) == 0) {
        transpose_block(dst, src, s[1], n, rows, rs, es);
        return;
    }
    if (c->from == c->to && s[0] == 1 && s[1] == -1 && es <= 8 && (es & (es - 1)) == 0) {
        reverse_rows(dst, src, n, rows, rs, es);
        return;
    }
    if (c->from == c->to && s[0] == 1 && s[1] == 1) { /* rows of bytes: a slice of a cat, a head of a projection */
        const size_t bytes = (size_t)n * es;
        for (int64_t r = 0; r < rows; r++, dst += rs[0], src += rs[1])
            if (dst != src) memmove(dst, src, bytes);
        return;
    }
    for (int64_t r = 0; r < rows; r++, dst += rs[0], src += rs[1]) vt_convert(c->from, src, s[1], c->to, dst, s[0], n);
}

static void copy_range(void *vctx, int64_t b, int64_t e) {
    copy_ctx *c = vctx;
    vt_iter_blocks(&c->h.it, b, e, copy_block, c);
}

/* When dst and src do not overlap (any order then gives the same result):
 * dst's unit-stride dim innermost and src's unit-stride dim next to it, so
 * copy_block sees a transpose it can move in tiles (a permuted
 * .contiguous(), the input gradient's transposed weight) rather than the
 * logical order's strided walk of both; where both have the same
 * unit-stride dim but it is not the last (channels-last views), dst's
 * memory order. */
static void transpose_order(vt_tensor ops[2]) {
    int nd = ops[0].ndim, di = -1, si = -1;
    for (int d = 0; d < nd; d++)
        if (ops[0].sizes[d] > 1 && ops[0].strides[d] == 1) di = d;
    if (di < 0) return;
    for (int d = 0; d < nd; d++)
        if (d != di && ops[1].sizes[d] > 1 && (ops[1].strides[d] == 1 || ops[1].strides[d] == -1)) si = d;
    const int shared = ops[1].sizes[di] > 1 && (ops[1].strides[di] == 1 || ops[1].strides[di] == -1);
    if (shared ? di == nd - 1 : si < 0 || (di == nd - 1 && si == nd - 2)) return;
    if (vt_view_overlap(&ops[0], &ops[1]) != VT_OVERLAP_NO) return;
    vt_tensor *both[2] = {&ops[0], &ops[1]};
    int order[VT_MAX_DIMS], k = 0;
    if (shared) { /* one layout, its unit-stride dim not the last: dst's memory order */
        if (!vt_memory_perm(both, 2, order)) return;
    } else { /* a transpose */
        for (int d = 0; d < nd; d++)
            if (d != di && d != si) order[k++] = d;
        order[k++] = si, order[k++] = di;
    }
    vt_permute_dims(both, 2, order);
}

/* reorder: walk in transpose_order (only a copy run by itself: a fused
 * group's members share the logical element order, their scratch is
 * indexed by it). */
static vt_status copy_plan(vt_ew_plan *p, const vt_tensor *dst, const vt_tensor *src, int reorder) {
    vt_tensor ops[2];
    ops[0] = *dst;
    vt_status s = vt_broadcast_to(src, dst->ndim, dst->sizes, &ops[1]);
    if (s) return s;
    if (reorder) transpose_order(ops);
    copy_ctx *c = (copy_ctx *)p->ctx;
    vt_iter_init(&c->h.it, 2, ops);
    atomic_init(&c->h.failed, 0);
    p->range = copy_range;
    c->from = src->dtype;
    c->to = dst->dtype;
    return VT_OK;
}

vt_status vt_copy_plan(vt_ew_plan *p, const vt_tensor *dst, const vt_tensor *src) { return copy_plan(p, dst, src, 0); }

vt_status vt_copy(const vt_tensor *dst, const vt_tensor *src) {
    vt_ew_plan p;
    const vt_tensor *in[1] = {src};
    vt_status s = vt_ew_validate(dst, 1, in, (vt_dtype)-1, "copy");
    if (s == VT_OK) s = copy_plan(&p, dst, src, 1);
    return s == VT_OK ? vt_ew_plan_run(&p) : s;
}

typedef struct fill_ctx {
    vt_ew_head h;
    unsigned char value[8];
} fill_ctx;
_Static_assert(sizeof(fill_ctx) <= VT_EW_PLAN_BYTES, "fill_ctx outgrew a plan");

/* n * 8 bytes of the pattern pat at an 8-aligned dst. On x86 one REP STOSQ:
 * as fast as memset's string store on a large run (a 9.6 MB fill's halves:
 * 137 GB/s a core here), where copying a 4 KiB pattern block out ran at
 * 64-94 GB/s, its loads and stores 4 KiB apart aliasing. */
static void fill_words(char *dst, uint64_t pat, size_t n) {
#if VT_X86 && defined(__GNUC__)
    __asm__ volatile("rep stosq" : "+D"(dst), "+c"(n) : "a"(pat) : "memory");
#else
    for (size_t i = 0; i < n; i++) memcpy(dst + 8 * i, &pat, 8);
#endif
}

/* A contiguous run: memset when every byte of the value is the same (0,
 * -1, bools); an element of up to 8 bytes as an 8-byte pattern from the
 * first 8-aligned address (elements before it one by one: es divides 8,
 * so the pattern starts on an element); wider ones (complex128) as a
 * 4 KiB pattern block copied out. */
static void fill_contiguous(char *dst, const unsigned char *value, size_t es, int64_t n) {
    size_t bytes = (size_t)n * es;
    int uniform = 1;
    for (size_t k = 1; k < es; k++) uniform &= value[k] == value[0];
    if (uniform) {
        memset(dst, value[0], bytes);
        return;
    }
    if (es <= 8 && (uintptr_t)dst % es == 0) {
        for (; ((uintptr_t)dst & 7) && bytes; dst += es, bytes -= es) memcpy(dst, value, es);
        uint64_t pat;
        unsigned char *pb = (unsigned char *)&pat;
        for (size_t k = 0; k < 8; k++) pb[k] = value[k % es];
        fill_words(dst, pat, bytes / 8);
        memcpy(dst + bytes / 8 * 8, &pat, bytes % 8);
        return;
    }
    _Alignas(64) unsigned char block[4096];
    size_t bs = bytes < sizeof block ? bytes : sizeof block;
    for (size_t k = 0; k < bs; k += es) memcpy(block + k, value, es);
    for (size_t off = 0; off < bytes; off += bs) memcpy(dst + off, block, bytes - off < bs ? bytes - off : bs);
}

static void fill_run(void *vctx, char *const *p, const int64_t *s, int64_t n) {
    fill_ctx *c = vctx;
    size_t es = c->h.it.elsize[0];
    if (s[0] == 1) {
        fill_contiguous(p[0], c->value, es, n);
        return;
    }
    /* Broadcast the one converted element with the same-dtype copier. */
    vt_dtype dt = es == 1 ? VT_U8 : es == 2 ? VT_I16 : es == 4 ? VT_I32 : VT_I64;
    vt_convert(dt, c->value, 0, dt, p[0], s[0], n);
}

static void fill_range(void *vctx, int64_t b, int64_t e) {
    fill_ctx *c = vctx;
    vt_iter_range(&c->h.it, b, e, fill_run, c);
}

/* reorder: as copy_plan's (a fill run by itself: every element gets the
 * same value, so any order gives the same result). */
static vt_status fill_plan(vt_ew_plan *p, const vt_tensor *out, vt_scalar value, int reorder) {
    fill_ctx *c = (fill_ctx *)p->ctx;
    memset(c->value, 0, sizeof c->value);
    if (value.is_float)
        vt_convert(VT_F64, &value.f, 1, out->dtype, c->value, 1, 1);
    else
        vt_convert(VT_I64, &value.i, 1, out->dtype, c->value, 1, 1);
    vt_tensor o = *out, *op = &o;
    int perm[VT_MAX_DIMS];
    if (reorder && vt_memory_perm(&op, 1, perm)) vt_permute_dims(&op, 1, perm); /* a channels-last view fills in runs */
    vt_iter_init(&c->h.it, 1, &o);
    atomic_init(&c->h.failed, 0);
    p->range = fill_range;
    return VT_OK;
}

vt_status vt_fill(const vt_tensor *out, vt_scalar value) {
    vt_ew_plan p;
    vt_status s = vt_ew_validate(out, 0, NULL, (vt_dtype)-1, "fill");
    if (s == VT_OK) s = fill_plan(&p, out, value, 1);
    return s == VT_OK ? vt_ew_plan_run(&p) : s;
}

vt_status vt_fill_plan(vt_ew_plan *p, const vt_tensor *out, vt_scalar value) { return fill_plan(p, out, value, 0); }
