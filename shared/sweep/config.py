"""Notebook 05's sweep config: wandb's YAML form, checked, and expanded into trials locally.

The sweep is a wandb sweep config in wandb's own YAML form (`notebooks/05_sweep.yaml`):
method, metric, parameters and the command that runs one trial (`python -m shared.pretrain.train
${args}`). wandb's sweep server reads the same file; this module is what the local runner
(`shared.sweep`) needs without that server:

- `load_config` / `validate`: one actionable line for a config that neither runner could use
  (unknown method or distribution, no metric, a command that never passes the parameters).
- `expand`: grid = cartesian product of the `values`; random = seeded draws from wandb's
  distributions; bayes -> random with a note. The same arguments give the same trials, so a
  restarted sweep recognises the finished ones by `trial_id`, a hash of a trial's parameters.
- `trial_command`: the config's command with wandb's macros filled in as `wandb agent` does;
  `check_train_args` fails a misspelled parameter once, before any trial runs.

`NOTEBOOK_05` is notebooks/05_sweep.yaml as a dict, shipped with the package: a pip install
without the repository (Colab, Kaggle) has no notebooks/ folder, and setuptools packages no YAML
here, so notebook 05 runs this copy; the YAML stays what `wandb sweep` reads. The two must stay
equal: notebook 05 says so when it finds the YAML.
"""

import contextlib
import copy
import hashlib
import io
import itertools
import json
import math
import sys
from pathlib import Path

import numpy as np
import yaml

from shared.errors import BadInput, positive

METHODS = ("grid", "random", "bayes")
GOALS = ("minimize", "maximize")
# The wandb distributions the local runner samples (wandb also has normal, beta and their
# variants; a config using those runs on the wandb server only). `log_uniform` takes natural-
# log bounds, `log_uniform_values` the values themselves.
DISTRIBUTIONS = (
    "constant",
    "categorical",
    "int_uniform",
    "uniform",
    "q_uniform",
    "log_uniform",
    "log_uniform_values",
    "q_log_uniform_values",
)
GRID_DISTRIBUTIONS = ("constant", "categorical", "int_uniform", "q_uniform")
# shared.pretrain.train's architecture knobs: those fixed in a sweep name its ablation arm.
ARM_KNOBS = ("mlp", "qk-norm", "tied", "embed-norm", "logit-softcap")
SIGNIFICANT_DIGITS = 4  # sampled floats are rounded so trial ids and arguments stay readable

NOTEBOOK_05 = {  # = notebooks/05_sweep.yaml (its comments say what each entry means)
    "name": "05-lr-wd",
    "description": "Held-out loss against peak learning rate and weight decay for one arm.",
    "project": "tpu-budget-lab",
    "program": "shared/pretrain/train.py",
    "command": [
        "${env}",
        "${interpreter}",
        "-m",
        "shared.pretrain.train",
        "${args}",
        "--no-progress",
    ],
    "method": "grid",
    "metric": {"name": "val_loss", "goal": "minimize"},
    "parameters": {
        "lr": {"values": [1.0e-4, 3.0e-4, 1.0e-3, 3.0e-3, 1.0e-2, 3.0e-2, 1.0e-1]},
        "wd": {"values": [0.0, 0.1]},
        "mlp": {"value": "swiglu"},
        "qk-norm": {"value": False},
        "config": {"value": "tiny"},
        "steps": {"value": 30},
        "batch": {"value": 8},
        "seq": {"value": 128},
        "warmup": {"value": 3},
        "vocab-size": {"value": 4096},
        "seed": {"value": 0},
    },
}


# ---------------------------------------------------------------------------- the config


def load_config(path: str | Path | dict, overrides: dict | None = None) -> dict:
    """Read and check a sweep YAML, or a config dict (NOTEBOOK_05; copied, never changed);
    `overrides` pin parameters to fixed values (steps=20)."""
    if isinstance(path, dict):
        config, source = copy.deepcopy(path), str(path.get("name") or "sweep config")
    else:
        config, source = _read_yaml(Path(path)), str(path)
    for name, value in (overrides or {}).items():
        config["parameters"][name] = {"value": value}
    return validate(config, source=source)


def _read_yaml(path: Path) -> dict:
    try:
        config = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise BadInput(f"sweep config {path} not found") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise BadInput(
            f"{path} is not valid YAML ({getattr(err, 'problem', None) or err}{where})"
        ) from None
    if not isinstance(config, dict) or not isinstance(config.get("parameters"), dict):
        raise BadInput(f"{path}: a sweep config is a mapping with `parameters:` (wandb's form)")
    return config


