"""A job for `--cheapest`: how much of a workload a run does, and the least it can cost.

A job is a workload (its shapes from the request) and how much of it: `tokens` for a fine-tune
or a pretraining run, `sequences` for rollouts, `steps` for GRPO (whose batch is the recipe's
and stays as given). `bound` is exact arithmetic, no compile: the matmul FLOPs the job cannot
avoid, at a slice's peak and price. shared.plan.cheapest ranks and prunes slices with it.
"""

from __future__ import annotations

import dataclasses
import math

from shared import models, sizing
from shared.errors import BadInput, choose, positive
from shared.hardware import parse_target, prices
from shared.plan import budget
from shared.plan.verdict import Request
from shared.plan.workloads.grpo import settings as grpo_settings
from shared.pretrain import model as pretrain_model

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


def job_for(workload: str, amount: float) -> Job:
    """The job of `amount` units of `workload`; BadInput for a workload with no job unit."""
    choose("workload with a job to price (--cheapest)", workload, JOB_UNITS)
    positive(**{JOB_UNITS[workload]: amount})
    return Job(float(amount), JOB_UNITS[workload])


def runs(point: dict, job: Job) -> int:
    """Runs of the verdict's workload the job needs (a partly filled last one counts whole)."""
    if job.unit == "tokens":
        return math.ceil(job.amount / (point["batch"] * point["seq"]))
    if job.unit == "sequences":
        return math.ceil(job.amount / point["batch"])
    return math.ceil(job.amount)


def matmul_passes(request: Request, job: Job) -> float:
    """Token passes through every matmul weight the job needs at the least, whatever the
    compiler does. A forward pass is one. A backward pass carries the gradient back through
    every layer but the first (whose input is the embedding), (L-1)/L of a pass; a full
    fine-tune also forms every weight's gradient, one pass more. A LoRA fine-tune's adapters
    sit on every layer's attention and MLP (shared.models' lora_module_path), so its gradient
    crosses every layer too. GRPO, per step of prompts_per_step x num_generations sequences:
    the rollout's forward, the reference's (beta > 0), the old policy's (num_iterations > 1)
    and num_iterations LoRA updates."""
    layers = _layers(request)
    backward = (layers - 1) / layers
    per_token = {"lora-train": 1 + backward, "sft": 2 + backward, "train": 2 + backward}
    if job.unit == "tokens":
        return job.amount * per_token[request.workload]
    tokens = request.prompt_len + request.steps
    if job.unit == "sequences":
        return job.amount * tokens
    recipe = grpo_settings(request)
    sequences = recipe.prompts_per_step * recipe.num_generations
    passes = (
        1
        + (recipe.beta != 0)
        + (recipe.num_iterations > 1)
        + recipe.num_iterations * (1 + backward)
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


def bound(request: Request, job: Job, target: str, kind: str) -> dict:
    """Hours and dollars no run of the job on `target` can beat: its matmul FLOPs (two a
    weight a token pass, `matmul_passes`) at peak."""
    slice_ = parse_target(target)
    flops = 2 * matmul_weights(request) * matmul_passes(request, job)
    hours = flops / slice_.peak_flops_total / budget.SECONDS_PER_HOUR
    try:
        dollars = hours * prices.price_per_hour(target, kind)
    except BadInput:  # no published price (tpu7x, h200): it cannot be ranked on dollars
        dollars = None
    return {"bound_hours": hours, "bound_dollars": dollars}
