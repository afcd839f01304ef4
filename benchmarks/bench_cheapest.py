"""Which slice to rent, recorded: notebook 08's jobs through `shared.plan.slices.cheapest`, timed.

Each job's whole search (exclusions by arithmetic, bounds, exact compiles, the answer) goes into
one results file with its wall time, the load average before it started (a compile timing is
the engine's only on a quiet machine) and an empty plan cache when --empty-cache is given, as
issue 23's "under 15 minutes on 2 quiet cores with an empty plan cache" asks:

    python benchmarks/bench_cheapest.py --jobs 2 --empty-cache \\
        --out benchmarks/results/08_which_slice.json --figure docs/figures/08_which_slice.png

--jobs picks notebook 08's plan-mode jobs by number (1: Gemma 4 31B LoRA, 2: gemma3-27b LoRA
at 4,096, 3: GRPO gemma3-4b, 4: the 130M pretraining run); a file already holding other jobs
keeps them; --slices narrows the search (notebook 08's GRPO job on Kaggle's v5e-8 beside the
v6e-4 its run chose: --jobs 3 --slices v5e-8,v6e-4 --minutes 50).
"""

import argparse
import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

from shared.errors import BadInput, run_cli  # noqa: E402
from shared.hardware import rent  # noqa: E402
from shared.plan import verdict  # noqa: E402
from shared.plan.slices import (
    cheapest,  # noqa: E402
    view,  # noqa: E402
)
from shared.plan.slices.jobs import WhichSlice  # noqa: E402
from shared.report import results  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--jobs", default="2", help="notebook 08's plan-mode jobs, e.g. 1,2")
    p.add_argument("--price", default="on-demand")
    p.add_argument("--empty-cache", action="store_true", help="compile into a fresh plan cache")
    p.add_argument(
        "--minutes",
        type=float,
        help="each search's compile budget (default: the job's own, else "
        f"{cheapest.SEARCH_MINUTES:g})",
    )
    p.add_argument(
        "--slices",
        help="the slices to look at, e.g. v5e-8,v6e-4 (default: every slice Cloud TPU rents)",
    )
    p.add_argument("--out", type=Path, required=True)
    p.add_argument(
        "--figure",
        type=Path,
        help="also draw every job in --out, hours against dollars (--jobs none: only that)",
    )
    a = p.parse_args(argv)
    setting = dataclasses.replace(WhichSlice.field(), minutes=a.minutes)
    numbers = [int(n) for n in a.jobs.split(",") if n.strip().isdigit()]
    if a.jobs != "none" and (not numbers or any(not 1 <= n <= len(setting.jobs) for n in numbers)):
        raise BadInput(f"--jobs takes numbers 1 to {len(setting.jobs)} (e.g. 2 or 1,2) or none")
    slices = tuple(a.slices.split(",")) if a.slices else rent.ALL_SLICES
    earlier = json.loads(a.out.read_text()) if a.out.exists() else {}
    report = {**results.header("benchmarks/bench_cheapest.py", argv), "jobs": {}}
    report["jobs"] = earlier.get("jobs", {})
    for number in numbers:
        job = setting.jobs[number - 1]
        minutes = setting.minutes_for(job)
        load = os.getloadavg()
        with tempfile.TemporaryDirectory() as empty:
            if a.empty_cache:
                verdict.CACHE_DIR = Path(empty)
            started = time.perf_counter()
            result = cheapest.cheapest(
                job.request(), job.amount, kind=a.price, minutes=minutes, slices=slices
            )
            wall = time.perf_counter() - started
        print(view.table(result), "\n")
        print(view.describe(result))
        print(f"{job.title}: {wall:.0f} s wall, load before {load[0]:.2f}", flush=True)
        report["jobs"][job.title] = {
            "wall_s": wall,
            "load_average_before": load,
            "empty_cache": a.empty_cache,
            "minutes": minutes,
            "summary": view.summary_row(result),
            "result": result,
        }
        results.write(a.out, report)
    if a.figure:
        draw(report["jobs"], a.figure)
    return 0


def draw(jobs: dict, path: Path) -> None:
    """One panel a job, as notebook 08 draws them (shared.plan.slices.view.plot)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not jobs:
        raise BadInput("no job recorded to draw: run some with --jobs first")
    cols = min(len(jobs), 2)
    rows = -(-len(jobs) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 4.5 * rows), squeeze=False)
    for ax, job in zip(axes.flat, jobs.values(), strict=False):
        view.plot(job["result"], ax)
    for ax in axes.flat[len(jobs) :]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


if __name__ == "__main__":
    run_cli(main)
