"""Which tunix decides how many gemma3-1b rollouts fit one v5e chip: the TPU compiler's answer
under both Sampler semantics, at the field's setting, as JSON.

The field ran gemma3-1b with the tunix of December 2025 on one v5e chip (prompts padded to 128,
1024 steps, cache 1312): batch 200 ran, 256 ran out of HBM. That tunix (0.1.6) does not donate
the Sampler's state, so decode holds the KV cache twice; from 0.1.7 the cache is donated and
updated in place. For each semantics this searches the largest batch with shared.plan.max_batch
(fast compiles to locate, exact compiles at the boundary, from an empty plan cache) and records
the batches, the bytes per device at the boundary, every probe, the compiles, the versions and
the date, with the closed form (weights + KV-cache copies) beside. No TPU needed.

    python benchmarks/bench_tunix_semantics.py \\
        --out benchmarks/results/01_rollout_tunix_semantics.json
"""

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("WANDB_MODE", "disabled")  # `import tunix` imports its wandb logger

from shared import hardware, models, plan  # noqa: E402
from shared.errors import run_cli  # noqa: E402
from shared.plan import verdict  # noqa: E402
from shared.plan.search.view import probe_rows  # noqa: E402
from shared.report import results  # noqa: E402
from shared.rollout import sweep as rollout_sweep  # noqa: E402
from shared.rollout.sampler import SEMANTICS  # noqa: E402

FIELD = {
    "tunix": "December 2025 (0.1.6 semantics: no donation)",
    "ran": 200,
    "out_of_memory": 256,
    "prompt_len": 128,
    "steps": 1024,
    "cache_size": 1312,
}


def _boundary(point: dict | None) -> dict | None:
    """The verdict at one side of the boundary, reduced to its bytes."""
    if point is None:
        return None
    keys = (
        "batch",
        "fits",
        "bytes_per_device",
        "resident_bytes",
        "transient_bytes",
        "worst",
        "hbm_bytes",
        "refused",
        "roofline_lower_bound_s",
        "compile_s",
    )
    return {key: point[key] for key in keys}


def search(semantics: str, a) -> dict:
    request = plan.Request(
        "rollout",
        a.model,
        a.target,
        batch=1,
        prompt_len=a.prompt_len,
        steps=a.steps,
        cache_size=a.cache_size,
        tunix=semantics,
    )
    found = plan.max_batch(request, progress=False)
    exact = {p["batch"]: p for p in found["probes"] if not p["fast"]}
    dims, target = models.model_dims(a.model), hardware.parse_target(a.target)
    return {
        "max_batch": found["max_batch"],
        "first_not_fitting": found["first_not_fitting"],
        "converged": found["converged"],
        "compiles": found["compiles"],
        "search_wall_s": found["wall_s"],
        "summary": plan.describe(found),
        "at_max": _boundary(exact.get(found["max_batch"])),
        "at_first_not_fitting": _boundary(exact.get(found["first_not_fitting"])),
        "closed_form_max_batch": rollout_sweep.closed_form_max_batch(
            dims, target.chip.compiler_hbm_bytes, a.cache_size, semantics=semantics
        ),
        "probes": probe_rows(found),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", default="gemma3-1b")
    p.add_argument("--target", default="v5e-1")
    p.add_argument("--prompt-len", type=int, default=FIELD["prompt_len"])
    p.add_argument("--steps", type=int, default=FIELD["steps"])
    p.add_argument("--cache-size", type=int, default=FIELD["cache_size"])
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    started = time.perf_counter()
    report = {
        **results.header("benchmarks/bench_tunix_semantics.py", argv),
        "field": FIELD,
        "setting": {
            "model": a.model,
            "target": a.target,
            "prompt_len": a.prompt_len,
            "steps": a.steps,
            "cache_size": a.cache_size,
        },
        "semantics": {},
    }
    with tempfile.TemporaryDirectory() as empty:  # compile counts from an empty cache
        verdict.CACHE_DIR = Path(empty)
        for semantics in SEMANTICS:
            entry = report["semantics"][semantics] = search(semantics, a)
            print(
                f"tunix {semantics}: {entry['summary']}; {entry['compiles']} compiles, "
                f"{entry['search_wall_s']:.0f} s",
                flush=True,
            )
    report["wall_s"] = time.perf_counter() - started
    results.write(a.out, report)
    return 0


if __name__ == "__main__":
    run_cli(main)
