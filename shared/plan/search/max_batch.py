"""The largest batch that fits, in a handful of compiles, and always the compiler's verdict.
docs/search.md walks through it on one page, drawn from a committed search; in short:

1. locate (locate.py): bytes per device grow close to linearly with the batch, so a line
   through located points (probes stopped at buffer assignment, shared.plan.compiler.assigned;
   fast compiles for a rollout on one device) crosses the usable HBM at the candidate;
2. confirm (lines.py, climb.py): exact compiles, each aimed by lines.next_guess (or, where the
   first exact round leaves the bracket open, probes aimed the same way: climb.locate_boundary),
   until a fitting batch and a failing one sit one unit apart;
3. check (lines.checks_above): bytes are not monotone in the batch, so two units above the
   answer, and the next batch of lines.ALIGNED_ROWS rows a device where that is further, must fail
   too; where one fits (a dip), the search goes on above it.
The answer is the exact compile's verdict at that boundary, never a line's. The unit is
`multiple_of` (default: each mesh's least batch, shared.plan.mesh.steps.unit_for). No limit
caps the answer: the search goes up until a batch fails, or reaches CEILING and says "at
least". GRPO compiles its worst phase alone below the answer (phases.py); without --mesh,
other meshes are asked whether they fit more (meshes.py).
"""

from __future__ import annotations

import dataclasses
import time

from shared.hardware import parse_target
from shared.plan.compiler.assigned import (
    assigned_points,
    locates_at_assignment,
    stop_finishing,
    verdicts_taking_finished,
)
from shared.plan.compiler.target import target_devices
from shared.plan.mesh.choice import search_shape
from shared.plan.mesh.steps import first_batch, pinned_to, unit_for
from shared.plan.search import climb, lines
from shared.plan.search.lines import (
    bracket,
    checks_above,
    compiles_alone,
    next_guess,
    partner,
    set_aside_compiler_failures,
    under_compiler_failure,
)
from shared.plan.search.locate import locate_line
from shared.plan.search.meshes import beat_on_other_meshes, meshes_by_ceiling, meshes_result
from shared.plan.search.phases import in_phases, latest_worst, one_phase, phase_alone
from shared.plan.search.result import search_result, worst_at_answer
from shared.plan.verdict import floor_verdict, plan_points
from shared.plan.workloads.request import Request

CEILING = 1 << 16  # the largest batch a search tries; reaching it is reported as "at least"
# exact rounds that compile (besides checks above) before a search gives up on a non-linear
# line; a batch answered by arithmetic costs nothing and counts none
MAX_EXACT = 8


def max_batch(
    request: Request,
    *,
    multiple_of: int | None = None,
    ceiling: int | None = None,
    use_cache: bool = True,
    progress: bool = True,
    other_meshes: bool = True,
) -> dict:
    """The largest batch (a multiple of the unit, at most `ceiling`, by default CEILING) the
    compiler says fits, with every probe. Without --mesh the search compares the mesh rule's
    mesh with the wider tp meshes the weights divide (mesh.wider_shapes):
    1. it searches first the mesh whose floor leaves the most room for the batch, by arithmetic
       (mesh.batch_ceiling, an upper bound on what can fit there), fewer tp on a tie;
    2. every other mesh, in that order, is asked one exact question: does it fit more than the
       answer so far (as many, where it has fewer tp: it wins a tie)? Each question compiles
       beside the next mesh's (meshes.beat_on_other_meshes). Where it does, the search
       goes on above it there. A mesh whose ceiling is below that batch is answered by
       arithmetic, without compiling (its verdict's floor is over the HBM). Until
       2026-11-28 not every mesh was asked: shared.plan.atlas.store.skipped_a_mesh.
    The answer is the mesh that fits the most, fewer tp on a tie (`mesh_shape`); `mesh_answers`
    gives every mesh asked and its largest batch ("<N" where it was only found not to fit N),
    `units` each one's step (unit_for), `mesh_ceilings` every mesh's ceiling, and the probes and
    compiles are all of theirs. Where no mesh fits a unit, the answer is the rule's mesh's, where
    it was asked. Without `other_meshes` (bench_atlas.py --one-mesh) step 2 is left out."""
    start = time.perf_counter()
    devices = target_devices(parse_target(request.target))
    shape = search_shape(request, devices)
    ceilings = meshes_by_ceiling(request, devices)
    search = searcher(request, multiple_of, ceiling, use_cache, progress)
    first, *others = ceilings
    answers = {first: search(first)}
    cap = CEILING if ceiling is None else ceiling
    best = beat_on_other_meshes(
        answers, first, others if other_meshes else [], worst_at_answer(answers[first]), search, cap
    )
    none_fit = not answers[best]["max_batch"] and shape in answers
    result = meshes_result(answers, shape if none_fit else best, ceilings)
    # the whole search's: the meshes' own walls leave out the questions asked side by side
    return {**result, "wall_s": time.perf_counter() - start}


