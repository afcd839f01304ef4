"""tunix weights in Hugging Face layouts, for the merged safetensors export of every family.

tunix keeps projections as einsum weights with the input axes first ([D, N, H] for a query
projection, [N, H, D] for the attention output, [in, out] for an MLP kernel); Hugging Face
keeps every projection as a 2-D [out, in] matrix. These helpers are the one inverse the
families' `hf_state_dict` functions share.
"""

import math

import jax
import numpy as np
from flax import nnx


def arr(x) -> np.ndarray:
    """A host copy of an nnx Variable or array, in its own dtype."""
    return np.asarray(jax.device_get(x.get_value() if isinstance(x, nnx.Variable) else x))


def linear(w: np.ndarray, n_in: int = 1) -> np.ndarray:
    """[*in, *out] einsum weight (the first `n_in` axes are the input) -> HF [out, in]."""
    n_rows = math.prod(w.shape[:n_in])
    return np.ascontiguousarray(w.reshape(n_rows, -1).T)


def split_heads(w: np.ndarray) -> np.ndarray:
    """Gemma's per-head [N, D, H] query/key/value weight -> HF [N*H, D]."""
    return linear(w.transpose(1, 0, 2))


def llama_like_state_dict(model, *, tied: bool, qk_norm: bool = False) -> dict[str, np.ndarray]:
    """Hugging Face names for tunix's Llama 3 and Qwen 3 (the same module layout: q/k/v/o_proj
    einsums, a SwiGLU MLP, pre-attention and pre-MLP norms, an optional untied lm_head)."""
    out = {
        "model.embed_tokens.weight": arr(model.embedder.input_embedding),
        "model.norm.weight": arr(model.final_norm.w),
    }
    if not tied:
        out["lm_head.weight"] = linear(arr(model.lm_head.w))
    for i, layer in enumerate(model.layers):
        p, attn = f"model.layers.{i}.", layer.attn
        for proj in ("q_proj", "k_proj", "v_proj"):  # [D, N, H]
            out[p + f"self_attn.{proj}.weight"] = linear(arr(getattr(attn, proj).w))
        out[p + "self_attn.o_proj.weight"] = linear(arr(attn.o_proj.w), n_in=2)  # [N, H, D]
        if qk_norm:
            out[p + "self_attn.q_norm.weight"] = arr(attn.q_norm.w)
            out[p + "self_attn.k_norm.weight"] = arr(attn.k_norm.w)
        for proj in ("gate_proj", "up_proj", "down_proj"):
            out[p + f"mlp.{proj}.weight"] = linear(arr(getattr(layer.mlp, proj).kernel))
        out[p + "input_layernorm.weight"] = arr(layer.input_layernorm.w)
        out[p + "post_attention_layernorm.weight"] = arr(layer.post_attention_layernorm.w)
    return out
