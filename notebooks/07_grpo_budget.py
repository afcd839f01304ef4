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
# # 07 · GRPO budget: does my recipe fit a Kaggle v5e-8, what should I change, how many steps
# # in 9 hours, how many dollars?
#
# ## What we found
# **The question.** The Kaggle tunix hackathon asks for GRPO on gemma3-1b within one 9-hour
# TPU v5e-8 session. Does tunix's whole GRPO step fit, which phase sets the limit, what should
# I change, and how many steps (and dollars) does a session buy?
#
# **It fits, with room.** tunix's Gemma GRPO demo settings (prompts of 256 tokens, 768-token
# completions, G = 4 completions per prompt, 8 sequences per call of every phase, a rank-64
# LoRA policy over the frozen base, KL weight 0.08) need **5.13 GiB per chip of the 15.75 GiB**
# libtpu lets a program use on a v5e-8 (the real TPU compiler, deviceless: jax 0.10.2, libtpu
# 0.0.42.1, tunix 0.1.7 with its activation shardings applied, as its RL cluster runs them on
# a TPU; 2026-11-25). Resident: 0.69 GiB (the LoRA policy, a *second* copy of the base for the
# reference, AdamW state); the worst phase is the **policy update** (4.43 GiB of its own: its
# loss forms the [B, T, V] logits, V = 262,144), then prefill (2.45 GiB), decode (2.13 GiB)
# and the reference log-probs (1.87 GiB). (Compiled without those shardings, as the plan did
# until 2026-11-24, the same step needed 8.50 GiB.)
#
# **What to change: the log-probs.** tunix 0.1.7's `compute_per_token_logps` materialises
# [B, T, V] logits, so a log-prob call fits at most **72 sequences** (80 is refused). The
# chunked log-probs of `shared.grpo.token_logprobs` (equal to tunix's in `tests/test_grpo.py`)
# never form them: **1,744 sequences** fit (1,752 is refused), 24x as many. Set
# `LOGPS = "chunked"` here, or wrap your own run in `token_logprobs.chunked_logps()`.
# `python -m shared.plan grpo --model gemma3-1b --target v5e-8 --prompt-len 256
# --completion-len 768 --num-generations 4 --lora-rank 64 --frontier` compiles both log-prob
# functions at 8 and 16 sequences per call and names the setting to use.
#
# **Steps and dollars in 9 hours.** One step of that recipe (2 prompts × 4 completions) has a
# roofline of 9.13 s on the v5e-8 (a lower bound: every phase's FLOPs or bytes at the chip's
# peak), so a 9-hour session holds **at most 3,547 steps**; at an assumed 40% of the roofline
# (the scaling book's training MFU; no public measurement of a tunix GRPO step yet) about
# **1,418 steps, 11,344 completions**. On Kaggle that costs nothing within the 20-hour weekly
# quota; on GCP, 16 steps per dollar on demand ($9.60/h) or 80 on spot ($1.96/h), prices read
# 2026-11-22. **Decode sets the time**: 768 one-token steps per call, 9.0 s of the roofline, and
# each reads 9.6 GB per chip. In tunix's training layout the policy's weights are split over
# the 8 chips (FSDP), so every decode step gathers them whole (the 576 MiB embedding table
# among them: the verdict's largest buffers). tunix's own demo rolls out on a tp mesh on 8
# chips (1 x 4), which keeps weights in place; `--mesh 1x8` compiles that layout.
#
# ![Bytes per device of each GRPO phase on a v5e-8](../docs/figures/07_plan_bytes.png)
#
# **The loop, for real.** Local mode runs tunix's GRPO on a tiny Gemma 3 and a tiny Qwen 3
# (random weights, an arithmetic reward) on the CPU: 3 steps in 53 s and 33 s, most of it
# compiling, and in both the base weights are held twice after the first update, as the plan
# counts them.
#
# ![Time per phase, reward and KL: tiny models on CPU](../docs/figures/07_local_phases.png)
#
# Reproduce: `python benchmarks/bench_grpo.py --out benchmarks/results/grpo_plan.json` (one
# verdict and two searches of 4-5 compiles: 14 minutes on 2 shared cores); plan mode re-checks
# the verdict and both log-prob searches against that file. No TPU or GPU ran it yet: device
# mode measures a step beside the plan and writes a ledger row.
#
# ## How this notebook answers it One GRPO step in tunix 0.1.7 (`GRPOLearner` over a colocated
# `RLCluster`, a qwix LoRA policy over the frozen base) runs its phases one after another:
# **rollout** (the Sampler's prefill, then one decode step per completion token), **reference
# log-probs** (the base model, for the KL term; skipped when `BETA = 0`), **old-policy log-probs**
# (only with more than one iteration per batch), **rewards** (host Python) and the **policy update**
# (tunix's jitted train step: GRPO loss, LoRA gradients, AdamW). `shared.grpo` runs that loop for
# real and times each phase; `shared.plan.workloads.grpo` compiles the same jitted functions for
# `TARGET` with the TPU compiler, deviceless.
#
# `local` (the default) runs the real loop on the CPU on a tiny Gemma 3 and a tiny Qwen 3
# (random weights, an arithmetic task whose reward needs no model). `plan` compiles gemma3-1b
# with tunix's Gemma GRPO demo settings for a v5e-8 and searches what fits. `device` runs the
# same recipe on the attached accelerator, with the plan's prediction beside it (and a ledger
# row).

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
TARGET = "v5e-8"  # the slice to plan for (device mode plans for the slice it runs on)
MODEL = None  # None: gemma3-tiny locally, gemma3-1b in plan/device mode; any MODEL_NAMES entry
OTHER_MODEL = "qwen3-tiny"  # local mode: the same run on a second family (None: skip it)
WEIGHTS = "dummy"  # dummy: random weights | real: the checkpoint (Kaggle/HF credentials)
RESULTS_DIR = "results/07_grpo_budget"
SEED = 0
# The recipe. None: CPU-sized locally, tunix's Gemma GRPO demo (v5e-8-sized) elsewhere.
PROMPT_LEN = None  # prompt tokens (left-padded to it): 8 | 256
COMPLETION_LEN = None  # generated tokens per completion: 8 | 768
NUM_GENERATIONS = None  # completions per prompt (G): 2 | 4
MICRO_BATCH = None  # sequences per call of every phase (prompts x G): 8 | 8
LORA_RANK = None  # 4 | 64
LOGPS = "tunix"  # the log-prob phases: tunix | chunked (shared.grpo.token_logprobs, no [B, T, V])
BETA = 0.08  # KL weight; 0: no reference model and no reference phase
TRAIN_STEPS = None  # live runs: GRPO steps, the first compiles: 3 | 10
SEARCH = True  # plan mode: the largest micro-batch per phase, log-probs with both functions
HOURS = 9.0  # one Kaggle session
KEY_FIGURES = False  # also write the key figures to docs/figures/ (the ones committed)

