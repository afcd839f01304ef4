"""The committed atlas answering a search: a `--max-batch` request that is one of the atlas's
cells (its recipe's settings, every other field the workload reads at its default, the default
mesh, the search's steps, the same library versions) is answered from the store in a second
instead of minutes of compiles. The stored cell is itself an exact compile at the boundary, made
by the same search; anything that differs from it (a flag, a version, the mesh) compiles."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from shared.hardware import parse_target
from shared.plan.atlas.store import (
    RECIPES,
    STORE,
    newest,
    older_search,
    read_store,
    stepped_units,
)
from shared.plan.verdict import Request
from shared.plan.workloads import READS
from shared.versions import versions

_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Request)}


def recipe_of(request: Request) -> str | None:
    """The atlas recipe the request asks for, or None when any field it reads differs."""
    if request.mesh is not None or request.fast or request.layers is not None:
        return None
    for name, settings in RECIPES.items():
        if settings["workload"] != request.workload:
            continue
        fields = [f for f in READS[request.workload] if f != "batch"]  # the batch is searched
        if all(getattr(request, f) == settings.get(f, _DEFAULTS[f]) for f in fields):
            return name
    return None


def committed_search(request: Request, multiple_of: int | None, store: Path = STORE) -> dict | None:
    """The stored cell for this search, or None: no such recipe, no current row, a failed row,
    other versions, or other steps: `multiple_of` on every mesh the row searched, or by default
    each mesh's least batch (a row of an older search, older_search, is no answer to that)."""
    recipe = recipe_of(request)
    if recipe is None:
        return None
    key = (recipe, request.model, parse_target(request.target).name)
    row = newest(read_store(store)).get(key)
    if row is None or row["status"] != "ok" or row["versions"] != versions():
        return None
    if multiple_of is None:
        return None if older_search(row) else row
    return row if set(stepped_units(row).values()) == {multiple_of} else None
