// guard.cpp — DeviceGuardImplInterface for "tpu": current device, streams and
// events. A stream runs on one of its device's queues (vt_stream_queue: the
// default stream on queue 0, the others on their own queues), and the
// thread's current stream is its current queue in the runtime. Work of
// different queues is ordered by the memory it touches, and by events;
// events are queue tickets stamped with the time the queue reached them. The profiler's
// device events (torch.profiler / autograd.profiler with use_device="tpu")
// are the same stamps.
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <atomic>
#include <chrono>
#include <memory>

#include "common.h"

namespace vtpu {
namespace {

// Where a stamp kernel writes the time its queue reached it. The event and
// its queued kernel each hold a reference, and the last to let go frees it:
// dropping or recording again an event never waits for the device, as with
// CUDA's events (a collective's work, for one, drops its events unfinished).
struct Stamp {
  std::atomic<int> refs{2};  // the event's and the kernel's
  std::atomic<int64_t> time_ns{0};
  void unref() {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
};

struct TpuEvent {
  int dev = 0;
  uint64_t ticket = 0;
  Stamp* stamp = nullptr;  // none for a wait on a ticket (synchronizeStream)

  TpuEvent() = default;
  TpuEvent(const TpuEvent&) = delete;
  TpuEvent& operator=(const TpuEvent&) = delete;
  ~TpuEvent() {
    if (stamp) stamp->unref();
  }
  // After the queue reached the event.
  int64_t time_ns() const { return stamp ? stamp->time_ns.load() : 0; }
};

struct StampArgs {
  Stamp* stamp;
};

vt_status stamp_kernel(void* args) {
  Stamp* s = static_cast<StampArgs*>(args)->stamp;
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  s->time_ns.store(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count());
  s->unref();
  return VT_OK;
}

// Record ev at the end of dev's current queue, in place of where it was.
void record_stamp(TpuEvent* ev, int dev, const char* name) {
  auto* s = new Stamp();
  StampArgs args{s};
  vt_status st = vt_enqueue(dev, name, &stamp_kernel, &args, sizeof args);
  if (st != VT_OK) {  // the kernel cannot fail, so this was not queued
    delete s;
    check(st);
  }
  if (ev->stamp) ev->stamp->unref();
  ev->stamp = s;
  ev->dev = dev;
  check(vt_event_record(dev, &ev->ticket));
}

// Wait for the event; raises the faults (errors of queued ops) before it
// not yet raised, as Stream.synchronize() does.
void wait_event(const TpuEvent* ev) {
  wait_interruptibly([ev](int64_t ms) { return vt_event_synchronize(ev->dev, ev->ticket, ms); });
}

thread_local c10::StreamId tls_stream[64] = {};
std::atomic<c10::StreamId> next_stream_id{1};

// Makes `stream`'s queue the thread's current queue of its device for a scope.
class OnStream {
 public:
  explicit OnStream(const c10::Stream& stream)
      : dev_(stream.device_index()), old_(vt_set_thread_queue(dev_, vt_stream_queue(stream.id()))) {}
  ~OnStream() { vt_set_thread_queue(dev_, old_); }
  OnStream(const OnStream&) = delete;
  OnStream& operator=(const OnStream&) = delete;

