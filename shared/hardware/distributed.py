"""Starting a multi-host TPU slice: how many hosts it has, and joining them.

Every host of a multi-host slice runs the same notebook or trainer (tools/remote.py starts it on
every worker); each then sees all chips in jax.devices() but only its own in
jax.local_devices().
"""

import glob
import os
import urllib.request


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
