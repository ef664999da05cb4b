"""Native pointwise kernels against CPU PyTorch: values, dtypes, type
promotion, broadcasting, scalars, in-place and out= forms, and bad input."""

import operator

import pytest
import torch

import vtpu
from conftest import DTYPES, make

FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
INTS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]


def same(got, want, exact=True):
    got = got.cpu()
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape
    if exact:
        assert torch.equal(got, want) or torch.equal(got.isnan(), want.isnan()) and torch.equal(
            got[~got.isnan()], want[~want.isnan()]
        ), (got, want)
    else:
        torch.testing.assert_close(got, want, equal_nan=True)


def native_only():
    """No CPU fallback may run inside: the op is native."""
    return vtpu.cpu_fallback(False)


ARITH = [operator.add, operator.sub, operator.mul, torch.maximum, torch.minimum]


@pytest.mark.parametrize("dtype", [d for d in DTYPES if d != torch.bool], ids=str)
@pytest.mark.parametrize("op", ARITH, ids=lambda f: getattr(f, "__name__", str(f)))
def test_arith_matches_cpu_bit_exact(op, dtype):
    a, b = make((37, 19), dtype, 1), make((37, 19), dtype, 2)
    with native_only():
        got = op(a.to("tpu"), b.to("tpu"))
    same(got, op(a, b))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_true_division_and_pow(dtype):
    a, b = make((64,), dtype, 1), make((64,), dtype, 2, low=1, high=9)
    with native_only():
        same(a.to("tpu") / b.to("tpu"), a / b)
        same(b.to("tpu") ** 2, b**2, exact=False)
        same(torch.pow(b.to("tpu"), b.to("tpu")), torch.pow(b, b), exact=False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_pow_scalar_exponents_cpu_computes_as_other_ops(dtype):
    """CPU computes x ** 2, ** 3 and ** -2 as x*x, x*x*x and 1/(x*x) and
    ** -1 and ** -0.5 as a reciprocal and rsqrt, each step rounded in the
    dtype (pow would round once): the same bits, with signed zeros, infinities and NaN, in the
    functional, in-place and out= forms, and an int base promoted by a
    float exponent. (** 0.5 is sqrt on both: CPU's vectorised f32 sqrt is
    not always correctly rounded, vtpu's is, so that exponent is compared
    with tolerance.)"""
    g = torch.Generator().manual_seed(41)
    x = (torch.rand(10007, generator=g) * 8 - 4).to(dtype)
    x[:6] = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-30])
    with native_only():
        for e in (2, 3, -2, -1, 2.0, -1.0):
            same(torch.pow(x.to("tpu"), e), torch.pow(x, e))
            y = x.to("tpu")
            y.pow_(e)
            same(y, torch.pow(x, e))
            out = torch.empty(10007, dtype=torch.float64, device="tpu")
            same(torch.pow(x.to("tpu"), e, out=out), torch.pow(x, e, out=torch.empty(10007, dtype=torch.float64)))
        same(torch.pow(x.to("tpu"), 0.5), torch.pow(x, 0.5), exact=False)
        # CPU's bf16 rsqrt rounds the square root to bf16 before dividing in
        # its scalar tail (the last elements), once in its vector body
        same(torch.pow(x.to("tpu"), -0.5), torch.pow(x, -0.5), exact=dtype != torch.bfloat16)
        i = torch.arange(-50, 50)
        same(torch.pow(i.to("tpu"), 2.0), torch.pow(i, 2.0))
        same(torch.pow(i.to("tpu"), 2), torch.pow(i, 2))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_narrow_logit_and_xlogy_round_each_step_as_cpu(dtype):
    """CPU evaluates logit and xlogy in bf16 / f16 arithmetic: the log, the
    quotient, 1 - x and the clamp bounds each rounded to the dtype (a float
    evaluation rounded once differs by up to 8 ulp near 0.5): CPU's bits,
    specials included."""
    g = torch.Generator().manual_seed(43)
    p = (torch.rand(20000, generator=g) * 1.2 - 0.1).to(dtype)
    p[:5] = torch.tensor([0.0, 1.0, float("nan"), -0.0, float("inf")])
    a = (torch.randn(20000, generator=g) * 3).to(dtype)
    b = (torch.rand(20000, generator=g) * 5).to(dtype)
    a[:4] = torch.tensor([0.0, 1.0, 2.0, float("nan")])
    b[:4] = torch.tensor([float("nan"), 0.0, float("inf"), 1.0])
    with native_only():
        for eps in (None, 1e-3, 0.25):
            same(torch.logit(p.to("tpu"), eps), torch.logit(p, eps))
        same(torch.xlogy(a.to("tpu"), b.to("tpu")), torch.xlogy(a, b))


