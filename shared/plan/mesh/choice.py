"""Which ("fsdp", "tp") mesh a verdict compiles on when `--mesh` is not given.

Every device on fsdp is the default: tunix's trainers shard their weights that way (FSDP) and
our rollouts use it as data parallelism, and it holds the largest batch whenever it works. On a
big slice it stops working: 256 fsdp ways do not divide gemma3-1b's 1152-wide embedding, and a
batch of 8 does not split over 16 devices. Then the rule is ours, stated in every verdict: the
smallest tp (a divisor of the device count) for which every weight's own partition annotation
divides (models.check_divisible, in the layout the workload uses) and the batch splits over
fsdp. The same rule keeps going when a mesh divides but cannot hold the model at all: tunix
samples with the weights whole on every fsdp device, so a model bigger than one chip (gemma3-12b
on a v5e-8) takes the smallest tp whose resident bytes fit by arithmetic (shared.plan.mesh.floor)
instead of a "does not fit" that only the mesh caused. The least tp is the least
tensor-parallel communication per layer; it is a rule that makes a program compile and fit, not
a claim that it is the fastest mesh (the scaling book's rule, FSDP until the per-device batch
falls under the chip's critical batch, then TP, is about speed).
"""

from __future__ import annotations

import dataclasses
import math

from jax.sharding import Mesh

from shared import models
from shared.errors import BadInput
from shared.hardware.sharding import make_mesh, mesh_name, mesh_shape
from shared.plan.mesh.floor import holds
from shared.plan.workloads import TUNIX_MODEL

# The workloads (TUNIX_MODEL) whose weights are laid out as tunix samples (nothing over fsdp);
# the rest of those building a tunix model train; the others (our 130M pretraining model) keep
# every device on fsdp.
SAMPLING_LAYOUT = ("rollout", "lora-rollout")


def check_batch_on(request, mesh: Mesh) -> None:
    fsdp = mesh.shape["fsdp"]
    if request.batch < 1 or request.batch % fsdp:
        raise BadInput(
            f"batch {request.batch} does not divide the mesh's fsdp axis of {fsdp}: "
            f"use a multiple of {fsdp} or --mesh 1x{mesh.size}"
        )


def _check_weights(request, mesh: Mesh) -> None:
    if request.workload not in TUNIX_MODEL:
        return
    abstract = models.abstract_model(request.model, is_sampling=request.workload in SAMPLING_LAYOUT)
    models.check_divisible(abstract, mesh, request.model)


