// minimal_ops.cpp — the ops every PrivateUse1 device must provide: tensor
// creation, views, resize, copies across devices, scalar reads and set_.
// Data movement goes through the runtime's queue; nothing here computes.
#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "common.h"

namespace vtpu {
namespace {

c10::DeviceIndex checked_index(std::optional<c10::Device> device) {
  ensure_init();
  const c10::DeviceIndex idx = device && device->has_index() ? device->index() : current_device();
  TORCH_CHECK(idx >= 0 && idx < vt_device_count(), "Invalid device index tpu:", static_cast<int>(idx),
              ": vtpu has ", vt_device_count(), " device(s) (VTPU_NUM_DEVICES)");
  return idx;
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  const auto idx = checked_index(device);
  c10::DeviceGuard guard(c10::Device(kTpu, idx));
  return at::detail::empty_generic(size, device_allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  const auto idx = checked_index(device);
  c10::DeviceGuard guard(c10::Device(kTpu, idx));
  return at::detail::empty_strided_generic(size, stride, device_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) { return at::native::view(self, size); }

at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::native::_reshape_alias(self, size, stride);
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  // A larger storage comes from self's device, whatever the current one.
  c10::DeviceGuard guard(self.device());
  auto* impl = self.unsafeGetTensorImpl();
  at::native::resize_impl_cpu_(impl, size, /*stride=*/std::nullopt, /*resize_storage=*/false);
  if (memory_format) {
    TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve, "Unsupported memory format", *memory_format);
    impl->empty_tensor_restride(*memory_format);
  }
  if (impl->numel() > 0) {
    const size_t needed = at::detail::computeStorageNbytes(self.sizes(), self.strides(), self.dtype().itemsize(),
                                                           self.storage_offset());
    const auto& storage = impl->unsafe_storage();
    if (needed > storage.nbytes()) at::native::resize_bytes_nocuda(storage, static_cast<int64_t>(needed));
  }
  return self;
}

// A CPU tensor aliasing a tpu tensor's memory (device memory is host memory),
// with the same lazy conjugate and negative bits.
at::Tensor host_alias(const at::Tensor& t) {
  at::Tensor h = at::from_blob(t.data_ptr(), t.sizes(), t.strides(), [](void*) {},
                               t.options().device(c10::kCPU).requires_grad(false));
  h._set_conj(t.is_conj());
  h._set_neg(t.is_neg());
  return h;
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  if (dst.numel() == 0) return dst;
  TORCH_CHECK(self.device().type() == kTpu || dst.device().type() == kTpu ||
                  (self.is_cpu() && dst.is_cpu()),
              "vtpu cannot copy between ", self.device(), " and ", dst.device());
  vt_tensor d{}, s{};
  // The kernels see bits, not the lazy conjugate/negative views.
  const bool lazy = self.is_conj() || self.is_neg() || dst.is_conj() || dst.is_neg();
  const bool native = !lazy && describe(dst, &d) && describe(self, &s);
  const bool src_tpu = self.device().type() == kTpu, dst_tpu = dst.device().type() == kTpu;
  if (!native) {
    // dtypes the kernels do not know (complex...) and lazy views: copy on
    // host aliases, where CPU's copy resolves the conjugate/negative bits
    // (and checks overlaps as CPU does).
    if (src_tpu) wait_readable(self);
    if (dst_tpu) wait_device(device_index(dst));
    at::Tensor d_host = dst_tpu ? host_alias(dst) : dst;
    d_host.copy_(src_tpu ? host_alias(self) : self);
    if (dst_tpu) mark_written(dst);
    return dst;
  }
  if (dst_tpu) {
    // Device to device (the runtime orders a copy between two devices on
    // both queues), or host to device (waits: the host buffer is the
    // caller's, unless it is pinned and the copy non-blocking).
    const int ddev = device_index(dst);
    if (src_tpu) {
      check(vt_op_copy(ddev, "aten::copy_", &d, &s));
    } else if (non_blocking && is_pinned(self.const_data_ptr())) {
      // From pinned memory, non_blocking: queued without a wait, as on CUDA;
      // the pinned buffer is kept until the copy has run.
      uint64_t ticket = 0;
      check(vt_copy_to_device_async(ddev, &d, &s, &ticket));
      pinned_read_by(self.const_data_ptr(), ddev, ticket);
    } else {
      check(vt_copy_to_device(ddev, &d, &s));
    }
  } else {
    wait_readable(self);  // interruptible; raises the error of a failed op that wrote self
    check(vt_copy_to_host(device_index(self), &d, &s));
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::native::resize_output(dst, self.sizes());
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  wait_readable(self);
  return at::native::_local_scalar_dense_cpu(host_alias(self));
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t storage_offset, c10::IntArrayRef size,
                        c10::IntArrayRef stride) {
  at::native::checkSetStorage(self, source, storage_offset, size, stride);
  self.unsafeGetTensorImpl()->set_storage_offset(storage_offset);
  const auto stride_opt = stride.data() != nullptr ? at::OptionalIntArrayRef(stride) : std::nullopt;
  at::native::resize_impl_cpu_(self.unsafeGetTensorImpl(), size, stride_opt, /*resize_storage=*/false);
  return self;
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  const size_t itemsize = self.dtype().itemsize();
  TORCH_CHECK(source.nbytes() % itemsize == 0, "Expected storage of ", source.nbytes(),
              " bytes to be a multiple of the element size ", itemsize);
  const int64_t n = static_cast<int64_t>(source.nbytes() / itemsize);
  return set_storage(self, std::move(source), 0, {n}, {});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& src) {
  return set_storage(self, src.storage(), src.storage_offset(), src.sizes(), src.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, device_allocator(), /*resizable=*/true);
  return set_storage(self, std::move(storage), 0, {0}, {});
}

// `param.data = t` (what Module.to() does) needs the two tensors' impls to
// be interchangeable. PyTorch 2.13 grants that to dense CPU/CUDA/XPU...
// tensors but not to PrivateUse1, so Module.to("tpu") would make a new
// Parameter per module and silently untie shared weights (a tied LM head).
// Dense CPU and tpu tensors are plain TensorImpls: say so, as for CUDA.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  const auto dense = [](c10::DispatchKeySet ks) {
    return ks.has_any(c10::DispatchKeySet(c10::DispatchKey::Dense)) &&
           (ks.has_backend(c10::BackendComponent::CPUBit) || ks.has_backend(c10::BackendComponent::PrivateUse1Bit));
  };
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()) ||
         (dense(self.key_set()) && dense(from.key_set()));
}

}  // namespace

