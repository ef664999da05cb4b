// norm_ops.cpp — adapters from ATen's normalisation ops (layer norm, RMS
// norm, group norm, batch norm, forward and backward) to the runtime's
// kernels: PyTorch's checks and messages, result shapes and dtypes (the
// "mixed dtype" rules of the CPU kernels), one queued C call per op.
#include <torch/library.h>
#include <ATen/ops/rms_norm_ops.h>

#include <limits>
#include <sstream>

#include "common.h"
#include "device_check.h"

namespace vtpu {
namespace {

using Opt = std::optional<at::Tensor>;
using T3 = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

bool is_float(const at::Tensor& t) {
  return t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf ||
         t.scalar_type() == at::kDouble;
}

// PyTorch CPU's mixed-dtype rule: parameters of another dtype than the
// input must all be float and the input bf16 / f16; statistics then are
// float. Returns the dtype of the statistics.
c10::ScalarType param_dtype(const at::Tensor& input, std::initializer_list<at::Tensor> params) {
  bool mixed = false;
  for (const auto& p : params)
    if (p.defined() && p.scalar_type() != input.scalar_type()) mixed = true;
  if (!mixed) return input.scalar_type();
  for (const auto& p : params)
    TORCH_CHECK(!p.defined() || p.scalar_type() == at::kFloat,
                "mixed dtype (CPU): expect parameter to have scalar type of Float");
  TORCH_CHECK(input.scalar_type() == at::kBFloat16 || input.scalar_type() == at::kHalf,
              "mixed dtype (CPU): all inputs must share same datatype.");
  return at::kFloat;
}

// ------------------------------------------------------------------ layer norm, RMS norm

// PyTorch's _check_layer_norm_inputs; returns the number of leading dims.
int64_t check_norm_inputs(const at::Tensor& input, c10::IntArrayRef shape, const at::Tensor& weight,
                          const at::Tensor& bias) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  TORCH_CHECK(nd >= 1, "Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one element, "
                       "but got normalized_shape = ", shape);
  TORCH_CHECK(!weight.defined() || weight.sizes().equals(shape), "Expected weight to be of same shape as "
              "normalized_shape, but got weight of shape ", weight.sizes(), " and normalized_shape = ", shape);
  TORCH_CHECK(!bias.defined() || bias.sizes().equals(shape), "Expected bias to be of same shape as normalized_shape, "
              "but got bias of shape ", bias.sizes(), " and normalized_shape = ", shape);
  const int64_t in_nd = input.dim();
  if (in_nd < nd || !input.sizes().slice(in_nd - nd).equals(shape)) {
    std::stringstream ss;
    ss << "Given normalized_shape=" << shape << ", expected input with shape [*";
    for (auto s : shape) ss << ", " << s;
    ss << "], but got input of size" << input.sizes();
    TORCH_CHECK(false, ss.str());
  }
  return in_nd - nd;
}

std::vector<int64_t> stat_shape(const at::Tensor& input, int64_t axis) {
  std::vector<int64_t> s(input.sizes().begin(), input.sizes().begin() + axis);
  s.resize(input.dim(), 1);
  return s;
}

T3 layer_norm(const at::Tensor& input, c10::IntArrayRef shape, const Opt& w_, const Opt& b_, double eps) {
  const at::Tensor w = value(w_), b = value(b_);
  const int64_t axis = check_norm_inputs(input, shape, w, b);
  VT_FALLBACK_UNLESS(is_float(input), "dtype ", input.scalar_type());
  const auto st = param_dtype(input, {w, b});
  at::Tensor out = at::empty(input.sizes(), input.options());
  at::Tensor mean = at::empty(stat_shape(input, axis), input.options().dtype(st));
  at::Tensor rstd = at::empty(stat_shape(input, axis), input.options().dtype(st));
  Desc o(out), m(mean), r(rstd), x(input), dw(w), db(b);
  check(vt_op_layer_norm(device_index(input), "aten::native_layer_norm", o.p, m.p, r.p, x.p, dw.p, db.p,
                         static_cast<int32_t>(shape.size()), eps));
  return {out, mean, rstd};
}

T3 layer_norm_backward(const at::Tensor& grad_out, const at::Tensor& input, c10::IntArrayRef shape,
                       const at::Tensor& mean, const at::Tensor& rstd, const Opt& w_, const Opt& b_,
                       std::array<bool, 3> mask) {
  const at::Tensor w = value(w_), b = value(b_);
  check_norm_inputs(input, shape, w, b);
  at::Tensor dx, dw, db;
  if (mask[0]) dx = at::empty(input.sizes(), input.options());
  if (mask[1] && w.defined()) dw = at::empty(w.sizes(), w.options());
  if (mask[2] && (b.defined() || w.defined()))
    db = at::empty(shape, (b.defined() ? b : w).options());
  else if (mask[2])
    db = at::empty(shape, input.options().dtype(mean.scalar_type()));
  Desc gi(dx), gw(dw), gb(db), go(grad_out), x(input), m(mean), r(rstd), dwt(w);
  check(vt_op_layer_norm_backward(device_index(input), "aten::native_layer_norm_backward", gi.p, gw.p, gb.p, go.p,
                                  x.p, m.p, r.p, dwt.p, static_cast<int32_t>(shape.size())));
  return {dx, dw, db};
}

std::tuple<at::Tensor, at::Tensor> rms_norm(const at::Tensor& input, c10::IntArrayRef shape, const Opt& w_,
                                            std::optional<double> eps) {
  const at::Tensor w = value(w_);
  const int64_t axis = check_norm_inputs(input, shape, w, at::Tensor());
  VT_FALLBACK_UNLESS(is_float(input) && (!w.defined() || is_float(w)), "dtype ", input.scalar_type());
  const bool dbl = input.scalar_type() == at::kDouble;
  const double e = eps ? *eps : (dbl ? std::numeric_limits<double>::epsilon() : std::numeric_limits<float>::epsilon());
  at::Tensor out = at::empty(input.sizes(), input.options());
  at::Tensor rstd = at::empty(stat_shape(input, axis), input.options().dtype(dbl ? at::kDouble : at::kFloat));
  Desc o(out), r(rstd), x(input), dw(w);
  check(vt_op_rms_norm(device_index(input), "aten::_fused_rms_norm", o.p, r.p, x.p, dw.p,
                       static_cast<int32_t>(shape.size()), e));
  return {out, rstd};
}

std::tuple<at::Tensor, at::Tensor> rms_norm_backward(const at::Tensor& grad_out, const at::Tensor& input,
                                                     c10::IntArrayRef shape, const at::Tensor& rstd, const Opt& w_,
                                                     std::array<bool, 2> mask) {
  const at::Tensor w = value(w_);
  check_norm_inputs(input, shape, w, at::Tensor());
  at::Tensor dx, dw;
  if (mask[0]) dx = at::empty(input.sizes(), input.options());
  if (mask[1] && w.defined()) dw = at::empty(w.sizes(), w.options());
  Desc gi(dx), gw(dw), go(grad_out), x(input), r(rstd), wt(w);
  check(vt_op_rms_norm_backward(device_index(input), "aten::_fused_rms_norm_backward", gi.p, gw.p, go.p, x.p, r.p,
                                wt.p, static_cast<int32_t>(shape.size())));
  return {dx, dw};
}

// F.rms_norm reaches aten::rms_norm, whose composite only calls the fused
// op on CUDA / MPS: on tpu route it to _fused_rms_norm (which autograd
// knows) before autograd runs. Complex inputs, which the fused op's
// derivative does not take, use PyTorch's composite as on CPU.
at::Tensor rms_norm_entry(const at::Tensor& input, c10::SymIntArrayRef shape, const Opt& w, std::optional<double> eps) {
  if (input.is_complex() || (w && w->defined() && w->is_complex()))  // PyTorch's composite, below autograd
    return at::_ops::rms_norm::redispatch(c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), input, shape, w, eps);
  return std::get<0>(at::_fused_rms_norm(input, C10_AS_INTARRAYREF_SLOW(shape), w, eps));
}

