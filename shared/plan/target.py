"""Where plan mode compiles: a TPU slice's abstract devices (libtpu, no chip needed), or the
GPU attached to this machine; the HBM the compiler lets a program use.

libtpu from PyPI compiles for TPU topologies on a machine without a TPU
(`jax.experimental.topologies.get_topology_desc`). On a GPU machine the same jitted functions
compile for the local GPU and read `memory_analysis()` before anything is allocated, so GPU
users get a verdict first too.
"""

import glob
import os

from jax.sharding import Mesh

from shared.errors import BadInput
from shared.hardware import Target, chip_for_device_kind
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
            f"{target.name} is not a TPU: plan mode compiles for TPU slices "
            "(v5e-1, v5e-8, v6e-1, v6e-8, v5p-8, tpu7x-8) or for the GPU attached here"
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


def local_gpu_devices(target: Target) -> list:
    """The attached GPUs when `target` names their chip (h100 on an H100 machine)."""
    import jax

    gpus = [d for d in jax.local_devices() if d.platform == "gpu"]
    if not gpus or chip_for_device_kind(gpus[0].device_kind) is not target.chip:
        here = gpus[0].device_kind if gpus else "no GPU"
        raise BadInput(
            f"plan mode compiles for {target.name} on that GPU itself, and this "
            f"machine has {here}; plan for a TPU slice instead (v5e-8, v6e-1, ...)"
        )
    if target.chips > len(gpus):
        raise BadInput(f"{target.name} wants {target.chips} GPUs, this machine has {len(gpus)}")
    return gpus[: target.chips]


def target_devices(target: Target) -> list:
    return topology_devices(target) if target.chip.is_tpu else local_gpu_devices(target)


def target_mesh(target: Target, mesh: str | None = None) -> Mesh:
    """An ("fsdp", "tp") mesh over the target's devices; default all on fsdp."""
    return make_mesh(mesh, target_devices(target))


def usable_hbm_per_device(target: Target, devices: list) -> int:
    """The HBM one device may hold: what libtpu's compiler allows (15.75 of a v5e's 16 GiB),
    or what the GPU runtime reports it may allocate; the datasheet number otherwise."""
    if target.chip.compiler_hbm_bytes:
        return target.chip.compiler_hbm_bytes
    if not target.chip.is_tpu:
        stats = devices[0].memory_stats() or {}
        if stats.get("bytes_limit"):
            return int(stats["bytes_limit"])
    return target.chip.hbm_bytes_per_device