# %%
from shared import report

MODE = report.use_mode(MODE)  # before jax: plan mode compiles for TARGET on the CPU

import contextlib
import dataclasses

import matplotlib.pyplot as plt

from shared import grpo, grpo_plots, hardware, models, plan
from shared.errors import choose
from shared.hardware import measure
from shared.hardware.sharding import make_mesh
from shared.plan.workloads import grpo as grpo_plan
from shared.report import ledger

MODEL = report.by_mode(MODE, MODEL, "gemma3-tiny", "gemma3-1b")
choose("model", MODEL, models.MODEL_NAMES)
if MODE == "device":  # join a multi-host slice first; then plan for the slice attached
    hardware.initialize_distributed()
    TARGET = hardware.current_target_name() or TARGET
request = plan.Request(
    "grpo", MODEL, TARGET, batch=report.by_mode(MODE, MICRO_BATCH, 8, 8),
    prompt_len=report.by_mode(MODE, PROMPT_LEN, 8, 256),
    steps=report.by_mode(MODE, COMPLETION_LEN, 8, 768),
    num_generations=report.by_mode(MODE, NUM_GENERATIONS, 2, 4),
    lora_rank=report.by_mode(MODE, LORA_RANK, 4, 64), logps=LOGPS, beta=BETA)
recipe = grpo_plan.settings(request)  # the live run and the plan share these settings
TRAIN_STEPS = report.by_mode(MODE, TRAIN_STEPS, 3, 10)
out = report.results_dir(RESULTS_DIR)
quoted = report.committed("grpo_plan")  # the numbers "What we found" quotes
same_recipe = bool(quoted) and quoted["recipe"] == dataclasses.asdict(request)
print(f"recipe: {recipe.prompts_per_step} prompts x G{recipe.num_generations} per step, "
      f"{request.batch} sequences per call, prompt {recipe.prompt_len} + completion "
      f"{recipe.completion_len} tokens, LoRA rank {recipe.lora_rank}, log-probs {LOGPS}")

