"""Computing one atlas cell: `shared.plan.max_batch` for the cell's recipe, model and target,
and the row the store keeps (the verdict at the boundary, compile counts, wall time, or the
error in one line)."""

from __future__ import annotations

import datetime
import multiprocessing
import os
import signal
import time
from collections.abc import Callable

from shared import plan
from shared.errors import BadInput
from shared.hardware import parse_target
from shared.hardware.sharding import mesh_name, mesh_shape
from shared.plan import verdict
from shared.plan.atlas.lookup import DOES_NOT_RUN
from shared.plan.atlas.store import Cell, stepped_units
from shared.plan.compiler.cache_entries import gpu_compiler
from shared.plan.compiler.target import target_devices
from shared.plan.mesh.choice import search_shape
from shared.plan.mesh.steps import pinned_to, unit_for
from shared.plan.search.gap import check_above, close_gap
from shared.plan.search.lines import checked_fields, checks_above
from shared.plan.search.max_batch import CEILING, searcher
from shared.plan.search.meshes import beat_on_other_meshes, meshes_by_ceiling, meshes_result
from shared.plan.search.result import compiler_failed, mesh_answer
from shared.plan.workloads.request_checks import check_runs_there


def _utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:300]


def _row_head(cell: Cell) -> dict:
    return {
        "model": cell.model,
        "target": cell.target,
        "recipe": cell.recipe,
        "settings": cell.settings,
        "revision": cell.revision,
        "versions": plan.versions() | gpu_compiler(cell.target),
        "date": _utc_now(),
        "host_cpus": os.cpu_count(),
    }


def _error_row(head: dict, err: BaseException, start: float) -> dict:
    """A failed cell's row after `head` (_row_head): the error in one line, the time it took."""
    return {
        **head,
        "status": "error",
        "error": one_line(err),
        "wall_s": time.perf_counter() - start,
    }


def run_cell(cell: Cell, *, progress: bool = True, one_mesh: bool = False) -> dict:
    """plan.max_batch for the cell as a store row: the answer and what it cost, or the error;
    `one_mesh`: on the search's first mesh only (max_batch's `other_meshes`), the others left
    for mesh_row."""
    settings, row = cell.settings, _row_head(cell)
    start = time.perf_counter()
    try:
        check_runs_there(cell.model, cell.target)
    except BadInput as err:  # tunix has no program for this model there: nothing to search
        return {**_error_row(row, err, start), "status": DOES_NOT_RUN, "error": str(err)}
    try:
        request = plan.Request(model=cell.model, target=cell.target, **settings)
        # each mesh its own least batch
        search = plan.max_batch(request, progress=progress, other_meshes=not one_mesh)
    except Exception as err:  # recorded with its reason; --retry-failed tries again
        return _error_row(row, err, start)
    return search_row(row, search, time.perf_counter() - start)


