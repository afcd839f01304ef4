"""How much of this machine's memory one compile takes: what shared.plan.compiler.host_memory reads
before it lets two compiles run side by side.

For each request: a probe child (shared.plan.compiler.assigned) read twice, at its memory-usage
reports (buffer assignment) and once its whole compile has ended, each as its peak resident bytes
over what it held with its workload built; then the exact verdict compiled in this process, twice
(the request, then at twice its batch), each as the growth of this process's peak. Nothing is
read from or written to the plan cache. Run it alone: a compile beside it changes nothing here
but can run the machine out of memory.

    python benchmarks/bench_host_memory.py --out benchmarks/results/plan_host_memory.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path

from shared.errors import BadInput, run_cli
from shared.plan import verdict
from shared.plan.compiler import assigned, host_memory
from shared.plan.workloads.request import Request
from shared.report import results

GIB = 2**30
DEFAULT = "lora-train gemma3-1b v5e-8 8 2048"  # workload model target batch seq


def _request(spec: str) -> Request:
    """'workload model target batch seq' as a checked Request (BadInput in one line)."""
    fields = spec.split()
    if len(fields) != 5 or not all(n.isdigit() for n in fields[3:]):
        raise BadInput(f"--request {spec!r}: give 'workload model target batch seq'")
    workload, model, target, batch, seq = fields
    request = Request(workload, model, target, batch=int(batch), seq=int(seq))
    verdict.floor_verdict(request)  # an unknown workload, model or target: one line
    return request


def _probe_child(request: Request) -> dict:
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


def _exact_growth(request: Request) -> dict:
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
    return {
        "request": " ".join(
            map(str, (request.workload, request.model, request.target, request.batch, request.seq))
        ),
        "available_before_gib": host_memory.available_bytes() / GIB,
        **_probe_child(request),
        "exact_in_process": [
            _exact_growth(request),
            _exact_growth(dataclasses.replace(request, batch=2 * request.batch)),
        ],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--request",
        action="append",
        help=f"'workload model target batch seq' (repeatable; default '{DEFAULT}')",
    )
    p.add_argument("--out", default="benchmarks/results/plan_host_memory.json")
    args = p.parse_args(argv)
    report = {**results.header("benchmarks/bench_host_memory.py", argv)}
    report["load_average_before"] = list(os.getloadavg())
    cache = verdict.CACHE_DIR
    with tempfile.TemporaryDirectory() as scratch:
        verdict.CACHE_DIR = Path(scratch)  # a child's finished compile must not fill the cache
        try:
            requests = [_request(spec) for spec in args.request or [DEFAULT]]
            report["requests"] = [measure(r) for r in requests]
        finally:
            verdict.CACHE_DIR = cache
    print(json.dumps(report["requests"], indent=1))
    results.write(args.out, report)
    return 0


if __name__ == "__main__":
    run_cli(main)
