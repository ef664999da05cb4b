// dist.cpp — tpu_dist, the torch.distributed backend for "tpu" tensors.
// A collective is device work: it is queued as a host step (vt_enqueue_host)
// on the device's communication queue, with its staging copies and AVG's
// division. The runtime orders it after the work producing its inputs, and
// work that uses its buffers after it; the caller's stream waits for it at
// work.wait() or through the work's future, as a stream does for a
// collective on an accelerator. So collectives overlap compute, and no call
// drains the device. On the queue's worker the step hands CPU
// aliases of the device buffers (device memory is host memory) to the
// transport, a Gloo process group. Before the data, the ranks exchange what
// each is calling, so a mismatched shape, dtype or op, or an input that a
// failed op poisoned, fails on every rank with the same message instead of
// exchanging garbage.
#include <c10/core/StreamGuard.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <sstream>
#include <thread>

#include "common.h"
#include "heartbeat.h"

extern "C" {
#include "vtpu/comm.h"
}

namespace vtpu {
namespace {

namespace py = pybind11;

enum Kind : int64_t {
  kAllreduce = 1, kBroadcast, kReduce, kAllgather, kAllgatherBase, kGather, kScatter, kReduceScatter,
  kReduceScatterBase, kAlltoallBase, kAlltoall, kBarrier, kSend, kRecv, kAllreduceCoalesced,
  kAllgatherCoalesced, kReduceScatterCoalesced,
};

// Queued op names must be static strings.
const char* step_name(Kind k) {
  switch (k) {
    case kAllreduce: return "tpu_dist allreduce";
    case kBroadcast: return "tpu_dist broadcast";
    case kReduce: return "tpu_dist reduce";
    case kAllgather: return "tpu_dist allgather";
    case kAllgatherBase: return "tpu_dist all_gather_into_tensor";
    case kGather: return "tpu_dist gather";
    case kScatter: return "tpu_dist scatter";
    case kReduceScatter: return "tpu_dist reduce_scatter";
    case kReduceScatterBase: return "tpu_dist reduce_scatter_tensor";
    case kAlltoallBase: return "tpu_dist all_to_all_single";
    case kAlltoall: return "tpu_dist all_to_all";
    case kBarrier: return "tpu_dist barrier";
    case kSend: return "tpu_dist send";
    case kRecv: return "tpu_dist recv";
    case kAllreduceCoalesced: return "tpu_dist allreduce_coalesced";
    case kAllgatherCoalesced: return "tpu_dist allgather_into_tensor_coalesced";
    case kReduceScatterCoalesced: return "tpu_dist reduce_scatter_tensor_coalesced";
  }
  return "tpu_dist";
}

const char* reduce_name(int64_t op) {
  static const char* names[] = {"SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"};
  return op >= 0 && op < 9 ? names[op] : "";
}

// What a rank calls, as exchanged before the data. -1: not compared (a
// field that may differ between ranks, such as all_to_all's split sizes).
enum Field { fKind, fDtype, fNumel, fReduce, fRoot, fPoisoned, kFields };
using Desc = std::array<int64_t, kFields>;

std::string describe_call(const Desc& d) {
  std::ostringstream os;
  os << (step_name(static_cast<Kind>(d[fKind])) + 9);
  if (d[fReduce] >= 0) os << "(" << reduce_name(d[fReduce]) << ")";
  if (d[fNumel] >= 0) os << " of " << d[fNumel] << " elements";
  if (d[fDtype] >= 0) os << " of " << c10::toString(static_cast<c10::ScalarType>(d[fDtype]));
  if (d[fRoot] >= 0) os << " with root " << d[fRoot];
  return os.str();
}

// The ranks' calls disagree or one's input is poisoned: the same message on
// every rank, or "" when all is well.
std::string check_calls(const std::vector<Desc>& all, int rank, const char* own_fault) {
  for (size_t r = 0; r < all.size(); r++) {
    if (!all[r][fPoisoned]) continue;
    if (static_cast<int>(r) == rank)
      return std::string("the input on this rank (") + std::to_string(r) + ") holds the error of a failed op: " +
             own_fault;
    return "the input on rank " + std::to_string(r) +
           " holds the error of a failed op, so no rank exchanges data (rank " + std::to_string(r) +
           " raises that error)";
  }
  for (size_t r = 1; r < all.size(); r++) {
    Desc a = all[0], b = all[r];
    a[fPoisoned] = b[fPoisoned] = 0;
    if (a != b)
      return "ranks disagree on the collective: rank 0 calls " + describe_call(a) + ", rank " + std::to_string(r) +
             " calls " + describe_call(b);
  }
  return "";
}

// A shared-memory call on the worker: its error becomes the step's.
void comm_check(vt_status s) {
  if (s != VT_OK) throw std::runtime_error(vt_last_error());
}

// One collective, as the worker runs it. run returns the transport's work
// to wait for, or null when it did the exchange itself (shared memory).
struct Step {
  c10::intrusive_ptr<c10d::Backend> transport;
  std::shared_ptr<vt_comm> comm;  // this host's ranks, when they are all here
  std::shared_ptr<Heartbeat> beat;  // between hosts
  uint64_t seq = 0;                 // the group's collective number
  Kind kind;
  int rank = 0, size = 1, peer = -1, tag = 0;  // peer/tag: send and recv
  Desc desc{};
  std::function<c10::intrusive_ptr<c10d::Work>(c10d::Backend&)> run;
};

at::Tensor desc_tensor(const Desc& d) {
  at::Tensor t = at::empty({kFields}, at::kLong);
  std::copy(d.begin(), d.end(), t.data_ptr<int64_t>());
  return t;
}

Desc desc_of(const at::Tensor& t) {
  Desc d;
  std::copy(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + kFields, d.begin());
  return d;
}

// Exchange the calls; the empty string when the data may follow.
std::string agree(Step& s, const char* fault) {
  Desc mine = s.desc;
  mine[fPoisoned] = fault != nullptr;
  if (s.kind == kSend) {
    std::vector<at::Tensor> t{desc_tensor(mine)};
    s.transport->send(t, s.peer, s.tag)->wait();
    return fault ? std::string("the input holds the error of a failed op: ") + fault : "";
  }
  if (s.kind == kRecv) {
    std::vector<at::Tensor> t{at::empty({kFields}, at::kLong)};
    s.transport->recv(t, s.peer, s.tag)->wait();
    Desc theirs = desc_of(t[0]);
    if (theirs[fPoisoned])
      return "the tensor rank " + std::to_string(s.peer) + " sends holds the error of a failed op (rank " +
             std::to_string(s.peer) + " raises that error)";
    theirs[fKind] = kRecv;
    if (theirs[fDtype] != mine[fDtype] || theirs[fNumel] != mine[fNumel])
      return "rank " + std::to_string(s.peer) + " sends " + std::to_string(theirs[fNumel]) + " elements of " +
             c10::toString(static_cast<c10::ScalarType>(theirs[fDtype])) + ", this rank receives " +
             std::to_string(mine[fNumel]) + " elements of " +
             c10::toString(static_cast<c10::ScalarType>(mine[fDtype]));
    return "";
  }
  if (s.comm) {
    int64_t flat[VT_COMM_DESC] = {0}, all_flat[VT_COMM_MAX_RANKS * VT_COMM_DESC];
    std::copy(mine.begin(), mine.end(), flat);
    comm_check(vt_comm_exchange(s.comm.get(), flat, all_flat));
    std::vector<Desc> all(s.size);
    for (int r = 0; r < s.size; r++) std::copy(all_flat + r * VT_COMM_DESC, all_flat + r * VT_COMM_DESC + kFields,
                                               all[r].begin());
    return check_calls(all, s.rank, fault);
  }
  std::vector<at::Tensor> in{desc_tensor(mine)};
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < s.size; r++) out[0].push_back(at::empty({kFields}, at::kLong));
  s.transport->allgather(out, in)->wait();
  std::vector<Desc> all;
  for (auto& t : out[0]) all.push_back(desc_of(t));
  return check_calls(all, s.rank, fault);
}

vt_status run_step(void* p, const char* input_fault) {
  std::unique_ptr<Step> s(static_cast<Step*>(p));
  std::string err;
  if (s->beat) s->beat->started(s->seq);
  try {
    err = agree(*s, input_fault);
    if (err.empty()) {
      auto w = s->run(*s->transport);
      if (w) w->wait();
    }
  } catch (const std::exception& e) {
    err = std::string("rank ") + std::to_string(s->rank) + " of " + std::to_string(s->size) +
          ": the collective failed (a rank exited, or timed out): " + e.what();
    if (s->beat) err += s->beat->diagnose(s->seq);
  }
  if (err.empty()) return VT_OK;
  return vt_host_step_error(VT_ERR_KERNEL, err.c_str());
}

// The device of a collective's tensors (the current device when there are
// none on "tpu").
int dev_of(const at::Tensor& t) { return t.defined() && is_tpu(t) ? device_index(t) : current_device(); }
int dev_of(const std::vector<at::Tensor>& ts) { return ts.empty() ? current_device() : dev_of(ts[0]); }

// For a collective's scope: its device work goes on the communication queue
// (its stream is the current stream, so the work's future records its events
// there too).
class OnComm {
 public:
  explicit OnComm(int dev) : guard_(c10::Stream(c10::Stream::UNSAFE, c10::Device(kTpu, static_cast<c10::DeviceIndex>(dev)),
                                                VT_STREAM_COMM)) {}

