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
# # 06 · Scaling plan: LLaMA-3 70B on a v5p pod, before renting it
#
# ## What we found
#
# **The question.** Train LLaMA-3 70B on 15T tokens, 4M-token batches, on a full v5p pod
# (8,960 chips). How many FLOPs, days and dollars; how much memory, so how few chips would
# hold it; which mesh? The scaling book's applied-training chapter answers 6.3e24 FLOPs,
# 44 days at 40% MFU and 16.5 TB (171 chips); a widely read write-up of the same example
# calls the book's activation count a trap and gets ~110 TB (1,156 chips). Who is right?
#
# **The answer** (`benchmarks/results/scaling_plan.json`, made 2026-11-23 with jax 0.10.2,
# libtpu 0.0.42.1, tunix 0.1.7 on a shared 2-core CPU, TPU compiles deviceless):
#
# - 70.55B parameters; 6·P·T = **6.35e24 FLOPs: 44.7 days** at 40% MFU on 8,960 v5p chips,
#   **$40.3M on demand, $8.0M spot** (us-central1, read 2026-11-22). Counting attention
#   (T = 8192, causal half, the MaxText way) adds 6%: 6.74e24 FLOPs, 47.4 days, $42.8M.
#   The 40% is the book's assumption for this example, not a measurement; MaxText reports
#   45-67% on TPU slices.
# - The two memory answers differ only in what they assume a layer keeps for the backward pass
#   (elements per token per layer): the book's three D-wide checkpoints (3·D, 16.4 TB,
#   **172 chips**), the write-up's F-wide count (7·D + 4·F = 6·F here, 110.8 TB,
#   **1,155 chips**), every intermediate of a plain layer (no remat: 88.5 TB, 923 chips) or
#   only the layer's input (full remat: 5.9 TB, 62 chips); book accounting: 4e6 tokens, no
#   gradients, 96 GB a chip. The write-up keeps more than a layer without any remat holds.
# - The real TPU compiler, on one and two layers of tunix's LLaMA-3.1 70B train step for a v5p-8
#   (2,048-token sequences), keeps **1.14 MB per token per layer without remat: 70·D bf16
#   elements**, more than even the F-wide count (21·D). tunix's attention forms its [heads, T, T]
#   scores (`einsum('BTHGD,BSHD->BHGTS')`, softmax in fp32: 64 × 2,048 per token, 0.5 MB alone),
#   which no closed form counts: they assume a flash attention. With whole-layer remat (`decoder`)
#   the per-token slope is below what two sizes resolve (it comes out negative: the compiler
#   schedules the two sizes differently), i.e. closest to `block`, the layer's input only. So the
#   book's D-wide count is no trap when a layer is rematerialised, and an underestimate when it is
#   not.
#
# ![LLaMA-3 70B training memory by assumption](../docs/figures/06_memory_policies.png)
#
# **What to do.** Size activations with remat in mind: with a layer's input as the only
# checkpoint (tunix `remat="decoder"`), 70B fits in well under 200 chips' HBM and any pod size
# is a compute decision; without remat it needs ~900 chips before anything else. Check the
# per-layer bytes for your model with `shared.plan.layer_probe` before trusting either rule, and
# budget the days at an MFU you have measured. Reproduce everything above:
# `python benchmarks/record_notebook.py 06 --out benchmarks/results/scaling_plan.json --
# -p MODE plan -p TARGET v5p-8 -p KEY_FIGURES True` (10 minutes on 2 cores); the run below
# checks its own numbers against that file.
#
# Modes: `local` (closed forms, the layer probe at a tiny shape, sharded init on 8 CPU
# devices), `plan` (the real 70B layers and the init for `TARGET`), `device` (the init).

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
TARGET = "v5p-8"  # the slice the layer probe (and, in plan mode, the sharded init) compiles for
MODEL = "llama3-70b"  # the closed-form maths: any preset of shared.sizing
RESULTS_DIR = "results/06_scaling_plan"
SEED = 0
KEY_FIGURES = False  # also write the figures "What we found" shows to docs/figures/
HARDWARE = "v5p"  # chip for the time, cost and mesh maths
CHIPS = 8960  # a full v5p pod, 16x20x28
TOKENS = 15e12
BATCH_TOKENS = 4194304  # 2**22 tokens a step; the book's memory table rounds it to 4e6
MFU = 0.4  # the book's assumption for this example
BOOK_HBM = 96e9  # bytes a v5p chip holds in the book's arithmetic (Google's table: 95 GiB)
# The layer probe (section 4): a tunix model, two global batches of sequences (multiples of
# TARGET's devices), the tunix remat policies; None: tiny locally, the real 70B in plan mode.
PROBE_MODEL = None  # llama3-tiny | llama3.1-70b
PROBE_SEQ = None  # 256 | 2048
PROBE_BATCHES = None  # [8, 16] | [4, 8]
PROBE_REMATS = ["none", "decoder"]  # 4 compiles each, ~1-2 min each for 70B on 2 idle cores
EMBED_V = 262144  # section 6, sharded init: a Gemma 3 vocabulary ...
EMBED_D = 1152  # ... at gemma3-1b's width, fp32

