"""The figure of docs/search.md: one committed search's bytes per device against the batch, its
located points and their line, its exact points, the HBM the compiler allows and the answer.

    python -m shared.plan.search.figure --out docs/figures/search.png

It draws from a committed file, never from a compile: COMMITTED names the search (the 1B
rollout search bench_plan's `command` part ran at the code of 2026-12-04, nothing cached).
Reading it needs neither jax nor the compiler.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from shared.errors import BadInput
from shared.paths import ROOT, under_root

# The committed search the page walks through: (file under benchmarks/results, keys to its entry)
COMMITTED = ("plan_speed_command.json", ("rollout", "v5e-1"))
OUT = "docs/figures/search.png"
GIB = 2**30
FITS, FAILS, LINE = "#1b9e77", "#d95f02", "#7570b3"


def committed_search(name: str = COMMITTED[0], keys: tuple[str, ...] = COMMITTED[1]) -> dict:
    """The committed search's entry (max_batch, first_not_fitting, compiles, probes in the order
    compiled, summary), with `hbm_bytes` (the HBM the compiler allows a device) from the exact
    verdict the same entry records for the same request, where the entry has none itself."""
    path = ROOT / "benchmarks" / "results" / name
    if not path.exists():
        raise BadInput(f"{path} is not here: the figure draws a committed search; use a checkout")
    entry = json.loads(path.read_text())
    for key in keys:
        entry = entry[key]
    hbm = entry.get("hbm_bytes") or entry.get("exact_verdict", {}).get("hbm_bytes")
    return {"source": f"benchmarks/results/{name}", **entry, "hbm_bytes": hbm}


def from_result(result: dict, source: str = "this run") -> dict:
    """A search this process just ran (max_batch's or plan.largest_batch's result) as `draw`
    reads a committed one: its answer in words and the HBM the compiler allows, which every
    verdict it compiled records (notebook 09 draws its own step's search so)."""
    from shared.plan.search.view import describe

    hbm = next(p["hbm_bytes"] for p in result["probes"] if not p["fast"])
    return {"source": source, **result, "summary": describe(result), "hbm_bytes": hbm}


def located_points(search: dict) -> list[dict]:
    """The points that located the boundary (step 1, and a climb's in step 2): fast compiles
    and probes stopped at buffer assignment, never an answer."""
    return [p for p in search["probes"] if p["fast"]] + list(search.get("assigned_probes", []))


def exact_points(search: dict) -> list[dict]:
    """The exact verdicts, in the order compiled (steps 2 and 3)."""
    return [p for p in search["probes"] if not p["fast"]]


def checks(search: dict) -> list[int]:
    """The batches compiled as checks (step 3): the exact ones compiled after both ends of the
    final bracket (the answer and the first batch that does not fit) were."""
    exact = [p["batch"] for p in exact_points(search)]
    ends = {search["max_batch"], search["first_not_fitting"]}
    if not ends <= set(exact):
        return []
    last_end = max(i for i, b in enumerate(exact) if b in ends)
    return exact[last_end + 1 :]


def crossing(a: dict, b: dict, hbm: int) -> float:
    """The batch where the line through points `a` and `b` reaches `hbm` bytes."""
    slope = (b["bytes_per_device"] - a["bytes_per_device"]) / (b["batch"] - a["batch"])
    return a["batch"] + (hbm - a["bytes_per_device"]) / slope


def _line(ax, a: dict, b: dict, xs: tuple[float, float], **style) -> None:
    slope = (b["bytes_per_device"] - a["bytes_per_device"]) / (b["batch"] - a["batch"])
    ys = [(a["bytes_per_device"] + slope * (x - a["batch"])) / GIB for x in xs]
    ax.plot(xs, ys, **style)


def _points(ax, points: list[dict], filled: bool, size: float) -> None:
    for p in points:
        colour = FITS if p["fits"] else FAILS
        ax.scatter(
            p["batch"],
            p["bytes_per_device"] / GIB,
            s=size,
            marker="o" if p["fits"] else "X",
            facecolors=colour if filled else "none",
            edgecolors=colour,
            linewidths=1.5,
            zorder=3,
        )


def draw(search: dict, ax) -> None:
    """The search on `ax`: located points hollow, exact ones filled (a circle fits, a cross does
    not), the line through the first two located points, the HBM, the answer, and an inset at
    the boundary where the exact points sit too close to tell apart at full scale."""
    hbm, answer, fail = search["hbm_bytes"], search["max_batch"], search["first_not_fitting"]
    located, exact = located_points(search), exact_points(search)
    top = max(p["batch"] for p in search["probes"] + list(search.get("assigned_probes", [])))
    low, far = located[0], located[1]
    _line(ax, low, far, (0, top * 1.05), color=LINE, ls="--", lw=1, label="located line")
    ax.axhline(hbm / GIB, color="k", lw=1, label=f"HBM the compiler allows ({hbm / GIB:.2f} GiB)")
    _points(ax, located, filled=False, size=60)
    _points(ax, exact, filled=True, size=60)
    ax.axvline(answer, color=FITS, ls=":", lw=1, label=f"answer: {answer}")
    for p in located:
        ax.annotate(
            f"located {p['batch']}",
            (p["batch"], p["bytes_per_device"] / GIB),
            xytext=(8, -14),
            textcoords="offset points",
            fontsize=8,
        )
    # handles for the legend: what hollow, filled, circle and cross mean
    ax.scatter([], [], marker="o", facecolors="none", edgecolors="grey", label="located (fast)")
    ax.scatter([], [], marker="o", color="grey", label="exact compile")
    ax.scatter([], [], marker="o", color=FITS, label="fits")
    ax.scatter([], [], marker="X", color=FAILS, label="does not fit")
    ax.set_xlim(0, top * 1.05)
    ax.set_ylim(0, max(p["bytes_per_device"] for p in located + exact) / GIB * 1.08)
    ax.set_xlabel("batch (sequences)")
    ax.set_ylabel("bytes per device (GiB)")
    where = search["summary"].split(": ")[0].removeprefix("largest batch that fits for ")
    ax.set_title(f"{where}: {answer} fits, {fail} does not, {search['compiles']} compiles")
    ax.legend(loc="lower right", fontsize=8)

    # the boundary, close up: the exact points, the HBM and the lines that aimed them
    batches = [p["batch"] for p in exact]
    unit = search.get("multiple_of") or 1  # the search's step: a tick a unit, 12 at most
    x0, x1 = min(batches) - 3.5 * unit, max(batches) + 1.5 * unit
    inset = ax.inset_axes((0.05, 0.5, 0.4, 0.42))
    at = crossing(low, far, hbm)
    _line(inset, low, far, (x0, x1), color=LINE, ls="--", lw=1, label=f"located: {at:.1f}")
    if aim := second_aim(search):
        below, failed = aim
        at = crossing(below, failed, hbm)
        words = f"located {below['batch']} to exact {failed['batch']}: {at:.1f}"
        _line(inset, below, failed, (x0, x1), color=FAILS, ls=":", lw=1, label=words)
    inset.axhline(hbm / GIB, color="k", lw=1)
    _points(inset, exact, filled=True, size=70)
    checked = checks(search)
    for i, p in enumerate(exact, start=1):
        step = "check" if p["batch"] in checked else "confirm"
        words = "answer" if p["batch"] == answer else step
        inset.annotate(
            f"{p['batch']}: {words} (#{i})",
            (p["batch"], p["bytes_per_device"] / GIB),
            xytext=(6, -3),
            textcoords="offset points",
            fontsize=7,
        )
    ys = [p["bytes_per_device"] / GIB for p in exact] + [hbm / GIB]
    pad = (max(ys) - min(ys)) * 0.3
    inset.set_xlim(x0, x1)
    inset.set_ylim(min(ys) - pad, max(ys) + pad)
    ticks = range(min(batches) - 3 * unit, max(batches) + 2 * unit, unit)
    inset.set_xticks(ticks[:: -(-len(ticks) // 12)])
    inset.tick_params(labelsize=7)
    inset.set_title("at the boundary: exact compiles in order (#)", fontsize=8)
    inset.legend(
        title="each line crosses the HBM at", title_fontsize=7, fontsize=7, loc="upper left"
    )
    ax.indicate_inset_zoom(inset, edgecolor="grey")


def second_aim(search: dict) -> tuple[dict, dict] | None:
    """Where the first exact compile failed: the largest located fit under it and that failure,
    whose line aims the next exact compile (lines.next_guess, failures only); else None."""
    exact = exact_points(search)
    if not exact or exact[0]["fits"]:
        return None
    failed = exact[0]
    below = [p for p in located_points(search) if p["fits"] and p["batch"] < failed["batch"]]
    return (max(below, key=lambda p: p["batch"]), failed) if below else None


def write(path: str | Path = OUT, search: dict | None = None) -> Path:
    """The figure as a PNG at `path` (under the repository root where relative; its folder
    created), drawn from `search` (by default the committed one), closed after."""
    import matplotlib

    matplotlib.use("Agg")  # written to a file: no display needed
    import matplotlib.pyplot as plt

    search = committed_search() if search is None else search
    fig, ax = plt.subplots(figsize=(9, 5.5))
    draw(search, ax)
    fig.text(0.01, 0.01, f"from {search['source']}", fontsize=7, color="grey")
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    path = under_root(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m shared.plan.search.figure", description=__doc__
    )
    parser.add_argument("--out", default=OUT, help=f"where the PNG goes (default {OUT})")
    args = parser.parse_args(argv)
    print(write(args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
