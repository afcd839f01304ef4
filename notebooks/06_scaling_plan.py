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
# # 06 · LLaMA-3 70B on a v5p pod: how many days and dollars, how many chips, which mesh?
#
# ## Takeaway
# 70.55B parameters, 6·P·T = **6.35e24 FLOPs: 44.7 days on 8,960 v5p chips at 40% MFU, $40.3M
# on demand or $8.0M spot**. The chips that must *hold* it depend on what a layer keeps for the
# backward pass: the book's three D-wide checkpoints need 16.4 TB (**172 chips**), a write-up's
# F-wide count 110.8 TB (**1,155 chips**). The TPU compiler on tunix's real 70B layer decides
# by remat: without remat a layer keeps **1.14 MB a token (70·D)**, more than either count (its
# [heads, T, T] attention scores); rematerialising the layer keeps about its input only. So
# with `remat="decoder"` 70B fits well under 200 chips; without remat it needs ~900. Mesh: 468
# tokens a chip are too few for pure FSDP (850): mix in tensor parallelism, FSDP degree ≈ 1,619.
#
# ![LLaMA-3 70B training memory by assumption](../docs/figures/06_memory_policies.png)

# %% [markdown]
# ## The question
# As the scaling book's applied-training chapter poses it: LLaMA-3 70B on 15T tokens,
# 4M-token batches, a full v5p pod. The book answers 6.3e24 FLOPs, 44 days at 40% MFU and
# 16.5 TB (171 chips); a widely read write-up of the same example calls the book's activation
# count a trap and gets ~110 TB (1,156 chips). `local` mode runs the closed forms, the layer
# probe at a tiny shape and the sharded init on 8 CPU devices; `plan` the real 70B layers and
# the init for `TARGET`; `device` the init.

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
TARGET = "v5p-8"  # the slice the layer probe (and, in plan mode, the sharded init) compiles for
MODEL = "llama3-70b"  # the closed-form maths: any preset of shared.sizing
RESULTS_DIR = "results/06_scaling_plan"
SEED = 0
KEY_FIGURES = False  # also write the figures the Takeaway shows to docs/figures/
HARDWARE = "v5p"  # chip for the time, cost and mesh maths
CHIPS = 8960  # a full v5p pod, 16x20x28
TOKENS = 15e12
BATCH_TOKENS = 4194304  # 2**22 tokens a step; the book's memory table rounds it to 4e6
MFU = 0.4  # the book's assumption for this example
BOOK_HBM = 96e9  # bytes a v5p chip holds in the book's arithmetic (Google's table: 95 GiB)
# The layer probe (section 3): a tunix model, two global batches of sequences (multiples of
# TARGET's devices), the tunix remat policies; None: tiny locally, the real 70B in plan mode.
PROBE_MODEL = None  # llama3-tiny | llama3.1-70b
PROBE_SEQ = None  # 256 | 2048
PROBE_BATCHES = None  # [8, 16] | [4, 8]
PROBE_REMATS = ["none", "decoder"]  # 4 compiles each, ~1-2 min each for 70B on 2 idle cores
EMBED_V = 262144  # section 5, sharded init: a Gemma 3 vocabulary ...
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
from shared.findings import scaling as findings
from shared.hardware import prices
from shared.plan.compiler import layer_probe
from shared.sizing.settings import ScalingPlan

setting = report.setting(
    MODE, ScalingPlan, MODEL=MODEL, HARDWARE=HARDWARE, CHIPS=CHIPS, TOKENS=TOKENS,
    BATCH_TOKENS=BATCH_TOKENS, MFU=MFU, BOOK_HBM=BOOK_HBM, TARGET=TARGET,
    PROBE_MODEL=PROBE_MODEL, PROBE_SEQ=PROBE_SEQ, PROBE_BATCHES=PROBE_BATCHES,
    PROBE_REMATS=PROBE_REMATS, EMBED_V=EMBED_V, EMBED_D=EMBED_D)
dims, chip = setting.dims, setting.chip
out = report.results_dir(RESULTS_DIR)
TB, KEY = 1e12, "06_" if KEY_FIGURES else None  # KEY: key figures also go to docs/figures/

# %% [markdown]
# ## 1 · Parameters, FLOPs, days and dollars
# Attention `2·D·H·(N+K)` and SwiGLU MLP `3·D·F` per layer, `D·V` per vocabulary table
# (LLaMA-3 has two). The book's rule is 6 FLOPs per parameter per token (6·P·T); MaxText adds
# attention, `6·L·T·N·H` per token with the causal half; PaLM and nanochat do not halve.
# Days = FLOPs / (chips × peak × MFU); dollars = chip-hours × the dated price of a v5p chip.
# For 70B: 6.35e24 FLOPs by the book's rule, 6.74e24 (47.4 days, $42.8M) with attention at
# T = 8192 the MaxText way. The 40% is the book's assumption for this example, not a
# measurement; MaxText reports 45-67% on TPU slices, so budget the days at an MFU you measured.

