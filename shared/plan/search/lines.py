"""Where a batch search's next exact compile aims: step 2, confirm, of docs/search.md (and step
3's checks_above). Lines through the points it has compiled (shared.plan.search.max_batch),
their slopes, and the partner compiled beside a candidate.
Arithmetic on verdicts' batches and bytes, and on the floor's (shared.plan.mesh.floor, by
arithmetic); nothing here compiles."""

from __future__ import annotations

import dataclasses

from shared.plan.verdict import floor_verdict, workers_for
from shared.plan.workloads.request import Request

# Near its HBM the exact compiler works to fit (rematerialising, serialising), and the bytes it
# reports stop growing with the batch: gemma3-1b full fine-tunes on a v5p-8 took 98.3, 98.7,
# 97.7, 99.1, 97.0 and 100.7 GB of 102.8 at batches 120 to 184, where the fast line grows
# 0.83 GB a sequence, and batch 540 asked for 304 GB. Two fitting exact points whose slope is
# under this share of the located one are in that squeeze: a line through them, or from them to
# a failure, says nothing about where fitting ends (the search crept 160, 164, 168, 176, 184),
# so the search steps up by GALLOP until a batch fails and then halves the bracket.
SQUEEZE_SLOPE = 0.25
GALLOP = 1.25
# A one-device rollout's search compiles the unit above its candidate beside it (False: the
# candidate alone, as before 2026-12-03: benchmarks/results/plan_above_first.json) where a
# unit's bytes exceed FAST_LINE_ERROR of the HBM: the least gap measured between its bytes
# compiled fast and exactly (gemma3-1b at 374 on a v5e-1: 0.3% under; qwen3-8b at 32 on a
# v6e-1: 1.5% over; benchmarks/results/plan_locate_rollout.json)
ABOVE_WORST_FIRST = True
FAST_LINE_ERROR = 0.003


