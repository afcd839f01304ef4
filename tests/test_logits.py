"""shared.logits: chunked top-k and cross-entropy against the full-materialisation references."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from shared import logits as L
from shared import report
from shared.errors import BadInput
from shared.findings import logits as findings
from shared.hardware import measure
from shared.hardware.sharding import make_mesh
from shared.logits import chunked, compare, tiling
from shared.logits.settings import ExactnessCheck, FitSearch


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


# -- notebook 03's settings (shared.logits.settings) and plumbing (shared.findings.logits) ------


def test_exactness_check_presets_parameters_and_bad_values():
    local, field = ExactnessCheck.local(), ExactnessCheck.field()
    assert (local.model, local.model_shape, local.time_shape) == (
        "gemma3-tiny",
        (2, 64),
        (8, 128, 1152, 65536),
    )
    assert (field.model, field.model_shape, field.time_shape) == (
        "gemma3-1b",
        (2, 512),
        (8, 1024, 1152, 262144),
    )
    for preset in (local, field):  # the benchmark's exactness check in every mode
        assert preset.exact_shape == (2, 100, 64, 5000) and preset.exact_chunks == (24, 1000)
        assert (preset.k, preset.softcap, preset.rounds, preset.weights) == (128, 30.0, 3, "dummy")
    # the notebook's parameters: None keeps the mode's preset, lists become tuples
    got = report.setting("plan", ExactnessCheck, MODEL=None, TIME_SHAPE=[2, 32, 64, 8192], K=16)
    assert got.model == "gemma3-1b" and got.time_shape == (2, 32, 64, 8192) and got.k == 16
    assert got.exactness_params() == {
        "B": 2,
        "T": 100,
        "D": 64,
        "V": 5000,
        "k": 16,
        "chunk_size": 24,
        "vocab_chunk_size": 1000,
        "softcap": 30.0,
    }
    assert got.time_params() == {"B": 2, "T": 32, "D": 64, "V": 8192, "k": 16}
    bad = [
        ({"MODEL": "gemma9-9b"}, "unknown model 'gemma9-9b'"),
        ({"WEIGHTS": "mine"}, "unknown weights 'mine'"),
        ({"PRICE_KIND": "cheap"}, "unknown price kind 'cheap'"),
        ({"EXACT_SHAPE": [2, 100, 64]}, "EXACT_SHAPE and TIME_SHAPE [B, T, D, V]"),
        ({"MODEL_SHAPE": [2, 0]}, "MODEL_SHAPE [B, T]"),
        ({"EXACT_CHUNKS": [24, 1000.0]}, "EXACT_CHUNKS [chunk_size, vocab_chunk_size]"),
        ({"ROUNDS": 0}, "ROUNDS=0 must be"),
        ({"K": True}, "K=True"),
        ({"SOFTCAP": -1.0}, "SOFTCAP=-1.0 must be a positive number"),
        ({"K": 2000}, "K=2000 must not exceed"),  # over EXACT_CHUNKS[1] = 1000
    ]
    for parameters, message in bad:
        with pytest.raises(BadInput) as err:
            report.setting("local", ExactnessCheck, **parameters)
        assert message in str(err.value) and "\n" not in str(err.value)


def test_fit_search_presets_parameters_and_bad_values():
    local, field = FitSearch.local(), FitSearch.field()
    # section 1 compiles the real sizes in every mode (compile only); local mode draws the
    # committed search instead of running one, plan mode searches, device mode measures
    assert dataclasses.replace(local, max_batch=None) == field
    assert (field.model, field.k, field.seq, field.mem_batches) == (
        "gemma3-1b",
        128,
        1024,
        (1, 4, 8, 32),
    )
    assert field.device_batches == (1, 4, 16, 64, 256) and field.plan_batches == ()
    assert not local.searches("local")
    assert field.searches("plan") and not field.searches("device")
    got = report.setting("local", FitSearch, MAX_BATCH=True, MEM_BATCHES=[2], SEQ=64)
    assert got.searches("local") and got.mem_batches == (2,) and got.seq == 64
    assert got.memory_shape(1152, 262144, batch=8) == {
        "B": 8,
        "T": 64,
        "D": 1152,
        "V": 262144,
        "k": 128,
        "dtype": "bfloat16",
    }
    bad = [
        ({"MODEL": "gemma9-9b"}, "unknown model 'gemma9-9b'"),
        ({"PRICE_KIND": "cheap"}, "unknown price kind 'cheap'"),
        ({"MEM_BATCHES": [1, 0]}, "the batches must be positive integers"),
        ({"DEVICE_BATCHES": 8}, "the batches must be positive integers"),
        ({"SEQ": -1}, "SEQ"),
        ({"MAX_BATCH": "yes"}, "MAX_BATCH='yes' must be True, False or None"),
    ]
    for parameters, message in bad:
        with pytest.raises(BadInput) as err:
            report.setting("plan", FitSearch, **parameters)
        assert message in str(err.value) and "\n" not in str(err.value)


def test_findings_agree_with_committed_exactness_only_for_the_same_check(capsys):
    setting = ExactnessCheck.local()
    setting = dataclasses.replace(setting, exact_shape=(1, 12, 16, 300), exact_chunks=(5, 150))
    top, loss = compare.exactness(1, 12, 16, 300, 128, 5, 150, 30.0)
    quoted = {"exactness": {"params": setting.exactness_params(), "top_k": top, "loss": loss}}
    assert findings.agree_exactness(top, loss, setting.exactness_params(), quoted)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 + 4 and all("agrees with the committed" in x for x in lines)
    drifted = [{**r, "index_mismatch_tied": r["index_mismatch_tied"] + 100} for r in top]
    quoted["exactness"]["top_k"] = drifted
    assert findings.agree_exactness(top, loss, setting.exactness_params(), quoted) is False
    other = {**setting.exactness_params(), "k": 64}
    assert findings.agree_exactness(top, loss, other, quoted) is None
    assert "nothing to compare" in capsys.readouterr().out


def test_findings_time_ratios_prices_and_values(capsys):
    rows = [
        {"what": compare.TOP_K, "method": m, "min_s": s, "min_cpu_s": 2 * s}
        for m, s in (("full logits", 1.0), ("per-step scan", 3.0), ("chunked", 2.0))
    ] + [
        {"what": compare.LOSS, "method": m, "min_s": s, "min_cpu_s": s}
        for m, s in (("naive loss", 1.0), ("chunked loss", 4.0))
    ]
    assert findings.timing_value("cpu") == "min_cpu_s" and findings.timing_value("tpu") == "min_s"
    shape = {"B": 8, "T": 128, "D": 1152, "V": 65536, "k": 128}
    ratios = {"per_step_over_chunked": 1.5, "full_over_chunked": 0.5}
    ratios["naive_loss_over_chunked"] = 0.1  # 0.25 live: more than 50% apart
    quoted = {"time_shape": shape, "backend": "cpu", "host": {}, "time": {"cpu_ratios": ratios}}
    live = findings.agree_times(rows, quoted, shape=shape, backend="cpu")
    assert live == {
        "per_step_over_chunked": 1.5,
        "full_over_chunked": 0.5,
        "naive_loss_over_chunked": 0.25,
    }
    out = capsys.readouterr().out
    assert (
        out.count("agrees with") == 2 and "naive_loss_over_chunked (min_cpu_s): 0.25 DIFFERS" in out
    )
    findings.agree_times(rows, quoted, shape={**shape, "T": 64}, backend="cpu")
    assert capsys.readouterr().out.count("no committed number") == 3
    lines = findings.price_lines(rows[:1], "v5e-1", "on-demand", tokens_per_call=8 * 128)
    assert lines[0].startswith("full logits: 1000.0 ms per call, $") and "v5e-1" in lines[0]
    (no_price,) = findings.price_lines(rows[:1], "tpu7x-8", "on-demand", tokens_per_call=1)
    assert no_price.startswith("full logits: 1000.0 ms per call; no dollars: no on-demand price")


def test_findings_memory_agreement_and_committed_search(monkeypatch, capsys):
    shape = {"B": 8, "T": 1024, "D": 1152, "V": 262144, "k": 128, "dtype": "bfloat16"}
    row = {"where": "v5e-1 (TPU v5 lite, one chip)", "what": "top-k", "method": "chunked", "B": 8}
    quoted = {
        "memory_shape": shape,
        "memory_tpu": {"target": "v5e-1", "rows": [{**row, "temp_bytes": 100}]},
    }
    rows = [{**row, "temp_bytes": 100}, {**row, "B": 4, "temp_bytes": 1}]
    assert findings.agree_memory(rows, quoted, target="v5e-1", shape=shape, on_target=True)
    changed = [{**row, "temp_bytes": 200}]
    assert (
        findings.agree_memory(changed, quoted, target="v5e-1", shape=shape, on_target=True) is False
    )
    assert findings.agree_memory(rows, quoted, target="v6e-1", shape=shape, on_target=True) is None
    assert findings.agree_memory(rows, quoted, target="v5e-1", shape=shape, on_target=False) is None
    assert "nothing to compare with" in capsys.readouterr().out
    search = {"model": "gemma3-1b", "target": "v5e-1", "seq": 1024, "k": 128, "modes": {}}
    monkeypatch.setattr(report, "committed", lambda name: search if name == "logits_fit" else None)
    assert findings.committed_search("gemma3-1b", "v5e-1", 1024, 128) is search
    assert findings.committed_search("gemma3-1b", "v5e-1", 512, 128) is None
    monkeypatch.setattr(report, "committed", lambda name: None)
    assert findings.committed_search("gemma3-1b", "v5e-1", 1024, 128) is None


def test_findings_forward_probes_live_or_committed_and_their_costs(capsys):
    def probe(mode, batch, fast, fits):
        return {
            "workload": "forward",
            "target": "v5e-1",
            "logits": mode,
            "batch": batch,
            "fast": fast,
            "fits": fits,
            "bytes_per_device": batch * 2**30,
            "roofline_lower_bound_s": 0.01 * batch,
        }

    search = {
        "max_batch": 12,
        "probes": [
            probe("topk", 8, True, True),
            probe("topk", 12, False, True),
            probe("topk", 16, False, False),
        ],
    }
    point = probe("full", 2, False, True)
    probes, answers = findings.forward_probes([point], {"topk": search}, None)
    assert answers == {"topk": 12} and len(probes) == 4
    assert set(probes[0]) == set(findings.PROBE_KEYS)
    assert findings.exact_answers({"topk": search}) == [search["probes"][1]]
    assert findings.exact_answers({"topk": {**search, "max_batch": 0}}) == []
    costs = findings.scoring_costs([point, probe("full", 4, False, False)], 1000, "on-demand")
    assert len(costs) == 1 and costs[0].startswith("full at batch 2, 1,000 sequences: 500 runs")
    committed = {
        "modes": {
            "topk": {
                "max_batch": 24,
                "probes": [{"batch": 24, "fast": False, "fits": True, "bytes_per_device": 1}],
            }
        }
    }
    probes, answers = findings.forward_probes([point], {}, committed)
    assert answers == {"topk": 24} and probes[-1]["logits"] == "topk" and len(probes) == 2
    assert "the committed probes are drawn below" in capsys.readouterr().out
    assert findings.forward_probes([], {}, None) == ([], {})
    assert "nothing committed to draw" in capsys.readouterr().out


def test_findings_measure_forward_sweeps_in_order_and_stops_a_mode_at_out_of_memory(monkeypatch):
    setting = FitSearch(model="gemma3-tiny", k=4, seq=8, device_batches=(4, 8, 16, 32), trials=1)
    real = measure.run_or_oom

    def run_or_oom(fn, *args, **kwargs):  # batch 16 runs out of memory, in both modes
        if args[3].shape[0] == 16:
            return None, "RESOURCE_EXHAUSTED: out of memory"
        return real(fn, *args, **kwargs)

    monkeypatch.setattr(measure, "run_or_oom", run_or_oom)
    asked = []

    def predict(mode, batch):
        asked.append((mode, batch))

    rows = findings.measure_forward(setting, make_mesh(None, jax.devices()), predict)
    # batch 4 does not split over 8 devices; 32 is never reached after 16 ran out of memory
    assert asked == [("topk", 8), ("topk", 16), ("full", 8), ("full", 16)]
    assert [r["measured_status"] for r in rows] == ["ok", "out of memory"] * 2
    assert [r["shape"] for r in rows[::2]] == ["T=8 logits=topk k=4", "T=8 logits=full k=4"]
    assert rows[0]["measured_s"] > 0 and rows[1]["measured_s"] is None
    assert rows[0]["source"] == "03_sparse_logits_fit" and rows[0]["predicted_fits"] is None
