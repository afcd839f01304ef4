"""`rollout` and `lora-rollout`: tunix's Sampler prefill and decode, the SAME jitted functions
`shared.rollout.sampler` calls (`_compiled_prefill_fn` / `_compiled_decode_fn`), lowered with
abstract arguments carrying the shardings device mode would give them; the weights are the
resident buffer both read. A rollout's settings name what the Request's generic fields mean
here: `steps` is the completion length, `cache_size` the KV slots (prompt + completion unless
given), `tunix` the Sampler's semantics.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
from flax import nnx

from shared import models
from shared.errors import BadInput, choose
from shared.hardware import parse_target
from shared.hardware.sharding import abstract_like
from shared.lora import default_alpha
from shared.plan.compiler.cache_entries import libtpu_flags
from shared.plan.compiler.executable import Executable, Workload
from shared.rollout.sampler import (
    SEMANTICS,
    abstract_sampling_state,
    check_rollout,
    make_sampler,
    state_shardings,
)
from shared.versions import versions


@dataclasses.dataclass(frozen=True)
class RolloutSettings:
    """One rollout call: `batch` sequences of `prompt_len` prompt tokens, `completion_len`
    generated, in a KV cache of `cache_size` slots; a LoRA model when `lora_rank` is set."""

    batch: int
    prompt_len: int
    completion_len: int
    cache_size: int
    lora_rank: int | None = None
    semantics: str = "0.1.7"  # tunix's Sampler: "0.1.6" compiles it without donation


# The Request fields a rollout reads (beyond workload, model, target, mesh and fast): the CLI
# refuses the others' flags and the verdict cache keys on these alone. "lora-rollout" adds rank.
READS = ("batch", "prompt_len", "steps", "cache_size", "tunix")


def settings(request, *, lora: bool = False) -> RolloutSettings:
    """What a plan Request asks of a rollout, in the rollout's own words."""
    return RolloutSettings(
        batch=request.batch,
        prompt_len=request.prompt_len,
        completion_len=request.steps,
        cache_size=request.cache_size or request.prompt_len + request.steps,
        lora_rank=request.lora_rank if lora else None,
        semantics=request.tunix,
    )


def workload(request, mesh, *, lora: bool = False) -> Workload:
    """WORKLOADS["rollout"] (and "lora-rollout" with `lora`): prefill, then decode."""
    s = settings(request, lora=lora)
    rollout = abstract_rollout(
        request.model,
        s.batch,
        s.prompt_len,
        s.completion_len,
        s.cache_size,
        mesh=mesh,
        lora_rank=s.lora_rank,
        lora_alpha=default_alpha(s.lora_rank) if s.lora_rank else None,
        semantics=s.semantics,
        layers=request.layers,
    )
    notes = (
        []
        if s.semantics == "0.1.7"
        else [
            f"compiled as tunix {s.semantics} runs it: the Sampler does not donate its state, so "
            "decode holds the KV cache twice"
        ]
    )
    if copies_decode_tiles(request.target):
        notes.append(
            f"libtpu {TPU7X_DECODE_TILES_LIBTPU} copies the weights and the KV cache into (16,128) "
            "tiles around a tpu7x decode loop (XLA's dump); "
            f"LIBTPU_INIT_ARGS={TPU7X_DECODE_TILES_FLAG} holds them once (gemma3-1b on a "
            "tpu7x-8: 19,520 rows against 11,864; benchmarks/README.md, the atlas's tpu7x rollouts)"
        )
    return Workload(rollout.executables(s.prompt_len, s.completion_len), notes=notes)


# libtpu 0.0.42.1 lays bf16 arrays out in (16,128) tiles inside a tpu7x decode loop, where its
# arguments arrive in (8,128): decode's temporaries hold a copy of every weight and of the KV
# cache (gemma3-1b at 256 rows on an 8x1 tpu7x-8: 2.93 GiB, 35.9 MiB with this flag; a v5p, or
# a train step, copies none). The flag keeps the arguments' tiles; its effect on decode's speed
# is not measured (no tpu7x here).
TPU7X_DECODE_TILES_FLAG = "--xla_tpu_impure_use_large_2nd_minor_layout_for_x16=false"
TPU7X_DECODE_TILES_LIBTPU = "0.0.42.1"  # the version the copies were read from


def copies_decode_tiles(target: str) -> bool:
    """Whether a rollout's decode on `target` copies its weights and KV cache into other tiles,
    as this libtpu compiles it (without the flag that keeps them)."""
    return (
        parse_target(target).chip.name == "tpu7x"
        and versions()["libtpu"] == TPU7X_DECODE_TILES_LIBTPU
        and TPU7X_DECODE_TILES_FLAG not in libtpu_flags().get("libtpu_init_args", "")
    )


