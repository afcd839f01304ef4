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
# # 03 · Sparse logits: top-k logits and the loss without a [B, T, 262144] tensor
#
# Gemma 3's vocabulary has V = 262,144 rows, so the logits of a teacher-forced pass,
# `hidden [B, T, D] @ embedding.T`, are by far its largest tensor: [8, 1024, 262144] in bf16 is
# 4 GiB, twice the whole of gemma3-1b. Distillation, RL and evaluation usually need only the
# top-k logits or the loss, yet the naive code materialises all of them and runs out of HBM at
# a small batch. The field's workaround scans one time step at a time: little memory, but it
# reads the whole [V, D] table once per token. `shared.logits` tiles the product into blocks
# of time steps × vocabulary rows instead: `top_k_logits` merges a running top-k,
# `cross_entropy` keeps a running log-sum-exp and has a custom backward that recomputes each
# block, so neither pass stores [B, T, V].
#
# 1. **Memory**: XLA's own accounting (`memory_analysis()`, compile only) at the real Gemma
#    size, on this machine's backend and for the TPU `TARGET`; measured peak HBM on a device.
# 2. **Exactness**: chunked vs full on random and on Gemma 3 hidden states, bf16 and fp32.
# 3. **Speed**: wall time after warm-up for the three approaches and against the chunk size.
# 4. **Plan**: the largest teacher-forced Gemma 3 batch that fits `TARGET` with each.
# 5. **What to use when**, from this run's numbers.
#
# Modes: `local` runs everything small enough for 2 CPU cores (section 1 compiles at the real
# size: compiling allocates nothing); `device` runs the real sizes on the attached
# TPU/GPU and measures peak HBM; `plan` only compiles, for `TARGET` with the real TPU compiler
# (libtpu, no TPU needed), including the Gemma 3 forward pass of section 4.

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
TARGET = "v5e-1"  # the TPU slice compiled for (sections 1 and 4)
MODEL = None  # None: gemma3-tiny locally, gemma3-1b in plan and device mode
WEIGHTS = "dummy"  # dummy: random weights | kaggle: real weights (credentials; device mode)
RESULTS_DIR = "results/03_sparse_logits"
SEED = 0
K = 128  # top-k
# 1 · memory (compile only: the real size works on a CPU)
MEM_V = 262144  # gemma3-1b's vocabulary ...
MEM_D = 1152  # ... and width
MEM_T = 1024
MEM_BATCHES = [1, 2, 4, 8]
CHUNK_SIZES = [8, 32, 128, 512]  # time steps per block, swept at the largest MEM_BATCHES
VOCAB_CHUNK_SIZES = [2048, 4096, 8192, 32768]  # vocabulary rows per block, swept likewise
TPU_COMPILE = True  # also compile the memory section for TARGET (libtpu; ~25 s per compile)
TPU_BATCHES = None  # None: MEM_BATCHES in plan mode, the largest of them otherwise
TPU_CHUNK_SWEEP = None  # None: in plan mode only
# 2 · exactness
EXACT_SHAPE = [2, 100, 64, 5000]  # B, T, D, V of the random hidden states
EXACT_CHUNKS = [24, 1000]  # chunk_size, vocab_chunk_size: on purpose they divide neither T nor V
SOFTCAP = 30.0  # the random case's loss is checked with and without a Gemma 2 style softcap
GEMMA_B = 2  # Gemma 3 hidden states of a teacher-forced pass over random tokens ...
GEMMA_T = None  # ... of this length; None: 64 locally, 512 on a device
# 3 · speed (wall time after warm-up)
TIME_B = None  # None: 4 locally, 8 on a device
TIME_T = None  # None: 64 locally, 1024 on a device
TIME_V = None  # None: 32768 locally, 262144 on a device (D is MEM_D)
TIME_CHUNK_SIZES = None  # None: [8, 16, 64] locally, [32, 128, 512] on a device
TIME_VOCAB_CHUNK_SIZES = [2048, 8192, 32768]
TRIALS = 3  # timed calls after the first (compile + run) call; the per-step scan gets one
# 4 · plan: the Gemma 3 teacher-forced forward pass, full logits vs chunked top-k
PLAN_SEQ = 1024
PLAN_BATCHES = [8, 32]  # one compile each per mode (minutes each for gemma3-1b on 2 cores)
PLAN_MAX_BATCH = True  # search the largest batch that fits, for each mode
PREDICT = False  # local/device: also compile section 4 (cached results are always shown)

# %%
from shared import report

MODE = report.use_mode(MODE)  # before jax: plan mode compiles for TARGET on the CPU

import functools
import time

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from flax import nnx
from IPython.display import display
from tqdm.auto import tqdm

from shared import hardware, measure, models, plan, rollout
from shared import logits as L
from shared.errors import BadInput, choose
from shared.sharding import make_mesh

MODEL = report.by_mode(MODE, MODEL, "gemma3-tiny", "gemma3-1b")
choose("model", MODEL, models.MODEL_NAMES)
choose("weights", WEIGHTS, models.WEIGHTS)
by_mode = functools.partial(report.by_mode, MODE)  # sizes left at None: local vs real
GEMMA_T = by_mode(GEMMA_T, 64, 512)
TIME_B, TIME_T, TIME_V = by_mode(TIME_B, 4, 8), by_mode(TIME_T, 64, 1024), by_mode(TIME_V, 32768,
                                                                                    262144)
