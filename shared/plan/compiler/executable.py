"""What plan mode compiles: an `Executable` (a jitted function and the abstract arguments device
mode would call it with) and a `Workload` (the executables of one run and what it keeps
resident). Each file of shared.plan.workloads builds one Workload."""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


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
    # An executable that takes another's outputs takes them as that one's compile lays them
    # out (GRPO's decode: the KV cache as the compiled prefill splits it). `laid_out_by` names
    # the other; `lay_out(output_shardings)` gives the arguments for its compiled layout
    # (executable.lower). Until then `args` splits those outputs as far as the mesh allows:
    # the fewest bytes a device, so a floor built without compiling stays a floor.
    laid_out_by: str = ""
    lay_out: Callable[[Any], tuple] | None = None


@dataclass
class Workload:
    """What a real run holds: executables run one after another, and resident buffers alive for
    the whole run. Resident buffers are named by the executables' `resident_args` and, when no
    executable takes them as an argument (a second copy of the weights, a batch the caller
    keeps), listed in `resident` as abstract arrays carrying their shardings."""

    executables: list[Executable]
    resident: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def lower(exe: Executable, layouts: dict[str, Any]):
    """`exe` lowered; one `laid_out_by` another with the arguments that one's compiled output
    layout gives (`layouts`: label -> output shardings of the executables compiled so far)."""
    if not exe.laid_out_by:
        return exe.fn.lower(*exe.args, **exe.kwargs)
    if exe.laid_out_by not in layouts:
        raise ValueError(
            f"{exe.label} takes the outputs of {exe.laid_out_by}, which has not compiled (it was "
            "refused, or comes later)"
        )
    return exe.fn.lower(*exe.lay_out(layouts[exe.laid_out_by]), **exe.kwargs)
