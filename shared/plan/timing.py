"""Where a verdict's seconds go: building the abstract workload, lowering each executable and
compiling it, one executable at a time (plan_point compiles them side by side, which hides
each one's cost). benchmarks/bench_plan.py records these, fast and exact, at full depth and
cut to a few decoder layers (`Request.layers`), so a change to the search is chosen from
measurements: the compile, not the tracing, is the cost, and a cut model's bytes do not grow
into the full model's in a straight line (the compiler fits a deep program differently)."""

from __future__ import annotations

import dataclasses
import os
import time

import jax

from shared.hardware import parse_target
from shared.plan.compiled import FAST_COMPILE, compile_lowered
from shared.plan.mesh import mesh_for
from shared.plan.target import target_devices
from shared.plan.verdict import Request, check_request
from shared.plan.workloads import build_workload


def time_executables(request: Request) -> dict:
    """Build, lower and compile the request's executables one after another, nothing cached:
    seconds for each step and each executable's bytes (arguments + outputs + temps − aliased)."""
    check_request(request)
    mesh, _ = mesh_for(request, target_devices(parse_target(request.target)))  # plan_point's
    start = time.perf_counter()
    workload = build_workload(request, mesh)
    row = {
        "layers": request.layers,
        "fast": request.fast,
        "batch": request.batch,
        "build_s": time.perf_counter() - start,
        "executables": {},
    }
    with jax.set_mesh(mesh):
        for exe in workload.executables:
            start = time.perf_counter()
            lowered = exe.fn.lower(*exe.args, **exe.kwargs)
            lower_s = time.perf_counter() - start
            summary = compile_lowered(lowered, FAST_COMPILE if request.fast else None)
            row["executables"][exe.label] = {
                "lower_s": lower_s,
                "compile_s": summary["compile_s"],
                "total_bytes": summary["total_bytes"],
                "temp_bytes": summary["temp_bytes"],
                "refused": bool(summary["refused"]),
            }
    row["load_average"] = os.getloadavg()
    return row


def depth_line(request: Request, depths: tuple[int, int], full_layers: int) -> dict:
    """Each executable's bytes at two cut depths, the straight line through them carried to
    the full depth, and the full model's compiled bytes beside it (same batch, same effort)."""
    rows = [time_executables(dataclasses.replace(request, layers=d)) for d in depths]
    full = time_executables(dataclasses.replace(request, layers=None))
    (low, high), lines = depths, {}
    for label, at_full in full["executables"].items():
        a, b = (r["executables"][label]["total_bytes"] for r in rows)
        straight = a + (full_layers - low) * (b - a) / (high - low)
        lines[label] = {
            "bytes_at_depths": [a, b],
            "straight_line_at_full_depth": straight,
            "compiled_at_full_depth": at_full["total_bytes"],
            "line_over_compiled": straight / at_full["total_bytes"],
        }
    return {"depths": list(depths), "full_layers": full_layers, "runs": [*rows, full], **lines}
