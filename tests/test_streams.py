"""Streams on "tpu": a stream other than the default runs on a queue of its
own, so its work overlaps the default stream's; work of different streams
that touches the same memory still runs in issue order, so a program that
forgets wait_stream or record_stream gets CUDA's results, not a race.
Events, faults and synchronisation cross streams.

No timing assertions: a gate kernel holds a queue until the test opens it,
and "not run yet" is read from events."""

import pytest
import torch

import vtpu
from vtpu import _C

GATE_MS = 30_000


@pytest.fixture
def gates(strict):  # a held queue needs ops that return before they run
    yield
    _C._debug_gate_open()
    torch.tpu.synchronize()


def hold(stream=None):
    """Hold the queue of `stream` (default: the current one) behind a gate."""
    with torch.tpu.stream(stream):
        _C._debug_gate_enqueue(torch.tpu.current_device(), GATE_MS)


def test_a_side_stream_runs_while_the_default_stream_is_held(gates):
    s = torch.tpu.Stream()
    assert s != torch.tpu.default_stream()
    hold()
    with torch.tpu.stream(s):
        a = torch.full((1000,), 3.0, device="tpu") * 2
        done = torch.tpu.Event()
        done.record()
    held = torch.tpu.Event()
    held.record()
    done.synchronize()  # returns although the default stream is held
    assert s.query()
    assert not held.query() and not torch.tpu.default_stream().query()
    _C._debug_gate_open()
    assert torch.equal(a.cpu(), torch.full((1000,), 6.0))


def test_recording_again_or_dropping_an_event_does_not_wait_for_the_device(gates):
    hold()
    e = torch.tpu.Event(enable_timing=True)
    e.record()
    e.record()  # again while the first stamp is still queued
    del e  # and dropped unreached (a collective's work drops its events so)
    probe = torch.tpu.Event()
    probe.record()
    assert not probe.query()  # still held: neither call waited for the queue
    _C._debug_gate_open()
    probe.synchronize()
    a, b = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    a.record()
    torch.ones(1 << 16, device="tpu").sum()
    b.record()
    b.synchronize()
    assert a.elapsed_time(b) >= 0.0  # stamps still land where the events read them


def test_a_read_on_another_stream_waits_for_the_write(gates):
    s = torch.tpu.Stream()
    x = torch.zeros(4096, device="tpu")
    torch.tpu.synchronize()
    hold()
    x.fill_(7.0)  # default stream, behind the gate
    with torch.tpu.stream(s):
        y = x * 2  # no wait_stream: vtpu orders it by x
        e = torch.tpu.Event()
        e.record()
    assert not e.query()
    _C._debug_gate_open()
    assert torch.equal(y.cpu(), torch.full((4096,), 14.0))


def test_a_write_waits_for_a_read_on_another_stream(gates):
    s = torch.tpu.Stream()
    x = torch.full((4096,), 3.0, device="tpu")
    torch.tpu.synchronize()
    hold(s)
    with torch.tpu.stream(s):
        y = x + 1  # held
    x.fill_(9.0)  # must not overwrite x before s reads it
    e = torch.tpu.Event()
    e.record()
    assert not e.query()
    _C._debug_gate_open()
    assert torch.equal(y.cpu(), torch.full((4096,), 4.0))
    assert torch.equal(x.cpu(), torch.full((4096,), 9.0))


