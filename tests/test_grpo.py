"""shared.grpo, shared.plan.workloads.grpo, shared.grpo.token_logprobs: the arithmetic task and
reward, a real 2-step tunix GRPO run on gemma3-tiny (8 CPU devices, chunked log-probs swapped in),
chunked log-probs against tunix's, and the grpo plan workload compiled for a TPU v5e-8 topology."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P
from tunix.rl import common

from shared import grpo, models, plan
from shared.errors import BadInput
from shared.grpo import token_logprobs
from shared.hardware import parse_target
from shared.hardware.sharding import bytes_per_device, make_mesh
from shared.paths import ROOT
from shared.plan import verdict
from shared.plan.__main__ import main as plan_cli
from shared.plan.compiler import compiled
from shared.plan.compiler.executable import lower
from shared.plan.workloads import grpo as grpo_plan

TINY = grpo.GRPOSettings(
    prompt_len=8,
    completion_len=4,
    prompts_per_step=4,
    num_generations=2,
    lora_rank=4,
    learning_rate=1e-3,
    logps="chunked",
)
STEPS = 2


# ---------------------------------------------------------------------------- task and reward


def test_reward_is_exact_match():
    completions = ["19", " 19\n", "19 apples", "18", "", "190"]
    assert grpo.arithmetic_reward(["12+7="] * 6, completions, ["19"] * 6) == [
        1.0,
        1.0,
        0.0,
        0.0,
        0.0,
        0.0,
    ]


def test_reward_takes_tunix_keywords_and_numpy_strings():
    answer = np.repeat(np.array(["3", "4"]), 2)  # as tunix repeats a column G times
    rewards = grpo.arithmetic_reward(
        prompts=list(np.repeat(np.array(["1+2=", "2+2="]), 2)),
        completions=["3", "5", "4", "4 "],
        answer=answer,
        mode="train",
        trajectory_ids=["0_0", "0_1", "1_0", "1_1"],
    )
    assert rewards == [1.0, 0.0, 1.0, 1.0]


def test_reward_rejects_misaligned_columns():
    with pytest.raises(ValueError):
        grpo.arithmetic_reward(["1+1="], ["2", "2"], ["2"])


def test_problems_are_correct_deterministic_and_nonnegative():
    problems = grpo.arithmetic_problems(200, seed=3, max_operand=9, ops="+-*")
    assert problems == grpo.arithmetic_problems(200, seed=3, max_operand=9, ops="+-*")
    for prompt, answer in problems:
        assert prompt.endswith("=") and int(answer) >= 0
        assert eval(prompt[:-1]) == int(answer)  # noqa: S307 - digits and one operator
    assert {p[:-1].strip("0123456789") for p, _ in problems} == {"+", "-", "*"}
    with pytest.raises(BadInput):
        grpo.arithmetic_problems(3, ops="/")


def test_batches_are_string_columns_per_step():
    batches = grpo.arithmetic_batches(3, 4, seed=1)
    assert len(batches) == 3
    for batch in batches:
        assert batch["prompts"].shape == batch["answer"].shape == (4,)
        rewards = grpo.arithmetic_reward(batch["prompts"], batch["answer"], batch["answer"])
        assert rewards == [1.0] * 4


def test_settings_resolve_batches_like_tunix():
    sizes = grpo.GRPOSettings(prompts_per_step=8, mini_batch=4, train_micro_batch=2).batches()
    assert sizes == {"step": 8, "mini": 4, "train_micro": 2, "rollout_micro": 2, "logps_micro": 2}
    config = grpo.GRPOSettings(prompts_per_step=8, train_micro_batch=2).training_config(1)
    assert (config.mini_batch_size, config.gradient_accumulation_steps) == (8, 4)
    for bad in (
        dict(prompts_per_step=6, mini_batch=4),
        dict(num_generations=1),
        dict(prompts_per_step=8, mini_batch=4, train_micro_batch=8),
    ):
        with pytest.raises(BadInput):
            grpo.GRPOSettings(**bad).batches()


# ---------------------------------------------------------------------------- a real run


def _host(tree):
    return [np.asarray(jax.device_get(x)) for x in jax.tree.leaves(tree)]


@pytest.fixture(scope="module")
def mesh():
    return make_mesh()


@pytest.fixture(scope="module")
def trained(mesh):
    model, tok = models.load("gemma3-tiny", "dummy", mesh=mesh)
    with grpo.quick_compiles():
        run = grpo.build_grpo(model, tok, mesh, TINY, steps=STEPS)
        before = {
            "lora": _host(nnx.state(run.policy, nnx.LoRAParam)),
            "base": _host(grpo.base_weights(model)),
            "copies": grpo.base_copies(run),
        }
        result = grpo.run_grpo(run, grpo.arithmetic_batches(STEPS, TINY.prompts_per_step))
    return run, result, before


def test_run_reports_tunix_metrics_per_step(trained):
    _, result, _ = trained
    assert len(result.steps) == STEPS
    for row in result.steps:
        for column in ("reward_mean", "loss", "kl", "grad_norm", "completion_len"):
            assert np.isfinite(row[column]), (column, row)
        assert 0.0 <= row["reward_mean"] <= 1.0
    # the policy starts as the reference (lora_b 0): the chunked reference log-probs agree
    # with the policy's own (tunix's, inside the loss) to bf16 noise
    assert abs(result.steps[0]["kl"]) < 1e-3
    assert result.steps[1]["grad_norm"] > 0.0
    assert common.compute_per_token_logps is token_logprobs.TUNIX_LOGPS  # swap undone


def test_every_phase_is_timed(trained):
    _, result, _ = trained
    for row in result.steps:
        for phase in ("rollout", "reference_logps", "rewards", "policy_update"):
            assert row[f"{phase}_s"] > 0.0, (phase, row)
        assert "old_policy_logps_s" not in row  # num_iterations = 1
        phases = sum(v for k, v in row.items() if k.endswith("_s") and k != "step_s")
        assert phases <= row["step_s"] * 1.0001
    first, later = result.steps[0]["step_s"], result.steps[1]["step_s"]
    assert first > later  # the first step compiles every phase
    assert result.wall_s >= sum(row["step_s"] for row in result.steps)
    assert result.steady()["step_s"] == later


def test_training_moves_the_adapters_only(trained):
    run, _, before = trained
    lora_after = _host(nnx.state(run.policy, nnx.LoRAParam))
    assert any(not np.array_equal(a, b) for a, b in zip(before["lora"], lora_after, strict=True))
    for model in (run.policy, run.reference, run.cluster.inference_worker.get_model("reference")):
        for a, b in zip(before["base"], _host(grpo.base_weights(model)), strict=True):
            np.testing.assert_array_equal(a, b)


def test_first_update_copies_the_base_weights(trained):
    """tunix 0.1.7's train step (nnx.jit over the whole policy, only the optimizer donated)
    writes every policy variable back as a new buffer: from the first update on, the policy
    and the reference hold the base weights twice. Plan mode counts them twice; if this
    starts failing, tunix shares them again and grpo_plan's accounting should change."""
    run, _, before = trained
    assert before["copies"] == 1 and grpo.base_copies(run) == 2


