"""Notebook 05's plumbing: the real sweep's price, the checks of this run against the committed
sweep, and the summary table.

The notebook tells the story (the search space, the price, the trials, the basin); the
bookkeeping between those steps lives here, so that each is one line there: whether the real
trial's step comes from this run's compile (plan mode) or from notebook 04's committed plan,
which committed trials can be compared with this run's and how closely, and how the answer
reads as a table. The committed files are `benchmarks/results/05_sweep_cpu.json` (the CPU sweep)
and `04_pretrain_plan.json` (the compiled 130m train step the real sweep is priced with).

This module sits above `shared.plan` (it compiles and prices), as a recipe does; nothing in
`shared.plan` or the sweep runner imports it.
"""

import yaml

from shared import plan, report
from shared.paths import ROOT
from shared.plan.slices import budget
from shared.sweep import config as sweep_config
from shared.sweep.results import recommend
from shared.sweep.settings import HparamSweep

SWEEP, PLAN = "05_sweep_cpu", "04_pretrain_plan"  # the committed result files the Takeaway quotes
YAML = ROOT / "notebooks" / "05_sweep.yaml"
COST_COLUMNS = (
    "target",
    "runs",
    "roofline_s",
    "assumed_efficiency",
    "estimated_s",
    "price_kind",
    "dollars_per_hour",
    "dollars_estimated",
    "price_read",
)


def quoted(table: str) -> list[dict]:
    """A table of the committed CPU sweep; empty where the file is not there (a package
    installed without the repository, as on Colab)."""
    return (report.committed(SWEEP) or {}).get("tables", {}).get(table, [])


def check_yaml() -> bool | None:
    """In a clone, whether notebooks/05_sweep.yaml (what `wandb sweep` reads) still equals the
    package's copy (what an install without the repository runs); None without the YAML."""
    if not YAML.exists():
        return None
    same = yaml.safe_load(YAML.read_text()) == sweep_config.NOTEBOOK_05
    print(
        f"{YAML.name} {'equals' if same else 'DIFFERS from'} the package's copy "
        f"(shared.sweep.config.NOTEBOOK_05){'' if same else ': change both'}"
    )
    return same


# ---------------------------------------------------------------------------- the price


def real_request(setting: HparamSweep) -> plan.Request:
    """A real trial's train step on TARGET: REAL_TRIAL's model at its batch x seq."""
    trial = setting.real_trial
    return plan.Request(
        "train", trial["model"], setting.target, batch=trial["batch"], seq=trial["seq"]
    )


def real_point(setting: HparamSweep, mode: str) -> dict | None:
    """The real trial's step verdict: compiled for TARGET in plan mode, else read from
    notebook 04's committed plan (v6e-1 and v5e-8), so that local and device mode price the
    sweep without compiling. None, saying how to get one, where neither has it."""
    request = real_request(setting)
    if mode == "plan":
        return plan.plan_point(request)
    point = report.committed_verdict(PLAN, request)
    if point is None:
        print(
            f"no compiled {request.model} train step for {setting.target} in the committed plan "
            "file: run this notebook with MODE='plan' (or notebook 04's plan mode) to price "
            "the sweep there"
        )
    return point


def sweep_cost(setting: HparamSweep, point: dict, trials: int) -> dict:
    """Hours and dollars of `trials` real trials: trials x steps train steps at the roofline
    (a lower bound), at budget's named MFU assumption, at a dated PRICE_KIND price. Start-up,
    compilation and each trial's held-out evaluation come on top."""
    steps = trials * setting.real_trial["steps"]
    est = budget.estimate(point, runs=steps, kind=setting.price_kind)
    tokens = steps * point["batch"] * point["seq"]
    print(
        f"{trials} trials x {setting.real_trial['steps']} steps = {steps:,} train steps "
        f"({tokens:.3g} tokens); one run below is one step:\n" + budget.describe(est)
    )
    return est


