"""CPU PyTorch's rules where PyTorch's own test_ops.py found "tpu" differing:
out= dtypes and devices, empty indices, ops CPU computes for complex inputs
(natively or through the counted fallback, never NotImplementedError), and
composite ops that must not reach a CPU-only kernel. CPU is the reference
for every value, exception type and message."""

import warnings

import pytest
import torch
import torch.nn.functional as F

import vtpu


def raises_as_cpu(f):
    """f(device) raises on "tpu" what it raises on CPU (type and message)."""
    with pytest.raises(Exception) as want:
        f("cpu")
    with pytest.raises(want.type) as got:
        f("tpu")
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize("name", ["tril", "triu", "softmax", "log_softmax"])
@pytest.mark.parametrize("shape", [(4, 4), (5, 0, 0)])
def test_out_dtype_must_match_for_structured_ops(name, shape):
    def f(d):
        x = torch.ones(shape, device=d)
        out = torch.empty(shape, dtype=torch.long, device=d)
        if name in ("tril", "triu"):
            return getattr(torch, name)(x, out=out)
        return getattr(torch, name)(x, -1, out=out)

    raises_as_cpu(f)


def test_nansum_into_an_integer_out_is_unimplemented_as_on_cpu():
    for d in ("cpu", "tpu"):  # CPU names its kernel ("nansum_cpu"), tpu the op
        with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
            torch.nansum(torch.ones(3, device=d), out=torch.empty((), dtype=torch.long, device=d))
    x = torch.tensor([1, 2, 3])
    assert torch.equal(torch.nansum(x.to("tpu")).cpu(), torch.nansum(x))  # integers: a plain sum


def test_out_on_another_device_is_refused_for_fallback_ops():
    x, idx, src = torch.randn(5, 3), torch.tensor([0, 2]), torch.randn(2, 3)
    with pytest.warns(UserWarning), pytest.raises(RuntimeError, match="same device"):
        torch.index_reduce(x.to("tpu"), 0, idx.to("tpu"), src.to("tpu"), "amax", out=torch.empty(5, 3))
    out = torch.empty(5, 3, device="tpu")
    with pytest.warns(UserWarning):
        torch.index_reduce(x.to("tpu"), 0, idx.to("tpu"), src.to("tpu"), "amax", out=out)
    assert torch.equal(out.cpu(), torch.index_reduce(x, 0, idx, src, "amax"))
    # indexing still takes host index tensors, as on CUDA
    assert torch.equal(x.to("tpu")[idx].cpu(), x[idx])


def test_gather_with_an_empty_index_of_another_rank():
    x = torch.randn(5)
    idx = torch.empty(2, 0, dtype=torch.long)
    got = torch.gather(x.to("tpu"), 0, idx.to("tpu"))
    assert got.shape == torch.gather(x, 0, idx).shape == (2, 0)
    raises_as_cpu(lambda d: torch.gather(torch.randn(5, device=d), 0, torch.zeros(2, 1, dtype=torch.long, device=d)))


def test_complex_inputs_compute_as_on_cpu():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(6, dtype=torch.cfloat, generator=g)
    t = x.to("tpu")
    cases = {
        "lerp": lambda v: torch.lerp(v, v * 2, 0.3),
        "lerp, complex weight": lambda v: torch.lerp(v, v * 2, 0.5 + 1j),
        "lerp, tensor weight": lambda v: torch.lerp(v, v * 2, v),
        "silu": lambda v: F.silu(v),
        "linspace": lambda v: torch.linspace(0, 1 + 1j, 5, device=v.device),
        "conj_physical": lambda v: torch.conj_physical(v),
        "conj_physical of a conj view": lambda v: torch.conj_physical(v.conj()),
    }
    for name, f in cases.items():
        torch.testing.assert_close(f(t).cpu(), f(x), rtol=1e-6, atol=1e-6, msg=lambda m, name=name: f"{name}: {m}")
    c = t.clone()
    c.conj_physical_()
    assert torch.equal(c.cpu(), x.conj_physical())
    r = torch.randn(4)
    assert torch.equal(torch.conj_physical(r.to("tpu")).cpu(), r)


def test_conj_physical_is_native():
    x = torch.randn(6, dtype=torch.cdouble)
    vtpu.reset_fallback_report()
    with vtpu.cpu_fallback(False):
        out = torch.empty(6, dtype=torch.cdouble, device="tpu")
        torch.conj_physical(x.to("tpu"), out=out)
    assert torch.equal(out.cpu(), x.conj()) and vtpu.fallback_report() == {}


def test_complex_rms_norm_forward_and_backward():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 4, dtype=torch.cfloat, generator=g, requires_grad=True)
    w = torch.randn(4, dtype=torch.cfloat, generator=g)
    xt = x.detach().to("tpu").requires_grad_()
    y = F.rms_norm(x, (4,), w)
    yt = F.rms_norm(xt, (4,), w.to("tpu"))
    y.abs().sum().backward()
    yt.abs().sum().backward()
    torch.testing.assert_close(yt.cpu(), y, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(xt.grad.cpu(), x.grad, rtol=1e-4, atol=1e-5)


def test_addr_out():
    # the composite addr.out (outer product and scaled sum), never CPU's kernel stub
    g = torch.Generator().manual_seed(4)
    a, v1, v2 = torch.randn(5, 10, generator=g), torch.randn(5, generator=g), torch.randn(10, generator=g)
    with torch.tpu.precision("highest"):
        out = torch.empty(5, 10, device="tpu")
        torch.addr(a.to("tpu"), v1.to("tpu"), v2.to("tpu"), beta=0.6, alpha=0.2, out=out)
        got = torch.addr(a.to("tpu"), v1.to("tpu"), v2.to("tpu"))
    torch.testing.assert_close(out.cpu(), torch.addr(a, v1, v2, beta=0.6, alpha=0.2), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got.cpu(), torch.addr(a, v1, v2), rtol=1e-5, atol=1e-5)


def test_strided_out_gets_the_right_values():
    # a strided out= (every other element of a buffer), for an op that falls back and one that is native
    g = torch.Generator().manual_seed(6)
    x = torch.randn(2, 3, 3, 4, 4, generator=g)
    out = torch.full((2, 3, 1, 2, 2, 2), 7.0, device="tpu")[..., 0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fallback's warning
        torch._C._nn.avg_pool3d(x.to("tpu"), (2, 2, 2), out=out)
    assert torch.equal(out.cpu(), F.avg_pool3d(x, 2))
    buf = torch.full((4, 6), 7.0, device="tpu")
    torch.exp(x.view(-1)[:12].view(4, 3).to("tpu"), out=buf[:, ::2])
    assert torch.equal(buf[:, ::2].cpu(), x.view(-1)[:12].view(4, 3).exp())
    assert torch.equal(buf[:, 1::2].cpu(), torch.full((4, 3), 7.0))  # the gaps are untouched
