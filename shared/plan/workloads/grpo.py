"""GRPO in plan mode: tunix's jitted phases with abstract arguments, as one plan Workload.

    python -m shared.plan grpo --model gemma3-1b --target v5e-8 --prompt-len 256 \\
        --steps 768 --num-generations 4 --batch 8 --logps chunked

`workload(request, mesh)` (WORKLOADS["grpo"]) compiles what a colocated LoRA GRPO step of
shared.grpo runs, each with its micro-batch of sequences placed as tunix places them:

    rollout_prefill / rollout_decode  the Sampler tunix builds on the policy itself (training
                                      layout); prefill's state replicated, as tunix passes
                                      it, decode's as prefill's compiled outputs are laid out
    reference_logps                   compute_per_token_logps on the base (beta != 0)
    old_policy_logps                  the same on the policy (num_iterations > 1)
    policy_update                     tunix's own jitted `_train_step` (GRPO loss, LoRA grads,
                                      optax), hooked by GRPOLearner itself

The log-prob phases compile tunix's function or shared.grpo.token_logprobs' chunked one
(`request.logps`). Units: `request.batch` is the sequences per call (a tunix micro-batch of
prompts times num_generations) of every phase whose own `*_micro` is unset, so `--max-batch`
answers "the largest micro-batch that fits"; `request.steps` is the completion length.
`request.phases` ("logps", "rollout,update") compiles only those phases and still counts the
whole run's resident buffers: a search over one phase's micro-batch.
"""

from __future__ import annotations

import math
import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from tunix.rl import rl_cluster as rl_cluster_lib
from tunix.rl import trainer as rl_trainer
from tunix.rl.grpo import grpo_learner
from tunix.sft import sharding_utils

from shared import models
from shared.errors import BadInput
from shared.grpo import GRPOSettings, arithmetic_reward, token_logprobs
from shared.hardware.sharding import abstract_like, bytes_per_device, on_mesh
from shared.plan.compiler.executable import Executable, Workload
from shared.rollout import sampler as rollout
from shared.sizing import human

Role = rl_cluster_lib.Role
PHASES = {
    "rollout": ("rollout_prefill", "rollout_decode"),
    "logps": ("reference_logps", "old_policy_logps"),
    "update": ("policy_update",),
}


READS = (  # see rollout.READS
    "batch",
    "prompt_len",
    "steps",
    "cache_size",
    "lora_rank",
    "remat",
    "prompts_per_step",
    "num_generations",
    "num_iterations",
    "rollout_micro",
    "logps_micro",
    "train_micro",
    "logps",
    "beta",
    "phases",
)


