"""``torch.tpu``: the device module of the "tpu" device (TorchTPU's names)."""

import contextlib
import dataclasses
from typing import Optional, Union

import torch

from . import _C
from .precision import (  # noqa: F401  (torch.tpu's public names)
    Precision,
    get_float32_matmul_precision,
    precision,
    set_float32_matmul_precision,
)

_device_t = Union[torch.device, str, int, None]


def _index(device: _device_t = None) -> int:
    """Device index of ``device`` (None → current), validated."""
    if device is None:
        return current_device()
    if isinstance(device, int):
        idx = device
    else:
        d = torch.device(device)
        if d.type != "tpu":
            raise ValueError(f"expected a tpu device, got {d}")
        idx = current_device() if d.index is None else d.index
    n = device_count()
    if not 0 <= idx < n:
        raise RuntimeError(f"Invalid device index tpu:{idx}: vtpu has {n} device(s) (VTPU_NUM_DEVICES)")
    return idx


# ------------------------------------------------------------------ device


def is_available() -> bool:
    try:
        return _C._device_count() > 0
    except Exception:  # noqa: BLE001 - availability never raises
        return False


def is_initialized() -> bool:
    return True  # the runtime initialises when the extension loads its first device call


def init() -> None:
    _C._init()


def _lazy_init() -> None:
    _C._init()


# Inside torch.compile, device queries and synchronize go through
# torch.accelerator, which Dynamo folds into the graph (with guards where
# the answer can change) instead of breaking it at an unknown C function.


_count = None  # fixed for the life of the process: a constant to Dynamo


def device_count() -> int:
    global _count
    if _count is None:
        _count = _C._device_count()
    return _count


def current_device() -> int:
    if torch.compiler.is_compiling():
        return torch.accelerator.current_device_index()
    return _C._current_device()


def set_device(device: _device_t) -> None:
    """Make ``device`` (an index, "tpu:N" or a torch.device) this thread's
    current tpu device. A bad index or a device that is not a tpu raises
    ValueError, as TorchTPU does."""
    if device is None:
        return
    if isinstance(device, int):
        _C._set_device(device)
        return
    try:
        d = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"Invalid device string {device!r}: {e}") from None
    if d.type != "tpu":
        raise ValueError(f"Invalid device string {str(device)!r}: expected a tpu device ('tpu', 'tpu:N' or an index)")
    _C._set_device(current_device() if d.index is None else d.index)


class device:
    """Context manager that makes ``device`` the current tpu device."""

    def __init__(self, device: _device_t):
        self.idx = _index(device)
        self.prev = -1

    def __enter__(self):
        self.prev = current_device()
        _C._set_device(self.idx)

    def __exit__(self, *exc):
        _C._set_device(self.prev)
        return False


def synchronize(device: _device_t = None) -> None:
    """Wait for all work queued on ``device``; raises the first kernel error since the last sync."""
    if torch.compiler.is_compiling():
        return torch.accelerator.synchronize(torch.device("tpu", _index(device)))
    _C._synchronize(_C._current_device() if device is None else _index(device))


def _is_in_bad_fork() -> bool:
    return _C._in_bad_fork()


def get_device_name(device: _device_t = None) -> str:
    _index(device)
    return _C._chip_info()["marketing_name"]


@dataclasses.dataclass(frozen=True)
class _TpuDeviceProperties:
    name: str
    chip: str
    total_memory: int
    hbm_bytes: int
    hbm_bandwidth_gbps: float
    tensorcores: int
    mxu_count: int
    mxu_shape: tuple
    peak_bf16_tflops: float
    chips_per_host: int
    host_topology: tuple
    slice_topology: str
    isa_path: str


def get_device_properties(device: _device_t = None) -> _TpuDeviceProperties:
    idx = _index(device)
    c = _C._chip_info()
    return _TpuDeviceProperties(
        name=c["marketing_name"],
        chip=c["name"],
        total_memory=_C._hbm_stats(idx)["capacity"],
        hbm_bytes=c["hbm_bytes"],
        hbm_bandwidth_gbps=c["hbm_gbytes_per_s"],
        tensorcores=c["tensorcores"],
        mxu_count=c["mxu_count"],
        mxu_shape=tuple(c["mxu_shape"]),
        peak_bf16_tflops=c["peak_bf16_tflops"],
        chips_per_host=c["chips_per_host"],
        host_topology=tuple(c["host_topology"]),
        slice_topology=c["slice_topology"],
        isa_path=_C._isa_info()["path"],
    )


