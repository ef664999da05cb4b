// conv_ops.cpp — convolution on "tpu": PyTorch routes convolutions of
// out-of-tree devices to convolution_overrideable and its backward; both map
// onto the runtime's MXU convolution kernels (transposed convolution is the
// input gradient of a plain one, and the other way round).
#include <torch/library.h>

#include "common.h"
#include "device_check.h"

namespace vtpu {
namespace {

vt_conv_params make_params(c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
                           int64_t groups, int64_t spatial) {
  TORCH_CHECK(spatial >= 1 && spatial <= 3, "vtpu: convolution supports 1 to 3 spatial dims, got ", spatial);
  vt_conv_params p{};
  p.spatial = static_cast<int32_t>(spatial);
  for (int64_t i = 0; i < spatial; i++) {
    p.stride[i] = stride.size() == 1 ? stride[0] : stride[i];
    p.padding[i] = padding.size() == 1 ? padding[0] : padding[i];
    p.dilation[i] = dilation.size() == 1 ? dilation[0] : dilation[i];
  }
  p.groups = groups;
  return p;
}

// Output size of the plain convolution over `in`, or the input size a
// transposed convolution produces.
std::vector<int64_t> conv_shape(const at::Tensor& input, const at::Tensor& weight, const vt_conv_params& p,
                                bool transposed, c10::IntArrayRef output_padding) {
  std::vector<int64_t> shape{input.size(0), transposed ? weight.size(1) * p.groups : weight.size(0)};
  for (int i = 0; i < p.spatial; i++) {
    const int64_t in = input.size(2 + i), k = weight.size(2 + i);
    const int64_t op = output_padding.empty() ? 0 : output_padding.size() == 1 ? output_padding[0] : output_padding[i];
    shape.push_back(transposed ? (in - 1) * p.stride[i] - 2 * p.padding[i] + p.dilation[i] * (k - 1) + op + 1
                               : (in + 2 * p.padding[i] - p.dilation[i] * (k - 1) - 1) / p.stride[i] + 1);
  }
  return shape;
}

// The plain convolution's output shape over an input of `in_shape` (with the
// weight's output channels): what a transposed convolution's own input must
// be seen as. With output_padding >= stride it is larger than that input by
// trailing positions that no output depends on.
std::vector<int64_t> plain_out_shape(c10::IntArrayRef in_shape, const at::Tensor& weight, const vt_conv_params& p) {
  std::vector<int64_t> shape{in_shape[0], weight.size(0)};
  for (int i = 0; i < p.spatial; i++)
    shape.push_back((in_shape[2 + i] + 2 * p.padding[i] - p.dilation[i] * (weight.size(2 + i) - 1) - 1) / p.stride[i] +
                    1);
  return shape;
}

// t zero-extended at the end of each dim to `shape` (t itself when it fits).
at::Tensor zero_extend(const at::Tensor& t, const std::vector<int64_t>& shape) {
  if (t.sizes() == c10::IntArrayRef(shape)) return t;
  at::Tensor z = at::zeros(shape, t.options());
  at::Tensor view = z;
  for (int64_t d = 0; d < t.dim(); d++) view = view.narrow(d, 0, t.size(d));
  view.copy_(t);
  return z;
}

// Channels-last (2-D or 3-D) when t is laid out so; else contiguous.
at::MemoryFormat format_of(const at::Tensor& t) {
  return t.dim() == 4 || t.dim() == 5 ? t.suggest_memory_format() : at::MemoryFormat::Contiguous;
}

// The output's layout, as CPU PyTorch picks it: channels-last when the input
// or the weight is.
at::MemoryFormat out_format(const at::Tensor& input, const at::Tensor& weight) {
  const auto fi = format_of(input), fw = format_of(weight);
  return fi != at::MemoryFormat::Contiguous ? fi : fw;
}

at::Tensor add_bias(at::Tensor out, const std::optional<at::Tensor>& bias) {
  if (!bias || !bias->defined()) return out;
  std::vector<int64_t> view(out.dim(), 1);
  view[1] = bias->size(0);
  return out.add_(bias->reshape(view));
}

at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                       c10::IntArrayRef output_padding, int64_t groups) {
  const auto p = make_params(stride, padding, dilation, groups, input.dim() - 2);
  VT_FALLBACK_UNLESS(c10::isFloatingType(input.scalar_type()), "dtype ", input.scalar_type());
  at::Tensor out = at::empty(conv_shape(input, weight, p, transposed, output_padding),
                             input.options().memory_format(out_format(input, weight)));
  if (out.numel() == 0) return out;
  const int dev = device_index(input);
  const vt_tensor ti = view_of(input), tw = view_of(weight), to = view_of(out);
  if (transposed) {
    const at::Tensor src = zero_extend(input, plain_out_shape(out.sizes(), weight, p));
    const vt_tensor ts = view_of(src);
    check(vt_op_conv_backward_input(dev, "aten::convolution", &to, &ts, &tw, &p, matmul_precision()));
    return add_bias(out, bias);
  }
  vt_tensor tb{};
  const bool has_bias = bias && bias->defined();
  if (has_bias) tb = view_of(*bias);
  check(vt_op_conv_forward(dev, "aten::convolution", &to, &ti, &tw, has_bias ? &tb : nullptr, &p,
                           matmul_precision()));
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& weight, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> mask) {
  const auto p = make_params(stride, padding, dilation, groups, input.dim() - 2);
  const int dev = device_index(input);
  const auto prec = matmul_precision();
  const char* name = "aten::convolution_backward";
  at::Tensor gi, gw, gb;
  const vt_tensor tg = view_of(grad_out);
  // A transposed convolution's input, seen at the plain convolution's output size.
  const std::vector<int64_t> full = transposed ? plain_out_shape(grad_out.sizes(), weight, p) : std::vector<int64_t>{};
  if (mask[0]) {
    gi = at::empty(input.sizes(), input.options().memory_format(format_of(input)));
    if (gi.numel() && transposed) {
      // the input gradient of a transposed convolution is the plain convolution of grad_out
      at::Tensor whole = at::empty(full, input.options());
      const vt_tensor tw = view_of(weight), twh = view_of(whole);
      check(vt_op_conv_forward(dev, name, &twh, &tg, &tw, nullptr, &p, prec));
      for (int64_t d = 0; d < gi.dim(); d++) whole = whole.narrow(d, 0, gi.size(d));
      gi.copy_(whole);
    } else if (gi.numel()) {
      const vt_tensor tgi = view_of(gi), tw = view_of(weight);
      check(vt_op_conv_backward_input(dev, name, &tgi, &tg, &tw, &p, prec));
    }
  }
  if (mask[1]) {
    gw = at::empty(weight.sizes(), weight.options().memory_format(format_of(weight)));
    if (gw.numel()) {
      const vt_tensor tgw = view_of(gw);
      if (transposed) {  // the roles of input and grad_out swap
        const at::Tensor x = zero_extend(input, full);
        const vt_tensor tx = view_of(x);
        check(vt_op_conv_backward_weight(dev, name, &tgw, &tx, &tg, &p, prec));
      } else {
        const vt_tensor ti = view_of(input);
        check(vt_op_conv_backward_weight(dev, name, &tgw, &tg, &ti, &p, prec));
      }
    }
  }
  if (mask[2]) {
    std::vector<int64_t> dims{0};
    for (int64_t d = 2; d < grad_out.dim(); d++) dims.push_back(d);
    gb = grad_out.sum(dims);
  }
  return {gi, gw, gb};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  VT_IMPL_VIA(m, "convolution_overrideable", "convolution", convolution);
  VT_IMPL(m, "convolution_backward_overrideable", convolution_backward);
}

}  // namespace vtpu
