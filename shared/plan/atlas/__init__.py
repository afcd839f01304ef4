"""The atlas: does model M fit slice C for recipe R, and at what batch? One table a recipe.

Each cell is `shared.plan.max_batch`: the largest batch the TPU compiler (libtpu, deviceless)
says fits at the recipe's stated lengths, the compiler's verdict at the boundary. Cells land in
their own store, `benchmarks/results/atlas.jsonl`, one JSON line per finished cell (appended,
flushed and fsynced; an unreadable line, such as a truncated last one, is ignored on read). A
cell is identified by model, target, recipe, the recipe's settings, its workload revision
(`revision`) and the versions of jax/libtpu/tunix/qwix/flax, so the store, not shared.plan's
disk cache (invalidated whenever a module under the verdict changes: shared.plan.sources), is
what a run resumes from: cells already there are skipped.
`docs/atlas.md` and `docs/atlas.csv` are rendered from the store at the end of every run.

Cells run cheapest first (GRPO's last, then small models, single-chip slices: store.cells), so
a partial atlas is useful; a big model on a small chip is quick too (not even the smallest
batch fits). Modules: `store` (the grid and the store), `run` (one cell), `render` (the page),
`cli` (growing it piecewise: `python benchmarks/bench_atlas.py`, see there).
"""

from shared.plan.atlas.cli import main
from shared.plan.atlas.render import render
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
    MULTI_DEVICE_REVISIONS,
    RECIPES,
    REVISIONS,
    STORE,
    TARGETS,
    Cell,
    append_row,
    cells,
    has_gap,
    needs_check,
    older_search,
    parse_only,
    read_store,
    revision,
    selected,
    stepped_coarsely,
    todo,
)

__all__ = [
    "MODELS",
    "MULTI_DEVICE_REVISIONS",
    "RECIPES",
    "REVISIONS",
    "STORE",
    "TARGETS",
    "Cell",
    "append_row",
    "cells",
    "check_row",
    "coarse_row",
    "gap_row",
    "mesh_row",
    "has_gap",
    "main",
    "needs_check",
    "older_search",
    "parse_only",
    "read_store",
    "render",
    "revision",
    "run_cell",
    "run_cell_alone",
    "selected",
    "stepped_coarsely",
    "todo",
]
