// attention_ops.cpp — scaled dot-product attention on tpu: picks the
// overrideable fused backend for PrivateUse1 (the inputs the C kernel takes;
// the rest, e.g. dropout, go to PyTorch's math path, which decomposes into
// native tpu ops), and adapts the overrideable forward / backward to
// vt_op_sdpa_forward / _backward. The gradient of an additive mask is
// composed of native ops from the saved logsumexp.
#include <ATen/Context.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common.h"
#include "device_check.h"

namespace vtpu {
namespace {

bool kernel_dtype(c10::ScalarType t) { return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf; }

int64_t fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa) {
  (void)scale;
  const auto math = static_cast<int64_t>(at::SDPBackend::math);
  if (!at::globalContext().userEnabledOverrideableSDP()) return math;
  if (q.is_nested() || k.is_nested() || v.is_nested()) return math;
  if (!kernel_dtype(q.scalar_type()) || k.scalar_type() != q.scalar_type() || v.scalar_type() != q.scalar_type())
    return math;
  if ((q.dim() != 3 && q.dim() != 4) || k.dim() != q.dim() || v.dim() != q.dim()) return math;
  if (dropout_p > 0.0) return math;
  if (q.dim() == 4 && (k.size(0) != q.size(0) || v.size(0) != q.size(0))) return math;
  const int64_t hq = q.size(-3), hk = k.size(-3);
  if (v.size(-3) != hk || k.size(-2) != v.size(-2) || k.size(-1) != q.size(-1)) return math;
  if (hq != hk && (!enable_gqa || hk == 0 || hq % hk != 0)) return math;
  if (mask.has_value() && mask->defined()) {
    // PyTorch's math path raises the error for a mask given with is_causal.
    if (is_causal || mask->dim() > 4) return math;
    if (mask->scalar_type() != at::kBool && mask->scalar_type() != q.scalar_type()) return math;
  }
  return static_cast<int64_t>(at::SDPBackend::overrideable);
}

vt_tensor desc(const at::Tensor& t, const char* what) {
  vt_tensor d{};
  TORCH_CHECK_NOT_IMPLEMENTED(describe(t, &d), "vtpu: scaled_dot_product_attention: ", what, " of dtype ",
                              t.scalar_type(), " is not supported on tpu");
  return d;
}

void check_device(const at::Tensor& q, const at::Tensor& t) {
  TORCH_CHECK(t.device() == q.device(), "Expected all tensors to be on the same device, but found at least two devices, ",
              q.device(), " and ", t.device(), "!");
}

// The output laid out as CPU lays it out: a 4-D query whose last dim is its
// fastest takes CPU's fused kernel there, whose output keeps query's stride
// order; any other query takes CPU's math path, whose output is contiguous.
at::Tensor out_like_query(const at::Tensor& q, int64_t last) {
  const int64_t nd = q.dim();
  std::vector<int64_t> sizes = q.sizes().vec(), order(nd), perm_sizes(nd), inverse(nd);
  sizes.back() = last;
  for (int64_t i = 0; i < nd; i++) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return q.stride(a) > q.stride(b); });
  if (nd != 4 || order.back() != nd - 1) return at::empty(sizes, q.options());
  for (int64_t i = 0; i < nd; i++) perm_sizes[i] = sizes[order[i]], inverse[order[i]] = i;
  return at::empty(perm_sizes, q.options()).permute(inverse);
}

double scale_of(const at::Tensor& q, std::optional<double> scale) {
  return scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor, at::Tensor, at::Tensor>
sdpa_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::optional<at::Tensor>& bias,
             double dropout_p, bool is_causal, bool return_debug_mask, std::optional<double> scale) {
  TORCH_CHECK_NOT_IMPLEMENTED(dropout_p == 0.0, "vtpu: the fused attention kernel has no dropout (dropout_p > 0 takes ",
                              "the math path of scaled_dot_product_attention)");
  TORCH_CHECK(q.dim() == 3 || q.dim() == 4, "query must be 3D or 4D");
  check_device(q, k);
  check_device(q, v);
  const bool has_bias = bias.has_value() && bias->defined();
  if (has_bias) check_device(q, *bias);
  c10::DeviceGuard guard(q.device());
  const int64_t B = q.dim() == 4 ? q.size(0) : 1, H = q.size(-3), L = q.size(-2);
  at::Tensor out = out_like_query(q, v.size(-1));
  at::Tensor lse = at::empty({B, H, L}, q.options().dtype(at::kFloat));
  vt_tensor to = desc(out, "output"), tl = desc(lse, "logsumexp"), tq = desc(q, "query"), tk = desc(k, "key"),
            tv = desc(v, "value"), tb{};
  if (has_bias) tb = desc(*bias, "attn_mask");
  check(vt_op_sdpa_forward(device_index(q), "aten::_scaled_dot_product_fused_attention_overrideable", &to, &tl, &tq,
                           &tk, &tv, has_bias ? &tb : nullptr, scale_of(q, scale), is_causal, matmul_precision()));
  (void)return_debug_mask;
  return {out,
          lse,
          at::Tensor(),
          at::Tensor(),
          c10::SymInt(L),
          c10::SymInt(k.size(-2)),
          at::empty({}, q.options().dtype(at::kLong)),
          at::empty({}, q.options().dtype(at::kLong)),
          at::Tensor()};
}

