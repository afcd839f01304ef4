"""Which slice to rent for a whole job: the cheapest one that fits, its hours and dollars.

    python -m shared.plan lora-train --model gemma3-27b --seq 4096 --lora-rank 16 \\
        --cheapest --tokens 5e7

The job and its bound are shared.plan.slices.job's; a candidate's compiles are
shared.plan.slices.candidate's. The candidates are the slices Cloud TPU rents
(shared.hardware.rent), each on its fastest mesh: the one a verdict chooses
(shared.plan.mesh.choice), and those with more tp until one fits and while the fastest is
memory-bound (shared.plan.slices.candidate). Work goes from free to dear:

1. **Exclude by arithmetic.** A slice whose devices cannot hold the weights, optimizer state
   and one smallest batch's arguments (`verdict.floor_verdict`, exact from shapes) is out
   without a compile.
2. **Bound.** No run costs less than its matmul FLOPs at the slice's peak, times its price
   (`slice_job.bound`). A candidate whose bound is not below the best compiled candidate's
   roofline dollars cannot win and is not compiled.
3. **Compile, breadth first.** Each chip's smallest slice, in the order of the chips' bounds,
   and the next size of a chip until one fits (`_visit_order`); only then larger slices of
   the chips that fit. A chip whose slice needed a remat that keeps less tries that one first
   on its larger slices. A larger slice is not compiled once a smaller one of its chip was
   compute-bound (it cannot cost less per token) or the last size up saved under
   COST_TOLERANCE. Two sizes of a chip in a row that do not fit, MAX_COMPILED slices, or the
   time budget (`minutes`) end a chip's or the whole search: a search limit, each row says so.
4. **Answer** with the cheapest compiled candidate that fits: hours and dollars are the
   roofline (a lower bound) divided by the workload's stated efficiency (shared.plan.slices.budget),
   times the dated price. The frontier is every compiled candidate no other beats on both
   hours and dollars.

GPU machines (shared.hardware.rent.GPU_SLICES: T4, L4, A100, H100, H200) are candidates as the
TPU slices are, compiled without the GPU by jax's CUDA plugin (shared.plan.compiler.target), so a
GPU can win. Their roofline has no cost analysis behind it (a deviceless CUDA compile counts
nothing): the matmul bound and the weights' bytes (shared.plan.verdict), a looser lower bound
than a TPU's, so a GPU's hours lean optimistic beside a TPU's.
"""

from __future__ import annotations

import dataclasses
import time

from shared.errors import BadInput, choose, positive
from shared.hardware import parse_target, prices, rent
from shared.hardware.sharding import mesh_name
from shared.plan.mesh.steps import unit_for
from shared.plan.slices import budget
from shared.plan.slices.candidate import COST_TOLERANCE, REMATS, compile_candidate
from shared.plan.slices.job import Job, bound, job_for
from shared.plan.verdict import floor_verdict
from shared.plan.workloads.request import Request

MAX_COMPILED = 6  # candidates compiled before the search stops and says so
MAX_MISSES = 2  # sizes of a chip in a row that do not fit before its larger ones are left
# Minutes of compiling before the search starts no further slice (whose time it predicts from
# the slices before): a 27B candidate near its HBM takes 3-10 minutes on 2 cores.
SEARCH_MINUTES = 12.0


def _smallest(request: Request, target: str) -> Request:
    """The request on `target` at its smallest batch (GRPO keeps the recipe's), default mesh."""
    on_target = dataclasses.replace(request, target=target, mesh=None)
    if request.workload == "grpo":
        return on_target
    return dataclasses.replace(on_target, batch=unit_for(on_target, None))


# workload -> the notebook that runs it on a TPU VM (make tpu-execute NB=...)
NOTEBOOK = {"rollout": "01", "lora-rollout": "01", "lora-train": "02", "train": "04", "grpo": "07"}
TAKES_MESH = {"01", "02", "07"}  # the notebooks whose device mode takes a MESH parameter


def _slice_rows(request: Request, job: Job, kind: str, slices: tuple[str, ...]) -> list[dict]:
    """Every slice (TPU slice or GPU machine) with its floor verdict: excluded, or a candidate
    with its bound."""
    rows = []
    for chip in {**rent.TPU_SLICES, **rent.GPU_SLICES}:
        for target in (t for t in slices if parse_target(t).chip.name == chip):
            slice_ = parse_target(target)
            row = {"target": target, "chip": chip, "chips": slice_.chips, "hosts": slice_.hosts}
            row["gpu"] = not slice_.chip.is_tpu
            try:
                small = _smallest(request, target)
                floor = floor_verdict(small)  # its request check refuses qwen3's MoE on a GPU
            except BadInput as err:  # tunix cannot run it there, or no mesh shards it
                rows.append({**row, "status": "excluded", "why": str(err)})
                continue
            row.update(batch=small.batch, floor_bytes=floor["floor_bytes"])
            row.update(hbm_bytes=floor["hbm_bytes"], mesh_shape=floor["mesh_shape"])
            if not floor["fits"]:
                row.update(
                    status="excluded",
                    why=f"weights, state and batch {small.batch}'s inputs need "
                    f"{floor['floor_bytes'] / 2**30:.2f} GiB a device of "
                    f"{floor['hbm_bytes'] / 2**30:.2f} (arithmetic, no compile)",
                )
            else:
                row.update(status="candidate", request=small, **bound(request, job, target, kind))
            rows.append(row)
    return rows


