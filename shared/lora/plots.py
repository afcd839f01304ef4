"""Notebook 02's figures: live bytes before and after qwix LoRA, and the largest batch of a LoRA
fine-tune at scale against sequence length, with and without remat.

Kept apart from shared.lora's adapters and training so the notebook shows each figure in one
call and the drawing conventions (exact boundaries filled, fast-line ones open) live here."""

from __future__ import annotations

MiB = 2**20


def plot_hbm_stages(ax, stages: dict[str, int], title: str) -> None:
    """One bar per stage, top to bottom, in MiB; the last stage (the hypothetical case of a clone
    that copied the base) is drawn hatched and empty, as what did not happen."""
    names = list(stages)
    colors = [f"C{i}" for i in range(len(names) - 1)] + ["w"]
    hatches = [""] * (len(names) - 1) + ["//"]
    ax.barh(names, [v / MiB for v in stages.values()], color=colors, edgecolor="k", hatch=hatches)
    ax.invert_yaxis()
    ax.set(xlabel="live array bytes on the fullest device (MiB)", title=title)


def plot_scale_boundaries(ax, boundaries: list[dict], setting: dict) -> None:
    """Largest batch that fits against sequence length, one line per remat policy: filled marks
    where exact compiles found the boundary, open ones where only the fast-compile line did."""
    for i, remat in enumerate(dict.fromkeys(b["remat"] for b in boundaries)):
        mine = [b for b in boundaries if b["remat"] == remat]
        best = [b.get("largest_batch", b["fast_line_batch"]) for b in mine]
        ax.plot(
            [b["seq"] for b in mine], best, "o-", color=f"C{i}", mfc="w", label=f"remat {remat}"
        )
        exact = [b for b in mine if "largest_batch" in b]
        ax.plot([b["seq"] for b in exact], [b["largest_batch"] for b in exact], "o", color=f"C{i}")
    seqs = sorted({b["seq"] for b in boundaries})
    ax.set_xscale("log", base=2)
    ax.set_xticks(seqs, [str(t) for t in seqs])
    ax.set(
        xlabel="sequence length (tokens)",
        ylabel="largest batch that fits (sequences)",
        title=f"LoRA rank {setting['rank']}: {setting['model']} on {setting['target']} "
        "(filled: exact, open: fast)",
    )
    ax.legend()
