"""Notebook 06's setting: the training run it plans and the compiles that check the plan.

`ScalingPlan.field()` is the scaling book's applied-training example (LLaMA-3 70B, 15T tokens,
4M-token batches, a full v5p pod at 40% MFU) with the layer probe on the real 70B layers;
`ScalingPlan.local()` is the same closed-form plan with the probe on a tiny LLaMA, minutes on a
CPU. A notebook builds it with `report.setting(MODE, ScalingPlan, MODEL=MODEL, ...)`.
"""

import dataclasses

from shared import hardware, sizing
from shared.errors import BadInput, positive
from shared.hardware import Chip


@dataclasses.dataclass(frozen=True)
class ScalingPlan:
    """What notebook 06 plans (the closed-form maths) and probes (the compiler, section 3)."""

    model: str = "llama3-70b"  # the closed-form maths: any shared.sizing preset
    hardware: str = "v5p"  # chip for the time, cost and mesh maths
    chips: int = 8960  # a full v5p pod, 16x20x28
    tokens: float = 15e12
    batch_tokens: int = 4194304  # 2**22 tokens a step; the book's memory table rounds it to 4e6
    mfu: float = 0.4  # the book's assumption for this example
    book_hbm: float = 96e9  # bytes a v5p chip holds in the book's arithmetic
    target: str = "v5p-8"  # the slice the layer probe and the sharded init compile for
    probe_model: str = "llama3.1-70b"  # a tunix model (shared.models) cut to 1 and 2 layers
    probe_seq: int = 2048
    probe_batches: tuple[int, int] = (4, 8)  # two growing global batches of sequences
    probe_remats: tuple[str, ...] = ("none", "decoder")  # tunix remat policies
    embed_v: int = 262144  # the sharded-init table: a Gemma 3 vocabulary ...
    embed_d: int = 1152  # ... at gemma3-1b's width, fp32

    @classmethod
    def local(cls) -> "ScalingPlan":
        """The same plan; the probe on a tiny LLaMA at 256 tokens (seconds a compile)."""
        return cls(probe_model="llama3-tiny", probe_seq=256, probe_batches=(8, 16))

    @classmethod
    def field(cls) -> "ScalingPlan":
        """The book's example; the probe on tunix's LLaMA-3.1 70B at 2,048 tokens (1-2
        minutes a compile on 2 idle cores, 4 compiles a remat policy)."""
        return cls()

    def __post_init__(self):
        # Papermill hands lists; a frozen setting keeps tuples.
        object.__setattr__(self, "probe_batches", tuple(self.probe_batches))
        object.__setattr__(self, "probe_remats", tuple(self.probe_remats))
        sizing.preset(self.model)  # BadInput naming the presets
        hardware.chip(self.hardware)  # BadInput naming the chips
        hardware.parse_target(self.target)
        positive(
            CHIPS=self.chips,
            TOKENS=self.tokens,
            BATCH_TOKENS=self.batch_tokens,
            BOOK_HBM=self.book_hbm,
            PROBE_SEQ=self.probe_seq,
            EMBED_V=self.embed_v,
            EMBED_D=self.embed_d,
        )
        if not 0 < self.mfu <= 1:
            raise BadInput(f"MFU is a fraction of peak in (0, 1], e.g. 0.4; got {self.mfu}")
        batches = self.probe_batches
        if len(batches) != 2 or not 0 < batches[0] < batches[1]:
            raise BadInput(
                f"PROBE_BATCHES must be two growing global batches, e.g. [4, 8]; "
                f"got {list(batches)}"
            )
        if not self.probe_remats:
            raise BadInput("PROBE_REMATS needs at least one tunix remat policy, e.g. ['none']")

    @property
    def dims(self) -> sizing.ModelDims:
        return sizing.preset(self.model)

    @property
    def chip(self) -> Chip:
        return hardware.chip(self.hardware)
