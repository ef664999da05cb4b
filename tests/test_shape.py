"""Native data movement, sorting and range factories against CPU PyTorch:
cat/stack, flip, roll, tril/triu, sort/argsort/topk (NaN order, ties,
stability), arange/linspace/eye (bit for bit), searchsorted/bucketize, isin,
gradients through PyTorch's formulas, and PyTorch's errors."""

import pytest
import torch

import vtpu
from conftest import DTYPES, make

FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]


def same(got, want):
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    assert torch.equal(got, want) or (want.is_floating_point() and torch.equal(got.isnan(), want.isnan())
                                      and torch.equal(got.nan_to_num(), want.nan_to_num()))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat_stack(dtype, dim):
    xs = [make((4, 5, 6), dtype, k) for k in range(3)]
    xs[1] = make((6, 5, 4), dtype, 7).transpose(0, 2)  # non-contiguous input
    ts = [x.to("tpu") for x in xs]
    with vtpu.cpu_fallback(False):
        same(torch.cat(ts, dim), torch.cat(xs, dim))
        same(torch.stack(ts, dim), torch.stack(xs, dim))
        same(torch.cat(ts + [ts[0].narrow(dim, 0, 0)], dim), torch.cat(xs, dim))  # empty piece
        same(torch.cat(ts * 3, dim), torch.cat(xs * 3, dim))  # more inputs than one node holds
        out = torch.empty(0, dtype=dtype, device="tpu")
        torch.cat(ts, dim, out=out)
        same(out, torch.cat(xs, dim))


def test_cat_of_many_inputs_of_many_dims():
    # 9 inputs of 12 dims: more descriptors than one queued node holds
    xs = [torch.randn([1] * 11 + [2]) for _ in range(9)]
    with vtpu.cpu_fallback(False):
        same(torch.cat([x.to("tpu") for x in xs], -1), torch.cat(xs, -1))


def test_cat_promotion_legacy_empty_and_errors():
    a, b = make((3, 4), torch.float32, 1), make((3, 2), torch.int64, 2)
    with vtpu.cpu_fallback(False):
        same(torch.cat([a.to("tpu"), b.to("tpu")], 1), torch.cat([a, b], 1))
        same(torch.cat([a.to("tpu"), torch.empty(0).to("tpu")], 0), torch.cat([a, torch.empty(0)], 0))
        same(torch.cat([a.bfloat16().to("tpu"), a.half().to("tpu")]), torch.cat([a.bfloat16(), a.half()]))
    # PyTorch's checks in its order: the same error type and message as CPU
    one, i32 = make((2,), torch.float32, 3), torch.empty(2, dtype=torch.int32)
    for bad, dim, out in (([a, make((4, 4), torch.float32)], 1, None), ([a, make((3,), torch.float32)], 1, None),
                          ([torch.tensor(1.0)], 0, None), ([one], 3, None), ([], 0, None), ([one], 0, i32)):
        with pytest.raises(Exception) as want:
            torch.cat(bad, dim, **({"out": out} if out is not None else {}))
        with pytest.raises(Exception) as got:
            tout = {"out": out.to("tpu")} if out is not None else {}
            torch.cat([t.to("tpu") for t in bad], dim, **tout)
        assert got.type is want.type and str(got.value) == str(want.value), (got.value, want.value)


