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
from shared.plan.compiler.cache_entries import compiler_versions
from shared.plan.workloads import READS
from shared.plan.workloads.request import Request

_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Request)}


def _differences(request: Request, settings: dict) -> dict[str, tuple]:
    """The fields the request's workload reads (but the batch, which is searched) where it
    differs from a recipe's `settings`: name -> (the recipe's value, the request's)."""
    fields = [f for f in READS[request.workload] if f != "batch"]
    recipe = {f: settings.get(f, _DEFAULTS[f]) for f in fields}
    return {f: (recipe[f], getattr(request, f)) for f in fields if getattr(request, f) != recipe[f]}


def _recipes_for(request: Request) -> list[str]:
    """The recipes of the request's workload, none where it pins what a search chooses (a
    mesh) or asks a cheaper compile than the atlas's (fast, fewer layers)."""
    if request.mesh is not None or request.fast or request.layers is not None:
        return []
    return [name for name, s in RECIPES.items() if s["workload"] == request.workload]


def recipe_of(request: Request) -> str | None:
    """The atlas recipe the request asks for, or None when any field it reads differs."""
    for name in _recipes_for(request):
        if not _differences(request, RECIPES[name]):
            return name
    return None


# a search this near a committed cell is worth pointing at it (python -m shared.plan
# rollout --max-batch leaves cache_size at prompt + steps, where the atlas's recipe holds the
# field's 1312 slots: 3064 against the atlas's 3000 for gemma3-1b on a v5e-8, in 7 compiles)
NEARBY_FIELDS = 2


def nearby_cell(request: Request, store: Path = STORE) -> tuple[dict, dict] | None:
    """A committed cell (a current, successful row at these versions, not an older search's)
    for the request's model, target and workload at settings that differ from the request's in
    at most NEARBY_FIELDS fields, with those differences (name -> (the cell's, the request's)):
    a pointer while the request's own search compiles, never its answer."""
    for name in _recipes_for(request):
        differences = _differences(request, RECIPES[name])
        if not differences or len(differences) > NEARBY_FIELDS:
            continue
        row = _current_row(name, request, store)
        if row is not None:
            return None if older_search(row) else (row, differences)
    return None


def _current_row(recipe: str, request: Request, store: Path) -> dict | None:
    """The store's newest row of the recipe's cell for the request's model and target, where
    it succeeded at these versions and libtpu flags (cache_entries.compiler_versions); else None."""
    key = (recipe, request.model, parse_target(request.target).name)
    row = newest(read_store(store)).get(key)
    if row is None or row["status"] != "ok" or row["versions"] != compiler_versions(request.target):
        return None
    return row


def committed_search(request: Request, multiple_of: int | None, store: Path = STORE) -> dict | None:
    """The stored cell for this search, or None: no such recipe, no current row, a failed row,
    other versions, or other steps: `multiple_of` on every mesh the row searched, or by default
    each mesh's least batch (a row of an older search, older_search, is no answer to that)."""
    recipe = recipe_of(request)
    if recipe is None:
        return None
    row = _current_row(recipe, request, store)
    if row is None:
        return None
    if multiple_of is None:
        return None if older_search(row) else row
    return row if set(stepped_units(row).values()) == {multiple_of} else None
