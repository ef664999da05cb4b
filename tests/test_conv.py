"""Convolutions on "tpu" against CPU PyTorch: each driver (NCHW im2col rows,
channels-last rows, depthwise lane blocks and NCHW planes, the AMX engine's
implicit GEMM, the stride-1 input gradient run as a forward convolution,
strided ones through col2im), in both
layouts, f32 at HIGHEST (22 bits a product: CPU's f32 within sum rounding)
and bf16 (one rounding of the f32 sum, as oneDNN); forward, input, weight
and bias gradients, and the output's layout as CPU gives it."""

import pytest
import torch
import torch.nn.functional as F

import vtpu  # noqa: F401  (registers the device)

# (name, dims, N, C, O, size, kernel, stride, padding, dilation, groups)
CASES = [
    ("3x3", 2, 2, 16, 24, 9, 3, 1, 1, 1, 1),
    ("3x3 s2", 2, 2, 16, 8, 11, 3, 2, 1, 1, 1),
    ("1x1", 2, 3, 32, 16, 7, 1, 1, 0, 1, 1),
    # 5184 positions: the weight gradient (48 x 16) is summed in K slices
    ("1x1 long", 2, 4, 16, 48, 36, 1, 1, 0, 1, 1),
    ("5x5 dil2", 2, 1, 8, 8, 13, 5, 1, 4, 2, 1),
    ("groups 2", 2, 2, 32, 16, 8, 3, 1, 1, 1, 2),
    ("rgb stem 7x7 s2", 2, 2, 3, 16, 20, 7, 2, 3, 1, 1),
    ("depthwise", 2, 2, 40, 40, 21, 3, 1, 1, 1, 40),
    ("depthwise s2", 2, 2, 24, 24, 15, 3, 2, 1, 1, 24),
    ("1d", 1, 2, 12, 10, 40, 5, 1, 2, 1, 1),
    ("3d", 3, 1, 8, 6, 6, 3, 1, 1, 1, 1),
]
FORMATS = {2: torch.channels_last, 3: torch.channels_last_3d}
CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def operands(case, dtype, channels_last):
    name, dims, n, c, o, size, k, stride, pad, dil, groups = case
    g = torch.Generator().manual_seed(len(name))
    x = torch.randn(n, c, *[size] * dims, generator=g)
    w = torch.randn(o, c // groups, *[k] * dims, generator=g) / (c // groups * k**dims) ** 0.5
    b = torch.randn(o, generator=g)
    if channels_last:
        x = x.contiguous(memory_format=FORMATS[dims])
        w = w.contiguous(memory_format=FORMATS[dims])
    return [t.to(dtype) for t in (x, w, b)], dict(stride=stride, padding=pad, dilation=dil, groups=groups)


def run(conv, args, kw, device):
    leaves = [a.detach().to(device).requires_grad_() for a in args]
    y = conv(*leaves, **kw)
    gy = torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(y.dtype).to(device)
    grads = torch.autograd.grad(y, leaves, gy)
    return y, grads, leaves


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_conv_matches_cpu(case, dtype, layout):
    dims = case[1]
    if layout == "channels_last" and dims == 1:
        pytest.skip("no channels-last format for 1-d")
    args, kw = operands(case, dtype, layout == "channels_last")
    conv = CONV[dims]
    y_cpu, g_cpu, leaves_cpu = run(conv, args, kw, "cpu")
    with torch.tpu.precision("highest"):
        y_tpu, g_tpu, _ = run(conv, args, kw, "tpu")
    # bf16: both sides round an f32 sum once; the sums' order differs
    tol = dict(rtol=2e-5, atol=2e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(y_tpu.cpu(), y_cpu, **tol)
    for what, got, want in zip(("input", "weight", "bias"), g_tpu, g_cpu):
        scale = max(want.abs().max().item(), 1.0)  # weight/bias gradients sum many terms
        torch.testing.assert_close(got.cpu() / scale, want / scale, **tol, msg=lambda m: f"grad {what}: {m}")
    if dims == 2:  # the output and the input gradient laid out as CPU PyTorch lays them out
        fmt = FORMATS[dims]
        assert y_tpu.is_contiguous(memory_format=fmt) == y_cpu.is_contiguous(memory_format=fmt)
        assert y_tpu.is_contiguous() == y_cpu.is_contiguous()
        assert g_tpu[0].stride() == g_cpu[0].stride()
    if dims == 3:  # CPU's 3-d convolution returns contiguous; vtpu keeps the input's layout, as cuDNN does
        fmt = FORMATS[dims] if layout == "channels_last" else torch.contiguous_format
        assert y_tpu.is_contiguous(memory_format=fmt) and g_tpu[0].is_contiguous(memory_format=fmt)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_conv_default_precision_is_one_bf16_pass(case, layout):
    """f32 at DEFAULT: the products of the operands' bf16 roundings, summed in
    f32, on every ISA path (the AMX engine's implicit GEMM among them): CPU's
    f32 convolution of the rounded operands, within f32 sum rounding."""
    dims = case[1]
    if layout == "channels_last" and dims == 1:
        pytest.skip("no channels-last format for 1-d")
    (x, w, b), kw = operands(case, torch.float32, layout == "channels_last")
    conv = CONV[dims]
    want = conv(x.bfloat16().float(), w.bfloat16().float(), b, **kw)
    got = conv(x.to("tpu"), w.to("tpu"), b.to("tpu"), **kw).cpu()
    torch.testing.assert_close(got, want, rtol=2e-5, atol=2e-5)
    # the gradients: products of the rounded grad_output and weight / input
    gy = torch.randn(want.shape, generator=torch.Generator().manual_seed(2))
    if layout == "channels_last":
        gy = gy.contiguous(memory_format=FORMATS[dims])
    cb = torch.ops.aten.convolution_backward
    conf = (None, [kw["stride"]] * dims, [kw["padding"]] * dims, [kw["dilation"]] * dims, False, [0] * dims,
            kw["groups"], [True, True, False])
    r = [t.bfloat16().float() for t in (gy, x, w)]
    want_g = cb(*r, *conf)[:2]
    got_g = cb(gy.to("tpu"), x.to("tpu"), w.to("tpu"), *conf)[:2]
    for what, g, wg in zip(("input", "weight"), got_g, want_g):
        scale = max(wg.abs().max().item(), 1.0)  # sums of many terms, in another order
        torch.testing.assert_close(g.cpu() / scale, wg / scale, rtol=2e-5, atol=2e-5, msg=lambda m: f"grad {what}: {m}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_depthwise_channels_last_whole_blocks_without_bias(dtype):
    """Whole 16-channel blocks, no bias, channels-last: the depthwise forward
    writes its sums straight into the output (f32, or rounded to bf16 once).
    Against CPU's f32 convolution of the bf16-rounded operands (DEFAULT's
    products), within f32 sum rounding, or one bf16 rounding of the sum."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(3, 32, 13, 11, generator=g).to(dtype).contiguous(memory_format=torch.channels_last)
    w = (torch.randn(32, 1, 3, 3, generator=g) * 0.3).to(dtype)
    want = F.conv2d(x.bfloat16().float(), w.bfloat16().float(), padding=1, groups=32)
    got = F.conv2d(x.to("tpu"), w.to("tpu"), padding=1, groups=32)
    assert got.dtype == dtype and got.is_contiguous(memory_format=torch.channels_last)
    tol = dict(rtol=2e-5, atol=2e-5) if dtype == torch.float32 else dict(rtol=8e-3, atol=8e-3)
    torch.testing.assert_close(got.cpu().float(), want, **tol)


@pytest.mark.parametrize("stride,padding", [(1, 1), (2, 1), (2, 0)], ids=["s1", "s2", "s2 unpadded"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_depthwise_channels_last_input_gradient(dtype, stride, padding):
    """The depthwise input gradient at DEFAULT is gathered row by row
    straight into a channels-last gradient of whole 16-channel blocks (f32,
    or rounded to bf16 once). Against CPU's f32 gradient of the bf16-rounded
    operands; at stride 2 without padding the last row and column of a
    16 x 16 input are read by no window, so their gradient is exactly 0."""
    g = torch.Generator().manual_seed(6)
    x = torch.randn(3, 32, 16, 16, generator=g).to(dtype).contiguous(memory_format=torch.channels_last)
    w = (torch.randn(32, 1, 3, 3, generator=g) * 0.3).to(dtype)
    kw = dict(stride=stride, padding=padding, groups=32)
    gy = torch.randn(F.conv2d(x.float(), w.float(), **kw).shape, generator=g).to(dtype)
    gy = gy.contiguous(memory_format=torch.channels_last)
    r = [t.bfloat16().float() for t in (gy, x, w)]
    want = torch.ops.aten.convolution_backward(*r, None, [stride] * 2, [padding] * 2,
                                               [1, 1], False, [0, 0], 32, [True, False, False])[0]
    got = torch.ops.aten.convolution_backward(gy.to("tpu"), x.to("tpu"), w.to("tpu"), None, [stride] * 2,
                                              [padding] * 2, [1, 1], False, [0, 0], 32, [True, False, False])[0]
    assert got.dtype == dtype and got.is_contiguous(memory_format=torch.channels_last)
    tol = dict(rtol=2e-5, atol=2e-5) if dtype == torch.float32 else dict(rtol=8e-3, atol=8e-3)
    torch.testing.assert_close(got.cpu().float(), want, **tol)
    if padding == 0:
        assert torch.all(got[:, :, -1, :].cpu() == 0) and torch.all(got[:, :, :, -1].cpu() == 0)


def test_conv_transpose_matches_cpu():
    """A transposed convolution is the plain one's input gradient, and the
    other way round: both directions against CPU, with output_padding."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 16, 7, 6, generator=g)
    w = torch.randn(16, 8, 3, 3, generator=g) / 12
    kw = dict(stride=2, padding=1, output_padding=1)
    y_cpu, g_cpu, _ = run(F.conv_transpose2d, [x, w], kw, "cpu")
    with torch.tpu.precision("highest"):
        y_tpu, g_tpu, _ = run(F.conv_transpose2d, [x, w], kw, "tpu")
    torch.testing.assert_close(y_tpu.cpu(), y_cpu, rtol=2e-5, atol=2e-5)
    for got, want in zip(g_tpu, g_cpu):
        torch.testing.assert_close(got.cpu(), want, rtol=2e-5, atol=2e-5)
