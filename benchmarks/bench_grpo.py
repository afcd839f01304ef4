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

meshes: the recipe on the meshes with more tp than the verdict's, compiled while it is
memory-bound (shared.plan.mesh.faster), and the session each buys (notebook 07, section 4).

local: notebook 07's local run (gemma3-tiny and qwen3-tiny, random weights, the arithmetic
reward, 3 steps) with its steady (median after the first) seconds per phase.

device: notebook 07's device mode as a benchmark. The recipe's real tunix loop (random
weights, --train-steps steps) on the attached device. Its peak HBM is measured in a fresh
process with XLA's GPU autotuner off, before this process touches the device, so no
compile-time scratch is in it (shared.hardware.measure.NO_AUTOTUNING); the steady seconds per
phase come from a second run here with the autotuner on.

predict: the plan's verdict for the same recipe on the attached slice
(`hardware.current_target_name()`, compiled for that GPU or TPU, nothing allocated), beside the
device part's measured peak in the same file when that measured this recipe.

Each part rewrites only its own keys of --out (the others are kept), after each step; compile
and run times depend on the host, so the JSON records its CPU count and load.

    python benchmarks/bench_grpo.py --per-phase --out benchmarks/results/07_grpo_plan.json
    python benchmarks/bench_grpo.py --parts meshes --out benchmarks/results/07_grpo_plan.json
    python benchmarks/bench_grpo.py --parts local --out benchmarks/results/07_grpo_plan.json
    # on a GPU or TPU (CPU smoke run of the device part: --model gemma3-tiny --prompt-len 8
    # --completion-len 8 --num-generations 2 --batch 4 --lora-rank 4 --train-steps 2)
    python benchmarks/bench_grpo.py --parts device,predict --out benchmarks/results/grpo_h100.json
"""

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path


def _parts_asked(argv: list[str]) -> set[str]:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--parts", default="plan")
    return set(parser.parse_known_args(argv)[0].parts.split(","))


# The plan part compiles deviceless for a TPU target and the local part is a CPU run; the device
# and predict parts run on what is attached, so there the choice of platform is left to jax.
if not {"device", "predict"} & _parts_asked(sys.argv[1:]):
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402  (after JAX_PLATFORMS)

from shared import grpo, models, plan  # noqa: E402
from shared.errors import BadInput, run_cli  # noqa: E402
from shared.plan.mesh import faster  # noqa: E402
from shared.plan.search.view import probe_rows  # noqa: E402
from shared.plan.slices import budget  # noqa: E402
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
    recipe = recipe_request(args, args.target)
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


def meshes_part(args, report: dict) -> None:
    """The recipe on the meshes with more tp, compiled while it is memory-bound
    (shared.plan.mesh.faster), and the session each would buy: notebook 07's section 4."""
    recipe = recipe_request(args, args.target)
    point = plan.plan_point(recipe)
    per_step = grpo_plan.settings(recipe).sequences_per_step
    report["wider_meshes"] = {}
    for name, verdict in faster.on_wider_meshes(recipe, point).items():
        report["wider_meshes"][name] = {
            **{
                k: verdict[k]
                for k in ("fits", "bytes_per_device", "hbm_bytes", "worst", "compile_s")
            },
            "roofline_lower_bound_s": verdict["roofline_lower_bound_s"],
            "session": budget.session(verdict, sequences_per_step=per_step)
            if verdict["fits"]
            else None,
        }
        print(
            f"{name}: {'fits' if verdict['fits'] else 'does not fit'}, roofline "
            f"{verdict['roofline_lower_bound_s']:.2f} s a step "
            f"(on {point['mesh_shape']}: {point['roofline_lower_bound_s']:.2f} s)",
            flush=True,
        )
        results.write(args.out, report)


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


def recipe_request(args, target: str) -> plan.Request:
    """The GRPO recipe the arguments describe, on `target`: plan mode compiles it, and its
    shared.grpo settings (grpo_plan.settings) drive the live runs."""
    return plan.Request(
        "grpo",
        args.model,
        target,
        batch=args.batch,
        prompt_len=args.prompt_len,
        steps=args.completion_len,
        num_generations=args.num_generations,
        lora_rank=args.lora_rank,
    )


