"""Meshes with the ("fsdp", "tp") axes tunix and our model use, and sharded initialisation.

Sharded initialisation: `nnx.eval_shape` gives every parameter's shape and partition spec
without allocating; `jax.jit(init, out_shardings=...)` then creates each parameter already
sharded, so no device or host ever holds a whole embedding table.

Why the mesh axes are `Auto`: on an `Explicit`-axes mesh (jax.make_mesh's default in jax 0.10)
a flax nnx initialiser draws the whole random table on every device and slices it afterwards;
with `Auto` axes XLA pushes the output sharding into the random-number generation. Measured on
8 CPU devices for a [262144, 1152] fp32 table: 4.5 GiB of temporaries per device with
Explicit axes, 432 MiB (three shards' worth) with Auto (notebook 06 shows the comparison).
"""

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from shared.errors import BadInput

AXES = ("fsdp", "tp")


def mesh_shape(spec: str | tuple[int, int] | None, n_devices: int) -> tuple[int, int]:
    """'2x4' -> (fsdp=2, tp=4); None -> every device on fsdp. Must use all devices."""
    if spec is None:
        return (n_devices, 1)
    try:
        shape = tuple(int(x) for x in spec.lower().split("x")) if isinstance(spec, str) else spec
    except ValueError:
        shape = ()
    if len(shape) != 2 or min(shape) < 1 or shape[0] * shape[1] != n_devices:
        raise BadInput(
            f"mesh {spec!r} must be FSDPxTP using all {n_devices} devices, "
            f"e.g. {n_devices}x1 or 1x{n_devices}"
        )
    return shape


def mesh_name(shape: tuple[int, int] | dict) -> str:
    """(2, 4) or {"fsdp": 2, "tp": 4} -> '2x4': mesh_shape's inverse, the name every report,
    store row and --mesh flag uses."""
    fsdp, tp = (shape["fsdp"], shape["tp"]) if isinstance(shape, dict) else shape
    return f"{fsdp}x{tp}"


def make_mesh(shape: str | tuple[int, int] | None = None, devices=None) -> Mesh:
    """An ("fsdp", "tp") mesh with Auto axes over `devices` (default: this process's devices)."""
    devices = list(jax.devices() if devices is None else devices)
    fsdp, tp = mesh_shape(shape, len(devices))
    return Mesh(np.array(devices).reshape(fsdp, tp), AXES, axis_types=(AxisType.Auto,) * 2)


def check_batch(batch: int, mesh: Mesh) -> int:
    """Batches are split over the fsdp axis: the batch must divide evenly."""
    fsdp = mesh.shape["fsdp"]
    if batch < 1 or batch % fsdp:
        raise BadInput(
            f"batch {batch} does not divide the mesh's fsdp axis of {fsdp}: "
            f"use a multiple of {fsdp} (or a mesh with a smaller fsdp axis)"
        )
    return batch


def batch_sharding(mesh: Mesh, ndim: int = 2) -> NamedSharding:
    """Shard the leading (batch) axis over fsdp, replicate the rest."""
    return NamedSharding(mesh, PartitionSpec("fsdp", *([None] * (ndim - 1))))


def abstract_module(factory: Callable[[], nnx.Module], mesh: Mesh) -> nnx.Module:
    """The module with ShapeDtypeStruct leaves carrying their shardings; nothing allocated."""
    with jax.set_mesh(mesh):
        return nnx.eval_shape(factory)


def state_shardings(abstract: nnx.Module, mesh: Mesh):
    """NamedShardings for the module's state, from the partition specs its params declare."""
    specs = nnx.get_partition_spec(nnx.state(abstract))
    return jax.tree.map(lambda spec: NamedSharding(mesh, spec), specs)


def abstract_like(tree, shardings):
    """ShapeDtypeStructs with `tree`'s shapes and dtypes carrying `shardings` (a matching tree
    of NamedShardings): what plan mode lowers with, nothing allocated."""
    return jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(
            x.shape, x.dtype, sharding=s, weak_type=getattr(x, "weak_type", False)
        ),
        tree,
        shardings,
    )


def bytes_per_device(abstract_tree) -> int:
    """Bytes one device holds of a tree of sharded ShapeDtypeStructs (or arrays): each leaf's
    shard shape times its item size. Datasheet arithmetic: the TPU compiler may pad small
    minor dimensions to its tiles, which only its own memory analysis shows."""
    return sum(
        math.prod(x.sharding.shard_shape(x.shape)) * np.dtype(x.dtype).itemsize
        for x in jax.tree.leaves(abstract_tree)
    )


def on_mesh(abstract_state, mesh: Mesh):
    """An abstract nnx state (leaves inside their Variables) carrying the NamedShardings its
    partition annotations give on `mesh`."""
    return abstract_like(abstract_state, nnx.get_named_sharding(abstract_state, mesh))


def put_on_mesh(module: nnx.Module, mesh: Mesh, dtype=None) -> nnx.Module:
    """Every array of a module built on the host, moved to `mesh` in the sharding its partition
    annotations give (cast to `dtype` on the way if given); the host copies are dropped."""
    state = nnx.state(module)
    shardings = nnx.get_named_sharding(state, mesh)

    def put(x, sharding):
        x = x if dtype is None or not jnp.issubdtype(x.dtype, jnp.floating) else x.astype(dtype)
        return jax.device_put(x, sharding)

    nnx.update(module, jax.tree.map(put, state, shardings))
    return module


def sharded_init(factory: Callable[[], nnx.Module], mesh: Mesh) -> nnx.Module:
    """Build the module with every parameter created directly in its shards."""
    abstract = abstract_module(factory, mesh)
    graphdef = nnx.graphdef(abstract)
    shardings = state_shardings(abstract, mesh)
    with jax.set_mesh(mesh):
        state = jax.jit(lambda: nnx.state(factory()), out_shardings=shardings)()
    return nnx.merge(graphdef, state)


def opt_state_shardings(optimizer, params, mesh: Mesh):
    """Shardings for optimizer.init(params): a leaf that mirrors a parameter (Adam's mu and nu)
    gets that parameter's sharding, anything else (the step count) is replicated.

    `jax.jit(optimizer.init)` alone would replicate the whole state on every device. Works on
    real arrays and on sharded ShapeDtypeStructs alike.
    """
    by_path = {
        tuple(map(str, path)): (x.shape, x.sharding)
        for path, x in jax.tree_util.tree_flatten_with_path(params)[0]
    }

    def pick(path, x):
        keys = tuple(map(str, path))
        for start in range(len(keys)):
            shape, sharding = by_path.get(keys[start:], (None, None))
            if shape == x.shape:
                return sharding
        return NamedSharding(mesh, PartitionSpec())

    return jax.tree_util.tree_map_with_path(pick, jax.eval_shape(optimizer.init, params))
