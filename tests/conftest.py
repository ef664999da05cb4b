"""Shared fixtures: every test starts with the tpu device in its default
state (the eager mode the environment asks for: Strict, or Debug under
TPU_LAUNCH_BLOCKING=1; CPU fallback allowed; queue drained). The suite runs
with two devices (VTPU_NUM_DEVICES, unless set), so cross-device work is
tested everywhere; tensors default to tpu:0. Tests of asynchrony itself
(a gate holding a queue) ask for Strict mode with the `strict` fixture."""

import os

os.environ.setdefault("VTPU_NUM_DEVICES", "2")

import pytest  # noqa: E402
import torch  # noqa: E402

import vtpu

DTYPES = [
    torch.float32,
    torch.bfloat16,
    torch.float16,
    torch.float64,
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.bool,
]


def make(shape, dtype, seed=0, low=-100, high=100):
    """A CPU tensor with varied values (and NaN/inf/-0 for floats when asked)."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=g, dtype=torch.float64) * (high - low) + low).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(max(low, info.min), min(high, info.max) + 1, shape, generator=g, dtype=dtype)


NUM_DEVICES = int(os.environ["VTPU_NUM_DEVICES"])
DEFAULT_MODE = "debug" if os.environ.get("TPU_LAUNCH_BLOCKING", "0") not in ("", "0") else "strict"


@pytest.fixture(autouse=True)
def _clean_device_state():
    vtpu.set_eager_mode(DEFAULT_MODE)
    vtpu.set_cpu_fallback(True)
    yield
    for d in range(torch.tpu.device_count()):
        torch.tpu.synchronize(d)


@pytest.fixture
def strict():
    """Strict mode for this test (it observes asynchrony), whatever the default."""
    with vtpu.eager_mode("strict"):
        yield


@pytest.fixture(params=["strict", "debug"])
def mode(request):
    """Run the test in Strict and in Debug (TPU_LAUNCH_BLOCKING) eager mode."""
    with vtpu.eager_mode(request.param):
        yield request.param
