// fallback.h — controls and counters of the CPU fallback (fallback.cpp).
#pragma once

#include <atomic>
#include <map>
#include <string>

#include "common.h"

namespace vtpu {

// Whether ops without a tpu kernel may run on the CPU: the innermost
// `vtpu.cpu_fallback` block's rule (the execution context, which a
// backward's autograd threads inherit), else the process setting (-1
// follows VTPU_CPU_FALLBACK).
bool fallback_allowed();
std::atomic<int>& process_override();

std::map<std::string, int64_t> fallback_counts();
void reset_fallback_counts();

// Registers the CPU fallback as the sparse tpu kernel of every op CPU has a
// sparse kernel for (once, when vtpu._C loads).
void register_sparse_kernels();

}  // namespace vtpu
