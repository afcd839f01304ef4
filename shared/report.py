"""What every notebook does with its answers: check the mode, show and save tables and figures,
and check its live numbers against the committed ones its "What we found" cell quotes.

Tables go to `results/<notebook>/NAME.csv` and `.json`, figures to `NAME.png` (results/ is
gitignored); the executed notebook itself lands in `runs/`. The few figures a notebook's answer
cites are also written to `docs/figures/` when asked (KEY_FIGURES), to be committed. Relative
paths are taken from the project root (shared.paths) so a notebook writes to the same place from
JupyterLab, papermill or Colab.

Every notebook starts the same way: its parameters cell, then

    from shared import report
    MODE = report.use_mode(MODE)        # before jax: plan mode compiles on the CPU
    BATCH = report.by_mode(MODE, BATCH, local=[1, 4], real=[64, 128])
"""

import csv
import json
import math
import os
from pathlib import Path

from shared.errors import choose
from shared.paths import ROOT, under_root
from shared.sizing import human

MODES = ("local", "plan", "device")
RESULTS = ROOT / "benchmarks" / "results"  # committed numbers the notebooks quote
FIGURES = ROOT / "docs" / "figures"  # committed figures the notebooks and the README show


def check_mode(mode: str) -> str:
    """MODE must be local | plan | device."""
    return choose("MODE", mode, MODES)


def use_mode(mode: str) -> str:
    """Check MODE and set the environment it needs; call it before the first `import jax`.

    Plan mode compiles for a TPU target with libtpu and needs no local accelerator, so JAX
    stays on the CPU. Outside device mode every TPU compile is deviceless, so another process's
    libtpu (a plan run, another notebook) holding /tmp/libtpu_lockfile must not block this one.
    Only defaults are set: an environment the user chose wins.
    """
    check_mode(mode)
    if mode == "plan":
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    if mode != "device":
        os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    return mode


def by_mode(mode: str, value, local, real):
    """A parameter left at None: the CPU-friendly `local` value in local mode, else the `real`
    one (plan and device mode size the real workload)."""
    return value if value is not None else (local if mode == "local" else real)


def results_dir(path: str | Path) -> Path:
    """Create and return the results folder; relative paths are from the repository root."""
    path = under_root(path)
    path.mkdir(parents=True, exist_ok=True)
    return path


def save_table(rows: list[dict], folder: Path, name: str) -> Path:
    """Write rows as NAME.csv and NAME.json (values JSON can hold); return the CSV path."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    csv_path = folder / f"{name}.csv"
    with csv_path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    (folder / f"{name}.json").write_text(json.dumps(rows, indent=1, default=str))
    return csv_path


def table(rows: list[dict], folder: Path, name: str):
    """Save rows (see save_table) and return them as a pandas DataFrame to display."""
    import pandas as pd

    save_table(rows, folder, name)
    return pd.DataFrame(rows)


def byte_table(rows: list[dict], folder: Path, name: str, columns: list[str] | None = None):
    """Save the raw rows (see save_table); return the chosen columns for display, with every
    column named like *bytes* in KiB/MiB/GiB, since nobody reads 17426829803 at a glance."""
    import pandas as pd

    frame = table(rows, folder, name)
    frame = frame[[c for c in (columns or frame.columns) if c in frame.columns]].copy()
    for column in frame.columns:
        if "bytes" in column:
            frame[column] = frame[column].map(lambda v: bytes_text(None if pd.isna(v) else v))
    return frame


def bytes_text(n: float | None) -> str:
    """1.5 * 2**30 -> '1.50 GiB'; None or NaN (a point that did not run) -> 'n/a'."""
    return "n/a" if n is None or n != n else human(n, "B")


def show(rows: list[dict], folder: Path, name: str, columns: list[str] | None = None):
    """Save the raw rows (CSV/JSON in `folder`) and display them with readable byte units."""
    from IPython.display import display

    display(byte_table(rows, folder, name, columns))


def save_figure(fig, folder: Path, name: str, key: str | None = None) -> Path:
    """Save a matplotlib figure as NAME.png at a resolution fit for a README; with `key`, also
    as docs/figures/KEY.png, a figure the notebook's answer and the README cite."""
    path = folder / f"{name}.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    if key is not None:
        FIGURES.mkdir(parents=True, exist_ok=True)
        fig.savefig(FIGURES / f"{key}.png", dpi=120, bbox_inches="tight")
    return path


def committed(name: str) -> dict | list | None:
    """A committed result file, benchmarks/results/NAME.json; None where it is not (a package
    installed without the repository, as on Colab)."""
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


# The fields of a plan request that identify a committed verdict.
VERDICT_KEY = ("workload", "model", "target", "batch", "seq", "microbatches", "remat")


def committed_verdict(name: str, request) -> dict | None:
    """The plan verdict for `request` (a shared.plan.Request) in committed result file NAME's
    "verdicts" table, or None: how a notebook prices a setting in local and device mode without
    compiling it."""
    verdicts = ((committed(name) or {}).get("tables") or {}).get("verdicts", [])
    return next(
        (v for v in verdicts if all(v[k] == getattr(request, k) for k in VERDICT_KEY)), None
    )


STALE = (
    "the answer above no longer holds for this run's versions or settings; "
    "re-run the command it quotes"
)


def agree(
    what: str, live: float, quoted: float | None, *, rel: float = 0.0, why: str = STALE
) -> bool:
    """Print whether a number this run produced matches the one "What we found" quotes (from a
    committed result); `rel` is the relative difference still called agreement (timings), `why`
    what a difference means (a timing's depends on the host as much as on the code)."""
    if quoted is None:
        print(f"{what}: {live} (no committed number to compare with here)")
        return True
    same = math.isclose(live, quoted, rel_tol=rel, abs_tol=0 if rel else 1e-12)
    verdict = "agrees with" if same else "DIFFERS from"
    print(f"{what}: {live} {verdict} the committed {quoted}" + ("" if same else f": {why}"))
    return same
