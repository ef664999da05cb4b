// allocator.cpp — c10::DeviceAllocator over the runtime's HBM allocator, so
// tpu tensors live in capacity-limited device memory and torch.accelerator's
// memory stats read the runtime's counters; and the pinned host allocator
// (pin_memory()), whose buffers non-blocking host-to-device copies read
// asynchronously.
#include <c10/core/CachingDeviceAllocator.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "common.h"

namespace vtpu {
namespace {

// The deleter only gets the context pointer, so it carries the device index
// in the low bits (blocks are 64-byte aligned and devices number < 64).
void free_block(void* ctx) {
  if (!ctx) return;
  const auto bits = reinterpret_cast<uintptr_t>(ctx);
  const int dev = static_cast<int>(bits & 63u);
  vt_hbm_free(dev, reinterpret_cast<void*>(bits & ~uintptr_t{63}));
}

void fill(c10::CachingDeviceAllocator::StatArray& a, const vt_stat& s) {
  auto& agg = a[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
  agg.current = s.current;
  agg.peak = s.peak;
  agg.allocated = s.allocated;
  agg.freed = s.freed;
}

struct TpuAllocator final : c10::DeviceAllocator {
  at::DataPtr allocate(size_t n) override {
    ensure_init();
    const int dev = current_device();
    void* p = nullptr;
    check(vt_hbm_alloc(dev, n, &p));
    void* ctx = p ? static_cast<char*>(p) + dev : nullptr;
    return {p, ctx, &free_block, c10::Device(kTpu, static_cast<c10::DeviceIndex>(dev))};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &free_block; }

  // Storage copies (clone of a storage, resize) go through the queue of the
  // device that owns dest, so they stay ordered with the kernels that read
  // or write the same bytes.
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    int dev = current_device();
    vt_hbm_owns(dest, &dev);
    copy_device_bytes(dev, dest, src, count);
  }

  bool initialized() override { return vt_is_initialized(); }

  void emptyCache(c10::MempoolId_t) override {
    // Cached blocks may still be read by queued kernels: drain first.
    synchronize_all();
    for (int d = 0; d < vt_device_count(); d++) check(vt_hbm_empty_cache(d));
  }

  void recordStream(const c10::DataPtr&, c10::Stream) override {}  // one in-order queue per device

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    ensure_init();
    vt_hbm_stats s{};
    check(vt_hbm_get_stats(device, &s));
    c10::CachingDeviceAllocator::DeviceStats out;
    fill(out.allocation, s.allocation);
    fill(out.active, s.allocation);
    fill(out.segment, s.segment);
    fill(out.allocated_bytes, s.allocated_bytes);
    fill(out.active_bytes, s.allocated_bytes);
    fill(out.requested_bytes, s.allocated_bytes);
    fill(out.reserved_bytes, s.reserved_bytes);
    out.num_alloc_retries = s.num_alloc_retries;
    out.num_ooms = s.num_ooms;
    return out;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    ensure_init();
    check(vt_hbm_reset_accumulated(device));
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    ensure_init();
    check(vt_hbm_reset_peak(device));
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    ensure_init();
    uint64_t free_b = 0, total_b = 0;
    check(vt_hbm_mem_info(device, &free_b, &total_b));
    return {static_cast<size_t>(free_b), static_cast<size_t>(total_b)};
  }
};

TpuAllocator g_allocator;

// ------------------------------------------------------------------ pinned host memory

// Pinned host buffers, by start address. A buffer an asynchronous copy still
// reads is freed only once the copy has run (its device event tickets are
// reached), as CUDA's host allocator holds a block until its events
// complete; the user's freeing of the tensor never waits.
struct PinnedBlock {
  size_t size = 0;
  bool freed = false;  // the owner let go; memory kept for pending copies
  std::vector<std::pair<int, uint64_t>> uses;  // (device, ticket) of async copies reading it
};

std::mutex g_pinned_mu;
std::map<uintptr_t, PinnedBlock> g_pinned;

bool uses_done(const PinnedBlock& b) {
  for (const auto& [dev, ticket] : b.uses)
    if (!vt_event_query(dev, ticket)) return false;
  return true;
}

// Caller holds g_pinned_mu: free released blocks whose copies have run.
void reap_pinned() {
  for (auto it = g_pinned.begin(); it != g_pinned.end();) {
    if (it->second.freed && uses_done(it->second)) {
      std::free(reinterpret_cast<void*>(it->first));
      it = g_pinned.erase(it);
    } else {
      ++it;
    }
  }
}

void free_pinned(void* p) {
  if (!p) return;
  std::lock_guard<std::mutex> lock(g_pinned_mu);
  auto it = g_pinned.find(reinterpret_cast<uintptr_t>(p));
  if (it == g_pinned.end()) return;
  it->second.freed = true;
  reap_pinned();
}

// The block containing p (live or kept for copies), or end().
std::map<uintptr_t, PinnedBlock>::iterator pinned_block_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = g_pinned.upper_bound(a);
  if (it == g_pinned.begin()) return g_pinned.end();
  --it;
  return a < it->first + std::max<size_t>(it->second.size, 1) ? it : g_pinned.end();
}

struct PinnedAllocator final : c10::Allocator {
  at::DataPtr allocate(size_t n) override {
    std::lock_guard<std::mutex> lock(g_pinned_mu);
    reap_pinned();
    const size_t bytes = (std::max<size_t>(n, 1) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, bytes);
    TORCH_CHECK_WITH(OutOfMemoryError, p != nullptr, "vtpu: out of host memory allocating ", n,
                     " bytes of pinned memory");
    g_pinned[reinterpret_cast<uintptr_t>(p)].size = n;
    return {p, p, &free_pinned, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

PinnedAllocator g_pinned_allocator;
}  // namespace

c10::Allocator* pinned_allocator() { return &g_pinned_allocator; }

bool is_pinned(const void* p) {
  std::lock_guard<std::mutex> lock(g_pinned_mu);
  auto it = pinned_block_of(p);
  return it != g_pinned.end() && !it->second.freed;
}

void pinned_read_by(const void* p, int dev, uint64_t ticket) {
  std::lock_guard<std::mutex> lock(g_pinned_mu);
  auto it = pinned_block_of(p);
  if (it == g_pinned.end()) return;
  // A device's queue runs in order: its latest ticket covers earlier ones,
  // so a buffer reused for many copies keeps one entry per device.
  for (auto& use : it->second.uses)
    if (use.first == dev) {
      use.second = std::max(use.second, ticket);
      return;
    }
  it->second.uses.emplace_back(dev, ticket);
}

c10::DeviceAllocator* device_allocator() { return &g_allocator; }

void copy_device_bytes(int dev, void* dst, const void* src, size_t n) {
  if (n == 0) return;
  vt_tensor d{}, s{};
  d.data = dst;
  s.data = const_cast<void*>(src);
  d.dtype = s.dtype = VT_U8;
  d.ndim = s.ndim = 1;
  d.sizes[0] = s.sizes[0] = static_cast<int64_t>(n);
  d.strides[0] = s.strides[0] = 1;
  check(vt_op_copy(dev, "storage copy", &d, &s));
}

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

}  // namespace vtpu
