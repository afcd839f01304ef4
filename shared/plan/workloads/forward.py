"""`forward`: a teacher-forced pass of a tunix model to top-k logits, full [B, T, V] or
chunked (shared.logits): notebook 03's question at a real model's size. The weights are
resident.
"""

from shared import models
from shared.plan.compiler.executable import Executable, Workload

READS = ("batch", "seq", "logits", "k")  # see rollout.READS


def workload(request, mesh) -> Workload:
    """WORKLOADS["forward"]: `models.teacher_forced_top_k` at the request's batch and sequence."""
    args, kwargs = models.abstract_forward_args(
        request.model, request.batch, request.seq, mesh=mesh
    )
    return Workload(
        [
            Executable(
                f"forward-{request.logits}",
                models.teacher_forced_top_k,
                args,
                {**kwargs, "mode": request.logits, "k": request.k},
                resident_args={1: "weights"},
            )
        ]
    )