def check_row(row: dict, cell: Cell, *, progress: bool = True) -> dict:
    """The stored `row`, computed before the search checked two units above its answer, with
    that check (shared.plan.search.gap.check_above, on the row's mesh): where the checked batch
    fails, the row as it was, saying so; where it fits, the answer the search found above it,
    the row's old failure among its dips. An error is the error row (the CLI keeps the stored
    row then)."""
    head, start = _row_head(cell), time.perf_counter()
    request, shape = _stored_request(row, cell)
    known = {row.get("checked_above"), row.get("checked_aligned")} - {None}
    if all(b in known for b in checks_above(row["max_batch"], row["multiple_of"], shape[0])):
        # a multi-chip row stored without its mesh: on the mesh it is checked on, the checks
        # are those already compiled, so the answer stands as checked (nothing to compile)
        return {
            **row,
            **head,
            **checked_fields(row["max_batch"], row["multiple_of"], shape[0], known),
        }
    try:
        check = check_above(
            request,
            shape,
            row["max_batch"],
            row["multiple_of"],
            known,
            worst=row.get("worst"),
            progress=progress,
        )
    except Exception as err:
        return _error_row(head, err, start)
    wall_s = time.perf_counter() - start
    if check["max_batch"]:  # two units above fits: the search went on above it
        name = mesh_name(check["mesh_shape"])
        found = {
            **check,
            "dips": sorted({*row.get("dips", []), *check["dips"], row["first_not_fitting"]}),
            "compiles": check["compiles"],
        }
        if row.get("mesh_answers"):
            found["mesh_answers"] = {**row["mesh_answers"], name: check["max_batch"]}
        found["units"] = {**stepped_units(row), **check["units"]}
        new = search_row(head, found, wall_s)
    else:  # they fail too (or the compiler fails there): the stored answer stands, checked
        crashed = check["compiler_errors"]
        failed = known | set(check["checked"]) - set(compiler_failed(check))
        new = {
            **row,
            **head,
            **checked_fields(row["max_batch"], row["multiple_of"], shape[0], failed),
            "compiler_errors": sorted(
                [*row.get("compiler_errors", []), *crashed], key=lambda e: e["batch"]
            ),
            "dips": row.get("dips", []),
            "probes": [[p["batch"], p["fast"], p["fits"]] for p in check["probes"]],
            "assigned_probes": [],
            "compiles": check["compiles"],
            "compile_s": sum(p["compile_s"] for p in check["probes"] if not p["cached"]),
            "wall_s": wall_s,
            "load_average": os.getloadavg(),
        }
        new["summary"] = plan.describe(
            {**new, "workload": cell.settings["workload"], "mesh_shape": check["mesh_shape"]}
        )
    return _after(row, new)


def _after(row: dict, new: dict) -> dict:
    """`new`, a row computed from the stored `row` (check_row, mesh_row), with the stored
    row's probes, compiles and time before its own."""
    return {
        **new,
        "probes": row["probes"] + new["probes"],
        # the cut models' verdicts that located it, stored 2026-11-23 to 2026-11-28
        **({"cut_probes": row["cut_probes"]} if row.get("cut_probes") else {}),
        "assigned_probes": row.get("assigned_probes", []) + new["assigned_probes"],
        "compiles": row["compiles"] + new["compiles"],
        "compile_s": row["compile_s"] + new["compile_s"],
        "wall_s": row["wall_s"] + new["wall_s"],
    }


