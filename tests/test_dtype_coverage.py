"""Whatever dtype, rank or layout CPU PyTorch computes, "tpu" computes too:
natively, or through the counted CPU fallback when a kernel has no path
for its inputs (complex, ranks above the runtime's 16 dims, integer
convolution...), never NotImplementedError. Whatever CPU refuses, "tpu"
refuses with CPU's exception type. Each case runs on CPU (the reference)
and on "tpu", in Strict and in Debug mode."""

import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

import vtpu

C64 = torch.complex64


def _c(dev, *shape, dtype=C64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=dtype, generator=g).to(dev)


def _r(dev, *shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype).to(dev)


def _deep(dev, n, dtype=torch.float32):
    """An n-dim tensor of 2**k elements with varied values (rank > 16 when n > 16)."""
    shape = [2 if k < 10 else 1 for k in range(n)]
    return torch.arange(float(2 ** min(n, 10))).reshape(shape).to(dtype).to(dev)


# name -> f(dev): the user's call, its tensors built on dev.
CASES = {
    # complex: the kernels have no complex path
    "complex randn": lambda d: torch.randn(3, dtype=C64, device=d),
    "complex sum": lambda d: _c(d, 4, 5).sum(),
    "complex sum dim": lambda d: _c(d, 4, 5).sum(1),
    "complex mean": lambda d: _c(d, 4, 5).mean(0),
    "complex cat": lambda d: torch.cat([_c(d, 2, 3), _c(d, 2, 3, seed=1)]),
    "complex where": lambda d: torch.where(_r(d, 4) > 0, _c(d, 4), _c(d, 4, seed=1)),
    "complex std": lambda d: _c(d, 6).std(),
    "complex var dim": lambda d: _c(d, 3, 6).var(1),
    "complex vector_norm": lambda d: torch.linalg.vector_norm(_c(d, 6)),
    "complex mul": lambda d: _c(d, 4) * _c(d, 4, seed=1),
    "complex add": lambda d: _c(d, 4) + _c(d, 4, seed=1),
    "complex mul_ broadcast": lambda d: _c(d, 3, 4).mul_(_c(d, 4, seed=1)),
    "complex exp": lambda d: torch.exp(_c(d, 4)),
    "complex abs": lambda d: _c(d, 4).abs(),
    "complex matmul": lambda d: _c(d, 3, 4) @ _c(d, 4, 2, seed=1),
    "complex128 sum": lambda d: _c(d, 5, dtype=torch.complex128).sum(),
    "complex index_select": lambda d: _c(d, 5).index_select(0, torch.tensor([4, 0], device=d)),
    "complex gather": lambda d: torch.gather(_c(d, 2, 3), 1, torch.tensor([[2, 0], [1, 1]], device=d)),
    "complex masked_fill_": lambda d: _c(d, 4).masked_fill_(_r(d, 4) > 0, 1j),
    "complex fill_": lambda d: _c(d, 3).fill_(2 + 1j),
    "complex flip": lambda d: _c(d, 2, 3).flip(1),
    "complex cumsum": lambda d: _c(d, 5).cumsum(0),
    "complex softmax refused": lambda d: torch.softmax(_c(d, 3), 0),
    "view_as_real of complex mul": lambda d: torch.view_as_real(
        torch.view_as_complex(_r(d, 4, 2)) * torch.polar(torch.ones(4, device=d), _r(d, 4, seed=1))
    ),
    # integer dtypes the float kernels do not take
    "int64 conv2d": lambda d: F.conv2d(
        torch.arange(16, device=d).reshape(1, 1, 4, 4), torch.ones(2, 1, 2, 2, dtype=torch.long, device=d)
    ),
    "int64 conv1d bias": lambda d: F.conv1d(
        torch.arange(8, device=d).reshape(1, 2, 4),
        torch.ones(1, 2, 3, dtype=torch.long, device=d),
        torch.tensor([5], device=d),
    ),
    "int64 max_pool2d": lambda d: F.max_pool2d(torch.arange(16, device=d).reshape(1, 1, 4, 4), 2),
    "int64 avg_pool2d": lambda d: F.avg_pool2d(torch.arange(16, device=d).reshape(1, 1, 4, 4), 2),
    "int32 layer_norm refused": lambda d: F.layer_norm(torch.arange(4, dtype=torch.int32, device=d), (4,)),
    "int64 mm": lambda d: torch.arange(6, device=d).reshape(2, 3) @ torch.arange(6, device=d).reshape(3, 2),
    "int64 bmm": lambda d: torch.bmm(torch.ones(2, 2, 3, dtype=torch.long, device=d),
                                     torch.ones(2, 3, 2, dtype=torch.long, device=d)),
    "int64 dot": lambda d: torch.dot(torch.arange(4, device=d), torch.arange(4, device=d)),
    "uint16 random_": lambda d: torch.empty(5, dtype=torch.uint16, device=d).random_(),
    "uint32 random_": lambda d: torch.empty(5, dtype=torch.uint32, device=d).random_(),
    "uint64 random_ range": lambda d: torch.empty(5, dtype=torch.uint64, device=d).random_(0, 10),
    "uint32 add": lambda d: torch.arange(5, device=d).to(torch.uint32) + torch.arange(5, device=d).to(torch.uint32),
    "uint16 sum": lambda d: torch.arange(5, device=d).to(torch.uint16).sum(),
    "int normal_ refused": lambda d: torch.empty(3, dtype=torch.long, device=d).normal_(),
    "full_like bool nan": lambda d: torch.full_like(torch.zeros(2, dtype=torch.bool, device=d), float("nan")),
    "mode": lambda d: torch.mode(torch.tensor([1.0, 2, 2, 3], device=d)),
    "mode out": lambda d: torch.mode(
        torch.tensor([[1.0, 2, 2], [3, 3, 0]], device=d),
        out=(torch.empty(0, device=d), torch.empty(0, dtype=torch.long, device=d)),
    ),
    # ranks above the runtime's VT_MAX_DIMS (16); PyTorch allows 64
    "17-dim add": lambda d: _deep(d, 17) + 1,
    "20-dim sum": lambda d: _deep(d, 20).sum(),
    "20-dim sum dim": lambda d: _deep(d, 20).sum(3),
    "20-dim mul_": lambda d: _deep(d, 20).mul_(_deep(d, 20)),
    "20-dim exp": lambda d: _deep(d, 20).exp(),
    "20-dim where": lambda d: torch.where(_deep(d, 20) > 3, _deep(d, 20), 0.0),
    "20-dim cat": lambda d: torch.cat([_deep(d, 20), _deep(d, 20)], 5),
    "20-dim contiguous of permute": lambda d: _deep(d, 20).permute(*range(19, -1, -1)).contiguous(),
    "20-dim softmax": lambda d: _deep(d, 20).softmax(1),
    "20-dim argmax": lambda d: _deep(d, 20).argmax(),
    "20-dim fill_": lambda d: _deep(d, 20).fill_(3),
    "20-dim index_select": lambda d: _deep(d, 20).index_select(0, torch.tensor([1, 0], device=d)),
    "20-dim gather": lambda d: torch.gather(_deep(d, 20), 1, torch.zeros([2] * 10 + [1] * 10, dtype=torch.long, device=d)),
    "20-dim masked_fill_": lambda d: _deep(d, 20).masked_fill_(_deep(d, 20) > 5, -1.0),
    "20-dim sort": lambda d: _deep(d, 20).sort(0).values,
    "20-dim clone bf16": lambda d: _deep(d, 20, torch.bfloat16).clone(),
    "40-dim add": lambda d: torch.ones([1] * 40, device=d) + torch.ones([1] * 40, device=d),
    "64-dim sum": lambda d: torch.ones([1] * 63 + [3], device=d).sum(-1),
}


