"""Mixtures of experts rolled out beside the dense model of their family (notebook 01).

`PAIRS` holds each family's tiny dense config and its tiny mixture of experts: tunix's Qwen 3
MoE layer (8 experts, 2 per token) and Gemma 4's MoERagged beside its dense MLP (the same),
the architectures of `PRESETS` scaled down. `rollouts` runs tunix's Sampler on each with
`sweep.measure_point`, one small batch, and puts beside its tokens/s:

- `compiled_bytes_per_device`: the compiler's bytes for the rollout's worst executable
  (prefill or decode: arguments + outputs + temporaries - aliased) on this backend, what plan
  mode reads for a TPU. It is the model's own on every backend, CPU included;
- `peak_bytes_per_device`: the device's measured peak, None on a CPU and None where it did not
  rise above the process's earlier high-water mark (an earlier, larger point's peak);
- `tokens_per_s_vs_dense`: the mixture's tokens/s over its family's dense model's.

Where each mixture computes: on a CPU tunix's Qwen 3 layer takes its dense fallback (every
token through all 8 experts, one einsum each) and Gemma 4 `jax.lax.ragged_dot` (the routed
experts only); on a TPU Qwen 3 runs megablox, a Pallas TPU kernel, which no GPU runs
(`does_not_run`: that model's row says so instead of failing the run).
"""

from __future__ import annotations

import gc

import jax

from shared import models
from shared.hardware import measure
from shared.models import expert_routing
from shared.plan.compiler.compiled import compiled_memory
from shared.rollout.sampler import (
    init_rollout_state,
    make_sampler,
    prefill,
    random_prompts,
    state_shardings,
)
from shared.rollout.sweep import measure_point

PAIRS = (("qwen3-tiny", "qwen3-moe-tiny"), ("gemma4-tiny", "gemma4-moe-tiny"))
PRESETS = ("qwen3-30b-a3b", "gemma4-26b-a4b")  # the real mixtures the tiny ones scale down
ROWS_PER_DEVICE = 8  # one small batch: rows per data-parallel device


def experts(cfg) -> str:
    """A config's experts in words: '8, 2 per token', or 'dense'."""
    if not getattr(cfg, "num_experts", None):
        return "dense"
    return f"{cfg.num_experts}, {cfg.num_experts_per_tok} per token"


def does_not_run(name: str, mesh) -> str | None:
    """Why tunix cannot run `name` on this mesh's platform, or None: a Qwen 3 mixture runs
    megablox under a mesh (shared.models.expert_routing), a TPU kernel no GPU lowers."""
    platform = mesh.devices.flat[0].platform
    if platform in ("tpu", "cpu") or not expert_routing.runs_megablox(models.model_config(name)):
        return None
    return (
        f"tunix's {name} layer runs megablox (a Pallas TPU kernel) on a mesh: not on a {platform}"
    )


def compiled_bytes(sampler, mesh, prompts, steps: int) -> int:
    """Per-device bytes of the rollout's worst executable (prefill or decode) as the compiler
    laid it out for this backend: the same jitted functions `rollout` calls, lowered with the
    same arrays (their compiled programs are jax's cached ones)."""
    params = sampler._flattened_transformer_state
    with jax.set_mesh(mesh):
        state = init_rollout_state(sampler, prompts, steps, mesh=mesh)
        first = sampler._compiled_prefill_fn.lower(params, state, None, echo=False).compile()
        state = prefill(sampler, state)  # prefill donates the state it read
        state = jax.device_put(state, state_shardings(state, mesh))
        loop = sampler._compiled_decode_fn.lower(params, state).compile()
    return max(compiled_memory(c)["total_bytes"] for c in (first, loop))


def rollout_row(name: str, model, tok, mesh, **point) -> dict:
    """One model's point (measure_point's row for `point`: batch, prompt_len, steps, trials,
    seed) with its experts, weight bytes and compiled bytes, and its measured peak only where
    this point raised the process's peak."""
    before = measure.peak_bytes_per_device()
    sampler = make_sampler(model, tok, point["prompt_len"] + point["steps"], stop_at_eos=False)
    vocab = models.dims(name, model.config).V
    row = measure_point(sampler, mesh, vocab, **point)
    if row["status"] == "ok":
        prompts = random_prompts(point["batch"], point["prompt_len"], vocab, seed=point["seed"])
        row["compiled_bytes_per_device"] = compiled_bytes(sampler, mesh, prompts, point["steps"])
    peak = row.get("peak_bytes_per_device")
    if peak is not None and before is not None and peak <= before:
        row["peak_bytes_per_device"] = None  # an earlier point's peak, not this model's
    head = {"model": name, "experts": experts(model.config)}
    return {**head, "weights_bytes": models.param_bytes(model), **row}


def rollouts(
    mesh,
    *,
    prompt_len: int,
    steps: int,
    trials: int,
    seed: int = 0,
    pairs=PAIRS,
    load=None,
    rows_per_device: int = ROWS_PER_DEVICE,
) -> list[dict]:
    """Each pair's dense model then its mixture, one small batch each (`rows_per_device` on
    every data-parallel device), one model in memory at a time; a mixture's row gets its
    tokens/s over the dense model's. `load(name) -> (model, tokenizer)` defaults to
    models.load in the sampling layout, random weights (tiny configs have no others)."""
    if load is None:

        def load(name):
            return models.load(name, "dummy", mesh=mesh, seed=seed, is_sampling=True)

    point = dict(batch=rows_per_device * mesh.shape["fsdp"], prompt_len=prompt_len, steps=steps)
    point.update(trials=trials, seed=seed)
    rows = []
    for dense, moe in pairs:
        for name in (dense, moe):
            if why := does_not_run(name, mesh):
                rows.append({"model": name, "status": "does not run", "error": why})
                continue
            model, tok = load(name)
            rows.append(rollout_row(name, model, tok, mesh, **point))
            del model, tok
            gc.collect()
        ran = {r["model"]: r for r in rows if r["status"] == "ok"}
        if dense in ran and moe in ran:
            ran[moe]["tokens_per_s_vs_dense"] = (
                ran[moe]["tokens_per_s"] / ran[dense]["tokens_per_s"]
            )
    return rows


COLUMNS = [
    "model",
    "experts",
    "status",
    "batch",
    "steps",
    "tokens_per_s",
    "tokens_per_s_vs_dense",
    "decode_ms_per_token",
    "weights_bytes",
    "kv_cache_bytes_per_device",
    "compiled_bytes_per_device",
    "peak_bytes_per_device",
    "error",
]
