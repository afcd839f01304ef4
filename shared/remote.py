"""Headless execution beyond this machine: a GCP TPU VM, a Colab runtime, a Kaggle kernel.

Glue over three vendors' command lines -- `gcloud` (Google Cloud SDK), `colab`
(google-colab-cli) and `kaggle` -- so that the same notebooks and the same PARAMS as
`make execute` run somewhere with a TPU. Nothing here talks to Google itself, which is why the
tests can drive all of it with stand-in programs on PATH.

TPU VM: the working tree as git sees it (tracked plus untracked-but-not-ignored files, so never
.venv/, runs/, results/ or data shards) goes over `gcloud compute tpus tpu-vm scp`. Over `ssh`
the VM refuses when a job still runs or a process holds the TPU, unpacks, and starts
`make setup && make execute` in tmux (else setsid nohup) with a log and an exit-status file,
so a dropped connection neither kills the job nor loses how it ended. We poll that file, copy
runs/ and results/ back (from worker 0 of a multi-host slice) and exit with the job's status.

    python -m shared.remote tpu-execute --tpu NAME --zone ZONE [--project P] [--worker all]
                                       [--nb 06] [--no-wait] -- -p MODE device
    python -m shared.remote tpu-fetch|tpu-logs|tpu-stop --tpu NAME --zone ZONE
    python -m shared.remote colab-execute --nb 06 [--tpu v6e1] -- -p MODE device
    python -m shared.remote kaggle-push --nb 06 [--user NAME] -- -p MODE device
    python -m shared.remote kaggle-pull --nb 06 [--user NAME]
"""

import argparse
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from shared.errors import BadInput, choose, run_cli
from shared.notebooks import notebook_sources, parse_parameters

REPO = Path(__file__).resolve().parent.parent
REMOTE_DIR = "tpu-budget-lab"  # the copy on the VM, under the user's home
BUNDLE = "tpu-budget-lab.tgz"  # the working tree on its way to the VM
RESULTS = "tpu-budget-lab-results.tgz"  # runs/ and results/ on their way back
JOB = ".tpu-job"  # job.sh, log, pgid and status of the one job a VM runs at a time
SESSION = "tpu-budget-lab"  # the tmux session name
MARK = "tpu-budget-lab:"  # a remote line meant for the user, e.g. why the VM refused
REFUSED = 3  # exit status of a remote step that refused
POLL_FAILURES = 10  # consecutive failed polls before we give up waiting (the job runs on)
COLAB_TPUS = ("v5e1", "v6e1")  # `colab run --tpu` choices; the CLI maps any other to v6e1
KAGGLE_TPU = "TpuV5E8"  # Kaggle's machine_shape / --accelerator name of the TPU v5e-8
LOCKFILE = "/tmp/libtpu_lockfile"  # libtpu's lock; a killed process can leave it behind

GCLOUD_MISSING = ("gcloud is not installed: install the Google Cloud SDK "
                  "(https://cloud.google.com/sdk/docs/install), then `gcloud auth login`")
COLAB_MISSING = ("the `colab` command is missing: pip install google-colab-cli "
                 "(Google's Colab CLI; its first command walks you through signing in with Google)")
KAGGLE_MISSING = "the `kaggle` command is missing: pip install kaggle"

# Remote shell, run by the VM user's bash through `gcloud ... ssh --command`. Every step starts
# in the copy of the tree and shares three helpers: `running` (our job is alive), `holders`
# (PIDs with a TPU device open: /dev/accel* on v4/v5p, /dev/vfio/* on v5e/v6e) and `say`.
PRELUDE = f"""mkdir -p ~/{REMOTE_DIR} && cd ~/{REMOTE_DIR} || exit 1
lock={LOCKFILE}
say() {{ echo "{MARK} $*" >&2; }}
running() {{ [ -s {JOB}/pgid ] && [ ! -f {JOB}/status ] \
  && kill -0 -- "-$(cat {JOB}/pgid)" 2>/dev/null; }}
holders() {{ sudo -n lsof -t -w /dev/accel* /dev/vfio/* 2>/dev/null | sort -un; }}
"""

