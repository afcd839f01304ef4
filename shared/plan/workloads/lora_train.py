"""`lora-train`: one optax step on qwix LoRA adapters, `shared.lora.train_step` itself,
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
from shared.lora import (
    LOSSES,
    default_alpha,
    fp32_opt_init,
    split_full,
    split_lora,
    train_step,
)
from shared.plan.compiler.executable import Executable, Workload

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
                layers=request.layers,
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
    layers: int | None = None,
) -> Executable:
    """The LoRA step (`finetune_executable` with a rank)."""
    return finetune_executable(
        name,
        batch,
        seq_len,
        mesh=mesh,
        rank=rank,
        optimizer=optimizer,
        vocab_size=vocab_size,
        remat=remat,
        microbatches=microbatches,
        loss=loss,
        layers=layers,
    )


def finetune_executable(
    name: str,
    batch: int,
    seq_len: int,
    *,
    mesh,
    rank: int | None,
    optimizer=None,
    vocab_size: int | None = None,
    remat: str = "none",
    microbatches: int = 1,
    loss: str = "chunked",
    layers: int | None = None,
) -> Executable:
    """`shared.lora.train_step` with abstract arguments on `mesh`, for plan mode: a LoRA step
    (`rank`) or a full fine-tune (rank None: every weight trained, Adam's fp32 moments for all
    of them). Tokens [batch, seq_len + 1] sharded over "fsdp", optimizer state laid out as
    init_opt_state; the weights, adapters and optimizer state are the run's resident buffers."""
    check_batch(batch, mesh)
    choose("loss", loss, LOSSES)
    if batch % (mesh.shape["fsdp"] * microbatches):
        raise BadInput(
            f"batch {batch} does not split into {microbatches} micro-batches that "
            f"each divide the fsdp axis of {mesh.shape['fsdp']}"
        )
    graphdef, optimizer, trained, frozen, opt_abs = (
        _resident_state(name, vocab_size, rank, remat, layers, mesh)
        if optimizer is None
        else _placed_state(name, vocab_size, rank, remat, layers, mesh, optimizer)
    )
    tokens = jax.ShapeDtypeStruct((batch, seq_len + 1), jnp.int32, sharding=batch_sharding(mesh))
    what = f"rank {rank}, adamw on the adapters" if rank else "every weight, adamw"
    # The residual stream of one micro-batch, [B/M, T, D] bf16 split over every device, lives
    # between the layers of any step: a floor under the compiler's answer.
    width = models.model_dims(name, vocab_size=vocab_size).D
    residual = batch // microbatches * seq_len * width * 2 // mesh.size
    return Executable(
        "lora_train_step" if rank else "sft_train_step",
        train_step,
        (graphdef, optimizer, trained, frozen, opt_abs, tokens),
        {"microbatches": microbatches, "loss": loss},
        note=f"{what}, remat {remat}, {microbatches} micro-batches, {loss} loss, "
        f"{models.dtype_name(trained if not rank else frozen)} weights",
        resident_args=(
            {2: "adapters", 3: "weights", 4: "optimizer state"}
            if rank
            else {2: "weights", 3: "other state", 4: "optimizer state"}
        ),
        floor_bytes=residual,
        weight_passes=microbatches - 1,
    )


@functools.lru_cache(maxsize=8)
def _resident_state(name, vocab_size, rank, remat, layers, mesh) -> tuple:
    """_placed_state with the plan's optimizer (optax.adamw(1e-4)), kept: none of it depends
    on the batch, and a search builds the same step at every batch it probes and on every
    mesh it compares (gemma3-27b LoRA on a v5p-8: each build after the first took about 2 s,
    nearly all of it here)."""
    return _placed_state(name, vocab_size, rank, remat, layers, mesh, optax.adamw(1e-4))


def _placed_state(name, vocab_size, rank, remat, layers, mesh, optimizer) -> tuple:
    """(graphdef, optimizer, trained, frozen, optimizer state): the step's resident buffers,
    abstract and placed on `mesh` (a LoRA step's adapters are trained, rank None trains every
    weight), the optimizer state's moments fp32 and sharded like their parameters."""
    alpha = default_alpha(rank) if rank else None
    abstract = models.abstract_model(
        name, vocab_size=vocab_size, lora_rank=rank, lora_alpha=alpha, remat=remat, layers=layers
    )
    models.check_divisible(abstract, mesh, name)
    graphdef, trained, frozen = (split_lora if rank else split_full)(abstract)
    trained, frozen = on_mesh(trained, mesh), on_mesh(frozen, mesh)
    opt_abs = abstract_like(
        jax.eval_shape(functools.partial(fp32_opt_init, optimizer), trained),
        opt_state_shardings(optimizer, trained, mesh),
    )
    return graphdef, optimizer, trained, frozen, opt_abs
