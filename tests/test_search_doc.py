"""docs/search.md, the batch search on one page: its figure redraws from the committed search,
every number it quotes about that search is the committed file's, and its sections name the
modules that do each part. Reads JSON and draws with Agg: no compile, no jax."""

import re
from pathlib import Path

import pytest

from shared.paths import ROOT
from shared.plan.search import figure

PAGE = ROOT / "docs" / "search.md"
SEARCH_PACKAGE = ROOT / "shared" / "plan" / "search"
GIB = 2**30


@pytest.fixture(scope="module")
def page() -> str:
    return PAGE.read_text()


@pytest.fixture(scope="module")
def prose(page) -> str:
    """The page with its line breaks as spaces: phrases wrap anywhere."""
    return " ".join(page.split())


@pytest.fixture(scope="module")
def search() -> dict:
    return figure.committed_search()


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def _one(pattern: str, page: str) -> str:
    found = re.findall(pattern, page)
    assert len(found) == 1, f"{pattern!r} found {len(found)} times in docs/search.md"
    return found[0]


def test_figure_redraws_from_the_committed_search(tmp_path, search):
    import matplotlib

    matplotlib.use("Agg")
    out = figure.write(tmp_path / "search.png", search)
    assert out.stat().st_size > 10_000
    assert figure.main(["--out", str(tmp_path / "again.png")]) == 0
    assert (tmp_path / "again.png").exists()
    assert (ROOT / figure.OUT).exists(), "the committed PNG the page shows"


def test_the_page_shows_the_figure_and_names_its_source(prose, search):
    assert f"]({Path(figure.OUT).relative_to('docs')})" in prose
    entry = " / ".join(f"`{key}`" for key in figure.COMMITTED[1])
    assert f"`{search['source']}` committed (entry {entry}," in prose


def test_the_answer_the_first_failure_the_compiles_and_the_hbm(prose, search):
    assert (
        _number(_one(r"largest batch that fits is \*\*([\d,]+)\*\*", prose)) == search["max_batch"]
    )
    first_fail = _one(r"first batch that does not fit is \*\*([\d,]+)\*\*", prose)
    assert _number(first_fail) == search["first_not_fitting"]
    assert _number(_one(r"\*\*(\d+) compiles\*\*", prose)) == search["compiles"]
    fast = sum(p["fast"] for p in search["probes"])
    exact = len(search["probes"]) - fast
    words = {2: "two", 3: "three"}
    assert f"({words[fast]} fast, {words[exact]} exact)" in prose
    assert f"and {search['search_wall_s']:.0f} s" in prose
    hbm = _one(
        r"HBM the compiler allows a v5e chip, \*\*([\d,]+) bytes\*\* \(([\d.]+) GiB\)", prose
    )
    assert _number(hbm[0]) == search["hbm_bytes"]
    assert float(hbm[1]) == round(search["hbm_bytes"] / GIB, 2)
    assert search["summary"] in prose  # view.describe's line, quoted whole


def test_the_table_of_compiles_is_the_files(page, search):
    rows = re.findall(
        r"^\| (\d+) \| (\w+) \| (\d+) \| (fast|exact) \| ([\d,]+) \| (yes|no) \| ([\d.]+) \|$",
        page,
        re.M,
    )
    assert len(rows) == len(search["probes"])
    checks = figure.checks(search)
    for (i, step, batch, how, used, fits, seconds), p in zip(rows, search["probes"], strict=True):
        assert int(i) == search["probes"].index(p) + 1
        assert int(batch) == p["batch"]
        assert (how == "fast") == p["fast"]
        assert _number(used) == p["bytes_per_device"]
        assert (fits == "yes") == p["fits"]
        assert float(seconds) == p["compile_s"]
        expected = "locate" if p["fast"] else "check" if p["batch"] in checks else "confirm"
        assert step == expected


