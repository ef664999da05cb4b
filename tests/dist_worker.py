"""One rank of a tpu_dist test job (tests/test_dist.py starts N of them).

Usage: python dist_worker.py <scenario>, with MASTER_ADDR, MASTER_PORT,
RANK and WORLD_SIZE set as torchrun sets them. A scenario asserts against
CPU PyTorch; its last stdout line is a JSON result for the test to compare.
"""

import datetime
import faulthandler
import json
import os
import socket
import sys

import torch
import torch.distributed as dist

import vtpu  # noqa: F401  (registers tpu_dist; torch's autoload does too)

# A rank that dies on a signal (an abort at exit included) prints the Python
# stack of every thread, so a failing job says where each thread was.
faulthandler.enable(all_threads=True)


def inputs(rank, shape, dtype=torch.float32):
    """Rank r's input, reproducible on every rank."""
    g = torch.Generator().manual_seed(1000 + rank)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(-50, 50, shape, generator=g, dtype=dtype)


def close(got, want, what):
    got = got.cpu()
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, want {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)}, want {tuple(want.shape)}"
    # Sums of n values in another order differ by a few ulps (gloo adds in its own order).
    tol = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float64: 1e-12}.get(got.dtype, 0)
    torch.testing.assert_close(got, want, rtol=tol, atol=tol, msg=lambda m: f"{what}: {m}")


