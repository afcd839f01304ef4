"""Every attention implementation against 'xla' (and 'xla' against plain einsums) on CPU.

The Pallas kernels run in interpret mode here, forward and backward, on GQA shapes; the
reference computes softmax(q·k/sqrt(H)) by hand, so a missing or doubled scale fails.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shared.errors import BadInput
from shared.hardware import sharding
from shared.pretrain import attention as A


def qkv(B=2, T=128, N=4, K=2, H=32, dtype=jnp.float32, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(
        jnp.asarray(rng.standard_normal(shape), dtype)
        for shape in ((B, T, N, H), (B, T, K, H), (B, T, K, H))
    )


def reference(q, k, v, causal=True):
    """Plain einsum attention: query head n reads kv head n // (N/K)."""
    N, K, H, T = q.shape[2], k.shape[2], q.shape[3], q.shape[1]
    k, v = jnp.repeat(k, N // K, axis=2), jnp.repeat(v, N // K, axis=2)
    s = jnp.einsum("BTNH,BSNH->BNTS", q, k) / np.sqrt(H)
    if causal:
        s = jnp.where(jnp.tril(jnp.ones((T, T), bool)), s, -jnp.inf)
    return jnp.einsum("BNTS,BSNH->BTNH", jax.nn.softmax(s, axis=-1), v)


def loss(fn):
    # A weighted sum so every output element has its own cotangent.
    return lambda q, k, v: jnp.sum(fn(q, k, v) * jnp.cos(jnp.arange(q.size).reshape(q.shape)))


@pytest.mark.parametrize("causal", [True, False])
def test_xla_matches_reference_and_scales_once(causal):
    q, k, v = qkv(T=64)
    out = A.attention(q, k, v, impl="xla", causal=causal)
    np.testing.assert_allclose(out, reference(q, k, v, causal), atol=1e-5, rtol=1e-5)


def check_against_xla(impl, T, **blocks):
    q, k, v = qkv(T=T)
    f = jax.jit(lambda q, k, v: A.attention(q, k, v, impl=impl, **blocks))
    ref = jax.jit(lambda q, k, v: A.attention(q, k, v, impl="xla"))
    np.testing.assert_allclose(f(q, k, v), ref(q, k, v), atol=2e-5, rtol=2e-5)
    grads = jax.jit(jax.grad(loss(f), argnums=(0, 1, 2)))(q, k, v)
    ref_grads = jax.jit(jax.grad(loss(ref), argnums=(0, 1, 2)))(q, k, v)
    for name, g, r in zip("qkv", grads, ref_grads, strict=True):
        np.testing.assert_allclose(g, r, atol=1e-4, rtol=1e-4, err_msg=f"d{name}")


def test_splash_interpret_matches_xla():
    # Two q and kv blocks each, so the causal mask has full, partial and empty blocks.
    check_against_xla("splash", T=256, block_q=128, block_kv=128, block_bwd=128)


def test_pallas_gpu_interpret_matches_xla():
    check_against_xla("pallas_gpu", T=64, block_q=32, block_kv=32, block_bwd=16)


def test_splash_bf16_close_to_xla():
    q, k, v = qkv(B=1, T=128, dtype=jnp.bfloat16, seed=1)
    out = A.attention(q, k, v, impl="splash").astype(jnp.float32)
    ref = A.attention(q, k, v, impl="xla").astype(jnp.float32)
    np.testing.assert_allclose(out, ref, atol=3e-2, rtol=3e-2)


def test_splash_per_shard_under_mesh():
    """Under a (fsdp=4, tp=2) mesh the kernel runs per shard through shard_map."""
    mesh = sharding.make_mesh("4x2")
    q, k, v = qkv(B=4, T=128, N=4, K=1)
    with jax.set_mesh(mesh):
        out = jax.jit(lambda q, k, v: A.attention(q, k, v, impl="splash"))(q, k, v)
    np.testing.assert_allclose(out, reference(q, k, v), atol=2e-5, rtol=2e-5)


def test_default_dispatch():
    assert A.current_platform() == "cpu"
    assert A.default_impl() == "xla"
    assert A.default_impl("tpu") == "splash"
    assert A.default_impl("gpu") == "cudnn"
    assert A.resolve(None) == "xla"


def test_cudnn_on_cpu_is_a_clear_error():
    q, k, v = qkv(T=16, dtype=jnp.bfloat16)
    with pytest.raises(BadInput, match="'cudnn' cannot run on cpu; valid on cpu: xla, splash"):
        A.attention(q, k, v, impl="cudnn")


def test_bad_names_and_shapes():
    q, k, v = qkv(T=16)
    with pytest.raises(
        BadInput,
        match=r"unknown attention implementation 'flash' \(did you mean 'splash'\?\); "
        "valid: xla, cudnn, splash, pallas_gpu",
    ):
        A.attention(q, k, v, impl="flash")
    with pytest.raises(BadInput, match="cannot run on gpu"):
        A.resolve("splash", "gpu")
    with pytest.raises(BadInput, match="cannot run on tpu"):
        A.resolve("pallas_gpu", "tpu")
    with pytest.raises(BadInput, match="multiples of 128"):
        A.attention(q, k, v, impl="splash")  # T=16
    with pytest.raises(BadInput, match="multiple of kv heads"):
        A.attention(q, k[:, :, :1].repeat(3, axis=2), v[:, :, :1].repeat(3, axis=2))
    with pytest.raises(BadInput, match="block_q"):
        A.attention(*qkv(T=96), impl="pallas_gpu", block_q=64)
