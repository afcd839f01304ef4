"""What every notebook does with its answers: modes, defaults by mode, tables on disk."""

import json
import math
import os
import subprocess
import sys
import time

import pytest

from shared import report
from shared.errors import BadInput


def test_use_mode_sets_plan_defaults_without_overriding_the_user(monkeypatch):
    for var in ("JAX_PLATFORMS", "ALLOW_MULTIPLE_LIBTPU_LOAD"):
        monkeypatch.delenv(var, raising=False)
    assert report.use_mode("device") == "device"
    assert "JAX_PLATFORMS" not in os.environ
    assert "ALLOW_MULTIPLE_LIBTPU_LOAD" not in os.environ
    monkeypatch.setenv("JAX_PLATFORMS", "cpu,tpu")
    report.use_mode("plan")
    assert os.environ["JAX_PLATFORMS"] == "cpu,tpu"
    assert os.environ["ALLOW_MULTIPLE_LIBTPU_LOAD"] == "1"
    with pytest.raises(BadInput, match="local, plan, device"):
        report.use_mode("planning")


def test_by_mode_picks_the_local_or_the_real_value():
    assert report.by_mode("local", None, 16, 256) == 16
    assert report.by_mode("plan", None, 16, 256) == 256
    assert report.by_mode("device", None, [1], [1, 64]) == [1, 64]
    assert report.by_mode("device", 8, 16, 256) == 8  # a value the user gave wins


def test_byte_table_saves_raw_numbers_and_shows_units(tmp_path):
    rows = [
        {"batch": 1, "peak_bytes": 3 * 2**30, "note": "ok"},
        {"batch": 2, "peak_bytes": None, "note": "out of memory"},
    ]
    frame = report.byte_table(rows, tmp_path, "points", ["batch", "peak_bytes", "missing"])
    assert list(frame.columns) == ["batch", "peak_bytes"]
    assert list(frame["peak_bytes"]) == ["3.00 GiB", "n/a"]
    assert json.loads((tmp_path / "points.json").read_text())[0]["peak_bytes"] == 3 * 2**30
    assert (tmp_path / "points.csv").read_text().splitlines()[0] == "batch,peak_bytes,note"
    assert report.bytes_text(math.nan) == "n/a" and report.bytes_text(512) == "512 B"


def test_a_committed_verdict_is_found_by_every_field_of_its_request():
    from shared import plan

    request = plan.Request("train", "130m", "v6e-1", batch=32, seq=2048)
    point = report.committed_verdict("04_pretrain_plan", request)
    assert point is not None and point["fits"] in (True, False)
    assert all(point[k] == getattr(request, k) for k in report.VERDICT_KEY)
    other = plan.Request("train", "130m", "v6e-1", batch=32, seq=2048, microbatches=3)
    assert report.committed_verdict("04_pretrain_plan", other) is None
    assert report.committed_verdict("no_such_results_file", request) is None


def test_agree_says_what_a_difference_means(capsys):
    assert report.agree("loss", 6.1473, 6.1478, rel=1e-3)
    assert "loss: 6.1473 agrees with the committed 6.1478" in capsys.readouterr().out
    assert not report.agree("bytes", 2, 1)
    assert (
        "DIFFERS from the committed 1: the answer above no longer holds" in capsys.readouterr().out
    )
    assert not report.agree("a ratio", 1.42, 0.62, rel=0.5, why="a timing: it moves with the host")
    assert capsys.readouterr().out.endswith(
        "DIFFERS from the committed 0.62: a timing: it moves with the host\n"
    )
    assert report.agree("new", 3, None)
    assert "no committed number" in capsys.readouterr().out


def test_evidence_states_how_each_quoted_file_was_made_and_this_runs_versions(capsys):
    from shared.report.evidence import facts

    assert report.evidence("activation_sharding", "no_such_result") is None
    out = capsys.readouterr().out
    assert "benchmarks/results/activation_sharding.json" in out and "command:" in out
    assert facts("activation_sharding")["versions"]["jax"]
    assert "missing" in facts("no_such_result") and "missing:" in out
    assert out.rstrip().splitlines()[-1].startswith("this run: jax ")


def test_a_setting_is_the_modes_preset_with_the_parameters_the_user_set():
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Demo:
        model: str
        batch: int

        @classmethod
        def local(cls):
            return cls("tiny", 2)

        @classmethod
        def field(cls):
            return cls("gemma3-1b", 64)

    assert report.setting("local", Demo, MODEL=None, BATCH=None) == Demo("tiny", 2)
    assert report.setting("plan", Demo, BATCH=8) == Demo("gemma3-1b", 8)
    with pytest.raises(TypeError, match="STEPS"):
        report.setting("device", Demo, STEPS=3)


