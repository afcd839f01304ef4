"""Plan-mode benchmark: compiles and wall time per verdict and per search, as JSON.

For each target: the largest gemma3-1b rollout batch (the search's compiles, fast and exact, and
its wall time from an empty cache), and one exact and one fast verdict at a fixed batch. Then
big-model LoRA verdicts (fast compiles): gemma4-31b on a v5p-8, rank 16, sequence 2048, with and
without remat, at a few batches. Runs on any machine with libtpu, no TPU needed; compile times
depend on the host, so the JSON records its CPU count and load.

    python benchmarks/bench_plan.py --out benchmarks/results/plan_cpu.json
"""

import argparse
import dataclasses
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

from shared import plan  # noqa: E402
from shared.errors import run_cli  # noqa: E402
from shared.plan import verdict  # noqa: E402
from shared.plan.search import probe_rows  # noqa: E402
from shared.report import results  # noqa: E402


def _timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def _verdict_row(point: dict, wall_s: float) -> dict:
    return {
        "batch": point["batch"],
        "fast": point["fast"],
        "remat": point["remat"],
        "fits": point["fits"],
        "bytes_per_device": point["bytes_per_device"],
        "resident_bytes": point["resident_bytes"],
        "worst_transient_bytes": point["transient_bytes"][point["worst"]],
        "worst": point["worst"],
        "hbm_bytes": point["hbm_bytes"],
        "refused": point["refused"],
        "compile_s": point["compile_s"],
        "wall_s": wall_s,
    }


def rollout_target(target: str, a) -> dict:
    request = plan.Request(
        "rollout",
        a.model,
        target,
        batch=a.batch,
        prompt_len=a.prompt_len,
        steps=a.steps,
        cache_size=a.cache_size,
    )
    search, search_s = _timed(plan.max_batch, request, progress=False)
    entry = {
        "max_batch": search["max_batch"],
        "first_not_fitting": search["first_not_fitting"],
        "compiles": search["compiles"],
        "search_wall_s": search_s,
        "summary": plan.describe(search),
        "probes": probe_rows(search),
    }
    for fast in (False, True):  # one verdict each at a fixed batch, nothing cached
        point, wall = _timed(
            plan.plan_point, dataclasses.replace(request, fast=fast), use_cache=False
        )
        entry["fast_verdict" if fast else "exact_verdict"] = _verdict_row(point, wall)
    return entry


def big_lora(a) -> list[dict]:
    rows = []
    for remat in ("none", "block"):
        for batch in a.lora_batches:
            request = plan.Request(
                "lora-train",
                a.lora_model,
                a.lora_target,
                batch=batch,
                seq=a.lora_seq,
                lora_rank=16,
                remat=remat,
                fast=True,
            )
            point, wall = _timed(plan.plan_point, request, use_cache=False)
            rows.append(_verdict_row(point, wall))
            print(
                f"lora-train {a.lora_model} batch {batch} remat {remat} on {a.lora_target}: "
                f"{'fits' if point['fits'] else 'does not fit'} "
                f"({point['bytes_per_device'] / 2**30:.1f} GiB), {wall:.0f} s",
                flush=True,
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", default="gemma3-1b")
    p.add_argument("--targets", default="v5e-1,v5e-8")
    p.add_argument("--batch", type=int, default=64, help="batch of the single verdicts")
    p.add_argument("--prompt-len", type=int, default=256)
    p.add_argument("--steps", type=int, default=1024)
    p.add_argument("--cache-size", type=int, default=1312)
    p.add_argument("--lora-model", default="gemma4-31b")
    p.add_argument("--lora-target", default="v5p-8")
    p.add_argument("--lora-seq", type=int, default=2048)
    p.add_argument("--lora-batches", default="4,8", help="comma-separated; empty: skip")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    args.lora_batches = [int(b) for b in args.lora_batches.split(",") if b]
    report = {
        **results.header("benchmarks/bench_plan.py", argv),
        "rollout": {},
        "big_lora": [],
    }
    with tempfile.TemporaryDirectory() as empty:  # every number from an empty cache
        verdict.CACHE_DIR = Path(empty)
        for target in filter(None, args.targets.split(",")):
            entry = report["rollout"][target] = rollout_target(target, args)
            entry["load_average"] = os.getloadavg()  # compile times depend on what else runs
            print(
                f"{target}: {entry['summary']}; {entry['compiles']} compiles, "
                f"{entry['search_wall_s']:.0f} s; one exact verdict "
                f"{entry['exact_verdict']['wall_s']:.0f} s, fast "
                f"{entry['fast_verdict']['wall_s']:.0f} s",
                flush=True,
            )
            results.write(args.out, report)  # each finished part is kept, whatever happens next
        if args.lora_batches:
            report["big_lora"] = big_lora(args)
            results.write(args.out, report)
    return 0


if __name__ == "__main__":
    run_cli(main)
