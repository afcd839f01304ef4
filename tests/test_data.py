"""shared.data: corpus split, tokenizer, shards, resumable loader, eval pass, parquet path.

Everything is prepared into tmp folders with a 512-token vocabulary (~10 s once per module),
so the tests never depend on data/ or the network.
"""

import math
import os

import jax
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from shared import data
from shared.data.__main__ import main as data_main
from shared.data.loader import prefetch_ahead
from shared.errors import BadInput

V = 512


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="module")
def splits(data_dir):
    return data.prepare("shakespeare", V, data_dir, progress=False)


@pytest.fixture(scope="module")
def docs():
    return data.split_shakespeare(data.shakespeare_documents())


def _documents(split: data.Split, sp) -> list[str]:
    """Decode a shard back into its documents (cut at BOS)."""
    tokens = np.asarray(split.tokens)
    starts = np.flatnonzero(tokens == data.BOS_ID)
    ends = [*starts[1:], len(tokens)]
    return [sp.decode(tokens[s + 1 : e].tolist()) for s, e in zip(starts, ends, strict=True)]


def test_split_is_by_document_and_disjoint(docs, splits):
    train = {name for name, _ in docs["train"]}
    val = {name for name, _ in docs["val"]}
    assert val == set(data.VAL_PLAYS) and not train & val
    assert len(train) + len(val) == len(data.shakespeare_documents()) == 38
    assert splits["train"].n_documents == len(train) and splits["val"].n_documents == len(val)
    held_out = splits["val"].n_bytes / (splits["val"].n_bytes + splits["train"].n_bytes)
    assert 0.05 <= held_out <= 0.10
    assert splits["val"].n_bytes == sum(len(t.encode()) for _, t in docs["val"])


def test_tokenizer_round_trips_and_is_cached(data_dir, splits):
    path = data.tokenizer_path(V, data_dir)
    mtime = path.stat().st_mtime_ns
    sp = data.tokenizer(V, data_dir)
    assert path.stat().st_mtime_ns == mtime, "a cached tokenizer must not be retrained"
    assert sp.get_piece_size() == V
    assert (sp.pad_id(), sp.eos_id(), sp.bos_id(), sp.unk_id()) == (0, 1, 2, 3)
    for text in [
        "To be, or not to be: that is the question.\n\n**HAMLET**\n",
        "  two  spaces,\ttabs\n\n\nand naïve ünïcödé — 日本語 ☃ 1234567",
    ]:
        ids = sp.encode(text)
        assert data.UNK_ID not in ids and data.BOS_ID not in ids
        assert sp.decode(ids) == text
    assert data.tokenizer_hash(sp) == splits["train"].meta["tokenizer_hash"]


def test_tokenizer_training_is_deterministic(splits):
    docs = [t for _, t in data.split_shakespeare(data.shakespeare_documents())["train"]]
    import sentencepiece as spm

    again = spm.SentencePieceProcessor(model_proto=data.train_tokenizer(docs, V))
    assert data.tokenizer_hash(again) == splits["train"].meta["tokenizer_hash"]


def test_tokenizer_works_with_tunix_adapter(data_dir, splits):
    adapter = pytest.importorskip("tunix.generate.tokenizer_adapter").TokenizerAdapter
    tok = adapter(data.tokenizer(V, data_dir))
    assert (tok.bos_id(), tok.eos_id(), tok.pad_id()) == (2, 1, 0)
    assert tok.decode(tok.encode("Friends, Romans")) == "Friends, Romans"


def test_shards_decode_back_to_the_text(data_dir, splits, docs):
    sp = data.tokenizer(V, data_dir)
    assert _documents(splits["val"], sp) == [t for _, t in docs["val"]]
    assert _documents(splits["train"], sp)[:2] == [t for _, t in docs["train"][:2]]
    meta = splits["train"].meta
    assert meta["dtype"] == "uint16" and meta["vocab_size"] == V
    assert meta["count"] == splits["train"].tokens.size
    assert meta["count"] == os.path.getsize(splits["train"].path) // 2
    # BOS appears exactly at document starts, nowhere else.
    assert int((splits["train"].tokens == data.BOS_ID).sum()) == splits["train"].n_documents


def test_prepare_is_cached(data_dir, splits):
    before = splits["train"].path.stat().st_mtime_ns
    again = data.prepare("shakespeare", V, data_dir, progress=False)
    assert again["train"].path.stat().st_mtime_ns == before


