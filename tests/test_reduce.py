"""Native reductions and scans against CPU PyTorch: values, dims, keepdim,
result dtypes, NaN, ties, empty inputs and PyTorch's errors."""

import pytest
import torch

import vtpu
from conftest import DTYPES, make

FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]


def close(got, want, dtype=None):
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    if want.dtype.is_floating_point:
        tol = {torch.bfloat16: 2e-2, torch.float16: 2e-3, torch.float32: 2e-5, torch.float64: 1e-12}[want.dtype]
        torch.testing.assert_close(got, want, rtol=tol, atol=tol, equal_nan=True)
    else:
        assert torch.equal(got, want)


DIMS = [None, 0, 1, -1, (0, 2), (1, 2)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim", DIMS, ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_prod_amax_any(dtype, dim, keepdim):
    x = make((5, 33, 17), dtype, 1, low=-3, high=3)
    t = x.to("tpu")
    with vtpu.cpu_fallback(False):
        if dim is None:
            close(t.sum(), x.sum())
            close(t.any(), x.any())
            close(t.all(), x.all())
            close(t.max(), x.max())
            close(t.min(), x.min())
        else:
            close(t.sum(dim, keepdim=keepdim), x.sum(dim, keepdim=keepdim))
            close(t.amax(dim, keepdim=keepdim), x.amax(dim, keepdim=keepdim))
            close(t.amin(dim, keepdim=keepdim), x.amin(dim, keepdim=keepdim))
            if isinstance(dim, int):
                # bf16/f16 products accumulate in float32 on tpu (as XLA does on a TPU); CPU PyTorch
                # rounds to the narrow type after every factor, so its reference is the float32 product
                narrow = dtype in (torch.bfloat16, torch.float16)
                want = x.float().prod(dim, keepdim=keepdim).to(dtype) if narrow else x.prod(dim, keepdim=keepdim)
                close(t.prod(dim, keepdim=keepdim), want)
                close(t.any(dim, keepdim=keepdim), x.any(dim, keepdim=keepdim))
                close(t.all(dim, keepdim=keepdim), x.all(dim, keepdim=keepdim))
                if dtype != torch.bool:
                    vg, ig = t.max(dim, keepdim=keepdim)
                    vw, iw = x.max(dim, keepdim=keepdim)
                    close(vg, vw)
                    close(ig, iw)
                    close(t.argmin(dim, keepdim=keepdim), x.argmin(dim, keepdim=keepdim))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("dim", DIMS, ids=str)
def test_mean_var_std_norm(dtype, dim):
    x = make((6, 40, 9), dtype, 2)
    t = x.to("tpu")
    with vtpu.cpu_fallback(False):
        close(t.mean(dim) if dim is not None else t.mean(), x.mean(dim) if dim is not None else x.mean())
        close(t.var(dim), x.var(dim))
        close(t.std(dim, correction=0), x.std(dim, correction=0))
        for p in (1, 2, float("inf"), 3):
            close(torch.linalg.vector_norm(t, p, dim), torch.linalg.vector_norm(x, p, dim))


def test_sum_dtypes_follow_pytorch():
    for dtype in DTYPES:
        x = make((100,), dtype, 3, low=0, high=3)
        with vtpu.cpu_fallback(False):
            close(x.to("tpu").sum(), x.sum())  # ints and bool sum to int64
            close(x.to("tpu").sum(dtype=torch.float64), x.sum(dtype=torch.float64))
    big = torch.full((1 << 20,), 0.1)
    with vtpu.cpu_fallback(False):
        got = big.to("tpu").sum().item()
    exact = big.double().sum().item()
    # cascade summation: within a few float32 ulps (a naive running sum is ~1e3 ulps off)
    assert abs(got - exact) <= 4 * torch.finfo(torch.float32).eps * exact


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bfloat16], ids=str)
def test_cumsum_cumprod(dtype):
    x = make((7, 50), dtype, 4, low=-2, high=3)
    t = x.to("tpu")
    with vtpu.cpu_fallback(False):
        for d in (0, 1, -1):
            close(torch.cumsum(t, d), torch.cumsum(x, d))
        close(torch.cumprod(t[:, :8], 1), torch.cumprod(x[:, :8], 1))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_scans_carry_cpu_accumulate_type(dtype):
    """CPU PyTorch carries a bf16 or f16 scan's running value in float and
    an f32 one in double (at::acc_type<T, false>), rounding each output:
    long lines and products near 1, where a wider carry rounds some
    outputs the other way, give CPU's bits exactly (lines along the last
    dim, along the first, and in place)."""
    g = torch.Generator().manual_seed(31)
    x = (torch.randn(64, 4096, generator=g) * 10).to(dtype)
    p = (torch.rand(64, 512, generator=g) * 0.4 + 0.8).to(dtype)
    with vtpu.cpu_fallback(False):
        for d in (-1, 0):
            assert torch.equal(torch.cumsum(x.to("tpu"), d).cpu(), torch.cumsum(x, d))
            assert torch.equal(torch.cumprod(p.to("tpu"), d).cpu(), torch.cumprod(p, d))
        t = x.to("tpu")
        t.cumsum_(1)
        assert torch.equal(t.cpu(), torch.cumsum(x, 1))


