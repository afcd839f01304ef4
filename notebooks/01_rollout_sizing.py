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
# # 01 · Rollout sizing: which batch fits Gemma 3 with the tunix Sampler, and what does it cost?
#
# ## Takeaway
# **Pin `google-tunix>=0.1.7`.** At the field's setting (gemma3-1b, prompts padded to 128
# tokens, 1024 steps, a 1312-slot KV cache) the real TPU compiler fits **395 rows** on one v5e
# chip with tunix 0.1.7's Sampler and **212** with 0.1.6's, whose decode holds the KV cache
# twice: the field's boundary (200 ran, 256 ran out) lies between. 100,000 rollouts at 395 take
# about 4.77 h and $5.72 on a v5e-1 at an assumed 40% of the roofline; at 212, 12 h and $14.43.
# Which batch runs fastest only device mode measures: one H200 ran gemma3-1b at 45.5k tokens/s
# (batch 128), its peak 21.00 GB where the plan compiled for that GPU said 21.03.
#
# ![gemma3-1b rollouts on one v5e chip: bytes per batch](../docs/figures/01_tunix_bytes.png)

# %% [markdown]
# ## How this notebook answers it
# Three modes, one code path. `local` (the default) runs a tiny config of the real architecture
# with random weights on the CPU; any model tunix ships works by name (`-p MODEL qwen3-tiny`).
# `plan` compiles the Sampler's own prefill and decode for `TARGET` with the real TPU compiler,
# deviceless (gemma3-1b by default), and searches the largest batch under each tunix semantics.
# `device` measures on the attached TPU or GPU, puts the plan's prediction beside every point
# and appends both to the ledger (`results/ledger.csv`). The sizes each mode starts from are the
# presets of `shared.rollout.settings.RolloutSizing`: `local()` and the field's `field()`.

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
TARGET = "v5e-1"  # the slice or GPU machine to plan for (t4-2, l4-1, h100-1: compiled without it)
MODEL = None  # None: gemma3-tiny locally, gemma3-1b in plan/device mode; any MODEL_NAMES entry
WEIGHTS = "dummy"  # dummy: random weights, no download | kaggle: real weights (credentials)
# Sizes left at None: CPU-friendly locally, the field's setting in plan and device mode.
BATCH_SIZES = None  # measured at max(STEPS) steps
STEPS = None  # the steps sweep at the smallest batch; plan mode compiles max(STEPS)
PROMPT_LEN = None  # prompt tokens per row: 16 locally, else 128 (the field's padded prompts)
CACHE_SIZE = None  # KV slots: PROMPT_LEN + max(STEPS) + 32 locally, else 1312 (the field's)
TRIALS = 5  # timed calls per point after the first (compile + run) call
TUNIX = ["0.1.7", "0.1.6"]  # plan mode: Sampler semantics to compile (0.1.6: no donation)
PLAN_BATCHES = None  # plan mode: None searches the largest batch; a list compiles just those
ROLLOUTS = 100_000  # sequences to budget: hours and dollars at the largest batch
PRICE_KIND = "on-demand"  # on-demand | spot
RESULTS_DIR = "results/01_rollout_sizing"
SEED = 0
MESH = None  # FSDPxTP, e.g. "8x1"; None: every device on fsdp (local: one device)
KEY_FIGURES = False  # also write the key figures to docs/figures/ (the ones committed)

# %%
from shared import report

MODE = report.use_mode(MODE)  # before jax: plan mode compiles for TARGET on the CPU

import dataclasses
import math

import jax
import matplotlib.pyplot as plt
from packaging.version import Version

from shared import hardware, models, plan, sizing
from shared.findings import rollout as findings
from shared.hardware.sharding import make_mesh, mesh_shape
from shared.plan.atlas import lookup
from shared.plan.slices import budget
from shared.report import ledger
from shared.rollout import moe as rollout_moe
from shared.rollout import sampler as rollout
from shared.rollout import sweep as rollout_sweep
from shared.rollout.plots import plot_measured, plot_moe, plot_searches
from shared.rollout.settings import RolloutSizing