// ------------------------------------------------------------------ group norm

// input seen as [N, C, *] (reshaped when its own dims differ).
at::Tensor as_nc(const at::Tensor& input, int64_t N, int64_t C, int64_t HxW) {
  if (input.dim() >= 2 && input.size(0) == N && input.size(1) == C) return input;
  return input.reshape({N, C, HxW});
}

T3 group_norm(const at::Tensor& input, const Opt& w_, const Opt& b_, int64_t N, int64_t C, int64_t HxW, int64_t group,
              double eps) {
  const at::Tensor w = value(w_), b = value(b_);
  TORCH_CHECK(group > 0 && C % group == 0, "Expected number of channels in input to be divisible by num_groups, but "
              "got input of shape ", input.sizes(), " and num_groups=", group);
  TORCH_CHECK(input.numel() == N * C * HxW, "Expected input of ", N * C * HxW, " elements, got ", input.sizes());
  TORCH_CHECK(!w.defined() || w.numel() == C, "Expected weight to be a vector of size equal to the number of "
              "channels in input, but got weight of shape ", w.sizes(), " and input of shape ", input.sizes());
  TORCH_CHECK(!b.defined() || b.numel() == C, "Expected bias to be a vector of size equal to the number of "
              "channels in input, but got bias of shape ", b.sizes(), " and input of shape ", input.sizes());
  VT_FALLBACK_UNLESS(is_float(input), "dtype ", input.scalar_type());
  const auto st = param_dtype(input, {w, b});
  const at::Tensor x = as_nc(input, N, C, HxW);
  at::Tensor out = at::empty(x.sizes(), input.options());
  at::Tensor mean = at::empty({N, group}, input.options().dtype(st));
  at::Tensor rstd = at::empty({N, group}, input.options().dtype(st));
  Desc o(out), m(mean), r(rstd), xd(x), wd(w), bd(b);
  check(vt_op_group_norm(device_index(input), "aten::native_group_norm", o.p, m.p, r.p, xd.p, wd.p, bd.p, group, eps));
  return {out.view(input.sizes()), mean, rstd};
}

