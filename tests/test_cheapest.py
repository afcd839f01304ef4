"""shared.plan.cheapest: the cheapest rented slice for a whole job. Slices that cannot hold the
model are excluded by arithmetic, candidates are compiled in the order of a FLOP bound, a
candidate whose bound cannot beat the best is never compiled, and the answer is a compiled
verdict with hours, dollars and the commands that rent it."""

import math
import os
import subprocess
import sys

import pytest

from shared.errors import BadInput
from shared.hardware import rent
from shared.plan import Request, cheapest, cheapest_view

TINY = Request("lora-train", "gemma3-tiny", "v5e-1", seq=128, lora_rank=4)


def test_the_commands_name_slices_as_cloud_tpu_rents_them():
    assert rent.accelerator_type("v5e-8") == "v5litepod-8"
    assert rent.accelerator_type("v5p-16") == "v5p-16" and rent.accelerator_type("v6e-4") == "v6e-4"
    spot = rent.create_command("v6e-8", spot=True)
    assert "--accelerator-type=v6e-8 --version=v2-alpha-tpuv6e --spot" in spot
    assert "--spot" not in rent.create_command("v5e-256", spot=False)
    assert rent.run_command("02").startswith("make tpu-execute") and "NB=02" in rent.run_command(
        "02"
    )


def test_a_job_is_counted_in_its_workloads_unit():
    assert cheapest.job_for("lora-train", 1e6) == cheapest.Job(1e6, "tokens")
    assert cheapest.job_for("rollout", 100).unit == "sequences"
    with pytest.raises(BadInput, match="workload with a job to price"):
        cheapest.job_for("forward", 10)
    with pytest.raises(BadInput, match="tokens"):
        cheapest.job_for("sft", 0)
    point = {"batch": 8, "seq": 1000}
    assert cheapest.runs(point, cheapest.Job(16_001, "tokens")) == 3  # a partly filled last step
    assert cheapest.runs(point, cheapest.Job(17, "sequences")) == 3


def _point(batch, flops, bytes_):
    return {
        "target": "v5e-1",
        "batch": batch,
        "flops_per_device": flops,
        "bytes_accessed_per_device": bytes_,
    }


def test_large_enough_is_the_least_batch_within_the_tolerance_of_the_best_cost():
    """Per run: FLOPs b*f, bytes w + b*a on a v5e (197 TFLOP/s, 819 GB/s). The batch returned
    costs at most 10% over the floor per sequence; one sequence less costs more."""
    peak, bandwidth = 197e12, 819e9
    f, a, w = 2e9, 1e6, 8e9  # memory-bound at every batch: a/bw > f/peak
    small, double = _point(4, 4 * f, w + 4 * a), _point(8, 8 * f, w + 8 * a)
    b = cheapest.large_enough(small, double)

    def per_seq(batch):
        return max(f / peak, (w / batch + a) / bandwidth)

    least = max(f / peak, a / bandwidth)
    assert per_seq(b) <= 1.1 * least * (1 + 1e-9) < per_seq(b - 1)


def _fake_compile(costs):
    """compile_candidate replaced: each slice's dollars from `costs`, compute-bound."""
    compiled = []

    def compile_candidate(request, job, kind, *, use_cache):
        compiled.append(request.target)
        dollars = costs[request.target]
        return {
            "status": "fits",
            "compute_bound": True,
            "compiles": 1,
            "flops_per_unit": 1e9,
            "bytes_per_unit": 1e6,
            "batch": request.batch,
            "remat": "none",
            "mesh_shape": {"fsdp": 1, "tp": 1},
            "hosts": 1,
            "bytes_per_device": 1,
            "hbm_bytes": 2,
            "runs": 1,
            "roofline_hours": dollars / 10,
            "hours": dollars / 4,
            "dollars_at_roofline": dollars,
            "dollars": dollars * 2.5,
            "assumed_efficiency": 0.4,
            "efficiency_source": "test",
            "price_read": "test",
        }

    return compile_candidate, compiled


