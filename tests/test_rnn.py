"""Recurrent layers on "tpu": nn.LSTM, nn.GRU, nn.RNN and their cells run
natively (the fused gate ops ATen asks an accelerator for), forward and
backward, matching CPU PyTorch; packed sequences and bad sizes as on CPU.

Tolerances: float64 compares to CPU at 1e-10 (only summation order
differs). float32 runs at "highest" matmul precision (6 bf16 passes, about
fp32 accuracy on every ISA path), so 1e-4 covers the recurrence's
accumulated rounding; bfloat16 compares to CPU's own bfloat16 run loosely
(one bf16 rounding of each gate op, compounded over the steps)."""

import pytest
import torch
import torch.nn.utils.rnn as rnn_utils

import vtpu

pytestmark = pytest.mark.filterwarnings("ignore:tpu matmul precision HIGHEST")

TOL = {torch.float64: (1e-10, 1e-10), torch.float32: (1e-4, 1e-4), torch.bfloat16: (5e-2, 5e-2)}


def close(got, want, dtype, what=""):
    rtol, atol = TOL[dtype]
    if dtype == torch.bfloat16:  # sums of bf16 terms: the error scales with the largest term
        atol = max(atol, 3e-2 * want.abs().max().item())
    torch.testing.assert_close(got.cpu(), want, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")


def pair(cls, dtype, **kw):
    torch.manual_seed(0)
    cpu = cls(**kw).to(dtype)
    tpu = cls(**kw).to(dtype).to("tpu")
    tpu.load_state_dict(cpu.state_dict())
    return cpu, tpu


def check_grads(cpu, tpu, x, xt, dtype):
    close(xt.grad, x.grad, dtype, "input")
    for (name, p), q in zip(cpu.named_parameters(), tpu.parameters()):
        close(q.grad, p.grad, dtype, name)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN])
@pytest.mark.parametrize("bias", [True, False])
def test_layers_forward_backward_match_cpu(cls, dtype, bias):
    cpu, tpu = pair(cls, dtype, input_size=8, hidden_size=16, num_layers=2, bias=bias, batch_first=True,
                    bidirectional=True)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 5, 8, generator=g).to(dtype).requires_grad_()
    xt = x.detach().to("tpu").requires_grad_()
    vtpu.reset_fallback_report()
    with vtpu.cpu_fallback(False), torch.tpu.precision("highest"):
        y, h = cpu(x)
        yt, ht = tpu(xt)
        hs, hts = (h, ht) if isinstance(h, tuple) else ((h,), (ht,))
        (y.float().square().sum() + sum(t.float().sum() for t in hs)).backward()
        (yt.float().square().sum() + sum(t.float().sum() for t in hts)).backward()
    close(yt, y, dtype, "output")
    for a, b in zip(hts, hs):
        close(a, b, dtype, "state")
    check_grads(cpu, tpu, x, xt, dtype)
    assert vtpu.fallback_report() == {}


@pytest.mark.parametrize("cls", [torch.nn.LSTMCell, torch.nn.GRUCell, torch.nn.RNNCell])
def test_cells_with_and_without_state(cls):
    cpu, tpu = pair(cls, torch.float64, input_size=6, hidden_size=10)
    x = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    xt = x.detach().to("tpu").requires_grad_()
    for state in (False, True):
        x.grad = xt.grad = None
        cpu.zero_grad()
        tpu.zero_grad()
        if state:
            h = torch.randn(4, 10, dtype=torch.float64)
            args = ((h, h * 0.5),) if cls is torch.nn.LSTMCell else (h,)
            targs = tuple(tuple(t.to("tpu") for t in a) if isinstance(a, tuple) else a.to("tpu") for a in args)
        else:
            args = targs = ()
        out, tout = cpu(x, *args), tpu(xt, *targs)
        outs, touts = (out, tout) if isinstance(out, tuple) else ((out,), (tout,))
        # only hy's gradient for the LSTM cell's first pass: cy's gradient is absent
        sum(o.sin().sum() for o in outs[: 1 if not state else None]).backward()
        sum(o.sin().sum() for o in touts[: 1 if not state else None]).backward()
        for a, b in zip(touts, outs):
            torch.testing.assert_close(a.cpu(), b, rtol=1e-10, atol=1e-10)
        check_grads(cpu, tpu, x, xt, torch.float64)


