"""Plan mode on real TPU topologies (libtpu from PyPI, no TPU): whole-workload verdicts, the
search, the cache, the CLI, and agreement with the field's measurement on a real v5e chip.

Synthetic workloads (elementwise functions of [B, 4096, 131072] bf16 inputs: exactly 1 GiB a
row, in whole TPU tiles) make byte counts exact and compiles fast.
"""

import dataclasses
import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from conftest import cli_exit
from jax.sharding import NamedSharding, PartitionSpec

from shared import plan, report
from shared.errors import BadInput
from shared.hardware import parse_target
from shared.paths import ROOT
from shared.plan import verdict
from shared.plan.__main__ import main as plan_cli
from shared.plan.cli import point_view
from shared.plan.compiler import assigned, compiled, cut_depth, host_memory, workload_bytes
from shared.plan.compiler.executable import Executable, Workload
from shared.plan.mesh import choice as plan_mesh
from shared.plan.search import climb as search_climb
from shared.plan.search import lines as search_lines
from shared.plan.search import locate as search_locate
from shared.plan.search import max_batch as search
from shared.plan.search import meshes as search_meshes
from shared.plan.search import phases as search_phases
from shared.plan.search import result as search_result
from shared.plan.search import view

GIB = 2**30
ROW = (4096, 131072)  # one batch row: 1 GiB of bf16


def _spec(mesh, rows, row=ROW):
    return jax.ShapeDtypeStruct(
        (rows, *row), jnp.bfloat16, sharding=NamedSharding(mesh, PartitionSpec("fsdp"))
    )


def _scale(request, mesh):
    return Workload([Executable("scale", jax.jit(lambda a: a * 2), (_spec(mesh, request.batch),))])


def _small_rows(request, mesh):  # 64 KiB a row: even the search's ceiling fits
    return Workload(
        [Executable("scale", jax.jit(lambda a: a * 2), (_spec(mesh, request.batch, (64, 512)),))]
    )


def _shared_weights(request, mesh):
    """Two executables reading the same 2 GiB of weights, plus a 4 GiB copy nobody passes."""
    weights = _spec(mesh, 2)
    return Workload(
        [
            Executable(
                "small",
                jax.jit(lambda w, x: x * 2 + w[:1]),
                (weights, _spec(mesh, 1)),
                resident_args={0: "weights"},
            ),
            Executable(
                "large",
                jax.jit(lambda w, y: y + w[:1]),
                (weights, _spec(mesh, request.batch)),
                resident_args={0: "weights"},
            ),
        ],
        resident={"reference copy": _spec(mesh, 4)},
    )


def _worst_last(request, mesh):
    """Two 1 GiB executables, then one of `batch` GiB marked likely_worst, as GRPO's update
    is: it runs last, and is compiled first."""
    return Workload(
        [
            Executable("prefill", jax.jit(lambda a: a * 2), (_spec(mesh, 1),)),
            Executable("decode", jax.jit(lambda a: a + 1), (_spec(mesh, 1),)),
            Executable(
                "update",
                jax.jit(lambda a: a * 3),
                (_spec(mesh, request.batch),),
                likely_worst=True,
            ),
        ]
    )


def _fast_steeper(request, mesh):
    """1 MiB a row (2 with the output) when compiled exactly, 1.5 MiB when compiled fast: a
    fast line steeper than the exact one, as fast compiles can be."""
    row = (768, 1024) if request.fast else (512, 1024)
    return Workload(
        [Executable("scale", jax.jit(lambda a: a * 2), (_spec(mesh, request.batch, row),))]
    )


def _fast_flat(request, mesh):
    """1 MiB a row (2 with the output) compiled exactly; compiled fast, 64 rows whatever the
    batch: a fast line with no slope, as gemma3-1b rollouts on a tpu7x-8 had."""
    rows = 64 if request.fast else request.batch
    return Workload(
        [Executable("scale", jax.jit(lambda a: a * 2), (_spec(mesh, rows, (512, 1024)),))]
    )


def _looped(request, mesh):
    """1 GiB of weights multiplied into a [512, 4096] batch `microbatches` times in a loop:
    XLA's cost analysis counts the body once; the executable declares its further passes over
    the weights, as a micro-batched training step does."""
    passes = request.microbatches
    whole = NamedSharding(mesh, PartitionSpec())
    weights = jax.ShapeDtypeStruct((4096, 131072), jnp.bfloat16, sharding=whole)
    batch = jax.ShapeDtypeStruct((512, 4096), jnp.bfloat16, sharding=whole)

    def step(w, x):
        return jax.lax.fori_loop(0, passes, lambda i, y: (y @ w)[:, :4096], x)

    return Workload(
        [
            Executable(
                "looped",
                jax.jit(step),
                (weights, batch),
                resident_args={0: "weights"},
                weight_passes=passes - 1,
            )
        ]
    )


def _tp_hungry(request, mesh, gib=16):
    """`gib` GiB of weights split over tp only (16: whole on 8x1, 8 GiB a device on 4x2) and
    64 MiB a row of batch: on a v5e-8 nothing fits on 8x1."""
    weights = jax.ShapeDtypeStruct(
        (gib, *ROW), jnp.bfloat16, sharding=NamedSharding(mesh, PartitionSpec("tp"))
    )
    return Workload(
        [
            Executable(
                "hungry",
                jax.jit(lambda w, x: x * 2 + w[0, :1, :1]),
                (weights, _spec(mesh, request.batch, (256, 131072))),
                resident_args={0: "weights"},
            )
        ]
    )


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    monkeypatch.setattr(verdict, "CACHE_DIR", tmp_path / "plan-cache")
    monkeypatch.setattr(host_memory, "_ONE_COMPILE", {})
    for name, builder in (
        ("scale", _scale),
        ("small-rows", _small_rows),
        ("shared", _shared_weights),
        ("worst-last", _worst_last),
        ("fast-steeper", _fast_steeper),
        ("fast-flat", _fast_flat),
        ("looped", _looped),
        ("tp-hungry", _tp_hungry),
        ("tp-starved", lambda request, mesh: _tp_hungry(request, mesh, gib=64)),
        ("tp-crowded", lambda request, mesh: _tp_hungry(request, mesh, gib=12)),
        ("tp-light", lambda request, mesh: _tp_hungry(request, mesh, gib=2)),
    ):
        monkeypatch.setitem(plan.WORKLOADS, name, builder)


def test_bytes_per_device_and_verdict():
    point = plan.plan_point(plan.Request("scale", "none", "v5e-1", batch=3))
    exe = point["executables"]["scale"]
    assert exe["argument_bytes"] == exe["output_bytes"] == 3 * GIB
    assert point["bytes_per_device"] == 6 * GIB + exe["temp_bytes"] and point["fits"]
    assert point["hbm_bytes"] == int(15.75 * GIB)  # what libtpu allows, not the datasheet's 16
    assert point["margin_bytes"] == point["hbm_bytes"] - point["bytes_per_device"]
    assert point["versions"]["libtpu"] and point["versions"]["google-tunix"]
    assert point["roofline_lower_bound_s"] > 0 and not point["cached"]


def test_resident_buffers_count_once_and_the_worst_transient_adds():
    point = plan.plan_point(plan.Request("shared", "none", "v5e-1", batch=6))
    assert point["resident"] == {"weights": 2 * GIB, "reference copy": 4 * GIB}
    transient = point["transient_bytes"]  # arguments not resident + outputs + temps
    large = point["executables"]["large"]
    assert transient["small"] == 2 * GIB and transient["large"] == 12 * GIB + large["temp_bytes"]
    assert point["worst"] == "large" and point["bytes_per_device"] == 6 * GIB + transient["large"]
    # Each executable alone (args + outputs + temps) fits 15.75 GiB; the whole run does not.
    assert large["total_bytes"] <= point["hbm_bytes"] and not point["fits"]


def test_combine_arithmetic_with_aliasing_and_a_refusal():
    exes = {
        "step": {
            "argument_bytes": 10,
            "output_bytes": 6,
            "temp_bytes": 3,
            "alias_bytes": 6,
            "total_bytes": 13,
            "refused": None,
        },  # donated state written in place
        "refused": {
            "argument_bytes": 0,
            "output_bytes": 0,
            "temp_bytes": 30,
            "alias_bytes": 0,
            "total_bytes": 30,
            "refused": "RESOURCE_EXHAUSTED",
        },
    }
    got = plan.combine(exes, {"weights": 8}, {"step": ["weights"], "refused": ["weights"]})
    assert got["transient_bytes"] == {"step": 10 - 8 + 6 + 3 - 6, "refused": 30 - 8}
    assert got["worst"] == "refused" and got["bytes_per_device"] == 30


def test_the_likely_worst_executable_compiles_first_and_a_failure_skips_the_rest(monkeypatch):
    """A batch that does not fit stops at the executable marked likely_worst (GRPO's update),
    compiled in the first round though it runs last: the others are not compiled. Where it
    fits, all are, and the verdict lists them in the order the workload runs them."""
    monkeypatch.setattr(verdict, "WORKERS", 1)  # one executable a round, as on one core
    failing = plan.plan_point(plan.Request("worst-last", "none", "v5e-1", batch=12))
    assert not failing["fits"] and failing["worst"] == "update"
    assert list(failing["executables"]) == ["update"]
    assert failing["skipped"] == ["prefill", "decode"]
    fitting = plan.plan_point(plan.Request("worst-last", "none", "v5e-1", batch=4))
    assert fitting["fits"] and not fitting["skipped"]
    assert list(fitting["executables"]) == ["prefill", "decode", "update"]


def test_a_tpu7x_compiles_one_executable_at_a_time(monkeypatch):
    """Two compiles at once overflowed a stack in libtpu's SparseCore code generator on a
    tpu7x (verdict.ONE_COMPILE_AT_A_TIME): requests for one compile alone, and a search there
    compiles no partner beside a one-executable step. Each request is one multiply: compiled
    in a moment."""
    pools = []
    pool = verdict.ThreadPoolExecutor
    monkeypatch.setattr(verdict, "ThreadPoolExecutor", lambda n: pools.append(n) or pool(n))
    monkeypatch.setattr(verdict, "WORKERS", 2)
    small = {t: plan.Request("scale", "none", t, batch=8) for t in ("v5p-8", "tpu7x-8")}
    verdict.plan_points([small["v5p-8"], dataclasses.replace(small["v5p-8"], batch=16)])
    verdict.plan_points([small["v5p-8"], small["tpu7x-8"]])
    assert pools == [2, 1]
    step = {"executables": {"step": {}}, "skipped": []}
    assert search_lines.compiles_alone({**step, "target": "v5p-8"})
    assert not search_lines.compiles_alone({**step, "target": "tpu7x-8"})


def test_compiles_go_one_at_a_time_where_two_would_not_fit_the_hosts_memory(monkeypatch):
    """Two exact compiles of gemma3-27b's LoRA step side by side took a 23 GiB machine to 20.7
    GB, and the kernel killed the search (shared.plan.compiler.host_memory): where one compile of
    the workload has taken more than half the free memory, plan_points compiles one at a time; and
    after each round it hands the heap the compiles freed back to the kernel."""
    pools = []
    pool = verdict.ThreadPoolExecutor
    monkeypatch.setattr(verdict, "ThreadPoolExecutor", lambda n: pools.append(n) or pool(n))
    monkeypatch.setattr(verdict, "WORKERS", 2)
    monkeypatch.setattr(host_memory, "available_bytes", lambda: 22 * GIB)
    given_back = []
    monkeypatch.setattr(host_memory, "give_back_freed", lambda *_: given_back.append(1))
    pair = [plan.Request("scale", "none", "v5p-8", batch=b) for b in (8, 16)]
    verdict.plan_points(pair)
    host_memory.record(pair[0], 12 * GIB, verdict.CACHE_DIR)  # as a real compile of it took
    verdict.plan_points([dataclasses.replace(r, batch=r.batch + 1) for r in pair])
    assert pools == [2, 1]
    assert len(given_back) == 2  # after each round (one a call here), the freed heap goes back


def test_sharding_divides_bytes_by_the_mesh_factor():
    one = plan.plan_point(plan.Request("scale", "none", "v6e-1", batch=8))
    eight = plan.plan_point(plan.Request("scale", "none", "v6e-8", batch=8))
    assert eight["devices"] == 8 and eight["mesh_shape"] == {"fsdp": 8, "tp": 1}
    assert one["executables"]["scale"]["argument_bytes"] == 8 * GIB
    assert eight["executables"]["scale"]["argument_bytes"] == GIB


def test_several_requests_compile_together_into_the_verdicts_each_gives_alone():
    """plan_points (a search's two cut depths at once) answers each request as plan_point
    does, in the order asked, a cached one from disk and a mesh of its own for each."""
    requests = [
        plan.Request("scale", "none", "v6e-8", batch=8),
        plan.Request("shared", "none", "v5e-1", batch=6),
        plan.Request("scale", "none", "v5e-1", batch=3),
    ]
    cached = verdict.plan_point(requests[2])
    together = verdict.plan_points(requests)
    strip = (
        "cached",
        "compiled_on",
        "compile_s",
        "executables",
    )  # compile seconds differ run to run
    for request, point in zip(requests, together, strict=True):
        alone = verdict.plan_point(request, use_cache=False)
        assert {k: v for k, v in point.items() if k not in strip} == {
            k: v for k, v in alone.items() if k not in strip
        }
    assert [p["cached"] for p in together] == [False, False, True]
    assert together[2]["bytes_per_device"] == cached["bytes_per_device"]
    assert together[0]["mesh_shape"] == {"fsdp": 8, "tp": 1} and not together[1]["fits"]


