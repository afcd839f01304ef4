"""GRPO benchmark: the plan's verdict for a recipe, how large a log-prob micro-batch fits with
tunix's compute_per_token_logps ([B, T, V] logits) against shared.grpo.token_logprobs' chunked one,
and (--parts local) the real tunix loop on tiny models on this CPU, timed per phase.

plan (deviceless: libtpu, no TPU needed): for the recipe (default: gemma3-1b on a v5e-8, tunix's
Gemma GRPO demo settings, one 8-sequence micro-batch per phase) the exact verdict (resident
buffers by name, every phase's bytes, the roofline) and what a 9-hour session buys. Then
`plan.max_batch` over the log-prob phase alone (the run's resident buffers counted) for each
implementation. With --per-phase, also over the rollout and the policy update alone: a recipe
fits when every phase fits beside the resident set, so the largest micro-batch for all phases
at once is the least of these (each phase can take its own), and that configuration's verdict.

local: notebook 07's local run (gemma3-tiny and qwen3-tiny, random weights, the arithmetic
reward, 3 steps) with its steady (median after the first) seconds per phase.

Each part rewrites only its own keys of --out (the others are kept), after each step; compile
and run times depend on the host, so the JSON records its CPU count and load.

    python benchmarks/bench_grpo.py --per-phase --out benchmarks/results/07_grpo_plan.json
    python benchmarks/bench_grpo.py --parts local --out benchmarks/results/07_grpo_plan.json
"""

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402  (after JAX_PLATFORMS)

from shared import grpo, models, plan  # noqa: E402
from shared.errors import run_cli  # noqa: E402
from shared.plan import budget  # noqa: E402
from shared.plan.search import probe_rows  # noqa: E402
from shared.plan.workloads import grpo as grpo_plan  # noqa: E402
from shared.report import results  # noqa: E402


def _search(request: plan.Request) -> dict:
    start = time.perf_counter()
    found = plan.max_batch(request, progress=False)
    return {
        "request": dataclasses.asdict(request),
        "max_batch": found["max_batch"],
        "first_not_fitting": found["first_not_fitting"],
        "converged": found["converged"],
        "summary": plan.describe(found),
        "compiles": found["compiles"],
        "wall_s": time.perf_counter() - start,
        "probes": probe_rows(found),
    }


def plan_part(args, report: dict) -> None:
    recipe = plan.Request(
        "grpo",
        args.model,
        args.target,
        batch=args.batch,
        prompt_len=args.prompt_len,
        steps=args.completion_len,
        num_generations=args.num_generations,
        lora_rank=args.lora_rank,
    )
    report["recipe"] = dataclasses.asdict(recipe)
    start = time.perf_counter()
    point = plan.plan_point(recipe)
    report["verdict"] = {
        **{
            k: point[k]
            for k in (
                "fits",
                "bytes_per_device",
                "hbm_bytes",
                "margin_bytes",
                "resident",
                "resident_bytes",
                "transient_bytes",
                "worst",
                "roofline_lower_bound_s",
                "notes",
                "compile_s",
            )
        },
        "executables": {
            label: {
                k: e[k]
                for k in (
                    "argument_bytes",
                    "output_bytes",
                    "temp_bytes",
                    "alias_bytes",
                    "flops",
                    "bytes_accessed",
                    "repeats",
                    "compile_s",
                )
            }
            for label, e in point["executables"].items()
        },
        "wall_s": time.perf_counter() - start,
    }
    report["session"] = budget.session(
        point, sequences_per_step=grpo_plan.settings(recipe).sequences_per_step
    )
    print(
        f"recipe: {'fits' if point['fits'] else 'does not fit'}, "
        f"{point['bytes_per_device'] / 2**30:.2f} GiB per device",
        flush=True,
    )
    results.write(args.out, report)
    report["logps_search"] = {}
    for logps in ("tunix", "chunked"):
        entry = report["logps_search"][logps] = _search(
            dataclasses.replace(recipe, phases="logps", logps=logps)
        )
        print(f"log-probs {logps}: {entry['summary']} ({entry['wall_s']:.0f} s)", flush=True)
        results.write(args.out, report)
    found = report["logps_search"]
    report["logps_ratio"] = found["chunked"]["max_batch"] / max(found["tunix"]["max_batch"], 1)
    if not args.per_phase:
        return
    report["phase_search"] = {}
    for phases in ("rollout", "update"):
        entry = report["phase_search"][phases] = _search(dataclasses.replace(recipe, phases=phases))
        print(f"{phases}: {entry['summary']} ({entry['wall_s']:.0f} s)", flush=True)
        results.write(args.out, report)
    largest = report["largest_all_phases"] = min(
        [e["max_batch"] for e in report["phase_search"].values()] + [found["chunked"]["max_batch"]]
    )
    best = dataclasses.replace(recipe, batch=largest, logps="chunked")
    point = plan.plan_point(best)  # every phase at once: the verdict, and its roofline
    report["largest_verdict"] = {
        "request": dataclasses.asdict(best),
        "fits": point["fits"],
        "bytes_per_device": point["bytes_per_device"],
        "worst": point["worst"],
        "roofline_lower_bound_s": point["roofline_lower_bound_s"],
    }
    report["largest_session"] = budget.session(
        point, sequences_per_step=grpo_plan.settings(best).sequences_per_step
    )
    print(f"all phases at {largest}: {'fits' if point['fits'] else 'does not fit'}", flush=True)


