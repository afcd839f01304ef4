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
# # 04 · ~130M pretraining: ablations, MFU, and will the step fit
#
# Our own flax nnx decoder (`shared.model`), AdamW with fp32 gradient accumulation
# (`shared.optim`), the chunked loss of notebook 03 (`shared.logits`) and a loop that resumes
# exactly after a kill (`shared.train`, also `python -m shared.train` on a TPU VM).
#
# - `local`: a baseline and ablation arms (MLP, QK-norm, tied head, micro-batches, attention
#   implementation) on the tiny config and the Shakespeare corpus; held-out loss, tokens/s and
#   MFU per arm; loss curves; samples from the trained model.
# - `plan`: the 130m config's train step compiled for `TARGET` (default v6e-1): bytes per
#   device, the largest batch that fits, a roofline time.
# - `device`: the same ablations with the full 130m config on the attached chip.
#
# MFU counts FLOPs with the MaxText convention (causal attention halved, `shared.sizing`);
# tpuchat's 46.5% counts non-causal attention, which on this model reads about 1.26x higher.

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
TARGET = "v6e-1"  # plan mode: the chip to compile the train step for
MODEL = None  # None: "tiny" locally, "130m" in plan and device mode
RESULTS_DIR = "results/04_pretrain_ablations"
SEED = 0
STEPS = 40  # per arm
BATCH = 16  # sequences per step (global); the microbatches arm needs BATCH/2 to divide the devices
SEQ = 128  # tokens per sequence (130m: 2048)
LR = 3e-3
WD = 0.1
VOCAB_SIZE = 4096  # local tokenizer; the 130m config pads its V to this (32768 in device mode)
ARMS = ["baseline", "relu2", "qk_norm", "tied", "microbatches", "attention"]
PLAN_BATCHES = [8, 16, 32]  # plan mode: sequences per step to compile
PLAN_SEQ = 2048
SAMPLE_PROMPT = "ROMEO:\n"
SAMPLE_TOKENS = 64

# %%
import json

import jax
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import display

from shared import hardware, report, sizing
from shared.errors import choose

report.check_mode(MODE)
out = report.results_dir(RESULTS_DIR)
MODEL = MODEL or ("tiny" if MODE == "local" else "130m")
print(f"MODE={MODE} MODEL={MODEL}")


def show(rows, name):
    """Save rows as CSV/JSON under RESULTS_DIR and display them as a table."""
    display(report.table(rows, out, name))


# %% [markdown]
# ## The model
# Parameters by part from `shared.sizing`, for the architecture as configured (the trainer
# pads V to a multiple of 256 and sets T to the sequence length).

# %%
from shared import model as model_lib

base = model_lib.config(MODEL, V=model_lib.padded_vocab(VOCAB_SIZE), T=SEQ)
params = sizing.param_counts(base.dims())
show([{"part": part, "params": f"{count:,}"} for part, count in params.items()], "params")
print(f"training FLOPs per token (MaxText, causal-halved): "
      f"{sizing.flops_per_token(base.dims(), SEQ):.3e}; PaLM convention: "
      f"{sizing.flops_per_token(base.dims(), SEQ, 'palm'):.3e}")

# %% [markdown]
# ## Ablation arms (local and device mode)
# Each arm changes one thing against the baseline and trains for the same steps on the same
# batches (batch i depends only on the seed and i). `attention` swaps in the backend's other
# implementation (xla on TPU and GPU, where the defaults are splash and cuDNN); on CPU the
# Pallas kernels only run interpreted, so that arm is skipped there.

# %%
ARM_CHANGES = {
    "baseline": ({}, {}),
    "relu2": ({"mlp": "relu2"}, {}),
    "qk_norm": ({"qk_norm": True}, {}),
    "tied": ({"tied": True}, {}),
    "microbatches": ({}, {"microbatches": 2}),
    "attention": ({"attention": "xla"}, {}),
}
platform = jax.devices()[0].platform
for arm in ARMS:
    choose("arm", arm, ARM_CHANGES)
