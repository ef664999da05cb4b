"""PyTorch's own OpInfo samples for the matmul and convolution ops, run on
"tpu" at HIGHEST precision against CPU, forward and gradients, with no CPU
fallback for the products themselves."""

import warnings

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._pytree import tree_flatten, tree_map

import vtpu

NAMES = ["mm", "bmm", "addmm", "baddbmm", "addmv", "mv", "dot", "matmul", "einsum", "nn.functional.linear",
         "nn.functional.conv1d", "nn.functional.conv2d", "nn.functional.conv3d", "nn.functional.conv_transpose2d"]
OPS = [op for op in op_db if op.name in NAMES and op.variant_test_name in ("", "default")]
# fp32 at HIGHEST keeps ~22 bits per product; sums of O(100) terms stay well inside these
RTOL, ATOL = 2e-5, 2e-5


def to_tpu(x):
    return x.detach().to("tpu").requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x


def tensors(out):
    return [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_opinfo_forward_and_grad(op):
    assert len(OPS) >= 12
    samples = list(op.sample_inputs("cpu", torch.float32, requires_grad=True))[:8]
    assert samples
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for s in samples:
            cpu_args = (s.input, *s.args)
            tpu_args = tree_map(to_tpu, cpu_args)
            tpu_kwargs = tree_map(to_tpu, s.kwargs)
            want = op(*cpu_args, **s.kwargs)
            with torch.tpu.precision("highest"):
                got = op(*tpu_args, **tpu_kwargs)
            for g, w in zip(tensors(got), tensors(want)):
                assert g.device.type == "tpu"
                torch.testing.assert_close(g.cpu(), w, rtol=RTOL, atol=ATOL)
            outs_w, outs_g = tensors(want), tensors(got)
            leaves_w = [t for t in tree_flatten((cpu_args, s.kwargs))[0] if isinstance(t, torch.Tensor) and t.requires_grad]
            leaves_g = [t for t in tree_flatten((tpu_args, tpu_kwargs))[0] if isinstance(t, torch.Tensor) and t.requires_grad]
            if not leaves_w or not any(o.requires_grad for o in outs_w):
                continue
            gen = torch.Generator().manual_seed(0)
            cots = [torch.randn(o.shape, generator=gen) for o in outs_w]
            gw = torch.autograd.grad(outs_w, leaves_w, cots, allow_unused=True)
            with torch.tpu.precision("highest"):
                gg = torch.autograd.grad(outs_g, leaves_g, [c.to("tpu") for c in cots], allow_unused=True)
            for a, b in zip(gg, gw):
                if b is None:
                    continue
                torch.testing.assert_close(a.cpu(), b, rtol=RTOL, atol=ATOL)


def test_products_do_not_fall_back():
    vtpu.reset_fallback_report()
    x = torch.randn(4, 3, 10, 10, device="tpu", requires_grad=True)
    conv = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False).to("tpu")
    lin = torch.nn.Linear(8 * 10 * 10, 5, bias=False).to("tpu")
    with vtpu.cpu_fallback(False):
        y = lin(conv(x).flatten(1))
        y.backward(torch.ones_like(y))
    assert x.grad is not None and conv.weight.grad is not None
    assert vtpu.fallback_report() == {}
