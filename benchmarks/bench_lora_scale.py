"""LoRA fine-tuning at scale, planned: which batch and sequence fit, with and without remat.

The published setting (arXiv:2605.25645, "Fine-Tuning and Serving Gemma 4 31B on Google Cloud
TPU"): LoRA on gemma4-31b on a TPU v5p-8, where it needed gradient checkpointing. The real TPU
compiler (libtpu, deviceless) answers here for the `lora-train` workload (the jitted step device
mode runs: AdamW on the adapters, chunked loss), LoRA rank 16, per (sequence, remat policy):

1. fast verdicts (shared.plan.FAST_COMPILE, approximate bytes) at two batches draw a line;
   where it crosses the HBM the compiler allows is the candidate largest batch, a multiple of
   the data-parallel size (4 on a v5p-8: batch 4 is one sequence per chip);
2. for the settings in --exact: exact verdicts (the compile device mode runs) from that
   candidate until a batch that fits and the next multiple that does not sit side by side
   (the line through the newest exact point with the fast slope picks the next batch);
3. the frontier over remat x micro-batches x loss at one setting (shared.plan.frontier), and
   the setting to use there;
4. hours and dollars of a fine-tune of --tokens tokens at that setting (shared.plan.slices.budget).
Also the local fact notebook 02 re-checks on CPU: qwix's LoRA clone shares the base weights.

Verdicts are cached in .cache/plan (keyed by request, versions and the source of shared/), so an
interrupted run resumes; each row keeps the compile seconds of the compile that produced it.
One gemma4-31b compile took 4-12 minutes on the 2-core machine (shared with other jobs).

    python benchmarks/bench_lora_scale.py --seqs 2048 --remats none,block --most-exact 3 \\
        --exact 2048:none,2048:block --frontier-at "" \\
        --out benchmarks/results/02_lora_scale.json
"""

import argparse
import dataclasses
import math
import os
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

from shared import lora, models, plan  # noqa: E402
from shared.errors import run_cli  # noqa: E402
from shared.plan import frontier  # noqa: E402
from shared.plan.mesh.steps import unit_for  # noqa: E402
from shared.plan.slices import budget  # noqa: E402
from shared.report import results  # noqa: E402

KEEP = (
    "workload",
    "model",
    "target",
    "batch",
    "seq",
    "lora_rank",
    "remat",
    "microbatches",
    "loss",
    "fast",
    "fits",
    "bytes_per_device",
    "resident_bytes",
    "resident",
    "hbm_bytes",
    "margin_bytes",
    "refused",
    "flops_per_device",
    "roofline_lower_bound_s",
    "compile_s",
    "cached",
)


def slim(point: dict) -> dict:
    """The verdict's fields the notebook and shared.plan.frontier's plot and describe read."""
    return {key: point[key] for key in KEEP} | {"refused": bool(point["refused"])}


def line(points: list[dict]) -> tuple[dict, float]:
    """(the verdict the line goes through, bytes per unit of batch) for a setting: through its
    two largest fast verdicts, or through one and the resident bytes at batch 0 (weights,
    adapters, optimizer state: exact), which over-estimates the slope a little."""
    a, b = ([{"batch": 0, "bytes_per_device": points[0]["resident_bytes"]}] + points)[-2:]
    return b, (b["bytes_per_device"] - a["bytes_per_device"]) / (b["batch"] - a["batch"])


