"""Compiling one executable and reading what the compiler says: per-device bytes
(`memory_analysis()`), FLOPs and bytes accessed (`cost_analysis()`), the largest buffers
(shared.plan.compiler.buffers), and a refusal for lack of HBM kept as a data point."""

import re
import time
from typing import Any

from shared.hardware.measure import is_out_of_memory
from shared.plan.compiler import buffers
from shared.plan.compiler.executable import Executable, lower

# A fast compile (exec_time_optimization_effort -1) cuts XLA's compile time several-fold but
# schedules buffers differently, so its bytes differ from the real compile's, in either
# direction: a quick estimate that locates a boundary, never the verdict at it. Device mode
# compiles with the defaults, which `fast=False` reproduces exactly. jax 0.10 hands it to every
# backend's compiler as a build option; later jax has no such knob (optimization_level took its
# place), passes it on as an XLA flag, and XLA refuses it: "No such compile option:
# 'exec_time_optimization_effort'" on an H100 with jax 0.11.2. There a fast compile is an exact
# one (takes_effort).
FAST_COMPILE = {"exec_time_optimization_effort": -1.0}
# On a tpu7x, XLA:TPU hands a multi-chip program's collectives to the SparseCores, and compiling
# those SparseCore programs is most of the compile: gemma3-1b's LoRA step on a tpu7x-8 (batch 8,
# sequence 2048) spent 134 of its 153 s of backend passes on 784 SparseCore computations. Without
# the offload its fast compile took 50 s instead of 198 s, with temporaries of 3.22 GiB instead
# of 3.27 (benchmarks/results/plan_sparsecore.json). A fast TPU compile leaves it out; the exact
# one keeps it, as device mode runs (4.28 GiB of temporaries with it, 3.42 without). The chips
# without the offload (v5e, v6e, v5p in libtpu 0.0.42.1) compile the same bytes with these flags
# as without. Only XLA:TPU knows them: a CPU or GPU compile refuses an unknown option
# (INVALID_ARGUMENT), as libtpu would a renamed one, so the tests' fast compiles check the names.
NO_SPARSECORE_COLLECTIVES = {
    f"xla_tpu_enable_sparse_core_collective_offload_{collective}": False
    for collective in (
        "all_gather",
        "2d_all_gather",
        "3d_all_gather",
        "reduce_scatter",
        "nd_reduce_scatter",
        "all_reduce",
    )
}


def takes_effort() -> bool:
    """Whether this jax has XLA's exec_time_optimization_effort (FAST_COMPILE): its config
    flag and the build option go together."""
    import jax

    return hasattr(jax.config, "jax_exec_time_optimization_effort")


def fast_options(platform: str, effort: bool = True) -> dict:
    """A fast compile's options for the devices' platform ("tpu", "cpu", "gpu"), those this
    jax takes (takes_effort). `effort=False` leaves the effort at XLA's default, for a program
    a lower effort crashes: libtpu 0.0.42.1 aborts the process (CHECK failure in
    rotated_pincer_emitter_base.cc:676) on qwen3-30b-a3b's megablox step at any negative effort
    (-1 and -0.5, a LoRA step cut to 2 layers on a v5e-8), which it compiles at the default."""
    effort = FAST_COMPILE if effort and takes_effort() else {}
    return {**effort, **(NO_SPARSECORE_COLLECTIVES if platform == "tpu" else {})}


# XLA's memory-usage report (written with xla_dump_to once buffer assignment has fixed the
# bytes): a "Total bytes" line per memory space, the HBM's (space 0) first, on-chip vmem and smem
# after it
_REPORT_HBM_TOTAL = re.compile(r"Memory Space: default \(color=0\)\s+Total bytes: (\d+)")


def report_hbm_bytes(report: str) -> int | None:
    """The HBM's total bytes in the text of XLA's memory-usage report; None where the report
    names no HBM space (not written whole yet)."""
    total = _REPORT_HBM_TOTAL.search(report)
    return int(total[1]) if total else None


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
    """Lower and compile one executable that takes no other's outputs: see compile_lowered."""
    return compile_lowered(lower(exe, {}), options)


def compile_lowered(lowered, options: dict | None = None) -> dict:
    """Compile a lowered function; its bytes (compiled_memory), FLOPs (compiled_cost), its
    largest per-device buffers (shared.plan.compiler.buffers) and compile seconds. A compiler that
    refuses for lack of HBM is a data point (`refusal`), and so is one that fails inside itself
    (`compiler_failure`); any other error propagates. Thread-safe: XLA compiles outside the GIL."""
    return compile_with_layout(lowered, options)[0]


