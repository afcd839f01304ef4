"""Notebook 07's tables and figures: where a measured GRPO step goes and its reward and loss per
step; one row per compiled phase of a plan verdict, the bytes each phase holds beside the
resident buffers, and the searches for the largest micro-batch.

Kept apart from `grpo` (which runs) and `grpo_plan` (which compiles) so the notebook shows each
table and figure in one call and the drawing conventions (exact compiles filled, fast ones
hollow) live here."""

from __future__ import annotations

import numpy as np

from shared.grpo import GRPOResult
from shared.hardware import parse_target


def phase_rows(point: dict) -> list[dict]:
    """One row per compiled phase of a grpo verdict: bytes (arguments, outputs, temporaries,
    aliased, and what it adds to the resident set), GFLOP per call, calls per step, and the
    phase's roofline seconds per step (its FLOPs at peak or its bytes at HBM bandwidth,
    whichever is slower: a lower bound)."""
    chip = parse_target(point["target"]).chip

    def roofline_s(e):
        return e["repeats"] * max(chip.roofline_terms(e["flops"], e["bytes_accessed"]))

    return [
        {
            "phase": label,
            "argument_bytes": e["argument_bytes"],
            "output_bytes": e["output_bytes"],
            "temp_bytes": e["temp_bytes"],
            "alias_bytes": e["alias_bytes"],
            "transient_bytes": point["transient_bytes"][label],
            "total_with_resident_bytes": point["resident_bytes"] + point["transient_bytes"][label],
            "gflop_per_call": e["flops"] / 1e9,
            "calls_per_step": e["repeats"],
            "roofline_s_per_step": roofline_s(e),
            "refused": e["refused"],
            "note": e["note"],
        }
        for label, e in point["executables"].items()
    ]


def plot_bytes(point: dict, ax) -> None:
    """Per phase, stacked: the resident buffers (the same under every phase) and the phase's
    own transient bytes, against the HBM the compiler allows (GiB per device)."""
    gib, labels = 2**30, list(point["executables"])
    bottom = np.zeros(len(labels))
    for name, size in point["resident"].items():
        ax.bar(labels, [size / gib] * len(labels), bottom=bottom, label=f"resident: {name}")
        bottom += size / gib
    ax.bar(
        labels,
        [point["transient_bytes"][k] / gib for k in labels],
        bottom=bottom,
        label="transient (this phase)",
        color="0.6",
    )
    ax.axhline(point["hbm_bytes"] / gib, color="red", ls="--", label="usable HBM per device")
    ax.set_ylabel("GiB per device")
    ax.set_title(
        f"{point['model']} GRPO on {point['target']}: {point['batch']} sequences per "
        f"call, log-probs {point['logps']}"
    )
    ax.tick_params(axis="x", rotation=20)
    ax.legend(fontsize=7)


def plot_search(searches: dict[str, dict], ax, hbm_bytes: int) -> None:
    """Bytes per device against the micro-batch for each search (plan.max_batch results, or
    their rows in benchmarks/results/07_grpo_plan.json): exact compiles filled, fast ones hollow,
    the largest fitting batch marked; `hbm_bytes` is what the compiler allows."""
    gib = 2**30
    for i, (name, search) in enumerate(searches.items()):
        color = f"C{i}"
        for fast in (False, True):
            probes = sorted(
                (p for p in search["probes"] if p["fast"] == fast), key=lambda p: p["batch"]
            )
            ax.plot(
                [p["batch"] for p in probes],
                [p["bytes_per_device"] / gib for p in probes],
                "o" + (":" if fast else "-"),
                color=color,
                mfc="none" if fast else color,
                label=None if fast else f"{name}: largest {search['max_batch']}",
            )
        ax.axvline(search["max_batch"], color=color, ls=":", alpha=0.6)
    ax.axhline(hbm_bytes / gib, color="red", ls="--", label="usable HBM per device")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("micro-batch (sequences per call)")
    ax.set_ylabel("GiB per device (compiler; hollow: fast compile)")
    ax.set_title("The largest micro-batch that fits")
    ax.legend(fontsize=7)


PHASE_ORDER = ("rollout", "reference_logps", "old_policy_logps", "rewards", "policy_update")


def plot_phases(results: dict[str, GRPOResult], ax) -> None:
    """Each run's steady step (median after the first) stacked by phase, in seconds; what is
    left of the step is the learner's own work between phases."""
    names = list(results)
    steady = [results[n].steady() for n in names]
    bottom = np.zeros(len(names))
    for phase in PHASE_ORDER:
        seconds = np.array([row.get(f"{phase}_s", 0.0) for row in steady])
        if seconds.any():
            ax.bar(names, seconds, bottom=bottom, label=phase.replace("_", " "))
            bottom += seconds
    ax.bar(
        names,
        [row["step_s"] for row in steady] - bottom,
        bottom=bottom,
        color="0.8",
        label="between phases (host)",
    )
    ax.set_ylabel("seconds per GRPO step")
    ax.set_title("Where a GRPO step goes (median of the steps after the first)")
    ax.legend(fontsize=7)


def plot_curves(results: dict[str, GRPOResult], ax) -> None:
    """Mean reward (solid) and loss (dashed, right axis) per step of each run."""
    from matplotlib.ticker import MaxNLocator

    right = ax.twinx()
    for i, (name, result) in enumerate(results.items()):
        steps = range(len(result.steps))
        ax.plot(
            steps,
            [row.get("reward_mean", np.nan) for row in result.steps],
            "o-",
            color=f"C{i}",
            label=f"{name} reward",
        )
        right.plot(
            steps,
            [row.get("loss", np.nan) for row in result.steps],
            "s--",
            color=f"C{i}",
            label=f"{name} loss",
        )
    ax.set_xlabel("GRPO step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("mean reward (arithmetic, exact match)")
    right.set_ylabel("GRPO loss")
    ax.set_title("Reward and loss per step")
    ax.legend(loc="upper left", fontsize=7)
    right.legend(loc="upper right", fontsize=7)
