// complex_ops.cpp — complex add, sub and mul on tpu, composed of native real
// ops on the operands' (real, imag) views (torch.view_as_real), as rotary
// embeddings and other complex-valued model code use them; and
// conj_physical (the imaginary part negated; a copy for real tensors). Conjugate views
// (the conj bit autograd's complex formulas set) are read with their imaginary
// part negated; anything else (negative bit, mixed dtypes) is left to the
// caller, which falls back to the CPU.
#include <ATen/ATen.h>

#include <vector>

#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "common.h"
#include "device_check.h"

namespace vtpu {
namespace {

// (real, imag) of a complex tpu tensor, the conj bit applied.
struct Parts {
  at::Tensor re, im;
};

Parts parts(const at::Tensor& t) {
  const bool conj = t.is_conj();
  const at::Tensor r = at::view_as_real(conj ? t.conj() : t);
  Parts p{r.select(-1, 0), r.select(-1, 1)};
  if (conj) p.im = p.im.neg();
  return p;
}

bool takes(const at::Tensor& t, c10::ScalarType common) {
  return is_tpu(t) && t.scalar_type() == common && !t.is_neg();
}

}  // namespace

bool complex_binary(vt_binary_op op, const at::Tensor& a_, const at::Tensor& o_, const at::Scalar& alpha,
                    const at::Tensor& out, bool fresh_out) {
  const auto common = out.scalar_type();
  if (common != at::kComplexFloat && common != at::kComplexDouble) return false;
  if (op != VT_ADD && op != VT_SUB && op != VT_MUL) return false;
  if (out.is_conj() || out.is_neg() || out.device().type() != kTpu) return false;
  // a CPU 0-dim operand (a Python number) comes to the device as a one-element tensor
  auto on_tpu = [&](const at::Tensor& t) {
    return t.is_cpu() && t.dim() == 0 ? t.to(out.device(), common) : t;
  };
  const at::Tensor a = on_tpu(a_), o = on_tpu(o_);
  if (!takes(a, common) || !takes(o, common)) return false;

  const Parts x = parts(a), y = parts(o);
  // Into a fresh result the parts are written in place; an in-place or out=
  // result may alias an operand, so it gets the values once all are computed.
  std::vector<int64_t> shape = out.sizes().vec();
  shape.push_back(2);
  const at::Tensor target = fresh_out ? at::view_as_real(out)
                                      : at::empty(shape, out.options().dtype(c10::toRealValueType(common)));
  at::Tensor re = target.select(-1, 0), im = target.select(-1, 1);
  if (op == VT_MUL) {
    at::mul_out(re, x.re, y.re).sub_(at::mul(x.im, y.im));
    at::mul_out(im, x.re, y.im).add_(at::mul(x.im, y.re));
  } else {
    // a ± alpha * o, alpha = p + i q, as CPU computes it: alpha times o is a
    // full complex product even for a real alpha (0 * inf is NaN there too)
    const c10::complex<double> al = alpha.toComplexDouble();
    const double s = op == VT_ADD ? 1.0 : -1.0, p = s * al.real(), q = al.imag() == 0.0 ? 0.0 : s * al.imag();
    at::add_out(re, x.re, y.re, p);
    at::add_out(im, x.im, y.im, p);
    re.sub_(y.im, q);
    im.add_(y.re, q);
  }
  if (!fresh_out) at::view_as_real(out).copy_(target);
  return true;
}

}  // namespace vtpu

namespace vtpu {
namespace {

at::Tensor& conj_out(const at::Tensor& self, at::Tensor& out) {
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), "conj_physical: expected out of dtype ", self.scalar_type(),
              ", got ", out.scalar_type());
  at::native::resize_output(out, self.sizes());
  if (!self.is_complex()) return out.copy_(self);
  VT_FALLBACK_UNLESS(!out.is_conj() && !out.is_neg() && !self.is_neg() &&
                         (self.scalar_type() == at::kComplexFloat || self.scalar_type() == at::kComplexDouble),
                     lacking({self, out}));
  if (out.numel() == 0) return out;
  const Parts p = parts(self);
  const at::Tensor o = at::view_as_real(out);
  if (out.is_same(self) || self.is_conj()) {  // overlap with the source: compute first, then write
    const at::Tensor re = p.re.clone(), im = p.im.neg();
    o.select(-1, 0).copy_(re);
    o.select(-1, 1).copy_(im);
  } else {
    o.select(-1, 0).copy_(p.re);
    at::Tensor im = o.select(-1, 1);
    at::neg_out(im, p.im);
  }
  return out;
}

at::Tensor conj_physical(const at::Tensor& self) {
  at::Tensor out = at::empty_like(self);
  return conj_out(self, out);
}

at::Tensor& conj_physical_(at::Tensor& self) { return conj_out(self, self); }

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  VT_IMPL(m, "_conj_physical", conj_physical);
  VT_IMPL(m, "conj_physical.out", conj_out);
  VT_IMPL(m, "conj_physical_", conj_physical_);
}

}  // namespace vtpu
