// pointwise_ops.cpp — adapters from ATen's pointwise ops to the runtime's
// queued kernels: each works out PyTorch's result dtype, broadcast shape and
// output, describes the tensors and enqueues one C call. Complex add / sub /
// mul are composed of real ops (complex_ops.cpp); other dtypes or ranks the
// kernels do not take go to the CPU fallback.
#include <ATen/EmptyTensor.h>
#include <ATen/ExpandUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TypeProperties.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "device_check.h"

namespace vtpu {
namespace {

// FloatOnly: float (and promoted) inputs only; Activation: float inputs only, no promotion.
enum class Kind { Arith, TrueDiv, Compare, Logical, Bitwise, FloatMath, Gradient, FloatOnly, Activation };

// A CPU 0-dim tensor acts as a scalar (as on CUDA); any other CPU tensor
// meeting a tpu tensor is a device mismatch.
bool is_host_scalar(const at::Tensor& t) { return t.defined() && t.is_cpu() && t.dim() == 0; }

int common_device(std::initializer_list<const at::Tensor*> ts) {
  const at::Tensor* first = nullptr;
  for (const at::Tensor* t : ts) {
    if (!t->defined() || is_host_scalar(*t)) continue;
    if (!first) {
      first = t;
      continue;
    }
    TORCH_CHECK(t->device() == first->device(),
                "Expected all tensors to be on the same device, but found at least two devices, ", first->device(),
                " and ", t->device(), "!");
  }
  TORCH_CHECK(first && is_tpu(*first), "vtpu: expected a tpu tensor operand");
  return device_index(*first);
}

vt_scalar make_scalar(const at::Scalar& s, bool as_float) {
  vt_scalar v{};
  if (as_float) {
    v.f = s.toDouble();
    v.i = 0;
    v.is_float = 1;
  } else {
    v.i = s.isBoolean() ? static_cast<int64_t>(s.toBool()) : s.toLong();
    v.f = static_cast<double>(v.i);
    v.is_float = 0;
  }
  return v;
}

vt_dtype vt_of(c10::ScalarType st) {
  vt_dtype d{};
  TORCH_CHECK(to_vt_dtype(st, &d), "vtpu: dtype ", st, " is not supported by the tpu kernels");
  return d;
}

bool supported(c10::ScalarType st) {
  vt_dtype d{};
  return to_vt_dtype(st, &d);
}

void check_cast(c10::ScalarType result, const at::Tensor& out) {
  TORCH_CHECK(c10::canCast(result, out.scalar_type()), "result type ", result,
              " can't be cast to the desired output type ", out.scalar_type());
}

// ------------------------------------------------------------------ binary

struct Binary {
  vt_binary_op op;
  const char* name;
  Kind kind;
  const char* rounding_mode;  // div's trunc / floor
  // The result is laid out from the first operand alone: CPU runs the op
  // with a Scalar second operand (pow.Tensor_Scalar, clamp_min(Scalar)) as
  // a unary TensorIterator op, whose layout can differ from a binary one.
  bool unary_layout = false;
};

// The modes of binary, unary and ternary: out_arg undefined and !inplace:
// functional, the new result is returned; inplace: the result is a itself and
// an undefined tensor is returned, out_arg given: out_arg is resized and
// returned. They hold the caller's tensors by reference: copying a tensor
// Python also holds costs a Python reference count change per copy.
at::Tensor result_of(bool inplace, at::Tensor& fresh_out, const at::Tensor& out_arg) {
  if (inplace) return {};
  if (fresh_out.defined()) return std::move(fresh_out);
  return out_arg;
}

at::Tensor binary(const Binary& b, const at::Tensor& a, const at::Tensor& o, const at::Scalar& alpha,
                  const at::Tensor& out_arg, bool inplace, const double* params = nullptr) {
  const bool out_given = out_arg.defined();
  const at::Tensor* outp = inplace ? &a : &out_arg;
  const int dev = common_device({&a, &o, outp});
  const bool host_a = is_host_scalar(a), host_o = is_host_scalar(o);
  if (inplace)
    TORCH_CHECK(!host_a, "vtpu: in-place op on a CPU tensor");
  c10::ScalarType common = common_dtype(a, o);
  if ((b.kind == Kind::TrueDiv || b.kind == Kind::FloatOnly) && c10::isIntegralType(common, /*includeBool=*/true))
    common = c10::typeMetaToScalarType(c10::get_default_dtype());
  if (b.kind == Kind::Activation)
    TORCH_CHECK_NOT_IMPLEMENTED(c10::isFloatingType(common) || c10::isComplexType(common), "\"", b.name,
                                "\" not implemented for '", c10::toString(common), "'");
  if (b.kind == Kind::Bitwise)
    TORCH_CHECK_NOT_IMPLEMENTED(c10::isIntegralType(common, /*includeBool=*/true), "\"", b.name + 6,
                                "\" not implemented for '", c10::toString(common), "'");
  if ((b.op == VT_CLAMP_MIN || b.op == VT_CLAMP_MAX) && host_o) check_scalar_fits(o.item(), common);
  if (b.op == VT_HEAVISIDE) {
    TORCH_CHECK(!a.is_complex() && !o.is_complex(), "heaviside is not yet implemented for complex tensors.");
    TORCH_CHECK(a.scalar_type() == o.scalar_type(), "heaviside is not yet implemented for tensors with different dtypes.");
  }
  if (b.op == VT_SUB)
    TORCH_CHECK(common != at::kBool,
                "Subtraction, the `-` operator, with two bool tensors is not supported. "
                "Use the `^` or `logical_xor()` operator instead.");
  if (b.op == VT_ADD || b.op == VT_SUB) {  // CPU's alpha checks, in CPU's order
    TORCH_CHECK(!alpha.isBoolean() || common == at::kBool, "Boolean alpha only supported for Boolean results.");
    TORCH_CHECK(c10::isFloatingType(common) || c10::isComplexType(common) || alpha.isIntegral(/*includeBool=*/true),
                "For integral input tensors, argument alpha must not be a floating point number.");
    TORCH_CHECK(c10::isComplexType(common) || !alpha.isComplex(),
                "For non-complex input tensors, argument alpha must not be a complex number.");
  }
  const bool bool_out = b.kind == Kind::Compare || b.kind == Kind::Logical;
  const c10::ScalarType result = bool_out ? at::kBool : common;
  const auto shape = at::infer_size_dimvector(a.sizes(), o.sizes());

  at::Tensor fresh_out;
  if (inplace) {
    TORCH_CHECK(a.sizes() == c10::IntArrayRef(shape), "output with shape ", a.sizes(),
                " doesn't match the broadcast shape ", c10::IntArrayRef(shape));
    check_cast(result, a);
  } else if (out_given) {
    check_cast(result, out_arg);
    if (b.unary_layout) resize_elementwise_out(out_arg, shape, {a});
    else resize_elementwise_out(out_arg, shape, {a, o});
  } else {
    fresh_out = b.unary_layout ? new_output(shape, result, dev, {&a}) : new_output(shape, result, dev, {&a, &o});
    outp = &fresh_out;
  }
  const at::Tensor& out = *outp;
  const bool fresh = !inplace && !out_given;
  if (out.numel() == 0) return result_of(inplace, fresh_out, out_arg);
  if (c10::isComplexType(common) && complex_binary(b.op, a, o, alpha, out, fresh))
    return result_of(inplace, fresh_out, out_arg);

  vt_tensor to, ta, tb;  // describe() fills them: no 840-byte zeroing per op
  // activation gradients have float kernels only; integer ones go to the fallback
  const bool native = supported(common) && (b.kind != Kind::Gradient || c10::isFloatingType(common)) &&
                      describe(out, &to) && (host_a || describe(a, &ta)) && (host_o || describe(o, &tb));
  VT_FALLBACK_UNLESS(native, lacking({a, o, out}));
  const vt_dtype compute = vt_of(common);
  const bool fl = vt_dtype_is_float(compute) != 0;
  vt_scalar sa{}, sb{};
  if (host_a) sa = make_scalar(a.item(), fl);
  if (host_o) sb = make_scalar(o.item(), fl);
  const vt_scalar al = make_scalar(alpha, fl);
  check(vt_op_binary_ex(dev, b.name, b.op, &to, host_a ? nullptr : &ta, host_a ? &sa : nullptr, host_o ? nullptr : &tb,
                        host_o ? &sb : nullptr, compute, al, params));
  return result_of(inplace, fresh_out, out_arg);
}

at::Tensor binary_scalar(const Binary& b, const at::Tensor& a, const at::Scalar& s, const at::Tensor& out,
                         bool inplace) {
  if (b.op == VT_POW)  // as CPU's pow meta function
    TORCH_CHECK(!(c10::isIntegralType(a.scalar_type(), /*includeBool=*/true) && s.isIntegral(/*includeBool=*/true) &&
                  s.toLong() < 0),
                "Integers to negative integer powers are not allowed.");
  return binary(b, a, at::scalar_to_tensor(s), 1, out, inplace);
}

#define BIN(var, vop, str, kind) const Binary var{vop, "aten::" str, Kind::kind, nullptr};
BIN(kAdd, VT_ADD, "add", Arith)
BIN(kSub, VT_SUB, "sub", Arith)
BIN(kMul, VT_MUL, "mul", Arith)
BIN(kDiv, VT_DIV, "div", TrueDiv)
BIN(kRemainder, VT_REMAINDER, "remainder", Arith)
BIN(kFmod, VT_FMOD, "fmod", Arith)
BIN(kPow, VT_POW, "pow", Arith)
const Binary kPowScalar{VT_POW, "aten::pow", Kind::Arith, nullptr, /*unary_layout=*/true};
BIN(kMaximum, VT_MAXIMUM, "maximum", Arith)
BIN(kMinimum, VT_MINIMUM, "minimum", Arith)
BIN(kAtan2, VT_ATAN2, "atan2", TrueDiv)
BIN(kEq, VT_EQ, "eq", Compare)
BIN(kNe, VT_NE, "ne", Compare)
BIN(kLt, VT_LT, "lt", Compare)
BIN(kLe, VT_LE, "le", Compare)
BIN(kGt, VT_GT, "gt", Compare)
BIN(kGe, VT_GE, "ge", Compare)
BIN(kLogicalAnd, VT_LOGICAL_AND, "logical_and", Logical)
BIN(kLogicalOr, VT_LOGICAL_OR, "logical_or", Logical)
BIN(kLogicalXor, VT_LOGICAL_XOR, "logical_xor", Logical)
BIN(kBitAnd, VT_BITWISE_AND, "bitwise_and", Bitwise)
BIN(kBitOr, VT_BITWISE_OR, "bitwise_or", Bitwise)
BIN(kBitXor, VT_BITWISE_XOR, "bitwise_xor", Bitwise)
BIN(kThresholdBw, VT_THRESHOLD_BACKWARD, "threshold_backward", Gradient)
BIN(kTanhBw, VT_TANH_BACKWARD, "tanh_backward", Gradient)
BIN(kSigmoidBw, VT_SIGMOID_BACKWARD, "sigmoid_backward", Gradient)
const Binary kDivTrunc{VT_DIV_TRUNC, "aten::div", Kind::Arith, "trunc"};
const Binary kDivFloor{VT_DIV_FLOOR, "aten::div", Kind::Arith, "floor"};
#undef BIN

const Binary& div_mode(std::optional<c10::string_view> mode) {
  if (!mode) return kDiv;
  if (*mode == "trunc") return kDivTrunc;
  if (*mode == "floor") return kDivFloor;
  TORCH_CHECK(false, "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '", *mode, "'");
}

// ------------------------------------------------------------------ unary

struct Unary {
  vt_unary_op op;
  const char* name;
  Kind kind;  // Arith: keeps dtype; FloatMath: ints promote to float; Logical: bool result
};

at::Tensor unary(const Unary& u, const at::Tensor& a, const at::Tensor& out_arg, bool inplace,
                 const double* params = nullptr) {
  const at::Tensor* outp = inplace ? &a : &out_arg;
  const int dev = common_device({&a, outp});
  VT_FALLBACK_UNLESS(!c10::isComplexType(a.scalar_type()), lacking({a}));  // CPU's complex activations
  if (u.kind == Kind::Activation)
    TORCH_CHECK_NOT_IMPLEMENTED(c10::isFloatingType(a.scalar_type()), "\"", u.name, "\" not implemented for '",
                                c10::toString(a.scalar_type()), "'");
  VT_FALLBACK_UNLESS(supported(a.scalar_type()) && a.dim() <= VT_MAX_DIMS, lacking({a}));
  c10::ScalarType compute = a.scalar_type();
  if (u.kind == Kind::FloatMath && c10::isIntegralType(compute, /*includeBool=*/true))
    compute = c10::typeMetaToScalarType(c10::get_default_dtype());
  if (u.kind == Kind::Bitwise)
    TORCH_CHECK_NOT_IMPLEMENTED(c10::isIntegralType(compute, /*includeBool=*/true), "\"", u.name + 6,
                                "\" not implemented for '", c10::toString(compute), "'");
  if (u.op == VT_NEG)
    TORCH_CHECK(compute != at::kBool,
                "Negation, the `-` operator, on a bool tensor is not supported. "
                "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.");
  const c10::ScalarType result = u.kind == Kind::Logical ? at::kBool : compute;
  at::Tensor fresh_out;
  if (inplace) {
    if (u.kind != Kind::Logical) check_cast(result, a);
  } else if (out_arg.defined()) {
    if (u.kind != Kind::Logical) check_cast(result, out_arg);
    resize_elementwise_out(out_arg, a.sizes(), {a});
  } else {
    fresh_out = new_output(a.sizes(), result, dev, {&a});
    outp = &fresh_out;
  }
  const at::Tensor& out = *outp;
  if (out.numel() == 0) return result_of(inplace, fresh_out, out_arg);
  vt_tensor to, ta;
  VT_FALLBACK_UNLESS(describe(out, &to) && describe(a, &ta), lacking({a, out}));
  check(vt_op_unary_ex(dev, u.name, u.op, &to, &ta, vt_of(compute), params));
  return result_of(inplace, fresh_out, out_arg);
}

#define UN(var, vop, str, kind) const Unary var{vop, "aten::" str, Kind::kind};
UN(kNeg, VT_NEG, "neg", Arith)
UN(kAbs, VT_ABS, "abs", Arith)
UN(kSign, VT_SIGN, "sign", Arith)
UN(kRelu, VT_RELU, "relu", Arith)
UN(kCeil, VT_CEIL, "ceil", Arith)
UN(kFloor, VT_FLOOR, "floor", Arith)
UN(kRound, VT_ROUND, "round", Arith)
UN(kTrunc, VT_TRUNC, "trunc", Arith)
UN(kFrac, VT_FRAC, "frac", Arith)
UN(kReciprocal, VT_RECIPROCAL, "reciprocal", FloatMath)
UN(kExp, VT_EXP, "exp", FloatMath)
UN(kExpm1, VT_EXPM1, "expm1", FloatMath)
UN(kLog, VT_LOG, "log", FloatMath)
UN(kLog1p, VT_LOG1P, "log1p", FloatMath)
UN(kLog2, VT_LOG2, "log2", FloatMath)
UN(kLog10, VT_LOG10, "log10", FloatMath)
UN(kSqrt, VT_SQRT, "sqrt", FloatMath)
UN(kRsqrt, VT_RSQRT, "rsqrt", FloatMath)
UN(kSin, VT_SIN, "sin", FloatMath)
UN(kCos, VT_COS, "cos", FloatMath)
UN(kTan, VT_TAN, "tan", FloatMath)
UN(kTanh, VT_TANH, "tanh", FloatMath)
UN(kSigmoid, VT_SIGMOID, "sigmoid", FloatMath)
UN(kErf, VT_ERF, "erf", FloatMath)
UN(kLogicalNot, VT_LOGICAL_NOT, "logical_not", Logical)
UN(kBitNot, VT_BITWISE_NOT, "bitwise_not", Bitwise)
UN(kIsnan, VT_ISNAN, "isnan", Logical)

UN(kSilu, VT_SILU, "silu", Activation)
UN(kGelu, VT_GELU, "gelu", Activation)
UN(kGeluTanh, VT_GELU_TANH, "gelu", Activation)
UN(kSoftplus, VT_SOFTPLUS, "softplus", Activation)
UN(kMish, VT_MISH, "mish", Activation)
UN(kElu, VT_ELU, "elu", Activation)
UN(kLeakyRelu, VT_LEAKY_RELU, "leaky_relu", Activation)
UN(kHardsigmoid, VT_HARDSIGMOID, "hardsigmoid", Activation)
UN(kHardswish, VT_HARDSWISH, "hardswish", Activation)
UN(kLogSigmoid, VT_LOG_SIGMOID, "log_sigmoid_forward", Activation)
UN(kLogit, VT_LOGIT, "logit", FloatMath)
UN(kNanToNum, VT_NAN_TO_NUM, "nan_to_num", Arith)
UN(kIsneginf, VT_ISNEGINF, "isneginf", Logical)
UN(kIsposinf, VT_ISPOSINF, "isposinf", Logical)
UN(kSignbit, VT_SIGNBIT, "signbit", Logical)
UN(kSgn, VT_SIGN, "sgn", Arith)
UN(kSinh, VT_SINH, "sinh", FloatMath)
UN(kCosh, VT_COSH, "cosh", FloatMath)
UN(kAsin, VT_ASIN, "asin", FloatMath)
UN(kAcos, VT_ACOS, "acos", FloatMath)
UN(kAtan, VT_ATAN, "atan", FloatMath)
UN(kAsinh, VT_ASINH, "asinh", FloatMath)
UN(kAcosh, VT_ACOSH, "acosh", FloatMath)
UN(kAtanh, VT_ATANH, "atanh", FloatMath)
UN(kExp2, VT_EXP2, "exp2", FloatMath)
UN(kErfc, VT_ERFC, "erfc", FloatMath)
UN(kErfinv, VT_ERFINV, "erfinv", FloatMath)
UN(kLgamma, VT_LGAMMA, "lgamma", FloatMath)
UN(kDigamma, VT_DIGAMMA, "digamma", FloatMath)
// polygamma(n, x) for n = 0 (digamma) and 1 (trigamma: digamma's gradient);
// higher orders run on the CPU fallback
UN(kPolygamma0, VT_DIGAMMA, "polygamma", FloatMath)
UN(kPolygamma1, VT_TRIGAMMA, "polygamma", FloatMath)
#undef UN

#define BIN2(var, vop, str, kind) const Binary var{vop, "aten::" str, Kind::kind, nullptr};
BIN2(kSiluBw, VT_SILU_BACKWARD, "silu_backward", Activation)
BIN2(kGeluBw, VT_GELU_BACKWARD, "gelu_backward", Activation)
BIN2(kGeluTanhBw, VT_GELU_TANH_BACKWARD, "gelu_backward", Activation)
BIN2(kMishBw, VT_MISH_BACKWARD, "mish_backward", Activation)
BIN2(kSoftplusBw, VT_SOFTPLUS_BACKWARD, "softplus_backward", Activation)
BIN2(kEluBw, VT_ELU_BACKWARD, "elu_backward", Activation)
BIN2(kLeakyReluBw, VT_LEAKY_RELU_BACKWARD, "leaky_relu_backward", Activation)
BIN2(kHardtanhBw, VT_HARDTANH_BACKWARD, "hardtanh_backward", Activation)
BIN2(kHardsigmoidBw, VT_HARDSIGMOID_BACKWARD, "hardsigmoid_backward", Activation)
BIN2(kHardswishBw, VT_HARDSWISH_BACKWARD, "hardswish_backward", Activation)
BIN2(kLogSigmoidBw, VT_LOG_SIGMOID_BACKWARD, "log_sigmoid_backward", Activation)
BIN2(kLogitBw, VT_LOGIT_BACKWARD, "logit_backward", Activation)
BIN2(kXlogy, VT_XLOGY, "xlogy", FloatOnly)
BIN2(kHypot, VT_HYPOT, "hypot", Activation)
BIN2(kCopysign, VT_COPYSIGN, "copysign", FloatOnly)
BIN2(kLogaddexp, VT_LOGADDEXP, "logaddexp", Activation)
BIN2(kLogaddexp2, VT_LOGADDEXP2, "logaddexp2", Activation)
BIN2(kFmin, VT_FMIN, "fmin", Arith)
BIN2(kFmax, VT_FMAX, "fmax", Arith)
BIN2(kHeaviside, VT_HEAVISIDE, "heaviside", Arith)
BIN2(kShl, VT_SHIFT_LEFT, "bitwise_left_shift", Bitwise)
BIN2(kShr, VT_SHIFT_RIGHT, "bitwise_right_shift", Bitwise)
const Binary kClampMin{VT_CLAMP_MIN, "aten::clamp_min", Kind::Arith, nullptr, /*unary_layout=*/true};  // Scalar bound
const Binary kClampMax{VT_CLAMP_MAX, "aten::clamp_max", Kind::Arith, nullptr, /*unary_layout=*/true};
BIN2(kClampMinT, VT_MAXIMUM, "clamp_min", Arith)
BIN2(kClampMaxT, VT_MINIMUM, "clamp_max", Arith)
BIN2(kLerpS, VT_LERP_SCALAR, "lerp", Activation)
#undef BIN2

// ------------------------------------------------------------------ ternary and parameterised ops

at::Tensor wrap_scalar(const at::Scalar& s) {
  at::Tensor t = at::scalar_to_tensor(s);
  t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return t;
}

// out = op(a, b, c): PyTorch's common dtype of the three, broadcast shape;
// host 0-dim operands (wrapped scalars) travel in the command.
at::Tensor ternary(vt_ternary_op op, const char* name, const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                   const at::Scalar& value, const at::Tensor& out_arg, bool inplace, bool float_only = false,
                   bool unary_layout = false) {  // unary_layout: as Binary's
  const at::Tensor* outp = inplace ? &a : &out_arg;
  const int dev = common_device({&a, &b, &c, outp});
  at::native::ResultTypeState st{};
  st = at::native::update_result_type_state(a, st);
  st = at::native::update_result_type_state(b, st);
  st = at::native::update_result_type_state(c, st);
  const c10::ScalarType common = at::native::result_type(st);
  VT_FALLBACK_UNLESS(!c10::isComplexType(common), lacking({a, b, c}));  // e.g. complex lerp
  if (float_only)
    TORCH_CHECK_NOT_IMPLEMENTED(c10::isFloatingType(common), "\"", name, "\" not implemented for '",
                                c10::toString(common), "'");
  const auto shape = at::infer_size_dimvector(at::infer_size_dimvector(a.sizes(), b.sizes()), c.sizes());
  at::Tensor fresh_out;
  if (inplace) {
    TORCH_CHECK(a.sizes() == c10::IntArrayRef(shape), "output with shape ", a.sizes(),
                " doesn't match the broadcast shape ", c10::IntArrayRef(shape));
    check_cast(common, a);
  } else if (out_arg.defined()) {
    check_cast(common, out_arg);
    if (unary_layout) resize_elementwise_out(out_arg, shape, {a});
    else resize_elementwise_out(out_arg, shape, {a, b, c});
  } else {
    fresh_out = unary_layout ? new_output(shape, common, dev, {&a}) : new_output(shape, common, dev, {&a, &b, &c});
    outp = &fresh_out;
  }
  const at::Tensor& out = *outp;
  if (out.numel() == 0) return result_of(inplace, fresh_out, out_arg);
  vt_tensor to, t[3];
  const at::Tensor* in[3] = {&a, &b, &c};
  bool native = supported(common) && describe(out, &to);
  for (int k = 0; k < 3 && native; k++) native = is_host_scalar(*in[k]) || describe(*in[k], &t[k]);
  VT_FALLBACK_UNLESS(native, lacking({a, b, c, out}));
  const vt_dtype compute = vt_of(common);
  const bool fl = vt_dtype_is_float(compute) != 0;
  vt_scalar sc[3]{};
  for (int k = 0; k < 3; k++)
    if (is_host_scalar(*in[k])) sc[k] = make_scalar(in[k]->item(), fl);
  auto T = [&](int k) { return is_host_scalar(*in[k]) ? nullptr : &t[k]; };
  auto S = [&](int k) { return is_host_scalar(*in[k]) ? &sc[k] : nullptr; };
  check(vt_op_ternary(dev, name, op, &to, T(0), S(0), T(1), S(1), T(2), S(2), compute, make_scalar(value, fl)));
  return result_of(inplace, fresh_out, out_arg);
}

at::Tensor addc(vt_ternary_op op, const at::Tensor& a, const at::Tensor& t1, const at::Tensor& t2,
                const at::Scalar& v, const at::Tensor& out, bool inplace) {
  if (op == VT_ADDCDIV)
    TORCH_CHECK(!(c10::isIntegralType(t1.scalar_type(), true) && c10::isIntegralType(t2.scalar_type(), true)),
                "Integer division with addcdiv is no longer supported, and in a future release addcdiv will perform "
                "a true division of tensor1 and tensor2. The historic addcdiv behavior can be implemented as "
                "(input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for integer inputs and as "
                "(input + value * tensor1 / tensor2) for float inputs. The future addcdiv behavior is just the "
                "latter implementation: (input + value * tensor1 / tensor2), for all dtypes.");
  return ternary(op, op == VT_ADDCMUL ? "aten::addcmul" : "aten::addcdiv", a, t1, t2, v, out, inplace);
}

at::Tensor clamp_scalar(const at::Tensor& a, const std::optional<at::Scalar>& lo, const std::optional<at::Scalar>& hi,
                        const at::Tensor& out, bool inplace) {
  TORCH_CHECK(lo || hi, "torch.clamp: At least one of 'min' or 'max' must not be None");
  for (const auto* s : {&lo, &hi})  // CPU converts a bound to the result's dtype, checked
    if (s->has_value()) check_scalar_fits(**s, at::result_type(a, **s));
  at::native::ResultTypeState st{};
  st = at::native::update_result_type_state(a, st);
  for (const auto* s : {&lo, &hi})
    if (s->has_value()) st = at::native::update_result_type_state(**s, st);
  const c10::ScalarType result = c10::isFloatingType(a.scalar_type()) ? a.scalar_type() : at::native::result_type(st);
  TORCH_CHECK_NOT_IMPLEMENTED(result != at::kBool, "\"clamp\" not implemented for 'Bool'");  // as CPU
  if (out.defined() && !inplace)  // a unary op on CPU: out= must have the result's dtype
    TORCH_CHECK(out.scalar_type() == result, "Found dtype ", out.scalar_type(), " but expected ", result);
  if (lo && hi)  // CPU's clamp(Scalar, Scalar) is a unary op: laid out so
    return ternary(VT_CLAMP, "aten::clamp", a, wrap_scalar(*lo), wrap_scalar(*hi), 1, out, inplace, false,
                   /*unary_layout=*/true);
  if (lo) return binary(kClampMin, a, wrap_scalar(*lo), 1, out, inplace);
  return binary(kClampMax, a, wrap_scalar(*hi), 1, out, inplace);
}

// CPU's hardtanh keeps an integer input's dtype: its bounds are truncated
// to integers (PyTorch's legacy rule), where clamp would promote to float.
std::pair<at::Scalar, at::Scalar> hardtanh_bounds(const at::Tensor& a, const at::Scalar& lo, const at::Scalar& hi) {
  TORCH_CHECK(a.scalar_type() != at::kBool, "Bool inputs not supported for hardtanh");
  if (!c10::isIntegralType(a.scalar_type(), /*includeBool=*/false)) return {lo, hi};
  const int64_t l = lo.toLong(), h = hi.toLong();
  TORCH_CHECK(a.scalar_type() != at::kByte || (l >= 0 && h >= 0),
              "cannot do hardtanh on an unsigned type with negative limits");
  return {l, h};
}

at::Tensor clamp_tensor(const at::Tensor& a, const std::optional<at::Tensor>& lo, const std::optional<at::Tensor>& hi,
                        const at::Tensor& out, bool inplace) {
  const bool has_lo = lo && lo->defined(), has_hi = hi && hi->defined();
  TORCH_CHECK(has_lo || has_hi, "torch.clamp: At least one of 'min' or 'max' must not be None");
  if (has_lo && has_hi) {  // as CPU: clamp with two tensor bounds has no Bool kernel
    at::native::ResultTypeState st{};
    for (const at::Tensor* t : {&a, &*lo, &*hi}) st = at::native::update_result_type_state(*t, st);
    TORCH_CHECK_NOT_IMPLEMENTED(at::native::result_type(st) != at::kBool, "\"clamp\" not implemented for 'Bool'");
    return ternary(VT_CLAMP, "aten::clamp", a, *lo, *hi, 1, out, inplace);
  }
  if (has_lo) return binary(kClampMinT, a, *lo, 1, out, inplace);
  return binary(kClampMaxT, a, *hi, 1, out, inplace);
}

at::Tensor lerp_scalar(const at::Tensor& a, const at::Tensor& end, const at::Scalar& w, const at::Tensor& out, bool inplace) {
  TORCH_CHECK(a.dtype() == end.dtype(), "expected dtype ", a.dtype(), " for `end` but got dtype ", end.dtype());
  VT_FALLBACK_UNLESS(!a.is_complex() && !w.isComplex(), lacking({a}), " or a complex weight");
  const double p[VT_EW_MAX_PARAMS] = {w.toDouble()};
  return binary(kLerpS, a, end, 1, out, inplace, p);
}

at::Tensor lerp_tensor(const at::Tensor& a, const at::Tensor& end, const at::Tensor& w, const at::Tensor& out, bool inplace) {
  TORCH_CHECK(a.dtype() == end.dtype(), "expected dtype ", a.dtype(), " for `end` but got dtype ", end.dtype());
  TORCH_CHECK(a.dtype() == w.dtype(), "expected dtype ", a.dtype(), " for `weight` but got dtype ", w.dtype());
  return ternary(VT_LERP, "aten::lerp", a, end, w, 1, out, inplace, /*float_only=*/true);
}

const Unary& gelu_spec(c10::string_view approximate) {
  TORCH_CHECK(approximate == "none" || approximate == "tanh", "approximate argument must be either none or tanh.");
  return approximate == "tanh" ? kGeluTanh : kGelu;
}
const Binary& gelu_bw_spec(c10::string_view approximate) {
  TORCH_CHECK(approximate == "none" || approximate == "tanh", "approximate argument must be either none or tanh.");
  return approximate == "tanh" ? kGeluTanhBw : kGeluBw;
}

// PyTorch's defaults: NaN -> 0, +inf -> the dtype's max, -inf -> its lowest.
at::Tensor nan_to_num(const at::Tensor& a, std::optional<double> nan, std::optional<double> posinf,
                      std::optional<double> neginf, const at::Tensor& out, bool inplace) {
  double big = 0;
  switch (a.scalar_type()) {
    case at::kHalf: big = 65504.0; break;
    case at::kBFloat16: big = 3.3895313892515355e38; break;
    case at::kFloat: big = 3.4028234663852886e38; break;
    default: big = 1.7976931348623157e308; break;
  }
  const double p[VT_EW_MAX_PARAMS] = {nan.value_or(0.0), posinf.value_or(big), neginf.value_or(-big)};
  if (!inplace && !out.defined()) {  // as CPU's nan_to_num lays out its result
    at::Tensor result = at::empty_like(a);
    return unary(kNanToNum, a, result, false, p);
  }
  return unary(kNanToNum, a, out, inplace, p);
}

at::Tensor logit(const at::Tensor& a, std::optional<double> eps, const at::Tensor& out, bool inplace) {
  const double p[VT_EW_MAX_PARAMS] = {eps.value_or(-1.0)};
  return unary(kLogit, a, out, inplace, p);
}


// ------------------------------------------------------------------ fill, where

at::Tensor& fill_scalar(at::Tensor& self, const at::Scalar& value) {
  if (self.numel() == 0) return self;
  const int dev = device_index(self);
  vt_tensor t;
  VT_FALLBACK_UNLESS(describe(self, &t), lacking({self}));
  check_scalar_fits(value, self.scalar_type());
  const bool fl = vt_dtype_is_float(t.dtype) != 0;
  // a bool tensor takes the truth of the value (nan is true), as CPU
  const vt_scalar v = t.dtype == VT_BOOL ? vt_scalar_from_int(value.toBool()) : make_scalar(value, fl && !value.isBoolean());
  check(vt_op_fill(dev, "aten::fill_", &t, v));
  return self;
}

at::Tensor& fill_tensor(at::Tensor& self, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ", value.dim(),
              " dimensions.");
  if (value.is_cpu()) return fill_scalar(self, value.item());
  common_device({&self, &value});
  if (self.numel() == 0) return self;
  vt_tensor d, s;
  VT_FALLBACK_UNLESS(describe(self, &d) && describe(value, &s), lacking({self, value}));
  check(vt_op_copy(device_index(self), "aten::fill_", &d, &s));
  return self;
}

at::Tensor& zero_(at::Tensor& self) { return fill_scalar(self, 0); }

at::Tensor where_out(const at::Tensor& cond, const at::Tensor& a, const at::Tensor& b, at::Tensor out) {
  TORCH_CHECK(cond.scalar_type() == at::kBool,
              "where expected condition to be a boolean tensor, but got a tensor with dtype ", cond.scalar_type());
  const int dev = common_device({&cond, &a, &b, &out});
  const auto device = c10::Device(kTpu, static_cast<c10::DeviceIndex>(dev));
  // host scalars become 0-dim device tensors: the kernel broadcasts them
  const at::Tensor ca = is_host_scalar(cond) ? cond.to(device) : cond;
  const at::Tensor aa = is_host_scalar(a) ? a.to(device) : a;
  const at::Tensor bb = is_host_scalar(b) ? b.to(device) : b;
  const c10::ScalarType result = common_dtype(a, b);
  const auto shape = at::infer_size_dimvector(at::infer_size_dimvector(cond.sizes(), a.sizes()), b.sizes());
  if (out.defined()) {
    check_cast(result, out);
    resize_elementwise_out(out, shape, {cond, a, b});
  } else {
    out = new_output(shape, result, dev, {&cond, &aa, &bb});
  }
  if (out.numel() == 0) return out;
  // operands in the result dtype so the kernel only converts on store
  const at::Tensor ea = aa.scalar_type() == out.scalar_type() ? aa : aa.to(out.scalar_type());
  const at::Tensor eb = bb.scalar_type() == out.scalar_type() ? bb : bb.to(out.scalar_type());
  vt_tensor to, tc, ta, tb;
  VT_FALLBACK_UNLESS(describe(out, &to) && describe(ca, &tc) && describe(ea, &ta) && describe(eb, &tb),
                     lacking({cond, a, b, out}));
  check(vt_op_where(dev, "aten::where", &to, &tc, &ta, &tb));
  return out;
}

// pow with a scalar exponent. CPU computes some exponents as other ops for
// float, double and bf16 results (PowKernel.cpp): 0.5, -0.5 and -1 as
// sqrt, rsqrt and reciprocal, 2, 3 and -2 as x*x, x*x*x and 1/(x*x), each
// step rounded in the result dtype; pow() rounds once, so it differed from
// CPU in the last place (x.pow(2) of an RMS norm, x ** 3 of a tanh gelu).
// The same ops here give CPU's bits. Half and other exponents run pow.
at::Tensor pow_scalar(const at::Tensor& a, const at::Scalar& s, const at::Tensor& out, bool inplace) {
  const c10::ScalarType r = at::result_type(a, s);
  const bool special_dtype = r == at::kFloat || r == at::kDouble || r == at::kBFloat16;
  const double e = s.isComplex() || s.isBoolean() ? 0.0 : s.toDouble();
  const bool special = special_dtype && (e == 0.5 || e == -0.5 || e == -1.0 || e == 2.0 || e == 3.0 || e == -2.0);
  if (!special || (inplace && a.scalar_type() != r) || a.device().type() != c10::DeviceType::PrivateUse1 ||
      (out.defined() && out.device() != a.device()))
    return binary_scalar(kPowScalar, a, s, out, inplace);
  const at::Tensor x = a.scalar_type() == r ? a : a.to(r);
  const at::Tensor& dst = inplace ? a : out;  // undefined: a fresh result
  if (e == 0.5 || e == -0.5 || e == -1.0) {
    const Unary& u = e == 0.5 ? kSqrt : e == -0.5 ? kRsqrt : kReciprocal;
    return unary(u, x, dst, false);
  }
  if (e == 2.0) return binary(kMul, x, x, 1, dst, false);
  const at::Tensor sq = binary(kMul, x, x, 1, {}, false);
  return e == 3.0 ? binary(kMul, sq, x, 1, dst, false) : unary(kReciprocal, sq, dst, false);
}

}  // namespace

