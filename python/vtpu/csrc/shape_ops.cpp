// shape_ops.cpp — adapters for data movement, sorting and range factories:
// PyTorch's argument checks, output shapes and dtypes, then one queued C
// call per op.
#include <ATen/ExpandUtils.h>
#include <ATen/Parallel.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/native/RangeUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorShape.h>
#include <ATen/native/TypeProperties.h>
#include <c10/util/strides.h>
#include <torch/library.h>

#include "common.h"
#include "device_check.h"

namespace vtpu {
namespace {

bool takes(const at::Tensor& t) {
  vt_tensor d{};
  return describe(t, &d);
}

// ------------------------------------------------------------------ cat

// cat's result: sizes, strides, dtype. PyTorch's cat meta function, in its
// order and with its messages (the Meta dispatch key would run a Python
// decomposition instead: about 100 us an op, with other messages).
struct CatResult {
  std::vector<int64_t> sizes, strides;
  c10::ScalarType dtype;
};

// Contiguous unless every input suggests one same other format.
at::MemoryFormat cat_memory_format(const at::MaterializedITensorListRef& ts) {
  std::optional<at::MemoryFormat> format;
  for (const at::Tensor& t : ts) {
    const at::MemoryFormat f = t.suggest_memory_format();
    if (f == at::MemoryFormat::Contiguous || (format && *format != f)) return at::MemoryFormat::Contiguous;
    format = f;
  }
  return format.value_or(at::MemoryFormat::Contiguous);
}

CatResult cat_result(const at::ITensorListRef& tensors, int64_t dim) {
  const auto ts = tensors.materialize();
  TORCH_CHECK_VALUE(!ts.empty(), "torch.cat(): expected a non-empty list of Tensors");
  for (size_t i = 0; i < ts.size(); i++)
    TORCH_CHECK(ts[i].get().dim() > 0, "zero-dimensional tensor (at position ", i, ") cannot be concatenated");
  dim = at::legacy_cat_wrap_dim(dim, ts);
  CatResult r;
  r.dtype = at::native::result_type(tensors);
  const at::MemoryFormat format = cat_memory_format(ts);
  const at::Tensor* ref = nullptr;
  for (size_t i = 0; i < ts.size(); i++) {
    const at::Tensor& t = ts[i];
    if (at::native::cat_should_skip_tensor(t)) continue;  // legacy 1-D empty inputs
    if (!ref) {
      ref = &t;
      r.sizes = t.sizes().vec();
      r.sizes[dim] = 0;
    }
    at::native::check_cat_shape_except_dim(*ref, t, dim, static_cast<int64_t>(i));
    r.sizes[dim] += t.size(dim);
  }
  if (!ref) r.sizes = {0};
  if (format == at::MemoryFormat::ChannelsLast) {
    r.strides = c10::get_channels_last_strides_2d(r.sizes);
  } else if (format == at::MemoryFormat::ChannelsLast3d) {
    r.strides = c10::get_channels_last_strides_3d(r.sizes);
  } else {
    const c10::DimVector st = c10::contiguous_strides(r.sizes);
    r.strides.assign(st.begin(), st.end());
  }
  return r;
}

void cat_into(const at::ITensorListRef& tensors, int64_t dim, const at::Tensor& out) {
  if (out.numel() == 0) return;
  std::vector<vt_tensor> ins;
  const int64_t d = at::maybe_wrap_dim(dim, out.dim());
  for (const at::Tensor& t : tensors) {
    if (t.dim() == 1 && t.size(0) == 0 && out.dim() != 1) continue;  // legacy empty inputs are skipped
    if (t.numel() == 0) continue;
    TORCH_CHECK(t.device() == out.device(), "Expected all tensors to be on the same device, but found at least two "
                "devices, ", out.device(), " and ", t.device(), "!");
    ins.push_back(view_of(t));
  }
  const vt_tensor o = view_of(out);
  check(vt_op_cat(device_index(out), "aten::cat", &o, static_cast<int>(ins.size()), ins.data(), static_cast<int>(d)));
}

at::Tensor cat(const at::ITensorListRef& tensors, int64_t dim) {
  const CatResult m = cat_result(tensors, dim);
  const at::Tensor& first = *tensors.begin();
  at::Tensor out = at::empty_strided(m.sizes, m.strides, first.options().dtype(m.dtype));
  cat_into(tensors, dim, out);
  return out;
}

at::Tensor& cat_out(const at::ITensorListRef& tensors, int64_t dim, at::Tensor& out) {
  const CatResult m = cat_result(tensors, dim);
  TORCH_CHECK_TYPE(c10::canCast(m.dtype, out.scalar_type()), "torch.cat(): input types can't be cast to the desired "
              "output type ", out.scalar_type());
  for (const at::Tensor& t : tensors) resize_out(out, m.sizes, {t});
  at::native::resize_output(out, m.sizes);
  cat_into(tensors, dim, out);
  return out;
}

// ------------------------------------------------------------------ flip, roll, tril/triu

at::Tensor flip(const at::Tensor& self, at::IntArrayRef dims) {
  const auto bits = at::dim_list_to_bitset(dims, self.dim());
  at::Tensor out = at::empty_like(self, at::MemoryFormat::Preserve);
  if (out.numel() == 0) return out;
  const vt_tensor o = view_of(out), i = view_of(self);
  check(vt_op_flip(device_index(self), "aten::flip", &o, &i, bits.to_ullong()));
  return out;
}

at::Tensor roll_impl(const at::Tensor& self, at::IntArrayRef shifts, at::IntArrayRef dims) {
  TORCH_CHECK(!shifts.empty(), "`shifts` required");
  if (dims.empty() && shifts.size() == 1) {
    const int64_t first = 0;  // PyTorch rolls the flattened tensor along dim 0
    return roll_impl(self.contiguous().view(-1), shifts, at::IntArrayRef(first)).view(self.sizes());
  }
  TORCH_CHECK(shifts.size() == dims.size(), "shifts and dimensions must align. shifts: ", shifts.size(),
              ", dims:", dims.size());
  std::vector<int> ds;
  for (int64_t d : dims) ds.push_back(static_cast<int>(at::maybe_wrap_dim(d, self.dim())));
  // CPU rolls one dim at a time, each a cat of two narrows: the result is
  // laid out as cat lays out a new tensor (the input's suggested memory
  // format), not as the input; a shift by a multiple of the dim's size cats
  // an empty narrow, which makes it contiguous. An empty input is cloned.
  auto format = self.suggest_memory_format();
  for (size_t k = 0; k < ds.size() && self.numel() > 0; k++)
    if (shifts[k] % self.size(ds[k]) == 0) format = at::MemoryFormat::Contiguous;
  at::Tensor out = at::empty_like(self, self.numel() == 0 ? at::MemoryFormat::Preserve : format);
  if (out.numel() == 0) return out;
  const vt_tensor o = view_of(out), i = view_of(self);
  check(vt_op_roll(device_index(self), "aten::roll", &o, &i, static_cast<int>(ds.size()), ds.data(), shifts.data()));
  return out;
}

template <int Upper>
at::Tensor& tri_out(const at::Tensor& self, int64_t diagonal, at::Tensor& out) {
  TORCH_CHECK(self.dim() >= 2, Upper ? "triu" : "tril", ": input tensor must have at least 2 dimensions");
  check_out_dtype(out, self.scalar_type());
  if (!out.is_same(self)) at::native::resize_output(out, self.sizes());
  if (out.numel() == 0) return out;
  const char* name = Upper ? "aten::triu" : "aten::tril";
  const vt_tensor o = view_of(out), i = view_of(self);
  check(vt_op_tri(device_index(self), name, &o, &i, diagonal, Upper));
  return out;
}

template <int Upper>
at::Tensor tri(const at::Tensor& self, int64_t diagonal) {
  at::Tensor out = at::empty(self.sizes(), self.options());
  return tri_out<Upper>(self, diagonal, out);
}

template <int Upper>
at::Tensor& tri_(at::Tensor& self, int64_t diagonal) {
  return tri_out<Upper>(self, diagonal, self);
}

// ------------------------------------------------------------------ sort, topk

void prepare_out(at::Tensor& t, at::IntArrayRef sizes, at::IntArrayRef strides, const at::TensorOptions& opts) {
  if (t.defined()) {
    TORCH_CHECK(t.device() == opts.device(), "Expected out tensor on ", opts.device(), " but got ", t.device());
    at::native::resize_output(t, sizes);
  } else {
    t = at::empty_strided(sizes, strides, opts);
  }
}

std::tuple<at::Tensor, at::Tensor> sort_impl(const at::Tensor& self, int64_t dim, bool descending, at::Tensor values,
                                             at::Tensor indices) {
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  // CPU's sort meta function: the input's strides when they are dense,
  // else dense strides in the input's order
  const auto strides = self.is_non_overlapping_and_dense() ? self.strides().vec()
                                                           : at::infer_dense_strides(self.sizes(), self.strides());
  prepare_out(values, self.sizes(), strides, self.options());
  prepare_out(indices, self.sizes(), strides, self.options().dtype(at::kLong));
  TORCH_CHECK(values.scalar_type() == self.scalar_type(), "Expected out tensor to have dtype ", self.scalar_type(),
              ", but got ", values.scalar_type(), " instead");
  if (self.numel() == 0) return {values, indices};
  const bool scalar = self.dim() == 0;
  const vt_tensor v = view_of(scalar ? values.view({1}) : values),
                  i = view_of(scalar ? indices.view({1}) : indices),
                  x = view_of(scalar ? self.view({1}) : self);
  check(vt_op_sort(device_index(self), "aten::sort", &v, &i, &x, static_cast<int>(scalar ? 0 : d), descending ? 1 : 0));
  return {values, indices};
}

std::tuple<at::Tensor, at::Tensor> sort_stable(const at::Tensor& self, std::optional<bool> stable, int64_t dim,
                                               bool descending) {
  return sort_impl(self, dim, descending, {}, {});
}

std::tuple<at::Tensor&, at::Tensor&> sort_values_stable(const at::Tensor& self, std::optional<bool> stable, int64_t dim,
                                                        bool descending, at::Tensor& values, at::Tensor& indices) {
  sort_impl(self, dim, descending, values, indices);
  return std::forward_as_tuple(values, indices);
}

std::tuple<at::Tensor, at::Tensor> topk_impl(const at::Tensor& self, int64_t k, int64_t dim, bool largest,
                                             at::Tensor values, at::Tensor indices) {
  const int64_t d = at::maybe_wrap_dim(dim, self.dim(), true);
  TORCH_CHECK(k >= 0 && k <= (self.dim() > 0 ? self.size(d) : 1), "selected index k out of range");
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
  if (self.dim() > 0) shape[d] = k;
  const auto strides = c10::contiguous_strides(shape);
  prepare_out(values, shape, strides, self.options());
  prepare_out(indices, shape, strides, self.options().dtype(at::kLong));
  if (values.numel() == 0) return {values, indices};
  const bool scalar = self.dim() == 0;
  const vt_tensor v = view_of(scalar ? values.view({1}) : values),
                  i = view_of(scalar ? indices.view({1}) : indices),
                  x = view_of(scalar ? self.view({1}) : self);
  check(vt_op_topk(device_index(self), "aten::topk", &v, &i, &x, static_cast<int>(scalar ? 0 : d), k, largest ? 1 : 0));
  return {values, indices};
}

// ------------------------------------------------------------------ arange, linspace, eye

// PyTorch's x86-64 CPU kernels run 32-byte vectors; parallel_for splits
// n > GRAIN_SIZE elements evenly over the intra-op threads.
int64_t vec_of(const at::Tensor& t) { return 32 / static_cast<int64_t>(t.element_size()); }
int64_t chunk_of(int64_t n) {
  const int64_t grain = at::internal::GRAIN_SIZE, nt = at::get_num_threads();
  if (n <= grain || nt <= 1) return n;
  const int64_t threads = std::min(nt, (n + grain - 1) / grain);
  return (n + threads - 1) / threads;
}

vt_scalar to_vt(const at::Scalar& s) {
  return s.isIntegral(true) ? vt_scalar_from_int(s.toLong()) : vt_scalar_from_double(s.toDouble());
}

at::Tensor& arange_out(const at::Scalar& start, const at::Scalar& end, const at::Scalar& step, at::Tensor& out) {
  int64_t size = 0;
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "arange_tpu", [&]() {
    size = at::native::compute_arange_size<scalar_t>(start, end, step);
  });
  if (out.numel() != size) {
    if (out.numel() > 0)
      TORCH_WARN("The number of elements in the out tensor of shape ", out.sizes(), " is ", out.numel(),
                 " which does not match the computed number of elements ", size,
                 ". Note that this may occur as a result of rounding error. "
                 "The out tensor will be resized to a tensor of shape (", size, ",).");
    out.resize_({size});
  }
  if (size == 0) return out;
  at::Tensor r = out.is_contiguous() ? out : at::empty({size}, out.options());
  const vt_tensor o = view_of(r.view({size}));
  check(vt_op_arange(device_index(out), "aten::arange", &o, to_vt(start), to_vt(step), vec_of(r), chunk_of(size)));
  if (!r.is_same(out)) out.copy_(r);
  return out;
}

at::Tensor& linspace_out(const at::Scalar& start, const at::Scalar& end, int64_t steps, at::Tensor& out) {
  TORCH_CHECK(steps >= 0, "number of steps must be non-negative");
  VT_FALLBACK_UNLESS(!c10::isComplexType(out.scalar_type()), lacking({out}));
  if (out.numel() != steps) out.resize_({steps});
  if (steps == 0) return out;
  // As CPU, the ends are first converted to the output dtype: that raises
  // when they do not fit, and integer ends wrap (-5 is 251 for uint8).
  at::Scalar lo = start, hi = end;
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "linspace_tpu", [&]() {
    const scalar_t a = start.to<scalar_t>(), b = end.to<scalar_t>();
    if (c10::isIntegralType(out.scalar_type(), /*includeBool=*/false)) lo = a, hi = b;
  });
  at::Tensor r = out.is_contiguous() ? out : at::empty({steps}, out.options());
  const vt_tensor o = view_of(r.view({steps}));
  // PyTorch's linspace kernel is scalar (no SIMD blocks).
  check(vt_op_linspace(device_index(out), "aten::linspace", &o, to_vt(lo), to_vt(hi), 0, chunk_of(steps)));
  if (!r.is_same(out)) out.copy_(r);
  return out;
}

