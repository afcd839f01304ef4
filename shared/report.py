"""What every notebook does with its answers: check the mode, save tables and figures.

Tables go to `results/<notebook>/NAME.csv` and `.json`, figures to `NAME.png` (results/ is
gitignored); the executed notebook itself lands in `runs/`. Relative paths are taken from the
repository root so a notebook writes to the same place from JupyterLab, papermill or Colab.
"""

import csv
import json
from pathlib import Path

from shared.errors import choose

REPO = Path(__file__).resolve().parent.parent
MODES = ("local", "plan", "device")


def check_mode(mode: str) -> str:
    """MODE must be local | plan | device."""
    return choose("MODE", mode, MODES)


def results_dir(path: str | Path) -> Path:
    """Create and return the results folder; relative paths are from the repository root."""
    path = Path(path)
    path = path if path.is_absolute() else REPO / path
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


def save_figure(fig, folder: Path, name: str) -> Path:
    """Save a matplotlib figure as NAME.png at a resolution fit for a README."""
    path = folder / f"{name}.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    return path
