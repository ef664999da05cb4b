// device_check.cpp — the device check's message and its boxed form.
#include "device_check.h"

namespace vtpu {

void DeviceCheck::fail() const {
  const std::string other = second_ >= 0 ? "tpu:" + std::to_string(second_) : other_->str();
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, tpu:", tpu_,
              " and ", other, "!");
}

void check_stack_devices(const c10::FunctionSchema& schema, const torch::jit::Stack& stack, bool host_ok) {
  const size_t n = schema.arguments().size();
  DeviceCheck c;
  for (size_t i = 0; i < n; i++) {
    const c10::IValue& v = stack[stack.size() - n + i];
    const auto* alias = schema.arguments()[i].alias_info();
    const bool written = alias != nullptr && alias->isWrite();
    if (v.isTensor()) {
      c.add(v.toTensor(), written, host_ok);
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) c.add(t, written, host_ok);
    } else if (v.isOptionalTensorList()) {
      for (const std::optional<at::Tensor> t : v.toOptionalTensorList())
        if (t.has_value()) c.add(*t, written, host_ok);
    }
  }
  c.check();
}

}  // namespace vtpu
