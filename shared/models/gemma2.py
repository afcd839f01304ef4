"""Gemma 2 on tunix (`tunix.models.gemma`): presets, a tiny config, Kaggle Flax checkpoints.
The same tunix module builds Gemma 1, so its 2B (`gemma-2b`) is a preset here too.

The Kaggle tunix hackathon allowed gemma2-2b for GRPO on one v5e-8. Real weights:
`kagglehub.model_download("google/gemma-2/flax/<variant>")`, the upstream linen checkpoint that
tunix maps with its own `module_from_linen_variables` (what `Gemma.from_params` does for the
presets; called directly so the tiny config loads the same way). tunix's Gemma 2 has no dtype
field: its weights are created in float32 and we cast them to bf16, as the checkpoints hold.
"""

from pathlib import Path

import jax
import numpy as np
from flax import nnx
from tunix.models.gemma import model as gemma_lib
from tunix.models.gemma import params as gemma_params
from tunix.models.gemma import params_safetensors as gemma_safetensors

from shared.errors import BadInput
from shared.hardware.sharding import put_on_mesh
from shared.models.family import KAGGLE, WEIGHT_DTYPE, Family, remat_table
from shared.models.gemma3 import orbax_folder
from shared.models.hf_layout import arr, linear, split_heads

PRESETS = {
    # Gemma 1's 2B, which tunix's module also builds: the model of tunix's own SFT table
    # (examples/sft/mtnt), one of the field's validation points (shared.plan.field)
    "gemma-2b": gemma_lib.ModelConfig.gemma_2b,
    "gemma2-2b": gemma_lib.ModelConfig.gemma2_2b_it,
    "gemma2-9b": gemma_lib.ModelConfig.gemma2_9b_it,
}
CHECKPOINTS = {
    "gemma-2b": "google/gemma/flax/2b",
    "gemma2-2b": "google/gemma-2/flax/gemma2-2b-it",
    "gemma2-9b": "google/gemma-2/flax/gemma2-9b-it",
}
LOCAL, GLOBAL = gemma_lib.AttentionType.LOCAL_SLIDING, gemma_lib.AttentionType.GLOBAL


def tiny(vocab_size: int) -> gemma_lib.ModelConfig:
    """Alternating local/global layers, attention and final logit soft-capping, GQA, post
    norms: the 2b's architecture, small."""
    return gemma_lib.ModelConfig(
        num_layers=2,
        num_embed=vocab_size,
        embed_dim=128,
        hidden_dim=512,
        num_heads=4,
        head_dim=32,
        num_kv_heads=2,
        final_logit_softcap=30.0,
        use_post_attn_norm=True,
        use_post_ffw_norm=True,
        attention_types=(LOCAL, GLOBAL),
        attn_logits_soft_cap=50.0,
        sliding_window_size=32,
    )


def load_checkpoint(download: Path, cfg, mesh):
    """Upstream params restored on the host CPU (so a 9B model never lands whole on one chip),
    mapped by tunix, then each array put on the mesh in its sharding (core.place_on_mesh)."""
    with jax.default_device(jax.devices("cpu")[0]):
        params = gemma_params.load_and_format_params(str(orbax_folder(download)))
        model = gemma_lib.module_from_linen_variables(
            module_factory=lambda: gemma_lib.Gemma(cfg, rngs=nnx.Rngs(params=0)),
            variables=params["transformer"],
            map_key_fn=gemma_lib._map_linen_var_names,
            assign_val_fn=gemma_lib._assign_linen_params_to_nnx_state,
        )
    return put_on_mesh(model, mesh, WEIGHT_DTYPE)


def load_safetensors(folder: Path, cfg, mesh):
    return gemma_safetensors.create_model_from_safe_tensors(
        str(folder), cfg, mesh, dtype=WEIGHT_DTYPE
    )


def hf_state_dict(model) -> dict[str, np.ndarray]:
    """Hugging Face Gemma 2 names and layouts (inverse of tunix's params_safetensors)."""
    out = {
        "model.embed_tokens.weight": arr(model.embedder.input_embedding),
        "model.norm.weight": arr(model.final_norm.scale),
    }
    for i, layer in enumerate(model.layers):
        p, attn = f"model.layers.{i}.", layer.attn
        if attn.use_qkv_einsum:
            q, k, v = arr(attn.qkv_einsum.w)  # [3, N, D, H]
        else:
            q, (k, v) = arr(attn.q_einsum.w), arr(attn.kv_einsum.w)
        out[p + "self_attn.q_proj.weight"] = split_heads(q)
        out[p + "self_attn.k_proj.weight"] = split_heads(k)
        out[p + "self_attn.v_proj.weight"] = split_heads(v)
        out[p + "self_attn.o_proj.weight"] = linear(arr(attn.attn_vec_einsum.w), n_in=2)
        for proj in ("gate_proj", "up_proj", "down_proj"):
            out[p + f"mlp.{proj}.weight"] = linear(arr(getattr(layer.mlp, proj).kernel))
        out[p + "input_layernorm.weight"] = arr(layer.pre_attention_norm.scale)
        out[p + "post_attention_layernorm.weight"] = arr(layer.post_attn_norm.scale)
        out[p + "pre_feedforward_layernorm.weight"] = arr(layer.pre_ffw_norm.scale)
        out[p + "post_feedforward_layernorm.weight"] = arr(layer.post_ffw_norm.scale)
    return out


def hf_config(cfg) -> dict:
    if not cfg.use_post_attn_norm:  # Gemma 1: no post norms, no soft-caps
        raise BadInput(
            "the Hugging Face export writes Gemma 2; gemma-2b (Gemma 1) is for plan mode "
            "and its Kaggle checkpoint only"
        )
    return {
        "architectures": ["Gemma2ForCausalLM"],
        "model_type": "gemma2",
        "num_hidden_layers": cfg.num_layers,
        "hidden_size": cfg.embed_dim,
        "intermediate_size": cfg.hidden_dim,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "vocab_size": cfg.num_embed,
        "sliding_window": cfg.sliding_window_size,
        "final_logit_softcapping": cfg.final_logit_softcap,
        "attn_logit_softcapping": cfg.attn_logits_soft_cap,
    }


FAMILY = Family(
    name="gemma2",
    model_class=gemma_lib.Gemma,
    sharding=lambda is_sampling: gemma_lib.ShardingConfig.get_default_sharding(
        is_sampling=is_sampling
    ),
    presets=PRESETS,
    tiny=tiny,
    # Gemma 2 alternates local and global layers; Gemma 1 (gemma-2b) is global throughout
    attention_period=lambda cfg: len(set(cfg.attention_types)),
    lora_module_path=(
        ".*q_einsum|.*kv_einsum|.*qkv_einsum|.*gate_proj|.*down_proj|.*up_proj|.*attn_vec_einsum"
    ),
    weights_source=KAGGLE,
    checkpoints=CHECKPOINTS,
    load_checkpoint=load_checkpoint,
    load_safetensors=load_safetensors,
    hf_state_dict=hf_state_dict,
    hf_config=hf_config,
    remat=remat_table(gemma_lib.RematConfig),
    final_softcap=lambda cfg: cfg.final_logit_softcap,
)
