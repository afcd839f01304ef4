"""shared.models: every family by name, on the CPU. Real presets only through nnx.eval_shape;
the tiny configs for anything that allocates. No network: Kaggle and Hugging Face are faked,
and the checkpoints the loaders read are written here."""

import json
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import TEST_VOCAB as V
from flax import nnx

from shared import lora, models, sizing
from shared.errors import BadInput
from shared.hardware import sharding

FAMILIES = sorted(models.FAMILIES)


def _equal(got, want):
    return np.array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))


# ---------------------------------------------------------------------------- names and sizes


def test_every_family_has_presets_and_a_tiny_config():
    for family in FAMILIES:
        assert f"{family}-tiny" in models.MODEL_NAMES
    for name in (
        "gemma2-2b",
        "gemma3-1b",
        "gemma4-31b",
        "gemma4-26b-a4b",
        "llama3.1-8b",
        "qwen3-8b",
        "qwen3-30b-a3b",
    ):
        assert models.family_of(name).presets[name] is not None


@pytest.mark.parametrize(
    "name",
    [
        "gemma2-2b",
        "gemma3-1b",
        "gemma3-27b",
        "llama3.2-1b",
        "llama3.1-8b",
        "qwen3-0.6b",
        "qwen3-8b",
    ],
)
def test_closed_form_parameters_equal_tunix_eval_shape(name):
    """The sizing view of each dense family counts exactly what tunix builds."""
    counted = models.param_count(models.abstract_model(name))
    assert counted == sizing.param_counts(models.model_dims(name))["total"]


@pytest.mark.parametrize("name", ["gemma3-270m", "gemma3-1b"])
def test_gemma3_dims_equal_the_sizing_presets(name):
    dims = models.model_dims(name)
    assert sizing.param_counts(dims) == sizing.param_counts(sizing.preset(name))


def test_weights_default_to_bf16_whatever_tunix_defaults_to():
    # tunix: Gemma 4 and Qwen 3 configs default to float32, Gemma 2 / Llama 3 build float32
    for name in ("gemma4-31b", "qwen3-8b", "gemma2-2b", "llama3.1-8b"):
        assert models.dtype_name(models.abstract_model(name)) == "bfloat16", name
    assert models.model_config("gemma4-31b").dtype == jnp.bfloat16  # activations and KV too
    assert models.dtype_name(models.abstract_model("qwen3-tiny", dtype=jnp.float32)) == "float32"


def test_tiny_configs_keep_their_architecture():
    kinds = [layer.attn.attn_type.name for layer in models.abstract_model("gemma3-tiny").layers]
    assert kinds == ["LOCAL_SLIDING"] * 5 + ["GLOBAL"]
    g4 = models.abstract_model("gemma4-tiny")
    assert hasattr(g4.layers[1].attn, "k_einsum")  # global layer: keys are values
    assert g4.layers[1].attn.head_dim > g4.layers[0].attn.head_dim
    assert not models.model_config("llama3-tiny").weight_tying
    assert models.model_config("qwen3-tiny").use_tied_embedding
    assert models.final_softcap(models.abstract_model("gemma2-tiny")) == 30.0


def test_bad_inputs_fail_with_one_line(mesh42):
    cases = [
        lambda: models.model_config("gemma3-2b"),
        lambda: models.model_config("gemma3-1b", vocab_size=V),
        lambda: models.model_config("qwen3-tiny", remat="everything"),
        lambda: models.load("qwen3-8b", "kaggle"),
        lambda: models.load("gemma3-tiny", "real"),
        lambda: models.load("gemma3-1b", "hf"),
        lambda: models.check_divisible(
            models.abstract_model("gemma3-tiny", vocab_size=255), mesh42, "gemma3-tiny"
        ),
        lambda: models.lora_provider(models.family_of("llama3-tiny"), 0, 1.0),
        lambda: sharding.make_mesh((3, 1)),
    ]
    for case in cases:
        with pytest.raises(BadInput) as err:
            case()
        assert "\n" not in str(err.value)


