"""The matmul FLOPs a run cannot avoid, from the model's shapes alone: two a weight a token
pass (`matmul_passes`). Exact arithmetic, no compile. `--cheapest` prices a job's bound with it
(shared.plan.slices.job), and every verdict's roofline takes it as the floor of its compute term
(`run_flops`): XLA's cost analysis counts a loop body once (a chunked loss's chunks, a
micro-batched step's scan) and a custom kernel such as Pallas attention as none, and counted
23% of a gemma3-1b full fine-tune's model FLOPs on an H100 (benchmarks/results/
finetune_h100.json).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from shared import models, sizing
from shared.plan.workloads.grpo import settings as grpo_settings
from shared.pretrain import model as pretrain_model

if TYPE_CHECKING:
    from shared.plan.workloads.request import Request

# workload -> what its job is counted in
JOB_UNITS = {
    "lora-train": "tokens",
    "sft": "tokens",
    "train": "tokens",
    "rollout": "sequences",
    "lora-rollout": "sequences",
    "grpo": "steps",
}


@dataclasses.dataclass(frozen=True)
class Job:
    """How much of the workload the run does, in the workload's own unit."""

    amount: float
    unit: str


def matmul_passes(request: Request, job: Job) -> float:
    """Token passes through every matmul weight the job needs at the least, whatever the
    compiler does. A forward pass is one. A backward pass carries the gradient back through
    every layer but the first (whose input is the embedding), (L-1)/L of a pass; a full
    fine-tune also forms every weight's gradient, one pass more; block remat recomputes every
    layer's forward, one more. A LoRA fine-tune's adapters
    sit on every layer's attention and MLP (shared.models' lora_module_path), so its gradient
    crosses every layer too. GRPO, per step of prompts_per_step x num_generations sequences:
    the rollout's forward, the reference's (beta > 0), the old policy's (num_iterations > 1)
    and num_iterations LoRA updates."""
    layers = _layers(request)
    backward = (layers - 1) / layers
    # block remat runs every block's forward again in the backward pass: one pass more (a
    # deviceless GPU compile counts nothing, so without it a GPU frontier took remat for free)
    recompute = 1.0 if request.remat == "block" else 0.0
    per_token = {"lora-train": 1 + backward, "sft": 2 + backward, "train": 2 + backward}
    if job.unit == "tokens":
        return job.amount * (per_token[request.workload] + recompute)
    tokens = request.prompt_len + request.steps
    if job.unit == "sequences":
        return job.amount * tokens
    recipe = grpo_settings(request)
    sequences = recipe.prompts_per_step * recipe.num_generations
    passes = (
        1
        + (recipe.beta != 0)
        + (recipe.num_iterations > 1)
        + recipe.num_iterations * (1 + backward + recompute)
    )
    return job.amount * sequences * tokens * passes


def _layers(request: Request) -> int:
    if request.workload == "train":
        return pretrain_model.config(request.model).dims().L
    return models.model_config(request.model).num_layers


def matmul_weights(request: Request) -> int:
    """The request's model's matmul weights: a tunix model's from its shapes
    (models.matmul_weights), our ~130M pretraining model's from its dims (dense, every
    projection used)."""
    if request.workload == "train":
        parts = sizing.param_counts(pretrain_model.config(request.model).dims())
        return parts["attention"] + parts["mlp"]
    return models.matmul_weights(request.model)


def job_flops(request: Request, job: Job) -> float:
    """The job's matmul FLOPs: two a weight a token pass."""
    return 2.0 * matmul_weights(request) * matmul_passes(request, job)


def run_flops(request: Request) -> float:
    """FLOPs one run of the request's workload cannot avoid, over the whole slice: a step's
    tokens, a batch of sequences, one GRPO step (`matmul_passes`, two FLOPs a weight). 0 where
    the workload has no job unit (forward) or the model is cut to fewer layers (a search's
    probe: these shapes are the whole model's)."""
    unit = JOB_UNITS.get(request.workload)
    if unit is None or request.layers:
        return 0.0
    amount = {"tokens": request.batch * request.seq, "sequences": request.batch, "steps": 1}[unit]
    return job_flops(request, Job(amount, unit))
