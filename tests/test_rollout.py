"""shared.rollout.sampler and shared.rollout.sweep: tunix Sampler rollouts for every family on CPU,
and the abstract twin plan mode compiles (the same functions, the same shardings); notebook 01's
setting (shared.rollout.settings) and its findings beside the committed ones."""

import dataclasses
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import TEST_VOCAB as V

from shared import models, plan, report
from shared.errors import BadInput
from shared.findings import rollout as findings
from shared.plan.compiler import executable as plan_executable
from shared.plan.workloads import rollout as rollout_workload
from shared.rollout import sampler as rollout
from shared.rollout import sweep as rollout_sweep
from shared.rollout.settings import CACHE_SLACK, RolloutSizing

B, PROMPT, STEPS, CACHE = 8, 12, 20, 40  # PROMPT is not a power of two on purpose


@pytest.fixture(scope="module")
def sampler(mesh8, tok):
    model = models.dummy_model("gemma3-tiny", mesh=mesh8, vocab_size=V, is_sampling=True)
    return rollout.make_sampler(model, tok, cache_size=CACHE)


@pytest.fixture(scope="module")
def result(sampler, mesh8):
    return rollout.rollout(sampler, rollout.random_prompts(B, PROMPT, V), STEPS, mesh=mesh8)


def test_rollout_reports_generated_tokens_and_kv_cache(result):
    buf = np.asarray(result.state.token_buffer)
    assert buf.shape == (B, PROMPT + STEPS)  # padded to PROMPT, not to 16
    assert result.prefill_s > 0 and result.decode_s > 0
    assert result.tokens.shape == (B,) and (result.tokens >= 1).all()
    for row, n in zip(buf[:, PROMPT:], result.tokens, strict=True):
        eos = np.flatnonzero(row == models.EOS_ID)
        assert n == (eos[0] + 1 if len(eos) else STEPS) - np.sum(row[:n] == models.PAD_ID)
    assert rollout.cache_bytes(result.state) == rollout.kv_cache_bytes(
        "gemma3-tiny", B, CACHE, vocab_size=V
    )


@pytest.mark.parametrize("family", ["gemma2", "gemma4", "llama3", "qwen3"])
def test_every_family_rolls_out_and_its_kv_cache_is_what_tunix_allocates(family, mesh1, tok):
    name = f"{family}-tiny"
    model = models.dummy_model(name, mesh=mesh1, vocab_size=V, is_sampling=True)
    sampler = rollout.make_sampler(model, tok, CACHE, stop_at_eos=False)
    out = rollout.rollout(sampler, rollout.random_prompts(2, PROMPT, V), STEPS, mesh=mesh1)
    generated = np.asarray(out.state.token_buffer)[:, PROMPT:]
    # never stops early: every step generated a token, except where it generated the pad id
    assert (out.tokens == STEPS - (generated == models.PAD_ID).sum(axis=1)).all()
    kv_total, kv_device = rollout_sweep.kv_bytes(sampler, 2, mesh1)
    assert rollout.cache_bytes(out.state) == kv_total == kv_device
    dims = models.model_dims(name, vocab_size=V)
    closed_form = 2 * dims.L * dims.K * dims.H * 2 * 2 * CACHE  # K and V, bf16, 2 rows
    if family == "gemma4":  # a ring cache of `window` slots on the local layer, wider global KV
        assert kv_total != closed_form
    else:
        assert kv_total == closed_form


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
    assert rollout.generated_tokens(fake, state, prompt_len=2).tolist() == [3, 5, 3]


def test_stop_at_eos_sets_eos_ids_once(sampler, tok):
    model = sampler.transformer
    assert rollout.make_sampler(model, tok, 16).eos_ids.tolist() == [tok.eos_id()]
    assert rollout.make_sampler(model, tok, 16, stop_at_eos=False).eos_ids.tolist() == [-1]


def test_bad_rollouts_fail_with_one_line(sampler, mesh8):
    for case in (
        lambda: rollout.init_rollout_state(sampler, np.ones((6, 4), np.int32), 4, mesh=mesh8),
        lambda: rollout.init_rollout_state(sampler, np.ones((8, 30), np.int32), 20, mesh=mesh8),
        lambda: rollout_workload.abstract_rollout(
            "gemma3-tiny", 8, 4, 4, 16, mesh=mesh8, vocab_size=V, semantics="0.1.4"
        ),
    ):
        with pytest.raises(BadInput) as err:
            case()
        assert "\n" not in str(err.value)


