"""Sparse tensors on "tpu": COO and the compressed layouts (CSR, CSC, BSR,
BSC). Their structure kernels are PyTorch's device-generic ones; every other
op runs on the CPU through the counted fallback on a sparse twin whose
members alias device memory. CPU PyTorch is the reference for every value,
structure (indices, nnz, coalesced flag), exception type and message.

Values are compared exactly where the tpu result is computed by the same
CPU kernel (the fallback) or is a copy; the autograd and matmul checks whose
dense half runs natively on the matrix engine use "highest" precision (6
bf16 passes, relative error ~1e-6 on every ISA path) and a 1e-5 tolerance."""

import warnings

import pytest
import torch

import vtpu
from test_cpu_rules import raises_as_cpu

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def sparse_input(shape=(5, 6), dtype=torch.float32, density=0.4, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g).to(dtype)
    keep = torch.rand(shape, generator=g) < density
    return torch.where(keep, x, torch.zeros((), dtype=dtype))


def uncoalesced():
    # duplicate coordinates, out of order: coalescing must sum them
    i = torch.tensor([[1, 0, 1, 2, 0], [2, 1, 2, 0, 1]])
    v = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    return torch.sparse_coo_tensor(i, v, (3, 3))


def assert_same_sparse(got, want):
    assert got.device.type == "tpu"
    assert got.layout == want.layout and got.dtype == want.dtype and got.shape == want.shape
    host = got.cpu()
    if want.layout == torch.sparse_coo:
        assert host.is_coalesced() == want.is_coalesced()
        assert torch.equal(host._indices(), want._indices())
        assert torch.equal(host._values(), want._values())
    else:
        assert torch.equal(host.to_dense(), want.to_dense())
        assert torch.equal(host.values(), want.values())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.complex64, torch.bool])
def test_coo_round_trip_keeps_structure(dtype):
    s = sparse_input(dtype=dtype).to_sparse()
    t = s.to("tpu")
    assert t.is_sparse and t._indices().device.type == "tpu" and t._values().device.type == "tpu"
    assert (t._nnz(), t.sparse_dim(), t.dense_dim()) == (s._nnz(), s.sparse_dim(), s.dense_dim())
    assert_same_sparse(t, s)
    u = uncoalesced()
    assert_same_sparse(u.to("tpu"), u)  # not coalesced on the way


def test_coo_built_on_device_and_factories():
    i, v = torch.tensor([[0, 1, 1], [2, 0, 2]]), torch.tensor([3.0, 4.0, 5.0])
    t = torch.sparse_coo_tensor(i.to("tpu"), v.to("tpu"), (2, 3))
    assert_same_sparse(t, torch.sparse_coo_tensor(i, v, (2, 3)))
    z = torch.zeros(4, 5, layout=torch.sparse_coo, device="tpu")
    assert z.device.type == "tpu" and z._nnz() == 0 and torch.equal(z.to_dense().cpu(), torch.zeros(4, 5))
    e = torch.empty(2, 3, layout=torch.sparse_coo, device="tpu")
    assert e.is_sparse and e._nnz() == 0


@pytest.mark.parametrize("layout", ["coo", "csr", "csc", "bsr", "bsc"])
def test_dense_to_sparse_and_back_match_cpu(layout):
    x = sparse_input((6, 4))
    conv = {"coo": lambda a: a.to_sparse(), "csr": lambda a: a.to_sparse_csr(), "csc": lambda a: a.to_sparse_csc(),
            "bsr": lambda a: a.to_sparse_bsr((2, 2)), "bsc": lambda a: a.to_sparse_bsc((2, 2))}[layout]
    want = conv(x)
    got = conv(x.to("tpu"))
    assert_same_sparse(got, want)
    assert torch.equal(got.to_dense().cpu(), x)


def test_hybrid_coo_with_dense_dims():
    x = sparse_input((4, 3, 2))
    want, got = x.to_sparse(1), x.to("tpu").to_sparse(1)
    assert got.dense_dim() == 2
    assert_same_sparse(got, want)


def test_coalesce_sums_duplicates_like_cpu():
    u = uncoalesced()
    got = u.to("tpu").coalesce()
    assert_same_sparse(got, u.coalesce())
    assert got.is_coalesced()


@pytest.mark.parametrize("name", ["add", "sub", "mul", "add_dense", "mul_scalar", "neg", "t", "sum", "sum_dim",
                                  "pow", "abs", "index_select", "sparse_mask"])
