/* mxu_dispatch.c — picks the MXU engine once from vt_isa_active(): AMX-BF16,
 * then AVX512-BF16, AVX-512, AVX2, else portable C. Tests may force a lower
 * engine to check every path against the reference. */
#include <pthread.h>
#include <stdatomic.h>

#include "internal.h"

static const vt_mxu_engine *const engines[] = {
#if defined(__x86_64__)
    &vt_mxu_engine_amx, &vt_mxu_engine_avx512bf16, &vt_mxu_engine_avx512, &vt_mxu_engine_avx2,
#endif
    &vt_mxu_engine_scalar,
};

static _Atomic(const vt_mxu_engine *) active;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static const vt_mxu_engine *best_within(unsigned mask) {
    unsigned avail = vt_isa_available() & mask;
    for (size_t i = 0; i < sizeof engines / sizeof engines[0]; i++)
        if ((engines[i]->isa & avail) == engines[i]->isa) return engines[i];
    return &vt_mxu_engine_scalar;
}

static void pick(void) { atomic_store(&active, best_within(vt_isa_active())); }

const vt_mxu_engine *vt_mxu_engine_active(void) {
    pthread_once(&once, pick);
    return atomic_load_explicit(&active, memory_order_acquire);
}

unsigned vt_mxu_force_isa(unsigned mask) {
    pthread_once(&once, pick);
    const vt_mxu_engine *e = best_within(mask);
    atomic_store_explicit(&active, e, memory_order_release);
    return e->isa;
}

const char *vt_mxu_path(void) { return vt_mxu_engine_active()->name; }
