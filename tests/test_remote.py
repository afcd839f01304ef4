"""Remote execution (make tpu-execute / colab-execute / kaggle-push) against stand-in programs.

Google cannot be reached from here, so `gcloud`, `colab` and `kaggle` are small programs on
PATH that record their arguments and answer like the real ones. The stand-in gcloud goes one
step further: its `ssh --command` runs the command with bash in a fake home per TPU worker,
with the real `make` and the project's real Makefile (only PY, the notebook runner, is a
recorder), so the remote shell, tmux/nohup, the status file and the quoting of PARAMS through
every layer are exercised for real. Each test works on a copy of the project in tmp_path.
"""

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
NASTY = 'it\'s a "b c"; d & e'  # quotes, a separator and an ampersand, in PARAMS as a user
# writes them for `make execute`: shell words, here single-quoted

GCLOUD = """
import json, os, shutil, subprocess, sys
from pathlib import Path
FAKE = Path({fake!r})
args = sys.argv[1:]
with open(FAKE / "gcloud.jsonl", "a") as log:
    log.write(json.dumps(args) + "\\n")
scenario = json.loads((FAKE / "scenario.json").read_text())
flags = dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)
words = [a for a in args if not a.startswith("--")]
verb, rest = words[3], words[4:]
def fail(message, code=1):
    print(f"ERROR: (gcloud.compute.tpus.tpu-vm.{{verb}}) {{message}}", file=sys.stderr)
    sys.exit(code)
if flags.get("zone") != scenario["zone"]:
    fail(f"INVALID_ARGUMENT: Location {{flags.get('zone')}} is not found or access is "
         "unauthorized.")
name = next(a for a in rest if verb != "scp" or ":" in a).split(":")[0]
if name != scenario["name"]:
    fail(f"NOT_FOUND: Resource 'projects/p/locations/{{flags['zone']}}/nodes/{{name}}' "
         "was not found")
workers = scenario.get("workers", 1)
chosen = range(workers) if flags.get("worker") == "all" else [int(flags.get("worker", "0"))]
def home(w):
    return FAKE / f"w{{w}}" / "home"
if verb == "describe":
    endpoints = [{{"ipAddress": f"10.0.0.{{w}}"}} for w in range(workers)]
    print(json.dumps({{"state": scenario.get("state", "READY"), "networkEndpoints": endpoints}}))
elif verb == "scp":
    source, target = rest
    for w in chosen:
        if ":" in target:
            shutil.copy(source, home(w) / target.split(":", 1)[1])
        else:
            shutil.copy(home(w) / source.split(":", 1)[1], target)
elif verb == "ssh":
    code = 0
    for w in chosen:
        env = {{**os.environ, "HOME": str(home(w)), "TMUX_TMPDIR": scenario["tmux"][w],
               "PATH": str(FAKE / "remote-bin") + ":" + os.environ["PATH"]}}
        env.pop("TMUX", None)
        lock = "lock=" + str(FAKE / f"w{{w}}" / "lock")
        command = flags["command"].replace("lock=/tmp/libtpu_lockfile", lock)
        code = code or subprocess.run(["bash", "-c", command], cwd=home(w), env=env).returncode
    if code:
        fail(f"[/usr/bin/ssh] exited with return code [{{code}}].", code)
"""

# `make execute` on the fake VM: the real Makefile, with PY the recorder below and STAMP a file
# newer than requirements.txt, so `make setup` has nothing to install.
REMOTE_MAKE = '#!/bin/bash\nexec {make} "$@" PY={fake}/remote-bin/recorder STAMP=.tpu-job/job.sh\n'

RECORDER = """
import json, sys, time
from pathlib import Path
FAKE = Path({fake!r})
worker = Path.cwd().parent.parent.name
scenario = json.loads((FAKE / "scenario.json").read_text())
with open(FAKE / "executions.jsonl", "a") as log:
    log.write(json.dumps({{"worker": worker, "argv": sys.argv[1:]}}) + "\\n")
Path("runs").mkdir(exist_ok=True)
Path("runs/06_scaling_plan.ipynb").write_text("{{}}")
Path("results/06_scaling_plan").mkdir(parents=True, exist_ok=True)
Path("results/06_scaling_plan/worker.txt").write_text(worker)
time.sleep(scenario.get("seconds", 0))
sys.exit(scenario.get("rc", 0))
"""