def _visit_order(row: dict, fitted: dict[str, dict]) -> tuple:
    """Breadth first over chips: every chip's slices, smallest first, until one fits, in the
    order of the chips' bounds; only then larger slices of chips that fit, the chip whose
    largest fitting slice costs least first. (Every slice of a chip shares one bound, so by
    the bound alone the search would climb one chip's sizes and never reach the next chip.)"""
    found = fitted.get(row["chip"])
    rank = found["dollars_at_roofline"] if found else (row["bound_dollars"] or 0.0)
    return (row["bound_dollars"] is None, found is not None, rank, row["chips"])


def _settles(row: dict, smaller: dict | None) -> str | None:
    """Why larger slices of `row`'s chip need no compile, or None. Compute-bound: a larger
    slice cannot lower the cost per token (FLOPs per token do not fall). A search heuristic,
    not a bound: when the next size up saved less than COST_TOLERANCE, a larger slice buys
    speed, not savings, and is not compiled (its row says so)."""
    if row["compute_bound"]:
        return (
            f"{row['target']} is compute-bound and fits: a larger {row['chip']} slice "
            "cannot lower the cost per token"
        )
    if (
        smaller
        and row["dollars_at_roofline"] >= (1 - COST_TOLERANCE) * smaller["dollars_at_roofline"]
    ):
        return (
            f"{row['target']} cost within {COST_TOLERANCE:.0%} of {smaller['target']}: a "
            "larger slice buys speed, not savings (not compiled)"
        )
    return None


def cheapest(
    request: Request,
    amount: float,
    *,
    kind: str = "on-demand",
    within_hours: float | None = None,
    slices: tuple[str, ...] = rent.ALL_SLICES,
    max_compiled: int = MAX_COMPILED,
    minutes: float | None = SEARCH_MINUTES,
    use_cache: bool = True,
    progress: bool = True,
) -> dict:
    """Every rented slice for `amount` units of the request's workload, and the cheapest that
    fits (see the module docstring for the order of the work). `minutes`: None for no time
    budget."""
    from tqdm.auto import tqdm

    job = job_for(request.workload, amount)
    choose("price kind", kind, prices.HOURLY_KINDS)
    positive(within_hours=within_hours, minutes=minutes)
    for target in slices:
        choose("rented slice", parse_target(target).name, rent.ALL_SLICES)
    rows = _slice_rows(request, job, kind, slices)
    search = _Search(request, kind, within_hours, max_compiled, minutes)
    deadline = None if minutes is None else time.monotonic() + 60 * minutes
    pending = [r for r in rows if r["status"] == "candidate"]
    bar = tqdm(desc=f"cheapest slice for {request.model}", unit="slice", disable=not progress)
    while pending:
        row = min(pending, key=lambda r: _visit_order(r, search.last))
        pending.remove(row)
        small = row.pop("request")
        skip = search.skip(row)
        if skip:
            row.update(status=skip[0], why=skip[1])
            continue
        bar.set_postfix(slice=row["target"])
        started = time.monotonic()
        lightest_first = row["chip"] in search.lightest_first
        row.update(
            compile_candidate(
                small,
                job,
                kind,
                use_cache=use_cache,
                lightest_first=lightest_first,
                deadline=deadline,
            )
        )
        search.record(row, time.monotonic() - started)
        bar.update()
    bar.close()
    best = search.best
    fitting = [
        r
        for r in rows
        if r["status"] == "fits" and (within_hours is None or r["hours"] <= within_hours)
    ]
    return {
        "request": dataclasses.asdict(request),
        "job": dataclasses.asdict(job),
        "price_kind": kind,
        "within_hours": within_hours,
        "minutes": minutes,
        "rows": rows,
        "choice": best,
        "frontier": frontier(fitting),
        "compiled_slices": search.compiled,
        "compile_s": search.seconds,
        "compiles": sum(r.get("compiles", 0) for r in rows),
        "commands": commands(request.workload, best, kind) if best else None,
    }


