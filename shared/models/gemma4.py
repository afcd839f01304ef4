"""Gemma 4 on tunix: presets, a tiny config, Hugging Face safetensors in and out.

A published recipe LoRA-fine-tunes gemma4-31b on a TPU v5p-8 and serves it on v6e-8. Real
weights: the Hugging Face repository (Apache 2.0, no gate), loaded by tunix's
`gemma4.params_safetensors` (tunix reads Gemma 4 orbax checkpoints from GCS only, and Kaggle not
at all, so Hugging Face it is). Two tunix defaults bite: `ModelConfig.param_dtype` and `dtype`
are float32 (31B x 4 bytes = 123 GB of weights); we default both to bf16, as the checkpoints
hold. Local (sliding-window) layers keep a ring KV cache of `sliding_window_size` slots, and
e2b/e4b share KV caches between layers, so KV bytes come from tunix's own `init_cache`.
"""

import contextlib
import dataclasses

import jax.numpy as jnp
import numpy as np
from tunix.models.gemma4 import model as gemma4_lib
from tunix.models.gemma4 import params_safetensors as gemma4_safetensors

from shared.errors import BadInput
from shared.models.family import HUGGINGFACE, Family, remat_table
from shared.models.hf_layout import arr, linear, split_heads

PRESETS = {
    "gemma4-e2b": gemma4_lib.ModelConfig.gemma4_e2b,
    "gemma4-e4b": gemma4_lib.ModelConfig.gemma4_e4b,
    "gemma4-31b": gemma4_lib.ModelConfig.gemma4_31b,
    "gemma4-26b-a4b": gemma4_lib.ModelConfig.gemma4_26b_a4b,  # a mixture of experts
}
CHECKPOINTS = {
    "gemma4-e2b": "google/gemma-4-E2B-it",
    "gemma4-e4b": "google/gemma-4-E4B-it",
    "gemma4-31b": "google/gemma-4-31B-it",
    "gemma4-26b-a4b": "google/gemma-4-26B-A4B-it",
}
LOCAL, GLOBAL = gemma4_lib.AttentionType.LOCAL_SLIDING, gemma4_lib.AttentionType.GLOBAL
PREFIX = "model.language_model."  # the text model's names inside Google's Gemma 4 checkpoints


def tiny(vocab_size: int) -> gemma4_lib.ModelConfig:
    """gemma4-31b's architecture, small: a sliding-window layer then a global one whose keys
    double as values (31b repeats five local, one global), with fewer, wider KV heads on the
    global layer (K=4 local, 2 global, as 31b's 16 and 4 scaled down; both divide tp=2)."""
    return gemma4_lib.ModelConfig(
        num_layers=2,
        num_embed=vocab_size,
        embed_dim=128,
        hidden_dim=512,
        num_heads=4,
        head_dim=32,
        num_kv_heads=4,
        num_global_kv_heads=2,
        global_key_size=64,
        sliding_window_size=32,
        k_eq_v_global=True,
        attention_pattern=(LOCAL, GLOBAL),
    )


def tiny_moe(vocab_size: int) -> gemma4_lib.ModelConfig:
    """gemma4-26b-a4b's architecture, small: `tiny`'s attention, each layer's dense MLP beside
    8 experts, 2 per token (26b-a4b: 128 and 8)."""
    return dataclasses.replace(
        tiny(vocab_size),
        enable_moe=True,
        num_experts=8,
        expert_dim=128,
        num_experts_per_tok=2,
        moe_dense_hidden_dim=512,
    )


class _TracedNumpy:
    """numpy, except that `zeros` is jax's: traced under jax.eval_shape, it allocates nothing."""

    zeros = staticmethod(jnp.zeros)

    def __getattr__(self, name):
        return getattr(np, name)


@contextlib.contextmanager
def traced_cache():
    """tunix's Gemma 4 `init_cache` calls numpy.zeros, which allocates the whole KV cache on
    the host even inside jax.eval_shape (plan mode would hold gigabytes to learn shapes).
    Within this context that module's numpy makes traced zeros instead."""
    original = gemma4_lib.np
    gemma4_lib.np = _TracedNumpy()
    try:
        yield
    finally:
        gemma4_lib.np = original


