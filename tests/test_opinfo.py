"""Every op that docs/op_coverage.md lists as native and matching CPU runs
natively and matches CPU for each OpInfo sample, forward and gradient, in
float32 and bfloat16, within the tolerance tests/opinfo_harness.py states
for it. An op that regresses to the CPU fallback, or to different numbers,
fails here. (Native ops the table marks FAIL are open bugs, listed there.)"""

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
            if m and "FAIL" not in line:
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