# libtpu deletes its lock file when its process exits cleanly; one left behind by a killed
# process blocks the next run with a confusing error, so refuse early and say why.
PREPARE = f"""if running; then say "a job is still running: watch it with make tpu-logs, stop it \
with make tpu-stop"; exit {REFUSED}; fi
busy=""
for pid in $(holders); do busy="$busy pid $pid ($(ps -o args= -p "$pid" | cut -c1-60))"; done
if [ -n "$busy" ]; then say "the TPU is held by$busy: stop it (an idle Jupyter kernel?) and \
retry"; exit {REFUSED}; fi
if [ -e "$lock" ]; then say "stale {LOCKFILE} and no process holds the TPU: make tpu-stop \
removes it"; exit {REFUSED}; fi
find . -mindepth 1 -maxdepth 1 ! -name .venv ! -name data -exec rm -rf {{}} +
tar -xzf ~/{BUNDLE} && rm -f ~/{BUNDLE}
"""

# tmux when it works (a session to attach to), else setsid nohup. Either way the job outlives
# this ssh connection; we wait until job.sh has recorded its process group.
START = f"""if command -v tmux >/dev/null && tmux new-session -d -s {SESSION} -c "$PWD" \
bash "$PWD/{JOB}/job.sh"; then echo "started in tmux session {SESSION}"
else setsid nohup bash "$PWD/{JOB}/job.sh" >/dev/null 2>&1 </dev/null &
  echo "started with setsid nohup"; fi
for _ in $(seq 100); do [ -s {JOB}/pgid ] && exit 0; sleep 0.1; done
say "the job did not start: see ~/{REMOTE_DIR}/{JOB}/log on the VM"; exit {REFUSED}
"""

JOB_SH = """#!/usr/bin/env bash
# Written by `make tpu-execute`. Runs detached from ssh and records its process group (for
# tpu-stop), its log (for tpu-logs) and its exit status (for the poller).
cd "$(dirname "$0")/.." || exit 1
ps -o pgid= -p $$ | tr -d ' ' > {job}/pgid
{{ make setup && {command}; }} > {job}/log 2>&1
echo $? > {job}/status.partial && mv {job}/status.partial {job}/status
"""

POLL = f"""if [ -f {JOB}/status ]; then echo "exit $(cat {JOB}/status)"
elif running; then echo running; else echo lost; fi
"""

PACK = f"mkdir -p runs results && tar -czf ~/{RESULTS} runs results\n"

LOGS = f"""[ -f {JOB}/log ] || {{ say "no job has run on this VM yet"; exit {REFUSED}; }}
if running; then tail -n 100 -f --pid="$(cat {JOB}/pgid)" {JOB}/log; else tail -n 100 {JOB}/log; fi
"""

# The papermill kernel runs in its own session and exits when its parent (papermill) dies, so
# give it a moment before removing a lock file that nothing holds any more.
STOP = f"""if running; then
  tmux kill-session -t {SESSION} 2>/dev/null
  kill -TERM -- "-$(cat {JOB}/pgid)" 2>/dev/null
  echo 143 > {JOB}/status; echo "stopped the job"
else echo "no job is running"; fi
for _ in $(seq 20); do [ -z "$(holders)" ] && break; sleep 0.5; done
busy=$(holders | tr '\\n' ' ')
if [ -n "$busy" ]; then say "still holding the TPU: pid $busy"
elif [ -e "$lock" ]; then sudo -n rm -f "$lock" && echo "removed a stale {LOCKFILE}" \
  || say "could not remove {LOCKFILE}"; fi
"""


