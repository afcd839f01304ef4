"""A GCP TPU VM over `gcloud`: ship the working tree, run `make execute` there detached,
collect runs/ and results/ (the TPU VM half of `python -m tools.remote`).

The working tree as git sees it (tracked plus untracked-but-not-ignored files, so never .venv/,
runs/, results/ or data shards) goes over `gcloud compute tpus tpu-vm scp`. Over `ssh` the VM
refuses when a job still runs or a process holds the TPU, unpacks, and starts
`make setup && make execute` in tmux (else setsid nohup) with a log and an exit-status file,
so a dropped connection neither kills the job nor loses how it ended. We poll that file, copy
runs/ and results/ back (from worker 0 of a multi-host slice) and exit with the job's status.
"""

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

from shared.errors import BadInput
from shared.paths import ROOT

REMOTE_DIR = "tpu-budget-lab"  # the copy on the VM, under the user's home
BUNDLE = "tpu-budget-lab.tgz"  # the working tree on its way to the VM
RESULTS = "tpu-budget-lab-results.tgz"  # runs/ and results/ on their way back
JOB = ".tpu-job"  # job.sh, log, pgid and status of the one job a VM runs at a time
SESSION = "tpu-budget-lab"  # the tmux session name
MARK = "tpu-budget-lab:"  # a remote line meant for the user, e.g. why the VM refused
REFUSED = 3  # exit status of a remote step that refused
POLL_FAILURES = 10  # consecutive failed polls before we give up waiting (the job runs on)
LOCKFILE = "/tmp/libtpu_lockfile"  # libtpu's lock; a killed process can leave it behind

GCLOUD_MISSING = (
    "gcloud is not installed: install the Google Cloud SDK "
    "(https://cloud.google.com/sdk/docs/install), then `gcloud auth login`"
)

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
        return [
            "gcloud",
            "compute",
            "tpus",
            "tpu-vm",
            verb,
            *args,
            *flags,
            *([f"--worker={worker}"] if worker else []),
        ]

    @property
    def lead(self) -> str | None:
        """The worker we poll and copy results from: worker 0 of a multi-host slice."""
        return "0" if self.worker == "all" else self.worker

    @property
    def make_args(self) -> str:
        """How the user names this VM to make, for the hints we print."""
        project = f" PROJECT={self.project}" if self.project else ""
        return f"TPU={self.name} ZONE={self.zone}{project}"


def need_command(tool: str, missing: str) -> None:
    if shutil.which(tool) is None:
        raise BadInput(missing)


def _gcloud(
    vm: TpuVm, verb: str, *args: str, worker: str | None = None, capture: bool = True
) -> subprocess.CompletedProcess:
    need_command("gcloud", GCLOUD_MISSING)
    return subprocess.run(vm.gcloud(verb, *args, worker=worker), text=True, capture_output=capture)


def _ssh(vm: TpuVm, script: str, worker: str | None, capture: bool = True):
    return _gcloud(
        vm, "ssh", vm.name, f"--command={PRELUDE}{script}", worker=worker, capture=capture
    )


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
        return (
            f"{text} -- check TPU={vm.name} ZONE={vm.zone}: "
            f"`gcloud compute tpus tpu-vm list --zone={vm.zone}` lists the TPU VMs there"
        )
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
        raise BadInput(
            f"TPU {vm.name} is {info.get('state')}, not READY: if it is stopped, "
            f"`gcloud compute tpus tpu-vm start {vm.name} --zone={vm.zone}`"
        )
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
    make = [
        "make",
        "execute",
        *([f"NB={select}"] if select else []),
        "PARAMS=" + shlex.join(params).replace("$", "$$"),
    ]
    return JOB_SH.format(job=JOB, command=shlex.join(make))


def pack_tree(root: Path, bundle: Path, job: str) -> Path:
    """Tar the tree as git ships it (tracked + untracked-not-ignored files) plus job.sh."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "-co", "--exclude-standard"],
            cwd=root,
            capture_output=True,
            check=True,
        ).stdout.decode()
    except (OSError, subprocess.CalledProcessError) as err:
        raise BadInput(
            f"tpu-execute ships the git working tree, but `git ls-files` failed in "
            f"{root}: run it inside a git clone ({err})"
        ) from err
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
        bundle = pack_tree(ROOT, Path(tmp) / BUNDLE, job_script(select, params))
        _checked(_gcloud(vm, "scp", str(bundle), f"{vm.name}:{BUNDLE}", worker=vm.worker), vm)
    _checked(_ssh(vm, PREPARE, vm.worker), vm)
    print(_checked(_ssh(vm, START, vm.worker), vm).stdout.strip(), file=sys.stderr)
    if not wait:
        print(
            f"{vm.name}: `make tpu-logs {vm.make_args}` to watch, "
            f"`make tpu-fetch {vm.make_args}` to wait and copy the results back",
            file=sys.stderr,
        )
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
            raise BadInput(
                f"{vm.name}: the job ended without an exit status (VM restarted or "
                f"preempted?): `make tpu-logs {vm.make_args}` shows how far it got"
            )
        if state == "running":
            failures = 0
            if not announced:
                print(f"{vm.name}: job running; Ctrl-C stops waiting, not the job", file=sys.stderr)
                announced = True
        else:
            failures += 1
            if failures >= POLL_FAILURES:
                raise BadInput(
                    f"lost contact ({failure_line(vm, result)}); the job runs on: "
                    f"`make tpu-fetch {vm.make_args}` collects it later"
                )
        time.sleep(interval)


def collect(vm: TpuVm) -> int:
    """Wait for the job, copy runs/ and results/ back, return the job's exit status."""
    status = wait_for_job(vm)
    _checked(_ssh(vm, PACK, vm.lead), vm)
    with tempfile.TemporaryDirectory() as tmp:
        _checked(_gcloud(vm, "scp", f"{vm.name}:{RESULTS}", tmp, worker=vm.lead), vm)
        count = unpack_results(Path(tmp) / RESULTS, ROOT)
    print(
        f"{vm.name}: job exited with status {status}; copied {count} files into runs/ and results/",
        file=sys.stderr,
    )
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
