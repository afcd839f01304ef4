# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05 · Hyper-parameter sweep: which learning rate and weight decay for this arm?
#
# ## What we found
#
# **The question.** A learning rate tuned for one codebase is often wrong for the next: the
# field's seed result is a basin plot in which the common default of 3e-4 sat above the basin of
# the baseline. Which peak learning rate and weight decay should notebook 04's arm use?
#
# **On the CPU smoke sweep (2 shared cores, jax 0.10.2, 2026-11-23): peak learning rate 3e-3;
# weight decay does not matter here.** The sweep is the embedded default: a grid of 7 peak
# learning rates from 1e-4 to 1e-1 × weight decay 0 and 0.1, 14 trials of the tiny config (1.8M
# parameters), 30 steps of 8 × 128 tokens each. The best trial, lr 3e-3 with weight decay 0.1,
# reaches 6.580 nats/token held-out; 1e-2 is within 2% (6.615), so the basin spans 3e-3 to 1e-2,
# inside the grid. The field's 3e-4 lands at 7.965, 21% worse, and 1e-4 at 8.608; above the basin,
# 3e-2 and 1e-1 stall near 6.94. Weight decay 0.1 and 0 differ by less than 0.01 at every learning
# rate. This answers the tiny config's 30-step question only: short runs favour large learning
# rates, so the 130m's basin after thousands of steps lies lower, which is where the seed's 3e-4
# comes in. The sweep took 7.5 min here (about 30 s a trial).
#
# ![Held-out loss against peak learning rate](../docs/figures/05_lr_basin.png)
#
# **What the real sweep costs.** The same 14 trials, each 2000 steps of the 130m at 32 × 2048
# tokens (`REAL_TRIAL`), on one v6e chip: 28,000 train steps, at least 38 minutes (the roofline, a
# lower bound), about 1.6 h at 40% MFU, $0.87 at the spot price of $0.54/h or $4.31 on demand
# (read 2026-11-22), plus each trial's start-up, compile and evaluation (the compiler's roofline
# from notebook 04's plan, `shared.plan.budget`'s 40% assumption, the dated spot price of
# `shared.hardware.prices`).
#
# **What to do.** Run this notebook with `MODE="device"` on the slice you rent, so that every
# trial trains the 130m for `REAL_TRIAL`'s steps. Read the basin, not the single best point: if
# the best learning rate sits at an end of the grid, extend the grid that way before you trust
# it; inside a wide basin the exact value matters little, so take its middle. The numbers above
# come from `benchmarks/results/sweep_cpu.json`, made by `python benchmarks/record_notebook.py
# 05 --out benchmarks/results/sweep_cpu.json -- -p KEY_FIGURES True`; the run below checks its
# own against them.
#
# How it runs: the sweep is one wandb sweep config (`notebooks/05_sweep.yaml`, shipped with the
# package as `shared.sweep.config.NOTEBOOK_05` for installs without this repository, as on Colab).
# With a wandb account and `USE_WANDB = True`, wandb creates the sweep and `wandb agent` runs it;
# without one, `shared.sweep` expands the grid itself and runs each trial as `python -m
# shared.pretrain.train` in its own process, with offline wandb runs to `wandb sync` later. A
# restarted sweep runs only the trials that did not finish.

# %%
# On Colab or Kaggle: install this project as a package, with its pinned requirements (and
# jax's CUDA plugin on a GPU runtime). In a clone set up with `make setup` this does nothing.
import os
import shutil
import subprocess
import sys

if "google.colab" in sys.modules or "KAGGLE_KERNEL_RUN_TYPE" in os.environ:
    from importlib import metadata

    REPO = "tpu-budget-lab/tpu-budget-lab"
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "-r", f"https://raw.githubusercontent.com/{REPO}/main/requirements.txt",
                    f"git+https://github.com/{REPO}"], check=True)
    if shutil.which("nvidia-smi"):
        subprocess.run([*pip, f"jax[cuda12]=={metadata.version('jax')}"], check=True)