@dataclass(frozen=True)
class TpuVm:
    """A TPU VM as gcloud addresses it; `worker` is gcloud's --worker ("all" on a slice)."""

    name: str
    zone: str
    project: str | None = None
    worker: str | None = None

    def gcloud(self, verb: str, *args: str, worker: str | None = None) -> list[str]:
        """The `gcloud compute tpus tpu-vm VERB` command line for this VM."""
        flags = [f"--zone={self.zone}"] + ([f"--project={self.project}"] if self.project else [])
        return ["gcloud", "compute", "tpus", "tpu-vm", verb, *args, *flags,
                *([f"--worker={worker}"] if worker else [])]

    @property
    def lead(self) -> str | None:
        """The worker we poll and copy results from: worker 0 of a multi-host slice."""
        return "0" if self.worker == "all" else self.worker

    @property
    def make_args(self) -> str:
        """How the user names this VM to make, for the hints we print."""
        project = f" PROJECT={self.project}" if self.project else ""
        return f"TPU={self.name} ZONE={self.zone}{project}"


def _need(tool: str, missing: str) -> None:
    if shutil.which(tool) is None:
        raise BadInput(missing)


def _gcloud(vm: TpuVm, verb: str, *args: str, worker: str | None = None,
            capture: bool = True) -> subprocess.CompletedProcess:
    _need("gcloud", GCLOUD_MISSING)
    return subprocess.run(vm.gcloud(verb, *args, worker=worker), text=True,
                          capture_output=capture)


def _ssh(vm: TpuVm, script: str, worker: str | None, capture: bool = True):
    return _gcloud(vm, "ssh", vm.name, f"--command={PRELUDE}{script}", worker=worker,
                   capture=capture)


def failure_line(vm: TpuVm, result: subprocess.CompletedProcess) -> str:
    """One actionable line for a failed gcloud call: the VM's own refusal if it gave one, else
    gcloud's `ERROR: (gcloud...)` message (unknown zone, TPU not found, no login), joined onto
    one line, with a hint when it is about where the TPU is."""
    lines = [line.strip() for line in (result.stderr or "").splitlines() if line.strip()]
    ours = [line.split(MARK, 1)[1].strip() for line in lines if MARK in line]
    if ours:
        return f"{vm.name}: {ours[0]}"
    start = next((i for i, line in enumerate(lines) if line.startswith("ERROR:")), len(lines) - 1)
    text = " ".join(lines[start:]).removeprefix("ERROR:").strip()
    text = text if len(text) <= 300 else text[:300] + " ..."
    if not text:
        text = f"gcloud exited with status {result.returncode}"
    if "[project]" in text:
        return f"{text} -- pass PROJECT=<id> or `gcloud config set project <id>`"
    if any(word in text.lower() for word in ("not found", "zone", "location", "invalid")):
        return (f"{text} -- check TPU={vm.name} ZONE={vm.zone}: "
                f"`gcloud compute tpus tpu-vm list --zone={vm.zone}` lists the TPU VMs there")
    return text


def _checked(result: subprocess.CompletedProcess, vm: TpuVm) -> subprocess.CompletedProcess:
    if result.returncode != 0:
        raise BadInput(failure_line(vm, result))
    return result


def resolve(vm: TpuVm) -> TpuVm:
    """Fail early unless the VM exists and is READY; run on every worker of a multi-host slice
    (one process per host, or jax.distributed.initialize waits for the missing ones)."""
    info = json.loads(_checked(_gcloud(vm, "describe", vm.name, "--format=json"), vm).stdout)
    if info.get("state") != "READY":
        raise BadInput(f"TPU {vm.name} is {info.get('state')}, not READY: if it is stopped, "
                       f"`gcloud compute tpus tpu-vm start {vm.name} --zone={vm.zone}`")
    workers = len(info.get("networkEndpoints") or [])
    if workers > 1 and vm.worker is None:
        print(f"{vm.name} has {workers} workers: running on all of them", file=sys.stderr)
        return replace(vm, worker="all")
    return vm


def job_script(select: str | None, params: list[str]) -> str:
    """job.sh for `make execute NB=.. PARAMS=..` on the VM, PARAMS surviving every layer.

    The remote Makefile pastes $(PARAMS) into a shell command, so the tokens are shell-joined;
    make expands `$` in command-line variables, so `$` is doubled; bash runs job.sh, so the
    whole make argument is shell-quoted once more.
    """
    make = ["make", "execute", *([f"NB={select}"] if select else []),
            "PARAMS=" + shlex.join(params).replace("$", "$$")]
    return JOB_SH.format(job=JOB, command=shlex.join(make))


