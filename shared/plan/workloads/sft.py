"""`sft`: a full fine-tune, one optax step on every weight of a tunix model: the same
`shared.lora.train_step` a LoRA fine-tune runs, with every nnx.Param trained (AdamW, fp32
moments for all of them), `remat`, `microbatches` and the chunked `loss` as knobs. The weights
and the optimizer state are resident; they, not the activations, decide most full fine-tunes:
2 bytes of bf16 weight, 8 of Adam state and 4 of fp32 gradient a parameter.
"""

from shared.plan.compiler.executable import Workload
from shared.plan.workloads.lora_train import finetune_executable

READS = ("batch", "seq", "remat", "microbatches", "loss")  # see rollout.READS


def workload(request, mesh) -> Workload:
    """WORKLOADS["sft"]: the step at the request's batch, sequence and knobs."""
    return Workload(
        [
            finetune_executable(
                request.model,
                request.batch,
                request.seq,
                mesh=mesh,
                rank=None,
                remat=request.remat,
                microbatches=request.microbatches,
                loss=request.loss,
                layers=request.layers,
            )
        ]
    )
