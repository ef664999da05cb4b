// reduce_ops.cpp — adapters from ATen's reductions and scans to the
// runtime's kernels: PyTorch's dim wrapping, result and accumulate dtypes,
// keepdim views and error messages; one queued C call per op.
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "common.h"
#include "device_check.h"

namespace vtpu {
namespace {

bool is_int(c10::ScalarType t) { return c10::isIntegralType(t, /*includeBool=*/true); }

// The accumulate dtype PyTorch's CPU kernels use.
c10::ScalarType acc_type(c10::ScalarType t) {
  if (t == at::kDouble) return at::kDouble;
  if (c10::isFloatingType(t)) return at::kFloat;
  return at::kLong;
}

// CPU's check of an out= the result is cast into.
void check_out_cast(const at::Tensor& out, c10::ScalarType result) {
  TORCH_CHECK(c10::canCast(result, out.scalar_type()), "result type ", result,
              " can't be cast to the desired output type ", out.scalar_type());
}

// Reduced dims as a bitmask (all dims when `dims` is empty or absent).
uint64_t dim_mask(const at::Tensor& self, at::OptionalIntArrayRef dims) {
  const int64_t nd = self.dim();
  if (!dims || dims->empty()) return nd == 0 ? 0 : (nd >= 64 ? ~0ull : (1ull << nd) - 1);
  uint64_t m = 0;
  for (int64_t d : *dims) {
    const int64_t w = at::maybe_wrap_dim(d, nd);
    TORCH_CHECK(!(m & (1ull << w)), "dim ", w, " appears multiple times in the list of dims");
    m |= 1ull << w;
  }
  return m;
}

std::vector<int64_t> final_shape(const at::Tensor& self, uint64_t mask, bool keepdim) {
  std::vector<int64_t> s;
  for (int64_t d = 0; d < self.dim(); d++) {
    if (!(mask & (1ull << d))) s.push_back(self.size(d));
    else if (keepdim) s.push_back(1);
  }
  return s;
}

// out (already of the final shape) seen in keepdim layout, for the kernel.
at::Tensor keepdim_view(const at::Tensor& out, const at::Tensor& self, uint64_t mask, bool keepdim) {
  if (keepdim) return out;
  at::Tensor v = out;
  for (int64_t d = 0; d < self.dim(); d++)
    if (mask & (1ull << d)) v = v.unsqueeze(d);
  return v;
}

void check_nonempty(const char* name, const at::Tensor& self, uint64_t mask) {
  for (int64_t d = 0; d < self.dim(); d++)
    if ((mask & (1ull << d)) && self.size(d) == 0)
      TORCH_CHECK_INDEX(false, name, "(): Expected reduction dim ", d, " to have non-zero size.");
}

// out = op(self) over mask; `out` undefined → allocated with `result` dtype.
at::Tensor reduce(vt_reduce_op op, const char* name, const at::Tensor& self, uint64_t mask, bool keepdim,
                  c10::ScalarType result, c10::ScalarType compute, double param, at::Tensor out = {}) {
  const auto shape = final_shape(self, mask, keepdim);
  if (out.defined()) {
    TORCH_CHECK(out.device() == self.device(), "Expected out tensor on ", self.device(), " but got ", out.device());
    at::native::resize_output(out, shape);
  } else {
    out = at::empty(shape, self.options().dtype(result));
  }
  if (out.numel() == 0) return out;
  const at::Tensor view = keepdim_view(out, self, mask, keepdim);
  const vt_tensor to = view_of(view), ti = view_of(self);
  vt_dtype c{};
  VT_FALLBACK_UNLESS(to_vt_dtype(compute, &c), "accumulation in ", compute);
  check(vt_op_reduce(device_index(self), name, op, &to, &ti, mask, c, param));
  return out;
}

c10::ScalarType sum_type(const at::Tensor& self, std::optional<c10::ScalarType> dtype) {
  return dtype ? *dtype : (is_int(self.scalar_type()) ? at::kLong : self.scalar_type());
}

// ------------------------------------------------------------------ sum, mean, prod

at::Tensor& sum_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                    std::optional<c10::ScalarType> dtype, at::Tensor& out) {
  const auto r = dtype ? *dtype : out.scalar_type();
  reduce(VT_REDUCE_SUM, "aten::sum", self, dim_mask(self, dim), keepdim, r, acc_type(r), 0, out);
  return out;
}

at::Tensor sum(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
               std::optional<c10::ScalarType> dtype) {
  const auto r = sum_type(self, dtype);
  return reduce(VT_REDUCE_SUM, "aten::sum", self, dim_mask(self, dim), keepdim, r, acc_type(r), 0);
}

// nansum: the sum with NaNs read as 0 (zeroed in a copy; integers have none).
at::Tensor nan_as_zero(const at::Tensor& self) {
  TORCH_CHECK(!c10::isComplexType(self.scalar_type()), "nansum does not support complex inputs");
  return c10::isFloatingType(self.scalar_type()) ? self.masked_fill(self.isnan(), 0) : self;
}

at::Tensor& nansum_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                       std::optional<c10::ScalarType> dtype, at::Tensor& out) {
  const auto r = dtype ? *dtype : out.scalar_type();  // CPU's kernel for float inputs runs in the out's dtype
  TORCH_CHECK_NOT_IMPLEMENTED(c10::isIntegralType(self.scalar_type(), /*includeBool=*/true) ||
                                  c10::isFloatingType(r) || c10::isComplexType(r),
                              "\"nansum\" not implemented for '", c10::toString(r), "'");
  return sum_out(nan_as_zero(self), dim, keepdim, dtype, out);
}