# %%
from shared import report

MODE = report.use_mode(MODE)  # before jax: plan mode compiles for TARGET on the CPU
if MODE == "local":  # 8 CPU devices for the sharded-init demo
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import display

from shared import hardware, models, plan, sizing
from shared.hardware import prices
from shared.plan import layer_probe

PROBE_MODEL = report.by_mode(MODE, PROBE_MODEL, "llama3-tiny", "llama3.1-70b")
PROBE_SEQ = report.by_mode(MODE, PROBE_SEQ, 256, 2048)
PROBE_BATCHES = report.by_mode(MODE, PROBE_BATCHES, [8, 16], [4, 8])
dims, chip = sizing.preset(MODEL), hardware.chip(HARDWARE)
out = report.results_dir(RESULTS_DIR)
quoted_tables = (report.committed("scaling_plan") or {}).get("tables", {})  # the answer's
TB, KEY = 1e12, "06_" if KEY_FIGURES else None  # KEY: key figures also go to docs/figures/

# %% [markdown]
# ## 1 · Parameters, FLOPs, days and dollars
# Attention `2·D·H·(N+K)` and SwiGLU MLP `3·D·F` per layer, `D·V` per vocabulary table
# (LLaMA-3 has two). The book's rule is 6 FLOPs per parameter per token (6·P·T); MaxText adds
# attention, `6·L·T·N·H` per token with the causal half; PaLM and nanochat do not halve.
# Days = FLOPs / (chips × peak × MFU); dollars = chip-hours × the dated price of a v5p chip.

# %%
params = sizing.param_counts(dims)
on_demand, spot = prices.lookup(HARDWARE, "on-demand"), prices.lookup(HARDWARE, "spot")
cost_rows = []
for convention in ("params", "maxtext", "palm"):
    per_token = sizing.flops_per_token(dims, convention=convention)
    seconds = sizing.training_seconds(TOKENS, per_token, CHIPS * chip.peak_bf16_flops, MFU)
    chip_hours = CHIPS * seconds / 3600
    cost_rows.append({"convention": convention, "flops": per_token * TOKENS,
                      "days": seconds / 86400, "chip_hours": chip_hours,
                      "dollars_on_demand": chip_hours * on_demand.value,
                      "dollars_spot": chip_hours * spot.value})
display(report.table(cost_rows, out, "flops_days_dollars"))
print(f"{params['total'] / 1e9:.2f}B parameters. v5p per chip-hour: ${on_demand.value:.2f} on "
      f"demand, ${spot.value:.3f} spot, read {on_demand.read} from {on_demand.source[:40]}...")
mfus = np.linspace(0.2, 0.7, 26)
fig, ax = plt.subplots(figsize=(6, 3.5))
for row in cost_rows[:2]:
    ax.plot(mfus * 100, row["days"] * MFU / mfus, label=f"{row['convention']}: {row['flops']:.2e}")
ax.axvline(MFU * 100, color="grey", ls=":", label=f"the book's {MFU:.0%}")
ax.set(xlabel="MFU (%)", ylabel=f"days on {CHIPS} {HARDWARE} chips",
       title=f"{MODEL}, {TOKENS:.0e} tokens: days (right axis: $M on demand)")