class _Search:
    """What the search has learned so far, and whether a slice is still worth compiling."""

    def __init__(self, request, kind, within_hours, max_compiled, minutes):
        self.kind, self.within_hours = kind, within_hours
        self.max_compiled, self.minutes = max_compiled, minutes
        self.efficiency = budget.EFFICIENCY[request.workload].fraction
        self.remats = REMATS.get(request.workload, (request.remat,))
        self.best: dict | None = None
        self.compiled, self.seconds = 0, 0.0
        self.settled: dict[str, tuple[str, str]] = {}  # chip -> (status, why) of its larger slices
        self.last: dict[str, dict] = {}  # chip -> its largest compiled slice that fits
        self.misses: dict[str, list[str]] = {}  # chip -> its slices in a row that did not fit
        self.lightest_first: set[str] = set()  # chips whose first remat did not fit

    def skip(self, row: dict) -> tuple[str, str] | None:
        """(status, why) when `row` is not compiled; None when it is."""
        best, efficiency, within = self.best, self.efficiency, self.within_hours
        if row["bound_dollars"] is None:
            return "no price", f"no {self.kind} price: it cannot be ranked on dollars"
        if within and row["bound_hours"] / efficiency > within:
            return "too slow", (
                f"even its FLOP bound takes {row['bound_hours'] / efficiency:.3g} h at "
                f"{efficiency:.0%} (over {within:g} h)"
            )
        if best and row["bound_dollars"] >= best["dollars_at_roofline"]:
            return "cannot win", (
                f"its FLOP bound ${row['bound_dollars']:,.4g} is not below "
                f"{best['target']}'s ${best['dollars_at_roofline']:,.4g} at the roofline"
            )
        if row["chip"] in self.settled:
            return self.settled[row["chip"]]
        if self.compiled >= self.max_compiled:
            return "not compiled", f"the search stops at {self.max_compiled} slices"
        if self.minutes is not None and self.compiled:
            predicted = self.seconds * (self.compiled + 1) / self.compiled
            if predicted > 60 * self.minutes:
                return "not compiled", (
                    f"the search's {self.minutes:g}-minute budget: {self.seconds / 60:.0f} min "
                    f"spent on {self.compiled} slices (--minutes to go further)"
                )
        return None

    def record(self, row: dict, seconds: float) -> None:
        """Learn from a compiled slice: the best so far, and what its chip's larger slices
        need (a remat order, or no compile at all)."""
        self.compiled += 1
        self.seconds += seconds
        chip = row["chip"]
        if row["remats_tried"].get(self.remats[0]) is False:
            self.lightest_first.add(chip)
        if row["status"] != "fits":
            missed = self.misses.setdefault(chip, [])
            missed.append(row["target"])
            if len(missed) >= MAX_MISSES:
                self.settled[chip] = (
                    "not compiled",
                    (
                        f"{' and '.join(missed)} did not fit in a row: the search leaves the "
                        f"larger {chip} slices (a search limit, not a verdict)"
                    ),
                )
            return
        self.misses.pop(chip, None)
        if self.within_hours and row["hours"] > self.within_hours:
            row["why"] = f"misses {self.within_hours:g} h"
            return
        if self.best is None or row["dollars_at_roofline"] < self.best["dollars_at_roofline"]:
            self.best = row
        settle = _settles(row, self.last.get(chip))
        if settle:
            self.settled[chip] = "not needed", settle
        self.last[chip] = row


def frontier(rows: list[dict]) -> list[dict]:
    """The rows no other row beats on both hours and dollars, fastest first."""
    return sorted(
        (
            r
            for r in rows
            if not any(
                q["hours"] <= r["hours"]
                and q["dollars"] <= r["dollars"]
                and (q["hours"], q["dollars"]) != (r["hours"], r["dollars"])
                for q in rows
            )
        ),
        key=lambda r: r["hours"],
    )


def commands(workload: str, choice: dict, kind: str) -> dict:
    """The commands that rent the chosen slice and run the workload's notebook on it, on the
    mesh the answer was priced on where the notebook takes one (MESH): left to its default
    (every chip on fsdp), GRPO of gemma3-4b on a v5e-4 needs 17.76 GiB a chip, over its 15.75,
    where the answer's 1x4 fits 13.82."""
    notebook = NOTEBOOK.get(workload)
    params = "-p MODE device"
    if notebook in TAKES_MESH:
        params += f" -p MESH {mesh_name(choice['mesh_shape'])}"
    if choice.get("gpu"):
        run = f"make setup JAX_EXTRA=cuda12 && make execute NB={notebook} PARAMS='{params}'"
    else:
        run = f"{rent.run_command(notebook)} PARAMS='{params}'"
    return {
        "create": rent.create_command(choice["target"], spot=kind == "spot"),
        "run": run if notebook else None,
    }
