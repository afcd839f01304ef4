"""shared.plan.atlas, which benchmarks/bench_atlas.py runs: its own resumable store, which cells are
left, the rendered atlas (from a small fake store, no compiles), and one real cell for a tiny
model."""

import argparse
import csv
import dataclasses
import functools
import io
import json
import os
import re
import signal
import subprocess
import sys

import pytest

from shared import plan
from shared.errors import BadInput
from shared.paths import ROOT
from shared.plan import atlas, verdict
from shared.plan.atlas.render import render as render_atlas
from shared.plan.search import gap
from shared.plan.search import max_batch as search
from shared.plan.search import meshes as search_meshes

VERSIONS = {
    "jax": "0.10.2",
    "jaxlib": "0.10.2",
    "libtpu": "0.0.42.1",
    "google-tunix": "0.1.7",
    "qwix": "0.1.8",
    "flax": "0.12.8",
}


def _row(model, target, recipe="rollout", **fields):
    base = {
        "model": model,
        "target": target,
        "recipe": recipe,
        "settings": atlas.RECIPES[recipe],
        "revision": atlas.revision(recipe, target),
        "versions": VERSIONS,
        "date": "2026-11-22T12:00:00Z",
        "host_cpus": 2,
        "status": "ok",
        "max_batch": 8,
        "first_not_fitting": 16,
        "at_least": False,
        "converged": True,
        "checked_above": None,  # stored since the search's checks: nothing above to check
        "checked_aligned": None,
        "mesh_ceilings": None,  # stored since the search asks every mesh (None: one device)
        "dips": [],
        "multiple_of": 8,
        "bytes_per_device": 15 * 2**30,
        "hbm_bytes": int(15.75 * 2**30),
        "compiles": 5,
        "compile_s": 300.0,
        "wall_s": 200.0,
        "summary": f"{model} on {target}",
    }
    row = {**base, **fields}
    devices = row.setdefault("devices", 1 if target.endswith("-1") else 8)
    row.setdefault("mesh", f"{devices}x1")
    row.setdefault(
        "units", dict.fromkeys(row.get("mesh_answers") or [row["mesh"]], row["multiple_of"])
    )
    return row


def _before_units(row: dict) -> dict:
    """A row as the store kept it before each mesh a search compared took its own step."""
    return {k: v for k, v in row.items() if k != "units"}


def _before_the_check(row: dict) -> dict:
    """A row as the store kept it before the search checked two units above its answer."""
    return {k: v for k, v in row.items() if k not in ("checked_above", "checked_aligned", "dips")}


def _before_the_aligned_check(row: dict) -> dict:
    """A row as the store kept it before the search checked the next batch of 4 rows a
    device above its answer (2026-11-28)."""
    return {k: v for k, v in row.items() if k != "checked_aligned"}


def test_store_round_trip_ignores_a_truncated_line(tmp_path, capsys):
    store = tmp_path / "atlas.jsonl"
    first, second = _row("gemma3-1b", "v5e-1"), _row("gemma2-2b", "v5e-1")
    atlas.append_row(store, first)
    atlas.append_row(store, second)
    with open(store, "a") as handle:  # a write cut short by a kill
        handle.write(json.dumps(_row("qwen3-8b", "v5e-1"))[:40])
    assert atlas.read_store(store) == [first, second]
    assert "ignoring unreadable line 3" in capsys.readouterr().err
    third = _row("llama3.1-8b", "v5e-8")
    atlas.append_row(store, third)  # starts a line of its own after the cut one
    assert atlas.read_store(store) == [first, second, third]
    assert atlas.read_store(tmp_path / "absent.jsonl") == []


def _keys(cells) -> set[tuple[str, str, str]]:
    return {(c.model, c.target, c.recipe) for c in cells}


def test_cells_already_stored_are_skipped_at_the_same_settings_revision_and_versions():
    grid = atlas.cells(["gemma3-1b", "gemma3-27b"], ["v5e-8", "v5e-1"], ["lora-train", "rollout"])
    # cheapest first: the small model before the big one, one chip before eight
    assert [(c.model, c.target) for c in grid[:2]] == [("gemma3-1b", "v5e-1")] * 2
    assert (grid[-1].model, grid[-1].target) == ("gemma3-27b", "v5e-8")
    # GRPO's five executables a verdict make its cells the slowest: after every other one
    slow = atlas.cells(["gemma3-1b", "gemma3-27b"], ["v5e-1"], ["grpo", "rollout"])
    assert [(c.model, c.recipe) for c in slow] == [
        ("gemma3-1b", "rollout"),
        ("gemma3-27b", "rollout"),
        ("gemma3-1b", "grpo"),
        ("gemma3-27b", "grpo"),
    ]
    rows = [
        _row("gemma3-1b", "v5e-1"),
        _row("gemma3-1b", "v5e-8", status="error", error="BadInput: no"),
        _row("gemma3-27b", "v5e-1", versions={**VERSIONS, "libtpu": "0.0.1"}),
        _row("gemma3-27b", "v5e-8", settings={**atlas.RECIPES["rollout"], "steps": 8}),
        _row("gemma3-1b", "v5e-1", "lora-train", revision=atlas.REVISIONS["lora-train"] - 1),
    ]
    left = {(c.model, c.target, c.recipe) for c in atlas.todo(grid, rows, VERSIONS)}
    assert ("gemma3-1b", "v5e-1", "lora-train") in left  # an older workload: computed again
    assert ("gemma3-1b", "v5e-1", "rollout") not in left  # done
    assert ("gemma3-1b", "v5e-8", "rollout") not in left  # failed: skipped unless retried
    assert ("gemma3-27b", "v5e-1", "rollout") in left  # other versions: not this cell
    assert ("gemma3-27b", "v5e-8", "rollout") in left  # other lengths: not this cell
    # a multi-device cell at the single-chip revision predates the activation shardings
    stale = [_row("gemma3-1b", "v5e-8", revision=atlas.REVISIONS["rollout"])]
    assert ("gemma3-1b", "v5e-8", "rollout") in {
        (c.model, c.target, c.recipe) for c in atlas.todo(grid, stale, VERSIONS)
    }
    assert len(left) == len(grid) - 2
    retried = atlas.todo(grid, rows, VERSIONS, retry_failed=True)
    assert ("gemma3-1b", "v5e-8", "rollout") in {(c.model, c.target, c.recipe) for c in retried}
    # a search that stopped with a gap is done, unless asked (after a better search)
    gap = [_row("gemma3-1b", "v5e-1", converged=False), _row("gemma3-1b", "v5e-8")]
    assert ("gemma3-1b", "v5e-1", "rollout") not in _keys(atlas.todo(grid, gap, VERSIONS))
    regapped = _keys(atlas.todo(grid, gap, VERSIONS, retry_gaps=True))
    assert ("gemma3-1b", "v5e-1", "rollout") in regapped
    assert ("gemma3-1b", "v5e-8", "rollout") not in regapped  # converged: stays done
    # a row that fit nothing, stored with each mesh's step, is done: today's search asked
    # every mesh its least batch
    steps = {"mesh_answers": {"8x1": 0, "1x8": 0}, "units": {"8x1": 8, "1x8": 1}}
    nothing = [_row("gemma3-1b", "v5e-8", max_batch=0, **steps)]
    assert ("gemma3-1b", "v5e-8", "rollout") not in _keys(atlas.todo(grid, nothing, VERSIONS))


def test_check_above_reruns_only_answers_stored_before_the_check():
    """--check-above picks the rows whose converged answer lacks the check two units above
    it; a row stored since (checked_above, even None), a ceiling's "at least", a "not even one
    unit" and a gap are not its business."""
    grid = atlas.cells(["gemma3-1b", "gemma3-4b"], ["v5e-1", "v6e-1", "v5p-8"], ["rollout"])
    rows = [
        _before_the_check(_row("gemma3-1b", "v5e-1")),
        _row("gemma3-1b", "v6e-1", checked_above=24),
        _row("gemma3-4b", "v5e-1"),
        _before_the_check(_row("gemma3-4b", "v6e-1", max_batch=512, at_least=True)),
        _before_the_check(_row("gemma3-1b", "v5p-8", max_batch=0, devices=8)),
        _before_the_check(_row("gemma3-4b", "v5p-8", converged=False)),
    ]
    assert not atlas.todo(grid, rows, VERSIONS)
    assert _keys(atlas.todo(grid, rows, VERSIONS, check_above=True)) == {
        ("gemma3-1b", "v5e-1", "rollout")
    }


def test_a_row_stored_before_the_aligned_check_needs_it_only_where_it_is_further():
    """llama3.1-8b rollouts on a 4x2 of a v5e-8: 196 (49 rows a chip), 200 and 204 failing,
    stored before the search checked 208 (52 rows), which fits: such a row needs the check.
    gemma3-1b's 374 on a v5e-1 (375 and 376 failing) does not: 376 is both checks."""
    llama = _row(
        "llama3.1-8b",
        "v5e-8",
        mesh="4x2",
        max_batch=196,
        first_not_fitting=200,
        checked_above=204,
        multiple_of=4,
    )
    assert atlas.needs_check(_before_the_aligned_check(llama)) and not atlas.needs_check(llama)
    gemma = _row("gemma3-1b", "v5e-1", max_batch=374, first_not_fitting=375, checked_above=376)
    assert not atlas.needs_check(_before_the_aligned_check({**gemma, "multiple_of": 1}))


