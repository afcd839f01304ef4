"""Which slice to rent for a whole job: the cheapest one that fits, its hours and dollars.

    python -m shared.plan lora-train --model gemma3-27b --seq 4096 --lora-rank 16 \\
        --cheapest --tokens 5e7

A job is a workload (its shapes from the request) and how much of it: `tokens` for a fine-tune
or a pretraining run, `sequences` for rollouts, `steps` for GRPO (whose batch is the recipe's
and stays as given). The candidates are the slices Cloud TPU rents (shared.hardware.rent), each
on the mesh a verdict chooses (shared.plan.mesh). Work goes from free to dear:

1. **Exclude by arithmetic.** A slice whose devices cannot hold the weights, optimizer state
   and one smallest batch's arguments (`verdict.floor_verdict`, exact from shapes) is out
   without a compile.
2. **Bound.** No run costs less than its forward passes: two FLOPs per matmul weight per token
   (`models.matmul_weights`), at the slice's peak, times its price. A candidate whose bound is
   not below the best compiled candidate's roofline dollars cannot win and is not compiled.
3. **Compile in the bound's order.** An exact compile at the smallest batch (remat "block" for
   a fine-tune that does not fit without it). When that step is compute-bound (the roofline's
   FLOP term is the larger) a larger batch cannot lower the cost per token, since FLOPs per
   token do not fall with the batch. When it is memory-bound, an exact compile at twice the
   batch separates the weights' bytes from the per-sequence ones, and `search.max_batch` goes
   up to the batch whose cost per token is within COST_TOLERANCE of the least any batch could
   reach (`large_enough`). A larger slice of a chip whose smaller slice was compute-bound is
   not compiled (it cannot cost less per token), unless the smaller one misses the deadline.
4. **Answer** with the cheapest compiled candidate that fits: hours and dollars are the
   roofline (a lower bound) divided by the workload's stated efficiency (shared.plan.budget),
   times the dated price. The frontier is every compiled candidate no other beats on both
   hours and dollars.

GPUs (H100, H200) are listed beside the TPUs but never compiled here: jax 0.10.2 without a GPU
plugin cannot compile for a CUDA topology (`topologies.get_topology_desc("h100", "cuda")`
raises NotImplementedError), so their rows carry the floor bytes (exact, on a mesh of the same
size), the FLOP bound, and hours and dollars from the cheapest TPU program's roofline at the
GPU's peak and bandwidth, marked "not compiler-checked" and never chosen. With a GPU attached,
plan mode compiles for it (`--target h100`).
"""

from __future__ import annotations

import dataclasses
import math

from shared import models, sizing
from shared.errors import BadInput, choose, positive
from shared.hardware import parse_target, prices, rent
from shared.plan import budget, verdict
from shared.plan.search import max_batch, unit_for
from shared.plan.target import target_devices
from shared.plan.verdict import Request, floor_verdict, plan_point
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
# tried in this order until one fits
REMATS = {"lora-train": ("none", "block"), "sft": ("none", "block"), "train": ("none", "block")}
MAX_COMPILED = 6  # candidates compiled before the search stops and says so
# A batch whose roofline cost per unit of work is within this of the least any larger batch
# could reach is large enough: cost is the question, and the rest would take ever larger
# batches (and compiles) for under a tenth off the bill.
COST_TOLERANCE = 0.10
GPU_WHY = "no CUDA compile here: floor bytes exact, hours from the TPU program's roofline"
GPU_NOTE = (
    "not compiler-checked: jax here cannot compile for a CUDA topology without a GPU; bytes "
    "are the exact floor on a mesh of the same size, hours the cheapest TPU program's FLOPs "
    "and bytes at the GPU's peak and bandwidth, at the same assumed efficiency"
)


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


def forward_tokens(request: Request, job: Job) -> float:
    """Tokens the job passes forward through the model at the least: each trained token once,
    each rollout's prompt and completion once, a GRPO step's batch once in the rollout, once
    more in the reference log-probs (beta > 0) and once in the policy update."""
    if job.unit == "tokens":
        return job.amount
    if job.unit == "sequences":
        return job.amount * (request.prompt_len + request.steps)
    passes = 2 + (request.beta > 0)
    return job.amount * request.batch * (request.prompt_len + request.steps) * passes


def matmul_weights(request: Request) -> int:
    """The request's model's matmul weights: a tunix model's from its shapes
    (models.matmul_weights), our ~130M pretraining model's from its dims (dense, every
    projection used)."""
    if request.workload == "train":
        parts = sizing.param_counts(pretrain_model.config(request.model).dims())
        return parts["attention"] + parts["mlp"]
    return models.matmul_weights(request.model)


