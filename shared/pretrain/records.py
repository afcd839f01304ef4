"""What a training run writes and listens to beside its step: JSON metrics lines that survive
a resume, the wandb run, and SIGTERM as a request to checkpoint and stop. Kept apart from
`shared.pretrain.train`, which owns the step, the state and the loop."""

import json
import os
import signal
from pathlib import Path

from shared.paths import writable_folder


def metrics_folder(path: str | Path) -> Path:
    """The metrics file's folder, created; BadInput in one line where it cannot be written. A
    run checks it before tokenizing and compiling, and Metrics again when it opens the file."""
    return writable_folder(
        Path(path).parent, what="the metrics file", fix="pass a writable --metrics"
    )


class Metrics:
    """Per-step JSON lines; on resume, lines past the restored step (and the final evaluation
    line, rewritten at the end) are dropped first, so a resumed run's file equals an
    uninterrupted run's but for the timing columns."""

    def __init__(self, path: str | None, resume_step: int):
        self.path = Path(path) if path else None
        if self.path is None:
            return
        metrics_folder(self.path)
        kept = []
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:  # a line cut short by a kill
                    continue
                if record.get("step", 0) <= resume_step and not record.get("final"):
                    kept.append(line)
        self.path.write_text("".join(f"{line}\n" for line in kept))

    def write(self, record: dict) -> None:
        if self.path is not None:
            with self.path.open("a") as handle:
                handle.write(json.dumps(record) + "\n")


def wandb_run(project: str, group: str | None, tags, config: dict):
    """A wandb run when WANDB_MODE allows, else None. Default offline (syncable later with
    `wandb sync`), except under a sweep agent, whose runs must report val_loss online."""
    mode = os.environ.get("WANDB_MODE") or (
        "online" if os.environ.get("WANDB_SWEEP_ID") else "offline"
    )
    if mode == "disabled":
        return None
    import wandb

    return wandb.init(
        project=project,
        group=group,
        tags=list(tags),
        mode=mode,
        reinit="finish_previous",
        config=config,
    )


class Preemption:
    """SIGTERM (a preempted VM, `kill`) asks the loop to checkpoint and stop after this step."""

    def __init__(self):
        self.requested = False
        self.previous = None

    def __enter__(self):
        try:
            self.previous = signal.signal(signal.SIGTERM, self._handle)
        except ValueError:  # not the main thread: no handler, no preemption checkpoint
            self.previous = None
        return self

    def _handle(self, signum, frame):
        self.requested = True

    def __exit__(self, *exc):
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)
