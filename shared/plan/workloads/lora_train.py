"""`lora-train`: one optax step on qwix LoRA adapters, `shared.lora.lora_train_step` itself,
lowered with abstract arguments: the base weights, adapters and optimizer state are the run's
resident buffers; `remat`, `microbatches` and `loss` are the knobs a search turns.
"""

import functools

import jax
import jax.numpy as jnp
import optax

from shared import models
from shared.errors import BadInput, choose
from shared.hardware.sharding import (
    abstract_like,
    batch_sharding,
    check_batch,
    on_mesh,
    opt_state_shardings,
)
from shared.lora import LOSSES, default_alpha, fp32_opt_init, lora_train_step, split_lora
from shared.plan.executable import Executable, Workload

READS = ("batch", "seq", "lora_rank", "remat", "microbatches", "loss")  # see rollout.READS


def workload(request, mesh) -> Workload:
    """WORKLOADS["lora-train"]: the step at the request's batch, sequence, rank and knobs."""
    return Workload(
        [
            lora_train_executable(
                request.model,
                request.batch,
                request.seq,
                request.lora_rank,
                mesh=mesh,
                remat=request.remat,
                microbatches=request.microbatches,
                loss=request.loss,
            )
        ]
    )


def lora_train_executable(
    name: str,
    batch: int,
    seq_len: int,
    rank: int,
    *,
    mesh,
    optimizer=None,
    vocab_size: int | None = None,
    remat: str = "none",
    microbatches: int = 1,
    loss: str = "chunked",
) -> Executable:
    """`lora_train_step` with abstract arguments on `mesh`, for plan mode: tokens
    [batch, seq_len + 1] sharded over "fsdp", optimizer state laid out as init_opt_state; the
    base weights, adapters and optimizer state are the run's resident buffers."""
    check_batch(batch, mesh)
    choose("loss", loss, LOSSES)
    if batch % (mesh.shape["fsdp"] * microbatches):
        raise BadInput(
            f"batch {batch} does not split into {microbatches} micro-batches that "
            f"each divide the fsdp axis of {mesh.shape['fsdp']}"
        )
    optimizer = optimizer or optax.adamw(1e-4)
    abstract = models.abstract_model(
        name, vocab_size=vocab_size, lora_rank=rank, lora_alpha=default_alpha(rank), remat=remat
    )
    models.check_divisible(abstract, mesh, name)
    graphdef, lora_abs, base_abs = split_lora(abstract)
    lora_abs, base_abs = on_mesh(lora_abs, mesh), on_mesh(base_abs, mesh)
    opt_abs = abstract_like(
        jax.eval_shape(functools.partial(fp32_opt_init, optimizer), lora_abs),
        opt_state_shardings(optimizer, lora_abs, mesh),
    )
    tokens = jax.ShapeDtypeStruct((batch, seq_len + 1), jnp.int32, sharding=batch_sharding(mesh))
    return Executable(
        "lora_train_step",
        lora_train_step,
        (graphdef, optimizer, lora_abs, base_abs, opt_abs, tokens),
        {"microbatches": microbatches, "loss": loss},
        note=f"rank {rank}, adamw on the adapters, remat {remat}, {microbatches} micro-batches, "
        f"{loss} loss, {models.dtype_name(base_abs)} weights",
        resident_args={2: "adapters", 3: "weights", 4: "optimizer state"},
    )
