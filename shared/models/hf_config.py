"""A model that is no preset: its Hugging Face `config.json`, read from a local file (nothing
downloads), as the tunix config of its family, so Llama 3.2 3B, Qwen3 4B or someone's own
700M variant plans without a code change: `--model path/to/config.json`.

tunix ships no reader of these (tunix.models.naming maps preset names to config factories),
so this maps each family's fields by hand, the ones tunix's own presets note beside each value
("num_layers=28,  # <- from num_hidden_layers"). Llama (model_type "llama") and Qwen 3 ("qwen3",
and "qwen3_moe" with its experts) are read; a Gemma config has attention patterns and
soft-caps this does not map yet, and says so.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

from shared.errors import BadInput

# model_type -> our family's name
FAMILIES = {"llama": "llama3", "qwen3": "qwen3", "qwen3_moe": "qwen3"}


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
            "a Gemma config is not mapped yet: plan its preset (gemma3-4b ...)"
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
