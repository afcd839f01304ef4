"""The README and the pages it points to quote committed results: every answer the README shows
is rendered here from the file it names (the atlas store, docs/atlas.csv, a results JSON) or its
numbers read from it, so a recomputed file cannot leave a stale sentence. The moved records
(benchmarks/README.md, docs/device_results.md) are held to their files the same way where they
quote an answer. Reads JSON and the committed atlas: no compile."""

import dataclasses
import json
import re
import shlex

import pytest

from shared.paths import ROOT
from shared.sizing import human

README = ROOT / "README.md"
BENCHMARKS = ROOT / "benchmarks" / "README.md"
DEVICE_RESULTS = ROOT / "docs" / "device_results.md"
PLAN_SPEED = ROOT / "docs" / "plan_speed.md"
RESULTS = ROOT / "benchmarks" / "results"
PAGES = (README, BENCHMARKS, DEVICE_RESULTS, PLAN_SPEED)
TWO_COMMANDS = """```bash
make execute   # set up .venv/ and run every notebook on its embedded defaults into runs/
make test      # the test suite: unit tests and a smoke run of every notebook (CPU, no network)
```"""


def _result(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def _prose(path) -> str:
    """The page with its line breaks as spaces: a quoted phrase may wrap anywhere."""
    return " ".join(path.read_text().split())


def _blocks(text: str) -> list[list[str]]:
    """Every fenced block's lines."""
    return [block.split("\n") for block in re.findall(r"```[a-z]*\n(.*?)\n```", text, re.S)]


def _answer(question: str) -> tuple[list[str], list[str]]:
    """The README block that starts `$ tpu-budget-lab QUESTION`: its argv and the lines shown."""
    for lines in _blocks(README.read_text()):
        if lines[0].startswith(f"$ tpu-budget-lab {question} "):
            return shlex.split(lines[0])[2:], lines[1:]
    raise AssertionError(f"README shows no `tpu-budget-lab {question}` answer")


def _request(argv: list[str], target: str | None = None):
    from shared.plan.cli.answers import request_from
    from shared.plan.cli.main import build_parser

    args = build_parser().parse_args(argv)
    return args, request_from(args, args.workload, target or args.target)


def _same_request(request, committed: dict) -> None:
    mine = dataclasses.asdict(request)
    assert {k: v for k, v in committed.items() if mine.get(k) != v} == {}, (mine, committed)


def test_the_readme_is_a_front_door():
    """At most 250 lines, the two commands a newcomer types as CI tooling reads them, `make lab`,
    and the pages that hold what moved out of it."""
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    assert text.count(TWO_COMMANDS) == 1 and text.index(TWO_COMMANDS) < 1000
    assert "`make lab`" in text
    for page in ("benchmarks/README.md", "docs/device_results.md", "docs/plan_speed.md"):
        assert f"]({page}" in text, page


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation out, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    """Each link to a file of this repository (and its #heading) exists."""
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        assert file.exists(), f"{page.name}: {target}"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", file.read_text(), re.M)
            assert anchor in {_anchor(h) for h in headings}, f"{page.name}: {target}"


def test_question_1_fit_is_notebook_07s_verdict():
    """`fit grpo ...` as shown is the request 07_grpo_plan.json compiled; its first line and the
    9-hour line are that verdict's numbers, in print_point's and print_bill's words."""
    found = _result("07_grpo_plan.json")
    argv, shown = _answer("fit")
    args, request = _request(argv)
    _same_request(request, found["recipe"])
    verdict, session = found["verdict"], found["session"]
    assert verdict["fits"] and args.hours == session["hours"]
    first = (
        f"{request.workload} {request.model} (bfloat16 weights) batch {request.batch} on "
        f"{request.target} (mesh {{'fsdp': 8, 'tp': 1}}): FITS, "  # the default mesh: 8x1
        f"{human(verdict['bytes_per_device'], 'B')} of {human(verdict['hbm_bytes'], 'B')} per "
        f"device, margin {human(verdict['margin_bytes'], 'B')}"
    )
    last = (
        f"  in {session['hours']:g} h: at most {session['steps_at_most']:,} runs (roofline), "
        f"about {session['steps_estimated']:,} at {session['assumed_efficiency']:.0%}"
    )
    assert shown == [first, last]


def test_question_2_max_batch_is_the_atlas_cell():
    """`max-batch ...` as shown is an atlas cell: the committed store answers it, in these words."""
    from shared.plan.atlas import answer
    from shared.plan.cli.point_view import describe_committed

    argv, shown = _answer("max-batch")
    args, request = _request(argv)
    row = answer.committed_search(request, args.multiple_of)
    assert row is not None, "no longer an atlas cell: the command would compile"
    assert shown == describe_committed(row, False).split("\n")


def test_question_3_change_is_notebook_04s_frontier():
    """The `change` command the README names is notebook 04's request at batch 8; the line shown
    is the frontier's answer at twice the largest batch, from 04_pretrain_plan.json, in
    frontier.describe's words (up to the counts the file does not keep)."""
    from shared.plan import frontier
    from shared.plan.workloads.request import Request

    text = README.read_text()
    (command,) = re.findall(r"`tpu-budget-lab (change [^`]+)`", _prose(README))
    _, request = _request(shlex.split(command))
    (fit,) = _result("04_pretrain_plan.json")["tables"]["fit"]
    assert request == Request("train", fit["model"], fit["target"], seq=fit["seq"])
    assert fit["frontier_batch"] == 2 * fit["max_batch"]
    assert f"at {fit['frontier_batch']}, twice the largest that fits" in _prose(README)
    at = dataclasses.replace(request, batch=fit["frontier_batch"])
    choice = {
        "remat": fit["choice_remat"],
        "microbatches": fit["choice_microbatches"],
        "bytes_per_device": fit["choice_bytes_per_device"],
        "roofline_lower_bound_s": fit["choice_roofline_lower_bound_s"],
        "batch": fit["frontier_batch"],
    }
    result = {"workload": "train", "model": fit["model"], "target": fit["target"]}
    result |= {"choice": choice, "grid": frontier.default_grid(at), "frontier": [], "fast": []}
    said = frontier.describe(result)
    shown = said[: said.index("(a lower bound); ") + len("(a lower bound); ")] + "..."
    assert [shown] in _blocks(text)


def test_question_4_cheapest_is_notebook_08s_job():
    """`cheapest ...` as shown is 08_which_slice.json's 27B LoRA job; the lines shown are its
    answer in view.describe's words."""
    from shared.plan.slices import view

    job = _result("08_which_slice.json")["jobs"]["gemma3-27b LoRA at 4,096 tokens"]["result"]
    argv, shown = _answer("cheapest")
    args, request = _request(argv, target=job["request"]["target"])
    _same_request(request, job["request"])
    assert (args.tokens, args.minutes) == (job["job"]["amount"], job["minutes"])
    said = view.describe(job).split("\n")
    assert shown[0] == said[0] and all(line in said for line in shown)


def test_question_5_lookup_prints_the_committed_cell(capsys):
    """`lookup ...` as shown is what it prints from docs/atlas.csv (lines in order; the README
    leaves some out)."""
    from shared.plan.cli.main import main

    argv, shown = _answer("lookup")
    assert main(argv) == 0
    printed = capsys.readouterr().out.splitlines()
    assert shown[0] == printed[0]
    assert [line for line in printed if line in shown] == shown


def test_the_field_validation_count():
    """Six of six: every published point tunix and the field ran or refused, as plan says."""
    points = _result("field_validation.json")["points"]
    quoted = f"**{sum(p['agrees'] for p in points)} of {len(points)}"
    assert quoted in _prose(README) and quoted in _prose(BENCHMARKS)


# (recipe, model, target) -> the phrase benchmarks/README.md quotes, from the store's newest row
ATLAS_QUOTES = {
    ("rollout", "gemma3-1b", "tpu7x-8"): "rollouts fit {n:,} on a tpu7x-8",
    ("rollout", "gemma3-1b", "v5p-8"): "and {n:,} on a v5p-8, with twice the devices",
    ("grpo", "gemma3-1b", "v5e-8"): "GRPO gemma3-1b on a v5e-8 fits {n} sequences per call",
    ("sft", "gemma3-1b", "v5e-8"): "went from {m[8x1]} on 8x1 to {n} on {mesh}",
    ("rollout", "gemma2-2b", "v5p-8"): "rollouts on a v5p-8 from {m[4x1]} to {n} on {mesh}",
    ("rollout", "llama3.1-8b", "v6e-8"): "where {mesh} fits {n} ({gib:.2f} of 31.25 GiB",
    ("rollout", "gemma4-31b", "v5e-8"): "(gemma4-31b rollouts on a v5e-8: {n} on {mesh})",
    ("rollout", "gemma3-12b", "tpu7x-8"): "against the atlas's {n}",
    ("rollout", "gemma3-27b", "tpu7x-8"): "on 1x8** against {n}",
    ("rollout", "gemma3-4b", "tpu7x-8"): "on 2x4** against {n}",
    ("lora-train", "llama3.1-8b", "v5e-8"): "(the cell's answer since: {n} on {mesh})",
    ("grpo", "llama3.1-8b", "v5e-8"): "computed since: {n} on {mesh})",
}


@pytest.fixture(scope="module")
def atlas_rows() -> tuple[list[dict], dict]:
    from shared.plan.atlas.store import STORE, newest, read_store

    rows = read_store(STORE)
    return rows, newest(rows)


@pytest.mark.parametrize("cell", ATLAS_QUOTES, ids="/".join)
def test_the_benchmarks_page_quotes_the_atlas(cell, atlas_rows):
    row = atlas_rows[1][cell]
    assert row["status"] == "ok"
    quoted = ATLAS_QUOTES[cell].format(
        n=row["max_batch"],
        mesh=row["mesh"],
        m=row.get("mesh_answers") or {},
        gib=row["bytes_per_device"] / 2**30,
    )
    assert quoted in _prose(BENCHMARKS), quoted


def test_the_gemma4_e4b_gap_sentence_is_the_store(atlas_rows):
    """The search that stopped with a gap, the run that closed it, and the cell's answer now."""
    rows, newest = atlas_rows
    cell = ("rollout", "gemma4-e4b", "v6e-8")
    gap = [
        r
        for r in rows
        if (r["recipe"], r["model"], r["target"]) == cell and not r.get("converged", True)
    ]
    stopped = gap[-1]
    now = newest[cell]
    probes = {(batch, fits) for batch, fast, fits in now["probes"] if not fast}
    closed_at = now["mesh_answers"]["8x1"]
    refused = min(b for b, fits in probes if not fits and b > closed_at)
    assert (closed_at, True) in probes and (refused, False) in probes
    said = (
        f"stopped on {stopped['date'][:10]} at {stopped['max_batch']:,} fits and "
        f"{stopped['first_not_fitting']:,} does not; a later run closed the gap ({closed_at:,} "
        f"fits, {refused:,} does not), and the cell's answer, once every mesh was asked, is "
        f"{now['max_batch']:,} on {now['mesh']}."
    )
    assert said in _prose(BENCHMARKS)


@pytest.mark.parametrize(
    ("name", "template"),
    [
        ("libtpu_flag_grpo_gemma3-1b_tpu7x-8.json", "fits **{n} on {mesh}** ({gib:.2f} of"),
        ("libtpu_flag_rollout_gemma3-1b_tpu7x-8.json", "answers **{n:,} on {mesh}**"),
        ("libtpu_flag_rollout_gemma3-12b_tpu7x-8.json", "fits **{n} on {mesh}** ({gib:.2f} of"),
        ("libtpu_flag_rollout_gemma3-27b_tpu7x-8.json", "gemma3-27b **{n} on {mesh}** against"),
        ("libtpu_flag_rollout_gemma3-4b_tpu7x-8.json", "at least **{n} on {mesh}** against"),
    ],
)
def test_the_benchmarks_page_quotes_the_libtpu_flag_searches(name, template):
    with_flag = _result(name)["with_flag"]
    quoted = template.format(
        n=with_flag["max_batch"],
        mesh=with_flag["mesh"],
        gib=with_flag["bytes_per_device"] / 2**30,
    )
    assert quoted in _prose(BENCHMARKS), quoted


def test_the_benchmarks_page_quotes_the_notebook_results():
    """07's GRPO verdict, meshes and log-prob searches; 01's two Sampler semantics; 04's fit."""
    page = _prose(BENCHMARKS)
    grpo = _result("07_grpo_plan.json")
    verdict, session, wider = grpo["verdict"], grpo["session"], grpo["wider_meshes"]
    logps = grpo["logps_search"]
    two_by_four = wider["2x4"]["session"]
    for quoted in (
        f"**fits at {verdict['bytes_per_device'] / 2**30:.2f} GiB per chip** of "
        f"{verdict['hbm_bytes'] / 2**30:.2f}",
        f"fits {logps['tunix']['max_batch']} sequences per call with tunix's",
        f"**{logps['chunked']['max_batch']:,} with the chunked log-probs** "
        f"({grpo['logps_ratio']:.0f}x)",
        f"at most {session['steps_at_most']:,} steps (roofline) on 8x1, about "
        f"{session['steps_estimated']:,} at an assumed 40%",
        f"**{two_by_four['roofline_step_s']:.2f} s a step against {session['roofline_step_s']:.2f}"
        f", at most {two_by_four['steps_at_most']:,} steps** (about "
        f"{two_by_four['steps_estimated']:,} at 40%; 4x2: "
        f"{wider['4x2']['session']['roofline_step_s']:.2f} s",
    ):
        assert quoted in page, quoted
    semantics = _result("01_rollout_tunix_semantics.json")["semantics"]
    assert f"**{semantics['0.1.6']['max_batch']} with tunix 0.1.6's Sampler**" in page
    assert f"**{semantics['0.1.7']['max_batch']} with 0.1.7's**" in page
    tables = _result("04_pretrain_plan.json")["tables"]
    (fit,) = tables["fit"]
    (arm,) = [a for a in tables["arm_cost"] if a["target"] == "v6e-1"]
    (at_32,) = [v for v in tables["verdicts"] if v["target"] == "v6e-1" and v["batch"] == 32]
    assert (
        f"{at_32['bytes_per_device'] / 2**30:.2f} GiB at 32 × 2048, largest batch "
        f"{fit['max_batch']}" in page
    )
    picks = f"the frontier picks {fit['frontier_batch']} in {fit['choice_microbatches']} micro"
    assert picks in page
    assert f"about {arm['estimated_h']:.1f} h and ${arm['dollars']:.2f} spot" in page


def test_the_benchmarks_page_quotes_the_suite_run():
    found = _result("suite_2core.json")
    minutes, seconds = divmod(round(found["suite"]["wall_s"]), 60)
    quoted = (
        f"**{found['suite']['counts']['passed']} tests in {minutes} min {seconds} s** on "
        f"{found['date']} (quiet, reference {found['reference_s']:.2f} s"
    )
    assert found["quiet"] and quoted in _prose(BENCHMARKS)


def test_the_device_page_quotes_every_measured_and_predicted_peak():
    """Each device run's measured peak and the on-device compile's prediction, in GB, appear in
    the page's prose beside the agreement table (which tests/test_gpu_plan.py holds)."""
    measured = DEVICE_RESULTS.read_text().split("## Measured on", 1)[1]
    for row in _result("gpu_agreement.json")["rows"]:
        for key in ("measured_peak_bytes", "device_compiled_bytes"):
            assert f"{row[key] / 1e9:.2f}" in measured, (row["source"], key)
