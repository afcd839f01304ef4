"""Whether a request can fit on a mesh at all, known without compiling: its resident buffers
plus the largest arguments-only transient (shared.plan.compiler.workload_bytes.arguments_only),
exact from shapes and shardings, against the HBM the compiler allows. A verdict answers "does not
fit" from it in milliseconds (shared.plan.verdict.floor_verdict), and shared.plan.mesh.choice asks
it which mesh can hold a model at all (a 12B sampled on eight v5e chips with its weights whole on
each cannot; split over tp it can)."""

from __future__ import annotations

import functools

from jax.sharding import Mesh

from shared.hardware import parse_target
from shared.hardware.sharding import make_mesh
from shared.plan.compiler.target import usable_hbm_per_device
from shared.plan.compiler.workload_bytes import arguments_only, combine, resident_bytes, takes_of
from shared.plan.workloads import build_workload


def floor_bytes(request, mesh: Mesh) -> int:
    """Per-device bytes the request needs at the least on `mesh`: resident buffers and the
    largest executable's arguments, the workload built without compiling anything."""
    workload = build_workload(request, mesh)
    return combine(arguments_only(workload), resident_bytes(workload), takes_of(workload))[
        "bytes_per_device"
    ]


@functools.cache
def holds(request, shape: tuple[int, int], devices: tuple) -> tuple[bool, int, int]:
    """Whether the request's floor fits the mesh of `shape` on `devices`: (fits, floor bytes,
    usable bytes). Cached: a search asks for its mesh again at every probe, the mesh rule and
    floor_verdict ask for the same mesh's floor, and building a GRPO workload takes seconds."""
    floor = floor_bytes(request, make_mesh(shape, list(devices)))
    usable = usable_hbm_per_device(parse_target(request.target))
    return floor <= usable, floor, usable