def test_a_row_that_stepped_a_mesh_coarsely_is_computed_again_first():
    """Until 2026-11-27 the atlas stepped every mesh it compared by the rule mesh's unit:
    llama3.1-8b LoRA on a v5e-8 asked 1x8 for batch 8 alone and stored "not even batch 8 fits
    on any mesh", though 1x8 runs batch 1. Such rows are computed again by default, before
    the cells not computed yet, and shown with a '?'; so is an old "none fits" that named no
    meshes. A row on the all-fsdp mesh, one chip's row, GRPO's whole groups (8 on 8x1) and a
    row that stored its steps stand."""
    from shared.plan.atlas.render import cell_text

    grid = atlas.cells(
        ["gemma3-1b", "llama3.1-8b", "qwen3-8b", "gemma3-12b"], ["v5e-1", "v5e-8"], ["lora-train"]
    )
    grid += atlas.cells(["gemma3-1b", "llama3.1-8b"], ["v5e-8"], ["grpo"])
    old = [
        _row(
            "llama3.1-8b",
            "v5e-8",
            "lora-train",
            max_batch=0,
            first_not_fitting=8,
            mesh_answers={"8x1": 0, "4x2": 0, "2x4": 0, "1x8": 0},
        ),
        _row("qwen3-8b", "v5e-8", "lora-train", max_batch=0, first_not_fitting=8),
        _row("gemma3-1b", "v5e-8", "lora-train", max_batch=40),
        _row("llama3.1-8b", "v5e-1", "lora-train", max_batch=0, multiple_of=1),
        _row("llama3.1-8b", "v5e-8", "grpo", mesh="1x8", mesh_answers={"8x1": 0, "1x8": 8}),
        _row("gemma3-1b", "v5e-8", "grpo", max_batch=56),
    ]
    new = _row(
        "gemma3-12b",
        "v5e-8",
        "lora-train",
        max_batch=0,
        mesh_answers={"8x1": 0, "1x8": 0},
        units={"8x1": 8, "1x8": 1},
    )
    rows = [_before_units(r) for r in old] + [new]
    coarse = {
        ("llama3.1-8b", "v5e-8", "lora-train"),
        ("qwen3-8b", "v5e-8", "lora-train"),
        ("llama3.1-8b", "v5e-8", "grpo"),
    }
    assert {r["model"] for r in rows if atlas.stepped_coarsely(r)} == {"llama3.1-8b", "qwen3-8b"}
    left = atlas.todo(grid, rows, VERSIONS)
    assert {(c.model, c.target, c.recipe) for c in left[:3]} == coarse
    assert _keys(left) == coarse | {
        ("gemma3-1b", "v5e-1", "lora-train"),
        ("qwen3-8b", "v5e-1", "lora-train"),
        ("gemma3-12b", "v5e-1", "lora-train"),
    }
    assert cell_text(rows[0]) == "✗ 0 (✗ 8)?"
    assert cell_text(rows[4]) == "✓ 8 (✗ 16)? on 1x8"
    assert cell_text(rows[2]) == "✓ 40 (✗ 16)"
    assert cell_text(new) == "✗ 0 (✗ 1)"  # the least batch a mesh was asked


def _left_1x8_unasked() -> dict:
    """llama3.1-8b LoRA on a v5e-8 as stored on 2026-11-27: 4 on 2x4, 1x8 never asked."""
    row = _row(
        "llama3.1-8b",
        "v5e-8",
        "lora-train",
        max_batch=4,
        first_not_fitting=6,
        mesh="2x4",
        mesh_answers={"8x1": 0, "4x2": 0, "2x4": 4},
        units={"8x1": 8, "4x2": 4, "2x4": 2},
    )
    del row["mesh_ceilings"]  # stored before the search asked every mesh
    return row


def test_a_row_that_left_a_mesh_unasked_is_computed_again():
    """llama3.1-8b LoRA on a v5e-8, searched with each mesh's own step: nothing on 8x1 and 4x2,
    4 on 2x4, where the room's arithmetic stopped the comparison before 1x8. Today's search
    asks every mesh the weights divide, so the row is an older search's; with 1x8 asked it
    stands, and so does a row of today's search (it stores its meshes' ceilings) that asked
    every mesh of them."""
    short = _left_1x8_unasked()
    answers = short["mesh_answers"]
    assert atlas.older_search(short) and not atlas.stepped_coarsely(short)
    asked = {**short, "mesh_answers": {**answers, "1x8": "<5"}}
    assert not atlas.older_search(asked)
    roomier = {**short, "mesh_answers": {"4x2": 2, "2x4": 4}}  # 8x1 and 1x8 never asked
    assert atlas.older_search(roomier)
    assert not atlas.older_search({**roomier, "mesh_ceilings": {"4x2": 7016, "2x4": 7100}})
    # today's search told to stop at its first mesh (--one-mesh) left 8x1 unasked
    assert atlas.older_search({**roomier, "mesh_ceilings": {"8x1": 6960, "4x2": 7016}})
    grid = atlas.cells(["llama3.1-8b"], ["v5e-8"], ["lora-train"])
    assert _keys(atlas.todo(grid, [short], VERSIONS)) == {("llama3.1-8b", "v5e-8", "lora-train")}
    assert not atlas.todo(grid, [asked], VERSIONS)


def test_a_cells_newest_row_decides_whether_it_is_computed_again():
    """The atlas shows a cell's newest row, so that row says whether a retry or a check is
    due: llama3.1-8b rollouts on a v6e-1 kept an older gap row (44) beside the newer answer
    (45) stored before the check, and the older row hid the cell from --check-above."""
    grid = atlas.cells(["llama3.1-8b"], ["v6e-1"], ["rollout"])
    gap = _row("llama3.1-8b", "v6e-1", converged=False, date="2026-11-26T04:06:14Z")
    answer = _before_the_check(_row("llama3.1-8b", "v6e-1", date="2026-11-26T11:16:21Z"))
    assert _keys(atlas.todo(grid, [gap, answer], VERSIONS, check_above=True)) == {
        ("llama3.1-8b", "v6e-1", "rollout")
    }
    assert not atlas.todo(grid, [gap, answer], VERSIONS, retry_gaps=True)
    failed = _row("llama3.1-8b", "v6e-1", status="error", error="killed", date="2026-11-27")
    assert not atlas.todo(grid, [answer, failed], VERSIONS, check_above=True)
    assert atlas.todo(grid, [answer, failed], VERSIONS, retry_failed=True)


def test_check_above_puts_the_checks_before_the_cells_not_computed_yet():
    """A time-limited --check-above run spends its minutes on the checks first (one compile
    each, where a shown answer may be wrong), then on cells no run has reached."""
    grid = atlas.cells(["gemma3-1b", "gemma3-4b"], ["v5e-1"], ["rollout"])
    rows = [_before_the_check(_row("gemma3-4b", "v5e-1"))]
    assert [c.model for c in atlas.todo(grid, rows, VERSIONS)] == ["gemma3-1b"]
    checks_first = atlas.todo(grid, rows, VERSIONS, check_above=True)
    assert [c.model for c in checks_first] == ["gemma3-4b", "gemma3-1b"]


def _check_compiler(monkeypatch, fitting: set[int]) -> list[tuple[int, bool]]:
    """search's compiles answered by a made-up compiler that fits the batches up to 64 and
    `fitting` (_made_up_compiler), recording (batch, fast)."""
    return _made_up_compiler(monkeypatch, lambda r: r.batch <= 64 or r.batch in fitting)


def _made_up_compiler(monkeypatch, fits) -> list[tuple[int, bool | str]]:
    """search's and gap's compiles answered by a made-up compiler: a request fits where
    `fits(request)` says so, at 0.2 GiB a row, and takes 16 GiB of 15.75 where it does not;
    on the request's mesh (8x1 unless it names one). Returns the (batch, fast) asked, fast
    "assigned" for a probe at buffer assignment (shared.plan.compiler.assigned)."""
    asked = []

    def verdict_of(request, way=None):
        asked.append((request.batch, way or request.fast))
        fsdp, tp = map(int, (request.mesh or "8x1").split("x"))
        fitting = fits(request)
        return {
            "batch": request.batch,
            "target": request.target,
            "fast": request.fast,
            "fits": fitting,
            "cached": False,
            "bytes_per_device": (0.2 * request.batch if fitting else 16) * 2**30,
            "hbm_bytes": int(15.75 * 2**30),
            "compile_s": 10.0,
            "devices": 8,
            "dtype": "bfloat16",
            "worst": "decode",
            "mesh_shape": {"fsdp": fsdp, "tp": tp},
        }

    for module in (search, gap):
        monkeypatch.setattr(
            module,
            "plan_points",
            lambda requests, use_cache, first=None, waits=None: [verdict_of(r) for r in requests],
        )
    monkeypatch.setattr(
        search,
        "assigned_points",
        lambda requests, use_cache, finish=False: [verdict_of(r, "assigned") for r in requests],
    )
    return asked


def test_an_atlas_cell_steps_each_mesh_by_its_own_least_batch(monkeypatch):
    """A model whose step fits a v5e-8 only on 2x4, at up to 3 rows (as a tp-hungry LoRA may):
    the cell asks each mesh its own least batch, 8 on 8x1, 4 on 4x2, 2 on 2x4, and answers 2
    on 2x4. Stepped by the rule mesh's 8 everywhere, as the atlas did until 2026-11-27, it
    stored "not even batch 8 fits on any mesh"."""
    monkeypatch.setattr(
        search_meshes, "wider_shapes", lambda request, devices, than: [(4, 2), (2, 4)]
    )
    asked = _made_up_compiler(monkeypatch, lambda r: r.mesh == "2x4" and r.batch <= 3)
    row = atlas.run_cell(atlas.Cell("gemma3-tiny", "v5e-8", "lora-train"), progress=False)
    assert row["status"] == "ok", row.get("error")
    assert (row["max_batch"], row["first_not_fitting"], row["mesh"]) == (2, 4, "2x4")
    assert row["units"] == {"8x1": 8, "4x2": 4, "2x4": 2} and row["multiple_of"] == 2
    assert (4, False) in asked and not atlas.stepped_coarsely(row)


