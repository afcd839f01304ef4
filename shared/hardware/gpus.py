"""What XLA's GPU compiler needs to know of a GPU it compiles for without one, and the bytes a
jax process may use there.

A deviceless CUDA compile (`topologies.get_topology_desc(platform="cuda", target_config=...)`,
shared.plan.compiler.target) takes a `GpuTargetConfigProto` in text form: the compute capability
that picks the instructions ptxas emits, the SM count and shared memory the fusion and GEMM
emitters tile for, and `device_memory_size`, from which XLA sets the memory its scheduler and
rematerialization aim at. `target_config` builds it from the facts below; each row names its
source, and nothing here is fitted to a measurement.

The bytes a jax process may use (`usable_bytes`): jax's GPU allocator takes
XLA_PYTHON_CLIENT_MEM_FRACTION of the memory CUDA reports (default 0.75, whether it
preallocates or not: https://docs.jax.dev/en/latest/gpu_memory_allocation.html), in whole MiB.
The H100 and H200 runs of this project (benchmarks/results/finetune_h100.json,
finetune_h200.json, under a fraction of 0.95) reported 77,026 and 136,000 MiB allowed, so CUDA
reports 81,080 MiB for that H100 (nvidia-smi: 81,559) and 143,158 for that H200 (143,771). For
the GPUs no run has measured, nvidia-smi's total stands in: CUDA reports a few hundred MiB less
(479 and 613 MiB less on those two), so their usable bytes are that much too high at most.

Where XLA takes the limit it rematerializes towards: `GetSchedulerMemoryLimit` in
xla/service/gpu/gpu_hlo_schedule.cc uses the compile's `device_memory_size` option when set,
else 80% of the device description's `device_memory_size`. On a GPU, jax's client sets the
option to its allocator's limit; a deviceless compile has no allocator, so the target config
carries usable ÷ 0.8 (`target_config`), and XLA aims at the usable bytes exactly, as on the
device. With the datasheet memory there, an H100 compile of gemma3-1b's full fine-tune at 12
rematerialized to 64.8 GB where the device ran 76.2 (issue 84).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from shared.errors import BadInput

MiB = 2**20
DEFAULT_MEMORY_FRACTION = 0.75  # jax's XLA_PYTHON_CLIENT_MEM_FRACTION when unset
FRACTION_VARIABLE = "XLA_PYTHON_CLIENT_MEM_FRACTION"
# XLA's GetSchedulerMemoryLimit: device_memory_size * 80 / 100 when no option sets the limit
SCHEDULER_PERCENT = 80

# Per compute capability, from NVIDIA's CUDA C++ Programming Guide, "Compute Capabilities"
# (technical specifications table): shared memory per SM and the most one block may opt in
# to, resident threads per SM, FP32 cores per SM; 64 K 32-bit registers per SM and per block
# on all of them.
_PER_CAPABILITY = {
    (7, 5): {"smem_sm": 64 << 10, "smem_block_optin": 64 << 10, "threads_sm": 1024, "fp32": 64},
    (8, 0): {"smem_sm": 164 << 10, "smem_block_optin": 163 << 10, "threads_sm": 2048, "fp32": 64},
    (8, 9): {"smem_sm": 100 << 10, "smem_block_optin": 99 << 10, "threads_sm": 1536, "fp32": 128},
    (9, 0): {"smem_sm": 228 << 10, "smem_block_optin": 227 << 10, "threads_sm": 2048, "fp32": 128},
    (10, 0): {"smem_sm": 228 << 10, "smem_block_optin": 227 << 10, "threads_sm": 2048, "fp32": 128},
}
_GUIDE = "https://docs.nvidia.com/cuda/cuda-c-programming-guide/#compute-capabilities"


@dataclass(frozen=True)
class GpuSpec:
    """What a deviceless compile needs of one GPU model, beside shared.hardware.chips' row."""

    compute_capability: tuple[int, int]
    sm_count: int
    l2_bytes: int
    clock_ghz: float  # boost clock
    cuda_total_mib: int  # the memory CUDA reports (jax's allocator takes its fraction)
    cuda_total_measured: bool  # False: nvidia-smi's total stands in (see the module docstring)
    counts: tuple[int, ...]  # GPUs a machine is rented with (t4-8 is no machine)
    bf16_units: bool  # False on Turing: XLA runs a bf16 dot in f32 there
    device_name: str  # what CUDA names it (device.device_kind on such a machine)
    source: str


