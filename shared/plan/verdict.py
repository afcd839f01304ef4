"""One verdict: compile a whole workload for a target and say whether it fits, per device.

A real run holds more than one executable's arguments: weights several executables share, a
second model, optimizer state, a batch the caller keeps. So a verdict is

    bytes per device = resident (buffers alive for the whole run, each counted once)
                     + the worst executable's transient bytes
                       (its arguments that are not resident + outputs + temps - aliased)

against the HBM the compiler lets a program use (15.75 of a v5e's 16 GiB). Both parts are
reported. Results are cached on disk (written atomically; an unreadable entry is recompiled),
keyed by the request, the versions of jax/libtpu/tunix/qwix/flax and the source of shared/;
so is each executable's compile, keyed by the program XLA receives (executable_path).
"""

from __future__ import annotations

import dataclasses
import datetime
import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jax

from shared import models
from shared.errors import choose
from shared.hardware import gpus, parse_target
from shared.models.expert_routing import expert_layout, runs_megablox
from shared.paths import ROOT, writable_folder
from shared.plan.compiler import host_memory
from shared.plan.compiler.cache_entries import (
    compiler_versions,
    executable_key,
    read_entry,
    write_entry,
)
from shared.plan.compiler.compiled import compile_with_layout, fast_options
from shared.plan.compiler.executable import lower
from shared.plan.compiler.target import target_devices, usable_hbm_per_device
from shared.plan.compiler.workload_bytes import (
    arguments_only,
    combine,
    compiled_over_notes,
    exceeds,
    resident_bytes,
    takes_of,
    weights_dtype,
)
from shared.plan.mesh.choice import mesh_for
from shared.plan.mesh.floor import holds
from shared.plan.workloads import WORKLOADS, build_workload
from shared.plan.workloads.matmul_bound import run_flops
from shared.plan.workloads.request import Request
from shared.plan.workloads.request_checks import check_request

CACHE_DIR = Path(os.environ.get("TPU_BUDGET_LAB_PLAN_CACHE", ROOT / ".cache" / "plan"))

WORKERS = max(1, min(4, os.cpu_count() or 1))  # executables compiled at once
# Chips whose programs compile one at a time: on a tpu7x libtpu compiles the collectives'
# SparseCore programs (shared.plan.compiler.compiled), and two compiles at once overflowed a stack
# in its SparseCore code generator (SIGSEGV, the process lost): qwen3-8b rollouts cut to 2 and 4
# layers on a tpu7x-8 at batch 8, in the atlas's run and again alone; one at a time, both
# compiled. llama3.1-8b's two cut depths had compiled side by side there: it is not every
# program, but a crash costs the whole process, and an interactive plan its answer.
ONE_COMPILE_AT_A_TIME = ("tpu7x",)


def workers_for(target: str) -> int:
    """How many executables compile at once for a request on `target` (WORKERS, or one on a
    chip in ONE_COMPILE_AT_A_TIME)."""
    return 1 if parse_target(target).chip.name in ONE_COMPILE_AT_A_TIME else WORKERS