def test_cat_layout_like_cpu():
    """The result's strides are CPU's: channels-last when every input is,
    contiguous when the formats differ, legacy empty inputs skipped."""
    cl = [make((2, 3, 4, 5), torch.float32, k).to(memory_format=torch.channels_last) for k in range(2)]
    cl3 = [make((2, 3, 2, 4, 5), torch.float32, k).to(memory_format=torch.channels_last_3d) for k in range(2)]
    cases = [(cl, 1), (cl, 0), ([cl[0], cl[1].contiguous()], 1), (cl3, 2),
             ([make((1, 3, 1, 1), torch.float32, 1), make((1, 3, 1, 1), torch.float32, 2)], 0),
             ([torch.empty(0), make((2, 3), torch.float32, 3), torch.empty(0)], 1), ([torch.empty(0)] * 2, 0),
             ([make((2, 0), torch.float32, 4), make((2, 3), torch.float32, 5)], 1)]
    with vtpu.cpu_fallback(False):
        for xs, dim in cases:
            want = torch.cat(xs, dim)
            got = torch.cat([x.to("tpu") for x in xs], dim)
            assert got.stride() == want.stride(), (got.stride(), want.stride())
            same(got, want)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_flip_roll_tri(dtype):
    x = make((3, 7, 9), dtype, 3)
    xt = make((9, 7, 3), dtype, 4).transpose(0, 2)
    cl = make((2, 3, 4, 5), dtype, 5).contiguous(memory_format=torch.channels_last)
    with vtpu.cpu_fallback(False):
        for v in (x, xt, cl):
            t = v.to("tpu")
            for dims in ((0,), (1, 2), (-1,), (0, 1, 2), ()):
                same(t.flip(dims), v.flip(dims))
                assert t.flip(dims).stride() == v.flip(dims).stride()  # the input's layout, as on CPU
            for shifts, dims in ((2, 1), (-3, -1), ((1, 20), (0, 2)), (11, None)):
                same(t.roll(shifts, dims), v.roll(shifts, dims))
                # CPU's roll is a cat: contiguous (channels_last kept), not the input's layout
                assert t.roll(shifts, dims).stride() == v.roll(shifts, dims).stride(), (shifts, dims)
            for k in (0, 1, -2, 8, -9):
                same(t.tril(k), v.tril(k))
                same(t.triu(k), v.triu(k))
                same(t.clone().tril_(k), v.clone().tril_(k))
                same(t.clone().triu_(k), v.clone().triu_(k))
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        torch.ones(3, device="tpu").tril()


def ties_and_nans(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, 4, shape, generator=g).to(torch.float64)
    if dtype.is_floating_point:
        x[torch.rand(shape, generator=g) < 0.05] = float("nan")
        x[torch.rand(shape, generator=g) < 0.05] = float("inf")
        x[torch.rand(shape, generator=g) < 0.05] = -0.0
    if dtype == torch.uint8:
        x = x.abs()
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [d for d in DTYPES if d != torch.bool] + [torch.bool], ids=str)
@pytest.mark.parametrize("dim", [0, -1])
def test_sort_stable_matches_cpu(dtype, dim):
    # the last: dense, with a size-1 dim whose stride is not the contiguous one
    for x in (ties_and_nans((6, 300), dtype, 1), make((6, 300), dtype, 2), ties_and_nans((40, 3), dtype, 3).t(),
              ties_and_nans((5, 7), dtype, 4).as_strided((5, 1, 7), (7, 100, 1))):
        t = x.to("tpu")
        assert t.stride() == x.stride()
        with vtpu.cpu_fallback(False):
            for desc in (False, True):
                vg, ig = torch.sort(t, dim=dim, descending=desc, stable=True)
                vw, iw = torch.sort(x, dim=dim, descending=desc, stable=True)
                same(vg, vw)
                same(ig, iw)
                assert vg.stride() == vw.stride() and ig.stride() == iw.stride()  # the input's dense strides
                same(torch.argsort(t, dim=dim, descending=desc, stable=True),
                     torch.argsort(x, dim=dim, descending=desc, stable=True))
                # the default sort is stable on tpu: values equal CPU, indices select them
                vg, ig = torch.sort(t, dim=dim, descending=desc)
                same(vg, torch.sort(x, dim=dim, descending=desc).values)
                same(x.gather(dim, ig.cpu()), vw)


@pytest.mark.parametrize("dtype", FLOATS + [torch.int32, torch.int64, torch.uint8], ids=str)
def test_topk(dtype):
    distinct = torch.randperm(8 * 3000, generator=torch.Generator().manual_seed(5)).reshape(8, 3000)
    distinct = (distinct % 2000 if dtype in (torch.bfloat16, torch.float16) else distinct).to(dtype)
    if dtype == torch.uint8:
        distinct = torch.arange(200, dtype=dtype).repeat(8, 1)
    for x in (distinct, ties_and_nans((8, 500), dtype, 6)):
        t = x.to("tpu")
        for k in (1, 5, 50, x.shape[1]):
            for largest in (True, False):
                with vtpu.cpu_fallback(False):
                    vg, ig = t.topk(k, largest=largest)
                vw, iw = x.topk(k, largest=largest)
                same(vg, vw)
                same(x.gather(1, ig.cpu()), vw)  # ties may be ordered differently (CPU's top-k is unstable)
                if x is distinct and dtype not in (torch.bfloat16, torch.float16):
                    same(ig, iw)
    with pytest.raises(RuntimeError, match="selected index k out of range"):
        torch.ones(3, device="tpu").topk(4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64,
                                   torch.int32, torch.int16, torch.int8, torch.uint8], ids=str)
