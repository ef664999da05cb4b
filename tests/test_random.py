"""Random ops on tpu's counter-based Philox generator: they run natively,
draws are reproducible from the seed (in Strict and Debug mode, whatever the
layout), consecutive calls differ, the RNG state round-trips, and the
numbers are statistically sane (bounds from the sample size)."""

import math

import pytest
import torch
import torch.nn.functional as F

import vtpu

FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]


def native(fn):
    with vtpu.cpu_fallback(False):
        out = fn()
    torch.tpu.synchronize()
    return out


def draws():
    """One of every random op, from the current seed."""
    x = torch.randn(1000, device="tpu")
    p = torch.rand(1000, device="tpu")
    return [
        torch.rand(1000, device="tpu"),
        torch.randn(1000, device="tpu"),
        torch.randint(-3, 9, (1000,), device="tpu"),
        torch.randint(5, (1000,), device="tpu"),
        torch.empty(1000, device="tpu").random_(),
        torch.empty(1000, device="tpu").bernoulli_(0.3),
        torch.bernoulli(p),
        torch.empty(1000, device="tpu").bernoulli_(p),
        F.dropout(x, 0.1, training=True),
        torch.multinomial(p, 50, replacement=True),
        torch.multinomial(p, 50, replacement=False),
        torch.randperm(1000, device="tpu"),
        torch.normal(x, 2.0),
        torch.normal(1.0, p),
        torch.normal(x, p),
        torch.empty(1000, device="tpu").exponential_(2.0),
        torch.rand_like(x),
        torch.randn_like(x),
        torch.empty(1000, device="tpu").normal_(1, 3),
        torch.empty(1000, device="tpu").uniform_(-2, 2),
    ]


def test_all_native_and_reproducible_strict_and_debug():
    vtpu.reset_fallback_report()
    torch.manual_seed(123)
    a = [t.cpu() for t in native(draws)]
    torch.tpu.manual_seed(123)
    with vtpu.eager_mode("debug"):
        b = [t.cpu() for t in native(draws)]
    for x, y in zip(a, b):
        assert torch.equal(x, y)
    c = [t.cpu() for t in native(draws)]  # generator advanced: fresh numbers
    assert sum(not torch.equal(x, y) for x, y in zip(a, c)) >= len(a) - 1


def test_consecutive_calls_differ_and_state_round_trips():
    torch.manual_seed(7)
    s = torch.tpu.get_rng_state()
    a = native(lambda: F.dropout(torch.ones(4096, device="tpu"), 0.5, True)).cpu()
    b = native(lambda: F.dropout(torch.ones(4096, device="tpu"), 0.5, True)).cpu()
    assert not torch.equal(a, b)
    torch.tpu.set_rng_state(s)
    assert torch.equal(native(lambda: F.dropout(torch.ones(4096, device="tpu"), 0.5, True)).cpu(), a)
    torch.tpu.set_rng_state(s)
    r1 = native(lambda: torch.randperm(500, device="tpu")).cpu()
    torch.tpu.set_rng_state(s)
    assert torch.equal(native(lambda: torch.randperm(500, device="tpu")).cpu(), r1)


def test_layout_independent():
    torch.manual_seed(3)
    x = torch.ones(64, 96, device="tpu")
    m1 = native(lambda: torch.ops.aten.native_dropout(x, 0.3, True)[1]).cpu()
    torch.manual_seed(3)
    xt = torch.ones(96, 64, device="tpu").t()
    m2 = native(lambda: torch.ops.aten.native_dropout(xt, 0.3, True)[1]).cpu()
    assert torch.equal(m1, m2)
    torch.manual_seed(3)
    a = native(lambda: torch.empty(64, 96, device="tpu").bernoulli_(0.4)).cpu()
    torch.manual_seed(3)
    b = native(lambda: torch.empty(96, 64, device="tpu").t().bernoulli_(0.4)).cpu()
    assert torch.equal(a, b)


