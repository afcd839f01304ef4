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
# # 03 · Sparse logits, fit: top-k logits and the loss without a [B, T, 262144] tensor
#
# ## What we found
#
# **The question.** Gemma 3's vocabulary has V = 262,144 rows, so the logits of a teacher-forced
# pass, `hidden [B, T, D] @ table.T`, are its largest tensor: 4 GiB in bf16 at B = 8 and
# T = 1024, twice the whole of gemma3-1b. Distillation, GRPO's log-probabilities and evaluation
# need only the top-k logits or the loss. What does materialising all of them cost, and how much
# larger a batch fits when `shared.logits` computes them in blocks instead?
#
# **The answer** (the real TPU compiler's view of one 16 GiB v5e chip, of which libtpu lets a
# program use 15.75 GiB; compiled deviceless, no TPU needed; jax 0.10.2, libtpu 0.0.42.1,
# tunix 0.1.7; B = 8, T = 1024, D = 1152 in bf16, from `benchmarks/results/logits_cpu.json`):
#
# - Top-128 logits: full materialisation + `lax.top_k` needs **16.6 GiB** of temporaries, so
#   it cannot run at B = 8 at all; `top_k_logits` needs **58 MiB**, 291x less.
# - The loss forward + backward: the naive loss needs **12.0 GiB** of temporaries,
#   `cross_entropy` none at all in HBM (its blocks stay in on-chip memory).
# - The whole gemma3-1b teacher-forced pass at T = 1024, as a batch: not recorded yet. Its
#   search (`bench_logits.py --fit`, about 15 compiles of the whole model) did not run in the
#   session that wrote this; plan mode (`MAX_BATCH = True`) searches it live, and the
#   committed `logits_fit.json` it writes becomes what this paragraph quotes. Expect the
#   chunked mode's batch to be bounded by the model's own activations, like a rollout's
#   (notebook 01 fits 374 gemma3-1b rollouts on the same chip), and the full mode's by the
#   0.5 GiB of bf16 logits (1 GiB in fp32) each sequence adds at V = 262,144.
#
# **What to do.** Never build `[B, T, V]` to take a top-k or a loss: call
# `models.teacher_forced_top_k(graph, state, tokens, mode="topk", k=K)` for a whole model, or
# `logits.top_k_logits(hidden, table, k)` and `logits.cross_entropy(hidden, table, targets)` on
# the final hidden states (`models.hidden_states`, `models.head_table`), then size the batch by
# HBM for the rest of your step. Exactness and speed: notebook 03_sparse_logits_exactness.
#
# Reproduce the numbers: `JAX_PLATFORMS=cpu python benchmarks/bench_logits.py --time-T 128
# --time-V 65536 --out benchmarks/results/logits_cpu.json`, and the whole-model search with
# `JAX_PLATFORMS=cpu python benchmarks/bench_logits.py --fit --model gemma3-1b --target v5e-1
# --out benchmarks/results/logits_fit.json` (tens of minutes on 2 cores); the figure:
# `make execute NB=03_sparse_logits_fit PARAMS='-p KEY_FIGURES True'`.
#
# ![Bytes per device of each approach against the batch](../docs/figures/03_fit_memory.png)
#
# Modes: `local` compiles section 1 for one chip of `TARGET` (compile only, so the real sizes
# work on a laptop) and draws section 2 from the committed search; `plan` also searches the
# largest batch with the real TPU compiler; `device` measures peak HBM and time on the attached
# TPU/GPU and writes them to the ledger beside the plan's prediction.

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
TARGET = "v5e-1"  # one v5e chip: per-chip HBM decides (a v5e-8 runs 8 of these batches at once)
MODEL = "gemma3-1b"  # any tunix model by name (models.MODEL_NAMES); <family>-tiny for tests
RESULTS_DIR = "results/03_sparse_logits_fit"
SEED = 0
KEY_FIGURES = False  # also write the figures "What we found" shows to docs/figures/
K = 128  # top-k
SEQ = 1024  # T, tokens per sequence
MEM_BATCHES = [1, 4, 8, 32]  # section 1, compile only (8: the benchmark's batch)
MAX_BATCH = None  # section 2: search the largest batch per mode; None: in plan mode only
PLAN_BATCHES = []  # section 2: also one verdict per mode at each of these batches
SCORE_SEQUENCES = 100_000  # the run priced at each mode's largest batch
PRICE_KIND = "on-demand"  # on-demand | spot | 1y | 3y
DEVICE_BATCHES = [1, 4, 16, 64, 256]  # section 3 (device mode), measured in this order
TRIALS = 3  # timed calls after the first (compile + run) one
PREDICT = True  # section 3: compile the plan's verdict for the attached slice beside each point

