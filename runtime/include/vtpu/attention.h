/* vtpu/attention.h — scaled dot-product attention as a tiled kernel (forward and backward).
 * Part of the public C API: included by vtpu/vtpu.h, never on its own. */
#ifndef VTPU_ATTENTION_H
#define VTPU_ATTENTION_H

/* Shapes (PyTorch's SDPA; all of q, k, v, out, dout, dq, dk, dv share one
 * ndim, 3 or 4; a 3-D tensor is one batch):
 *   q [B, Hq, L, D], k [B, Hk, S, D], v [B, Hk, S, Dv], out/dout [B, Hq, L, Dv],
 *   lse [B, Hq, L] (float32: the natural log of each row's softmax
 *   denominator over the scaled, masked scores; -inf for a row whose keys
 *   are all masked, whose output is 0 as PyTorch's).
 * Hq % Hk == 0: query head h attends with key/value head h / (Hq / Hk)
 * (grouped-query attention). q, k, v, out share a dtype (F32, BF16, F16);
 * any strides. mask: NULL, or a BOOL (true = attend) or floating (added to
 * the scores) tensor of at most 4 dims broadcasting to [B, Hq, L, S].
 * is_causal: query i attends keys j <= i (top-left aligned, as PyTorch),
 * combined with mask when both are given.
 * Numerics: the scores q.k and the product p.v are MXU matmuls at prec
 * (F32: DEFAULT rounds both operands to bf16 with f32 accumulation, HIGH
 * and HIGHEST run the 3 / 6 split passes; BF16 and F16 one bf16 pass);
 * scale is applied to the f32 scores; softmax statistics are f32 and the
 * [L, S] score matrix is never materialised (online softmax over key
 * blocks). Results do not depend on the thread count. */
vt_status vt_sdpa_forward(const vt_tensor *out, const vt_tensor *lse, const vt_tensor *q, const vt_tensor *k,
                          const vt_tensor *v, const vt_tensor *mask, double scale, int is_causal, vt_precision prec);

/* Gradients of vt_sdpa_forward given dout, the forward's out and lse:
 * P is recomputed from q, k and lse; delta = rowsum(dout * out);
 * dS = P * (dout.v - delta); dq = scale dS.k, dk = scale dS^T.q, dv = P^T.dout
 * (summed over each key/value head's group of query heads). dq, dk, dv have
 * the shapes and dtype of q, k, v; each may be NULL (not computed).
 * Deterministic: no atomics, each gradient row summed in a fixed order. */
vt_status vt_sdpa_backward(const vt_tensor *dq, const vt_tensor *dk, const vt_tensor *dv, const vt_tensor *dout,
                           const vt_tensor *q, const vt_tensor *k, const vt_tensor *v, const vt_tensor *mask,
                           const vt_tensor *out, const vt_tensor *lse, double scale, int is_causal,
                           vt_precision prec);

/* Scalar references: the full score matrix row by row in double, with the
 * matmul operands rounded as the precision rounds them (DEFAULT: bf16; HIGH
 * and HIGHEST: kept as f32). Same contracts as the kernels. */
vt_status vt_ref_sdpa_forward(const vt_tensor *out, const vt_tensor *lse, const vt_tensor *q, const vt_tensor *k,
                              const vt_tensor *v, const vt_tensor *mask, double scale, int is_causal,
                              vt_precision prec);
vt_status vt_ref_sdpa_backward(const vt_tensor *dq, const vt_tensor *dk, const vt_tensor *dv, const vt_tensor *dout,
                               const vt_tensor *q, const vt_tensor *k, const vt_tensor *v, const vt_tensor *mask,
                               const vt_tensor *out, const vt_tensor *lse, double scale, int is_causal,
                               vt_precision prec);

/* Queued versions: argument checks on the calling thread, then the kernel
 * on dev's queue. name: static op name for errors ("aten::..."). */
vt_status vt_op_sdpa_forward(int dev, const char *name, const vt_tensor *out, const vt_tensor *lse,
                             const vt_tensor *q, const vt_tensor *k, const vt_tensor *v, const vt_tensor *mask,
                             double scale, int is_causal, vt_precision prec);
vt_status vt_op_sdpa_backward(int dev, const char *name, const vt_tensor *dq, const vt_tensor *dk,
                              const vt_tensor *dv, const vt_tensor *dout, const vt_tensor *q, const vt_tensor *k,
                              const vt_tensor *v, const vt_tensor *mask, const vt_tensor *out,
                              const vt_tensor *lse, double scale, int is_causal, vt_precision prec);

#endif /* VTPU_ATTENTION_H */
