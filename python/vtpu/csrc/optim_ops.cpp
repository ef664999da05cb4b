// optim_ops.cpp — adapters from ATen's _foreach_* ops and fused optimizer
// steps to the runtime's multi-tensor kernels. One boxed adapter reads the
// schema (op name, overload, named arguments), applies CPU PyTorch's list
// checks, shapes and dtypes, and makes ONE queued C call per op; inputs the
// kernels do not take (integer, complex, non-contiguous fused state) go to
// the counted CPU fallback.
#include <ATen/ExpandUtils.h>
#include <torch/library.h>

#include <cstring>
#include <string>
#include <vector>

#include "common.h"
#include "device_check.h"

namespace vtpu {
namespace {

using IV = c10::IValue;

bool float_dt(c10::ScalarType t) {
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf || t == at::kDouble;
}

struct OpInfo {
  const char* name;
  vt_foreach_op op;
  int kind;  // 0 binary, 1 ternary (addcmul/addcdiv), 2 lerp, 3 unary, 4 zero, 5 copy, 6 reduction
};

const OpInfo kOps[] = {
    {"add", VT_FOREACH_ADD, 0},        {"sub", VT_FOREACH_SUB, 0},
    {"mul", VT_FOREACH_MUL, 0},        {"div", VT_FOREACH_DIV, 0},
    {"maximum", VT_FOREACH_MAXIMUM, 0}, {"minimum", VT_FOREACH_MINIMUM, 0},
    {"clamp_min", VT_FOREACH_CLAMP_MIN, 0}, {"clamp_max", VT_FOREACH_CLAMP_MAX, 0},
    {"pow", VT_FOREACH_POW, 0},        {"addcmul", VT_FOREACH_ADDCMUL, 1},
    {"addcdiv", VT_FOREACH_ADDCDIV, 1}, {"lerp", VT_FOREACH_LERP, 2},
    {"neg", VT_FOREACH_NEG, 3},        {"abs", VT_FOREACH_ABS, 3},
    {"sqrt", VT_FOREACH_SQRT, 3},      {"exp", VT_FOREACH_EXP, 3},
    {"sign", VT_FOREACH_SIGN, 3},      {"reciprocal", VT_FOREACH_RECIPROCAL, 3},
    {"zero", VT_FOREACH_ZERO, 4},      {"copy", VT_FOREACH_COPY, 5},
    {"norm", VT_FOREACH_NORM, 6},      {"max", VT_FOREACH_MAX, 6},
};

const OpInfo* find_op(const std::string& base) {
  for (const auto& o : kOps)
    if (base == o.name) return &o;
  return nullptr;
}

vt_tensor desc(const at::Tensor& t) {
  vt_tensor d{};
  TORCH_CHECK(describe(t, &d), "vtpu: cannot describe a ", t.scalar_type(), " tensor");
  return d;
}

void check_lengths(size_t a, size_t b) {
  TORCH_CHECK(a == b, "Tensor lists must have the same number of tensors, got ", a, " and ", b);
}

// Value of a Scalar argument as double (complex → fallback by the caller).
bool scalar_value(const IV& v, double* out) {
  if (!v.isScalar()) return false;
  const c10::Scalar s = v.toScalar();
  if (s.isComplex()) return false;
  *out = s.toDouble();
  return true;
}

void foreach_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  {
    // The lists on one device; a single Tensor argument (scalars of
    // _foreach_addcmul.Tensor, the scalar of .Tensor overloads) may be a
    // host tensor, as on CUDA.
    DeviceCheck c;
    const size_t n = schema.arguments().size();
    for (size_t i = 0; i < n; i++) {
      const c10::IValue& v = (*stack)[stack->size() - n + i];
      if (v.isTensorList())
        for (const at::Tensor& t : v.toTensorList()) c.add(t, schema.arguments()[i].alias_info() != nullptr);
      else if (v.isTensor())
        c.add(v.toTensor(), false, /*host_ok=*/true);
    }
    c.check();
  }
  std::string name = schema.name();  // aten::_foreach_add_
  const std::string overload = schema.overload_name();
  std::string base = name.substr(std::strlen("aten::_foreach_"));
  const bool inplace = !base.empty() && base.back() == '_';
  if (inplace) base.pop_back();
  const bool out_variant = overload.size() >= 3 && overload.compare(overload.size() - 3, 3, "out") == 0;
  const OpInfo* info = find_op(base);
  const size_t nargs = schema.arguments().size();
  auto args = torch::jit::last(*stack, nargs);
  auto arg = [&](const char* n) -> const IV& { return args[*schema.argumentIndexWithName(n)]; };
  auto fallback = [&]() { cpu_fallback(op, stack); };
  if (!info) return fallback();

