"""Notebook 05's setting: what every trial of the sweep trains, and the real trial it prices.

Two presets, in the style of tunix's `ModelConfig.gemma3_1b()`: `HparamSweep.local()` makes
each trial the tiny stand-in for 30 steps of 8 x 128 tokens (about 30 s a trial on 2 CPU
cores), `HparamSweep.field()` the 130m for 2000 steps of 32 x 2048 (a trial on a TPU, as
REAL_TRIAL prices it). The notebook builds its setting with `report.setting(MODE, HparamSweep,
MODEL=MODEL, ...)`: a parameter left at None keeps the preset's value. Every value is checked
here, so a bad size or price kind fails in one line before the first trial starts.
"""

import dataclasses
from dataclasses import dataclass

from shared.errors import BadInput, choose, positive
from shared.hardware import parse_target, prices
from shared.pretrain import model
from shared.pretrain.settings import check_training_run
from shared.sweep import config as sweep_config

# A trial on a TPU: what every mode prices, and the field preset's model, steps and shape.
REAL_TRIAL = {"model": "130m", "steps": 2000, "batch": 32, "seq": 2048}


@dataclass(frozen=True)
class HparamSweep:
    """Notebook 05's parameters, lower-cased: every trial's fixed settings, how the sweep runs,
    what it is priced at and how its answer is read."""

    model: str | None  # every trial's model config (model.CONFIGS); None: REAL_TRIAL's
    steps: int | None  # training steps per trial; None: REAL_TRIAL's
    batch: int | None  # sequences per step; None: REAL_TRIAL's
    seq: int | None  # tokens per sequence; None: REAL_TRIAL's
    vocab_size: int | None = None  # the tokenizer's vocabulary; None: the model's own V
    seed: int = 0  # every trial's training seed (and random search's sampling seed)
    sweep_config: str | None = None  # a wandb sweep YAML; None: the package's copy
    arm: dict = dataclasses.field(default_factory=dict)  # architecture knobs over the config's
    use_wandb: bool = False  # create the sweep on wandb and run `wandb agent`
    count: int | None = None  # trials; None: the whole grid
    target: str = "v6e-1"  # the slice the real sweep is priced on
    real_trial: dict = dataclasses.field(default_factory=lambda: dict(REAL_TRIAL))
    price_kind: str = "spot"
    basin_tolerance: float = 0.02  # the basin: trials within this fraction of the best
    top_curves: int = 3  # loss curves of the best few trials

    @classmethod
    def local(cls) -> "HparamSweep":
        """The tiny stand-in (1.8M parameters) on a CPU: the whole grid in minutes."""
        return cls(model="tiny", steps=30, batch=8, seq=128, vocab_size=4096)

    @classmethod
    def field(cls) -> "HparamSweep":
        """A real trial (REAL_TRIAL: the 130m for 2000 steps of 32 x 2048 tokens, its own
        vocabulary): model, steps, batch and seq follow REAL_TRIAL as the user sets it."""
        return cls(model=None, steps=None, batch=None, seq=None)

    def resolved(self) -> "HparamSweep":
        """Model, steps, batch and seq left at None take the real trial's (report.setting calls
        this after the user's values are in, so they follow a REAL_TRIAL the user changed)."""
        trial = self.real_trial
        return dataclasses.replace(
            self, **{key: getattr(self, key) or trial[key] for key in REAL_TRIAL}
        )

    def __post_init__(self):
        check_training_run(
            self.model,
            steps=self.steps,
            batch=self.batch,
            seq=self.seq,
            vocab_size=self.vocab_size,
            count=self.count,
            basin_tolerance=self.basin_tolerance,
            top_curves=self.top_curves,
        )
        if not isinstance(self.arm, dict):
            raise BadInput(
                f"arm is a dict of architecture knobs, e.g. {{'mlp': 'relu2'}}; got {self.arm!r}"
            )
        if sorted(self.real_trial) != sorted(REAL_TRIAL):
            raise BadInput(
                f"real_trial needs exactly {', '.join(REAL_TRIAL)}; got {self.real_trial}"
            )
        choose("real trial's model config", self.real_trial["model"], model.CONFIGS)
        positive(**{f"real_trial_{k}": self.real_trial[k] for k in ("steps", "batch", "seq")})
        parse_target(self.target)
        choose("price kind", self.price_kind, prices.HOURLY_KINDS)

    def pinned(self) -> dict:
        """The sweep config's fixed values this setting pins: the model, the training run's
        shape (a tenth of the steps warm-up), the seed and the arm's knobs."""
        return {
            "config": self.model,
            "steps": self.steps,
            "warmup": max(1, self.steps // 10),
            "batch": self.batch,
            "seq": self.seq,
            "vocab-size": self.vocab_size or model.config(self.model).V,
            "seed": self.seed,
            **self.arm,
        }

    def load(self) -> dict:
        """The sweep config (SWEEP_CONFIG, else the package's copy of notebooks/05_sweep.yaml)
        with this setting's fixed values pinned."""
        source = self.sweep_config or sweep_config.NOTEBOOK_05
        return sweep_config.load_config(source, self.pinned())