SPECS: dict[str, GpuSpec] = {
    # Turing TU104: 40 SMs, 4 MB L2, 1.59 GHz, 16 GB GDDR6 (nvidia-smi: 15,360 MiB)
    "t4": GpuSpec(
        (7, 5),
        40,
        4 * MiB,
        1.59,
        15360,
        False,
        (1, 2, 4),
        False,
        "Tesla T4",
        "https://www.nvidia.com/en-us/data-center/tesla-t4/ (T4 datasheet); TU104 in the "
        f"Turing architecture whitepaper; {_GUIDE}",
    ),
    # Ada AD104: 58 SMs, 48 MB L2, 2.04 GHz, 24 GB GDDR6 (nvidia-smi: 23,034 MiB)
    "l4": GpuSpec(
        (8, 9),
        58,
        48 * MiB,
        2.04,
        23034,
        False,
        (1, 2, 4, 8),
        True,
        "NVIDIA L4",
        f"https://www.nvidia.com/en-us/data-center/l4/ (L4 datasheet); {_GUIDE}",
    ),
    # Ampere GA100: 108 SMs, 40 MB L2, 1.41 GHz; 40 GB (nvidia-smi: 40,960 MiB) or 80 GB
    "a100-40g": GpuSpec(
        (8, 0),
        108,
        40 * MiB,
        1.41,
        40960,
        False,
        (1, 2, 4, 8, 16),
        True,
        "NVIDIA A100-SXM4-40GB",
        "https://www.nvidia.com/en-us/data-center/a100/ (A100 datasheet); NVIDIA A100 Tensor "
        f"Core GPU architecture whitepaper; {_GUIDE}",
    ),
    "a100-80g": GpuSpec(
        (8, 0),
        108,
        40 * MiB,
        1.41,
        81920,
        False,
        (1, 2, 4, 8),
        True,
        "NVIDIA A100-SXM4-80GB",
        "https://www.nvidia.com/en-us/data-center/a100/ (A100 datasheet); NVIDIA A100 Tensor "
        f"Core GPU architecture whitepaper; {_GUIDE}",
    ),
    # Hopper GH100 (SXM5): 132 SMs, 50 MB L2, 1.98 GHz
    "h100": GpuSpec(
        (9, 0),
        132,
        50 * MiB,
        1.98,
        81080,
        True,
        (1, 2, 4, 8),
        True,
        "NVIDIA H100 80GB HBM3",
        "https://www.nvidia.com/en-us/data-center/h100/ (SXM); NVIDIA H100 Tensor Core GPU "
        f"architecture whitepaper; CUDA's total from finetune_h100.json; {_GUIDE}",
    ),
    "h200": GpuSpec(
        (9, 0),
        132,
        50 * MiB,
        1.98,
        143158,
        True,
        (1, 2, 4, 8),
        True,
        "NVIDIA H200",
        "https://www.nvidia.com/en-us/data-center/h200/; GH100 as the H100; CUDA's total from "
        f"finetune_h200.json; {_GUIDE}",
    ),
    # Blackwell B200: 148 SMs, 126 MB L2, 1.965 GHz, 180 GB (nvidia-smi: 183,359 MiB)
    "b200": GpuSpec(
        (10, 0),
        148,
        126 * MiB,
        1.965,
        183359,
        False,
        (1, 2, 4, 8),
        True,
        "NVIDIA B200",
        "https://www.nvidia.com/en-us/data-center/hgx/ (HGX B200, per GPU); NVIDIA Blackwell "
        f"architecture technical brief; {_GUIDE}",
    ),
}


def spec(chip_name: str) -> GpuSpec:
    """The spec of a GPU chip of shared.hardware.chips ('h100'), BadInput for one without."""
    if chip_name not in SPECS:
        raise BadInput(f"no GPU compile spec for {chip_name!r}; GPUs with one: {', '.join(SPECS)}")
    return SPECS[chip_name]


def memory_fraction() -> float:
    """The share of a GPU's memory jax's allocator takes: XLA_PYTHON_CLIENT_MEM_FRACTION as the
    process that runs the plan would read it, jax's default 0.75 where unset."""
    raw = os.environ.get(FRACTION_VARIABLE, "").strip()
    if not raw:
        return DEFAULT_MEMORY_FRACTION
    try:
        fraction = float(raw)
    except ValueError:
        fraction = math.nan
    if not 0 < fraction <= 1:
        raise BadInput(f"{FRACTION_VARIABLE}={raw!r}: give a fraction in (0, 1], e.g. 0.95")
    return fraction


def usable_bytes(chip_name: str, fraction: float | None = None) -> int:
    """The bytes jax's allocator may hand a program on one such GPU: the fraction of CUDA's
    total, in whole MiB (the H100's 0.95 x 81,080 MiB = 77,026 MiB = 80,767,614,976 bytes, as
    its run reported)."""
    fraction = memory_fraction() if fraction is None else fraction
    return math.floor(fraction * spec(chip_name).cuda_total_mib + 1e-9) * MiB


def target_config(chip_name: str, usable: int, hbm_bandwidth: float) -> str:
    """A GpuTargetConfigProto in text form for a deviceless compile: the GPU's published facts,
    and a device_memory_size whose 80% (XLA's default limit) is `usable` to the byte."""
    gpu = spec(chip_name)
    per = _PER_CAPABILITY[gpu.compute_capability]
    memory = -(-usable * 100 // SCHEDULER_PERCENT)  # the least size whose 80% is `usable`
    assert memory * SCHEDULER_PERCENT // 100 == usable
    major, minor = gpu.compute_capability
    return f"""gpu_device_info {{
  cuda_compute_capability {{ major: {major} minor: {minor} }}
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_core: {per["smem_sm"]}
  threads_per_core_limit: {per["threads_sm"]}
  core_count: {gpu.sm_count}
  fpus_per_core: {per["fp32"]}
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: {int(hbm_bandwidth)}
  l2_cache_size: {gpu.l2_bytes}
  clock_rate_ghz: {gpu.clock_ghz}
  device_memory_size: {memory}
  shared_memory_per_block_optin: {per["smem_block_optin"]}
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}}
platform_name: "CUDA"
dnn_version_info {{ major: 9 minor: 8 }}
runtime_version {{ major: 12 minor: 8 }}
device_description_str: "{gpu.device_name}"
"""
