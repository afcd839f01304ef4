"""Notebook plumbing: pairing checks and headless execution, jupytext -> papermill.

One code path serves `make check-sync`, `make execute` and the smoke tests, so what CI runs is
what a user runs. papermill cannot read a percent-format `.py`, so each source is converted to
a temporary `.ipynb` with a kernelspec first (without one papermill fails "No language found").
A run writes to a temporary name: a success replaces `runs/NN_name.ipynb`, a failure keeps its
partial notebook, traceback included, as `runs/NN_name.failed.ipynb` beside the last good run
and the exit status is 1.

    python -m tools.notebooks check notebooks/*.py
    python -m tools.notebooks colab notebooks/*.py   # write tools/colab_cell.py into each
    python -m tools.notebooks execute [--select 06] [--out runs] -- -p MODE plan -p TARGET v5e-8
"""

import argparse
import os
import sys
from pathlib import Path
from unittest import mock

import yaml

from shared.errors import BadInput, run_cli
from shared.paths import ROOT
from tools.colab_cell import COLAB_CELL

NOTEBOOK_DIR = ROOT / "notebooks"
DEFAULT_KERNEL = "tpu-budget-lab"
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"  # ipykernel's figures-in-cells backend
# A notebook is a story a reader scrolls: a question, prose that answers it, short computations.
MAX_LINES = 350
MAX_CODE_PER_PROSE = 2.5  # code lines (not comments) per line of markdown


