"""Native indexing ops against CPU PyTorch: forward and gradients, every
index form (int64/int32, negative, bool masks, broadcast, None/slices),
non-contiguous and empty inputs, PyTorch's errors, and no CPU fallback."""

import pytest
import torch
import torch.nn.functional as F

import vtpu
from conftest import make

FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
# index ops move values bit for bit; accumulations allow the dtype's rounding
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3, torch.float64: 1e-12}


def acc_ref(f, *args):
    """f evaluated in float32 for bf16/f16 tensors (tpu rounds each stored sum in the dtype; CPU's
    own narrow-type rounding differs in order), cast back to the dtype."""
    narrow = [a.dtype in (torch.bfloat16, torch.float16) for a in args if isinstance(a, torch.Tensor)]
    if not any(narrow):
        return f(*args)
    dt = next(a.dtype for a in args if isinstance(a, torch.Tensor) and a.dtype in (torch.bfloat16, torch.float16))
    return f(*[a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]).to(dt)


def same(got, want, tol=None):
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    if tol is None or not want.dtype.is_floating_point:
        assert torch.equal(got, want) or (want.dtype.is_floating_point and torch.allclose(got, want, 0, 0, equal_nan=True))
    else:
        torch.testing.assert_close(got, want, rtol=tol, atol=tol, equal_nan=True)


@pytest.fixture
def native():
    vtpu.reset_fallback_report()
    with vtpu.cpu_fallback(False):
        yield
    assert not vtpu.fallback_report(), vtpu.fallback_report()


@pytest.mark.parametrize("dtype", FLOATS + [torch.int32, torch.bool], ids=str)
@pytest.mark.parametrize("idx_dtype", [torch.int64, torch.int32], ids=str)
def test_index_select_forward(dtype, idx_dtype, native):
    x = make((13, 9, 5), dtype, 1)
    for dim in (0, 1, -1):
        idx = torch.randint(0, x.size(dim), (17,), dtype=idx_dtype)
        same(x.to("tpu").index_select(dim, idx.to("tpu")), x.index_select(dim, idx))
        xt = x.transpose(0, 2)  # non-contiguous input
        same(xt.to("tpu").index_select(dim, idx.to("tpu") % xt.size(dim)), xt.index_select(dim, idx % xt.size(dim)))
    empty = torch.empty(0, dtype=torch.int64)
    same(x.to("tpu").index_select(0, empty.to("tpu")), x.index_select(0, empty))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("padding_idx", [None, 3])