# google-colab-cli 0.6: `colab new -s NAME --tpu|--gpu X`, `colab exec -s NAME -f NB.ipynb`
# (runs every code cell, writes NB_output.ipynb beside it, exits 0 after a cell error) and
# `colab stop -s NAME`.
COLAB = """
import json, sys
from pathlib import Path
FAKE = Path({fake!r})
args = sys.argv[1:]
with open(FAKE / "colab.jsonl", "a") as log:
    log.write(json.dumps(args) + "\\n")
scenario = json.loads((FAKE / "scenario.json").read_text())
if args[0] == "new" and scenario.get("colab_refuses"):
    print("[colab] Backend rejected accelerator 'H100'. You may not have quota", file=sys.stderr)
    sys.exit(1)
if args[0] == "exec":
    notebook = Path(args[args.index("-f") + 1])
    nb = json.loads(notebook.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    for cell in code:
        cell["outputs"] = [{{"output_type": "stream", "name": "stdout", "text": ["ran\\n"]}}]
    if scenario.get("cell_error"):
        code[-1]["outputs"] = [{{"output_type": "error", "ename": "ValueError", "evalue": "boom",
                                 "traceback": []}}]
    notebook.with_name(notebook.stem + "_output.ipynb").write_text(json.dumps(nb))
print(f"[colab] {{args[0]}} done")
"""

KAGGLE = """
import json, shutil, sys
from pathlib import Path
FAKE = Path({fake!r})
args = sys.argv[1:]
with open(FAKE / "kaggle.jsonl", "a") as log:
    log.write(json.dumps(args) + "\\n")
scenario = json.loads((FAKE / "scenario.json").read_text())
if args[:2] == ["kernels", "push"]:
    meta = json.loads((Path(args[args.index("-p") + 1]) / "kernel-metadata.json").read_text())
    print(f"Kernel version 1 successfully pushed.  Please check progress at "
          f"https://www.kaggle.com/code/{{meta['id']}}")
elif args[:2] == ["kernels", "status"]:
    print(f'{{args[2]}} has status "{{scenario.get("kaggle", "KernelWorkerStatus.COMPLETE")}}"')
elif args[:2] == ["kernels", "output"]:
    out = Path(args[args.index("-p") + 1])
    out.mkdir(parents=True, exist_ok=True)
    slug = args[2].split("/")[1]
    (out / f"{{slug}}.log").write_text("[]")
    print(f"Output file downloaded to {{out / slug}}.log")
"""


def _program(path: Path, body: str) -> None:
    path.write_text(body if body.startswith("#!") else f"#!{sys.executable}\n{body}")
    path.chmod(0o755)


@dataclass
class Lab:
    """A copy of the project, stand-ins on PATH, and the fake VM's state in `fake`."""

    root: Path
    fake: Path
    env: dict

    def scenario(self, **changes) -> None:
        path = self.fake / "scenario.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))

    def make(self, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["make", "--no-print-directory", *args],
            cwd=self.root,
            env=env or self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def cli(self, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "tools.remote", *args],
            cwd=self.root,
            env=env or self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def calls(self, tool: str) -> list:
        path = self.fake / f"{tool}.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def remote(self, worker: int = 0) -> Path:
        return self.fake / f"w{worker}" / "home" / "tpu-budget-lab"


@pytest.fixture
def lab(tmp_path):
    root, fake = tmp_path / "project", tmp_path / "fake"
    for name in ("Makefile", ".gitignore", "requirements.txt", "pyproject.toml"):
        root.mkdir(exist_ok=True)
        shutil.copy2(REPO / name, root / name)
        os.utime(root / name, (0, 0))  # older than .venv's stamp: `make setup` is a no-op
    for folder in ("shared", "tools", "notebooks"):
        shutil.copytree(
            REPO / folder,
            root / folder,
            ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"),
        )
    (root / ".venv").symlink_to(REPO / ".venv")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    (root / "notes.txt").write_text("untracked, not ignored: shipped\n")
    for ignored in ("runs/old.ipynb", "results/old/table.csv", "data/shard-000.bin"):
        (root / ignored).parent.mkdir(parents=True, exist_ok=True)
        (root / ignored).write_text("local only\n")

    short = Path(tempfile.mkdtemp(prefix="tbl"))  # tmux sockets need a short path
    bins, remote_bin = tmp_path / "bin", fake / "remote-bin"
    for folder in (bins, remote_bin, *(fake / f"w{w}" / "home" for w in range(2))):
        folder.mkdir(parents=True)
    (fake / "scenario.json").write_text(
        json.dumps(
            {"name": "t1", "zone": "us-west4-a", "tmux": [str(short / "0"), str(short / "1")]}
        )
    )
    _program(bins / "gcloud", GCLOUD.format(fake=str(fake)))
    _program(bins / "colab", COLAB.format(fake=str(fake)))
    _program(bins / "kaggle", KAGGLE.format(fake=str(fake)))
    _program(remote_bin / "make", REMOTE_MAKE.format(make=shutil.which("make"), fake=fake))
    _program(remote_bin / "recorder", RECORDER.format(fake=str(fake)))
    _program(remote_bin / "sudo", '#!/bin/bash\n[ "$1" = -n ] && shift\nexec "$@"\n')
    _program(remote_bin / "lsof", f"#!/bin/bash\ncat {fake}/holders 2>/dev/null\n")

    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("KAGGLE_", "MAKE", "MFLAGS", "TMUX"))
    }
    env.pop("PYTHONPATH", None)  # the Makefile finds tools/ and shared/ itself, as for a user
    env.update(PATH=f"{bins}:{env['PATH']}", HOME=str(tmp_path / "home"), POLL_SECONDS="0")
    yield Lab(root, fake, env)

    for w in range(2):  # end what these tests started: a leftover job, our private tmux server
        job = fake / f"w{w}" / "home" / "tpu-budget-lab" / ".tpu-job"
        if (job / "pgid").exists() and not (job / "status").exists():
            try:
                os.killpg(int((job / "pgid").read_text()), signal.SIGTERM)
            except (ProcessLookupError, ValueError):
                pass
        subprocess.run(
            ["tmux", "kill-server"],
            env={**env, "TMUX_TMPDIR": str(short / str(w))},
            capture_output=True,
        )
    shutil.rmtree(short, ignore_errors=True)


