/* optim_kernels.c — the portable block kernels of the foreach and fused
 * optimizer family, the f64 foreach block, and the run-time choice of the
 * per-ISA table. */
#include <stdatomic.h>

#include "kernels/optim/optim.h"

static void fe_f32(const optim_fe_f32 *p, int64_t n, float *out, const float *a, const float *b, const float *c) {
    OPTIM_FE_BODY(float, fmaf, sqrtf, expf, powf)
}

void optim_fe_f64_block(const optim_fe_f64 *p, int64_t n, double *out, const double *a, const double *b,
                        const double *c) {
    OPTIM_FE_BODY(double, fma, sqrt, exp, pow)
}

static void adam_f32(const optim_adam_f32 *p, int64_t n, float *param, float *grad, float *m, float *v, float *mx) {
    OPTIM_ADAM_BODY
}

static void sgd_f32(const optim_sgd_f32 *p, int64_t n, float *param, float *grad, float *buf) { OPTIM_SGD_BODY }

const optim_table optim_table_portable = {"portable", fe_f32, adam_f32, sgd_f32};

static _Atomic(const optim_table *) active;

unsigned vt_optim_select_isa(unsigned mask) {
    const unsigned isa = vt_isa_widest(mask);
    atomic_store_explicit(&active, VT_ISA_TABLE(isa, &optim_table_portable, &optim_table_avx2, &optim_table_avx512),
                          memory_order_release);
    return isa;
}

const optim_table *optim_active_table(void) {
    const optim_table *t = atomic_load_explicit(&active, memory_order_acquire);
    if (!t) {
        vt_kernels_ready();
        t = atomic_load_explicit(&active, memory_order_acquire);
    }
    return t;
}