MULTI_HOST_NOTE = (
    "{hosts} hosts, one slice: every mesh axis runs over ICI (the compiler sees one topology; "
    "no DCN, which only joins separate slices)"
)
FLOPS_FLOOR_NOTE = (
    "roofline compute term: the {floor:.3g} FLOPs per device the run's weight matmuls cannot "
    "avoid (shared.plan.workloads.matmul_bound), above XLA's count of {counted:.3g}, which "
    "counts a loop "
    "body once (a chunked loss's, a micro-batched step's) and a custom kernel as none"
)
WEIGHT_PASSES_NOTE = (
    "roofline bytes term: {gib:.2f} GiB per device added for the weights each further "
    "micro-batch reads again (XLA counts the loop body once)"
)
# More on-chip memory than any target in shared.hardware has, so weights larger than this per
# device are read from HBM again by every pass: 128 MiB of VMEM per TensorCore on v5e and v6e,
# 64 on v5p and tpu7x, v4's 134 MB of CMEM (jax's pallas/mosaic/tpu_info.py, jax 0.10.2); an
# H100's 50 MB of L2 and an H200's 60.
ON_CHIP_BYTES = 256 * 2**20
GPU_ROOFLINE_NOTE = (
    "roofline of a GPU: a deviceless CUDA compile counts no FLOPs or bytes (cost_analysis() is "
    "None), so its compute term is the {flops:.3g} FLOPs per device the run's weight matmuls "
    "cannot avoid (shared.plan.workloads.matmul_bound) and its bytes term the weights each call "
    "reads "
    "once ({gib:.2f} GiB per device): a lower bound looser than a TPU verdict's"
)
MEGABLOX_ROOFLINE_NOTE = (
    "roofline of a megablox mixture of experts: XLA's count ({counted:.3g} FLOPs per device) "
    "takes each grouped matmul's cost as its kernel states it, for its worst-case buffer "
    "(every token routed to this device's experts), so it is no lower bound; the compute term "
    "is the {flops:.3g} FLOPs per device of the experts each token is routed to "
    "(shared.plan.workloads.matmul_bound) and the bytes term the weights each call reads once "
    "({gib:.2f} GiB per device)"
)
NO_BF16_NOTE = (
    "{chip} has no bf16 tensor cores: XLA compiles each bf16 dot as an f32 one (f32 copies of "
    "its operands among the temporaries) on the CUDA cores, whose f32 peak the roofline takes; "
    "people run fp16 there instead, which this recipe's bf16 weights do not"
)
ACTIVATION_SHARDING_NOTE = (
    "tunix's activation shardings applied (batch over fsdp, wide dimensions over tp), as its "
    "models declare them and its trainers run them on a TPU: shared.models.activation_sharding"
)


def cache_path(request: Request, kind: str = "") -> Path:
    """Where the request's verdict is cached, or, with a `kind`, another answer about the same
    program (shared.plan.compiler.assigned's probes)."""
    return CACHE_DIR / f"{request.key()}{'.' + kind if kind else ''}.json"


def read_cache(request: Request, kind: str = "") -> dict | None:
    """The cached verdict (or `kind`'s answer), or None: see cache_entries.read_entry."""
    return read_entry(cache_path(request, kind))


def compiled_on(request: Request) -> str:
    """The day the cached verdict of `request` was compiled (its entry's write, UTC), so a
    cached answer can say how old it is."""
    written = cache_path(request).stat().st_mtime
    return datetime.datetime.fromtimestamp(written, datetime.UTC).date().isoformat()


def write_cache(request: Request, result: dict, kind: str = "") -> None:
    """The verdict (or `kind`'s answer) into the plan cache, atomically (cache_entries)."""
    write_entry(cache_path(request, kind), result)


def executable_path(lowered, target: str, options: dict | None) -> Path:
    """Where one executable's compile is cached (cache_entries.executable_key)."""
    return CACHE_DIR / f"executable.{executable_key(lowered, target, options)}.json"


def is_cached(request: Request) -> bool:
    """Whether plan_point would answer from disk without compiling."""
    return read_cache(request) is not None


def floor_verdict(request: Request, devices: list | None = None) -> dict:
    """Whether the request can fit at all, known without compiling (shared.plan.mesh.floor), on the
    mesh the verdict would use. A search over slices drops a slice whose devices cannot even
    hold the weights and optimizer state this way. `devices` stands in for the target's own (a
    GPU slice planned on another machine's mesh of the same size: the bytes depend on the
    mesh's shape and the shardings only)."""
    check_request(request)
    target = parse_target(request.target)
    devices = devices if devices is not None else target_devices(target)
    mesh, _ = mesh_for(request, devices)
    fits, floor, usable = holds(request, tuple(mesh.shape.values()), tuple(devices))
    return {
        "target": request.target,
        "mesh_shape": dict(mesh.shape),
        "floor_bytes": floor,
        "hbm_bytes": usable,
        "fits": fits,
    }


def preset_config(request: Request):
    """The tunix config of the request's model; None for a workload that builds none (our 130M
    model, a reader's own step)."""
    return models.model_config(request.model) if request.builds_tunix_model else None


