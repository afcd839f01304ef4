"""How long `make test` takes on this machine, as JSON: the README's test command, run as is.

The goal is a suite under 10 minutes on a 2-core machine. The same code takes 7 to 18 minutes
on this project's 2-core machines from one day to the next, so the file records the machine's
speed (`reference_s`, shared.report.results) and load before the run, and the speed again
after, beside the wall time, the counts pytest reports and its slowest tests (read by
shared.report.pytest_output; `PYTEST_ADDOPTS=--durations=N`: the command is otherwise the
Makefile's, unchanged). Run it alone, from a checkout whose `make setup` is done (setup is not
timed):

    python benchmarks/bench_suite.py --out benchmarks/results/suite_2core.json
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from shared.paths import ROOT
from shared.report import results
from shared.report.pytest_output import slowest, summary

GOAL_S = 600  # the goal for `make test` on 2 cores


def run_suite(durations: int) -> dict:
    """`make test` in this checkout, its output passed through as it comes: exit code, wall
    seconds, pytest's counts and the slowest tests."""
    env = {**os.environ, "PYTEST_ADDOPTS": f"--durations={durations}"}
    start = time.perf_counter()
    lines = []
    with subprocess.Popen(
        ["make", "test"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as proc:
        for line in proc.stdout:
            sys.stdout.write(line)
            lines.append(line)
    wall = time.perf_counter() - start
    output = "".join(lines)
    return {
        "returncode": proc.returncode,
        "wall_s": wall,
        "under_goal": proc.returncode == 0 and wall < GOAL_S,
        **summary(output),
        "slowest": slowest(output),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--durations", type=int, default=25, help="how many slowest tests to keep")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    report = {**results.header("benchmarks/bench_suite.py", argv), "goal_s": GOAL_S}
    report.update(results.start_conditions())
    results.warn_unless_quiet(report)
    report["suite"] = run_suite(args.durations)
    report["reference_s_after"] = results.reference_seconds()
    results.write(args.out, report)
    suite = report["suite"]
    print(
        f"make test: exit {suite['returncode']}, {suite['wall_s']:.0f} s "
        f"(goal {GOAL_S} s), reference {report['reference_s']:.2f} s -> {args.out}"
    )
    return suite["returncode"]


if __name__ == "__main__":
    sys.exit(main())