setting = report.setting(MODE, RolloutSizing, MODEL=MODEL, WEIGHTS=WEIGHTS, TUNIX=TUNIX,
                         BATCH_SIZES=BATCH_SIZES, STEPS=STEPS, PROMPT_LEN=PROMPT_LEN,
                         CACHE_SIZE=CACHE_SIZE, TRIALS=TRIALS, ROLLOUTS=ROLLOUTS)
print(setting)
if MODE == "device":  # join a multi-host slice first; then plan for the slice attached
    hardware.initialize_distributed()
    TARGET = hardware.current_target_name() or TARGET
target = hardware.parse_target(TARGET)
fsdp, tp = mesh_shape(MESH, target.chips)
usable = target.chip.compiler_hbm_bytes or target.chip.hbm_bytes  # what a program may use
dims, out = models.model_dims(setting.model), report.results_dir(RESULTS_DIR)
# The rollout plan mode compiles, with the Sampler semantics of the tunix installed here.
installed = "0.1.7" if Version(plan.versions()["google-tunix"]) >= Version("0.1.7") else "0.1.6"
request = plan.Request("rollout", setting.model, TARGET, batch=fsdp, mesh=MESH, tunix=installed,
                       prompt_len=setting.prompt_len, steps=setting.steps_max,
                       cache_size=setting.cache)
quoted = report.committed(findings.QUOTED)  # the numbers the Takeaway quotes

# %% [markdown]
# ## 1 · The closed form: weights plus KV cache, once or twice
# tunix allocates every layer's KV cache at the full `CACHE_SIZE` slots (Gemma 3's sliding
# window is only a mask): `2 · L · K · H · 2` bytes per token in bf16, 26 KiB for gemma3-1b,
# 33 MiB per row at 1312 slots. The weights (bf16, replicated over "fsdp" as tunix samples,
# split over "tp") come once. tunix 0.1.5 and 0.1.6 do not donate the Sampler's state, so
# decode holds the cache it reads and the one it writes: two copies; 0.1.7 donates it and
# updates it in place: one copy.
# Weights plus those copies is a lower bound on a batch's bytes, so the batch it allows is an
# upper bound on the compiler's answer: at the field's setting the weights (1.86 GiB) and the
# copies alone would allow 426 rows with 0.1.7 and 213 with 0.1.6. Local mode re-derives those
# two bounds from the committed setting and checks them against the committed file.

# %%
closed_max = {s: rollout_sweep.closed_form_max_batch(dims, usable, setting.cache, fsdp, tp,
                                                     semantics=s) for s in rollout.SEMANTICS}
report.show([{"tunix": s, "weights_bytes": 2 * sizing.param_counts(dims)["total"],
              "kv_cache_bytes_per_row": sizing.kv_cache_bytes(dims, 1, setting.cache),
              "kv_copies": rollout_sweep.KV_COPIES[s], "usable_hbm_bytes": usable,
              "closed_form_max_batch": closed_max[s]} for s in rollout.SEMANTICS],
            out, "closed_form")
if MODE == "local":
    findings.check_closed_form(quoted)

# %% [markdown]
# ## 2 · Measured: rollout time against batch (local and device mode)
# The Sampler's own jitted prefill and decode, timed apart after a first (compile) call, never
# stopping at EOS (random weights would stop rows at random steps), tokens counted from the
# token buffer. Points run in increasing batch order in one process, so the process-wide peak
# after a point is that point's; out of memory is a data point and larger batches are skipped.
# Whether 64 and 128 beat 68 and 132 per token is a property of the chip's tiles: only device
# mode answers it, and no TPU has run it yet, so the field's claim is neither confirmed nor
# refuted; a device run writes its points to the ledger. One H200 ran gemma3-1b (random weights,
# 256 steps after 256-token prompts, batches 1, 64 and 128): 45.5k tokens/s at 128
# (`rollout_h200.json`); run again with XLA's autotuning scratch kept out of the process
# (`rollout_h200_autotune_off.json`) its peak was 21.00 GB where the plan compiled for that GPU
# said 21.03 (`plan_rollout_h200.json`).

