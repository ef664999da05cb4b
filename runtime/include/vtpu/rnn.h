/* vtpu/rnn.h — the fused recurrent cells ATen asks an accelerator for
 * (_thnn_fused_lstm_cell, _thnn_fused_gru_cell): the gate arithmetic of one
 * time step after its two matmuls. Part of the public C API: included by
 * vtpu/vtpu.h, never on its own.
 *
 * Contract. Gates [B, k*H] (k = 4 for LSTM, 3 for GRU), the previous state
 * [B, H], the biases [k*H] (both or neither), all of one dtype, F32, BF16 or
 * F16, any strides; outputs of that dtype, [B, H] and the workspace [B, 4H]
 * (LSTM: the activations i, f, g, o) or [B, 5H] (GRU: r, z, n, hx, hn +
 * b_hn), PyTorch's layouts, not overlapping an input. Each step of the
 * cell is one elementwise op computed in float and rounded to the dtype,
 * with the elementwise kernels' own microkernels (sigmoid, tanh, addcmul),
 * so the results are the bits the cell gives composed of vtpu's elementwise
 * ops (add, sigmoid, tanh, mul, addcmul, sub) in PyTorch's order; the
 * backwards likewise (mul, tanh, 1 - x, add, sub). */
#ifndef VTPU_RNN_H
#define VTPU_RNN_H

/* hy = o * tanh(cy), cy = f * cx + i * g, [i f g o] = act(ig + hg + b_ih + b_hh). */
vt_status vt_lstm_cell(const vt_tensor *hy, const vt_tensor *cy, const vt_tensor *workspace,
                       const vt_tensor *input_gates, const vt_tensor *hidden_gates, const vt_tensor *cx,
                       const vt_tensor *b_ih, const vt_tensor *b_hh);
/* hy = n + z * (hx - n), r, z = sigmoid(i_rz + h_rz + biases),
 * n = tanh(i_n + b_in + r * (h_n + b_hn)). */
vt_status vt_gru_cell(const vt_tensor *hy, const vt_tensor *workspace, const vt_tensor *input_gates,
                      const vt_tensor *hidden_gates, const vt_tensor *hx, const vt_tensor *b_ih,
                      const vt_tensor *b_hh);

/* The LSTM cell's gradients from its saved cx, cy and workspace (PyTorch's
 * _thnn_fused_lstm_cell_backward_impl without the bias sum): grad_gates
 * [B, 4H] (of the summed gates, so of either gate input and either bias),
 * grad_cx [B, H]; an absent grad_hy or grad_cy counts as zeros. */
vt_status vt_lstm_cell_backward(const vt_tensor *grad_gates, const vt_tensor *grad_cx, const vt_tensor *grad_hy,
                                const vt_tensor *grad_cy, const vt_tensor *cx, const vt_tensor *cy,
                                const vt_tensor *workspace);

/* The GRU cell's gradients from its workspace (PyTorch's
 * _thnn_fused_gru_cell_backward without the bias sums): of the input gates
 * and of the hidden gates [B, 3H] (they differ in the new gate, which the
 * reset gate scales on the hidden side), and of hx [B, H]. */
vt_status vt_gru_cell_backward(const vt_tensor *grad_input_gates, const vt_tensor *grad_hidden_gates,
                               const vt_tensor *grad_hx, const vt_tensor *grad_hy, const vt_tensor *workspace);

/* ---- queued (checks at the call, the kernel on dev's queue). */
vt_status vt_op_lstm_cell(int dev, const char *name, const vt_tensor *hy, const vt_tensor *cy,
                          const vt_tensor *workspace, const vt_tensor *input_gates, const vt_tensor *hidden_gates,
                          const vt_tensor *cx, const vt_tensor *b_ih, const vt_tensor *b_hh);
vt_status vt_op_gru_cell(int dev, const char *name, const vt_tensor *hy, const vt_tensor *workspace,
                         const vt_tensor *input_gates, const vt_tensor *hidden_gates, const vt_tensor *hx,
                         const vt_tensor *b_ih, const vt_tensor *b_hh);

vt_status vt_op_lstm_cell_backward(int dev, const char *name, const vt_tensor *grad_gates, const vt_tensor *grad_cx,
                                   const vt_tensor *grad_hy, const vt_tensor *grad_cy, const vt_tensor *cx,
                                   const vt_tensor *cy, const vt_tensor *workspace);

vt_status vt_op_gru_cell_backward(int dev, const char *name, const vt_tensor *grad_input_gates,
                                  const vt_tensor *grad_hidden_gates, const vt_tensor *grad_hx,
                                  const vt_tensor *grad_hy, const vt_tensor *workspace);

#endif /* VTPU_RNN_H */
