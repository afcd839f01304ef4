"""GRPO on a budget: tunix's GRPOLearner run for real on any family, timed per phase.

    model, tok = models.load("gemma3-tiny", "dummy", mesh=mesh)   # or qwen3-tiny, gemma3-1b
    run = build_grpo(model, tok, mesh, GRPOSettings(prompts_per_step=4), steps=3)
    result = run_grpo(run, arithmetic_batches(steps=3, prompts_per_step=4))
    result.steps[1]  # {"rollout_s", "reference_logps_s", "rewards_s", "policy_update_s",
                     #  "step_s", "reward_mean", "loss", "kl", "grad_norm", ...}

A qwix LoRA policy over a frozen reference (the base model) in tunix's RLCluster (vanilla
rollout, all roles on one mesh). A tunix 0.1.7 step runs its phases one after another: rollout
(Sampler prefill + decode), reference log-probs (`rl.common.compute_per_token_logps`),
old-policy log-probs (num_iterations > 1 only), rewards and advantages (host), policy update
(the trainer's jitted `_train_step`: GRPO loss with the policy's log-probs, grads, optax).
Everything here is tunix's own loop; `settings.logps="chunked"` only swaps the function its
log-prob workers call (shared.grpo.token_logprobs). Plan mode compiles the same jitted functions
with abstract arguments: shared.plan.workloads.grpo.
"""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "disabled")  # `import tunix` imports its wandb logger

import contextlib
import dataclasses
import time

import jax
import numpy as np
from flax import nnx
from tunix.generate.tokenizer_adapter import TokenizerAdapter
from tunix.rl import rl_cluster as rl_cluster_lib
from tunix.rl.grpo import grpo_learner

from shared import lora
from shared.errors import BadInput
from shared.grpo import token_logprobs
from shared.grpo.recipe import GRPOSettings, arithmetic_reward
from shared.plan.compiler.compiled import takes_effort

Role = rl_cluster_lib.Role


class TextTokenizer:
    """Any tokenizer tunix adapts, with `encode` taking numpy strings: tunix's data loop
    repeats batches with np.repeat, so prompts reach the Sampler as np.str_ (SentencePiece
    rejects those); and with `decode` reading an id past a SentencePiece vocabulary as its
    unknown piece: random weights of a real architecture (gemma3-1b, V = 262,144) sample any
    id, and the dummy weights' local tokenizer has 4,096 pieces, where SentencePiece raises
    OUT_OF_RANGE from inside tunix's Sampler. Only the reward reads that text; the log-probs
    and the update take the sampled ids themselves."""

    def __init__(self, tokenizer):
        self._tok = TokenizerAdapter(tokenizer)
        is_sentencepiece = hasattr(tokenizer, "GetPieceSize")
        self._pieces = tokenizer.GetPieceSize() if is_sentencepiece else None
        self._unknown = tokenizer.unk_id() if is_sentencepiece else None

    def encode(self, text, **kwargs):
        return self._tok.encode(str(text), **kwargs)

    def decode(self, ids, **kwargs):
        if self._pieces is not None:
            ids = [i if i < self._pieces else self._unknown for i in ids]
        return self._tok.decode(ids, **kwargs)

    def __getattr__(self, name):  # decode, bos_id, eos_id, pad_id: the adapter's (and an
        return getattr(vars(self).get("_tok"), name)  # AttributeError while _tok is unset)


# ---------------------------------------------------------------------------- real runs


# RLCluster method -> phase; GRPOLearner calls them with global_steps = the step in progress.
PHASES = {
    "generate": "rollout",
    "get_ref_per_token_logps": "reference_logps",
    "get_old_per_token_logps": "old_policy_logps",
    "update_actor": "policy_update",
}


