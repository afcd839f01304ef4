"""What each question prints, shared by both command lines: a verdict at one batch, the
largest batch, what to change, the cheapest slice for a whole job, and the bill beside each.
The parsed arguments may lack a workload's other knobs (the sub-command line adds only those
it reads): a missing one takes Request's default."""

from __future__ import annotations

import dataclasses
import json

from shared import plan
from shared.errors import BadInput, choose
from shared.grpo.token_logprobs import IMPLEMENTATIONS
from shared.hardware import rent
from shared.lora import LOSSES
from shared.models import hf_config
from shared.plan import frontier
from shared.plan.atlas import answer
from shared.plan.cli.flags import FLAG_FIELDS
from shared.plan.cli.point_view import (
    describe_committed,
    describe_nearby,
    print_point,
    print_search,
)
from shared.plan.slices import budget, cheapest, job, view
from shared.rollout.sampler import SEMANTICS

# Request fields whose value is one of a few names: the name the error calls it, the valid ones
_CHOICES = {
    "logits": ("logits mode", ("full", "topk")),
    "loss": ("loss", LOSSES),
    "tunix": ("tunix semantics", SEMANTICS),
    "logps": ("log-prob implementation", IMPLEMENTATIONS),
}
# a workload's job unit -> the flag that gives its size
JOB_FLAGS = {"tokens": "tokens", "sequences": "sequences", "steps": "grpo_steps"}


def request_from(args, workload: str, target: str) -> plan.Request:
    """The plan request the parsed command line describes."""
    dests = {field: dest for dest, field in FLAG_FIELDS.items()}
    values = {}
    for field in dataclasses.fields(plan.Request):
        if field.name in ("workload", "target", "layers"):
            continue
        value = getattr(args, dests.get(field.name, field.name), field.default)
        if field.name in _CHOICES and value is not None:
            kind, valid = _CHOICES[field.name]
            value = choose(kind, value, valid)
        values[field.name] = value
    # names are case-insensitive (Gemma3-4B, V5E-8): every preset and slice is lower case (a
    # config.json's path is a path)
    if not hf_config.is_config(values["model"]):
        values["model"] = values["model"].lower()
    return plan.Request(workload=workload, target=target.lower(), **values)


def print_bill(point: dict, args) -> None:
    """Hours and dollars of the user's run: --runs runs, and what --hours buys."""
    if not point["fits"]:
        return
    print(f"  {budget.describe(budget.estimate(point, runs=args.runs, kind=args.price))}")
    if args.hours:
        fit = budget.runs_in(point, args.hours)
        print(
            f"  in {args.hours:g} h: at most {fit['at_most']:,} runs (roofline), about "
            f"{fit['estimated']:,} at {fit['assumed_efficiency']:.0%}"
        )


def fit(args, workload: str) -> int:
    """The verdict at --batch."""
    point = plan.plan_point(request_from(args, workload, args.target), use_cache=not args.no_cache)
    if args.json:
        print(json.dumps(point, indent=1))
        return 0
    print_point(point)
    print_bill(point, args)
    return 0


def max_batch(args, workload: str) -> int:
    """The largest batch: the atlas's committed search where it holds this request, else a
    search of exact compiles (an atlas cell nearby is named first)."""
    request = request_from(args, workload, args.target)
    if not args.no_cache and (row := answer.committed_search(request, args.multiple_of)):
        print(describe_committed(row, args.json))
        return 0
    if not args.json and (nearby := answer.nearby_cell(request)) is not None:
        print(describe_nearby(*nearby), flush=True)
    result = plan.max_batch(
        request, multiple_of=args.multiple_of, use_cache=not args.no_cache, progress=not args.json
    )
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print_search(result)
    for point in result["probes"]:
        if not point["fast"] and point["batch"] == result["max_batch"]:
            print_bill(point, args)
            break
    return 0


def change(args, workload: str) -> int:
    """What to change: the knobs' frontier, and the one to use."""
    request = request_from(args, workload, args.target)
    result = frontier.frontier(request, use_cache=not args.no_cache, progress=not args.json)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    for point in result["frontier"]:
        print_point(point)
    print(f"\n{frontier.describe(result)}; {result['compiles']} compiles")
    if result["choice"] is not None:
        print_bill(result["choice"], args)
    return 0


def cheapest_slice(args, workload: str) -> int:
    """Every slice's row for the whole job, the answer, the commands; the figure when asked."""
    unit = job.JOB_UNITS.get(workload)
    if unit is None:
        raise BadInput(
            f"--cheapest prices a whole job of {', '.join(job.JOB_UNITS)}, not {workload}"
        )
    amount = getattr(args, JOB_FLAGS[unit], None)
    if amount is None:
        flag = "--" + JOB_FLAGS[unit].replace("_", "-")
        raise BadInput(f"the cheapest slice for {workload} needs the job's size: {flag} N")
    # the slice is what this chooses: any target stands in until then
    request = request_from(args, workload, getattr(args, "target", None) or "v5e-1")
    result = cheapest.cheapest(
        request,
        amount,
        kind=args.price,
        within_hours=args.within_hours,
        slices=tuple(args.slices.split(",")) if args.slices else rent.ALL_SLICES,
        max_compiled=args.max_slices,
        minutes=args.minutes,
        use_cache=not args.no_cache,
        progress=not args.json,
    )
    if args.json:
        print(json.dumps(result, indent=1, default=str))
        return 0
    print(view.table(result))
    print()
    print(view.describe(result))
    if args.figure:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4.5))
        view.plot(result, ax)
        fig.tight_layout()
        fig.savefig(args.figure, dpi=120)
        print(f"  wrote {args.figure}")
    return 0
