"""Rollouts with tunix's Sampler, for any family, and the sampling state plan mode builds on.

One code path for the three modes: device mode runs the Sampler's own jitted
`_compiled_prefill_fn` / `_compiled_decode_fn` on real arrays; plan mode lowers exactly those
functions with abstract arguments (shared.plan.workloads.rollout: ShapeDtypeStructs carrying
the same shardings, nothing allocated). The measured sweep of notebooks 01 and 02 lives in
shared.rollout.sweep.

    mesh = make_mesh()
    model, tok = models.load("gemma3-1b", "real", mesh=mesh, is_sampling=True)
    sampler = make_sampler(model, tok, cache_size=1312)
    result = rollout(sampler, random_prompts(64, 256, V), steps=1024, mesh=mesh)

tunix versions differ in what a rollout holds. From 0.1.7 the Sampler donates its sampling
state (the KV cache) to prefill and decode, so the cache is updated in place. 0.1.5 and 0.1.6 do
not donate, so decode holds the cache twice, and their initial cache is one zeros buffer shared
by every layer (prefill's input is one layer's worth). Plan mode's `semantics="0.1.6"` compiles
the rollout that way, to compare with results measured on those versions.

Known tunix behaviours handled here: prompts are given at exactly `prompt_len` (tunix pads to a
power of two unless told); `Sampler.eos_ids` is set only inside `Sampler.__call__`, so
`make_sampler` sets it, once (the jitted functions bake it in at their first trace).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from tunix.generate import sampler as sampler_lib
from tunix.generate import utils as gen_utils

from shared import models
from shared.errors import BadInput
from shared.hardware.sharding import check_batch

SEMANTICS = ("0.1.7", "0.1.6")  # tunix's Sampler: donating (0.1.7 on) or not (0.1.5, 0.1.6)


def make_sampler(model, tokenizer, cache_size: int, *, stop_at_eos: bool = True):
    """tunix Sampler with a CacheConfig from the model config; `eos_ids` set here.

    stop_at_eos=False never stops early (EOS id -1), for timing fixed step counts on random
    weights. Set once: tunix's jitted functions bake `eos_ids` in at their first trace.
    """
    cfg = model.config
    sampler = sampler_lib.Sampler(
        model,
        tokenizer,
        sampler_lib.CacheConfig(
            cache_size=cache_size,
            num_layers=cfg.num_layers,
            num_kv_heads=cfg.num_kv_heads,
            head_dim=cfg.head_dim,
        ),
    )
    sampler.eos_ids = jnp.array([sampler.tokenizer.eos_id() if stop_at_eos else -1], jnp.int32)
    return sampler


def random_prompts(
    batch: int, prompt_len: int, vocab_size: int, seed: int = 0, low: int = 4
) -> np.ndarray:
    """[batch, prompt_len] int32 token ids in [low, vocab_size): no pad/eos/bos/unk."""
    rng = np.random.default_rng(seed)
    return rng.integers(low, vocab_size, (batch, prompt_len), dtype=np.int32)


def text_prompts(sampler, texts: Sequence[str], prompt_len: int) -> np.ndarray:
    """Tokenize like tunix (BOS first), keep the last prompt_len ids, left-pad to prompt_len."""
    rows = [np.asarray(sampler.tokenize(t))[-prompt_len:] for t in texts]
    pad = sampler.tokenizer.pad_id()
    return np.stack([gen_utils.pad_to_length(r, prompt_len, pad, left=True) for r in rows]).astype(
        np.int32
    )


def check_rollout(batch: int, prompt_len: int, steps: int, cache_size: int, mesh) -> None:
    if min(batch, prompt_len, steps) < 1:
        raise BadInput(
            f"batch, prompt length and steps must be >= 1, got {batch}, {prompt_len}, {steps}"
        )
    if prompt_len + steps > cache_size:
        raise BadInput(
            f"prompt length {prompt_len} + steps {steps} exceeds the cache size "
            f"{cache_size}; raise cache_size to at least {prompt_len + steps}"
        )
    check_batch(batch, mesh)


def state_shardings(state, mesh):
    """Shardings of a sampling state: batch over "fsdp"; KV heads over "tp" when they divide;
    scalars and the seed replicated. The real state and the abstract one get the same."""
    tp = mesh.shape["tp"]

    def spec(path, x):
        names = [getattr(k, "name", getattr(k, "key", None)) for k in path]
        top, last = names[0], names[-1]
        if top == "cache" and last in ("k", "v"):  # [B, S, K, H]
            return P("fsdp", None, "tp" if x.shape[2] % tp == 0 else None, None)
        if top in ("token_buffer", "positions", "done", "logits_buffer", "logprobs_buffer") or (
            top == "cache" and last == "end_index"
        ):
            return P("fsdp")
        return P()

    return jax.tree_util.tree_map_with_path(lambda p, x: NamedSharding(mesh, spec(p, x)), state)


def _init_fn(sampler, steps_total, temperature, top_p, top_k, seed):
    def init(prompt_ids):
        state = sampler.init_sample_state(
            prompt_ids,
            total_sampling_steps=steps_total,
            include_logits=False,
            forbidden_token_ids=None,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            seed=jax.random.PRNGKey(seed),
            beam_size=None,
        )
        # tunix keeps num_input_tokens as a *static* jnp scalar; traced, it would leak.
        return state.replace(num_input_tokens=None)

    return init


def abstract_sampling_state(sampler, batch, prompt_len, steps, temperature, top_p, top_k, seed):
    init = _init_fn(sampler, prompt_len + steps, temperature, top_p, top_k, seed)
    with models.family_of_model(sampler.transformer).traced_cache():
        return jax.eval_shape(init, jax.ShapeDtypeStruct((batch, prompt_len), jnp.int32))


def init_rollout_state(
    sampler,
    prompt_ids,
    steps: int,
    *,
    mesh,
    temperature: float = 0.0,
    top_p: float | None = None,
    top_k: int | None = None,
    seed: int = 0,
):
    """The Sampler's initial state (`init_sample_state`) built sharded by one jit: the KV cache
    is never whole on one device. Greedy by default; top_p/temperature switch to sampling."""
    batch, prompt_len = np.shape(prompt_ids)
    check_rollout(batch, prompt_len, steps, sampler.cache_config.cache_size, mesh)
    key = (batch, prompt_len, steps, temperature, top_p, top_k, seed, mesh)
    jitted = sampler.__dict__.setdefault("_shared_rollout_init", {})  # one compile per shape
    if key not in jitted:
        abs_state = abstract_sampling_state(
            sampler, batch, prompt_len, steps, temperature, top_p, top_k, seed
        )
        init = _init_fn(sampler, prompt_len + steps, temperature, top_p, top_k, seed)
        jitted[key] = jax.jit(init, out_shardings=state_shardings(abs_state, mesh))
    state = jitted[key](jnp.asarray(prompt_ids, jnp.int32))
    return state.replace(num_input_tokens=int(prompt_len))


def prefill(sampler, state):
    """tunix's jitted prefill (echo=False, as Sampler.__call__ by default): one token out."""
    return sampler._compiled_prefill_fn(
        sampler._flattened_transformer_state, state, None, echo=False
    )


