"""The atlas as a reader sees it: docs/atlas.md (one table a recipe, the largest batch per
model and slice, with hours and dollars) and docs/atlas.csv, rendered from the store."""

from __future__ import annotations

import collections
import csv
import io
import json
import statistics

from shared import plan
from shared.errors import BadInput
from shared.hardware import parse_target, prices
from shared.paths import ROOT
from shared.plan.atlas import lookup
from shared.plan.atlas.lookup import DOES_NOT_RUN
from shared.plan.atlas.store import (
    RECIPES,
    model_params,
    needs_check,
    newest,
    older_search,
    reasked,
    revision,
    stepped_units,
    unasked_meshes,
)
from shared.plan.cli import flags
from shared.plan.search.words import failed_batches, listed
from shared.versions import VERSIONED

MARKDOWN = ROOT / "docs" / "atlas.md"


TABLE = ROOT / "docs" / "atlas.csv"
FIGURE = ROOT / "docs" / "figures" / "atlas.png"


PRICE_KINDS = ("on-demand", "spot")


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
    "sft": "Full fine-tune: one optax step on every weight (AdamW, fp32 moments), sequence "
    "2048, no remat, chunked loss, one micro-batch",
}


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


def cell_text(row: dict | None) -> str:
    if row is None:
        return "not yet"
    if row["status"] == DOES_NOT_RUN:
        return "TPU only"
    if row["status"] != "ok":
        return "failed"
    older = "?" if older_search(row) else ""
    # where the compiler failed (not for lack of HBM) on the answer's mesh, the least batch
    # above the answer: the search went on below it (all of them are in the note below)
    above = _failed_above(row)
    crashed = [f"compiler fails at {min(above)}"] if above else []
    if row["max_batch"] == 0:  # the least batch any mesh was asked (a 1x8 mesh's is 1)
        least = min(row.get("units", {}).values(), default=row["first_not_fitting"])
        return f"✗ 0 ({', '.join(crashed or [f'✗ {least}'])}){older}"
    gap = "" if row["converged"] else " gap"
    if row["at_least"]:
        return f"✓ ≥{row['max_batch']}{gap}{older}{_on_mesh(row)}"
    keys = ("first_not_fitting", "checked_above", "checked_aligned")
    fails = ", ".join([f"✗ {row[k]}" for k in keys if row.get(k)] + crashed)
    unchecked = "?" if needs_check(row) or older else ""
    return f"✓ {row['max_batch']} ({fails}{gap}){unchecked}{_on_mesh(row)}"


def _failed_above(row: dict) -> list[int]:
    """The batches above a row's answer on its mesh where the compiler failed (stored since
    2026-11-30; a row of several meshes names each error's mesh)."""
    return [
        e["batch"]
        for e in row.get("compiler_errors") or []
        if e["batch"] > row["max_batch"] and e.get("mesh", row.get("mesh")) == row.get("mesh")
    ]


def _described(row: dict) -> str:
    """plan.describe's line for a stored row, which names its mesh "FxT" (a search result's
    mesh_shape: describe names the other meshes' answers against it)."""
    fields = {"workload": row["settings"]["workload"]}
    if row.get("mesh"):
        fsdp, tp = map(int, row["mesh"].split("x"))
        fields["mesh_shape"] = {"fsdp": fsdp, "tp": tp}
    text = plan.describe({**row, **fields})
    if unasked := unasked_meshes(row):  # searched on its first mesh only (--one-mesh)
        text += f"; {listed(unasked)} not asked (--one-mesh), and may fit more"
    return text


def _on_mesh(row: dict) -> str:
    """The suffix " on FxT" for a cell compiled with tensor parallelism (shared.plan.mesh.choice);
    nothing for all fsdp, the default (and every cell stored before rows named their mesh)."""
    mesh = row.get("mesh")
    return f" on {mesh}" if mesh and not mesh.endswith("x1") else ""


def _dollars(value: float | None) -> str:
    return "n/a" if value is None else f"${value:.2f}"


def _versions_text(versions: dict) -> str:
    return ", ".join(f"{k} {versions.get(k)}" for k in VERSIONED)


def grid_of(rows: dict, recipe: str, names: list[str], targets: list[str]) -> tuple[list, list]:
    """(model names, targets) for a recipe's table: the grid's, then any others in the store."""
    extra = [(m, t) for (r, m, t) in rows if r == recipe]
    model_names = list(
        dict.fromkeys([*names, *sorted({m for m, _ in extra} - set(names), key=model_params)])
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
    "mesh",
    "mesh_answers",
    "checked_above",
    "checked_aligned",
    "dips",
    "units",
    "older_search",
    "needs_check",
    "plan_command",
    "compiler_errors",
    "meshes_not_asked",
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
        row.get("mesh", ""),
        _by_mesh(row.get("mesh_answers") or {}),
        row.get("checked_above") or "",
        row.get("checked_aligned") or "",
        " ".join(map(str, row.get("dips") or [])),
        _by_mesh(stepped_units(row)) if row["status"] == "ok" else "",
        older_search(row),
        needs_check(row),
        plan_command(recipe, model, target),
        _compiler_errors_text(row.get("compiler_errors") or []),
        " ".join(unasked_meshes(row)),
    ]