def test_search_finds_the_boundary_in_few_compiles():
    result = plan.max_batch(plan.Request("scale", "none", "v5e-1"), progress=False)
    assert (result["max_batch"], result["first_not_fitting"]) == (7, 8)  # 2 x 7 GiB < 15.75
    assert result["converged"] and not result["at_least"] and result["compiles"] <= 6
    exact = [p for p in result["probes"] if not p["fast"]]
    assert {p["batch"] for p in exact} >= {7, 8}  # the answer is an exact compile's verdict


def test_a_search_whose_first_unit_does_not_fit_compiles_twice():
    """1 unit (8 rows: 16 GiB of arguments and outputs) does not fit a v5e: one fast compile
    says so and one exact compile confirms it; no larger batch is tried."""
    result = plan.max_batch(plan.Request("scale", "none", "v5e-1"), multiple_of=8, progress=False)
    assert result["max_batch"] == 0 and result["first_not_fitting"] == 8
    assert [(p["batch"], p["fast"]) for p in result["probes"]] == [(8, True), (8, False)]


@pytest.fixture
def exact_rounds(monkeypatch) -> list[list[int]]:
    """The batches of each round of exact compiles a search makes (one batch, a pair compiled
    at once, or a search's two cut depths), in order: the real verdicts, recorded."""
    rounds, plan_points = [], search.plan_points

    def recorded(requests, use_cache, first=None, waits=None):
        if not any(r.fast for r in requests):
            rounds.append([r.batch for r in requests])
        return plan_points(requests, use_cache=use_cache, first=first)

    monkeypatch.setattr(search, "plan_points", recorded)
    return rounds


def test_exact_points_that_all_fit_step_on_their_own_slope(exact_rounds):
    """The fast line undershoots every exact step by a third; two fitting exact points give the
    exact slope, which lands on the boundary (8064 rows of 2 MiB in 15.75 GiB; the compiler's
    own few MiB put the last fitting batch just under it). The step is one executable, so
    each exact compile has a partner one row away (search_lines.partner), compiled beside it:
    a slope is taken only over points two rows apart or more. Compiled one at a time this took
    5 rounds."""
    result = plan.max_batch(plan.Request("fast-steeper", "none", "v5e-1"), progress=False)
    assert exact_rounds[:3] == [[5376, 5377], [7168, 7169], [8064, 8065]]  # the third: the line
    assert exact_rounds[3] == [8063, 8062]  # 8065 is compiled: the partner is the row below
    assert result["converged"] and len(exact_rounds) == 4 and result["max_batch"] == 8062


def test_a_flat_fast_line_that_overshoots_comes_back_down_in_a_few_compiles(exact_rounds):
    """The atlas's gemma3-1b rollout cell on a tpu7x-8: the fast line had no slope, the
    search went to its ceiling (65536, which does not fit) and crept down 8 rows an exact
    compile until it gave up, then said "not even batch 8 fits". Now the line from the
    located fit to the failure lands near the boundary (8064 rows of 2 MiB in 15.75 GiB), in
    5 rounds of two exact compiles (6 rounds one at a time)."""
    result = plan.max_batch(plan.Request("fast-flat", "none", "v5e-1"), progress=False)
    exact = [p["batch"] for p in result["probes"] if not p["fast"]]
    assert exact[0] == search.CEILING and len(exact_rounds) <= 5, exact
    assert result["converged"] and 8000 <= result["max_batch"] <= 8064


def _fake_compiler(monkeypatch, verdict_of) -> None:
    """The search's compiles answered by `verdict_of(request)` (a made-up compiler)."""
    monkeypatch.setattr(
        search,
        "plan_points",
        lambda requests, use_cache, first=None, waits=None: [verdict_of(r) for r in requests],
    )


def _wider_shapes(monkeypatch, shapes: list[tuple[int, int]]) -> None:
    """The meshes wider than any other, as the search and its mesh chain see them."""
    for module in (search_meshes, plan_mesh):
        monkeypatch.setattr(module, "wider_shapes", lambda request, devices, than: shapes)


def _fake_verdict(request, used: float, usable: float, **fields) -> dict:
    """What search.max_batch reads of a verdict, for searches over made-up compilers."""
    return {
        "batch": request.batch,
        "target": request.target,
        "fast": request.fast,
        "fits": used <= usable,
        "cached": False,
        "bytes_per_device": used,
        "hbm_bytes": usable,
        **fields,
    }


def test_failures_alone_aim_with_their_own_line(monkeypatch):
    """The atlas's qwen3-8b rollout cell on a v6e-1 (benchmarks/results/plan_qwen3_8b_rollout.json):
    the cut line crossed the HBM at 92, where the weights and KV cache alone did not fit
    (arithmetic: 31.83 GiB), and every exact compile below failed until 39. Aimed from the cut
    line's fit at 37, which its low bytes made steep, they crept 88, 53, 47, 44, 42, 41 and
    stopped at MAX_EXACT with a gap. Fake verdicts with that cell's bytes (compiled: 17 GiB +
    0.36 a row; floor: 15.26 + 0.1803 a row; located: 0.4 a row to 8, then 0.14): two
    compiled failures' own line lands at the boundary."""
    usable = 31.25 * GIB

    def verdict_of(request):
        b = request.batch
        floor = (15.26 + 0.1803 * b) * GIB
        if request.fast:
            return _fake_verdict(
                request, (16 + 0.4 * min(b, 8) + 0.14 * max(b - 8, 0)) * GIB, usable
            )
        if floor > usable:
            return _fake_verdict(request, floor, usable, compiled=False)
        return _fake_verdict(request, (17.0 + 0.36 * b) * GIB, usable)

    _fake_compiler(monkeypatch, verdict_of)
    result = plan.max_batch(plan.Request("scale", "none", "v6e-1"), progress=False)
    exact = [p["batch"] for p in result["probes"] if not p["fast"]]
    assert (result["max_batch"], result["first_not_fitting"]) == (39, 40)
    assert len(exact) <= 5, exact


def _cut_rollout_verdict(request, usable: float) -> dict:
    """A made-up rollout of the atlas's qwen3-8b on a v5p-8, in GiB, from its cut and whole
    verdicts (`request.layers` of 36, None for all): weights 2.32 + 0.36 a layer; prefill's
    transient bytes 8.53 + 1.535 a layer for 1140 rows, decode's 0.02 + 2.895 (its KV cache),
    both in proportion to the rows. Prefill is the worst at 2 and 4 layers, decode at 36."""
    layers, share = request.layers or 36, request.batch / 1140
    resident = (2.32 + 0.36 * layers) * GIB
    transient = {
        "prefill": share * (8.53 + 1.535 * layers) * GIB,
        "decode": share * (0.02 + 2.895 * layers) * GIB,
    }
    used = resident + max(transient.values())
    return _fake_verdict(request, used, usable, resident_bytes=resident, transient_bytes=transient)


def test_each_executable_is_carried_to_full_depth_on_its_own_line():
    """The atlas's qwen3-8b rollout cell on a v5p-8 located with cut compiles at 2 and 4
    layers (until 2026-11-28) where prefill is the worst executable; at 36 layers decode is.
    The line through each depth's worst said 79.1 GiB at 1140 rows, 34% under the compiler's,
    and sent the first exact compiles to 1436 and 1212, far over the HBM. Each executable on
    its own line (decode's: 119.7 GiB there) comes near the compiler's bytes."""
    usable = 95.74 * GIB
    shallow, deep = (
        _cut_rollout_verdict(plan.Request("scale", "none", "v5p-8", batch=1140, layers=d), usable)
        for d in (2, 4)
    )
    assert cut_depth.carried_to_depth(shallow, deep, (2, 4), 36) / GIB == pytest.approx(
        119.7, abs=0.2
    )


@pytest.mark.parametrize("row, bend, answer", [(0.02, 0.0005, 121), (0.03, 0.0003, 137)])
def test_bytes_that_bend_upward_are_bracketed_without_a_gap(monkeypatch, row, bend, answer):
    """The atlas's gemma4-e4b rollout cell on a v6e-8: flat bytes at 8 and 16 (20.09 GiB: the
    compiler's fixed workspace over the weights) aimed the search at its ceiling, answered by
    arithmetic; past it the bytes bend upward, so every line from a fit to the failure at 1072
    landed below the boundary: 928, 968, 992 fit, and the search stopped with a gap after
    "8 exact compiles", one of them the free arithmetic answer. Fake verdicts of that shape
    (6 GiB of weights, 5 GiB of workspace until the rows' bytes outgrow it, the floor seeing
    the weights and the rows' arguments): the Illinois rule (search_lines.illinois) halves
    the kept failure's weight, and the search ends at the boundary."""
    monkeypatch.setitem(plan.WORKLOADS, "weighty", lambda r, mesh: _tp_hungry(r, mesh, gib=6))
    usable = 15.75 * GIB

    def verdict_of(request):
        b = request.batch
        floor = (6 + row * b) * GIB
        if not request.fast and floor > usable:
            return _fake_verdict(request, floor, usable, compiled=False)
        return _fake_verdict(request, (6 + max(5.0, row * b + bend * b * b)) * GIB, usable)

    _fake_compiler(monkeypatch, verdict_of)
    result = plan.max_batch(plan.Request("weighty", "none", "v5e-1"), progress=False)
    assert (result["max_batch"], result["first_not_fitting"]) == (answer, answer + 1)
    assert result["converged"] and result["checked_above"] == answer + 2
    assert result["compiles"] <= 1 + search.MAX_EXACT + 1  # the located unit, rounds, the check


def test_a_compiler_that_squeezes_near_the_hbm_is_bracketed_by_steps_not_lines(monkeypatch):
    """Near the HBM the exact compiler works to fit and its bytes stop growing (the atlas's
    gemma3-1b full fine-tune on a v5p-8: 97-101 of 102.8 GB from batch 120 to 184), and a batch
    past the squeeze asks for far more than a line (540: 304 GB). Regula falsi through such
    points crept one unit at a time (160, 164, 168, 176, 184) and ran out of compiles with a gap
    to 540. Fake verdicts on a v6e-8 (unit 8): the fast line grows 21 MiB a row; exact ones
    that fit sit at 98% of the HBM up to 1896 rows; beyond, the compiler asks for 3x the line."""
    target = plan.Request("scale", "none", "v6e-8")
    usable = parse_target("v6e-8").chip.hbm_bytes_per_device

    mib_a_row = [21]

    def line(batch):
        return GIB + batch * mib_a_row[0] * 2**20

    def verdict_of(request):
        fits = line(request.batch) <= usable if request.fast else request.batch <= 1896
        used = line(request.batch) if request.fast else min(line(request.batch), 0.98 * usable)
        if not fits:
            used = 3 * line(request.batch)
        return _fake_verdict(request, used, usable)

    _fake_compiler(monkeypatch, verdict_of)
    result = plan.max_batch(target, progress=False)
    exact = [p["batch"] for p in result["probes"] if not p["fast"]]
    assert len(exact) <= search.MAX_EXACT and result["max_batch"] <= 1896
    assert result["first_not_fitting"] - result["max_batch"] <= 0.03 * 1896, exact
    # a fast line that crosses far past the squeeze: its located fit at the batch whose exact
    # compile fails is no low end (the line from it to that failure divided by zero)
    mib_a_row[0] = 10
    result = plan.max_batch(target, progress=False)
    assert 0 < result["max_batch"] <= 1896 < result["first_not_fitting"]


def test_a_squeeze_above_an_exact_low_end_gallops(monkeypatch):
    """A search whose first exact question fits (mesh_row, a narrower mesh's tie question)
    locates nothing where the steepest line through that fit crosses the HBM within a unit
    above it, so it has no located slope to see the compiler's squeeze by. sft gemma3-1b on a
    4x2 v6e-8 fit 84, 88 and 92 exactly with flat bytes, then aimed that flat line at 120 and
    124 (both far over). Made-up compiler on a v6e-8 (unit 8): exact fits sit at 99.9% of the
    HBM up to 1700 rows, 63 MiB a row beyond; asked first at 1504, the search steps up from
    its fits by the gallop (the steepest line's slope is the reference), not by their line."""
    usable = parse_target("v6e-8").chip.hbm_bytes_per_device

    def verdict_of(request):
        used = 0.999 * usable if request.batch <= 1700 else 3 * request.batch * 21 * 2**20
        return _fake_verdict(request, used, usable)

    _fake_compiler(monkeypatch, verdict_of)
    request = plan.Request("scale", "none", "v6e-8")
    result = search.searcher(request, progress=False)((8, 1), exact_from=1504)
    exact = [p["batch"] for p in result["probes"] if not p["fast"]]
    assert (result["max_batch"], result["first_not_fitting"]) == (1696, 1704), exact
    assert max(exact) <= 1504 * search_lines.GALLOP**2, (
        exact
    )  # no aim at a flat line's far crossing
    assert len(exact) <= 10, exact  # 1504, 1512, 1888, halving to 1696 and 1704, the checks


def _locating_compiler(monkeypatch, verdict_of, probe_of) -> None:
    """Every search compile through made-up functions: exact verdicts (`verdict_of`) and
    probes at buffer assignment (`probe_of`), which locate on every mesh."""
    _fake_compiler(monkeypatch, verdict_of)
    monkeypatch.setattr(search, "locates_at_assignment", lambda request, shape: True)
    monkeypatch.setattr(
        search,
        "assigned_points",
        lambda requests, use_cache, finish=False: [probe_of(r) for r in requests],
    )


