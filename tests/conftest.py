"""Test-wide set-up: 8 CPU devices for sharding tests, no network, no wandb, no TPU probing.

These must be set before jax is first imported, which is why they live here.
"""

import os

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_force_host_platform_device_count=8").strip()
os.environ["JAX_PLATFORMS"] = "cpu"  # the tests are CPU tests, also on a GPU machine
os.environ["WANDB_MODE"] = "disabled"  # even where the machine sets offline/online
os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