def searcher(
    request: Request,
    multiple_of: int | None = None,
    ceiling: int | None = None,
    use_cache: bool = True,
    progress: bool = True,
) -> MeshSearch:
    """max_batch's search on one mesh, as a callable of the (fsdp, tp) mesh (MeshSearch)."""
    return MeshSearch(request, multiple_of, ceiling, use_cache, progress)


@dataclasses.dataclass(frozen=True)
class MeshSearch:
    """max_batch's search of `request` on one mesh at a time: called with the mesh, the batch
    its one exact question starts at (`exact_from`, see _max_batch_on), the executable that
    question compiles alone first (`first_worst`) and that question's verdict where it was
    compiled already (`asked`, see `ask`)."""

    request: Request
    multiple_of: int | None = None
    ceiling: int | None = None
    use_cache: bool = True
    progress: bool = True

    def __call__(
        self,
        mesh: tuple[int, int],
        exact_from: int | None = None,
        first_worst: str | None = None,
        asked: dict | None = None,
    ) -> dict:
        try:
            return _max_batch_on(
                self.request,
                mesh,
                self.multiple_of,
                self.ceiling,
                self.use_cache,
                self.progress,
                exact_from=exact_from,
                first_worst=first_worst,
                asked=asked,
            )
        finally:
            stop_finishing()  # a probe's compile the search did not take

    def ask(self, questions: list[tuple[tuple[int, int], int]], first_worst: str | None) -> list:
        """The one exact question of each (mesh, exact_from) in `questions`, compiled at once,
        as calling this search with them would compile each alone: a LoRA or full fine-tune
        step is one executable, and the meshes after the first were asked one after the other
        with a core idle (gemma3-27b LoRA on a v5p-8: 8 on 4x1 in 53 s, then 7 on 1x4 in 52 s:
        benchmarks/results/plan_speed_goals.json)."""
        requests = []
        for mesh, exact_from in questions:
            pinned, unit, top, floor_fits = _on_mesh(
                self.request, mesh, self.multiple_of, self.ceiling
            )
            first = first_batch(unit, top, exact_from, floor_fits)
            requests.append(dataclasses.replace(pinned, batch=first, fast=False))
        return plan_points(requests, use_cache=self.use_cache, first=first_worst)


