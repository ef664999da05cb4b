// pool_ops.cpp — adapters from ATen's 2-D pooling and upsampling ops to the
// runtime's plane kernels: argument parsing and PyTorch's own shape checks
// (ATen/native/Pool.h, UpSample.h), output allocation in the input's memory
// format, 3-D (unbatched) inputs seen as one batch; one queued C call per op.
#include <ATen/native/Pool.h>
#include <ATen/native/UpSample.h>
#include <torch/library.h>

#include "common.h"
#include "device_check.h"

namespace vtpu {
namespace {

vt_tensor desc4(const at::Tensor& t, const char* op) {
  vt_tensor d{};
  const at::Tensor v = t.dim() == 3 ? t.unsqueeze(0) : t;
  VT_FALLBACK_UNLESS(describe(v, &d) && vt_dtype_is_float(d.dtype), "dtype ", t.scalar_type());
  return d;
}

at::MemoryFormat fmt_of(const at::Tensor& t) { return t.dim() == 4 ? t.suggest_memory_format() : at::MemoryFormat::Contiguous; }

// Output of an op on `self` with spatial size (oh, ow): same batch dims.
at::Tensor new_like_spatial(const at::Tensor& self, int64_t oh, int64_t ow, c10::ScalarType dt) {
  std::vector<int64_t> s(self.sizes().begin(), self.sizes().end());
  s[s.size() - 2] = oh;
  s[s.size() - 1] = ow;
  return at::empty(s, self.options().dtype(dt).memory_format(fmt_of(self)));
}

// int64 indices, seen as 4-D like desc4.
vt_tensor desc4_index(const at::Tensor& t) {
  vt_tensor d{};
  TORCH_CHECK(describe(t.dim() == 3 ? t.unsqueeze(0) : t, &d) && d.dtype == VT_I64, "vtpu: pooling indices must be int64");
  return d;
}

vt_pool2d_params parse_pool(const char* op, const at::Tensor& input, at::IntArrayRef k, at::IntArrayRef st,
                            at::IntArrayRef pad, at::IntArrayRef dil, bool ceil_mode, bool is_max) {
  TORCH_CHECK(k.size() == 1 || k.size() == 2, op, ": kernel_size must either be a single int, or a tuple of two ints");
  TORCH_CHECK(st.empty() || st.size() == 1 || st.size() == 2, op,
              ": stride must either be omitted, a single int, or a tuple of two ints");
  TORCH_CHECK(pad.size() == 1 || pad.size() == 2, op, ": padding must either be a single int, or a tuple of two ints");
  TORCH_CHECK(dil.size() == 1 || dil.size() == 2, op, ": dilation must be either a single int, or a tuple of two ints");
  vt_pool2d_params p{};
  p.kernel[0] = k[0];
  p.kernel[1] = k.size() == 1 ? k[0] : k[1];
  p.stride[0] = st.empty() ? p.kernel[0] : st[0];
  p.stride[1] = st.empty() ? p.kernel[1] : st.size() == 1 ? p.stride[0] : st[1];
  p.padding[0] = pad[0];
  p.padding[1] = pad.size() == 1 ? pad[0] : pad[1];
  p.dilation[0] = dil[0];
  p.dilation[1] = dil.size() == 1 ? dil[0] : dil[1];
  p.ceil_mode = ceil_mode;
  const auto mf = input.suggest_memory_format();
  if (mf == at::MemoryFormat::ChannelsLast) {
    TORCH_CHECK(input.dim() == 4, "non-empty 4D (batch mode) tensor expected for input with channels_last layout");
  } else {
    TORCH_CHECK(input.dim() == 3 || input.dim() == 4, "non-empty 3D or 4D (batch mode) tensor expected for input");
  }
  TORCH_CHECK(p.stride[0] != 0 && p.stride[1] != 0, "stride should not be zero");
  const int64_t ih = input.size(-2), iw = input.size(-1), planes = input.size(-3);
  const int64_t oh = at::native::pooling_output_shape<int64_t>(ih, p.kernel[0], p.padding[0], p.stride[0],
                                                               is_max ? p.dilation[0] : 1, ceil_mode);
  const int64_t ow = at::native::pooling_output_shape<int64_t>(iw, p.kernel[1], p.padding[1], p.stride[1],
                                                               is_max ? p.dilation[1] : 1, ceil_mode);
  at::native::pool2d_shape_check(input, p.kernel[0], p.kernel[1], p.stride[0], p.stride[1], p.padding[0],
                                 p.padding[1], is_max ? p.dilation[0] : 1, is_max ? p.dilation[1] : 1, planes, ih,
                                 iw, oh, ow, mf);
  return p;
}

int64_t pooled(const vt_pool2d_params& p, const at::Tensor& in, int d, bool is_max) {
  return vt_pool_output_size(in.size(d - 2), p.kernel[d], p.padding[d], p.stride[d], is_max ? p.dilation[d] : 1,
                             p.ceil_mode);
}

std::tuple<at::Tensor, at::Tensor> max_pool2d_with_indices(const at::Tensor& self, at::IntArrayRef k,
                                                           at::IntArrayRef st, at::IntArrayRef pad,
                                                           at::IntArrayRef dil, bool ceil_mode) {
  const auto p = parse_pool("max_pool2d", self, k, st, pad, dil, ceil_mode, true);
  at::Tensor out = new_like_spatial(self, pooled(p, self, 0, true), pooled(p, self, 1, true), self.scalar_type());
  at::Tensor idx = new_like_spatial(self, out.size(-2), out.size(-1), at::kLong);
  if (out.numel() == 0) return {out, idx};
  const vt_tensor o = desc4(out, "max_pool2d"), i = desc4_index(idx), x = desc4(self, "max_pool2d");
  check(vt_op_max_pool2d(device_index(self), "aten::max_pool2d_with_indices", &o, &i, &x, &p));
  return {out, idx};
}

// grad_in = scatter of grad_out at indices (max_pool2d and adaptive_max_pool2d).
at::Tensor index_backward(const char* name, const at::Tensor& grad, const at::Tensor& self, const at::Tensor& idx) {
  TORCH_CHECK(grad.dim() == self.dim() && idx.sizes() == grad.sizes(), name,
              ": grad_output, indices and input shapes do not match");
  at::Tensor gi = at::empty(self.sizes(), self.options().memory_format(fmt_of(self)));
  if (gi.numel() == 0) return gi;
  const at::Tensor g = grad.scalar_type() == self.scalar_type() ? grad : grad.to(self.scalar_type());
  const vt_tensor a = desc4(gi, name), b = desc4(g, name);
  vt_tensor ix{};
  TORCH_CHECK(describe(idx.dim() == 3 ? idx.unsqueeze(0) : idx, &ix) && ix.dtype == VT_I64, name,
              ": indices must be int64");
  check(vt_op_max_pool2d_backward(device_index(self), name, &a, &b, &ix));
  return gi;
}

at::Tensor max_pool2d_with_indices_backward(const at::Tensor& grad, const at::Tensor& self, at::IntArrayRef,
                                            at::IntArrayRef, at::IntArrayRef, at::IntArrayRef, bool,
                                            const at::Tensor& idx) {
  return index_backward("aten::max_pool2d_with_indices_backward", grad, self, idx);
}

vt_pool2d_params parse_avg(const at::Tensor& self, at::IntArrayRef k, at::IntArrayRef st, at::IntArrayRef pad,
                           bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor) {
  TORCH_CHECK(k.size() == 1 || k.size() == 2, "avg_pool2d: kernel_size must either be a single int, or a tuple of two ints");
  TORCH_CHECK(st.empty() || st.size() == 1 || st.size() == 2,
              "avg_pool2d: stride must either be omitted, a single int, or a tuple of two ints");
  TORCH_CHECK(pad.size() == 1 || pad.size() == 2, "avg_pool2d: padding must either be a single int, or a tuple of two ints");
  TORCH_CHECK(!divisor || *divisor != 0, "divisor must be not zero");
  const int64_t one[1] = {1};
  auto p = parse_pool("avg_pool2d", self, k, st, pad, at::IntArrayRef(one, 1), ceil_mode, false);
  p.count_include_pad = count_include_pad;
  p.divisor_override = divisor ? *divisor : 0;
  return p;
}

at::Tensor avg_pool2d(const at::Tensor& self, at::IntArrayRef k, at::IntArrayRef st, at::IntArrayRef pad,
                      bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor) {
  const auto p = parse_avg(self, k, st, pad, ceil_mode, count_include_pad, divisor);
  at::Tensor out = new_like_spatial(self, pooled(p, self, 0, false), pooled(p, self, 1, false), self.scalar_type());
  if (out.numel() == 0) return out;
  const vt_tensor o = desc4(out, "avg_pool2d"), x = desc4(self, "avg_pool2d");
  check(vt_op_avg_pool2d(device_index(self), "aten::avg_pool2d", &o, &x, &p));
  return out;
}

at::Tensor avg_pool2d_backward(const at::Tensor& grad, const at::Tensor& self, at::IntArrayRef k,
                               at::IntArrayRef st, at::IntArrayRef pad, bool ceil_mode, bool count_include_pad,
                               std::optional<int64_t> divisor) {
  const auto p = parse_avg(self, k, st, pad, ceil_mode, count_include_pad, divisor);
  at::Tensor gi = at::empty(self.sizes(), self.options().memory_format(fmt_of(self)));
  if (gi.numel() == 0) return gi;
  const at::Tensor g = grad.scalar_type() == self.scalar_type() ? grad : grad.to(self.scalar_type());
  const vt_tensor a = desc4(gi, "avg_pool2d_backward"), b = desc4(g, "avg_pool2d_backward");
  check(vt_op_avg_pool2d_backward(device_index(self), "aten::avg_pool2d_backward", &a, &b, &p));
  return gi;
}

void adaptive_avg_check(const at::Tensor& self, at::IntArrayRef osz) {
  const char* op = "adaptive_avg_pool2d";
  TORCH_CHECK(osz.size() == 2, op, ": output_size must be 2");
  TORCH_CHECK(osz[0] >= 0 && osz[1] >= 0, op, ": elements of output_size must be greater than or equal to 0 ",
              "but received {", osz[0], ", ", osz[1], "}");
  TORCH_CHECK(self.dim() == 3 || self.dim() == 4, op, "(): Expected 3D or 4D tensor, but got ", self.sizes());
  for (int64_t i = 1; i < self.dim(); i++)
    TORCH_CHECK(self.size(i) > 0, op, "(): Expected input to have non-zero size for non-batch dimensions, "
                "but input has sizes ", self.sizes(), " with dimension ", i, " being empty");
}

// adaptive_max_pool2d's checks, in CPU's order and words (its meta function:
// input first; a negative output size fails where the output is made).
void adaptive_max_check(const at::Tensor& self, at::IntArrayRef osz) {
  TORCH_CHECK(self.dim() == 3 || self.dim() == 4, "adaptive_max_pool2d(): Expected 3D or 4D tensor, but got: ",
              self.sizes());
  for (int64_t i = 1; i < self.dim(); i++)
    TORCH_CHECK(self.size(i) > 0, "adaptive_max_pool2d(): Expected input to have non-zero size for non-batch "
                "dimensions, but input has sizes ", self.sizes(), " with dimension ", i, " being empty");
  TORCH_CHECK(osz.size() == 2, "adaptive_max_pool2d(): internal error: output_size.size() must be 2");
  if (osz[0] < 0 || osz[1] < 0) {
    std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end() - 2);
    shape.push_back(osz[0]);
    shape.push_back(osz[1]);
    TORCH_CHECK(false, "Trying to create tensor with negative dimension ", osz[0] < 0 ? osz[0] : osz[1], ": ",
                c10::IntArrayRef(shape));
  }
}

at::Tensor adaptive_avg_pool2d(const at::Tensor& self, c10::SymIntArrayRef osym) {
  const auto osz = C10_AS_INTARRAYREF_SLOW(osym);
  adaptive_avg_check(self, osz);
  at::Tensor out = new_like_spatial(self, osz[0], osz[1], self.scalar_type());
  if (out.numel() == 0) return out;
  const vt_tensor o = desc4(out, "adaptive_avg_pool2d"), x = desc4(self, "adaptive_avg_pool2d");
  check(vt_op_adaptive_avg_pool2d(device_index(self), "aten::_adaptive_avg_pool2d", &o, &x));
  return out;
}

at::Tensor adaptive_avg_pool2d_backward(const at::Tensor& grad, const at::Tensor& self) {
  at::Tensor gi = at::empty(self.sizes(), self.options().memory_format(fmt_of(self)));
  if (gi.numel() == 0) return gi;
  const at::Tensor g = grad.scalar_type() == self.scalar_type() ? grad : grad.to(self.scalar_type());
  const vt_tensor a = desc4(gi, "adaptive_avg_pool2d_backward"), b = desc4(g, "adaptive_avg_pool2d_backward");
  check(vt_op_adaptive_avg_pool2d_backward(device_index(self), "aten::_adaptive_avg_pool2d_backward", &a, &b));
  return gi;
}

std::tuple<at::Tensor, at::Tensor> adaptive_max_pool2d(const at::Tensor& self, at::IntArrayRef osz) {
  adaptive_max_check(self, osz);
  at::Tensor out = new_like_spatial(self, osz[0], osz[1], self.scalar_type());
  at::Tensor idx = new_like_spatial(self, osz[0], osz[1], at::kLong);
  if (out.numel() == 0) return {out, idx};
  const vt_tensor o = desc4(out, "adaptive_max_pool2d"), i = desc4_index(idx),
                  x = desc4(self, "adaptive_max_pool2d");
  check(vt_op_adaptive_max_pool2d(device_index(self), "aten::adaptive_max_pool2d", &o, &i, &x));
  return {out, idx};
}

at::Tensor adaptive_max_pool2d_backward(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& idx) {
  return index_backward("aten::adaptive_max_pool2d_backward", grad, self, idx);
}

double scale_or_none(std::optional<double> s) { return s ? *s : 0.0; }

at::Tensor upsample(vt_upsample_mode mode, const char* name, const at::Tensor& self, c10::SymIntArrayRef osym,
                    bool align, std::optional<double> sh, std::optional<double> sw) {
  const auto osz = C10_AS_INTARRAYREF_SLOW(osym);
  const auto full = at::native::upsample_2d_common_check(self.sizes(), osz);
  TORCH_CHECK(self.numel() != 0 || c10::multiply_integers(self.sizes().begin() + 1, self.sizes().end()),
              "Non-empty 4D data tensor expected but got a tensor with sizes ", self.sizes());
  at::Tensor out = at::empty(std::vector<int64_t>{full[0], full[1], full[2], full[3]},
                             self.options().memory_format(self.suggest_memory_format()));
  if (out.numel() == 0) return out;
  const vt_tensor o = desc4(out, name), x = desc4(self, name);
  check(vt_op_upsample2d(device_index(self), name, mode, &o, &x, align, scale_or_none(sh), scale_or_none(sw)));
  return out;
}

at::Tensor upsample_backward(vt_upsample_mode mode, const char* name, const at::Tensor& grad,
                             c10::SymIntArrayRef osym, c10::SymIntArrayRef isym, bool align,
                             std::optional<double> sh, std::optional<double> sw) {
  const auto osz = C10_AS_INTARRAYREF_SLOW(osym);
  const auto isz = C10_AS_INTARRAYREF_SLOW(isym);
  const auto full = at::native::upsample_2d_common_check(isz, osz);
  for (int i = 0; i < 4; i++)
    TORCH_CHECK(grad.size(i) == full[i], "Expected grad_output to have the same shape as output;",
                " output.size(", i, ") = ", full[i], " but got grad_output.size(", i, ") = ", grad.size(i));
  at::Tensor gi = at::empty(isz, grad.options().memory_format(grad.suggest_memory_format()));
  if (gi.numel() == 0) return gi;
  const vt_tensor a = desc4(gi, name), b = desc4(grad, name);
  check(vt_op_upsample2d_backward(device_index(grad), name, mode, &a, &b, align, scale_or_none(sh),
                                  scale_or_none(sw)));
  return gi;
}

// 1-d upsampling is the 2-d kernel on a height of 1 (one source row, weight 0).
at::Tensor upsample1d(vt_upsample_mode mode, const char* name, const at::Tensor& self, c10::SymIntArrayRef osym,
                      bool align, std::optional<double> scale) {
  const auto osz = C10_AS_INTARRAYREF_SLOW(osym);
  TORCH_CHECK(osz.size() == 1, "It is expected output_size equals to 1, but got size ", osz.size());
  TORCH_CHECK(self.dim() == 3, "It is expected input_size equals to 3, but got size ", self.dim());
  TORCH_CHECK(self.size(2) > 0 && osz[0] > 0,
              "Input and output sizes should be greater than 0, but got input (W: ", self.size(2),
              ") output (W: ", osz[0], ")");
  TORCH_CHECK(self.numel() != 0 || self.size(1) != 0,
              "Non-empty 3D data tensor expected but got a tensor with sizes ", self.sizes());
  at::Tensor out = at::empty({self.size(0), self.size(1), osz[0]}, self.options());
  if (out.numel() == 0) return out;
  const vt_tensor o = desc4(out.unsqueeze(2), name), x = desc4(self.unsqueeze(2), name);
  check(vt_op_upsample2d(device_index(self), name, mode, &o, &x, align, 0.0, scale_or_none(scale)));
  return out;
}

at::Tensor upsample1d_backward(vt_upsample_mode mode, const char* name, const at::Tensor& grad,
                               c10::SymIntArrayRef osym, c10::SymIntArrayRef isym, bool align,
                               std::optional<double> scale) {
  const auto osz = C10_AS_INTARRAYREF_SLOW(osym);
  const auto isz = C10_AS_INTARRAYREF_SLOW(isym);
  TORCH_CHECK(osz.size() == 1 && isz.size() == 3, name, ": expected a 1-element output_size and a 3-element input_size");
  const int64_t want[3] = {isz[0], isz[1], osz[0]};
  TORCH_CHECK(grad.dim() == 3, "Expected grad_output to be a tensor of dimension 3 but got: dimension ", grad.dim());
  for (int i = 0; i < 3; i++)
    TORCH_CHECK(grad.size(i) == want[i], "Expected grad_output to have the same shape as output;",
                " output.size(", i, ") = ", want[i], " but got grad_output.size(", i, ") = ", grad.size(i));
  at::Tensor gi = at::empty(isz, grad.options());
  if (gi.numel() == 0) return gi;
  const vt_tensor a = desc4(gi.unsqueeze(2), name), b = desc4(grad.unsqueeze(2), name);
  check(vt_op_upsample2d_backward(device_index(grad), name, mode, &a, &b, align, 0.0, scale_or_none(scale)));
  return gi;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  VT_IMPL(m, "upsample_nearest1d", [](const at::Tensor& s, c10::SymIntArrayRef o, std::optional<double> sc) {
    return upsample1d(VT_UPSAMPLE_NEAREST, "aten::upsample_nearest1d", s, o, false, sc);
  });
  VT_IMPL(m, "upsample_nearest1d_backward", [](const at::Tensor& g, c10::SymIntArrayRef o, c10::SymIntArrayRef i,
                                           std::optional<double> sc) {
    return upsample1d_backward(VT_UPSAMPLE_NEAREST, "aten::upsample_nearest1d_backward", g, o, i, false, sc);
  });
  VT_IMPL(m, "_upsample_nearest_exact1d", [](const at::Tensor& s, c10::SymIntArrayRef o, std::optional<double> sc) {
    return upsample1d(VT_UPSAMPLE_NEAREST_EXACT, "aten::_upsample_nearest_exact1d", s, o, false, sc);
  });
  VT_IMPL(m, "_upsample_nearest_exact1d_backward", [](const at::Tensor& g, c10::SymIntArrayRef o,
                                                  c10::SymIntArrayRef i, std::optional<double> sc) {
    return upsample1d_backward(VT_UPSAMPLE_NEAREST_EXACT, "aten::_upsample_nearest_exact1d_backward", g, o, i,
                               false, sc);
  });
  VT_IMPL(m, "upsample_linear1d", [](const at::Tensor& s, c10::SymIntArrayRef o, bool a, std::optional<double> sc) {
    return upsample1d(VT_UPSAMPLE_BILINEAR, "aten::upsample_linear1d", s, o, a, sc);
  });
  VT_IMPL(m, "upsample_linear1d_backward", [](const at::Tensor& g, c10::SymIntArrayRef o, c10::SymIntArrayRef i, bool a,
                                          std::optional<double> sc) {
    return upsample1d_backward(VT_UPSAMPLE_BILINEAR, "aten::upsample_linear1d_backward", g, o, i, a, sc);
  });
  VT_IMPL(m, "max_pool2d_with_indices", max_pool2d_with_indices);
  VT_IMPL(m, "max_pool2d_with_indices_backward", max_pool2d_with_indices_backward);
  VT_IMPL(m, "avg_pool2d", avg_pool2d);
  VT_IMPL(m, "avg_pool2d_backward", avg_pool2d_backward);
  VT_IMPL(m, "_adaptive_avg_pool2d", adaptive_avg_pool2d);
  VT_IMPL(m, "_adaptive_avg_pool2d_backward", adaptive_avg_pool2d_backward);
  VT_IMPL(m, "adaptive_max_pool2d", adaptive_max_pool2d);
  VT_IMPL(m, "adaptive_max_pool2d_backward", adaptive_max_pool2d_backward);
  VT_IMPL(m, "upsample_nearest2d", [](const at::Tensor& s, c10::SymIntArrayRef o, std::optional<double> h,
                                  std::optional<double> w) {
    return upsample(VT_UPSAMPLE_NEAREST, "aten::upsample_nearest2d", s, o, false, h, w);
  });
  VT_IMPL(m, "upsample_nearest2d_backward", [](const at::Tensor& g, c10::SymIntArrayRef o, c10::SymIntArrayRef i,
                                           std::optional<double> h, std::optional<double> w) {
    return upsample_backward(VT_UPSAMPLE_NEAREST, "aten::upsample_nearest2d_backward", g, o, i, false, h, w);
  });
  VT_IMPL(m, "_upsample_nearest_exact2d", [](const at::Tensor& s, c10::SymIntArrayRef o, std::optional<double> h,
                                         std::optional<double> w) {
    return upsample(VT_UPSAMPLE_NEAREST_EXACT, "aten::_upsample_nearest_exact2d", s, o, false, h, w);
  });
  VT_IMPL(m, "_upsample_nearest_exact2d_backward", [](const at::Tensor& g, c10::SymIntArrayRef o,
                                                  c10::SymIntArrayRef i, std::optional<double> h,
                                                  std::optional<double> w) {
    return upsample_backward(VT_UPSAMPLE_NEAREST_EXACT, "aten::_upsample_nearest_exact2d_backward", g, o, i, false,
                             h, w);
  });
  VT_IMPL(m, "upsample_bilinear2d", [](const at::Tensor& s, c10::SymIntArrayRef o, bool a, std::optional<double> h,
                                   std::optional<double> w) {
    return upsample(VT_UPSAMPLE_BILINEAR, "aten::upsample_bilinear2d", s, o, a, h, w);
  });
  VT_IMPL(m, "upsample_bilinear2d_backward", [](const at::Tensor& g, c10::SymIntArrayRef o, c10::SymIntArrayRef i,
                                            bool a, std::optional<double> h, std::optional<double> w) {
    return upsample_backward(VT_UPSAMPLE_BILINEAR, "aten::upsample_bilinear2d_backward", g, o, i, a, h, w);
  });
}

}  // namespace vtpu
