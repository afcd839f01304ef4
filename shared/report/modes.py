"""A notebook's MODE (local | plan | device) and the setting each mode runs with.

Every notebook starts the same way: its parameters cell, then

    from shared import report
    MODE = report.use_mode(MODE)        # before jax: plan mode compiles on the CPU
    setting = report.setting(MODE, RolloutSizing, MODEL=MODEL, BATCH_SIZES=BATCH_SIZES)

A notebook's setting is a frozen dataclass in its recipe's package with two presets, in the
style of tunix's `ModelConfig.gemma3_1b()`: `local()` (tiny, minutes on a CPU) and `field()`
(the real workload plan and device mode size). Parameters left at None keep the preset's value.
"""

import dataclasses
import os

from shared.errors import choose

MODES = ("local", "plan", "device")


def check_mode(mode: str) -> str:
    """MODE must be local | plan | device."""
    return choose("MODE", mode, MODES)


def use_mode(mode: str) -> str:
    """Check MODE and set the environment it needs; call it before the first `import jax`.

    Plan mode compiles for a TPU target with libtpu and needs no local accelerator, so JAX
    stays on the CPU. Outside device mode every TPU compile is deviceless, so another process's
    libtpu (a plan run, another notebook) holding /tmp/libtpu_lockfile must not block this one.
    Only defaults are set: an environment the user chose wins.
    """
    check_mode(mode)
    if mode == "plan":
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    if mode != "device":
        os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    return mode


def by_mode(mode: str, value, local, real):
    """A parameter left at None: the CPU-friendly `local` value in local mode, else the `real`
    one (plan and device mode size the real workload)."""
    return value if value is not None else (local if mode == "local" else real)


def setting(mode: str, preset, **parameters):
    """`preset.local()` in local mode, `preset.field()` in plan and device mode, with each
    parameter the user set (not None) in place of the preset's value. Parameters are named as
    in the notebook's parameters cell (upper case); the setting's fields are their lower-case
    names."""
    base = preset.local() if check_mode(mode) == "local" else preset.field()
    names = {field.name for field in dataclasses.fields(base)}
    unknown = sorted(k for k in parameters if k.lower() not in names)
    if unknown:
        raise TypeError(f"{type(base).__name__} has no field for {', '.join(unknown)}")
    given = {k.lower(): v for k, v in parameters.items() if v is not None}
    chosen = dataclasses.replace(base, **given)
    # A preset value that follows another parameter (04's model follows REAL_ARM) is None in
    # the preset and filled by the setting's `resolved()`, after the user's values are in.
    return chosen.resolved() if hasattr(chosen, "resolved") else chosen
