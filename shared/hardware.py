"""The chips we size for, and target names like `v5e-8`, `v6e-1`, `v5p-16`, `tpu7x-8` or `h100`.

One table holds every hardware number the project uses, so a datasheet correction is a
one-line change. Each row says where its numbers come from: bf16 dense peak, HBM capacity and
bandwidth per chip, one-way ICI (or NVLink) bandwidth per link, and, for TPUs, the HBM per device
that libtpu's compiler lets a program use (measured deviceless, see `compiler_hbm_bytes`).
"""

import glob
import math
import os
import re
import urllib.request
from dataclasses import dataclass

from shared.errors import BadInput

GiB = 2**30
MiB = 2**20


@dataclass(frozen=True)
class Chip:
    """One accelerator chip. `None` means "not a fixed number" (CPU: measured at run time)."""

    name: str
    peak_bf16_flops: float | None  # dense bf16 FLOP/s
    hbm_bytes: int | None
    hbm_bandwidth: float | None  # bytes/s
    ici_link_bandwidth: float | None  # bytes/s, one direction, one link
    ici_axes: int  # torus dimensions (2 for v5e/v6e, 3 for v4/v5p/tpu7x); 1 for NVLink
    topology_prefix: str | None  # name libtpu uses in topology strings, TPUs only
    cores_per_chip_name: int = 1  # v4/v5p/tpu7x names count TensorCores: v5p-8 is 4 chips
    device_kinds: tuple[str, ...] = ()  # what jax reports as `device.device_kind`
    # jax devices per chip when libtpu compiles deviceless (plan mode): TPU7x shows each of its
    # two TensorCores as a device, and so does v4 there (a v4 TPU VM runs megacore: 1 per chip).
    devices_per_chip: int = 1
    compiler_hbm_bytes: int | None = None  # per device: the most HBM libtpu lets a program use
    source: str = ""  # where the numbers come from

    @property
    def hbm_bytes_per_device(self) -> int | None:
        return None if self.hbm_bytes is None else self.hbm_bytes // self.devices_per_chip

    @property
    def peak_flops_per_device(self) -> float | None:
        peak = self.peak_bf16_flops
        return None if peak is None else peak / self.devices_per_chip

    @property
    def is_tpu(self) -> bool:
        return self.topology_prefix is not None

    @property
    def ici_bidirectional_bandwidth(self) -> float | None:
        """The scaling book's W_ici: both directions of one link."""
        return None if self.ici_link_bandwidth is None else 2 * self.ici_link_bandwidth


# Where the numbers come from. Cloud TPU pages give peak, HBM and HBM bandwidth per chip; the
# scaling book gives one-way ICI bandwidth per link; "compiler" numbers are libtpu's own refusal
# message ("... exceeds available HBM (15.75G)", G = GiB) for a too-large program, measured with
# libtpu 0.0.42.1, deviceless, on 2026-11-22 (tests/test_hardware.py re-measures them).
_BOOK_ICI = "ICI per link: https://jax-ml.github.io/scaling-book/tpus/ (TPU Specs)"
_COMPILER = "usable HBM: measured with libtpu 0.0.42.1, deviceless"


def _gib(value: float) -> int:
    return round(value * GiB)


