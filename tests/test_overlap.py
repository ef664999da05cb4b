"""Outputs that overlap inputs or themselves. Where CPU PyTorch refuses
(at::assert_no_internal_overlap / assert_no_partial_overlap /
assert_no_overlap), "tpu" refuses with the same exception and message and
writes nothing; where CPU allows the op, "tpu" computes what the op means
(the inputs as they were before it ran), in Strict and in Debug mode."""

import pytest
import torch

PARTIAL = "some elements of the input tensor and the written-to tensor refer to a single memory location"
INTERNAL = "more than one element of the written-to tensor refers to a single memory location"


def _ar(dev, n=10):
    return torch.arange(float(n), device=dev)


def _idx(dev, *v):
    return torch.tensor(v, device=dev)


# Each case builds its tensors on `dev` and runs the op; it returns what to
# compare (the tensors it wrote).
REFUSED = {
    "expanded add_": (INTERNAL, lambda dev: torch.zeros(1, device=dev).expand(4).add_(1)),
    "mul out partial": (PARTIAL, lambda dev: (lambda x: torch.mul(x[:-1], 2, out=x[1:]))(_ar(dev))),
    "index_select out=self": (PARTIAL, lambda dev: (lambda x: torch.index_select(x, 0, _idx(dev, 0, 1), out=x))(_ar(dev))),
    "index_select out=self same shape": (
        PARTIAL, lambda dev: (lambda x: torch.index_select(x, 0, torch.arange(10, device=dev), out=x))(_ar(dev))),
    "exp out=expanded": (INTERNAL, lambda dev: torch.exp(torch.ones(4, device=dev), out=torch.zeros(1, device=dev).expand(4))),
    "add_ transposed self": (PARTIAL, lambda dev: (lambda x: x.add_(x.t()))(torch.randn(3, 3).to(dev))),
    "add_ own row": (PARTIAL, lambda dev: (lambda x: x.add_(x[0]))(torch.randn(3, 4).to(dev))),
    "gather out=self": (PARTIAL, lambda dev: (lambda x: torch.gather(x, 0, torch.zeros(10, dtype=torch.long, device=dev), out=x))(_ar(dev))),
    "cat out=input": (PARTIAL, lambda dev: (lambda x: torch.cat([x[:5], x[5:]], out=x))(_ar(dev))),
    "cat out=input resized": (PARTIAL, lambda dev: (lambda x: torch.cat([x, x], out=x))(_ar(dev))),
    "copy_ into expanded": (INTERNAL, lambda dev: torch.zeros(1, device=dev).expand(4).copy_(torch.ones(4, device=dev))),
    "mul_ expanded": (INTERNAL, lambda dev: torch.zeros(1, device=dev).expand(4).mul_(2)),
    "copy_ shifted": (PARTIAL, lambda dev: (lambda x: x[1:].copy_(x[:-1]))(_ar(dev))),
    "copy_ transposed": (PARTIAL, lambda dev: (lambda x: x.copy_(x.t()))(torch.randn(4, 4).to(dev))),
    "cumsum out partial": (PARTIAL, lambda dev: (lambda x: torch.cumsum(x[:-1], 0, out=x[1:]))(_ar(dev))),
    "clamp out partial": (PARTIAL, lambda dev: (lambda x: torch.clamp(x[:-1], 0, out=x[1:]))(_ar(dev))),
    "pow out partial": (PARTIAL, lambda dev: (lambda x: torch.pow(x[:-1], 2, out=x[1:]))(_ar(dev))),
    "lerp_ partial": (PARTIAL, lambda dev: (lambda x: x[1:].lerp_(x[:-1], 0.5))(_ar(dev))),
    "addcmul_ partial": (PARTIAL, lambda dev: (lambda x: x[1:].addcmul_(x[:-1], x[1:]))(_ar(dev))),
    "where out partial": (PARTIAL, lambda dev: (lambda x: torch.where(x[:-1] > 3, x[:-1], x[1:], out=x[1:]))(_ar(dev))),
    "take out=self": (PARTIAL, lambda dev: (lambda x: torch.take(x, torch.arange(5, device=dev), out=x[:5]))(_ar(dev))),
    "masked_select out=self": (PARTIAL, lambda dev: (lambda x: torch.masked_select(x, x > -1, out=x))(_ar(dev))),
    "scatter_ src=self": (PARTIAL, lambda dev: (lambda x: x.scatter_(0, torch.arange(10, device=dev), x))(_ar(dev))),
    "index_add_ source=self": (PARTIAL, lambda dev: (lambda x: x.index_add_(0, torch.arange(10, device=dev), x))(_ar(dev))),
    "index_copy_ source=self": (PARTIAL, lambda dev: (lambda x: x.index_copy_(0, torch.arange(10, device=dev), x))(_ar(dev))),
    "normal_ expanded": (INTERNAL, lambda dev: torch.zeros(1, device=dev).expand(4).normal_()),
    "uniform_ expanded": (INTERNAL, lambda dev: torch.zeros(1, device=dev).expand(4).uniform_()),
    "masked_scatter_ expanded": (
        INTERNAL, lambda dev: torch.zeros(1, device=dev).expand(4).masked_scatter_(
            torch.tensor([True, False, False, False], device=dev), torch.ones(4, device=dev))),
    "foreach add_ partial": (PARTIAL, lambda dev: (lambda x: torch._foreach_add_([x[1:]], [x[:-1]]))(_ar(dev))),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_as_on_cpu(case, mode):
    msg, f = REFUSED[case]
    with pytest.raises(RuntimeError, match=msg):  # the reference: CPU refuses it
        f("cpu")
    with pytest.raises(RuntimeError, match=msg):
        f("tpu")
    torch.tpu.synchronize()  # nothing was queued that could fail later


def test_refused_op_writes_nothing(mode):
    x = torch.arange(10.0, device="tpu")
    with pytest.raises(RuntimeError, match=PARTIAL):
        torch.mul(x[:-1], 2, out=x[1:])
    with pytest.raises(RuntimeError, match=PARTIAL):
        torch.index_select(x, 0, torch.tensor([0, 1], device="tpu"), out=x)
    assert x.shape == (10,)  # refused before out= was resized
    assert torch.equal(x.cpu(), torch.arange(10.0))


# Allowed on CPU: the result is the op applied to the inputs as they were
# (CPU itself gets some of these wrong: bmm, mv, addmv_, sum and mean into a
# row of their input, large mm). Each case: the op on an aliasing tensor x,
# and the op's value computed from a fresh copy of x.
L = torch.long
ALLOWED = {
    "add out=self": (lambda x: torch.add(x, 1, out=x), lambda x: x + 1),
    "mm out=a": (lambda x: torch.mm(x, x, out=x), lambda x: x @ x),
    "addmm_ self": (lambda x: x.addmm_(x, x), lambda x: x + x @ x),
    "bmm out=a": (lambda x: torch.bmm(x.view(1, 6, 6), x.view(1, 6, 6), out=x.view(1, 6, 6)), lambda x: (x @ x).view(1, 6, 6)),
    "mv out=vec": (lambda x: torch.mv(x, x[0], out=x[0]), lambda x: x @ x[0]),
    "addmv_ self": (lambda x: x[0].addmv_(x, x[0]), lambda x: x[0] + x @ x[0]),
    "softmax out=self": (lambda x: torch.ops.aten._softmax.out(x, 1, False, out=x), lambda x: torch.softmax(x, 1)),
    "log_softmax out=self": (lambda x: torch.ops.aten._log_softmax.out(x, 1, False, out=x), lambda x: torch.log_softmax(x, 1)),
    "softmax out partial": (lambda x: torch.ops.aten._softmax.out(x[:-1], 1, False, out=x[1:]), lambda x: torch.softmax(x[:-1], 1)),
    "softmax_backward out=grad": (lambda x: torch.ops.aten._softmax_backward_data.out(x, x.softmax(1), 1, x.dtype, grad_input=x),
                                  lambda x: torch.ops.aten._softmax_backward_data(x, x.softmax(1), 1, x.dtype)),
    "log_softmax_backward out=grad": (lambda x: torch.ops.aten._log_softmax_backward_data.out(x, x.log_softmax(0), 0, x.dtype, out=x),
                                      lambda x: torch.ops.aten._log_softmax_backward_data(x, x.log_softmax(0), 0, x.dtype)),
    "softmax_backward out=output": (lambda x: torch.ops.aten._softmax_backward_data.out(x.sin(), x, 1, x.dtype, grad_input=x),
                                    lambda x: torch.ops.aten._softmax_backward_data(x.sin(), x, 1, x.dtype)),
    "sum out=row": (lambda x: torch.sum(x, 0, keepdim=True, out=x[:1]), lambda x: x.sum(0, keepdim=True)),
    "mean out=row": (lambda x: torch.mean(x, 0, keepdim=True, out=x[:1]), lambda x: x.mean(0, keepdim=True)),
    "amax out=column": (lambda x: torch.amax(x, 1, keepdim=True, out=x[:, :1]), lambda x: x.amax(1, keepdim=True)),
    "max.dim out alias": (lambda x: torch.max(x, 1, keepdim=True, out=(x[:, :1], torch.empty(6, 1, dtype=L, device=x.device)))[0],
                          lambda x: x.max(1, keepdim=True)[0]),
    "cumsum out=self": (lambda x: torch.cumsum(x, 1, out=x), lambda x: x.cumsum(1)),
    "flip out=self": (lambda x: torch.ops.aten.flip.out(x, [1], out=x), lambda x: x.flip(1)),
    "flip out partial": (lambda x: torch.ops.aten.flip.out(x[:-1], [1], out=x[1:]), lambda x: x[:-1].flip(1)),
    "roll out=self": (lambda x: torch.ops.aten.roll.out(x, [2], [1], out=x), lambda x: x.roll(2, 1)),
    "tril out=self": (lambda x: torch.tril(x, out=x), lambda x: x.tril()),
    "tril_": (lambda x: x.tril_(), lambda x: x.tril()),
    "sort out=self": (lambda x: torch.sort(x, 1, out=(x, torch.empty(6, 6, dtype=L, device=x.device)))[0], lambda x: x.sort(1)[0]),
    "topk out=self": (lambda x: torch.topk(x, 6, 1, out=(x, torch.empty(6, 6, dtype=L, device=x.device)))[0], lambda x: x.topk(6, 1)[0]),
    "add from strided overlap": (lambda x: torch.add(x[:, :3], x[:, 1:4], out=x[:, :3]), lambda x: x[:, :3] + x[:, 1:4]),
    "add_ broadcast own row": (lambda x: x.add_(x[0:1].expand(6, 6)), lambda x: x + x[0:1]),
    "interleaved columns": (lambda x: torch.add(x[:, 0::2], 1, out=x[:, 1::2]), lambda x: x[:, 0::2] + 1),
    "fill_ expanded": (lambda x: x[0:1, 0].expand(4).fill_(7.0), lambda x: torch.full((4,), 7.0)),
    "masked_fill_ mask=self": (lambda x: (x > 0).masked_fill_(x > 0, False), lambda x: torch.zeros(6, 6, dtype=torch.bool)),
}


@pytest.mark.parametrize("case", sorted(ALLOWED))
def test_allowed_overlap_computes_the_op(case, mode):
    op, value = ALLOWED[case]
    base = torch.randn(6, 6, generator=torch.Generator().manual_seed(0))
    with torch.tpu.precision("highest"):
        got = op(base.to("tpu")).cpu()
    want = value(base.double())
    torch.testing.assert_close(got, want.to(got.dtype), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dim", [1, 0])  # a contiguous line; lines strided side by side
@pytest.mark.parametrize("log", [False, True])
def test_softmax_backward_over_its_gradient_is_the_op(dtype, dim, log, mode):
    # graph mode writes a softmax backward over the gradient it reads when
    # nothing reads that gradient again: the same bits as out of place
    g = torch.Generator().manual_seed(2)
    x, grad = torch.randn(37, 300, generator=g).to(dtype), torch.randn(37, 300, generator=g).to(dtype)
    y = x.log_softmax(dim) if log else x.softmax(dim)
    op = torch.ops.aten._log_softmax_backward_data if log else torch.ops.aten._softmax_backward_data
    yt, gt = y.to("tpu"), grad.to("tpu")
    want = op(gt, yt, dim, dtype).cpu()
    over = gt.clone()
    got = op.out(over, yt, dim, dtype, **{"out" if log else "grad_input": over})
    assert got.data_ptr() == over.data_ptr()
    assert torch.equal(over.cpu(), want)
    torch.testing.assert_close(want, op(grad, y, dim, dtype), rtol=1e-2 if dtype == torch.bfloat16 else 1e-5, atol=1e-3)


def test_large_product_into_its_own_operand(mode):
    base = torch.randn(300, 300, generator=torch.Generator().manual_seed(1))
    with torch.tpu.precision("highest"):
        got = torch.mm(base.to("tpu"), base.to("tpu"), out=None)
        x = base.to("tpu")
        torch.mm(x, x, out=x)
    want = (base.double() @ base.double()).float()
    torch.testing.assert_close(x.cpu(), want, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(x.cpu(), got.cpu(), rtol=0, atol=0)  # the same as without aliasing