@pytest.mark.parametrize(
    "fitting, answer, checked, aligned, dips",
    [(set(), 64, 80, 96, []), ({80}, 80, 96, None, [72])],
)
def test_a_stored_answer_is_checked_two_units_above_on_its_mesh(
    monkeypatch, fitting, answer, checked, aligned, dips
):
    """A row stored before the checks (64 fits, 72 does not, unit 8 on a v5e-8's 8x1): 80 is
    compiled exactly, first, then 96 (12 rows a chip, the next multiple of 4). Where they fail,
    the row keeps its answer and says it was checked; where 80 fits (a dip at 72), the search
    goes on above it to the new answer, itself checked (96 is both checks of 80), and the row
    says 72 was a dip."""
    asked = _check_compiler(monkeypatch, fitting)
    cell = atlas.Cell("gemma3-tiny", "v5e-8", "rollout")
    stored = _before_the_check(
        _row(
            "gemma3-tiny",
            "v5e-8",
            max_batch=64,
            first_not_fitting=72,
            mesh="8x1",
            probes=[[64, False, True], [72, False, False]],  # no cut_probes: stored before them
        )
    )
    row = atlas.check_row(stored, cell, progress=False)
    assert row["status"] == "ok" and asked[0] == (80, False)
    assert (row["max_batch"], row["first_not_fitting"]) == (answer, answer + 8)
    assert (row["checked_above"], row["checked_aligned"], row["dips"]) == (checked, aligned, dips)
    assert row["compiles"] == 5 + len(asked) and row["probes"][:2] == stored["probes"]
    assert row["wall_s"] > 200.0 and row["mesh"] == "8x1"
    failed = f"{answer + 8}, {checked} and {aligned}" if aligned else f"{answer + 8} and {checked}"
    assert f"{answer} (batches {failed} do not)" in row["summary"]
    assert not atlas.needs_check(row)


def test_a_row_stored_without_its_mesh_whose_checks_are_known_is_checked_without_compiling(
    monkeypatch,
):
    """A v5e-8 row stored before rows named their mesh (80 fits, 88 and 96 do not, unit 8):
    on the mesh it is checked on (8x1) its one check is 96, failed already, so the cell stands
    as checked with nothing compiled (check_above refused it as an error, and the cell stayed
    marked for a check run after run)."""
    asked = _check_compiler(monkeypatch, set())
    stored = _before_the_aligned_check(
        _row("gemma3-tiny", "v5e-8", max_batch=80, first_not_fitting=88, checked_above=96)
    )
    stored.pop("mesh", None)
    assert atlas.needs_check(stored)
    row = atlas.check_row(stored, atlas.Cell("gemma3-tiny", "v5e-8", "rollout"), progress=False)
    assert asked == [] and row["status"] == "ok" and not atlas.needs_check(row)
    assert (row["max_batch"], row["checked_above"], row["checked_aligned"]) == (80, 96, None)
    assert row["date"] > stored["date"]  # the newest row for the cell: the one shown


@pytest.mark.parametrize("on_4x2, answer, mesh", [(96, 96, "4x2"), (60, 64, "8x1")])
def test_a_row_that_left_a_mesh_unasked_asks_it_alone(monkeypatch, on_4x2, answer, mesh):
    """A v5e-8 row stored before the search asked every mesh the weights divide (64 on 8x1,
    checked; 4x2 never asked): mesh_row asks 4x2 one exact question, whether it fits 68, and
    nothing else. Where 4x2 fits up to 96 it is searched on above 68 and is the answer; where
    it fits 60, that one compile is its whole answer and 64 stands, every mesh asked."""
    monkeypatch.setattr(search_meshes, "wider_shapes", lambda request, devices, than: [(4, 2)])
    asked = _made_up_compiler(
        monkeypatch, lambda r: r.batch <= {"8x1": 64, "4x2": on_4x2}[r.mesh or "8x1"]
    )
    stored = _row(
        "gemma3-tiny",
        "v5e-8",
        max_batch=64,
        first_not_fitting=72,
        mesh="8x1",
        checked_above=80,
        checked_aligned=96,
        probes=[[64, False, True], [72, False, False]],
    )
    del stored["mesh_ceilings"]  # stored before the search asked every mesh
    del stored["mesh"]  # nor did it name its mesh: the rule's, 8x1
    row = atlas.mesh_row(stored, atlas.Cell("gemma3-tiny", "v5e-8", "rollout"), progress=False)
    assert row["status"] == "ok", row.get("error")
    assert (row["max_batch"], row["mesh"]) == (answer, mesh) and asked[0] == (68, False)
    assert set(row["mesh_answers"]) == {"8x1", "4x2"} == set(row["mesh_ceilings"])
    assert row["units"] == {"8x1": 8, "4x2": 4} and not atlas.older_search(row)
    assert row["compiles"] == 5 + len(asked) and row["probes"][:2] == stored["probes"]
    if on_4x2 == 60:
        assert asked == [(68, False)] and row["mesh_answers"]["4x2"] == "<68"
        assert "64 (batches 72, 80 and 96 do not)" in row["summary"]


def test_a_one_mesh_cell_leaves_its_other_meshes_marked_for_a_later_run(monkeypatch):
    """bench_atlas.py --one-mesh, for a host whose memory cannot hold another mesh's compiles
    (gemma3-27b's full fine-tune on a tpu7x-8): the cell is searched on its first mesh only,
    64 on 8x1, and stored marked '?', 4x2 named as not asked. A --one-mesh run leaves it
    done; any other run asks 4x2 (mesh_row), which fits 96 there and answers the cell."""
    monkeypatch.setattr(search_meshes, "wider_shapes", lambda request, devices, than: [(4, 2)])
    from shared.plan.atlas.render import cell_text

    _made_up_compiler(monkeypatch, lambda r: r.batch <= {"8x1": 64, "4x2": 96}[r.mesh])
    cell = atlas.Cell("gemma3-tiny", "v5e-8", "rollout")
    row = atlas.run_cell(cell, progress=False, one_mesh=True)
    assert row["status"] == "ok", row.get("error")
    assert (row["max_batch"], row["mesh"], row["mesh_answers"]) == (64, "8x1", None)
    assert set(row["mesh_ceilings"]) == {"8x1", "4x2"}
    assert atlas.older_search(row) and re.fullmatch(r"✓ 64 \(.*\)\?", cell_text(row))
    grid = [cell]
    assert not atlas.todo(grid, [row], row["versions"], one_mesh=True)
    assert atlas.todo(grid, [row], row["versions"]) == grid
    page, table = render_atlas([row], ["gemma3-tiny"], ["v5e-8"], ["rollout"], "test")
    assert "4x2 not asked (--one-mesh), and may fit more" in page
    stored = next(csv.DictReader(io.StringIO(table)))
    assert stored["meshes_not_asked"] == "4x2"
    from shared.plan.atlas import lookup

    text = lookup.describe({**stored, "status": "ok", "prices_read": ""})
    assert "searched on 8x1 only" in text and "4x2 not asked" in text
    done = atlas.mesh_row(row, cell, progress=False)
    assert (done["max_batch"], done["mesh"]) == (96, "4x2") and not atlas.older_search(done)


def test_a_row_whose_unasked_meshes_cannot_hold_the_weights_stands_asked(monkeypatch):
    """gemma4-31b rollouts on a v5e-8, stored before the search asked every mesh: 2 on 2x4,
    the rule's mesh, with 8x1 and 4x2 dividing the weights but holding too little of them
    and 1x8 not dividing them. Today's search asks 2x4 alone, so mesh_row compiles nothing
    and stores the answer as every mesh asked: the '?' goes (it raised a KeyError on
    2026-11-29, since a search of one mesh names no ceilings)."""
    monkeypatch.setattr(search_meshes, "wider_shapes", lambda request, devices, than: [])
    monkeypatch.setattr(search_meshes, "search_shape", lambda request, devices: (2, 4))
    asked = _made_up_compiler(monkeypatch, lambda r: r.batch <= 2)
    stored = _row("gemma3-tiny", "v5e-8", max_batch=2, first_not_fitting=4, mesh="2x4")
    stored["probes"] = [[4, False, False], [2, False, True]]
    del stored["mesh_ceilings"]  # stored before the search asked every mesh
    row = atlas.mesh_row(stored, atlas.Cell("gemma3-tiny", "v5e-8", "rollout"), progress=False)
    assert row["status"] == "ok", row.get("error")
    assert asked == [] and (row["max_batch"], row["mesh"]) == (2, "2x4")
    assert list(row["mesh_ceilings"]) == ["2x4"] and row["mesh_answers"] == {"2x4": 2}
    assert not atlas.older_search(row)
    assert "on v5e-8 (mesh 2x4): 2 (" in row["summary"]  # no other mesh to name


def _coarse_tiny_row(**fields) -> dict:
    """A gemma3-tiny row on a v5e-8 as stored while the atlas stepped every mesh by the rule
    mesh's 8 (no `units`) and before the search asked every mesh (no `mesh_ceilings`)."""
    row = _before_units(_row("gemma3-tiny", "v5e-8", **fields))
    del row["mesh_ceilings"]
    return row


