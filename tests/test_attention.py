"""F.scaled_dot_product_attention on tpu against CPU PyTorch: forward and
gradients through the fused overrideable backend (tiled C kernel, no CPU
fallback), causal, bool and float masks, grouped-query heads, transposed
views, decode shapes, head dims up to 256, every float dtype, the gradient
of an additive mask, and the inputs that take PyTorch's math path
(dropout, float64)."""

import pytest
import torch
import torch.nn.functional as F

import vtpu

# DEFAULT precision rounds q, k and P, v to bf16 (one MXU pass), so fp32 results
# carry bf16 operand error; at HIGHEST (6 passes) they match CPU within fp32
# tolerance. bf16 / f16 inputs: one pass, outputs rounded to the narrow type.
TOL = {
    ("float32", "highest"): dict(rtol=1e-5, atol=1e-5),
    ("float32", "default"): dict(rtol=2e-2, atol=2e-2),
    ("bfloat16", "default"): dict(rtol=3e-2, atol=3e-2),
    ("float16", "default"): dict(rtol=2e-2, atol=2e-2),
}


def inputs(B, Hq, Hk, L, S, D, Dv, dtype, seed=0, transposed=False):
    g = torch.Generator().manual_seed(seed)

    def mk(H, T, E):
        if transposed:  # [B, T, H, E] memory seen as [B, H, T, E]
            return torch.randn(B, T, H, E, generator=g).to(dtype).transpose(1, 2)
        return torch.randn(B, H, T, E, generator=g).to(dtype)

    return mk(Hq, L, D), mk(Hk, S, D), mk(Hk, S, Dv), mk(Hq, L, Dv)


def run(q, k, v, dout, device, **kw):
    q, k, v = (x.detach().to(device).requires_grad_(True) for x in (q, k, v))
    mask = kw.pop("attn_mask", None)
    if mask is not None:
        mask = mask.to(device)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw)
    out.backward(dout.to(device))
    return [t.detach().cpu() for t in (out, q.grad, k.grad, v.grad)]


def reference(q, k, v, dout, **kw):
    # CPU in float32 on the same values (CPU's narrow-dtype kernels round differently)
    mask = kw.get("attn_mask")
    if mask is not None and mask.dtype != torch.bool:
        kw["attn_mask"] = mask.float()
    return run(q.float(), k.float(), v.float(), dout.float(), "cpu", **kw)


def check(got, want, dtype, prec):
    tol = TOL[(str(dtype).split(".")[1], prec)]
    for name, a, b in zip(("out", "dq", "dk", "dv"), got, want):
        assert a.dtype == dtype and a.shape == b.shape, (name, a.dtype, a.shape, b.shape)
        torch.testing.assert_close(a.float(), b, **tol, msg=lambda m: f"{name}: {m}")


CASES = [
    # B, Hq, Hk, L, S, D, Dv, causal, mask, transposed
    (2, 4, 4, 64, 64, 64, 64, False, None, False),
    (2, 4, 4, 100, 100, 32, 32, True, None, False),
    (1, 8, 2, 37, 37, 64, 64, True, None, True),  # grouped-query, [B, T, H, D] views
    (2, 2, 2, 33, 70, 40, 24, False, "bool", False),  # L != S, Dv != D, bool mask over [L, S]
    (2, 3, 3, 65, 65, 16, 16, False, "float", True),  # additive mask [B, 1, L, S]
    (3, 4, 4, 1, 130, 64, 64, False, None, False),  # decode: one query over a KV cache
    (1, 2, 2, 20, 20, 256, 256, True, None, False),
]


