"""shared.lora for every family on CPU: qwix adapters, a train step whose loss falls, a merged
safetensors export that reloads (through tunix's own loader) to the same logits, and the train
step compiled for a TPU topology by the real TPU compiler; notebook 02's setting
(shared.lora.settings) and its findings beside the committed ones."""

import json
import math

import jax
import numpy as np
import optax
import pytest
from conftest import TEST_VOCAB as V
from flax import nnx

from shared import lora, models, report
from shared.errors import BadInput
from shared.findings import lora as findings
from shared.hardware import parse_target
from shared.lora import adapters as lora_adapters
from shared.lora.settings import LoraOverhead
from shared.plan import target_mesh
from shared.plan.workloads import lora_train
from shared.plan.workloads import rollout as rollout_workload
from shared.rollout import sampler as rollout

RANK, ALPHA = 4, 8.0
FAMILIES = sorted(models.FAMILIES)


def _with_nonzero_b(adapted, seed=0):
    """qwix starts lora_b at zero; give it values so merged and unmerged models differ (drawn
    with numpy: one jax.random program per adapter shape would cost a CPU compile each)."""
    rng = np.random.default_rng(seed)
    for module, attr in lora_adapters._lora_modules(adapted):
        b = getattr(module, f"{attr}_lora_b")
        value = (0.05 * rng.standard_normal(b.shape)).astype(np.float32)
        b.set_value(jax.device_put(value.astype(b.dtype), b.get_value().sharding))
    return adapted


def _f32(x):
    return np.asarray(x, np.float32)


def _types(tree):
    return [(x.shape, x.dtype) for x in jax.tree.leaves(tree)]


@pytest.mark.parametrize("family", FAMILIES)
def test_train_merge_export_reload_for_every_family(family, mesh1, tmp_path):
    name = f"{family}-tiny"
    base = models.dummy_model(name, mesh=mesh1, vocab_size=V, seed=1)
    adapted = lora.apply_lora(base, RANK, ALPHA, mesh=mesh1)
    dims = models.model_dims(name, vocab_size=V)
    if family != "gemma4":  # one attention layout: the closed form holds
        fused = family in ("gemma2", "gemma3")
        assert lora.lora_param_count(adapted) == lora.expected_lora_param_count(
            dims, RANK, fused_kv=fused
        )
    # a few optimizer steps on the adapters: the loss falls, the base does not move
    graph, lora_params, base_params = lora.split_lora(adapted)
    optimizer = optax.adam(1e-2)
    opt_state = lora.init_opt_state(optimizer, lora_params, mesh=mesh1)
    tokens = lora.shard_batch(rollout.random_prompts(4, 13, V, seed=5), mesh1)
    before = [_f32(x) for x in jax.tree.leaves(base_params)]
    state_types = _types((lora_params, opt_state))
    losses = []
    for _ in range(4):
        lora_params, opt_state, loss = lora.train_step(
            graph, optimizer, lora_params, base_params, opt_state, tokens
        )
        losses.append(float(loss))
    assert losses[-1] < losses[0] - 0.01, losses
    # the state comes back as it went in (fp32 Adam moments from the start): one compile
    assert _types((lora_params, opt_state)) == state_types
    assert all(
        np.array_equal(b, _f32(a))
        for b, a in zip(before, jax.tree.leaves(base_params), strict=True)
    )
    nnx.update(adapted, lora_params)
    _with_nonzero_b(adapted)
    # merged weights compute what the adapters compute; the export reloads exactly
    merged = lora.merge_lora(adapted, RANK, ALPHA)
    x = rollout.random_prompts(2, 12, V, seed=3)
    with_adapters = _f32(models.full_logits(adapted, x))
    effect = np.abs(
        with_adapters - _f32(models.full_logits(lora.merge_lora(adapted, RANK, 0.0), x))
    ).max()
    assert effect > 0.05  # the adapters matter, so the agreement below is not trivial
    assert np.abs(_f32(models.full_logits(merged, x)) - with_adapters).max() <= 0.15 * effect
    path = lora.export_safetensors(merged, tmp_path / "merged")
    config = json.loads((path.parent / "config.json").read_text())
    assert config["vocab_size"] == V and config["torch_dtype"] == "bfloat16"
    reloaded = lora.load_safetensors(path.parent, name, mesh=mesh1, vocab_size=V)
    for got, want in zip(
        jax.tree.leaves(nnx.state(reloaded)), jax.tree.leaves(nnx.state(merged)), strict=True
    ):
        assert got.dtype == want.dtype and np.array_equal(_f32(got), _f32(want))
    assert np.array_equal(
        _f32(models.full_logits(reloaded, x)), _f32(models.full_logits(merged, x))
    )


