"""A model that is no preset: its Hugging Face `config.json`, read from a local file (nothing
downloads), as the tunix config of its family, so Llama 3.2 3B, Qwen3 4B or someone's own
700M variant plans without a code change: `--model path/to/config.json`.

tunix ships no reader of these (tunix.models.naming maps preset names to config factories),
so this maps each family's fields by hand, the ones tunix's own presets note beside each value
("num_layers=28,  # <- from num_hidden_layers"). Llama (model_type "llama"), Qwen 3 ("qwen3",
and "qwen3_moe" with its experts) and Gemma 3 ("gemma3_text", and the text model of a
multimodal "gemma3") are read; Gemma 2 and Gemma 4 configs, with soft-caps and attention
patterns of their own, are not mapped yet, and say so.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

from shared.errors import BadInput

# model_type -> our family's name
FAMILIES = {
    "llama": "llama3",
    "qwen3": "qwen3",
    "qwen3_moe": "qwen3",
    "gemma3_text": "gemma3",  # 270M, 1B: text only
    "gemma3": "gemma3",  # 4B-27B: the text model in its `text_config`, vision left out
}
# What a Gemma 3 `text_config` leaves out means Hugging Face's Gemma3TextConfig defaults
# (transformers 5.12.1): the 4B-27B configs give only the fields that differ from these.
GEMMA3_TEXT_DEFAULTS = {
    "vocab_size": 262_208,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "query_pre_attn_scalar": 256,
    "rope_theta": 1_000_000,
    "rope_local_base_freq": 10_000,
    "rms_norm_eps": 1e-6,
}
GEMMA3_PATTERN = 6  # tunix's Gemma 3 cycles five sliding-window layers and one global one


def is_config(name: str) -> bool:
    """Whether a model name is a path to a config.json rather than a preset."""
    return name.endswith(".json")


def digest(path: str) -> str:
    """The file's contents in short: a plan cache key that names the path alone would answer a
    changed config with the old one's verdict."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


@functools.cache
def _read(path: str, stamp: float) -> dict:
    del stamp  # part of the cache key only: an edited file is read again
    try:
        fields = json.loads(Path(path).read_text())
    except OSError as err:
        raise BadInput(f"cannot read model config {path} ({err.strerror})") from None
    except json.JSONDecodeError as err:
        raise BadInput(f"model config {path} is not JSON: {err.msg} at line {err.lineno}") from None
    if not isinstance(fields, dict):
        raise BadInput(f"model config {path} is not a JSON object")
    return fields


def read(path: str) -> dict:
    """The config.json's fields; BadInput in one line if it cannot be read."""
    file = Path(path)
    if not file.is_file():
        raise BadInput(f"no model config at {path}: --model takes a preset or a config.json")
    return _read(str(file.resolve()), file.stat().st_mtime)


def family_name(path: str) -> str:
    """Our family of the config's `model_type`."""
    kind = read(path).get("model_type")
    if kind not in FAMILIES:
        raise BadInput(
            f"{path}: model_type {kind!r} is not one this reads ({', '.join(FAMILIES)}); "
            "Gemma 2 and Gemma 4 configs are not mapped yet: plan their presets (gemma2-2b ...)"
        )
    return FAMILIES[kind]


def _field(fields: dict, path: str, name: str, kind: type = int) -> Any:
    if name not in fields:
        raise BadInput(f"{path}: the field {name!r} is missing")
    value = fields[name]
    if kind is int and (type(value) is not int or value < 1):
        raise BadInput(f"{path}: {name} must be a positive integer, got {value!r}")
    if kind is float and (not isinstance(value, int | float) or value <= 0):
        raise BadInput(f"{path}: {name} must be a positive number, got {value!r}")
    return value


def shapes(path: str) -> dict:
    """The shapes every mapped family shares, checked to agree with each other."""
    f = read(path)
    heads = _field(f, path, "num_attention_heads")
    kv_heads = _field(f, path, "num_key_value_heads") if "num_key_value_heads" in f else heads
    width = _field(f, path, "hidden_size")
    head_dim = f.get("head_dim") or width // heads
    if heads % kv_heads:
        raise BadInput(
            f"{path}: num_attention_heads {heads} is not a multiple of num_key_value_heads "
            f"{kv_heads}, so the heads do not split into KV groups"
        )
    if "head_dim" not in f and width % heads:
        raise BadInput(
            f"{path}: hidden_size {width} does not divide into {heads} heads and no head_dim "
            "is given"
        )
    return {
        "num_layers": _field(f, path, "num_hidden_layers"),
        "vocab_size": _field(f, path, "vocab_size"),
        "embed_dim": width,
        "num_heads": heads,
        "head_dim": head_dim,
        "num_kv_heads": kv_heads,
        "rope_theta": f.get("rope_theta", 10_000),
        "norm_eps": _field(f, path, "rms_norm_eps", float),
    }


