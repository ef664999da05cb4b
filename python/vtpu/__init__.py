"""vtpu — PyTorch's "tpu" device on any Linux machine.

A virtual TPU executed by a C runtime on the host CPU: ``torch.device("tpu")``
tensors live in a capacity-limited device memory, ops run asynchronously on a
device queue, and reading a value back waits. Loaded automatically by
``import torch`` (the ``torch.backends`` entry point) or by ``import vtpu``.
"""

__version__ = "0.1.0"

_loaded = False


def _load():
    """Register the tpu device with torch (idempotent)."""
    global _loaded
    if _loaded:
        return
    import torch  # may autoload vtpu, which then finishes the registration itself

    if _loaded:
        return
    from . import _C  # noqa: F401  (static initialisers register allocator, guard, hooks, kernels)

    if torch._C._get_privateuse1_backend_name() != "tpu":
        torch.utils.rename_privateuse1_backend("tpu")
    from . import tpu as _tpu_module

    torch._register_device_module("tpu", _tpu_module)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )
    _loaded = True


def _backward_on_importing_thread():
    """Run backward passes over tpu tensors on the thread that calls
    backward (the importing thread: torch's autograd state is per thread).

    PyTorch's autograd engine hands a non-CPU device's backward to a device
    thread and makes the caller wait for it: two thread wake-ups per
    backward, about 100 us on a VM whose idle cores halt, five times the
    whole backward of a small graph. The device thread lets a GPU's kernel
    launches overlap the caller's CPU work; vtpu's ops are already queued to
    its own workers, so the hand-off buys nothing. Left as it is when
    another accelerator (CUDA, XPU) is the current one: its backward keeps
    its device threads. ``torch.autograd.set_multithreading_enabled(True)``
    restores PyTorch's default."""
    import torch

    acc = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    if acc is not None and acc.type == "tpu":
        torch._C._set_multithreading_enabled(False)


def _settle_cpu_vector_math():
    """Have oneMKL pick, on this thread, the kernel of each vector math
    function ATen's CPU unary ops call (float and double acos ... trunc).

    oneMKL resolves a VML function's kernel on its first call; when that
    first call runs on several intra-op threads at once (any CPU op on more
    than 2048 contiguous values), one thread can run a low-accuracy kernel
    for its whole chunk of that one call (pytorch/pytorch#188792). Seen
    here: about one process in three computed the second half of its first
    ``torch.cos`` over a (256, 32) table 1000x less accurately (a rotary
    table, so training on "tpu" differed from run to run), and the CPU
    fallback runs these same kernels on tpu memory. A call on one value
    per function and dtype settles the choice before any parallel call:
    about 50 us at import."""
    import torch

    if not torch.backends.mkl.is_available():
        return
    ops = (torch.acos, torch.asin, torch.atan, torch.cos, torch.erf, torch.erfc, torch.erfinv, torch.exp,
           torch.log, torch.log10, torch.log2, torch.sin, torch.sqrt, torch.tan, torch.tanh, torch.trunc)
    for dtype in (torch.float32, torch.float64):
        x = torch.full((1,), 0.5, dtype=dtype)
        for op in ops:
            op(x)


def _autoload():
    """Entry point torch calls during ``import torch``: importing this package
    has already tried to register the device; a failure there was turned into
    a warning, so torch stays usable."""


_load_error = None
try:
    _load()
except Exception as e:  # noqa: BLE001 - a broken extension must never break ``import torch``
    _load_error = e
    import warnings

    warnings.warn(f"vtpu: the tpu device could not be loaded ({e}); torch works without it", stacklevel=2)

if _load_error is None:
    from . import dynamo, numerics, precision  # noqa: F401
    from .fallback import cpu_fallback, fallback_report, reset_fallback_report, set_cpu_fallback  # noqa: F401
    from .modes import (  # noqa: F401
        EagerMode,
        eager_mode,
        fusion_stats,
        get_eager_mode,
        reset_fusion_stats,
        set_eager_mode,
    )
    from .tpu import info  # noqa: F401
    from .tracing import Trace, trace  # noqa: F401

    dynamo.register()
    from . import distributed

    distributed.register()

    import atexit

    from . import _C

    # before the interpreter finalizes: no autograd thread of a tpu device may
    # still be releasing Python objects then (see _quiesce_autograd)
    atexit.register(_C._quiesce_autograd)

    _backward_on_importing_thread()
    _settle_cpu_vector_math()

__all__ = [
    "EagerMode",
    "cpu_fallback",
    "eager_mode",
    "fallback_report",
    "fusion_stats",
    "get_eager_mode",
    "info",
    "reset_fallback_report",
    "reset_fusion_stats",
    "set_cpu_fallback",
    "set_eager_mode",
    "trace",
    "Trace",
]
