"""bench_plan.py's parts about single verdicts: where one compile's seconds go (build, lower,
compile; fast and exact; full depth and cut; XLA's stages), what each way of locating a boundary
costs, and the helpers every part uses to time a verdict and record it. Not a command: run
`python benchmarks/bench_plan.py --parts ...` (its docstring says what each part measures)."""

import dataclasses
import time

from shared import models, plan
from shared.plan import verdict
from shared.plan.compiler import timing
from shared.plan.compiler.assigned import assigned_points
from shared.plan.compiler.cut_depth import carried_to_depth, cut_depths, cut_pair


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def verdict_row(point: dict, wall_s: float) -> dict:
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
        point, wall = timed(plan.plan_point, request, use_cache=False)
        bracket.append(verdict_row(point, wall))
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
    """Where an exact compile's seconds go, stage by stage
    (shared.plan.compiler.timing.compiler_stages): the 1B rollout at its v5e-1 boundary (one chip)
    and the 1B full fine-tune step on a v5e-8
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
    (point,), wall = timed(assigned_points, [request], use_cache=False)
    ways["assigned"] = {"bytes_per_device": point["bytes_per_device"], "wall_s": wall}
    point, wall = timed(plan.plan_point, dataclasses.replace(request, fast=True), use_cache=False)
    ways["fast"] = {"bytes_per_device": point["bytes_per_device"], "wall_s": wall}
    depths, full_layers = cut_depths(request)
    if depths:
        cut, wall = timed(
            verdict.plan_points,
            [dataclasses.replace(request, layers=d) for d in depths],
            use_cache=False,
        )
        line = carried_to_depth(*cut, depths, full_layers)
        ways["cut_line"] = {"depths": list(depths), "bytes_per_device": line, "wall_s": wall}
    point, wall = timed(plan.plan_point, request, use_cache=False)
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


def rollout_request(
    a, model: str, target: str, batch: int = 1, mesh: str | None = None
) -> plan.Request:
    """A rollout of `model` at the benchmark's prompt and completion lengths."""
    return plan.Request(
        "rollout", model, target, batch=batch, prompt_len=a.prompt_len, steps=a.steps, mesh=mesh
    )


def locate_rollout(a) -> dict:
    """Each way of locating a rollout (module doc): one device, shallow and deep; a mesh of
    eight, shallow (all fsdp) and deep (4x2)."""
    cases = {
        "one_device": _boundary(a),
        "one_device_deep": rollout_request(a, "qwen3-8b", "v6e-1", 32),
        "mesh": rollout_request(a, a.model, "v5e-8", 1024),
        "mesh_deep": rollout_request(a, a.locate_deep_model, "v5e-8", 128, mesh="4x2"),
    }
    return {name: _locating(request) for name, request in cases.items()}


def builds(a) -> dict:
    """The `builds` part (module doc): seconds of the mesh comparison's arithmetic, then of each
    build of the same step at rising batches on the rule's mesh."""
    from shared.hardware import parse_target
    from shared.hardware.sharding import make_mesh, mesh_name
    from shared.plan.compiler.target import target_devices
    from shared.plan.search.meshes import meshes_by_ceiling
    from shared.plan.workloads import build_workload

    request = plan.Request(
        "lora-train", a.breakdown_lora_model, a.lora_target, seq=a.lora_seq, lora_rank=16
    )
    devices = target_devices(parse_target(a.lora_target))
    ceilings, ceilings_s = timed(meshes_by_ceiling, request, devices)
    mesh = make_mesh(next(iter(ceilings)), devices)
    build_s = {
        batch: timed(build_workload, dataclasses.replace(request, batch=batch), mesh)[1]
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


def rollout_builds(a) -> dict:
    """The `rollout-builds` part (module doc): the 1B rollout on a v5e-1 built at the batches
    its search compiles, each build's seconds, then its prefill lowered as a verdict lowers it
    (the build's trace kept: shared.plan.workloads.rollout.abstract_rollout) and lowered again
    after jax.clear_caches(), a fresh trace, as every lowering was before 2026-12-03."""
    import jax

    from shared.hardware import parse_target
    from shared.plan.compiler.executable import lower
    from shared.plan.compiler.target import target_devices
    from shared.plan.mesh.choice import mesh_for
    from shared.plan.workloads import build_workload

    request = _boundary(a)
    mesh, _ = mesh_for(request, target_devices(parse_target(request.target)))
    build_workload(dataclasses.replace(request, batch=1), mesh)  # imports and first traces
    rows = []
    for batch in (8, 374, 375, 376, 426):
        workload, build_s = timed(build_workload, dataclasses.replace(request, batch=batch), mesh)
        prefill = workload.executables[0]
        with jax.set_mesh(mesh):
            kept_s = timed(lower, prefill, {})[1]
            jax.clear_caches()
            fresh_s = timed(lower, prefill, {})[1]
        rows.append(
            {"batch": batch, "build_s": build_s, "lower_kept_s": kept_s, "lower_fresh_s": fresh_s}
        )
    kept, fresh = (sum(r[k] for r in rows) for k in ("lower_kept_s", "lower_fresh_s"))
    print(f"rollout builds: prefill lowered in {kept:.2f} s kept, {fresh:.2f} s fresh", flush=True)
    return {
        "request": dataclasses.asdict(request),
        "rows": rows,
        "lower_kept_s": kept,
        "lower_fresh_s": fresh,
        "ratio": kept / fresh,
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
            point, wall = timed(plan.plan_point, request, use_cache=False)
            rows.append(verdict_row(point, wall))
            print(
                f"lora-train {a.lora_model} batch {batch} remat {remat} on {a.lora_target}: "
                f"{'fits' if point['fits'] else 'does not fit'} "
                f"({point['bytes_per_device'] / 2**30:.1f} GiB), {wall:.0f} s",
                flush=True,
            )
    return rows
