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
# # 01 · Rollout sizing: which batch fits and runs fastest for Gemma 3 with the tunix Sampler?
#
# ## What we found
# **Which tunix you need: 0.1.7 or later.** gemma3-1b rollouts with tunix's Sampler on one v5e
# chip (16 GiB, of which libtpu lets a program use 15.75) at the field's setting (prompts padded
# to 128 tokens, 1024 generation steps, a 1312-slot KV cache): the real TPU compiler, deviceless
# (jax 0.10.2, libtpu 0.0.42.1, tunix 0.1.7, 2026-11-22), puts the largest batch at **212 with
# tunix 0.1.6's Sampler** (213 is refused) and at **395 with 0.1.7's** (396 is refused): 1.86x
# as many rollouts per chip. The field ran the tunix of December 2025 and saw batch 200 run and
# 256 run out of HBM; 212 lies between them. The difference is donation: tunix 0.1.5 and 0.1.6
# do not donate the Sampler's state, so decode holds the KV cache twice (33.3 MiB per row per
# copy); 0.1.7 donates it and updates it in place. **Pin `google-tunix>=0.1.7`** (this project
# pins 0.1.7). Stuck on 0.1.6? Stay at or below 212 rows, or shrink the cache to prompt + steps.
#
# **What the compiler adds.** Weights (1.86 GiB in bf16) plus the KV copies alone would allow
# 426 rows with 0.1.7 and 213 with 0.1.6. At batch 395 the compiler needs 1.02 GiB more than
# that closed form: prefill sets the limit there (the cache plus the prompt's activations), so
# longer prompts fit fewer rows: 374 at 256-token prompts (`plan_cpu.json`, from
# `benchmarks/bench_plan.py`). At batch 212 under 0.1.6, decode sets it and adds only 53 MiB
# to weights plus two caches. The closed form is an upper bound; the compiler's is the answer.
#
# **Hours and dollars.** 100,000 rollouts at batch 395 (254 batches) on a v5e-1: at least
# 1.91 h (the roofline, a lower bound), about 4.77 h at an assumed 40% of it (no public
# measurement of the Sampler's efficiency yet), $5.72 on demand at $1.20/h ($1.17 spot; prices
# read 2026-11-22). With 0.1.6 (batch 212, 472 batches): 4.81 h at least, about 12 h, $14.43.
# Donation lets more rows share each step's weight reads, and decode stops copying the cache.
#
# **Which batch runs fastest: not measured yet.** No TPU or GPU ran in the session that wrote
# this, so the field's "64 and 128 beat 68 and 132 per token" is neither confirmed nor refuted
# here. Device mode measures those batches on the attached chip, beside the plan's prediction,
# and writes ledger rows: `make tpu-execute TPU=... ZONE=... NB=01 PARAMS='-p MODE device'`.
#
# **Evidence and how to reproduce.** Each search made 2-3 fast compiles to find the line, then
# exact compiles at the boundary (7 compiles for 0.1.7, 6 for 0.1.6; 81 minutes in all on a
# heavily shared 2-core machine): `python benchmarks/bench_tunix_semantics.py --out
# benchmarks/results/rollout_tunix_semantics.json`. This notebook re-runs both searches with
# `make execute NB=01 PARAMS='-p MODE plan'` and checks its answer against that file.
#
# ![gemma3-1b rollouts on one v5e chip: bytes per batch](../docs/figures/01_tunix_bytes.png)
#
# ## How this notebook answers it
# Three modes, one code path. `local` (the default) runs a tiny config of the real architecture
# with random weights on the CPU; any model tunix ships works by name (`-p MODEL qwen3-tiny`).
# `plan` compiles the Sampler's own prefill and decode for `TARGET` with the real TPU compiler,
# deviceless (gemma3-1b by default), and searches the largest batch under each tunix semantics.
# `device` measures on the attached TPU or GPU, puts the plan's prediction beside every point
# and appends both to the ledger (`results/ledger.csv`).

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
TARGET = "v5e-1"  # the slice to plan for (device mode plans for the slice it runs on)
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
from shared.errors import BadInput, choose
from shared.hardware import prices
from shared.hardware.sharding import make_mesh, mesh_shape
from shared.plan import budget
from shared.report import ledger
from shared.rollout import sampler as rollout
from shared.rollout import sweep as rollout_sweep
from shared.rollout.plots import plot_measured, plot_searches

