"""The atlas: does model M fit slice C for recipe R, and at what batch? One table a recipe.

Each cell is `shared.plan.max_batch`: the largest batch the TPU compiler (libtpu, deviceless)
says fits at the recipe's stated lengths, the compiler's verdict at the boundary. Cells land in
their own store, `benchmarks/results/atlas.jsonl`, one JSON line per finished cell (appended,
flushed and fsynced; an unreadable line, such as a truncated last one, is ignored on read). A
cell is identified by model, target, recipe, the recipe's settings, its workload revision
(`revision`) and the versions of jax/libtpu/tunix/qwix/flax, so the store, not shared.plan's
disk cache (invalidated whenever any shared/*.py changes), is what a run resumes from: cells
already there are skipped.
`docs/atlas.md` and `docs/atlas.csv` are rendered from the store at the end of every run.

Cells run cheapest first (small models, single-chip slices), so a partial atlas is useful; a
big model on a small chip is quick too (not even the smallest batch fits). Grow it piecewise:

    nice -n 19 python benchmarks/bench_atlas.py --limit-minutes 60 \\
        --only recipe=rollout,model=gemma3-1b,model=gemma2-2b,target=v5e-1,target=v5e-8
    python benchmarks/bench_atlas.py --render-only
"""

from __future__ import annotations

import argparse
import collections
import csv
import dataclasses
import datetime
import hashlib
import io
import json
import math
import os
import signal
import sys
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # plan mode never needs the local accelerator
os.environ.setdefault("WANDB_MODE", "disabled")

from shared import models, plan, sizing  # noqa: E402
from shared.data import files  # noqa: E402
from shared.errors import BadInput, choose, run_cli  # noqa: E402
from shared.hardware import (
    parse_target,  # noqa: E402
    prices,  # noqa: E402
)
from shared.paths import ROOT  # noqa: E402
from shared.plan.search import unit_for  # noqa: E402
from shared.versions import VERSIONED  # noqa: E402

STORE = ROOT / "benchmarks" / "results" / "atlas.jsonl"
MARKDOWN = ROOT / "docs" / "atlas.md"
TABLE = ROOT / "docs" / "atlas.csv"
MODELS = (
    "gemma3-1b",
    "gemma2-2b",
    "gemma3-4b",
    "gemma4-e4b",
    "llama3.1-8b",
    "qwen3-8b",
    "gemma3-12b",
    "gemma3-27b",
    "gemma4-31b",
)
TARGETS = ("v5e-1", "v6e-1", "v5e-8", "v6e-8", "v5p-8", "tpu7x-8")
PRICE_KINDS = ("on-demand", "spot")
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(plan.Request)}
# What a GRPO step's default recipe is made of (the fields shared.plan.workloads.grpo reads).
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
}
# What a workload compiles can change with our code while every version stays the same, and
# the store cannot see our code: bump a recipe's revision when a change to its workload moves
# the bytes it compiles to, and the next run recomputes that recipe's cells.
# lora-train 2: the Adam moments start fp32 (12cde66), so the step holds the whole optimizer
# state from the first call.
REVISIONS = {"rollout": 1, "lora-train": 2, "grpo": 1}
# A change that moves only programs spread over several devices bumps these alone, so the
# single-chip cells it cannot change stand. 2/3/2: tunix's activation shardings honoured
# (shared.models.activation_sharding); on one device a constraint has nothing to split, and the
# same LoRA step compiles to the same bytes with and without them
# (benchmarks/results/activation_sharding.json's v5e-1 point, tests/test_activation_sharding.py).
MULTI_DEVICE_REVISIONS = {"rollout": 2, "lora-train": 3, "grpo": 2}


def revision(recipe: str, target: str) -> int:
    """The workload revision a cell of `recipe` on `target` is computed at."""
    multi = parse_target(target).devices > 1
    return (MULTI_DEVICE_REVISIONS if multi else REVISIONS)[recipe]