def test_abstract_rollout_compiles_and_runs_the_real_arrays(sampler, mesh8, result):
    ar = rollout_workload.abstract_rollout(
        "gemma3-tiny", B, PROMPT, STEPS, CACHE, mesh=mesh8, vocab_size=V
    )
    assert all(
        isinstance(x, jax.ShapeDtypeStruct)
        for x in jax.tree.leaves((ar.params, ar.state, ar.decode_state))
    )
    prefill, decode = ar.executables(PROMPT, STEPS)
    assert prefill.resident_args == decode.resident_args == {0: "weights"}
    compiled = [exe.fn.lower(*exe.args, **exe.kwargs).compile() for exe in (prefill, decode)]
    # The executables compiled from abstract arguments accept the device-mode arguments as
    # they are: same functions, same shapes, same shardings.
    state = rollout.init_rollout_state(
        sampler, rollout.random_prompts(B, PROMPT, V), STEPS, mesh=mesh8
    )
    state = compiled[0](sampler._flattened_transformer_state, state, None)
    state = compiled[1](sampler._flattened_transformer_state, state)
    assert np.array_equal(np.asarray(state.token_buffer), np.asarray(result.state.token_buffer))


def test_an_abstract_rollouts_prefill_lowers_without_tracing_the_model_again(mesh8, monkeypatch):
    """A verdict lowers the prefill the build traced for its output's shapes: jax keeps that
    trace, so the model runs once (0.4 s of a core a verdict for gemma3-1b on a v5e-1)."""
    ar = rollout_workload.abstract_rollout(
        "gemma3-tiny", B, PROMPT, STEPS, CACHE, mesh=mesh8, vocab_size=V
    )
    model_class = type(ar.sampler.transformer)
    calls = []
    traced = model_class.__call__

    def counted(self, *args, **kwargs):
        calls.append(1)
        return traced(self, *args, **kwargs)

    monkeypatch.setattr(model_class, "__call__", counted)
    prefill, _ = ar.executables(PROMPT, STEPS)
    with jax.set_mesh(mesh8):
        plan_executable.lower(prefill, {})
    assert calls == []
    jax.clear_caches()  # a fresh trace runs the model: the count above can see one
    with jax.set_mesh(mesh8):
        plan_executable.lower(prefill, {})
    assert calls


def test_a_tpu7x_rollout_names_the_flag_that_keeps_decode_from_copying_its_tiles(
    mesh8, monkeypatch
):
    """libtpu 0.0.42.1 copies a tpu7x decode's weights and KV cache into (16,128) tiles; a
    rollout verdict there names the flag that holds them once, and says nothing where the flag
    is set, on another chip, or at another libtpu (whose tiles nobody has read)."""
    flag = rollout_workload.TPU7X_DECODE_TILES_FLAG
    libtpu = {"libtpu": rollout_workload.TPU7X_DECODE_TILES_LIBTPU}
    monkeypatch.setattr(rollout_workload, "versions", lambda: libtpu)
    monkeypatch.delenv("LIBTPU_INIT_ARGS", raising=False)
    request = plan.Request(
        "rollout", "gemma3-tiny", "tpu7x-8", batch=B, prompt_len=PROMPT, steps=STEPS
    )
    (note,) = rollout_workload.workload(request, mesh8).notes
    assert f"LIBTPU_INIT_ARGS={flag} holds them once" in note
    assert not rollout_workload.copies_decode_tiles("v5p-8")
    monkeypatch.setenv("LIBTPU_INIT_ARGS", flag)
    assert not rollout_workload.copies_decode_tiles("tpu7x-8")
    monkeypatch.delenv("LIBTPU_INIT_ARGS")
    monkeypatch.setattr(rollout_workload, "versions", lambda: {"libtpu": "0.0.52"})
    assert not rollout_workload.copies_decode_tiles("tpu7x-8")


def test_tunix_016_semantics_hold_the_cache_twice_in_decode(mesh8):
    """0.1.6 does not donate: decode's outputs are a second KV cache, where 0.1.7 aliases them
    to its inputs; prefill reads one zeros layer for all layers."""
    memory = {}
    for semantics in rollout.SEMANTICS:
        ar = rollout_workload.abstract_rollout(
            "gemma3-tiny", B, PROMPT, STEPS, CACHE, mesh=mesh8, vocab_size=V, semantics=semantics
        )
        for exe in ar.executables(PROMPT, STEPS):
            stats = exe.fn.lower(*exe.args, **exe.kwargs).compile().memory_analysis()
            memory[semantics, exe.label] = stats
    kv_per_device = rollout.kv_cache_bytes("gemma3-tiny", B, CACHE, vocab_size=V) // 8
    assert memory["0.1.7", "decode"].alias_size_in_bytes >= kv_per_device
    assert memory["0.1.6", "decode"].alias_size_in_bytes == 0
    assert (
        memory["0.1.6", "prefill"].argument_size_in_bytes
        < memory["0.1.7", "prefill"].argument_size_in_bytes - kv_per_device // 2
    )