def test_unbatched_and_packed_sequences():
    cpu, tpu = pair(torch.nn.LSTM, torch.float64, input_size=4, hidden_size=8, proj_size=3)
    x = torch.randn(7, 4, dtype=torch.float64)
    torch.testing.assert_close(tpu(x.to("tpu"))[0].cpu(), cpu(x)[0], rtol=1e-10, atol=1e-10)  # no batch dim
    seqs = [torch.randn(n, 4, dtype=torch.float64) for n in (5, 3, 2)]
    packed = rnn_utils.pack_sequence(seqs)
    tpacked = rnn_utils.pack_sequence([s.to("tpu") for s in seqs])
    (y, _), (yt, _) = cpu(packed), tpu(tpacked)
    pad, lens = rnn_utils.pad_packed_sequence(y)
    tpad, tlens = rnn_utils.pad_packed_sequence(yt)
    assert torch.equal(lens, tlens)
    torch.testing.assert_close(tpad.cpu(), pad, rtol=1e-10, atol=1e-10)


def test_double_backward_through_the_cell():
    cpu, tpu = pair(torch.nn.GRUCell, torch.float64, input_size=3, hidden_size=4)
    for m, dev in ((cpu, "cpu"), (tpu, "tpu")):
        x = torch.linspace(-1, 1, 6, dtype=torch.float64, device=dev).view(2, 3).requires_grad_()
        (g,) = torch.autograd.grad(m(x).square().sum(), x, create_graph=True)
        (gg,) = torch.autograd.grad(g.sum(), x)
        if dev == "cpu":
            want = gg
        else:
            torch.testing.assert_close(gg.cpu(), want, rtol=1e-10, atol=1e-10)


def test_bad_sizes_and_dtypes_raise_as_errors():
    ig = torch.randn(2, 8, device="tpu")
    cx = torch.randn(2, 2, device="tpu")
    with pytest.raises(RuntimeError, match="hidden_gates"):
        torch.ops.aten._thnn_fused_lstm_cell(ig, torch.randn(2, 4, device="tpu"), cx)
    with pytest.raises(RuntimeError, match="previous state"):
        torch.ops.aten._thnn_fused_lstm_cell(ig, ig, torch.randn(2, 3, device="tpu"))
    with pytest.raises(RuntimeError, match="input_bias"):
        torch.ops.aten._thnn_fused_lstm_cell(ig, ig, cx, torch.randn(7, device="tpu"), torch.randn(7, device="tpu"))
    with pytest.raises(NotImplementedError, match="Long"):
        torch.ops.aten._thnn_fused_gru_cell(ig.long()[:, :6], ig.long()[:, :6], cx.long())
    lstm = torch.nn.LSTM(4, 8).to("tpu")
    with pytest.raises(RuntimeError):  # wrong feature size, as on CPU
        lstm(torch.randn(5, 2, 3, device="tpu"))
    assert lstm(torch.randn(5, 2, 4, device="tpu"))[0].shape == (5, 2, 8)