// Registration: functional, in-place and out= overloads of each op.
#define REG_BINARY_FN(m, schema, spec) \
  VT_IMPL(m, schema, [](const at::Tensor& a, const at::Tensor& b) { return binary(spec, a, b, 1, {}, false); });
#define REG_BINARY_INPLACE(m, schema, spec)                            \
  VT_IMPL(m, schema, [](at::Tensor& a, const at::Tensor& b) -> at::Tensor& { \
    binary(spec, a, b, 1, {}, true);                                    \
    return a;                                                           \
  });
#define REG_BINARY_OUT(m, schema, spec)                                                    \
  VT_IMPL(m, schema, [](const at::Tensor& a, const at::Tensor& b, at::Tensor& out) -> at::Tensor& { \
    binary(spec, a, b, 1, out, false);                                                     \
    return out;                                                                            \
  });
#define REG_BINARY(m, str, spec)           \
  REG_BINARY_FN(m, str ".Tensor", spec)    \
  REG_BINARY_INPLACE(m, str "_.Tensor", spec)

#define REG_UNARY(m, str, spec)                                                                       \
  VT_IMPL(m, str, [](const at::Tensor& a) { return unary(spec, a, {}, false); });                          \
  VT_IMPL(m, str "_", [](at::Tensor& a) -> at::Tensor& {                                                   \
    unary(spec, a, {}, true);                                                                          \
    return a;                                                                                          \
  });                                                                                                  \
  VT_IMPL(m, str ".out", [](const at::Tensor& a, at::Tensor& out) -> at::Tensor& {                         \
    unary(spec, a, out, false);                                                                        \
    return out;                                                                                        \
  });

