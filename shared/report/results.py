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


QUIET_LOAD = 1.5  # on 2 cores: above this, another job shares the CPU a timing measures
QUIET_BUSY = 0.3  # cores other processes keep busy just before the start (the load lags)


def start_conditions() -> dict:
    """What a timing benchmark records before it starts: the load average, the cores other
    processes keep busy, this machine's speed today (`reference_seconds`) and whether the
    machine was quiet (load and busy cores under QUIET_LOAD and QUIET_BUSY). A timing from a
    run that was not quiet says more about the other jobs than about what it measured."""
    load = os.getloadavg()
    busy = busy_cores()
    return {
        "start_load": load,
        "start_busy_cores": busy,
        "reference_s": reference_seconds(),
        "quiet": load[0] <= QUIET_LOAD and (busy or 0.0) <= QUIET_BUSY,
    }


def warn_unless_quiet(start: dict) -> None:
    """One line on stdout where `start` (start_conditions) was not quiet."""
    if not start["quiet"]:
        print(
            f"warning: load {start['start_load'][0]:.1f} (at most {QUIET_LOAD}), "
            f"{start['start_busy_cores'] or 0.0:.1f} cores busy (at most {QUIET_BUSY}) at the "
            "start: these timings say more about the other jobs than about what they measure",
            flush=True,
        )


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
