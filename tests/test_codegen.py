"""Generated code for the fusion groups of graph programs
(runtime/src/graph/codegen.c): a compiled function's groups of elementwise
ops run as one C function per group, built by the system C compiler and
kept in the compile cache. The generated code must give the bits the
interpreter (the members' plans, which eager Strict runs too) gives, on
every ISA path: each case runs compiled with generated code, compiled
without it (compiler "none"), and eager Strict, and all three must be
equal bit for bit (NaN where NaN), and the statistics must show that
generated code ran (so a case cannot pass on the interpreter alone).
The cross-process cases (a second process loads every object and never
runs the compiler; damaged objects are rebuilt) are in
tests/test_compile_cache.py."""

import copy
import os
import stat

import pytest
import torch
import torch.nn as nn

import vtpu
from vtpu import _C

if os.environ.get("TPU_DEFER_AND_FUSE", "0") not in ("", "0"):
    pytest.skip("compiled programs run in DeferAndFuse in either pass", allow_module_level=True)

DEFAULT_CC = os.environ.get("VTPU_CC") or "cc"


@pytest.fixture(autouse=True)
def _fresh():
    torch._dynamo.reset()
    # programs fuse (and so run generated code) unless the caller is in
    # Debug mode, the default under TPU_LAUNCH_BLOCKING=1
    with vtpu.eager_mode("strict"):
        yield
    _C._codegen_set_compiler(DEFAULT_CC)
    torch._dynamo.reset()


def stats():
    torch.tpu.synchronize()  # queued groups count when they run
    return torch.tpu._get_cache_stats()


def special(n, dtype, seed):
    """n values with the edge cases first: signed zeros, infinities, NaN,
    subnormals, huge and tiny values; the rest normal."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g) * 3
    edge = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-40, -1e-40, 3e38, -3e38, 1e-30,
                         0.5, -0.5, 1.0, -1.0])
    x[: len(edge)] = edge
    return x.to(dtype)


def same(a, b):
    torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


def twice(f, *args):
    """f's second call: a group is compiled (or loaded) the second time it
    runs; the first call's results must match too."""
    first = f(*[a.clone() for a in args])
    second = f(*[a.clone() for a in args])
    for a, b in zip(*(o if isinstance(o, tuple) else (o,) for o in (first, second))):
        same(a.cpu(), b.cpu())
    return second


def check(fn, *inputs):
    """fn compiled with generated code equals fn compiled without it and
    fn in eager Strict, bit for bit; generated code ran."""
    on_tpu = [t.to("tpu") for t in inputs]
    with vtpu.eager_mode("strict"):
        eager = fn(*[t.clone() for t in on_tpu])
    runs = stats()["num_codegen_runs"]
    generated = twice(torch.compile(fn, backend="tpu"), *on_tpu)
    assert stats()["num_codegen_runs"] > runs, f"no group ran generated code: {stats()}"
    torch._dynamo.reset()
    _C._codegen_set_compiler("none")
    runs = stats()["num_codegen_runs"]
    plans = twice(torch.compile(fn, backend="tpu"), *on_tpu)
    assert stats()["num_codegen_runs"] == runs
    _C._codegen_set_compiler(DEFAULT_CC)
    for a, b, c in zip(*(o if isinstance(o, tuple) else (o,) for o in (generated, plans, eager))):
        same(a.cpu(), c.cpu())
        same(b.cpu(), c.cpu())
    return generated


DTYPES = [torch.float32, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES)
def test_arithmetic_chain_with_host_scalars(dtype):
    def fn(x, y, b):
        t = x * y + b
        u = (t - 0.5) * 1.7
        return torch.relu(u) / (x.abs() + 1.0)

    check(fn, special(40099, dtype, 0), special(40099, dtype, 1), special(40099, dtype, 2))


@pytest.mark.parametrize("dtype", DTYPES)
def test_alpha_and_unary_ops(dtype):
    def fn(x, y):
        a = torch.add(x, y, alpha=0.3)
        s = torch.sub(a, x, alpha=2.5)
        return torch.rsqrt(s.abs() + 1) - torch.reciprocal(-y) + torch.sqrt(x.abs()) * torch.square(a)

    check(fn, special(20000, dtype, 3), special(20000, dtype, 4))