#define REG_COMPARE(m, str, spec)                                                                             \
  REG_BINARY(m, str, spec)                                                                                    \
  REG_BINARY_OUT(m, str ".Tensor_out", spec)                                                                  \
  VT_IMPL(m, str ".Scalar", [](const at::Tensor& a, const at::Scalar& s) { return binary_scalar(spec, a, s, {}, false); }); \
  VT_IMPL(m, str "_.Scalar", [](at::Tensor& a, const at::Scalar& s) -> at::Tensor& {                              \
    binary_scalar(spec, a, s, {}, true);                                                                      \
    return a;                                                                                                 \
  });                                                                                                         \
  VT_IMPL(m, str ".Scalar_out", [](const at::Tensor& a, const at::Scalar& s, at::Tensor& out) -> at::Tensor& {    \
    binary_scalar(spec, a, s, out, false);                                                                    \
    return out;                                                                                               \
  });

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  // add / sub carry alpha
  VT_IMPL(m, "add.Tensor", [](const at::Tensor& a, const at::Tensor& b, const at::Scalar& al) {
    return binary(kAdd, a, b, al, {}, false);
  });
  VT_IMPL(m, "add_.Tensor", [](at::Tensor& a, const at::Tensor& b, const at::Scalar& al) -> at::Tensor& {
    binary(kAdd, a, b, al, {}, true);
    return a;
  });
  VT_IMPL(m, "add.out", [](const at::Tensor& a, const at::Tensor& b, const at::Scalar& al, at::Tensor& out) -> at::Tensor& {
    binary(kAdd, a, b, al, out, false);
    return out;
  });
  VT_IMPL(m, "sub.Tensor", [](const at::Tensor& a, const at::Tensor& b, const at::Scalar& al) {
    return binary(kSub, a, b, al, {}, false);
  });
  VT_IMPL(m, "sub_.Tensor", [](at::Tensor& a, const at::Tensor& b, const at::Scalar& al) -> at::Tensor& {
    binary(kSub, a, b, al, {}, true);
    return a;
  });
  VT_IMPL(m, "sub.out", [](const at::Tensor& a, const at::Tensor& b, const at::Scalar& al, at::Tensor& out) -> at::Tensor& {
    binary(kSub, a, b, al, out, false);
    return out;
  });

  REG_BINARY(m, "mul", kMul)
  REG_BINARY_OUT(m, "mul.out", kMul)
  REG_BINARY(m, "div", kDiv)
  REG_BINARY_OUT(m, "div.out", kDiv)
  VT_IMPL(m, "div.Tensor_mode", [](const at::Tensor& a, const at::Tensor& b, std::optional<c10::string_view> mode) {
    return binary(div_mode(mode), a, b, 1, {}, false);
  });
  VT_IMPL(m, "div_.Tensor_mode", [](at::Tensor& a, const at::Tensor& b, std::optional<c10::string_view> mode) -> at::Tensor& {
    binary(div_mode(mode), a, b, 1, {}, true);
    return a;
  });
  VT_IMPL(m, "div.out_mode", [](const at::Tensor& a, const at::Tensor& b, std::optional<c10::string_view> mode,
                            at::Tensor& out) -> at::Tensor& {
    binary(div_mode(mode), a, b, 1, out, false);
    return out;
  });
  REG_BINARY_FN(m, "floor_divide", kDivFloor)
  REG_BINARY_INPLACE(m, "floor_divide_.Tensor", kDivFloor)
  REG_BINARY_OUT(m, "floor_divide.out", kDivFloor)
  REG_BINARY(m, "remainder", kRemainder)
  REG_BINARY_OUT(m, "remainder.Tensor_out", kRemainder)
  REG_BINARY(m, "fmod", kFmod)
  REG_BINARY_OUT(m, "fmod.Tensor_out", kFmod)
  REG_BINARY_FN(m, "pow.Tensor_Tensor", kPow)
  REG_BINARY_INPLACE(m, "pow_.Tensor", kPow)
  REG_BINARY_OUT(m, "pow.Tensor_Tensor_out", kPow)
  // Scalar ** Tensor (logaddexp2's gradient, 2 ** x): the base rides as a host scalar
  VT_IMPL(m, "pow.Scalar", [](const at::Scalar& s, const at::Tensor& e) { return binary(kPow, wrap_scalar(s), e, 1, {}, false); });
  VT_IMPL(m, "pow.Scalar_out", [](const at::Scalar& s, const at::Tensor& e, at::Tensor& out) -> at::Tensor& {
    binary(kPow, wrap_scalar(s), e, 1, out, false);
    return out;
  });
  VT_IMPL(m, "pow.Tensor_Scalar", [](const at::Tensor& a, const at::Scalar& s) { return pow_scalar(a, s, {}, false); });
  VT_IMPL(m, "pow_.Scalar", [](at::Tensor& a, const at::Scalar& s) -> at::Tensor& {
    pow_scalar(a, s, {}, true);
    return a;
  });
  VT_IMPL(m, "pow.Tensor_Scalar_out", [](const at::Tensor& a, const at::Scalar& s, at::Tensor& out) -> at::Tensor& {
    pow_scalar(a, s, out, false);
    return out;
  });
  REG_BINARY_FN(m, "maximum", kMaximum)
  REG_BINARY_OUT(m, "maximum.out", kMaximum)
  REG_BINARY_FN(m, "minimum", kMinimum)
  REG_BINARY_OUT(m, "minimum.out", kMinimum)
  REG_BINARY_FN(m, "atan2", kAtan2)
  REG_BINARY_INPLACE(m, "atan2_", kAtan2)
  REG_BINARY_OUT(m, "atan2.out", kAtan2)

  REG_COMPARE(m, "eq", kEq)
  REG_COMPARE(m, "ne", kNe)
  REG_COMPARE(m, "lt", kLt)
  REG_COMPARE(m, "le", kLe)
  REG_COMPARE(m, "gt", kGt)
  REG_COMPARE(m, "ge", kGe)
  REG_BINARY_OUT(m, "logical_and.out", kLogicalAnd)
  REG_BINARY_OUT(m, "logical_or.out", kLogicalOr)
  REG_BINARY_OUT(m, "logical_xor.out", kLogicalXor)
  // activation gradients: threshold_backward carries the threshold where add carries alpha
  VT_IMPL(m, "threshold_backward", [](const at::Tensor& g, const at::Tensor& x, const at::Scalar& th) {
    return binary(kThresholdBw, g, x, th, {}, false);
  });
  VT_IMPL(m, "threshold_backward.grad_input",
         [](const at::Tensor& g, const at::Tensor& x, const at::Scalar& th, at::Tensor& out) -> at::Tensor& {
           binary(kThresholdBw, g, x, th, out, false);
           return out;
         });
  REG_BINARY_FN(m, "tanh_backward", kTanhBw)
  REG_BINARY_OUT(m, "tanh_backward.grad_input", kTanhBw)
  REG_BINARY_FN(m, "sigmoid_backward", kSigmoidBw)
  REG_BINARY_OUT(m, "sigmoid_backward.grad_input", kSigmoidBw)
  REG_BINARY(m, "bitwise_and", kBitAnd)
  REG_BINARY(m, "bitwise_or", kBitOr)
  REG_BINARY(m, "bitwise_xor", kBitXor)
  REG_BINARY_OUT(m, "bitwise_and.Tensor_out", kBitAnd)
  REG_BINARY_OUT(m, "bitwise_or.Tensor_out", kBitOr)
  REG_BINARY_OUT(m, "bitwise_xor.Tensor_out", kBitXor)

  REG_UNARY(m, "neg", kNeg)
  REG_UNARY(m, "sign", kSign)
  REG_UNARY(m, "ceil", kCeil)
  REG_UNARY(m, "floor", kFloor)
  REG_UNARY(m, "round", kRound)
  REG_UNARY(m, "trunc", kTrunc)
  REG_UNARY(m, "frac", kFrac)
  REG_UNARY(m, "reciprocal", kReciprocal)
  REG_UNARY(m, "exp", kExp)
  REG_UNARY(m, "expm1", kExpm1)
  REG_UNARY(m, "log", kLog)
  REG_UNARY(m, "log1p", kLog1p)
  REG_UNARY(m, "log2", kLog2)
  REG_UNARY(m, "log10", kLog10)
  REG_UNARY(m, "sqrt", kSqrt)
  REG_UNARY(m, "rsqrt", kRsqrt)
  REG_UNARY(m, "sin", kSin)
  REG_UNARY(m, "cos", kCos)
  REG_UNARY(m, "tan", kTan)
  REG_UNARY(m, "tanh", kTanh)
  REG_UNARY(m, "sigmoid", kSigmoid)
  REG_UNARY(m, "erf", kErf)
  REG_UNARY(m, "bitwise_not", kBitNot)
  VT_IMPL(m, "abs.out", [](const at::Tensor& a, at::Tensor& out) -> at::Tensor& {
    unary(kAbs, a, out, false);
    return out;
  });
  VT_IMPL(m, "relu", [](const at::Tensor& a) { return unary(kRelu, a, {}, false); });
  VT_IMPL(m, "relu_", [](at::Tensor& a) -> at::Tensor& {
    unary(kRelu, a, {}, true);
    return a;
  });
  VT_IMPL(m, "logical_not.out", [](const at::Tensor& a, at::Tensor& out) -> at::Tensor& {
    unary(kLogicalNot, a, out, false);
    return out;
  });
  VT_IMPL(m, "isnan", [](const at::Tensor& a) { return unary(kIsnan, a, {}, false); });

  // ---- activations, their gradients and more math