def get_amp_supported_dtype():
    return [torch.bfloat16, torch.float16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def info() -> dict:
    """What this process's tpu is: chip, devices, HBM capacity and the ISA path the kernels use."""
    c = _C._chip_info()
    isa = _C._isa_info()
    return {
        "chip": c["name"],
        "name": c["marketing_name"],
        "devices": device_count(),
        "hbm_capacity_bytes": _C._hbm_stats(0)["capacity"],
        "chip_hbm_bytes": c["hbm_bytes"],
        "isa_path": isa["path"],
        "mxu_path": _C._mxu_path(),
        "threads": isa["threads"],
        "eager_mode": __import__("vtpu").get_eager_mode().name.lower(),
    }


# ------------------------------------------------------------------ random


def _generator(device: _device_t = None) -> torch.Generator:
    return _C._default_generator(_index(device))


class _DefaultGenerators:
    def __getitem__(self, i: int) -> torch.Generator:
        return _generator(i)

    def __len__(self) -> int:
        return device_count()

    def __iter__(self):
        return (_generator(i) for i in range(device_count()))


default_generators = _DefaultGenerators()


def manual_seed(seed: int) -> None:
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for g in default_generators:
        g.manual_seed(int(seed))


def seed() -> None:
    _generator().seed()


def seed_all() -> None:
    for g in default_generators:
        g.seed()


def initial_seed() -> int:
    return _generator().initial_seed()


def get_rng_state(device: _device_t = None) -> torch.Tensor:
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: _device_t = None) -> None:
    _generator(device).set_state(new_state)


def get_offset(device: _device_t = None) -> int:
    """How many random counter values the device's default generator has
    handed out since its seed was set: with the seed, where the next draw
    starts (the generator is counter-based, as CUDA's Philox)."""
    return _generator(device).get_offset()


def set_offset(offset: int, device: _device_t = None) -> None:
    """Move the device's default generator to counter ``offset``."""
    _generator(device).set_offset(int(offset))


def get_rng_state_all() -> list:
    return [g.get_state() for g in default_generators]


def set_rng_state_all(new_states) -> None:
    for g, s in zip(default_generators, new_states):
        g.set_state(s)


# ------------------------------------------------------------------ streams and events


class Stream:
    """A tpu stream (a ``torch.Stream``). The default stream runs on the
    device's first queue and other streams on queues of their own, so their
    work overlaps. Work of different streams that touches the same memory
    still runs in the order it was issued (vtpu orders it by the allocations
    it reads and writes), so a missing ``wait_stream`` or ``record_stream``
    costs overlap, never a wrong result; events order the rest."""

    def __new__(cls, device: _device_t = None, priority: int = 0) -> torch.Stream:
        return torch.Stream(device=torch.device("tpu", _index(device)), priority=priority)


class Event:
    """A tpu event (a ``torch.Event``): a point in a stream's queue, stamped
    with the time the queue reached it."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> torch.Event:
        return torch.Event(device=torch.device("tpu", current_device()), enable_timing=enable_timing,
                           blocking=blocking, interprocess=interprocess)


def current_stream(device: _device_t = None) -> torch.Stream:
    return torch.accelerator.current_stream(_index(device))


def default_stream(device: _device_t = None) -> torch.Stream:
    idx = _index(device)
    cur = torch.accelerator.current_stream(idx)
    return torch.Stream(stream_id=0, device_index=idx, device_type=cur.device_type)


def set_stream(stream: torch.Stream) -> None:
    torch.accelerator.set_stream(stream)


@contextlib.contextmanager
def stream(stream: Optional[torch.Stream]):
    if stream is None:
        yield
        return
    prev = torch.accelerator.current_stream(stream.device_index)
    torch.accelerator.set_stream(stream)
    try:
        yield
    finally:
        torch.accelerator.set_stream(prev)


# ------------------------------------------------------------------ memory


def memory_stats(device: _device_t = None) -> dict:
    return torch.accelerator.memory_stats(_index(device))


def memory_allocated(device: _device_t = None) -> int:
    return torch.accelerator.memory_allocated(_index(device))


def max_memory_allocated(device: _device_t = None) -> int:
    return torch.accelerator.max_memory_allocated(_index(device))


def memory_reserved(device: _device_t = None) -> int:
    return torch.accelerator.memory_reserved(_index(device))


def max_memory_reserved(device: _device_t = None) -> int:
    return torch.accelerator.max_memory_reserved(_index(device))


def reset_peak_memory_stats(device: _device_t = None) -> None:
    torch.accelerator.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device: _device_t = None) -> None:
    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def empty_cache() -> None:
    """Release cached, unused device memory. Live tensors stay valid."""
    torch.accelerator.empty_cache()


def mem_get_info(device: _device_t = None) -> tuple:
    """(free, total) bytes of the device's HBM."""
    return torch.accelerator.get_memory_info(_index(device))


# ------------------------------------------------------------------ compile cache


def _get_cache_stats() -> dict:
    """Graph mode's compile cache: requests, hits (per tier), per-entry read
    counts and compile times (see vtpu.compile_cache.stats)."""
    from . import compile_cache

    return compile_cache.stats()


def _clear_cache() -> None:
    """Empties the compile cache of this process and of this host."""
    from . import compile_cache

    compile_cache.clear()


# ------------------------------------------------------------------ distributed

from .distributed.topology import topology_aware_mesh  # noqa: E402,F401  (torch.tpu's public name)
