"""What a batch search returns (docs/search.md, "What a search returns"; the search is
shared.plan.search.max_batch): one mesh's answer read off its exact verdicts, with every probe
that located it, and each mesh's answer for a comparison."""

from __future__ import annotations

import dataclasses
import time

from shared.plan.search.lines import bracket, checked_fields
from shared.plan.search.words import stopped_with_gap
from shared.plan.workloads.request import Request


def mesh_answer(search: dict) -> int | str:
    """One mesh's answer for `mesh_answers`: its largest batch; "<N" where its only exact
    compile was a failure above one unit (asked whether it fits N, another mesh's answer);
    "N..M" where its search stopped with a gap, N fitting and M not, nothing between compiled
    (gemma3-12b rollouts on a 1x8 tpu7x-8 under a libtpu flag: located fits at 987-993 all
    failed exactly, and the mesh was said to fit 1, as if settled)."""
    largest, first_fail = search["max_batch"], search["first_not_fitting"]
    if stopped_with_gap(largest, first_fail, search["multiple_of"]):
        return f"{largest}..{first_fail}"
    failed = first_fail or min(compiler_failed(search), default=None)
    if largest or failed is None or failed <= search["multiple_of"]:
        return largest
    return f"<{failed}"


def compiler_failed(search: dict) -> list[int]:
    """The batches a search's compiler failed on (search_result's `compiler_errors`)."""
    return [f["batch"] for f in search.get("compiler_errors", [])]


def compiler_errors(failed_at: dict[int, dict]) -> list[dict]:
    """The verdicts a compiler failed on (by batch) as a search result or a store row keeps
    them: each batch with its first message, in order."""
    return [
        {"batch": b, "error": next(iter(p["compiler_errors"].values()))}
        for b, p in sorted(failed_at.items())
    ]


def worst_at_answer(search: dict) -> str | None:
    """The executable that was worst in a mesh's search's exact verdict at its answer (None:
    nothing fit), the likeliest to fail at a larger batch or on a mesh with less room."""
    at = [p for p in search["probes"] if not p["fast"] and p["batch"] == search["max_batch"]]
    return at[-1].get("worst") if search["max_batch"] and at else None


def search_result(
    request: Request,
    shape: tuple[int, int],
    unit: int,
    ceiling: int,
    exact: dict[int, dict],
    probes: list[dict],
    assigned_probes: list[dict],
    start: float,
    failed_at: dict[int, dict] | None = None,
) -> dict:
    """One mesh's search as max_batch returns it: the answer read off its exact verdicts
    (`exact`, by batch), with every probe it compiled or read from the cache (`probes`, the
    whole model's verdicts, and `assigned_probes`, its bytes at buffer assignment), on the
    (fsdp, tp) mesh `shape`. `failed_at`: the verdicts, by batch, the compiler failed on
    (lines.set_aside_compiler_failures), each with its first message."""
    largest, first_fail = bracket(exact)
    errors = compiler_errors(failed_at or {})
    failed = {b for b, p in exact.items() if not p["fits"]}
    return {
        **dataclasses.asdict(request),
        "multiple_of": unit,
        "max_batch": largest,
        "first_not_fitting": first_fail,
        # the checks above the answer (max_batch's loop), where they were compiled and failed:
        # two units above, and the next batch of ALIGNED_ROWS rows a device (since 2026-11-28)
        **checked_fields(largest, unit, shape[0], failed),
        # failing exact batches below the answer: the compiler's bytes are not monotone
        "dips": sorted(b for b, p in exact.items() if not p["fits"] and b < largest),
        # where the compiler failed (not for lack of HBM): the search went on below each
        "compiler_errors": errors,
        # no batch failed: the answer is a lower bound (the ceiling, or MAX_EXACT, stopped it)
        "at_least": first_fail is None and not any(e["batch"] > largest for e in errors),
        "ceiling": ceiling,
        "converged": first_fail is not None and first_fail - largest <= unit or largest >= ceiling,
        "compiles": sum(
            not p["cached"] and p.get("compiled", True) for p in (*probes, *assigned_probes)
        ),
        "probes": probes,
        "assigned_probes": assigned_probes,
        "wall_s": time.perf_counter() - start,
    }