def mesh_row(row: dict, cell: Cell, *, progress: bool = True) -> dict:
    """The stored `row`, answered before a search asked every mesh the weights divide
    (store.skipped_a_mesh), with the meshes it left unasked asked as today's search asks them
    (shared.plan.search.max_batch.beat_on_other_meshes: the highest batch_ceiling first, does it fit
    more than the answer, as many with fewer tp?): a mesh that does is searched on above it
    and its answer is the row's; otherwise the stored answer stands, every mesh asked. Where
    a search compiles again from scratch, this compiles one exact question a mesh, or none
    where arithmetic answers it. An error is the error row (the CLI keeps the stored row)."""
    head, start = _row_head(cell), time.perf_counter()
    request, shape = _stored_request(row, cell)
    devices = target_devices(parse_target(cell.target))
    stored = {  # the stored answer, as its mesh's search
        **{k: row[k] for k in ("max_batch", "first_not_fitting", "multiple_of")},
        **{"probes": [], "assigned_probes": [], "compiles": 0, "wall_s": 0.0},
    }
    try:
        ceilings = meshes_by_ceiling(request, devices)
        asked = {mesh_shape(m, len(devices)) for m in row.get("mesh_answers") or {}} | {shape}
        answers = {shape: stored}
        best = beat_on_other_meshes(
            answers,
            shape,
            [m for m in ceilings if m not in asked],
            row.get("worst"),
            searcher(request, progress=progress),
            CEILING,
        )
    except Exception as err:
        return _error_row(head, err, start)
    asked_now = {m: s for m, s in answers.items() if m != shape}
    found = meshes_result(answers, best, ceilings)
    found["mesh_answers"] = {
        **(row.get("mesh_answers") or {mesh_name(shape): row["max_batch"]}),
        **{mesh_name(m): mesh_answer(s) for m, s in asked_now.items()},
    }
    found["units"] = {**stepped_units(row), **found["units"]}
    if best != shape:  # a mesh fits more: its search is the answer
        new = search_row(head, found, time.perf_counter() - start)
    else:  # the stored answer stands, every mesh asked
        probes = [p for s in asked_now.values() for p in s["probes"]]
        fresh = [p for p in probes if not p["cached"]]
        new = {
            **row,
            **head,
            **{k: found[k] for k in ("mesh_answers", "units")},
            # every mesh today's search asks, a single one included (meshes_result names them
            # only where there are several): a mesh narrower than the rule's cannot hold the
            # weights by arithmetic (shared.plan.mesh.choice.auto_shape), and no search asks it
            "mesh_ceilings": {mesh_name(m): c for m, c in ceilings.items()},
            "mesh": mesh_name(shape),  # a row stored without it: the mesh it stood on
            "probes": [[p["batch"], p["fast"], p["fits"]] for p in probes],
            "assigned_probes": [
                [p["batch"], p["fits"]] for s in asked_now.values() for p in s["assigned_probes"]
            ],
            "compiles": sum(s["compiles"] for s in asked_now.values()),
            "compile_s": sum(p["compile_s"] for p in fresh),
            "wall_s": time.perf_counter() - start,
            "load_average": os.getloadavg(),
        }
        new["summary"] = plan.describe(
            {**new, "workload": cell.settings["workload"], "mesh_shape": found["mesh_shape"]}
        )
    return _after(row, new)


def coarse_row(row: dict, cell: Cell, *, progress: bool = True) -> dict:
    """The stored `row`, whose search stepped its meshes by the rule mesh's unit
    (store.stepped_coarsely), refined where a search from scratch would compile every mesh's
    search again: its answer's bracket closed at its mesh's own least batch (gap_row, the
    checks above included), then every other mesh asked today's one question, whether it fits
    more (mesh_row), since their stored answers are the coarse steps'. gemma3-27b rollouts on
    a v5e-8 fit 60 on 1x8, stepped by 2 there (62 failed): 61 is one compile, where the cell's
    search had taken 20. A row with no failure above its answer is computed again whole."""
    if row["at_least"] or row.get("first_not_fitting") is None:
        return run_cell(cell, progress=progress)
    request, shape = _stored_request(row, cell)
    fine = unit_for(pinned_to(request, shape), None)
    name = mesh_name(shape)
    closed = gap_row(
        {**row, "multiple_of": fine, "units": {**stepped_units(row), name: fine}},
        cell,
        progress=progress,
    )
    if closed["status"] != "ok":
        return closed
    asked_here = {**closed, "mesh_answers": {name: closed["max_batch"]}}
    return mesh_row(asked_here, cell, progress=progress)


def _stored_request(row: dict, cell: Cell) -> tuple[plan.Request, tuple[int, int]]:
    """The cell's request and the (fsdp, tp) mesh its stored `row` answered on."""
    request = plan.Request(model=cell.model, target=cell.target, **cell.settings)
    devices = target_devices(parse_target(cell.target))
    shape = (
        mesh_shape(row["mesh"], len(devices)) if row.get("mesh") else search_shape(request, devices)
    )
    return request, shape


