"""shared.models.activation_sharding: tunix's activation shardings apply under jax.set_mesh on a
CPU host, so plan mode and device mode compile the constraints tunix's models declare, and a
verdict's largest buffers show the batch split over the chips."""

import importlib
import re

import jax
import numpy as np
import pytest
from conftest import TEST_VOCAB as V

from shared import lora, models, plan
from shared.models import activation_sharding
from shared.plan.compiler import buffers
from shared.plan.workloads import lora_train
from shared.rollout import sampler as rollout

RANK = 4


def constraints(lowered) -> list[str]:
    """The sharding constraints of a lowered program, in program order, as Shardy writes them."""
    return re.findall(r"sdy\.sharding_constraint %\S+ (<@mesh, [^>]*>) : (tensor<[^>]*>)", lowered)


def test_every_tunix_shard_helper_is_replaced():
    assert activation_sharding.installed()
    for name in activation_sharding.SHARD_HELPER_MODULES:
        assert importlib.import_module(name).shard is activation_sharding.constrain, name
    with activation_sharding.as_tunix_ships():
        assert not any(
            fn is activation_sharding.constrain for fn in activation_sharding.shard_sites().values()
        )
    assert activation_sharding.installed()


def test_without_a_mesh_the_helper_leaves_the_array_alone():
    x = np.ones((4, 3), np.float32)
    assert np.array_equal(activation_sharding.constrain(x, ("fsdp", None)), x)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # `with mesh:` is deprecated
def test_a_legacy_mesh_counts_too(mesh42):
    with mesh42:  # what tunix's RL cluster enters for each role
        assert activation_sharding.mesh_in_context() is mesh42
    assert activation_sharding.mesh_in_context() is None


def test_plan_and_device_lower_the_same_constraints(mesh42):
    """The LoRA step as notebook 02 runs it (real arrays, under jax.set_mesh) and as plan mode
    compiles it (abstract arguments, under jax.set_mesh): the same program, constraints and
    all; and tunix's own helpers would have dropped every one of them on this CPU host."""
    base = models.dummy_model("gemma3-tiny", mesh=mesh42, vocab_size=V, seed=1)
    adapted = lora.apply_lora(base, RANK, 2.0 * RANK, mesh=mesh42)
    exe = lora_train.lora_train_executable("gemma3-tiny", 8, 16, RANK, mesh=mesh42, vocab_size=V)
    graph, lora_params, base_params = lora.split_lora(adapted)
    optimizer = exe.args[1]
    opt_state = lora.init_opt_state(optimizer, lora_params, mesh=mesh42)
    tokens = lora.shard_batch(rollout.random_prompts(8, 17, V, seed=5), mesh42)
    with jax.set_mesh(mesh42):
        device = lora.train_step.lower(
            graph, optimizer, lora_params, base_params, opt_state, tokens
        ).as_text()
        planned = exe.fn.lower(*exe.args, **exe.kwargs).as_text()
        with activation_sharding.as_tunix_ships():
            shipped = exe.fn.lower(*exe.args, **exe.kwargs).as_text()
    assert device == planned
    found = constraints(planned)
    # the embedding and every block's output: batch over fsdp, model dimension over tp
    assert ('<@mesh, [{"fsdp"}, {}, {"tp"}]>', "tensor<8x16x128xbf16>") in found
    assert len(found) > 2 * models.model_config("gemma3-tiny", vocab_size=V).num_layers
    assert constraints(shipped) == []


def test_the_rollout_runs_under_its_mesh_as_plan_mode_compiles_it(mesh8, tok):
    model = models.dummy_model("gemma3-tiny", mesh=mesh8, vocab_size=V, is_sampling=True)
    sampler = rollout.make_sampler(model, tok, 40)
    result = rollout.rollout(sampler, rollout.random_prompts(8, 12, V), 20, mesh=mesh8)
    assert result.tokens.shape == (8,)
    state = rollout.init_rollout_state(sampler, rollout.random_prompts(8, 12, V), 20, mesh=mesh8)
    with jax.set_mesh(mesh8):
        prefill = sampler._compiled_prefill_fn.lower(
            sampler._flattened_transformer_state, state, None, echo=False
        ).as_text()
    assert ('<@mesh, [{"fsdp"}, {}, {}]>', "tensor<8x12x128xbf16>") in constraints(prefill)


