// softmax_ops.cpp — adapters from ATen's softmax family and losses to the
// runtime's kernels: PyTorch's shape checks and messages, output shapes and
// dtypes; one queued C call per op (math and loops live in runtime/).
#include <ATen/ExpandUtils.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "common.h"
#include "device_check.h"

namespace vtpu {
namespace {

void check_float(const at::Tensor& t, const char* kernel) {
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(t.scalar_type()) && t.scalar_type() != at::kFloat8_e5m2 &&
                                  t.scalar_type() != at::kFloat8_e4m3fn,
                              "\"", kernel, "\" not implemented for '", c10::toString(t.scalar_type()), "'");
}

// ------------------------------------------------------------------ softmax

at::Tensor& softmax_out(const at::Tensor& self, int64_t dim, bool half_to_float, at::Tensor& out, bool log) {
  const char* name = log ? "aten::_log_softmax" : "aten::_softmax";
  check_float(self, log ? "log_softmax_lastdim_kernel_impl" : "softmax_lastdim_kernel_impl");
  if (half_to_float) {
    TORCH_CHECK(self.scalar_type() == at::kHalf || self.scalar_type() == at::kBFloat16,
                "conversion is supported for Half type only");
  }
  check_out_dtype(out, half_to_float ? at::kFloat : self.scalar_type());
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  at::native::resize_output(out, self.sizes());
  if (out.numel() == 0) return out;
  const vt_tensor to = view_of(out), ti = view_of(self);
  check(vt_op_softmax(device_index(self), name, &to, &ti, static_cast<int>(d), log ? 1 : 0));
  return out;
}

template <bool Log>
at::Tensor softmax(const at::Tensor& self, int64_t dim, bool half_to_float) {
  at::Tensor out = at::empty(self.sizes(), self.options().dtype(half_to_float ? at::kFloat : self.scalar_type()));
  return softmax_out(self, dim, half_to_float, out, Log);
}

template <bool Log>
at::Tensor& softmax_out_t(const at::Tensor& self, int64_t dim, bool half_to_float, at::Tensor& out) {
  return softmax_out(self, dim, half_to_float, out, Log);
}

at::Tensor& softmax_backward_out(const at::Tensor& grad, const at::Tensor& output, int64_t dim,
                                 at::ScalarType input_dtype, at::Tensor& grad_input, bool log) {
  const char* name = log ? "aten::_log_softmax_backward_data" : "aten::_softmax_backward_data";
  check_float(grad, log ? "log_softmax_backward_lastdim_kernel_impl" : "softmax_backward_lastdim_kernel_impl");
  check_float(output, log ? "log_softmax_backward_lastdim_kernel_impl" : "softmax_backward_lastdim_kernel_impl");
  TORCH_CHECK(grad.sizes() == output.sizes(), "grad_output and output must have the same shape, got ", grad.sizes(),
              " and ", output.sizes());
  const int64_t d = at::maybe_wrap_dim(dim, grad.dim());
  at::native::resize_output(grad_input, grad.sizes());
  if (grad_input.numel() == 0) return grad_input;
  const vt_tensor tgi = view_of(grad_input), tg = view_of(grad), ty = view_of(output);
  check(vt_op_softmax_backward(device_index(grad), name, &tgi, &tg, &ty, static_cast<int>(d), log ? 1 : 0));
  return grad_input;
}

// PyTorch's meta function: a float grad of a half input gives a half grad_input.
at::ScalarType softmax_grad_dtype(const at::Tensor& grad, at::ScalarType input_dtype) {
  return grad.scalar_type() == at::kFloat && input_dtype == at::kHalf ? at::kHalf : grad.scalar_type();
}

template <bool Log>
at::Tensor softmax_backward(const at::Tensor& grad, const at::Tensor& output, int64_t dim, at::ScalarType input_dtype) {
  at::Tensor gi = at::empty(grad.sizes(), grad.options().dtype(softmax_grad_dtype(grad, input_dtype)));
  return softmax_backward_out(grad, output, dim, input_dtype, gi, Log);
}

template <bool Log>
at::Tensor& softmax_backward_out_t(const at::Tensor& grad, const at::Tensor& output, int64_t dim,
                                   at::ScalarType input_dtype, at::Tensor& grad_input) {
  return softmax_backward_out(grad, output, dim, input_dtype, grad_input, Log);
}

// ------------------------------------------------------------------ nll_loss, nll_loss2d

void check_nll_target_dtype(const at::Tensor& target) {
  TORCH_CHECK(target.scalar_type() == at::kLong || target.scalar_type() == at::kByte,
              "expected target dtype to be Long or Byte, but got ", target.scalar_type());
}

void check_nll_shapes(const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight,
                      bool spatial) {
  if (spatial) {
    TORCH_CHECK(target.dim() == 3,
                "only batches of spatial targets supported (3D tensors) but got targets of dimension: ", target.dim());
    TORCH_CHECK(self.dim() == 4,
                "only batches of spatial inputs supported (4D tensors), but got input of dimension: ", self.dim());
    TORCH_CHECK(!weight || !weight->defined() || weight->numel() == self.size(1),
                "weight tensor should be defined either for all or no classes");
    TORCH_CHECK(self.size(0) == target.size(0) && self.size(2) == target.size(1) && self.size(3) == target.size(2),
                "size mismatch (got input: ", self.sizes(), " , target: ", target.sizes());
  } else {
    TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "input tensor should be 1D or 2D");
    TORCH_CHECK(target.dim() <= 1, "0D or 1D target tensor expected, multi-target not supported");
    const bool no_batch_dim = self.dim() == 1 && target.dim() == 0;
    TORCH_CHECK(no_batch_dim || (self.size(0) == target.size(0)), "size mismatch (got input: ", self.sizes(),
                ", target: ", target.sizes(), ")");
    const int64_t n_classes = self.size(-1);
    TORCH_CHECK(!weight || !weight->defined() || (weight->dim() == 1 && weight->numel() == n_classes),
                "weight tensor should be defined either for all ", n_classes,
                " classes or no classes but got weight tensor of shape: ", weight->sizes());
  }
  check_nll_target_dtype(target);
  check_float(self, "nll_loss_out_frame");
}