def pack_tree(root: Path, bundle: Path, job: str) -> Path:
    """Tar the tree as git ships it (tracked + untracked-not-ignored files) plus job.sh."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"],
                                cwd=root, capture_output=True, check=True).stdout.decode()
    except (OSError, subprocess.CalledProcessError) as err:
        raise BadInput(f"tpu-execute ships the git working tree, but `git ls-files` failed in "
                       f"{root}: run it inside a git clone ({err})") from err
    with tarfile.open(bundle, "w:gz") as tar:
        for name in sorted(set(listed.split("\0")) - {""}):
            if (root / name).is_file():  # a tracked file deleted in the tree is still listed
                tar.add(root / name, arcname=name)
        data = job.encode()
        info = tarfile.TarInfo(f"{JOB}/job.sh")
        info.size, info.mode, info.mtime = len(data), 0o755, int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return bundle


def unpack_results(bundle: Path, root: Path) -> int:
    """Unpack runs/ and results/ into `root`, refusing anything else the archive might hold."""
    with tarfile.open(bundle) as tar:
        members = [m for m in tar.getmembers() if m.name.split("/")[0] in ("runs", "results")]
        tar.extractall(root, members=members, filter="data")
    return sum(m.isfile() for m in members)


def tpu_execute(vm: TpuVm, select: str | None, params: list[str], wait: bool = True) -> int:
    """Ship the tree, start the job detached on every worker, then (unless not `wait`) collect."""
    vm = resolve(vm)
    with tempfile.TemporaryDirectory() as tmp:
        bundle = pack_tree(REPO, Path(tmp) / BUNDLE, job_script(select, params))
        _checked(_gcloud(vm, "scp", str(bundle), f"{vm.name}:{BUNDLE}", worker=vm.worker), vm)
    _checked(_ssh(vm, PREPARE, vm.worker), vm)
    print(_checked(_ssh(vm, START, vm.worker), vm).stdout.strip(), file=sys.stderr)
    if not wait:
        print(f"{vm.name}: `make tpu-logs {vm.make_args}` to watch, "
              f"`make tpu-fetch {vm.make_args}` to wait and copy the results back",
              file=sys.stderr)
        return 0
    return collect(vm)


def wait_for_job(vm: TpuVm) -> int:
    """Poll the job's status file every POLL_SECONDS (default 30) until it holds an exit status.

    A failed poll (a dropped connection) is retried: the job runs on regardless of us.
    """
    interval = float(os.environ.get("POLL_SECONDS", "30"))
    failures, announced = 0, False
    while True:
        result = _ssh(vm, POLL, vm.lead)
        state = (result.stdout or "").strip().rsplit("\n", 1)[-1]
        if state.startswith("exit "):
            return int(state.split()[1])
        if state == "lost":
            raise BadInput(f"{vm.name}: the job ended without an exit status (VM restarted or "
                           f"preempted?): `make tpu-logs {vm.make_args}` shows how far it got")
        if state == "running":
            failures = 0
            if not announced:
                print(f"{vm.name}: job running; Ctrl-C stops waiting, not the job", file=sys.stderr)
                announced = True
        else:
            failures += 1
            if failures >= POLL_FAILURES:
                raise BadInput(f"lost contact ({failure_line(vm, result)}); the job runs on: "
                               f"`make tpu-fetch {vm.make_args}` collects it later")
        time.sleep(interval)


def collect(vm: TpuVm) -> int:
    """Wait for the job, copy runs/ and results/ back, return the job's exit status."""
    status = wait_for_job(vm)
    _checked(_ssh(vm, PACK, vm.lead), vm)
    with tempfile.TemporaryDirectory() as tmp:
        _checked(_gcloud(vm, "scp", f"{vm.name}:{RESULTS}", tmp, worker=vm.lead), vm)
        count = unpack_results(Path(tmp) / RESULTS, REPO)
    print(f"{vm.name}: job exited with status {status}; copied {count} files into runs/ and "
          f"results/", file=sys.stderr)
    return status


