"""Weights and tokenizers: random (dummy) or real, for every family, onto a mesh.

Real weights come from where each family publishes them (the adapter says which): Kaggle Flax
checkpoints for Gemma 2 and 3 (`kagglehub`, Kaggle credentials, the Gemma licence accepted on
Kaggle), Hugging Face safetensors for Gemma 4, Llama 3 and Qwen 3 (`huggingface_hub`, a token
from HF_TOKEN or `huggingface-cli login` where the repository is gated). Credentials are checked
before any download, and a missing one is one actionable line. The step after the download
(`load_checkpoint`) takes a local folder, so tests and pre-fetched checkpoints use it directly.

Tokenizers: dummy weights use the small SentencePiece tokenizer trained on the embedded
Shakespeare (shared.data; its ids fit every vocabulary); real weights use the checkpoint's own
(Gemma's tokenizer.model, a Hugging Face tokenizer.json). The default tunix tokenizer path is on
GCS and never used here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from shared.errors import BadInput, choose
from shared.hardware.sharding import make_mesh
from shared.models.core import TINY_VOCAB, dummy_model, family_of, is_tiny, model_config
from shared.models.family import HUGGINGFACE, KAGGLE

PAD_ID, EOS_ID, BOS_ID = 0, 1, 2  # Gemma's SentencePiece layout; local tokenizers match it
WEIGHTS = ("dummy", "real", KAGGLE, HUGGINGFACE)  # kaggle / huggingface: "real", named


# ---------------------------------------------------------------------------- tokenizers


class IdsOnlyTokenizer:
    """Special ids without a vocabulary: enough for samplers fed token ids (plan mode)."""

    def __init__(self, pad_id: int = PAD_ID, eos_id: int = EOS_ID, bos_id: int = BOS_ID):
        self._ids = (pad_id, eos_id, bos_id)

    def pad_id(self) -> int:
        return self._ids[0]

    def eos_id(self) -> int:
        return self._ids[1]

    def bos_id(self) -> int:
        return self._ids[2]

    def encode(self, text, **kwargs):
        raise BadInput("this sampler has no vocabulary; pass token ids (random_prompts)")

    decode = encode


def _check_tokenizer(tok):
    if tok.pad_id() < 0:
        raise BadInput(
            "the tokenizer has no pad id (tunix needs one); train it with pad_id=0,"
            " eos_id=1, bos_id=2, unk_id=3 like Gemma's"
        )
    return tok


def local_tokenizer(vocab_size: int = TINY_VOCAB, data_dir: str | Path | None = None):
    """The small SentencePiece tokenizer trained on the embedded Shakespeare (shared.data)."""
    from shared import data

    kwargs = {} if data_dir is None else {"data_dir": data_dir}
    return _check_tokenizer(data.tokenizer(vocab_size=vocab_size, **kwargs))


def checkpoint_tokenizer(folder: str | Path):
    """The tokenizer a checkpoint ships: Gemma's tokenizer.model (SentencePiece), else a
    Hugging Face tokenizer.json. Llama 3 has no pad token; tunix needs one, so it pads with
    EOS (the usual choice: padded positions are masked)."""
    folder = Path(folder)
    found = sorted(folder.rglob("tokenizer.model"))
    if found:
        import sentencepiece as spm

        return _check_tokenizer(spm.SentencePieceProcessor(model_file=str(found[0])))
    if not any(folder.rglob("tokenizer.json")):
        raise BadInput(f"no tokenizer.model or tokenizer.json under {folder}")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(next(folder.rglob("tokenizer.json")).parent))
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


# ---------------------------------------------------------------------------- downloads


def check_kaggle_credentials(name: str) -> None:
    """BadInput (one line) unless kagglehub will find credentials. Reads env/files only."""
    from kagglehub import config as kaggle_config
    from kagglesdk.kaggle_env import is_in_kaggle_notebook

    # kagglehub 1.0.2 order: KAGGLE_API_TOKEN (value or file path) or ~/.kaggle/access_token,
    # then KAGGLE_USERNAME + KAGGLE_KEY, then $KAGGLE_CONFIG_DIR or ~/.kaggle/kaggle.json,
    # then Colab secrets; inside a Kaggle notebook attached models need none.
    try:
        found = kaggle_config.get_kaggle_credentials() is not None
    except ValueError as err:  # a malformed kaggle.json
        raise BadInput(f"Kaggle credentials are unreadable: {err}") from None
    if not found and not is_in_kaggle_notebook():
        model_page = family_of(name).checkpoints[name].rsplit("/", 2)[0]
        raise BadInput(
            f"real {name} weights need Kaggle credentials: set KAGGLE_API_TOKEN (or"
            " KAGGLE_USERNAME and KAGGLE_KEY, or put kaggle.json / access_token in ~/.kaggle),"
            f" and accept the licence on https://www.kaggle.com/models/{model_page} first;"
            " or use weights='dummy'"
        )


def hf_token() -> str | None:
    """The Hugging Face token: HF_TOKEN, else the one `huggingface-cli login` saved."""
    from huggingface_hub import get_token

    return os.environ.get("HF_TOKEN") or get_token()


def kaggle_download(name: str) -> Path:
    """Download (or find in the kagglehub cache) the Flax checkpoint; credentials first."""
    check_kaggle_credentials(name)
    import kagglehub

    return Path(kagglehub.model_download(family_of(name).checkpoints[name]))


def hf_download(name: str) -> Path:
    """Download (or find in the Hugging Face cache) the safetensors, config and tokenizer.

    Gated repositories (Llama) without a token, and no network, each end in one line."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import GatedRepoError, LocalEntryNotFoundError

    repo = family_of(name).checkpoints[name]
    try:
        return Path(
            snapshot_download(
                repo, token=hf_token(), allow_patterns=["*.safetensors", "*.json", "tokenizer*"]
            )
        )
    except GatedRepoError:
        raise BadInput(
            f"{repo} is gated: accept its licence on https://huggingface.co/{repo} "
            "and set HF_TOKEN (or run `huggingface-cli login`); or use "
            "weights='dummy'"
        ) from None
    except LocalEntryNotFoundError:
        raise BadInput(
            f"cannot reach huggingface.co to download {repo} and it is not in the "
            "local cache: connect, or set HF_HUB_OFFLINE=0 / pre-download it; or use "
            "weights='dummy'"
        ) from None


