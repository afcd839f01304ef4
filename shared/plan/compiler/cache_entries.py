"""Entries of the plan cache on disk: each read whole or taken as a miss, each written
atomically, and the key under which one executable's compile is kept.

Why a module of its own: the verdict (shared.plan.verdict) decides what to cache and where the
cache lives (its CACHE_DIR, which tests and benchmarks point elsewhere); how an entry is read,
written and keyed does not depend on either."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

from shared.hardware import gpus, parse_target
from shared.plan.compiler.sources import compile_sources_digest
from shared.versions import package_version, versions


def read_entry(path: Path) -> dict | None:
    """A plan-cache entry, or None; an unreadable entry (a truncated write, a hand edit) is a
    miss that recompiles, with one line saying so."""
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        print(
            f"plan cache: ignoring unreadable {path.name} ({type(err).__name__}); recompiling",
            file=sys.stderr,
        )
        return None


def write_entry(path: Path, result: dict) -> None:
    """Write to a uniquely named temporary file beside `path`, then rename: a reader never sees
    half, and two processes sharing the cache (the atlas's shards) never share a temporary."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as handle:
        json.dump(result, handle, indent=1)
    os.replace(tmp, path)


def libtpu_flags() -> dict:
    """The flags libtpu reads from the environment, where set: a flag changes the program
    (LIBTPU_INIT_ARGS=--xla_tpu_offload_gather_to_sparsecore=false compiles GRPO's policy
    update for gemma3-1b at 136 on a tpu7x-8, where by default libtpu 0.0.42.1 fails), so a
    verdict compiled with one is not one without: the cache keys hold them, and a verdict's
    `versions` names them beside the libraries'. Empty where unset, so the keys of every
    verdict compiled without flags stay as they were."""
    flags = os.environ.get("LIBTPU_INIT_ARGS", "").strip()
    return {"libtpu_init_args": flags} if flags else {}


# What a GPU verdict is compiled with beside the common stack: the CUDA plugin and ptxas
GPU_COMPILER = (
    "jax-cuda12-plugin",
    "jax-cuda12-pjrt",
    "jax-cuda13-plugin",  # where a GPU machine runs CUDA 13 (make setup JAX_EXTRA=cuda13)
    "nvidia-cuda-nvcc-cu12",
)


def gpu_compiler(target: str | None) -> dict:
    """For a GPU target: the CUDA compiler's packages and the memory fraction its usable bytes
    were taken at (shared.hardware.gpus), which change what XLA compiles; empty for a TPU
    target, so no TPU verdict's key moved when GPUs came (2026-12-07)."""
    if target is None:
        return {}
    chip = parse_target(target).chip.name
    if chip not in gpus.SPECS:
        return {}
    return {package: package_version(package) for package in GPU_COMPILER} | {
        "gpu_memory_fraction": gpus.memory_fraction()
    }


def compiler_versions(target: str | None = None) -> dict:
    """What a verdict is compiled with: the libraries' versions and, where LIBTPU_INIT_ARGS sets
    any, libtpu's flags (libtpu_flags); for a GPU target its compiler too (gpu_compiler). Every
    verdict states it, every cache key holds it, and a stored atlas row answers only a search
    at the same (shared.plan.atlas.answer): the atlas is compiled with libtpu's defaults, and
    a search with the SparseCore gather offload off was answered "128" from the row that flag
    changes, without compiling (until 2026-11-30)."""
    return versions() | libtpu_flags() | gpu_compiler(target)


def executable_key(lowered, target: str, options: dict | None) -> str:
    """The key of one executable's compile: the program XLA receives (the lowered module's
    text: shapes, shardings, donations), the target, the compile options, the versions and the
    source that reads the compiler's answer (sources.compile_sources_digest), not the whole
    verdict's: the same program compiles the same, whatever code built it. Why: two verdicts
    can hold the same program, a GRPO phase compiled alone below a search's answer and then in
    the whole step at the same batch (shared.plan.search.phases), and the second then takes
    the first's compile; and a verdict whose own code changed takes its programs' compiles.
    Hashing the text costs about 1 s on a 27B LoRA step (7 MB), against minutes of compile."""
    module = hashlib.sha256(lowered.as_text().encode()).hexdigest()
    blob = json.dumps(
        {
            "module": module,
            "target": target,
            "options": options or {},
            "versions": compiler_versions(target),
            "sources": compile_sources_digest(),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:24]
