"""The tokenizer: SentencePiece BPE trained on a corpus's train split, cached under data/.

Byte fallback (never <unk>) and identity normalisation, so decode gives the text back byte for
byte; ids pad 0, eos 1, bos 2, unk 3 (Gemma's order; pad is a real id, as tunix's
TokenizerAdapter wants). Training is deterministic and sees the train split only. The model is
cached as `data/tokenizer/<corpus>_sp<V>.model` with a JSON sidecar of its settings and a digest
of its training text; a change in either retrains it.

(The module is not called `tokenizer`: `shared.data.tokenizer` is the function that returns
one, and a submodule of that name would be shadowed by it.)
"""

import hashlib
import os
import time
from pathlib import Path

from shared.data import files
from shared.data.corpus import (
    CORPORA,
    corpus_name,
    is_val_text,
    parquet_files,
    parquet_texts,
    shakespeare_documents,
    split_shakespeare,
    text_digest,
)
from shared.errors import BadInput, choose

DEFAULT_VOCAB = 4096
PAD_ID, EOS_ID, BOS_ID, UNK_ID = 0, 1, 2, 3
MAX_VOCAB = 2**16  # token shards are uint16
_TOKENIZER_SETTINGS = dict(
    model_type="bpe",
    byte_fallback=True,
    pad_id=PAD_ID,
    eos_id=EOS_ID,
    bos_id=BOS_ID,
    unk_id=UNK_ID,
    normalization_rule_name="identity",
    remove_extra_whitespaces=False,
    add_dummy_prefix=False,
    split_digits=True,
    allow_whitespace_only_pieces=True,
    character_coverage=0.9995,
    max_sentence_length=1 << 20,
    input_sentence_size=0,
)


def tokenizer_path(
    vocab_size: int = DEFAULT_VOCAB, data_dir: str | Path | None = None, corpus: str = "shakespeare"
) -> Path:
    return files.data_dir(data_dir) / "tokenizer" / f"{corpus}_sp{vocab_size}.model"


def tokenizer_hash(sp) -> str:
    """A fingerprint of the vocabulary (pieces and scores), independent of training threads."""
    h = hashlib.sha256()
    for i in range(sp.get_piece_size()):
        h.update(f"{sp.id_to_piece(i)}\t{sp.get_score(i)}\n".encode())
    return h.hexdigest()[:16]


def _check_vocab_size(vocab_size: int) -> None:
    if not 512 <= vocab_size <= MAX_VOCAB:
        raise BadInput(
            f"vocab size {vocab_size} out of range; valid: 512..{MAX_VOCAB} "
            "(256 byte pieces + specials need room; shards are uint16)"
        )


def check_vocab(tokenizer_vocab: int, model_vocab: int) -> None:
    """BadInput unless every token id of the tokenizer is a row of the model's embedding."""
    if tokenizer_vocab > model_vocab:
        raise BadInput(
            f"tokenizer has {tokenizer_vocab} tokens but the model's vocab is "
            f"{model_vocab}; use --vocab-size <= {model_vocab} or a larger model V"
        )


def train_tokenizer(texts: list[str], vocab_size: int) -> bytes:
    """Train SentencePiece BPE on whole documents; returns the serialized model."""
    import io

    import sentencepiece as spm

    _check_vocab_size(vocab_size)
    proto = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(texts),
            model_writer=proto,
            vocab_size=vocab_size,
            num_threads=min(16, os.cpu_count() or 1),
            minloglevel=2,
            **_TOKENIZER_SETTINGS,
        )
    except RuntimeError as err:
        # "INTERNAL: src/trainer_interface.cc(744) [check] Vocabulary size too high ..." -> the
        # sentence after the check, which says what to change.
        reason = " ".join(str(err).split()).rpartition("] ")[2] or repr(err)
        raise BadInput(
            f"SentencePiece cannot train a {vocab_size}-token vocabulary on "
            f"{sum(map(len, texts)):,} characters: {reason}"
        ) from None
    return proto.getvalue()


def _training_texts(
    corpus: str, parquet_dir, val_fraction: float, max_chars: int, doc_cap: int = 10_000
) -> list[str]:
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


def tokenizer(
    vocab_size: int = DEFAULT_VOCAB,
    data_dir: str | Path | None = None,
    corpus: str = "shakespeare",
    parquet_dir: str | Path | None = None,
    val_fraction: float = 0.05,
    max_chars: int = 20_000_000,
    quiet: bool = True,
):
    """The corpus's SentencePiece tokenizer, trained on first use and cached under data_dir.

    Retrains only when the cached model's settings (vocab size, training text digest, format)
    differ. Returns a `sentencepiece.SentencePieceProcessor` (bos 2, eos 1, pad 0, unk 3).
    """
    sp, save = load_or_train(
        vocab_size, data_dir, corpus, parquet_dir, val_fraction, max_chars, quiet
    )
    save()
    return sp


def load_or_train(vocab_size, data_dir, corpus, parquet_dir, val_fraction, max_chars, quiet):
    """(tokenizer, save): a newly trained one reaches data_dir only when save() is called.

    `prepare` saves it only after both shards are written, so a failed prepare leaves the
    tokenizer that matches the shards already there.
    """
    import sentencepiece as spm

    choose("corpus", corpus, CORPORA)
    _check_vocab_size(vocab_size)
    path = tokenizer_path(vocab_size, data_dir, corpus_name(corpus, parquet_dir))
    texts = _training_texts(corpus, parquet_dir, val_fraction, max_chars)
    settings = {
        "format": files.FORMAT_VERSION,
        "vocab_size": vocab_size,
        "texts": text_digest(texts),
        "n_chars": sum(map(len, texts)),
        **_TOKENIZER_SETTINGS,
    }
    sidecar = path.with_suffix(".json")
    if path.exists() and sidecar.exists() and files.read_json(sidecar) == settings:
        return spm.SentencePieceProcessor(model_file=str(path)), lambda: None
    t0 = time.perf_counter()
    blob = train_tokenizer(texts, vocab_size)
    if not quiet:
        print(
            f"trained tokenizer {path.name} ({vocab_size} tokens, "
            f"{settings['n_chars']:,} chars) in {time.perf_counter() - t0:.1f}s"
        )

    def save():
        path.parent.mkdir(parents=True, exist_ok=True)
        files.write_atomic(path, blob)
        files.write_json(sidecar, settings)

    return spm.SentencePieceProcessor(model_proto=blob), save
