"""Measuring on the device: wall time after warm-up, HBM per device, compiled memory, OOM.

Device work is asynchronous, so every timing blocks on the result; the first call (compile
plus run) is reported apart from the timed trials. `memory_stats()` is None on CPU and its
peak is a process-wide high-water mark, so callers measure points in increasing order or in
a fresh process.
"""

import collections
import gc
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import jax

from shared import compiled_buffers


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


@dataclass
class Workload:
    """What a real run holds: executables run one after another, and resident buffers alive for
    the whole run. Resident buffers are named by the executables' `resident_args` and, when no
    executable takes them as an argument (a second copy of the weights, a batch the caller
    keeps), listed in `resident` as abstract arrays carrying their shardings."""

    executables: list[Executable]
    resident: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass
class Timing:
    """Seconds for the first call (compile + run) and for each timed trial after warm-up."""

    first_call_s: float
    trials_s: list[float] = field(default_factory=list)

    @property
    def median_s(self) -> float:
        return statistics.median(self.trials_s)

    def as_dict(self) -> dict:
        return {**asdict(self), "median_s": self.median_s}


def time_fn(
    fn: Callable, *args, warmup: int = 1, trials: int = 3, **kwargs
) -> tuple[object, Timing]:
    """Call fn once (compile + run), `warmup` more times untimed, then `trials` timed calls.

    Returns the last result and the timings. Every call blocks until its outputs are ready.
    """
    start = time.perf_counter()
    result = jax.block_until_ready(fn(*args, **kwargs))
    timing = Timing(first_call_s=time.perf_counter() - start)
    for _ in range(warmup):
        result = jax.block_until_ready(fn(*args, **kwargs))
    for _ in range(trials):
        start = time.perf_counter()
        result = jax.block_until_ready(fn(*args, **kwargs))
        timing.trials_s.append(time.perf_counter() - start)
    return result, timing


def device_memory() -> list[dict] | None:
    """Bytes in use, peak and limit per local device; None where the backend has no stats (CPU).

    Only local devices: on a multi-host slice each host reports its own chips.
    """
    stats = [d.memory_stats() for d in jax.local_devices()]
    if any(s is None for s in stats):
        return None
    return [
        {
            "device": str(d),
            "bytes_in_use": s.get("bytes_in_use"),
            "peak_bytes_in_use": s.get("peak_bytes_in_use"),
            "bytes_limit": s.get("bytes_limit"),
        }
        for d, s in zip(jax.local_devices(), stats, strict=True)
    ]


def peak_bytes_per_device() -> int | None:
    """The largest per-device peak HBM so far in this process, or None on CPU."""
    stats = device_memory()
    if stats is None:
        return None
    return max(s["peak_bytes_in_use"] or 0 for s in stats)


def live_bytes_per_device() -> int:
    """Bytes of live jax arrays on the fullest local device, after a garbage collection.

    Works on every backend (on CPU `memory_stats()` is None), so a CPU run can show what a
    transformation such as applying LoRA adds or shares."""
    gc.collect()  # unreachable arrays first
    per_device = collections.Counter()
    for shard in (s for x in jax.live_arrays() for s in x.addressable_shards):
        per_device[shard.device] += shard.data.nbytes
    return max(per_device.values(), default=0)


def compiled_memory(compiled) -> dict[str, int]:
    """Per-device bytes of a compiled executable: arguments + outputs + temps − aliased.

    Aliased bytes are outputs written in place of donated arguments, counted once.
    """
    stats = compiled.memory_analysis()
    summary = {
        "argument_bytes": int(stats.argument_size_in_bytes),
        "output_bytes": int(stats.output_size_in_bytes),
        "temp_bytes": int(stats.temp_size_in_bytes),
        "alias_bytes": int(stats.alias_size_in_bytes),
        "generated_code_bytes": int(stats.generated_code_size_in_bytes),
    }
    summary["total_bytes"] = (
        summary["argument_bytes"]
        + summary["output_bytes"]
        + summary["temp_bytes"]
        - summary["alias_bytes"]
    )
    return summary


def compile_executable(exe: Executable, options: dict | None = None) -> dict:
    """Lower and compile one executable: see compile_lowered."""
    return compile_lowered(exe.fn.lower(*exe.args, **exe.kwargs), options)


