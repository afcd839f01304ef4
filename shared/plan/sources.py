"""The source a verdict runs, for the plan cache's key (shared.plan.verdict.Request.key): all
of shared/ but the modules above the verdict, which choose what to compile and say what it
means, so that a change to them keeps every cached verdict."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

# The modules above the verdict: they choose which requests to compile (the searches, the
# atlas, the cheapest slice) and say what verdicts mean (the views, the command line), and no
# verdict runs them (tests/test_plan.py computes verdicts and finds none of them imported). A
# change to them keeps the cached verdicts: the key hashed all of shared/ until 2026-11-27, so
# each change to the search compiled again every verdict an atlas run had cached.
ABOVE_THE_VERDICT = (
    "plan/__main__.py",
    # its probes only aim a search (their own cache entries keep their bytes across a change)
    "plan/assigned.py",
    "plan/atlas/",
    "plan/budget.py",
    "plan/candidate.py",
    "plan/cheapest.py",
    "plan/cheapest_view.py",
    "plan/cut_depth.py",
    "plan/field.py",
    "plan/frontier.py",
    "plan/gap.py",
    "plan/jobs.py",
    "plan/lookup.py",
    "plan/point_view.py",
    "plan/search.py",
    "plan/search_lines.py",
    "plan/search_meshes.py",
    "plan/search_phases.py",
    "plan/search_result.py",
    "plan/search_view.py",
    "plan/slice_job.py",
    # what a compile's seconds go to, for the benchmarks
    "plan/timing.py",
)


@functools.cache
def verdict_sources_digest() -> str:
    """A digest of shared/'s source but the modules above the verdict (ABOVE_THE_VERDICT), read
    once a process."""
    shared = Path(__file__).resolve().parents[1]
    paths = sorted(shared.rglob("*.py"))
    kept = [p for p in paths if not p.relative_to(shared).as_posix().startswith(ABOVE_THE_VERDICT)]
    return hashlib.sha256(b"".join(p.read_bytes() for p in kept)).hexdigest()
