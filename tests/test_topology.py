"""torch.tpu.topology_aware_mesh: slice names, the chip grid and the rank
layout, whose last (highest-traffic) mesh axis must run over linked chips.
The multi-process checks are in tests/test_dist.py."""

import pytest
import torch

from vtpu.distributed import topology as T


@pytest.mark.parametrize(
    "spec,shape,wraps",
    [
        ("v6e-8", (2, 4, 1), (False, False, False)),
        ("v6e-256", (16, 16, 1), (True, True, False)),
        ("v5p-2x2x2", (2, 2, 2), (False, False, False)),
        ("v5p-16", (2, 2, 2), (False, False, False)),  # 16 TensorCores = 8 chips
        ("v5p-4x4x4", (4, 4, 4), (True, True, True)),
        ("v5e-4", (2, 2, 1), (False, False, False)),
    ],
)
def test_slice_names(spec, shape, wraps):
    t = T.parse(spec)
    assert t.shape == shape and t.wraps == wraps


@pytest.mark.parametrize("spec", ["v6e", "v9-8", "v6e-6", "v5p-3", "v6e-0x2", "tpu-8"])
def test_bad_slice_names_are_refused(spec):
    with pytest.raises(ValueError, match="v6e|power-of-two|TensorCores|axis"):
        T.parse(spec)


def linked_by_brute_force(t, a, b):
    ca, cb = t.coords(a), t.coords(b)
    steps = []
    for i in range(3):
        d = abs(ca[i] - cb[i])
        if t.wraps[i]:
            d = min(d, t.shape[i] - d)
        steps.append(d)
    return sum(steps) == 1


@pytest.mark.parametrize("spec", ["v6e-8", "v5p-2x2x2", "v5p-4x4x4", "v6e-64", "v6e-256"])
def test_snake_visits_every_chip_over_links(spec):
    t = T.parse(spec)
    s = t.snake()
    assert sorted(s) == list(range(t.chips))
    for a, b in zip(s, s[1:]):
        assert t.linked(a, b) and linked_by_brute_force(t, a, b), (spec, a, b)


@pytest.mark.parametrize(
    "spec,mesh_shape",
    [("v6e-8", (2, 4)), ("v6e-8", (4, 2)), ("v6e-8", (8,)), ("v5p-2x2x2", (2, 4)), ("v5p-2x2x2", (2, 2, 2)),
     ("v5p-4x4x4", (4, 16)), ("v6e-256", (16, 16))],
)
def test_last_axis_neighbours_are_torus_neighbours(spec, mesh_shape):
    t = T.parse(spec)
    mesh = T.layout(mesh_shape, t)
    assert mesh.dtype == torch.int64 and tuple(mesh.shape) == mesh_shape
    assert sorted(mesh.reshape(-1).tolist()) == list(range(t.chips))
    rows = mesh.reshape(-1, mesh_shape[-1]).tolist()
    for row in rows:
        for a, b in zip(row, row[1:]):
            assert linked_by_brute_force(t, a, b), (spec, mesh_shape, row)


def test_multi_slice_puts_slices_outermost_on_each_axis():
    t = T.parse("v6e-8")
    mesh = T.layout((2, 4), t, dcn_mesh_shape=(2, 1), slices=2)
    assert tuple(mesh.shape) == (4, 4)
    assert sorted(mesh[:2].reshape(-1).tolist()) == list(range(8))  # slice 0
    assert sorted(mesh[2:].reshape(-1).tolist()) == list(range(8, 16))  # slice 1
    assert torch.equal(mesh[2:] - 8, mesh[:2])
    with pytest.raises(ValueError, match="slices"):
        T.layout((2, 4), t, dcn_mesh_shape=(3, 1), slices=2)
    with pytest.raises(ValueError, match="chips"):
        T.layout((2, 2), t)


def test_needs_a_process_group():
    with pytest.raises(RuntimeError, match="initialised process group"):
        torch.tpu.topology_aware_mesh((2, 4))