def tpu_logs(vm: TpuVm) -> int:
    """Show the job's log, following it while the job runs (Ctrl-C leaves the job running)."""
    vm = resolve(vm)
    return _ssh(vm, LOGS, vm.lead, capture=False).returncode


def tpu_stop(vm: TpuVm) -> int:
    """Stop the job on every worker and remove a libtpu lock file that nothing holds."""
    vm = resolve(vm)
    result = _checked(_ssh(vm, STOP, vm.worker), vm)
    print(result.stdout.strip())
    for line in result.stderr.splitlines():
        if MARK in line:
            print(f"{vm.name}: {line.split(MARK, 1)[1].strip()}", file=sys.stderr)
    return 0


def one_notebook(select: str | None) -> Path:
    """The single notebook NB= names (Colab and Kaggle run one notebook per runtime)."""
    if not select:
        raise BadInput("NB= is missing: pick one notebook, e.g. NB=06")
    sources = notebook_sources(select)
    if len(sources) > 1:
        names = ", ".join(s.stem for s in sources)
        raise BadInput(f"NB={select} matches {len(sources)} notebooks ({names}): pick one")
    return sources[0]


def prepare_notebook(source: Path, params: list[str], folder: Path) -> Path:
    """The notebook as an .ipynb with PARAMS injected (papermill's --prepare-only), so the copy
    a hosted runtime executes carries them; kernel `python3`, the one Colab and Kaggle run."""
    import jupytext  # imported here: a second of start-up that the TPU VM commands do not need
    import papermill

    notebook = jupytext.read(source)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                       "language": "python"}
    folder.mkdir(parents=True, exist_ok=True)
    staged = folder / f"{source.stem}.ipynb"
    papermill.execute_notebook(notebook, str(staged), parameters=parse_parameters(params),
                               prepare_only=True, kernel_name="python3", progress_bar=False)
    return staged


def notebook_errors(path: Path) -> list[str]:
    """'cell N: Name: value' for every error output of an executed notebook."""
    cells = json.loads(path.read_text())["cells"]
    return [f"cell {i}: {out.get('ename')}: {out.get('evalue')}" for i, cell in enumerate(cells)
            for out in cell.get("outputs", []) if out.get("output_type") == "error"]


def colab_execute(select: str | None, params: list[str], accelerator: str) -> int:
    """Run one prepared notebook on a fresh Colab TPU runtime with `colab run`.

    `colab run` provisions the VM, runs the notebook's code cells, writes `<stem>_output.ipynb`
    beside the input and releases the VM. It does not fail on a cell error in a notebook, so we
    read the executed copy. The runtime gets the notebook, not this tree: its first cell
    clones the repository on Colab.
    """
    _need("colab", COLAB_MISSING)
    choose("Colab TPU", accelerator, COLAB_TPUS)
    staged = prepare_notebook(one_notebook(select), params, REPO / "runs" / "colab")
    executed = staged.with_name(f"{staged.stem}_output.ipynb")
    before = executed.stat().st_mtime_ns if executed.exists() else None
    code = subprocess.run(["colab", "run", "--tpu", accelerator, str(staged)]).returncode
    if not executed.exists() or executed.stat().st_mtime_ns == before:
        if code:
            return code
        raise BadInput(f"`colab run` wrote no {executed.relative_to(REPO)}: upgrade it "
                       f"(pip install -U google-colab-cli; notebooks need a recent version)")
    print(f"wrote {executed.relative_to(REPO)}", file=sys.stderr)
    errors = notebook_errors(executed)
    if errors:
        print(f"{executed.name} failed at {errors[0]}", file=sys.stderr)
    return code or (1 if errors else 0)


