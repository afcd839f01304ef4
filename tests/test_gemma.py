"""shared.gemma on the 8-device CPU mesh: the tiny Gemma 3 for anything that runs, eval_shape
only for the real presets. No network: Kaggle is faked, tokenizers are trained here."""

import io
import json
import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import sentencepiece as spm
from flax import nnx

from shared import gemma, lora, sharding, sizing
from shared.errors import BadInput

V = 256  # the tiny model's vocabulary = the test tokenizer's
TEXT = """\
Shall I compare thee to a summer's day? Thou art more lovely and more temperate.
Rough winds do shake the darling buds of May, and summer's lease hath all too short a date.
Sometime too hot the eye of heaven shines, and often is his gold complexion dimm'd;
and every fair from fair sometime declines, by chance or nature's changing course untrimm'd.
But thy eternal summer shall not fade, nor lose possession of that fair thou ow'st;
nor shall Death brag thou wander'st in his shade, when in eternal lines to time thou grow'st.
So long as men can breathe or eyes can see, so long lives this, and this gives life to thee.
To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer
the slings and arrows of outrageous fortune, or to take arms against a sea of troubles.
""".splitlines()


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory):
    """A small SentencePiece model with Gemma's special ids (pad 0, eos 1, bos 2, unk 3)."""
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(TEXT),
        model_writer=buf,
        vocab_size=V,
        model_type="bpe",
        pad_id=0,
        eos_id=1,
        bos_id=2,
        unk_id=3,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    path = tmp_path_factory.mktemp("tok") / "tokenizer.model"
    path.write_bytes(buf.getvalue())
    return path


@pytest.fixture(scope="module")
def tok(tokenizer_file):
    return spm.SentencePieceProcessor(model_file=str(tokenizer_file))


@pytest.fixture(scope="module")
def mesh8():
    return sharding.make_mesh((8, 1))


@pytest.fixture(scope="module")
def mesh42():
    return sharding.make_mesh((4, 2))


@pytest.fixture(scope="module")
def model8(mesh8):
    return gemma.dummy_model("gemma3-tiny", mesh=mesh8, vocab_size=V)


@pytest.fixture(scope="module")
def sampler(model8, tok):
    return gemma.make_sampler(model8, tok, cache_size=40)


B, PROMPT, STEPS, CACHE = 8, 12, 20, 40  # PROMPT is not a power of two on purpose


@pytest.fixture(scope="module")
def rollout_result(sampler, mesh8):
    return gemma.rollout(sampler, gemma.random_prompts(B, PROMPT, V), STEPS, mesh=mesh8)


# ---------------------------------------------------------------------------- names and sizes


@pytest.mark.parametrize("name", [n for n in gemma.MODEL_NAMES if n != "gemma3-tiny"])
def test_config_dims_equal_sizing_presets(name):
    assert gemma.dims_from_config(name, gemma.model_config(name)) == sizing.preset(name)
    assert gemma.model_dims(name) == sizing.preset(name)


@pytest.mark.parametrize("name", ["gemma3-270m", "gemma3-1b"])
def test_sizing_param_count_equals_tunix_eval_shape(name):
    abstract = gemma.abstract_model(name)
    counted = sum(x.size for x in jax.tree.leaves(nnx.state(abstract)))
    assert counted == sizing.param_counts(sizing.preset(name))["total"]


def test_tiny_is_real_architecture_with_a_global_layer():
    dims = gemma.model_dims("gemma3-tiny")
    assert (dims.L, dims.N, dims.K, dims.V) == (6, 4, 1, gemma.TINY_VOCAB)
    abstract = gemma.abstract_model("gemma3-tiny", vocab_size=V)
    kinds = [layer.attn.attn_type.name for layer in abstract.layers]
    assert kinds == ["LOCAL_SLIDING"] * 5 + ["GLOBAL"]
    counted = sum(x.size for x in jax.tree.leaves(nnx.state(abstract)))
    assert counted == sizing.param_counts(gemma.model_dims("gemma3-tiny", vocab_size=V))["total"]


def test_bad_inputs_fail_with_one_line(mesh8, sampler):
    cases = [
        lambda: gemma.model_config("gemma3-2b"),
        lambda: sharding.make_mesh((3, 1)),
        lambda: gemma.load("gemma3-1b", "hf"),
        lambda: gemma.model_config("gemma3-1b", vocab_size=V),
        lambda: gemma.init_rollout_state(sampler, np.ones((6, 4), np.int32), 4, mesh=mesh8),
        lambda: gemma.init_rollout_state(sampler, np.ones((8, 30), np.int32), 20, mesh=mesh8),
        lambda: gemma.kaggle_handle("gemma3-tiny"),
    ]
    for case in cases:
        with pytest.raises(BadInput) as err:
            case()
        assert "\n" not in str(err.value)


