"""Matmuls on "tpu" run with TPU numerics: fp32 operands as bf16 passes with
fp32 accumulation (DEFAULT 1, HIGH 3, HIGHEST 6). References: fp64 products
and an algorithm-exact model of the kept bf16 products, computed here."""

import threading
import warnings

import pytest
import torch

import vtpu
from vtpu.precision import Precision

MODES = [Precision.DEFAULT, Precision.HIGH, Precision.HIGHEST]
BITS = {Precision.DEFAULT: 8, Precision.HIGH: 14, Precision.HIGHEST: 22}


def bf16_rne(x):
    """fp32 -> bf16 round-to-nearest-even, as float64 values."""
    return x.float().to(torch.bfloat16).double()


def trunc16(x):
    """Keep the top 16 bits of each fp32 value (the truncation split)."""
    return (x.float().view(torch.int32) & -65536).view(torch.float32).double()


def split(x, mode):
    """The bf16 parts of fp32 x, and the products each mode keeps (pairs of part indices)."""
    x = x.float()
    if mode == Precision.DEFAULT:
        return [bf16_rne(x)], [(0, 0)]
    hi = trunc16(x)
    r = x.double() - hi
    if mode == Precision.HIGH:
        return [hi, bf16_rne(r)], [(1, 0), (0, 1), (0, 0)]
    mid = trunc16(r)
    lo = bf16_rne(r - mid)
    return [hi, mid, lo], [(1, 1), (0, 2), (2, 0), (0, 1), (1, 0), (0, 0)]


def exact_mm(a, b, mode):
    """Sum of the kept bf16 products in fp64, rounded once to fp32."""
    pa, keep = split(a, mode)
    pb, _ = split(b, mode)
    return sum(pa[i] @ pb[j] for i, j in keep).float()


def pass_order_mm(a, b, mode):
    """K == 1 only: the kept products (each exact) added in fp32 in XLA's pass
    order, non-finite low sum replaced by 0, then + hi*hi: the algorithm itself."""
    pa, keep = split(a, mode)
    pb, _ = split(b, mode)
    s = torch.zeros(a.shape[0], b.shape[1])
    for i, j in keep[:-1]:
        s = (s.double() + pa[i] @ pb[j]).float()
    s = torch.where(torch.isfinite(s), s, torch.zeros_like(s))
    return (s.double() + pa[0] @ pb[0]).float()


def tpu_mm(a, b, mode):
    with vtpu.cpu_fallback(False), torch.tpu.precision(mode):
        return (a.to("tpu") @ b.to("tpu")).cpu()


@pytest.fixture(autouse=True)
def _quiet_precision_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_torch_xla_diagonal_recipe(mode):
    g = torch.Generator().manual_seed(0)
    n = 128
    a = torch.diag(torch.rand(n, generator=g) * 0.02 + 0.99)
    b = torch.diag(torch.rand(n, generator=g) * 0.02 + 0.99)
    got = tpu_mm(a, b, mode).double()
    err = (got - a.double() @ b.double()).abs().max().item()
    w = (1 + 2.0 ** -BITS[mode]) ** 2 - 1
    assert w / 4 <= err <= w, (mode, err, w)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_bit_exact_k1_and_small_integers(mode):
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(33, 1, generator=g), torch.randn(1, 17, generator=g)
    got, ref = tpu_mm(a, b, mode), exact_mm(a, b, mode)
    if mode == Precision.DEFAULT:
        assert torch.equal(got, ref)  # one product: exact in fp32
    else:
        # the 3 or 6 pass products are added in fp32 (as on the MXU): bit-exact
        # with that order, and at most 1 ulp from the once-rounded fp64 sum
        assert torch.equal(got, pass_order_mm(a, b, mode))
        ulp = torch.finfo(torch.float32).eps * ref.abs()
        assert ((got - ref).abs() <= ulp).all()
    ai = torch.randint(-8, 9, (31, 65), generator=g).float()
    bi = torch.randint(-8, 9, (65, 15), generator=g).float()
    assert torch.equal(tpu_mm(ai, bi, mode), exact_mm(ai, bi, mode))
    assert torch.equal(tpu_mm(ai, bi, mode), ai @ bi)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_random_within_accumulation_bound(mode):
    g = torch.Generator().manual_seed(2)
    m, k, n = 64, 300, 48
    a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
    got = tpu_mm(a, b, mode).double()
    ref = exact_mm(a, b, mode).double()
    # fp32 accumulation of k terms: |err| <= k * 2^-24 * sum|products| (times the passes)
    pa, keep = split(a, mode)
    pb, _ = split(b, mode)
    mag = sum(pa[i].abs() @ pb[j].abs() for i, j in keep)
    assert ((got - ref).abs() <= k * 2.0**-24 * mag + 1e-30).all()
    fp64 = a.double() @ b.double()
    rel = ((got - fp64).abs() / (a.double().abs() @ b.double().abs())).max().item()
    assert rel <= 2.0 ** -(BITS[mode] - 1), (mode, rel)


