"""Teacher-forced passes for any family: hidden states, the LM head, full or top-k logits.

The chunked top-k and loss of shared.logits take over from the final hidden states, so the
[B, T, V] logits never exist. tunix's models return only logits (Gemma 3 can sow its hidden
states, the others cannot), and qwix's LoRA intercepts the model's own `__call__` (calling the
layers one by one would skip the adapters). So the hidden states are read by standing a tap in
for the final norm for one call of the whole model: every family ends with
`x = self.final_norm(x)` before its head. The [B, T, V] logits that call also computes are
unused, and XLA removes them under jit.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx
from tunix.sft import utils as sft_utils

from shared.hardware.sharding import batch_sharding, on_mesh
from shared.logits import top_k_logits
from shared.models.core import FAMILIES, abstract_model, check_divisible
from shared.models.family import Family
from shared.models.weights import PAD_ID

LOGITS_MODES = ("full", "topk")


def family_of_model(model) -> Family:
    """The adapter of a live tunix model (by its class; LoRA models keep their class)."""
    for family in FAMILIES.values():
        if isinstance(model, family.model_class):
            return family
    raise TypeError(f"{type(model).__name__} is not a tunix model of a known family")


def _inputs(tokens, pad_id):
    """Positions and causal attention mask for a teacher-forced pass, built the way tunix's RL
    code builds them for every family (padding masked, positions counted over real tokens)."""
    mask = tokens != pad_id
    return sft_utils.build_positions_from_mask(mask), sft_utils.make_causal_attn_mask(mask)


def forward_logits(model, tokens, pad_id: int = PAD_ID):
    """The model's own [B, T, V] logits of a teacher-forced pass (inside a trace or not)."""
    positions, attention = _inputs(tokens, pad_id)
    logits, _ = model(tokens, positions, None, attention)
    return logits


def hidden_states(model, tokens, pad_id: int = PAD_ID) -> jax.Array:
    """Final-normed hidden states [B, T, D] of a teacher-forced pass over tokens [B, T]."""
    sink = []
    norm = model.final_norm

    class Tap(nnx.Module):
        """The final norm, keeping its output for this one call."""

        def __init__(self):
            self.norm = norm

        def __call__(self, x):
            sink.append(self.norm(x))
            return sink[-1]

    model.final_norm = Tap()
    try:
        forward_logits(model, tokens, pad_id)
    finally:
        model.final_norm = norm
    return sink[-1]


def head_table(model) -> jax.Array:
    """The LM head as a [V, D] table (shared.logits' layout): the tied embedding, or the
    transposed [D, V] lm_head of an untied model."""
    if family_of_model(model).tied(model.config):
        return model.embedder.input_embedding[...]
    return model.lm_head.w[...].T


def final_softcap(model) -> float | None:
    """The model's final logit soft-cap (Gemma 2 and 4: 30), applied after the head."""
    return family_of_model(model).final_softcap(model.config)


def capped(values, cap: float | None):
    """cap·tanh(values/cap): soft-capping is monotonic, so top-k indices are unchanged."""
    return (
        values
        if cap is None
        else (cap * jnp.tanh(values.astype(jnp.float32) / cap)).astype(values.dtype)
    )


@functools.partial(jax.jit, static_argnames=("graph", "mode", "k", "pad_id"))
def teacher_forced_top_k(graph, state, tokens, *, mode: str, k: int, pad_id: int = PAD_ID):
    """Top-k logits (values, indices) [B, T, k] of a teacher-forced pass over tokens [B, T].

    mode 'full' materialises the [B, T, V] logits and takes lax.top_k, as tunix's forward
    does; 'topk' stops at the hidden states and uses shared.logits.top_k_logits, chunked.
    Notebook 03 runs this function; plan mode's `forward` workload compiles it.
    """
    model = nnx.merge(graph.graphdef, state)
    if mode == "full":
        return jax.lax.top_k(forward_logits(model, tokens, pad_id), k)
    values, indices = top_k_logits(hidden_states(model, tokens, pad_id), head_table(model), k)
    return capped(values, final_softcap(model)), indices


def abstract_forward_args(
    name: str, batch: int, seq_len: int, *, mesh, vocab_size: int | None = None
) -> tuple[tuple, dict]:
    """(args, kwargs) for `teacher_forced_top_k.lower` minus mode/k: graph, state, tokens."""
    abstract = abstract_model(name, vocab_size=vocab_size)
    check_divisible(abstract, mesh, name)
    graphdef, state = nnx.split(abstract)
    tokens = jax.ShapeDtypeStruct((batch, seq_len), jnp.int32, sharding=batch_sharding(mesh))
    return (StaticGraph(graphdef), on_mesh(state, mesh), tokens), {}


class StaticGraph:
    """An nnx GraphDef usable as a jit static argument.

    tunix's ModelConfigs are non-frozen dataclasses, so a GraphDef (which holds one) is
    unhashable; this hashes on the leaf count and compares the GraphDefs themselves.
    """

    __slots__ = ("graphdef",)

    def __init__(self, graphdef):
        self.graphdef = graphdef

    def __hash__(self):
        return hash(getattr(self.graphdef, "num_leaves", 0))

    def __eq__(self, other):
        return isinstance(other, StaticGraph) and (
            self.graphdef is other.graphdef or self.graphdef == other.graphdef
        )


@functools.partial(jax.jit, static_argnames=("graph", "pad_id"))
def _logits_jit(graph, state, tokens, pad_id):
    return forward_logits(nnx.merge(graph.graphdef, state), tokens, pad_id)


def full_logits(model, tokens, pad_id: int = PAD_ID) -> jax.Array:
    """Teacher-forced logits [B, T, V] for int tokens [B, T] (what tunix's forward returns)."""
    graphdef, state = nnx.split(model)
    return _logits_jit(StaticGraph(graphdef), state, jnp.asarray(tokens, jnp.int32), pad_id)
