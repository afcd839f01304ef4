"""AdamW, its schedule and decay mask, and scan-based gradient accumulation."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from shared.errors import BadInput
from shared.pretrain import model as M
from shared.pretrain import optim


def test_schedule_boundaries():
    lr, total = 1e-3, 100
    fn = jax.jit(jax.vmap(optim.schedule(lr, total, warmup_steps=10, warmdown=0.2)))
    s = np.asarray(fn(jnp.arange(total + 1)))
    np.testing.assert_allclose(s[[0, 4, 9]], [lr / 10, lr / 2, lr], rtol=1e-6)  # warm-up
    np.testing.assert_allclose(s[10:81], lr, rtol=1e-6)  # constant through warm-down start
    np.testing.assert_allclose(
        s[[81, 90, 99, 100]], [lr * 19 / 20, lr / 2, lr / 20, 0.0], rtol=1e-6, atol=1e-12
    )
    assert np.all(np.diff(s[80:]) < 0)
    # An int warm-down is steps; a final fraction stops above zero.
    same = jax.vmap(optim.schedule(lr, total, 10, 20))(jnp.arange(total + 1))
    np.testing.assert_allclose(same, s, rtol=1e-6)
    floor = optim.schedule(lr, total, 0, 50, final_fraction=0.1)
    np.testing.assert_allclose(
        [floor(0), floor(50), floor(75), floor(100)], [lr, lr, lr * 0.55, lr * 0.1], rtol=1e-6
    )


def test_schedule_bad_inputs():
    with pytest.raises(BadInput, match="warmup .* <= total_steps"):
        optim.schedule(1e-3, 100, warmup_steps=60, warmdown=50)
    with pytest.raises(BadInput, match="fraction must be in"):
        optim.schedule(1e-3, 100, warmdown=1.5)
    with pytest.raises(BadInput, match="lr > 0"):
        optim.make_optimizer(0.0, 0.1, 100)


def test_decay_mask_skips_norms_even_when_stacked():
    _, state = M.abstract_model(M.config("tiny", qk_norm=True))
    for tree in (state, nnx.to_pure_dict(state)):
        mask = {
            optim._path_text(p).removesuffix("/value"): v
            for p, v in jax.tree_util.tree_leaves_with_path(optim.decay_mask(tree))
        }
        decayed = {k for k, v in mask.items() if v}
        assert decayed == {
            "embed",
            "lm_head",
            "layers/wq",
            "layers/wk",
            "layers/wv",
            "layers/wo",
            "layers/w_gate",
            "layers/w_up",
            "layers/w_down",
        }
        # [L, D] stacked norm scales are rank 2, yet not decayed.
        assert not mask["layers/attn_norm"] and not mask["final_norm"]


def test_weight_decay_leaves_norms_and_vectors_alone():
    params = {
        "layers": {"attn_norm": jnp.ones((2, 4)), "wq": jnp.ones((2, 4, 3))},
        "bias": jnp.ones(3),
    }
    tx = optim.make_optimizer(0.1, 0.5, total_steps=10, warmdown=0, clip=1.0)

    @jax.jit
    def step(params):
        zeros = jax.tree.map(jnp.zeros_like, params)
        updates, _ = tx.update(zeros, tx.init(params), params)
        return optax.apply_updates(params, updates)

    new = step(params)
    np.testing.assert_array_equal(new["layers"]["attn_norm"], 1.0)
    np.testing.assert_array_equal(new["bias"], 1.0)
    np.testing.assert_allclose(new["layers"]["wq"], 1 - 0.1 * 0.5)  # decoupled: p -= lr·wd·p


def ce_loss(graphdef):
    def loss(params, batch):
        logits = nnx.merge(graphdef, params)(batch[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()

    return loss


def test_accumulated_grads_equal_full_batch():
    cfg = M.config("tiny", L=1, V=512, dtype="float32")
    graphdef, params = nnx.split(M.init(cfg, seed=0))
    loss = ce_loss(graphdef)
    batch = jnp.asarray(np.random.default_rng(2).integers(0, cfg.V, (8, 17)), jnp.int32)
    full_loss, full_grads = jax.jit(jax.value_and_grad(loss))(params, batch)
    acc_loss, acc_grads = jax.jit(lambda p, b: optim.accumulate_gradients(loss, p, b))(
        params, optim.split_microbatches(batch, 4)
    )
    np.testing.assert_allclose(acc_loss, full_loss, rtol=1e-6)
    for a, f in zip(jax.tree.leaves(acc_grads), jax.tree.leaves(full_grads), strict=True):
        assert a.dtype == jnp.float32
        np.testing.assert_allclose(a, f, rtol=1e-4, atol=1e-7)
    with pytest.raises(BadInput, match="does not split into 3"):
        optim.split_microbatches(batch, 3)


def test_accumulation_is_fp32_for_bf16_params():
    params = {"w": jnp.full((3,), 0.5, jnp.bfloat16)}
    batch = jnp.arange(12, dtype=jnp.float32).reshape(4, 1, 3)

    def loss(p, x):
        return jnp.sum(p["w"] * x[0].astype(jnp.bfloat16)).astype(jnp.float32)

    value, grads = optim.accumulate_gradients(loss, params, batch)
    assert grads["w"].dtype == jnp.float32
    np.testing.assert_allclose(grads["w"], batch[:, 0].mean(0))
    np.testing.assert_allclose(value, 0.5 * batch.sum() / 4)


def test_optimizer_steps_reduce_loss():
    cfg = M.config("tiny", L=1)
    graphdef, params = nnx.split(M.init(cfg, seed=0))
    loss = ce_loss(graphdef)
    tx = optim.make_optimizer(3e-3, 0.1, total_steps=8, warmup_steps=2, warmdown=0.25, clip=1.0)
    batch = optim.split_microbatches(
        jnp.asarray(np.random.default_rng(5).integers(0, cfg.V, (4, 33)), jnp.int32), 2
    )

    @jax.jit
    def step(params, opt_state):
        value, grads = optim.accumulate_gradients(loss, params, batch)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    opt_state = tx.init(params)
    losses = []
    for _ in range(8):
        params, opt_state, value = step(params, opt_state)
        losses.append(float(value))
    assert losses[-1] < losses[0] - 0.5, losses