def _verbs(lab):
    return [
        (call[3], next((a for a in call if a.startswith("--worker=")), None))
        for call in lab.calls("gcloud")
    ]


def _alive(pgid: int) -> bool:
    """Whether any process of the group still runs (zombies awaiting their reaper do not)."""
    table = subprocess.run(["ps", "-eo", "pgid=,stat="], capture_output=True, text=True).stdout
    return any(
        int(g) == pgid and not stat.startswith("Z")
        for g, stat in (line.split() for line in table.splitlines())
    )


def _injected(notebook: Path) -> dict:
    """The parameters papermill injected into a prepared notebook, as the kernel will see them."""
    cells = json.loads(notebook.read_text())["cells"]
    (cell,) = [c for c in cells if "injected-parameters" in c["metadata"].get("tags", [])]
    namespace: dict = {}
    exec("".join(cell["source"]), namespace)
    return {k: v for k, v in namespace.items() if not k.startswith("__")}


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if not line.startswith("make: ***")]
    assert len(lines) == 1, stderr
    return lines[0]


def test_tpu_execute_through_make_ships_tree_runs_detached_and_copies_results(lab):
    result = lab.make(
        "tpu-execute",
        "TPU=t1",
        "ZONE=us-west4-a",
        "NB=06",
        f"PARAMS=-p MODE plan -p TARGET v5e-8 -p NOTE {shlex.quote(NASTY)}",
    )
    assert result.returncode == 0, result.stderr
    verbs = [verb for verb, _ in _verbs(lab)]
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
        NASTY,
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
    _program(lab.fake / "remote-bin" / "tmux", "#!/bin/bash\nexit 1\n")  # a tmux that fails
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
    verbs = _verbs(lab)
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
    line = _one_line(result.stderr)
    assert f"pid {holder.pid} (sleep 60)" in line and line.startswith("error: t1: the TPU is held")
    assert lab.calls("executions") == [] and "ssh" == lab.calls("gcloud")[-1][3]


def test_stale_lock_file_refuses_and_tpu_stop_removes_it(lab):
    lock = lab.fake / "w0" / "lock"
    lock.write_text("")
    result = lab.make("tpu-execute", "TPU=t1", "ZONE=us-west4-a")
    assert result.returncode != 0
    assert "stale /tmp/libtpu_lockfile" in _one_line(result.stderr)
    stop = lab.make("tpu-stop", "TPU=t1", "ZONE=us-west4-a")
    assert stop.returncode == 0 and "removed a stale" in stop.stdout and not lock.exists()
    assert lab.make("tpu-execute", "TPU=t1", "ZONE=us-west4-a").returncode == 0


