"""Optimizers on "tpu": the _foreach_* ops and the fused Adam/AdamW/SGD steps
run natively (no CPU fallback) and match CPU PyTorch's foreach/fused results.

Tolerances: the foreach ops match CPU bit for bit, except
- sqrt in f32/f64: CPU's goes through MKL VML and is not correctly rounded;
  vtpu's must equal the correctly rounded root (and be within 1 ulp of CPU);
- bf16/f16 add with alpha: CPU's scalar tail loop rounds alpha*other to the
  narrow dtype first; every differing element must equal that tail formula.
Optimizer runs (3 steps): f32 Adam/AdamW/SGD foreach are bit exact; f32
RMSprop/Adagrad inherit CPU's sqrt (rtol 1e-5); bf16 foreach runs may differ
only in CPU's tail elements (the last numel % 64), by up to one bf16 eps per
step; fused f32 SGD only in its last numel % 16. Fused Adam/AdamW: 4 ulp
(rtol 5e-7) per step where CPU's tails round differently, compounded: rtol
2e-6; bf16/f16 one ulp of the dtype (rtol 8e-3 / 1e-3; atol 1e-3 / 1e-4).
_foreach_norm accumulates in double: rtol 1e-6 against CPU's float sums.
"""
import numpy as np
import pytest
import torch

import vtpu

SHAPES = [(7, 13), (1007,), (64, 33), (5,), (2, 3, 4), (16,)]
F32_TOL = dict(rtol=2e-6, atol=1e-7)
TOL = {torch.float32: F32_TOL, torch.bfloat16: dict(rtol=8e-3, atol=1e-3), torch.float16: dict(rtol=1e-3, atol=1e-4)}


def make_params(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    ps = [torch.randn(s, generator=g).to(dtype) for s in SHAPES]
    grads = [[torch.randn(s, generator=g).to(dtype) for s in SHAPES] for _ in range(3)]
    return ps, grads


def run(opt_cls, kwargs, device, dtype, steps=3):
    ps, grads = make_params(dtype)
    params = [torch.nn.Parameter(p.to(device)) for p in ps]
    opt = opt_cls(params, **kwargs)
    for k in range(steps):
        for p, g in zip(params, grads[k % len(grads)]):
            p.grad = g.to(device)
        opt.step()
    state = [{k: v.cpu() for k, v in opt.state[p].items() if torch.is_tensor(v)} for p in params]
    return [p.detach().cpu() for p in params], state


CONFIGS = [
    (torch.optim.SGD, dict(lr=0.1)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, dampening=0.0)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.1, maximize=True)),
    (torch.optim.Adam, dict(lr=1e-3)),
    (torch.optim.Adam, dict(lr=1e-3, weight_decay=0.01, amsgrad=True)),
    (torch.optim.Adam, dict(lr=1e-3, maximize=True, weight_decay=0.1)),
    (torch.optim.AdamW, dict(lr=1e-3, weight_decay=0.01)),
    (torch.optim.AdamW, dict(lr=1e-3, betas=(0.3, 0.99), amsgrad=True)),
    (torch.optim.RMSprop, dict(lr=1e-2)),
    (torch.optim.RMSprop, dict(lr=1e-2, momentum=0.9, centered=True, weight_decay=0.01)),
    (torch.optim.Adagrad, dict(lr=1e-2, weight_decay=0.01, lr_decay=0.01)),
]


def ids(c):
    return f"{c[0].__name__}-" + "-".join(f"{k}={v}" for k, v in c[1].items())


def compare(tpu, cpu, tol, tail=None):
    """tail: when given, elements may differ only in the last numel % tail
    elements of each tensor (CPU's scalar tail loop); the rest are bit exact.
    tol may give scale_ulps instead of atol: an absolute tolerance of that
    many ulps of the tensor's largest magnitude (its operands' scale)."""
    (tp, ts), (cp, cs) = tpu, cpu
    pairs = list(zip(tp, cp)) + [(sa[k], sb[k]) for sa, sb in zip(ts, cs) for k in sa]
    for sa, sb in zip(ts, cs):
        assert sa.keys() == sb.keys()
    for a, b in pairs:
        t = dict(tol)
        ulps = t.pop("scale_ulps", None)
        if ulps is not None:
            t["atol"] = ulps * torch.finfo(b.dtype).eps * max(b.abs().max().item(), 1.0) if b.is_floating_point() else 0
        torch.testing.assert_close(a, b, **t)
        if tail:
            n = a.numel()
            torch.testing.assert_close(a.flatten()[: n - n % tail], b.flatten()[: n - n % tail], rtol=0, atol=0)


