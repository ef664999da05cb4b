/* test_kernels_mxu_util.h — what the MXU tests share: each engine the CPU
 * has in turn, 2-D operands, fills, the fp32 accumulation bound against
 * vt_ref_matmul, and an operand produced row by row. */
#ifndef VTPU_TEST_KERNELS_MXU_UTIL_H
#define VTPU_TEST_KERNELS_MXU_UTIL_H

#include <stdatomic.h>

#include "test_kernels_util.h"
#include "kernels/mxu/mxu_local.h"

static const unsigned engine_masks[] = {
    VT_ISA_AMX | VT_ISA_AVX512BF16 | VT_ISA_AVX512 | VT_ISA_AVX2, VT_ISA_AVX512BF16 | VT_ISA_AVX512 | VT_ISA_AVX2,
    VT_ISA_AVX512 | VT_ISA_AVX2, VT_ISA_AVX2, 0};
#define N_ENGINES (sizeof engine_masks / sizeof engine_masks[0])

/* Forces each engine the CPU has in turn; returns 0 when mask is not available. */
static inline int use_engine(size_t i) {
    unsigned avail = vt_isa_available();
    if ((engine_masks[i] & avail) != engine_masks[i]) return 0;
    vt_isa_force(engine_masks[i]);
    return 1;
}
static inline void restore_engine(void) { vt_isa_force(vt_isa_default()); }

static inline host_tensor mat(vt_dtype dt, int64_t r, int64_t c) {
    int64_t s[2] = {r, c};
    return ht_new(dt, 2, s);
}

static inline void set_f(host_tensor *h, int64_t i, double v) {
    vt_convert(VT_F64, &v, 1, h->t.dtype, (char *)h->block + i * (int64_t)vt_dtype_size(h->t.dtype), 1, 1);
}
static inline double get_at(const vt_tensor *t, int64_t i, int64_t j) {
    double d;
    int64_t off = t->offset + i * t->strides[0] + j * t->strides[1];
    vt_convert(t->dtype, (const char *)t->data + off * (int64_t)vt_dtype_size(t->dtype), 1, VT_F64, &d, 1, 1);
    return d;
}

/* Fill the whole block: small integers (exact in bf16) or U(-1, 1). */
static inline void fill(host_tensor *h, int ints) {
    int64_t n = ht_block_elems(h);
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = next_u64();
        set_f(h, i, ints ? (double)((int64_t)(r % 17) - 8) : (double)(r >> 11) * 0x1p-52 - 1.0);
    }
}

/* The fp32 accumulation bound of a 2-D product against the reference: the
 * engine adds nterms = passes*K (+1 for the guarded sum) exact products in
 * f32, in any order, so |got - ref| <= nterms * 2^-24 * sum|products| (the
 * classic recursive-summation bound with u = 2^-24), plus one rounding of
 * out's dtype (2^-p relative, p = 24 / 8 / 11). */
static inline int64_t check_bound(const char *what, const vt_tensor *out, const vt_tensor *ref, const vt_tensor *a,
                                  const vt_tensor *b, vt_precision prec) {
    int64_t M = out->sizes[0], N = out->sizes[1], K = a->sizes[1], bad = 0;
    int passes = a->dtype != VT_F32 ? 1 : prec == VT_PRECISION_HIGH ? 3 : prec == VT_PRECISION_HIGHEST ? 6 : 1;
    double out_u = out->dtype == VT_F32 ? 0x1p-24 : out->dtype == VT_BF16 ? 0x1p-8 : 0x1p-11;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++) s += fabs(get_at(a, i, k) * get_at(b, k, j));
            double g = get_at(out, i, j), r = get_at(ref, i, j);
            double tol = (double)(passes * K + 1) * 0x1p-24 * s * 1.01 + 2 * out_u * fabs(r);
            if (!(fabs(g - r) <= tol) && !(isnan(g) && isnan(r))) {
                if (bad < 3)
                    vt_test_fail(__FILE__, __LINE__, "%s: (%lld,%lld) %.9g vs ref %.9g (tol %.3g)", what, (long long)i,
                                 (long long)j, g, r, tol);
                bad++;
            }
        }
    return bad;
}

/* out = a @ b on the current engine and in the reference; compare. */
static inline void run_case(const char *tag, host_tensor *a, host_tensor *b, vt_precision prec, int exact) {
    int64_t M = a->t.sizes[0], N = b->t.sizes[1];
    host_tensor out = mat(a->t.dtype, M, N), ref = mat(a->t.dtype, M, N);
    /* out starts as NaNs (all bits set): a sum must never start from what
     * out held (an engine that accumulates in out itself) */
    memset(out.block, 0xff, (size_t)ht_block_elems(&out) * vt_dtype_size(out.t.dtype));
    CHECK_OK(vt_matmul(&out.t, &a->t, &b->t, NULL, 1.0, 0.0, prec));
    CHECK_OK(vt_ref_matmul(&ref.t, &a->t, &b->t, NULL, 1.0, 0.0, prec));
    char what[160];
    snprintf(what, sizeof what, "%s %s %s prec=%d %lldx%lldx%lld", tag, vt_mxu_path(), vt_dtype_name(a->t.dtype),
             (int)prec, (long long)M, (long long)a->t.sizes[1], (long long)N);
    if (exact) CHECK(ht_compare(what, &out.t, &ref.t, -1) == 0);
    else CHECK(check_bound(what, &out.t, &ref.t, &a->t, &b->t, prec) == 0);
    ht_free(&out);
    ht_free(&ref);
}

typedef struct copy_rows {
    const host_tensor *m;
    _Atomic int64_t calls;
} copy_rows;

static inline void copy_row(void *ctx, int64_t i, void *dst) {
    copy_rows *c = ctx;
    size_t es = vt_dtype_size(c->m->t.dtype), row = (size_t)c->m->t.sizes[1] * es;
    memcpy(dst, (const char *)c->m->block + (size_t)i * row, row);
    atomic_fetch_add(&c->calls, 1);
}

/* vt_matmul_rows with A, B or both produced row by row gives vt_matmul's
 * bits on the stored operands, on every engine and precision; padding rows
 * are never asked for. */

#endif
