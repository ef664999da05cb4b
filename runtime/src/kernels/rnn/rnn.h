/* rnn.h — what the node kind of the recurrent cells (graph/node_kinds.c)
 * needs of kernels/rnn/rnn.c. */
#ifndef VTPU_KERNELS_RNN_H
#define VTPU_KERNELS_RNN_H

#include "internal.h"

/* The cell's argument checks alone, messages prefixed with name (lstm: 1,
 * else GRU; cy NULL for GRU). */
vt_status vt_rnn_cell_check(const char *name, int lstm, const vt_tensor *hy, const vt_tensor *cy,
                            const vt_tensor *ws, const vt_tensor *ig, const vt_tensor *hg, const vt_tensor *prev,
                            const vt_tensor *bi, const vt_tensor *bh);

/* The backwards' checks alone, messages prefixed with name. */
vt_status vt_rnn_cell_backward_check(const char *name, const vt_tensor *grad_gates, const vt_tensor *grad_cx,
                                     const vt_tensor *grad_hy, const vt_tensor *grad_cy, const vt_tensor *cx,
                                     const vt_tensor *cy, const vt_tensor *workspace);
vt_status vt_rnn_gru_backward_check(const char *name, const vt_tensor *grad_input_gates,
                                    const vt_tensor *grad_hidden_gates, const vt_tensor *grad_hx,
                                    const vt_tensor *grad_hy, const vt_tensor *workspace);

/* One cell call's rows (rnn.c): what each ISA's row loop reads. */
typedef struct vt_rnn_cell_job {
    int lstm;
    int64_t H;
    vt_dtype dt;
    const vt_tensor *hy, *cy, *ws, *ig, *hg, *prev;
    const float *bi, *bh; /* the biases in float ([k*H] each), or NULL */
    _Atomic int oom;
} vt_rnn_cell_job;
/* A cell backward's rows. LSTM: outputs gg [B, 4H] and gcx [B, H]; ghy,
 * gcy nullable. GRU (gru): outputs gg, ggh [B, 3H] (input and hidden
 * gates), gcx [B, H] (of hx); ghy and ws. */
typedef struct vt_rnn_back_job {
    int gru;
    int64_t H;
    vt_dtype dt;
    const vt_tensor *gg, *ggh, *gcx, *ghy, *gcy, *cx, *cy, *ws;
    _Atomic int oom;
} vt_rnn_back_job;
/* Rows [b0, b1) of the job ctx (rnn_body.h, per ISA). */
void vt_rnn_cell_rows_portable(void *ctx, int64_t b0, int64_t b1);
void vt_rnn_back_rows_portable(void *ctx, int64_t b0, int64_t b1);
#if VT_X86
void vt_rnn_cell_rows_avx2(void *ctx, int64_t b0, int64_t b1);
void vt_rnn_cell_rows_avx512(void *ctx, int64_t b0, int64_t b1);
void vt_rnn_back_rows_avx2(void *ctx, int64_t b0, int64_t b1);
void vt_rnn_back_rows_avx512(void *ctx, int64_t b0, int64_t b1);
#endif

#endif
