"""The slices people rent, and the commands that rent one and run our notebooks on it.

Cloud TPU names a slice by its accelerator type: v5e is sold as `v5litepod-N` (N chips), v6e
as `v6e-N`, v5p and tpu7x as `v5p-N` / `tpu7x-N` with N counting TensorCores, as our target
names do. A TPU VM needs a runtime image for its chip (`--version`); the ones below are those
the Cloud TPU docs name for JAX (https://cloud.google.com/tpu/docs/runtimes, read
2026-11-25). Ironwood's image is not in the sources we could read, so its command leaves a
placeholder instead of guessing.
"""

from __future__ import annotations

from shared.hardware import gpus
from shared.hardware.targets import parse_target

# chip -> the slices of it that Cloud TPU rents, smallest first (target names)
TPU_SLICES = {
    "v5e": tuple(f"v5e-{n}" for n in (1, 4, 8, 16, 32, 64, 128, 256)),
    "v6e": tuple(f"v6e-{n}" for n in (1, 4, 8, 16, 32, 64, 128, 256)),
    "v5p": tuple(f"v5p-{n}" for n in (8, 16, 32, 64, 128)),
    "tpu7x": tuple(f"tpu7x-{n}" for n in (8, 16, 32, 64)),
}
ALL_TPU_SLICES = tuple(t for slices in TPU_SLICES.values() for t in slices)
# chip -> the GPU machines priced in shared.hardware.prices (GPUs per machine: gpus.SPECS)
GPU_SLICES = {
    chip: tuple(f"{chip}-{n}" for n in gpus.SPECS[chip].counts if n <= 8)
    for chip in ("t4", "l4", "a100-40g", "a100-80g", "h100", "h200")
}
ALL_SLICES = ALL_TPU_SLICES + tuple(t for slices in GPU_SLICES.values() for t in slices)
# Compute Engine's machine type for N GPUs of a chip (https://cloud.google.com/compute/docs/gpus,
# read 2026-12-07); a T4 attaches to an N1 machine as an accelerator, the rest come with theirs.
_GPU_MACHINE = {
    "t4": {1: "n1-standard-4", 2: "n1-standard-8", 4: "n1-standard-16"},
    "l4": {1: "g2-standard-4", 2: "g2-standard-24", 4: "g2-standard-48", 8: "g2-standard-96"},
    "a100-40g": {n: f"a2-highgpu-{n}g" for n in (1, 2, 4, 8)},
    "a100-80g": {n: f"a2-ultragpu-{n}g" for n in (1, 2, 4, 8)},
    "h100": {n: f"a3-highgpu-{n}g" for n in (1, 2, 4, 8)},
    "h200": {8: "a3-ultragpu-8g"},
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
    """`gcloud compute tpus tpu-vm create ...` for a TPU slice (a multi-host slice too: one
    command creates every worker), `gcloud compute instances create ...` for a GPU machine."""
    slice_ = parse_target(target)
    chip = slice_.chip.name
    if not slice_.chip.is_tpu:
        machine = _GPU_MACHINE.get(chip, {}).get(slice_.chips)
        if machine is None:  # H200s come eight to a machine on GCP; elsewhere one at a time
            return f"rent a machine with {slice_.chips} {chip.upper()} GPUs (no GCP machine type)"
        accelerator = f" --accelerator=type=nvidia-tesla-t4,count={slice_.chips}" * (chip == "t4")
        return (
            f"gcloud compute instances create {name} --zone={zone} --machine-type={machine}"
            f"{accelerator} --maintenance-policy=TERMINATE"
            + (" --provisioning-model=SPOT" if spot else "")
            + " --image-project=deeplearning-platform-release --image-family=IMAGE"
            "  # IMAGE: a CUDA image, https://cloud.google.com/deep-learning-vm/docs/images"
        )
    return (
        f"gcloud compute tpus tpu-vm create {name} --zone={zone} "
        f"--accelerator-type={accelerator_type(target)} --version={RUNTIME[chip]}"
        + (" --spot" if spot else "")
    )


def run_command(notebook: str, *, name: str = "budget-lab", zone: str = "ZONE") -> str:
    """The make target that runs one notebook on that TPU VM, on every worker of a multi-host
    slice (tools/remote.py), and copies its results back."""
    return f"make tpu-execute TPU={name} ZONE={zone} NB={notebook}"
