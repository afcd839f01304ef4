"""Plan mode: "will it fit on that TPU?" answered on a laptop by the real TPU compiler.

We lower the SAME jitted functions device mode runs, with abstract arguments (ShapeDtypeStructs
carrying the model's shardings on a mesh of the target's devices), compile them with libtpu
(no TPU needed) and read per-device bytes from `memory_analysis()`, FLOPs and bytes accessed
from `cost_analysis()`. A verdict covers the whole workload: resident buffers once, plus the
worst executable's transient bytes, against the HBM the compiler allows.

    python -m shared.plan rollout --model gemma3-1b --target v5e-1 --max-batch \\
        --cache-size 1312 --prompt-len 256 --steps 1024

Modules: `target` (devices, usable HBM, versions), `workloads` (what gets compiled),
`verdict` (one compile of a workload, cached), `search` (the largest batch), `__main__` (CLI).
"""

from shared.plan.search import describe, max_batch
from shared.plan.target import target_mesh, topology_devices, versions
from shared.plan.verdict import (
    FAST_COMPILE,
    Request,
    cache_path,
    combine,
    is_cached,
    plan_point,
)
from shared.plan.workloads import WORKLOADS

__all__ = [
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