# %%
measured = MODE != "plan"
if measured:
    devices = jax.devices() if MODE == "device" or MESH else jax.devices()[:1]
    mesh = make_mesh(MESH, devices)
    unit = mesh.shape["fsdp"]  # every batch splits over the data-parallel axis
    dropped = [b for b in setting.batch_sizes if b % unit]
    if dropped:
        print(f"left out batches {dropped}: not multiples of the {unit} data-parallel devices")
    model, tok = models.load(setting.model, setting.weights, mesh=mesh, seed=SEED,
                             is_sampling=True)
    sampler = rollout.make_sampler(model, tok, setting.cache, stop_at_eos=False)
    where = f"{len(devices)}x {devices[0].device_kind}"
    V = models.dims(setting.model, model.config).V
    rows = rollout_sweep.sweep(lambda b, s: rollout_sweep.measure_point(
        sampler, mesh, V, batch=b, steps=s, prompt_len=setting.prompt_len,
        trials=setting.trials, seed=SEED), setting.points(unit))
    batch_rows = [r for r in rows if r["steps"] == setting.steps_max]
    ok = [r for r in batch_rows if r["status"] == "ok"]
    report.show(rows, out, "rollouts", [
        "batch", "steps", "status", "ttft_ms", "decode_ms_per_token", "tokens", "tokens_per_s",
        "compile_s", "peak_bytes_per_device", "kv_cache_bytes_per_device", "error"])
    print(rollout_sweep.recommendation(rollout_sweep.summarize(batch_rows), batch_rows,
                                       f"{where}, {setting.model}, {setting.steps_max} steps"))
    if MODE == "local":
        print(f"No TPU or GPU ran here: these are {setting.model} on {where}; the aligned-batch "
              "question (64, 128 vs 68, 132) stays open until device mode runs on a chip.")
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    plot_measured(axes, batch_rows)
    fig.suptitle(f"Measured rollouts: {setting.model} ({setting.weights} weights) on {where}, "
                 f"prompt {setting.prompt_len}, {setting.steps_max} steps, cache {setting.cache}")
    fig.tight_layout()
    report.save_figure(fig, out, "measured", key="01_measured_rollouts" if KEY_FIGURES else None)
    plt.show()

# %% [markdown]
# In device mode each measured batch gets the plan's prediction for the slice it ran on, with
# the semantics of the tunix installed here, and a ledger row: predicted beside measured bytes,
# kept for every later run to compare with.

# %%
if MODE == "device":
    predicted = {r["batch"]: plan.plan_point(dataclasses.replace(request, batch=r["batch"]))
                 for r in batch_rows if r["status"] != "skipped"}
    shape = (f"prompt {setting.prompt_len}, steps {setting.steps_max}, cache {setting.cache}, "
             f"tunix {installed}")
    ledger.append([ledger.row(
        "01_rollout_sizing", workload="rollout", model=setting.model, batch=r["batch"],
        status=r["status"], shape=shape, peak_bytes=r.get("peak_bytes_per_device"),
        prediction=predicted.get(r["batch"]),
        seconds=r["prefill_s"] + r["decode_s"] if r["status"] == "ok" else None)
        for r in batch_rows])
    fig, ax = plt.subplots(figsize=(5, 4))
    if ledger.plot(ax, ledger.read()):
        report.save_figure(fig, out, "ledger")
        plt.show()

# %% [markdown]
# ## 3 · Predicted: the largest batch under each tunix (plan mode; else the committed one)
# `shared.plan.max_batch` compiles the rollout for `TARGET` and reads `memory_analysis()`:
# resident weights plus the worst executable's arguments, outputs and temporaries, against the
# HBM libtpu lets a program use (15.75 of a v5e's 16 GiB). Fast compiles at 1 and 8 units
# locate the line, exact compiles confirm the boundary, so the answer is always an exact
# compile's verdict. `tunix="0.1.6"` compiles the same Sampler functions without donation,
# with 0.1.6's single zeros layer as every layer's initial cache. A gemma3-1b search takes a
# few minutes on 2 cores (verdicts are cached in `.cache/plan/`). To check the field's two
# points directly: `-p TUNIX '["0.1.6"]' -p PLAN_BATCHES "[200, 256]"`.
#
# At the field's setting donation is worth 1.86x as many rollouts per chip (395 against 212;
# 396 and 213 are refused).
# The field ran the tunix of December 2025 and saw batch 200 run and 256 run out of HBM: 212
# lies between them. This project pins 0.1.7. Stuck on 0.1.6? Stay at or below 212 rows, or
# shrink the cache to prompt plus steps. Local and device mode compile nothing here: they draw
# the committed searches.

