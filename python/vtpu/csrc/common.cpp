// common.cpp — status-to-exception mapping, tensor descriptors, current
// device, and the GIL-releasing, interruptible device wait.
#include "common.h"

#include <ATen/Dispatch.h>
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <Python.h>
#include <torch/csrc/Exceptions.h>

#include <functional>

namespace vtpu {

void throw_status(vt_status s, const char* context) {
  std::string msg = vt_last_error();
  if (context && *context) msg = std::string(context) + ": " + msg;
  switch (s) {
    case VT_ERR_OUT_OF_MEMORY: TORCH_CHECK_WITH(OutOfMemoryError, false, msg);
    case VT_ERR_INDEX: TORCH_CHECK_WITH(IndexError, false, msg);
    case VT_ERR_UNSUPPORTED: TORCH_CHECK_WITH(NotImplementedError, false, msg);
    default: TORCH_CHECK(false, msg);
  }
}

void ensure_init() {
  if (!vt_is_initialized()) check(vt_init());
  if (vt_in_bad_fork()) check(vt_check_device(0));  // raises the bad-fork message
}

bool to_vt_dtype(c10::ScalarType st, vt_dtype* out) {
  switch (st) {
    case at::kFloat: *out = VT_F32; return true;
    case at::kBFloat16: *out = VT_BF16; return true;
    case at::kHalf: *out = VT_F16; return true;
    case at::kDouble: *out = VT_F64; return true;
    case at::kChar: *out = VT_I8; return true;
    case at::kByte: *out = VT_U8; return true;
    case at::kShort: *out = VT_I16; return true;
    case at::kInt: *out = VT_I32; return true;
    case at::kLong: *out = VT_I64; return true;
    case at::kBool: *out = VT_BOOL; return true;
    default: return false;
  }
}

bool describe(const at::Tensor& t, vt_tensor* out) {
  const c10::IntArrayRef sizes = t.sizes(), strides = t.strides();
  if (sizes.size() > VT_MAX_DIMS || !to_vt_dtype(t.scalar_type(), &out->dtype)) return false;
  out->data = t.numel() ? t.data_ptr() : nullptr;
  out->offset = 0;
  out->ndim = static_cast<int32_t>(sizes.size());
  for (size_t i = 0; i < sizes.size(); i++) {
    out->sizes[i] = sizes[i];
    out->strides[i] = strides[i];
  }
  return true;
}

std::string lacking(std::initializer_list<at::Tensor> ts) {
  vt_dtype d{};
  for (const at::Tensor& t : ts)
    if (t.defined() && !to_vt_dtype(t.scalar_type(), &d)) return c10::str("dtype ", t.scalar_type());
  for (const at::Tensor& t : ts)
    if (t.defined() && t.dim() > VT_MAX_DIMS) return c10::str(t.dim(), "-dim tensors");
  return "these inputs";
}

namespace {
// Poll in slices so Ctrl-C reaches Python while the queue drains.
constexpr int64_t kPollMs = 50;
}  // namespace

void wait_interruptibly(const std::function<vt_status(int64_t)>& step) {
  vt_status s = step(0);
  if (s != VT_ERR_TIMEOUT) {
    check(s);
    return;
  }
  const bool holds_gil = Py_IsInitialized() && PyGILState_Check();
  PyThreadState* saved = holds_gil ? PyEval_SaveThread() : nullptr;
  for (;;) {
    s = step(kPollMs);
    if (s != VT_ERR_TIMEOUT) break;
    if (!Py_IsInitialized()) continue;
    PyGILState_STATE g{};
    if (holds_gil) PyEval_RestoreThread(saved); else g = PyGILState_Ensure();
    if (PyErr_CheckSignals() != 0) {
      python_error err;
      err.persist();
      if (!holds_gil) PyGILState_Release(g);
      throw err;  // the caller holds the GIL again iff it did before
    }
    if (holds_gil) saved = PyEval_SaveThread(); else PyGILState_Release(g);
  }
  if (holds_gil) PyEval_RestoreThread(saved);
  check(s);
}

void synchronize_device(int dev) {
  ensure_init();
  check(vt_check_device(dev));
  wait_interruptibly([dev](int64_t ms) { return vt_synchronize_timeout(dev, ms); });
}

void wait_device(int dev) {
  ensure_init();
  check(vt_check_device(dev));
  wait_interruptibly([dev](int64_t ms) { return vt_wait(dev, ms); });
}

namespace {
// t's whole allocation as bytes: faults belong to allocations, so this
// serves every dtype and view.
bool storage_bytes(const at::Tensor& t, vt_tensor* d) {
  const auto& st = t.storage();
  if (!t.numel() || !st.data() || !st.nbytes()) return false;
  *d = vt_tensor{};
  d->data = const_cast<void*>(st.data());
  d->dtype = VT_U8;
  d->ndim = 1;
  d->sizes[0] = static_cast<int64_t>(st.nbytes());
  d->strides[0] = 1;
  return true;
}
}  // namespace

void wait_readable(const at::Tensor& t) {
  wait_device(device_index(t));
  vt_tensor d{};
  if (storage_bytes(t, &d)) check(vt_check_readable(&d));
}

void mark_written(const at::Tensor& t) {
  vt_tensor d{};
  if (!storage_bytes(t, &d)) return;
  // the whole storage, when t covers it (which clears its poison); else its
  // first byte, which names the allocation without covering it
  if (!(t.is_non_overlapping_and_dense() && t.storage_offset() == 0 &&
        static_cast<size_t>(t.numel()) * t.itemsize() == t.storage().nbytes()))
    d.sizes[0] = 1;
  vt_mark_written(&d);
}

void resize_out(const at::Tensor& out, c10::IntArrayRef shape,
                std::initializer_list<std::reference_wrapper<const at::Tensor>> inputs) {
  if (out.sizes() != shape)
    for (const at::Tensor& in : inputs)
      if (in.defined()) at::assert_no_overlap(out, in);
  at::native::resize_output(out, shape);
}

bool ew_result_strides(c10::IntArrayRef shape, const at::Tensor* const* inputs, size_t count, int64_t* strides) {
  if (shape.size() < 2 || shape.size() > VT_MAX_DIMS || count > 4) return false;
  vt_tensor in[4];
  const vt_tensor* ins[4];
  int n = 0;
  for (size_t i = 0; i < count; i++) {
    const at::Tensor* t = inputs[i];
    if (!t->defined()) continue;
    const c10::IntArrayRef sizes = t->sizes(), st = t->strides();
    if (sizes.size() > VT_MAX_DIMS) return false;
    in[n].ndim = static_cast<int32_t>(sizes.size());
    for (size_t k = 0; k < sizes.size(); k++) in[n].sizes[k] = sizes[k], in[n].strides[k] = st[k];
    ins[n] = &in[n];
    n++;
  }
  vt_ew_result_strides(static_cast<int32_t>(shape.size()), shape.data(), n, ins, strides);
  return true;
}

at::Tensor new_output(c10::IntArrayRef shape, c10::ScalarType dtype, int dev,
                      std::initializer_list<const at::Tensor*> inputs) {
  c10::OptionalDeviceGuard guard;
  if (current_device() != dev) guard.reset_device(c10::Device(kTpu, static_cast<c10::DeviceIndex>(dev)));
  const auto keys = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
  int64_t strides[VT_MAX_DIMS];
  if (!ew_result_strides(shape, inputs.begin(), inputs.size(), strides))
    return at::detail::empty_generic(shape, device_allocator(), keys, dtype, std::nullopt);
  return at::detail::empty_strided_generic(shape, c10::IntArrayRef(strides, shape.size()), device_allocator(), keys,
                                           dtype);
}

void resize_elementwise_out(const at::Tensor& out, c10::IntArrayRef shape,
                            std::initializer_list<std::reference_wrapper<const at::Tensor>> inputs) {
  if (out.sizes() == shape) return;
  const at::Tensor* ts[4];
  size_t n = 0;
  for (const at::Tensor& t : inputs) {
    if (!t.defined()) continue;
    TORCH_CHECK(!out.is_same(t), "output with shape ", out.sizes(), " doesn't match the broadcast shape ", shape);
    at::assert_no_partial_overlap(out, t);
    if (n < 4) ts[n++] = &t;
  }
  at::native::resize_output(out, shape);
  // A resized out= takes the layout a new result would have, as on CPU.
  int64_t strides[VT_MAX_DIMS];
  if (!ew_result_strides(shape, ts, n, strides)) return;
  const c10::IntArrayRef st(strides, shape.size());
  if (out.strides() != st) out.as_strided_(shape, st);
}

void check_scalar_fits(const at::Scalar& v, c10::ScalarType dt) {
  vt_dtype d{};
  if (!to_vt_dtype(dt, &d)) return;
  AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, dt, "check_scalar_fits",
                             [&] { (void)v.to<scalar_t>(); });
}

void synchronize_all() {
  ensure_init();
  for (int d = 0; d < vt_device_count(); d++) synchronize_device(d);
}

namespace {
thread_local c10::DeviceIndex tls_current_device = 0;
}

c10::DeviceIndex current_device() { return tls_current_device; }

void set_current_device(c10::DeviceIndex d) {
  ensure_init();
  // torch.tpu.set_device and torch.accelerator.set_device_index: TorchTPU's
  // type and words
  TORCH_CHECK_VALUE(d >= 0 && d < vt_device_count(), "Cannot set TPU device to index ", static_cast<int>(d),
                    ": vtpu has ", vt_device_count(), " device(s) (VTPU_NUM_DEVICES)");
  tls_current_device = d;
}

int device_index(const at::Tensor& t) {
  return t.device().has_index() ? t.device().index() : current_device();
}

void check_out_dtype(const at::Tensor& out, c10::ScalarType want) {
  TORCH_CHECK(out.scalar_type() == want, "Expected out tensor to have dtype ", c10::scalarTypeToTypeMeta(want),
              ", but got ", out.dtype(), " instead");
}

}  // namespace vtpu