def test_a_slice_whose_bound_cannot_beat_the_best_is_never_compiled(monkeypatch):
    """v6e (cheapest per FLOP) is compiled first; v5e's bound is below v6e's dollars, so it is
    compiled too; v5p's bound is above the best and is not. A compute-bound v6e-1 settles v6e:
    its larger slices are not compiled."""
    slices = ("v5e-1", "v6e-1", "v6e-4", "v5p-8")
    bounds = {t: cheapest.bound(TINY, cheapest.Job(1e9, "tokens"), t, "on-demand") for t in slices}
    assert bounds["v6e-1"]["bound_dollars"] < bounds["v5e-1"]["bound_dollars"]
    assert bounds["v5e-1"]["bound_dollars"] < bounds["v5p-8"]["bound_dollars"]
    costs = {
        "v6e-1": bounds["v5p-8"]["bound_dollars"] * 0.9,
        "v5e-1": bounds["v5e-1"]["bound_dollars"] * 1.01,
    }
    fake, compiled = _fake_compile(costs)
    monkeypatch.setattr(cheapest, "compile_candidate", fake)
    result = cheapest.cheapest(TINY, 1e9, slices=slices, progress=False)
    assert compiled == ["v6e-1", "v5e-1"]
    rows = {r["target"]: r for r in result["rows"]}
    assert rows["v6e-4"]["status"] == "not needed" and "compute-bound" in rows["v6e-4"]["why"]
    assert rows["v5p-8"]["status"] == "cannot win"
    assert result["choice"]["target"] == "v5e-1"  # the cheaper of the two compiled
    assert [r["target"] for r in result["frontier"]] == ["v5e-1"]  # faster and cheaper
    assert "--accelerator-type=v5litepod-1" in result["commands"]["create"]
    gpus = [r for r in result["rows"] if r.get("gpu")]
    assert {r["target"] for r in gpus} == {
        f"{g}-{n}" for g in ("h100", "h200") for n in (1, 2, 4, 8)
    }
    assert all(r["status"] == "not compiler-checked" for r in gpus)
    text = cheapest_view.describe(result)
    assert "cheapest for lora-train gemma3-tiny" in text and "not compiler-checked" in text


def test_a_deadline_skips_what_cannot_meet_it(monkeypatch):
    fake, compiled = _fake_compile({"v6e-1": 100.0})
    monkeypatch.setattr(cheapest, "compile_candidate", fake)
    result = cheapest.cheapest(TINY, 1e9, slices=("v6e-1",), within_hours=1.0, progress=False)
    (row,) = [r for r in result["rows"] if r["target"] == "v6e-1"]
    assert row["why"] == "misses 1 h" and result["choice"] is None
    assert "no rented slice fits" in cheapest_view.describe(result)


def test_a_slice_too_small_for_the_weights_is_excluded_without_compiling(monkeypatch):
    """gemma3-4b in bf16 with fp32 AdamW moments needs ~40 GB: no v5e-1 holds it."""
    fake, compiled = _fake_compile({})
    monkeypatch.setattr(cheapest, "compile_candidate", fake)
    sft = Request("sft", "gemma3-4b", "v5e-1", seq=128)
    result = cheapest.cheapest(sft, 1e6, slices=("v5e-1",), progress=False)
    (row,) = [r for r in result["rows"] if r["target"] == "v5e-1"]
    assert row["status"] == "excluded" and "arithmetic, no compile" in row["why"]
    assert compiled == [] and result["choice"] is None


def test_a_real_search_answers_with_an_exact_compile(tmp_path, monkeypatch):
    """The whole path on one slice, the compiler's verdicts included."""
    from shared.plan import verdict

    monkeypatch.setattr(verdict, "CACHE_DIR", tmp_path)
    result = cheapest.cheapest(TINY, 1e7, slices=("v6e-1",), progress=False)
    choice = result["choice"]
    assert choice["target"] == "v6e-1" and choice["bytes_per_device"] <= choice["hbm_bytes"]
    assert choice["runs"] == math.ceil(1e7 / (choice["batch"] * 128))
    assert choice["hours"] == pytest.approx(choice["roofline_hours"] / 0.4)
    assert result["compiles"] >= 1


def test_cli_bad_input_for_cheapest_is_one_line(tmp_path):
    base = [sys.executable, "-m", "shared.plan"]
    env = {**os.environ, "TPU_BUDGET_LAB_PLAN_CACHE": str(tmp_path)}
    for args, message in (
        (["lora-train", "--model", "gemma3-tiny", "--cheapest"], "needs the job's size: --tokens"),
        (["forward", "--model", "gemma3-tiny", "--cheapest", "--tokens", "5"], "not forward"),
        (["lora-train", "--model", "gemma3-tiny"], "--target is required"),
    ):
        run = subprocess.run(base + args, capture_output=True, text=True, timeout=300, env=env)
        assert run.returncode == 2 and message in run.stderr, run.stderr
        assert run.stderr.strip().count("\n") == 0


def test_every_rented_slice_has_a_topology_to_compile_for():
    from shared.hardware import parse_target

    for target in rent.ALL_TPU_SLICES:
        assert parse_target(target).topology is not None, target