MODEL = report.by_mode(MODE, MODEL, "gemma3-tiny", "gemma3-1b")
BATCH_SIZES = sorted(set(report.by_mode(MODE, BATCH_SIZES, [1, 4, 8, 12, 16], [
    1, 4, 16, 60, 64, 68, 124, 128, 132, 196, 200, 204, 252, 256, 260, 384])))
STEPS = sorted(set(report.by_mode(MODE, STEPS, [8, 16, 32], [128, 256, 512, 1024])))
PROMPT_LEN = report.by_mode(MODE, PROMPT_LEN, 16, 128)
choose("model", MODEL, models.MODEL_NAMES)
choose("weights", WEIGHTS, models.WEIGHTS)
[choose("tunix semantics", s, rollout.SEMANTICS) for s in TUNIX]
if not BATCH_SIZES or not STEPS or min(BATCH_SIZES + STEPS + [PROMPT_LEN, TRIALS, ROLLOUTS]) < 1:
    raise BadInput("BATCH_SIZES, STEPS, PROMPT_LEN, TRIALS and ROLLOUTS must be positive")
STEPS_MAX = max(STEPS)
CACHE = report.by_mode(MODE, CACHE_SIZE, None, 1312) or PROMPT_LEN + STEPS_MAX + 32
if PROMPT_LEN + STEPS_MAX > CACHE:
    raise BadInput(f"CACHE_SIZE {CACHE} < PROMPT_LEN + max(STEPS) = {PROMPT_LEN + STEPS_MAX}")
if MODE == "device":  # join a multi-host slice first; then plan for the slice attached
    hardware.initialize_distributed()
    TARGET = hardware.current_target_name() or TARGET
target = hardware.parse_target(TARGET)
fsdp, tp = mesh_shape(MESH, target.chips)
usable = target.chip.compiler_hbm_bytes or target.chip.hbm_bytes  # what a program may use
dims, out = models.model_dims(MODEL), report.results_dir(RESULTS_DIR)
quoted = report.committed("rollout_tunix_semantics")  # the numbers "What we found" quotes
same_setting = bool(quoted) and MESH is None and quoted["setting"] == {
    "model": MODEL, "target": TARGET, "prompt_len": PROMPT_LEN, "steps": STEPS_MAX,
    "cache_size": CACHE}

# %% [markdown]
# ## 1 · The closed form: weights plus KV cache, once or twice
# tunix allocates every layer's KV cache at the full `CACHE` slots (Gemma 3's sliding window
# is only a mask): `2 · L · K · H · 2` bytes per token in bf16, 26 KiB for gemma3-1b, 33 MiB
# per row at 1312 slots. The weights (bf16, replicated over "fsdp" as tunix samples, split over
# "tp") come once. tunix 0.1.5 and 0.1.6 do not donate the Sampler's state, so decode holds
# the cache it reads and the one it writes: two copies; 0.1.7 donates, one copy. Weights plus
# those copies is a lower bound on a batch's bytes, so the batch it allows is an upper bound
# on the compiler's answer. Local mode re-derives the committed setting's closed form.

# %%
closed_max = {s: rollout_sweep.closed_form_max_batch(dims, usable, CACHE, fsdp, tp, semantics=s)
              for s in rollout.SEMANTICS}