at::Tensor nansum(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                  std::optional<c10::ScalarType> dtype) {
  return vtpu::sum(nan_as_zero(self), dim, keepdim, dtype);
}

c10::ScalarType mean_type(const at::Tensor& self, std::optional<c10::ScalarType> dtype) {
  const auto r = dtype ? *dtype : self.scalar_type();
  TORCH_CHECK(c10::isFloatingType(r) || c10::isComplexType(r),
              "mean(): could not infer output dtype. ", dtype ? "Optional" : "Input",
              " dtype must be either a floating point or complex dtype. Got: ", c10::toString(r));
  return r;
}

at::Tensor mean(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                std::optional<c10::ScalarType> dtype) {
  const auto r = mean_type(self, dtype);
  return reduce(VT_REDUCE_MEAN, "aten::mean", self, dim_mask(self, dim), keepdim, r, acc_type(r), 0);
}

at::Tensor& mean_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                     std::optional<c10::ScalarType> dtype, at::Tensor& out) {
  check_out_cast(out, mean_type(self, dtype));
  const auto r = mean_type(self, dtype ? dtype : std::optional<c10::ScalarType>(out.scalar_type()));
  reduce(VT_REDUCE_MEAN, "aten::mean", self, dim_mask(self, dim), keepdim, r, acc_type(r), 0, out);
  return out;
}

at::Tensor prod_all(const at::Tensor& self, std::optional<c10::ScalarType> dtype) {
  const auto r = sum_type(self, dtype);
  return reduce(VT_REDUCE_PROD, "aten::prod", self, dim_mask(self, {}), false, r, acc_type(r), 0);
}

at::Tensor& prod_out(const at::Tensor& self, int64_t dim, bool keepdim, std::optional<c10::ScalarType> dtype,
                     at::Tensor& out) {
  const auto r = dtype ? *dtype : out.scalar_type();
  reduce(VT_REDUCE_PROD, "aten::prod", self, dim_mask(self, at::IntArrayRef(dim)), keepdim, r, acc_type(r), 0, out);
  return out;
}

at::Tensor prod_dim(const at::Tensor& self, int64_t dim, bool keepdim, std::optional<c10::ScalarType> dtype) {
  const auto r = sum_type(self, dtype);
  return reduce(VT_REDUCE_PROD, "aten::prod", self, dim_mask(self, at::IntArrayRef(dim)), keepdim, r, acc_type(r),
                0);
}

