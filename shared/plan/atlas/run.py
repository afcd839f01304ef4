"""Computing one atlas cell: `shared.plan.max_batch` for the cell's recipe, model and target,
and the row the store keeps (the verdict at the boundary, compile counts, wall time, or the
error in one line)."""

from __future__ import annotations

import datetime
import os
import time

from shared import plan
from shared.plan.atlas.store import Cell
from shared.plan.mesh import least_batch
from shared.plan.search import unit_for


def _utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:300]


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
        unit = least_batch(request, unit_for(request, None))  # GRPO: whole groups
        search = plan.max_batch(request, multiple_of=unit, progress=progress)
    except Exception as err:  # recorded with its reason; --retry-failed tries again
        return {
            **row,
            "status": "error",
            "error": one_line(err),
            "wall_s": time.perf_counter() - start,
        }
    probes, mesh = search["probes"], search["mesh_shape"]
    at = next(
        (
            p
            for p in probes
            if not p["fast"] and p["batch"] == search["max_batch"] and p["mesh_shape"] == mesh
        ),
        None,
    )
    fresh = [p for p in (*probes, *search["cut_probes"]) if not p["cached"]]
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
        "mesh": "{fsdp}x{tp}".format(**mesh),
        "mesh_answers": search.get("mesh_answers"),  # every mesh searched: its largest batch
        "dtype": probes[0]["dtype"],
        "hbm_bytes": probes[0]["hbm_bytes"],
        "bytes_per_device": at and at["bytes_per_device"],
        "worst": at and at["worst"],
        "probes": [[p["batch"], p["fast"], p["fits"]] for p in probes],
        "cut_probes": [[p["batch"], p["layers"], p["fits"]] for p in search["cut_probes"]],
        "compiles": search["compiles"],  # compiles only: a cached or arithmetic answer is not one
        "compile_s": sum(p["compile_s"] for p in fresh),
        "wall_s": time.perf_counter() - start,
        "load_average": os.getloadavg(),
    }