def cost_row(est: dict) -> dict:
    """The sweep cost table's row: the estimate's times, assumption and dollars."""
    return {k: est.get(k) for k in COST_COLUMNS}


def check_cost(est: dict) -> None:
    """The sweep's dollars against the committed run's, where it priced the same target."""
    committed = quoted("sweep_cost")
    if committed and committed[0]["target"] == est["target"]:
        report.agree(
            f"the sweep's dollars on {est['target']}",
            round(est["dollars_estimated"], 2),
            round(committed[0]["dollars_estimated"], 2),
            rel=1e-6,
        )


# ---------------------------------------------------------------------------- the checks


def check_trials(done: list[dict], best: dict | None, metric: str, goal: str) -> bool:
    """This run's trials against the committed sweep's, where they share settings (trial ids).

    Trials are deterministic on the same CPU; another CPU rounds differently, which moves the
    fourth digit at most up to the best learning rate, while above it training is unstable
    (lr 0.03, wd 0.1 gave 6.95 and 7.08 on two 2-core x86 hosts). So the trials at or below
    the committed best lr are compared (the furthest from its committed twin is reported),
    and the best lr itself when every committed trial ran. False when no trial is shared."""
    same = {r["trial_id"]: r for r in quoted("trials") if r["status"] == "done"}
    mine = [r for r in done if r["trial_id"] in same]
    if not mine:
        return False
    best_lr = recommend(list(same.values()), metric, goal)["best"]["lr"]
    stable = [r for r in mine if r["lr"] <= best_lr]
    if stable:
        worst = max(stable, key=lambda r: abs(r[metric] - same[r["trial_id"]][metric]))
        report.agree(
            f"{metric} of the trial furthest from the committed one at lr <= {best_lr} "
            f"(lr {worst['lr']}, wd {worst['wd']})",
            round(worst[metric], 4),
            round(same[worst["trial_id"]][metric], 4),
            rel=1e-3,
        )
    if len(mine) == len(same):
        report.agree("best learning rate", best["lr"], best_lr)
    return True


def predicted_vs_measured(setting: HparamSweep, point: dict, est: dict, done: list[dict]) -> dict:
    """Device mode: the plan's step time (roofline and estimate) beside the median measured
    step of the trials (batch x seq tokens at each trial's tokens/s)."""
    measured = sorted(setting.batch * setting.seq / r["tok_per_s"] for r in done if r["tok_per_s"])
    return {
        "target": setting.target,
        "roofline step (s)": point["roofline_lower_bound_s"],
        "estimated step (s)": est["estimated_s"] / est["runs"],
        "measured step, median of trials (s)": measured[len(measured) // 2],
    }


# ---------------------------------------------------------------------------- the answer

EDGE = {None: "no", "low": "yes, the lowest: widen below", "high": "yes, the highest: widen above"}


def summary(
    setting: HparamSweep, advice: dict, metric: str, done: int, run: int, est: dict | None
) -> list[dict]:
    """The answer as question / answer rows: the best lr and wd, its score, whether it sits at
    the grid's edge, the basin, how many trials finished, and what the real sweep costs."""
    best, basin = advice["best"] or {}, advice["basin"]
    cost = None
    if est is not None:
        hours = est["estimated_s"] / 3600
        cost = f"${est['dollars_estimated']:,.2f}, about {hours:.3g} h"
    return [
        {
            "question": "best learning rate, weight decay",
            "answer": f"{best['lr']}, {best['wd']}" if best else None,
        },
        {"question": f"best {metric}", "answer": f"{best[metric]:.4f}" if best else None},
        {"question": "best lr at the edge of the grid", "answer": EDGE[advice["edge"]]},
        {
            "question": f"lr basin (within {setting.basin_tolerance:.0%})",
            "answer": f"{basin[0]:.3g} to {basin[1]:.3g}" if basin else None,
        },
        {"question": "trials finished / run", "answer": f"{done} / {run}"},
        {
            "question": f"the real sweep on {setting.target}, {setting.price_kind} price",
            "answer": cost,
        },
    ]