at::Tensor& eye_m_out(int64_t n, int64_t m, at::Tensor& out) {
  TORCH_CHECK(n >= 0, "n must be greater or equal to 0, got ", n);
  TORCH_CHECK(m >= 0, "m must be greater or equal to 0, got ", m);
  out.resize_({n, m});
  out.zero_();
  const int64_t sz = std::min(n, m);
  if (sz > 0) out.as_strided({sz}, {out.stride(0) + out.stride(1)}).fill_(1);
  return out;
}

// ------------------------------------------------------------------ searchsorted, bucketize

at::Tensor& searchsorted_out(const at::Tensor& sorted, const at::Tensor& self, bool out_int32, bool right,
                             std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter,
                             at::Tensor& out) {
  TORCH_CHECK(!side || *side == "left" || *side == "right",
              "torch.searchsorted(): side can only be 'left' or 'right' but got ", *side);
  const bool simple = (!sorter || !sorter->defined()) && sorted.scalar_type() == self.scalar_type() &&
                      sorted.dim() >= 1 && takes(sorted) && takes(self) &&
                      (sorted.dim() == 1 || (sorted.dim() == self.dim() &&
                                             sorted.sizes().slice(0, sorted.dim() - 1) ==
                                                 self.sizes().slice(0, self.dim() - 1))) &&
                      (!side || (*side == "right") == right || !right);
  VT_FALLBACK_UNLESS(simple, "a sorter, mixed dtypes or these shapes");
  const bool rt = side ? *side == "right" : right;
  TORCH_CHECK(out.scalar_type() == (out_int32 ? at::kInt : at::kLong), "torch.searchsorted(): output tensor's dtype is "
              "wrong, it can only be Int(int32) or Long(int64) depending on whether out_int32 flag is True, but we got "
              "output tensor's dtype ", out.scalar_type(), " and out_int32 flag is ", out_int32 ? "True" : "False");
  at::native::resize_output(out, self.sizes());
  if (out.numel() == 0) return out;
  const vt_tensor o = view_of(out), s = view_of(sorted),
                  v = view_of(self);
  check(vt_op_searchsorted(device_index(self), "aten::searchsorted", &o, &s, &v, rt ? 1 : 0));
  return out;
}