class PhaseTimer:
    """Wall seconds per (step, phase): the RLCluster methods each phase calls (and the
    learner's reward manager) are shadowed on the instances by timed wrappers that wait for
    their results, so first calls include compiling. tunix's code is untouched; its own perf
    tracer (PerfMetricsConfig) splits similar spans over threads and devices instead."""

    def __init__(self, cluster, learner):
        self.events: list[tuple[int, str, float, float]] = []  # step, phase, start, seconds
        for method, phase in PHASES.items():
            self._wrap(cluster, method, phase, cluster)
        self._wrap(learner, "reward_manager", "rewards", cluster)

    def _wrap(self, obj, attr: str, phase: str, cluster) -> None:
        inner = getattr(obj, attr)

        def timed(*args, **kwargs):
            step, start = cluster.global_steps, time.perf_counter()
            out = inner(*args, **kwargs)  # update_actor: None; wait for the params it wrote
            jax.block_until_ready(
                out if out is not None else nnx.state(cluster.actor_trainer.model, nnx.LoRAParam)
            )
            self.events.append((step, phase, start, time.perf_counter() - start))
            return out

        setattr(obj, attr, timed)

    def steps(self) -> list[dict[str, float]]:
        """Per step: seconds per phase (summed over calls) and step_s, first start to last end."""
        out: dict[int, dict[str, float]] = {}
        for step, phase, start, seconds in sorted(self.events, key=lambda e: e[2]):
            row = out.setdefault(step, {"start": start})
            row[f"{phase}_s"] = row.get(f"{phase}_s", 0.0) + seconds
            row["step_s"] = start + seconds - row["start"]
        return [{k: v for k, v in out[s].items() if k != "start"} for s in sorted(out)]


@dataclasses.dataclass
class GRPORun:
    """A built GRPO run: tunix's cluster and learner, the models, and the timer on them."""

    cluster: rl_cluster_lib.RLCluster
    learner: grpo_learner.GRPOLearner
    policy: nnx.Module  # the LoRA model tunix trains (and samples from)
    reference: nnx.Module | None  # the base (None when beta = 0: tunix then needs none); the
    # policy shares its buffers until the first update, then holds its own copy
    settings: GRPOSettings
    timer: PhaseTimer
    tokenizer: TextTokenizer

    def check_prompts(self, batches) -> None:
        """BadInput unless every prompt (with BOS) fits prompt_len: tunix would silently pad
        the batch to the next power of two instead, and then overflow the KV cache."""
        longest = max(len(self.tokenizer.encode(p)) + 1 for b in batches for p in b["prompts"])
        if longest > self.settings.prompt_len:
            raise BadInput(
                f"a prompt is {longest} tokens with BOS but prompt_len is "
                f"{self.settings.prompt_len}: raise prompt_len or shorten prompts"
            )


def build_grpo(
    model, tokenizer, mesh, settings: GRPOSettings, *, steps: int, reward_fns=(arithmetic_reward,)
) -> GRPORun:
    """tunix RLCluster + GRPOLearner for `steps` steps: a LoRA policy on `model` (any tunix
    family, from models.load, on `mesh` with Auto axes "fsdp" and "tp"), `model` itself the
    frozen reference (none when beta = 0). All roles share the mesh, so tunix colocates them:
    the rollout samples from the policy (no weight sync) and the reference reads the base
    buffers the policy started with."""
    settings.batches()
    if any(t != jax.sharding.AxisType.Auto for t in mesh.axis_types):
        raise BadInput(
            "tunix's GRPO needs a mesh with Auto axes (shared.hardware.sharding.make_mesh "
            "makes one); jax's Explicit axes raise a ShardingTypeError in its models"
        )
    policy = lora.apply_lora(
        model, settings.lora_rank, settings.alpha, mesh=mesh, seed=settings.seed
    )
    reference = model if settings.beta != 0.0 else None
    config = rl_cluster_lib.ClusterConfig(  # rollout_engine "vanilla", nothing offloaded
        role_to_mesh={Role.ACTOR: mesh, Role.REFERENCE: mesh, Role.ROLLOUT: mesh},
        training_config=settings.training_config(steps),
        rollout_config=settings.rollout_config(),
    )
    text = TextTokenizer(tokenizer)
    cluster = rl_cluster_lib.RLCluster(
        actor=policy, reference=reference, tokenizer=text, cluster_config=config
    )
    learner = grpo_learner.GRPOLearner(cluster, settings.algo_config(), reward_fns=list(reward_fns))
    return GRPORun(
        cluster, learner, policy, reference, settings, PhaseTimer(cluster, learner), text
    )


