// random_ops.cpp — adapters from ATen's random ops to the runtime's
// counter-based Philox kernels: PyTorch's argument checks and ranges, output
// allocation, and the (seed, offset) reservation on the device generator so
// each call draws fresh counters; one queued C call per op.
#include <ATen/core/DistributionsHelper.h>
#include <ATen/native/DistributionTemplates.h>
#include <torch/library.h>

#include "common.h"
#include "device_check.h"
#include "generator.h"

namespace vtpu {
namespace {

// Reserve `counters` Philox counter values on the generator of device dev.
std::pair<uint64_t, uint64_t> reserve(std::optional<at::Generator> gen, int dev, uint64_t counters) {
  auto* g = at::get_generator_or_default<TpuGeneratorImpl>(gen, default_generator(static_cast<c10::DeviceIndex>(dev)));
  std::lock_guard<std::mutex> lock(g->mutex_);
  const uint64_t seed = g->current_seed();
  return {seed, g->reserve(counters)};
}

uint64_t four_per_block(int64_t n) { return vt_rng_counters_used(VT_F32, n); }
uint64_t two_per_block(int64_t n) { return vt_rng_counters_used(VT_F64, n); }

// Largest value random_() draws for self's dtype (PyTorch: 2^digits for floats, max for integers).
int64_t random_top(const at::Tensor& self) {
  switch (self.scalar_type()) {
    case at::kFloat: return int64_t(1) << 24;
    case at::kDouble: return int64_t(1) << 53;
    case at::kBFloat16: return int64_t(1) << 8;
    case at::kHalf: return int64_t(1) << 11;
    case at::kBool: return 1;
    case at::kByte: return 255;
    case at::kChar: return 127;
    case at::kShort: return 32767;
    case at::kInt: return 2147483647;
    default: return INT64_MAX;
  }
}

at::Tensor& random_range(at::Tensor& self, int64_t from, uint64_t range, std::optional<at::Generator> gen) {
  if (self.numel() == 0) return self;
  const int dev = device_index(self);
  const vt_tensor t = view_of(self);
  const auto [seed, offset] = reserve(std::move(gen), dev, two_per_block(self.numel()));
  check(vt_op_rng_random(dev, "aten::random_", &t, seed, offset, from, range));
  return self;
}

at::Tensor& random_from(at::Tensor& self, int64_t from, std::optional<int64_t> to, std::optional<at::Generator> gen) {
  // PyTorch's own range checks: an int8 tensor cannot take values up to 300
  if (to) {
    TORCH_CHECK(from < *to, "random_ expects 'from' to be less than 'to', but got from=", from, " >= to=", *to);
    at::native::templates::check_from_to_in_range(from, *to - 1, self.dtype());
    return random_range(self, from, static_cast<uint64_t>(*to) - static_cast<uint64_t>(from), std::move(gen));
  }
  const int64_t top = random_top(self);
  TORCH_CHECK(from <= top, "random_ expects 'from' casted to dtype to be less than or equal to 'to_inc' casted to dtype, but got from=",
              from, " > to_inc=", top);
  at::native::templates::check_from_to_in_range(from, top, self.dtype());
  return random_range(self, from, static_cast<uint64_t>(top) - static_cast<uint64_t>(from) + 1, std::move(gen));
}

at::Tensor& random_to(at::Tensor& self, int64_t to, std::optional<at::Generator> gen) {
  return random_from(self, 0, to, std::move(gen));
}

at::Tensor& random_default(at::Tensor& self, std::optional<at::Generator> gen) {
  return random_range(self, 0, static_cast<uint64_t>(random_top(self)) + 1, std::move(gen));
}

at::Tensor& bernoulli_impl(at::Tensor& self, const at::Tensor* p, double ps, std::optional<at::Generator> gen) {
  if (self.numel() == 0) return self;
  const int dev = device_index(self);
  const vt_tensor t = view_of(self);
  vt_tensor pt{};
  at::Tensor pp;
  if (p) {
    pp = p->device() == self.device() ? *p : p->to(self.device());
    pt = view_of(pp);
    VT_FALLBACK_UNLESS(vt_dtype_is_float(pt.dtype), "dtype ", pp.scalar_type());
  }
  const auto [seed, offset] = reserve(std::move(gen), dev, four_per_block(self.numel()));
  check(vt_op_rng_bernoulli(dev, "aten::bernoulli_", &t, p ? &pt : nullptr, ps, seed, offset));
  return self;
}

at::Tensor& bernoulli_float(at::Tensor& self, double p, std::optional<at::Generator> gen) {
  TORCH_CHECK(0 <= p && p <= 1, "bernoulli_ expects p to be in [0, 1], but got p=", p);
  return bernoulli_impl(self, nullptr, p, std::move(gen));
}

at::Tensor& bernoulli_tensor(at::Tensor& self, const at::Tensor& p, std::optional<at::Generator> gen) {
  return bernoulli_impl(self, &p, 0.0, std::move(gen));
}

// A new bernoulli sample is contiguous whatever the layout of p, as on CPU.
at::Tensor bernoulli(const at::Tensor& self, std::optional<at::Generator> gen) {
  at::Tensor out = at::empty_like(self, at::MemoryFormat::Contiguous);
  bernoulli_impl(out, &self, 0.0, std::move(gen));
  return out;
}

at::Tensor bernoulli_p(const at::Tensor& self, double p, std::optional<at::Generator> gen) {
  at::Tensor out = at::empty_like(self, at::MemoryFormat::Contiguous);
  return bernoulli_float(out, p, std::move(gen));
}

std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  if (input.numel() == 0) return {input, at::empty_like(input, input.options().dtype(at::kBool))};
  if (train.has_value() && !*train) return {input.clone(), at::ones_like(input, input.options().dtype(at::kBool))};
  TORCH_CHECK(p >= 0 && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
  // Laid out as CPU's dropout lays out its result: the input times a
  // contiguous noise tensor (TensorIterator's layout of the two); the mask
  // is that contiguous noise.
  const int dev = device_index(input);
  at::Tensor mask = at::empty_like(input, input.options().dtype(at::kBool), at::MemoryFormat::Contiguous);
  at::Tensor out = new_output(input.sizes(), input.scalar_type(), dev, {&input, &mask});
  const vt_tensor o = view_of(out), m = view_of(mask),
                  x = view_of(input);
  VT_FALLBACK_UNLESS(vt_dtype_is_float(x.dtype), "dtype ", input.scalar_type());
  const auto [seed, offset] = reserve(std::nullopt, dev, four_per_block(input.numel()));
  check(vt_op_rng_dropout(dev, "aten::native_dropout", &o, &m, &x, p, seed, offset));
  return {out, mask};
}

at::Tensor native_dropout_backward(const at::Tensor& grad, const at::Tensor& mask, double scale) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "Mask should be Bool Scalar Type", mask.scalar_type());
  at::Tensor out = at::empty_like(grad);
  if (out.numel() == 0) return out;
  const vt_tensor o = view_of(out), g = view_of(grad),
                  m = view_of(mask);
  VT_FALLBACK_UNLESS(vt_dtype_is_float(g.dtype), "dtype ", grad.scalar_type());
  check(vt_op_dropout_backward(device_index(grad), "aten::native_dropout_backward", &o, &g, &m, scale));
  return out;
}

