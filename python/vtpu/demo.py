"""The main demo (``make demo``): the tpu device, its chip and ISA path, a
small MLP trained on "tpu" next to the same run on CPU, and the ops that
fell back to the CPU."""

import warnings

import torch
import torch.nn as nn

import vtpu


def train(device, steps=8):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, 64, generator=g).to(device)
    y = torch.randint(0, 10, (256,), generator=g).to(device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    info = vtpu.info()
    print(f"device      : {torch.device('tpu')} ({info['devices']} device(s)), {info['name']}")
    hbm = info["hbm_capacity_bytes"] / 2**30
    print(f"chip        : {info['chip']}, HBM {info['chip_hbm_bytes'] / 2**30:.0f} GiB (usable here: {hbm:.1f} GiB)")
    print(f"ISA path    : {info['isa_path']} (matrix engine: {info['mxu_path']}, {info['threads']} threads), "
          f"eager mode: {info['eager_mode']}")

    vtpu.reset_fallback_report()
    cpu = train("cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the report below lists what fell back
        with torch.tpu.precision("highest"):
            tpu = train("tpu")
        tpu_default = train("tpu")
    print("\nstep   loss (cpu)   loss (tpu, HIGHEST)  |diff|     loss (tpu, DEFAULT)  |diff|")
    for i, (c, t, d) in enumerate(zip(cpu, tpu, tpu_default)):
        print(f"{i:4d}   {c:10.6f}   {t:10.6f}           {abs(c - t):.1e}    {d:10.6f}           {abs(c - d):.1e}")
    worst = max(abs(c - t) for c, t in zip(cpu, tpu))
    print(f"HIGHEST precision (6 bf16 passes) matches CPU: max |diff| = {worst:.1e} "
          f"({'match' if worst <= 1e-5 else 'MISMATCH'})")
    print("DEFAULT precision (1 bf16 pass, the TPU default) shows the bf16 rounding a TPU would give.")

    print("\nCPU fallback report (ops without a native tpu kernel yet):")
    for op, n in vtpu.fallback_report().items():
        print(f"  {op:40s} {n}")
    print(f"\nmemory: {torch.tpu.memory_allocated() / 2**20:.1f} MiB allocated, "
          f"peak {torch.tpu.max_memory_allocated() / 2**20:.1f} MiB")
    return 0 if worst <= 1e-5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
