"""GPU machines planned without a GPU: jax's CUDA plugin compiles for a topology described by a
GpuTargetConfigProto (shared.hardware.gpus), with the bytes a jax process may use there, and a
verdict reproduces what a committed device run measured."""

import json

import jax
import pytest
from conftest import cli_exit

from shared.errors import BadInput
from shared.hardware import gpus, parse_target
from shared.paths import ROOT
from shared.plan import Request, plan_point
from shared.plan.__main__ import main as plan_cli

RESULTS = ROOT / "benchmarks" / "results"


def _device_run(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


@pytest.mark.parametrize(
    ("chip", "record"), [("h100", "finetune_h100.json"), ("h200", "finetune_h200.json")]
)
def test_usable_bytes_are_what_the_device_runs_were_allowed(chip, record):
    """Both runs took XLA_PYTHON_CLIENT_MEM_FRACTION=0.95 (their notes say so) and reported
    the allocator's limit beside every point."""
    run = _device_run(record)
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION=0.95" in run["note"]
    allowed = {row["hbm_bytes"] for r in run["runs"] for row in r["rows"]}
    assert allowed == {gpus.usable_bytes(chip, 0.95)}


def test_xla_aims_its_rematerialization_at_the_usable_bytes():
    """XLA's default limit is 80% of the config's device_memory_size, integer arithmetic: the
    config carries the least size whose 80% is the usable bytes exactly."""
    for chip in gpus.SPECS:
        for fraction in (0.75, 0.9, 0.95, 1.0):
            usable = gpus.usable_bytes(chip, fraction)
            text = gpus.target_config(chip, usable, 1e12)
            size = int(text.split("device_memory_size: ")[1].split()[0])
            assert size * gpus.SCHEDULER_PERCENT // 100 == usable, (chip, fraction)


def test_the_memory_fraction_is_jaxs_default_or_the_environments(monkeypatch):
    monkeypatch.delenv(gpus.FRACTION_VARIABLE, raising=False)
    assert gpus.memory_fraction() == 0.75
    monkeypatch.setenv(gpus.FRACTION_VARIABLE, "0.95")
    assert gpus.memory_fraction() == 0.95
    for bad in ("1.5", "zero", "0"):
        monkeypatch.setenv(gpus.FRACTION_VARIABLE, bad)
        with pytest.raises(BadInput, match="a fraction in"):
            gpus.memory_fraction()


def test_gpu_counts_a_machine_cannot_have_are_refused():
    for name, message in (
        ("h100-3", "h100-1, h100-2, h100-4, h100-8"),
        ("t4-8", "t4-1, t4-2, t4-4"),
        ("a100-80g-16", "a100-80g-8"),
    ):
        with pytest.raises(BadInput, match=message):
            parse_target(name)
    assert parse_target("a100-8").chip.name == "a100-40g"  # GCP's and Colab's A100
    assert parse_target("A100-80G-8").chips == 8


def test_a_tiny_model_on_kaggles_t4_pair_is_a_compiled_verdict(empty_plan_cache):
    """Two compile-only T4s: the whole fine-tune step compiled by XLA's GPU compiler (its
    collectives included), against 0.75 of each T4 (jax's default), with the T4's missing bf16
    units said and the roofline taken from the matmul bound (no cost analysis deviceless)."""
    point = plan_point(Request("sft", "gemma3-tiny", "t4-2", batch=4, seq=128))
    assert point["compiled"] and point["fits"] and point["devices"] == 2
    assert point["mesh_shape"] == {"fsdp": 2, "tp": 1}
    assert point["hbm_bytes"] == gpus.usable_bytes("t4", 0.75)
    assert point["versions"]["jax-cuda12-plugin"] == jax.__version__
    assert point["compiler_flops_per_device"] == 0 and point["flops_per_device"] > 0
    assert point["roofline_lower_bound_s"] > 0
    assert any("no bf16 tensor cores" in note for note in point["notes"])
    assert any("roofline of a GPU" in note for note in point["notes"])


def test_a_deviceless_compile_reproduces_the_h100_run(empty_plan_cache, monkeypatch):
    """gemma3-1b's full fine-tune at 8 x 2048 on an H100, compiled here without one at the
    run's memory fraction: the bytes per device are the run's measured peak (its autotuner off,
    as a deviceless compile never runs it) within 0.01% (9 KB apart when this was written).
    With XLA's usual optimizations, as the device compiled it (conftest turns them off)."""
    monkeypatch.setenv(gpus.FRACTION_VARIABLE, "0.95")
    run = _device_run("finetune_h100.json")
    (measured,) = [
        row["run_peak_bytes_per_device"]
        for r in run["runs"]
        for row in r["rows"]
        if (row["workload"], row["batch"]) == ("sft", 8)
    ]
    previous = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", False)
    try:
        point = plan_point(Request("sft", "gemma3-1b", "h100-1", batch=8, seq=2048))
    finally:
        jax.config.update("jax_disable_most_optimizations", previous)
    assert point["fits"]
    assert point["bytes_per_device"] == pytest.approx(measured, rel=1e-4)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["sft", "--model", "gemma3-tiny", "--target", "h100-3"], "h100 machines hold"),
        (["sft", "--model", "gemma3-tiny", "--target", "rtx4090-1"], "unknown target"),
        (["sft", "--model", "gemma3-tiny", "--target", "t4-2", "--mesh", "4x1"], "all 2 devices"),
    ],
)
def test_cli_bad_gpu_input_is_one_line(args, message, empty_plan_cache, capsys):
    code, stderr = cli_exit(plan_cli, args, capsys)
    assert code == 2 and message in stderr, stderr
    assert stderr.strip().count("\n") == 0