per_day = 24 * CHIPS * on_demand.value / 1e6  # $M a day of the whole pod
ax.secondary_yaxis("right", functions=(lambda d: d * per_day, lambda m: m / per_day)).set_ylabel(
    "$M on demand")
ax.legend()
report.save_figure(fig, out, "days_dollars", key=KEY and KEY + "days_dollars")
plt.show()

# %% [markdown]
# ## 2 · Memory: what does a layer keep for the backward pass?
# Everything else is agreed: bf16 parameters (2 bytes), fp32 Adam (8 bytes a parameter),
# gradients applied as they are reduce-scattered (the book leaves them out). Activations are
# `tokens × L × 2 bytes × (elements kept per token per layer)`, and that last factor is the
# whole disagreement:
#
# - **book3**, `3·D`: the book's "very conservative" three D-wide checkpoints per layer; the
#   rest of the layer (its F-wide MLP included) is recomputed in the backward pass.
# - **fwide**, `3·D + 4·D + 4·F`: the write-up. It states four checkpoints per layer, first
#   counted at D (21 TB), then at F "since the FFW block outputs BF tensors" (it writes 58 TB
#   for `4 × 4M × 28,672 × 80 × 2`, which is 73.4 TB), and a total of ~110 TB, 1,156 chips
#   (111 TB / 96 GB). It does not itemise the total; the book's 3·D plus its four D-wide and
#   four F-wide checkpoints is the reading that gives it: 6·F elements, as F = 3.5·D here.
# - **none**, `4·D + 2·N·H + 2·K·H + 3·F`: every intermediate of a plain layer with
#   flash-style attention: norm outputs and residual, q, k, v, attention output, and the
#   MLP's gate, up and product. Nothing is recomputed.
# - **block**, `D`: the layer's input only; the whole layer is recomputed (tunix's
#   `remat="decoder"`; tunix's `"block"` remats attention and MLP apart, ~book3).
#
# The write-up's trap is real for an implementation that keeps the MLP's F-wide tensors, but
# then it must keep them instead of recomputing them, and a layer that recomputes nothing
# keeps `none`, 20% less than fwide. The book's count is right for a policy that recomputes
# the layer from three checkpoints, at the price of one more forward pass (~33% more FLOPs).

# %%
policy_rows = []
for remat in sizing.REMAT_POLICIES:
    book = sizing.training_memory(dims, 4e6, remat=remat, grad_bytes=None)
    ours = sizing.training_memory(dims, BATCH_TOKENS, remat=remat)
    policy_rows.append({
        "policy": remat, "per_layer_elements": sizing.REMAT_FORMULAS[remat],
        "elements": sizing.activation_elements_per_token_layer(dims, remat),
        "book_TB": book["total"] / TB,
        "book_chips": sizing.min_chips_for_memory(book["total"], BOOK_HBM),
        "ours_TiB": ours["total"] / 2**40,
        "ours_chips": sizing.min_chips_for_memory(ours["total"], chip.hbm_bytes)})
display(report.table(policy_rows, out, "memory_policies"))
states = book["params"] + book["optimizer"]  # the same under every policy
print(f"book accounting: 4e6 tokens, no gradients, 96 GB a chip; ours: {BATCH_TOKENS:,} "
      f"tokens, bf16 gradients, {chip.hbm_bytes / 2**30:.0f} GiB a chip")

# %% [markdown]
# ## 3 · What the compiler keeps: one layer of the real train step
# `shared.plan.layer_probe` builds tunix's LLaMA-3.1 70B (the same dimensions) cut to one and to two
# decoder layers, with a 256-token vocabulary (embedding, head and logits weigh nothing), the
# FSDP training layout over `TARGET`'s devices, and compiles a full-parameter step (loss and
# gradient of every weight, no optimizer) with the real TPU compiler, at two batches. The
# second layer's temporaries, per extra token, are what a layer keeps; what the second layer
# adds whatever the batch (its all-gathered weights) is reported apart. tunix's attention is a
# plain einsum and softmax, not flash, so its `[N, T, T]` scores can add up to `N·T` elements
# per token on top of the formulas (131k at T = 2048, as much as the whole `none` count).