def test_prompts_longer_than_prompt_len_fail_early(trained):
    run, _, _ = trained
    with pytest.raises(BadInput, match="prompt_len"):
        run.check_prompts([{"prompts": np.array(["12+7=" * 4])}])


def _layout(tree):
    return [(x.shape, x.dtype, x.sharding) for x in jax.tree.leaves(tree)]


def _same_layout(abstract, live):
    assert len(abstract) == len(live)
    for (shape, dtype, sharding), (live_shape, live_dtype, live_sharding) in zip(
        abstract, live, strict=True
    ):
        assert (shape, dtype) == (live_shape, live_dtype)
        assert sharding.is_equivalent_to(live_sharding, len(shape)), (sharding, live_sharding)


def test_abstract_phases_take_what_the_live_run_holds(trained, mesh):
    """Plan mode's arguments, built on the same CPU mesh, against the buffers tunix holds after
    the run: the policy, its optimizer state, the reference and the Sampler's weights."""
    run, _, _ = trained
    vocab = models.family_of_model(run.policy).vocab_size(run.policy.config)
    exes = {
        e.label: e
        for e in grpo_plan.abstract_phases(
            "gemma3-tiny", TINY, mesh=mesh, tokenizer=run.tokenizer, vocab_size=vocab
        )
    }
    model, optimizer, _ = exes["policy_update"].args
    _same_layout(_layout(nnx.state(model)), _layout(nnx.state(run.policy)))
    trainer = run.cluster.actor_trainer
    _same_layout(_layout(nnx.state(optimizer)), _layout(nnx.state(trainer.optimizer)))
    _same_layout(_layout(exes["reference_logps"].args[1]), _layout(nnx.state(run.reference)))
    sampler = run.cluster.rollout._sampler
    _same_layout(
        _layout(exes["rollout_prefill"].args[0]), _layout(sampler._flattened_transformer_state)
    )
    assert exes["reference_logps"].fn is token_logprobs.compute_per_token_logps


