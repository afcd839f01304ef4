"""The atlas at a glance: one panel a recipe, models down, slices across, each cell coloured by
what the compiler said (fits, nothing fits, failed, not computed yet, or an answer a later run
may raise: the page's '?') and labelled with the largest batch. docs/atlas.md shows it above
its tables (docs/figures/atlas.png)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # written to a file by a command line: no display needed

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from shared.plan.atlas.lookup import DOES_NOT_RUN  # noqa: E402
from shared.plan.atlas.render import grid_of  # noqa: E402
from shared.plan.atlas.store import (  # noqa: E402
    needs_check,
    newest,
    older_search,
)

# The cell's state -> (colour index, legend label)
STATES = {
    "fits": (0, "fits (the largest batch)"),
    "none": (1, "not even the smallest batch fits"),
    "failed": (2, "failed (see the tables)"),
    "not yet": (3, "not computed yet"),
    # the page's '?' (render.cell_text): an older search's answer, one searched on one mesh
    # only (--one-mesh), or one not checked above: a larger batch may fit. Until 2026-12-02
    # this said "an older search (until 2026-11-28)", also on the one-mesh cells of that day.
    "may fit more": (4, "?: another mesh, or a batch the search skipped, may fit more"),
    "TPU only": (5, "tunix's program for it runs on a TPU only"),
}
COLOURS = ListedColormap(["#7fc97f", "#f0027f", "#fdc086", "#dddddd", "#ffff99", "#9e9ac8"])


def state(row: dict | None) -> tuple[str, str]:
    """(state, label) of one cell."""
    if row is None:
        return "not yet", ""
    if row["status"] == DOES_NOT_RUN:
        return "TPU only", "-"
    if row["status"] != "ok":
        return "failed", "!"
    if older_search(row) or needs_check(row):  # a later run may answer it with more
        return "may fit more", f"{row['max_batch']}?"
    if row["max_batch"] == 0:
        return "none", "0"
    return "fits", f"{'≥' if row['at_least'] else ''}{row['max_batch']}"


def draw(rows: list[dict], model_names: list[str], targets: list[str], recipes: list[str]):
    """The figure: a panel per recipe, the same models and slices as the page's tables."""
    best = newest(rows)
    fig, axes = plt.subplots(1, len(recipes), figsize=(4.6 * len(recipes), 4.4), squeeze=False)
    for ax, recipe in zip(axes[0], recipes, strict=True):
        names, columns = grid_of(best, recipe, model_names, targets)
        cells = [[state(best.get((recipe, m, t))) for t in columns] for m in names]
        ax.imshow(
            [[STATES[s][0] for s, _ in line] for line in cells],
            cmap=COLOURS,
            vmin=0,
            vmax=len(STATES) - 1,
        )
        for i, line in enumerate(cells):
            for j, (_, label) in enumerate(line):
                # five digits (gemma3-1b rollouts on a tpu7x-8: 11864) overran their cell at 8
                size = 8 if len(label) <= 4 else 6
                ax.text(j, i, label, ha="center", va="center", fontsize=size)
        ax.set_xticks(range(len(columns)), columns, rotation=45, ha="right")
        ax.set_yticks(range(len(names)), names)
        ax.set_title(f"{recipe}: the largest batch that fits")
    fig.legend(
        handles=[Patch(color=COLOURS(index), label=label) for index, label in STATES.values()],
        loc="lower center",
        ncol=3,
        frameon=False,
    )
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def write(path, rows: list[dict], model_names, targets, recipes) -> None:
    """The figure as a PNG (its folder created), closed after."""
    fig = draw(rows, model_names, targets, recipes)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