def decode(sampler, state, *, mesh):
    """tunix's jitted decode loop; the state is put on `state_shardings` first (a no-op when
    prefill kept them) so it matches what plan mode compiles."""
    state = jax.device_put(state, state_shardings(state, mesh))
    return sampler._compiled_decode_fn(sampler._flattened_transformer_state, state)


def generated_tokens(sampler, state, prompt_len: int) -> np.ndarray:
    """Tokens each row actually generated: non-pad ids after the prompt, up to and including
    the first EOS (tunix's text output drops that EOS; it still cost a step)."""
    buf = np.asarray(jax.device_get(state.token_buffer))[:, prompt_len:]
    eos = np.asarray(jax.device_get(sampler.eos_ids))
    hit = np.isin(buf, eos)
    end = np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, buf.shape[1])
    keep = np.arange(buf.shape[1])[None, :] < end[:, None]
    return (keep & (buf != sampler.tokenizer.pad_id())).sum(axis=1)


@dataclasses.dataclass
class RolloutResult:
    prefill_s: float  # wall time of the prefill call, including compile on a first call
    # wall time of the decode loop: `steps` forward passes at most, the last of which tunix
    # writes past the token buffer (dropped), so a full row keeps steps - 1 decoded tokens
    decode_s: float
    tokens: np.ndarray  # [B] tokens generated per row (prefill's token included)
    state: Any  # the final sampling state (token_buffer holds prompt + generation)

    @property
    def total_tokens(self) -> int:
        return int(self.tokens.sum())

    @property
    def decode_s_per_token(self) -> float:
        """Decode seconds per generated token, batch-wide (prefill's token not counted)."""
        decoded = self.total_tokens - len(self.tokens)
        return self.decode_s / decoded if decoded > 0 else float("nan")


def rollout(sampler, prompt_ids, steps: int, *, mesh, **sampling) -> RolloutResult:
    """Init (untimed), prefill and decode timed separately with block_until_ready.

    All three run under `jax.set_mesh(mesh)`, as plan mode compiles them: tunix's activation
    constraints (shared.models.activation_sharding) apply only under a mesh in context."""
    prompt_len = np.shape(prompt_ids)[1]
    with jax.set_mesh(mesh):
        state = jax.block_until_ready(
            init_rollout_state(sampler, prompt_ids, steps, mesh=mesh, **sampling)
        )
        t0 = time.perf_counter()
        state = jax.block_until_ready(prefill(sampler, state))
        t1 = time.perf_counter()
        state = jax.block_until_ready(decode(sampler, state, mesh=mesh))
        t2 = time.perf_counter()
    return RolloutResult(t1 - t0, t2 - t1, generated_tokens(sampler, state, prompt_len), state)


def cache_bytes(state) -> int:
    """Bytes of the K and V arrays in a sampling state (real or abstract): what tunix
    allocates, every layer it keeps a cache for, at that layer's length."""
    return sum(
        int(np.prod(layer[kv].shape)) * jnp.dtype(layer[kv].dtype).itemsize
        for layer in state.cache.values()
        for kv in ("k", "v")
        if kv in layer
    )


def kv_cache_bytes(name: str, batch: int, cache_size: int, *, vocab_size: int | None = None) -> int:
    """Bytes of the KV cache tunix allocates for `batch` rows of `cache_size` slots, read from
    the abstract sampling state (exact for every family: Gemma 4's ring caches and shared
    layers included)."""
    abstract = models.abstract_model(name, vocab_size=vocab_size, is_sampling=True)
    sampler = make_sampler(abstract, models.IdsOnlyTokenizer(), cache_size)
    state = abstract_sampling_state(sampler, batch, 1, cache_size - 1, 0.0, None, None, 0)
    return cache_bytes(state)
