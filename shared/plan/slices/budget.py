"""Hours and dollars for a planned run: the roofline, an estimate at a stated efficiency, the bill.

The roofline (FLOPs at the chip's peak, or bytes at its HBM bandwidth, whichever is slower) is a
lower bound, never a prediction: no run is faster. An estimate divides it by an efficiency, and
that efficiency is an assumption, named here with where it comes from. Dollars come from
shared.hardware.prices (dated, sourced). Measured runs replace the assumption: the ledger holds
them.

    est = budget.estimate(point, runs=1000, kind="spot")   # point: a shared.plan verdict
    print(budget.describe(est))
    budget.for_tokens(point, 1e8)  # a fine-tune reading 1e8 tokens: steps, then estimate()
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from shared.errors import BadInput, choose, positive
from shared.hardware import parse_target, prices
from shared.hardware.sharding import mesh_name


@dataclass(frozen=True)
class Efficiency:
    """The fraction of the roofline a real run is assumed to reach, and why that number."""

    fraction: float
    source: str


_TRAINING = Efficiency(
    0.40,
    "assumed 40% MFU, the scaling book's LLaMA-3 training example; "
    "public TPU anchors: tpuchat 46.5% (130M, v6e), MaxText 45-67%",
)
_GENERATION = Efficiency(
    0.40,
    "assumed 40% of the roofline: no public measurement of tunix's "
    "Sampler efficiency is in hand; the ledger's device runs replace it",
)
EFFICIENCY = {
    "train": _TRAINING,
    "lora-train": _TRAINING,
    "sft": _TRAINING,
    "grpo": _TRAINING,
    "rollout": _GENERATION,
    "lora-rollout": _GENERATION,
    "forward": _GENERATION,
}
SECONDS_PER_HOUR = 3600.0


def estimate(point: dict, *, runs: float = 1, kind: str = "on-demand") -> dict:
    """Time and cost of `runs` runs of a planned workload on its target.

    Prices: the target's slice at `kind` (on-demand, spot, 1y, 3y); a target with no published
    price keeps its times and says why it has no dollars."""
    positive(runs=runs)
    choose("price kind", kind, prices.HOURLY_KINDS)
    efficiency = EFFICIENCY[point["workload"]]
    roofline_s = point["roofline_lower_bound_s"] * runs
    estimated_s = roofline_s / efficiency.fraction
    result = {
        "runs": runs,
        "target": point["target"],
        "roofline_s": roofline_s,
        "assumed_efficiency": efficiency.fraction,
        "efficiency_source": efficiency.source,
        "estimated_s": estimated_s,
        "price_kind": kind,
    }
    try:
        per_hour = prices.price_per_hour(point["target"], kind)
    except BadInput as err:
        return {**result, "dollars_per_hour": None, "no_price": str(err)}
    row = prices.lookup(parse_target(point["target"]).chip.name, kind)
    return {
        **result,
        "dollars_per_hour": per_hour,
        "price_read": row.read,
        "price_source": row.source,
        "dollars_at_roofline": per_hour * roofline_s / SECONDS_PER_HOUR,
        "dollars_estimated": per_hour * estimated_s / SECONDS_PER_HOUR,
    }


def for_tokens(point: dict, tokens: float, *, kind: str = "on-demand") -> dict:
    """A training run reading `tokens` tokens at a train-step verdict's batch x seq: its steps
    (the last one partly filled counts whole), then `estimate` of that many steps."""
    positive(tokens=tokens)
    steps = math.ceil(tokens / (point["batch"] * point["seq"]))
    return {**estimate(point, runs=steps, kind=kind), "tokens": tokens, "steps": steps}


def runs_in(point: dict, hours: float) -> dict:
    """How many runs of the workload fit in `hours`: at most (the roofline) and as estimated."""
    positive(hours=hours)
    est = estimate(point)
    seconds = hours * SECONDS_PER_HOUR
    return {
        "hours": hours,
        "at_most": _whole(seconds / est["roofline_s"]),
        "estimated": _whole(seconds / est["estimated_s"]),
        "assumed_efficiency": est["assumed_efficiency"],
        "efficiency_source": est["efficiency_source"],
    }


def session(point: dict, *, sequences_per_step: int, hours: float = 9.0) -> dict:
    """What `hours` on the verdict's target buy, one step being the verdict's workload (a GRPO
    step: `sequences_per_step` completions): steps at the roofline (a lower bound on step time,
    so "at most": never a prediction) and at this module's stated efficiency (an assumption,
    named with its source), and steps per dollar: Kaggle's v5e-8 is free within its quota; GCP
    on-demand and spot from shared.hardware.prices (dated)."""
    runs = runs_in(point, hours)
    per_step = sequences_per_step
    out = {
        "hours": hours,
        "target": point["target"],
        "mesh": mesh_name(point["mesh_shape"]) if "mesh_shape" in point else None,
        "sequences_per_step": per_step,
        "roofline_step_s": point["roofline_lower_bound_s"],
        "estimated_step_s": point["roofline_lower_bound_s"] / runs["assumed_efficiency"],
        "steps_at_most": runs["at_most"],
        "steps_estimated": runs["estimated"],
        "completions_estimated": runs["estimated"] * per_step,
        "assumed_efficiency": runs["assumed_efficiency"],
        "efficiency_source": runs["efficiency_source"],
    }
    for kind in ("on-demand", "spot"):
        est = estimate(point, runs=max(runs["estimated"], 1), kind=kind)
        if est["dollars_per_hour"] is not None:
            out[f"dollars_per_hour_{kind}"] = est["dollars_per_hour"]
            out[f"steps_per_dollar_{kind}"] = (
                3600 / out["estimated_step_s"] / est["dollars_per_hour"]
            )
            out["price_read"] = est["price_read"]
    if point["target"] == "v5e-8":
        quota = prices.lookup("kaggle-tpu", "quota")
        out["kaggle"] = (
            f"free: $0 within Kaggle's quota of {quota.value:g} {quota.unit} "
            f"(read {quota.read}), {prices.lookup('kaggle-tpu', 'session').value:g}"
            "-hour sessions"
        )
    return out


def describe(est: dict) -> str:
    """One paragraph: roofline, estimate with its assumption, and dollars with their date."""
    runs = f"{est['runs']:g} run{'s' if est['runs'] != 1 else ''}"
    text = (
        f"{runs} on {est['target']}: at least {_duration(est['roofline_s'])} (roofline, a "
        f"lower bound); about {_duration(est['estimated_s'])} at "
        f"{est['assumed_efficiency']:.0%} of it ({est['efficiency_source']})"
    )
    if est["dollars_per_hour"] is None:
        return f"{text}; no dollars: {est['no_price']}"
    return (
        f"{text}; ${est['dollars_estimated']:,.2f} at ${est['dollars_per_hour']:,.2f}/h "
        f"{est['price_kind']} (at the roofline ${est['dollars_at_roofline']:,.2f}; price "
        f"read {est['price_read']})"
    )


def _whole(runs: float) -> int:
    """Completed runs, forgiving float noise (3600 / 0.1 is 35999.99...)."""
    return int(runs + 1e-9)


def _duration(seconds: float) -> str:
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds * 1e3:.3g} ms"
