"""Mixtures of experts planned as tunix runs them (shared.models.expert_routing): Qwen 3's
megablox path on a TPU slice, not the dense fallback this CPU host would pick; Gemma 4's
ragged_dot; the kernels each compiled program holds; a GPU refused in one line."""

import pytest
from conftest import cli_exit

from shared import models
from shared.errors import BadInput
from shared.models import expert_routing
from shared.plan import Request, plan_point
from shared.plan.__main__ import main as plan_cli
from shared.plan.atlas import render
from shared.plan.atlas.lookup import DOES_NOT_RUN
from shared.plan.atlas.run import run_cell
from shared.plan.atlas.store import Cell
from shared.plan.compiler import buffers
from shared.plan.verdict import compile_options

EFFORT = "exec_time_optimization_effort"


def _lora_step(model: str) -> dict:
    request = Request(
        workload="lora-train", model=model, target="v5e-8", batch=8, seq=256, lora_rank=8
    )
    return plan_point(request, use_cache=False)


def test_qwen3_moe_compiles_megablox_for_a_tpu_slice(empty_plan_cache):
    """Before expert_routing, the same request compiled one einsum per expert (the CPU
    fallback): no gmm, no all-to-all."""
    point = _lora_step("qwen3-moe-tiny")
    kernels = point["executables"]["lora_train_step"]["kernels"]
    assert kernels["gmm (Pallas)"] >= 6  # gate, up, down forward, and their backward
    assert kernels["ragged-all-to-all"] >= 4  # tokens to their experts' chips and back
    (layout,) = [n for n in point["notes"] if n.startswith("experts:")]
    assert "stored 1 per device (the expert axis over fsdp=8" in layout
    assert "megablox" in layout
    # gmm states its cost for a buffer of every token routed here (tunix sizes it so): no
    # lower bound, so the roofline takes the routed experts' matmuls instead
    assert point["flops_per_device"] < point["compiler_flops_per_device"]
    assert any(n.startswith("roofline of a megablox mixture of experts") for n in point["notes"])


def test_gemma4_moe_compiles_xlas_ragged_dot_kernel(empty_plan_cache):
    point = _lora_step("gemma4-moe-tiny")
    kernels = point["executables"]["lora_train_step"]["kernels"]
    assert kernels.get("ragged-dot (XLA kernel)", 0) >= 2
    assert not any("Pallas" in k for k in kernels)
    (layout,) = [n for n in point["notes"] if n.startswith("experts:")]
    assert "ragged_dot path" in layout


def test_a_dense_model_has_no_expert_note_nor_kernels(empty_plan_cache):
    point = _lora_step("qwen3-tiny")
    assert point["executables"]["lora_train_step"]["kernels"] == {}
    assert not [n for n in point["notes"] if n.startswith("experts:")]


def test_the_layer_is_wrapped_and_runs_as_shipped_without_a_mesh():
    """A one-device local run (no mesh in context) takes tunix's own choice: the CPU fallback,
    which computes here."""
    import jax.numpy as jnp

    assert expert_routing.installed()
    model = models.dummy_model("qwen3-moe-tiny")
    layer = model.layers[0].mlp
    out = layer(jnp.ones((1, 4, 128), jnp.bfloat16))
    assert out.shape == (1, 4, 128)


def test_a_fast_compile_of_a_megablox_model_keeps_xlas_default_effort():
    """libtpu 0.0.42.1 aborts the process on qwen3-30b-a3b's megablox step at a negative effort."""
    fast = dict(workload="lora-train", target="v5e-8", batch=8, seq=256, fast=True)
    assert EFFORT not in compile_options(Request(model="qwen3-moe-tiny", **fast), "tpu")
    assert EFFORT in compile_options(Request(model="qwen3-tiny", **fast), "tpu")
    assert EFFORT in compile_options(Request(model="gemma4-moe-tiny", **fast), "tpu")
    exact = Request(workload="lora-train", model="qwen3-moe-tiny", target="v5e-8")
    assert compile_options(exact, "tpu") is None


def test_qwen3_moe_on_a_gpu_is_one_line(capsys):
    argv = ["lora-train", "--model", "qwen3-30b-a3b", "--target", "h100-1", "--batch", "1"]
    code, err = cli_exit(plan_cli, argv, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "megablox, a Pallas TPU kernel" in err and "TPU slice" in err
    with pytest.raises(BadInput, match="does not run on a GPU"):
        plan_point(Request(workload="sft", model="qwen3-moe-tiny", target="t4-2", batch=2))


def test_the_atlas_marks_a_model_tunix_cannot_run_there():
    row = run_cell(Cell("qwen3-30b-a3b", "h100-8", "sft"), progress=False)
    assert row["status"] == DOES_NOT_RUN and "Pallas TPU kernel" in row["error"]
    assert row["wall_s"] < 60  # arithmetic on a config: nothing compiled
    assert render.cell_text(row) == "TPU only"
    other = run_cell(Cell("qwen3-30b-a3b", "t4-2", "sft"), progress=False)
    md, _ = render.render([row, other], ["qwen3-30b-a3b"], ["t4-2", "h100-8"], ["sft"], "test")
    (note,) = [line for line in md.splitlines() if "TPU only:" in line]  # one for both
    assert note.startswith("- qwen3-30b-a3b on t4-2, h100-8, TPU only: ") and "(t4-2)" not in note


def test_kernels_reads_pallas_kernels_and_ragged_ops():
    hlo = "\n".join(
        [
            '  %gmm = bf16[8,128] custom-call(%a), custom_call_target="tpu_custom_call", '
            'metadata={op_name="jit(step)/jvp()/shard_map/jit(gmm)/pallas_call"}',
            '  %r = bf16[8,128] custom-call(%a), custom_call_target="tpu_custom_call", '
            'metadata={op_name="jit(step)/ragged_dot_general/ragged-dot-none"}',
            "  %x = bf16[64,128] ragged-all-to-all(%a, %b, %c, %d, %e, %f)",
            "  %y = bf16[8,128] add(%a, %b)",
        ]
    )
    assert buffers.kernels(hlo) == {
        "gmm (Pallas)": 1,
        "ragged-dot (XLA kernel)": 1,
        "ragged-all-to-all": 1,
    }


def test_cheapest_leaves_out_the_gpus_a_megablox_model_cannot_run_on(monkeypatch):
    """Excluded with the reason, before anything compiles (nothing does here)."""
    from shared.plan.slices import cheapest

    monkeypatch.setattr(cheapest, "compile_candidate", lambda *a, **k: pytest.fail("compiled"))
    request = Request("lora-train", "qwen3-30b-a3b", "v5e-1", seq=2048, lora_rank=16)
    result = cheapest.cheapest(request, 1e6, slices=("h100-8", "t4-2"), progress=False)
    assert {r["target"]: r["status"] for r in result["rows"]} == {
        "h100-8": "excluded",
        "t4-2": "excluded",
    }
    assert all("Pallas TPU kernel" in r["why"] for r in result["rows"])


def test_a_notebook_shows_the_committed_cell_or_the_planner_command():
    from shared.plan.atlas import lookup

    on_gpu, on_v5p16 = (
        lookup.cells_in_words("sft", target, ["qwen3-30b-a3b"])[0]
        for target in ("h100-8", "v5p-16")
    )
    assert on_gpu.startswith("qwen3-30b-a3b sft on h100-8: does not run") and "Pallas" in on_gpu
    assert on_v5p16 == (
        "qwen3-30b-a3b: no atlas cell on v5p-16; "
        "python -m shared.plan sft --model qwen3-30b-a3b --target v5p-16 --max-batch"
    )
