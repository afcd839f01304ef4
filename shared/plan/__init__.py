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
read its bytes, FLOPs and `buffers`), `workload_bytes` (a workload's bytes by arithmetic),
`floor` (whether a request can fit a mesh at all, by arithmetic), `verdict` (a whole workload's
verdict, cached; `sources` keys the cache on the source it runs), `search` (the largest batch;
`search_lines` aims its compiles, `search_view` says it and lists its evidence), `frontier`
(what to change), `budget` (hours and dollars), `cheapest` (which slice to rent for
a whole job; `cheapest_view` shows it, `jobs` holds notebook 08's jobs), `mesh` (the mesh a
verdict compiles on), `field` (published points we must agree with), `layer_probe` (what a step
keeps per layer), `atlas` (model x slice x recipe), `lookup` (one atlas cell, instantly),
`__main__` (the command line; `point_view` prints a verdict and a search).

The names below load on first use (PEP 562): importing the compiler stack takes seconds, and
`python -m shared.plan.lookup` must answer from the committed atlas in well under one.
"""

import importlib

# name -> the module that defines it
_EXPORTS = {
    "FAST_COMPILE": "shared.plan.compiled",
    "describe": "shared.plan.search_view",
    "max_batch": "shared.plan.search",
    "target_mesh": "shared.plan.target",
    "target_devices": "shared.plan.target",
    "topology_devices": "shared.plan.target",
    "Request": "shared.plan.verdict",
    "cache_path": "shared.plan.verdict",
    "combine": "shared.plan.workload_bytes",
    "is_cached": "shared.plan.verdict",
    "plan_point": "shared.plan.verdict",
    "COMMON": "shared.plan.workloads",
    "READS": "shared.plan.workloads",
    "WORKLOADS": "shared.plan.workloads",
    "versions": "shared.versions",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'shared.plan' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
