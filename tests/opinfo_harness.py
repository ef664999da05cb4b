"""Runs PyTorch's OpInfo samples (``op_db``) on "tpu" against CPU, forward
and gradient. Shared by tests/test_opinfo.py and the coverage generator
tests/op_coverage.py.

A result passes when it is within the op's tolerance of CPU's, or, failing
that, when it is at least as accurate as CPU's: element by element no
farther from the exact result (the same op on CPU in float64) than CPU's
own result is, plus the op's tolerance. The second rule is for bfloat16,
where CPU rounds some intermediates to bfloat16 and vtpu keeps them in
float32; a result less accurate than CPU's still fails.

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
    "randn", "rand",
}


# Samples that draw random numbers although the op does not always: dropout inside attention.
def _random_sample(op, sample):
    if op.name == "nn.functional.scaled_dot_product_attention":
        return sample.kwargs.get("dropout_p", 0) > 0
    if op.name == "nn.functional.multi_head_attention_forward":
        return sample.args[9] > 0 and sample.kwargs.get("training", True)
    return False


# Ops that return the positions of equal values in an order CPU leaves
# unspecified (its default sort is not stable). vtpu's sort and topk are
# stable, so their reference is CPU's stable sort.
def _stable_sort(x, dim=-1, descending=False, stable=None):
    return torch.sort(x, dim=dim, descending=descending, stable=True)


def _stable_topk(x, k, dim=-1, largest=True, sorted=True):
    if x.dim() == 0:
        return torch.topk(x, k, dim, largest, sorted)
    v, i = _stable_sort(x, dim, largest)
    return v.narrow(dim, 0, k), i.narrow(dim, 0, k)


STABLE_REFERENCE = {
    "sort": lambda x, *a, **kw: _stable_sort(x, *a, **kw),
    "argsort": lambda x, *a, **kw: _stable_sort(x, *a, **kw)[1],
    "msort": lambda x: _stable_sort(x, 0)[0],
    "topk": _stable_topk,
}

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
           "nn.functional.interpolate", "masked.sum", "masked.mean", "prod", "cumprod", "_foreach_norm", "masked.softmax", "masked.log_softmax",
           "masked.softmin", "masked.logsumexp"):
    TOL[_n] = SUMMATION
for _n in ("mm", "bmm", "addmm", "baddbmm", "addmv", "mv", "dot", "vdot", "matmul", "einsum", "inner", "outer",
           "tensordot", "nn.functional.linear", "nn.functional.bilinear", "nn.functional.conv1d",
           "nn.functional.conv2d", "nn.functional.conv3d", "nn.functional.conv_transpose1d",
           "nn.functional.conv_transpose2d", "nn.functional.conv_transpose3d", "addbmm", "addr",
           "nn.functional.scaled_dot_product_attention", "linalg.multi_dot", "chain_matmul",
           "nn.functional.linear_cross_entropy", "nn.functional.linear_cross_entropy.chunked",
           "nn.functional.linear_cross_entropy.chunked_none"):
    TOL[_n] = MATMUL
for _n in ("exp", "exp2", "expm1", "log", "log1p", "log2", "log10", "sin", "cos", "tan", "tanh", "sinh", "cosh",
           "asin", "acos", "atan", "asinh", "acosh", "atanh", "atan2", "sigmoid", "erf", "erfc", "erfinv", "pow",
           "float_power", "nn.functional.gelu", "nn.functional.silu", "nn.functional.softplus",
           "nn.functional.mish", "nn.functional.elu", "nn.functional.selu", "nn.functional.celu",
           "nn.functional.logsigmoid", "logit", "xlogy", "lgamma", "digamma", "logaddexp", "logaddexp2",
           "special.expit", "rsqrt", "sqrt", "hypot", "nn.functional.tanhshrink", "sinc"):
    TOL[_n] = TRANSCENDENTAL

# bf16 attention backward: the flash kernel takes rowsum(dO * O) from the
# bf16 output O, as TPU's flash attention does (CPU upcasts the whole op to
# fp32), so dQ and dK carry the rounding of O times the scale of the scores.
TOL["nn.functional.scaled_dot_product_attention"] = {**MATMUL, torch.bfloat16: (1.6e-2, 6e-2)}
# bf16 normalize gradient: the difference of two terms of size |grad| / |x|
# that cancel; one rounding of either (pow in the norm's backward, where
# CPU's bf16 pow is off by an ulp) shows in full.
TOL["nn.functional.normalize"] = {**DEFAULT_TOL, torch.bfloat16: (1.6e-2, 6.25e-2)}


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


def _as_accurate(g, w, e, rtol, atol, what):
    """Element by element, g is no farther from the exact e than w is, plus the tolerance."""
    g, w, e = g.double(), w.double(), e.double()
    bound = (w - e).abs() + atol + rtol * e.abs()
    ok = ((g - e).abs() <= bound) | (g == e) | (g.isnan() & (w.isnan() | e.isnan()))
    if not bool(ok.all()):
        i = int(((g - e).abs() - bound).nan_to_num(float("inf")).masked_fill(ok, -1).flatten().argmax())
        gi, wi, ei = g.flatten()[i].item(), w.flatten()[i].item(), e.flatten()[i].item()
        raise AssertionError(f"{what}: less accurate than CPU at element {i}: tpu {gi:.6g}, cpu {wi:.6g}, "
                             f"float64 {ei:.6g} ({int((~ok).sum())} of {ok.numel()} elements)")


def _compare(got, want, rtol, atol, what, exact=None):
    """exact: a thunk giving the float64 results (or None), tried when got and want differ."""
    pairs = list(zip(tensors(got), tensors(want)))
    for g, w in pairs:
        if g.device.type != "tpu":
            raise AssertionError(f"{what}: result on {g.device}, not tpu")
    try:
        for g, w in pairs:
            torch.testing.assert_close(g.cpu(), w, rtol=rtol, atol=atol, equal_nan=True,
                                       msg=lambda m: f"{what}: {m}")
    except AssertionError:
        ref = exact() if exact else None
        if ref is None or len(ref) != len(pairs):
            raise
        for (g, w), e in zip(pairs, ref):
            if e is None or not g.dtype.is_floating_point or g.shape != w.shape or g.shape != e.shape:
                if not torch.equal(g.cpu(), w):
                    raise
            else:
                _as_accurate(g.cpu(), w, e, rtol, atol, what)


def _float64(t, dtype):
    """t in float64 (a new leaf with the same requires_grad) when it has the tested dtype."""
    if isinstance(t, torch.Tensor) and t.dtype == dtype and dtype != torch.float64:
        return t.detach().double().requires_grad_(t.requires_grad)
    return t


# Ops that take a tensor argument on the CPU whatever the device of the input.
HOST_ARGS = {"tensor_split"}


def _on_tpu(x):
    """The tpu run's version of a sample argument: tensors mirrored, the CPU device named as tpu."""
    if isinstance(x, torch.Tensor):
        return mirror(x)
    if isinstance(x, torch.device) and x.type == "cpu" or x == "cpu":
        return "tpu"
    return x


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
        m = re.search(r"Could not run '([^']+)' with arguments from the '(\w+)' backend", str(e))
        if m:  # a dispatch key with no kernels at all: neither native nor a fallback runs it
            raise Fallback(f"no {m.group(2)} kernel: {m.group(1)}") from None
        raise