# %%
searches = {}  # this run's answers by tunix semantics: plan mode only
for s in setting.tunix if MODE == "plan" else []:
    asked = dataclasses.replace(request, tunix=s)
    if PLAN_BATCHES is None:  # search: fast compiles locate the line, exact ones confirm it
        searches[s] = plan.max_batch(asked)
        print(f"tunix {s}: {plan.describe(searches[s])}; "
              + findings.search_evidence(searches[s], closed_max[s]))
    else:  # only the batches asked for, each an exact compile
        searches[s] = findings.exact_points(
            [plan.plan_point(dataclasses.replace(asked, batch=b)) for b in PLAN_BATCHES], s)
findings.check_searches(searches, quoted, request, PLAN_BATCHES)
drawn, shown = findings.searches_to_draw(searches, quoted, setting.tunix, request)
if drawn:
    report.show(findings.probe_rows(drawn), out, "probes")
    shown_target = hardware.parse_target(shown["target"])
    f, t = mesh_shape(MESH, shown_target.chips)
    fig, ax = plt.subplots(figsize=(9, 4.8))
    plot_searches(ax, drawn, shown, fsdp=f, tp=t, field=findings.field_points(quoted, shown),
                  usable_bytes=shown_target.chip.compiler_hbm_bytes or shown_target.chip.hbm_bytes)
    report.save_figure(fig, out, "predicted_bytes", key="01_tunix_bytes" if KEY_FIGURES else None)
    plt.show()

# %% [markdown]
# Every other model on this slice, answered at once from the committed atlas (`docs/atlas.md`,
# compiled the same way at 256-token prompts, 1,024 steps and a 1,312-slot cache): on a v5e-1,
# gemma3-1b fits 374 rows there, gemma2-2b 41 and gemma3-4b 27; the 8B models fit one row, and
# gemma4-e4b and every model from 12B up none.

# %%
column = lookup.slice_column("rollout", TARGET)
if column:
    report.show(column, out, "atlas_rollout")

# %% [markdown]
# ## 4 · What the compiler adds to the closed form
# At the largest batch that fits: the compiler's bytes minus weights and KV copies, and which
# executable sets the limit. With donation (0.1.7) it is prefill: the cache plus the prompt's
# activations and temporaries, so longer prompts fit fewer rows. Without donation (0.1.6) it is
# decode holding two caches, and little else. One decode step's `[B, V]` logits in f32 are
# shown for scale (V = 262144 for Gemma 3). Near the HBM line trust the compiler, not a line
# through small batches: XLA schedules for the memory it has.
#
# At the field's setting, batch 395 under 0.1.7 needs 1.02 GiB more than the closed form, and
# 256-token prompts fit 374 rows (`plan_cpu.json`, from `benchmarks/bench_plan.py`); batch 212
# under 0.1.6 adds only 53 MiB to weights plus two caches. The closed form is an upper bound;
# the compiler's is the answer. Plan mode shows the table for the searches it ran.

# %%
at_max = findings.at_largest(searches)
if searches:
    report.show(findings.compiler_vs_closed_form(at_max, dims, setting.cache, fsdp, tp), out,
                "compiler_vs_closed_form")

# %% [markdown]
# ## 5 · Hours and dollars for `ROLLOUTS` rollouts
# From the plan verdict at the largest batch (this run's in plan mode, else the committed one):
# the roofline is a lower bound, the estimate divides it by a named efficiency assumption, and
# dollars come from `shared.hardware.prices` with the date they were read. A measured run (local,
# device) gives its own time at the largest batch that ran, with dollars where the device has
# a price. Kaggle's v5e-8 costs no dollars: there the hours count against its 9-hour sessions
# and 20 hours a week.
#
# At the field's setting, 100,000 rollouts at batch 395 are 254 batches: at least 1.91 h, about
# 4.77 h at an assumed 40% of the roofline (no public measurement of the Sampler's efficiency
# yet), $5.72 on demand at $1.20/h or $1.17 spot. With 0.1.6 (batch 212, 472 batches): at least
# 4.81 h, about 12 h, $14.43. Donation lets more rows share each step's weight reads, and decode
# stops copying the cache.