T3 group_norm_backward(const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean,
                       const at::Tensor& rstd, const Opt& w_, int64_t N, int64_t C, int64_t HxW, int64_t group,
                       std::array<bool, 3> mask) {
  const at::Tensor w = value(w_);
  TORCH_CHECK(group > 0 && C % group == 0, "Expected number of channels in input to be divisible by num_groups, but "
              "got input of shape ", input.sizes(), " and num_groups=", group);
  TORCH_CHECK(input.numel() == N * C * HxW && grad_out.numel() == input.numel(), "Expected input and grad_output of ",
              N * C * HxW, " elements");
  const at::Tensor x = as_nc(input, N, C, HxW), dy = as_nc(grad_out, N, C, HxW);
  at::Tensor dx, dw, db;
  const auto pt = w.defined() ? w.options() : input.options().dtype(mean.scalar_type());
  if (mask[0]) dx = at::empty(x.sizes(), input.options());
  if (mask[1] && w.defined()) dw = at::empty({C}, pt);
  if (mask[2]) db = at::empty({C}, pt);
  Desc gi(dx), gw(dw), gb(db), go(dy), xd(x), m(mean), r(rstd), wd(w);
  check(vt_op_group_norm_backward(device_index(input), "aten::native_group_norm_backward", gi.p, gw.p, gb.p, go.p,
                                  xd.p, m.p, r.p, wd.p, group));
  return {dx.defined() ? dx.view(input.sizes()) : dx, dw, db};
}

// ------------------------------------------------------------------ batch norm

T3 batch_norm(const at::Tensor& input, const Opt& w_, const Opt& b_, const Opt& rm_, const Opt& rv_, bool training,
              double momentum, double eps) {
  const at::Tensor w = value(w_), b = value(b_), rm = value(rm_), rv = value(rv_);
  TORCH_CHECK(input.dim() >= 2, "batch_norm: expected input with at least 2 dims, got ", input.dim());
  TORCH_CHECK(training || rm.defined(), "running_mean must be defined in evaluation mode");
  TORCH_CHECK(training || rv.defined(), "running_var must be defined in evaluation mode");
  VT_FALLBACK_UNLESS(is_float(input), "dtype ", input.scalar_type());
  const auto st = param_dtype(input, {w, b, rm, rv});
  const int64_t C = input.size(1);
  at::Tensor out = at::empty(input.sizes(), input.options());
  at::Tensor sm = at::empty({training ? C : 0}, input.options().dtype(st));
  at::Tensor si = at::empty({training ? C : 0}, input.options().dtype(st));
  Desc o(out), smd(training ? sm : at::Tensor()), sid(training ? si : at::Tensor()), x(input), wd(w), bd(b),
      rmd(rm), rvd(rv);
  check(vt_op_batch_norm(device_index(input), "aten::native_batch_norm", o.p, smd.p, sid.p, x.p, wd.p, bd.p, rmd.p,
                         rvd.p, training ? 1 : 0, momentum, eps));
  return {out, sm, si};
}