def crossing(at: dict, slope: float, usable: int, unit: int, ceiling: int) -> int:
    """The largest multiple of `unit` up to `ceiling` where the line through `at` (batch,
    bytes) with `slope` stays within `usable` bytes."""
    if slope <= 0:
        return ceiling
    batch = at["batch"] + (usable - at["bytes_per_device"]) / slope
    return int(max(unit, min(ceiling, batch)) // unit * unit)


def slope(a: dict, b: dict) -> float:
    return (b["bytes_per_device"] - a["bytes_per_device"]) / (b["batch"] - a["batch"])


def halfway(best: int, worst: int | None, unit: int) -> int:
    """The multiple of `unit` halfway from the largest fit `best` to the least failure above
    it `worst` (None: none, and twice `best` stands in for it)."""
    return (best + (worst or 2 * best)) // 2 // unit * unit


def illinois(failing: dict, usable: int, kept: int) -> dict:
    """The failing end of a regula falsi bracket as its line should see it: its excess over
    `usable` halved for every round past the first that `kept` it (the Illinois rule). Where
    the bytes bend upward, every line from a fit to that end lands below the boundary, so the
    fits creep toward it while the failure stays (gemma4-e4b rollouts on a v6e-8: 928, 968,
    992 fit under a failure at 1072, and the search ran out of compiles with a gap); halving
    its weight moves the next guess toward it."""
    if kept < 2:
        return failing
    excess = failing["bytes_per_device"] - usable
    return {**failing, "bytes_per_device": usable + excess / 2 ** (kept - 1)}


def failures_line(exact: dict[int, dict], unit: int) -> tuple[dict, float] | None:
    """The line through the two smallest failing batches the compiler compiled (not answered
    by arithmetic, whose arguments-only bytes are a floor): the smaller one and the slope, or
    None without two such or with a slope that does not rise."""
    failed = [p for _, p in sorted(exact.items()) if not p["fits"] and p.get("compiled", True)]
    if len(failed) < 2:
        return None
    first, second = failed[0], apart(failed[0], failed[1:], unit)
    if second is None or slope(first, second) <= 0:
        return None
    return first, slope(first, second)


def apart(end: dict, others: list[dict], unit: int) -> dict | None:
    """Of exact points `others` (nearest to `end` first), the nearest at least two units of
    batch from `end`: a paired compile (partner) puts two points one unit apart, and a
    slope over one unit is the compiler's padding and scheduling more than the batch's bytes."""
    return next((p for p in others if abs(p["batch"] - end["batch"]) >= 2 * unit), None)


def fits_slope(
    exact: dict[int, dict], fits: list[int], unit: int, one_unit_will_do: bool
) -> float | None:
    """The slope from the largest fitting exact batch (of `fits`, ascending) to the nearest
    fit two units or more below it (see apart); to one a unit below only where nothing else
    gives a slope (`one_unit_will_do`: no located slope), or None."""
    if not fits:
        return None
    below = [exact[b] for b in reversed(fits[:-1])]
    lower = apart(exact[fits[-1]], below, unit) or (
        below[0] if below and one_unit_will_do else None
    )
    return slope(lower, exact[fits[-1]]) if lower else None


# Rows a device that the compiler lays out on the bytes' trend line, where the rows between can
# cost more: llama3.1-8b rollouts on a 4x2 of a v5e-8 (batch / 4 rows a device) fit 48, 49 and
# 52 rows (15.11, 15.49 and 15.68 GiB of 15.75) but not 50, 51, 53 or 54 (16.08-16.71). A
# search that stopped at 49 with 50 and 51 failing said 196 where 208 fits (benchmarks/
# results/plan_mesh_search_before.json and plan_mesh_search.json, the same request).
ALIGNED_ROWS = 4


def checks_above(answer: int, unit: int, fsdp: int) -> list[int]:
    """The batches above an `answer` (one unit above it failed) that must fail too for it to
    stand: two units above it, and the next batch whose rows a device are a multiple of
    ALIGNED_ROWS, where that is further (fsdp: the mesh's data-parallel size)."""
    above = answer + 2 * unit
    rows = (answer // fsdp // ALIGNED_ROWS + 1) * ALIGNED_ROWS
    aligned = -(-rows * fsdp // unit) * unit
    return [above, aligned] if aligned > above else [above]


def checked_fields(answer: int, unit: int, fsdp: int, failed: set[int]) -> dict:
    """A search result's or an atlas row's record of the checks above `answer` (checks_above)
    among the `failed` batches: `checked_above` and `checked_aligned`, each None where it was
    not compiled (or, for the aligned one, is no further than two units)."""
    above, *aligned = checks_above(answer, unit, fsdp) if answer else [None]
    return {
        "checked_above": above if above in failed else None,
        "checked_aligned": aligned[0] if aligned and aligned[0] in failed else None,
    }


def bracket(exact: dict[int, dict]) -> tuple[int, int | None]:
    """The largest fitting exact batch (0: none) and the least failing one above it (None:
    none). A failure below the largest fit is a dip, not a bound: the compiler's bytes are not
    monotone in the batch (llama3.1-8b rollouts on a pinned 4x2 of a v5e-8: 184 and 192 fit,
    188 does not; max_batch's checks above, checks_above)."""
    best = max((b for b, p in exact.items() if p["fits"]), default=0)
    worst = min((b for b, p in exact.items() if not p["fits"] and b > best), default=None)
    return best, worst


def set_aside_compiler_failures(
    exact: dict[int, dict], failed: dict[int, dict], ceiling: int, unit: int
) -> int:
    """Move the exact verdicts the compiler failed on (compiled.compiler_failure) from `exact`
    into `failed`, by batch, and return the search's ceiling: one unit under the least of them
    above the largest fit. Such a batch neither fits nor fails for lack of HBM (it has no
    bytes to aim a line with), and these versions cannot run it, so the search goes on below
    it and the answer says where the compiler failed (search_result)."""
    for batch in [b for b, p in exact.items() if p.get("compiler_errors")]:
        failed[batch] = exact.pop(batch)
    best = bracket(exact)[0]
    return min([ceiling, *(b - unit for b in failed if b > best)])


def under_compiler_failure(
    best: int, worst: int | None, failed: dict[int, dict], unit: int
) -> int | None:
    """Where a search compiles next while the compiler fails (`failed`, by batch) above its
    largest fit `best` and below its least failure for bytes `worst`: halfway to the least
    such compiler failure (None: none, the search aims by bytes as before). Bytes aim nowhere
    there (their line crosses above the failure), and one unit under each failure in turn is
    a compile each: GRPO of gemma3-1b on a tpu7x-8 failed inside libtpu 0.0.42.1 at 208 and
    at 200 (3-5 minutes each), where batch 8 compiled."""
    above = [b for b in failed if best < b and (worst is None or b < worst)]
    return max(best + unit, (best + min(above)) // 2 // unit * unit) if above else None


def compiles_alone(point: dict) -> bool:
    """Whether a request's verdict is one executable (a LoRA or full fine-tune step, read off
    a verdict `point` of it, or a probe's `workload_executables`: shared.plan.compiler.assigned) and
    the cores can compile two at once: an exact compile then leaves a core idle, and the
    search compiles a partner one unit away beside each exact candidate
    (partner). The answer takes a fitting batch and a failing one a unit apart;
    where the candidate is the answer, both come in about one compile's wall time (gemma3-27b
    LoRA on a v5p-8: 159 s for batch 4, which fits, then 53 s for 8, which does not; a
    gemma3-4b LoRA verdict took 1.14x its wall alone with its partner beside it:
    benchmarks/results/plan_pairing.json)."""
    executables = executables_of(point)
    return 0 < executables and 2 * executables <= workers_for(point["target"])


def above_worst_first(first_probe: dict, unit_slope: float | None, unit: int, usable: int) -> bool:
    """Whether a search located by fast compiles (a rollout on one device, whose candidate's
    two executables keep both cores busy: `first_probe` says how many it has) compiles the unit
    above its candidate beside it, its worst executable first: where one unit's bytes on the
    located line (`unit_slope`) exceed the fast line's error, the candidate is most likely the
    boundary or a unit from it. Where it fits, that refusal ends the search in its round
    (qwen3-8b on a v6e-1: 39 fit, 40 was refused beside it, 0.80x the search's wall); where it
    does not, it is the answer's check two units up. Under that error the candidate is often
    several units off, and a compile beside every round that crept toward the boundary cost
    1.31x (gemma3-tiny on a v5e-1); gemma3-1b's 40 MB a row on a v5e-1 is under it, and took as
    long either way (benchmarks/results/plan_above_first.json)."""
    return (
        ABOVE_WORST_FIRST
        and executables_of(first_probe) > 1
        and unit_slope is not None
        and unit_slope * unit >= FAST_LINE_ERROR * usable
    )


def executables_of(point: dict) -> int:
    """How many executables the verdict of a request compiles, read off a verdict `point` of
    it (those it compiled and those it skipped) or a probe's `workload_executables`."""
    executables = point.get("workload_executables")  # a probe's
    if executables is None:  # a verdict's
        executables = len(point.get("executables", {})) + len(point.get("skipped", []))
    return executables


def partner(candidate: int, exact: dict[int, dict], unit: int, ceiling: int) -> int | None:
    """The batch to compile beside an exact `candidate` (shared.plan.search.max_batch compiles the
    two at once where a step is one executable): one unit above it, which answers where the
    candidate is the last fit, or one unit below where above is compiled already; only inside
    the bracket the exact points leave open (a bracket of 7169 to 8064 aimed at 8063 compiles
    8062 beside it, and that pair ends the search)."""
    best, worst = bracket(exact)
    worst = ceiling + unit if worst is None else worst
    return next(
        (b for b in (candidate + unit, candidate - unit) if best < b < worst and b <= ceiling),
        None,
    )


def steepest_slope(request: Request, low: dict, unit: int) -> float:
    """The slope of the line from what a device holds whatever the batch (floor_line)
    through the point `low` (located at one unit, or an exact fit above it): if what a compile
    adds beyond the floor grew in proportion to the batch, or was fixed, no line could be
    steeper, and the boundary would be where it crosses the HBM or beyond. The compiler
    promises no such thing (gemma3-27b LoRA on a v5p-8: 54 GB at batch 4, 132 at 8, twice
    this line's slope), so it only aims: the second located point goes no farther than that
    crossing (GRPO gemma3-4b on a v5e-8 located at 64 and compiled 48 exactly, both far over
    the HBM and the slowest compiles of the search, before 8 fit), and where it is one unit
    above `low` or less, the exact compiles start at `low`. Where nothing is located, it is
    also the slope a squeeze is seen against (SQUEEZE_SLOPE)."""
    return (low["bytes_per_device"] - floor_line(request, unit)[0]) / low["batch"]


def floor_line(request: Request, unit: int) -> tuple[float, float]:
    """The floor's line (shared.plan.mesh.floor: weights, optimizer state, the largest arguments,
    by arithmetic) through one and two units: what a device holds whatever the batch (the
    line carried back to batch 0) and what each batch adds (a rollout's KV cache row). What a
    compile adds beyond the floor grows with the batch or is fixed, so a line from batch 0
    through a located point is at least as steep as the true one (steepest_slope), and one
    from a located point at the floor's slope at most as steep (locate.py's floor aim)."""
    one, two = (
        floor_verdict(dataclasses.replace(request, batch=b))["floor_bytes"]
        for b in (unit, 2 * unit)
    )
    return 2 * one - two, (two - one) / unit


def next_guess(
    exact: dict[int, dict],
    newest: dict,
    located: list[dict],
    located_slope: float | None,
    reference: float | None,
    usable: int,
    unit: int,
    ceiling: int,
    kept: int,
) -> int:
    """The batch a search's next exact compile aims at, inside the bracket its `exact` points
    leave (a multiple of `unit` up to `ceiling`): `newest` is the point compiled last,
    `located` the located ones, `located_slope` their slope (None: one point located),
    `reference` the slope a squeeze is seen against (SQUEEZE_SLOPE) and `kept` how many rounds
    in a row kept the bracket's failing end (illinois)."""
    best, worst = bracket(exact)
    fits = sorted(b for b, p in exact.items() if p["fits"])
    exact_slope = fits_slope(exact, fits, unit, one_unit_will_do=not located_slope)
    squeezed = exact_slope is not None and reference and exact_slope < SQUEEZE_SLOPE * reference
    if squeezed and worst is not None:  # the compiler's squeeze: halve the bracket
        guess = halfway(best, worst, unit)
    elif squeezed:
        guess = int(best * GALLOP) // unit * unit
    elif best and worst is not None:  # exact points on both sides: regula falsi
        guess = crossing(
            exact[best],
            slope(exact[best], illinois(exact[worst], usable, kept)),
            usable,
            unit,
            ceiling,
        )
    elif exact_slope is not None:
        # fitting exact points only: their own slope, not the located one (a located slope
        # steeper than the exact one undershoots every time: 6 exact steps of 4 to 16 rows
        # for gemma3-1b rollouts on a v5p-8)
        guess = crossing(newest, exact_slope, usable, unit, ceiling)
    elif located_slope is None:  # one point located (it did not fit, or left little room)
        guess = 2 * best
    elif not best and (line := failures_line(exact, unit)):
        # two compiled failures: their own line, a measurement where a located point is
        # an estimate (qwen3-8b rollouts on a v6e-1: failures at 53 and 88 point at 39;
        # aimed from the cut line's fit at 37, exact compiles crept 47, 44, 42, 41 and
        # stopped with a gap)
        guess = crossing(*line, usable, unit, worst)
    elif not best and (below := [p for p in located if p["fits"] and p["batch"] < worst]):
        # only failing exact points: the line from the largest located fit below the
        # nearest failure to it (the fast slope can be flat or negative at small batches:
        # gemma3-1b rollouts on a tpu7x-8 went to the ceiling and then crept down from it
        # one unit at a time). A located fit at the failing batch itself is no low end.
        located_fit = max(below, key=lambda p: p["batch"])
        low_end = located_fit["batch"]
        guess = crossing(located_fit, slope(located_fit, exact[worst]), usable, unit, worst)
        # One unit under the failure is where a good line points (gemma3-1b rollouts on a
        # v5e-1: 375 failed, the line said 374, which fits); only a second step down in a
        # row is creeping, and halves the bracket instead.
        crept = guess >= worst - unit and worst + unit in exact
        if crept or guess in exact:
            guess = max(unit, (low_end + worst) // 2 // unit * unit)
    else:  # one side only: the located slope through the newest exact point
        guess = crossing(newest, located_slope, usable, unit, ceiling)
    top = ceiling if worst is None else min(worst - unit, ceiling)
    guess = min(max(guess, best + unit), top)
    if guess in exact:  # the line keeps landing on a known point: halve the bracket
        guess = min(max(halfway(best, worst, unit), best + unit), top)
    return guess
