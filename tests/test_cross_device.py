"""Work that spans devices, or that names a tensor of another device. A
copy from tpu:0 to tpu:1 reads the source as it was when the copy was
issued, whatever tpu:0 does next; an op given a tensor of another device,
an out= included, raises as CPU and CUDA do and writes nothing. The suite
runs with two devices (conftest)."""

import pytest
import torch

from vtpu import _C

SAME_DEVICE = "Expected all tensors to be on the same device, but found at least two devices"


@pytest.fixture
def hold_device1(strict):
    """Holds tpu:1's queue (at most 30 s) so work queued there stays pending."""
    _C._debug_gate_enqueue(1, 30_000)
    yield _C._debug_gate_open
    _C._debug_gate_open()
    torch.tpu.synchronize(1)


def test_copy_reads_source_before_later_writes(hold_device1):
    src = torch.full((1 << 16,), 3.0, device="tpu:0")
    dst = torch.empty(1 << 16, device="tpu:1")
    dst.copy_(src)  # pending: tpu:1 is held
    src.fill_(-1.0)  # queued on tpu:0 after the copy
    hold_device1()
    assert torch.equal(dst.cpu(), torch.full((1 << 16,), 3.0))
    assert torch.equal(src.cpu(), torch.full((1 << 16,), -1.0))


def test_copy_reads_source_before_its_block_is_reused(hold_device1):
    t = torch.full((1 << 16,), 5.0, device="tpu:0")
    d = (t * 1.0).to("tpu:1")  # the product is freed once the copy is queued
    del t
    reused = [torch.full((1 << 16,), -7.0, device="tpu:0") for _ in range(4)]
    hold_device1()
    assert torch.equal(d.cpu(), torch.full((1 << 16,), 5.0))
    assert all(torch.equal(r.cpu(), torch.full((1 << 16,), -7.0)) for r in reused)


def test_copy_then_source_write_in_every_mode(mode):
    src = torch.full((1 << 16,), 3.0, device="tpu:0")
    dst = torch.empty(1 << 16, device="tpu:1")
    dst.copy_(src)
    src.fill_(-1.0)
    assert torch.equal(dst.cpu(), torch.full((1 << 16,), 3.0))


def test_model_moves_between_devices(mode):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    ref = {k: v.clone() for k, v in m.state_dict().items()}
    m = m.to("tpu:0").to("tpu:1")
    for _ in range(3):  # and back and forth, with work queued between moves
        m = m.to("tpu:0")
        m(torch.randn(4, 64, device="tpu:0"))
        m = m.to("tpu:1")
    for k, v in m.state_dict().items():
        assert v.device == torch.device("tpu:1")
        assert torch.equal(v.cpu(), ref[k]), k


def test_copy_back_and_forth_keeps_values(mode):
    x = torch.randn(1000)
    a = x.to("tpu:0")
    for _ in range(20):
        b = a.to("tpu:1") * 1.0
        a = b.to("tpu:0") + 0.0
    assert torch.equal(a.cpu(), x)


# ------------------------------------------------------------------ out= and inputs of another device

OUT_ON_CPU = {
    "acos": lambda x, o: torch.acos(x, out=o),
    "add": lambda x, o: torch.add(x, x, out=o),
    "exp": lambda x, o: torch.exp(x, out=o),
    "triu": lambda x, o: torch.triu(x.view(4, 4), out=o),
    "softmax": lambda x, o: torch.softmax(x, 0, out=o),
    "mv": lambda x, o: torch.mv(x.view(4, 4), x[:4], out=o),
    "addr": lambda x, o: torch.addr(x.view(4, 4), x[:4], x[:4], out=o),
    "scatter": lambda x, o: torch.scatter(x, 0, torch.zeros(16, dtype=torch.long, device=x.device), x, out=o),
    "take": lambda x, o: torch.take(x, torch.arange(4, device=x.device), out=o),
    "masked_select": lambda x, o: torch.masked_select(x, x > 0, out=o),
    "var": lambda x, o: torch.var(x, 0, out=o),
    "amax": lambda x, o: torch.amax(x, 0, out=o),
    "sum": lambda x, o: torch.sum(x, 0, out=o),
    "searchsorted": lambda x, o: torch.searchsorted(x.sort()[0], x, out=o.long()),
    "cat": lambda x, o: torch.cat([x, x], out=o),
    "mm": lambda x, o: torch.mm(x.view(4, 4), x.view(4, 4), out=o),
    "index_select": lambda x, o: torch.index_select(x, 0, torch.arange(3, device=x.device), out=o),
    "where": lambda x, o: torch.where(x > 0, x, x, out=o),
    "clamp": lambda x, o: torch.clamp(x, 0, 1, out=o),
    "cumsum": lambda x, o: torch.cumsum(x, 0, out=o),
}


@pytest.mark.parametrize("op", sorted(OUT_ON_CPU))
@pytest.mark.parametrize("out_shape", [(), (16,)], ids=["0-dim out", "out"])
def test_out_on_another_device_raises(op, out_shape, mode):
    x = torch.randn(16, device="tpu")
    for out in (torch.empty(out_shape), torch.empty(out_shape, device="tpu:1")):
        before = out.clone()
        with pytest.raises(RuntimeError, match=SAME_DEVICE):
            OUT_ON_CPU[op](x, out)
        assert out.shape == before.shape and out.device == before.device
    torch.tpu.synchronize()


def test_out_on_cpu_many_times_leaves_process_healthy():
    x = torch.rand((), device="tpu")
    for _ in range(20_000):
        with pytest.raises(RuntimeError, match=SAME_DEVICE):
            torch.acos(x, out=torch.empty(()))
    assert torch.acos(x).item() == pytest.approx(torch.acos(x.cpu()).item())


def test_inputs_on_two_devices_raise(mode):
    a = torch.ones(4, device="tpu:0")
    b = torch.ones(4, device="tpu:1")
    with pytest.raises(RuntimeError, match=SAME_DEVICE + r", tpu:0 and tpu:1"):
        a + b
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        a.add_(b)
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torch.mm(a.view(2, 2), b.view(2, 2))
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torch.index_select(a, 0, torch.tensor([0], device="tpu:1"))
    with pytest.raises(RuntimeError, match=SAME_DEVICE + r", tpu:0 and cpu"):
        a + torch.ones(4)  # a CPU tensor with elements is not a scalar
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torch.index_select(a, 0, torch.tensor([0, 1]))  # as CUDA: the index must be on the device
    # CPU 0-dim tensors are scalars, as on CUDA; host indices for advanced indexing too
    assert torch.equal((a + torch.tensor(2.0)).cpu(), torch.full((4,), 3.0))
    assert torch.equal(a[torch.tensor([0, 2])].cpu(), torch.ones(2))
    assert torch.equal(a.cpu(), torch.ones(4)) and torch.equal(b.cpu(), torch.ones(4))


def test_fallback_ops_check_devices_too(mode):
    a = torch.randn(8, device="tpu:0")
    b = torch.randn(8, device="tpu:1")
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torch.polygamma(1, a, out=torch.empty(8))  # no native kernel: the CPU fallback
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torch.igamma(a.abs(), b.abs())
