// device_check.h — the one device check every tpu kernel goes through, as
// CUDA's generated wrappers and TensorIterator apply it: every tensor an op
// touches, outputs included, is on one tpu device; a CPU tensor is allowed
// only as a 0-dim scalar the op reads (and as an index of index/index_put,
// as CUDA allows). VT_IMPL registers a kernel behind the check, reading the
// kernel's typed arguments (a non-const Tensor& is written); boxed kernels
// and the CPU fallback check their stack against the op's schema.
//
// The same wrapper runs the op through the counted CPU fallback when the
// kernel meets inputs it has no native path for (a dtype, a rank above
// VT_MAX_DIMS, ...): the kernel says so with VT_FALLBACK_UNLESS before it
// writes anything, and the user gets CPU's result, never a refusal of what
// CPU accepts.
#pragma once

#include <ATen/core/boxing/impl/boxing.h>

#include <algorithm>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "common.h"

namespace vtpu {

class DeviceCheck {
 public:
  // written: an out= or in-place argument. host_ok: any CPU tensor is fine.
  void add(const at::Tensor& t, bool written, bool host_ok = false) {
    if (!t.defined()) return;
    const c10::Device d = t.device();
    if (d.type() == kTpu) {
      const int i = d.has_index() ? d.index() : current_device();
      if (tpu_ < 0) tpu_ = i;
      else if (i != tpu_ && second_ < 0) second_ = i;
    } else if (!(host_ok && d.is_cpu()) && !(d.is_cpu() && !written && t.dim() == 0) && !other_) {
      other_ = d;
    }
  }
  // RuntimeError "Expected all tensors to be on the same device, ..." (CPU's text).
  void check() const {
    if (tpu_ < 0 || (second_ < 0 && !other_)) return;
    fail();
  }