// ------------------------------------------------------------------ amax, amin, max, min, any, all

template <vt_reduce_op Op>
at::Tensor& extreme_out(const at::Tensor& self, at::IntArrayRef dim, bool keepdim, at::Tensor& out) {
  const char* name = Op == VT_REDUCE_AMAX ? "amax" : "amin";
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), "Expected the dtype for input and out to match, but got ",
              self.scalar_type(), " for input's dtype and ", out.scalar_type(), " for out's dtype.");
  TORCH_CHECK(self.numel() > 0 || !dim.empty(), name,
              "(): Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim with "
              "the 'dim' argument.");
  const uint64_t mask = dim_mask(self, dim);
  check_nonempty(name, self, mask);
  reduce(Op, name, self, mask, keepdim, self.scalar_type(), acc_type(self.scalar_type()), 0, out);
  return out;
}

template <vt_reduce_op Op>
at::Tensor extreme(const at::Tensor& self, at::IntArrayRef dim, bool keepdim) {
  at::Tensor out = at::empty({0}, self.options());
  return extreme_out<Op>(self, dim, keepdim, out);
}

template <vt_reduce_op Op>
at::Tensor extreme_all(const at::Tensor& self, at::Tensor out = {}) {
  TORCH_CHECK(self.numel() > 0, Op == VT_REDUCE_AMAX ? "max" : "min",
              "(): Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim with "
              "the 'dim' argument.");
  return reduce(Op, Op == VT_REDUCE_AMAX ? "aten::max" : "aten::min", self, dim_mask(self, {}), false,
                self.scalar_type(), acc_type(self.scalar_type()), 0, out);
}

template <vt_reduce_op Op>
at::Tensor& extreme_all_out(const at::Tensor& self, at::Tensor& out) {
  check_out_cast(out, self.scalar_type());
  extreme_all<Op>(self, out);
  return out;
}

// any / all give bool, or uint8 for uint8 input, as PyTorch.
c10::ScalarType logical_type(const at::Tensor& self) {
  return self.scalar_type() == at::kByte ? at::kByte : at::kBool;
}

// any / all over dim=[] reduce nothing (each element on its own), as CPU;
// dim=None reduces everything.
uint64_t logical_mask(const at::Tensor& self, at::OptionalIntArrayRef dim) {
  return dim && dim->empty() ? 0 : dim_mask(self, dim);
}

template <vt_reduce_op Op>
at::Tensor logical(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim) {
  return reduce(Op, Op == VT_REDUCE_ANY ? "aten::any" : "aten::all", self, logical_mask(self, dim), keepdim,
                logical_type(self), at::kBool, 0);
}

template <vt_reduce_op Op>
at::Tensor& logical_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim, at::Tensor& out) {
  TORCH_CHECK(out.scalar_type() == at::kBool || (out.scalar_type() == at::kByte && self.scalar_type() == at::kByte),
              Op == VT_REDUCE_ANY ? "any" : "all", " only supports bool tensor for result, got: ", out.scalar_type());
  reduce(Op, Op == VT_REDUCE_ANY ? "aten::any" : "aten::all", self, logical_mask(self, dim), keepdim,
         logical_type(self), at::kBool, 0, out);
  return out;
}

// ------------------------------------------------------------------ max/min with indices, argmax/argmin