# %%
for s, point in findings.points_to_price(searches, quoted).items():
    if point:
        runs = math.ceil(setting.rollouts / point["batch"])
        print(f"tunix {s}, batch {point['batch']} ({runs:,} batches): "
              + budget.describe(budget.estimate(point, runs=runs, kind=PRICE_KIND)))
if measured and ok:
    best = max(ok, key=lambda r: r["batch"])  # the largest batch that ran
    print(f"measured on {where}: "
          + findings.measured_bill(best, setting.rollouts, TARGET, PRICE_KIND, MODE == "device"))

# %% [markdown]
# ## 6 · Mixtures of experts beside their dense twins
# `qwen3-moe-tiny` (tunix's Qwen 3 MoE layer) and `gemma4-moe-tiny` (Gemma 4's MoERagged beside
# a dense MLP) scale qwen3-30b-a3b and gemma4-26b-a4b down to 8 experts, 2 per token, rolled out
# as in section 2 (one small batch, the shortest `STEPS`) beside `qwen3-tiny` and `gemma4-tiny`.
# A mixture stores every expert but routes each token through two: more weight bytes than its
# twin, at a speed set by tunix's path there (a CPU: Qwen 3's dense fallback through all 8
# experts, Gemma 4's `ragged_dot`; a TPU: Qwen 3's megablox, which no GPU runs). Bytes are the
# compiler's for each model's larger executable here; a device's peak shows where it rose. Plan
# mode shows the atlas's cells on `TARGET`, or the command for one (30B compiles take long).

# %%
if measured:  # the tiny configs always: random weights, whatever MODEL and WEIGHTS say
    moe_rows = rollout_moe.rollouts(mesh, prompt_len=setting.prompt_len, steps=min(setting.steps),
                                    trials=setting.trials, seed=SEED)
    report.show(moe_rows, out, "moe_rollouts", rollout_moe.COLUMNS)
    report.save_figure(plot_moe(moe_rows, f"Tiny mixtures of experts (hatched) beside their "
                                          f"dense twins on {where}"), out, "moe_rollouts")
    plt.show()
else:  # plan mode: the committed atlas's cells for the real mixtures, or a command
    print("\n".join(lookup.cells_in_words("rollout", TARGET, rollout_moe.PRESETS)))

# %% [markdown]
# ## Evidence
# The largest batches, bytes and bills above come from `01_rollout_tunix_semantics.json`: the real
# TPU compiler, deviceless (jax 0.10.2, libtpu 0.0.42.1, tunix 0.1.7, 2026-11-22). Each search
# made 2-3 fast compiles to find the line, then exact compiles at the boundary: 7 compiles for
# 0.1.7, 6 for 0.1.6, 81 minutes in all on a heavily shared 2-core machine. Prices were read
# 2026-11-22. The 256-token answer (374) is `plan_cpu.json`'s. The only measured speed is the
# H200's (section 2, `rollout_h200.json`); no TPU has run this notebook. To reproduce:
# - both searches: `python benchmarks/bench_tunix_semantics.py --out
#   benchmarks/results/01_rollout_tunix_semantics.json`;
# - this notebook's own searches, checked against that file: `make execute NB=01 PARAMS='-p MODE
#   plan'`;
# - the 256-token prompts: `python benchmarks/bench_plan.py --targets v5e-1 --lora-batches ""
#   --out benchmarks/results/plan_cpu.json`;
# - speed per batch, measured beside the plan's prediction and written to the ledger:
#   `make tpu-execute TPU=... ZONE=... NB=01 PARAMS='-p MODE device'`.

# %%
report.evidence(findings.QUOTED, "plan_cpu")