at::Tensor host_alias_of(const at::Tensor& t) { return host_alias(t); }

// Copies resolve conjugate and negative views themselves (copy_from above).
// Without this, PyTorch's Conjugate/Negative fallback would materialise the
// source with clone(), which copies through _copy_from again, without end.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

// Mixed CPU/tpu arguments dispatch here (the tpu backend outranks CPU).
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
}

// Autograd's "known zero" gradient (sgn's for real inputs, ...): CPU and
// CUDA make a ZeroTensor with no storage; here it is plain zeros, which every
// op reads as a tensor like any other.
at::Tensor efficientzerotensor(c10::SymIntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory) {
  return at::zeros_symint(size, at::TensorOptions().dtype(dtype).layout(layout).device(device).pinned_memory(pin_memory));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_efficientzerotensor", efficientzerotensor);
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", as_strided);
  m.impl("view", view);
  m.impl("unfold", at::native::unfold);  // a strided view (repeat uses it)
  m.impl("view_as_real", at::native::view_as_real);
  m.impl("view_as_complex", at::native::view_as_complex);
  m.impl("_reshape_alias", reshape_alias);
  m.impl("resize_", resize_);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Storage_storage_offset", set_storage);
  m.impl("set_.source_Tensor", set_source_tensor);
  m.impl("set_", set_empty);
}

}  // namespace vtpu