# %% tags=["parameters"]
MODE = "local"  # local | plan | device
TARGET = "v6e-1"  # the slice the real sweep is priced on (plan mode compiles its step there)
MODEL = None  # every trial's model config; None: "tiny" locally, REAL_TRIAL's elsewhere
RESULTS_DIR = "results/05_hparam_sweep"
SEED = 0  # every trial's training seed (and random search's sampling seed)
KEY_FIGURES = False  # True: also write the key figures to docs/figures/ (to commit)
SWEEP_CONFIG = None  # a wandb sweep YAML; None: the package's copy of notebooks/05_sweep.yaml
ARM = {}  # architecture knobs over the config's arm, e.g. {"mlp": "relu2", "qk-norm": True}
USE_WANDB = False  # True: create the sweep on wandb and run `wandb agent` (needs an account)
COUNT = None  # trials; None: the whole grid
STEPS = None  # training steps per trial; None: 30 locally, REAL_TRIAL's elsewhere
BATCH = None  # sequences per step; None: 8 locally
SEQ = None  # tokens per sequence; None: 128 locally
VOCAB_SIZE = None  # Shakespeare tokenizer; None: 4096 locally, MODEL's own V (32768) elsewhere
REAL_TRIAL = {"model": "130m", "steps": 2000, "batch": 32, "seq": 2048}  # a trial on a TPU
PRICE_KIND = "spot"  # on-demand | spot | 1y | 3y (shared.hardware.prices)
BASIN_TOLERANCE = 0.02  # the basin: trials within 2% of the best held-out loss
TOP_CURVES = 3  # loss curves of the best few trials

# %%
from shared import report

MODE = report.use_mode(MODE)

import matplotlib.pyplot as plt
import yaml

from shared import plan, sweep
from shared.paths import ROOT
from shared.plan import budget
from shared.pretrain import model
from shared.report import ledger
from shared.sweep import config as sweep_config

