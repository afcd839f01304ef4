"""Plan-mode benchmark: where a verdict's time goes, and what a search costs, as JSON.

Parts (`--parts`, comma-separated):
- `search`: for each target, the largest gemma3-1b rollout batch (the search's compiles, fast
  and exact, and its wall time from an empty cache), and one exact and one fast verdict at a
  fixed batch;
- `deep-search`: `--max-batch` for gemma3-27b's LoRA step on a v5p-8 (sequence 2048, rank 16),
  its compiles, the process's peak memory and, second by second, which of its processes kept
  which cores busy (shared.report.cpu_timeline);
- `near-pair`: the deep search twice from an empty cache, in one run: its second located
  point alone (as before 2026-12-03), then with the unit above it located beside it
  (shared.plan.search.BESIDE_AIM): each one's wall and CPU timeline, and their ratio;
- `breakdown`: build, lower and compile seconds of each executable, fast and exact, at full
  depth and cut to one and two repeats of the attention pattern (shared.plan.timing), for the
  1B rollout near its v5e-1 boundary and a 27B LoRA step on a v5p-8; with the straight line
  through the cut depths against the full model's compiled bytes;
- `big-lora`: gemma4-31b LoRA verdicts (fast compiles) on a v5p-8, with and without remat;
- `stages`: where an exact compile's seconds go (HLO passes, buffer assignment, code
  generation; read from XLA's dump files), for the 1B rollout on a v5e-1 and the 1B full
  fine-tune step on a v5e-8;
- `locate`: what each way of locating a boundary costs and how near it comes, in one run and
  nothing cached: for a full fine-tune step of `--model` on a v5e-8 (batch 8) and a LoRA step of
  `--locate-deep-model` on a v5e-8 (`--locate-deep-batch` on `--locate-deep-mesh`), the bytes at
  buffer assignment (shared.plan.assigned), a fast compile, the cut depths' line where the model
  is deep enough to be cut, and the exact verdict they all aim at: seconds and bytes of each, and
  each one's ratio to the exact verdict's;
- `locate-rollout`: the same for rollouts (256-token prompts, 1024 steps), on one device and on
  meshes of several: `--model` at its v5e-1 boundary (`--breakdown-batch`) and at 1024 rows on
  a v5e-8, qwen3-8b at 32 rows on a v6e-1, and `--locate-deep-model` at 128 rows on a 4x2
  v5e-8;
- `mesh-search`: `--max-batch` for the two mesh cases of `locate-rollout` (`--model` on an 8x1
  v5e-8, `--locate-deep-model` on a 4x2), nothing cached: their compiles and wall time;
- `builds`: what a deep LoRA search pays before and between its compiles, nothing compiled: the
  meshes it compares and their ceilings (shared.plan.search_meshes.meshes_by_ceiling) for
  `--breakdown-lora-model`'s step on `--lora-target`, then its workload built at four batches
  on one mesh, each build's seconds;
- `sparsecore`: the 1B LoRA step on a tpu7x-8 (batch 8, sequence 2048, rank 16) compiled fast
  with the SparseCore collective offload (as fast compiles were until 2026-11-26), fast as
  now (without it: shared.plan.compiled.fast_options) and exact: seconds and bytes of each;
- `pairing`: what compiling a second exact verdict beside a one-executable step's costs (the
  search's partner, shared.plan.search._partner): a LoRA step (`--pair-model` on
  `--pair-target`) at one batch exact alone, then at that batch and one unit up at once,
  nothing cached: the two walls in one run, their ratio the pair's price;
- `grpo-order`: a GRPO step that does not fit (`--grpo-model` on `--grpo-target` at
  `--grpo-batch`) compiled exact twice, nothing cached: the policy update first (the workload's
  `likely_worst`, as verdicts compile it) and every executable in the order the step runs them
  (as before 2026-11-27): the walls in one run, their ratio what the order saves;
- `phase-reuse`: a GRPO step that fits (`--grpo-model` on `--grpo-target` at
  `--grpo-fit-batch`) compiled whole from nothing, against its update alone and then the whole
  step, which takes the update's compile, as a search compiles them at its answer: the walls in
  one run;
- `refusals`: the 1B rollout's executables compiled exact, one at a time, at its v5e-1
  boundary and the two batches above it: a refusal just over the HBM against one further over;
- `compiler`: this process's libtpu on its own: the 1B rollout's executables compiled exact and
  fast at its v5e-1 boundary, and the field's tunix 0.1.6 bracket (batch 200 ran, 256 ran out
  of HBM). To compare a newer libtpu without changing the project's pins:
  `pip install --target DIR libtpu==X` and run with `PYTHONPATH=DIR`.
- `climb`: `--max-batch` for GRPO of `--climb-model` on `--climb-target`, pinned to
  `--climb-mesh` (by default the atlas's gemma3-1b cell on the 8x1 mesh of a v6e-8, where the
  compiler squeezes near the HBM), twice from an empty cache in one run: the exact rounds
  aimed by lines alone (search_climb.MAX_LOCATED = 0, as before 2026-11-30), then with probes
  at buffer assignment climbing between them (shared.plan.search_climb): each search's answer,
  exact compiles that fit and that fail, probes, wall, and the ratio.
Runs on any machine with libtpu, no TPU needed. Compile times say something about the engine
only on a quiet machine: the JSON records the load average before and after each part and
flags a part that started above results.QUIET_LOAD (run nothing else beside it).

    python benchmarks/bench_plan.py --parts search,breakdown --out benchmarks/results/plan_cpu.json
"""

