"""Gemma 3 (text) on tunix: presets, a tiny config, Kaggle Flax checkpoints, Hugging Face export.

Real weights: `kagglehub.model_download("google/gemma-3/flax/<variant>")`, an orbax checkpoint
that tunix's `gemma3.params.create_model_from_checkpoint` maps and shards. tunix's Gemma 3 has no
`init_cache`: the Sampler allocates the full KV cache for every layer (the sliding window is
only a mask).
"""

from pathlib import Path

import numpy as np
from tunix.models.gemma3 import model as gemma3_lib
from tunix.models.gemma3 import params as gemma3_params
from tunix.models.gemma3 import params_safetensors as gemma3_safetensors

from shared.errors import BadInput
from shared.models.family import KAGGLE, Family, remat_table
from shared.models.hf_layout import arr, linear, split_heads

PRESETS = {
    "gemma3-270m": gemma3_lib.ModelConfig.gemma3_270m,
    "gemma3-1b": gemma3_lib.ModelConfig.gemma3_1b_it,
    "gemma3-4b": gemma3_lib.ModelConfig.gemma3_4b_it,  # text only
    "gemma3-12b": gemma3_lib.ModelConfig.gemma3_12b_it,
    "gemma3-27b": gemma3_lib.ModelConfig.gemma3_27b_it,
}
# Instruction-tuned variants on Kaggle (google/gemma-3/flax/<variant>).
CHECKPOINTS = {
    "gemma3-270m": "google/gemma-3/flax/gemma-3-270m-it",
    "gemma3-1b": "google/gemma-3/flax/gemma3-1b-it",
    "gemma3-4b": "google/gemma-3/flax/gemma3-4b-it",
    "gemma3-12b": "google/gemma-3/flax/gemma3-12b-it",
    "gemma3-27b": "google/gemma-3/flax/gemma3-27b-it",
}


def tiny(vocab_size: int) -> gemma3_lib.ModelConfig:
    """6 layers so the 5-local-1-global pattern has its global layer, one KV head as in
    270m/1b, a window shorter than local prompts + rollouts so the sliding mask matters."""
    return gemma3_lib.ModelConfig(
        num_layers=6,
        num_embed=vocab_size,
        embed_dim=128,
        hidden_dim=512,
        num_heads=4,
        head_dim=32,
        num_kv_heads=1,
        sliding_window_size=32,
        local_base_frequency=10_000,
        global_base_frequency=1_000_000,
    )


def orbax_folder(download: Path) -> Path:
    """The orbax checkpoint inside a Kaggle download (the shallowest folder with _METADATA)."""
    found = [p.parent for p in Path(download).rglob("_METADATA")]
    if not found:
        raise BadInput(f"no orbax checkpoint (a folder with _METADATA) under {download}")
    return min(found, key=lambda p: (len(p.parts), str(p)))


def load_checkpoint(download: Path, cfg, mesh):
    """tunix restores to host numpy, maps upstream names, then device_puts each array with the
    model's sharding."""
    return gemma3_params.create_model_from_checkpoint(str(orbax_folder(download)), cfg, mesh)


def load_safetensors(folder: Path, cfg, mesh):
    return gemma3_safetensors.create_model_from_safe_tensors(
        str(folder), cfg, mesh, dtype=cfg.param_dtype
    )


def hf_state_dict(model) -> dict[str, np.ndarray]:
    """Hugging Face Gemma 3 names and layouts (q/k/v/o_proj and MLP [out, in], tied table):
    the inverse of tunix's params_safetensors mapping."""
    out = {
        "model.embed_tokens.weight": arr(model.embedder.input_embedding),
        "model.norm.weight": arr(model.final_norm.scale),
    }
    for i, layer in enumerate(model.layers):
        p, attn = f"model.layers.{i}.", layer.attn
        if attn.use_qkv_einsum:
            q, k, v = arr(attn.qkv_einsum.w)  # [3, N, D, H]
        else:
            q, (k, v) = arr(attn.q_einsum.w), arr(attn.kv_einsum.w)  # [N, D, H], [2, K, D, H]
        out[p + "self_attn.q_proj.weight"] = split_heads(q)
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
    return out


def hf_config(cfg) -> dict:
    return {
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": "gemma3_text",
        "num_hidden_layers": cfg.num_layers,
        "hidden_size": cfg.embed_dim,
        "intermediate_size": cfg.hidden_dim,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "vocab_size": cfg.num_embed,
        "sliding_window": cfg.sliding_window_size,
        "rope_theta": cfg.global_base_frequency,
        "rope_local_base_freq": cfg.local_base_frequency,
    }


FAMILY = Family(
    name="gemma3",
    model_class=gemma3_lib.Gemma3,
    sharding=lambda is_sampling: gemma3_lib.ShardingConfig.get_default_sharding(
        is_sampling=is_sampling
    ),
    presets=PRESETS,
    tiny=tiny,
    attention_period=lambda cfg: len(gemma3_lib.GEMMA3_ATTENTION_PATTERN),
    lora_module_path=".*q_einsum|.*kv_einsum|.*gate_proj|.*down_proj|.*up_proj|.*attn_vec_einsum",
    weights_source=KAGGLE,
    checkpoints=CHECKPOINTS,
    load_checkpoint=load_checkpoint,
    load_safetensors=load_safetensors,
    hf_state_dict=hf_state_dict,
    hf_config=hf_config,
    remat=remat_table(gemma3_lib.RematConfig),
    dtype_fields=("param_dtype",),
    qk_norm=True,
)