def gap_row(row: dict, cell: Cell, *, progress: bool = True) -> dict:
    """The stored `row`, whose search stopped with a gap between a fitting and a failing batch,
    with the gap closed by exact compiles inside it on the row's mesh (shared.plan.search.gap), then
    checked two units above its new answer (check_row), unless that batch is a known failure.
    An error is the error row (the CLI keeps the stored row then)."""
    head, start = _row_head(cell), time.perf_counter()
    request, shape = _stored_request(row, cell)
    unit = row["multiple_of"]
    try:
        closed = close_gap(
            request, shape, row["max_batch"], row["first_not_fitting"], unit, progress=progress
        )
    except Exception as err:
        return _error_row(head, err, start)
    probes, fits = closed["probes"], closed["max_batch"]
    fresh = [p for p in probes if not p["cached"]]
    at = next((p for p in probes if p["batch"] == fits), None)
    new = {
        **row,
        **head,
        "max_batch": fits,
        "first_not_fitting": closed["first_not_fitting"],
        "compiler_errors": closed["compiler_errors"],
        "converged": True,
        "dips": sorted({*row.get("dips", []), *closed["dips"]}),
        "bytes_per_device": at["bytes_per_device"] if at else row["bytes_per_device"],
        "worst": at["worst"] if at else row.get("worst"),
        "probes": row["probes"] + [[p["batch"], p["fast"], p["fits"]] for p in probes],
        "compiles": row["compiles"] + sum(p.get("compiled", True) for p in fresh),
        "compile_s": row["compile_s"] + sum(p["compile_s"] for p in fresh),
        "wall_s": row["wall_s"] + time.perf_counter() - start,
        "load_average": os.getloadavg(),
    }
    mesh = {"fsdp": shape[0], "tp": shape[1]}
    if row.get("mesh_answers"):  # the other meshes' answers stand; this one's moved
        new["mesh_answers"] = {**row["mesh_answers"], mesh_name(mesh): fits}
    failed = {row["first_not_fitting"], *(p["batch"] for p in probes if _unfit(p))}
    new.update(checked_fields(fits, unit, shape[0], failed))  # not the stored answer's checks
    # no check above nothing: a bracket from 0 (a coarse row's "none fits", coarse_row)
    if fits and any(b not in failed for b in checks_above(fits, unit, shape[0])):
        return check_row(new, cell, progress=progress)
    new["summary"] = plan.describe(
        {**new, "workload": cell.settings["workload"], "mesh_shape": mesh}
    )
    return new


def _unfit(point: dict) -> bool:
    """A verdict that does not fit for its bytes: not one the compiler failed on."""
    return not point["fits"] and not point.get("compiler_errors")


def search_row(head: dict, search: dict, wall_s: float) -> dict:
    """A store row (after `head`, the cell's _row_head) for a max_batch `search` that took
    `wall_s`: its answer, the bytes of the exact verdict at it, and what it cost."""
    probes, mesh = search["probes"], search["mesh_shape"]
    at = next(
        (
            p
            for p in probes
            if not p["fast"] and p["batch"] == search["max_batch"] and p["mesh_shape"] == mesh
        ),
        None,
    )
    fresh = [p for p in (*probes, *search["assigned_probes"]) if not p["cached"]]
    return {
        **head,
        "status": "ok",
        "summary": plan.describe(search),
        **{
            k: search[k]
            for k in (
                "max_batch",
                "first_not_fitting",
                "at_least",
                "converged",
                "checked_above",
                "checked_aligned",
                "dips",
                "multiple_of",
                "ceiling",
                "compiler_errors",  # stored since 2026-11-30: where the compiler failed
            )
        },
        "devices": probes[0]["devices"],
        "mesh": mesh_name(mesh),
        "mesh_answers": search.get("mesh_answers"),  # every mesh searched: its largest batch
        "units": search["units"],  # every mesh searched: its step (stored since 2026-11-27)
        # every mesh the weights divide: the largest batch its floor holds (since 2026-11-28)
        "mesh_ceilings": search.get("mesh_ceilings"),
        "dtype": probes[0]["dtype"],
        "hbm_bytes": probes[0]["hbm_bytes"],
        "bytes_per_device": at and at["bytes_per_device"],
        "worst": at and at["worst"],
        "probes": [[p["batch"], p["fast"], p["fits"]] for p in probes],
        # stored since 2026-11-28: the whole model at buffer assignment
        # (shared.plan.compiler.assigned)
        "assigned_probes": [[p["batch"], p["fits"]] for p in search["assigned_probes"]],
        "compiles": search["compiles"],  # compiles only: a cached or arithmetic answer is not one
        "compile_s": sum(p["compile_s"] for p in fresh),
        "wall_s": wall_s,
        "load_average": os.getloadavg(),
    }


