// common.h — what every binding file shares: turning a vt_status into the
// matching PyTorch exception, describing an at::Tensor to the C runtime, and
// the device waits that release the GIL and stay interruptible.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/Exception.h>

#include <functional>
#include <string>

extern "C" {
#include "vtpu/vtpu.h"
}

namespace vtpu {

constexpr auto kTpu = c10::DeviceType::PrivateUse1;

inline bool is_tpu(const at::Tensor& t) { return t.defined() && t.device().type() == kTpu; }

// An optional tensor argument as a tensor (undefined when absent).
inline at::Tensor value(const std::optional<at::Tensor>& t) { return t && t->defined() ? *t : at::Tensor(); }

// Raise the Python exception that matches s, with the runtime's message.
[[noreturn]] void throw_status(vt_status s, const char* context);

inline void check(vt_status s, const char* context = nullptr) {
  if (s != VT_OK) throw_status(s, context);
}

// Initialise the runtime (once) and raise if that fails.
void ensure_init();

// Dtype mapping; returns false for dtypes the C kernels do not handle
// (complex, unsigned wider than 8 bits, float8...).
bool to_vt_dtype(c10::ScalarType st, vt_dtype* out);

// at::result_type(a, b). Operands of one dtype give that dtype (the common
// case, answered here instead of through the dispatcher).
inline c10::ScalarType common_dtype(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() ? a.scalar_type() : at::result_type(a, b);
}

// Describe t (any device: device memory is host-addressable) as a C view.
// Returns false when the runtime cannot take it (dtype or too many dims).
bool describe(const at::Tensor& t, vt_tensor* out);

// Wait for dev's queue; raises the device's faults not yet raised (errors
// of queued ops); releases the GIL while waiting and raises
// KeyboardInterrupt on Ctrl-C (the work goes on).
void synchronize_device(int dev);
// Wait for dev's queue and raise nothing: before the host writes device
// memory (a read must use wait_readable).
void wait_device(int dev);
// Wait for t's device, then raise the error of the failed op that wrote t's
// memory (or that t was computed from), if any: before the host reads t.
void wait_readable(const at::Tensor& t);
// The host wrote t's memory: a write of all of it ends a poisoning.
void mark_written(const at::Tensor& t);
// The same loop around any bounded wait: step(timeout_ms) returns
// VT_ERR_TIMEOUT until done.
void wait_interruptibly(const std::function<vt_status(int64_t)>& step);
void synchronize_all();

// Device index of a tpu tensor (or the current device for -1).
int device_index(const at::Tensor& t);
c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex d);

c10::DeviceAllocator* device_allocator();
// Pinned host memory (pin_memory()): its allocator, whether p lies in a live
// pinned buffer, and a note that device dev's queue reads p's buffer until
// event `ticket` (the buffer outlives its tensor until then).
c10::Allocator* pinned_allocator();
bool is_pinned(const void* p);
void pinned_read_by(const void* p, int dev, uint64_t ticket);

// A CPU tensor sharing a tpu tensor's memory (device memory is host memory).
// Read it only after synchronising the tensor's device.
at::Tensor host_alias_of(const at::Tensor& t);

// at::native::resize_output for an op's out=: an out that must be resized
// and overlaps an input is refused first, as CPU refuses it (the runtime
// applies PyTorch's rules to what each kernel writes; this only keeps a
// refused op from resizing out before it is refused).
void resize_out(const at::Tensor& out, c10::IntArrayRef shape,
                std::initializer_list<std::reference_wrapper<const at::Tensor>> inputs);
// Strides of a new elementwise result of `shape` from inputs[0..n) (undefined
// ones skipped), as TensorIterator lays it out (vt_ew_result_strides); false
// when the result is simply contiguous (under 2 dims, or operands the C
// descriptors cannot hold).
bool ew_result_strides(c10::IntArrayRef shape, const at::Tensor* const* inputs, size_t n, int64_t* strides);

// A new result laid out as TensorIterator lays out the output it allocates
// (vt_ew_result_strides), so strides match CPU PyTorch's and the kernel
// walks the result in memory order. Allocated here, not through the
// dispatcher (as CPU kernels allocate theirs): an output costs one
// allocator call, on dev.
at::Tensor new_output(c10::IntArrayRef shape, c10::ScalarType dtype, int dev,
                      std::initializer_list<const at::Tensor*> inputs);

// The same for an elementwise op, with TensorIterator's rules: an out that is
// also an input cannot be resized ("output with shape [1] doesn't match the
// broadcast shape [3]"), and a partial overlap is refused.
void resize_elementwise_out(const at::Tensor& out, c10::IntArrayRef shape,
                            std::initializer_list<std::reference_wrapper<const at::Tensor>> inputs);

// A Scalar written into a tensor of dtype dt must fit it, as CPU PyTorch's
// checked conversion requires (fill_, masked_fill_, index_fill_, scatter's
// value, clamp's bounds): "value cannot be converted to type int8_t
// without overflow". Dtypes the kernels do not take are not checked here.
void check_scalar_fits(const at::Scalar& v, c10::ScalarType dt);

// Byte-wise, queue-ordered copy of device memory (storage resize and clone).
void copy_device_bytes(int dev, void* dst, const void* src, size_t n);

// The boxed CPU fallback (fallback.cpp): every op without a tpu kernel, and
// (through VT_IMPL, device_check.h) every kernel that declines its inputs.
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// What the C kernels lack for these tensors ("dtype ComplexFloat", "20-dim
// tensors"): the reason a kernel gives VT_FALLBACK_UNLESS.
std::string lacking(std::initializer_list<at::Tensor> ts);

// The execution context (context.cpp): a `vtpu.eager_mode` /
// `torch.tpu.precision` / `vtpu.cpu_fallback` block pushes one for this
// thread, and the autograd threads running its backward() inherit it. -1
// leaves a field as the enclosing block (or the process) has it.
void push_context(int eager_mode, int precision, int fallback);
void pop_context();
void install_context_hook();  // the runtime reads the eager mode from the context
// Matmul precision for fp32 operands: the innermost precision block's, else
// the process setting (DEFAULT unless changed).
vt_precision matmul_precision();
void set_process_precision(int p);
// The innermost `vtpu.cpu_fallback` block's rule: 0 forbidden, 1 allowed,
// -1 none (the process setting holds).
int context_fallback();

// CPU's check of an out= whose dtype is fixed by the op (structured kernels).
void check_out_dtype(const at::Tensor& out, c10::ScalarType want);

// Complex add / sub / mul (out = a op alpha * o) composed of native real ops
// (complex_ops.cpp); false, with nothing written, for what it does not take
// (other ops or dtypes, negative views), which then falls back. fresh_out:
// out is a new tensor no operand aliases.
bool complex_binary(vt_binary_op op, const at::Tensor& a, const at::Tensor& o, const at::Scalar& alpha,
                    const at::Tensor& out, bool fresh_out);

}  // namespace vtpu