def test_text_prompts_left_pad_to_exact_length(sampler):
    ids = rollout.text_prompts(sampler, ["Shall I compare thee", "To be"], 16)
    assert ids.shape == (2, 16) and ids.dtype == np.int32
    first = np.argmax(ids != models.PAD_ID, axis=1)
    assert (ids[np.arange(2), first] == models.BOS_ID).all()
    assert (ids[1, : first[1]] == models.PAD_ID).all()


def test_sweep_records_out_of_memory_and_skips_larger_batches():
    def measure_one(batch, steps):
        return {
            "batch": batch,
            "steps": steps,
            "status": "oom" if batch >= 16 else "ok",
            "tokens_per_s": float(batch),
            "decode_ms_per_token": 1.0 / batch,
        }

    rows = rollout_sweep.sweep(measure_one, [(8, 4), (16, 4), (32, 4)], progress=False)
    assert [r["status"] for r in rows] == ["ok", "oom", "skipped"]
    summary = rollout_sweep.summarize(rows)
    assert summary["largest_ran"] == 8 and summary["first_oom"] == 16
    assert "between 8 and 16" in rollout_sweep.recommendation(summary, rows, "a CPU")


@pytest.mark.parametrize("fsdp", [1, 8])
def test_closed_form_max_batch_is_the_last_batch_whose_weights_and_kv_copies_fit(fsdp):
    dims, usable = models.model_dims("gemma3-1b"), 15 * 2**30
    largest = {}
    for semantics, copies in rollout_sweep.KV_COPIES.items():
        b = largest[semantics] = rollout_sweep.closed_form_max_batch(
            dims, usable, 1312, fsdp, semantics=semantics
        )
        assert b % fsdp == 0
        at = [
            rollout_sweep.closed_form_bytes_per_device(dims, n, 1312, fsdp, semantics=semantics)
            for n in (b, b + fsdp)
        ]
        assert at[0] <= usable < at[1]
        assert at[0] == 2 * 999885952 + copies * b // fsdp * 1312 * 2 * 26 * 256 * 2
    # tunix 0.1.6 holds the cache twice: about half the batch of 0.1.7
    assert abs(2 * largest["0.1.6"] - largest["0.1.7"]) <= 2 * fsdp


def test_rollout_sizing_presets_and_parameters():
    local, field = RolloutSizing.local(), RolloutSizing.field()
    assert (local.model, local.prompt_len, local.steps_max) == ("gemma3-tiny", 16, 32)
    assert local.cache == 16 + 32 + CACHE_SLACK  # no CACHE_SIZE: prompt + steps + slack
    assert (field.model, field.prompt_len, field.steps_max) == ("gemma3-1b", 128, 1024)
    assert field.cache == 1312  # the field's KV slots
    assert {64, 68, 128, 132, 200, 256}.issubset(field.batch_sizes)
    # papermill hands lists, unsorted and repeated; the setting keeps sorted distinct tuples
    small = report.setting(
        "local", RolloutSizing, BATCH_SIZES=[4, 1, 4], STEPS=[8, 4], PROMPT_LEN=8, TUNIX=["0.1.6"]
    )
    assert (small.batch_sizes, small.steps, small.tunix) == ((1, 4), (4, 8), ("0.1.6",))
    assert small.cache == 8 + 8 + CACHE_SLACK and small.model == "gemma3-tiny"
    assert small.points(1) == [(1, 4), (1, 8), (4, 8)]  # steps at the smallest batch, then batches
    assert small.points(4) == [(4, 4), (4, 8)]  # batch 1 does not split over 4 devices
    assert report.setting("device", RolloutSizing, CACHE_SIZE=2048).cache == 2048


@pytest.mark.parametrize(
    "bad, says",
    [
        ({"PROMPT_LEN": 0}, "PROMPT_LEN"),
        ({"BATCH_SIZES": []}, "BATCH_SIZES"),
        ({"STEPS": [0, 8]}, "STEPS"),
        ({"TRIALS": 0}, "TRIALS"),
        ({"MODEL": "gemma3-huge"}, "gemma3-1b"),
        ({"WEIGHTS": "random"}, "dummy"),
        ({"TUNIX": ["0.1.4"]}, "0.1.7"),
        ({"CACHE_SIZE": 1000}, "CACHE_SIZE 1000 < PROMPT_LEN"),
    ],
)
def test_rollout_sizing_refuses_a_bad_parameter_in_one_line(bad, says):
    with pytest.raises(BadInput, match=says) as err:
        report.setting("plan", RolloutSizing, **bad)
    assert "\n" not in str(err.value)


