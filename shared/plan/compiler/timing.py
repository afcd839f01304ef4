"""Where a verdict's seconds go: building the abstract workload, lowering each executable and
compiling it, one executable at a time (plan_point compiles them side by side, which hides
each one's cost). benchmarks/bench_plan.py records these, fast and exact, at full depth and
cut to a few decoder layers (`Request.layers`), so a change to the search is chosen from
measurements: the compile, not the tracing, is the cost, and a cut model's bytes do not grow
into the full model's in a straight line (the compiler fits a deep program differently)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax

from shared.hardware import parse_target
from shared.plan.compiler.compiled import compile_with_layout, report_hbm_bytes
from shared.plan.compiler.cut_depth import carry
from shared.plan.compiler.executable import lower
from shared.plan.compiler.target import target_devices
from shared.plan.mesh.choice import mesh_for
from shared.plan.verdict import compile_options
from shared.plan.workloads import build_workload
from shared.plan.workloads.request import Request
from shared.plan.workloads.request_checks import check_request


def time_executables(request: Request, options: dict | None = None) -> dict:
    """Build, lower and compile the request's executables one after another, nothing cached:
    seconds for each step and each executable's bytes (arguments + outputs + temps − aliased).
    `options`: the compiler's, where a benchmark compares some (default: plan_point's)."""
    check_request(request)
    devices = target_devices(parse_target(request.target))
    if options is None:
        options = compile_options(request, devices[0].platform) or {}
    mesh, _ = mesh_for(request, devices)  # plan_point's
    start = time.perf_counter()
    workload = build_workload(request, mesh)
    row = {
        "layers": request.layers,
        "fast": request.fast,
        "options": options,
        "batch": request.batch,
        "build_s": time.perf_counter() - start,
        "executables": {},
    }
    layouts = {}  # the compiled output layouts a later executable takes (decode: prefill's)
    with jax.set_mesh(mesh):
        for exe in workload.executables:
            if exe.laid_out_by and exe.laid_out_by not in layouts:
                continue  # what it takes was refused: nothing to lower it with
            start = time.perf_counter()
            lowered = lower(exe, layouts)
            lower_s = time.perf_counter() - start
            started_at = time.time()  # the wall clock, which dump files' times compare with
            summary, layout = compile_with_layout(lowered, options or None)
            # a refused compile has no layout: what takes its outputs cannot lower
            if layout is not None:
                layouts[exe.label] = layout
            row["executables"][exe.label] = {
                "lower_s": lower_s,
                "compile_started_at": started_at,
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
    lines = {}
    for label, at_full in full["executables"].items():
        a, b = (r["executables"][label]["total_bytes"] for r in rows)
        straight = carry(a, b, depths, full_layers)
        lines[label] = {
            "bytes_at_depths": [a, b],
            "straight_line_at_full_depth": straight,
            "compiled_at_full_depth": at_full["total_bytes"],
            "line_over_compiled": straight / at_full["total_bytes"],
        }
    return {"depths": list(depths), "full_layers": full_layers, "runs": [*rows, full], **lines}


# The files XLA writes with --xla_dump_to as a compile passes each stage, in order (suffixes
# of module_NNNN.jit_NAME.*): their times split one compile's seconds into stages; the time
# before the first and after the last is `before_s` and `after_s`.
STAGE_FILES = (
    (
        "hlo_passes_s",
        "before_optimizations.txt",
        "after_optimizations_before_buffer_assignment.txt",
    ),
    (
        "buffer_assignment_s",
        "after_optimizations_before_buffer_assignment.txt",
        "after_optimizations-memory-usage-report.txt",
    ),
    ("codegen_s", "after_optimizations-memory-usage-report.txt", "after_codegen.txt"),
)
_CHILD = (
    "import json, sys; from shared.plan.compiler import timing; "
    "from shared.plan.workloads.request import Request; "
    "print(json.dumps(timing.time_executables(Request(**json.loads(sys.argv[1])))))"
)


def compiler_stages(request: Request) -> dict:
    """Where one exact compile's seconds go: time_executables run in a child process that has
    XLA dump each module as it passes a stage, and the dump files' times read as stage
    boundaries: HLO passes (partitioning, fusion, scheduling), buffer assignment (where the
    bytes a verdict reads are decided) and code generation, for each executable. Writing the
    dumps costs time of its own, counted in the stages; the compile's seconds come from
    time_executables beside them. Also each module's "Total bytes" from XLA's memory-usage
    report, beside the executable's compiled bytes."""
    with tempfile.TemporaryDirectory() as dump:
        env = {**os.environ, "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to={dump}"}
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, json.dumps(dataclasses.asdict(request))],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        row = json.loads(done.stdout.strip().splitlines()[-1])
        modules: dict[str, dict] = {}
        for path in Path(dump).iterdir():
            match = re.match(r"module_\d+\.jit_(\w+?)\.[^.]+\.(.+)$", path.name)
            if match:
                modules.setdefault(match[1], {})[match[2]] = path
        for name, files in modules.items():
            label = next((lbl for lbl in row["executables"] if name in lbl or lbl in name), name)
            stages = {
                key: files[end].stat().st_mtime - files[start].stat().st_mtime
                for key, start, end in STAGE_FILES
                if start in files and end in files
            }
            compiled = row["executables"].get(label, {})
            first, last = STAGE_FILES[0][1], STAGE_FILES[-1][2]
            if "compile_started_at" in compiled and first in files and last in files:
                began = compiled["compile_started_at"]
                stages["before_s"] = files[first].stat().st_mtime - began
                stages["after_s"] = began + compiled["compile_s"] - files[last].stat().st_mtime
            report = files.get("after_optimizations-memory-usage-report.txt")
            stages["memory_report_total_bytes"] = report and report_hbm_bytes(report.read_text())
            row["executables"].setdefault(label, {})["stages"] = {"module": name, **stages}
    return row
