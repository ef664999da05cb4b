"""Eager execution modes, with TorchTPU's names.

Strict (default): ops are enqueued on the device queue and return at once;
errors surface at the next synchronisation. Debug (``TPU_LAUNCH_BLOCKING=1``):
every op completes before it returns and errors are raised at the op.
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
    if m == EagerMode.DEFER_AND_FUSE:
        raise NotImplementedError("vtpu: the DeferAndFuse eager mode is not implemented yet; use 'strict' or 'debug'")
    return m


def set_eager_mode(mode):
    """Set the process-wide eager mode ("strict" or "debug")."""
    _C._set_eager_mode(int(_parse(mode)))


def get_eager_mode() -> EagerMode:
    """The eager mode in force on this thread."""
    return EagerMode(_C._get_eager_mode())


@contextlib.contextmanager
def eager_mode(mode):
    """Use ``mode`` on this thread inside the block (nestable). The backward
    passes run inside the block run in it too, on autograd's threads."""
    m = _parse(mode)
    _C._push_context(int(m), -1)
    try:
        yield
    finally:
        _C._pop_context()


if get_eager_mode() == EagerMode.DEFER_AND_FUSE:
    import warnings

    warnings.warn(
        "vtpu: TPU_DEFER_AND_FUSE=1 asks for the DeferAndFuse eager mode, which vtpu does not implement yet; "
        "ops run in Strict mode (asynchronous, op by op)",
        stacklevel=2,
    )
