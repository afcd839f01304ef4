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
# RL fine-tuning (GRPO and friends) spends most of its time generating rollouts, so on a rented
# chip two numbers decide the budget: how many sequences fit in HBM at once, and which batch
# gives the most tokens per second. The field's "Sizing gemma3 for TPUv5" experiments found
# the largest gemma3-1b batch that fits one 16 GB v5e chip at 1024 generation steps, and that
# batches of 64 and 128 beat 68 and 132 per token. This notebook measures both with the tunix
# Sampler's own jitted prefill and decode, and predicts them before you rent anything.
#
# Per point: time to first token (the prefill call) and decode time per generated token
# measured apart, tokens actually generated (counted from the token buffer), tokens/s, peak
# memory per device, the KV-cache estimate, and out-of-memory recorded as a point.
#
# Modes: `local` runs a small Gemma 3 of the real architecture with random weights on whatever
# JAX backend is present (CPU in CI); `device` runs gemma3-1b on the attached TPU/GPU (pass
# the real sweep's sizes, below); `plan` compiles the same jitted functions for
# `TARGET` with the real TPU compiler and reads the bytes each device needs.

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
TARGET = "v5e-1"  # plan mode (and PREDICT): the TPU slice the sweep is compiled for
MODEL = None  # None: gemma3-tiny (small, real architecture) locally, else gemma3-1b
WEIGHTS = "dummy"  # dummy: random weights, no download | kaggle: real weights (credentials)
# Sizes left at None: CPU-friendly locally, the field's setting in plan and device mode.
BATCH_SIZES = None  # at max(STEPS) steps; [1, 4, 8, 12, 16] | [1, 4, 16, 60, 64, 68, ..., 260]
STEPS = None  # the steps sweep at batch 1; [8, 16, 32] | [128, 256, 512, 1024]
PROMPT_LEN = None  # prompt tokens per row; 16 | 256
CACHE_SIZE = None  # KV-cache slots; None: PROMPT_LEN + max(STEPS) + 32 (256 + 1024: 1312)
TRIALS = 5  # timed calls per point after the first (compile + run) call, which is discarded
RESULTS_DIR = "results/01_rollout_sizing"
SEED = 0
MESH = None  # FSDPxTP, e.g. "8x1"; None: every device on fsdp (local: one device)
PLAN_BATCH_SIZES = [8, 64, 128]  # plan mode: one compile each (1-3 min for gemma3-1b)
PLAN_MAX_BATCH = True  # plan mode: search the largest batch that fits (~10-17 compiles)
PREDICT = False  # local/device: also compile predictions for TARGET (cached ones are shown)

# %%
from shared import report

MODE = report.use_mode(MODE)  # before jax: plan mode compiles for TARGET on the CPU

import time

import jax
import matplotlib.pyplot as plt
from IPython.display import display
from matplotlib.ticker import FuncFormatter
from tqdm.auto import tqdm

from shared import hardware, measure, models, plan, rollout, rollout_sweep, sizing
from shared.errors import BadInput, choose
from shared.sharding import check_batch, make_mesh, mesh_shape

MODEL = report.by_mode(MODE, MODEL, "gemma3-tiny", "gemma3-1b")
BATCH_SIZES = report.by_mode(MODE, BATCH_SIZES, [1, 4, 8, 12, 16],
                             [1, 4, 16, 60, 64, 68, 124, 128, 132, 252, 256, 260])
STEPS = report.by_mode(MODE, STEPS, [8, 16, 32], [128, 256, 512, 1024])
PROMPT_LEN = report.by_mode(MODE, PROMPT_LEN, 16, 256)
choose("model", MODEL, models.MODEL_NAMES)
choose("weights", WEIGHTS, models.WEIGHTS)
BATCH_SIZES, STEPS = sorted(set(BATCH_SIZES)), sorted(set(STEPS))
if not BATCH_SIZES or not STEPS or min(BATCH_SIZES + STEPS + [PROMPT_LEN, TRIALS]) < 1:
    raise BadInput("BATCH_SIZES, STEPS, PROMPT_LEN and TRIALS must be positive (lists non-empty)")
