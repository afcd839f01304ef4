"""Notebook 08's setting: whole jobs people budget for, and where to look for a slice.

`WhichSlice.field()` holds the jobs issue 23 names: seed 001's Gemma 4 31B LoRA, a gemma3-27b
LoRA at 4,096 tokens, GRPO on gemma3-4b and notebook 04's 130M pretraining run, searched over
every slice Cloud TPU rents. `WhichSlice.local()` runs the same search on tiny models over three
single-host slices, minutes on a CPU. A notebook builds it with `report.setting(MODE,
WhichSlice, ...)`.
"""

from __future__ import annotations

import dataclasses

from shared.errors import BadInput, choose, positive
from shared.hardware import parse_target, prices, rent
from shared.plan.slices.cheapest import MAX_COMPILED, SEARCH_MINUTES
from shared.plan.slices.job import JOB_UNITS
from shared.plan.workloads.request import Request


@dataclasses.dataclass(frozen=True)
class SliceJob:
    """One job: a workload with its shapes (plan.Request fields) and how much of it."""

    title: str
    workload: str
    model: str
    amount: float  # in the workload's unit: shared.plan.slices.job.JOB_UNITS
    shapes: tuple[tuple[str, object], ...] = ()
    # Minutes of compiling this job's search needs to reach its answer, where the setting names
    # none (None: SEARCH_MINUTES). A 31B compile takes 2-4 min here and a GRPO verdict
    # several: in 12 minutes both searches answered a dearer slice or mesh than their own.
    minutes: float | None = None

    def request(self) -> Request:
        """The plan request (its target is a stand-in: the search chooses the slice)."""
        return Request(self.workload, self.model, "v5e-1", **dict(self.shapes))

    @property
    def unit(self) -> str:
        return JOB_UNITS[self.workload]


def job(
    title: str, workload: str, model: str, amount: float, *, minutes=None, **shapes
) -> SliceJob:
    choose("workload with a job to price", workload, JOB_UNITS)
    positive(**{JOB_UNITS[workload]: amount}, minutes=minutes)
    return SliceJob(title, workload, model, amount, tuple(sorted(shapes.items())), minutes)


# tunix's Gemma GRPO demo recipe, as notebook 07 and the atlas's GRPO column run it
_GRPO_DEMO = dict(prompt_len=256, steps=768, num_generations=4, batch=8, lora_rank=64, beta=0.08)


@dataclasses.dataclass(frozen=True)
class WhichSlice:
    """The jobs notebook 08 answers, the slices it searches and how it prices them."""

    jobs: tuple[SliceJob, ...]
    slices: tuple[str, ...] = rent.ALL_SLICES
    max_slices: int = MAX_COMPILED  # slices compiled at most per job
    minutes: float | None = None  # of compiling per job, then the best so far (None: the job's)
    price: str = "on-demand"  # or spot
    within_hours: float | None = None  # a deadline: slower slices do not count

    @classmethod
    def local(cls) -> WhichSlice:
        """Tiny models (random weights, real compiles) over three single-host TPU slices and
        two GPU machines (Colab's L4, Kaggle's T4 pair)."""
        return cls(
            jobs=(
                job(
                    "LoRA fine-tune, tiny Gemma 2",
                    "lora-train",
                    "gemma2-tiny",
                    1e7,
                    seq=128,
                    lora_rank=4,
                ),
                job("rollouts, tiny Qwen 3", "rollout", "qwen3-tiny", 1e5, prompt_len=16, steps=16),
            ),
            slices=("v5e-1", "v6e-1", "v5p-8", "l4-1", "t4-2"),
            max_slices=3,
        )

    @classmethod
    def field(cls) -> WhichSlice:
        """Issue 23's jobs over every rented slice."""
        return cls(
            jobs=(
                job(
                    "Gemma 4 31B LoRA, seed 001's recipe",
                    "lora-train",
                    "gemma4-31b",
                    1e8,
                    seq=2048,
                    lora_rank=16,
                    # its answer, the v6e-4 on 1x4, came after 31 min of compiles from a cache
                    # holding 4x1's (benchmarks/results/08_which_slice.json); in 12 it was 4x1
                    minutes=40,
                ),
                job(
                    "gemma3-27b LoRA at 4,096 tokens",
                    "lora-train",
                    "gemma3-27b",
                    5e7,
                    seq=4096,
                    lora_rank=16,
                ),
                job(
                    "GRPO on gemma3-4b, 2,000 steps",
                    "grpo",
                    "gemma3-4b",
                    2000,
                    # from an empty cache its answer, the v5p-8 on 1x4, came after 27 min; in
                    # 12 the search stopped after the v6e-4 (benchmarks/results/08_which_slice.json)
                    minutes=40,
                    **_GRPO_DEMO,
                ),
                job("the 130M pretraining run (notebook 04)", "train", "130m", 2.6e9, seq=2048),
            )
        )

    def __post_init__(self):
        object.__setattr__(self, "slices", tuple(self.slices))  # papermill hands lists
        for target in self.slices:
            choose("SLICES entry", parse_target(target).name, rent.ALL_SLICES)
        choose("PRICE", self.price, prices.HOURLY_KINDS)
        positive(MAX_SLICES=self.max_slices, WITHIN_HOURS=self.within_hours, MINUTES=self.minutes)
        if not self.jobs:
            raise BadInput("JOBS needs at least one job")

    def minutes_for(self, job: SliceJob) -> float:
        """The compile budget of `job`'s search: the setting's, else the job's own, else
        SEARCH_MINUTES."""
        return self.minutes or job.minutes or SEARCH_MINUTES
