"""Runs PyTorch's OpInfo samples (``op_db``) on "tpu" against CPU, forward
and gradient. Shared by tests/test_opinfo.py and the coverage generator
tests/op_coverage.py.

Inputs are mirrored byte for byte (same storage, offset and strides), so
non-contiguous samples stay non-contiguous on the device. Matmuls run at
HIGHEST precision, where fp32 products are fp32-accurate as on CPU. The
device runs with the CPU fallback forbidden: an op that is not native raises
instead of silently running on the CPU, and is reported as a fallback.
"""

import dataclasses
import re
import warnings

import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._pytree import tree_flatten, tree_map

import vtpu

DTYPES = (torch.float32, torch.bfloat16)
MAX_SAMPLES = 3

# Ops whose results are not a function of their inputs (random draws,
# uninitialised memory) cannot be compared with CPU value by value; their
# own tests check their statistics and reproducibility instead.
NOT_COMPARABLE = {
    "bernoulli", "normal", "normal.number_mean", "multinomial", "rand_like", "randn_like", "randint_like",
    "randint", "uniform", "exponential", "geometric", "cauchy", "log_normal", "empty", "empty_like",
    "new_empty", "new_empty_strided", "empty_strided", "empty_permuted", "nn.functional.dropout",
    "nn.functional.dropout2d", "nn.functional.dropout3d", "nn.functional.alpha_dropout",
    "nn.functional.feature_alpha_dropout", "nn.functional.feature_alpha_dropout.with_train",
    "nn.functional.feature_alpha_dropout.without_train", "nn.functional.rrelu", "randperm", "torch.randperm",
}

# Known bug, skipped until fixed: copying a conjugated complex tpu tensor
# recurses through PyTorch's conjugate fallback (_copy_from -> clone ->
# copy_ -> _copy_from) until the stack overflows. The fft ops reach it.
CRASHES = ("fft.",)

# Tolerances (rtol, atol) per op and dtype. The default is torch.testing's
# for the dtype: about one rounding of the result. An op listed here states
# why its result may differ from CPU's by more.
DEFAULT_TOL = {torch.float32: (1.3e-6, 1e-5), torch.bfloat16: (1.6e-2, 1e-5)}
SUMMATION = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (1.6e-2, 1e-3)}  # another (cascade) summation order
MATMUL = {torch.float32: (2e-5, 2e-5), torch.bfloat16: (1.6e-2, 2e-2)}  # bf16 products summed in fp32 (MXU)
TRANSCENDENTAL = {torch.float32: (4e-6, 1e-5), torch.bfloat16: (1.6e-2, 1e-5)}  # few-ulp vector math
TOL = {}
for _n in ("sum", "mean", "nansum", "nanmean", "var", "std", "var_mean", "std_mean", "norm", "linalg.vector_norm",
           "logsumexp", "cumsum", "softmax", "log_softmax", "nn.functional.softmax", "nn.functional.log_softmax",
           "nn.functional.layer_norm", "nn.functional.rms_norm", "nn.functional.group_norm",
           "nn.functional.batch_norm", "nn.functional.instance_norm", "nn.functional.cross_entropy",
           "nn.functional.nll_loss", "nn.functional.mse_loss", "nn.functional.embedding", "index_add",
           "scatter_add", "scatter_reduce", "nn.functional.avg_pool2d", "nn.functional.adaptive_avg_pool2d",
           "nn.functional.interpolate", "masked.sum", "masked.mean", "prod", "cumprod", "_foreach_norm"):
    TOL[_n] = SUMMATION
for _n in ("mm", "bmm", "addmm", "baddbmm", "addmv", "mv", "dot", "vdot", "matmul", "einsum", "inner", "outer",
           "tensordot", "nn.functional.linear", "nn.functional.bilinear", "nn.functional.conv1d",
           "nn.functional.conv2d", "nn.functional.conv3d", "nn.functional.conv_transpose1d",
           "nn.functional.conv_transpose2d", "nn.functional.conv_transpose3d", "addbmm", "addr",
           "nn.functional.scaled_dot_product_attention", "linalg.multi_dot", "chain_matmul"):
    TOL[_n] = MATMUL
for _n in ("exp", "exp2", "expm1", "log", "log1p", "log2", "log10", "sin", "cos", "tan", "tanh", "sinh", "cosh",
           "asin", "acos", "atan", "asinh", "acosh", "atanh", "atan2", "sigmoid", "erf", "erfc", "erfinv", "pow",
           "float_power", "nn.functional.gelu", "nn.functional.silu", "nn.functional.softplus",
           "nn.functional.mish", "nn.functional.elu", "nn.functional.selu", "nn.functional.celu",
           "nn.functional.logsigmoid", "logit", "xlogy", "lgamma", "digamma", "logaddexp", "logaddexp2",
           "special.expit", "rsqrt", "sqrt", "hypot", "nn.functional.tanhshrink", "sinc"):
    TOL[_n] = TRANSCENDENTAL


def full_name(op):
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def tolerance(op, dtype):
    table = TOL.get(full_name(op)) or TOL.get(op.name) or DEFAULT_TOL
    return table[dtype]