def live_run(args) -> dict:
    """The recipe's tunix GRPO loop on the attached devices (random weights): its status (an
    out-of-memory message is an outcome), this process's peak HBM and the steady seconds per
    phase (median after the first step, which compiles)."""
    from shared.hardware import measure
    from shared.hardware.sharding import make_mesh

    recipe = grpo_plan.settings(recipe_request(args, args.target))
    mesh = make_mesh()
    model, tok = models.load(args.model, "dummy", mesh=mesh)
    run = grpo.build_grpo(model, tok, mesh, recipe, steps=args.train_steps)
    del model  # the policy and the reference keep what they need
    batches = grpo.arithmetic_batches(args.train_steps, recipe.prompts_per_step)
    result, oom = measure.run_or_oom(grpo.run_grpo, run, batches)
    row = {"status": "ok" if oom is None else "oom", "error": oom}
    row["peak_bytes_per_device"] = measure.peak_bytes_per_device()
    row["autotuning_scratch_in_peak"] = measure.peak_includes_compiling()
    if result is not None:
        row.update(
            first_step_s=result.steps[0]["step_s"],
            steady=result.steady(),
            base_copies=grpo.base_copies(run),
        )
    return row


def peak_in_child(args) -> dict:
    """live_run in a fresh process with the GPU autotuner off: the peak to hold the plan's
    bytes to (its seconds are the untuned kernels', not reported)."""
    from shared.hardware import measure

    recipe = {
        "--model": args.model,
        "--prompt-len": args.prompt_len,
        "--completion-len": args.completion_len,
        "--num-generations": args.num_generations,
        "--batch": args.batch,
        "--lora-rank": args.lora_rank,
        "--train-steps": args.train_steps,
    }
    argv = [str(a) for flag in recipe.items() for a in flag]
    row, failed = measure.json_from_child(
        [sys.executable, __file__, "--parts", "device", *argv, "--child"],
        env=measure.without_autotuning(dict(os.environ)),
    )
    return failed or {k: row[k] for k in ("status", "error", "peak_bytes_per_device")}


def device_part(args, report: dict) -> None:
    from shared.hardware import current_target_name

    entry = report["device"] = {"train_steps": args.train_steps, "weights": "dummy (random)"}
    entry["run_peak"] = peak_in_child(args)  # before this process takes the device's memory
    print(f"autotuner off: {entry['run_peak']}", flush=True)
    results.write(args.out, report)
    target = current_target_name()
    entry.update(
        target=target,
        devices=f"{jax.device_count()} x {jax.devices()[0].device_kind}",
        recipe=dataclasses.asdict(recipe_request(args, target or args.target)),
    )
    entry["timed"] = live_run(args)
    print(f"autotuner on: {entry['timed']}", flush=True)


def predict_part(args, report: dict) -> None:
    from shared.hardware import current_target_name

    target = current_target_name()
    if target is None:
        raise BadInput("--parts predict compiles for the attached GPU or TPU: none is attached")
    request = recipe_request(args, target)
    point = plan.plan_point(request)
    kept = (
        "fits",
        "bytes_per_device",
        "hbm_bytes",
        "resident_bytes",
        "worst",
        "roofline_lower_bound_s",
        "compile_s",
        "notes",
    )
    entry = report["predicted"] = {
        "request": dataclasses.asdict(request),
        **{k: point[k] for k in kept},
    }
    ran = report.get("device", {})
    measured = ran.get("run_peak", {}).get("peak_bytes_per_device")
    if measured and ran.get("recipe") == entry["request"]:
        entry["predicted_over_measured"] = point["bytes_per_device"] / measured
    print(f"predicted: {entry}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--parts", default="plan", help="plan, meshes, local, device, predict; comma-separated"
    )
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
    p.add_argument("--train-steps", type=int, default=4, help="device: GRPO steps run")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:  # device part: one live run measured alone (peak_in_child)
        results.write(args.out, live_run(args))
        return 0
    report = json.loads(args.out.read_text()) if args.out.exists() else {}
    if "command" in report:  # written before the parts were split: it ran the plan part
        report.setdefault("commands", {}).setdefault("plan", report.pop("command"))
    for part in args.parts.split(","):
        head = results.header("benchmarks/bench_grpo.py", argv)
        report.setdefault("commands", {})[part] = head.pop("command")
        report.update(head)
        run_part = {
            "plan": plan_part,
            "meshes": meshes_part,
            "local": local_part,
            "device": device_part,
            "predict": predict_part,
        }[part]
        run_part(args, report)
    results.write(args.out, report)
    return 0


if __name__ == "__main__":
    run_cli(main)