std::tuple<at::Tensor&, at::Tensor&> nll_forward_out(const at::Tensor& self, const at::Tensor& target,
                                                     const std::optional<at::Tensor>& weight, int64_t reduction,
                                                     int64_t ignore_index, at::Tensor& output,
                                                     at::Tensor& total_weight, bool spatial) {
  const char* name = spatial ? "aten::nll_loss2d_forward" : "aten::nll_loss_forward";
  check_nll_shapes(self, target, weight, spatial);
  const bool per_sample = reduction == at::Reduction::None && self.dim() >= 2;
  at::native::resize_output(output, per_sample ? target.sizes() : at::IntArrayRef{});
  at::native::resize_output(total_weight, {});
  const vt_tensor to = view_of(output), ttw = view_of(total_weight), ti = view_of(self),
                  tt = view_of(target);
  vt_tensor tw{};
  const bool has_w = weight && weight->defined();
  if (has_w) tw = view_of(*weight);
  check(vt_op_nll_loss(device_index(self), name, &to, &ttw, &ti, &tt, has_w ? &tw : nullptr,
                       static_cast<vt_loss_reduction>(reduction), ignore_index));
  return {output, total_weight};
}

template <bool Spatial>
std::tuple<at::Tensor, at::Tensor> nll_forward(const at::Tensor& self, const at::Tensor& target,
                                               const std::optional<at::Tensor>& weight, int64_t reduction,
                                               int64_t ignore_index) {
  at::Tensor out = at::empty({0}, self.options()), tw = at::empty({}, self.options());
  nll_forward_out(self, target, weight, reduction, ignore_index, out, tw, Spatial);
  return {out, tw};
}

template <bool Spatial>
std::tuple<at::Tensor&, at::Tensor&> nll_forward_out_t(const at::Tensor& self, const at::Tensor& target,
                                                       const std::optional<at::Tensor>& weight, int64_t reduction,
                                                       int64_t ignore_index, at::Tensor& output,
                                                       at::Tensor& total_weight) {
  return nll_forward_out(self, target, weight, reduction, ignore_index, output, total_weight, Spatial);
}

