"""DeferAndFuse: recorded elementwise ops run as fused groups at a flush,
bit-identical to Strict; dead intermediates are never written; flushes at
host reads, other ops, synchronisation, mode switches and loops; RNG,
in-place ops, views, aliasing, autograd and errors behave as in Strict."""

import math
import os
import subprocess
import sys

import pytest
import torch

import vtpu


def gelu_chain(x, bias):
    """The 8-op chain of bench/fuse.py: GELU-tanh written out, scale, bias."""
    inner = math.sqrt(2 / math.pi) * (x + 0.044715 * (x * x * x))
    return (0.5 * x * (1 + torch.tanh(inner))) * 1.7 + bias


def run(mode, fn, *args):
    with vtpu.eager_mode(mode):
        out = fn(*args)
        return [o.cpu() for o in out] if isinstance(out, (tuple, list)) else out.cpu()


@pytest.fixture
def stats():
    torch.tpu.synchronize()
    vtpu.reset_fusion_stats()
    return vtpu.fusion_stats


def test_chain_is_one_group_bit_identical_and_writes_only_the_result(stats):
    x = torch.randn(1000, 1003).to("tpu")
    bias = torch.randn(1003).to("tpu")
    ref = run("strict", gelu_chain, x, bias)
    vtpu.reset_fusion_stats()
    got = run("defer_and_fuse", gelu_chain, x, bias)
    assert torch.equal(got, ref)  # same per-element operations, same bits
    s = stats()
    assert s["groups"] == 1 and s["fused_nodes"] == s["nodes"] >= 8
    assert s["bytes_written"] == x.numel() * 4  # the result only
    assert s["bytes_elided"] == (s["nodes"] - 1) * x.numel() * 4
    cpu = gelu_chain(x.cpu(), bias.cpu())
    torch.testing.assert_close(got, cpu, rtol=1e-5, atol=1e-5)


def test_live_intermediates_are_written(stats):
    x = torch.randn(4096).to("tpu")
    with vtpu.eager_mode("defer_and_fuse"):
        a = x * 2
        b = a + 1
        c = b.exp()
        keep = (a.cpu(), b.cpu(), c.cpu())
    assert stats()["bytes_written"] == 3 * x.numel() * 4
    assert stats()["groups"] == 1
    assert torch.equal(keep[2], (x * 2 + 1).exp().cpu())  # Strict, bit for bit


def test_flushes_at_host_reads_other_ops_sync_and_mode_switch(stats):
    x = torch.arange(6.0).to("tpu")
    with vtpu.eager_mode("defer_and_fuse"):
        y = x * 3
        assert stats()["flushes"] == 0  # recorded, not run
        assert y[2].item() == 6.0  # a host read flushes
        z = y + 1
        s = z.sum()  # recorded too: it ends z's group
        assert s.item() == 51.0
        w = z * 2
        torch.tpu.synchronize()
        n = stats()["flushes"]
        assert n >= 2
        w2 = w - 1
    assert stats()["flushes"] == n + 1  # leaving the mode runs what it recorded
    assert torch.equal(w2.cpu(), (x.cpu() * 3 + 1) * 2 - 1)
    with vtpu.eager_mode("defer_and_fuse"):
        v = x + 5
        print_text = str(v)  # printing reads the host copy
    assert "10." in print_text


def test_reduction_ends_the_group_and_its_dead_input_is_never_written(stats):
    x = torch.randn(512, 1000).to("tpu")

    def f(x):
        rows = (torch.tanh(x * 1.5) + 1).sum(dim=1)  # a walk along rows
        cols = torch.exp(x - 1).amax(dim=0)  # lanes across columns
        return rows, cols, (x * x).mean(), (x + 2).norm()

    ref = run("strict", f, x)
    vtpu.reset_fusion_stats()
    got = run("defer_and_fuse", f, x)
    for a, b in zip(got, ref):
        assert torch.equal(a, b)  # each element computed as in Strict, summed in the same order
    s = stats()
    # Every reduction is fed by its group (the column max a run of its
    # 128-lane tiles per row): only the results are written.
    assert s["groups"] == 4 and s["nodes"] == 11 and s["fused_nodes"] == 11
    assert s["bytes_written"] == (512 + 1000 + 1 + 1) * 4
    assert s["bytes_elided"] == 7 * x.numel() * 4
    cpu = f(x.cpu())
    for a, b in zip(got, cpu):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-4)


