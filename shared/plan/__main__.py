"""python -m shared.plan WORKLOAD --model M --target T [--max-batch] ...: the verdict, printed.

`python -m shared.plan lookup MODEL TARGET RECIPE` reads the atlas's committed cell instead
(shared.plan.lookup), in well under a second."""

import os
import sys

from shared.errors import BadInput

if sys.argv[1:2] == ["lookup"]:  # the atlas's committed answer: no compiler, no jax import
    from shared.errors import run_cli
    from shared.plan import lookup

    run_cli(lookup.main, sys.argv[2:])

# A plan never needs the local accelerator: TPU slices and GPU machines both compile
# deviceless (shared.plan.target). Left unset, jax would first try the TPU runtime that libtpu
# brings and the CUDA driver the GPU plugin looks for.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402

from shared import plan  # noqa: E402
from shared.errors import choose, run_cli  # noqa: E402
from shared.grpo.token_logprobs import IMPLEMENTATIONS  # noqa: E402
from shared.hardware import rent  # noqa: E402
from shared.lora import LOSSES  # noqa: E402
from shared.plan import budget, cheapest, cheapest_view, frontier, slice_job  # noqa: E402
from shared.plan.atlas import answer  # noqa: E402
from shared.plan.flags import FLAG_FIELDS, flag_for  # noqa: E402
from shared.plan.point_view import (  # noqa: E402
    describe_committed,
    describe_nearby,
    print_point,
    print_search,
)
from shared.rollout.sampler import SEMANTICS  # noqa: E402


def print_bill(point: dict, args) -> None:
    """Hours and dollars of the user's run: --runs runs, and what --hours buys."""
    if not point["fits"]:
        return
    print(f"  {budget.describe(budget.estimate(point, runs=args.runs, kind=args.price))}")
    if args.hours:
        fit = budget.runs_in(point, args.hours)
        print(
            f"  in {args.hours:g} h: at most {fit['at_most']:,} runs (roofline), about "
            f"{fit['estimated']:,} at {fit['assumed_efficiency']:.0%}"
        )


def check_flags_apply(parser: argparse.ArgumentParser, workload: str, argv: list[str]) -> None:
    """BadInput for a flag the workload does not read (`--beta` on a rollout): silently
    ignoring it would answer a question the user did not ask."""
    reads = {*plan.COMMON, *plan.READS[workload]}
    fields = {f.name for f in dataclasses.fields(plan.Request)}
    for action in parser._actions:  # argparse keeps no public list of its options
        field = FLAG_FIELDS.get(action.dest, action.dest)
        given = any(t == o or t.startswith(o + "=") for t in argv for o in action.option_strings)
        if given and field in fields and field not in reads:
            valid = ", ".join(flag_for(f) for f in plan.READS[workload])
            raise BadInput(
                f"{action.option_strings[0]} does not apply to the {workload} workload "
                f"(it reads {valid})"
            )


