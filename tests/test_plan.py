"""Plan mode on real TPU topologies (libtpu from PyPI, no TPU): verdicts, sharding, search, CLI.

A synthetic workload (one elementwise function of a [B, 4096, 131072] bf16 input) makes the byte
counts exact and the compiles fast; the model workloads are exercised on small configs.
"""

import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from shared import plan
from shared.errors import BadInput

GIB = 2**30
ROW = (4096, 131072)  # one batch row: 1 GiB of bf16, in whole TPU tiles (no layout padding)


def _scale(request, mesh):
    x = jax.ShapeDtypeStruct((request.batch, *ROW), jnp.bfloat16,
                             sharding=NamedSharding(mesh, PartitionSpec("fsdp")))
    return [plan.Executable("scale", jax.jit(lambda a: a * 2), (x,))]


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    monkeypatch.setattr(plan, "CACHE_DIR", tmp_path / "plan-cache")
    monkeypatch.setitem(plan.WORKLOADS, "scale", _scale)


def test_bytes_per_device_and_verdict():
    point = plan.plan_point(plan.Request("scale", "none", "v5e-1", batch=3))
    exe = point["executables"]["scale"]
    assert exe["argument_bytes"] == exe["output_bytes"] == 3 * GIB
    assert point["bytes_per_device"] == exe["total_bytes"] == 6 * GIB + exe["temp_bytes"]
    assert point["hbm_bytes"] == 16 * GIB and point["fits"]
    assert point["margin_bytes"] == 16 * GIB - point["bytes_per_device"]
    assert point["roofline_lower_bound_s"] > 0 and not point["cached"]


def test_sharding_divides_bytes_by_the_mesh_factor():
    one = plan.plan_point(plan.Request("scale", "none", "v6e-1", batch=8))
    eight = plan.plan_point(plan.Request("scale", "none", "v6e-8", batch=8))
    assert eight["devices"] == 8 and eight["mesh_shape"] == {"fsdp": 8, "tp": 1}
    assert one["executables"]["scale"]["argument_bytes"] == 8 * GIB
    assert eight["executables"]["scale"]["argument_bytes"] == GIB


def test_verdict_flips_where_bytes_cross_the_hbm_line():
    result = plan.max_batch(plan.Request("scale", "none", "v5e-1"), limit=64, progress=False)
    by_batch = {p["batch"]: p for p in result["probes"]}
    best, first_bad = result["max_batch"], result["first_not_fitting"]
    assert first_bad == best + 1
    assert by_batch[best]["fits"] and by_batch[best]["bytes_per_device"] <= 16 * GIB
    assert not by_batch[first_bad]["fits"]
    assert best == 7  # 2 x 7 GiB in and out fit 15.75 GiB of usable v5e HBM; 2 x 8 do not


def test_results_are_cached_on_disk():
    request = plan.Request("scale", "none", "v6e-1", batch=2)
    first = plan.plan_point(request)
    again = plan.plan_point(request)
    assert again["cached"] and again["bytes_per_device"] == first["bytes_per_device"]
    assert not plan.plan_point(request, use_cache=False)["cached"]


@pytest.mark.parametrize("request_kw, message", [
    ({"target": "v7z-8"}, "unknown target"),
    ({"target": "h100"}, "TPU targets"),
    ({"target": "v5e-8", "batch": 6}, "does not divide"),
    ({"target": "v5e-8", "mesh": "3x3"}, "must be FSDPxTP"),
    ({"target": "v5e-1", "workload": "decode"}, "unknown workload"),
])
def test_bad_input_fails_with_one_line(request_kw, message):
    kw = {"workload": "scale", "model": "none", "target": "v5e-1", "batch": 8, **request_kw}
    with pytest.raises(BadInput, match=message):
        plan.plan_point(plan.Request(**kw))


def test_missing_libtpu_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "libtpu", None)
    with pytest.raises(BadInput, match="needs libtpu"):
        plan.topology_devices(plan.parse_target("v5e-8"))


def test_train_step_of_the_tiny_model_shards_over_v5e_8():
    one = plan.plan_point(plan.Request("train", "tiny", "v5e-1", batch=8, seq=128))
    eight = plan.plan_point(plan.Request("train", "tiny", "v5e-8", batch=8, seq=128))
    args1 = one["executables"]["train_step"]["argument_bytes"]
    args8 = eight["executables"]["train_step"]["argument_bytes"]
    # Parameters and Adam state are FSDP-sharded; TPU tiles pad small shards, so < 8x.
    assert 4 * args8 < args1 and one["fits"] and eight["fits"]
    assert one["executables"]["train_step"]["flops"] > 0


def _cli(*args, cache):
    return subprocess.run([sys.executable, "-m", "shared.plan", *args], capture_output=True,
                          text=True, timeout=600,
                          env={**__import__("os").environ, "TPU_BUDGET_LAB_PLAN_CACHE": cache})


def test_cli_rollout_json_and_table(tmp_path):
    args = ["rollout", "--model", "gemma3-tiny", "--target", "v5e-1", "--prompt-len", "16",
            "--steps", "16"]
    run = _cli(*args, "--batch", "4", "--json", cache=str(tmp_path))
    assert run.returncode == 0, run.stderr
    point = json.loads(run.stdout)
    assert point["fits"] and set(point["executables"]) == {"prefill", "decode"}
    assert point["executables"]["decode"]["repeats"] == 16
    table = _cli(*args, "--batch", "4", cache=str(tmp_path))
    assert "FITS" in table.stdout and "[cached]" in table.stdout and "roofline" in table.stdout


@pytest.mark.parametrize("args, message", [
    (["rollout", "--model", "gemma3-tiny", "--target", "v5e-9"], "no TPU topology"),
    (["rollout", "--model", "gemma3-tiny", "--target", "v5e-8", "--batch", "6"],
     "does not divide"),
    (["rollout", "--model", "gemma3-2b", "--target", "v5e-1"], "unknown Gemma 3 model"),
])
def test_cli_bad_input_exit_2(args, message, tmp_path):
    run = _cli(*args, cache=str(tmp_path))
    assert run.returncode == 2 and message in run.stderr
    assert run.stderr.strip().count("\n") == 0 and "Traceback" not in run.stderr