#define P(...) const double p[VT_EW_MAX_PARAMS] = {__VA_ARGS__}
#define REG_ACT(str, spec, SIG, PARAMS, ...)                                                                  \
  VT_IMPL(m, str, [](const at::Tensor& a SIG) { PARAMS; return unary(spec, a, {}, false, __VA_ARGS__); });     \
  VT_IMPL(m, str "_", [](at::Tensor& a SIG) -> at::Tensor& { PARAMS; unary(spec, a, {}, true, __VA_ARGS__); return a; }); \
  VT_IMPL(m, str ".out", [](const at::Tensor& a SIG, at::Tensor& out) -> at::Tensor& {                          \
    PARAMS; unary(spec, a, out, false, __VA_ARGS__); return out; });
#define NOSIG
#define NOP (void)0
  REG_ACT("silu", kSilu, NOSIG, NOP, nullptr)
  REG_ACT("mish", kMish, NOSIG, NOP, nullptr)
  REG_ACT("hardsigmoid", kHardsigmoid, NOSIG, NOP, nullptr)
  REG_ACT("hardswish", kHardswish, NOSIG, NOP, nullptr)
  #define GELU_SIG , c10::string_view ap
  REG_ACT("gelu", gelu_spec(ap), GELU_SIG, NOP, nullptr)
  VT_IMPL(m, "softplus", [](const at::Tensor& a, const at::Scalar& b, const at::Scalar& t) {
    P(b.toDouble(), t.toDouble());
    return unary(kSoftplus, a, {}, false, p);
  });
  VT_IMPL(m, "softplus.out", [](const at::Tensor& a, const at::Scalar& b, const at::Scalar& t, at::Tensor& out) -> at::Tensor& {
    P(b.toDouble(), t.toDouble());
    unary(kSoftplus, a, out, false, p);
    return out;
  });