def config(path: str) -> Any:
    """The tunix ModelConfig the config.json describes (sharding, remat and dtype are set by
    shared.models.family.Family.config, as for a preset)."""
    f = read(path)
    family = family_name(path)
    if family == "gemma3":
        return _gemma3(path)
    common = shapes(path)
    tied = bool(f.get("tie_word_embeddings", False))
    if family == "llama3":
        from tunix.models.llama3 import model as llama3_lib

        hidden = _field(f, path, "intermediate_size")
        return llama3_lib.ModelConfig(**common, hidden_dim=hidden, weight_tying=tied)
    from tunix.models.qwen3 import model as qwen3_lib

    if f.get("num_experts"):
        experts = {
            "num_experts": _field(f, path, "num_experts"),
            "num_experts_per_tok": _field(f, path, "num_experts_per_tok"),
        }
        hidden = _field(f, path, "moe_intermediate_size")
    else:
        experts, hidden = {}, _field(f, path, "intermediate_size")
    return qwen3_lib.ModelConfig(**common, hidden_dim=hidden, use_tied_embedding=tied, **experts)


def _gemma3(path: str) -> Any:
    """Gemma 3's text model: tunix's ModelConfig fields from the config's (the old names,
    rope_theta / rope_local_base_freq / rope_scaling / sliding_window_pattern, or the newer
    rope_parameters and layer_types)."""
    from tunix.models.gemma3 import model as gemma3_lib

    f = read(path)
    if f.get("model_type") == "gemma3":
        f = {**GEMMA3_TEXT_DEFAULTS, **(f.get("text_config") or {})}
    for name in ("attn_logit_softcapping", "final_logit_softcapping"):
        if f.get(name) is not None:
            raise BadInput(f"{path}: {name} {f[name]} is a soft-cap tunix's Gemma 3 does not take")
    rope = f.get("rope_parameters") or {}
    local = rope.get("sliding_attention", {}).get("rope_theta", f.get("rope_local_base_freq"))
    global_ = rope.get("full_attention", {}).get("rope_theta", f.get("rope_theta"))
    scaling = rope.get("full_attention") or f.get("rope_scaling") or {}
    types = f.get("layer_types")
    layers = _field(f, path, "num_hidden_layers")
    cycle = ["sliding_attention"] * (GEMMA3_PATTERN - 1) + ["full_attention"]
    if types is not None and list(types) != [cycle[i % GEMMA3_PATTERN] for i in range(layers)]:
        raise BadInput(
            f"{path}: layer_types is not tunix's Gemma 3 cycle of five sliding, one full"
        )
    if types is None and f.get("sliding_window_pattern", GEMMA3_PATTERN) != GEMMA3_PATTERN:
        raise BadInput(
            f"{path}: sliding_window_pattern {f['sliding_window_pattern']} is not tunix's "
            f"Gemma 3 cycle of {GEMMA3_PATTERN}"
        )
    heads, width, head_dim = (
        _field(f, path, "num_attention_heads"),
        _field(f, path, "hidden_size"),
        _field(f, path, "head_dim"),
    )
    norm = gemma3_lib.QueryPreAttentionNormalisation
    by_scalar = {head_dim: norm.BY_ONE_OVER_SQRT_HEAD_DIM}
    by_scalar.setdefault(width // heads, norm.BY_ONE_OVER_SQRT_EMBED_DIM_DIV_NUM_HEADS)
    kv_heads = _field(f, path, "num_key_value_heads")
    if heads % kv_heads:
        raise BadInput(
            f"{path}: num_attention_heads {heads} is not a multiple of num_key_value_heads "
            f"{kv_heads}, so the heads do not split into KV groups"
        )
    scalar = _field(f, path, "query_pre_attn_scalar")
    if scalar not in by_scalar:
        raise BadInput(
            f"{path}: query_pre_attn_scalar {scalar} is neither head_dim ({head_dim}) nor "
            f"hidden_size / num_attention_heads ({width // heads}), the two tunix's Gemma 3 takes"
        )
    return gemma3_lib.ModelConfig(
        num_layers=layers,
        num_embed=_field(f, path, "vocab_size"),
        embed_dim=width,
        hidden_dim=_field(f, path, "intermediate_size"),
        num_heads=heads,
        head_dim=head_dim,
        num_kv_heads=kv_heads,
        sliding_window_size=_field(f, path, "sliding_window"),
        local_base_frequency=int(local or 10_000),
        global_base_frequency=int(global_ or 10_000),
        global_scale_factor=float(scaling.get("factor", 1.0)),
        query_pre_attn_norm=by_scalar[scalar],
    )
