# test_norm.py — normalisation layers on "tpu" against CPU PyTorch: forward,
# saved statistics and gradients for LayerNorm, RMSNorm, GroupNorm and
# BatchNorm (training with running stats, eval, no running stats), every
# float dtype, mixed bf16 input / fp32 parameters, non-contiguous and empty
# inputs, errors; and that all of it runs natively (no CPU fallback).
import pytest
import torch
import torch.nn.functional as F

import vtpu

# Tolerances (atol, rtol) per input dtype: normalised outputs are O(1); the
# kernels compute in fp32 (f64 for double) and round once.
TOL = {
    torch.float32: (2e-5, 2e-5),
    torch.float64: (1e-10, 1e-10),
    torch.bfloat16: (2e-2, 2e-2),
    torch.float16: (2e-3, 2e-3),
}
DTYPES = list(TOL)


def close(a, b, dtype, scale=1.0):
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(a.cpu(), b, atol=atol * scale, rtol=rtol * scale, equal_nan=True)


def run_both(make_module, x, dtype, param_dtype=None, scale=4.0, train=True):
    """Forward and backward of the same module on CPU and tpu."""
    torch.manual_seed(0)
    m_cpu = make_module()
    if param_dtype is not None:
        m_cpu = m_cpu.to(param_dtype)
    with torch.no_grad():
        for p in m_cpu.parameters():
            p.uniform_(0.5, 1.5)
    m_tpu = __import__("copy").deepcopy(m_cpu).to("tpu")
    m_cpu.train(train)
    m_tpu.train(train)
    xc = x.detach().clone().requires_grad_(True)
    xt = x.detach().to("tpu").requires_grad_(True)
    yc = m_cpu(xc)
    with vtpu.cpu_fallback(False):
        yt = m_tpu(xt)
    g = torch.randn_like(yc)
    yc.backward(g)
    with vtpu.cpu_fallback(False):
        yt.backward(g.to("tpu"))
    close(yt, yc.detach(), dtype)
    close(xt.grad, xc.grad, dtype, scale)
    for pc, pt in zip(m_cpu.parameters(), m_tpu.parameters()):
        assert pt.grad.dtype == pc.grad.dtype
        close(pt.grad, pc.grad, dtype, scale * 10)
    for bc, bt in zip(m_cpu.buffers(), m_tpu.buffers()):
        if bc.dtype.is_floating_point:
            close(bt, bc, dtype)
        else:
            assert torch.equal(bt.cpu(), bc)
    return yt


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm(dtype, affine):
    x = torch.randn(4, 7, 33, dtype=dtype) * 3 + 1
    run_both(lambda: torch.nn.LayerNorm(33, elementwise_affine=affine, dtype=dtype), x, dtype)
    run_both(lambda: torch.nn.LayerNorm([7, 33], elementwise_affine=affine, dtype=dtype), x, dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_layer_norm_mixed_params(dtype):
    x = torch.randn(5, 40, dtype=dtype)
    run_both(lambda: torch.nn.LayerNorm(40), x, dtype)
    xt = x.to("tpu")
    w = torch.randn(40)
    r_cpu = torch.ops.aten.native_layer_norm(x, [40], w, w, 1e-5)
    with vtpu.cpu_fallback(False):
        r_tpu = torch.ops.aten.native_layer_norm(xt, [40], w.to("tpu"), w.to("tpu"), 1e-5)
    for a, b in zip(r_tpu, r_cpu):
        assert a.dtype == b.dtype and a.shape == b.shape
        close(a, b, dtype)


def test_layer_norm_saved_stats_and_noncontiguous():
    x = torch.randn(64, 48).t()  # non-contiguous [48, 64]
    w, b = torch.randn(64), torch.randn(64)
    r_cpu = torch.ops.aten.native_layer_norm(x, [64], w, b, 1e-5)
    with vtpu.cpu_fallback(False):
        r_tpu = torch.ops.aten.native_layer_norm(x.to("tpu"), [64], w.to("tpu"), b.to("tpu"), 1e-5)
    for a, c in zip(r_tpu, r_cpu):
        assert a.shape == c.shape and a.dtype == c.dtype
        close(a, c, torch.float32)
    # large mean: statistics must not cancel
    x = torch.randn(8, 512) + 1e4
    r_cpu = torch.ops.aten.native_layer_norm(x, [512], None, None, 1e-5)
    r_tpu = torch.ops.aten.native_layer_norm(x.to("tpu"), [512], None, None, 1e-5)
    torch.testing.assert_close(r_tpu[0].cpu(), r_cpu[0], atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(r_tpu[2].cpu(), r_cpu[2], atol=1e-3, rtol=1e-3)


def test_layer_norm_empty_and_errors():
    for shape in [(0, 5), (3, 0, 5)]:
        x = torch.randn(shape)
        yt = F.layer_norm(x.to("tpu"), [5])
        assert yt.shape == x.shape
    x = torch.randn(3, 6)
    for args in [([5],), ([3, 6, 1],)]:
        with pytest.raises(RuntimeError) as e_cpu:
            F.layer_norm(x, *args)
        with pytest.raises(RuntimeError) as e_tpu:
            F.layer_norm(x.to("tpu"), *args)
        assert str(e_cpu.value) == str(e_tpu.value)
    with pytest.raises(RuntimeError, match="weight"):
        F.layer_norm(x.to("tpu"), [6], torch.ones(5, device="tpu"))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("affine", [True, False])
def test_rms_norm(dtype, affine):
    x = torch.randn(3, 9, 40, dtype=dtype)
    run_both(lambda: torch.nn.RMSNorm(40, elementwise_affine=affine, dtype=dtype), x, dtype)
    run_both(lambda: torch.nn.RMSNorm([9, 40], eps=1e-6, elementwise_affine=affine, dtype=dtype), x, dtype)


def test_rms_norm_functional_is_fused():
    x = torch.randn(4, 16)
    w = torch.rand(16)
    vtpu.reset_fallback_report()
    with vtpu.cpu_fallback(False):
        yt = F.rms_norm(x.to("tpu"), [16], w.to("tpu"), eps=1e-5)
    torch.testing.assert_close(yt.cpu(), F.rms_norm(x, [16], w, eps=1e-5), atol=2e-5, rtol=2e-5)
    out, rstd = torch.ops.aten._fused_rms_norm(x.to("tpu"), [16], w.to("tpu"), None)
    assert rstd.shape == (4, 1) and rstd.dtype == torch.float32
    ref = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + torch.finfo(torch.float32).eps)
    torch.testing.assert_close(rstd.cpu(), ref)
    run_both(lambda: torch.nn.RMSNorm(40), torch.randn(6, 40, dtype=torch.bfloat16), torch.bfloat16)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("affine", [True, False])
def test_group_norm(dtype, affine):
    x = torch.randn(3, 6, 5, 7, dtype=dtype) * 2 + 0.5
    run_both(lambda: torch.nn.GroupNorm(3, 6, affine=affine, dtype=dtype), x, dtype)
    run_both(lambda: torch.nn.GroupNorm(6, 6, affine=affine, dtype=dtype), x[:, :, :, 0], dtype)
    run_both(lambda: torch.nn.GroupNorm(2, 6, affine=affine, dtype=dtype), x.transpose(2, 3), dtype)


def test_group_norm_mixed_and_errors():
    x = torch.randn(2, 4, 9, dtype=torch.bfloat16)
    run_both(lambda: torch.nn.GroupNorm(2, 4), x, torch.bfloat16)
    with pytest.raises(RuntimeError) as e_cpu:
        F.group_norm(torch.randn(2, 6, 3), 4)
    with pytest.raises(RuntimeError) as e_tpu:
        F.group_norm(torch.randn(2, 6, 3, device="tpu"), 4)
    assert str(e_cpu.value) == str(e_tpu.value)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("train", [True, False])
def test_batch_norm_2d(dtype, train):
    x = torch.randn(4, 5, 6, 7, dtype=dtype) * 2 + 1
    run_both(lambda: torch.nn.BatchNorm2d(5, dtype=dtype), x, dtype, train=train)
    run_both(lambda: torch.nn.BatchNorm2d(5, momentum=0.3, affine=False, dtype=dtype), x, dtype, train=train)


@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_norm_1d_and_no_stats(dtype):
    run_both(lambda: torch.nn.BatchNorm1d(7, dtype=dtype), torch.randn(16, 7, dtype=dtype), dtype)
    run_both(lambda: torch.nn.BatchNorm1d(7, dtype=dtype), torch.randn(4, 7, 50, dtype=dtype), dtype)
    run_both(lambda: torch.nn.BatchNorm2d(3, track_running_stats=False, dtype=dtype), torch.randn(2, 3, 4, 4, dtype=dtype), dtype)
    run_both(lambda: torch.nn.BatchNorm1d(7, track_running_stats=False, dtype=dtype), torch.randn(16, 7, dtype=dtype), dtype, train=False)


def test_batch_norm_mixed_and_steps():
    # bf16 activations with fp32 parameters and running stats (autocast-style)
    x = torch.randn(8, 4, 5, 5, dtype=torch.bfloat16)
    run_both(lambda: torch.nn.BatchNorm2d(4), x, torch.bfloat16)
    # several training steps, then eval: running stats follow CPU
    m_cpu = torch.nn.BatchNorm2d(3, momentum=None)
    m_tpu = torch.nn.BatchNorm2d(3, momentum=None).to("tpu")
    for _ in range(3):
        x = torch.randn(4, 3, 5, 5) * 3 + 2
        m_cpu(x)
        with vtpu.cpu_fallback(False):
            m_tpu(x.to("tpu"))
    torch.testing.assert_close(m_tpu.running_mean.cpu(), m_cpu.running_mean)
    torch.testing.assert_close(m_tpu.running_var.cpu(), m_cpu.running_var)
    assert m_tpu.num_batches_tracked.item() == 3
    m_cpu.eval()
    m_tpu.eval()
    x = torch.randn(2, 3, 5, 5)
    torch.testing.assert_close(m_tpu(x.to("tpu")).cpu(), m_cpu(x), atol=1e-5, rtol=1e-5)


def test_batch_norm_ops_shapes():
    x = torch.randn(4, 3, 5)
    w, b, rm, rv = torch.rand(3), torch.rand(3), torch.rand(3), torch.rand(3) + 0.5
    t = lambda v: v.to("tpu")
    A = torch.ops.aten
    cases = [
        (A._native_batch_norm_legit, (x, w, b, rm.clone(), rv.clone(), True, 0.1, 1e-5)),
        (A._native_batch_norm_legit.no_stats, (x, w, b, True, 0.1, 1e-5)),
        (A._native_batch_norm_legit_no_training, (x, w, b, rm, rv, 0.1, 1e-5)),
        (A.native_batch_norm, (x, w, b, rm.clone(), rv.clone(), False, 0.1, 1e-5)),
    ]
    for op, args in cases:
        r_cpu = op(*args)
        with vtpu.cpu_fallback(False):
            r_tpu = op(*[t(a) if isinstance(a, torch.Tensor) else a for a in args])
        for a, c in zip(r_tpu, r_cpu):
            assert a.shape == c.shape and a.dtype == c.dtype, op
            if c.numel():
                torch.testing.assert_close(a.cpu(), c, atol=1e-5, rtol=1e-5)


def test_no_fallbacks_recorded():
    vtpu.reset_fallback_report()
    x = torch.randn(2, 4, 8, 8, device="tpu", requires_grad=True)
    mods = [torch.nn.LayerNorm(8), torch.nn.RMSNorm(8), torch.nn.GroupNorm(2, 4), torch.nn.BatchNorm2d(4)]
    for m in mods:
        m = m.to("tpu")
        m(x).sum().backward()
        m.eval()
        m(x).sum().backward()
    torch.tpu.synchronize()
    report = vtpu.fallback_report()
    assert not any("norm" in str(k) for k in (report or {})), report
