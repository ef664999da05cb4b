"""Elementwise bandwidth: a + b on 16M float32 on "tpu" against the machine's
copy bandwidth (a large tensor copy on CPU PyTorch), PyTorch CPU eager and
Inductor, in one run. Bytes moved: 3 x 64 MiB for a + b, 2 x 64 MiB for a copy.
Target (issue 2): tpu a + b reaches >= 70% of the copy bandwidth."""

import torch

import vtpu
from common import best_time, save

N = 16 * 1024 * 1024
MB = N * 4


def main():
    print(f"ISA path {vtpu.info()['isa_path']}, {torch.get_num_threads()} threads")
    a_cpu, b_cpu = torch.randn(N), torch.randn(N)
    dst = torch.empty(N)
    copy_s = best_time(lambda: dst.copy_(a_cpu), repeat=10)
    copy_bw = 2 * MB / copy_s

    out_cpu = torch.empty(N)
    cpu_s = best_time(lambda: torch.add(a_cpu, b_cpu, out=out_cpu), repeat=10)
    cpu_alloc_s = best_time(lambda: a_cpu + b_cpu, repeat=10)
    compiled = torch.compile(lambda x, y: x + y)
    ind_s = best_time(lambda: compiled(a_cpu, b_cpu), repeat=10, warmup=2)

    a, b = a_cpu.to("tpu"), b_cpu.to("tpu")

    def tpu_add():
        c = a + b
        torch.tpu.synchronize()
        return c

    tpu_s = best_time(tpu_add, repeat=10, warmup=2)
    gbs = lambda s: 3 * MB / s / 1e9  # noqa: E731
    print(f"copy bandwidth (CPU tensor copy, read+write): {copy_bw / 1e9:.1f} GB/s")
    print(f"a + b, 16M float32:  tpu {tpu_s * 1e3:.2f} ms = {gbs(tpu_s):.1f} GB/s")
    print(f"                     cpu eager (out=) {cpu_s * 1e3:.2f} ms = {gbs(cpu_s):.1f} GB/s, "
          f"cpu eager (new tensor) {cpu_alloc_s * 1e3:.2f} ms, inductor {ind_s * 1e3:.2f} ms")
    frac = gbs(tpu_s) * 1e9 / copy_bw
    print(f"tpu a + b / copy bandwidth: {frac:.0%} (target >= 70%)")
    print(f"speed vs cpu eager (new tensor): {cpu_alloc_s / tpu_s:.2f}x, vs inductor: {ind_s / tpu_s:.2f}x")
    save("elementwise", {"n": N, "copy_gbs": copy_bw / 1e9, "tpu_s": tpu_s, "cpu_out_s": cpu_s,
                         "cpu_s": cpu_alloc_s, "inductor_s": ind_s, "fraction_of_copy": frac, "target": 0.7},
         bars={"copy bandwidth, for a+b bytes": copy_s * 1e3 * 1.5, "cpu eager a+b": cpu_alloc_s * 1e3,
               "cpu eager a+b (out=)": cpu_s * 1e3, "inductor a+b": ind_s * 1e3, "tpu a+b": tpu_s * 1e3})


if __name__ == "__main__":
    main()
