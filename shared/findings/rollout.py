"""Notebook 01's answer beside the committed one: which searches a run shows, and whether its
numbers still agree with those its Takeaway quotes.

Plan mode searches the largest batch itself; local and device mode compile nothing, so they
show the committed searches (benchmarks/results/01_rollout_tunix_semantics.json) and price the
committed verdicts. Either way each number the Takeaway quotes is checked against the file it
came from with `report.agree`. The notebook compiles and hands its searches here.
"""

from __future__ import annotations

import math

from shared import hardware, models, report
from shared.errors import BadInput
from shared.hardware import prices
from shared.plan.search import view
from shared.rollout.sweep import closed_form_bytes_per_device, closed_form_max_batch

QUOTED = "01_rollout_tunix_semantics"  # bench_tunix_semantics.py: both searches the Takeaway quotes
SETTING = ("model", "target", "prompt_len", "steps", "cache_size")  # what a search was made for
# benchmarks/bench_plan.py's rollout (plan_cpu.json): gemma3-1b, 256-token prompts, 1024 steps,
# 1312 KV slots, tunix 0.1.7, one chip per target.
PLAN_CPU = {"model": "gemma3-1b", "prompt_len": 256, "steps": 1024, "cache_size": 1312}


def setting_of(request) -> dict:
    """The setting a rollout request (a shared.plan.Request) sizes, as the committed file
    records it."""
    return {key: getattr(request, key) for key in SETTING}


def same_setting(quoted: dict | None, request) -> bool:
    """Whether the committed searches `quoted` were made for this request's setting (and the
    default layout: no MESH), so this run's answer must equal theirs."""
    return bool(quoted) and request.mesh is None and quoted["setting"] == setting_of(request)


def check_closed_form(quoted: dict | None) -> None:
    """Re-derive the committed setting's closed-form largest batches (weights plus one or two
    KV caches): local mode's check that the formulas still give the bounds the answer quotes."""
    if not quoted:
        print("no committed plan result here (benchmarks/results/): nothing to check against")
        return
    setting = quoted["setting"]
    dims = models.model_dims(setting["model"])
    usable = hardware.parse_target(setting["target"]).chip.compiler_hbm_bytes
    where = f"{setting['model']} on {setting['target']}"
    for semantics, entry in quoted["semantics"].items():
        live = closed_form_max_batch(dims, usable, setting["cache_size"], semantics=semantics)
        report.agree(
            f"closed-form largest batch, {where}, tunix {semantics}",
            live,
            entry["closed_form_max_batch"],
        )


def search_evidence(found: dict, closed_max: int) -> str:
    """What a plan search (shared.plan.max_batch) compiled to find its answer."""
    probes = found["probes"]
    exact = sum(not p["fast"] for p in probes)
    return (
        f"evidence: {len(probes)} probes ({exact} exact), {found['compiles']} compiled now in "
        f"{found['wall_s']:.0f} s; closed form: {closed_max}"
    )


def exact_points(probes: list[dict], semantics: str) -> dict:
    """PLAN_BATCHES' answer, shaped like a search: the exact verdicts at the batches asked for
    and the largest of them that fits (0 when none does)."""
    fitting = [p["batch"] for p in probes if p["fits"]]
    refused = [p["batch"] for p in probes if not p["fits"]]
    print(f"tunix {semantics}: fits at {fitting}, not at {refused}")
    return {"probes": probes, "max_batch": max([0, *fitting])}


def check_searches(
    searches: dict[str, dict], quoted: dict | None, request, plan_batches: list | None
) -> None:
    """This run's largest batches against the committed ones they must equal: the semantics
    searches (01_rollout_tunix_semantics.json) at the same setting, and tunix 0.1.7's at 256-token
    prompts (plan_cpu.json). Batches the user picked (PLAN_BATCHES) are not a search: no check."""
    same = same_setting(quoted, request) and plan_batches is None
    for semantics, found in searches.items():
        committed = quoted["semantics"].get(semantics, {}) if same else {}
        report.agree(
            f"largest batch, tunix {semantics}", found["max_batch"], committed.get("max_batch")
        )
    setting = setting_of(request)
    at_plan_cpu = all(setting[key] == value for key, value in PLAN_CPU.items())
    if "0.1.7" in searches and plan_batches is None and request.mesh is None and at_plan_cpu:
        bench = (report.committed("plan_cpu") or {}).get("rollout", {})
        report.agree(
            f"largest batch, 256-token prompts on {request.target} (plan_cpu.json)",
            searches["0.1.7"]["max_batch"],
            bench.get(request.target, {}).get("max_batch"),
        )


