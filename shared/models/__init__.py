"""Every model tunix ships, by one name, family-agnostic: the model layer of the library.

    from shared import models
    model, tok = models.load("qwen3-tiny", "dummy", mesh=mesh)   # or "gemma3-1b", "real"
    cfg = models.model_config("gemma4-31b")                       # tunix's config, bf16
    hidden = models.hidden_states(model, tokens)                  # [B, T, D], any family

One small adapter per family (gemma2, gemma3, gemma4, llama3, qwen3: `Family`) holds what
differs; `core` (names, configs, abstract and random models), `weights` (downloads, tokenizers,
loading) and `forward` (hidden states, LM head, top-k) are written once for all of them.
"""

from shared.models import activation_sharding, expert_routing
from shared.models.core import (
    FAMILIES,
    MODEL_NAMES,
    REMATS,
    TINY_VOCAB,
    abstract_model,
    attention_period,
    build,
    check_divisible,
    dims,
    dtype_name,
    dummy_model,
    family_of,
    is_tiny,
    lora_provider,
    matmul_weights,
    model_config,
    model_dims,
    param_bytes,
    param_count,
)
from shared.models.family import WEIGHT_DTYPE, Family
from shared.models.forward import (
    LOGITS_MODES,
    StaticGraph,
    abstract_forward_args,
    capped,
    family_of_model,
    final_softcap,
    forward_logits,
    full_logits,
    head_table,
    hidden_states,
    teacher_forced_top_k,
)
from shared.models.weights import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    WEIGHTS,
    IdsOnlyTokenizer,
    checkpoint_tokenizer,
    load,
    load_checkpoint,
    local_tokenizer,
)

# tunix's activation `shard` helpers, made to constrain under jax.set_mesh on any host (see
# activation_sharding): before any model of ours is traced.
activation_sharding.install()
# tunix's Qwen 3 MoE layer, routed as on the compiled-for platform (megablox on a TPU), not by
# this host's CPU (see expert_routing)
expert_routing.install()

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "FAMILIES",
    "Family",
    "IdsOnlyTokenizer",
    "LOGITS_MODES",
    "MODEL_NAMES",
    "PAD_ID",
    "REMATS",
    "StaticGraph",
    "TINY_VOCAB",
    "WEIGHTS",
    "WEIGHT_DTYPE",
    "abstract_forward_args",
    "abstract_model",
    "attention_period",
    "activation_sharding",
    "build",
    "capped",
    "check_divisible",
    "checkpoint_tokenizer",
    "dims",
    "dtype_name",
    "dummy_model",
    "family_of",
    "family_of_model",
    "final_softcap",
    "forward_logits",
    "full_logits",
    "head_table",
    "hidden_states",
    "is_tiny",
    "load",
    "load_checkpoint",
    "local_tokenizer",
    "lora_provider",
    "matmul_weights",
    "model_config",
    "model_dims",
    "param_bytes",
    "param_count",
    "teacher_forced_top_k",
]