def _kaggle_dirs() -> list[Path]:
    return [Path(os.environ.get("KAGGLE_CONFIG_DIR", Path.home() / ".kaggle")),
            Path.home() / ".kaggle"]


def kaggle_user(user: str | None) -> str:
    """Check that the kaggle CLI has credentials, and return the user name kernels live under."""
    env = os.environ
    files = [d / f for d in _kaggle_dirs() for f in ("kaggle.json", "access_token",
                                                      "credentials.json")]
    if not (env.get("KAGGLE_API_TOKEN") or (env.get("KAGGLE_USERNAME") and env.get("KAGGLE_KEY"))
            or any(f.exists() for f in files)):
        raise BadInput("no Kaggle credentials: create an API token at "
                       "https://www.kaggle.com/settings and save it as ~/.kaggle/access_token "
                       "(or export KAGGLE_API_TOKEN; legacy: ~/.kaggle/kaggle.json or "
                       "KAGGLE_USERNAME and KAGGLE_KEY)")
    user = user or env.get("KAGGLE_USERNAME")
    for legacy in (d / "kaggle.json" for d in _kaggle_dirs()):
        if not user and legacy.exists():
            user = json.loads(legacy.read_text()).get("username")
    if not user:
        raise BadInput("cannot tell your Kaggle user name: pass KAGGLE_USER=<your user name>")
    return user


def kernel_ref(source: Path, user: str) -> str:
    """`user/slug`; Kaggle derives the slug from the title, so the title is the slug itself."""
    return f"{user}/tpu-budget-lab-{source.stem.replace('_', '-')}"


def kaggle_push(select: str | None, params: list[str], user: str | None,
                accelerator: str) -> int:
    """Stage the prepared notebook with its kernel-metadata.json and push it (Kaggle runs it)."""
    _need("kaggle", KAGGLE_MISSING)
    source = one_notebook(select)
    ref = kernel_ref(source, kaggle_user(user))
    folder = REPO / "runs" / "kaggle" / ref.split("/")[1] / "push"
    staged = prepare_notebook(source, params, folder)
    metadata = {
        "id": ref, "title": ref.split("/")[1], "code_file": staged.name, "language": "python",
        "kernel_type": "notebook", "is_private": True, "enable_gpu": False,
        "enable_tpu": True, "machine_shape": accelerator,
        "enable_internet": True,  # the first cell clones and installs the repository
        "dataset_sources": [], "competition_sources": [], "kernel_sources": [],
        "model_sources": [],
    }
    (folder / "kernel-metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")
    # --accelerator repeats machine_shape: a kaggle CLI too old to know either fails loudly
    # here instead of silently running on a CPU.
    result = subprocess.run(["kaggle", "kernels", "push", "-p", str(folder),
                             "--accelerator", accelerator], capture_output=True, text=True)
    print(result.stdout.strip())
    if result.returncode or "push error" in result.stdout.lower():
        lines = (result.stderr + result.stdout).strip().splitlines() or ["no output"]
        raise BadInput(f"kaggle kernels push {ref} failed: {lines[-1]}")
    print(f"pushed {ref}: `make kaggle-pull NB={select}` fetches its output once it has run",
          file=sys.stderr)
    return 0


def kaggle_pull(select: str | None, user: str | None) -> int:
    """Fetch the output of the kernel's last run into runs/kaggle/<slug>/output; status 1 if
    that run failed, one line and status 2 if it has not finished."""
    _need("kaggle", KAGGLE_MISSING)
    source = one_notebook(select)
    ref = kernel_ref(source, kaggle_user(user))
    status = subprocess.run(["kaggle", "kernels", "status", ref], capture_output=True, text=True)
    first = (status.stdout.strip().splitlines() or [status.stderr.strip()])[0]
    if status.returncode:
        raise BadInput(f"kaggle kernels status {ref} failed: {first}")
    outcome = first.lower()  # 'user/slug has status "KernelWorkerStatus.COMPLETE"' or "complete"
    if not any(word in outcome for word in ("complete", "error", "cancel")):
        raise BadInput(f"{first}: not finished yet, pull again later")
    out = REPO / "runs" / "kaggle" / ref.split("/")[1] / "output"
    code = subprocess.run(["kaggle", "kernels", "output", ref, "-p", str(out), "-o"]).returncode
    if code:
        return code
    print(f"{first}; output in {out.relative_to(REPO)}", file=sys.stderr)
    return 0 if "complete" in outcome else 1