# %% [markdown]
# ## 1 · The real loop, timed per phase (local and device mode)
# Each phase is timed by wrapping the `RLCluster` method that runs it, waiting for its result:
# the first step includes every compile, so the figure shows the median of the later steps.
# With random weights the arithmetic reward is ~0, every group's advantage is 0, and only the
# KL term moves the adapters: the curve shows that the loop trains, not that it learns. The
# run also checks the memory finding the plan counts: after the first update the policy and
# the reference no longer share the base weights (tunix returns every policy variable from its
# jitted update as a new buffer), so a run holds the base twice.

# %%
results, measured = {}, {}
names = [MODEL] + ([OTHER_MODEL] if MODE == "local" and OTHER_MODEL else [])
for name in names if MODE != "plan" else []:
    mesh = make_mesh()
    model, tok = models.load(name, WEIGHTS, mesh=mesh, seed=SEED)
    compiles = grpo.quick_compiles() if MODE == "local" else contextlib.nullcontext()
    with compiles:  # the least XLA effort: a tiny CPU run is compile-bound
        run = grpo.build_grpo(model, tok, mesh, recipe, steps=TRAIN_STEPS)
        del model  # the policy and the reference keep what they need
        batches = grpo.arithmetic_batches(TRAIN_STEPS, recipe.prompts_per_step, seed=SEED)
        result, error = measure.run_or_oom(grpo.run_grpo, run, batches)
    measured[name] = {"status": "ok" if error is None else error,
                      "peak_bytes": measure.peak_bytes_per_device(),
                      "base_copies": grpo.base_copies(run)}
    if result is not None:
        results[name] = result
        report.show(result.steps, out, f"steps_{name}")
        print(f"{name}: {result.wall_s:.1f} s for {TRAIN_STEPS} steps; steady step "
              f"{result.steady_step_s:.3f} s; base weights held {measured[name]['base_copies']}x"
              f" after training")
if results:
    report.show([{"model": n, **r.steady()} for n, r in results.items()], out, "phases")
    fig, axes = plt.subplots(1, 2, figsize=(13, 4))
    grpo_plots.plot_phases(results, axes[0])
    grpo_plots.plot_curves(results, axes[1])
    fig.tight_layout()
    report.save_figure(fig, out, "live_phases", key="07_local_phases" if KEY_FIGURES and
                       MODE == "local" else None)
    plt.show()
    for name, m in measured.items():  # what the plan counts: twice, unless BETA is 0
        held, counted = m["base_copies"], 2 if recipe.beta else 1
        print(f"{name}: the base weights are held {held}x after the first update: "
              + ("as the plan counts them" if held == counted else f"NOT the {counted}x the "
                 "plan counts: tunix changed, and shared.plan.workloads.grpo's resident "
                 "set must too"))

