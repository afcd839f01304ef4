"""Notebook 04's plumbing: each arm's summary row, the compiled verdicts as table rows, what an
arm costs, and the checks of this run's numbers against the committed ones its Takeaway quotes.

The notebook tells the story (train the arms, compile the step, search the batch, price an arm);
the bookkeeping between those steps lives here, so that each is one line there: which committed
row has this run's settings, whether a number comes from this run's compile or from the committed
plan (local and device mode price the real arm without compiling it), and which columns a row
keeps. The committed files are `benchmarks/results/04_pretrain_cpu.json` (the CPU arms) and
`04_pretrain_plan.json` (the compiler's verdicts, the fit, the arm's cost).

This module sits above `shared.plan` (it compiles and prices), as a recipe does; nothing in
`shared.plan` imports it.
"""

import json
from pathlib import Path

import jax
import numpy as np

from shared import hardware, plan, report, sizing
from shared.errors import BadInput
from shared.hardware import measure, prices
from shared.plan.slices import budget
from shared.pretrain import model
from shared.pretrain.settings import TPUCHAT_MFU, Ablations
from shared.report import ledger

CPU, PLAN = "04_pretrain_cpu", "04_pretrain_plan"  # the committed result files the Takeaway quotes
STEADY_FROM = 3  # steps 1-3 include compilation: tokens/s and MFU are medians after them
# A verdict's columns the notebook's tables keep (budget and notebook 05 read them back).
VERDICT_COLUMNS = (
    *report.VERDICT_KEY,
    "fits",
    "bytes_per_device",
    "resident_bytes",
    "hbm_bytes",
    "roofline_lower_bound_s",
    "flops_per_device",
    "compile_s",
    "versions",
)


def quoted(name: str, table: str) -> list[dict]:
    """A table of committed result file NAME; empty where the file or table is not there (a
    package installed without the repository, as on Colab)."""
    return (report.committed(name) or {}).get("tables", {}).get(table, [])


# ---------------------------------------------------------------------------- the arms


def skipped(arm: str) -> bool:
    """Whether `arm` cannot run here, saying why: the attention arm swaps in the backend's other
    kernel, and on a CPU the Pallas kernels only run interpreted."""
    if arm == "attention" and jax.devices()[0].platform == "cpu":
        print("attention arm skipped on CPU: the Pallas kernels only run interpreted here")
        return True
    return False


def read_curve(metrics: Path) -> list[dict]:
    """The per-step lines (training loss, tokens/s, MFU) of a run's metrics file."""
    lines = metrics.read_text().splitlines()
    return [r for r in map(json.loads, lines) if "loss" in r]


def arm_row(setting: Ablations, arm: str, summary: dict, curve: list[dict]) -> dict:
    """One arm's row of the ablations table: its held-out loss from the run's summary, tokens/s
    and MFU as medians of the steps after compilation."""
    steady = curve[STEADY_FROM:] or curve
    return {
        "arm": arm,
        "model": setting.model,
        "steps": setting.steps,
        "batch": setting.batch,
        "seq": setting.seq,
        **{k: summary[k] for k in ("params", "val_loss", "val_bpb", "mfu_peak")},
        "tok_per_s": float(np.median([r["tok_per_s"] for r in steady])),
        "mfu": float(np.median([r["mfu"] for r in steady])),
    }


def check_arms(rows: list[dict], setting: Ablations) -> None:
    """Each arm's held-out loss against the committed CPU run with the same model and shape.

    Losses are deterministic for a seed and versions (another CPU may differ in the last
    digits: 1e-3 relative is still agreement); tokens/s is a timing on a shared machine and is
    not checked."""
    shape = (setting.model, setting.steps, setting.batch, setting.seq)
    same = {
        r["arm"]: r
        for r in quoted(CPU, "ablations")
        if (r["model"], r["steps"], r["batch"], r["seq"]) == shape
    }
    for row in rows:
        if row["arm"] in same:
            committed = round(same[row["arm"]]["val_loss"], 4)
            report.agree(
                f"{row['arm']}: held-out loss", round(row["val_loss"], 4), committed, rel=1e-3
            )
    if rows and not same:
        print("no committed arm has this run's settings: nothing to compare")


