"""make tpu-execute and friends against a stand-in gcloud (tests/remote_lab.py): the tree
shipped, the job run detached on every worker, results copied back, every error one line."""

import os
import shlex
import signal
import subprocess
import sys

import pytest
import remote_lab

# writes them for `make execute`: shell words, here single-quoted


def test_tpu_execute_through_make_ships_tree_runs_detached_and_copies_results(lab):
    result = lab.make(
        "tpu-execute",
        "TPU=t1",
        "ZONE=us-west4-a",
        "NB=06",
        f"PARAMS=-p MODE plan -p TARGET v5e-8 -p NOTE {shlex.quote(remote_lab.NASTY)}",
    )
    assert result.returncode == 0, result.stderr
    verbs = [verb for verb, _ in remote_lab.verbs(lab)]
    assert verbs[:4] == ["describe", "scp", "ssh", "ssh"] and verbs[-2:] == ["ssh", "scp"]
    assert all("--zone=us-west4-a" in call for call in lab.calls("gcloud"))
    upload = lab.calls("gcloud")[1]
    assert upload[4].endswith("/tpu-budget-lab.tgz") and upload[5] == "t1:tpu-budget-lab.tgz"
    start = next(a for a in lab.calls("gcloud")[3] if a.startswith("--command="))
    assert "tmux new-session -d -s tpu-budget-lab" in start and "setsid nohup" in start
    assert "started in tmux session" in result.stderr

    # PARAMS survived shell -> make -> python -> gcloud --command -> bash -> make -> recipe.
    (run,) = lab.calls("executions")
    assert run["argv"][run["argv"].index("--") :] == [
        "--",
        "-p",
        "MODE",
        "plan",
        "-p",
        "TARGET",
        "v5e-8",
        "-p",
        "NOTE",
        remote_lab.NASTY,
    ]
    assert run["argv"][:7] == [
        "-m",
        "tools.notebooks",
        "execute",
        "--kernel",
        "tpu-budget-lab",
        "--select",
        "06",
    ]

    shipped = lab.remote()
    assert (shipped / "notes.txt").exists() and (shipped / "tools" / "remote.py").exists()
    assert not (shipped / "data" / "shard-000.bin").exists() and not (shipped / ".venv").exists()
    assert not (shipped / "runs" / "old.ipynb").exists()
    assert (shipped / ".tpu-job" / "status").read_text().strip() == "0"
    assert (lab.root / "runs" / "06_scaling_plan.ipynb").exists()
    assert (lab.root / "results" / "06_scaling_plan" / "worker.txt").read_text() == "w0"
    assert (lab.root / "runs" / "old.ipynb").exists(), "local runs/ are kept"


def test_failed_remote_job_fails_make_and_still_copies_results_back(lab):
    tmux = lab.fake / "remote-bin" / "tmux"
    remote_lab.program(tmux, "#!/bin/bash\nexit 1\n")  # a tmux that fails
    lab.scenario(rc=3)  # the notebook runner fails, so the VM's `make execute` exits 2
    result = lab.make("tpu-execute", "TPU=t1", "ZONE=us-west4-a")
    assert result.returncode != 0 and "job exited with status 2" in result.stderr
    assert "started with setsid nohup" in result.stderr
    assert (lab.root / "runs" / "06_scaling_plan.ipynb").exists()


def test_python_cli_returns_the_remote_status_and_keeps_dollars_literal(lab):
    lab.scenario(rc=5)
    tokens = ["-p", "NOTE", "$HOME `id` \\n * 'single' \"double\""]
    result = lab.cli("tpu-execute", "--tpu", "t1", "--zone", "us-west4-a", "--", *tokens)
    assert result.returncode == 2 == int((lab.remote() / ".tpu-job" / "status").read_text())
    (run,) = lab.calls("executions")
    assert run["argv"][run["argv"].index("--") + 1 :] == tokens


def test_multi_host_slice_runs_on_every_worker_and_collects_from_worker_0(lab):
    lab.scenario(workers=2)
    result = lab.cli("tpu-execute", "--tpu", "t1", "--zone", "us-west4-a")
    assert result.returncode == 0, result.stderr
    assert "2 workers" in result.stderr
    verbs = remote_lab.verbs(lab)
    assert verbs[1:4] == [("scp", "--worker=all"), ("ssh", "--worker=all"), ("ssh", "--worker=all")]
    assert verbs[-1] == ("scp", "--worker=0") and verbs[-2] == ("ssh", "--worker=0")
    assert sorted(run["worker"] for run in lab.calls("executions")) == ["w0", "w1"]
    assert (lab.root / "results" / "06_scaling_plan" / "worker.txt").read_text() == "w0"


def test_busy_tpu_refuses_with_one_line_naming_the_process(lab):
    holder = subprocess.Popen(["sleep", "60"])
    try:
        (lab.fake / "holders").write_text(f"{holder.pid}\n")
        result = lab.cli("tpu-execute", "--tpu", "t1", "--zone", "us-west4-a")
    finally:
        holder.kill()
        holder.wait()
    assert result.returncode == 2
    line = remote_lab.one_line(result.stderr)
    assert f"pid {holder.pid} (sleep 60)" in line and line.startswith("error: t1: the TPU is held")
    assert lab.calls("executions") == [] and "ssh" == lab.calls("gcloud")[-1][3]