def test_reduction_fusion_keeps_dtypes_views_and_live_inputs(stats):
    x = torch.randn(64, 300).to("tpu")
    i = torch.randint(-5, 5, (64, 300)).to("tpu")

    def f(x, i):
        h = (x * 2).to(torch.bfloat16)  # a cast in the group, a float32 sum of bfloat16
        live = x.sin()  # kept by the caller: written, and still fed to its sum
        return (h.sum(dim=1, dtype=torch.float32), (i * 3).sum(), (x + 1).view(-1).sum(), live.sum(dim=0), live)

    ref = run("strict", f, x, i)
    got = run("defer_and_fuse", f, x, i)
    for a, b in zip(got, ref):
        assert a.dtype == b.dtype and torch.equal(a, b)
    for a, b in zip(got, f(x.cpu(), i.cpu())):
        torch.testing.assert_close(a, b, rtol=1e-2 if a.dtype == torch.bfloat16 else 1e-5, atol=1e-3)


def test_attention_written_out_fuses_scale_mask_and_softmax():
    q, k = torch.randn(2, 4, 300, 32).to("tpu"), torch.randn(2, 4, 300, 32).to("tpu")
    causal = torch.ones(300, 300, dtype=torch.bool).tril().to("tpu")

    def f(q, k, causal):  # the attention of code written before fused attention kernels
        s = (q @ k.transpose(-1, -2)) * 0.125
        s = s.masked_fill(~causal, float("-inf"))
        return torch.softmax(s, -1), torch.log_softmax(s * 2, -1)

    ref = run("strict", f, q, k, causal)
    with vtpu.trace() as t:
        got = run("defer_and_fuse", f, q, k, causal)
    for a, b in zip(got, ref):
        assert torch.equal(a, b)
    names = [g["name"] for g in t.groups()]
    # the mask fill and the softmax: one pass; the scaled scores of the log_softmax are never written
    assert "fused: aten::masked_fill_ + aten::_softmax" in names
    assert "fused: aten::mul + aten::_log_softmax" in names
    for a, b in zip(got, f(q.cpu(), k.cpu(), causal.cpu())):
        torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-2)  # one bf16 pass per product, as on a TPU

    # With the mask made beforehand the whole chain is one pass that writes
    # the probabilities only (the softmax's output may take the freed block
    # of the scaled scores, which the pass never writes).
    s = torch.randn(4, 300, 300).to("tpu")
    future = (~causal).clone()

    def probs(s):
        return torch.softmax((s * 0.125).masked_fill(future, float("-inf")), -1)

    ref = run("strict", probs, s)
    vtpu.reset_fusion_stats()
    with vtpu.trace() as t:
        got = run("defer_and_fuse", probs, s)
    assert torch.equal(got, ref)
    (g,) = t.groups()
    assert g["name"] == "fused: aten::mul + aten::copy_ + aten::masked_fill_ + aten::_softmax"
    assert g["bytes"] == s.numel() * 4 and vtpu.fusion_stats()["bytes_elided"] == 3 * s.numel() * 4