def aten_steps(x, h, c, params, has_biases, lstm):
    """One layer and direction as ATen runs it on an accelerator, step by
    step: each step's input projection a matmul of its own, then the hidden
    matmul and the fused cell."""
    w_ih, w_hh = params[0], params[1]
    b_ih, b_hh = (params[2], params[3]) if has_biases else (None, None)
    outs = []
    for t in range(x.shape[0]):
        ig, hg = torch.matmul(x[t], w_ih.t()), torch.matmul(h, w_hh.t())
        if lstm:
            h, c, _ = torch.ops.aten._thnn_fused_lstm_cell(ig, hg, c, b_ih, b_hh)
        else:
            h, _ = torch.ops.aten._thnn_fused_gru_cell(ig, hg, h, b_ih, b_hh)
        outs.append(h)
    return torch.stack(outs), h, c


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU])
@pytest.mark.parametrize("bias", [True, False])
def test_layers_project_every_step_at_once_with_the_same_values(cls, dtype, bias):
    """The layers project all steps' inputs in one product (its rows are the
    per-step products' rows: the same bits), then run ATen's step loop: the
    outputs and states equal ATen's accelerator loop exactly, two
    bidirectional layers (the second fed by both directions of the first),
    batch_first."""
    torch.manual_seed(0)
    m = cls(8, 16, num_layers=2, bias=bias, batch_first=True, bidirectional=True).to(dtype).to("tpu")
    x = torch.randn(3, 5, 8).to(dtype).to("tpu")
    lstm = cls is torch.nn.LSTM
    y, state = m(x)
    per = 4 if bias else 2
    flat = list(m._flat_weights)
    layer_in = x.transpose(0, 1)
    hs, cs = [], []
    for layer in range(2):
        outs = []
        for d in range(2):
            h0 = torch.zeros(3, 16, dtype=dtype, device="tpu")
            w = flat[(2 * layer + d) * per:(2 * layer + d + 1) * per]
            src = layer_in.flip(0) if d else layer_in  # the reverse direction walks the steps backwards
            out, h, c = aten_steps(src, h0, h0 if lstm else None, w, bias, lstm)
            outs.append(out.flip(0) if d else out)
            hs.append(h), cs.append(c)
        layer_in = torch.cat(outs, -1)
    assert torch.equal(y.cpu(), layer_in.transpose(0, 1).cpu())
    if lstm:
        assert torch.equal(state[0].cpu(), torch.stack(hs).cpu())
        assert torch.equal(state[1].cpu(), torch.stack(cs).cpu())
    else:
        assert torch.equal(state.cpu(), torch.stack(hs).cpu())


def test_layer_dropout_and_inference_mode():
    """Dropout between layers draws from the device generator (the same
    seed, the same output; another seed, another; eval mode none); under
    inference mode (no autograd key) the layers give what they give with
    autograd."""
    torch.manual_seed(0)
    m = torch.nn.LSTM(8, 16, num_layers=3, dropout=0.5).to("tpu")
    x = torch.randn(5, 3, 8).to("tpu")
    runs = []
    for seed in (7, 7, 8):
        torch.manual_seed(seed)
        runs.append(m(x)[0].cpu())
    assert torch.equal(runs[0], runs[1]) and not torch.equal(runs[0], runs[2])
    m.eval()
    want = m(x)[0]
    assert not torch.equal(want.cpu(), runs[0])
    with torch.inference_mode():
        got = m(x)[0]
    assert torch.equal(got.cpu(), want.cpu())


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU])
def test_layer_backward_states_and_double_backward_match_cpu(cls):
    """A layer is one autograd node per direction whose backward sums the
    weight gradients over all steps at once: in float64 against CPU, the
    gradients of the input, the given initial states and every weight, for
    a loss on the outputs and the final states, on the final state alone
    (no output gradient), and a double backward (create_graph records
    ATen's step loop again)."""
    lstm = cls is torch.nn.LSTM
    cpu, tpu = pair(cls, torch.float64, input_size=5, hidden_size=6, num_layers=2, bidirectional=True)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 3, 5, generator=g, dtype=torch.float64)
    h0 = torch.randn(4, 3, 6, generator=g, dtype=torch.float64)
    c0 = torch.randn(4, 3, 6, generator=g, dtype=torch.float64)

    def grads(m, dev, which):
        xs = x.to(dev).requires_grad_()
        states = (h0.to(dev).requires_grad_(), c0.to(dev).requires_grad_()) if lstm else (h0.to(dev).requires_grad_(),)
        y, st = m(xs, states if lstm else states[0])
        st = st if lstm else (st,)
        leaves = [xs, *states, *m.parameters()]
        if which == "states only":
            loss = sum(s.sin().sum() for s in st)
        else:
            loss = y.square().sum() + sum(s.sin().sum() for s in st)
        if which != "double":
            return [t.cpu() for t in torch.autograd.grad(loss, leaves)]
        (gx,) = torch.autograd.grad(loss, xs, create_graph=True)
        return [t.cpu() for t in torch.autograd.grad(gx.square().sum(), leaves)]

    for which in ("outputs and states", "states only", "double"):
        for got, want in zip(grads(tpu, "tpu", which), grads(cpu, "cpu", which)):
            torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10, msg=lambda m: f"{which}: {m}")


