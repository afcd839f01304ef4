"""The settings notebook 03's two halves run with, one frozen dataclass each.

Each has two presets, in the style of tunix's `ModelConfig.gemma3_1b()`: `local()`, what a CPU
runs in minutes, and `field()`, the real sizes plan and device mode use. A notebook builds its
setting with `report.setting(MODE, ExactnessCheck, K=K, ...)`: a parameter left at None keeps
the preset's value, and a bad value fails here with one line, before any compile.
"""

import dataclasses
import numbers
from collections.abc import Sequence

from shared.errors import BadInput, choose
from shared.hardware.prices import HOURLY_KINDS
from shared.models import MODEL_NAMES, WEIGHTS


def _positive_ints(message: str, *values) -> None:
    """BadInput(`message`) unless every value is a positive integer (a bool is not one)."""
    for value in values:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise BadInput(message)


def _sized(value: Sequence[int], message: str, length: int | None = None) -> tuple[int, ...]:
    """`value` as a tuple of positive integers (`length` of them, if given), else
    BadInput(`message`)."""
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise BadInput(message)
    if length is not None and len(value) != length:
        raise BadInput(message)
    _positive_ints(message, *value)
    return tuple(value)


@dataclasses.dataclass(frozen=True)
class ExactnessCheck:
    """Notebook 03_sparse_logits_exactness: are the chunked results exact, what do they cost?

    `exact_shape` [B, T, D, V] and `exact_chunks` [chunk_size, vocab_chunk_size] size the check
    on random hidden states (the benchmark's, with blocks that divide neither T nor V);
    `model_shape` [B, T] the tokens of the check on `model`'s own hidden states; `time_shape`
    [B, T, D, V] the timed calls, `rounds` round-robin rounds of them after the warm-up.
    """

    model: str
    model_shape: tuple[int, int]
    time_shape: tuple[int, int, int, int]
    weights: str = "dummy"
    k: int = 128
    exact_shape: tuple[int, int, int, int] = (2, 100, 64, 5000)
    exact_chunks: tuple[int, int] = (24, 1000)
    softcap: float = 30.0
    rounds: int = 3
    price_kind: str = "on-demand"

    @classmethod
    def local(cls) -> "ExactnessCheck":
        """A tiny Gemma 3 and the benchmark's timing size: minutes on a CPU."""
        return cls(model="gemma3-tiny", model_shape=(2, 64), time_shape=(8, 128, 1152, 65536))

    @classmethod
    def field(cls) -> "ExactnessCheck":
        """gemma3-1b, and timed calls of its real head: T = 1024, D = 1152, V = 262,144."""
        return cls(model="gemma3-1b", model_shape=(2, 512), time_shape=(8, 1024, 1152, 262144))

    def __post_init__(self):
        choose("model", self.model, MODEL_NAMES)
        choose("weights", self.weights, WEIGHTS)
        choose("price kind", self.price_kind, HOURLY_KINDS)
        sizes = (
            "sizes must be positive integers: EXACT_SHAPE and TIME_SHAPE [B, T, D, V], "
            "EXACT_CHUNKS [chunk_size, vocab_chunk_size], MODEL_SHAPE [B, T]"
        )
        for name, length in (
            ("exact_shape", 4),
            ("exact_chunks", 2),
            ("model_shape", 2),
            ("time_shape", 4),
        ):
            object.__setattr__(self, name, _sized(getattr(self, name), sizes, length))
        _positive_ints(
            f"K={self.k!r} and ROUNDS={self.rounds!r} must be positive integers",
            self.k,
            self.rounds,
        )
        cap = self.softcap
        if isinstance(cap, bool) or not isinstance(cap, numbers.Real) or not cap > 0:
            raise BadInput(f"SOFTCAP={self.softcap!r} must be a positive number, e.g. 30.0")
        if self.k > min(self.exact_shape[3], self.exact_chunks[1], self.time_shape[3]):
            raise BadInput(
                f"K={self.k} must not exceed any vocabulary (EXACT_SHAPE, TIME_SHAPE) or "
                "EXACT_CHUNKS[1]"
            )

    def exactness_params(self) -> dict:
        """The random-state check's sizes as the benchmark records them (03_logits_cpu.json's
        exactness.params): equal ones mean this run repeated the committed check."""
        B, T, D, V = self.exact_shape
        chunk_size, vocab_chunk_size = self.exact_chunks
        return {
            "B": B,
            "T": T,
            "D": D,
            "V": V,
            "k": self.k,
            "chunk_size": chunk_size,
            "vocab_chunk_size": vocab_chunk_size,
            "softcap": self.softcap,
        }

    def time_params(self) -> dict:
        """The timed calls' sizes as the benchmark records them (03_logits_cpu.json's
        time_shape)."""
        B, T, D, V = self.time_shape
        return {"B": B, "T": T, "D": D, "V": V, "k": self.k}


@dataclasses.dataclass(frozen=True)
class FitSearch:
    """Notebook 03_sparse_logits_fit: what top-k logits and the loss cost in HBM.

    Section 1 compiles the four programs at `mem_batches` of [`seq`, D, V]; section 2 plans
    `model`'s whole teacher-forced pass (`max_batch`: search its largest batch, `plan_batches`:
    one verdict each) and prices `score_sequences` at `price_kind`; section 3 (device mode)
    measures `device_batches`, `trials` timed calls each, with the plan's verdict beside each
    point when `predict`.
    """

    model: str = "gemma3-1b"
    k: int = 128
    seq: int = 1024
    mem_batches: tuple[int, ...] = (1, 4, 8, 32)
    max_batch: bool | None = None
    plan_batches: tuple[int, ...] = ()
    score_sequences: int = 100_000
    price_kind: str = "on-demand"
    device_batches: tuple[int, ...] = (1, 4, 16, 64, 256)
    trials: int = 3
    predict: bool = True

    @classmethod
    def local(cls) -> "FitSearch":
        """The real sizes: section 1 only compiles (nothing is allocated, so gemma3-1b's real
        [V, D] works on a laptop), and section 2 draws the committed search instead of running
        one (tens of minutes of compiles)."""
        return cls(max_batch=False)

    @classmethod
    def field(cls) -> "FitSearch":
        """The real sizes; `max_batch` None: plan mode searches, device mode measures."""
        return cls()

    def __post_init__(self):
        choose("model", self.model, MODEL_NAMES)
        choose("price kind", self.price_kind, HOURLY_KINDS)
        sizes = "K, SEQ, SCORE_SEQUENCES, TRIALS and the batches must be positive integers"
        for name in ("mem_batches", "plan_batches", "device_batches"):
            object.__setattr__(self, name, _sized(getattr(self, name), sizes))
        _positive_ints(sizes, self.k, self.seq, self.score_sequences, self.trials)
        if self.max_batch not in (None, True, False):
            raise BadInput(f"MAX_BATCH={self.max_batch!r} must be True, False or None")

    def memory_shape(self, D: int, V: int, *, batch: int) -> dict:
        """Section 1's programs at `batch` for a model of width D and vocabulary V, as the
        benchmark records them (03_logits_cpu.json's memory_shape, at B = 8): equal ones mean
        this run compiled the committed programs."""
        return {"B": batch, "T": self.seq, "D": D, "V": V, "k": self.k, "dtype": "bfloat16"}

    def searches(self, mode: str) -> bool:
        """Whether section 2 searches the largest batch: `max_batch`, or where that is None,
        in plan mode only (device mode measures instead; each search is ~15 compiles)."""
        return self.max_batch if self.max_batch is not None else mode == "plan"
