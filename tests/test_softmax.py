"""Native softmax, log_softmax and the losses built on them against CPU
PyTorch: forward and gradients, every float dtype, strided dims and
non-contiguous inputs, empty tensors, weights, ignore_index, label
smoothing, probability targets, and PyTorch's errors (a bad class index is
an IndexError at the next synchronisation, or at the op in Debug mode)."""

import pytest
import torch
import torch.nn.functional as F

import vtpu
from conftest import make

# The aten ops this family implements natively.
MINE = {
    f"aten::{n}"
    for n in "_softmax _log_softmax _softmax_backward_data _log_softmax_backward_data nll_loss_forward "
    "nll_loss_backward nll_loss2d_forward nll_loss2d_backward mse_loss mse_loss_backward smooth_l1_loss "
    "smooth_l1_loss_backward huber_loss huber_loss_backward binary_cross_entropy binary_cross_entropy_backward "
    "binary_cross_entropy_with_logits".split()
}
FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
# Softmax and losses compute in float32 for bf16/f16 inputs (as CPU PyTorch) and round once;
# the tolerances are a couple of units in the last place of each dtype.
TOL = {torch.bfloat16: 2e-2, torch.float16: 2e-3, torch.float32: 2e-5, torch.float64: 1e-12}


def close(got, want, tol=None):
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    t = tol if tol is not None else TOL[want.dtype]
    torch.testing.assert_close(got, want, rtol=t, atol=t, equal_nan=True)


def both(x, requires_grad=True):
    """The CPU tensor and its tpu copy, both leaves that record gradients."""
    a = x.clone().requires_grad_(requires_grad)
    b = x.to("tpu").requires_grad_(requires_grad)
    return a, b


# ------------------------------------------------------------------ softmax


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("dim", [-1, 0, 1, 2])
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_softmax_forward_backward(dtype, dim, log, layout):
    x = make((6, 37, 19), dtype, 1, low=-6, high=6)
    if layout == "transposed":
        x = x.transpose(0, 2).contiguous().transpose(0, 2)
    a, b = both(x)
    fn = F.log_softmax if log else F.softmax
    g = make((6, 37, 19), dtype, 2, low=-1, high=1)
    with vtpu.cpu_fallback(False):
        yb = fn(b, dim)
        yb.backward(g.to("tpu"))
    ya = fn(a, dim)
    ya.backward(g)
    close(yb, ya.detach())
    close(b.grad, a.grad)


@pytest.mark.parametrize("shape,dim", [((8, 4, 33, 65), 1), ((2, 1000), 1), ((1000, 3), 0), ((5,), 0), ((), 0)])
def test_softmax_shapes(shape, dim):
    x = make(shape, torch.float32, 3, low=-20, high=20)
    a, b = both(x)
    with vtpu.cpu_fallback(False):
        yb = F.softmax(b, dim)
        (yb * yb).sum().backward()
    ya = F.softmax(a, dim)
    (ya * ya).sum().backward()
    close(yb, ya.detach())
    close(b.grad, a.grad)


def test_softmax_strided_view_and_dtype_arg():
    x = make((16, 40), torch.float32, 4, low=-5, high=5)
    t = x.to("tpu")
    with vtpu.cpu_fallback(False):
        close(F.softmax(t[:, ::3], -1), F.softmax(x[:, ::3], -1))
        close(F.log_softmax(t.t(), 0), F.log_softmax(x.t(), 0))
        close(F.softmax(t.bfloat16(), -1, dtype=torch.float32), F.softmax(x.bfloat16(), -1, dtype=torch.float32))
        out = torch.empty(3, device="tpu")
        torch.ops.aten._log_softmax.out(t, 1, False, out=out)
        close(out, F.log_softmax(x, 1))
        close(torch.softmax(t, 1), torch.softmax(x, 1))


def test_softmax_half_to_float():
    x = make((4, 50), torch.bfloat16, 5, low=-5, high=5)
    with vtpu.cpu_fallback(False):
        y = torch._softmax(x.to("tpu"), -1, True)
        ly = torch._log_softmax(x.to("tpu").half(), -1, True)
    assert y.dtype == torch.float32 and ly.dtype == torch.float32
    close(y, torch.softmax(x.float(), -1), tol=1e-5)
    close(ly, torch.log_softmax(x.half().float(), -1), tol=1e-5)