def _shapes(devices: int):
    return [(devices // tp, tp) for tp in range(1, devices + 1) if devices % tp == 0]


def least_batch(request, fsdp: int) -> int:
    """The smallest batch a mesh with `fsdp` data-parallel ways runs the request at: one per
    fsdp device, and for GRPO whole groups of num_generations (tunix samples a prompt's group
    in one call)."""
    return math.lcm(fsdp, request.num_generations) if request.workload == "grpo" else fsdp


def auto_shape(
    request, devices: list, *, with_batch: bool = True
) -> tuple[tuple[int, int], str | None]:
    """The (fsdp, tp) the rule above picks, and why in words when it is not all fsdp: the
    smallest tp whose axes divide every weight (and the batch, with `with_batch`) and that
    holds the request's floor, its resident buffers and largest arguments by arithmetic (at the
    mesh's least batch when the batch is not given). A sampled model's weights are whole on
    every fsdp device: gemma3-12b's 22 GiB cannot sit on each of a v5e-8's 15.75 GiB chips,
    and split over tp they can. When no mesh holds it, the smallest tp that divides (its
    verdict says it does not fit); the all-fsdp mesh's own error when no mesh divides."""
    first_error, dividing, too_big = None, None, None
    for shape in _shapes(len(devices)):
        mesh = make_mesh(shape, devices)
        try:
            _check_weights(request, mesh)
            if with_batch:
                check_batch_on(request, mesh)
        except BadInput as err:
            first_error = first_error or err
            continue
        dividing = dividing or shape
        if request.workload not in TUNIX_MODEL or len(devices) == 1:
            break
        at = (
            request
            if with_batch
            else dataclasses.replace(request, batch=least_batch(request, shape[0]))
        )
        fits, floor, usable = holds(at, shape, tuple(devices))
        if fits:
            return shape, _why(shape, dividing, too_big, len(devices))
        too_big = too_big or (
            f"on {mesh_name(dividing)} {request.model} needs {floor / 2**30:.1f} GiB per "
            f"device before any activation, over the {usable / 2**30:.2f} GiB the compiler allows"
        )
    if dividing is None:
        raise first_error
    return dividing, _why(dividing, dividing, None, len(devices))


def _why(shape, dividing, too_big: str | None, devices: int) -> str | None:
    """Why the rule chose `shape`, for the verdict's note; None for all fsdp."""
    if shape[1] == 1:
        return None
    if shape == dividing:  # the first mesh that divides: either it holds or none does
        return (
            f"the smallest tp for which the weights and batch divide the axes ({devices}x1 "
            "does not)"
        )
    return f"the smallest tp that holds the weights ({too_big})"


def mesh_for(request, devices: list) -> tuple[Mesh, str | None]:
    """The verdict's mesh, and a note for the verdict when the rule above chose a tp."""
    if request.mesh is not None:
        mesh = make_mesh(request.mesh, devices)
        check_batch_on(request, mesh)
        return mesh, None
    (fsdp, tp), why = auto_shape(request, devices)
    note = (
        f"mesh {mesh_name((fsdp, tp))} chosen: {why}; see shared.plan.mesh.choice" if why else None
    )
    return make_mesh((fsdp, tp), devices), note


def wider_shapes(request, devices: list, than: tuple[int, int]) -> list[tuple[int, int]]:
    """The meshes with more tp than `than` whose axes divide a tunix model's weights, tp
    rising. The rule above holds the weights by arithmetic, not what a compile adds to them: on
    a v5e-8, gemma4-e4b's rollouts hold 14.0 GiB a chip before any activation on 8x1, and the
    compiler fits not even batch 8 there, while 4x2 holds 7.0. A batch search asks each of
    these too, the one with the highest batch_ceiling first
    (shared.plan.search.max_batch)."""
    if request.workload not in TUNIX_MODEL:
        return []
    wider = []
    for shape in _shapes(len(devices)):
        if shape[1] <= than[1]:
            continue
        try:
            _check_weights(request, make_mesh(shape, devices))
        except BadInput:
            continue
        wider.append(shape)
    return wider


def search_shape(request, devices: list) -> tuple[int, int]:
    """The mesh a batch search keeps for every probe: the given one, or the rule's at the
    mesh's least batch (the search's batches are multiples of its fsdp, so they split too)."""
    if request.mesh is not None:
        return mesh_shape(request.mesh, len(devices))
    return auto_shape(request, devices, with_batch=False)[0]


def batch_ceiling(request, shape: tuple[int, int], devices: list) -> int:
    """The largest batch (a multiple of the mesh's least batch) whose floor the `shape` mesh
    holds, by arithmetic (shared.plan.mesh.floor: resident buffers and the largest arguments, exact
    from shapes and shardings): no larger batch can fit there, since the compiler's bytes are
    never below the floor. The floor grows with the batch as a line or, where another
    executable's arguments take over, faster (a maximum of lines), so the line through one and
    two least batches stays at or under it: the ceiling may be loose, never too low. A batch
    search orders the meshes by it and skips a mesh whose ceiling leaves no room to beat the
    answer found on another (shared.plan.search.max_batch): gemma3-1b rollouts on a v6e-8
    reach 7224 on 8x1 and 1890 on 2x4 (one KV head, whole on every tp device), llama3.1-8b's
    808 on 8x1 and 1466 on 1x8."""
    unit = least_batch(request, shape[0])
    holds_one, one, usable = holds(dataclasses.replace(request, batch=unit), shape, tuple(devices))
    if not holds_one:
        return 0
    _, two, _ = holds(dataclasses.replace(request, batch=2 * unit), shape, tuple(devices))
    if two <= one:  # nothing grows with the batch: arithmetic sets no ceiling
        return CEILING_UNBOUNDED
    return unit * (1 + (usable - one) // (two - one))


# batch_ceiling where the floor does not grow with the batch
CEILING_UNBOUNDED = 1 << 30
