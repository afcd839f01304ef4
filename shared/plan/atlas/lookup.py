"""`python -m shared.plan.atlas.lookup MODEL TARGET RECIPE`: the atlas's answer for one cell.

It reads the committed `docs/atlas.csv` (every cell of the grid, rendered from the store by
shared.plan.atlas), so it imports no compiler and no model code and answers in well under a
second. A cell not computed yet, or one that failed, comes with the command that computes it.
`slice_column` gives every model's cell of one recipe on one slice, which notebooks 01, 02
and 07 show before they compile anything.

    python -m shared.plan.atlas.lookup gemma3-1b v5e-8 grpo
"""

import argparse
import csv
import json
import re
from pathlib import Path

from shared.errors import BadInput, choose, run_cli
from shared.hardware.targets import parse_target
from shared.paths import ROOT
from shared.plan.search.words import listed, stopped_with_gap
from shared.report.committed import committed

# A stored cell's status where tunix has no program for the model on the target (qwen3-30b-a3b's
# megablox layer on a GPU: shared.plan.workloads.request_checks.check_runs_there). Held here,
# the lightest of the atlas's modules, so the page, the figure and lookup read one spelling.
DOES_NOT_RUN = "does not run"

TABLE = ROOT / "docs" / "atlas.csv"
GiB = 2**30
# benchmarks/bench_libtpu_flag.py's results for a cell, in benchmarks/results/
FLAG_RESULTS = "libtpu_flag_{recipe}_{model}_{target}"
# the versions a flag's answer must share with the cell's (the CSV's columns, a row's versions)
SAME_VERSIONS = ("jax", "libtpu", "google-tunix", "qwix")


def read_table(path: Path = TABLE) -> list[dict]:
    """The rendered atlas, one dict per cell; BadInput when it is missing or unreadable."""
    try:
        with open(path, newline="") as handle:
            return list(csv.DictReader(handle))
    except OSError as err:
        raise BadInput(
            f"cannot read the atlas table {path} ({err.strerror}): a clone of the repository "
            "has it; `python benchmarks/bench_atlas.py --render-only` rewrites it"
        ) from None


def find(rows: list[dict], model: str, target: str, recipe: str) -> dict:
    """The row of one cell, names matched ignoring case. An unknown model, target or recipe
    names the closest and the valid ones; a slice the planner knows but the atlas has no
    column for gets the planner's command for it."""
    model = choose("model", model, sorted({row["model"] for row in rows}))
    recipe = choose("recipe", recipe, sorted({row["recipe"] for row in rows}))
    targets = sorted({row["target"] for row in rows})
    if target.lower() not in {t.lower() for t in targets}:
        parse_target(target)  # not a slice at all: the targets' own line, with its examples
        cell = next(r for r in rows if (r["model"], r["recipe"]) == (model, recipe))
        planner = re.sub(r"--target \S+", f"--target {target.lower()}", cell["plan_command"])
        raise BadInput(
            f"the atlas has no {target} column (it has {', '.join(targets)}); the planner "
            f"answers any slice: {planner}"
        )
    target = choose("target", target, targets)
    return next(
        r for r in rows if (r["model"], r["target"], r["recipe"]) == (model, target, recipe)
    )


def command(model: str, target: str, recipe: str, retry: str = "--retry-failed") -> str:
    """The command that computes (or recomputes: `retry`) one cell into the store and the
    page."""
    only = f"model={model},target={target},recipe={recipe}"
    return " ".join(("nice python benchmarks/bench_atlas.py", *retry.split(), "--only", only))


def cells_in_words(recipe: str, target: str, models: list[str]) -> list[str]:
    """Each model's committed cell of `recipe` on `target` in words (describe), or where the
    atlas has no such cell the plan engine's command: what a notebook's plan mode shows for a
    model too large to compile there (a 30B mixture of experts takes many minutes)."""
    cells = {r["model"]: r for r in read_table() if (r["target"], r["recipe"]) == (target, recipe)}
    return [
        describe(cells[model])
        if model in cells
        else f"{model}: no atlas cell on {target}; "
        f"python -m shared.plan {recipe} --model {model} --target {target} --max-batch"
        for model in models
    ]


def mesh_answer_text(answer: int | str) -> str:
    """A mesh's largest batch in words, as a search's `mesh_answers` (or the table) gives it:
    0 is none; "<N" says the mesh was asked only whether it fits N, another mesh's answer, and
    does not (shared.plan.search.max_batch); "N..M" that its search stopped between N, which
    fits, and M, which does not (shared.plan.search.result.mesh_answer)."""
    answer = str(answer)
    if answer.startswith("<"):
        return f"fewer than {answer[1:]}"
    if ".." in answer:
        fits, fails = answer.split("..")
        return f"{fits} and not {fails}, nothing between compiled: it may fit more"
    return "none" if answer == "0" else answer


