// module.cpp — vtpu._C: the Python-facing functions of the binding (runtime
// info, synchronisation, memory, eager mode, fallback controls, generators).
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/utils/pybind.h>

#include "fallback.h"
#include "generator.h"

namespace vtpu {
namespace {

namespace py = pybind11;

void init() { ensure_init(); }
int device_count() {
  ensure_init();
  return vt_device_count();
}

py::dict chip_info() {
  ensure_init();
  const vt_chip_info* c = vt_chip();
  py::dict d;
  d["name"] = c->name;
  d["marketing_name"] = c->marketing_name;
  d["hbm_bytes"] = c->hbm_bytes;
  d["hbm_gbytes_per_s"] = c->hbm_gbytes_per_s;
  d["tensorcores"] = c->tensorcores;
  d["mxu_count"] = c->mxu_count;
  d["mxu_shape"] = py::make_tuple(c->mxu_rows, c->mxu_cols);
  d["peak_bf16_tflops"] = c->peak_bf16_tflops;
  d["chips_per_host"] = c->chips_per_host;
  d["host_topology"] = py::make_tuple(c->host_topology[0], c->host_topology[1], c->host_topology[2]);
  d["slice_topology"] = c->slice_topology;
  return d;
}

py::dict isa_info() {
  py::dict d;
  d["path"] = vt_isa_path();
  d["available"] = vt_isa_available();
  d["active"] = vt_isa_active();
  d["threads"] = vt_num_threads();
  return d;
}

void synchronize(int dev) {
  if (dev < 0) synchronize_all(); else synchronize_device(dev);
}

py::dict hbm_stats(int dev) {
  ensure_init();
  vt_hbm_stats s{};
  check(vt_hbm_get_stats(dev, &s));
  auto stat = [](const vt_stat& v) {
    py::dict d;
    d["current"] = v.current;
    d["peak"] = v.peak;
    d["allocated"] = v.allocated;
    d["freed"] = v.freed;
    return d;
  };
  py::dict d;
  d["allocated_bytes"] = stat(s.allocated_bytes);
  d["reserved_bytes"] = stat(s.reserved_bytes);
  d["allocation"] = stat(s.allocation);
  d["segment"] = stat(s.segment);
  d["num_alloc_retries"] = s.num_alloc_retries;
  d["num_ooms"] = s.num_ooms;
  d["capacity"] = s.capacity;
  return d;
}

void set_eager_mode(int mode) {
  ensure_init();
  vt_set_default_eager_mode(static_cast<vt_eager_mode>(mode));
}
int get_eager_mode() {
  ensure_init();
  return static_cast<int>(vt_get_eager_mode());
}

// DeferAndFuse: run every device's recorded ops now (a mode switch does).
void flush() {
  if (!vt_is_initialized()) return;
  for (int d = 0; d < vt_device_count(); d++) check(vt_flush(d));
}

py::dict fusion_stats() {
  vt_fusion_stats s{};
  vt_get_fusion_stats(&s);
  py::dict d;
  d["flushes"] = s.flushes;
  d["nodes"] = s.nodes;
  d["groups"] = s.groups;
  d["fused_nodes"] = s.fused_nodes;
  d["bytes_written"] = s.bytes_written;
  d["bytes_elided"] = s.bytes_elided;
  d["loop_flushes"] = s.loop_flushes;
  return d;
}

void trace_start() { vt_trace_start(); }

// The events of the trace just stopped, as dicts (times in ns, CLOCK_MONOTONIC).
py::list trace_stop() {
  vt_trace_event* ev = nullptr;
  const int64_t n = vt_trace_stop(&ev);
  TORCH_CHECK(n >= 0, "vtpu.trace: out of host memory recording the trace");
  py::list out;
  for (int64_t i = 0; i < n; i++) {
    py::dict d;
    d["name"] = ev[i].name;
    d["shape"] = ev[i].shape;
    d["device"] = ev[i].dev;
    d["queue"] = ev[i].queue;
    d["nodes"] = ev[i].nodes;
    d["bytes"] = ev[i].bytes;
    d["start_ns"] = ev[i].start_ns;
    d["end_ns"] = ev[i].end_ns;
    out.append(d);
  }
  free(ev);
  return out;
}

py::dict fallback_report() {
  py::dict d;
  for (const auto& [k, v] : fallback_counts()) d[py::str(k)] = v;
  return d;
}

void set_fallback(int allowed) { process_override().store(allowed); }

py::object default_gen(int dev) {
  return py::reinterpret_steal<py::object>(
      THPGenerator_initDefaultGenerator(default_generator(static_cast<c10::DeviceIndex>(dev))));
}

void gate_enqueue(int dev, int64_t timeout_ms) {
  ensure_init();
  check(vt_debug_gate_enqueue(dev, timeout_ms));
}

int64_t queue_pending(int dev) {
  ensure_init();
  return vt_queue_pending(dev);
}

void set_precision(int p) { set_process_precision(p); }
int get_precision() { return static_cast<int>(matmul_precision()); }

int current() { return current_device(); }
void set_device(int d) { set_current_device(static_cast<c10::DeviceIndex>(d)); }
bool bad_fork() { return vt_in_bad_fork() != 0; }

// At interpreter exit, before it finalizes: wait until the autograd engine's
// thread of each tpu device is idle. A backward returns as soon as its last
// node ran, while that thread may still be dropping the graph task, whose
// final callbacks (FSDP's, hooks') are Python objects. Should it do so once
// the interpreter finalizes, taking the GIL ends the thread inside a
// destructor and the process aborts ("terminate called without an active
// exception"). A backward of tensors Python never saw runs on that thread
// after what it was doing, so when it returns that is done, and what it
// leaves behind holds no Python object.
void quiesce_autograd() {
  if (!vt_is_initialized()) return;
  py::gil_scoped_release nogil;
  for (int d = 0; d < vt_device_count(); d++) {
    try {
      c10::InferenceMode normal(false);
      at::AutoGradMode grad(true);
      at::Tensor z = at::zeros({}, at::TensorOptions().device(c10::Device(kTpu, static_cast<c10::DeviceIndex>(d))));
      z.set_requires_grad(true);
      torch::autograd::backward({z.clone()});
    } catch (const std::exception&) {
      // best effort: the exit goes on (a device that fails this, e.g. out of
      // memory, leaves that thread as it is)
    }
  }
}

}  // namespace

void register_dist(py::module& m);   // dist.cpp
void register_cache(py::module& m);  // cache.cpp
}  // namespace vtpu

