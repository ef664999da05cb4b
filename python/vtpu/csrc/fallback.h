// fallback.h — controls and counters of the CPU fallback (fallback.cpp).
#pragma once

#include <atomic>
#include <map>
#include <string>

#include "common.h"

namespace vtpu {

// Whether ops without a tpu kernel may run on the CPU: a thread-local
// override (-1 none, 0 off, 1 on), else the process setting (-1 follows
// VTPU_CPU_FALLBACK).
bool fallback_allowed();
void set_thread_fallback(int allowed);
int thread_fallback();
std::atomic<int>& process_override();

std::map<std::string, int64_t> fallback_counts();
void reset_fallback_counts();

// Registers the CPU fallback as the sparse tpu kernel of every op CPU has a
// sparse kernel for (once, when vtpu._C loads).
void register_sparse_kernels();

}  // namespace vtpu
