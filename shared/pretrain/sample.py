"""Sampling text from the ~130M model: a check that a trained model continues a prompt, not a
serving path (no KV cache: each step re-runs the model on a fixed-length buffer)."""

import jax
import jax.numpy as jnp
from flax import nnx

from shared.errors import BadInput
from shared.pretrain.model import Transformer


def generate(
    model: Transformer,
    prompt_tokens,
    steps: int,
    temperature: float = 1.0,
    key: jax.Array | None = None,
    valid_vocab: int | None = None,
) -> jax.Array:
    """Append `steps` sampled tokens to prompt_tokens [B,P] -> [B,P+steps] (no KV cache).

    temperature 0 is greedy. Each step re-runs the model on a fixed-length buffer (P+steps
    rounded up to 128, so the Pallas kernels' tiles fit), so it compiles once. `valid_vocab`
    masks the padding ids at and above the tokenizer's real vocabulary size.
    """
    prompt = jnp.asarray(prompt_tokens, jnp.int32)
    if prompt.ndim == 1:
        prompt = prompt[None]
    B, P = prompt.shape
    if P < 1 or steps < 0:
        raise BadInput(f"generate needs a non-empty prompt and steps >= 0, got P={P}, {steps=}")
    if temperature < 0:
        raise BadInput(f"temperature must be >= 0, got {temperature}")
    key = jax.random.key(0) if key is None else key
    length = -(-(P + steps) // 128) * 128
    buf = jnp.zeros((B, length), jnp.int32).at[:, :P].set(prompt)
    graphdef, state = nnx.split(model)

    @jax.jit
    def step(state, buf, pos, key):
        logits = nnx.merge(graphdef, state)(buf)
        last = jax.lax.dynamic_index_in_dim(logits, pos - 1, axis=1, keepdims=False)
        if valid_vocab is not None:
            last = jnp.where(jnp.arange(last.shape[-1]) < valid_vocab, last, -jnp.inf)
        if temperature == 0:
            nxt = jnp.argmax(last, axis=-1)
        else:
            nxt = jax.random.categorical(key, last / temperature, axis=-1)
        return jax.lax.dynamic_update_index_in_dim(buf, nxt.astype(jnp.int32), pos, axis=1)

    for i in range(steps):
        key, sub = jax.random.split(key)
        buf = step(state, buf, P + i, sub)
    return buf[:, : P + steps]
