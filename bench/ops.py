"""Op library speed: common model ops on "tpu" (Strict, DEFAULT precision)
against PyTorch CPU eager, float32 and bfloat16, forward and forward+backward,
in one run. Prints each op's time once warm (the best of at least 10 runs,
each including a synchronize for "tpu"; two alternating rounds per device,
common.timed_pair) and the ratio cpu / tpu (> 1: tpu faster). Goal: no op
below 1.0x.

Cases: normalisation, softmax and loss, activations, reductions, embedding,
pooling, recurrent layers, convolutions (NCHW and channels-last: 3x3, 1x1,
depthwise), indexing, cat, topk, cumsum, a 1k-element op (fixed cost) and
an AdamW step.

Run: python bench/ops.py [filter]   (filter: substring of the op names)"""

import copy
import sys

import torch
import torch.nn.functional as F

import vtpu
from common import save, timed_pair

B, T, D, V = 8, 256, 512, 8192  # a GPT step's activations: (B*T, D) rows, vocab V


def cases(dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(B * T, D, generator=g).to(dtype)
    scores = torch.randn(B * 8, T, T, generator=g).to(dtype)
    logits = torch.randn(B * T // 4, V, generator=g).to(dtype)
    tgt = torch.randint(0, V, (B * T // 4,), generator=g)
    w = torch.randn(D, generator=g).to(dtype)
    emb = torch.randn(V, D, generator=g).to(dtype)
    idx = torch.randint(0, V, (B * T,), generator=g)
    img = torch.randn(16, 64, 32, 32, generator=g).to(dtype)
    seq = torch.randn(16, 64, 256, generator=g).to(dtype)  # (batch, time, features)
    cl = img.contiguous(memory_format=torch.channels_last)
    k3 = (torch.randn(64, 64, 3, 3, generator=g) * 0.05).to(dtype)
    k1 = (torch.randn(64, 64, 1, 1, generator=g) * 0.1).to(dtype)
    kd = (torch.randn(64, 1, 3, 3, generator=g) * 0.3).to(dtype)  # depthwise
    rows = torch.randint(0, B * T, (1024,), generator=g)
    cols = torch.randint(0, D, (B * T, 16), generator=g)
    small = torch.randn(32, 32, generator=g).to(dtype)  # 1k elements: fixed cost is all there is
    marker = torch.zeros(1, dtype=torch.int64)  # says which device's optimizer steps
    return [
        ("softmax", lambda s: F.softmax(s, -1), [scores]),
        ("log_softmax", lambda s: F.log_softmax(s, -1), [scores]),
        ("cross_entropy", lambda z, t: F.cross_entropy(z, t), [logits, tgt]),
        ("layer_norm", lambda a, b: F.layer_norm(a, (D,), b, b), [x, w]),
        ("rms_norm", lambda a, b: F.rms_norm(a, (D,), b), [x, w]),
        ("gelu", F.gelu, [x]),
        ("silu", F.silu, [x]),
        ("add", torch.add, [x, x]),
        ("sum(dim=-1)", lambda a: a.sum(-1), [x]),
        ("embedding", lambda i, e: F.embedding(i, e), [idx, emb]),
        ("max_pool2d", lambda a: F.max_pool2d(a, 2), [img]),
        ("batch_norm", lambda a: F.batch_norm(a, None, None, training=True), [img]),
        ("lstm", recurrent(torch.nn.LSTM, dtype), [seq]),
        ("gru", recurrent(torch.nn.GRU, dtype), [seq]),
        ("conv2d 3x3", lambda a, k: F.conv2d(a, k, padding=1), [img, k3]),
        ("conv2d 3x3 cl", lambda a, k: F.conv2d(a, k, padding=1), [cl, k3]),
        ("conv2d 1x1", F.conv2d, [img, k1]),
        ("conv2d 1x1 cl", F.conv2d, [cl, k1]),
        ("conv2d dw3x3", lambda a, k: F.conv2d(a, k, padding=1, groups=64), [img, kd]),
        ("conv2d dw3x3 cl", lambda a, k: F.conv2d(a, k, padding=1, groups=64), [cl, kd]),
        ("index_select", lambda a, i: a.index_select(0, i), [x, rows]),
        ("gather", lambda a, i: a.gather(1, i), [x, cols]),
        ("cat", lambda a, b: torch.cat([a, b]), [x, x]),
        ("topk", lambda a: a.topk(8, dim=-1).values, [x]),
        ("cumsum", lambda a: a.cumsum(-1), [x]),
        ("add 1k", torch.add, [small, small]),
        ("adamw step", adamw(dtype), [marker]),
    ]


def adamw(dtype):
    """One AdamW step (foreach) over a 4.5M-parameter set of tensors shaped
    like a small transformer's, the same values and gradients per device."""
    g = torch.Generator().manual_seed(1)
    shapes = [(512, 512)] * 8 + [(2048, 512)] * 2 + [(512,)] * 8
    params = [torch.randn(s, generator=g).to(dtype) for s in shapes]
    grads = [torch.randn(s, generator=g).to(dtype) for s in shapes]
    opts = {}
    for dev in ("cpu", "tpu"):
        ps = [p.detach().to(dev).requires_grad_() for p in params]
        for p, gr in zip(ps, grads):
            p.grad = gr.to(dev)
        opts[dev] = torch.optim.AdamW(ps, lr=1e-3, foreach=True)
    return lambda m: opts[m.device.type].step()


def recurrent(cls, dtype):
    """A 2-layer recurrent layer (the same weights on each device) applied to its input."""
    torch.manual_seed(0)
    cpu = cls(256, 256, num_layers=2, batch_first=True).to(dtype)
    mods = {"cpu": cpu, "tpu": copy.deepcopy(cpu).to("tpu")}
    return lambda a: mods[a.device.type](a)[0]


def main():
    pattern = sys.argv[1] if len(sys.argv) > 1 else ""
    rows, record = [], {}
    print(f"ISA path {vtpu.info()['isa_path']}, {torch.get_num_threads()} threads")
    print(f"{'op':<16} {'dtype':<9} {'pass':<8} {'cpu ms':>9} {'tpu ms':>9} {'cpu/tpu':>8}")
    for dtype in (torch.float32, torch.bfloat16):
        for name, fn, args in cases(dtype):
            if pattern not in name:
                continue
            for backward in (False, True):
                if backward and not any(a.is_floating_point() for a in args):
                    continue
                c, t = timed_pair(fn, args, backward)
                what = "fwd+bwd" if backward else "fwd"
                dt = str(dtype).replace("torch.", "")
                print(f"{name:<16} {dt:<9} {what:<8} {c * 1e3:9.3f} {t * 1e3:9.3f} {c / t:7.2f}x")
                rows.append(c / t)
                record[f"{name} {dt} {what}"] = {"cpu_s": c, "tpu_s": t, "ratio": c / t}
    if rows:
        print(f"slowest ratio {min(rows):.2f}x, geometric mean {torch.tensor(rows).log().mean().exp():.2f}x")
    save("ops", {"cases": record})


if __name__ == "__main__":
    main()