def test_norm_ends_the_group_that_computes_its_input(stats):
    x, r = torch.randn(64, 1024).to("tpu"), torch.randn(64, 1024).to("tpu")
    w, b = torch.randn(1024).to("tpu"), torch.randn(1024).to("tpu")
    xb = x.to(torch.bfloat16)

    def f(x, r, xb, w, b):
        h = x + r  # a residual stream: kept, so written, and still fed to its norm
        pre = torch.nn.functional.layer_norm(h, (1024,), w, b)
        post = torch.nn.functional.layer_norm(x * 0.5 + r, (1024,))  # post-norm: the sum is never written
        return (h, pre, post, torch.nn.functional.rms_norm(x * 2 + 1, (1024,), w),
                torch.nn.functional.layer_norm(xb * 3, (1024,)))

    ref = run("strict", f, x, r, xb, w, b)
    vtpu.reset_fusion_stats()
    with vtpu.trace() as t:
        got = run("defer_and_fuse", f, x, r, xb, w, b)
    for a, e in zip(got, ref):
        assert a.dtype == e.dtype and torch.equal(a, e)  # each row staged once, normalised as in Strict
    names = [g["name"] for g in t.groups()]
    assert "fused: aten::add + aten::native_layer_norm" in names
    assert "fused: aten::mul + aten::add + aten::native_layer_norm" in names
    assert "fused: aten::mul + aten::add + aten::_fused_rms_norm" in names
    assert "fused: aten::mul + aten::native_layer_norm" in names
    s = stats()
    n = x.numel()
    # written: h and the four normalised outputs, and the rows' statistics (mean and rstd, the
    # bfloat16 norm's in bfloat16; rstd of the RMS norm); never: x * 0.5 and its sum, x * 2 and
    # its sum, xb * 3
    assert s["bytes_written"] == 4 * n * 4 + n * 2 + (2 * 2 + 1) * 64 * 4 + 2 * 64 * 2
    assert s["bytes_elided"] == 4 * n * 4 + n * 2
    cpu = f(x.cpu(), r.cpu(), xb.cpu(), w.cpu(), b.cpu())
    for a, e in zip(got, cpu):
        tol = 2e-2 if a.dtype == torch.bfloat16 else 1e-5  # bfloat16: a rounding of the output
        torch.testing.assert_close(a, e, rtol=tol, atol=tol)


def test_residual_norm_fuses_where_its_output_reuses_the_product_block():
    # x + o(h), then a norm: the product dies at the add, and the norm's output takes its
    # block. The norm writes each row after the group read it there, so it still ends the group.
    torch.manual_seed(5)
    lin = torch.nn.Linear(512, 512, bias=False).to("tpu")
    norm = torch.nn.RMSNorm(512, eps=1e-6).to("tpu")
    x, h = torch.randn(4, 64, 512).to("tpu"), torch.randn(4, 64, 512).to("tpu")

    def f(x, h):
        y = x + lin(h)
        return y, norm(y)

    with torch.no_grad():
        ref = run("strict", f, x, h)
        with vtpu.trace() as t:
            got = run("defer_and_fuse", f, x, h)
    for a, e in zip(got, ref):
        assert torch.equal(a, e)
    assert [g["name"] for g in t.groups()] == ["fused: aten::add + aten::_fused_rms_norm"]


def test_norm_backward_and_short_rows_in_defer_match_strict():
    torch.manual_seed(3)
    x = torch.randn(300, 77)
    w = torch.randn(77)

    def step(mode):
        xt, wt = x.to("tpu").requires_grad_(), w.to("tpu").requires_grad_()
        with vtpu.eager_mode(mode):
            y = torch.nn.functional.layer_norm(torch.tanh(xt) * 2, (77,), wt)  # rows of 77: run apart
            (y * y).sum().backward()
            return y.cpu(), xt.grad.cpu(), wt.grad.cpu()

    for a, e in zip(step("defer_and_fuse"), step("strict")):
        assert torch.equal(a, e)


