"""vtpu.trace(): a record of the device work a block ran, as a Chrome /
Perfetto trace.

    with vtpu.trace("step.json") as t:
        loss = step()
    print(t.summary())

Every command the device queues ran inside the block is one event: the
user's op (for a DeferAndFuse group, ``fused: aten::mul + aten::add + ...``),
the output shape where the command is an op record, the nodes it ran,
bytes it wrote and its start and end time. The block's work is run to the
end (a synchronisation) before the trace stops. Open the file in
https://ui.perfetto.dev or chrome://tracing.
"""

import contextlib
import json

import torch

from . import _C


_QUEUE_NAMES = {0: "", 1: " collectives"}


def _track(e):
    return e["device"] * _C._max_queues + e["queue"]


def _track_name(e):
    return f"tpu:{e['device']}" + _QUEUE_NAMES.get(e["queue"], f" stream queue {e['queue']}")


class Trace:
    """The events of one ``vtpu.trace()`` block (``events``: list of dicts
    with name, shape, device, queue, nodes, bytes, start_ns, end_ns; queue 0
    runs the default stream, 1 the collectives, the others other streams)."""

    def __init__(self):
        self.events = []

    def groups(self):
        """The events that ran several recorded ops as one fused group."""
        return [e for e in self.events if e["nodes"] > 1]

    def chrome(self):
        """The trace in Chrome's JSON trace-event format (one track per device
        queue, so work that overlaps shows side by side)."""
        t0 = min((e["start_ns"] for e in self.events), default=0)
        evs = [
            {
                "name": e["name"],
                "ph": "X",
                "pid": 0,
                "tid": _track(e),
                "ts": (e["start_ns"] - t0) / 1e3,
                "dur": max(e["end_ns"] - e["start_ns"], 0) / 1e3,
                "args": {"shape": e["shape"], "nodes": e["nodes"], "bytes": e["bytes"]},
            }
            for e in self.events
        ]
        names = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": _track(e), "args": {"name": _track_name(e)}}
                 for e in {_track(e): e for e in self.events}.values()]
        return {"traceEvents": names + evs, "displayTimeUnit": "ms"}

    def save(self, path):
        with open(path, "w") as f:
            json.dump(self.chrome(), f)

    def summary(self, top=15):
        """Time per op name, longest first (a text table)."""
        agg = {}
        for e in self.events:
            key = e["name"]
            t, n = agg.get(key, (0, 0))
            agg[key] = (t + e["end_ns"] - e["start_ns"], n + 1)
        total = sum(t for t, _ in agg.values()) or 1
        rows = sorted(agg.items(), key=lambda kv: -kv[1][0])[:top]
        lines = [f"{'device time':>12} {'share':>6} {'count':>6}  op"]
        for name, (t, n) in rows:
            lines.append(f"{t / 1e6:>10.2f}ms {t / total:>6.1%} {n:>6}  {name}")
        return "\n".join(lines)


@contextlib.contextmanager
def trace(path=None):
    """Record the device work run inside the block; write it to ``path`` as
    a Chrome trace if given. Yields a :class:`Trace` filled when the block ends."""
    t = Trace()
    for d in range(torch.tpu.device_count()):
        torch.tpu.synchronize(d)  # work from before the block is not in it
    _C._trace_start()
    try:
        yield t
    finally:
        try:
            for d in range(torch.tpu.device_count()):
                torch.tpu.synchronize(d)
        finally:
            t.events = list(_C._trace_stop())
        if path is not None:
            t.save(path)
