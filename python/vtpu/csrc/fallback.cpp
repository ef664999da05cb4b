// fallback.cpp — the boxed CPU fallback for every op without a tpu kernel.
// It drains the device queue, runs the CPU kernel on host aliases of device
// memory (device memory is host memory), keeps in-place writes and views in
// device memory, copies fresh results to the device, and counts each op.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/SparseCsrTensorUtils.h>
#include <ATen/SparseTensorImpl.h>
#include <ATen/native/SparseTensorUtils.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>

#include "device_check.h"
#include "fallback.h"
#include "generator.h"

namespace vtpu {
namespace {

std::mutex g_mu;
std::map<std::string, int64_t> g_counts;
std::set<std::string> g_warned;
thread_local std::string tls_reason;  // why the native kernel declined (set_fallback_reason)

std::atomic<int>& process_override_ref();

bool process_allowed() {
  static const bool allowed = [] {
    const char* v = std::getenv("VTPU_CPU_FALLBACK");
    return !(v && (std::string(v) == "0" || std::string(v) == "false"));
  }();
  const int o = process_override_ref().load();
  return o >= 0 ? o != 0 : allowed;
}

struct Alias {
  at::Tensor tpu, cpu;
};

// The host aliases of one fallback call: one CPU storage per device storage
// (device memory is host memory), so tensors that share memory on the
// device share it on the CPU too, and a CPU kernel sees the views and
// overlaps the user's tensors have: it refuses what CPU refuses (an out=
// that is its own input) and writes where the user's views look.
class HostStorages {
 public:
  at::Tensor alias(const at::Tensor& t) {
    (void)t.data_ptr();  // a copy-on-write storage gets its own copy before the kernel may write it
    const c10::Storage& ds = t.storage();
    c10::Storage* hs = nullptr;
    for (auto& [impl, host] : map_)
      if (impl == ds.unsafeGetStorageImpl()) hs = &host;
    if (!hs) {
      void* base = ds.mutable_data();
      map_.emplace_back(ds.unsafeGetStorageImpl(),
                        c10::Storage(c10::Storage::use_byte_size_t(), ds.nbytes(),
                                     at::DataPtr(base, base, [](void*) {}, c10::Device(c10::kCPU)), nullptr, false));
      hs = &map_.back().second;
    }
    at::Tensor h = at::empty({0}, t.options().device(c10::kCPU).requires_grad(false));
    h.set_(*hs, t.storage_offset(), t.sizes(), t.strides());
    h._set_conj(t.is_conj());
    h._set_neg(t.is_neg());
    return h;
  }

