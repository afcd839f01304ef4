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
# # 04 · ~130M pretraining: ablations, MFU, will the step fit, and what the runs cost
#
# ## What we found
#
# **The question.** How do I get a ~130M model to high MFU, compare architecture knobs on equal
# terms, and will the train step fit the chip I rent? The public anchor is tpuchat: 46.5% MFU,
# 434k tokens/s for a 130M model on one v6e chip (50.9% later).
#
# **Will it fit: yes, with room (the real TPU compiler: libtpu 0.0.42.1, jax 0.10.2, compiled
# deviceless on 2026-11-23).** The 130m train step (163.6M parameters, fp32 weights and Adam
# state, bf16 compute, chunked loss) at 32 sequences of 2048 tokens needs 13.55 GiB per device on
# one v6e chip, of the 31.25 GiB the compiler allows; the largest batch that fits as it is, in
# multiples of 8, is 80 sequences (88 does not). Twice that fits only with a change: the frontier
# picks 160 sequences in 4 micro-batches of 40, no remat (20.08 GiB per device). The compiler's
# roofline for one step at 32 sequences is 82.0 ms, a lower bound set by the bytes the step moves:
# at most 799k tokens/s. Our 130m config at tpuchat's 46.5% MFU, counted its way (attention not
# halved), runs 434.9k tokens/s: the same FLOPs per token as tpuchat's model. Counted our way
# (MaxText) that speed is 41.7% MFU.
#
# ![What to change: bytes per device against roofline time](../docs/figures/04_frontier.png)
#
# **What an arm costs.** An arm of 20 tokens per parameter (3.27B tokens, 49,926 steps of
# 32 × 2048) on one v6e chip: at least 1.14 h (the roofline), about 2.84 h at the 40% that
# `shared.plan.budget` assumes, $1.55 at the spot price of $0.54/h, $7.68 on demand (prices read
# 2026-11-22); at tpuchat's measured 46.5% MFU it would take 2.09 h. On Kaggle's free v5e-8 an
# arm takes about 5.55 h (estimate), so all six arms need 4 9-hour sessions, 2 weeks of the
# 20-hour weekly quota.
#
# **The ablations here are a smoke test.** On 2 shared CPU cores, the tiny stand-in (1.8M
# parameters, 40 steps of 16 × 128 tokens) trains every arm but attention through the same code:
# held-out loss 6.148 nats/token for the baseline and 6.148 with 2 micro-batches (the same maths,
# as it should be), 6.172 with QK-norm, 6.339 with ReLU² and 6.682 with tied embeddings
# (`pretrain_cpu.json`, 2026-11-23). After 40 steps such differences are noise until another seed
# repeats them. Tokens/s (2.6k-3.5k) and MFU (28-34%) there are measured against the CPU's own
# matmul peak: a check of the code path, not MFU on a TPU. No TPU or GPU ran this notebook for
# these numbers; device mode measures them and logs each arm in the ledger beside the plan's
# prediction.
#
# ![Training loss of each ablation arm, tiny config on CPU](../docs/figures/04_ablation_curves.png)
#
# **What to do.** Check the fit and the frontier in plan mode before renting; run the arms in
# device mode on the slice (`make tpu-execute NB=04 PARAMS='-p MODE device'`) and set their
# tokens/s and MFU against the 46.5% anchor; then tune the winning arm's learning rate
# (notebook 05). The numbers above: `python benchmarks/record_notebook.py 04 --out
# benchmarks/results/pretrain_plan.json -- -p MODE plan -p KEY_FIGURES True` (compiler) and
# the same with `pretrain_cpu.json` and no MODE (CPU); each run below checks its own against them.
#
# The pieces: a flax nnx decoder (`shared.pretrain.model`), AdamW with fp32 gradient accumulation
# (`shared.pretrain.optim`), notebook 03's chunked loss (`shared.logits`) and a loop that resumes
# exactly after a kill (`shared.pretrain.train`, also `python -m shared.pretrain.train` on a TPU
# VM). MFU counts FLOPs the MaxText way (causal attention halved, `shared.sizing`): 11% below the
# PaLM way at T=2048.

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
TARGET = "v6e-1"  # plan mode: the chip to compile the train step for
MODEL = None  # None: "tiny" locally, REAL_ARM's ("130m") in plan and device mode
RESULTS_DIR = "results/04_pretrain_ablations"
SEED = 0
KEY_FIGURES = False  # True: also write the key figures to docs/figures/ (to commit)
STEPS = None  # per arm; None: 40 locally, 300 on a device
BATCH = None  # sequences per step; None: 16 locally, REAL_ARM's elsewhere (BATCH/2 must split
SEQ = None  # tokens per sequence; None: 128 locally, REAL_ARM's elsewhere   over the devices)
LR = 3e-3
WD = 0.1
VOCAB_SIZE = None  # Shakespeare tokenizer; None: 4096 locally, MODEL's own V (32768) elsewhere
ARMS = ["baseline", "relu2", "qk_norm", "tied", "microbatches", "attention"]
PLAN_BATCHES = [16, 32]  # plan mode: sequences per step to compile on TARGET
PLAN_SEARCH = True  # plan mode: also the largest batch and what to change (~15 compiles)
REAL_ARM = {"model": "130m", "batch": 32, "seq": 2048}  # an arm on a TPU: priced in every mode
FRONTIER_BATCH = None  # plan mode: the batch to make fit; None: twice the largest that fits
COST_TARGETS = ["v6e-1", "v5e-8"]  # where an arm is priced (Kaggle's free TPU is a v5e-8)
TOKENS_PER_PARAM = 20  # an arm's training tokens per parameter (Chinchilla's ratio)
PRICE_KIND = "spot"  # on-demand | spot | 1y | 3y (shared.hardware.prices); on-demand is shown too