def test_range_factories_bit_exact(dtype):
    cases = [(0, 10, 1), (0.3, 17.7, 0.37), (-5, 5, 0.013), (3, -20, -0.77), (0, 100000, 1.1), (0, 1000003, 1)]
    with vtpu.cpu_fallback(False):
        for s, e, st in cases:
            if not dtype.is_floating_point and (isinstance(st, float) or e > 100):
                continue
            if dtype in (torch.bfloat16, torch.float16) and e > 1000:
                continue
            same(torch.arange(s, e, st, dtype=dtype, device="tpu"), torch.arange(s, e, st, dtype=dtype))
        for s, e, n in ((0, 1, 10), (-3.3, 7.1, 97), (0, 1, 1), (2, 2, 5), (0, 1000, 100001), (5, -5, 33), (0, 0, 0)):
            if not dtype.is_floating_point and n > 1000:
                continue
            try:
                want = torch.linspace(s, e, n, dtype=dtype)
            except RuntimeError as err:  # an end that does not fit the dtype: the same error
                with pytest.raises(RuntimeError, match=str(err)):
                    torch.linspace(s, e, n, dtype=dtype, device="tpu")
                continue
            same(torch.linspace(s, e, n, dtype=dtype, device="tpu"), want)
        if dtype != torch.uint8:
            same(torch.eye(5, dtype=dtype, device="tpu"), torch.eye(5, dtype=dtype))
            same(torch.eye(3, 6, dtype=dtype, device="tpu"), torch.eye(3, 6, dtype=dtype))
    with pytest.raises(RuntimeError, match="step must be nonzero"):
        torch.arange(0, 1, 0, device="tpu")
    with pytest.raises(RuntimeError, match="upper bound and lower bound inconsistent with step sign"):
        torch.arange(0, 1, -1, device="tpu")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int64], ids=str)
def test_searchsorted_bucketize(dtype):
    seq = ties_and_nans((50,), dtype, 8).sort().values
    vals = ties_and_nans((4, 30), dtype, 9)
    seq2 = ties_and_nans((4, 20), dtype, 10).sort(-1).values
    with vtpu.cpu_fallback(False):
        for right in (False, True):
            same(torch.searchsorted(seq.to("tpu"), vals.to("tpu"), right=right), torch.searchsorted(seq, vals, right=right))
            same(torch.searchsorted(seq2.to("tpu"), vals.to("tpu"), right=right, out_int32=True),
                 torch.searchsorted(seq2, vals, right=right, out_int32=True))
            same(torch.bucketize(vals.to("tpu"), seq.to("tpu"), right=right), torch.bucketize(vals, seq, right=right))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_gradients(dtype):
    x = make((4, 6, 8), dtype, 11)
    fns = [
        lambda v: torch.cat([v, v * 2], 1),
        lambda v: torch.stack([v, v], -1),
        lambda v: v.flip(0, 2),
        lambda v: v.roll((1, -2), (0, 2)),
        lambda v: v.tril(1),
        lambda v: v.triu(-1),
        lambda v: v.sort(dim=-1, stable=True).values,
        lambda v: v.topk(3, 1).values,
    ]
    for f in fns:
        a = x.clone().requires_grad_()
        b = x.to("tpu").requires_grad_()
        g = make(tuple(f(a).shape), dtype, 12)
        f(a).backward(g)
        f(b).backward(g.to("tpu"))
        same(b.grad, a.grad)


def test_fallback_report_is_empty_for_forward_ops():
    x = make((4, 5, 6), torch.float32, 13).to("tpu")
    vtpu.reset_fallback_report()
    torch.cat([x, x], 2), torch.stack([x, x]), x.flip(1), x.roll(2, 1), x.tril(), x.triu(1)
    x.sort(-1), x.argsort(-1), x.topk(3), torch.arange(10, device="tpu"), torch.linspace(0, 1, 5, device="tpu")
    torch.eye(4, device="tpu"), torch.searchsorted(x[0, 0].sort().values, x[0]), x.split(2, 1), x.chunk(2, 2)
    x.unbind(0), x.repeat(2, 1, 1), torch.full((3, 3), 2.0, device="tpu"), torch.zeros(3, device="tpu")
    torch.tpu.synchronize()
    assert vtpu.fallback_report() == {}


