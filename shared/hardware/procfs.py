"""What Linux's /proc says of one process of this machine: the fields of /proc/PID/stat.

Why a module of its own: the plan's host-memory guard (shared.plan.compiler.host_memory) names a
process by its pid and start time, and the benchmarks' CPU timeline (shared.report.cpu_timeline)
reads each process's parent and CPU seconds; both read the same line, whose command name may hold
spaces and parentheses. Nothing here is part of a verdict."""

from __future__ import annotations

from pathlib import Path

PROC = Path("/proc")


def stat_fields(pid: int | str) -> list[str] | None:
    """/proc/PID/stat's fields after the command's name, from its state (the 3rd field, so
    field N is at index N - 3), or None where the process has ended or there is no /proc."""
    try:
        return (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
