"""A GRPO recipe apart from the machinery that runs it: the reward task and the settings.

- the task: arithmetic problems ("12+7=") with an exact-match reward, so a run needs no dataset
  download and its reward is checkable by eye;
- `GRPOSettings`: the knobs of a tunix GRPO run that decide memory, speed and cost, and the
  tunix configs they become (rollout, RL training, GRPO algorithm).

Both the real run (shared.grpo.runner) and plan mode (shared.plan.workloads.grpo) read these.
"""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "disabled")  # `import tunix` imports its wandb logger

import dataclasses

import numpy as np
import optax
from tunix.rl import rl_cluster as rl_cluster_lib
from tunix.rl.grpo import grpo_learner
from tunix.rl.rollout import base_rollout

from shared import lora
from shared.errors import BadInput, choose
from shared.grpo import token_logprobs

# ---------------------------------------------------------------------------- the task


def arithmetic_problems(
    n: int, *, seed: int = 0, max_operand: int = 20, ops: str = "+-"
) -> list[tuple[str, str]]:
    """n (prompt, answer) pairs like ("12+7=", "19"), a task checked without a model;
    subtraction never goes below zero."""
    if n < 1 or max_operand < 1 or not ops or set(ops) - set("+-*"):
        raise BadInput(
            f"arithmetic_problems needs n >= 1, max_operand >= 1 and ops from '+-*', "
            f"got n={n}, max_operand={max_operand}, ops={ops!r}"
        )
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        a, b = (int(x) for x in rng.integers(0, max_operand + 1, 2))
        op = ops[int(rng.integers(len(ops)))]
        if op == "-" and b > a:
            a, b = b, a
        out.append((f"{a}{op}{b}=", str({"+": a + b, "-": a - b, "*": a * b}[op])))
    return out


def arithmetic_batches(
    steps: int, prompts_per_step: int, *, seed: int = 0, **problems
) -> list[dict[str, np.ndarray]]:
    """One tunix batch per step, {"prompts": array, "answer": array}. Arrays, not lists:
    tunix repeats each column G times with jax.tree.map, which would split a list into its
    strings. tunix passes the other columns to reward functions as keywords (`answer`)."""
    pairs = np.array(arithmetic_problems(steps * prompts_per_step, seed=seed, **problems))
    return [{"prompts": chunk[:, 0], "answer": chunk[:, 1]} for chunk in np.split(pairs, steps)]


def arithmetic_reward(prompts, completions, answer, **kwargs) -> list[float]:
    """1.0 where the completion is exactly the answer (surrounding whitespace aside), else 0.
    tunix decodes completions without their EOS: "19"+EOS scores, "19 apples" does not. Random
    weights score ~0, so every group's advantage is 0 (only the KL term then trains)."""
    return [
        1.0 if str(c).strip() == str(a).strip() else 0.0
        for c, a in zip(completions, answer, strict=True)
    ]


# ---------------------------------------------------------------------------- settings