def test_softmax_specials_and_empty():
    x = torch.tensor([[float("-inf")] * 4, [0.0, float("-inf"), 1.0, 2.0], [1e4, 0.0, -1e4, 5.0]])
    with vtpu.cpu_fallback(False):
        close(F.softmax(x.to("tpu"), -1), F.softmax(x, -1))
        close(F.log_softmax(x.to("tpu"), -1), F.log_softmax(x, -1))
        e = torch.empty(0, 7)
        close(F.softmax(e.to("tpu"), -1), F.softmax(e, -1))
        close(F.log_softmax(e.to("tpu"), 0), F.log_softmax(e, 0))


def test_softmax_errors():
    with pytest.raises(IndexError, match="Dimension out of range"):
        F.softmax(torch.ones(3, 4, device="tpu"), 2)
    with pytest.raises(RuntimeError):
        torch._softmax(torch.ones(3, 4, device="tpu"), 1, True)


def test_softmax_runs_natively():
    vtpu.reset_fallback_report()
    x = torch.randn(8, 8, 64, 64, device="tpu", requires_grad=True)
    F.softmax(x, -1).sum().backward()
    F.log_softmax(x, 1).sum().backward()
    torch.tpu.synchronize()
    report = vtpu.fallback_report()
    assert not any("softmax" in k for k in report), report


# ------------------------------------------------------------------ cross_entropy, nll_loss


def ce_case(shape, dtype, seed, **kw):
    C = shape[1] if len(shape) > 1 else shape[0]
    x = make(shape, dtype, seed, low=-4, high=4)
    tshape = (shape[0],) + tuple(shape[2:]) if len(shape) > 1 else ()
    g = torch.Generator().manual_seed(seed)
    t = torch.randint(0, C, tshape, generator=g)
    if "ignore_index" in kw and t.dim() > 0:
        t.view(-1)[::4] = kw["ignore_index"]
    return x, t


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(33, 17), (17,), (4, 5, 6, 7), (3, 5, 11), (2, 3, 4, 2, 3)], ids=str)
@pytest.mark.parametrize("options", ["plain", "weight", "ignore", "weight+ignore"])
def test_cross_entropy_class_indices(dtype, reduction, shape, options):
    kw = {}
    x, t = ce_case(shape, dtype, 7, **({"ignore_index": 2} if "ignore" in options else {}))
    C = shape[1] if len(shape) > 1 else shape[0]
    if "ignore" in options:
        kw["ignore_index"] = 2
    w = make((C,), dtype, 8, low=0.1, high=2) if "weight" in options else None
    a, b = both(x)
    with vtpu.cpu_fallback(False):
        lb = F.cross_entropy(b, t.to("tpu"), weight=None if w is None else w.to("tpu"), reduction=reduction, **kw)
        lb.sum().backward()
    la = F.cross_entropy(a, t, weight=w, reduction=reduction, **kw)
    la.sum().backward()
    tol = TOL[dtype] * (4 if dtype in (torch.bfloat16, torch.float16) else 1)
    close(lb, la.detach(), tol)
    close(b.grad, a.grad, tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(33, 17), (4, 5, 6, 7)], ids=str)
