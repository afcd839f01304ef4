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
# A learning rate tuned for one architecture is often wrong for the next: the default of one
# codebase can sit well above the basin of another's baseline. This notebook runs one sweep
# over peak learning rate × weight decay for a single ablation arm of notebook 04's model and
# reads the answer off the held-out loss: the best point, whether it sits at the edge of the
# searched range (then widen it) and how wide the basin is.
#
# The sweep is one wandb sweep config (`notebooks/05_sweep.yaml`). With a wandb account and
# `USE_WANDB = True` it is created on wandb and run by `wandb agent`; otherwise (the default)
# `shared.sweep` expands the same config locally (grid, or random with a seed; bayes falls back
# to random) and runs every trial as `python -m shared.train` in its own process, with offline
# wandb runs you can `wandb sync` later. Run it again after an interruption and only the
# missing trials run.
#
# Modes: `local` runs a handful of short trials of the tiny config on whatever JAX backend is
# present; `device` runs the sweep with the 130m config on the attached TPU/GPU (raise
# `STEPS`/`BATCH`/`SEQ` for the real question); `plan` predicts what it would cost on `TARGET`.

# %%
# On Colab or Kaggle: fetch this repository and install it (TPU extra included). In a clone
# set up with `make setup` this cell does nothing.
import os
import subprocess
import sys

HOSTED = {"colab": "/content", "kaggle": "/kaggle/working"}
host = ("colab" if "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ
        else "kaggle" if "KAGGLE_KERNEL_RUN_TYPE" in os.environ else None)
if host:
    root = os.path.join(HOSTED[host], "tpu-budget-lab")
    if not os.path.isdir(root):
        subprocess.run(["git", "clone", "--depth=1",
                        "https://github.com/tpu-budget-lab/tpu-budget-lab", root], check=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-r",
                        os.path.join(root, "requirements.txt")], check=True)
    os.chdir(root)
    sys.path.insert(0, root)

# %% tags=["parameters"]
MODE = "local"  # local | plan | device
TARGET = "v6e-1"  # the slice the sweep's cost is predicted for
MODEL = None  # shared.model config of every trial; None: "tiny" locally, "130m" in plan/device
RESULTS_DIR = "results/05_hparam_sweep"
SEED = 0  # random search's sampling seed and every trial's training seed
SWEEP_CONFIG = "notebooks/05_sweep.yaml"
ARM = {}  # architecture knobs over the YAML's arm, e.g. {"mlp": "relu2", "qk-norm": True}
USE_WANDB = False  # True: create the sweep on wandb and run `wandb agent` (needs an account)
COUNT = 8  # trials; a grid runs whole when COUNT is larger than it
STEPS = 30  # training steps per trial
WARMUP = 3  # linear warm-up steps (shared.train warms down over the last 20%)
BATCH = 8
SEQ = 128
VOCAB_SIZE = 4096  # the Shakespeare tokenizer's vocabulary
BASIN_TOLERANCE = 0.02  # the basin: learning rates within 2% of the best held-out loss
TOP_CURVES = 3  # loss curves of the best few trials
ASSUMED_MFU = 0.4  # the predicted cost assumes the trials reach this MFU on TARGET

# %%
import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display

from shared import hardware, model, report, sizing, sweep

report.check_mode(MODE)
out = report.results_dir(RESULTS_DIR)
MODEL = MODEL or ("tiny" if MODE == "local" else "130m")
# The notebook's parameters pin the config's fixed training settings and the arm.
config = sweep.load_config(SWEEP_CONFIG, {"config": MODEL, "steps": STEPS, "warmup": WARMUP,
                                          "batch": BATCH, "seq": SEQ, "vocab-size": VOCAB_SIZE,
                                          "seed": SEED, **ARM})
metric, goal = config["metric"]["name"], config["metric"].get("goal", "minimize")
sign = 1 if goal == "minimize" else -1  # sorts best first either way


def show(rows, name):
    """Save rows as CSV/JSON under RESULTS_DIR and display them as a table."""
    display(report.table(rows, out, name))