T3 batch_norm_backward(const at::Tensor& grad_out, const at::Tensor& input, const Opt& w_, const Opt& rm_,
                       const Opt& rv_, const Opt& sm_, const Opt& si_, bool train, double eps,
                       std::array<bool, 3> mask) {
  const at::Tensor w = value(w_), rm = value(rm_), rv = value(rv_), sm = value(sm_), si = value(si_);
  TORCH_CHECK(input.dim() >= 2, "batch_norm_backward: expected input with at least 2 dims, got ", input.dim());
  if (train) {
    TORCH_CHECK(sm.defined() && si.defined(), "batch_norm_backward: save_mean and save_invstd are required");
  } else {
    TORCH_CHECK(rm.defined() && rv.defined(), "batch_norm_backward: running_mean and running_var are required");
  }
  const int64_t C = input.size(1);
  const at::Tensor ref = w.defined() ? w : train ? sm : rm;
  at::Tensor dx, dw, db;
  if (mask[0]) dx = at::empty(input.sizes(), input.options());
  if (mask[1]) dw = at::empty({C}, ref.options());
  if (mask[2]) db = at::empty({C}, ref.options());
  Desc gi(dx), gw(dw), gb(db), go(grad_out), x(input), wd(w), rmd(train ? at::Tensor() : rm),
      rvd(train ? at::Tensor() : rv), smd(train ? sm : at::Tensor()), sid(train ? si : at::Tensor());
  check(vt_op_batch_norm_backward(device_index(input), "aten::native_batch_norm_backward", gi.p, gw.p, gb.p, go.p,
                                  x.p, wd.p, rmd.p, rvd.p, smd.p, sid.p, train ? 1 : 0, eps));
  return {dx, dw, db};
}

T3 bn_legit(const at::Tensor& input, const Opt& w, const Opt& b, at::Tensor& rm, at::Tensor& rv, bool training,
            double momentum, double eps) {
  return batch_norm(input, w, b, rm, rv, training, momentum, eps);
}

T3 bn_legit_no_stats(const at::Tensor& input, const Opt& w, const Opt& b, bool training, double momentum, double eps) {
  return batch_norm(input, w, b, {}, {}, training, momentum, eps);
}

T3 bn_legit_no_training(const at::Tensor& input, const Opt& w, const Opt& b, const at::Tensor& rm,
                        const at::Tensor& rv, double momentum, double eps) {
  return batch_norm(input, w, b, rm, rv, false, momentum, eps);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  VT_IMPL(m, "native_layer_norm", layer_norm);
  VT_IMPL(m, "native_layer_norm_backward", layer_norm_backward);
  VT_IMPL(m, "_fused_rms_norm", rms_norm);
  VT_IMPL(m, "_fused_rms_norm_backward", rms_norm_backward);
  VT_IMPL(m, "native_group_norm", group_norm);
  VT_IMPL(m, "native_group_norm_backward", group_norm_backward);
  VT_IMPL(m, "native_batch_norm", batch_norm);
  VT_IMPL(m, "native_batch_norm_backward", batch_norm_backward);
  VT_IMPL(m, "_native_batch_norm_legit", bn_legit);
  VT_IMPL(m, "_native_batch_norm_legit.no_stats", bn_legit_no_stats);
  VT_IMPL(m, "_native_batch_norm_legit_no_training", bn_legit_no_training);
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  VT_IMPL(m, "rms_norm", rms_norm_entry);
}

}  // namespace vtpu
