"""--model path/to/config.json: a Hugging Face config read from a local file becomes the tunix
config of its family (shared.models.hf_config), and plans like a preset."""

import dataclasses
import json

import pytest
from conftest import cli_exit
from tunix.models.gemma3 import model as gemma3_lib
from tunix.models.llama3 import model as llama3_lib
from tunix.models.qwen3 import model as qwen3_lib

from shared.errors import BadInput
from shared.models import core, hf_config
from shared.plan import Request
from shared.plan.__main__ import main as plan_cli

# Llama 3.2 3B's config.json as Hugging Face ships it (its shape fields)
LLAMA_3B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 3072,
    "intermediate_size": 8192,
    "num_attention_heads": 24,
    "num_hidden_layers": 28,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "tie_word_embeddings": True,
    "vocab_size": 128256,
    "torch_dtype": "bfloat16",
}
QWEN3_30B_A3B = {
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "num_attention_heads": 32,
    "num_hidden_layers": 48,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": False,
    "vocab_size": 151936,
}

# Gemma 3 1B's config.json as Hugging Face ships it (text only), and 27B's (multimodal: its text
# model in text_config, giving only what differs from Gemma3TextConfig's defaults)
GEMMA3_1B = {
    "architectures": ["Gemma3ForCausalLM"],
    "model_type": "gemma3_text",
    "attn_logit_softcapping": None,
    "final_logit_softcapping": None,
    "head_dim": 256,
    "hidden_size": 1152,
    "intermediate_size": 6912,
    "num_attention_heads": 4,
    "num_hidden_layers": 26,
    "num_key_value_heads": 1,
    "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06,
    "rope_local_base_freq": 10000,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": 512,
    "sliding_window_pattern": 6,
    "vocab_size": 262144,
}
GEMMA3_27B = {
    "architectures": ["Gemma3ForConditionalGeneration"],
    "model_type": "gemma3",
    "text_config": {
        "head_dim": 128,
        "hidden_size": 5376,
        "intermediate_size": 21504,
        "model_type": "gemma3_text",
        "num_attention_heads": 32,
        "num_hidden_layers": 62,
        "num_key_value_heads": 16,
        "query_pre_attn_scalar": 168,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "sliding_window": 1024,
    },
    "vision_config": {"model_type": "siglip_vision_model"},
}


def _write(tmp_path, fields, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(fields))
    return str(path)


def _shape_fields(cfg) -> dict:
    skip = {"shd_config", "remat_config", "dtype", "param_dtype"}
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in skip}


@pytest.mark.parametrize(
    ("fields", "preset"),
    [
        (LLAMA_3B, llama3_lib.ModelConfig.llama3p2_3b),
        (QWEN3_30B_A3B, qwen3_lib.ModelConfig.qwen3_30b_a3b),
        (GEMMA3_1B, gemma3_lib.ModelConfig.gemma3_1b_it),
    ],
)
def test_a_config_json_is_the_preset_tunix_ships_for_it(tmp_path, fields, preset):
    path = _write(tmp_path, fields)
    assert _shape_fields(hf_config.config(path)) == _shape_fields(preset())
    # and the model code takes it as it takes a preset: our layout, dtype and remat on top
    cfg = core.model_config(path, remat="block")
    assert cfg.num_layers == fields["num_hidden_layers"]
    assert core.model_dims(path).D == fields["hidden_size"]


def test_the_plan_cache_key_sees_an_edited_config(tmp_path):
    path = _write(tmp_path, LLAMA_3B)
    request = Request("sft", path, "v5e-8", seq=2048)
    before = request.key()
    _write(tmp_path, {**LLAMA_3B, "num_hidden_layers": 16})
    assert request.key() != before


def test_a_small_variant_plans_through_the_command_line(tmp_path, capsys):
    """Someone's own 2-layer Llama: a verdict from `--model config.json`, no code change."""
    small = {**LLAMA_3B, "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4}
    path = _write(
        tmp_path,
        {
            **small,
            "num_hidden_layers": 2,
            "num_key_value_heads": 2,
            "head_dim": 64,
            "vocab_size": 4096,
        },
    )
    assert (
        plan_cli(
            ["sft", "--model", path, "--target", "v5e-8", "--batch", "8", "--seq", "128", "--json"]
        )
        == 0
    )
    point = json.loads(capsys.readouterr().out)
    assert point["fits"] and point["model"] == path and point["devices"] == 8


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"model_type": "gemma2"}, "model_type 'gemma2' is not one this reads"),
        ({"num_hidden_layers": None}, "the field 'num_hidden_layers' is missing"),
        ({"num_key_value_heads": 5}, "not a multiple of num_key_value_heads 5"),
        ({"hidden_size": -1}, "hidden_size must be a positive integer"),
    ],
)
def test_a_config_that_cannot_be_a_model_gets_one_line_naming_the_field(
    tmp_path, edit, message, capsys
):
    fields = {k: v for k, v in {**LLAMA_3B, **edit}.items() if v is not None}
    path = _write(tmp_path, fields)
    with pytest.raises(BadInput, match=message):
        hf_config.config(path)
    code, err = cli_exit(plan_cli, ["sft", "--model", path, "--target", "v5e-8"], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_a_file_that_is_no_config_gets_one_line(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(BadInput, match="is not JSON"):
        hf_config.config(str(bad))
    with pytest.raises(BadInput, match="no model config at"):
        hf_config.config(str(tmp_path / "missing.json"))


def test_a_multimodal_gemma3_config_is_its_text_model_with_hugging_faces_defaults(tmp_path):
    """27B's text_config: tunix's preset but for the vocabulary, 262,208 rows in Hugging Face's
    checkpoint (its image tokens included) where tunix's preset has 262,144."""
    cfg = hf_config.config(_write(tmp_path, GEMMA3_27B))
    preset = gemma3_lib.ModelConfig.gemma3_27b_it()
    assert cfg.num_embed == hf_config.GEMMA3_TEXT_DEFAULTS["vocab_size"] == 262_208
    assert _shape_fields(dataclasses.replace(cfg, num_embed=262_144)) == _shape_fields(preset)


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        ({"final_logit_softcapping": 30.0}, "final_logit_softcapping 30.0 is a soft-cap"),
        ({"sliding_window_pattern": 4}, "sliding_window_pattern 4 is not tunix's"),
        ({"query_pre_attn_scalar": 100}, "query_pre_attn_scalar 100 is neither head_dim"),
        ({"layer_types": ["full_attention"] * 26}, "layer_types is not tunix's Gemma 3 cycle"),
    ],
)
def test_a_gemma3_config_tunix_cannot_take_names_the_field(tmp_path, edit, says):
    with pytest.raises(BadInput, match=says):
        hf_config.config(_write(tmp_path, {**GEMMA3_1B, **edit}))