def test_stale_lock_file_refuses_and_tpu_stop_removes_it(lab):
    lock = lab.fake / "w0" / "lock"
    lock.write_text("")
    result = lab.make("tpu-execute", "TPU=t1", "ZONE=us-west4-a")
    assert result.returncode != 0
    assert "stale /tmp/libtpu_lockfile" in remote_lab.one_line(result.stderr)
    stop = lab.make("tpu-stop", "TPU=t1", "ZONE=us-west4-a")
    assert stop.returncode == 0 and "removed a stale" in stop.stdout and not lock.exists()
    assert lab.make("tpu-execute", "TPU=t1", "ZONE=us-west4-a").returncode == 0


def test_no_wait_then_stop_then_fetch_reports_the_stopped_job(lab):
    lab.scenario(seconds=60)
    started = lab.make("tpu-execute", "TPU=t1", "ZONE=us-west4-a", "WAIT=0")
    assert started.returncode == 0 and "make tpu-fetch TPU=t1" in started.stderr
    again = lab.cli("tpu-execute", "--tpu", "t1", "--zone", "us-west4-a")
    assert again.returncode == 2 and "still running" in remote_lab.one_line(again.stderr)
    pgid = int((lab.remote() / ".tpu-job" / "pgid").read_text())
    stopped = lab.make("tpu-stop", "TPU=t1", "ZONE=us-west4-a")
    assert stopped.returncode == 0 and "stopped the job" in stopped.stdout
    assert not remote_lab.alive(pgid)
    fetched = lab.cli("tpu-fetch", "--tpu", "t1", "--zone", "us-west4-a")
    assert fetched.returncode == 143 and (lab.root / "runs" / "06_scaling_plan.ipynb").exists()
    logs = lab.make("tpu-logs", "TPU=t1", "ZONE=us-west4-a")
    assert logs.returncode == 0 and "tools.notebooks" in logs.stdout  # make echoed the recipe


def _ctrl_c_as_from_a_terminal() -> None:
    """SIGINT's default action, unblocked, in the child: a child inherits an ignored or blocked
    SIGINT and Python then never raises KeyboardInterrupt. Under the full suite (never alone)
    this test twice saw the command finish the job with 0 instead of 130 on 2026-11-26, as with
    SIGINT ignored; some library in the worker likely leaves it so (not yet pinned down)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def test_ctrl_c_stops_waiting_not_the_job_and_a_vanished_job_is_reported(lab):
    lab.scenario(seconds=60)
    waiting = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tools.remote",
            "tpu-execute",
            "--tpu",
            "t1",
            "--zone",
            "us-west4-a",
        ],
        cwd=lab.root,
        env=lab.env,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ctrl_c_as_from_a_terminal,
    )
    while "job running" not in waiting.stderr.readline():
        assert waiting.poll() is None, "tpu-execute ended before the job ran"
    waiting.send_signal(signal.SIGINT)
    assert waiting.wait(timeout=120) == 130  # generous: CI machines are shared
    assert "make tpu-fetch TPU=t1 ZONE=us-west4-a" in waiting.stderr.read()
    pgid = int((lab.remote() / ".tpu-job" / "pgid").read_text())
    assert remote_lab.alive(pgid), "the job outlives the local command"
    os.killpg(pgid, signal.SIGKILL)  # as a reboot would: no exit status gets written
    fetched = lab.cli("tpu-fetch", "--tpu", "t1", "--zone", "us-west4-a")
    assert fetched.returncode == 2
    assert "error: t1: the job ended without an exit status" in fetched.stderr.splitlines()[-1]


@pytest.mark.parametrize(
    "args, scenario, expected",
    [
        (["--zone", "us-west4-a"], {}, "TPU= is missing"),
        (["--tpu", "t1"], {}, "ZONE= is missing"),
        (
            ["--tpu", "t1", "--zone", "us-nowhere1-z"],
            {},
            "Location us-nowhere1-z is not found or access is unauthorized. -- check TPU=t1 "
            "ZONE=us-nowhere1-z: `gcloud compute tpus tpu-vm list --zone=us-nowhere1-z`",
        ),
        (
            ["--tpu", "t9", "--zone", "us-west4-a"],
            {},
            "nodes/t9' was not found -- check TPU=t9 ZONE=us-west4-a",
        ),
        (["--tpu", "t1", "--zone", "us-west4-a"], {"state": "STOPPED"}, "t1 is STOPPED"),
    ],
    ids=["no-tpu", "no-zone", "unknown-zone", "tpu-not-found", "stopped"],
)
def test_tpu_errors_are_one_actionable_line(lab, args, scenario, expected):
    lab.scenario(**scenario)
    result = lab.cli("tpu-execute", *args)
    assert result.returncode == 2
    assert expected in remote_lab.one_line(result.stderr)
    assert not any(verb in ("scp", "ssh") for verb, _ in remote_lab.verbs(lab))


def test_missing_tpu_name_through_make_and_missing_gcloud(lab, tmp_path):
    result = lab.make("tpu-execute", "ZONE=us-west4-a")
    assert result.returncode == 2 and "TPU= is missing" in remote_lab.one_line(result.stderr)
    (tmp_path / "empty").mkdir()
    result = lab.cli(
        "tpu-logs", "--tpu", "t1", "--zone", "z", env={**lab.env, "PATH": str(tmp_path / "empty")}
    )
    assert result.returncode == 2 and "Google Cloud SDK" in remote_lab.one_line(result.stderr)