def _vm(args) -> TpuVm:
    for flag, value in (("TPU", args.tpu), ("ZONE", args.zone)):
        if not value:
            raise BadInput(f"{flag}= is missing: name the TPU VM and its zone, e.g. "
                           f"make {args.command} TPU=my-v5e ZONE=us-west4-a")
    return TpuVm(args.tpu, args.zone, args.project or None, args.worker or None)


def _params(args) -> list[str]:
    """The `-p NAME VALUE` tokens after `--`, checked here before anything leaves this machine."""
    tokens = args.parameters[1:] if args.parameters[:1] == ["--"] else args.parameters
    parse_parameters(tokens)
    return tokens


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shared.remote", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    tpu = {name: sub.add_parser(name, help=help) for name, help in (
        ("tpu-execute", "run make execute on a TPU VM and copy runs/ results/ back"),
        ("tpu-fetch", "wait for the TPU VM's job and copy runs/ results/ back"),
        ("tpu-logs", "show (follow) the TPU VM job's log"),
        ("tpu-stop", "stop the TPU VM's job"))}
    for command in tpu.values():
        command.add_argument("--tpu", default="", help="TPU VM name")
        command.add_argument("--zone", default="")
        command.add_argument("--project", default="")
        command.add_argument("--worker", default="", help="'all' on a multi-host slice")
    tpu["tpu-execute"].add_argument("--nb", help="notebook prefix, e.g. 06")
    tpu["tpu-execute"].add_argument("--no-wait", action="store_true")
    colab = sub.add_parser("colab-execute", help="run one notebook on a Colab TPU runtime")
    colab.add_argument("--tpu", default="v6e1", help="v5e1 or v6e1")
    push = sub.add_parser("kaggle-push", help="push one notebook as a Kaggle TPU kernel")
    push.add_argument("--accelerator", default=KAGGLE_TPU)
    pull = sub.add_parser("kaggle-pull", help="fetch the Kaggle kernel's output into runs/")
    for command in (colab, push, pull):
        command.add_argument("--nb", help="notebook prefix, e.g. 06")
    for command in (push, pull):
        command.add_argument("--user", help="Kaggle user name (default: from the credentials)")
    for command in (tpu["tpu-execute"], colab, push):
        command.add_argument("parameters", nargs=argparse.REMAINDER, help="-- -p NAME VALUE")
    args = parser.parse_args(argv)
    try:
        return _dispatch(args)
    except KeyboardInterrupt:  # Ctrl-C while waiting or following: say what still runs where
        if not args.command.startswith("tpu-"):
            return 130
        vm = _vm(args)
        print(f"\nthe job on {vm.name} runs on: `make tpu-fetch {vm.make_args}` collects it, "
              f"`make tpu-stop {vm.make_args}` stops it", file=sys.stderr)
        return 130


def _dispatch(args) -> int:
    if args.command == "colab-execute":
        return colab_execute(args.nb, _params(args), args.tpu)
    if args.command == "kaggle-push":
        return kaggle_push(args.nb, _params(args), args.user, args.accelerator)
    if args.command == "kaggle-pull":
        return kaggle_pull(args.nb, args.user)
    vm = _vm(args)
    if args.command == "tpu-stop":
        return tpu_stop(vm)
    if args.command == "tpu-logs":
        return tpu_logs(vm)
    if args.command == "tpu-fetch":
        return collect(resolve(vm))
    if args.nb:
        notebook_sources(args.nb)  # a mistyped NB fails here, not on the VM
    return tpu_execute(vm, args.nb, _params(args), wait=not args.no_wait)


if __name__ == "__main__":
    run_cli(main)