@pytest.mark.parametrize("dtype", INTS, ids=str)
@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
def test_integer_division_modes(dtype, mode):
    a, b = make((200,), dtype, 3), make((200,), dtype, 4, low=1, high=7)
    if dtype != torch.uint8:
        b = b * torch.where(torch.arange(200) % 2 == 0, 1, -1).to(dtype)
    with native_only():
        same(torch.div(a.to("tpu"), b.to("tpu"), rounding_mode=mode), torch.div(a, b, rounding_mode=mode))
        same(torch.remainder(a.to("tpu"), b.to("tpu")), torch.remainder(a, b))
        same(torch.fmod(a.to("tpu"), b.to("tpu")), torch.fmod(a, b))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("mode", ["trunc", "floor"])
def test_float_division_modes(dtype, mode):
    a, b = make((300,), dtype, 5), make((300,), dtype, 6, low=-9, high=9)
    with native_only():
        same(torch.div(a.to("tpu"), b.to("tpu"), rounding_mode=mode), torch.div(a, b, rounding_mode=mode))
        same(torch.remainder(a.to("tpu"), b.to("tpu")), torch.remainder(a, b), exact=False)


def test_type_promotion_and_scalars():
    i = make((5, 6), torch.int32, 1)
    f = make((5, 6), torch.float32, 2)
    h = make((5, 6), torch.float16, 3)
    cases = [
        lambda x, y, z: x + y,  # int32 + float32 -> float32
        lambda x, y, z: x + 2.5,  # int tensor + python float -> float32
        lambda x, y, z: x * 3,  # stays int32
        lambda x, y, z: z + y,  # half + float -> float
        lambda x, y, z: z * 2.0,  # stays half
        lambda x, y, z: x / 4,  # int true division -> float
        lambda x, y, z: y + torch.tensor(1.5, dtype=torch.float64),  # 0-dim CPU tensor acts as a scalar
        lambda x, y, z: 1 - y,
        lambda x, y, z: torch.add(y, x, alpha=3),
        lambda x, y, z: torch.sub(x, x, alpha=2),
    ]
    with native_only():
        for k, fn in enumerate(cases):
            same(fn(i.to("tpu"), f.to("tpu"), h.to("tpu")), fn(i, f, h), exact=True)


