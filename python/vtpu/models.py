"""Small reference models that exercise the op library the way real work
does: a GPT-style decoder (embedding, RMSNorm, rotary positions, SDPA,
SwiGLU MLP, tied head) with a KV cache for generation, a vision transformer
built like torchvision's (patch convolution, class token, learned positions,
nn.MultiheadAttention, GELU MLP) and a small CNN.
The demo, the tests and the benches use them; they are plain PyTorch and
run on any device."""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    vocab: int = 512
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2  # grouped-query attention when < n_heads
    max_seq: int = 256
    ffn_mult: float = 8 / 3
    rope_base: float = 10000.0


def rotary_tables(head_dim, max_seq, base, device=None):
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    t = torch.arange(max_seq, device=device, dtype=torch.float32)
    freqs = torch.outer(t, inv)
    return freqs.cos(), freqs.sin()


def apply_rotary(x, cos, sin):
    # x: [B, H, T, D]; rotate pairs (x1, x2) of the two halves.
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d], x[..., d:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.norm = nn.RMSNorm(dim, eps=eps)

    def forward(self, x):
        return self.norm(x)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.h, self.kvh = cfg.n_heads, cfg.n_kv_heads
        self.hd = cfg.d_model // cfg.n_heads
        self.q = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.kv = nn.Linear(cfg.d_model, 2 * self.kvh * self.hd, bias=False)
        self.o = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x, cos, sin, cache=None, pos=0):
        B, T, _ = x.shape
        q = self.q(x).view(B, T, self.h, self.hd).transpose(1, 2)
        k, v = self.kv(x).view(B, T, 2, self.kvh, self.hd).unbind(2)
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        q = apply_rotary(q, cos[pos:pos + T], sin[pos:pos + T])
        k = apply_rotary(k, cos[pos:pos + T], sin[pos:pos + T])
        if cache is not None:
            ck, cv = cache
            ck[:, :, pos:pos + T] = k
            cv[:, :, pos:pos + T] = v
            k, v = ck[:, :, :pos + T], cv[:, :, :pos + T]
        # A single new token attends to the whole cache; a prompt is causal.
        y = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1, enable_gqa=self.h != self.kvh)
        return self.o(y.transpose(1, 2).reshape(B, T, -1))


class SwiGLU(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        hidden = int(cfg.ffn_mult * cfg.d_model)
        hidden = 32 * math.ceil(hidden / 32)
        self.gate_up = nn.Linear(cfg.d_model, 2 * hidden, bias=False)
        self.down = nn.Linear(hidden, cfg.d_model, bias=False)

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n1, self.attn = RMSNorm(cfg.d_model), Attention(cfg)
        self.n2, self.mlp = RMSNorm(cfg.d_model), SwiGLU(cfg)

    def forward(self, x, cos, sin, cache=None, pos=0):
        x = x + self.attn(self.n1(x), cos, sin, cache, pos)
        return x + self.mlp(self.n2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        self.head.weight = self.embed.weight  # tied
        cos, sin = rotary_tables(cfg.d_model // cfg.n_heads, cfg.max_seq, cfg.rope_base)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx, caches=None, pos=0):
        x = self.embed(idx)
        for i, b in enumerate(self.blocks):
            x = b(x, self.cos, self.sin, None if caches is None else caches[i], pos)
        return self.head(self.norm(x))

    def loss(self, idx, targets):
        logits = self(idx)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    def new_caches(self, batch, device=None, dtype=torch.float32):
        c = self.cfg
        shape = (batch, c.n_kv_heads, c.max_seq, c.d_model // c.n_heads)
        return [(torch.zeros(shape, device=device, dtype=dtype), torch.zeros(shape, device=device, dtype=dtype))
                for _ in range(c.n_layers)]

    @torch.no_grad()
    def generate(self, prompt, new_tokens):
        """Greedy decoding with a KV cache: one prompt pass, then one token per step."""
        caches = self.new_caches(prompt.shape[0], prompt.device, self.embed.weight.dtype)
        logits = self(prompt, caches, 0)
        pos = prompt.shape[1]
        out = []
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        for _ in range(new_tokens):
            out.append(nxt)
            logits = self(nxt, caches, pos)
            pos += 1
            nxt = logits[:, -1].argmax(-1, keepdim=True)
        return torch.cat(out, dim=1)


class SmallCNN(nn.Module):
    """Conv-BatchNorm-ReLU blocks, max and adaptive average pooling, dropout, a linear head."""

    def __init__(self, classes=10, width=16):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(2 * width, 4 * width, 3, padding=1), nn.GroupNorm(4, 4 * width), nn.GELU(),
            nn.AdaptiveAvgPool2d(1))
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(0.1), nn.Linear(4 * width, classes))

    def forward(self, x):
        return self.head(self.features(x))


class ViTBlock(nn.Module):
    def __init__(self, dim, heads, mlp_dim, dropout):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = nn.MultiheadAttention(dim, heads, dropout=dropout, batch_first=True)
        self.ln2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_dim), nn.GELU(), nn.Dropout(dropout),
                                 nn.Linear(mlp_dim, dim), nn.Dropout(dropout))
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.drop(self.attn(h, h, h, need_weights=False)[0])
        return x + self.mlp(self.ln2(x))


class ViT(nn.Module):
    """A vision transformer laid out as torchvision's vit_b_16, at a small size."""

    def __init__(self, image=32, patch=8, dim=64, depth=2, heads=4, mlp_dim=128, classes=10, dropout=0.0):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim) * 0.02)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.Sequential(*[ViTBlock(dim, heads, mlp_dim, dropout) for _ in range(depth)])
        self.ln = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)  # (batch, patches, dim)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        x = self.ln(self.blocks(self.drop(x)))
        return self.head(x[:, 0])