# %%
from shared import report

MODE = report.use_mode(MODE)

import json

import jax
import matplotlib.pyplot as plt
import numpy as np

from shared import hardware, plan, sizing
from shared.errors import BadInput, choose
from shared.hardware import measure, prices
from shared.plan import budget, frontier
from shared.pretrain import model as model_lib
from shared.report import ledger

out = report.results_dir(RESULTS_DIR)
MODEL = report.by_mode(MODE, MODEL, "tiny", REAL_ARM["model"])
STEPS = report.by_mode(MODE, STEPS, 40, 300)
BATCH = report.by_mode(MODE, BATCH, 16, REAL_ARM["batch"])
SEQ = report.by_mode(MODE, SEQ, 128, REAL_ARM["seq"])
VOCAB_SIZE = report.by_mode(MODE, VOCAB_SIZE, 4096, model_lib.config(MODEL).V)  # = plan's V
quoted = {name: (report.committed(name) or {}).get("tables", {})
          for name in ("pretrain_cpu", "pretrain_plan")}
KEY = report.VERDICT_KEY



# %% [markdown]
# ## 1 · The model, and what 46.5% MFU means for it
# Parameters by part (`shared.sizing`) of the real arm, `REAL_ARM`'s model with its preset
# vocabulary (local mode trains a tiny stand-in with the same code). Training FLOPs per token in
# both conventions turn an MFU into tokens per second on one v6e chip.

# %%
arm_dims = model_lib.config(REAL_ARM["model"], T=REAL_ARM["seq"]).dims()
params = sizing.param_counts(arm_dims)
report.show([{"part": part, "params": count} for part, count in params.items()], out, "params")
per_token = {c: sizing.flops_per_token(arm_dims, convention=c) for c in ("maxtext", "palm")}
anchor = 0.465 * hardware.chip("v6e").peak_bf16_flops / per_token["palm"]
print(f"{arm_dims.name}: {params['total'] / 1e6:.1f}M parameters; training FLOPs per token at "
      f"T={arm_dims.T}: {per_token['maxtext']:.3e} (MaxText), {per_token['palm']:.3e} (PaLM); "
      f"46.5% MFU on one v6e chip is {anchor:,.0f} tok/s, counted tpuchat's (PaLM) way")