def test_cross_entropy_label_smoothing(dtype, reduction, shape):
    x, t = ce_case(shape, dtype, 9, ignore_index=1)
    C = shape[1]
    w = make((C,), dtype, 10, low=0.1, high=2)
    a, b = both(x)
    # label smoothing with class indices also reaches masked_fill_ / masked_select / gather
    vtpu.reset_fallback_report()
    lb = F.cross_entropy(b, t.to("tpu"), weight=w.to("tpu"), ignore_index=1, reduction=reduction,
                         label_smoothing=0.2)
    lb.sum().backward()
    torch.tpu.synchronize()
    assert vtpu.fallback_report() == {}
    la = F.cross_entropy(a, t, weight=w, ignore_index=1, reduction=reduction, label_smoothing=0.2)
    la.sum().backward()
    tol = TOL[dtype] * (4 if dtype == torch.bfloat16 else 1)
    close(lb, la.detach(), tol)
    close(b.grad, a.grad, tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_probability_targets(dtype, reduction, smoothing):
    x = make((12, 9, 5), dtype, 11, low=-3, high=3)
    p = torch.softmax(make((12, 9, 5), torch.float32, 12, low=-2, high=2), 1).to(dtype)
    w = make((9,), dtype, 13, low=0.5, high=1.5)
    a, b = both(x)
    with vtpu.cpu_fallback(False):
        lb = F.cross_entropy(b, p.to("tpu"), weight=w.to("tpu"), reduction=reduction, label_smoothing=smoothing)
        lb.sum().backward()
    la = F.cross_entropy(a, p, weight=w, reduction=reduction, label_smoothing=smoothing)
    la.sum().backward()
    tol = TOL[dtype] * (4 if dtype == torch.bfloat16 else 1)
    close(lb, la.detach(), tol)
    close(b.grad, a.grad, tol)


def test_nll_loss_direct_and_uint8_target():
    x = make((10, 6), torch.float32, 14, low=-3, high=0)
    t = torch.randint(0, 6, (10,), generator=torch.Generator().manual_seed(1))
    with vtpu.cpu_fallback(False):
        close(F.nll_loss(x.to("tpu"), t.to("tpu")), F.nll_loss(x, t))
        close(F.nll_loss(x.to("tpu"), t.to("tpu"), reduction="none"), F.nll_loss(x, t, reduction="none"))
        out, tw = torch.ops.aten.nll_loss_forward(x.to("tpu"), t.byte().to("tpu"), None, 2, -100)
    wo, wtw = torch.ops.aten.nll_loss_forward(x, t.byte(), None, 2, -100)
    close(out, wo)
    close(tw, wtw)


def test_nll_loss_all_ignored_and_empty():
    x = make((4, 3), torch.float32, 15)
    t = torch.full((4,), -100)
    with vtpu.cpu_fallback(False):
        close(F.nll_loss(x.to("tpu"), t.to("tpu")), F.nll_loss(x, t))
        e = torch.empty(0, 3)
        te = torch.empty(0, dtype=torch.long)
        close(F.cross_entropy(e.to("tpu"), te.to("tpu")), F.cross_entropy(e, te))
        close(F.cross_entropy(e.to("tpu"), te.to("tpu"), reduction="sum"), F.cross_entropy(e, te, reduction="sum"))


def test_bad_target_raises_index_error_at_sync(strict):
    x = torch.randn(4, 10, device="tpu")
    t = torch.tensor([1, 12, 3, 4], device="tpu")
    loss = F.cross_entropy(x, t)  # Strict: queued, reported at the next synchronisation
    with pytest.raises(IndexError, match="Target 12 is out of bounds."):
        loss.cpu()
    torch.tpu.synchronize()  # reported once, the device stays usable
    close(F.cross_entropy(x, t.clamp(max=9)), F.cross_entropy(x.cpu(), t.cpu().clamp(max=9)))


def test_bad_target_raises_at_the_op_in_debug_mode():
    x = torch.randn(4, 10, device="tpu")
    t = torch.tensor([1, -5, 3, 4], device="tpu")
    with vtpu.eager_mode("debug"):
        with pytest.raises(IndexError, match="Target -5 is out of bounds."):
            F.nll_loss(x, t)
        with pytest.raises(IndexError, match="Target -5 is out of bounds."):
            F.nll_loss(x.view(2, 10, 2), t.view(2, 2))


def test_nll_loss_shape_errors():
    x = torch.randn(4, 10, device="tpu")
    with pytest.raises(ValueError):
        F.nll_loss(x, torch.zeros(3, dtype=torch.long, device="tpu"))
    with pytest.raises(RuntimeError, match="weight tensor should be defined"):
        F.nll_loss(x, torch.zeros(4, dtype=torch.long, device="tpu"), weight=torch.ones(3, device="tpu"))
    with pytest.raises(RuntimeError, match="expected target dtype to be Long or Byte"):
        F.nll_loss(x, torch.zeros(4, dtype=torch.int32, device="tpu"))


# ------------------------------------------------------------------ pointwise losses


POINTWISE = {
    "mse": lambda i, t, r: F.mse_loss(i, t, reduction=r),
    "smooth_l1": lambda i, t, r: F.smooth_l1_loss(i, t, reduction=r, beta=0.6),
    "huber": lambda i, t, r: F.huber_loss(i, t, reduction=r, delta=1.4),
}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("name", list(POINTWISE))
def test_regression_losses(dtype, reduction, name):
    x = make((7, 33, 5), dtype, 16, low=-3, high=3)
    y = make((7, 33, 5), dtype, 17, low=-3, high=3)
    a, b = both(x)
    ta, tb = both(y)
    fn = POINTWISE[name]
    with vtpu.cpu_fallback(False):
        lb = fn(b, tb, reduction)
        lb.sum().backward()
    la = fn(a, ta, reduction)
    la.sum().backward()
    tol = TOL[dtype] * (4 if dtype in (torch.bfloat16, torch.float16) else 1)
    close(lb, la.detach(), tol)
    close(b.grad, a.grad, tol)
    close(tb.grad, ta.grad, tol)


def test_regression_losses_non_contiguous_and_broadcast():
    x = make((20, 30), torch.float32, 18)
    y = make((30, 20), torch.float32, 19).t()
    with vtpu.cpu_fallback(False):
        for fn in POINTWISE.values():
            close(fn(x.to("tpu")[:, ::2], y.to("tpu")[:, ::2], "mean"), fn(x[:, ::2], y[:, ::2], "mean"))
            close(fn(x.to("tpu"), y.to("tpu"), "none"), fn(x, y, "none"))
        close(torch.ops.aten.mse_loss(x.to("tpu")[:, :1], y.to("tpu")[:1], 0), torch.ops.aten.mse_loss(x[:, :1], y[:1], 0))
        close(F.smooth_l1_loss(x.to("tpu"), y.to("tpu"), beta=0.0), F.smooth_l1_loss(x, y, beta=0.0))
        e = torch.empty(0, 3)
        close(F.mse_loss(e.to("tpu"), e.to("tpu")), F.mse_loss(e, e))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_binary_cross_entropy(dtype, reduction, weighted):
    x = make((9, 13), dtype, 20, low=0.01, high=0.99)
    y = make((9, 13), dtype, 21, low=0, high=1)
    w = make((13,), dtype, 22, low=0.2, high=2) if weighted else None
    a, b = both(x)
    with vtpu.cpu_fallback(False):
        lb = F.binary_cross_entropy(b, y.to("tpu"), weight=None if w is None else w.to("tpu"), reduction=reduction)
        lb.sum().backward()
    la = F.binary_cross_entropy(a, y, weight=w, reduction=reduction)
    la.sum().backward()
    tol = TOL[dtype] * (4 if dtype in (torch.bfloat16, torch.float16) else 1)
    close(lb, la.detach(), tol)
    close(b.grad, a.grad, tol)


def test_binary_cross_entropy_clamps_and_range_error():
    x = torch.tensor([0.0, 1.0, 0.5, 1e-30])
    y = torch.tensor([1.0, 0.0, 0.5, 1.0])
    with vtpu.cpu_fallback(False):
        close(F.binary_cross_entropy(x.to("tpu"), y.to("tpu"), reduction="none"),
              F.binary_cross_entropy(x, y, reduction="none"))
    with pytest.raises(RuntimeError, match="all elements of input should be between 0 and 1"):
        F.binary_cross_entropy(torch.tensor([1.5], device="tpu"), torch.tensor([1.0], device="tpu")).cpu()
    torch.tpu.synchronize()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("options", ["plain", "weight", "pos_weight", "both"])
def test_binary_cross_entropy_with_logits(dtype, reduction, options):
    x = make((11, 7), dtype, 23, low=-30, high=30)
    y = make((11, 7), dtype, 24, low=0, high=1)
    w = make((7,), dtype, 25, low=0.2, high=2) if options in ("weight", "both") else None
    pw = make((7,), dtype, 26, low=0.5, high=3) if options in ("pos_weight", "both") else None
    a, b = both(x)
    with vtpu.cpu_fallback(False):
        lb = F.binary_cross_entropy_with_logits(b, y.to("tpu"), weight=None if w is None else w.to("tpu"),
                                                pos_weight=None if pw is None else pw.to("tpu"), reduction=reduction)
        lb.sum().backward()
    la = F.binary_cross_entropy_with_logits(a, y, weight=w, pos_weight=pw, reduction=reduction)
    la.sum().backward()
    tol = TOL[dtype] * (4 if dtype == torch.bfloat16 else 1)
    close(lb, la.detach(), tol)
    close(b.grad, a.grad, tol)


def test_losses_run_natively():
    vtpu.reset_fallback_report()
    x = torch.randn(16, 10, device="tpu", requires_grad=True)
    t = torch.randint(0, 10, (16,)).to("tpu")
    p = torch.rand(16, 10, device="tpu")
    F.cross_entropy(x, t, label_smoothing=0.1).backward()
    F.cross_entropy(x.view(4, 10, 4), t.view(4, 4)).backward()
    F.mse_loss(x, p).backward()
    F.smooth_l1_loss(x, p).backward()
    F.huber_loss(x, p).backward()
    F.binary_cross_entropy(torch.sigmoid(x), p).backward()
    F.binary_cross_entropy_with_logits(x, p, pos_weight=torch.ones(10, device="tpu")).backward()
    torch.tpu.synchronize()
    report = vtpu.fallback_report()
    assert report == {}, report