def test_a_coarse_row_is_refined_at_its_meshs_own_step_then_asks_the_others(monkeypatch):
    """A v5e-8 row stored while the atlas stepped every mesh by the rule mesh's 8: 56 on 2x4,
    64 refused, 8x1 48. A run refines it (coarse_row) instead of searching every mesh again:
    the bracket closed at 2x4's own step of 2 (60, 62), its check above (66; 64 is a known
    failure), then 8x1 asked whether it fits 62, where it wins a tie (64, its least batch
    above): nothing located, nothing else compiled. Made-up compiler: 62 fit on 2x4, 50 on
    8x1."""
    monkeypatch.setattr(search_meshes, "wider_shapes", lambda request, devices, than: [(2, 4)])
    asked = _made_up_compiler(monkeypatch, lambda r: r.batch <= {"2x4": 62, "8x1": 50}[r.mesh])
    stored = _coarse_tiny_row(
        max_batch=56,
        first_not_fitting=64,
        mesh="2x4",
        mesh_answers={"8x1": 48, "2x4": 56},
        probes=[[56, False, True], [64, False, False]],
    )
    assert atlas.stepped_coarsely(stored)
    from shared.plan.atlas import cli

    # before its checks: they come with it, at the mesh's own step
    work, what = cli.from_stored(argparse.Namespace(check_above=True, retry_gaps=True), stored)
    assert work.func is atlas.coarse_row and what == "refining the coarse steps"
    cell = atlas.Cell("gemma3-tiny", "v5e-8", "rollout")
    row = atlas.coarse_row(stored, cell, progress=False)
    assert row["status"] == "ok", row.get("error")
    assert asked == [(60, False), (62, False), (66, False), (64, False)], asked
    assert (row["max_batch"], row["first_not_fitting"], row["mesh"]) == (62, 64, "2x4")
    assert row["mesh_answers"] == {"2x4": 62, "8x1": "<64"}
    assert row["units"] == {"8x1": 8, "2x4": 2} and not atlas.older_search(row)
    assert row["compiles"] == 5 + len(asked) and row["probes"][:2] == stored["probes"]


def test_a_coarse_none_fits_is_refined_from_zero_without_checks_above_it(monkeypatch):
    """A coarse "not even 8 fits on 4x2" (its own step is 4): the bracket from nothing to 8
    closes at 4, refused, with no check above an answer of none (the next 4 rows a chip, 16,
    would have been compiled: for a GRPO step the slowest compile of its search), then 8x1 is
    searched as a mesh is where nothing fit elsewhere. Made-up compiler: nothing fits."""
    monkeypatch.setattr(search_meshes, "wider_shapes", lambda request, devices, than: [(4, 2)])
    asked = _made_up_compiler(monkeypatch, lambda r: False)
    stored = _coarse_tiny_row(
        max_batch=0,
        first_not_fitting=8,
        mesh="4x2",
        mesh_answers={"8x1": 0, "4x2": 0},
        probes=[[8, False, False]],
    )
    row = atlas.coarse_row(stored, atlas.Cell("gemma3-tiny", "v5e-8", "rollout"), progress=False)
    assert row["status"] == "ok", row.get("error")
    assert asked[0] == (4, False) and 16 not in [b for b, _ in asked], asked
    assert (row["max_batch"], row["first_not_fitting"]) == (0, 4) and row["units"]["4x2"] == 4
    assert not atlas.older_search(row)


@pytest.mark.parametrize(
    "stored_fail, asked_then, checked",
    [(128, [72, 40, 56, 64, 80, 96], "compiled"), (80, [48, 64, 72, 96], "known")],
)
def test_a_gap_is_closed_by_compiles_inside_it_alone(monkeypatch, stored_fail, asked_then, checked):
    """A row whose search stopped with a gap (16 fits, `stored_fail` does not; unit 8 on a
    v5e-8's 8x1; the made-up compiler fits up to 64): --retry-gaps halves the bracket with
    exact compiles inside it, nothing located, nothing outside it compiled but the check two
    units above the answer and the next batch of 4 rows a chip (96), and those only where
    they are not failures already known."""
    asked = _check_compiler(monkeypatch, set())
    cell = atlas.Cell("gemma3-tiny", "v5e-8", "rollout")
    stored = _row(
        "gemma3-tiny",
        "v5e-8",
        max_batch=16,
        first_not_fitting=stored_fail,
        converged=False,
        mesh="8x1",
        probes=[[16, False, True], [stored_fail, False, False]],
        cut_probes=[],
        mesh_answers={"8x1": 16, "4x2": 0},
    )
    assert atlas.has_gap(stored)
    row = atlas.gap_row(stored, cell, progress=False)
    assert [batch for batch, fast in asked] == asked_then and not any(f for _, f in asked)
    assert (row["max_batch"], row["first_not_fitting"], row["checked_above"]) == (64, 72, 80)
    assert row["checked_aligned"] == 96
    assert row["converged"] and not atlas.has_gap(row) and row["dips"] == []
    assert row["compiles"] == 5 + len(asked) and row["probes"][:2] == stored["probes"]
    assert row["bytes_per_device"] == 0.2 * 64 * 2**30 and row["wall_s"] > 200.0
    assert "64 (batches 72, 80 and 96 do not)" in row["summary"]
    assert "gap" not in row["summary"] and "(mesh 8x1; 4x2 fits none)" in row["summary"]
    assert row["mesh_answers"] == {"8x1": 64, "4x2": 0}  # the other mesh's answer stands


def test_a_gap_closed_where_the_compiler_fails_answers_below_and_says_so(monkeypatch):
    """A stored gap (16 fits, 128 does not) where the bytes fit up to 64 but the compiler fails
    inside itself from 56 up: the gap closes below the failure (48), the row names where the
    compiler failed rather than a batch that does not fit, and no failure for bytes is
    claimed."""
    asked = _made_up_compiler(monkeypatch, lambda r: r.batch <= 64)
    for module in (search, gap):
        made_up = module.plan_points

        def failing(requests, use_cache, first=None, waits=None, made_up=made_up):
            points = made_up(requests, use_cache, first)
            for p in points:
                if p["batch"] >= 56:
                    p.update(fits=False, compiler_errors={"decode": "INTERNAL: RET_CHECK"})
            return points

        monkeypatch.setattr(module, "plan_points", failing)
    stored = _row(
        "gemma3-tiny",
        "v5e-8",
        max_batch=16,
        first_not_fitting=128,
        converged=False,
        mesh="8x1",
        probes=[[16, False, True], [128, False, False]],
        cut_probes=[],
    )
    row = atlas.gap_row(stored, atlas.Cell("gemma3-tiny", "v5e-8", "rollout"), progress=False)
    assert (row["max_batch"], row["first_not_fitting"]) == (48, None), asked
    assert [e["batch"] for e in row["compiler_errors"]] == [56, 64, 72]
    assert row["converged"] and not row["dips"], row
    assert "the compiler fails at batches 56, 64 and 72" in row["summary"], asked
    # the check two units above compiled, and the compiler failed there too: not a failure
    assert [b for b, _ in asked][-1] == 64 and row["checked_above"] is None


def test_a_gap_closes_in_thirds_where_two_compile_at_once():
    """A step that is one executable compiles beside another (search_lines.compiles_alone): after
    the first halving, the bracket is split in three by two compiles at once."""
    assert gap.inside(16, 128, 8, 2) == [72]
    assert gap.inside(64, 128, 8, 3) == [80, 104]
    assert gap.inside(64, 80, 8, 3) == [72]  # narrow: one batch inside
    # a failure below a fit is a dip, not a bound (the bracket close_gap narrows by)
    ends = {64: {"fits": True}, 128: {"fits": False}}
    assert search.bracket({**ends, 80: {"fits": False}, 104: {"fits": True}}) == (104, 128)
    assert search.bracket({**ends, 80: {"fits": False}}) == (64, 80)


def test_only_selects_cells_and_names_the_valid_values():
    grid = atlas.cells(["gemma3-1b", "gemma2-2b"], ["v5e-1", "v6e-1"], ["rollout", "lora-train"])
    only = atlas.parse_only("recipe=rollout,model=gemma3-1b,model=gemma2-2b,target=v6e-1")
    picked = atlas.selected(grid, only)
    assert {(c.model, c.target, c.recipe) for c in picked} == {
        ("gemma3-1b", "v6e-1", "rollout"),
        ("gemma2-2b", "v6e-1", "rollout"),
    }
    with pytest.raises(BadInput, match="valid: model, target, recipe"):
        atlas.parse_only("chip=v5e-1")
    with pytest.raises(BadInput, match="gemma3-1b"):
        atlas.selected(grid, atlas.parse_only("model=gemma3-27b"))


def test_the_page_says_how_often_the_older_searches_it_computed_again_were_wrong():
    """Of the cells an older search answered (a '?' on the page), those computed again say how
    far to trust the rest: 23 of the first 43 were too low, none too high. Each is counted
    once, its answer before beside the newest after."""
    older = _left_1x8_unasked()
    ceilings = {"mesh_ceilings": {"8x1": 9, "4x2": 9, "2x4": 9, "1x8": 9}}
    again = {**older, **ceilings, "date": "2026-11-28T00:00:00Z", "max_batch": 6, "mesh": "1x8"}
    again["mesh_answers"] = {**older["mesh_answers"], "1x8": 6}  # today's asks every mesh
    same = {**older, "model": "qwen3-8b", "date": "2026-11-21T00:00:00Z"}
    same_again = {**same, **ceilings, "date": "2026-11-29T00:00:00Z"}
    same_again["mesh_answers"] = {**same["mesh_answers"], "1x8": "<5"}
    rows = [older, again, same, same_again]
    assert atlas.older_search(older) and not atlas.older_search(again)
    md, _ = render_atlas(rows, ["llama3.1-8b"], ["v5e-8"], ["lora-train"], "cmd")
    assert (
        "Of the 2 such cells computed again so far, 1 was too low (the furthest: lora-train "
        "llama3.1-8b on a v5e-8, 4 -> 6) and none too high: a `?` cell's N fits" in md
    )


