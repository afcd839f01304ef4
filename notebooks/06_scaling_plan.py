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
# # 06 · Scaling plan: parameters, FLOPs, memory, chips and mesh for a big run
#
# Before renting a pod, do the arithmetic. This notebook reproduces the scaling book's
# LLaMA-3 70B worked example (and the 405B follow-up) with `shared.sizing`, then shows
# **sharded initialisation**: creating a large embedding table directly in its shards, so no
# device ever holds the whole table (the seed of this notebook: a table that ran a device out
# of memory at init).
#
# Modes: `local` does the maths and the sharded init on 8 CPU devices; `plan` also compiles
# the init for `TARGET` with the real TPU compiler; `device` runs the init on the attached
# accelerators and reads their memory.

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
TARGET = "v5e-8"  # plan mode: the slice to compile the sharded init for
MODEL = "llama3-70b"  # any preset of shared.sizing
FOLLOW_UP = "llama3-405b"
RESULTS_DIR = "results/06_scaling_plan"
SEED = 0
HARDWARE = "v5p"  # chip for the training-time and mesh maths
CHIPS = 8960  # a full v5p pod, 16x20x28
TOKENS = 15e12
BATCH_TOKENS = 4.19e6  # ~4M tokens per step, the book's 4.19e6
MFU = 0.4
FOLLOW_UP_PODS = 8
FOLLOW_UP_BATCH_TOKENS = 16e6  # LLaMA-3 405B's final batch size
EMBED_V = 262144  # the sharded-init demo: a Gemma 3 vocabulary ...
EMBED_D = 1152  # ... at gemma3-1b's width, fp32

# %%
if MODE == "local":  # 8 CPU devices for the sharded-init demo; must precede the first jax import
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import display

from shared import hardware, report, sizing

report.check_mode(MODE)
out = report.results_dir(RESULTS_DIR)
dims, chip = sizing.preset(MODEL), hardware.chip(HARDWARE)
GB = 1e9


def show(rows, name):
    """Save rows as CSV/JSON under RESULTS_DIR and display them as a table."""
    display(report.table(rows, out, name))


# %% [markdown]
# ## 1 · Parameters by part
# Attention `2·D·H·(N+K)` and SwiGLU MLP `3·D·F` per layer; `D·V` per vocabulary table
# (LLaMA-3 has separate input and output tables).

# %%
params = sizing.param_counts(dims)
show([{"part": part, "params": f"{count / 1e9:.3f} B"} for part, count in params.items()],
     "params")
fig, ax = plt.subplots(figsize=(6, 3))
parts = ["embedding", "lm_head", "attention", "mlp", "norms"]
ax.barh(parts, [params[p] / 1e9 for p in parts])
ax.set_xlabel("parameters (billions)")
ax.set_title(f"{MODEL}: {params['total'] / 1e9:.1f}B parameters by part")
report.save_figure(fig, out, "params_by_part")
plt.show()

# %% [markdown]
# ## 2 · FLOPs per token and in total
# The book's back-of-the-envelope rule is `6 × parameters`. MaxText counts the matmul
# parameters (the input embedding is a gather) plus attention `6·L·T·N·H` halved for
# causality; PaLM / nanochat do not halve. At T = 8192 attention adds ~7% for 70B.

# %%
flops_rows = []
for convention in sizing.FLOP_CONVENTIONS:
    per_token = sizing.flops_per_token(dims, dims.T, convention)
    flops_rows.append({"convention": convention, "flops_per_token": f"{per_token:.3e}",
                       "total_flops": f"{per_token * TOKENS:.3e}"})
show(flops_rows, "flops")
book_flops = sizing.flops_per_token(dims, convention="params")

# %% [markdown]
# ## 3 · Training time
# Days = total FLOPs / (chips × peak × MFU). The book's answer for 15T tokens on a full v5p pod
# at 40% MFU is about 44 days.

# %%
days = sizing.training_seconds(TOKENS, book_flops, CHIPS * chip.peak_bf16_flops, MFU) / 86400
print(f"{MODEL} on {CHIPS} {HARDWARE} chips at {MFU:.0%} MFU: {days:.1f} days "
      f"({book_flops * TOKENS:.2e} FLOPs, 6×params convention)")
