"""The points a measured fine-tune runs (benchmarks/bench_finetune.py: the `sft` and `lora-train`
workloads' train_step on the attached device, beside the plan's verdict): WORKLOAD:BATCH as a
reader writes them, and each point's peak from its own child, kept as each child finishes.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from shared.errors import BadInput, choose
from shared.report import results

WORKLOADS = ("sft", "lora-train")


def parse_points(text: str) -> list[tuple[str, int]]:
    """'sft:4,lora-train:8' -> [('sft', 4), ('lora-train', 8)]; bad input says so."""
    points = []
    for item in text.split(","):
        workload, _, batch = item.partition(":")
        choose("workload", workload, WORKLOADS)
        if not batch.isdigit() or int(batch) < 1:
            raise BadInput(f"point {item!r}: write WORKLOAD:BATCH with a positive batch")
        points.append((workload, int(batch)))
    return points


def run_peaks(
    out: Path, head: dict, points: list[tuple[str, int]], peak_of: Callable[[str, int], dict]
) -> dict:
    """Every point's peak (`peak_of(workload, batch)`: one child each, with the GPU autotuner
    off, before the caller touches the device). Each is printed and written to `out` under the
    results file's `head` as it comes (`complete` false, no device fields yet): these children
    take minutes, and a run stopped at its time limit keeps what they measured."""
    peaks = {}
    for workload, batch in points:
        start = time.perf_counter()
        peaks[workload, batch] = peak_of(workload, batch)
        took = time.perf_counter() - start
        print(
            f"run peak {workload}:{batch} ({took:.0f} s): {peaks[workload, batch]}",
            file=sys.stderr,
            flush=True,
        )
        rows = [{"workload": w, "batch": b, **peak} for (w, b), peak in peaks.items()]
        results.write(out, {**head, "complete": False, "rows": rows})
    return peaks
