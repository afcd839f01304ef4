"""Where the project's files live: one answer for notebooks, command lines and tests.

In a clone (`make setup` installs it editable) everything is relative to the repository root, so
a notebook writes to the same `results/` from JupyterLab (cwd `notebooks/`), papermill or a
command line. Installed from a wheel (Colab's or Kaggle's first cell pip-installs the project),
there is no checkout around `shared/`: the working directory takes its place.
"""

import os
from pathlib import Path

from shared.errors import BadInput

_CHECKOUT = Path(__file__).resolve().parent.parent


def _is_checkout(folder: Path) -> bool:
    return (folder / "pyproject.toml").is_file() and (folder / "notebooks").is_dir()


ROOT = _CHECKOUT if _is_checkout(_CHECKOUT) else Path.cwd()


def under_root(path: str | Path) -> Path:
    """`path` itself when absolute, else the same path under ROOT."""
    path = Path(path)
    return path if path.is_absolute() else ROOT / path


def writable_folder(path: str | Path, *, what: str, fix: str) -> Path:
    """`path`, created if need be; BadInput in one line when it cannot be written (a read-only
    or missing parent), saying what it was for and how to choose another, before any work
    starts that would be lost when the first write fails."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        if not os.access(path, os.W_OK):
            raise PermissionError(13, "not writable")
    except OSError as err:
        raise BadInput(f"cannot write {what} in {path} ({err.strerror or err}): {fix}") from None
    return path