@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse"])
def test_memory_freed_while_another_stream_uses_it(gates, mode):
    """The case CUDA leaves to record_stream: a tensor made on one stream,
    read on another, then freed. In Strict the allocator passes over its
    block while the other stream uses it (the C tests cover the block handed
    out anyway when memory is short, its new owner waiting); in DeferAndFuse
    the read is still recorded when the block is freed, and the flush orders
    the new owner's write after it."""
    s = torch.tpu.Stream()
    x = torch.full((1 << 16,), 5.0, device="tpu")
    torch.tpu.synchronize()
    ptr = x.data_ptr()
    hold(s)
    with vtpu.eager_mode(mode):
        with torch.tpu.stream(s):
            y = x.sum()
        del x
        z = torch.empty(1 << 16, device="tpu")
        if mode == "strict":
            assert z.data_ptr() != ptr  # not the block s still reads
        z.fill_(-1.0)
        _C._debug_gate_open()
        assert y.item() == 5.0 * (1 << 16)
        assert torch.equal(z.cpu(), torch.full((1 << 16,), -1.0))


def test_events_and_wait_stream_order_streams(gates):
    s = torch.tpu.Stream()
    hold(s)
    with torch.tpu.stream(s):
        e = torch.tpu.Event()
        e.record()
    torch.tpu.current_stream().wait_event(e)
    after = torch.tpu.Event()
    after.record()
    assert not after.query()
    _C._debug_gate_open()
    after.synchronize()
    assert e.query()
    # wait_stream, both ways
    t = torch.ones(100, device="tpu")
    s.wait_stream(torch.tpu.current_stream())
    with torch.tpu.stream(s):
        t.mul_(3)
    torch.tpu.current_stream().wait_stream(s)
    assert torch.equal(t.cpu(), torch.full((100,), 3.0))


def test_errors_on_a_side_stream(strict):  # Debug raises at the op instead
    s = torch.tpu.Stream()
    with torch.tpu.stream(s):
        bad = torch.gather(torch.randn(10, device="tpu"), 0, torch.tensor([1, 12], device="tpu"))
        r = bad + 1
    out = r * 2  # the default stream reads what failed on s
    with pytest.raises(RuntimeError, match="out of bounds"):
        out.cpu()
    with torch.tpu.stream(s):
        torch.gather(torch.randn(10, device="tpu"), 0, torch.tensor([1, 12], device="tpu"))
    with pytest.raises(RuntimeError, match="out of bounds"):
        s.synchronize()
    s.synchronize()  # raised once
    with torch.tpu.stream(s):
        torch.gather(torch.randn(10, device="tpu"), 0, torch.tensor([1, 12], device="tpu"))
    with pytest.raises(RuntimeError, match="out of bounds"):
        torch.tpu.synchronize()  # the device: every stream
    torch.tpu.synchronize()


def test_trace_shows_each_queue():
    s = torch.tpu.Stream()
    x = torch.randn(1 << 16, device="tpu")
    with vtpu.trace() as t:
        y = x * 2
        with torch.tpu.stream(s):
            z = x + 1
    queues = {e["name"]: e["queue"] for e in t.events}
    assert queues["aten::mul"] == 0
    assert queues["aten::add"] == _C._stream_queue(s.stream_id) != 0
    tracks = [e for e in t.chrome()["traceEvents"] if e.get("ph") == "M"]
    assert {e["args"]["name"] for e in tracks} == {"tpu:0", f"tpu:0 stream queue {queues['aten::add']}"}
    assert torch.equal(y.cpu(), x.cpu() * 2) and torch.equal(z.cpu(), x.cpu() + 1)


def test_defer_and_fuse_runs_a_record_on_its_stream():
    s = torch.tpu.Stream()
    x = torch.randn(1 << 16, device="tpu")
    want_a = (x.cpu() * 2 + 1).relu()
    want_b = (x.cpu() - 3) * 4
    torch.tpu.synchronize()
    with vtpu.trace() as t, vtpu.eager_mode("defer_and_fuse"):
        a = (x * 2 + 1).relu()  # recorded on the default stream
        with torch.tpu.stream(s):
            b = (x - 3) * 4  # recording here first flushes a's record, on queue 0
    groups = t.groups()
    assert [g["queue"] for g in groups] == [0, _C._stream_queue(s.stream_id)]
    assert torch.equal(a.cpu(), want_a) and torch.equal(b.cpu(), want_b)
