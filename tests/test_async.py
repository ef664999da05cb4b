"""The device queue is really asynchronous; synchronisation waits; kernel
errors surface at the next sync (Strict) or at the op (Debug); Ctrl-C
during a long wait raises KeyboardInterrupt and leaves the device usable.
No timing assertions: a gate kernel holds the queue until the test opens it."""

import os
import signal
import threading

import pytest
import torch

import vtpu
from vtpu import _C
from vtpu.precision import Precision, current_precision


@pytest.fixture
def gate(strict):
    _C._debug_gate_enqueue(0, 30_000)  # holds the queue for at most 30 s
    yield
    _C._debug_gate_open()
    torch.tpu.synchronize()


def test_enqueue_returns_before_kernel_runs(gate):
    a = torch.ones(1000, device="tpu")  # queued behind the gate
    b = a + 1
    done = torch.tpu.Event()
    done.record()
    assert not done.query()  # nothing behind the gate has run
    assert _C._queue_pending(0) >= 3
    _C._debug_gate_open()
    torch.tpu.synchronize()
    assert done.query()
    assert torch.equal(b.cpu(), torch.full((1000,), 2.0))


def test_host_read_waits_for_queue(gate):
    x = torch.zeros(10, device="tpu")
    x.add_(5)
    threading.Timer(0.05, _C._debug_gate_open).start()
    assert x.sum().item() == 50.0  # .item() blocks until the queue has run


def test_kernel_error_latched_until_sync_in_strict_mode(strict):
    a = torch.tensor([1, 2, 3], device="tpu")
    z = torch.tensor([1, 0, 1], device="tpu")
    r = a // z  # integer division by zero: queued, no error yet
    with pytest.raises(RuntimeError, match=r"aten::div.*ZeroDivisionError"):
        torch.tpu.synchronize()
    torch.tpu.synchronize()  # reported once, then cleared
    assert torch.equal((a * 2).cpu(), torch.tensor([2, 4, 6]))  # device still usable
    del r


def test_kernel_error_raised_at_op_in_debug_mode(strict):
    a = torch.tensor([4, 5], device="tpu")
    z = torch.zeros(2, dtype=torch.int64, device="tpu")
    with vtpu.eager_mode("debug"):
        assert vtpu.get_eager_mode() == vtpu.EagerMode.DEBUG
        with pytest.raises(RuntimeError, match=r"aten::remainder.*ZeroDivisionError"):
            torch.remainder(a, z)
        assert torch.equal((a + 1).cpu(), torch.tensor([5, 6]))
    assert vtpu.get_eager_mode() == vtpu.EagerMode.STRICT
    torch.tpu.synchronize()


class _BadIndexInBackward(torch.autograd.Function):
    """A backward that indexes out of range (the kernel finds it, asynchronously)."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g.index_select(0, torch.tensor([0, 99], device=g.device))


def test_debug_mode_reaches_backward_kernels(strict):
    # backward kernels run on autograd's device thread; the block's mode goes with them
    x = torch.ones(2, device="tpu", requires_grad=True)
    with vtpu.eager_mode("debug"):
        loss = _BadIndexInBackward.apply(x).sum()
        with pytest.raises(IndexError, match="index_select"):
            loss.backward()
    torch.tpu.synchronize()  # nothing left latched: the error was raised at the op
    # the same backward in Strict mode returns and the error waits for the next sync
    loss = _BadIndexInBackward.apply(x).sum()
    loss.backward()
    with pytest.raises(IndexError, match="index_select"):
        torch.tpu.synchronize()
    torch.tpu.synchronize()
    assert torch.equal((x.detach() + 1).cpu(), torch.full((2,), 2.0))


@pytest.mark.filterwarnings("ignore:tpu matmul precision")
def test_precision_and_mode_blocks_nest_independently(strict):
    with torch.tpu.precision("highest"):
        with vtpu.eager_mode("debug"):
            assert vtpu.get_eager_mode() == vtpu.EagerMode.DEBUG
            assert current_precision() == Precision.HIGHEST
            with torch.tpu.precision("default"):
                assert vtpu.get_eager_mode() == vtpu.EagerMode.DEBUG
                assert current_precision() == Precision.DEFAULT
            assert current_precision() == Precision.HIGHEST
        assert vtpu.get_eager_mode() == vtpu.EagerMode.STRICT
        assert current_precision() == Precision.HIGHEST


def test_debug_mode_from_environment():
    import subprocess
    import sys

    code = (
        "import torch, vtpu\n"
        "assert vtpu.get_eager_mode() == vtpu.EagerMode.DEBUG\n"
        "a = torch.tensor([1], device='tpu')\n"
        "try:\n"
        "    a // torch.tensor([0], device='tpu')\n"
        "except RuntimeError as e:\n"
        "    assert 'ZeroDivisionError' in str(e)\n"
        "    print('raised at op')\n"
    )
    env = dict(os.environ, TPU_LAUNCH_BLOCKING="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "raised at op" in out.stdout


def test_ctrl_c_during_synchronize(gate):
    x = torch.ones(100, device="tpu")
    y = x * 3
    # Python raises KeyboardInterrupt only where SIGINT was not ignored when
    # it started (a background job of a non-interactive shell starts so)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            torch.tpu.synchronize()
    finally:
        timer.join()
        signal.signal(signal.SIGINT, previous)
    _C._debug_gate_open()
    torch.tpu.synchronize()
    assert torch.equal(y.cpu(), torch.full((100,), 3.0))  # nothing lost


def test_threads_enqueue_concurrently():
    results = {}

    def work(k):
        t = torch.full((1000,), float(k), device="tpu")
        for _ in range(200):
            t = t + 1
        results[k] = t.cpu()

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(4):
        assert torch.equal(results[k], torch.full((1000,), k + 200.0))


def test_streams_and_events_order_work():
    s = torch.tpu.Stream()
    with torch.tpu.stream(s):
        a = torch.ones(10, device="tpu") * 4
    e = torch.tpu.Event(enable_timing=True)
    e2 = torch.tpu.Event(enable_timing=True)
    e.record()
    b = a + 1
    e2.record()
    e2.synchronize()
    assert e.elapsed_time(e2) >= 0
    assert torch.equal(b.cpu(), torch.full((10,), 5.0))
    assert torch.tpu.current_stream().device.type == "tpu"