@pytest.mark.parametrize("dtype", DTYPES)
def test_transcendental_members_call_their_kernels(dtype):
    """Members the generator writes no expression for (exp, log, tanh,
    erf, sigmoid, the activations, a backward, ops with parameters) call
    the kernel their plan calls, on the group's chunk buffers: a value
    computed before such a member, one read after two calls, and an output
    written between calls; the element count is not a multiple of the
    chunk."""
    def fn(x, y):
        a = torch.nn.functional.gelu(x * 2 + y)
        b = torch.sigmoid(a) * y + torch.tanh(x)
        c = torch.exp(y * 0.5) - torch.log(a.abs() + 1) + torch.erf(b)
        d = torch.nn.functional.silu(c) + torch.nn.functional.gelu(x, approximate="tanh")
        e = torch.nn.functional.softplus(d, beta=2.0, threshold=5.0) + torch.nn.functional.leaky_relu(x, 0.2)
        f = torch.ops.aten.gelu_backward(y, e) * a
        return f + b, a

    check(fn, special(20001, dtype, 21), special(20001, dtype, 22))


@pytest.mark.parametrize("dtype", DTYPES)
def test_calls_in_the_walk_along_rows(dtype):
    """Calls in a group with broadcast and transposed operands (a bias and
    gelu, a per-row scale, a transposed input): each row is cut into chunks
    for the calls; rows of 96 and 700 (shorter and longer than a chunk)."""
    def fn(x, b, s, w):
        y = torch.nn.functional.gelu(x + b) * s
        return torch.tanh(y - w.t()) + torch.exp(-y.abs())

    g = torch.Generator().manual_seed(25)
    for rows, cols in ((512, 96), (40, 700)):
        torch._dynamo.reset()
        args = (special(rows * cols, dtype, 26).view(rows, cols), torch.randn(cols, generator=g).to(dtype),
                torch.randn(rows, 1, generator=g).to(dtype), torch.randn(cols, rows, generator=g).to(dtype))
        check(fn, *args)