# %%
from shared import report

MODE = report.use_mode(MODE)  # before jax: plan mode compiles for TARGET on the CPU

import math

import jax
import matplotlib.pyplot as plt
from flax import nnx

from shared import hardware, models, plan
from shared.errors import BadInput, choose
from shared.hardware import measure, prices
from shared.hardware.sharding import batch_sharding, make_mesh
from shared.logits import compare
from shared.plan import budget
from shared.report import ledger
from shared.rollout import sampler as rollout

choose("model", MODEL, models.MODEL_NAMES)
choose("price kind", PRICE_KIND, prices.HOURLY_KINDS)
if not all(isinstance(n, int) and n >= 1 for n in [K, SEQ, SCORE_SEQUENCES, TRIALS, *MEM_BATCHES,
                                                   *PLAN_BATCHES, *DEVICE_BATCHES]):
    raise BadInput("K, SEQ, SCORE_SEQUENCES, TRIALS and the batches must be positive integers")
MAX_BATCH = MODE == "plan" if MAX_BATCH is None else MAX_BATCH
target, dims = hardware.parse_target(TARGET), models.model_dims(MODEL)
out = report.results_dir(RESULTS_DIR)
if MODE == "device":
    hardware.initialize_distributed()
GiB = 2**30
print(f"{MODE} mode: {MODEL} (D={dims.D}, V={dims.V}) on {TARGET}, T={SEQ}, top-{K}")

# %% [markdown]
# ## 1 · What each approach asks of one chip
# Hidden states `[B, T, D]` and the `[V, D]` table in bf16 go into four jitted programs: full
# materialisation + `lax.top_k`, chunked `top_k_logits`, the naive loss forward + backward and
# the chunked `cross_entropy`. Each is compiled for one chip of `TARGET` by the TPU compiler
# (compile only: nothing is allocated, so the real `[V, D]` works on a CPU). Bytes per device are
# arguments + outputs + temporaries; a program the compiler refuses for lack of HBM is kept with
# what it asked for (a lower bound). The per-step scan, the field's workaround, needs even less
# HBM but pays in time: notebook 03_sparse_logits_exactness.

# %%
try:
    device = plan.topology_devices(target)[0]
    where = f"{TARGET} ({device.device_kind}, one chip)"
except BadInput as err:  # no libtpu (a CUDA-only install) or a GPU target: the backend here
    device, where = None, jax.default_backend()
    print(f"not compiling for {TARGET} ({err}): compiling for {where} instead")
mem_rows = compare.memory_rows(MEM_BATCHES, SEQ, dims.D, dims.V, K, device=device, where=where,
                               methods=("full logits", "chunked", "naive loss", "chunked loss"))
report.show(mem_rows, out, "memory_vs_batch", ["what", "method", "B", "temp_bytes",
                                               "total_bytes", "logits_bytes", "refused"])

# %% [markdown]
# The committed benchmark compiled the same programs at B = 8: where this run has that point
# (same model size, `SEQ`, `K` and target), its bytes must agree, else the compiler changed.

# %%
quoted = report.committed("logits_cpu") or {}
tpu = quoted.get("memory_tpu", {})
shape = {"B": 8, "T": SEQ, "D": dims.D, "V": dims.V, "k": K, "dtype": "bfloat16"}
live = {(r["what"], r["method"]): r["temp_bytes"] for r in mem_rows if r["B"] == 8}
if live and tpu.get("target") == TARGET and quoted["memory_shape"] == shape and device:
    for r in tpu["rows"]:
        if (r["what"], r["method"]) in live:
            report.agree(f"{r['method']}, temporaries at B=8 (bytes)",
                         live[r["what"], r["method"]], r["temp_bytes"], rel=0.001)
else:
    print(f"no committed numbers for B=8 at this size on {where}: nothing to compare with")

# %% [markdown]
# In the figure, full materialisation follows the dotted `[B, T, V]` line up and crosses the
# chip's usable HBM within a few sequences; the chunked programs stay near the table's and the
# hidden states' own bytes, which is all they hold beyond a few blocks.


