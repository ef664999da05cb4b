/* mxu_dispatch.c — the MXU engines in preference order (AMX-BF16, then
 * AVX512-BF16, AVX-512, AVX2, else portable C) and the one the ISA
 * registry picked. */
#include <stdatomic.h>

#include "internal.h"

static const vt_mxu_engine *const engines[] = {
#if VT_X86
    &vt_mxu_engine_amx, &vt_mxu_engine_avx512bf16, &vt_mxu_engine_avx512, &vt_mxu_engine_avx2,
#endif
    &vt_mxu_engine_scalar,
};

static _Atomic(const vt_mxu_engine *) active;

unsigned vt_mxu_select_isa(unsigned mask) {
    const vt_mxu_engine *e = &vt_mxu_engine_scalar;
    for (size_t i = 0; i < sizeof engines / sizeof engines[0]; i++)
        if ((engines[i]->isa & mask) == engines[i]->isa) {
            e = engines[i];
            break;
        }
    atomic_store_explicit(&active, e, memory_order_release);
    return e->isa;
}

const vt_mxu_engine *vt_mxu_engine_active(void) {
    const vt_mxu_engine *e = atomic_load_explicit(&active, memory_order_acquire);
    if (!e) {
        vt_kernels_ready();
        e = atomic_load_explicit(&active, memory_order_acquire);
    }
    return e;
}

const char *vt_mxu_path(void) { return vt_mxu_engine_active()->name; }