def _compiler_errors_text(errors: list[dict]) -> str:
    """The CSV's `compiler_errors`: where, and the first message
    (shared.plan.search.view.failed_batches)."""
    return f"{failed_batches(errors)}: {errors[0]['error']}" if errors else ""


def plan_command(recipe: str, model: str, target: str) -> str:
    """`python -m shared.plan` searching the cell's largest batch, with the recipe's settings
    its workload reads (the GRPO recipe also names tunix semantics, which only a rollout takes
    as a flag): the answer for whoever asks, where bench_atlas grows the atlas."""
    settings = RECIPES[recipe]
    workload = settings["workload"]
    reads = {k: v for k, v in settings.items() if k in plan.READS[workload]}
    return flags.plan_command(workload, model, target, reads)


def _by_mesh(values: dict) -> str:
    """'8x1:<192 4x2:192': a value for each mesh a search compiled on, tp rising (the store
    keeps JSON keys sorted): in `mesh_answers` the largest batch it fit ('<N': it was asked
    only whether it fits N, and does not; 'N..M': its search stopped with N fitting and M not,
    nothing between compiled), in `units` the step it took there."""
    by_tp = sorted(values.items(), key=lambda item: int(item[0].split("x")[1]))
    return " ".join(f"{mesh}:{n}" for mesh, n in by_tp)


def _reasked_text(pairs: list[tuple[dict, dict]]) -> str:
    """What the cells an older search answered and today's answered again say about those
    still marked '?' (store.reasked): how many were too low, the furthest off, how many too
    high. Its N is an exact compile's fit either way, so a '?' cell fits at least N."""
    if not pairs:
        return ""
    low = [(b, a) for b, a in pairs if a["max_batch"] > b["max_batch"]]
    high = [(b, a) for b, a in pairs if a["max_batch"] < b["max_batch"]]
    were = "was" if len(low) == 1 else "were"
    text = f" Of the {len(pairs)} such cells computed again so far, {len(low)} {were} too low"
    if scaled := [(b, a) for b, a in low if b["max_batch"]]:
        b, a = max(scaled, key=lambda pair: pair[1]["max_batch"] / pair[0]["max_batch"])
        text += (
            f" (the furthest: {b['recipe']} {b['model']} on a {b['target']}, "
            f"{b['max_batch']} -> {a['max_batch']})"
        )
    text += f" and {len(high)} too high" if high else " and none too high"
    more = "more often than not more does" if 2 * len(low) > len(pairs) else "more may"
    return text + f": a `?` cell's N fits (an exact compile), and {more}."


