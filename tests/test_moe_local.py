"""The tiny mixtures of experts on a CPU, as notebooks 01 and 02 run them locally: each rolled out
beside its family's dense tiny model (shared.rollout.moe), and qwix LoRA on each: which weights
get adapters and a short fine-tune (shared.lora.experts, shared.lora.train.fine_tune)."""

import math
import types

import matplotlib.pyplot as plt
import numpy as np
import pytest
from conftest import TEST_VOCAB as V

from shared import lora, models
from shared.errors import BadInput
from shared.lora import experts as lora_experts
from shared.lora.settings import LoraOverhead
from shared.rollout import moe
from shared.rollout.plots import plot_moe


def _loader(mesh, tok, **kwargs):
    """models.load's stand-in: random weights at the test tokenizer's vocabulary."""
    return lambda name: (models.dummy_model(name, mesh=mesh, vocab_size=V, **kwargs), tok)


def _gpu_mesh():
    """What does_not_run and rollouts read of a mesh on one GPU."""
    return types.SimpleNamespace(
        devices=np.array([types.SimpleNamespace(platform="gpu")]), shape={"fsdp": 1, "tp": 1}
    )


def test_each_mixture_rolls_out_beside_its_dense_twin(mesh1, tok):
    rows = moe.rollouts(
        mesh1,
        prompt_len=4,
        steps=3,
        trials=1,
        rows_per_device=2,
        load=_loader(mesh1, tok, is_sampling=True),
    )
    by = {r["model"]: r for r in rows}
    assert list(by) == [name for pair in moe.PAIRS for name in pair]
    for dense, mixture in moe.PAIRS:
        d, m = by[dense], by[mixture]
        assert d["status"] == m["status"] == "ok", (d, m)
        assert (d["experts"], m["experts"]) == ("dense", "8, 2 per token")
        assert m["weights_bytes"] > d["weights_bytes"]  # every expert is stored
        assert m["tokens_per_s_vs_dense"] == pytest.approx(m["tokens_per_s"] / d["tokens_per_s"])
        assert "tokens_per_s_vs_dense" not in d
        for r in (d, m):
            assert r["batch"] == 2 and r["tokens"] == 2 * 3  # prefill's token + 2 decoded a row
            # the compiler's bytes hold the weights (arguments) and the KV cache
            assert r["compiled_bytes_per_device"] > r["kv_cache_bytes_per_device"] > 0
            assert r["peak_bytes_per_device"] is None  # a CPU has no memory_stats
    fig = plot_moe(rows, "test")
    assert [len(ax.patches) for ax in fig.axes] == [4, 4]
    plt.close(fig)


def test_qwen3_moe_does_not_run_on_a_gpu_mesh_and_its_row_says_so():
    gpu = _gpu_mesh()
    assert "megablox" in moe.does_not_run("qwen3-moe-tiny", gpu)
    assert moe.does_not_run("gemma4-moe-tiny", gpu) is None  # ragged_dot runs there
    assert moe.does_not_run("qwen3-tiny", gpu) is None

    def load(name):
        raise AssertionError(f"{name} was loaded")

    pairs = (("qwen3-moe-tiny", "qwen3-moe-tiny"),)
    rows = moe.rollouts(gpu, prompt_len=4, steps=2, trials=1, pairs=pairs, load=load)
    assert [r["status"] for r in rows] == ["does not run"] * 2
    assert "not on a gpu" in rows[0]["error"]


def test_does_not_run_is_none_on_a_cpu_mesh(mesh1):
    assert all(moe.does_not_run(n, mesh1) is None for pair in moe.PAIRS for n in pair)


@pytest.fixture(scope="module")
def adapted(mesh1):
    """qwix LoRA on each tiny mixture."""
    return {
        name: lora.apply_lora(models.dummy_model(name, mesh=mesh1, vocab_size=V), 4, 8.0)
        for name in lora_experts.MODELS
    }