@pytest.mark.parametrize("isa", ["avx512bf16", "avx2", "scalar"])
def test_every_engine_is_exact_on_integers(isa):
    """Each matrix-engine path (forced with VTPU_ISA) gives the exact result on
    small integers in every mode, and the same bits as the active path."""
    import os
    import subprocess
    import sys

    code = (
        "import torch, vtpu, warnings\n"
        "warnings.simplefilter('ignore')\n"
        "g = torch.Generator().manual_seed(3)\n"
        "a = torch.randint(-8, 9, (37, 70), generator=g).float()\n"
        "b = torch.randint(-8, 9, (70, 19), generator=g).float()\n"
        "for p in ('default', 'high', 'highest'):\n"
        "    with torch.tpu.precision(p):\n"
        "        assert torch.equal((a.to('tpu') @ b.to('tpu')).cpu(), a @ b), p\n"
        "print(vtpu.info()['mxu_path'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, VTPU_ISA=isa), capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    available = vtpu.info()["isa_path"]
    order = ["scalar", "avx2", "avx512", "avx512bf16", "amx"]
    if available in order and order.index(isa) <= order.index(available):
        assert out.stdout.strip() == isa  # the forced engine really ran


def test_modes_order_by_accuracy_and_default_is_bf16():
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(128, 256, generator=g), torch.randn(256, 64, generator=g)
    fp64 = a.double() @ b.double()
    errs = [(tpu_mm(a, b, p).double() - fp64).abs().max().item() for p in MODES]
    assert errs[0] > 10 * errs[1] > 10 * errs[2] >= 0
    with vtpu.cpu_fallback(False):
        default = (a.to("tpu") @ b.to("tpu")).cpu()  # no precision block: DEFAULT
    assert torch.equal(default, tpu_mm(a, b, Precision.DEFAULT))


@pytest.mark.parametrize("mode", [Precision.HIGH, Precision.HIGHEST], ids=lambda m: m.name)
def test_inf_nan_negative_zero(mode):
    a = torch.tensor([[float("inf"), 1.0], [float("nan"), 2.0], [-0.0, -0.0]])
    b = torch.tensor([[1.0, 0.5], [3.0, -0.0]])
    got = tpu_mm(a, b, mode)
    assert got[0, 0] == float("inf") and got[0, 1] == float("inf")  # the guard keeps inf, not NaN
    assert got[1].isnan().all()
    # an MXU accumulator starts at +0: an all -0 sum comes out +0
    d = tpu_mm(torch.tensor([[-0.0, -0.0]]), torch.tensor([[1.0], [2.0]]), mode)
    assert d.item() == 0 and not torch.signbit(d).item()


@pytest.mark.parametrize("shape", [(1, 1, 1), (15, 17, 31), (33, 257, 1), (1, 1000, 17), (257, 33, 15)])
def test_odd_shapes_highest_matches_cpu(shape):
    m, k, n = shape
    g = torch.Generator().manual_seed(4)
    a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
    torch.testing.assert_close(tpu_mm(a, b, Precision.HIGHEST), a @ b, rtol=1e-5, atol=1e-5)


def test_transposed_strided_batched_and_empty():
    g = torch.Generator().manual_seed(5)
    a = torch.randn(40, 30, generator=g)
    b = torch.randn(50, 40, generator=g)
    with torch.tpu.precision("highest"), vtpu.cpu_fallback(False):
        ta, tb = a.to("tpu"), b.to("tpu")
        torch.testing.assert_close((ta.t() @ tb.t()).cpu(), a.t() @ b.t(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close((ta[::2, 1::3] @ tb[::5, :10]).cpu(), a[::2, 1::3] @ b[::5, :10],
                                   rtol=1e-5, atol=1e-5)
        x, y = torch.randn(3, 1, 7, 9, generator=g), torch.randn(4, 9, 5, generator=g)
        torch.testing.assert_close(torch.matmul(x.to("tpu"), y.to("tpu")).cpu(), torch.matmul(x, y),
                                   rtol=1e-5, atol=1e-5)
        bias = torch.randn(5, generator=g)
        x2 = torch.randn(6, 9, generator=g)
        w = torch.randn(5, 9, generator=g)
        got = torch.nn.functional.linear(x2.to("tpu"), w.to("tpu"), bias.to("tpu")).cpu()
        torch.testing.assert_close(got, torch.nn.functional.linear(x2, w, bias), rtol=1e-5, atol=1e-5)
        e = torch.empty(0, 4, device="tpu") @ torch.empty(4, 3, device="tpu")
        assert e.shape == (0, 3)
        z = torch.empty(2, 0, device="tpu") @ torch.empty(0, 3, device="tpu")
        assert torch.equal(z.cpu(), torch.zeros(2, 3))
        bb = torch.baddbmm(torch.ones(2, 3, 4, device="tpu"), torch.ones(2, 3, 5, device="tpu"),
                           torch.ones(2, 5, 4, device="tpu"), beta=0.5, alpha=2)
        assert torch.equal(bb.cpu(), torch.full((2, 3, 4), 10.5))
        es = torch.einsum("bij,bjk->bik", x[0].expand(2, 7, 9).to("tpu"), y[:2].to("tpu")).cpu()
        torch.testing.assert_close(es, torch.einsum("bij,bjk->bik", x[0].expand(2, 7, 9), y[:2]),
                                   rtol=1e-5, atol=1e-5)


def test_bf16_fp16_fp64_inputs():
    g = torch.Generator().manual_seed(6)
    a, b = torch.randn(20, 24, generator=g), torch.randn(24, 12, generator=g)
    with vtpu.cpu_fallback(False):
        hb = (a.bfloat16().to("tpu") @ b.bfloat16().to("tpu")).cpu()
        assert hb.dtype == torch.bfloat16
        ref = (a.bfloat16().double() @ b.bfloat16().double()).to(torch.bfloat16)
        assert ((hb.double() - ref.double()).abs() <= 2 ** -7 * ref.double().abs() + 1e-6).all()
        h = (a.half().to("tpu") @ b.half().to("tpu")).cpu()
        assert h.dtype == torch.float16
        torch.testing.assert_close(h.float(), a.half().float() @ b.half().float(), rtol=2e-2, atol=5e-2)
        d = (a.double().to("tpu") @ b.double().to("tpu")).cpu()
        torch.testing.assert_close(d, a.double() @ b.double(), rtol=1e-12, atol=1e-12)


def test_integer_matmul_falls_back_exactly():
    a = torch.arange(12).reshape(3, 4)
    b = torch.arange(8).reshape(4, 2)
    assert torch.equal((a.to("tpu") @ b.to("tpu")).cpu(), a @ b)


def test_gradients_at_highest_match_cpu():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(5, 7, 9, generator=g, requires_grad=True)
    w = torch.randn(9, 4, generator=g, requires_grad=True)
    xt = x.detach().to("tpu").requires_grad_()
    wt = w.detach().to("tpu").requires_grad_()
    with torch.tpu.precision("highest"):
        (torch.matmul(xt, wt).sin().sum()).backward()
    torch.matmul(x, w).sin().sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), x.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(wt.grad.cpu(), w.grad, rtol=1e-5, atol=1e-5)


def test_precision_api():
    assert torch.tpu.get_float32_matmul_precision() == "medium"
    with torch.tpu.precision(torch.tpu.Precision.HIGHEST):
        assert vtpu.precision.current_precision() == Precision.HIGHEST
        with torch.tpu.precision("high"):
            assert vtpu.precision.current_precision() == Precision.HIGH
        seen = []
        t = threading.Thread(target=lambda: seen.append(vtpu.precision.current_precision()))
        t.start()
        t.join()
        assert seen == [Precision.DEFAULT]  # thread-local: other threads keep the process setting
    assert vtpu.precision.current_precision() == Precision.DEFAULT
    with pytest.raises(ValueError, match="'highest'"):
        torch.tpu.precision("fp32")
    with pytest.raises(ValueError):
        torch.tpu.set_float32_matmul_precision("bogus")
    old = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")  # an explicit torch call applies to tpu too
        assert vtpu.precision.current_precision() == Precision.HIGH
        torch.tpu.set_float32_matmul_precision("medium")
        assert vtpu.precision.current_precision() == Precision.DEFAULT
    finally:
        torch.set_float32_matmul_precision(old)
        torch.tpu.set_float32_matmul_precision("medium")


def test_precision_cost_warning_once():
    import vtpu.precision as p

    p._warned.clear()
    with pytest.warns(UserWarning, match="about 6x"):
        with torch.tpu.precision("highest"):
            pass
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch.tpu.precision("highest"):
            pass


def test_bad_input_matches_cpu_messages():
    a, b = torch.randn(2, 3), torch.randn(4, 5)
    for fn in (torch.mm, torch.matmul):
        with pytest.raises(RuntimeError) as cpu_err:
            fn(a, b)
        with pytest.raises(RuntimeError) as tpu_err:
            fn(a.to("tpu"), b.to("tpu"))
        assert str(tpu_err.value).splitlines()[0] == str(cpu_err.value).splitlines()[0]
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.mm(a.to("tpu"), torch.randn(3, 2, dtype=torch.float64).to("tpu"))
    with pytest.raises(RuntimeError, match="same device"):
        torch.mm(a.to("tpu"), torch.randn(3, 2))
    assert (a.to("tpu") @ torch.randn(3, 2).to("tpu")).shape == (2, 2)


def test_numerics_compare_reports_per_module():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))
    x = torch.randn(16, 64)
    default = vtpu.numerics.compare(model, x, precision="default")
    highest = vtpu.numerics.compare(model, x, precision="highest")
    names = [e.name for e in default]
    assert names == ["0", "1", "2", ""]
    assert default.worst().max_rel > 1e-4 > 1e-6 > highest.worst().max_rel
    assert "max abs err" in str(default)
    assert next(model.parameters()).device.type == "cpu"  # the user's model is untouched


