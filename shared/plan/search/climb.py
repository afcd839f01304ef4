"""The located climb of a batch search, part of step 2, confirm, of docs/search.md
(shared.plan.search.max_batch): where an exact round leaves the bracket open, probes at buffer
assignment (shared.plan.compiler.assigned), aimed as exact compiles would be (lines.next_guess),
find where the next exact compiles go."""

from __future__ import annotations

from collections.abc import Callable

from shared.plan.search.lines import (
    bracket,
    crossing,
    fits_slope,
    halfway,
    next_guess,
    slope,
)

# probes at buffer assignment a search's located climb takes at most (locate_boundary); 0: no
# climb, every round compiles exactly where the lines aim (bench_plan's `climb` part compares)
MAX_LOCATED = 8
# refusals at located fits (misread_refusals) after which a search's climb stops reading its
# probes and aims by the exact fits alone (exact_aim). One or two are probes a unit or two
# under (0.2-3% under the exact bytes: max_batch's at_buffer_assignment), and the unit below is the
# answer; a third says they sit under by more than the refusals can tell, and halving to two
# exact fits costs two rounds where creeping costs one a unit (gemma3-12b: 143 units).
MISREAD_REFUSALS = 3
# how far under the exact bytes a probe at buffer assignment sat in the cases measured
# (max_batch's at_buffer_assignment: 0.2-3%); exact_aim steps once to where the probes, read this
# much over, cross the HBM, before it halves
HAIR_UNDER = 0.03


def locate_boundary(
    exact: dict[int, dict],
    newest: dict,
    located: list[dict],
    locate: Callable[[int], dict],
    located_slope: float | None,
    reference: float | None,
    usable: int,
    unit: int,
    ceiling: int,
) -> tuple[int, int | None]:
    """Where the next exact round compiles, found by probes at buffer assignment (`locate`,
    shared.plan.compiler.assigned) aimed as exact compiles would be (next_guess) inside the bracket
    the `exact` points leave, until a located fit and a located failure sit one unit apart (or
    MAX_LOCATED probes): that fit, or one unit above the largest exact fit where nothing
    located fits above it, and the located failure above it (None: none), which the search
    compiles next where that fit's exact compile fits too. `located` holds the probes so far
    (those inside the bracket start the climb: where an exact compile failed at a located fit,
    the next climb starts below it) and gains every new one. After MISREAD_REFUSALS refusals
    at located fits, it locates nothing and aims by the exact fits alone (exact_aim).

    Why: where the first exact round misses, the lines that aim the next ones miss too (the
    compiler squeezes near the HBM, the bytes bend), and each miss that fits is an exact
    compile of 3-5x a probe's time. GRPO of gemma3-1b on an 8x1 v6e-8 fit 72, 80, 88, 104,
    112 and 120 exactly, 200-245 s each at 31.3-31.9 of 33.6 GB, before 128 failed; probes
    of 104, 120 and 128 took 44-46 s each and put them at 31.27, 31.63 (fits) and 34.66 GB
    (fails), the exact bytes less 0.8%, 0.7% and 0% (one run at nice 10, beside two atlas runs).
    The answer is still the exact compiles' at the boundary: a probe only aims them."""
    misread = misread_refusals(exact, located)
    if len(misread) >= MISREAD_REFUSALS:
        return exact_aim(
            exact, hair_under_step(exact, located, misread, usable, unit), usable, unit, ceiling
        ), None
    low, high = bracket(exact)  # the exact verdicts bound the climb, probes fill it in
    ratios = located_under(exact, located)

    def ratio_at(batch: int) -> float:
        """The ratio of the batch compiled both ways nearest to `batch` (1.0: none)."""
        nearest = min(ratios, key=lambda b: (abs(b - batch), -ratios[b]), default=None)
        return 1.0 if nearest is None else ratios[nearest]

    def judged(point: dict) -> dict:
        """A probe's point with its bytes as the exact compile would have them."""
        if point["batch"] in exact or (ratio := ratio_at(point["batch"])) == 1.0:
            return point
        used = point["bytes_per_device"] * ratio
        return {**point, "bytes_per_device": used, "fits": point["fits"] and used <= usable}

    points = {
        p["batch"]: judged(p)
        for p in located
        if low < p["batch"] and (not high or p["batch"] < high)
    }
    points.update(exact)
    slope = located_slope and located_slope * ratio_at(newest["batch"])
    kept, kept_worst = 0, None
    for _ in range(MAX_LOCATED):
        best, worst = bracket(points)
        if (worst is not None and worst - best <= unit) or best >= ceiling:
            break
        kept = kept + 1 if worst is not None and worst == kept_worst else 0
        kept_worst = worst
        guess = next_guess(
            points,
            newest,
            [judged(p) for p in located],
            slope,
            reference,
            usable,
            unit,
            ceiling,
            kept,
        )
        located.append(probe := locate(guess))
        newest = points[guess] = judged(probe)
    best, worst = bracket(points)
    return max(best, low + unit), worst


