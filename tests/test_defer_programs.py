"""DeferAndFuse against Strict on random programs. A seeded generator builds
a program of tensor ops the way user code mixes them: elementwise chains with
broadcasting and Python scalars, in-place updates (also through views),
views of pending values (transpose, slices, narrow, select, unsqueeze,
reshape, expand), casts, reductions and softmax (the tails a group may end
in), cat, matmul, norms, index and scatter updates, gather, flip, roll,
foreach updates, copies and fills, integer and bool values, values dropped
mid-way (dead intermediates), host reads, single Strict ops and trips to the
other device mid-way (flushes), and loops (a block of steps repeated). Each
program runs on CPU PyTorch first (an op CPU refuses is left out), then on
"tpu" in Strict and in DeferAndFuse from the same inputs.

DeferAndFuse must give Strict's results bit for bit: every value the program
read on the host, every tensor alive at the end (its bits, NaN and -0
included), and, in programs whose inputs require grad, every gradient of a
backward run in the mode. Every other program also checks Strict against
CPU (the ops' own conformance is tested elsewhere; here the check guards
against a view or an in-place update landing in the wrong place). Those
programs use well-conditioned ops only: a cast to bfloat16, a sign, a
comparison or a norm of nearly equal values turns a last-bit difference (a
reduction's order, a transcendental's polynomial, each ISA path its own)
into a visible one, so no tolerance would hold on every CPU.

VTPU_PROGRAM_SEEDS=N runs N programs instead of the default set."""

import os
import random

import pytest
import torch

import vtpu
from conftest import bits

SEEDS = range(int(os.environ.get("VTPU_PROGRAM_SEEDS", "300")))
STEPS = 60

# Shapes the base tensors take: small ones, one that spans several fused
# tiles and both threads, broadcastable relatives of each other.
SHAPES = [(6, 5), (5,), (1, 5), (6, 1), (3, 6, 5), (), (0, 5), (96, 700), (700,), (96, 1)]

UNARY = {
    "neg": torch.neg,
    "abs": torch.abs,
    "relu": torch.relu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "exp_clamped": lambda x: torch.exp(x.clamp(-5, 5)),
    "sqrt_abs": lambda x: torch.sqrt(x.abs()),
    "log1p_abs": lambda x: torch.log1p(x.abs()),
    "square": lambda x: x * x,
    "floor": torch.floor,
    "sign": torch.sign,
    "clamp": lambda x: x.clamp(-1.5, 2.0),
    "gelu": torch.nn.functional.gelu,
    "silu": torch.nn.functional.silu,
    "sin": torch.sin,
}
BINARY = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div_safe": lambda a, b: a / (b.abs() + 1),
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "where": lambda a, b: torch.where(a > 0, a, b),
    "lerp": lambda a, b: torch.lerp(a, b, 0.3),
}
INPLACE = {
    "add_": lambda a, b: a.add_(b, alpha=0.5),
    "sub_": lambda a, b: a.sub_(b),
    "mul_": lambda a, b: a.mul_(b),
    "copy_": lambda a, b: a.copy_(b),
    "clamp_": lambda a, b: a.clamp_(-1.0, 1.0),
    "fill_": lambda a, b: a.fill_(0.25),
    "zero_": lambda a, b: a.zero_(),
    "lerp_": lambda a, b: a.lerp_(b, 0.1),
    "addcmul_": lambda a, b: a.addcmul_(b, b, value=0.5),
}
REDUCE = {
    "sum": lambda x, d: x.sum(d),
    "mean": lambda x, d: x.mean(d),
    "amax": lambda x, d: x.amax(d),
    "sum_keep": lambda x, d: x.sum(d, keepdim=True),
    "softmax": lambda x, d: torch.softmax(x, d),
    "log_softmax": lambda x, d: torch.log_softmax(x, d),
    "norm": lambda x, d: torch.linalg.vector_norm(x, dim=d),
}