def test_ids_past_the_dummy_tokenizer_decode_as_its_unknown_piece():
    """Random weights of gemma3-1b (V = 262,144) sample ids the dummy weights' 4,096-piece
    tokenizer has no piece for: SentencePiece raised OUT_OF_RANGE inside tunix's Sampler on an
    H100 (bench_grpo --parts device). Such an id reads as the unknown piece; known ids as the
    tokenizer reads them."""
    tok = models.local_tokenizer()
    text = grpo.runner.TextTokenizer(tok)
    known = tok.EncodeAsIds("to be or not")
    assert text.decode(known) == tok.DecodeIds(known)
    past = tok.GetPieceSize() + 5
    with pytest.raises(IndexError):
        tok.DecodeIds([*known, past])
    assert text.decode([*known, past]) == tok.DecodeIds([*known, tok.unk_id()])


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_the_committed_gpu_grpo_step_agrees_with_its_plan(gpu):
    """benchmarks/results/grpo_<gpu>.json (bench_grpo.py --parts device,predict on that GPU; the
    H200's after GRPO's decode took prefill's compiled layout): the demo recipe ran, the plan
    compiled for <gpu>-1 said it fits, and the measured peak (autotuner off) is within 1% of
    the predicted bytes for the same request."""
    found = json.loads((ROOT / f"benchmarks/results/grpo_{gpu}.json").read_text())
    ran, predicted = found["device"], found["predicted"]
    assert ran["run_peak"]["status"] == "ok" and predicted["fits"]
    assert ran["recipe"] == predicted["request"] and predicted["request"]["target"] == f"{gpu}-1"
    measured = ran["run_peak"]["peak_bytes_per_device"]
    assert abs(predicted["bytes_per_device"] / measured - 1) < 0.01
    assert predicted["roofline_lower_bound_s"] < ran["timed"]["steady"]["step_s"]


def test_a_jax_without_the_effort_knob_compiles_fast_verdicts_without_it(monkeypatch):
    """jax 0.11.2 on an H100 refused {"exec_time_optimization_effort": -1} ("No such compile
    option"): where jax has no such knob, a fast compile leaves it out (and is an exact one)."""
    from shared.plan.compiler import compiled

    assert compiled.takes_effort()  # the pinned jax 0.10.2 has it
    assert "exec_time_optimization_effort" in compiled.fast_options("cpu")
    monkeypatch.setattr(compiled, "takes_effort", lambda: False)
    assert compiled.fast_options("cpu") == {}
    assert set(compiled.fast_options("tpu")) == set(compiled.NO_SPARSECORE_COLLECTIVES)


# ---------------------------------------------------------------------------- chunked log-probs


@pytest.mark.parametrize(
    "dtype, softcap, temperature",
    [(jnp.float32, None, 0.9), (jnp.bfloat16, 30.0, 1.0), (jnp.float32, 2.0, 0.7)],
)
def test_chunked_token_logps_equal_the_full_log_softmax(dtype, softcap, temperature):
    """Chunks that divide neither T nor V (the shifted last vocabulary chunk is masked)."""
    B, T, D, V = 2, 7, 16, 1000
    hidden = (jax.random.normal(jax.random.PRNGKey(0), (B, T, D)) * 2).astype(dtype)
    table = jax.random.normal(jax.random.PRNGKey(1), (V, D)).astype(dtype)
    targets = jax.random.randint(jax.random.PRNGKey(2), (B, T), 0, V)
    logits = models.capped((hidden @ table.T).astype(dtype), softcap)
    logits = logits if temperature == 1.0 else logits / temperature
    want = jnp.take_along_axis(
        jax.nn.log_softmax(logits.astype(jnp.float32)), targets[..., None], axis=-1
    )[..., 0]
    got = token_logprobs.chunked_token_logps(
        hidden,
        table,
        targets,
        temperature=temperature,
        softcap=softcap,
        chunk_size=3,
        vocab_chunk_size=300,
    )
    assert got.dtype == jnp.float32 and got.shape == (B, T)
    np.testing.assert_allclose(got, want, atol=1e-4 if dtype == jnp.float32 else 2e-2)


