"""One process of a compile-cache test (tests/test_compile_cache.py starts
them): three training steps of a small model (forward, backward, AdamW
with capturable=True) with the loss and the optimizer step compiled by
backend "tpu", and the same steps in eager "tpu" mode. Its last stdout line
is JSON: both runs' losses, the cache statistics and the cache warnings.

Environment: the cache's own variables (VTPU_CACHE_DIR, ...), WORKER_DTYPE
(default float32), WORKER_BARRIER (a path: compile only once it exists, so
processes started together compile together)."""

import copy
import json
import os
import time
import warnings

import torch
from torch import nn

import vtpu


def steps(model, x, backend=None):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, capturable=True)
    loss_fn, opt_step = (lambda x: model(x).pow(2).mean()), opt.step
    if backend:
        loss_fn, opt_step = torch.compile(loss_fn, backend=backend), torch.compile(opt_step, backend=backend)
    losses = []
    for _ in range(3):
        opt.zero_grad()
        loss = loss_fn(x)
        loss.backward()
        opt_step()
        losses.append(loss.item())
    return losses


def main():
    dtype = getattr(torch, os.environ.get("WORKER_DTYPE", "float32"))
    torch.manual_seed(0)
    # a first layer of 32768 weights: its AdamW update is a group large
    # enough for generated code (runtime/src/graph/codegen.h)
    model = nn.Sequential(nn.Linear(256, 128), nn.GELU(), nn.Linear(128, 4)).to("tpu", dtype)
    x = torch.randn(8, 256).to("tpu", dtype)
    eager = steps(copy.deepcopy(model), x)
    barrier = os.environ.get("WORKER_BARRIER")
    while barrier and not os.path.exists(barrier):
        time.sleep(0.01)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = steps(model, x, backend="tpu")
    stats = vtpu.compile_cache.stats()
    notes = [str(w.message) for w in caught if "vtpu" in str(w.message) and "cache" in str(w.message)]
    print(json.dumps({"eager": eager, "compiled": compiled, "stats": stats, "warnings": notes}))


if __name__ == "__main__":
    main()
