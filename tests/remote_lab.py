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
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


NASTY = 'it\'s a "b c"; d & e'  # quotes, a separator and an ampersand, in PARAMS as a user


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


def program(path: Path, body: str) -> None:
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


def world(tmp_path):
    """The lab for one test (conftest's `lab` fixture): yields a Lab, then ends what the test
    started (a leftover job, the private tmux servers)."""
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
    program(bins / "gcloud", GCLOUD.format(fake=str(fake)))
    program(bins / "colab", COLAB.format(fake=str(fake)))
    program(bins / "kaggle", KAGGLE.format(fake=str(fake)))
    program(remote_bin / "make", REMOTE_MAKE.format(make=shutil.which("make"), fake=fake))
    program(remote_bin / "recorder", RECORDER.format(fake=str(fake)))
    program(remote_bin / "sudo", '#!/bin/bash\n[ "$1" = -n ] && shift\nexec "$@"\n')
    program(remote_bin / "lsof", f"#!/bin/bash\ncat {fake}/holders 2>/dev/null\n")

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


def verbs(lab):
    return [
        (call[3], next((a for a in call if a.startswith("--worker=")), None))
        for call in lab.calls("gcloud")
    ]


def alive(pgid: int) -> bool:
    """Whether any process of the group still runs (zombies awaiting their reaper do not)."""
    table = subprocess.run(["ps", "-eo", "pgid=,stat="], capture_output=True, text=True).stdout
    return any(
        int(g) == pgid and not stat.startswith("Z")
        for g, stat in (line.split() for line in table.splitlines())
    )


def injected(notebook: Path) -> dict:
    """The parameters papermill injected into a prepared notebook, as the kernel will see them."""
    cells = json.loads(notebook.read_text())["cells"]
    (cell,) = [c for c in cells if "injected-parameters" in c["metadata"].get("tags", [])]
    namespace: dict = {}
    exec("".join(cell["source"]), namespace)
    return {k: v for k, v in namespace.items() if not k.startswith("__")}


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if not line.startswith("make: ***")]
    assert len(lines) == 1, stderr
    return lines[0]