std::tuple<at::Tensor, at::Tensor> arg_reduce(bool is_max, const at::Tensor& self, int64_t dim, bool keepdim,
                                              bool want_values, at::Tensor values = {}, at::Tensor indices = {}) {
  const char* name = is_max ? "max" : "min";
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  const uint64_t mask = self.dim() ? 1ull << d : 0;
  if (self.dim()) check_nonempty(is_max ? (want_values ? "max" : "argmax") : (want_values ? "min" : "argmin"), self, mask);
  const auto shape = final_shape(self, mask, keepdim);
  if (values.defined()) check_out_dtype(values, self.scalar_type());
  if (indices.defined()) check_out_dtype(indices, at::kLong);
  if (want_values) {
    if (values.defined()) at::native::resize_output(values, shape);
    else values = at::empty(shape, self.options());
  }
  if (indices.defined()) at::native::resize_output(indices, shape);
  else indices = at::empty(shape, self.options().dtype(at::kLong));
  if (indices.numel() == 0) return {values, indices};
  // A 0-dim input reduces as one element of a 1-d line, results included.
  const bool scalar = self.dim() == 0;
  vt_tensor tv{}, ti{};
  if (want_values) tv = view_of(scalar ? values.view({1}) : keepdim_view(values, self, mask, keepdim));
  ti = view_of(scalar ? indices.view({1}) : keepdim_view(indices, self, mask, keepdim));
  const at::Tensor src = scalar ? self.reshape({1}) : self;
  const vt_tensor ts = view_of(src);
  check(vt_op_reduce_arg(device_index(self), name, is_max ? 1 : 0, want_values ? &tv : nullptr, &ti, &ts,
                         self.dim() ? static_cast<int>(d) : 0));
  return {values, indices};
}

at::Tensor argext(bool is_max, const at::Tensor& self, std::optional<int64_t> dim, bool keepdim,
                  at::Tensor out = {}) {
  if (dim) return std::get<1>(arg_reduce(is_max, self, *dim, keepdim, false, {}, out));
  if (out.defined()) check_out_dtype(out, at::kLong);
  TORCH_CHECK_INDEX(self.numel() > 0, is_max ? "argmax" : "argmin",
                    "(): Expected reduction dim to be specified for input.numel() == 0.");
  at::Tensor flat = self.reshape({-1});
  at::Tensor r = std::get<1>(arg_reduce(is_max, flat, 0, false, false));
  if (keepdim) r = r.reshape(std::vector<int64_t>(self.dim(), 1));
  if (!out.defined()) return r;
  at::native::resize_output(out, r.sizes());
  return out.copy_(r);
}

// ------------------------------------------------------------------ var, std, vector norm

template <vt_reduce_op Op>
at::Tensor var_std(const at::Tensor& self, at::OptionalIntArrayRef dim, const std::optional<c10::Scalar>& correction,
                   bool keepdim, at::Tensor out = {}) {
  const char* name = Op == VT_REDUCE_VAR ? "aten::var" : "aten::std";
  VT_FALLBACK_UNLESS(!c10::isComplexType(self.scalar_type()), "dtype ", self.scalar_type());
  TORCH_CHECK(c10::isFloatingType(self.scalar_type()), Op == VT_REDUCE_VAR ? "var" : "std",
              "(): input tensor must be floating point, got ", self.scalar_type());
  const double c = correction ? correction->toDouble() : 1.0;
  const uint64_t mask = dim_mask(self, dim);
  if (out.defined()) check_out_cast(out, self.scalar_type());
  int64_t count = 1;  // elements per output
  for (int64_t d = 0; d < self.dim(); d++)
    if (mask & (1ull << d)) count *= self.size(d);
  if (static_cast<double>(count) - c <= 0)  // as CPU: the result is inf or nan, and a warning says why
    TORCH_WARN(Op == VT_REDUCE_VAR ? "var" : "std", "(): degrees of freedom is <= 0. Correction should be strictly "
               "less than the reduction factor (input numel divided by output numel).");
  return reduce(Op, name, self, mask, keepdim, self.scalar_type(), acc_type(self.scalar_type()), c, out);
}

