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
# # 07 · Does my GRPO recipe fit a Kaggle v5e-8, what should I change, how many steps in 9 hours?
#
# ## Takeaway
# **It fits, with room.** tunix's Gemma GRPO demo recipe on gemma3-1b (256-token prompts,
# 768-token completions, G = 4, a rank-64 LoRA policy) needs **5.13 GiB per chip of the 15.75
# GiB** a v5e-8 lets a program use; the worst phase is the policy update. **Change the
# log-probs:** tunix 0.1.7's `compute_per_token_logps` forms the [B, T, V] logits, so a log-prob
# call fits at most **72 sequences**; the chunked log-probs (`LOGPS = "chunked"`) fit **1,744**.
# **Put tp on the mesh:** on all 8 chips on fsdp each decode step gathers every weight whole, a
# roofline of 9.13 s a step; on 2x4 (`MESH = "2x4"`) 6.82 s, about **1,901 steps** in a 9-hour
# session at an assumed 40% of the roofline: free on Kaggle, 22 steps a dollar on demand on GCP.
#
# ![Bytes per device of each GRPO phase on a v5e-8](../docs/figures/07_plan_bytes.png)

# %% [markdown]
# ## How this notebook answers it
# One GRPO step in tunix 0.1.7 (`GRPOLearner` over a colocated `RLCluster`, a qwix LoRA policy
# over the frozen base) runs its phases one after another: **rollout** (the Sampler's prefill,
# then one decode step per completion token), **reference log-probs** (the base model, for the
# KL term; skipped when `BETA = 0`), **old-policy log-probs** (only with more than one
# iteration per batch), **rewards** (host Python) and the **policy update** (tunix's jitted
# train step: GRPO loss, LoRA gradients, AdamW). `shared.grpo` runs that loop for real and
# times each phase; `shared.plan.workloads.grpo` compiles the same jitted functions for
# `TARGET` with the TPU compiler, deviceless.
#
# `local` (the default) runs the real loop on the CPU on a tiny Gemma 3 and a tiny Qwen 3
# (random weights, an arithmetic task whose reward needs no model). `plan` compiles gemma3-1b
# with tunix's Gemma GRPO demo settings for a v5e-8 and searches what fits. `device` runs the
# same recipe on the attached accelerator, with the plan's prediction and a ledger row beside.

# %%
# On Colab or Kaggle: install this project (tools/colab_install.sh); in a clone, `make setup`.
import os
import sys

if "google.colab" in sys.modules or "KAGGLE_KERNEL_RUN_TYPE" in os.environ:
    script = "raw.githubusercontent.com/tpu-budget-lab/tpu-budget-lab/main/tools/colab_install.sh"
    if os.system(f"curl -sSL https://{script} | bash -s -- {sys.executable}"):
        raise RuntimeError("installing tpu-budget-lab failed: see the output above")

# %% tags=["parameters"]
MODE = "local"  # local | plan | device
TARGET = "v5e-8"  # the slice or GPU machine to plan for (t4-2, l4-1, h100-1: compiled without it)
MESH = None  # FSDPxTP, e.g. "1x4"; None: every device on fsdp (local: one device)
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

from shared import grpo, hardware, models, plan
from shared.findings import grpo as findings
from shared.grpo import plots as grpo_plots
from shared.grpo.settings import GRPOBudget
from shared.hardware import measure, sharding
from shared.plan.atlas import lookup
from shared.plan.mesh import faster
from shared.plan.slices import budget
from shared.plan.workloads import grpo as grpo_plan
from shared.report import ledger

if MODE == "device":  # join a multi-host slice first; then plan for the slice attached
    hardware.initialize_distributed()
    TARGET = hardware.current_target_name() or TARGET
setting = report.setting(
    MODE, GRPOBudget, MODEL=MODEL, TARGET=TARGET, PROMPT_LEN=PROMPT_LEN,
    COMPLETION_LEN=COMPLETION_LEN, NUM_GENERATIONS=NUM_GENERATIONS, MICRO_BATCH=MICRO_BATCH,
    LORA_RANK=LORA_RANK, LOGPS=LOGPS, BETA=BETA, WEIGHTS=WEIGHTS, TRAIN_STEPS=TRAIN_STEPS,
    HOURS=HOURS)
