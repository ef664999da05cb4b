"""Every op that docs/op_coverage.md lists as native runs natively and
matches CPU for each OpInfo sample, forward and gradient, in float32 and
bfloat16, by the rule and the per-op tolerances tests/opinfo_harness.py
states. An op that regresses to the CPU fallback, or to different numbers,
fails here."""

import os
import re

import pytest
import torch

import opinfo_harness as h

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "op_coverage.md")


def native_in_doc():
    names = set()
    with open(DOC) as f:
        for line in f:
            m = re.match(r"\| ([^ |]+) \| native \|", line)
            if m:
                names.add(m.group(1))
    return names


NATIVE = native_in_doc()
OPS = [op for op in h.comparable_ops() if h.full_name(op) in NATIVE]


def test_doc_lists_native_ops():
    assert len(NATIVE) >= 50
    assert {h.full_name(op) for op in OPS} == NATIVE  # every listed op is still in op_db


@pytest.mark.parametrize("dtype", h.DTYPES, ids=str)
@pytest.mark.parametrize("op", OPS, ids=h.full_name)
def test_native_op_matches_cpu(op, dtype):
    if dtype not in op.supported_dtypes("cpu"):
        pytest.skip(f"CPU has no {dtype} for {h.full_name(op)}")
    r = h.run_op(op, dtype)
    assert r.fallbacks == 0, r.failure
    assert r.failed == 0, r.failure


def test_comparison_rejects_what_it_must():
    """The rule itself: off-device results, CPU-equal results and less accurate ones."""
    exact = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    cpu = exact.to(torch.bfloat16)
    h._compare([cpu.to("tpu")], [cpu], 1.6e-2, 1e-5, "same")
    with pytest.raises(AssertionError, match="not tpu"):
        h._compare([cpu], [cpu], 1.6e-2, 1e-5, "host")
    off = torch.tensor([1.0, 2.0, 3.25], dtype=torch.bfloat16)
    with pytest.raises(AssertionError, match="less accurate than CPU at element 2"):
        h._compare([off.to("tpu")], [cpu], 1.6e-2, 1e-5, "worse", lambda: [exact])
    # CPU itself off by 0.25 at element 2: a result no farther from exact passes
    cpu_off = torch.tensor([1.0, 2.0, 2.75], dtype=torch.bfloat16)
    h._compare([off.to("tpu")], [cpu_off], 1.6e-2, 1e-5, "as accurate", lambda: [exact])
