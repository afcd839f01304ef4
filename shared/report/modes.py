"""A notebook's MODE (local | plan | device) and the parameter values each mode runs with.

Every notebook starts the same way: its parameters cell, then

    from shared import report
    MODE = report.use_mode(MODE)        # before jax: plan mode compiles on the CPU
    BATCH = report.by_mode(MODE, BATCH, local=[1, 4], real=[64, 128])
"""

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
