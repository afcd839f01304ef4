"""bench_plan.py's parts about searches: what a `--max-batch` search costs from an empty cache
(the 1B rollout and the 27B LoRA step the speed goals name, meshes, the located climb) and
what each of its scheduling choices saves (a partner compiled beside, GRPO's peak first, a
phase's compile reused). Not a command: run `python benchmarks/bench_plan.py --parts ...`."""

import dataclasses
import functools
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from plan_compiles import rollout_request, timed, verdict_row

from shared import plan
from shared.plan import verdict
from shared.plan.cli.flags import plan_command
from shared.plan.search.view import probe_rows
from shared.report.cpu_timeline import CpuTimeline


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
    with CpuTimeline(note=_search_progress) as timeline:
        search, search_s = timed(plan.max_batch, request, progress=False)
    entry = {
        "max_batch": search["max_batch"],
        "first_not_fitting": search["first_not_fitting"],
        "compiles": search["compiles"],
        "search_wall_s": search_s,
        "summary": plan.describe(search),
        "probes": probe_rows(search),
        # whether the search left a core idle (overlap can cut it) or kept both busy (only
        # less compiling can)
        "cpu_timeline": timeline.report(),
    }
    for fast in (False, True):  # one verdict each at a fixed batch, nothing cached
        point, wall = timed(
            plan.plan_point, dataclasses.replace(request, fast=fast), use_cache=False
        )
        entry["fast_verdict" if fast else "exact_verdict"] = verdict_row(point, wall)
    return entry


def deep_search(a) -> dict:
    """`--max-batch` for a deep model's LoRA step (gemma3-27b on a v5p-8 by default) from an
    empty cache: the search the 5-minute goal is about, its compiles (located and exact) and this
    process's peak memory (a 27B compile needs most of a 23 GiB machine: run it alone)."""
    request = plan.Request(
        "lora-train", a.breakdown_lora_model, a.lora_target, seq=a.lora_seq, lora_rank=16
    )
    with CpuTimeline(note=_search_progress) as timeline:
        search, wall = timed(plan.max_batch, request)
    return {
        **_searched(request, search, wall),
        "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        # second by second, which process kept which cores busy: where the wall leaves a
        # core idle, overlapping work can cut it; where both are busy, only less work can
        "cpu_timeline": timeline.report(),
    }


def near_pair(a) -> dict:
    """The deep search twice in one run, each from an empty plan cache: its second probe
    located alone (search_locate.BESIDE_AIM off, as before 2026-12-03), then with the unit above it
    located beside it: each one's answer, compiles, wall and CPU timeline, and the ratio."""
    from shared.plan.search import locate as search_locate

    def run(name: str) -> dict:
        entry = deep_search(a)
        print(f"near pair, {name}: {entry['summary']}, {entry['search_wall_s']:.0f} s", flush=True)
        return entry

    runs = each_setting(search_locate, "BESIDE_AIM", {"alone": False, "beside": True}, run)
    same = runs["alone"]["max_batch"] == runs["beside"]["max_batch"]
    return {
        **runs,
        "same_answer": same,
        "beside_over_alone": runs["beside"]["search_wall_s"] / runs["alone"]["search_wall_s"],
    }


def above_first(a) -> dict:
    """For each of `--above-cells` (model:target, one device), the rollout `--max-batch` twice
    in one run, each from an empty plan cache: the exact candidate alone (search_lines.
    ABOVE_WORST_FIRST off, as before 2026-12-03), then with the unit above it beside it, its
    worst executable first: each one's answer, compiles, wall and CPU timeline, and the ratio."""
    from shared.plan.search import lines as search_lines

    out = {}
    for cell in filter(None, a.above_cells.split(",")):
        model, target = cell.split(":")
        request = dataclasses.replace(rollout_request(a, model, target), cache_size=a.cache_size)
        settings = {"alone": False, "above": True}
        runs = each_setting(
            search_lines, "ABOVE_WORST_FIRST", settings, functools.partial(_watched_search, request)
        )
        out[cell] = {
            **runs,
            "same_answer": runs["alone"]["max_batch"] == runs["above"]["max_batch"],
            "above_over_alone": runs["above"]["search_wall_s"] / runs["alone"]["search_wall_s"],
        }
    return out


