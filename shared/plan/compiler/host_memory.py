"""How many compiles this machine's memory holds at once, and handing back what they leave.

Why: XLA compiles on the host, and a large model's compile takes gigabytes of it. Two exact
compiles of gemma3-27b's LoRA step at 4,096 tokens on a 2x2 v6e-4, side by side in one process
(a search's pair: shared.plan.verdict.plan_points), took it to 20.7 GB, and the kernel killed it
on a 23 GiB machine: the search's answer was lost. So compiles go side by side only where each
one's measured peak fits in the memory the machine has free at the time (MemAvailable), less
what the compiles still running in probe children (shared.plan.compiler.assigned), or in other
processes sharing the plan cache (an atlas run's shards: announce), are yet to take.

A compile's peak is measured, never guessed from the model: the growth of a probe child's peak
over its whole compile (shared.plan.compiler.assigned: not at buffer assignment, where gemma3-1b's
LoRA step on a v5e-8 had taken 1.39 of its 5.95 GiB), or of this process's over a round of compiles
(record_round: 6.12 and 5.84 GiB over two exact compiles of the same step in one process;
benchmarks/results/plan_host_memory.json). Keyed
by workload and model, the largest seen, kept beside the plan cache (STORE) so the next process
knows it before its first compile. Before any is measured, as many compile at once as the cores
take in one process, and none beside another process's compile. Linux only (/proc); elsewhere
there is no limit.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import sys
import time
from pathlib import Path

import jax

from shared.hardware.procfs import PROC, stat_fields

STORE = "host_memory.json"  # in the plan cache's folder: "workload model" -> bytes
COMPILING = "compiling"  # in the plan cache's folder: PID.json for each process compiling now
_POLL_S = 0.5
# "workload model" -> the most bytes of host memory one compile of it took, in this process
_ONE_COMPILE: dict[str, int] = {}
# pid of a probe child compiling on its own -> the "workload model" it compiles
_ELSEWHERE: dict[int, str] = {}
_SAID: set[str] = set()  # the keys whose limit has been said once
# pid (this process, or a probe child of it) -> its file in COMPILING (announce)
_ANNOUNCED: dict[int, Path] = {}


def _key(request) -> str:
    return f"{request.workload} {request.model}"


def _stored(folder: Path | None) -> dict[str, int]:
    """What earlier processes measured (STORE in `folder`); nothing where it is missing or
    unreadable (a corrupt file is written over by the next record)."""
    try:
        stored = json.loads((folder / STORE).read_text()) if folder else {}
    except (OSError, ValueError):
        return {}
    if not isinstance(stored, dict):
        return {}
    return {key: n for key, n in stored.items() if isinstance(n, int)}


def _kb_field(path: Path, field: str) -> int | None:
    """A `kB` field of a /proc file (VmRSS of /proc/PID/status, MemAvailable of /proc/meminfo)
    in bytes; None where there is none (the process has ended, or no /proc)."""
    try:
        for line in path.read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def started_at(pid: int | str) -> int | None:
    """When process `pid` started (clock ticks since boot, /proc/PID/stat's 22nd field), or
    None where it has ended: with its pid, it names one process, which a pid alone does not
    once the kernel hands the pid of an ended process to a new one."""
    fields = stat_fields(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def resident_bytes(pid: int | str = "self") -> int | None:
    return _kb_field(PROC / str(pid) / "status", "VmRSS")


def peak_resident_bytes(pid: int | str = "self") -> int | None:
    """The most resident memory the process has held (since its start or restart_peak)."""
    return _kb_field(PROC / str(pid) / "status", "VmHWM")


def restart_peak() -> int | None:
    """Start this process's peak over from what it holds now (Linux's clear_refs), so the next
    peak_resident_bytes measures what follows; this process's resident bytes, or None where the
    peak cannot be restarted (then no round is measured)."""
    try:
        (PROC / "self" / "clear_refs").write_text("5")
    except OSError:
        return None
    return resident_bytes()


def give_back_freed(requests: list, wanted: int, folder: Path | None) -> None:
    """Hand what a round of compiles left behind back to the kernel. Why: a search that
    compiles for half an hour grew until the kernel nearly killed it (notebook 08's 31B job
    held 21.2 GB of a 23 GiB machine): glibc keeps the heap XLA frees in its arenas, and jax
    keeps each compiled program in its caches. Three exact compiles of gemma3-1b's LoRA step on
    a v5e-8 (batch 8, 16, 24) in one process held 8.6 GiB after the third (its peak 10.3);
    with malloc_trim after each, 5.7 (9.2); with jax's caches cleared too, 1.1 (7.0).

    malloc_trim (glibc's; nothing without it) always. The caches only where the free memory
    would not hold `wanted` more compiles of `requests` (compiles_at_once would run fewer) and
    jax's backend is the CPU (plan mode: nothing here reuses a planned program): clearing them
    after every round slowed tests/test_plan.py and test_plan_assigned.py from 85 to 103 s."""
    if jax.default_backend() == "cpu" and _fitting(requests, wanted, folder) < wanted:
        jax.clear_caches()
        gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def available_bytes() -> int | None:
    """The memory the kernel could give without swapping (MemAvailable), or None."""
    return _kb_field(PROC / "meminfo", "MemAvailable")


def record(request, nbytes: int | None, folder: Path | None) -> None:
    """One compile of `request`'s workload and model took `nbytes` of host memory: kept in
    this process and, where it is the most yet, in `folder`'s STORE (written whole or not at
    all; a folder that cannot be written keeps it in this process only)."""
    key = _key(request)
    if not nbytes or nbytes <= one_compile_bytes(request, folder):
        return
    _ONE_COMPILE[key] = int(nbytes)
    if folder is not None:
        partial = folder / f"{STORE}.{os.getpid()}.partial"
        try:
            partial.write_text(json.dumps({**_stored(folder), key: int(nbytes)}))
            os.replace(partial, folder / STORE)
        except OSError:
            pass


def record_round(requests: list, before: int | None, folder: Path | None) -> None:
    """A round of compiles of `requests`, side by side in this process, grew its peak from
    `before` (restart_peak's): each is given an equal share, the mean, under the largest one's."""
    peak = peak_resident_bytes()
    if before is None or peak is None or not requests:
        return
    for request in requests:
        record(request, (peak - before) // len(requests), folder)


def one_compile_bytes(request, folder: Path | None) -> int:
    """The most host memory one compile of `request`'s workload and model took, here or in an
    earlier process (`folder`'s STORE); 0 where none is measured."""
    return _most(_key(request), _stored(folder))


def _most(key: str, stored: dict[str, int]) -> int:
    return max(_ONE_COMPILE.get(key, 0), stored.get(key, 0))


def _largest(requests: list, stored: dict[str, int]):
    """The request whose one compile took the most host memory, here or as `stored`."""
    return max(requests, key=lambda r: _most(_key(r), stored))


def compiling_elsewhere(pid: int, request) -> None:
    """A child process `pid` compiles `request` beside this one (a probe finishing its
    compile; shared.plan.compiler.assigned announced it to the other processes as it started)."""
    _ELSEWHERE[pid] = _key(request)


def done_elsewhere(pid: int) -> None:
    _ELSEWHERE.pop(pid, None)
    withdraw(pid)


def announce(pid: int, request, compiles: int, resident_before: int, folder: Path | None) -> None:
    """Say in `folder` (the plan cache's) that process `pid` runs `compiles` compiles of
    `request` now, from `resident_before` bytes held: the other processes sharing the folder
    count what it may still take before they start theirs (_others_yet_to_take). Why: each
    sees only what the other holds now (MemAvailable), not what its compile will take. Two
    atlas runs on a 23 GiB machine started exact compiles of LoRA steps on a tpu7x-8 side by
    side (gemma4-e4b's grew to 18.8 GB, llama3.1-8b's to 18.0) and one was killed, three
    times in one session (2026-12-02). Nothing where the folder cannot be written."""
    if folder is None:
        return
    path = folder / COMPILING / f"{pid}.json"
    state = {
        "key": _key(request),
        "compiles": compiles,
        "resident_before": resident_before,
        "started": started_at(pid),
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(state))
    except OSError:
        return
    _ANNOUNCED[pid] = path


def withdraw(pid: int) -> None:
    """Process `pid`'s compiles have ended: its announcement goes."""
    if (path := _ANNOUNCED.pop(pid, None)) is not None:
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def compiling_here(requests: list, compiles: int, folder: Path | None):
    """While this process runs `compiles` compiles of `requests` side by side: announced."""
    largest = _largest(requests, _stored(folder))
    announce(os.getpid(), largest, compiles, resident_bytes() or 0, folder)
    try:
        yield
    finally:
        withdraw(os.getpid())


@contextlib.contextmanager
def round_of_compiles(requests: list, wanted: int, folder: Path | None):
    """One round of compiles of `requests` side by side in this process: it waits until this
    machine's memory holds them (compiles_at_once), is announced while it runs, and afterwards
    what it took is recorded and the heap it freed handed back. Yields how many compile at once
    and a list the caller fills with the requests it did compile (a round whose executables
    were all read from the cache measured nothing)."""
    workers = compiles_at_once(requests, wanted, folder)
    before = restart_peak()
    compiled: list = []
    with compiling_here(requests, workers, folder):
        yield workers, compiled
    if compiled:
        record_round(compiled, before, folder)
        give_back_freed(compiled, wanted, folder)


def _yet_to_take(stored: dict[str, int]) -> int:
    """What the children compiling elsewhere may still take: each one's measured compile, less
    what it holds now; a child that has ended takes nothing."""
    total = 0
    for pid, key in list(_ELSEWHERE.items()):
        held = resident_bytes(pid)
        if held is None:
            _ELSEWHERE.pop(pid)
            continue
        total += max(0, _most(key, stored) - held)
    return total


def _others_yet_to_take(folder: Path | None, stored: dict[str, int]) -> tuple[int | None, int]:
    """What other processes sharing `folder` may still take for the compiles they announced
    (announce): each one's measured compiles less what it has grown since they started, None
    where one of them compiles a workload and model never measured (it may take all that is
    free); and how many such processes there are. An announcement whose process has ended
    (killed before it could withdraw, its pid perhaps another's since) is removed; an
    unreadable one (being written) is passed over."""
    total: int | None = 0
    count = 0
    for path in folder.glob(f"{COMPILING}/*.json") if folder else ():
        if not path.stem.isdigit() or (pid := int(path.stem)) in _ANNOUNCED:
            continue  # this process's own, and its children's (_yet_to_take counts those)
        try:
            state = json.loads(path.read_text())
            held = resident_bytes(pid)
            if held is None or started_at(pid) != state["started"]:
                path.unlink(missing_ok=True)
                continue
            grown = held - state["resident_before"]
            if not (measured := _most(state["key"], stored)):
                total = None
            elif total is not None:
                total += max(0, measured * state["compiles"] - grown)
        except (OSError, ValueError, KeyError, TypeError):
            continue
        count += 1
    return total, count


def _fitting(requests: list, wanted: int, folder: Path | None) -> int:
    """How many of `wanted` compiles of `requests` fit in the free memory now: 0 where a child
    or another process compiling elsewhere holds the room the next one needs."""
    stored = _stored(folder)  # read once: this runs in the probes' poll loop
    largest = _largest(requests, stored)
    need, free = _most(_key(largest), stored), available_bytes()
    if free is None:
        return wanted
    others, compiling_beside = _others_yet_to_take(folder, stored)
    if not need or others is None:
        # Either this compile or one another process runs beside it was never measured, and
        # may take all that is free: none starts beside another process's compile. Why: two
        # atlas runs' first exact compiles of qwen3-8b's and gemma3-12b's LoRA steps on a
        # tpu7x-8, neither measured, each counted the other's as taking nothing more; on a 23
        # GiB machine they reached 14.7 and 7.7 GB side by side before the second was killed
        # (alone, they took 17.0 and 23.3 GB; 2026-12-02). In one process, as many as the
        # cores take until one is measured.
        if not compiling_beside:
            return wanted
        _say_once(
            largest,
            "waiting for the compiles beside this one to end: what one of them "
            f"takes of this machine's memory is not measured yet, {free / 2**30:.1f} GiB free",
        )
        return 0
    fit = min(wanted, max(0, free - _yet_to_take(stored) - others) // need)
    if fit < wanted:
        if fit:
            what = f"{fit} compile(s) at once, not {wanted}"
        elif _ELSEWHERE or compiling_beside:
            what = "waiting for the compiles beside this one to end"
        else:  # nothing to wait for: one compile goes ahead, which the kernel may kill
            what = "one compile, with less memory free than it may take"
        _say_once(
            largest,
            f"{what}: one compile of {largest.model} {largest.workload} took "
            f"{need / 2**30:.1f} GiB of this machine's memory, {free / 2**30:.1f} GiB free",
        )
    return fit if fit or _ELSEWHERE or compiling_beside else 1


def _say_once(request, line: str) -> None:
    """Print `line` on stderr the first time a limit is met for `request`'s workload and model:
    the probes' poll loop asks twice a second."""
    if _key(request) not in _SAID:
        _SAID.add(_key(request))
        print(f"plan: {line}", file=sys.stderr)


def compiles_at_once(requests: list, wanted: int, folder: Path | None) -> int:
    """How many of `requests`' compiles may run side by side now: `wanted` at most, one at
    least; while a child compiling elsewhere holds the room that one needs, wait for it.
    `folder`: the plan cache's, where earlier processes kept what they measured."""
    while not (fit := _fitting(requests, wanted, folder)):
        time.sleep(_POLL_S)
    return fit