def _squeezing_compiler(monkeypatch, answer: int, probe_answer: int) -> list[tuple[int, bool]]:
    """A made-up compiler shaped like GRPO of gemma3-1b on an 8x1 v6e-8 (33.6 GB a chip): 0.45
    GB a row to 64 rows, then squeezed to 31.3-31.9 GB up to `answer`, 34.7 GB and more past
    it; probes at buffer assignment squeeze alike, 0.8% under, up to `probe_answer`. Every
    search compile goes through it: returns the exact ones, (batch, fits), in order."""
    usable, exact = 33.55e9, []

    def used(batch: int, last_fit: int) -> float:
        if batch <= 64:
            return 1.5e9 + 0.44e9 * batch
        return 31.3e9 + 0.004e9 * batch if batch <= last_fit else 34.7e9 + 0.26e9 * batch

    def verdict_of(request):
        point = _fake_verdict(request, used(request.batch, answer), usable)
        exact.append((request.batch, point["fits"]))
        return point

    def probe_of(request):
        bytes_ = 0.992 * used(request.batch, probe_answer)
        return {**_fake_verdict(request, bytes_, usable), "probe": "assigned"}

    _locating_compiler(monkeypatch, verdict_of, probe_of)
    return exact


@pytest.mark.parametrize("beside_aim, room", [(True, 2), (False, 2), (True, 1)])
def test_a_near_aim_is_located_beside_one_unit_above_and_the_round_takes_both_compiles(
    monkeypatch, beside_aim, room
):
    """gemma3-27b LoRA on a v5p-8 (2x2) located 6 alone, one core idle for 133 s, then compiled
    8 and 10 exactly beside 6's finishing compile. Where the steepest line crosses the HBM
    within 8 units, the unit above the aim is located beside it (its child compiling on, as
    the aim's does), and the first exact round takes both children's compiles, compiling in
    this process only the check above while they finish. Made-up one-executable step on a
    v5e-1: 2.5 GiB a row (6 fit, 7 do not), located 1% under; BESIDE_AIM off, as before, and
    where the machine's memory holds one compile at a time (host_memory), the aim alone."""
    monkeypatch.setattr(search_locate, "BESIDE_AIM", beside_aim)
    monkeypatch.setattr(host_memory, "compiles_at_once", lambda requests, wanted, folder: room)
    usable, events, left = 15.75 * GIB, [], set()

    def plan_points(requests, use_cache, first=None, waits=None):
        events.append(("exact", [r.batch for r in requests]))  # lowered, then each one waited
        for request in requests:
            (waits or {}).get(request, lambda: None)()
        return [_fake_verdict(r, 2.5 * r.batch * GIB, usable) for r in requests]

    def assigned_points(requests, use_cache, finish=False):
        events.append(("located", [r.batch for r in requests]))
        left.update(requests if finish else ())
        return [
            {**_fake_verdict(r, 0.99 * 2.5 * r.batch * GIB, usable), "workload_executables": 1}
            for r in requests
        ]

    def stop_finishing(keep=()):
        left.intersection_update(keep)

    def finish_compile(request):
        events.append(("finished", request.batch))
        left.discard(request)

    monkeypatch.setattr(search, "plan_points", plan_points)
    monkeypatch.setattr(search, "locates_at_assignment", lambda request, shape: True)
    monkeypatch.setattr(search, "assigned_points", assigned_points)
    monkeypatch.setattr(assigned, "finishing", lambda request: request in left)
    for module in (search, assigned):
        monkeypatch.setattr(module, "stop_finishing", stop_finishing)
    monkeypatch.setattr(assigned, "finish_compile", finish_compile)
    result = search.searcher(plan.Request("scale", "none", "v5e-1"), progress=False)((1, 1))
    assert (result["max_batch"], result["first_not_fitting"]) == (6, 7)
    if beside_aim and room == 2:
        assert events == [
            ("located", [1]),
            ("located", [6, 7]),
            ("exact", [8]),  # the check above, while 6 and 7 finish in their children
            ("exact", [6, 7]),  # their verdicts lowered, then read from the children's compiles
            ("finished", 6),
            ("finished", 7),
        ]
    else:
        assert events == [
            ("located", [1]),
            ("located", [6]),
            ("exact", [7, 8]),
            ("exact", [6]),
            ("finished", 6),
        ]
    assert not left


@pytest.mark.parametrize("probe_answer", [120, 128])
def test_a_missed_first_round_climbs_by_probes_and_compiles_exactly_at_the_boundary(
    monkeypatch, probe_answer
):
    """GRPO of gemma3-1b on an 8x1 v6e-8 fit 72, 80, 88, 104, 112 and 120 exactly (200-245 s
    each, the compiler squeezing at 31.3-31.9 of 33.6 GB) before 128 failed. Where the first
    exact round misses, probes at buffer assignment (44-46 s) climb to the boundary, and the
    exact compiles confirm it there: two that fit, the failure and the check above. Where the
    probes' boundary is a unit above the exact one (their bytes a little under), the exact
    failure there moves the answer down: it is always the exact compiles'."""
    exact = _squeezing_compiler(monkeypatch, answer=120, probe_answer=probe_answer)
    result = search.searcher(plan.Request("scale", "none", "v6e-8"), progress=False)((8, 1))
    assert (result["max_batch"], result["first_not_fitting"]) == (120, 128), exact
    fitting = [b for b, fits in exact if fits]
    assert fitting == [72, 120], exact  # the first round, then the answer
    assert [b for b, fits in exact if not fits] == [128, 136], exact
    located = [p["batch"] for p in result["assigned_probes"]]
    assert len(located) == len(set(located)) and max(located) <= 160, str(located)  # no repeat

    exact.clear()  # the exact rounds aimed by lines alone, as before: they creep up the squeeze
    monkeypatch.setattr(search_climb, "MAX_LOCATED", 0)
    result = search.searcher(plan.Request("scale", "none", "v6e-8"), progress=False)((8, 1))
    assert result["max_batch"] == 120 and sum(fits for _, fits in exact) >= 5, exact


def test_a_climb_reads_its_probes_at_the_exact_bytes_where_they_sat_under(monkeypatch):
    """Rollouts of gemma3-12b on a 1x8 v6e-8 (unit 1): probes at buffer assignment put 300-305
    rows under the 33.55 GB allowed, the exact compiles 16% over them (38.14-38.72 GB), so
    each exact compile at a located fit failed and the climb stopped one unit lower each time:
    305, 304, 303, 302, 301, 300 failed in a row. Made-up compiler with that shape: the probes
    3 GB + 0.1 a row, the exact compiles (run to their end: refused none) 15-16% more, so 305
    rows are located under the HBM and 261 is the exact answer. Read at the exact bytes
    (search_climb.located_under), the climb aims the next exact compile at the boundary."""
    usable, exact = 33.55e9, []

    def located_bytes(batch: int) -> float:
        return 3e9 + 0.1e9 * batch

    def verdict_of(request):
        ratio = 1.12 + 0.00012 * request.batch  # 1.157 at 305 rows, 1.151 at 260
        point = _fake_verdict(request, ratio * located_bytes(request.batch), usable, refused=[])
        exact.append((request.batch, point["fits"]))
        return point

    def probe_of(request):
        return {**_fake_verdict(request, located_bytes(request.batch), usable), "probe": "assigned"}

    _locating_compiler(monkeypatch, verdict_of, probe_of)
    request = plan.Request("scale", "none", "v6e-1")
    result = search.searcher(request, progress=False)((1, 1))
    assert (result["max_batch"], result["first_not_fitting"]) == (261, 262), exact
    failed = [b for b, fits in exact if not fits]
    assert len(failed) <= 4, exact  # the first located fit, the answer's neighbour, the checks
    # a refusal's bytes are where the compiler gave up: no ratio from them
    pair = {"batch": 305, "bytes_per_device": 33.4}
    ran = {305: {"bytes_per_device": 38.7, "refused": []}}
    assert search_climb.located_under(ran, [pair]) == {305: pytest.approx(38.7 / 33.4)}
    refused = {305: {"bytes_per_device": 90.0, "refused": ["prefill"]}}
    assert search_climb.located_under(refused, [pair]) == {}

    exact.clear()  # read as before, the climb creeps down from the located boundary a unit a round
    monkeypatch.setattr(search_climb, "located_under", lambda exact, located: {})
    result = search.searcher(request, progress=False)((1, 1))
    assert sum(not fits for _, fits in exact) > 4, exact


def _refusing_compiler(monkeypatch, under: str = "far") -> list[int]:
    """A made-up compiler shaped like gemma3-12b rollouts on a 1x8 tpu7x-8 under
    --xla_tpu_impure_use_large_2nd_minor_layout_for_x16=false (unit 1, 101.74 GB allowed):
    probes at buffer assignment 3.29 GB + 0.0991 a row, so 993 rows are located under the HBM;
    exact compiles (`under` "far") 3.32 GB + 0.1159 a row (848 fit at 101.47 GB, 864 came to
    103.32: 16% over the probes), so 850 is the answer; past it the compiler refuses as libtpu
    0.0.42.1 did at 987-994, "Used 94.79G of 94.75G hbm" (refused, its bytes a hair over the
    HBM, where it gave up). "hair": the probes sit a hair under the exact bytes instead
    (0.998x), so the located boundary is the exact one or a unit above it. "units": they sit
    four rows' bytes under, and more in between, so that a line through exact fits far below
    aims short, as gemma3-4b's on a 2x4 under the flag did (3894 refused at a located fit, and
    the line through 1946 and 2920 aimed 3674, through 2920 and 3674 3862): 987 is the
    answer. Returns the exact compiles' batches."""
    usable, exact = 101.74e9, []

    def exact_bytes(batch: int) -> float:
        if under == "hair":
            return (3.29e9 + 0.0991e9 * batch) / 0.998
        if under == "units":
            return 3.29e9 + 0.0991e9 * (batch + 4) + 3.3e4 * batch * (993 - batch)
        return 3.32e9 + 0.1159e9 * (batch - 1)

    def verdict_of(request):
        used = exact_bytes(request.batch)
        fits = used <= usable
        point = _fake_verdict(
            request,
            used if fits else usable + 45e6 * (1 + request.batch % 7),
            usable,
            refused=[] if fits else ["prefill"],
        )
        exact.append(request.batch)
        return point

    def probe_of(request):
        located = 3.29e9 + 0.0991e9 * request.batch
        return {**_fake_verdict(request, located, usable), "probe": "assigned"}

    _locating_compiler(monkeypatch, verdict_of, probe_of)
    return exact


@pytest.mark.parametrize(
    "under, answer, compiles",
    [
        ("far", 850, [993, 992, 991, 963, 481, 722, 850, 851, 852]),
        ("units", 987, [993, 992, 991, 963, 977, 987, 988, 989]),
        ("hair", 991, [993, 992, 991]),
    ],
)
def test_a_climb_whose_located_fits_are_refused_thrice_aims_by_exact_fits_alone(
    monkeypatch, under, answer, compiles
):
    """gemma3-12b rollouts on a 1x8 tpu7x-8 under the tile flag (2026-12-03): probes located
    987-993 under the HBM, and each exact compile there was refused with its bytes a hair over
    it (where the compiler gave up, so no ratio of exact to located bytes), so each climb
    stopped one unit under the last refusal: 993, 992, ... 987 refused in a row, the search
    ran out of rounds, and its answer was 1 (848 fits). Three refusals at located fits make the
    climb stop reading probes (search_climb.MISREAD_REFUSALS): one step to where the probes,
    read 3% over, cross the HBM (search_climb.hair_under_step), then halfway down, then the
    line through the exact fits, which lands at the boundary. Probes a few units under find it
    from the step (halving from 0 went 495, 743, 943, 982, 987 and stopped with 988-990 open,
    as gemma3-4b's search did); probes a unit or two under cost what they did: the unit below
    is the answer."""
    exact = _refusing_compiler(monkeypatch, under)
    request = plan.Request("scale", "none", "tpu7x-8")
    result = search.searcher(request, progress=False)((1, 8))
    assert (result["max_batch"], result["first_not_fitting"]) == (answer, answer + 1), exact
    assert exact == compiles, exact


def test_a_climb_that_reads_refused_probes_as_before_creeps_a_unit_a_round(monkeypatch):
    """Without MISREAD_REFUSALS, every climb stops one unit under the last refusal and the
    search runs out of rounds short of the answer (850)."""
    exact = _refusing_compiler(monkeypatch)
    monkeypatch.setattr(search_climb, "MISREAD_REFUSALS", 1 << 30)
    result = search.searcher(plan.Request("scale", "none", "tpu7x-8"), progress=False)((1, 8))
    assert result["max_batch"] != 850, exact


@pytest.mark.parametrize(
    "rollout_gib_a_row, exact_bend, answer", [(0.05, 0, 300), (0.12, 0, 258), (0.05, 0.5, 283)]
)
def test_a_phased_step_compiles_one_phase_below_its_answer_and_every_phase_at_it(
    monkeypatch, rollout_gib_a_row, exact_bend, answer
):
    """GRPO's update is its slowest compile and its worst executable: exact compiles below the
    answer compile one phase alone (request.phases), the worst of the search's latest whole
    verdict, and only the answer compiles every phase. Made-up compiler on a v6e-1 (32 GiB):
    the update takes 2 GiB + 0.1 a row (300 rows fit), the rollout 1 GiB + 0.05 a row. Where
    the rollout takes 0.12 a row, the located point at 300 says it is the worst, and the
    rollout is compiled alone (258 fit). Where exact compiles of the rollout take 0.5 GiB a row
    more above 250 rows (fast ones do not), the update alone fits 300, the whole step there
    does not, and the search goes on below with the rollout alone (283 fit)."""
    phases = {"rollout": ("rollout",), "update": ("update",)}
    monkeypatch.setitem(search_phases.PHASED, "small-rows", (phases, "update"))
    usable = 32 * GIB

    def verdict_of(request):
        bend = 0 if request.fast else exact_bend * max(0, request.batch - 250)
        gib = {
            "update": 2 + 0.1 * request.batch,
            "rollout": 1 + rollout_gib_a_row * request.batch + bend,
        }
        compiled = {k: v for k, v in gib.items() if request.phases in (None, k)}
        worst = max(compiled, key=compiled.get)
        return _fake_verdict(
            request, compiled[worst] * GIB, usable, worst=worst, phases=request.phases
        )

    _fake_compiler(monkeypatch, verdict_of)
    result = plan.max_batch(plan.Request("small-rows", "none", "v6e-1"), progress=False)
    assert (result["max_batch"], result["first_not_fitting"]) == (answer, answer + 1)
    worst = search_result.worst_at_answer(result)
    assert result["converged"] and worst == ("update" if answer == 300 else "rollout")
    exact = [p for p in result["probes"] if not p["fast"]]
    whole = [p["batch"] for p in exact if p["phases"] is None]
    assert [p for p in exact if p["phases"]], "no phase compiled alone"
    # every phase: at the answer and its checks above, and where a phase alone fit 300
    assert set(whole) <= {answer, *search_lines.checks_above(answer, 1, 1), 300}, whole
    assert len(exact) <= 3 + search.MAX_EXACT, [(p["batch"], p["phases"]) for p in exact]