def searches_to_draw(
    searches: dict[str, dict], quoted: dict | None, tunix: tuple[str, ...], request
) -> tuple[dict[str, dict], dict]:
    """The searches to show and the setting they were made for: this run's, or where it ran
    none (local and device mode compile nothing), the committed ones for `tunix`."""
    if searches or not quoted:
        return searches, setting_of(request)
    print(f"the committed searches ({quoted['command']}, {quoted['date']}):")
    drawn = {s: quoted["semantics"][s] for s in tunix if s in quoted["semantics"]}
    return drawn, quoted["setting"]


def probe_rows(drawn: dict[str, dict]) -> list[dict]:
    """One row per compile of each search: the evidence behind every largest batch."""
    return [
        {"tunix": semantics, **row}
        for semantics, found in drawn.items()
        for row in view.probe_rows(found)
    ]


def field_points(quoted: dict | None, shown: dict) -> dict | None:
    """The field's measured points (200 ran, 256 ran out of HBM) where the figure shows the
    very setting they were taken at."""
    return quoted["field"] if quoted and shown == quoted["setting"] else None


def at_largest(searches: dict[str, dict]) -> dict[str, dict | None]:
    """Each search's exact verdict at its largest batch (None where no exact compile fits)."""
    return {
        semantics: next(
            (p for p in found["probes"] if not p["fast"] and p["batch"] == found["max_batch"]),
            None,
        )
        for semantics, found in searches.items()
    }


def compiler_vs_closed_form(
    at_max: dict[str, dict | None], dims, cache_size: int, fsdp: int, tp: int
) -> list[dict]:
    """At each largest batch: the compiler's bytes, the closed form's (weights plus KV copies),
    what the compiler adds, the executable that sets the limit, and one decode step's f32
    logits for scale."""
    rows = []
    for semantics, p in at_max.items():
        if p is None:
            continue
        closed = closed_form_bytes_per_device(dims, p["batch"], cache_size, fsdp, tp, semantics)
        rows.append(
            {
                "tunix": semantics,
                "batch": p["batch"],
                "compiler_bytes": p["bytes_per_device"],
                "closed_form_bytes": closed,
                "compiler_adds_bytes": p["bytes_per_device"] - closed,
                "worst": p["worst"],
                "worst_temp_bytes": p["executables"][p["worst"]]["temp_bytes"],
                "logits_f32_bytes": p["batch"] // fsdp * dims.V * 4,
            }
        )
    return rows


def points_to_price(searches: dict[str, dict], quoted: dict | None) -> dict[str, dict | None]:
    """The plan verdict at each largest batch, to price: this run's, or where it searched
    nothing, the committed ones."""
    if searches or not quoted:
        return at_largest(searches)
    print(f"from the committed plan verdicts for {quoted['setting']}:")
    target = quoted["setting"]["target"]
    return {
        semantics: {**entry["at_max"], "workload": "rollout", "target": target}
        for semantics, entry in quoted["semantics"].items()
    }


def measured_bill(row: dict, rollouts: int, target: str, kind: str, on_device: bool) -> str:
    """Hours (and dollars, where the device has a price) for `rollouts` at a measured row's
    batch and time; a CPU run has no price."""
    runs = math.ceil(rollouts / row["batch"])
    hours = runs * (row["prefill_s"] + row["decode_s"]) / 3600
    dollars = "no dollars for a CPU"
    if on_device:
        try:
            dollars = f"${prices.price_per_hour(target, kind) * hours:,.2f} {kind} on {target}"
        except BadInput as err:  # a device without a price: say so, keep the hours
            dollars = str(err)
    return (
        f"{rollouts:,} rollouts of {row['steps']} steps at batch {row['batch']} take "
        f"{hours:.3g} h; {dollars}"
    )
