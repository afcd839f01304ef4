"""python -m shared.plan WORKLOAD --model M --target T [--max-batch] ...: the verdict, printed.

`python -m shared.plan lookup MODEL TARGET RECIPE` reads the atlas's committed cell instead
(shared.plan.atlas.lookup), in well under a second."""

import os
import sys

from shared.errors import BadInput

if sys.argv[1:2] == ["lookup"]:  # the atlas's committed answer: no compiler, no jax import
    from shared.errors import run_cli
    from shared.plan.atlas import lookup

    run_cli(lookup.main, sys.argv[2:])

# A plan never needs the local accelerator: TPU slices and GPU machines both compile
# deviceless (shared.plan.compiler.target). Left unset, jax would first try the TPU runtime that
# libtpu brings and the CUDA driver the GPU plugin looks for.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse  # noqa: E402
import dataclasses  # noqa: E402

from shared import plan  # noqa: E402
from shared.errors import choose, run_cli  # noqa: E402
from shared.plan.cli import answers  # noqa: E402
from shared.plan.cli.flags import FLAG_FIELDS, KNOBS, add_knobs, flag_for  # noqa: E402
from shared.plan.slices import cheapest  # noqa: E402

# the knobs only GRPO reads (--steps is its completion length), grouped apart in --help
_GRPO_KNOBS = tuple(
    field
    for field in plan.READS["grpo"]
    if not any(field in reads for name, reads in plan.READS.items() if name != "grpo")
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
    parser.add_argument(
        "--batch", type=int, default=8, help="the batch (--frontier: the grid's base)"
    )
    size = parser.add_mutually_exclusive_group()
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
    add_knobs(parser, [f for f in KNOBS if f not in _GRPO_KNOBS])
    parser.add_argument(
        "--mesh",
        help="FSDPxTP, e.g. 1x8 (default: every device on fsdp, or the smallest tp that "
        "divides the weights and the batch where that does not: shared.plan.mesh.choice)",
    )
    parser.add_argument(
        "--fast",
        action="store_true",
        help="least compile effort: several times quicker, bytes approximate",
    )
    parser.add_argument("--no-cache", action="store_true", help="recompile even if cached")
    parser.add_argument("--json", action="store_true", help="print JSON")
    bill = parser.add_argument_group(
        "hours and dollars (shared.plan.slices.budget, shared.hardware.prices)"
    )
    bill.add_argument(
        "--runs",
        type=float,
        default=1,
        help="price this many runs of the workload (a step, a batch of rollouts)",
    )
    bill.add_argument("--hours", type=float, help="also: how many runs fit in this many hours")
    bill.add_argument("--price", default="on-demand", help="on-demand | spot | 1y | 3y")
    whole = parser.add_argument_group("--cheapest: the whole job (shared.plan.slices.cheapest)")
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
    add_knobs(grpo, _GRPO_KNOBS)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    workload = choose("workload", args.workload, plan.WORKLOADS)
    check_flags_apply(parser, workload, sys.argv[1:] if argv is None else argv)

    given = sys.argv[1:] if argv is None else argv
    if args.max_batch and any(a == "--batch" or a.startswith("--batch=") for a in given):
        raise BadInput("--batch with --max-batch: the search chooses the batch")
    if args.cheapest:
        return answers.cheapest_slice(args, workload)
    if args.target is None:
        raise BadInput("--target is required (a slice such as v5e-8), except with --cheapest")
    if args.frontier:
        return answers.change(args, workload)
    if args.max_batch:
        return answers.max_batch(args, workload)
    return answers.fit(args, workload)


if __name__ == "__main__":
    run_cli(main)
