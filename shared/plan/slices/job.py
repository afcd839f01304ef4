"""A job for `--cheapest`: how much of a workload a run does, and the least it can cost.

A job is a workload (its shapes from the request) and how much of it: `tokens` for a fine-tune
or a pretraining run, `sequences` for rollouts, `steps` for GRPO (whose batch is the recipe's
and stays as given). `bound` is exact arithmetic, no compile: the matmul FLOPs the job cannot
avoid, at a slice's peak and price. shared.plan.slices.cheapest ranks and prunes slices with it.
"""

from __future__ import annotations

import math

from shared.errors import BadInput, choose, positive
from shared.hardware import parse_target, prices
from shared.plan.slices import budget
from shared.plan.workloads.matmul_bound import JOB_UNITS, Job, job_flops, matmul_passes
from shared.plan.workloads.request import Request

__all__ = ["JOB_UNITS", "Job", "bound", "job_for", "matmul_passes", "runs"]


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


def bound(request: Request, job: Job, target: str, kind: str) -> dict:
    """Hours and dollars no run of the job on `target` can beat: its matmul FLOPs (two a
    weight a token pass, `matmul_passes`) at peak."""
    slice_ = parse_target(target)
    flops = job_flops(request, job)
    hours = flops / slice_.peak_flops_total / budget.SECONDS_PER_HOUR
    try:
        dollars = hours * prices.price_per_hour(target, kind)
    except BadInput:  # no published price (tpu7x, h200): it cannot be ranked on dollars
        dollars = None
    return {"bound_hours": hours, "bound_dollars": dollars}