#define ELU_SIG , const at::Scalar& al, const at::Scalar& sc, const at::Scalar& is
  REG_ACT("elu", kElu, ELU_SIG, P(al.toDouble(), sc.toDouble(), is.toDouble()), p)
  #define LRF_SIG , const at::Scalar& sl
  REG_ACT("leaky_relu", kLeakyRelu, LRF_SIG, P(sl.toDouble()), p)
  // hardtanh is clamp, as on CPU, into empty_like(a) as CPU allocates it
  VT_IMPL(m, "hardtanh", [](const at::Tensor& a, const at::Scalar& lo, const at::Scalar& hi) {
    const auto [l, h] = hardtanh_bounds(a, lo, hi);
    at::Tensor out = at::empty_like(a);
    clamp_scalar(a, l, h, out, false);
    return out;
  });
  VT_IMPL(m, "hardtanh_", [](at::Tensor& a, const at::Scalar& lo, const at::Scalar& hi) -> at::Tensor& {
    const auto [l, h] = hardtanh_bounds(a, lo, hi);
    clamp_scalar(a, l, h, {}, true);
    return a;
  });
  VT_IMPL(m, "hardtanh.out", [](const at::Tensor& a, const at::Scalar& lo, const at::Scalar& hi, at::Tensor& out) -> at::Tensor& {
    const auto [l, h] = hardtanh_bounds(a, lo, hi);
    clamp_scalar(a, l, h, out, false);
    return out;
  });
  VT_IMPL(m, "log_sigmoid_forward", [](const at::Tensor& a) {
    // the buffer is not needed by the backward (as on CUDA): empty
    at::Tensor o = unary(kLogSigmoid, a, {}, false);
    return std::make_tuple(o, at::empty({0}, o.options()));
  });
  VT_IMPL(m, "log_sigmoid_forward.output", [](const at::Tensor& a, at::Tensor& out, at::Tensor& buffer) {
    unary(kLogSigmoid, a, out, false);
    return std::tuple<at::Tensor&, at::Tensor&>(out, buffer);
  });
  VT_IMPL(m, "logit", [](const at::Tensor& a, std::optional<double> eps) { return logit(a, eps, {}, false); });
  VT_IMPL(m, "logit_", [](at::Tensor& a, std::optional<double> eps) -> at::Tensor& { logit(a, eps, {}, true); return a; });
  VT_IMPL(m, "logit.out", [](const at::Tensor& a, std::optional<double> eps, at::Tensor& out) -> at::Tensor& {
    logit(a, eps, out, false);
    return out;
  });
  VT_IMPL(m, "nan_to_num.out", [](const at::Tensor& a, std::optional<double> n, std::optional<double> pi,
                              std::optional<double> ni, at::Tensor& out) -> at::Tensor& {
    nan_to_num(a, n, pi, ni, out, false);
    return out;
  });
  VT_IMPL(m, "nan_to_num", [](const at::Tensor& a, std::optional<double> n, std::optional<double> pi, std::optional<double> ni) {
    return nan_to_num(a, n, pi, ni, {}, false);
  });
  VT_IMPL(m, "nan_to_num_", [](at::Tensor& a, std::optional<double> n, std::optional<double> pi,
                           std::optional<double> ni) -> at::Tensor& {
    nan_to_num(a, n, pi, ni, {}, true);
    return a;
  });
