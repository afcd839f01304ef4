"""The ledger: every device-mode run's measurement beside the plan's prediction for it.

Each row is one measured point (a rollout batch, a LoRA step, a train step) with the device,
the peak bytes it used per device and its time, and the prediction for the same workload when
one could be compiled (shared.plan compiles for a TPU slice or a GPU machine without it),
with both sides' versions. `results/ledger.csv` only grows; notebooks plot predicted against
measured from it, so agreement with real hardware is data, not a claim.
"""

from __future__ import annotations

import csv
import datetime
from pathlib import Path

from shared.paths import under_root

LEDGER = "results/ledger.csv"
COLUMNS = (
    "when",
    "source",
    "workload",
    "model",
    "batch",
    "shape",
    "device",
    "devices",
    "measured_status",
    "measured_peak_bytes_per_device",
    "measured_s",
    "predicted_target",
    "predicted_bytes_per_device",
    "predicted_fits",
    "predicted_versions",
    "measured_versions",
)


def measured_versions() -> str:
    from shared.versions import versions

    return " ".join(f"{k}={v}" for k, v in versions().items() if v)


def row(
    source: str,
    *,
    workload: str,
    model: str,
    batch: int,
    shape: str,
    status: str,
    peak_bytes: int | None,
    seconds: float | None,
    prediction: dict | None = None,
) -> dict:
    """One ledger row for a measured point on this process's devices. `prediction` is a
    shared.plan verdict (plan_point's dict) for the same workload, or None.

    On a GPU with XLA's autotuner on, the process's peak also holds the autotuner's scratch
    from compiling (gemma3-1b rollouts at batch 128 on an H200: 38.9 GB for a run of 21.0), so
    it is no measure of the program and the row keeps no peak; a run with XLA_FLAGS
    --xla_gpu_autotune_level=0 (shared.hardware.measure.NO_AUTOTUNING) records it."""
    import jax

    from shared.hardware import measure

    if measure.peak_includes_compiling():
        peak_bytes = None

    device = jax.local_devices()[0]
    predicted = prediction or {}
    return {
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "source": source,
        "workload": workload,
        "model": model,
        "batch": batch,
        "shape": shape,
        "device": device.device_kind,
        "devices": jax.device_count(),
        "measured_status": status,
        "measured_peak_bytes_per_device": peak_bytes,
        "measured_s": seconds,
        "predicted_target": predicted.get("target"),
        "predicted_bytes_per_device": predicted.get("bytes_per_device"),
        "predicted_fits": predicted.get("fits"),
        "predicted_versions": " ".join(
            f"{k}={v}" for k, v in predicted.get("versions", {}).items() if v
        ),
        "measured_versions": measured_versions(),
    }


def append(rows: list[dict], path: str | Path = LEDGER) -> Path:
    """Add rows to the ledger (created with its header on first use). Rows are only appended:
    what earlier runs wrote is never rewritten."""
    path = under_root(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists()
    with path.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        if new:
            writer.writeheader()
        writer.writerows({key: r.get(key) for key in COLUMNS} for r in rows)
    return path


def read(path: str | Path = LEDGER) -> list[dict]:
    """The ledger's rows (empty when no device run has written one yet)."""
    path = under_root(path)
    if not path.exists():
        return []
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def comparable(rows: list[dict]) -> list[tuple[float, float, dict]]:
    """(predicted, measured) bytes per device for rows that have both, with the row."""
    pairs = []
    for r in rows:
        try:
            pairs.append(
                (
                    float(r["predicted_bytes_per_device"]),
                    float(r["measured_peak_bytes_per_device"]),
                    r,
                )
            )
        except (TypeError, ValueError):  # a side is missing: not a comparison
            continue
    return pairs


def plot(ax, rows: list[dict]) -> int:
    """Predicted against measured bytes per device on `ax` (GiB), with the y = x line; returns
    how many points were drawn."""
    pairs = comparable(rows)
    gib = 2**30
    for device in sorted({r["device"] for _, _, r in pairs}):
        mine = [(p, m) for p, m, r in pairs if r["device"] == device]
        ax.plot([p / gib for p, _ in mine], [m / gib for _, m in mine], "o", label=device)
    if pairs:
        top = max(max(p, m) for p, m, _ in pairs) / gib * 1.05
        ax.plot([0, top], [0, top], "k--", lw=1, label="measured = predicted")
    ax.set_xlabel("predicted bytes per device (GiB, the compiler's)")
    ax.set_ylabel("measured peak bytes per device (GiB)")
    ax.set_title("Plan vs device: the ledger")
    ax.legend(fontsize=7)
    return len(pairs)
