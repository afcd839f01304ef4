"""`python benchmarks/bench_atlas.py`: grow the atlas cell by cell, then render it.

    nice -n 19 python benchmarks/bench_atlas.py --limit-minutes 60 \\
        --only recipe=rollout,model=gemma3-1b,model=gemma2-2b,target=v5e-1,target=v5e-8
    # one run per core, sharing the store (a 27B/31B compile needs ~17 GB: run those alone)
    nice -n 19 python benchmarks/bench_atlas.py --shard 1/2 --limit-minutes 170 &
    nice -n 19 python benchmarks/bench_atlas.py --shard 2/2 --limit-minutes 170 &
    python benchmarks/bench_atlas.py --render-only
"""

from __future__ import annotations

import argparse
import signal
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from shared import models, plan
from shared.data import files
from shared.errors import BadInput, choose
from shared.hardware import parse_target
from shared.plan.atlas import figure
from shared.plan.atlas.render import FIGURE, MARKDOWN, TABLE, render
from shared.plan.atlas.run import (
    check_row,
    coarse_row,
    gap_row,
    mesh_row,
    run_cell,
    run_cell_alone,
)
from shared.plan.atlas.store import (
    MODELS,
    RECIPES,
    STORE,
    TARGETS,
    append_row,
    cells,
    has_gap,
    needs_check,
    parse_only,
    read_store,
    selected,
    skipped_a_mesh,
    stepped_coarsely,
    stored_row,
    todo,
)
from shared.plan.compiler.cache_entries import libtpu_flags


def _names(text: str, valid, kind: str) -> list[str]:
    return [choose(kind, name, valid) for name in filter(None, text.split(","))]


def _stop(signum, frame):
    raise KeyboardInterrupt  # a SIGTERM stops between writes, like Ctrl-C, and still renders