TIME_CHUNK_SIZES = by_mode(TIME_CHUNK_SIZES, [8, 16, 64], [32, 128, 512])
MEM_BATCHES = sorted(set(MEM_BATCHES))
TPU_BATCHES = sorted(set(TPU_BATCHES or (MEM_BATCHES if MODE == "plan" else MEM_BATCHES[-1:])))
TPU_CHUNK_SWEEP = MODE == "plan" if TPU_CHUNK_SWEEP is None else TPU_CHUNK_SWEEP
sizes = [K, GEMMA_B, GEMMA_T, MEM_V, MEM_D, MEM_T, TIME_B, TIME_T, TIME_V, TRIALS, PLAN_SEQ,
         *EXACT_SHAPE, *EXACT_CHUNKS, *MEM_BATCHES, *CHUNK_SIZES, *VOCAB_CHUNK_SIZES,
         *TIME_CHUNK_SIZES, *TIME_VOCAB_CHUNK_SIZES, *PLAN_BATCHES]
if len(EXACT_SHAPE) != 4 or len(EXACT_CHUNKS) != 2 or not MEM_BATCHES or not all(
        isinstance(n, int) and n >= 1 for n in sizes):
    raise BadInput("sizes must be positive integers: EXACT_SHAPE = [B, T, D, V], EXACT_CHUNKS = "
                   "[chunk_size, vocab_chunk_size], non-empty lists of batches and chunk sizes")
if K > min(EXACT_SHAPE[3], EXACT_CHUNKS[1], MEM_V, TIME_V, *VOCAB_CHUNK_SIZES,
           *TIME_VOCAB_CHUNK_SIZES):
    raise BadInput(f"K={K} must not exceed any vocabulary or vocabulary chunk size "
                   "(EXACT_SHAPE[3], EXACT_CHUNKS[1], MEM_V, TIME_V, the VOCAB_CHUNK_SIZES)")
target = hardware.parse_target(TARGET)
out = report.results_dir(RESULTS_DIR)
measured = MODE != "plan"  # sections 2 and 3 run arrays; plan mode only compiles
if MODE == "device":
    hardware.initialize_distributed()
backend = jax.devices()[0]
GiB, MiB = 2**30, 2**20
pd.set_option("display.max_colwidth", None)  # the closing table's sentences in full


size = report.bytes_text


def show(rows, name, columns=None):
    """Save the raw rows (CSV/JSON under RESULTS_DIR); display them with readable units."""
    display(report.byte_table(rows, out, name, columns))


def ratio(a, b):
    return float("nan") if a is None or b is None or b == 0 else a / b


print(f"{MODE} mode on {backend.device_kind} ({jax.default_backend()}); model {MODEL}, "
      f"target {TARGET}, k = {K}")

# %% [markdown]
# ## 1 · Memory: what XLA says each approach needs, at the real Gemma size
# `memory_analysis()` of the compiled program, compile only (nothing is allocated, so the real
# [V, D] = [262144, 1152] table works on a laptop): **temporaries**, the scratch a program
# needs beyond its arguments and outputs. Three ways to get top-k logits — full
# materialisation, the per-time-step scan, ours — and the loss forward + backward, naive vs
# ours, in bf16 at T = `MEM_T`, across batch sizes. First on this machine's backend, then (when
# libtpu is installed) for one chip of `TARGET` with the real TPU compiler. A TPU compile that
# the compiler refuses for lack of HBM is kept as a point with the temporaries it asked for (a
# lower bound). XLA:TPU keeps small buffers in on-chip memory, which these HBM numbers do not
# count: a temp of 0 means no HBM scratch at all.

# %%
TOPK_FNS = {"full logits": lambda h, e: L.full_top_k_logits(h, e, K),
            "per-step scan": lambda h, e: L.per_step_top_k_logits(h, e, K),
            "ours (chunked)": lambda h, e: L.top_k_logits(h, e, K)}
LOSS_FNS = {"naive loss": jax.value_and_grad(L.full_cross_entropy, argnums=(0, 1)),
            "ours (chunked)": jax.value_and_grad(L.cross_entropy, argnums=(0, 1))}
logits_bytes = MEM_T * MEM_V * 2  # one sequence's bf16 logits
table_bytes = MEM_V * MEM_D * 2


def compile_memory(fn, *args):
    """Per-device bytes of fn(*args), compile only; a TPU refusal becomes a (lower-bound) row."""
    try:
        return {**measure.compiled_memory(jax.jit(fn).lower(*args).compile()), "refused": None}
    except Exception as err:  # libtpu refuses programs over HBM: keep what it asked for
        return measure.refusal(err)  # re-raises anything else; parses libtpu's two wordings


def memory_rows(where, sharding, batches, chunks=None):
    """Temp bytes of every approach at its defaults, or of ours per (chunk_size, vocab chunk)."""
    jobs = []
    for B in batches:
        for what, fns in (("top-k", TOPK_FNS), ("loss fwd+bwd", LOSS_FNS)):
            if chunks is None:
                jobs += [(B, what, method, fn, None, None) for method, fn in fns.items()]
            else:
                jobs += [(B, what, "ours (chunked)", chunked(what, C, Vc), C, Vc)
                         for C, Vc in chunks]
    rows = []
    for B, what, method, fn, C, Vc in tqdm(jobs, desc=f"compile on {where}", unit="compile"):
        h, e, t = L.example_specs(B, MEM_T, MEM_D, MEM_V, jnp.bfloat16, sharding)
        start = time.perf_counter()
        stats = compile_memory(fn, h, e) if what == "top-k" else compile_memory(fn, h, e, t)
        rows.append({"where": where, "what": what, "method": method, "B": B, "chunk_size": C,
                     "vocab_chunk_size": Vc, "temp_bytes": stats["temp_bytes"],
                     "total_bytes": stats["total_bytes"], "refused": stats["refused"],
                     "logits_bytes": B * logits_bytes,
                     "compile_s": round(time.perf_counter() - start, 1)})
    return rows