def test_a_target_config_the_plugin_cannot_parse_is_one_line(monkeypatch):
    from shared.plan.compiler import target

    monkeypatch.setattr(gpus, "target_config", lambda *args: "not a proto {")
    target._gpu_topology.cache_clear()
    try:
        with pytest.raises(BadInput, match="could not make a 1-GPU l4 topology"):
            target.target_devices(parse_target("l4-1"))
    finally:
        target._gpu_topology.cache_clear()


def test_the_device_page_shows_the_committed_agreement_table():
    """docs/device_results.md's table of device runs against deviceless compiles (moved there
    from the README) is the one benchmarks/results/gpu_agreement.json holds, row for row: a
    recomputed file cannot leave a stale table behind. Every point compiled is within 1.5% of
    its measured peak, and the H100's full fine-tunes (far from any remat edge) within 0.01%."""
    record = _device_run("gpu_agreement.json")
    page = (ROOT / "docs" / "device_results.md").read_text()
    assert record["table"] in page
    compiled = [row for row in record["rows"] if "not_compiled" not in row]
    assert record["complete"] and compiled and record["memory_fraction"] == 0.95
    for row in compiled:
        assert abs(row["deviceless_vs_measured_pct"]) < 1.5, row["source"]
    h100 = [row for row in compiled if row["source"] == "finetune_h100.json"]
    assert len(h100) == 3
    assert all(abs(row["deviceless_vs_measured_pct"]) < 0.01 for row in h100)


def test_the_device_page_quotes_the_seed_comparison_from_its_file():
    """docs/device_results.md's sentence on seed 001's question is the committed search's
    answer: the batch, the GPU bytes and the remat, hours and dollars, the v5p-8's bound."""
    found = _device_run("seed001_v5p8_vs_2xh100.json")
    page = " ".join((ROOT / "docs" / "device_results.md").read_text().split())
    choice = found["choice"]
    assert choice["target"] == "h100-2" and choice["remat"] == "block"
    assert f"fit **batch {choice['batch']} with block remat**" in page
    gpu = f"({choice['bytes_per_device'] / 1e9:.2f} of {choice['hbm_bytes'] / 1e9:.2f} GB a GPU"
    assert gpu in page
    assert f"at least {choice['roofline_hours']:.2f} h" in page
    assert f"about **{choice['hours']:.1f} h and ${choice['dollars']:.2f}**" in page
    (v5p,) = [row for row in found["rows"] if row["target"] == "v5p-8"]
    assert v5p["status"] == "cannot win" and f"${v5p['bound_dollars']:.2f}" in page
