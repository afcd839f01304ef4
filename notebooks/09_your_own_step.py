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
# # 09 · Will my own jitted train step fit on a v5e-8 and on one H100, and at what batch?
#
# ## Takeaway
# You can know before renting either. `plan.fits` compiles your step as you wrote it, with
# libtpu for a v5e-8 and with XLA's GPU compiler for an H100, here on the CPU, and answers in
# bytes per device against the HBM each allows; `plan.largest_batch` finds the largest batch
# with the same compiles, each answer an exact verdict. A small flax nnx language model with an
# optax AdamW step, written here, fits both at 64 sequences of 512 tokens with a wide margin.
# Its batch is bounded by the logits ([B, T, V] in f32, and their gradient), not the weights:
# the v5e-8 splits the batch over its 8 chips, each holding an eighth. Bring the step, its
# arguments as `jax.ShapeDtypeStruct`s and their `PartitionSpec`s; an array is refused in a line.

# %% [markdown]
# ## How this notebook answers it
# Presets (Gemma, Llama, Qwen with tunix) get their verdicts from `python -m shared.plan`; a
# step that is no preset gets the same verdict and search from `shared.plan.workloads.own`:
# the reader's function and abstract arguments become a workload like the presets', compiled
# for the target's abstract devices (no TPU or GPU needed), with bytes per device read from
# the compiler's `memory_analysis()`. These verdicts are never cached, since the plan cache
# cannot see your code. `local` (the default) plans both targets, searches the batch on
# `SEARCH_TARGET` and runs the step for real on this machine for `STEPS` steps (on a CPU, a
# small batch); `plan` only plans; `device` plans, then runs the step at `BATCH` on the
# attached TPU or GPU and prints its measured peak bytes beside the plan's for that device.

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
TARGETS = ["v5e-8", "h100-1"]  # where the step is planned: TPU slices and GPU machines
SEARCH_TARGET = "h100-1"  # where the largest batch is searched (None: no search)
MODEL = "mlp-lm"  # this notebook's own model (section 1), not a preset
BATCH = 64  # B: sequences a step, the batch plan.fits asks about and device mode runs
SEQ = 512  # T: tokens a sequence
MULTIPLE_OF = 8  # the search's step: batches as people pick them
STEPS = 10  # real train steps (local: this machine, device: the accelerator)
RUN_BATCH = None  # sequences a real step (None: 4 locally, BATCH on a device)
LR = 3e-3
RESULTS_DIR = "results/09_your_own_step"
SEED = 0

# %%
import shutil

from shared import report

MODE = report.use_mode(MODE)  # before jax: plan mode compiles every target on the CPU
if MODE == "device" and shutil.which("nvidia-smi"):  # a GPU's peak without autotuning scratch
    from shared.hardware.measure import without_autotuning  # imports jax, starts no backend

    os.environ.update(without_autotuning(dict(os.environ)))

import functools
import time

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from tqdm.auto import tqdm

from shared import hardware, plan
from shared.errors import BadInput
from shared.hardware import measure
from shared.hardware.sharding import make_mesh
from shared.plan.cli.point_view import print_point
from shared.plan.search import figure, view
from shared.report import ledger

RUN_BATCH = report.by_mode(MODE, RUN_BATCH, 4, BATCH)
out = report.results_dir(RESULTS_DIR)
print(f"{MODE} mode on {jax.default_backend()}: plans for {', '.join(TARGETS)}; "
      + (f"the batch searched on {SEARCH_TARGET}" if SEARCH_TARGET else "no search")
      + ("" if MODE == "plan" else f"; a real run at batch {RUN_BATCH}"))

# %% [markdown]
# ## 1 · Your model and your step
# Any flax nnx model and optax step will do; this one is small so that every compile below
# takes seconds. Tokens [B, T] are embedded to D, pass L residual MLP blocks (D to F and
# back), and an unembedding gives logits [B, T, V]; there is no attention, so each token
# predicts the next from itself alone. The step is one AdamW update on next-token
# cross-entropy, jitted, with the weights and optimizer state donated (the outputs reuse their
# buffers, which the verdict counts as aliased). What the plan needs beside the function is
# its arguments without their values: `nnx.eval_shape` and `jax.eval_shape` give the weights
# and AdamW state as `jax.ShapeDtypeStruct`s, nothing allocated, and `make_args` adds the
# tokens at any batch, with one `PartitionSpec` per argument over the plan's mesh axes
# `fsdp` and `tp`: the weights and state on every device (None), the batch split over all of
# them, whichever axis holds them.

# %%
V, D, F, L = 16384, 256, 1024, 2  # vocabulary, width, MLP hidden width, blocks