def _header(best: list[dict], command: str, pairs: list[tuple[dict, dict]]) -> str:
    version_sets = sorted({json.dumps(r["versions"], sort_keys=True) for r in best})
    dates = sorted(r["date"][:10] for r in best) or ["—"]
    compiled = "; ".join(_versions_text(json.loads(v)) for v in version_sets) or "—"
    return (
        "# The atlas: does it fit, and at what batch?\n\n"
        "The largest batch that fits each model on each TPU slice for each recipe, as the TPU "
        "compiler says it (libtpu, deviceless: `shared.plan.max_batch`, every answer an exact "
        "compile at the boundary, never an extrapolation), with the slice's dollars an hour. "
        "Weights in bf16, batch in multiples of the slice's data-parallel size, bytes per device "
        "against the HBM the compiler allows (15.75 of a v5e's 16 GiB).\n\n"
        "- `✓ N (✗ M, ✗ C)`: batch N fits and neither M nor C (the next two multiples) does: "
        "the compiler's bytes are not monotone in the batch (llama3.1-8b rollouts on a 4x2 of "
        "a v5e-8 fit 184 and 192, not 188), so the search checks two units above its answer "
        "and goes on where that fits (`shared/plan/search/max_batch.py`). `✓ N (✗ M, ✗ C, ✗ "
        "A)`: the "
        "next batch of 4 rows a device, A, was checked too, where it is further: the same "
        "model fits 49 and 52 rows a chip but not 50, 51 or 53 (196 and 208, not 200 or 204).\n"
        "- `✓ N (✗ M)?` or `✓ N (✗ M, ✗ C)?`: computed before those checks (2026-11-27, "
        "2026-11-28): N fits and M does not, but a larger batch may fit; `--check-above` "
        "compiles the missing checks for these cells.\n"
        "- `✓ ≥N`: the search reached its ceiling and everything it tried fit: at least N.\n"
        "- `✗ 0 (✗ M)`: not even the smallest batch M fits (on a multi-chip slice, on any mesh "
        "its weights divide, each asked its own least batch: 8 on 8x1, 1 on 1x8).\n"
        "- `?` on a multi-chip cell computed until 2026-11-28: its search stepped every mesh "
        "by the rule mesh's unit (8 on a v5e-8, where 1x8 runs batch 1), or did not ask every "
        "mesh the weights divide (a wider tp was searched only where it doubled the room for "
        "the batch: llama3.1-8b rollouts on a v6e-8 said 360 on 8x1, and 2x4 fits 674), so a "
        "batch between the steps, or one on another mesh, may fit; the next run computes "
        "these again. Since 2026-12-02 also a cell searched on its first mesh only "
        "(`--one-mesh`, where this 23 GiB host cannot hold another mesh's compiles): N is "
        "that mesh's exact answer, another mesh may fit more, and a run without the flag asks "
        f"them.{_reasked_text(pairs)}\n"
        "- `gap`: the search stopped with a gap between N and M, so a batch between may fit "
        "too (`--retry-gaps` closes it by compiles inside it); `✓ ≥N gap`: it stopped with "
        "every exact compile fitting, so more may fit.\n"
        "- `on FxT`: compiled on an fsdp x tp mesh, the smallest tp that holds the model "
        "where its weights cannot sit whole on each chip (`shared/plan/mesh/choice.py`), or a "
        "wider "
        "tp that fits more: the search starts on the mesh whose floor leaves the most room "
        "for the batch and asks every other mesh the weights divide whether it fits more "
        "(`shared/plan/search/max_batch.py`; the CSV's `mesh_answers` gives what each mesh "
        "searched "
        "fits, `<N` where a mesh was asked only whether it fits N, `N..M` where its search "
        "stopped with N fitting and M not, nothing between compiled); otherwise every device is "
        "on fsdp.\n"
        "- `compiler fails at C`: libtpu failed inside itself compiling batch C (an INTERNAL "
        "error, not a refusal for lack of HBM; its message is below the table): these versions "
        "cannot run C, so the search went on below it, and N is the largest batch that "
        "compiles and fits under it (`shared.plan.search.lines.under_compiler_failure`).\n"
        "- `not yet`: not computed yet (listed at the end); `failed`: the reason is below; "
        "`TPU only`: tunix's program for the model runs only on a TPU (the reason is below).\n\n"
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
        "![Every cell at a glance: the largest batch, coloured by the verdict](figures/atlas.png)"
        "\n\n"
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
        # one note for the machines tunix has no program for it on, the reason as the first says
        elsewhere = {t: r for t, r in row_of.items() if r and r["status"] == DOES_NOT_RUN}
        if elsewhere:
            first = next(iter(elsewhere))
            reason = elsewhere[first]["error"].replace(f" ({first})", "")
            notes.append(f"{model} on {', '.join(elsewhere)}, TPU only: {reason}")
        for target, row in row_of.items():
            if row is None:
                holes.setdefault(model, []).append(target)
                continue
            if row["status"] == DOES_NOT_RUN:
                continue
            if row["status"] != "ok":
                notes.append(f"{model} on {target} failed: {row['error']}")
                continue
            # a reader of a cell with an answer under a libtpu flag sees it under the table
            flagged = lookup.flag_answer(recipe, model, target, row["versions"])
            if (
                row["max_batch"] == 0
                or row["at_least"]
                or not row["converged"]
                or row.get("dips")
                or row.get("compiler_errors")
                or unasked_meshes(row)
                or flagged
            ):
                notes.append(_described(row) + (f"; {flagged}" if flagged else ""))
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
    grids = {r: grid_of(best, r, model_names, targets) for r in recipes}
    priced = {t: slice_prices(t) for _, columns in grids.values() for t in columns}
    lines = io.StringIO()
    table = csv.writer(lines, lineterminator="\n")
    table.writerow(CSV_COLUMNS)
    md, missing = _header(list(best.values()), command, reasked(rows)), []
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
        _why_missing(list(best.values())) + "".join(f"- {m}\n" for m in missing)
        if missing
        else "Nothing: every cell of the grid is in the store.\n"
    )
    return md, lines.getvalue()


def _why_missing(best: list[dict]) -> str:
    """Why cells are missing: no run has reached them yet, and what one costs, from the
    store's own wall times (a multi-chip compile takes minutes on a 2-core machine)."""
    minutes = {True: [], False: []}
    for row in best:
        if row["status"] == "ok" and row.get("compiles"):
            minutes[parse_target(row["target"]).devices > 1].append(row["wall_s"] / 60)
    costs = [
        f"{kind} cells took a median of {statistics.median(m):.0f} min each over {len(m)} cells"
        for kind, m in (("single-chip", minutes[False]), ("multi-chip", minutes[True]))
        if m
    ]
    return (
        "No run has reached these cells yet: each is a search of exact compiles on the "
        f"machine that grows the atlas{' (' + '; '.join(costs) + ')' if costs else ''}. "
        "`python -m shared.plan lookup MODEL TARGET RECIPE` prints the command that computes "
        "one.\n\n"
    )
