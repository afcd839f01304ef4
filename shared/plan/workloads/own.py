"""A step that is no recipe: plan a reader's own jax function for a slice or GPU machine.

The ahead-of-time "will it fit" of MaxText's train_compile.py, for any jax program: the
function and abstract arguments a reader hands in become a workload like the presets'
(`WORKLOADS[...]`), so they get the same verdict (per-device bytes from the compiler, its
largest buffers, the roofline) and the same batch search (shared.plan.search), with nothing
re-implemented. Arguments are `jax.ShapeDtypeStruct`s (`jax.eval_shape` gives them for any
pytree) and their shardings `PartitionSpec`s over the plan's mesh axes, "fsdp" and "tp",
placed on the target's devices here, since the reader has no target mesh to build them on.

    point = plan.fits(step, (params, batch), target="v5e-8", specs=(param_specs, P("fsdp")))
    search = plan.largest_batch(lambda b: ((params, batch_of(b)), specs), target="h100-1")

Verdicts of these are never cached: the plan cache keys on our source and a request's
fields, neither of which sees the reader's function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from shared.errors import BadInput
from shared.plan.compiler.executable import Executable, Workload
from shared.plan.workloads import WORKLOADS
from shared.plan.workloads.request import OWN_PREFIX, Request

MESH_AXES = ("fsdp", "tp")  # what every plan mesh is made of (shared.plan.mesh.choice)


def _abstract(args: Any, specs: Any, mesh) -> tuple:
    """`args` with each leaf's PartitionSpec (`specs`: a pytree prefix of `args`, None for
    replicated) placed on `mesh`; BadInput for a concrete array or an axis the mesh lacks."""
    for path, leaf in jax.tree_util.tree_flatten_with_path(args)[0]:
        if isinstance(leaf, jax.Array | np.ndarray):
            raise BadInput(
                f"argument {jax.tree_util.keystr(path) or '(the argument)'} is a concrete array "
                f"{tuple(leaf.shape)}: pass jax.ShapeDtypeStruct(shape, dtype), as jax.eval_shape "
                "gives them, so nothing is allocated here"
            )
        if not isinstance(leaf, jax.ShapeDtypeStruct):
            raise BadInput(
                f"argument {jax.tree_util.keystr(path)} is a {type(leaf).__name__}, not a "
                "jax.ShapeDtypeStruct"
            )

    def place(leaf: jax.ShapeDtypeStruct, spec: PartitionSpec | None) -> jax.ShapeDtypeStruct:
        spec = spec if spec is not None else PartitionSpec()
        named = {str(axis) for part in spec if part is not None for axis in np.atleast_1d(part)}
        if missing := named - set(mesh.axis_names):
            raise BadInput(
                f"the shardings name mesh axis {sorted(missing)[0]!r}, which the plan's mesh "
                f"({', '.join(mesh.axis_names)}) lacks: shard over {' or '.join(MESH_AXES)}"
            )
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=NamedSharding(mesh, spec))

    def spread(spec: PartitionSpec | None, subtree: Any) -> Any:
        """One spec of the prefix, placed on every leaf of the subtree it covers."""
        return jax.tree_util.tree_map(lambda leaf: place(leaf, spec), subtree)

    is_spec = lambda x: x is None or isinstance(x, PartitionSpec)  # noqa: E731
    try:
        return jax.tree_util.tree_map(spread, specs, args, is_leaf=is_spec)
    except BadInput:
        raise
    except ValueError as err:  # specs is not a prefix of args
        raise BadInput(f"the specs do not match the arguments' structure: {err}") from None


def _jitted(fn: Callable) -> Callable:
    if not callable(fn):
        raise BadInput(f"{fn!r} is not a function")
    return fn if hasattr(fn, "lower") else jax.jit(fn)


def register(fn: Callable, make_args: Callable[[int], tuple], name: str) -> str:
    """Register the reader's step as workload `own:NAME`: at a request's batch, `make_args`
    gives (args, specs), the step's abstract arguments and their PartitionSpecs."""
    jitted = _jitted(fn)

    def build(request: Request, mesh) -> Workload:
        args, specs = make_args(request.batch)
        args = args if isinstance(args, tuple) else (args,)
        placed = _abstract(args, specs, mesh)
        try:
            jax.eval_shape(jitted, *placed)
        except Exception as err:  # a step that does not trace: say so in one line
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise BadInput(f"{name} does not trace under jax.jit: {first}") from None
        return Workload([Executable(name, jitted, placed)])

    workload = OWN_PREFIX + name
    WORKLOADS[workload] = build
    return workload


def fits(
    fn: Callable,
    args: Any,
    *,
    target: str,
    specs: Any = None,
    mesh: str | None = None,
    name: str = "step",
) -> dict:
    """The compiler's verdict on `fn(*args)` for `target`, as a preset's: bytes per device,
    fits or not, its largest buffers, the roofline. `mesh`: "FxT" (fsdp x tp; default: every
    device on fsdp)."""
    from shared.hardware import parse_target
    from shared.plan.compiler.target import target_devices
    from shared.plan.verdict import plan_point

    workload = register(fn, lambda batch: (args, specs), name)
    # The args are fixed, so the request's batch only picks the mesh: the device count, which
    # every mesh's fsdp divides, so the default is all fsdp (batch 1 chose all tp on a v5e-8)
    devices = len(target_devices(parse_target(target)))
    return plan_point(Request(workload, name, target, batch=devices, mesh=mesh), use_cache=False)


def largest_batch(
    make_args: Callable[[int], tuple],
    fn: Callable,
    *,
    target: str,
    mesh: str | None = None,
    multiple_of: int | None = None,
    name: str = "step",
    progress: bool = True,
) -> dict:
    """The largest batch at which `fn` fits `target`: the presets' search (locate, confirm,
    check: docs/search.md), where `make_args(batch)` gives (args, specs) at each batch it asks
    about."""
    from shared.plan.search.max_batch import max_batch

    workload = register(fn, make_args, name)
    request = Request(workload, name, target, mesh=mesh)
    return max_batch(request, multiple_of=multiple_of, use_cache=False, progress=progress)
