"""Graph mode's generated code for fused groups (runtime/src/graph/codegen.c):
elementwise chains compiled with backend "tpu" with generated code, the
same programs on the interpreter (the members' kernels tile by tile:
compiler "none"), CPU Inductor and CPU eager, in one run, float32 and
bfloat16. Cases: a chain of arithmetic on three 16M-element inputs (one
dense dim: the plain loop), a bias, a relu and a per-row scale on a
4096 x 4096 matrix (broadcast operands: the walk along rows), the same
with gelu, and a gated activation with silu and gelu (members that call
their kernels).

Run: python bench/codegen.py"""

import statistics
import tempfile
import os
import time

import torch

import vtpu
from common import save
from vtpu import _C

N = 16 << 20


def chain(x, y, b):
    t = x * y + b
    u = (t - 0.5) * 1.7
    return torch.relu(u) / (x.abs() + 1.0)


def bias_act(x, b, s):
    return torch.relu(x + b) * s


def bias_gelu(x, b, s):
    return torch.nn.functional.gelu(x + b) * s


def gated(x, y, b):
    """A gated MLP's activation (SwiGLU-like) with a bias and a residual
    scale: the transcendental members run their kernels on the group's
    chunks."""
    return torch.nn.functional.silu(x + b) * y + torch.nn.functional.gelu(y) * 0.5


CASES = {
    "chain, 16M elements": (chain, lambda g: (torch.randn(N, generator=g), torch.randn(N, generator=g),
                                              torch.randn(N, generator=g))),
    "bias + relu, per-row scale, 4096x4096": (bias_act, lambda g: (torch.randn(4096, 4096, generator=g),
                                                                    torch.randn(4096, generator=g),
                                                                    torch.randn(4096, 1, generator=g))),
    "bias + gelu, per-row scale, 4096x4096": (bias_gelu, lambda g: (torch.randn(4096, 4096, generator=g),
                                                                  torch.randn(4096, generator=g),
                                                                  torch.randn(4096, 1, generator=g))),
    "silu(x + b) * y + gelu(y) / 2, 16M elements": (gated, lambda g: (torch.randn(N, generator=g),
                                                                     torch.randn(N, generator=g),
                                                                     torch.randn(N, generator=g))),
}


def median_ms(fn, args, sync):
    ts = []
    for _ in range(9):
        t0 = time.perf_counter()
        fn(*args)
        if sync:
            torch.tpu.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def main():
    cc = os.environ.get("VTPU_CC") or "cc"
    print(f"ISA path {vtpu.info()['isa_path']}, {torch.get_num_threads()} threads, C compiler {cc}")
    record = {}
    for name, (fn, make) in CASES.items():
        for dtype in (torch.float32, torch.bfloat16):
            args = [a.to(dtype) for a in make(torch.Generator().manual_seed(0))]
            on_tpu = [a.to("tpu") for a in args]
            inductor = torch.compile(fn)
            inductor(*args)
            tpu = {}
            for mode in (cc, "none", cc, "none"):  # in turns: the machine drifts
                _C._codegen_set_compiler(mode)
                torch._dynamo.reset()
                f = torch.compile(fn, backend="tpu")
                f(*on_tpu)
                f(*on_tpu)  # a group is compiled (or loaded) in its second program run
                tpu.setdefault(mode, []).append(median_ms(f, on_tpu, True))
            _C._codegen_set_compiler(cc)
            gen, plans = min(tpu[cc]), min(tpu["none"])
            ind, eager = median_ms(inductor, args, False), median_ms(fn, args, False)
            key = f"{name}, {str(dtype)[6:]}"
            record[key] = {"generated_ms": gen, "plans_ms": plans, "cpu_inductor_ms": ind, "cpu_eager_ms": eager}
            print(f"{key}: generated {gen:.2f} ms, interpreter {plans:.2f} ms ({plans / gen:.2f}x), "
                  f"CPU Inductor {ind:.2f} ms ({ind / gen:.2f}x), CPU eager {eager:.2f} ms ({eager / gen:.1f}x)")
    save("codegen", record)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="vtpu-bench-cache-") as cache:
        os.environ["VTPU_CACHE_DIR"] = cache  # a cold cache: the run compiles its groups
        main()
