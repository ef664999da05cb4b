"""Convolution speed: ResNet-50 and MobileNetV2 layer shapes on "tpu"
(Strict, DEFAULT precision) against PyTorch CPU (oneDNN), NCHW and
channels-last, float32 and bfloat16, forward and forward+backward (input
and weight gradients), in one run. Prints each case's time once warm (the
best of at least 10 runs, each including a synchronize for "tpu") and the
ratio cpu / tpu (> 1: tpu faster). Goal: every case at least 1.0x.

The hosts here have slow spells of seconds (docs/performance.md): each
case is timed in two alternating rounds (cpu, tpu, cpu, tpu) and each
device keeps its best, so a spell does not land on one side only
(common.timed_pair).

Run: python bench/conv.py [filter]   (filter: substring of the case names)"""

import sys

import torch
import torch.nn.functional as F

import vtpu
from common import save, timed_pair

# (name, batch, in channels, out channels, input size, kernel, stride, groups)
SHAPES = [
    ("r50 stem 7x7/2", 2, 3, 64, 224, 7, 2, 1),
    ("r50 1x1 64-64", 4, 64, 64, 56, 1, 1, 1),
    ("r50 3x3 64", 4, 64, 64, 56, 3, 1, 1),
    ("r50 1x1 64-256", 4, 64, 256, 56, 1, 1, 1),
    ("r50 3x3/2 128", 4, 128, 128, 56, 3, 2, 1),
    ("r50 1x1 512-128", 4, 512, 128, 28, 1, 1, 1),
    ("r50 3x3 256", 4, 256, 256, 14, 3, 1, 1),
    ("r50 1x1 1024-256", 4, 1024, 256, 14, 1, 1, 1),
    ("r50 3x3 512", 4, 512, 512, 7, 3, 1, 1),
    ("mnv2 1x1 16-96", 4, 16, 96, 112, 1, 1, 1),
    ("mnv2 dw 32", 4, 32, 32, 112, 3, 1, 32),
    ("mnv2 dw/2 144", 4, 144, 144, 56, 3, 2, 144),
    ("mnv2 dw 384", 4, 384, 384, 14, 3, 1, 384),
    ("mnv2 1x1 384-64", 4, 384, 64, 14, 1, 1, 1),
]


def conv_timed(x, w, stride, groups, backward):
    pad = w.shape[-1] // 2
    return timed_pair(lambda a, b: F.conv2d(a, b, stride=stride, padding=pad, groups=groups), [x, w], backward)


def main():
    pattern = sys.argv[1] if len(sys.argv) > 1 else ""
    rows, record = [], {}
    print(f"ISA path {vtpu.info()['isa_path']}, {torch.get_num_threads()} threads, precision DEFAULT")
    print(f"{'case':<18} {'layout':<6} {'dtype':<9} {'pass':<8} {'cpu ms':>9} {'tpu ms':>9} {'cpu/tpu':>8}")
    g = torch.Generator().manual_seed(0)
    for name, n, c, o, hw, k, stride, groups in SHAPES:
        if pattern not in name:
            continue
        x0 = torch.randn(n, c, hw, hw, generator=g)
        w0 = torch.randn(o, c // groups, k, k, generator=g) / (c // groups * k * k) ** 0.5
        for dtype in (torch.float32, torch.bfloat16):
            for layout in ("nchw", "cl"):
                fmt = torch.channels_last if layout == "cl" else torch.contiguous_format
                x, w = x0.to(dtype).contiguous(memory_format=fmt), w0.to(dtype).contiguous(memory_format=fmt)
                for backward in (False, True):
                    cpu, tpu = conv_timed(x, w, stride, groups, backward)
                    what = "fwd+bwd" if backward else "fwd"
                    dt = str(dtype).replace("torch.", "")
                    print(f"{name:<18} {layout:<6} {dt:<9} {what:<8} {cpu * 1e3:9.3f} {tpu * 1e3:9.3f} "
                          f"{cpu / tpu:7.2f}x", flush=True)
                    rows.append(cpu / tpu)
                    record[f"{name} {layout} {dt} {what}"] = {"cpu_s": cpu, "tpu_s": tpu, "ratio": cpu / tpu}
    if rows:
        print(f"slowest ratio {min(rows):.2f}x, geometric mean {torch.tensor(rows).log().mean().exp():.2f}x")
    save("conv", {"cases": record})


if __name__ == "__main__":
    main()