report.show([{"tunix": s, "weights_bytes": 2 * sizing.param_counts(dims)["total"],
              "kv_cache_bytes_per_row": sizing.kv_cache_bytes(dims, 1, CACHE),
              "kv_copies": rollout_sweep.KV_COPIES[s], "usable_hbm_bytes": usable,
              "closed_form_max_batch": closed_max[s]} for s in rollout.SEMANTICS],
            out, "closed_form")
if MODE == "local" and not quoted:
    print("no committed plan result here (benchmarks/results/): nothing to check against")
elif MODE == "local":
    q = quoted["setting"]
    for s, entry in quoted["semantics"].items():
        report.agree(f"closed-form largest batch, {q['model']} on {q['target']}, tunix {s}",
                     rollout_sweep.closed_form_max_batch(
                         models.model_dims(q["model"]), hardware.parse_target(
                             q["target"]).chip.compiler_hbm_bytes, q["cache_size"], semantics=s),
                     entry["closed_form_max_batch"])

# %% [markdown]
# ## 2 · Measured: rollout time against batch (local and device mode)
# The Sampler's own jitted prefill and decode, timed apart after a first (compile) call, never
# stopping at EOS (random weights would stop rows at random steps), tokens counted from the
# token buffer. Points run in increasing batch order in one process, so the process-wide peak
# after a point is that point's; out of memory is a data point and larger batches are skipped.
# Whether 64 and 128 beat 68 and 132 per token is a property of the chip's tiles: only device
# mode answers it.

# %%
measured = MODE != "plan"
if measured:
    devices = jax.devices() if MODE == "device" or MESH else jax.devices()[:1]
    mesh = make_mesh(MESH, devices)
    unit = mesh.shape["fsdp"]  # every batch splits over the data-parallel axis
    if dropped := [b for b in BATCH_SIZES if b % unit]:
        print(f"left out batches {dropped}: not multiples of the {unit} data-parallel devices")
    model, tok = models.load(MODEL, WEIGHTS, mesh=mesh, seed=SEED, is_sampling=True)
    sampler = rollout.make_sampler(model, tok, CACHE, stop_at_eos=False)
    where, V = f"{len(devices)}x {devices[0].device_kind}", models.dims(MODEL, model.config).V
    rows = rollout_sweep.sweep(lambda b, s: rollout_sweep.measure_point(
        sampler, mesh, V, batch=b, steps=s, prompt_len=PROMPT_LEN, trials=TRIALS, seed=SEED),
        list(dict.fromkeys([(unit, s) for s in STEPS]
                           + [(b, STEPS_MAX) for b in BATCH_SIZES if b % unit == 0])))
    batch_rows = [r for r in rows if r["steps"] == STEPS_MAX]
    ok = [r for r in batch_rows if r["status"] == "ok"]
    report.show(rows, out, "rollouts", [
        "batch", "steps", "status", "ttft_ms", "decode_ms_per_token", "tokens", "tokens_per_s",
        "compile_s", "peak_bytes_per_device", "kv_cache_bytes_per_device", "error"])
    print(rollout_sweep.recommendation(rollout_sweep.summarize(batch_rows), batch_rows,
                                       f"{where}, {MODEL}, {STEPS_MAX} steps"))
    if MODE == "local":
        print(f"No TPU or GPU ran here: these are {MODEL} on {where}; the aligned-batch question "
              "(64, 128 vs 68, 132) stays open until device mode runs on a chip.")
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    plot_measured(axes, batch_rows)
    fig.suptitle(f"Measured rollouts: {MODEL} ({WEIGHTS} weights) on {where}, prompt "
                 f"{PROMPT_LEN}, {STEPS_MAX} steps, cache {CACHE}")
    fig.tight_layout()
    report.save_figure(fig, out, "measured", key="01_measured_rollouts" if KEY_FIGURES else None)
    plt.show()

# %% [markdown]
# In device mode each measured batch gets the plan's prediction for the slice it ran on, with
# the semantics of the tunix installed here, and a ledger row: predicted beside measured bytes,
# kept for every later run to compare with.