PYBIND11_MODULE(_C, m) {
  using namespace vtpu;
  m.doc() = "vtpu binding: the tpu device over the libvtpu C runtime";
  register_sparse_kernels();
  install_context_hook();
  register_dist(m);
  register_cache(m);
  m.attr("_max_queues") = VT_MAX_QUEUES;
  m.def("_stream_queue", [](int64_t id) { return vt_stream_queue(id); });
  m.def("_init", torch::wrap_pybind_function(init));
  m.def("_device_count", torch::wrap_pybind_function(device_count));
  m.def("_chip_info", torch::wrap_pybind_function(chip_info));
  m.def("_isa_info", torch::wrap_pybind_function(isa_info));
  m.def("_synchronize", torch::wrap_pybind_function(synchronize));
  m.def("_hbm_stats", torch::wrap_pybind_function(hbm_stats));
  m.def("_mxu_kept_hits", [] { return vt_mxu_kept_hits(); });
  m.def("_mxu_kept_clear", [] { vt_mxu_kept_clear(); });
  m.def("_set_eager_mode", torch::wrap_pybind_function(set_eager_mode));
  m.def("_get_eager_mode", torch::wrap_pybind_function(get_eager_mode));
  m.def("_fallback_report", torch::wrap_pybind_function(fallback_report));
  m.def("_flush", torch::wrap_pybind_function(flush));
  m.def("_program_begin", torch::wrap_pybind_function(vt_defer_program_begin));
  m.def("_program_end", torch::wrap_pybind_function(vt_defer_program_end));
  m.def("_trace_start", torch::wrap_pybind_function(trace_start));
  m.def("_trace_stop", torch::wrap_pybind_function(trace_stop));
  m.def("_fusion_stats", torch::wrap_pybind_function(fusion_stats));
  m.def("_reset_fusion_stats", torch::wrap_pybind_function(vt_reset_fusion_stats));
  m.def("_fallback_reset", torch::wrap_pybind_function(reset_fallback_counts));
  m.def("_set_fallback", torch::wrap_pybind_function(set_fallback));
  m.def("_fallback_allowed", torch::wrap_pybind_function(fallback_allowed));
  m.def("_default_generator", torch::wrap_pybind_function(default_gen));
  m.def("_debug_gate_enqueue", torch::wrap_pybind_function(gate_enqueue));
  m.def("_debug_gate_open", torch::wrap_pybind_function(vt_debug_gate_open));
  m.def("_queue_pending", torch::wrap_pybind_function(queue_pending));
  m.def("_current_device", torch::wrap_pybind_function(current));
  m.def("_set_device", torch::wrap_pybind_function(set_device));
  m.def("_in_bad_fork", torch::wrap_pybind_function(bad_fork));
  m.def("_quiesce_autograd", &quiesce_autograd);
  m.def("_set_precision", torch::wrap_pybind_function(set_precision));
  m.def("_push_context", torch::wrap_pybind_function(push_context));
  m.def("_pop_context", torch::wrap_pybind_function(pop_context));
  m.def("_get_precision", torch::wrap_pybind_function(get_precision));
  m.def("_mxu_path", torch::wrap_pybind_function(vt_mxu_path));
}
