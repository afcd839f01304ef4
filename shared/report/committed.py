"""The numbers a notebook's answer quotes, committed in benchmarks/results/, and the check that
this run's live numbers still agree with them."""

import json
import math

from shared.paths import ROOT

RESULTS = ROOT / "benchmarks" / "results"  # committed numbers the notebooks quote


def committed(name: str) -> dict | list | None:
    """A committed result file, benchmarks/results/NAME.json; None where it is not (a package
    installed without the repository, as on Colab)."""
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


# The fields of a plan request that identify a committed verdict.
VERDICT_KEY = ("workload", "model", "target", "batch", "seq", "microbatches", "remat")


def committed_verdict(name: str, request) -> dict | None:
    """The plan verdict for `request` (a shared.plan.Request) in committed result file NAME's
    "verdicts" table, or None: how a notebook prices a setting in local and device mode without
    compiling it."""
    verdicts = ((committed(name) or {}).get("tables") or {}).get("verdicts", [])
    return next(
        (v for v in verdicts if all(v[k] == getattr(request, k) for k in VERDICT_KEY)), None
    )


STALE = (
    "the answer above no longer holds for this run's versions or settings; "
    "re-run the command it quotes"
)


def agree(what: str, live, quoted, *, rel: float = 0.0, why: str = STALE) -> bool:
    """Print whether a number (or an answer in words) this run produced matches the one "What
    we found" quotes (from a committed result); `rel` is the relative difference still called
    agreement (timings), `why` what a difference means (a timing's depends on the host as much
    as on the code)."""
    if quoted is None:
        print(f"{what}: {live} (no committed number to compare with here)")
        return True
    if isinstance(live, str) or isinstance(quoted, str):
        same = live == quoted
    else:
        same = math.isclose(live, quoted, rel_tol=rel, abs_tol=0 if rel else 1e-12)
    verdict = "agrees with" if same else "DIFFERS from"
    print(f"{what}: {live} {verdict} the committed {quoted}" + ("" if same else f": {why}"))
    return same
