"""Second by second, how many of the machine's cores a benchmark part keeps busy, and which of
its processes: a search's wall split into time both cores compiled, one did, or none did.

Why: gemma3-27b's LoRA `--max-batch` on a v5p-8 took 361-366 s against a 5-minute goal, with
the compiles it recorded summing to about the same (benchmarks/results/plan_speed_goals_*.json):
whether those seconds kept both cores busy, or left one idle while a probe's child started or
the parent built a workload, decides whether overlapping more work can cut them or only less
work can. Its children are named by what they compile (a buffer-assignment probe's request),
and `note` (a callable) names what the parent was doing at each sample (the search's progress).
Linux only (/proc); elsewhere it records nothing.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from shared.hardware.procfs import PROC, stat_fields
from shared.report.results import cpu_ticks

TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PROBE_MODULE = (
    "shared.plan.compiler.assigned"  # a buffer-assignment probe's child (its request in argv)
)


def _stat(pid: int) -> tuple[int, float] | None:
    """Process `pid`'s parent and CPU seconds so far (user + system), or None where it ended."""
    if not (fields := stat_fields(pid)):
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def _label(pid: int, root: int) -> str:
    """What process `pid` is: the benchmark itself, a probe named by its request (`probe 6 on
    2x2`), or its command's name."""
    if pid == root:
        return "this process"
    try:
        argv = (PROC / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return "ended"
    words = [a.decode(errors="replace") for a in argv]
    if PROBE_MODULE in words:
        request = json.loads(words[words.index(PROBE_MODULE) + 1])
        return f"probe {request['batch']} on {request.get('mesh') or 'its mesh'}"
    return Path(words[0]).name if words and words[0] else str(pid)


def _tree(root: int) -> dict[int, float]:
    """CPU seconds so far of `root` and every live process under it, by pid."""
    stats = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            stats[int(entry.name)] = stat
    inside, pending = {}, [root]
    while pending:
        pid = pending.pop()
        if pid in stats and pid not in inside:
            inside[pid] = stats[pid][1]
            pending.extend(p for p, (parent, _) in stats.items() if parent == pid)
    return inside


class CpuTimeline:
    """A sampler thread, from `with CpuTimeline() as timeline:` to its end: every `period_s`,
    the cores the machine kept busy (/proc/stat) and those each process of this one's tree did
    (their CPU seconds' growth), with `note()`. `report()` gives the samples and their sums."""

    def __init__(self, period_s: float = 1.0, note: Callable[[], str] | None = None):
        self.period_s, self.note = period_s, note or (lambda: "")
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._labels: dict[int, str] = {}

    def __enter__(self) -> CpuTimeline:
        self._start = time.perf_counter()
        if PROC.is_dir():
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self._wall = time.perf_counter() - self._start

    def _run(self) -> None:
        root = os.getpid()
        before, machine, at = _tree(root), cpu_ticks(), time.perf_counter()
        while not self._stop.wait(self.period_s):
            now, machine_now, at_now = _tree(root), cpu_ticks(), time.perf_counter()
            seconds = at_now - at
            by: dict[str, float] = {}
            for pid, cpu in now.items():
                label = self._labels.setdefault(pid, _label(pid, root))
                by[label] = by.get(label, 0.0) + (cpu - before.get(pid, 0.0)) / seconds
            busy, total = (a - b for a, b in zip(machine_now, machine, strict=True))
            self.samples.append(
                {
                    "t": round(at_now - self._start, 1),
                    "machine_cores": round(busy / max(total, 1) * (os.cpu_count() or 1), 2),
                    "by": {k: round(v, 2) for k, v in by.items() if v >= 0.01},
                    "note": self.note(),
                }
            )
            before, machine, at = now, machine_now, at_now

    def report(self) -> dict:
        """The samples, and over the whole wall: core-seconds the machine kept busy and left
        idle, and the seconds at each whole number of busy cores (rounded)."""
        cores = os.cpu_count() or 1
        busy = sum(s["machine_cores"] for s in self.samples) * self.period_s
        by_kind: dict[str, float] = {}
        for s in self.samples:
            for label, c in s["by"].items():
                kind = "probes" if label.startswith("probe ") else label
                by_kind[kind] = by_kind.get(kind, 0.0) + c * self.period_s
        at_cores: dict[str, int] = {}
        for s in self.samples:
            key = str(min(cores, round(s["machine_cores"])))
            at_cores[key] = at_cores.get(key, 0) + 1
        return {
            "period_s": self.period_s,
            "wall_s": round(self._wall, 1),
            "busy_core_s": round(busy, 1),
            "idle_core_s": round(cores * len(self.samples) * self.period_s - busy, 1),
            "core_s_by": {k: round(v, 1) for k, v in sorted(by_kind.items())},
            "samples_at_busy_cores": dict(sorted(at_cores.items())),
            "samples": self.samples,
        }