def parse_shard(text: str) -> tuple[int, int]:
    """ "K/N" -> (K, N) with 1 <= K <= N; one actionable line otherwise."""
    k, sep, n = text.partition("/")
    if not (sep and k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise BadInput(f"--shard wants K/N with 1 <= K <= N (e.g. 1/2 and 2/2), got {text!r}")
    return int(k), int(n)


def from_stored(args, stored: dict | None) -> tuple[Callable, str] | None:
    """The work on a cell that starts from its stored answer, compiling near it alone, and
    what it does in words: the coarse steps it took refined (always: its bracket closed at its
    mesh's own step, then a question a mesh), the checks above it it lacks (--check-above),
    the gap it left (--retry-gaps), or the meshes it left unasked (always: a question a mesh,
    where computing the cell again searches every mesh from scratch). None: compute the
    cell."""
    if not stored:
        return None
    if stepped_coarsely(stored):
        return partial(coarse_row, stored), "refining the coarse steps"
    if args.check_above and needs_check(stored):
        return partial(check_row, stored), "the check above"
    if args.retry_gaps and has_gap(stored):
        return partial(gap_row, stored), "closing the gap"
    if skipped_a_mesh(stored) and not args.one_mesh:
        return partial(mesh_row, stored), "asking the other meshes"
    return None


def finish_cell(args, cell, versions: dict, retry: dict):
    """The cell's work until the run has nothing left to do on it: each step's row, stored
    as it comes (an error row is not stored: the stored answer stands). A stored answer is
    taken up where it left off (from_stored), one kind of work after the other, so a cell
    that lacked both the check above its answer and a mesh is finished in one run, not one
    run a kind (gemma4-31b rollouts on a v5e-8 were checked on 2x4 on 2026-11-29 and kept
    their '?' until a later run asked the other meshes). Each kind runs once a cell and run."""
    done = set()
    while True:
        rows = read_store(args.store)
        if not todo([cell], rows, versions, **retry):
            return  # done, or another run sharing the store computed it meanwhile
        resume = from_stored(args, stored_row(rows, cell, versions))
        kind = resume[1] if resume else "the search"
        if kind in done:
            return
        done.add(kind)
        row = run_cell_alone(
            cell, resume[0] if resume else partial(run_cell, one_mesh=args.one_mesh)
        )
        if resume and row["status"] != "ok":  # the stored answer stands
            yield {**row, "error": f"{resume[1]} failed, {row['error']}"}
            return
        append_row(args.store, row)
        yield row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--targets", default=",".join(TARGETS))
    p.add_argument("--recipes", default=",".join(RECIPES))
    p.add_argument("--only", help="model=...,target=...,recipe=... (repeat a key for several)")
    p.add_argument(
        "--limit-minutes",
        type=float,
        default=None,
        help="start no new cell after this many minutes",
    )
    p.add_argument(
        "--shard",
        default="1/1",
        help="K/N: compute every Nth cell starting at the Kth, so N runs (one per core) share "
        "the grid and the store without computing a cell twice",
    )
    p.add_argument("--retry-failed", action="store_true", help="run failed cells again")
    p.add_argument(
        "--retry-gaps",
        action="store_true",
        help="close the gap of cells whose search stopped between a fitting and a failing batch "
        "more than a unit apart, by exact compiles inside it alone (shared.plan.search.gap); a "
        "search "
        "that stopped with no failing batch runs again",
    )
    p.add_argument(
        "--check-above",
        action="store_true",
        help="compile two units above each stored answer that lacks that check (stored before "
        "2026-11-27; the compiler's bytes are not monotone in the batch); where it fits, the "
        "search goes on above it. These checks run before the selected cells not computed yet",
    )
    p.add_argument(
        "--one-mesh",
        action="store_true",
        help="search each cell on its first mesh only (the most room by arithmetic) and store "
        "that answer marked '?', its other meshes left to a run without this flag: for a host "
        "whose memory cannot hold their compiles (asking a 4x2 tpu7x-8 about gemma3-27b's full "
        "fine-tune grew the search to 23.5 GB)",
    )
    p.add_argument("--render-only", action="store_true", help="no compiles: rewrite the docs")
    p.add_argument("--store", type=Path, default=STORE)
    p.add_argument("--md", type=Path, default=MARKDOWN)
    p.add_argument("--csv", type=Path, default=TABLE)
    p.add_argument("--figure", type=Path, default=FIGURE)
    args = p.parse_args(argv)
    model_names = _names(args.models, models.MODEL_NAMES, "model")
    targets = [parse_target(t).name for t in args.targets.split(",") if t]
    recipes = _names(args.recipes, RECIPES, "recipe")
    shard, shards = parse_shard(args.shard)
    grid = selected(cells(model_names, targets, recipes), parse_only(args.only))
    signal.signal(signal.SIGTERM, _stop)
    start = time.monotonic()
    if not args.render_only:
        if flags := libtpu_flags():
            raise BadInput(
                f"LIBTPU_INIT_ARGS is set ({flags['libtpu_init_args']}): the atlas is compiled "
                "with libtpu's defaults; unset it, or ask one cell with a flag with `python -m "
                "shared.plan ... --max-batch`"
            )
        versions = plan.versions()
        skipped = {c.recipe for c in grid if RECIPES[c.recipe]["workload"] not in plan.WORKLOADS}
        for recipe in sorted(skipped):
            print(
                f"skipping {recipe}: shared.plan has no {RECIPES[recipe]['workload']!r} "
                f"workload (it has {', '.join(plan.WORKLOADS)})",
                flush=True,
            )
        retry = {
            "retry_failed": args.retry_failed,
            "retry_gaps": args.retry_gaps,
            "check_above": args.check_above,
            "one_mesh": args.one_mesh,
        }
        left = todo(
            [c for c in grid if c.recipe not in skipped],
            read_store(args.store),
            versions,
            **retry,
        )[shard - 1 :: shards]
        print(
            f"{len(left)} cells to compute ({len(grid)} selected"
            f"{f', shard {shard} of {shards}' if shards > 1 else ''})",
            flush=True,
        )
        try:
            for number, cell in enumerate(left, 1):
                minutes = (time.monotonic() - start) / 60
                if args.limit_minutes is not None and minutes >= args.limit_minutes:
                    print(
                        f"time budget of {args.limit_minutes:g} min spent ({minutes:.0f} "
                        f"min): {len(left) - number + 1} cells left for the next run",
                        flush=True,
                    )
                    break
                for row in finish_cell(args, cell, versions, retry):
                    print(
                        f"[{number}/{len(left)}] {cell.recipe} {cell.model} on {cell.target}: "
                        f"{row.get('summary') or row.get('error')} ({row.get('compiles', 0)} "
                        f"compiles, {row['wall_s']:.0f} s)",
                        flush=True,
                    )
        except KeyboardInterrupt:
            print("stopped: the cell in progress is not stored; rendering", flush=True)
    # After a run the page is the whole atlas, whatever it computed: --models, --targets,
    # --recipes and --only chose the cells to compute (a run narrowed to qwen3-30b-a3b's GPU cells
    # once rewrote the page without gemma4-26b-a4b's rows); --render-only draws what it names
    grid = (model_names, targets, recipes)
    if not args.render_only:
        grid = (list(MODELS), list(TARGETS), list(RECIPES))
    rows = read_store(args.store)
    md, table = render(rows, *grid, "python benchmarks/bench_atlas.py --render-only")
    files.write_atomic(args.md, md.encode())
    files.write_atomic(args.csv, table.encode())
    figure.write(args.figure, rows, *grid)
    print(f"wrote {args.md}, {args.csv} and {args.figure}", flush=True)
    return 0