def test_masked_fill_matches_cpu_in_place_aliased_and_expanded():
    x = torch.randn(5, 7)
    m = torch.rand(5, 7) > 0.5
    for mode in ("strict", "defer_and_fuse"):
        with vtpu.eager_mode(mode):
            t = x.to("tpu")
            a = t.masked_fill(m.to("tpu"), 2.5)
            b = t.clone().masked_fill_(m[0].to("tpu"), torch.tensor(-1.0, dtype=torch.float64).to("tpu"))
            c = (t > 0).masked_fill((t > 0), False)  # the mask is self
            i = torch.arange(35).view(5, 7).to("tpu").masked_fill(m.to("tpu"), 3.7)  # the value cast to int64
            assert torch.equal(a.cpu(), x.masked_fill(m, 2.5))
            assert torch.equal(b.cpu(), x.clone().masked_fill_(m[0], torch.tensor(-1.0, dtype=torch.float64)))
            assert not c.cpu().any()
            assert torch.equal(i.cpu(), torch.arange(35).view(5, 7).masked_fill(m, 3))
            row = torch.zeros(7).to("tpu").expand(5, 7)  # repeated elements: CPU fills them, warning
            with pytest.warns(UserWarning, match="expanded"):
                row.masked_fill_(torch.ones(5, 7, dtype=torch.bool).to("tpu"), 4.0)
            assert torch.equal(row.cpu(), torch.full((5, 7), 4.0))


def test_rng_matches_strict_stream():
    def f(x):
        torch.manual_seed(7)
        noise = torch.rand(x.shape, device="tpu")
        d = torch.nn.functional.dropout(x * 2, p=0.3, training=True)
        return noise * 2 + 1, d + 1, torch.randn(5, device="tpu")

    x = torch.randn(300).to("tpu")
    for a, b in zip(run("strict", f, x), run("defer_and_fuse", f, x)):
        assert torch.equal(a, b)


def test_in_place_views_and_aliasing_match_strict():
    def f(x):
        y = x * 2
        v = y[1:]  # a view of a pending buffer
        v.add_(1)
        y.mul_(y)  # in place with itself
        t = y.t()  # a transposed view read while y is pending
        u = t + y
        a = x.clone()
        a.add_(a[:])  # b a view of all of a: elementwise in place
        return y, u, a

    x = torch.randn(17, 17).to("tpu")
    for a, b in zip(run("strict", f, x), run("defer_and_fuse", f, x)):
        assert torch.equal(a, b)


def test_partial_overlap_raises_at_the_op_as_in_strict():
    x = torch.arange(10.0).to("tpu")
    with vtpu.eager_mode("defer_and_fuse"):
        with pytest.raises(RuntimeError, match="unsupported operation"):
            x[1:].add_(x[:-1])
        y = x + 1  # still usable
    assert torch.equal(y.cpu(), torch.arange(10.0) + 1)


def test_bad_arguments_raise_at_the_op():
    a = torch.randn(3, 4).to("tpu")
    b = torch.randn(5).to("tpu")
    with vtpu.eager_mode("defer_and_fuse"):
        c = a * 2
        with pytest.raises(RuntimeError, match="size of tensor a"):
            a + b
        assert torch.equal(c.cpu(), a.cpu() * 2)


def test_autograd_through_deferred_ops_matches_strict():
    def f(w):
        w = w.detach().requires_grad_()
        loss = (torch.nn.functional.gelu(w * 3 - 1, approximate="tanh") * w).sigmoid().sum()
        loss.backward()
        return loss, w.grad

    w = torch.randn(64, 33).to("tpu")
    for a, b in zip(run("strict", f, w), run("defer_and_fuse", f, w)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("opt", ["adamw", "adam_amsgrad", "sgd_momentum"])
def test_foreach_optimizer_fuses_per_parameter_bit_identical(stats, opt):
    """torch.optim's foreach step, recorded op by op across all parameters,
    fuses parameter by parameter and computes what Strict's multi-tensor
    kernels compute, bit for bit, f32 and bf16 parameters alike."""
    def make_params():
        g = torch.Generator().manual_seed(5)
        shapes = [(33, 17), (64,), (7, 45), (33, 17), (5, 3, 2)]
        ps = [torch.randn(*s, generator=g) for s in shapes]
        ps[2] = ps[2].bfloat16()
        return [torch.nn.Parameter(p.to("tpu")) for p in ps]

    def steps(mode):
        ps = make_params()
        o = {"adamw": lambda: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, foreach=True),
             "adam_amsgrad": lambda: torch.optim.Adam(ps, lr=1e-2, amsgrad=True, foreach=True),
             "sgd_momentum": lambda: torch.optim.SGD(ps, lr=1e-2, momentum=0.9, nesterov=True, foreach=True)}[opt]()
        g = torch.Generator().manual_seed(6)
        grads = [[torch.randn(p.shape, generator=g).to(p.dtype).to("tpu") for p in ps] for _ in range(3)]
        with vtpu.eager_mode(mode):
            for gs in grads:
                for p, gr in zip(ps, gs):
                    p.grad = gr
                o.step()
            return [p.detach().cpu() for p in ps]

    ref = steps("strict")
    vtpu.reset_fusion_stats()
    got = steps("defer_and_fuse")
    for a, b in zip(got, ref):
        assert torch.equal(a, b)
    s = stats()
    assert s["fused_nodes"] > 0 and s["groups"] < s["nodes"]