runs = {}
if MODE != "plan":
    from shared import train

    hardware.initialize_distributed()
    for arm in ARMS:
        model_changes, train_changes = ARM_CHANGES[arm]
        if arm == "attention" and platform == "cpu":
            print("attention arm skipped on CPU: the Pallas kernels only run interpreted here")
            continue
        cfg = train.TrainConfig(config=MODEL, model_overrides=model_changes, steps=STEPS,
                                batch=BATCH, seq=SEQ, lr=LR, wd=WD, seed=SEED,
                                vocab_size=VOCAB_SIZE, warmup=max(1, STEPS // 10),
                                metrics=str(out / f"{arm}.jsonl"), wandb_group="04_ablations",
                                wandb_tags=(arm,), **train_changes)
        print(f"--- {arm}: {model_changes or ''} {train_changes or ''}")
        runs[arm] = train.train(cfg)

# %%
def per_step(arm):
    lines = (out / f"{arm}.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if "loss" in r]


if runs:
    rows = []
    for arm, run in runs.items():
        steps = per_step(arm)
        steady = [r for r in steps if r["step"] > 3] or steps  # the first steps compile
        rows.append({"arm": arm, "params": run.summary["params"],
                     "final train loss": round(steps[-1]["loss"], 4),
                     "held-out loss": round(run.summary["val_loss"], 4),
                     "held-out bits/byte": round(run.summary["val_bpb"], 4),
                     "tok/s (median)": round(float(np.median([r["tok_per_s"] for r in steady]))),
                     "MFU (median)": f"{np.median([r['mfu'] for r in steady]):.2%}",
                     "MFU peak": run.summary["mfu_peak"]})
    show(rows, "ablations")
    fig, ax = plt.subplots(figsize=(7, 4))
    for arm in runs:
        steps = per_step(arm)
        ax.plot([r["step"] for r in steps], [r["loss"] for r in steps], label=arm)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (nats/token)")
    ax.set_title(f"{MODEL}: {BATCH}x{SEQ} tokens per step, lr {LR:g}")
    ax.legend()
    report.save_figure(fig, out, "loss_curves")
    plt.show()
    best = min(rows, key=lambda r: r["held-out loss"])
    base_loss = next((r["held-out loss"] for r in rows if r["arm"] == "baseline"), None)
    print(f"Lowest held-out loss: {best['arm']} ({best['held-out loss']}"
          + (f", baseline {base_loss})" if base_loss is not None else ")")
          + f" after {STEPS} steps; differences this small after so few steps are noise "
          "unless they persist across seeds (rerun with another SEED).")

# %% [markdown]
# ## Samples from the trained baseline

# %%
if runs:
    run = runs.get("baseline") or next(iter(runs.values()))
    sp = run.tokenizer
    prompt = [sp.bos_id()] + sp.encode(SAMPLE_PROMPT)
    tokens = model_lib.generate(run.model, [prompt], SAMPLE_TOKENS, temperature=0.8,
                                key=jax.random.key(SEED), valid_vocab=sp.get_piece_size())
    print(sp.decode(np.asarray(tokens[0]).tolist()))

# %% [markdown]
# ## Plan mode: will the train step fit on TARGET?
# `shared.plan` compiles the trainer's own jitted step (fp32 parameters and Adam state, bf16
# compute, chunked loss) for the TPU target and reads bytes per device from the compiler.
# Beside it, the closed-form estimate of `shared.sizing.training_memory` with the same
# choices; they differ because the compiler frees activations as the backward pass consumes
# them and fuses the MLP's intermediates, while the formula counts every saved activation.

# %%
if MODE == "plan":
    from shared import plan

    target = hardware.parse_target(TARGET)
    dims = model_lib.config(MODEL, T=PLAN_SEQ).dims()
    points = []
    for batch in PLAN_BATCHES:
        point = plan.plan_point(plan.Request("train", MODEL, TARGET, batch=batch, seq=PLAN_SEQ))
        formula = sizing.training_memory(dims, batch * PLAN_SEQ, chips=target.chips,
                                         remat="none", param_bytes=4, grad_bytes=4)["per_chip"]
        points.append({"batch": batch, "compiler bytes/device": point["bytes_per_device"],
                       "formula bytes/device": int(formula), "fits": point["fits"],
                       "roofline step (ms)": round(point["roofline_lower_bound_s"] * 1e3, 1),
                       "roofline tok/s (upper bound)":
                           round(batch * PLAN_SEQ / point["roofline_lower_bound_s"]),
                       "compile s": round(point["compile_s"], 1), "cached": point["cached"]})
    show(points, "plan_train")
    search = plan.max_batch(plan.Request("train", MODEL, TARGET, seq=PLAN_SEQ))
    print(f"largest batch of {PLAN_SEQ}-token sequences that fits one step on {TARGET}: "
          f"{search['max_batch']} (probed {[p['batch'] for p in search['probes']]})")
    fig, ax = plt.subplots(figsize=(6, 3.5))
    probes = sorted({p["batch"]: p for p in search["probes"] + [
        {"batch": p["batch"], "bytes_per_device": p["compiler bytes/device"]} for p in points]
    }.values(), key=lambda p: p["batch"])
    ax.plot([p["batch"] for p in probes], [p["bytes_per_device"] / 2**30 for p in probes], "o-",
            label="compiler (memory_analysis)")
    ax.plot([p["batch"] for p in points], [p["formula bytes/device"] / 2**30 for p in points],
            "s--", label="closed form (sizing)")
    ax.axhline(target.chip.hbm_bytes / 2**30, color="red", ls="--", label=f"{TARGET} HBM")
    ax.set_xlabel(f"batch (sequences of {PLAN_SEQ} tokens)")
    ax.set_ylabel("bytes per device (GiB)")
    ax.set_title(f"{MODEL} train step on {TARGET}")
    ax.legend()
    report.save_figure(fig, out, "plan_bytes_vs_batch")
    plt.show()
