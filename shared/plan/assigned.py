"""The bytes XLA's buffer assignment gives a workload's peak executable (a LoRA or full
fine-tune step, GRPO's policy update), read from its memory-usage report before code generation
starts, plus the resident buffers it does not take: a probe a search may locate a boundary
with, never a verdict.

Why: once buffer assignment has fixed the bytes, an exact compile still generates code, most
of its time: 45% of gemma3-1b's full fine-tune step on a v5e-8, and 27% more after that, and
70% of the 1B prefill's on a v5e-1 (benchmarks/results/plan_stages.json). The report was 2.8%
and 0.15% under the compiled bytes there, and it is written for a program over the HBM too
(the same step at batch 64: 26.08 GiB, where the exact compile only says it needs more), so a
point past the boundary still gives a slope. XLA has no option to stop after buffer
assignment, so the compile runs in a child process that dumps its one module (`xla_dump_to`,
a per-compile option), and the parent kills the child once the report is written.

A workload of several executables is probed at the one it marks `likely_worst`, where that
one takes no other's outputs: GRPO's policy update, the peak of every GRPO verdict in the
atlas. Its point is what a verdict would say were it the worst (shared.plan.workload_bytes.
combine): its report plus the resident buffers it does not take (the reference model, the
rollout's); where another executable holds more, the exact verdicts the search aims with this
find it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from shared.hardware import parse_target
from shared.plan.compiled import report_hbm_bytes
from shared.plan.target import target_devices
from shared.plan.verdict import Request, check_request, floor_verdict, read_cache, write_cache

# The workloads a search locates with this probe (shared.plan.search): the fine-tune steps and
# GRPO, whose exact compiles are the atlas's slowest. `train` and `forward` are one executable
# too, but their programs compile in seconds, about what a child costs to start (3.5 s to
# import shared.plan on this project's 2-core machines); a rollout's peak is decode as often as
# prefill, and decode takes prefill's compiled outputs.
LOCATES = ("lora-train", "sft", "grpo")
KIND = "assigned"  # the plan cache's name for these probes, beside the verdicts
_POLL_S = 0.2


def assigned_points(requests: list[Request], *, use_cache: bool = True) -> list[dict]:
    """Each request's bytes per device at buffer assignment, one child each, all compiling
    side by side (a search asks for one at a time: each located point aims the next). A point has
    the verdict's fields a search aims with: `batch`, `bytes_per_device`, `hbm_bytes`, `fits`,
    `compiled` (False where arithmetic answered: the arguments alone exceed the HBM), `cached`,
    `compile_s`, the seconds until the report, `probed` (the executable compiled) and
    `workload_executables` (how many the verdict compiles: shared.plan.search pairs exact
    compiles of a one-executable step)."""
    for request in requests:
        check_request(request)
    points: list[dict | None] = [
        {**cached, "cached": True}
        if use_cache and (cached := read_cache(r, KIND)) is not None
        else None
        for r in requests
    ]
    missing = [i for i, point in enumerate(points) if point is None]
    for i, point in zip(missing, _probe_all([requests[i] for i in missing]), strict=True):
        write_cache(requests[i], point, KIND)
        points[i] = {**point, "cached": False}
    return points


def _probe_all(requests: list[Request]) -> list[dict]:
    """The reports of `requests`, one child each, all at once; every child is gone on return,
    whatever happened (an interrupt kills the compiles with it)."""
    children: list[_Child] = []
    try:
        for request in requests:
            children.append(_Child(request, floor_verdict(request)))
        while not all(child.done() for child in children):
            time.sleep(_POLL_S)
        return [child.point() for child in children]
    finally:
        for child in children:
            child.close()


class _Child:
    """One probe: a child process compiling the request's probed executable with its module
    dumped to a folder of its own, watched for the memory-usage report. The child says first
    which executable it compiles and what it leaves out (a line on stdout), then the compiled
    bytes if it lives to finish; its stderr (libtpu's logs) goes to a file, which no pipe
    fills up."""

    def __init__(self, request: Request, floor: dict):
        """`floor`: floor_verdict's, whose HBM the point is read against; where it does not
        fit, arithmetic answered and no child starts."""
        self.request, self.floor, self.started = request, floor, time.perf_counter()
        self.report_bytes: int | None = None
        self.lines: list[dict] = []  # the child's: its shape, then its summary if it finished
        self.seconds = 0.0
        if not floor["fits"]:
            self.process = self.folder = None
            return
        self.folder = tempfile.TemporaryDirectory(prefix="assigned-")
        self.log = Path(self.folder.name) / "child.log"
        request_json = json.dumps(dataclasses.asdict(request))
        # a compile allocates nothing on a device, and on a GPU the parent's jax already holds
        # most of its memory (it preallocates 75%): the child must not try to take its own
        env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "shared.plan.assigned", request_json, self.folder.name],
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env=env,
            )

    def done(self) -> bool:
        """Whether the report is read (the child is then killed) or the child has ended."""
        if self.process is None or self.lines:
            return True
        for report in Path(self.folder.name).glob("*memory-usage-report.txt"):
            if (total := report_hbm_bytes(report.read_text())) is not None:
                self.report_bytes, self.seconds = total, self._elapsed()
                self.process.kill()
                self._read_lines()
                return True
        if self.process.poll() is None:
            return False
        self.seconds = self._elapsed()
        if self.process.returncode:
            logged = self.log.read_text().strip().splitlines() or [str(self.process.returncode)]
            raise RuntimeError(
                f"buffer-assignment probe of {self.request.workload} {self.request.model} "
                f"batch {self.request.batch} on {self.request.target} failed: {logged[-1]}"
            )
        # the compile ended before a report was seen: it was quick, or refused before buffer
        # assignment; its own summary says the bytes
        self._read_lines()
        return True

    def _read_lines(self) -> None:
        out, _ = self.process.communicate()
        self.lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]

    def _elapsed(self) -> float:
        return time.perf_counter() - self.started

    def point(self) -> dict:
        request, shape = self.request, {"probed": None, "executables": None, "not_held": 0}
        hbm, compiled = self.floor["hbm_bytes"], self.process is not None
        if not compiled:
            total, refused = self.floor["floor_bytes"], False
        else:
            shape, *finished = self.lines
            summary = finished[0] if finished else {"refused": None}
            refused = bool(summary["refused"])
            report = summary["total_bytes"] if finished else self.report_bytes
            total = report + shape["not_held"]
        return {
            **dataclasses.asdict(request),
            "probe": KIND,
            "probed": shape["probed"],
            "workload_executables": shape["executables"],
            "bytes_per_device": total,
            "hbm_bytes": hbm,
            "fits": total <= hbm and not refused,
            "refused": refused,
            "compiled": compiled,
            "compile_s": self.seconds,
        }

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.folder is not None:
            self.folder.cleanup()


def _compile_dumped(request: Request, folder: str) -> None:
    """The child's part: build the workload on its mesh, print which executable it probes
    (probed_executable), how many the workload has and the resident bytes that one does not
    take, then compile it exactly with its module dumped to `folder`, and print its compiled
    bytes where the parent has not killed it yet."""
    import jax

    from shared.plan.compiled import compile_lowered
    from shared.plan.executable import lower
    from shared.plan.mesh import mesh_for
    from shared.plan.workload_bytes import resident_bytes, takes_of
    from shared.plan.workloads import build_workload

    mesh, _ = mesh_for(request, target_devices(parse_target(request.target)))
    workload = build_workload(request, mesh)
    exe = probed_executable(workload)
    resident = resident_bytes(workload)
    held = sum(resident[name] for name in takes_of(workload)[exe.label])
    shape = {
        "probed": exe.label,
        "executables": len(workload.executables),
        "not_held": sum(resident.values()) - held,
    }
    print(json.dumps(shape), flush=True)
    with jax.set_mesh(mesh):
        lowered = lower(exe, {})
    summary = compile_lowered(lowered, {"xla_dump_to": folder})
    print(json.dumps({"total_bytes": summary["total_bytes"], "refused": summary["refused"]}))


def probed_executable(workload):
    """The executable a probe compiles: the workload's only one, or the one it marks
    `likely_worst` where that takes no other's outputs."""
    if len(workload.executables) == 1:
        return workload.executables[0]
    worst = [exe for exe in workload.executables if exe.likely_worst and not exe.laid_out_by]
    if not worst:
        raise ValueError("no executable is marked likely_worst: no buffer-assignment probe")
    return worst[0]


if __name__ == "__main__":
    _compile_dumped(Request(**json.loads(sys.argv[1])), sys.argv[2])