def chunked(what, C, Vc):
    if what == "top-k":
        return lambda h, e: L.top_k_logits(h, e, K, chunk_size=C, vocab_chunk_size=Vc)
    return jax.value_and_grad(
        lambda h, e, t: L.cross_entropy(h, e, t, chunk_size=C, vocab_chunk_size=Vc), (0, 1))


def temp_of(rows, what, method, B):
    (row,) = [r for r in rows if (r["what"], r["method"], r["B"]) == (what, method, B)
              and r["chunk_size"] is None and r["vocab_chunk_size"] is None]
    return row["temp_bytes"]


local_where = f"{jax.default_backend()} ({backend.device_kind})"
mem_rows = memory_rows(local_where, None, MEM_BATCHES)
tpu_rows, tpu_skip = [], None
if TPU_COMPILE:
    try:
        tpu_device = plan.topology_devices(target)[0]
    except BadInput as err:  # no libtpu here (a CUDA-only install): say so and go on
        tpu_skip = str(err)
    else:
        tpu_where = f"{TARGET} ({tpu_device.device_kind}, one chip)"
        tpu_rows = memory_rows(tpu_where, jax.sharding.SingleDeviceSharding(tpu_device),
                               TPU_BATCHES)
show(mem_rows + tpu_rows, "memory_vs_batch",
     ["where", "what", "method", "B", "temp_bytes", "total_bytes", "logits_bytes", "refused",
      "compile_s"])
if tpu_skip:
    print(f"no TPU compile: {tpu_skip}")

# %%
Bmax = MEM_BATCHES[-1]
cpu_backend = jax.default_backend() == "cpu"
full_over_ours = ratio(temp_of(mem_rows, "top-k", "full logits", Bmax),
                       temp_of(mem_rows, "top-k", "ours (chunked)", Bmax))
step_over_ours = ratio(temp_of(mem_rows, "top-k", "per-step scan", Bmax),
                       temp_of(mem_rows, "top-k", "ours (chunked)", Bmax))
loss_over_ours = ratio(temp_of(mem_rows, "loss fwd+bwd", "naive loss", Bmax),
                       temp_of(mem_rows, "loss fwd+bwd", "ours (chunked)", Bmax))
print(f"{local_where}, B={Bmax}, T={MEM_T}, V={MEM_V}, D={MEM_D}: the logits alone are "
      f"{size(Bmax * logits_bytes)}; temporaries full / ours = {full_over_ours:.1f}x, "
      f"per-step / ours = {step_over_ours:.1f}x, naive loss / ours (fwd+bwd) = "
      f"{loss_over_ours:.1f}x")
if cpu_backend:
    ours_cpu = temp_of(mem_rows, "top-k", "ours (chunked)", Bmax)
    print(f"XLA:CPU copies the whole [V, D] table for loops that slice it ({size(table_bytes)} "
          f"here; see shared.logits._take): of ours' {size(ours_cpu)} of temporaries, "
          f"{size(ours_cpu - table_bytes)} are ours proper, which would make full / ours "
          f"{ratio(temp_of(mem_rows, 'top-k', 'full logits', Bmax), ours_cpu - table_bytes):.0f}x."
          " The TPU and GPU compilers make no such copy (the TPU rows below).")
if tpu_rows:
    Bt = TPU_BATCHES[-1]
    for what, big in (("top-k", "full logits"), ("top-k", "per-step scan"),
                      ("loss fwd+bwd", "naive loss")):
        a, b = temp_of(tpu_rows, what, big, Bt), temp_of(tpu_rows, what, "ours (chunked)", Bt)
        refused = any(r["refused"] for r in tpu_rows if (r["what"], r["method"], r["B"]) ==
                      (what, big, Bt))
        verdict = (f"{a / b:.0f}x less than {big}" if a > b > 0 else
                   "the compiler reports no HBM scratch" if b == 0 else f"more than {big}")
        print(f"{tpu_where}, B={Bt}: {what}: {big} {'asks for at least' if refused else 'needs'}"
              f" {size(a)} of temporaries, ours {size(b)} ({verdict})")


# %%
def plot_vs_batch(ax, rows, what, style, where):
    for method in (TOPK_FNS if what == "top-k" else LOSS_FNS):
        pts = [r for r in rows if (r["what"], r["method"]) == (what, method)
               and r["chunk_size"] is None and r["vocab_chunk_size"] is None]
        xs = [r["B"] for r in pts]
        ys = [max(r["temp_bytes"], 0.1 * MiB) / MiB for r in pts]  # 0 drawn at 0.1 MiB
        line, = ax.plot(xs, ys, style, label=f"{method}, {where}")
        refused = [(x, y) for x, y, r in zip(xs, ys, pts, strict=True) if r["refused"]]
        if refused:
            ax.plot([x for x, _ in refused], [y for _, y in refused], "^",
                    color=line.get_color(), ms=10, fillstyle="none",
                    label=f"{method}, {where}: refused (asked at least)")


fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
for ax, what in zip(axes, ("top-k", "loss fwd+bwd"), strict=True):
    plot_vs_batch(ax, mem_rows, what, "o-", jax.default_backend())
    if tpu_rows:
        plot_vs_batch(ax, tpu_rows, what, "s--", TARGET)
        ax.axhline(target.chip.hbm_bytes / MiB, color="red", ls=":", label=f"{TARGET} HBM")
    ax.plot(MEM_BATCHES, [b * logits_bytes / MiB for b in MEM_BATCHES], "k:", alpha=0.5,
            label="the [B, T, V] bf16 logits")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch B (sequences)")
    ax.set_ylabel("temporary memory (MiB, log; 0 drawn at 0.1)")
    ax.set_title(f"{what}: XLA temporaries, T={MEM_T}, V={MEM_V}, D={MEM_D}, bf16")
    ax.legend(fontsize=7)
