"""The atlas's grid (models x targets x recipes, each recipe's settings and workload revision)
and its store, benchmarks/results/atlas.jsonl: one JSON line per finished cell, appended and
fsynced; a cell already stored at the same settings, revision and versions is not run again."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import sys
from pathlib import Path

from shared import models, plan, sizing
from shared.errors import BadInput, choose
from shared.hardware import parse_target
from shared.hardware.sharding import mesh_name, mesh_shape
from shared.paths import ROOT
from shared.plan.compiler.cache_entries import gpu_compiler
from shared.plan.compiler.target import target_devices
from shared.plan.mesh.choice import least_batch, wider_shapes
from shared.plan.search.lines import checks_above

STORE = ROOT / "benchmarks" / "results" / "atlas.jsonl"
MODELS = (
    *("gemma3-1b", "gemma2-2b", "gemma3-4b", "gemma4-e4b", "llama3.1-8b", "qwen3-8b"),
    *("gemma3-12b", "gemma3-27b", "gemma4-31b"),
    *("gemma4-26b-a4b", "qwen3-30b-a3b"),  # mixtures of experts (shared.models.expert_routing)
)
# TPU slices, then the GPU machines a budget holds: Kaggle's free T4 pair, Colab's L4, one
# A100 80 GB, one H100 and eight (each compiled without the GPU, at jax's default memory fraction)
TARGETS = (
    *("v5e-1", "v6e-1", "v5e-8", "v6e-8", "v5p-8", "tpu7x-8"),
    *("t4-2", "l4-1", "a100-80g-1", "h100-1", "h100-8"),
)
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(plan.Request)}
# What a GRPO step's default recipe is made of: the fields shared.plan.workloads.grpo reads,
# and `tunix`, which it does not (kept: the recipe is part of every stored GRPO row's key).
_GRPO_FIELDS = (
    "prompt_len",
    "steps",
    "cache_size",
    "lora_rank",
    "num_generations",
    "num_iterations",
    "beta",
    "logps",
    "remat",
    "tunix",
)

# The recipes at their stated lengths: plan.Request fields (everything else at its default).
RECIPES: dict[str, dict] = {
    "rollout": {
        "workload": "rollout",
        "prompt_len": 256,
        "steps": 1024,
        "cache_size": 1312,
        "tunix": "0.1.7",
    },
    "lora-train": {
        "workload": "lora-train",
        "seq": 2048,
        "lora_rank": 16,
        "remat": "none",
        "loss": "chunked",
        "microbatches": 1,
    },
    # the grpo workload's default recipe: Request's defaults for the fields it reads
    "grpo": {"workload": "grpo", **{k: _DEFAULTS[k] for k in _GRPO_FIELDS if k in _DEFAULTS}},
    # a full fine-tune at the LoRA recipe's length: every weight and its fp32 Adam moments
    "sft": {"workload": "sft", "seq": 2048, "remat": "none", "loss": "chunked", "microbatches": 1},
}
# What a workload compiles can change with our code while every version stays the same, and
# the store cannot see our code: bump a recipe's revision when a change to its workload moves
# the bytes it compiles to, and the next run recomputes that recipe's cells.
# lora-train 2: the Adam moments start fp32 (12cde66), so the step holds the whole optimizer
# state from the first call.
REVISIONS = {"rollout": 1, "lora-train": 2, "grpo": 1, "sft": 1}
# A change that moves only programs spread over several devices bumps these alone, so the
# single-chip cells it cannot change stand. 2/3/2: tunix's activation shardings honoured
# (shared.models.activation_sharding); on one device a constraint has nothing to split, and the
# same LoRA step compiles to the same bytes with and without them
# (benchmarks/results/activation_sharding.json's v5e-1 point, tests/test_activation_sharding.py).
MULTI_DEVICE_REVISIONS = {"rollout": 2, "lora-train": 3, "grpo": 2, "sft": 1}


def revision(recipe: str, target: str) -> int:
    """The workload revision a cell of `recipe` on `target` is computed at."""
    multi = parse_target(target).devices > 1
    return (MULTI_DEVICE_REVISIONS if multi else REVISIONS)[recipe]


# ---------------------------------------------------------------------------- the store


def cell_key(
    model: str, target: str, recipe: str, settings: dict, revision: int, versions: dict
) -> str:
    blob = json.dumps(
        {
            "model": model,
            "target": target,
            "recipe": recipe,
            "settings": settings,
            "revision": revision,
            "versions": versions,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def row_key(row: dict) -> str:
    fields = ("model", "target", "recipe", "settings", "revision", "versions")
    return cell_key(*(row[field] for field in fields))


def read_store(path: Path) -> list[dict]:
    """Every readable row; an unreadable line (a truncated last write) is skipped, said once."""
    if not path.exists():
        return []
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            row_key(row)
        except (ValueError, KeyError, TypeError) as err:
            print(
                f"atlas store: ignoring unreadable line {number} of {path.name} "
                f"({type(err).__name__})",
                file=sys.stderr,
            )
            continue
        rows.append(row)
    return rows


def append_row(path: Path, row: dict) -> None:
    """One line, one write, flushed and fsynced; a line cut short before it is closed first so
    the new row never glues onto it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(row, sort_keys=True) + "\n").encode()
    with open(path, "ab+") as handle:
        if handle.seek(0, os.SEEK_END):
            handle.seek(-1, os.SEEK_END)
            if handle.read(1) != b"\n":
                line = b"\n" + line
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())