def test_coo_ops_match_cpu(name):
    a, b = sparse_input(seed=1).to_sparse(), sparse_input(seed=2).to_sparse()
    d = torch.randn(5, 6, generator=torch.Generator().manual_seed(3))
    f = {"add": lambda a, b, d: a + b, "sub": lambda a, b, d: a - b, "mul": lambda a, b, d: a * b,
         "add_dense": lambda a, b, d: d + a, "mul_scalar": lambda a, b, d: a * 2.5, "neg": lambda a, b, d: -a,
         "t": lambda a, b, d: a.t(), "sum": lambda a, b, d: torch.sparse.sum(a),
         "sum_dim": lambda a, b, d: torch.sparse.sum(a, dim=1), "pow": lambda a, b, d: a.pow(2),
         "abs": lambda a, b, d: a.abs(),
         "index_select": lambda a, b, d: a.index_select(1, torch.tensor([4, 0, 2], device=a.device)),
         "sparse_mask": lambda a, b, d: d.sparse_mask(a.coalesce())}[name]
    want = f(a, b, d)
    got = f(a.to("tpu"), b.to("tpu"), d.to("tpu"))
    assert got.device.type == "tpu" and got.layout == want.layout
    if want.layout == torch.strided:
        # a dense result: sums of the same values, reduced natively in another order
        torch.testing.assert_close(got.cpu(), want, rtol=1e-6, atol=1e-6)
    else:
        assert_same_sparse(got, want)


def test_in_place_ops_write_the_device_tensor():
    s = sparse_input().to_sparse()
    t = s.to("tpu")
    vs, vt = s._values(), t._values()
    s.mul_(3)
    t.mul_(3)
    assert_same_sparse(t, s)
    assert torch.equal(vt.cpu(), vs)  # values taken before still alias them, as on CPU
    # a structural change (nnz grows): the tpu tensor takes the new indices and values
    o = sparse_input(seed=5).to_sparse()
    s.add_(o)
    t.add_(o.to("tpu"))
    assert t._nnz() == s._nnz()
    assert_same_sparse(t, s)
    t.zero_()
    s.zero_()
    assert_same_sparse(t, s)


def test_out_and_copy_into_sparse_tpu_tensors():
    a, b = sparse_input(seed=1).to_sparse(), sparse_input(seed=2).to_sparse()
    out = torch.zeros(5, 6, layout=torch.sparse_coo, device="tpu")
    r = torch.add(a.to("tpu"), b.to("tpu"), out=out)
    assert r is out
    assert_same_sparse(out, torch.add(a, b))
    dst = torch.zeros(5, 6, layout=torch.sparse_coo, device="tpu")
    dst.copy_(a)  # from a CPU sparse tensor
    assert_same_sparse(dst, a)
    c = a.to("tpu").clone()
    assert_same_sparse(c, a)


def test_writes_through_values_reach_the_sparse_tensor():
    t = sparse_input().to_sparse().to("tpu")
    t._values().fill_(7.0)
    assert torch.all(t.cpu()._values() == 7.0)


def test_csr_members_and_matmul():
    x = sparse_input((6, 5))
    c, tc = x.to_sparse_csr(), x.to("tpu").to_sparse_csr()
    for m in ("crow_indices", "col_indices", "values"):
        assert getattr(tc, m)().device.type == "tpu"
        assert torch.equal(getattr(tc, m)().cpu(), getattr(c, m)())
    d = torch.randn(5, 3, generator=torch.Generator().manual_seed(4))
    assert torch.equal((tc @ d.to("tpu")).cpu(), c @ d)  # the CPU kernel through the fallback
    m = sparse_input((4, 3), seed=6).to_sparse_csr()
    p, q = torch.randn(4, 5), torch.randn(5, 3)
    want = torch.sparse.sampled_addmm(m, p, q)
    got = torch.sparse.sampled_addmm(m.to("tpu"), p.to("tpu"), q.to("tpu"))
    assert got.layout == torch.sparse_csr
    torch.testing.assert_close(got.to_dense().cpu(), want.to_dense())
    assert_same_sparse(tc.t().to_sparse_coo(), c.t().to_sparse_coo())