def notebook_sources(select: str | None = None) -> list[Path]:
    """The percent-format sources `notebooks/NN_name.py`, those starting with `select` if given."""
    paths = sorted(NOTEBOOK_DIR.glob(f"{select or ''}*.py"))
    paths = [p for p in paths if p.name[:2].isdigit()]
    if not paths:
        valid = ", ".join(p.stem for p in sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.py")))
        raise BadInput(f"no notebook matches NB={select!r}; valid: {valid}")
    return paths


def pairing_problems(source: Path) -> list[str]:
    """Why `source` and its `.ipynb` twin are out of step; empty when they agree."""
    import jupytext
    from jupytext.compare import compare_notebooks

    paired = source.with_suffix(".ipynb")
    if not paired.exists():
        return [f"{paired.name} is missing: run `make sync`"]
    problems = []
    twin = jupytext.read(paired)
    for i, cell in enumerate(twin.cells):
        if cell.get("outputs") or cell.get("execution_count") is not None:
            problems.append(f"{paired.name} cell {i} holds outputs: clear them (pre-commit does)")
    try:
        compare_notebooks(
            jupytext.read(source),
            twin,
            fmt="ipynb",
            allow_expected_differences=True,
            compare_outputs=False,
        )
    except Exception as err:  # jupytext raises NotebookDifference with the first difference
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        problems.append(f"{source.name} and {paired.name} differ ({first_line}): run `make sync`")
    return problems


def _install_cell(source: Path) -> str | None:
    """The source of the notebook's first code cell (the Colab/Kaggle install cell)."""
    import jupytext

    code = [c for c in jupytext.read(source).cells if c.cell_type == "code"]
    return code[0].source if code else None


def colab_problems(source: Path) -> list[str]:
    """Why the notebook's first code cell is not tools/colab_cell.py's template; empty if it is."""
    if _install_cell(source) == COLAB_CELL:
        return []
    return [f"{source.name}: its first code cell is not the Colab template: run `make sync`"]


def write_colab_cell(source: Path) -> bool:
    """Put the template into the notebook's first code cell (the .py source; `jupytext --sync`
    then updates the .ipynb). True when the file changed."""
    old = _install_cell(source)
    if old is None:
        raise BadInput(f"{source.name} has no code cell for the Colab template")
    if old == COLAB_CELL:
        return False
    text = source.read_text()
    if text.count(old) != 1:
        raise BadInput(f"{source.name}: cannot find its first code cell's text once; edit by hand")
    source.write_text(text.replace(old, COLAB_CELL))
    return True


def story_shape(source: Path) -> dict:
    """Lines of the source, code lines (non-blank, not comments) and prose lines (non-blank
    markdown) of its cells."""
    import jupytext

    cells = jupytext.read(source).cells

    def lines(kind):
        return [ln.strip() for c in cells if c.cell_type == kind for ln in c.source.splitlines()]

    code = [ln for ln in lines("code") if ln and not ln.startswith("#")]
    prose = [ln for ln in lines("markdown") if ln]
    return {"lines": len(source.read_text().splitlines()), "code": len(code), "prose": len(prose)}


def story_problems(source: Path) -> list[str]:
    """Why `source` reads as code with captions rather than a story; empty when it does not."""
    shape = story_shape(source)
    problems = []
    if shape["lines"] > MAX_LINES:
        problems.append(
            f"{source.name} has {shape['lines']} lines, over {MAX_LINES}: move helpers to shared/"
        )
    if shape["code"] > MAX_CODE_PER_PROSE * shape["prose"]:
        problems.append(
            f"{source.name} has {shape['code']} code lines for {shape['prose']} of "
            f"prose, over {MAX_CODE_PER_PROSE} per line: say more, or move code to "
            "shared/"
        )
    return problems


def parse_parameters(tokens: list[str]) -> dict:
    """papermill-style `-p NAME VALUE` pairs, values typed like papermill's CLI does.

    Numbers become int/float, True/False/None their Python values, `[..]`/`{..}` YAML, the rest
    stays a string: `-p BATCH_SIZES [1,2,4] -p TARGET v5e-8 -p LR 3e-4`.
    """
    params, rest = {}, list(tokens)
    while rest:
        flag = rest.pop(0)
        if flag not in ("-p", "--parameters") or len(rest) < 2:
            raise BadInput(f"parameters must be given as '-p NAME VALUE' pairs, got {tokens!r}")
        name, value = rest.pop(0), rest.pop(0)
        params[name] = _typed(value)
    return params


def _typed(value: str):
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    if value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[value]
    if value[:1] in "[{":
        return yaml.safe_load(value)
    return value


def run_paths(source: Path, out_dir: Path) -> tuple[Path, Path]:
    """Where a run of `source` lands in `out_dir`: the last successful run, the last failed one."""
    return out_dir / f"{source.stem}.ipynb", out_dir / f"{source.stem}.failed.ipynb"


def execute(source: Path, parameters: dict, out_dir: Path, kernel: str = DEFAULT_KERNEL) -> Path:
    """Run one notebook headless; return the executed copy's path.

    papermill writes to a temporary name as it goes. Only a success replaces `NN_name.ipynb`
    (and drops an older `NN_name.failed.ipynb`); a failure, Ctrl-C included, keeps the partial
    notebook as `NN_name.failed.ipynb` and re-raises, so a failed run never clobbers a good one.
    """
    import jupytext
    import papermill

    out_dir.mkdir(parents=True, exist_ok=True)
    notebook = jupytext.read(source)
    notebook.metadata["kernelspec"] = {"name": kernel, "display_name": kernel, "language": "python"}
    staged = out_dir / f".{source.stem}.input.ipynb"
    running = out_dir / f".{source.stem}.running.ipynb"
    output, failed = run_paths(source, out_dir)
    jupytext.write(notebook, staged)
    # The kernel inherits this environment; MPLBACKEND=Agg (common on CI and headless hosts)
    # would make plt.show() a no-op and leave the executed notebook without its figures.
    try:
        with mock.patch.dict(os.environ, {"MPLBACKEND": INLINE_BACKEND}):
            papermill.execute_notebook(
                str(staged),
                str(running),
                parameters=parameters,
                kernel_name=kernel,
                cwd=str(ROOT),
                progress_bar=False,
                log_output=True,
            )
    except BaseException:
        if running.exists():
            running.replace(failed)
        else:  # it failed before writing anything: an older failed copy would mislead
            failed.unlink(missing_ok=True)
        raise
    finally:
        staged.unlink()
    running.replace(output)
    failed.unlink(missing_ok=True)
    return output


def _shown(path: Path) -> Path:
    """`path` relative to the project root when it lies inside it, for messages."""
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.notebooks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser(
        "check", help="fail when a .py and its .ipynb disagree, or a notebook outgrows a story"
    )
    check.add_argument("sources", nargs="*", type=Path)
    colab = sub.add_parser("colab", help="write the Colab template into each notebook")
    colab.add_argument("sources", nargs="*", type=Path)
    run = sub.add_parser("execute", help="execute notebooks headless into --out")
    run.add_argument("--select", help="notebook prefix, e.g. 06")
    run.add_argument("--out", type=Path, default=ROOT / "runs")
    run.add_argument("--kernel", default=DEFAULT_KERNEL)
    run.add_argument("parameters", nargs=argparse.REMAINDER, help="-- -p NAME VALUE ...")
    args = parser.parse_args(argv)

    if args.command == "check":
        problems = [
            p
            for source in (args.sources or notebook_sources())
            for p in pairing_problems(source) + story_problems(source) + colab_problems(source)
        ]
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0

    if args.command == "colab":
        for source in args.sources or notebook_sources():
            if write_colab_cell(source):
                print(f"wrote the Colab template into {source.name}", file=sys.stderr)
        return 0

    tokens = args.parameters[1:] if args.parameters[:1] == ["--"] else args.parameters
    parameters = parse_parameters(tokens)
    failed = []
    for source in notebook_sources(args.select):
        print(f"== {source.stem} {parameters or ''}", file=sys.stderr, flush=True)
        try:
            output = execute(source, parameters, args.out, args.kernel)
            print(f"   wrote {_shown(output)}", file=sys.stderr)
        except Exception as err:  # papermill's error carries the cell's traceback
            failed.append(source.stem)
            last_line = str(err).strip().splitlines()[-1] if str(err).strip() else ""
            partial = run_paths(source, args.out)[1]
            kept = (
                f"; partial notebook, traceback included: {_shown(partial)}"
                if partial.exists()
                else ""
            )
            print(
                f"   FAILED {source.stem}: {type(err).__name__}: {last_line}{kept}", file=sys.stderr
            )
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    run_cli(main)