@dataclasses.dataclass(frozen=True)
class GRPOSettings:
    """The knobs of a tunix GRPO run that decide memory, speed and cost. Batch sizes count
    prompts, as in tunix's RLTrainingConfig; a phase runs micro-batch x G sequences. Unset ones
    default as tunix does: train_micro -> mini -> prompts_per_step; rollout/logps -> train_micro.
    """

    prompt_len: int = 32  # RolloutConfig.max_prompt_length: prompts are left-padded to it
    completion_len: int = 16  # RolloutConfig.max_tokens_to_generate
    prompts_per_step: int = 4
    num_generations: int = 4  # G
    num_iterations: int = 1  # mu: > 1 adds the old-policy log-prob phase
    mini_batch: int | None = None  # prompts per optimizer update
    train_micro_batch: int | None = None  # prompts per forward/backward (grad accumulation)
    rollout_micro_batch: int | None = None  # prompts per Sampler call
    logps_micro_batch: int | None = None  # prompts per log-prob call
    lora_rank: int = 8
    lora_alpha: float | None = None  # None: lora.default_alpha(rank)
    learning_rate: float = 3e-6  # tunix's Gemma GRPO demo
    max_grad_norm: float | None = 0.1
    beta: float = 0.08  # KL penalty; 0 skips the reference phase
    epsilon: float = 0.2
    temperature: float = 0.9
    top_p: float | None = 1.0
    top_k: int | None = 50
    cache_size: int | None = None  # None: prompt_len + completion_len
    logps: str = "tunix"  # log-prob phases: tunix's function | "chunked" (no [B, T, V])
    seed: int = 0

    def batches(self) -> dict[str, int]:
        """Resolved prompts per step / update / micro-batch, checked as tunix checks them."""
        full = self.prompts_per_step
        mini = self.mini_batch or full
        micro = self.train_micro_batch or mini
        sizes = {
            "step": full,
            "mini": mini,
            "train_micro": micro,
            "rollout_micro": self.rollout_micro_batch or micro,
            "logps_micro": self.logps_micro_batch or micro,
        }
        bad = [f"{k}={v}" for k, v in sizes.items() if v < 1 or full % v]
        if mini % micro:
            bad.append(f"train_micro={micro} does not divide mini={mini}")
        if bad or self.num_generations < 2 or self.num_iterations < 1:
            raise BadInput(
                f"GRPO batch sizes must be >= 1 and divide prompts_per_step={full} "
                f"({', '.join(bad) or 'ok'}); num_generations >= 2 "
                f"({self.num_generations}), num_iterations >= 1"
            )
        choose("log-prob implementation", self.logps, token_logprobs.IMPLEMENTATIONS)
        return sizes

    def calls_per_step(self) -> dict[str, int]:
        """How often one step calls each phase's jitted function (tunix slices a step's
        prompts into micro-batches per phase; the update runs num_iterations times over all)."""
        sizes = self.batches()
        return {
            "rollout": sizes["step"] // sizes["rollout_micro"],
            "logps": sizes["step"] // sizes["logps_micro"],
            "update": sizes["step"] // sizes["train_micro"] * self.num_iterations,
        }

    @property
    def sequences_per_step(self) -> int:
        return self.prompts_per_step * self.num_generations

    @property
    def alpha(self) -> float:
        return lora.default_alpha(self.lora_rank) if self.lora_alpha is None else self.lora_alpha

    def optimizer(self) -> optax.GradientTransformation:
        """AdamW as in tunix's GRPO demo (b2 0.99, weight decay 0.1), constant learning rate,
        global-norm clipping first."""
        tx = optax.adamw(self.learning_rate, b1=0.9, b2=0.99, weight_decay=0.1)
        return (
            tx
            if self.max_grad_norm is None
            else optax.chain(optax.clip_by_global_norm(self.max_grad_norm), tx)
        )

    def rollout_config(self) -> base_rollout.RolloutConfig:
        return base_rollout.RolloutConfig(
            max_tokens_to_generate=self.completion_len,
            max_prompt_length=self.prompt_len,
            kv_cache_size=self.cache_size or self.prompt_len + self.completion_len,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            seed=self.seed,
        )

    def training_config(self, steps: int) -> rl_cluster_lib.RLTrainingConfig:
        """tunix's config; batch sizes passed only when set (given train_micro_batch_size,
        tunix needs a mini_batch_size and wraps the optimizer in optax.MultiSteps)."""
        mini = self.mini_batch or (self.prompts_per_step if self.train_micro_batch else None)
        sizes = {
            "mini_batch_size": mini,
            "train_micro_batch_size": self.train_micro_batch,
            "rollout_micro_batch_size": self.rollout_micro_batch,
            "compute_logps_micro_batch_size": self.logps_micro_batch,
        }
        return rl_cluster_lib.RLTrainingConfig(
            actor_optimizer=self.optimizer(),
            eval_every_n_steps=10**9,
            max_steps=steps,
            **{k: v for k, v in sizes.items() if v},
        )

    def algo_config(self) -> grpo_learner.GRPOConfig:
        return grpo_learner.GRPOConfig(
            num_generations=self.num_generations,
            beta=self.beta,
            num_iterations=self.num_iterations,
            epsilon=self.epsilon,
        )