class Step:
    """One op of a program: out[k] = env entries named by `outs`, computed by
    fn from the entries named by `args` (None: the op returns nothing)."""

    def __init__(self, label, fn, args, outs=(), read=False, drop=()):
        self.label, self.fn, self.args, self.outs, self.read, self.drop = label, fn, args, outs, read, drop

    def apply(self, env, reads):
        for name in self.drop:
            del env[name]
        if not self.args and not self.outs:
            return
        res = self.fn(*[env[a] for a in self.args])
        if self.read:
            reads.append(res)
        elif self.outs:
            res = res if isinstance(res, (tuple, list)) else (res,)
            for name, t in zip(self.outs, res):
                env[name] = t


def other_device(t):
    """The second tpu for a tpu tensor (work there, then back); CPU for CPU."""
    return torch.device("tpu", 1 - t.device.index) if t.device.type == "tpu" else t.device


def in_strict(fn, *args):
    with vtpu.eager_mode("strict"):
        return fn(*args)


def float_names(env):
    """The values later steps may use: not random ones ("r..."), whose
    values differ from CPU's and would give a data-dependent size there and
    another here."""
    return [n for n, t in env.items() if t.dtype.is_floating_point and not n.startswith("r")]


def pick(rng, names):
    """Mostly one of the newest values (chains form), else any."""
    return rng.choice(names[-4:] if rng.random() < 0.6 else names)


def broadcasts_to(shape, to):
    try:
        return torch.broadcast_shapes(shape, to) == to
    except RuntimeError:
        return False


def broadcast_partner(env, rng, name):
    """A tensor (by name) that broadcasts to env[name]'s shape, or None."""
    ok = [n for n in float_names(env) if broadcasts_to(env[n].shape, env[name].shape)]
    return pick(rng, ok) if ok else None


# Ops that can turn a last-bit difference of their input into a large one:
# steps (sign, floor, a comparison), an infinite slope at 0 (sqrt), a
# period (sin of a large sum).
DISCONTINUOUS = {"sign", "floor", "where", "sqrt_abs", "sin"}


def shares_memory(a, b):
    """b is another view of a's memory (not the same view)."""
    same_view = a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride()
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() and not same_view


