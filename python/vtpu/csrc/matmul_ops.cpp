// matmul_ops.cpp — adapters from ATen's matrix products to the runtime's MXU
// kernel (vt_matmul): shape and dtype checks with PyTorch's messages, output
// allocation, the precision in force. Dtypes the MXU does not take (integers)
// go to the CPU fallback.
#include <ATen/native/Resize.h>
#include <ATen/ops/addr_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "common.h"
#include "device_check.h"

namespace vtpu {

namespace {

bool mxu_dtype(c10::ScalarType st) {
  return st == at::kFloat || st == at::kBFloat16 || st == at::kHalf || st == at::kDouble;
}

const char* dtype_name(const at::Tensor& t) { return c10::toString(t.scalar_type()); }

void check_same_device(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.device() == b.device(), "Expected all tensors to be on the same device, but found at least two devices, ",
              a.device(), " and ", b.device(), "!");
}

// out = beta * bias + alpha * (a @ b); the caller has checked shapes and sized out.
void run_matmul(const char* name, const at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                const at::Tensor* bias, double alpha, double beta) {
  if (out.numel() == 0) return;
  vt_tensor to{}, ta{}, tb{}, tc{};
  const bool ok = describe(out, &to) && describe(a, &ta) && describe(b, &tb) && (!bias || describe(*bias, &tc));
  VT_FALLBACK_UNLESS(ok, lacking({out, a, b}));
  check(vt_op_matmul(device_index(out), name, &to, &ta, &tb, bias ? &tc : nullptr, alpha, beta, matmul_precision()));
}

void check_mm(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.dim() == 2, "self must be a matrix");
  TORCH_CHECK(b.dim() == 2, "mat2 must be a matrix");
  check_same_device(a, b);
  TORCH_CHECK(a.size(1) == b.size(0), "mat1 and mat2 shapes cannot be multiplied (", a.size(0), "x", a.size(1),
              " and ", b.size(0), "x", b.size(1), ")");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "expected m1 and m2 to have the same dtype, but got: ",
              dtype_name(a), " != ", dtype_name(b));
}

void check_bmm(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.dim() == 3, "batch1 must be a 3D tensor");
  TORCH_CHECK(b.dim() == 3, "batch2 must be a 3D tensor");
  check_same_device(a, b);
  TORCH_CHECK(b.size(0) == a.size(0) && b.size(1) == a.size(2),
              "Expected size for first two dimensions of batch2 tensor to be: [", a.size(0), ", ", a.size(2),
              "] but got: [", b.size(0), ", ", b.size(1), "].");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "expected scalar type ", dtype_name(a), " but found ",
              dtype_name(b));
}

at::Tensor new_like(const at::Tensor& a, c10::IntArrayRef shape) { return at::empty(shape, a.options()); }

at::Tensor& prepare_out(at::Tensor& out, const at::Tensor& a, c10::IntArrayRef shape) {
  TORCH_CHECK(out.scalar_type() == a.scalar_type(), "Expected out tensor to have dtype ", dtype_name(a),
              ", but got ", dtype_name(out), " instead");
  check_same_device(out, a);
  at::native::resize_output(out, shape);
  return out;
}

// ------------------------------------------------------------------ mm / addmm

at::Tensor& mm_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  check_mm(a, b);
  VT_FALLBACK_UNLESS(mxu_dtype(a.scalar_type()), "dtype ", a.scalar_type());
  prepare_out(out, a, {a.size(0), b.size(1)});
  run_matmul("aten::mm", out, a, b, nullptr, 1.0, 0.0);
  return out;
}

at::Tensor mm(const at::Tensor& a, const at::Tensor& b) {
  check_mm(a, b);
  VT_FALLBACK_UNLESS(mxu_dtype(a.scalar_type()), "dtype ", a.scalar_type());
  at::Tensor out = new_like(a, {a.size(0), b.size(1)});
  run_matmul("aten::mm", out, a, b, nullptr, 1.0, 0.0);
  return out;
}

void check_bias(const at::Tensor& bias, c10::IntArrayRef shape, const at::Tensor& a) {
  check_same_device(bias, a);
  TORCH_CHECK(bias.scalar_type() == a.scalar_type(), "self and mat2 must have the same dtype, but got ",
              dtype_name(bias), " and ", dtype_name(a));
  auto expanded = at::infer_size(bias.sizes(), shape);  // raises PyTorch's broadcast error
  TORCH_CHECK(c10::IntArrayRef(expanded) == shape, "The expanded size of the tensor (", shape.back(),
              ") must match the existing size (", bias.sizes().back(), ")");
}

