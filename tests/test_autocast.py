"""torch.autocast("tpu"): bfloat16 by default (the TPU's type), float16 on
request, PyTorch's policy lists (matmuls and convolutions in the low type,
norms, losses and softmax in float32, mixed inputs promoted), as
torch.autocast("cuda") applies them; gradients flow back in the
parameters' dtype."""

import pytest
import torch
import torch.nn.functional as F


def test_default_dtype_is_bfloat16():
    assert torch.get_autocast_dtype("tpu") == torch.bfloat16
    with torch.autocast("tpu"):
        assert torch.is_autocast_enabled("tpu")
        assert torch.get_autocast_dtype("tpu") == torch.bfloat16
    assert not torch.is_autocast_enabled("tpu")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_policies(dtype):
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(8, 16, generator=g), torch.randn(16, 4, generator=g)
    ta, tb = a.to("tpu"), b.to("tpu")
    with torch.autocast("tpu", dtype=dtype):
        mm = ta @ tb
        lin = F.linear(ta, tb.t())
        conv = F.conv1d(ta.view(1, 8, 16), torch.randn(3, 8, 3, generator=g).to("tpu"))
        sm = torch.softmax(ta, dim=-1)          # fp32_set_opt_dtype
        ln = F.layer_norm(ta.to(dtype), (16,))  # fp32
        mse = F.mse_loss(ta.to(dtype), ta)      # fp32
        promoted = torch.addcmul(ta, ta.to(dtype), ta)  # promote to the widest
        plain = ta + 1                          # not on a list: unchanged
    assert mm.dtype == lin.dtype == conv.dtype == dtype
    assert sm.dtype == ln.dtype == mse.dtype == promoted.dtype == plain.dtype == torch.float32
    # the product of the operands rounded to dtype, then (the MXU takes bf16) to bfloat16, summed in fp32
    ra, rb = (t.to(dtype).to(torch.bfloat16).float() for t in (a, b))
    want = (ra @ rb).to(dtype)
    tol = {torch.bfloat16: 1.6e-2, torch.float16: 1e-3}[dtype]  # one rounding of the result
    torch.testing.assert_close(mm.cpu(), want, rtol=tol, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_dot_and_vdot_run_in_float32(dtype):
    # dot/vdot are reductions, not MXU matmuls: float32 under autocast, for
    # any mix of input dtypes (CUDA's promote list refuses float16 inputs
    # under a bfloat16 autocast)
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(64, generator=g), torch.randn(64, generator=g)
    ta, tb = a.to("tpu"), b.to("tpu").half()
    with torch.autocast("tpu", dtype=dtype):
        d, v = torch.dot(ta, tb), torch.vdot(ta, tb)
    assert d.dtype == v.dtype == torch.float32
    # a float32 dot is a matmul: at the default precision one bf16 pass of
    # the operands, products summed in float32 (accumulation order only)
    want = torch.dot(a.bfloat16().double(), b.half().bfloat16().double()).float()
    torch.testing.assert_close(d.cpu(), want, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(v.cpu(), want, rtol=1e-5, atol=1e-4)


def test_disabled_block_and_cpu_untouched():
    a = torch.randn(4, 4, device="tpu")
    with torch.autocast("tpu"):
        with torch.autocast("tpu", enabled=False):
            assert (a @ a).dtype == torch.float32
        cpu = torch.randn(4, 4)
        assert (cpu @ cpu).dtype == torch.float32  # tpu autocast leaves CPU ops alone


def test_backward_gives_fp32_grads():
    lin = torch.nn.Linear(16, 4).to("tpu")
    x = torch.randn(8, 16, device="tpu")
    with torch.autocast("tpu"):
        y = lin(x)
        loss = y.float().square().mean()
    assert y.dtype == torch.bfloat16
    loss.backward()
    assert lin.weight.grad.dtype == torch.float32
    # the same computation done by hand in bf16 gives the same gradient
    w = lin.weight.detach().cpu().requires_grad_()
    bias = lin.bias.detach().cpu().requires_grad_()
    yr = F.linear(x.cpu().bfloat16(), w.bfloat16(), bias.bfloat16())
    yr.float().square().mean().backward()
    torch.testing.assert_close(lin.weight.grad.cpu(), w.grad, rtol=2e-2, atol=1e-3)


def test_binary_cross_entropy_is_refused_as_on_cuda():
    p = torch.rand(4, device="tpu")
    with torch.autocast("tpu"), pytest.raises(RuntimeError, match="unsafe to autocast"):
        F.binary_cross_entropy(p, p)
