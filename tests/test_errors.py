"""Errors of queued ops reach the code that depends on them. A Strict-mode
error is raised by the next read of what the failed op wrote, or of
anything computed from it (on any device), or by a synchronisation of the
device; never by an unrelated read in another thread. What the failed op
wrote never reads as data. No error is lost: a synchronisation raises every
error nobody has seen. Debug mode raises at the op."""

import threading

import pytest
import torch

import vtpu
from vtpu import _C

# Strict mode's semantics (errors raised later, at the reads that depend on
# them) unless a test asks for Debug.
pytestmark = pytest.mark.usefixtures("strict")

BOUNDS = r"index 12 is out of bounds"


def bad_gather(t):
    """A gather whose index 12 is out of range: fails on the queue (Strict)."""
    return t.gather(0, torch.tensor([1, 12, 2], device=t.device))


def test_error_raised_by_the_read_that_depends_on_it():
    t = torch.randn(10, device="tpu")
    r = bad_gather(t)  # queued, no error yet
    s = (r * 2).sum()  # computed from the failed output: does not run on garbage
    other = (t * 3).sum()  # independent work still runs
    assert other.item() == pytest.approx((t.cpu() * 3).sum().item(), rel=1e-5)
    with pytest.raises(RuntimeError, match=BOUNDS):
        s.item()
    with pytest.raises(RuntimeError, match=BOUNDS):
        r.cpu()  # every read of the failed output raises, not only the first
    torch.tpu.synchronize()  # raised already: nothing left
    r.fill_(0.5)  # a whole new value: readable again
    assert torch.equal(r.cpu(), torch.full((3,), 0.5))
    with pytest.raises(RuntimeError, match=BOUNDS):
        print(s)  # printing reads it too


def test_error_not_raised_in_another_threads_read():
    t = torch.randn(10, device="tpu")
    ready, done = threading.Event(), threading.Event()
    results = {}

    def thread_a():
        with vtpu.eager_mode("strict"):  # eager modes are per thread
            r = bad_gather(t)
        ready.set()
        done.wait(30)
        try:
            r.cpu()
            results["a"] = "no error"
        except RuntimeError as e:
            results["a"] = str(e)

    def thread_b():
        ready.wait(30)
        x = torch.ones(100, device="tpu")
        try:
            results["b"] = (x * 2).sum().item()
        except RuntimeError as e:
            results["b"] = str(e)
        done.set()

    ts = [threading.Thread(target=thread_a), threading.Thread(target=thread_b)]
    [th.start() for th in ts]
    [th.join(60) for th in ts]
    assert results["b"] == 200.0  # B's unrelated read is unaffected
    assert "out of bounds" in results["a"]  # A gets its own error at its read


def test_failed_output_read_through_a_cross_device_copy():
    r = bad_gather(torch.randn(10, device="tpu:0"))
    moved = r.to("tpu:1")
    with pytest.raises(RuntimeError, match=BOUNDS):
        moved.cpu()
    with pytest.raises(RuntimeError, match=BOUNDS):
        (moved + 1).sum().item()


def test_no_error_is_lost():
    a = torch.tensor([4, 5], device="tpu")
    z = torch.zeros(2, dtype=torch.int64, device="tpu")
    q = a // z  # ZeroDivisionError on the queue
    r = bad_gather(torch.randn(10, device="tpu"))  # and an IndexError
    with pytest.raises(RuntimeError) as e:
        torch.tpu.synchronize()
    assert "ZeroDivisionError" in str(e.value) and "out of bounds" in str(e.value)
    torch.tpu.synchronize()  # both raised
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        q.cpu()  # the tensors still say what happened to them
    with pytest.raises(RuntimeError, match=BOUNDS):
        r.cpu()


def test_events_and_streams_raise_errors_before_them():
    e0 = torch.tpu.Event()
    e0.record()
    r = bad_gather(torch.randn(10, device="tpu"))
    e1 = torch.tpu.Event()
    e1.record()
    e0.synchronize()  # before the failure: nothing to raise
    with pytest.raises(RuntimeError, match=BOUNDS):
        e1.synchronize()
    e1.synchronize()  # raised once
    r2 = bad_gather(torch.randn(10, device="tpu"))
    e2 = torch.tpu.Event()
    e2.record()
    with pytest.raises(RuntimeError, match=BOUNDS):
        while not e2.query():
            pass
    with pytest.raises(RuntimeError, match=BOUNDS):
        r.cpu()
    with pytest.raises(RuntimeError, match=BOUNDS):
        r2.cpu()


def test_stream_synchronize_raises():
    bad_gather(torch.randn(10, device="tpu"))
    with pytest.raises(RuntimeError, match=BOUNDS):
        torch.tpu.current_stream().synchronize()


def test_debug_mode_raises_at_the_op_and_at_reads_of_its_output():
    t = torch.randn(10, device="tpu")
    with vtpu.eager_mode("debug"):
        out = torch.empty(3, device="tpu")
        with pytest.raises(RuntimeError, match=BOUNDS):
            torch.gather(t, 0, torch.tensor([1, 12, 2], device="tpu"), out=out)
        with pytest.raises(RuntimeError, match=BOUNDS):
            out + 1  # computing from what the failed op wrote raises at that op
        with pytest.raises(RuntimeError, match=BOUNDS):
            out.cpu()
    torch.tpu.synchronize()  # each was raised at its op


def test_fallback_op_raises_the_error_of_its_input():
    r = bad_gather(torch.randn(10, device="tpu"))
    with pytest.raises(RuntimeError, match=BOUNDS):
        torch.igamma(r.abs(), r.abs())  # no native kernel: runs on the CPU, after the read check


# ------------------------------------------------------------------ stress


def test_threads_devices_copies_errors_frees():
    """Threads on both devices compute, fail on purpose, copy across devices
    and free, at once: every read sees exactly its own thread's values or
    its own thread's error."""
    n_threads, rounds = 6, 60
    wrong = []

    def worker(k):
        dev, other = f"tpu:{k % 2}", f"tpu:{(k + 1) % 2}"
        g = torch.Generator().manual_seed(k)
        for i in range(rounds):
            value = float(torch.randint(1, 1000, (), generator=g))
            fail = (i + k) % 4 == 0
            try:  # Strict raises at the read, Debug at the op (this thread's default mode)
                x = torch.full((4096,), value, device=dev)
                y = bad_gather(x[:10]) if fail else x[:3] * 1.0
                z = y.to(other)
                del x, y  # freed while the copy may still be pending
                got = z.cpu()
                if fail or not torch.equal(got, torch.full((3,), value)):
                    wrong.append((k, i, "value", got))
            except RuntimeError as e:
                if not fail or "out of bounds" not in str(e):
                    wrong.append((k, i, "error", str(e)))

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(n_threads)]
    [th.start() for th in ts]
    [th.join(300) for th in ts]
    assert not wrong, wrong[:5]
    for d in range(2):
        torch.tpu.synchronize(d)  # every failure was raised by its own read


def test_queue_keeps_running_after_errors_in_every_mode(mode):
    for _ in range(50):
        with pytest.raises(RuntimeError):
            bad_gather(torch.randn(10, device="tpu")).cpu()
    x = torch.arange(5.0, device="tpu")
    assert torch.equal((x * 2).cpu(), torch.arange(5.0) * 2)
    assert _C._queue_pending(0) >= 0
