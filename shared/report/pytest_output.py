"""What a pytest run printed, as numbers: its counts and seconds (the last summary line) and its
slowest tests (the `--durations` table). benchmarks/bench_suite.py times `make test` with them.
"""

from __future__ import annotations

import re

# pytest's last line, e.g. "673 passed, 1 warning in 542.67s (0:09:02)"
SUMMARY = re.compile(r"^=*\s*(?P<counts>\d+ \w+.*) in (?P<seconds>[\d.]+)s")
COUNT = re.compile(r"(\d+) (\w+)")
DURATION = re.compile(r"^(?P<seconds>[\d.]+)s (?P<phase>call|setup|teardown)\s+(?P<test>\S+)")


def summary(output: str) -> dict:
    """pytest's counts ({"passed": 673, ...}) and its own seconds, from the run's last summary
    line; empty where the run printed none (it crashed before the end)."""
    for line in reversed(output.splitlines()):
        if match := SUMMARY.match(line.strip()):
            counts = {word: int(n) for n, word in COUNT.findall(match["counts"])}
            return {"counts": counts, "pytest_s": float(match["seconds"])}
    return {}


def slowest(output: str) -> list[dict]:
    """The `--durations` table: each slow test's phase and seconds, slowest first."""
    rows = (DURATION.match(line.strip()) for line in output.splitlines())
    return [
        {"test": m["test"], "phase": m["phase"], "seconds": float(m["seconds"])} for m in rows if m
    ]