CHIPS: dict[str, Chip] = {
    c.name: c
    for c in [
        Chip(
            "v4",
            275e12,
            32 * GiB,
            1.2e12,
            45e9,
            3,
            "v4",
            2,
            ("TPU v4",),
            devices_per_chip=2,
            compiler_hbm_bytes=_gib(15.25),
            source=f"https://cloud.google.com/tpu/docs/v4; {_BOOK_ICI}; {_COMPILER}",
        ),
        Chip(
            "v5e",
            197e12,
            16 * GiB,
            819e9,
            45e9,
            2,
            "v5e",
            1,
            ("TPU v5 lite", "TPU v5e"),
            compiler_hbm_bytes=_gib(15.75),
            source=f"https://cloud.google.com/tpu/docs/v5e; {_BOOK_ICI}; {_COMPILER}",
        ),
        # Google's table says 95 GiB, yet the compiler allows 95.74 GiB (the scaling book
        # lists 96 GB): the datasheet number stays, the verdict is the compiler's.
        Chip(
            "v5p",
            459e12,
            95 * GiB,
            2.76e12,
            90e9,
            3,
            "v5p",
            2,
            ("TPU v5", "TPU v5p"),
            compiler_hbm_bytes=_gib(95.74),
            source=f"https://cloud.google.com/tpu/docs/v5p; {_BOOK_ICI}; {_COMPILER}",
        ),
        Chip(
            "v6e",
            918e12,
            32 * GiB,
            1.64e12,
            90e9,
            2,
            "v6e",
            1,
            ("TPU v6 lite", "TPU v6e"),
            compiler_hbm_bytes=_gib(31.25),
            source=f"https://cloud.google.com/tpu/docs/v6e; {_BOOK_ICI}; {_COMPILER}",
        ),
        # Ironwood: 2307 TFLOP/s bf16, 192 GiB, 7380 GB/s and 1200 GB/s bidirectional ICI per
        # chip (Cloud TPU7x page, read 2026-11-22). The book has no TPU7x row, so the link
        # number is derived: 1200 GB/s over 6 links (3D torus) and 2 directions = 100 GB/s (the
        # same arithmetic gives 100 for v5p, where the book says 90). Names count TensorCores
        # (tpu7x-8 = 4 chips = 2x2x1), as in Google's accelerator types; jax sees 2 devices a chip.
        Chip(
            "tpu7x",
            2307e12,
            192 * GiB,
            7.38e12,
            100e9,
            3,
            "tpu7x",
            2,
            ("TPU7x",),
            devices_per_chip=2,
            compiler_hbm_bytes=_gib(94.75),
            source=f"https://docs.cloud.google.com/tpu/docs/tpu7x; {_COMPILER}",
        ),
        # GPU capacities are what the driver reports for the card (MiB), not the box's label;
        # peaks are dense bf16 (half the datasheets' with-sparsity figures), NVLink is one
        # direction per GPU.
        Chip(
            "h100",
            989e12,
            81559 * MiB,
            3.35e12,
            450e9,
            1,
            None,
            1,
            ("NVIDIA H100",),
            source="https://www.nvidia.com/en-us/data-center/h100/ (SXM)",
        ),
        Chip(
            "h200",
            989e12,
            143771 * MiB,
            4.8e12,
            450e9,
            1,
            None,
            1,
            ("NVIDIA H200",),
            source="https://www.nvidia.com/en-us/data-center/h200/",
        ),
        Chip(
            "b200",
            2.25e15,
            183359 * MiB,
            8.0e12,
            900e9,
            1,
            None,
            1,
            ("NVIDIA B200",),
            source="https://www.nvidia.com/en-us/data-center/hgx/ (HGX B200, per GPU)",
        ),
        Chip("cpu", None, None, None, None, 1, None, 1, ("cpu",), source="measured at run time"),
    ]
}


# Square-ish 2D layouts libtpu accepts for v5e / v6e slices, by chip count.
_TORUS_2D = {
    1: (1, 1),
    4: (2, 2),
    8: (2, 4),
    16: (4, 4),
    32: (4, 8),
    64: (8, 8),
    128: (8, 16),
    256: (16, 16),
}


@dataclass(frozen=True)
class Target:
    """A slice to run on: a chip type and how many chips."""

    name: str
    chip: Chip
    chips: int

    @property
    def topology(self) -> str | None:
        """libtpu topology string, e.g. 'v5e:2x4'; None for GPUs/CPU or odd chip counts."""
        dims = self.topology_dims
        if dims is None:
            return None
        return f"{self.chip.topology_prefix}:" + "x".join(str(d) for d in dims)

    @property
    def topology_dims(self) -> tuple[int, ...] | None:
        if not self.chip.is_tpu:
            return None
        if self.chip.ici_axes == 2:
            return _TORUS_2D.get(self.chips)
        if self.chips < 4 or self.chips & (self.chips - 1):
            return None
        dims = [2, 2, 1]  # a v4/v5p/tpu7x host is a 2x2x1 block; grow the smallest axis
        while math.prod(dims) < self.chips:
            dims[dims.index(min(dims))] *= 2
        return tuple(dims)

    @property
    def single_host_bounds(self) -> tuple[int, int, int] | None:
        """`chips_per_host_bounds` for slices that are one host (v5e-8 on Kaggle is)."""
        dims = self.topology_dims
        if dims is None or self.chip.ici_axes != 2 or self.chips > 8:
            return None
        return (dims[0], dims[1], 1)

    @property
    def devices(self) -> int:
        """How many jax devices a deviceless compile for this slice sees (tpu7x-8: 8)."""
        return self.chips * self.chip.devices_per_chip

    @property
    def hbm_bytes_total(self) -> int | None:
        return None if self.chip.hbm_bytes is None else self.chip.hbm_bytes * self.chips

    @property
    def peak_flops_total(self) -> float | None:
        return None if self.chip.peak_bf16_flops is None else self.chip.peak_bf16_flops * self.chips