def compile_options(request: Request, platform: str) -> dict | None:
    """The compiler options a request's executables compile with: XLA's defaults (None), or a
    fast compile's (fast_options), at the default effort for a model whose megablox program a
    lower one crashes."""
    if not request.fast:
        return None
    return fast_options(platform, effort=not runs_megablox(preset_config(request)))


def plan_point(request: Request, *, use_cache: bool = True) -> dict:
    """Compile the request's workload for its target: bytes per device (resident + worst
    transient), a verdict against the compiler's usable HBM, FLOPs and a roofline.

    Executables compile as many at once as there are cores, the one a workload marks
    `likely_worst` in the first round, the rest in the workload's order; once the compiled ones
    do not fit, the rest are skipped (and listed): the verdict cannot change, and a search saves
    their compile time. The verdict lists them in the workload's order."""
    return plan_points([request], use_cache=use_cache)[0]


def plan_points(
    requests: list[Request],
    *,
    use_cache: bool = True,
    first: str | Mapping[Request, str] | None = None,
    waits: Mapping[Request, Callable[[], None]] | None = None,
) -> list[dict]:
    """plan_point for several requests, their executables compiled together, one per core.

    Why: a LoRA or full fine-tune step is one executable, so its verdict keeps one core busy; a
    search that needs two such verdicts (the two cut depths of `shared.plan.search.max_batch`) gets
    both in the wall time of the slower. Each request is lowered under its own mesh; XLA compiles
    outside the GIL, so each executable starts compiling as soon as it is lowered, while the
    next one lowers (gemma3-1b rollouts on a v5e-1: 0.6-0.8 s of lowering a decode).

    `first` (an executable's label): compile that one alone first, the rest only where it fits.
    For a batch the caller expects to fail, the worst executable of a point beside it: a
    search's check above its answer (gemma3-1b rollouts on a v5e-1: 376's prefill was refused
    after 3.2 s, while its decode compiled for 11.2 s beside it and could not change the
    verdict). A mapping names it for some requests only (Request to label): those the caller
    expects to fail, beside one it expects to fit, compiled whole.

    `waits`: for a request whose compiles another process is finishing into the plan cache (a
    search's probe child, shared.plan.compiler.assigned), the call that waits for it. Its programs
    are lowered first, while that compile goes on, and read once it has ended (compiled here where
    it wrote nothing): lowering gemma3-27b's LoRA step takes 10-13 s of a core, which the
    search spent after the wait, with the other core idle."""
    waits = waits or {}
    firsts = first if isinstance(first, Mapping) else dict.fromkeys(requests, first)
    for request in requests:
        choose("workload", request.workload, WORKLOADS)
        check_request(request)
    writable_folder(
        CACHE_DIR, what="the plan cache", fix="set TPU_BUDGET_LAB_PLAN_CACHE to a writable folder"
    )
    answers: list[dict | None] = [
        {**cached, "cached": True, "compiled_on": compiled_on(request)}
        if use_cache and (cached := read_cache(request)) is not None
        else None
        for request in requests
    ]
    compiling = [
        _Compiling(r, firsts.get(r), use_cache)
        for r, answer in zip(requests, answers, strict=True)
        if not answer
    ]
    cores = min((workers_for(r.target) for r in requests), default=WORKERS)
    measured_in = CACHE_DIR if use_cache else None  # host_memory's STORE
    while rounds := [(c, group) for c in compiling if (group := c.next_group(cores))]:
        # as many at once as the cores take and this machine's memory holds (host_memory)
        asked = [c.request for c, _ in rounds]
        with (
            host_memory.round_of_compiles(asked, cores, measured_in) as (workers, compiled),
            ThreadPoolExecutor(workers) as pool,
        ):
            jobs, awaited = [], []
            for state, group in rounds:
                for exe in group:
                    with jax.set_mesh(state.mesh):  # lowered here: the mesh context is per thread
                        lowered = lower(exe, state.layouts)
                    path = state.compile_path(exe, lowered)
                    if state.request in waits:  # read or compiled once the other compile ends
                        awaited.append((state, exe, lowered, path))
                    elif job := state.read_or_compile(exe, lowered, path, pool):
                        jobs.append((state, exe, path, job))
            for state, exe, lowered, path in awaited:
                waits[state.request]()
                if job := state.read_or_compile(exe, lowered, path, pool):
                    jobs.append((state, exe, path, job))
            for state, exe, path, job in jobs:
                summary, layout = job.result()
                if path:
                    write_entry(path, summary)
                state.record(exe, summary, layout)
            compiled.extend(state.request for state, *_ in jobs)
    results = iter(state.result() for state in compiling)
    return [answer or next(results) for answer in answers]