#define REG_LOGICAL(str, spec)                                                                  \
  VT_IMPL(m, str, [](const at::Tensor& a) { return unary(spec, a, {}, false); });                    \
  VT_IMPL(m, str ".out", [](const at::Tensor& a, at::Tensor& out) -> at::Tensor& {                   \
    unary(spec, a, out, false);                                                                  \
    return out;                                                                                  \
  });
  REG_LOGICAL("isneginf", kIsneginf)
  REG_LOGICAL("isposinf", kIsposinf)
  REG_LOGICAL("signbit", kSignbit)
  REG_UNARY(m, "sgn", kSgn)
  REG_UNARY(m, "sinh", kSinh)
  REG_UNARY(m, "cosh", kCosh)
  REG_UNARY(m, "asin", kAsin)
  REG_UNARY(m, "acos", kAcos)
  REG_UNARY(m, "atan", kAtan)
  REG_UNARY(m, "asinh", kAsinh)
  REG_UNARY(m, "acosh", kAcosh)
  REG_UNARY(m, "atanh", kAtanh)
  REG_UNARY(m, "exp2", kExp2)
  REG_UNARY(m, "erfc", kErfc)
  REG_UNARY(m, "erfinv", kErfinv)
  REG_UNARY(m, "lgamma", kLgamma)
  REG_UNARY(m, "digamma", kDigamma)
  VT_IMPL(m, "polygamma", [](int64_t n, const at::Tensor& a) {
    VT_FALLBACK_UNLESS(n == 0 || n == 1, "polygamma of order ", n);
    return unary(n == 0 ? kPolygamma0 : kPolygamma1, a, {}, false);
  });
  VT_IMPL(m, "polygamma.out", [](int64_t n, const at::Tensor& a, at::Tensor& out) -> at::Tensor& {
    VT_FALLBACK_UNLESS(n == 0 || n == 1, "polygamma of order ", n);
    unary(n == 0 ? kPolygamma0 : kPolygamma1, a, out, false);
    return out;
  });
  VT_IMPL(m, "polygamma_", [](at::Tensor& a, int64_t n) -> at::Tensor& {
    VT_FALLBACK_UNLESS(n == 0 || n == 1, "polygamma of order ", n);
    unary(n == 0 ? kPolygamma0 : kPolygamma1, a, {}, true);
    return a;
  });

  // gradients: a = grad_output, b = the forward input; params ride along
