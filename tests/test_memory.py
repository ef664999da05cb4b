"""HBM: capacity limit with torch.OutOfMemoryError, stats back at baseline
after frees, empty_cache keeps live tensors valid."""

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
    del tmp
    reserved = torch.tpu.memory_reserved()
    torch.tpu.empty_cache()
    assert torch.tpu.memory_reserved() < reserved
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