def crossing(at: dict, slope: float, unit: int) -> int:
    """The largest multiple of `unit` under the HBM limit on the line through `at`."""
    batch = at["batch"] + (at["hbm_bytes"] - at["bytes_per_device"]) / slope
    return max(0, int(batch // unit * unit))


def confirm(request: plan.Request, candidate: int, slope: float, unit: int, most: int) -> dict:
    """Exact verdicts from `candidate` until fit and no-fit are one unit apart (or `most`
    compiles). A batch the line through an exact verdict puts 25% over the HBM is not compiled:
    no scheduling difference closes that gap, so it counts as not fitting (`fail_by_line`)."""
    exact, batch, fail_by_line = {}, max(unit, candidate), None
    for _ in range(most):
        point = exact[batch] = plan.plan_point(dataclasses.replace(request, batch=batch))
        fit = max((b for b, p in exact.items() if p["fits"]), default=0)
        fail = min((b for b, p in exact.items() if not p["fits"]), default=None)
        if fail is not None and fail - fit <= unit:
            break
        if point["fits"] and point["bytes_per_device"] + slope * unit > 1.25 * point["hbm_bytes"]:
            fail_by_line = fit + unit
            break
        batch = min(max(crossing(point, slope, unit), fit + unit), (fail or math.inf) - unit)
        if batch in exact:  # the line lands on a known batch: step one unit instead
            batch = fit + unit if point["fits"] else fail - unit
    return {
        "largest_batch": fit,
        "first_not_fitting": fail or fail_by_line,
        "fail_by_line": fail_by_line is not None,
        "converged": (fail or fail_by_line or math.inf) - fit <= unit,
        "exact": [slim(p) for p in exact.values()],
    }


def scale_table(a) -> tuple[list[dict], list[dict]]:
    """Fast verdicts for every (sequence, remat), the line's largest batch, and the exact
    boundary for the settings in --exact; returns (all fast rows, one row per setting)."""
    grid, boundaries = [], []
    for seq in a.seqs:
        for remat in a.remats:
            request = plan.Request(
                "lora-train", a.model, a.target, seq=seq, lora_rank=a.rank, remat=remat
            )
            unit = unit_for(request, None)
            batches = sorted(set(a.batches) | a.extra_fast.get(f"{seq}:{remat}", set()))
            fast = [
                slim(plan.plan_point(dataclasses.replace(request, batch=b, fast=True)))
                for b in batches
            ]
            grid += fast
            at, slope = line(fast)
            row = {
                "seq": seq,
                "remat": remat,
                "unit": unit,
                "fast_line_batch": crossing(at, slope, unit),
            }
            if f"{seq}:{remat}" in a.exact:
                row |= confirm(request, row["fast_line_batch"], slope, unit, a.most_exact)
            boundaries.append(row)
            print(
                f"seq {seq} remat {remat}: line {row['fast_line_batch']}, exact "
                f"{row.get('largest_batch', 'not run')}",
                flush=True,
            )
    return grid, boundaries


def local_sharing(name: str, rank: int) -> dict:
    """On this machine's CPU: bytes of the base, of the adapters, and what free_base frees."""
    import jax

    from shared.hardware.sharding import make_mesh

    mesh = make_mesh(None, jax.devices()[:1])
    base, _ = models.load(name, "dummy", mesh=mesh, is_sampling=True)
    adapted = lora.apply_lora(base, rank, lora.default_alpha(rank), mesh=mesh)
    shared, total = lora.shared_base_arrays(base, adapted)
    row = {
        "model": name,
        "rank": rank,
        "base_bytes": models.param_bytes(base),
        "lora_params": lora.lora_param_count(adapted),
        "lora_bytes": models.param_bytes(adapted) - models.param_bytes(base),
        "base_arrays": total,
        "shared_arrays": shared,
    }
    return row | {"freed_bytes": lora.free_base(base, keep=adapted)}


def finetune(point: dict, tokens: float) -> dict:
    """Steps, hours and dollars of a fine-tune reading `tokens` tokens at a verdict's setting."""
    bills = {kind: budget.for_tokens(point, tokens, kind=kind) for kind in ("on-demand", "spot")}
    return {
        "tokens": tokens,
        "steps": bills["spot"]["steps"],
        "batch": point["batch"],
        "seq": point["seq"],
        **bills,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", default="gemma4-31b")
    p.add_argument("--target", default="v5p-8")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--seqs", default="1024,2048,4096")
    p.add_argument("--remats", default="none,block")
    p.add_argument("--batches", default="4", help="fast verdicts' batches, every setting")
    p.add_argument("--extra-fast", default="", help="SEQ:REMAT:BATCH fast verdicts to add")
    p.add_argument("--exact", default="", help="SEQ:REMAT settings confirmed exactly")
    p.add_argument("--most-exact", type=int, default=4, help="exact compiles per setting")
    p.add_argument(
        "--frontier-at", default="4096:16", help="SEQ:BATCH of the frontier; empty: no frontier"
    )
    p.add_argument("--microbatches", default="1,4", help="the frontier's micro-batch counts")
    p.add_argument("--losses", default="chunked,full", help="the frontier's losses")
    p.add_argument("--tokens", type=float, default=1e8, help="tokens a fine-tune reads")
    p.add_argument("--local-model", default="gemma3-tiny")
    p.add_argument("--local-rank", type=int, default=16)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    a.seqs, a.batches = [int(s) for s in a.seqs.split(",")], [int(b) for b in a.batches.split(",")]
    a.remats, a.exact = a.remats.split(","), set(filter(None, a.exact.split(",")))
    extra_fast, a.extra_fast = a.extra_fast, {}
    for item in filter(None, extra_fast.split(",")):
        seq, remat, batch = item.split(":")
        a.extra_fast.setdefault(f"{seq}:{remat}", set()).add(int(batch))
    start = time.perf_counter()
    report = {
        **results.header("benchmarks/bench_lora_scale.py", argv),
        "setting": {
            "model": a.model,
            "target": a.target,
            "rank": a.rank,
            "published": "arXiv:2605.25645: LoRA on gemma4-31b, TPU v5p-8, "
            "gradient checkpointing needed",
        },
        "local": local_sharing(a.local_model, a.local_rank),
    }
    report["grid"], report["boundaries"] = scale_table(a)
    abstract = models.abstract_model(
        a.model, lora_rank=a.rank, lora_alpha=lora.default_alpha(a.rank)
    )  # built by the plan
    report["setting"]["lora_params"] = lora.lora_param_count(abstract)
    report["setting"]["base_params"] = models.param_count(abstract) - lora.lora_param_count(
        abstract
    )
    for row in report["boundaries"]:  # the bill of a fine-tune at each confirmed boundary
        at = [p for p in row.get("exact", []) if p["batch"] == row.get("largest_batch")]
        if at:
            row["finetune"] = finetune(at[0], a.tokens)
    if a.frontier_at:
        frontier_at(a, report)
    report["wall_s"] = time.perf_counter() - start
    results.write(a.out, report)
    return 0


def frontier_at(a, report: dict) -> None:
    """The frontier over remat x micro-batches x loss at --frontier-at, and its bill."""
    seq, batch = (int(v) for v in a.frontier_at.split(":"))
    result = frontier.frontier(
        plan.Request("lora-train", a.model, a.target, batch=batch, seq=seq, lora_rank=a.rank),
        {
            "remat": a.remats,
            "microbatches": [int(m) for m in a.microbatches.split(",")],
            "loss": a.losses.split(","),
        },
    )
    report["frontier"] = {
        **result,
        "describe": frontier.describe(result),
        **{k: [slim(p) for p in result[k]] for k in ("fast", "exact", "frontier")},
        "choice": result["choice"] and slim(result["choice"]),
    }
    print(report["frontier"]["describe"], flush=True)
    if result["choice"] is not None:
        report["finetune"] = finetune(report["frontier"]["choice"], a.tokens)


if __name__ == "__main__":
    run_cli(main)