def describe(row: dict) -> str:
    """The cell in words: the answer, its bytes, prices, evidence and versions."""
    where = f"{row['model']} {row['recipe']} on {row['target']}"
    if row["status"] != "ok":
        why = f": {row['error']}" if row["error"] else ""
        text = f"{where}: {row['status']}{why}\n  compute it: {command(*_cell(row))}"
        if row.get("plan_command"):  # a table rendered before 2026-11-29 has none
            text += f"\n  or the plan engine alone (not added to the atlas): {row['plan_command']}"
        return text
    largest, first_fail = int(row["max_batch"]), row["first_not_fitting"]
    units = [pair.split(":") for pair in (row.get("units") or "").split()]  # '8x1:8 1x8:1'
    if largest == 0 and len({unit for _, unit in units}) > 1:
        answer = "not even one unit fits: batch " + ", ".join(f"{n} on {m}" for m, n in units)
    elif largest == 0:
        answer = f"not even batch {row['multiple_of']} fits"
    elif row["at_least"] == "True" and row["converged"] == "True":
        answer = f"at least {largest} fits (the search's ceiling)"
    elif row["at_least"] == "True":
        answer = f"at least {largest} fits (the search stopped with every exact compile fitting)"
    elif row["converged"] != "True":  # a fit and a failure more than a unit apart
        answer = (
            f"at least {largest} fits, {first_fail} does not: the search stopped with a gap, "
            f"so a batch between may fit too\n  close the gap: "
            f"{command(*_cell(row), retry='--retry-gaps')}"
        )
    elif not first_fail and row.get("compiler_errors"):  # "208: INTERNAL: ..."
        answer = (
            f"largest batch {largest} (at {row['compiler_errors']}: the compiler fails there, "
            "not for lack of HBM, and the search went on below it)"
        )
    elif checked := row.get("checked_above"):
        failed = [first_fail, checked, *filter(None, [row.get("checked_aligned")])]
        answer = f"largest batch {largest} ({listed(failed)} do not fit)"
    else:
        answer = (
            f"largest batch {largest} ({first_fail} does not fit; two units above it not "
            "compiled yet, and the compiler's bytes are not monotone in the batch: a larger "
            "batch may fit)"
        )
    if row.get("needs_check") == "True":  # stored before one of the search's checks above
        if row.get("checked_above"):  # two units above failed; the aligned batch is unasked
            answer += (
                "\n  not checked yet at the next batch of 4 rows a device above it (the bytes "
                "a device can dip there: a larger batch may fit)"
            )
        answer += f"\n  check it: {command(*_cell(row), retry='--check-above')}"
    settings = ", ".join(f"{k} {v}" for k, v in json.loads(row["settings"]).items())
    if row.get("mesh"):
        settings += f", mesh {row['mesh']} (fsdp x tp)"
    lines = [f"{where}: {answer}", f"  settings: {settings}"]
    if unasked := row.get("meshes_not_asked"):
        lines.append(
            f"  searched on {row['mesh']} only (bench_atlas.py --one-mesh): "
            f"{', '.join(unasked.split())} not asked, and may fit more\n"
            f"  ask them: {command(*_cell(row), retry='')}"
        )
    elif row.get("older_search") == "True":
        lines.append(
            "  answered by an older search (until 2026-11-28 the atlas stepped every mesh by "
            "one unit or left a mesh the weights divide unasked): a larger batch, or one on "
            f"another mesh, may fit\n  compute it again: {command(*_cell(row), retry='')}"
        )
    answers = (pair.split(":") for pair in (row.get("mesh_answers") or "").split())  # '2x4:2'
    others = [f"{mesh} fits {mesh_answer_text(n)}" for mesh, n in answers if mesh != row["mesh"]]
    if others:
        lines.append(f"  other meshes searched: {', '.join(others)}")
    if row.get("dips"):
        lines.append(f"  below it, {row['dips']} did not fit: the bytes are not monotone")
    if row["bytes_per_device"]:
        used, allowed = float(row["bytes_per_device"]), float(row["hbm_bytes"])
        lines.append(f"  at {largest}: {used / GiB:.2f} of the {allowed / GiB:.2f} GiB per device")
    if row["usd_per_hour_on_demand"]:
        lines.append(f"  {_price_line(row)}")
    if flagged := flag_answer(row["recipe"], row["model"], row["target"], row):
        lines.append(f"  {flagged}")
    lines.append(
        f"  {_provenance(row)}: jax "
        f"{row['jax']}, libtpu {row['libtpu']}, tunix {row['google-tunix']}, qwix {row['qwix']}"
    )
    return "\n".join(lines)


