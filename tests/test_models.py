"""Real models on "tpu" with the CPU fallback forbidden: a GPT-style decoder
(embedding, RMSNorm, rotary, SDPA with grouped-query heads, SwiGLU, tied
head) training with AdamW, its greedy generation with a KV cache, a vision
transformer (patch conv, class token, nn.MultiheadAttention, LayerNorm, GELU)
training with AdamW, and a small CNN (conv, batch and group norm, pooling,
GELU, dropout) training with SGD. At HIGHEST precision their losses,
parameters and tokens match CPU."""

import copy
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import vtpu
from vtpu.models import GPT, GPTConfig, SmallCNN, ViT

CFG = GPTConfig(vocab=256, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, max_seq=64)


def gpt(block_std=None):
    torch.manual_seed(0)
    m = GPT(CFG)
    with torch.no_grad():  # well-separated logits, so greedy tokens are not decided by rounding
        m.embed.weight.normal_(0, 1.0)
        if block_std:  # blocks strong enough to move the next token off the tied head's echo of the input
            for n, p in m.named_parameters():
                if p.dim() == 2 and not n.startswith("embed"):
                    p.normal_(0, block_std)
    return m


def tokens(batch, seq, seed=1):
    return torch.randint(0, CFG.vocab, (batch, seq), generator=torch.Generator().manual_seed(seed))


