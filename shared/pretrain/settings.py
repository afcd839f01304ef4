"""Notebook 04's setting: what its ablation arms train, what plan mode compiles, what it prices.

Two presets, in the style of tunix's `ModelConfig.gemma3_1b()`: `Ablations.local()` trains the
tiny stand-in for 40 steps of 16 x 128 tokens (minutes on 2 CPU cores), `Ablations.field()` the
130m for 300 steps of 32 x 2048 (the real arm, on a TPU). The notebook builds its setting with
`report.setting(MODE, Ablations, MODEL=MODEL, ...)`: a parameter left at None keeps the preset's.
Every value is checked here, so a misspelled arm or target fails in one line before any compile.
"""

import dataclasses
from dataclasses import dataclass

from shared.errors import BadInput, choose, positive
from shared.hardware import parse_target, prices
from shared.pretrain import model
from shared.pretrain.config import TrainConfig

# Each arm changes one thing against the baseline: (model knobs, training settings).
ARMS = {
    "baseline": ({}, {}),
    "relu2": ({"mlp": "relu2"}, {}),
    "qk_norm": ({"qk_norm": True}, {}),
    "tied": ({"tied": True}, {}),
    "microbatches": ({}, {"microbatches": 2}),
    "attention": ({"attention": "xla"}, {}),  # the backend's other kernel (default: splash/cuDNN)
}
# The arm a TPU would train: what every mode prices, and the field preset's model and shape.
REAL_ARM = {"model": "130m", "batch": 32, "seq": 2048}
TPUCHAT_MFU = 0.465  # the public anchor: tpuchat's 130M on one v6e chip (attention not halved)


def check_training_run(model_name: str | None, **sizes: float | None) -> None:
    """A training run's model config (None: it follows the real run's, filled in later) and its
    sizes, each positive when given: BadInput in one line otherwise. Notebooks 04 and 05 train
    the same kind of run, so both settings check it here."""
    if model_name is not None:
        choose("model config", model_name, model.CONFIGS)
    positive(**sizes)


@dataclass(frozen=True)
class Ablations:
    """Notebook 04's parameters, lower-cased: the arms' training run, the plan, the pricing."""

    model: str | None  # the arms' model config (shared.pretrain.model.CONFIGS); None: REAL_ARM's
    steps: int  # training steps per arm
    batch: int | None  # sequences per step; None: REAL_ARM's
    seq: int | None  # tokens per sequence; None: REAL_ARM's
    vocab_size: int | None = None  # the tokenizer's vocabulary; None: the model's own V
    lr: float = 3e-3
    wd: float = 0.1
    seed: int = 0
    arms: tuple[str, ...] = tuple(ARMS)
    target: str = "v6e-1"  # plan mode: the chip to compile the train step for
    plan_batches: tuple[int, ...] = (16, 32)  # plan mode: sequences per step to compile
    plan_search: bool = True  # plan mode: also the largest batch and what to change
    real_arm: dict = dataclasses.field(default_factory=lambda: dict(REAL_ARM))
    frontier_batch: int | None = None  # None: twice the largest batch that fits
    cost_targets: tuple[str, ...] = ("v6e-1", "v5e-8")
    tokens_per_param: float = 20  # an arm's training tokens (Chinchilla's ratio)
    price_kind: str = "spot"

    @classmethod
    def local(cls) -> "Ablations":
        """The tiny stand-in (1.8M parameters) on a CPU: every arm's code path in minutes."""
        return cls(model="tiny", steps=40, batch=16, seq=128, vocab_size=4096)

    @classmethod
    def field(cls) -> "Ablations":
        """The real arm (REAL_ARM: the 130m at 32 x 2048 tokens a step, its own vocabulary):
        model, batch and seq follow REAL_ARM as the user sets it (`resolved`)."""
        return cls(model=None, steps=300, batch=None, seq=None)

    def resolved(self) -> "Ablations":
        """Model, batch and seq left at None take the real arm's (report.setting calls this
        after the user's values are in, so they follow a REAL_ARM the user changed)."""
        arm = self.real_arm
        return dataclasses.replace(
            self,
            model=self.model or arm["model"],
            batch=self.batch or arm["batch"],
            seq=self.seq or arm["seq"],
        )

    def __post_init__(self):
        # Parameters cells hold lists; the setting keeps tuples (frozen, comparable).
        for name in ("arms", "plan_batches", "cost_targets"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        check_training_run(
            self.model,
            steps=self.steps,
            batch=self.batch,
            seq=self.seq,
            vocab_size=self.vocab_size,
            lr=self.lr,
            frontier_batch=self.frontier_batch,
            tokens_per_param=self.tokens_per_param,
        )
        positive(plan_batches=min(self.plan_batches, default=1))
        if self.wd < 0:
            raise BadInput(f"wd must be zero or positive, got {self.wd}")
        for arm in self.arms:
            choose("arm", arm, ARMS)
        if "microbatches" in self.arms and self.batch and self.batch % 2:
            raise BadInput(
                f"the microbatches arm splits a step in 2: batch must be even, got {self.batch}"
            )
        if sorted(self.real_arm) != sorted(REAL_ARM):
            raise BadInput(f"real_arm needs exactly {', '.join(REAL_ARM)}; got {self.real_arm}")
        choose("real arm's model config", self.real_arm["model"], model.CONFIGS)
        positive(real_arm_batch=self.real_arm["batch"], real_arm_seq=self.real_arm["seq"])
        for target in (self.target, *self.cost_targets):
            parse_target(target)
        choose("price kind", self.price_kind, prices.HOURLY_KINDS)

    def changes(self, arm: str) -> tuple[dict, dict]:
        """What `arm` changes against the baseline: (model knobs, training settings)."""
        return ARMS[choose("arm", arm, ARMS)]

    def train_config(self, arm: str, metrics: str | None = None) -> TrainConfig:
        """The training run of one arm: the same steps on the same batches as every other arm
        (batch i depends only on the seed and i), a tenth of them warm-up."""
        model_changes, train_changes = self.changes(arm)
        return TrainConfig(
            config=self.model,
            model_overrides=model_changes,
            steps=self.steps,
            batch=self.batch,
            seq=self.seq,
            lr=self.lr,
            wd=self.wd,
            seed=self.seed,
            vocab_size=self.vocab_size or model.config(self.model).V,
            warmup=max(1, self.steps // 10),
            metrics=metrics,
            wandb_group="04_ablations",
            wandb_tags=(arm,),
            **train_changes,
        )

    def real_dims(self):
        """The real arm's architecture at its sequence length, for sizing's counts."""
        return model.config(self.real_arm["model"], T=self.real_arm["seq"]).dims()

    def frontier_at(self, max_batch: int) -> int:
        """The batch the frontier makes fit: FRONTIER_BATCH, else twice the largest that fits."""
        return self.frontier_batch or 2 * max_batch
