"""Which ("fsdp", "tp") mesh a verdict compiles on when `--mesh` is not given.

Every device on fsdp is the default: tunix's trainers shard their weights that way (FSDP) and
our rollouts use it as data parallelism, and it holds the largest batch whenever it works. On a
big slice it stops working: 256 fsdp ways do not divide gemma3-1b's 1152-wide embedding, and a
batch of 8 does not split over 16 devices. Then the rule is ours, stated in every verdict: the
smallest tp (a divisor of the device count) for which every weight's own partition annotation
divides (models.check_divisible, in the layout the workload uses) and the batch splits over
fsdp. The least tp is the least tensor-parallel communication per layer; it is a rule that
makes a program compile, not a claim that it is the fastest mesh (the scaling book's rule, FSDP
until the per-device batch falls under the chip's critical batch, then TP, is about speed).
"""

from __future__ import annotations

from jax.sharding import Mesh

from shared import models
from shared.errors import BadInput
from shared.hardware.sharding import make_mesh, mesh_shape

# Workloads that build a tunix model, and those of them whose weights are laid out as tunix
# samples (nothing over fsdp); the rest (our 130M pretraining model) keep every device on fsdp.
TUNIX_MODEL = ("rollout", "lora-rollout", "forward", "lora-train", "sft", "grpo")
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


def auto_shape(request, devices: list, *, with_batch: bool = True) -> tuple[int, int]:
    """The smallest-tp (fsdp, tp) whose axes divide every weight (and the batch, with
    `with_batch`); the all-fsdp mesh's own error when no mesh does."""
    first_error = None
    for shape in _shapes(len(devices)):
        mesh = make_mesh(shape, devices)
        try:
            _check_weights(request, mesh)
            if with_batch:
                check_batch_on(request, mesh)
        except BadInput as err:
            first_error = first_error or err
            continue
        return shape
    raise first_error


def mesh_for(request, devices: list) -> tuple[Mesh, str | None]:
    """The verdict's mesh, and a note for the verdict when the rule above chose a tp."""
    if request.mesh is not None:
        mesh = make_mesh(request.mesh, devices)
        check_batch_on(request, mesh)
        return mesh, None
    fsdp, tp = auto_shape(request, devices)
    note = (
        f"mesh {fsdp}x{tp} chosen: the smallest tp for which {request.model}'s weights and "
        f"batch {request.batch} divide the axes ({len(devices)}x1 does not); see shared.plan.mesh"
    )
    return make_mesh((fsdp, tp), devices), note if tp > 1 else None


def search_shape(request, devices: list) -> tuple[int, int]:
    """The mesh a batch search keeps for every probe: the given one, or the smallest tp that
    shards the weights (the search's batches are multiples of its fsdp, so they split too)."""
    if request.mesh is not None:
        return mesh_shape(request.mesh, len(devices))
    return auto_shape(request, devices, with_batch=False)