def test_render_a_fake_store(tmp_path):
    store = tmp_path / "atlas.jsonl"
    for row in (
        _row(
            "gemma3-1b",
            "v5e-1",
            max_batch=208,
            first_not_fitting=216,
            checked_above=224,
            dips=[200],
            multiple_of=8,
        ),
        _row("gemma3-1b", "v6e-1", date="2026-11-21T00:00:00Z", max_batch=4),  # older
        _row(
            "gemma3-1b", "v6e-1", max_batch=512, first_not_fitting=None, at_least=True, ceiling=512
        ),
        _row("gemma3-27b", "v5e-1", max_batch=0, first_not_fitting=1, multiple_of=1),
        _row("gemma3-27b", "tpu7x-8", status="error", error="RuntimeError: compile died"),
        _row(
            "gemma3-27b",
            "tpu7x-8",
            recipe="grpo",
            mesh="4x2",
            max_batch=4,
            multiple_of=4,
            mesh_answers={"8x1": 0, "4x2": 4, "2x4": "<8"},
        ),
        _row(  # a dip on a mesh compared with another: its note names both
            "gemma3-27b",
            "tpu7x-8",
            recipe="lora-train",
            mesh="4x2",
            max_batch=192,
            first_not_fitting=196,
            checked_above=200,
            checked_aligned=208,
            dips=[188],
            multiple_of=4,
            mesh_answers={"8x1": "<192", "4x2": 192},
        ),
        _before_the_check(
            _row(
                "gemma3-1b",
                "tpu7x-8",
                recipe="grpo",
                mesh="8x1",
                max_batch=96,
                first_not_fitting=104,
            )
        ),
        _row(
            "gemma3-1b",
            "v5e-1",
            recipe="lora-train",
            max_batch=24,
            first_not_fitting=32,
            converged=False,
        ),
        _row(  # newer, but compiled from an older lora-train workload: not shown
            "gemma3-1b",
            "v5e-1",
            recipe="lora-train",
            date="2026-11-23T00:00:00Z",
            revision=atlas.REVISIONS["lora-train"] - 1,
            max_batch=40,
        ),
    ):
        atlas.append_row(store, row)
    md_path, csv_path = tmp_path / "docs" / "atlas.md", tmp_path / "docs" / "atlas.csv"
    models, targets = "gemma3-1b,gemma3-27b", "v5e-1,v6e-1,tpu7x-8"
    assert (
        atlas.main(
            [
                "--render-only",
                "--store",
                str(store),
                "--md",
                str(md_path),
                "--csv",
                str(csv_path),
                "--figure",
                str(tmp_path / "docs" / "figures" / "atlas.png"),
                "--models",
                models,
                "--targets",
                targets,
            ]
        )
        == 0
    )
    md = md_path.read_text()
    # the newest row wins; its answer was checked two units above
    assert "| gemma3-1b | ✓ 208 (✗ 216, ✗ 224) | ✓ ≥512 | not yet |" in md
    assert "208 (batches 216 and 224 do not); 200 below it did not fit either" in md
    assert "| gemma3-27b | ✗ 0 (✗ 1) | not yet | failed |" in md
    assert "| gemma3-27b | not yet | not yet | ✓ 4 (✗ 16) on 4x2 |" in md  # tp named
    # all fsdp: nothing said; stored before the check: "?"
    assert "| gemma3-1b | not yet | not yet | ✓ 96 (✗ 104)? |" in md
    assert "`--check-above` compiles the missing checks" in md
    assert "27b on tpu7x-8 (mesh 4x2; 8x1 fits fewer than 192): 192 (batches 196, 200 and 208" in md
    assert "✓ 24 (✗ 32 gap)" in md
    assert "gemma3-27b on tpu7x-8 failed: RuntimeError: compile died" in md
    assert "| *$/h on-demand / spot* | $1.20 / $0.24 | $2.70 / $0.54 | n/a / n/a |" in md
    assert "not on the public price list" in md  # why tpu7x has no price
    assert "256-token prompts, 1024 generation steps, KV cache of 1312" in md
    assert "chunked loss" in md and "jax 0.10.2, jaxlib 0.10.2, libtpu 0.0.42.1" in md
    not_yet = md.split("## Not computed yet")[1]
    assert "rollout: gemma3-1b on tpu7x-8" in not_yet
    # why: nothing reached them, and what a cell cost here (the rows' 200 s)
    assert "single-chip cells took a median of 3 min each over 4 cells" in not_yet
    assert "multi-chip cells took a median of 3 min each over 3 cells" in not_yet
    assert "python benchmarks/bench_atlas.py --render-only" in md
    rows = list(csv.DictReader(io.StringIO(csv_path.read_text())))
    recipes = len(atlas.RECIPES)
    assert len(rows) == 2 * 3 * recipes  # every cell of the grid, computed or not
    first = next(
        r
        for r in rows
        if (r["recipe"], r["model"], r["target"]) == ("rollout", "gemma3-1b", "v5e-1")
    )
    assert first["max_batch"] == "208" and first["usd_per_hour_on_demand"] == "1.2"
    assert first["libtpu"] == "0.0.42.1" and first["date"].startswith("2026-11-22")
    assert first["revision"] == str(atlas.REVISIONS["rollout"])
    eight = next(r for r in rows if (r["recipe"], r["target"]) == ("rollout", "tpu7x-8"))
    assert eight["revision"] == str(atlas.MULTI_DEVICE_REVISIONS["rollout"])
    assert {r["status"] for r in rows} >= {"ok", "error", "not computed yet"}
    assert next(r for r in rows if r["target"] == "tpu7x-8")["usd_per_hour_spot"] == "n/a"
    grpo = {(r["model"], r["target"]): r for r in rows if r["recipe"] == "grpo"}
    assert (
        grpo["gemma3-27b", "tpu7x-8"]["mesh"] == "4x2" and grpo["gemma3-1b", "v5e-1"]["mesh"] == ""
    )
    assert grpo["gemma3-27b", "tpu7x-8"]["mesh_answers"] == "8x1:0 4x2:4 2x4:<8"
    assert grpo["gemma3-1b", "tpu7x-8"]["mesh_answers"] == ""
    assert (first["checked_above"], first["dips"]) == ("224", "200")


def test_a_cell_runs_in_its_own_process_and_its_death_is_a_failed_row():
    """run_cell_alone sends back what its child computed; a child that dies without a row
    (the kernel's OOM kill of a 24 GB compile, here an error nothing catches) becomes a failed
    row in one line, so the run goes on and --retry-failed runs the cell again."""
    cell = atlas.Cell("gemma3-tiny", "v5e-1", "rollout")
    assert atlas.run_cell_alone(cell, work=dataclasses.asdict) == dataclasses.asdict(cell)
    row = atlas.run_cell_alone(cell, work=os.abort)  # os.abort(cell): a TypeError, uncaught
    assert row["status"] == "error" and row["error"] == "the cell's process died: exit code 1"
    assert (row["model"], row["target"], row["recipe"]) == ("gemma3-tiny", "v5e-1", "rollout")
    assert row["revision"] == cell.revision and row["wall_s"] > 0


def _killed_unless_one_compile_at_a_time(cell, how=signal.SIGKILL, always=False):
    """A cell's work as the kernel treats a compile pair too large for the host (SIGKILL), or
    as libtpu's SparseCore code generator crashed with two at once (SIGSEGV): killed by `how`
    while more than one compile may run at once, or `always` (this runs in run_cell_alone's
    child)."""
    if always or verdict.WORKERS > 1:
        os.kill(os.getpid(), how)
    return {"status": "ok", "workers": verdict.WORKERS}


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGSEGV])
def test_a_cell_killed_in_a_compile_runs_again_one_compile_at_a_time(monkeypatch, how):
    """gemma3-1b LoRA on a tpu7x-8 compiled batches 160 and 168 side by side (17 GB) and the
    kernel killed it; qwen3-8b rollouts there crashed libtpu with two compiles at once: the
    cell runs again once, one compile at a time, and its row says so. Compiling one at a
    time already, the death is the failed row; a person's SIGTERM is not retried."""
    cell = atlas.Cell("gemma3-tiny", "v5e-1", "rollout")
    monkeypatch.setattr(verdict, "WORKERS", 2)  # two at once, as on this project's 2 cores
    row = atlas.run_cell_alone(
        cell, work=functools.partial(_killed_unless_one_compile_at_a_time, how=how)
    )
    assert (row["status"], row["workers"]) == ("ok", 1)
    assert row["one_compile_at_a_time"]["killed_try_s"] > 0
    assert row["one_compile_at_a_time"]["signal"] == how
    stopped = functools.partial(_killed_unless_one_compile_at_a_time, how=signal.SIGTERM)
    row = atlas.run_cell_alone(cell, work=stopped)
    assert (row["status"], row["signal"]) == ("error", signal.SIGTERM)
    assert "one_compile_at_a_time" not in row
    monkeypatch.setattr(verdict, "WORKERS", 1)
    always = functools.partial(_killed_unless_one_compile_at_a_time, how=how, always=True)
    row = atlas.run_cell_alone(cell, work=always)
    assert (row["status"], row["signal"]) == ("error", how)
    assert "one_compile_at_a_time" not in row
    assert ("GiB; run it again on a larger one" in row["error"]) == (how == signal.SIGKILL)


def test_one_real_cell_for_a_tiny_model(tmp_path, monkeypatch):
    """gemma3-tiny rollouts on one v5e chip at short lengths, cut to one layer: a search that
    reaches a lowered ceiling (3 compiles of a tiny model), stored and rendered."""
    monkeypatch.setattr(verdict, "CACHE_DIR", tmp_path / "plan-cache")
    monkeypatch.setattr(search, "CEILING", 64)
    short = {
        "workload": "rollout",
        "prompt_len": 8,
        "steps": 8,
        "cache_size": 16,
        "layers": 1,
        "tunix": "0.1.7",
    }
    monkeypatch.setitem(atlas.RECIPES, "rollout", short)
    row = atlas.run_cell(atlas.Cell("gemma3-tiny", "v5e-1", "rollout"), progress=False)
    assert row["status"] == "ok", row.get("error")
    assert row["max_batch"] == 64 and row["at_least"] and row["compiles"] == 3
    assert row["versions"] == plan.versions() and row["bytes_per_device"] > 0
    assert row["mesh"] == "1x1"
    store = tmp_path / "atlas.jsonl"
    atlas.append_row(store, row)
    assert not atlas.todo(
        [atlas.Cell("gemma3-tiny", "v5e-1", "rollout")], atlas.read_store(store), plan.versions()
    )
    md, _ = render_atlas(atlas.read_store(store), ["gemma3-tiny"], ["v5e-1"], ["rollout"], "test")
    assert "| gemma3-tiny | ✓ ≥64 |" in md