def build_parser() -> argparse.ArgumentParser:
    """The command line: every workload's flags (`check_flags_apply` refuses the ones a
    workload does not read)."""
    parser = argparse.ArgumentParser(
        prog="python -m shared.plan",
        description=plan.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "workload",
        help=", ".join(plan.WORKLOADS) + " (or `lookup MODEL TARGET RECIPE`: the atlas's cell)",
    )
    parser.add_argument(
        "--model",
        required=True,
        help="gemma3-1b, gemma2-2b, gemma4-31b, llama3.1-8b, qwen3-8b, "
        "<family>-tiny, 130m (train) ...",
    )
    parser.add_argument(
        "--target",
        help="a slice (not with --cheapest, which chooses one): v5e-1, v5e-8, v6e-1, v6e-8, "
        "v5p-8, tpu7x-8; multi-host slices v5e-16 ... v5e-256, v6e-16 ... v6e-256, "
        "v5p-16 ... v5p-128, tpu7x-16 ... tpu7x-64 "
        "(v5p/tpu7x names count TensorCores); GPU machines t4-2, l4-1, a100-40g-1, "
        "a100-80g-8, h100-1 ... h100-8, h200-8, b200-8 (compiled without the GPU)",
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--batch", type=int, default=8)
    size.add_argument("--max-batch", action="store_true", help="search the largest batch")
    size.add_argument(
        "--frontier",
        action="store_true",
        help="compile a small grid of the workload's knobs; name the one to use",
    )
    size.add_argument(
        "--cheapest",
        action="store_true",
        help="the cheapest rented slice (and batch, remat) for the whole job: --tokens, "
        "--sequences or --grpo-steps; every TPU slice Cloud TPU rents, H100/H200 beside them",
    )
    parser.add_argument(
        "--multiple-of",
        type=int,
        help="--max-batch steps in this unit (default: the data-parallel size)",
    )
    parser.add_argument("--seq", type=int, default=1024, help="forward/train sequence length")
    parser.add_argument("--prompt-len", type=int, default=256)
    parser.add_argument("--steps", type=int, default=1024, help="generation steps")
    parser.add_argument("--cache-size", type=int, help="KV cache slots (default prompt+steps)")
    parser.add_argument("--logits", default="full", help="forward: full | topk")
    parser.add_argument("--k", type=int, default=128, help="forward --logits topk: k")
    parser.add_argument("--lora-rank", type=int, default=8)
    parser.add_argument("--microbatches", type=int, default=1, help="train: accumulation steps")
    parser.add_argument(
        "--remat",
        default="none",
        help="lora-train: none | block | decoder; train: none | block | dots",
    )
    parser.add_argument("--loss", default="chunked", help="lora-train: chunked | full")
    parser.add_argument(
        "--tunix-semantics",
        default="0.1.7",
        help="rollouts: 0.1.7 (donated KV cache) or 0.1.6 (not donated)",
    )
    parser.add_argument(
        "--mesh",
        help="FSDPxTP, e.g. 1x8 (default: every device on fsdp, or the smallest tp that "
        "divides the weights and the batch where that does not: shared.plan.mesh)",
    )
    parser.add_argument(
        "--fast",
        action="store_true",
        help="least compile effort: several times quicker, bytes approximate",
    )
    parser.add_argument("--no-cache", action="store_true", help="recompile even if cached")
    parser.add_argument("--json", action="store_true", help="print JSON")
    bill = parser.add_argument_group(
        "hours and dollars (shared.plan.budget, shared.hardware.prices)"
    )
    bill.add_argument(
        "--runs",
        type=float,
        default=1,
        help="price this many runs of the workload (a step, a batch of rollouts)",
    )
    bill.add_argument("--hours", type=float, help="also: how many runs fit in this many hours")
    bill.add_argument("--price", default="on-demand", help="on-demand | spot | 1y | 3y")
    whole = parser.add_argument_group("--cheapest: the whole job (shared.plan.cheapest)")
    whole.add_argument("--tokens", type=float, help="lora-train, sft, train: tokens to train on")
    whole.add_argument("--sequences", type=float, help="rollout, lora-rollout: rollouts to make")
    whole.add_argument("--grpo-steps", type=float, help="grpo: steps (the batch stays as given)")
    whole.add_argument("--within-hours", type=float, help="only slices that finish in time")
    whole.add_argument(
        "--slices",
        help="only these TPU slices, comma-separated (default: every one Cloud TPU rents)",
    )
    whole.add_argument(
        "--max-slices",
        type=int,
        default=cheapest.MAX_COMPILED,
        help="slices compiled at most",
    )
    whole.add_argument(
        "--minutes",
        type=float,
        default=cheapest.SEARCH_MINUTES,
        help="minutes of compiling, then answer with the best so far (rows not reached say so)",
    )
    whole.add_argument("--figure", help="also write hours against dollars to this .png")
    grpo = parser.add_argument_group(
        "grpo (--batch: sequences per call of each phase without "
        "its own micro-batch; --steps: the completion length)"
    )
    grpo.add_argument("--completion-len", type=int, dest="steps", help="= --steps")
    grpo.add_argument(
        "--prompts-per-step",
        type=int,
        help="default: the least multiple of the phases' micro-batches",
    )
    grpo.add_argument("--num-generations", type=int, default=4, help="G, per prompt")
    grpo.add_argument("--num-iterations", type=int, default=1, help="> 1: old-policy log-probs")
    grpo.add_argument("--rollout-micro", type=int, help="sequences per Sampler call")
    grpo.add_argument("--logps-micro", type=int, help="sequences per log-prob call")
    grpo.add_argument("--train-micro", type=int, help="sequences per policy-update pass")
    grpo.add_argument("--logps", default="tunix", help="log-prob phases: tunix | chunked")
    grpo.add_argument("--beta", type=float, default=0.08, help="KL weight (0: no reference)")
    grpo.add_argument(
        "--phases",
        help="compile only these: rollout, logps, update (comma-"
        "separated; resident buffers still counted)",
    )
    return parser


def request_from(args, workload: str, target: str) -> plan.Request:
    """The plan request the command line describes."""
    return plan.Request(
        workload=workload,
        model=args.model,
        target=target,
        batch=args.batch,
        seq=args.seq,
        prompt_len=args.prompt_len,
        steps=args.steps,
        cache_size=args.cache_size,
        logits=choose("logits mode", args.logits, ("full", "topk")),
        k=args.k,
        lora_rank=args.lora_rank,
        mesh=args.mesh,
        microbatches=args.microbatches,
        remat=args.remat,
        loss=choose("loss", args.loss, LOSSES),
        tunix=choose("tunix semantics", args.tunix_semantics, SEMANTICS),
        fast=args.fast,
        prompts_per_step=args.prompts_per_step,
        num_generations=args.num_generations,
        num_iterations=args.num_iterations,
        rollout_micro=args.rollout_micro,
        logps_micro=args.logps_micro,
        train_micro=args.train_micro,
        logps=choose("log-prob implementation", args.logps, IMPLEMENTATIONS),
        beta=args.beta,
        phases=args.phases,
    )


# workload's job unit -> the flag that gives it
JOB_FLAGS = {"tokens": "tokens", "sequences": "sequences", "steps": "grpo_steps"}


def print_cheapest(args, workload: str) -> int:
    """--cheapest: every slice's row, the answer, the commands; the figure when asked."""
    unit = slice_job.JOB_UNITS.get(workload)
    if unit is None:
        raise BadInput(
            f"--cheapest prices a whole job of {', '.join(slice_job.JOB_UNITS)}, not {workload}"
        )
    amount = getattr(args, JOB_FLAGS[unit])
    if amount is None:
        flag = "--" + JOB_FLAGS[unit].replace("_", "-")
        raise BadInput(f"--cheapest {workload} needs the job's size: {flag} N")
    # the slice is what --cheapest chooses: any target stands in until then
    request = request_from(args, workload, args.target or "v5e-1")
    result = cheapest.cheapest(
        request,
        amount,
        kind=args.price,
        within_hours=args.within_hours,
        slices=tuple(args.slices.split(",")) if args.slices else rent.ALL_SLICES,
        max_compiled=args.max_slices,
        minutes=args.minutes,
        use_cache=not args.no_cache,
        progress=not args.json,
    )
    if args.json:
        print(json.dumps(result, indent=1, default=str))
        return 0
    print(cheapest_view.table(result))
    print()
    print(cheapest_view.describe(result))
    if args.figure:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4.5))
        cheapest_view.plot(result, ax)
        fig.tight_layout()
        fig.savefig(args.figure, dpi=120)
        print(f"  wrote {args.figure}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    workload = choose("workload", args.workload, plan.WORKLOADS)
    check_flags_apply(parser, workload, sys.argv[1:] if argv is None else argv)

    if args.cheapest:
        return print_cheapest(args, workload)
    if args.target is None:
        raise BadInput("--target is required (a slice such as v5e-8), except with --cheapest")
    request = request_from(args, workload, args.target)
    if args.frontier:
        result = frontier.frontier(request, use_cache=not args.no_cache, progress=not args.json)
        if args.json:
            print(json.dumps(result, indent=1))
            return 0
        for point in result["frontier"]:
            print_point(point)
        print(f"\n{frontier.describe(result)}; {result['compiles']} compiles")
        if result["choice"] is not None:
            print_bill(result["choice"], args)
        return 0
    if args.max_batch and not args.no_cache:
        row = answer.committed_search(request, args.multiple_of)
        if row is not None:
            print(describe_committed(row, args.json))
            return 0
    if args.max_batch:
        if not args.json and (nearby := answer.nearby_cell(request)) is not None:
            print(describe_nearby(*nearby), flush=True)
        result = plan.max_batch(
            request,
            multiple_of=args.multiple_of,
            use_cache=not args.no_cache,
            progress=not args.json,
        )
        if args.json:
            print(json.dumps(result, indent=1))
            return 0
        print_search(result)
        for point in result["probes"]:
            if not point["fast"] and point["batch"] == result["max_batch"]:
                print_bill(point, args)
                break
        return 0
    point = plan.plan_point(request, use_cache=not args.no_cache)
    if args.json:
        print(json.dumps(point, indent=1))
        return 0
    print_point(point)
    print_bill(point, args)
    return 0


if __name__ == "__main__":
    run_cli(main)
