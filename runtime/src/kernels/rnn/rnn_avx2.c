/* rnn_avx2.c — the recurrent cells' row loops of rnn_body.h built for AVX2. */
#define RNN_SFX avx2
#include "kernels/rnn/rnn_body.h"