def _probe(batch, fits, fast=False, nbytes=0):
    return {
        "batch": batch,
        "fits": fits,
        "fast": fast,
        "bytes_per_device": nbytes,
        "compile_s": 1.0,
    }


def test_findings_show_the_committed_searches_where_none_ran_and_check_live_ones(capsys):
    quoted = report.committed(findings.QUOTED)
    if quoted is None:
        pytest.skip("no committed results here")
    request = plan.Request(
        "rollout", "gemma3-1b", "v5e-1", batch=1, prompt_len=128, steps=1024, cache_size=1312
    )
    assert findings.same_setting(quoted, request)
    assert not findings.same_setting(quoted, dataclasses.replace(request, mesh="1x1"))
    assert not findings.same_setting(None, request)
    # local and device mode search nothing: they draw and price the committed searches
    drawn, shown = findings.searches_to_draw({}, quoted, ("0.1.6",), request)
    assert list(drawn) == ["0.1.6"] and shown == quoted["setting"]
    assert findings.field_points(quoted, shown) == quoted["field"]
    priced = findings.points_to_price({}, quoted)
    assert priced["0.1.7"]["batch"] == 395 and priced["0.1.6"]["batch"] == 212
    assert priced["0.1.7"]["workload"] == "rollout" and priced["0.1.7"]["target"] == "v5e-1"
    capsys.readouterr()
    # a plan search at the committed setting must reproduce the committed answer
    live = {"0.1.7": {"max_batch": 395, "probes": [_probe(395, True), _probe(396, False)]}}
    findings.check_searches(live, quoted, request, None)
    assert "395 agrees with the committed 395" in capsys.readouterr().out
    findings.check_searches({"0.1.7": {**live["0.1.7"], "max_batch": 390}}, quoted, request, None)
    assert "DIFFERS" in capsys.readouterr().out
    findings.check_searches(live, quoted, request, [395, 396])  # batches picked, not searched
    assert "no committed number" in capsys.readouterr().out
    # this run's searches win over the committed ones
    drawn, shown = findings.searches_to_draw(live, quoted, ("0.1.7",), request)
    assert drawn is live and shown == findings.setting_of(request)
    assert findings.points_to_price(live, quoted) == {"0.1.7": live["0.1.7"]["probes"][0]}


def test_findings_exact_points_and_what_the_compiler_adds(capsys):
    found = findings.exact_points([_probe(8, True), _probe(16, False), _probe(4, True)], "0.1.6")
    assert found["max_batch"] == 8 and "fits at [8, 4], not at [16]" in capsys.readouterr().out
    assert findings.exact_points([_probe(8, False)], "0.1.7")["max_batch"] == 0
    dims = models.model_dims("gemma3-1b")
    at_max = {
        "0.1.7": {
            **_probe(8, True, nbytes=3 << 30),
            "worst": "prefill",
            "executables": {"prefill": {"temp_bytes": 5}},
        },
        "0.1.6": None,
    }
    (row,) = findings.compiler_vs_closed_form(at_max, dims, 1312, 1, 1)
    closed = rollout_sweep.closed_form_bytes_per_device(dims, 8, 1312, 1, 1, "0.1.7")
    assert row["closed_form_bytes"] == closed and row["compiler_adds_bytes"] == (3 << 30) - closed
    assert row["worst_temp_bytes"] == 5 and row["logits_f32_bytes"] == 8 * dims.V * 4
    assert findings.probe_rows({"0.1.7": {"probes": [_probe(8, True)]}})[0]["tunix"] == "0.1.7"


def test_findings_measured_bill_prices_a_device_and_not_a_cpu():
    row = {"batch": 16, "steps": 32, "prefill_s": 0.5, "decode_s": 3.1}
    cpu = findings.measured_bill(row, 1600, "v5e-1", "on-demand", on_device=False)
    assert cpu == "1,600 rollouts of 32 steps at batch 16 take 0.1 h; no dollars for a CPU"
    chip = findings.measured_bill(row, 1600, "v5e-1", "on-demand", on_device=True)
    assert chip.endswith("on-demand on v5e-1") and "$0.12" in chip  # $1.20 an hour for 0.1 h
