"""Where the project's files live: one answer for notebooks, command lines and tests.

In a clone (`make setup` installs it editable) everything is relative to the repository root, so
a notebook writes to the same `results/` from JupyterLab (cwd `notebooks/`), papermill or a
command line. Installed from a wheel (Colab's or Kaggle's first cell pip-installs the project),
there is no checkout around `shared/`: the working directory takes its place.
"""

from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parent.parent


def _is_checkout(folder: Path) -> bool:
    return (folder / "pyproject.toml").is_file() and (folder / "notebooks").is_dir()


ROOT = _CHECKOUT if _is_checkout(_CHECKOUT) else Path.cwd()


def under_root(path: str | Path) -> Path:
    """`path` itself when absolute, else the same path under ROOT."""
    path = Path(path)
    return path if path.is_absolute() else ROOT / path