# %% [markdown]
# ## 1 · The search space
# Searched parameters, the ablation arm (architecture knobs fixed for the whole sweep) and the
# fixed training settings, as the YAML and this notebook's parameters give them.

# %%
trials = sweep.expand(config, COUNT, SEED)
print(f"sweep {sweep.sweep_name(config)!r}: method {config['method']}, {metric} "
      f"({goal}), arm {sweep.arm(config)}, {len(trials)} trials")
show(sweep.search_space(config), "search_space")

# %% [markdown]
# ## 2 · What the sweep costs
# Each trial trains `STEPS × BATCH × SEQ` tokens at `flops_per_token` (MaxText convention:
# 6 × matmul parameters plus causal attention). Predicted time = total FLOPs / (TARGET's bf16
# peak × `ASSUMED_MFU`), for this sweep's model and, for comparison, for every other model
# config at the same settings; start-up, compilation and the held-out evaluation come on top,
# and section 6 measures them. Plan mode has nothing of its own to compile: every trial runs
# notebook 04's train step, whose memory and roofline `04_pretrain_ablations` reports in plan
# mode for the same `TARGET`; a sweep only multiplies that step.

# %%
target = hardware.parse_target(TARGET)
sweep_tokens = len(trials) * STEPS * BATCH * SEQ
print(f"{len(trials)} trials × {STEPS} steps × {BATCH}×{SEQ} tokens = {sweep_tokens:,} training "
      f"tokens, on {TARGET} ({target.chips} × {target.chip.peak_bf16_flops / 1e12:.0f} TFLOP/s) "
      f"at {ASSUMED_MFU:.0%} MFU")
cost, predicted_s = [], None
for name in model.CONFIGS:
    dims = model.config(name, V=model.padded_vocab(VOCAB_SIZE), T=SEQ).dims()
    per_token = sizing.flops_per_token(dims, SEQ)
    seconds = sizing.training_seconds(sweep_tokens, per_token, target.peak_flops_total,
                                      ASSUMED_MFU)
    predicted_s = seconds if name == MODEL else predicted_s
    cost.append({"model": name + (" (this sweep)" if name == MODEL else ""),
                 "params": f"{sizing.param_counts(dims)['total'] / 1e6:.1f}M",
                 "FLOPs per token": f"{per_token:.3e}",
                 "FLOPs in the sweep": f"{sweep_tokens * per_token:.3e}",
                 "training time (s)": f"{seconds:.3g}",
                 "chip-hours": f"{seconds * target.chips / 3600:.3g}"})
show(cost, "predicted_cost")
if MODE == "plan":
    print(f"plan mode: the sweep compiles nothing of its own (see notebook 04's plan of the train "
          f"step on {TARGET}); this sweep's predicted training time: {predicted_s:.3g} s")

# %% [markdown]
# ## 3 · Run the sweep
# One process per trial (`python -m shared.train`); finished trials are read back instead of
# run again. Per-trial metrics, summary and log: `RESULTS_DIR/trials/<trial_id>/`; every trial:
# `RESULTS_DIR/trials.csv`.

# %%
rows = []
if MODE != "plan":
    if MODE == "device" and STEPS * BATCH * SEQ < 1e6:
        print(f"device mode: {STEPS} steps of {BATCH}×{SEQ} tokens is a smoke run for {MODEL}; "
              "raise STEPS/BATCH/SEQ (e.g. 2000 × 32×2048) for the learning-rate question")
    rows = sweep.run(config, out, COUNT, SEED, use_wandb=USE_WANDB)
    searched = [r["parameter"] for r in sweep.search_space(config) if r["kind"] != "constant"]
    display(pd.DataFrame(rows)[["trial_id", "status", *searched, metric, "final_loss",
                                "tok_per_s", "seconds", "reused", "error"]])
    if rows and all(r["status"] == "failed" for r in rows):
        raise RuntimeError(f"every trial failed; the first: {rows[0]['error']}")