class _Compiling:
    """One request's verdict while its executables compile: what is compiled, what is left,
    and the arithmetic that skips the rest once the compiled ones do not fit."""

    def __init__(self, request: Request, first: str | None = None, use_cache: bool = True):
        self.request, self.first, self.use_cache = request, first, use_cache
        self.target = parse_target(request.target)
        self.devices = target_devices(self.target)
        self.mesh, self.mesh_note = mesh_for(request, self.devices)
        self.workload = build_workload(request, self.mesh)
        config = preset_config(request)
        self.experts = expert_layout(config, dict(self.mesh.shape))  # None: a dense model
        self.megablox = runs_megablox(config) and self.devices[0].platform == "tpu"
        self.options = compile_options(request, self.devices[0].platform)
        self.resident = resident_bytes(self.workload)
        self.usable = usable_hbm_per_device(self.target)
        self.all_takes = takes_of(self.workload)
        self.executables, self.takes, self.skipped, self.layouts = {}, {}, [], {}
        self.pending = sorted(self.workload.executables, key=lambda exe: not exe.likely_worst)
        self.floor = arguments_only(self.workload)
        if combine(self.floor, self.resident, self.all_takes)["bytes_per_device"] > self.usable:
            # arithmetic says no
            self.executables, self.takes, self.pending = self.floor, self.all_takes, []

    def next_group(self, workers: int) -> list:
        """The executables to compile next, `workers` at most, each after the one
        whose outputs it takes (decode after prefill); none once the compiled ones already do
        not fit (the rest are listed as skipped) or all are compiled."""
        if self.pending and self.executables:
            verdict = combine(self.executables, self.resident, self.takes)
            if exceeds(verdict, self.executables, self.usable):
                self.skipped += [exe.label for exe in self.pending]  # cannot change the verdict
                self.pending = []
        ready = [e for e in self.pending if not e.laid_out_by or e.laid_out_by in self.layouts]
        if self.pending and not ready:  # a workload whose executables wait for one it lacks
            raise ValueError(f"{self.pending[0].label} waits for {self.pending[0].laid_out_by}")
        if self.first and not self.executables:  # plan_points' `first`: that one alone
            ready = [e for e in ready if e.label == self.first] or ready
        group = ready[:workers]
        self.pending = [e for e in self.pending if all(e is not g for g in group)]
        return group

    def compile_path(self, exe, lowered) -> Path | None:
        """Where `exe`'s compile is cached (executable_path), or None: without the plan cache,
        and for an executable whose compiled layout another takes (GRPO's prefill, before its
        decode), since a cached compile holds no layout."""
        if not self.use_cache or any(e.laid_out_by == exe.label for e in self.workload.executables):
            return None
        return executable_path(lowered, self.request.target, self.options)

    def read_or_compile(self, exe, lowered, path: Path | None, pool):
        """`exe`'s compile read from the plan cache (recorded; None returned), or its compile
        started in `pool` (the future)."""
        if path and (entry := read_entry(path)) is not None:
            self.record(exe, {**entry, "compile_s": 0.0, "compiled_before": True})
            return None
        return pool.submit(compile_with_layout, lowered, self.options)

    def record(self, exe, summary: dict, layout=None) -> None:
        if layout is not None:
            self.layouts[exe.label] = layout
        weights = sum(
            self.resident[name]
            for name in exe.resident_args.values()
            if name in ("weights", "adapters")
        )
        self.executables[exe.label] = {
            **summary,
            "weight_bytes": weights,
            "repeats": exe.repeats,
            "uncounted_weight_bytes": exe.weight_passes * weights if weights > ON_CHIP_BYTES else 0,
            "note": exe.note,
        }
        self.takes[exe.label] = self.all_takes[exe.label]

    def _in_workload_order(self) -> dict:
        """The compiled executables in the order the workload runs them (the order a reader
        follows), whatever order they compiled in."""
        order = [exe.label for exe in self.workload.executables]
        return {label: self.executables[label] for label in order if label in self.executables}

    def result(self) -> dict:
        """The verdict, written to the plan cache."""
        request, skipped = self.request, self.skipped
        executables = self.floor if self.executables is self.floor else self._in_workload_order()
        verdict = combine(executables, self.resident, self.takes)
        refused = [label for label, e in executables.items() if e["refused"]]
        failed = {k: e["compiler_error"] for k, e in executables.items() if e.get("compiler_error")}
        counted = sum(e["flops"] * e["repeats"] for e in executables.values())
        floor = run_flops(request) / len(self.devices)
        # megablox's kernels state the cost of their worst-case buffer, so XLA's count is none
        flops = floor if self.megablox else max(counted, floor)
        uncounted = sum(
            e.get("uncounted_weight_bytes", 0) * e["repeats"] for e in executables.values()
        )
        chip, target, mesh = self.target.chip, self.target, self.mesh
        # a deviceless CUDA compile counts nothing; a megablox program counts too much
        uncosted = (not chip.is_tpu and not counted) or self.megablox
        accessed = uncounted + sum(
            (e.get("weight_bytes", 0) if uncosted else e["bytes_accessed"]) * e["repeats"]
            for e in executables.values()
        )
        result = {
            **dataclasses.asdict(request),
            "versions": compiler_versions(request.target),
            "dtype": weights_dtype(self.workload),
            "target_chip": chip.name,
            "devices": len(self.devices),
            "hosts": target.hosts,
            "mesh_shape": dict(mesh.shape),
            "executables": executables,
            "resident": self.resident,
            **verdict,
            "hbm_bytes": self.usable,
            "datasheet_hbm_bytes": chip.hbm_bytes_per_device,
            "fits": not exceeds(verdict, executables, self.usable),
            "refused": refused,
            "compiler_errors": failed,
            "skipped": skipped,
            "margin_bytes": self.usable - verdict["bytes_per_device"],
            "notes": self.workload.notes
            + ([self.mesh_note] if self.mesh_note else [])
            + ([self.experts] if self.experts else [])
            + ([ACTIVATION_SHARDING_NOTE] if mesh.size > 1 and not request.own_step else [])
            + (  # answered by arithmetic: XLA counted nothing, and no run has a time
                [FLOPS_FLOOR_NOTE.format(floor=flops, counted=counted)]
                if flops > counted and executables is not self.floor and not uncosted
                else []
            )
            + (
                [
                    (MEGABLOX_ROOFLINE_NOTE if self.megablox else GPU_ROOFLINE_NOTE).format(
                        flops=flops, gib=accessed / 2**30, counted=counted
                    )
                ]
                if uncosted and executables is not self.floor
                else []
            )
            + ([WEIGHT_PASSES_NOTE.format(gib=uncounted / 2**30)] if uncounted else [])
            + (
                [NO_BF16_NOTE.format(chip=chip.name.upper())]
                if chip.name in gpus.SPECS and not gpus.SPECS[chip.name].bf16_units
                else []
            )
            + ([MULTI_HOST_NOTE.format(hosts=target.hosts)] if target.hosts > 1 else [])
            + (
                [
                    f"not compiled: {', '.join(skipped)} "
                    "(an executable before it already does not fit, or the compiler failed on it)"
                ]
                if skipped
                else []
            )
            + (  # a fast compile's bytes are no exact compile's (9-13% over on a mesh)
                []
                if request.fast or executables is self.floor
                else compiled_over_notes(executables, self.usable)
            )
            + (
                ["answered without compiling: resident buffers and arguments alone exceed the HBM"]
                if executables is self.floor
                else []
            ),
            "flops_per_device": flops,
            "compiler_flops_per_device": counted,
            "bytes_accessed_per_device": accessed,
            "roofline_lower_bound_s": max(chip.roofline_terms(flops, accessed)),
            "compile_s": sum(e["compile_s"] for e in executables.values()),
            "compiled": executables is not self.floor,  # False: answered by arithmetic
        }
        write_cache(request, result)
        return {**result, "cached": False}