def floor_aim(a) -> dict:
    """For each of `--floor-cells` (model:target, one device), rollout `--max-batch` from an
    empty plan cache each time, with its second located point at 8 units and then a third far
    up (search_locate.FLOOR_AIM off, as before 2026-12-04), then along the floor's slope from
    the located unit; `--setting-pairs` pairs in one run, alternating, as one search's wall
    moves by several seconds from run to run on these machines: each one's answer, compiles,
    wall and CPU timeline, and the ratio of the medians."""
    from shared.plan.search import locate as search_locate

    out = {}
    for cell in filter(None, a.floor_cells.split(",")):
        model, target = cell.split(":")
        request = dataclasses.replace(rollout_request(a, model, target), cache_size=a.cache_size)
        settings = {"eight": False, "floor": True}
        pairs = [
            each_setting(
                search_locate, "FLOOR_AIM", settings, functools.partial(_watched_search, request)
            )
            for _ in range(a.setting_pairs)
        ]
        walls = {
            name: statistics.median(pair[name]["search_wall_s"] for pair in pairs)
            for name in settings
        }
        out[cell] = {
            "pairs": pairs,
            "same_answer": all(p["eight"]["max_batch"] == p["floor"]["max_batch"] for p in pairs),
            "median_wall_s": walls,
            "floor_over_eight": walls["floor"] / walls["eight"],
        }
    return out


def command_search(a) -> dict:
    """The 1B rollout `--max-batch` as a reader types it: `python -m shared.plan ...` in a fresh
    process each time, start-up included (imports, JAX, libtpu), from an empty plan cache,
    `--command-runs` times one after the other: each one's wall, answer and compiles, and the
    median. The other parts time a search inside this process, where the runs after its first
    find JAX started and the model code imported."""
    settings = {"prompt_len": a.prompt_len, "steps": a.steps, "cache_size": a.cache_size}
    typed = plan_command("rollout", a.model, a.targets.split(",")[0], settings)
    typed += " --no-cache --json"
    command = [sys.executable, *shlex.split(typed)[1:]]  # this venv's python for `python`
    runs = []
    for _ in range(a.command_runs):
        with tempfile.TemporaryDirectory() as empty:
            env = {**os.environ, "TPU_BUDGET_LAB_PLAN_CACHE": empty}
            done, wall = timed(
                subprocess.run, command, env=env, capture_output=True, text=True, check=True
            )
        found = json.loads(done.stdout)
        runs.append(
            {"wall_s": wall, "max_batch": found["max_batch"], "compiles": found["compiles"]}
        )
        print(
            f"command: {found['max_batch']} in {found['compiles']} compiles, {wall:.0f} s",
            flush=True,
        )
    return {
        "command": typed,
        "runs": runs,
        "median_wall_s": statistics.median(r["wall_s"] for r in runs),
    }


def _watched_search(request: plan.Request, name: str) -> dict:
    """`--max-batch` for `request` (its setting called `name`), with its CPU timeline."""
    with CpuTimeline(note=_search_progress) as timeline:
        found, wall = timed(plan.max_batch, request, progress=False)
    print(f"{name}: {plan.describe(found)}, {wall:.0f} s", flush=True)
    return {**_searched(request, found, wall), "cpu_timeline": timeline.report()}


def each_setting(module, flag: str, settings: dict, run) -> dict:
    """`run(name)` once for each name and value of `settings`, with `module.flag` set to that
    value and from an empty plan cache of its own (a run must not read the one before's
    compiles); the flag and the cache are put back after, whatever happens."""
    kept, cache, out = getattr(module, flag), verdict.CACHE_DIR, {}
    try:
        for name, value in settings.items():
            setattr(module, flag, value)
            with tempfile.TemporaryDirectory() as empty:
                verdict.CACHE_DIR = Path(empty)
                out[name] = run(name)
    finally:
        setattr(module, flag, kept)
        verdict.CACHE_DIR = cache
    return out