def test_new_samples_are_laid_out_as_on_cpu():
    # dropout's result follows its input (times a contiguous noise, as CPU
    # computes it); a bernoulli sample is contiguous whatever p's layout.
    # A view() or is_contiguous() that works on CPU works here.
    def inputs(dev):
        torch.manual_seed(0)
        return (torch.rand(1, 5, device=dev).t(), torch.rand(6, 5, device=dev).t(),
                torch.rand(2, 3, 4, 5, device=dev).contiguous(memory_format=torch.channels_last))

    ops = {"dropout": lambda v: F.dropout(v, 0.3), "bernoulli": torch.bernoulli,
           "bernoulli p": lambda v: torch.ops.aten.bernoulli.p(v, 0.5)}
    for name, op in ops.items():
        for v, c in zip(inputs("tpu"), inputs("cpu")):
            assert native(lambda: op(v)).stride() == op(c).stride(), (name, tuple(c.shape), c.stride())


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_dropout_scale_rate_and_grad(dtype):
    n, p = 200_000, 0.1
    torch.manual_seed(0)
    x = torch.full((n,), 2.0, dtype=dtype, device="tpu", requires_grad=True)
    with vtpu.cpu_fallback(False):
        y = F.dropout(x, p, training=True)
        y.backward(torch.ones_like(y))
    yc = y.detach().float().cpu()
    kept = (yc != 0).double().mean().item()
    assert abs(kept - (1 - p)) < 6 * math.sqrt(p * (1 - p) / n)
    want = torch.tensor(2.0 / (1 - p), dtype=dtype).float()
    assert torch.all((yc == 0) | (yc == want))
    g = x.grad.float().cpu()
    assert torch.equal(g != 0, yc != 0)
    torch.testing.assert_close(g[g != 0], torch.full_like(g[g != 0], 1 / (1 - p)).to(dtype).float(), rtol=1e-2, atol=0)
    # eval mode and p = 0 / 1 edges
    with vtpu.cpu_fallback(False):
        assert torch.equal(F.dropout(x, p, training=False).cpu(), x.detach().cpu())
        assert torch.all(F.dropout(x, 1.0, training=True).cpu() == 0)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_distribution_moments(dtype):
    n = 100_000
    torch.manual_seed(11)
    tol = lambda sd: 6 * sd / math.sqrt(n) + (0.02 if dtype in (torch.bfloat16, torch.float16) else 0)
    u = native(lambda: torch.rand(n, dtype=dtype, device="tpu")).double().cpu()
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < tol(math.sqrt(1 / 12))
    z = native(lambda: torch.randn(n, dtype=dtype, device="tpu")).double().cpu()
    assert abs(z.mean()) < tol(1) and abs(z.var() - 1) < 0.05
    e = native(lambda: torch.empty(n, dtype=dtype, device="tpu").exponential_(4.0)).double().cpu()
    assert e.min() >= 0 and abs(e.mean() - 0.25) < tol(0.25)
    m = torch.linspace(-3, 3, n, dtype=dtype).to("tpu")
    v = native(lambda: torch.normal(m, 0.5)).double().cpu() - m.double().cpu()
    assert abs(v.mean()) < tol(0.5) and abs(v.std() - 0.5) < 0.02
    s = torch.full((n,), 2.0, dtype=dtype, device="tpu")
    w = native(lambda: torch.normal(3.0, s)).double().cpu()
    assert abs(w.mean() - 3) < tol(2) and abs(w.std() - 2) < 0.05
    b = native(lambda: torch.bernoulli(torch.full((n,), 0.25, dtype=dtype, device="tpu"))).double().cpu()
    assert set(b.unique().tolist()) <= {0.0, 1.0} and abs(b.mean() - 0.25) < 6 * math.sqrt(0.1875 / n)


def test_integers_and_permutations():
    torch.manual_seed(5)
    n = 60_000
    r = native(lambda: torch.randint(-4, 6, (n,), device="tpu")).cpu()
    assert r.dtype == torch.int64 and r.min() == -4 and r.max() == 5
    counts = torch.bincount(r + 4, minlength=10).double()
    assert torch.all((counts - n / 10).abs() < 6 * math.sqrt(n * 0.09))
    for dt in [torch.uint8, torch.int32, torch.float32, torch.bool]:
        t = native(lambda: torch.empty(5000, dtype=dt, device="tpu").random_()).cpu()
        if dt == torch.bool:
            assert set(t.tolist()) == {False, True}
        else:
            assert t.min() >= 0
    assert native(lambda: torch.empty(5000, device="tpu").random_(3, 7)).cpu().unique().tolist() == [3, 4, 5, 6]
    for k in [0, 1, 2, 31, 1000]:
        p = native(lambda: torch.randperm(k, device="tpu")).cpu()
        assert torch.equal(p.sort().values, torch.arange(k))
    p32 = native(lambda: torch.randperm(100, dtype=torch.int32, device="tpu")).cpu()
    assert p32.dtype == torch.int32 and torch.equal(p32.sort().values, torch.arange(100, dtype=torch.int32))


def test_multinomial_frequencies_and_errors():
    torch.manual_seed(9)
    w = torch.tensor([[1.0, 2.0, 0.0, 5.0], [0.25, 0.25, 0.25, 0.25]], device="tpu")
    n = 20_000
    s = native(lambda: torch.multinomial(w, n, replacement=True)).cpu()
    for r in range(2):
        pr = w[r].cpu() / w[r].cpu().sum()
        c = torch.bincount(s[r], minlength=4).double()
        assert torch.all((c - n * pr).abs() <= 6 * torch.sqrt(n * pr * (1 - pr)) + 0.5)
    s2 = native(lambda: torch.multinomial(w, 3)).cpu()
    for r in range(2):
        assert len(set(s2[r].tolist())) == 3
    assert 2 not in s2[0].tolist()
    first = torch.zeros(4)
    for _ in range(400):
        first[torch.multinomial(w[0], 1).item()] += 1
    assert first[3] > first[1] > first[0] and first[2] == 0
    with pytest.raises(RuntimeError):
        torch.multinomial(w, 5)
    with pytest.raises(RuntimeError):
        torch.multinomial(w, 4)  # row 0 has only 3 non-zero weights
        torch.tpu.synchronize()
    with pytest.raises(RuntimeError):
        torch.multinomial(torch.tensor([1.0, -1.0], device="tpu"), 1)
        torch.tpu.synchronize()
    torch.tpu.synchronize()


def test_errors_match_cpu():
    for dev in ["cpu", "tpu"]:
        x = torch.empty(10, device=dev)
        with pytest.raises(RuntimeError):
            x.random_(5, 2)
        with pytest.raises(RuntimeError):
            x.bernoulli_(1.5)
        with pytest.raises(RuntimeError):
            x.exponential_(-1)
        with pytest.raises(RuntimeError):
            torch.normal(x, -1.0)
