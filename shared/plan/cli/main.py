"""`tpu-budget-lab`: one sub-command per question a budget asks, each with only its own flags.

    tpu-budget-lab fit sft --model gemma3-1b --target h100-1 --batch 8 --seq 2048
    tpu-budget-lab max-batch rollout --model gemma3-4b --target v5e-8
    tpu-budget-lab change lora-train --model gemma3-12b --target v6e-8 --seq 2048
    tpu-budget-lab cheapest lora-train --model gemma3-1b --seq 2048 --tokens 1e7
    tpu-budget-lab lookup gemma3-4b v5e-8 rollout

A question takes a workload, and a workload's `--help` lists only the knobs it reads
(shared.plan.workloads.READS). The answers are `python -m shared.plan`'s, from the same code
(shared.plan.cli.answers); that flat command line keeps working.
"""

from __future__ import annotations

import argparse
import os
import sys

from shared.errors import run_cli

PROG = "tpu-budget-lab"
# question -> (what it answers, an example, the handler's name in shared.plan.cli.answers)
QUESTIONS = {
    "fit": (
        "will it fit at this batch: the compiler's bytes per device, hours and dollars",
        "fit sft --model gemma3-1b --target h100-1 --batch 8 --seq 2048",
        "fit",
    ),
    "max-batch": (
        "the largest batch that fits, the compiler's verdict at the boundary",
        "max-batch rollout --model gemma3-4b --target v5e-8 --cache-size 1312",
        "max_batch",
    ),
    "change": (
        "what to change: the settings no other beats on both memory and time",
        "change lora-train --model gemma3-12b --target v6e-8 --seq 2048",
        "change",
    ),
    "cheapest": (
        "which slice or GPU machine to rent for a whole job, its hours and dollars",
        "cheapest lora-train --model gemma3-1b --seq 2048 --tokens 1e7",
        "cheapest_slice",
    ),
}
LOOKUP = (
    "the atlas's committed answer for one cell, in under a second",
    "lookup gemma3-4b v5e-8 rollout",
)
# a whole job's size, by the unit a workload's job is counted in (shared.plan.slices.job)
JOB_SIZE = {
    "tokens": ("--tokens", "tokens to train on"),
    "sequences": ("--sequences", "rollouts to make"),
    "steps": ("--grpo-steps", "GRPO steps (each at --batch)"),
}
# what each workload compiles, as the question's list of workloads says it
WORKLOADS = {
    "rollout": "sampling with tunix's Sampler: weights and KV cache",
    "lora-rollout": "sampling with qwix LoRA adapters on the weights",
    "forward": "one forward pass and its logits (full or top-k)",
    "lora-train": "a qwix LoRA fine-tune step",
    "sft": "a full fine-tune step: every weight and its fp32 Adam moments",
    "train": "the ~130M pretraining step of notebook 04 (our flax nnx model)",
    "grpo": "a tunix GRPO step: rollout, log-probs, policy update",
}


def _formatter(prog: str) -> argparse.HelpFormatter:
    """One line a flag where it fits: a sub-command's help stays under 40 lines."""
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=34, width=100)


def _parser(
    parent, name: str, summary: str, example: str, usage: str | None = None
) -> argparse.ArgumentParser:
    return parent.add_parser(
        name,
        help=summary,
        usage=usage,
        description=f"example: {PROG} {example}\n\n{summary}",
        formatter_class=_formatter,
    )


def _add_common(parser: argparse.ArgumentParser, *, target: bool) -> None:
    parser.add_argument("--model", required=True, metavar="M", help="gemma3-1b, llama3.1-8b ...")
    if target:
        parser.add_argument(
            "--target", required=True, metavar="T", help="v5e-8, v6e-1, v5p-8, t4-2, h100-1 ..."
        )
    parser.add_argument("--mesh", metavar="FxT", help="fsdp x tp, e.g. 1x8 (default: chosen)")
    parser.add_argument("--fast", action="store_true", help="least compile effort, approx bytes")
    parser.add_argument("--no-cache", action="store_true", help="recompile even if cached")
    parser.add_argument("--json", action="store_true", help="print JSON")


def _add_bill(parser: argparse.ArgumentParser) -> None:
    bill = parser.add_argument_group("hours and dollars")
    bill.add_argument("--runs", type=float, default=1, metavar="N", help="price N runs")
    bill.add_argument("--hours", type=float, metavar="H", help="also: runs that fit in H hours")
    bill.add_argument("--price", default="on-demand", help="on-demand | spot | 1y | 3y")