 private:
  c10::StreamGuard guard_;
};

// Completed when queued on the communication queue: wait() makes the
// caller's stream wait for it, and so does the future. A barrier waits on
// the host.
class TpuWork : public c10d::Work {
 public:
  TpuWork(int dev, uint64_t ticket, c10d::OpType type, std::vector<at::Tensor> outputs, bool host_wait)
      : c10d::Work(-1, type), dev_(dev), ticket_(ticket), outputs_(std::move(outputs)), host_wait_(host_wait) {
    std::vector<c10::Device> devices{c10::Device(kTpu, static_cast<c10::DeviceIndex>(dev))};
    future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()), devices);
    future_->markCompleted(c10::IValue(outputs_));
  }
  bool isCompleted() override { return vt_event_query(dev_, ticket_) != 0; }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds timeout) override {
    if (!host_wait_) {
      synchronize();
      return true;
    }
    const int64_t limit = timeout == kNoTimeout ? -1 : static_cast<int64_t>(timeout.count());
    const auto t0 = std::chrono::steady_clock::now();
    wait_interruptibly([&](int64_t ms) {
      if (limit >= 0) {
        const int64_t left = limit - std::chrono::duration_cast<std::chrono::milliseconds>(
                                         std::chrono::steady_clock::now() - t0).count();
        if (left <= 0) return vt_host_step_error(VT_ERR_TIMEOUT, "tpu_dist barrier: timed out");
        ms = ms == 0 ? 0 : std::min(ms, left);
      }
      return vt_event_synchronize(dev_, ticket_, ms);
    });
    return true;
  }
  // The caller's current stream waits for the collective.
  void synchronize() override { check(vt_event_block(dev_, dev_, ticket_)); }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  int dev_;
  uint64_t ticket_;
  std::vector<at::Tensor> outputs_;
  bool host_wait_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

