"""Notebook 05's hyper-parameter sweep: one wandb sweep config, run by wandb or locally.

- `config`: wandb's YAML sweep config read, checked and expanded into trials;
- `runner`: each trial a `python -m shared.pretrain.train` process (wandb agent or local),
  restartable; `python -m shared.sweep` is its command line;
- `results`: the trials read back: the best lr / wd, the basin, whether the best is at an edge;
- `settings`: notebook 05's setting (`HparamSweep`, `local()` and `field()` presets).

`from shared import sweep; sweep.run(...)`: the names below are the package's API.
"""

from shared.sweep.config import arm, expand, load_config, search_space, sweep_name
from shared.sweep.results import read_curve, recommend, usable
from shared.sweep.runner import has_wandb_account, main, run, run_local, run_wandb

__all__ = [
    "arm",
    "expand",
    "has_wandb_account",
    "load_config",
    "main",
    "read_curve",
    "recommend",
    "run",
    "run_local",
    "run_wandb",
    "search_space",
    "sweep_name",
    "usable",
]
