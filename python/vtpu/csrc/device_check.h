// device_check.h — the one device check every tpu kernel goes through, as
// CUDA's generated wrappers and TensorIterator apply it: every tensor an op
// touches, outputs included, is on one tpu device; a CPU tensor is allowed
// only as a 0-dim scalar the op reads (and as an index of index/index_put,
// as CUDA allows). VT_IMPL registers a kernel behind the check, reading the
// kernel's typed arguments (a non-const Tensor& is written); boxed kernels
// and the CPU fallback check their stack against the op's schema.
#pragma once

#include <optional>
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

namespace detail {

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

template <auto F>
struct CheckedFn;
template <class R, class... A, R (*F)(A...)>
struct CheckedFn<F> {
  static R call(A... a) {
    DeviceCheck c;
    (note<A>(c, a), ...);
    c.check();
    return F(std::forward<A>(a)...);
  }
};

template <class L, class R, class... A>
struct CheckedLambda {
  static R call(A... a) {
    DeviceCheck c;
    (note<A>(c, a), ...);
    c.check();
    return L{}(std::forward<A>(a)...);
  }
};

template <class L, class R, class... A>
constexpr auto checked_lambda(R (L::*)(A...) const) {
  return &CheckedLambda<L, R, A...>::call;
}

// G returns the kernel: a function (pointer) or a captureless lambda.
template <class G>
constexpr auto checked() {
  constexpr auto f = G{}();
  using F = std::remove_cv_t<decltype(f)>;
  if constexpr (std::is_pointer_v<F>) return &CheckedFn<f>::call;
  else return checked_lambda<F>(&F::operator());
}

}  // namespace detail
}  // namespace vtpu

// m.impl(name, kernel) behind the device check; kernel is a function or a
// captureless lambda.
#define VT_IMPL(m, name, ...) (m).impl(name, ::vtpu::detail::checked<decltype([] { return __VA_ARGS__; })>())
