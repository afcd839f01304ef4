"""How much HBM a multi-chip LoRA fine-tune loses because tunix's activation shardings never
apply under our mesh context: the TPU compiler's bytes with them dropped and honoured, as JSON.

tunix's models pin their activations' layout with `shard(x, shd_config.act_btd)` and the like
(`tunix.utils.sharding_utils.shard`, or a `shard` of the model's own module). That helper reads
the legacy `pxla.thread_resources` mesh, which `jax.set_mesh` (what shared/ enters) does not
set, and it returns x unchanged when the host's first device is a CPU, as it always is in plan
mode. So both plan mode and device mode compile the model without those constraints, and XLA
is free to gather the whole batch on every chip (the memory report of the gemma3-tiny step on
v5e-8 at batch 64 shows [64, 2048, F/8] MLP activations, not [8, 2048, F]).

This compiles `lora-train` twice per batch, never reading the plan cache: as shared/ runs it
today, and with every tunix `shard` helper replaced, for the run of this script only, by one
that constrains under the mesh `jax.set_mesh` put in context whatever the host is. Nothing in
shared/ changes; the difference is what a fix there would buy. No TPU needed.

    python benchmarks/bench_activation_sharding.py --model gemma3-1b --target v5e-8 \\
        --batches 8,16 --out benchmarks/results/activation_sharding.json
"""

import argparse
import contextlib
import datetime
import importlib
import os
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("WANDB_MODE", "disabled")  # `import tunix` imports its wandb logger

import jax  # noqa: E402
from jax.sharding import PartitionSpec  # noqa: E402

from shared import plan  # noqa: E402
from shared.data import files  # noqa: E402
from shared.errors import run_cli  # noqa: E402
from shared.plan import verdict  # noqa: E402

# Where tunix keeps a `shard(x, spec)` that its models call at run time (as a global name or
# as sharding_utils.shard), so replacing the module attribute reaches every call.
SHARD_HELPERS = (
    "tunix.utils.sharding_utils",
    "tunix.models.gemma.model",
    "tunix.models.gemma4.model",
    "tunix.models.llama3.model",
    "tunix.models.qwen2.model",
    "tunix.models.qwen3.model",
)


def shard_under_set_mesh(x, spec, eager=False):
    """tunix's shard, reading the mesh `jax.set_mesh` sets and ignoring the host's platform."""
    if jax.sharding.get_abstract_mesh().empty:
        return x
    return jax.lax.with_sharding_constraint(x, PartitionSpec(*spec))


@contextlib.contextmanager
def honoured_activation_sharding():
    """tunix's shard helpers replaced by shard_under_set_mesh, and plan verdicts written to a
    temporary cache: a verdict compiled in here is not what shared/ compiles for its request."""
    with contextlib.ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        stack.enter_context(mock.patch.object(verdict, "CACHE_DIR", scratch))
        for name in SHARD_HELPERS:
            module = importlib.import_module(name)
            stack.enter_context(mock.patch.object(module, "shard", shard_under_set_mesh))
        yield


def compile_point(request: plan.Request) -> dict:
    point = plan.plan_point(request, use_cache=False)
    (step,) = point["executables"].values()
    return {
        "fits": point["fits"],
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
    p.add_argument("--target", default="v5e-8")
    p.add_argument("--batches", default="8,16", help="comma-separated global batches")
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--lora-rank", type=int, default=16)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    started = time.perf_counter()
    setting = {"model": a.model, "target": a.target, "seq": a.seq, "lora_rank": a.lora_rank}
    report = {
        "command": "python benchmarks/bench_activation_sharding.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "date": datetime.date.today().isoformat(),
        "host_cpus": os.cpu_count(),
        "versions": plan.versions(),
        "setting": {"workload": "lora-train", "remat": "none", "loss": "chunked", **setting},
        "batches": {},
    }
    for batch in [int(b) for b in a.batches.split(",")]:
        request = plan.Request(
            "lora-train",
            a.model,
            a.target,
            batch=batch,
            seq=a.seq,
            lora_rank=a.lora_rank,
            remat="none",
            loss="chunked",
        )
        dropped = compile_point(request)
        with honoured_activation_sharding():
            honoured = compile_point(request)
        report["batches"][batch] = {"as_shared_runs_it": dropped, "honoured": honoured}
        print(
            f"batch {batch}: temp {dropped['temp_bytes'] / 1e9:.2f} GB "
            f"(fits {dropped['fits']}) -> {honoured['temp_bytes'] / 1e9:.2f} GB "
            f"(fits {honoured['fits']}) with tunix's activation shardings",
            flush=True,
        )
    report["wall_s"] = time.perf_counter() - started
    report["load_average"] = os.getloadavg()
    files.write_json(a.out, report)
    return 0


if __name__ == "__main__":
    run_cli(main)