# ---------------------------------------------------------------------------- loading


def test_dummy_model_shards_on_8_devices(mesh42):
    model = gemma.dummy_model("gemma3-tiny", mesh=mesh42, vocab_size=V, seed=3)
    D, F, H = 128, 512, 32
    expect = {  # weight -> per-device shard on fsdp=4 x tp=2
        "embedder.input_embedding": (model.embedder.input_embedding, (V // 2, D // 4)),
        "q_einsum": (model.layers[0].attn.q_einsum.w, (4 // 2, D // 4, H)),
        "kv_einsum": (model.layers[0].attn.kv_einsum.w, (2, 1, D // 4, H)),
        "gate_proj": (model.layers[0].mlp.gate_proj.kernel, (D // 4, F // 2)),
        "down_proj": (model.layers[0].mlp.down_proj.kernel, (F // 2, D // 4)),
        "norm": (model.final_norm.scale, (D // 2,)),
    }
    for what, (var, shard_shape) in expect.items():
        x = var.get_value()
        assert len(x.addressable_shards) == 8, what
        assert {s.data.shape for s in x.addressable_shards} == {shard_shape}, what
        # replicas of one shard agree (tunix's create_dummy_model draws one key per device)
        by_index = {}
        for s in x.addressable_shards:
            by_index.setdefault(str(s.index), []).append(np.asarray(s.data, np.float32))
        for copies in by_index.values():
            assert all(np.array_equal(copies[0], c) for c in copies[1:]), what
    emb = np.asarray(model.embedder.input_embedding.get_value(), np.float32)
    assert 0.015 < emb.std() < 0.025 and abs(emb.mean()) < 1e-3
    again = gemma.dummy_model("gemma3-tiny", mesh=mesh42, vocab_size=V, seed=3)
    assert np.array_equal(
        np.asarray(again.layers[2].mlp.up_proj.kernel.get_value(), np.float32),
        np.asarray(model.layers[2].mlp.up_proj.kernel.get_value(), np.float32),
    )


def test_dummy_load_uses_the_local_tokenizer(monkeypatch, tok, mesh8):
    import sys

    import shared

    calls = []
    fake = types.ModuleType("shared.data")
    fake.tokenizer = lambda vocab_size, **kw: calls.append((vocab_size, kw)) or tok
    monkeypatch.setitem(sys.modules, "shared.data", fake)
    monkeypatch.setattr(shared, "data", fake, raising=False)
    model, got = gemma.load("gemma3-tiny", mesh=mesh8, data_dir="somewhere")
    assert got is tok and calls == [(gemma.TINY_VOCAB, {"data_dir": "somewhere"})]
    assert model.config.num_embed == tok.get_piece_size()


def _upstream_params(model):
    """The model's weights in the upstream (Kaggle Flax) checkpoint layout tunix maps from."""

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
        out[p + "attn/_query_norm"] = {"scale": a(attn._query_norm.scale)}
        out[p + "attn/_key_norm"] = {"scale": a(attn._key_norm.scale)}
        out[p + "mlp/gating_einsum"] = {
            "w": np.stack([a(layer.mlp.gate_proj.kernel).T, a(layer.mlp.up_proj.kernel).T])
        }
        out[p + "mlp/linear"] = {"w": a(layer.mlp.down_proj.kernel)}
        for norm in ("pre_attention_norm", "post_attention_norm", "pre_ffw_norm", "post_ffw_norm"):
            out[p + norm] = {"scale": a(getattr(layer, norm).scale)}
    return out


def test_kaggle_path_loads_a_local_checkpoint(tmp_path, mesh42, tokenizer_file, monkeypatch):
    import orbax.checkpoint as ocp

    source = gemma.dummy_model("gemma3-tiny", mesh=mesh42, vocab_size=V, seed=7)
    download = tmp_path / "kaggle"  # laid out like kagglehub's download: ckpt dir + tokenizer
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(download / "gemma3-tiny-it", _upstream_params(source))
    checkpointer.wait_until_finished()
    (download / "tokenizer.model").write_bytes(tokenizer_file.read_bytes())
    calls = []

    def fake_download(name, variant):
        calls.append((name, variant))
        return download

    model, tok = gemma.load(
        "gemma3-tiny", "kaggle", mesh=mesh42, vocab_size=V, download=fake_download
    )
    assert calls == [("gemma3-tiny", None)]
    assert tok.pad_id() == 0 and tok.get_piece_size() <= V
    for got, want in [
        (model.layers[3].mlp.gate_proj.kernel, source.layers[3].mlp.gate_proj.kernel),
        (model.layers[0].attn.kv_einsum.w, source.layers[0].attn.kv_einsum.w),
        (model.embedder.input_embedding, source.embedder.input_embedding),
    ]:
        g, w = got.get_value(), want.get_value()
        assert g.sharding.is_equivalent_to(w.sharding, g.ndim) and g.dtype == jnp.bfloat16
        assert np.array_equal(np.asarray(g, np.float32), np.asarray(w, np.float32))


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
    with pytest.raises(BadInput) as err:
        gemma.load("gemma3-1b", "kaggle")
    msg = str(err.value)
    assert "\n" not in msg
    for needed in (
        "KAGGLE_API_TOKEN",
        "KAGGLE_USERNAME",
        "KAGGLE_KEY",
        "kaggle.json",
        "licence",
        "kaggle.com/models/google/gemma-3",
    ):
        assert needed in msg


@pytest.mark.parametrize("how", ["token", "legacy", "file"])
def test_kaggle_credentials_found_then_download(monkeypatch, tmp_path, how):
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
    assert gemma.kaggle_download("gemma3-1b") == tmp_path
    assert handles == ["google/gemma-3/flax/gemma3-1b-it"]


# ---------------------------------------------------------------------------- rollouts


def test_rollout_reports_generated_tokens_and_kv_cache(rollout_result, sampler):
    result = rollout_result
    buf = np.asarray(result.state.token_buffer)
    assert buf.shape == (B, PROMPT + STEPS)  # padded to PROMPT, not to 16
    assert result.prefill_s > 0 and result.decode_s > 0
    assert result.tokens.shape == (B,) and (result.tokens >= 1).all()
    assert (result.tokens <= STEPS).all()
    for row, n in zip(buf[:, PROMPT:], result.tokens, strict=True):
        eos = np.flatnonzero(row == gemma.EOS_ID)
        assert n == (eos[0] + 1 if len(eos) else STEPS) - np.sum(row[:n] == gemma.PAD_ID)
    assert gemma.cache_bytes(result.state) == gemma.kv_cache_bytes(
        "gemma3-tiny", B, CACHE, vocab_size=V
    )


def test_generated_tokens_counts_up_to_eos_without_pads():
    fake = types.SimpleNamespace(
        eos_ids=jnp.array([1]), tokenizer=types.SimpleNamespace(pad_id=lambda: 0)
    )
    buf = np.array(
        [
            [9, 9, 5, 6, 1, 7, 7],  # EOS at 3rd generated: 3 tokens incl. EOS
            [9, 9, 5, 6, 7, 8, 9],  # no EOS: all 5
            [9, 9, 5, 0, 6, 1, 0],
        ]
    )  # a generated pad is not a token: 3
    state = types.SimpleNamespace(token_buffer=buf)
    assert gemma.generated_tokens(fake, state, prompt_len=2).tolist() == [3, 5, 3]


def test_stop_at_eos_sets_eos_ids_once(model8, tok):
    assert gemma.make_sampler(model8, tok, 16).eos_ids.tolist() == [tok.eos_id()]
    # never stop early: fixed step counts for timing random weights
    assert gemma.make_sampler(model8, tok, 16, stop_at_eos=False).eos_ids.tolist() == [-1]


def test_abstract_rollout_compiles_and_runs_the_real_arrays(sampler, mesh8, rollout_result):
    ar = gemma.abstract_rollout("gemma3-tiny", B, PROMPT, STEPS, CACHE, mesh=mesh8, vocab_size=V)
    leaves = jax.tree.leaves((ar.params, ar.state, ar.decode_state))
    assert leaves and all(isinstance(x, jax.ShapeDtypeStruct) for x in leaves)
    batch_sharded = jax.sharding.NamedSharding(mesh8, jax.sharding.PartitionSpec("fsdp"))
    assert ar.state.cache["layer_0"]["k"].sharding.is_equivalent_to(batch_sharded, 4)
    prefill_c = ar.lower_prefill().compile()
    decode_c = ar.lower_decode().compile()
    for compiled in (prefill_c, decode_c):
        mem = compiled.memory_analysis()
        assert mem.argument_size_in_bytes > 0 and mem.temp_size_in_bytes >= 0
    # The executables compiled from abstract arguments accept the device-mode arguments as
    # they are: same functions, same shapes, same shardings.
    state = gemma.init_rollout_state(sampler, gemma.random_prompts(B, PROMPT, V), STEPS, mesh=mesh8)
    state = prefill_c(sampler._flattened_transformer_state, state, None)
    state = decode_c(sampler._flattened_transformer_state, state)
    assert np.array_equal(
        np.asarray(state.token_buffer), np.asarray(rollout_result.state.token_buffer)
    )


def test_text_prompts_left_pad_to_exact_length(sampler):
    ids = gemma.text_prompts(sampler, ["Shall I compare thee", "To be"], 16)
    assert ids.shape == (2, 16) and ids.dtype == np.int32
    first = np.argmax(ids != gemma.PAD_ID, axis=1)
    assert (ids[np.arange(2), first] == gemma.BOS_ID).all()
    assert (ids[1, : first[1]] == gemma.PAD_ID).all()


# ---------------------------------------------------------------------------- LoRA


RANK, ALPHA = 4, 8.0


@pytest.fixture(scope="module")
def base42(mesh42):
    return gemma.dummy_model("gemma3-tiny", mesh=mesh42, vocab_size=V, seed=1)


@pytest.fixture(scope="module")
def lora42(base42, mesh42):
    adapted = lora.apply_lora(base42, RANK, ALPHA, mesh=mesh42)
    for i, (module, attr) in enumerate(lora._lora_modules(adapted)):  # B starts at zero
        b = getattr(module, f"{attr}_lora_b")
        value = 0.05 * jax.random.normal(jax.random.key(i), b.shape, jnp.float32)
        b.set_value(jax.device_put(value.astype(b.dtype), b.get_value().sharding))
    return adapted


def test_lora_adds_the_expected_parameters_and_shares_the_base(base42, lora42):
    dims = gemma.model_dims("gemma3-tiny", vocab_size=V)
    expected = lora.expected_lora_param_count(dims, RANK)
    assert lora.lora_param_count(lora42) == expected
    assert gemma.param_count(lora42) == gemma.param_count(base42) + expected
    abstract = gemma.abstract_model("gemma3-tiny", vocab_size=V, lora_rank=RANK, lora_alpha=ALPHA)
    assert lora.lora_param_count(abstract) == expected
    q = lora42.layers[0].attn.q_einsum
    assert q.w_lora_a.shape == (128, RANK) and q.w_lora_b.shape == (RANK, 4, 32)
    assert q.w_lora_a.get_value().sharding.spec == jax.sharding.PartitionSpec("fsdp", None)
    # qwix clones the module graph but (flax 0.12 nnx.clone) not the weight buffers
    emb = lora42.embedder.input_embedding.get_value()
    assert emb is base42.embedder.input_embedding.get_value()
    assert lora.free_base(base42, keep=lora42) == 0


def test_lora_rollout_abstract_lowering_equals_device_lowering(lora42, tok, mesh42):
    sampler = gemma.make_sampler(lora42, tok, CACHE)
    state = gemma.init_rollout_state(
        sampler, gemma.random_prompts(B, PROMPT, V), STEPS, mesh=mesh42
    )
    real = sampler._compiled_prefill_fn.lower(
        sampler._flattened_transformer_state, state, None, echo=False
    )
    ar = gemma.abstract_rollout(
        "gemma3-tiny",
        B,
        PROMPT,
        STEPS,
        CACHE,
        mesh=mesh42,
        vocab_size=V,
        lora_rank=RANK,
        lora_alpha=ALPHA,
    )
    assert ar.lower_prefill().as_text() == real.as_text()


def test_merge_export_reload_round_trip(lora42, mesh42, tmp_path):
    merged = lora.merge_lora(lora42, RANK, ALPHA)
    assert lora.lora_param_count(merged) == 0
    # each merged einsum weight computes what qwix's LoRA einsum computes (f32, on host)
    rng = np.random.default_rng(0)
    for module, attr in lora._lora_modules(lora42):
        if attr != "w":
            continue
        path = module.qwix_path
        target = merged
        for key in path:
            target = target[key] if isinstance(key, int) else getattr(target, key)
        lhs_str, rhs_str = module.einsum_str.split("->")[0].split(",")
        x = rng.standard_normal(
            [module.w.shape[rhs_str.index(c)] if c in rhs_str else 2 for c in lhs_str]
        )
        f32 = lambda v: np.asarray(v.get_value(), np.float32)  # noqa: E731
        a, b, w = f32(module.w_lora_a), f32(module.w_lora_b), f32(module.w)
        lora_out = np.einsum(module.einsum_str, x, w) + np.einsum(
            module.w_lora_einsum_str, x, a, b
        ) * (ALPHA / RANK)
        merged_out = np.einsum(module.einsum_str, x, f32(target.w))
        np.testing.assert_allclose(merged_out, lora_out, rtol=0.02, atol=0.02)
    tokens = gemma.random_prompts(8, 16, V, seed=1)
    lora_logits = np.asarray(gemma.full_logits(lora42, tokens), np.float32)
    merged_logits = np.asarray(gemma.full_logits(merged, tokens), np.float32)
    effect = np.abs(
        lora_logits
        - np.asarray(gemma.full_logits(lora.merge_lora(lora42, RANK, 0.0), tokens), np.float32)
    ).max()
    assert effect > 0.1  # the adapters matter, so agreement below is not trivial
    assert np.abs(merged_logits - lora_logits).max() <= 0.1 * effect  # bf16 rounding only

    path = lora.export_safetensors(merged, tmp_path / "merged")
    from safetensors.numpy import load_file

    tensors = load_file(str(path))
    assert tensors["model.layers.0.self_attn.q_proj.weight"].shape == (4 * 32, 128)
    assert tensors["model.layers.0.self_attn.k_proj.weight"].shape == (32, 128)
    assert tensors["model.layers.0.mlp.down_proj.weight"].shape == (128, 512)
    assert json.loads((tmp_path / "merged" / "config.json").read_text())["vocab_size"] == V
    reloaded = lora.load_safetensors(tmp_path / "merged", "gemma3-tiny", mesh=mesh42, vocab_size=V)
    want = jax.tree.leaves(nnx.state(merged))
    got = jax.tree.leaves(nnx.state(reloaded))
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.sharding.is_equivalent_to(w.sharding, g.ndim)
        assert np.array_equal(np.asarray(g, np.float32), np.asarray(w, np.float32))


def test_lora_train_step_compiles_abstractly_and_loss_falls(lora42, mesh42):
    optimizer = optax.adam(1e-2)
    args = lora.abstract_lora_train_args(
        "gemma3-tiny", 8, 16, RANK, ALPHA, mesh=mesh42, optimizer=optimizer, vocab_size=V
    )
    step = lora.lora_train_step.lower(*args).compile()
    graph, lora_params, base_params = lora.split_lora(lora42)
    lora_params = jax.tree.map(jnp.copy, lora_params)  # the step donates; keep lora42 intact
    opt_state = lora.init_opt_state(optimizer, lora_params, mesh=mesh42)
    base_before = np.asarray(
        base_params["layers"][0]["mlp"]["up_proj"]["kernel"].get_value(), np.float32
    )
    tokens = lora.shard_batch(gemma.random_prompts(8, 17, V, seed=5), mesh42)
    losses = []
    for _ in range(5):  # the AOT executable takes the real arrays: same shapes and shardings
        lora_params, opt_state, loss = step(lora_params, base_params, opt_state, tokens)
        losses.append(float(loss))
    assert losses[-1] < losses[0] - 0.05, losses
    assert np.array_equal(
        np.asarray(base_params["layers"][0]["mlp"]["up_proj"]["kernel"].get_value(), np.float32),
        base_before,
    )
    # device mode calls the jitted function: it lowers to the same program
    real = lora.lora_train_step.lower(
        graph, optimizer, lora_params, base_params, opt_state, tokens
    )
    assert real.as_text() == lora.lora_train_step.lower(*args).as_text()


def test_teacher_forced_top_k_full_and_chunked_agree(mesh8):
    model = gemma.dummy_model("gemma3-tiny", mesh=mesh8, vocab_size=V, seed=3)
    graphdef, state = nnx.split(model)
    tokens = jnp.asarray(gemma.random_prompts(8, 24, V, seed=1))
    graph = gemma.StaticGraph(graphdef)
    full = gemma.teacher_forced_top_k(graph, state, tokens, mode="full", k=8)
    chunked = gemma.teacher_forced_top_k(graph, state, tokens, mode="topk", k=8)
    np.testing.assert_allclose(np.asarray(full[0], np.float32), np.asarray(chunked[0],
                                                                           np.float32),
                               atol=2e-2, rtol=2e-2)  # bf16 logits, different summation order
    reference = jax.lax.top_k(gemma.full_logits(model, tokens), 8)[1]
    np.testing.assert_array_equal(full[1], reference)


def test_forward_lowers_with_abstract_arguments(mesh8):
    args, kwargs = gemma.abstract_forward_args("gemma3-tiny", 8, 32, mesh=mesh8, vocab_size=V)
    for mode in gemma.LOGITS_MODES:
        compiled = gemma.teacher_forced_top_k.lower(*args, mode=mode, k=4, **kwargs).compile()
        assert compiled.memory_analysis().argument_size_in_bytes > 0