#define REG_GRAD(str, spec, SIG, PARAMS, ...)                                                                \
  VT_IMPL(m, str, [](const at::Tensor& g, const at::Tensor& x SIG) {                                            \
    PARAMS;                                                                                                 \
    return binary(spec, g, x, 1, {}, false, __VA_ARGS__);                                                   \
  });
#define REG_GRAD_OUT(str, spec, SIG, PARAMS, ...)                                                            \
  VT_IMPL(m, str ".grad_input", [](const at::Tensor& g, const at::Tensor& x SIG, at::Tensor& out) -> at::Tensor& { \
    PARAMS;                                                                                                 \
    binary(spec, g, x, 1, out, false, __VA_ARGS__);                                                         \
    return out;                                                                                             \
  });
  REG_GRAD("silu_backward", kSiluBw, NOSIG, NOP, nullptr)
  REG_GRAD_OUT("silu_backward", kSiluBw, NOSIG, NOP, nullptr)
  REG_GRAD("mish_backward", kMishBw, NOSIG, NOP, nullptr)
  REG_GRAD("hardsigmoid_backward", kHardsigmoidBw, NOSIG, NOP, nullptr)
  REG_GRAD_OUT("hardsigmoid_backward", kHardsigmoidBw, NOSIG, NOP, nullptr)
  REG_GRAD("hardswish_backward", kHardswishBw, NOSIG, NOP, nullptr)
  REG_GRAD("gelu_backward", gelu_bw_spec(ap), GELU_SIG, NOP, nullptr)
  REG_GRAD_OUT("gelu_backward", gelu_bw_spec(ap), GELU_SIG, NOP, nullptr)
#define SP_SIG , const at::Scalar& b, const at::Scalar& t
  REG_GRAD("softplus_backward", kSoftplusBw, SP_SIG, P(b.toDouble(), t.toDouble()), p)
  REG_GRAD_OUT("softplus_backward", kSoftplusBw, SP_SIG, P(b.toDouble(), t.toDouble()), p)
#define LR_SIG , const at::Scalar& sl, bool self_is_result
  REG_GRAD("leaky_relu_backward", kLeakyReluBw, LR_SIG, P(sl.toDouble()), p)
  REG_GRAD_OUT("leaky_relu_backward", kLeakyReluBw, LR_SIG, P(sl.toDouble()), p)
#define HT_SIG , const at::Scalar& lo, const at::Scalar& hi
  REG_GRAD("hardtanh_backward", kHardtanhBw, HT_SIG, P(lo.toDouble(), hi.toDouble()), p)
  REG_GRAD_OUT("hardtanh_backward", kHardtanhBw, HT_SIG, P(lo.toDouble(), hi.toDouble()), p)
#define LS_SIG , const at::Tensor& buffer
  REG_GRAD("log_sigmoid_backward", kLogSigmoidBw, LS_SIG, NOP, nullptr)
  REG_GRAD_OUT("log_sigmoid_backward", kLogSigmoidBw, LS_SIG, NOP, nullptr)
