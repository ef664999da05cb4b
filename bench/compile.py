"""Graph mode: one training step (forward, backward, AdamW) of the GPT-style
decoder of bench/gpt_step.py with the loss and the optimizer step compiled
by torch.compile(backend="tpu"), against the same step compiled by Inductor
on CPU (float32), CPU eager, and the tpu eager modes Strict and
DeferAndFuse, all in one run; the tpu variants take turns step by step. The
tpu runs at DEFAULT precision (fp32 matmuls as one bf16 pass), the CPU runs
in float32. Also: the first call's time (trace + compile) per compiled
variant.
Targets (issue 12): compiled >= 1.0x CPU Inductor (goal 1.5x) and faster than
DeferAndFuse eager.

Run: python bench/compile.py [steps]"""

import copy
import sys
import time
import warnings

import torch

import vtpu
from common import save
from vtpu.models import GPT, GPTConfig

CFG = GPTConfig(vocab=8192, d_model=512, n_layers=6, n_heads=8, n_kv_heads=8, max_seq=256)
BATCH, SEQ = 8, 256


def make_step(model, device, backend=None):
    """A training step; backend: compile the loss and the optimizer step."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, capturable=device == "tpu")
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, CFG.vocab, (BATCH, SEQ + 1), generator=g).to(device)
    loss_fn, opt_step = model.loss, opt.step
    if backend:
        loss_fn = torch.compile(model.loss, backend=backend)
        opt_step = torch.compile(opt.step, backend=backend)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(idx[:, :-1], idx[:, 1:])
        loss.backward()
        opt_step()
        return loss

    return step


def first_call(step):
    """Seconds of the first step (tracing and compiling, for a compiled one)."""
    t0 = time.perf_counter()
    step().item()
    return time.perf_counter() - t0


def best_of(step, n):
    best = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        step().item()
        best = min(best, time.perf_counter() - t0)
    return best


def in_turns(steps, n):
    """Best time of one step per tpu variant, taking turns step by step (a
    shared host drifts over a run: turns keep the ratios honest)."""
    best = {}
    for _ in range(n):
        for name, (mode, step) in steps.items():
            with vtpu.eager_mode(mode):
                torch.tpu.synchronize()
                t0 = time.perf_counter()
                step().item()
                torch.tpu.synchronize()
                best[name] = min(best.get(name, float("inf")), time.perf_counter() - t0)
    return best


def main():
    warnings.simplefilter("ignore")
    print(f"ISA path {vtpu.info()['isa_path']}, {torch.get_num_threads()} threads, tpu precision DEFAULT")
    counts = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(counts[0]) if counts else 3
    torch.manual_seed(0)
    base = GPT(CFG)

    cpu_step = make_step(copy.deepcopy(base), "cpu")
    first_call(cpu_step)
    cpu = best_of(cpu_step, n)
    ind_step = make_step(copy.deepcopy(base), "cpu", backend="inductor")
    ind_first = first_call(ind_step)
    ind = best_of(ind_step, n)

    steps = {
        "strict": ("strict", make_step(copy.deepcopy(base).to("tpu"), "tpu")),
        "defer_and_fuse": ("defer_and_fuse", make_step(copy.deepcopy(base).to("tpu"), "tpu")),
        "compiled": ("strict", make_step(copy.deepcopy(base).to("tpu"), "tpu", backend="tpu")),
    }
    firsts = {}
    vtpu.reset_fallback_report()
    for name, (mode, step) in steps.items():
        with vtpu.eager_mode(mode):
            firsts[name] = first_call(step)
    best = in_turns(steps, n)
    fallbacks = vtpu.fallback_report()

    comp = best["compiled"]
    print(f"GPT step (6x512, seq {SEQ}, batch {BATCH}), best of {n}:")
    print(f"  CPU eager {cpu * 1e3:.0f} ms, CPU Inductor {ind * 1e3:.0f} ms (first call {ind_first:.1f} s)")
    print(f"  tpu Strict {best['strict'] * 1e3:.0f} ms, DeferAndFuse {best['defer_and_fuse'] * 1e3:.0f} ms, "
          f"compiled {comp * 1e3:.0f} ms (first call {firsts['compiled']:.1f} s)")
    print(f"  compiled: {ind / comp:.2f}x CPU Inductor (target >= 1.0x, goal 1.5x), "
          f"{best['defer_and_fuse'] / comp:.2f}x DeferAndFuse eager (target > 1.0x), "
          f"{best['strict'] / comp:.2f}x Strict, {cpu / comp:.2f}x CPU eager")
    print(f"  CPU fallbacks during the tpu steps: {fallbacks or 'none'}")
    bars = {"cpu eager": cpu * 1e3, "cpu inductor": ind * 1e3, "tpu strict": best["strict"] * 1e3,
            "tpu defer_and_fuse": best["defer_and_fuse"] * 1e3, "tpu compiled": comp * 1e3}
    save("compile", {"cpu_eager_s": cpu, "inductor_s": ind, "inductor_first_call_s": ind_first,
                     "tpu_s": {k: v for k, v in best.items()}, "tpu_first_call_s": firsts,
                     "compiled_vs_inductor": ind / comp, "compiled_vs_defer": best["defer_and_fuse"] / comp,
                     "fallbacks": fallbacks}, bars)


if __name__ == "__main__":
    main()
