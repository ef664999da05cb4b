"""Run PyTorch's own device tests against "tpu" and tabulate the results.

PyTorch's test files are not in the torch wheel: fetch them first into
conformance/pytorch/ (git-ignored), as docs/conformance.md describes. Then

    .venv/bin/python conformance/run.py                 # every suite, Strict and Debug
    .venv/bin/python conformance/run.py --suite openreg --mode strict
    .venv/bin/python conformance/run.py --mode defer_and_fuse            # DeferAndFuse (TPU_DEFER_AND_FUSE=1)
    .venv/bin/python conformance/run.py --suite view_ops --device cpu   # the CPU baseline
    .venv/bin/python conformance/run.py --suite sparse --mode strict    # opt-in: about an hour

OpenReg's tests (PyTorch's reference out-of-tree backend) are copied into
conformance/build/ with the device renamed ("openreg" -> "tpu",
torch_openreg -> vtpu); the device-generic suites run as they are, their
privateuse1 ("tpu") variants selected with PYTORCH_TESTING_DEVICE_ONLY_FOR.
Each run writes a JUnit XML file to conformance/build/results/ and the
table (passed / failed / errors / skipped per suite, device and mode) is
printed and written to conformance/build/results/table.md.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
UPSTREAM = HERE / "pytorch" / "test"
OPENREG = UPSTREAM / "cpp_extensions" / "open_registration_extension" / "torch_openreg" / "tests"
BUILD = HERE / "build"
RESULTS = BUILD / "results"

# suite -> (file under UPSTREAM, pytest -k expression or None, sample percent)
GENERIC = {
    "view_ops": ("test_view_ops.py", None, 100),
    "indexing": ("test_indexing.py", None, 100),
    "reductions": ("test_reductions.py", None, 100),
    "binary_ufuncs": ("test_binary_ufuncs.py", None, 30),
    "ops": ("test_ops.py", "TestCommon and (noncontiguous or out or variant_consistency)", 100),
    # about an hour per mode on 2 cores (a few gradchecks take minutes each): only when named
    "sparse": ("test_sparse.py", "TestSparse and not TestSparseOneOff and not TestSparseMeta and not TestSparseLegacy",
               100),
}
OPT_IN = {"sparse"}
# OpenReg files that test OpenReg's own internals (its C++ extension, its
# custom ops, IPC, its collective backend): not applicable to another backend.
OPENREG_SKIP = {"test_ipc.py", "test_distributed.py"}


def openreg_copy():
    """OpenReg's tests with the device renamed, in BUILD/openreg."""
    dst = BUILD / "openreg"
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    files = []
    for src in sorted(OPENREG.glob("test_*.py")):
        if src.name in OPENREG_SKIP:
            continue
        text = src.read_text()
        text = re.sub(r"^import torch_openreg.*$", "import vtpu  # noqa: F401", text, flags=re.M)
        text = re.sub(r"^from torch_openreg\b.*$", "import vtpu  # noqa: F401", text, flags=re.M)
        text = text.replace("torch_openreg", "vtpu").replace("openreg", "tpu").replace("OpenReg", "TPU")
        text = text.replace("OPENREG", "TPU")
        (dst / src.name).write_text(text)
        files.append(dst / src.name)
    return files


def junit_counts(path):
    """(passed, failed, errors, skipped) of a JUnit XML file."""
    if not path.exists():
        return None
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    t = f = e = s = 0
    for su in suites:
        t += int(su.get("tests", 0))
        f += int(su.get("failures", 0))
        e += int(su.get("errors", 0))
        s += int(su.get("skipped", 0))
    return t - f - e - s, f, e, s


def run(name, args, env_extra, mode, device, timeout):
    xml = RESULTS / f"{name}-{device}-{mode}.xml"
    xml.unlink(missing_ok=True)
    env = dict(os.environ)
    env.update(env_extra)
    env["TPU_LAUNCH_BLOCKING"] = "1" if mode == "debug" else "0"
    env["TPU_DEFER_AND_FUSE"] = "1" if mode == "defer_and_fuse" else "0"
    env.setdefault("VTPU_NUM_DEVICES", "2")
    env.setdefault("VTPU_MATMUL_PRECISION", "highest")
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(HERE), env.get("PYTHONPATH", "")] if p)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "sample_plugin",
           "--continue-on-collection-errors",
           f"--junitxml={xml}", "-o", "junit_family=xunit1", *args]
    t0 = time.time()
    try:
        subprocess.run(cmd, env=env, timeout=timeout, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       cwd=args[0].parent if isinstance(args[0], Path) else None)
        status = ""
    except subprocess.TimeoutExpired:
        status = "timeout"
    return junit_counts(xml), time.time() - t0, status


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", action="append", choices=["openreg", *GENERIC], help="default: all")
    ap.add_argument("--mode", choices=["strict", "debug", "defer_and_fuse", "both", "all"], default="both",
                    help="both: strict and debug; all: the three eager modes")
    ap.add_argument("--device", choices=["tpu", "cpu"], default="tpu")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per suite and mode")
    ap.add_argument("-k", default=None, help="extra pytest -k filter (debugging)")
    a = ap.parse_args()
    if not UPSTREAM.exists():
        sys.exit(f"{UPSTREAM} is missing: fetch PyTorch's tests first (docs/conformance.md)")
    RESULTS.mkdir(parents=True, exist_ok=True)
    suites = a.suite or ["openreg", *(g for g in GENERIC if g not in OPT_IN)]
    modes = {"both": ["strict", "debug"], "all": ["strict", "debug", "defer_and_fuse"]}.get(a.mode, [a.mode])
    if a.device == "cpu":
        modes = ["cpu"]
    rows = []
    for suite in suites:
        for mode in modes:
            env = {}
            kexpr = None
            if suite == "openreg":
                if a.device == "cpu":
                    continue
                args = openreg_copy()
            else:
                fname, kexpr, pct = GENERIC[suite]
                args = [UPSTREAM / fname]
                env["PYTORCH_TESTING_DEVICE_ONLY_FOR"] = "privateuse1" if a.device == "tpu" else "cpu"
                env["VTPU_SAMPLE_PERCENT"] = str(pct)
            # pytest keeps only the last -k: the suite's filter and --k combine
            k = " and ".join(f"({e})" for e in (kexpr, a.k) if e)
            if k:
                args += ["-k", k]
            counts, secs, status = run(suite, args, env, mode, a.device, a.timeout)
            rows.append((suite, a.device, mode, counts, secs, status))
            p, f, e, s = counts or (0, 0, 0, 0)
            print(f"{suite:14} {a.device:4} {mode:14} passed {p:6} failed {f:5} errors {e:4} skipped {s:5}"
                  f"  {secs:7.0f}s {status}", flush=True)
    lines = ["| suite | device | mode | passed | failed | errors | skipped | pass rate of run |",
             "|---|---|---|---|---|---|---|---|"]
    for suite, dev, mode, counts, secs, status in rows:
        p, f, e, s = counts or (0, 0, 0, 0)
        ran = p + f + e
        rate = f"{100.0 * p / ran:.1f}%" if ran else "-"
        lines.append(f"| {suite} | {dev} | {mode} | {p} | {f} | {e} | {s} | {rate}{' ' + status if status else ''} |")
    out = RESULTS / f"table-{a.device}-{a.mode}.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