# %% [markdown]
# ## 2 · Will it fit? The compiler's verdict for the recipe (plan mode; device mode predicts)
# Bytes per device = what the whole run keeps resident (the policy's weights with its LoRA
# adapters, the reference's second copy of the base from the first update on, the optimizer
# state) + the worst phase's own transient bytes (its arguments that are not resident, outputs
# and temporaries, minus what it writes in place), against the HBM libtpu lets a program use
# (15.75 of a v5e's 16 GiB). The rollout starts from a replicated state, as tunix passes it;
# with tunix's activation shardings applied, prefill hands decode a KV cache split over the
# batch, and decode is compiled with it so. Compiles take minutes for gemma3-1b on a laptop
# and are cached in `.cache/plan`.

# %%
point = plan.plan_point(request) if MODE != "local" else None
if point:
    print(f"{MODEL} GRPO on {TARGET}: {'FITS' if point['fits'] else 'DOES NOT FIT'}, "
          f"{report.bytes_text(point['bytes_per_device'])} of "
          f"{report.bytes_text(point['hbm_bytes'])} per device; worst phase {point['worst']}")
    report.show(grpo_plots.phase_rows(point), out, "plan_phases",
                ["phase", "argument_bytes", "output_bytes", "temp_bytes", "alias_bytes",
                 "transient_bytes", "total_with_resident_bytes", "gflop_per_call",
                 "calls_per_step", "roofline_s_per_step"])
    report.show([{"resident": k, "bytes": v} for k, v in point["resident"].items()], out,
                "plan_resident")
    for note in point["notes"]:
        print(f"- {note}")
    fig, ax = plt.subplots(figsize=(9, 4))
    grpo_plots.plot_bytes(point, ax)
    report.save_figure(fig, out, "plan_bytes", key="07_plan_bytes" if KEY_FIGURES else None)
    plt.show()
    if same_recipe:
        report.agree("bytes per device", point["bytes_per_device"],
                     quoted["verdict"]["bytes_per_device"])

# %%
if MODE == "device" and MODEL in measured:  # measured beside predicted, kept in the ledger
    m, r = measured[MODEL], results.get(MODEL)
    shape = f"prompt {recipe.prompt_len} + completion {recipe.completion_len}, G " \
            f"{recipe.num_generations}, rank {recipe.lora_rank}, log-probs {LOGPS}"
    row = ledger.row("07_grpo_budget", workload="grpo", model=MODEL, batch=request.batch,
                     shape=shape, status=m["status"], peak_bytes=m["peak_bytes"],
                     seconds=r.steady_step_s if r else None, prediction=point)
    ledger.append([row])
    report.show([row], out, "ledger_row", ["device", "measured_status",
                 "measured_peak_bytes_per_device", "predicted_bytes_per_device",
                 "predicted_fits", "measured_s"])
    print(f"steady step {row['measured_s']} s measured; roofline for {TARGET}: "
          f"{point['roofline_lower_bound_s']:.3f} s (a lower bound)")

# %% [markdown]
# ## 3 · What should I change? The largest micro-batch per phase (plan mode, `SEARCH`)
# A recipe fits when every phase fits beside the resident set, so each phase is searched on
# its own (`Request.phases`; the resident buffers are counted all the same): its largest
# micro-batch is what that phase's tunix setting (`rollout_micro_batch_size`,
# `compute_logps_micro_batch_size`, `train_micro_batch_size`, times G) may be, and the least
# of them is the largest micro-batch for every phase at once. The log-prob phase is searched
# with tunix's `compute_per_token_logps`, which forms the [B, T, V] logits (V = 262,144), and
# with the chunked one (`shared.grpo.token_logprobs`, equal to tunix's in the tests), which never
# does: `LOGPS = "chunked"`, or `with token_logprobs.chunked_logps():` around your own run.

