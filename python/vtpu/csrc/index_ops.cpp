// index_ops.cpp — adapters from ATen's indexing ops to the runtime's queued
// kernels: PyTorch's argument checks and messages, output shapes, bool-mask
// expansion for advanced indexing, and the count-then-fill sequence of ops
// whose output size depends on the data. One queued C call per kernel.
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorUtils.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/IndexingUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/ScatterGatherChecks.h>
#include <ATen/ops/one_hot_native.h>
#include <torch/library.h>

#include "common.h"
#include "device_check.h"

namespace vtpu {
namespace {

// Every tensor describable (dtype, rank) by the C runtime?
bool native(std::initializer_list<const at::Tensor*> ts) {
  vt_tensor d{};
  for (const at::Tensor* t : ts)
    if (t->defined() && !describe(*t, &d)) return false;
  return true;
}

// Index and mask operands may come from the host (as on CUDA): copy them over.
at::Tensor on_device(const at::Tensor& t, const at::Tensor& like) {
  return t.defined() && t.device() != like.device() ? t.to(like.device()) : t;
}

vt_scalar scalar_of(const at::Scalar& s) {
  vt_scalar v{};
  if (s.isFloatingPoint()) {
    v.f = s.toDouble();
    v.is_float = 1;
  } else {
    VT_FALLBACK_UNLESS(!s.isComplex(), "complex scalars");
    v.i = s.isBoolean() ? static_cast<int64_t>(s.toBool()) : s.toLong();
    v.f = static_cast<double>(v.i);
  }
  return v;
}

// CPU lets these in-place ops write an expanded tensor (each repeated element
// gets the same value), with a deprecation warning; so does vtpu.
void warn_if_expanded(const at::Tensor& self, const char* op) {
  if (at::has_internal_overlap(self) == at::MemOverlap::Yes)
    TORCH_WARN("Use of ", op, " on expanded tensors is deprecated. Please clone() the tensor before performing this "
               "operation. This also applies to advanced indexing e.g. tensor[",
               std::string(op) == "index_put_" ? "indices] = tensor" : "mask] = scalar");
}

// out holds self's values before an in-place style kernel (scatter,
// index_add, index_copy) runs on it. CPU's checks come first, before out is
// touched: out may not repeat elements nor overlap what it is computed from.
void prepare_out(const at::Tensor& self, at::Tensor& out,
                 std::initializer_list<std::reference_wrapper<const at::Tensor>> reads) {
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), "Expected out tensor to have dtype ", self.scalar_type(),
              ", but got ", out.scalar_type(), " instead");
  at::assert_no_internal_overlap(out);
  for (const at::Tensor& r : reads)
    if (r.defined()) at::assert_no_overlap(out, r);
  at::native::resize_output(out, self.sizes());
  if (!out.is_same(self)) out.copy_(self);
}

// ------------------------------------------------------------------ index_select, embedding backward

// index_select into out, its errors named `name` (embedding is an
// index_select, but its user called embedding).
at::Tensor& index_select_named(const at::Tensor& self, int64_t dim, const at::Tensor& index_, at::Tensor& out,
                               const char* name) {
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  TORCH_CHECK_INDEX(index_.dim() <= 1, "index_select(): Index is supposed to be a vector");
  TORCH_CHECK(index_.scalar_type() == at::kLong || index_.scalar_type() == at::kInt,
              "index_select(): Expected dtype int32 or int64 for index");
  TORCH_CHECK(self.scalar_type() == out.scalar_type(), "index_select(): self and result must have the same scalar type");
  if (self.dim() == 0)
    TORCH_CHECK_INDEX(index_.numel() == 1, "index_select(): Index to scalar can have only 1 value, got ",
                      index_.numel(), " value(s)");
  // CPU's checks of out, before it is resized
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, self);
  at::assert_no_overlap(out, index_);
  VT_FALLBACK_UNLESS(native({&self, &out}), lacking({self, out}));
  // CPU's check for an empty self of 2+ dims (a RuntimeError, before any index is read)
  if (self.dim() > 1 && index_.numel() > 0 && self.numel() == 0)
    TORCH_CHECK(self.size(d) > 0, "index_select(): self indexing axis dim should be positive");
  const at::Tensor index = on_device(index_, self);
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
  if (self.dim()) shape[d] = index.numel();
  resize_out(out, shape, {self, index});
  if (out.numel() == 0) return out;
  const vt_tensor o = view_of(out), s = view_of(self), i = view_of(index);
  check(vt_op_index_select(device_index(self), name, &o, &s, static_cast<int>(d), &i));
  return out;
}