CHILD_EXIT_S = 60  # how long a cell's process may take to exit once it sent its row
# how a cell's process dies when the kernel kills it for memory or a compiler crashes in it;
# not SIGTERM or SIGINT, with which a person or a time limit stops the run
CRASH_SIGNALS = (signal.SIGKILL, signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS)


def _killed_for_memory() -> str:
    """Why a SIGKILL most likely came (the kernel's OOM killer; dmesg says for sure), with this
    machine's memory, so a reader of the atlas knows how much more a retry needs."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return (
        f"killed (signal 9), most likely for host memory: this machine has {total / 2**30:.1f} "
        "GiB; run it again on a larger one (--retry-failed)"
    )


def _send_row(work: Callable, cell: Cell, pipe, workers: int) -> None:
    verdict.WORKERS = workers  # this process's compiles at once (shared.plan.verdict)
    pipe.send(work(cell))
    pipe.close()


def run_cell_alone(cell: Cell, work: Callable = run_cell) -> dict:
    """`work(cell)` (run_cell) in a fresh process, its row sent back. XLA keeps the host memory
    a compile grew: after GRPO gemma4-e4b on a v5e-8 the run held 20 GB, and the next cell's
    compile (GRPO llama3.1-8b) took it past this 23 GiB machine, where the kernel killed the
    whole run. Alone, each cell starts from nothing, and a cell whose process dies (killed for
    memory, or any error run_cell could not catch) is a failed row, said in one line
    (--retry-failed runs it again), while the run goes on.

    A process the kernel killed for host memory, or one a compiler crash killed
    (CRASH_SIGNALS), runs again once with one compile at a time: two exact compiles side by
    side hold about twice the memory (gemma3-1b LoRA on a tpu7x-8, batches 160 and 168 at
    once: 17 GB, killed on this 23 GiB machine), and two at once overflowed a stack in
    libtpu's SparseCore code generator (qwen3-8b rollouts on a tpu7x-8: SIGSEGV; see
    shared.plan.verdict.ONE_COMPILE_AT_A_TIME), while the verdicts do not depend on how many
    compile at once. The row says so (`one_compile_at_a_time`: the seconds the killed try
    took, and the signal)."""
    row = _row_in_child(work, cell, verdict.WORKERS)
    if row.get("signal") in CRASH_SIGNALS and verdict.WORKERS > 1:
        killed = {"killed_try_s": row["wall_s"], "signal": row["signal"]}
        row = _row_in_child(work, cell, 1)
        row["one_compile_at_a_time"] = killed
    return row


def _row_in_child(work: Callable, cell: Cell, workers: int) -> dict:
    """`work(cell)` in a fresh process compiling `workers` executables at once: its row, or a
    failed row saying how the process died."""
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: no inherited heap
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_send_row, args=(work, cell, send, workers))
    start = time.perf_counter()
    child.start()
    send.close()  # the child holds the only writer: its death ends receive() with EOFError
    try:
        row = receive.recv()
        child.join(CHILD_EXIT_S)  # its own exit: terminated, libtpu prints a stack trace to the log
        return row
    except EOFError:
        child.join()
        code = child.exitcode
        died = _killed_for_memory() if code == -signal.SIGKILL else f"exit code {code}"
        return {
            **_row_head(cell),
            "status": "error",
            "error": f"the cell's process died: {died}",
            "signal": -code if code < 0 else None,
            "wall_s": time.perf_counter() - start,
        }
    finally:
        if child.is_alive():  # the run was stopped (SIGTERM, Ctrl-C): the compile stops too
            child.terminate()
        child.join()