TITLES = {
    "rollout": "Rollout: the tunix Sampler (0.1.7 semantics: it donates its KV cache), "
    "256-token prompts, 1024 generation steps, KV cache of 1312 tokens",
    "lora-train": "LoRA fine-tune: one optax step on qwix LoRA parameters (rank 16), "
    "sequence 2048, no remat, chunked loss (no [B, T, V] logits), one micro-batch",
    "grpo": "GRPO: one colocated tunix GRPO step with a LoRA policy (rollout, reference "
    "log-probs, policy update) at the `grpo` workload's defaults: {prompt_len}-token "
    "prompts, {steps}-token completions, {num_generations} per prompt, KL beta {beta}, "
    "log-probs `{logps}`, LoRA rank {lora_rank}; the batch is the sequences per call "
    "of every phase (prompts x generations)".format_map(
        collections.defaultdict(lambda: "?", RECIPES["grpo"])
    ),
}


def _utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:300]


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


def _params(model: str) -> int:
    return sizing.param_counts(models.model_dims(model))["total"]


def cells(model_names, targets, recipes) -> list[Cell]:
    """Every cell, cheapest first: fewer parameters, then fewer devices, then the recipe."""
    order = list(recipes)
    return sorted(
        (Cell(m, t, r) for m in model_names for t in targets for r in recipes),
        key=lambda c: (_params(c.model), parse_target(c.target).devices, order.index(c.recipe)),
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


def todo(
    candidates: list[Cell], rows: list[dict], versions: dict, retry_failed: bool = False
) -> list[Cell]:
    """The cells without a row for these settings, revision and versions (failed ones too, on
    request)."""
    done = {row_key(r) for r in rows if not (retry_failed and r.get("status") != "ok")}
    return [
        c
        for c in candidates
        if cell_key(c.model, c.target, c.recipe, c.settings, c.revision, versions) not in done
    ]


def run_cell(cell: Cell, *, progress: bool = True) -> dict:
    """plan.max_batch for the cell as a store row: the answer and what it cost, or the error."""
    settings = cell.settings
    row = {
        "model": cell.model,
        "target": cell.target,
        "recipe": cell.recipe,
        "settings": settings,
        "revision": cell.revision,
        "versions": plan.versions(),
        "date": _utc_now(),
        "host_cpus": os.cpu_count(),
    }
    start = time.perf_counter()
    try:
        request = plan.Request(model=cell.model, target=cell.target, **settings)
        # GRPO samples each prompt's group in one call: batches of whole groups
        unit = math.lcm(unit_for(request, None), settings.get("num_generations") or 1)
        search = plan.max_batch(request, multiple_of=unit, progress=progress)
    except Exception as err:  # recorded with its reason; --retry-failed tries again
        return {
            **row,
            "status": "error",
            "error": one_line(err),
            "wall_s": time.perf_counter() - start,
        }
    probes = search["probes"]
    at = next((p for p in probes if not p["fast"] and p["batch"] == search["max_batch"]), None)
    fresh = [p for p in probes if not p["cached"]]
    return {
        **row,
        "status": "ok",
        "summary": plan.describe(search),
        **{
            k: search[k]
            for k in (
                "max_batch",
                "first_not_fitting",
                "at_least",
                "converged",
                "multiple_of",
                "ceiling",
            )
        },
        "devices": probes[0]["devices"],
        "dtype": probes[0]["dtype"],
        "hbm_bytes": probes[0]["hbm_bytes"],
        "bytes_per_device": at and at["bytes_per_device"],
        "worst": at and at["worst"],
        "probes": [[p["batch"], p["fast"], p["fits"]] for p in probes],
        "compiles": len(fresh),
        "compile_s": sum(p["compile_s"] for p in fresh),
        "wall_s": time.perf_counter() - start,
        "load_average": os.getloadavg(),
    }


# ---------------------------------------------------------------------------- rendering


def slice_prices(target: str) -> dict:
    """Dollars an hour for the whole slice per kind, or None with the table's reason."""
    out = {"read": None}
    for kind in PRICE_KINDS:
        try:
            out[kind] = prices.price_per_hour(target, kind)
            out["read"] = prices.lookup(parse_target(target).chip.name, kind).read
        except BadInput as err:
            out[kind], out[f"{kind} why"] = None, str(err)
    return out


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


def cell_text(row: dict | None) -> str:
    if row is None:
        return "not yet"
    if row["status"] != "ok":
        return "failed"
    if row["max_batch"] == 0:
        return f"✗ 0 (✗ {row['first_not_fitting']})"
    if row["at_least"]:
        return f"✓ ≥{row['max_batch']}"
    gap = "" if row["converged"] else " gap"
    return f"✓ {row['max_batch']} (✗ {row['first_not_fitting']}{gap})"


def _dollars(value: float | None) -> str:
    return "n/a" if value is None else f"${value:.2f}"


def _versions_text(versions: dict) -> str:
    return ", ".join(f"{k} {versions.get(k)}" for k in VERSIONED)


def _grid(rows: dict, recipe: str, names: list[str], targets: list[str]) -> tuple[list, list]:
    """(model names, targets) for a recipe's table: the grid's, then any others in the store."""
    extra = [(m, t) for (r, m, t) in rows if r == recipe]
    model_names = list(
        dict.fromkeys([*names, *sorted({m for m, _ in extra} - set(names), key=_params)])
    )
    columns = list(dict.fromkeys([*targets, *sorted({t for _, t in extra} - set(targets))]))
    return model_names, columns


CSV_COLUMNS = [
    "recipe",
    "model",
    "target",
    "status",
    "max_batch",
    "first_not_fitting",
    "at_least",
    "converged",
    "multiple_of",
    "bytes_per_device",
    "hbm_bytes",
    "usd_per_hour_on_demand",
    "usd_per_hour_spot",
    "prices_read",
    "compiles",
    "compile_s",
    "wall_s",
    "date",
    *VERSIONED,
    "settings",
    "revision",
    "error",
]


def csv_row(recipe: str, model: str, target: str, row: dict | None, price: dict) -> list:
    row = row or {"status": "not computed yet"}
    return [
        recipe,
        model,
        target,
        row["status"],
        *[row.get(k, "") for k in CSV_COLUMNS[4:11]],
        *["n/a" if price[k] is None else price[k] for k in PRICE_KINDS],
        price["read"],
        *[row.get(k, "") for k in ("compiles", "compile_s", "wall_s", "date")],
        *[row.get("versions", {}).get(k, "") for k in VERSIONED],
        json.dumps(RECIPES[recipe], sort_keys=True),
        revision(recipe, target),
        row.get("error", ""),
    ]


def _header(best: list[dict], command: str) -> str:
    version_sets = sorted({json.dumps(r["versions"], sort_keys=True) for r in best})
    dates = sorted(r["date"][:10] for r in best) or ["—"]
    compiled = "; ".join(_versions_text(json.loads(v)) for v in version_sets) or "—"
    return (
        "# The atlas: does it fit, and at what batch?\n\n"
        "The largest batch that fits each model on each TPU slice for three recipes, as the TPU "
        "compiler says it (libtpu, deviceless: `shared.plan.max_batch`, every answer an exact "
        "compile at the boundary, never an extrapolation), with the slice's dollars an hour. "
        "Weights in bf16, batch in multiples of the slice's data-parallel size, bytes per device "
        "against the HBM the compiler allows (15.75 of a v5e's 16 GiB).\n\n"
        "- `✓ N (✗ M)`: batch N fits and M (the next multiple) does not.\n"
        "- `✓ ≥N`: the search reached its ceiling and everything it tried fit: at least N.\n"
        "- `✗ 0 (✗ M)`: not even the smallest batch M fits.\n"
        "- `gap`: the search stopped with a gap between N and M; a batch between may fit too.\n"
        "- `not yet`: not computed yet (listed at the end); `failed`: the reason is below.\n\n"
        "Multi-chip cells are compiled with tunix's activation shardings applied (batch over "
        "fsdp, wide dimensions over tp), as tunix's models declare them and its trainers run "
        "them on a TPU (`shared/models/activation_sharding.py`; tunix's own helpers drop them "
        "under `jax.set_mesh` and on a CPU host: `benchmarks/results/activation_sharding.json`). "
        "On one chip they have nothing to split, so single-chip cells did not change.\n\n"
        f"Generated from `benchmarks/results/atlas.jsonl` by `{command}`; the script resumes "
        "from that store, so `--only` and `--limit-minutes` grow it piecewise, and "
        "`--render-only` rewrites this page and `docs/atlas.csv` (every cell with its bytes, "
        "prices, compile count and time, date and versions).\n\n"
        f"Compiled with {compiled}{' (cells differ: see the CSV)' if len(version_sets) > 1 else ''}"
        f"; between {dates[0]} and {dates[-1]}; {sum(r.get('compiles', 0) for r in best)} "
        f"compiles, {sum(r.get('compile_s', 0) for r in best) / 3600:.1f} h of compile time on "
        f"{best[0]['host_cpus'] if best else '—'} CPU cores.\n\n"
    )


def _section(
    recipe: str, best: dict, names: list[str], columns: list[str], priced: dict, table
) -> tuple[str, list[str]]:
    """A recipe's markdown table with its notes (and its CSV rows), and its missing cells."""
    workload = RECIPES[recipe]["workload"]
    settings = ", ".join(f"{k}={v}" for k, v in RECIPES[recipe].items() if k != "workload")
    text = (
        f"## {TITLES[recipe]}\n\nSettings (`shared.plan.Request`): workload `{workload}`, "
        f"{settings}.\n\n"
    )
    for model in names:
        for target in columns:
            table.writerow(
                csv_row(recipe, model, target, best.get((recipe, model, target)), priced[target])
            )
    if workload not in plan.WORKLOADS and not any(r == recipe for r, _, _ in best):
        return text + (
            f"Not computed yet: this checkout's shared.plan has no `{workload}` "
            f"workload (it has {', '.join(plan.WORKLOADS)}); the script fills this "
            "table once it does.\n\n"
        ), [f"{recipe}: every cell ({len(names) * len(columns)}): no `{workload}` workload"]
    text += "| model | " + " | ".join(columns) + " |\n|---|" + "---|" * len(columns) + "\n"
    notes, holes = [], {}
    for model in names:
        row_of = {t: best.get((recipe, model, t)) for t in columns}
        text += f"| {model} | " + " | ".join(cell_text(r) for r in row_of.values()) + " |\n"
        for target, row in row_of.items():
            if row is None:
                holes.setdefault(model, []).append(target)
            elif row["status"] != "ok":
                notes.append(f"{model} on {target} failed: {row['error']}")
            elif row["max_batch"] == 0 or row["at_least"] or not row["converged"]:
                notes.append(row["summary"])
    text += (
        "| *$/h on-demand / spot* | "
        + " | ".join(
            f"{_dollars(priced[t]['on-demand'])} / {_dollars(priced[t]['spot'])}" for t in columns
        )
        + " |\n\n"
    )
    text += "".join(f"- {note}\n" for note in notes) + ("\n" if notes else "")
    return text, [f"{recipe}: {m} on {', '.join(ts)}" for m, ts in holes.items()]


def render(
    rows: list[dict], model_names: list[str], targets: list[str], recipes: list[str], command: str
) -> tuple[str, str]:
    """docs/atlas.md and docs/atlas.csv from the store's rows (pure: no compiles)."""
    best = newest(rows)
    grids = {r: _grid(best, r, model_names, targets) for r in recipes}
    priced = {t: slice_prices(t) for _, columns in grids.values() for t in columns}
    lines = io.StringIO()
    table = csv.writer(lines, lineterminator="\n")
    table.writerow(CSV_COLUMNS)
    md, missing = _header(list(best.values()), command), []
    for recipe, (names, columns) in grids.items():
        text, holes = _section(recipe, best, names, columns, priced, table)
        md += text
        missing += holes
    md += (
        "## Prices\n\nDollars an hour for the whole slice (`shared.hardware.prices`, us-central1; "
        "v5p-8 and tpu7x-8 are 4 chips). Re-read the source before spending.\n\n"
        "| slice | on-demand | spot | read | why n/a |\n|---|---|---|---|---|\n"
    )
    for target, pr in priced.items():
        why = "; ".join(dict.fromkeys(pr[f"{k} why"] for k in PRICE_KINDS if f"{k} why" in pr))
        md += (
            f"| {target} | {_dollars(pr['on-demand'])} | {_dollars(pr['spot'])} | "
            f"{pr['read'] or '—'} | {why} |\n"
        )
    md += "\n## Not computed yet\n\n" + (
        "".join(f"- {m}\n" for m in missing) or "Nothing: every cell of the grid is in the store.\n"
    )
    return md, lines.getvalue()


# ---------------------------------------------------------------------------- the command


def _names(text: str, valid, kind: str) -> list[str]:
    return [choose(kind, name, valid) for name in filter(None, text.split(","))]


def _stop(signum, frame):
    raise KeyboardInterrupt  # a SIGTERM stops between writes, like Ctrl-C, and still renders


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
    p.add_argument("--retry-failed", action="store_true", help="run failed cells again")
    p.add_argument("--render-only", action="store_true", help="no compiles: rewrite the docs")
    p.add_argument("--store", type=Path, default=STORE)
    p.add_argument("--md", type=Path, default=MARKDOWN)
    p.add_argument("--csv", type=Path, default=TABLE)
    args = p.parse_args(argv)
    model_names = _names(args.models, models.MODEL_NAMES, "model")
    targets = [parse_target(t).name for t in args.targets.split(",") if t]
    recipes = _names(args.recipes, RECIPES, "recipe")
    command = "python benchmarks/bench_atlas.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    grid = selected(cells(model_names, targets, recipes), parse_only(args.only))
    signal.signal(signal.SIGTERM, _stop)
    start = time.monotonic()
    if not args.render_only:
        versions = plan.versions()
        skipped = {c.recipe for c in grid if RECIPES[c.recipe]["workload"] not in plan.WORKLOADS}
        for recipe in sorted(skipped):
            print(
                f"skipping {recipe}: shared.plan has no {RECIPES[recipe]['workload']!r} "
                f"workload (it has {', '.join(plan.WORKLOADS)})",
                flush=True,
            )
        left = todo(
            [c for c in grid if c.recipe not in skipped],
            read_store(args.store),
            versions,
            args.retry_failed,
        )
        print(f"{len(left)} cells to compute ({len(grid)} selected)", flush=True)
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
                row = run_cell(cell)
                append_row(args.store, row)
                print(
                    f"[{number}/{len(left)}] {cell.recipe} {cell.model} on {cell.target}: "
                    f"{row.get('summary') or row.get('error')} ({row.get('compiles', 0)} "
                    f"compiles, {row['wall_s']:.0f} s)",
                    flush=True,
                )
        except KeyboardInterrupt:
            print("stopped: the cell in progress is not stored; rendering", flush=True)
    md, table = render(read_store(args.store), model_names, targets, recipes, command)
    files.write_atomic(args.md, md.encode())
    files.write_atomic(args.csv, table.encode())
    print(f"wrote {args.md} and {args.csv}", flush=True)
    return 0


if __name__ == "__main__":
    run_cli(main)
