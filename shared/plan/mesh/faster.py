"""A fitting verdict on the meshes with more tp, while it is memory-bound: the same request,
its batch kept, compiled exactly on each, tp rising.

Why: a verdict's own mesh holds the weights with the least tp (shared.plan.mesh.choice), every other
chip on fsdp, and fsdp gathers every weight whole onto each chip for its matmuls, where tp reads
a share. For a decode-heavy step that is the slowest layout: GRPO of gemma3-4b (tunix's demo
recipe) on a v5e-8 took 37.4 s a step at the roofline on 8x1 and 18.2 on 2x4
(benchmarks/results/08_grpo_v5e8.json). A reader asking how many steps a session holds wants the
layout a run would use. `--cheapest` climbs the same way for a priced slice
(shared.plan.slices.candidate); this is the climb for one recipe at its own batch (notebook 07).
"""

from __future__ import annotations

from shared.errors import BadInput
from shared.hardware import parse_target
from shared.hardware.sharding import mesh_name
from shared.plan.compiler.target import target_devices
from shared.plan.mesh.choice import wider_shapes
from shared.plan.mesh.steps import pinned_to
from shared.plan.slices.candidate import roofline_terms
from shared.plan.verdict import plan_point
from shared.plan.workloads.request import Request


def on_wider_meshes(request: Request, point: dict, *, use_cache: bool = True) -> dict[str, dict]:
    """`request`'s verdicts on each mesh with more tp than `point`'s (its verdict), by mesh
    name, tp rising: compiled while the fastest fit so far is memory-bound (its bytes term over
    its FLOPs term), and until one is no faster than it (by any margin: small steps add up, as
    shared.plan.slices.candidate's climb found). Nothing where
    `request` names its mesh (the reader chose it) or `point` does not fit; a mesh whose fsdp
    does not divide the batch is left out."""
    if request.mesh is not None or not point["fits"]:
        return {}
    devices = target_devices(parse_target(request.target))
    than = (point["mesh_shape"]["fsdp"], point["mesh_shape"]["tp"])
    verdicts, fastest = {}, point
    for shape in wider_shapes(request, devices, than):
        flops_s, bytes_s = roofline_terms(fastest)
        if bytes_s <= flops_s:  # compute-bound: more tp adds no FLOPs a chip can skip
            break
        try:
            verdict = plan_point(pinned_to(request, shape), use_cache=use_cache)
        except BadInput:  # its fsdp does not divide the batch
            continue
        verdicts[mesh_name(shape)] = verdict
        if not verdict["fits"]:
            continue
        if verdict["roofline_lower_bound_s"] >= fastest["roofline_lower_bound_s"]:
            break
        fastest = verdict
    return verdicts
