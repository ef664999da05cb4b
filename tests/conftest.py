"""Shared fixtures: every test starts with the tpu device in its default
state (the eager mode the environment asks for: Strict, Debug under
TPU_LAUNCH_BLOCKING=1, DeferAndFuse under TPU_DEFER_AND_FUSE=1; CPU
fallback allowed; queue drained). The suite runs
with two devices (VTPU_NUM_DEVICES, unless set), so cross-device work is
tested everywhere; tensors default to tpu:0. Tests of asynchrony itself
(a gate holding a queue) ask for Strict mode with the `strict` fixture."""

import os
import shutil
import tempfile

os.environ.setdefault("VTPU_NUM_DEVICES", "2")
# graph mode's compile cache: the run's own, empty at its start
_CACHE_DIR = os.environ["VTPU_CACHE_DIR"] = tempfile.mkdtemp(prefix="vtpu-test-cache-")
os.environ.pop("TORCH_TPU_TIER2_COMPILATION_CACHE", None)
os.environ.pop("TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT", None)

import pytest  # noqa: E402
import torch  # noqa: E402

import vtpu



def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_CACHE_DIR, ignore_errors=True)


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


def bits(t):
    """Raw bytes of a CPU tensor, for bit-exact comparison (NaN payloads, -0)."""
    t = torch.empty(t.numel(), dtype=t.dtype).copy_(t.reshape(-1))  # stride 1, whatever t's strides of size-1 dims
    return t.view(torch.uint8) if t.dtype != torch.bool else t.to(torch.uint8)


NUM_DEVICES = int(os.environ["VTPU_NUM_DEVICES"])
def _env_flag(name):
    return os.environ.get(name, "0") not in ("", "0")


# TorchTPU's precedence: TPU_LAUNCH_BLOCKING wins over TPU_DEFER_AND_FUSE.
DEFAULT_MODE = (
    "debug" if _env_flag("TPU_LAUNCH_BLOCKING") else "defer_and_fuse" if _env_flag("TPU_DEFER_AND_FUSE") else "strict"
)


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


def pytest_terminal_summary(terminalreporter):
    """Under DeferAndFuse, say how much of the run was recorded and fused
    (proof that the suite exercised the mode, not just ran beside it)."""
    if DEFAULT_MODE == "defer_and_fuse":
        s = vtpu.fusion_stats()
        terminalreporter.write_line(
            f"DeferAndFuse: {s['nodes']} recorded ops ran in {s['groups']} groups over {s['flushes']} flushes "
            f"({s['fused_nodes']} fused, {s['bytes_elided']} dead bytes never written, "
            f"{s['loop_flushes']} loop flushes)"
        )