# tunix metric (prefix, name) -> our column. tunix splits "rewards/score/mean" at the first "/".
METRICS = {
    ("rewards", "score/mean"): "reward_mean",
    ("rewards", "score/max"): "reward_max",
    ("completions", "mean_length"): "completion_len",
    ("actor", "loss"): "loss",
    ("actor", "kl"): "kl",
    ("actor", "grad_norm"): "grad_norm",
    ("actor", "pg_clipfrac"): "pg_clipfrac",
}


@dataclasses.dataclass
class GRPOResult:
    steps: list[dict[str, float]]  # per step: phase seconds, step_s and the METRICS columns
    metrics: dict[str, np.ndarray]  # tunix's full histories, one value per log event
    wall_s: float  # the whole learner.train call

    @property
    def steady_step_s(self) -> float:
        """Median step seconds after the first (which compiles everything)."""
        return self.steady()["step_s"]

    def steady(self) -> dict[str, float]:
        """Median seconds per phase (and step_s) over the steps after the first."""
        later = self.steps[1:]
        keys = dict.fromkeys(k for row in self.steps for k in row if k.endswith("_s"))
        return {
            k: float(np.median([row.get(k, 0.0) for row in later])) if later else float("nan")
            for k in keys
        }


def run_grpo(run: GRPORun, batches) -> GRPOResult:
    """tunix's GRPO training loop over `batches` (one per step); a GRPORun trains once.
    tunix logs actor metrics per optimizer update, the rest per step: a step's row averages
    its updates (prompts_per_step / mini_batch x num_iterations of them)."""
    batches = list(batches)
    run.check_prompts(batches)
    swap = (
        token_logprobs.chunked_logps()
        if run.settings.logps == "chunked"
        else contextlib.nullcontext()
    )
    start = time.perf_counter()
    with swap:
        run.learner.train(batches)  # ends with cluster.close(), which flushes the metrics
    wall = time.perf_counter() - start
    logger = run.cluster.actor_trainer.metrics_logger
    metrics = {
        column: np.asarray(logger.get_metric_history(prefix, name, "train"), float)
        for (prefix, name), column in METRICS.items()
        if logger.metric_exists(prefix, name, "train")
    }
    rows = run.timer.steps()
    for column, history in metrics.items():
        if len(rows) and len(history) % len(rows) == 0:
            for row, values in zip(rows, history.reshape(len(rows), -1), strict=True):
                row[column] = float(values.mean())
    return GRPOResult(rows, metrics, wall)


@contextlib.contextmanager
def quick_compiles():
    """XLA's least optimisation effort while a CPU run compiles: about halves a tiny run's
    compile time (it is compile-bound: tens of seconds of compiling against ~1 s of steps).
    The previous setting is restored afterwards. A jax without that knob compiles as usual
    (shared.plan.compiler.compiled.takes_effort)."""
    if not takes_effort():
        yield
        return
    before = jax.config.jax_exec_time_optimization_effort
    jax.config.update("jax_exec_time_optimization_effort", -1.0)
    try:
        yield
    finally:
        jax.config.update("jax_exec_time_optimization_effort", before)


def base_weights(model):
    """The base (non-LoRA) parameters of a model, as an nnx State."""
    return nnx.state(model, nnx.All(nnx.Param, nnx.Not(nnx.LoRAParam)))


def base_copies(run: GRPORun) -> int:
    """How many copies of the base weights the run holds on the devices now: 1 while the
    policy and the reference share buffers (or there is no reference), 2 once they do not.
    tunix 0.1.7's update writes every policy variable back as a new buffer (nnx.jit returns
    the whole model; only the optimizer is donated), so from the first update on it is 2."""

    def buffers(model):
        return {
            x.addressable_shards[0].data.unsafe_buffer_pointer()
            for x in jax.tree.leaves(base_weights(model))
        }

    if run.reference is None:
        return 1
    return 1 if buffers(run.policy) == buffers(run.reference) else 2
