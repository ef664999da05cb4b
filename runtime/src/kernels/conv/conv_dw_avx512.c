/* conv_dw_avx512.c — the depthwise loops of conv_dw_body.h built for AVX-512. */
#define DW_SFX avx512
#include "kernels/conv/conv_dw_body.h"