 private:
  std::vector<std::pair<const c10::StorageImpl*, c10::Storage>> map_;
};

bool is_sparse_layout(const at::Tensor& t) { return t.defined() && t.layout() != c10::kStrided; }

// The dense tensors a sparse tensor is made of: COO (indices, values),
// compressed layouts (compressed indices, plain indices, values).
std::vector<at::Tensor> members_of(const at::Tensor& t) {
  if (t.layout() == c10::kSparse) return {t._indices(), t._values()};
  const auto [ci, pi] = at::sparse_csr::getCompressedPlainIndices(t);
  return {ci, pi, t.values()};
}

// A sparse tensor of t's layout, sizes and dtype on `device`, made of members.
at::Tensor sparse_from(const at::Tensor& t, const std::vector<at::Tensor>& m, c10::Device device) {
  const auto opts = t.options().device(device);
  if (t.layout() == c10::kSparse)
    return at::_sparse_coo_tensor_with_dims_and_tensors(t.sparse_dim(), t.dense_dim(), t.sizes(), m[0], m[1], opts,
                                                        t.is_coalesced());
  return at::_sparse_compressed_tensor_unsafe(m[0], m[1], m[2], t.sizes(), opts);
}

// Gives the tpu sparse tensor `tpu` the structure and members of `src`
// (what a CPU kernel made of its host twin, whose members were clones,
// host_members, of tpu_members). A member the kernel kept (and did not
// resize) is copied back into tpu's own, so views of it see the write as on
// CPU; a member the kernel replaced or resized becomes a new device tensor.
void assign_sparse(const at::Tensor& tpu, const at::Tensor& src, const std::vector<at::Tensor>& tpu_members,
                   const std::vector<at::Tensor>& host_members) {
  auto m = members_of(src);
  for (size_t i = 0; i < m.size(); i++) {
    const bool kept = i < host_members.size() && m[i].unsafeGetTensorImpl() == host_members[i].unsafeGetTensorImpl();
    if (kept && m[i].sizes() == tpu_members[i].sizes()) {
      tpu_members[i].copy_(m[i]);
      m[i] = tpu_members[i];
    } else {
      m[i] = m[i].to(tpu.device());
    }
  }
  if (tpu.layout() == c10::kSparse) {
    auto* impl = at::sparse::get_sparse_impl(tpu);
    impl->raw_resize_(src.sparse_dim(), src.dense_dim(), src.sizes());
    impl->set_indices_and_values_unsafe(m[0], m[1]);
    impl->set_coalesced(src.is_coalesced());
  } else {
    at::sparse_csr::get_sparse_csr_impl(tpu)->set_member_tensors(m[0], m[1], m[2], src.sizes());
  }
}

// A sparse tpu argument's CPU twin: a sparse CPU tensor whose members are
// host aliases of the tpu members when the op only reads it, and CPU clones
// when it writes it (a kernel may grow them, which an alias of device
// memory cannot do); what it wrote is given back afterwards (assign_sparse).
struct SparseAlias {
  at::Tensor tpu, cpu;
  std::vector<at::Tensor> tpu_members, host_members;
  bool written;
};

at::Tensor to_cpu_arg(const at::Tensor& t, bool is_out, bool written, bool shares_memory, HostStorages& host,
                      std::vector<Alias>& aliases, std::vector<Alias>& outs, std::vector<Alias>& aliased_outs,
                      std::vector<SparseAlias>& sparse, std::optional<c10::Device>& target) {
  if (!t.defined() || t.device().type() != kTpu) return t;
  if (!target) target = t.device();
  if (is_sparse_layout(t)) {
    SparseAlias s{t, {}, members_of(t), {}, written || is_out};
    for (const auto& m : s.tpu_members) s.host_members.push_back(s.written ? host.alias(m).clone() : host.alias(m));
    s.cpu = sparse_from(t, s.host_members, c10::kCPU);
    sparse.push_back(s);
    return s.cpu;
  }
  if (is_out && !shares_memory) {
    // out= tensors may need resizing, which host aliases cannot do: use a
    // CPU copy and write it back afterwards. The copy is dense: some CPU
    // kernels write a strided out as if it were contiguous (avg_pool3d),
    // and the write-back honours the device tensor's strides.
    at::Tensor c = t.is_non_overlapping_and_dense() ? at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kCPU))
                                                    : at::empty(t.sizes(), t.options().device(c10::kCPU));
    c.copy_(host_alias_of(t));
    outs.push_back({t, c});
    return c;
  }
  // An out= sharing memory with another argument, or with itself, is given
  // to the kernel as it is, so the kernel judges the overlap as on CPU.
  at::Tensor c = host.alias(t);
  aliases.push_back({t, c});
  if (is_out) aliased_outs.push_back({t, c});
  return c;
}

at::Tensor to_device_result(const at::Tensor& r, const std::vector<Alias>& aliases, const std::vector<Alias>& outs,
                            const std::vector<SparseAlias>& sparse, const c10::Device& target) {
  if (!r.defined() || r.device().type() == kTpu) return r;
  if (is_sparse_layout(r)) {
    for (const auto& s : sparse)
      if (r.unsafeGetTensorImpl() == s.cpu.unsafeGetTensorImpl()) return s.tpu;  // in-place or out=
    std::vector<at::Tensor> m;
    for (const auto& c : members_of(r)) m.push_back(to_device_result(c, aliases, outs, sparse, target));
    return sparse_from(r, m, target);
  }
  for (const auto& o : outs)
    if (r.unsafeGetTensorImpl() == o.cpu.unsafeGetTensorImpl()) return o.tpu;
  for (const auto& a : aliases) {
    if (r.unsafeGetTensorImpl() == a.cpu.unsafeGetTensorImpl()) return a.tpu;  // in-place: self
    // A view of an input stays a view of device memory (the host alias's
    // storage is the device storage: offsets carry over).
    if (r.storage().data() == a.cpu.storage().data() && r.dtype() == a.cpu.dtype() && r.numel() > 0)
      return a.tpu.as_strided(r.sizes(), r.strides(), r.storage_offset());
  }
  const auto opts = r.options().device(target);
  at::Tensor d = r.is_non_overlapping_and_dense() ? at::empty_strided(r.sizes(), r.strides(), opts)
                                                  : at::empty(r.sizes(), opts);
  d.copy_(r);
  return d;
}