def test_lookup_answers_one_cell_from_the_committed_table_or_says_how_to_compute_it():
    from shared.plan.atlas import lookup

    rows = lookup.read_table()
    done = next(r for r in rows if r["status"] == "ok" and r["max_batch"] not in ("", "0"))
    text = lookup.describe(lookup.find(rows, done["model"], done["target"], done["recipe"]))
    assert f"largest batch {done['max_batch']}" in text or "at least" in text
    assert "libtpu" in text and "per device" in text
    wider = next((r for r in rows if len(r["mesh_answers"].split()) > 1), None)
    if wider is not None:  # a search that compiled more than one mesh names the others
        text = lookup.describe(wider)
        assert f"mesh {wider['mesh']} (fsdp x tp)" in text and "other meshes searched: " in text
    missing = next((r for r in rows if r["status"] == "not computed yet"), None)
    if missing is not None:
        text = lookup.describe(missing)
        assert "not computed yet" in text and "bench_atlas.py --retry-failed --only model=" in text
    with pytest.raises(BadInput, match="unknown target 'v9-8'; valid: "):
        lookup.find(rows, done["model"], "v9-8", done["recipe"])
    with pytest.raises(BadInput, match="cannot read the atlas table"):
        lookup.read_table(lookup.TABLE.with_name("missing.csv"))


def test_lookup_describes_every_cell_of_the_committed_table():
    """Every cell a reader can ask about answers in words, a slice without a public price
    (tpu7x: 'n/a' in the table) too: until 2026-11-29 its price line raised ValueError."""
    from shared.plan.atlas import lookup

    rows = lookup.read_table()
    texts = {(r["model"], r["target"], r["recipe"]): lookup.describe(r) for r in rows}
    assert len(texts) == len(atlas.MODELS) * len(atlas.TARGETS) * len(atlas.RECIPES)
    unpriced = [r for r in rows if r["usd_per_hour_on_demand"] == "n/a" and r["status"] == "ok"]
    for row in unpriced:
        text = texts[row["model"], row["target"], row["recipe"]]
        assert f"no public on-demand and spot price for {row['target']}" in text
        assert "/h on demand" not in text
    priced = next(r for r in rows if r["usd_per_hour_on_demand"] not in ("", "n/a"))
    assert "/h on demand" in lookup.describe(priced)


def test_a_slice_column_words_each_models_cell_as_the_page_marks_it():
    """A notebook's at-a-glance table: one row per model of the grid, in its order, each
    cell's largest batch marked as docs/atlas.md marks it."""
    from shared.plan.atlas import lookup

    column = lookup.slice_column("grpo", "v5e-8")
    assert [row["model"] for row in column] == list(atlas.MODELS)
    rows = lookup.read_table()
    for shown in column:
        row = lookup.find(rows, shown["model"], "v5e-8", "grpo")
        assert shown["largest batch"] == lookup.short_answer(row)
        assert bool(shown["GiB per device"]) == (row["status"] == "ok" and row["max_batch"] != "0")
    done = next(r for r in rows if r["status"] == "ok" and r["max_batch"] not in ("", "0"))
    clean = {**done, "at_least": "False", "converged": "True", "older_search": "False"}
    clean["needs_check"] = "False"
    n = done["max_batch"]
    assert lookup.short_answer(clean) == n
    assert lookup.short_answer({**clean, "older_search": "True"}) == f"{n}?"
    assert lookup.short_answer({**clean, "needs_check": "True"}) == f"{n}?"
    assert lookup.short_answer({**clean, "converged": "False"}) == f"{n}, gap"
    assert lookup.short_answer({**clean, "at_least": "True"}) == f"≥{n}"
    assert lookup.short_answer({**clean, "max_batch": "0", "older_search": "True"}) == "none?"
    assert lookup.short_answer({**clean, "status": "not computed yet"}) == "not yet"
    assert lookup.short_answer({**clean, "status": "error"}) == "failed"
    with pytest.raises(BadInput, match="unknown recipe 'lora'"):
        lookup.slice_column("lora", "v5e-8")
    assert lookup.slice_column("grpo", "h200") is None  # a slice the atlas does not cover


@pytest.mark.parametrize("recipe", sorted(atlas.RECIPES))
def test_lookup_gives_the_plan_command_that_asks_a_missing_cell_with_its_recipe(recipe):
    """A cell not computed yet comes with `python -m shared.plan ... --max-batch` too: the
    command line parses it into the atlas's own request for the cell, flag for flag."""
    from shared.plan.__main__ import build_parser, check_flags_apply
    from shared.plan.atlas import lookup
    from shared.plan.cli.answers import request_from

    row = next(r for r in lookup.read_table() if r["recipe"] == recipe)
    text = lookup.describe({**row, "status": "not computed yet", "error": ""})
    command = text.splitlines()[-1].split(": ", 1)[1]
    assert command.startswith(f"python -m shared.plan {atlas.RECIPES[recipe]['workload']} ")
    argv = command.split()[3:]
    parser = build_parser()
    args = parser.parse_args(argv)
    check_flags_apply(parser, args.workload, argv)
    request = request_from(args, args.workload, args.target)
    assert args.max_batch and (request.model, request.target) == (row["model"], row["target"])
    expected = plan.Request(model=row["model"], target=row["target"], **atlas.RECIPES[recipe])
    assert request == expected


def test_lookup_words_each_other_mesh_searched():
    """A mesh the search only asked whether it fits the answer ('<N' in mesh_answers) reads as
    fewer than N; one that fit not even a unit, as none."""
    from shared.plan.atlas import lookup

    done = next(r for r in lookup.read_table() if r["status"] == "ok" and r["bytes_per_device"])
    row = {**done, "mesh": "4x2", "mesh_answers": "8x1:<192 4x2:192 2x4:0"}
    assert "other meshes searched: 8x1 fits fewer than 192, 2x4 fits none" in lookup.describe(row)


def test_lookup_says_whether_the_answer_was_checked_two_units_above():
    from shared.plan.atlas import lookup

    done = next(r for r in lookup.read_table() if r["status"] == "ok" and r["bytes_per_device"])
    row = {**done, "max_batch": "184", "first_not_fitting": "188", "at_least": "False"}
    row.update(converged="True", needs_check="False")
    checked = lookup.describe({**row, "checked_above": "192", "dips": "180"})
    assert "largest batch 184 (188 and 192 do not fit)" in checked
    assert "below it, 180 did not fit" in checked
    aligned = lookup.describe({**row, "checked_above": "192", "checked_aligned": "196"})
    assert "largest batch 184 (188, 192 and 196 do not fit)" in aligned
    unchecked = lookup.describe({**row, "checked_above": "", "dips": "", "needs_check": "True"})
    assert "two units above it not compiled yet" in unchecked and "below it" not in unchecked
    assert f"--check-above --only model={row['model']}," in unchecked
    # stored before the aligned check (2026-11-28): two units above failed, the next batch of
    # 4 rows a device not asked
    unaligned = lookup.describe({**row, "checked_above": "192", "needs_check": "True"})
    assert "(188 and 192 do not fit)" in unaligned and "not checked yet at the next" in unaligned
    assert "--check-above" in unaligned and "--check-above" not in aligned
    # a search that stopped with a gap has no largest batch yet: only a lower bound
    gap = lookup.describe({**row, "first_not_fitting": "540", "converged": "False"})
    assert "at least 184 fits, 540 does not" in gap and "largest batch" not in gap
    assert f"--retry-gaps --only model={row['model']}," in gap


def test_the_plan_command_answers_lookup_from_the_table_without_jax():
    """`python -m shared.plan lookup M T R`, the spelling a reader tries first, is the lookup:
    no compiler import, one line and exit 2 for an unknown cell."""
    program = (
        "import atexit, runpy, sys; atexit.register(lambda: print('jax', 'jax' in sys.modules));"
        "runpy.run_module('shared.plan', run_name='__main__')"
    )
    command = [sys.executable, "-c", program, "lookup", "gemma3-1b", "v5e-1", "rollout"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "gemma3-1b rollout on v5e-1: " in done.stdout
    assert done.stdout.strip().endswith("jax False")
    command[-2] = "v9-8"
    bad = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("error: unknown target 'v9-8'")


def test_lookup_piped_into_a_reader_that_stops_early_ends_without_a_traceback():
    """`python -m shared.plan lookup M T R | head -1`: the reader closes the pipe after one
    line, and the rest of the answer meets a broken pipe; it ends quietly (exit 1), no
    traceback on the terminal."""
    command = [sys.executable, "-m", "shared.plan", "lookup", "gemma2-2b", "v5e-1", "rollout"]
    with subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0
    ) as lookup:
        lookup.stdout.close()  # a reader gone before the first line
        _, err = lookup.communicate(timeout=60)
    assert lookup.returncode == 1 and b"Traceback" not in err, err.decode()


