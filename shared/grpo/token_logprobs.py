"""Per-token log-probabilities without [B, T, V] logits: GRPO's log-prob phases, chunked.

tunix 0.1.7's `rl.common.compute_per_token_logps` runs the model to its full logits [B, P+C, V],
keeps the completion's [B, C, V], divides by the temperature and takes an f32 log-softmax: at
Gemma's V = 262,144 that is the largest buffer of the reference and old-policy log-prob phases
(4.4 GiB per v5e chip at one 1024-token sequence per chip). `compute_per_token_logps` here has
tunix's signature and semantics but stops at the final hidden states (`models.hidden_states`)
and runs a forward-only log-sum-exp over vocabulary chunks with shared.logits.tiling, so no
more than a few [B, c, Vc] blocks exist at once.

    logps = compute_per_token_logps(graphdef, state, prompt_tokens, completion_tokens,
                                    pad_id=0, eos_id=1, temperature=0.9)   # [B, C] f32
    with chunked_logps():   # tunix's own workers call it: reference and old-policy phases
        learner.train(batches)

Rounding follows tunix: each logit is rounded to the head's dtype (the result type of hidden
states and table, as the model's own matmul output) and divided by the temperature in that
dtype, then the log-sum-exp runs in f32. The final soft-cap (Gemma 2 and 4) is computed in f32
and rounded once: tunix's Gemma 2 rounds its three steps to bf16 (up to ~0.06 apart at a cap of
30), Gemma 4 caps in f32 after one rounding (the same as here). Forward only: the policy
update keeps tunix's function (it needs gradients and the logits).
"""

from __future__ import annotations

import contextlib
import functools

import jax
import jax.numpy as jnp
from flax import nnx
from jax import lax
from tunix.rl import common

from shared import models
from shared.errors import choose
from shared.logits.tiling import (
    DEFAULT_VOCAB_CHUNK_LOSS,
    check_inputs,
    chunked_logsumexp,
    per_platform,
    seq_chunk,
    vocab_chunk,
)

IMPLEMENTATIONS = ("tunix", "chunked")  # the two log-prob functions plan mode compiles
TUNIX_LOGPS = common.compute_per_token_logps  # tunix's own, whatever a context swaps in


def chunked_token_logps(
    hidden,
    table,
    targets,
    *,
    temperature: float = 1.0,
    softcap: float | None = None,
    chunk_size: int | None = None,
    vocab_chunk_size: int | None = None,
) -> jax.Array:
    """log softmax(capped(hidden @ table.T) / temperature)[targets], f32 [B, T], chunked.

    hidden [B, T, D] (final-normed), table [V, D] (the LM head), targets [B, T] ids in [0, V).
    Blocks of [B, chunk_size, vocab_chunk_size] (defaults as shared.logits.cross_entropy's);
    the running max, sum and target logit are f32 [B, T]."""
    B, T, _, V = check_inputs(hidden, table)
    C = seq_chunk(chunk_size, B, T)
    Vc = vocab_chunk(vocab_chunk_size, V, 1, DEFAULT_VOCAB_CHUNK_LOSS)
    scale = None if temperature in (0.0, 1.0) else float(temperature)  # as tunix skips both
    fn = functools.partial(_logps_impl, C=C, Vc=Vc, softcap=softcap, temperature=scale)
    return per_platform(fn, hidden, table, targets)


def _logps_impl(hidden, table, targets, *, C, Vc, softcap, temperature, bits):
    T = hidden.shape[1]
    dtype = jnp.result_type(hidden.dtype, table.dtype)  # the head matmul's output dtype

    def block_logits(h, e):  # tunix's rounding: the head's dtype, then the temperature
        z = jnp.einsum("bcd,vd->bcv", h, e, preferred_element_type=jnp.float32).astype(dtype)
        z = models.capped(z, softcap)
        return (z if temperature is None else z / temperature).astype(jnp.float32)

    m, s, zt = chunked_logsumexp(
        hidden, table, targets, C=C, Vc=Vc, bits=bits, block_logits=block_logits
    )
    return (zt - m - jnp.log(s))[:, :T]


@functools.partial(
    jax.jit, static_argnames=("pad_id", "eos_id", "stop_gradient", "return_logits", "temperature")
)
def compute_per_token_logps(
    graphdef,
    state,
    prompt_tokens,
    completion_tokens,
    pad_id: int,
    eos_id: int,
    images=None,
    stop_gradient: bool = True,
    return_logits: bool = False,
    segment_ids=None,
    segment_positions=None,
    temperature: float = 1.0,
):
    """tunix's `rl.common.compute_per_token_logps`, chunked: [B, C] f32 log-probabilities of
    the completion tokens under the model (graphdef, state), over prompt + completion with pad
    tokens masked and positions counted over real tokens (what tunix's `process_ids` builds).
    Forward only: no logits returned, no images, no packed segments, and no gradient."""
    del eos_id  # tunix takes it and does not use it either
    if (
        return_logits
        or not stop_gradient
        or images is not None
        or segment_ids is not None
        or segment_positions is not None
    ):
        raise ValueError(
            "chunked log-probs are forward-only, without images or packing; "
            "use tunix.rl.common.compute_per_token_logps for those"
        )
    model = nnx.merge(graphdef, state)
    tokens = jnp.concatenate([prompt_tokens, completion_tokens], axis=1)
    c = completion_tokens.shape[1]
    hidden = models.hidden_states(model, tokens, pad_id)[:, -c - 1 : -1]
    logps = chunked_token_logps(
        hidden,
        models.head_table(model),
        tokens[:, -c:],
        temperature=temperature,
        softcap=models.final_softcap(model),
    )
    return lax.stop_gradient(logps)


@contextlib.contextmanager
def chunked_logps():
    """tunix's workers (the reference's InferenceWorker, the rollout's old-policy log-probs)
    call `common.compute_per_token_logps` through the module: within this context those calls
    run the chunked function. Calls that want logits or gradients (the GRPO loss inside the
    policy update) still go to tunix's. Restored on exit, also after an error."""
    original = common.compute_per_token_logps  # tunix's, or an enclosing swap's

    def dispatch(
        graphdef,
        state,
        prompt_tokens,
        completion_tokens,
        pad_id,
        eos_id,
        images=None,
        stop_gradient=True,
        return_logits=False,
        segment_ids=None,
        segment_positions=None,
        temperature=1.0,
    ):
        args = (graphdef, state, prompt_tokens, completion_tokens)
        kwargs = {
            "pad_id": pad_id,
            "eos_id": eos_id,
            "images": images,
            "stop_gradient": stop_gradient,
            "return_logits": return_logits,
            "segment_ids": segment_ids,
            "segment_positions": segment_positions,
            "temperature": temperature,
        }
        forward_only = (
            stop_gradient
            and not return_logits
            and images is None
            and segment_ids is None
            and segment_positions is None
        )
        return (compute_per_token_logps if forward_only else original)(*args, **kwargs)

    common.compute_per_token_logps = dispatch
    try:
        yield
    finally:
        common.compute_per_token_logps = original


def logps_function(implementation: str):
    """The jitted log-prob function plan mode compiles for an implementation name."""
    choose("log-prob implementation", implementation, IMPLEMENTATIONS)
    return TUNIX_LOGPS if implementation == "tunix" else compute_per_token_logps
