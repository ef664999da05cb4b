"""Numerical parity on the tpu device: where does TPU matmul precision
change a model's numbers? ``compare`` runs the model on the CPU in float64
and on "tpu" at a given precision and reports, per module, the largest
absolute and relative error of its outputs."""

import copy
import dataclasses
from typing import Any, List

import torch

from .precision import Precision, _parse, precision as _precision_block


@dataclasses.dataclass
class ModuleError:
    name: str
    kind: str
    shape: tuple
    max_abs: float
    max_rel: float


class ParityReport(list):
    """A list of ModuleError in forward order, printable as a table."""

    precision: Precision

    def worst(self) -> ModuleError:
        return max(self, key=lambda e: e.max_rel)

    def __str__(self) -> str:
        rows = [f"{'module':40s} {'type':18s} {'shape':>18s} {'max abs err':>12s} {'max rel err':>12s}"]
        for e in self:
            rows.append(f"{e.name or '(model)':40.40s} {e.kind:18.18s} {str(list(e.shape)):>18.18s} "
                        f"{e.max_abs:12.3e} {e.max_rel:12.3e}")
        return "\n".join(rows)


def _tensors(out: Any) -> List[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _tensors(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in _tensors(o)]
    return []


def _capture(model: torch.nn.Module, inputs, convert):
    """Run model(*inputs) and collect each module's floating outputs in forward order."""
    seen = []

    def hook(name):
        def fn(module, args, out):
            seen.append((name, type(module).__name__,
                         [convert(t.detach()) for t in _tensors(out) if t.is_floating_point()]))
        return fn

    handles = [m.register_forward_hook(hook(n)) for n, m in model.named_modules()]
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        for h in handles:
            h.remove()
    return seen


def _worse(a: float, b: float) -> float:
    """The larger error, NaN counting as the worst."""
    return b if (b != b or b > a) and a == a else a


def compare(model: torch.nn.Module, inputs, precision="default", device="tpu") -> ParityReport:
    """Per-module output error of ``model`` on ``device`` at ``precision`` against CPU float64.

    ``inputs`` is a tensor or a tuple of positional inputs. The model is copied;
    the original is left untouched. The relative error of an output is
    max|tpu - ref| / max|ref| (scale-aware, so outputs near zero do not
    dominate); a module's row takes the worst of its outputs.
    """
    p = _parse(precision)
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    ref_model = copy.deepcopy(model).to("cpu", torch.float64).eval()
    dev_model = copy.deepcopy(model).to(device).eval()
    ref_in = tuple(t.to("cpu", torch.float64) if isinstance(t, torch.Tensor) and t.is_floating_point() else t
                   for t in inputs)
    dev_in = tuple(t.to(device) if isinstance(t, torch.Tensor) else t for t in inputs)
    ref = _capture(ref_model, ref_in, lambda t: t)
    with _precision_block(p):
        got = _capture(dev_model, dev_in, lambda t: t.to("cpu", torch.float64))
    report = ParityReport()
    report.precision = p
    for (name, kind, r_outs), (_, _, g_outs) in zip(ref, got):
        if not r_outs:
            continue
        max_abs = max_rel = 0.0
        for r, g in zip(r_outs, g_outs):
            if r.numel() == 0:
                continue
            err = (g - r).abs().max().item()
            scale = r.abs().max().item()
            max_abs = _worse(max_abs, err)
            max_rel = _worse(max_rel, err / scale if scale > 0 else err)
        report.append(ModuleError(name, kind, tuple(r_outs[0].shape), max_abs, max_rel))
    return report