def compile_with_layout(lowered, options: dict | None = None) -> tuple[dict, Any]:
    """compile_lowered's summary and the compiled output shardings (None where the compiler
    refused): an executable that takes these outputs is lowered with them (executable.lower)."""
    start = time.perf_counter()
    try:
        compiled = lowered.compile(options)
        text = compiled.as_text()
        summary = {
            **compiled_memory(compiled),
            **compiled_cost(compiled),
            "largest_buffers": buffers.largest(text),
            "kernels": buffers.kernels(text),
            "refused": None,
            "compiler_error": None,
            "compiler_hbm_bytes": None,
        }
        layout = compiled.output_shardings
    except Exception as err:  # the TPU compiler refuses programs that cannot fit
        summary = compiler_failure(err) if is_compiler_failure(err) else refusal(err)
        layout = None
    return {**summary, "compile_s": time.perf_counter() - start}, layout


_SIZE = r"([0-9.]+)([KMGT])"


# The two ways libtpu words a refusal (sizes in binary units):
_OVER_TEMPS = re.compile(rf"required for [^(]*\({_SIZE}\) exceeds available HBM \({_SIZE}\)")


_OVER_USED = re.compile(rf"Used {_SIZE} of {_SIZE} hbm\. Exceeded hbm capacity by {_SIZE}")


def _bytes(number: str, unit: str) -> int:
    return int(float(number) * 1024 ** ("KMGT".index(unit) + 1))


def no_bytes(**why: str | int | None) -> dict:
    """An executable's summary where the compiler compiled nothing (it refused, it failed, or
    arithmetic answered first: workload_bytes.arguments_only): no bytes, no FLOPs, but `why`."""
    return {
        "argument_bytes": 0,
        "output_bytes": 0,
        "temp_bytes": 0,
        "alias_bytes": 0,
        "generated_code_bytes": 0,
        "total_bytes": 0,
        "flops": 0.0,
        "bytes_accessed": 0.0,
        "largest_buffers": [],
        "refused": None,
        "compiler_error": None,
        "compiler_hbm_bytes": None,
        **why,
    }


def is_compiler_failure(err: Exception) -> bool:
    """True where the compiler failed inside itself (XLA's INTERNAL status: a RET_CHECK, an
    emitter it lacks), not for lack of HBM and not for what it was asked (an unknown option is
    INVALID_ARGUMENT, and propagates: the tests' fast compiles check the options' names)."""
    return str(err).lstrip().startswith("INTERNAL:") and not is_out_of_memory(err)


def compiler_failure(err: Exception) -> dict:
    """An executable the compiler failed on, kept as a data point: no bytes, its message.

    Why a data point: the failure is the compiler's and depends on the program, so on the
    batch; a search goes on below it (shared.plan.search.max_batch), and the atlas says where it
    failed rather than losing the cell. GRPO of gemma3-1b on a tpu7x-8 (libtpu 0.0.42.1): the
    policy update's exact compile at batch 208 on 8x1 raised "INTERNAL: RET_CHECK failure
    (platforms/xla/sparse_core/gather_emitter.cc:5360) num_indices_per_output == 1", where at
    batch 8 it compiled and fit (5.60 of 94.75 GiB)."""
    # its first paragraph: what follows ("Suspected Python Code Location: /path/...") is this
    # machine's paths and the traceback
    first = re.split(r"\n\s*\n", str(err).strip())[0]
    return no_bytes(compiler_error=" ".join(first.split())[:300])


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
    return no_bytes(
        temp_bytes=needed,
        total_bytes=needed,
        refused=message[:300],
        compiler_hbm_bytes=available or None,
    )


def compiled_cost(compiled) -> dict[str, float]:
    """XLA's FLOPs and bytes accessed for one call of a compiled executable (per device);
    none from a deviceless CUDA compile, whose cost_analysis() is None (the verdict's roofline
    then takes the matmul bound and the weights' bytes: shared.plan.verdict)."""
    cost = compiled.cost_analysis()
    if isinstance(cost, list):  # older jax returned one dict per partition
        cost = cost[0] if cost else {}
    cost = cost or {}
    return {
        "flops": float(cost.get("flops", 0.0)),
        "bytes_accessed": float(cost.get("bytes accessed", 0.0)),
    }
