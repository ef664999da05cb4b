/* registry.c — the one ISA registry: every kernel family's ISA-specific
 * tables are picked here, once before the first kernel runs (for
 * vt_isa_active(): what the CPU has, limited by VTPU_ISA), and again when a
 * test forces a mask. A family keeps its picker and the tables it reads. */
#include <pthread.h>

#include "internal.h"

static unsigned (*const pickers[])(unsigned mask) = {
    vt_convert_select_isa, vt_elementwise_select_isa, vt_elementwise_act_select_isa, vt_reduce_select_isa,
    vt_norm_select_isa,    vt_softmax_select_isa,     vt_rng_select_isa,             vt_mxu_select_isa,
    vt_attn_select_isa,    vt_optim_select_isa,   vt_conv_dw_select_isa,         vt_rnn_select_isa,
};

static void pick_all(unsigned mask) {
    for (size_t i = 0; i < sizeof pickers / sizeof pickers[0]; i++) pickers[i](mask);
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static void start(void) { pick_all(vt_isa_active()); }

void vt_kernels_ready(void) { pthread_once(&once, start); }

unsigned vt_isa_force(unsigned mask) {
    vt_kernels_ready();
    mask = vt_isa_set_active(mask);
    pick_all(mask);
    return mask;
}