at::Tensor& index_select_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, at::Tensor& out) {
  return index_select_named(self, dim, index, out, "aten::index_select");
}

at::Tensor index_select(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  at::Tensor out = at::empty({0}, self.options());
  return index_select_out(self, dim, index, out);
}

// embedding's forward, as CPU computes it (rows of weight picked by the
// flattened indices), with its errors named embedding.
at::Tensor embedding(const at::Tensor& weight, const at::Tensor& indices, c10::SymInt padding_idx,
                     bool scale_grad_by_freq, bool sparse) {
  TORCH_CHECK(weight.dim() == 2, "'weight' must be 2-D");
  at::checkScalarTypes("embedding", at::TensorArg(indices, "indices", 1), {at::kLong, at::kInt});
  at::Tensor out = at::empty({0}, weight.options());
  index_select_named(weight, 0, indices.reshape(-1), out, "aten::embedding");
  if (indices.dim() == 1) return out;
  std::vector<int64_t> size(indices.sizes().begin(), indices.sizes().end());
  size.push_back(weight.size(1));
  return out.view(size);
}

// one_hot with CPU's checks and messages (PyTorch skips them on other
// devices and leaves the error to scatter's bounds check): they read the
// smallest and largest class, so one_hot waits for its input, as on CPU.
at::Tensor one_hot(const at::Tensor& self, int64_t num_classes) {
  TORCH_CHECK(self.scalar_type() == at::kLong, "one_hot is only applicable to index tensor of type LongTensor.");
  if (self.numel() > 0) {
    TORCH_CHECK(self.min().item<int64_t>() >= 0, "Class values must be non-negative.");
    if (num_classes != -1)
      TORCH_CHECK(num_classes > self.max().item<int64_t>(), "Class values must be smaller than num_classes.");
  }
  return at::native::one_hot(self, num_classes);
}

at::Tensor embedding_dense_backward(const at::Tensor& grad_output, const at::Tensor& indices_,
                                   c10::SymInt num_weights, c10::SymInt padding_idx, bool scale_grad_by_freq) {
  at::checkScalarTypes("embedding_backward", at::TensorArg(indices_, "indices", 2), {at::kLong, at::kInt});
  VT_FALLBACK_UNLESS(native({&grad_output}) && c10::isFloatingType(grad_output.scalar_type()), lacking({grad_output}));
  const at::Tensor indices = on_device(indices_, grad_output).reshape({-1});
  const int64_t D = grad_output.size(-1);
  const at::Tensor grad = grad_output.reshape({indices.numel(), D});
  at::Tensor gw = at::empty({num_weights.expect_int(), D}, grad_output.options());
  if (gw.numel() == 0) return gw;
  const vt_tensor w = view_of(gw), g = view_of(grad), i = view_of(indices);
  check(vt_op_embedding_dense_backward(device_index(grad_output), "aten::embedding_dense_backward", &w, &g, &i,
                                       padding_idx.expect_int(), scale_grad_by_freq ? 1 : 0));
  return gw;
}

// ------------------------------------------------------------------ gather, scatter

at::Tensor& gather_out(const at::Tensor& self, int64_t dim, const at::Tensor& index_, bool sparse_grad,
                       at::Tensor& out) {
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  at::native::scatter_gather_dtype_check("gather", self, index_, std::nullopt);
  if (index_.numel() != 0) at::native::gather_shape_check(self, d, index_);  // CPU skips it for an empty index
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), "gather(): Expected out tensor to have dtype ",
              self.scalar_type(), ", but got ", out.scalar_type(), " instead");
  VT_FALLBACK_UNLESS(native({&self, &out}), lacking({self, out}));
  const at::Tensor index = on_device(index_, self);
  resize_out(out, index.sizes(), {self, index});
  if (out.numel() == 0) return out;
  const vt_tensor o = view_of(out), s = view_of(self), i = view_of(index);
  check(vt_op_gather(device_index(self), "aten::gather", &o, &s, static_cast<int>(d), &i));
  return out;
}