def located_under(exact: dict[int, dict], located: list[dict]) -> dict[int, float]:
    """How far the probes' bytes sat under the exact compiles' at the same batch: batch ->
    the ratio of exact to located bytes (1.0 at the least), for each batch compiled both ways
    whose exact compile ran to its end (its `refused` stated and empty: a refusal's bytes are
    where the compiler gave up, not the program's). The climb reads each probe at the ratio of
    the nearest such batch: the ratio drifts with the batch (1.157 at 305 rows, 1.153 at 260
    below), and a far one aims a unit or two off, each an exact round.

    Why: a probe stops at buffer assignment, and the passes after it can add bytes. Rollouts
    of gemma3-12b on a 1x8 v6e-8: probes put 300-305 rows at 32.97-33.46 GB, under the 33.55
    allowed, and the exact compiles at 38.14-38.72 (16% more: prefill's temporaries grew),
    so each located fit's exact compile failed and the next climb, reading the probes as
    before, stopped one unit lower: six exact failures in a row, a unit apart (2026-11-30).
    Read at the exact bytes, the probes aim the climb where the exact compile fits. Still only
    an aim: the answer is the exact compiles'."""
    return {
        p["batch"]: max(1.0, exact[p["batch"]]["bytes_per_device"] / p["bytes_per_device"])
        for p in located
        if p["batch"] in exact
        and exact[p["batch"]].get("refused") == []
        and p.get("bytes_per_device")
        and exact[p["batch"]].get("bytes_per_device")
    }


def misread_refusals(exact: dict[int, dict], located: list[dict]) -> list[int]:
    """The batches a probe located as fitting whose exact compile the compiler refused
    (`refused` names an executable): the probes sat under the exact bytes there, by how much
    the refusal cannot say, since its bytes are where the compiler gave up (located_under)."""
    fits = {p["batch"] for p in located if p["fits"]}
    return sorted(b for b, p in exact.items() if b in fits and not p["fits"] and p.get("refused"))


def hair_under_step(
    exact: dict[int, dict], located: list[dict], misread: list[int], usable: int, unit: int
) -> int | None:
    """Where the probes' line, read HAIR_UNDER over, crosses `usable`: the batch exact_aim
    tries first, while the least exact failure is the least misread refusal (None: it is not,
    the step was taken or a failure sits below it, or the probes give no line).

    Why: probes under by a hair are the common case, and there the answer sits a few units
    under the refusals; halving from the largest exact fit spends the search's rounds far from
    it. gemma3-4b rollouts on a 2x4 tpu7x-8 under the tile flag: 3898, 3896 and 3894 refused
    at located fits, then 1946, 2920, 3674 and 3862 fit, and the search stopped with 3862 to
    3894 open (2026-12-04); with the step, 3784, 3838 and 3866 fit and 3880 was refused, 3866
    to 3880 open when its rounds ran out (libtpu_flag_rollout_gemma3-4b_tpu7x-8.json). One
    step costs one exact round where the probes sit further under (gemma3-12b: 16%), and
    halving goes on from it."""
    best, worst = bracket(exact)
    if not misread or worst != misread[0]:
        return None
    refused = next(p for p in located if p["batch"] == worst and p["fits"])
    lowest = min(located, key=lambda p: p["batch"])
    if lowest["batch"] >= worst or (line := slope(lowest, refused)) <= 0:
        return None
    step = crossing(refused, line, int(usable / (1 + HAIR_UNDER)), unit, worst)
    return step if best < step < worst else None


def exact_aim(
    exact: dict[int, dict], step: int | None, usable: int, unit: int, ceiling: int
) -> int:
    """Where the next exact compile goes, aimed by exact fits alone: the `step` a hair under
    the refusals (hair_under_step) where there is one, else where the line through the largest
    two fits (at least two units apart) crosses `usable`, or, without two, or where that line
    crosses at the least failure or above it, halfway from the largest fit to it.

    Why: gemma3-12b rollouts on a 1x8 tpu7x-8 under the tile flag (libtpu 0.0.42.1): probes put
    993 rows under the HBM, and the exact compiles refused 993, 992, ... 987 in a row, each
    "Used 94.79G of 94.75G hbm" or so, a hair over: every climb read the probes as before and
    stopped one unit lower, the search ran out of rounds, and answered 1. The exact compiles
    that ran to their end at 848 and 864 (101.47 and 103.32 GB) sat 16% over the probes, on a
    line with the exact compile at 1 (3.32 GB): 0.1159 GB a row from 1 to 848, 0.1158 from
    848 to 864. So the exact fits' own line aims, and halving reaches two of them first."""
    if step is not None:
        return step
    best, worst = bracket(exact)
    top = ceiling if worst is None else min(worst - unit, ceiling)
    fits = sorted(b for b, p in exact.items() if p["fits"])
    line = fits_slope(exact, fits, unit, one_unit_will_do=False)
    guess = crossing(exact[best], line, usable, unit, ceiling) if line and line > 0 else None
    if guess is None or guess > top:
        guess = halfway(best, worst, unit)
    return min(max(guess, best + unit), top)
