"""Per-op overhead: 20,000 small adds (1,000 float32 elements) in Strict eager
mode on "tpu" against the same loop on CPU PyTorch, in one run.
Target (the ops-as-data work): tpu time <= 1.2x CPU time."""

import torch

import vtpu
from common import best_time, save

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


def main():
    vtpu.set_eager_mode("strict")
    cpu = best_time(loop("cpu"))
    tpu = best_time(loop("tpu"))
    with vtpu.eager_mode("defer_and_fuse"):
        fuse = best_time(loop("tpu"))
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