import argparse
import dataclasses
import os
import resource
import tempfile
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

from shared import models, plan  # noqa: E402
from shared.errors import choose, run_cli  # noqa: E402
from shared.plan import timing, verdict  # noqa: E402
from shared.plan.assigned import assigned_points  # noqa: E402
from shared.plan.cut_depth import carried_to_depth, cut_depths, cut_pair  # noqa: E402
from shared.plan.search_view import probe_rows  # noqa: E402
from shared.report import results  # noqa: E402
from shared.report.cpu_timeline import CpuTimeline  # noqa: E402


def _timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def _verdict_row(point: dict, wall_s: float) -> dict:
    return {
        "batch": point["batch"],
        "fast": point["fast"],
        "remat": point["remat"],
        "fits": point["fits"],
        "bytes_per_device": point["bytes_per_device"],
        "resident_bytes": point["resident_bytes"],
        "worst_transient_bytes": point["transient_bytes"][point["worst"]],
        "worst": point["worst"],
        "hbm_bytes": point["hbm_bytes"],
        "refused": point["refused"],
        "compile_s": point["compile_s"],
        "wall_s": wall_s,
    }


def rollout_target(target: str, a) -> dict:
    request = plan.Request(
        "rollout",
        a.model,
        target,
        batch=a.batch,
        prompt_len=a.prompt_len,
        steps=a.steps,
        cache_size=a.cache_size,
    )
    search, search_s = _timed(plan.max_batch, request, progress=False)
    entry = {
        "max_batch": search["max_batch"],
        "first_not_fitting": search["first_not_fitting"],
        "compiles": search["compiles"],
        "search_wall_s": search_s,
        "summary": plan.describe(search),
        "probes": probe_rows(search),
    }
    for fast in (False, True):  # one verdict each at a fixed batch, nothing cached
        point, wall = _timed(
            plan.plan_point, dataclasses.replace(request, fast=fast), use_cache=False
        )
        entry["fast_verdict" if fast else "exact_verdict"] = _verdict_row(point, wall)
    return entry


def deep_search(a) -> dict:
    """`--max-batch` for a deep model's LoRA step (gemma3-27b on a v5p-8 by default) from an
    empty cache: the search the 5-minute goal is about, its compiles (located and exact) and this
    process's peak memory (a 27B compile needs most of a 23 GiB machine: run it alone)."""
    request = plan.Request(
        "lora-train", a.breakdown_lora_model, a.lora_target, seq=a.lora_seq, lora_rank=16
    )
    with CpuTimeline(note=_search_progress) as timeline:
        search, wall = _timed(plan.max_batch, request)
    return {
        **_searched(request, search, wall),
        "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        # second by second, which process kept which cores busy: where the wall leaves a
        # core idle, overlapping work can cut it; where both are busy, only less work can
        "cpu_timeline": timeline.report(),
    }