@pytest.mark.parametrize("scale", [False, True])
def test_embedding_forward_backward(dtype, padding_idx, scale, native):
    w = make((50, 16), dtype, 2).requires_grad_()
    idx = torch.randint(0, 50, (4, 12))
    idx[0, :4] = 3
    wt = w.detach().to("tpu").requires_grad_()
    out = F.embedding(idx, w, padding_idx=padding_idx, scale_grad_by_freq=scale)
    got = F.embedding(idx.to("tpu"), wt, padding_idx=padding_idx, scale_grad_by_freq=scale)
    same(got, out)
    g = make(out.shape, dtype, 3)
    got.backward(g.to("tpu"))
    # tpu sums each row's gradients in float32 and rounds once; CPU PyTorch rounds
    # bf16 after every add, so the reference is the float32 sum rounded once
    w32 = w.detach().float().requires_grad_()
    F.embedding(idx, w32, padding_idx=padding_idx, scale_grad_by_freq=scale).backward(g.float())
    same(wt.grad, w32.grad.to(dtype), TOL[dtype])


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_gather_forward_backward(dtype, native):
    x = make((7, 11, 6), dtype, 4).requires_grad_()
    xt = x.detach().to("tpu").requires_grad_()
    for dim in (0, 1, 2):
        shape = [3, 4, 5]
        shape[dim] = 9
        idx = torch.randint(0, x.size(dim), shape)
        out = x.gather(dim, idx)
        got = xt.gather(dim, idx.to("tpu"))
        same(got, out)
        g = make(out.shape, dtype, dim)
        got.backward(g.to("tpu"))  # scatter_add into zeros
        x.grad = None
        out.backward(g)
        if dtype not in (torch.bfloat16, torch.float16):  # narrow sums: see test_kernels_index.c
            same(xt.grad, x.grad, TOL[dtype])
        xt.grad = None
    idx32 = torch.randint(0, 6, (7, 11, 2), dtype=torch.int32)
    same(xt.detach().gather(2, idx32.to("tpu")), x.detach().gather(2, idx32))


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.int16, torch.bool], ids=str)
def test_scatter_variants(dtype, native):
    x = make((8, 10), dtype, 5)
    src = make((12, 10), dtype, 6)
    idx = torch.randint(0, 8, (12, 7))
    t, st, it = x.to("tpu"), src.to("tpu"), idx.to("tpu")
    # assignment with duplicate indices: PyTorch CPU writes in order (the last wins)
    same(t.scatter(0, it, st), x.scatter(0, idx, src))
    same(t.scatter(1, it[:8, :5] % 10, st), x.scatter(1, idx[:8, :5] % 10, src))
    same(t.scatter(0, it, 1), x.scatter(0, idx, 1))
    if dtype not in (torch.bool, torch.bfloat16, torch.float16):  # narrow sums: see test_kernels_index.c
        same(t.scatter_add(0, it, st), acc_ref(lambda a, b: a.scatter_add(0, idx, b), x, src), TOL.get(dtype))
        same(t.scatter(0, it, st, reduce="add"), acc_ref(lambda a, b: a.scatter(0, idx, b, reduce="add"), x, src), TOL.get(dtype))
        same(t.scatter(0, it, st, reduce="multiply"), acc_ref(lambda a, b: a.scatter(0, idx, b, reduce="multiply"), x, src), TOL.get(dtype))
        u = t.clone()
        u.scatter_add_(0, it, st)
        same(u, acc_ref(lambda a, b: a.clone().scatter_add_(0, idx, b), x, src), TOL.get(dtype))
    for reduce in ("sum", "prod", "mean", "amax", "amin"):
        if reduce in ("sum", "prod", "mean") and dtype in (torch.bool, torch.bfloat16, torch.float16):
            continue
        for include_self in (True, False):
            want = acc_ref(lambda a, b: a.scatter_reduce(0, idx, b, reduce, include_self=include_self), x, src)
            got = t.scatter_reduce(0, it, st, reduce, include_self=include_self)
            same(got, want, TOL.get(dtype))


def test_scatter_reduce_backward_and_nan(native):
    x = torch.randn(6, 5, dtype=torch.float64).requires_grad_()
    src = torch.randn(9, 5, dtype=torch.float64).requires_grad_()
    idx = torch.randint(0, 6, (9, 5))
    xt, st = (v.detach().to("tpu").requires_grad_() for v in (x, src))
    out = x.scatter_add(0, idx, src)
    got = xt.scatter_add(0, idx.to("tpu"), st)
    g = torch.randn(out.shape, dtype=torch.float64)
    out.backward(g)
    got.backward(g.to("tpu"))
    same(xt.grad, x.grad, 1e-12)
    same(st.grad, src.grad, 1e-12)
    y = torch.tensor([1.0, float("nan"), 3.0])
    same(torch.zeros(2).to("tpu").scatter_reduce(0, torch.tensor([0, 0, 1]).to("tpu"), y.to("tpu"), "amax"),
         torch.zeros(2).scatter_reduce(0, torch.tensor([0, 0, 1]), y, "amax"))


@pytest.mark.parametrize("dtype", FLOATS + [torch.int32], ids=str)
def test_index_add_copy_fill(dtype, native):
    x = make((9, 7), dtype, 7)
    src = make((12, 7), dtype, 8)
    idx = torch.randint(0, 9, (12,))
    t, st, it = x.to("tpu"), src.to("tpu"), idx.to("tpu")
    if dtype not in (torch.bfloat16, torch.float16):  # narrow sums: see test_kernels_index.c
        same(t.index_add(0, it, st), x.index_add(0, idx, src), TOL.get(dtype))
        same(t.index_add(0, it, st, alpha=2), x.index_add(0, idx, src, alpha=2), TOL.get(dtype))
        same(t.index_add(1, it[:4] % 7, st[:9, :4]), x.index_add(1, idx[:4] % 7, src[:9, :4]), TOL.get(dtype))
    u = torch.tensor([4, 0, 7, 2])
    same(t.index_copy(0, u.to("tpu"), st[:4]), x.index_copy(0, u, src[:4]))
    v = torch.tensor([1, -1, 3])  # index_fill wraps negative indices
    same(t.index_fill(0, v.to("tpu"), 5), x.index_fill(0, v, 5))
    same(t.index_fill(1, v.to("tpu"), torch.tensor(2).to(dtype).to("tpu")), x.index_fill(1, v, torch.tensor(2).to(dtype)))
    w = t.clone()
    w.index_fill_(1, v.to("tpu"), -1)
    same(w, x.clone().index_fill_(1, v, -1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool], ids=str)
