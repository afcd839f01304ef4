"""Notebook 06's plumbing: the compiled layer probe beside the closed forms, the summary of
every number the notebook computes, and its check against the committed answer.

The notebook tells the story (a question, the closed forms, a compile, a figure); these
functions turn its results into tables and compare them with benchmarks/results/
06_scaling_plan.json, the file its Takeaway quotes, so that a reader sees at the end of the run
whether the answer above still holds for their versions.
"""

import math

from shared import report, sizing

COMMITTED = "06_scaling_plan"  # benchmarks/results/06_scaling_plan.json
# The summary rows the Takeaway quotes (a question's text before its colon).
HEADLINE = ("parameters (B)", "params", "book3", "fwide", "X_opt")


def probe_rows(probes: dict, probe_dims: sizing.ModelDims, target: str) -> list[dict]:
    """One row per compiled remat policy: the bytes a layer keeps per token, in D-wide bf16
    elements, and the closed-form policy (sizing.REMAT_POLICIES) nearest to it on a log scale.

    Why: the closed forms disagree by 20x on what a layer keeps; the compiler's number says
    which assumption a real step (tunix's layer, a remat policy) behaves like.
    """
    formula_bytes = {
        remat: 2 * sizing.activation_elements_per_token_layer(probe_dims, remat)
        for remat in sizing.REMAT_POLICIES
    }
    rows = []
    for remat, probe in probes.items():
        kept = probe["kept_bytes_per_token_layer"]
        # A slope at or below zero (two sizes scheduled differently) is nearest to the least.
        closest = min(formula_bytes, key=lambda r: abs(math.log(max(kept, 1) / formula_bytes[r])))
        rows.append(
            {
                "model": probe["model"],
                "target": target,
                "seq": probe["seq"],
                "tokens_per_device": probe["tokens_per_device"],
                "tunix_remat": remat,
                "kept_bytes_per_token_layer": kept,
                "in_D": kept / 2 / probe_dims.D,
                "closest_policy": closest,
                "closest_bytes": formula_bytes[closest],
                "per_layer_fixed_bytes": probe["per_layer_fixed_bytes"],
                "compile_s": probe["compile_s"],
            }
        )
    return rows


def compiled_totals(
    probes: dict, probe_dims: sizing.ModelDims, dims: sizing.ModelDims, states_bytes: float
) -> list[dict]:
    """The compiled per-layer bytes scaled to the whole run in the book's accounting (4e6
    tokens, every layer, plus parameters and optimizer state), beside the closed forms'
    `book_TB`. Empty when the probe's model is not as wide as the planned one (a tiny local
    probe says nothing in TB about 70B)."""
    if probe_dims.D != dims.D:
        return []
    return [
        {
            "policy": f"compiled, remat={remat}",
            "book_TB": (states_bytes + 4e6 * dims.L * p["kept_bytes_per_token_layer"]) / 1e12,
        }
        for remat, p in probes.items()
    ]


def summary(params: dict, cost_rows: list, policy_rows: list, mesh_plan: dict) -> list[dict]:
    """Every number of sections 1, 2 and 4 as (question, answer) rows: what the committed
    file keeps and what `agree_with_committed` compares."""
    rows = [{"question": "parameters (B)", "answer": params["total"] / 1e9}]
    for row in cost_rows:
        for key in ("flops", "days", "dollars_on_demand", "dollars_spot"):
            rows.append({"question": f"{row['convention']}: {key}", "answer": row[key]})
    for row in policy_rows:
        for key in ("book_TB", "book_chips", "ours_chips"):
            rows.append({"question": f"{row['policy']}: {key}", "answer": row[key]})
    rows.append({"question": "X_opt", "answer": mesh_plan["x_opt"]})
    return rows


def agree_with_committed(summary_rows: list[dict], probe_table: list[dict]) -> bool:
    """Check the headline numbers (exactly: closed forms) and the compiled bytes per token per
    layer (within 1%: a compiler may schedule a little differently) against the committed
    answer; each check prints one line. A probe at another shape than the committed one has
    nothing to compare with and says so. True when everything compared agrees."""
    tables = (report.committed(COMMITTED) or {}).get("tables", {})
    old = {row["question"]: row["answer"] for row in tables.get("summary", [])}
    same = True
    for row in summary_rows:
        if row["question"].split(":")[0] in HEADLINE:
            quoted = old.get(row["question"])
            same &= report.agree(row["question"], row["answer"], quoted, rel=1e-9)
    old_probe = {_probe_key(row): row for row in tables.get("layer_probe", [])}
    for row in probe_table:
        what = f"{row['model']} on {row['target']}, T = {row['seq']}, remat {row['tunix_remat']}"
        match = old_probe.get(_probe_key(row))
        quoted = match["kept_bytes_per_token_layer"] if match else None
        live = row["kept_bytes_per_token_layer"]
        same &= report.agree(f"compiled bytes per token per layer, {what}", live, quoted, rel=0.01)
    return same


def _probe_key(row: dict) -> tuple:
    return row["model"], row["target"], row["seq"], row["tunix_remat"]