 private:
  [[noreturn]] void fail() const;
  int tpu_ = -1, second_ = -1;
  std::optional<c10::Device> other_;
};

// The arguments of a boxed call (the last schema.arguments().size() entries
// of stack); host_ok lets CPU tensors through (ops that take host indices).
void check_stack_devices(const c10::FunctionSchema& schema, const torch::jit::Stack& stack, bool host_ok = false);

// What a kernel throws when it has no native path for its inputs. Only
// VT_FALLBACK_UNLESS throws it, and only before the kernel has written any
// tensor; VT_IMPL catches it. Escaping elsewhere it is a NotImplementedError.
struct Unsupported : c10::NotImplementedError {
  using c10::NotImplementedError::NotImplementedError;
};
[[noreturn]] void throw_unsupported(const char* func, const char* file, uint32_t line, const std::string& why);

#define VT_FALLBACK_UNLESS(cond, ...) \
  if (C10_UNLIKELY(!(cond)))          \
  ::vtpu::throw_unsupported(__func__, __FILE__, __LINE__, ::c10::str(__VA_ARGS__))

// The C view of t for a kernel; a tensor the kernels cannot take (dtype,
// rank) sends the op to the fallback. Call it before the kernel writes.
inline vt_tensor view_of(const at::Tensor& t) {
  vt_tensor d{};
  VT_FALLBACK_UNLESS(describe(t, &d), lacking({t}));
  return d;
}

// The C view of an optional tensor for a kernel: p is nullptr for an
// undefined one (view_of's fallback rule otherwise).
struct Desc {
  vt_tensor d{};
  const vt_tensor* p = nullptr;
  Desc() = default;
  explicit Desc(const at::Tensor& t) {
    if (!t.defined()) return;
    d = view_of(t);
    p = &d;
  }
};

// The op `name` ("add.Tensor"; namespace aten unless given).
c10::OperatorHandle op_handle(const char* name);
// What the next cpu_fallback call on this thread reports as the reason the
// native kernel did not run (its first-fallback warning names it).
void set_fallback_reason(const char* why);

namespace detail {

// An op name as a template argument.
template <size_t N>
struct OpName {
  char s[N];
  constexpr OpName(const char (&v)[N]) { std::copy_n(v, N, s); }
};

// The op again through the CPU fallback, boxed from the kernel's own
// signature (c10's BoxedKernelWrapper returns out= and in-place arguments).
template <OpName N, class R, class... A>
R run_fallback(const Unsupported& e, A... a) {
  static const c10::OperatorHandle op = op_handle(N.s);
  set_fallback_reason(e.msg().c_str());
  return c10::impl::BoxedKernelWrapper<R(A...)>::call(c10::BoxedKernel::makeFromFunction<&cpu_fallback>(), op,
                                                      c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                      std::forward<A>(a)...);
}

// One typed kernel argument: A is its declared type.
template <class A>
void note(DeviceCheck& c, const std::remove_reference_t<A>& a) {
  using T = std::remove_cvref_t<A>;
  if constexpr (std::is_same_v<T, at::Tensor>) {
    c.add(a, std::is_same_v<A, at::Tensor&>);
  } else if constexpr (std::is_same_v<T, std::optional<at::Tensor>>) {
    if (a.has_value()) c.add(*a, false);
  } else if constexpr (std::is_same_v<T, at::TensorList> || std::is_same_v<T, at::ITensorListRef>) {
    for (const at::Tensor& t : a) c.add(t, false);
  } else if constexpr (std::is_same_v<T, c10::List<std::optional<at::Tensor>>>) {
    for (const std::optional<at::Tensor> t : a)  // advanced-indexing indices may be host tensors
      if (t.has_value()) c.add(*t, false, /*host_ok=*/true);
  }
}

// An argument passed on to the kernel and still usable by the fallback if
// the kernel declines: by-value and reference parameters get the caller's
// object (copied for by-value), rvalue references are moved.
template <class A>
decltype(auto) keep(std::remove_reference_t<A>& a) {
  if constexpr (std::is_rvalue_reference_v<A>) return std::move(a);
  else return static_cast<std::conditional_t<std::is_reference_v<A>, A, const A&>>(a);
}

// K: the kernel (a function or a captureless lambda type); N: the op.
template <OpName N, class K, class R, class... A>
struct Checked {
  static R call(A... a) {
    DeviceCheck c;
    (note<A>(c, a), ...);
    c.check();
    try {
      return K{}(keep<A>(a)...);
    } catch (const Unsupported& e) {
      return run_fallback<N, R, A...>(e, std::forward<A>(a)...);
    }
  }
};

template <auto F>
struct FnConst {
  template <class... A>
  decltype(auto) operator()(A&&... a) const { return F(std::forward<A>(a)...); }
};

template <OpName N, class K, class R, class... A>
constexpr auto checked_sig(R (*)(A...)) {
  return &Checked<N, K, R, A...>::call;
}
template <OpName N, class K, class L, class R, class... A>
constexpr auto checked_sig(R (L::*)(A...) const) {
  return &Checked<N, K, R, A...>::call;
}

// G returns the kernel: a function (pointer) or a captureless lambda.
template <OpName N, class G>
constexpr auto checked() {
  constexpr auto f = G{}();
  using F = std::remove_cv_t<decltype(f)>;
  if constexpr (std::is_pointer_v<F>) return checked_sig<N, FnConst<f>>(f);
  else return checked_sig<N, F>(&F::operator());
}

}  // namespace detail
}  // namespace vtpu

// m.impl(name, kernel) behind the device check and the fallback for inputs
// the kernel declines; kernel is a function or a captureless lambda.
#define VT_IMPL(m, name, ...) VT_IMPL_VIA(m, name, name, __VA_ARGS__)
// The same, where the inputs the kernel declines run cpu_op (an op of the
// same arguments) through the fallback: an overrideable op, which CPU
// implements under another name.
#define VT_IMPL_VIA(m, name, cpu_op, ...) \
  (m).impl(name, ::vtpu::detail::checked<::vtpu::detail::OpName(cpu_op), decltype([] { return __VA_ARGS__; })>())
