"""Notebook 07's answer beside the committed one, and the live run beside the plan.

The Takeaway quotes benchmarks/results/07_grpo_plan.json (benchmarks/bench_grpo.py): one verdict,
the two log-prob searches and a session's steps, for one recipe. A run of another recipe (a
tiny model, other sizes) has nothing there to compare with, so `committed_plan` hands the file
over only when it answered this very recipe, and each check below is one `report.agree` line.
Plain data in and out: the notebook compiles and hands its verdicts and searches here.
"""

from __future__ import annotations

from shared import report
from shared.plan.workloads.request import same_request

QUOTED = "07_grpo_plan"  # benchmarks/results/07_grpo_plan.json, the file the Takeaway quotes


def committed_plan(request) -> dict | None:
    """The committed plan when it was made for `request` (a shared.plan.Request: every field
    equal), else None: its numbers are the answer to that recipe only."""
    quoted = report.committed(QUOTED)
    if quoted and same_request(quoted["recipe"], request):
        return quoted
    return None


def check_verdict(point: dict, quoted: dict | None) -> None:
    """This run's bytes per device for the recipe against the committed verdict's."""
    if quoted:
        report.agree(
            "bytes per device", point["bytes_per_device"], quoted["verdict"]["bytes_per_device"]
        )


def check_logps_searches(searches: dict, quoted: dict | None) -> None:
    """The largest log-prob micro-batch with tunix's function and with the chunked one,
    against the committed searches (the Takeaway's 72 and 1,744 sequences)."""
    if not quoted:
        return
    for implementation in ("tunix", "chunked"):
        label = f"log-probs, {implementation}"
        report.agree(
            f"largest micro-batch, {label}",
            searches[label]["max_batch"],
            quoted["logps_search"][implementation]["max_batch"],
        )


def check_session(row: dict, quoted: dict | None) -> None:
    """The steps a session holds at the roofline against the committed session's."""
    if quoted:
        report.agree(
            "steps in a session at the roofline",
            row["steps_at_most"],
            quoted["session"]["steps_at_most"],
        )


def check_wider_sessions(rows: list[dict], quoted: dict | None) -> None:
    """The steps a session holds at the roofline on each mesh with more tp (rows of the
    recipe there, by `mesh`) against the committed ones (bench_grpo.py's `meshes` part)."""
    committed = (quoted or {}).get("wider_meshes", {})
    for row in rows:
        session = committed.get(row["mesh"], {}).get("session")
        if session and row["config"].startswith("recipe on"):
            report.agree(
                f"steps in a session at the roofline on {row['mesh']}",
                row["steps_at_most"],
                session["steps_at_most"],
            )


def base_copies_verdict(name: str, held: int, beta: float) -> str:
    """Whether a live run holds the base weights as often as the plan counts them: twice (the
    policy's and, from the first update on, the reference's) unless BETA is 0 (no reference)."""
    counted = 2 if beta else 1
    verdict = f"{name}: the base weights are held {held}x after the first update: "
    if held == counted:
        return verdict + "as the plan counts them"
    return verdict + (
        f"NOT the {counted}x the plan counts: tunix changed, and "
        "shared.plan.workloads.grpo's resident set must too"
    )