def _grad_leaves(args):
    return [t for t in tree_flatten(args)[0] if isinstance(t, torch.Tensor) and t.requires_grad]


def run_op(op, dtype, max_samples=MAX_SAMPLES):
    """Runs op's samples for dtype; returns an Outcome (never raises for a mismatch)."""
    res = Outcome()
    rtol, atol = tolerance(op, dtype)
    grad_ok = op.supports_autograd and dtype.is_floating_point
    reference = STABLE_REFERENCE.get(full_name(op), op)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            samples = list(op.sample_inputs("cpu", dtype, requires_grad=grad_ok))[:max_samples]
        except Exception as e:  # the sample generator itself does not run here
            res.failed, res.failure = 1, f"samples: {type(e).__name__}"
            return res
        for i, s in enumerate(samples):
            if _random_sample(op, s):
                continue
            cpu_args, cpu_kwargs = (s.input, *s.args), s.kwargs
            try:
                want = reference(*cpu_args, **cpu_kwargs)
            except Exception:
                continue  # CPU rejects this sample: nothing to compare
            what = f"{full_name(op)} {dtype} sample {i}"
            exact_run = {}

            def exact():
                """The same sample on CPU in float64: (args, outputs), or None if CPU cannot."""
                if "out" not in exact_run:
                    try:
                        ea = tree_map(lambda t: _float64(t, dtype), (cpu_args, cpu_kwargs))
                        exact_run["args"], exact_run["out"] = ea, tensors(reference(*ea[0], **ea[1]))
                    except Exception:
                        exact_run["out"] = None
                return exact_run["out"]

            try:
                tpu_args, tpu_kwargs = _run_tpu(lambda: (tree_map(_on_tpu, cpu_args), tree_map(_on_tpu, cpu_kwargs)))
                if op.name in HOST_ARGS:
                    tpu_args = (tpu_args[0], *cpu_args[1:])
                got = _run_tpu(lambda: op(*tpu_args, **tpu_kwargs))
                _compare(got, want, rtol, atol, what, exact)
                res.samples += 1
                leaves_w, leaves_g = _grad_leaves((cpu_args, cpu_kwargs)), _grad_leaves((tpu_args, tpu_kwargs))
                outs_w = [o for o in tensors(want) if o.requires_grad]
                outs_g = [o for o in tensors(got) if o.requires_grad]
                if not (grad_ok and leaves_w and outs_w and len(outs_w) == len(outs_g)):
                    continue
                gen = torch.Generator().manual_seed(i)
                cots = [torch.randn(o.shape, generator=gen, dtype=torch.float32).to(o.dtype) for o in outs_w]
                gw = torch.autograd.grad(outs_w, leaves_w, cots, allow_unused=True)
                gg = _run_tpu(lambda: torch.autograd.grad(outs_g, leaves_g, [c.to("tpu") for c in cots],
                                                          allow_unused=True))
                keep = [k for k, (g, w) in enumerate(zip(gg, gw)) if g is not None and w is not None]

                def exact_grads():
                    outs = exact()
                    if outs is None:
                        return None
                    leaves = _grad_leaves(exact_run["args"])
                    outs = [o for o in outs if o.requires_grad]
                    if len(leaves) != len(leaves_w) or len(outs) != len(outs_w):
                        return None
                    try:
                        ge = torch.autograd.grad(outs, leaves, [c.to(o.dtype) for c, o in zip(cots, outs)],
                                                 allow_unused=True)
                    except Exception:
                        return None
                    return [ge[k] for k in keep]

                _compare([gg[k] for k in keep], [gw[k] for k in keep], rtol, atol, what + " gradient", exact_grads)
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
        if full_name(op) in NOT_COMPARABLE or op.name in NOT_COMPARABLE:
            continue
        cpu_dtypes = op.supported_dtypes("cpu")
        if any(d in cpu_dtypes for d in DTYPES):
            out.append(op)
    return out
