"""`python -m shared.data prepare|download`: prepare tokenizer and shards, or fetch parquet.

`main` is importable (tests, data/prepare.py) from `shared.data.__main__`; the package's
docstring is the command line's description.
"""

import time

from shared import data
from shared.data.bpe import DEFAULT_VOCAB, check_vocab, tokenizer_path
from shared.data.corpus import CORPORA, FINEWEB_URL, corpus_name, download_parquet
from shared.data.files import DATA_DIR
from shared.data.shards import prepare
from shared.errors import BadInput, choose, run_cli


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

    parser = argparse.ArgumentParser(
        prog="python -m shared.data",
        description=data.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="train the tokenizer and write train/val shards")
    prep.add_argument("--corpus", default="shakespeare", help=" | ".join(CORPORA))
    prep.add_argument("--parquet-dir", help="folder of *.parquet files with a 'text' column")
    prep.add_argument(
        "--download",
        metavar="SHARDS",
        help="first fetch these FineWeb-Edu shards into --parquet-dir, e.g. 0-3",
    )
    prep.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB)
    prep.add_argument("--out", default=str(DATA_DIR), help="data folder (default: data/)")
    prep.add_argument("--val-fraction", type=float, default=0.05, help="parquet only")
    prep.add_argument(
        "--tokenizer-chars",
        type=int,
        default=20_000_000,
        help="parquet only: characters of train text the tokenizer learns from",
    )
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
    splits = prepare(
        args.corpus,
        args.vocab_size,
        args.out,
        args.parquet_dir,
        args.val_fraction,
        args.tokenizer_chars,
        args.force,
    )
    name = corpus_name(args.corpus, args.parquet_dir)
    print(
        f"tokenizer  {tokenizer_path(args.vocab_size, args.out, name)}  "
        f"({splits['train'].vocab_size} tokens, hash {splits['train'].meta['tokenizer_hash']})"
    )
    for split in splits.values():
        m = split.meta
        print(
            f"{m['split']:<5}      {split.path}  {m['count']:,} tokens, {m['documents']:,} "
            f"documents, {m['bytes']:,} bytes ({m['bytes'] / m['count']:.2f} bytes/token)"
        )
    print(f"done in {time.perf_counter() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    run_cli(main)