def bound(request: Request, job: Job, target: str, kind: str) -> dict:
    """Hours and dollars no run of the job on `target` can beat: the forward FLOPs at peak."""
    slice_ = parse_target(target)
    flops = 2 * matmul_weights(request) * forward_tokens(request, job)
    hours = flops / slice_.peak_flops_total / budget.SECONDS_PER_HOUR
    try:
        dollars = hours * prices.price_per_hour(target, kind)
    except BadInput:  # no published price (tpu7x, h200): it cannot be ranked on dollars
        dollars = None
    return {"bound_hours": hours, "bound_dollars": dollars}


def roofline_terms(point: dict) -> tuple[float, float]:
    """A verdict's roofline terms, seconds: FLOPs at peak and bytes at HBM bandwidth."""
    chip = parse_target(point["target"]).chip
    return verdict.roofline_terms(
        chip, point["flops_per_device"], point["bytes_accessed_per_device"]
    )


def _smallest(request: Request, target: str) -> Request:
    """The request on `target` at its smallest batch (GRPO keeps the recipe's), default mesh."""
    on_target = dataclasses.replace(request, target=target, mesh=None)
    if request.workload == "grpo":
        return on_target
    return dataclasses.replace(on_target, batch=unit_for(on_target, None))


def _priced(point: dict, job: Job, kind: str) -> dict:
    est = budget.estimate(point, runs=runs(point, job), kind=kind)
    return {
        "batch": point["batch"],
        "remat": point["remat"],
        "mesh_shape": point["mesh_shape"],
        "hosts": point["hosts"],
        "bytes_per_device": point["bytes_per_device"],
        "hbm_bytes": point["hbm_bytes"],
        "runs": est["runs"],
        "roofline_hours": est["roofline_s"] / budget.SECONDS_PER_HOUR,
        "hours": est["estimated_s"] / budget.SECONDS_PER_HOUR,
        "dollars_at_roofline": est.get("dollars_at_roofline"),
        "dollars": est.get("dollars_estimated"),
        "assumed_efficiency": est["assumed_efficiency"],
        "efficiency_source": est["efficiency_source"],
        "price_read": est.get("price_read"),
    }


def large_enough(small: dict, double: dict) -> int:
    """The least batch whose roofline cost per unit of work is within COST_TOLERANCE of the
    least any batch could reach, from exact verdicts at one and two units: per run, FLOPs grow
    as b·f and bytes as w + b·a (the weights read once, the rest per sequence), so the cost
    per sequence, max(f/peak, (w/b + a)/bw), falls towards max(f/peak, a/bw) as b grows."""
    (f1, b1), (f2, b2) = roofline_terms(small), roofline_terms(double)
    unit = double["batch"] - small["batch"]
    per_seq_flops, per_seq_bytes = (f2 - f1) / unit, (b2 - b1) / unit
    weights = max(b1 - small["batch"] * per_seq_bytes, 0.0)
    floor = max(per_seq_flops, per_seq_bytes)
    if floor <= 0:  # nothing grows with the batch: the larger one is as good as any
        return double["batch"]
    return math.ceil(weights / ((1 + COST_TOLERANCE) * floor - per_seq_bytes))


def compile_candidate(request: Request, job: Job, kind: str, *, use_cache: bool) -> dict:
    """Exact verdicts for one slice: the smallest batch (with the remat that fits); when its
    step is memory-bound, twice that, and then the largest batch up to the one that is large
    enough (`large_enough`). The cheapest of them priced, or why none fits."""
    compiles = 0

    def exact(req: Request) -> dict:
        nonlocal compiles
        point = plan_point(req, use_cache=use_cache)
        compiles += not point["cached"]
        return point

    for remat in REMATS.get(request.workload, (request.remat,)):
        request = dataclasses.replace(request, remat=remat)
        point = exact(request)
        if point["fits"]:
            break
    if not point["fits"]:
        return {
            "status": "does not fit",
            "why": f"batch {point['batch']} needs {point['bytes_per_device'] / 2**30:.2f} GiB "
            f"a device of {point['hbm_bytes'] / 2**30:.2f} (exact compile)",
            "compiles": compiles,
        }
    points = [point]
    flops_s, bytes_s = roofline_terms(point)
    if bytes_s > flops_s and request.workload != "grpo":  # GRPO keeps its recipe's batch
        double = exact(dataclasses.replace(request, batch=2 * request.batch))
        if double["fits"]:
            points.append(double)
            enough = large_enough(point, double)
            if enough > double["batch"]:
                searched = max_batch(request, ceiling=enough, use_cache=use_cache, progress=False)
                compiles += searched["compiles"]
                points += [p for p in searched["probes"] if not p["fast"] and p["fits"]]
    best = min(points, key=lambda p: p["roofline_lower_bound_s"] / _work(p, job))
    flops_s, bytes_s = roofline_terms(best)
    return {
        "status": "fits",
        "compute_bound": flops_s >= bytes_s,
        "compiles": compiles,
        # the whole program's FLOPs and bytes per unit of work (all devices): what a GPU row
        # is estimated from
        "flops_per_unit": best["flops_per_device"] * best["devices"] / _work(best, job),
        "bytes_per_unit": best["bytes_accessed_per_device"] * best["devices"] / _work(best, job),
        **_priced(best, job, kind),
    }


