// autocast.cpp — torch.autocast("tpu"): PyTorch's own autocast policy lists
// (the ones CUDA uses) registered for the AutocastPrivateUse1 key, with
// bfloat16 as the default lower-precision dtype, as on a TPU. One change:
// vector dot products (dot, vdot) run in float32, as PyTorch's reference
// PrivateUse1 backend registers them: they are reductions, not MXU
// matmuls, and CUDA's "promote" policy for them refuses float16 inputs
// under the default bfloat16 autocast. Ops not on a list pass through
// autocast unchanged.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

#include "common.h"

namespace vtpu {
namespace {

// As on CUDA: binary_cross_entropy is unsafe in reduced precision.
at::Tensor binary_cross_entropy_banned(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                       int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
              "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
              "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
              "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
              "safe to autocast.");
}

// The TPU's native reduced-precision type is bfloat16 (PyTorch's default
// for PrivateUse1 is float16). The setting is per thread in PyTorch: this
// sets it for the thread that loads vtpu.
const bool default_dtype_set = [] {
  at::autocast::set_autocast_dtype(at::kPrivateUse1, at::kBFloat16);
  return true;
}();

}  // namespace

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

}  // namespace vtpu

namespace at::autocast {
// (KERNEL_* macros name policies and functions of namespace at::autocast.)
TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define VTPU_LOWER(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define VTPU_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define VTPU_FP32_OPT(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define VTPU_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(VTPU_LOWER)
  AT_FORALL_FP32(VTPU_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(VTPU_FP32_OPT)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  // AT_FORALL_PROMOTE without dot / vdot
  VTPU_PROMOTE(addcdiv)
  VTPU_PROMOTE(addcmul)
  VTPU_PROMOTE(atan2)
  VTPU_PROMOTE(bilinear)
  VTPU_PROMOTE(cross)
  VTPU_PROMOTE(grid_sampler)
  VTPU_PROMOTE(index_put)
  VTPU_PROMOTE(tensordot)
  VTPU_PROMOTE(scatter_add)
  VTPU_FP32(dot)
  VTPU_FP32(vdot)
#undef VTPU_LOWER
#undef VTPU_FP32
#undef VTPU_FP32_OPT
#undef VTPU_PROMOTE
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN((&vtpu::binary_cross_entropy_banned)));
}
}  // namespace at::autocast