# ---------------------------------------------------------------------------- the cells


@dataclasses.dataclass(frozen=True)
class Cell:
    model: str
    target: str
    recipe: str

    @property
    def settings(self) -> dict:
        return RECIPES[self.recipe]

    @property
    def revision(self) -> int:
        return revision(self.recipe, self.target)

    def key(self, versions: dict) -> tuple:
        """The key a row of this cell at these versions has (row_key); a GPU cell's versions
        hold its CUDA compiler's too (cache_entries.gpu_compiler)."""
        return cell_key(
            self.model,
            self.target,
            self.recipe,
            self.settings,
            self.revision,
            versions | gpu_compiler(self.target),
        )


def model_params(model: str) -> int:
    return sizing.param_counts(models.model_dims(model))["total"]


# A GRPO verdict compiles five executables (the rollout's prefill and decode, the reference's
# and old policy's log-probs, the update) where the other recipes compile one or two: 411 s a
# compile on a multi-chip cell against 65-112 s for the others (medians over atlas.jsonl,
# 2026-11-28), so a run fills the other recipes' cells first
SLOWEST_RECIPE = "grpo"


def cells(model_names, targets, recipes) -> list[Cell]:
    """Every cell, cheapest first: GRPO's last (SLOWEST_RECIPE), then fewer parameters, then
    fewer devices, then the recipe."""
    order = list(recipes)
    return sorted(
        (Cell(m, t, r) for m in model_names for t in targets for r in recipes),
        key=lambda c: (
            c.recipe == SLOWEST_RECIPE,
            model_params(c.model),
            parse_target(c.target).devices,
            order.index(c.recipe),
        ),
    )


def parse_only(spec: str | None) -> dict[str, set[str]]:
    """`model=a,model=b,target=v5e-1,recipe=rollout`: repeated keys are alternatives."""
    only: dict[str, set[str]] = {}
    for part in filter(None, (spec or "").split(",")):
        key, sep, value = part.partition("=")
        if not sep or not value:
            raise BadInput(f"--only wants key=value pairs separated by commas, got {part!r}")
        only.setdefault(
            choose("--only key", key.strip(), ("model", "target", "recipe")), set()
        ).add(value.strip())
    return only


def selected(all_cells: list[Cell], only: dict[str, set[str]]) -> list[Cell]:
    for key, values in only.items():
        known = {getattr(c, key) for c in all_cells}
        for value in values:
            choose(f"{key} in the atlas grid", value, sorted(known))
    return [c for c in all_cells if all(getattr(c, k) in v for k, v in only.items())]


def _request_of(row: dict) -> plan.Request:
    """The request a stored row's search answered (the mesh left to the search)."""
    return plan.Request(model=row["model"], target=row["target"], **row["settings"])


def stepped_units(row: dict) -> dict[str, int]:
    """Each mesh a stored search compiled on, with the step it took there: the row's `units`
    (stored since 2026-11-27), else the row's one unit for every mesh it names."""
    if "units" in row:
        return row["units"]
    meshes = row.get("mesh_answers") or {row.get("mesh") or f"{row['devices']}x1": 0}
    return dict.fromkeys(meshes, row["multiple_of"])