@pytest.mark.parametrize("dtype", DTYPES)
def test_an_expanded_scalar_operand(dtype):
    """A 0-dim tensor expanded to the group's shape is a view of one
    element with stride 0 everywhere: the plain loop reads that element
    (it once read element i, past the view's one element)."""
    def fn(x, s):
        return (s.expand_as(x) * x + 1) * x - s.expand(x.shape)

    check(fn, special(30000, dtype, 24), torch.tensor(0.75, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_call_on_a_scalar_operand_stays_with_the_interpreter(dtype):
    """A binary kernel takes another path for an operand of one value (a
    0-dim tensor): that member runs its plan, the rest of the results the
    same."""
    def fn(x, s):
        return torch.ops.aten.gelu_backward(s.expand_as(x), x) * x + torch.exp(x)

    x = special(30000, dtype, 23)
    on_tpu = (x.to("tpu"), torch.tensor(0.75, dtype=dtype).to("tpu"))
    with vtpu.eager_mode("strict"):
        eager = fn(*on_tpu)
    same(twice(torch.compile(fn, backend="tpu"), *on_tpu).cpu(), eager.cpu())


def test_mixed_dtypes_and_conversions():
    def fn(x, y):
        z = x + y  # bf16 + f32: computed in f32
        w = z.to(torch.bfloat16) * 2  # a copy rounding to bf16, then bf16 math
        return w.float() - y, w

    check(fn, special(30000, torch.bfloat16, 5), special(30000, torch.float32, 6))


@pytest.mark.parametrize("dtype", DTYPES)
def test_zero_dim_tensor_operands_and_large_groups(dtype):
    def fn(x, s, t):
        y = x
        for i in range(12):
            y = y * s + t if i % 2 else (y - t) / s
        return y

    x = special(1 << 16, dtype, 7)
    check(fn, x.view(256, 256), torch.tensor(1.25, dtype=dtype), torch.tensor(-0.75, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_reduction_fed_by_the_generated_group(dtype):
    def fn(x, y):
        z = x * y + 1
        return z.sum(), (z * 3 - x).sum(dim=-1), ((x - y) * 0.5).softmax(-1)

    g = torch.Generator().manual_seed(8)
    x, y = torch.randn(128, 300, generator=g).to(dtype), torch.randn(128, 300, generator=g).to(dtype)
    check(fn, x, y)


@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast_and_strided_operands(dtype):
    """A bias along rows, a scale per row (the same value along a row), a
    transposed input, and halves of the last dim written into a cat's
    slices (a rotary embedding): the generated walk along rows."""
    def fn(x, b, s, w):
        y = (x + b) * s - w.t() * 0.5
        h1, h2 = y[..., :48], y[..., 48:]
        return torch.cat([h1 * 2 - h2, h2 * 3 + h1], dim=-1)

    g = torch.Generator().manual_seed(15)
    args = (special(512 * 96, dtype, 16).view(512, 96), torch.randn(96, generator=g).to(dtype),
            torch.randn(512, 1, generator=g).to(dtype), torch.randn(96, 512, generator=g).to(dtype))
    check(fn, *args)
    compiled = torch.compile(fn, backend="tpu")
    compiled(*[a.to("tpu") for a in args])
    with vtpu.tracing.trace() as t:
        compiled(*[a.to("tpu") for a in args])
    groups = [e["name"] for e in t.events if " + " in e["name"]]
    # y, then both halves and the cat (their ops write over their own
    # first operands, so the halves' chains join one group)
    assert len(groups) == 2 and all(n.startswith("generated: ") for n in groups), groups


def test_in_place_chain_on_an_input():
    def fn(x, y):
        x.mul_(2).add_(y).div_(3)
        return x * y, x  # the input's new values too

    out, x = check(fn, special(50000, torch.float32, 9), special(50000, torch.float32, 10))
    assert out.shape == x.shape == (50000,)


@pytest.mark.parametrize("dtype", DTYPES)
def test_optimizer_step_matches_the_interpreter(dtype):
    """An AdamW step (capturable) compiled: its foreach chains run as
    generated code; parameters and states after three steps are the
    interpreter's, bit for bit."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 8)).to("tpu", dtype)
    x = torch.randn(16, 256).to("tpu", dtype)

    def train(m, compiler):
        _C._codegen_set_compiler(compiler)
        torch._dynamo.reset()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.1, capturable=True)
        step = torch.compile(opt.step, backend="tpu")
        for _ in range(3):
            opt.zero_grad()
            m(x).pow(2).mean().backward()
            step()
        return [p.detach().cpu() for p in m.parameters()] + [
            v.cpu() for s in opt.state.values() for v in s.values()]

    runs = stats()["num_codegen_runs"]
    generated = train(copy.deepcopy(model), DEFAULT_CC)
    assert stats()["num_codegen_runs"] > runs
    plans = train(copy.deepcopy(model), "none")
    for a, b in zip(generated, plans):
        same(a, b)


def _script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def fn_for_fallback(x):
    return (x * 3 + 1) / (x.abs() + 2)


@pytest.mark.parametrize("kind", ["fails", "writes junk"])
def test_a_compiler_that_fails_leaves_the_interpreter(tmp_path, kind):
    body = "exit 1\n" if kind == "fails" else \
        'while [ $# -gt 1 ]; do [ "$1" = -o ] && out=$2; shift; done; echo junk > "$out"\n'
    _C._codegen_set_compiler(_script(tmp_path, "badcc", body))
    x = special(17777, torch.float32, 11)
    before = stats()
    out = twice(torch.compile(fn_for_fallback, backend="tpu"), x.to("tpu"))
    after = stats()
    assert after["num_codegen_failures"] > before["num_codegen_failures"]
    assert after["num_codegen_runs"] == before["num_codegen_runs"]
    with vtpu.eager_mode("strict"):
        same(out.cpu(), fn_for_fallback(x.to("tpu")).cpu())


def test_no_compiler_means_no_generated_code():
    _C._codegen_set_compiler("none")
    x = special(17777, torch.float32, 12)
    before = stats()
    out = twice(torch.compile(fn_for_fallback, backend="tpu"), x.to("tpu"))
    after = stats()
    assert after["num_codegen_runs"] == before["num_codegen_runs"]
    assert after["num_codegen_compiles"] == before["num_codegen_compiles"]
    with vtpu.eager_mode("strict"):
        same(out.cpu(), fn_for_fallback(x.to("tpu")).cpu())


def test_a_missing_compiler_is_a_clear_error():
    with pytest.raises(Exception, match="C compiler /nonexistent/cc not found"):
        _C._codegen_set_compiler("/nonexistent/cc")
    x = special(17777, torch.float32, 13)
    runs = stats()["num_codegen_runs"]
    torch.testing.assert_close(twice(torch.compile(fn_for_fallback, backend="tpu"), x.to("tpu")).cpu(),
                               fn_for_fallback(x), equal_nan=True)
    assert stats()["num_codegen_runs"] == runs  # generated code is off until a compiler is set


def test_eager_defer_and_fuse_never_compiles():
    x = special(50000, torch.float32, 14).to("tpu")
    before = stats()
    with vtpu.eager_mode("defer_and_fuse"):
        for _ in range(3):
            y = ((x * 2 + 1) / 3 - x).cpu()
    after = stats()
    assert after["num_codegen_compiles"] == before["num_codegen_compiles"]
    assert after["num_codegen_runs"] == before["num_codegen_runs"]
    same(y, ((x.cpu() * 2 + 1) / 3 - x.cpu()))
