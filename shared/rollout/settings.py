"""Notebook 01's setting: the rollouts it measures, compiles and prices, one preset per mode.

`RolloutSizing.local()` is a tiny gemma3 that runs on a CPU in seconds; `RolloutSizing.field()`
is the field's setting (gemma3-1b, prompts padded to 128 tokens, 1024 generation steps, a
1312-slot KV cache) that plan mode compiles and device mode measures. The notebook builds it
with `report.setting(MODE, RolloutSizing, MODEL=MODEL, ...)`, so a parameter the user sets wins
over the preset, and a bad one fails here with one line instead of deep inside tunix.
"""

from __future__ import annotations

import dataclasses

from shared import models
from shared.errors import BadInput, choose, positive
from shared.rollout.sampler import SEMANTICS

CACHE_SLACK = 32  # local mode's KV slots beyond prompt + steps when CACHE_SIZE is not given


@dataclasses.dataclass(frozen=True)
class RolloutSizing:
    """What notebook 01 rolls out: the model, the measured batches and steps, the prompt and
    KV-cache lengths, the tunix Sampler semantics plan mode compiles, and the rollouts to price."""

    model: str
    batch_sizes: tuple[int, ...]  # measured at the largest of `steps`
    steps: tuple[int, ...]  # swept at the smallest batch; plan mode compiles the largest
    prompt_len: int  # prompt tokens per row
    cache_size: int | None = None  # KV slots; None: prompt_len + max(steps) + CACHE_SLACK
    weights: str = "dummy"
    trials: int = 5  # timed calls per point after the first (compile + run) call
    tunix: tuple[str, ...] = SEMANTICS  # Sampler semantics to compile: "0.1.6" does not donate
    rollouts: int = 100_000  # sequences to budget at the largest batch

    @classmethod
    def local(cls) -> RolloutSizing:
        """A tiny config of the real architecture, random weights: seconds on a CPU."""
        return cls("gemma3-tiny", (1, 4, 8, 12, 16), (8, 16, 32), prompt_len=16)

    @classmethod
    def field(cls) -> RolloutSizing:
        """The field's setting: gemma3-1b, 128-token prompts, 1024 steps, 1312 KV slots, and
        batches on both sides of every multiple of 64 up to the field's out-of-memory 256."""
        batches = (1, 4, 16, 60, 64, 68, 124, 128, 132, 196, 200, 204, 252, 256, 260, 384)
        return cls("gemma3-1b", batches, (128, 256, 512, 1024), prompt_len=128, cache_size=1312)

    def __post_init__(self):
        # Parameters arrive as lists from papermill: keep sorted, distinct tuples.
        object.__setattr__(self, "batch_sizes", tuple(sorted(set(self.batch_sizes))))
        object.__setattr__(self, "steps", tuple(sorted(set(self.steps))))
        object.__setattr__(self, "tunix", tuple(self.tunix))
        choose("model", self.model, models.MODEL_NAMES)
        choose("weights", self.weights, models.WEIGHTS)
        for semantics in self.tunix:
            choose("tunix semantics", semantics, SEMANTICS)
        if not self.batch_sizes or not self.steps:
            raise BadInput("BATCH_SIZES and STEPS must each name at least one size")
        positive(
            BATCH_SIZES=min(self.batch_sizes),
            STEPS=min(self.steps),
            PROMPT_LEN=self.prompt_len,
            TRIALS=self.trials,
            ROLLOUTS=self.rollouts,
            CACHE_SIZE=self.cache,
        )
        if self.prompt_len + self.steps_max > self.cache:
            raise BadInput(
                f"CACHE_SIZE {self.cache} < PROMPT_LEN + max(STEPS) = "
                f"{self.prompt_len + self.steps_max}: give a larger CACHE_SIZE or fewer STEPS"
            )

    @property
    def steps_max(self) -> int:
        """The generation steps every batch is measured, and plan mode compiles, at."""
        return max(self.steps)

    def points(self, unit: int) -> list[tuple[int, int]]:
        """The (batch, steps) points to measure: the steps sweep at `unit` rows (the data-
        parallel devices each take one), then every batch `unit` divides at max(steps)."""
        sweep = [(unit, steps) for steps in self.steps]
        batches = [(batch, self.steps_max) for batch in self.batch_sizes if batch % unit == 0]
        return list(dict.fromkeys(sweep + batches))

    @property
    def cache(self) -> int:
        """The KV slots the Sampler allocates per row (tunix allocates all of them per layer)."""
        if self.cache_size is not None:
            return self.cache_size
        return self.prompt_len + self.steps_max + CACHE_SLACK
