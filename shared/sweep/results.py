"""Reading a sweep's trials back: the usable ones, a trial's curve, and what they recommend
(the best lr / wd, whether the best lr sits at the edge of the range tried, how wide the basin
is). Kept apart from `shared.sweep` (which runs trials); notebooks reach these through it."""

import json
import math
from pathlib import Path

from shared import report


def _finite(value) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def usable(rows: list[dict], metric: str = "val_loss") -> list[dict]:
    """The finished trials with a finite score (a diverged run's loss is NaN)."""
    return [r for r in rows if r.get("status") == "done" and _finite(r.get(metric))]


def _order(item):
    """Sort key: numbers by value before anything else by its text."""
    return (0, item[0], "") if _finite(item[0]) else (1, 0, str(item[0]))


def read_curve(out: str | Path, tid: str) -> list[dict]:
    """A trial's per-step metrics lines (training loss and so on), final evaluation left out."""
    path = report.results_dir(out) / "trials" / tid / "metrics.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if not r.get("final")]


def recommend(
    rows: list[dict],
    metric: str = "val_loss",
    goal: str = "minimize",
    tolerance: float = 0.02,
    lr: str = "lr",
    wd: str = "wd",
) -> dict:
    """What the trials say: the best lr/wd, whether the best lr is at the edge of what was
    tried (then widen the range), and how wide the basin is (lrs within `tolerance` of the
    best score). Returns the facts and a few lines of text."""
    sign = 1 if goal == "minimize" else -1
    done = usable(rows, metric)
    if not done:
        return {
            "best": None,
            "edge": None,
            "basin": None,
            "text": f"no trial finished with a finite {metric}: nothing to recommend",
        }
    best = min(done, key=lambda r: sign * r[metric])
    lines = [
        f"best: {lr}={best.get(lr)}, {wd}={best.get(wd)} with {metric} "
        f"{best[metric]:.4f} ({len(done)} of {len(rows)} trials usable)"
    ]
    edge = basin = None
    tried = sorted({r[lr] for r in rows if _finite(r.get(lr))})
    if _finite(best.get(lr)) and len(tried) > 1:
        if best[lr] in (tried[0], tried[-1]):
            edge = "low" if best[lr] == tried[0] else "high"
            lines.append(
                f"the best {lr} is the {'smallest' if edge == 'low' else 'largest'} "
                f"tried: the basin's edge was not found; widen the range "
                f"{'below' if edge == 'low' else 'above'} {best[lr]:.3g}"
            )
        near = [
            r[lr]
            for r in done
            if sign * (r[metric] - best[metric]) <= tolerance * abs(best[metric])
        ]
        basin = (min(near), max(near))
        if basin[1] > basin[0]:
            lines.append(
                f"{len(near)} trials within {tolerance:.0%} of the best {metric}: "
                f"{lr} {basin[0]:.3g} to {basin[1]:.3g} (a factor "
                f"{basin[1] / basin[0]:.1f}); within it the exact value matters little"
            )
        else:
            lines.append(
                f"no other {lr} within {tolerance:.0%} of the best: a narrow basin or "
                f"too coarse a search; sample more finely around {best[lr]:.3g}"
            )
    by_wd = {}  # each weight decay's best trial: their lrs show whether the comparison is fair
    for r in done:
        key = r.get(wd)
        if key not in by_wd or sign * r[metric] < sign * by_wd[key][metric]:
            by_wd[key] = r
    if len(by_wd) > 1:
        lines.append(
            f"best {metric} per {wd}: "
            + ", ".join(
                f"{wd}={k}: {r[metric]:.4f} (at {lr} {r.get(lr)})"
                for k, r in sorted(by_wd.items(), key=_order)
            )
        )
    diverged = sorted(
        r[lr]
        for r in rows
        if r.get("status") == "done" and not _finite(r.get(metric)) and _finite(r.get(lr))
    )
    if diverged:
        lines.append(
            f"diverged (non-finite {metric}) at {lr} = " + ", ".join(f"{v:.3g}" for v in diverged)
        )
    return {"best": best, "edge": edge, "basin": basin, "text": "\n".join(lines)}
