"""DeferAndFuse: a pointwise chain on 16M float32 (GELU-tanh written out,
then scale and bias: 11 ATen ops) on "tpu" in Strict and in DeferAndFuse, against
PyTorch CPU eager and Inductor (torch.compile on CPU), in one run; then the
same chain on a 4096 x 4096 matrix ending in a reduction, per row (a walk
along rows) and per column (lanes across columns, as a bias gradient is);
then attention probabilities written out (scale, causal mask, softmax),
and a post-norm residual (layer_norm(x + r), the sum never kept).
Targets (issue 11): the chain in DeferAndFuse >= 3x CPU eager and >= 1.0x
Inductor (goal 1.2x)."""

import math

import torch

import vtpu
from common import best_time, save

N = 16 * 1024 * 1024
C = math.sqrt(2 / math.pi)


def chain(x, bias):
    inner = C * (x + 0.044715 * (x * x * x))
    return (0.5 * x * (1 + torch.tanh(inner))) * 1.7 + bias


def row_sums(x, bias):
    return chain(x, bias).sum(dim=1)


def col_sums(x, bias):
    return chain(x, bias).sum(dim=0)


def masked_softmax(s, future):
    """Attention probabilities as code without a fused attention kernel
    writes them: scale, causal mask (future: the positions to hide), softmax."""
    return torch.softmax((s * 0.125).masked_fill(future, float("-inf")), -1)


def add_norm(x, r):
    """A post-norm transformer's residual: the sum is read by the norm only."""
    return torch.nn.functional.layer_norm(x + r, (x.shape[-1],))


def measure(name, fn, x_cpu, b_cpu):
    cpu_s = best_time(lambda: fn(x_cpu, b_cpu), repeat=5)
    compiled = torch.compile(fn)
    ind_s = best_time(lambda: compiled(x_cpu, b_cpu), repeat=5, warmup=2)
    x, b = x_cpu.to("tpu"), b_cpu.to("tpu")

    def on_tpu(mode):
        def run():
            with vtpu.eager_mode(mode):
                y = fn(x, b)
            torch.tpu.synchronize()
            return y

        return run

    strict_s = best_time(on_tpu("strict"), repeat=5, warmup=1)
    vtpu.reset_fusion_stats()
    on_tpu("defer_and_fuse")()
    st = vtpu.fusion_stats()
    fuse_s = best_time(on_tpu("defer_and_fuse"), repeat=5, warmup=1)
    same = torch.equal(on_tpu("strict")().cpu(), on_tpu("defer_and_fuse")().cpu())
    print(f"{name}: {st['nodes']} ops, {st['groups']} group(s), {st['bytes_written'] >> 10} KiB written, "
          f"{st['bytes_elided'] >> 20} MiB of dead intermediates never written; bit-identical to Strict: {same}")
    print(f"  cpu eager {cpu_s * 1e3:.1f} ms, inductor {ind_s * 1e3:.1f} ms, "
          f"tpu strict {strict_s * 1e3:.1f} ms, tpu defer_and_fuse {fuse_s * 1e3:.1f} ms")
    print(f"  defer_and_fuse vs cpu eager: {cpu_s / fuse_s:.2f}x, vs inductor: {ind_s / fuse_s:.2f}x, "
          f"vs strict: {strict_s / fuse_s:.2f}x")
    return {"cpu_s": cpu_s, "inductor_s": ind_s, "strict_s": strict_s, "defer_s": fuse_s, "stats": st,
            "bit_identical": same}


def main():
    print(f"ISA path {vtpu.info()['isa_path']}, {torch.get_num_threads()} threads, {N} float32")
    flat = measure("chain", chain, torch.randn(N), torch.randn(N))
    print(f"  targets: vs cpu eager >= 3x ({flat['cpu_s'] / flat['defer_s']:.2f}x), vs inductor >= 1.0x, "
          f"goal 1.2x ({flat['inductor_s'] / flat['defer_s']:.2f}x)")
    m, b = torch.randn(4096, 4096), torch.randn(4096)
    rows = measure("chain + sum(dim=1)", row_sums, m, b)
    cols = measure("chain + sum(dim=0)", col_sums, m, b)
    causal = torch.ones(512, 512, dtype=torch.bool).tril()
    att = measure("scale + mask + softmax, 64x512x512", masked_softmax, torch.randn(64, 512, 512), ~causal)
    norm = measure("add + layer_norm, 8192x1024", add_norm, torch.randn(8192, 1024), torch.randn(8192, 1024))
    save("fuse", {"n": N, **flat, "row_sums": rows, "col_sums": cols, "masked_softmax": att, "add_norm": norm},
         bars={"cpu eager": flat["cpu_s"] * 1e3, "inductor": flat["inductor_s"] * 1e3,
               "tpu strict": flat["strict_s"] * 1e3, "tpu defer_and_fuse": flat["defer_s"] * 1e3})


if __name__ == "__main__":
    main()