bool transport_dtype(c10::ScalarType t) {
  switch (t) {
    case at::kFloat: case at::kDouble: case at::kHalf: case at::kBFloat16: case at::kChar: case at::kByte:
    case at::kInt: case at::kLong: case at::kBool:
      return true;
    default:
      return false;
  }
}

bool comm_red_op(const c10d::ReduceOp& op, vt_red_op* out) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: *out = VT_RED_SUM; return true;
    case c10d::ReduceOp::PRODUCT: *out = VT_RED_PROD; return true;
    case c10d::ReduceOp::MIN: *out = VT_RED_MIN; return true;
    case c10d::ReduceOp::MAX: *out = VT_RED_MAX; return true;
    default: return false;
  }
}

class ProcessGroupTpu : public c10d::Backend {
 public:
  ProcessGroupTpu(c10::intrusive_ptr<c10d::Backend> transport, int rank, int size, std::shared_ptr<vt_comm> comm,
                  std::shared_ptr<Heartbeat> beat)
      : c10d::Backend(rank, size), transport_(std::move(transport)), comm_(std::move(comm)), beat_(std::move(beat)) {}

  // Whether collectives on this group's ranks go through shared memory.
  bool uses_shared_memory() const { return comm_ != nullptr; }

  const std::string getBackendName() const override { return "tpu_dist"; }
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return seq_; }
  void setTimeout(std::chrono::milliseconds t) override { transport_->setTimeout(t); }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& ts, const c10d::AllreduceOptions& o) override {
    OnComm on(dev_of(ts));
    at::Tensor t = one(ts, kAllreduce);
    return reduce_like(kAllreduce, {t}, o.reduceOp, -1, [](c10d::Backend& b, std::vector<at::Tensor> a,
                                                           c10d::ReduceOp op) {
      c10d::AllreduceOptions opts;
      opts.reduceOp = op;
      return b.allreduce(a, opts);
    });
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& ts,
                                                     const c10d::AllreduceCoalescedOptions& o) override {
    OnComm on(dev_of(ts));
    check_tensors(ts, kAllreduceCoalesced);
    return reduce_like(kAllreduceCoalesced, ts, o.reduceOp, -1,
                       [](c10d::Backend& b, std::vector<at::Tensor> a, c10d::ReduceOp op) {
                         c10d::AllreduceCoalescedOptions opts;
                         opts.reduceOp = op;
                         return b.allreduce_coalesced(a, opts);
                       });
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& ts, const c10d::ReduceOptions& o) override {
    OnComm on(dev_of(ts));
    at::Tensor t = one(ts, kReduce);
    const int64_t root = o.rootRank;
    return reduce_like(kReduce, {t}, o.reduceOp, root, [root](c10d::Backend& b, std::vector<at::Tensor> a,
                                                              c10d::ReduceOp op) {
      c10d::ReduceOptions opts;
      opts.reduceOp = op;
      opts.rootRank = root;
      return b.reduce(a, opts);
    });
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& ts, const c10d::BroadcastOptions& o) override {
    OnComm on(dev_of(ts));
    at::Tensor t = one(ts, kBroadcast);
    Inout io(t, true);
    const int64_t root = o.rootRank;
    auto alias = aliases({io.work});
    auto comm = comm_;
    return launch(kBroadcast, {io.work}, {io.work}, desc(kBroadcast, t, t.numel(), -1, root),
                  [alias, root, comm](c10d::Backend& b) mutable {
                    if (comm) {
                      comm_check(vt_comm_broadcast(comm.get(), alias[0].data_ptr(), alias[0].nbytes(),
                                                   static_cast<int>(root)));
                      return c10::intrusive_ptr<c10d::Work>();
                    }
                    c10d::BroadcastOptions opts;
                    opts.rootRank = root;
                    return b.broadcast(alias, opts);
                  },
                  {t}, c10d::OpType::BROADCAST, copy_back({io}));
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outs, std::vector<at::Tensor>& ins,
                                           const c10d::AllgatherOptions&) override {
    OnComm on(dev_of(ins));
    at::Tensor in = one(ins, kAllgather);
    TORCH_CHECK(outs.size() == 1 && static_cast<int>(outs[0].size()) == size_,
                "tpu_dist allgather: expects one list of ", size_, " output tensors");
    check_tensors(outs[0], kAllgather, &in);
    Inout src(in, true);
    std::vector<Inout> dst;
    std::vector<at::Tensor> work;
    for (auto& o : outs[0]) {
      TORCH_CHECK(o.numel() == in.numel(), "tpu_dist allgather: output of ", o.numel(), " elements for an input of ",
                  in.numel());
      dst.emplace_back(o, false);
      work.push_back(dst.back().work);
    }
    std::vector<std::vector<at::Tensor>> a_out{aliases(work)};
    std::vector<at::Tensor> a_in = aliases({src.work});
    return launch(kAllgather, {src.work}, work, desc(kAllgather, in, in.numel(), -1, -1),
                  [a_out, a_in](c10d::Backend& b) mutable { return b.allgather(a_out, a_in); }, outs[0],
                  c10d::OpType::ALLGATHER, copy_back(dst));
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& out, at::Tensor& in,
                                                 const c10d::AllgatherOptions&) override {
    OnComm on(dev_of(in));
    std::vector<at::Tensor> outs{out}, ins{in};
    return gather_into(kAllgatherBase, outs, ins);
  }

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outs,
                                                                 std::vector<at::Tensor>& ins,
                                                                 const c10d::AllgatherOptions&) override {
    OnComm on(dev_of(ins));
    return gather_into(kAllgatherCoalesced, outs, ins);
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outs, std::vector<at::Tensor>& ins,
                                        const c10d::GatherOptions& o) override {
    OnComm on(dev_of(ins));
    at::Tensor in = one(ins, kGather);
    const int64_t root = o.rootRank;
    std::vector<Inout> dst;
    std::vector<at::Tensor> work;
    if (rank_ == root) {
      TORCH_CHECK(outs.size() == 1 && static_cast<int>(outs[0].size()) == size_,
                  "tpu_dist gather: the root expects one list of ", size_, " output tensors");
      check_tensors(outs[0], kGather, &in);
      for (auto& t : outs[0]) {
        TORCH_CHECK(t.numel() == in.numel(), "tpu_dist gather: output of ", t.numel(), " elements for an input of ",
                    in.numel());
        dst.emplace_back(t, false);
        work.push_back(dst.back().work);
      }
    } else {
      TORCH_CHECK(outs.empty() || (outs.size() == 1 && outs[0].empty()),
                  "tpu_dist gather: only the root passes output tensors");
    }
    Inout src(in, true);
    std::vector<std::vector<at::Tensor>> a_out;
    if (rank_ == root) a_out.push_back(aliases(work));
    std::vector<at::Tensor> a_in = aliases({src.work});
    return launch(kGather, {src.work}, work, desc(kGather, in, in.numel(), -1, root),
                  [a_out, a_in, root](c10d::Backend& b) mutable {
                    c10d::GatherOptions opts;
                    opts.rootRank = root;
                    return b.gather(a_out, a_in, opts);
                  },
                  rank_ == root ? outs[0] : std::vector<at::Tensor>{}, c10d::OpType::GATHER, copy_back(dst));
  }

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outs, std::vector<std::vector<at::Tensor>>& ins,
                                         const c10d::ScatterOptions& o) override {
    OnComm on(dev_of(outs));
    at::Tensor out = one(outs, kScatter);
    const int64_t root = o.rootRank;
    std::vector<Inout> src;
    std::vector<at::Tensor> work;
    if (rank_ == root) {
      TORCH_CHECK(ins.size() == 1 && static_cast<int>(ins[0].size()) == size_,
                  "tpu_dist scatter: the root expects one list of ", size_, " input tensors");
      check_tensors(ins[0], kScatter, &out);
      for (auto& t : ins[0]) {
        TORCH_CHECK(t.numel() == out.numel(), "tpu_dist scatter: input of ", t.numel(),
                    " elements for an output of ", out.numel());
        src.emplace_back(t, true);
        work.push_back(src.back().work);
      }
    } else {
      TORCH_CHECK(ins.empty() || (ins.size() == 1 && ins[0].empty()),
                  "tpu_dist scatter: only the root passes input tensors");
    }
    Inout dst(out, false);
    std::vector<std::vector<at::Tensor>> a_in;
    if (rank_ == root) a_in.push_back(aliases(work));
    std::vector<at::Tensor> a_out = aliases({dst.work});
    return launch(kScatter, work, {dst.work}, desc(kScatter, out, out.numel(), -1, root),
                  [a_out, a_in, root](c10d::Backend& b) mutable {
                    c10d::ScatterOptions opts;
                    opts.rootRank = root;
                    return b.scatter(a_out, a_in, opts);
                  },
                  {out}, c10d::OpType::SCATTER, copy_back({dst}));
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outs,
                                                std::vector<std::vector<at::Tensor>>& ins,
                                                const c10d::ReduceScatterOptions& o) override {
    OnComm on(dev_of(outs));
    at::Tensor out = one(outs, kReduceScatter);
    TORCH_CHECK(ins.size() == 1 && static_cast<int>(ins[0].size()) == size_,
                "tpu_dist reduce_scatter: expects one list of ", size_, " input tensors");
    check_tensors(ins[0], kReduceScatter, &out);
    for (auto& t : ins[0])
      TORCH_CHECK(t.numel() == out.numel(), "tpu_dist reduce_scatter: input of ", t.numel(),
                  " elements for an output of ", out.numel());
    // A contiguous stack of the inputs, reduced as one tensor.
    std::vector<at::Tensor> flats;
    for (auto& t : ins[0]) flats.push_back(t.reshape({-1}));
    at::Tensor flat = at::cat(flats);
    std::vector<at::Tensor> outs2{out};
    return scatter_reduce(kReduceScatter, outs2, {flat}, o.reduceOp);
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                                      const c10d::ReduceScatterOptions& o) override {
    OnComm on(dev_of(out));
    std::vector<at::Tensor> outs{out};
    return scatter_reduce(kReduceScatterBase, outs, {in}, o.reduceOp);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outs,
                                                                 std::vector<at::Tensor>& ins,
                                                                 const c10d::ReduceScatterOptions& o) override {
    OnComm on(dev_of(outs));
    return scatter_reduce(kReduceScatterCoalesced, outs, ins, o.reduceOp);
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& out_splits,
                                               std::vector<int64_t>& in_splits,
                                               const c10d::AllToAllOptions&) override {
    OnComm on(dev_of(in));
    std::vector<at::Tensor> outs{out}, ins{in};
    check_tensors(outs, kAlltoallBase, &in);
    check_tensors(ins, kAlltoallBase, &in);
    Inout src(in, true), dst(out, false);
    auto a_out = aliases({dst.work}), a_in = aliases({src.work});
    std::vector<int64_t> os = out_splits, is = in_splits;
    return launch(kAlltoallBase, {src.work}, {dst.work}, desc(kAlltoallBase, in, -1, -1, -1),
                  [a_out, a_in, os, is](c10d::Backend& b) mutable {
                    return b.alltoall_base(a_out[0], a_in[0], os, is);
                  },
                  {out}, c10d::OpType::ALLTOALL_BASE, copy_back({dst}));
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins,
                                          const c10d::AllToAllOptions&) override {
    OnComm on(dev_of(ins));
    TORCH_CHECK(static_cast<int>(outs.size()) == size_ && static_cast<int>(ins.size()) == size_,
                "tpu_dist all_to_all: expects ", size_, " input and ", size_, " output tensors");
    check_tensors(ins, kAlltoall, &ins[0]);
    check_tensors(outs, kAlltoall, &ins[0]);
    std::vector<Inout> src, dst;
    std::vector<at::Tensor> rw, ww;
    for (auto& t : ins) src.emplace_back(t, true), rw.push_back(src.back().work);
    for (auto& t : outs) dst.emplace_back(t, false), ww.push_back(dst.back().work);
    auto a_out = aliases(ww), a_in = aliases(rw);
    return launch(kAlltoall, rw, ww, desc(kAlltoall, ins[0], -1, -1, -1),
                  [a_out, a_in](c10d::Backend& b) mutable { return b.alltoall(a_out, a_in); }, outs,
                  c10d::OpType::ALLTOALL, copy_back(dst));
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    OnComm on(current_device());
    Desc d{kBarrier, -1, -1, -1, -1, 0};
    auto comm = comm_;
    return launch(kBarrier, {}, {}, d,
                  [comm](c10d::Backend& b) {
                    if (!comm) return b.barrier();
                    comm_check(vt_comm_barrier(comm.get()));
                    return c10::intrusive_ptr<c10d::Work>();
                  },
                  {}, c10d::OpType::BARRIER, nullptr,
                  /*host_wait=*/true, current_device());
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& ts, int dst, int tag) override {
    OnComm on(dev_of(ts));
    at::Tensor t = one(ts, kSend);
    Inout io(t, true);
    auto a = aliases({io.work});
    return launch(kSend, {io.work}, {}, desc(kSend, t, t.numel(), -1, -1),
                  [a, dst, tag](c10d::Backend& b) mutable { return b.send(a, dst, tag); }, {t},
                  c10d::OpType::SEND, nullptr, false, -1, dst, tag);
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& ts, int src, int tag) override {
    OnComm on(dev_of(ts));
    at::Tensor t = one(ts, kRecv);
    Inout io(t, false);
    auto a = aliases({io.work});
    return launch(kRecv, {}, {io.work}, desc(kRecv, t, t.numel(), -1, -1),
                  [a, src, tag](c10d::Backend& b) mutable { return b.recv(a, src, tag); }, {t},
                  c10d::OpType::RECV, copy_back({io}), false, -1, src, tag);
  }

 private:
  // A user tensor and the contiguous tensor the transport works on: the
  // tensor itself, or a device copy (in) / buffer (out) copied back after.
  struct Inout {
    at::Tensor user, work;
    Inout(const at::Tensor& t, bool read) : user(t) {
      work = t.is_contiguous() ? t : read ? t.contiguous() : at::empty(t.sizes(), t.options());
    }
    void finish() const {
      if (!work.is_same(user)) user.copy_(work);
    }
  };

  // What a collective does after its exchange: copy staged outputs back.
  static std::function<void()> copy_back(std::vector<Inout> ios) {
    return [ios = std::move(ios)] {
      for (auto& io : ios) io.finish();
    };
  }

  static std::vector<at::Tensor> aliases(const std::vector<at::Tensor>& ts) {
    std::vector<at::Tensor> a;
    for (auto& t : ts) a.push_back(host_alias_of(t));
    return a;
  }

  void check_tensors(const std::vector<at::Tensor>& ts, Kind k, const at::Tensor* like = nullptr) const {
    const at::Tensor& first = like ? *like : ts.at(0);
    for (auto& t : ts) {
      TORCH_CHECK(t.defined(), step_name(k), ": got an undefined tensor");
      TORCH_CHECK(is_tpu(t), step_name(k), ": tensors must be on \"tpu\", got a tensor on ", t.device(),
                  ". tpu_dist carries tpu tensors; for CPU tensors use the gloo backend "
                  "(init_process_group(\"cpu:gloo,tpu:tpu_dist\")).");
      TORCH_CHECK(!t.is_sparse(), step_name(k), ": sparse tensors are not supported");
      TORCH_CHECK(t.device() == first.device(), step_name(k), ": tensors on ", t.device(), " and ", first.device(),
                  "; each process owns one device");
      TORCH_CHECK(t.scalar_type() == first.scalar_type(), step_name(k), ": tensors of ", t.scalar_type(), " and ",
                  first.scalar_type());
      TORCH_CHECK(transport_dtype(t.scalar_type()), step_name(k), ": dtype ", t.scalar_type(),
                  " is not supported");
    }
  }

  at::Tensor one(std::vector<at::Tensor>& ts, Kind k) const {
    TORCH_CHECK(ts.size() == 1, step_name(k), ": expects one tensor per process (each process owns one device), got ",
                ts.size());
    check_tensors(ts, k);
    return ts[0];
  }

  static Desc desc(Kind k, const at::Tensor& t, int64_t numel, int64_t red, int64_t root) {
    return Desc{k, static_cast<int64_t>(t.scalar_type()), numel, red, root, 0};
  }

  c10::intrusive_ptr<c10d::Work> launch(Kind k, const std::vector<at::Tensor>& reads,
                                        const std::vector<at::Tensor>& writes, Desc d,
                                        std::function<c10::intrusive_ptr<c10d::Work>(c10d::Backend&)> run,
                                        std::vector<at::Tensor> outputs, c10d::OpType type,
                                        const std::function<void()>& after, bool host_wait = false, int dev = -1,
                                        int peer = -1, int tag = 0) {
    if (dev < 0) dev = device_index(!reads.empty() ? reads[0] : writes.at(0));
    std::vector<vt_tensor> r(reads.size()), w(writes.size());
    for (size_t i = 0; i < reads.size(); i++)
      TORCH_CHECK(describe(reads[i], &r[i]), step_name(k), ": cannot describe an input");
    for (size_t i = 0; i < writes.size(); i++)
      TORCH_CHECK(describe(writes[i], &w[i]), step_name(k), ": cannot describe an output");
    auto step = std::make_unique<Step>();
    step->transport = transport_;
    step->comm = comm_;
    step->beat = beat_;
    step->seq = seq_ + 1;
    step->kind = k;
    step->rank = rank_;
    step->size = size_;
    step->peer = peer;
    step->tag = tag;
    step->desc = d;
    step->run = std::move(run);
    int queued = 0;
    vt_status s = vt_enqueue_host(dev, step_name(k), run_step, step.get(), r.data(), static_cast<int>(r.size()),
                                  w.data(), static_cast<int>(w.size()), &queued);
    if (queued) step.release();  // the worker owns it (in Debug mode it has run)
    check(s);
    seq_++;
    if (after) after();  // device work of the collective after the exchange: the work covers it
    uint64_t ticket = 0;
    check(vt_event_record(dev, &ticket));
    return c10::make_intrusive<TpuWork>(dev, ticket, type, std::move(outputs), host_wait);
  }

  // allreduce / reduce / coalesced allreduce: AVG is a sum then a division
  // and PREMUL_SUM a multiplication then a sum, on the device.
  c10::intrusive_ptr<c10d::Work> reduce_like(
      Kind k, std::vector<at::Tensor> ts, const c10d::ReduceOp& op, int64_t root,
      std::function<c10::intrusive_ptr<c10d::Work>(c10d::Backend&, std::vector<at::Tensor>, c10d::ReduceOp)> call) {
    std::vector<Inout> io;
    std::vector<at::Tensor> work;
    int64_t numel = 0;
    for (auto& t : ts) io.emplace_back(t, true), work.push_back(io.back().work), numel += t.numel();
    c10d::ReduceOp wire = op;
    if (op.op_ == c10d::ReduceOp::AVG) {
      TORCH_CHECK(at::isFloatingType(ts[0].scalar_type()), step_name(k), ": AVG needs a floating dtype, got ",
                  ts[0].scalar_type());
      wire = c10d::ReduceOp(c10d::ReduceOp::SUM);
    } else if (op.op_ == c10d::ReduceOp::PREMUL_SUM) {
      auto* sup = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK(sup, step_name(k), ": PREMUL_SUM without its factor");
      for (auto& w : work) {
        if (sup->tensor_factor.defined()) w.mul_(sup->tensor_factor.to(w.device()));
        else w.mul_(sup->double_factor);
      }
      wire = c10d::ReduceOp(c10d::ReduceOp::SUM);
    } else {
      TORCH_CHECK(op.op_ != c10d::ReduceOp::UNUSED, step_name(k), ": unknown reduce op");
    }
    auto a = aliases(work);
    vt_dtype dt = VT_F32;
    vt_red_op red = VT_RED_SUM;  // copied into the step, read only with comm
    std::function<c10::intrusive_ptr<c10d::Work>(c10d::Backend&)> run;
    if (comm_ && k != kReduce && to_vt_dtype(ts[0].scalar_type(), &dt) && comm_red_op(wire, &red)) {
      auto comm = comm_;
      run = [a, comm, dt, red](c10d::Backend&) {
        for (auto& t : a) comm_check(vt_comm_allreduce(comm.get(), t.data_ptr(), t.numel(), dt, red));
        return c10::intrusive_ptr<c10d::Work>();
      };
    } else {
      run = [a, wire, call](c10d::Backend& b) { return call(b, a, wire); };
    }
    const bool avg = op.op_ == c10d::ReduceOp::AVG && (k != kReduce || rank_ == root);
    return launch(k, work, work, desc(k, ts[0], numel, op.op_, root), std::move(run), ts,
                  k == kReduce ? c10d::OpType::REDUCE : c10d::OpType::ALLREDUCE, [&] {
                    // a reduce leaves the other ranks' tensors as they were sent
                    if (avg)
                      for (auto& t : work) t.div_(size_);
                    for (auto& x : io) x.finish();
                  });
  }

  // Inputs and outputs of the tensor forms of all-gather (gathers: each
  // output holds size_ inputs) and reduce-scatter (each input holds size_
  // outputs), staged for the transport.
  struct Pairs {
    std::vector<Inout> src, dst;
    std::vector<at::Tensor> rw, ww;
    int64_t numel = 0;  // input elements
  };
  Pairs pair_up(Kind k, std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins, bool gathers) const {
    TORCH_CHECK(!ins.empty() && outs.size() == ins.size(), step_name(k), ": ", outs.size(), " outputs for ",
                ins.size(), " inputs");
    check_tensors(ins, k, &ins[0]);
    check_tensors(outs, k, &ins[0]);
    Pairs p;
    for (size_t i = 0; i < ins.size(); i++) {
      const at::Tensor& whole = gathers ? outs[i] : ins[i];
      const at::Tensor& part = gathers ? ins[i] : outs[i];
      TORCH_CHECK(whole.numel() == part.numel() * size_, step_name(k), ": ", gathers ? "output" : "input", " of ",
                  whole.numel(), " elements for an ", gathers ? "input" : "output", " of ", part.numel(), " on ",
                  size_, " ranks");
      p.src.emplace_back(ins[i], true), p.rw.push_back(p.src.back().work);
      p.dst.emplace_back(outs[i], false), p.ww.push_back(p.dst.back().work);
      p.numel += ins[i].numel();
    }
    return p;
  }

  c10::intrusive_ptr<c10d::Work> gather_into(Kind k, std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins) {
    Pairs p = pair_up(k, outs, ins, /*gathers=*/true);
    auto a_out = aliases(p.ww), a_in = aliases(p.rw);
    auto comm = comm_;
    return launch(k, p.rw, p.ww, desc(k, ins[0], p.numel, -1, -1),
                  [a_out, a_in, comm](c10d::Backend& b) mutable {
                    c10::intrusive_ptr<c10d::Work> last;
                    if (comm) {
                      for (size_t i = 0; i < a_in.size(); i++)
                        comm_check(vt_comm_allgather(comm.get(), a_out[i].data_ptr(), a_in[i].data_ptr(),
                                                     a_in[i].nbytes()));
                      return last;
                    }
                    for (size_t i = 0; i < a_in.size(); i++) {
                      if (i) last->wait();
                      // the transport splits dim 0: hand it flat buffers
                      at::Tensor o = a_out[i].view({-1}), in = a_in[i].view({-1});
                      last = b._allgather_base(o, in);
                    }
                    return last;
                  },
                  outs, c10d::OpType::_ALLGATHER_BASE, copy_back(p.dst));
  }

  c10::intrusive_ptr<c10d::Work> scatter_reduce(Kind k, std::vector<at::Tensor>& outs, std::vector<at::Tensor> ins,
                                                const c10d::ReduceOp& op) {
    Pairs p = pair_up(k, outs, ins, /*gathers=*/false);
    std::vector<Inout>& src = p.src;
    std::vector<at::Tensor>& rw = p.rw;
    std::vector<at::Tensor>& ww = p.ww;
    c10d::ReduceOp wire = op;
    if (op.op_ == c10d::ReduceOp::AVG || op.op_ == c10d::ReduceOp::PREMUL_SUM) {
      TORCH_CHECK(at::isFloatingType(ins[0].scalar_type()), step_name(k), ": ", reduce_name(op.op_),
                  " needs a floating dtype");
      if (op.op_ == c10d::ReduceOp::PREMUL_SUM) {
        auto* sup = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
        TORCH_CHECK(sup, step_name(k), ": PREMUL_SUM without its factor");
        for (auto& x : src) {
          if (x.work.is_same(x.user)) x.work = x.user.clone();  // never scale the caller's input
          if (sup->tensor_factor.defined()) x.work.mul_(sup->tensor_factor.to(x.work.device()));
          else x.work.mul_(sup->double_factor);
        }
        rw.clear();
        for (auto& x : src) rw.push_back(x.work);
      }
      wire = c10d::ReduceOp(c10d::ReduceOp::SUM);
    }
    auto a_out = aliases(ww), a_in = aliases(rw);
    vt_dtype dt = VT_F32;
    vt_red_op red = VT_RED_SUM;  // copied into the step, read only with comm
    std::shared_ptr<vt_comm> comm;
    if (comm_ && to_vt_dtype(ins[0].scalar_type(), &dt) && comm_red_op(wire, &red)) comm = comm_;
    return launch(k, rw, ww, desc(k, ins[0], p.numel, op.op_, -1),
                    [a_out, a_in, wire, comm, dt, red](c10d::Backend& b) mutable {
                      if (comm) {
                        for (size_t i = 0; i < a_in.size(); i++)
                          comm_check(vt_comm_reduce_scatter(comm.get(), a_out[i].data_ptr(), a_in[i].data_ptr(),
                                                            a_out[i].numel(), dt, red));
                        return c10::intrusive_ptr<c10d::Work>();
                      }
                      c10d::ReduceScatterOptions opts;
                      opts.reduceOp = wire;
                      c10::intrusive_ptr<c10d::Work> last;
                      for (size_t i = 0; i < a_in.size(); i++) {
                        if (i) last->wait();
                        at::Tensor o = a_out[i].view({-1}), in = a_in[i].view({-1});
                        last = b._reduce_scatter_base(o, in, opts);
                      }
                      return last;
                    },
                    outs, c10d::OpType::_REDUCE_SCATTER_BASE, [&] {
                      if (op.op_ == c10d::ReduceOp::AVG)
                        for (auto& t : ww) t.div_(size_);
                      for (auto& x : p.dst) x.finish();
                    });
  }

  c10::intrusive_ptr<c10d::Backend> transport_;
  std::shared_ptr<vt_comm> comm_;
  std::shared_ptr<Heartbeat> beat_;
  uint64_t seq_ = 0;
};