def test_the_figure_colours_each_cell_by_its_verdict(tmp_path):
    from shared.plan.atlas import figure

    assert figure.state(None) == ("not yet", "")
    assert figure.state(_row("gemma3-1b", "v5e-1", status="error", error="x"))[0] == "failed"
    assert figure.state(_row("gemma3-1b", "v5e-1", max_batch=0)) == ("none", "0")
    assert figure.state(_row("gemma3-1b", "v5e-1", max_batch=8, at_least=True)) == ("fits", "≥8")
    coarse = _before_units(_row("llama3.1-8b", "v5e-8", "lora-train", max_batch=0))
    assert figure.state(coarse) == ("may fit more", "0?")
    one_mesh = _row("qwen3-8b", "tpu7x-8", "lora-train", max_batch=40, first_not_fitting=44)
    one_mesh.update(mesh="4x2", mesh_answers={"4x2": 40}, mesh_ceilings={"4x2": 64, "8x1": 64})
    assert figure.state(one_mesh) == ("may fit more", "40?")
    asked = {**one_mesh, "mesh_answers": {"4x2": 40, "8x1": 32}}
    assert figure.state(asked) == ("fits", "40")
    unchecked = _before_the_check(asked)  # the page says 40?
    assert atlas.needs_check(unchecked) and figure.state(unchecked) == ("may fit more", "40?")
    rows = [_row("gemma3-1b", "v5e-1", max_batch=208, first_not_fitting=216)]
    path = tmp_path / "figures" / "atlas.png"
    figure.write(path, rows, ["gemma3-1b", "gemma3-27b"], ["v5e-1", "v6e-1"], ["rollout", "grpo"])
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_shards_split_the_cells_left_and_a_bad_shard_is_one_line(tmp_path, monkeypatch, capsys):
    """Two runs with --shard 1/2 and 2/2 share the grid: each computes every other cell left
    (here none is left, so both only render); a malformed shard is refused before any work."""
    from shared.plan.atlas import cli

    store = tmp_path / "atlas.jsonl"
    for target in ("v5e-1", "v6e-1"):
        atlas.append_row(store, _row("gemma3-1b", target, versions=plan.versions()))
    outputs = tmp_path / "page.md", tmp_path / "table.csv", tmp_path / "atlas.png"
    argv = ["--models", "gemma3-1b", "--targets", "v5e-1,v6e-1", "--recipes", "rollout"]
    argv += ["--store", str(store), "--md", str(outputs[0]), "--csv", str(outputs[1])]
    argv += ["--figure", str(outputs[2])]
    for shard in ("1/2", "2/2"):
        assert cli.main([*argv, "--shard", shard]) == 0
        assert f"0 cells to compute (2 selected, shard {shard[0]} of 2)" in capsys.readouterr().out
    # a run renders the whole atlas, not the cells it was narrowed to compute
    assert "| qwen3-30b-a3b |" in outputs[0].read_text()
    assert cli.parse_shard("2/3") == (2, 3)
    for bad in ("0/2", "3/2", "2", "a/b"):
        with pytest.raises(BadInput, match="--shard wants K/N"):
            cli.parse_shard(bad)
    # the atlas is libtpu's defaults: a run under a libtpu flag is refused before it computes
    # anything (its rows would show that flag's answers as the default's); rendering is not
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "--xla_tpu_offload_gather_to_sparsecore=false")
    before = store.read_text()
    with pytest.raises(BadInput, match="LIBTPU_INIT_ARGS is set .*unset it"):
        cli.main(argv)
    assert store.read_text() == before
    assert cli.main([*argv, "--render-only"]) == 0


def test_a_stored_answer_lacking_its_check_and_a_mesh_gets_both_in_one_run(
    tmp_path, monkeypatch, capsys
):
    """--check-above takes a stored answer up where it left off, one kind of work after the
    other: the check above it, then the mesh it left unasked, each stored as it comes, so the
    cell leaves the run finished (until 2026-11-29 a run did one kind a cell, and the
    check's row kept its '?' until another run asked the mesh)."""
    from shared.plan.atlas import cli

    store = tmp_path / "atlas.jsonl"
    checked = {**_left_1x8_unasked(), "versions": plan.versions()}
    stored = _before_the_check(checked)
    atlas.append_row(store, stored)
    works = []

    def alone(cell, work):
        works.append(work.func)
        date = f"2026-11-29T0{len(works)}:00:00Z"
        if work.func is atlas.check_row:
            return {**checked, "date": date}  # 8 and 12 refused: the answer stands
        return {**checked, "date": date, "mesh_answers": {**checked["mesh_answers"], "1x8": "<5"}}

    monkeypatch.setattr(cli, "run_cell_alone", alone)
    argv = ["--models", "llama3.1-8b", "--targets", "v5e-8", "--recipes", "lora-train"]
    argv += ["--store", str(store), "--md", str(tmp_path / "page.md")]
    argv += ["--csv", str(tmp_path / "table.csv"), "--figure", str(tmp_path / "atlas.png")]
    assert cli.main([*argv, "--check-above"]) == 0
    assert works == [atlas.check_row, atlas.mesh_row]
    rows = atlas.read_store(store)
    assert len(rows) == 3 and not atlas.todo(
        atlas.cells(["llama3.1-8b"], ["v5e-8"], ["lora-train"]), rows, plan.versions()
    )
    assert capsys.readouterr().out.count("[1/1] lora-train llama3.1-8b on v5e-8") == 2


@pytest.mark.parametrize("status", ["ok", "error"])
def test_retry_gaps_closes_a_stored_gap_and_keeps_the_row_when_that_fails(
    tmp_path, monkeypatch, capsys, status
):
    """--retry-gaps hands a stored gap to gap_row (compiles inside it alone), not to a whole
    new search; where closing it fails, the stored answer stands and nothing is appended."""
    from shared.plan.atlas import cli

    store = tmp_path / "atlas.jsonl"
    stored = _row("gemma3-1b", "v5e-1", converged=False, versions=plan.versions())
    atlas.append_row(store, stored)
    works = []

    def alone(cell, work):
        works.append(work)
        if status == "error":  # as run.py's error rows: no answer, no summary
            return {"status": status, "error": "RuntimeError: x", "wall_s": 1.0}
        return {**stored, "converged": True}

    monkeypatch.setattr(cli, "run_cell_alone", alone)
    argv = ["--models", "gemma3-1b", "--targets", "v5e-1", "--recipes", "rollout"]
    argv += ["--store", str(store), "--md", str(tmp_path / "page.md")]
    argv += ["--csv", str(tmp_path / "table.csv"), "--figure", str(tmp_path / "atlas.png")]
    assert cli.main([*argv, "--retry-gaps"]) == 0
    assert works[0].func is atlas.gap_row and works[0].args == (stored,)
    rows = atlas.read_store(store)
    assert len(rows) == (2 if status == "ok" else 1)
    if status == "error":
        assert "closing the gap failed, RuntimeError: x" in capsys.readouterr().out


def test_a_search_near_an_atlas_cell_names_it_and_still_compiles(tmp_path, monkeypatch, capsys):
    """A --max-batch whose settings differ from a committed cell's in a field or two (the
    rollout's cache_size left unset, where the recipe holds 1312 slots) is told the cell's
    answer and the lookup before its own search compiles; three fields apart, a pinned mesh,
    an older search's row or other versions say nothing."""
    from shared.plan import __main__ as cli
    from shared.plan.atlas import answer

    store = tmp_path / "atlas.jsonl"
    atlas.append_row(store, _row("gemma3-1b", "v5e-8", "rollout", versions=plan.versions()))
    request = plan.Request("rollout", "gemma3-1b", "v5e-8")  # cache_size None: prompt + steps
    row, differences = answer.nearby_cell(request, store)
    assert row["max_batch"] == 8 and differences == {"cache_size": (1312, None)}
    assert answer.recipe_of(request) is None  # near, not the cell: the search compiles
    two_apart = dataclasses.replace(request, steps=512)
    assert answer.nearby_cell(two_apart, store)[1]["steps"] == (1024, 512)
    assert answer.nearby_cell(dataclasses.replace(two_apart, prompt_len=128), store) is None
    assert answer.nearby_cell(dataclasses.replace(request, mesh="8x1"), store) is None
    other_versions = tmp_path / "other.jsonl"
    old = _row("gemma3-1b", "v5e-8", "rollout", versions=VERSIONS | {"jax": "0"})
    atlas.append_row(other_versions, old)
    assert answer.nearby_cell(request, other_versions) is None
    coarse = tmp_path / "coarse.jsonl"  # an older search's row (1x8 stepped by 8): a "?" cell
    older = _row("gemma3-1b", "v5e-8", "rollout", mesh_answers={"8x1": 8, "1x8": 0})
    atlas.append_row(coarse, _before_units({**older, "versions": plan.versions()}))
    assert answer.nearby_cell(request, coarse) is None

    class Searched(Exception):
        pass

    def search(*args, **kwargs):
        raise Searched

    nearby = answer.nearby_cell
    monkeypatch.setattr(answer, "nearby_cell", lambda r: nearby(r, store))
    monkeypatch.setattr(plan, "max_batch", search)
    with pytest.raises(Searched):
        cli.main(["rollout", "--model", "gemma3-1b", "--target", "v5e-8", "--max-batch"])
    note = capsys.readouterr().out
    assert "the committed atlas answers at once with --cache-size 1312 (you asked " in note
    assert "--cache-size unset): gemma3-1b on v5e-8" in note
    assert "python -m shared.plan lookup gemma3-1b v5e-8 rollout; compiling" in note


