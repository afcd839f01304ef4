"""What honouring tunix's activation shardings buys: the TPU compiler's bytes for a LoRA step
compiled with tunix's own `shard` helpers (which drop every constraint under `jax.set_mesh` and
on a CPU host) and as shared/ compiles it (shared.models.activation_sharding), as JSON.

tunix's models pin their activations' layout with `shard(x, shd_config.act_btd)` and the like.
tunix 0.1.7's helpers read only the legacy `pxla.thread_resources` mesh and return x unchanged
when the host's first device is a CPU, as it always is in plan mode, so without our
replacement XLA is free to gather the whole batch on every chip. On one device there is
nothing to split: a single-chip target (`--targets v5e-1`) shows the two compile alike, which
is why only multi-device atlas cells were recomputed when the fix landed.

This compiles `lora-train` twice per target and batch, never reading the plan cache, and never
writing the as-tunix-ships verdicts to it. No TPU needed.

    python benchmarks/bench_activation_sharding.py --model gemma3-1b \\
        --targets v5e-8:8,v5e-8:16,v5e-1:5 --out benchmarks/results/activation_sharding.json
"""

import argparse
import contextlib
import os
import tempfile
import time
from pathlib import Path
from unittest import mock

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("WANDB_MODE", "disabled")  # `import tunix` imports its wandb logger

from shared import models, plan  # noqa: E402
from shared.errors import run_cli  # noqa: E402
from shared.plan import verdict  # noqa: E402
from shared.report import results  # noqa: E402


@contextlib.contextmanager
def as_tunix_ships():
    """tunix's own shard helpers, and plan verdicts written to a temporary cache: a verdict
    compiled in here is not what shared/ compiles for its request."""
    with contextlib.ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        stack.enter_context(mock.patch.object(verdict, "CACHE_DIR", scratch))
        stack.enter_context(models.activation_sharding.as_tunix_ships())
        yield


def compile_point(request: plan.Request) -> dict:
    point = plan.plan_point(request, use_cache=False)
    (step,) = point["executables"].values()
    return {
        "fits": point["fits"],
        "largest_buffers": step["largest_buffers"][:3],
        "bytes_per_device": point["bytes_per_device"],
        "temp_bytes": step["temp_bytes"],
        "hbm_bytes": point["hbm_bytes"],
        "compile_s": point["compile_s"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", default="gemma3-1b")
    p.add_argument(
        "--targets",
        default="v5e-8:8,v5e-8:16,v5e-1:5",
        help="comma-separated TARGET:BATCH points (global batch)",
    )
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--lora-rank", type=int, default=16)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    started = time.perf_counter()
    report = {
        **results.header("benchmarks/bench_activation_sharding.py", argv),
        "setting": {
            "workload": "lora-train",
            "model": a.model,
            "seq": a.seq,
            "lora_rank": a.lora_rank,
            "remat": "none",
            "loss": "chunked",
        },
        "points": [],
    }
    for point in a.targets.split(","):
        target, batch = point.split(":")
        request = plan.Request(
            "lora-train",
            a.model,
            target,
            batch=int(batch),
            seq=a.seq,
            lora_rank=a.lora_rank,
            remat="none",
            loss="chunked",
        )
        with as_tunix_ships():
            dropped = compile_point(request)
        honoured = compile_point(request)
        report["points"].append(
            {"target": target, "batch": int(batch), "as_tunix_ships": dropped, "shared": honoured}
        )
        print(
            f"{target} batch {batch}: temp {dropped['temp_bytes'] / 1e9:.2f} GB "
            f"(fits {dropped['fits']}) with tunix's helpers -> "
            f"{honoured['temp_bytes'] / 1e9:.2f} GB (fits {honoured['fits']}) with ours",
            flush=True,
        )
    report["wall_s"] = time.perf_counter() - started
    results.write(a.out, report)
    return 0


if __name__ == "__main__":
    run_cli(main)