out = report.results_dir(RESULTS_DIR)
MODEL = report.by_mode(MODE, MODEL, "tiny", REAL_TRIAL["model"])
STEPS = report.by_mode(MODE, STEPS, 30, REAL_TRIAL["steps"])
BATCH = report.by_mode(MODE, BATCH, 8, REAL_TRIAL["batch"])
SEQ = report.by_mode(MODE, SEQ, 128, REAL_TRIAL["seq"])
VOCAB_SIZE = report.by_mode(MODE, VOCAB_SIZE, 4096, model.config(MODEL).V)  # = the plan's V
# The notebook's parameters pin the config's fixed training settings and the arm.
config = sweep.load_config(SWEEP_CONFIG or sweep_config.NOTEBOOK_05,
                           {"config": MODEL, "steps": STEPS, "warmup": max(1, STEPS // 10),
                            "batch": BATCH, "seq": SEQ, "vocab-size": VOCAB_SIZE, "seed": SEED,
                            **ARM})
metric, goal = config["metric"]["name"], config["metric"].get("goal", "minimize")
quoted = (report.committed("sweep_cpu") or {}).get("tables", {})

# %% [markdown]
# ## 1 · The search space
# Peak learning rate on a half-decade grid from 1e-4 to 1e-1 (3e-4, the field's default, and
# 3e-3, `shared.pretrain.train`'s, among them) × weight decay 0 or 0.1; the arm's architecture knobs
# and the training settings stay fixed.

# %%
trials = sweep.expand(config, COUNT, SEED)
print(f"sweep {sweep.sweep_name(config)!r}: {config['method']}, {len(trials)} trials of {MODEL}, "
      f"{STEPS} steps x {BATCH}x{SEQ} tokens; {metric} ({goal}); arm {sweep.arm(config)}")
report.show(sweep.search_space(config), out, "search_space")
yaml_path = ROOT / "notebooks" / "05_sweep.yaml"
if yaml_path.exists():  # in a clone: the YAML wandb reads and the package's copy must agree
    same = yaml.safe_load(yaml_path.read_text()) == sweep_config.NOTEBOOK_05
    print(f"{yaml_path.name} {'equals' if same else 'DIFFERS from'} the package's copy "
          f"(shared.sweep.config.NOTEBOOK_05){'' if same else ': change both'}")

# %% [markdown]
# ## 2 · What the real sweep costs
# On a TPU a trial is `REAL_TRIAL`: the 130m train step of notebook 04 at 32 × 2048 tokens,
# 2000 times. Plan mode compiles that step for `TARGET`; the other modes read its committed
# verdict (`benchmarks/results/pretrain_plan.json`, v6e-1 and v5e-8). `shared.plan.budget` turns
# trials × steps into hours at the compiler's roofline (a lower bound: no run is faster), at
# its named MFU assumption, and into dollars at a dated `shared.hardware.prices` row. Start-up,
# compilation and the held-out evaluation of each trial come on top.

# %%
real = plan.Request("train", REAL_TRIAL["model"], TARGET, batch=REAL_TRIAL["batch"],
                    seq=REAL_TRIAL["seq"])
point = (plan.plan_point(real) if MODE == "plan"
         else report.committed_verdict("pretrain_plan", real))
cost = []
if point is None:
    print(f"no compiled {real.model} train step for {TARGET} in the committed plan file: run this "
          f"notebook with MODE='plan' (or notebook 04's plan mode) to price the sweep there")
else:
    steps = len(trials) * REAL_TRIAL["steps"]
    est = budget.estimate(point, runs=steps, kind=PRICE_KIND)
    print(f"{len(trials)} trials x {REAL_TRIAL['steps']} steps = {steps:,} train steps "
          f"({steps * real.batch * real.seq:.3g} tokens); one run below is one step:\n"
          + budget.describe(est))
    cost = [{k: est.get(k) for k in ("target", "runs", "roofline_s", "assumed_efficiency",
                                     "estimated_s", "price_kind", "dollars_per_hour",
                                     "dollars_estimated", "price_read")}]
    report.show(cost, out, "sweep_cost")
    if quoted.get("sweep_cost") and quoted["sweep_cost"][0]["target"] == TARGET:
        report.agree(f"the sweep's dollars on {TARGET}", round(est["dollars_estimated"], 2),
                     round(quoted["sweep_cost"][0]["dollars_estimated"], 2), rel=1e-6)

# %% [markdown]
# ## 3 · Run the sweep
# One process per trial; finished trials are read back instead of run again. Per-trial metrics,
# summary and log: `RESULTS_DIR/trials/<trial_id>/`; every trial: `RESULTS_DIR/trials.csv`.
# A trial that crashes or is preempted is marked `failed` with the last line of its log in the
# `error` column, and the sweep goes on; re-running the cell retries only the failed ones. The
# committed CPU sweep took 7.5 min, about 30 s a trial, mostly start-up, compilation and the
# held-out evaluation: its first trial's 30 steps at 3,574 tokens/s are 9 s of its 39 s.

# %%
rows = []
if MODE != "plan":
    rows = sweep.run(config, out, COUNT, SEED, use_wandb=USE_WANDB)
    searched = [r["parameter"] for r in sweep.search_space(config) if r["kind"] != "constant"]
    report.show(rows, out, "trials", ["trial_id", "status", *searched, metric, "final_loss",
                                      "tok_per_s", "seconds", "reused", "error"])
    if rows and all(r["status"] == "failed" for r in rows):
        raise RuntimeError(f"every trial failed; the first: {rows[0]['error']}")
done = sweep.usable(rows, metric)
advice = sweep.recommend(rows, metric, goal, BASIN_TOLERANCE)
print(advice["text"] if MODE != "plan" else "plan mode runs no trial: section 2 is its answer")

# %% [markdown]
# ## 4 · The basin: held-out loss against learning rate
# One line per weight decay; the star is the best trial, the dotted lines mark the two defaults.
# A best point at either end of the grid means the basin's edge lies outside what was tried.

# %%
if done:
    best = advice["best"]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for wd in sorted({r["wd"] for r in done}):
        ax.plot(*zip(*sorted((r["lr"], r[metric]) for r in done if r["wd"] == wd), strict=True),
                "o-", label=f"weight decay {wd}")
    ax.plot(best["lr"], best[metric], "*", color="black", markersize=16,
            label=f"best: lr {best['lr']:.3g}, wd {best['wd']}")
    for lr, name in ((3e-4, "3e-4, the field's default"), (3e-3, "3e-3, shared.pretrain.train's")):
        ax.axvline(lr, color="grey", ls=":")
        ax.annotate(name, (lr, 0.97), xycoords=("data", "axes fraction"), rotation=90,
                    ha="right", va="top", fontsize=7, color="grey")
    ax.set_xscale("log")
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel(f"{metric} (held-out, nats/token)")
    ax.set_title(f"{MODEL}, {STEPS} steps x {BATCH}x{SEQ} tokens: held-out loss vs learning rate")
    ax.legend(fontsize=8)
    report.save_figure(fig, out, "lr_basin", key="05_lr_basin" if KEY_FIGURES else None)
    plt.show()

# %% [markdown]
# ## 5 · Training curves of the best trials
# Short runs favour large learning rates: a curve still falling steeply at the last step says
# the ranking may change with more steps, which is why the real answer needs the real trial.

# %%
if done:
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for r in sorted(done, key=lambda r: r[metric] if goal == "minimize" else -r[metric])[
            :TOP_CURVES]:
        curve = sweep.read_curve(out, r["trial_id"])
        ax.plot([c["step"] for c in curve], [c["loss"] for c in curve],
                label=f"lr {r['lr']:.3g}, wd {r['wd']}: {metric} {r[metric]:.3f}")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (nats/token)")
    ax.set_title(f"Training loss of the best {min(TOP_CURVES, len(done))} trials")
    ax.legend(fontsize=8)
    report.save_figure(fig, out, "best_curves", key="05_best_curves" if KEY_FIGURES else None)
    plt.show()

# %% [markdown]
# ## 6 · Does this run agree with the committed one?
# Trials are deterministic: the same parameters on the same versions give the same held-out loss
# on the same CPU. Another CPU rounds differently: up to the best learning rate that moves the
# fourth digit at most, above it training is unstable and the difference grows (lr 0.03, wd 0.1
# gave 6.95 and 7.08 on two 2-core x86 hosts). So only trials with the committed sweep's settings
# (the same trial ids) at or below its best learning rate are compared, and the best learning
# rate itself; tokens/s is a timing on a shared machine and is not.
# On a device, the measured step time stands beside the plan's estimate for the same step.

# %%
same = {r["trial_id"]: r for r in quoted.get("trials", []) if r["status"] == "done"}
mine = [r for r in done if r["trial_id"] in same]
if mine:
    best_lr = sweep.recommend(list(same.values()), metric, goal)["best"]["lr"]
    stable = [r for r in mine if r["lr"] <= best_lr]
    if stable:
        worst = max(stable, key=lambda r: abs(r[metric] - same[r["trial_id"]][metric]))
        report.agree(f"{metric} of the trial furthest from the committed one at lr <= {best_lr} "
                     f"(lr {worst['lr']}, wd {worst['wd']})", round(worst[metric], 4),
                     round(same[worst["trial_id"]][metric], 4), rel=1e-3)
    if len(mine) == len(same):
        report.agree("best learning rate", advice["best"]["lr"], best_lr)
elif MODE != "plan":
    print("no trial of this run has the committed sweep's settings: nothing to compare")
if MODE == "device" and point is not None and MODEL == real.model and done:
    measured = [BATCH * SEQ / r["tok_per_s"] for r in done if r["tok_per_s"]]
    report.show([{"target": TARGET, "roofline step (s)": point["roofline_lower_bound_s"],
                  "estimated step (s)": est["estimated_s"] / est["runs"],
                  "measured step, median of trials (s)": sorted(measured)[len(measured) // 2]}],
                out, "predicted_vs_measured")
    if ledger.plot(plt.subplots(figsize=(5, 4))[1], ledger.read()):  # shared.pretrain.train's rows
        plt.show()

# %% [markdown]
# ## 7 · Summary

# %%
best, basin = advice["best"] or {}, advice["basin"]
report.show([
    {"question": "best learning rate, weight decay",
     "answer": f"{best['lr']}, {best['wd']}" if best else None},
    {"question": f"best {metric}", "answer": f"{best[metric]:.4f}" if best else None},
    {"question": "best lr at the edge of the grid",
     "answer": {None: "no", "low": "yes, the lowest: widen below",
                "high": "yes, the highest: widen above"}[advice["edge"]]},
    {"question": f"lr basin (within {BASIN_TOLERANCE:.0%})",
     "answer": f"{basin[0]:.3g} to {basin[1]:.3g}" if basin else None},
    {"question": "trials finished / run", "answer": f"{len(done)} / {len(rows)}"},
    {"question": f"the real sweep on {TARGET}, {PRICE_KIND} price",
     "answer": f"${cost[0]['dollars_estimated']:,.2f}, about "
               f"{cost[0]['estimated_s'] / 3600:.3g} h" if cost else None},
], out, "summary")
