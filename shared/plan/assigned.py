"""The bytes XLA's buffer assignment gives a one-executable workload (a LoRA or full fine-tune
step), read from its memory-usage report before code generation starts: a probe a search may
locate a boundary with, never a verdict.

Why: once buffer assignment has fixed the bytes, an exact compile still generates code, most
of its time: 45% of gemma3-1b's full fine-tune step on a v5e-8, and 27% more after that, and
70% of the 1B prefill's on a v5e-1 (benchmarks/results/plan_stages.json). The report was 2.8%
and 0.15% under the compiled bytes there, and it is written for a program over the HBM too
(the same step at batch 64: 26.08 GiB, where the exact compile only says it needs more), so a
point past the boundary still gives a slope. XLA has no option to stop after buffer
assignment, so the compile runs in a child process that dumps its one module (`xla_dump_to`,
a per-compile option), and the parent kills the child once the report is written.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from shared.hardware import parse_target
from shared.plan.target import target_devices, usable_hbm_per_device
from shared.plan.verdict import Request, check_request, floor_verdict, read_cache, write_cache

# The workloads a search locates with this probe (shared.plan.search): the fine-tune steps,
# one executable each, whose exact compiles are the atlas's slowest. `train` and `forward` are
# one executable too, but their programs compile in seconds, about what a child costs to start
# (3.5 s to import shared.plan on this project's 2-core machines).
LOCATES = ("lora-train", "sft")
KIND = "assigned"  # the plan cache's name for these probes, beside the verdicts
# the HBM's share of the report (on-chip vmem and smem follow it, each with its own total)
_TOTAL = re.compile(r"Memory Space: default \(color=0\)\s+Total bytes: (\d+)")
_POLL_S = 0.2


def assigned_points(requests: list[Request], *, use_cache: bool = True) -> list[dict]:
    """Each request's bytes per device at buffer assignment, the children compiling side by
    side (a search asks for two at once where the cores allow, as plan_points does). A point has
    the verdict's fields a search aims with: `batch`, `bytes_per_device`, `hbm_bytes`, `fits`,
    `compiled` (False where arithmetic answered: the arguments alone exceed the HBM), `cached`,
    and `compile_s`, the seconds until the report."""
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
            floor = floor_verdict(request)
            children.append(_Child(request, None if floor["fits"] else floor))
        while not all(child.done() for child in children):
            time.sleep(_POLL_S)
        return [child.point() for child in children]
    finally:
        for child in children:
            child.close()


class _Child:
    """One probe: a child process compiling the request's one executable with its module
    dumped to a folder of its own, watched for the memory-usage report."""

    def __init__(self, request: Request, floor: dict | None = None):
        self.request, self.floor, self.started = request, floor, time.perf_counter()
        self.report_bytes: int | None = None
        self.summary: dict | None = None
        self.seconds = 0.0
        if floor is not None:  # answered by arithmetic: nothing to compile
            self.process = self.folder = None
            return
        self.folder = tempfile.TemporaryDirectory(prefix="assigned-")
        request_json = json.dumps(dataclasses.asdict(request))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "shared.plan.assigned", request_json, self.folder.name],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def done(self) -> bool:
        """Whether the report is read (the child is then killed) or the child has ended."""
        if self.process is None or self.report_bytes is not None or self.summary is not None:
            return True
        for report in Path(self.folder.name).glob("*memory-usage-report.txt"):
            if total := _TOTAL.search(report.read_text()):
                self.report_bytes, self.seconds = int(total[1]), self._elapsed()
                self.process.kill()
                return True
        if self.process.poll() is None:
            return False
        out, err = self.process.communicate()
        if self.process.returncode:
            raise RuntimeError(
                f"buffer-assignment probe of {self.request.workload} {self.request.model} "
                f"batch {self.request.batch} on {self.request.target} failed: "
                f"{err.strip().splitlines()[-1] if err.strip() else self.process.returncode}"
            )
        # the compile ended before a report was seen: it was quick, or refused before buffer
        # assignment; its own summary says the bytes
        self.summary, self.seconds = json.loads(out.strip().splitlines()[-1]), self._elapsed()
        return True

    def _elapsed(self) -> float:
        return time.perf_counter() - self.started

    def point(self) -> dict:
        request = self.request
        if self.floor is not None:
            hbm, total, refused = self.floor["hbm_bytes"], self.floor["floor_bytes"], False
        else:
            target = parse_target(request.target)
            hbm = usable_hbm_per_device(target, target_devices(target))
            refused = bool(self.summary and self.summary["refused"])
            total = self.report_bytes if self.summary is None else self.summary["total_bytes"]
        return {
            **dataclasses.asdict(request),
            "probe": KIND,
            "bytes_per_device": total,
            "hbm_bytes": hbm,
            "fits": total <= hbm and not refused,
            "refused": refused,
            "compiled": self.floor is None,
            "compile_s": self.seconds,
        }

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.folder is not None:
            self.folder.cleanup()


def _compile_dumped(request: Request, folder: str) -> dict:
    """The child's part: lower the request's one executable on its mesh and compile it exactly,
    its module dumped to `folder`; the compiled bytes, where the parent has not killed it yet."""
    import jax

    from shared.plan.compiled import compile_lowered
    from shared.plan.executable import lower
    from shared.plan.mesh import mesh_for
    from shared.plan.workloads import build_workload

    mesh, _ = mesh_for(request, target_devices(parse_target(request.target)))
    workload = build_workload(request, mesh)
    if len(workload.executables) != 1:
        raise ValueError(f"{request.workload} is not one executable: no buffer-assignment probe")
    with jax.set_mesh(mesh):
        lowered = lower(workload.executables[0], {})
    summary = compile_lowered(lowered, {"xla_dump_to": folder})
    return {"total_bytes": summary["total_bytes"], "refused": summary["refused"]}


if __name__ == "__main__":
    print(json.dumps(_compile_dumped(Request(**json.loads(sys.argv[1])), sys.argv[2])))