@pytest.mark.parametrize(
    "fixed_temps, row, answer",
    [(0, 5, 1), (4, 1, 5)],  # GiB: what the floor cannot see, fixed and per row; the answer
)
def test_one_unit_past_half_the_room_starts_the_exact_compiles_at_one(
    monkeypatch, fixed_temps, row, answer
):
    """6 GiB of weights (the floor sees them) and activations it cannot see: when one located
    row takes more than half of what the weights leave of 15.75 GiB, the search compiles 1
    and 2 rows exactly instead of locating at 8 (the slowest compile of a training cell: far
    over the HBM). With 5 GiB a row 2 is the failure next to the answer; where fixed temps
    made one row look heavy (4 GiB + 1 a row), 2 fits and the search goes on to the true
    answer. The last compiles are the checks above the answer: two units, and 4 rows."""
    monkeypatch.setitem(plan.WORKLOADS, "weighty", lambda r, mesh: _tp_hungry(r, mesh, gib=6))

    def verdict_of(request):
        used = (6 + fixed_temps + row * request.batch) * GIB
        return _fake_verdict(request, used, 15.75 * GIB)

    _fake_compiler(monkeypatch, verdict_of)
    result = plan.max_batch(plan.Request("weighty", "none", "v5e-1"), progress=False)
    assert (result["max_batch"], result["first_not_fitting"]) == (answer, answer + 1)
    checks = search_lines.checks_above(answer, 1, 1)
    assert [result["checked_above"], result["checked_aligned"]] == checks  # [3, 4], [7, 8]
    assert result["dips"] == []
    probes = [(p["batch"], p["fast"]) for p in result["probes"]]
    assert probes[:3] == [(1, True), (1, False), (2, False)]
    assert probes[-2:] == [(b, False) for b in checks] and len(probes) <= 7


def test_a_one_executable_step_compiles_the_batch_above_each_candidate_beside_it(monkeypatch):
    """A LoRA step is one executable, and an exact compile of it keeps one of two cores busy:
    the search compiles the candidate and one unit above it at once (plan_points). Fake
    verdicts shaped like gemma3-27b LoRA on a v5p-8 (unit 4; 54 GB at 4 rows, 132 at 8, of
    102.8): one exact round, both compiled together, answers 4 (8 does not fit), and the checks
    two units above (12) and at 4 rows a chip (16) fail too. Located at buffer assignment, as a
    real LoRA step is, the first check comes in the same round, behind the pair."""
    monkeypatch.setitem(plan.WORKLOADS, "weighty", lambda r, mesh: _tp_hungry(r, mesh, gib=6))
    usable, rounds = 102.8e9, []

    def verdict_of(request):
        used = 14e9 + 10e9 * request.batch + (0 if request.batch <= 4 else 38e9)
        return _fake_verdict(request, used, usable, executables={"lora_train_step": {}})

    def plan_points(requests, use_cache, first=None, waits=None):
        rounds.append([r.batch for r in requests])
        return [verdict_of(r) for r in requests]

    monkeypatch.setattr(search, "plan_points", plan_points)
    result = plan.max_batch(plan.Request("weighty", "none", "v5p-8"), progress=False)
    assert (result["max_batch"], result["first_not_fitting"]) == (4, 8)
    assert rounds == [[4], [4, 8], [12], [16]]  # located at one unit, the pair, the checks
    assert plan.describe(result).endswith(": 4 (batches 8, 12 and 16 do not)")

    rounds.clear()
    monkeypatch.setattr(search, "locates_at_assignment", lambda request, shape: True)
    monkeypatch.setattr(
        search,
        "assigned_points",
        lambda requests, use_cache, finish=False: [
            {**verdict_of(r), "workload_executables": 1, "probe": "assigned"} for r in requests
        ],
    )
    result = plan.max_batch(plan.Request("weighty", "none", "v5p-8"), progress=False)
    assert (result["max_batch"], result["checked_above"], result["checked_aligned"]) == (4, 12, 16)
    assert rounds == [[4, 8, 12], [16]] and [p["batch"] for p in result["assigned_probes"]] == [4]


def test_an_answer_stands_only_where_two_units_above_it_fail_too(monkeypatch):
    """The compiler's bytes are not monotone in the batch: llama3.1-8b rollouts on a pinned 4x2
    of a v5e-8 took 15.16 GiB at 184 (46 a device), 15.80 at 188 (47), 15.28 at 192 (48), of
    15.75; an odd row a device cost ~0.6 GiB more. The search stopped at "184 (188 does not)"
    where the stored atlas row, compiled along other batches, said 192. Fake verdicts with
    that saw-tooth (4 GiB + 0.1 a row, 0.6 more at odd batches): odd batches fit up to 111,
    even ones up to 116. The search's lines land on 117 and 115, which fail; the check above
    114 finds 116, and the answer says which failure sat below it."""
    usable = 15.75 * GIB

    def verdict_of(request):
        b = request.batch
        return _fake_verdict(request, (4 + 0.1 * b + 0.6 * (b % 2)) * GIB, usable)

    _fake_compiler(monkeypatch, verdict_of)
    result = plan.max_batch(plan.Request("scale", "none", "v5e-1"), progress=False)
    assert (result["max_batch"], result["first_not_fitting"]) == (116, 117)
    assert result["checked_above"] == 118 and result["converged"] and result["dips"] == [115]
    assert "below it did not fit either" in plan.describe(result)


def test_a_check_above_compiles_the_answers_worst_executable_alone_first(monkeypatch):
    """A check above the answer is most likely a failure, so it compiles first the executable
    that was worst at the answer (a rollout's prefill near a v5e-1's HBM), the rest only where
    that fits (gemma3-1b: 376's prefill was refused in 3.2 s while its decode compiled 11.2 s
    beside it). No other compile is asked to."""
    usable, firsts = 15.75 * GIB, {}

    def plan_points(requests, use_cache, first=None, waits=None):
        firsts.update({(r.batch, r.fast): first for r in requests})
        return [
            _fake_verdict(r, (2 + 0.037 * r.batch) * GIB, usable, worst="prefill") for r in requests
        ]

    monkeypatch.setattr(search, "plan_points", plan_points)
    result = plan.max_batch(plan.Request("scale", "none", "v5e-1"), progress=False)
    assert (result["max_batch"], result["checked_above"]) == (371, 373)
    assert firsts[(373, False)] == "prefill"
    assert {k: v for k, v in firsts.items() if k != (373, False)} == dict.fromkeys(
        set(firsts) - {(373, False)}
    )


@pytest.mark.parametrize(
    "row_bytes, exact_over_fast, rounds",
    [
        (400e6, 1.015, [[37, 38], [36], [40]]),  # 37 and 38 fail; 40: the aligned check
        (400e6, 0.985, [[37, 38], [39], [40]]),  # 37 fits: then only the checks above
        (40e6, 1.003, [[372], [371], [373]]),  # a unit under the fast line's error: alone
    ],
)
def test_a_one_device_rollout_compiles_the_unit_above_beside_a_near_candidate(
    monkeypatch, row_bytes, exact_over_fast, rounds
):
    """A rollout on one device is located by fast compiles, and its two executables keep both
    cores busy; where one unit's bytes exceed the fast line's error (search_lines.FAST_LINE_ERROR),
    the unit above the candidate compiles beside it, its worst executable first (qwen3-8b on
    a v6e-1: 39 fit and 40 was refused in one round, 0.78x the search's wall). Fake verdicts
    over 2 GB, the fast line crossing the HBM at 37 (or 372): where the exact bytes sit over
    the fast ones (qwen3-8b's 1.5%), 37 and 38 fail together and the next round is 36, one
    unit under the failure, not half the bracket (the refusal beside is no step down);
    where they sit under, 37 fits and only the checks above are left. At 40 MB a row (gemma3-1b
    on a v5e-1) the candidate compiles alone, as before."""
    usable, firsts, exact_rounds = 15.75 * GIB, {}, []
    executables = {"prefill": {}, "decode": {}}

    def used(batch, fast):
        return (2e9 + row_bytes * batch) * (1 if fast else exact_over_fast)

    def plan_points(requests, use_cache, first=None, waits=None):
        if not any(r.fast for r in requests):
            exact_rounds.append([r.batch for r in requests])
            given = first if isinstance(first, dict) else dict.fromkeys(requests, first)
            firsts.update({r.batch: given.get(r) for r in requests})
        return [
            _fake_verdict(
                r, used(r.batch, r.fast), usable, worst="prefill", executables=executables
            )
            for r in requests
        ]

    monkeypatch.setattr(search, "plan_points", plan_points)
    result = plan.max_batch(plan.Request("scale", "none", "v5e-1"), progress=False)
    best = max(b for b in range(1, 1000) if used(b, fast=False) <= usable)
    assert (result["max_batch"], result["first_not_fitting"]) == (best, best + 1)
    assert exact_rounds == rounds
    if len(rounds[0]) == 2:
        assert firsts[rounds[0][0]] is None and firsts[rounds[0][1]] == "prefill"
        monkeypatch.setattr(search_lines, "ABOVE_WORST_FIRST", False)
        exact_rounds.clear()
        plan.max_batch(plan.Request("scale", "none", "v5e-1"), progress=False)
        assert exact_rounds[0] == [37]  # as before 2026-12-03: the candidate alone


@pytest.mark.parametrize(
    "row_over_floor, fast_rows_grow, located",
    [(1.2, True, 2), (2.5, True, 3), (1.2, False, None)],
)
def test_a_one_device_rollout_locates_its_second_point_along_the_floors_slope(
    monkeypatch, row_over_floor, fast_rows_grow, located
):
    """gemma3-1b rollouts on a v5e-1 were located at 1, 8 and then 426 (after a floor at 514
    the arithmetic answered) before the exact rounds: the KV cache row the floor adds is a
    lower bound on what a row adds, so the line from the located unit at that slope crosses
    the HBM at or above the boundary, and the point there, failing, bounds the line in one
    compile where 8 units and a third point took two (search_locate.FLOOR_AIM). Fake verdicts
    over the 1B's real floor: 1.5 GB of temps and 1.2x the floor's bytes a row. Where a row
    takes 2.5x (qwen3-8b on a v6e-1: 0.37 GB a row, 0.19 of it KV cache), the candidate sits
    under half that point, and a third point is located there. Where the fast line is flat
    (the atlas's 1B cell on a tpu7x-8), the point there fits, is not kept, and the search
    locates at 8 as before."""
    request = plan.Request("rollout", "gemma3-1b", "v5e-1", prompt_len=256, cache_size=1312)
    at_zero, per_row = search_lines.floor_line(request, 1)
    usable, fast_batches = 15.75 * GIB, []

    def used(batch: int, fast: bool) -> float:
        rows = batch if fast_rows_grow or not fast else 1
        return at_zero + 1.5e9 + row_over_floor * per_row * rows

    def verdict_of(request):
        if request.fast:
            fast_batches.append(request.batch)
        return _fake_verdict(request, used(request.batch, request.fast), usable)

    _fake_compiler(monkeypatch, verdict_of)
    result = plan.max_batch(request, progress=False)
    best = max(b for b in range(1, 2000) if used(b, fast=False) <= usable)
    assert (result["max_batch"], result["first_not_fitting"]) == (best, best + 1)
    far = search_lines.crossing(
        {"batch": 1, "bytes_per_device": used(1, True)}, per_row, usable, 1, search.CEILING
    )
    assert fast_batches[:2] == [1, far], fast_batches
    exact = [p["batch"] for p in result["probes"] if not p["fast"]]
    if located:
        assert len(fast_batches) == located and 8 not in fast_batches, fast_batches
        assert all(2 * b < far for b in fast_batches[2:]), fast_batches
        assert len(exact) <= 4, exact  # a fit and a failure a unit apart, then the check
    else:
        assert 8 in fast_batches, fast_batches


def test_a_one_device_rollout_whose_floor_line_passes_the_ceiling_aims_at_the_ceiling(
    monkeypatch,
):
    """Where the floor's line crosses the HBM at or past the search's ceiling, the point
    located there is the ceiling; a fit there is the candidate, compiled exactly next, where
    locating at 8 units first was a compile more (gemma3-tiny at a ceiling of 64: 1, 64 and 8
    located, then 64). Fake verdicts a tenth of the HBM at any batch."""
    monkeypatch.setattr(search, "CEILING", 64)
    request = plan.Request("rollout", "gemma3-1b", "v5e-1", prompt_len=256, cache_size=1312)
    usable, fast_batches = 15.75 * GIB, []

    def verdict_of(request):
        if request.fast:
            fast_batches.append(request.batch)
        return _fake_verdict(request, usable / 10 + request.batch, usable)

    _fake_compiler(monkeypatch, verdict_of)
    result = plan.max_batch(request, progress=False)
    assert (result["max_batch"], result["at_least"]) == (64, True)
    assert fast_batches == [1, 64]
    assert [p["batch"] for p in result["probes"] if not p["fast"]] == [64]


