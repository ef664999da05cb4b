"""A 3-layer MLP trains on "tpu" with losses equal to CPU, and seeded random
numbers on the device are reproducible."""

import torch
import torch.nn as nn


def mlp():
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 10))


def train(device, steps=20):
    torch.manual_seed(0)
    model = mlp().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 32, generator=g).to(device)
    y = torch.randn(64, 10, generator=g).to(device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


def test_mlp_losses_match_cpu():
    cpu_losses, cpu_model = train("cpu")
    with torch.tpu.precision("highest"):  # fp32-accurate matmuls (6 bf16 passes), as CPU computes them
        tpu_losses, tpu_model = train("tpu")
    assert len(tpu_losses) == 20
    for c, t in zip(cpu_losses, tpu_losses):
        assert abs(c - t) <= 1e-5, (cpu_losses, tpu_losses)
    assert tpu_losses[-1] < tpu_losses[0]
    for pc, pt in zip(cpu_model.parameters(), tpu_model.parameters()):
        assert pt.device.type == "tpu"
        torch.testing.assert_close(pt.cpu(), pc, atol=1e-5, rtol=1e-5)


def test_default_precision_changes_numbers_slightly():
    cpu_losses, _ = train("cpu", steps=5)
    tpu_losses, _ = train("tpu", steps=5)  # DEFAULT: fp32 matmuls as one bf16 pass
    diffs = [abs(c - t) for c, t in zip(cpu_losses, tpu_losses)]
    assert max(diffs) > 1e-6  # bf16 rounding is visible...
    assert max(diffs) < 1e-2 * max(cpu_losses)  # ...but training is the same


def test_manual_seed_reproducible():
    torch.manual_seed(0)
    a = torch.rand(4, device="tpu").cpu()
    torch.manual_seed(0)
    b = torch.rand(4, device="tpu").cpu()
    assert torch.equal(a, b)
    assert ((a >= 0) & (a < 1)).all()
    c = torch.rand(4, device="tpu").cpu()
    assert not torch.equal(b, c)  # the generator advanced


def test_rng_state_roundtrip_and_normal():
    torch.tpu.manual_seed(123)
    state = torch.tpu.get_rng_state()
    n1 = torch.randn(10_000, device="tpu").cpu()
    torch.tpu.set_rng_state(state)
    n2 = torch.randn(10_000, device="tpu").cpu()
    assert torch.equal(n1, n2)
    assert abs(n1.mean().item()) < 0.05 and abs(n1.std().item() - 1) < 0.05
    g = torch.Generator(device="tpu").manual_seed(5)
    u1 = torch.empty(100, device="tpu").uniform_(-2, 3, generator=g).cpu()
    g.manual_seed(5)
    u2 = torch.empty(100, device="tpu").uniform_(-2, 3, generator=g).cpu()
    assert torch.equal(u1, u2) and u1.min() >= -2 and u1.max() < 3