def test_advanced_indexing(dtype, native):
    x = make((6, 7, 8), dtype, 9)
    t = x.to("tpu")
    i = torch.tensor([0, 5, -1, 2])
    j = torch.tensor([[1], [5], [-6]])
    m = x.float().sum(-1) > x.float().sum(-1).median() if dtype != torch.bool else x[..., 0]
    cases = [
        lambda a, d: a[d(i)],
        lambda a, d: a[:, d(i)],
        lambda a, d: a[d(i), :, d(i % 8)],  # not adjacent: the broadcast dims go first
        lambda a, d: a[d(j), d(i)],  # broadcast [3, 1] x [4]
        lambda a, d: a[..., d(i.int())],
        lambda a, d: a[d(m)],
        lambda a, d: a[d(m[0]).unsqueeze(0).expand(6, 7)],
        lambda a, d: a[None, d(i), 1:5],
        lambda a, d: a[d(x.float() > 0) if dtype != torch.bool else d(x)],
    ]
    for k, f in enumerate(cases):
        same(f(t, lambda v: v.to("tpu")), f(x, lambda v: v))
    same(t[i], x[i])  # host index tensors are taken too, as on CUDA
    same(t[torch.tensor([], dtype=torch.int64)], x[torch.tensor([], dtype=torch.int64)])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32], ids=str)
def test_index_put(dtype, native):
    x = make((6, 5), dtype, 10)
    v = make((4, 5), dtype, 11)
    i = torch.tensor([1, 3, 1, -1])
    for accumulate in (False, True):
        want = x.clone().index_put_((i,), v, accumulate=accumulate)
        got = x.to("tpu").index_put_((i.to("tpu"),), v.to("tpu"), accumulate=accumulate)
        if accumulate or True:
            same(got, want, TOL.get(dtype))
    a, b = x.clone(), x.to("tpu")
    m = x.float() > 0
    a[m] = 7
    b[m.to("tpu")] = 7
    same(b, a)
    a[:, torch.tensor([0, 2])] = v[:6, :2] if v.shape[0] >= 6 else torch.ones(6, 2, dtype=dtype)
    b[:, torch.tensor([0, 2]).to("tpu")] = (v[:6, :2] if v.shape[0] >= 6 else torch.ones(6, 2, dtype=dtype)).to("tpu")
    same(b, a)
    a[m] = torch.arange(int(m.sum())).to(dtype)
    b[m.to("tpu")] = torch.arange(int(m.sum())).to(dtype).to("tpu")
    same(b, a)


def test_index_backward(native):
    x = torch.randn(6, 7, requires_grad=True)
    xt = x.detach().to("tpu").requires_grad_()
    i = torch.tensor([0, 3, 3, 5])
    out = x[i, 1:] * 2
    got = xt[i.to("tpu"), 1:] * 2
    g = torch.randn(out.shape)
    out.backward(g)
    got.backward(g.to("tpu"))  # index_put_ with accumulate=True
    same(xt.grad, x.grad, 1e-5)


@pytest.mark.parametrize("dtype", FLOATS + [torch.int8, torch.bool], ids=str)
def test_masked_ops_and_nonzero(dtype, native):
    x = make((5, 33), dtype, 12)
    x[:, ::3] = 0
    m = make((1, 33), torch.bool, 13)
    t, mt = x.to("tpu"), m.to("tpu")
    same(t.masked_fill(mt, 3), x.masked_fill(m, 3))
    same(t.masked_fill(mt, torch.tensor(2).to(dtype).to("tpu")), x.masked_fill(m, torch.tensor(2).to(dtype)))
    u = t.clone()
    u.masked_fill_(mt, 1)
    same(u, x.clone().masked_fill_(m, 1))
    same(t.masked_select(mt), x.masked_select(m))
    same(torch.masked_select(t[:, :1], mt), torch.masked_select(x[:, :1], m))  # broadcast both ways
    src = make((200,), dtype, 14)
    same(t.masked_scatter(mt, src.to("tpu")), x.masked_scatter(m, src))
    same(t.nonzero(), x.nonzero())
    same(t.t().nonzero(), x.t().nonzero())
    same(torch.nonzero(t, as_tuple=True)[1], torch.nonzero(x, as_tuple=True)[1])
    same(torch.argwhere(t), torch.argwhere(x))
    same(torch.zeros(0, 3).to("tpu").nonzero(), torch.zeros(0, 3).nonzero())
    same(torch.tensor(2.0).to("tpu").nonzero(), torch.tensor(2.0).nonzero())