def foreach_step_tol(cls, dtype, steps=3):
    """Per-config tolerance of a `steps`-step optimizer run against CPU.

    bf16/f16: CPU's foreach ops run through TensorIterator, whose scalar tail
    (the last numel % 64 elements, and all of a tensor under 64 elements)
    computes self + alpha*other with alpha*other rounded to the narrow dtype
    first, where the vector loop (and vtpu) rounds fma once: up to 1 ulp of the
    operands' scale per step, which a cancelling update (param - lr*grad,
    buf*m + g) turns into a large relative error on a small result. So: one
    dtype eps (relative and absolute, the params are ~N(0, 1)) per step.
    f32 RMSprop/Adagrad: CPU's sqrt is MKL VML (or Sleef), not correctly
    rounded (see test_foreach_ops_bit_exact), and which of its paths runs
    depends on the CPU: within 1 ulp of the true root, on any CPU. vtpu's is
    correctly rounded. One ulp in the denominator moves g / avg (and the
    momentum buffer built from it) by one ulp relative, so the update
    p - lr * buf, the next step's operands and every state may round
    differently: at most one ulp of the operands' scale per step. The bound
    is that, steps ulps of the tensor's largest magnitude (not a relative
    error of the result, which a cancelling update makes unbounded), and
    does not depend on which element or CPU path meets the ulp.
    """
    if dtype in (torch.bfloat16, torch.float16):
        e = torch.finfo(dtype).eps * steps
        return dict(rtol=e, atol=e)
    if cls in (torch.optim.RMSprop, torch.optim.Adagrad):
        return dict(rtol=0, scale_ulps=steps)
    return F32_TOL


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("cfg", CONFIGS, ids=[ids(c) for c in CONFIGS])
def test_foreach_optimizer_matches_cpu(cfg, dtype):
    cls, kw = cfg
    kw = dict(kw, foreach=True)
    cpu = run(cls, kw, "cpu", dtype)
    vtpu.reset_fallback_report()
    with vtpu.cpu_fallback(False):
        tpu = run(cls, kw, "tpu", dtype)
    # bf16: CPU's TensorIterator vector loop covers 2x32 lanes per step.
    compare(tpu, cpu, foreach_step_tol(cls, dtype), tail=64 if dtype == torch.bfloat16 else None)
    assert not vtpu.fallback_report()