@pytest.mark.usefixtures("empty_plan_cache")
def test_the_largest_activation_is_split_over_the_batch():
    """gemma3-tiny's LoRA step on a v5e-8 at a global batch of 96: every one of its largest
    buffers holds 96 / 8 = 12 rows per chip, none the whole batch."""
    request = plan.Request(
        "lora-train", "gemma3-tiny", "v5e-8", batch=96, seq=256, lora_rank=RANK, fast=True, layers=1
    )
    point = plan.plan_point(request)
    buffers = point["executables"]["lora_train_step"]["largest_buffers"]
    activations = [b for b in buffers if b["layers"]]
    assert activations, buffers
    for buffer in activations[:3]:
        assert 12 in buffer["shape"] and 96 not in buffer["shape"], buffers.line(buffer)


def _step_bytes(request) -> dict:
    """The verdict's bytes per device and the one step's temporaries, compiled afresh."""
    point = plan.plan_point(request, use_cache=False)
    (step,) = point["executables"].values()
    return {"bytes_per_device": point["bytes_per_device"], "temp_bytes": step["temp_bytes"]}


@pytest.mark.parametrize(("target", "batch"), [("v5e-8", 16), ("v5e-1", 2)])
@pytest.mark.usefixtures("empty_plan_cache")
def test_honouring_the_shardings_shrinks_multi_chip_steps_only(target, batch):
    """The finding behind the fix, kept: with tunix's helpers the v5e-8 step gathers the whole
    batch on every chip; on one chip there is nothing to split and the two compile alike."""
    request = plan.Request(
        "lora-train",
        "gemma3-tiny",
        target,
        batch=batch,
        seq=128,
        lora_rank=RANK,
        fast=True,
        layers=1,
    )
    with models.activation_sharding.as_tunix_ships():
        dropped = _step_bytes(request)
    honoured = _step_bytes(request)
    if target == "v5e-1":
        assert honoured["bytes_per_device"] == dropped["bytes_per_device"], (dropped, honoured)
    else:
        assert honoured["temp_bytes"] < 0.8 * dropped["temp_bytes"], (dropped, honoured)


def test_buffer_lines_name_shape_type_and_layers():
    hlo = "\n".join(
        [
            # a header's comments may hold "=" (/*index=5*/): it is still a header
            "ENTRY %main.1 (p: bf16[8], /*index=1*/q: bf16[8]) -> bf16[8,2048,6912] {",
            "  %fusion.1 = bf16[8,2048,6912]{2,1,0} fusion(%p), kind=kLoop, calls=%fused.1, "
            'metadata={op_name="jit(step)/jvp(layer_3)/feed_forward/dot_general"}',
            "  %fusion.2 = bf16[8,2048,6912]{2,1,0} fusion(%p), kind=kLoop, calls=%fused.1, "
            'metadata={op_name="jit(step)/transpose(jvp(layer_4))/feed_forward/dot_general"}',
            "  %bitcast.1 = bf16[8,2048,6912,2]{3,2,1,0} bitcast(%fusion.1)",
            "  %copy.1 = bf16[8,2048,6912]{2,1,0} copy(%fusion.1)",
            "  %copy.2 = bf16[8,2048,6912]{2,1,0} copy(%fusion.2)",
            "  %copy.3 = bf16[8,2048,6912]{2,1,0} copy(%fusion.2)",
            "}",
            "%fused.1 (a: bf16[8]) -> bf16[64,2048,6912] {",
            "  %big = bf16[64,2048,6912]{2,1,0} broadcast(%a)",
            "}",
            "%body.1 (a: f32[8,16,4096]) -> f32[8,16,4096] {",
            "  %chunk = f32[8,16,4096]{2,1,0} fusion(%a), kind=kLoop, calls=%fused.1, "
            'metadata={op_name="jit(step)/jvp()/while/body/closed_call/bcd,vd->bcv/dot_general"}',
            "}",
        ]
    )
    rows = buffers.largest(hlo)
    assert [buffers.line(r) for r in rows] == [
        "[8, 2048, 6912] bf16 216.0 MiB: feed_forward, layers 3-4 (x5, 2 other sources)",
        "[8, 16, 4096] f32 2.0 MiB: bcd,vd->bcv",
    ]