at::Tensor& vector_norm_out(const at::Tensor& self, const at::Scalar& ord, at::OptionalIntArrayRef dim, bool keepdim,
                            std::optional<c10::ScalarType> dtype, at::Tensor& out) {
  const auto r = dtype ? *dtype : self.scalar_type();
  VT_FALLBACK_UNLESS(!c10::isComplexType(r) && !c10::isComplexType(self.scalar_type()), "dtype ", self.scalar_type());
  TORCH_CHECK(c10::isFloatingType(r), "linalg.vector_norm: Expected a floating point or complex tensor as input. Got ",
              c10::toString(r));
  check_out_dtype(out, r);
  const double p = ord.toDouble();
  const uint64_t mask = dim_mask(self, dim);
  if (p < 0) check_nonempty("linalg.vector_norm", self, mask);
  const at::Tensor src = self.scalar_type() == r ? self : self.to(r);
  reduce(VT_REDUCE_NORM, "aten::linalg_vector_norm", src, mask, keepdim, r, acc_type(r), p, out);
  return out;
}

at::Tensor vector_norm(const at::Tensor& self, const at::Scalar& ord, at::OptionalIntArrayRef dim, bool keepdim,
                       std::optional<c10::ScalarType> dtype) {
  at::Tensor out = at::empty({0}, self.options().dtype(dtype ? *dtype : self.scalar_type()));
  return vector_norm_out(self, ord, dim, keepdim, dtype, out);
}

// ------------------------------------------------------------------ cumsum, cumprod

template <vt_scan_op Op>
at::Tensor& scan_out(const at::Tensor& self, int64_t dim, std::optional<c10::ScalarType> dtype, at::Tensor& out) {
  const char* name = Op == VT_SCAN_CUMSUM ? "aten::cumsum" : "aten::cumprod";
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  at::native::resize_output(out, self.sizes());
  if (out.numel() == 0) return out;
  // CPU scans self converted to out's dtype, carrying the running value
  // in that dtype's accumulate type (float for bf16 / f16, double for f32):
  // vt_scan takes out's dtype as the compute dtype and carries the same
  const auto r = out.scalar_type();
  vt_dtype c{};
  VT_FALLBACK_UNLESS(to_vt_dtype(r, &c), "scans in ", r);
  const at::Tensor src = self.dim() ? self : self.reshape({1});
  const at::Tensor dst = self.dim() ? out : out.reshape({1});
  const vt_tensor to = view_of(dst), ti = view_of(src);
  check(vt_op_scan(device_index(self), name, Op, &to, &ti, static_cast<int>(d), c));
  return out;
}

template <vt_scan_op Op>
at::Tensor scan(const at::Tensor& self, int64_t dim, std::optional<c10::ScalarType> dtype) {
  at::Tensor out = at::empty(self.sizes(), self.options().dtype(sum_type(self, dtype)));
  return scan_out<Op>(self, dim, dtype, out);
}

