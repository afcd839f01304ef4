"""shared.rollout.sampler and shared.rollout.sweep: tunix Sampler rollouts for every family on CPU,
and the abstract twin plan mode compiles (the same functions, the same shardings)."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import TEST_VOCAB as V

from shared import models
from shared.errors import BadInput
from shared.plan.workloads import rollout as rollout_workload
from shared.rollout import sampler as rollout
from shared.rollout import sweep as rollout_sweep

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
