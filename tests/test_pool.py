"""Native 2-D pooling and 1-D/2-D upsampling against CPU PyTorch: values, indices,
gradients, dtypes, channels-last and non-contiguous inputs, empty batches,
errors; and that none of it falls back to the CPU."""

import pytest
import torch
import torch.nn.functional as F

import vtpu

FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
# Averages and interpolation: fp32-close (the kernels sum in double and round once).
TOL = {torch.float32: 1e-5, torch.bfloat16: 1.6e-2, torch.float16: 2e-3, torch.float64: 1e-12}


def inputs(shape, dtype, layout, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=g, dtype=torch.float64) * 3).to(dtype)
    if layout == "channels_last":
        return x.contiguous(memory_format=torch.channels_last)
    if layout == "strided":
        return x.transpose(-1, -2).contiguous().transpose(-1, -2)
    return x


def run_both(fn, x, grad_seed=1, exact=False):
    """fn on CPU and on tpu with autograd; returns (cpu out, tpu out, cpu grad, tpu grad)."""
    xc = x.clone().requires_grad_(True)
    xt = x.to("tpu").requires_grad_(True)
    with vtpu.cpu_fallback(False):
        yt = fn(xt)
    try:
        yc = fn(xc)
    except RuntimeError:  # CPU lacks this dtype: reference in float32
        xc = x.float().requires_grad_(True)
        yc = fn(xc)
    yc0 = yc[0] if isinstance(yc, tuple) else yc
    yt0 = yt[0] if isinstance(yt, tuple) else yt
    g = torch.Generator().manual_seed(grad_seed)
    go = torch.randn(yc0.shape, generator=g, dtype=torch.float64)
    yc0.backward(go.to(yc0.dtype))
    with vtpu.cpu_fallback(False):
        yt0.backward(go.to(yt0.dtype).to("tpu"))
    return yc, yt, xc.grad, xt.grad


def close(got, want, dtype, exact=False):
    got = got.detach().cpu()
    want = want.detach().to(got.dtype)
    assert got.shape == want.shape
    if exact:
        assert torch.equal(got, want) or torch.allclose(got, want, rtol=0, atol=0, equal_nan=True)
    else:
        torch.testing.assert_close(got, want, rtol=TOL[dtype], atol=TOL[dtype], equal_nan=True)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "strided"])
@pytest.mark.parametrize(
    "args",
    [
        dict(kernel_size=2),
        dict(kernel_size=3, stride=2, padding=1),
        dict(kernel_size=(3, 2), stride=(1, 2), padding=(1, 0), dilation=(2, 1)),
        dict(kernel_size=3, stride=2, ceil_mode=True),
    ],
    ids=str,
)
def test_max_pool2d(dtype, layout, args):
    x = inputs((2, 5, 11, 13), dtype, layout)
    yc, yt, gc, gt = run_both(lambda t: F.max_pool2d(t, return_indices=True, **args), x)
    close(yt[0], yc[0], dtype, exact=True)
    assert torch.equal(yt[1].cpu(), yc[1])
    close(gt, gc, dtype)
    if layout == "channels_last":
        assert yt[0].is_contiguous(memory_format=torch.channels_last)


