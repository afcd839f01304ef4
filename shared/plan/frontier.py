"""What to change: the settings of a workload that no other setting beats on both memory and time.

A small grid over the workload's knobs (remat, micro-batches, loss, batch, ...) is compiled with
fast compiles first; the settings that fit and are not beaten on both bytes per device and
roofline seconds per sample survive, and only those are compiled exactly. The frontier is then
recomputed from the exact verdicts, and the setting to use on the target is the fastest one on
it (roofline seconds per sample; a lower bound on time, so it ranks settings, it does not
predict them). Every verdict is cached, so a second call costs nothing.
"""

from __future__ import annotations

import dataclasses
import itertools

from shared.errors import BadInput
from shared.plan.verdict import plan_point
from shared.plan.workloads.request import Request, request_of

# Knobs worth trying per workload; `batch` values here multiply the request's batch.
DEFAULT_GRIDS: dict[str, dict[str, list]] = {
    "lora-train": {
        "remat": ["none", "block"],
        "microbatches": [1, 2, 4],
        "loss": ["chunked", "full"],
    },
    "train": {"remat": ["none", "block"], "microbatches": [1, 2, 4]},
    "forward": {"logits": ["full", "topk"], "batch": [1, 2, 4]},
    "rollout": {"batch": [1, 2, 4, 8]},
    "lora-rollout": {"batch": [1, 2, 4, 8]},
    # GRPO: tunix's [B, T, V] log-probs or shared.grpo.token_logprobs' chunked ones, at 1x and
    # 2x the sequences per call of every phase (4 settings: each compiles every phase)
    "grpo": {"logps": ["tunix", "chunked"], "batch": [1, 2]},
}


def default_grid(request: Request) -> dict[str, list]:
    """DEFAULT_GRIDS for the request's workload, batches made absolute."""
    grid = DEFAULT_GRIDS.get(request.workload)
    if not grid:
        raise BadInput(
            f"no knobs to search for workload {request.workload!r}; "
            f"--frontier knows {', '.join(DEFAULT_GRIDS)}"
        )
    return {
        name: [request.batch * v for v in values] if name == "batch" else values
        for name, values in grid.items()
    }


def _settings(request: Request, grid: dict[str, list]) -> list[Request]:
    return [
        dataclasses.replace(request, **dict(zip(grid, values, strict=True)))
        for values in itertools.product(*grid.values())
    ]


def per_sample_s(point: dict) -> float:
    """Roofline seconds per batch element: comparable across batch sizes."""
    return point["roofline_lower_bound_s"] / point["batch"]


def pareto(points: list[dict]) -> list[dict]:
    """The fitting points no other fitting point beats on both bytes and seconds per sample."""
    fitting = [p for p in points if p["fits"]]
    return [
        p
        for p in fitting
        if not any(
            q["bytes_per_device"] <= p["bytes_per_device"]
            and per_sample_s(q) <= per_sample_s(p)
            and (q["bytes_per_device"], per_sample_s(q)) != (p["bytes_per_device"], per_sample_s(p))
            for q in fitting
        )
    ]


def knobs_of(point: dict, grid: dict[str, list]) -> dict:
    return {name: point[name] for name in grid}


def frontier(
    request: Request,
    grid: dict[str, list] | None = None,
    *,
    use_cache: bool = True,
    progress: bool = True,
) -> dict:
    """Compile the grid (fast), the survivors (exact); the frontier and the setting to use."""
    from tqdm.auto import tqdm

    grid = grid if grid is not None else default_grid(request)
    settings = _settings(request, grid)
    fast, invalid = [], []
    for setting in tqdm(
        settings,
        desc=f"frontier {request.workload} {request.model}",
        unit="setting",
        disable=not progress,
    ):
        try:
            fast.append(plan_point(dataclasses.replace(setting, fast=True), use_cache=use_cache))
        except BadInput as err:  # a combination the workload cannot run (batch vs micro-batches)
            invalid.append({**knobs_of(dataclasses.asdict(setting), grid), "why": str(err)})
    survivors = pareto(fast)
    exact = [
        plan_point(dataclasses.replace(request_of(p), fast=False), use_cache=use_cache)
        for p in tqdm(survivors, desc="exact compiles", unit="setting", disable=not progress)
    ]
    best = pareto(exact)
    choice = min(best, key=lambda p: (per_sample_s(p), p["bytes_per_device"]), default=None)
    return {
        "workload": request.workload,
        "model": request.model,
        "target": request.target,
        "grid": grid,
        "fast": fast,
        "exact": exact,
        "frontier": best,
        "invalid": invalid,
        "choice": choice,
        "compiles": sum(not p["cached"] for p in fast + exact),
    }


def describe(result: dict) -> str:
    """One line naming the setting to use, or saying that none fits."""
    where = f"{result['workload']} {result['model']} on {result['target']}"
    choice = result["choice"]
    if choice is None:
        return f"no setting in the grid fits {where}: {result['grid']}"
    knobs = ", ".join(f"{k}={v}" for k, v in knobs_of(choice, result["grid"]).items())
    return (
        f"use {knobs} for {where}: {choice['bytes_per_device'] / 2**30:.2f} GiB per device, "
        f"roofline {per_sample_s(choice) * 1e3:.3g} ms per sample (a lower bound); "
        f"{len(result['frontier'])} setting(s) on the frontier, {len(result['fast'])} tried"
    )


def plot(result: dict, ax) -> None:
    """Bytes per device against roofline seconds per sample: every setting, the frontier, the
    HBM the compiler allows and the chosen setting."""
    gib = 2**30
    for points, style, label in (
        (result["fast"], "o", "fast compile (approximate)"),
        (result["exact"], "s", "exact compile"),
    ):
        ax.plot(
            [per_sample_s(p) * 1e3 for p in points],
            [p["bytes_per_device"] / gib for p in points],
            style,
            alpha=0.6,
            label=label,
        )
    front = sorted(result["frontier"], key=per_sample_s)
    ax.plot(
        [per_sample_s(p) * 1e3 for p in front],
        [p["bytes_per_device"] / gib for p in front],
        "k-",
        label="frontier",
    )
    if result["fast"]:
        ax.axhline(
            result["fast"][0]["hbm_bytes"] / gib,
            color="red",
            ls="--",
            label="HBM the compiler allows",
        )
    if result["choice"] is not None:
        c = result["choice"]
        ax.plot(
            per_sample_s(c) * 1e3,
            c["bytes_per_device"] / gib,
            "*",
            ms=16,
            color="green",
            label="use this",
        )
    ax.set_xlabel("roofline ms per sample (lower bound)")
    ax.set_ylabel("bytes per device (GiB)")
    ax.set_title(f"What to change: {result['workload']} {result['model']} on {result['target']}")
    ax.legend(fontsize=7)