@dataclasses.dataclass
class AbstractRollout:
    """Abstract arguments for the Sampler's jitted prefill and decode on a mesh: the SAME
    functions `prefill` / `decode` call, with the same argument shardings."""

    sampler: Any
    params: list  # the Sampler's flattened nnx Variables holding sharded ShapeDtypeStructs
    state: Any  # initial sampling state (prefill input)
    decode_state: Any  # prefill output (decode input)
    semantics: str = "0.1.7"

    def executables(self, prompt_len: int, steps: int) -> list[Executable]:
        """Prefill and decode, the weights a resident buffer both read."""
        prefill_fn, decode_fn = self.sampler._compiled_prefill_fn, self.sampler._compiled_decode_fn
        prefill_args, note = (self.params, self.state, None), ""
        if self.semantics == "0.1.6":
            prefill_fn, decode_fn, prefill_args = _undonated(self)
            note = "tunix 0.1.6: no donation, one zeros buffer for every layer's initial cache; "
        cache = self.sampler.cache_config.cache_size
        return [
            Executable(
                "prefill",
                prefill_fn,
                prefill_args,
                {"echo": False},
                note=f"{note}prompt {prompt_len}, cache {cache}",
                resident_args={0: "weights"},
            ),
            Executable(
                "decode",
                decode_fn,
                (self.params, self.decode_state),
                repeats=steps,
                note="XLA counts the decode while-loop body once: FLOPs and bytes x steps",
                resident_args={0: "weights"},
            ),
        ]


def _undonated(ar: AbstractRollout):
    """Prefill and decode as tunix 0.1.6 ran them: the same Sampler functions, jitted without
    donation, and prefill fed one zeros layer that every layer's cache entry points to."""
    sampler = ar.sampler
    layers = list(ar.state.cache.values())
    if len({tuple((k, v.shape) for k, v in sorted(layer.items())) for layer in layers}) > 1:
        raise BadInput(
            "tunix 0.1.6 semantics apply to models whose layers share one KV-cache "
            "layout (Gemma 2/3, Llama 3, Qwen 3), not Gemma 4"
        )
    layer = layers[0]

    def prefill_shared_zeros(params, state, zeros, echo):
        cache = {name: dict(zeros) for name in ar.state.cache}
        return sampler._prefill_fn(params, state.replace(cache=cache), None, echo=echo)

    prefill_fn = jax.jit(prefill_shared_zeros, static_argnames=("echo",))
    decode_fn = jax.jit(sampler._decode_fn)
    without_cache = ar.state.replace(cache=None)
    return prefill_fn, decode_fn, (ar.params, without_cache, layer)


def abstract_rollout(
    name: str,
    batch: int,
    prompt_len: int,
    steps: int,
    cache_size: int,
    *,
    mesh,
    vocab_size: int | None = None,
    is_sampling: bool = True,
    lora_rank: int | None = None,
    lora_alpha: float | None = None,
    tokenizer=None,
    stop_at_eos: bool = True,
    temperature: float = 0.0,
    top_p: float | None = None,
    top_k: int | None = None,
    seed: int = 0,
    semantics: str = "0.1.7",
    layers: int | None = None,
) -> AbstractRollout:
    """Abstract prefill/decode arguments, built with nnx.eval_shape / jax.eval_shape only.

    The Sampler is built on the abstract model (its graphdef and variable list are all it
    needs). `tokenizer` only supplies pad/eos ids (Gemma's 0/1 by default). The default layout
    is tunix's sampling one (weights not FSDP-sharded: each fsdp slice generates its share).
    """
    choose("tunix semantics", semantics, SEMANTICS)
    check_rollout(batch, prompt_len, steps, cache_size, mesh)
    abstract = models.abstract_model(
        name,
        vocab_size=vocab_size,
        is_sampling=is_sampling,
        lora_rank=lora_rank,
        lora_alpha=lora_alpha,
        layers=layers,
    )
    models.check_divisible(abstract, mesh, name)
    sampler = make_sampler(
        abstract, tokenizer or models.IdsOnlyTokenizer(), cache_size, stop_at_eos=stop_at_eos
    )
    named = jax.tree.leaves(nnx.get_named_sharding(sampler._transformer_state, mesh))
    params = [
        v.replace(jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=s))
        for v, s in zip(sampler._flattened_transformer_state, named, strict=True)
    ]
    state = abstract_sampling_state(
        sampler, batch, prompt_len, steps, temperature, top_p, top_k, seed
    )
    state = abstract_like(state, state_shardings(state, mesh))
    state = state.replace(num_input_tokens=int(prompt_len))
    # The jitted prefill itself under the mesh, as a verdict lowers it: jax keeps its trace for
    # these arguments, so lowering it does not trace the model again. gemma3-1b rollouts on a
    # v5e-1 (8 to 426 rows): prefill lowered in 0.14-0.27 s after this, 0.5-0.6 s before, the
    # build as long; one core of a search's every round, while the other waits for it.
    prefill = functools.partial(sampler._compiled_prefill_fn, echo=False)
    with jax.set_mesh(mesh):  # as verdict lowers it: the trace is kept per mesh context
        out = jax.eval_shape(prefill, params, state, None)
    decode_state = abstract_like(out, state_shardings(out, mesh))
    return AbstractRollout(sampler, params, state, decode_state, semantics)