# %%
params = sizing.param_counts(dims)
on_demand = prices.lookup(setting.hardware, "on-demand")
spot = prices.lookup(setting.hardware, "spot")
pod_flops = setting.chips * chip.peak_bf16_flops
cost_rows = []
for convention in ("params", "maxtext", "palm"):
    per_token = sizing.flops_per_token(dims, convention=convention)
    seconds = sizing.training_seconds(setting.tokens, per_token, pod_flops, setting.mfu)
    chip_hours = setting.chips * seconds / 3600
    cost_rows.append({"convention": convention, "flops": per_token * setting.tokens,
                      "days": seconds / 86400, "chip_hours": chip_hours,
                      "dollars_on_demand": chip_hours * on_demand.value,
                      "dollars_spot": chip_hours * spot.value})
display(report.table(cost_rows, out, "flops_days_dollars"))
print(f"{params['total'] / 1e9:.2f}B parameters. v5p per chip-hour: ${on_demand.value:.2f} on "
      f"demand, ${spot.value:.3f} spot, read {on_demand.read} from {on_demand.source[:40]}...")
mfus = np.linspace(0.2, 0.7, 26)
fig, ax = plt.subplots(figsize=(6, 3.5))
for row in cost_rows[:2]:
    days = row["days"] * setting.mfu / mfus
    ax.plot(mfus * 100, days, label=f"{row['convention']}: {row['flops']:.2e}")
ax.axvline(setting.mfu * 100, color="grey", ls=":", label=f"the book's {setting.mfu:.0%}")
ax.set(xlabel="MFU (%)", ylabel=f"days on {setting.chips} {setting.hardware} chips",
       title=f"{setting.model}, {setting.tokens:.0e} tokens: days (right axis: $M on demand)")
per_day = 24 * setting.chips * on_demand.value / 1e6  # $M a day of the whole pod
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
# In the book's accounting (4e6 tokens, no gradients, 96 GB a chip): book3 16.4 TB, 172
# chips; fwide 110.8 TB, 1,155 chips; none 88.5 TB, 923 chips; block 5.9 TB, 62 chips. The
# write-up's trap is real for an implementation that keeps the MLP's F-wide tensors, but then
# it must keep them instead of recomputing them, and a layer that recomputes nothing keeps
# `none`, 20% less than fwide. The book's count is right for a policy that recomputes the
# layer from three checkpoints, at the price of one more forward pass (~33% more FLOPs).

# %%
policy_rows = []
for remat in sizing.REMAT_POLICIES:
    book = sizing.training_memory(dims, 4e6, remat=remat, grad_bytes=None)
    ours = sizing.training_memory(dims, setting.batch_tokens, remat=remat)
    policy_rows.append({
        "policy": remat, "per_layer_elements": sizing.REMAT_FORMULAS[remat],
        "elements": sizing.activation_elements_per_token_layer(dims, remat),
        "book_TB": book["total"] / TB,
        "book_chips": sizing.min_chips_for_memory(book["total"], setting.book_hbm),
        "ours_TiB": ours["total"] / 2**40,
        "ours_chips": sizing.min_chips_for_memory(ours["total"], chip.hbm_bytes)})
display(report.table(policy_rows, out, "memory_policies"))
states = book["params"] + book["optimizer"]  # the same under every policy
print(f"book accounting: 4e6 tokens, no gradients, 96 GB a chip; ours: "
      f"{setting.batch_tokens:,} tokens, bf16 gradients, {chip.hbm_bytes / 2**30:.0f} GiB a chip")

# %% [markdown]
# ## 3 · What the compiler keeps: one layer of the real train step
# `shared.plan.compiler.layer_probe` builds tunix's LLaMA-3.1 70B (the same dimensions) cut to one
# and to two decoder layers, with a 256-token vocabulary (embedding, head and logits weigh nothing),
# the FSDP training layout over `TARGET`'s devices, and compiles a full-parameter step (loss and
# gradient of every weight, no optimizer) with the real TPU compiler, at two batches. The
# second layer's temporaries, per extra token, are what a layer keeps; what the second layer
# adds whatever the batch (its all-gathered weights) is reported apart. tunix's attention is a
# plain einsum and softmax, not flash, so its `[N, T, T]` scores can add up to `N·T` elements
# per token on top of the formulas (131k at T = 2048, as much as the whole `none` count).

# %%
probe_mesh = plan.target_mesh(hardware.parse_target(setting.target))
probes = {remat: layer_probe.probe(setting.probe_model, probe_mesh, seq=setting.probe_seq,
                                   batches=setting.probe_batches, remat=remat)
          for remat in setting.probe_remats}
