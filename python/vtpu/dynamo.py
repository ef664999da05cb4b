"""The "tpu" DeviceInterface of torch._dynamo (what torch.compile and its
tools ask a device: current device, count, streams, properties).

torch._dynamo ships a placeholder "tpu" interface (for another TPU stack)
whose current_device() is always 0. vtpu replaces it with its own as soon as
torch._dynamo.device_interface is imported, without importing torch._dynamo
itself (a second and a half) when the process never compiles. The same
import hook routes Inductor's graphs on "tpu" tensors to the "tpu" backend
(compiler.route_inductor) once torch._inductor.compile_fx is imported.
"""

import importlib.abc
import importlib.machinery
import sys

import torch

_MODULE = "torch._dynamo.device_interface"
_QUANTIZED = (torch.qint8, torch.quint8, torch.qint32, torch.quint4x2, torch.quint2x4)


def _make_interface(di):
    from . import tpu

    class TpuInterface(di.DeviceInterface):
        """vtpu's devices, streams and properties for torch._dynamo."""

        device = tpu.device
        Event = torch.Event
        Stream = torch.Stream

        class Worker:
            @staticmethod
            def set_device(device: int) -> None:
                di.caching_worker_current_devices["tpu"] = device

            @staticmethod
            def current_device() -> int:
                return di.caching_worker_current_devices.get("tpu", tpu.current_device())

            @staticmethod
            def get_device_properties(device=None):
                if device is None:
                    device = TpuInterface.Worker.current_device()
                return tpu.get_device_properties(device)

        current_device = staticmethod(tpu.current_device)
        set_device = staticmethod(tpu.set_device)
        device_count = staticmethod(tpu.device_count)
        stream = staticmethod(tpu.stream)
        current_stream = staticmethod(tpu.current_stream)
        set_stream = staticmethod(tpu.set_stream)
        synchronize = staticmethod(tpu.synchronize)
        get_device_properties = staticmethod(tpu.get_device_properties)
        memory_allocated = staticmethod(tpu.memory_allocated)

        @staticmethod
        def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
            tpu.set_stream(torch.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type))

        @staticmethod
        def get_raw_stream(device_idx: int) -> int:
            return tpu.current_stream(device_idx).stream_id

        @staticmethod
        def exchange_device(device: int) -> int:
            prev = tpu.current_device()
            if device >= 0 and device != prev:
                tpu.set_device(device)
            return prev

        @staticmethod
        def maybe_exchange_device(device: int) -> int:
            return TpuInterface.exchange_device(device)

        @staticmethod
        def is_available() -> bool:
            return tpu.is_available()

        @staticmethod
        def is_bf16_supported(including_emulation: bool = False) -> bool:
            return True

        @classmethod
        def is_dtype_supported(cls, dtype: torch.dtype, including_emulation: bool = False) -> bool:
            return dtype not in _QUANTIZED  # every other dtype computes, natively or through the fallback

        @staticmethod
        def get_compute_capability(device=None) -> str:
            return tpu.get_device_properties(device).chip

        @staticmethod
        def is_triton_capable(device=None) -> bool:
            return False

    return TpuInterface


def _install(module) -> None:
    """Register vtpu's interface in an imported torch._dynamo.device_interface:
    after PyTorch's own registrations, which would otherwise replace it."""
    original = module.init_device_reg

    def init_device_reg() -> None:
        original()
        iface = _make_interface(module)
        module.register_interface_for_device("tpu", iface)
        for i in range(iface.device_count()):
            module.register_interface_for_device(f"tpu:{i}", iface)

    module.init_device_reg = init_device_reg
    if module._device_initialized:
        init_device_reg()


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs an installer on a module once it has been executed (each module
    of _INSTALLERS, the first time it is imported)."""

    def find_spec(self, name, path, target=None):
        if name not in _INSTALLERS or name in _installed:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_install(module):
            exec_module(module)
            _run_installer(name, module)

        spec.loader.exec_module = exec_then_install
        return spec


def _route_inductor(module) -> None:
    from .compiler import route_inductor

    route_inductor(module)


_INSTALLERS = {_MODULE: _install, "torch._inductor.compile_fx": _route_inductor}
_installed = set()


def _run_installer(name, module) -> None:
    """name's installer on its module, once; the finder goes when all ran."""
    _installed.add(name)
    _INSTALLERS[name](module)
    if _installed.issuperset(_INSTALLERS):
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _AfterImport)]


def register() -> None:
    """The "tpu" device interface for Dynamo, and Inductor's graphs on "tpu"
    tensors routed to the "tpu" backend: now for modules already imported,
    else when they are."""
    for name in _INSTALLERS:
        if name in sys.modules and name not in _installed:
            _run_installer(name, sys.modules[name])
    if not _installed.issuperset(_INSTALLERS) and not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())
