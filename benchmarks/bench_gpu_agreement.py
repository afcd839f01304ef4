"""Every committed GPU device measurement, compiled again without the GPU: deviceless bytes
against the on-device compile's bytes and the run's measured peak.

    XLA_PYTHON_CLIENT_MEM_FRACTION=0.95 python benchmarks/bench_gpu_agreement.py \\
        --out benchmarks/results/gpu_agreement.json

The device runs took 0.95 of the GPU (benchmarks/gpu_suite.sh), so the deviceless compiles must
too: XLA rematerializes towards what the allocator allows (shared.hardware.gpus), and this
script refuses another fraction. Sources: finetune_h100.json, finetune_h200.json (full and
LoRA fine-tunes, each peak in a fresh process with XLA's autotuner off), grpo_h100.json,
grpo_h200.json (notebook 07's recipe), train_h200.json beside plan_train_h200.json (the 130m
pretraining step, cuDNN attention), rollout_h200_autotune_off.json beside
plan_rollout64_h200.json and plan_rollout_h200.json (gemma3-1b rollouts). The device runs used
jax 0.11.2 with its CUDA 13 plugin; this compiles with the project's pinned jax and its CUDA 12
plugin: each row names both.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

from shared.errors import BadInput  # noqa: E402
from shared.hardware import gpus  # noqa: E402
from shared.plan.verdict import plan_point  # noqa: E402
from shared.plan.workloads.request import Request, request_of  # noqa: E402
from shared.report import results  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
FRACTION = 0.95  # what the device runs allowed jax (XLA_PYTHON_CLIENT_MEM_FRACTION)


def _load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def finetune_cases(name: str, target: str) -> list[dict]:
    """Each fine-tune point that ran: its request, its run's peak, the on-device compile's."""
    record = _load(name)
    cases = []
    for run in record["runs"]:
        for row in run["rows"]:
            if row.get("run_peak_bytes_per_device") is None:
                continue  # ran out of memory, as its plan said: no peak to compare
            request = Request(
                workload=row["workload"],
                model=record["model"],
                target=target,
                batch=row["batch"],
                seq=record["seq"],
                lora_rank=record["lora_rank"],
            )
            cases.append(
                case(
                    name,
                    request,
                    row["run_peak_bytes_per_device"],
                    row["predicted_bytes_per_device"],
                    record["versions"],
                )
            )
    return cases


def grpo_case(name: str) -> dict:
    record = _load(name)
    request = Request(**record["predicted"]["request"])
    peak = record["device"]["run_peak"]["peak_bytes_per_device"]
    return case(name, request, peak, record["predicted"]["bytes_per_device"], record["versions"])


def planned_case(name: str, plan_name: str, peak: int) -> dict:
    """A device run whose on-device verdict was committed whole (plan_*_h200.json)."""
    plan = _load(plan_name)
    request = dataclasses.replace(request_of(plan), target="h200-1")
    return case(name, request, peak, plan["bytes_per_device"], _load(name)["versions"])


def case(source, request, measured, device_compiled, device_versions) -> dict:
    return {
        "source": source,
        "request": request,
        "measured_peak_bytes": measured,
        "device_compiled_bytes": device_compiled,
        "device_versions": device_versions,
    }


def all_cases() -> list[dict]:
    train = {(p["batch"], p["attention"]): p for p in _load("train_h200.json")["points"]}
    rollout = {p["batch"]: p for p in _load("rollout_h200_autotune_off.json")["batch_sweep"]}
    return [
        *finetune_cases("finetune_h100.json", "h100-1"),
        *finetune_cases("finetune_h200.json", "h200-1"),
        grpo_case("grpo_h100.json"),
        grpo_case("grpo_h200.json"),
        planned_case(
            "train_h200.json", "plan_train_h200.json", train[64, "default"]["peak_bytes_per_device"]
        ),
        planned_case(
            "rollout_h200_autotune_off.json",
            "plan_rollout64_h200.json",
            rollout[64]["peak_bytes_per_device"],
        ),
        planned_case(
            "rollout_h200_autotune_off.json",
            "plan_rollout_h200.json",
            rollout[128]["peak_bytes_per_device"],
        ),
    ]


def compare(entry: dict, *, use_cache: bool) -> dict:
    """One device point beside its deviceless compile, or why none can be made (the 130m step's
    cuDNN attention needs the GPU to compile)."""
    request = entry.pop("request")
    try:
        verdict = plan_point(request, use_cache=use_cache)
    except BadInput as err:
        return {**entry, "request": dataclasses.asdict(request), "not_compiled": str(err)}
    deviceless = verdict["bytes_per_device"]
    measured, on_device = entry["measured_peak_bytes"], entry["device_compiled_bytes"]
    return {
        **entry,
        "request": dataclasses.asdict(request),
        "deviceless_bytes": deviceless,
        "hbm_bytes": verdict["hbm_bytes"],
        "fits": verdict["fits"],
        "deviceless_minus_measured": deviceless - measured,
        "deviceless_vs_measured_pct": 100 * (deviceless - measured) / measured,
        "device_compiled_vs_measured_pct": 100 * (on_device - measured) / measured,
        "deviceless_compile_s": verdict["compile_s"],
        "deviceless_versions": verdict["versions"],
    }


def table(rows: list[dict]) -> str:
    """docs/device_results.md's table: one row a device point, bytes in GB (10^9)."""
    lines = [
        "| run | workload, batch | measured peak | on-device compile | deviceless "
        "| deviceless − measured |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        r = row["request"]
        if "not_compiled" in row:
            lines.append(
                f"| {row['source']} ({r['target']}) | {r['workload']} {r['model']}, {r['batch']} | "
                f"{row['measured_peak_bytes'] / 1e9:.2f} GB | "
                f"{row['device_compiled_bytes'] / 1e9:.2f} GB | not compiled | "
                f"{row['not_compiled'].split(':')[0]} |"
            )
            continue
        lines.append(
            f"| {row['source']} ({r['target']}) | {r['workload']} {r['model']}, {r['batch']} | "
            f"{row['measured_peak_bytes'] / 1e9:.2f} GB | "
            f"{row['device_compiled_bytes'] / 1e9:.2f} GB | "
            f"{row['deviceless_bytes'] / 1e9:.2f} GB | "
            f"{row['deviceless_minus_measured'] / 1e6:+,.1f} MB "
            f"({row['deviceless_vs_measured_pct']:+.2f}%) |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS / "gpu_agreement.json")
    parser.add_argument("--only", help="compile only the sources whose name contains this")
    parser.add_argument("--no-cache", action="store_true", help="compile, do not read the cache")
    args = parser.parse_args(argv)
    if gpus.memory_fraction() != FRACTION:
        print(
            f"error: the device runs allowed jax {FRACTION} of the GPU: run with "
            f"{gpus.FRACTION_VARIABLE}={FRACTION}",
            file=sys.stderr,
        )
        return 2
    from tqdm.auto import tqdm

    cases = [c for c in all_cases() if not args.only or args.only in c["source"]]
    rows = []
    for entry in tqdm(cases, desc="deviceless"):
        rows.append(compare(entry, use_cache=not args.no_cache))
        results.write(  # after every point: a run stopped part-way keeps what it compiled
            args.out,
            {
                **results.header("benchmarks/bench_gpu_agreement.py", argv),
                "memory_fraction": FRACTION,
                "complete": len(rows) == len(cases),
                "rows": rows,
                "table": table(rows),
            },
        )
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