def composed_lstm_cell(ig, hg, cx, bi, bh):
    """The LSTM cell as tpu elementwise ops in PyTorch's order."""
    ws = ig + hg
    if bi is not None:
        ws.add_(bi).add_(bh)
    i, f, g, o = ws.chunk(4, 1)
    i.sigmoid_(), f.sigmoid_(), g.tanh_(), o.sigmoid_()
    cy = torch.mul(f, cx).addcmul_(i, g)
    return o * cy.tanh(), cy, ws


def composed_gru_cell(ig, hg, hx, bi, bh):
    """The GRU cell as tpu elementwise ops in PyTorch's order."""
    B, H = hx.shape
    ws = torch.empty(B, 5 * H, dtype=hx.dtype, device=hx.device)
    w = ws.chunk(5, 1)
    ic, hc = ig.chunk(3, 1), hg.chunk(3, 1)
    bic = bi.chunk(3) if bi is not None else None
    bhc = bh.chunk(3) if bh is not None else None
    for k in range(2):
        torch.add(ic[k], hc[k], out=w[k])
        if bi is not None:
            w[k].add_(bic[k]).add_(bhc[k])
        w[k].sigmoid_()
    w[3].copy_(hx)
    if bh is not None:
        torch.add(hc[2], bhc[2], out=w[4])
    else:
        w[4].copy_(hc[2])
    torch.mul(w[0], w[4], out=w[2]).add_(ic[2])
    if bi is not None:
        w[2].add_(bic[2])
    w[2].tanh_()
    return torch.sub(hx, w[2]).mul_(w[1]).add_(w[2]), ws


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("bias", [True, False])
def test_fused_cells_give_the_composed_ops_bits(dtype, bias):
    """A cell is one kernel (vtpu/rnn.h) that walks the composed cell's ops
    with the same microkernels, rounding each to the dtype: the same bits
    as the ops one by one, on gates that are strided views (a step of a
    [T, B, 4H] projection, a transposed hidden product), 37 units (odd
    lengths: vector tails), values large enough to saturate."""
    g = torch.Generator().manual_seed(3)
    B, H = 5, 37

    def r(*shape):
        return (torch.randn(*shape, generator=g) * 3).to(dtype).to("tpu")

    ig = r(3, B, 4 * H)[1]
    hg = r(4 * H, B).t()
    cx = r(B, 2 * H)[:, ::2]
    bi, bh = (r(4 * H), r(4 * H)) if bias else (None, None)
    got = torch.ops.aten._thnn_fused_lstm_cell(ig, hg, cx, bi, bh)
    for a, b in zip(got, composed_lstm_cell(ig, hg, cx, bi, bh)):
        assert torch.equal(a.cpu(), b.cpu())
    ig, hg = r(B, 3 * H), r(3 * H, B).t()
    bi, bh = (r(3 * H), r(3 * H)) if bias else (None, None)
    hx = r(B, H)
    got = torch.ops.aten._thnn_fused_gru_cell(ig, hg, hx, bi, bh)
    for a, b in zip(got, composed_gru_cell(ig, hg, hx, bi, bh)):
        assert torch.equal(a.cpu(), b.cpu())


