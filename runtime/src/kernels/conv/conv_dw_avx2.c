/* conv_dw_avx2.c — the depthwise loops of conv_dw_body.h built for AVX2. */
#define DW_SFX avx2
#include "kernels/conv/conv_dw_body.h"