at::Tensor& addmm_out(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b, const at::Scalar& beta,
                      const at::Scalar& alpha, at::Tensor& out) {
  check_mm(a, b);
  VT_FALLBACK_UNLESS(mxu_dtype(a.scalar_type()), "dtype ", a.scalar_type());
  const std::vector<int64_t> shape{a.size(0), b.size(1)};
  check_bias(self, shape, a);
  const double be = beta.toDouble();
  if (!out.is_same(self)) prepare_out(out, a, shape);
  run_matmul("aten::addmm", out, a, b, be != 0.0 ? &self : nullptr, alpha.toDouble(), be);
  return out;
}

at::Tensor addmm(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b, const at::Scalar& beta,
                 const at::Scalar& alpha) {
  check_mm(a, b);
  VT_FALLBACK_UNLESS(mxu_dtype(a.scalar_type()), "dtype ", a.scalar_type());
  at::Tensor out = new_like(a, {a.size(0), b.size(1)});
  return addmm_out(self, a, b, beta, alpha, out);
}

at::Tensor& addmm_(at::Tensor& self, const at::Tensor& a, const at::Tensor& b, const at::Scalar& beta,
                   const at::Scalar& alpha) {
  check_mm(a, b);
  TORCH_CHECK(self.sizes() == c10::IntArrayRef({a.size(0), b.size(1)}), "The input tensor must be of shape [",
              a.size(0), ", ", b.size(1), "] to be updated in place, got ", self.sizes());
  VT_FALLBACK_UNLESS(mxu_dtype(a.scalar_type()), "dtype ", a.scalar_type());
  return addmm_out(self, a, b, beta, alpha, self);
}

// ------------------------------------------------------------------ bmm / baddbmm

at::Tensor& bmm_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  check_bmm(a, b);
  VT_FALLBACK_UNLESS(mxu_dtype(a.scalar_type()), "dtype ", a.scalar_type());
  prepare_out(out, a, {a.size(0), a.size(1), b.size(2)});
  run_matmul("aten::bmm", out, a, b, nullptr, 1.0, 0.0);
  return out;
}

at::Tensor bmm(const at::Tensor& a, const at::Tensor& b) {
  check_bmm(a, b);
  VT_FALLBACK_UNLESS(mxu_dtype(a.scalar_type()), "dtype ", a.scalar_type());
  at::Tensor out = new_like(a, {a.size(0), a.size(1), b.size(2)});
  run_matmul("aten::bmm", out, a, b, nullptr, 1.0, 0.0);
  return out;
}

at::Tensor& baddbmm_out(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b, const at::Scalar& beta,
                        const at::Scalar& alpha, at::Tensor& out) {
  check_bmm(a, b);
  VT_FALLBACK_UNLESS(mxu_dtype(a.scalar_type()), "dtype ", a.scalar_type());
  const std::vector<int64_t> shape{a.size(0), a.size(1), b.size(2)};
  check_bias(self, shape, a);
  const double be = beta.toDouble();
  if (!out.is_same(self)) prepare_out(out, a, shape);
  run_matmul("aten::baddbmm", out, a, b, be != 0.0 ? &self : nullptr, alpha.toDouble(), be);
  return out;
}

at::Tensor baddbmm(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b, const at::Scalar& beta,
                   const at::Scalar& alpha) {
  check_bmm(a, b);
  VT_FALLBACK_UNLESS(mxu_dtype(a.scalar_type()), "dtype ", a.scalar_type());
  at::Tensor out = new_like(a, {a.size(0), a.size(1), b.size(2)});
  return baddbmm_out(self, a, b, beta, alpha, out);
}

at::Tensor& baddbmm_(at::Tensor& self, const at::Tensor& a, const at::Tensor& b, const at::Scalar& beta,
                     const at::Scalar& alpha) {
  check_bmm(a, b);
  VT_FALLBACK_UNLESS(mxu_dtype(a.scalar_type()), "dtype ", a.scalar_type());
  return baddbmm_out(self, a, b, beta, alpha, self);
}

// ------------------------------------------------------------------ vectors: addmv, dot

// A vector as a one-column [K, 1] or one-row [1, K] matrix view.
vt_tensor as_column(vt_tensor v) {
  v.ndim = 2;
  v.sizes[1] = 1;
  v.strides[1] = 1;
  return v;
}
vt_tensor as_row(vt_tensor v) {
  v.ndim = 2;
  v.sizes[1] = v.sizes[0];
  v.strides[1] = v.strides[0];
  v.sizes[0] = 1;
  v.strides[0] = v.sizes[1] * v.strides[1];
  return v;
}