def test_batches_shape_dtype_and_bos_at_document_starts(splits):
    loader = data.TrainBatches(splits["train"], batch_size=4, seq_len=128, seed=0)
    tokens = np.asarray(splits["train"].tokens)
    doc_starts = np.flatnonzero(tokens == data.BOS_ID)
    # Batches 0..9, and the first ten in this epoch whose windows cross a document start.
    crossing = [
        i
        for i in range(loader.windows_per_epoch // 4)
        if any(((doc_starts >= s) & (doc_starts <= s + 128)).any() for s in loader.starts(i))
    ]
    assert len(crossing) >= 10
    for i in [*range(10), *crossing[:10]]:
        batch = loader.batch(i)
        assert batch.shape == (4, 129) and batch.dtype == np.int32
        for row, start in zip(batch, loader.starts(i), strict=True):
            assert np.array_equal(row, tokens[start : start + 129])
            bos = (start + np.flatnonzero(row == data.BOS_ID)).tolist()
            assert bos == [s for s in doc_starts if start <= s <= start + 128]


def test_batch_is_a_pure_function_of_seed_and_index():
    stream = np.arange(1000, dtype=np.uint16)  # 61 windows of 17 tokens: epochs every ~8 batches
    loader = data.TrainBatches(stream, batch_size=8, seq_len=16, seed=3)
    uninterrupted = list(loader.iterate(0, 30, device=False))
    resumed = list(data.TrainBatches(stream, 8, 16, seed=3).iterate(17, 30, device=False))
    assert all(np.array_equal(a, b) for a, b in zip(uninterrupted[17:], resumed, strict=True))
    assert np.array_equal(data.TrainBatches(stream, 8, 16, seed=3).batch(29), uninterrupted[29])
    other = data.TrainBatches(stream, 8, 16, seed=4).batch(0)
    assert not np.array_equal(other, uninterrupted[0])
    # One epoch visits every window once: its starts are one offset + a permutation of strides.
    W = loader.windows_per_epoch
    starts = np.concatenate([loader.starts(i) for i in range(30)])[:W]
    assert len(set(starts.tolist())) == W and len(set((starts % 16).tolist())) == 1
    assert starts.max() + 17 <= len(stream)


def test_prefetch_lands_batches_sharded_on_the_batch_axis(splits):
    mesh = jax.make_mesh((8,), ("fsdp",))
    sharding = NamedSharding(mesh, PartitionSpec("fsdp", None))
    loader = data.TrainBatches(splits["train"], batch_size=16, seq_len=32, seed=1)
    it = loader.iterate(5, sharding=sharding, prefetch=3)
    for i in range(5, 9):
        batch = next(it)
        assert isinstance(batch, jax.Array) and batch.sharding == sharding
        assert np.array_equal(np.asarray(batch), loader.batch(i))
    it.close()  # stops the prefetch thread


def test_prefetch_passes_errors_to_the_consumer():
    def boom(i):
        if i == 2:
            raise RuntimeError("bad batch")
        return i

    with pytest.raises(RuntimeError, match="bad batch"):
        list(prefetch_ahead(boom, range(5), 2))


def test_eval_covers_every_held_out_token_exactly_once(splits):
    val = splits["val"]
    evals = data.EvalBatches(val, batch_size=3, seq_len=1000)
    targets, total = [], 0
    for batch in evals.iterate(device=False):
        assert batch.tokens.shape == (3, 1001) and batch.mask.shape == (3, 1000)
        targets.append(batch.tokens[:, 1:][batch.mask])
        total += int(batch.mask.sum())
    assert total == evals.n_targets == val.n_tokens - 1
    assert np.array_equal(np.concatenate(targets), np.asarray(val.tokens[1:]))
    assert len(evals) == math.ceil(math.ceil((val.n_tokens - 1) / 1000) / 3)
    on_device = next(iter(evals))
    assert isinstance(on_device.tokens, jax.Array) and on_device.mask.dtype == bool
    assert evals.bits_per_byte(math.log(2)) == pytest.approx(evals.n_targets / val.n_bytes)
    assert data.bits_per_byte(2 * math.log(2), 10, 20) == pytest.approx(1.0)


def _write_parquet(folder, texts, n_files=2, column="text"):
    folder.mkdir(parents=True, exist_ok=True)
    for k, chunk in enumerate(np.array_split(np.array(texts, dtype=object), n_files)):
        pq.write_table(
            pa.table({column: list(chunk), "id": list(range(len(chunk)))}),
            folder / f"shard_{k:05d}.parquet",
        )


def _parquet_docs():
    lines = [t for _, t in data.shakespeare_documents()[:4]]
    text = "\n".join(lines).split("\n\n")
    return ["\n\n".join(text[i : i + 25]) for i in range(0, len(text), 25)]


def test_parquet_corpus_from_a_local_folder(tmp_path):
    texts = _parquet_docs()
    folder = tmp_path / "parquet" / "tiny-web"
    _write_parquet(folder, texts)
    out = data.prepare("parquet", V, tmp_path / "data", folder, val_fraction=0.2, progress=False)
    assert out["train"].path.parent.name == f"tiny-web-sp{V}"
    val_texts = [t for t in texts if data.is_val_text(t, 0.2)]
    train_texts = [t for t in texts if not data.is_val_text(t, 0.2)]
    assert 0 < len(val_texts) < len(texts) / 2
    sp = data.tokenizer(V, tmp_path / "data", "parquet", folder, 0.2)
    assert _documents(out["val"], sp) == val_texts
    assert _documents(out["train"], sp) == train_texts
    assert out["train"].n_bytes == sum(len(t.encode()) for t in train_texts)
    batch = data.TrainBatches(out["train"], 2, 64).batch(0)
    assert batch.shape == (2, 65)


def test_download_writes_shards_and_fails_in_one_line(tmp_path):
    remote = tmp_path / "remote"
    _write_parquet(remote, _parquet_docs()[:20])
    got = data.download_parquet([0, 1], tmp_path / "local", base_url=remote.as_uri())
    assert [p.name for p in got] == ["shard_00000.parquet", "shard_00001.parquet"]
    assert got[0].read_bytes() == (remote / "shard_00000.parquet").read_bytes()
    with pytest.raises(BadInput, match="cannot download .*shard_00007"):
        data.download_parquet([7], tmp_path / "local", base_url=remote.as_uri())
    assert not list((tmp_path / "local").glob("*.tmp"))


def test_bad_inputs_fail_with_one_line(tmp_path, splits, data_dir):
    cases = [
        (lambda: data.prepare("parquet", V, tmp_path, tmp_path / "missing"), "does not exist"),
        (lambda: data.prepare("parquet", V, tmp_path, None), "needs --parquet-dir"),
        (
            lambda: data_main(
                ["prepare", "--parquet-dir", str(tmp_path / "shards"), "--out", str(tmp_path)]
            ),
            "read with --corpus parquet only",
        ),
        (lambda: data.prepare("poems", V, tmp_path), "unknown corpus"),
        (lambda: data.tokenizer(100, tmp_path), "out of range"),
        (lambda: data.tokenizer(70000, tmp_path), "out of range"),
        (lambda: data.check_vocab(32768, 4096), "larger model V|<= 4096"),
        (lambda: data.train_tokenizer(["hello world"] * 3, V), "Vocabulary size too high"),
        (lambda: data.open_split("val", "shakespeare", 999, tmp_path), "no prepared split"),
        (lambda: data.open_split("test", "shakespeare", V, data_dir), "unknown split"),
        (lambda: data.TrainBatches(np.arange(10), 2, 8), "shorter --seq"),
        (lambda: data.TrainBatches(splits["train"], 2, 8).batch(-1), ">= 0"),
        (
            lambda: data_main(["prepare", "--vocab-size", "4096", "--model-vocab", "1024"]),
            "model's vocab is 1024",
        ),
        (lambda: data_main(["download", "--shards", "1-x", "--out", str(tmp_path)]), "--shards"),
    ]
    (tmp_path / "empty").mkdir()
    cases.append((lambda: data.parquet_files(tmp_path / "empty"), "no \\*.parquet"))
    _write_parquet(tmp_path / "notext", ["a b c"] * 4, n_files=1, column="body")
    cases.append(
        (lambda: data.prepare("parquet", V, tmp_path, tmp_path / "notext"), "no 'text' column")
    )
    for call, pattern in cases:
        with pytest.raises(BadInput, match=pattern) as err:
            call()
        assert "\n" not in str(err.value)
    data.check_vocab(4096, 4096)


def test_corrupt_shard_is_named(tmp_path, splits):
    bad = tmp_path / "val.bin"
    bad.write_bytes(splits["val"].path.read_bytes()[:-2])
    (tmp_path / "val.json").write_text(splits["val"].path.with_suffix(".json").read_text())
    with pytest.raises(BadInput, match="val.bin does not hold"):
        data.Split(bad)


def test_failed_prepare_leaves_existing_shards_alone(tmp_path):
    folder = tmp_path / "web"
    _write_parquet(folder, _parquet_docs())
    data.prepare("parquet", V, tmp_path / "d", folder, val_fraction=0.2, progress=False)

    def files():
        return {p: p.read_bytes() for p in (tmp_path / "d").rglob("*") if p.is_file()}

    before = files()
    assert len(before) == 6  # tokenizer model + settings, train/val .bin + .json
    # A different split rule retrains the tokenizer, then finds no held-out document.
    with pytest.raises(BadInput, match="val split is empty"):
        data.prepare("parquet", V, tmp_path / "d", folder, val_fraction=1e-9, progress=False)
    assert files() == before


def test_cli_prepare_prints_what_it_wrote(data_dir, splits, capsys):
    assert data_main(["prepare", "--out", str(data_dir), "--vocab-size", str(V)]) == 0
    printed = capsys.readouterr().out
    assert f"shakespeare-sp{V}/train.bin" in printed and "bytes/token" in printed