def settings(request) -> GRPOSettings:
    """The shared.grpo settings a plan Request describes (micro-batches in sequences there,
    in prompts here); the live run of the same recipe uses these too."""
    g = request.num_generations
    rows = {
        phase: getattr(request, f"{phase}_micro") or request.batch
        for phase in ("rollout", "logps", "train")
    }
    if g < 2 or any(n % g for n in rows.values()):
        raise BadInput(
            f"sequences per call {rows} must be multiples of num_generations={g} "
            "(>= 2): tunix samples each prompt's group in one call"
        )
    prompts = {phase: n // g for phase, n in rows.items()}
    per_step = request.prompts_per_step or math.lcm(*prompts.values())
    return GRPOSettings(
        prompt_len=request.prompt_len,
        completion_len=request.steps,
        prompts_per_step=per_step,
        num_generations=g,
        num_iterations=request.num_iterations,
        train_micro_batch=prompts["train"] if prompts["train"] < per_step else None,
        rollout_micro_batch=prompts["rollout"],
        logps_micro_batch=prompts["logps"],
        lora_rank=request.lora_rank,
        beta=request.beta,
        cache_size=request.cache_size,
        logps=request.logps,
    )


def workload(request, mesh) -> Workload:
    """WORKLOADS["grpo"]: the phases of one GRPO step, and what the whole run keeps resident."""
    recipe = settings(request)
    wanted = [
        label
        for group in (request.phases or ",".join(PHASES)).split(",")
        for label in PHASES.get(group.strip(), (None,))
    ]
    if None in wanted:
        raise BadInput(f"phases {request.phases!r}: choose from {', '.join(PHASES)}")
    exes = abstract_phases(
        request.model, recipe, mesh=mesh, remat=request.remat, layers=request.layers
    )
    kept = [e for e in exes if e.label in wanted]
    if not kept:
        raise BadInput(
            f"phases {request.phases!r} run nothing in this recipe (beta = "
            f"{recipe.beta}, num_iterations = {recipe.num_iterations})"
        )
    named = {name for e in kept for name in e.resident_args.values()}
    resident = {
        name: e.args[i]
        for e in exes
        if e not in kept
        for i, name in e.resident_args.items()
        if name not in named
    }
    return Workload(kept, resident, notes=notes(recipe, exes, kept))


def notes(recipe: GRPOSettings, exes: list[Executable], kept: list[Executable]) -> list[str]:
    """What the verdict assumes, in words, with the resident split the table cannot show."""
    update = next(e for e in exes if e.label == "policy_update")
    policy = nnx.state(update.args[0])
    adapters = bytes_per_device(nnx.state(update.args[0], nnx.LoRAParam))
    calls = recipe.calls_per_step()
    out = [
        f"weights = the policy: base {human(bytes_per_device(policy) - adapters, 'B')} + "
        f"LoRA adapters {human(adapters, 'B')} per device; the rollout samples from it, "
        "the update writes it back",
        f"one step = {recipe.prompts_per_step} prompts x {recipe.num_generations}: rollout "
        f"x{calls['rollout']}, log-probs x{calls['logps']} per log-prob phase, update "
        f"x{calls['update']} (the roofline counts every call)",
        "the rollout's initial state is replicated (tunix passes it uncommitted); decode "
        "takes prefill's outputs as the compiled prefill lays them out (the KV cache split "
        "over the batch)",
        "host RAM, not HBM: RLCluster keeps a pinned-host copy of the actor's state",
    ]
    if recipe.beta != 0.0:
        out.insert(
            1,
            "reference weights = a SECOND copy of the base from the first update "
            "on: tunix 0.1.7's update returns every policy variable as a new buffer "
            "(only the optimizer is donated: the compiler aliases the optimizer state and "
            "nothing else), so the policy holds its own base and the reference keeps the "
            "original (tests/test_grpo.py measures both). This models the tunix 0.1.7 "
            "release; tunix's main branch later fused its train step and holds one copy fewer",
        )
    else:
        out.insert(
            1,
            "beta = 0: no reference model, one copy of the base (drop any handle "
            "you keep on the base model after applying LoRA, or it stays resident)",
        )
    if len(kept) < len(exes):
        out.append(
            f"compiled only {', '.join(e.label for e in kept)}; the other phases' "
            "resident buffers are counted all the same"
        )
    return out


# ---------------------------------------------------------------------------- the phases


def _most_split(shape: tuple[int, ...], mesh) -> NamedSharding:
    """The leading axis over every device, or over fsdp, where it divides; else replicated:
    no layout holds fewer bytes a device (decode's arguments before prefill compiles)."""
    for axes in (tuple(mesh.axis_names), ("fsdp",)):
        size = math.prod(mesh.shape[a] for a in axes)
        if shape and shape[0] % size == 0:
            return NamedSharding(mesh, P(axes))
    return NamedSharding(mesh, P())


def _replicated(tree, mesh):
    return abstract_like(tree, jax.tree.map(lambda _: NamedSharding(mesh, P()), tree))


def _placed(abstract_module, mesh):
    """An abstract nnx object whose leaves carry the shardings its annotations give on mesh."""
    graph, state = nnx.split(abstract_module)
    return nnx.merge(graph, on_mesh(state, mesh))


def _batch_input(shape, dtype, mesh, data_axes=("fsdp",)):
    """An input as tunix's shard_input places it: its own rule (`get_sharding`: leading axis
    over data_axes when divisible, else replicated), applied to a zero-stride array."""
    probe = np.broadcast_to(np.zeros((), dtype), shape)
    return jax.ShapeDtypeStruct(
        shape, dtype, sharding=sharding_utils.get_sharding(probe, mesh=mesh, pspec=P(*data_axes))
    )


def abstract_phases(
    name: str,
    recipe: GRPOSettings,
    *,
    mesh,
    tokenizer=None,
    remat: str = "none",
    vocab_size: int | None = None,
    layers: int | None = None,
) -> list[Executable]:
    """The jitted functions of one GRPO step of model `name` (any family) with abstract
    arguments on `mesh`, each phase's micro-batch x G sequences, for
    `exe.fn.lower(*exe.args, **exe.kwargs).compile()`; nothing is allocated. `tokenizer`
    supplies the pad and eos ids (Gemma's by default). Resident names: "weights" (the policy,
    base + adapters), "reference weights" (the base the reference keeps), "optimizer state"."""
    sizes, g, calls = recipe.batches(), recipe.num_generations, recipe.calls_per_step()
    tokenizer = tokenizer or models.IdsOnlyTokenizer()
    base = models.abstract_model(name, vocab_size=vocab_size, remat=remat, layers=layers)
    models.check_divisible(base, mesh, name)
    policy = _placed(
        models.abstract_model(
            name,
            vocab_size=vocab_size,
            lora_rank=recipe.lora_rank,
            lora_alpha=recipe.alpha,
            remat=remat,
            layers=layers,
        ),
        mesh,
    )
    plen, clen = recipe.prompt_len, recipe.completion_len
    sampler, exes = _rollout_phases(
        policy, recipe, sizes["rollout_micro"] * g, mesh, tokenizer, calls["rollout"]
    )
    rows = sizes["logps_micro"] * g
    logps = {
        "pad_id": tokenizer.pad_id(),
        "eos_id": tokenizer.eos_id(),
        "stop_gradient": True,
        "return_logits": False,
    }
    fn = token_logprobs.logps_function(recipe.logps)
    note = f"{rows} sequences; " + (
        "[B, T, V] logits"
        if recipe.logps == "tunix"
        else "chunked over the vocabulary (no [B, T, V])"
    )
    if recipe.beta != 0.0:  # RLCluster.get_ref_per_token_logps: tokens via shard_input
        graph, state = nnx.split(base)
        exes.append(
            Executable(
                "reference_logps",
                fn,
                (graph, on_mesh(state, mesh)),
                {
                    "prompt_tokens": _batch_input((rows, plen), jnp.int32, mesh),
                    "completion_tokens": _batch_input((rows, clen), jnp.int32, mesh),
                    "temperature": recipe.temperature,
                    **logps,
                },
                repeats=calls["logps"],
                note=note,
                resident_args={1: "reference weights"},
            )
        )
    if recipe.num_iterations > 1:  # VanillaRollout.get_per_token_logps: tokens as given
        tokens = {
            "prompt_tokens": jax.ShapeDtypeStruct((rows, plen), jnp.int32),
            "completion_tokens": jax.ShapeDtypeStruct((rows, clen), jnp.int32),
        }
        exes.append(
            Executable(  # no temperature passed: tunix uses 1.0 here
                "old_policy_logps",
                fn,
                sampler.model_def_and_state(),
                {**_replicated(tokens, mesh), **logps},
                repeats=calls["logps"],
                note=note,
                resident_args={1: "weights"},
            )
        )
    rows = sizes["train_micro"] * g
    ref = _batch_input((rows, clen), jnp.float32, mesh)
    example = grpo_learner.TrainExample(  # as GRPOLearner builds it, then shard_input
        prompt_ids=_batch_input((rows, plen), jnp.int32, mesh),
        prompt_mask=_batch_input((rows, plen), jnp.bool_, mesh),
        completion_ids=_batch_input((rows, clen), jnp.int32, mesh),
        completion_mask=_batch_input((rows, clen), jnp.bool_, mesh),
        advantages=_batch_input((rows,), jnp.float32, mesh),
        ref_per_token_logps=ref if recipe.beta != 0.0 else None,
        old_per_token_logps=ref if recipe.num_iterations > 1 else None,
    )
    trainer = _abstract_trainer(policy, recipe, tokenizer, mesh)
    step = trainer.jit_train_and_eval_step(cache_nnx_graph=False)[0]  # partial(jit, model, opt)
    exes.append(
        Executable(
            "policy_update",
            step.func,
            (*step.args, example),
            repeats=calls["update"],
            note=f"{rows} sequences; GRPO loss ([B, T, V] logits) + LoRA grads + optax; "
            "optimizer donated, a new copy of every policy weight returned",
            resident_args={0: "weights", 1: "optimizer state"},
            likely_worst=True,
        )
    )
    return exes


def _rollout_phases(policy, recipe: GRPOSettings, rows: int, mesh, tokenizer, calls: int):
    """Prefill and decode of the Sampler tunix's colocated vanilla rollout builds on the policy
    (VanillaRollout constructs the same Sampler; make_sampler also sets its eos ids, as
    Sampler.__call__ does). Prefill's state is replicated: tunix passes it uncommitted. Decode
    takes prefill's committed outputs: with tunix's activation shardings the KV cache leaves
    prefill split over the batch (the token buffer replicated), so decode is lowered with the
    output shardings of prefill's own compile in the verdict (`laid_out_by`): no extra compile
    (a fast one of prefill took 74 s of an 83 s build for gemma3-1b on a v5e-8)."""
    sampler = rollout.make_sampler(policy, tokenizer, recipe.rollout_config().kv_cache_size)
    params = sampler._flattened_transformer_state
    # shared.rollout.sampler's abstract initial state (private there; GRPO replicates it instead of
    # sharding it over the batch), built inside the family's traced_cache (Gemma 4).
    state = _replicated(
        rollout.abstract_sampling_state(
            sampler,
            rows,
            recipe.prompt_len,
            recipe.completion_len,
            recipe.temperature,
            recipe.top_p,
            recipe.top_k,
            recipe.seed,
        ),
        mesh,
    ).replace(num_input_tokens=PromptLength(recipe.prompt_len))
    with jax.set_mesh(mesh):  # as plan mode compiles it: the activation constraints apply
        prefilled = sampler._compiled_prefill_fn.lower(params, state, None, echo=False)
    fewest_bytes = jax.tree.map(lambda info: _most_split(info.shape, mesh), prefilled.out_info)
    return sampler, [
        Executable(
            "rollout_prefill",
            sampler._compiled_prefill_fn,
            (params, state, None),
            {"echo": False},
            repeats=calls,
            note=f"{rows} sequences, prompt {recipe.prompt_len}",
            resident_args={0: "weights"},
        ),
        Executable(
            "rollout_decode",
            sampler._compiled_decode_fn,
            (params, abstract_like(prefilled.out_info, fewest_bytes)),
            repeats=recipe.completion_len * calls,
            note="XLA counts the decode loop body once: x completion length x calls",
            resident_args={0: "weights"},
            laid_out_by="rollout_prefill",
            lay_out=lambda shardings: (params, abstract_like(prefilled.out_info, shardings)),
        ),
    ]


class PromptLength:
    """The prompt length in an abstract sampling state: an int to tunix's Sampler (it only
    slices with it), compared by value.

    tunix keeps it as a static jnp scalar, and jax caches donation vectors by argument
    structure (the hash ignores static values), so lowering after a live rollout in the same
    process (device mode, the tests) compares this field with tunix's array. A plain int
    would make jax run `array == int` on the compile-only TPU client, which cannot execute;
    jax leaves an object it does not know to that object's own __eq__, which reads the
    array's value on the host instead."""

    __slots__ = ("value",)

    def __init__(self, value: int):
        self.value = int(value)

    def __index__(self) -> int:
        return self.value

    __int__ = __index__

    def __eq__(self, other) -> bool:
        try:
            return int(other) == self.value
        except (TypeError, ValueError):
            return NotImplemented

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return str(self.value)


def _abstract_trainer(policy, recipe: GRPOSettings, tokenizer, mesh):
    """tunix's actor Trainer on the abstract policy, hooked by GRPOLearner itself (GRPO loss,
    model-input fn), with an abstract optimizer carrying the adapters' shardings.

    RLCluster cannot be built on ShapeDtypeStructs (it reads memory kinds and device-puts an
    anchor copy), so GRPOLearner gets a stand-in exposing what its __init__ reads. The Trainer
    is built with optax.identity (a real init would allocate) and then given
    nnx.Optimizer(policy, tx, wrt=LoRAParam) from nnx.eval_shape, tx being what PeftTrainer
    would use (in optax.MultiSteps when tunix accumulates gradients)."""
    real_config = recipe.training_config(1)
    tx = real_config.actor_optimizer
    if real_config.gradient_accumulation_steps is not None:
        tx = optax.MultiSteps(tx, real_config.gradient_accumulation_steps)
    trainer = rl_trainer.Trainer(
        model=policy,
        optimizer=optax.identity(),
        training_config=rl_cluster_lib.RLTrainingConfig(
            actor_optimizer=optax.identity(), eval_every_n_steps=10**9, max_steps=1
        ),
        custom_checkpoint_metadata_fn=dict,
    )
    trainer.optimizer = _placed(
        nnx.eval_shape(lambda m: nnx.Optimizer(m, tx, wrt=nnx.LoRAParam), policy), mesh
    )
    ns, rollout_config = types.SimpleNamespace, recipe.rollout_config()
    stand_in = ns(
        actor_trainer=trainer,
        global_steps=0,
        get_rollout_config=lambda mode: rollout_config,
        rollout=ns(pad_id=tokenizer.pad_id, eos_id=tokenizer.eos_id, model=lambda: policy),
        cluster_config=ns(
            training_config=real_config, role_to_mesh={Role.ACTOR: mesh, Role.ROLLOUT: mesh}
        ),
    )
    grpo_learner.GRPOLearner(stand_in, recipe.algo_config(), reward_fns=[arithmetic_reward])
    return trainer
