"""Run a training script on N simulated chips of this host:

    python -m vtpu.distributed.launch --chips 4 [--topology v6e-4] train.py [args...]

is ``torchrun --standalone --nproc-per-node 4 train.py`` with VTPU_TOPOLOGY
set (default ``<VTPU_CHIP>-<chips>``, e.g. ``v6e-4``): one process per chip,
each owning it as ``tpu:0``. Across hosts, run torchrun itself on each host
(docs/distributed.md)."""

import argparse
import os
import sys


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m vtpu.distributed.launch", description=__doc__.split("\n\n")[0])
    p.add_argument("--chips", type=int, required=True, help="processes to start, one chip each")
    p.add_argument("--topology", help="slice name for VTPU_TOPOLOGY, e.g. v6e-8 or v5p-2x2x2")
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    from .topology import parse

    spec = a.topology or os.environ.get("VTPU_TOPOLOGY") or f"{os.environ.get('VTPU_CHIP', 'v6e')}-{a.chips}"
    topo = parse(spec)  # a bad name fails here, before any process starts
    if topo.chips * int(os.environ.get("VTPU_NUM_SLICES", "1")) != a.chips:
        p.error(f"--chips {a.chips} does not fill {spec} ({topo.chips} chips per slice)")
    os.environ["VTPU_TOPOLOGY"] = spec
    from torch.distributed.run import main as torchrun

    torchrun(["--standalone", f"--nproc-per-node={a.chips}", a.script, *a.args])


if __name__ == "__main__":
    sys.exit(main())