def test_every_byte_count_quoted_is_the_files(page, search):
    known = {search["hbm_bytes"], *(p["bytes_per_device"] for p in search["probes"])}
    quoted = {_number(m) for m in re.findall(r"\b\d{1,3}(?:,\d{3}){2,}\b", page)}
    assert quoted <= known, sorted(quoted - known)
    assert known <= quoted  # every point of the example is on the page


def test_the_lines_and_margins_quoted_follow_from_the_file(prose, search):
    hbm = search["hbm_bytes"]
    exact = {p["batch"]: p for p in figure.exact_points(search)}
    low, far = figure.located_points(search)[:2]
    assert f"batch {low['batch']} was located at" in prose
    assert f"crossed the HBM at {far['batch']}, located at" in prose
    # step 1: the located line's slope and where it crosses the HBM
    slope = (far["bytes_per_device"] - low["bytes_per_device"]) / (far["batch"] - low["batch"])
    assert f"rises {slope / 1e6:.1f} MB a row" in prose
    at = figure.crossing(low, far, hbm)
    assert f"crosses the HBM at {at:.1f}, so the candidate is {int(at)}" in prose
    # step 2: the first exact compile's margin, the fast line's there, the second aim
    first = exact[int(at)]
    assert f"{int(at)} compiled exactly at {first['bytes_per_device']:,} bytes" in prose
    assert f"{(first['bytes_per_device'] - hbm) / 1e6:.1f} MB over the HBM" in prose
    on_line = far["bytes_per_device"] + slope * (int(at) - far["batch"])
    assert f"the fast line had it {(hbm - on_line) / 1e6:.1f} MB under" in prose
    below, failed = figure.second_aim(search)
    aim = figure.crossing(below, failed, hbm)
    assert f"located fit at {below['batch']} to that" in prose
    assert f"crosses the HBM at {aim:.1f}: {int(aim)}, which fits" in prose
    answer = exact[search["max_batch"]]
    assert f"{(hbm - answer['bytes_per_device']) / 1e6:.1f} MB under" in prose
    assert f"A unit's {slope / 1e6:.1f} MB is under 0.3% of the HBM" in prose
    assert slope < 0.003 * hbm
    # step 3: the check, what it compiled and how long it took
    (check,) = figure.checks(search)
    point = exact[check]
    assert check == search["max_batch"] + 2 and check % 4 == 0  # unit 1: two units, 4 rows
    assert f"{check} is both checks" in prose
    assert f"refused at {point['bytes_per_device']:,} bytes in {point['compile_s']} s" in prose
    assert point["skipped"] == ["decode"] and "decode was not compiled" in prose


def test_each_section_names_the_module_that_does_it(page):
    modules = sorted(p.name for p in SEARCH_PACKAGE.glob("*.py") if p.name != "__init__.py")
    for name in modules:
        assert re.search(rf"\b{re.escape(name)}\b", page), f"docs/search.md never names {name}"
    for path in re.findall(r"`(shared/plan/[\w/]+(?:\.py|/))`", page):
        assert (ROOT / path).exists(), path
    sections = re.findall(r"^## (.+)$", page, re.M)
    for section in sections:
        if section != "The example":
            assert "`" in section, f"section {section!r} names no module"
    assert [s.split(":")[0] for s in sections if s.startswith("Step")] == [
        "Step 1",
        "Step 2",
        "Step 3",
    ]


def test_the_modules_point_to_the_page():
    for name in ("max_batch", "locate", "lines", "climb", "phases", "meshes", "result", "gap"):
        doc = (SEARCH_PACKAGE / f"{name}.py").read_text().split('"""')[1]
        assert "docs/search.md" in doc, f"{name}.py's docstring does not point to docs/search.md"
    max_batch_doc = (SEARCH_PACKAGE / "max_batch.py").read_text().split('"""')[1]
    assert len(max_batch_doc.splitlines()) <= 20, "a short summary; the page has the rest"