request = plan.Request(**setting.request_fields(), mesh=MESH)  # what plan mode compiles
recipe = grpo_plan.settings(request)  # the live run and the plan share these settings
out = report.results_dir(RESULTS_DIR)
quoted = findings.committed_plan(request)  # the numbers the Takeaway quotes, for this recipe
print(f"recipe: {recipe.prompts_per_step} prompts x G{recipe.num_generations} per step, "
      f"{request.batch} sequences per call, prompt {recipe.prompt_len} + completion "
      f"{recipe.completion_len} tokens, LoRA rank {recipe.lora_rank}, log-probs {setting.logps}")

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
names = [setting.model] + ([OTHER_MODEL] if MODE == "local" and OTHER_MODEL else [])
for name in names if MODE != "plan" else []:
    mesh = sharding.make_mesh(MESH)
    model, tok = models.load(name, setting.weights, mesh=mesh, seed=SEED)
    compiles = grpo.quick_compiles() if MODE == "local" else contextlib.nullcontext()
    with compiles:  # the least XLA effort: a tiny CPU run is compile-bound
        run = grpo.build_grpo(model, tok, mesh, recipe, steps=setting.train_steps)
        del model  # the policy and the reference keep what they need
        batches = grpo.arithmetic_batches(setting.train_steps, recipe.prompts_per_step,
                                          seed=SEED)
        result, error = measure.run_or_oom(grpo.run_grpo, run, batches)
    measured[name] = {"status": "ok" if error is None else error,
                      "peak_bytes": measure.peak_bytes_per_device(),
                      "base_copies": grpo.base_copies(run)}
    if result is not None:
        results[name] = result
        report.show(result.steps, out, f"steps_{name}")
        print(f"{name}: {result.wall_s:.1f} s for {setting.train_steps} steps; steady step "
              f"{result.steady_step_s:.3f} s; base weights held {measured[name]['base_copies']}x"
              f" after training")
if results:
    report.show([{"model": n, **r.steady()} for n, r in results.items()], out, "phases")
    fig, axes = plt.subplots(1, 2, figsize=(13, 4))
    grpo_plots.plot_phases(results, axes[0])
    grpo_plots.plot_curves(results, axes[1])
    fig.tight_layout()
    local_key = "07_local_phases" if KEY_FIGURES and MODE == "local" else None
    report.save_figure(fig, out, "live_phases", key=local_key)
    plt.show()
    for name, m in measured.items():  # what the plan counts: twice, unless BETA is 0
        print(findings.base_copies_verdict(name, m["base_copies"], recipe.beta))

# %% [markdown]
# Locally, 3 steps of each tiny model take well under a minute on the CPU, most of it compiling
# (53 s and 33 s on 2 shared cores when this was written), and in both the base weights are
# held twice after the first update, as the plan counts them:
#
# ![Time per phase, reward and KL: tiny models on CPU](../docs/figures/07_local_phases.png)

# %% [markdown]
# ## 2 · Will it fit? The compiler's verdict for the recipe (plan mode; device mode predicts)
# Bytes per device = what the whole run keeps resident (the policy's weights with its LoRA
# adapters, the reference's second copy of the base from the first update on, the optimizer
# state) + the worst phase's own transient bytes (its arguments that are not resident, outputs
# and temporaries, minus what it writes in place), against the HBM libtpu lets a program use
# (15.75 of a v5e's 16 GiB). The rollout starts from a replicated state, as tunix passes it;
# with tunix's activation shardings applied (as its RL cluster runs them on a TPU), prefill
# hands decode a KV cache split over the batch, and decode is compiled with it so. Compiles
# take minutes for gemma3-1b on a laptop and are cached in `.cache/plan`.
#
# For the demo recipe (KL weight 0.08, 8 sequences a call) on a v5e-8: 5.13 GiB of 15.75.
# Resident 0.69 GiB (the LoRA policy, the reference's second copy of the base, AdamW state); the
# worst phase is the **policy update** (4.43 GiB of its own: its loss forms the [B, T, V]
# logits, V = 262,144), then prefill (2.45 GiB), decode (2.13 GiB) and the reference log-probs
# (1.87 GiB). Without tunix's activation shardings (the plan until 2026-11-24) it needed 8.50.