def log_arms(rows: list[dict], setting: Ablations, here: str) -> None:
    """Device mode: each arm's step time and peak bytes into the ledger, beside the plan's
    prediction for the same step where the plan can compile it (baseline and microbatches:
    plan requests carry no architecture knobs). The peak is the process's high-water mark, so
    later arms read at least the earlier arms' peaks."""
    for r in rows:
        model_changes, train_changes = setting.changes(r["arm"])
        request = plan.Request(
            "train",
            setting.model,
            here,
            batch=setting.batch,
            seq=setting.seq,
            microbatches=train_changes.get("microbatches", 1),
        )
        predicted = None
        try:
            predicted = None if model_changes else plan.plan_point(request)
        except BadInput as err:
            print(f"no prediction for {r['arm']} on {here}: {err}")
        measured = ledger.row(
            "04_pretrain_ablations",
            workload="train",
            model=setting.model,
            batch=setting.batch,
            shape=f"seq {setting.seq}, arm {r['arm']}",
            status="ok",
            peak_bytes=measure.peak_bytes_per_device(),
            seconds=setting.batch * setting.seq / r["tok_per_s"],
            prediction=predicted,
        )
        ledger.append([measured])


# ---------------------------------------------------------------------------- plan mode


def verdict_row(request: plan.Request) -> dict:
    """A compiled verdict (plan mode) as a table row with the columns budget and notebook 05
    read."""
    point = plan.plan_point(request)
    return {k: point[k] for k in VERDICT_COLUMNS}


def keep(verdicts: list[dict], row: dict) -> dict:
    """Add `row` to `verdicts` unless a row for the same request is there; return the kept one
    (the table lists each compiled request once)."""
    key = tuple(row[k] for k in report.VERDICT_KEY)
    for old in verdicts:
        if tuple(old[k] for k in report.VERDICT_KEY) == key:
            return old
    verdicts.append(row)
    return row


def plan_by_batch(setting: Ablations) -> list[dict]:
    """The train step compiled on TARGET at each of PLAN_BATCHES, beside the closed form of
    `shared.sizing.training_memory` with the same choices (fp32 weights and Adam, no remat)."""
    chips = hardware.parse_target(setting.target).chips
    dims = model.config(setting.model, T=setting.seq).dims()
    verdicts = []
    for batch in setting.plan_batches:
        request = plan.Request("train", setting.model, setting.target, batch=batch, seq=setting.seq)
        row = keep(verdicts, verdict_row(request))
        memory = sizing.training_memory(
            dims, batch * setting.seq, chips=chips, remat="none", param_bytes=4, grad_bytes=4
        )
        row["formula_bytes"] = memory["per_chip"]
    return verdicts


def fit_row(setting: Ablations, search: dict, front: dict) -> dict:
    """The fit table's row: the largest batch that fits as it is, and the frontier's choice at
    the batch it was asked to make fit."""
    choice = front["choice"] or {}
    knobs = ("remat", "microbatches", "bytes_per_device", "roofline_lower_bound_s")
    return {
        "model": setting.model,
        "target": setting.target,
        "seq": setting.seq,
        "max_batch": search["max_batch"],
        "frontier_batch": setting.frontier_at(search["max_batch"]),
        **{f"choice_{k}": choice.get(k) for k in knobs},
    }


def check_fit(fit: dict) -> None:
    """The largest batch and the frontier's choice against the committed plan's, for the same
    model, target and sequence length."""
    same = (fit["model"], fit["target"], fit["seq"])
    committed = next(
        (f for f in quoted(PLAN, "fit") if (f["model"], f["target"], f["seq"]) == same), {}
    )
    for k in ("max_batch", "choice_microbatches", "choice_bytes_per_device"):
        report.agree(k.replace("_", " "), fit[k], committed.get(k))


