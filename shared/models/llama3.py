"""Llama 3.x on tunix: presets, a tiny config, Hugging Face safetensors in and out.

Real weights: the Hugging Face repository (gated: accept Meta's licence there and set
HF_TOKEN), loaded by tunix's `llama3.params.create_model_from_safe_tensors`. tunix's Llama 3
has no dtype field: weights are created in float32 and we cast them to bf16, as the
checkpoints hold. Llama 3.2 ties the LM head to the embedding; 3.1 does not.
"""

from tunix.models.llama3 import model as llama3_lib
from tunix.models.llama3 import params as llama3_params

from shared.models.family import HUGGINGFACE, WEIGHT_DTYPE, Family, remat_table
from shared.models.hf_layout import llama_like_state_dict

PRESETS = {
    "llama3.2-1b": llama3_lib.ModelConfig.llama3p2_1b,
    "llama3.2-3b": llama3_lib.ModelConfig.llama3p2_3b,
    "llama3.1-8b": llama3_lib.ModelConfig.llama3p1_8b,
    "llama3.1-70b": llama3_lib.ModelConfig.llama3p1_70b,
    "llama3.1-405b": llama3_lib.ModelConfig.llama3p1_405b,
}
CHECKPOINTS = {
    "llama3.2-1b": "meta-llama/Llama-3.2-1B-Instruct",
    "llama3.2-3b": "meta-llama/Llama-3.2-3B-Instruct",
    "llama3.1-8b": "meta-llama/Llama-3.1-8B-Instruct",
    "llama3.1-70b": "meta-llama/Llama-3.1-70B-Instruct",
    "llama3.1-405b": "meta-llama/Llama-3.1-405B-Instruct",
}


def tiny(vocab_size: int) -> llama3_lib.ModelConfig:
    """GQA and an untied LM head (as 3.1-8b and up), small."""
    return llama3_lib.ModelConfig(
        num_layers=2,
        vocab_size=vocab_size,
        embed_dim=128,
        hidden_dim=512,
        num_heads=4,
        head_dim=32,
        num_kv_heads=2,
        rope_theta=500_000,
        norm_eps=1e-5,
        weight_tying=False,
    )


def load_safetensors(folder, cfg, mesh):
    return llama3_params.create_model_from_safe_tensors(str(folder), cfg, mesh, dtype=WEIGHT_DTYPE)


def hf_config(cfg) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "num_hidden_layers": cfg.num_layers,
        "hidden_size": cfg.embed_dim,
        "intermediate_size": cfg.hidden_dim,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "vocab_size": cfg.vocab_size,
        "rope_theta": cfg.rope_theta,
        "rms_norm_eps": cfg.norm_eps,
        "tie_word_embeddings": cfg.weight_tying,
    }


FAMILY = Family(
    name="llama3",
    model_class=llama3_lib.Llama3,
    sharding=lambda is_sampling: llama3_lib.ShardingConfig.get_default_sharding(
        is_sampling=is_sampling
    ),
    presets=PRESETS,
    tiny=tiny,
    lora_module_path=".*q_proj|.*k_proj|.*v_proj|.*o_proj|.*gate_proj|.*down_proj|.*up_proj",
    weights_source=HUGGINGFACE,
    checkpoints=CHECKPOINTS,
    load_checkpoint=load_safetensors,
    load_safetensors=load_safetensors,
    hf_state_dict=lambda model: llama_like_state_dict(model, tied=model.config.weight_tying),
    hf_config=hf_config,
    remat=remat_table(llama3_lib.RematConfig),
    vocab_field="vocab_size",
    norms_per_layer=2,
    norm_center=1.0,
    tied=lambda cfg: cfg.weight_tying,
)