at::Tensor searchsorted_impl(const at::Tensor& sorted, const at::Tensor& self, bool out_int32, bool right,
                        std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter) {
  at::Tensor out = at::empty({0}, self.options().dtype(out_int32 ? at::kInt : at::kLong));
  return searchsorted_out(sorted, self, out_int32, right, side, sorter, out);
}

at::Tensor bucketize(const at::Tensor& self, const at::Tensor& boundaries, bool out_int32, bool right) {
  TORCH_CHECK(boundaries.dim() == 1, "boundaries tensor must be 1 dimension, but got dim(", boundaries.dim(), ")");
  return searchsorted_impl(boundaries, self, out_int32, right, std::nullopt, std::nullopt);
}

// ------------------------------------------------------------------ isin

// CPU's dtype rules: bool and complex refused, the wide unsigned types unimplemented.
void check_isin_dtype(c10::ScalarType t) {
  TORCH_CHECK(t != at::kBool && !at::isComplexType(t), "Unsupported input type encountered for isin(): ", t);
  TORCH_CHECK_NOT_IMPLEMENTED(t != at::kUInt16 && t != at::kUInt32 && t != at::kUInt64,
                              "\"isin\" not implemented for '", t, "'");
}

// out[i] = elements[i] in test (xor invert), in the two operands' promoted
// type as CPU compares. A small test set compares every pair; a large one
// is sorted and searched (NaN sorts last and equals nothing).
at::Tensor& isin_into(const at::Tensor& elements, const at::Tensor& test, bool invert, at::Tensor& out) {
  check_isin_dtype(elements.scalar_type());
  check_isin_dtype(test.scalar_type());
  TORCH_CHECK(out.scalar_type() == at::kBool, "Expected out tensor to have dtype bool, but got ", out.scalar_type(),
              " instead");
  at::native::resize_output(out, elements.sizes());
  if (out.numel() == 0) return out;
  if (test.numel() == 0) return out.fill_(invert);
  const auto ct = at::result_type(elements, test);
  const auto e = elements.to(ct), t = test.to(ct).flatten();
  at::Tensor hit;
  if (static_cast<double>(e.numel()) * static_cast<double>(t.numel()) <= static_cast<double>(1 << 22)) {
    hit = at::eq(e.unsqueeze(-1), t).any(-1);
  } else {
    const auto sorted = std::get<0>(at::sort(t));
    const auto idx = at::searchsorted(sorted, e.contiguous()).clamp_max_(sorted.numel() - 1);
    hit = at::eq(sorted.index_select(0, idx.flatten()).view(e.sizes()), e);
  }
  if (invert) hit.logical_not_();
  return out.copy_(hit);
}

