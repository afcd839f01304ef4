"""Notebook 01's figures: measured rollout speed against batch, and the compiler's bytes per
device against batch under each tunix semantics beside the closed form (weights + KV copies).

Kept apart from `rollout_sweep` (which measures) so that the notebook shows a figure in one call
and the drawing conventions (exact compiles filled, fast ones crossed) live in one place."""

from __future__ import annotations

from shared import models
from shared.rollout import sweep as rollout_sweep

GiB = 2**30


def plot_measured(axes, rows: list[dict]) -> None:
    """Decode ms per token and tokens per second against batch (log scale) on two axes; a red
    dotted line where a batch ran out of memory or was skipped after one."""
    ok = [r for r in rows if r["status"] == "ok"]
    for ax, key, label in (
        (axes[0], "decode_ms_per_token", "decode ms per token (batch-wide)"),
        (axes[1], "tokens_per_s", "tokens per second (prefill + decode)"),
    ):
        ax.plot([r["batch"] for r in ok], [r[key] for r in ok], "o-")
        for r in rows:
            if r["status"] != "ok":
                ax.axvline(r["batch"], color="red", ls=":", label=f"{r['status']} {r['batch']}")
        ax.set(xscale="log", xlabel="batch (sequences, log scale)", ylabel=label)


def plot_searches(
    ax,
    searches: dict[str, dict],
    setting: dict,
    *,
    fsdp: int,
    tp: int,
    usable_bytes: int,
    field: dict | None = None,
) -> None:
    """Bytes per device against batch for each tunix semantics' search (its probes: exact
    compiles filled, fast ones crossed), the closed form, the largest batch that fits and the
    HBM a program may use; `field` adds the measured points taken at this very setting."""
    dims = models.model_dims(setting["model"])
    top = max(p["batch"] for found in searches.values() for p in found["probes"])
    for (semantics, found), color in zip(searches.items(), ("C0", "C1"), strict=False):
        for fast, marker in ((False, "o"), (True, "x")):
            points = sorted(
                (p["batch"], p["bytes_per_device"]) for p in found["probes"] if p["fast"] == fast
            )
            ax.plot(
                [b for b, _ in points],
                [v / GiB for _, v in points],
                marker,
                color=color,
                ls="none",
                label=f"tunix {semantics}: compiler, {'fast' if fast else 'exact'}",
            )
        ax.plot(
            (fsdp, top),
            [
                rollout_sweep.closed_form_bytes_per_device(
                    dims, b, setting["cache_size"], fsdp, tp, semantics
                )
                / GiB
                for b in (fsdp, top)
            ],
            "--",
            color=color,
            label=f"closed form: weights + {rollout_sweep.KV_COPIES[semantics]}x KV cache",
        )
        ax.axvline(
            found["max_batch"],
            color=color,
            ls=":",
            label=f"largest that fits, tunix {semantics}: {found['max_batch']}",
        )
    ax.axhline(
        usable_bytes / GiB, color="red", label=f"HBM a program may use on {setting['target']}"
    )
    for batch, what in ((field["ran"], "ran"), (field["out_of_memory"], "OOM")) if field else ():
        ax.plot(
            batch,
            usable_bytes / GiB,
            "kv" if what == "OOM" else "k^",
            ms=9,
            label=f"field, tunix of Dec 2025: batch {batch} {what}",
        )
    ax.set(
        xlabel="batch (sequences)",
        ylabel="bytes per device (GiB)",
        ylim=(0, usable_bytes / GiB * 1.3),
        title=f"{setting['model']} rollout on {setting['target']}: prompt "
        f"{setting['prompt_len']}, {setting['steps']} steps, cache "
        f"{setting['cache_size']}",
    )
    ax.legend(fontsize=7, loc="upper left")


def plot_moe(rows: list[dict], title: str):
    """A figure of tokens per second and the compiler's bytes per device for each model of
    shared.rollout.moe's rows (the ones that ran), the mixtures hatched beside their dense
    twins."""
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r["status"] == "ok"]
    names = [r["model"] for r in ok]
    hatch = ["//" if r["experts"] != "dense" else "" for r in ok]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for ax, key, scale, label in (
        (axes[0], "tokens_per_s", 1, "tokens per second (prefill + decode)"),
        (axes[1], "compiled_bytes_per_device", 2**20, "compiled bytes per device (MiB)"),
    ):
        ax.bar(names, [r[key] / scale for r in ok], hatch=hatch, color="C0", edgecolor="k")
        ax.set(ylabel=label)
        ax.tick_params(axis="x", labelrotation=20)
    fig.suptitle(title)
    fig.tight_layout()
    return fig