def mirror(t):
    """The same bytes, offset and strides on the device."""
    if not isinstance(t, torch.Tensor):
        return t
    if t.layout != torch.strided:  # sparse and other layouts: no storage to mirror
        return t.detach().to("tpu").requires_grad_(t.requires_grad)
    with torch.no_grad():
        n = t.untyped_storage().nbytes() // t.element_size()
        flat = torch.empty(0, dtype=t.dtype).set_(t.untyped_storage(), 0, (n,), (1,))
        d = flat.to("tpu").as_strided(t.size(), t.stride(), t.storage_offset())
    return d.requires_grad_(t.requires_grad) if t.requires_grad else d


def tensors(out):
    return [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]


@dataclasses.dataclass
class Outcome:
    samples: int = 0          # samples that ran natively and were compared
    fallbacks: int = 0        # samples (forward or gradient) that needed the CPU fallback
    failed: int = 0           # samples whose results differ from CPU (or raised)
    grads: bool = False       # gradients were compared
    failure: str = ""

    @property
    def native(self):
        return self.samples > 0 and self.fallbacks == 0

    @property
    def passed(self):
        return self.failed == 0

    @property
    def status(self):
        if self.samples == 0 and self.fallbacks == 0 and self.failed == 0:
            return "no samples"
        if self.fallbacks:
            return "partial" if self.samples else "fallback"
        return "native"


class Fallback(Exception):
    pass


def _compare(got, want, rtol, atol, what):
    for g, w in zip(tensors(got), tensors(want)):
        if g.device.type != "tpu":
            raise AssertionError(f"{what}: result on {g.device}, not tpu")
        torch.testing.assert_close(g.cpu(), w, rtol=rtol, atol=atol, equal_nan=True,
                                   msg=lambda m: f"{what}: {m}")


def _run_tpu(fn):
    try:
        with vtpu.cpu_fallback(False), torch.tpu.precision("highest"):
            out = fn()
            torch.tpu.synchronize()
            return out
    except NotImplementedError as e:
        m = re.search(r"operator '([^']+)' is not implemented for TPU", str(e))
        if m:
            raise Fallback(f"falls back: {m.group(1)}") from None
        raise


def run_op(op, dtype, max_samples=MAX_SAMPLES):
    """Runs op's samples for dtype; returns an Outcome (never raises for a mismatch)."""
    res = Outcome()
    rtol, atol = tolerance(op, dtype)
    grad_ok = op.supports_autograd and dtype.is_floating_point
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            samples = list(op.sample_inputs("cpu", dtype, requires_grad=grad_ok))[:max_samples]
        except Exception as e:  # the sample generator itself does not run here
            res.failed, res.failure = 1, f"samples: {type(e).__name__}"
            return res
        for i, s in enumerate(samples):
            cpu_args, cpu_kwargs = (s.input, *s.args), s.kwargs
            try:
                want = op(*cpu_args, **cpu_kwargs)
            except Exception:
                continue  # CPU rejects this sample: nothing to compare
            what = f"{full_name(op)} {dtype} sample {i}"
            try:
                tpu_args, tpu_kwargs = _run_tpu(lambda: (tree_map(mirror, cpu_args), tree_map(mirror, cpu_kwargs)))
                got = _run_tpu(lambda: op(*tpu_args, **tpu_kwargs))
                _compare(got, want, rtol, atol, what)
                res.samples += 1
                leaves_w = [t for t in tree_flatten((cpu_args, cpu_kwargs))[0]
                            if isinstance(t, torch.Tensor) and t.requires_grad]
                leaves_g = [t for t in tree_flatten((tpu_args, tpu_kwargs))[0]
                            if isinstance(t, torch.Tensor) and t.requires_grad]
                outs_w = [o for o in tensors(want) if o.requires_grad]
                outs_g = [o for o in tensors(got) if o.requires_grad]
                if not (grad_ok and leaves_w and outs_w and len(outs_w) == len(outs_g)):
                    continue
                gen = torch.Generator().manual_seed(i)
                cots = [torch.randn(o.shape, generator=gen, dtype=torch.float32).to(o.dtype) for o in outs_w]
                gw = torch.autograd.grad(outs_w, leaves_w, cots, allow_unused=True)
                gg = _run_tpu(lambda: torch.autograd.grad(outs_g, leaves_g, [c.to("tpu") for c in cots],
                                                          allow_unused=True))
                _compare([g for g, w in zip(gg, gw) if w is not None and g is not None],
                         [w for g, w in zip(gg, gw) if w is not None and g is not None], rtol, atol,
                         what + " gradient")
                res.grads = True
            except Fallback as e:
                res.fallbacks += 1
                res.failure = res.failure or str(e)
            except Exception as e:
                res.failed += 1
                res.failure = res.failure or f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    return res


def comparable_ops():
    """op_db entries whose results can be compared with CPU, with a dtype we test."""
    out = []
    for op in op_db:
        if full_name(op) in NOT_COMPARABLE or op.name in NOT_COMPARABLE or op.name.startswith(CRASHES):
            continue
        cpu_dtypes = op.supported_dtypes("cpu")
        if any(d in cpu_dtypes for d in DTYPES):
            out.append(op)
    return out
