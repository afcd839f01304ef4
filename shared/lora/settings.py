"""Notebook 02's setting: the LoRA model it measures and trains, one preset per mode.

`LoraOverhead.local()` is a tiny gemma3 whose rollouts and fine-tune run on a CPU in seconds;
`LoraOverhead.field()` is gemma3-1b at rollout-sized batches, 256-token prompts and 1024 steps,
and a fine-tune on 512-token rows, which plan mode compiles and device mode measures. The
notebook builds it with `report.setting(MODE, LoraOverhead, MODEL=MODEL, ...)`, so a parameter
the user sets wins over the preset, and a bad one fails here with one line.
"""

from __future__ import annotations

import dataclasses

from shared import models
from shared.errors import BadInput, choose, positive
from shared.lora.adapters import default_alpha


@dataclasses.dataclass(frozen=True)
class LoraOverhead:
    """What notebook 02 runs: the model and LoRA rank, the rollouts timed with and without the
    adapters, and the short fine-tune that is merged, exported and reloaded."""

    model: str
    batch_sizes: tuple[int, ...]  # rollout batches, base vs LoRA
    steps: int  # generation steps per rollout
    prompt_len: int  # prompt tokens per row
    train_seq: int  # tokens per fine-tune row
    weights: str = "dummy"
    rank: int = 16  # alpha is 2 x rank, as in plan mode's LoRA workloads
    trials: int = 5  # timed rollouts per point after the first (compile + run) call
    train_steps: int = 30
    train_batch: int = 8  # rows per fine-tune step
    lr: float = 1e-2  # AdamW on the adapters only

    @classmethod
    def local(cls) -> LoraOverhead:
        """A tiny config of the real architecture, random weights: seconds on a CPU."""
        return cls("gemma3-tiny", (1, 8), steps=32, prompt_len=16, train_seq=64)

    @classmethod
    def field(cls) -> LoraOverhead:
        """gemma3-1b at rollout-sized batches, 256-token prompts, 1024 steps, 512-token rows."""
        return cls("gemma3-1b", (1, 16, 64, 128), steps=1024, prompt_len=256, train_seq=512)

    def __post_init__(self):
        # Parameters arrive as lists from papermill: keep a sorted, distinct tuple.
        object.__setattr__(self, "batch_sizes", tuple(sorted(set(self.batch_sizes))))
        choose("model", self.model, models.MODEL_NAMES)
        choose("weights", self.weights, models.WEIGHTS)
        if not self.batch_sizes:
            raise BadInput("BATCH_SIZES must name at least one rollout batch")
        positive(
            RANK=self.rank,
            BATCH_SIZES=min(self.batch_sizes),
            STEPS=self.steps,
            PROMPT_LEN=self.prompt_len,
            TRIALS=self.trials,
            TRAIN_STEPS=self.train_steps,
            TRAIN_BATCH=self.train_batch,
            TRAIN_SEQ=self.train_seq,
        )
        if not self.lr > 0:
            raise BadInput(f"LR must be positive, got {self.lr}")

    @property
    def alpha(self) -> float:
        """LoRA's scale numerator, 2 x rank: what plan mode's LoRA workloads compile."""
        return default_alpha(self.rank)