def test_error_in_a_group_raises_at_the_flush_naming_the_op():
    a = torch.tensor([4, 5, 6]).to("tpu")
    z = torch.tensor([1, 0, 1]).to("tpu")
    with vtpu.eager_mode("defer_and_fuse"):
        t = a + 1
        q = t // z  # integer division by zero, recorded
        r = q * 2
        with pytest.raises(RuntimeError, match=r"aten::div.*ZeroDivisionError"):
            r.cpu()
        torch.tpu.synchronize()  # reported once
        assert torch.equal((a * 2).cpu(), torch.tensor([8, 10, 12]))


def test_matmul_is_recorded_and_runs_between_groups(stats):
    x = torch.randn(64, 96).to("tpu")
    w = torch.randn(96, 80).to("tpu")
    b = torch.randn(80).to("tpu")

    def f(x, w, b):
        h = (x * 0.5 + 1).tanh()  # one group; the product reads h, so h is written
        return torch.nn.functional.gelu(h @ w + b) * 2  # the product alone, then a group

    ref = run("strict", f, x, w, b)
    vtpu.reset_fusion_stats()
    with vtpu.eager_mode("defer_and_fuse"):
        y = f(x, w, b)
        assert stats()["flushes"] == 0  # the product was recorded, not run
        got = y.cpu()
    assert torch.equal(got, ref)
    s = stats()
    assert s["flushes"] == 1 and s["nodes"] == 7 and s["groups"] == 3 and s["fused_nodes"] == 6
    X, Y = x.numel() * 4, y.numel() * 4
    assert s["bytes_written"] == X + 2 * Y  # h, h @ w and the result
    assert s["bytes_elided"] == 2 * X + 2 * Y  # x * 0.5, + 1, + b and the gelu


def test_shape_ops_are_recorded_between_groups(stats):
    x = torch.randn(4, 64, 32).to("tpu")

    def rotate(x):  # RoPE's half rotation, then a sort and a flip of the result
        a, b = x[..., :16], x[..., 16:]
        r = torch.cat((b * -2, a + 1), dim=-1)  # one group: each half, then its copy into r
        y = (r * 0.5).exp()
        v, i = torch.sort(y, dim=-1)
        return y, v.flip(1), i, torch.tril(y[0])

    ref = run("strict", rotate, x)
    vtpu.reset_fusion_stats()
    with vtpu.eager_mode("defer_and_fuse"):
        out = rotate(x)
        assert stats()["flushes"] == 0  # cat, sort, flip and tril were recorded
        got = [o.cpu() for o in out]
    for g, r in zip(got, ref):
        assert torch.equal(g, r)
    s = stats()
    # recorded, the cat is a copy per input into its slice of r, in the
    # group that computes the halves: they are never written, nor is r * 0.5
    assert s["flushes"] == 1 and s["nodes"] == 9 and s["fused_nodes"] == 6
    assert s["bytes_elided"] == 2 * x.numel() * 4


