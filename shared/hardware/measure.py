"""Measuring on the device: wall time after warm-up, HBM per device, out-of-memory as data.

Device work is asynchronous, so every timing blocks on the result; the first call (compile
plus run) is reported apart from the timed trials. `memory_stats()` is None on CPU and its
peak is a process-wide high-water mark, so callers measure points in increasing order or in
a fresh process.
"""

import collections
import gc
import json
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import jax


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


# XLA's GPU autotuner times candidate kernels on the device while it compiles, with scratch
# buffers as large as a fusion's output (and, at its default level, a reference copy to check
# results): compiling gemma3-1b's prefill at batch 128 (logits [128, 256, 262144] bf16, 17 GB)
# on an H200 raised the process's peak to 38.9 GB, while the run itself peaked at 21.0 GB and
# the plan predicted 21.03 (benchmarks/results/rollout_h200_autotune_default.json,
# rollout_h200_autotune_off.json, plan_rollout_h200.json). A process with the
# autotuner off allocates no such scratch: its peak is the program's own, though its kernels
# are the untuned ones (decode 7.7x slower there), so it measures bytes, never time.
NO_AUTOTUNING = "--xla_gpu_autotune_level=0"


def without_autotuning(env: dict) -> dict:
    """`env` for a child process whose GPU compiles allocate no autotuning scratch (see
    NO_AUTOTUNING): XLA reads XLA_FLAGS once, when the backend starts."""
    return {**env, "XLA_FLAGS": f"{env.get('XLA_FLAGS', '')} {NO_AUTOTUNING}".strip()}


def peak_includes_compiling() -> bool:
    """Whether this process's peak can include compile-time scratch: on a GPU with XLA's
    autotuner on (see NO_AUTOTUNING). TPU and CPU compiles allocate nothing on the device."""
    return jax.default_backend() == "gpu" and NO_AUTOTUNING not in os.environ.get("XLA_FLAGS", "")


def peak_bytes_per_device() -> int | None:
    """The largest per-device peak HBM so far in this process, or None on CPU. On a GPU it
    includes the autotuner's scratch of every compile so far (`peak_includes_compiling`)."""
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


def is_out_of_memory(err: BaseException) -> bool:
    """True for the runtime's out-of-memory errors (RESOURCE_EXHAUSTED on TPU and GPU)."""
    text = str(err)
    return "RESOURCE_EXHAUSTED" in text or "Out of memory" in text or "out of memory" in text


def json_from_child(argv: list[str], env: dict | None = None) -> tuple[dict | None, dict | None]:
    """Run `argv` with `--out FILE` appended in a fresh process (its environment `env`, by
    default this one's: `without_autotuning` for a peak without compile scratch) and read the
    JSON it wrote there: (that dict, None). A child that exits non-zero or writes nothing is
    (None, a failed row): its status ("oom" where its output says it ran out of memory, else
    "error") and "exit N: " with the last three lines it printed."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "child.json"
        done = subprocess.run([*argv, "--out", str(out)], capture_output=True, text=True, env=env)
        if done.returncode == 0 and out.exists():
            return json.loads(out.read_text()), None
    text = (done.stderr or done.stdout).strip()
    tail = " | ".join(text.splitlines()[-3:])
    status = "oom" if is_out_of_memory(RuntimeError(text)) else "error"
    return None, {"status": status, "error": f"exit {done.returncode}: {tail[:300]}"}


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
