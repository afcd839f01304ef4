"""Where plan mode compiles: a TPU slice's or a GPU machine's abstract devices, no chip
needed; the HBM a program may use there.

libtpu from PyPI compiles for TPU topologies on a machine without a TPU, and jax's CUDA plugin
(with ptxas from nvidia-cuda-nvcc-cu12) for GPU topologies on a machine without a GPU, both
through `jax.experimental.topologies.get_topology_desc`. The plugin checks for a CUDA driver
when jax starts its GPU backend; with JAX_PLATFORMS=cpu (plan mode's default, the Makefile's on
a machine without an accelerator) it never does, and compiles all the same.
"""

import functools
import glob
import importlib.util
import os

from jax.sharding import Mesh

from shared.errors import BadInput
from shared.hardware import CHIPS, Target, gpus
from shared.hardware.sharding import make_mesh


def _quiet_libtpu_without_tpu() -> None:
    """On a host with no TPU, tell libtpu what it would otherwise probe for (and complain about),
    and let several processes load it: compiling needs no chip, so libtpu's one-process
    lockfile (/tmp/libtpu_lockfile) would only stop a second notebook or CLI from planning.

    Only defaults are set, and only when no TPU device node exists, so a real TPU VM is untouched.
    """
    if glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"):
        return
    for key, value in (
        ("TPU_SKIP_MDS_QUERY", "1"),
        ("TPU_WORKER_HOSTNAMES", "localhost"),
        ("TPU_WORKER_ID", "0"),
        ("TPU_ACCELERATOR_TYPE", "v5litepod-8"),
        ("ALLOW_MULTIPLE_LIBTPU_LOAD", "1"),
    ):
        os.environ.setdefault(key, value)


def topology_devices(target: Target) -> list:
    """The abstract TPU devices of `target`, for ahead-of-time compilation."""
    if not target.chip.is_tpu:
        raise BadInput(
            f"{target.name} is neither a TPU slice nor a GPU machine: plan mode compiles for "
            "TPU slices (v5e-1, v5e-8, v6e-1, v5p-8, tpu7x-8) and GPUs (t4-2, l4-1, h100-8)"
        )
    if target.topology is None:
        raise BadInput(
            f"no TPU topology for {target.name}: use a power-of-two chip count "
            f"such as {target.chip.name}-8"
        )
    try:
        from jax.experimental import topologies
    except ImportError as err:
        raise BadInput(f"plan mode needs jax.experimental.topologies: {err}") from err
    try:
        import libtpu  # noqa: F401
    except ImportError as err:
        raise BadInput(
            "plan mode needs libtpu: pip install -r requirements.txt "
            "(it pins jax[tpu], which brings libtpu)"
        ) from err
    _quiet_libtpu_without_tpu()
    kwargs = {}
    if target.single_host_bounds is not None:
        kwargs["chips_per_host_bounds"] = target.single_host_bounds
    try:
        topology = topologies.get_topology_desc(
            platform="tpu", topology_name=target.topology, **kwargs
        )
    except Exception as err:  # libtpu raises plain RuntimeErrors for unknown topologies
        raise BadInput(
            f"libtpu could not make topology {target.topology} for {target.name}: "
            f"{str(err).splitlines()[0]}"
        ) from err
    return list(topology.devices)


def gpu_topology_devices(target: Target) -> list:
    """Compile-only CUDA devices for a GPU target, no GPU needed: jax's CUDA plugin compiles for
    a topology described by a GpuTargetConfigProto (shared.hardware.gpus.target_config), with
    ptxas from nvidia-cuda-nvcc-cu12 (requirements.txt). Cached per target and memory fraction:
    the topology is made once a process."""
    usable = usable_hbm_per_device(target)
    return list(_gpu_topology(target.chip.name, target.chips, usable))


@functools.cache
def _gpu_topology(chip_name: str, count: int, usable: int) -> tuple:
    try:
        from jax.experimental import topologies
    except ImportError as err:
        raise BadInput(f"plan mode needs jax.experimental.topologies: {err}") from err
    if not any(importlib.util.find_spec(f"jax_plugins.xla_cuda{v}") for v in (12, 13)):
        raise BadInput(
            "a GPU plan compiles with jax's CUDA plugin: pip install -r requirements.txt "
            "(it pins jax-cuda12-plugin, jax-cuda12-pjrt and nvidia-cuda-nvcc-cu12)"
        )
    chip = CHIPS[chip_name]
    config = gpus.target_config(chip_name, usable, chip.hbm_bandwidth)
    try:
        topology = topologies.get_topology_desc(
            platform="cuda", target_config=config, topology=f"1x1x{count}"
        )
    except Exception as err:  # the plugin raises plain errors for a config it cannot parse
        raise BadInput(
            f"jax's CUDA plugin could not make a {count}-GPU {chip_name} topology: "
            f"{str(err).splitlines()[0]} (JAX_PLATFORMS=cpu lets it compile without a GPU)"
        ) from err
    return tuple(topology.devices)


def target_devices(target: Target) -> list:
    """The devices a plan compiles for: a TPU slice's (libtpu) or a GPU machine's (jax's CUDA
    plugin), compile-only either way; this machine's accelerator is never used."""
    if target.chip.name in gpus.SPECS:
        return gpu_topology_devices(target)
    return topology_devices(target)


def target_mesh(target: Target, mesh: str | None = None) -> Mesh:
    """An ("fsdp", "tp") mesh over the target's devices; default all on fsdp."""
    return make_mesh(mesh, target_devices(target))


def usable_hbm_per_device(target: Target) -> int:
    """The HBM one device may hold: what libtpu's compiler allows (15.75 of a v5e's 16 GiB), or
    on a GPU what jax's allocator may hand out (shared.hardware.gpus.usable_bytes: its memory
    fraction of CUDA's total); the datasheet number otherwise."""
    if target.chip.compiler_hbm_bytes:
        return target.chip.compiler_hbm_bytes
    if target.chip.name in gpus.SPECS:
        return gpus.usable_bytes(target.chip.name)
    return target.chip.hbm_bytes_per_device
