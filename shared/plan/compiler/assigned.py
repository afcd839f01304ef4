"""The bytes XLA's buffer assignment gives a workload's peak, read from the memory-usage
reports of its executables before code generation starts, plus the resident buffers each does
not take: a probe a search may locate a boundary with, never a verdict.

Why: once buffer assignment has fixed the bytes, an exact compile still generates code, most
of its time: 45% of gemma3-1b's full fine-tune step on a v5e-8, and 27% more after that, and
70% of the 1B prefill's on a v5e-1 (benchmarks/results/plan_stages.json). The report was 2.8%
and 0.15% under the compiled bytes there, and it is written for a program over the HBM too
(the same step at batch 64: 26.08 GiB, where the exact compile only says it needs more), so a
point past the boundary still gives a slope. XLA has no option to stop after buffer
assignment, so the compiles run in a child process that dumps each module (`xla_dump_to`, a
per-compile option), and the parent reads the point once every report is written, then kills
the child, or (`finish`) lets it compile on into the plan cache, where an exact verdict of the
same request takes that compile (a search's exact compiles most often start at a located point).

Which executables (probed_executables): all of a workload whose executables each take only
their own arguments (a fine-tune step's one; a rollout's prefill and decode, compiled side by
side as a verdict compiles them), and its point is their worst; where one takes another's
compiled outputs (GRPO's decode), only the one it marks `likely_worst` (GRPO's policy update,
the peak of every GRPO verdict in the atlas). A point is what a verdict would say were the
probed ones all there is (shared.plan.compiler.workload_bytes.combine): each report plus the
resident buffers that executable does not take (the reference model, the rollout's); where another
executable holds more, the exact verdicts the search aims with this find it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path

from shared.hardware import parse_target
from shared.plan import verdict
from shared.plan.compiler import host_memory
from shared.plan.compiler.compiled import report_hbm_bytes
from shared.plan.compiler.target import target_devices
from shared.plan.verdict import floor_verdict, read_cache, write_cache
from shared.plan.workloads.request import Request
from shared.plan.workloads.request_checks import check_request

# The workloads a search locates with this probe (shared.plan.search.max_batch): rollouts, the
# fine-tune steps and GRPO, every workload the atlas grows. `train` and `forward` are one executable
# too, but their programs compile in seconds, about what a child costs to start (3.5 s to import
# shared.plan on this project's 2-core machines).
LOCATES = ("rollout", "lora-rollout", "lora-train", "sft", "grpo")
# Rollouts on one device are located by fast compiles: as near there, and no slower (gemma3-1b
# at 374 rows on a v5e-1: 0.3% under the exact bytes in 10 s, the probe 0.1% under in 10 s;
# qwen3-8b at 32 on a v6e-1: 1.5% over in 16 s, the probe 0.2% under in 13 s), while a child
# costs its start: the 1B's whole search took 82-93 s located by fast compiles and 96-98 s by
# probes, same compiles (two runs each, one after the other). On a mesh of several devices a
# fast compile's bytes came 9-13% over (gemma3-1b at 1024 on an 8x1 v5e-8, llama3.1-8b at 128
# on a 4x2), the probe's 0.3% under. benchmarks/results/plan_locate_rollout.json: one quiet run.
ROLLOUTS = ("rollout", "lora-rollout")
KIND = "assigned"  # the plan cache's name for these probes, beside the verdicts
_POLL_S = 0.2
# Probes whose compiles go on past buffer assignment (assigned_points' `finish`), by request
_FINISHING: dict[Request, _Child] = {}


def locates_at_assignment(request: Request, mesh_shape: tuple[int, int]) -> bool:
    """Whether a search locates `request` on a mesh of `mesh_shape` (fsdp, tp) with this probe
    (else by fast compiles): every workload in LOCATES, but a rollout on one device."""
    one_device = mesh_shape[0] * mesh_shape[1] == 1
    return request.workload in LOCATES and not (one_device and request.workload in ROLLOUTS)


def assigned_points(
    requests: list[Request], *, use_cache: bool = True, finish: bool = False
) -> list[dict]:
    """Each request's bytes per device at buffer assignment, one child each, all compiling
    side by side (a search asks for one at a time: each located point aims the next). A point
    has the verdict's fields a search aims with: `batch`, `bytes_per_device`, `hbm_bytes`,
    `fits`, `compiled` (False where arithmetic answered: the arguments alone exceed the HBM),
    `cached`, `compile_s`, the seconds until the last report, `probed` (each executable
    compiled and its point's bytes) and `workload_executables` (how many the verdict compiles:
    shared.plan.search.max_batch pairs exact compiles of a one-executable step).

    `finish` (with the plan cache): each child's compiles go on past buffer assignment, in the
    background, into the plan cache's compile entries an exact verdict of the same request
    reads (verdict.executable_path), until finish_compile or stop_finishing: a search's aimed
    point is often its answer (gemma3-27b LoRA on a v5p-8 located 6 in 63 s, then compiled 6
    exactly from the start in 174 s: benchmarks/results/plan_speed_goals_after.json)."""
    for request in requests:
        check_request(request)
    points: list[dict | None] = [
        {**cached, "cached": True}
        if use_cache and (cached := read_cache(r, KIND)) is not None
        else None
        for r in requests
    ]
    missing = [i for i, point in enumerate(points) if point is None]
    probed = _probe_all([requests[i] for i in missing], finish=finish and use_cache)
    for i, point in zip(missing, probed, strict=True):
        write_cache(requests[i], point, KIND)
        points[i] = {**point, "cached": False}
    return points


def finish_compile(request: Request) -> None:
    """Wait until the probe of `request` that assigned_points left finishing (if one is) has
    written its compile entries: an exact verdict of `request` then reads them."""
    if (child := _FINISHING.pop(request, None)) is not None:
        child.process.wait()
        child.record_host_memory()
        child.close()


def finishing(request: Request) -> bool:
    """Whether a probe of `request` is finishing its compiles (assigned_points' `finish`)."""
    return request in _FINISHING


def stop_finishing(keep: Collection[Request] = ()) -> None:
    """Kill every probe left finishing but those of the requests in `keep`: their compiles
    would answer nothing."""
    for request in [r for r in _FINISHING if r not in keep]:
        _FINISHING.pop(request).close()


def room_for_two(request: Request, batch: int) -> bool:
    """Whether this machine's memory holds two probes' compiles of `request` at `batch` side by
    side now (host_memory), the probes left finishing stopped first (the next probe stops them
    anyway): where it does not, _probe_all starts the second child only once the first's whole
    compile has ended, slower than one probe alone."""
    stop_finishing()
    at = dataclasses.replace(request, batch=batch)
    return host_memory.compiles_at_once([at], 2, verdict.CACHE_DIR) >= 2


def verdicts_taking_finished(
    request: Request, batches: list[int], verdicts: Callable[..., list[dict]], *args
) -> list[dict]:
    """One round of exact verdicts of `request` at `batches`, `verdicts(batches, *args)`, where
    probes left finishing (assigned_points' `finish`) at some of them go on: the others compile
    first, beside those children, then the verdicts there are lowered while the children
    finish, and read their compiles (`verdicts(batches, *args, waits=...)`: plan_points').
    Every other finishing probe is stopped: its compile would answer nothing."""
    at = {b: dataclasses.replace(request, batch=b) for b in batches}
    taken = [b for b in batches if finishing(at[b])]
    stop_finishing(keep=[at[b] for b in taken])
    rest = [b for b in batches if b not in taken]
    points = dict(zip(rest, verdicts(rest, *args) if rest else [], strict=True))
    waits = {at[b]: functools.partial(finish_compile, at[b]) for b in taken}
    points.update(zip(taken, verdicts(taken, *args, waits=waits) if taken else [], strict=True))
    return [points[b] for b in batches]


def _probe_all(requests: list[Request], finish: bool = False) -> list[dict]:
    """The reports of `requests`, one child each, all at once; every child is gone on return,
    whatever happened (an interrupt kills the compiles with it), but those left `finish`ing
    (assigned_points), which finish_compile or stop_finishing end."""
    children: list[_Child] = []
    try:
        for request in requests:
            # as many children at once as this machine's memory holds (host_memory)
            while sum(
                not c.done() or c.finishing() for c in children
            ) >= host_memory.compiles_at_once(requests, len(requests), verdict.CACHE_DIR):
                time.sleep(_POLL_S)
            children.append(_Child(request, floor_verdict(request), finish))
        while not all(child.done() for child in children):
            time.sleep(_POLL_S)
        points = [child.point() for child in children]
        for child in children:
            if child.finishing():
                _FINISHING[child.request] = child
                host_memory.compiling_elsewhere(child.process.pid, child.request)
        return points
    finally:
        for child in children:
            if _FINISHING.get(child.request) is not child:
                child.close()


class _Child:
    """One probe: a child process compiling the request's probed executables, each with its
    module dumped to a folder of its own, watched for their memory-usage reports. The child
    writes first which executables it compiles and the resident bytes each does not take
    (`shape.json`), then each one's compiled bytes if it lives to finish it (`{label}.json`);
    its stderr (libtpu's logs) goes to a file, which no pipe fills up."""

    def __init__(self, request: Request, floor: dict, finish: bool = False):
        """`floor`: floor_verdict's, whose HBM the point is read against; where it does not
        fit, arithmetic answered and no child starts. `finish`: the compiles go on past their
        reports, into the plan cache's compile entries (assigned_points)."""
        self.request, self.floor, self.started = request, floor, time.perf_counter()
        self.finish = finish
        self.shape: dict | None = None
        self.numbers: dict[str, dict] = {}  # label -> its bytes: a report's, or a compile's
        self.seconds = 0.0
        if not floor["fits"]:
            self.process = self.folder = None
            return
        self.folder = tempfile.TemporaryDirectory(prefix="assigned-")
        self.root = Path(self.folder.name)
        self.log = self.root / "child.log"
        request_json = json.dumps(dataclasses.asdict(request))
        # a compile allocates nothing on a device, and on a GPU the parent's jax already holds
        # most of its memory (it preallocates 75%): the child must not try to take its own
        env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
        entries = str(verdict.CACHE_DIR) if finish else ""
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    *(
                        "-m",
                        "shared.plan.compiler.assigned",
                        request_json,
                        self.folder.name,
                        entries,
                    ),
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=env,
            )
        # announced from its start, not once it is found finishing: a second atlas run sharing
        # the plan cache started its probe beside this one's, and both finished their compiles
        host_memory.announce(self.process.pid, request, 1, 0, verdict.CACHE_DIR)

    def done(self) -> bool:
        """Whether every probed executable's bytes are read (the child is then killed), or
        the child has ended."""
        if self.process is None or self.seconds:
            return True
        ended = self.process.poll() is not None
        self._read_numbers()
        if self.shape is not None and len(self.numbers) == len(self.shape["not_held"]):
            self.seconds = time.perf_counter() - self.started
            if not self.finish:
                self.process.kill()
            return True
        if not ended:
            return False
        logged = self.log.read_text().strip().splitlines() or [str(self.process.returncode)]
        raise RuntimeError(
            f"buffer-assignment probe of {self.request.workload} {self.request.model} "
            f"batch {self.request.batch} on {self.request.target} failed: {logged[-1]}"
        )

    def _read_numbers(self) -> None:
        """The numbers the child has written so far: a compile that ended (quick, or refused
        before buffer assignment) says its own bytes, the others their report's."""
        if self.shape is None and (shape := self.root / "shape.json").exists():
            self.shape = json.loads(shape.read_text())
        for label in self.shape["not_held"] if self.shape else ():
            if label in self.numbers:
                continue
            if (summary := self.root / f"{label}.json").exists():
                self.numbers[label] = json.loads(summary.read_text())
                continue
            for report in (self.root / label).glob("*memory-usage-report.txt"):
                if (total := report_hbm_bytes(report.read_text())) is not None:
                    self.numbers[label] = {"total_bytes": total, "refused": None}

    def record_host_memory(self) -> None:
        """What one of this child's whole compiles took of the machine's memory (host_memory):
        its peak over what it held once its workload was built, shared by the executables it
        compiled at once, as it wrote when its compiles ended (`finish`). Not at its reports:
        gemma3-1b's LoRA step on a v5e-8 had taken 1.4 GiB at buffer assignment and 6.0 at
        the end of its compile (one run, beside an atlas run)."""
        if not (ended := self.root / "peak.json").exists():
            return
        peak = json.loads(ended.read_text())["peak_bytes"]
        if peak is not None and self.shape.get("resident_bytes") is not None:
            at_once = min(len(self.shape["not_held"]), verdict.workers_for(self.request.target))
            host_memory.record(
                self.request, (peak - self.shape["resident_bytes"]) // at_once, verdict.CACHE_DIR
            )

    def finishing(self) -> bool:
        """Whether this child's compiles go on past the reports it has given."""
        return self.finish and self.process is not None and self.process.poll() is None

    def point(self) -> dict:
        request, hbm = self.request, self.floor["hbm_bytes"]
        if self.process is None:
            probed, total, refused = {}, self.floor["floor_bytes"], False
        else:
            not_held = self.shape["not_held"]
            probed = {
                label: n["total_bytes"] + not_held[label] for label, n in self.numbers.items()
            }
            total = max(probed.values())
            refused = any(n["refused"] for n in self.numbers.values())
        return {
            **dataclasses.asdict(request),
            "probe": KIND,
            "probed": probed,
            "workload_executables": self.shape["executables"] if self.shape else None,
            "bytes_per_device": total,
            "hbm_bytes": hbm,
            "fits": total <= hbm and not refused,
            "refused": refused,
            "compiled": self.process is not None,
            "compile_s": self.seconds,
        }

    def close(self) -> None:
        if self.process is not None:
            host_memory.done_elsewhere(self.process.pid)
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.folder is not None:
            self.folder.cleanup()


