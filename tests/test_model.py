"""The decoder: configs, parameter counts against sizing, variants, sharded init, sampling."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from shared import sizing
from shared.errors import BadInput
from shared.hardware import sharding
from shared.pretrain import model as M
from shared.pretrain import sample


@pytest.fixture(scope="module")
def tiny():
    return M.init(M.config("tiny"), seed=0)


def tokens(B, T, V, seed=1):
    return jnp.asarray(np.random.default_rng(seed).integers(0, V, (B, T)), jnp.int32)


# ---------------------------------------------------------------------------- configs


def test_configs_and_overrides():
    c = M.config("130m")
    assert (c.L, c.D, c.N, c.K, c.H, c.F, c.V, c.T, c.tied) == (
        8,
        1024,
        4,
        1,
        256,
        3072,
        32768,
        2048,
        False,
    )
    assert c.sizes is sizing.PRESETS["pretrain-130m"]
    t = M.config("tiny", V=M.padded_vocab(8000), mlp="relu2", tied=True)
    assert (t.V, t.mlp, t.tied) == (8192, "relu2", True)
    assert t.dims().mlp_matrices == 2 and t.dims().tied
    assert M.config("tiny").V % 256 == 0
    with pytest.raises(BadInput, match="unknown model config 'huge'; valid: 130m, tiny"):
        M.config("huge")
    with pytest.raises(BadInput, match="unknown model override depth; valid: L, D"):
        M.config("tiny", depth=3)
    with pytest.raises(
        BadInput,
        match=r"unknown mlp 'gelu' \(did you mean 'relu2' or 'swiglu'\?\); valid: swiglu, relu2",
    ):
        M.config("tiny", mlp="gelu")
    with pytest.raises(BadInput, match="multiple of K=3"):
        M.config("tiny", K=3)
    with pytest.raises(BadInput, match="unknown attention implementation"):
        M.config("tiny", attention="flash")


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"tied": True},
        {"mlp": "relu2"},
        {"qk_norm": True},
        {"embed_norm": True, "logit_softcap": 30.0},
        {"K": 4, "tied": True, "qk_norm": True},
    ],
)
def test_param_count_equals_sizing(overrides):
    for name in ("tiny", "130m"):
        cfg = M.config(name, **overrides)
        _, state = M.abstract_model(cfg)  # eval_shape: nothing allocated
        assert M.count_params(state) == sizing.param_counts(cfg.dims())["total"]


def test_130m_is_the_reference_size():
    _, state = M.abstract_model(M.config("130m"))
    counts = sizing.param_counts(M.config("130m").dims())
    assert M.count_params(state) == counts["total"] == 163_595_264  # 163.6M
    assert counts["non_embedding"] == 130_040_832  # 130.0M


def test_weights_in_head_shape():
    c = M.config("130m", qk_norm=True)
    _, s = M.abstract_model(c)
    L, D, N, K, H, F, V = c.L, c.D, c.N, c.K, c.H, c.F, c.V
    shapes = {
        "wq": (L, D, N, H),
        "wk": (L, D, K, H),
        "wv": (L, D, K, H),
        "wo": (L, N, H, D),
        "w_gate": (L, D, F),
        "w_up": (L, D, F),
        "w_down": (L, F, D),
        "attn_norm": (L, D),
        "q_norm": (L, H),
    }
    for name, shape in shapes.items():
        assert s["layers"][name].shape == shape, name
    assert s["embed"].shape == s["lm_head"].shape == (V, D)


# ---------------------------------------------------------------------------- running


def test_tiny_forward(tiny):
    c = tiny.config
    x = tokens(2, 64, c.V)
    h = nnx.jit(lambda m, x: m.hidden(x))(tiny, x)
    assert h.shape == (2, 64, c.D) and h.dtype == jnp.bfloat16
    assert tiny.lm_head_weight().shape == (c.V, c.D)
    logits = nnx.jit(lambda m, x: m(x))(tiny, x)
    assert logits.shape == (2, 64, c.V) and logits.dtype == jnp.float32
    assert bool(jnp.all(jnp.isfinite(logits)))
    # Unit-scale logits at init: the loss starts near ln V.
    assert 0.5 < float(jnp.std(logits)) < 2.0


def test_all_knobs_run_and_are_causal():
    """Tied, ReLU², QK-norm, embedding norm, softcap, remat, unrolled layers: forward + grad."""
    c = M.config(
        "tiny",
        L=1,
        tied=True,
        mlp="relu2",
        qk_norm=True,
        embed_norm=True,
        logit_softcap=5.0,
        remat="dots",
        scan_layers=False,
    )
    m = M.init(c, seed=3)
    assert m.lm_head is None
    np.testing.assert_array_equal(m.lm_head_weight(), m.embed[...].astype(jnp.bfloat16))
    graphdef, params = nnx.split(m)

    def loss(params, x):
        logits = nnx.merge(graphdef, params)(x)
        return jnp.mean(logits[:, :8] ** 2), logits

    f = jax.jit(jax.value_and_grad(loss, has_aux=True))
    x = tokens(2, 16, c.V)
    (value, logits), grads = f(params, x)
    assert logits.shape == (2, 16, c.V) and float(jnp.max(jnp.abs(logits))) <= 5.0
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree.leaves(grads))
    assert float(jnp.abs(grads["layers"]["q_norm"][...]).sum()) > 0
    # Changing the last 8 tokens leaves the first 8 positions' logits alone.
    (_, logits2), _ = f(params, x.at[:, 8:].set((x[:, 8:] + 1) % c.V))
    np.testing.assert_allclose(logits2[:, :8], logits[:, :8], atol=1e-6)
    assert not np.allclose(logits2[:, 8:], logits[:, 8:])


def test_generate(tiny):
    prompt = tokens(2, 5, tiny.config.V)
    out = sample.generate(
        tiny, prompt, steps=4, temperature=0.8, key=jax.random.key(0), valid_vocab=100
    )
    assert out.shape == (2, 9)
    np.testing.assert_array_equal(out[:, :5], prompt)
    assert bool(jnp.all(out[:, 5:] < 100))
    with pytest.raises(BadInput):
        sample.generate(tiny, prompt, steps=2, temperature=-1.0)


# ---------------------------------------------------------------------------- sharding


def _largest_buffer(hlo_text: str) -> int:
    shapes = re.findall(r"\b[a-z][a-z0-9]*\[([0-9,]+)\]", hlo_text)
    return max(int(np.prod([int(d) for d in s.split(",")])) for s in shapes)


def test_sharded_init_holds_only_shards():
    cfg = M.config("tiny", V=16384, L=2, dtype="float32")  # fp32: sharded == plain, tightly
    mesh = sharding.make_mesh("4x2")  # over the 8 CPU devices
    init, graphdef = M.sharded_initializer(cfg, mesh)
    _, abstract = M.abstract_model(cfg, mesh)
    compiled = init.lower(jnp.int32(0)).compile()

    # The jit's outputs are the sharded layouts of the abstract model.
    leaves = jax.tree.leaves(abstract)
    got = jax.tree.leaves(compiled.output_shardings)
    assert len(got) == len(leaves)
    assert all(g.is_equivalent_to(a.sharding, a.ndim) for g, a in zip(got, leaves, strict=True))

    # No buffer of the per-device program, at any step, is bigger than an embedding shard,
    # and the device's temporaries plus outputs stay below one whole table.
    shard = cfg.V * cfg.D // 8
    assert _largest_buffer(compiled.as_text()) <= shard
    mem = compiled.memory_analysis()
    assert mem.temp_size_in_bytes + mem.output_size_in_bytes < cfg.V * cfg.D * 4

    model = nnx.merge(graphdef, compiled(jnp.int32(0)))
    embed = model.embed[...]
    assert embed.sharding.spec == jax.P("tp", "fsdp")
    assert {s.data.shape for s in embed.addressable_shards} == {(cfg.V // 2, cfg.D // 4)}
    # K=2 kv heads split over tp=2; a K=1 model would replicate them (next test).
    assert model.layers.wk[...].sharding.spec == jax.P(None, "fsdp", "tp", None)

    # Same numbers as a single-device init (partitionable threefry), and the sharded model
    # runs under the mesh to the same logits.
    plain = M.init(cfg, seed=0)
    np.testing.assert_array_equal(plain.embed[...], embed)
    x = tokens(4, 32, cfg.V)
    forward = nnx.jit(lambda m, x: m(x))
    with jax.set_mesh(mesh):
        sharded_logits = forward(model, x)
    np.testing.assert_allclose(sharded_logits, forward(plain, x), atol=1e-4, rtol=1e-4)


def test_abstract_130m_with_shardings():
    mesh = sharding.make_mesh("4x2")
    _, state = M.abstract_model(M.config("130m"), mesh)
    embed = state["embed"].get_value()
    assert isinstance(embed, jax.ShapeDtypeStruct) and embed.dtype == jnp.float32
    assert embed.sharding.shard_shape(embed.shape) == (32768 // 2, 1024 // 4)
    # K=1 cannot split over tp=2: that axis is dropped, the kv heads replicated.
    assert state["layers"]["wk"].get_value().sharding.spec == jax.P(None, "fsdp", None, None)
    assert state["layers"]["wq"].get_value().sharding.spec == jax.P(None, "fsdp", "tp", None)
