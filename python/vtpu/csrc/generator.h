// generator.h — the per-device random generator: a (seed, offset) pair for
// the runtime's counter-based Philox kernels, so a draw depends only on the
// seed and how many numbers were drawn before it.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include "common.h"

namespace vtpu {

struct TpuGeneratorImpl final : c10::GeneratorImpl {
  explicit TpuGeneratorImpl(c10::DeviceIndex device);

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return kTpu; }

  // Reserve n counter values; returns the offset to draw from. Caller holds mutex_.
  uint64_t reserve(uint64_t n);

 private:
  TpuGeneratorImpl* clone_impl() const override;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

const at::Generator& default_generator(c10::DeviceIndex device);

}  // namespace vtpu