@pytest.mark.parametrize("op", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_comparisons(op):
    for dtype in DTYPES:
        a, b = make((10, 7), dtype, 1, low=-3, high=3), make((10, 7), dtype, 2, low=-3, high=3)
        with native_only():
            same(getattr(torch, op)(a.to("tpu"), b.to("tpu")), getattr(torch, op)(a, b))
            same(getattr(torch, op)(a.to("tpu"), 1), getattr(torch, op)(a, 1))


def test_broadcasting_noncontiguous_and_inplace():
    a = make((4, 1, 6), torch.float32, 1)
    b = make((5, 1), torch.float32, 2)
    c = make((6, 8), torch.float32, 3).t()  # non-contiguous (8, 6)
    with native_only():
        same(a.to("tpu") * b.to("tpu"), a * b)
        same(c.to("tpu").t() + 1, c.t() + 1)
        x = c.to("tpu")
        x.mul_(2).add_(torch.ones(1, device="tpu"))
        same(x, c * 2 + 1)
        out = torch.empty(0, device="tpu")
        torch.add(a.to("tpu"), b.to("tpu"), out=out)
        same(out, a + b)


UNARY = ["neg", "abs", "sign", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "relu",
         "reciprocal", "ceil", "floor", "round", "trunc", "frac", "expm1", "log1p", "erf"]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", UNARY)
def test_unary_float(name, dtype):
    x = make((129,), dtype, 7, low=-5, high=5)
    if name in ("log", "sqrt", "rsqrt", "log1p"):
        x = x.abs() + 0.5
    fn = getattr(torch, name)
    with native_only():
        got = fn(x.to("tpu"))
    exact = name in ("neg", "abs", "sign", "relu", "ceil", "floor", "round", "trunc", "frac")
    same(got, fn(x), exact=exact)


@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_unary_int_and_logical(dtype):
    x = make((50,), dtype, 8)
    with native_only():
        if dtype != torch.uint8:
            same(-x.to("tpu"), -x)
        same(torch.abs(x.to("tpu")), torch.abs(x))
        same(~x.to("tpu"), ~x)
        same(torch.logical_not(x.to("tpu")), torch.logical_not(x))
        same(torch.exp(x.to("tpu")), torch.exp(x), exact=False)  # ints promote to float
        same(torch.bitwise_and(x.to("tpu"), 5), torch.bitwise_and(x, 5))


def test_where_and_fill():
    c = make((6, 5), torch.bool, 1)
    a, b = make((6, 5), torch.float32, 2), make((5,), torch.float16, 3)
    with native_only():
        same(torch.where(c.to("tpu"), a.to("tpu"), b.to("tpu")), torch.where(c, a, b))
        z = torch.zeros(3, 4, device="tpu", dtype=torch.int16)
        same(z, torch.zeros(3, 4, dtype=torch.int16))
        same(torch.full((2, 3), 2.5, device="tpu"), torch.full((2, 3), 2.5))


def test_device_mismatch_raises_like_cuda():
    a = torch.ones(3, device="tpu")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        a + torch.ones(3)
    assert torch.equal((a + 1).cpu(), torch.full((3,), 2.0))  # device still usable


def test_shape_mismatch_and_bad_inplace_cast():
    a = torch.ones(3, device="tpu")
    with pytest.raises(RuntimeError, match="must match the size"):
        a + torch.ones(4, device="tpu")
    i = torch.ones(3, dtype=torch.int64, device="tpu")
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        i.add_(torch.ones(3, device="tpu") * 0.5)
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        a.add_(torch.ones(2, 3, device="tpu"))
    with pytest.raises(RuntimeError, match="bool tensors is not supported"):
        torch.ones(2, dtype=torch.bool, device="tpu") - torch.ones(2, dtype=torch.bool, device="tpu")
    assert torch.equal(a.cpu(), torch.ones(3))


def test_large_elementwise_parallel_path():
    a, b = make((1 << 20,), torch.float32, 1), make((1 << 20,), torch.float32, 2)
    with native_only():
        same(a.to("tpu") + b.to("tpu"), a + b)
        same((a.to("tpu") * b.to("tpu")).to(torch.bfloat16), (a * b).to(torch.bfloat16))


def test_dtypes_without_kernels_run_through_the_fallback():
    """complex (no C kernel) works as on CPU, via the counted CPU fallback
    (add / sub / mul are composed natively: see test_complex_add_sub_mul_native)."""
    import warnings

    a = torch.randn(5, dtype=torch.complex64)
    b = torch.randn(5, dtype=torch.complex64)
    vtpu.reset_fallback_report()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ta, tb = a.to("tpu"), b.to("tpu")
        same(ta + tb, a + b)
        same(ta * tb, a * b, exact=False)  # CPU's vector kernel fuses a multiply-add: last-bit differences
        same(torch.abs(ta), torch.abs(a))  # complex -> float result dtype
        same(torch.exp(ta), torch.exp(a), exact=False)
        same(ta == tb, a == b)
        c = ta.clone()
        c.mul_(2)
        same(c, a * 2, exact=False)
    report = vtpu.fallback_report()
    assert report.get("aten::exp") and report.get("aten::abs.out") and report.get("aten::eq.Tensor")
    with vtpu.cpu_fallback(False), pytest.raises(NotImplementedError, match="not implemented for TPU"):
        torch.exp(ta)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_activation_gradients_native(dtype):
    x = make((300,), dtype, 9, low=-3, high=3)
    g = make((300,), dtype, 10)
    y, s = torch.tanh(x), torch.sigmoid(x)
    aten = torch.ops.aten
    with vtpu.cpu_fallback(False):
        # the gradient kernels themselves, on identical inputs: bit-exact with CPU
        same(aten.tanh_backward(g.to("tpu"), y.to("tpu")), aten.tanh_backward(g, y))
        same(aten.sigmoid_backward(g.to("tpu"), s.to("tpu")), aten.sigmoid_backward(g, s))
        same(aten.threshold_backward(g.to("tpu"), x.to("tpu"), 0.5), aten.threshold_backward(g, x, 0.5))
    for act in (torch.relu, torch.tanh, torch.sigmoid):
        xc = x.clone().requires_grad_()
        act(xc).backward(g)
        xt = x.to("tpu").requires_grad_()
        with vtpu.cpu_fallback(False):
            act(xt).backward(g.to("tpu"))
        # through autograd: tanh/sigmoid forwards may differ from CPU's vector math by an ulp
        same(xt.grad, xc.grad, exact=act is torch.relu)
    xi = torch.arange(-3, 3)  # integer relu gradients run through the fallback, as CPU computes them
    assert torch.equal(aten.threshold_backward(xi.to("tpu"), xi.to("tpu"), 0).cpu(), aten.threshold_backward(xi, xi, 0))


def test_alpha_and_heaviside_errors_as_cpu():
    # the same exception and message as CPU, checked in CPU's order
    cases = [
        lambda d: torch.add(torch.tensor([1], dtype=torch.int8, device=d), torch.tensor([2], dtype=torch.int8, device=d), alpha=True),
        lambda d: torch.add(torch.tensor([1], dtype=torch.int8, device=d), torch.tensor([2], dtype=torch.int8, device=d), alpha=1.0),
        lambda d: torch.add(torch.ones(2, dtype=torch.bool, device=d), torch.ones(2, dtype=torch.bool, device=d), alpha=-2.0),
        lambda d: torch.sub(torch.ones(2, device=d), torch.ones(2, device=d), alpha=1j),
        lambda d: torch.heaviside(torch.ones(2, dtype=torch.complex128, device=d), torch.ones(2, dtype=torch.complex64, device=d)),
        lambda d: torch.heaviside(torch.ones(2, device=d), torch.ones(2, dtype=torch.float64, device=d)),
    ]
    for f in cases:
        with pytest.raises(RuntimeError) as want:
            f("cpu")
        with pytest.raises(RuntimeError) as got:
            f("tpu")
        assert str(got.value) == str(want.value)
    # what CPU accepts, tpu computes
    for alpha in (0, 1, 2, True, False):
        a = torch.tensor([True, False, True, False])
        b = torch.tensor([True, True, False, False])
        assert torch.equal(torch.add(a.to("tpu"), b.to("tpu"), alpha=alpha).cpu(), torch.add(a, b, alpha=alpha))
    m = torch.tensor([2 + 3j, 4 + 5j])
    assert torch.equal(torch.add(m.to("tpu"), m.to("tpu"), alpha=1 + 2j).cpu(), torch.add(m, m, alpha=1 + 2j))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_add_sub_mul_native(dtype):
    # composed of native real ops on (real, imag) views; conjugate views and complex alpha included
    g = torch.Generator().manual_seed(4)
    a = torch.randn(4, 1, 6, dtype=dtype, generator=g)
    b = torch.randn(3, 6, dtype=dtype, generator=g)  # broadcasts against a
    ta, tb = a.to("tpu"), b.to("tpu")
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == torch.complex64 else dict(rtol=1e-13, atol=1e-13)
    cases = {
        "add": lambda x, y: x + y,
        "sub": lambda x, y: x - y,
        "mul": lambda x, y: x * y,
        "complex alpha": lambda x, y: torch.sub(x, y, alpha=2 - 3j),
        "conj view": lambda x, y: x.conj() * y - y.conj(),
        "scalars": lambda x, y: (x * (1 + 2j) - 3) + 2 * y,
    }
    vtpu.reset_fallback_report()
    with vtpu.cpu_fallback(False):
        for name, f in cases.items():
            torch.testing.assert_close(f(ta, tb).cpu(), f(a, b), **tol, msg=lambda m, name=name: f"{name}: {m}")
        c = ta.expand(4, 3, 6).clone()
        c *= tb  # in place: the result aliases an operand
        torch.testing.assert_close(c.cpu(), a * b, **tol)
        torch.mul(c, c, out=c)
        torch.testing.assert_close(c.cpu(), (a * b) * (a * b), **tol)
    assert vtpu.fallback_report() == {}


def test_rotary_embedding_in_complex_form_is_native():
    # the view_as_complex form of rotary embeddings (Llama reference code), forward and backward
    def rope(x, freqs):
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(xc * freqs).flatten(3)

    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 16, 4, 64, generator=g, requires_grad=True)
    freqs = torch.polar(torch.ones(16, 32), torch.randn(16, 32, generator=g)).view(1, 16, 1, 32)
    xt = x.detach().to("tpu").requires_grad_()
    vtpu.reset_fallback_report()
    with vtpu.cpu_fallback(False):
        yt = rope(xt, freqs.to("tpu"))
        yt.square().sum().backward()
    y = rope(x, freqs)
    y.square().sum().backward()
    torch.testing.assert_close(yt.cpu(), y, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(xt.grad.cpu(), x.grad, rtol=1e-5, atol=1e-5)
    assert vtpu.fallback_report() == {}


def test_complex_arithmetic_extremal_values_as_cpu():
    # inf, nan and signed zeros in every combination: CPU's NaN propagation (alpha * o is a
    # full complex product) and signs, bit for bit apart from NaN payloads
    import itertools

    vals = [float("inf"), -float("inf"), float("nan"), 0.0, -0.0, 1.0]
    zs = [complex(r, i) for r, i in itertools.product(vals, vals)]
    a = torch.tensor([x for x in zs for _ in zs], dtype=torch.cdouble)
    b = torch.tensor([y for _ in zs for y in zs], dtype=torch.cdouble)
    ta, tb = a.to("tpu"), b.to("tpu")
    for f in (lambda x, y: x + y, lambda x, y: x - y, lambda x, y: torch.sub(x, y, alpha=2),
              lambda x, y: torch.add(x, y, alpha=1 - 2j), lambda x, y: x * y):
        want, got = torch.view_as_real(f(a, b)), torch.view_as_real(f(ta, tb).cpu())
        assert torch.equal(got.isnan(), want.isnan())
        fin = ~want.isnan()
        assert torch.equal(got[fin], want[fin]) and torch.equal(got[fin].signbit(), want[fin].signbit())


def _layouts():
    """name -> a function of a generator making one CPU operand of shape (4, 5, 6)
    (or broadcastable to it) in a given layout."""
    def base(g, *s):
        return torch.randn(*s, generator=g)
    return {
        "contiguous": lambda g: base(g, 4, 5, 6),
        "permuted": lambda g: base(g, 5, 6, 4).permute(2, 0, 1),
        "transposed": lambda g: base(g, 4, 6, 5).transpose(1, 2),
        "half of last dim": lambda g: base(g, 4, 5, 12)[..., :6],
        "heads view": lambda g: base(g, 5, 4, 12).transpose(0, 1)[..., 6:],
        "broadcast row": lambda g: base(g, 6),
        "broadcast middle": lambda g: base(g, 4, 1, 6),
        "expanded": lambda g: base(g, 4, 1, 1).expand(4, 5, 6),
        "0-dim": lambda g: base(g, 1).reshape(()),
    }


_LAYOUTS = _layouts()
_PAIRS = [(a, b) for a in _LAYOUTS for b in _LAYOUTS if a != "0-dim" or b != "0-dim"]


@pytest.mark.parametrize("la,lb", _PAIRS)
def test_result_strides_match_cpu(la, lb):
    """A new elementwise result has the strides CPU PyTorch gives it
    (TensorIterator's layout rules), and the values; the kernels walk it in
    that memory order."""
    g = torch.Generator().manual_seed(7)
    a, b = _LAYOUTS[la](g), _LAYOUTS[lb](g)
    c = _LAYOUTS["transposed"](g)
    dc = c.to("tpu")
    cases = [
        ("add", lambda x, y, z: x + y),
        ("neg", lambda x, y, z: -x),
        ("mul scalar", lambda x, y, z: x * 2.5),
        ("addcmul", lambda x, y, z: torch.addcmul(x, y, z, value=0.5)),
        ("where", lambda x, y, z: torch.where(y > 0, x, z)),
    ]
    def same_view(x):  # .to() would compact a view: rebuild it over the base's copy
        base = x._base if x._base is not None else x
        return base.to("tpu").as_strided(x.size(), x.stride(), x.storage_offset())
    da, db = same_view(a), same_view(b)
    for name, f in cases:
        want = f(a, b, c)
        got = f(da, db, dc)
        assert got.stride() == want.stride(), f"{name}: strides {got.stride()} vs CPU {want.stride()}"
        # CPU's vectorised addcmul fuses its multiply-add: a rounding apart
        tol = 2e-7 if name == "addcmul" else 0
        torch.testing.assert_close(got.cpu(), want, rtol=tol, atol=tol)
    # a resized out= takes the same layout
    want = torch.add(a, b, out=torch.empty(0))
    got = torch.add(da, db, out=torch.empty(0, device="tpu"))
    assert got.stride() == want.stride()
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 1, 4, 5), (2, 3, 1, 1), (1, 3, 4, 1)])
def test_result_strides_channels_last_as_cpu(shape):
    g = torch.Generator().manual_seed(3)
    a = torch.randn(*shape, generator=g).contiguous(memory_format=torch.channels_last)
    b = torch.randn(*shape, generator=g).contiguous(memory_format=torch.channels_last)
    da, db = a.to("tpu"), b.to("tpu")
    assert da.stride() == a.stride()
    for f in (lambda x, y: x + y, lambda x, y: torch.relu(x), lambda x, y: x * y + 1):
        want, got = f(a, b), f(da, db)
        assert got.stride() == want.stride()
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)