def validate(config: dict, source: str = "sweep config") -> dict:
    """Check what both runners need: method, metric, parameters, a command that passes them."""
    from wandb.sdk.launch.sweeps.utils import DEFAULT_SWEEP_COMMAND

    if config.get("method") not in METHODS:
        raise BadInput(
            f"{source}: unknown sweep method {config.get('method')!r}; valid: {', '.join(METHODS)}"
        )
    metric = config.get("metric")
    if not isinstance(metric, dict) or not metric.get("name"):
        raise BadInput(
            f"{source}: `metric:` is missing; e.g. metric: {{name: val_loss, goal: minimize}}"
        )
    if metric.get("goal", "minimize") not in GOALS:
        raise BadInput(
            f"{source}: unknown metric goal {metric['goal']!r}; valid: {', '.join(GOALS)}"
        )
    if not config["parameters"]:
        raise BadInput(f"{source}: `parameters:` is empty")
    for name, spec in config["parameters"].items():
        kind = parameter_kind(name, spec)
        if config["method"] == "grid" and kind not in GRID_DISTRIBUTIONS:
            raise BadInput(
                f"{source}: grid search needs `values` (or int_uniform/q_uniform) for "
                f"{name!r}, which has distribution {kind}; use method random"
            )
    command = [str(c) for c in config.get("command") or DEFAULT_SWEEP_COMMAND]
    if "${program}" in command and not config.get("program"):
        raise BadInput(f"{source}: the command runs ${{program}} but `program:` is missing")
    if not any(c.startswith("${args") for c in command):
        raise BadInput(f"{source}: the command never passes the trial's parameters; add ${{args}}")
    return config


def parameter_kind(name: str, spec) -> str:
    """The wandb distribution a parameter spec means (`value` -> constant, `values` ->
    categorical, min/max without a distribution -> int_uniform or uniform, as wandb infers)."""
    if not isinstance(spec, dict):
        raise BadInput(
            f"parameter {name!r}: expected a mapping like {{value: 3}}, "
            f"{{values: [1, 2]}} or {{distribution: uniform, min: 0, max: 1}}"
        )
    if "value" in spec:
        return "constant"
    if "values" in spec:
        if not isinstance(spec["values"], list) or not spec["values"]:
            raise BadInput(f"parameter {name!r}: `values` must be a non-empty list")
        return "categorical"
    if "min" not in spec or "max" not in spec:
        raise BadInput(f"parameter {name!r} needs `value`, `values`, or min and max")
    lo, hi = spec["min"], spec["max"]
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (lo, hi)):
        raise BadInput(
            f"parameter {name!r}: min and max must be numbers, got {lo!r}, {hi!r}"
            " (YAML reads 3e-4 as text: write 3.0e-4)"
        )
    ints = isinstance(lo, int) and isinstance(hi, int)
    kind = spec.get("distribution") or ("int_uniform" if ints else "uniform")
    if kind not in DISTRIBUTIONS:
        raise BadInput(
            f"parameter {name!r}: unknown distribution {kind!r}; valid here: "
            f"{', '.join(DISTRIBUTIONS)} (wandb's others run on its server only)"
        )
    if kind in ("constant", "categorical"):
        raise BadInput(f"parameter {name!r}: distribution {kind} needs `value`/`values`")
    if lo > hi:
        raise BadInput(f"parameter {name!r}: min {lo} is above max {hi}")
    if kind in ("log_uniform_values", "q_log_uniform_values") and lo <= 0:
        raise BadInput(f"parameter {name!r}: {kind} needs min > 0, got {lo}")
    return kind


def search_space(config: dict) -> list[dict]:
    """One row per parameter: its kind and its values or range, for a table."""
    rows = []
    for name, spec in config["parameters"].items():
        kind = parameter_kind(name, spec)
        values = (
            spec["value"]
            if kind == "constant"
            else spec["values"]
            if kind == "categorical"
            else f"[{spec['min']}, {spec['max']}]"
        )
        rows.append({"parameter": name, "kind": kind, "values": values})
    return rows


def sweep_name(config: dict) -> str:
    return str(config.get("name") or "sweep")


def arm(config: dict) -> str:
    """The ablation arm: the architecture knobs the sweep fixes, e.g. 'mlp=swiglu+qk-norm=False'."""
    params = config["parameters"]
    fixed = [f"{k}={params[k]['value']}" for k in ARM_KNOBS if "value" in params.get(k, {})]
    return "+".join(fixed) or "default-arm"


def search_bounds(config: dict, name: str) -> tuple[float, float] | None:
    """The searched range of a parameter: its min/max, or its smallest and largest value."""
    spec = config["parameters"].get(name)
    if spec is None:
        return None
    kind = parameter_kind(name, spec)
    if kind == "constant":
        return spec["value"], spec["value"]
    if kind == "categorical":
        return min(spec["values"]), max(spec["values"])
    if kind == "log_uniform":
        return math.exp(spec["min"]), math.exp(spec["max"])
    return spec["min"], spec["max"]


# ---------------------------------------------------------------------------- trials


def trial_id(params: dict) -> str:
    """A stable name for a trial: the same parameters always give the same id."""
    return hashlib.sha1(json.dumps(params, sort_keys=True).encode()).hexdigest()[:10]


def _round(x: float) -> float:
    return float(f"{x:.{SIGNIFICANT_DIGITS}g}")


def _grid_values(name: str, spec: dict) -> list:
    kind = parameter_kind(name, spec)
    if kind == "constant":
        return [spec["value"]]
    if kind == "categorical":
        return list(spec["values"])
    if kind == "int_uniform":
        return list(range(spec["min"], spec["max"] + 1))
    q = spec.get("q", 1)
    count = int(math.floor((spec["max"] - spec["min"]) / q + 1e-9)) + 1
    return [_quantised(spec["min"] + i * q, spec) for i in range(count)]


