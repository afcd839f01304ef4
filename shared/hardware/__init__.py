"""What you rent and run on: chips, slices, their prices, meshes over their devices, measuring.

- `chips`: one table of every hardware number (peak FLOP/s, HBM, bandwidths, usable HBM), sourced;
- `targets`: names like `v5e-8` or `h100-2` parsed into a chip and a count, and this process's;
- `prices`: dated, sourced dollars per chip-hour (on-demand and spot);
- `rent`: the slices Cloud TPU rents, and the commands that rent one and run a notebook there;
- `sharding`: meshes with the ("fsdp", "tp") axes and sharded initialisation;
- `measure`: wall time after warm-up, HBM per device, out-of-memory kept as a data point;
- `distributed`: joining the hosts of a multi-host slice.

The chip and target names below are the package's API: `hardware.parse_target("v5e-8")`.
"""

from shared.hardware.chips import CHIPS, Chip, GiB, MiB, chip_for_device_kind, current_chip
from shared.hardware.distributed import initialize_distributed, tpu_worker_count
from shared.hardware.targets import (
    Target,
    chip,
    current_target_name,
    parse_target,
    valid_target_examples,
)

__all__ = [
    "CHIPS",
    "Chip",
    "GiB",
    "MiB",
    "Target",
    "chip",
    "chip_for_device_kind",
    "current_chip",
    "current_target_name",
    "initialize_distributed",
    "parse_target",
    "tpu_worker_count",
    "valid_target_examples",
]
