"""TPU matmul precision. fp32 matmuls on the tpu device run as bf16 passes
with fp32 accumulation, as on a TPU's MXU: DEFAULT 1 pass (~8 bits), HIGH 3
passes (~14 bits), HIGHEST 6 passes (~22 bits). The default is DEFAULT,
whatever torch's own default is; ``torch.tpu.precision(...)`` sets it for a
block on this thread, ``torch.tpu.set_float32_matmul_precision`` for the
process, and an explicit ``torch.set_float32_matmul_precision(...)`` call
applies to tpu too (medium→DEFAULT, high→HIGH, highest→HIGHEST)."""

import enum
import warnings

import torch

from . import _C


class Precision(enum.IntEnum):
    DEFAULT = 0
    HIGH = 1
    HIGHEST = 2


_BY_NAME = {
    "default": Precision.DEFAULT,
    "medium": Precision.DEFAULT,
    "high": Precision.HIGH,
    "highest": Precision.HIGHEST,
}
_TORCH_NAME = {Precision.DEFAULT: "medium", Precision.HIGH: "high", Precision.HIGHEST: "highest"}
_COST = {Precision.HIGH: "3x", Precision.HIGHEST: "6x"}
_warned = set()


def _parse(p) -> Precision:
    if isinstance(p, Precision):
        return p
    if isinstance(p, str) and p.lower() in _BY_NAME:
        return _BY_NAME[p.lower()]
    valid = ", ".join(f"'{n}'" for n in _BY_NAME) + ", or torch.tpu.Precision.{DEFAULT,HIGH,HIGHEST}"
    raise ValueError(f"invalid matmul precision {p!r}; valid: {valid}")


def _warn_cost(p: Precision) -> None:
    if p in _COST and p not in _warned:
        _warned.add(p)
        warnings.warn(
            f"tpu matmul precision {p.name}: fp32 matmuls take about {_COST[p]} the matrix-engine time of DEFAULT",
            stacklevel=3,
        )


class precision:
    """``with torch.tpu.precision(p):`` — fp32 matmuls and convolutions issued
    by this thread inside the block (and the backward passes it runs) use
    precision ``p``. Other threads keep the process setting."""

    def __init__(self, p):
        self.precision = _parse(p)  # a bad name raises here, not at `with`

    def __enter__(self):
        _warn_cost(self.precision)
        _C._push_context(-1, int(self.precision), -1)
        return self

    def __exit__(self, *exc):
        _C._pop_context()
        return False


def set_float32_matmul_precision(p) -> None:
    """Process-wide precision for fp32 matmuls on tpu ("medium"/"default", "high", "highest" or a Precision)."""
    m = _parse(p)
    _warn_cost(m)
    _C._set_precision(int(m))


def get_float32_matmul_precision() -> str:
    return _TORCH_NAME[Precision(_C._get_precision())]


def current_precision() -> Precision:
    """The precision a matmul issued now on this thread would use."""
    return Precision(_C._get_precision())


_torch_set = torch.set_float32_matmul_precision


def _set_both(precision: str) -> None:
    _torch_set(precision)
    set_float32_matmul_precision(precision)


_set_both.__doc__ = _torch_set.__doc__
_set_both.__wrapped__ = _torch_set
if not hasattr(torch.set_float32_matmul_precision, "__wrapped__"):
    # An explicit call by the user also sets the tpu precision.
    torch.set_float32_matmul_precision = _set_both