at::Tensor& nll_backward_out(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                             const std::optional<at::Tensor>& weight, int64_t reduction, int64_t ignore_index,
                             const at::Tensor& total_weight, at::Tensor& grad_input, bool spatial) {
  const char* name = spatial ? "aten::nll_loss2d_backward" : "aten::nll_loss_backward";
  check_nll_shapes(self, target, weight, spatial);
  const bool per_sample = reduction == at::Reduction::None && self.dim() >= 2;
  if (per_sample) {
    TORCH_CHECK(grad_output.sizes() == target.sizes(), "Expected grad_output of size ", target.sizes(),
                " but got ", grad_output.sizes());
  } else {
    TORCH_CHECK(grad_output.dim() <= 1 && grad_output.numel() == 1,
                "Expected a single element grad_output tensor, but got: ", grad_output.sizes());
  }
  TORCH_CHECK(total_weight.numel() == 1, "expected total_weight to be a single element tensor, got: ",
              total_weight.sizes(), " (", total_weight.numel(), " elements)");
  at::native::resize_output(grad_input, self.sizes());
  if (grad_input.numel() == 0) return grad_input;
  const vt_tensor tgi = view_of(grad_input), ti = view_of(self), tt = view_of(target),
                  ttw = view_of(total_weight.reshape({}));
  vt_tensor tw{};
  const bool has_w = weight && weight->defined();
  if (has_w) tw = view_of(*weight);
  const at::Tensor go = per_sample ? grad_output : grad_output.reshape({});
  const vt_tensor tgo0 = view_of(go);
  check(vt_op_nll_loss_backward(device_index(self), name, &tgi, &tgo0, &ti, &tt, has_w ? &tw : nullptr,
                                static_cast<vt_loss_reduction>(reduction), ignore_index, &ttw));
  return grad_input;
}

template <bool Spatial>
at::Tensor nll_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                        const std::optional<at::Tensor>& weight, int64_t reduction, int64_t ignore_index,
                        const at::Tensor& total_weight) {
  at::Tensor gi = at::empty(self.sizes(), self.options());
  return nll_backward_out(grad_output, self, target, weight, reduction, ignore_index, total_weight, gi, Spatial);
}

template <bool Spatial>
at::Tensor& nll_backward_out_t(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                               const std::optional<at::Tensor>& weight, int64_t reduction, int64_t ignore_index,
                               const at::Tensor& total_weight, at::Tensor& grad_input) {
  return nll_backward_out(grad_output, self, target, weight, reduction, ignore_index, total_weight, grad_input,
                          Spatial);
}

// ------------------------------------------------------------------ pointwise losses

const char* loss_name(vt_loss_kind k, bool bwd) {
  switch (k) {
    case VT_LOSS_MSE: return bwd ? "aten::mse_loss_backward" : "aten::mse_loss";
    case VT_LOSS_SMOOTH_L1: return bwd ? "aten::smooth_l1_loss_backward" : "aten::smooth_l1_loss";
    case VT_LOSS_HUBER: return bwd ? "aten::huber_loss_backward" : "aten::huber_loss";
    case VT_LOSS_BCE: return bwd ? "aten::binary_cross_entropy_backward" : "aten::binary_cross_entropy";
    case VT_LOSS_BCE_LOGITS: return "aten::binary_cross_entropy_with_logits";
    default: return "aten::l1_loss";
  }
}

const vt_tensor* opt_desc(const std::optional<at::Tensor>& t, vt_tensor* d, const char* name) {
  if (!t || !t->defined()) return nullptr;
  *d = view_of(*t);
  return d;
}

// out = loss(self, target) with input and target broadcast to one shape.
at::Tensor& pointwise_loss_out(vt_loss_kind kind, const at::Tensor& self_, const at::Tensor& target_,
                               const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& pos_weight,
                               int64_t reduction, double param, at::Tensor& out) {
  const char* name = loss_name(kind, false);
  check_float(self_, name);
  check_float(target_, name);
  at::Tensor self = self_, target = target_;
  if (self.sizes() != target.sizes()) {
    const auto shape = at::infer_size(self.sizes(), target.sizes());
    self = self.expand(shape);
    target = target.expand(shape);
  }
  at::native::resize_output(out, reduction == at::Reduction::None ? self.sizes() : at::IntArrayRef{});
  if (reduction == at::Reduction::None && out.numel() == 0) return out;
  vt_tensor tw{}, tpw{};
  const vt_tensor to = view_of(out), ti = view_of(self), tt = view_of(target);
  check(vt_op_pointwise_loss(device_index(self), name, kind, &to, &ti, &tt, opt_desc(weight, &tw, name),
                             opt_desc(pos_weight, &tpw, name), static_cast<vt_loss_reduction>(reduction), param));
  return out;
}

at::Tensor pointwise_loss(vt_loss_kind kind, const at::Tensor& self, const at::Tensor& target,
                          const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& pos_weight,
                          int64_t reduction, double param) {
  at::Tensor out = at::empty({0}, self.options());
  return pointwise_loss_out(kind, self, target, weight, pos_weight, reduction, param, out);
}

