"""Where a batch search's first exact compile goes: step 1, locate, of docs/search.md (the
search itself is shared.plan.search.max_batch).

Bytes per device grow close to linearly with the batch (KV cache, activations), so the whole
model's bytes at 1 and 8 units give the line's slope, and where it crosses the usable HBM is
the candidate; when that is far off, a third point there gives the slope near the boundary.
When 1 unit does not fit, 8 is not tried. Small first: most fine-tunes fit a few units, and a
probe far over the HBM is the slowest compile of a search (the compiler works hardest to fit
what cannot). Above an exact low end that fits (another mesh's answer), its batch and 8 units
above it are located together, and their slope aims from it. A located point is never an
answer: the exact rounds that follow (max_batch._max_batch_on, steps 2 and 3) state it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from shared.plan.compiler.assigned import ROLLOUTS, room_for_two
from shared.plan.search.lines import (
    compiles_alone,
    crossing,
    floor_line,
    slope,
    steepest_slope,
)
from shared.plan.workloads.request import Request

BESIDE_AIM = True  # a near aim's partner located beside it; False: as before 2026-12-03
# a one-device rollout's second located point aimed along the floor's slope (floor_aimed);
# False: at 8 units, then a third point, as before 2026-12-04
FLOOR_AIM = True


@dataclasses.dataclass(frozen=True)
class Line:
    """What locating found: the line's `low` end (a located unit, or the exact point it started
    from), the `usable` HBM bytes, every `located` point, their `slope` (None: one point, or
    the boundary was near the low end), the `steepest` slope arithmetic allows through the low
    end (None: it does not fit) and the `candidate` the first exact round compiles."""

    low: dict
    usable: int
    located: list[dict]
    slope: float | None
    steepest: float | None
    candidate: int


def locate_line(
    request: Request,
    unit: int,
    ceiling: int,
    exact_low: dict | None,
    locate_all: Callable[..., list[dict]],
    at_assignment: bool,
) -> Line:
    """The line to the boundary of `request` (its batch a multiple of `unit`, at most
    `ceiling`): `exact_low` is an exact point that fits to start from (None: locate one unit
    first), `locate_all(*batches)` locates batches side by side, `at_assignment` whether it
    does so at buffer assignment (shared.plan.compiler.assigned; else by fast compiles)."""

    def locate(batch: int) -> dict:
        return locate_all(batch)[0]

    # The line's low end: one unit, located; or the batch compiled first, where it fits: an
    # exact point, and one unit under it would cost a compile more and aim no better
    # (sft gemma3-1b on a 4x2 v5e-8: 28 fit exactly, then 4 and 16 were located, 2.5 min each)
    low = exact_low or locate(unit)
    usable = low["hbm_bytes"]
    located = [low]

    def floor_aimed() -> dict | None:
        """The point located where the line from the located unit at the floor's slope (a
        rollout's KV cache row: floor_line) crosses the HBM, where FLOOR_AIM applies and it is
        kept (None: not). The true line is at least as steep, so the boundary is at or under
        it: a failure there bounds the line from above, one compile, where 8 units and then a
        third point far up took two. A fit there says the located bytes are wrong (a flat
        fast line: the atlas's gemma3-1b rollout cell on a tpu7x-8): it is not kept, and the
        search locates as before; unless it is the ceiling (the floor's line crosses at or
        past it), which a fit makes the candidate: locating at 8 units after it was a compile
        more (gemma3-tiny at a ceiling of 64: 1, 64 and 8 located, then 64 exactly)."""
        per_batch = floor_line(request, unit)[1]
        if not (FLOOR_AIM and request.workload in ROLLOUTS and not at_assignment and per_batch > 0):
            return None
        far = locate(crossing(low, per_batch, usable, unit, ceiling))
        if far["fits"] and far["batch"] < ceiling:
            return None
        located.append(far)
        return far

    located_slope, candidate = None, unit  # one unit does not fit: confirm that, exactly
    steepest = steepest_slope(request, low, unit) if low["fits"] else None
    if low["fits"] and ceiling // unit == 1:  # nothing above it to try
        candidate = unit
    elif (
        low["fits"]
        and (reach := crossing(low, steepest, usable, unit, ceiling)) <= low["batch"] + unit
        and low["batch"] + unit < ceiling
    ):
        # the steepest line through the low end crosses the HBM within a unit above it: the
        # boundary is near, and the exact compiles start at the low end, locating nothing
        candidate = low["batch"]
    elif low["fits"] and not exact_low and (far := floor_aimed()):
        located_slope = slope(low, far)
        candidate = crossing(far, located_slope, usable, unit, ceiling)
        if 2 * candidate < far["batch"]:
            # the floor's slope was under half the true one (qwen3-8b on a v6e-1: a row holds
            # 0.19 GB of KV cache and takes 0.37; 87 located, the boundary at 39), so the line
            # from the unit spans a bend: a third point at the candidate, and the line through
            # the two nearest the boundary, as for a fit far under it below
            near = locate(candidate)
            located.append(near)
            located_slope = slope(near, far)
            candidate = crossing(near, located_slope, usable, unit, ceiling)
    elif low["fits"]:
        aim = min(low["batch"] + 7 * unit, reach)  # 8 units from a located unit
        if exact_low:
            # Its slope from two located points, both at once, side by side: located bytes sit
            # under exact ones, and a line from an exact point to a located one carries that
            # gap over a few units as its slope. qwen3-8b rollouts on a 1x8 v5e-8 fit 177
            # exactly at 10.98 GiB, and 184 was located at 9.62: the line fell, and the search
            # compiled 389 and 314 exactly, far over the HBM (10 and 11 minutes; llama3.1-8b's
            # on a 1x8 tpu7x-8 2654, 2497 and 2107). It aims from the exact point.
            located_low, high = locate_all(low["batch"], aim)
            located.append(located_low)
        else:
            # near the boundary (reach within 8 units) the exact round pairs `aim` with the unit
            # above: located beside it, on the core aim's probe leaves idle (plan_near_pair.json)
            near = BESIDE_AIM and at_assignment and aim == reach and aim + unit <= ceiling
            two = near and compiles_alone(low) and room_for_two(request, aim)
            located_low, high = low, locate_all(aim, *([aim + unit] if two else []))[0]
        located.append(high)
        located_slope = slope(located_low, high)
        aim_from = low if exact_low or not high["fits"] else high
        candidate = crossing(aim_from, located_slope, usable, unit, ceiling)
        if high["fits"] and 2 * high["batch"] < candidate < ceiling:  # far: a third point there
            near = locate(candidate)
            below = crossing(high, slope(high, near), usable, unit, ceiling)
            if not near.get("compiled", True) and high["batch"] < below < near["batch"]:
                # answered by arithmetic: its bytes are a floor (arguments only), too flat a
                # slope to aim exact compiles with (gemma3-1b rollouts on a v5e-1: a floor at
                # 514 sent them to 426, 368, 374 and 375). Where the line to that floor
                # crosses the HBM is still past the boundary and near it: locate there.
                near = locate(below)
            located.append(near)
            located_slope = slope(high, near)
            candidate = crossing(near, located_slope, usable, unit, ceiling)
    if exact_low:  # the batch compiled first fits: the answer is above it
        candidate = min(max(candidate, exact_low["batch"] + unit), ceiling)
    return Line(low, usable, located, located_slope, steepest, candidate)
