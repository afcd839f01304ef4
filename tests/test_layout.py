"""The project's layout, read from its source with ast: what the tests may import, and which way
the library's imports go (DESIGN.md: benchmarks/ are thin command lines over shared/; no cycles).
"""

import ast
import re
from pathlib import Path

from shared.paths import ROOT

TESTS = ROOT / "tests"
SHARED = ROOT / "shared"
# calls that load a module or a file by name, or put a folder on the import path
LOADERS = {
    "__import__",
    "import_module",
    "spec_from_file_location",
    "SourceFileLoader",
    "load_source",
    "run_path",
    "run_module",
}
PATH_EDITS = {"insert", "append", "extend"}  # sys.path.insert(0, ...)
BENCHMARKS = re.compile(r"(^|[/\\.])benchmarks($|[/\\.])")
BENCH_SCRIPT = re.compile(r"(^|[/\\])bench_\w+(\.py)?$")


def _strings(node: ast.AST) -> list[str]:
    return [
        n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]


def _names_benchmarks(node: ast.AST) -> bool:
    """A string in `node` that names benchmarks/ (a folder or a dotted module name) or one of
    its scripts (bench_*.py)."""
    return any(BENCHMARKS.search(s) or BENCH_SCRIPT.search(s) for s in _strings(node))


def _is_sys_path(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    )


def benchmark_imports(source: str) -> list[str]:
    """Where a test's source imports benchmarks/: an import statement (at any depth), a loader
    call (importlib, runpy, __import__) naming benchmarks/ or a bench_*.py, or sys.path edited
    with such a string. Reading a benchmark's results (benchmarks/results/*.json) or running
    its command line is not importing it."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] if not node.level else []
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            loads = called in LOADERS
            edits_path = called in PATH_EDITS and _is_sys_path(getattr(func, "value", None))
            if (loads or edits_path) and _names_benchmarks(node):
                found.append(f"line {node.lineno}: {called}(...)")
            continue
        elif isinstance(node, ast.Assign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_is_sys_path(t) for t in targets) and _names_benchmarks(node.value):
                found.append(f"line {node.lineno}: sys.path set")
            continue
        else:
            continue
        found += [
            f"line {node.lineno}: import {n}" for n in names if n.split(".")[0] == "benchmarks"
        ]
    return found


def test_the_check_catches_each_way_of_importing_a_benchmark():
    bad = [
        "from benchmarks import bench_suite",
        "import benchmarks.bench_suite as b",
        "from benchmarks.bench_finetune import parse_points",
        "def f():\n    from benchmarks import bench_x",
        "import importlib\nimportlib.import_module('benchmarks.bench_suite')",
        "import importlib.util as u\nu.spec_from_file_location('b', ROOT / 'benchmarks' / 'b.py')",
        "import sys\nsys.path.insert(0, str(ROOT / 'benchmarks'))",
        "import sys\nsys.path.append('benchmarks')",
        "import sys\nsys.path += ['benchmarks']",
        "import runpy\nrunpy.run_path('benchmarks/bench_suite.py')",
        "import runpy\nrunpy.run_path(str(FOLDER / 'bench_suite.py'))",
    ]
    for source in bad:
        assert benchmark_imports(source), source
    fine = [
        "from shared.report import pytest_output",
        "json.loads((ROOT / 'benchmarks/results/finetune_h100.json').read_text())",
        "RESULTS = ROOT / 'benchmarks' / 'results'",
        "subprocess.run([sys.executable, 'benchmarks/bench_suite.py', '--help'])",
        "importlib.import_module('shared.plan.atlas')",
        "from . import benchmarks",
    ]
    for source in fine:
        assert not benchmark_imports(source), source


def test_tests_import_only_shared_tools_and_notebooks_not_benchmarks():
    """What a test exercises lives in shared/ (or tools/, notebooks/): a benchmark script is a
    thin command line over it, so no test imports one or loads it by path."""
    found = {
        path.name: hits
        for path in sorted(TESTS.rglob("*.py"))
        if (hits := benchmark_imports(path.read_text()))
    }
    assert not found, f"tests importing benchmarks/ (move the logic into shared/): {found}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_level(body: list[ast.stmt]):
    """The import statements a module runs when it is imported: its top level, inside if / try /
    with blocks, but not under `if TYPE_CHECKING:` nor in any function or class body."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If):
            test = node.test
            if getattr(test, "id", getattr(test, "attr", None)) != "TYPE_CHECKING":
                yield from _module_level(node.body)
            yield from _module_level(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _module_level(block)
        elif isinstance(node, ast.With):
            yield from _module_level(node.body)


def import_graph(folder: Path = SHARED) -> dict[str, set[str]]:
    """Each module of the package in `folder` -> the package's modules its module-level imports
    name: `from a import b` names the module a.b where b is one, else a (the package)."""
    files = {module_name(p): p for p in sorted(folder.rglob("*.py"))}
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in _module_level(ast.parse(path.read_text(), filename=str(path)).body):
            if isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names)
                continue
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                edges.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in files else base)
        graph[name] = {e for e in edges if e in files and e != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (each holds a cycle),
    found by Tarjan's algorithm without recursion."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_the_cycle_check_finds_a_circle_and_passes_a_chain():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a", "c"}}) == []


def test_no_module_of_shared_imports_in_a_circle():
    """DESIGN.md: no cycles. A module of shared/ (shared/plan above all: its compiler, search,
    atlas and workloads import each other most) never imports, at module level, a module that
    imports it back; an import inside a function (the lazy ones that keep the lookup quick) is
    not an edge."""
    graph = import_graph()
    assert "shared.plan.verdict" in graph and sum(map(len, graph.values())) > len(graph)
    assert not cycles(graph), cycles(graph)