@pytest.mark.parametrize("n,m", [(1000, 50), (20000, 5000), (7, 0), (0, 3), (1, 1)])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int8, torch.float32, torch.bfloat16, torch.float64])
def test_isin_matches_cpu(n, m, dtype):
    # pairwise compare for small test sets, sort + search for large ones (20000 x 5000)
    g = torch.Generator().manual_seed(n + m)
    e = torch.randint(-60, 60, (n,), generator=g).to(dtype)
    t = torch.randint(-60, 60, (m,), generator=g).to(dtype)
    if dtype.is_floating_point and n > 1:
        e[0], e[-1] = float("nan"), 0.5
        if m:
            t[0] = float("nan")  # NaN is in nothing, as on CPU
    vtpu.reset_fallback_report()
    with vtpu.cpu_fallback(False):
        for invert in (False, True):
            got = torch.isin(e.to("tpu"), t.to("tpu"), invert=invert)
            assert got.dtype == torch.bool and torch.equal(got.cpu(), torch.isin(e, t, invert=invert))
        e2 = e.view(-1, 1) if n else e
        assert torch.equal(torch.isin(e2.to("tpu"), t.to("tpu").view(-1, 1)).cpu(), torch.isin(e2, t.view(-1, 1)))
    assert vtpu.fallback_report() == {}


def test_isin_scalars_promotion_and_errors():
    e = torch.tensor([1, 2, 3, 50256], device="tpu")  # generate(): is a token one of the stop tokens?
    with vtpu.cpu_fallback(False):
        assert torch.isin(e, torch.tensor([50256, 3], device="tpu")).tolist() == [False, False, True, True]
        assert torch.isin(e, 2).tolist() == [False, True, False, False]
        assert torch.isin(2, e).item() and not torch.isin(7, e, invert=False).item()
        assert torch.isin(e, torch.tensor([2.0, 3.5], device="tpu")).tolist() == [False, True, False, False]
        out = torch.empty(0, dtype=torch.bool, device="tpu")
        torch.isin(e, torch.tensor([1], device="tpu"), out=out)
        assert out.tolist() == [True, False, False, False]
    for bad in (torch.tensor([True], device="tpu"), torch.tensor([1j], device="tpu")):
        with pytest.raises(RuntimeError, match="Unsupported input type"):
            torch.isin(bad, bad)
    with pytest.raises(RuntimeError, match="dtype bool"):
        torch.isin(e, e, out=torch.empty(4, device="tpu"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", [((10,), 0, 3, 2), ((4, 9, 5), 1, 4, 1), ((4, 9, 5), -1, 2, 3), ((3, 8), 1, 8, 5),
                                  ((), 0, 1, 1), ((), 0, 0, 1), ((5, 6), 0, 0, 2), ((3, 0, 4), 2, 2, 1)], ids=str)
def test_unfold_backward_native(case, dtype):
    """unfold's gradient (overlapping, strided, whole-dim, empty and 0-dim
    windows) runs natively: float32 matches CPU; bf16 sums its few terms in
    float32 (exactly, here) and rounds once, so it is the float64 gradient
    rounded to bf16 (CPU's own bf16 kernel rounds along the way)."""
    shape, dim, size, step = case
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g).to(dtype)
    xc = x.clone().requires_grad_()
    out = xc.unfold(dim, size, step)
    cot = torch.randn(out.shape, generator=g).to(dtype)
    (want,) = torch.autograd.grad(out, xc, cot)
    xt = x.to("tpu").requires_grad_()
    with vtpu.cpu_fallback(False):
        (got,) = torch.autograd.grad(xt.unfold(dim, size, step), xt, cot.to("tpu"))
    assert got.device.type == "tpu" and got.shape == want.shape and got.dtype == dtype
    if dtype == torch.bfloat16:
        x64 = x.double().requires_grad_()
        (exact,) = torch.autograd.grad(x64.unfold(dim, size, step), x64, cot.double())
        assert torch.equal(got.cpu(), exact.to(dtype))
    else:
        torch.testing.assert_close(got.cpu(), want, rtol=1e-6, atol=1e-6)


def test_efficient_zero_tensor_is_native_zeros():
    """Autograd's known-zero gradients (sgn's, for real inputs) are zeros on
    the device, made natively."""
    x = torch.randn(5, 3).to("tpu").requires_grad_()
    with vtpu.cpu_fallback(False):
        (g,) = torch.autograd.grad(x.sgn().sum(), x)
        z = torch.ops.aten._efficientzerotensor([2, 0, 3], dtype=torch.bfloat16, device="tpu")
    assert g.device.type == "tpu" and torch.equal(g.cpu(), torch.zeros(5, 3))
    assert z.device.type == "tpu" and z.dtype == torch.bfloat16 and z.shape == (2, 0, 3)
