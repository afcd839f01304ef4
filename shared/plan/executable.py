"""What plan mode compiles: an `Executable` (a jitted function and the abstract arguments device
mode would call it with) and a `Workload` (the executables of one run and what it keeps
resident). Each file of shared.plan.workloads builds one Workload."""

import contextvars
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# Set while a floor verdict builds a workload (shared.plan.verdict.floor_verdict), which compiles
# nothing: a workload that learns an argument layout from a compile (GRPO's decode takes
# prefill's compiled output layout) splits those arguments as far as the mesh allows instead, so
# their bytes can only be smaller and the floor stays a floor. GRPO's floor took 22 s a slice
# with the compile, 13 of the 22 minutes a --cheapest search of gemma3-4b GRPO spent.
LAYOUT_WITHOUT_COMPILING = contextvars.ContextVar("layout_without_compiling", default=False)


@dataclass
class Executable:
    """One jitted function and the abstract arguments device mode would call it with.

    Plan mode lowers and compiles exactly this (`fn.lower(*args, **kwargs)`), so what it reads
    is what the device would run. `resident_args` names the positional arguments that are
    buffers the whole run keeps alive (weights shared by several executables, optimizer state):
    a workload counts those once, not once per executable.
    """

    label: str
    fn: Callable  # the jax.jit object itself, not a re-implementation
    args: tuple
    kwargs: dict = field(default_factory=dict)
    repeats: int = 1  # how many times one workload run calls it (decode steps, for the roofline)
    note: str = ""
    resident_args: dict[int, str] = field(default_factory=dict)  # arg index -> resident name
    # Bytes per device the program must hold beyond its arguments, known from arithmetic (a
    # training step's residual stream): with the arguments, a floor that can answer "does not
    # fit" without compiling. 0 when nothing is known.
    floor_bytes: int = 0
    # Passes over the weights (resident args named "weights" or "adapters") that one call
    # makes beyond the one XLA's cost analysis counts: a step of M micro-batches runs its scan
    # body M times, and XLA counts the body once, so M - 1 (see verdict.ON_CHIP_BYTES).
    weight_passes: int = 0
    # The executable that holds the most in this workload's verdicts so far (GRPO's update, with
    # its [B, T, V] logits, in every stored GRPO verdict): compiled in the first round, so a
    # batch that does not fit stops there and skips the rest (verdict._Compiling).
    likely_worst: bool = False


@dataclass
class Workload:
    """What a real run holds: executables run one after another, and resident buffers alive for
    the whole run. Resident buffers are named by the executables' `resident_args` and, when no
    executable takes them as an argument (a second copy of the weights, a batch the caller
    keeps), listed in `resident` as abstract arrays carrying their shardings."""

    executables: list[Executable]
    resident: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
