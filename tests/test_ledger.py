"""shared.report.ledger: measured points beside predictions, appended, never rewritten."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from shared.report import ledger  # noqa: E402


def _prediction(bytes_per_device):
    return {
        "target": "v5e-1",
        "bytes_per_device": bytes_per_device,
        "fits": True,
        "versions": {"jax": "0.10.2", "libtpu": "0.0.42.1"},
    }


def test_rows_append_and_compare(tmp_path):
    path = tmp_path / "ledger.csv"
    first = ledger.row(
        "notebook 01",
        workload="rollout",
        model="gemma3-1b",
        batch=64,
        shape="prompt 256, 1024 steps",
        status="ok",
        peak_bytes=5 * 2**30,
        seconds=12.5,
        prediction=_prediction(4.7 * 2**30),
    )
    ledger.append([first], path)
    no_prediction = ledger.row(
        "bench_train",
        workload="train",
        model="130m",
        batch=8,
        shape="seq 2048",
        status="oom",
        peak_bytes=None,
        seconds=None,
    )
    ledger.append([no_prediction], path)
    rows = ledger.read(path)
    assert [r["source"] for r in rows] == ["notebook 01", "bench_train"]
    assert rows[0]["device"] and "jax=" in rows[0]["measured_versions"]
    assert "libtpu=0.0.42.1" in rows[0]["predicted_versions"]
    pairs = ledger.comparable(rows)  # only the row with both sides
    assert [(p, m) for p, m, _ in pairs] == [(4.7 * 2**30, 5 * 2**30)]
    fig, ax = plt.subplots()
    assert ledger.plot(ax, rows) == 1
    plt.close(fig)


def test_a_missing_ledger_reads_empty(tmp_path):
    assert ledger.read(tmp_path / "none.csv") == []


def test_a_peak_that_holds_the_gpu_autotuners_scratch_is_not_recorded(monkeypatch):
    """On a GPU with XLA's autotuner on, the process peak held 38.9 GB where the rollout took
    21.0 (H200): such a peak is no measure of the program, so the row keeps none."""
    from shared.hardware import measure

    point = {"workload": "rollout", "model": "m", "batch": 1, "shape": "s", "status": "ok"}
    kept = ledger.row("t", **point, peak_bytes=5, seconds=1.0)
    assert kept["measured_peak_bytes_per_device"] == 5  # CPU: nothing compiles on a device
    monkeypatch.setattr(measure, "peak_includes_compiling", lambda: True)
    dropped = ledger.row("t", **point, peak_bytes=5, seconds=1.0)
    assert dropped["measured_peak_bytes_per_device"] is None and dropped["measured_s"] == 1.0