LOCAL_RECIPE = grpo.GRPOSettings(
    prompt_len=8, completion_len=8, prompts_per_step=4, num_generations=2, lora_rank=4
)  # notebook 07's local sizes


def local_part(args, report: dict) -> None:
    from shared.hardware.sharding import make_mesh

    rows = report["local"] = {
        "recipe": dataclasses.asdict(LOCAL_RECIPE),
        "steps": 3,
        "devices": f"{len(jax.devices())} x {jax.devices()[0].device_kind}",
        "runs": {},
    }
    for name in ("gemma3-tiny", "qwen3-tiny"):
        mesh = make_mesh()
        model, tok = models.load(name, "dummy", mesh=mesh)
        with grpo.quick_compiles():
            run = grpo.build_grpo(model, tok, mesh, LOCAL_RECIPE, steps=rows["steps"])
            result = grpo.run_grpo(run, grpo.arithmetic_batches(rows["steps"], 4))
        rows["runs"][name] = {
            "wall_s": result.wall_s,
            "first_step_s": result.steps[0]["step_s"],
            "steady": result.steady(),
            "base_copies": grpo.base_copies(run),
        }
        print(f"{name}: steady step {result.steady_step_s:.3f} s", flush=True)
        results.write(args.out, report)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--parts", default="plan", help="plan, local, or plan,local")
    p.add_argument("--model", default="gemma3-1b")
    p.add_argument("--target", default="v5e-8")
    p.add_argument("--prompt-len", type=int, default=256)
    p.add_argument("--completion-len", type=int, default=768)
    p.add_argument("--num-generations", type=int, default=4)
    p.add_argument("--batch", type=int, default=8, help="sequences per call of every phase")
    p.add_argument("--lora-rank", type=int, default=64)
    p.add_argument(
        "--per-phase",
        action="store_true",
        help="also search the rollout's and the update's largest micro-batch (slow)",
    )
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    report = json.loads(args.out.read_text()) if args.out.exists() else {}
    if "command" in report:  # written before the parts were split: it ran the plan part
        report.setdefault("commands", {}).setdefault("plan", report.pop("command"))
    for part in args.parts.split(","):
        head = results.header("benchmarks/bench_grpo.py", argv)
        report.setdefault("commands", {})[part] = head.pop("command")
        report.update(head)
        {"plan": plan_part, "local": local_part}[part](args, report)
    results.write(args.out, report)
    return 0


if __name__ == "__main__":
    run_cli(main)