at::Tensor& isin_tt_out(const at::Tensor& e, const at::Tensor& t, bool, bool invert, at::Tensor& out) {
  return isin_into(e, t, invert, out);
}
at::Tensor isin_tt(const at::Tensor& e, const at::Tensor& t, bool unique, bool invert) {
  at::Tensor out = at::empty({0}, e.options().dtype(at::kBool));
  return isin_tt_out(e, t, unique, invert, out);
}
at::Tensor& isin_ts_out(const at::Tensor& e, const at::Scalar& t, bool, bool invert, at::Tensor& out) {
  return isin_into(e, at::scalar_tensor(t, e.options().dtype(t.type())), invert, out);
}
at::Tensor isin_ts(const at::Tensor& e, const at::Scalar& t, bool unique, bool invert) {
  at::Tensor out = at::empty({0}, e.options().dtype(at::kBool));
  return isin_ts_out(e, t, unique, invert, out);
}
at::Tensor& isin_st_out(const at::Scalar& e, const at::Tensor& t, bool, bool invert, at::Tensor& out) {
  return isin_into(at::scalar_tensor(e, t.options().dtype(e.type())), t, invert, out);
}
at::Tensor isin_st(const at::Scalar& e, const at::Tensor& t, bool unique, bool invert) {
  at::Tensor out = at::empty({0}, t.options().dtype(at::kBool));
  return isin_st_out(e, t, unique, invert, out);
}