  vt_foreach_args x{};
  x.op = info->op;
  x.alpha = 1.0;
  std::vector<at::Tensor> self, other, third, outs;
  std::vector<double> scalars;
  at::Tensor scalar_tensor;
  const bool rpow = base == "pow" && overload == "ScalarAndTensor";
  if (rpow) {
    x.op = VT_FOREACH_RPOW;
    self = arg("exponent").toTensorVector();
    if (!scalar_value(arg("self"), &x.scalar)) return fallback();
  } else {
    self = arg("self").toTensorVector();
  }
  TORCH_CHECK(!self.empty(), "Tensor list must have at least one tensor.");

  // Operands by kind and overload.
  const bool ov_list = overload.rfind("List", 0) == 0, ov_slist = overload.rfind("ScalarList", 0) == 0,
             ov_tensor = overload.rfind("Tensor", 0) == 0, ov_scalar = overload.rfind("Scalar", 0) == 0 && !ov_slist;
  auto read_scalar_list = [&](const IV& v) {
    if (v.isTensor()) {  // addcmul/addcdiv .Tensor: a 1-D tensor of per-list values
      const at::Tensor t = v.toTensor().to(at::kCPU, at::kDouble).contiguous();
      TORCH_CHECK(t.dim() == 1 && static_cast<size_t>(t.numel()) == self.size(),
                  "Expected length of scalars to match input of length ", self.size(), " but got ", t.numel(),
                  " instead.");
      scalars.assign(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
      return true;
    }
    for (const auto& s : v.toListRef()) {
      double d;
      if (!scalar_value(s, &d)) return false;
      scalars.push_back(d);
    }
    TORCH_CHECK(scalars.size() == self.size(), "Tensor list must have same number of elements as scalar list, got ",
                self.size(), " and ", scalars.size());
    return true;
  };
  if (!rpow) switch (info->kind) {
    case 0:
      if (ov_list) {
        other = arg(base == "pow" ? "exponent" : "other").toTensorVector();
        check_lengths(self.size(), other.size());
      } else if (ov_slist) {
        if (!read_scalar_list(arg(base == "pow" ? "exponent" : "scalars"))) return fallback();
      } else if (ov_tensor) {
        scalar_tensor = arg("other").toTensor();
        TORCH_CHECK(scalar_tensor.dim() == 0 || scalar_tensor.numel() == 1,
                    "scalar tensor expected to be 0 dim but it has ", scalar_tensor.dim(), " dimensions and ",
                    scalar_tensor.numel(), " elements.");
      } else if (ov_scalar) {
        const char* sname = base == "pow" ? "exponent" : "scalar";
        if (!scalar_value(arg(sname), &x.scalar)) return fallback();
      }
      if ((base == "add" || base == "sub") && (ov_list || ov_tensor))
        if (!scalar_value(arg("alpha"), &x.alpha)) return fallback();
      break;
    case 1:
      other = arg("tensor1").toTensorVector();
      third = arg("tensor2").toTensorVector();
      check_lengths(self.size(), other.size());
      check_lengths(self.size(), third.size());
      if (ov_scalar) {
        if (!scalar_value(arg("value"), &x.scalar)) return fallback();
      } else if (!read_scalar_list(arg("scalars"))) {
        return fallback();
      }
      break;
    case 2:
      other = arg("tensors1").toTensorVector();
      check_lengths(self.size(), other.size());
      if (ov_list) {
        third = arg("weights").toTensorVector();
        check_lengths(self.size(), third.size());
      } else if (ov_slist) {
        if (!read_scalar_list(arg("weight"))) return fallback();
      } else if (!scalar_value(arg("weight"), &x.scalar)) {
        return fallback();
      }
      break;
    case 5:
      other = arg("src").toTensorVector();
      check_lengths(self.size(), other.size());
      break;
    case 6:
      if (base == "norm") {
        if (!scalar_value(arg("ord"), &x.scalar)) return fallback();
      }
      break;
    default: break;
  }

  // Everything the kernels take: float tensors on tpu (a CPU scalar tensor is read here).
  auto ok_tensor = [](const at::Tensor& t) {
    return t.defined() && t.device().type() == kTpu && float_dt(t.scalar_type()) && t.dim() <= VT_MAX_DIMS;
  };
  for (auto* l : {&self, &other, &third})
    for (const auto& t : *l)
      if (!ok_tensor(t)) return fallback();
  if (scalar_tensor.defined()) {
    if (!float_dt(scalar_tensor.scalar_type())) return fallback();
    if (scalar_tensor.device().type() != kTpu) {
      x.scalar = scalar_tensor.item<double>();
      scalar_tensor = at::Tensor();
    }
  }
  if (info->kind == 6) {
    std::optional<c10::ScalarType> dt;
    if (base == "norm" && !arg("dtype").isNone()) dt = arg("dtype").toScalarType();
    for (const auto& t : self) {
      if (base == "max")
        TORCH_CHECK(t.numel() > 0,
                    "max(): Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim "
                    "with the 'dim' argument.");
      outs.push_back(at::empty({}, t.options().dtype(dt ? *dt : t.scalar_type())));
    }
  } else if (inplace) {
    outs = self;
  } else if (out_variant) {
    outs = arg("out").toTensorVector();
    check_lengths(self.size(), outs.size());
  }
  const size_t n = self.size();
  const bool make_outs = outs.empty();
  for (size_t i = 0; i < n; i++) {
    if (info->kind == 6) break;
    std::vector<int64_t> shape = self[i].sizes().vec();
    c10::ScalarType dt = self[i].scalar_type();
    if (!other.empty() && info->kind != 5) {
      shape = at::infer_size(shape, other[i].sizes());
      dt = c10::promoteTypes(dt, other[i].scalar_type());
    }
    if (!third.empty()) {
      shape = at::infer_size(shape, third[i].sizes());
      dt = c10::promoteTypes(dt, third[i].scalar_type());
    }
    if (scalar_tensor.defined() && scalar_tensor.dim() > 0) dt = c10::promoteTypes(dt, scalar_tensor.scalar_type());
    if (make_outs) {
      outs.push_back(at::empty(shape, self[i].options().dtype(dt)));
    } else {
      TORCH_CHECK(outs[i].sizes() == at::IntArrayRef(shape), "output with shape ", outs[i].sizes(),
                  " doesn't match the broadcast shape ", at::IntArrayRef(shape));
      TORCH_CHECK(c10::canCast(dt, outs[i].scalar_type()), "result type ", dt, " can't be cast to the desired output type ",
                  outs[i].scalar_type());
      if (!ok_tensor(outs[i])) return fallback();
    }
  }
  if (info->kind == 5) {
    for (size_t i = 0; i < n; i++)
      TORCH_CHECK(at::infer_size(outs[i].sizes(), other[i].sizes()) == outs[i].sizes(), "output with shape ",
                  outs[i].sizes(), " doesn't match the broadcast shape ", other[i].sizes());
  }

  std::vector<vt_tensor> d_out(n), d_a, d_b, d_c;
  for (size_t i = 0; i < n; i++) d_out[i] = desc(outs[i]);
  const std::vector<at::Tensor>& a_list = info->kind == 5 ? other : self;
  if (info->kind != 4) {
    for (const auto& t : a_list) d_a.push_back(desc(t));
    x.a = d_a.data();
  }
  if (info->kind != 5)
    for (const auto& t : other) d_b.push_back(desc(t));
  for (const auto& t : third) d_c.push_back(desc(t));
  x.n = static_cast<int64_t>(n);
  x.out = d_out.data();
  x.b = d_b.empty() ? nullptr : d_b.data();
  x.c = d_c.empty() ? nullptr : d_c.data();
  x.scalars = scalars.empty() ? nullptr : scalars.data();
  vt_tensor d_st{};
  if (scalar_tensor.defined()) {
    d_st = desc(scalar_tensor);
    x.scalar_tensor = &d_st;
  }
  const char* op_name = schema.name().c_str();
  check(vt_op_foreach(device_index(self[0]), op_name, &x));
  // What the op wrote is a new version of it, as after CPU's per-tensor
  // in-place ops: autograd then refuses a backward that saved the old value.
  if (inplace || out_variant)
    for (const auto& t : outs) t.unsafeGetTensorImpl()->bump_version();

  torch::jit::drop(*stack, nargs);
  if (schema.returns().size() == 1) stack->emplace_back(c10::List<at::Tensor>(outs));
}

// ------------------------------------------------------------------ fused steps

std::vector<vt_tensor> descs(const std::vector<at::Tensor>& v) {
  std::vector<vt_tensor> d;
  d.reserve(v.size());
  for (const auto& t : v) d.push_back(desc(t));
  return d;
}

bool fused_ok(const std::vector<at::Tensor>& params, std::initializer_list<const std::vector<at::Tensor>*> lists) {
  for (size_t i = 0; i < params.size(); i++) {
    const auto& p = params[i];
    const auto st = p.scalar_type();
    if (p.device().type() != kTpu || (st != at::kFloat && st != at::kBFloat16 && st != at::kHalf)) return false;
    for (const auto* l : lists) {
      const auto& t = (*l)[i];
      if (t.device().type() != kTpu || t.scalar_type() != st || !t.is_contiguous()) return false;
      TORCH_CHECK(t.sizes() == p.sizes(), "fused optimizer: a state or grad tensor of shape ", t.sizes(),
                  " does not match its param of shape ", p.sizes());
    }
  }
  return true;
}

bool opt_tensor(const IV& v, at::Tensor* out, vt_tensor* d, const vt_tensor** dp) {
  if (v.isNone()) return true;
  *out = v.toTensor();
  if (out->device().type() != kTpu || out->numel() != 1 || !float_dt(out->scalar_type())) return false;
  *d = desc(*out);
  *dp = d;
  return true;
}

void fused_adam_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  check_stack_devices(schema, *stack);
  const size_t nargs = schema.arguments().size();
  auto args = torch::jit::last(*stack, nargs);
  auto arg = [&](const char* n) -> const IV& { return args[*schema.argumentIndexWithName(n)]; };
  const auto params = arg("self").toTensorVector(), grads = arg("grads").toTensorVector(),
             m = arg("exp_avgs").toTensorVector(), v = arg("exp_avg_sqs").toTensorVector(),
             mx = arg("max_exp_avg_sqs").toTensorVector(), steps = arg("state_steps").toTensorVector();
  const bool amsgrad = arg("amsgrad").toBool();
  const size_t n = params.size();
  TORCH_CHECK(grads.size() == n && m.size() == n && v.size() == n && steps.size() == n && (!amsgrad || mx.size() == n),
              "fused Adam: all tensor lists must have the same length, got ", n, ", ", grads.size(), ", ", m.size(),
              ", ", v.size(), ", ", steps.size());
  if (n == 0) return torch::jit::drop(*stack, nargs);
  vt_fused_adam_args x{};
  at::Tensor lr_t, gs_t, fi_t;
  vt_tensor d_lr{}, d_gs{}, d_fi{};
  const IV& lr = arg("lr");
  bool ok = fused_ok(params, {&params, &grads, &m, &v}) && (!amsgrad || fused_ok(params, {&mx}));
  if (lr.isTensor()) ok = ok && opt_tensor(lr, &lr_t, &d_lr, &x.lr_tensor);
  else x.lr = lr.toDouble();
  ok = ok && opt_tensor(arg("grad_scale"), &gs_t, &d_gs, &x.grad_scale) &&
       opt_tensor(arg("found_inf"), &fi_t, &d_fi, &x.found_inf);
  for (const auto& s : steps) ok = ok && s.device().type() == kTpu && s.numel() == 1 && float_dt(s.scalar_type());
  if (!ok) return cpu_fallback(op, stack);
  const auto dp = descs(params), dg = descs(grads), dm = descs(m), dv = descs(v), ds = descs(steps);
  const auto dmx = amsgrad ? descs(mx) : std::vector<vt_tensor>();
  x.n = static_cast<int64_t>(n);
  x.params = dp.data();
  x.grads = dg.data();
  x.exp_avgs = dm.data();
  x.exp_avg_sqs = dv.data();
  x.max_exp_avg_sqs = amsgrad ? dmx.data() : nullptr;
  x.steps = ds.data();
  x.beta1 = arg("beta1").toDouble();
  x.beta2 = arg("beta2").toDouble();
  x.weight_decay = arg("weight_decay").toDouble();
  x.eps = arg("eps").toDouble();
  x.amsgrad = amsgrad;
  x.maximize = arg("maximize").toBool();
  x.adamw = schema.name() == "aten::_fused_adamw_";
  const char* op_name = x.adamw ? "aten::_fused_adamw_" : "aten::_fused_adam_";
  check(vt_op_fused_adam(device_index(params[0]), op_name, &x));
  torch::jit::drop(*stack, nargs);
}

void fused_sgd_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  check_stack_devices(schema, *stack);
  const size_t nargs = schema.arguments().size();
  auto args = torch::jit::last(*stack, nargs);
  auto arg = [&](const char* n) -> const IV& { return args[*schema.argumentIndexWithName(n)]; };
  const auto params = arg("self").toTensorVector(), grads = arg("grads").toTensorVector(),
             bufs = arg("momentum_buffer_list").toTensorVector();
  const double momentum = arg("momentum").toDouble();
  const size_t n = params.size();
  TORCH_CHECK(grads.size() == n && (momentum == 0 || bufs.size() == n),
              "fused SGD: all tensor lists must have the same length, got ", n, ", ", grads.size(), ", ", bufs.size());
  if (n == 0) return torch::jit::drop(*stack, nargs);
  vt_fused_sgd_args x{};
  at::Tensor lr_t, gs_t, fi_t;
  vt_tensor d_lr{}, d_gs{}, d_fi{};
  const IV& lr = arg("lr");
  bool ok = fused_ok(params, {&params, &grads}) && (momentum == 0 || fused_ok(params, {&bufs}));
  if (lr.isTensor()) ok = ok && opt_tensor(lr, &lr_t, &d_lr, &x.lr_tensor);
  else x.lr = lr.toDouble();
  ok = ok && opt_tensor(arg("grad_scale"), &gs_t, &d_gs, &x.grad_scale) &&
       opt_tensor(arg("found_inf"), &fi_t, &d_fi, &x.found_inf);
  if (!ok) return cpu_fallback(op, stack);
  const auto dp = descs(params), dg = descs(grads);
  const auto db = momentum != 0 ? descs(bufs) : std::vector<vt_tensor>();
  x.n = static_cast<int64_t>(n);
  x.params = dp.data();
  x.grads = dg.data();
  x.momentum_buffers = momentum != 0 ? db.data() : nullptr;
  x.weight_decay = arg("weight_decay").toDouble();
  x.momentum = momentum;
  x.dampening = arg("dampening").toDouble();
  x.nesterov = arg("nesterov").toBool();
  x.maximize = arg("maximize").toBool();
  x.is_first_step = arg("is_first_step").toBool();
  check(vt_op_fused_sgd(device_index(params[0]), "aten::_fused_sgd_", &x));
  torch::jit::drop(*stack, nargs);
}

}  // namespace