at::Tensor& scatter_impl(const char* name, const at::Tensor& self, int64_t dim, const at::Tensor& index_,
                         const at::Tensor* src, const at::Scalar* value, vt_scatter_reduce op, bool include_self,
                         at::Tensor& out) {
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  const std::optional<at::Tensor> src_opt = src ? std::optional<at::Tensor>(*src) : std::nullopt;
  if (value) check_scalar_fits(*value, self.scalar_type());
  at::native::scatter_gather_dtype_check(name, self, index_, src_opt);
  at::native::scatter_shape_check(self, d, index_, src_opt);
  const at::Tensor no_src;
  prepare_out(self, out, {index_, src ? *src : no_src});
  if (index_.numel() == 0 || out.numel() == 0) return out;
  const at::Tensor index = on_device(index_, self);
  at::Tensor src_dev = src ? on_device(*src, self) : at::Tensor();
  const vt_tensor o = view_of(out), i = view_of(index);
  vt_tensor s{};
  if (src) s = view_of(src_dev);
  vt_scalar v = value ? scalar_of(*value) : vt_scalar{};
  // the queue keeps the op's name until the op has run: a static string
  const std::string_view n(name);
  const char* qualified = n == "scatter_add" ? "aten::scatter_add" : n == "scatter_reduce" ? "aten::scatter_reduce"
                                                                                          : "aten::scatter";
  check(vt_op_scatter(device_index(self), qualified, &o, static_cast<int>(d), &i, src ? &s : nullptr, nullptr, v, op,
                      include_self ? 1 : 0));
  return out;
}

vt_scatter_reduce old_reduce(c10::string_view r) {
  if (r == "add") return VT_SCATTER_SUM;
  if (r == "multiply") return VT_SCATTER_PROD;
  TORCH_CHECK(false, "reduce argument must be either add or multiply.");
}

vt_scatter_reduce two_reduce(c10::string_view r) {
  if (r == "sum") return VT_SCATTER_SUM;
  if (r == "prod") return VT_SCATTER_PROD;
  if (r == "mean") return VT_SCATTER_MEAN;
  if (r == "amax") return VT_SCATTER_AMAX;
  if (r == "amin") return VT_SCATTER_AMIN;
  TORCH_CHECK(false, "reduce argument must be either sum, prod, mean, amax or amin, got ", r);
}

at::Tensor& scatter_src_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                            at::Tensor& out) {
  VT_FALLBACK_UNLESS(native({&self, &out, &src}), lacking({self, out, src}));
  return scatter_impl("scatter", self, dim, index, &src, nullptr, VT_SCATTER_ASSIGN, true, out);
}

at::Tensor& scatter_value_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value,
                              at::Tensor& out) {
  VT_FALLBACK_UNLESS(native({&self, &out}), lacking({self, out}));
  return scatter_impl("scatter", self, dim, index, nullptr, &value, VT_SCATTER_ASSIGN, true, out);
}

at::Tensor& scatter_reduce_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                               c10::string_view reduce, at::Tensor& out) {
  const auto op = old_reduce(reduce);
  VT_FALLBACK_UNLESS(native({&self, &out, &src}), lacking({self, out, src}));
  return scatter_impl("scatter", self, dim, index, &src, nullptr, op, true, out);
}

at::Tensor& scatter_value_reduce_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                     const at::Scalar& value, c10::string_view reduce, at::Tensor& out) {
  const auto op = old_reduce(reduce);
  VT_FALLBACK_UNLESS(native({&self, &out}), lacking({self, out}));
  return scatter_impl("scatter", self, dim, index, nullptr, &value, op, true, out);
}

at::Tensor& scatter_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                            at::Tensor& out) {
  VT_FALLBACK_UNLESS(native({&self, &out, &src}), lacking({self, out, src}));
  return scatter_impl("scatter_add", self, dim, index, &src, nullptr, VT_SCATTER_SUM, true, out);
}

at::Tensor& scatter_reduce_two_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                   const at::Tensor& src, c10::string_view reduce, bool include_self,
                                   at::Tensor& out) {
  const auto op = two_reduce(reduce);
  VT_FALLBACK_UNLESS(native({&self, &out, &src}), lacking({self, out, src}));
  return scatter_impl("scatter_reduce", self, dim, index, &src, nullptr, op, include_self, out);
}

// ------------------------------------------------------------------ index_add, index_copy, index_fill

void check_vector_index(const char* op, const at::Tensor& index) {
  TORCH_CHECK_INDEX(index.dim() <= 1, op, "(): Index is supposed to be a vector");
  TORCH_CHECK(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt, op,
              "(): Expected dtype int32/int64 for index");
}

