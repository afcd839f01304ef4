"""Plan mode: "will it fit on that TPU?" answered on a laptop by the real TPU compiler.

We lower the SAME jitted functions device mode runs, with abstract arguments (ShapeDtypeStructs
carrying the model's shardings on a mesh of the target's devices), compile them with libtpu
(no TPU needed) and read per-device bytes from `memory_analysis()`, FLOPs and bytes accessed
from `cost_analysis()`. A verdict covers the whole workload: resident buffers once, plus the
worst executable's transient bytes, against the HBM the compiler allows.

    python -m shared.plan rollout --model gemma3-1b --target v5e-1 --max-batch \\
        --cache-size 1312 --prompt-len 256 --steps 1024

Packages, by concept: `compiler/` (the target's abstract devices, lowering, one compile and
the bytes it reports, the plan cache), `workloads/` (what gets compiled, one module per
workload; the `Request` that names one; its matmul bound), `mesh/` (which mesh, and whether a
request can fit one at all), `search/` (the largest batch: docs/search.md), `slices/` (which
slice to rent, hours and dollars), `atlas/` (model x slice x recipe, and its instant `lookup`),
`cli/` (the command lines). `verdict` is one whole workload's verdict, cached; `frontier` is
what to change; `field` holds the published points plan mode must agree with.

A step that is no preset plans too: `plan.fits(fn, args, target="v5e-8", specs=...)` and
`plan.largest_batch(make_args, fn, target=...)` (shared.plan.workloads.own).

The names below load on first use (PEP 562): importing the compiler stack takes seconds, and
`python -m shared.plan.atlas.lookup` must answer from the committed atlas in well under one.
"""

from shared import lazy

# name -> the module that defines it
_EXPORTS = {
    "FAST_COMPILE": "shared.plan.compiler.compiled",
    "fits": "shared.plan.workloads.own",
    "largest_batch": "shared.plan.workloads.own",
    "describe": "shared.plan.search.view",
    "max_batch": "shared.plan.search.max_batch",
    "target_mesh": "shared.plan.compiler.target",
    "target_devices": "shared.plan.compiler.target",
    "topology_devices": "shared.plan.compiler.target",
    "Request": "shared.plan.workloads.request",
    "cache_path": "shared.plan.verdict",
    "combine": "shared.plan.compiler.workload_bytes",
    "is_cached": "shared.plan.verdict",
    "plan_point": "shared.plan.verdict",
    "COMMON": "shared.plan.workloads",
    "READS": "shared.plan.workloads",
    "WORKLOADS": "shared.plan.workloads",
    "versions": "shared.versions",
}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy.exports(__name__, _EXPORTS)