def _search_progress() -> str:
    """What a search's progress bar says it compiles now (its postfix), for CpuTimeline."""
    from tqdm.auto import tqdm

    bars = list(getattr(tqdm, "_instances", ()))  # a bar being built has no postfix yet
    return "; ".join(str(getattr(bar, "postfix", None) or "") for bar in bars)


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
    alone, alone_s = timed(plan.plan_point, request, use_cache=False)
    pair, pair_s = timed(verdict.plan_points, [request, above], use_cache=False)
    return {
        "request": dataclasses.asdict(request),
        "alone": verdict_row(alone, alone_s),
        "pair": [verdict_row(point, pair_s) for point in pair],
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
    first, first_s = timed(plan.plan_point, request, use_cache=False)
    build = verdict.build_workload
    verdict.build_workload = _in_run_order(build)
    try:
        in_order, in_order_s = timed(plan.plan_point, request, use_cache=False)
    finally:
        verdict.build_workload = build
    return {
        "request": dataclasses.asdict(request),
        "likely_worst_first": {**verdict_row(first, first_s), "skipped": first["skipped"]},
        "run_order": {**verdict_row(in_order, in_order_s), "skipped": in_order["skipped"]},
        "first_over_run_order": first_s / in_order_s,
    }


def phase_reuse(a) -> dict:
    """A GRPO step that fits (`--grpo-model` on `--grpo-target` at `--grpo-fit-batch`) compiled
    whole with nothing cached; then, in a fresh cache, its update alone and the whole step
    again, as a search compiles them at its answer (shared.plan.search.phases): that whole step
    takes the update's compile (verdict.executable_path). The walls in one run: their ratio is
    what the reuse saves where a search stops."""
    request = plan.Request("grpo", a.grpo_model, a.grpo_target, batch=a.grpo_fit_batch)
    whole, whole_s = timed(plan.plan_point, request, use_cache=False)
    before = verdict.CACHE_DIR
    with tempfile.TemporaryDirectory() as fresh:
        verdict.CACHE_DIR = Path(fresh)
        try:
            alone, alone_s = timed(plan.plan_point, dataclasses.replace(request, phases="update"))
            after, after_s = timed(plan.plan_point, request)
        finally:
            verdict.CACHE_DIR = before
    assert after["bytes_per_device"] == whole["bytes_per_device"], "the same verdict"
    return {
        "request": dataclasses.asdict(request),
        "whole_from_nothing": verdict_row(whole, whole_s),
        "update_alone": verdict_row(alone, alone_s),
        "whole_after_the_update": {
            **verdict_row(after, after_s),
            "compiled_before": [
                k for k, e in after["executables"].items() if e.get("compiled_before")
            ],
        },
        "alone_and_whole_over_two_wholes": (alone_s + after_s) / (2 * whole_s),
        "whole_after_over_whole": after_s / whole_s,
    }


def mesh_search(a) -> dict:
    """`--max-batch` for rollouts on a pinned mesh of eight, nothing cached (module doc): the
    search whose locating compiles locate-rollout compares, whole. Every probe that located
    it is recorded (_searched)."""
    cases = {
        "mesh": rollout_request(a, a.model, "v5e-8", mesh="8x1"),
        "mesh_deep": rollout_request(a, a.locate_deep_model, "v5e-8", mesh="4x2"),
    }
    out = {}
    for name, request in cases.items():
        search, wall = timed(plan.max_batch, request, use_cache=False, progress=False)
        out[name] = _searched(request, search, wall)
        print(f"mesh search {name}: {out[name]['summary']}, {wall:.0f} s", flush=True)
    return out


def climb(a) -> dict:
    """The `climb` part (module doc): one search without the located climb, then with it,
    each from its own empty cache (the second must not read the first's compiles)."""
    from shared.plan.search import climb as search_climb

    request = plan.Request(
        "grpo",
        a.climb_model,
        a.climb_target,
        prompt_len=a.prompt_len,
        steps=a.steps,
        mesh=a.climb_mesh,
    )

    def run(name: str) -> dict:
        search, wall = timed(plan.max_batch, request, progress=False)
        exact = [p for p in search["probes"] if not p["fast"] and p.get("compiled", True)]
        print(f"climb {name}: {plan.describe(search)}, {wall:.0f} s", flush=True)
        return {
            **_searched(request, search, wall),
            "exact_fits": sum(p["fits"] for p in exact),
            "exact_failures": sum(not p["fits"] for p in exact),
            "exact_fit_s": sum(p["compile_s"] for p in exact if p["fits"]),
        }

    settings = {"lines_only": 0, "climb": search_climb.MAX_LOCATED}
    out = {
        "request": dataclasses.asdict(request),
        **each_setting(search_climb, "MAX_LOCATED", settings, run),
    }
    out["climb_over_lines_only"] = (
        out["climb"]["search_wall_s"] / out["lines_only"]["search_wall_s"]
    )
    return out
