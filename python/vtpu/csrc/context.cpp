// context.cpp — the execution context of a thread: its eager mode, its
// matmul precision and whether the CPU fallback is allowed, as
// `vtpu.eager_mode(...)`, `torch.tpu.precision(...)` and
// `vtpu.cpu_fallback(...)` blocks set them. The context lives in one of
// PyTorch's thread-local debug-info slots, which ThreadLocalState carries
// into the autograd engine's device threads: a backward() inside a block
// runs its kernels in the block's mode and precision, under its fallback
// rule, on whichever thread the engine runs it. The runtime reads the eager mode through
// the hook installed here (vt_set_eager_mode_source).
#include <c10/util/ThreadLocalDebugInfo.h>

#include <atomic>
#include <memory>

#include "common.h"

namespace vtpu {
namespace {

std::atomic<int> g_precision{VT_PRECISION_DEFAULT};

constexpr std::string_view kContextSlotName = "VTPU_EXECUTION_CONTEXT";
const c10::DebugInfoKind kContextSlot(&kContextSlotName);

// -1: not set by this block or an enclosing one (the process setting holds).
struct ExecContext final : c10::DebugInfoBase {
  int eager_mode = -1;
  int precision = -1;
  int fallback = -1;  // 0 forbidden, 1 allowed
};

const ExecContext* current() {
  return static_cast<const ExecContext*>(c10::ThreadLocalDebugInfo::get(kContextSlot));
}

// The runtime's view of this thread's eager mode (-1: the process default).
int context_eager_mode() {
  const ExecContext* c = current();
  return c ? c->eager_mode : -1;
}

}  // namespace

void install_context_hook() { vt_set_eager_mode_source(&context_eager_mode); }

void push_context(int eager_mode, int precision, int fallback) {
  auto c = std::make_shared<ExecContext>();
  if (const ExecContext* outer = current()) *c = *outer;  // a nested block changes only what it names
  if (eager_mode >= 0) c->eager_mode = eager_mode;
  if (precision >= 0) c->precision = precision;
  if (fallback >= 0) c->fallback = fallback;
  c10::ThreadLocalDebugInfo::_push(kContextSlot, std::move(c));
}

void pop_context() { c10::ThreadLocalDebugInfo::_pop(kContextSlot); }

vt_precision matmul_precision() {
  const ExecContext* c = current();
  return static_cast<vt_precision>(c && c->precision >= 0 ? c->precision : g_precision.load());
}

void set_process_precision(int p) { g_precision.store(p); }

int context_fallback() {
  const ExecContext* c = current();
  return c ? c->fallback : -1;
}

}  // namespace vtpu