def test_no_wait_then_stop_then_fetch_reports_the_stopped_job(lab):
    lab.scenario(seconds=60)
    started = lab.make("tpu-execute", "TPU=t1", "ZONE=us-west4-a", "WAIT=0")
    assert started.returncode == 0 and "make tpu-fetch TPU=t1" in started.stderr
    again = lab.cli("tpu-execute", "--tpu", "t1", "--zone", "us-west4-a")
    assert again.returncode == 2 and "still running" in _one_line(again.stderr)
    pgid = int((lab.remote() / ".tpu-job" / "pgid").read_text())
    stopped = lab.make("tpu-stop", "TPU=t1", "ZONE=us-west4-a")
    assert stopped.returncode == 0 and "stopped the job" in stopped.stdout
    assert not _alive(pgid)
    fetched = lab.cli("tpu-fetch", "--tpu", "t1", "--zone", "us-west4-a")
    assert fetched.returncode == 143 and (lab.root / "runs" / "06_scaling_plan.ipynb").exists()
    logs = lab.make("tpu-logs", "TPU=t1", "ZONE=us-west4-a")
    assert logs.returncode == 0 and "tools.notebooks" in logs.stdout  # make echoed the recipe


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
    )
    while "job running" not in waiting.stderr.readline():
        assert waiting.poll() is None, "tpu-execute ended before the job ran"
    waiting.send_signal(signal.SIGINT)
    assert waiting.wait(timeout=120) == 130  # generous: CI machines are shared
    assert "make tpu-fetch TPU=t1 ZONE=us-west4-a" in waiting.stderr.read()
    pgid = int((lab.remote() / ".tpu-job" / "pgid").read_text())
    assert _alive(pgid), "the job outlives the local command"
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
    assert expected in _one_line(result.stderr)
    assert not any(verb in ("scp", "ssh") for verb, _ in _verbs(lab))


def test_missing_tpu_name_through_make_and_missing_gcloud(lab, tmp_path):
    result = lab.make("tpu-execute", "ZONE=us-west4-a")
    assert result.returncode == 2 and "TPU= is missing" in _one_line(result.stderr)
    (tmp_path / "empty").mkdir()
    result = lab.cli(
        "tpu-logs", "--tpu", "t1", "--zone", "z", env={**lab.env, "PATH": str(tmp_path / "empty")}
    )
    assert result.returncode == 2 and "Google Cloud SDK" in _one_line(result.stderr)


def _colab_session(lab, accelerator: list[str]) -> str:
    """The session name, after checking the calls were new, exec and stop of that session."""
    new, run, stop = lab.calls("colab")
    session = new[2]
    assert new == ["new", "-s", session, *accelerator] and stop == ["stop", "-s", session]
    assert run[:3] == ["exec", "-s", session] and run[run.index("--timeout") + 1] == "86400"
    return session


def test_colab_execute_runs_the_prepared_notebook_and_keeps_the_executed_copy(lab):
    params = f"PARAMS=-p MODE device -p NOTE {shlex.quote(NASTY)}"
    result = lab.make("colab-execute", "NB=06", params)
    assert result.returncode == 0, result.stderr
    staged = lab.root / "runs" / "colab" / "06_scaling_plan.ipynb"
    assert _colab_session(lab, ["--tpu", "v6e1"]).startswith("tpu-budget-lab-06-")
    assert lab.calls("colab")[1][3:5] == ["-f", str(staged)]
    notebook = json.loads(staged.read_text())
    assert notebook["metadata"]["kernelspec"]["name"] == "python3"
    assert _injected(staged) == {"MODE": "device", "NOTE": NASTY}
    assert (staged.with_name("06_scaling_plan_output.ipynb")).exists()


@pytest.mark.parametrize(
    "make_args, accelerator",
    [
        (["TPU=v5e1"], ["--tpu", "v5e1"]),
        (["GPU=T4"], ["--gpu", "T4"]),
        (["GPU=h100"], ["--gpu", "H100"]),
        (["GPU=G4"], ["--gpu", "G4"]),
    ],
    ids=["tpu-v5e1", "gpu-t4", "gpu-lowercase", "gpu-g4"],
)
def test_colab_runtime_is_the_tpu_or_gpu_asked_for(lab, make_args, accelerator):
    result = lab.make("colab-execute", "NB=06", *make_args)
    assert result.returncode == 0, result.stderr
    _colab_session(lab, accelerator)