def next_step(env, rng, fresh, writable, continuous):
    """A random step valid for env's current tensors (names and shapes);
    continuous: no casts, matmuls, ops in DISCONTINUOUS or in-place writes
    that read another view of what they write (CPU PyTorch refuses the
    overlaps it can see; where it cannot tell, its result depends on the
    order its loops visit elements, which vtpu does not copy)."""
    fl = float_names(env)
    if not fl:
        return None
    x = pick(rng, fl)
    kind = rng.choices(
        ["unary", "binary", "scalar", "inplace", "view", "reduce", "cat", "matmul", "cast", "foreach", "drop", "read",
         "out", "random", "other", "int", "family"],
        weights=[12, 12, 6, 12, 10, 5, 3, 2, 3, 3, 5, 3, 3, 2, 4, 4, 5],
    )[0]
    if kind == "family":
        return family_step(env, rng, x, fresh, writable, continuous)
    if kind == "int":
        if continuous:
            return None
        ints = [n for n, t in env.items() if not t.dtype.is_floating_point]
        if not ints or rng.random() < 0.3:
            return Step("to int32", lambda v: (v * 10).to(torch.int32), [x], [fresh()])
        i = pick(rng, ints)
        ops = {
            "int add": lambda v: v + 7,
            "int mul": lambda v: v * v,
            "floor_divide 3": lambda v: v // 3,
            "remainder 5": lambda v: v % 5,
            "bitwise_and": lambda v: v & 6,
            "compare": lambda v: v > 2,
            "logical_not": lambda v: ~(v > 0),
            "to float": lambda v: v.float() * 0.5,
        }
        if env[i].dtype == torch.bool:
            ops = {"where mask": None, "mask float": lambda m: m.float(), "mask and": lambda m: m & m.flip(-1)}
            op = rng.choice(list(ops))
            if op == "where mask":
                y = broadcast_partner(env, rng, x)
                if y is None or not broadcasts_to(env[i].shape, env[x].shape):
                    return None
                return Step(op, lambda m, a, b: torch.where(m, a, b), [i, x, y], [fresh()])
            if env[i].dim() == 0 and op == "mask and":
                return None
            return Step(op, ops[op], [i], [fresh()])
        op = rng.choice(list(ops))
        return Step(op, ops[op], [i], [fresh()])
    if kind == "out":
        targets = [n for n in fl if n in writable and n != x and env[n].shape == env[x].shape]
        if not targets:
            return None
        y, o = broadcast_partner(env, rng, x), pick(rng, targets)
        if continuous and (shares_memory(env[o], env[x]) or shares_memory(env[o], env[y])):
            return None
        return Step("mul out=", lambda a, b, o: torch.mul(a, b, out=o), [x, y, o], [])
    if kind == "random":
        if continuous:
            return None
        if rng.random() < 0.5:
            return Step("rand_like", lambda v: v + torch.rand_like(v), [x], ["r" + fresh()])
        return Step("dropout", lambda v: torch.nn.functional.dropout(v, 0.3, training=True), [x], ["r" + fresh()])
    if kind == "other":
        t = env[x]
        ops = [("clone", lambda v: v.clone()), ("contiguous_t", lambda v: v.transpose(0, -1).contiguous()),
               ("via tpu:1", lambda v: (v.to(other_device(v)) * 2 - 1).to(v.device))]
        if t.dim() >= 1 and t.shape[0] > 1:
            ops += [("index_select", lambda v: v.index_select(0, torch.tensor([1, 0, 1], device=v.device))),
                    ("cumsum", lambda v: v.cumsum(0)),
                    ("flip", lambda v: v.flip(0)),
                    ("roll", lambda v: v.roll(1, 0)),
                    ("gather", lambda v: v.gather(0, torch.zeros_like(v, dtype=torch.long))),
                    ("repeat", lambda v: v.repeat(2, *([1] * (v.dim() - 1))))]
            if not continuous:  # a norm of nearly equal values divides by nearly 0
                ops += [("layer_norm", lambda v: torch.nn.functional.layer_norm(v, v.shape[-1:])),
                        ("rms_norm", lambda v: torch.nn.functional.rms_norm(v, v.shape[-1:], eps=1e-5))]
            if t.dim() >= 2:
                ops += [("tril", lambda v: v.tril()), ("outer sum", lambda v: (v.unsqueeze(0) * v.unsqueeze(1)).sum(0))]
            if x in writable:
                idx = rng.randrange(t.shape[0])
                ops += [("index_put_", lambda v, i=idx: v.index_put_((torch.tensor([i, 0], device=v.device),),
                                                                     torch.ones_like(v[0]), accumulate=True)),
                        ("index_add_", lambda v: v.index_add_(0, torch.tensor([0, 1], device=v.device), v[:2] * 0.5)),
                        ("setitem", lambda v, i=idx: v.__setitem__(i, 0.5))]
        if not continuous:
            ops += [("masked_select", lambda v: v[v > 0.1]),
                    ("nonzero_count", lambda v: (v > 0).nonzero().shape[0] + v)]
            if x in writable:
                ops += [("masked_fill_", lambda v: v.masked_fill_(v < -0.5, 7.0))]
        label, fn = rng.choice(ops)
        return Step(label, fn, [x], [] if label.endswith("_") or label == "setitem" else [fresh()])
    if kind == "unary":
        op = rng.choice([u for u in UNARY if not (continuous and u in DISCONTINUOUS)])
        if rng.random() < 0.1:  # one op in Strict amid recorded ones: a mode switch flushes
            return Step(op + " (strict)", lambda v, f=UNARY[op]: in_strict(f, v), [x], [fresh()])
        return Step(op, UNARY[op], [x], [fresh()])
    if kind == "binary":
        y = broadcast_partner(env, rng, x)
        op = rng.choice([u for u in BINARY if not (continuous and u in DISCONTINUOUS)])
        a, b = (x, y) if rng.random() < 0.5 else (y, x)
        return Step(op, BINARY[op], [a, b], [fresh()])
    if kind == "scalar":
        s = rng.choice([2.0, -0.5, 1.5, 3])
        op = rng.choice(["add", "mul", "rsub", "div", "pow2"])
        fn = {
            "add": lambda t: t + s,
            "mul": lambda t: t * s,
            "rsub": lambda t: s - t,
            "div": lambda t: t / s,
            "pow2": lambda t: t**2,
        }[op]
        return Step(f"{op} {s}", fn, [x], [fresh()])
    if kind == "inplace":
        targets = [n for n in fl if n in writable]
        if not targets:
            return None
        a = pick(rng, targets)
        b = broadcast_partner(env, rng, a)
        if continuous and shares_memory(env[a], env[b]):
            return None
        op = rng.choice(list(INPLACE))
        return Step(op, INPLACE[op], [a, b], [])
    if kind == "view":
        t = env[x]
        views = []
        if t.dim() >= 2:
            views += [("t", lambda v: v.transpose(0, 1)), ("narrow", lambda v: v.narrow(1, 1, v.shape[1] - 1))]
            views += [("select", lambda v: v.select(0, v.shape[0] // 2))] if t.shape[0] else []
            views += [("slice", lambda v: v[::2])]
        if t.dim() >= 1:
            views += [("unsqueeze", lambda v: v.unsqueeze(0)), ("step", lambda v: v[..., ::2])]
            if t.is_contiguous():
                views += [("flatten", lambda v: v.view(-1))]
            if t.dim() == 1:
                views += [("expand", lambda v: v.expand(3, v.shape[0]))]
        if not views:
            return None
        label, fn = rng.choice(views)
        name = fresh()
        if label != "expand" and x in writable:
            writable.add(name)
        return Step(f"view {label}", fn, [x], [name])
    if kind == "reduce":
        t = env[x]
        if t.dim() == 0:
            return None
        op = rng.choice(list(REDUCE))
        d = rng.randrange(t.dim())
        return Step(f"{op} dim {d}", lambda v, op=op, d=d: REDUCE[op](v, d), [x], [fresh()])
    if kind == "cat":
        t = env[x]
        if t.dim() == 0:
            return None
        same = [n for n in fl if env[n].shape == t.shape]
        y = rng.choice(same)
        d = rng.randrange(t.dim())
        return Step(f"cat dim {d}", lambda a, b, d=d: torch.cat([a, b], d), [x, y], [fresh()])
    if kind == "matmul":
        t = env[x]
        if t.dim() != 2 or continuous or t.shape[0] > 1000:  # the product is rows x rows
            return None
        return Step("matmul", lambda a: a @ a.transpose(0, 1), [x], [fresh()])
    if kind == "cast":
        if continuous:
            return None
        dt = rng.choice([torch.bfloat16, torch.float16, torch.float64])
        return Step(f"to {dt}", lambda v, dt=dt: v.to(dt).to(torch.float32), [x], [fresh()])
    if kind == "foreach":
        a = [n for n in fl if n in writable]
        if len(a) < 2:
            return None
        p, q = rng.sample(a, 2)
        if continuous and shares_memory(env[p], env[q]):
            return None
        if env[p].shape != env[q].shape:
            return Step("foreach_mul_", lambda u, v: torch._foreach_mul_([u, v], 0.9), [p, q], [])
        return Step("foreach_lerp_", lambda u, v: torch._foreach_lerp_([u, v], [v, u], 0.25), [p, q], [])
    if kind == "drop":
        if len(env) <= 3:
            return None
        writable.discard(x)
        return Step("drop", None, [], [], drop=(x,))
    if kind == "read":
        return Step("read", lambda v: v.sum().item() if v.numel() else 0.0, [x], read=True)
    return None


def family_step(env, rng, x, fresh, writable, continuous):
    """An op of a family that runs as a node of its own between fused
    groups: sort and top-k, stacking, losses, embedding, pooling,
    convolution (its weight a view of its input), batched matmul,
    attention, scatter and index copies, and views that split or take a
    diagonal. Continuous programs take the well-conditioned ones (a sort's
    values are a continuous function of its input; the matrix engine's
    bfloat16 passes are not within CPU's tolerance)."""
    t = env[x]
    F = torch.nn.functional
    ops = []  # (label, fn, well-conditioned, kind: "new", "view" or "inplace")
    if t.dim() >= 1 and t.shape[-1] >= 2:
        ops += [("sort", lambda v: v.sort(-1).values, True, "new"),
                ("topk 2", lambda v: v.topk(2, -1).values, True, "new"),
                ("argmax", lambda v: v.argmax(-1), False, "new"),
                ("stack", lambda v: torch.stack([v, v * 2], -1), True, "new"),
                ("mse_loss", lambda v: F.mse_loss(v, v.flip(-1)), True, "new"),
                ("chunk", lambda v: v.chunk(2, -1)[1], True, "view")]
    if t.dim() == 2 and t.shape[0] >= 1 and t.shape[1] >= 2:
        last = t.shape[0] - 1
        ops += [("embedding", lambda v: F.embedding(torch.tensor([[0, last], [last, 0]], device=v.device), v), True,
                 "new"),
                ("cross_entropy", lambda v: F.cross_entropy(v, torch.zeros(v.shape[0], dtype=torch.long,
                                                                           device=v.device)), True, "new"),
                ("diagonal", lambda v: v.diagonal(), True, "view")]
    if t.dim() == 3 and t.shape[0] >= 1 and t.shape[-1] >= 2:
        ops += [("avg_pool1d", lambda v: F.avg_pool1d(v, 2), True, "new"),
                ("max_pool1d", lambda v: F.max_pool1d(v, 2), True, "new"),
                ("conv1d", lambda v: F.conv1d(v, v[:2, :, :2]), False, "new"),
                ("bmm", lambda v: v @ v.transpose(1, 2), False, "new"),
                ("sdpa", lambda v: F.scaled_dot_product_attention(v, v, v), False, "new"),
                ("sdpa causal", lambda v: F.scaled_dot_product_attention(v, v * 0.5, v, is_causal=True), False, "new")]
    if x in writable and t.dim() >= 1 and t.shape[0] >= 1:
        ops += [("scatter_add_", lambda v: v.scatter_add_(0, torch.zeros_like(v[:1], dtype=torch.long),
                                                          v[-1:].clone() * 0.5), True, "inplace"),
                ("index_copy_", lambda v: v.index_copy_(0, torch.tensor([0], device=v.device), v[-1:] * 2), True,
                 "inplace")]
    ops = [o for o in ops if o[2] or not continuous]
    if not ops:
        return None
    label, fn, _, how = rng.choice(ops)
    if how == "inplace":
        return Step(label, fn, [x], [])
    name = fresh()
    if how == "view" and x in writable:
        writable.add(name)
    return Step(label, fn, [x], [name])


# Base tensors of other float dtypes, for the programs not checked against
# CPU (a bfloat16 chain rounds at every op: a last-bit difference upstream
# moves a result by a bfloat16 step).
OTHER_DTYPES = [((6, 5), torch.bfloat16), ((96, 700), torch.bfloat16), ((5,), torch.float64), ((6, 5), torch.float16)]

# Base tensors that require grad (leaves) in the autograd programs.
LEAVES = ("b0", "b1", "b4", "b7", "b8")


def base_env(seed, dtypes=False, grad=False, device=None):
    g = torch.Generator().manual_seed(seed)
    env = {f"b{i}": torch.randn(s, generator=g) for i, s in enumerate(SHAPES)}
    if dtypes:
        for i, (s, dt) in enumerate(OTHER_DTYPES):
            env[f"d{i}"] = torch.randn(s, generator=g).to(dt)
    if device:
        env = {n: t.to(device) for n, t in env.items()}
    if grad:
        for n in LEAVES:
            env[n].requires_grad_()
    return env


def build(seed, continuous, grad=False):
    """A program CPU PyTorch runs without error, and the CPU results."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    env = base_env(seed, dtypes=not continuous, grad=grad)
    writable = set(env) - set(LEAVES if grad else ())
    counter = iter(range(10**6))
    steps, reads = [], []

    def fresh():
        return f"t{next(counter)}"

    while len(steps) < STEPS:
        if len(steps) > 6 and rng.random() < 0.05:
            # a loop: the last few steps again, a few times (x = f(x) rebinds
            # the same names), which the loop detector may cut at
            block = steps[-rng.randint(2, 5):] * rng.randint(2, 4)
        else:
            block = [next_step(env, rng, fresh, writable, continuous)]
            if grad and block[0] is not None and block[0].label == "via tpu:1":
                # autograd sums the gradients a value gets from two devices
                # in the order their threads deliver them: not one result
                continue
        for step in block:
            if step is None:
                break
            before, nreads = dict(env), len(reads)
            try:
                step.apply(env, reads)
            except (RuntimeError, IndexError, ValueError, KeyError):
                # CPU refuses (a write into an expanded view, an empty max), or
                # a repeated step's input was dropped
                env.clear()
                env.update(before)
                del reads[nreads:]
                for name in step.outs:
                    writable.discard(name)
                break
            steps.append(step)
    return steps, env, reads


def run_tpu(seed, steps, mode, continuous, grad=False):
    torch.manual_seed(seed)  # the same random stream in every mode
    env = base_env(seed, dtypes=not continuous, grad=grad, device="tpu")
    leaves = {n: env[n] for n in LEAVES}
    reads = []
    with vtpu.eager_mode(mode):
        for step in steps:
            step.apply(env, reads)
        if grad:
            total = loss(env)
            if total is not None:
                total.backward()  # backward runs in the mode too
            return {n: t.grad.cpu() for n, t in leaves.items() if t.grad is not None}, reads, None
        out = {n: t.detach().cpu() for n, t in env.items()}
    return out, reads, {n: t.stride() for n, t in env.items()}


def layout(strides, shape):
    """The strides user code can observe: those of dims longer than 1 (a
    view() or is_contiguous() never looks at a size-1 dim's stride)."""
    return [st for st, sz in zip(strides, shape) if sz > 1]


def loss(env):
    """A scalar of every value that requires grad, each weighted apart."""
    terms = [(t.float() * (0.01 * (i + 1))).sum() for i, t in enumerate(env.values()) if t.requires_grad]
    return torch.stack(terms).sum() if terms else None


def assert_near(got, ref, what):
    """got is ref within 1e-3 of ref's largest magnitude (or of 1): a value
    written to the wrong place is off by the order of the values, a last-bit
    difference that a later subtraction exposed is not. Non-finite values
    must match exactly."""
    assert got.shape == ref.shape, what
    got, ref = got.double(), ref.double()
    fin, inf = ref.isfinite(), ref.isinf()
    assert torch.equal(ref.isnan(), got.isnan()) and torch.equal(inf, got.isinf()), what
    assert torch.equal(got[inf], ref[inf]), what
    if fin.any():
        scale = max(1.0, ref[fin].abs().max().item())
        err = (got[fin] - ref[fin]).abs().max().item()
        assert err <= 1e-3 * scale, f"off by {err:.3g} (scale {scale:.3g}): {what}"


@pytest.mark.filterwarnings("ignore:tpu matmul precision")
@pytest.mark.parametrize("seed", SEEDS)
def test_program_defer_matches_strict_bit_for_bit(seed):
    check_cpu = seed % 2 == 0
    steps, cpu_env, cpu_reads = build(seed, continuous=check_cpu)
    cpu_env = {n: t.detach() for n, t in cpu_env.items()}
    with torch.tpu.precision("highest"):
        strict, strict_reads, strict_strides = run_tpu(seed, steps, "strict", check_cpu)
        fused, fused_reads, fused_strides = run_tpu(seed, steps, "defer_and_fuse", check_cpu)
    program = "; ".join(s.label for s in steps)
    assert list(strict) == list(fused) == list(cpu_env)
    for name, ref in strict.items():
        got = fused[name]
        assert got.shape == ref.shape and got.dtype == ref.dtype, (name, program)
        assert fused_strides[name] == strict_strides[name], (name, program)
        assert torch.equal(bits(got), bits(ref)), f"{name} differs from Strict after: {program}"
        if check_cpu:
            assert_near(ref, cpu_env[name], f"{name} after: {program}")
        if cpu_env[name].shape == ref.shape:  # (a data-dependent size may differ where values do)
            # laid out as on CPU: a view() or is_contiguous() that works there works here
            assert layout(strict_strides[name], ref.shape) == layout(cpu_env[name].stride(), ref.shape), (
                f"{name}: strides {strict_strides[name]}, CPU {cpu_env[name].stride()}, after: {program}")
    assert [repr(v) for v in fused_reads] == [repr(v) for v in strict_reads], program
    if check_cpu:
        assert_near(torch.tensor(strict_reads, dtype=torch.float64), torch.tensor(cpu_reads, dtype=torch.float64),
                    f"reads of: {program}")


@pytest.mark.filterwarnings("ignore:tpu matmul precision")
@pytest.mark.parametrize("seed", range(len(SEEDS) // 3))
def test_program_backward_defer_matches_strict_bit_for_bit(seed):
    # Leaves require grad; the program's values sum to a loss whose backward
    # runs in the same mode. Gradients only against Strict: the derivative
    # of abs, relu, clamp or a maximum jumps where its input crosses a tie,
    # so a last-bit difference from CPU can move a gradient by a whole step.
    steps, cpu_env, _ = build(seed, continuous=seed % 2 == 0, grad=True)
    program = "; ".join(s.label for s in steps)
    try:
        total = loss(cpu_env)
        if total is not None:
            total.backward()
    except RuntimeError as e:
        # autograd refuses: a value backward needs was updated in place, or
        # a view from chunk/split was (or its base): the same error on tpu
        assert "inplace" in str(e), (e, program)
        for mode in ("strict", "defer_and_fuse"):
            with pytest.raises(RuntimeError) as got:
                run_tpu(seed, steps, mode, seed % 2 == 0, grad=True)
            assert str(got.value).split(":")[0] == str(e).split(":")[0], program
        return
    with torch.tpu.precision("highest"):
        strict, _, _ = run_tpu(seed, steps, "strict", seed % 2 == 0, grad=True)
        fused, _, _ = run_tpu(seed, steps, "defer_and_fuse", seed % 2 == 0, grad=True)
    assert strict.keys() == fused.keys(), program
    for name, ref in strict.items():
        assert torch.equal(bits(fused[name]), bits(ref)), f"grad of {name} differs from Strict after: {program}"


def test_programs_are_recorded_and_fused():
    # The comparisons above prove something only if DeferAndFuse recorded
    # the programs: over a few of them, ops were recorded, fused and flushed.
    vtpu.reset_fusion_stats()
    for seed in range(6):
        steps, _, _ = build(seed, continuous=seed % 2 == 0)
        run_tpu(seed, steps, "defer_and_fuse", seed % 2 == 0)
    s = vtpu.fusion_stats()
    assert s["nodes"] > 100 and s["fused_nodes"] > 50 and s["flushes"] > 6, s
