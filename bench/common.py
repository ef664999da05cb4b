"""Shared bench helpers: best-of-N wall time and a JSON record of each run."""

import json
import os
import platform
import time

import torch

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def best_time(fn, repeat=5, warmup=1):
    """Best wall time of fn() over `repeat` runs (after `warmup` runs)."""
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def steady_time(fn, warmup_s=0.03, run_s=0.15, min_runs=10, max_runs=300):
    """Best wall time of fn() once warm: runs it for warmup_s (at least 3
    times: first-call costs such as allocator growth and thread start-up),
    then times it at least min_runs times and for run_s, up to max_runs."""
    t_end = time.perf_counter() + warmup_s
    for i in range(1_000_000):
        fn()
        if i >= 2 and time.perf_counter() >= t_end:
            break
    best, runs, t_end = float("inf"), 0, time.perf_counter() + run_s
    while runs < max_runs and (runs < min_runs or time.perf_counter() < t_end):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        runs += 1
    return best


def timed(fn, args, backward, device, placements=3):
    """steady_time of fn(*args) on device (with out.backward(ones) when
    backward), each run ending in a synchronize for "tpu": the median over
    `placements` fresh copies of the arguments. Where a buffer lands decides
    whether a memory-bound op reads it at cache or at DRAM speed (2-3x apart
    on the VMs here, for CPU and tpu buffers alike), so one placement per
    device would make a short op's ratio a coin toss."""
    times, held = [], []  # earlier copies stay allocated: the next one lands elsewhere
    for _ in range(placements):
        # CPU PyTorch's OpenMP threads poll for milliseconds after a parallel
        # region: let them sleep, so neither device is timed on cores the
        # other still holds
        time.sleep(0.05)
        # leaves of this device: a tensor copied from one that requires grad
        # would carry the gradient back to the CPU tensor in every backward;
        # one device tensor per distinct argument: add(x, x) reads one tensor
        # on both devices; a clone on CPU (.to("cpu") keeps the tensor itself)
        moved = {}
        placed = [moved.setdefault(id(a), a.detach().clone() if device == "cpu" else a.detach().to(device)) for a in args]
        leaves = [a.requires_grad_() if backward and a.is_floating_point() else a for a in placed]
        held.append(placed)

        def run():
            out = fn(*leaves)
            if backward:
                out.backward(torch.ones_like(out))
            if device == "tpu":
                torch.tpu.synchronize()

        times.append(steady_time(run))
    return sorted(times)[len(times) // 2]


def timed_pair(fn, args, backward, rounds=2):
    """(cpu seconds, tpu seconds) of fn(*args): timed in `rounds` alternating
    rounds (cpu, tpu, cpu, tpu), each device keeping its best. The hosts here
    have slow spells of seconds (docs/performance.md); alternating keeps one
    from landing on one device only."""
    cpu = tpu = float("inf")
    for _ in range(rounds):
        cpu = min(cpu, timed(fn, args, backward, "cpu"))
        tpu = min(tpu, timed(fn, args, backward, "tpu"))
    return cpu, tpu


def save(name, record, bars=None):
    """Write the run's JSON and, when matplotlib is there (``make bench``
    installs it), a PNG bar chart of ``bars`` (label -> milliseconds)."""
    os.makedirs(RESULTS, exist_ok=True)
    import vtpu

    record = dict(record, machine=platform.machine(), torch=torch.__version__, threads=torch.get_num_threads(),
                  vtpu=vtpu.info())
    path = os.path.join(RESULTS, f"{name}.json")
    with open(path, "w") as f:
        json.dump(record, f, indent=2)
    print(f"wrote {path}")
    if bars:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return
        fig, ax = plt.subplots(figsize=(7, 0.5 + 0.45 * len(bars)))
        labels = list(bars)
        ax.barh(labels, [bars[k] for k in labels], color=["#4c72b0" if "tpu" in k else "#999999" for k in labels])
        ax.invert_yaxis()
        ax.set_xlabel("milliseconds (lower is better)")
        ax.set_title(f"vtpu bench: {name}")
        fig.tight_layout()
        png = os.path.join(RESULTS, f"{name}.png")
        fig.savefig(png, dpi=100)
        plt.close(fig)
        print(f"wrote {png}")
