"""tpu_dist across local processes, in one run:
- allreduce of 64 MB (float32) on 2 and 4 processes: tpu tensors through
  tpu_dist against CPU tensors through Gloo in the same process group
  (target: >= Gloo's bandwidth; goal 2x with a shared-memory path);
- a DDP training step of the GPT-style model, 2 processes x 1 core against
  1 process x 1 core, each process with the same per-rank batch (weak
  scaling; target: >= 1.7x the throughput);
- an FSDP2 (fully_shard per block) step of the same model on 2 processes x
  1 core, traced: how much of the collectives' time (on the communication
  queue) overlaps compute on the default stream's queue. Rank 0's trace is
  written to bench/results/fsdp_trace.json (chrome://tracing, Perfetto).

Run: python bench/dist.py [--quick]"""

import json
import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MB = 64


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(n, what, cores=None, extra=()):
    """n ranks of this script's worker; each rank's JSON result."""
    port = free_port()
    procs = []
    for r in range(n):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r), WORLD_SIZE=str(n),
                   LOCAL_RANK=str(r), PYTHONWARNINGS="ignore")
        if cores:
            env.update(VTPU_NUM_THREADS="1", OMP_NUM_THREADS="1", BENCH_CORE=str(cores[r % len(cores)]))
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", what, *extra], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    out = []
    for p in procs:
        text, _ = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise RuntimeError(f"{what} on {n} ranks failed:\n{text[-3000:]}")
        out.append(json.loads(text.strip().splitlines()[-1]))
    return out


def worker_allreduce():
    import torch
    import torch.distributed as dist

    import vtpu  # noqa: F401

    dist.init_process_group("cpu:gloo,tpu:tpu_dist")
    n = dist.get_world_size()
    numel = MB * 2**20 // 4
    cpu = torch.ones(numel)
    tpu = torch.ones(numel, device="tpu")

    def gloo():
        dist.all_reduce(cpu)

    def tpu_dist():
        dist.all_reduce(tpu)
        torch.tpu.synchronize()

    best = {}
    for _ in range(2):  # warm up both
        gloo()
        tpu_dist()
    for k in ("gloo", "tpu_dist"):
        best[k] = float("inf")
    for _ in range(5):  # in turns, so drift hits both alike
        for k, fn in (("gloo", gloo), ("tpu_dist", tpu_dist)):
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - t0)
    assert tpu[0].item() == cpu[0].item()  # the same sums
    dist.destroy_process_group()
    return {k: {"ms": v * 1e3, "algbw_GBs": MB * 2**20 / v / 1e9, "busbw_GBs": 2 * (n - 1) / n * MB * 2**20 / v / 1e9}
            for k, v in best.items()}


def gpt_steps(wrap, steps):
    """A GPT-style training step on this rank, the model wrapped by wrap(model,
    n) after it moved to the device: (step function, ms per step measured
    over `steps` after two warm-up steps)."""
    import torch
    import torch.distributed as dist

    from vtpu.models import GPT, GPTConfig

    cfg = GPTConfig(vocab=4096, d_model=256, n_layers=4, n_heads=8, n_kv_heads=8, max_seq=128)
    torch.manual_seed(0)
    model = wrap(GPT(cfg).to("tpu"), dist.get_world_size())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(1 + dist.get_rank())
    idx = torch.randint(0, cfg.vocab, (8, 129), generator=g).to("tpu")

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(idx[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab), idx[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        return loss

    for _ in range(2):
        step().item()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    loss.item()
    dist.barrier()
    return step, (time.perf_counter() - t0) / steps * 1e3


def worker_ddp(steps):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import vtpu  # noqa: F401

    dist.init_process_group()
    _, ms = gpt_steps(lambda m, n: DDP(m) if n > 1 else m, steps)
    dist.destroy_process_group()
    return {"step_ms": ms}


def worker_fsdp(steps):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import vtpu

    def shard(model, n):
        mesh = init_device_mesh("tpu", (n,))
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        return fully_shard(model, mesh=mesh)

    dist.init_process_group()
    step, ms = gpt_steps(shard, steps)
    path = os.path.join(HERE, "results", "fsdp_trace.json") if dist.get_rank() == 0 else None
    if path:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    with vtpu.trace(path) as t:
        step().item()
    comm = [e for e in t.events if e["queue"] == 1 and e["name"].startswith("tpu_dist")]
    compute = [e for e in t.events if e["queue"] == 0]
    busy = sum(e["end_ns"] - e["start_ns"] for e in comm)
    overlap = sum(max(0, min(c["end_ns"], e["end_ns"]) - max(c["start_ns"], e["start_ns"]))
                  for c in comm for e in compute)  # a queue's commands never overlap each other
    dist.destroy_process_group()
    return {"step_ms": ms, "collectives": len(comm), "comm_ms": busy / 1e6,
            "overlap_fraction": overlap / busy if busy else 0.0}


def main():
    if sys.argv[1:2] == ["--worker"]:
        core = os.environ.get("BENCH_CORE")
        if core is not None:
            os.sched_setaffinity(0, {int(core)})
            import torch

            torch.set_num_threads(1)
        what = sys.argv[2]
        res = (worker_allreduce() if what == "allreduce" else
               worker_ddp(int(sys.argv[3])) if what == "ddp" else worker_fsdp(int(sys.argv[3])))
        print(json.dumps(res), flush=True)
        return

    sys.path.insert(0, HERE)
    import vtpu
    from common import save

    quick = "--quick" in sys.argv
    print(f"vtpu tpu_dist bench on {vtpu.info()['isa_path']} ({os.cpu_count()} cores)")
    record = {"allreduce_MB": MB}
    for n in (2, 4):
        res = launch(n, "allreduce")[0]
        g, t = res["gloo"], res["tpu_dist"]
        print(f"allreduce {MB} MB, {n} processes: gloo (cpu tensors) {g['ms']:.1f} ms {g['busbw_GBs']:.2f} GB/s bus, "
              f"tpu_dist {t['ms']:.1f} ms {t['busbw_GBs']:.2f} GB/s bus: {g['ms'] / t['ms']:.2f}x gloo")
        record[f"allreduce_{n}"] = res
    steps = 3 if quick else 8
    ncores = len(os.sched_getaffinity(0))
    one = launch(1, "ddp", cores=[0], extra=[str(steps)])[0]["step_ms"]
    two = max(r["step_ms"] for r in launch(2, "ddp", cores=[0, 1 % ncores], extra=[str(steps)]))
    scaling = 2 * one / two
    print(f"DDP GPT step, 1 core per process: 1 process {one:.0f} ms, 2 processes {two:.0f} ms: "
          f"{scaling:.2f}x the throughput of 1 process (target >= 1.7x)")
    record.update(ddp_1proc_ms=one, ddp_2proc_ms=two, ddp_throughput_ratio=scaling)
    fsdp = launch(2, "fsdp", cores=[0, 1 % ncores], extra=[str(steps)])[0]
    print(f"FSDP2 GPT step, 2 processes x 1 core: {fsdp['step_ms']:.0f} ms; {fsdp['collectives']} collectives on the "
          f"communication queue, {fsdp['comm_ms']:.1f} ms, {fsdp['overlap_fraction']:.0%} of it overlapping compute "
          f"(rank 0's trace: bench/results/fsdp_trace.json)")
    record["fsdp"] = fsdp
    save("dist", record)


if __name__ == "__main__":
    main()
