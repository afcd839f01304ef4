"""Plan mode: "will it fit on that TPU?" answered on a laptop by the real TPU compiler.

We lower the SAME jitted functions device mode runs, with abstract arguments (ShapeDtypeStructs
carrying the model's shardings on a mesh of the target's devices), compile them with libtpu
(no TPU needed) and read per-device bytes from `memory_analysis()`, FLOPs and bytes accessed
from `cost_analysis()`. A verdict covers the whole workload: resident buffers once, plus the
worst executable's transient bytes, against the HBM the compiler allows.

    python -m shared.plan rollout --model gemma3-1b --target v5e-1 --max-batch \\
        --cache-size 1312 --prompt-len 256 --steps 1024

Modules: `target` (devices, usable HBM), `workloads/` (what gets compiled, one file per
workload), `executable` (the types a workload is made of), `compiled` (compile one executable,
read its bytes, FLOPs and `buffers`), `verdict` (a whole workload's verdict, cached), `search`
(the largest batch), `frontier` (what to change), `budget` (hours and dollars), `field`
(published points we must agree with), `layer_probe` (what a step keeps per layer), `__main__`
(the command line).
"""

from shared.plan.compiled import FAST_COMPILE
from shared.plan.search import describe, max_batch
from shared.plan.target import target_mesh, topology_devices
from shared.plan.verdict import (
    Request,
    cache_path,
    combine,
    is_cached,
    plan_point,
)
from shared.plan.workloads import COMMON, READS, WORKLOADS
from shared.versions import versions

__all__ = [
    "COMMON",
    "READS",
    "FAST_COMPILE",
    "WORKLOADS",
    "Request",
    "cache_path",
    "combine",
    "describe",
    "is_cached",
    "max_batch",
    "plan_point",
    "target_mesh",
    "topology_devices",
    "versions",
]
