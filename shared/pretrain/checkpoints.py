"""Checkpoints of a training run (orbax), and resuming past one that cannot be read.

A checkpoint holds the parameters and optimizer state (orbax's standard format) and a JSON
record of the step, the data position and a fingerprint of the run's settings. Writes are
synchronous and orbax commits a step only when it is complete, so a run killed while saving
resumes from the previous checkpoint.

A committed step can still be unreadable later: a disk that filled up, files truncated or
deleted by hand, a copy cut short. `resume` then walks back from the newest step to the newest
one that restores, says so in one line on stderr, and continues from there (batch i is a pure
function of (seed, i), so the resumed run still matches an uninterrupted one to the last bit);
with none left it starts fresh. An unreadable step is never deleted. It is renamed aside to
`<step>.corrupt` (`<step>.corrupt-2`, ... when that exists): orbax does not read that name as a
step, so the run's next save of the same step writes a new folder instead of colliding with the
old one (or being skipped as already saved), and orbax's max_to_keep clean-up never touches it.
A checkpoint of a different run (another fingerprint) is not corruption but a wrong
--ckpt-dir: BadInput, and nothing is renamed.
"""

import gc
import itertools
import json
import logging
import sys
from pathlib import Path

import jax

from shared.errors import BadInput
from shared.paths import writable_folder

# The tensorstore status codes orbax passes on for damaged array files, in a few words.
_REASONS = {
    "NOT_FOUND": "array files missing",
    "OUT_OF_RANGE": "array files truncated",
    "DATA_LOSS": "array files damaged",
}


class _Unreadable(Exception):
    """A step orbax cannot restore; the message says why in a few words."""


def checkpoint_folder(directory: str) -> Path:
    """`directory` resolved and created; BadInput in one line where it cannot be written. A
    run checks it before tokenizing and compiling, and Checkpoints again when it opens it."""
    return writable_folder(
        Path(directory).resolve(), what="checkpoints", fix="pass a writable --ckpt-dir"
    )


class Checkpoints:
    """orbax checkpoints of (params, opt_state) plus a JSON record of step, data position and
    the run's fingerprint; a context manager that closes orbax's threads on the way out."""

    def __init__(self, directory: str, fingerprint: dict):
        import orbax.checkpoint as ocp

        self.ocp = ocp
        self.directory = checkpoint_folder(directory)
        self.fingerprint = fingerprint
        self._abandoned = _AbandonedReads()
        options = ocp.CheckpointManagerOptions(
            max_to_keep=2, create=True, enable_async_checkpointing=False
        )
        self.manager = ocp.CheckpointManager(self.directory, options=options)

    def __enter__(self) -> "Checkpoints":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def save(self, step: int, params, opt_state) -> None:
        if step in self.manager.all_steps():
            return
        ocp = self.ocp
        meta = {"step": step, "data_position": step, "fingerprint": self.fingerprint}
        self.manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave({"params": params, "opt_state": opt_state}),
                meta=ocp.args.JsonSave(meta),
            ),
        )
        self.manager.wait_until_finished()

    def close(self) -> None:
        """Join orbax's background threads, so none is still running at interpreter exit (a
        thread inside C++ then is unwound by CPython and aborts the process)."""
        self.manager.close()
        self._abandoned.stop()

    def resume(self, params, opt_state):
        """(params, opt_state, data position) of the newest step that restores, into the given
        arrays' shardings; the given ones and 0 when there is none. Unreadable newer steps are
        renamed aside and reported in one line (see the module docstring)."""
        unreadable, found = [], None
        for step in sorted(self.manager.all_steps(), reverse=True):
            try:
                found = step, self.restore(step, params, opt_state)
                break
            except _Unreadable as err:
                unreadable.append((step, str(err)))
        if unreadable:
            steps = ", ".join(str(step) for step, _ in unreadable)
            reasons = "; ".join(dict.fromkeys(reason for _, reason in unreadable))
            kept = ", ".join(self._set_aside(step).name for step, _ in unreadable)
            self.manager.reload()
            then = (
                f"resuming from step {found[0]}"
                if found
                else "no earlier step is valid: starting fresh"
            )
            print(
                f"warning: checkpoint step{'s' * (len(unreadable) > 1)} {steps} in "
                f"{self.directory} cannot be restored ({reasons}); kept as {kept}; {then}",
                file=sys.stderr,
                flush=True,
            )
        return found[1] if found else (params, opt_state, 0)

    def restore(self, step: int, params, opt_state):
        """(params, opt_state, data position) from checkpoint `step`, into the given arrays'
        shardings. BadInput if another run wrote it; _Unreadable if orbax cannot read it."""
        ocp = self.ocp
        meta = self._read(step, meta=ocp.args.JsonRestore()).meta
        if meta.get("fingerprint") != self.fingerprint:
            raise BadInput(
                f"checkpoint {self.directory / str(step)} was written by a different "
                f"run ({meta.get('fingerprint')}); use another --ckpt-dir to start "
                "fresh"
            )
        abstract = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
            {"params": params, "opt_state": opt_state},
        )
        state = self._read(step, state=ocp.args.StandardRestore(abstract)).state
        return state["params"], state["opt_state"], meta["data_position"]

    def _read(self, step: int, **items):
        """orbax's restore of some items of `step`, quietly; any failure -> _Unreadable."""
        self._abandoned.start()
        absl = logging.getLogger("absl")  # orbax logs through absl
        level = absl.level
        absl.setLevel(logging.CRITICAL)
        try:
            return self.manager.restore(step, args=self.ocp.args.Composite(**items))
        except Exception as err:  # orbax raises many types for unreadable or mismatched files
            gc.collect()  # the abandoned reads' tasks report now, while they are muted
            self._abandoned.left_behind = True
            raise _Unreadable(_reason(err)) from None
        finally:
            absl.setLevel(level)

    def _set_aside(self, step: int) -> Path:
        """Rename step's folder to a free `<step>.corrupt[-n]` (process 0; others wait)."""
        source = self.directory / str(step)
        for n in itertools.count(1):
            target = source.with_name(f"{step}.corrupt" + (f"-{n}" if n > 1 else ""))
            if not target.exists():
                break
        if jax.process_index() == 0:
            source.rename(target)
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices(f"checkpoint {step} set aside")
        return target