#define LG_SIG , std::optional<double> eps
  REG_GRAD("logit_backward", kLogitBw, LG_SIG, P(eps.value_or(-1.0)), p)
  REG_GRAD_OUT("logit_backward", kLogitBw, LG_SIG, P(eps.value_or(-1.0)), p)
  VT_IMPL(m, "elu_backward", [](const at::Tensor& g, const at::Scalar& al, const at::Scalar& sc, const at::Scalar& is,
                            bool is_result, const at::Tensor& x) {
    P(al.toDouble(), sc.toDouble(), is.toDouble(), is_result ? 1.0 : 0.0);
    return binary(kEluBw, g, x, 1, {}, false, p);
  });
  VT_IMPL(m, "elu_backward.grad_input", [](const at::Tensor& g, const at::Scalar& al, const at::Scalar& sc,
                                       const at::Scalar& is, bool is_result, const at::Tensor& x,
                                       at::Tensor& out) -> at::Tensor& {
    P(al.toDouble(), sc.toDouble(), is.toDouble(), is_result ? 1.0 : 0.0);
    binary(kEluBw, g, x, 1, out, false, p);
    return out;
  });

  // binary math
  REG_BINARY_FN(m, "xlogy.Tensor", kXlogy)
  REG_BINARY_INPLACE(m, "xlogy_.Tensor", kXlogy)
  REG_BINARY_OUT(m, "xlogy.OutTensor", kXlogy)
  REG_BINARY_FN(m, "hypot", kHypot)
  REG_BINARY_INPLACE(m, "hypot_", kHypot)
  REG_BINARY_OUT(m, "hypot.out", kHypot)
  REG_BINARY_FN(m, "copysign.Tensor", kCopysign)
  REG_BINARY_INPLACE(m, "copysign_.Tensor", kCopysign)
  REG_BINARY_OUT(m, "copysign.out", kCopysign)
  REG_BINARY_FN(m, "logaddexp", kLogaddexp)
  REG_BINARY_OUT(m, "logaddexp.out", kLogaddexp)
  REG_BINARY_FN(m, "logaddexp2", kLogaddexp2)
  REG_BINARY_OUT(m, "logaddexp2.out", kLogaddexp2)
  REG_BINARY_FN(m, "fmin", kFmin)
  REG_BINARY_OUT(m, "fmin.out", kFmin)
  REG_BINARY_FN(m, "fmax", kFmax)
  REG_BINARY_OUT(m, "fmax.out", kFmax)
  REG_BINARY_FN(m, "heaviside", kHeaviside)
  REG_BINARY_INPLACE(m, "heaviside_", kHeaviside)
  REG_BINARY_OUT(m, "heaviside.out", kHeaviside)
  REG_BINARY(m, "bitwise_left_shift", kShl)
  REG_BINARY_OUT(m, "bitwise_left_shift.Tensor_out", kShl)
  REG_BINARY(m, "bitwise_right_shift", kShr)
  REG_BINARY_OUT(m, "bitwise_right_shift.Tensor_out", kShr)
  REG_BINARY_FN(m, "__lshift__.Tensor", kShl)
  REG_BINARY_INPLACE(m, "__ilshift__.Tensor", kShl)
  REG_BINARY_FN(m, "__rshift__.Tensor", kShr)
  REG_BINARY_INPLACE(m, "__irshift__.Tensor", kShr)
  VT_IMPL(m, "__lshift__.Scalar", [](const at::Tensor& a, const at::Scalar& s) { return binary_scalar(kShl, a, s, {}, false); });
  VT_IMPL(m, "__rshift__.Scalar", [](const at::Tensor& a, const at::Scalar& s) { return binary_scalar(kShr, a, s, {}, false); });

  // clamp family, lerp, addcmul / addcdiv
  using OptS = const std::optional<at::Scalar>&;
  using OptT = const std::optional<at::Tensor>&;
  VT_IMPL(m, "clamp", [](const at::Tensor& a, OptS lo, OptS hi) { return clamp_scalar(a, lo, hi, {}, false); });
  VT_IMPL(m, "clamp_", [](at::Tensor& a, OptS lo, OptS hi) -> at::Tensor& { clamp_scalar(a, lo, hi, {}, true); return a; });
  VT_IMPL(m, "clamp.out", [](const at::Tensor& a, OptS lo, OptS hi, at::Tensor& out) -> at::Tensor& {
    clamp_scalar(a, lo, hi, out, false);
    return out;
  });
  VT_IMPL(m, "clamp.Tensor", [](const at::Tensor& a, OptT lo, OptT hi) { return clamp_tensor(a, lo, hi, {}, false); });
  VT_IMPL(m, "clamp_.Tensor", [](at::Tensor& a, OptT lo, OptT hi) -> at::Tensor& { clamp_tensor(a, lo, hi, {}, true); return a; });
  VT_IMPL(m, "clamp.Tensor_out", [](const at::Tensor& a, OptT lo, OptT hi, at::Tensor& out) -> at::Tensor& {
    clamp_tensor(a, lo, hi, out, false);
    return out;
  });
  // clamp_min / clamp_max with a Scalar bound are clamp_scalar with one bound
#define REG_CLAMP1(str, LO, HI, specT)                                                                      \
  VT_IMPL(m, str, [](const at::Tensor& a, const at::Scalar& v) { return clamp_scalar(a, LO, HI, {}, false); }); \
  VT_IMPL(m, str "_", [](at::Tensor& a, const at::Scalar& v) -> at::Tensor& {                                   \
    clamp_scalar(a, LO, HI, {}, true);                                                                      \
    return a;                                                                                               \
  });                                                                                                       \
  VT_IMPL(m, str ".out", [](const at::Tensor& a, const at::Scalar& v, at::Tensor& out) -> at::Tensor& {         \
    clamp_scalar(a, LO, HI, out, false);                                                                    \
    return out;                                                                                             \
  });                                                                                                       \
  REG_BINARY_FN(m, str ".Tensor", specT)                                                                    \
  REG_BINARY_INPLACE(m, str "_.Tensor", specT)                                                              \
  REG_BINARY_OUT(m, str ".Tensor_out", specT)
  REG_CLAMP1("clamp_min", v, std::nullopt, kClampMinT)
  REG_CLAMP1("clamp_max", std::nullopt, v, kClampMaxT)
  VT_IMPL(m, "lerp.Scalar", [](const at::Tensor& a, const at::Tensor& e, const at::Scalar& w) { return lerp_scalar(a, e, w, {}, false); });
  VT_IMPL(m, "lerp_.Scalar", [](at::Tensor& a, const at::Tensor& e, const at::Scalar& w) -> at::Tensor& {
    lerp_scalar(a, e, w, {}, true);
    return a;
  });
  VT_IMPL(m, "lerp.Scalar_out", [](const at::Tensor& a, const at::Tensor& e, const at::Scalar& w, at::Tensor& out) -> at::Tensor& {
    lerp_scalar(a, e, w, out, false);
    return out;
  });
  VT_IMPL(m, "lerp.Tensor", [](const at::Tensor& a, const at::Tensor& e, const at::Tensor& w) { return lerp_tensor(a, e, w, {}, false); });
  VT_IMPL(m, "lerp_.Tensor", [](at::Tensor& a, const at::Tensor& e, const at::Tensor& w) -> at::Tensor& {
    lerp_tensor(a, e, w, {}, true);
    return a;
  });
  VT_IMPL(m, "lerp.Tensor_out", [](const at::Tensor& a, const at::Tensor& e, const at::Tensor& w, at::Tensor& out) -> at::Tensor& {
    lerp_tensor(a, e, w, out, false);
    return out;
  });
#define REG_ADDC(str, op)                                                                                              \
  VT_IMPL(m, str, [](const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, const at::Scalar& v) {                 \
    return addc(op, a, b, c, v, {}, false);                                                                            \
  });                                                                                                                  \
  VT_IMPL(m, str "_", [](at::Tensor& a, const at::Tensor& b, const at::Tensor& c, const at::Scalar& v) -> at::Tensor& {    \
    addc(op, a, b, c, v, {}, true);                                                                                    \
    return a;                                                                                                          \
  });                                                                                                                  \
  VT_IMPL(m, str ".out", [](const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, const at::Scalar& v,            \
                        at::Tensor& out) -> at::Tensor& {                                                              \
    addc(op, a, b, c, v, out, false);                                                                                  \
    return out;                                                                                                        \
  });
  REG_ADDC("addcmul", VT_ADDCMUL)
  REG_ADDC("addcdiv", VT_ADDCDIV)
#undef P

  VT_IMPL(m, "fill_.Scalar", fill_scalar);
  VT_IMPL(m, "fill_.Tensor", fill_tensor);
  VT_IMPL(m, "zero_", zero_);
  VT_IMPL(m, "where.self", [](const at::Tensor& c, const at::Tensor& a, const at::Tensor& b) {
    return where_out(c, a, b, {});
  });
  VT_IMPL(m, "where.self_out", [](const at::Tensor& c, const at::Tensor& a, const at::Tensor& b, at::Tensor& out) -> at::Tensor& {
    where_out(c, a, b, out);
    return out;
  });
}

}  // namespace vtpu
