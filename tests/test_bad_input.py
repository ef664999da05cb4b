"""Values and arguments CPU PyTorch refuses are refused on "tpu" with the
exception CPU raises, and its message; values CPU accepts give CPU's result
(and CPU's warning). Each case runs on CPU (the reference) and on "tpu", in
Strict and in Debug mode."""

import re
import warnings

import pytest
import torch
import torch.nn.functional as F


def _t(dev, *v, **kw):
    return torch.tensor(v, device=dev, **kw)


L = torch.long

# name -> f(dev): the user's call, building its tensors on dev.
CASES = {
    # values CPU refuses
    "int ** -1": lambda d: _t(d, 2) ** -1,
    "int pow_ -2": lambda d: _t(d, 2, 3).pow_(-2),
    "int ** int tensor -1": lambda d: _t(d, 2) ** _t(d, -1),  # allowed: gives 0, as CPU
    "full int8 300": lambda d: torch.full((2,), 300, dtype=torch.int8, device=d),
    "full f32 1e300": lambda d: torch.full((2,), 1e300, device=d),
    "full bf16 1e39": lambda d: torch.full((2,), 1e39, dtype=torch.bfloat16, device=d),
    "fill_ int8 nan": lambda d: torch.zeros(2, dtype=torch.int8, device=d).fill_(float("nan")),
    "full uint8 -1": lambda d: torch.full((2,), -1, dtype=torch.uint8, device=d),  # allowed: wraps, as CPU
    "full_like bool nan": lambda d: torch.full_like(torch.zeros(2, dtype=torch.bool, device=d), float("nan")),
    "masked_fill_ int8 300": lambda d: torch.zeros(2, dtype=torch.int8, device=d).masked_fill_(_t(d, True, False), 300),
    "index_fill_ int8 300": lambda d: torch.zeros(2, dtype=torch.int8, device=d).index_fill_(0, _t(d, 0), 300),
    "scatter_ int8 300": lambda d: torch.zeros(2, dtype=torch.int8, device=d).scatter_(0, _t(d, 0), 300),
    "clamp int8 300": lambda d: torch.zeros(2, dtype=torch.int8, device=d).clamp(0, 300),
    "clamp_min int8 300": lambda d: torch.zeros(2, dtype=torch.int8, device=d).clamp_min(300),
    "clamp f16 1e5": lambda d: torch.zeros(2, dtype=torch.half, device=d).clamp(0, 1e5),
    "clamp int8 float bound": lambda d: torch.zeros(2, dtype=torch.int8, device=d).clamp(-1, 2.5),
    "randint int8 0..300": lambda d: torch.randint(0, 300, (3,), dtype=torch.int8, device=d),
    "randint int8 -200..10": lambda d: torch.randint(-200, 10, (3,), dtype=torch.int8, device=d),
    "randint int32 2**40": lambda d: torch.randint(0, 2**40, (3,), dtype=torch.int32, device=d),
    "random_ bool 0..3": lambda d: torch.zeros(3, dtype=torch.bool, device=d).random_(0, 3),
    "heaviside mixed dtypes": lambda d: torch.heaviside(_t(d, 1.0, 0.0), _t(d, 1, 1)),
    "searchsorted side=bad": lambda d: torch.searchsorted(torch.arange(5.0, device=d), _t(d, 2.0), side="bad"),
    "ldexp_ broadcast self": lambda d: torch.ones(1, device=d).ldexp_(torch.ones(3, dtype=torch.int32, device=d)),
    "add_ broadcast self": lambda d: torch.ones(1, device=d).add_(torch.ones(3, device=d)),
    "max.dim out dtype": lambda d: torch.max(torch.randn(3, 3).to(d), 1, out=(torch.empty(3, dtype=L, device=d),) * 2),
    "max.dim indices dtype": lambda d: torch.max(torch.randn(3, 3).to(d), 1, out=(torch.empty(3, device=d), torch.empty(3, dtype=torch.int, device=d))),
    "amax out dtype": lambda d: torch.amax(torch.randn(3, 3).to(d), 1, out=torch.empty(3, dtype=L, device=d)),
    "amin out dtype": lambda d: torch.amin(torch.randn(3, 3).to(d), 1, out=torch.empty(3, dtype=L, device=d)),
    "vector_norm out dtype": lambda d: torch.linalg.vector_norm(torch.randn(3, 3).to(d), out=torch.empty((), dtype=L, device=d)),
    "vector_norm out f64": lambda d: torch.linalg.vector_norm(torch.randn(3, 3).to(d), out=torch.empty((), dtype=torch.double, device=d)),
    "argmax out int": lambda d: torch.argmax(torch.randn(3, 3).to(d), 1, out=torch.empty(3, dtype=torch.int, device=d)),
    "mean out long": lambda d: torch.mean(torch.randn(3, 3).to(d), 1, out=torch.empty(3, dtype=L, device=d)),
    "any out float": lambda d: torch.any(torch.randn(3, 3).to(d), 1, out=torch.empty(3, device=d)),
    "index.Tensor empty list": lambda d: torch.ops.aten.index.Tensor(torch.randn(3, device=d), []),
    "all dim=[]": lambda d: torch.all(_t(d, [True, False]), dim=[]),
    "any dim=[]": lambda d: torch.any(_t(d, [True, False]), dim=[]),
    "std correction >= n": lambda d: torch.std(torch.randn(3).to(d), correction=3),
    "var correction > n": lambda d: torch.var(torch.randn(3).to(d), correction=5),
    # exception types
    "gather out of range": lambda d: torch.gather(torch.randn(3).to(d), 0, _t(d, 5)),
    "scatter_ out of range": lambda d: torch.zeros(3, device=d).scatter_(0, _t(d, 5), torch.ones(1, device=d)),
    "scatter_add_ out of range": lambda d: torch.zeros(3, device=d).scatter_add_(0, _t(d, 5), torch.ones(1, device=d)),
    "scatter_reduce out of range": lambda d: torch.zeros(3, device=d).scatter_reduce(0, _t(d, 5), torch.ones(1, device=d), "sum"),
    "index_add_ 2-d out of range": lambda d: torch.zeros(3, 4, device=d).index_add_(0, _t(d, 1, 5), torch.ones(2, 4, device=d)),
    "index_add_ 1-d out of range": lambda d: torch.zeros(3, device=d).index_add_(0, _t(d, 5), torch.ones(1, device=d)),
    "index_copy_ out of range": lambda d: torch.zeros(3, 4, device=d).index_copy_(0, _t(d, 5), torch.ones(1, 4, device=d)),
    "index_select out of range": lambda d: torch.index_select(torch.randn(3).to(d), 0, _t(d, 5)),
    "advanced index out of range": lambda d: torch.randn(3).to(d)[_t(d, 5)],
    "index_put_ out of range": lambda d: torch.zeros(3, device=d).index_put_((_t(d, 5),), _t(d, 1.0)),
    "take out of range": lambda d: torch.randn(3).to(d).take(_t(d, 40)),
    "embedding out of range": lambda d: F.embedding(_t(d, 5), torch.randn(3, 3).to(d)),
    "cat out dtype": lambda d: torch.cat([torch.randn(2).to(d)], out=torch.empty(2, dtype=L, device=d)),
    "stack out dtype": lambda d: torch.stack([torch.randn(2).to(d)], out=torch.empty(1, 2, dtype=L, device=d)),
    "hstack out dtype": lambda d: torch.hstack([torch.randn(2).to(d)], out=torch.empty(2, dtype=L, device=d)),
    "one_hot class too large": lambda d: F.one_hot(_t(d, 0, 5), 3),
    "one_hot negative class": lambda d: F.one_hot(_t(d, 0, -1), 3),
    "empty amax": lambda d: torch.amax(torch.empty(0, 3, device=d), 0),
    "empty argmax": lambda d: torch.argmax(torch.empty(0, 3, device=d), 0),
    "empty argmax all": lambda d: torch.argmax(torch.empty(0, device=d)),
    "empty max": lambda d: torch.max(torch.empty(0, device=d)),
    "empty amax all": lambda d: torch.amax(torch.empty(5, 0, 5, device=d)),
    "empty amin all out=": lambda d: torch.amin(torch.empty(5, 0, 5, device=d), (), out=torch.empty(0, device=d)),
    "index_select out= expanded": lambda d: torch.index_select(
        torch.randn(3, 6).to(d), 1, _t(d, 0, 1), out=torch.zeros(1, 6, device=d).expand(2, 6)),
    "index_select out= is self's rows": lambda d: (lambda y: torch.index_select(y, 0, _t(d, 0, 1), out=y[1:]))(
        torch.randn(3, 6).to(d)),
    "adaptive_max_pool2d negative size": lambda d: F.adaptive_max_pool2d(torch.randn(1, 1, 4, 4, device=d), (-1, 2)),
    "adaptive_max_pool1d negative size": lambda d: F.adaptive_max_pool1d(torch.randn(1, 1, 4, device=d), (-1,)),
    "adaptive_max_pool2d no size": lambda d: F.adaptive_max_pool2d(torch.randn(1, 2, 3, 4, device=d), ()),
    "adaptive_max_pool2d 5-d": lambda d: F.adaptive_max_pool2d(torch.randn(1, 1, 1, 3, 3, device=d), (1, 1)),
    "empty index_select": lambda d: torch.index_select(torch.empty(0, device=d), 0, _t(d, 0)),
    "empty embedding": lambda d: F.embedding(_t(d, 0), torch.empty(0, 3, device=d)),
    "float & float": lambda d: torch.randn(2).to(d) & torch.randn(2).to(d),
    "float << 1": lambda d: torch.randn(2).to(d) << 1,
    "~float": lambda d: ~torch.randn(2).to(d),
    "softmax int64": lambda d: torch.softmax(_t(d, 1, 2), 0),
    "div shapes": lambda d: torch.div(torch.randn(2).to(d), torch.randn(3).to(d)),
}