def test_plan_points_first_compiles_that_executable_alone_then_the_rest():
    """verdict.plan_points' `first`: the round compiles that executable alone; without it,
    every executable ready compiles at once (as many as there are workers)."""
    request = plan.Request("rollout", "gemma3-tiny", "v5e-1", batch=8, steps=8, prompt_len=8)
    labels = [exe.label for exe in verdict._Compiling(request).next_group(2)]
    assert sorted(labels) == ["decode", "prefill"]
    first = verdict._Compiling(request, first="decode")
    assert [exe.label for exe in first.next_group(2)] == ["decode"]
    assert [exe.label for exe in first.pending] == ["prefill"]


def test_an_answer_stands_only_where_the_next_aligned_batch_fails_too(monkeypatch):
    """llama3.1-8b rollouts on a 4x2 of a v5e-8 fit 49 and 52 rows a chip but not 50, 51, 53 or
    54: rows that are a multiple of 4 sit on the bytes' trend line, the others above it, and a
    search that stopped at 49 (50 and 51 failing) said 196 where 208 fits. Fake verdicts with
    that shape on one chip (4 GiB + 0.1 a row, 1 GiB more off the multiples of 4): other rows
    fit up to 107, multiples of 4 up to 116. The answer is 116, with 117, 118 and 120 failing."""
    usable = 15.75 * GIB

    def verdict_of(request):
        b = request.batch
        return _fake_verdict(request, (4 + 0.1 * b + (b % 4 > 0)) * GIB, usable)

    _fake_compiler(monkeypatch, verdict_of)
    result = plan.max_batch(plan.Request("scale", "none", "v5e-1"), progress=False)
    assert (result["max_batch"], result["first_not_fitting"]) == (116, 117)
    assert (result["checked_above"], result["checked_aligned"]) == (118, 120)
    assert ": 116 (batches 117, 118 and 120 do not)" in plan.describe(result)


@pytest.mark.parametrize(
    "answer, unit, fsdp, checks",
    [
        (196, 4, 4, [204, 208]),  # 49 rows a chip: 51 and 52
        (192, 4, 4, [200, 208]),  # 48: 50 and 52
        (374, 1, 1, [376]),  # the aligned batch is two units above
        (8, 8, 8, [24, 32]),  # one row a chip on an 8x1: 3 rows, then 4
        (48, 16, 8, [80]),  # two rows a chip a unit: 6 rows; 8 is one unit above, 10 two
    ],
)
def test_the_checks_above_an_answer(answer, unit, fsdp, checks):
    assert search_lines.checks_above(answer, unit, fsdp) == checks


def test_a_located_point_answered_by_arithmetic_is_not_aimed_through(monkeypatch):
    """gemma3-1b rollouts on a v5e-1: fast compiles at 1 and 8 rows cross the HBM at 514, where
    the arguments alone already exceed it, so that point's bytes are a floor, not a compile's.
    Aimed through it, exact compiles went 426, 368, 374, 375. Fake verdicts shaped like that
    cell (28.6 MB a row compiled at small batches, 39.5 near the HBM, exact 0.3% over fast; the
    floor 35 MB a row over the resident weights): the search locates again under the floor's
    crossing, and its first exact compile lands at the boundary, not the floor's crossing."""
    usable = parse_target("v5e-1").chip.hbm_bytes_per_device - 2**28  # 15.75 GiB

    def compiled(batch, fast):
        return 2.1e9 + batch * (39.5e6 if batch > 40 else 28.6e6) * (1 if fast else 1.003)

    def verdict_of(request):
        floor = 1.9e9 + request.batch * 35e6
        if floor > usable:
            used, done = floor, False
        else:
            used, done = compiled(request.batch, request.fast), True
        return _fake_verdict(request, used, usable, compiled=done)

    _fake_compiler(monkeypatch, verdict_of)
    result = plan.max_batch(plan.Request("scale", "none", "v5e-1"), progress=False)
    exact = [p["batch"] for p in result["probes"] if not p["fast"]]
    best = max(b for b in range(1, 1000) if compiled(b, False) <= usable)
    assert (result["max_batch"], result["first_not_fitting"]) == (best, best + 1)
    assert abs(exact[0] - best) <= 0.01 * best and len(exact) <= 4, exact  # 4: the checks
    located = [p for p in result["probes"] if p["fast"]]
    assert not located[2]["compiled"] and located[3]["compiled"]  # located again, compiled


def test_a_deep_model_whose_arguments_exceed_the_chip_is_answered_without_compiling():
    """gemma3-12b's bf16 weights (24 GB) exceed a v5e chip: the atlas's search still compiled
    the model cut to 6 and 12 layers (95 s for gemma3-27b) before arithmetic said no."""
    result = plan.max_batch(
        plan.Request("lora-train", "gemma3-12b", "v5e-1", seq=2048, lora_rank=16), progress=False
    )
    assert result["max_batch"] == 0 and result["compiles"] == 0
    assert not any(p["compiled"] for p in result["assigned_probes"])
    assert plan.describe(result).endswith("(arithmetic, before any compile)")


def test_a_search_starts_on_the_wider_mesh_whose_room_doubles_and_asks_the_narrower_once(
    monkeypatch,
):
    """As gemma4-e4b rollouts on a v5e-8: the rule's 8x1 holds the weights whole (16 GiB, more
    than the chip) and 4x2 halves them, so the search locates and confirms on 4x2 first; 8x1
    is then asked only whether it fits one unit, and arithmetic says no without a compile."""
    _wider_shapes(monkeypatch, [(4, 2)])
    result = search.max_batch(plan.Request("tp-hungry", "none", "v5e-8"), progress=False)
    assert result["mesh_answers"] == {"8x1": 0, "4x2": result["max_batch"]}
    assert result["mesh"] == "4x2" and result["max_batch"] > 0 and result["max_batch"] % 4 == 0
    on_8x1 = [p for p in result["probes"] if p["mesh_shape"]["tp"] == 1]
    assert [(p["batch"], p["fast"], p["compiled"]) for p in on_8x1] == [(8, False, False)]
    on_4x2 = [p for p in result["probes"] if p["mesh_shape"]["tp"] == 2]
    assert (on_4x2[0]["batch"], on_4x2[0]["fast"]) == (4, True)  # located and confirmed
    assert "(mesh 4x2; 8x1 fits none)" in view.describe(result)


def test_a_search_that_fits_nothing_on_any_mesh_answers_on_the_rules_mesh(monkeypatch):
    _wider_shapes(monkeypatch, [(4, 2)])
    result = search.max_batch(plan.Request("tp-starved", "none", "v5e-8"), progress=False)
    assert result["max_batch"] == 0 and result["mesh"] == "8x1"  # the rule's
    assert result["mesh_answers"] == {"8x1": 0, "4x2": 0} and len(result["probes"]) >= 2
    # after a mesh that fit nothing, a wider one is compiled exactly at one unit first, and
    # that failing compile is its whole answer: nothing located on it
    wider = [(p["batch"], p["fast"]) for p in result["probes"] if p["mesh_shape"]["tp"] == 2]
    assert wider == [(4, False)]  # one unit of 4x2: its 4 fsdp devices
    assert result["units"] == {"8x1": 8, "4x2": 4}
    assert view.describe(result).startswith(
        "not even one unit fits for tp-starved none on v5e-8 on any mesh its weights divide "
        "(8x1, 4x2): batch 8 on 8x1, 4 on 4x2 ("
    )


@pytest.mark.parametrize("on_1x8, answer", [(6, {"mesh": "1x8", "max_batch": 6}), (4, None)])
def test_past_a_mesh_that_fits_nothing_each_wider_mesh_is_asked_for_one_unit_more(
    monkeypatch, on_1x8, answer
):
    """As llama3.1-8b LoRA on a v5e-8: nothing fits on 8x1 or 4x2, and 4 rows on 2x4, though
    the room for the batch (tp-hungry's 16 GiB of weights over tp) said 4x2 was the roomiest
    worth searching, and 1x8 does not double 2x4's. Once a mesh fit nothing the room stops
    deciding: 1x8 is asked one exact question, whether it fits 5. Where it fits 6 it is
    searched on and answers; where it fits 4, that one compile is its whole answer and 2x4's
    4 stands. Each mesh's question compiles beside the next mesh's (two cores, one executable
    each): 2x4's one unit beside 1x8's, which 2x4's answer then passed, so 1x8 is asked again,
    and the first of its compiles is counted, never its answer."""
    shapes = [(4, 2), (2, 4), (1, 8)]
    for module in (search_meshes, plan_mesh):
        monkeypatch.setattr(
            module,
            "wider_shapes",
            lambda request, devices, than: [s for s in shapes if s[1] > than[1]],
        )
    usable, most, together = 15.75 * GIB, {"2x4": 4, "1x8": on_1x8}, []

    def plan_points(requests, use_cache, first=None, waits=None):
        together.append([(r.mesh, r.batch) for r in requests if not r.fast])
        return [
            _fake_verdict(
                r, (GIB if r.batch <= most.get(r.mesh, 0) else 16 * GIB), usable, mesh=r.mesh
            )
            for r in requests
        ]

    monkeypatch.setattr(search, "plan_points", plan_points)
    result = search.max_batch(plan.Request("tp-hungry", "none", "v5e-8"), progress=False)
    answer = answer or {"mesh": "2x4", "max_batch": 4}
    assert {k: result[k] for k in answer} == answer
    assert result["units"] == {"8x1": 8, "4x2": 4, "2x4": 2, "1x8": 1}
    assert [("2x4", 2), ("1x8", 1)] in together and [("1x8", 5)] in together
    asked = [(p["batch"], p["fast"]) for p in result["probes"] if p["mesh"] == "1x8"]
    assert asked[:2] == [(1, False), (5, False)]
    assert result["compiles"] == len(result["probes"])  # the unused question counted too
    if on_1x8 == 4:
        assert len(asked) == 2 and result["mesh_answers"]["1x8"] == "<5"


