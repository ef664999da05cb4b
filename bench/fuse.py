"""DeferAndFuse: a pointwise chain on 16M float32 (GELU-tanh written out,
then scale and bias: 11 ATen ops) on "tpu" in Strict and in DeferAndFuse, against
PyTorch CPU eager and Inductor (torch.compile on CPU), in one run.
Targets (issue 11): DeferAndFuse >= 3x CPU eager and >= 1.0x Inductor
(goal 1.2x)."""

import math

import torch

import vtpu
from common import best_time, save

N = 16 * 1024 * 1024
C = math.sqrt(2 / math.pi)


def chain(x, bias):
    inner = C * (x + 0.044715 * (x * x * x))
    return (0.5 * x * (1 + torch.tanh(inner))) * 1.7 + bias


def main():
    print(f"ISA path {vtpu.info()['isa_path']}, {torch.get_num_threads()} threads, {N} float32")
    x_cpu, b_cpu = torch.randn(N), torch.randn(N)
    cpu_s = best_time(lambda: chain(x_cpu, b_cpu), repeat=5)
    compiled = torch.compile(chain)
    ind_s = best_time(lambda: compiled(x_cpu, b_cpu), repeat=5, warmup=2)

    x, b = x_cpu.to("tpu"), b_cpu.to("tpu")

    def on_tpu(mode):
        def run():
            with vtpu.eager_mode(mode):
                y = chain(x, b)
            torch.tpu.synchronize()
            return y

        return run

    strict_s = best_time(on_tpu("strict"), repeat=5, warmup=1)
    vtpu.reset_fusion_stats()
    on_tpu("defer_and_fuse")()
    st = vtpu.fusion_stats()
    fuse_s = best_time(on_tpu("defer_and_fuse"), repeat=5, warmup=1)
    same = torch.equal(on_tpu("strict")().cpu(), on_tpu("defer_and_fuse")().cpu())

    print(f"chain: {st['nodes']} ops, {st['groups']} group(s), {st['bytes_written'] >> 20} MiB written, "
          f"{st['bytes_elided'] >> 20} MiB of dead intermediates never written; bit-identical to Strict: {same}")
    print(f"cpu eager {cpu_s * 1e3:.1f} ms, inductor {ind_s * 1e3:.1f} ms, "
          f"tpu strict {strict_s * 1e3:.1f} ms, tpu defer_and_fuse {fuse_s * 1e3:.1f} ms")
    print(f"defer_and_fuse vs cpu eager: {cpu_s / fuse_s:.2f}x (target >= 3x), "
          f"vs inductor: {ind_s / fuse_s:.2f}x (target >= 1.0x, goal 1.2x), vs strict: {strict_s / fuse_s:.2f}x")
    save("fuse", {"n": N, "cpu_s": cpu_s, "inductor_s": ind_s, "strict_s": strict_s, "defer_s": fuse_s,
                  "stats": st, "bit_identical": same},
         bars={"cpu eager": cpu_s * 1e3, "inductor": ind_s * 1e3, "tpu strict": strict_s * 1e3,
               "tpu defer_and_fuse": fuse_s * 1e3})


if __name__ == "__main__":
    main()
