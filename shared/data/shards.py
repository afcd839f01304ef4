"""Token shards: each split of a corpus as one raw uint16 file plus a JSON sidecar.

`data/shards/<corpus>-sp<V>/{train,val}.bin` hold the split's documents, each prefixed by BOS,
concatenated (np.memmap reads them without loading); `{train,val}.json` hold dtype, token
count, document count, the UTF-8 byte count of the split's text (for bits per byte), vocab and
tokenizer hash. `prepare` writes both splits to temporary files and renames them (and saves a
newly trained tokenizer) only when both are complete: a failed run leaves what was there.
"""

import itertools
import os
from pathlib import Path

import numpy as np

from shared.data import files
from shared.data.bpe import (
    BOS_ID,
    DEFAULT_VOCAB,
    EOS_ID,
    PAD_ID,
    load_or_train,
    tokenizer_hash,
    tokenizer_path,
)
from shared.data.corpus import (
    CORPORA,
    VAL_PLAYS,
    corpus_name,
    is_val_text,
    parquet_files,
    parquet_rows,
    parquet_texts,
    shakespeare_documents,
    split_shakespeare,
    text_digest,
)
from shared.errors import BadInput, choose


class Split:
    """One tokenized split on disk: `tokens` (uint16 memmap) and `meta` (its JSON sidecar)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        sidecar = self.path.with_suffix(".json")
        if not (self.path.exists() and sidecar.exists()):
            raise BadInput(
                f"no prepared split at {self.path}; run "
                "`python -m shared.data prepare` (see data/README.md)"
            )
        self.meta = files.read_json(sidecar)
        missing = {"count", "dtype", "bytes", "documents", "vocab_size"} - set(self.meta)
        if missing:
            raise BadInput(f"{sidecar} lacks {sorted(missing)}; re-run prepare with --force")
        count = self.meta["count"]
        if self.path.stat().st_size != count * np.dtype(self.meta["dtype"]).itemsize:
            raise BadInput(
                f"{self.path} does not hold the {count:,} tokens its sidecar says; "
                "re-run prepare with --force"
            )
        self.tokens = np.memmap(self.path, dtype=self.meta["dtype"], mode="r", shape=(count,))

    n_tokens = property(lambda self: self.meta["count"])
    n_bytes = property(lambda self: self.meta["bytes"])
    n_documents = property(lambda self: self.meta["documents"])
    vocab_size = property(lambda self: self.meta["vocab_size"])

    def __repr__(self) -> str:
        return (
            f"Split({self.path}, {self.n_tokens:,} tokens, {self.n_documents} documents, "
            f"{self.n_bytes:,} bytes)"
        )


def shard_dir(
    corpus: str = "shakespeare", vocab_size: int = DEFAULT_VOCAB, data_dir: str | Path | None = None
) -> Path:
    return files.data_dir(data_dir) / "shards" / f"{corpus}-sp{vocab_size}"


def open_split(
    split: str = "train",
    corpus: str = "shakespeare",
    vocab_size: int = DEFAULT_VOCAB,
    data_dir: str | Path | None = None,
) -> Split:
    choose("split", split, ("train", "val"))
    return Split(shard_dir(corpus, vocab_size, data_dir) / f"{split}.bin")


class _ShardWriter:
    """Appends BOS-prefixed documents to <split>.bin.tmp; `commit` renames it, writes meta."""

    def __init__(self, path: Path, meta: dict):
        self.path, self.meta = path, dict(meta, dtype="uint16", count=0, documents=0, bytes=0)
        self.tmp = path.with_suffix(".bin.tmp")
        self.file = open(self.tmp, "wb")

    def add(self, texts: list[str], ids: list[list[int]]) -> None:
        if not ids:
            return
        flat = np.fromiter(
            itertools.chain.from_iterable([BOS_ID, *x] for x in ids), dtype=np.uint16
        )
        flat.tofile(self.file)
        self.meta["count"] += flat.size
        self.meta["documents"] += len(ids)
        self.meta["bytes"] += sum(len(t.encode("utf-8")) for t in texts)

    def finish(self) -> None:
        """Close the temporary file; BadInput (nothing renamed yet) if the split is empty."""
        self.file.close()
        if self.meta["documents"] == 0:
            raise BadInput(
                f"the {self.meta['split']} split is empty; for parquet use a "
                "larger --val-fraction or more documents"
            )

    def commit(self) -> Split:
        self.tmp.rename(self.path)
        files.write_json(self.path.with_suffix(".json"), self.meta)
        return Split(self.path)

    def discard(self) -> None:
        self.file.close()
        self.tmp.unlink(missing_ok=True)


def prepare(
    corpus: str = "shakespeare",
    vocab_size: int = DEFAULT_VOCAB,
    data_dir: str | Path | None = None,
    parquet_dir: str | Path | None = None,
    val_fraction: float = 0.05,
    max_chars: int = 20_000_000,
    force: bool = False,
    progress: bool = True,
) -> dict[str, Split]:
    """Train (or reuse) the tokenizer and write train/val shards; returns {'train', 'val'}.

    Up-to-date shards (same tokenizer hash, same source, same split rule) are left alone unless
    `force`. Parquet corpora are named after their folder (data/shards/<folder>-sp<V>/).
    """
    from tqdm.auto import tqdm

    choose("corpus", corpus, CORPORA)
    if not 0 < val_fraction < 1:
        raise BadInput(f"--val-fraction {val_fraction} must be in (0, 1)")
    name = corpus_name(corpus, parquet_dir)
    sources = parquet_files(parquet_dir) if corpus == "parquet" else []
    sp, save_tokenizer = load_or_train(
        vocab_size, data_dir, corpus, parquet_dir, val_fraction, max_chars, quiet=not progress
    )
    if corpus == "shakespeare":
        docs = shakespeare_documents()
        source, split_rule = text_digest(t for _, t in docs), f"plays:{','.join(VAL_PLAYS)}"
    else:
        source = text_digest(f"{f.name}:{f.stat().st_size}" for f in sources)
        split_rule = f"blake2b<{val_fraction}"
    meta = {
        "format": files.FORMAT_VERSION,
        "corpus": name,
        "vocab_size": sp.get_piece_size(),
        "tokenizer": tokenizer_path(vocab_size, data_dir, name).name,
        "tokenizer_hash": tokenizer_hash(sp),
        "bos_id": BOS_ID,
        "eos_id": EOS_ID,
        "pad_id": PAD_ID,
        "source": source,
        "split_rule": split_rule,
    }
    out = shard_dir(name, vocab_size, data_dir)
    paths = {s: out / f"{s}.bin" for s in ("train", "val")}
    if not force and all(_is_current(p, meta) for p in paths.values()):
        save_tokenizer()  # a no-op unless the model file alone had gone missing
        return {s: Split(p) for s, p in paths.items()}
    out.mkdir(parents=True, exist_ok=True)
    writers = {s: _ShardWriter(p, dict(meta, split=s)) for s, p in paths.items()}
    threads = min(16, os.cpu_count() or 1)
    try:
        if corpus == "shakespeare":
            for split, pairs in split_shakespeare(docs).items():
                for _, text in tqdm(
                    pairs, unit="play", desc=f"tokenizing {split}", disable=not progress
                ):
                    writers[split].add([text], [sp.encode(text)])
        else:
            bar = tqdm(
                total=parquet_rows(sources),
                unit="doc",
                desc=f"tokenizing {name}",
                disable=not progress,
            )
            for batch in parquet_texts(sources):
                ids = sp.encode(batch, num_threads=threads)
                held_out = [is_val_text(t, val_fraction) for t in batch]
                for split, want in (("train", False), ("val", True)):
                    keep = [i for i, v in enumerate(held_out) if v == want]
                    writers[split].add([batch[i] for i in keep], [ids[i] for i in keep])
                bar.update(len(batch))
            bar.close()
        for w in writers.values():
            w.finish()
    except BaseException:
        for w in writers.values():
            w.discard()
        raise
    # Only now, with both splits complete, replace what was there: shards, then tokenizer.
    save_tokenizer()
    return {s: w.commit() for s, w in writers.items()}


def _is_current(path: Path, meta: dict) -> bool:
    sidecar = path.with_suffix(".json")
    if not (path.exists() and sidecar.exists()):
        return False
    old = files.read_json(sidecar)
    return all(old.get(k) == v for k, v in meta.items())
