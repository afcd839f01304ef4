"""Whether a libtpu flag moves an atlas cell: the cell's own search (the command its row gives,
shared.plan.atlas.render.plan_command) run again in a child with LIBTPU_INIT_ARGS set, beside
the committed answer, compiled with libtpu's defaults. `benchmarks/bench_libtpu_flag.py` is its
command line; `lookup.flag_answer` reads what it wrote beside the cell.

Why: libtpu 0.0.42.1 fails inside itself compiling GRPO's policy update on a tpu7x-8 from 136
sequences a call up (a RET_CHECK in its SparseCore gather emitter, in tunix's per-token
log-probs), so the atlas answers 128, far under the HBM; with the gather offload off, one
verdict compiled the update at 136 and it fit. A reader choosing the flag wants its answer, a
search, not one verdict.

libtpu reads the variable once, when it loads: hence the child. The plan cache keys verdicts by
the flags (shared.plan.compiler.cache_entries.libtpu_flags), so a second run reads what the first
compiled; the answer says how many of the search's verdicts came from the cache.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from shared.errors import BadInput
from shared.plan.atlas import lookup
from shared.plan.atlas.render import plan_command
from shared.plan.atlas.run import search_row
from shared.plan.search.view import describe

GIB = 2**30


def parse_cell(spec: str) -> tuple[str, str, str]:
    """'recipe,model,target' as the atlas names them; BadInput in one line otherwise."""
    fields = spec.split(",")
    if len(fields) != 3:
        raise BadInput(f"--cell {spec!r}: give 'recipe,model,target' (e.g. grpo,gemma3-1b,tpu7x-8)")
    return fields[0], fields[1], fields[2]


def committed(row: dict) -> dict:
    """The atlas's answer for the cell (docs/atlas.csv), as a reader looks it up."""
    used = row["bytes_per_device"]
    return {
        "status": row["status"],
        "max_batch": int(row["max_batch"]) if row["max_batch"] else None,
        "mesh": row["mesh"],
        "gib_per_device": float(used) / GIB if used else None,
        "compiler_errors": row.get("compiler_errors", ""),
        "date": row["date"],
        "lookup": lookup.describe(row).splitlines()[0],
    }


def search_with(flags: str, argv: list[str]) -> dict:
    """The search's JSON (python -m shared.plan ... --max-batch --json) in a child whose libtpu
    loads with `flags`; its progress and errors go to this terminal."""
    env = {**os.environ, "LIBTPU_INIT_ARGS": flags}
    done = subprocess.run([sys.executable, *argv, "--json"], env=env, stdout=subprocess.PIPE)
    if done.returncode != 0:
        raise BadInput(f"the search under LIBTPU_INIT_ARGS={flags} exited {done.returncode}")
    return json.loads(done.stdout)


def with_flag(result: dict, cell: dict, flags: str) -> dict:
    """The search's answer as the atlas would store it (its row: shared.plan.atlas.run.
    search_row), with the flags, the summary and how many verdicts the cache held."""
    probes = result["probes"]
    row = search_row({**cell, "libtpu_init_args": flags}, result, result["wall_s"])
    return {
        **row,
        "summary": describe(result),
        "verdicts_from_cache": sum(1 for p in probes if p.get("cached")),
        "verdicts": len(probes),
        "versions": next((p["versions"] for p in probes if "versions" in p), None),
    }


def flag_search(spec: str, flags: str, why: str) -> dict:
    """Cell `spec` ('recipe,model,target') searched again under LIBTPU_INIT_ARGS=`flags`
    (search_with), beside its committed answer: the keys of a results file after its header.
    `why` says in a few words what the flag changes; the lookup prints it beside the answer."""
    recipe, model, target = parse_cell(spec)
    row = lookup.find(lookup.read_table(), model, target, recipe)
    command = plan_command(recipe, model, target)
    report = {
        "cell": {"recipe": recipe, "model": model, "target": target},
        "flags": flags,
        "why": why,
        "search_command": f"LIBTPU_INIT_ARGS={flags} {command}",
        "load_average_before": list(os.getloadavg()),
        "committed": committed(row),
    }
    report["with_flag"] = with_flag(search_with(flags, command.split()[1:]), report["cell"], flags)
    return report