def _work(point: dict, job: Job) -> float:
    """The job's units one run of the verdict does (a GRPO run is one step)."""
    if job.unit == "tokens":
        return point["batch"] * point["seq"]
    return point["batch"] if job.unit == "sequences" else 1


# workload -> the notebook that runs it on a TPU VM (make tpu-execute NB=...)
NOTEBOOK = {"rollout": "01", "lora-rollout": "01", "lora-train": "02", "train": "04", "grpo": "07"}


def _tpu_rows(request: Request, job: Job, kind: str, slices: tuple[str, ...]) -> list[dict]:
    """Every TPU slice with its floor verdict: excluded, or a candidate with its bound."""
    rows = []
    for chip in rent.TPU_SLICES:
        for target in (t for t in slices if parse_target(t).chip.name == chip):
            slice_ = parse_target(target)
            row = {"target": target, "chip": chip, "chips": slice_.chips, "hosts": slice_.hosts}
            try:
                small = _smallest(request, target)
                floor = floor_verdict(small)
            except BadInput as err:  # no mesh of this slice shards the model or the batch
                rows.append({**row, "status": "excluded", "why": str(err)})
                continue
            row.update(batch=small.batch, floor_bytes=floor["floor_bytes"])
            row.update(hbm_bytes=floor["hbm_bytes"], mesh_shape=floor["mesh_shape"])
            if not floor["fits"]:
                row.update(
                    status="excluded",
                    why=f"weights, state and batch {small.batch}'s inputs need "
                    f"{floor['floor_bytes'] / 2**30:.2f} GiB a device of "
                    f"{floor['hbm_bytes'] / 2**30:.2f} (arithmetic, no compile)",
                )
            else:
                row.update(status="candidate", request=small, **bound(request, job, target, kind))
            rows.append(row)
    return rows


def _gpu_rows(request: Request, job: Job, kind: str, program: dict | None) -> list[dict]:
    """H100/H200 slices: floor bytes on a mesh of the same size (a TPU topology's devices stand
    in: the bytes depend on the mesh's shape only), the FLOP bound, and where a TPU candidate
    was compiled (`program`), hours and dollars from that program's roofline moved to the
    GPU: its FLOPs at the GPU's peak or its bytes at the GPU's bandwidth, whichever is slower."""
    stand_in = target_devices(parse_target("v5e-8"))
    rows = []
    for chip, slices in rent.GPU_SLICES.items():
        for target in slices:
            slice_ = parse_target(target)
            small = dataclasses.replace(request, target=target, mesh=None)
            if request.workload != "grpo":
                small = dataclasses.replace(small, batch=slice_.chips)
            row = {"target": target, "chip": chip, "chips": slice_.chips, "hosts": 1}
            try:
                floor = floor_verdict(small, stand_in[: slice_.chips])
            except BadInput as err:
                rows.append({**row, "status": "excluded", "why": str(err), "gpu": True})
                continue
            row.update(batch=small.batch, floor_bytes=floor["floor_bytes"], gpu=True)
            row.update(hbm_bytes=floor["hbm_bytes"], mesh_shape=floor["mesh_shape"])
            row.update(bound(request, job, target, kind))
            row.update(status="not compiler-checked", why=GPU_WHY, fits_floor=floor["fits"])
            if floor["fits"] and program:
                efficiency = budget.EFFICIENCY[request.workload].fraction
                bandwidth = slice_.chip.hbm_bandwidth * slice_.chips
                roofline = max(
                    program["flops_per_unit"] / slice_.peak_flops_total,
                    program["bytes_per_unit"] / bandwidth,
                )
                seconds = roofline * job.amount / efficiency
                row["hours"] = seconds / budget.SECONDS_PER_HOUR
                if row["bound_dollars"] is not None:
                    row["dollars"] = row["hours"] * prices.price_per_hour(target, kind)
            rows.append(row)
    return rows


def _order(row: dict) -> tuple:
    unpriced = row["bound_dollars"] is None
    return (unpriced, row["bound_dollars"] or 0.0, row["chips"])


