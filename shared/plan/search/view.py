"""A batch search in words and rows: its one-line answer (`describe`) and the evidence behind
it (`probe_rows`), as the command line, the notebooks, the atlas and the benchmarks show it;
the search itself is shared.plan.search.max_batch (docs/search.md)."""

from shared.hardware.sharding import mesh_name
from shared.plan.atlas.lookup import mesh_answer_text
from shared.plan.search.max_batch import MAX_EXACT
from shared.plan.search.words import failed_batches, listed

PROBE_COLUMNS = (
    "batch",
    "fast",
    "fits",
    "bytes_per_device",
    "worst",
    "refused",
    "compiler_failed",
    "skipped",
    "cached",
)


def probe_rows(search: dict) -> list[dict]:
    """One row per verdict a search compiled (or read from the cache): the evidence behind its
    largest batch, as benchmarks and notebooks record it. `refused` says whether the compiler
    refused the program for lack of HBM, `compiler_failed` whether it failed inside itself
    (their messages stay in the verdict)."""
    return [
        {
            **{key: p.get(key) for key in PROBE_COLUMNS},
            "refused": bool(p.get("refused")),
            "compiler_failed": bool(p.get("compiler_errors")),
            "compile_s": round(p["compile_s"], 1),
        }
        for p in search["probes"]
    ]


def describe(search: dict) -> str:
    """One line: the answer, the evidence, and what limited it (where the compiler failed on a
    batch, which these versions cannot run whatever its bytes: _compiler_failures)."""
    return _answer(search) + _compiler_failures(search)


def _compiler_failures(search: dict) -> str:
    errors = search.get("compiler_errors") or []
    if not errors:
        return ""
    return (
        f"; the compiler fails at {failed_batches(errors)} (not for lack of HBM: "
        f"{errors[0]['error']}), so the search went on below it; a newer libtpu may compile it"
    )


def _answer(search: dict) -> str:
    largest, fail = search["max_batch"], search["first_not_fitting"]
    where = f"{search['workload']} {search['model']} on {search['target']}"
    answers = search.get("mesh_answers", {})
    if answers and largest == 0:
        where += f" on any mesh its weights divide ({', '.join(answers)})"
    elif answers:
        mesh = mesh_name(search["mesh_shape"])
        others = [
            f"{name} fits {mesh_answer_text(n)}" for name, n in answers.items() if name != mesh
        ]
        where += f" (mesh {mesh}; {', '.join(others)})" if others else f" (mesh {mesh})"
    if largest == 0:
        why = "the compiler's verdict" if search["compiles"] else "arithmetic, before any compile"
        units = search.get("units") or {}
        if len(set(units.values())) > 1:  # each mesh stepped by its own least batch
            tried = ", ".join(f"{unit} on {mesh}" for mesh, unit in units.items())
            return f"not even one unit fits for {where}: batch {tried} ({why})"
        return f"not even batch {search['multiple_of']} fits for {where} ({why})"
    if search["at_least"] and largest >= search["ceiling"]:
        return (
            f"at least {largest} fits for {where}: the search stops at its ceiling of "
            f"{search['ceiling']} without a failing batch"
        )
    if search["at_least"]:
        return (
            f"at least {largest} fits for {where}: the search stopped after {MAX_EXACT} exact "
            "compiles, every one of which fit, so a larger batch may fit too"
        )
    if fail is None:  # the compiler failed above it, and nothing between failed for bytes
        return f"largest batch that fits for {where}: {largest}"
    failed = [fail, *filter(None, [search.get("checked_above"), search.get("checked_aligned")])]
    fails = f"batches {listed(failed)} do not" if len(failed) > 1 else f"batch {fail} does not"
    text = f"largest batch that fits for {where}: {largest} ({fails})"
    if dips := search.get("dips"):
        text += (
            f"; {' and '.join(map(str, dips))} below it did not fit either: the compiler's "
            "bytes are not monotone in the batch"
        )
    if not search["converged"]:
        text += (
            f"; the search stopped after {MAX_EXACT} exact compiles with a gap, so a batch "
            f"between {largest} and {fail} may also fit"
        )
    return text