def scenario_collectives(r, n):
    dev = torch.device("tpu")
    every = [inputs(k, (5, 7)) for k in range(n)]
    stacked = torch.stack(every)
    x = every[r].to(dev)
    # reductions, in place
    for op, want in [
        (dist.ReduceOp.SUM, stacked.sum(0)),
        (dist.ReduceOp.AVG, stacked.sum(0) / n),
        (dist.ReduceOp.MIN, stacked.min(0).values),
        (dist.ReduceOp.MAX, stacked.max(0).values),
        (dist.ReduceOp.PRODUCT, stacked.prod(0)),
        (dist._make_nccl_premul_sum(0.25), (stacked * 0.25).sum(0)),
    ]:
        y = x.clone()
        dist.all_reduce(y, op=op)
        close(y, want, f"all_reduce {op}")
    for dtype in (torch.bfloat16, torch.int64, torch.float64):
        ev = [inputs(k, (33,), dtype) for k in range(n)]
        y = ev[r].to(dev)
        dist.all_reduce(y)
        close(y, torch.stack(ev).sum(0).to(dtype), f"all_reduce {dtype}")
    # a non-contiguous tensor: staged through a contiguous copy
    y = x.clone().t()
    dist.all_reduce(y)
    close(y, stacked.sum(0).t(), "all_reduce of a transposed view")
    # the queue orders it: computed just before, used just after, no sync
    y = x * 2
    dist.all_reduce(y)
    z = y + 1
    close(z, stacked.sum(0) * 2 + 1, "all_reduce between device ops")
    # async work and its future
    y = x.clone()
    w = dist.all_reduce(y, async_op=True)
    fut = w.get_future().then(lambda f: f.value()[0] * 3)
    w.wait()
    close(fut.wait(), stacked.sum(0) * 3, "future of all_reduce")
    # broadcast of a non-contiguous view from the last rank
    b = every[r].to(dev).t()
    dist.broadcast(b, src=n - 1)
    close(b, every[n - 1].t(), "broadcast")
    # reduce to rank 0
    y = x.clone()
    dist.reduce(y, dst=0, op=dist.ReduceOp.SUM)
    if r == 0:
        close(y, stacked.sum(0), "reduce")
    # gathers
    outs = [torch.empty(5, 7, device=dev) for _ in range(n)]
    dist.all_gather(outs, x)
    for k in range(n):
        close(outs[k], every[k], f"all_gather[{k}]")
    flat = torch.empty(n * 5, 7, device=dev)
    dist.all_gather_into_tensor(flat, x)
    close(flat, torch.cat(every), "all_gather_into_tensor")
    g = [torch.empty(5, 7, device=dev) for _ in range(n)] if r == 1 else None
    dist.gather(x, g, dst=1)
    if r == 1:
        for k in range(n):
            close(g[k], every[k], f"gather[{k}]")
    s = torch.empty(5, 7, device=dev)
    dist.scatter(s, [e.to(dev) * 10 for e in every] if r == 0 else None, src=0)
    close(s, every[r] * 10, "scatter")
    # reduce-scatters
    big = [inputs(k, (n * 4, 3)) for k in range(n)]
    out = torch.empty(4, 3, device=dev)
    dist.reduce_scatter_tensor(out, big[r].to(dev))
    close(out, torch.stack(big).sum(0)[4 * r : 4 * r + 4], "reduce_scatter_tensor")
    dist.reduce_scatter_tensor(out, big[r].to(dev), op=dist.ReduceOp.AVG)
    close(out, (torch.stack(big).sum(0) / n)[4 * r : 4 * r + 4], "reduce_scatter_tensor AVG")
    dist.reduce_scatter(out, [c.to(dev) for c in big[r].chunk(n)])
    close(out, torch.stack(big).sum(0)[4 * r : 4 * r + 4], "reduce_scatter")
    # all_to_all_single with uneven splits: rank r sends (k + r + 1) rows to rank k
    send = [(k + r + 1) for k in range(n)]
    recv = [(r + k + 1) for k in range(n)]
    src = inputs(r, (sum(send), 2)).to(dev)
    dst = torch.empty(sum(recv), 2, device=dev)
    dist.all_to_all_single(dst, src, output_split_sizes=recv, input_split_sizes=send)
    want = []
    for k in range(n):
        theirs = inputs(k, (sum((j + k + 1) for j in range(n)), 2))
        off = sum((j + k + 1) for j in range(r))
        want.append(theirs[off : off + r + k + 1])
    close(dst, torch.cat(want), "all_to_all_single")
    # point to point: a ring
    nxt, prv = (r + 1) % n, (r - 1) % n
    got = torch.empty(5, 7, device=dev)
    if r % 2 == 0:
        dist.send(x, nxt)
        dist.recv(got, prv)
    else:
        dist.recv(got, prv)
        dist.send(x, nxt)
    close(got, every[prv], "send/recv")
    # coalesced all_gather / reduce_scatter (what FSDP2 issues)
    with dist._coalescing_manager(async_ops=True) as cm:
        a1 = torch.empty(n * 5, 7, device=dev)
        a2 = torch.empty(n * 3, device=dev)
        dist.all_gather_into_tensor(a1, x)
        dist.all_gather_into_tensor(a2, torch.full((3,), float(r), device=dev))
    cm.wait()
    close(a1, torch.cat(every), "coalesced all_gather 1")
    close(a2, torch.arange(n, dtype=torch.float32).repeat_interleave(3), "coalesced all_gather 2")
    # functional collectives (what traced code and DTensor issue)
    import torch.distributed._functional_collectives as fc

    close(fc.all_reduce(x, "sum", dist.group.WORLD), stacked.sum(0), "functional all_reduce")
    close(fc.all_gather_tensor(x, 0, dist.group.WORLD), torch.cat(every), "functional all_gather")
    y = torch.ops._c10d_functional.all_reduce(x, "avg", dist.group.WORLD.group_name)
    close(torch.ops._c10d_functional.wait_tensor(y), stacked.sum(0) / n, "_c10d_functional.all_reduce")
    # a subgroup of the even ranks
    even = dist.new_group([k for k in range(n) if k % 2 == 0])
    if r % 2 == 0:
        y = x.clone()
        dist.all_reduce(y, group=even)
        close(y, stacked[::2].sum(0), "all_reduce in a subgroup")
    dist.barrier()
    backend = dist.group.WORLD._get_backend(dev)
    return {"ok": True, "shared_memory": backend.uses_shared_memory, "host": socket.gethostname()}