def _provenance(row: dict) -> str:
    """Whence the cell's answer: its exact compiles, or (none run) the plan cache's verdicts,
    compiled by the day the row was written."""
    day = row["date"][:10]
    if int(row["compiles"]):
        return f"the compiler's verdict ({row['compiles']} compiles, {day})"
    return f"the compiler's verdict from the plan cache (compiled by {day})"


def flag_answer(recipe: str, model: str, target: str, versions: dict) -> str | None:
    """The cell's answer under a libtpu flag, where benchmarks/bench_libtpu_flag.py committed
    one for it at the cell's `versions`: what a reader can change where libtpu's defaults cost
    them batch (GRPO on a tpu7x-8, which the compiler fails with the SparseCore gather offload
    on; rollouts on a tpu7x-8, whose decode copies the weights and KV cache into other tiles).
    None where there is none."""
    name = FLAG_RESULTS.format(recipe=recipe, model=model, target=target)
    found = committed(name) or {}
    flagged = found.get("with_flag") or {}
    if any((flagged.get("versions") or {}).get(k) != versions.get(k) for k in SAME_VERSIONS):
        return None
    used, allowed = flagged["bytes_per_device"] or 0, flagged["hbm_bytes"]
    # a search that stopped with a gap says so (gemma3-4b rollouts on a tpu7x-8: 3866 fits on
    # 2x4, 3880 does not, nothing between compiled), as the mesh answers do
    largest, first_fail = flagged["max_batch"], flagged["first_not_fitting"]
    gap = (
        f" ({mesh_answer_text(f'{largest}..{first_fail}')})"
        if stopped_with_gap(largest, first_fail, flagged["multiple_of"])
        else ""
    )
    return (
        f"with LIBTPU_INIT_ARGS={found['flags']} ({found['why']}): largest batch "
        f"{largest} on {flagged['mesh']}{gap}, {used / GiB:.2f} of the "
        f"{allowed / GiB:.2f} GiB per device "
        f"({flagged['compiles']} compiles, {found['date']}: benchmarks/results/{name}.json)"
    )


def short_answer(row: dict) -> str:
    """A cell's largest batch in a word or two, marked as the atlas page marks it: "none"
    (not even the smallest batch fits), "≥N" (the search's ceiling), "N?" (an older search, or
    one not checked above its answer: a larger batch may fit), "N, gap" (a gap left below the
    first failure), "not yet", "failed"."""
    if row["status"] == "not computed yet":
        return "not yet"
    if row["status"] == DOES_NOT_RUN:
        return "TPU only"
    if row["status"] != "ok":
        return "failed"
    largest = int(row["max_batch"])
    word = "none" if largest == 0 else f"≥{largest}" if row["at_least"] == "True" else f"{largest}"
    if "True" in (row.get("older_search"), row.get("needs_check")):
        return f"{word}?"
    return word if row["converged"] == "True" or largest == 0 else f"{word}, gap"


def slice_column(recipe: str, target: str, table: Path = TABLE) -> list[dict] | None:
    """Every model's committed cell of `recipe` on `target` (a column of the atlas page), in
    the page's order: what a notebook shows before it compiles anything. None for a slice the
    atlas does not cover (an H200, a larger slice)."""
    rows = read_table(table)
    choose("recipe", recipe, sorted({row["recipe"] for row in rows}))
    column = []
    for row in rows:
        if (row["recipe"], row["target"]) != (recipe, target):
            continue
        used = row["bytes_per_device"] if row["status"] == "ok" else ""
        column.append(
            {
                "model": row["model"],
                "largest batch": short_answer(row),
                "mesh": row["mesh"] if used else "",
                "GiB per device": f"{float(used) / GiB:.2f}" if used else "",
                "computed": row["date"][:10],
            }
        )
    return column or None


def _price_line(row: dict) -> str:
    """The slice's dollars an hour as the table has them: a price, or "n/a" where the source
    publishes none (tpu7x: ask an account team), whose reason the atlas page's prices give."""
    prices = {kind: row[f"usd_per_hour_{kind}"] for kind in ("on_demand", "spot")}
    if "n/a" in prices.values():
        named = " and ".join(k.replace("_", "-") for k, v in prices.items() if v == "n/a")
        return f"no public {named} price for {row['target']} (docs/atlas.md's Prices say why)"
    return (
        f"${float(prices['on_demand']):.2f}/h on demand, ${float(prices['spot']):.2f}/h spot "
        f"(read {row['prices_read']})"
    )


def _cell(row: dict) -> tuple[str, str, str]:
    return row["model"], row["target"], row["recipe"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m shared.plan.atlas.lookup",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("model")
    parser.add_argument("target")
    parser.add_argument("recipe")
    parser.add_argument("--table", type=Path, default=TABLE, help="the rendered atlas (CSV)")
    args = parser.parse_args(argv)
    print(describe(find(read_table(args.table), args.model, args.target, args.recipe)))
    return 0


if __name__ == "__main__":
    run_cli(main)
