/* rnn_avx512.c — the recurrent cells' row loops of rnn_body.h built for AVX-512. */
#define RNN_SFX avx512
#include "kernels/rnn/rnn_body.h"