// Every overload of these foreach ops goes through the one boxed adapter.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  const auto fe = [&](const char* schema) {
    m.impl(schema, torch::CppFunction::makeFromBoxedFunction<&foreach_boxed>());
  };
  for (const char* op : {"add", "sub", "mul", "div"}) {
    const std::string b = std::string("_foreach_") + op;
    for (const char* ov : {"Scalar", "List", "ScalarList", "Tensor"}) {
      if (std::string(op) == "sub" && std::string(ov) == "Tensor") continue;
      fe((b + "." + ov).c_str());
      fe((b + "_." + ov).c_str());
      fe((b + "." + ov + "_out").c_str());
    }
  }
  for (const char* op : {"maximum", "minimum", "clamp_min", "clamp_max", "pow"}) {
    const std::string b = std::string("_foreach_") + op;
    for (const char* ov : {"Scalar", "List", "ScalarList"}) {
      fe((b + "." + ov).c_str());
      fe((b + "_." + ov).c_str());
      fe((b + "." + ov + "_out").c_str());
    }
  }
  fe("_foreach_pow.ScalarAndTensor");
  for (const char* op : {"addcmul", "addcdiv"}) {
    const std::string b = std::string("_foreach_") + op;
    for (const char* ov : {"Scalar", "ScalarList", "Tensor"}) {
      fe((b + "." + ov).c_str());
      fe((b + "_." + ov).c_str());
      fe((b + "." + ov + "_out").c_str());
    }
  }
  for (const char* ov : {"List", "Scalar", "ScalarList"}) {
    fe((std::string("_foreach_lerp.") + ov).c_str());
    fe((std::string("_foreach_lerp_.") + ov).c_str());
    fe((std::string("_foreach_lerp.") + ov + "_out").c_str());
  }
  for (const char* op : {"neg", "abs", "sqrt", "exp", "sign", "reciprocal"}) {
    const std::string b = std::string("_foreach_") + op;
    fe(b.c_str());
    fe((b + "_").c_str());
    fe((b + ".out").c_str());
  }
  fe("_foreach_zero_");
  fe("_foreach_copy_");
  fe("_foreach_norm.Scalar");
  fe("_foreach_max");
  m.impl("_fused_adam_", torch::CppFunction::makeFromBoxedFunction<&fused_adam_boxed>());
  m.impl("_fused_adam_.tensor_lr", torch::CppFunction::makeFromBoxedFunction<&fused_adam_boxed>());
  m.impl("_fused_adamw_", torch::CppFunction::makeFromBoxedFunction<&fused_adam_boxed>());
  m.impl("_fused_adamw_.tensor_lr", torch::CppFunction::makeFromBoxedFunction<&fused_adam_boxed>());
  m.impl("_fused_sgd_", torch::CppFunction::makeFromBoxedFunction<&fused_sgd_boxed>());
  m.impl("_fused_sgd_.tensor_lr", torch::CppFunction::makeFromBoxedFunction<&fused_sgd_boxed>());
}

}  // namespace vtpu