# %%
def plot_memory(ax, rows):
    """Bytes per device against the batch, one line per approach; refusals hollow."""
    for (what, method), style in zip(dict.fromkeys((r["what"], r["method"]) for r in rows),
                                     ("o-", "s-", "o--", "s--"), strict=False):
        pts = [r for r in rows if (r["what"], r["method"]) == (what, method)]
        line, = ax.plot([r["B"] for r in pts], [r["total_bytes"] / GiB for r in pts], style,
                        label=f"{what}: {method}")
        ax.plot([r["B"] for r in pts if r["refused"]],
                [r["total_bytes"] / GiB for r in pts if r["refused"]], "o", ms=11,
                fillstyle="none", color=line.get_color())
    ax.plot(MEM_BATCHES, [b * SEQ * dims.V * 2 / GiB for b in MEM_BATCHES], "k:",
            label="the [B, T, V] bf16 logits alone")
    if device is not None:
        ax.axhline(target.chip.compiler_hbm_bytes / GiB, color="red", ls="--",
                   label="usable HBM per chip (compiler)")
    ax.set(xscale="log", yscale="log", xlabel="batch B (sequences)",
           ylabel="bytes per device (GiB, log)",
           title=f"Top-{K} and loss, T={SEQ}, D={dims.D}, V={dims.V}: {where}\n"
                 "(hollow: refused by the compiler, bytes it asked for)")
    ax.legend(fontsize=8)


fig, ax = plt.subplots(figsize=(8, 5))
plot_memory(ax, mem_rows)
report.save_figure(fig, out, "memory_vs_batch", key="03_fit_memory" if KEY_FIGURES else None)
plt.show()

# %% [markdown]
# ## 2 · The largest batch of a whole forward pass
# A real teacher-forced pass holds the weights and the activations too. `shared.plan`'s
# `forward` workload compiles `models.teacher_forced_top_k`, the jitted function device mode
# runs, for `TARGET` with the model's abstract weights and tokens `[B, SEQ]`: `full`
# materialises the logits and takes `lax.top_k` as tunix's forward does, `topk` stops at the
# final hidden states and calls `top_k_logits`. The search compiles its way to the boundary
# (fast compiles locate it, exact ones decide it), so the answer is the compiler's verdict,
# never an extrapolation. Results are cached in `.cache/plan`; a gemma3-1b search takes tens of
# minutes on 2 cores, a rerun is instant. Time and dollars: the roofline of one pass at the
# largest batch (a lower bound) and an estimate at a stated efficiency, for `SCORE_SEQUENCES`.


# %%
def request(mode, batch=1, where=TARGET):
    return plan.Request("forward", MODEL, where, batch=batch, seq=SEQ, logits=mode, k=K)


fitted = report.committed("logits_fit")
if fitted and (fitted["model"], fitted["target"], fitted["seq"], fitted["k"]) != (
        MODEL, TARGET, SEQ, K):
    fitted = None  # the committed search answered another question
searches = {m: plan.max_batch(request(m)) for m in models.LOGITS_MODES} if MAX_BATCH else {}
points = [plan.plan_point(request(m, b)) for m in models.LOGITS_MODES for b in PLAN_BATCHES]
largest = [next(p for p in s["probes"] if p["batch"] == s["max_batch"] and not p["fast"])
           for s in searches.values() if s["max_batch"]]  # the exact verdict at the answer
for mode, s in searches.items():
    print(f"{mode}: {plan.describe(s)}")
    report.agree(f"largest {mode} batch", s["max_batch"],
                 fitted and fitted["modes"][mode]["max_batch"])
for p in [p for p in points + largest if p["fits"]]:  # time and dollars of the scoring run
    est = budget.estimate(p, runs=math.ceil(SCORE_SEQUENCES / p["batch"]), kind=PRICE_KIND)
    print(f"{p['logits']} at batch {p['batch']}, {SCORE_SEQUENCES:,} sequences: "
          f"{budget.describe(est)}")
keys = ("logits", "batch", "fast", "fits", "bytes_per_device")
probes = [{k: p[k] for k in keys} for p in points + [p for s in searches.values()
                                                      for p in s["probes"]]]
if not searches:  # outside plan mode: draw the committed search, the one "What we found" quotes
    print("no search in this run (MAX_BATCH is off; None turns it on in plan mode): "
          + ("the committed probes are drawn below" if fitted else "nothing committed to draw"))
    probes += [{"logits": m, **p} for m, v in (fitted or {"modes": {}})["modes"].items()
               for p in v["probes"]]
if probes:
    report.show(probes, out, "forward_probes")

# %% [markdown]
# The figure joins the exact verdicts of each mode; crosses are the fast compiles that located
# the boundary (their bytes run high or low); dotted verticals are the answers.


