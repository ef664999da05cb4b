// hooks.cpp — PrivateUse1HooksInterface for "tpu" (lazy init, device count,
// default generators, storage resize) and the generator implementation.
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/CallOnce.h>

#include <deque>
#include <mutex>

#include "generator.h"

namespace vtpu {

// ------------------------------------------------------------------ generator

TpuGeneratorImpl::TpuGeneratorImpl(c10::DeviceIndex device)
    : c10::GeneratorImpl(c10::Device(kTpu, device), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(c10::default_rng_seed_val) {}

void TpuGeneratorImpl::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}
void TpuGeneratorImpl::set_offset(uint64_t offset) { offset_ = offset; }
uint64_t TpuGeneratorImpl::get_offset() const { return offset_; }
uint64_t TpuGeneratorImpl::current_seed() const { return seed_; }
uint64_t TpuGeneratorImpl::seed() {
  const uint64_t s = c10::detail::getNonDeterministicRandom(true);
  set_current_seed(s);
  return s;
}

// State is 16 bytes: seed then offset, little-endian uint64.
void TpuGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  TORCH_CHECK_TYPE(new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>(),
                   "RNG state must be a torch.ByteTensor");
  TORCH_CHECK(new_state.numel() == 16, "RNG state is wrong size: expected 16 bytes, got ", new_state.numel());
  const auto* p = static_cast<const uint8_t*>(new_state.data());
  std::memcpy(&seed_, p, 8);
  std::memcpy(&offset_, p + 8, 8);
}

c10::intrusive_ptr<c10::TensorImpl> TpuGeneratorImpl::get_state() const {
  auto state = at::empty({16}, at::TensorOptions().dtype(at::kByte));
  auto* p = state.data_ptr<uint8_t>();
  std::memcpy(p, &seed_, 8);
  std::memcpy(p + 8, &offset_, 8);
  return state.getIntrusivePtr();
}

uint64_t TpuGeneratorImpl::reserve(uint64_t n) {
  const uint64_t o = offset_;
  offset_ += n;
  return o;
}

TpuGeneratorImpl* TpuGeneratorImpl::clone_impl() const {
  auto* g = new TpuGeneratorImpl(device().index());
  g->seed_ = seed_;
  g->offset_ = offset_;
  return g;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::once_flag once;
  static std::deque<at::Generator> gens;
  std::call_once(once, [] {
    ensure_init();
    for (int d = 0; d < vt_device_count(); d++)
      gens.emplace_back(at::make_generator<TpuGeneratorImpl>(static_cast<c10::DeviceIndex>(d)));
  });
  const auto idx = device < 0 ? current_device() : device;
  TORCH_CHECK(idx >= 0 && idx < static_cast<c10::DeviceIndex>(gens.size()), "Invalid device index ", idx,
              ": vtpu has ", gens.size(), " device(s)");
  return gens[idx];
}

// ------------------------------------------------------------------ hooks

namespace {

struct TpuHooks final : at::PrivateUse1HooksInterface {
  void init() const override { ensure_init(); }
  bool isBuilt() const override { return true; }
  bool isAvailable() const override {
    try {
      ensure_init();
      return vt_device_count() > 0;
    } catch (...) {
      return false;
    }
  }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return vt_is_initialized() != 0; }
  c10::DeviceIndex deviceCount() const override {
    return isAvailable() ? static_cast<c10::DeviceIndex>(vt_device_count()) : 0;
  }
  void setCurrentDevice(c10::DeviceIndex d) const override { set_current_device(d); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    const auto old = current_device();
    if (d != old) set_current_device(d);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override { return exchangeDevice(d); }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex d) const override { return default_generator(d); }
  at::Generator getNewGenerator(c10::DeviceIndex d) const override {
    return at::make_generator<TpuGeneratorImpl>(d < 0 ? current_device() : d);
  }

  at::Device getDeviceFromPtr(void* data) const override {
    int dev = 0;
    if (vt_hbm_owns(data, &dev)) return {kTpu, static_cast<c10::DeviceIndex>(dev)};
    return {kTpu, current_device()};
  }
  bool isPinnedPtr(const void* p) const override { return is_pinned(p); }
  at::Allocator* getPinnedMemoryAllocator() const override { return pinned_allocator(); }

  // Grow or shrink a storage: new block, queue-ordered copy of the kept bytes.
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
    auto* impl = storage.unsafeGetStorageImpl();
    const auto dev = impl->device().index();
    c10::DeviceGuard guard(impl->device());
    at::DataPtr fresh = device_allocator()->allocate(newsize);
    const size_t keep = std::min(newsize, impl->nbytes());
    if (keep) copy_device_bytes(dev, fresh.get(), impl->data(), keep);
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(newsize);
  }
};

const bool registered = [] {
  at::RegisterPrivateUse1HooksInterface(new TpuHooks());
  return true;
}();

}  // namespace
}  // namespace vtpu
