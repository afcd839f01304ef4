"""One candidate slice of `--cheapest`, compiled: the exact verdicts that price it.

On the mesh a verdict chooses, and on the wider ones (more tp, a smaller least batch) until one
fits and while the fastest so far is memory-bound: the slice is priced on its fastest mesh. On
each, the smallest batch first (with the remat that fits); when that step is memory-bound,
twice the batch, and then the largest batch up to the one whose cost per unit of work is within
COST_TOLERANCE of the least any batch could reach (`large_enough`; that one itself when it
fits, else a search below it). The cheapest of those verdicts is priced for the whole job: the
roofline (a lower bound) divided by the workload's stated efficiency (shared.plan.slices.budget),
times the dated price.
"""

from __future__ import annotations

import dataclasses
import math
import time

from shared.errors import BadInput
from shared.hardware import parse_target
from shared.hardware.sharding import mesh_name
from shared.plan.compiler.target import target_devices
from shared.plan.mesh.choice import auto_shape, least_batch, wider_shapes
from shared.plan.mesh.steps import pinned_to
from shared.plan.search.max_batch import max_batch
from shared.plan.slices import budget
from shared.plan.slices.job import Job, runs
from shared.plan.verdict import floor_verdict, plan_point
from shared.plan.workloads.request import Request

# tried in this order until one fits; each keeps less than the one before it
REMATS = {"lora-train": ("none", "block"), "sft": ("none", "block"), "train": ("none", "block")}


# A batch whose roofline cost per unit of work is within this of the least any larger batch
# could reach is large enough: cost is the question, and the rest would take ever larger
# batches (and compiles) for under a tenth off the bill.
COST_TOLERANCE = 0.10


def roofline_terms(point: dict) -> tuple[float, float]:
    """A verdict's roofline terms, seconds: FLOPs at peak and bytes at HBM bandwidth."""
    chip = parse_target(point["target"]).chip
    return chip.roofline_terms(point["flops_per_device"], point["bytes_accessed_per_device"])


def _priced(point: dict, job: Job, kind: str) -> dict:
    est = budget.estimate(point, runs=runs(point, job), kind=kind)
    return {
        "batch": point["batch"],
        "remat": point["remat"],
        "mesh_shape": point["mesh_shape"],
        "hosts": point["hosts"],
        "bytes_per_device": point["bytes_per_device"],
        "hbm_bytes": point["hbm_bytes"],
        "runs": est["runs"],
        "roofline_hours": est["roofline_s"] / budget.SECONDS_PER_HOUR,
        "hours": est["estimated_s"] / budget.SECONDS_PER_HOUR,
        "dollars_at_roofline": est.get("dollars_at_roofline"),
        "dollars": est.get("dollars_estimated"),
        "assumed_efficiency": est["assumed_efficiency"],
        "efficiency_source": est["efficiency_source"],
        "price_read": est.get("price_read"),
    }


def large_enough(small: dict, double: dict) -> int:
    """The least batch whose roofline cost per unit of work is within COST_TOLERANCE of the
    least any batch could reach, from exact verdicts at one and two units: per run, FLOPs grow
    as b·f and bytes as w + b·a (the weights read once, the rest per sequence), so the cost
    per sequence, max(f/peak, (w/b + a)/bw), falls towards max(f/peak, a/bw) as b grows. A
    multiple of the unit (the mesh's fsdp): a tiny LoRA on a v5e-8 asked 78, which 8 chips
    cannot split."""
    (f1, b1), (f2, b2) = roofline_terms(small), roofline_terms(double)
    unit = double["batch"] - small["batch"]
    per_seq_flops, per_seq_bytes = (f2 - f1) / unit, (b2 - b1) / unit
    weights = max(b1 - small["batch"] * per_seq_bytes, 0.0)
    floor = max(per_seq_flops, per_seq_bytes)
    if floor <= 0:  # nothing grows with the batch: the larger one is as good as any
        return double["batch"]
    least = math.ceil(weights / ((1 + COST_TOLERANCE) * floor - per_seq_bytes))
    return unit * math.ceil(least / unit)