def near_pair(a) -> dict:
    """The deep search twice in one run, each from an empty plan cache: its second probe
    located alone (search.BESIDE_AIM off, as before 2026-12-03), then with the unit above it
    located beside it: each one's answer, compiles, wall and CPU timeline, and the ratio."""
    from shared.plan import search

    runs, cache, beside_aim = {}, verdict.CACHE_DIR, search.BESIDE_AIM
    for name, beside in (("alone", False), ("beside", True)):
        search.BESIDE_AIM = beside
        with tempfile.TemporaryDirectory() as empty:
            verdict.CACHE_DIR = Path(empty)
            runs[name] = deep_search(a)
        print(f"near pair, {name}: {runs[name]['summary']}, {runs[name]['search_wall_s']:.0f} s")
    search.BESIDE_AIM, verdict.CACHE_DIR = beside_aim, cache
    same = runs["alone"]["max_batch"] == runs["beside"]["max_batch"]
    return {
        **runs,
        "same_answer": same,
        "beside_over_alone": runs["beside"]["search_wall_s"] / runs["alone"]["search_wall_s"],
    }


def _search_progress() -> str:
    """What a search's progress bar says it compiles now (its postfix), for CpuTimeline."""
    from tqdm.auto import tqdm

    return "; ".join(str(bar.postfix or "") for bar in list(getattr(tqdm, "_instances", ())))


# What a benchmark records of each probe that located a search
LOCATED_COLUMNS = ("batch", "layers", "fits", "bytes_per_device", "compile_s")


def _searched(request: plan.Request, search: dict, wall: float) -> dict:
    """What a benchmark records of a `--max-batch` search that took `wall` seconds: its
    answer, compiles, every verdict, and each probe that located it under the search's own
    key for them (`assigned_probes`; `cut_probes` in a search before 2026-11-28)."""
    return {
        "request": dataclasses.asdict(request),
        "max_batch": search["max_batch"],
        "first_not_fitting": search["first_not_fitting"],
        "summary": plan.describe(search),
        "compiles": search["compiles"],
        "search_wall_s": wall,
        "probes": probe_rows(search),
        **{
            key: [{k: p.get(k) for k in LOCATED_COLUMNS} for p in probes]
            for key, probes in search.items()
            if key.endswith("_probes")
        },
    }