def _run(f, dev):
    """(result or None, exception or None) of f on dev, read back."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            r = f(dev)
            r = [x.cpu() for x in r] if isinstance(r, (tuple, list)) else r.cpu()
            return r, None
        except Exception as e:  # noqa: BLE001 - compared with CPU's
            return None, e


@pytest.mark.parametrize("case", sorted(CASES))
def test_as_cpu(case, mode):
    want, want_exc = _run(CASES[case], "cpu")
    got, got_exc = _run(CASES[case], "tpu")
    if want_exc is not None:
        assert type(got_exc) is type(want_exc), (got_exc, want_exc)
        return
    assert got_exc is None, got_exc
    if "random" in case or "randn" in case:
        assert got.dtype == want.dtype and got.shape == want.shape
        return
    for g, w in zip(got if isinstance(got, list) else [got], want if isinstance(want, list) else [want]):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        # the same CPU kernels, or TPU matmul numerics for complex matmul's
        # fp32 parts (one bf16 pass: relative error up to ~2**-8 per product)
        tol = dict(rtol=2e-2, atol=2e-2) if "matmul" in case else {}
        torch.testing.assert_close(g, w, **tol)
    torch.tpu.synchronize()


def test_declined_inputs_are_counted_and_named():
    """A kernel that declines its inputs falls back like an op without a
    kernel: counted, warned once with the reason, refused with that reason
    when the fallback is off."""
    # the warning comes once per process: a fresh process sees it
    code = ("import warnings, torch; x = torch.randn(3, dtype=torch.cfloat).to('tpu'); "
            "warnings.simplefilter('error'); torch.sgn(x)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "'aten::sgn' has no native TPU kernel for dtype ComplexFloat" in r.stderr, r.stderr
    vtpu.reset_fallback_report()
    x = _c("tpu", 3)
    torch.sgn(x)
    assert vtpu.fallback_report().get("aten::sgn") == 1
    torch.sgn(x)
    assert vtpu.fallback_report().get("aten::sgn") == 2
    with vtpu.cpu_fallback(False):
        with pytest.raises(NotImplementedError, match=r"no native TPU kernel for 17-dim tensors and the CPU fallback is off"):
            torch.ones([1] * 17, device="tpu").exp()
        r = torch.ones(3, device="tpu").exp()  # native inputs are unaffected
    torch.testing.assert_close(r.cpu(), torch.ones(3).exp())


def test_declined_in_place_op_keeps_its_input():
    """An in-place op declined by its kernel runs once, on the CPU, on the
    tensor's own memory: the result is written once, never applied twice."""
    x = _deep("tpu", 20)
    ref = _deep("cpu", 20)
    x.add_(1)
    ref.add_(1)
    torch.testing.assert_close(x.cpu(), ref)
    y = _c("tpu", 4)
    ref = _c("cpu", 4)
    y.mul_(2)
    ref.mul_(2)
    torch.testing.assert_close(y.cpu(), ref)
