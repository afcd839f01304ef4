"""Qwen 3 on tunix: presets, a tiny config, Hugging Face safetensors in and out.

Real weights: the Hugging Face repository (open; HF_TOKEN only raises rate limits), loaded by
tunix's `qwen3.params.create_model_from_safe_tensors`. tunix's Qwen 3 config defaults BOTH
`param_dtype` and `dtype` (activations and the sampler's KV cache) to float32; we set both to
bf16, as the checkpoints hold. 0.6b-4b tie the LM head to the embedding, 8b and up do not.
qwen3-30b-a3b is a mixture of experts (tunix routes it with megablox kernels).
"""

import dataclasses

from tunix.models.qwen3 import model as qwen3_lib
from tunix.models.qwen3 import params as qwen3_params

from shared.models.family import HUGGINGFACE, Family, remat_table
from shared.models.hf_layout import llama_like_state_dict

PRESETS = {
    "qwen3-0.6b": qwen3_lib.ModelConfig.qwen3_0p6b,
    "qwen3-1.7b": qwen3_lib.ModelConfig.qwen3_1p7b,
    "qwen3-4b": qwen3_lib.ModelConfig.qwen3_4b,
    "qwen3-8b": qwen3_lib.ModelConfig.qwen3_8b,
    "qwen3-14b": qwen3_lib.ModelConfig.qwen3_14b,
    "qwen3-32b": qwen3_lib.ModelConfig.qwen3_32b,
    "qwen3-30b-a3b": qwen3_lib.ModelConfig.qwen3_30b_a3b,
}
# Hugging Face repositories: qwen3-0.6b -> Qwen/Qwen3-0.6B, qwen3-30b-a3b -> Qwen/Qwen3-30B-A3B.
CHECKPOINTS = {name: "Qwen/Qwen3-" + name.split("-", 1)[1].upper() for name in PRESETS}


def tiny(vocab_size: int) -> qwen3_lib.ModelConfig:
    """GQA, q/k norms and a tied LM head (as 0.6b-4b), small."""
    return qwen3_lib.ModelConfig(
        num_layers=2,
        vocab_size=vocab_size,
        embed_dim=128,
        hidden_dim=512,
        num_heads=4,
        head_dim=32,
        num_kv_heads=2,
        rope_theta=1_000_000,
        norm_eps=1e-6,
        use_tied_embedding=True,
    )


def tiny_moe(vocab_size: int) -> qwen3_lib.ModelConfig:
    """qwen3-30b-a3b's architecture, small: 8 experts, 2 per token, each as wide as the model
    (128: megablox's tiles are 128 wide), with the attention of `tiny`."""
    return dataclasses.replace(
        tiny(vocab_size), hidden_dim=128, num_experts=8, num_experts_per_tok=2
    )


def load_safetensors(folder, cfg, mesh):
    return qwen3_params.create_model_from_safe_tensors(
        str(folder), cfg, mesh, dtype=cfg.param_dtype
    )


def hf_config(cfg) -> dict:
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "num_hidden_layers": cfg.num_layers,
        "hidden_size": cfg.embed_dim,
        "intermediate_size": cfg.hidden_dim,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "vocab_size": cfg.vocab_size,
        "rope_theta": cfg.rope_theta,
        "rms_norm_eps": cfg.norm_eps,
        "tie_word_embeddings": cfg.use_tied_embedding,
    }


FAMILY = Family(
    name="qwen3",
    model_class=qwen3_lib.Qwen3,
    sharding=lambda is_sampling: qwen3_lib.ShardingConfig.get_default_sharding(
        is_sampling=is_sampling
    ),
    presets=PRESETS,
    tiny=tiny,
    tiny_moe=tiny_moe,
    lora_module_path=".*q_proj|.*k_proj|.*v_proj|.*o_proj|.*gate_proj|.*down_proj|.*up_proj",
    weights_source=HUGGINGFACE,
    checkpoints=CHECKPOINTS,
    load_checkpoint=load_safetensors,
    load_safetensors=load_safetensors,
    hf_state_dict=lambda model: llama_like_state_dict(
        model, tied=model.config.use_tied_embedding, qk_norm=True
    ),
    hf_config=hf_config,
    remat=remat_table(qwen3_lib.RematConfig),
    vocab_field="vocab_size",
    norms_per_layer=2,
    qk_norm=True,
    norm_center=1.0,
    dtype_fields=("param_dtype", "dtype"),
    tied=lambda cfg: cfg.use_tied_embedding,
)