def _quantised(x: float, spec: dict):
    q = spec.get("q", 1)
    value = round(x / q) * q
    return (
        int(value)
        if all(isinstance(spec.get(k, 1), int) for k in ("min", "max", "q"))
        else _round(value)
    )


def sample(name: str, spec: dict, rng: np.random.Generator):
    """One draw from a parameter, with wandb's meaning of each distribution."""
    kind = parameter_kind(name, spec)
    if kind == "constant":
        return spec["value"]
    if kind == "categorical":
        return spec["values"][int(rng.integers(len(spec["values"])))]
    lo, hi = spec["min"], spec["max"]
    if kind == "int_uniform":
        return int(rng.integers(lo, hi + 1))
    if kind == "uniform":
        return _round(rng.uniform(lo, hi))
    if kind == "q_uniform":
        return _quantised(rng.uniform(lo, hi), spec)
    if kind == "log_uniform":
        return _round(math.exp(rng.uniform(lo, hi)))
    value = math.exp(rng.uniform(math.log(lo), math.log(hi)))
    return _round(value) if kind == "log_uniform_values" else _quantised(value, spec)


def trial_count(config: dict, count: int | None) -> int | None:
    """How many trials a sweep runs: `count` where given, else the config's run_cap (None:
    neither). A count of 0 is BadInput, not "none given" (it ran the whole grid)."""
    positive(count=count)
    return count or config.get("run_cap")


def expand(config: dict, count: int | None = None, seed: int = 0) -> list[dict]:
    """The trials the local runner runs, in order: a restart with the same arguments (or a
    larger count) repeats them, so finished ones are recognised and skipped."""
    params = config["parameters"]
    count = trial_count(config, count)
    if config["method"] == "grid":
        axes = [_grid_values(name, spec) for name, spec in params.items()]
        trials = [dict(zip(params, combo, strict=True)) for combo in itertools.product(*axes)]
        return trials[:count] if count else trials
    if config["method"] == "bayes":
        print(
            f"note: bayes search needs the wandb sweep server; sampling at random instead "
            f"(seed {seed})"
        )
    if not count:
        raise BadInput("random search needs a trial count: --count N, or run_cap in the config")
    rng = np.random.default_rng(seed)
    trials, seen = [], set()
    for _ in range(100 * count):  # a small discrete space runs out of distinct trials
        trial = {name: sample(name, spec, rng) for name, spec in params.items()}
        if (tid := trial_id(trial)) not in seen:
            seen.add(tid)
            trials.append(trial)
        if len(trials) == count:
            break
    if len(trials) < count:
        print(f"note: the search space holds only {len(trials)} distinct trials")
    return trials


def trial_command(config: dict, params: dict) -> list[str]:
    """The config's command with wandb's macros filled in as `wandb agent` fills them, except
    ${interpreter} (this Python, not the first `python` on PATH) and ${env} (dropped: the
    environment is passed directly)."""
    from wandb.sdk.launch.sweeps.utils import (
        DEFAULT_SWEEP_COMMAND,
        create_sweep_command,
        create_sweep_command_args,
    )

    macros = create_sweep_command_args({"args": {k: {"value": v} for k, v in params.items()}})
    macros.pop("args_dict")  # a dict, not command words
    macros.update(env=[], interpreter=[sys.executable], program=[str(config.get("program"))])
    command = []
    for part in create_sweep_command(list(config.get("command") or DEFAULT_SWEEP_COMMAND)):
        part = str(part)
        if part.startswith("${") and part.endswith("}"):
            if part[2:-1] not in macros:
                raise BadInput(
                    f"the sweep command's {part} is not supported locally; valid: "
                    + ", ".join(f"${{{m}}}" for m in macros)
                )
            command += macros[part[2:-1]]
        else:
            command.append(part)
    return command


def check_train_args(command: list[str]) -> None:
    """A misspelled parameter fails here, once, instead of in every trial."""
    if "shared.pretrain.train" not in command:
        return
    from shared.pretrain import config as train_config

    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            train_config.parse_args(command[command.index("shared.pretrain.train") + 1 :])
    except SystemExit:
        reason = (stderr.getvalue().strip().splitlines() or ["bad arguments"])[-1]
        raise BadInput(
            f"shared.pretrain.train rejects the sweep's parameters ({reason}); parameter "
            "names are its flags without the dashes"
        ) from None


# ---------------------------------------------------------------------------- overrides


def parse_overrides(items: list[str]) -> dict:
    """`steps=20 qk-norm=true lr=3e-4` -> {'steps': 20, 'qk-norm': True, 'lr': 0.0003}."""
    overrides = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise BadInput(f"--set takes NAME=VALUE pairs, got {item!r}")
        for cast in (int, float):
            try:
                overrides[name] = cast(text)
                break
            except ValueError:
                pass
        else:
            overrides[name] = yaml.safe_load(text) if text else ""
    return overrides
