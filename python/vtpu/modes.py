"""Eager execution modes, with TorchTPU's names.

Strict (default): ops are enqueued on the device queue and return at once;
errors surface at the next synchronisation. Debug (``TPU_LAUNCH_BLOCKING=1``):
every op completes before it returns and errors are raised at the op.
DeferAndFuse (``TPU_DEFER_AND_FUSE=1``): elementwise ops are checked and
recorded instead of queued; at a flush (a host read, any other op, a
synchronisation, a mode switch, a repeating op sequence) chains of them run
as fused groups, tile by tile, and intermediates whose tensors are gone by
then are never written. Results are bit-identical to Strict.
"""

import contextlib
import enum

from . import _C


class EagerMode(enum.IntEnum):
    STRICT = 0
    DEBUG = 1
    DEFER_AND_FUSE = 2


_NAMES = {
    "strict": EagerMode.STRICT,
    "debug": EagerMode.DEBUG,
    "defer_and_fuse": EagerMode.DEFER_AND_FUSE,
}


def _parse(mode):
    if isinstance(mode, EagerMode):
        m = mode
    elif isinstance(mode, str) and mode.lower() in _NAMES:
        m = _NAMES[mode.lower()]
    else:
        raise ValueError(f"unknown eager mode {mode!r}; valid modes: {', '.join(_NAMES)} (or vtpu.EagerMode)")
    return m


def set_eager_mode(mode):
    """Set the process-wide eager mode ("strict", "debug" or "defer_and_fuse").
    Ops recorded so far run first."""
    m = _parse(mode)
    _C._flush()
    _C._set_eager_mode(int(m))


def get_eager_mode() -> EagerMode:
    """The eager mode in force on this thread."""
    return EagerMode(_C._get_eager_mode())


@contextlib.contextmanager
def eager_mode(mode):
    """Use ``mode`` on this thread inside the block (nestable). The backward
    passes run inside the block run in it too, on autograd's threads."""
    m = _parse(mode)
    _C._flush()
    _C._push_context(int(m), -1, -1)
    try:
        yield
    finally:
        _C._pop_context()
        _C._flush()


def fusion_stats() -> dict:
    """What DeferAndFuse flushes did since the last reset: ``flushes``,
    ``nodes`` (recorded ops run), ``groups`` (commands queued),
    ``fused_nodes`` (ops that ran in a group of two or more),
    ``bytes_written`` (device memory the recorded ops wrote),
    ``bytes_elided`` (outputs freed before the flush, never written) and
    ``loop_flushes`` (flushes started by a repeating op sequence)."""
    return dict(_C._fusion_stats())


def reset_fusion_stats():
    """Zero the counters of :func:`fusion_stats`."""
    _C._reset_fusion_stats()
