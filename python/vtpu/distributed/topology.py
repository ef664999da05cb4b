"""Chip topology and ``torch.tpu.topology_aware_mesh``.

``VTPU_TOPOLOGY`` names the slice the job's chips form, as TPU slices are
named: ``v6e-8`` (8 chips; v5p and v7x count TensorCores, so ``v5p-16`` is
8 chips) or an explicit chip grid ``v5p-2x2x2``. Rank r is chip r, with the
x coordinate fastest. ``VTPU_NUM_SLICES`` (default 1) puts that many slices
side by side, joined by the data-centre network (DCN): slice s holds ranks
[s * chips, (s + 1) * chips).

Links: neighbouring chips on an axis are linked; an axis wraps around (a
torus ring) when it spans a full ring: 4 or more chips on the 3D-torus
generations (v5p, v7x), 16 on the 2D ones (v5e, v6e).
"""

import math
import os
import re

import torch

_TORUS_3D = {"v5p", "v7x"}
_CORES_PER_CHIP = {"v5p": 2, "v7x": 2, "v5e": 1, "v6e": 1}
_FULL_RING = {"v5p": 4, "v7x": 4, "v5e": 16, "v6e": 16}


class Topology:
    """A slice: generation, chip grid (x, y, z) and which axes wrap."""

    def __init__(self, gen, shape):
        self.gen = gen
        self.shape = tuple(shape)
        self.wraps = tuple(n >= _FULL_RING[gen] and n > 2 for n in self.shape)

    @property
    def chips(self):
        return math.prod(self.shape)

    def coords(self, chip):
        x, y, z = self.shape
        return (chip % x, (chip // x) % y, chip // (x * y))

    def linked(self, a, b):
        """Whether chips a and b are torus neighbours (one link apart)."""
        ca, cb = self.coords(a), self.coords(b)
        diff = [i for i in range(3) if ca[i] != cb[i]]
        if len(diff) != 1:
            return False
        i = diff[0]
        d = abs(ca[i] - cb[i])
        return d == 1 or (self.wraps[i] and d == self.shape[i] - 1)

    def snake(self):
        """Every chip once, each one linked to the one before: a
        boustrophedon walk (x back and forth within a row, rows back and
        forth within a plane, planes in turn)."""
        x, y, z = self.shape
        order = []
        for k in range(z):
            rows = range(y) if k % 2 == 0 else range(y - 1, -1, -1)
            for n, j in enumerate(rows):
                cols = range(x) if (n + k * y) % 2 == 0 else range(x - 1, -1, -1)
                order.extend(i + x * (j + y * k) for i in cols)
        return order

    def __repr__(self):
        return f"{self.gen}-{'x'.join(map(str, self.shape))}"


def _grid(gen, chips):
    """The chip grid TPU slices of `chips` chips have."""
    if chips < 1 or chips & (chips - 1):
        raise ValueError(f"a {gen} slice has a power-of-two number of chips, not {chips}")
    dims = [1, 1, 1]
    axes = 3 if gen in _TORUS_3D else 2
    # double the shortest axis first (x before y before z): 2x4 for 8 v6e
    # chips, 2x2x2 for 8 v5p chips, 4x4x4 for 64
    while math.prod(dims) < chips:
        i = min(range(axes), key=lambda a: (dims[a], a))
        dims[i] *= 2
    if gen not in _TORUS_3D:
        dims[0], dims[1] = min(dims[:2]), max(dims[:2])
    return dims


def parse(spec):
    """``v6e-8`` / ``v5p-16`` / ``v5p-2x2x2`` into a Topology."""
    m = re.fullmatch(r"(v5e|v5p|v6e|v7x)-(\d+(?:x\d+){0,2})", spec.strip().lower())
    if not m:
        raise ValueError(
            f"VTPU_TOPOLOGY={spec!r}: expected <chip>-<count> or <chip>-<x>x<y>[x<z>] with chip one of "
            "v5e, v5p, v6e, v7x (e.g. v6e-8, v5p-2x2x2)"
        )
    gen, size = m.group(1), m.group(2)
    if "x" in size:
        dims = [int(d) for d in size.split("x")] + [1] * (3 - len(size.split("x")))
        if min(dims) < 1:
            raise ValueError(f"VTPU_TOPOLOGY={spec!r}: a chip grid has no empty axis")
        return Topology(gen, dims)
    count = int(size)
    cores = _CORES_PER_CHIP[gen]
    if count % cores:
        raise ValueError(f"VTPU_TOPOLOGY={spec!r}: {gen} slices count {cores} TensorCores per chip")
    return Topology(gen, _grid(gen, count // cores))


def current(world_size):
    """The job's slice topology: VTPU_TOPOLOGY, else one slice of the
    chip VTPU_CHIP names holding the job's chips."""
    slices = int(os.environ.get("VTPU_NUM_SLICES", "1"))
    spec = os.environ.get("VTPU_TOPOLOGY")
    if spec:
        return parse(spec), slices
    gen = os.environ.get("VTPU_CHIP", "v6e").lower()
    if gen not in _CORES_PER_CHIP:
        raise ValueError(f"VTPU_CHIP={gen!r} is not a known TPU chip")
    if world_size % slices:
        raise ValueError(f"{world_size} ranks do not split into VTPU_NUM_SLICES={slices} slices")
    return Topology(gen, _grid(gen, world_size // slices)), slices


def layout(mesh_shape, topo, dcn_mesh_shape=None, slices=1):
    """The rank tensor: rank ids in `mesh_shape`, laid along the slice's
    snake so that neighbours on the last (highest-traffic) axis are linked
    chips; with DCN, each axis is the DCN axis times the slice axis, slices
    outermost."""
    mesh_shape = tuple(int(d) for d in mesh_shape)
    if math.prod(mesh_shape) != topo.chips:
        raise ValueError(f"mesh_shape {mesh_shape} has {math.prod(mesh_shape)} devices; a {topo} slice has "
                         f"{topo.chips} chips")
    ici = torch.tensor(topo.snake(), dtype=torch.int64).reshape(mesh_shape)
    if dcn_mesh_shape is None:
        if slices != 1:
            raise ValueError(f"{slices} slices need dcn_mesh_shape (topology='multi_slice')")
        return ici
    dcn_mesh_shape = tuple(int(d) for d in dcn_mesh_shape)
    if len(dcn_mesh_shape) != len(mesh_shape):
        raise ValueError(f"dcn_mesh_shape {dcn_mesh_shape} and mesh_shape {mesh_shape} differ in length")
    if math.prod(dcn_mesh_shape) != slices:
        raise ValueError(f"dcn_mesh_shape {dcn_mesh_shape} has {math.prod(dcn_mesh_shape)} slices; the job has "
                         f"{slices} (VTPU_NUM_SLICES)")
    out = torch.empty([d * m for d, m in zip(dcn_mesh_shape, mesh_shape)], dtype=torch.int64)
    for s in range(slices):
        # slice s at DCN position pos (row-major), its ICI mesh in that block
        pos = torch.unravel_index(torch.tensor(s), dcn_mesh_shape)
        block = tuple(slice(int(p) * m, (int(p) + 1) * m) for p, m in zip(pos, mesh_shape))
        out[block] = ici + s * topo.chips
    return out


def topology_aware_mesh(mesh_shape, topology="single_slice", dcn_mesh_shape=None, process_is_granule=False,
                        allow_split_physical_axes=False, contiguous_submeshes=False):
    """The int64 rank tensor for ``DeviceMesh("tpu", mesh=...)``, the same
    on every rank, with the highest-traffic axis last (JAX's convention)
    laid on linked chips. Needs an initialised process group (TorchTPU's
    signature; the layout follows VTPU_TOPOLOGY and VTPU_NUM_SLICES).
    allow_split_physical_axes and contiguous_submeshes are accepted: the
    snake layout splits axes freely and keeps every last-axis row
    contiguous on the slice."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("topology_aware_mesh needs an initialised process group (dist.init_process_group)")
    if topology not in ("single_slice", "multi_slice"):
        raise ValueError(f"topology must be 'single_slice' or 'multi_slice', not {topology!r}")
    if process_is_granule:
        raise NotImplementedError("process_is_granule=True: vtpu runs one chip per process, so each slice is "
                                  "a group of processes; use VTPU_NUM_SLICES")
    world = dist.get_world_size()
    topo, slices = current(world)
    if topology == "single_slice" and dcn_mesh_shape is not None:
        raise ValueError("dcn_mesh_shape is for topology='multi_slice'")
    if topology == "multi_slice" and dcn_mesh_shape is None:
        raise ValueError("topology='multi_slice' needs dcn_mesh_shape")
    mesh = layout(mesh_shape, topo, dcn_mesh_shape, slices)
    if mesh.numel() != world:
        raise ValueError(f"the mesh holds {mesh.numel()} ranks; the process group has {world}")
    return mesh