fig.tight_layout()
report.save_figure(fig, out, "temp_vs_batch")
plt.show()

# %% [markdown]
# ### Against the chunk size
# Ours at the largest batch, one knob at a time: time steps per block (`chunk_size`, the
# vocabulary chunk at its default) and vocabulary rows per block (`vocab_chunk_size`, the time
# chunk at its default). A block is `[B, chunk_size, vocab_chunk_size]` fp32, so its memory
# grows with both; the defaults (dotted) come from the sweep in
# `benchmarks/results/logits_cpu.json`. On a TPU `TARGET` the sweep is compiled in plan mode
# (`TPU_CHUNK_SWEEP`).

# %%
sweep = [(C, None) for C in CHUNK_SIZES] + [(None, Vc) for Vc in VOCAB_CHUNK_SIZES]
chunk_rows = memory_rows(local_where, None, [Bmax], sweep)
if tpu_rows and TPU_CHUNK_SWEEP:
    chunk_rows += memory_rows(tpu_where, jax.sharding.SingleDeviceSharding(tpu_device),
                              [TPU_BATCHES[-1]], sweep)
show(chunk_rows, "memory_vs_chunk", ["where", "what", "B", "chunk_size", "vocab_chunk_size",
                                     "temp_bytes", "refused", "compile_s"])


def default_chunk(B, T):
    """shared.logits' default time chunk: DEFAULT_BLOCK_TOKENS // B, evened out over T."""
    return -(-T // -(-T // max(1, L.DEFAULT_BLOCK_TOKENS // B)))


def plot_chunks(rows, value, ylabel, name, title, B, T):
    """Two panels: `value` against chunk_size and against vocab_chunk_size."""
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2))
    for ax, knob in zip(axes, ("chunk_size", "vocab_chunk_size"), strict=True):
        for (where, what), style in zip(sorted({(r["where"], r["what"]) for r in rows}),
                                        ("o-", "s-", "o--", "s--"), strict=False):
            pts = sorted((r[knob], r[value]) for r in rows
                         if (r["where"], r["what"]) == (where, what) and r[knob])
            ax.plot([x for x, _ in pts], [max(y, 1e-9) for _, y in pts], style,
                    label=f"{what}, {where}")
        defaults = ({"default": default_chunk(B, T)} if knob == "chunk_size" else
                    {"top-k default": L.DEFAULT_VOCAB_CHUNK,
                     "loss default": L.DEFAULT_VOCAB_CHUNK_LOSS})
        for label, d in defaults.items():
            ax.axvline(d, color="grey", ls=":")
            ax.annotate(label, (d, 1), xycoords=("data", "axes fraction"), rotation=90,
                        va="top", ha="right", fontsize=7, color="grey")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("time steps per block (chunk_size)" if knob == "chunk_size"
                      else "vocabulary rows per block (vocab_chunk_size)")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
    fig.suptitle(title + " (grey dotted: the defaults)")
    fig.tight_layout()
    report.save_figure(fig, out, name)
    plt.show()


plot_chunks([{**r, "temp_mib": max(r["temp_bytes"], 0.1 * MiB) / MiB} for r in chunk_rows],
            "temp_mib", "temporary memory (MiB, log; 0 drawn at 0.1)", "temp_vs_chunk",
            f"Ours: XLA temporaries vs block size, B={Bmax}, T={MEM_T}, V={MEM_V}", Bmax, MEM_T)

# %% [markdown]
# ### Measured peak HBM (device mode)
# The same programs run on the device, in increasing order of the bytes the compiler predicted,
# because the peak is a process-wide high-water mark (which is also why this section runs before
# any other array work): each point's peak is read right after it runs, and a point whose peak
# did not rise above the high-water mark before it is marked, since its own peak is then only
# bounded by that mark. Arguments (the 576 MiB table, the hidden states) count. Out of memory is
# recorded, and every larger point after it is skipped.

# %%
peak_rows = []
if MODE == "device":
    key = jax.random.PRNGKey(SEED)
    make = jax.jit(lambda key, shape: 0.1 * jax.random.normal(key, shape, jnp.bfloat16),
                   static_argnums=1)  # one bf16 buffer, no fp32 intermediate at the peak
    table_dev = make(key, (MEM_V, MEM_D))
    fns = {("top-k", m): f for m, f in TOPK_FNS.items()} | {("loss fwd+bwd", m): f
                                                             for m, f in LOSS_FNS.items()}
    high, oom = measure.peak_bytes_per_device() or 0, None
    for row in sorted(mem_rows, key=lambda r: r["total_bytes"]):
        point = {k: row[k] for k in ("what", "method", "B", "total_bytes")}
        if oom or row["refused"]:
            peak_rows.append({**point, "status": "refused by the compiler" if row["refused"]
                              else f"skipped (larger than {oom})"})
            continue
        h = make(key, (row["B"], MEM_T, MEM_D))
        t = jax.random.randint(key, (row["B"], MEM_T), 0, MEM_V)
        args = (h, table_dev) if row["what"] == "top-k" else (h, table_dev, t)
        result, error = measure.run_or_oom(
            lambda args=args, row=row: jax.block_until_ready(
                jax.jit(fns[row["what"], row["method"]])(*args)))
        peak = measure.peak_bytes_per_device()
        peak_rows.append({**point, "status": "ok" if error is None else "out of memory",
                          "peak_bytes_per_device": peak,
                          "peak_is_this_point": None if peak is None else peak > high,
                          "error": error})
        high = max(high, peak or 0)
        oom = oom or (error and f"{row['method']} {row['what']} B={row['B']}")
        del result, h, t, args
    show(peak_rows, "measured_peak")
    del table_dev