@pytest.fixture(scope="module")
def lora42(mesh42):
    base = models.dummy_model("gemma3-tiny", mesh=mesh42, vocab_size=V, seed=1)
    return base, _with_nonzero_b(lora.apply_lora(base, RANK, ALPHA, mesh=mesh42))


def test_lora_shards_like_its_base_and_shares_the_base_buffers(lora42):
    base, adapted = lora42
    q = adapted.layers[0].attn.q_einsum
    assert q.w_lora_a.shape == (128, RANK) and q.w_lora_b.shape == (RANK, 4, 32)
    assert q.w_lora_a.get_value().sharding.spec == jax.sharding.PartitionSpec("fsdp", None)
    # qwix clones the module graph but (flax 0.12 nnx.clone) not the weight buffers
    assert adapted.embedder.input_embedding.get_value() is base.embedder.input_embedding.get_value()
    shared, total = lora.shared_base_arrays(base, adapted)
    assert shared == total == len(jax.tree.leaves(nnx.state(base)))
    assert lora.free_base(base, keep=adapted) == 0


def test_merged_einsums_compute_what_the_adapters_compute(lora42):
    _, adapted = lora42
    merged = lora.merge_lora(adapted, RANK, ALPHA)
    rng = np.random.default_rng(0)
    for module, attr in lora_adapters._lora_modules(adapted):
        if attr != "w":
            continue
        target = merged
        for key in module.qwix_path:
            target = target[key] if isinstance(key, int) else getattr(target, key)
        lhs, rhs = module.einsum_str.split("->")[0].split(",")
        x = rng.standard_normal([module.w.shape[rhs.index(c)] if c in rhs else 2 for c in lhs])
        a, b, w = (_f32(v.get_value()) for v in (module.w_lora_a, module.w_lora_b, module.w))
        want = np.einsum(module.einsum_str, x, w) + np.einsum(module.w_lora_einsum_str, x, a, b) * (
            ALPHA / RANK
        )
        np.testing.assert_allclose(
            np.einsum(module.einsum_str, x, _f32(target.w.get_value())), want, rtol=0.02, atol=0.02
        )


def test_lora_rollout_abstract_lowering_equals_device_lowering(lora42, tok, mesh42):
    _, adapted = lora42
    sampler = rollout.make_sampler(adapted, tok, 40)
    state = rollout.init_rollout_state(sampler, rollout.random_prompts(8, 12, V), 20, mesh=mesh42)
    with jax.set_mesh(mesh42):  # as rollout.rollout runs it and plan mode compiles it
        real = sampler._compiled_prefill_fn.lower(
            sampler._flattened_transformer_state, state, None, echo=False
        ).as_text()
    ar = rollout_workload.abstract_rollout(
        "gemma3-tiny",
        8,
        12,
        20,
        40,
        mesh=mesh42,
        vocab_size=V,
        is_sampling=False,
        lora_rank=RANK,
        lora_alpha=ALPHA,
    )
    prefill = ar.executables(12, 20)[0]
    with jax.set_mesh(mesh42):
        planned = prefill.fn.lower(*prefill.args, **prefill.kwargs).as_text()
    assert planned == real and "sdy.sharding_constraint" in planned


def test_train_step_device_lowering_equals_the_plan_executable(lora42, mesh42):
    _, adapted = lora42
    exe = lora_train.lora_train_executable(
        "gemma3-tiny", 8, 16, RANK, mesh=mesh42, vocab_size=V, microbatches=2
    )
    assert exe.resident_args == {2: "adapters", 3: "weights", 4: "optimizer state"}
    graph, lora_params, base_params = lora.split_lora(adapted)
    optimizer = exe.args[1]
    opt_state = lora.init_opt_state(optimizer, lora_params, mesh=mesh42)
    tokens = lora.shard_batch(rollout.random_prompts(8, 17, V, seed=5), mesh42)
    with jax.set_mesh(mesh42):  # as notebook 02 runs it and plan mode compiles it
        real = lora.train_step.lower(
            graph, optimizer, lora_params, base_params, opt_state, tokens, microbatches=2
        ).as_text()
        planned = exe.fn.lower(*exe.args, **exe.kwargs).as_text()
    assert real == planned and "sdy.sharding_constraint" in planned