# ---------------------------------------------------------------------------- random weights


def test_dummy_model_shards_on_8_devices_and_replicas_agree(mesh42):
    model = models.dummy_model("gemma3-tiny", mesh=mesh42, vocab_size=V, seed=3)
    D, F, H = 128, 512, 32
    expect = {  # weight -> per-device shard on fsdp=4 x tp=2
        "embedder.input_embedding": (model.embedder.input_embedding, (V // 2, D // 4)),
        "q_einsum": (model.layers[0].attn.q_einsum.w, (4 // 2, D // 4, H)),
        "kv_einsum": (model.layers[0].attn.kv_einsum.w, (2, 1, D // 4, H)),
        "gate_proj": (model.layers[0].mlp.gate_proj.kernel, (D // 4, F // 2)),
        "norm": (model.final_norm.scale, (D // 2,)),
    }
    for what, (var, shard_shape) in expect.items():
        x = var.get_value()
        assert {s.data.shape for s in x.addressable_shards} == {shard_shape}, what
        by_index = {}  # tunix's create_dummy_model draws one key per device: replicas differ
        for s in x.addressable_shards:
            by_index.setdefault(str(s.index), []).append(np.asarray(s.data, np.float32))
        for copies in by_index.values():
            assert all(np.array_equal(copies[0], c) for c in copies[1:]), what
    emb = np.asarray(model.embedder.input_embedding.get_value(), np.float32)
    assert 0.015 < emb.std() < 0.025 and abs(emb.mean()) < 1e-3
    again = models.dummy_model("gemma3-tiny", mesh=mesh42, vocab_size=V, seed=3)
    assert _equal(
        again.layers[2].mlp.up_proj.kernel.get_value(),
        model.layers[2].mlp.up_proj.kernel.get_value(),
    )


def test_dummy_load_uses_the_local_tokenizer(monkeypatch, tok, mesh1):
    import shared

    calls = []
    fake = types.ModuleType("shared.data")
    fake.tokenizer = lambda vocab_size, **kw: calls.append((vocab_size, kw)) or tok
    monkeypatch.setitem(sys.modules, "shared.data", fake)
    monkeypatch.setattr(shared, "data", fake, raising=False)
    model, got = models.load("llama3-tiny", mesh=mesh1, data_dir="somewhere")
    assert got is tok and calls == [(models.TINY_VOCAB, {"data_dir": "somewhere"})]
    assert model.config.vocab_size == tok.get_piece_size()


@pytest.mark.parametrize("family", FAMILIES)
def test_hidden_states_feed_the_chunked_top_k_for_every_family(family, mesh1):
    model = models.dummy_model(f"{family}-tiny", mesh=mesh1, vocab_size=V, seed=2)
    tokens = jnp.asarray(np.random.default_rng(0).integers(4, V, (2, 12)), jnp.int32)
    hidden = models.hidden_states(model, tokens)
    assert hidden.shape == (2, 12, model.config.embed_dim)
    graphdef, state = nnx.split(model)
    graph = models.StaticGraph(graphdef)
    full = models.teacher_forced_top_k(graph, state, tokens, mode="full", k=8)
    chunked = models.teacher_forced_top_k(graph, state, tokens, mode="topk", k=8)
    np.testing.assert_allclose(
        np.asarray(full[0], np.float32), np.asarray(chunked[0], np.float32), atol=2e-2, rtol=2e-2
    )  # bf16 logits, other summation order
    assert (np.asarray(full[1]) == np.asarray(chunked[1])).mean() > 0.95  # near-ties may swap


def test_forward_lowers_with_abstract_arguments(mesh8):
    args, kwargs = models.abstract_forward_args("gemma3-tiny", 8, 32, mesh=mesh8, vocab_size=V)
    for mode in models.LOGITS_MODES:
        compiled = models.teacher_forced_top_k.lower(*args, mode=mode, k=4, **kwargs).compile()
        assert compiled.memory_analysis().argument_size_in_bytes > 0


# ---------------------------------------------------------------------------- real weights


def _upstream(model):
    """The weights in the upstream (Kaggle Flax) layout tunix's Gemma loaders map from: flat
    'transformer/layer_i/...' names, gate and up stacked in one gating_einsum ([2, F, D] for
    Gemma 3, [2, D, F] for Gemma 2). Gemma 3 adds q/k norms; tunix's Gemma 2 calls its
    post-attention norm post_attn_norm, upstream does not."""

    def a(var):
        return np.asarray(var.get_value(), np.float32)

    out = {
        "transformer/embedder": {"input_embedding": a(model.embedder.input_embedding)},
        "transformer/final_norm": {"scale": a(model.final_norm.scale)},
    }
    for i, layer in enumerate(model.layers):
        p, attn = f"transformer/layer_{i}/", layer.attn
        out[p + "attn/q_einsum"] = {"w": a(attn.q_einsum.w)}
        out[p + "attn/kv_einsum"] = {"w": a(attn.kv_einsum.w)}
        out[p + "attn/attn_vec_einsum"] = {"w": a(attn.attn_vec_einsum.w)}
        gemma3 = hasattr(attn, "_query_norm")
        if gemma3:
            out[p + "attn/_query_norm"] = {"scale": a(attn._query_norm.scale)}
            out[p + "attn/_key_norm"] = {"scale": a(attn._key_norm.scale)}
        gate, up = a(layer.mlp.gate_proj.kernel), a(layer.mlp.up_proj.kernel)  # [D, F]
        out[p + "mlp/gating_einsum"] = {"w": np.stack([gate.T, up.T] if gemma3 else [gate, up])}
        out[p + "mlp/linear"] = {"w": a(layer.mlp.down_proj.kernel)}
        post_attention = getattr(layer, "post_attention_norm", None) or layer.post_attn_norm
        out[p + "post_attention_norm"] = {"scale": a(post_attention.scale)}
        for norm in ("pre_attention_norm", "pre_ffw_norm", "post_ffw_norm"):
            out[p + norm] = {"scale": a(getattr(layer, norm).scale)}
    return out


@pytest.mark.parametrize("family", ["gemma2", "gemma3"])
def test_kaggle_path_loads_a_local_checkpoint(family, tmp_path, mesh42, tokenizer_file):
    import orbax.checkpoint as ocp

    name = f"{family}-tiny"
    source = models.dummy_model(name, mesh=mesh42, vocab_size=V, seed=7)
    params = _upstream(source)
    download = tmp_path / "kaggle"  # laid out like kagglehub's download: ckpt dir + tokenizer
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(download / f"{name}-it", params)
    checkpointer.wait_until_finished()
    (download / "tokenizer.model").write_bytes(tokenizer_file.read_bytes())
    calls = []
    model, tok = models.load(
        name, "kaggle", mesh=mesh42, vocab_size=V, download=lambda n: calls.append(n) or download
    )
    assert calls == [name] and tok.pad_id() == 0
    want, got = nnx.state(source), nnx.state(model)
    for (path, w), g in zip(
        jax.tree_util.tree_flatten_with_path(want)[0], jax.tree.leaves(got), strict=True
    ):
        assert g.dtype == jnp.bfloat16 and g.sharding.is_equivalent_to(w.sharding, g.ndim), path
        assert _equal(g, w), path


def _hf_tokenizer(folder):
    """A tiny Hugging Face tokenizer without a pad token (as Llama 3's), saved to `folder`."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    vocab = {
        "<unk>": 0,
        "<eos>": 1,
        "<bos>": 2,
        **{
            w: i + 3
            for i, w in enumerate(
                sorted({w for line in ("to be or not to be",) for w in line.split()})
            )
        },
    }
    core = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = Whitespace()
    PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>"
    ).save_pretrained(folder)


def test_huggingface_path_loads_a_local_checkpoint(tmp_path, mesh42):
    source = models.dummy_model("qwen3-tiny", mesh=mesh42, vocab_size=V, seed=5)
    folder = tmp_path / "hf"
    lora.export_safetensors(source, folder)
    _hf_tokenizer(folder)
    model, tok = models.load(
        "qwen3-tiny", "huggingface", mesh=mesh42, vocab_size=V, download=lambda name: folder
    )
    assert tok.pad_token_id == tok.eos_token_id  # tunix needs a pad id
    for g, w in zip(
        jax.tree.leaves(nnx.state(model)), jax.tree.leaves(nnx.state(source)), strict=True
    ):
        assert g.dtype == w.dtype and _equal(g, w)


def _no_kaggle_credentials(monkeypatch, tmp_path):
    from kagglehub import config as kaggle_config

    for var in (
        "KAGGLE_API_TOKEN",
        "KAGGLE_USERNAME",
        "KAGGLE_KEY",
        "KAGGLE_KERNEL_RUN_TYPE",
        "KAGGLE_API_V1_TOKEN_PATH",
        "KAGGLE_DATA_PROXY_URL",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # ~/.kaggle/access_token
    monkeypatch.setenv("KAGGLE_CONFIG_DIR", str(tmp_path / "kaggle"))  # kaggle.json
    monkeypatch.setattr(kaggle_config, "_kaggle_credentials", None)
    monkeypatch.setattr(
        "kagglehub.model_download", lambda *a, **k: pytest.fail("network call without credentials")
    )


def test_missing_kaggle_credentials_one_actionable_line(monkeypatch, tmp_path):
    _no_kaggle_credentials(monkeypatch, tmp_path)
    for name, page in (("gemma3-1b", "google/gemma-3"), ("gemma2-2b", "google/gemma-2")):
        with pytest.raises(BadInput) as err:
            models.load(name, "real")
        msg = str(err.value)
        assert "\n" not in msg
        for needed in (
            "KAGGLE_API_TOKEN",
            "KAGGLE_USERNAME",
            "kaggle.json",
            "licence",
            f"kaggle.com/models/{page}",
        ):
            assert needed in msg


@pytest.mark.parametrize("how", ["token", "legacy", "file"])
def test_kaggle_credentials_found_then_download(monkeypatch, tmp_path, how):
    from shared.models import weights

    _no_kaggle_credentials(monkeypatch, tmp_path)
    if how == "token":
        monkeypatch.setenv("KAGGLE_API_TOKEN", "KGAT_x")
    elif how == "legacy":
        monkeypatch.setenv("KAGGLE_USERNAME", "u")
        monkeypatch.setenv("KAGGLE_KEY", "k")
    else:
        (tmp_path / "kaggle").mkdir()
        (tmp_path / "kaggle" / "kaggle.json").write_text(json.dumps({"username": "u", "key": "k"}))
    handles = []
    monkeypatch.setattr("kagglehub.model_download", lambda h: handles.append(h) or str(tmp_path))
    assert weights.kaggle_download("gemma2-2b") == tmp_path
    assert handles == ["google/gemma-2/flax/gemma2-2b-it"]


@pytest.mark.parametrize("error", ["GatedRepoError", "LocalEntryNotFoundError"])
def test_huggingface_without_access_or_network_one_actionable_line(monkeypatch, error):
    import huggingface_hub
    from huggingface_hub import errors

    def refuse(repo, **kwargs):
        cls = getattr(errors, error)
        if issubclass(cls, errors.HfHubHTTPError):  # needs an HTTP response to build
            import httpx

            response = httpx.Response(403, request=httpx.Request("GET", "https://hf.co"))
            raise cls(f"{repo}: refused", response=response)
        raise cls(f"{repo}: refused")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", refuse)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with pytest.raises(BadInput) as err:
        models.load("llama3.1-8b", "real")
    msg = str(err.value)
    assert "\n" not in msg and "meta-llama/Llama-3.1-8B-Instruct" in msg
    assert ("HF_TOKEN" in msg) == (error == "GatedRepoError")