def test_masked_fill_backward_and_grad_of_masked_select(native):
    x = torch.randn(4, 9, requires_grad=True)
    xt = x.detach().to("tpu").requires_grad_()
    m = x.detach() > 0
    out = x.masked_fill(m, 0.0).sum() + x.masked_select(~m).pow(2).sum()
    got = xt.masked_fill(m.to("tpu"), 0.0).sum() + xt.masked_select(~m.to("tpu")).pow(2).sum()
    out.backward()
    got.backward()
    same(xt.grad, x.grad, 1e-5)


def test_take_and_one_hot(native):
    x = make((5, 7), torch.float32, 15)
    i = torch.tensor([[0, -1], [34, 3]])
    same(x.to("tpu").take(i.to("tpu")), x.take(i))
    same(x.t().to("tpu").take(i.to("tpu")), x.t().take(i))
    labels = torch.tensor([0, 3, 2, 3])
    same(F.one_hot(labels.to("tpu"), 5), F.one_hot(labels, 5))


def test_printing_does_not_fall_back():
    vtpu.reset_fallback_report()
    with vtpu.cpu_fallback(False):
        for t in (torch.randn(3, 4), torch.arange(6), torch.tensor([True, False]), torch.tensor([1.5, float("nan")])):
            assert repr(t.to("tpu")).replace("device='tpu:0'", "").replace(", )", ")")
    assert not vtpu.fallback_report()


def test_errors_match_cpu():
    x = torch.randn(10, 4)
    t = x.to("tpu")
    with pytest.raises(IndexError):
        x.index_select(0, torch.tensor([[0]]))
    with pytest.raises(IndexError):
        t.index_select(0, torch.tensor([[0]]).to("tpu"))
    for f in (lambda a, d: a.index_select(0, d(torch.tensor([0.5]))),
              lambda a, d: a.gather(0, d(torch.zeros(2, dtype=torch.long))),
              lambda a, d: a.scatter(0, d(torch.zeros(2, 4, dtype=torch.long)), d(torch.zeros(2, 4, dtype=torch.float64))),
              lambda a, d: a.masked_fill(d(torch.ones(10, 4, dtype=torch.uint8)), 1),
              lambda a, d: a.scatter_reduce(0, d(torch.zeros(1, 4, dtype=torch.long)), a, "max")):
        try:
            f(x, lambda v: v)
            continue  # CPU accepts it (e.g. with a deprecation warning)
        except Exception as e:
            cpu_type = type(e)
        with pytest.raises(cpu_type):
            f(t, lambda v: v.to("tpu"))
    with pytest.raises(IndexError, match="shape mismatch"):
        t[torch.tensor([0, 1]).to("tpu"), torch.tensor([0, 1, 2]).to("tpu")]
    with pytest.raises(IndexError, match="too many indices"):
        t[torch.tensor([0]), torch.tensor([0]), torch.tensor([0])]
    with pytest.raises(IndexError):
        t[torch.ones(3, dtype=torch.bool).to("tpu")]



@pytest.mark.parametrize("shape", [(10, 0), (0, 0)])
def test_indexing_a_size_zero_dim_raises_at_the_op(shape, strict):
    # no index value needs reading: refused at the call, in Strict mode too, as CPU does
    x = torch.empty(shape, device="tpu")
    with pytest.raises(IndexError, match="index is out of bounds for dimension with size 0"):
        x[:, [0, 1]]
    with pytest.raises(IndexError, match="index is out of bounds for dimension with size 0"):
        x[:, [0, 1]] = 1.0
    assert x[:, torch.tensor([], dtype=torch.long, device="tpu")].shape == (shape[0], 0)  # no index: fine