_SIZE1_LAYOUTS = {  # where CPU's unary and binary layouts part: dims of size 1
    "transposed column": lambda g: torch.randn(4, 1, generator=g).t(),
    "permuted with a 1": lambda g: torch.randn(2, 3, 1, generator=g).permute(0, 2, 1),
    "sliced with a 1": lambda g: torch.randn(3, 1, 8, generator=g)[:, :, ::2],
    "channels last, C=1": lambda g: torch.randn(2, 1, 3, 3, generator=g).contiguous(memory_format=torch.channels_last),
    "permuted": lambda g: torch.randn(5, 6, 4, generator=g).permute(2, 0, 1),
}


@pytest.mark.parametrize("layout", list(_SIZE1_LAYOUTS))
def test_ops_with_a_scalar_operand_lay_out_their_result_as_cpu(layout):
    """CPU runs pow(Tensor, Scalar) and clamp with Scalar bounds as unary ops
    and nan_to_num and hardtanh allocate empty_like(input): each layout rule
    differs from a binary op's when the input has dims of size 1."""
    a = _SIZE1_LAYOUTS[layout](torch.Generator().manual_seed(5))
    a[..., :1] = float("nan")
    base = a._base if a._base is not None else a  # .to() would compact the view
    da = base.to("tpu").as_strided(a.size(), a.stride(), a.storage_offset())
    cases = {
        "pow scalar": lambda x: x.pow(3.0),
        "float_power scalar": lambda x: torch.float_power(x, 2),
        "clamp scalars": lambda x: x.clamp(-0.5, 0.5),
        "clamp min scalar": lambda x: x.clamp(min=-0.5),
        "clamp_min scalar": lambda x: torch.clamp_min(x, -0.5),
        "clamp_max scalar": lambda x: torch.clamp_max(x, 0.5),
        "nan_to_num": lambda x: torch.nan_to_num(x, nan=7.0),
        "hardtanh": lambda x: torch.nn.functional.hardtanh(x, -0.5, 0.5),  # clamp into empty_like
        "relu6": torch.nn.functional.relu6,
        "hardtanh out= resized": lambda x: torch._C._nn.hardtanh(x, -0.5, 0.5, out=torch.empty(0, device=x.device)),
        "pow out= resized": lambda x: torch.pow(x, 3.0, out=torch.empty(0, device=x.device)),
        "clamp out= resized": lambda x: torch.clamp(x, -0.5, 0.5, out=torch.empty(0, device=x.device)),
    }
    for name, f in cases.items():
        want, got = f(a), f(da)
        assert got.stride() == want.stride(), f"{name}: strides {got.stride()} vs CPU {want.stride()}"
        # pow by 3 is two rounded multiplies on CPU and a pow kernel here:
        # within 2 ulp on every ISA path; the rest are exact
        tol = 3e-7 if name.startswith("pow") else 0
        torch.testing.assert_close(got.cpu(), want, rtol=tol, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", INTS)
def test_hardtanh_keeps_an_integer_input_dtype_as_cpu(dtype):
    """CPU's hardtanh truncates its bounds to integers for an integer input
    (clamp with the same float bounds would promote to float)."""
    x = torch.arange(-4, 12, dtype=torch.int64).to(dtype).reshape(4, 4).t()  # non-contiguous
    if dtype == torch.uint8:
        x = x.abs()
    dx = x.to("tpu").t().contiguous().t()
    with native_only():
        same(torch.nn.functional.hardtanh(dx, 0.5, 6.7), torch.nn.functional.hardtanh(x, 0.5, 6.7))
        same(torch.nn.functional.relu6(dx - 2), torch.nn.functional.relu6(x - 2))
        got, want = dx.clone(), x.clone()
        torch.nn.functional.hardtanh(got, 1.9, 3.2, inplace=True)
        torch.nn.functional.hardtanh(want, 1.9, 3.2, inplace=True)
        same(got, want)
        out = torch.empty(0, dtype=dtype, device="tpu")
        torch._C._nn.hardtanh(dx, 0.5, 6.7, out=out)
        same(out, torch.nn.functional.hardtanh(x, 0.5, 6.7))


def test_hardtanh_and_scalar_clamp_refuse_what_cpu_refuses():
    x = torch.arange(-3.0, 4.0, device="tpu")
    with pytest.raises(RuntimeError, match="Bool inputs not supported for hardtanh"):
        torch.nn.functional.hardtanh(torch.ones(3, dtype=torch.bool, device="tpu"))
    with pytest.raises(RuntimeError, match="unsigned type with negative limits"):
        torch.nn.functional.hardtanh(torch.ones(3, dtype=torch.uint8, device="tpu"), -1.0, 1.0)
    # clamp with Scalar bounds is a unary op on CPU: out= must have the result's dtype
    f64 = lambda: torch.empty(7, dtype=torch.float64, device="tpu")  # noqa: E731
    for f in (lambda: torch.clamp(x, 0, 1, out=f64()), lambda: torch.clamp_min(x, 0, out=f64()),
              lambda: torch.clamp_max(x, 0, out=f64()), lambda: torch._C._nn.hardtanh(x, 0.0, 1.0, out=f64())):
        with pytest.raises(RuntimeError, match="Found dtype Double but expected Float"):
            f()
    # with tensor bounds it is a binary op: out= takes any dtype the result casts to
    got = torch.clamp(x, torch.zeros((), device="tpu"), torch.ones((), device="tpu"), out=f64())
    same(got, torch.clamp(x.cpu(), torch.zeros(()), torch.ones(()), out=torch.empty(7, dtype=torch.float64)))
    assert x.add(1).cpu().tolist() == [-2.0, -1.0, 0.0, 1.0, 2.0, 3.0, 4.0]  # the device is still usable


def test_clamp_of_bools_is_refused_where_cpu_refuses_it():
    """CPU has no Bool kernel for clamp with Scalar bounds or with two tensor
    bounds; one tensor bound (clamp_min / clamp_max.Tensor) and bounds that
    promote the result to an integer are fine."""
    x = torch.tensor([True, False, True])
    t = torch.tensor([False, True, True])
    cases = {
        "scalars": lambda x, t: torch.clamp(x, False, True),
        "scalar min": lambda x, t: torch.clamp(x, min=False),
        "clamp_max scalar": lambda x, t: torch.clamp_max(x, True),
        "two tensors": lambda x, t: torch.clamp(x, t, t),
        "tensor min": lambda x, t: torch.clamp(x, min=t),
        "clamp_max tensor": lambda x, t: torch.clamp_max(x, t),
        "int scalars": lambda x, t: torch.clamp(x, 0, 1),
        "int tensors": lambda x, t: torch.clamp(x, t.long(), t.long() + 1),
    }
    for name, f in cases.items():
        try:
            want = f(x, t)
        except NotImplementedError:
            with pytest.raises(NotImplementedError, match="not implemented for 'Bool'"):
                f(x.to("tpu"), t.to("tpu"))
            continue
        same(f(x.to("tpu"), t.to("tpu")), want)