void check_source(const char* op, const at::Tensor& self, int64_t d, const at::Tensor& index,
                  const at::Tensor& source) {
  TORCH_CHECK(self.scalar_type() == source.scalar_type(), op, "(): self (", self.scalar_type(), ") and source (",
              source.scalar_type(), ") must have the same scalar type");
  const int64_t n = source.dim() > 0 ? source.size(d) : 1;
  TORCH_CHECK(index.numel() == n, op, "(): Number of indices (", index.numel(), ") should be equal to source.size(dim) (",
              n, ")");
  TORCH_CHECK(std::max<int64_t>(self.dim(), 1) == std::max<int64_t>(source.dim(), 1), op,
              "(): Source/destination tensor must have same slice shapes.");
  for (int64_t k = 0; k < self.dim(); k++)
    if (k != d)
      TORCH_CHECK(self.size(k) == source.size(k), op, "(): Source/destination tensor must have same slice shapes. ",
                  "Destination slice shape: ", self.sizes(), " at dimension ", d, " and source slice shape: ",
                  source.sizes(), " at dimension 0.");
}

at::Tensor& index_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index_, const at::Tensor& source,
                          const at::Scalar& alpha, at::Tensor& out) {
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  check_vector_index("index_add_", index_);
  check_source("index_add_", self, d, index_, source);
  VT_FALLBACK_UNLESS(native({&self, &out, &source}), lacking({self, out, source}));
  prepare_out(self, out, {index_, source});
  if (index_.numel() == 0 || out.numel() == 0) return out;
  const at::Tensor index = on_device(index_, self), src = on_device(source, self);
  const vt_tensor o = view_of(out), i = view_of(index), s = view_of(src);
  check(vt_op_index_add(device_index(self), "aten::index_add", &o, static_cast<int>(d), &i, &s, scalar_of(alpha)));
  return out;
}

at::Tensor& index_copy_out(const at::Tensor& self, int64_t dim, const at::Tensor& index_, const at::Tensor& source,
                           at::Tensor& out) {
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  TORCH_CHECK_INDEX(index_.dim() < 2, "index_copy_(): Index should have dimension 1 or 0 (got ", index_.dim(), ")");
  TORCH_CHECK(index_.scalar_type() == at::kLong, "index_copy_(): Expected a long tensor for index, but got ",
              index_.scalar_type());
  check_source("index_copy_", self, d, index_, source);
  VT_FALLBACK_UNLESS(native({&self, &out, &source}), lacking({self, out, source}));
  prepare_out(self, out, {index_, source});
  if (index_.numel() == 0 || out.numel() == 0) return out;
  const at::Tensor index = on_device(index_, self), src = on_device(source, self);
  const vt_tensor o = view_of(out), i = view_of(index), s = view_of(src);
  check(vt_op_index_copy(device_index(self), "aten::index_copy", &o, static_cast<int>(d), &i, &s));
  return out;
}

at::Tensor& index_fill_impl(at::Tensor& self, int64_t dim, const at::Tensor& index_, const at::Tensor* value_t,
                            const at::Scalar& value) {
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  TORCH_CHECK_INDEX(index_.scalar_type() == at::kLong, "index_fill_(): Expected dtype int64 for index.");
  TORCH_CHECK_INDEX(index_.dim() <= 1, "index_fill_(): Index is supposed to be a vector");
  if (!value_t) {
    TORCH_CHECK(!value.isComplex() || at::isComplexType(self.scalar_type()),
                "index_fill_(): Converting complex Scalar to non-complex type is not supported");
    check_scalar_fits(value, self.scalar_type());
  }
  warn_if_expanded(self, "index_fill_");
  if (index_.numel() == 0 || self.numel() == 0) return self;
  const at::Tensor index = on_device(index_, self);
  const vt_tensor o = view_of(self), i = view_of(index);
  vt_tensor vt{};
  if (value_t) vt = view_of(*value_t);
  check(vt_op_index_fill(device_index(self), "aten::index_fill_", &o, static_cast<int>(d), &i,
                         value_t ? &vt : nullptr, value_t ? vt_scalar{} : scalar_of(value)));
  return self;
}

at::Tensor& index_fill_scalar(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value) {
  VT_FALLBACK_UNLESS(native({&self}), lacking({self}));
  return index_fill_impl(self, dim, index, nullptr, value);
}