// Gradient of the additive mask: the logits' gradient dS = P * (dP - rowsum(dO * O)),
// with P = exp(S - lse) recomputed from the saved logsumexp and
// dP = dO V^T, summed over the dims the mask broadcasts along. In float32
// (the kernel's own accumulation type), rounded to the mask's dtype.
at::Tensor mask_grad(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& mask, const at::Tensor& out, const at::Tensor& lse, std::optional<double> scale) {
  TORCH_CHECK(at::isFloatingType(mask.scalar_type()), "scaled_dot_product_attention: a ", mask.scalar_type(),
              " attn_mask has no gradient");
  check_device(q, mask);
  auto f = [](const at::Tensor& t) { return t.to(at::kFloat); };
  at::Tensor kk = k, vv = v;
  const int64_t hq = q.size(-3), hk = k.size(-3);
  if (hq != hk) {  // grouped-query attention: each key/value head serves hq / hk query heads
    kk = k.repeat_interleave(hq / hk, -3);
    vv = v.repeat_interleave(hq / hk, -3);
  }
  const auto g = f(grad_out);
  auto s = at::matmul(f(q), f(kk).transpose(-2, -1)).mul_(scale_of(q, scale)).add_(f(mask));
  auto p = s.sub_(lse.reshape(q.sizes().slice(0, q.dim() - 1)).unsqueeze(-1)).exp_();
  auto dp = at::matmul(g, f(vv).transpose(-2, -1)).sub_((g * f(out)).sum(-1, true));
  return p.mul_(dp).sum_to_size(mask.sizes()).to(mask.scalar_type());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> sdpa_backward(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& bias,
    std::array<bool, 4> grad_input_mask, const at::Tensor& out, const at::Tensor& lse, const at::Tensor& cum_seq_q,
    const at::Tensor& cum_seq_k, c10::SymInt max_q, c10::SymInt max_k, double dropout_p, bool is_causal,
    const at::Tensor& philox_seed, const at::Tensor& philox_offset, std::optional<double> scale) {
  (void)cum_seq_q, (void)cum_seq_k, (void)max_q, (void)max_k, (void)philox_seed, (void)philox_offset;
  TORCH_CHECK_NOT_IMPLEMENTED(dropout_p == 0.0, "vtpu: the fused attention kernel has no dropout");
  check_device(q, grad_out);
  c10::DeviceGuard guard(q.device());
  at::Tensor dmask = grad_input_mask[3] && bias.defined() ? mask_grad(grad_out, q, k, v, bias, out, lse, scale) : at::Tensor();
  at::Tensor dq = grad_input_mask[0] ? at::empty_like(q) : at::Tensor();
  at::Tensor dk = grad_input_mask[1] ? at::empty_like(k) : at::Tensor();
  at::Tensor dv = grad_input_mask[2] ? at::empty_like(v) : at::Tensor();
  if (!dq.defined() && !dk.defined() && !dv.defined()) return {dq, dk, dv, dmask};
  vt_tensor tg = desc(grad_out, "grad_out"), tq = desc(q, "query"), tk = desc(k, "key"), tv = desc(v, "value"),
            to = desc(out, "out"), tl = desc(lse, "logsumexp"), tb{}, tdq{}, tdk{}, tdv{};
  const bool has_bias = bias.defined();
  if (has_bias) tb = desc(bias, "attn_mask");
  if (dq.defined()) tdq = desc(dq, "grad_query");
  if (dk.defined()) tdk = desc(dk, "grad_key");
  if (dv.defined()) tdv = desc(dv, "grad_value");
  check(vt_op_sdpa_backward(device_index(q), "aten::_scaled_dot_product_fused_attention_overrideable_backward",
                            dq.defined() ? &tdq : nullptr, dk.defined() ? &tdk : nullptr,
                            dv.defined() ? &tdv : nullptr, &tg, &tq, &tk, &tv, has_bias ? &tb : nullptr, &to, &tl,
                            scale_of(q, scale), is_causal, matmul_precision()));
  return {dq, dk, dv, dmask};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  VT_IMPL(m, "_fused_sdp_choice", fused_sdp_choice);
  VT_IMPL(m, "_scaled_dot_product_fused_attention_overrideable", sdpa_forward);
  VT_IMPL(m, "_scaled_dot_product_fused_attention_overrideable_backward", sdpa_backward);
}

}  // namespace vtpu

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &vtpu::fused_sdp_choice);
}