def gpt_run(tokens, wrap, steps=10):
    """Train the GPT-style model for `steps` SGD steps on `tokens`; the loss curve."""
    from vtpu.models import GPT, GPTConfig

    # fp32-accurate matmuls (6 bf16 passes): at one pass, a sum that differs
    # in its last fp32 bit can round a matmul input to another bf16 value
    torch.tpu.set_float32_matmul_precision("highest")
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab=256, d_model=64, n_heads=4, n_kv_heads=2, max_seq=64)).to("tpu")
    model = wrap(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    x, y = tokens[:, :-1].to("tpu"), tokens[:, 1:].to("tpu")
    losses = []
    for _ in range(steps):
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu()
    return torch.stack(losses).cpu(), params


def scenario_ddp(r, n):
    from torch.nn.parallel import DistributedDataParallel as DDP

    tokens = torch.randint(0, 256, (8, 33), generator=torch.Generator().manual_seed(7))
    rows = tokens.shape[0] // n
    local, params = gpt_run(tokens[r * rows : (r + 1) * rows], lambda m: DDP(m))
    # the global loss is the mean of the ranks' losses over equal shards
    curve = local.to("tpu")
    dist.all_reduce(curve, op=dist.ReduceOp.AVG)
    out = {"ddp": curve.cpu().tolist()}
    if r == 0:
        ref, ref_params = gpt_run(tokens, lambda m: m)
        out["single"] = ref.tolist()
        out["param_diff"] = (params - ref_params).abs().max().item()
        out["param_scale"] = ref_params.abs().max().item()
    return out


def small_gpt():
    from vtpu.models import GPT, GPTConfig

    torch.manual_seed(0)
    return GPT(GPTConfig(vocab=256, d_model=64, n_heads=4, n_kv_heads=2, max_seq=64, n_layers=2))


def train(model, tokens, steps, lr=0.3):
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = tokens[:, :-1].to("tpu"), tokens[:, 1:].to("tpu")
    losses = []
    for _ in range(steps):
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return torch.stack(losses)


def full_params(model):
    from torch.distributed.tensor import DTensor

    out = []
    for p in model.parameters():
        p = p.full_tensor() if isinstance(p, DTensor) else p
        out.append(p.detach().float().reshape(-1).cpu())
    return torch.cat(out)


def scenario_fsdp(r, n):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    torch.tpu.set_float32_matmul_precision("highest")
    mesh = init_device_mesh("tpu", (n,))
    tokens = torch.randint(0, 256, (8, 33), generator=torch.Generator().manual_seed(7))
    rows = tokens.shape[0] // n
    shard = tokens[r * rows : (r + 1) * rows]
    out = {}
    for name, mp in [("fp32", None), ("bf16", MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                                                  reduce_dtype=torch.float32))]:
        model = small_gpt().to("tpu")
        kw = {"mesh": mesh} if mp is None else {"mesh": mesh, "mp_policy": mp}
        for block in model.blocks:
            fully_shard(block, **kw)
        fully_shard(model, **kw)
        curve = train(model, shard, 5)
        dist.all_reduce(curve, op=dist.ReduceOp.AVG)
        out[name] = curve.cpu().tolist()
        out[name + "_params"] = full_params(model)
    if r == 0:
        ref = small_gpt().to("tpu")
        out["single"] = train(ref, tokens, 5).cpu().tolist()
        ref_params = full_params(ref)
        out["fp32_param_diff"] = (out["fp32_params"] - ref_params).abs().max().item()
        out["bf16_param_diff"] = (out["bf16_params"] - ref_params).abs().max().item()
        out["param_scale"] = ref_params.abs().max().item()
    del out["fp32_params"], out["bf16_params"]
    return out


def scenario_tensor_parallel(r, n):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    torch.tpu.set_float32_matmul_precision("highest")
    mesh = init_device_mesh("tpu", (n,))
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(16, 8 * n), torch.nn.GELU(), torch.nn.Linear(8 * n, 16))
    tp = parallelize_module(
        __import__("copy").deepcopy(ref).to("tpu"), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()}
    )
    x = torch.randn(5, 16, generator=torch.Generator().manual_seed(3))
    out = tp(x.to("tpu"))
    out.square().sum().backward()
    want = ref(x)
    want.square().sum().backward()
    close(out, want.detach(), "tensor parallel forward")
    for (name, p), (_, q) in zip(tp.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p.grad.full_tensor().cpu(), q.grad, rtol=1e-5, atol=1e-5,
                                   msg=lambda m: f"grad of {name}: {m}")
    return {"ok": True, "placements": [str(p.placements) for p in tp.parameters()]}


def scenario_checkpoint(r, n):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("tpu", (n,))
    model = small_gpt().to("tpu")
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    path = os.environ["CKPT_DIR"]
    expected = full_params(small_gpt())
    if os.environ["CKPT_MODE"] == "save":
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.5)  # what the loader must see is not its own init
        dcp.save(get_model_state_dict(model), checkpoint_id=path)
        return {"saved": True}
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    sd = get_model_state_dict(model)
    dcp.load(sd, checkpoint_id=path)
    set_model_state_dict(model, sd)
    got = full_params(model)
    return {"max_diff": (got - (expected + 0.5)).abs().max().item()}


