// allocator.cpp — c10::DeviceAllocator over the runtime's HBM allocator, so
// tpu tensors live in capacity-limited device memory and torch.accelerator's
// memory stats read the runtime's counters.
#include <c10/core/CachingDeviceAllocator.h>

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
}  // namespace

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