def test_cat_of_what_a_group_computes_is_written_by_the_group(stats):
    # rotary embedding on attention's q ([B, H, S, D] over [B, S, H, D] memory)
    q = torch.randn(2, 16, 4, 32).to("tpu").transpose(1, 2)
    cos, sin = torch.randn(16, 16).to("tpu"), torch.randn(16, 16).to("tpu")

    def rope(x):
        x1, x2 = x[..., :16], x[..., 16:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    ref = run("strict", rope, q)
    vtpu.reset_fusion_stats()
    got = run("defer_and_fuse", rope, q)
    assert torch.equal(got, ref)
    s = stats()
    # the products, their difference and sum, and the cat's two copies: one
    # group, which writes the result only
    assert s["groups"] == 1 and s["nodes"] == 8 and s["fused_nodes"] == 8
    assert s["bytes_written"] == q.numel() * 4 and s["bytes_elided"] == 6 * q.numel() // 2 * 4

    # through autograd: the gradient of a chunk (SwiGLU's gate and up halves) is a cat
    h0 = torch.randn(64, 96)

    def swiglu_grad(h0):
        h = h0.clone().requires_grad_()
        a, b = h.chunk(2, dim=-1)
        (torch.nn.functional.silu(a) * b).sum().backward()
        return h.grad

    ref = run("strict", swiglu_grad, h0.to("tpu"))
    got = run("defer_and_fuse", swiglu_grad, h0.to("tpu"))
    assert torch.equal(got, ref)
    torch.testing.assert_close(got, swiglu_grad(h0), rtol=1e-5, atol=1e-6)


def test_indexing_ops_are_recorded_and_match_strict(stats):
    torch.manual_seed(0)
    emb = torch.nn.Embedding(50, 16).to("tpu")
    idx = torch.tensor([[1, 4, 4, 9], [0, 2, 49, 4]]).to("tpu")
    x = torch.randn(6, 16).to("tpu")

    def f():
        emb.weight.grad = None
        h = emb(idx) * 2  # index_select, then a group
        g = torch.gather(x, 0, idx[:, :3].repeat(3, 1) % 6)  # gather
        s = x.index_add(0, idx[0] % 6, h[0], alpha=0.5)  # index_add updates a copy of x in place
        (h.sum() + g.sum() + s.sum()).backward()  # embedding_dense_backward
        return h, g, s, emb.weight.grad

    ref = run("strict", f)
    vtpu.reset_fusion_stats()
    with vtpu.eager_mode("defer_and_fuse"):
        emb.weight.grad = None
        h = emb(idx) * 2
        assert stats()["flushes"] == 0  # the lookup was recorded, not run
        got = [t.cpu() for t in f()]
    for a, b in zip(got, ref):
        assert torch.equal(a, b)


def test_advanced_indexing_is_recorded_and_matches_strict(stats):
    torch.manual_seed(0)
    x = torch.randn(6, 5, 4).to("tpu")
    rows = torch.tensor([5, 0, 2, 2]).to("tpu")
    cols = torch.tensor([[1, 4], [0, 0]]).to("tpu")

    def f():
        leaf = x.clone().requires_grad_()
        a = leaf[rows] * 2  # index, then a group
        b = leaf[:, cols, 1:3]  # index with a full slice first
        y = x.clone()
        y[rows, 1] = -1.0  # index_put_
        y.index_put_((rows,), torch.ones(4, 5, 4).to("tpu"), accumulate=True)  # repeated rows add up
        (a.sum() + b.square().sum()).backward()  # index backward: index_put_ with accumulate
        return a, b, y, leaf.grad

    ref = run("strict", f)
    vtpu.reset_fusion_stats()
    with vtpu.eager_mode("defer_and_fuse"):
        z = x[rows] + 1
        z[0, 0] = 7.0
        assert stats()["flushes"] == 0  # index and index_put_ were recorded, not run
        got = [t.cpu() for t in f()]
        assert torch.equal(z.cpu(), (x.cpu()[rows.cpu()] + 1).index_put_((torch.tensor(0), torch.tensor(0)),
                                                                        torch.tensor(7.0)))
    for a, b in zip(got, ref):
        assert torch.equal(a, b)


def test_error_in_a_recorded_op_that_runs_alone_raises_at_the_flush_naming_it(stats):
    logits = torch.randn(4, 5).to("tpu")
    target = torch.tensor([0, 7, 1, 2]).to("tpu")  # 7: out of range, found by the kernel
    with vtpu.eager_mode("defer_and_fuse"):
        loss = torch.nn.functional.cross_entropy(logits * 2, target)
        assert stats()["flushes"] == 0
        with pytest.raises(IndexError, match=r"aten::nll_loss_forward: Target 7 is out of bounds"):
            loss.item()
        torch.tpu.synchronize()  # reported once
        assert torch.equal((logits * 2).cpu(), logits.cpu() * 2)


def test_loop_flushes_once_per_repetition_instead_of_growing(stats):
    x = torch.randn(256).to("tpu")
    with vtpu.eager_mode("defer_and_fuse"):
        for _ in range(6):  # a 12-op body, never read on the host
            x = (x.sin() * 0.5 + 0.1).cos().abs().neg().exp().tanh().sigmoid().mul(2).sub(1).relu()
        assert stats()["loop_flushes"] >= 1
        out = x.cpu()
    assert torch.isfinite(out).all()


def test_threads_share_the_device_record():
    import threading

    x = torch.randn(1000).to("tpu")
    results = {}
    want = [((x + k) * 2).exp().cpu() for k in range(4)]  # Strict

    def worker(k):
        with vtpu.eager_mode("defer_and_fuse"):
            results[k] = ((x + k) * 2).exp().cpu()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(4):
        assert torch.equal(results[k], want[k])


def test_env_var_selects_defer_and_fuse():
    code = (
        "import torch, vtpu\n"
        "x = torch.ones(3, device='tpu') * 2\n"
        "print(int(vtpu.get_eager_mode()), x.sum().item(), vtpu.fusion_stats()['nodes'] > 0)\n"
    )
    env = dict(os.environ, TPU_DEFER_AND_FUSE="1")
    env.pop("TPU_LAUNCH_BLOCKING", None)  # Debug would win over the request
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["2", "6.0", "True"]
    assert out.stderr == ""


def test_trace_shows_fused_groups_and_strict_ops(tmp_path):
    import json

    x = torch.randn(100, 103).to("tpu")
    bias = torch.randn(103).to("tpu")
    path = tmp_path / "trace.json"
    with vtpu.trace(str(path)) as t:
        with vtpu.eager_mode("defer_and_fuse"):
            y = gelu_chain(x, bias)
        with vtpu.eager_mode("strict"):
            z = (x * 2).exp()
    groups = t.groups()
    assert len(groups) == 1
    g = groups[0]
    assert g["nodes"] >= 8 and g["name"].startswith("fused: ") and "aten::tanh" in g["name"]
    assert g["shape"] == "100x103" and g["bytes"] == x.numel() * 4
    strict_ops = [e for e in t.events if e["nodes"] == 1]
    assert [e["name"] for e in strict_ops] == ["aten::mul", "aten::exp"]
    assert all(e["shape"] == "100x103" and e["bytes"] == x.numel() * 4 for e in strict_ops)
    assert all(e["end_ns"] >= e["start_ns"] for e in t.events)
    doc = json.loads(path.read_text())
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == len(t.events) and spans[0]["name"] == g["name"]
    assert "fused" in t.summary()
    del y, z
    rows = torch.randn(100, 1030).to("tpu")
    with vtpu.trace() as t:
        with vtpu.eager_mode("defer_and_fuse"):
            s = (rows * 2).exp().sum(dim=1)
        torch.tpu.synchronize()
    (g,) = t.groups()
    assert g["nodes"] == 3 and g["name"] == "fused: aten::mul + aten::exp + aten::sum"
    assert g["bytes"] == 100 * 4  # the sums: the products and exponentials are never written
    del s
