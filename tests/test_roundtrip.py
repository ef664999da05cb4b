"""Tensors on "tpu" round-trip to CPU bit-exactly and print like CPU."""

import pytest
import torch

import vtpu

from conftest import DTYPES, bits, make


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_roundtrip_bit_exact(dtype):
    x = make((7, 33), dtype)
    if dtype.is_floating_point:
        x[0, :4] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0], dtype=torch.float64).to(dtype)
    y = x.to("tpu")
    assert y.device.type == "tpu" and y.dtype == dtype and y.shape == x.shape
    assert torch.equal(bits(y.cpu()), bits(x))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    "view",
    [
        lambda t: t.t(),
        lambda t: t[1:5, ::3],
        lambda t: t[:, 2],
        lambda t: t.unsqueeze(0).expand(3, -1, -1),
        lambda t: t[0:0],
        lambda t: t[2, 3],
        lambda t: t.reshape(-1)[5:40:7],
    ],
    ids=["transpose", "slice_step", "column", "expand", "empty", "scalar", "flat_step"],
)
def test_views_roundtrip(dtype, view):
    x = make((6, 9), dtype, seed=1)
    y = x.to("tpu")
    v_cpu, v_tpu = view(x), view(y)
    assert v_tpu.shape == v_cpu.shape and v_tpu.stride() == v_cpu.stride()
    assert torch.equal(bits(v_tpu.cpu()), bits(v_cpu))
    # non-contiguous CPU source into the device, then back
    assert torch.equal(bits(v_cpu.to("tpu").cpu()), bits(v_cpu))


@pytest.mark.parametrize("src", DTYPES, ids=str)
def test_casts_on_device_match_cpu(src):
    x = make((5, 11), src, seed=2, low=-60, high=60)
    y = x.to("tpu")
    for dst in DTYPES:
        want = x.to(dst)
        got = y.to(dst).cpu()
        assert got.dtype == dst
        assert torch.equal(bits(got), bits(want)), (src, dst)


def test_zero_size_and_zero_dim():
    for shape in [(0,), (3, 0, 2), ()]:
        x = make(shape, torch.float32)
        y = x.to("tpu")
        assert y.shape == x.shape
        assert torch.equal(y.cpu(), x)
    z = torch.tensor(3.5, device="tpu")
    assert z.dim() == 0 and z.item() == 3.5


def test_copy_between_tpu_tensors_and_in_place_views():
    x = make((4, 6), torch.float32).to("tpu")
    y = torch.empty(6, 4, device="tpu")
    y.copy_(x.t())
    assert torch.equal(y.cpu(), x.cpu().t())
    y[1:3].fill_(7.0)
    ref = x.cpu().t().clone()
    ref[1:3] = 7.0
    assert torch.equal(y.cpu(), ref)


def formatted(t):
    """The element text torch prints (the device suffix changes line wrapping, so compare the body)."""
    return torch._tensor_str._tensor_str(t, len("tensor("))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_printing_matches_cpu(dtype):
    x = make((3, 4), dtype, seed=3)
    y = x.to("tpu")
    assert formatted(y) == formatted(x)
    text = repr(y)
    assert text.startswith("tensor(") and "device='tpu:0'" in text
    assert (f"dtype={dtype}" in text) == (f"dtype={dtype}" in repr(x))


def test_printing_special_values_and_large():
    x = torch.tensor([1.5, float("nan"), float("inf"), -0.0, 1e-8, 12345.678])
    assert formatted(x.to("tpu")) == formatted(x)
    big = torch.arange(5000, dtype=torch.float32).reshape(50, 100) / 7
    assert formatted(big.to("tpu")) == formatted(big)  # summarised with "..."
    assert str(big.to("tpu")).endswith("device='tpu:0')")


def test_conjugate_and_negative_views_copy_and_stay_views():
    """Lazy conj/neg views copy with their bits resolved (this used to recurse
    without end through PyTorch's conjugate fallback); complex<->real views
    alias the same memory."""
    import warnings

    x = torch.randn(6, dtype=torch.complex64)
    t = x.to("tpu")
    assert torch.equal(t.conj().cpu(), x.conj())
    assert torch.equal(t.conj().clone().cpu(), x.conj().resolve_conj())
    y = torch.empty(6, dtype=torch.complex64, device="tpu")
    y.copy_(t.conj())
    assert torch.equal(y.cpu(), x.conj().resolve_conj())
    im = t.conj().imag  # a negative view of real data
    assert im.is_neg()
    assert torch.equal(im.clone().cpu(), -x.imag)
    assert torch.equal((im + 1).cpu(), 1 - x.imag)
    r = torch.randn(5)
    assert torch.equal(r.to("tpu")._neg_view().clone().cpu(), -r)
    with vtpu.cpu_fallback(False):
        v = torch.view_as_real(t)
        assert v.data_ptr() == t.data_ptr() and torch.equal(v.cpu(), torch.view_as_real(x))
        v[0, 0] = 5.0
        assert torch.view_as_complex(v).cpu()[0].real == 5.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fft runs through the CPU fallback
        f = torch.fft.fft(t)
        torch.testing.assert_close(f.cpu(), torch.fft.fft(t.cpu()))
        torch.testing.assert_close(torch.fft.ifft(f).cpu(), t.cpu(), atol=1e-6, rtol=1e-6)
