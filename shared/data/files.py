"""Where prepared data lives, and the JSON sidecars that say what each prepared file holds.

Every file `prepare` writes (tokenizer model, token shards, their sidecars) goes to a temporary
name first and is renamed into place, so an interrupted or failed run leaves what was there.
"""

import json
from pathlib import Path

from shared.errors import BadInput
from shared.paths import ROOT

DATA_DIR = ROOT / "data"
FORMAT_VERSION = 1  # bump when the shard or tokenizer layout changes: old files are rebuilt


def data_dir(folder: str | Path | None) -> Path:
    """`folder`, or the project's data/ when None."""
    return Path(folder or DATA_DIR)


def write_atomic(path: Path, blob: bytes) -> None:
    """Write `blob` to `path` through a temporary file, so a reader never sees half of it (and a
    failed run never leaves a half-written result); the folder is created if need be."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(blob)
    tmp.rename(path)


def read_json(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise BadInput(f"cannot read {path} ({err}); delete it and re-run prepare") from None


def write_json(path: Path, obj: dict) -> None:
    """`obj` as indented JSON, atomically (the one JSON writer: data sidecars, benchmark
    results); values JSON cannot hold (paths, dtypes) are written as their text."""
    write_atomic(Path(path), (json.dumps(obj, indent=1, default=str) + "\n").encode())
