"""pytest plugin for conformance/run.py: sets the float32 matmul precision
a user porting from CPU or CUDA asks for (VTPU_MATMUL_PRECISION, "highest":
PyTorch's tests hold float32 matmuls to float32 tolerances), puts back the
few testing names older test files import from their old places, and keeps
VTPU_SAMPLE_PERCENT percent of the collected tests, chosen by a hash of each
test's id with its device part removed, so the CPU and "tpu" runs of a file
sample the same tests."""

import hashlib
import os
import re


def _key(nodeid):
    nodeid = nodeid.split("::", 1)[-1]
    return re.sub(r"(TPU|CPU|PRIVATEUSE1)(?=::)|_(tpu|cpu|privateuse1)(?=_|$|\[)", "", nodeid)


def pytest_configure(config):
    import torch

    precision = os.environ.get("VTPU_MATMUL_PRECISION")
    if precision:
        torch.set_float32_matmul_precision(precision)
    # Test files older than the installed torch import names from where they
    # used to live: binary_ufuncs now holds the Python references too, and
    # the skip / xfail decorators moved to common_device_type.
    import torch.testing._internal.common_device_type as cdt
    import torch.testing._internal.common_methods_invocations as cmi

    if not hasattr(cmi, "binary_ufuncs_and_refs"):
        cmi.binary_ufuncs_and_refs = cmi.binary_ufuncs
    for name in ("skip", "xfail"):
        if not hasattr(cmi, name):
            setattr(cmi, name, getattr(cdt, name))
    if not hasattr(cmi, "skipOps"):  # was skipOps(class name, test name, specs); both now come from the test
        cmi.skipOps = lambda *args: cdt.skipOps(args[-1])


def pytest_collection_modifyitems(config, items):
    pct = int(os.environ.get("VTPU_SAMPLE_PERCENT", "100"))
    if pct >= 100:
        return
    keep, drop = [], []
    for it in items:
        h = int(hashlib.md5(_key(it.nodeid).encode()).hexdigest()[:8], 16)
        (keep if h % 100 < pct else drop).append(it)
    items[:] = keep
    config.hook.pytest_deselected(items=drop)