def _writes(w):
    """Ways to write a weight between two products that reuse its packed
    panels: each must be seen by the next product."""
    return [
        ("in place", lambda: w.add_(0.5)),
        ("from the host", lambda: w.copy_(torch.randn(w.shape))),
        ("one row", lambda: w.__setitem__(3, 7.0)),
        ("through another view", lambda: w.view(-1)[5:9].fill_(-2.0)),
        ("CPU fallback", lambda: w[1].sinc_()),  # no native kernel: the CPU kernel writes device memory
        ("optimizer step", lambda: torch.optim.SGD([w], lr=0.5).step()),
        ("random fill", lambda: torch.nn.init.normal_(w)),
    ]


@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kept_weight_panels_follow_every_write(mode, dtype):
    """A product with few rows keeps its weight's packed panels: the same
    bits as packing afresh (a clone is new memory, never kept), and after
    any write of the weight the new values, never the kept ones."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 96, generator=g).to(dtype).to("tpu")
    w = torch.randn(80, 96, generator=g).to(dtype).to("tpu")
    w.grad = torch.randn(80, 96, generator=g).to(dtype).to("tpu")

    def check():
        fresh = torch.nn.functional.linear(x, w.detach().clone())
        for _ in range(3):  # seen, kept, reused
            got = torch.nn.functional.linear(x, w)
            assert torch.equal(got.cpu(), fresh.cpu())

    vtpu._C._mxu_kept_clear()
    hits = vtpu._C._mxu_kept_hits()
    with vtpu.eager_mode(mode), torch.no_grad():
        check()
        assert vtpu._C._mxu_kept_hits() > hits  # the panels were reused
        for what, write in _writes(w):
            write()
            check()  # fails with the previous values if a write went unseen