at::Tensor& pointwise_loss_backward_out(vt_loss_kind kind, const at::Tensor& grad_output, const at::Tensor& self,
                                        const at::Tensor& target, const std::optional<at::Tensor>& weight,
                                        int64_t reduction, double param, at::Tensor& grad_input) {
  const char* name = loss_name(kind, true);
  check_float(self, name);
  at::native::resize_output(grad_input, self.sizes());
  if (grad_input.numel() == 0) return grad_input;
  const at::Tensor go = reduction == at::Reduction::None ? grad_output : grad_output.reshape({});
  vt_tensor tw{};
  const vt_tensor tgi = view_of(grad_input), tgo = view_of(go), ti = view_of(self),
                  tt = view_of(target);
  check(vt_op_pointwise_loss_backward(device_index(self), name, kind, &tgi, &tgo, &ti, &tt,
                                      opt_desc(weight, &tw, name), nullptr,
                                      static_cast<vt_loss_reduction>(reduction), param));
  return grad_input;
}

at::Tensor pointwise_loss_backward(vt_loss_kind kind, const at::Tensor& grad_output, const at::Tensor& self,
                                   const at::Tensor& target, const std::optional<at::Tensor>& weight,
                                   int64_t reduction, double param) {
  at::Tensor gi = at::empty(self.sizes(), self.options());
  return pointwise_loss_backward_out(kind, grad_output, self, target, weight, reduction, param, gi);
}