def make_mask(kind, B, L, S, dtype):
    g = torch.Generator().manual_seed(7)
    if kind == "bool":
        m = torch.rand(L, S, generator=g) > 0.3
        m[3] = False  # a fully masked row: output and gradients 0, as CPU
        return m
    if kind == "float":
        return (torch.randn(B, 1, L, S, generator=g) * 2).to(dtype)
    return None


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
@pytest.mark.parametrize(
    "dtype,prec",
    [(torch.float32, "highest"), (torch.float32, "default"), (torch.bfloat16, "default"), (torch.float16, "default")],
    ids=lambda x: str(x),
)
def test_sdpa_matches_cpu(case, dtype, prec):
    B, Hq, Hk, L, S, D, Dv, causal, mask_kind, tr = case
    q, k, v, dout = inputs(B, Hq, Hk, L, S, D, Dv, dtype, transposed=tr)
    kw = dict(is_causal=causal, enable_gqa=Hq != Hk)
    mask = make_mask(mask_kind, B, L, S, dtype)
    if mask is not None:
        kw["attn_mask"] = mask
    want = reference(q, k, v, dout, **dict(kw))
    vtpu.reset_fallback_report()
    with vtpu.cpu_fallback(False), torch.tpu.precision(prec):
        ckw = {n: (x.to("tpu") if isinstance(x, torch.Tensor) else x) for n, x in kw.items()}
        assert torch._fused_sdp_choice(q.to("tpu"), k.to("tpu"), v.to("tpu"), **ckw) == 4  # overrideable
        got = run(q, k, v, dout, "tpu", **dict(kw))
    check(got, want, dtype, prec)


def test_scale_and_3d():
    q, k, v, dout = inputs(1, 3, 3, 30, 45, 24, 24, torch.float32)
    q, k, v, dout = q[0], k[0], v[0], dout[0]  # [H, T, E]
    want = reference(q, k, v, dout, scale=0.37)
    with vtpu.cpu_fallback(False), torch.tpu.precision("highest"):
        got = run(q, k, v, dout, "tpu", scale=0.37)
    check(got, want, torch.float32, "highest")


@pytest.mark.parametrize("nd", [3, 4])
def test_output_and_gradients_laid_out_as_cpu(nd):
    """Every stride order of query, key and value: the output and the
    gradients take CPU's strides, so a view() that works there works here.
    (CPU keeps query's stride order only where its fused kernel runs: 4-D,
    last dim fastest; a 3-D query's output is contiguous.)"""
    import itertools

    base = (2, 3, 6, 5)[-nd:]
    for perm in itertools.permutations(range(nd)):
        x = torch.randn([base[p] for p in perm]).permute([perm.index(i) for i in range(nd)])
        strides = {}
        for dev in ("cpu", "tpu"):
            qkv = [x.detach().to(dev).requires_grad_() for _ in range(3)]
            with vtpu.cpu_fallback(False):
                out = F.scaled_dot_product_attention(*qkv, is_causal=True)
                out.backward(torch.ones_like(out))
            strides[dev] = [out.stride()] + [t.grad.stride() for t in qkv]
        assert strides["tpu"] == strides["cpu"], (perm, x.stride())


def test_backward_deterministic_and_grad_flows():
    q, k, v, dout = inputs(2, 4, 2, 150, 150, 64, 64, torch.float32, seed=3)
    with vtpu.cpu_fallback(False):
        a = run(q, k, v, dout, "tpu", is_causal=True, enable_gqa=True)
        b = run(q, k, v, dout, "tpu", is_causal=True, enable_gqa=True)
    for x, y in zip(a, b):
        assert torch.equal(x, y)


def test_no_grad_forward_only():
    q, k, v, _ = inputs(1, 2, 2, 50, 50, 32, 32, torch.bfloat16)
    with vtpu.cpu_fallback(False), torch.no_grad():
        got = F.scaled_dot_product_attention(q.to("tpu"), k.to("tpu"), v.to("tpu"), is_causal=True).cpu()
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    torch.testing.assert_close(got.float(), want, rtol=3e-2, atol=3e-2)


def test_empty_batch():
    q, k, v, dout = inputs(0, 2, 2, 5, 5, 8, 8, torch.float32)
    with vtpu.cpu_fallback(False):
        got = run(q, k, v, dout, "tpu")
    assert [t.shape for t in got] == [q.shape, q.shape, k.shape, v.shape]


def test_math_path_inputs():
    # dropout takes PyTorch's math path (decomposed native ops)
    q, k, v, dout = inputs(1, 2, 2, 16, 16, 8, 8, torch.float32)
    out = F.scaled_dot_product_attention(q.to("tpu"), k.to("tpu"), v.to("tpu"), dropout_p=0.5)
    assert out.shape == q.shape and torch.isfinite(out.cpu()).all()