def test_colab_errors(lab, tmp_path):
    lab.scenario(cell_error=True)
    failed = lab.make("colab-execute", "NB=06", "TPU=v5e1")
    assert failed.returncode != 0 and "ValueError: boom" in failed.stderr
    _colab_session(lab, ["--tpu", "v5e1"])  # the runtime is released after a failed cell too
    lab.scenario(cell_error=False, colab_refuses=True)
    refused = lab.make("colab-execute", "NB=06", "GPU=H100")
    assert refused.returncode != 0 and "Backend rejected" in refused.stderr
    assert [call[0] for call in lab.calls("colab")[3:]] == ["new"]  # no exec, nothing to stop
    for args, expected in (
        (["--tpu", "v4"], "valid: v5e1, v6e1"),
        (["--gpu", "V100"], "valid: T4, L4, G4, H100, A100"),
        (["--gpu", "T4", "--tpu", "v6e1"], "GPU=T4 and TPU=v6e1"),
    ):
        wrong = lab.cli("colab-execute", "--nb", "06", *args)
        assert wrong.returncode == 2 and expected in _one_line(wrong.stderr)
    both = lab.make("colab-execute", "NB=06", "GPU=T4", "TPU=v6e1")
    assert both.returncode == 2 and "give only one of them" in _one_line(both.stderr)
    assert len(lab.calls("colab")) == 4


def test_missing_colab_says_how_to_install_it_in_one_line(lab, tmp_path):
    (tmp_path / "empty").mkdir()
    env = {**lab.env, "PATH": str(tmp_path / "empty")}
    missing = lab.cli("colab-execute", "--nb", "06", env=env)
    assert missing.returncode == 2
    assert "uv tool install --python 3.12 google-colab-cli" in _one_line(missing.stderr)
    local_bin = Path(lab.env["HOME"]) / ".local" / "bin"
    local_bin.mkdir(parents=True)
    shutil.copy2(shutil.which("colab", path=lab.env["PATH"]), local_bin / "colab")
    off_path = lab.cli("colab-execute", "--nb", "06", env=env)
    assert off_path.returncode == 2 and "not on PATH" in _one_line(off_path.stderr)
    assert lab.calls("colab") == []


def test_kaggle_push_writes_tpu_kernel_metadata_and_pushes(lab):
    result = lab.make(
        "kaggle-push",
        "NB=06",
        "KAGGLE_USER=alice",
        "PARAMS=-p MODE device",
        env={**lab.env, "KAGGLE_API_TOKEN": "stand-in"},
    )
    assert result.returncode == 0, result.stderr
    folder = lab.root / "runs" / "kaggle" / "tpu-budget-lab-06-scaling-plan" / "push"
    assert lab.calls("kaggle") == [
        ["kernels", "push", "-p", str(folder), "--accelerator", "TpuV5E8"]
    ]
    meta = json.loads((folder / "kernel-metadata.json").read_text())
    assert meta["id"] == "alice/tpu-budget-lab-06-scaling-plan"
    assert meta["title"] == "tpu-budget-lab-06-scaling-plan"
    assert (meta["code_file"], meta["kernel_type"], meta["language"]) == (
        "06_scaling_plan.ipynb",
        "notebook",
        "python",
    )
    assert meta["enable_tpu"] and meta["machine_shape"] == "TpuV5E8" and not meta["enable_gpu"]
    assert meta["is_private"] and meta["enable_internet"]
    assert _injected(folder / "06_scaling_plan.ipynb") == {"MODE": "device"}


@pytest.mark.parametrize(
    "status, code",
    [
        ("KernelWorkerStatus.COMPLETE", 0),
        ("KernelWorkerStatus.ERROR", 1),
        ("KernelWorkerStatus.RUNNING", 2),
    ],
)
def test_kaggle_pull_fetches_output_and_reports_the_run(lab, status, code):
    lab.scenario(kaggle=status)
    (Path(lab.env["HOME"]) / ".kaggle").mkdir(parents=True)
    (Path(lab.env["HOME"]) / ".kaggle" / "kaggle.json").write_text(
        json.dumps({"username": "bob", "key": "stand-in"})
    )
    result = lab.cli("kaggle-pull", "--nb", "06")
    assert result.returncode == code, result.stderr
    out = lab.root / "runs" / "kaggle" / "tpu-budget-lab-06-scaling-plan" / "output"
    if code == 2:
        assert "not finished" in _one_line(result.stderr) and not out.exists()
    else:
        assert lab.calls("kaggle")[-1] == [
            "kernels",
            "output",
            "bob/tpu-budget-lab-06-scaling-plan",
            "-p",
            str(out),
            "-o",
        ]
        assert (out / "tpu-budget-lab-06-scaling-plan.log").exists()


def test_kaggle_without_credentials_or_user_is_one_line(lab):
    result = lab.cli("kaggle-push", "--nb", "06")
    assert result.returncode == 2 and "~/.kaggle/access_token" in _one_line(result.stderr)
    result = lab.cli("kaggle-pull", "--nb", "06", env={**lab.env, "KAGGLE_API_TOKEN": "x"})
    assert result.returncode == 2 and "KAGGLE_USER=" in _one_line(result.stderr)
    assert lab.calls("kaggle") == []
