"""tpu_dist: the torch.distributed backend for "tpu" tensors.

``import vtpu`` (or ``import torch``, which autoloads it) registers the
backend for the device, so ``dist.init_process_group("tpu_dist")`` and a
plain ``dist.init_process_group()`` in a torchrun job both give a process
group whose collectives run on tpu tensors. Each process owns its chip as
``tpu:0``. Collectives are device work: they run in order on the device
queue after the ops that produced their inputs, and later ops wait for them.
The transport is Gloo over TCP, so the same script runs on one host or,
with ``torchrun --nnodes N``, on several.
"""

import os
import socket
import uuid

import torch
import torch.distributed as dist

BACKEND = "tpu_dist"


def _host_id():
    """What makes two processes share /dev/shm: the machine's boot and its name."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


def _shared_memory_name(store, rank, size):
    """A shared memory name for the group when all its ranks are on this
    host (and VTPU_DIST_SHM is not 0), else ""."""
    if size < 2 or os.environ.get("VTPU_DIST_SHM", "1") == "0":
        return ""
    here = _host_id()
    store.set(f"host/{rank}", here)
    if any(store.get(f"host/{k}").decode() != here for k in range(size)):
        return ""
    if rank == 0:
        store.set("shm", f"/vtpu-dist-{os.getpid()}-{uuid.uuid4().hex[:12]}")
    return store.get("shm").decode()


def _create(opts, backend_options):
    """Backend factory torch.distributed calls for each process group: Gloo
    over TCP carries what shared memory does not (other hosts, and the
    collectives the local path lacks)."""
    from .. import _C

    # Keys apart from a gloo backend the same group may hold for CPU tensors.
    store = dist.PrefixStore(f"{BACKEND}/", opts.store)
    transport = dist.ProcessGroupGloo(store, opts.group_rank, opts.group_size, opts.timeout)
    name = _shared_memory_name(store, opts.group_rank, opts.group_size)
    timeout_ms = int(opts.timeout.total_seconds() * 1000)
    return _C._dist_backend(transport, opts.group_rank, opts.group_size, name, timeout_ms, store)


def _point_default_backend_at_tpu_dist(pg):
    """A group made without a backend name (``init_process_group()``) maps
    the accelerator to its registered backend, but torch marks GLOO as the
    group's default backend type whenever NCCL is absent, so code that asks
    the group for its default backend (DDP's logger, hooks) finds none.
    When tpu_dist is the only backend of the group, it is the default."""
    from .. import _C

    if not isinstance(pg, dist.ProcessGroup):
        return
    try:
        ours = isinstance(pg._get_backend(torch.device("tpu")), _C.ProcessGroupTpu)
    except RuntimeError:
        return
    try:
        pg._get_backend(torch.device("cpu"))
        return  # a cpu backend is there too: torch's choice stands
    except RuntimeError:
        pass
    if ours:
        pg._set_default_backend(dist.ProcessGroup.BackendType.CUSTOM)


def register():
    """Register ``tpu_dist`` as a backend and as the default for "tpu"."""
    if not dist.is_available() or not dist.is_gloo_available():
        return
    if BACKEND.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["tpu"])
    c10d = dist.distributed_c10d
    make_group = c10d._new_process_group_helper

    def new_process_group_helper(*args, **kwargs):
        pg, store = make_group(*args, **kwargs)
        _point_default_backend_at_tpu_dist(pg)
        return pg, store

    c10d._new_process_group_helper = new_process_group_helper


__all__ = ["BACKEND", "register"]