@pytest.mark.parametrize(
    "name, dtype, atol", [("gemma2-tiny", jnp.float32, 1e-5), ("qwen3-tiny", jnp.bfloat16, 1e-2)]
)
def test_chunked_logps_equal_tunix(name, dtype, atol):
    """tunix's compute_per_token_logps against ours on tiny models (Gemma 2: tied head, final
    soft-cap; Qwen 3: untied head), left-padded prompts and a padded completion, at the
    rollout's temperature. bf16: both round the logits to bf16 but XLA fuses the two programs
    differently, so they sit ~1e-3 apart (on values ~8)."""
    model = models.dummy_model(
        name, mesh=make_mesh((1, 1), jax.devices()[:1]), vocab_size=1000, dtype=dtype, scale=0.1
    )
    graph, state = nnx.split(model)
    rng = np.random.default_rng(0)
    prompts, completions = rng.integers(3, 1000, (4, 8)), rng.integers(3, 1000, (4, 6))
    prompts[:, :3], completions[1, 4:] = models.PAD_ID, models.PAD_ID
    kwargs = {"pad_id": models.PAD_ID, "eos_id": models.EOS_ID, "temperature": 0.9}
    with grpo.quick_compiles():
        want = common.compute_per_token_logps(graph, state, prompts, completions, **kwargs)
        got = token_logprobs.compute_per_token_logps(graph, state, prompts, completions, **kwargs)
    np.testing.assert_allclose(got, want, atol=atol)
    with token_logprobs.chunked_logps():  # the swap routes forward-only calls to ours
        assert common.compute_per_token_logps is not token_logprobs.TUNIX_LOGPS
        swapped = common.compute_per_token_logps(graph, state, prompts, completions, **kwargs)
    np.testing.assert_array_equal(swapped, got)
    assert common.compute_per_token_logps is token_logprobs.TUNIX_LOGPS


# ---------------------------------------------------------------------------- plan mode


REQUEST = plan.Request(
    "grpo",
    "gemma3-tiny",
    "v5e-8",
    batch=8,
    prompt_len=8,
    steps=4,
    num_generations=2,
    lora_rank=4,
    fast=True,
    layers=1,  # what these tests read does not depend on depth; one layer compiles 3-4x faster
)


@pytest.fixture(scope="module")
def plan_cache(tmp_path_factory):
    """A fresh plan cache for this module's verdicts (the CLI test reads back its own)."""
    before = verdict.CACHE_DIR
    verdict.CACHE_DIR = tmp_path_factory.mktemp("plan")
    yield verdict.CACHE_DIR
    verdict.CACHE_DIR = before


def test_grpo_workload_compiles_for_v5e_8_and_counts_the_base_twice(plan_cache):
    # the update compiled alone first, as a search does below its answer: the whole step at the
    # same batch takes that compile (the same program) and compiles the other phases
    alone = plan.plan_point(dataclasses.replace(REQUEST, phases="update"))
    point = plan.plan_point(REQUEST)
    assert point["fits"] and not point["skipped"] and not point["refused"]
    reused = [k for k, e in point["executables"].items() if e.get("compiled_before")]
    assert reused == ["policy_update"]
    alone_update = alone["executables"]["policy_update"]
    assert point["executables"]["policy_update"]["temp_bytes"] == alone_update["temp_bytes"]
    assert list(point["executables"]) == [
        "rollout_prefill",
        "rollout_decode",
        "reference_logps",
        "policy_update",
    ]
    assert set(point["resident"]) == {"weights", "reference weights", "optimizer state"}
    mesh = plan.target_mesh(parse_target("v5e-8"))
    exes = grpo_plan.abstract_phases(
        "gemma3-tiny", grpo_plan.settings(REQUEST), mesh=mesh, layers=REQUEST.layers
    )
    base = exes[2].args[1]  # the reference's state: the base alone
    assert point["resident"]["reference weights"] == bytes_per_device(base)
    assert point["resident"]["weights"] > point["resident"]["reference weights"]  # + adapters
    # tunix 0.1.7's update, as the compiler sees it: the optimizer state is aliased, the policy
    # weights are not (fewer alias bytes than the weights hold), and a new copy of them is
    # among the outputs; so the plan counts the base twice, and says which tunix it models
    update = point["executables"]["policy_update"]
    unaliased_outputs = update["output_bytes"] - update["alias_bytes"]
    assert update["alias_bytes"] < point["resident"]["weights"] <= unaliased_outputs
    assert any("tunix 0.1.7 release" in note for note in point["notes"])
    assert any("activation shardings applied" in note for note in point["notes"])
    assert exes[2].kwargs["prompt_tokens"].sharding.spec == P("fsdp")  # 8 sequences, 8 chips
    assert exes[1].repeats == REQUEST.steps  # the decode loop, once per completion token
    logps = grpo_plan.workload(dataclasses.replace(REQUEST, phases="logps"), mesh)
    assert [e.label for e in logps.executables] == ["reference_logps"]
    assert set(logps.resident) == {"weights", "optimizer state"}  # still counted


