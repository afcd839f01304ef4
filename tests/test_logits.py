"""shared.logits: chunked top-k and cross-entropy against the full-materialisation references."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from shared import logits as L
from shared.errors import BadInput
from shared.logits import chunked, tiling


def make(B, T, D, V, dtype, seed=0, ignore=0):
    """hidden, embedding with logits of std ~3 (so the softmax is not flat), and targets."""
    kh, ke, kt = jax.random.split(jax.random.PRNGKey(seed), 3)
    h = jax.random.normal(kh, (B, T, D), jnp.float32).astype(dtype)
    e = (3.0 / D**0.5 * jax.random.normal(ke, (V, D), jnp.float32)).astype(dtype)
    t = jax.random.randint(kt, (B, T), 0, V)
    if ignore:
        t = t.at[0, :ignore].set(-1)
    return h, e, t


def assert_top_k_matches(values, indices, hidden, embedding, k):
    """Values equal to the full top-k; indices equal wherever the value is not tied.

    "Tied" means within `tol` of a neighbour in the sorted row (top-(k+1) of the reference),
    since a differently blocked matmul may round a logit an ulp or two differently.
    """
    ref_v, ref_i = L.full_top_k_logits(hidden, embedding, min(k + 1, embedding.shape[0]))
    ref_v, ref_i = np.asarray(ref_v, np.float32), np.asarray(ref_i)
    v, i = np.asarray(values, np.float32), np.asarray(indices)
    assert values.dtype == jnp.result_type(hidden.dtype, embedding.dtype)
    assert v.shape == i.shape == (*hidden.shape[:2], k) and indices.dtype == jnp.int32
    # 2 ulp of the value in its dtype plus fp32 accumulation-order noise of the row's scale
    eps, eps32 = float(jnp.finfo(values.dtype).eps), float(jnp.finfo(jnp.float32).eps)
    row = np.abs(ref_v).max(axis=-1, keepdims=True)
    tol = 2 * eps * np.maximum(np.abs(ref_v), 1.0) + 16 * eps32 * row  # [B, T, k + 1]
    assert np.all(np.abs(v - ref_v[..., :k]) <= tol[..., :k])
    # every returned index points at a logit equal to its returned value
    full = np.asarray((hidden @ embedding.T).astype(jnp.float32))
    assert np.all(np.abs(np.take_along_axis(full, i, -1) - v) <= tol[..., :k])
    gap_prev = np.diff(ref_v, axis=-1, prepend=np.inf)[..., :k]
    gap_next = -np.diff(ref_v, axis=-1, append=-np.inf)[..., :k]
    untied = (np.abs(gap_prev) > tol[..., :k]) & (np.abs(gap_next) > tol[..., :k])
    assert untied.sum() >= min(50, untied.size // 4), "test data too tied to check indices"
    np.testing.assert_array_equal(i[untied], ref_i[..., :k][untied])
    assert all(len(set(row)) == k for row in i.reshape(-1, k)), "duplicate indices"


TOPK_CASES = [
    # B, T, D, V, k, chunk_size, vocab_chunk_size
    (2, 37, 32, 1000, 17, 8, 300),  # neither chunk divides; last vocab chunk overlaps
    (1, 5, 8, 129, 128, 2, 128),  # k close to V, 2 vocab chunks of which one overlaps by 127
    (2, 16, 24, 2048, 64, 16, 512),  # both divide
    (4, 9, 16, 300, 300, 4, None),  # k == V
]


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("case", TOPK_CASES, ids=lambda c: "-".join(map(str, c)))
def test_top_k_matches_full(case, dtype):
    B, T, D, V, k, C, Vc = case
    h, e, _ = make(B, T, D, V, dtype)
    f = jax.jit(functools.partial(L.top_k_logits, k=k, chunk_size=C, vocab_chunk_size=Vc))
    assert_top_k_matches(*f(h, e), h, e, k)


def test_per_step_reference_matches_full():
    h, e, _ = make(2, 11, 16, 700, jnp.float32)
    assert_top_k_matches(*jax.jit(L.per_step_top_k_logits, static_argnums=2)(h, e, 9), h, e, 9)


def test_top_k_ties_keep_lower_index_like_lax():
    """Exact ties across vocabulary chunks resolve as lax.top_k does (lower index first)."""
    e = jnp.tile(jnp.eye(4, dtype=jnp.float32), (50, 1))  # rows r and r+4 are identical
    h = jnp.arange(1.0, 3 * 5 * 4 + 1).reshape(3, 5, 4) % 7
    v, i = L.top_k_logits(h, e, 10, chunk_size=2, vocab_chunk_size=24)
    rv, ri = jax.lax.top_k(h @ e.T, 10)
    np.testing.assert_array_equal(v, rv)
    np.testing.assert_array_equal(i, ri)


def grads(fn, h, e, t, **kw):
    return jax.jit(jax.value_and_grad(lambda h, e: fn(h, e, t, **kw), argnums=(0, 1)))(h, e)


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.linalg.norm(a - b) / np.linalg.norm(b)


CE_CASES = [
    # B, T, D, V, chunk_size, vocab_chunk_size, softcap
    (2, 37, 32, 1000, 8, 300, None),  # neither chunk divides; last vocab chunk overlaps
    (3, 64, 16, 4096, None, None, 5.0),  # defaults
    (1, 7, 8, 513, 3, 512, 30.0),
    (2, 20, 24, 2000, 20, 2000, None),  # one block
]


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("case", CE_CASES, ids=lambda c: "-".join(map(str, c)))
def test_cross_entropy_and_grads_match_full(case, dtype):
    B, T, D, V, C, Vc, softcap = case
    h, e, t = make(B, T, D, V, dtype, ignore=3)
    loss, (gh, ge) = grads(
        L.cross_entropy, h, e, t, chunk_size=C, vocab_chunk_size=Vc, softcap=softcap
    )
    ref, (rh, re) = grads(L.full_cross_entropy, h, e, t, softcap=softcap)
    assert loss.dtype == jnp.float32 and gh.dtype == h.dtype and ge.dtype == e.dtype
    # bf16: the naive loss rounds logits to bf16, ours keeps them fp32, so they differ a little
    tol = 1e-5 if dtype == jnp.float32 else 2e-2
    np.testing.assert_allclose(loss, ref, rtol=tol / 10)
    assert rel(gh, rh) < tol and rel(ge, re) < tol


def test_cross_entropy_bf16_is_at_least_as_accurate_as_naive():
    h, e, t = make(2, 50, 32, 3000, jnp.bfloat16, seed=3)
    exact, (xh, xe) = grads(L.full_cross_entropy, h.astype(jnp.float32), e.astype(jnp.float32), t)
    ours, (oh, oe) = grads(L.cross_entropy, h, e, t, chunk_size=7, vocab_chunk_size=700)
    naive, (nh, ne) = grads(L.full_cross_entropy, h, e, t)
    assert abs(ours - exact) <= abs(naive - exact) + 1e-6 * abs(exact)
    assert rel(oh, xh) <= 1.2 * rel(nh, xh) and rel(oe, xe) <= 1.2 * rel(ne, xe)


def test_ignored_targets_and_all_ignored():
    h, e, t = make(2, 9, 8, 100, jnp.float32)
    t = t.at[1].set(-100)
    loss, (gh, ge) = grads(L.cross_entropy, h, e, t, chunk_size=4)
    ref, (rh, re) = grads(L.full_cross_entropy, h[:1], e, t[:1])
    np.testing.assert_allclose(loss, ref, rtol=1e-6)
    assert float(jnp.abs(gh[1]).max()) == 0.0
    np.testing.assert_allclose(gh[:1], rh, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(ge, re, rtol=1e-5, atol=1e-7)
    loss, (gh, ge) = grads(L.cross_entropy, h, e, jnp.full_like(t, -1))
    assert float(loss) == 0.0 and not jnp.any(gh) and not jnp.any(ge)


def test_accelerator_code_path_on_cpu():
    """The non-CPU branch (plain bf16 slices) computes the same; on CPU it is not otherwise run."""
    h, e, t = make(2, 13, 16, 700, jnp.bfloat16, ignore=2)
    k, C, Vc = 7, 5, 300
    v, i = jax.jit(functools.partial(chunked._top_k_impl, k=k, C=C, Vc=Vc, bits=False))(h, e)
    assert_top_k_matches(v, i, h, e, k)
    fwd = functools.partial(chunked._ce_forward, C=C, Vc=Vc, softcap=None)
    loss, lse, valid, n = jax.jit(functools.partial(fwd, bits=False))(h, e, t)
    loss_cpu, lse_cpu, *_ = jax.jit(functools.partial(fwd, bits=True))(h, e, t)
    np.testing.assert_array_equal(loss, loss_cpu)
    scale = jnp.where(valid, 1.0 / n, 0.0)
    bwd = functools.partial(chunked._ce_backward_impl, C=C, Vc=Vc, softcap=None)
    out = jax.jit(functools.partial(bwd, bits=False))(h, e, t, lse, scale)
    out_cpu = jax.jit(functools.partial(bwd, bits=True))(h, e, t, lse_cpu, scale)
    for a, b in zip(out, out_cpu, strict=True):
        np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))


def test_sharded_batch_on_8_device_mesh():
    devices = jax.devices()
    assert len(devices) == 8, "tests/conftest.py sets 8 CPU devices"
    mesh = Mesh(np.array(devices), ("data",))
    h, e, t = make(8, 24, 16, 1000, jnp.bfloat16, ignore=2)
    hs = jax.device_put(h, NamedSharding(mesh, P("data")))
    ts = jax.device_put(t, NamedSharding(mesh, P("data")))
    es = jax.device_put(e, NamedSharding(mesh, P()))
    topk = jax.jit(functools.partial(L.top_k_logits, k=10, chunk_size=5, vocab_chunk_size=300))
    v, i = topk(hs, es)
    assert_top_k_matches(v, i, h, e, 10)
    assert v.sharding.spec[0] == "data", f"batch sharding lost: {v.sharding}"
    loss, (gh, ge) = grads(L.cross_entropy, hs, es, ts, chunk_size=5, vocab_chunk_size=300)
    ref, (rh, re) = grads(L.cross_entropy, h, e, t, chunk_size=5, vocab_chunk_size=300)
    np.testing.assert_allclose(loss, ref, rtol=1e-6)
    assert rel(gh, rh) < 1e-2 and rel(ge, re) < 1e-2
    assert gh.sharding.spec[0] == "data", f"batch sharding lost: {gh.sharding}"


def test_bad_inputs_fail_early_with_one_line():
    h, e, t = make(2, 4, 8, 50, jnp.float32)
    bad = [
        (lambda: L.top_k_logits(h, e, 51), "k=51 must be an integer in [1, V=50]"),
        (lambda: L.top_k_logits(h, e, 0), "k=0"),
        (lambda: L.top_k_logits(h, e, 2.0), "k=2.0"),
        (lambda: L.top_k_logits(h, e[:, :7], 3), "same D"),
        (lambda: L.top_k_logits(h[0], e, 3), "hidden [B, T, D]"),
        (lambda: L.top_k_logits(h, e, 3, chunk_size=0), "chunk_size=0"),
        (lambda: L.top_k_logits(h, e, 3, chunk_size=2.5), "chunk_size=2.5"),
        (lambda: L.top_k_logits(h, e, 10, vocab_chunk_size=5), "must be >= k=10"),
        (lambda: L.cross_entropy(h, e, t[:, :3]), "targets must be integers of shape"),
        (lambda: L.cross_entropy(h, e, t.astype(jnp.float32)), "targets must be integers"),
        (lambda: L.cross_entropy(h, e, t, softcap=-1.0), "softcap=-1.0"),
        (lambda: L.cross_entropy(h.astype(jnp.int32), e, t), "hidden must be floating"),
    ]
    for call, message in bad:
        with pytest.raises(BadInput) as err:
            call()
        assert message in str(err.value) and "\n" not in str(err.value)


def test_default_chunks_even_out_the_sequence():
    assert tiling.seq_chunk(None, 8, 1024) == L.DEFAULT_BLOCK_TOKENS // 8
    assert tiling.seq_chunk(None, 3, 1024) == 256  # at most 341 steps: 4 chunks of 256, no padding
    assert tiling.seq_chunk(None, 1, 100) == 100
    assert tiling.seq_chunk(5000, 1, 100) == 100
    assert tiling.vocab_chunk(None, 262144, 128, 8192) == 8192
    assert tiling.vocab_chunk(None, 1000, 1000, 512) == 1000  # at least k, at most V