# %% [markdown]
# ## 2 · Exactness: chunked vs full, values, indices, loss and gradients
# `top_k_logits` must return the same values as `lax.top_k(hidden @ embedding.T, k)` and the
# same indices wherever values are not tied (ties keep the lower index, as `lax.top_k` does, but
# a differently blocked matmul may round a logit differently, which can reorder equal-looking
# values). So ties are counted, not assumed away: a position is *tied* when its reference value
# equals a neighbour's in the sorted reference row (the (k+1)-th included). The per-time-step
# scan is checked the same way. `indices_in_fp32_order` is the share of indices equal to the
# top-k of the *unrounded* fp32 logits: where bf16 ties are broken by the lower index it is
# below 1, where a program ranks before rounding to bf16 it is 1. For the loss, both the naive
# loss and `cross_entropy` are compared with an fp32 reference computed from the same (rounded)
# inputs: the naive loss rounds bf16 logits before its fp32 log-softmax, ours keeps the logits
# in fp32, so in bf16 ours should be the closer of the two. Random case: chunk sizes that
# divide neither T nor V.


# %%
def top_k_agreement(case, dtype, method, values, indices, ref_values, ref_indices, h, e):
    """One row: value errors and index agreement, with ties counted (refs hold k + 1 entries).

    Also: how often the indices follow the order of the unrounded fp32 logits of (h, e).
    """
    v, i = np.asarray(values, np.float32), np.asarray(indices)
    ref_v, ref_i = np.asarray(ref_values, np.float32), np.asarray(ref_indices)
    k = v.shape[-1]
    gaps = np.diff(ref_v, axis=-1)  # [.., k]: zero where two neighbours are equal
    tied = np.zeros(v.shape, bool)
    tied[..., 1:] |= gaps[..., : k - 1] == 0
    tied |= gaps[..., :k] == 0
    same = i == ref_i[..., :k]
    fp32_order = jax.lax.top_k(jnp.einsum("btd,vd->btv", h, e,
                                          preferred_element_type=jnp.float32), k)[1]
    return {"case": case, "dtype": jnp.dtype(dtype).name, "method": method,
            "positions": v.size, "values_equal": float(np.mean(v == ref_v[..., :k])),
            "max_abs_value_err": float(np.max(np.abs(v - ref_v[..., :k]))),
            "tied_positions": int(tied.sum()),
            "index_mismatch_untied": int((~same & ~tied).sum()),
            "index_mismatch_tied": int((~same & tied).sum()),
            "indices_in_fp32_order": float(np.mean(i == np.asarray(fp32_order)))}


LOSS_AND_GRADS = {  # jitted once; chunk sizes and softcap are static (Python numbers)
    fn: jax.jit(jax.value_and_grad(fn, argnums=(0, 1)), static_argnames=static)
    for fn, static in ((L.full_cross_entropy, ("softcap",)),
                       (L.cross_entropy, ("softcap", "chunk_size", "vocab_chunk_size")))}


def loss_and_grads(fn, h, e, t, **kw):
    return LOSS_AND_GRADS[fn](h, e, t, **kw)


def loss_rows(case, h, e, t, softcap=None, **chunks):
    """Naive and chunked loss and gradients vs an fp32 naive reference on the same inputs."""
    ref_loss, ref_grads = loss_and_grads(L.full_cross_entropy, h.astype(jnp.float32),
                                         e.astype(jnp.float32), t, softcap=softcap)
    rows = []
    for method, fn, kw in (("naive (full logits)", L.full_cross_entropy, {}),
                           ("ours (chunked)", L.cross_entropy, chunks)):
        loss, grads = loss_and_grads(fn, h, e, t, softcap=softcap, **kw)
        row = {"case": case + ("" if softcap is None else f", softcap {softcap:g}"),
               "dtype": h.dtype.name, "method": method, "loss": float(loss),
               "loss_abs_err": abs(float(loss) - float(ref_loss))}
        for name, g, ref in zip(("d_hidden", "d_embedding"), grads, ref_grads, strict=True):
            diff = g.astype(jnp.float32) - ref
            row[f"{name}_max_abs_err"] = float(jnp.max(jnp.abs(diff)))
            row[f"{name}_rel_err"] = float(jnp.linalg.norm(diff) / jnp.linalg.norm(ref))
        rows.append(row)
    return rows