at::Tensor multinomial(const at::Tensor& self, int64_t n_sample, bool replacement, std::optional<at::Generator> gen) {
  TORCH_CHECK(!c10::isIntegralType(self.scalar_type(), /*includeBool=*/true),
              "multinomial only supports floating-point dtypes for input, got: ", self.scalar_type());
  TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "prob_dist must be 1 or 2 dim");
  TORCH_CHECK(n_sample > 0, "cannot sample n_sample <= 0 samples");
  const int64_t cats = self.size(-1);
  TORCH_CHECK(replacement || n_sample <= cats, "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  TORCH_CHECK(cats <= (int64_t(1) << 24), "number of categories cannot exceed 2^24");
  const at::Tensor p2 = self.dim() == 1 ? self.unsqueeze(0) : self;
  const int64_t rows = p2.size(0);
  at::Tensor out = at::empty({rows, n_sample}, self.options().dtype(at::kLong));
  if (rows > 0) {
    const int dev = device_index(self);
    const vt_tensor o = view_of(out), p = view_of(p2);
    const auto [seed, offset] = reserve(std::move(gen), dev, two_per_block(rows * (replacement ? n_sample : cats)));
    check(vt_op_rng_multinomial(dev, "aten::multinomial", &o, &p, replacement, seed, offset));
  }
  return self.dim() == 1 ? out.squeeze(0) : out;
}

at::Tensor randperm(int64_t n, std::optional<at::Generator> gen, std::optional<at::ScalarType> dtype,
                    std::optional<at::Layout> layout, std::optional<at::Device> device, std::optional<bool> pin) {
  TORCH_CHECK(n >= 0, "n must be non-negative, got", n);
  const auto dt = dtype.value_or(at::kLong);
  at::Tensor out = at::empty({n}, at::TensorOptions().dtype(dt).device(device.value_or(at::Device(kTpu))));
  if (n == 0) return out;
  TORCH_CHECK(dt == at::kLong || dt == at::kDouble || n <= (int64_t(1) << (dt == at::kFloat ? 24 : dt == at::kHalf ? 11 : dt == at::kBFloat16 ? 8 : 31)),
              "n cannot be greater than the maximum value of dtype ", dt, " + 1");
  const int dev = device_index(out);
  const vt_tensor o = view_of(out);
  const auto [seed, offset] = reserve(std::move(gen), dev, two_per_block(n));
  check(vt_op_rng_randperm(dev, "aten::randperm", &o, seed, offset));
  return out;
}

