"""A batch search's terms on one mesh: the requests it compiles there (pinned_to), its step
(unit_for) and the batch of the one exact question max_batch asks a mesh after another mesh's
answer (first_batch). shared.plan.search.max_batch searches with them; the atlas, gap closing and
--cheapest step their own compiles by them."""

from __future__ import annotations

import dataclasses

from shared.errors import BadInput
from shared.hardware import parse_target
from shared.hardware.sharding import mesh_name
from shared.plan.compiler.target import target_devices
from shared.plan.mesh.choice import least_batch, search_shape
from shared.plan.workloads.request import Request


def unit_for(request: Request, multiple_of: int | None) -> int:
    """The search's step on the mesh it keeps (shared.plan.mesh.choice.search_shape): `multiple_of`,
    which must itself split over that mesh's data-parallel axis, or by default the mesh's least
    batch (mesh.least_batch: one row per fsdp device, whole GRPO groups). Each mesh a search
    compares takes its own: a 1x8 mesh of a v5e-8 runs batch 1, where the all-fsdp 8x1 needs 8
    (the atlas stepped every mesh by the rule mesh's 8 until 2026-11-27, and so said "not even
    batch 8 fits on any mesh" for llama3.1-8b LoRA on a v5e-8 without asking 1x8 for 1 to 7)."""
    fsdp, _ = search_shape(request, target_devices(parse_target(request.target)))
    unit = least_batch(request, fsdp) if multiple_of is None else multiple_of  # 0 is refused
    if unit < 1 or unit % fsdp:
        raise BadInput(
            f"--multiple-of {multiple_of} must be a positive multiple of the mesh's "
            f"data-parallel size {fsdp}"
        )
    return unit


def pinned_to(request: Request, shape: tuple[int, int]) -> Request:
    """`request` with every verdict on the (fsdp, tp) mesh `shape` it answers for, unless it
    names a mesh itself: left unset, each verdict takes the rule's mesh at its own batch, which
    moves a tunix model to a wider tp once its floor outgrows the all-fsdp mesh (a search on
    8x1 fit llama3.1-8b rollouts "192" on 4x2)."""
    if request.mesh is None and shape[0] * shape[1] > 1:
        return dataclasses.replace(request, mesh=mesh_name(shape))
    return request


def first_batch(unit: int, top: int, exact_from: int, unit_floor_fits: bool) -> int:
    """The batch a mesh's one exact question compiles: the least multiple of `unit` of at least
    `exact_from`, at most `top`; one unit where arithmetic says not even that fits ("none" says
    more than "<first")."""
    return min(max(unit, -(-exact_from // unit) * unit), top) if unit_floor_fits else unit