at::Tensor& index_fill_tensor(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "index_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  VT_FALLBACK_UNLESS(native({&self, &value}), lacking({self, value}));
  if (!is_tpu(value)) return index_fill_impl(self, dim, index, nullptr, value.item());
  return index_fill_impl(self, dim, index, &value, 0);
}

// ------------------------------------------------------------------ masks and nonzero

// Number of nonzero elements of t: one queued count kernel, then a wait.
int64_t count_nonzero_sync(const at::Tensor& t, const char* name) {
  const int dev = device_index(t);
  at::Tensor cnt = at::empty({}, t.options().dtype(at::kLong));
  const vt_tensor c = view_of(cnt), s = view_of(t);
  check(vt_op_count_nonzero(dev, name, &c, &s));
  wait_readable(cnt);
  return *static_cast<const int64_t*>(cnt.const_data_ptr());
}

at::Tensor& nonzero_out(const at::Tensor& self, at::Tensor& out) {
  TORCH_CHECK(out.scalar_type() == at::kLong, "nonzero: Expected out tensor to have scalar type Long but got scalar type",
              out.scalar_type());
  VT_FALLBACK_UNLESS(native({&self}), lacking({self}));
  const int64_t n = self.numel() ? count_nonzero_sync(self, "aten::nonzero") : 0;
  // A resized result is column-major, as CPU's (its transpose is contiguous:
  // code such as COO construction from nonzero().t() relies on it).
  if (at::native::resize_output_check(out, {n, self.dim()})) out.resize_({self.dim(), n}).t_();
  if (n == 0 || self.dim() == 0) return out;
  const vt_tensor o = view_of(out), s = view_of(self);
  check(vt_op_nonzero(device_index(self), "aten::nonzero", &o, &s));
  return out;
}

at::Tensor nonzero(const at::Tensor& self) {
  at::Tensor out = at::empty({0}, self.options().dtype(at::kLong));
  return nonzero_out(self, out);
}

void check_bool_mask(const char* op, const at::Tensor& mask) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, op, " only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
}

at::Tensor& masked_fill_impl(at::Tensor& self, const at::Tensor& mask_, const at::Tensor* value_t,
                             const at::Scalar& value) {
  check_bool_mask("masked_fill_", mask_);
  if (!value_t) check_scalar_fits(value, self.scalar_type());
  warn_if_expanded(self, "masked_fill_");
  const at::Tensor mask = on_device(mask_, self);
  c10::MaybeOwned<at::Tensor> m = at::expand_inplace(self, mask, "masked_fill_");
  if (self.numel() == 0) return self;
  const vt_tensor o = view_of(self), k = view_of(*m);
  vt_tensor vt{};
  if (value_t) vt = view_of(*value_t);
  check(vt_op_masked_fill(device_index(self), "aten::masked_fill_", &o, &k, value_t ? &vt : nullptr,
                          value_t ? vt_scalar{} : scalar_of(value)));
  return self;
}

at::Tensor& masked_fill_scalar(at::Tensor& self, const at::Tensor& mask, const at::Scalar& value) {
  VT_FALLBACK_UNLESS(native({&self}), lacking({self}));
  return masked_fill_impl(self, mask, nullptr, value);
}

at::Tensor& masked_fill_tensor(at::Tensor& self, const at::Tensor& mask, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  VT_FALLBACK_UNLESS(native({&self, &value}), lacking({self, value}));
  if (!is_tpu(value)) return masked_fill_impl(self, mask, nullptr, value.item());
  return masked_fill_impl(self, mask, &value, 0);
}

at::Tensor& masked_select_out(const at::Tensor& self, const at::Tensor& mask_, at::Tensor& out) {
  TORCH_CHECK(mask_.scalar_type() == at::kBool || mask_.scalar_type() == at::kByte,
              "masked_select: expected BoolTensor or ByteTensor for mask");
  TORCH_CHECK(self.scalar_type() == out.scalar_type(), "masked_select(): self and result must have the same scalar type");
  VT_FALLBACK_UNLESS(native({&self}), lacking({self}));
  const at::Tensor mask = on_device(mask_, self);
  const auto shape = at::infer_size(self.sizes(), mask.sizes());
  const at::Tensor mb = mask.expand(shape);
  const int64_t n = mb.numel() ? count_nonzero_sync(mb, "aten::masked_select") : 0;
  resize_out(out, {n}, {self, mask});
  if (n == 0) return out;
  const vt_tensor o = view_of(out), s = view_of(self), k = view_of(mask);
  check(vt_op_masked_select(device_index(self), "aten::masked_select", &o, &s, &k));
  return out;
}

