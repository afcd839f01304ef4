"""The slices people rent, and the commands that rent one and run our notebooks on it.

Cloud TPU names a slice by its accelerator type: v5e is sold as `v5litepod-N` (N chips), v6e
as `v6e-N`, v5p and tpu7x as `v5p-N` / `tpu7x-N` with N counting TensorCores, as our target
names do. A TPU VM needs a runtime image for its chip (`--version`); the ones below are those
the Cloud TPU docs name for JAX (https://cloud.google.com/tpu/docs/runtimes, read
2026-11-25). Ironwood's image is not in the sources we could read, so its command leaves a
placeholder instead of guessing.
"""

from __future__ import annotations

from shared.hardware.targets import parse_target

# chip -> the slices of it that Cloud TPU rents, smallest first (target names)
TPU_SLICES = {
    "v5e": tuple(f"v5e-{n}" for n in (1, 4, 8, 16, 32, 64, 128, 256)),
    "v6e": tuple(f"v6e-{n}" for n in (1, 4, 8, 16, 32, 64, 128, 256)),
    "v5p": tuple(f"v5p-{n}" for n in (8, 16, 32, 64, 128)),
    "tpu7x": tuple(f"tpu7x-{n}" for n in (8, 16, 32, 64)),
}
ALL_TPU_SLICES = tuple(t for slices in TPU_SLICES.values() for t in slices)
GPU_SLICES = {
    "h100": tuple(f"h100-{n}" for n in (1, 2, 4, 8)),
    "h200": tuple(f"h200-{n}" for n in (1, 2, 4, 8)),
}
_ACCELERATOR_PREFIX = {"v5e": "v5litepod", "v6e": "v6e", "v5p": "v5p", "tpu7x": "tpu7x"}
RUNTIME = {
    "v5e": "v2-alpha-tpuv5-lite",
    "v6e": "v2-alpha-tpuv6e",
    "v5p": "v2-alpha-tpuv5",
    "tpu7x": "RUNTIME  # Ironwood's image: https://docs.cloud.google.com/tpu/docs/tpu7x",
}


def accelerator_type(target: str) -> str:
    """Cloud TPU's name for a slice: v5e-8 -> v5litepod-8, v5p-16 -> v5p-16."""
    slice_ = parse_target(target)
    cores = slice_.chips * slice_.chip.cores_per_chip_name
    return f"{_ACCELERATOR_PREFIX[slice_.chip.name]}-{cores}"


def create_command(target: str, *, spot: bool, name: str = "budget-lab", zone: str = "ZONE") -> str:
    """`gcloud compute tpus tpu-vm create ...` for the slice (a multi-host slice too: one
    command creates every worker)."""
    chip = parse_target(target).chip.name
    return (
        f"gcloud compute tpus tpu-vm create {name} --zone={zone} "
        f"--accelerator-type={accelerator_type(target)} --version={RUNTIME[chip]}"
        + (" --spot" if spot else "")
    )


def run_command(notebook: str, *, name: str = "budget-lab", zone: str = "ZONE") -> str:
    """The make target that runs one notebook on that TPU VM, on every worker of a multi-host
    slice (tools/remote.py), and copies its results back."""
    return f"make tpu-execute TPU={name} ZONE={zone} NB={notebook}"