# %%
searches = {}
if MODE == "plan" and SEARCH:
    for label, change in (("rollout", {"phases": "rollout"}), ("update", {"phases": "update"}),
                          ("log-probs, tunix", {"phases": "logps", "logps": "tunix"}),
                          ("log-probs, chunked", {"phases": "logps", "logps": "chunked"})):
        searches[label] = plan.max_batch(dataclasses.replace(request, **change))
        print(plan.describe(searches[label]))
    largest = min(s["max_batch"] for k, s in searches.items() if k != "log-probs, tunix")
    fig, ax = plt.subplots(figsize=(9, 4.5))
    grpo_plots.plot_search(searches, ax, point["hbm_bytes"])
    report.save_figure(fig, out, "search", key="07_search" if KEY_FIGURES else None)
    plt.show()
    report.show([{"phase": k, "largest_micro_batch": s["max_batch"],
                  "first_not_fitting": s["first_not_fitting"], "compiles": s["compiles"]}
                 for k, s in searches.items()], out, "largest_micro_batch")
    if same_recipe:
        for label, committed in (("log-probs, tunix", quoted["logps_search"]["tunix"]),
                                 ("log-probs, chunked", quoted["logps_search"]["chunked"])):
            report.agree(f"largest micro-batch, {label}", searches[label]["max_batch"],
                         committed["max_batch"])

# %% [markdown]
# ## 4 · How many steps in 9 hours, and how many dollars?
# The roofline (every phase's FLOPs at the chip's peak, or its bytes at HBM bandwidth,
# whichever is slower, times its calls per step) is a lower bound on a step's time, so the
# steps it allows are an upper bound, never a prediction. The estimate divides it by an
# efficiency that is an ASSUMPTION, `shared.plan.budget`'s for this workload (printed with its
# source); a CPU run's phase times say nothing about a TPU's, so they are not used for it. A
# device run's measured step over the plan's roofline (section 2) is the number to replace it
# with. Kaggle's v5e-8 costs nothing within its weekly quota; GCP prices are dated.

# %%
configs = {"recipe": (point, recipe)} if point else {}
if searches and largest >= request.batch:
    best = dataclasses.replace(request, batch=largest, logps="chunked")
    configs[f"{largest} sequences per call, chunked"] = (plan.plan_point(best),
                                                         grpo_plan.settings(best))
rows = [{"config": k, **grpo_plan.session(p, s, hours=HOURS)} for k, (p, s) in configs.items()]
if rows:
    report.show(rows, out, "session", ["config", "sequences_per_step", "roofline_step_s",
                                       "steps_at_most", "estimated_step_s", "steps_estimated",
                                       "completions_estimated", "steps_per_dollar_on-demand",
                                       "steps_per_dollar_spot"])
    print(f"efficiency: {rows[0]['assumed_efficiency']:.0%} of the roofline, "
          f"{rows[0]['efficiency_source']}\nKaggle: {rows[0].get('kaggle', 'n/a')}")
    if same_recipe:
        report.agree("steps in a session at the roofline", rows[0]["steps_at_most"],
                     quoted["session"]["steps_at_most"])

# %% [markdown]
# ## 5 · Reading it
# - **Memory.** The worst phase is the one to shrink: with tunix's log-probs and a 1024-token
#   sequence the [B, T, V] logits dominate the reference phase and the update; the chunked
#   log-probs remove them from the log-prob phases (the update still needs them for its loss
#   and entropy). Counting the base twice is what a real run holds; `BETA = 0` drops the
#   reference and that copy (and the KL term).
# - **Time.** Decode dominates a GRPO step: `completion_len` forward passes of one token per
#   row. Larger rollout micro-batches amortise the weight reads, so on a v5e-8 the rollout is
#   where a bigger micro-batch pays; the update's micro-batch is limited by its logits.
# - **Dollars.** A step's seconds times the slice's price: steps per dollar on GCP above, and
#   on Kaggle the 9-hour session and the weekly quota are the budget.