def compile_lowered(lowered, options: dict | None = None) -> dict:
    """Compile a lowered function; its bytes (compiled_memory), FLOPs (compiled_cost), its
    largest per-device buffers (shared.compiled_buffers) and compile seconds. A compiler that
    refuses for lack of HBM is a data point (`refusal`), any other error propagates.
    Thread-safe: XLA compiles outside the GIL."""
    start = time.perf_counter()
    try:
        compiled = lowered.compile(options)
        summary = {
            **compiled_memory(compiled),
            **compiled_cost(compiled),
            "largest_buffers": compiled_buffers.largest(compiled.as_text()),
            "refused": None,
            "compiler_hbm_bytes": None,
        }
    except Exception as err:  # the TPU compiler refuses programs that cannot fit
        summary = refusal(err)
    return {**summary, "compile_s": time.perf_counter() - start}


_SIZE = r"([0-9.]+)([KMGT])"
# The two ways libtpu words a refusal (sizes in binary units):
_OVER_TEMPS = re.compile(rf"required for [^(]*\({_SIZE}\) exceeds available HBM \({_SIZE}\)")
_OVER_USED = re.compile(rf"Used {_SIZE} of {_SIZE} hbm\. Exceeded hbm capacity by {_SIZE}")


def _bytes(number: str, unit: str) -> int:
    return int(float(number) * 1024 ** ("KMGT".index(unit) + 1))


def refusal(err: Exception) -> dict:
    """An executable the TPU compiler refused for lack of HBM, kept as a data point.

    libtpu names what it needed and what it has ("HLO temporaries (15.78G) exceeds available
    HBM (15.75G)", or "Used 15.75G of 15.75G hbm. Exceeded hbm capacity by 5.19M"): the needed
    bytes stand in for the total (a lower bound) and the available bytes are the chip's usable
    HBM, a little under the datasheet's (15.75 of 16 GiB on v5e).
    """
    if not is_out_of_memory(err):
        raise err
    message = str(err).strip().splitlines()[0]
    needed = available = 0
    if match := _OVER_TEMPS.search(message):
        needed, available = _bytes(*match.group(1, 2)), _bytes(*match.group(3, 4))
    elif match := _OVER_USED.search(message):
        available = _bytes(*match.group(3, 4))
        needed = _bytes(*match.group(1, 2)) + _bytes(*match.group(5, 6))
    return {
        "argument_bytes": 0,
        "output_bytes": 0,
        "temp_bytes": needed,
        "alias_bytes": 0,
        "generated_code_bytes": 0,
        "total_bytes": needed,
        "flops": 0.0,
        "bytes_accessed": 0.0,
        "largest_buffers": [],
        "refused": message[:300],
        "compiler_hbm_bytes": available or None,
    }


def compiled_cost(compiled) -> dict[str, float]:
    """XLA's FLOPs and bytes accessed for one call of a compiled executable (per device)."""
    cost = compiled.cost_analysis()
    if isinstance(cost, list):  # older jax returned one dict per partition
        cost = cost[0] if cost else {}
    return {
        "flops": float(cost.get("flops", 0.0)),
        "bytes_accessed": float(cost.get("bytes accessed", 0.0)),
    }


def is_out_of_memory(err: BaseException) -> bool:
    """True for the runtime's out-of-memory errors (RESOURCE_EXHAUSTED on TPU and GPU)."""
    text = str(err)
    return "RESOURCE_EXHAUSTED" in text or "Out of memory" in text or "out of memory" in text


def run_or_oom(fn: Callable, *args, **kwargs) -> tuple[object | None, str | None]:
    """Run fn; an out-of-memory error becomes (None, first line of its message), a data point.

    Any other error propagates: only running out of memory is an expected outcome of a sweep.
    """
    try:
        return fn(*args, **kwargs), None
    except Exception as err:  # jax raises JaxRuntimeError; keep the check on the message
        if not is_out_of_memory(err):
            raise
        return None, str(err).strip().splitlines()[0][:300]


def matmul_peak_flops(n: int = 2048, dtype=None, trials: int = 3) -> float:
    """Measured FLOP/s of one large square matmul on the default device.

    CPUs have no datasheet bf16 peak that means anything for XLA, so on CPU we report MFU
    against this measured number instead, and label it so. float32 by default: XLA's CPU
    matmul runs bf16 by converting to float32.
    """
    import jax.numpy as jnp

    dtype = dtype or jnp.float32
    a = jnp.ones((n, n), dtype) / n
    _, timing = time_fn(jax.jit(lambda x: x @ x), a, warmup=1, trials=trials)
    return 2 * n**3 / min(timing.trials_s)
