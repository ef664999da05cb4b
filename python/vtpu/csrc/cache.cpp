// cache.cpp — the compile cache (runtime/src/graph/cache.c) for Python:
// entries go in and out as bytes; a failed write comes back as a message.
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

#include "common.h"

extern "C" {
#include "vtpu/cache.h"
}

namespace vtpu {
namespace {

namespace py = pybind11;

void configure(const std::string& tier2, const std::string& tier3) {
  check(vt_cache_configure(tier2.c_str(), tier3.c_str()));
}

// (entry, tier): entry None and tier 0 on a miss.
py::tuple get(const std::string& key) {
  void* data = nullptr;
  size_t len = 0;
  int tier = 0;
  vt_status s;
  {
    py::gil_scoped_release nogil;
    s = vt_cache_get(key.c_str(), &data, &len, &tier);
  }
  check(s);
  if (!data) return py::make_tuple(py::none(), 0);
  py::bytes out(static_cast<const char*>(data), len);
  vt_cache_release(data);
  return py::make_tuple(out, tier);
}

// None when every tier took the entry, else why one did not (once per tier).
py::object put(const std::string& key, const py::bytes& entry, uint64_t compile_us) {
  std::string_view view = entry;
  vt_status s;
  {
    py::gil_scoped_release nogil;
    s = vt_cache_put(key.c_str(), view.data(), view.size(), compile_us);
  }
  if (s == VT_ERR_UNSUPPORTED) return py::str(vt_last_error());
  check(s);
  return py::none();
}

// The lock's handle (-1: nothing to lock), or None when timeout_ms ran out
// (the caller waits again, so Ctrl-C gets through between waits).
py::object lock(const std::string& key, int64_t timeout_ms) {
  int handle = -1;
  vt_status s;
  {
    py::gil_scoped_release nogil;  // another process may hold it for a whole compile
    s = vt_cache_lock(key.c_str(), timeout_ms, &handle);
  }
  if (s == VT_ERR_TIMEOUT) return py::none();
  check(s);
  return py::int_(handle);
}

py::dict stats() {
  vt_cache_stats st;
  vt_cache_get_stats(&st);
  py::dict d;
  d["num_cache_reqs"] = st.requests;
  d["num_cache_hits"] = st.hits;
  d["num_tier1_hits"] = st.tier_hits[1];
  d["num_tier2_hits"] = st.tier_hits[2];
  d["num_tier3_hits"] = st.tier_hits[3];
  d["num_discarded_entries"] = st.discarded;
  d["num_write_errors"] = st.write_errors;
  py::dict per_entry;
  for (size_t i = 0; i < st.entries; i++) {
    vt_cache_entry_stats e;
    if (vt_cache_entry_at(i, &e) != VT_OK) break;  // cleared meanwhile
    py::dict one;
    one["read_count"] = e.read_count;
    one["compilation_duration"] = e.compile_us;
    one["last_read"] = e.last_read_us;
    per_entry[py::str(e.key)] = one;
  }
  d["per_entry_stats"] = per_entry;
  vt_codegen_stats cg;
  vt_codegen_get_stats(&cg);
  d["num_codegen_compiles"] = cg.compiles;
  d["num_codegen_loads"] = cg.loads;
  d["num_codegen_failures"] = cg.failures;
  d["num_codegen_runs"] = cg.runs;
  d["codegen_compile_duration"] = cg.compile_us;
  return d;
}

}  // namespace

void register_cache(py::module& m) {
  m.def("_cache_configure", torch::wrap_pybind_function(configure));
  m.def("_cache_get", torch::wrap_pybind_function(get));
  m.def("_cache_put", torch::wrap_pybind_function(put));
  m.def("_cache_lock", torch::wrap_pybind_function(lock));
  m.def("_cache_unlock", [](int handle) { vt_cache_unlock(handle); });
  m.def("_cache_clear", [](bool files) { check(vt_cache_clear(files)); });
  m.def("_cache_stats", torch::wrap_pybind_function(stats));
  m.def("_codegen_set_compiler", [](const std::string& cc) { check(vt_codegen_set_compiler(cc.c_str())); });
}

}  // namespace vtpu