# %%
def plot_forward(ax, probes, largest):
    """Bytes per device of the forward pass against the batch: exact verdicts joined, fast ones
    as crosses, the largest batch that fits dotted."""
    for mode, style in zip(dict.fromkeys(p["logits"] for p in probes), ("o-", "s-"),
                           strict=False):
        pts = sorted((p["batch"], p["bytes_per_device"] / GiB, p["fast"]) for p in probes
                     if p["logits"] == mode)
        line, = ax.plot([b for b, _, f in pts if not f], [y for _, y, f in pts if not f], style,
                        label=f"logits={mode}")
        ax.plot([b for b, _, f in pts if f], [y for _, y, f in pts if f], "x", alpha=0.6,
                color=line.get_color(), label=f"logits={mode}, fast compiles (approximate)")
        if largest.get(mode):
            ax.axvline(largest[mode], color=line.get_color(), ls=":",
                       label=f"largest that fits ({mode}): {largest[mode]}")
    ax.axhline(target.chip.compiler_hbm_bytes / GiB, color="red", ls="--",
               label=f"usable HBM per chip of {TARGET}")
    ax.set(xscale="log", yscale="log", xlabel="batch B (sequences)",
           ylabel="bytes per device (GiB, log)",
           title=f"{MODEL} teacher-forced pass to top-{K} logits on {TARGET}, T={SEQ}")
    ax.legend(fontsize=8)


answers = {m: s["max_batch"] for m, s in searches.items()} or {
    m: v["max_batch"] for m, v in (fitted or {"modes": {}})["modes"].items()}
if probes and target.chip.compiler_hbm_bytes:
    fig, ax = plt.subplots(figsize=(8, 5))
    plot_forward(ax, probes, answers)
    report.save_figure(fig, out, "forward_bytes_vs_batch",  # live or committed: both compiled
                       key="03_fit_max_batch" if KEY_FIGURES else None)
    plt.show()

# %% [markdown]
# ## 3 · On the device: measured peak HBM and time, beside the plan
# Device mode runs the same `teacher_forced_top_k` with random weights (their values do not
# change the bytes) at `DEVICE_BATCHES`, chunked first, in increasing order: the peak is a
# process-wide high-water mark, so a point whose peak does not rise above the mark before it has
# no peak of its own (left empty). Out of memory is a data point and ends that mode's sweep.
# Each point goes to the ledger with the plan's verdict for the attached slice beside it.

# %%
if MODE == "device":
    mesh = make_mesh(None, jax.devices())
    model = models.dummy_model(MODEL, mesh=mesh, seed=SEED)
    graphdef, state = nnx.split(model)
    graph, here, rows, high = models.StaticGraph(graphdef), hardware.current_target_name(), [], 0
    for mode in ("topk", "full"):
        for B in [b for b in DEVICE_BATCHES if b % jax.device_count() == 0]:
            tokens = jax.device_put(rollout.random_prompts(B, SEQ, dims.V, seed=SEED),
                                    batch_sharding(mesh))
            with jax.set_mesh(mesh):  # as plan mode compiles it: tunix's activation shardings
                got, error = measure.run_or_oom(measure.time_fn, models.teacher_forced_top_k,
                                                graph, state, tokens, mode=mode, k=K, warmup=0,
                                                trials=TRIALS)
            peak = measure.peak_bytes_per_device()
            guess = plan.plan_point(request(mode, B, here)) if PREDICT and here else None
            rows.append(ledger.row(
                "03_sparse_logits_fit", workload="forward", model=MODEL, batch=B,
                shape=f"T={SEQ} logits={mode} k={K}", prediction=guess,
                status="ok" if error is None else "out of memory",
                peak_bytes=peak if peak and peak > high else None,
                seconds=got[1].median_s if got else None))
            high = max(high, peak or 0)
            if error:
                break
    ledger.append(rows)
    report.show(rows, out, "measured", ["shape", "batch", "measured_status", "measured_s",
                                        "measured_peak_bytes_per_device",
                                        "predicted_bytes_per_device", "predicted_fits"])
    del model, state
if ledger.comparable(ledger.read()):
    fig, ax = plt.subplots(figsize=(6, 5))
    ledger.plot(ax, ledger.read())
    report.save_figure(fig, out, "ledger")
    plt.show()
else:
    print("the ledger has no measured point beside a prediction yet (device mode writes them)")

# %% [markdown]
# ## 4 · What to change
# - **Top-k logits or the loss of a big-vocabulary model**: the chunked functions. The memory
#   they save is the `[B, T, V]` logits and their fp32 copies, which grow with the batch; what
#   is left grows with the hidden states only.
# - **Size the batch from section 2**, not from the logits alone: weights, activations and the
#   rest of your step (a GRPO learner also holds optimizer state and a reference model) share
#   the chip. Rerun section 2 in plan mode with your `MODEL`, `TARGET` and `SEQ`.
# - **The per-step scan** fits too, but reads the whole `[V, D]` table once per token: see
#   03_sparse_logits_exactness for its time.