def _settles(row: dict, smaller: dict | None) -> str | None:
    """Why larger slices of `row`'s chip need no compile, or None. Compute-bound: a larger
    slice cannot lower the cost per token (FLOPs per token do not fall). A search heuristic,
    not a bound: when the next size up saved less than COST_TOLERANCE, a larger slice buys
    speed, not savings, and is not compiled (its row says so)."""
    if row["compute_bound"]:
        return (
            f"{row['target']} is compute-bound and fits: a larger {row['chip']} slice "
            "cannot lower the cost per token"
        )
    if (
        smaller
        and row["dollars_at_roofline"] >= (1 - COST_TOLERANCE) * smaller["dollars_at_roofline"]
    ):
        return (
            f"{row['target']} cost within {COST_TOLERANCE:.0%} of {smaller['target']}: a "
            "larger slice buys speed, not savings (not compiled)"
        )
    return None


def cheapest(
    request: Request,
    amount: float,
    *,
    kind: str = "on-demand",
    within_hours: float | None = None,
    slices: tuple[str, ...] = rent.ALL_TPU_SLICES,
    max_compiled: int = MAX_COMPILED,
    use_cache: bool = True,
    progress: bool = True,
) -> dict:
    """Every rented slice for `amount` units of the request's workload, and the cheapest that
    fits (see the module docstring for the order of the work)."""
    from tqdm.auto import tqdm

    job = job_for(request.workload, amount)
    choose("price kind", kind, prices.HOURLY_KINDS)
    if within_hours is not None:
        positive(within_hours=within_hours)
    efficiency = budget.EFFICIENCY[request.workload].fraction
    for target in slices:
        if not parse_target(target).chip.is_tpu:
            raise BadInput(f"--cheapest compiles TPU slices, not {target} (GPUs are listed beside)")
    rows = _tpu_rows(request, job, kind, slices)
    best, compiled = None, 0
    settled: dict[str, str] = {}  # chip -> why its larger slices are not compiled
    last: dict[str, dict] = {}  # chip -> its largest compiled slice that fits
    bar = tqdm(desc=f"cheapest slice for {request.model}", unit="slice", disable=not progress)
    for row in sorted((r for r in rows if r["status"] == "candidate"), key=_order):
        small = row.pop("request")
        if row["bound_dollars"] is None:
            row.update(status="no price", why=f"no {kind} price: it cannot be ranked on dollars")
        elif within_hours and row["bound_hours"] / efficiency > within_hours:
            row.update(
                status="too slow",
                why=f"even its FLOP bound takes {row['bound_hours'] / efficiency:.3g} h at "
                f"{efficiency:.0%} (over {within_hours:g} h)",
            )
        elif best and row["bound_dollars"] >= best["dollars_at_roofline"]:
            row.update(
                status="cannot win",
                why=f"its FLOP bound ${row['bound_dollars']:,.4g} is not below "
                f"{best['target']}'s ${best['dollars_at_roofline']:,.4g} at the roofline",
            )
        elif row["chip"] in settled:
            row.update(status="not needed", why=settled[row["chip"]])
        elif compiled >= max_compiled:
            row.update(status="not compiled", why=f"the search stops at {max_compiled} slices")
        else:
            bar.set_postfix(slice=row["target"])
            row.update(compile_candidate(small, job, kind, use_cache=use_cache))
            compiled += 1
            bar.update()
            if row["status"] != "fits":
                continue
            if within_hours and row["hours"] > within_hours:
                row["why"] = f"misses {within_hours:g} h"
                continue
            if best is None or row["dollars_at_roofline"] < best["dollars_at_roofline"]:
                best = row
            settle = _settles(row, last.get(row["chip"]))
            if settle:
                settled[row["chip"]] = settle
            last[row["chip"]] = row
    bar.close()
    fitting = [
        r
        for r in rows
        if r["status"] == "fits" and (within_hours is None or r["hours"] <= within_hours)
    ]
    rows += _gpu_rows(request, job, kind, best)
    return {
        "request": dataclasses.asdict(request),
        "job": dataclasses.asdict(job),
        "price_kind": kind,
        "within_hours": within_hours,
        "rows": rows,
        "choice": best,
        "frontier": frontier(fitting),
        "compiled_slices": compiled,
        "compiles": sum(r.get("compiles", 0) for r in rows),
        "commands": commands(request.workload, best, kind) if best else None,
    }


def frontier(rows: list[dict]) -> list[dict]:
    """The rows no other row beats on both hours and dollars, fastest first."""
    return sorted(
        (
            r
            for r in rows
            if not any(
                q["hours"] <= r["hours"]
                and q["dollars"] <= r["dollars"]
                and (q["hours"], q["dollars"]) != (r["hours"], r["dollars"])
                for q in rows
            )
        ),
        key=lambda r: r["hours"],
    )


def commands(workload: str, choice: dict, kind: str) -> dict:
    """The commands that rent the chosen slice and run the workload's notebook on it."""
    notebook = NOTEBOOK.get(workload)
    return {
        "create": rent.create_command(choice["target"], spot=kind == "spot"),
        "run": rent.run_command(notebook) if notebook else None,
    }