def compile_candidate(
    request: Request,
    job: Job,
    kind: str,
    *,
    use_cache: bool,
    lightest_first: bool = False,
    deadline: float | None = None,
) -> dict:
    """Exact verdicts for one slice (`_on_one_mesh`), on the mesh a verdict chooses (the least
    tp that holds the weights: shared.plan.mesh.choice), then on each mesh with more tp, tp rising,
    at that mesh's own least batch: until one fits, and past it while the fastest so far is
    memory-bound; the slice is priced on its fastest mesh (_fastest_mesh).
    A wider mesh splits a sequence's activations over its tp chips and needs fewer sequences a
    step: on a v5e-8, llama3.1-8b's LoRA step fits nothing on 8x1 or 4x2 and 4 on 2x4, its full
    fine-tune 2 on 2x4 only, its GRPO step 8 on 1x8 only (docs/atlas.md). And each chip reads
    only its share of the weights, where fsdp gathers them whole: GRPO of gemma3-4b at 8 on a
    v5e-8 (tunix's demo recipe, decode-heavy) fits on 8x1 at 37.4 s a step at the roofline and
    on 2x4 at 18.2 (benchmarks/results/08_grpo_v5e8.json): priced on 8x1, the slice cost twice
    what it needs. The climb stops at a compute-bound fit (more tp adds no FLOPs a chip) or a
    wider mesh no faster (_faster), or where the search's `deadline` (time.monotonic())
    would pass before a mesh compiled as long as the last one did: no mesh compiles for speed
    then, only for a fit (the row names those left; gemma3-27b's LoRA job in notebook 08 spent
    9 minutes on 4x1 of its 12, and 2x2 would have taken as long again). A mesh whose
    floor (arguments alone, by arithmetic) does not fit is not compiled; until one fits, the
    remat that keeps least compiles first (where it does not fit, none does). A slice that
    fits on no mesh says why on each (GRPO of gemma3-4b at 8 on a v5e-4: 17.76 GiB a chip on
    4x1, 18.40 on 2x2)."""
    first = _on_one_mesh(request, job, kind, use_cache=use_cache, lightest_first=lightest_first)
    if request.mesh is not None:
        return first
    devices = target_devices(parse_target(request.target))
    chosen = auto_shape(request, devices)[0]
    rows, left = {chosen: first}, []
    for shape in wider_shapes(request, devices, chosen):
        fastest = _fastest(rows)
        if fastest and fastest["compute_bound"]:
            break
        last = rows[next(reversed(rows))]["compile_s"]  # a wider mesh's, foreseen
        if fastest and deadline is not None and time.monotonic() + last > deadline:
            left.append(shape)
            continue
        wider = pinned_to(request, shape)
        if request.workload != "grpo":  # GRPO keeps its recipe's batch
            wider = dataclasses.replace(wider, batch=least_batch(wider, shape[0]))
        try:
            floor = floor_verdict(wider)
        except BadInput as err:  # the batch does not divide this mesh's fsdp
            rows[shape] = _not_compiled(str(err))
            continue
        if not floor["fits"]:
            rows[shape] = _not_compiled(
                f"batch {wider.batch}'s arguments alone need "
                f"{floor['floor_bytes'] / 2**30:.2f} GiB a device (arithmetic, no compile)"
            )
            continue
        rows[shape] = _on_one_mesh(
            wider,
            job,
            kind,
            use_cache=use_cache,
            lightest_first=fastest is None,
            search_below=fastest is None,
        )
        if fastest and not _faster(rows[shape], fastest):
            break
    row = _fastest_mesh(rows, chosen)
    if left:
        names = ", ".join(mesh_name(s) for s in left)
        spent = (
            f"{names} not compiled (the search's time budget: --minutes to go further), "
            "where it may run faster"
        )
        row["why"] = f"{row['why']}; {spent}" if row.get("why") else spent
    return row


def _not_compiled(why: str) -> dict:
    return {"status": "does not fit", "why": why, "compiles": 0, "compile_s": 0.0}


def _fastest(rows: dict[tuple[int, int], dict]) -> dict | None:
    """The fitting row of the least roofline hours, or None."""
    fitting = [r for r in rows.values() if r["status"] == "fits"]
    return min(fitting, key=lambda r: r["roofline_hours"], default=None)


def _faster(row: dict, than: dict) -> bool:
    """Whether `row` fits and takes less time than `than` at the roofline: by any margin, as
    small steps add up (gemma4-31b's LoRA step at 4 on a v6e-4: 0.799 s at the roofline on 4x1,
    0.757 on 2x2 and 0.723 on 1x4; a climb that stopped short of COST_TOLERANCE a mesh stopped
    at 2x2, and missed the 1x4 that costs 10% less than 4x1)."""
    return row["status"] == "fits" and row["roofline_hours"] < than["roofline_hours"]


def _fastest_mesh(rows: dict[tuple[int, int], dict], chosen: tuple[int, int]) -> dict:
    """One slice's row from its meshes' (`chosen` first): the fastest that fits, with every
    mesh's compiles and seconds, and why it is that mesh; where none fits, why on each."""
    compiles = sum(r["compiles"] for r in rows.values())
    seconds = sum(r["compile_s"] for r in rows.values())
    fastest = _fastest(rows)
    if fastest is None:
        why = "; ".join(f"{mesh_name(s)}: {r['why']}" for s, r in rows.items())
        return {**rows[chosen], "compiles": compiles, "compile_s": seconds, "why": why}
    if len(rows) == 1:
        return fastest
    shape = next(s for s, r in rows.items() if r is fastest)
    others = "; ".join(
        f"{mesh_name(s)}: " + (f"{r['hours']:.3g} h" if r["status"] == "fits" else r["why"])
        for s, r in rows.items()
        if r is not fastest
    )
    lead = "fits" if rows[chosen]["status"] != "fits" else "fastest"
    why = f"{lead} on {mesh_name(shape)}, not on {others}"
    return {**fastest, "compiles": compiles, "compile_s": seconds, "why": why}