// A tpu generator drives the CPU kernel through a CPU generator seeded from
// its (seed, offset), so seeded runs stay reproducible.
at::Generator cpu_generator_for(const at::Generator& g) {
  auto* tg = at::check_generator<TpuGeneratorImpl>(g);
  uint64_t seed = 0, offset = 0;
  {
    std::lock_guard<std::mutex> lock(tg->mutex_);
    seed = tg->current_seed();
    offset = tg->reserve(1u << 20);
  }
  const uint64_t mixed = seed * 0x9E3779B97F4A7C15ull ^ (offset + 0x632BE59BD9B4E019ull);
  return at::detail::createCPUGenerator(mixed);
}

bool accepts_host_tensors(const std::string& name) {
  // indexing takes index tensors from the host, as on CUDA
  return name == "aten::index" || name == "aten::index_put" || name == "aten::index_put_" ||
         name == "aten::_index_put_impl_";
}

std::atomic<int>& process_override_ref() {
  static std::atomic<int> o{-1};
  return o;
}

}  // namespace

std::atomic<int>& process_override() { return process_override_ref(); }

bool fallback_allowed() {
  const int c = context_fallback();
  return c >= 0 ? c != 0 : process_allowed();
}

std::map<std::string, int64_t> fallback_counts() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_counts;
}

void reset_fallback_counts() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_counts.clear();
}

void set_fallback_reason(const char* why) { tls_reason = why; }

