"""Tables and figures a notebook shows and saves: `results/<notebook>/NAME.csv` and `.json`,
figures `NAME.png` (results/ is gitignored); the few figures a notebook's answer cites also go to
`docs/figures/` when asked (KEY_FIGURES), to be committed. Relative paths are taken from the
project root (shared.paths) so a notebook writes to the same place from JupyterLab, papermill or
Colab."""

import csv
import json
from pathlib import Path

from shared.paths import ROOT, under_root
from shared.sizing import human

FIGURES = ROOT / "docs" / "figures"  # committed figures the notebooks and benchmarks/README.md show


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