def test_the_mesh_that_reaches_furthest_is_searched_first_and_the_others_asked_once(monkeypatch):
    """As llama3.1-8b rollouts on a v5e-8: the rule's 8x1 holds the weights whole on every chip
    and has little room beside them; 4x2 halves them and reaches furthest by arithmetic
    (mesh.batch_ceiling), so it is searched first and is the answer; 8x1 and 2x4 are then
    asked once each, 8x1 whether it fits as many (with fewer tp it wins a tie), 2x4 whether it
    fits one unit more (one compile each, and neither fits), the two side by side. Weights that
    leave most of the chip free (tp-light) reach furthest on all fsdp, and 4x2 is asked once
    for one unit more."""
    _wider_shapes(monkeypatch, [(4, 2), (2, 4)])
    together, plan_points = [], search.plan_points

    def recorded(requests, **options):
        together.append(sorted((r.mesh, r.batch) for r in requests))
        return plan_points(requests, **options)

    monkeypatch.setattr(search, "plan_points", recorded)
    result = search.max_batch(plan.Request("tp-crowded", "none", "v5e-8"), progress=False)
    answers, largest, ceilings = (
        result["mesh_answers"],
        result["max_batch"],
        result["mesh_ceilings"],
    )
    assert max(ceilings, key=ceilings.get) == "4x2" == result["mesh"]
    asked = -(-largest // 8) * 8  # the least batch 8x1 splits (its unit: 8) that ties 4x2
    above = largest + 2  # 2x4's unit: 2
    assert answers == {"8x1": f"<{asked}", "4x2": largest, "2x4": f"<{above}"}
    for tp, batch in ((1, asked), (4, above)):
        on_it = [(p["batch"], p["fast"]) for p in result["probes"] if p["mesh_shape"]["tp"] == tp]
        assert on_it == [(batch, False)]
    assert together[-1] == [("2x4", above), ("8x1", asked)]  # one call: compiled side by side
    assert f"(mesh 4x2; 8x1 fits fewer than {asked}" in view.describe(result)
    _wider_shapes(monkeypatch, [(4, 2)])
    light = search.max_batch(plan.Request("tp-light", "none", "v5e-8"), progress=False)
    assert light["mesh"] == "8x1" and light["max_batch"] > largest
    on_4x2 = [(p["batch"], p["fast"]) for p in light["probes"] if p["mesh_shape"]["tp"] == 2]
    assert on_4x2 == [(light["max_batch"] + 4, False)]


def test_a_narrower_mesh_that_fits_the_roomier_ones_answer_is_searched_on_and_wins_the_tie(
    monkeypatch,
):
    """Arithmetic says 4x2 doubles 8x1's room (tp-crowded: 12 GiB of weights), so 4x2 is
    searched first; a made-up compiler fits 64 rows on any mesh. Asked for 64 first, 8x1
    fits, so it is searched on above 64 and, with fewer tp, is the answer; that exact fit is
    the line's low end, so nothing under it is located."""
    _wider_shapes(monkeypatch, [(4, 2)])
    usable = 15.75 * GIB
    _fake_compiler(
        monkeypatch,
        lambda r: _fake_verdict(r, GIB + r.batch * (usable - GIB) / 64.5, usable, mesh=r.mesh),
    )
    result = search.max_batch(plan.Request("tp-crowded", "none", "v5e-8"), progress=False)
    assert result["mesh_answers"] == {"8x1": 64, "4x2": 64} and result["max_batch"] == 64
    assert result["mesh_shape"] == {"fsdp": 8, "tp": 1} and result["mesh"] == "8x1"
    on_8x1 = [p for p in result["probes"] if p["mesh"] == "8x1"]
    assert (on_8x1[0]["batch"], on_8x1[0]["fast"]) == (64, False)
    assert min(p["batch"] for p in on_8x1) == 64, [(p["batch"], p["fast"]) for p in on_8x1]


def test_a_narrower_mesh_is_asked_with_the_answers_worst_executable_alone_first(monkeypatch):
    """A narrower mesh has at most half the room of the one searched first, so the one exact
    question it is asked (does it fit that answer too?) most likely fails: it compiles first
    the executable that was worst at the answer, as a check above an answer does."""
    _wider_shapes(monkeypatch, [(4, 2)])
    usable, firsts = 15.75 * GIB, {}

    def plan_points(requests, use_cache, first=None, waits=None):
        firsts.update({(r.mesh, r.batch, r.fast): first for r in requests})
        return [
            _fake_verdict(
                r,
                GIB + r.batch * (usable - GIB) / (64.5 if r.mesh == "4x2" else 40.5),
                usable,
                mesh=r.mesh,
                worst="update",
            )
            for r in requests
        ]

    monkeypatch.setattr(search, "plan_points", plan_points)
    result = search.max_batch(plan.Request("tp-crowded", "none", "v5e-8"), progress=False)
    assert result["mesh_answers"] == {"8x1": "<64", "4x2": 64}
    assert firsts[("8x1", 64, False)] == "update"
    # the checks above 64 on 4x2 (two units, and 20 rows a device) alike; nothing else
    assert [k for k, first in firsts.items() if first] == [
        ("4x2", 72, False),
        ("4x2", 80, False),
        ("8x1", 64, False),
    ]


def test_every_probe_of_a_search_compiles_on_the_mesh_it_answers_for(monkeypatch):
    """A request without a mesh takes the rule's mesh at its own batch, and the rule moves a
    tunix model to a wider tp once its floor outgrows the all-fsdp mesh: a search on 8x1 that
    left its probes' mesh unset answered llama3.1-8b rollouts on a v5e-8 with "8x1 fits 192"
    from verdicts compiled on 4x2 (8x1 holds 18.8 GiB of weights and KV cache at 192, over
    the 15.75). Every probe names its mesh."""
    meshes = set()
    usable = 15.75 * GIB

    def verdict_of(request):
        meshes.add(request.mesh)
        used = GIB + request.batch * (usable - GIB) / 64.5
        return _fake_verdict(request, used, usable, mesh=request.mesh)

    _fake_compiler(monkeypatch, verdict_of)
    # the points located at buffer assignment too (in a child process each, 12 s of this test)
    monkeypatch.setattr(
        search,
        "assigned_points",
        lambda requests, use_cache, finish=False: [
            {**verdict_of(r), "compiled": True, "workload_executables": 2} for r in requests
        ],
    )
    result = search.max_batch(plan.Request("rollout", "gemma3-tiny", "v5e-8"), progress=False)
    assert result["assigned_probes"], "the search located at buffer assignment"
    assert result["max_batch"] == 64 and result["mesh"] == "8x1"  # fewer tp wins the tie
    assert None not in meshes and set(result["mesh_answers"]) == meshes


def test_a_sampled_8b_model_reaches_furthest_on_a_wide_tp_and_a_1b_on_all_fsdp():
    """mesh.batch_ceiling, by arithmetic: llama3.1-8b's weights, whole on every fsdp device of
    a v6e-8, leave 8x1 the least room, and its 8 KV heads split over tp, so its ceilings rise
    with tp; gemma3-1b's weights are small and its one KV head is whole on every tp device, so
    all fsdp reaches furthest. A search starts on the mesh with the highest."""
    from shared.plan.compiler.target import target_devices
    from shared.plan.mesh.choice import batch_ceiling

    devices = target_devices(parse_target("v6e-8"))
    ceilings = {}
    for model in ("llama3.1-8b", "gemma3-1b"):
        rollout = plan.Request("rollout", model, "v6e-8", cache_size=1312)
        ceilings[model] = [batch_ceiling(rollout, shape, devices) for shape in ((8, 1), (4, 2))]
    assert ceilings["llama3.1-8b"][0] < ceilings["llama3.1-8b"][1]
    assert ceilings["gemma3-1b"][0] > 1.5 * ceilings["gemma3-1b"][1]


def test_the_wider_meshes_are_those_whose_tp_the_weights_divide():
    from shared.plan.compiler.target import target_devices
    from shared.plan.mesh.choice import wider_shapes

    devices = target_devices(parse_target("v5e-8"))
    rollout = plan.Request("rollout", "gemma4-e4b", "v5e-8")
    assert wider_shapes(rollout, devices, than=(8, 1)) == [(4, 2)]  # 2 KV heads: not tp 4, 8
    assert wider_shapes(plan.Request("train", "tiny", "v5e-8"), devices, than=(8, 1)) == []


def test_search_steps_in_the_multiple_asked_for():
    result = plan.max_batch(plan.Request("scale", "none", "v6e-8"), multiple_of=16, progress=False)
    assert all(p["batch"] % 16 == 0 for p in result["probes"])
    assert result["max_batch"] == 112 and result["first_not_fitting"] == 128  # 2 x 14 GiB < 31.25
    with pytest.raises(BadInput, match="multiple of the mesh's data-parallel size 8"):
        plan.max_batch(plan.Request("scale", "none", "v6e-8"), multiple_of=12, progress=False)
    with pytest.raises(BadInput, match="--multiple-of 0 must be a positive multiple"):
        plan.max_batch(plan.Request("scale", "none", "v6e-8"), multiple_of=0, progress=False)


def test_a_search_that_never_fails_says_at_least():
    result = plan.max_batch(plan.Request("small-rows", "none", "v5e-1"), progress=False)
    assert result["at_least"] and result["max_batch"] == search.CEILING
    assert plan.describe(result).startswith(f"at least {search.CEILING} fits")
    assert "stops at its ceiling" in plan.describe(result)


def test_a_search_out_of_exact_compiles_without_a_failure_does_not_claim_its_ceiling():
    """The atlas's 1B LoRA v5p-8 cell: 8 exact compiles, every one fitting, up to 128. It said
    "the search stops at its ceiling of 65536", which was false."""
    stopped = {"workload": "lora-train", "model": "gemma3-1b", "target": "v5p-8"}
    stopped.update(max_batch=128, first_not_fitting=None, at_least=True, converged=False)
    stopped.update(multiple_of=4, ceiling=search.CEILING, compiles=11)
    text = plan.describe(stopped)
    assert text.startswith("at least 128 fits") and "ceiling" not in text
    assert "stopped after 8 exact compiles, every one of which fit" in text
    from shared.plan.atlas.render import cell_text

    row = {"status": "ok", "max_batch": 128, "at_least": True, "converged": False, "units": {}}
    row["mesh_ceilings"] = None  # a row of today's search
    assert cell_text(row) == "✓ ≥128 gap"


def test_results_are_cached_atomically_and_a_broken_entry_recompiles(capsys):
    request = plan.Request("scale", "none", "v6e-1", batch=2)
    first = plan.plan_point(request)
    assert plan.plan_point(request)["cached"]
    (compiled,) = verdict.CACHE_DIR.glob("executable.*.json")  # its one executable's compile
    entries = {p.name for p in verdict.CACHE_DIR.iterdir()}  # and nothing half-written
    said = {host_memory.STORE, host_memory.COMPILING}  # compiles measured, and announced
    assert entries <= {plan.cache_path(request).name, compiled.name, *said}
    assert not list((verdict.CACHE_DIR / host_memory.COMPILING).iterdir())  # and withdrawn
    assert {plan.cache_path(request).name, compiled.name} <= entries
    plan.cache_path(request).write_text(json.dumps(first)[:100])  # a truncated write
    compiled.write_text(compiled.read_text()[:50])
    again = plan.plan_point(request)
    assert not again["cached"] and again["bytes_per_device"] == first["bytes_per_device"]
    assert again["executables"]["scale"]["compile_s"] > 0  # recompiled, not read half
    assert capsys.readouterr().err.count("unreadable") == 2
    assert plan.plan_point(request)["cached"]


def test_a_program_one_verdict_compiled_is_not_compiled_again_for_another():
    """Two verdicts can hold the same program (a GRPO phase compiled alone below a search's
    answer, then in the whole step at the same batch): each executable's compile is cached under
    the program XLA receives, so the second takes it. Another program (batch), other options (a
    fast compile) or another target compile anew, and --no-cache compiles everything."""
    request = plan.Request("scale", "none", "v6e-1", batch=2)
    first = plan.plan_point(request)["executables"]["scale"]
    same_program = dataclasses.replace(request, seq=999)  # a field "scale" does not read
    again = plan.plan_point(same_program)
    assert not again["cached"] and again["executables"]["scale"]["compiled_before"]
    assert again["executables"]["scale"]["compile_s"] == 0
    assert {**again["executables"]["scale"], "compile_s": first["compile_s"]} == {
        **first,
        "compiled_before": True,
    }
    for other in (
        dataclasses.replace(request, batch=4),
        dataclasses.replace(request, fast=True),
        dataclasses.replace(request, target="v5e-1"),
    ):
        assert "compiled_before" not in plan.plan_point(other)["executables"]["scale"], other
    fresh = plan.plan_point(dataclasses.replace(request, seq=998), use_cache=False)
    assert "compiled_before" not in fresh["executables"]["scale"]


@pytest.fixture
def edit_source(monkeypatch):
    """A function that makes shared/NAME read as edited: the plan cache's keys computed again
    from the edited text (sources' digests), and from the checkout's after the test."""
    from shared.plan.compiler import sources

    digests = (sources.verdict_sources_digest, sources.compile_sources_digest)
    read, edited = Path.read_bytes, set()
    monkeypatch.setattr(Path, "read_bytes", lambda p: read(p) + b"\n#" * (p in edited))

    def edit(name: str) -> None:
        edited.add(ROOT / "shared" / name)
        for digest in digests:
            digest.cache_clear()

    yield edit
    for digest in digests:
        digest.cache_clear()


def test_a_verdict_lowers_while_another_process_finishes_its_compile_then_reads_it():
    """A search's exact verdict where a probe's child is finishing the same compile: its
    programs are lowered first, then the wait, then the compile the child wrote is read (as
    compiled before); where the child wrote nothing (it was killed), it compiles here."""
    request = plan.Request("scale", "none", "v6e-1", batch=2)
    first = plan.plan_point(request)
    (entry,) = verdict.CACHE_DIR.glob("executable.*.json")
    written = entry.read_text()
    for path in (entry, plan.cache_path(request)):
        path.unlink()
    waited = []

    def child_finishes():  # the compile lands only now: read before the wait, it would miss
        waited.append(request)
        entry.write_text(written)

    (taken,) = verdict.plan_points([request], waits={request: child_finishes})
    assert waited == [request] and taken["executables"]["scale"]["compiled_before"]
    assert taken["bytes_per_device"] == first["bytes_per_device"]
    other = dataclasses.replace(request, batch=3)
    (alone,) = verdict.plan_points([other], waits={other: lambda: None})
    assert alone["executables"]["scale"]["compile_s"] > 0


def test_a_change_to_the_verdicts_code_takes_its_programs_compiles(edit_source):
    """A verdict whose own source changed (how compiles are scheduled, a table helper it
    imports) is computed again from its programs' cached compiles: the programs are the same,
    and so are their bytes. A change to the code that reads the compiler's answer compiles
    them again."""
    request = plan.Request("scale", "none", "v6e-1", batch=2)
    first = plan.plan_point(request)
    for name in ("plan/compiler/host_memory.py", "report/tables.py"):
        edit_source(name)
        again = plan.plan_point(request)
        assert not again["cached"] and again["executables"]["scale"]["compiled_before"], name
        assert again["bytes_per_device"] == first["bytes_per_device"]
    edit_source("plan/compiler/compiled.py")
    fresh = plan.plan_point(request)
    assert not fresh["cached"] and "compiled_before" not in fresh["executables"]["scale"]


def test_a_compiles_key_holds_only_the_code_that_reads_the_compilers_answer():
    """The files one executable's compile runs are the verdict's, less what schedules compiles,
    builds workloads or prints tables; what reads the compiler's numbers is among them."""
    from shared.plan.compiler import sources

    compile_files = {p.relative_to(ROOT / "shared").as_posix() for p in sources.compile_files()}
    assert sources.compile_files() < sources.verdict_files()
    reading = {"plan/compiler/compiled.py", "plan/compiler/buffers.py", "hardware/measure.py"}
    assert reading <= compile_files
    scheduling = {"plan/compiler/host_memory.py", "plan/verdict.py", "plan/workloads/__init__.py"}
    assert not scheduling & compile_files
    assert not any(name.startswith(("report/", "models/")) for name in compile_files)


@pytest.mark.parametrize(
    "request_kw, message",
    [
        ({"target": "v7z-8"}, "unknown target"),
        ({"target": "h100-3"}, "h100 machines hold"),
        ({"target": "v5e-8", "batch": 6, "mesh": "8x1"}, "does not divide"),
        ({"target": "v5e-8", "mesh": "3x3"}, "must be FSDPxTP"),
        ({"target": "v5e-1", "workload": "decode"}, "unknown workload"),
    ],
)
def test_bad_input_fails_with_one_line(request_kw, message):
    kw = {"workload": "scale", "model": "none", "target": "v5e-1", "batch": 8, **request_kw}
    with pytest.raises(BadInput, match=message):
        plan.plan_point(plan.Request(**kw))


def test_missing_libtpu_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "libtpu", None)
    with pytest.raises(BadInput, match="needs libtpu"):
        plan.topology_devices(parse_target("v5e-8"))


def test_ironwood_compiles_two_devices_a_chip():
    point = plan.plan_point(plan.Request("scale", "none", "tpu7x-8", batch=8))
    assert point["devices"] == 8 and point["target_chip"] == "tpu7x"
    assert point["executables"]["scale"]["argument_bytes"] == GIB and point["fits"]