def _on_one_mesh(
    request: Request,
    job: Job,
    kind: str,
    *,
    use_cache: bool,
    lightest_first: bool = False,
    search_below: bool = True,
) -> dict:
    """Exact verdicts on the request's mesh: the smallest batch with the remat that fits (REMATS in
    order; with `lightest_first`, the remat that keeps least first, and the others only when it
    fits: one that keeps more cannot fit where it does not); when its step is memory-bound,
    twice that, and then the largest batch up to the one that is large enough
    (`large_enough`): that one is compiled first, and only when it does not fit is the largest
    that does searched for (a search would confirm it with the same exact compile, after
    locating it with fast ones), unless `search_below` is False (a wider mesh tried for speed:
    the search compiles two exact programs at once, and two of gemma3-27b's LoRA step at 4,096
    tokens on a 2x2 v6e-4 took the process to 20.7 GB, killed on a 23 GB machine; without it
    the mesh's price is an upper bound on its cost). The cheapest of them priced, or why none
    fits.
    `remats_tried` says which remat was compiled at the smallest batch and whether it fit."""
    compiles, seconds = 0, 0.0

    def exact(req: Request) -> dict:
        nonlocal compiles, seconds
        point = plan_point(req, use_cache=use_cache)
        compiles += not point["cached"]
        seconds += 0.0 if point["cached"] else point.get("compile_s", 0.0)
        return point

    tried: dict[str, bool] = {}
    fitting: list[dict] = []
    remats = REMATS.get(request.workload, (request.remat,))
    for remat in reversed(remats) if lightest_first else remats:
        point = exact(dataclasses.replace(request, remat=remat))
        tried[remat] = point["fits"]
        if point["fits"]:
            fitting.append(point)
        if point["fits"] != lightest_first:
            break  # in order: the first that fits; lightest first: the first that does not
    if not fitting:
        skipped = [r for r in remats if r not in tried]
        if failed := point.get("compiler_errors"):  # no bytes: the compiler failed inside
            need = (
                f"libtpu {point['versions']['libtpu']} fails to compile batch {point['batch']} "
                f"with remat {point['remat']} (not for lack of HBM: {next(iter(failed.values()))})"
            )
        else:
            need = (
                f"batch {point['batch']} needs {point['bytes_per_device'] / 2**30:.2f} GiB "
                f"a device of {point['hbm_bytes'] / 2**30:.2f} with remat {point['remat']} "
                "(exact compile)"
            )
        return {
            "status": "does not fit",
            "why": need
            + (f"; remat {', '.join(skipped)}, which keeps more, not compiled" if skipped else ""),
            "compiles": compiles,
            "compile_s": seconds,
            "remats_tried": tried,
        }
    point = min(fitting, key=lambda p: p["roofline_lower_bound_s"])
    request = dataclasses.replace(request, remat=point["remat"])
    points = [point]
    flops_s, bytes_s = roofline_terms(point)
    if bytes_s > flops_s and request.workload != "grpo":  # GRPO keeps its recipe's batch
        double = exact(dataclasses.replace(request, batch=2 * request.batch))
        if double["fits"]:
            points.append(double)
            enough = large_enough(point, double)
            if enough > double["batch"]:
                at_enough = exact(dataclasses.replace(request, batch=enough))
                if at_enough["fits"]:  # in large_enough's model, none between costs less
                    points.append(at_enough)
                elif search_below:
                    searched = max_batch(
                        request, ceiling=enough, use_cache=use_cache, progress=False
                    )
                    compiles += searched["compiles"]
                    seconds += sum(
                        p.get("compile_s", 0.0)
                        for p in (*searched["probes"], *searched["assigned_probes"])
                        if not p["cached"]
                    )
                    points += [p for p in searched["probes"] if not p["fast"] and p["fits"]]
    best = min(points, key=lambda p: p["roofline_lower_bound_s"] / _work(p, job))
    flops_s, bytes_s = roofline_terms(best)
    return {
        "status": "fits",
        "compute_bound": flops_s >= bytes_s,
        "compiles": compiles,
        "compile_s": seconds,
        "remats_tried": tried,
        # the whole program's FLOPs and bytes per unit of work (all devices): what a GPU row
        # is estimated from
        "flops_per_unit": best["flops_per_device"] * best["devices"] / _work(best, job),
        "bytes_per_unit": best["bytes_accessed_per_device"] * best["devices"] / _work(best, job),
        **_priced(best, job, kind),
    }


def _work(point: dict, job: Job) -> float:
    """The job's units one run of the verdict does (a GRPO run is one step)."""
    if job.unit == "tokens":
        return point["batch"] * point["seq"]
    return point["batch"] if job.unit == "sequences" else 1