// The gradient of x.unfold(dim, size, step): window w's element j came
// from position w * step + j, so for each j the windows' gradients add
// into one strided slice (positions j, j + step, ...; no two alike): size
// native adds into zeros. A 0-dim input unfolds into one window of `size`
// (0 or 1) values, with no window dim.
at::Tensor unfold_backward(const at::Tensor& grad, c10::SymIntArrayRef input_sizes, int64_t dim, int64_t size,
                           int64_t step) {
  const std::vector<int64_t> sizes = C10_AS_INTARRAYREF_SLOW(input_sizes).vec();
  TORCH_CHECK(step > 0, "unfold_backward: step is ", step, " but must be > 0");
  if (sizes.empty()) return size > 0 ? grad.reshape({}).clone() : at::zeros({}, grad.options());
  // a reduced-precision gradient sums in float32 and rounds once, as CPU's kernel
  const bool wide = grad.scalar_type() == at::kBFloat16 || grad.scalar_type() == at::kHalf;
  at::Tensor g = at::zeros(sizes, wide ? grad.options().dtype(at::kFloat) : grad.options());
  const int64_t d = at::maybe_wrap_dim(dim, static_cast<int64_t>(g.dim()));
  TORCH_CHECK(grad.dim() == g.dim() + 1 && grad.size(-1) == size,
              "unfold_backward: a gradient of shape ", grad.sizes(), " does not come from unfolding a tensor of shape ",
              input_sizes, " with size ", size);
  const int64_t windows = grad.size(d);
  if (windows > 0)
    for (int64_t j = 0; j < size; j++) g.slice(d, j, j + (windows - 1) * step + 1, step).add_(grad.select(-1, j));
  return wide ? g.to(grad.scalar_type()) : g;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  VT_IMPL(m, "unfold_backward", unfold_backward);
  VT_IMPL(m, "isin.Tensor_Tensor", isin_tt);
  VT_IMPL(m, "isin.Tensor_Tensor_out", isin_tt_out);
  VT_IMPL(m, "isin.Tensor_Scalar", isin_ts);
  VT_IMPL(m, "isin.Tensor_Scalar_out", isin_ts_out);
  VT_IMPL(m, "isin.Scalar_Tensor", isin_st);
  VT_IMPL(m, "isin.Scalar_Tensor_out", isin_st_out);
  VT_IMPL(m, "cat", cat);
  VT_IMPL(m, "cat.out", cat_out);
  VT_IMPL(m, "flip", flip);
  VT_IMPL(m, "roll", roll_impl);
  VT_IMPL(m, "tril", tri<0>);
  VT_IMPL(m, "triu", tri<1>);
  VT_IMPL(m, "tril_", tri_<0>);
  VT_IMPL(m, "triu_", tri_<1>);
  VT_IMPL(m, "tril.out", tri_out<0>);
  VT_IMPL(m, "triu.out", tri_out<1>);
  VT_IMPL(m, "sort.stable", sort_stable);
  VT_IMPL(m, "sort.values_stable", sort_values_stable);
  VT_IMPL(m, "topk", [](const at::Tensor& s, int64_t k, int64_t d, bool largest, bool sorted) {
    return topk_impl(s, k, d, largest, {}, {});
  });
  VT_IMPL(m, "topk.values", [](const at::Tensor& s, int64_t k, int64_t d, bool largest, bool sorted, at::Tensor& v,
                           at::Tensor& i) {
    topk_impl(s, k, d, largest, v, i);
    return std::forward_as_tuple(v, i);
  });
  VT_IMPL(m, "arange.start_out", arange_out);
  VT_IMPL(m, "linspace.out", linspace_out);
  VT_IMPL(m, "eye.out", [](int64_t n, at::Tensor& out) -> at::Tensor& { return eye_m_out(n, n, out); });
  VT_IMPL(m, "eye.m_out", eye_m_out);
  VT_IMPL(m, "searchsorted.Tensor", searchsorted_impl);
  VT_IMPL(m, "searchsorted.Tensor_out", searchsorted_out);
  VT_IMPL(m, "bucketize.Tensor", bucketize);
}

}  // namespace vtpu