FUSED = [c for c in CONFIGS if c[0] in (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("cfg", FUSED, ids=[ids(c) for c in FUSED])
def test_fused_optimizer_matches_cpu(cfg, dtype):
    cls, kw = cfg
    tol = TOL[dtype]
    tail = None
    if cls is torch.optim.SGD and dtype != torch.float32:
        # CPU PyTorch's fused SGD never stores the params in its bf16/f16
        # vector loop (only its scalar tail updates them), so the reference
        # here is CPU's foreach SGD; it rounds every intermediate to the
        # narrow dtype where the fused step rounds once: 2 ulp.
        # (plus CPU foreach's own tail rounding, see foreach_step_tol).
        cpu = run(cls, dict(kw, foreach=True), "cpu", dtype)
        tol = foreach_step_tol(cls, dtype)
    elif cls is torch.optim.SGD:
        # CPU's fused SGD scalar tail (last numel % 16 f32 elements) contracts
        # buf*momentum + g*(1-dampening) as fma(buf, momentum, g*(1-d)); its
        # vector loop (and vtpu) as fma(1-d, g, buf*momentum): 1 ulp of the
        # operands there per step, absolute on a cancelling result.
        cpu = run(cls, dict(kw, fused=True), "cpu", dtype)
        tol = dict(rtol=tol["rtol"], atol=3 * torch.finfo(dtype).eps)
        tail = 16
    else:
        cpu = run(cls, dict(kw, fused=True), "cpu", dtype)
    kw = dict(kw, fused=True)
    vtpu.reset_fallback_report()
    with vtpu.cpu_fallback(False):
        tpu = run(cls, kw, "tpu", dtype)
    compare(tpu, cpu, tol, tail)
    assert not vtpu.fallback_report()


def test_fused_adamw_f32_mostly_bit_exact():
    cpu = run(torch.optim.AdamW, dict(lr=1e-3, weight_decay=0.01, fused=True), "cpu", torch.float32)
    tpu = run(torch.optim.AdamW, dict(lr=1e-3, weight_decay=0.01, fused=True), "tpu", torch.float32)
    total = same = 0
    for a, b in zip(tpu[0], cpu[0]):
        total += a.numel()
        same += (a == b).sum().item()
    assert same >= total - 6 * 15  # only CPU's scalar tails (< 16 per tensor) may differ


@pytest.mark.parametrize("lr_tensor", [False, True])
def test_fused_adam_grad_scale_found_inf_tensor_lr(lr_tensor):
    def go(device, found):
        ps, grads = make_params(torch.float32)
        p = [x.to(device) for x in ps]
        g = [x.to(device) * 4 for x in grads[0]]
        m = [torch.zeros_like(x) for x in p]
        v = [torch.zeros_like(x) for x in p]
        steps = [torch.tensor(1.0, device=device) for _ in p]
        lr = torch.tensor(1e-3, device=device) if lr_tensor else 1e-3
        torch._fused_adamw_(p, g, m, v, [], steps, lr=lr, beta1=0.9, beta2=0.999, weight_decay=0.01, eps=1e-8,
                            amsgrad=False, maximize=False, grad_scale=torch.tensor(4.0, device=device),
                            found_inf=torch.tensor(found, device=device))
        return [x.cpu() for x in p + g + m + v]

    for found in (0.0, 1.0):
        with vtpu.cpu_fallback(False):
            t = go("tpu", found)
        for a, b in zip(t, go("cpu", found)):
            torch.testing.assert_close(a, b, **F32_TOL)


def test_fused_sgd_grad_scale_tensor_lr():
    def go(device):
        ps, grads = make_params(torch.float32)
        p = [x.to(device) for x in ps]
        g = [x.to(device) for x in grads[0]]
        b = [torch.zeros_like(x) for x in p]
        torch._fused_sgd_(p, g, b, weight_decay=0.01, momentum=0.9, lr=torch.tensor(0.1, device=device),
                          dampening=0.0, nesterov=True, maximize=False, is_first_step=True,
                          grad_scale=torch.tensor(2.0, device=device), found_inf=torch.tensor(0.0, device=device))
        return [x.cpu() for x in p + g + b]

    with vtpu.cpu_fallback(False):
        t = go("tpu")
    for a, b in zip(t, go("cpu")):
        torch.testing.assert_close(a, b, **F32_TOL)


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
def test_clip_grad_norm_foreach(norm_type):
    def go(device):
        ps, grads = make_params(torch.float32)
        params = [torch.nn.Parameter(p.to(device)) for p in ps]
        for p, g in zip(params, grads[0]):
            p.grad = g.to(device)
        n = torch.nn.utils.clip_grad_norm_(params, 0.5, norm_type=norm_type, foreach=True)
        return n.cpu(), [p.grad.cpu() for p in params]

    vtpu.reset_fallback_report()
    with vtpu.cpu_fallback(False):
        tn, tg = go("tpu")
    cn, cg = go("cpu")
    assert vtpu.fallback_report() == {}
    # The foreach ops clip_grad_norm_ uses, strictly native:
    ps, grads = make_params(torch.float32)
    with vtpu.cpu_fallback(False):
        t = [g.to("tpu") for g in grads[0]]
        tn_each = [x.cpu() for x in torch._foreach_norm(t, norm_type)]
        torch._foreach_mul_(t, torch.tensor(0.25, device="tpu"))
        tm = [x.cpu() for x in t]
    for x, y in zip(tn_each, torch._foreach_norm(grads[0], norm_type)):
        torch.testing.assert_close(x, y, rtol=1e-6, atol=0)
    for x, y in zip(tm, torch._foreach_mul(grads[0], torch.tensor(0.25))):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
    torch.testing.assert_close(tn, cn, rtol=1e-6, atol=0)
    for a, b in zip(tg, cg):
        torch.testing.assert_close(a, b, rtol=2e-6, atol=1e-8)


def inplace(op, a, *args):
    a = [x.clone() for x in a]
    op(a, *args)
    return a


def foreach_cases():
    """(name, fn(list_a, list_b, list_c) -> result) over positive c."""
    return {
        "add_scalar": lambda a, b, c: torch._foreach_add(a, 0.3),
        "add_list_alpha": lambda a, b, c: torch._foreach_add(a, b, alpha=-0.7),
        "sub_scalarlist": lambda a, b, c: torch._foreach_sub(a, [0.1 * i for i in range(len(a))]),
        "mul_tensor": lambda a, b, c: torch._foreach_mul(a, c[0].flatten()[0]),
        "mul_scalar": lambda a, b, c: torch._foreach_mul(a, 0.99),
        "mul_scalar_inplace": lambda a, b, c: inplace(torch._foreach_mul_, a, 0.99),
        "mul_scalarlist_inplace": lambda a, b, c: inplace(torch._foreach_mul_, a, [0.9 + 0.01 * i for i in range(len(a))]),
        "div_scalar_inplace": lambda a, b, c: inplace(torch._foreach_div_, a, 0.3),
        "div_list": lambda a, b, c: torch._foreach_div(a, c),
        "div_scalarlist": lambda a, b, c: torch._foreach_div(a, [1.5 + i for i in range(len(a))]),
        "addcmul": lambda a, b, c: torch._foreach_addcmul(a, b, c, value=0.37),
        "addcmul_tensor": lambda a, b, c: torch._foreach_addcmul(a, b, c, torch.arange(len(a), dtype=torch.float32)),
        "addcdiv_scalarlist": lambda a, b, c: torch._foreach_addcdiv(a, b, c, [0.2 * (i + 1) for i in range(len(a))]),
        "lerp_scalar_small": lambda a, b, c: torch._foreach_lerp(a, b, 0.1),
        "lerp_scalar_big": lambda a, b, c: torch._foreach_lerp(a, b, 0.8),
        "lerp_list": lambda a, b, c: torch._foreach_lerp(a, b, [x / 3 for x in c]),
        "sqrt": lambda a, b, c: torch._foreach_sqrt(c),
        "neg": lambda a, b, c: torch._foreach_neg(a),
        "abs": lambda a, b, c: torch._foreach_abs(a),
        "sign": lambda a, b, c: torch._foreach_sign(a),
        "reciprocal": lambda a, b, c: torch._foreach_reciprocal(c),
        "pow_2": lambda a, b, c: torch._foreach_pow(a, 2.0),
        "maximum_list": lambda a, b, c: torch._foreach_maximum(a, b),
        "clamp_min": lambda a, b, c: torch._foreach_clamp_min(a, -0.2),
        "clamp_max": lambda a, b, c: torch._foreach_clamp_max(a, 0.2),
        "max": lambda a, b, c: torch._foreach_max(a),
    }


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("name", list(foreach_cases()))
def test_foreach_ops_bit_exact(name, dtype):
    fn = foreach_cases()[name]
    g = torch.Generator().manual_seed(1)
    a = [torch.randn(s, generator=g).to(dtype) for s in SHAPES]
    b = [torch.randn(s, generator=g).to(dtype) for s in SHAPES]
    c = [(torch.rand(s, generator=g) + 0.1).to(dtype) for s in SHAPES]
    a[2] = a[2].t().contiguous().t()  # same shape as b[2], c[2]; non-contiguous
    want = fn(a, b, c)
    vtpu.reset_fallback_report()
    with vtpu.cpu_fallback(False):
        got = fn(*[[x.to("tpu") for x in l] for l in (a, b, c)])
        got = [x.cpu() for x in got]
    assert not vtpu.fallback_report()
    tails = cpu_tail_formula(name, a, b, c)
    exact = correctly_rounded(name, c)
    for i, (x, y) in enumerate(zip(got, want)):
        assert x.dtype == y.dtype and x.shape == y.shape
        if exact is not None:
            # CPU's sqrt goes through MKL VML (vsSqrt/vdSqrt), which is not
            # correctly rounded (~1% of values are 1 ulp off in f32 and f64);
            # vtpu's is IEEE sqrt: equal to the correctly rounded root, and
            # within 1 ulp of CPU.
            torch.testing.assert_close(x, exact[i], rtol=0, atol=0)
            ulp = torch.finfo(dtype).eps * y.abs()
            assert ((x - y).abs() <= ulp).all()
        elif tails is not None and dtype in (torch.bfloat16, torch.float16):
            # CPU's vector loop computes fma(other, alpha, self) in float and
            # rounds once; its scalar tail (the elements after the last full
            # 2x32-lane block, or whole rows of a strided tensor) rounds
            # alpha*other to the narrow dtype first. Every element that
            # differs must be exactly CPU's tail formula.
            bad = x != y
            torch.testing.assert_close(y[bad], tails[i][bad], rtol=0, atol=0)
            bound = x.numel() if not a[i].is_contiguous() else x.numel() % 64
            assert bad.sum().item() <= bound
        else:
            torch.testing.assert_close(x, y, rtol=0, atol=0, equal_nan=True)


def cpu_tail_formula(name, a, b, c):
    """CPU PyTorch's scalar-tail result where it differs from its vector loop."""
    if name != "add_list_alpha":
        return None
    dt = a[0].dtype
    al = torch.tensor(-0.7, dtype=torch.float64).to(dt).float()
    return [(x.float() + (y.float() * al).to(dt).float()).to(dt) for x, y in zip(a, b)]


def correctly_rounded(name, c):
    """The correctly rounded result, for ops whose CPU kernel is not."""
    if name != "sqrt" or c[0].dtype not in (torch.float32, torch.float64):
        return None

    # numpy's sqrt is IEEE (correctly rounded); an f32 root rounded from the
    # f64 root is correctly rounded too (53 >= 2*24 + 2).
    return [torch.from_numpy(np.sqrt(x.double().numpy())).to(x.dtype) for x in c]


def test_foreach_exp_pow_norm_close():
    g = torch.Generator().manual_seed(2)
    a = [torch.randn(s, generator=g) for s in SHAPES]
    with vtpu.cpu_fallback(False):
        t = [x.to("tpu") for x in a]
        e = [x.cpu() for x in torch._foreach_exp(t)]
        p = [x.cpu() for x in torch._foreach_pow(t, 1.7)]
        n = [x.cpu() for x in torch._foreach_norm(t, 2)]
    for x, y in zip(e, torch._foreach_exp(a)):
        torch.testing.assert_close(x, y, rtol=3e-7, atol=0)  # CPU uses Sleef expf (1 ulp)
    for x, y in zip(p, torch._foreach_pow(a, 1.7)):
        torch.testing.assert_close(x, y, rtol=3e-7, atol=0, equal_nan=True)
    for x, y in zip(n, torch._foreach_norm(a, 2)):
        torch.testing.assert_close(x, y, rtol=1e-6, atol=0)


def test_foreach_inplace_zero_copy():
    a = [torch.randn(s) for s in SHAPES]
    with vtpu.cpu_fallback(False):
        t = [torch.empty(s, device="tpu", dtype=torch.bfloat16) for s in SHAPES]
        torch._foreach_copy_(t, [x.to("tpu") for x in a])
        got = [x.cpu() for x in t]
        torch._foreach_zero_(t)
        z = [x.cpu() for x in t]
    for x, y in zip(got, a):
        torch.testing.assert_close(x, y.bfloat16(), rtol=0, atol=0)
    assert all((x == 0).all() for x in z)


def test_foreach_self_aliasing():
    # out, self and other are the same tensors.
    c = [torch.randn(s) for s in SHAPES]
    with vtpu.cpu_fallback(False):
        t = [x.to("tpu") for x in c]
        torch._foreach_mul_(t, 2.0)
        torch._foreach_add_(t, t, alpha=0.5)
        torch._foreach_addcmul_(t, t, t, value=0.25)
        got = [x.cpu() for x in t]
    torch._foreach_mul_(c, 2.0)
    torch._foreach_add_(c, c, alpha=0.5)
    torch._foreach_addcmul_(c, c, c, value=0.25)
    for x, y in zip(got, c):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


@pytest.mark.parametrize(
    "op",
    [
        lambda t, u: torch._foreach_mul_(t, 0.5),
        lambda t, u: torch._foreach_add_(t, u, alpha=2.0),
        lambda t, u: torch._foreach_addcmul_(t, u, u, 0.5),
        lambda t, u: torch._foreach_lerp_(t, u, 0.25),
        lambda t, u: torch._foreach_copy_(t, u),
        lambda t, u: torch._foreach_zero_(t),
        lambda t, u: torch.ops.aten._foreach_add.Scalar_out(u, 1.0, out=t),
    ],
)
@pytest.mark.parametrize("device", ["cpu", "tpu"])
def test_foreach_writes_bump_versions_so_autograd_sees_them(op, device):
    # A value autograd saved and a foreach op then overwrote: backward must
    # refuse (as after CPU's per-tensor in-place ops), not use the new value.
    w = torch.randn(5, device=device, requires_grad=True)
    t = [torch.randn(5, device=device), torch.randn(3, device=device)]
    u = [torch.randn(5, device=device), torch.randn(3, device=device)]
    y = (w * t[0]).sum()  # saves t[0]
    before = [x._version for x in t + u]
    op(t, u)
    assert [x._version for x in t] == [v + 1 for v in before[:2]]
    assert [x._version for x in u] == before[2:]
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


@pytest.mark.parametrize(
    "case",
    [
        ("listed twice", lambda b: torch._foreach_mul_([b, b], 0.9)),
        ("with its transpose", lambda b: torch._foreach_mul_([b, b.t()], 0.9)),
        ("overlapping views", lambda b: torch._foreach_mul_([b.narrow(1, 1, 699), b.view(-1)], 0.9)),
        ("halves read each other", lambda b: torch._foreach_add_([b[:48], b[48:]], [b[48:], b[:48]])),
    ],
    ids=lambda c: c[0],
)
def test_foreach_entries_sharing_memory_run_in_list_order(case):
    # CPU runs the entries one after another: an element two entries update
    # is updated twice, an entry reads what an earlier one wrote. Tensors
    # this large are split across threads; run all at once, two threads
    # would update one element together (a result that changed run to run).
    base = torch.randn(96, 700, generator=torch.Generator().manual_seed(3))
    want = base.clone()
    case[1](want)
    for _ in range(5):
        with vtpu.cpu_fallback(False):
            got = base.to("tpu")
            case[1](got)
        assert torch.equal(got.cpu(), want)


@pytest.mark.parametrize("device", ["cpu", "tpu"])
def test_foreach_errors_match_cpu(device):
    a = [torch.randn(3, device=device), torch.randn(4, device=device)]
    with pytest.raises(RuntimeError):
        torch._foreach_add(a, [torch.randn(3, device=device)])
    with pytest.raises(RuntimeError):
        torch._foreach_add_(a, [torch.randn(3, device=device), torch.randn(5, device=device)])
    with pytest.raises(RuntimeError):
        torch._foreach_mul_(a, [1.0])
    with pytest.raises(RuntimeError):
        torch._foreach_addcmul_(a, a, [a[0]])
    with pytest.raises(RuntimeError):
        torch._foreach_add([], 1.0)
    with pytest.raises(RuntimeError):
        torch._fused_adamw_(a, a[:1], a, a, [], [torch.tensor(1.0, device=device)] * 2, lr=1e-3, beta1=0.9,
                            beta2=0.999, weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
    # The device stays usable.
    torch._foreach_add_(a, 1.0)
    assert torch.isfinite(a[0].cpu()).all()
