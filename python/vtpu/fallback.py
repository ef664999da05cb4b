"""The CPU fallback, made visible: ops with no native tpu kernel run on the
CPU on aliases of device memory. The first fallback of each op warns;
``fallback_report()`` counts them; the strict switch turns them into
``NotImplementedError`` (``VTPU_CPU_FALLBACK=0`` or ``cpu_fallback(False)``)."""

import contextlib

from . import _C


def fallback_report() -> dict:
    """Op name -> number of calls that ran on the CPU since the last reset."""
    return dict(sorted(_C._fallback_report().items()))


def reset_fallback_report() -> None:
    _C._fallback_reset()


def set_cpu_fallback(enabled: bool) -> None:
    """Allow (True) or forbid (False) the CPU fallback for the whole process."""
    _C._set_fallback(1 if enabled else 0)


@contextlib.contextmanager
def cpu_fallback(enabled: bool):
    """Allow or forbid the CPU fallback on this thread inside the block,
    and in the backward passes it runs (on whichever thread autograd runs
    them)."""
    _C._push_context(-1, -1, 1 if enabled else 0)
    try:
        yield
    finally:
        _C._pop_context()