def load_safetensors(folder, cfg, mesh):
    return gemma4_safetensors.create_model_from_safe_tensors(
        str(folder), cfg, mesh, dtype=cfg.param_dtype
    )


def hf_state_dict(model) -> dict[str, np.ndarray]:
    """Hugging Face Gemma 4 names (inverse of tunix's params_safetensors) for the dense text
    models (gemma4-31b and the tiny config); global layers whose keys double as values have no
    v_proj."""
    cfg = model.config
    if cfg.per_layer_input_dim or cfg.enable_moe:
        raise BadInput(
            "safetensors export covers dense Gemma 4 without per-layer inputs "
            "(gemma4-31b, gemma4-tiny); e2b/e4b/26b-a4b are not supported yet"
        )
    out = {
        PREFIX + "embed_tokens.weight": arr(model.embedder.input_embedding),
        PREFIX + "norm.weight": arr(model.final_norm.scale),
    }
    for i, layer in enumerate(model.layers):
        p, attn = f"{PREFIX}layers.{i}.", layer.attn
        out[p + "self_attn.q_proj.weight"] = split_heads(arr(attn.q_einsum.w))
        if hasattr(attn, "k_einsum"):  # keys are values on this layer
            out[p + "self_attn.k_proj.weight"] = split_heads(arr(attn.k_einsum.w))
        else:
            k, v = arr(attn.kv_einsum.w)
            out[p + "self_attn.k_proj.weight"] = split_heads(k)
            out[p + "self_attn.v_proj.weight"] = split_heads(v)
        out[p + "self_attn.o_proj.weight"] = linear(arr(attn.attn_vec_einsum.w), n_in=2)
        out[p + "self_attn.q_norm.weight"] = arr(attn._query_norm.scale)
        out[p + "self_attn.k_norm.weight"] = arr(attn._key_norm.scale)
        for proj in ("gate_proj", "up_proj", "down_proj"):
            out[p + f"mlp.{proj}.weight"] = linear(arr(getattr(layer.mlp, proj).kernel))
        out[p + "input_layernorm.weight"] = arr(layer.pre_attention_norm.scale)
        out[p + "post_attention_layernorm.weight"] = arr(layer.post_attention_norm.scale)
        out[p + "pre_feedforward_layernorm.weight"] = arr(layer.pre_ffw_norm.scale)
        out[p + "post_feedforward_layernorm.weight"] = arr(layer.post_ffw_norm.scale)
        out[p + "layer_scalar"] = arr(layer.skip_scale)
    return out


def hf_config(cfg) -> dict:
    return {
        "architectures": ["Gemma4ForCausalLM"],
        "model_type": "gemma4_text",
        "num_hidden_layers": cfg.num_layers,
        "hidden_size": cfg.embed_dim,
        "intermediate_size": cfg.hidden_dim,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "num_global_key_value_heads": cfg.num_global_kv_heads,
        "global_head_dim": cfg.global_key_size,
        "vocab_size": cfg.num_embed,
        "sliding_window": cfg.sliding_window_size,
        "final_logit_softcapping": cfg.final_logit_softcap,
        "attention_k_eq_v": cfg.k_eq_v_global,
    }


FAMILY = Family(
    name="gemma4",
    model_class=gemma4_lib.Gemma4,
    sharding=lambda is_sampling: gemma4_lib.ShardingConfig.get_default_sharding(
        is_sampling=is_sampling
    ),
    presets=PRESETS,
    tiny=tiny,
    tiny_moe=tiny_moe,
    attention_period=lambda cfg: len(cfg.attention_pattern or (None,)),
    lora_module_path=(
        ".*q_einsum|.*kv_einsum|.*k_einsum|.*gate_proj|.*down_proj|.*up_proj|.*attn_vec_einsum"
    ),
    weights_source=HUGGINGFACE,
    checkpoints=CHECKPOINTS,
    load_checkpoint=load_safetensors,
    load_safetensors=load_safetensors,
    hf_state_dict=hf_state_dict,
    hf_config=hf_config,
    remat=remat_table(gemma4_lib.RematConfig),
    dtype_fields=("param_dtype", "dtype"),
    qk_norm=True,
    final_softcap=lambda cfg: cfg.final_logit_softcap,
    traced_cache=traced_cache,
    norm_center=1.0,
)