CACHE = CACHE_SIZE or PROMPT_LEN + max(STEPS) + 32  # the field's margin: 256 + 1024 -> 1312
if PROMPT_LEN + max(STEPS) > CACHE:
    raise BadInput(f"CACHE_SIZE {CACHE} < PROMPT_LEN + max(STEPS) = {PROMPT_LEN + max(STEPS)}")
BATCH_STEPS = max(STEPS)  # the batch sweep's generation steps
target = hardware.parse_target(TARGET)
out = report.results_dir(RESULTS_DIR)
dims = models.model_dims(MODEL)
GiB, MiB = 2**30, 2**20


size = report.bytes_text


def show(rows, name, columns=None):
    """Save the raw rows (CSV/JSON under RESULTS_DIR); display them with readable units."""
    display(report.byte_table(rows, out, name, columns).round(4))


# %% [markdown]
# ## 1 · The closed form: weights plus KV cache
# tunix allocates the KV cache for every layer at the full `CACHE_SIZE` (the sliding window is
# only a mask), `2 · L · K · H · 2` bytes per token in bf16. In tunix's sampling layout the
# weights are replicated over "fsdp" (each fsdp slice generates its share of the batch) and
# split over "tp". Weights + KV is a lower bound on what a batch needs: the compiler's answer
# in plan mode adds the decode step's logits, activations, the token buffer and padding.

# %%
fsdp_t, tp_t = mesh_shape(MESH, target.chips)
weights_bytes = sizing.param_counts(dims)["total"] * 2  # bf16


def closed_form_per_device(batch):
    """bf16 weights (split over tp only) + the KV cache of this device's share of the batch."""
    return weights_bytes // tp_t + rollout_sweep.closed_form_kv_per_device(
        dims, batch, CACHE, fsdp_t, tp_t)