// shm_name: a POSIX shared memory name when every rank of the group is on
// this host ("" for none): rank 0 creates it, every rank maps it, and it is
// unlinked once all have (nothing is left behind if a rank dies later).
// store: the group's store, for the heartbeat of a group between hosts.
c10::intrusive_ptr<c10d::Backend> make_backend(const c10::intrusive_ptr<c10d::Backend>& transport, int rank,
                                              int size, const std::string& shm_name, int64_t timeout_ms,
                                              const c10::intrusive_ptr<c10d::Store>& store) {
  ensure_init();
  std::shared_ptr<vt_comm> comm;
  if (!shm_name.empty()) {
    vt_comm* c = nullptr;
    vt_status s;
    {
      py::gil_scoped_release nogil;
      s = vt_comm_open(shm_name.c_str(), rank, size, 0, timeout_ms, &c);
    }
    if (rank == 0) vt_comm_unlink(shm_name.c_str());
    check(s, "tpu_dist: opening the group's shared memory");
    comm = std::shared_ptr<vt_comm>(c, vt_comm_close);
  }
  std::shared_ptr<Heartbeat> beat;
  if (!comm && store && size > 1) beat = std::make_shared<Heartbeat>(store, rank, size);
  return c10::make_intrusive<ProcessGroupTpu>(transport, rank, size, std::move(comm), std::move(beat));
}

}  // namespace

void register_dist(py::module& m) {
  py::class_<ProcessGroupTpu, c10d::Backend, c10::intrusive_ptr<ProcessGroupTpu>>(m, "ProcessGroupTpu")
      .def_property_readonly("uses_shared_memory", &ProcessGroupTpu::uses_shared_memory);
  m.def("_dist_backend", &make_backend, py::arg("transport"), py::arg("rank"), py::arg("size"),
        py::arg("shm_name") = "", py::arg("timeout_ms") = -1, py::arg("store") = nullptr);
}

}  // namespace vtpu