def check_verdicts(verdicts: list[dict]) -> None:
    """Each compiled verdict's bytes per device against the committed one for the same request.
    The compiler is deterministic for its versions: any difference means they changed."""
    for v in verdicts:
        committed = report.committed_verdict(
            PLAN, plan.Request(**{k: v[k] for k in report.VERDICT_KEY})
        )
        report.agree(
            f"{v['model']} on {v['target']}, batch {v['batch']}: bytes per device",
            v["bytes_per_device"],
            committed and committed["bytes_per_device"],
        )


# ---------------------------------------------------------------------------- cost


def real_point(setting: Ablations, target: str, mode: str, verdicts: list[dict]) -> dict | None:
    """The real arm's train-step verdict on `target`: compiled in plan mode (and kept in
    `verdicts`), else read from the committed plan, so that local mode (a tiny stand-in) and
    device mode price the real arm without compiling it. None where neither has it."""
    arm = setting.real_arm
    request = plan.Request("train", arm["model"], target, batch=arm["batch"], seq=arm["seq"])
    if mode == "plan":
        return keep(verdicts, verdict_row(request))
    point = report.committed_verdict(PLAN, request)
    if point is None:
        print(f"no verdict for {request.model} on {target} committed: run plan mode to price it")
    return point


def arm_cost(setting: Ablations, point: dict) -> dict:
    """What one arm of TOKENS_PER_PARAM tokens per parameter costs on the verdict's target:
    its steps, hours at the roofline, at budget's assumed MFU and at tpuchat's measured 46.5%
    (counted its way, attention not halved), dollars at PRICE_KIND and on demand. On Kaggle's
    free v5e-8 what counts is sessions and weeks for all ARMS (9-hour sessions, 20 a week)."""
    dims = setting.real_dims()
    tokens = setting.tokens_per_param * sizing.param_counts(dims)["total"]
    est = budget.for_tokens(point, tokens, kind=setting.price_kind)
    print(
        f"one arm, {tokens:.3g} tokens = {est['steps']:,} steps (one run is one step): "
        + budget.describe(est)
    )
    name, hours = point["target"], est["estimated_s"] / 3600
    peak = hardware.parse_target(name).peak_flops_total
    palm = sizing.flops_per_token(dims, convention="palm")
    row = {
        "target": name,
        "model": point["model"],
        "tokens": tokens,
        "steps": est["steps"],
        "fits": point["fits"],
        "roofline_h": est["roofline_s"] / 3600,
        "estimated_h": hours,
        "assumed_mfu": est["assumed_efficiency"],
        "h_at_tpuchat_mfu": sizing.training_seconds(tokens, palm, peak, TPUCHAT_MFU) / 3600,
        "price_kind": setting.price_kind,
        "dollars": est.get("dollars_estimated"),
        "dollars_on_demand": prices.cost(name, hours, "on-demand"),
        "price_read": est.get("price_read"),
    }
    if name == "v5e-8":
        kaggle = prices.budget(hours * len(setting.arms), name)
        row["kaggle_sessions_all_arms"] = kaggle["kaggle_sessions"]
        row["kaggle_weeks_all_arms"] = kaggle["kaggle_weeks"]
    return row


def check_costs(costs: list[dict], price_kind: str) -> None:
    """Each target's dollars for one arm against the committed cost of the same arm."""
    for row in costs:
        same = (row["target"], row["model"], row["tokens"])
        committed = next(
            (c for c in quoted(PLAN, "arm_cost") if (c["target"], c["model"], c["tokens"]) == same),
            None,
        )
        report.agree(
            f"one arm's {price_kind} dollars on {row['target']}",
            round(row["dollars"], 2),
            committed and round(committed["dollars"], 2),
        )