@pytest.mark.parametrize(
    "mask_shape,Hk,dtype",
    [((33, 40), 4, torch.float32), ((2, 1, 33, 40), 2, torch.float32), ((2, 4, 33, 40), 4, torch.float32),
     ((1, 4, 1, 40), 1, torch.float32), ((2, 1, 33, 40), 4, torch.bfloat16)],
    ids=str,
)
def test_additive_mask_gradient_in_the_fused_backend(mask_shape, Hk, dtype):
    # an additive mask that requires grad (learned position biases) stays on the fused kernel;
    # its gradient is dS summed over the dims the mask broadcasts along
    q, k, v, dout = inputs(2, 4, Hk, 33, 40, 16, 16, dtype, seed=5)
    mask = (torch.randn(mask_shape, generator=torch.Generator().manual_seed(9)) * 2).to(dtype)
    mc = mask.float().clone().requires_grad_(True)
    want = reference(q, k, v, dout, attn_mask=mc, enable_gqa=Hk != 4)
    mt = mask.to("tpu").requires_grad_(True)
    vtpu.reset_fallback_report()
    with vtpu.cpu_fallback(False), torch.tpu.precision("highest" if dtype == torch.float32 else "default"):
        assert torch._fused_sdp_choice(q.to("tpu"), k.to("tpu"), v.to("tpu"), attn_mask=mt, enable_gqa=Hk != 4) == 4
        got = run(q, k, v, dout, "tpu", attn_mask=mt, enable_gqa=Hk != 4)
    prec = "highest" if dtype == torch.float32 else "default"
    check(got, want, dtype, prec)
    assert mt.grad.dtype == dtype and mt.grad.shape == mask.shape
    torch.testing.assert_close(mt.grad.cpu().float(), mc.grad, **TOL[(str(dtype).split(".")[1], prec)])
    assert vtpu.fallback_report() == {}


def test_overrideable_backward_returns_the_mask_gradient():
    # the aten op called directly, as a backend's own tests do
    q, k, v, dout = inputs(1, 2, 2, 8, 8, 16, 16, torch.float32, seed=2)
    mask = torch.randn(1, 2, 8, 8)
    tq, tk, tv, tm, tdo = (t.to("tpu") for t in (q, k, v, mask, dout))
    with torch.tpu.precision("highest"):
        fwd = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(tq, tk, tv, attn_bias=tm)
        out, lse = fwd[0], fwd[1]
        dq, dk, dv, dm = torch.ops.aten._scaled_dot_product_fused_attention_overrideable_backward(
            tdo, tq, tk, tv, tm, [True, True, True, True], out, lse, fwd[2], fwd[3], fwd[4], fwd[5],
            0.0, False, fwd[6], fwd[7])
    mc = mask.clone().requires_grad_(True)
    want = reference(q, k, v, dout, attn_mask=mc)
    for a, b in zip((out, dq, dk, dv), want):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dm.cpu(), mc.grad, rtol=1e-5, atol=1e-5)


def test_float64_takes_math_path():
    q, k, v, dout = inputs(1, 2, 2, 10, 12, 8, 8, torch.float64)
    want = run(q, k, v, dout, "cpu")
    got = run(q, k, v, dout, "tpu")
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_errors_match_cpu():
    q, k, v, _ = inputs(1, 2, 2, 4, 4, 8, 8, torch.float32)
    bad_k = torch.randn(1, 2, 4, 7)
    with pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(q, bad_k, v)
    with pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(q.to("tpu"), bad_k.to("tpu"), v.to("tpu"))
    # grouped heads without enable_gqa
    k3, v3 = torch.randn(1, 1, 4, 8), torch.randn(1, 1, 4, 8)
    q4 = torch.randn(1, 4, 4, 8)
    with pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(q4, k3[:, :, :, :8].expand(1, 3, 4, 8), v3.expand(1, 3, 4, 8))
    with pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(q4.to("tpu"), k3.expand(1, 3, 4, 8).to("tpu"), v3.expand(1, 3, 4, 8).to("tpu"))