@pytest.mark.parametrize("family", FAMILIES)
def test_lora_train_compiles_for_a_tpu_topology(family):
    """Every family's LoRA train step, compiled deviceless by libtpu for a v5e-8."""
    mesh = target_mesh(parse_target("v5e-8"), "4x2")
    exe = lora_train.lora_train_executable(
        f"{family}-tiny", 8, 32, RANK, mesh=mesh, vocab_size=V, remat="block", loss="full"
    )
    compiled = exe.fn.lower(*exe.args, **exe.kwargs).compile(
        {"exec_time_optimization_effort": -1.0}
    )
    stats = compiled.memory_analysis()
    assert stats.argument_size_in_bytes > 0 and stats.temp_size_in_bytes > 0


def test_lora_overhead_presets_and_parameters():
    local, field = LoraOverhead.local(), LoraOverhead.field()
    assert local.model == "gemma3-tiny" and local.batch_sizes == (1, 8)
    assert (local.steps, local.prompt_len, local.train_seq) == (32, 16, 64)
    assert field.model == "gemma3-1b" and field.batch_sizes == (1, 16, 64, 128)
    assert (field.steps, field.prompt_len, field.train_seq) == (1024, 256, 512)
    assert field.rank == 16 and field.alpha == 32.0  # alpha = 2 x rank
    given = report.setting("local", LoraOverhead, RANK=4, BATCH_SIZES=[8, 2, 8], TRAIN_SEQ=None)
    assert given.batch_sizes == (2, 8) and given.alpha == lora.default_alpha(4)
    assert given.train_seq == 64  # None keeps the preset's value


@pytest.mark.parametrize(
    "bad, says",
    [
        ({"RANK": 0}, "RANK"),
        ({"BATCH_SIZES": []}, "BATCH_SIZES"),
        ({"BATCH_SIZES": [0, 8]}, "BATCH_SIZES"),
        ({"TRAIN_SEQ": 0}, "TRAIN_SEQ"),
        ({"TRAIN_BATCH": -1}, "TRAIN_BATCH"),
        ({"LR": 0.0}, "LR"),
        ({"MODEL": "gemma3-huge"}, "gemma3-1b"),
        ({"WEIGHTS": "random"}, "dummy"),
    ],
)
def test_lora_overhead_refuses_a_bad_parameter_in_one_line(bad, says):
    with pytest.raises(BadInput, match=says) as err:
        report.setting("plan", LoraOverhead, **bad)
    assert "\n" not in str(err.value)


def test_findings_check_the_committed_local_facts_only_for_their_model_and_rank(capsys):
    quoted = {"local": {"model": "gemma3-tiny", "rank": 16, "lora_bytes": 503808, "freed_bytes": 0}}
    findings.check_local(quoted, "gemma3-tiny", 16, lora_bytes=503808, freed_bytes=0)
    said = capsys.readouterr().out
    assert "adapter bytes: 503808 agrees" in said and "frees: 0 agrees" in said
    findings.check_local(quoted, "gemma3-tiny", 16, lora_bytes=1, freed_bytes=0)
    assert "DIFFERS" in capsys.readouterr().out
    findings.check_local(quoted, "gemma3-tiny", 4, lora_bytes=1, freed_bytes=0)  # another rank
    assert capsys.readouterr().out.count("no committed number") == 2
    findings.check_local({}, "gemma3-tiny", 16, lora_bytes=1, freed_bytes=0)  # no file here
    assert "DIFFERS" not in capsys.readouterr().out


def test_findings_compare_lora_decode_with_the_base_at_the_same_batch():
    rows = [
        {"workload": "rollout", "batch": 1, "decode_ms_per_token": 2.0},
        {"workload": "rollout", "batch": 8, "status": "oom"},
        {"workload": "lora-rollout", "batch": 1, "decode_ms_per_token": 2.5},
        {"workload": "lora-rollout", "batch": 8, "decode_ms_per_token": 1.0},
    ]
    compared = findings.against_base(rows)
    assert [r["decode_vs_base"] for r in compared[::2]] == [0.0, 0.25]
    assert math.isnan(compared[1]["decode_vs_base"]) and math.isnan(compared[3]["decode_vs_base"])
    assert compared[2] == {**rows[2], "decode_vs_base": 0.25}  # the row itself is kept


def test_a_lora_rank_wider_than_the_model_is_one_line():
    with pytest.raises(BadInput, match="LoRA rank 100000 exceeds gemma3-tiny's model width D="):
        models.abstract_model("gemma3-tiny", lora_rank=100_000, lora_alpha=1.0)