at::Tensor normal_tensor(const at::Tensor* mean, double ms, const at::Tensor* std, double ss,
                         std::optional<at::Generator> gen) {
  TORCH_CHECK(std || ss >= 0.0, "normal expects std >= 0.0, but found std ", ss);
  const at::Tensor& ref = mean ? *mean : *std;
  at::Tensor out;
  if (mean && std) {
    const auto shape = at::infer_size(mean->sizes(), std->sizes());
    out = at::empty(shape, ref.options().dtype(at::result_type(*mean, *std)));
  } else {
    out = at::empty_like(ref, at::MemoryFormat::Contiguous);
  }
  if (out.numel() == 0) return out;
  const int dev = device_index(out);
  const vt_tensor o = view_of(out);
  VT_FALLBACK_UNLESS(vt_dtype_is_float(o.dtype), "dtype ", out.scalar_type());
  vt_tensor mt{}, st{};
  if (mean) mt = view_of(*mean);
  if (std) st = view_of(*std);
  const auto [seed, offset] = reserve(std::move(gen), dev, vt_rng_counters_used(o.dtype, out.numel()));
  check(vt_op_rng_normal_tensor(dev, "aten::normal", &o, mean ? &mt : nullptr, ms, std ? &st : nullptr, ss, seed,
                                offset));
  return out;
}

// A float tensor filled in place by one Philox kernel, `draw(dev, view,
// seed, offset)`; other dtypes go to the fallback.
template <class Draw>
at::Tensor& fill_float(at::Tensor& self, std::optional<at::Generator> gen, Draw&& draw) {
  if (self.numel() == 0) return self;
  const int dev = device_index(self);
  const vt_tensor t = view_of(self);
  VT_FALLBACK_UNLESS(vt_dtype_is_float(t.dtype), "dtype ", self.scalar_type());
  const auto [seed, offset] = reserve(std::move(gen), dev, vt_rng_counters_used(t.dtype, self.numel()));
  draw(dev, &t, seed, offset);
  return self;
}

at::Tensor& uniform_(at::Tensor& self, double from, double to, std::optional<at::Generator> gen) {
  TORCH_CHECK(from <= to, "uniform_ expects to return a [from, to) range, but found from=", from, " > to=", to);
  return fill_float(self, std::move(gen), [&](int dev, const vt_tensor* t, uint64_t seed, uint64_t offset) {
    check(vt_op_rng_uniform(dev, "aten::uniform_", t, seed, offset, from, to), "aten::uniform_");
  });
}

at::Tensor& normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
  TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
  return fill_float(self, std::move(gen), [&](int dev, const vt_tensor* t, uint64_t seed, uint64_t offset) {
    check(vt_op_rng_normal(dev, "aten::normal_", t, seed, offset, mean, std), "aten::normal_");
  });
}

at::Tensor& exponential_(at::Tensor& self, double lambd, std::optional<at::Generator> gen) {
  TORCH_CHECK(lambd > 0.0, "exponential_ expects lambda > 0.0, but found lambda=", lambd);
  return fill_float(self, std::move(gen), [&](int dev, const vt_tensor* t, uint64_t seed, uint64_t offset) {
    check(vt_op_rng_exponential(dev, "aten::exponential_", t, seed, offset, lambd));
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  VT_IMPL(m, "random_.from", random_from);
  VT_IMPL(m, "random_.to", random_to);
  VT_IMPL(m, "random_", random_default);
  VT_IMPL(m, "bernoulli_.float", bernoulli_float);
  VT_IMPL(m, "bernoulli_.Tensor", bernoulli_tensor);
  VT_IMPL(m, "bernoulli", bernoulli);
  VT_IMPL(m, "bernoulli.p", bernoulli_p);
  VT_IMPL(m, "native_dropout", native_dropout);
  VT_IMPL(m, "native_dropout_backward", native_dropout_backward);
  VT_IMPL(m, "multinomial", multinomial);
  VT_IMPL(m, "randperm.generator", randperm);
  VT_IMPL(m, "randperm", [](int64_t n, std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                        std::optional<at::Device> device, std::optional<bool> pin) {
    return randperm(n, std::nullopt, dtype, layout, device, pin);
  });
  VT_IMPL(m, "normal.Tensor_float", [](const at::Tensor& mean, double std, std::optional<at::Generator> g) {
    return normal_tensor(&mean, 0.0, nullptr, std, std::move(g));
  });
  VT_IMPL(m, "normal.float_Tensor", [](double mean, const at::Tensor& std, std::optional<at::Generator> g) {
    return normal_tensor(nullptr, mean, &std, 0.0, std::move(g));
  });
  VT_IMPL(m, "normal.Tensor_Tensor", [](const at::Tensor& mean, const at::Tensor& std, std::optional<at::Generator> g) {
    return normal_tensor(&mean, 0.0, &std, 0.0, std::move(g));
  });
  VT_IMPL(m, "uniform_", uniform_);
  VT_IMPL(m, "normal_", normal_);
  VT_IMPL(m, "exponential_", exponential_);
}

}  // namespace vtpu