def test_nan_ties_and_noncontiguous():
    x = torch.tensor([[1.0, float("nan"), 3.0], [2.0, 2.0, 1.0]])
    t = x.to("tpu")
    with vtpu.cpu_fallback(False):
        close(t.amax(1), x.amax(1))
        close(t.argmax(1), x.argmax(1))  # NaN wins; ties take the first index
        close(t.max(), x.max())
        y = make((20, 30), torch.float32, 5)
        close(y.to("tpu").t().sum(1), y.t().sum(1))
        close(y.to("tpu")[::2, 1::3].mean(0), y[::2, 1::3].mean(0))
        close(y.to("tpu").argmax(), y.argmax())


def test_empty_and_errors_match_cpu():
    e = torch.empty(0, 3)
    with vtpu.cpu_fallback(False):
        close(e.to("tpu").sum(0), e.sum(0))
        close(e.to("tpu").prod(0), e.prod(0))
        for fn in (lambda z: z.amax(0), lambda z: z.max(0), lambda z: z.argmax(0)):
            with pytest.raises(IndexError):
                fn(e)
            with pytest.raises(IndexError):
                fn(e.to("tpu"))
        with pytest.raises(RuntimeError):
            e.to("tpu").max()
        with pytest.raises(IndexError, match="Dimension out of range"):
            torch.ones(2, 2, device="tpu").sum(5)
        with pytest.raises(RuntimeError, match="mean\\(\\): could not infer output dtype"):
            torch.ones(3, dtype=torch.int64, device="tpu").mean()


def test_max_min_arg_on_0dim_tensor():
    x = torch.tensor(3.5)
    with vtpu.cpu_fallback(False):
        for f in (lambda v: v.argmax(), lambda v: v.argmin(0), lambda v: torch.argmax(v, 0, keepdim=True),
                  lambda v: v.max(0), lambda v: v.min(0, keepdim=True)):
            want, got = f(x), f(x.to("tpu"))
            want = want if isinstance(want, tuple) else (want,)
            got = got if isinstance(got, tuple) else (got,)
            for w, g in zip(want, got):
                assert g.shape == w.shape and torch.equal(g.cpu(), w)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32])
def test_nansum_nanmean_native_and_layout_independent(dtype):
    g = torch.Generator().manual_seed(3)
    x = (torch.rand(6, 7, 5, generator=g) * 4 - 2).to(dtype)
    if dtype.is_floating_point:
        x[torch.rand(6, 7, 5, generator=g) < 0.2] = float("nan")
    t = x.to("tpu")
    vtpu.reset_fallback_report()
    with vtpu.cpu_fallback(False):
        for dim in (None, 1, (0, 2)):
            got = torch.nansum(t, dim)
            want = torch.nansum(x.double(), dim).to(got.dtype)
            tol = {torch.float16: 2e-3, torch.bfloat16: 1e-2}.get(dtype, 1e-6)
            torch.testing.assert_close(got.cpu(), want, rtol=tol, atol=tol)
            # a strided view sums to exactly what its contiguous copy does
            nc = t[::2, ::3]
            assert torch.equal(torch.nansum(nc, dim).cpu(), torch.nansum(nc.contiguous(), dim).cpu())
            if dtype.is_floating_point:
                assert torch.equal(torch.nanmean(nc, dim).cpu(), torch.nanmean(nc.contiguous(), dim).cpu())
        assert torch.nansum(t, dtype=torch.float64).dtype == torch.float64
    assert vtpu.fallback_report() == {}
    with pytest.raises(RuntimeError, match="complex"):
        torch.nansum(torch.ones(2, dtype=torch.cfloat, device="tpu"))


def test_nansum_gradient():
    x = torch.tensor([1.0, float("nan"), 3.0], requires_grad=True)
    t = x.detach().to("tpu").requires_grad_()
    torch.nansum(x).backward()
    torch.nansum(t).backward()
    assert torch.equal(t.grad.cpu(), x.grad)