# %%
probe_mesh = plan.target_mesh(hardware.parse_target(TARGET))
probes = {remat: layer_probe.probe(PROBE_MODEL, probe_mesh, batches=tuple(PROBE_BATCHES),
                                   seq=PROBE_SEQ, remat=remat) for remat in PROBE_REMATS}
probe_dims = models.dims(PROBE_MODEL, layer_probe.probe_config(PROBE_MODEL, layers=1))
formula_bytes = {r: 2 * sizing.activation_elements_per_token_layer(probe_dims, r)
                 for r in sizing.REMAT_POLICIES}
probe_rows = []
for remat, p in probes.items():
    kept = p["kept_bytes_per_token_layer"]
    closest = min(formula_bytes, key=lambda r: abs(np.log(max(kept, 1) / formula_bytes[r])))
    probe_rows.append({"model": PROBE_MODEL, "target": TARGET, "seq": PROBE_SEQ,
                       "tokens_per_device": p["tokens_per_device"], "tunix_remat": remat,
                       "kept_bytes_per_token_layer": kept, "in_D": kept / 2 / probe_dims.D,
                       "closest_policy": closest, "closest_bytes": formula_bytes[closest],
                       "per_layer_fixed_bytes": p["per_layer_fixed_bytes"],
                       "compile_s": p["compile_s"]})
display(report.table(probe_rows, out, "layer_probe"))
per_layer = {k: 2 * v / probe_dims.L for k, v in sizing.param_counts(probe_dims).items()}
print(f"one layer's bf16 weights: {report.bytes_text(per_layer['attention'])} attention + "
      f"{report.bytes_text(per_layer['mlp'])} MLP; one sequence's [N, T, T] scores in bf16: "
      f"{report.bytes_text(2 * probe_dims.N * PROBE_SEQ**2)}")

# %% [markdown]
# Everything side by side for the 70B run, the compiled rows scaled to 80 layers and
# 4e6 tokens (book accounting; at the probe's T, the score term grows with T):

# %%
scaled = [{"policy": f"compiled, remat={r}", "book_TB": (states + 4e6 * dims.L * p[
    "kept_bytes_per_token_layer"]) / TB} for r, p in probes.items() if probe_dims.D == dims.D]
bars = [(r["policy"], r["book_TB"]) for r in policy_rows + scaled]
fig, ax = plt.subplots(figsize=(7, 3.5))
ax.barh([b[0] for b in bars], [b[1] for b in bars], color=["C0"] * 4 + ["C3"] * len(scaled))
for i, (_, total) in enumerate(bars):
    chips = sizing.min_chips_for_memory(total * TB, BOOK_HBM)
    ax.text(total, i, f" {total:,.1f} TB, {chips:,} chips", va="center")
ax.set(xscale="log", xlim=(1, 3000), title=f"{MODEL}: memory, fewest 96 GB chips that hold it",
       xlabel="training memory, TB (4e6 tokens, bf16 params, fp32 Adam)")
report.save_figure(fig, out, "memory_policies", key=KEY and KEY + "memory_policies")
plt.show()

# %% [markdown]
# ## 4 · FSDP or tensor parallelism?
# The book's training chapter: with α = peak / ICI bandwidth (2550 on v5p), pure FSDP is
# compute-bound when the per-chip batch exceeds α / (ICI axes); mixed FSDP × TP down to
# 4α²/(F·M_X·M_Y); the FSDP degree that minimises communication is
# X_opt = √(B·chips·M_X / (F·M_Y)), with M_X = 2, M_Y = 1 as the book does. Its LLaMA chapter
# quotes the upper end of the compute-bound range (≈1927) instead of X_opt (≈1618).

# %%
mesh_plan = sizing.mesh_choice(dims, BATCH_TOKENS, CHIPS, chip)
display(report.table([{"quantity": k, "value": f"{v:.4g}" if isinstance(v, float) else v}
                      for k, v in mesh_plan.items()], out, "mesh_choice"))