def test_every_results_file_starts_with_how_it_was_made_and_is_written_whole(tmp_path, monkeypatch):
    from shared.report import results

    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "--xla_tpu_offload_gather_to_sparsecore=false")
    head = results.header("benchmarks/bench_demo.py", ["--out", "x.json"])
    assert head["command"] == "python benchmarks/bench_demo.py --out x.json"
    # the flags it compiled under, where set: they change the program
    assert head["libtpu_init_args"] == "--xla_tpu_offload_gather_to_sparsecore=false"
    assert "xla_flags" not in head
    assert head["versions"]["jax"] and head["host_cpus"] >= 1 and head["date"]
    path = results.write(tmp_path / "out" / "demo.json", {**head, "points": [1]})
    written = json.loads(path.read_text())
    assert written["points"] == [1] and len(written["load_average"]) == 3
    assert [p.name for p in path.parent.iterdir()] == ["demo.json"]  # no temporary left


def test_busy_cores_sees_a_process_the_load_average_has_not_caught_up_with():
    """A benchmark calls itself quiet only where no other process keeps a core busy: a
    spinning process started a moment ago shows at once, whatever the load average says."""
    from shared.report import results

    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        assert results.busy_cores(1.0) >= 0.7
    finally:
        spinner.kill()
        spinner.wait()


def test_a_run_is_quiet_only_under_both_the_load_and_the_busy_cores(monkeypatch):
    from shared.report import results

    monkeypatch.setattr(results, "reference_seconds", lambda: 0.5)
    for load, busy, quiet in ((0.4, 0.1, True), (2.1, 0.1, False), (0.4, 0.9, False)):
        monkeypatch.setattr(results.os, "getloadavg", lambda load=load: (load, load, load))
        monkeypatch.setattr(results, "busy_cores", lambda busy=busy: busy)
        start = results.start_conditions()
        assert start["quiet"] is quiet and start["reference_s"] == 0.5


def test_the_suite_benchmark_reads_pytests_counts_and_slowest_tests():
    """shared.report.pytest_output, which benchmarks/bench_suite.py reads `make test` with."""
    from shared.report import pytest_output

    output = """\
============================= slowest 3 durations ==============================
30.84s call     tests/test_notebooks.py::test_notebook_runs_headless[08_which_slice-local]
29.57s setup    tests/test_grpo.py::test_run_reports_tunix_metrics_per_step
0.01s teardown tests/test_report.py::test_x
671 passed, 2 failed, 1 warning in 542.67s (0:09:02)
"""
    assert pytest_output.summary(output) == {
        "counts": {"passed": 671, "failed": 2, "warning": 1},
        "pytest_s": 542.67,
    }
    slow = pytest_output.slowest(output)
    assert [(row["phase"], row["seconds"]) for row in slow] == [
        ("call", 30.84),
        ("setup", 29.57),
        ("teardown", 0.01),
    ]
    assert slow[1]["test"] == "tests/test_grpo.py::test_run_reports_tunix_metrics_per_step"
    assert pytest_output.summary("Segmentation fault\n") == {}


def test_the_cpu_timeline_names_each_child_by_what_it_compiles_and_sums_the_cores():
    """A search's timeline must tell a probe's child from the parent and count its cores: a
    child spinning under a probe's command line shows as that probe, busy, and the summary
    counts its core-seconds as probes' and the rest of the machine's cores as idle."""
    from shared.report.cpu_timeline import CpuTimeline

    spin = "import time\nend = time.time() + 3\nwhile time.time() < end: pass"
    probe = json.dumps({"batch": 6, "mesh": "2x2"})
    with CpuTimeline(period_s=0.25, note=lambda: "locating") as timeline:
        child = subprocess.Popen(
            [sys.executable, "-c", spin, "-m", "shared.plan.compiler.assigned", probe, "/tmp", ""]
        )
        child.wait()
    timeline_report = timeline.report()
    cores = [s["by"].get("probe 6 on 2x2", 0.0) for s in timeline_report["samples"]]
    # a busy machine (CI's two cores under pytest-xdist) gives the child less than a core; 3 s
    # of spinning gives it 12 samples to show it in (1.5 s gave 0.07 at most beside two test runs)
    assert max(cores) >= 0.25
    assert timeline_report["core_s_by"]["probes"] >= 0.15
    assert {s["note"] for s in timeline_report["samples"]} == {"locating"}
    idle = os.cpu_count() * len(timeline_report["samples"]) * 0.25 - timeline_report["busy_core_s"]
    assert math.isclose(timeline_report["idle_core_s"], idle, abs_tol=0.2)
    assert sum(timeline_report["samples_at_busy_cores"].values()) == len(timeline_report["samples"])