def test_a_search_that_is_an_atlas_cell_is_answered_from_the_store(tmp_path, monkeypatch):
    """Only the exact cell answers: its recipe's settings, the same versions and steps (by
    default each mesh's least batch), libtpu's default flags; any other flag (a longer
    sequence, a mesh, a fast compile, a libtpu flag) leaves the search to the compiler."""
    from shared.plan.atlas import answer

    request = plan.Request("lora-train", "gemma3-1b", "v5e-1", seq=2048, lora_rank=16)
    assert answer.recipe_of(request) == "lora-train"
    for other in ({"seq": 4096}, {"mesh": "1x1"}, {"fast": True}, {"remat": "block"}):
        assert answer.recipe_of(dataclasses.replace(request, **other)) is None
    assert answer.recipe_of(dataclasses.replace(request, workload="forward")) is None
    store = tmp_path / "atlas.jsonl"
    atlas.append_row(
        store, _row("gemma3-1b", "v5e-1", "lora-train", multiple_of=1, versions=plan.versions())
    )
    row = answer.committed_search(request, None, store)
    assert row["max_batch"] == 8 and row["recipe"] == "lora-train"
    assert answer.committed_search(request, 1, store) == row  # the default's step, asked for
    assert answer.committed_search(request, 8, store) is None  # another unit
    # a libtpu flag changes what compiles (GRPO on a tpu7x-8 with the SparseCore gather offload
    # off compiles where the default fails): the row compiled without it is no answer
    with monkeypatch.context() as flagged:
        flagged.setenv("LIBTPU_INIT_ARGS", "--xla_tpu_offload_gather_to_sparsecore=false")
        assert answer.committed_search(request, None, store) is None
        assert answer.nearby_cell(dataclasses.replace(request, seq=4096), store) is None
    assert answer.nearby_cell(dataclasses.replace(request, seq=4096), store)[0] == row
    atlas.append_row(
        store, _row("gemma3-1b", "v6e-1", "lora-train", versions=VERSIONS | {"jax": "0"})
    )
    other = dataclasses.replace(request, target="v6e-1")
    assert answer.committed_search(other, None, store) is None
    # a v5e-8 row that stepped each mesh by 8 answers --multiple-of 8, not the default search,
    # which asks 1x8 for batch 1
    coarse = _before_units(
        _row(
            "gemma3-1b",
            "v5e-8",
            "lora-train",
            max_batch=0,
            mesh_answers={"8x1": 0, "1x8": 0},
            versions=plan.versions(),
        )
    )
    atlas.append_row(store, coarse)
    on_v5e_8 = dataclasses.replace(request, target="v5e-8")
    assert answer.committed_search(on_v5e_8, None, store) is None
    assert answer.committed_search(on_v5e_8, 8, store)["max_batch"] == 0


def test_a_cell_says_where_the_compiler_failed_and_lookup_words_it():
    """GRPO of gemma3-1b on a tpu7x-8: libtpu 0.0.42.1 fails inside itself at 200 and 208
    (a RET_CHECK in its SparseCore gather emitter). The search goes on below (shared.plan.
    search); the cell shows its answer with where the compiler failed, not "failed", and the
    lookup says so in words, with no failing batch to name."""
    from shared.plan.atlas import lookup
    from shared.plan.atlas.render import cell_text

    message = "INTERNAL: RET_CHECK failure (gather_emitter.cc:5360)"
    errors = [{"batch": b, "error": message, "mesh": "8x1"} for b in (200, 208)]
    errors.append({"batch": 196, "error": message, "mesh": "4x2"})  # another mesh's question
    row = _row("gemma3-1b", "tpu7x-8", "grpo", max_batch=192, first_not_fitting=None)
    row.update(compiler_errors=errors, ceiling=192, mesh="8x1")
    assert cell_text(row) == "✓ 192 (compiler fails at 200)"  # the rest are in the note
    assert not atlas.needs_check(row) and not atlas.has_gap(row)
    assert "the compiler fails at batches 200 and 208 on 8x1; batch 196 on 4x2 (not for" in (
        plan.describe({**row, "workload": "grpo", "mesh_shape": {"fsdp": 8, "tp": 1}})
    )
    none = {**row, "max_batch": 0, "compiler_errors": errors[:1], "units": {"8x1": 8}}
    assert cell_text(none) == "✗ 0 (compiler fails at 200)"
    done = next(r for r in lookup.read_table() if r["status"] == "ok" and r["bytes_per_device"])
    csv = {**done, "max_batch": "192", "first_not_fitting": "", "at_least": "False"}
    csv.update(converged="True", needs_check="False", compiler_errors=f"200: {message}")
    text = lookup.describe(csv)
    assert f"largest batch 192 (at 200: {message}: the compiler fails there" in text, text


def test_the_libtpu_flag_benchmark_states_a_flag_search_beside_the_committed_cell(
    tmp_path, monkeypatch
):
    """shared.plan.atlas.flag (benchmarks/bench_libtpu_flag.py): the cell's own search under a
    libtpu flag, in a child (made up here: a made-up compiler fits up to 24), stored as the atlas
    stores a search, beside the committed answer the lookup gives; a cell that is not
    'recipe,model,target' is one line."""
    from shared.plan.atlas import flag as atlas_flag
    from shared.plan.atlas import lookup
    from shared.report import results

    _made_up_compiler(monkeypatch, lambda r: r.batch <= 24)
    request = plan.Request("lora-train", "gemma3-tiny", "v5e-8", seq=64, lora_rank=4)
    found = json.loads(json.dumps(plan.max_batch(request, ceiling=64, progress=False)))
    flag, out = "--xla_tpu_offload_gather_to_sparsecore=false", tmp_path / "flag.json"
    for point in found["probes"]:  # a verdict names the versions and flags it compiled with
        point["versions"] = {**plan.versions(), "libtpu_init_args": flag}
    asked = []

    def child(flags, argv):
        asked.append((flags, argv))
        return found

    monkeypatch.setattr(atlas_flag, "search_with", child)
    why = "the SparseCore gather offload off"
    head = results.header("benchmarks/bench_libtpu_flag.py", ["--cell", "grpo,gemma3-1b,tpu7x-8"])
    results.write(out, {**head, **atlas_flag.flag_search("grpo,gemma3-1b,tpu7x-8", flag, why)})
    report = json.loads(out.read_text())
    ((flags, child_argv),) = asked
    assert flags == flag and child_argv[:3] == ["-m", "shared.plan", "grpo"]
    assert "--max-batch" in child_argv and report["search_command"].startswith(
        f"LIBTPU_INIT_ARGS={flag} python -m shared.plan grpo --model gemma3-1b"
    )
    committed = lookup.find(lookup.read_table(), "gemma3-1b", "tpu7x-8", "grpo")
    assert report["committed"]["max_batch"] == int(committed["max_batch"])
    assert report["with_flag"]["max_batch"] == found["max_batch"] == 24
    assert report["with_flag"]["libtpu_init_args"] == flag
    assert report["with_flag"]["verdicts"] == len(found["probes"])
    # the lookup says it beside the cell, from the committed file, at the cell's versions only
    monkeypatch.setattr(lookup, "committed", lambda name: json.loads(out.read_text()))
    text = lookup.describe(committed)
    assert f"  with LIBTPU_INIT_ARGS={flag} ({why}): largest batch 24 on " in text
    assert "benchmarks/results/libtpu_flag_grpo_gemma3-1b_tpu7x-8.json" in text
    assert lookup.flag_answer("grpo", "gemma3-1b", "tpu7x-8", {"libtpu": "0.0.52"}) is None
    # a flag search that stopped with a gap says so beside its largest batch
    gapped = json.loads(out.read_text())
    gapped["with_flag"].update(first_not_fitting=40, converged=False)
    monkeypatch.setattr(lookup, "committed", lambda name: gapped)
    assert "largest batch 24 on " in (answer := lookup.describe(committed))
    assert "(24 and not 40, nothing between compiled: it may fit more)" in answer, answer
    monkeypatch.setattr(lookup, "committed", lambda name: json.loads(out.read_text()))
    # and the atlas page, in the note under its recipe's table
    message = "INTERNAL: RET_CHECK failure (gather_emitter.cc:5360)"
    row = _row("gemma3-1b", "tpu7x-8", "grpo", max_batch=128, first_not_fitting=None)
    row.update(compiler_errors=[{"batch": 136, "error": message, "mesh": "8x1"}], mesh="8x1")
    md, _ = render_atlas(
        [{**row, "versions": plan.versions()}], ["gemma3-1b"], ["tpu7x-8"], ["grpo"], "t"
    )
    note = next(line for line in md.splitlines() if message in line)
    said = next(line for line in text.splitlines() if "LIBTPU_INIT_ARGS" in line).strip()
    assert note.endswith(f"; {said}")
    # a cell the compiler answered plainly gets the note too: the flag moves its answer
    plain = _row("gemma3-1b", "tpu7x-8", "grpo", max_batch=128, first_not_fitting=136)
    md, _ = render_atlas(
        [{**plain, "versions": plan.versions()}], ["gemma3-1b"], ["tpu7x-8"], ["grpo"], "t"
    )
    assert any(line.endswith(f"; {said}") for line in md.splitlines()), md
    monkeypatch.setattr(lookup, "committed", lambda name: None)
    assert "LIBTPU_INIT_ARGS" not in lookup.describe(committed)
    with pytest.raises(BadInput, match="give 'recipe,model,target'"):
        atlas_flag.flag_search("gemma3-1b", flag, why)


def test_a_mesh_whose_search_stopped_with_a_gap_says_so_beside_the_answer():
    """gemma3-12b rollouts on a tpu7x-8 under a libtpu flag: the 1x8 mesh's located fits at
    987-993 all failed exactly, the search ran out of rounds, and its answer read "1x8 fits 1"
    beside 2x4's 742, as if 1x8 held one sequence. A mesh's gap is its answer's range."""
    from shared.plan.atlas import lookup
    from shared.plan.search.result import mesh_answer

    stopped = {"max_batch": 1, "first_not_fitting": 987, "multiple_of": 1}
    settled = {**stopped, "first_not_fitting": 2}
    asked = {"max_batch": 0, "first_not_fitting": 744, "multiple_of": 2}
    assert mesh_answer(stopped) == "1..987" and mesh_answer(settled) == 1
    assert mesh_answer(asked) == "<744"
    assert lookup.mesh_answer_text("1..987") == (
        "1 and not 987, nothing between compiled: it may fit more"
    )
    assert lookup.mesh_answer_text("<744") == "fewer than 744"