done = sweep.usable(rows, metric)

# %% [markdown]
# ## 4 · Held-out loss against learning rate
# One line per weight decay; the star is the best trial, dotted lines bound the searched range.
# A best point at either end of what was tried means the basin's edge lies outside it.

# %%
if done:
    best = min(done, key=lambda r: sign * r[metric])
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for wd in sorted({r["wd"] for r in done}):
        points = sorted((r["lr"], r[metric]) for r in done if r["wd"] == wd)
        ax.plot(*zip(*points, strict=True), "o-", label=f"weight decay {wd}")
    ax.plot(best["lr"], best[metric], "*", color="black", markersize=16,
            label=f"best: lr {best['lr']:.3g}, wd {best['wd']}")
    for bound in sweep.search_bounds(config, "lr") or ():
        ax.axvline(bound, color="grey", ls=":")
    ax.set_xscale("log")
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel(f"{metric} (held-out, nats/token)")
    ax.set_title(f"{MODEL}, {STEPS} steps × {BATCH}×{SEQ} tokens: {metric} vs learning rate")
    ax.legend()
    report.save_figure(fig, out, "loss_vs_lr")
    plt.show()
else:
    print("no finished trial to plot" + (" (plan mode runs none)" if MODE == "plan" else ""))

# %% [markdown]
# ## 5 · Training curves of the best trials, and the recommendation

# %%
if done:
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for r in sorted(done, key=lambda r: sign * r[metric])[:TOP_CURVES]:
        curve = sweep.read_curve(out, r["trial_id"])
        ax.plot([c["step"] for c in curve], [c["loss"] for c in curve],
                label=f"lr {r['lr']:.3g}, wd {r['wd']}: {metric} {r[metric]:.3f}")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (nats/token)")
    ax.set_title(f"Training loss of the best {min(TOP_CURVES, len(done))} trials")
    ax.legend()
    report.save_figure(fig, out, "best_curves")
    plt.show()
advice = sweep.recommend(rows, metric, goal, BASIN_TOLERANCE)
print(advice["text"])

# %% [markdown]
# ## 6 · Predicted and measured time
# The prediction counts training FLOPs only; a short trial also pays for the process start,
# compilation and the full held-out evaluation. On a TPU with `TARGET` set to it the two
# training columns should agree to within the MFU assumption.

# %%
timed = [r for r in done if r["seconds"] and r["tok_per_s"]]
if timed:
    in_steps = sum(STEPS * BATCH * SEQ / r["tok_per_s"] for r in timed)
    wall = sum(r["seconds"] for r in timed)
    show([{"trials": len(timed),
           f"predicted training on {TARGET} (s)": f"{predicted_s * len(timed) / len(trials):.3g}",
           "measured training steps (s)": round(in_steps, 1),
           "measured wall time (s)": round(wall, 1),
           "start-up, compile, eval (s)": round(wall - in_steps, 1),
           "measured MFU (last step)": f"{sum(r['mfu'] for r in timed) / len(timed):.1%}"}],
         "predicted_vs_measured")

# %% [markdown]
# ## Summary

# %%
best = advice["best"] or {}
summary = [
    {"question": "best learning rate", "answer": best.get("lr")},
    {"question": "best weight decay", "answer": best.get("wd")},
    {"question": f"best {metric}", "answer": None if not best else f"{best[metric]:.4f}"},
    {"question": "best lr at the edge of what was tried",
     "answer": {None: "no", "low": "yes, the lowest: widen below",
                "high": "yes, the highest: widen above"}[advice["edge"]]},
    {"question": f"lr basin (within {BASIN_TOLERANCE:.0%})",
     "answer": None if not advice["basin"] else
     f"{advice['basin'][0]:.3g} to {advice['basin'][1]:.3g}"},
    {"question": "trials finished / run", "answer": f"{len(done)} / {len(rows)}"},
    {"question": f"predicted sweep training time on {TARGET}", "answer": f"{predicted_s:.3g} s"},
]
show(summary, "summary")