def test_settings_from_a_request_count_sequences():
    recipe = grpo_plan.settings(
        dataclasses.replace(REQUEST, num_generations=4, batch=16, train_micro=8)
    )
    assert (recipe.prompts_per_step, recipe.train_micro_batch, recipe.logps_micro_batch) == (
        4,
        2,
        4,
    )
    assert recipe.calls_per_step() == {"rollout": 1, "logps": 1, "update": 2}
    with pytest.raises(BadInput, match="num_generations"):
        grpo_plan.settings(dataclasses.replace(REQUEST, num_generations=3))


def test_cli_prints_the_grpo_verdict(plan_cache, capsys):
    """The whole model's policy update alone (--phases: one executable), compiled, then read
    back from the plan cache."""
    args = ["grpo", "--model", "gemma3-tiny", "--target", "v5e-8", "--batch", "8"]
    args += ["--prompt-len", "8", "--completion-len", "4", "--num-generations", "2"]
    args += ["--lora-rank", "4", "--fast", "--phases", "update"]
    plan_cli(args)
    assert "from the plan cache" not in capsys.readouterr().out
    plan_cli(args)
    out = capsys.readouterr().out
    assert "grpo gemma3-tiny" in out and "FITS" in out and "from the plan cache (compiled 20" in out
    assert "reference weights" in out and "policy_update" in out


def test_decode_takes_the_kv_cache_as_the_compiled_prefill_lays_it_out():
    """tunix's decode receives prefill's committed outputs: with the activation shardings
    applied the KV cache leaves prefill split over the batch, and the plan lowers decode with
    the layout prefill's own compile gives (no compile of its own to learn it). Before that
    compile, decode's arguments are split as far as the mesh allows: no more bytes a device,
    so a floor built from them stays a floor."""
    mesh = plan.target_mesh(parse_target("v5e-8"))
    exes = grpo_plan.abstract_phases(
        "gemma3-tiny", grpo_plan.settings(REQUEST), mesh=mesh, layers=REQUEST.layers
    )
    prefill, decode = exes[0], exes[1]
    assert decode.laid_out_by == prefill.label
    assert all(x.sharding.spec == P() for x in jax.tree.leaves(prefill.args[1].cache))
    with jax.set_mesh(mesh):
        _, layout = compiled.compile_with_layout(prefill.fn.lower(*prefill.args, **prefill.kwargs))
    laid_out = decode.lay_out(layout)[1]
    caches = [x for x in jax.tree.leaves(laid_out.cache) if x.ndim == 4]
    assert caches and all(tuple(x.sharding.spec)[:1] == ("fsdp",) for x in caches)
    assert bytes_per_device(decode.args[1]) <= bytes_per_device(laid_out)
    with pytest.raises(ValueError, match="takes the outputs of rollout_prefill"):
        lower(decode, {})


def test_a_prefill_too_big_for_the_chip_is_a_verdict_not_an_error(plan_cache):
    """Reading prefill's output layout compiles it; a batch whose prefill the compiler refuses
    must still come back as "does not fit" (the atlas's searches go through such batches)."""
    huge = dataclasses.replace(
        REQUEST, model="gemma3-1b", batch=4096, steps=1024, phases="rollout", layers=None
    )
    point = plan.plan_point(huge)
    assert not point["fits"] and (point["refused"] or not point["compiled"])