def _add_job(parser: argparse.ArgumentParser, unit: str, workload: str) -> None:
    from shared.plan.slices import cheapest

    job = parser.add_argument_group("the whole job")
    flag, meaning = JOB_SIZE[unit]
    job.add_argument(flag, type=float, metavar="N", help=meaning)
    if workload == "grpo":
        job.add_argument("--batch", type=int, default=8, metavar="N", help="sequences a call")
    job.add_argument("--within-hours", type=float, metavar="H", help="only slices done in time")
    job.add_argument("--slices", metavar="A,B", help="only these slices (default: all rented)")
    job.add_argument(
        "--max-slices",
        type=int,
        default=cheapest.MAX_COMPILED,
        metavar="N",
        help="compiled at most",
    )
    job.add_argument(
        "--minutes", type=float, default=cheapest.SEARCH_MINUTES, help="compile this long, at most"
    )
    job.add_argument("--price", default="on-demand", help="on-demand | spot | 1y | 3y")
    job.add_argument("--figure", metavar="PNG", help="also draw hours against dollars")


def _example(question: str, workload: str) -> str:
    """A command for `question` about `workload` that a reader can run as it stands."""
    from shared.plan.slices.job import JOB_UNITS

    if question == "cheapest":
        flag = JOB_SIZE[JOB_UNITS[workload]][0]
        return f"cheapest {workload} --model gemma3-1b {flag} 1e6"
    model = "130m" if workload == "train" else "gemma3-1b"
    batch = " --batch 8" if question == "fit" else ""
    return f"{question} {workload} --model {model} --target v5e-8{batch}"


def build_parser() -> argparse.ArgumentParser:
    """Question -> workload -> that workload's flags."""
    from shared.plan.cli.flags import add_knobs
    from shared.plan.slices.job import JOB_UNITS
    from shared.plan.workloads import READS

    examples = "\n".join(f"  {PROG} {example}" for _, example, _ in QUESTIONS.values())
    parser = argparse.ArgumentParser(
        prog=PROG,
        usage=f"{PROG} QUESTION WORKLOAD --model M --target T [flags]",
        description=f"examples:\n{examples}\n  {PROG} {LOOKUP[1]}\n\n"
        "Every answer is the XLA compiler's, for a TPU slice or GPU machine that is not here.",
        formatter_class=_formatter,
    )
    questions = parser.add_subparsers(dest="question", required=True, metavar="QUESTION", prog=PROG)
    for question, (summary, example, _) in QUESTIONS.items():
        asked = _parser(questions, question, summary, example)
        workloads = asked.add_subparsers(
            dest="workload", required=True, metavar="WORKLOAD", prog=f"{PROG} {question}"
        )
        for workload, reads in READS.items():
            if question == "cheapest" and workload not in JOB_UNITS:
                continue
            where = "" if question == "cheapest" else " --target T"
            usage = f"{PROG} {question} {workload} --model M{where} [flags]"
            one = _parser(
                workloads, workload, WORKLOADS[workload], _example(question, workload), usage
            )
            _add_common(one, target=question != "cheapest")
            if question in ("fit", "change"):  # change: the grid's batches are multiples of it
                one.add_argument("--batch", type=int, default=8, metavar="N")
            if question == "max-batch":
                one.add_argument("--multiple-of", type=int, metavar="N", help="step in this unit")
            add_knobs(one.add_argument_group(f"{workload}'s knobs"), reads)
            if question == "cheapest":
                _add_job(one, JOB_UNITS[workload], workload)
            else:
                _add_bill(one)
    lookup = _parser(questions, "lookup", *LOOKUP, usage=f"{PROG} lookup MODEL TARGET RECIPE")
    lookup.add_argument("cell", nargs="*", help="MODEL TARGET RECIPE")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["lookup"]:  # the committed atlas: no compiler, no jax import
        from shared.plan.atlas import lookup

        return lookup.main(argv[1:])
    # a plan never needs the local accelerator (shared.plan.__main__ says why)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from shared.plan.cli import answers

    args = build_parser().parse_args(argv)
    return getattr(answers, QUESTIONS[args.question][2])(args, args.workload)


def run() -> None:
    """The console script's entry point (pyproject.toml's [project.scripts])."""
    run_cli(main)


if __name__ == "__main__":
    run()