def _on_mesh(
    request: Request, shape: tuple[int, int], multiple_of: int | None, ceiling: int | None
) -> tuple[Request, int, int, bool]:
    """`request` pinned to the (fsdp, tp) mesh `shape`, its step there (unit_for), the largest
    batch a search there tries (`ceiling`, by default CEILING, rounded down to the step, one
    step at least) and whether one step's arguments fit (arithmetic): what a search on that
    mesh and the one question it may be asked first (MeshSearch.ask) both start from."""
    request = pinned_to(request, shape)
    unit = unit_for(request, multiple_of)
    top = max(unit, (CEILING if ceiling is None else ceiling) // unit * unit)
    return request, unit, top, floor_verdict(dataclasses.replace(request, batch=unit))["fits"]


def _max_batch_on(
    request: Request,
    shape: tuple[int, int],
    multiple_of: int | None,
    ceiling: int | None,
    use_cache: bool,
    progress: bool,
    exact_from: int | None = None,
    first_worst: str | None = None,
    asked: dict | None = None,
) -> dict:
    """max_batch's search with every probe on the (fsdp, tp) mesh `shape`. With `exact_from`
    it first compiles exactly the least batch of at least `exact_from` (one unit at least),
    before locating anything: the one question max_batch asks a mesh after another one's
    answer (0: another mesh fit not even one unit, and a wider one rarely turns that around:
    sft and LoRA of llama3.1-8b, qwen3-8b and gemma3-12b on a v5e-8 fit nothing on any of 4
    meshes). Where it does not fit, that one compile is the mesh's whole answer, where
    locating first cost two cut compiles more; where it fits, the search goes on as usual,
    above it. `first_worst`: the executable that one compile compiles alone first (a check
    above a stored answer, most likely a failure: verdict.plan_points' `first`). `asked`: that
    question's verdict, compiled beside another mesh's (MeshSearch.ask); one at another batch
    (asked before another mesh raised the answer to beat) is a compile of this search's, not
    its question."""
    from tqdm.auto import tqdm

    start = time.perf_counter()
    request, unit, ceiling, unit_floor_fits = _on_mesh(request, shape, multiple_of, ceiling)
    bar = tqdm(
        desc=f"max batch {request.workload} {request.model} on {request.target}",
        unit="compile",
        disable=not progress,
    )
    probes: list[dict] = []  # the whole model's verdicts, fast and exact
    assigned_probes: list[dict] = []  # the whole model's bytes at buffer assignment

    def probe(batches: list[int], fast: bool, first=None, phases=None, waits=None) -> list[dict]:
        """The whole model's verdicts at `batches`, compiled at once (two exact ones beside
        each other: see compiles_alone); `first`: the executable each compiles alone first,
        where a failure is expected (a dict: by batch, those batches' only), and `waits`
        (verdict.plan_points'); `phases`: only those (GRPO's: phases.py)."""
        bar.set_postfix(batch=",".join(map(str, batches)), fast=fast)
        requests = [
            in_phases(dataclasses.replace(request, batch=b, fast=fast), phases) for b in batches
        ]
        if isinstance(first, dict):  # by batch: those batches' only
            first = {r: first[r.batch] for r in requests if r.batch in first}
        points = plan_points(requests, use_cache=use_cache, first=first, waits=waits)
        probes.extend(points)
        bar.update(len(points))
        return points

    def at_buffer_assignment(*batches: int) -> list[dict]:
        """The whole model's bytes at buffer assignment (shared.plan.compiler.assigned): where the
        search looks, never an answer. gemma3-1b's full fine-tune step on a v5e-8 (batch 8):
        0.30x the exact verdict's seconds, 2.8% under its bytes, where a fast compile took
        0.38x and came 8.8% under; llama3.1-8b's LoRA step on a 2x4 v5e-8 (batch 4): 0.25x,
        2.4% under, where the cut depths' line took 0.50x (0.2% under) and a fast compile
        0.32x (14% under) (benchmarks/results/plan_locate.json). llama3.1-8b rollouts on a
        4x2 v5e-8 (128 rows): 0.34x, 0.3% under, a fast compile 0.30x and 13% over
        (plan_locate_rollout.json). One quiet run each. Several at once compile side by side.
        The latest probes' compiles go on in the background (assigned_points' `finish`): the
        exact compiles most often start at a located point (the low end where the boundary is
        near or it does not fit, else where the line aims), and the exact verdict there takes
        it (the exact round below). An earlier probe's is killed when the next starts: the two
        compiles side by side slowed the second probe of gemma3-27b LoRA on a v5p-8 from 61 to
        90 s (benchmarks/results/plan_speed_goals_finish.json, plan_speed_goals_low.json)."""
        stop_finishing()
        bar.set_postfix(batch=",".join(map(str, batches)), at="buffer assignment")
        points = assigned_points(
            [dataclasses.replace(request, batch=b) for b in batches],
            use_cache=use_cache,
            finish=True,
        )
        assigned_probes.extend(points)
        bar.update(len(points))
        return points

    first = None if exact_from is None else first_batch(unit, ceiling, exact_from, unit_floor_fits)
    if asked is not None:
        probes.append(asked)
        bar.update(1)
        if asked["batch"] != first:
            asked = None
    exact: dict[int, dict] = {}
    failed: dict[int, dict] = {}  # where the compiler failed: the search goes on below them
    if first:
        exact[first] = asked or probe([first], False, first_worst)[0]
        ceiling = set_aside_compiler_failures(exact, failed, ceiling, unit)
    if first and (first in failed or not exact[first]["fits"]):
        bar.close()
        return search_result(
            request, shape, unit, ceiling, exact, probes, assigned_probes, start, failed
        )

    def fast_compiled(*batches: int) -> list[dict]:
        return probe(list(batches), True)

    at_assignment = locates_at_assignment(request, shape)
    locate_all = at_buffer_assignment if at_assignment else fast_compiled

    line = locate_line(
        request, unit, ceiling, exact.get(first), locate_all, at_assignment=at_assignment
    )
    low, usable, located, located_slope = line.low, line.usable, line.located, line.slope
    steepest, candidate, low_is_exact = line.steepest, line.candidate, bool(exact)

    def locate(batch: int) -> dict:
        return locate_all(batch)[0]

    # a located unit that does not fit makes the unit a confirmation: nothing above to pair
    paired = low["fits"] and compiles_alone((assigned_probes or probes)[0])
    above_first = (
        low["fits"]
        and not at_assignment
        and not paired
        and lines.above_worst_first(probes[0], located_slope or steepest, unit, usable)
    )
    beside_refusals: set[int] = set()  # those units above that failed: no step of the search's
    rounds = 0
    kept, kept_worst = 0, None  # rounds in a row that kept the bracket's failing end (illinois)
    checking = False  # the candidate is a check above the answer: most likely a failure
    then = None  # the failing end of the latest located climb (climb.locate_boundary)
    while True:
        failures = len(failed)
        if candidate not in exact:
            beside = partner(candidate, exact, unit, ceiling) if paired else None
            if above_first and not checking:
                above = partner(candidate, exact, unit, ceiling)
                beside = above if above == candidate + unit else None
            batches = [candidate, beside] if beside else [candidate]
            check = candidate + 2 * unit
            if (
                assigned_probes
                and beside == candidate + unit
                and check <= ceiling
                and check not in exact
            ):
                # the check above the pair, queued on the core the partner frees: a refusal
                # compiles in a third of a fit's time (gemma3-27b LoRA on a v5p-8: 4 fit in
                # 221 s, 8 and 12 were refused in 77 and 75: plan_deep_search_cut.json), so
                # where the candidate is the answer, its check comes within its wall time.
                # Only where bytes at buffer assignment aimed it (2-3% under the exact ones),
                # so the candidate is often the answer; aimed by a fast line, it rarely is,
                # and a check beside every round is a compile more a round
                batches.append(check)
            # a check compiles first the executable that was worst at the answer
            worst = exact[bracket(exact)[0]].get("worst") if checking else None
            latest = latest_worst(probes, request)
            if above_first and beside and latest:
                worst = {beside: latest}  # the candidate compiles whole
            phases = None if checking else phase_alone(request, latest)
            if phases:
                stop_finishing()
                points = probe(batches, False, worst, phases)
            else:  # located points' compiles going on at this round's batches are taken
                points = verdicts_taking_finished(request, batches, probe, False, worst)
            exact.update(zip(batches, points, strict=True))
            if isinstance(worst, dict):
                beside_refusals.update(b for b in worst if not exact[b]["fits"])
            ceiling = set_aside_compiler_failures(exact, failed, ceiling, unit)
            checking = False
        point = exact.get(candidate) or failed[candidate]
        best, worst = bracket(exact)
        # an answer is a whole verdict: where the search would stop on a fit that compiled one
        # phase alone, the others compile now; where one does not fit, the bracket moves below
        while (
            best
            and one_phase(exact[best], request)
            and (
                (worst is not None and worst - best <= unit)
                or best >= ceiling
                or rounds + point.get("compiled", True) >= MAX_EXACT
            )
        ):
            exact[best] = probe([best], False)[0]
            ceiling = set_aside_compiler_failures(exact, failed, ceiling, unit)
            best, worst = bracket(exact)
        if under := under_compiler_failure(best, worst, failed, unit):
            rounds += len(failed) > failures  # the compiler failed in this round
            if best >= ceiling or rounds >= MAX_EXACT:
                break
            candidate = under
            continue
        if worst is not None and worst - best <= unit:
            # the checks above: bytes are not monotone in the batch (one per-device row more
            # can cost more than two: llama3.1-8b rollouts on a pinned 4x2 of a v5e-8 fit 184
            # and 192 but not 188; 196 and 208 but not 200 or 204), so an answer stands only
            # where two units above it fail too, and the next batch of ALIGNED_ROWS rows a
            # device; where one fits, the search goes on above it
            checks = checks_above(best, unit, shape[0]) if best else []
            if missing := [b for b in checks if b <= ceiling and b not in exact]:
                candidate, checking = missing[0], True
                continue
            break
        rounds += point.get("compiled", True)
        kept = kept + 1 if worst is not None and worst == kept_worst else 0
        kept_worst = worst
        if best >= ceiling or rounds >= MAX_EXACT:
            break
        # with nothing located (an exact low end left a unit's room or less), the steepest
        # line's slope is what a squeeze is seen against: sft gemma3-1b on a 4x2 v6e-8 fit 84,
        # 88 and 92 exactly, bytes flat, and their own line aimed at 120 and 124, far over. Not
        # through a located unit: the fixed temporaries the floor cannot see make that line far
        # steeper than the batch's bytes (4 GiB fixed and 1 a row looked like 5 a row: test_plan)
        reference = located_slope or (steepest if low_is_exact else None)
        if then is not None and best < then <= ceiling and (worst is None or then < worst):
            candidate, then = then, None  # the located failure above the located answer
            continue
        if at_assignment and climb.MAX_LOCATED:  # a failure at a located fit climbs again
            candidate, then = climb.locate_boundary(
                exact, point, located, locate, located_slope, reference, usable, unit, ceiling
            )
            continue
        # a refusal compiled beside the candidate is no step down the search took (next_guess
        # halves the bracket after two in a row: it took 375 and 376 for one and aimed at 191)
        stepped = {b: p for b, p in exact.items() if b not in beside_refusals}
        candidate = next_guess(
            stepped, point, located, located_slope, reference, usable, unit, ceiling, kept
        )
    if not any(p["fits"] for p in exact.values()) and unit not in {*exact, *failed}:
        exact[unit] = probe([unit], False)[0]  # "not even one unit fits" must be an exact verdict
        ceiling = set_aside_compiler_failures(exact, failed, ceiling, unit)
    bar.close()
    return search_result(
        request, shape, unit, ceiling, exact, probes, assigned_probes, start, failed
    )
