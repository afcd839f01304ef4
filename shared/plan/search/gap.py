"""Closing a stored search's gap: a batch that fits and one that does not, more than a unit
apart, where the search ran out of exact rounds (shared.plan.search.max_batch.MAX_EXACT;
docs/search.md, "What a search returns").

Both ends are the compiler's verdicts for the same request: the atlas keeps a row per workload
revision and versions, and only a change to shared/ (any source, the plan cache's key) made
the cache forget them. So the gap is closed by exact compiles inside it alone, nothing located
and nothing outside it compiled again: halving it (thirds where a step's verdict is one
executable, two of which compile at once: lines.compiles_alone). Rerunning the whole search
instead costs every compile again (gemma3-1b GRPO on a v5p-8 stopped at 200 fits, 208 does
not, unit 4: a compile at 204, which fits, and the check at 212 closed it in 15 minutes, where
its whole search had taken 11 compiles and 45).
Halving, not a line: the gaps it closes are where lines failed (bytes that bend upward, or a
compiler that squeezes near the HBM), and halving needs no bytes of the stored ends, which the
store does not keep. `check_above` compiles the checks above a stored answer the same way:
alone, from the row, nothing located below them.
"""

from __future__ import annotations

import dataclasses

from shared.hardware.sharding import mesh_name
from shared.plan.mesh.steps import pinned_to
from shared.plan.search.lines import (
    bracket,
    checks_above,
    compiles_alone,
    set_aside_compiler_failures,
)
from shared.plan.search.max_batch import searcher
from shared.plan.search.result import compiler_errors
from shared.plan.verdict import plan_points
from shared.plan.workloads.request import Request


def inside(fits: int, fails: int, unit: int, parts: int) -> list[int]:
    """The multiples of `unit` that split the open bracket (fits, fails) into `parts` about
    equal parts, ascending and distinct (fewer where the bracket is narrow)."""
    batches = {(fits + (fails - fits) * k // parts) // unit * unit for k in range(1, parts)}
    return sorted(b for b in batches if fits < b < fails)


def close_gap(
    request: Request,
    shape: tuple[int, int],
    fits: int,
    fails: int,
    unit: int,
    *,
    use_cache: bool = True,
    progress: bool = True,
) -> dict:
    """Exact compiles inside the bracket (`fits`, `fails`) on the (fsdp, tp) mesh `shape`
    until a fitting batch and a failing one sit one unit apart: `max_batch`,
    `first_not_fitting`, the failures below the answer (`dips`) and the exact verdicts
    compiled (`probes`), in order. The check two units above the answer is the caller's
    (check_above, or nothing where that batch is a known failure)."""
    from tqdm.auto import tqdm

    request = pinned_to(request, shape)
    # the stored ends as the search's bracket reads them (lines.bracket: a failure below
    # the largest fit is a dip, not a bound), then every exact verdict inside, by batch
    exact: dict[int, dict] = {fits: {"fits": True}, fails: {"fits": False}}
    failed: dict[int, dict] = {}  # where the compiler failed: a bound, but not for bytes
    top = fails - unit  # the largest batch the gap may hold, below any such failure
    probes: list[dict] = []
    parts = 2
    with tqdm(
        desc=f"gap {fits}-{fails} {request.workload} {request.model} on {request.target}",
        unit="compile",
        disable=not progress,
    ) as bar:
        while fails - fits > unit:
            batches = inside(fits, fails, unit, parts)
            bar.set_postfix(batch=",".join(map(str, batches)))
            points = plan_points(
                [dataclasses.replace(request, batch=b, fast=False) for b in batches],
                use_cache=use_cache,
            )
            probes.extend(points)
            bar.update(len(points))
            exact.update((p["batch"], p) for p in points)
            top = set_aside_compiler_failures(exact, failed, top, unit)
            fits, fails = bracket(exact)
            fails = min(fails, top + unit)
            parts = 3 if compiles_alone(points[0]) else 2
    dips = sorted(b for b, p in exact.items() if not p["fits"] and b < fits)
    return {
        "max_batch": fits,
        "first_not_fitting": fails if fails in exact else None,  # else the compiler's failure
        "dips": dips,
        "probes": probes,
        "compiler_errors": compiler_errors(failed),
    }


def check_above(
    request: Request,
    shape: tuple[int, int],
    answer: int,
    multiple_of: int,
    known_failures: set[int] = frozenset(),
    *,
    worst: str | None = None,
    use_cache: bool = True,
    progress: bool = True,
) -> dict:
    """max_batch's checks (step 3) for an `answer` found on the mesh `shape` without them (the
    atlas's rows stored before 2026-11-27 lack both, those before 2026-11-28 the aligned one):
    each batch of lines.checks_above not in `known_failures`, compiled exactly, in
    order, `worst` (the executable worst at the answer) alone first; where one fits, the
    search goes on above it, as max_batch's would. The mesh's search: max_batch 0 where the
    answer stands, `checked` the batches compiled."""
    mesh = {"fsdp": shape[0], "tp": shape[1]}
    units = {mesh_name(mesh): multiple_of}
    checks = [b for b in checks_above(answer, multiple_of, shape[0]) if b not in known_failures]
    if not checks:
        raise ValueError(f"every check above {answer} is a known failure: nothing to compile")
    search = searcher(request, multiple_of, None, use_cache, progress)
    searches = []
    for batch in checks:
        searches.append(search(shape, batch, worst))
        if searches[-1]["max_batch"]:
            break
    together = {key: sum(s[key] for s in searches) for key in ("compiles", "wall_s")}
    for key in ("probes", "assigned_probes", "compiler_errors"):
        together[key] = [p for s in searches for p in s[key]]
    return {**searches[-1], **together, "checked": checks, "mesh_shape": mesh, "units": units}