def test_a_loop_xla_counts_once_adds_the_weight_reads_of_its_further_passes():
    one, four = (
        plan.plan_point(plan.Request("looped", "none", "v5e-1", microbatches=m)) for m in (1, 4)
    )
    # XLA counts the loop body once: four passes count as one
    assert four["compiler_flops_per_device"] == pytest.approx(one["compiler_flops_per_device"])
    extra = four["bytes_accessed_per_device"] - one["bytes_accessed_per_device"]
    assert extra == pytest.approx(3 * GIB, rel=0.01)  # three more reads of the 1 GiB of weights
    assert any("micro-batch reads again" in note for note in four["notes"])
    assert four["roofline_lower_bound_s"] > 2 * one["roofline_lower_bound_s"]


def test_a_micro_batched_step_is_not_counted_as_one_micro_batch():
    from shared.plan.workloads.matmul_bound import run_flops

    one, four = (
        plan.Request("train", "tiny", "v5e-1", batch=8, seq=128, microbatches=m, fast=True)
        for m in (1, 4)
    )
    whole, split = plan.plan_point(one), plan.plan_point(four)
    # XLA counted one micro-batch of the four: the roofline would have called it 4x cheaper
    assert split["compiler_flops_per_device"] < whole["compiler_flops_per_device"] / 3
    assert split["flops_per_device"] == run_flops(four) == run_flops(one)
    assert whole["flops_per_device"] == whole["compiler_flops_per_device"] >= run_flops(one)
    assert any("cannot avoid" in note for note in split["notes"])


def test_train_step_of_the_tiny_model_shards_over_v5e_8():
    # fast compiles: argument bytes are the layout's, whatever effort the compiler spends
    one = plan.plan_point(plan.Request("train", "tiny", "v5e-1", batch=8, seq=128, fast=True))
    eight = plan.plan_point(plan.Request("train", "tiny", "v5e-8", batch=8, seq=128, fast=True))
    args1 = one["executables"]["train_step"]["argument_bytes"]
    args8 = eight["executables"]["train_step"]["argument_bytes"]
    # Parameters and Adam state are FSDP-sharded; TPU tiles pad small shards, so < 8x.
    assert 4 * args8 < args1 and one["fits"] and eight["fits"]
    assert set(one["resident"]) == {"weights", "optimizer state"}


def test_committed_search_brackets_the_field_measurement_with_tunix_016():
    """The field, tunix of Dec 2025 (0.1.6 semantics: no donation), gemma3-1b on one v5e chip,
    prompts padded to 128, 1024 steps, cache 1312: batch 200 ran, 256 ran out of HBM. The real
    compiler's largest batch under those semantics must fall between them, and 0.1.7's (donated
    cache) must be larger. Two exact gemma3-1b compiles take 2 to 5 minutes on a 2-core CI
    machine, so the search runs in benchmarks/bench_tunix_semantics.py and this reads its
    committed result; test_rollout checks the semantics themselves on a tiny model."""
    result = report.committed("01_rollout_tunix_semantics")
    field, found = result["field"], result["semantics"]
    assert result["setting"] == {
        "model": "gemma3-1b",
        "target": "v5e-1",
        **{key: field[key] for key in ("prompt_len", "steps", "cache_size")},
    }
    old, new = found["0.1.6"], found["0.1.7"]
    assert old["converged"] and new["converged"]
    assert field["ran"] <= old["max_batch"] < field["out_of_memory"]
    assert old["at_max"]["fits"] and not old["at_first_not_fitting"]["fits"]
    assert new["max_batch"] > old["max_batch"]


def _cli(*args, cache):
    return subprocess.run(
        [sys.executable, "-m", "shared.plan", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TPU_BUDGET_LAB_PLAN_CACHE": cache},
    )


def test_cli_rollout_json_and_table(tmp_path):
    args = [
        "rollout",
        "--model",
        "qwen3-tiny",
        "--target",
        "v5e-1",
        "--prompt-len",
        "16",
        "--steps",
        "16",
    ]
    run = _cli(*args, "--batch", "4", "--json", cache=str(tmp_path))
    assert run.returncode == 0, run.stderr
    point = json.loads(run.stdout)
    assert point["fits"] and set(point["executables"]) == {"prefill", "decode"}
    assert point["executables"]["decode"]["repeats"] == 16 and point["dtype"] == "bfloat16"
    table = _cli(*args, "--batch", "4", cache=str(tmp_path))
    for shown in (
        "FITS",
        "from the plan cache (compiled 20",
        "roofline",
        "resident",
        "libtpu",
        "bfloat16",
    ):
        assert shown in table.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["rollout", "--model", "gemma3-tiny", "--target", "v5e-9"], "no TPU topology"),
        (
            ["rollout", "--model", "gemma3-tiny", "--target", "v5e-8", "--batch", "6"]
            + ["--mesh", "8x1"],
            "does not divide",
        ),
        (["rollout", "--model", "gemma3-2b", "--target", "v5e-1"], "unknown model"),
        (
            ["rollout", "--model", "gemma3-tiny", "--target", "v5e-1", "--tunix-semantics", "0.2"],
            "unknown tunix semantics",
        ),
        (
            ["rollout", "--model", "gemma3-tiny", "--target", "v5e-1", "--beta=0.1"],
            "--beta does not apply to the rollout workload (it reads --batch, --prompt-len",
        ),
    ],
)
def test_cli_bad_input_exit_2(args, message, empty_plan_cache, capsys):
    """In this process (each `python -m shared.plan` costs seconds of imports): the CLI's
    handler, run_cli, prints one line and exits 2; test_cli_bad_input_ends_the_process_in_one_line
    runs one case as its own process."""
    code, stderr = cli_exit(plan_cli, args, capsys)
    assert code == 2 and message in stderr
    assert stderr.strip().count("\n") == 0 and "Traceback" not in stderr


def test_cli_bad_input_ends_the_process_in_one_line(tmp_path):
    run = _cli("rollout", "--model", "gemma3-2b", "--target", "v5e-1", cache=str(tmp_path))
    assert run.returncode == 2 and "unknown model" in run.stderr
    assert run.stderr.strip().count("\n") == 0 and "Traceback" not in run.stderr


def test_the_cli_compiles_a_gpu_target_on_the_cpu_platform_quietly(tmp_path):
    """Every target compiles deviceless, a GPU one through jax's CUDA plugin, so the CLI keeps
    jax on the CPU platform whatever the machine has (until 2026-12-07 `--target h200` needed
    the GPU attached), and the plugin's no-driver lines never reach the reader."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    env["TPU_BUDGET_LAB_PLAN_CACHE"] = str(tmp_path)
    args = ["rollout", "--model", "gemma3-tiny", "--target", "h200", "--batch", "8"]
    run = subprocess.run(
        [sys.executable, "-m", "shared.plan", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("rollout gemma3-tiny") and "FITS" in run.stdout
    assert "without a GPU" in run.stdout
    assert "cudart_stub" not in run.stderr + run.stdout


def test_probe_rows_record_each_compile_of_a_search_in_one_shape():
    from shared.plan.search.view import PROBE_COLUMNS, probe_rows

    refused = {"batch": 16, "fast": False, "fits": False, "bytes_per_device": 9, "compile_s": 2.04}
    found = {"probes": [{**refused, "refused": "HLO temporaries exceed", "skipped": []}]}
    (row,) = probe_rows(found)
    assert set(row) == {*PROBE_COLUMNS, "compile_s"}
    assert row["refused"] is True and row["compile_s"] == 2.0 and row["cached"] is None
    failed = {**refused, "refused": [], "compiler_errors": {"update": "INTERNAL: RET_CHECK"}}
    (row,) = probe_rows({"probes": [failed]})
    assert row["compiler_failed"] is True and row["refused"] is False


def test_a_verdict_is_keyed_on_the_fields_its_workload_reads():
    rollout = plan.Request("rollout", "gemma3-tiny", "v5e-1", batch=8)
    assert rollout.key() == dataclasses.replace(rollout, beta=0.5, seq=64).key()
    assert rollout.key() != dataclasses.replace(rollout, batch=16).key()
    assert rollout.key() != dataclasses.replace(rollout, workload="lora-rollout").key()
    grpo = dataclasses.replace(rollout, workload="grpo")
    assert grpo.key() != dataclasses.replace(grpo, beta=0.5).key()
    fields = {f.name for f in dataclasses.fields(plan.Request)}
    for name, reads in plan.READS.items():
        assert set(reads) <= fields and name in plan.WORKLOADS


def test_a_verdict_loads_no_shared_module_outside_the_cache_keys_sources(tmp_path):
    """The cache key hashes the modules shared.plan.verdict's imports reach (sources): a verdict
    computed in a fresh interpreter loads no other module of shared/ (one it did load could
    change without a recompile), and the search, the atlas, the views, the notebooks' helpers
    and the benchmarks' are outside it (a change to them keeps the cache)."""
    from shared.plan.compiler import sources

    program = (
        "import sys; from shared.plan.verdict import Request, plan_point; "
        "plan_point(Request('rollout', 'gemma3-tiny', 'v5e-1', batch=2, prompt_len=8, steps=8, "
        "cache_size=16, fast=True)); "
        "plan_point(Request('lora-train', 'gemma3-tiny', 'v5e-1', batch=2, seq=16, fast=True)); "
        "print(' '.join(m.__file__ for n, m in sys.modules.items() if n.startswith('shared')))"
    )
    env = {**os.environ, "TPU_BUDGET_LAB_PLAN_CACHE": str(tmp_path), "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, env=env, check=True
    )
    loaded = {Path(f).resolve() for f in done.stdout.split()}
    hashed = sources.verdict_files()
    shared = ROOT / "shared"
    assert {shared / "plan" / "verdict.py", shared / "plan/workloads/lora_train.py"} <= loaded
    assert loaded <= hashed, loaded - hashed
    outside = [
        "plan/search/max_batch.py",
        "plan/atlas/run.py",
        "report/results.py",
        "findings/rollout.py",
    ]
    assert not {shared / name for name in outside} & hashed


def test_the_sources_a_verdict_runs_follow_its_imports_through_shared(tmp_path, monkeypatch):
    """Absolute, relative and function-level imports are followed, with each module's parent
    packages; a module only the search imports is outside, and a change to it keeps the key."""
    from shared.plan.compiler import sources

    files = {
        "__init__.py": "",
        "plan/__init__.py": "",
        "plan/verdict.py": "import json\nfrom shared.plan import helper\nfrom . import sub\n"
        "def late():\n    from ..models.family import Family\n",
        "plan/helper.py": "import shared.data.files\n",
        "plan/sub/__init__.py": "",
        "plan/search.py": "from shared.plan import verdict\nfrom shared.report import results\n",
        "models/__init__.py": "",
        "models/family.py": "class Family: ...\n",
        "data/__init__.py": "",
        "data/files.py": "",
        "report/__init__.py": "",
        "report/results.py": "",
    }
    shared = tmp_path / "shared"
    for name, text in files.items():
        (shared / name).parent.mkdir(parents=True, exist_ok=True)
        (shared / name).write_text(text)
    monkeypatch.setattr(sources, "SHARED", shared)
    # a digest cached for this tree only: the real one is back after the test, even a failed one
    digest = functools.cache(sources.verdict_sources_digest.__wrapped__)
    monkeypatch.setattr(sources, "verdict_sources_digest", digest)
    found = {p.relative_to(shared).as_posix() for p in sources.verdict_files()}
    assert found == set(files) - {"plan/search.py", "report/__init__.py", "report/results.py"}
    before = sources.verdict_sources_digest()
    (shared / "plan/search.py").write_text("# the search changed\n")
    sources.verdict_sources_digest.cache_clear()
    assert sources.verdict_sources_digest() == before
    (shared / "models/family.py").write_text("class Family: x = 1\n")
    sources.verdict_sources_digest.cache_clear()
    assert sources.verdict_sources_digest() != before


def test_a_batch_whose_arguments_alone_exceed_the_hbm_is_refused_without_compiling():
    point = plan.plan_point(plan.Request("scale", "none", "v5e-1", batch=100_000))
    assert not point["fits"] and not point["compiled"] and point["refused"] == []
    assert point["bytes_per_device"] >= 100_000 * GIB and "without compiling" in point["notes"][-1]
    assert plan.plan_point(plan.Request("scale", "none", "v5e-1", batch=7))["compile_s"] > 0
    huge = plan.plan_point(plan.Request("rollout", "gemma3-tiny", "v5e-1", batch=100_000_000))
    assert not huge["compiled"] and huge["compile_s"] == 0
    # XLA counted no FLOPs because nothing compiled: no note compares the matmul floor to that
    assert not any(note.startswith("roofline compute term") for note in huge["notes"])


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"workload": "lora-train", "seq": 0}, "--seq must be a positive integer, got 0"),
        ({"workload": "rollout", "steps": -3}, "--steps must be a positive integer"),
        ({"workload": "grpo", "num_generations": 0}, "--num-generations must be a positive"),
        ({"workload": "grpo", "beta": -1.0}, "--beta (the KL weight) must be zero or positive"),
    ],
)
def test_counts_a_workload_reads_must_be_positive(fields, message):
    with pytest.raises(BadInput, match=re.escape(message)):
        plan.plan_point(plan.Request(model="gemma3-tiny", target="v5e-1", **fields))