def test_autograd_through_sparse_mm_matches_cpu():
    x = sparse_input((4, 5))
    d = torch.randn(5, 3, generator=torch.Generator().manual_seed(7))
    sa, sd = x.to_sparse().requires_grad_(), d.clone().requires_grad_()
    torch.sparse.mm(sa, sd).pow(2).sum().backward()
    ta, td = x.to("tpu").to_sparse().requires_grad_(), d.to("tpu").requires_grad_()
    with torch.tpu.precision("highest"):
        torch.sparse.mm(ta, td).pow(2).sum().backward()
    assert ta.grad.is_sparse and ta.grad.device.type == "tpu"
    torch.testing.assert_close(ta.grad.cpu().to_dense(), sa.grad.to_dense(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(td.grad.cpu(), sd.grad, rtol=1e-5, atol=1e-5)
    # to_dense's backward gives a sparse gradient on the device
    w = x.to("tpu").to_sparse().requires_grad_()
    (w.to_dense() * 2).sum().backward()
    assert w.grad.device.type == "tpu"
    assert torch.equal(w.grad.cpu().to_dense(), torch.where(x != 0, 2.0, 0.0))


def test_bad_input_raises_as_cpu_and_the_device_stays_usable():
    a = sparse_input().to_sparse()
    raises_as_cpu(lambda dev: a.to(dev) * torch.randn(5, 7, device=dev).to_sparse())
    raises_as_cpu(lambda dev: torch.sparse_coo_tensor(torch.tensor([[0, 9]], device=dev),
                                                      torch.ones(2, device=dev), (3,), check_invariants=True))
    raises_as_cpu(lambda dev: torch.sparse.mm(a.to(dev), torch.randn(4, 2, device=dev)))
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.sparse.mm(a.to("tpu"), torch.randn(6, 2))
    assert torch.ones(2, 2, device="tpu").sum().item() == 4.0


def test_sparse_ops_are_counted_and_obey_the_fallback_switch():
    vtpu.reset_fallback_report()
    u = uncoalesced().to("tpu")
    u.coalesce()
    assert vtpu.fallback_report().get("aten::_coalesce", 0) >= 1
    with vtpu.cpu_fallback(False):
        with pytest.raises(NotImplementedError, match="not implemented for TPU"):
            uncoalesced().to("tpu").coalesce()
        assert u._nnz() == 5  # structure kernels are native: no fallback needed


def test_sparse_out_and_in_place_results_may_grow():
    # the CPU kernel grows the members of an out= or in-place sparse result
    x = sparse_input(seed=8).to_sparse()
    want = torch.abs(x, out=torch.sparse_coo_tensor((5, 6)))
    out = torch.sparse_coo_tensor((5, 6), device="tpu")
    r = torch.abs(x.to("tpu"), out=out)
    assert r is out
    assert_same_sparse(out, want)
    acc, tacc = torch.sparse_coo_tensor((5, 6)), torch.sparse_coo_tensor((5, 6), device="tpu")
    acc.add_(x)
    tacc.add_(x.to("tpu"))
    assert_same_sparse(tacc, acc)


def test_coalesced_construction_is_validated_as_on_cpu():
    i, v = torch.tensor([[0, 1], [0, 1]]), torch.ones(2)
    t = torch.sparse_coo_tensor(i.to("tpu"), v.to("tpu"), (2, 2), check_invariants=True, is_coalesced=True)
    assert_same_sparse(t, torch.sparse_coo_tensor(i, v, (2, 2), check_invariants=True, is_coalesced=True))
    bad = torch.tensor([[1, 0], [1, 0]])  # not sorted: not coalesced
    raises_as_cpu(lambda dev: torch.sparse_coo_tensor(bad.to(dev), v.to(dev), (2, 2), check_invariants=True,
                                                      is_coalesced=True))


def test_nonzero_is_column_major_as_on_cpu():
    # COO indices built from nonzero().t() are contiguous on CPU; CSR conversion relies on it
    x = (sparse_input((3, 4), seed=9) != 0).to(torch.int8)
    want, got = x.nonzero(), x.to("tpu").nonzero()
    assert got.stride() == want.stride() and torch.equal(got.cpu(), want)
    vals = torch.arange(float(want.shape[0]))
    a = torch.sparse_coo_tensor(want.t(), vals, x.shape)._coalesced_(True).to_sparse_csr()
    b = torch.sparse_coo_tensor(got.t(), vals.to("tpu"), x.shape)._coalesced_(True).to_sparse_csr()
    assert_same_sparse(b, a)
    assert torch.equal(b.crow_indices().cpu(), a.crow_indices())