def test_max_pool_nan_ties_1d_3d_and_empty():
    x = torch.tensor([[[[1.0, float("nan"), 3.0, 3.0], [3.0, 0.0, float("nan"), -1.0]]]])
    for k in [(2, 2), (1, 2), (2, 1)]:
        a, ai = F.max_pool2d(x, k, return_indices=True)
        b, bi = F.max_pool2d(x.to("tpu"), k, return_indices=True)
        assert torch.equal(ai, bi.cpu()) and torch.allclose(a, b.cpu(), equal_nan=True)
    x1 = torch.randn(3, 4, 20)
    with vtpu.cpu_fallback(False):
        y1 = F.max_pool1d(x1.to("tpu"), 3, 2, 1)
    assert torch.equal(y1.cpu(), F.max_pool1d(x1, 3, 2, 1))
    x3 = torch.randn(4, 9, 9)
    with vtpu.cpu_fallback(False):
        y3 = F.max_pool2d(x3.to("tpu"), 2)
        ya = F.avg_pool2d(x3.to("tpu"), 3, 2, 1)
    assert torch.equal(y3.cpu(), F.max_pool2d(x3, 2))
    close(ya, F.avg_pool2d(x3, 3, 2, 1), torch.float32)
    e = torch.randn(0, 3, 8, 8)
    with vtpu.cpu_fallback(False):
        assert F.max_pool2d(e.to("tpu"), 2).shape == (0, 3, 4, 4)
        assert F.avg_pool2d(e.to("tpu"), 2).shape == (0, 3, 4, 4)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize(
    "args",
    [
        dict(kernel_size=2),
        dict(kernel_size=3, stride=2, padding=1),
        dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
        dict(kernel_size=(3, 2), stride=2, padding=(1, 1), ceil_mode=True),
        dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
        dict(kernel_size=2, divisor_override=3),
    ],
    ids=str,
)
def test_avg_pool2d(dtype, layout, args):
    x = inputs((2, 4, 10, 11), dtype, layout)
    yc, yt, gc, gt = run_both(lambda t: F.avg_pool2d(t, **args), x)
    close(yt, yc, dtype)
    close(gt, gc, dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("out", [(1, 1), (3, 4), (5, 7), (10, 11)], ids=str)
def test_adaptive_pools(dtype, layout, out):
    x = inputs((2, 3, 10, 11), dtype, layout)
    yc, yt, gc, gt = run_both(lambda t: F.adaptive_avg_pool2d(t, out), x)
    close(yt, yc, dtype)
    close(gt, gc, dtype)
    yc, yt, gc, gt = run_both(lambda t: F.adaptive_max_pool2d(t, out, return_indices=True), x)
    close(yt[0], yc[0], dtype, exact=True)
    assert torch.equal(yt[1].cpu(), yc[1])
    close(gt, gc, dtype)


def test_adaptive_avg_pool_module_runs_natively():
    x = torch.randn(4, 8, 7, 7)
    m = torch.nn.AdaptiveAvgPool2d(1)
    vtpu.reset_fallback_report()
    with vtpu.cpu_fallback(False):
        y = m(x.to("tpu"))
        z = F.adaptive_avg_pool2d(x.to("tpu"), (2, 3))
    close(y, m(x), torch.float32)
    close(z, F.adaptive_avg_pool2d(x, (2, 3)), torch.float32)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize(
    "args",
    [
        dict(scale_factor=2, mode="nearest"),
        dict(size=(7, 5), mode="nearest"),
        dict(scale_factor=(1.7, 2.3), mode="nearest"),
        dict(size=(9, 13), mode="nearest-exact"),
        dict(scale_factor=2, mode="bilinear", align_corners=False),
        dict(scale_factor=2, mode="bilinear", align_corners=True),
        dict(size=(7, 17), mode="bilinear", align_corners=False),
        dict(size=(3, 4), mode="bilinear", align_corners=True),
        dict(scale_factor=(1.5, 0.7), mode="bilinear", align_corners=False, recompute_scale_factor=False),
    ],
    ids=str,
)
def test_upsample(dtype, layout, args):
    x = inputs((2, 3, 6, 8), dtype, layout)
    yc, yt, gc, gt = run_both(lambda t: F.interpolate(t, **args), x)
    exact = args["mode"].startswith("nearest")
    close(yt, yc, dtype, exact=exact)
    close(gt, gc, dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize(
    "args",
    [
        dict(scale_factor=2, mode="nearest"),
        dict(size=11, mode="nearest"),
        dict(scale_factor=1.7, mode="nearest"),
        dict(size=13, mode="nearest-exact"),
        dict(scale_factor=2, mode="linear", align_corners=False),
        dict(scale_factor=2, mode="linear", align_corners=True),
        dict(size=17, mode="linear", align_corners=False),
        dict(size=3, mode="linear", align_corners=True),
        dict(scale_factor=0.7, mode="linear", align_corners=False, recompute_scale_factor=False),
    ],
    ids=str,
)
def test_upsample_1d(dtype, args):
    x = inputs((2, 3, 8), dtype, "contiguous")
    yc, yt, gc, gt = run_both(lambda t: F.interpolate(t, **args), x)
    close(yt, yc, dtype, exact=args["mode"].startswith("nearest"))
    close(gt, gc, dtype)
    yc, yt, gc, gt = run_both(lambda t: F.interpolate(t, **args), x.transpose(0, 1).contiguous().transpose(0, 1))
    close(yt, yc, dtype, exact=args["mode"].startswith("nearest"))


def test_errors_match_cpu():
    x = torch.randn(1, 2, 4, 4)
    t = x.to("tpu")
    cases = [
        lambda a: F.max_pool2d(a, 2, padding=2),
        lambda a: F.avg_pool2d(a, 5),
        lambda a: F.max_pool2d(a, 0),
        lambda a: F.max_pool2d(a.reshape(2, 16), 2),
        lambda a: F.adaptive_avg_pool2d(a, (1, 2, 3)),
        lambda a: F.interpolate(a, size=(0, 3)),
        lambda a: F.interpolate(a[0], size=0),
        lambda a: torch.ops.aten.upsample_nearest1d(a, [3]),
        lambda a: torch.ops.aten.upsample_linear1d_backward(a[0], [3], [1, 2, 4], False),
    ]
    for f in cases:
        with pytest.raises(Exception) as ec:
            f(x)
        with pytest.raises(type(ec.value)):
            f(t)
    torch.tpu.synchronize()


def test_no_fallback_in_cnn_step():
    m = torch.nn.Sequential(
        torch.nn.MaxPool2d(2), torch.nn.AvgPool2d(3, 1, 1), torch.nn.Upsample(scale_factor=2, mode="bilinear"),
        torch.nn.AdaptiveAvgPool2d(1),
    )
    x = torch.randn(2, 3, 16, 16)
    vtpu.reset_fallback_report()
    xt = x.to("tpu").requires_grad_(True)
    with vtpu.cpu_fallback(False):
        y = m(xt).sum()
        y.backward()
    xc = x.clone().requires_grad_(True)
    m(xc).sum().backward()
    close(xt.grad, xc.grad, torch.float32)