def test_an_unwritable_plan_cache_is_one_line_before_any_compile(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setattr(verdict, "CACHE_DIR", tmp_path / "file" / "cache")
    with pytest.raises(
        BadInput, match="cannot write the plan cache in .*TPU_BUDGET_LAB_PLAN_CACHE"
    ):
        plan.plan_point(plan.Request("scale", "none", "v5e-1"))


def test_a_search_that_nothing_fits_says_whether_the_compiler_or_arithmetic_decided():
    base = {"workload": "sft", "model": "m", "target": "v5e-1", "max_batch": 0}
    base.update(multiple_of=1, first_not_fitting=1)
    assert "(the compiler's verdict)" in view.describe({**base, "compiles": 2})
    assert "(arithmetic, before any compile)" in view.describe({**base, "compiles": 0})


def test_a_model_cut_to_whole_attention_repeats_keeps_its_layer_mix():
    """Request.layers (a probe's depth, shared.plan.compiler.timing) cuts the tunix config: Gemma 3
    repeats five local and one global layer, Gemma 2 alternates, Llama has one kind."""
    from shared import models

    assert [models.attention_period(m) for m in ("gemma3-1b", "gemma2-2b", "llama3.1-8b")] == [
        6,
        2,
        1,
    ]
    cut = models.model_config("gemma2-2b", layers=4)
    assert cut.num_layers == 4 and len(cut.attention_types) == 4
    with pytest.raises(BadInput, match="gemma3-1b has 26 decoder layers; cannot cut it to 27"):
        models.model_config("gemma3-1b", layers=27)
    with pytest.raises(BadInput, match="the train workload cannot be cut to 2 layers"):
        plan.plan_point(plan.Request("train", "gemma3-tiny", "v5e-1", layers=2))
    short = {"prompt_len": 8, "steps": 8, "fast": True}  # the weights do not depend on them
    shallow = plan.plan_point(plan.Request("rollout", "gemma3-tiny", "v5e-1", layers=1, **short))
    whole = plan.plan_point(plan.Request("rollout", "gemma3-tiny", "v5e-1", **short))
    assert shallow["resident"]["weights"] < whole["resident"]["weights"]


def test_the_depth_line_compares_cut_models_with_the_whole_one():
    from shared.plan.compiler import timing

    request = plan.Request("rollout", "gemma3-tiny", "v5e-1", batch=4, prompt_len=8, steps=8)
    line = timing.depth_line(dataclasses.replace(request, fast=True), (1, 2), full_layers=6)
    assert [run["layers"] for run in line["runs"]] == [1, 2, None]
    for label in ("prefill", "decode"):
        a, b = line[label]["bytes_at_depths"]
        assert 0 < a < b and line[label]["compiled_at_full_depth"] > b
        assert line[label]["straight_line_at_full_depth"] == a + 5 * (b - a)
        assert line["runs"][2]["executables"][label]["compile_s"] > 0


def test_a_compile_splits_into_stages_read_from_xlas_dump():
    """compiler_stages: each executable's exact compile split at XLA's dump files (HLO
    passes, buffer assignment, code generation, and before and after them), in a child
    process; the stages add up to the compile's own seconds."""
    from shared.plan.compiler import timing

    request = plan.Request(
        "rollout", "gemma3-tiny", "v5e-1", batch=4, prompt_len=8, steps=8, layers=1
    )
    row = timing.compiler_stages(request)
    for label in ("prefill", "decode"):
        exe = row["executables"][label]
        parts = [exe["stages"][key] for key, _, _ in timing.STAGE_FILES]
        parts += [exe["stages"]["before_s"], exe["stages"]["after_s"]]
        # file times are as coarse as the file system's clock: a few milliseconds
        assert all(p > -0.05 for p in parts)
        assert sum(parts) == pytest.approx(exe["compile_s"], abs=0.1)
        assert exe["stages"]["memory_report_total_bytes"] > 0


def test_a_line_from_an_exact_low_end_takes_its_slope_from_two_located_points(monkeypatch):
    """A search whose first exact question fits (mesh_row's question to another mesh) has an
    exact low end, and located bytes sit under exact ones (at buffer assignment 0.2-3% on one
    chip, more on some meshes). qwen3-8b rollouts on a 1x8 v5e-8 fit 177 exactly at 10.98
    GiB, and 184 was located at 9.62: the line through the two fell, crossed the HBM nowhere,
    and the search compiled 389 and 314 exactly, both far over (10 and 11 minutes), as
    llama3.1-8b's on a 1x8 v6e-8 compiled 1038 and 770, and on a 1x8 tpu7x-8 2654, 2497 and
    2107. Made-up compiler on a v5e-8 (unit 1 on 1x8): exact bytes 2 GiB + 0.0505 a row (272
    fit), located ones 12% under, and the floor (arguments only: 1.9 + 0.0225 a row, the
    cell's 1478.5 GiB at 65536) where that alone is over the HBM; asked first at 177, the
    search aims near 272 (the falling line had aimed at 65536, and the line from 177 to that
    floor at 389, as in the cell)."""
    usable = 15.75 * GIB

    def verdict_of(request):
        floor = (1.9 + 0.0225 * request.batch) * GIB
        if floor > usable:  # answered by arithmetic
            return _fake_verdict(request, floor, usable, compiled=False)
        exact = (2 + 0.0505 * request.batch) * GIB
        return _fake_verdict(request, 0.88 * exact if request.fast else exact, usable)

    _fake_compiler(monkeypatch, verdict_of)
    request = plan.Request("scale", "none", "v5e-8")
    result = search.searcher(request, progress=False)((1, 8), exact_from=177)
    exact = [p["batch"] for p in result["probes"] if not p["fast"] and p.get("compiled", True)]
    assert (result["max_batch"], result["first_not_fitting"]) == (272, 273), exact
    assert max(exact) <= 1.05 * 272, exact  # nothing compiled exactly far over the HBM


def test_a_compiler_failure_is_a_verdict_with_its_message_not_a_crash(monkeypatch, capsys):
    """libtpu 0.0.42.1 failed inside itself on GRPO of gemma3-1b on a tpu7x-8 at batch 208
    (INTERNAL: a RET_CHECK in the SparseCore gather emitter) where batch 8 compiled: such a
    compile is a data point with its message (compiled.compiler_failure), and the verdict says
    the compiler fails, not that the batch is over the HBM. What a caller asked wrongly (an
    option the compiler does not know) still raises."""
    message = "INTERNAL: RET_CHECK failure (gather_emitter.cc:5360) num_indices_per_output == 1"

    class Lowered:
        def __init__(self, error: str):
            self.error = error

        def compile(self, options):
            raise RuntimeError(self.error)

    where = "\n\t\n\nSuspected Python Code Location:\n  /home/me/.venv/tunix/rl/common.py:180"
    summary, layout = compiled.compile_with_layout(Lowered(message + where))
    assert summary["compiler_error"] == message and layout is None
    assert summary["total_bytes"] == 0 and not summary["refused"]
    with pytest.raises(RuntimeError, match="No such compile option"):
        compiled.compile_with_layout(Lowered("INVALID_ARGUMENT: No such compile option: 'x'"))
    refused = compiled.compile_with_layout(
        Lowered("RESOURCE_EXHAUSTED: HLO temporaries (15.78G) exceeds available HBM (15.75G)")
    )[0]
    assert refused["refused"] and not refused["compiler_error"]

    failing = {**compiled.compiler_failure(RuntimeError(message)), "compile_s": 1.0}
    monkeypatch.setattr(verdict, "compile_with_layout", lambda lowered, options: (failing, None))
    point = plan.plan_point(plan.Request("scale", "none", "v5e-1", batch=8), use_cache=False)
    assert not point["fits"] and point["compiler_errors"] == {"scale": message}
    point_view.print_point(point)
    printed = capsys.readouterr().out
    assert "THE COMPILER FAILS" in printed and "DOES NOT FIT" not in printed
    assert f"the compiler failed on it (not for lack of HBM): {message}" in printed


@pytest.mark.parametrize("fast, refused", [(False, None), (True, None), (False, "Used 16G")])
def test_a_program_the_compiler_compiled_over_the_hbm_says_the_counts_disagree(
    monkeypatch, fast, refused
):
    """libtpu 0.0.42.1 compiled gemma3-12b's prefill on a 1x8 tpu7x-8 at 864 and 986 rows whole,
    though its arguments + outputs + temps - aliased came to 96.22 and 109.60 GiB of the 94.75
    it allows, where it refused 987 ("Used 94.79G of 94.75G hbm"). The verdict still says it
    does not fit, by the rule every verdict keeps, and notes that the compiler did not refuse:
    an exact compile only (a fast one's bytes are no exact one's), and not a refusal."""
    over = 20 * GIB  # of the 15.75 a v5e allows
    summary = {
        **compiled.no_bytes(refused=refused),
        "argument_bytes": 4 * GIB,
        "temp_bytes": over - 4 * GIB,
        "total_bytes": over,
        "compile_s": 1.0,
    }
    monkeypatch.setattr(verdict, "compile_with_layout", lambda lowered, options: (summary, None))
    request = plan.Request("scale", "none", "v5e-1", batch=1, fast=fast)
    point = plan.plan_point(request, use_cache=False)
    assert not point["fits"]
    notes = [n for n in point["notes"] if "compiled without a refusal" in n]
    if fast or refused:
        assert not notes, point["notes"]
    else:
        assert notes == [
            workload_bytes.COMPILED_OVER_NOTE.format(labels="scale", gib=20.0, usable=15.75)
        ]
        assert workload_bytes.compiled_over(point["executables"], point["hbm_bytes"]) == {
            "scale": over
        }


@pytest.mark.parametrize(
    "failing, answer",
    # exact compiles fail inside the compiler at 208 and above (a probe at buffer assignment,
    # before the emitter, does not), at 240 alone (the boundary by bytes), and at every batch
    [(lambda b: b >= 208, 200), (lambda b: b == 240, 232), (bool, 0)],
)
def test_a_search_goes_on_below_where_the_compiler_fails(monkeypatch, failing, answer):
    """Bytes fit up to 240 on an 8x1 v6e-8 (unit 8), but the compiler fails inside itself at
    `failing` batches: those are neither fits nor failures (no bytes to aim with); the search
    goes on a unit below the least of them above its largest fit and says where it failed,
    and the answer is still an exact compile that fits."""
    usable = 33.55e9
    message = "INTERNAL: RET_CHECK failure"

    def used(batch: int) -> float:
        return 2e9 + 0.13e9 * batch  # 240 fits (33.2 GB), 248 does not

    def verdict_of(request):
        if failing(request.batch):
            failed = {"fits": False, "compiler_errors": {"update": message}}
            return {**_fake_verdict(request, 0, usable), **failed}
        return _fake_verdict(request, used(request.batch), usable)

    _fake_compiler(monkeypatch, verdict_of)
    monkeypatch.setattr(search, "locates_at_assignment", lambda request, shape: True)
    monkeypatch.setattr(
        search,
        "assigned_points",
        lambda requests, use_cache, finish=False: [
            {**_fake_verdict(r, 0.99 * used(r.batch), usable), "probe": "assigned"}
            for r in requests
        ],
    )
    result = search.searcher(plan.Request("scale", "none", "v6e-8"), progress=False)((8, 1))
    assert (result["max_batch"], result["first_not_fitting"]) == (answer, None)
    failed = search_result.compiler_failed(result)
    assert failed and min(failed) == answer + 8, failed
    assert all(e["error"] == message for e in result["compiler_errors"])
    assert not result["at_least"] and result["converged"]
    exact = [p for p in result["probes"] if not p["fast"]]
    assert any(p["batch"] == answer and p["fits"] for p in exact) or answer == 0
    assert len(exact) <= 2 + search.MAX_EXACT, [p["batch"] for p in exact]
    text = plan.describe({**result, "workload": "scale", "mesh_shape": {"fsdp": 8, "tp": 1}})
    assert re.search(f"the compiler fails at batche?s? {min(failed)}", text), text


def test_each_meshs_compiler_failures_are_kept_with_its_name():
    """Where the compiler failed on another mesh's one question (GRPO of gemma3-1b on a
    tpu7x-8: 4x2 and 2x4 at 132), its "<132" is no failure for bytes: the answer keeps every
    mesh's compiler_errors, each naming its mesh."""
    error = "INTERNAL: RET_CHECK failure"

    def answer(largest: int, failed: list[int]) -> dict:
        errors = [{"batch": b, "error": error} for b in failed]
        fields = {"first_not_fitting": None, "multiple_of": 8, "compiler_errors": errors}
        work = {"probes": [], "assigned_probes": [], "compiles": len(failed), "wall_s": 1.0}
        return {"max_batch": largest, **fields, **work}

    answers = {(8, 1): answer(128, [136, 208]), (4, 2): answer(0, [132])}
    result = search_meshes.meshes_result(answers, (8, 1), {(8, 1): 968, (4, 2): 968})
    assert result["mesh_answers"] == {"8x1": 128, "4x2": "<132"}
    assert [(e["batch"], e["mesh"]) for e in result["compiler_errors"]] == [
        (136, "8x1"),
        (208, "8x1"),
        (132, "4x2"),
    ]


def test_libtpu_flags_key_the_cache_and_are_named_in_the_verdict(monkeypatch, capsys):
    """A libtpu flag changes the program (without the SparseCore gather offload, GRPO's update
    for gemma3-1b compiles at 136 on a tpu7x-8, where by default it fails): a verdict compiled
    with LIBTPU_INIT_ARGS set is cached apart from one without, and says so; unset, the keys are
    those of every verdict cached before."""
    request = plan.Request("scale", "none", "v5e-1", batch=8)
    monkeypatch.delenv("LIBTPU_INIT_ARGS", raising=False)
    plain = request.key()
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "--xla_tpu_offload_gather_to_sparsecore=false")
    assert request.key() != plain
    point = plan.plan_point(request, use_cache=False)
    assert point["versions"]["libtpu_init_args"] == "--xla_tpu_offload_gather_to_sparsecore=false"
    point_view.print_point(point)
    assert (
        "LIBTPU_INIT_ARGS=--xla_tpu_offload_gather_to_sparsecore=false" in capsys.readouterr().out
    )