DOWNLOADS: dict[str, Callable[[str], Path]] = {KAGGLE: kaggle_download, HUGGINGFACE: hf_download}


# ---------------------------------------------------------------------------- load


def load_checkpoint(
    folder: str | Path,
    name: str,
    *,
    mesh=None,
    is_sampling: bool = False,
    vocab_size: int | None = None,
):
    """Real weights from a downloaded checkpoint folder, through the family's tunix loader,
    each array put on `mesh` in the model's sharding."""
    family = family_of(name)
    mesh = mesh if mesh is not None else make_mesh()
    cfg = model_config(name, vocab_size=vocab_size, is_sampling=is_sampling)
    return family.load_checkpoint(Path(folder), cfg, mesh)


def load(
    name: str,
    weights: str = "dummy",
    *,
    mesh=None,
    seed: int = 0,
    vocab_size: int | None = None,
    is_sampling: bool = False,
    data_dir: str | Path | None = None,
    download: Callable[[str], Path] | None = None,
):
    """(model, tokenizer) on `mesh`.

    weights="dummy": random weights of the real architecture and the local tokenizer.
    weights="real" (or the family's source by name, "kaggle" / "huggingface"): the family's
    download, then its checkpoint's own tokenizer; missing credentials raise BadInput, never a
    silent fallback to random weights. `download(name) -> folder` replaces the download (tests,
    pre-fetched checkpoints).
    """
    choose("weights", weights, WEIGHTS)
    family = family_of(name)
    if weights != "dummy":
        if weights not in ("real", family.weights_source):
            raise BadInput(
                f"{name} weights come from {family.weights_source}: use "
                f"weights='real' (or '{family.weights_source}')"
            )
        if download is None and name not in family.checkpoints:
            raise BadInput(
                f"{name} has no published weights (a test-sized architecture); use weights='dummy'"
            )
        folder = (download or DOWNLOADS[family.weights_source])(name)
        model = load_checkpoint(
            folder, name, mesh=mesh, is_sampling=is_sampling, vocab_size=vocab_size
        )
        return model, checkpoint_tokenizer(folder)
    tok = local_tokenizer(vocab_size or TINY_VOCAB, data_dir)
    if is_tiny(name):
        vocab_size = vocab_size or tok.get_piece_size()
    model = dummy_model(name, mesh=mesh, seed=seed, vocab_size=vocab_size, is_sampling=is_sampling)
    return model, tok