class Block(nnx.Module):
    """x + MLP(LayerNorm(x)): [B, T, D] through an F-wide hidden layer and back."""

    def __init__(self, rngs: nnx.Rngs):
        self.norm = nnx.LayerNorm(D, rngs=rngs)
        self.up = nnx.Linear(D, F, rngs=rngs)
        self.down = nnx.Linear(F, D, rngs=rngs)

    def __call__(self, x):
        return x + self.down(jax.nn.gelu(self.up(self.norm(x))))


class MlpLM(nnx.Module):
    """Tokens [B, T] to logits [B, T, V]: an embedding, L blocks, an unembedding."""

    def __init__(self, rngs: nnx.Rngs):
        self.embed = nnx.Embed(V, D, rngs=rngs)
        self.blocks = nnx.List([Block(rngs) for _ in range(L)])
        self.norm = nnx.LayerNorm(D, rngs=rngs)
        self.out = nnx.Linear(D, V, rngs=rngs)

    def __call__(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.out(self.norm(x))


graph, params = nnx.split(nnx.eval_shape(lambda: MlpLM(nnx.Rngs(SEED))))
tx = optax.adamw(LR)
opt_state = jax.eval_shape(tx.init, params)


@functools.partial(jax.jit, donate_argnums=(0, 1))
def train_step(params, opt_state, tokens):
    def loss_fn(p):
        logits = nnx.merge(graph, p)(tokens[:, :-1])  # [B, T-1, V], f32
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def make_args(batch: int):
    """(the step's abstract arguments at `batch` sequences, their PartitionSpecs)."""
    tokens = jax.ShapeDtypeStruct((batch, SEQ), jnp.int32)
    return (params, opt_state, tokens), (None, None, P(("fsdp", "tp")))


n_params = sum(x.size for x in jax.tree.leaves(params))
print(f"{MODEL}: {n_params / 1e6:.2f}M parameters, f32; AdamW keeps two moments of each")

# %% [markdown]
# ## 2 · Will it fit?
# One deviceless compile a target, printed as the command line prints a preset's verdict:
# bytes per device (what the run keeps resident, plus the worst executable's arguments,
# outputs and temporaries, less what is aliased) against the HBM the compiler allows, the
# largest buffers with the operations that made them, and a roofline where the compiler counts
# FLOPs. libtpu does; a deviceless GPU compile counts none, and the plan knows no weight
# matmuls of your step to bound it with, so the H100's verdict says it has no roofline.
# The first line names the request `plan.fits` registered; its batch is the device count, a
# placeholder that picks the mesh (the tokens' leading dimension is the real batch). On the
# v5e-8 that lays the 8 chips out as 8x1 (all on fsdp), and `P(("fsdp", "tp"))` splits the
# batch over every chip: a data-parallel program, the weights and AdamW state whole on each.

# %%
verdicts = {}
for target in TARGETS:
    args, specs = make_args(BATCH)
    verdicts[target] = plan.fits(train_step, args, target=target, specs=specs, name="train_step")
    print_point(verdicts[target])
    print()
columns = ["target", "fits", "bytes_per_device", "hbm_bytes", "margin_bytes", "devices"]
report.show([{**v, "batch": BATCH} for v in verdicts.values()], out, "verdicts",
            ["batch", *columns])

# %% [markdown]
# ## 3 · A bad input, in one line
# The plan never allocates your arrays, so it takes shapes, not values. Hand it a concrete
# array (here the tokens) and it says which argument, and what to pass instead, before
# anything compiles; a spec naming an axis the plan's mesh lacks, or a step that does not
# trace under `jax.jit`, is refused the same way.

# %%
try:
    concrete = (params, opt_state, jnp.zeros((BATCH, SEQ), jnp.int32))
    plan.fits(train_step, concrete, target=TARGETS[0], specs=make_args(BATCH)[1])
except BadInput as err:
    print(f"BadInput: {err}")

# %% [markdown]
# ## 4 · The largest batch
# The presets' search (docs/search.md) on `SEARCH_TARGET`, one H100 by default, since XLA's GPU
# compiler answers in seconds near the boundary, where libtpu, working to make the program
# fit, takes several times longer (pass `SEARCH_TARGET="v5e-8"` for the Kaggle slice). It
# locates the boundary from cheap probes, whose bytes grow close to linearly with the batch,
# then confirms it with exact compiles one step of `MULTIPLE_OF` apart, and checks that two
# steps above the answer fail too, since the compiler's bytes need not be monotone in the
# batch. The answer is an exact compile's verdict, never a line's. The figure draws every
# point it compiled, hollow where it only located, filled where it was exact, against the HBM
# the compiler allows; the inset is the boundary, close up. The `W ... hlo_rematerialization`
# lines are XLA's GPU compiler recomputing activations to fit the memory it was given, and
# where it cannot, the verdict says the step does not fit. That recomputing is also why the
# bytes near the boundary grow more slowly than the located line says: the line drawn through
# small batches aims low there, and the exact compiles climb from it to the answer.

# %%
search = None
if SEARCH_TARGET:
    search = plan.largest_batch(make_args, train_step, target=SEARCH_TARGET,
                                multiple_of=MULTIPLE_OF, name="train_step")
    print(plan.describe(search))
    report.show(view.probe_rows(search), out, "search_probes")
    fig, ax = plt.subplots(figsize=(9, 5.5))
    figure.draw(figure.from_result(search), ax)
    report.save_figure(fig, out, "largest_batch")
    plt.show()

# %% [markdown]
# ## 5 · Run it for real
# The same jitted step, now with values: the weights initialised on this machine's devices,
# and each step a fresh batch of counting sequences (each token one more than the last, modulo
# V), which a model without attention can learn, so the loss falls within a few steps. The
# mesh is the plan's (fsdp 1, tp every device), the weights and state replicated on it and the
# batch split over it, as the specs said. Locally this is a CPU run at a small batch; in device
# mode it runs `BATCH` on the accelerator, and the peak bytes the runtime measured per device
# go beside the plan's verdict for this device (and, as one row, into `results/ledger.csv`).
# On a GPU this notebook turns XLA's autotuner off first, so that the peak holds the program
# and not the autotuner's scratch.

# %%
def batch_of(key) -> jax.Array:
    starts = jax.random.randint(key, (RUN_BATCH, 1), 0, V)
    return (starts + jnp.arange(SEQ)) % V


def run(steps: int) -> dict:
    mesh = make_mesh((1, jax.device_count()))  # the plan's axes, fsdp and tp
    replicated, split = NamedSharding(mesh, P()), NamedSharding(mesh, P(("fsdp", "tp")))
    state = jax.device_put(nnx.split(MlpLM(nnx.Rngs(SEED)))[1], replicated)
    moments = jax.jit(tx.init, out_shardings=replicated)(state)
    keys = jax.random.split(jax.random.key(SEED), steps)
    rows = []
    for step, key in enumerate(tqdm(keys, desc=f"train_step at batch {RUN_BATCH}"), 1):
        tokens = jax.device_put(batch_of(key), split)
        start = time.perf_counter()
        state, moments, loss = train_step(state, moments, tokens)
        rows.append({"step": step, "loss": float(loss), "s": time.perf_counter() - start})
    return rows


rows, oom = measure.run_or_oom(run, STEPS) if MODE != "plan" else (None, None)
if rows:
    report.show(rows, out, "real_run")
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([r["step"] for r in rows], [r["loss"] for r in rows], marker="o")
    ax.set(xlabel="step", ylabel="training loss (nats/token)",
           title=f"{MODEL} on {jax.devices()[0].device_kind}, {RUN_BATCH}x{SEQ} tokens a step")
    report.save_figure(fig, out, "real_run")
    plt.show()
    assert rows[-1]["loss"] < rows[0]["loss"], "the loss did not fall: the step is not learning"

# %% [markdown]
# Measured beside planned: on a TPU or GPU, the runtime's peak bytes per device over the whole
# run and the plan's bytes per device for this device at the same batch, compiled now; on a
# CPU the runtime keeps no such count, so there is nothing to compare.

# %%
here = hardware.current_target_name() if MODE == "device" else None
if here:
    args, specs = make_args(RUN_BATCH)
    planned = plan.fits(train_step, args, target=here, specs=specs, name="train_step")
    seconds = float(np.median([r["s"] for r in rows[1:]])) if rows and len(rows) > 1 else None
    measured = ledger.row("09_your_own_step", workload="own:train_step", model=MODEL,
                          batch=RUN_BATCH, shape=f"T={SEQ}", status="oom" if oom else "ok",
                          peak_bytes=measure.peak_bytes_per_device(), seconds=seconds,
                          prediction=planned)
    ledger.append([measured])
    report.show([measured], out, "device_vs_plan", ["device", "batch", "measured_status",
                "measured_peak_bytes_per_device", "predicted_bytes_per_device", "measured_s"])
else:
    print(f"{MODE} mode on {jax.default_backend()}: no device peak to set beside the plan")

# %% [markdown]
# ## Evidence
# Every number above is this run's: the verdicts and the search compile your step with the
# versions printed below (and in each verdict's last lines), none read from a cache or a
# committed file. The same questions from a shell, for a preset instead of your own step:
#
#     tpu-budget-lab fit sft --model gemma3-1b --target h100-1 --batch 8
#     tpu-budget-lab max-batch sft --model gemma3-1b --target v5e-8

# %%
report.evidence()
