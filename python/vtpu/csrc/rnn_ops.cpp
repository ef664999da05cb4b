// rnn_ops.cpp — the fused recurrent cells ATen asks an accelerator for
// (nn.LSTM / nn.GRU / LSTMCell / GRUCell route a non-CPU device's gate
// arithmetic through _thnn_fused_lstm_cell and _thnn_fused_gru_cell), and
// the nn.LSTM / nn.GRU layers themselves. The cells and their backwards
// are one runtime node each in f32 / bf16 / f16 (runtime/src/kernels/rnn:
// the bits of the same cell composed of tpu elementwise ops, which f64
// still is, in the gates' dtype as CPU's unfused cells compute); the
// workspace layouts are PyTorch's ([i, f, g, o] activations for LSTM,
// [r, z, n, hx, hn + b_hn] for GRU) so the saved tensors mean the same as
// on any device.
#include <ATen/ATen.h>
#include <ATen/ops/gru_native.h>
#include <ATen/ops/lstm_native.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "common.h"
#include "device_check.h"

namespace vtpu {
namespace {

using Opt = std::optional<at::Tensor>;
using T3 = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using T5 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

void check_float(const char* op, const at::Tensor& t) {
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(t.scalar_type()), "\"", op, "\" not implemented for '",
                              t.scalar_type(), "'");
}

// PyTorch's size checks for the fused cells: gates [B, factor*H] (input and
// hidden the same size), biases [factor*H], previous state [B, H].
void check_cell(const char* op, const at::Tensor& ig, const at::Tensor& hg, const at::Tensor& bi,
                const at::Tensor& bh, int64_t factor, const at::Tensor& prev) {
  TORCH_CHECK(ig.dim() == 2, op, ": expected input_gates to be 2-D, but got ", ig.dim(), "-D");
  TORCH_CHECK(ig.sizes() == hg.sizes(), op, ": input_gates ", ig.sizes(), " and hidden_gates ", hg.sizes(),
              " differ in size");
  TORCH_CHECK(bi.defined() == bh.defined(), op, ": input_bias and hidden_bias must both be given or both absent");
  if (bi.defined()) {
    TORCH_CHECK(bi.dim() == 1 && bi.numel() == ig.size(1), op, ": expected input_bias of size [", ig.size(1),
                "], got ", bi.sizes());
    TORCH_CHECK(bi.sizes() == bh.sizes(), op, ": input_bias ", bi.sizes(), " and hidden_bias ", bh.sizes(),
                " differ in size");
  }
  TORCH_CHECK(prev.dim() == 2 && ig.size(1) % factor == 0 && prev.size(0) == ig.size(0) &&
                  prev.size(1) * factor == ig.size(1),
              op, ": expected the previous state of size [", ig.size(0), ", ", ig.size(1) / factor, "], got ",
              prev.sizes());
  for (const auto* t : {&hg, &bi, &bh, &prev})
    TORCH_CHECK(!t->defined() || t->scalar_type() == ig.scalar_type(), op, ": expected all tensors of dtype ",
                ig.scalar_type(), ", got ", t->scalar_type());
  check_float(op, ig);
}

// input + hidden gates (+ both biases) in a fresh contiguous [B, factor*H].
at::Tensor gate_sum(const at::Tensor& ig, const at::Tensor& hg, const at::Tensor& bi, const at::Tensor& bh) {
  auto gates = at::add(ig, hg);
  if (bi.defined()) gates.add_(bi).add_(bh);
  return gates;
}

// The cells and their backwards as runtime nodes (f32 / bf16 / f16),
// writing the given outputs.
void lstm_cell_node(const at::Tensor& hy, const at::Tensor& cy, const at::Tensor& ws, const at::Tensor& ig,
                    const at::Tensor& hg, const at::Tensor& cx, const at::Tensor& bi, const at::Tensor& bh) {
  const Desc h(hy), c(cy), w(ws), i(ig), g(hg), x(cx), b1(bi), b2(bh);
  check(vt_op_lstm_cell(device_index(ig), "aten::_thnn_fused_lstm_cell", h.p, c.p, w.p, i.p, g.p, x.p, b1.p, b2.p));
}
void gru_cell_node(const at::Tensor& hy, const at::Tensor& ws, const at::Tensor& ig, const at::Tensor& hg,
                   const at::Tensor& hx, const at::Tensor& bi, const at::Tensor& bh) {
  const Desc h(hy), w(ws), i(ig), g(hg), x(hx), b1(bi), b2(bh);
  check(vt_op_gru_cell(device_index(ig), "aten::_thnn_fused_gru_cell", h.p, w.p, i.p, g.p, x.p, b1.p, b2.p));
}
void lstm_backward_node(const at::Tensor& grad_gates, const at::Tensor& grad_cx, const at::Tensor& ghy,
                        const at::Tensor& gcy, const at::Tensor& cx, const at::Tensor& cy, const at::Tensor& ws) {
  const Desc gg(grad_gates), gx(grad_cx), gh(ghy), gc(gcy), x(cx), y(cy), w(ws);
  check(vt_op_lstm_cell_backward(device_index(ws), "aten::_thnn_fused_lstm_cell_backward_impl", gg.p, gx.p, gh.p,
                                 gc.p, x.p, y.p, w.p));
}
void gru_backward_node(const at::Tensor& gi, const at::Tensor& gh, const at::Tensor& ghx, const at::Tensor& ghy,
                       const at::Tensor& ws) {
  const Desc di(gi), dh(gh), dx(ghx), dy(ghy), dw(ws);
  check(vt_op_gru_cell_backward(device_index(ws), "aten::_thnn_fused_gru_cell_backward", di.p, dh.p, dx.p, dy.p,
                                dw.p));
}

// hy, cy, workspace = sigmoid/tanh activations [i, f, g, o].
T3 lstm_cell(const at::Tensor& ig, const at::Tensor& hg, const at::Tensor& cx, const Opt& bi_, const Opt& bh_) {
  const auto bi = value(bi_), bh = value(bh_);
  check_cell("_thnn_fused_lstm_cell", ig, hg, bi, bh, 4, cx);
  TORCH_CHECK(cx.scalar_type() == ig.scalar_type(), "_thnn_fused_lstm_cell: expected cx of dtype ",
              ig.scalar_type(), ", got ", cx.scalar_type());
  if (ig.scalar_type() != at::kDouble) {  // one node: the composed ops' bits (vtpu/rnn.h)
    const int64_t B = ig.size(0), H = ig.size(1) / 4;
    auto opts = ig.options().memory_format(at::MemoryFormat::Contiguous);
    at::Tensor hy = at::empty({B, H}, opts), cy = at::empty({B, H}, opts), ws = at::empty({B, 4 * H}, opts);
    lstm_cell_node(hy, cy, ws, ig, hg, cx, bi, bh);
    return {hy, cy, ws};
  }
  auto ws = gate_sum(ig, hg, bi, bh);
  auto g = ws.chunk(4, 1);
  g[0].sigmoid_();
  g[1].sigmoid_();
  g[2].tanh_();
  g[3].sigmoid_();
  auto cy = at::mul(g[1], cx).addcmul_(g[0], g[2]);  // f * cx + i * g
  auto hy = at::mul(g[3], at::tanh(cy));             // o * tanh(cy)
  return {hy, cy, ws};
}

// (grad_gates, grad_cx, grad_bias) of the fused LSTM cell; an absent
// gradient of hy or cy counts as zeros.
T3 lstm_cell_backward(const Opt& ghy_, const Opt& gcy_, const at::Tensor& cx, const at::Tensor& cy,
                      const at::Tensor& ws, bool has_bias) {
  const auto ghy = value(ghy_), gcy = value(gcy_);
  if (!ghy.defined() && !gcy.defined()) return {};
  const auto& some = ghy.defined() ? ghy : gcy;
  const char* op = "_thnn_fused_lstm_cell_backward";
  TORCH_CHECK(some.dim() == 2, op, ": expected 2-D gradients, got ", some.sizes());
  for (const auto* t : {&ghy, &gcy, &cx, &cy})
    TORCH_CHECK(!t->defined() || t->sizes() == some.sizes(), op, ": expected size ", some.sizes(), ", got ",
                t->sizes());
  TORCH_CHECK(ws.dim() == 2 && ws.numel() == some.numel() * 4, op, ": expected a workspace of ", some.numel() * 4,
              " elements, got ", ws.sizes());
  check_float(op, ws);
  if (ws.scalar_type() != at::kDouble) {  // one node: the composed ops' bits (vtpu/rnn.h)
    const int64_t B = some.size(0), H = some.size(1);
    auto opts = ws.options().memory_format(at::MemoryFormat::Contiguous);
    at::Tensor grad_gates = at::empty({B, 4 * H}, opts), grad_cx = at::empty({B, H}, opts);
    lstm_backward_node(grad_gates, grad_cx, ghy, gcy, cx, cy, ws.view({B, 4 * H}));
    return {grad_gates, grad_cx, has_bias ? grad_gates.sum(0) : at::Tensor()};
  }
  const auto g = ws.view({some.size(0), 4 * some.size(1)}).chunk(4, 1);
  const auto& i = g[0];
  const auto& f = g[1];
  const auto& c = g[2];
  const auto& o = g[3];
  const auto tcy = at::tanh(cy);
  // dL/dcy through hy = o * tanh(cy), plus the gradient reaching cy directly
  at::Tensor gc = ghy.defined() ? at::mul(ghy, o).mul_(at::mul(tcy, tcy).neg_().add_(1)) : at::zeros_like(cy);
  if (gcy.defined()) gc.add_(gcy);
  auto grad_gates = at::empty({some.size(0), 4 * some.size(1)}, ws.options());
  auto gg = grad_gates.chunk(4, 1);
  // sigmoid' = s (1 - s), tanh' = 1 - t^2
  at::mul_out(gg[0], gc, c).mul_(at::mul(i, at::rsub(i, 1)));
  at::mul_out(gg[1], gc, cx).mul_(at::mul(f, at::rsub(f, 1)));
  at::mul_out(gg[2], gc, i).mul_(at::mul(c, c).neg_().add_(1));
  if (ghy.defined())
    at::mul_out(gg[3], ghy, tcy).mul_(at::mul(o, at::rsub(o, 1)));
  else
    gg[3].zero_();
  auto grad_cx = at::mul(gc, f);
  auto grad_bias = has_bias ? grad_gates.sum(0) : at::Tensor();
  return {grad_gates, grad_cx, grad_bias};
}

// hy, workspace = [r, z, n, hx, hn + b_hn].
std::tuple<at::Tensor, at::Tensor> gru_cell(const at::Tensor& ig, const at::Tensor& hg, const at::Tensor& hx,
                                            const Opt& bi_, const Opt& bh_) {
  const auto bi = value(bi_), bh = value(bh_);
  check_cell("_thnn_fused_gru_cell", ig, hg, bi, bh, 3, hx);
  const int64_t B = hx.size(0), H = hx.size(1);
  auto ws = at::empty({B, 5 * H}, hx.options().memory_format(at::MemoryFormat::Contiguous));
  if (ig.scalar_type() != at::kDouble) {  // one node: the composed ops' bits (vtpu/rnn.h)
    at::Tensor hy = at::empty({B, H}, ws.options());
    gru_cell_node(hy, ws, ig, hg, hx, bi, bh);
    return {hy, ws};
  }
  auto w = ws.chunk(5, 1);
  const auto ic = ig.chunk(3, 1), hc = hg.chunk(3, 1);
  const auto bic = bi.defined() ? bi.chunk(3, 0) : std::vector<at::Tensor>(3);
  const auto bhc = bh.defined() ? bh.chunk(3, 0) : std::vector<at::Tensor>(3);
  for (int k = 0; k < 2; k++) {  // reset and update gates: sigmoid of the sum
    at::add_out(w[k], ic[k], hc[k]);
    if (bi.defined()) w[k].add_(bic[k]).add_(bhc[k]);
    w[k].sigmoid_();
  }
  w[3].copy_(hx);
  if (bh.defined())
    at::add_out(w[4], hc[2], bhc[2]);
  else
    w[4].copy_(hc[2]);
  at::mul_out(w[2], w[0], w[4]).add_(ic[2]);  // n = tanh(in + b_in + r * (hn + b_hn))
  if (bi.defined()) w[2].add_(bic[2]);
  w[2].tanh_();
  auto hy = at::sub(hx, w[2]).mul_(w[1]).add_(w[2]);  // n + z * (hx - n)
  return {hy, ws};
}

// (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias).
T5 gru_cell_backward(const at::Tensor& ghy, const at::Tensor& ws, bool has_bias) {
  const char* op = "_thnn_fused_gru_cell_backward";
  TORCH_CHECK(ghy.dim() == 2, op, ": expected a 2-D grad_hy, got ", ghy.sizes());
  TORCH_CHECK(ws.dim() == 2 && ws.size(0) == ghy.size(0) && ws.size(1) == 5 * ghy.size(1), op,
              ": expected a workspace of size [", ghy.size(0), ", ", 5 * ghy.size(1), "], got ", ws.sizes());
  check_float(op, ws);
  const int64_t B = ghy.size(0), H = ghy.size(1);
  if (ws.scalar_type() != at::kDouble) {  // one node: the composed ops' bits (vtpu/rnn.h)
    TORCH_CHECK(ghy.scalar_type() == ws.scalar_type(), op, ": expected grad_hy of dtype ", ws.scalar_type(),
                ", got ", ghy.scalar_type());
    auto opts = ws.options().memory_format(at::MemoryFormat::Contiguous);
    at::Tensor gi = at::empty({B, 3 * H}, opts), gh = at::empty({B, 3 * H}, opts), ghx = at::empty({B, H}, opts);
    gru_backward_node(gi, gh, ghx, ghy, ws);
    if (!has_bias) return {gi, gh, ghx, at::Tensor(), at::Tensor()};
    return {gi, gh, ghx, gi.sum(0), gh.sum(0)};
  }
  const auto w = ws.chunk(5, 1);
  const auto &r = w[0], &z = w[1], &n = w[2], &hx = w[3], &hn = w[4];
  auto gi = at::empty({B, 3 * H}, ws.options().memory_format(at::MemoryFormat::Contiguous));
  auto gh = at::empty_like(gi);
  auto gic = gi.chunk(3, 1), ghc = gh.chunk(3, 1);
  // through hy = n + z (hx - n)
  at::sub_out(gic[1], hx, n).mul_(ghy).mul_(at::mul(z, at::rsub(z, 1)));  // dz (pre-sigmoid)
  at::rsub_out(gic[2], z, 1).mul_(ghy).mul_(at::mul(n, n).neg_().add_(1));  // dn (pre-tanh)
  at::mul_out(gic[0], gic[2], hn).mul_(at::mul(r, at::rsub(r, 1)));       // dr (pre-sigmoid)
  ghc[0].copy_(gic[0]);
  ghc[1].copy_(gic[1]);
  at::mul_out(ghc[2], gic[2], r);
  auto ghx = at::mul(ghy, z);
  at::Tensor gbi, gbh;
  if (has_bias) {
    gbi = gi.sum(0);
    gbh = gh.sum(0);
  }
  return {gi, gh, ghx, gbi, gbh};
}

// ------------------------------------------------------------------ layers
// ATen's nn.LSTM / nn.GRU on an accelerator (RNN.cpp) runs each time step
// as ops autograd records one by one: the step's input projection and
// hidden matmul, the fused cell. Its backward then runs, per step, the
// cell's backward, two products for the gates' inputs and two small
// weight-gradient products whose sums add into w_ih's and w_hh's gradients
// (a weight-sized add per step). Here one direction of one layer is one
// autograd node (Direction): the forward projects every step's input in
// one product up front (as RNN.cpp does for CPU tensors only), then per
// step the hidden matmul and the fused cell, the same ops on the same
// values as ATen's loop; the backward walks the steps back with the
// cells' backward and one product per step (the gradient reaching the
// previous state), then computes the input gradient and the weight and
// bias gradients each as one product or sum over all steps. A backward
// that itself records a graph (create_graph: a double backward) runs
// ATen's step loop again, recorded, and differentiates that. Registered
// for autograd and below it (inference mode); LSTM projections (w_hr) and
// other ranks go to PyTorch's composite.

// The weights of layer l, direction d: w_ih, w_hh, b_ih, b_hh (biases
// undefined without them).
struct Weights {
  at::Tensor w_ih, w_hh, b_ih, b_hh;
};
Weights weights(at::TensorList params, bool has_biases, int64_t index) {
  const int64_t per = has_biases ? 4 : 2;
  Weights w{params[index * per], params[index * per + 1], at::Tensor(), at::Tensor()};
  if (has_biases) w.b_ih = params[index * per + 2], w.b_hh = params[index * per + 3];
  return w;
}

// The step loop of one direction over x [T, B, I] from h0 (and c0, LSTM),
// ATen's ops: the outputs, cell states (LSTM) and workspaces of every step
// [T, ...] in time order, and the last walked step's h and c. in_place:
// each step's cell writes its results straight into those [T, ...]
// tensors (no autograd records the steps: the forward of Direction).
struct Walk {
  at::Tensor y, c, ws, h_last, c_last;
};
Walk walk_in_place(const at::Tensor& gates, const at::Tensor& h0, const at::Tensor& c0, const Weights& w,
                   bool reverse, bool lstm) {
  const int64_t T = gates.size(0), B = gates.size(1), H = h0.size(1);
  const auto opts = gates.options().memory_format(at::MemoryFormat::Contiguous);
  const at::Tensor y = at::empty({T, B, H}, opts), ws = at::empty({T, B, (lstm ? 4 : 5) * H}, opts);
  const at::Tensor cs = lstm ? at::empty({T, B, H}, opts) : at::Tensor();
  const at::Tensor w_hh_t = w.w_hh.t();
  at::Tensor h = h0, c = c0;
  for (int64_t i = 0; i < T; i++) {
    const int64_t t = reverse ? T - 1 - i : i;
    const at::Tensor hg = at::mm(h, w_hh_t), ht = y[t];
    if (lstm) {
      const at::Tensor ct = cs[t];
      lstm_cell_node(ht, ct, ws[t], gates[t], hg, c, w.b_ih, w.b_hh);
      c = ct;
    } else {
      gru_cell_node(ht, ws[t], gates[t], hg, h, w.b_ih, w.b_hh);
    }
    h = ht;
  }
  return {y, cs, ws, h, c};
}
Walk walk(const at::Tensor& x, const at::Tensor& h0, const at::Tensor& c0, const Weights& w, bool reverse,
          bool lstm, bool in_place) {
  const at::Tensor projected = at::matmul(x, w.w_ih.t());  // every step's input projection at once
  if (in_place && x.scalar_type() != at::kDouble) return walk_in_place(projected, h0, c0, w, reverse, lstm);
  const auto gates = projected.unbind(0);
  const int64_t T = x.size(0);
  std::vector<at::Tensor> ys(static_cast<size_t>(T)), cs(lstm ? static_cast<size_t>(T) : 0),
      wss(static_cast<size_t>(T));
  const at::Tensor w_hh_t = w.w_hh.t();
  at::Tensor h = h0, c = c0;
  for (int64_t i = 0; i < T; i++) {
    const auto t = static_cast<size_t>(reverse ? T - 1 - i : i);
    const at::Tensor hg = at::matmul(h, w_hh_t);
    if (lstm) {
      auto r = at::_thnn_fused_lstm_cell(gates[t], hg, c, w.b_ih, w.b_hh);
      h = std::get<0>(r), c = std::get<1>(r), wss[t] = std::get<2>(r);
      cs[t] = c;
    } else {
      auto r = at::_thnn_fused_gru_cell(gates[t], hg, h, w.b_ih, w.b_hh);
      h = std::get<0>(r), wss[t] = std::get<1>(r);
    }
    ys[t] = h;
  }
  return {at::stack(ys, 0), lstm ? at::stack(cs, 0) : at::Tensor(), at::stack(wss, 0), h, c};
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct Direction : public torch::autograd::Function<Direction> {
  // Outputs: y [T, B, H], the last h, and (LSTM) the last c.
  // (c0, b_ih, b_hh: absent for GRU, without biases; as optionals, which
  // autograd leaves out of the graph when absent.)
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& h0, const Opt& c0_,
                               const at::Tensor& w_ih, const at::Tensor& w_hh, const Opt& b_ih_, const Opt& b_hh_,
                               bool reverse, bool lstm) {
    const at::Tensor c0 = value(c0_), b_ih = value(b_ih_), b_hh = value(b_hh_);
    Walk r = walk(x, h0, c0, Weights{w_ih, w_hh, b_ih, b_hh}, reverse, lstm, true);
    ctx->save_for_backward({x, h0, c0, w_ih, w_hh, b_ih, b_hh, r.y});
    ctx->saved_data["c"] = r.c;
    ctx->saved_data["ws"] = r.ws;
    ctx->saved_data["reverse"] = reverse;
    ctx->saved_data["lstm"] = lstm;
    if (!lstm) return {r.y, r.h_last};
    return {r.y, r.h_last, r.c_last};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto sv = ctx->get_saved_variables();
    const at::Tensor &x = sv[0], &h0 = sv[1], &c0 = sv[2], &w_ih = sv[3], &w_hh = sv[4], &b_ih = sv[5],
                     &b_hh = sv[6], &y = sv[7];
    const bool reverse = ctx->saved_data["reverse"].toBool(), lstm = ctx->saved_data["lstm"].toBool();
    if (at::GradMode::is_enabled()) return recorded_backward(sv, grads, reverse, lstm);
    const at::Tensor C = ctx->saved_data["c"].toTensor(), WS = ctx->saved_data["ws"].toTensor();
    const at::Tensor &dy = grads[0], &dh_last = grads[1];
    const int64_t T = x.size(0), B = x.size(1), H = h0.size(1);
    at::Tensor dh = dh_last.defined() ? dh_last : at::zeros_like(h0), dc;
    if (lstm) dc = grads[2].defined() ? grads[2] : at::zeros_like(c0);
    // each step's gate gradients go into dGi [T, B, 4H] (GRU: the input
    // gates' into dGi, the hidden gates' into dGh, [T, B, 3H] each): the
    // nodes write them there, f64's composed cell is copied in
    const bool fused = x.scalar_type() != at::kDouble;
    const auto cont = WS.options().memory_format(at::MemoryFormat::Contiguous);
    const at::Tensor dGi = at::empty({T, B, (lstm ? 4 : 3) * H}, cont);
    const at::Tensor dGh = lstm ? dGi : at::empty({T, B, 3 * H}, cont);
    for (int64_t i = 0; i < T; i++) {  // the walk's steps, last first
      const int64_t t = reverse ? i : T - 1 - i, prev = reverse ? t + 1 : t - 1;
      const at::Tensor g = dy.defined() ? at::add(dh, dy[t]) : dh, gt = dGi[t];
      if (lstm) {
        const at::Tensor cx = prev >= 0 && prev < T ? C[prev] : c0;
        at::Tensor dc_prev;
        if (fused) {
          dc_prev = at::empty({B, H}, gt.options());
          lstm_backward_node(gt, dc_prev, g, dc, cx, C[t], WS[t]);
        } else {
          auto r = at::_thnn_fused_lstm_cell_backward_impl(g, dc, cx, C[t], WS[t], false);
          gt.copy_(std::get<0>(r));
          dc_prev = std::get<1>(r);
        }
        dc = dc_prev;
        dh = at::mm(gt, w_hh);
      } else {
        const at::Tensor ght = dGh[t];
        at::Tensor dhx;
        if (fused) {
          dhx = at::empty({B, H}, ght.options());
          gru_backward_node(gt, ght, dhx, g, WS[t]);
        } else {
          auto r = at::_thnn_fused_gru_cell_backward(g, WS[t], false);
          gt.copy_(std::get<0>(r));
          ght.copy_(std::get<1>(r));
          dhx = std::get<2>(r);
        }
        dh = at::mm(ght, w_hh).add_(dhx);
      }
    }
    const int64_t GH = dGi.size(2);
    // the state each step read: h0 for the first walked step
    const at::Tensor hprev = reverse ? at::cat({y.slice(0, 1), h0.unsqueeze(0)}, 0)
                                     : at::cat({h0.unsqueeze(0), y.slice(0, 0, T - 1)}, 0);
    // whether argument k (x, h0, c0, w_ih, w_hh, b_ih, b_hh) wants a
    // gradient: autograd numbers only the tensors given (absent optionals
    // are not inputs of the node)
    auto needs = [&](int k) {
      if (!sv[static_cast<size_t>(k)].defined()) return false;
      int var = 0;
      for (int j = 0; j < k; j++) var += sv[static_cast<size_t>(j)].defined();
      return ctx->needs_input_grad(var);
    };
    at::Tensor dx, dw_ih, dw_hh, db_ih, db_hh;
    if (needs(0)) dx = at::matmul(dGi, w_ih);
    if (needs(3)) dw_ih = dGi.reshape({T * B, GH}).t().mm(x.reshape({T * B, x.size(2)}));
    if (needs(4)) dw_hh = dGh.reshape({T * B, GH}).t().mm(hprev.reshape({T * B, H}));
    if (needs(5)) db_ih = dGi.sum({0, 1});
    if (needs(6)) db_hh = dGh.sum({0, 1});
    return {dx, dh, dc, dw_ih, dw_hh, db_ih, db_hh, at::Tensor(), at::Tensor()};
  }

  // The backward as a graph of its own: ATen's step loop recorded again
  // from the saved inputs, differentiated with create_graph.
  static variable_list recorded_backward(const variable_list& sv, const variable_list& grads, bool reverse,
                                         bool lstm) {
    Walk r = walk(sv[0], sv[1], sv[2], Weights{sv[3], sv[4], sv[5], sv[6]}, reverse, lstm, false);
    const at::Tensor outs[3] = {r.y, r.h_last, r.c_last};
    variable_list os, gs, ins;
    for (int k = 0; k < static_cast<int>(grads.size()); k++)
      if (grads[static_cast<size_t>(k)].defined() && outs[k].defined() && outs[k].requires_grad())
        os.push_back(outs[k]), gs.push_back(grads[static_cast<size_t>(k)]);
    std::vector<int> at_input;
    for (int k = 0; k < 7; k++)
      if (sv[static_cast<size_t>(k)].defined() && sv[static_cast<size_t>(k)].requires_grad())
        ins.push_back(sv[static_cast<size_t>(k)]), at_input.push_back(k);
    variable_list result(9);
    if (os.empty() || ins.empty()) return result;
    const auto g = torch::autograd::grad(os, ins, gs, /*retain_graph=*/true, /*create_graph=*/true,
                                         /*allow_unused=*/true);
    for (size_t i = 0; i < at_input.size(); i++) result[static_cast<size_t>(at_input[i])] = g[i];
    return result;
  }
};

// The layer stack: output, and the final states (h; c for LSTM) [L*D, B, H].
std::vector<at::Tensor> run_layers(const at::Tensor& input, const at::Tensor& h0, const at::Tensor& c0,
                                   at::TensorList params, bool has_biases, int64_t num_layers, double dropout,
                                   bool train, bool bidirectional, bool batch_first, bool lstm) {
  const int64_t D = bidirectional ? 2 : 1;
  at::Tensor x = batch_first ? input.transpose(0, 1) : input;
  std::vector<at::Tensor> hn, cn;
  for (int64_t l = 0; l < num_layers; l++) {
    std::vector<at::Tensor> outs;
    for (int64_t d = 0; d < D; d++) {
      const Weights w = weights(params, has_biases, l * D + d);
      auto opt = [](const at::Tensor& t) { return t.defined() ? Opt(t) : Opt(); };
      auto r = Direction::apply(x, h0[l * D + d], lstm ? Opt(c0[l * D + d]) : Opt(), w.w_ih, w.w_hh, opt(w.b_ih),
                                opt(w.b_hh), d == 1, lstm);
      outs.push_back(r[0]);
      hn.push_back(r[1]);
      if (lstm) cn.push_back(r[2]);
    }
    x = D == 2 ? at::cat(outs, outs[0].dim() - 1) : outs[0];
    if (dropout != 0 && train && l < num_layers - 1) x = at::dropout(x, dropout, train);
  }
  std::vector<at::Tensor> r{batch_first ? x.transpose(0, 1) : x, at::stack(hn, 0)};
  if (lstm) r.push_back(at::stack(cn, 0));
  return r;
}

// Whether the layers above take these arguments: a batched 3-D input and
// 3-D states, w_ih / w_hh / biases per layer and direction, no LSTM
// projection weights (w_hr).
bool layers_take(const at::Tensor& input, at::TensorList hx, at::TensorList params, bool has_biases,
                 int64_t num_layers, bool bidirectional) {
  const int64_t per = has_biases ? 4 : 2;
  if (input.dim() != 3 || input.size(0) == 0 || num_layers < 1 ||
      static_cast<int64_t>(params.size()) != num_layers * (bidirectional ? 2 : 1) * per)
    return false;
  for (const at::Tensor& t : hx)
    if (t.dim() != 3) return false;
  return true;
}

T3 lstm_layers(const at::Tensor& input, at::TensorList hx, at::TensorList params, bool has_biases, int64_t num_layers,
               double dropout, bool train, bool bidirectional, bool batch_first) {
  if (hx.size() != 2 || !layers_take(input, hx, params, has_biases, num_layers, bidirectional))
    return at::native::lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first);
  auto r = run_layers(input, hx[0], hx[1], params, has_biases, num_layers, dropout, train, bidirectional,
                      batch_first, true);
  return {r[0], r[1], r[2]};
}

std::tuple<at::Tensor, at::Tensor> gru_layers(const at::Tensor& input, const at::Tensor& hx, at::TensorList params,
                                              bool has_biases, int64_t num_layers, double dropout, bool train,
                                              bool bidirectional, bool batch_first) {
  if (!layers_take(input, {hx}, params, has_biases, num_layers, bidirectional))
    return at::native::gru(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first);
  auto r = run_layers(input, hx, at::Tensor(), params, has_biases, num_layers, dropout, train, bidirectional,
                      batch_first, false);
  return {r[0], r[1]};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("lstm.input", lstm_layers);
  m.impl("gru.input", gru_layers);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("lstm.input", lstm_layers);
  m.impl("gru.input", gru_layers);
  VT_IMPL(m, "_thnn_fused_lstm_cell", lstm_cell);
  VT_IMPL(m, "_thnn_fused_lstm_cell_backward_impl", lstm_cell_backward);
  VT_IMPL(m, "_thnn_fused_gru_cell", gru_cell);
  VT_IMPL(m, "_thnn_fused_gru_cell_backward", gru_cell_backward);
}

}  // namespace vtpu
