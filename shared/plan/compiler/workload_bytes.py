"""A whole workload's bytes from its executables' shapes and compiled summaries: the
arithmetic of a verdict, no compiling. Resident buffers count once; the worst executable's
transient bytes add to them; an arguments-only floor answers "does not fit" in milliseconds
when even that exceeds the HBM (shared.plan.verdict compiles the rest)."""

from __future__ import annotations

import jax

from shared.hardware.sharding import bytes_per_device
from shared.plan.compiler.compiled import no_bytes
from shared.plan.compiler.executable import Workload


def resident_bytes(workload: Workload) -> dict[str, int]:
    """Per-device bytes of every resident buffer, each counted once: those named by the
    executables' `resident_args`, and the workload's own `resident` list."""
    sizes: dict[str, int] = {}
    for exe in workload.executables:
        for index, name in exe.resident_args.items():
            sizes[name] = max(sizes.get(name, 0), bytes_per_device(exe.args[index]))
    for name, tree in workload.resident.items():
        sizes[name] = sizes.get(name, 0) + bytes_per_device(tree)
    return sizes


def combine(
    executables: dict[str, dict], resident: dict[str, int], takes: dict[str, list[str]]
) -> dict:
    """The whole-workload arithmetic: each executable's transient bytes (its non-resident
    arguments + outputs + temps - aliased) and the verdict bytes, resident + worst transient.
    `takes[label]` names the resident buffers that executable receives as arguments."""
    transient = {}
    for label, e in executables.items():
        held = sum(resident[name] for name in takes[label])
        if e["refused"]:  # libtpu's number is the whole program's need, resident args included
            transient[label] = max(0, e["total_bytes"] - held)
            continue
        transient[label] = (
            max(0, e["argument_bytes"] - held)
            + e["output_bytes"]
            + e["temp_bytes"]
            - e["alias_bytes"]
        )
    worst = max(transient, key=transient.get)
    total = sum(resident.values())
    return {
        "resident_bytes": total,
        "transient_bytes": transient,
        "worst": worst,
        "bytes_per_device": total + transient[worst],
    }


def exceeds(verdict: dict, executables: dict, usable: int) -> bool:
    """Whether a verdict cannot run: over the HBM, refused for it, or an executable the
    compiler failed on (compiled.compiler_failure: no program, so no run)."""
    return verdict["bytes_per_device"] > usable or any(
        e["refused"] or e.get("compiler_error") for e in executables.values()
    )


# An executable the exact compiler compiled without a refusal, though its own arguments +
# outputs + temps - aliased exceed the HBM the compiler allows (compiled_over)
COMPILED_OVER_NOTE = (
    "{labels}: compiled without a refusal, though its own bytes (arguments + outputs + temps "
    "- aliased, {gib:.2f} GiB) exceed the {usable:.2f} GiB the compiler allows; the verdict "
    "counts them, as every verdict does, and only a run on the chip says which count holds"
)


def compiled_over(executables: dict[str, dict], usable: int) -> dict[str, int]:
    """The executables the compiler compiled without refusing whose own bytes (each one's
    `total_bytes`, what it holds while it runs, before any resident buffer it does not take)
    exceed `usable`: label -> those bytes.

    Why: libtpu 0.0.42.1 refuses most such programs ("Used 94.79G of 94.75G hbm": gemma3-12b
    rollouts on a 1x8 tpu7x-8 under the tile flag at 987-994 rows), but compiled 986 and 864
    rows' prefill whole at 109.60 and 96.22 GiB, and gemma4-e4b's full fine-tune step at 80
    on an 8x1 tpu7x-8 at 96.25 GiB (2026-12-04, exact compiles). The verdict says "does not
    fit" by the rule every verdict keeps; where the compiler itself did not refuse, a reader
    should know that the two counts disagree there, and that only a run on a chip settles it."""
    return {
        label: e["total_bytes"]
        for label, e in executables.items()
        if not e["refused"] and not e.get("compiler_error") and e["total_bytes"] > usable
    }


def compiled_over_notes(executables: dict[str, dict], usable: int) -> list[str]:
    """The verdict's note on the executables of an exact compile that compiled_over finds
    (COMPILED_OVER_NOTE), or none."""
    over = compiled_over(executables, usable)
    if not over:
        return []
    gib = max(over.values()) / 2**30
    return [COMPILED_OVER_NOTE.format(labels=", ".join(over), gib=gib, usable=usable / 2**30)]


def weights_dtype(workload: Workload) -> str:
    """The dtype of the floating-point weights the workload holds ("bfloat16"), for the verdict."""
    dtypes = {
        str(x.dtype)
        for exe in workload.executables
        for index, name in exe.resident_args.items()
        if name == "weights"
        for x in jax.tree.leaves(exe.args[index])
        if "float" in str(x.dtype)
    }
    return "/".join(sorted(dtypes)) or "n/a"


NOT_COMPILED = (
    "not compiled: its arguments and the activations it must hold, exact from their shapes "
    "and shardings, exceed the HBM the compiler allows"
)


def arguments_only(workload: Workload) -> dict[str, dict]:
    """Each executable as if it needed nothing but its arguments (and the `floor_bytes` its
    workload knows it must also hold): a lower bound known without compiling. When even that
    does not fit (a batch of 10^8, a model bigger than the slice), the verdict is "does not
    fit" in milliseconds; the compiler could only add to it."""
    floor = {}
    for exe in workload.executables:
        # the arrays among the arguments (a graphdef, an optimizer or a flag holds no HBM);
        # an array without a sharding is whole on every device
        arrays = [x for x in jax.tree.leaves(exe.args) if hasattr(x, "shape")]
        args = bytes_per_device([x for x in arrays if getattr(x, "sharding", None) is not None])
        args += sum(
            x.size * x.dtype.itemsize for x in arrays if getattr(x, "sharding", None) is None
        )
        args += exe.floor_bytes
        floor[exe.label] = {
            **no_bytes(argument_bytes=args, total_bytes=args),
            "compile_s": 0.0,
            "repeats": exe.repeats,
            "note": NOT_COMPILED,
        }
    return floor


def takes_of(workload: Workload) -> dict[str, list[str]]:
    """The resident buffers each executable receives as arguments, by label."""
    return {exe.label: sorted(set(exe.resident_args.values())) for exe in workload.executables}
