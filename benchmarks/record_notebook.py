"""Record a notebook's answer: run it headless and keep every table it wrote, as one JSON file.

The numbers a notebook's "What we found" cell quotes come from here. The notebook runs exactly as
`make execute` runs it (tools.notebooks: jupytext -> papermill), into a fresh results folder;
this script gathers the tables it saved there (RESULTS_DIR/*.json, the raw rows behind every
table it showed) with the command, the parameters, the versions, the machine and the date. The
executed notebook is kept in runs/record/ to read the run behind the numbers.

    # 04: the local ablation arms (CPU), then the 130m train step compiled for v6e-1 / v5e-8
    python benchmarks/record_notebook.py 04 --out benchmarks/results/04_pretrain_cpu.json \\
        -- -p KEY_FIGURES True
    python benchmarks/record_notebook.py 04 --out benchmarks/results/04_pretrain_plan.json \\
        -- -p MODE plan -p KEY_FIGURES True
    # 05: the sweep on its embedded defaults (prices the real sweep with 04's plan file)
    python benchmarks/record_notebook.py 05 --out benchmarks/results/05_sweep_cpu.json \\
        -- -p KEY_FIGURES True
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from shared.errors import BadInput, run_cli
from shared.paths import ROOT
from shared.report import results as results_file

sys.path.insert(0, str(ROOT))  # tools/ is not part of the installed package
from tools.notebooks import execute, notebook_sources, parse_parameters  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("select", help="the notebook's number, e.g. 04")
    p.add_argument("--out", type=Path, required=True, help="JSON file to write")
    p.add_argument(
        "--results",
        type=Path,
        help="the notebook's RESULTS_DIR (default: a fresh "
        "temporary one); a sweep run again there reuses its finished trials",
    )
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)  # after --: -p NAME VALUE pairs
    args = p.parse_args(argv[:split])
    sources = notebook_sources(args.select)
    if len(sources) != 1:
        raise BadInput(f"{args.select!r} names {len(sources)} notebooks; give its number, e.g. 04")
    parameters = parse_parameters(argv[split + 1 :])
    with tempfile.TemporaryDirectory() as folder:
        results = args.results or Path(folder) / "results"
        start = time.perf_counter()
        execute(sources[0], {**parameters, "RESULTS_DIR": str(results)}, ROOT / "runs" / "record")
        wall_s = time.perf_counter() - start
        tables = {p.stem: json.loads(p.read_text()) for p in sorted(results.glob("*.json"))}
    record = {
        **results_file.header("benchmarks/record_notebook.py", argv),
        "notebook": sources[0].stem,
        "parameters": parameters,
        "wall_s": round(wall_s, 1),
        "tables": tables,
    }
    results_file.write(args.out, record)
    print(f"{sources[0].stem}: {len(tables)} tables in {wall_s:.0f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    run_cli(main)