at::Tensor masked_select(const at::Tensor& self, const at::Tensor& mask) {
  at::Tensor out = at::empty({0}, self.options());
  return masked_select_out(self, mask, out);
}

at::Tensor& masked_scatter_(at::Tensor& self, const at::Tensor& mask_, const at::Tensor& source_) {
  check_bool_mask("masked_scatter_", mask_);
  TORCH_CHECK(self.scalar_type() == source_.scalar_type(),
              "masked_scatter_: expected self and source to have same dtypes but got", self.scalar_type(), " and ",
              source_.scalar_type());
  VT_FALLBACK_UNLESS(native({&self}), lacking({self}));
  at::assert_no_internal_overlap(self);
  const at::Tensor mask = on_device(mask_, self), source = on_device(source_, self);
  c10::MaybeOwned<at::Tensor> m = at::expand_inplace(self, mask, "masked_scatter_");
  if (self.numel() == 0) return self;
  const vt_tensor o = view_of(self), k = view_of(*m), s = view_of(source);
  check(vt_op_masked_scatter(device_index(self), "aten::masked_scatter_", &o, &k, &s));
  return self;
}

// ------------------------------------------------------------------ take, index, index_put

at::Tensor& take_out(const at::Tensor& self, const at::Tensor& index_, at::Tensor& out) {
  TORCH_CHECK(index_.scalar_type() == at::kLong, "take(): Expected a long tensor for index, but got ",
              index_.scalar_type());
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), "take(): self and out expected to have the same dtype, but got self.dtype = ",
              self.scalar_type(), " and out.dtype = ", out.scalar_type());
  TORCH_CHECK_INDEX(!(self.numel() == 0 && index_.numel() != 0), "take(): tried to take from an empty tensor");
  VT_FALLBACK_UNLESS(native({&self}), lacking({self}));
  const at::Tensor index = on_device(index_, self);
  resize_out(out, index.sizes(), {self, index});
  if (out.numel() == 0) return out;
  const vt_tensor o = view_of(out), s = view_of(self), i = view_of(index);
  check(vt_op_take(device_index(self), "aten::take", &o, &s, &i));
  return out;
}

at::Tensor take(const at::Tensor& self, const at::Tensor& index) {
  at::Tensor out = at::empty({0}, self.options());
  return take_out(self, index, out);
}

// Bool masks become integer index columns (a nonzero: count kernel + wait),
// host index tensors move to the device; the C side broadcasts the rest.
struct IndexList {
  std::vector<at::Tensor> keep;
  std::vector<vt_tensor> descs;
  std::vector<const vt_tensor*> ptrs;
};

IndexList index_list(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices) {
  at::native::checkIndexTensorTypes(indices, /*allow_int=*/true);
  IndexList l;
  l.keep = at::native::expandTensors(self, indices, /*ensure_same_device=*/true);
  TORCH_CHECK_INDEX(static_cast<int64_t>(l.keep.size()) <= self.dim(), "too many indices for tensor of dimension ",
                    self.dim(), " (got ", l.keep.size(), ")");
  l.descs.resize(l.keep.size());
  for (size_t k = 0; k < l.keep.size(); k++) {
    if (!l.keep[k].defined()) {
      l.ptrs.push_back(nullptr);
      continue;
    }
    l.descs[k] = view_of(l.keep[k]);
  }
  l.ptrs.clear();
  for (size_t k = 0; k < l.keep.size(); k++) l.ptrs.push_back(l.keep[k].defined() ? &l.descs[k] : nullptr);
  return l;
}

at::Tensor& index_out(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices, at::Tensor& out) {
  TORCH_CHECK_INDEX(!indices.empty(), "at least one index must be provided");
  VT_FALLBACK_UNLESS(native({&self}), lacking({self}));
  const IndexList l = index_list(self, indices);
  const vt_tensor s = view_of(self);
  int32_t nd = 0;
  int64_t sizes[VT_MAX_DIMS];
  check(vt_index_shape(&s, static_cast<int>(l.ptrs.size()), l.ptrs.data(), &nd, sizes));
  at::native::resize_output(out, at::IntArrayRef(sizes, nd));
  if (out.numel() == 0) return out;
  const vt_tensor o = view_of(out);
  check(vt_op_index(device_index(self), "aten::index", &o, &s, static_cast<int>(l.ptrs.size()), l.ptrs.data()));
  return out;
}