mfus = np.linspace(0.2, 0.7, 26)
fig, ax = plt.subplots(figsize=(6, 3.5))
for chips in (CHIPS // 4, CHIPS // 2, CHIPS, 2 * CHIPS):
    ax.plot(mfus * 100, [sizing.training_seconds(TOKENS, book_flops, chips * chip.peak_bf16_flops,
                                                 m) / 86400 for m in mfus], label=f"{chips} chips")
ax.axvline(MFU * 100, color="grey", ls=":")
ax.set_xlabel("MFU (%)")
ax.set_ylabel("training time (days)")
ax.set_yscale("log")
ax.set_title(f"{MODEL}, {TOKENS:.0e} tokens on {HARDWARE}")
ax.legend()
report.save_figure(fig, out, "days_vs_mfu")
plt.show()

# %% [markdown]
# ## 4 · Training memory and the minimum number of chips
# bf16 parameters (2 B), fp32 Adam state (8 B/param) and three bf16 checkpoints of width D per
# layer (the book's "very conservative" scheme). The book leaves gradients out (they can be
# applied as they are reduce-scattered); we show both. The book divides by 96 GB per v5p; our
# table says 95 GiB (102 GB), so our minimum chip count comes out a little lower.

# %%
book = sizing.training_memory(dims, BATCH_TOKENS, chips=CHIPS, grad_bytes=None)
with_grads = sizing.training_memory(dims, BATCH_TOKENS, chips=CHIPS)
rows = [{"part": part, "book (no grads)": f"{book[part] / GB:,.0f} GB",
         "with bf16 grads": f"{with_grads[part] / GB:,.0f} GB"} for part in book]
show(rows, "training_memory")
min_book = sizing.min_chips_for_memory(book["total"], 96e9)
min_ours = sizing.min_chips_for_memory(book["total"], chip.hbm_bytes)
rounded = sizing.training_memory(dims, 4e6, grad_bytes=None)["total"]
print(f"minimum chips: {min_book} at the book's 96e9 B per chip, {min_ours} at "
      f"{chip.hbm_bytes / 2**30:.0f} GiB; on {CHIPS} chips each holds "
      f"{book['per_chip'] / GB:.2f} GB.\nThe book rounds the batch to 4e6 tokens for this "
      f"table: {rounded / 1e12:.1f} TB and {sizing.min_chips_for_memory(rounded, 96e9)} chips.")
chip_counts = np.logspace(1, np.log10(4 * CHIPS), 60)
fig, ax = plt.subplots(figsize=(6, 3.5))
for remat in sizing.REMAT_POLICIES:
    total = sizing.training_memory(dims, BATCH_TOKENS, remat=remat)["total"]
    ax.plot(chip_counts, total / chip_counts / GB, label=f"remat={remat}")
ax.axhline(chip.hbm_bytes / GB, color="red", ls="--", label=f"{HARDWARE} HBM")
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("chips (everything FSDP-sharded)")
ax.set_ylabel("memory per chip (GB)")
ax.set_title(f"{MODEL} training memory per chip, {BATCH_TOKENS:.3g} tokens/step")
ax.legend()
report.save_figure(fig, out, "memory_per_chip")
plt.show()

# %% [markdown]
# ## 5 · FSDP or tensor parallelism?
# The scaling book's training chapter: with α = peak / ICI bandwidth (2550 on v5p), pure FSDP
# is compute-bound when the per-chip batch exceeds α / (ICI axes); mixed FSDP × TP down to
# 4α²/(F·M_X·M_Y); the FSDP degree that minimises communication is
# X_opt = √(B·chips·M_X / (F·M_Y)). We use M_X = 2, M_Y = 1 as the book does. The LLaMA
# chapter quotes the upper end of the compute-bound range (≈1927) instead of X_opt (≈1618):
# both are printed.

# %%
mesh_plan = sizing.mesh_choice(dims, BATCH_TOKENS, CHIPS, chip)
show([{"quantity": key, "value": f"{value:.4g}" if isinstance(value, float) else value}
      for key, value in mesh_plan.items()], "mesh_choice")
xs = np.logspace(0, np.log10(CHIPS), 200)
ratio = sizing.comms_to_compute(dims, BATCH_TOKENS, CHIPS, mesh_plan["alpha"], xs,
                                mesh_plan["M_X"], mesh_plan["M_Y"])
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(xs, ratio)
ax.axhline(1, color="red", ls="--", label="comms = compute")
ax.axvline(mesh_plan["x_opt"], color="green", ls=":",
           label=f"X_opt ≈ {mesh_plan['x_opt']:.0f}")
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("FSDP degree X (TP degree = chips / X)")
ax.set_ylabel("comms time / compute time")
ax.set_title(f"{MODEL} on {CHIPS} {HARDWARE}: mixed FSDP × TP")
ax.legend()
report.save_figure(fig, out, "mesh_comms_ratio")
plt.show()

# %% [markdown]
# ## 6 · The 405B follow-up
# Same questions for LLaMA-3 405B on `FOLLOW_UP_PODS` v5p pods with twice the batch.

# %%
big = sizing.preset(FOLLOW_UP)
big_chips = FOLLOW_UP_PODS * CHIPS
big_flops = sizing.flops_per_token(big, convention="params")
big_days = sizing.training_seconds(TOKENS, big_flops, big_chips * chip.peak_bf16_flops, MFU) / 86400
# Across pods (DCN) the book uses pure data parallelism; inside a pod, FSDP x TP on the pod's
# share of the batch.
pod_mesh = sizing.mesh_choice(big, FOLLOW_UP_BATCH_TOKENS / FOLLOW_UP_PODS, CHIPS, chip)
show([{"model": FOLLOW_UP, "params_B": f"{sizing.param_counts(big)['total'] / 1e9:.1f}",
       "flops_per_step": f"{big_flops * FOLLOW_UP_BATCH_TOKENS:.3e}",
       "total_flops": f"{big_flops * TOKENS:.3e}", "days": f"{big_days:.1f}",
       "per_pod_advice": pod_mesh["advice"]}], "follow_up")
print(f"per pod: {pod_mesh['per_chip_batch_tokens']:.0f} tokens per chip against a mixed "
      f"FSDP x TP threshold of {pod_mesh['mixed_threshold']:.0f}: a per-pod batch of at least "
      f"{pod_mesh['mixed_threshold'] * CHIPS / 1e6:.1f}M tokens "
      f"({pod_mesh['mixed_threshold'] * big_chips / 1e6:.0f}M globally) keeps it compute-bound.")

# %% [markdown]
# ## 7 · Sharded initialisation
# Creating a `[V, D]` table and *then* sharding it puts the whole table on one device first.
# `jax.jit(init, out_shardings=...)` creates each shard where it lives. We compare what the
# compiler says each device needs in both cases, then (local/device) create the table and
# print each device's bytes. A second trap, measured here too: on a mesh with *Explicit* axes
# (jax's default) flax draws the whole random table on every device before slicing it.

# %%
import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from shared import measure, sharding


class Embedding(nnx.Module):
    """A vocabulary table sharded over fsdp along V, as our models declare it."""

    def __init__(self, rngs: nnx.Rngs):
        init = nnx.initializers.normal(stddev=1.0)
        self.table = nnx.Param(init(rngs.params(), (EMBED_V, EMBED_D), jnp.float32),
                               out_sharding=("fsdp", None))


def factory():
    return Embedding(nnx.Rngs(SEED))


if MODE == "plan":
    from shared import plan

    devices = plan.topology_devices(hardware.parse_target(TARGET))
else:
    devices = jax.devices()
mesh = sharding.make_mesh(None, devices)
explicit_mesh = Mesh(mesh.devices, sharding.AXES, axis_types=(AxisType.Explicit,) * 2)
table_bytes = EMBED_V * EMBED_D * 4


def compiled_bytes(init_fn, on_mesh):
    with jax.set_mesh(on_mesh):
        return measure.compiled_memory(init_fn.lower().compile())


whole = jax.jit(lambda: nnx.state(factory()),
                out_shardings=NamedSharding(mesh, PartitionSpec()))  # the table on every device
shardings = sharding.state_shardings(sharding.abstract_module(factory, mesh), mesh)
sharded = jax.jit(lambda: nnx.state(factory()), out_shardings=shardings)
explicit_shardings = sharding.state_shardings(sharding.abstract_module(factory, explicit_mesh),
                                              explicit_mesh)
explicit = jax.jit(lambda: nnx.state(factory()), out_shardings=explicit_shardings)
init_rows = []
for name, fn, on_mesh in (("whole table on each device", whole, mesh),
                          ("sharded init, Auto mesh axes", sharded, mesh),
                          ("sharded init, Explicit mesh axes", explicit, explicit_mesh)):
    stats = compiled_bytes(fn, on_mesh)
    held = stats["output_bytes"] + stats["temp_bytes"]
    init_rows.append({"how": name, "output per device": f"{stats['output_bytes'] / 2**20:,.0f} MiB",
                      "temporaries per device": f"{stats['temp_bytes'] / 2**20:,.0f} MiB",
                      "peak per device / table": f"{held / table_bytes:.2f}"})
print(f"[{EMBED_V}, {EMBED_D}] fp32 table = {table_bytes / 2**20:,.0f} MiB, "
      f"{len(devices)} devices ({devices[0].device_kind})")
show(init_rows, "sharded_init")

# %%
if MODE != "plan":
    module = sharding.sharded_init(factory, mesh)
    shards = module.table[...].addressable_shards
    per_device = [{"device": str(s.device), "shard": str(s.data.shape),
                   "MiB": f"{s.data.nbytes / 2**20:,.0f}"} for s in shards]
    show(per_device, "sharded_init_per_device")
    assert all(s.data.nbytes * len(shards) == table_bytes for s in shards)
    live = measure.device_memory()
    if live is not None:
        print("peak bytes in use per device:", [d["peak_bytes_in_use"] for d in live])

# %% [markdown]
# ## Summary

# %%
summary = [
    {"question": "parameters", "answer": f"{params['total'] / 1e9:.1f} B"},
    {"question": "FLOPs, 6×params", "answer": f"{book_flops * TOKENS:.2e}"},
    {"question": f"days on {CHIPS} {HARDWARE} at {MFU:.0%} MFU", "answer": f"{days:.0f}"},
    {"question": "training memory (book)", "answer": f"{book['total'] / 1e12:.1f} TB"},
    {"question": "minimum chips (book's 96 GB)", "answer": min_book},
    {"question": "X_opt (FSDP degree)", "answer": f"{mesh_plan['x_opt']:.0f}"},
    {"question": "mesh advice", "answer": mesh_plan["advice"]},
]
show(summary, "summary")
