"""Plan-mode benchmark: compile time and the predicted largest gemma3-1b rollout batch, as JSON.

For each target: one exact verdict and one fast verdict at a fixed batch (compile seconds and
bytes per device of each), then the largest batch that fits (fast search, exact
confirmation) with every probe. Runs on any machine with libtpu, no TPU needed. Compile times
depend on the host: the JSON records its CPU count and load average.

    python benchmarks/bench_plan.py --targets v5e-1,v5e-8 --out benchmarks/results/plan_cpu.json
"""

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shared import plan  # noqa: E402
from shared.errors import run_cli  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="gemma3-1b")
    p.add_argument("--targets", default="v5e-1,v5e-8")
    p.add_argument("--batch", type=int, default=64, help="batch of the single verdicts")
    p.add_argument("--prompt-len", type=int, default=256)
    p.add_argument("--steps", type=int, default=1024)
    p.add_argument("--cache-size", type=int, default=1312)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    report = {"command": " ".join(sys.argv), "host_cpus": os.cpu_count(),
              "python": platform.python_version(), "targets": {}}
    for target in args.targets.split(","):
        request = plan.Request("rollout", args.model, target, batch=args.batch,
                               prompt_len=args.prompt_len, steps=args.steps,
                               cache_size=args.cache_size)
        entry = {}
        for fast in (False, True):
            start = time.perf_counter()
            point = plan.plan_point(dataclasses.replace(request, fast=fast),
                                    use_cache=False)
            entry["fast" if fast else "exact"] = {
                "wall_s": time.perf_counter() - start, "compile_s": point["compile_s"],
                "bytes_per_device": point["bytes_per_device"], "fits": point["fits"]}
        start = time.perf_counter()
        search = plan.max_batch(request, progress=False)
        entry["max_batch"] = search["max_batch"]
        entry["first_not_fitting"] = search["first_not_fitting"]
        entry["search_wall_s"] = time.perf_counter() - start
        entry["probes"] = [{"batch": q["batch"], "fast": q["fast"], "fits": q["fits"],
                            "bytes_per_device": q["bytes_per_device"],
                            "compile_s": q["compile_s"], "cached": q["cached"]}
                           for q in search["fast_probes"] + search["probes"]]
        entry["load_average"] = os.getloadavg()
        report["targets"][target] = entry
        print(f"{target}: exact verdict {entry['exact']['wall_s']:.0f} s, fast "
              f"{entry['fast']['wall_s']:.0f} s; largest batch {entry['max_batch']} "
              f"({len(entry['probes'])} compiles, {entry['search_wall_s']:.0f} s)", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    run_cli(main)