// Runs op on the CPU under cpu_key (CPU, or SparseCPU / SparseCsrCPU for
// ops on sparse tpu tensors).
void fallback_to(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DispatchKey cpu_key) {
  const auto& schema = op.schema();
  std::string name = schema.name();
  if (!schema.overload_name().empty()) name += "." + schema.overload_name();
  const std::string why = std::move(tls_reason);
  tls_reason.clear();
  const std::string lacks = why.empty() ? "has no native TPU kernel" : "has no native TPU kernel for " + why;
  TORCH_CHECK_NOT_IMPLEMENTED(fallback_allowed(), "operator '", schema.name(), "' is not implemented for TPU (vtpu ", lacks,
                              " and the CPU fallback is off: VTPU_CPU_FALLBACK=0 or vtpu.cpu_fallback(False))");
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    first = g_counts[name]++ == 0 && g_warned.insert(name).second;
  }
  if (first)
    TORCH_WARN("vtpu: operator '", name, "' ", lacks,
               "; it runs on the CPU (the device queue is drained first). "
               "vtpu.fallback_report() lists every op that fell back.");

  const size_t n = schema.arguments().size();
  std::vector<c10::IValue> args(stack->end() - n, stack->end());
  std::vector<Alias> aliases, outs;
  std::vector<SparseAlias> sparse;
  std::optional<c10::Device> target;
  std::set<int> devices;
  c10::Device host_dev(c10::kCPU);

  check_stack_devices(schema, *stack, accepts_host_tensors(schema.name()));
  const auto written = [&](size_t i) {
    const auto* a = schema.arguments()[i].alias_info();
    return a != nullptr && a->isWrite();
  };
  const auto each_tensor = [&](const c10::IValue& v, const auto& fn) {
    if (v.isTensor()) fn(v.toTensor());
    else if (v.isTensorList()) for (const auto& t : v.toTensorList()) fn(t);
    else if (v.isOptionalTensorList())
      for (const std::optional<at::Tensor> t : v.toOptionalTensorList()) if (t.has_value()) fn(*t);
  };
  // The dense tensors behind an argument: itself, or a sparse tensor's members.
  const auto each_dense = [&](const c10::IValue& v, const auto& fn) {
    each_tensor(v, [&](const at::Tensor& t) {
      if (!is_sparse_layout(t)) return fn(t);
      if (t.device().type() == kTpu) for (const auto& m : members_of(t)) fn(m);
    });
  };
  for (size_t i = 0; i < n; i++)
    each_tensor(args[i], [&](const at::Tensor& t) {
      if (t.defined() && t.device().type() == kTpu) devices.insert(device_index(t));
    });

  // Queued kernels may still write what the CPU is about to read (or read
  // what it is about to write). What it reads must not come from a failed op.
  for (int d : devices) wait_device(d);
  for (size_t i = 0; i < n; i++)
    if (!schema.arguments()[i].is_out())
      each_dense(args[i], [](const at::Tensor& t) {
        if (t.defined() && t.device().type() == kTpu) wait_readable(t);
      });
  std::vector<at::Tensor> written_tpu, dense_tpu;
  for (size_t i = 0; i < n; i++) {
    if (written(i))
      each_dense(args[i], [&](const at::Tensor& t) {
        if (t.defined() && t.device().type() == kTpu) written_tpu.push_back(t);
      });
    each_tensor(args[i], [&](const at::Tensor& t) {
      if (t.defined() && t.device().type() == kTpu && !is_sparse_layout(t)) dense_tpu.push_back(t);
    });
  }
  // Whether an out= tensor shares memory with another argument or overlaps
  // itself: then the kernel gets it as it is (HostStorages).
  const auto shares_memory = [&](const at::Tensor& t) {
    if (!t.defined() || t.device().type() != kTpu || is_sparse_layout(t) || t.numel() == 0) return false;
    if (at::has_internal_overlap(t) == at::MemOverlap::Yes) return true;
    int same = 0;
    for (const auto& o : dense_tpu)
      if (o.numel() > 0 && o.storage().unsafeGetStorageImpl() == t.storage().unsafeGetStorageImpl()) same++;
    return same > 1;  // t itself counts once
  };
  HostStorages host;
  std::vector<Alias> aliased_outs;

  for (size_t i = 0; i < n; i++) {
    const bool is_out = schema.arguments()[i].is_out(), w = written(i);
    const auto to_cpu = [&](const at::Tensor& t) {
      return to_cpu_arg(t, is_out, w, is_out && shares_memory(t), host, aliases, outs, aliased_outs, sparse, target);
    };
    auto& v = args[i];
    if (v.isTensor()) {
      v = to_cpu(v.toTensor());
    } else if (v.isTensorList()) {
      auto list = v.toTensorList();
      c10::List<at::Tensor> mapped;
      for (const auto& t : list) mapped.push_back(to_cpu(t));
      v = mapped;
    } else if (v.isOptionalTensorList()) {
      c10::List<std::optional<at::Tensor>> mapped;
      for (const std::optional<at::Tensor> t : v.toOptionalTensorList()) {
        if (t.has_value()) mapped.push_back(to_cpu(*t));
        else mapped.push_back(std::nullopt);
      }
      v = mapped;
    } else if (v.isDevice() && v.toDevice().type() == kTpu) {
      if (!target) target = v.toDevice();
      v = host_dev;
    } else if (v.isGenerator() && v.toGenerator().device().type() == kTpu) {
      v = cpu_generator_for(v.toGenerator());
    }
  }
  if (!target) target = c10::Device(kTpu, current_device());
  // A view of a sparse argument's member stays a view of device memory.
  for (const auto& s : sparse)
    if (!s.written)
      for (size_t k = 0; k < s.tpu_members.size(); k++) aliases.push_back({s.tpu_members[k], s.host_members[k]});

  torch::jit::drop(stack, n);
  for (auto& a : args) torch::jit::push(stack, std::move(a));
  op.redispatchBoxed(c10::DispatchKeySet(cpu_key), stack);

  for (const auto& o : outs) at::_copy_from_and_resize(o.cpu, o.tpu);
  // An aliased out= the kernel resized (within its storage: the host
  // storage cannot grow) takes the new geometry on the device too.
  for (const auto& o : aliased_outs)
    if (o.cpu.sizes() != o.tpu.sizes() || o.cpu.strides() != o.tpu.strides() ||
        o.cpu.storage_offset() != o.tpu.storage_offset())
      o.tpu.as_strided_(o.cpu.sizes(), o.cpu.strides(), o.cpu.storage_offset());
  for (const auto& s : sparse)
    if (s.written) assign_sparse(s.tpu, s.cpu, s.tpu_members, s.host_members);
  for (const auto& t : written_tpu) mark_written(t);

  const size_t nr = schema.returns().size();
  for (size_t j = stack->size() - nr; j < stack->size(); j++) {
    auto& r = (*stack)[j];
    if (r.isTensor()) {
      r = to_device_result(r.toTensor(), aliases, outs, sparse, *target);
    } else if (r.isTensorList()) {
      c10::List<at::Tensor> mapped;
      for (const auto& t : r.toTensorList()) mapped.push_back(to_device_result(t, aliases, outs, sparse, *target));
      r = mapped;
    }
  }
}