 private:
  int dev_;
  int old_;
};

struct TpuGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kTpu; }

  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = getDevice();
    if (d.index() != old.index()) setDevice(d);
    return old;
  }
  c10::Device getDevice() const override { return {kTpu, current_device()}; }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kTpu, "expected a tpu device, got ", d);
    set_current_device(d.has_index() ? d.index() : 0);
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    try {
      set_current_device(d.has_index() ? d.index() : 0);
    } catch (...) {
    }
  }

  c10::Stream getStream(c10::Device d) const override {
    const auto idx = d.has_index() ? d.index() : current_device();
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kTpu, idx), tls_stream[idx & 63]);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(kTpu, d.has_index() ? d.index() : current_device()));
  }
  c10::Stream getNewStream(c10::Device d, int) const override {
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kTpu, d.has_index() ? d.index() : current_device()),
                       next_stream_id++);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool high) const override {
    return getNewStream(d, high ? -1 : 0);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    c10::Stream old = getStream(s.device());
    tls_stream[s.device_index() & 63] = s.id();
    vt_set_thread_queue(s.device_index(), vt_stream_queue(s.id()));
    return old;
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag) const override {
    ensure_init();
    const int dev = device_index >= 0 ? device_index : stream.device_index();
    auto* ev = static_cast<TpuEvent*>(*event);
    if (!ev) {
      ev = new TpuEvent();
      *event = ev;
    }
    OnStream on(stream);
    record_stamp(ev, dev, "event record");
  }

  void block(void* event, const c10::Stream& stream) const override {
    auto* ev = static_cast<TpuEvent*>(event);
    if (!ev) return;
    OnStream on(stream);
    check(vt_event_block(stream.device_index(), ev->dev, ev->ticket));  // nothing when on the same queue
  }

  bool queryEvent(void* event) const override {
    auto* ev = static_cast<TpuEvent*>(event);
    if (!ev) return true;
    int done = 0;
    check(vt_event_status(ev->dev, ev->ticket, &done));
    return done != 0;
  }

  void synchronizeEvent(void* event) const override {
    if (auto* ev = static_cast<TpuEvent*>(event)) wait_event(ev);
  }

  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete static_cast<TpuEvent*>(event);
  }

  double elapsedTime(void* e1, void* e2, const c10::DeviceIndex) const override {
    auto* a = static_cast<TpuEvent*>(e1);
    auto* b = static_cast<TpuEvent*>(e2);
    TORCH_CHECK(a && b, "Both events must be recorded before calculating elapsed time.");
    wait_event(a);
    wait_event(b);
    return static_cast<double>(b->time_ns() - a->time_ns()) / 1e6;
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    try {
      ensure_init();
      return static_cast<c10::DeviceIndex>(vt_device_count());
    } catch (...) {
      return 0;
    }
  }

  bool queryStream(const c10::Stream& stream) const override {
    ensure_init();
    uint64_t ticket = 0;
    int done = 0;
    OnStream on(stream);
    check(vt_event_record(stream.device_index(), &ticket));
    check(vt_event_status(stream.device_index(), ticket, &done));  // a finished queue raises its faults
    return done != 0;
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    ensure_init();
    uint64_t ticket = 0;
    {
      OnStream on(stream);
      check(vt_event_record(stream.device_index(), &ticket));
    }
    TpuEvent ev;
    ev.dev = stream.device_index();
    ev.ticket = ticket;
    wait_event(&ev);
  }
  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    synchronize_device(device_index >= 0 ? device_index : current_device());
  }
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
  // Every dtype CPU PyTorch computes (natively or through the counted
  // fallback) except the quantized ones: "tpu" has no quantized tensors.
  c10::DeviceCapability getDeviceCapability(c10::Device) const override {
    c10::DeviceCapability cap;  // all dtypes
    for (auto q : {c10::kIndex_QInt8, c10::kIndex_QUInt8, c10::kIndex_QInt32, c10::kIndex_QUInt4x2,
                   c10::kIndex_QUInt2x4})
      cap.capability_data.capability_bits &= ~(1ULL << q);
    return cap;
  }
};

// A stamp on dev's queue: the time the queue reaches this point.
TpuEvent* profiler_stamp(int dev) {
  auto ev = std::make_unique<TpuEvent>();
  record_stamp(ev.get(), dev, "profiler event");
  return ev.release();
}

struct TpuProfilerStubs final : torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, torch::profiler::impl::ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    ensure_init();
    const int dev = current_device();
    if (device) *device = static_cast<c10::DeviceIndex>(dev);
    if (cpu_ns) *cpu_ns = c10::getTime();
    *event = std::shared_ptr<void>(profiler_stamp(dev), [](void* p) { delete static_cast<TpuEvent*>(p); });
  }
  // Microseconds between two stamps (device time), as CUDA's stubs report.
  float elapsed(const torch::profiler::impl::ProfilerVoidEventStub* e1,
                const torch::profiler::impl::ProfilerVoidEventStub* e2) const override {
    auto* a = static_cast<const TpuEvent*>(e1->get());
    auto* b = static_cast<const TpuEvent*>(e2->get());
    TORCH_CHECK(a && b, "Both events must be recorded before calculating elapsed time.");
    vt_event_wait(a->dev, a->ticket, -1);
    vt_event_wait(b->dev, b->ticket, -1);
    return static_cast<float>(static_cast<double>(b->time_ns() - a->time_ns()) / 1e3);
  }
  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}
  bool enabled() const override { return true; }
  void onEachDevice(std::function<void(int)> op) const override {
    ensure_init();
    const int saved = current_device();
    for (int d = 0; d < vt_device_count(); d++) {
      set_current_device(static_cast<c10::DeviceIndex>(d));
      op(d);
    }
    set_current_device(static_cast<c10::DeviceIndex>(saved));
  }
  void synchronize() const override { synchronize_all(); }
};

TpuProfilerStubs g_profiler_stubs;
const bool profiler_registered = [] {
  torch::profiler::impl::registerPrivateUse1Methods(&g_profiler_stubs);
  return true;
}();

}  // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

}  // namespace vtpu