# %%
installed = "0.1.7" if Version(plan.versions()["google-tunix"]) >= Version("0.1.7") else "0.1.6"
request = plan.Request("rollout", MODEL, TARGET, batch=fsdp, prompt_len=PROMPT_LEN,
                       steps=STEPS_MAX, cache_size=CACHE, mesh=MESH, tunix=installed)
if MODE == "device":
    predicted = {r["batch"]: plan.plan_point(dataclasses.replace(request, batch=r["batch"]))
                 for r in batch_rows if r["status"] != "skipped"}
    ledger.append([ledger.row(
        "01_rollout_sizing", workload="rollout", model=MODEL, batch=r["batch"], status=r["status"],
        shape=f"prompt {PROMPT_LEN}, steps {STEPS_MAX}, cache {CACHE}, tunix {installed}",
        peak_bytes=r.get("peak_bytes_per_device"), prediction=predicted.get(r["batch"]),
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
# HBM libtpu lets a program use (15.75 of a v5e's 16 GiB). Fast compiles at 8 and 64 units
# locate the line, exact compiles confirm the boundary, so the answer is always an exact
# compile's verdict. `tunix="0.1.6"` compiles the same Sampler functions without donation,
# with 0.1.6's single zeros layer as every layer's initial cache. A gemma3-1b search takes a
# few minutes on 2 cores (verdicts are cached in `.cache/plan/`). To check the field's two
# points directly: `-p TUNIX '["0.1.6"]' -p PLAN_BATCHES "[200, 256]"`.

# %%
searches = {}
for s in TUNIX if MODE == "plan" else []:
    found = dataclasses.replace(request, tunix=s)
    if PLAN_BATCHES is None:
        found = plan.max_batch(found)
        print(f"tunix {s}: {plan.describe(found)}; evidence: {len(found['probes'])} probes "
              f"({sum(not p['fast'] for p in found['probes'])} exact), {found['compiles']} "
              f"compiled now in {found['wall_s']:.0f} s; closed form: {closed_max[s]}")
    else:  # only the batches asked for, exact
        probes = [plan.plan_point(dataclasses.replace(found, batch=b)) for b in PLAN_BATCHES]
        found = {"probes": probes, "max_batch": max([0] + [p["batch"] for p in probes
                                                           if p["fits"]])}
        print(f"tunix {s}: fits at {[p['batch'] for p in probes if p['fits']]}, not at "
              f"{[p['batch'] for p in probes if not p['fits']]}")
    searches[s] = found
    report.agree(f"largest batch, tunix {s}", found["max_batch"],
                 quoted["semantics"][s]["max_batch"] if same_setting and PLAN_BATCHES is None
                 else None)
shown = {"model": MODEL, "target": TARGET, "prompt_len": PROMPT_LEN, "steps": STEPS_MAX,
         "cache_size": CACHE}
drawn = searches
if not searches and quoted:  # local and device mode draw the committed searches instead
    drawn = {s: quoted["semantics"][s] for s in TUNIX if s in quoted["semantics"]}
    shown = quoted["setting"]
    print(f"the committed searches ({quoted['command']}, {quoted['date']}):")
if drawn:
    report.show([{"tunix": s, **{k: p.get(k) for k in ("batch", "fast", "fits", "bytes_per_device",
                                                        "worst", "compile_s", "cached")}}
                 for s, found in drawn.items() for p in found["probes"]], out, "probes")
    bench = (report.committed("plan_cpu") or {}).get("rollout", {})  # bench_plan.py: tunix 0.1.7
    if "0.1.7" in searches and PLAN_BATCHES is None and MESH is None and (
            MODEL, PROMPT_LEN, STEPS_MAX, CACHE) == ("gemma3-1b", 256, 1024, 1312):
        report.agree(f"largest batch, 256-token prompts on {TARGET} (plan_cpu.json)",
                     searches["0.1.7"]["max_batch"], bench.get(TARGET, {}).get("max_batch"))
    shown_chip = hardware.parse_target(shown["target"])
    f, t = mesh_shape(MESH, shown_chip.chips)
    fig, ax = plt.subplots(figsize=(9, 4.8))
    plot_searches(
        ax, drawn, shown, fsdp=f, tp=t,
        usable_bytes=shown_chip.chip.compiler_hbm_bytes or shown_chip.chip.hbm_bytes,
        field=quoted["field"] if quoted and shown == quoted["setting"] else None)
    report.save_figure(fig, out, "predicted_bytes", key="01_tunix_bytes" if KEY_FIGURES else None)
    plt.show()

# %% [markdown]
# ## 4 · What the compiler adds to the closed form
# At the largest batch that fits: the compiler's bytes minus weights and KV copies, and which
# executable sets the limit. With donation (0.1.7) it is prefill: the cache plus the prompt's
# activations and temporaries, so longer prompts fit fewer rows. Without donation (0.1.6) it is
# decode holding two caches, and little else. One decode step's `[B, V]` logits in f32 are
# shown for scale (V = 262144 for Gemma 3). Near the HBM line trust the compiler, not a line
# through small batches: XLA schedules for the memory it has.

# %%
at_max = {s: next((p for p in found["probes"] if not p["fast"] and p["batch"]
                   == found["max_batch"]), None) for s, found in searches.items()}
if searches:
    report.show([{"tunix": s, "batch": p["batch"], "compiler_bytes": p["bytes_per_device"],
                  "closed_form_bytes": (closed := rollout_sweep.closed_form_bytes_per_device(
                      dims, p["batch"], CACHE, fsdp, tp, s)),
                  "compiler_adds_bytes": p["bytes_per_device"] - closed, "worst": p["worst"],
                  "worst_temp_bytes": p["executables"][p["worst"]]["temp_bytes"],
                  "logits_f32_bytes": p["batch"] // fsdp * dims.V * 4}
                 for s, p in at_max.items() if p], out, "compiler_vs_closed_form")

# %% [markdown]
# ## 5 · Hours and dollars for `ROLLOUTS` rollouts
# From the plan verdict at the largest batch (this run's in plan mode, else the committed one):
# the roofline is a lower bound, the estimate divides it by a named efficiency assumption, and
# dollars come from `shared.hardware.prices` with the date they were read. A measured run (local,
# device) gives its own time at the largest batch that ran, with dollars where the device has
# a price. Kaggle's v5e-8 costs no dollars: there the hours count against its 9-hour sessions
# and 20 hours a week.

# %%
if not searches and quoted:
    at_max = {s: {**e["at_max"], "workload": "rollout", "target": quoted["setting"]["target"]}
              for s, e in quoted["semantics"].items()}
    print(f"from the committed plan verdicts for {quoted['setting']}:")
for s, point in at_max.items():
    if point:
        runs = math.ceil(ROLLOUTS / point["batch"])
        print(f"tunix {s}, batch {point['batch']} ({runs:,} batches): "
              + budget.describe(budget.estimate(point, runs=runs, kind=PRICE_KIND)))
if measured and ok:
    best = max(ok, key=lambda r: r["batch"])
    runs, seconds = math.ceil(ROLLOUTS / best["batch"]), best["prefill_s"] + best["decode_s"]
    try:
        dollars = (f"${prices.price_per_hour(TARGET, PRICE_KIND) * runs * seconds / 3600:,.2f} "
                   f"{PRICE_KIND} on {TARGET}" if MODE == "device" else "no dollars for a CPU")
    except BadInput as err:
        dollars = str(err)
    print(f"measured on {where}: {ROLLOUTS:,} rollouts of {STEPS_MAX} steps at batch "
          f"{best['batch']} take {runs * seconds / 3600:.3g} h; {dollars}")
