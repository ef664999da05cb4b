"""HBM: capacity limit with torch.OutOfMemoryError, stats back at baseline
after frees, empty_cache keeps live tensors valid; pinned host memory and
asynchronous copies from it."""

import gc

import pytest
import torch


def test_oom_names_chip_request_and_free():
    total = torch.tpu.get_device_properties().total_memory
    with pytest.raises(torch.OutOfMemoryError) as err:
        torch.empty(total + (1 << 30), dtype=torch.uint8, device="tpu")
    msg = str(err.value)
    assert "v6e" in msg and "Tried to allocate" in msg and "free" in msg
    x = torch.ones(4, device="tpu")  # still usable
    assert x.sum().item() == 4.0


def test_memory_stats_return_to_baseline():
    torch.tpu.synchronize()
    gc.collect()
    base = torch.tpu.memory_allocated()
    xs = [torch.empty(1 << 20, device="tpu") for _ in range(5)]
    assert torch.tpu.memory_allocated() >= base + 5 * 4 * (1 << 20)
    assert torch.tpu.max_memory_allocated() >= torch.tpu.memory_allocated()
    stats = torch.tpu.memory_stats()
    assert stats["allocated_bytes.all.current"] == torch.tpu.memory_allocated()
    del xs
    gc.collect()
    assert torch.tpu.memory_allocated() == base
    assert torch.accelerator.memory_allocated() == base


def test_empty_cache_keeps_live_tensors():
    keep = torch.arange(1000, dtype=torch.float32, device="tpu")
    tmp = torch.empty(1 << 22, device="tpu")
    reserved = torch.tpu.memory_reserved()
    del tmp  # cached in Strict mode; Debug mode returns its checked blocks at once
    torch.tpu.empty_cache()
    assert torch.tpu.memory_reserved() <= reserved - 4 * (1 << 22)
    assert torch.equal(keep.cpu(), torch.arange(1000, dtype=torch.float32))
    assert torch.equal((keep + 1).cpu(), torch.arange(1000, dtype=torch.float32) + 1)


def test_mem_get_info():
    free, total = torch.tpu.mem_get_info()
    assert 0 < free <= total
    assert total == torch.tpu.get_device_properties().total_memory


def test_negative_sizes_and_bad_dtype_like_cpu():
    with pytest.raises(RuntimeError, match="negative dimension"):
        torch.empty(-1, device="tpu")
    with pytest.raises(TypeError):
        torch.empty(3, dtype="float32", device="tpu")


def test_pinned_host_memory():
    x = torch.randn(10)
    assert not x.is_pinned()
    p = x.pin_memory()
    assert p.is_pinned() and p.device.type == "cpu" and torch.equal(p, x)
    assert p[3:].is_pinned() and p.untyped_storage()[4:].is_pinned()  # views of a pinned block
    assert torch.empty(5, pin_memory=True).is_pinned()
    assert torch.zeros(3, 4, pin_memory=True).is_pinned()
    s = torch.arange(6.0).untyped_storage().pin_memory("tpu")
    assert s.is_pinned() and torch.equal(torch.empty(0).set_(s), torch.arange(6.0))
    with pytest.raises(RuntimeError):
        torch.ones(2, device="tpu").pin_memory()  # only CPU tensors can be pinned, as on CUDA


def test_non_blocking_copy_from_pinned_memory_is_asynchronous(strict):
    from vtpu import _C

    want = torch.randn(1 << 16)
    p = want.clone().pin_memory()
    _C._debug_gate_enqueue(0, 30_000)  # the queue is held: the copy cannot run yet
    try:
        y = p.to("tpu", non_blocking=True)  # returns without waiting for the queue
        done = torch.tpu.Event()
        done.record()
        assert not done.query()  # the copy is queued behind the gate, not yet run
        del p  # the pinned buffer is kept until the copy has read it
        gc.collect()
        filler = [torch.ones(1 << 16).pin_memory() for _ in range(4)]  # may reuse freed memory
        assert all(f.is_pinned() for f in filler)
    finally:
        _C._debug_gate_open()
    assert torch.equal(y.cpu(), want)
    # blocking copies and copies from pageable memory are unaffected
    q = want.pin_memory()
    assert torch.equal(q.to("tpu").cpu(), want)
    assert torch.equal(want.to("tpu", non_blocking=True).cpu(), want)
