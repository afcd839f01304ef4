"""Batches in words, as the search's one-line answer (view.describe), the atlas's page
and CSV (atlas.render) and the lookup say them. Its own module, without jax: the lookup and the
renderer answer from the committed table without importing the compiler."""

from __future__ import annotations


def stopped_with_gap(largest: int, first_fail: int | None, unit: int) -> bool:
    """Whether a search's answer `largest` and its least failure above `first_fail` are more
    than one `unit` apart: it stopped with batches between them not compiled, which may fit."""
    return bool(largest and first_fail and first_fail - largest > unit)


def listed(batches: list[int]) -> str:
    """Batches in words: "8", "8 and 16", "8, 16 and 24"."""
    *before, last = map(str, batches)
    return f"{', '.join(before)} and {last}" if before else last


def failed_batches(errors: list[dict]) -> str:
    """Where a search's compiler failed (search_result.compiler_errors), in words, each mesh's
    batches together where the search asked several meshes: "batches 136 and 152 on 8x1;
    batch 132 on 4x2"."""
    by_mesh: dict[str | None, list[int]] = {}
    for e in errors:
        by_mesh.setdefault(e.get("mesh"), []).append(e["batch"])
    return "; ".join(
        ("batches " if len(batches) > 1 else "batch ")
        + listed(batches)
        + (f" on {mesh}" if mesh else "")
        for mesh, batches in by_mesh.items()
    )