// Quantized tensors (qint8, quint8, qint32, ...) on tpu: every op says
// clearly that the device has none, instead of PyTorch's "Could not run ...
// with arguments from the 'Quantizedtpu' backend".
void no_quantized(const c10::OperatorHandle& op, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "vtpu: the tpu device has no quantized tensors (", op.schema().name(),
                              " on a quantized dtype); quantize and run quantized ops on the CPU, or keep "
                              "float tensors on tpu");
}

TORCH_LIBRARY_IMPL(_, QuantizedPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&no_quantized>());
}

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  fallback_to(op, stack, c10::DispatchKey::CPU);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>()); }

// Sparse tpu tensors (COO, CSR/CSC/BSR/BSC): the kernels that only read or
// set their structure are PyTorch's device-generic ones (sparse_ops.cpp);
// every other op runs through the fallback on a sparse CPU twin.
void sparse_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  fallback_to(op, stack, c10::DispatchKey::SparseCPU);
}
void sparse_compressed_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  fallback_to(op, stack, c10::DispatchKey::SparseCsrCPU);
}

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&sparse_fallback>());
}
TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&sparse_compressed_fallback>());
}

// A backend fallback ranks below composite kernels, and a structured op's
// functional variant has one (CompositeExplicitAutogradNonFunctional: mm on
// a CSR tensor would allocate a sparse out= and call mm.out). CPU has its
// own sparse kernel for such ops; tpu gets the fallback as a kernel for
// every op CPU has a sparse kernel for and vtpu none.
void register_sparse_kernels() {
  static std::vector<std::unique_ptr<torch::Library>> libs;
  if (!libs.empty()) return;
  const std::pair<c10::DispatchKey, c10::DispatchKey> keys[] = {
      {c10::DispatchKey::SparseCPU, c10::DispatchKey::SparsePrivateUse1},
      {c10::DispatchKey::SparseCsrCPU, c10::DispatchKey::SparseCsrPrivateUse1}};
  for (const auto& [cpu_key, tpu_key] : keys) {
    libs.push_back(std::make_unique<torch::Library>(torch::Library::IMPL, "aten", tpu_key, __FILE__, __LINE__));
    for (const auto& name : c10::Dispatcher::singleton().getAllOpNames()) {
      const auto op = c10::Dispatcher::singleton().findOp(name);
      if (!op || name.name.rfind("aten::", 0) != 0 || !op->hasKernelForDispatchKey(cpu_key) ||
          op->hasKernelForDispatchKey(tpu_key))
        continue;
      const std::string full = name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
      libs.back()->impl(full.c_str(), tpu_key == c10::DispatchKey::SparsePrivateUse1
                                          ? torch::CppFunction::makeFromBoxedFunction<&sparse_fallback>()
                                          : torch::CppFunction::makeFromBoxedFunction<&sparse_compressed_fallback>());
    }
  }
}

// Composite ops whose PyTorch implementation refuses devices other than
// CPU/CUDA/XPU ("mode only supports CPU, CUDA and XPU device type"): on tpu
// they run through the fallback like an op without a kernel.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* name : {"mode", "mode.values"})
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

}  // namespace vtpu