def test_error_order_and_messages_as_cpu():
    for dev in ("cpu", "tpu"):
        a = torch.arange(4, device=dev)
        for v in ([], [1.0, 2.0, 3.0]):  # the values' shape is checked before their dtype
            with pytest.raises(RuntimeError, match="shape mismatch: value tensor of shape"):
                a[a > -1] = torch.tensor(v, device=dev)
        with pytest.raises(RuntimeError, match="Index put requires the source and destination dtypes match"):
            a[a > -1] = torch.ones(4, device=dev)
        x = torch.tensor([[1.0, 2.0], [4.0, 5.0]], device=dev)
        with pytest.raises(RuntimeError, match="Converting complex Scalar to non-complex type"):
            x.index_fill_(1, torch.tensor([0], device=dev), 1 + 1j)


BAD = [
    ("index_select", lambda t, i: t.index_select(0, i)),
    ("embedding", lambda t, i: F.embedding(i, t)),
    ("gather", lambda t, i: t.gather(0, i.view(-1, 1).expand(-1, 4).contiguous())),
    ("scatter_add", lambda t, i: t.scatter_add(0, i.view(-1, 1).expand(-1, 4).contiguous(), torch.ones(3, 4, device=t.device))),
    ("index_add", lambda t, i: t.index_add(0, i, torch.ones(3, 4, device=t.device))),
    ("index_add 1-d", lambda t, i: t[:, 0].index_add(0, i, torch.ones(3, device=t.device))),
    ("index", lambda t, i: t[i]),
    ("index_put", lambda t, i: t.index_put_((i,), torch.ones(3, 4, device=t.device), accumulate=True)),
    ("take", lambda t, i: t.take(i * 4)),
]


def cpu_error(f):
    """The exception CPU PyTorch raises for f (the reference for its type)."""
    with pytest.raises(Exception) as e:
        f(torch.randn(10, 4), torch.tensor([1, 12, 2]))
    return e.type


@pytest.mark.parametrize("name,f", BAD, ids=[b[0] for b in BAD])
def test_out_of_range_strict_raises_at_sync_and_keeps_others(name, f, strict):
    t = torch.randn(10, 4).to("tpu")
    keep = torch.randn(50).to("tpu")
    before = keep.cpu()
    i = torch.tensor([1, 12, 2]).to("tpu")
    with pytest.raises(cpu_error(f), match="12|48") as e:
        f(t, i)
        torch.tpu.synchronize()
    assert e.type is cpu_error(f)  # the exact class CPU raises, not a subclass
    torch.tpu.synchronize()  # the error was raised once; the device stays usable
    assert torch.equal(keep.cpu(), before)
    if name == "index_put":  # in place: t holds what the failed op wrote, and says so
        with pytest.raises(IndexError, match="12"):
            t.cpu()
    else:
        assert t.sum().item() == t.sum().item()


@pytest.mark.parametrize("name,f", BAD, ids=[b[0] for b in BAD])
def test_out_of_range_strict_raises_at_read_of_the_result(name, f, strict):
    t = torch.randn(10, 4).to("tpu")
    keep = torch.randn(50).to("tpu")
    i = torch.tensor([1, 12, 2]).to("tpu")
    r = f(t, i)  # queued: no error yet
    with pytest.raises(cpu_error(f), match="12|48"):
        r.cpu()  # the read that depends on the failed op raises its error
    with pytest.raises(cpu_error(f), match="12|48"):
        (r * 2).sum().item()  # and so does everything computed from it
    keep.sum().item()  # an unrelated read does not
    torch.tpu.synchronize()  # raised already: nothing left to raise


@pytest.mark.parametrize("name,f", BAD, ids=[b[0] for b in BAD])
def test_out_of_range_debug_raises_at_op(name, f):
    t = torch.randn(10, 4).to("tpu")
    i = torch.tensor([1, 12, 2]).to("tpu")
    with vtpu.eager_mode("debug"):
        with pytest.raises(cpu_error(f), match="out of bounds|out of range") as e:
            f(t, i)
        assert e.type is cpu_error(f)
    torch.tpu.synchronize()


def test_large_embedding_matches_cpu(native):
    w = torch.randn(32000, 64)
    idx = torch.randint(0, 32000, (8, 256))
    wt = w.to("tpu").requires_grad_()
    out = F.embedding(idx.to("tpu"), wt)
    same(out, F.embedding(idx, w))
    g = torch.randn(8, 256, 64)
    out.backward(g.to("tpu"))
    w2 = w.clone().requires_grad_()
    F.embedding(idx, w2).backward(g)
    same(wt.grad, w2.grad, 1e-5)
