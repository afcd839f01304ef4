"""What every benchmark writes: one JSON results file that says how it was made.

Each file in benchmarks/results/ starts with the same header (`header`): the command that
reproduces it, the date, the host (its CPU count and machine: compile and CPU timings depend on
them), the versions of the stack. `write` adds the load average at the moment of writing
(timings taken beside other work are not the engine's: a reader must be able to tell) and
writes atomically, so an interrupted run leaves the previous file whole.
"""

import datetime
import os
import platform
import sys
import time
from pathlib import Path

from shared.data import files
from shared.versions import versions


def header(script: str, argv: list[str] | None = None) -> dict:
    """The first keys of a results file: command (`python SCRIPT ARGS`), the XLA and libtpu
    flags it ran under when any were set (they change what XLA compiles: a GPU peak measured
    with the autotuner off, GRPO on a tpu7x-8 with the SparseCore gather offload off), date,
    host, versions."""
    args = sys.argv[1:] if argv is None else argv
    flags = {"xla_flags": "XLA_FLAGS", "libtpu_init_args": "LIBTPU_INIT_ARGS"}
    return {
        "command": " ".join(["python", script, *args]),
        **{key: os.environ[name] for key, name in flags.items() if os.environ.get(name)},
        "date": datetime.date.today().isoformat(),
        "host_cpus": os.cpu_count(),
        "host_machine": platform.machine(),
        "python": platform.python_version(),
        "versions": versions(),
    }


def write(path: str | Path, report: dict) -> Path:
    """`report` with the load average now, written atomically as indented JSON."""
    path = Path(path)
    files.write_json(path, {**report, "load_average": os.getloadavg()})
    return path


def cpu_ticks() -> tuple[int, int]:
    """The machine's busy and total clock ticks so far, over all its cores (/proc/stat's first
    line; idle and iowait are not busy)."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields[:8]) - idle, sum(fields[:8])


def busy_cores(seconds: float = 2.0) -> float | None:
    """How many cores other processes keep busy now, sampled from /proc/stat over `seconds`
    (None off Linux). The load average lags: a compile at nice 19 beside a benchmark left a
    one-minute load of 1.2 on two cores while it ran (plan_grpo_order.json)."""
    try:
        busy, total = cpu_ticks()
        time.sleep(seconds)
        busy_after, total_after = cpu_ticks()
    except OSError:
        return None
    return (busy_after - busy) / max(total_after - total, 1) * (os.cpu_count() or 1)


def reference_seconds(rounds: int = 3) -> float:
    """Seconds one core takes for a fixed pure-Python loop, the best of `rounds`: how fast this
    machine's cores are today, beside a benchmark's timings. `bench_plan.py --parts search`
    on the same 2-core machine, both runs quiet (load under 1.5, no other process busy): the
    1B rollout's fast verdict took 8.9 s and its exact one 25.7 s on 2026-11-26, 25 s and 74 s
    on 2026-11-29. The load cannot tell such days apart; this can (1.2 s on the second)."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        sum(i * i for i in range(10**7))
        best = min(best, time.perf_counter() - start)
    return best