template <vt_scan_op Op>
at::Tensor& scan_(at::Tensor& self, int64_t dim, std::optional<c10::ScalarType> dtype) {
  return scan_out<Op>(self.clone(), dim, dtype, self);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  VT_IMPL(m, "sum.dim_IntList", sum);
  VT_IMPL(m, "sum.IntList_out", sum_out);
  VT_IMPL(m, "nansum", nansum);
  VT_IMPL(m, "nansum.out", nansum_out);
  VT_IMPL(m, "mean.dim", mean);
  VT_IMPL(m, "mean.out", mean_out);
  VT_IMPL(m, "prod", prod_all);
  VT_IMPL(m, "prod.dim_int", prod_dim);
  VT_IMPL(m, "prod.int_out", prod_out);
  VT_IMPL(m, "amax", extreme<VT_REDUCE_AMAX>);
  VT_IMPL(m, "amax.out", extreme_out<VT_REDUCE_AMAX>);
  VT_IMPL(m, "amin", extreme<VT_REDUCE_AMIN>);
  VT_IMPL(m, "amin.out", extreme_out<VT_REDUCE_AMIN>);
  VT_IMPL(m, "max", [](const at::Tensor& s) { return extreme_all<VT_REDUCE_AMAX>(s); });
  VT_IMPL(m, "min", [](const at::Tensor& s) { return extreme_all<VT_REDUCE_AMIN>(s); });
  VT_IMPL(m, "max.unary_out", extreme_all_out<VT_REDUCE_AMAX>);
  VT_IMPL(m, "min.unary_out", extreme_all_out<VT_REDUCE_AMIN>);
  VT_IMPL(m, "max.dim", [](const at::Tensor& s, int64_t d, bool k) { return arg_reduce(true, s, d, k, true); });
  VT_IMPL(m, "min.dim", [](const at::Tensor& s, int64_t d, bool k) { return arg_reduce(false, s, d, k, true); });
  VT_IMPL(m, "max.dim_max", [](const at::Tensor& s, int64_t d, bool k, at::Tensor& v, at::Tensor& i) {
    arg_reduce(true, s, d, k, true, v, i);
    return std::forward_as_tuple(v, i);
  });
  VT_IMPL(m, "min.dim_min", [](const at::Tensor& s, int64_t d, bool k, at::Tensor& v, at::Tensor& i) {
    arg_reduce(false, s, d, k, true, v, i);
    return std::forward_as_tuple(v, i);
  });
  VT_IMPL(m, "argmax", [](const at::Tensor& s, std::optional<int64_t> d, bool k) { return argext(true, s, d, k); });
  VT_IMPL(m, "argmin", [](const at::Tensor& s, std::optional<int64_t> d, bool k) { return argext(false, s, d, k); });
  VT_IMPL(m, "argmax.out", [](const at::Tensor& s, std::optional<int64_t> d, bool k, at::Tensor& out) -> at::Tensor& {
    argext(true, s, d, k, out);
    return out;
  });
  VT_IMPL(m, "argmin.out", [](const at::Tensor& s, std::optional<int64_t> d, bool k, at::Tensor& out) -> at::Tensor& {
    argext(false, s, d, k, out);
    return out;
  });
  VT_IMPL(m, "any", [](const at::Tensor& s) { return logical<VT_REDUCE_ANY>(s, {}, false); });
  VT_IMPL(m, "all", [](const at::Tensor& s) { return logical<VT_REDUCE_ALL>(s, {}, false); });
  VT_IMPL(m, "any.dim", [](const at::Tensor& s, int64_t d, bool k) { return logical<VT_REDUCE_ANY>(s, at::IntArrayRef(d), k); });
  VT_IMPL(m, "all.dim", [](const at::Tensor& s, int64_t d, bool k) { return logical<VT_REDUCE_ALL>(s, at::IntArrayRef(d), k); });
  VT_IMPL(m, "any.dims", logical<VT_REDUCE_ANY>);
  VT_IMPL(m, "all.dims", logical<VT_REDUCE_ALL>);
  VT_IMPL(m, "any.dims_out", logical_out<VT_REDUCE_ANY>);
  VT_IMPL(m, "all.dims_out", logical_out<VT_REDUCE_ALL>);
  VT_IMPL(m, "var.correction", [](const at::Tensor& s, at::OptionalIntArrayRef d, const std::optional<c10::Scalar>& c,
                              bool k) { return var_std<VT_REDUCE_VAR>(s, d, c, k); });
  VT_IMPL(m, "std.correction", [](const at::Tensor& s, at::OptionalIntArrayRef d, const std::optional<c10::Scalar>& c,
                              bool k) { return var_std<VT_REDUCE_STD>(s, d, c, k); });
  VT_IMPL(m, "linalg_vector_norm", vector_norm);
  VT_IMPL(m, "linalg_vector_norm.out", vector_norm_out);
  VT_IMPL(m, "cumsum", scan<VT_SCAN_CUMSUM>);
  VT_IMPL(m, "cumsum.out", scan_out<VT_SCAN_CUMSUM>);
  VT_IMPL(m, "cumsum_", scan_<VT_SCAN_CUMSUM>);
  VT_IMPL(m, "cumprod", scan<VT_SCAN_CUMPROD>);
  VT_IMPL(m, "cumprod.out", scan_out<VT_SCAN_CUMPROD>);
  VT_IMPL(m, "cumprod_", scan_<VT_SCAN_CUMPROD>);
}

}  // namespace vtpu
