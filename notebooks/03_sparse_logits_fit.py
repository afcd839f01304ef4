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
# # 03 · Sparse logits, fit: what do top-k logits and the loss cost in HBM without [B, T, V]?
#
# ## Takeaway
#
# Almost nothing beyond their inputs. At B = 8, T = 1024 and D = 1152 in bf16, the TPU compiler
# gives full materialisation + `lax.top_k` of Gemma 3's V = 262,144 logits **16.6 GiB** of
# temporaries on one v5e chip, more than the 15.75 GiB a program may use there, so it cannot
# run at B = 8 at all; chunked `logits.top_k_logits` needs **58 MiB**, 291x less. The naive loss
# forward + backward needs **12.0 GiB**, `logits.cross_entropy` no HBM scratch at all (its
# blocks stay in on-chip memory). So never build `[B, T, V]` for a top-k or a loss. How large a
# batch a whole gemma3-1b pass then reaches is not recorded yet: section 2 searches it. On one
# H200 (`benchmarks/results/logits_h200.json`) the chunked top-k took 0.70 GB against 17.8 and
# 93 ms against 172 at B = 4; the chunked loss 1.35 GB against 18.4 but 32 ms against 15.
#
# ![Bytes per device of each approach against the batch](../docs/figures/03_fit_memory.png)

# %%
# On Colab or Kaggle: install this project (tools/colab_install.sh); in a clone, `make setup`.
import os
import sys

if "google.colab" in sys.modules or "KAGGLE_KERNEL_RUN_TYPE" in os.environ:
    script = "raw.githubusercontent.com/tpu-budget-lab/tpu-budget-lab/main/tools/colab_install.sh"
    if os.system(f"curl -sSL https://{script} | bash -s -- {sys.executable}"):
        raise RuntimeError("installing tpu-budget-lab failed: see the output above")

# %% [markdown]
# Gemma 3's vocabulary has V = 262,144 rows, so the logits of a teacher-forced pass,
# `hidden [B, T, D] @ table.T`, are its largest tensor: 4 GiB in bf16 at B = 8 and T = 1024,
# twice the whole of gemma3-1b. Distillation, GRPO's log-probabilities and evaluation need only
# the top-k logits or the loss. What does materialising all of them cost, and what is left when
# `shared.logits` computes them in blocks instead? Exactness and speed: 03_sparse_logits_exactness.
#
# **Modes**: `local` compiles section 1 for one chip of `TARGET` (compile only, so the real
# sizes work on a laptop) and draws section 2 from the committed search; `plan` also searches
# the largest batch with the real TPU compiler; `device` measures peak HBM and time on the
# attached TPU/GPU and writes them to the ledger beside the plan's prediction. Parameters left
# at None take the mode's preset (`shared.logits.settings.FitSearch`: `local()` or `field()`).

# %% tags=["parameters"]
MODE = "local"  # local | plan | device
TARGET = "v5e-1"  # one v5e chip: per-chip HBM decides (a v5e-8 runs 8 of these batches at once)
MODEL = "gemma3-1b"  # any tunix model by name (models.MODEL_NAMES); <family>-tiny for tests
RESULTS_DIR = "results/03_sparse_logits_fit"
SEED = 0
KEY_FIGURES = False  # also write the figures the Takeaway and section 2 show to docs/figures/
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

import jax
import matplotlib.pyplot as plt

from shared import hardware, models, plan
from shared.findings import logits as findings
from shared.hardware.sharding import make_mesh
from shared.logits import compare
from shared.logits.settings import FitSearch
from shared.report import ledger

setting = report.setting(
    MODE,
    FitSearch,
    MODEL=MODEL,
    K=K,
    SEQ=SEQ,
    MEM_BATCHES=MEM_BATCHES,
    MAX_BATCH=MAX_BATCH,
    PLAN_BATCHES=PLAN_BATCHES,
    SCORE_SEQUENCES=SCORE_SEQUENCES,
    PRICE_KIND=PRICE_KIND,
    DEVICE_BATCHES=DEVICE_BATCHES,
    TRIALS=TRIALS,
    PREDICT=PREDICT,
)
target, dims = hardware.parse_target(TARGET), models.model_dims(setting.model)
out = report.results_dir(RESULTS_DIR)
if MODE == "device":
    hardware.initialize_distributed()
