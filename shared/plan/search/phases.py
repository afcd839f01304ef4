"""Which phase a batch search compiles alone at an exact candidate below its answer (GRPO):
docs/search.md, "GRPO: a phase alone".

A GRPO verdict compiles five executables, its update the slowest (gemma3-1b on a v5e-1: the
update alone 267 s of 502 compiling all five: benchmarks/results/plan_grpo_order.json), and in
every stored GRPO verdict the worst. `request.phases` compiles some phases alone while counting
the whole run's resident buffers, so that verdict's bytes are a floor of the whole one's: where
the phase does not fit, the whole step does not; where it fits, the step's other phases may
not. A search aims its exact compiles with such verdicts and compiles the whole step only
where it would stop on a fit (shared.plan.search.max_batch); an answer is always a whole verdict.
That whole step takes the phase's compile at the same batch from the plan cache, the same program
(verdict.executable_path), and compiles only the other phases."""

from __future__ import annotations

import dataclasses

from shared.plan.workloads.grpo import PHASES as GRPO_PHASES
from shared.plan.workloads.request import Request

# workload -> ({phase: its executables' labels}, the phase likely worst: GRPO's update, the
# executable it marks likely_worst)
PHASED = {"grpo": (GRPO_PHASES, "update")}


def phase_alone(request: Request, worst: str | None) -> str | None:
    """The phase to compile alone for `request`: the one holding executable `worst` (the
    worst of the search's latest whole verdict), else the workload's likely worst; None where
    the workload has no phases or the request already picks some (then it compiles whole)."""
    if request.workload not in PHASED or request.phases is not None:
        return None
    phases, likely = PHASED[request.workload]
    return next((phase for phase, labels in phases.items() if worst in labels), likely)


def in_phases(request: Request, phases: str | None) -> Request:
    """`request` compiling only `phases` (None: as it is)."""
    return dataclasses.replace(request, phases=phases) if phases else request


def one_phase(point: dict, request: Request) -> bool:
    """Whether a verdict `point` of a search for `request` compiled one phase alone."""
    return point.get("phases", request.phases) != request.phases


def latest_worst(probes: list[dict], request: Request) -> str | None:
    """The worst executable of a search's latest verdict that compiled every phase (None:
    none yet)."""
    whole = [p for p in probes if p.get("compiled", True) and not one_phase(p, request)]
    return whole[-1].get("worst") if whole else None
