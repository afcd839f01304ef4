"""The source a verdict runs, for the plan cache's keys: the modules of shared/ that a root module
imports, directly or through each other, found by reading their import statements (function
bodies included). A verdict's key (shared.plan.verdict.Request.key) holds everything
shared.plan.verdict runs; one executable's compile (cache_entries.executable_key) only what
shared.plan.compiler.compiled runs, which turns a lowered program into the numbers cached for it.

Why two: a verdict is arithmetic over its executables' compiles (resident bytes, the worst
transient, the roofline), so any change to the verdict's code must recompute it; the compile
of a program depends on the program XLA receives, the options and the versions (the key holds
them) and on how compiled.py reads the compiler's answer. Until 2026-12-03 the executables
were keyed on the verdict's sources too, so a change to how compiles are scheduled
(shared.plan.compiler.host_memory) or to a table helper the verdict imports (shared.report) compiled
every cached program again; now such a change re-lowers each verdict's programs (seconds) and
takes their compiles from the cache.

Why not all of shared/: a change to a module no verdict runs must keep every cached verdict.
Until 2026-11-27 the key hashed all of shared/, so each change to the search compiled again
every verdict an atlas run had cached; from then until 2026-11-29 it hashed all of shared/ but
a hand-kept list of the modules above the verdict (the searches, the atlas, the views), so a
change to a notebook's helpers (shared/findings, the settings, the plots) or to a benchmark's
(shared/report/results.py, 2026-11-29) still did: an atlas run started before it compiled
rollouts of qwen3-8b on a tpu7x-8 at 1449 again, a verdict the cache held. What the reading
finds is what a verdict can run; tests/test_plan.py checks it against the shared modules a
verdict computed in a fresh interpreter loads.
"""

from __future__ import annotations

import ast
import functools
import hashlib
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2]
ROOT_MODULE = "shared.plan.verdict"  # the verdict: Request, plan_point, the workloads it builds
COMPILE_MODULE = "shared.plan.compiler.compiled"  # one executable's compile and what is read off it


def module_file(name: str) -> Path | None:
    """The file of module or package `name` inside shared/, or None (another package's, or an
    attribute a `from` import names)."""
    parts = name.split(".")
    if parts[0] != SHARED.name:
        return None
    path = SHARED.parent.joinpath(*parts)
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported_names(path: Path) -> set[str]:
    """Every module name the file's import statements can load, relative ones resolved: for
    `from a import b`, both `a` and `a.b` (b may be a submodule or an attribute)."""
    package = path.relative_to(SHARED.parent).with_suffix("").parts
    package = package[:-1]  # a module's package, or for __init__ the package itself
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def verdict_files() -> set[Path]:
    """The files of shared/ a verdict can run (files_run_by ROOT_MODULE)."""
    return files_run_by(ROOT_MODULE)


def compile_files() -> set[Path]:
    """The files of shared/ one executable's compile can run (files_run_by COMPILE_MODULE)."""
    return files_run_by(COMPILE_MODULE)


def files_run_by(root: str) -> set[Path]:
    """The files of shared/ module `root` can run: its imports followed through shared/, each
    module's parent packages included (importing a.b.c runs a and a.b first)."""
    found: set[Path] = set()
    pending = [root]
    while pending:
        parts = pending.pop().split(".")
        for depth in range(1, len(parts) + 1):
            path = module_file(".".join(parts[:depth]))
            if path is not None and path not in found:
                found.add(path)
                pending.extend(imported_names(path))
    return found


@functools.cache
def verdict_sources_digest() -> str:
    """A digest of the source a verdict runs (verdict_files), read once a process."""
    return _digest(verdict_files())


@functools.cache
def compile_sources_digest() -> str:
    """A digest of the source one executable's compile runs (compile_files), read once a
    process."""
    return _digest(compile_files())


def _digest(files: set[Path]) -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(files))).hexdigest()