GiB = 2**30
print(f"{MODE} mode: {setting.model} (D={dims.D}, V={dims.V}) on {TARGET}, T={setting.seq}, "
      f"top-{setting.k}")

# %% [markdown]
# ## 1 · What each approach asks of one chip
# Hidden states `[B, T, D]` and the `[V, D]` table in bf16 go into four jitted programs: full
# materialisation + `lax.top_k`, chunked `top_k_logits`, the naive loss forward + backward and
# the chunked `cross_entropy`. Each is compiled for one chip of `TARGET` by the TPU compiler
# (compile only: nothing is allocated, so the real `[V, D]` works on a CPU). Bytes per device are
# arguments + outputs + temporaries; a program the compiler refuses for lack of HBM is kept with
# what it asked for (a lower bound). Without libtpu (a CUDA-only install) the programs compile
# for the local backend instead, and the cell says so. The per-step scan, the field's
# workaround, needs even less HBM but pays in time: notebook 03_sparse_logits_exactness.

# %%
device, where = findings.compile_device(TARGET)
methods = ("full logits", "chunked", "naive loss", "chunked loss")
mem_rows = compare.memory_rows(setting.mem_batches, setting.seq, dims.D, dims.V, setting.k,
                               device=device, where=where, methods=methods)
report.show(mem_rows, out, "memory_vs_batch", ["what", "method", "B", "temp_bytes",
                                               "total_bytes", "logits_bytes", "refused"])

# %% [markdown]
# The committed benchmark compiled the same programs at B = 8 (the Takeaway's numbers): where
# this run has that point (same model size, `SEQ`, `K` and target), its bytes must agree to
# 0.1%, else the compiler changed and the Takeaway needs its command rerun.

# %%
quoted = report.committed("03_logits_cpu") or {}
shape = setting.memory_shape(dims.D, dims.V, batch=8)  # as the benchmark records it
on_target = device is not None  # compiled for TARGET, not for this machine
agrees = findings.agree_memory(mem_rows, quoted, target=TARGET, shape=shape, on_target=on_target)

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
    batches = setting.mem_batches
    ax.plot(batches, [b * setting.seq * dims.V * 2 / GiB for b in batches], "k:",
            label="the [B, T, V] bf16 logits alone")
    if device is not None:
        ax.axhline(target.chip.compiler_hbm_bytes / GiB, color="red", ls="--",
                   label="usable HBM per chip (compiler)")
    ax.set(xscale="log", yscale="log", xlabel="batch B (sequences)",
           ylabel="bytes per device (GiB, log)",
           title=f"Top-{setting.k} and loss, T={setting.seq}, D={dims.D}, V={dims.V}: {where}\n"
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
#
# Not recorded yet: the search (`bench_logits.py --fit`, about 15 compiles of the whole model)
# did not run in the session that wrote the Takeaway. Plan mode (`MAX_BATCH = True`, or None)
# searches it live, and the committed `logits_fit.json` it writes becomes what the Takeaway
# quotes; this run's search must then agree with it. Expect the chunked mode's batch to be
# bounded by the model's own activations, like a rollout's (notebook 01 fits 374 gemma3-1b
# rollouts on the same chip), and the full mode's by the 0.5 GiB of bf16 logits (1 GiB in fp32)
# each sequence adds at V = 262,144. Without a search in this run, the committed one is drawn.


# %%
def request(mode, batch=1, where=TARGET):
    """The plan of one teacher-forced pass over [batch, SEQ] tokens to the top-K logits."""
    return plan.Request("forward", setting.model, where, batch=batch, seq=setting.seq,
                        logits=mode, k=setting.k)


# the committed search, or None where it answered another question (model, target, SEQ, K)
fitted = findings.committed_search(setting.model, TARGET, setting.seq, setting.k)
searches = {}
if setting.searches(MODE):
    searches = {m: plan.max_batch(request(m)) for m in models.LOGITS_MODES}
points = [plan.plan_point(request(m, b)) for m in models.LOGITS_MODES for b in setting.plan_batches]
findings.agree_searches(searches, fitted)
priced = points + findings.exact_answers(searches)
for line in findings.scoring_costs(priced, setting.score_sequences, setting.price_kind):
    print(line)
probes, answers = findings.forward_probes(points, searches, fitted)
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
           title=f"{setting.model} teacher-forced pass to top-{setting.k} logits on {TARGET}, "
                 f"T={setting.seq}")
    ax.legend(fontsize=8)


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
# `findings.measure_forward` keeps that discipline; each point goes to the ledger with the
# plan's verdict for the attached slice beside it, and the ledger's figure puts every measured
# point against its prediction: on the diagonal, the plan was right.

