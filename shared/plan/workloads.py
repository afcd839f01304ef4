"""The workloads plan mode compiles, by name: each builds the SAME jitted functions device mode
runs, with abstract arguments on the target's mesh, and says which buffers stay resident.

    rollout       tunix Sampler prefill + decode (sampling layout: weights not FSDP-sharded)
    lora-rollout  the same on a qwix LoRA model
    forward       a teacher-forced pass to top-k logits: full [B, T, V] or chunked
    lora-train    one optax step on the LoRA parameters (remat, micro-batches, loss)
    train         the ~130M pretraining model's train step (notebook 04)
    grpo          one tunix GRPO step: rollout, log-probs, policy update (shared.grpo_plan)

Shardings, against what tunix does on a TPU (tests/test_sharding_audit.py checks each line;
a mesh is ("fsdp", "tp"), every device on fsdp unless --mesh says otherwise):
- weights: tunix's own partition rules, the family's ShardingConfig read from the model's
  annotations: training layout FSDP x TP (e.g. q [N, D, H] over ("tp", "fsdp", None)); the
  rollout workloads use tunix's sampling layout (`is_sampling`: nothing over fsdp, so fsdp is
  data parallelism, except Gemma 3's kv_einsum with one KV head, gemma3-1b's, which tunix
  hard-codes over fsdp in both layouts). Same as tunix.
- activations: tunix's `shard(x, act_btd / act_btnh / act_btf)` constraints, batch over fsdp
  and the wide dimension over tp, applied under the mesh on any host
  (shared.models.activation_sharding); tunix's helpers would drop them under jax.set_mesh and
  in every deviceless compile. Same as tunix's trainers on a TPU.
- LoRA parameters: qwix shards lora_a / lora_b like the dimensions they share with their base
  weight, then tunix's reshard puts them on the mesh. Same as tunix's examples.
- optimizer state: Adam's moments in fp32 laid out like the parameters they mirror, the step
  count replicated (shared.sharding.opt_state_shardings), as tunix's trainers shard their
  optimizer from the parameters' specs. GRPO: tunix's own nnx.Optimizer over the LoRA params.
- KV cache (rollout): tunix's Sampler state with the batch over fsdp and KV heads over tp when
  they divide (shared.rollout.sampler.state_shardings). tunix builds the state uncommitted, so on
  one device it is the same; on several we shard it on purpose: a data-parallel rollout whose
  every chip held every row's cache would not be the program anyone runs.
- rollout layout: the `rollout` recipe defaults to data parallelism (fsdp = every device,
  weights replicated), which holds the largest batch when the weights fit one chip; tunix's
  GRPO demo on 8 chips rolls out with tp (mesh 1x4): `--mesh 1x8` compiles that instead.
- GRPO: tunix's colocated roles on one mesh, its rollout sampling from the policy (training
  layout), prefill's state replicated as tunix passes it and decode's laid out as the compiled
  prefill returns it (KV cache over the batch), the reference in the training layout,
  the policy update tunix's own jitted train step with inputs placed by tunix's shard_input.
  Same as tunix 0.1.7.
- micro-batches (lora-train): tokens [B, T] reshaped to [M, B/M, T]; the model's own
  constraints put each micro-batch's activations back over every fsdp device, as tunix's
  gradient accumulation feeds each micro-batch sharded (the tokens' reshard is a few KB).
"""

from __future__ import annotations

from collections.abc import Callable

from jax.sharding import Mesh

from shared.measure import Executable, Workload


def _rollout(request, mesh: Mesh, lora: bool = False) -> Workload:
    from shared.lora import default_alpha
    from shared.rollout.sampler import abstract_rollout

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
    from shared.pretrain import train

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