def test_qwix_adapts_qwen3_moe_attention_only(adapted):
    model = adapted["qwen3-moe-tiny"]
    assert lora_experts.adapted_weights(model) == [f"attn/{p}_proj/w" for p in "koqv"]
    assert lora_experts.expert_weights(model) == [f"mlp/{p}_proj" for p in ("down", "gate", "up")]
    assert not lora_experts.experts_adapted(model)


def test_qwix_adapts_gemma4_moe_attention_and_its_dense_mlp_not_its_experts(adapted):
    model = adapted["gemma4-moe-tiny"]
    assert lora_experts.adapted_weights(model) == [
        "attn/attn_vec_einsum/w",
        "attn/k_einsum/w",  # the global layer, whose keys double as values
        "attn/kv_einsum/w",
        "attn/q_einsum/w",
        "mlp/down_proj/kernel",
        "mlp/gate_proj/kernel",
        "mlp/up_proj/kernel",
    ]
    assert lora_experts.expert_weights(model) == ["moe/gating_einsum", "moe/linear"]
    assert not lora_experts.experts_adapted(model)


def test_a_dense_model_has_no_expert_weights(mesh1):
    dense = models.dummy_model("gemma4-tiny", mesh=mesh1, vocab_size=V)
    assert lora_experts.expert_weights(dense) == [] and lora_experts.adapted_weights(dense) == []
    assert not lora_experts.experts_adapted(dense)


def test_an_adapter_beside_an_expert_stack_counts_as_adapting_the_experts(monkeypatch):
    """Were qwix to adapt the einsums of tunix's Qwen 3 MoE layer, their adapters would sit in
    the `mlp` module that holds the stacks."""
    monkeypatch.setattr(lora_experts, "expert_weights", lambda m: ["mlp/gate_proj"])
    monkeypatch.setattr(lora_experts, "adapted_weights", lambda m: ["mlp/gate_proj"])
    assert lora_experts.experts_adapted(None)
    monkeypatch.setattr(lora_experts, "adapted_weights", lambda m: ["mlp/gate_proj/kernel"])
    assert not lora_experts.experts_adapted(None)  # a dense mlp's own gate_proj module


def test_a_short_fine_tune_of_a_mixture_reports_its_loss_and_adapters(mesh1, tok):
    setting = LoraOverhead(
        "gemma3-tiny",
        (1,),
        steps=1,
        prompt_len=1,
        train_seq=16,
        rank=4,
        train_steps=3,
        train_batch=2,
    )
    names = ("gemma4-moe-tiny",)
    (row,) = lora_experts.fine_tunes(mesh1, setting, names=names, load=_loader(mesh1, tok))
    assert row["status"] == "ok" and row["experts"] == "8, 2 per token"
    assert row["experts_adapted"] is False and "moe/" not in row["adapted"]
    assert row["expert_weights"] == "moe/gating_einsum moe/linear"
    assert row["lora_params"] > 0 and row["step_ms"] > 0
    assert math.isfinite(row["loss_first"]) and math.isfinite(row["loss_last"])
    assert row["loss_first"] != row["loss_last"]  # the adapters moved
    said = lora_experts.describe(
        [row, {"model": "qwen3-moe-tiny", "status": "does not run", "error": "megablox"}]
    )
    assert said.splitlines() == [
        f"gemma4-moe-tiny (8, 2 per token): loss {row['loss_first']:.3f} -> "
        f"{row['loss_last']:.3f}; adapters on {row['adapted']}; none on its experts "
        "(moe/gating_einsum moe/linear)",
        "qwen3-moe-tiny: does not run (megablox)",
    ]


def test_play_tokens_start_with_bos_and_refuse_a_model_with_fewer_ids(mesh1, tok):
    model = models.dummy_model("gemma3-tiny", mesh=mesh1, vocab_size=V)
    stream = lora.play_tokens(tok, model)
    assert stream.dtype == np.int32 and stream[0] == tok.bos_id() and stream.max() < V
    small = models.dummy_model("gemma3-tiny", mesh=mesh1, vocab_size=64)
    with pytest.raises(BadInput, match="vocab"):
        lora.play_tokens(tok, small)