# %% [markdown]
# Before anything compiles, the committed atlas answers for every model on this slice, in well
# under a second, in every mode (`docs/atlas.md`; `python -m shared.plan lookup MODEL TARGET
# grpo` for one cell). Its GRPO column is the `grpo` workload's defaults (256-token prompts,
# 1,024-token completions, 4 generations, LoRA rank 8, tunix's log-probs), not the demo recipe:
# a first answer for the model to pick. On a v5e-8, gemma3-1b fits 56 sequences a call,
# gemma2-2b 28 and gemma3-4b 16 (both on a 4x2 mesh); gemma3-12b, gemma3-27b and gemma4-31b
# fit none, on any mesh. A `?` is an older search's answer, which a larger batch may beat.

# %%
column = lookup.slice_column("grpo", setting.target)
if column:
    report.show(column, out, "atlas_grpo")
    if any(row["model"] == setting.model for row in column):
        print(lookup.describe(lookup.find(lookup.read_table(), setting.model, setting.target,
                                          "grpo")))

# %%
point = plan.plan_point(request) if MODE != "local" else None
if point:
    print(f"{setting.model} GRPO on {setting.target}: "
          f"{'FITS' if point['fits'] else 'DOES NOT FIT'}, "
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
    findings.check_verdict(point, quoted)

# %%
if MODE == "device" and setting.model in measured:  # measured beside predicted, in the ledger
    m, r = measured[setting.model], results.get(setting.model)
    shape = (f"prompt {recipe.prompt_len} + completion {recipe.completion_len}, G "
             f"{recipe.num_generations}, rank {recipe.lora_rank}, log-probs {setting.logps}")
    row = ledger.row("07_grpo_budget", workload="grpo", model=setting.model,
                     batch=request.batch, shape=shape, status=m["status"],
                     peak_bytes=m["peak_bytes"], seconds=r.steady_step_s if r else None,
                     prediction=point)
    ledger.append([row])
    report.show([row], out, "ledger_row", ["device", "measured_status",
                 "measured_peak_bytes_per_device", "predicted_bytes_per_device",
                 "predicted_fits", "measured_s"])
    print(f"steady step {row['measured_s']} s measured; roofline for {setting.target}: "
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
#
# For the demo recipe: with tunix's function a log-prob call fits at most **72 sequences**
# (neither 80 nor 88 fits); with the chunked one **1,744** (neither 1,752 nor 1,768), 24x as
# many. To name the setting for your own recipe, `python -m shared.plan grpo --model gemma3-1b
# --target v5e-8 --prompt-len 256 --completion-len 768 --num-generations 4 --lora-rank 64
# --frontier` compiles both log-prob functions at 8 and 16 sequences per call.

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
    findings.check_logps_searches(searches, quoted)

# %% [markdown]
# ## 4 · How many steps in 9 hours, and how many dollars?
# The roofline (every phase's FLOPs at the chip's peak, or its bytes at HBM bandwidth,
# whichever is slower, times its calls per step) is a lower bound on a step's time, so the
# steps it allows are an upper bound, never a prediction. The estimate divides it by an
# efficiency that is an ASSUMPTION, `shared.plan.slices.budget`'s for this workload (printed with
# its source); a CPU run's phase times say nothing about a TPU's, so they are not used for it. A
# device run's measured step over the plan's roofline (section 2) is the number to replace it
# with. Kaggle's v5e-8 costs nothing within its weekly quota; GCP prices are dated.
#
# A memory-bound step is compiled on the meshes with more tp too (`shared.plan.mesh.faster`),
# while each is faster. For the demo recipe (2 prompts × 4 completions a step) on the
# v5e-8: 9.13 s on 8x1 (at most 3,547 steps in 9 hours), 7.27 s on 4x2 (4,457), **6.82 s on
# 2x4 (4,753)**; 1x8 cannot split gemma3-1b's 4 heads. At the scaling book's 40% training MFU
# (no TPU measurement of a tunix GRPO step yet) 2x4 runs about **1,901 steps** (15,208
# completions): 22 steps a dollar on demand or 108 on spot on GCP (read 2026-11-22), $0 within
# Kaggle's weekly quota.

# %%
configs = {"recipe": (point, recipe)} if point else {}
if MODE == "plan" and point:  # the same recipe where each chip reads a share of the weights
    configs.update({f"recipe on {name}": (wider, recipe) for name, wider in
                    faster.on_wider_meshes(request, point).items() if wider["fits"]})
if searches and largest >= request.batch:
    best = dataclasses.replace(request, batch=largest, logps="chunked")
    configs[f"{largest} sequences per call, chunked"] = (plan.plan_point(best),
                                                         grpo_plan.settings(best))
rows = [{"config": k, **budget.session(p, sequences_per_step=r.sequences_per_step,
                                       hours=setting.hours)} for k, (p, r) in configs.items()]
if rows:
    report.show(rows, out, "session", ["config", "mesh", "sequences_per_step",
                                       "roofline_step_s", "steps_at_most", "estimated_step_s",
                                       "steps_estimated", "completions_estimated",
                                       "steps_per_dollar_on-demand", "steps_per_dollar_spot"])
    print(f"efficiency: {rows[0]['assumed_efficiency']:.0%} of the roofline, "
          f"{rows[0]['efficiency_source']}\nKaggle: {rows[0].get('kaggle', 'n/a')}")
    findings.check_session(rows[0], quoted)
    findings.check_wider_sessions(rows, quoted)

# %% [markdown]
# ## 5 · Reading it
# - **Memory.** The worst phase is the one to shrink: with tunix's log-probs and a 1024-token
#   sequence the [B, T, V] logits dominate the reference phase and the update; the chunked
#   log-probs remove them from the log-prob phases (the update still needs them for its loss
#   and entropy). Counting the base twice is what a real run holds; `BETA = 0` drops the
#   reference and that copy (and the KL term).
# - **Time.** Decode dominates a GRPO step: `completion_len` forward passes of one token per
#   row (for the demo recipe 768 of them, 9.0 s of the 9.13 s roofline, each reading 9.6 GB
#   per chip). In tunix's training layout the policy's weights are split over the 8 chips
#   (FSDP), so every decode step gathers them whole (the 576 MiB embedding table among them:
#   the verdict's largest buffers). tunix's own demo rolls out on a tp mesh, which keeps the
#   weights in place: `MESH = "2x4"` (`--mesh 2x4`) plans and runs that layout (6.82 s against
#   9.13; for gemma3-4b tp halved the v5e-8's step: notebook 08). Larger rollout micro-batches
#   amortise the weight reads; the update's micro-batch is limited by its logits.
# - **Dollars.** A step's seconds times the slice's price; on Kaggle the 9-hour session and the
#   weekly quota are the budget.

# %% [markdown]
# ## Evidence
# The Takeaway's numbers are `benchmarks/results/07_grpo_plan.json`: one verdict and the two
# log-prob searches (4 and 8 compiles) by the real TPU compiler, deviceless, with jax 0.10.2,
# libtpu 0.0.42.1 and tunix 0.1.7 (its activation shardings applied), made 2026-11-25 in 14
# minutes on 2 shared cores; GCP prices read 2026-11-22. The batch two units above each search's
# answer (88 and 1,768 sequences, `--phases logps --batch N`) compiled on 2026-11-27: both
# refused, so both answers stand; 4x2 and 2x4 on 2026-11-30 (`--parts meshes`). Plan mode
# re-checks the verdict, both log-prob searches and each mesh's steps against it (sections
# 2-4). An H100 ran the recipe (random weights, 4 steps; `grpo_h100.json`): 36.64 GB measured
# against 36.59 GB predicted for `h100-1`, and a steady step of 2.25 s (2.02 s of it the
# rollout) over a roofline of 0.92 s; an H200 gave the same pair for `h200-1`
# (`grpo_h200.json`). No TPU ran it yet: device mode measures a step beside
# the plan and writes a ledger row. Reproduce:
#
#     python benchmarks/bench_grpo.py --parts plan,meshes --out benchmarks/results/07_grpo_plan.json
#     python benchmarks/bench_grpo.py --parts device,predict --out grpo_h100.json  # on a GPU

# %%
report.evidence("07_grpo_plan")