# %% [markdown]
# ## 2 · Ablation arms (local and device mode)
# Each arm changes one thing against the baseline and trains for the same steps on the same
# batches (batch i depends only on the seed and i). `attention` swaps in the backend's other
# implementation (xla on TPU and GPU, where the defaults are splash and cuDNN); on CPU the
# Pallas kernels only run interpreted, so that arm is skipped there. On CPU, MFU is measured
# against a CPU matmul peak: it checks the code path, it says nothing about a TPU.

# %%
ARM_CHANGES = {"baseline": ({}, {}), "relu2": ({"mlp": "relu2"}, {}),
               "qk_norm": ({"qk_norm": True}, {}), "tied": ({"tied": True}, {}),
               "microbatches": ({}, {"microbatches": 2}), "attention": ({"attention": "xla"}, {})}
runs, curves, rows = {}, {}, []
for arm in ARMS if MODE != "plan" else []:
    from shared.pretrain import train

    (model_changes, train_changes), metrics = ARM_CHANGES[choose("arm", arm, ARM_CHANGES)], \
        out / f"{arm}.jsonl"
    if arm == "attention" and jax.devices()[0].platform == "cpu":
        print("attention arm skipped on CPU: the Pallas kernels only run interpreted here")
        continue
    print(f"--- {arm}: {model_changes or ''} {train_changes or ''}")
    runs[arm] = run = train.train(train.TrainConfig(
        config=MODEL, model_overrides=model_changes, steps=STEPS, batch=BATCH, seq=SEQ, lr=LR,
        wd=WD, seed=SEED, vocab_size=VOCAB_SIZE, warmup=max(1, STEPS // 10), metrics=str(metrics),
        wandb_group="04_ablations", wandb_tags=(arm,), **train_changes))
    curves[arm] = [r for r in map(json.loads, metrics.read_text().splitlines()) if "loss" in r]
    steady = curves[arm][3:] or curves[arm]  # steps 1-3 include compilation
    rows.append({"arm": arm, "model": MODEL, "steps": STEPS, "batch": BATCH, "seq": SEQ,
                 **{k: run.summary[k] for k in ("params", "val_loss", "val_bpb", "mfu_peak")},
                 "tok_per_s": float(np.median([r["tok_per_s"] for r in steady])),
                 "mfu": float(np.median([r["mfu"] for r in steady]))})
if rows:
    report.show(rows, out, "ablations")
    fig, ax = plt.subplots(figsize=(7, 4))
    for arm, curve in curves.items():
        ax.plot([r["step"] for r in curve], [r["loss"] for r in curve], label=arm)
    ax.set(xlabel="step", ylabel="training loss (nats/token)",
           title=f"{MODEL}: {BATCH}x{SEQ} tokens per step, lr {LR:g}: one line per arm")
    ax.legend()
    report.save_figure(fig, out, "ablation_curves",
                       key="04_ablation_curves" if KEY_FIGURES else None)
    plt.show()

# %% [markdown]
# Held-out losses are deterministic for a given seed and versions (another CPU may differ in
# the last digits), so each arm is checked against the committed run with the same settings
# (tokens/s is a timing on a shared machine, not checked). On a device, each arm goes to the
# ledger with the plan's prediction for the same step where the plan can compile it (baseline
# and microbatches: plan requests carry no architecture knobs).

# %%
same = {r["arm"]: r for r in quoted["pretrain_cpu"].get("ablations", [])
        if (r["model"], r["steps"], r["batch"], r["seq"]) == (MODEL, STEPS, BATCH, SEQ)}
for r in (r for r in rows if r["arm"] in same):
    report.agree(f"{r['arm']}: held-out loss", round(r["val_loss"], 4),
                 round(same[r["arm"]]["val_loss"], 4), rel=1e-3)
if rows and not same:
    print("no committed arm has this run's settings: nothing to compare")
here = hardware.current_target_name() if MODE == "device" else None
for r in rows if here else []:
    model_changes, train_changes = ARM_CHANGES[r["arm"]]
    request = plan.Request("train", MODEL, here, batch=BATCH, seq=SEQ,
                           microbatches=train_changes.get("microbatches", 1))
    try:
        predicted = None if model_changes else plan.plan_point(request)
    except BadInput as err:
        predicted = print(f"no prediction for {r['arm']} on {here}: {err}")
    # the peak is the process's high-water mark: later arms read at least the earlier peaks
    ledger.append([ledger.row("04_pretrain_ablations", workload="train", model=MODEL,
                              batch=BATCH, shape=f"seq {SEQ}, arm {r['arm']}", status="ok",
                              peak_bytes=measure.peak_bytes_per_device(),
                              seconds=BATCH * SEQ / r["tok_per_s"], prediction=predicted)])
if here and ledger.plot(plt.subplots(figsize=(5, 4))[1], ledger.read()):
    plt.show()

# %% [markdown]
# ## 3 · Plan mode: will the train step fit on TARGET, and the largest batch
# `shared.plan` compiles the trainer's own jitted step (fp32 parameters and Adam state, bf16
# compute, chunked loss) for the TPU target and reads bytes per device from the compiler.
# Beside it, the closed form of `shared.sizing.training_memory` with the same choices; it
# counts every saved activation, while the compiler frees them as the backward pass consumes
# them and fuses the MLP's intermediates.

# %%
verdicts = []


def verdict(request):
    """A compiled verdict (plan mode) as a table row with the fields budget and notebook 05 use."""
    point = plan.plan_point(request)
    row = {k: point[k] for k in (*KEY, "fits", "bytes_per_device", "resident_bytes", "hbm_bytes",
                                 "roofline_lower_bound_s", "flops_per_device", "compile_s",
                                 "versions")}
    verdicts.extend([row] if row not in verdicts else [])
    return row


if MODE == "plan":
    target = hardware.parse_target(TARGET)
    for batch in PLAN_BATCHES:
        verdict(plan.Request("train", MODEL, TARGET, batch=batch, seq=SEQ))["formula_bytes"] = \
            sizing.training_memory(model_lib.config(MODEL, T=SEQ).dims(), batch * SEQ,
                                   chips=target.chips, remat="none", param_bytes=4,
                                   grad_bytes=4)["per_chip"]
    report.show(verdicts, out, "verdicts_by_batch", [*KEY[3:5], "fits", "bytes_per_device",
                                                     "formula_bytes", "roofline_lower_bound_s"])
if MODE == "plan" and PLAN_SEARCH:  # in multiples of 8, as people pick batches
    search = plan.max_batch(plan.Request("train", MODEL, TARGET, seq=SEQ), multiple_of=8)
    print(plan.describe(search))

# %% [markdown]
# ## 4 · What to change to run a larger batch
# At twice the largest batch (`FRONTIER_BATCH`) the step as it is does not fit. The frontier
# compiles every combination of rematerialisation (none, block) and gradient accumulation (1,
# 2, 4 micro-batches) there, keeps the settings no other beats on both bytes per device and
# roofline time per sequence, and picks the fastest of those.

# %%
if MODE == "plan" and PLAN_SEARCH:
    front = frontier.frontier(plan.Request("train", MODEL, TARGET, seq=SEQ,
                                           batch=FRONTIER_BATCH or 2 * search["max_batch"]))
    print(frontier.describe(front))
    fig, ax = plt.subplots(figsize=(6.5, 4))
    frontier.plot(front, ax)
    report.save_figure(fig, out, "frontier", key="04_frontier" if KEY_FIGURES else None)
    plt.show()
    choice = front["choice"] or {}
    fit = {"model": MODEL, "target": TARGET, "seq": SEQ, "max_batch": search["max_batch"],
           "frontier_batch": FRONTIER_BATCH or 2 * search["max_batch"],
           **{f"choice_{k}": choice.get(k) for k in ("remat", "microbatches", "bytes_per_device",
                                                     "roofline_lower_bound_s")}}
    report.show([fit], out, "fit")
    q = next((f for f in quoted["pretrain_plan"].get("fit", [])
              if (f["model"], f["target"], f["seq"]) == (MODEL, TARGET, SEQ)), {})
    for k in ("max_batch", "choice_microbatches", "choice_bytes_per_device"):
        report.agree(k.replace("_", " "), fit[k], q.get(k))

# %% [markdown]
# ## 5 · What an arm costs A real arm is `REAL_ARM` (the 130m at 32 sequences of 2048 tokens a step)
# trained on `TOKENS_PER_PARAM` tokens per parameter (Chinchilla's 20). `shared.plan.budget` turns
# its steps into hours at the compiler's roofline (a lower bound) and at a named MFU assumption,
# then dollars at a dated `shared.hardware.prices` row. Kaggle's v5e-8 is free within its weekly
# quota: what counts there is sessions and weeks. Plan mode compiles the step on every
# `COST_TARGETS` slice; the other modes (local runs a tiny stand-in) read the committed verdicts. On
# the v5e-8 the committed roofline (2.22 h) exceeds the 1.22 h that 46.5% MFU would take: at 4
# sequences per chip the step is bound by the bytes it moves, not its FLOPs, so an MFU anchor
# measured on a v6e does not carry over to it.

# %%
tokens = TOKENS_PER_PARAM * params["total"]
costs = []
for name in COST_TARGETS:
    request = plan.Request("train", REAL_ARM["model"], name, batch=REAL_ARM["batch"],
                           seq=REAL_ARM["seq"])
    point = (verdict(request) if MODE == "plan"
             else report.committed_verdict("pretrain_plan", request))
    if point is None:
        print(f"no verdict for {request.model} on {name} committed: run plan mode to price it")
        continue
    est = budget.for_tokens(point, tokens, kind=PRICE_KIND)
    steps = est["steps"]
    print(f"one arm, {tokens:.3g} tokens = {steps:,} steps (one run is one step): "
          + budget.describe(est))
    hours = est["estimated_s"] / 3600
    costs.append({"target": name, "model": request.model, "tokens": tokens, "steps": steps,
                  "fits": point["fits"], "roofline_h": est["roofline_s"] / 3600,
                  "estimated_h": hours, "assumed_mfu": est["assumed_efficiency"],
                  "h_at_tpuchat_mfu": sizing.training_seconds(  # 46.5%, counted its way
                      tokens, per_token["palm"], hardware.parse_target(name).peak_flops_total,
                      0.465) / 3600,
                  "price_kind": PRICE_KIND, "dollars": est.get("dollars_estimated"),
                  "dollars_on_demand": prices.cost(name, hours, "on-demand"),
                  "price_read": est.get("price_read")})
    if name == "v5e-8":  # Kaggle's free TPU: all ARMS, in 9-hour sessions, 20 hours a week
        kaggle = prices.budget(hours * len(ARMS), name)
        costs[-1].update(kaggle_sessions_all_arms=kaggle["kaggle_sessions"],
                         kaggle_weeks_all_arms=kaggle["kaggle_weeks"])
if costs:
    report.show(costs, out, "arm_cost")
for row in costs:
    q = next((c for c in quoted["pretrain_plan"].get("arm_cost", [])
              if (c["target"], c["model"], c["tokens"]) == (row["target"], row["model"],
                                                            row["tokens"])), None)
    report.agree(f"one arm's {PRICE_KIND} dollars on {row['target']}", round(row["dollars"], 2),
                 q and round(q["dollars"], 2))
if MODE == "plan":
    report.show(verdicts, out, "verdicts", [k for k in verdicts[0] if k != "versions"])
    for v in verdicts:
        q = report.committed_verdict("pretrain_plan", plan.Request(**{k: v[k] for k in KEY}))
        report.agree(f"{v['model']} on {v['target']}, batch {v['batch']}: bytes per device",
                     v["bytes_per_device"], q and q["bytes_per_device"])
