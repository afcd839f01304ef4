"""What one tunix model family tells the rest of the library: the adapter every family fills in.

Everything else in `shared.models` (abstract models on a mesh, random weights born sharded,
loading, hidden states, KV-cache bytes) and in `shared.rollout.sampler` / `shared.lora` is
written once against this dataclass. Adding a family is one small file that builds a `Family`.

tunix's configs disagree on a few field names and defaults, which is why the adapter names them:
the vocabulary is `num_embed` (Gemma) or `vocab_size` (Llama, Qwen); the weight dtype is a
config field (`param_dtype`, and `dtype` for activations and the KV cache) in Gemma 3/4 and
Qwen 3, while Gemma 2 and Llama 3 create float32 weights and we cast the abstract state instead;
Gemma 4 and Qwen 3 default to float32 weights AND activations (a 31B model at 4 bytes a
parameter), so every verdict states the dtype and we default to what the checkpoints hold (bf16).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import jax.numpy as jnp

from shared.models import hf_config

KAGGLE, HUGGINGFACE = "kaggle", "huggingface"
WEIGHT_DTYPE = jnp.bfloat16  # what every family's checkpoints hold; verdicts state the dtype


@dataclasses.dataclass(frozen=True)
class Family:
    """One tunix model family, as the family-agnostic code needs it."""

    name: str  # "gemma3"
    model_class: type  # tunix's nnx Module, built as model_class(config, rngs=...)
    sharding: Callable[[bool], Any]  # is_sampling -> tunix ShardingConfig
    presets: Mapping[str, Callable[[], Any]]  # our name -> tunix config factory
    tiny: Callable[[int], Any]  # vocab size -> a small config of the real architecture
    # qwix LoRA targets: attention projections and the dense MLP, as tunix's examples pick them
    lora_module_path: str
    weights_source: str  # KAGGLE or HUGGINGFACE
    checkpoints: Mapping[str, str]  # preset name -> Kaggle handle or Hugging Face repo id
    # (folder, config, mesh) -> model with real weights, on the mesh, from a local download
    load_checkpoint: Callable[[Path, Any, Any], Any]
    # (folder, config, mesh) -> model from Hugging Face-layout safetensors (our merged export)
    load_safetensors: Callable[[Path, Any, Any], Any]
    hf_state_dict: Callable[[Any], dict]  # model -> {HF tensor name: numpy array}, for export
    hf_config: Callable[[Any], dict]  # config -> config.json written beside an export
    remat: Mapping[str, Any]  # our remat policy name -> tunix RematConfig value
    # What tunix initialises 1-D weights (norm scales) to: 0 where norms compute x·(1 + scale)
    # (Gemma 2 and 3), 1 where they compute x·scale. Random weights keep that centre, or every
    # activation of a random Llama would be scaled by ~0.02 and its gradients vanish.
    norm_center: float = 0.0
    norms_per_layer: int = 4  # D-wide RMSNorm scales per layer (closed-form parameter counts)
    qk_norm: bool = False  # H-wide norms on queries and keys
    vocab_field: str = "num_embed"
    dtype_fields: tuple[str, ...] = ()  # config fields that set the weight (and cache) dtype
    tied: Callable[[Any], bool] = lambda cfg: True
    final_softcap: Callable[[Any], float | None] = lambda cfg: None
    # A context in which building the sampler's KV cache allocates nothing (plan mode traces
    # it); only Gemma 4 needs one, because its cache is made with numpy.
    traced_cache: Callable[[], AbstractContextManager] = nullcontext
    # Decoder layers in one repeat of the attention pattern (Gemma 3: five local, one global):
    # a model cut to whole repeats keeps the full model's mix of layers (plan.search's probes).
    attention_period: Callable[[Any], int] = lambda cfg: 1
    # vocab size -> a small mixture of experts of the family's MoE preset, named
    # `<family>-moe-tiny` (qwen3-30b-a3b, gemma4-26b-a4b); None where the family has none
    tiny_moe: Callable[[int], Any] | None = None

    def base_config(self, name: str) -> Any:
        """tunix's config of a preset, or of a Hugging Face config.json at path `name`."""
        if hf_config.is_config(name):
            return hf_config.config(name)
        return self.presets[name]()

    def config(
        self, name: str, vocab_size: int, *, is_sampling: bool, dtype, remat: str = "none"
    ) -> Any:
        """The tunix config for `name` (a preset, or the family's tiny one) with our sharding
        layout, weight dtype and remat policy."""
        if name.endswith("-moe-tiny"):
            cfg = self.tiny_moe(vocab_size)
        else:
            cfg = self.tiny(vocab_size) if name.endswith("-tiny") else self.base_config(name)
        return dataclasses.replace(
            cfg,
            shd_config=self.sharding(is_sampling),
            remat_config=self.remat[remat],
            **{field: dtype for field in self.dtype_fields},
        )

    def truncated(self, cfg, layers: int) -> Any:
        """`cfg` cut to its first `layers` decoder layers: the same layers, fewer of them."""
        fields: dict[str, Any] = {"num_layers": layers}
        if hasattr(cfg, "attention_types"):  # Gemma 2 lists one attention type per layer
            fields["attention_types"] = tuple(cfg.attention_types)[:layers]
        return dataclasses.replace(cfg, **fields)

    def vocab_size(self, cfg) -> int:
        return getattr(cfg, self.vocab_field)

    def casts_weights(self) -> bool:
        """True when tunix creates float32 weights whatever we ask (no dtype field)."""
        return not self.dtype_fields


def remat_table(enum) -> dict[str, Any]:
    """Our remat names for a tunix `RematConfig`: none, block (each attention/MLP block),
    decoder (each whole decoder layer), where the family has them."""
    names = {"none": "NONE", "block": "BLOCK", "decoder": "DECODER"}
    return {ours: getattr(enum, theirs) for ours, theirs in names.items() if hasattr(enum, theirs)}
