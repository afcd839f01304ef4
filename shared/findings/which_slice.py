"""Notebook 08's answers beside the committed ones its Takeaway quotes.

benchmarks/results/08_which_slice.json holds each plan-mode job's whole search
(benchmarks/bench_cheapest.py). A search answers by its compile budget as well as by the
compiler: in 12 minutes the GRPO job stopped before the slice that answers it in 27 (the
Takeaway's v5p-8), so a run whose answer differs says so, one `report.agree` line a job. Only
where the run asked the same question (the job, the slices, the price, the deadline): locally,
or with other SLICES, PRICE or WITHIN_HOURS, there is nothing committed to compare with.
"""

from __future__ import annotations

from shared import report
from shared.hardware import prices
from shared.hardware.sharding import mesh_name

QUOTED = "08_which_slice"  # the file the Takeaway quotes
DIFFERS = (
    "this search answered another slice than the Takeaway's: a shorter MINUTES leaves slices "
    "uncompiled (the table says which), and other versions or prices answer differently; "
    "re-run the command the Evidence quotes"
)


def check_answer(title: str, result: dict, quoted: dict | None) -> None:
    """Job `title`'s cheapest slice (shared.plan.slices.cheapest's `result`) against the committed
    search of the same question in `quoted` (the file, or None)."""
    committed = ((quoted or {}).get("jobs") or {}).get(title, {}).get("result")
    if committed and _question(result) == _question(committed):
        report.agree(f"{title}: the cheapest", _answer(result), _answer(committed), why=DIFFERS)


def _question(result: dict) -> tuple:
    """What a search was asked: the job, the slices it could rent, the price and deadline."""
    return (
        result["request"],
        result["job"],
        result["price_kind"],
        result["within_hours"],
        sorted(row["target"] for row in result["rows"]),
    )


def _answer(result: dict) -> str:
    choice = result["choice"]
    if not choice:
        return "no slice fits"
    return (
        f"{choice['target']} on {mesh_name(choice['mesh_shape'])} at batch {choice['batch']}, "
        f"${choice['dollars']:,.2f} {result['price_kind']}"
    )


# Kaggle's two free accelerators and the weekly hours each lends (shared.hardware.prices)
KAGGLE_FREE = {"v5e-8": "kaggle-tpu", "t4-2": "kaggle-gpu"}


def kaggle_free(result: dict) -> list[dict]:
    """Kaggle's free v5e-8 and T4 pair for one job (a `cheapest` search over those two
    slices): each one's verdict, its hours at the assumed efficiency, and the weeks of
    Kaggle's quota the job takes there. Both are free, so weeks, not dollars, decide."""
    rows = []
    for row in result["rows"]:
        offer = KAGGLE_FREE.get(row["target"])
        if offer is None:
            continue
        quota = prices.lookup(offer, "quota").value
        fits = row["status"] == "fits"
        rows.append(
            {
                "target": row["target"],
                "offer": offer,
                "status": row["status"],
                "batch": row.get("batch") if fits else None,
                "hours": row["hours"] if fits else None,
                "quota_hours_per_week": quota,
                "weeks": row["hours"] / quota if fits else None,
                "why": row.get("why", ""),
            }
        )
    return rows