if measured:
    topk_rows, ce_rows = [], []
    B, T, D, V = EXACT_SHAPE
    C, Vc = EXACT_CHUNKS
    h32, e32, t = L.example_inputs(B, T, D, V, jnp.float32, seed=SEED)  # logits of std ~3
    t = t.at[0, : T // 10].set(-1)  # some ignored targets
    topk = jax.jit(functools.partial(L.top_k_logits, k=K, chunk_size=C, vocab_chunk_size=Vc))
    per_step = jax.jit(functools.partial(L.per_step_top_k_logits, k=K))
    full = jax.jit(L.full_top_k_logits, static_argnums=2)
    for dtype in (jnp.float32, jnp.bfloat16):
        h, e = h32.astype(dtype), e32.astype(dtype)
        ref = full(h, e, K + 1)
        case = f"random B={B} T={T} D={D} V={V}"
        topk_rows += [top_k_agreement(case, dtype, "full logits (lax.top_k)", ref[0][..., :K],
                                      ref[1][..., :K], *ref, h, e),
                      top_k_agreement(case, dtype, "per-step scan", *per_step(h, e), *ref, h, e),
                      top_k_agreement(case, dtype, f"ours C={C} Vc={Vc}", *topk(h, e), *ref, h,
                                      e)]
        for softcap in (None, SOFTCAP):
            ce_rows += loss_rows(case, h, e, t, softcap, chunk_size=C, vocab_chunk_size=Vc)

# %% [markdown]
# The same on Gemma 3: `models.teacher_forced_top_k` runs the model's own teacher-forced pass
# and either materialises the logits and takes `lax.top_k` (mode `full`, as tunix's forward
# does) or stops at the final-normed hidden states and calls `top_k_logits` (mode `topk`).
# The loss uses those hidden states and the model's tied embedding table, with the next token as
# the target. Random weights unless `WEIGHTS="kaggle"`: their logits are small and close
# together, so bf16 top-k rows hold many exact ties.

# %%
if measured:
    one_device = make_mesh(None, jax.devices()[:1])  # any batch is legal on one device
    start = time.perf_counter()
    if WEIGHTS == "dummy":  # no tokenizer needed: the tokens are random ids
        model = models.dummy_model(MODEL, mesh=one_device, seed=SEED)
    else:
        model, _ = models.load(MODEL, WEIGHTS, mesh=one_device, seed=SEED)
    graphdef, state = nnx.split(model)
    graph = models.StaticGraph(graphdef)
    vocab = model.config.num_embed
    tokens = jnp.asarray(rollout.random_prompts(GEMMA_B, GEMMA_T, vocab, seed=SEED))

    @functools.partial(jax.jit, static_argnames="graph")
    def hidden_and_table(graph, state, tokens):
        model = nnx.merge(graph.graphdef, state)
        return models.hidden_states(model, tokens), models.head_table(model)

    hidden, table = hidden_and_table(graph, state, tokens)
    case = f"{MODEL} ({WEIGHTS}) B={GEMMA_B} T={GEMMA_T} D={table.shape[1]} V={vocab}"
    ref = models.teacher_forced_top_k(graph, state, tokens, mode="full", k=K + 1)
    ours = models.teacher_forced_top_k(graph, state, tokens, mode="topk", k=K)
    for method, (v, i) in (("full logits (lax.top_k)", (ref[0][..., :K], ref[1][..., :K])),
                           ("ours (teacher_forced_top_k)", ours)):
        topk_rows.append(top_k_agreement(case, hidden.dtype, method, v, i, *ref, hidden, table))
    h32, e32 = hidden.astype(jnp.float32), table.astype(jnp.float32)
    topk_rows.append(top_k_agreement(case, jnp.float32, "ours (default chunks)",
                                     *jax.jit(L.top_k_logits, static_argnums=2)(h32, e32, K),
                                     *full(h32, e32, K + 1), h32, e32))
    targets = jnp.concatenate([tokens[:, 1:], jnp.full((GEMMA_B, 1), -1, jnp.int32)], axis=1)
    for h, e in ((h32, e32), (hidden, table)):
        ce_rows += loss_rows(case, h, e, targets)
    print(f"Gemma 3 part: {time.perf_counter() - start:.1f} s; hidden states {hidden.dtype} "
          f"{tuple(hidden.shape)}, table {tuple(table.shape)}")
    show(topk_rows, "exactness_top_k")
    show(ce_rows, "exactness_loss")
    untied = sum(r["index_mismatch_untied"] for r in topk_rows)
    worst = max((r for r in ce_rows if r["method"].startswith("ours")),
                key=lambda r: r["d_embedding_rel_err"])
    print(f"index mismatches at untied positions, all cases: {untied}; largest value error "
          f"{max(r['max_abs_value_err'] for r in topk_rows):.3g}; worst chunked-loss gradient "
          f"relative error {worst['d_embedding_rel_err']:.2e} ({worst['case']}, {worst['dtype']})")
    for r in topk_rows:
        if r["index_mismatch_tied"] and r["indices_in_fp32_order"] == 1.0:
            print(f"{r['method']} ({r['case']}, {r['dtype']}): {r['index_mismatch_tied']} "
                  "indices differ from lax.top_k's, all at tied values, and all follow the order "
                  "of the unrounded fp32 logits: this compiled program ranks before rounding to "
                  f"{r['dtype']} (a legitimate order for equal {r['dtype']} values)")
    del model, state, hidden, table, ref, ours

# %% [markdown]
# ## 3 · Speed: wall time after warm-up
# The same three approaches, and the loss forward + backward, at `TIME_B` × `TIME_T` ×
# `TIME_V` (× D = `MEM_D`) in bf16: a size a 2-core CPU runs in seconds locally, the real one on
# a device. Medians of `TRIALS` calls after the first (compile + run) call, which is the
# warm-up (one timed call for the per-step scan, the slowest by far).
# Compare ratios, not CPU seconds: a CPU has neither an MXU nor HBM, and a shared 2-core
# machine moves single timings by ±30%.

# %%
if measured:
    h, e, t = L.example_inputs(TIME_B, TIME_T, MEM_D, TIME_V, jnp.bfloat16, seed=SEED)
    jobs = [("top-k", m, f, (h, e)) for m, f in TOPK_FNS.items()]
    jobs += [("loss fwd+bwd", m, f, (h, e, t)) for m, f in LOSS_FNS.items()]
    time_rows = []
    for what, method, fn, args in tqdm(jobs, desc="timing", unit="function"):
        trials = 1 if method == "per-step scan" else TRIALS  # the slowest by far
        _, timing = measure.time_fn(jax.jit(fn), *args, warmup=0, trials=trials)
        time_rows.append({"what": what, "method": method, "B": TIME_B, "T": TIME_T, "V": TIME_V,
                          "median_s": timing.median_s, "min_s": min(timing.trials_s),
                          "first_call_s": timing.first_call_s})
    med = {(r["what"], r["method"]): r["median_s"] for r in time_rows}
    for r in time_rows:
        base = "ours (chunked)"
        r["time_over_ours"] = med[r["what"], r["method"]] / med[r["what"], base]
    show(time_rows, "speed")
    speed = {"per_step_over_ours": med["top-k", "per-step scan"] / med["top-k", "ours (chunked)"],
             "ours_over_full": med["top-k", "ours (chunked)"] / med["top-k", "full logits"],
             "loss_ours_over_naive": (med["loss fwd+bwd", "ours (chunked)"]
                                      / med["loss fwd+bwd", "naive loss"])}
    print(f"at B={TIME_B}, T={TIME_T}, V={TIME_V}, D={MEM_D} on {backend.device_kind}: the "
          f"per-step scan takes {speed['per_step_over_ours']:.1f}x ours' time; ours takes "
          f"{speed['ours_over_full']:.2f}x the full materialisation's; the chunked loss "
          f"forward+backward {speed['loss_ours_over_naive']:.2f}x the naive one's")

# %% [markdown]
# ### Time against the chunk size
# Small blocks mean skinny matmuls and many loop iterations; large ones mean big fp32 blocks
# (memory above) and, for the loss, cache misses on a CPU. Same sweep as the memory one, at the
# timing size; the time chunk counts time steps, so a block holds `TIME_B × chunk_size` tokens.
# A vocabulary chunk of V or more is a single chunk: no running top-k merge at all.

# %%
if measured:
    time_chunk_rows = []
    sweep = [(C, None) for C in TIME_CHUNK_SIZES] + [(None, Vc) for Vc in TIME_VOCAB_CHUNK_SIZES]
    jobs = [(what, C, Vc) for C, Vc in sweep for what in ("top-k", "loss fwd+bwd")]
    for what, C, Vc in tqdm(jobs, desc="timing chunk sizes", unit="function"):
        args = (h, e) if what == "top-k" else (h, e, t)
        _, timing = measure.time_fn(jax.jit(chunked(what, C, Vc)), *args, warmup=0,
                                    trials=TRIALS)
        time_chunk_rows.append({"where": backend.device_kind, "what": what, "chunk_size": C,
                                "vocab_chunk_size": Vc, "tokens_per_block": TIME_B * (
                                    C or default_chunk(TIME_B, TIME_T)),
                                "median_s": timing.median_s})
    show(time_chunk_rows, "speed_vs_chunk")
    plot_chunks(time_chunk_rows, "median_s", "wall time after warm-up (s, log)", "time_vs_chunk",
                f"Ours: wall time vs block size on {backend.device_kind}, B={TIME_B}, "
                f"T={TIME_T}, V={TIME_V}, D={MEM_D}", TIME_B, TIME_T)
    del h, e, t

# %% [markdown]
# ## 4 · Plan: the largest teacher-forced Gemma 3 batch on `TARGET`
# `shared.plan`'s `forward` workload compiles `models.teacher_forced_top_k` — the same jitted
# function section 2 ran — for `TARGET` with abstract arguments: the model's weights with their
# shardings, tokens `[B, PLAN_SEQ]`. `full` materialises the `[B, T, V]` logits and takes
# `lax.top_k`; `topk` stops at the hidden states and calls `top_k_logits`. Bytes per device are
# arguments + outputs + temporaries − aliased. The largest batch is searched by compiling (the
# compiler's verdict, never an extrapolation): first with fast compiles (least optimisation
# effort, quicker, bytes run high), then exact ones around their boundary. Results are cached
# in `.cache/plan`: a gemma3-1b compile takes minutes on 2 cores, a rerun is instant. Outside
# plan mode only cached results are shown unless `PREDICT`.


# %%
def plan_request(mode, batch):
    return plan.Request("forward", MODEL, TARGET, batch=batch, seq=PLAN_SEQ, logits=mode, k=K)


def plan_row(point):
    return {"logits": point["logits"], "batch": point["batch"], "fast": point["fast"],
            "bytes_per_device": point["bytes_per_device"],
            "temp_bytes": point["executables"][point["worst"]]["temp_bytes"],
            "hbm_bytes": point["hbm_bytes"], "usable_hbm_bytes": point["compiler_hbm_bytes"],
            "fits": point["fits"], "roofline_ms": 1e3 * point["roofline_lower_bound_s"],
            "compile_s": round(point["compile_s"], 1), "cached": point["cached"]}


n_chips = len(plan.topology_devices(target)) if (MODE == "plan" or PREDICT) else target.chips
batches = [b for b in PLAN_BATCHES if b % n_chips == 0]  # the batch is split over the chips
wanted = [plan_request(m, b) for m in models.LOGITS_MODES for b in batches]
if MODE != "plan":
    wanted = [r for r in wanted if PREDICT or plan.is_cached(r)]
planned = [plan_row(plan.plan_point(r)) for r in
           tqdm(wanted, desc=f"plan forward {MODEL} on {TARGET}", unit="point",
                disable=not wanted)]
searches = {}
for mode in models.LOGITS_MODES:
    if PLAN_MAX_BATCH and (MODE == "plan" or PREDICT):
        searches[mode] = plan.max_batch(plan_request(mode, n_chips))
if planned:
    show(planned, "plan_points")
for mode, search in searches.items():
    planned += [plan_row(p) for p in search["probes"]]
    print(f"{mode}: the largest batch that fits {TARGET} at T={PLAN_SEQ} is "
          f"{search['max_batch']}: {plan.describe(search)}")
if searches:
    show([plan_row(p) | {"search": mode} for mode, s in searches.items()
          for p in s["probes"]], "plan_max_batch_probes")

# %%
if planned:
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for mode, style in zip(models.LOGITS_MODES, ("o-", "s-"), strict=True):
        pts = sorted({r["batch"]: r for r in planned
                      if r["logits"] == mode and not r["fast"]}.items())
        line, = ax.plot([b for b, _ in pts], [r["bytes_per_device"] / GiB for _, r in pts],
                        style, label=f"logits={mode}")
        fast = sorted((r["batch"], r["bytes_per_device"] / GiB) for r in planned
                      if r["logits"] == mode and r["fast"])
        if fast:
            ax.plot(*np.array(fast).T, "x", color=line.get_color(), alpha=0.6,
                    label=f"logits={mode}, fast compiles (bytes run high)")
        if mode in searches:
            ax.axvline(searches[mode]["max_batch"], color=line.get_color(), ls=":",
                       label=f"largest that fits ({mode}): {searches[mode]['max_batch']}")
    ax.axhline(target.chip.hbm_bytes / GiB, color="red", ls="--", label=f"{TARGET} HBM per chip")
    usable = [r["usable_hbm_bytes"] for r in planned if r["usable_hbm_bytes"]]
    if usable:
        ax.axhline(min(usable) / GiB, color="red", ls=":", label="usable HBM (compiler)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch B (sequences)")
    ax.set_ylabel("bytes per device (GiB, log)")
    ax.set_title(f"Teacher-forced {MODEL} forward + top-{K} on {TARGET}, T={PLAN_SEQ}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    report.save_figure(fig, out, "plan_bytes_vs_batch")
    plt.show()

# %% [markdown]
# ## 5 · What to use when
# From this run's numbers (the memory at the real Gemma size; speed ratios at the timing size;
# the largest batches when section 4 ran). The per-step scan's cost on a TPU follows from its
# design: every time step reads the whole [V, D] table from HBM, `T · V · D · 2` bytes per call
# against about one read of the table for the chunked version, so its lower bound is
# `T · V · D · 2 / HBM bandwidth` however few FLOPs it does.

# %%
chip = target.chip
step_bound_s = MEM_T * table_bytes / chip.hbm_bandwidth  # the per-step scan's table traffic
flop_bound_s = 2 * Bmax * MEM_T * MEM_V * MEM_D / chip.peak_bf16_flops  # the matmul, any method
largest = {m: s["max_batch"] for m, s in searches.items()}


def memory_note(what, big):
    """Temporaries of `big` vs ours (on TARGET when compiled for it), measured peaks if any."""
    where, rows, B = ((tpu_where, tpu_rows, TPU_BATCHES[-1]) if tpu_rows
                      else (local_where, mem_rows, Bmax))
    (row,) = [r for r in rows if (r["what"], r["method"], r["B"]) == (what, big, B)
              and r["chunk_size"] is None and r["vocab_chunk_size"] is None]
    note = (f"{'at least ' if row['refused'] else ''}{size(row['temp_bytes'])} vs ours "
            f"{size(temp_of(rows, what, 'ours (chunked)', B))} of temporaries at B={B} ({where})")
    peaks = {r["method"]: r for r in peak_rows if (r["what"], r["B"]) == (what, Bmax)}
    if peaks:
        note += f"; measured peak at B={Bmax} on {backend.device_kind}: " + ", ".join(
            f"{m} {size(r.get('peak_bytes_per_device')) if r['status'] == 'ok' else r['status']}"
            for m, r in peaks.items() if m in (big, "ours (chunked)"))
    return note


def speed_note(key, text):
    return f"; {text.format(speed[key])} ({backend.device_kind})" if measured else ""


def batch_note(mode):
    return (f"; largest {MODEL} teacher-forced batch at T={PLAN_SEQ} on {TARGET}: "
            f"{largest[mode]}" if mode in largest else "")


closing = [
    {"approach": "full logits ([B, T, V], then lax.top_k / naive loss)",
     "use when": "small V or a tiny batch, or you need every logit (full-distribution KL)",
     "numbers from this run": f"the logits alone are {size(logits_bytes)} per sequence; "
     + memory_note("top-k", "full logits") + batch_note("full")},
    {"approach": "per-time-step scan ([B, D] @ [D, V] per step)",
     "use when": "never: least HBM, but it reads the table once per token",
     "numbers from this run": memory_note("top-k", "per-step scan")
     + speed_note("per_step_over_ours", "{:.1f}x ours' time")
     + f"; on {TARGET} at least {step_bound_s * 1e3:.0f} ms per call for the table traffic vs "
       f"{flop_bound_s * 1e3:.0f} ms of matmul at B={Bmax}, T={MEM_T}"},
    {"approach": "chunked top-k (shared.logits.top_k_logits)",
     "use when": "rollout-sized batches with Gemma-sized vocabularies: distillation, logging",
     "numbers from this run": memory_note("top-k", "full logits")
     + speed_note("ours_over_full", "{:.2f}x the full version's time") + batch_note("topk")},
    {"approach": "chunked loss (shared.logits.cross_entropy)",
     "use when": "training or scoring with the loss at Gemma-sized vocabularies",
     "numbers from this run": memory_note("loss fwd+bwd", "naive loss")
     + speed_note("loss_ours_over_naive", "fwd+bwd {:.2f}x the naive loss's time")},
]
show(closing, "what_to_use_when")
