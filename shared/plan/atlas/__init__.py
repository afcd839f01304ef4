"""The atlas: does model M fit slice C for recipe R, and at what batch? One table a recipe.

Each cell is `shared.plan.max_batch`: the largest batch the TPU compiler (libtpu, deviceless)
says fits at the recipe's stated lengths, the compiler's verdict at the boundary. Cells land in
their own store, `benchmarks/results/atlas.jsonl`, one JSON line per finished cell (appended,
flushed and fsynced; an unreadable line, such as a truncated last one, is ignored on read). A
cell is identified by model, target, recipe, the recipe's settings, its workload revision
(`revision`) and the versions of jax/libtpu/tunix/qwix/flax, so the store, not shared.plan's
disk cache (invalidated whenever a module under the verdict changes: shared.plan.compiler.sources),
is what a run resumes from: cells already there are skipped.
`docs/atlas.md` and `docs/atlas.csv` are rendered from the store at the end of every run.

Cells run cheapest first (GRPO's last, then small models, single-chip slices: store.cells), so
a partial atlas is useful; a big model on a small chip is quick too (not even the smallest
batch fits). Modules: `store` (the grid and the store), `run` (one cell), `render` (the page),
`cli` (growing it piecewise: `python benchmarks/bench_atlas.py`, see there), `answer` (a
committed cell as a plan answer), `flag` (a cell searched again under a libtpu flag:
benchmarks/bench_libtpu_flag.py), `lookup` (one cell, instantly: it imports no compiler, so the
names below load on first use, PEP 562).
"""

from shared import lazy

# name -> the module that defines it
_EXPORTS = {
    "Cell": "shared.plan.atlas.store",
    "MODELS": "shared.plan.atlas.store",
    "MULTI_DEVICE_REVISIONS": "shared.plan.atlas.store",
    "RECIPES": "shared.plan.atlas.store",
    "REVISIONS": "shared.plan.atlas.store",
    "STORE": "shared.plan.atlas.store",
    "TARGETS": "shared.plan.atlas.store",
    "append_row": "shared.plan.atlas.store",
    "cells": "shared.plan.atlas.store",
    "check_row": "shared.plan.atlas.run",
    "coarse_row": "shared.plan.atlas.run",
    "gap_row": "shared.plan.atlas.run",
    "has_gap": "shared.plan.atlas.store",
    "main": "shared.plan.atlas.cli",
    "mesh_row": "shared.plan.atlas.run",
    "needs_check": "shared.plan.atlas.store",
    "older_search": "shared.plan.atlas.store",
    "parse_only": "shared.plan.atlas.store",
    "read_store": "shared.plan.atlas.store",
    "revision": "shared.plan.atlas.store",
    "run_cell": "shared.plan.atlas.run",
    "run_cell_alone": "shared.plan.atlas.run",
    "selected": "shared.plan.atlas.store",
    "stepped_coarsely": "shared.plan.atlas.store",
    "todo": "shared.plan.atlas.store",
}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy.exports(__name__, _EXPORTS)
