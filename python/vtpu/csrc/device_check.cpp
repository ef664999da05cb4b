// device_check.cpp — the device check's message and its boxed form; the
// exception a kernel throws to hand its op to the CPU fallback.
#include "device_check.h"

#include <cstring>

namespace vtpu {

void throw_unsupported(const char* func, const char* file, uint32_t line, const std::string& why) {
  throw Unsupported(c10::SourceLocation{func, file, line}, why);
}

c10::OperatorHandle op_handle(const char* name) {
  const char* dot = std::strchr(name, '.');
  std::string base = dot ? std::string(name, dot - name) : std::string(name);
  if (base.find("::") == std::string::npos) base = "aten::" + base;
  return c10::Dispatcher::singleton().findSchemaOrThrow(base.c_str(), dot ? dot + 1 : "");
}

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
