"""Timing, memory summaries and out-of-memory capture."""

import jax
import jax.numpy as jnp
import pytest

from shared.hardware import measure
from shared.plan.compiler import compiled


def test_time_fn_reports_first_call_and_trials():
    fn = jax.jit(lambda x: x @ x)
    result, timing = measure.time_fn(fn, jnp.ones((64, 64)), warmup=1, trials=3)
    assert result.shape == (64, 64)
    assert len(timing.trials_s) == 3 and timing.first_call_s > 0
    assert timing.as_dict()["median_s"] == timing.median_s


def test_compiled_memory_counts_donated_buffers_once():
    x = jax.ShapeDtypeStruct((256, 256), jnp.float32)
    plain = compiled.compiled_memory(jax.jit(lambda a: a * 2).lower(x).compile())
    donated = compiled.compiled_memory(
        jax.jit(lambda a: a * 2, donate_argnums=0).lower(x).compile()
    )
    assert plain["argument_bytes"] == plain["output_bytes"] == 256 * 256 * 4
    assert plain["total_bytes"] == 2 * 256 * 256 * 4 + plain["temp_bytes"]
    assert donated["alias_bytes"] == 256 * 256 * 4
    assert donated["total_bytes"] == plain["total_bytes"] - 256 * 256 * 4


def test_compiled_cost_has_flops():
    x = jax.ShapeDtypeStruct((128, 128), jnp.float32)
    cost = compiled.compiled_cost(jax.jit(lambda a: a @ a).lower(x).compile())
    assert cost["flops"] == pytest.approx(2 * 128**3, rel=0.01)


def test_device_memory_is_none_on_cpu():
    assert measure.device_memory() is None
    assert measure.peak_bytes_per_device() is None


def test_out_of_memory_becomes_a_data_point():
    def oom():
        raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 9.0G\nmore")

    result, error = measure.run_or_oom(oom)
    assert result is None and error.startswith("RESOURCE_EXHAUSTED")
    assert measure.run_or_oom(lambda: 3) == (3, None)
    with pytest.raises(ValueError):
        measure.run_or_oom(lambda: (_ for _ in ()).throw(ValueError("not memory")))


def test_a_child_without_the_gpu_autotuner_keeps_its_other_xla_flags(monkeypatch):
    env = measure.without_autotuning({"XLA_FLAGS": "--xla_force_host_platform_device_count=8"})
    assert env["XLA_FLAGS"].split() == [
        "--xla_force_host_platform_device_count=8",
        measure.NO_AUTOTUNING,
    ]
    assert measure.without_autotuning({})["XLA_FLAGS"] == measure.NO_AUTOTUNING
    assert not measure.peak_includes_compiling()  # a CPU compiles nothing onto a device


def test_a_childs_json_is_read_back_and_its_failure_is_a_row():
    """measure.json_from_child: what a fresh process wrote after --out, or why it wrote none."""
    import sys

    write = "import json, sys; json.dump({'status': 'ok', 'peak': 3}, open(sys.argv[-1], 'w'))"
    assert measure.json_from_child([sys.executable, "-c", write]) == (
        {"status": "ok", "peak": 3},
        None,
    )
    crash = "import sys; print('RESOURCE_EXHAUSTED: Out of memory', file=sys.stderr); sys.exit(3)"
    row, failed = measure.json_from_child([sys.executable, "-c", crash])
    assert row is None and failed["status"] == "oom"
    assert failed["error"].startswith("exit 3: RESOURCE_EXHAUSTED")
    row, failed = measure.json_from_child([sys.executable, "-c", "pass"])  # wrote nothing
    assert row is None and failed == {"status": "error", "error": "exit 0: "}
