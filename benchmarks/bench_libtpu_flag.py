"""Whether a libtpu flag moves an atlas cell: the cell's own search run again in a child with
LIBTPU_INIT_ARGS set, beside the committed answer (shared.plan.atlas.flag, which says why).

    nice python benchmarks/bench_libtpu_flag.py --cell grpo,gemma3-1b,tpu7x-8 \\
        --flags=--xla_tpu_offload_gather_to_sparsecore=false \\
        --why "the SparseCore gather offload off" \\
        --out benchmarks/results/libtpu_flag_grpo_gemma3-1b_tpu7x-8.json

`--why` says in a few words what the flag changes; the lookup prints it beside the answer, so
a reader knows what they switch on before they copy it. The plan cache keys verdicts by the
flags, so a second run reads what the first compiled; the file says how many of the search's
verdicts came from the cache.
"""

from __future__ import annotations

import argparse

from shared.errors import run_cli
from shared.plan.atlas.flag import flag_search
from shared.report import results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--cell", required=True, help="recipe,model,target (an atlas cell)")
    p.add_argument("--flags", required=True, help="LIBTPU_INIT_ARGS for the search")
    p.add_argument("--why", required=True, help="what the flag changes, in a few words")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    report = {
        **results.header("benchmarks/bench_libtpu_flag.py", argv),
        **flag_search(args.cell, args.flags, args.why),
    }
    results.write(args.out, report)
    answer = report["with_flag"]
    print(
        f"the atlas (libtpu's defaults): {report['committed']['lookup']}\n"
        f"with LIBTPU_INIT_ARGS={args.flags}: {answer['summary']} "
        f"({answer['compiles']} compiles, {answer['verdicts_from_cache']} of "
        f"{answer['verdicts']} verdicts from the plan cache)"
    )
    return 0


if __name__ == "__main__":
    run_cli(main)