# %% [markdown]
# ## 5 · Sharded initialisation
# The seed of this notebook was a table that ran a device out of memory at init. Creating a
# `[V, D]` table and *then* sharding it puts the whole table on one device first;
# `jax.jit(init, out_shardings=...)` creates each shard where it lives. We compare what the
# compiler says each device needs, then (local/device) create the table and read each shard.
# A second trap: on a mesh with *Explicit* axes (jax's default) flax draws the whole random
# table on every device before slicing it.

# %%
import jax.numpy as jnp
from flax import nnx
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from shared.hardware import sharding
from shared.plan import compiled


class Embedding(nnx.Module):
    """A vocabulary table sharded over fsdp along V, as our models declare it."""

    def __init__(self, rngs: nnx.Rngs):
        init = nnx.initializers.normal(stddev=1.0)
        self.table = nnx.Param(init(rngs.params(), (EMBED_V, EMBED_D), jnp.float32),
                               out_sharding=("fsdp", None))


def factory():
    return Embedding(nnx.Rngs(SEED))


devices = plan.topology_devices(hardware.parse_target(TARGET)) if MODE == "plan" else jax.devices()
mesh = sharding.make_mesh(None, devices)
explicit_mesh = Mesh(mesh.devices, sharding.AXES, axis_types=(AxisType.Explicit,) * 2)
table_bytes, init_rows = EMBED_V * EMBED_D * 4, []
for how, on_mesh, out_shardings in (
        ("whole table on each device", mesh, NamedSharding(mesh, PartitionSpec())),
        ("sharded init, Auto mesh axes", mesh, None),
        ("sharded init, Explicit mesh axes", explicit_mesh, None)):
    out_shardings = out_shardings or sharding.state_shardings(
        sharding.abstract_module(factory, on_mesh), on_mesh)
    with jax.set_mesh(on_mesh):
        stats = compiled.compiled_memory(jax.jit(lambda: nnx.state(factory()),
                                                out_shardings=out_shardings).lower().compile())
    held = stats["output_bytes"] + stats["temp_bytes"]
    init_rows.append({"how": how, "output_MiB": stats["output_bytes"] / 2**20,
                      "temporaries_MiB": stats["temp_bytes"] / 2**20,
                      "peak_over_table": held / table_bytes})
print(f"[{EMBED_V}, {EMBED_D}] fp32 table = {table_bytes / 2**20:,.0f} MiB on {len(devices)} "
      f"devices ({devices[0].device_kind})")
display(report.table(init_rows, out, "sharded_init"))
if MODE != "plan":  # create it for real and read each device's shard
    shards = sharding.sharded_init(factory, mesh).table[...].addressable_shards
    assert all(s.data.nbytes * len(shards) == table_bytes for s in shards)
    print("each device holds", {str(s.data.shape) for s in shards}, "of", (EMBED_V, EMBED_D))

# %% [markdown]
# ## 6 · Does this run agree with the committed answer?

# %%
summary = [{"question": "parameters (B)", "answer": params["total"] / 1e9},
           *({"question": f"{r['convention']}: {k}", "answer": r[k]} for r in cost_rows
             for k in ("flops", "days", "dollars_on_demand", "dollars_spot")),
           *({"question": f"{r['policy']}: {k}", "answer": r[k]} for r in policy_rows
             for k in ("book_TB", "book_chips", "ours_chips")),
           {"question": "X_opt", "answer": mesh_plan["x_opt"]}]
report.save_table(summary, out, "summary")  # every number above; the headline ones:
old = {row["question"]: row["answer"] for row in quoted_tables.get("summary", [])}
for row in summary:
    if row["question"].split(":")[0] in ("parameters (B)", "params", "book3", "fwide", "X_opt"):
        report.agree(row["question"], row["answer"], old.get(row["question"]), rel=1e-9)
old_probe = {(r["model"], r["target"], r["seq"], r["tunix_remat"]): r
             for r in quoted_tables.get("layer_probe", [])}
for row in probe_rows:
    what = f"{row['model']} on {row['target']}, T = {row['seq']}, remat {row['tunix_remat']}"
    match = old_probe.get((row["model"], row["target"], row["seq"], row["tunix_remat"]))
    report.agree(f"compiled bytes per token per layer, {what}", row["kept_bytes_per_token_layer"],
                 match and match["kept_bytes_per_token_layer"], rel=0.01)
