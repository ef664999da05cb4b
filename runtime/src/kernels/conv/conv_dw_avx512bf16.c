/* conv_dw_avx512bf16.c — the depthwise loops of conv_dw_body.h built for
 * AVX-512 with AVX512-BF16: the round to bf16 of every input and weight
 * value (DEFAULT's products) is VCVTNEPS2BF16, the same bits. */
#include <immintrin.h>

#define DW_SFX avx512bf16
#define DW_HW_RNE 1
#include "kernels/conv/conv_dw_body.h"
