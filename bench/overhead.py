"""Per-op overhead: 20,000 small adds (1,000 float32 elements) in Strict eager
mode on "tpu" against the same loop on CPU PyTorch, in one run.
Target (the ops-as-data work): tpu time <= 1.2x CPU time. The candidates are
timed in turns (best of 7 each)."""

import time

import torch

import vtpu
from common import save

N_OPS = 20_000
NUMEL = 1_000


def loop(device):
    a = torch.randn(NUMEL, device=device)
    b = torch.randn(NUMEL, device=device)

    def run():
        x = a
        for _ in range(N_OPS):
            x = x + b
        if device != "cpu":
            torch.tpu.synchronize()
        return x

    return run


def interleaved_best(runs, repeat=7):
    """Best time of each of `runs` (label -> (fn, eager mode)), measured in
    turns, so a machine whose speed drifts during the run (a shared VM)
    shifts every candidate alike instead of skewing the ratios."""
    best = {k: float("inf") for k in runs}
    for r in range(repeat + 1):
        for k, (fn, mode) in runs.items():
            with vtpu.eager_mode(mode):
                t0 = time.perf_counter()
                fn()
                dt = time.perf_counter() - t0
            if r:  # the first turn warms up
                best[k] = min(best[k], dt)
    return best


def main():
    vtpu.set_eager_mode("strict")
    best = interleaved_best({"cpu": (loop("cpu"), "strict"), "tpu": (loop("tpu"), "strict"),
                             "fuse": (loop("tpu"), "defer_and_fuse")})
    cpu, tpu, fuse = best["cpu"], best["tpu"], best["fuse"]
    ratio = tpu / cpu
    print(f"ISA path {vtpu.info()['isa_path']}, {torch.get_num_threads()} threads")
    print(f"{N_OPS} adds of {NUMEL} float32: cpu {cpu * 1e3:.1f} ms ({cpu / N_OPS * 1e6:.2f} us/op), "
          f"tpu strict {tpu * 1e3:.1f} ms ({tpu / N_OPS * 1e6:.2f} us/op), "
          f"tpu defer_and_fuse {fuse * 1e3:.1f} ms ({fuse / N_OPS * 1e6:.2f} us/op)")
    print(f"tpu/cpu time ratio: strict {ratio:.2f}x (target <= 1.2x), defer_and_fuse {fuse / cpu:.2f}x")
    save("overhead", {"n_ops": N_OPS, "numel": NUMEL, "cpu_s": cpu, "tpu_s": tpu, "defer_s": fuse, "ratio": ratio,
                      "target": 1.2},
         bars={"cpu eager": cpu * 1e3, "tpu strict": tpu * 1e3, "tpu defer_and_fuse": fuse * 1e3})


if __name__ == "__main__":
    main()