def _write_json(path: Path, value: dict) -> None:
    """Written whole or not at all: the parent polls for the file."""
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(value))
    os.replace(partial, path)


def _compile_dumped(request: Request, folder: str, entries: str = "") -> None:
    """The child's part: build the workload on its mesh, write which executables it probes
    (probed_executables), how many the workload has and the resident bytes each probed one
    does not take, then compile them exactly, as many at once as a verdict would
    (verdict.workers_for), each module dumped to a folder of its own, and write each one's
    compiled bytes where the parent has not killed it yet; with `entries` (a plan cache's
    folder), each whole compile too, where an exact verdict of `request` reads it
    (verdict.executable_path: the dump option changes nothing the compiler makes). It ends
    itself if its parent ends first."""
    from concurrent.futures import ThreadPoolExecutor

    import jax

    from shared.plan.compiler.cache_entries import write_entry
    from shared.plan.compiler.compiled import compile_lowered
    from shared.plan.compiler.executable import lower
    from shared.plan.compiler.workload_bytes import resident_bytes, takes_of
    from shared.plan.mesh.choice import mesh_for
    from shared.plan.verdict import workers_for
    from shared.plan.workloads import build_workload

    _end_with_parent()
    if entries:
        verdict.CACHE_DIR = Path(entries)  # the parent's plan cache, wherever it set it
    root = Path(folder)
    mesh, _ = mesh_for(request, target_devices(parse_target(request.target)))
    workload = build_workload(request, mesh)
    probed = probed_executables(workload)
    resident, takes = resident_bytes(workload), takes_of(workload)
    not_held = {
        exe.label: sum(resident.values()) - sum(resident[name] for name in takes[exe.label])
        for exe in probed
    }
    _write_json(
        root / "shape.json",
        {
            "executables": len(workload.executables),
            "not_held": not_held,
            "resident_bytes": host_memory.resident_bytes(),  # before any compile
        },
    )
    with jax.set_mesh(mesh):
        lowered = {exe.label: lower(exe, {}) for exe in probed}

    # an exact verdict caches no compile whose layout another executable takes (its path)
    laid_out = {exe.laid_out_by for exe in workload.executables}

    def compile_dumped(label: str) -> None:
        summary = compile_lowered(lowered[label], {"xla_dump_to": str(root / label)})
        numbers = {"total_bytes": summary["total_bytes"], "refused": summary["refused"]}
        _write_json(root / f"{label}.json", numbers)
        if entries and label not in laid_out:
            write_entry(verdict.executable_path(lowered[label], request.target, None), summary)

    with ThreadPoolExecutor(workers_for(request.target)) as pool:
        list(pool.map(compile_dumped, lowered))
    _write_json(root / "peak.json", {"peak_bytes": host_memory.peak_resident_bytes()})


def probed_executables(workload) -> list:
    """The executables a probe compiles: all of them where none takes another's outputs (a
    step's only one; a rollout's prefill and decode, which the verdict compiles apart too), and
    the point is their worst, as a verdict's is. Where one does (GRPO's decode takes the KV
    cache as its rollout's compiled prefill lays it out), the one marked `likely_worst` that
    takes no other's outputs: GRPO's policy update."""
    if not any(exe.laid_out_by for exe in workload.executables):
        return sorted(workload.executables, key=lambda exe: not exe.likely_worst)
    worst = [exe for exe in workload.executables if exe.likely_worst and not exe.laid_out_by]
    if not worst:
        raise ValueError("no executable is marked likely_worst: no buffer-assignment probe")
    return worst


def _end_with_parent() -> None:
    """A thread that ends this child once its parent is gone (a search killed mid-compile,
    say), so no finishing compile outlives the search that wanted it."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


if __name__ == "__main__":
    _compile_dumped(Request(**json.loads(sys.argv[1])), *sys.argv[2:])