probe_config = layer_probe.probe_config(setting.probe_model, layers=1)
probe_dims = models.dims(setting.probe_model, probe_config)
probe_rows = findings.probe_rows(probes, probe_dims, setting.target)
display(report.table(probe_rows, out, "layer_probe"))
per_layer = {k: 2 * v / probe_dims.L for k, v in sizing.param_counts(probe_dims).items()}
print(f"one layer's bf16 weights: {report.bytes_text(per_layer['attention'])} attention + "
      f"{report.bytes_text(per_layer['mlp'])} MLP; one sequence's [N, T, T] scores in bf16: "
      f"{report.bytes_text(2 * probe_dims.N * setting.probe_seq**2)}")

# %% [markdown]
# On one and two layers of tunix's LLaMA-3.1 70B for a v5p-8 (2,048-token sequences, plan
# mode), the compiler keeps **1.14 MB per token per layer without remat: 70·D bf16 elements**,
# more than even the F-wide count (21·D). tunix's attention forms its [heads, T, T] scores
# (`einsum('BTHGD,BSHD->BHGTS')`, softmax in fp32: 64 × 2,048 per token, 0.5 MB alone), which
# no closed form counts: they assume a flash attention. With whole-layer remat (`decoder`) the
# per-token slope is below what two sizes resolve (it comes out negative: the compiler
# schedules the two sizes differently), i.e. closest to `block`, the layer's input only. So the
# book's D-wide count is no trap when a layer is rematerialised, and an underestimate when it is
# not: check the per-layer bytes for your model with `shared.plan.compiler.layer_probe` before
# trusting either rule. Everything side by side for the 70B run, the compiled rows scaled to 80
# layers and 4e6 tokens (book accounting; at the probe's T, the score term grows with T):

# %%
scaled = findings.compiled_totals(probes, probe_dims, dims, states)
bars = [(r["policy"], r["book_TB"]) for r in policy_rows + scaled]
fig, ax = plt.subplots(figsize=(7, 3.5))
ax.barh([b[0] for b in bars], [b[1] for b in bars], color=["C0"] * 4 + ["C3"] * len(scaled))
for i, (_, total) in enumerate(bars):
    chips = sizing.min_chips_for_memory(total * TB, setting.book_hbm)
    ax.text(total, i, f" {total:,.1f} TB, {chips:,} chips", va="center")
ax.set(xscale="log", xlim=(1, 3000),
       title=f"{setting.model}: memory, fewest 96 GB chips that hold it",
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
mesh_plan = sizing.mesh_choice(dims, setting.batch_tokens, setting.chips, chip)
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
from shared.plan.compiler import compiled

V, D = setting.embed_v, setting.embed_d


class Embedding(nnx.Module):
    """A vocabulary table sharded over fsdp along V, as our models declare it."""

    def __init__(self, rngs: nnx.Rngs):
        init = nnx.initializers.normal(stddev=1.0)
        self.table = nnx.Param(init(rngs.params(), (V, D), jnp.float32),
                               out_sharding=("fsdp", None))


def factory():
    return Embedding(nnx.Rngs(SEED))


target = hardware.parse_target(setting.target)
devices = plan.target_devices(target) if MODE == "plan" else jax.devices()
mesh = sharding.make_mesh(None, devices)
explicit_mesh = Mesh(mesh.devices, sharding.AXES, axis_types=(AxisType.Explicit,) * 2)
table_bytes, init_rows = V * D * 4, []
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
print(f"[{V}, {D}] fp32 table = {table_bytes / 2**20:,.0f} MiB on {len(devices)} "
      f"devices ({devices[0].device_kind})")
display(report.table(init_rows, out, "sharded_init"))
if MODE != "plan":  # create it for real and read each device's shard
    shards = sharding.sharded_init(factory, mesh).table[...].addressable_shards
    assert all(s.data.nbytes * len(shards) == table_bytes for s in shards)
    print("each device holds", {str(s.data.shape) for s in shards}, "of", (V, D))

# %% [markdown]
# ## 6 · Does this run agree with the committed answer?
# Every number of sections 1, 2 and 4 goes into one summary table; the headline ones must equal
# the committed answer's exactly (closed forms), the compiled bytes per layer within 1%.

# %%
summary = findings.summary(params, cost_rows, policy_rows, mesh_plan)
report.save_table(summary, out, "summary")
agrees = findings.agree_with_committed(summary, probe_rows)

# %% [markdown]
# ## Evidence
# The Takeaway's numbers are the committed run `benchmarks/results/06_scaling_plan.json`, made
# 2026-11-23 in plan mode for a v5p-8 with jax 0.10.2, libtpu 0.0.42.1 and tunix 0.1.7 on a
# shared 2-core CPU (TPU compiles deviceless; 583 s, ~10 minutes, of which the layer probe's
# four 70B compiles a policy took 223 s without remat and 331 s with `decoder`); v5p prices in
# us-central1, read 2026-11-22. Reproduce them (section 6 checks this run against that file):
#
#     python benchmarks/record_notebook.py 06 --out benchmarks/results/06_scaling_plan.json -- \
#         -p MODE plan -p TARGET v5p-8 -p KEY_FIGURES True

# %%
report.evidence("06_scaling_plan")