def composed_lstm_cell_backward(ghy, gcy, cx, cy, ws):
    """The LSTM cell's backward as tpu elementwise ops in PyTorch's order."""
    i, f, g, o = ws.chunk(4, 1)
    tcy = cy.tanh()
    gc = (ghy * o).mul_((tcy * tcy).neg_().add_(1)) if ghy is not None else torch.zeros_like(cy)
    if gcy is not None:
        gc.add_(gcy)
    gg = torch.empty_like(ws).chunk(4, 1)
    torch.mul(gc, g, out=gg[0]).mul_(i * (1 - i))
    torch.mul(gc, cx, out=gg[1]).mul_(f * (1 - f))
    torch.mul(gc, i, out=gg[2]).mul_((g * g).neg_().add_(1))
    if ghy is not None:
        torch.mul(ghy, tcy, out=gg[3]).mul_(o * (1 - o))
    else:
        gg[3].zero_()
    return torch.cat(gg, 1), gc * f


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_fused_lstm_cell_backward_gives_the_composed_ops_bits(dtype):
    """The LSTM cell's backward is one kernel too: the composed backward's
    bits with grad_hy and grad_cy, either alone, strided gradients, and the
    bias gradient as the gates' gradient summed over the batch."""
    g = torch.Generator().manual_seed(4)
    B, H = 6, 37

    def r(*shape):
        return (torch.randn(*shape, generator=g) * 2).to(dtype).to("tpu")

    ig, hg, cx = r(B, 4 * H), r(B, 4 * H), r(B, H)
    _, cy, ws = torch.ops.aten._thnn_fused_lstm_cell(ig, hg, cx, None, None)
    ghy, gcy = r(B, 2 * H)[:, 1::2], r(H, B).t()
    for a, b in ((ghy, gcy), (ghy, None), (None, gcy)):
        got = torch.ops.aten._thnn_fused_lstm_cell_backward_impl(a, b, cx, cy, ws, True)
        want = composed_lstm_cell_backward(a, b, cx, cy, ws)
        assert torch.equal(got[0].cpu(), want[0].cpu())
        assert torch.equal(got[1].cpu(), want[1].cpu())
        assert torch.equal(got[2].cpu(), want[0].sum(0).cpu())


def composed_gru_cell_backward(ghy, ws):
    """The GRU cell's backward as tpu elementwise ops in PyTorch's order."""
    r, z, n, hx, hn = ws.chunk(5, 1)
    B, H = ghy.shape
    gi = torch.empty(B, 3 * H, dtype=ws.dtype, device=ws.device)
    gh = torch.empty_like(gi)
    gic, ghc = gi.chunk(3, 1), gh.chunk(3, 1)
    torch.sub(hx, n, out=gic[1]).mul_(ghy).mul_(z * (1 - z))
    gic[2].copy_(1 - z).mul_(ghy).mul_((n * n).neg_().add_(1))
    torch.mul(gic[2], hn, out=gic[0]).mul_(r * (1 - r))
    ghc[0].copy_(gic[0])
    ghc[1].copy_(gic[1])
    torch.mul(gic[2], r, out=ghc[2])
    return gi, gh, ghy * z


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_fused_gru_cell_backward_gives_the_composed_ops_bits(dtype):
    """The GRU cell's backward is one kernel: the composed backward's bits
    (a strided grad_hy), and the bias gradients as the gates' gradients
    summed over the batch."""
    g = torch.Generator().manual_seed(5)
    B, H = 6, 37

    def r(*shape):
        return (torch.randn(*shape, generator=g) * 2).to(dtype).to("tpu")

    ig, hg, hx = r(B, 3 * H), r(B, 3 * H), r(B, H)
    bi, bh = r(3 * H), r(3 * H)
    _, ws = torch.ops.aten._thnn_fused_gru_cell(ig, hg, hx, bi, bh)
    ghy = r(H, B).t()
    got = torch.ops.aten._thnn_fused_gru_cell_backward(ghy, ws, True)
    want = composed_gru_cell_backward(ghy, ws)
    for a, b in zip(got[:3], want):
        assert torch.equal(a.cpu(), b.cpu())
    assert torch.equal(got[3].cpu(), want[0].sum(0).cpu())
    assert torch.equal(got[4].cpu(), want[1].sum(0).cpu())
