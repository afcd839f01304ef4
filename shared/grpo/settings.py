"""Notebook 07's setting: the GRPO recipe it runs, plans and budgets, one preset per mode.

`GRPOBudget.field()` is tunix's Gemma GRPO demo on gemma3-1b (prompts of 256 tokens,
768-token completions, G = 4, 8 sequences per call of every phase, a rank-64 LoRA policy, KL
weight 0.08) for a Kaggle v5e-8 and its 9-hour session; `GRPOBudget.local()` is the same loop on
a tiny Gemma 3 that runs on a CPU in seconds. The notebook builds it with
`report.setting(MODE, GRPOBudget, MODEL=MODEL, ...)`.

The setting is the notebook's parameters, checked; the tunix knobs stay in `GRPOSettings`
(shared.grpo.recipe). `request_fields()` is the plan Request (shared.plan) of this recipe, and
shared.plan.workloads.grpo's `settings(request)` makes the `GRPOSettings` both the live run and
the plan read, so the two cannot drift apart. shared.plan imports this package, not the other
way round: the notebook builds the Request.
"""

from __future__ import annotations

import dataclasses

from shared import models
from shared.errors import BadInput, choose, positive
from shared.grpo import token_logprobs
from shared.hardware import parse_target


@dataclasses.dataclass(frozen=True)
class GRPOBudget:
    """What notebook 07 runs: the model and slice, the recipe's sizes, the log-prob phases,
    the live run's steps and the session's hours."""

    model: str = "gemma3-1b"  # any shared.models.MODEL_NAMES entry
    target: str = "v5e-8"  # the slice to plan for
    prompt_len: int = 256  # prompt tokens (left-padded to it)
    completion_len: int = 768  # generated tokens per completion
    num_generations: int = 4  # completions per prompt (G)
    micro_batch: int = 8  # sequences per call of every phase (prompts x G)
    lora_rank: int = 64
    logps: str = "tunix"  # the log-prob phases: tunix | chunked (no [B, T, V] logits)
    beta: float = 0.08  # KL weight; 0: no reference model and no reference phase
    weights: str = "dummy"  # dummy: random weights | real: the checkpoint
    train_steps: int = 10  # live runs: GRPO steps, the first compiles
    hours: float = 9.0  # one Kaggle session

    @classmethod
    def local(cls) -> GRPOBudget:
        """A tiny Gemma 3 with random weights, 8-token prompts and completions: seconds a step
        on a CPU, most of it compiling."""
        return cls(
            model="gemma3-tiny",
            prompt_len=8,
            completion_len=8,
            num_generations=2,
            lora_rank=4,
            train_steps=3,
        )

    @classmethod
    def field(cls) -> GRPOBudget:
        """tunix's Gemma GRPO demo on gemma3-1b, sized for a Kaggle v5e-8."""
        return cls()

    def __post_init__(self):
        choose("model", self.model, models.MODEL_NAMES)
        choose("weights", self.weights, models.WEIGHTS)
        choose("log-prob implementation (LOGPS)", self.logps, token_logprobs.IMPLEMENTATIONS)
        parse_target(self.target)
        positive(
            PROMPT_LEN=self.prompt_len,
            COMPLETION_LEN=self.completion_len,
            MICRO_BATCH=self.micro_batch,
            LORA_RANK=self.lora_rank,
            TRAIN_STEPS=self.train_steps,
            HOURS=self.hours,
        )
        if self.num_generations < 2 or self.micro_batch % self.num_generations:
            raise BadInput(
                f"MICRO_BATCH ({self.micro_batch}) must be a multiple of NUM_GENERATIONS "
                f"({self.num_generations}, at least 2): tunix samples each prompt's group "
                "in one call"
            )
        if self.beta < 0:
            raise BadInput(f"BETA is a KL weight, 0 or more; got {self.beta}")

    def request_fields(self) -> dict:
        """The fields of the plan Request (shared.plan.Request) for this recipe: plan mode
        compiles it, and shared.plan.workloads.grpo.settings turns it into the GRPOSettings
        the live run uses. `batch` is the sequences per call, `steps` the completion length."""
        return {
            "workload": "grpo",
            "model": self.model,
            "target": self.target,
            "batch": self.micro_batch,
            "prompt_len": self.prompt_len,
            "steps": self.completion_len,
            "num_generations": self.num_generations,
            "lora_rank": self.lora_rank,
            "logps": self.logps,
            "beta": self.beta,
        }