at::Tensor index(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices) {
  TORCH_CHECK_INDEX(!indices.empty(), "at least one index must be provided");
  VT_FALLBACK_UNLESS(native({&self}), lacking({self}));
  at::Tensor out = at::empty({0}, self.options());
  return index_out(self, indices, out);
}

at::Tensor& index_put_impl_(at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices,
                            const at::Tensor& values_, bool accumulate, bool unsafe) {
  VT_FALLBACK_UNLESS(native({&self, &values_}), lacking({self, values_}));
  warn_if_expanded(self, "index_put_");
  at::Tensor values = on_device(values_, self);
  // x[mask] = scalar: a masked fill, no nonzero (and no wait) needed.
  if (!accumulate && indices.size() == 1 && values.dim() == 0) {
    const std::optional<at::Tensor> m = indices.get(0);
    if (m.has_value() && m->defined() && m->scalar_type() == at::kBool && m->dim() <= self.dim() &&
        m->sizes() == self.sizes().slice(0, m->dim()) && values.scalar_type() == self.scalar_type()) {
      std::vector<int64_t> shape(m->sizes().begin(), m->sizes().end());
      shape.resize(self.dim(), 1);
      const at::Tensor mask = on_device(*m, self).view(shape);
      return masked_fill_impl(self, mask, &values, 0);
    }
  }
  at::assert_no_overlap(self, values);
  const IndexList l = index_list(self, indices);
  const vt_tensor s = view_of(self);
  if (self.numel() == 0) {  // nothing to write, but the indices are still checked (a size-0 dim refuses any)
    int32_t rnd = 0;
    int64_t rsz[VT_MAX_DIMS];
    check(vt_index_shape(&s, static_cast<int>(l.ptrs.size()), l.ptrs.data(), &rnd, rsz));
    return self;
  }
  const vt_tensor v = view_of(values);
  check(vt_op_index_put(device_index(self), "aten::index_put_", &s, static_cast<int>(l.ptrs.size()), l.ptrs.data(),
                        &v, accumulate ? 1 : 0));
  return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  VT_IMPL(m, "index_select", index_select);
  VT_IMPL(m, "index_select.out", index_select_out);
  VT_IMPL(m, "embedding_dense_backward", embedding_dense_backward);
  VT_IMPL(m, "embedding", embedding);
  VT_IMPL(m, "one_hot", one_hot);
  VT_IMPL(m, "gather.out", gather_out);
  VT_IMPL(m, "scatter.src_out", scatter_src_out);
  VT_IMPL(m, "scatter.value_out", scatter_value_out);
  VT_IMPL(m, "scatter.reduce_out", scatter_reduce_out);
  VT_IMPL(m, "scatter.value_reduce_out", scatter_value_reduce_out);
  VT_IMPL(m, "scatter_add.out", scatter_add_out);
  VT_IMPL(m, "scatter_reduce.two_out", scatter_reduce_two_out);
  VT_IMPL(m, "index_add.out", index_add_out);
  VT_IMPL(m, "index_copy.out", index_copy_out);
  VT_IMPL(m, "index_fill_.int_Scalar", index_fill_scalar);
  VT_IMPL(m, "index_fill_.int_Tensor", index_fill_tensor);
  VT_IMPL(m, "nonzero", nonzero);
  VT_IMPL(m, "nonzero.out", nonzero_out);
  VT_IMPL(m, "masked_fill_.Scalar", masked_fill_scalar);
  VT_IMPL(m, "masked_fill_.Tensor", masked_fill_tensor);
  VT_IMPL(m, "masked_select", masked_select);
  VT_IMPL(m, "masked_select.out", masked_select_out);
  VT_IMPL(m, "masked_scatter_", masked_scatter_);
  VT_IMPL(m, "take", take);
  VT_IMPL(m, "take.out", take_out);
  VT_IMPL(m, "index.Tensor", index);
  VT_IMPL(m, "index.Tensor_out", index_out);
  VT_IMPL(m, "_index_put_impl_", index_put_impl_);
}

}  // namespace vtpu
