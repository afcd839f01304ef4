"""How much of this machine's memory one compile takes, measured: what shared.plan.compiler.
host_memory reads before it lets two compiles run side by side (it records the same growths as
a search goes; this measures them on purpose, for benchmarks/bench_host_memory.py).

For each request: a probe child (shared.plan.compiler.assigned) read twice, at its memory-usage
reports (buffer assignment) and once its whole compile has ended, each as its peak resident bytes
over what it held with its workload built; then the exact verdict compiled in this process, twice
(the request, then at twice its batch), each as the growth of this process's peak. Nothing is
read from or written to the plan cache. Run it alone: a compile beside it changes nothing here
but can run the machine out of memory.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import time
from pathlib import Path

from shared.errors import BadInput
from shared.plan import verdict
from shared.plan.compiler import assigned, host_memory
from shared.plan.workloads.request import Request

GIB = 2**30


def parse_request(spec: str) -> Request:
    """'workload model target batch seq' as a checked Request (BadInput in one line)."""
    fields = spec.split()
    if len(fields) != 5 or not all(n.isdigit() for n in fields[3:]):
        raise BadInput(f"--request {spec!r}: give 'workload model target batch seq'")
    workload, model, target, batch, seq = fields
    request = Request(workload, model, target, batch=int(batch), seq=int(seq))
    verdict.floor_verdict(request)  # an unknown workload, model or target: one line
    return request


def probe_child(request: Request) -> dict:
    """The child's growth at its reports and at the end of its whole compile, in GiB."""
    child = assigned._Child(request, verdict.floor_verdict(request), finish=True)
    try:
        while not child.done():
            time.sleep(0.2)
        at_report = host_memory.peak_resident_bytes(child.process.pid)
        reports_s = child.seconds
        child.process.wait()
        whole = json.loads((child.root / "peak.json").read_text())["peak_bytes"]
        start = child.shape["resident_bytes"]
        return {
            "child_at_reports_gib": (at_report - start) / GIB,
            "child_whole_compile_gib": (whole - start) / GIB,
            "child_reports_s": reports_s,
            "child_whole_s": time.perf_counter() - child.started,
            "executables_probed": len(child.shape["not_held"]),
        }
    finally:
        child.close()


def exact_growth(request: Request) -> dict:
    """This process's peak growth over one exact verdict compiled without the plan cache."""
    before = host_memory.restart_peak()
    started = time.perf_counter()
    point = verdict.plan_point(request, use_cache=False)
    return {
        "batch": request.batch,
        "growth_gib": (host_memory.peak_resident_bytes() - before) / GIB,
        "held_after_gib": host_memory.resident_bytes() / GIB,  # after give_back_freed
        "compile_s": time.perf_counter() - started,
        "fits": point["fits"],
    }


def measure(request: Request) -> dict:
    """One request's probe child and its two exact compiles in this process."""
    return {
        "request": " ".join(
            map(str, (request.workload, request.model, request.target, request.batch, request.seq))
        ),
        "available_before_gib": host_memory.available_bytes() / GIB,
        **probe_child(request),
        "exact_in_process": [
            exact_growth(request),
            exact_growth(dataclasses.replace(request, batch=2 * request.batch)),
        ],
    }


def measure_requests(specs: list[str]) -> list[dict]:
    """`measure` for each 'workload model target batch seq', with the plan cache pointed at a
    scratch folder throughout: a child's finished compile must not fill the cache."""
    cache = verdict.CACHE_DIR
    with tempfile.TemporaryDirectory() as scratch:
        verdict.CACHE_DIR = Path(scratch)
        try:
            requests = [parse_request(spec) for spec in specs]  # all checked before any compile
            return [measure(r) for r in requests]
        finally:
            verdict.CACHE_DIR = cache
