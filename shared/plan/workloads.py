"""The workloads plan mode compiles, by name: each builds the SAME jitted functions device mode
runs, with abstract arguments on the target's mesh, and says which buffers stay resident.

    rollout       tunix Sampler prefill + decode (sampling layout: weights not FSDP-sharded)
    lora-rollout  the same on a qwix LoRA model
    forward       a teacher-forced pass to top-k logits: full [B, T, V] or chunked
    lora-train    one optax step on the LoRA parameters (remat, micro-batches, loss)
    train         the ~130M pretraining model's train step (notebook 04)
    grpo          one tunix GRPO step: rollout, log-probs, policy update (shared.grpo_plan)
"""

from __future__ import annotations

from collections.abc import Callable

from jax.sharding import Mesh

from shared.measure import Executable, Workload


def _rollout(request, mesh: Mesh, lora: bool = False) -> Workload:
    from shared.lora import default_alpha
    from shared.rollout import abstract_rollout

    cache = request.cache_size or request.prompt_len + request.steps
    rank = request.lora_rank if lora else None
    rollout = abstract_rollout(
        request.model,
        request.batch,
        request.prompt_len,
        request.steps,
        cache,
        mesh=mesh,
        lora_rank=rank,
        lora_alpha=default_alpha(rank) if lora else None,
        semantics=request.tunix,
    )
    notes = (
        []
        if request.tunix == "0.1.7"
        else [
            f"compiled as tunix {request.tunix} runs it: the Sampler does not donate its state, so "
            "decode holds the KV cache twice"
        ]
    )
    return Workload(rollout.executables(request.prompt_len, request.steps), notes=notes)


def _forward(request, mesh: Mesh) -> Workload:
    from shared import models

    args, kwargs = models.abstract_forward_args(
        request.model, request.batch, request.seq, mesh=mesh
    )
    return Workload(
        [
            Executable(
                f"forward-{request.logits}",
                models.teacher_forced_top_k,
                args,
                {**kwargs, "mode": request.logits, "k": request.k},
                resident_args={1: "weights"},
            )
        ]
    )


def _lora_train(request, mesh: Mesh) -> Workload:
    from shared import lora

    return Workload(
        [
            lora.lora_train_executable(
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


def _train(request, mesh: Mesh) -> Workload:
    from shared import train

    return Workload(
        train.train_executables(
            request.model,
            mesh,
            batch=request.batch,
            seq=request.seq,
            microbatches=request.microbatches,
            remat=request.remat,
        )
    )


def _grpo(request, mesh: Mesh) -> Workload:
    from shared import grpo_plan

    return grpo_plan.workload(request, mesh)


WORKLOADS: dict[str, Callable[..., Workload]] = {
    "rollout": _rollout,
    "lora-rollout": lambda request, mesh: _rollout(request, mesh, lora=True),
    "forward": _forward,
    "lora-train": _lora_train,
    "train": _train,
    "grpo": _grpo,
}


def build_workload(request, mesh: Mesh) -> Workload:
    return WORKLOADS[request.workload](request, mesh)