void check_bce_weight(const at::Tensor& self, const std::optional<at::Tensor>& weight) {
  if (weight && weight->defined()) {
    TORCH_CHECK(at::is_expandable_to(weight->sizes(), self.sizes()), "output with shape ", self.sizes(),
                " doesn't match the broadcast shape ", at::infer_size(weight->sizes(), self.sizes()));
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  VT_IMPL(m, "_softmax", softmax<false>);
  VT_IMPL(m, "_softmax.out", softmax_out_t<false>);
  VT_IMPL(m, "_log_softmax", softmax<true>);
  VT_IMPL(m, "_log_softmax.out", softmax_out_t<true>);
  VT_IMPL(m, "_softmax_backward_data", softmax_backward<false>);
  VT_IMPL(m, "_softmax_backward_data.out", softmax_backward_out_t<false>);
  VT_IMPL(m, "_log_softmax_backward_data", softmax_backward<true>);
  VT_IMPL(m, "_log_softmax_backward_data.out", softmax_backward_out_t<true>);

  VT_IMPL(m, "nll_loss_forward", nll_forward<false>);
  VT_IMPL(m, "nll_loss_forward.output", nll_forward_out_t<false>);
  VT_IMPL(m, "nll_loss2d_forward", nll_forward<true>);
  VT_IMPL(m, "nll_loss2d_forward.output", nll_forward_out_t<true>);
  VT_IMPL(m, "nll_loss_backward", nll_backward<false>);
  VT_IMPL(m, "nll_loss_backward.grad_input", nll_backward_out_t<false>);
  VT_IMPL(m, "nll_loss2d_backward", nll_backward<true>);
  VT_IMPL(m, "nll_loss2d_backward.grad_input", nll_backward_out_t<true>);

  VT_IMPL(m, "mse_loss", [](const at::Tensor& s, const at::Tensor& t, int64_t r) {
    return pointwise_loss(VT_LOSS_MSE, s, t, {}, {}, r, 0);
  });
  VT_IMPL(m, "mse_loss.out", [](const at::Tensor& s, const at::Tensor& t, int64_t r, at::Tensor& out) -> at::Tensor& {
    return pointwise_loss_out(VT_LOSS_MSE, s, t, {}, {}, r, 0, out);
  });
  VT_IMPL(m, "mse_loss_backward", [](const at::Tensor& g, const at::Tensor& s, const at::Tensor& t, int64_t r) {
    return pointwise_loss_backward(VT_LOSS_MSE, g, s, t, {}, r, 0);
  });
  VT_IMPL(m, "mse_loss_backward.grad_input", [](const at::Tensor& g, const at::Tensor& s, const at::Tensor& t, int64_t r,
                                            at::Tensor& gi) -> at::Tensor& {
    return pointwise_loss_backward_out(VT_LOSS_MSE, g, s, t, {}, r, 0, gi);
  });
  VT_IMPL(m, "smooth_l1_loss", [](const at::Tensor& s, const at::Tensor& t, int64_t r, double beta) {
    TORCH_CHECK(beta >= 0, "smooth_l1_loss does not support negative values for beta.");
    return pointwise_loss(VT_LOSS_SMOOTH_L1, s, t, {}, {}, r, beta);
  });
  VT_IMPL(m, "smooth_l1_loss.out", [](const at::Tensor& s, const at::Tensor& t, int64_t r, double beta,
                                  at::Tensor& out) -> at::Tensor& {
    TORCH_CHECK(beta >= 0, "smooth_l1_loss does not support negative values for beta.");
    return pointwise_loss_out(VT_LOSS_SMOOTH_L1, s, t, {}, {}, r, beta, out);
  });
  VT_IMPL(m, "smooth_l1_loss_backward", [](const at::Tensor& g, const at::Tensor& s, const at::Tensor& t, int64_t r,
                                       double beta) {
    return pointwise_loss_backward(VT_LOSS_SMOOTH_L1, g, s, t, {}, r, beta);
  });
  VT_IMPL(m, "smooth_l1_loss_backward.grad_input", [](const at::Tensor& g, const at::Tensor& s, const at::Tensor& t,
                                                  int64_t r, double beta, at::Tensor& gi) -> at::Tensor& {
    return pointwise_loss_backward_out(VT_LOSS_SMOOTH_L1, g, s, t, {}, r, beta, gi);
  });
  VT_IMPL(m, "huber_loss", [](const at::Tensor& s, const at::Tensor& t, int64_t r, double delta) {
    TORCH_CHECK(delta > 0, "huber_loss does not support non-positive values for delta.");
    return pointwise_loss(VT_LOSS_HUBER, s, t, {}, {}, r, delta);
  });
  VT_IMPL(m, "huber_loss.out", [](const at::Tensor& s, const at::Tensor& t, int64_t r, double delta,
                              at::Tensor& out) -> at::Tensor& {
    TORCH_CHECK(delta > 0, "huber_loss does not support non-positive values for delta.");
    return pointwise_loss_out(VT_LOSS_HUBER, s, t, {}, {}, r, delta, out);
  });
  VT_IMPL(m, "huber_loss_backward", [](const at::Tensor& g, const at::Tensor& s, const at::Tensor& t, int64_t r,
                                   double delta) {
    return pointwise_loss_backward(VT_LOSS_HUBER, g, s, t, {}, r, delta);
  });
  VT_IMPL(m, "huber_loss_backward.out", [](const at::Tensor& g, const at::Tensor& s, const at::Tensor& t, int64_t r,
                                       double delta, at::Tensor& gi) -> at::Tensor& {
    return pointwise_loss_backward_out(VT_LOSS_HUBER, g, s, t, {}, r, delta, gi);
  });
  VT_IMPL(m, "binary_cross_entropy", [](const at::Tensor& s, const at::Tensor& t, const std::optional<at::Tensor>& w,
                                    int64_t r) {
    check_bce_weight(s, w);
    return pointwise_loss(VT_LOSS_BCE, s, t, w, {}, r, 0);
  });
  VT_IMPL(m, "binary_cross_entropy.out", [](const at::Tensor& s, const at::Tensor& t, const std::optional<at::Tensor>& w,
                                        int64_t r, at::Tensor& out) -> at::Tensor& {
    check_bce_weight(s, w);
    return pointwise_loss_out(VT_LOSS_BCE, s, t, w, {}, r, 0, out);
  });
  VT_IMPL(m, "binary_cross_entropy_backward", [](const at::Tensor& g, const at::Tensor& s, const at::Tensor& t,
                                             const std::optional<at::Tensor>& w, int64_t r) {
    return pointwise_loss_backward(VT_LOSS_BCE, g, s, t, w, r, 0);
  });
  VT_IMPL(m, "binary_cross_entropy_backward.grad_input",
         [](const at::Tensor& g, const at::Tensor& s, const at::Tensor& t, const std::optional<at::Tensor>& w,
            int64_t r, at::Tensor& gi) -> at::Tensor& {
           return pointwise_loss_backward_out(VT_LOSS_BCE, g, s, t, w, r, 0, gi);
         });
  VT_IMPL(m, "binary_cross_entropy_with_logits", [](const at::Tensor& s, const at::Tensor& t,
                                                const std::optional<at::Tensor>& w,
                                                const std::optional<at::Tensor>& pw, int64_t r) {
    return pointwise_loss(VT_LOSS_BCE_LOGITS, s, t, w, pw, r, 0);
  });
}

}  // namespace vtpu