kv_row_per_device = rollout_sweep.closed_form_kv_per_device(dims, 1, CACHE, 1, tp_t)
closed_max = fsdp_t * ((target.chip.hbm_bytes - weights_bytes // tp_t) // kv_row_per_device)
show([{"quantity": "parameters", "value": sizing.param_counts(dims)["total"]},
      {"quantity": "weights bytes (bf16)", "value": weights_bytes},
      {"quantity": "KV cache bytes per token", "value": sizing.kv_cache_bytes_per_token(dims)},
      {"quantity": f"KV cache bytes per row at {CACHE} slots",
       "value": sizing.kv_cache_bytes(dims, 1, CACHE)},
      {"quantity": f"closed-form largest batch on {TARGET} (weights + KV only)",
       "value": closed_max}], "closed_form")
print(f"{MODEL}: {size(weights_bytes)} of weights; on {TARGET} ({size(target.chip.hbm_bytes)} "
      f"per chip, mesh fsdp={fsdp_t} x tp={tp_t}) weights + KV cache alone allow a batch of "
      f"{closed_max}: an upper bound, the compiler's answer (plan mode) is smaller.")

# %% [markdown]
# ## 2 · Measure: steps at batch 1, then batch sizes at the largest step count
# Random ("dummy") weights emit EOS whenever the argmax happens to land on it, so a row could
# stop after a handful of steps and the timing would depend on luck. For sizing, the sampler
# never stops early (`stop_at_eos=False`): every row decodes every step, which is also the
# worst case a real rollout budget must allow. Tokens are still counted from the token buffer
# (a generated pad id is not a token), never assumed.
#
# Points run in increasing batch order in this one process, so the per-device peak
# (a process-wide high-water mark) after each point belongs to that point. Each new shape
# compiles on its first call: that call is reported as `first_call_s` / `compile_s` and not
# timed; the timings are medians of `TRIALS` calls after it. Out of memory is a row, and
# larger batches after it are recorded as skipped.

# %%
measured = MODE != "plan"
if measured:
    if MODE == "device":
        hardware.initialize_distributed()
    # Local batches such as 1 and 12 must divide the fsdp axis: one device keeps them all
    # legal (pytest's 8 virtual CPU devices would not). Device mode uses every device.
    devices = jax.devices() if MODE == "device" or MESH else jax.devices()[:1]
    mesh = make_mesh(MESH, devices)
    for b in BATCH_SIZES:
        check_batch(b, mesh)
    start = time.perf_counter()
    # tunix's sampling layout, as plan mode's `rollout` workload compiles it
    model, tok = models.load(MODEL, WEIGHTS, mesh=mesh, seed=SEED, is_sampling=True)
    dims = models.dims(MODEL, model.config)  # gemma3-tiny: V = the tokenizer's
    sampler = rollout.make_sampler(model, tok, CACHE, stop_at_eos=False)
    chip_here = hardware.current_chip()
    weights_here = models.param_bytes(model) // mesh.shape["tp"]  # replicated over fsdp
    print(f"loaded {MODEL} ({WEIGHTS}) in {time.perf_counter() - start:.1f}s on {len(devices)} "
          f"{devices[0].device_kind} device(s), mesh {dict(mesh.shape)}; weights "
          f"{size(models.param_bytes(model))}; memory stats: "
          f"{'n/a on this backend' if measure.device_memory() is None else 'per device'}")

    def measure_one(batch, steps):
        return rollout_sweep.measure_point(sampler, mesh, dims.V, batch=batch, steps=steps,
                                           prompt_len=PROMPT_LEN, trials=TRIALS, seed=SEED)

    steps_points = [(1, s) for s in STEPS]
    batch_points = [(b, BATCH_STEPS) for b in BATCH_SIZES]
    rows = rollout_sweep.sweep(measure_one, list(dict.fromkeys(steps_points + batch_points)))
    by_point = {(r["batch"], r["steps"]): r for r in rows}
    steps_rows = [by_point[p] for p in steps_points]
    batch_rows = [by_point[p] for p in batch_points]

# %%
COLUMNS = ["batch", "steps", "status", "ttft_ms", "decode_ms_per_token", "decode_ms_per_step",
           "tokens", "tokens_per_row_min", "tokens_per_row_max", "tokens_per_s",
           "first_call_s", "compile_s", "peak_bytes_per_device", "kv_cache_bytes_per_device",
           "error"]
if measured:
    show(steps_rows, "steps_sweep", COLUMNS)
    show(batch_rows, "batch_sweep", COLUMNS)
    ok_rows = [r for r in rows if r["status"] == "ok"]
    short = [r for r in ok_rows if r["tokens_per_row_min"] < r["steps"]]
    print(f"compile (first call minus a timed call): {sum(r['compile_s'] for r in ok_rows):.1f}s "
          f"over {len(ok_rows)} shapes; every row generated all its steps: {not short}"
          + (f" (fewer at {[(r['batch'], r['steps']) for r in short]}: pad ids generated)"
             if short else ""))

# %% [markdown]
# ## 3 · Figures: elapsed, ms per token and memory, against batch and against steps
# "ms per token" is batch-wide decode time per delivered token (what a rollout budget pays);
# a decode *step* serves the whole batch, so its latency is shown too. Memory: measured peak
# per device where the backend reports it (not on CPU), the KV-cache estimate per device, and
# the chip's HBM.


# %%
def sweep_figure(rows, x, name, title):
    """Three panels against `x`: elapsed (prefill, decode), ms per token/step, memory."""
    ok = [r for r in rows if r["status"] == "ok"]
    failed = [r[x] for r in rows if r["status"] != "ok"]
    xs = [r[x] for r in ok]
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    axes[0].plot(xs, [r["prefill_s"] for r in ok], "o-", label="prefill (time to first token)")
    axes[0].plot(xs, [r["decode_s"] for r in ok], "s-", label="decode")
    axes[0].set_ylabel("elapsed per rollout (s)")
    axes[1].plot(xs, [r["decode_ms_per_token"] for r in ok], "o-",
                 label="decode per token (batch-wide)")
    axes[1].plot(xs, [r["decode_ms_per_step"] for r in ok], "s--", label="decode step latency")
    axes[1].set_ylabel("milliseconds")
    sized = [r for r in rows if "kv_cache_bytes_per_device" in r]
    lines = {"KV-cache estimate": [r["kv_cache_bytes_per_device"] for r in sized],
             "weights + KV estimate": [weights_here + r["kv_cache_bytes_per_device"]
                                       for r in sized]}
    peak = [r["peak_bytes_per_device"] for r in ok if r["peak_bytes_per_device"] is not None]
    hbm = chip_here.hbm_bytes if chip_here is not None else None
    unit, unit_name = (GiB, "GiB") if max(lines["weights + KV estimate"] + peak + [
        hbm or 0]) > GiB / 2 else (MiB, "MiB")
    if len(peak) == len(ok):
        axes[2].plot(xs, [p / unit for p in peak], "o-", label="measured peak")
    for label, values in lines.items():
        axes[2].plot([r[x] for r in sized], [v / unit for v in values], "s--", label=label)
    if hbm:
        axes[2].axhline(hbm / unit, color="red", ls="--", label=f"{chip_here.name} HBM")
    axes[2].set_ylabel(f"memory per device ({unit_name})"
                       + ("" if peak else "; peak n/a here"))
    for ax in axes:
        for bad in failed:
            ax.axvline(bad, color="red", ls=":", alpha=0.6)
        ax.set_xlabel("generation steps" if x == "steps" else "batch size (sequences)")
        ax.legend(fontsize=7)
    fig.suptitle(title + (f" (red dotted: out of memory / skipped at {failed})" if failed else ""))
    fig.tight_layout()
    report.save_figure(fig, out, name)
    plt.show()


if measured:
    where = f"{devices[0].device_kind}, {MODEL} ({WEIGHTS})"
    sweep_figure(batch_rows, "batch", "vs_batch",
                 f"Rollout vs batch: {where}, prompt {PROMPT_LEN}, {BATCH_STEPS} steps")
    sweep_figure(steps_rows, "steps", "vs_steps",
                 f"Rollout vs generation steps at batch 1: {where}, prompt {PROMPT_LEN}")

# %% [markdown]
# ## 4 · Predicted by the TPU compiler (plan mode; `PREDICT` or cached results elsewhere)
# `shared.plan` lowers the same jitted prefill and decode with abstract arguments on `TARGET`'s
# devices and reads `memory_analysis()`: arguments + outputs + temporaries − aliased bytes of
# the larger executable. Results are cached on disk (`.cache/plan`): a gemma3-1b compile takes
# minutes on 2 cores, a rerun is instant. The closed form of section 1 stands beside it, and
# the difference is split into what the compiler adds: arguments beyond weights + KV (the token
# buffer, positions, padded layouts) and temporaries, the buffers XLA keeps live inside the
# executable (the decode step's logits, `B · V` floats in f32, shown for scale; activations;
# in prefill, the prompt's activations). Temporaries need not grow in proportion to the batch:
# XLA:TPU schedules for the memory it has, so near the HBM line trust the compiler's bytes,
# not a line drawn through small batches. A batch the TPU compiler
# refuses (it will not build a program over HBM) is kept as a point with the bytes it asked
# for and the usable HBM it reported.


# %%
def plan_request(batch, steps=BATCH_STEPS):
    return plan.Request("rollout", MODEL, TARGET, batch=batch, prompt_len=PROMPT_LEN,
                        steps=steps, cache_size=CACHE, mesh=MESH)


def predicted_row(point):
    """One predicted point, with the compiler's bytes split against the closed form."""
    worst = point["executables"][point["worst"]]
    refused = next((e["refused"] for e in point["executables"].values() if e.get("refused")),
                   None)  # the TPU compiler refuses a program that cannot fit: a data point
    b = point["batch"]
    closed = closed_form_per_device(b)
    split = None if refused else {
        "argument_bytes": worst["argument_bytes"],
        "arguments_beyond_closed_form_bytes": worst["argument_bytes"] - closed,
        "temp_bytes": worst["temp_bytes"],
        "output_minus_alias_bytes": worst["output_bytes"] - worst["alias_bytes"]}
    return {"batch": b, "bytes_per_device": point["bytes_per_device"],
            "closed_form_bytes": closed, "difference_bytes": point["bytes_per_device"] - closed,
            "worst": point["worst"], **(split or {}),
            "decode_logits_f32_bytes": b // fsdp_t * dims.V * 4,  # one step's [B, V] f32
            "hbm_bytes": point["hbm_bytes"], "usable_hbm_bytes": point.get("compiler_hbm_bytes"),
            "fits": point["fits"], "refused": refused,
            "roofline_lower_bound_s": point["roofline_lower_bound_s"],
            "roofline_ms_per_token": 1e3 * point["roofline_lower_bound_s"] / (b * BATCH_STEPS),
            "compile_s": point["compile_s"], "cached": point["cached"]}


divisible = [b for b in (PLAN_BATCH_SIZES if MODE == "plan" else BATCH_SIZES) if b % fsdp_t == 0]
wanted = [plan_request(b) for b in divisible]
if MODE != "plan":
    wanted = [r for r in wanted if PREDICT or plan.is_cached(r)]
predicted = [predicted_row(plan.plan_point(r)) for r in
             tqdm(wanted, desc=f"plan {MODEL} on {TARGET}", unit="point", disable=not wanted)]
search = (plan.max_batch(plan_request(fsdp_t))
          if MODE == "plan" and PLAN_MAX_BATCH else None)
if predicted:
    show(predicted, "predicted")
if search:
    probes = [predicted_row(p) for p in search["probes"]]
    show(probes, "max_batch_probes", ["batch", "bytes_per_device", "closed_form_bytes", "fits",
                                      "roofline_ms_per_token", "cached"])
    print(f"largest batch that fits {TARGET}: {search['max_batch']}"
          + f"; {plan.describe(search)}; closed form said {closed_max}")

# %%
if predicted or search:
    points = {r["batch"]: r for r in predicted + (probes if search else [])}
    xs = sorted(points)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    ax = axes[0]
    ax.plot(xs, [points[b]["bytes_per_device"] / GiB for b in xs], "o-",
            label="compiler (memory_analysis)")
    ax.plot(xs, [closed_form_per_device(b) / GiB for b in xs], "s--",
            label="closed form: weights + KV")
    ax.axhline(target.chip.hbm_bytes / GiB, color="red", ls="--", label=f"{TARGET} HBM per chip")
    usable = [p["usable_hbm_bytes"] for p in points.values() if p.get("usable_hbm_bytes")]
    if usable:  # what the compiler said it may use when it refused a batch
        ax.axhline(min(usable) / GiB, color="red", ls=":", label="usable HBM (compiler)")
    if search:
        ax.axvline(search["max_batch"], color="green", ls=":",
                   label=f"largest that fits: {search['max_batch']}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")  # a tiny model's MiB and the HBM line's GiB on one axis
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.set_xlabel("batch size (sequences)")
    ax.set_ylabel("bytes per device (GiB, log scale)")
    ax.set_title(f"Predicted memory: {MODEL} rollout on {TARGET}, cache {CACHE}")
    ax.legend(fontsize=8)
    ax = axes[1]
    ax.plot(xs, [points[b]["roofline_ms_per_token"] for b in xs], "o-")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch size (sequences)")
    ax.set_ylabel("roofline ms per token (lower bound)")
    ax.set_title(f"Roofline per token, {BATCH_STEPS} steps on {TARGET}")
    fig.tight_layout()
    report.save_figure(fig, out, "predicted_bytes")
    plt.show()

# %%
if measured and predicted:  # predicted beside measured at the batches both have
    by_batch = {r["batch"]: r for r in batch_rows}
    show([{"batch": p["batch"], "predicted_bytes_per_device": p["bytes_per_device"],
           "measured_peak_bytes_per_device": by_batch[p["batch"]].get("peak_bytes_per_device"),
           "kv_cache_bytes_per_device": by_batch[p["batch"]].get("kv_cache_bytes_per_device"),
           "predicted_fits": p["fits"], "measured_status": by_batch[p["batch"]]["status"]}
          for p in predicted], "predicted_vs_measured")
    print(f"predictions are for {TARGET}; measurements ran on {devices[0].device_kind}")

# %% [markdown]
# ## 5 · Summary and recommendation
# Written from the numbers above: the batch with the most tokens per second, the largest that
# ran or is predicted to fit, and whether aligned batches (multiples of 64, or of 8 when the
# sweep stays below 64) beat the batch 4 larger per token (64 vs 68, 128 vs 132: a larger
# batch should cost less per token, so a higher cost is the price of leaving the aligned size).

# %%
summary_rows, paragraph = [], []
if measured:
    summary = rollout_sweep.summarize(batch_rows)
    summary_rows += [{"source": "measured", "quantity": k, "value": v}
                     for k, v in summary.items() if k != "aligned_pairs"]
    summary_rows += [{"source": "measured", "quantity": f"{p['neighbour']} vs {p['aligned']}",
                      "value": f"{p['neighbour_cost_ratio'] - 1:+.1%} per token"}
                     for p in summary["aligned_pairs"]]
    paragraph.append(rollout_sweep.recommendation(summary, batch_rows,
                                                  f"{where}, {BATCH_STEPS} steps"))
if search:
    found = search["max_batch"]
    summary_rows += [{"source": f"plan {TARGET}", "quantity": "largest batch that fits",
                      "value": found},
                     {"source": "closed form", "quantity": "largest batch (weights + KV)",
                      "value": closed_max}]
    setting = (f"{MODEL} rollouts ({PROMPT_LEN}-token prompts, {BATCH_STEPS} steps, cache "
               f"{CACHE}) on {TARGET}")
    if found == 0:
        text = f"The TPU compiler predicts that not even batch {fsdp_t} fits for {setting}. "
    else:
        at = points[found]
        text = (f"The TPU compiler predicts that batch {found} is the largest that fits for "
                f"{setting}" + (" (at least: the search reached its ceiling)"
                                if search["at_least"] else "")
                + f"; weights + KV cache alone would allow {closed_max}. At batch {found} the "
                f"compiler needs {size(at['difference_bytes'])} more than that closed form"
                + (f", {size(at['temp_bytes'])} of it temporaries. " if "temp_bytes" in at
                   else ". "))
        temps = sorted((p for p in points.values() if p.get("temp_bytes")),
                       key=lambda p: p["batch"])
        if len(temps) > 1:
            first, last = temps[0], temps[-1]
            text += (f"Temporaries are {size(first['temp_bytes'])} at batch {first['batch']} "
                     f"and {size(last['temp_bytes'])} at batch {last['batch']}: "
                     f"{last['temp_bytes'] / first['temp_bytes']:.1f}x for "
                     f"{last['batch'] / first['batch']:.0f}x the rows. ")
    fitting = sorted((p for p in points.values() if p["fits"]), key=lambda p: p["batch"])
    if fitting:
        best_roofline = min(fitting, key=lambda p: p["roofline_ms_per_token"])
        text += (f"Among the planned batches that fit, the roofline lower bound per token is "
                 f"lowest at batch {best_roofline['batch']} "
                 f"({best_roofline['roofline_ms_per_token']:.3g} ms, against "
                 f"{fitting[0]['roofline_ms_per_token']:.3g} ms at batch {fitting[0]['batch']}).")
    paragraph.append(text)
elif predicted:
    fits = [p["batch"] for p in predicted if p["fits"]]
    paragraph.append(f"Of the planned batches {[p['batch'] for p in predicted]}, "
                     f"{fits or 'none'} fit {TARGET}.")
if summary_rows:
    show(summary_rows, "summary")
print("\n\n".join(paragraph))
