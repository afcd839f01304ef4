"""Grow the atlas (does model M fit slice C for recipe R, and at what batch?) and render it:
a thin command line over shared.plan.atlas (see its docstring for the store and the grid).

    nice -n 19 python benchmarks/bench_atlas.py --limit-minutes 60 \\
        --only recipe=rollout,model=gemma3-1b,model=gemma2-2b,target=v5e-1,target=v5e-8
    # one run per core, sharing the store and the plan cache: a run waits while the other's
    # compile may still take the memory its own needs (shared.plan.compiler.host_memory.announce),
    # so on a 23 GiB host two exact LoRA compiles of 8B models on a tpu7x-8 (each process grew to
    # 14-19 GB, 2026-12-02) go one at a time
    nice -n 19 python benchmarks/bench_atlas.py --shard 1/2 --limit-minutes 170 &
    nice -n 19 python benchmarks/bench_atlas.py --shard 2/2 --limit-minutes 170 &
    python benchmarks/bench_atlas.py --render-only

`nice` orders processes within one session only where the kernel shares CPU time out by
session (/proc/sys/kernel/sched_autogroup_enabled is 1): a run started under `setsid`, or from
another terminal, competes at full weight (two shards at nice 19 took 75% of 2 cores from a
test suite at nice 0, 2026-11-28). Lower its session's share too: `echo 19 >
/proc/$PID/autogroup`.
"""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # plan mode never needs the local accelerator
os.environ.setdefault("WANDB_MODE", "disabled")

from shared.errors import run_cli  # noqa: E402
from shared.plan.atlas.cli import main  # noqa: E402

if __name__ == "__main__":
    run_cli(main)