def stepped_coarsely(row: dict) -> bool:
    """Whether a stored search stepped a mesh by more than that mesh's least batch
    (shared.plan.mesh.choice.least_batch): until 2026-11-27 the atlas stepped every mesh by the rule
    mesh's unit, so llama3.1-8b LoRA on a v5e-8 asked 1x8 for batch 8 alone, never 1 to 7,
    and stored "not even batch 8 fits on any mesh". A row that fit nothing may have searched
    meshes it does not name (stored before `mesh_answers`): it counts as stepped coarsely
    when a one-row-a-device mesh's least batch is under its unit. Arithmetic: today's search
    answers these cells again by default (todo)."""
    if row.get("status") != "ok" or "units" in row:
        return False
    request = _request_of(row)
    steps = stepped_units(row)
    if row["max_batch"] == 0 and row["devices"] > 1 and not row.get("mesh_answers"):
        steps = {**steps, f"1x{row['devices']}": row["multiple_of"]}
    return any(
        least_batch(request, mesh_shape(mesh, row["devices"])[0]) < unit
        for mesh, unit in steps.items()
    )


def skipped_a_mesh(row: dict) -> bool:
    """Whether a stored multi-chip answer was found before a search asked every mesh the
    weights divide (shared.plan.search.max_batch; rows store `mesh_ceilings` since
    2026-11-28). Until then a wider tp was searched only where it doubled the room of the mesh
    before it, or came past one that fit nothing, so llama3.1-8b rollouts on a v6e-8 answered
    360 on 8x1, where 2x4 fits 674. Such a row is an older search's where one of those meshes
    is not among its `mesh_answers` (a mesh too narrow to hold the weights counts too, though
    today's search leaves it out: which meshes hold them is a workload's build, seconds a
    cell, where the page is rendered for every cell). A row of today's search skipped one where
    it was told to search its first mesh only (bench_atlas.py --one-mesh): a mesh of its
    `mesh_ceilings` is not among its `mesh_answers`, "none fits" too."""
    if row.get("status") != "ok":
        return False
    if "mesh_ceilings" in row:
        return bool(unasked_meshes(row))
    if row["devices"] == 1 or not row["max_batch"]:
        return False
    asked = _asked_meshes(row)
    settings = json.dumps(row["settings"], sort_keys=True)
    return not asked.issuperset(_dividing_meshes(row["model"], row["target"], settings))


def unasked_meshes(row: dict) -> list[str]:
    """The meshes of a row's `mesh_ceilings` (today's search: every mesh it asks) it did not
    ask, as 'FxT': those a search on its first mesh only left (bench_atlas.py --one-mesh).
    Nothing where its answer is the search's ceiling: no mesh can beat that."""
    ceilings = row.get("mesh_ceilings") or {}
    if row.get("status") != "ok" or row["at_least"] or not ceilings:
        return []
    asked = _asked_meshes(row)
    return [mesh for mesh in ceilings if mesh not in asked]


def _asked_meshes(row: dict) -> set[str]:
    """The meshes a stored row's search asked: its `mesh_answers`, else its one mesh."""
    return set(row.get("mesh_answers") or [row.get("mesh") or f"{row['devices']}x1"])


@functools.cache
def _dividing_meshes(model: str, target: str, settings: str) -> tuple[str, ...]:
    """Every mesh of the target whose axes divide the cell's weights, as 'FxT'."""
    request = plan.Request(model=model, target=target, **json.loads(settings))
    devices = target_devices(parse_target(target))
    return tuple(mesh_name(m) for m in wider_shapes(request, devices, than=(len(devices), 0)))


def older_search(row: dict) -> bool:
    """Whether today's search may answer a stored row differently, the versions and workload
    the same: it stepped a mesh coarsely or did not ask every mesh. Any run computes
    these cells again, first; the page marks them with a '?'."""
    return stepped_coarsely(row) or skipped_a_mesh(row)


def reasked(rows: list[dict]) -> list[tuple[dict, dict]]:
    """(before, after) for every cell an older search answered (older_search) and today's
    search answered again at the same versions and revision: the answer a reader was shown
    before, the newest older-search row, beside the newest row after it. How often the
    older answers were wrong, read off the store, so the page says how far to trust the
    cells still marked '?'."""
    by_cell: dict[str, list[dict]] = {}
    for row in rows:
        if row.get("status") == "ok":
            by_cell.setdefault(row_key(row), []).append(row)
    pairs = []
    for cell_rows in by_cell.values():
        cell_rows.sort(key=lambda r: r["date"])
        is_older = [older_search(r) for r in cell_rows]
        older = [r for r, o in zip(cell_rows, is_older, strict=True) if o]
        if not older:
            continue
        after = [
            r
            for r, o in zip(cell_rows, is_older, strict=True)
            if not o and r["date"] > older[0]["date"]
        ]
        if after:
            before = [r for r in older if r["date"] < after[-1]["date"]][-1]
            pairs.append((before, after[-1]))
    return pairs