def pairing(a) -> dict:
    """One exact verdict alone against two at once (plan_points), after a fast verdict that
    pays the process's start-up: the second compile's price in wall time, measured in one run."""
    request = plan.Request(
        "lora-train", a.pair_model, a.pair_target, batch=a.pair_batch, seq=a.lora_seq, lora_rank=16
    )
    above = dataclasses.replace(request, batch=2 * a.pair_batch)
    plan.plan_point(dataclasses.replace(request, fast=True), use_cache=False)
    alone, alone_s = _timed(plan.plan_point, request, use_cache=False)
    pair, pair_s = _timed(verdict.plan_points, [request, above], use_cache=False)
    return {
        "request": dataclasses.asdict(request),
        "alone": _verdict_row(alone, alone_s),
        "pair": [_verdict_row(point, pair_s) for point in pair],
        "pair_over_alone": pair_s / alone_s,
        "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }


def _in_run_order(build):
    """build_workload with no executable marked likely_worst: each compiles in the order the
    workload runs them."""

    def built(request, mesh):
        workload = build(request, mesh)
        plain = [dataclasses.replace(exe, likely_worst=False) for exe in workload.executables]
        return dataclasses.replace(workload, executables=plain)

    return built


def grpo_order(a) -> dict:
    """A GRPO verdict that does not fit, its likeliest peak compiled first against every
    executable in run order, one after the other in one process."""
    request = plan.Request("grpo", a.grpo_model, a.grpo_target, batch=a.grpo_batch)
    first, first_s = _timed(plan.plan_point, request, use_cache=False)
    build = verdict.build_workload
    verdict.build_workload = _in_run_order(build)
    try:
        in_order, in_order_s = _timed(plan.plan_point, request, use_cache=False)
    finally:
        verdict.build_workload = build
    return {
        "request": dataclasses.asdict(request),
        "likely_worst_first": {**_verdict_row(first, first_s), "skipped": first["skipped"]},
        "run_order": {**_verdict_row(in_order, in_order_s), "skipped": in_order["skipped"]},
        "first_over_run_order": first_s / in_order_s,
    }


def phase_reuse(a) -> dict:
    """A GRPO step that fits (`--grpo-model` on `--grpo-target` at `--grpo-fit-batch`) compiled
    whole with nothing cached; then, in a fresh cache, its update alone and the whole step
    again, as a search compiles them at its answer (shared.plan.search_phases): that whole step
    takes the update's compile (verdict.executable_path). The walls in one run: their ratio is
    what the reuse saves where a search stops."""
    request = plan.Request("grpo", a.grpo_model, a.grpo_target, batch=a.grpo_fit_batch)
    whole, whole_s = _timed(plan.plan_point, request, use_cache=False)
    before = verdict.CACHE_DIR
    with tempfile.TemporaryDirectory() as fresh:
        verdict.CACHE_DIR = Path(fresh)
        try:
            alone, alone_s = _timed(plan.plan_point, dataclasses.replace(request, phases="update"))
            after, after_s = _timed(plan.plan_point, request)
        finally:
            verdict.CACHE_DIR = before
    assert after["bytes_per_device"] == whole["bytes_per_device"], "the same verdict"
    return {
        "request": dataclasses.asdict(request),
        "whole_from_nothing": _verdict_row(whole, whole_s),
        "update_alone": _verdict_row(alone, alone_s),
        "whole_after_the_update": {
            **_verdict_row(after, after_s),
            "compiled_before": [
                k for k, e in after["executables"].items() if e.get("compiled_before")
            ],
        },
        "alone_and_whole_over_two_wholes": (alone_s + after_s) / (2 * whole_s),
        "whole_after_over_whole": after_s / whole_s,
    }


def big_lora(a) -> list[dict]:
    rows = []
    for remat in ("none", "block"):
        for batch in a.lora_batches:
            request = plan.Request(
                "lora-train",
                a.lora_model,
                a.lora_target,
                batch=batch,
                seq=a.lora_seq,
                lora_rank=16,
                remat=remat,
                fast=True,
            )
            point, wall = _timed(plan.plan_point, request, use_cache=False)
            rows.append(_verdict_row(point, wall))
            print(
                f"lora-train {a.lora_model} batch {batch} remat {remat} on {a.lora_target}: "
                f"{'fits' if point['fits'] else 'does not fit'} "
                f"({point['bytes_per_device'] / 2**30:.1f} GiB), {wall:.0f} s",
                flush=True,
            )
    return rows


PARTS = (
    "search",
    "deep-search",
    "near-pair",
    "pairing",
    "grpo-order",
    "phase-reuse",
    "breakdown",
    "big-lora",
    "compiler",
    "refusals",
    "stages",
    "sparsecore",
    "locate",
    "locate-rollout",
    "mesh-search",
    "builds",
    "climb",
)


def _boundary(a) -> plan.Request:
    """The 1B rollout at its v5e-1 boundary, where the compiler works hardest."""
    return plan.Request(
        "rollout",
        a.model,
        "v5e-1",
        batch=a.breakdown_batch,
        prompt_len=a.prompt_len,
        steps=a.steps,
        cache_size=a.cache_size,
    )


def compiler(a) -> dict:
    """Compile seconds and bytes at the 1B boundary, fast and exact, and the field bracket."""
    boundary = _boundary(a)
    exact, fast = (dataclasses.replace(boundary, fast=f) for f in (False, True))
    timings = [timing.time_executables(exact), timing.time_executables(fast)]
    bracket = []
    for batch in (200, 256):  # shared.plan.field's tunix 0.1.6 rollout point
        request = dataclasses.replace(boundary, batch=batch, prompt_len=128, tunix="0.1.6")
        point, wall = _timed(plan.plan_point, request, use_cache=False)
        bracket.append(_verdict_row(point, wall))
    return {"versions": plan.versions(), "boundary": timings, "field_bracket": bracket}


def refusals(a) -> dict:
    """Each executable's exact compile at the 1B boundary and the two batches above it, one
    after another: how long the compiler takes to refuse a batch just over the HBM against one
    a little further over. A failing exact compile beside the answer can cost what a fitting
    one does, the check two units above far less; what the rest of a failing point costs is
    what compiling its worst executable alone first saves (verdict.plan_points' `first`)."""
    boundary = _boundary(a)
    above = [dataclasses.replace(boundary, batch=boundary.batch + k) for k in (0, 1, 2)]
    return {"versions": plan.versions(), "batches": [timing.time_executables(r) for r in above]}


def breakdown(a) -> dict:
    """Per-executable seconds and the depth line for a small and a big model (module doc)."""
    cases = {
        "rollout": _boundary(a),
        "lora-train": plan.Request(
            "lora-train",
            a.breakdown_lora_model,
            a.lora_target,
            batch=8,
            seq=a.lora_seq,
            lora_rank=16,
        ),
    }
    out = {}
    for name, request in cases.items():
        depths = cut_pair(request.model)
        full_layers = models.model_config(request.model).num_layers
        out[name] = {
            "request": dataclasses.asdict(request),
            "fast": timing.depth_line(dataclasses.replace(request, fast=True), depths, full_layers),
            "exact": timing.depth_line(request, depths, full_layers),
        }
        print(f"breakdown {name} {request.model}: done", flush=True)
    return out


def stages(a) -> dict:
    """Where an exact compile's seconds go, stage by stage (shared.plan.timing.compiler_stages):
    the 1B rollout at its v5e-1 boundary (one chip) and the 1B full fine-tune step on a v5e-8
    (eight chips, where the atlas's cells are slowest)."""
    cases = {
        "rollout_v5e-1": _boundary(a),
        "sft_v5e-8": plan.Request("sft", a.model, "v5e-8", batch=8, seq=a.lora_seq),
    }
    out = {}
    for name, request in cases.items():
        out[name] = {"request": dataclasses.asdict(request), **timing.compiler_stages(request)}
        print(f"stages {name}: done", flush=True)
    return out


def _locating(request: plan.Request) -> dict:
    """One request located every way (the `locate` part), the exact verdict last."""
    ways = {}
    (point,), wall = _timed(assigned_points, [request], use_cache=False)
    ways["assigned"] = {"bytes_per_device": point["bytes_per_device"], "wall_s": wall}
    point, wall = _timed(plan.plan_point, dataclasses.replace(request, fast=True), use_cache=False)
    ways["fast"] = {"bytes_per_device": point["bytes_per_device"], "wall_s": wall}
    depths, full_layers = cut_depths(request)
    if depths:
        cut, wall = _timed(
            verdict.plan_points,
            [dataclasses.replace(request, layers=d) for d in depths],
            use_cache=False,
        )
        line = carried_to_depth(*cut, depths, full_layers)
        ways["cut_line"] = {"depths": list(depths), "bytes_per_device": line, "wall_s": wall}
    point, wall = _timed(plan.plan_point, request, use_cache=False)
    exact = ways["exact"] = {"bytes_per_device": point["bytes_per_device"], "wall_s": wall}
    for name, way in ways.items():
        way["bytes_over_exact"] = way["bytes_per_device"] / exact["bytes_per_device"]
        way["wall_over_exact"] = way["wall_s"] / exact["wall_s"]
        print(
            f"locate {request.workload} {request.model} batch {request.batch}: {name} "
            f"{way['wall_s']:.0f} s ({way['wall_over_exact']:.2f}x exact), "
            f"{way['bytes_per_device'] / 2**30:.2f} GiB ({way['bytes_over_exact']:.3f}x)",
            flush=True,
        )
    return {"request": dataclasses.asdict(request), "fits": point["fits"], **ways}


def locate(a) -> dict:
    """Each way of locating, for a shallow model's full fine-tune and a deep model's LoRA step
    (module doc), both on the v5e-8 whose atlas cells are the slowest to compute."""
    cases = {
        "sft": plan.Request("sft", a.model, "v5e-8", batch=8, seq=a.lora_seq),
        "lora-train": plan.Request(
            "lora-train",
            a.locate_deep_model,
            "v5e-8",
            batch=a.locate_deep_batch,
            seq=a.lora_seq,
            lora_rank=16,
            mesh=a.locate_deep_mesh,
        ),
    }
    return {name: _locating(request) for name, request in cases.items()}


def _rollout(a, model: str, target: str, batch: int = 1, mesh: str | None = None) -> plan.Request:
    """A rollout of `model` at the benchmark's prompt and completion lengths."""
    return plan.Request(
        "rollout", model, target, batch=batch, prompt_len=a.prompt_len, steps=a.steps, mesh=mesh
    )


def locate_rollout(a) -> dict:
    """Each way of locating a rollout (module doc): one device, shallow and deep; a mesh of
    eight, shallow (all fsdp) and deep (4x2)."""
    cases = {
        "one_device": _boundary(a),
        "one_device_deep": _rollout(a, "qwen3-8b", "v6e-1", 32),
        "mesh": _rollout(a, a.model, "v5e-8", 1024),
        "mesh_deep": _rollout(a, a.locate_deep_model, "v5e-8", 128, mesh="4x2"),
    }
    return {name: _locating(request) for name, request in cases.items()}


def mesh_search(a) -> dict:
    """`--max-batch` for rollouts on a pinned mesh of eight, nothing cached (module doc): the
    search whose locating compiles locate-rollout compares, whole. Every probe that located
    it is recorded (_searched)."""
    cases = {
        "mesh": _rollout(a, a.model, "v5e-8", mesh="8x1"),
        "mesh_deep": _rollout(a, a.locate_deep_model, "v5e-8", mesh="4x2"),
    }
    out = {}
    for name, request in cases.items():
        search, wall = _timed(plan.max_batch, request, use_cache=False, progress=False)
        out[name] = _searched(request, search, wall)
        print(f"mesh search {name}: {out[name]['summary']}, {wall:.0f} s", flush=True)
    return out


def climb(a) -> dict:
    """The `climb` part (module doc): one search without the located climb, then with it,
    each from its own empty cache (the second must not read the first's compiles)."""
    from shared.plan import search_climb

    request = plan.Request(
        "grpo",
        a.climb_model,
        a.climb_target,
        prompt_len=a.prompt_len,
        steps=a.steps,
        mesh=a.climb_mesh,
    )
    out, climbs, cache = (
        {"request": dataclasses.asdict(request)},
        search_climb.MAX_LOCATED,
        verdict.CACHE_DIR,
    )
    for name, max_located in (("lines_only", 0), ("climb", climbs)):
        search_climb.MAX_LOCATED = max_located
        with tempfile.TemporaryDirectory() as empty:
            verdict.CACHE_DIR = Path(empty)
            search, wall = _timed(plan.max_batch, request, progress=False)
        exact = [p for p in search["probes"] if not p["fast"] and p.get("compiled", True)]
        out[name] = {
            **_searched(request, search, wall),
            "exact_fits": sum(p["fits"] for p in exact),
            "exact_failures": sum(not p["fits"] for p in exact),
            "exact_fit_s": sum(p["compile_s"] for p in exact if p["fits"]),
        }
        print(f"climb {name}: {out[name]['summary']}, {wall:.0f} s", flush=True)
    search_climb.MAX_LOCATED, verdict.CACHE_DIR = climbs, cache
    out["climb_over_lines_only"] = (
        out["climb"]["search_wall_s"] / out["lines_only"]["search_wall_s"]
    )
    return out


def builds(a) -> dict:
    """The `builds` part (module doc): seconds of the mesh comparison's arithmetic, then of each
    build of the same step at rising batches on the rule's mesh."""
    from shared.hardware import parse_target
    from shared.hardware.sharding import make_mesh, mesh_name
    from shared.plan.search_meshes import meshes_by_ceiling
    from shared.plan.target import target_devices
    from shared.plan.workloads import build_workload

    request = plan.Request(
        "lora-train", a.breakdown_lora_model, a.lora_target, seq=a.lora_seq, lora_rank=16
    )
    devices = target_devices(parse_target(a.lora_target))
    ceilings, ceilings_s = _timed(meshes_by_ceiling, request, devices)
    mesh = make_mesh(next(iter(ceilings)), devices)
    build_s = {
        batch: _timed(build_workload, dataclasses.replace(request, batch=batch), mesh)[1]
        for batch in (4, 8, 12, 16)
    }
    print(f"builds: meshes {ceilings_s:.1f} s, then {list(build_s.values())}", flush=True)
    return {
        "request": dataclasses.asdict(request),
        "mesh_ceilings": {mesh_name(m): c for m, c in ceilings.items()},
        "meshes_by_ceiling_s": ceilings_s,
        "mesh": dict(mesh.shape),
        "build_s": build_s,
    }


def sparsecore(a) -> dict:
    """A fast compile with and without tpu7x's SparseCore collective offload, and the exact one
    (the offload on, as device mode compiles): the offload's compile seconds and bytes."""
    request = plan.Request("lora-train", a.model, "tpu7x-8", batch=8, seq=a.lora_seq, lora_rank=16)
    with_offload = plan.FAST_COMPILE  # libtpu's defaults but the effort
    runs = {
        "fast_with_offload": timing.time_executables(request, with_offload),
        "fast": timing.time_executables(dataclasses.replace(request, fast=True)),
        "exact": timing.time_executables(request),
    }
    for name, row in runs.items():
        (exe,) = row["executables"].values()
        print(
            f"sparsecore {name}: {exe['compile_s']:.0f} s, {exe['temp_bytes'] / 2**30:.2f} "
            "GiB of temporaries",
            flush=True,
        )
    return {"request": dataclasses.asdict(request), **runs}


def _part(report: dict, name: str, run, out: Path) -> None:
    """Run one part between two load readings; keep what finished, whatever happens next.
    Quiet means the load before the first part (later parts' loads include this benchmark's
    own earlier compiles, which a one-minute average remembers)."""
    before = os.getloadavg()
    report[name] = run()
    report["loads"][name] = {"before": before, "after": os.getloadavg()}
    results.write(out, report)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--parts", default="search,breakdown", help=f"of {', '.join(PARTS)}")
    p.add_argument("--model", default="gemma3-1b")
    p.add_argument("--targets", default="v5e-1", help="the search part's targets")
    p.add_argument("--batch", type=int, default=64, help="batch of the single verdicts")
    p.add_argument("--breakdown-batch", type=int, default=374, help="the 1B's v5e-1 boundary")
    p.add_argument("--breakdown-lora-model", default="gemma3-27b")
    p.add_argument("--prompt-len", type=int, default=256)
    p.add_argument("--steps", type=int, default=1024)
    p.add_argument("--cache-size", type=int, default=1312)
    p.add_argument("--lora-model", default="gemma4-31b")
    p.add_argument("--lora-target", default="v5p-8")
    p.add_argument("--lora-seq", type=int, default=2048)
    p.add_argument("--lora-batches", default="4,8", help="the big-lora part's, comma-separated")
    p.add_argument("--pair-model", default="gemma3-4b")
    p.add_argument("--pair-target", default="v5e-8")
    p.add_argument("--pair-batch", type=int, default=8, help="one unit of the pair's target")
    p.add_argument("--grpo-model", default="gemma3-1b")
    p.add_argument("--grpo-target", default="v5e-1")
    p.add_argument("--grpo-batch", type=int, default=8, help="a batch that does not fit")
    p.add_argument("--grpo-fit-batch", type=int, default=4, help="a batch that fits")
    p.add_argument("--locate-deep-model", default="llama3.1-8b")
    p.add_argument("--locate-deep-batch", type=int, default=4)
    p.add_argument("--locate-deep-mesh", default="2x4")
    p.add_argument("--climb-model", default="gemma3-1b")
    p.add_argument("--climb-target", default="v6e-8")
    p.add_argument("--climb-mesh", default="8x1")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    parts = [choose("part", name, PARTS) for name in filter(None, args.parts.split(","))]
    args.lora_batches = [int(b) for b in args.lora_batches.split(",") if b]
    report = {**results.header("benchmarks/bench_plan.py", argv), "loads": {}}
    report.update(results.start_conditions())
    results.warn_unless_quiet(report)
    with tempfile.TemporaryDirectory() as empty:  # every number from an empty cache
        verdict.CACHE_DIR = Path(empty)
        if "search" in parts:
            targets = list(filter(None, args.targets.split(",")))
            _part(
                report, "rollout", lambda: {t: rollout_target(t, args) for t in targets}, args.out
            )
            for target, entry in report["rollout"].items():
                print(
                    f"{target}: {entry['summary']}; {entry['compiles']} compiles, "
                    f"{entry['search_wall_s']:.0f} s; one exact verdict "
                    f"{entry['exact_verdict']['wall_s']:.0f} s, fast "
                    f"{entry['fast_verdict']['wall_s']:.0f} s",
                    flush=True,
                )
        if "deep-search" in parts:
            _part(report, "deep_search", lambda: deep_search(args), args.out)
            print(f"deep search: {report['deep_search']['summary']}", flush=True)
        if "near-pair" in parts:
            _part(report, "near_pair", lambda: near_pair(args), args.out)
            print(f"near pair: {report['near_pair']['beside_over_alone']:.2f}x", flush=True)
        if "pairing" in parts:
            _part(report, "pairing", lambda: pairing(args), args.out)
            print(
                f"pairing: {report['pairing']['pair_over_alone']:.2f}x one compile's wall",
                flush=True,
            )
        if "grpo-order" in parts:
            _part(report, "grpo_order", lambda: grpo_order(args), args.out)
            print(
                f"grpo order: {report['grpo_order']['first_over_run_order']:.2f}x the run "
                "order's wall",
                flush=True,
            )
        if "phase-reuse" in parts:
            _part(report, "phase_reuse", lambda: phase_reuse(args), args.out)
            print(
                f"phase reuse: the whole step after its update alone took "
                f"{report['phase_reuse']['whole_after_over_whole']:.2f}x one from nothing",
                flush=True,
            )
        if "breakdown" in parts:
            _part(report, "breakdown", lambda: breakdown(args), args.out)
        if "big-lora" in parts:
            _part(report, "big_lora", lambda: big_lora(args), args.out)
        if "compiler" in parts:
            _part(report, "compiler", lambda: compiler(args), args.out)
        if "refusals" in parts:
            _part(report, "refusals", lambda: refusals(args), args.out)
        if "stages" in parts:
            _part(report, "stages", lambda: stages(args), args.out)
        if "sparsecore" in parts:
            _part(report, "sparsecore", lambda: sparsecore(args), args.out)
        if "locate" in parts:
            _part(report, "locate", lambda: locate(args), args.out)
        if "locate-rollout" in parts:
            _part(report, "locate_rollout", lambda: locate_rollout(args), args.out)
        if "mesh-search" in parts:
            _part(report, "mesh_search", lambda: mesh_search(args), args.out)
        if "builds" in parts:
            _part(report, "builds", lambda: builds(args), args.out)
        if "climb" in parts:
            _part(report, "climb", lambda: climb(args), args.out)
            print(f"climb: {report['climb']['climb_over_lines_only']:.2f}x the wall", flush=True)
    return 0


if __name__ == "__main__":
    run_cli(main)
