"""Backward passes over "tpu" tensors run on the thread that calls backward
(vtpu turns PyTorch's autograd device thread off on the importing thread),
with the same gradients as CPU on every path: this thread, another thread
(PyTorch's default there), the device thread turned back on, and a
reentrant checkpoint."""

import threading

import pytest
import torch
import torch.utils.checkpoint

pytestmark = pytest.mark.filterwarnings("ignore:tpu matmul precision HIGHEST")


def net(x, w1, w2):
    return (torch.tanh(x @ w1) @ w2).square().sum()


def inputs(device):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 32, generator=g)
    w1 = torch.randn(32, 64, generator=g) * 0.2
    w2 = torch.randn(64, 8, generator=g) * 0.2
    return [t.to(device).requires_grad_() for t in (x, w1, w2)]


def grads(device, fn=net):
    ts = inputs(device)
    with torch.tpu.precision("highest"):  # six bf16 passes: float32 accuracy, so CPU is the reference
        fn(*ts).backward()
    return [t.grad.cpu() for t in ts]


def assert_close_to_cpu(got, fn=net):
    for g, r in zip(got, grads("cpu", fn)):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5)


def assert_same_as_this_thread(got):
    """The same kernels on the same values: the same bits on any thread."""
    for g, r in zip(got, grads("tpu")):
        assert torch.equal(g, r)


def traced_backward():
    """net's gradients on tpu, and the threads its hidden layer's gradient
    hook ran on."""
    seen = []
    x, w1, w2 = inputs("tpu")
    with torch.tpu.precision("highest"):
        h = torch.tanh(x @ w1)
        h.register_hook(lambda g: seen.append(threading.get_ident()))
        (h @ w2).square().sum().backward()
    return [t.grad.cpu() for t in (x, w1, w2)], seen


def test_backward_runs_on_the_calling_thread():
    assert not torch._C._is_multithreading_enabled()
    got, seen = traced_backward()
    assert seen == [threading.get_ident()]
    assert_close_to_cpu(got)


def test_backward_from_another_thread():
    out = {}

    def run():
        try:
            out["grads"] = grads("tpu")
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert "error" not in out, out.get("error")
    assert_close_to_cpu(out["grads"])
    assert_same_as_this_thread(out["grads"])


def test_device_thread_turned_back_on():
    with torch.autograd.set_multithreading_enabled(True):
        got, seen = traced_backward()
    assert len(seen) == 1
    assert_close_to_cpu(got)
    assert_same_as_this_thread(got)
    assert not torch._C._is_multithreading_enabled()


def test_reentrant_checkpoint():
    def checkpointed(x, w1, w2):
        h = torch.utils.checkpoint.checkpoint(lambda a, b: torch.tanh(a @ b), x, w1, use_reentrant=True)
        return (h @ w2).square().sum()

    got = grads("tpu", checkpointed)
    assert_close_to_cpu(got, checkpointed)
    assert_same_as_this_thread(got)


def test_cpu_fallback_rule_reaches_the_backward_on_any_thread():
    """vtpu.cpu_fallback(False) around a backward holds in the backward's
    kernels whichever thread autograd runs them on."""
    import vtpu

    seen = []

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            seen.append((threading.get_ident(), vtpu._C._fallback_allowed()))
            return g * 2

    x = torch.ones(4, device="tpu", requires_grad=True)
    for device_thread in (False, True):
        with torch.autograd.set_multithreading_enabled(device_thread), vtpu.cpu_fallback(False):
            Probe.apply(x).sum().backward()
    assert [allowed for _, allowed in seen] == [False, False]
    assert seen[0][0] == threading.get_ident() != seen[1][0]
    assert vtpu._C._fallback_allowed()  # the block ended: the process setting again
    torch.testing.assert_close(x.grad.cpu(), torch.full((4,), 4.0))
