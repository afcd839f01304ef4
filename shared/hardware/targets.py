"""Target names like `v5e-8`, `v6e-1`, `v5p-16`, `tpu7x-8` or `h100`: a chip and how many, the
topology libtpu compiles a slice as, and the slice this process runs on."""

import math
import re
from dataclasses import dataclass

from shared.errors import BadInput, did_you_mean
from shared.hardware import gpus
from shared.hardware.chips import CHIPS, Chip, current_chip

CHIPS_PER_HOST = 4  # multi-host TPU slices (see Target.hosts)

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
    def hosts(self) -> int:
        """TPU VMs in the slice: a v5e or v6e slice of up to 8 chips is one host; larger slices,
        and every v4/v5p/tpu7x slice, have 4 chips a host (Cloud TPU's machine types:
        ct5lp-hightpu-4t, ct6e-standard-4t, ct5p-hightpu-4t, tpu7x-standard-4t). GPUs: one."""
        if not self.chip.is_tpu or (self.chip.ici_axes == 2 and self.chips <= 8):
            return 1
        return max(1, self.chips // CHIPS_PER_HOST)

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


# a GPU sold in two memory sizes carries it in its name: a100-80g-8 is 8 A100s of 80 GB
_TARGET_RE = re.compile(r"^(?P<chip>[a-z0-9]+?(?:-\d+g)?)(?:-(?P<n>\d+))?$")


_ALIASES = {
    "v5litepod": "v5e",
    "v6litepod": "v6e",
    "v5lite": "v5e",
    "ironwood": "tpu7x",
    "v7x": "tpu7x",
    "a100": "a100-40g",  # GCP's a2-highgpu and Colab's A100 hold 40 GB
}


def valid_target_examples() -> str:
    return (
        "v5e-1, v5e-8, v6e-1, v6e-8, v5p-8, v4-8, tpu7x-8 (alias ironwood-8), multi-host "
        "slices v5e-16 ... v5e-256, v6e-16 ... v6e-256, v5p-16 ... v5p-128, tpu7x-16 ... "
        "tpu7x-64; GPUs t4-1, t4-2, l4-1, a100-40g-1, a100-80g-8, h100-1 ... h100-8, h200-8, "
        "b200-8; cpu (chip-N is N chips; v4/v5p/tpu7x names count TensorCores)"
    )


def parse_target(name: str) -> Target:
    """'v5e-8' -> 8 v5e chips; 'v5p-8', 'tpu7x-8' -> 4 chips (TensorCores counted); 'h100' -> 1."""
    match = _TARGET_RE.match(name.strip().lower())
    chip_name = match and _ALIASES.get(match["chip"], match["chip"])
    if not match or chip_name not in CHIPS:
        typed = match["chip"] if match else name.strip().lower()
        hint = did_you_mean(typed, [*CHIPS, *_ALIASES])
        raise BadInput(f"unknown target {name!r}{hint}; valid: {valid_target_examples()}")
    chip = CHIPS[chip_name]
    n = int(match["n"] or (chip.cores_per_chip_name if chip.is_tpu else 1))
    if n < 1:
        raise BadInput(f"target {name!r}: a slice needs at least one chip (e.g. {chip_name}-8)")
    if n % chip.cores_per_chip_name:
        raise BadInput(
            f"target {name!r}: {chip_name}-N counts TensorCores, N must be a multiple "
            f"of {chip.cores_per_chip_name} (e.g. {chip_name}-8)"
        )
    if not chip.is_tpu and chip.name in gpus.SPECS and n not in gpus.SPECS[chip.name].counts:
        counts = ", ".join(f"{chip_name}-{c}" for c in gpus.SPECS[chip.name].counts)
        raise BadInput(f"target {name!r}: {chip_name} machines hold {counts} GPUs")
    return Target(name=name, chip=chip, chips=n // chip.cores_per_chip_name)


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