# %%
if MODE == "device":
    here = hardware.current_target_name()

    def predict(mode, batch):
        """The plan's verdict for the attached slice at this point, or None."""
        return plan.plan_point(request(mode, batch, here)) if setting.predict and here else None

    rows = findings.measure_forward(setting, make_mesh(None, jax.devices()), predict, seed=SEED)
    ledger.append(rows)
    report.show(rows, out, "measured", ["shape", "batch", "measured_status", "measured_s",
                                        "measured_peak_bytes_per_device",
                                        "predicted_bytes_per_device", "predicted_fits"])
if ledger.comparable(ledger.read()):
    fig, ax = plt.subplots(figsize=(6, 5))
    ledger.plot(ax, ledger.read())
    report.save_figure(fig, out, "ledger")
    plt.show()
else:
    print("the ledger has no measured point beside a prediction yet (device mode writes them)")

# %% [markdown]
# ## 4 · What to change
# - **Top-k logits or the loss of a big-vocabulary model**: the chunked functions, never the
#   `[B, T, V]` logits. Call `models.teacher_forced_top_k(graph, state, tokens, mode="topk",
#   k=K)` for a whole model, or `logits.top_k_logits(hidden, table, k)` and
#   `logits.cross_entropy(hidden, table, targets)` on the final hidden states
#   (`models.hidden_states`, `models.head_table`). The memory they save is the `[B, T, V]`
#   logits and their fp32 copies, which grow with the batch; what is left grows with the
#   hidden states only.
# - **Size the batch from section 2**, not from the logits alone: weights, activations and the
#   rest of your step (a GRPO learner also holds optimizer state and a reference model) share
#   the chip. Rerun section 2 in plan mode with your `MODEL`, `TARGET` and `SEQ`.
# - **The per-step scan** fits too, but reads the whole `[V, D]` table once per token: see
#   03_sparse_logits_exactness for its time.

# %% [markdown]
# ## Evidence
# The Takeaway quotes `benchmarks/results/03_logits_cpu.json` (its `memory_tpu` table): the real
# TPU compiler's view of one 16 GiB v5e chip, of which libtpu lets a program use 15.75 GiB,
# compiled deviceless (no TPU needed) with jax 0.10.2, libtpu 0.0.42.1 and tunix 0.1.7, at
# B = 8, T = 1024, D = 1152 and V = 262,144 in bf16: the same `compare.memory_rows` section 1
# calls. The whole-model search has no committed file yet (section 2). The cell below prints
# how the committed file was made beside this run's versions.
#
# Reproduce the numbers: `JAX_PLATFORMS=cpu python benchmarks/bench_logits.py --time-T 128
# --time-V 65536 --out benchmarks/results/03_logits_cpu.json`, and the whole-model search with
# `JAX_PLATFORMS=cpu python benchmarks/bench_logits.py --fit --model gemma3-1b --target v5e-1
# --out benchmarks/results/logits_fit.json` (tens of minutes on 2 cores); the figure:
# `make execute NB=03_sparse_logits_fit PARAMS='-p KEY_FIGURES True'`.

# %%
report.evidence("03_logits_cpu")
