"""How much of this machine's memory one compile takes: what shared.plan.compiler.host_memory reads
before it lets two compiles run side by side, measured by shared.plan.compiler.compile_footprint
(a probe child read at its memory-usage reports and at the end of its whole compile, then the
exact verdict compiled in this process at the request's batch and twice it). Nothing is read
from or written to the plan cache. Run it alone: a compile beside it changes nothing here but
can run the machine out of memory.

    python benchmarks/bench_host_memory.py --out benchmarks/results/plan_host_memory.json
"""

from __future__ import annotations

import argparse
import json
import os

from shared.errors import run_cli
from shared.plan.compiler.compile_footprint import measure_requests
from shared.report import results

DEFAULT = "lora-train gemma3-1b v5e-8 8 2048"  # workload model target batch seq


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
    report["requests"] = measure_requests(args.request or [DEFAULT])
    print(json.dumps(report["requests"], indent=1))
    results.write(args.out, report)
    return 0


if __name__ == "__main__":
    run_cli(main)
