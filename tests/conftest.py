"""Test-wide set-up: 8 CPU devices for sharding tests, no network, no wandb, no TPU probing.

These must be set before jax is first imported, which is why they live here.
"""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