def scenario_mesh(r, n):
    from torch.distributed.device_mesh import DeviceMesh

    from vtpu.distributed import topology

    assert os.environ.get("VTPU_TOPOLOGY"), "the launcher sets VTPU_TOPOLOGY"
    ranks = torch.tpu.topology_aware_mesh((2, n // 2))
    # identical on every rank
    every = [torch.empty_like(ranks, device="tpu") for _ in range(n)]
    dist.all_gather(every, ranks.to("tpu"))
    assert all(torch.equal(e.cpu(), ranks) for e in every)
    topo, _ = topology.current(n)
    for row in ranks.tolist():
        assert all(topo.linked(a, b) for a, b in zip(row, row[1:])), (ranks, topo)
    mesh = DeviceMesh("tpu", ranks, mesh_dim_names=("dp", "tp"))
    y = torch.full((3,), float(r), device="tpu")
    dist.all_reduce(y, group=mesh.get_group("tp"))
    row = next(row for row in ranks.tolist() if r in row)
    close(y, torch.full((3,), float(sum(row))), "all_reduce over the mesh's last axis")
    return {"ok": True, "topology": repr(topo), "mesh": ranks.tolist()}


def scenario_errors(r, n):
    dev = torch.device("tpu")
    result = {}
    # a CPU tensor is refused: by torch when the group maps no backend to
    # cpu, by tpu_dist (naming the backend to use) when it is given cpu
    for key, group in [("cpu", None), ("cpu_mapped", dist.new_group(backend="cpu:tpu_dist,tpu:tpu_dist"))]:
        try:
            dist.all_reduce(torch.ones(3), group=group)
            result[key] = "no error"
        except (RuntimeError, ValueError) as e:
            result[key] = str(e)
    # with gloo for cpu, the same group takes both
    both = dist.new_group(backend="cpu:gloo,tpu:tpu_dist")
    c, t = torch.full((3,), float(r)), torch.full((3,), float(r), device=dev)
    dist.all_reduce(c, group=both)
    dist.all_reduce(t, group=both)
    result["both"] = [c.tolist(), t.cpu().tolist()]
    # mismatched shapes: every rank raises at its next read of the output
    # (in Debug mode the collective itself raises)
    def reduce_and_read(y):
        try:
            dist.all_reduce(y)
            y.cpu()
            return "no error"
        except (RuntimeError, ZeroDivisionError) as e:
            return str(e)

    result["shape"] = reduce_and_read(torch.ones(4 + r, device=dev))
    # mismatched dtypes
    result["dtype"] = reduce_and_read(torch.ones(4, device=dev, dtype=torch.float32 if r == 0 else torch.float64))
    # an input a failed op poisoned on the last rank: no rank exchanges data
    try:
        a = torch.full((4,), 6, dtype=torch.int32, device=dev)
        y = a // (0 if r == n - 1 else 1)
        result["poison"] = reduce_and_read(y)
    except (RuntimeError, ZeroDivisionError) as e:  # Debug mode: the division raises at once, nothing is poisoned
        result["poison"] = str(e)
        dist.all_reduce(torch.ones(4, dtype=torch.int32, device=dev))  # the call the other ranks make
    try:
        torch.tpu.synchronize()
        result["poison_sync"] = ""
    except (RuntimeError, ZeroDivisionError) as e:
        result["poison_sync"] = str(e)
    # and the group still works
    y = torch.full((4,), float(r + 1), device=dev)
    dist.all_reduce(y)
    result["after"] = y.cpu().tolist()
    return result


def scenario_divergent_read(r, n):
    """Rank 0 reads a value on the host while its queue holds a collective
    that rank 1 only issues after rank 0's read: the documented deadlock,
    which the group's timeout turns into an error naming the collective."""
    store = dist.distributed_c10d._get_default_store()
    y = torch.ones(4, device="tpu")
    out = {}
    if r == 0:
        try:
            dist.all_reduce(y)  # in Debug mode the call itself waits, and raises
            out["read"] = y.sum().item()
        except RuntimeError as e:
            out["error"] = str(e)
        store.set("rank0_read", "done")  # what rank 1 waits for
    else:
        store.wait(["rank0_read"], datetime.timedelta(seconds=120))
        try:
            dist.all_reduce(y)
            y.cpu()
        except RuntimeError as e:
            out["error"] = str(e)
    return out


def scenario_dead_peer(r, n):
    dev = torch.device("tpu")
    y = torch.ones(4, device=dev)
    dist.all_reduce(y)
    y.cpu()
    if r == n - 1:
        os._exit(0)  # a rank that dies before the next collective
    try:
        dist.all_reduce(y)  # in Debug mode this raises
        y.cpu()
        return {"error": "no error"}
    except RuntimeError as e:
        return {"error": str(e)}


def scenario_comm_queue(r, n):
    """Collectives run on the device's communication queue: one whose inputs
    are ready completes while the default stream is held, and one that
    reads what the held stream has yet to write waits for it."""
    import time

    import vtpu
    from vtpu import _C

    dev = torch.device("tpu")
    x = torch.full((1 << 12,), float(r + 1), device=dev)
    torch.tpu.synchronize()
    out = {}
    with vtpu.eager_mode("strict"):  # a held queue needs ops that return before they run
        _C._debug_gate_enqueue(0, 60_000)  # the default stream is held
        w = dist.all_reduce(x, async_op=True)
        deadline = time.monotonic() + 50  # a liveness bound, not a timing claim
        while not w.is_completed() and time.monotonic() < deadline:
            time.sleep(0.001)
        out["ran_while_held"] = w.is_completed()
        out["default_stream_held"] = not torch.tpu.default_stream().query()
        z = x * 3  # held; only an input (the all-gather reads it and writes g)
        g = torch.empty(n * x.numel(), device=dev)
        w3 = dist.all_gather_into_tensor(g, z, async_op=True)
        y = x * 2  # held; read and written in place
        w2 = dist.all_reduce(y, async_op=True)
        out["waits_for_its_input"] = not w3.is_completed() and not w2.is_completed()
        # both ranks have looked before either opens its gate; on the host:
        # a barrier is a collective, queued behind the two that are held
        store = dist.distributed_c10d._get_default_store()
        store.add("comm_queue_looked", 1)
        while store.add("comm_queue_looked", 0) < n and time.monotonic() < deadline:
            time.sleep(0.001)
        _C._debug_gate_open()
        w2.wait()
        w3.wait()
        total = n * (n + 1) / 2  # x after the first all-reduce, on every rank
        out["gathered"] = torch.equal(g.cpu(), torch.full((n * x.numel(),), 3.0 * total))
    out["x"] = x[0].item() == total and bool((x == total).all())
    out["y"] = y[0].item() == 2 * n * total and bool((y == 2 * n * total).all())
    return out


def scenario_fsdp_trace(r, n):
    """FSDP2's prefetch on its own streams: where each kind of work ran."""
    import vtpu
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("tpu", (n,))
    tokens = torch.randint(0, 256, (8, 33), generator=torch.Generator().manual_seed(7))
    model = small_gpt().to("tpu")
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    train(model, tokens[r * 4:(r + 1) * 4], 1)  # warm up
    with vtpu.trace() as t:
        train(model, tokens[r * 4:(r + 1) * 4], 1)
    queues = {}
    for e in t.events:
        kind = "collective" if e["name"].startswith("tpu_dist") else "other"
        queues.setdefault(kind, set()).add(e["queue"])
    comm = [e for e in t.events if e["queue"] == 1]
    compute = [e for e in t.events if e["queue"] == 0]
    busy = sum(e["end_ns"] - e["start_ns"] for e in comm)
    overlap = 0  # comm time during which the default queue was also running
    for c in comm:
        for e in compute:
            overlap += max(0, min(c["end_ns"], e["end_ns"]) - max(c["start_ns"], e["start_ns"]))
    return {"queues": {k: sorted(v) for k, v in queues.items()},
            "names": sorted({e["name"] for e in comm}),
            "overlap_fraction": overlap / busy if busy else 0.0}


def main():
    scenario = sys.argv[1]
    timeout = datetime.timedelta(seconds=float(os.environ.get("DIST_TIMEOUT", "60")))
    dist.init_process_group(os.environ.get("DIST_BACKEND") or None, timeout=timeout)
    r, n = dist.get_rank(), dist.get_world_size()
    out = globals()[f"scenario_{scenario}"](r, n)
    torch.tpu.synchronize()
    dist.destroy_process_group()
    # one write: ranks that share a stdout (torchrun) never interleave within a line
    sys.stdout.flush()
    os.write(1, (json.dumps(out) + "\n").encode())


if __name__ == "__main__":
    main()