at::Tensor& addmv_out(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec, const at::Scalar& beta,
                      const at::Scalar& alpha, at::Tensor& out) {
  TORCH_CHECK((mat.dim() == 2 && vec.dim() == 1 && self.dim() <= 1),
              "vector + matrix @ vector expected, got ", self.dim(), ", ", mat.dim(), ", ", vec.dim());
  TORCH_CHECK(mat.size(1) == vec.size(0) && (mat.size(0) == self.numel() || self.numel() == 1),
              "size mismatch, got input (", self.size(0), "), mat (", mat.size(0), "x", mat.size(1), "), vec (",
              vec.size(0), ")");
  check_same_device(mat, vec);
  VT_FALLBACK_UNLESS(mxu_dtype(mat.scalar_type()) && mat.scalar_type() == vec.scalar_type(), "dtypes ",
                     mat.scalar_type(), " and ", vec.scalar_type());
  if (!out.is_same(self)) prepare_out(out, mat, {mat.size(0)});
  if (out.numel() == 0) return out;
  const double be = beta.toDouble();
  const at::Tensor bias = be != 0.0 ? self.expand({mat.size(0)}) : at::Tensor();
  const vt_tensor to = as_column(view_of(out)), ta = view_of(mat), tb = as_column(view_of(vec));
  vt_tensor tc{};
  if (bias.defined()) tc = as_column(view_of(bias));
  check(vt_op_matmul(device_index(out), "aten::addmv", &to, &ta, &tb, bias.defined() ? &tc : nullptr,
                     alpha.toDouble(), be, matmul_precision()));
  return out;
}

at::Tensor addmv(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec, const at::Scalar& beta,
                 const at::Scalar& alpha) {
  at::Tensor out = at::empty({mat.dim() == 2 ? mat.size(0) : 0}, mat.options());
  return addmv_out(self, mat, vec, beta, alpha, out);
}

at::Tensor dot_mxu(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.dim() == 1 && b.dim() == 1, "1D tensors expected, but got ", a.dim(), "D and ", b.dim(),
              "D tensors");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "dot : expected both vectors to have same dtype, but found ",
              dtype_name(a), " and ", dtype_name(b));
  TORCH_CHECK(a.numel() == b.numel(), "inconsistent tensor size, expected tensor [", a.numel(), "] and src [",
              b.numel(), "] to have the same number of elements, but got ", a.numel(), " and ", b.numel(),
              " elements respectively");
  check_same_device(a, b);
  VT_FALLBACK_UNLESS(mxu_dtype(a.scalar_type()), "dtype ", a.scalar_type());
  at::Tensor out = at::empty({}, a.options());
  vt_tensor to = view_of(out);
  to.ndim = 2;
  to.sizes[0] = to.sizes[1] = 1;
  to.strides[0] = to.strides[1] = 1;
  const vt_tensor ta = as_row(view_of(a)), tb = as_column(view_of(b));
  check(vt_op_matmul(device_index(out), "aten::dot", &to, &ta, &tb, nullptr, 1.0, 0.0, matmul_precision()));
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  VT_IMPL(m, "addmv", addmv);
  VT_IMPL(m, "addmv.out", addmv_out);
  // PyTorch's composite addr.out (outer product, scaled sum) writes its result into out whatever its
  // device; behind the device check an out of another device is refused, as
  // CUDA refuses it.
  VT_IMPL(m, "addr.out", at::native::math_addr_out);
  VT_IMPL(m, "dot", dot_mxu);
  VT_IMPL(m, "vdot", [](const at::Tensor& a, const at::Tensor& b) {
    // real dtypes (all the MXU takes) need no conjugation: vdot == dot
    VT_FALLBACK_UNLESS(mxu_dtype(a.scalar_type()), "dtype ", a.scalar_type());
    return dot_mxu(a, b);
  });
  VT_IMPL(m, "mm", mm);
  VT_IMPL(m, "mm.out", mm_out);
  VT_IMPL(m, "addmm", addmm);
  VT_IMPL(m, "addmm.out", addmm_out);
  VT_IMPL(m, "addmm_", addmm_);
  VT_IMPL(m, "bmm", bmm);
  VT_IMPL(m, "bmm.out", bmm_out);
  VT_IMPL(m, "baddbmm", baddbmm);
  VT_IMPL(m, "baddbmm.out", baddbmm_out);
  VT_IMPL(m, "baddbmm_", baddbmm_);
}

}  // namespace vtpu