class _AbandonedReads:
    """Mutes what a failed restore leaves behind, from the first restore until `close`.

    orbax stops at the first array that fails and closes its event loop while tensorstore is
    still reading the others. Each of those then reports "Event loop is closed" through
    sys.unraisablehook, and each abandoned task logs "Task exception was never retrieved" on
    the asyncio logger when it is collected: a traceback apiece, during the restore and after
    it has returned. Exactly those are dropped; everything else still reaches the hook and
    the log. Once a restore has failed, `stop` leaves the muting in place for the rest of the
    process: tensorstore may still hold an abandoned task when the run closes its checkpoints,
    and under load one was collected after that (a CI run printed its traceback).
    """

    def __init__(self):
        self.previous = None  # the unraisable hook to put back
        self.left_behind = False  # a failed restore left tasks that may report until exit

    def start(self) -> None:
        if self.previous is None:
            self.previous, sys.unraisablehook = sys.unraisablehook, self._hook
            logging.getLogger("asyncio").addFilter(self._keep)

    def stop(self) -> None:
        if self.previous is not None and not self.left_behind:
            sys.unraisablehook, self.previous = self.previous, None
            logging.getLogger("asyncio").removeFilter(self._keep)

    def _hook(self, unraisable) -> None:
        err = unraisable.exc_value
        if not (isinstance(err, RuntimeError) and str(err) == "Event loop is closed"):
            (self.previous or sys.__unraisablehook__)(unraisable)

    @staticmethod
    def _keep(record: logging.LogRecord) -> bool:
        """False for an abandoned orbax task's report (its coroutine is orbax's)."""
        message = record.getMessage()
        return not (message.startswith("Task exception was never retrieved") and "orbax" in message)


def _reason(err: Exception) -> str:
    """Why a restore failed, in a few words: tensorstore's status code, a metadata file that
    is not JSON, else the start of the error's message."""
    if isinstance(err, json.JSONDecodeError):
        return "metadata files damaged"
    text = " ".join(str(err).split())
    return _REASONS.get(text.partition(":")[0]) or f"{type(err).__name__}: {text[:80]}"