_TARGET_RE = re.compile(r"^(?P<chip>[a-z0-9]+?)(?:-(?P<n>\d+))?$")
_ALIASES = {
    "v5litepod": "v5e",
    "v6litepod": "v6e",
    "v5lite": "v5e",
    "ironwood": "tpu7x",
    "v7x": "tpu7x",
}


def valid_target_examples() -> str:
    return (
        "v5e-1, v5e-8, v6e-1, v6e-8, v5p-8, v4-8, tpu7x-8 (alias ironwood-8), h100, h200, "
        "b200, cpu (chip-N is N chips; v4/v5p/tpu7x names count TensorCores)"
    )


def parse_target(name: str) -> Target:
    """'v5e-8' -> 8 v5e chips; 'v5p-8', 'tpu7x-8' -> 4 chips (TensorCores counted); 'h100' -> 1."""
    match = _TARGET_RE.match(name.strip().lower())
    chip_name = match and _ALIASES.get(match["chip"], match["chip"])
    if not match or chip_name not in CHIPS:
        raise BadInput(f"unknown target {name!r}; valid: {valid_target_examples()}")
    chip = CHIPS[chip_name]
    n = int(match["n"] or (chip.cores_per_chip_name if chip.is_tpu else 1))
    if n < 1:
        raise BadInput(f"target {name!r}: a slice needs at least one chip (e.g. {chip_name}-8)")
    if n % chip.cores_per_chip_name:
        raise BadInput(
            f"target {name!r}: {chip_name}-N counts TensorCores, N must be a multiple "
            f"of {chip.cores_per_chip_name} (e.g. {chip_name}-8)"
        )
    return Target(name=name, chip=chip, chips=n // chip.cores_per_chip_name)


def chip_for_device_kind(device_kind: str) -> Chip | None:
    """Map jax's `device.device_kind` ('TPU v5 lite', 'NVIDIA H100 80GB HBM3') to a Chip."""
    # Longest match first: 'TPU v5 lite' must not be taken for 'TPU v5'.
    candidates = sorted(
        ((k, c) for c in CHIPS.values() for k in c.device_kinds), key=lambda kc: -len(kc[0])
    )
    for kind, chip in candidates:
        if device_kind.lower().startswith(kind.lower()):
            return chip
    return None


def current_chip() -> Chip | None:
    """The chip jax runs on now, or None for an accelerator not in the table."""
    import jax

    return chip_for_device_kind(jax.local_devices()[0].device_kind)


def current_target_name() -> str | None:
    """This process's slice as a target name ('v5e-8', 'v5p-8', 'h100-1'), for predictions
    beside measurements; None on a CPU or an accelerator not in the table."""
    import jax

    here = current_chip()
    if here is None or here.name == "cpu":
        return None
    chips = max(1, jax.device_count() // (here.devices_per_chip if here.name == "tpu7x" else 1))
    return f"{here.name}-{chips * here.cores_per_chip_name}"


def chip(name: str) -> Chip:
    """Look a chip up by table name ('v5p'), or by target name ('v5p-8')."""
    return CHIPS[name] if name in CHIPS else parse_target(name).chip


def tpu_worker_count() -> int:
    """How many hosts this TPU slice has: 1 off a TPU VM or on a single-host slice.

    libtpu reads TPU_WORKER_HOSTNAMES, else the Cloud TPU metadata server's
    `worker-network-endpoints`; we ask the same two places (the metadata server only when a TPU
    device node exists, with a short timeout, so laptops and CI never wait on it).
    """
    hostnames = os.environ.get("TPU_WORKER_HOSTNAMES")
    if hostnames:
        return len([h for h in hostnames.split(",") if h.strip()])
    if not (glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*")):
        return 1
    request = urllib.request.Request(
        "http://metadata.google.internal/computeMetadata/v1/instance/attributes/"
        "worker-network-endpoints",
        headers={"Metadata-Flavor": "Google"},
    )
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return max(1, len(response.read().decode().strip().split(",")))
    except OSError:  # Colab / Kaggle TPUs have no such metadata: one host
        return 1


def initialize_distributed() -> int:
    """Join the other hosts of a multi-host slice (jax.distributed.initialize) when there are any.

    Every host of a multi-host TPU slice runs the same notebook or trainer; each then sees all
    chips in jax.devices() but only its own in jax.local_devices(), which is what memory
    statistics must use. Returns the process count.
    """
    import jax

    if tpu_worker_count() > 1 and not jax.distributed.is_initialized():
        jax.distributed.initialize()
    return jax.process_count()