def _run(f, dev):
    """(result or None, exception or None, warning messages) of f on dev, its
    result read back (a Strict error surfaces at the read)."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        try:
            r = f(dev)
            r = [x.cpu() for x in r] if isinstance(r, (tuple, list)) else r.cpu()
            exc = None
        except Exception as e:  # noqa: BLE001 - compared with CPU's
            r, exc = None, e
    msgs = [str(x.message) for x in w if "vtpu:" not in str(x.message)]  # fallback notes are vtpu's own
    return r, exc, msgs


def _core(msg):
    """A message without the op name vtpu puts first ("aten::gather: ...")."""
    msg = str(msg).split("\n")[0]
    return msg.split(": ", 1)[1] if msg.startswith("aten::") else msg


# Where CPU's message does not say which index, vtpu's says it (same type).
VAGUE = {"index out of range in self": r"index -?\d+ is out of bounds for dimension \d+ with size \d+"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_as_cpu(case, mode):
    f = CASES[case]
    want, want_exc, want_warn = _run(f, "cpu")
    got, got_exc, got_warn = _run(f, "tpu")
    if want_exc is not None:
        assert type(got_exc) is type(want_exc), (got_exc, want_exc)
        want_msg = str(want_exc).split("\n")[0]
        if want_msg in VAGUE:
            assert re.fullmatch(VAGUE[want_msg], _core(got_exc)), got_exc
        elif "cpu" not in want_msg:  # CPU's kernel names (bitwise_and_cpu) are CPU's own
            assert _core(got_exc) == want_msg, (got_exc, want_exc)
    else:
        assert got_exc is None, got_exc
        if case.startswith("randint") or "random" in case:
            return
        for g, w in zip(got if isinstance(got, list) else [got], want if isinstance(want, list) else [want]):
            assert g.dtype == w.dtype and g.shape == w.shape
            if "std" not in case and "var" not in case:
                torch.testing.assert_close(g, w)
    assert [m[:60] for m in got_warn] == [m[:60] for m in want_warn]
    torch.tpu.synchronize()  # nothing was left to raise later


def test_error_messages_name_the_op_once(strict):
    r = torch.gather(torch.randn(3, device="tpu"), 0, _t("tpu", 5))
    with pytest.raises(RuntimeError) as e:
        r.cpu()
    assert str(e.value) == "aten::gather: index 5 is out of bounds for dimension 0 with size 3"
    a = torch.tensor([1, 2], device="tpu")
    r = a // torch.zeros(2, dtype=L, device="tpu")
    with pytest.raises(RuntimeError) as e:
        r.cpu()
    assert str(e.value).count("aten::div") == 1, e.value
