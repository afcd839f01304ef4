"""`train`: the ~130M pretraining model's train step (notebook 04), the same function
`shared.pretrain.train` jits, with abstract parameters and optimizer state on the mesh.
"""

import jax
import jax.numpy as jnp

from shared import sizing
from shared.errors import BadInput
from shared.hardware import sharding
from shared.plan.compiler.executable import Executable, Workload
from shared.pretrain import model, optim
from shared.pretrain.attention import default_impl
from shared.pretrain.train import abstract_state, make_train_step

READS = ("batch", "seq", "microbatches", "remat")  # see rollout.READS


def workload(request, mesh) -> Workload:
    """WORKLOADS["train"]: one train step of the request's model config."""
    return Workload(
        train_executables(
            request.model,
            mesh,
            batch=request.batch,
            seq=request.seq,
            microbatches=request.microbatches,
            remat=request.remat,
        )
    )


def train_executables(
    config_name: str,
    mesh,
    *,
    batch: int,
    seq: int,
    microbatches: int = 1,
    remat: str = "none",
    vocab: int | None = None,
):
    """The train step exactly as `train` jits it, with abstract state, for shared.plan."""
    platform = mesh.devices.flat[0].platform
    overrides = {"T": seq, "remat": remat, "platform": platform}
    if vocab is not None:
        overrides["V"] = model.padded_vocab(vocab)
    config = model.config(config_name, **overrides)
    if platform == "gpu" and (config.attention or default_impl("gpu")) == "cudnn":
        # jax asks the cuDNN library for its version while it traces cuDNN attention, and XLA
        # builds cuDNN's fused kernels with a cuDNN handle: neither exists without the GPU
        raise BadInput(
            f"the {config_name} train step on a GPU runs cuDNN's fused attention (jax's GPU "
            "default), which compiles only with the GPU present: plan it on a TPU slice, or "
            "measure it on the GPU (notebook 04's device mode)"
        )
    tx = optim.make_optimizer(3e-4, 0.1, 1000, 10, 0.2, 1.0)
    graphdef, params, opt_state = abstract_state(config, tx, mesh)
    tokens = jax.ShapeDtypeStruct(
        (batch, seq + 1), jnp.int32, sharding=sharding.batch_sharding(mesh)
    )
    step = make_train_step(graphdef, config, tx, microbatches)
    return [
        Executable(
            "train_step",
            step,
            (params, opt_state, tokens),
            resident_args={0: "weights", 1: "optimizer state"},
            note=f"{config.name}: "
            f"{sizing.param_counts(config.dims())['total'] / 1e6:.1f}M params, "
            f"{microbatches} micro-batches, remat={remat}",
            weight_passes=microbatches - 1,
        )
    ]