def train_gpt(model, device, steps=3):
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    idx = tokens(4, 33).to(device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = model.loss(idx[:, :-1], idx[:, 1:])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


def test_gpt_training_step_native_and_matches_cpu():
    base = gpt()
    cpu_losses, cpu_model = train_gpt(copy.deepcopy(base), "cpu")
    vtpu.reset_fallback_report()
    with vtpu.cpu_fallback(False), torch.tpu.precision("highest"):
        tpu_losses, tpu_model = train_gpt(copy.deepcopy(base), "tpu")
    assert vtpu.fallback_report() == {}
    # fp32 everywhere; differences come from summation order only
    for c, t in zip(cpu_losses, tpu_losses):
        assert abs(c - t) <= 1e-4 * abs(c), (cpu_losses, tpu_losses)
    assert tpu_losses[-1] < tpu_losses[0]
    for (n, pc), pt in zip(cpu_model.named_parameters(), tpu_model.parameters()):
        torch.testing.assert_close(pt.detach().cpu(), pc.detach(), rtol=1e-3, atol=1e-4, msg=n)


def test_gpt_generation_with_kv_cache_native_and_matches_cpu():
    base = gpt(block_std=0.3).eval()
    prompt = tokens(2, 8, seed=2)
    want = base.generate(prompt, 16)
    m = copy.deepcopy(base).to("tpu")
    vtpu.reset_fallback_report()
    with vtpu.cpu_fallback(False), torch.tpu.precision("highest"):
        got = m.generate(prompt.to("tpu"), 16)
        got = got.cpu()
    assert vtpu.fallback_report() == {}
    assert got.shape == (2, 16)
    assert torch.equal(got, want), (got, want)
    assert len(set(want.flatten().tolist())) > 2  # the model does not emit one token over and over


def test_gpt_generation_uses_the_cache():
    # Decoding with the cache gives the logits of a full forward pass over the sequence.
    m = gpt().eval().to("tpu")
    seq = tokens(1, 12, seed=3).to("tpu")
    with torch.no_grad(), torch.tpu.precision("highest"):
        full = m(seq)
        caches = m.new_caches(1, "tpu")
        m(seq[:, :11], caches, 0)
        last = m(seq[:, 11:], caches, 11)
    torch.testing.assert_close(last[:, 0].cpu(), full[:, 11].cpu(), rtol=1e-4, atol=1e-4)


def train_classifier(model, device, opt, image, seed, steps, autocast=None):
    """steps of cross-entropy training on one fixed batch of 8 random images."""
    model = model.to(device).train()
    opt = opt(model.parameters())
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(8, 3, image, image, generator=g).to(device)
    y = torch.randint(0, 10, (8,), generator=g).to(device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        with torch.autocast(device, dtype=autocast or torch.float32, enabled=autocast is not None):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


def train_cnn(model, device, steps=2):
    return train_classifier(model, device, lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9), 16, 4, steps)


def test_cnn_training_step_native_and_matches_cpu():
    torch.manual_seed(0)
    base = SmallCNN()
    base.head[1].p = 0.0  # dropout draws differ between generators; the draw itself is checked below
    cpu_losses, cpu_model = train_cnn(copy.deepcopy(base), "cpu")
    vtpu.reset_fallback_report()
    with vtpu.cpu_fallback(False), torch.tpu.precision("highest"):
        tpu_losses, tpu_model = train_cnn(copy.deepcopy(base), "tpu")
    assert vtpu.fallback_report() == {}
    for c, t in zip(cpu_losses, tpu_losses):
        assert abs(c - t) <= 1e-4 * abs(c), (cpu_losses, tpu_losses)
    for (n, bc), bt in zip(cpu_model.state_dict().items(), tpu_model.state_dict().values()):
        if bc.dtype.is_floating_point:  # weights and BatchNorm running statistics
            torch.testing.assert_close(bt.cpu(), bc, rtol=1e-3, atol=1e-4, msg=n)
        else:
            assert torch.equal(bt.cpu(), bc), n


def train_vit(model, device, steps=3, autocast=None):
    return train_classifier(model, device, lambda p: torch.optim.AdamW(p, lr=3e-3, weight_decay=0.05), 32, 5, steps,
                            autocast)


def test_vit_training_step_native_and_matches_cpu():
    torch.manual_seed(0)
    base = ViT()
    cpu_losses, cpu_model = train_vit(copy.deepcopy(base), "cpu")
    vtpu.reset_fallback_report()
    with vtpu.cpu_fallback(False), torch.tpu.precision("highest"):
        tpu_losses, tpu_model = train_vit(copy.deepcopy(base), "tpu")
    assert vtpu.fallback_report() == {}
    for c, t in zip(cpu_losses, tpu_losses):
        assert abs(c - t) <= 1e-4 * abs(c), (cpu_losses, tpu_losses)
    assert tpu_losses[-1] < tpu_losses[0]
    for (n, pc), pt in zip(cpu_model.named_parameters(), tpu_model.parameters()):
        pc, pt = pc.detach(), pt.detach().cpu()
        if n.endswith("in_proj_bias"):
            # The key bias adds one constant to a whole row of scores, which
            # softmax ignores: its true gradient is 0, and AdamW turns the
            # rounding noise of either device into full-size steps. Compare
            # the query and value biases.
            pc, pt = pc.view(3, -1)[[0, 2]], pt.view(3, -1)[[0, 2]]
        torch.testing.assert_close(pt, pc, rtol=1e-3, atol=1e-4, msg=n)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_vit_trains_with_dropout_under_autocast(dtype):
    torch.manual_seed(0)
    with vtpu.cpu_fallback(False):
        losses, _ = train_vit(ViT(dropout=0.1), "tpu", steps=4, autocast=dtype)
    assert all(math.isfinite(l) for l in losses) and losses[-1] < losses[0], losses


def test_cnn_with_dropout_trains_natively():
    torch.manual_seed(0)
    model = SmallCNN()
    with vtpu.cpu_fallback(False):
        losses, _ = train_cnn(model, "tpu", steps=3)
    assert all(l == l for l in losses)  # finite


@pytest.mark.parametrize("dtype", [torch.bfloat16])
def test_gpt_trains_in_bf16_autocast(dtype):
    m = gpt().to("tpu")
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    idx = tokens(4, 33).to("tpu")
    losses = []
    with vtpu.cpu_fallback(False):
        for _ in range(4):
            opt.zero_grad()
            with torch.autocast("tpu", dtype=dtype):
                loss = m.loss(idx[:, :-1], idx[:, 1:])
            assert loss.dtype == torch.float32  # cross_entropy runs in fp32 under autocast
            loss.backward()
            opt.step()
            losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_module_to_keeps_parameters_and_ties():
    # Module.to() swaps each Parameter's data in place, as for CUDA, so a
    # tied head stays tied and references held by an optimizer stay valid.
    m = GPT(CFG)
    emb = m.embed.weight
    m.to("tpu")
    assert m.embed.weight is emb and m.head.weight is emb
    assert emb.device.type == "tpu" and isinstance(emb, nn.Parameter)
    m.to("cpu")
    assert m.head.weight is m.embed.weight and emb.device.type == "cpu"