def stored_row(rows: list[dict], cell: Cell, versions: dict) -> dict | None:
    """The newest row for `cell` at these versions, or None."""
    key = cell.key(versions)
    return max((r for r in rows if row_key(r) == key), key=lambda r: r["date"], default=None)


def needs_check(row: dict) -> bool:
    """Whether a stored answer lacks one of the search's checks above it
    (shared.plan.search.lines.checks_above; shared.plan.search.gap.check_above compiles them): an
    ok row whose search converged on a batch that fits, with a failure one unit above it, and no
    `checked_above` field (two units above: rows stored before 2026-11-27) or no `checked_aligned`
    where that check is further (the next ALIGNED_ROWS rows a device: stored before 2026-11-28)."""
    if not (
        row.get("status") == "ok"
        and row["max_batch"] > 0
        and not row["at_least"]
        and row["converged"]
    ):
        return False
    if "checked_above" not in row:
        return True
    if "checked_aligned" in row:  # stored since: checked, or nothing to check (None)
        return False
    if row.get("mesh") is None and row["devices"] > 1:  # its fsdp is not stored: unknown
        return True
    fsdp = int(row["mesh"].split("x")[0]) if row.get("mesh") else 1
    return len(checks_above(row["max_batch"], row["multiple_of"], fsdp)) > 1


def has_gap(row: dict) -> bool:
    """Whether a stored search stopped between a fitting batch and a failing one more than a
    unit apart (its exact rounds ran out): a gap shared.plan.search.gap closes from the row."""
    return (
        row.get("status") == "ok"
        and not row["converged"]
        and row["max_batch"] > 0
        and row["first_not_fitting"] is not None
    )


def todo(
    candidates: list[Cell],
    rows: list[dict],
    versions: dict,
    retry_failed: bool = False,
    retry_gaps: bool = False,
    check_above: bool = False,
    one_mesh: bool = False,
) -> list[Cell]:
    """The cells without a row for these settings, revision and versions, or whose row today's
    search may answer differently (older_search); on request also those whose
    row failed, whose search stopped with a gap, or (`check_above`) whose answer lacks the
    check two units above it (needs_check), those first: a better search may change them, and
    the newest row is the one shown. `one_mesh` (bench_atlas.py --one-mesh): a row that left a
    mesh unasked is done, as a search on its first mesh only would leave it."""

    def again(row: dict) -> bool:
        if row.get("status") != "ok":
            return retry_failed
        return (retry_gaps and not row["converged"]) or (check_above and needs_check(row))

    shown = {c: stored_row(rows, c, versions) for c in candidates}  # a cell's newest row decides
    # an older search's row: asked once a row (skipped_a_mesh builds the model)
    redo = stepped_coarsely if one_mesh else older_search
    older = {c: bool(row and redo(row)) for c, row in shown.items()}
    left = [c for c, row in shown.items() if row is None or older[c] or again(row)]

    def first(cell: Cell) -> tuple[bool, bool]:
        """Answers shown that a search may change first: the checks (one compile each), then
        the rows of an older search."""
        row = shown[cell]
        return not (row and check_above and needs_check(row)), not older[cell]

    return sorted(left, key=first)


# ---------------------------------------------------------------------------- rendering


def newest(rows: list[dict]) -> dict[tuple[str, str, str], dict]:
    """Per (recipe, model, target), the newest row at the recipe's current settings and
    revision."""
    best: dict[tuple[str, str, str], dict] = {}
    for row in rows:
        if row["recipe"] not in RECIPES:
            continue
        current = (RECIPES[row["recipe"]], revision(row["recipe"], row["target"]))
        if current != (row["settings"], row["revision"]):
            continue
        key = (row["recipe"], row["model"], row["target"])
        if key not in best or row["date"] >= best[key]["date"]:
            best[key] = row
    return best


# ---------------------------------------------------------------------------- the command
